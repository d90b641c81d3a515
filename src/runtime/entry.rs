//! The Worker's fetch handler: the edge in front of the origin.
//!
//! Owns the request's way to its key's object. For a covered request (POST, PATCH) it:
//! 1. loads the configuration (an invalid variable is a 500 naming it; nothing forwarded);
//! 2. parses the key, from `Idempotency-Key` or the route's `key_header` (400 when missing
//!    or malformed);
//! 3. reads the body up to `MAX_BODY_BYTES`, counting a streamed body as it arrives and
//!    never trusting `Content-Length` alone (413 above it);
//! 4. computes the scope (`identity`: 401 when a credential is missing, or a required
//!    token does not verify), the object name and the fingerprint;
//! 5. hands the object the origin URL, the end-to-end headers, the body bytes, the
//!    fingerprint and the timing, so the object repeats none of this work.
//!
//! Rejections in steps 1–3 happen before any object exists, and so does the rate limit
//! (`runtime::rate_limit`: 429 with `Retry-After`).
//!
//! Every forward the Worker makes itself (pass-through and fail-open) is signed like the
//! object's (`ORIGIN_AUTH_SECRET`, `runtime::origin_auth`), and with `TRUSTED_CLIENT_IP`
//! the client's own `X-Forwarded-For`, `Forwarded` and `X-Real-IP` are replaced by the
//! connecting IP. With `OBJECT_NAME_KEY` the object name is keyed (`core::keyed_name`). Any other method passes
//! through to the origin untouched, except that a method-override header on it is refused
//! (the origin might execute it as a covered method without a key). On a method that a
//! route could cover, a path that origins may read as another path is refused, and route
//! patterns match the normalised path (`core::url::normalised_path`).
//!
//! If the object cannot be reached, the answer is 503 and nothing is forwarded. A route with
//! `on_object_unavailable: "fail-open"` forwards without protection only when the request
//! provably never left the Worker: the stub could not be made, or the call threw before it
//! was sent (`core::routes::after_object_failure`). Any other failure is 503 on every route:
//! a running object that dies may have sent the request on, and an `overloaded` object is
//! one whose key's duplicates already run or ran (failing open would execute a retry storm). A missing binding or an
//! unsupported jurisdiction is a configuration error: 500 everywhere.
//!
//! On a route in observe mode (`MODE`, route option `mode`), every refusal above becomes a
//! log line instead, and the request goes to the origin exactly as it came (`observe`).
//! With `ORIGIN_SERVICE` (or a route's `origin_service`) the origin is another Worker,
//! reached through that service binding, for every method; a missing binding is 500.

//!
//! It works on the runtime's own `Request` and `Response` objects (`web_sys`), and reads of
//! a request only what a decision needs.

use std::panic::AssertUnwindSafe;

use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use web_sys::{Headers, Request, RequestInit, RequestRedirect, Response};

use super::boundary::{filtered_copy, header_lines};
use super::forward::{self, pass_through, replace_client_ip};
use super::identity::{identify, Identified};
use super::object_call::{cached_key_namespace, call_object, OBJECT_BINDING};
use super::platform::{console_error, describe, Context, Env, Result};
use super::{admin, body, metrics, observe, random_u64, rate_limit, respond, settings};
use crate::core::async_job::prefers_respond_async;
use crate::core::config::{Config, PanicSite, Policy, PANIC_TEST_HEADER};
use crate::core::edge::{self, Edge, RequestHead};
use crate::core::headers::{connection_tokens, forward_to_origin, HeaderLines};
use crate::core::key::IdempotencyKey;
use crate::core::log::{request_id, Decision, LineContext, RequestLog, Trace};
use crate::core::routes::{
    after_object_failure, object_unreachable, AfterObjectFailure, Mode, ObjectCallFailure, Unavailable,
};
use crate::core::scope::rate_limit_keys;
use crate::core::url::{path_and_query, path_and_query_parts};
use crate::core::wire::{KeyCall, KeyStep, ReconcileCall, ToObject, ENVELOPE_HEADER};

/// The Worker's `fetch`, as `src/entry.mjs` calls it. An error that reaches here is logged
/// and answered 500 with a plain body, as `worker`'s `#[event(fetch)]` answered it.
#[wasm_bindgen(js_name = fetch)]
pub async fn fetch_export(req: Request, env: JsValue, ctx: JsValue) -> std::result::Result<JsValue, JsValue> {
    AssertUnwindSafe(async move {
        match fetch(req, Env::new(env), Context::new(ctx)).await {
            Ok(response) => Ok(JsValue::from(response)),
            Err(error) => {
                console_error!("{}", error);
                let init = web_sys::ResponseInit::new();
                init.set_status(500);
                Ok(JsValue::from(Response::new_with_opt_str_and_init(Some("INTERNAL SERVER ERROR"), &init)?))
            }
        }
    })
    .await
}

async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let method = req.method();
    // The headers, read whole in one call: every decision below reads this copy.
    let lines = header_lines(&req.headers())?;
    // Which request this is, on every log line and problem it gets (`core::log::Trace`).
    let request_id = request_id(lines.get("cf-ray").as_deref(), random_u64);
    let mut trace = Trace { request_id, method: method.clone(), route: None };
    let settings = settings::get(&env);
    if settings.fault_injection.panics_at(|| lines.get(PANIC_TEST_HEADER), PanicSite::Worker) {
        panic!("PANIC_FAULT_INJECTION: the Worker panics on purpose");
    }
    let config = match settings.serving_config() {
        Ok(config) => config,
        Err(error) => return respond::refused(&env, &error.problem(), &trace),
    };
    let url = req.url();
    let (path, _) = path_and_query_parts(&url);
    let read_header = |name: &str| Ok(lines.get(name));
    let head = RequestHead {
        method: &method,
        path,
        admin_enabled: settings.admin_token.is_some(),
        header: &read_header,
    };
    // Where the request goes is the core's decision (`core::edge`); each arm carries it out.
    let edge = edge::decide(&head, config, |name| env.service(name).is_ok());
    if let Edge::PassThrough(policy) | Edge::PassObserved(policy, _) | Edge::Covered { policy, .. } = &edge {
        trace.route = policy.route.map(str::to_owned);
    }
    match edge {
        Edge::Admin => {
            let token = settings.admin_token.as_deref().unwrap_or_default();
            admin::call(req, &url, &env, config, token).await
        }
        Edge::Refuse(problem) => {
            body::discard(&req).await;
            respond::refused(&env, &problem, &trace)
        }
        Edge::PassThrough(policy) => pass_through(req, &url, &env, config, &policy, &trace).await,
        Edge::PassObserved(policy, kind) => {
            observe::passed(req, &url, &env, config, &policy, kind, &trace).await
        }
        Edge::Covered { policy, key } if policy.mode == Mode::Observe => {
            observe::covered(req, &url, &env, &ctx, config, &policy, key, trace).await
        }
        Edge::Covered { policy, key } => {
            covered(req, &lines, &url, &env, &ctx, config, &policy, key, trace).await
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn covered(
    req: Request,
    lines: &HeaderLines,
    url: &str,
    env: &Env,
    ctx: &Context,
    config: &Config,
    policy: &Policy<'_>,
    key: IdempotencyKey,
    trace: Trace,
) -> Result<Response> {
    let method = trace.method.as_str();
    let declared_length = lines.get("content-length");
    let Some((body, js_body)) =
        body::read_within(&req, declared_length.as_deref(), config.max_body_bytes).await?
    else {
        return respond::refused(env, &edge::body_too_large(config.max_body_bytes), &trace);
    };

    let path_and_query = path_and_query(url);
    let settings = settings::get(env);
    let name_key = settings.object_name_key.as_deref();
    let identified =
        identify(lines, method, &path_and_query, &key, config, policy, &body, name_key, Some(ctx)).await;
    let Identified { fingerprint, name, scope_salt, scope_log } = match identified {
        Ok(identified) => identified,
        Err(problem) => return respond::refused(env, &problem, &trace),
    };
    let body_bytes = body.len();
    drop(body);
    let client_ip = lines.get("cf-connecting-ip");
    let limit_keys = rate_limit_keys(scope_log.kind, &scope_salt.to_hex(), client_ip.as_deref());
    if let Some(answer) = rate_limit::refusal(env, policy.rate_limiter, &limit_keys, &trace).await {
        return answer;
    }

    let tokens = connection_tokens(lines.get("connection").as_deref());
    let outgoing = filtered_copy(&req.headers(), lines, |name| forward_to_origin(name, &tokens))?;
    if settings.trusted_client_ip {
        replace_client_ip(&outgoing)?;
    }
    // The target and the end-to-end headers, kept for a fail-open forward.
    let target = config.target_for(policy, url, &path_and_query);
    let unprotected = (policy.on_unavailable == Unavailable::FailOpen)
        .then(|| Headers::new_with_headers(&outgoing).map(|headers| (target.clone(), headers)))
        .transpose()?;
    // Everything the object needs, in one envelope (`core::wire`), the asynchronous
    // settings (`core::async_job`) included when the request prefers `respond-async`.
    let accept_async = policy.async_accept.filter(|_| prefers_respond_async(lines.get("prefer").as_deref()));
    let call = ToObject::Key(KeyCall {
        fingerprint,
        scope_salt,
        scope: scope_log,
        policy: config.object_policy(policy),
        body_bytes: body_bytes as u64,
        probe_origin: config.probes_origin(policy),
        step: KeyStep::Enforce { accept_async },
        trace: trace.clone(),
        reconcile: policy.reconcile.map(|route| ReconcileCall {
            url: route.url_for(key.as_str()),
            not_found: route.not_found,
            scope_headers: config.scope.lookup_headers(),
        }),
    });
    outgoing.set(ENVELOPE_HEADER, &call.encode())?;
    let wire_method = edge::method_on_the_wire(method);
    // One JavaScript copy of the body serves the object call and a fail-open forward.
    let init = RequestInit::new();
    init.set_method(wire_method);
    init.set_headers(&outgoing);
    init.set_body(&js_body);
    // The object's answer is the caller's, a redirect included: following its `Location`
    // would send the request to the object again (and again), and end in a 503.
    init.set_redirect(RequestRedirect::Manual);
    // The object's request URL is where the first attempt goes.
    let to_object = Request::new_with_str_and_init(&target, &init)?;
    // The request holds its own copy of the body; keep this one only for a fail-open
    // forward, so that a waiting duplicate holds no second copy.
    let js_body = unprotected.is_some().then_some(js_body);

    let namespace = match cached_key_namespace(env, config.jurisdiction.as_deref()) {
        Ok(namespace) => namespace,
        Err(error) => {
            console_error!("configuration: the Durable Object namespace is unusable: {}", error);
            return respond::refused(env, &edge::namespace_unusable(OBJECT_BINDING), &trace);
        }
    };
    // The object name is a hash: safe to log, unlike the key or the credential.
    let short = &name[..16];
    let (failure, error) = match namespace.get_by_name(&name) {
        Err(error) => (ObjectCallFailure::BeforeSend, describe(error)),
        Ok(stub) => match call_object(stub, &to_object).await {
            Ok(response) => return Ok(response),
            Err(failure) => failure,
        },
    };
    match (after_object_failure(failure, policy.on_unavailable), unprotected, js_body) {
        (AfterObjectFailure::FailOpen, Some((target, headers)), Some(js_body)) => {
            // The route chose availability over protection, and the object never had the
            // request, so nothing can have been sent for this attempt.
            console_error!(
                "object {}: not reached ({}); failing open, forwarding without protection",
                short,
                error
            );
            let answer = forward::fail_open(env, policy, wire_method, &target, &headers, &js_body).await;
            let status = answer.as_ref().map_or(500, Response::status);
            let log = RequestLog::new(Some(short.to_owned()), Decision::FailedOpen, status, Some(scope_log));
            metrics::record_in(env, &log, LineContext { trace: Some(&trace), ..LineContext::default() });
            answer
        }
        (decision, _, _) => {
            console_error!("object {}: unavailable ({:?}): {}", short, failure, error);
            let problem = match decision {
                AfterObjectFailure::Refuse(problem) => problem,
                // A fail-open decision always has its forward at hand (see `unprotected`).
                AfterObjectFailure::FailOpen => object_unreachable(),
            };
            respond::refused(env, &problem, &trace)
        }
    }
}
