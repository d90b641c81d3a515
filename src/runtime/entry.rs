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
//! (`RATE_LIMITER`, a Workers Rate Limiting binding; keyed as `core::scope::rate_limit_keys`
//! says: a verified claim's scope, a credential's scope and `CF-Connecting-IP` both, an
//! anonymous caller's IP; 429 with `Retry-After` over any of them).
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
//! It works on the runtime's own `Request` and `Response` objects (`web_sys`), not on
//! `worker::Request`, which reads the method, the URL, the headers and `request.cf` for
//! every request whether they are needed or not.

use std::cell::OnceCell;

use futures_util::StreamExt;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use worker::web_sys::{self, Headers, Request, RequestInit, RequestRedirect, Response, ResponseInit};
use worker::{console_error, event, ByteStream, Context, Env, ObjectNamespace, Result, Stub};

use super::{admin, identity, metrics, observe, origin_auth, random_u64, respond, settings};
use crate::core::async_job::prefers_respond_async;
use crate::core::config::{Config, PanicSite, Policy, RateLimiterChoice, PANIC_TEST_HEADER};
use crate::core::edge::{self, Edge, RequestHead};
use crate::core::fingerprint::{bound_to_caller, fingerprint, object_name, Digest256, Payload};
use crate::core::headers::{connection_tokens, forward_to_origin};
use crate::core::key::IdempotencyKey;
use crate::core::keyed_name::keyed_object_name;
use crate::core::log::{request_id, Decision, LineContext, RequestLog, Trace};
use crate::core::origin_auth::{Protection, SIGNATURE_HEADER};
use crate::core::problem::Problem;
use crate::core::routes::{
    after_object_failure, object_unreachable, AfterObjectFailure, Mode, ObjectCallFailure, Unavailable,
};
use crate::core::scope::{caller_binding, rate_limit_keys, ScopeLog};
use crate::core::url::{path_and_query, path_and_query_parts};
use crate::core::wire::{Answered, KeyCall, KeyStep, ToObject, ANSWERED_HEADER, ENVELOPE_HEADER};

// `path_and_query` under another name, for where a local variable takes the name.
use crate::core::url::path_and_query as path_and_query_of;

/// The Durable Object namespace binding (wrangler.toml).
pub(super) const OBJECT_BINDING: &str = "IDEMPOTENCY_KEYS";

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let method = req.method();
    let headers = req.headers();
    // Which request this is, on every log line and problem it gets (`core::log::Trace`).
    let request_id = request_id(headers.get("cf-ray")?.as_deref(), random_u64);
    let mut trace = Trace { request_id, method: method.clone(), route: None };
    let settings = settings::get(&env);
    if settings.fault_injection.panics_at(|| headers.get(PANIC_TEST_HEADER).ok().flatten(), PanicSite::Worker)
    {
        panic!("PANIC_FAULT_INJECTION: the Worker panics on purpose");
    }
    let config = match settings.serving_config() {
        Ok(config) => config,
        Err(error) => return respond::refused(&env, &error.problem(), &trace),
    };
    let url = req.url();
    let (path, _) = path_and_query_parts(&url);
    let read_header = |name: &str| headers.get(name).map_err(|_| ());
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
            discard_body(&req).await;
            respond::refused(&env, &problem, &trace)
        }
        Edge::PassThrough(policy) => pass_through(req, &url, &env, config, &policy, &trace).await,
        Edge::PassObserved(policy, kind) => {
            observe::passed(req, &url, &env, config, &policy, kind, &trace).await
        }
        Edge::Covered { policy, key } if policy.mode == Mode::Observe => {
            observe::covered(req, &url, &env, &ctx, config, &policy, key, trace).await
        }
        Edge::Covered { policy, key } => covered(req, &url, &env, config, &policy, key, trace).await,
    }
}

/// Any uncovered method: to the origin as it is, body streamed, no key needed. When the
/// hop is signed, the body is read first (up to `MAX_BODY_BYTES`, 413 above) to digest it.
pub(super) async fn pass_through(
    req: Request,
    url: &str,
    env: &Env,
    config: &Config,
    policy: &Policy<'_>,
    trace: &Trace,
) -> Result<Response> {
    let settings = settings::get(env);
    let target = config.target_for(policy, url, &path_and_query(url));
    let untouched = settings.origin_auth_secret.is_none() && !settings.trusted_client_ip;
    if untouched && target == url {
        return origin_or_problem(send(env, policy.origin_service, &req).await);
    }
    // `new Request(url, request)`: the same method, headers and body stream, another URL.
    let init: &RequestInit = req.unchecked_ref();
    let mut forwarded = Request::new_with_str_and_init(&target, init)?;
    if settings.trusted_client_ip {
        replace_client_ip(&forwarded.headers())?;
    }
    if let Some(secret) = &settings.origin_auth_secret {
        let body = match forwarded.body() {
            None => None,
            Some(_) => {
                let headers = forwarded.headers();
                match read_body(&forwarded, &headers, config.max_body_bytes).await? {
                    Some((_, js_body)) => Some(js_body),
                    None => {
                        return respond::refused(env, &edge::body_too_large(config.max_body_bytes), trace)
                    }
                }
            }
        };
        let method = forwarded.method();
        // The key line is the route's key header, whatever its name.
        let key = forwarded.headers().get(policy.key_header.lowercase)?;
        let signed_path = path_and_query(&target);
        let passed = Protection::Passed;
        let signature = match origin_auth::signature(
            secret,
            &method,
            &signed_path,
            key.as_deref(),
            passed,
            body.as_ref(),
        )
        .await
        {
            Ok(signature) => signature,
            Err(_) => return origin_or_problem(Err(worker::Error::RustError("not signed".into()))),
        };
        let init = RequestInit::new();
        init.set_method(&method);
        init.set_headers(&forwarded.headers());
        init.set_redirect(forwarded.redirect());
        if let Some(body) = &body {
            init.set_body(body);
        }
        forwarded = Request::new_with_str_and_init(&target, &init)?;
        forwarded.headers().set(SIGNATURE_HEADER, &signature)?;
    }
    origin_or_problem(send(env, policy.origin_service, &forwarded).await)
}

/// `TRUSTED_CLIENT_IP`: the client's own forwarding headers are dropped, and the connecting
/// IP (`CF-Connecting-IP`, set by Cloudflare's edge and not by the client) takes their place.
pub(super) fn replace_client_ip(headers: &Headers) -> Result<()> {
    let connecting = headers.get("cf-connecting-ip")?;
    for name in ["x-forwarded-for", "forwarded", "x-real-ip"] {
        headers.delete(name)?;
    }
    if let Some(ip) = connecting {
        headers.set("x-forwarded-for", &ip)?;
        headers.set("x-real-ip", &ip)?;
    }
    Ok(())
}

/// The rate limit for a covered request, checked before any object exists: `None` to go
/// on, or the answer (429 when any of `limit_keys` is over the limit, or 500 when a route
/// names a binding that is not bound). The keys are `core::scope::rate_limit_keys`.
async fn rate_limited(
    env: &Env,
    choice: Option<RateLimiterChoice<'_>>,
    limit_keys: &[String],
    trace: &Trace,
) -> Option<Result<Response>> {
    let binding = match choice? {
        RateLimiterChoice::Default => settings::binding(env, settings::RATE_LIMITER_BINDING)?,
        RateLimiterChoice::Named(name) => match settings::binding(env, name) {
            Some(binding) => binding,
            None => return Some(respond::refused(env, &edge::rate_limiter_unbound(name), trace)),
        },
    };
    let mut verdict = Ok(true);
    for key in limit_keys {
        verdict = limit(&binding, key).await;
        if verdict != Ok(true) {
            break;
        }
    }
    match verdict {
        Ok(true) => None,
        Ok(false) => Some(respond::refused(env, &edge::rate_limited(), trace)),
        // The limiter is a guard against floods, not a part of the idempotency promise: a
        // limiter that fails lets the request on, and says so.
        Err(error) => {
            console_error!("rate limiter failed, request let through: {}", worker::Error::from(error));
            None
        }
    }
}

/// `binding.limit({ key })`; whether the request is within the limit.
async fn limit(binding: &JsValue, key: &str) -> std::result::Result<bool, JsValue> {
    let call: js_sys::Function = js_sys::Reflect::get(binding, &JsValue::from_str("limit"))?.dyn_into()?;
    let options = js_sys::Object::new();
    js_sys::Reflect::set(&options, &JsValue::from_str("key"), &JsValue::from_str(key))?;
    let pending: js_sys::Promise = call.call1(binding, &options)?.dyn_into()?;
    let outcome = JsFuture::from(pending).await?;
    Ok(js_sys::Reflect::get(&outcome, &JsValue::from_str("success"))?.as_bool() == Some(true))
}

/// Sends `req` to the origin: through the named service binding, or the global `fetch`.
pub(super) async fn send(env: &Env, service: Option<&str>, req: &Request) -> Result<Response> {
    Ok(JsFuture::from(start_send(env, service, req)?).await?.dyn_into()?)
}

/// [`send`] without waiting: the request is on its way when this returns.
pub(super) fn start_send(env: &Env, service: Option<&str>, req: &Request) -> Result<js_sys::Promise> {
    match service {
        Some(name) => {
            let service: worker::worker_sys::Fetcher = env.service(name)?.into_rpc();
            Ok(service.fetch(req)?)
        }
        None => {
            let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
            Ok(global.fetch_with_request(req))
        }
    }
}

/// A pass-through answer, or 502 problem+json when the origin could not be reached. The
/// answer goes out as a new `Response` over the origin's body, status and headers (as
/// `worker::Response` did before), or as it is when it carries a WebSocket (an upgrade).
pub(super) fn origin_or_problem(result: Result<Response>) -> Result<Response> {
    match result {
        Ok(response) if has_websocket(&response) => Ok(response),
        Ok(response) => rewrap(&response, &response.headers()),
        Err(_) => respond::problem(&edge::pass_through_unreachable()),
    }
}

pub(super) fn has_websocket(response: &Response) -> bool {
    js_sys::Reflect::get(response, &JsValue::from_str("webSocket"))
        .is_ok_and(|socket| !socket.is_null() && !socket.is_undefined())
}

/// `new Response(response.body, { status, headers })`.
pub(super) fn rewrap(response: &Response, headers: &Headers) -> Result<Response> {
    let init = ResponseInit::new();
    init.set_status(response.status());
    init.set_headers(headers);
    Ok(Response::new_with_opt_readable_stream_and_init(response.body().as_ref(), &init)?)
}

async fn covered(
    req: Request,
    url: &str,
    env: &Env,
    config: &Config,
    policy: &Policy<'_>,
    key: IdempotencyKey,
    trace: Trace,
) -> Result<Response> {
    let method = trace.method.as_str();
    let headers = req.headers();
    let Some((body, js_body)) = read_body(&req, &headers, config.max_body_bytes).await? else {
        return respond::refused(env, &edge::body_too_large(config.max_body_bytes), &trace);
    };

    let path_and_query = path_and_query(url);
    let settings = settings::get(env);
    let name_key = settings.object_name_key.as_deref();
    let Identified { fingerprint, name, scope_salt, scope_log } =
        match identify(&headers, method, &path_and_query, &key, config, policy, &body, name_key).await? {
            Ok(identified) => identified,
            Err(problem) => return respond::refused(env, &problem, &trace),
        };
    let body_bytes = body.len();
    drop(body);
    let client_ip = headers.get("cf-connecting-ip")?;
    let limit_keys = rate_limit_keys(scope_log.kind, &scope_salt.to_hex(), client_ip.as_deref());
    if let Some(answer) = rate_limited(env, policy.rate_limiter, &limit_keys, &trace).await {
        return answer;
    }

    let tokens = connection_tokens(headers.get("connection")?.as_deref());
    let outgoing = filtered_copy(&headers, |name| forward_to_origin(name, &tokens))?;
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
    let accept_async = policy
        .async_accept
        .filter(|_| prefers_respond_async(headers.get("prefer").ok().flatten().as_deref()));
    let call = ToObject::Key(KeyCall {
        fingerprint,
        scope_salt,
        scope: scope_log,
        policy: config.object_policy(policy),
        body_bytes: body_bytes as u64,
        probe_origin: config.probes_origin(policy),
        step: KeyStep::Enforce { accept_async },
        trace: trace.clone(),
    });
    outgoing.set(ENVELOPE_HEADER, &call.encode())?;
    // The method as `worker::Method` spells it (an unknown one becomes GET), as before.
    let wire_method = worker::Method::from(method.to_owned());
    let wire_method = wire_method.as_ref();
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
        Err(error) => (ObjectCallFailure::BeforeSend, error.to_string()),
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
            if let Some(secret) = &settings.origin_auth_secret {
                let signed_path = path_and_query_of(&target);
                let key = headers.get(policy.key_header.lowercase)?;
                let passed = Protection::Passed;
                match origin_auth::signature(
                    secret,
                    wire_method,
                    &signed_path,
                    key.as_deref(),
                    passed,
                    Some(&js_body),
                )
                .await
                {
                    Ok(signature) => headers.set(SIGNATURE_HEADER, &signature)?,
                    Err(_) => return origin_or_problem(Err(worker::Error::RustError("not signed".into()))),
                }
            }
            let init = RequestInit::new();
            init.set_method(wire_method);
            init.set_headers(&headers);
            init.set_body(&js_body);
            // A proxy hands redirects to the client; following one is a second request.
            init.set_redirect(RequestRedirect::Manual);
            let forwarded = Request::new_with_str_and_init(&target, &init)?;
            let answer = origin_or_problem(send(env, policy.origin_service, &forwarded).await);
            let log = RequestLog {
                object: Some(short.to_owned()),
                decision: Decision::FailedOpen,
                status: answer.as_ref().map_or(500, Response::status),
                origin_status: None,
                origin_ms: None,
                wait_ms: None,
                scope: Some(scope_log),
            };
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

/// The request's fingerprint, its key's object name (a hash of the caller's scope and the
/// key) and the scope's key salt (for sealing the stored answer). Enforce and observe mode
/// share it, so both reach the same object and seal alike.
/// Who a covered request belongs to and what it asks for: its fingerprint, its object's
/// name, the scope's key salt and the scope for the log line.
pub(super) struct Identified {
    pub fingerprint: Digest256,
    pub name: String,
    pub scope_salt: Digest256,
    pub scope_log: ScopeLog,
}

/// Identifies a covered request, the same way in enforce and observe mode so that both
/// reach the same object: the caller's scope (`runtime::identity`; a 401 problem when the
/// request may not be scoped), the payload fingerprint and the object name (keyed with
/// `OBJECT_NAME_KEY` when set).
#[allow(clippy::too_many_arguments)]
pub(super) async fn identify(
    headers: &Headers,
    method: &str,
    path_and_query: &str,
    key: &IdempotencyKey,
    config: &Config,
    policy: &Policy<'_>,
    body: &[u8],
    name_key: Option<&[u8]>,
) -> Result<std::result::Result<Identified, Problem>> {
    let (scope, scope_log) = match identity::scope(headers, config, policy).await? {
        Ok(scope) => scope,
        Err(problem) => return Ok(Err(problem)),
    };
    let scope_salt = scope.key_salt();
    let content_type = headers.get("content-type")?;
    let extra_values: Vec<Option<String>> =
        policy.fingerprint_headers.iter().map(|name| headers.get(name).ok().flatten()).collect();
    let extra_headers: Vec<(&str, Option<&str>)> = policy
        .fingerprint_headers
        .iter()
        .map(String::as_str)
        .zip(extra_values.iter().map(Option::as_deref))
        .collect();
    let payload = Payload {
        method,
        path_and_query,
        content_type: content_type.as_deref(),
        extra_headers: &extra_headers,
        body,
        body_shape: policy.body_shape,
    };
    // Rule 5 of `core::scope`: a replay goes only to the original's credential. The values
    // are read only where a binding can apply (never with the default scope).
    let binding = if config.scope.binds_replays() {
        let values = identity::header_values(headers, &config.scope.replay_headers)?;
        let replay = identity::named_values(&config.scope.replay_headers, &values);
        caller_binding(&config.scope, scope_log.kind, &replay)
    } else {
        None
    };
    Ok(Ok(Identified {
        fingerprint: bound_to_caller(fingerprint(&payload), binding),
        name: keyed_object_name(name_key, object_name(scope, key.as_str())),
        scope_salt,
        scope_log,
    }))
}

/// The key objects' namespace, restricted to the configured jurisdiction if any (as
/// `env.IDEMPOTENCY_KEYS.jurisdiction("eu")` in JavaScript; workers-rs has no wrapper).
pub(super) fn key_namespace(env: &Env, jurisdiction: Option<&str>) -> Result<ObjectNamespace> {
    let namespace = env.durable_object(OBJECT_BINDING)?;
    let Some(jurisdiction) = jurisdiction else { return Ok(namespace) };
    let raw = JsValue::from(namespace);
    let restrict: js_sys::Function =
        js_sys::Reflect::get(&raw, &JsValue::from("jurisdiction"))?.dyn_into()?;
    Ok(restrict.call1(&raw, &JsValue::from(jurisdiction))?.unchecked_into())
}

thread_local! {
    static NAMESPACE: OnceCell<ObjectNamespace> = const { OnceCell::new() };
}

/// [`key_namespace`], looked up once per isolate (bindings, like variables, cannot change
/// while an isolate lives). A failed lookup is not kept: it is tried again next time.
pub(super) fn cached_key_namespace(env: &Env, jurisdiction: Option<&str>) -> Result<ObjectNamespace> {
    if let Some(namespace) = NAMESPACE.with(|cell| cell.get().map(|ns| JsValue::from(ns).unchecked_into())) {
        return Ok(namespace);
    }
    let namespace = key_namespace(env, jurisdiction)?;
    NAMESPACE.with(|cell| {
        let _ = cell.set(JsValue::from(&namespace).unchecked_into());
    });
    Ok(namespace)
}

/// A copy of `headers` (one call) without the names `keep` refuses (one `delete` each). Only
/// the names cross into Wasm, not the values.
pub(super) fn filtered_copy(headers: &Headers, keep: impl Fn(&str) -> bool) -> Result<Headers> {
    let copy = Headers::new_with_headers(headers)?;
    for name in worker::Headers(headers.clone()).keys() {
        if !keep(&name) {
            copy.delete(&name)?;
        }
    }
    Ok(copy)
}

/// Sends `req` to the object behind `stub` and takes its answer (see
/// [`answered_by_object`]). A call that throws before it is sent, or that the platform
/// refuses as `overloaded` (queued and never run), was not delivered; any other failure
/// may have come after the object sent the request on.
pub(super) async fn call_object(
    stub: Stub,
    req: &Request,
) -> std::result::Result<Response, (ObjectCallFailure, String)> {
    call_object_marked(stub, req).await.map(|(response, _)| response)
}

/// [`call_object`], with the mark the object put on its answer (observe mode's verdict).
pub(super) async fn call_object_marked(
    stub: Stub,
    req: &Request,
) -> std::result::Result<(Response, Answered), (ObjectCallFailure, String)> {
    let stub: worker::worker_sys::DurableObject = stub.into_rpc();
    let pending = stub
        .fetch_with_request(req)
        .map_err(|error| (ObjectCallFailure::BeforeSend, worker::Error::from(error).to_string()))?;
    let response = JsFuture::from(pending).await.map_err(|error| {
        let flag = |name: &str| {
            js_sys::Reflect::get(&error, &JsValue::from_str(name))
                .is_ok_and(|flag| flag.as_bool() == Some(true))
        };
        let failure = ObjectCallFailure::Rejected { overloaded: flag("overloaded"), remote: flag("remote") };
        (failure, worker::Error::from(error).to_string())
    })?;
    let unmarked = |error: String| (ObjectCallFailure::UnmarkedAnswer, error);
    let response: Response = response.dyn_into().map_err(|_| unmarked("not a Response".to_owned()))?;
    answered_by_object(response).map_err(|error| unmarked(error.to_string()))
}

/// The object's answer without its mark, and the mark, or an error when the answer did not
/// come from the object (the platform answered, perhaps after the object ran).
fn answered_by_object(response: Response) -> Result<(Response, Answered)> {
    let received = response.headers();
    let Some(mark) = received.get(ANSWERED_HEADER)? else {
        return Err(worker::Error::RustError(format!(
            "the object did not answer (the platform said {})",
            response.status()
        )));
    };
    // The mark's presence is what proves the object answered. Its verdict matters to
    // observe mode only; a value it cannot read (a live answer keeps the origin's own header
    // of this name, should it send one) is a plain mark, never a reason to refuse an answer
    // the object gave.
    let answered = Answered::decode(&mark).unwrap_or(Answered::Plain);
    // A fetched response's headers are immutable: copy them (one call), drop the mark.
    let headers = Headers::new_with_headers(&received)?;
    headers.delete(ANSWERED_HEADER)?;
    Ok((rewrap(&response, &headers)?, answered))
}

/// The body (in Rust for the fingerprint, and as the JavaScript value to send on), or `None`
/// when it is larger than `limit`. `Content-Length` can only make the answer come sooner; a
/// body without one is counted as it streams in.
async fn read_body(req: &Request, headers: &Headers, limit: u64) -> Result<Option<(Vec<u8>, JsValue)>> {
    let declared = headers.get("content-length")?.and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Ok(None);
    }
    let Some(stream) = req.body() else {
        return Ok(Some((Vec::new(), js_sys::Uint8Array::new_with_length(0).into())));
    };
    if declared.is_some() {
        // A declared length is the body's length (HTTP framing): read it in one call, and
        // send the same `ArrayBuffer` on.
        let buffer = JsFuture::from(req.array_buffer()?).await?;
        let body = js_sys::Uint8Array::new(&buffer).to_vec();
        return Ok(Some((body, buffer)));
    }
    let mut stream = ByteStream::from(stream);
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if (body.len() + chunk.len()) as u64 > limit {
            drop(body);
            drain(&mut stream).await;
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    let js_body = js_sys::Uint8Array::from(body.as_slice()).into();
    Ok(Some((body, js_body)))
}

/// Most bytes read and thrown away after a rejection. Answering before the request body is
/// consumed makes workerd drop the connection (a proxy in front then fails the next request
/// on it), so the rest is read, but not without end.
const DRAIN_LIMIT_BYTES: usize = 8 * 1024 * 1024;

/// Reads and discards a rejected request's body, up to [`DRAIN_LIMIT_BYTES`].
pub(super) async fn discard_body(req: &Request) {
    if let Some(stream) = req.body() {
        drain(&mut ByteStream::from(stream)).await;
    }
}

async fn drain(stream: &mut ByteStream) {
    let mut drained = 0usize;
    while let Some(Ok(chunk)) = stream.next().await {
        drained += chunk.len();
        if drained > DRAIN_LIMIT_BYTES {
            break;
        }
    }
}
