//! The Worker's fetch handler: the edge in front of the origin.
//!
//! Where a request goes (the admin API, a refusal before any body is read, a pass-through,
//! observe mode, a covered key) is `core::edge_rules::edge::decide`'s, from the request's
//! head; each arm here carries it out (`forward`, `observe`, `admin`). A covered request in
//! enforce mode has its body read within the plan's limit (`runtime::body`: a streamed body
//! is counted as it arrives, `Content-Length` is never trusted alone), is identified
//! (`identity`: scope, object name, fingerprint), passes the rate limit
//! (`runtime::rate_limit`), and goes to its key's object with everything the object needs
//! (the origin URL, the end-to-end headers, the body, the fingerprint, the timing), so the
//! object repeats none of this work. When the object cannot answer, failing open or 503 is
//! `core::edge_rules::routes::after_object_failure`'s; a namespace that cannot be used is a
//! configuration error (500).
//!
//! It works on the runtime's own `Request` and `Response` objects (`web_sys`), and reads of
//! a request only what a decision needs: `worker`'s wrappers read a request's method, URL,
//! headers and `cf` (and a response's, and build another) at every conversion, crossings
//! that a replay, which passes through here, would pay.
//!
//! What the Worker does with a covered request is decided before it acts
//! (`core::edge_rules::edge::CoveredPlan`): the body's limit, asynchronous acceptance, whether a
//! fail-open forward is kept, the lookup. The object's call is built as observe mode builds
//! it (`core::edge_rules::identify::key_call`).

use wasm_bindgen::JsValue;
use web_sys::{Headers, Request, Response};
use worker::{event, Context};

use super::boundary::{edited_copy, header_lines};
use super::forward::{self, pass_through};
use super::identity;
use super::object_call::{call_key, key_namespace, OBJECT_BINDING};
use super::{admin, body, metrics, observe, random_u64, rate_limit, respond, settings};
use crate::core::edge_rules::config::{Config, PanicSite, PathConfig, PANIC_TEST_HEADER};
use crate::core::edge_rules::edge::{self, CoveredPlan, Edge, RequestHead};
use crate::core::edge_rules::headers::{client_forward_edits, HeaderLines};
use crate::core::edge_rules::identify::{key_call, Arrived, Identified};
use crate::core::edge_rules::log::{request_id, LineContext, RequestLog};
use crate::core::edge_rules::routes::{
    after_object_failure, unanswered_line, AfterObjectFailure, ObjectCallFailure,
};
use crate::core::edge_rules::scope::ScopeLog;
use crate::core::edge_rules::wire::{ToObject, ENVELOPE_HEADER};
use crate::core::primitives::key::IdempotencyKey;
use crate::core::primitives::url::{path_and_query, path_and_query_parts};
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::problem::Problem;
use crate::core::vocabulary::trace::Trace;
use worker::{console_error, Env, Result};

/// The Worker's `fetch` (`worker`'s `#[event(fetch)]`, which `src/entry.mjs` calls): the
/// answer to `req`. An error that reaches the top is logged and answered 500 with a plain
/// body by the macro.
#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let method = req.method();
    // The headers, read whole once: every decision below reads this copy.
    let lines = header_lines(&req.headers())?;
    // Which request this is, on every log line and problem it gets (`core::vocabulary::trace::Trace`).
    let request_id = request_id(lines.get("cf-ray").as_deref(), random_u64);
    let mut trace = Trace { request_id, method, route: None };
    let settings = settings::get(&env);
    if settings.fault_injection.panics_at(|| lines.get(PANIC_TEST_HEADER), PanicSite::Worker) {
        panic!("PANIC_FAULT_INJECTION: the Worker panics on purpose");
    }
    let config = match settings.serving_config() {
        Ok(config) => config,
        Err(error) => return refused_unread(&req, &env, &error.problem(), &trace).await,
    };
    let url = req.url();
    let (path, _) = path_and_query_parts(&url);
    let read_header = |name: &str| Ok(lines.get(name));
    let head = RequestHead {
        method: &trace.method,
        path,
        admin_enabled: settings.admin_token.is_some(),
        header: &read_header,
    };
    // Where the request goes is the core's decision (`core::edge_rules::edge`); each arm carries it out.
    let edge = edge::decide(&head, config, |name| env.service(name).is_ok());
    trace.route = edge.route().map(str::to_owned);
    match edge {
        Edge::Covered { policy, key, plan } if policy.mode == Mode::Enforce => {
            let request = CoveredRequest { req, env, ctx, lines, url, config, policy, key, plan, trace };
            request.enforce().await
        }
        Edge::Admin => {
            let token = settings.admin_token.as_deref().unwrap_or_default();
            admin::call(req, &url, &env, config, token).await
        }
        Edge::Refuse(problem) => refused_unread(&req, &env, &problem, &trace).await,
        Edge::PassThrough(policy) => pass_through(req, &url, &env, config, &policy, &trace).await,
        Edge::PassObserved(policy, kind) => {
            observe::passed(&env, kind, &trace, pass_through(req, &url, &env, config, &policy, &trace)).await
        }
        Edge::Covered { policy, key, plan } => {
            observe::covered(req, &url, &env, &ctx, config, &policy, key, plan, trace).await
        }
    }
}

/// A refusal before the request's body was read: the body is read and dropped first
/// (`body::discard`, not without end), so that the answer reaches a client still sending it.
async fn refused_unread(req: &Request, env: &Env, problem: &Problem, trace: &Trace) -> Result<Response> {
    body::discard(req).await;
    respond::refused(env, problem, trace)
}

/// A covered request in enforce mode on its way through the Worker (the module doc says
/// its steps).
struct CoveredRequest {
    req: Request,
    env: Env,
    ctx: Context,
    lines: HeaderLines,
    url: String,
    config: &'static Config,
    policy: PathConfig<'static>,
    key: IdempotencyKey,
    plan: CoveredPlan,
    trace: Trace,
}

impl CoveredRequest {
    /// A refusal before the object was called (nothing forwarded).
    fn refuse(&self, problem: &Problem) -> Result<Response> {
        respond::refused(&self.env, problem, &self.trace)
    }

    async fn enforce(self) -> Result<Response> {
        let limit = self.plan.max_body_bytes;
        let read = body::read_within(&self.req, self.lines.get("content-length").as_deref(), limit).await?;
        let Some((body, js_body)) = read else {
            return self.refuse(&edge::body_too_large(limit));
        };
        let (config, policy) = (self.config, &self.policy);
        let path_and_query = path_and_query(&self.url);
        let name_key = settings::get(&self.env).object_name_key.as_deref();
        let (headers, method, key) = (&self.lines, self.trace.method.as_str(), &self.key);
        let request = Arrived {
            headers,
            method,
            path_and_query: &path_and_query,
            key,
            config,
            policy,
            body: &body,
            name_key,
        };
        let identified = identity::identify(request, Some(&self.ctx));
        let identified = match identified.await {
            Ok(identified) => identified,
            Err(problem) => return self.refuse(&problem),
        };
        let body_bytes = body.len() as u64;
        // A waiting duplicate holds no copy of the body but the one its call carries.
        drop(body);
        let limit_keys = identified.rate_limit_keys(self.lines.get("cf-connecting-ip").as_deref());
        if let Some(answer) = rate_limit::check(&self.env, policy.rate_limiter, limit_keys, &self.trace).await
        {
            return answer;
        }
        self.call(identified, js_body, body_bytes, &path_and_query).await
    }

    /// The call to the key's object (the envelope, the end-to-end headers and the body),
    /// and its answer.
    async fn call(
        &self,
        identified: Identified,
        js_body: JsValue,
        body_bytes: u64,
        path_and_query: &str,
    ) -> Result<Response> {
        let (config, policy, lines) = (self.config, &self.policy, &self.lines);
        // The end-to-end headers, the key in one spelling whatever this request's, and the
        // client IP rule (`core::edge_rules::headers`, rule 5): the first attempt, every
        // re-send and a fail-open forward carry them.
        let (end_to_end, key) = (config.end_to_end_headers(policy), self.key.forwarded());
        let trusted_client_ip = settings::get(&self.env).trusted_client_ip;
        let key_line = Some((policy.key_header.lowercase, key.as_str()));
        let outgoing = edited_copy(
            &self.req.headers(),
            &client_forward_edits(lines, &end_to_end, key_line, trusted_client_ip),
        )?;
        // The target and the end-to-end headers, kept for a fail-open forward.
        let target = config.target_for(policy, &self.url, path_and_query);
        let keep_headers =
            self.plan.keep_for_fail_open.then(|| Headers::new_with_headers(&outgoing)).transpose()?;
        // Everything the object needs, in one envelope (`core::wire`), built as observe
        // mode builds it (`core::edge_rules::identify::key_call`).
        let call = key_call(config, policy, &self.plan, &identified, body_bytes, self.trace.clone());
        outgoing.set(ENVELOPE_HEADER, &ToObject::Key(call).encode())?;
        let wire_method = edge::method_on_the_wire(&self.trace.method);
        // One JavaScript copy of the body serves the object call and a fail-open forward.
        // The object's answer is the caller's, a redirect included: following its `Location`
        // would send the request to the object again (and again), and end in a 503. The
        // object's request URL is where the first attempt goes.
        let to_object = forward::request(wire_method, &target, &outgoing, Some(&js_body), None)?;
        // The request holds its own copy of the body; keep this one only for a fail-open
        // forward, so that a waiting duplicate holds no second copy.
        let unprotected = keep_headers.map(|headers| (target, headers, js_body));

        let namespace = match key_namespace(&self.env, config.jurisdiction.as_deref()) {
            Ok(namespace) => namespace,
            Err(error) => {
                console_error!("configuration: the Durable Object namespace is unusable: {}", error);
                return self.refuse(&edge::namespace_unusable(OBJECT_BINDING));
            }
        };
        // The object name is a hash: safe to log, unlike the key or the credential.
        let short = &identified.name[..16];
        let calls = std::cell::Cell::new(0);
        let failure = match call_key(&calls, &namespace, &identified.name, &to_object).await {
            Ok((response, _)) => return Ok(response),
            Err(failure) => failure,
        };
        let tried = (wire_method, calls.get());
        self.unanswered(short, identified.scope_log, tried, unprotected, failure).await
    }

    /// The object did not answer: a fail-open forward where the core says the request
    /// provably never left the Worker, 503 otherwise. The fail-open line says how many
    /// object calls were made (0 when the stub could not be made).
    async fn unanswered(
        &self,
        short: &str,
        scope_log: ScopeLog,
        (wire_method, object_calls): (&'static str, u32),
        unprotected: Option<(String, Headers, JsValue)>,
        (failure, error): (ObjectCallFailure, String),
    ) -> Result<Response> {
        let decision = after_object_failure(failure, self.policy.on_unavailable);
        let fail_open = unprotected.filter(|_| decision == AfterObjectFailure::FailOpen);
        console_error!("{}", unanswered_line(short, failure, &error, fail_open.is_some()));
        let Some((target, headers, js_body)) = fail_open else {
            // Refused: the line names the object its error line above names.
            let problem = decision.problem();
            let log = RequestLog::not_reached(short.to_owned(), object_calls, &problem, scope_log);
            return respond::refused_as(&self.env, &log, &problem, &self.trace);
        };
        // The route chose availability over protection, and the object never had the
        // request, so nothing can have been sent for this attempt.
        let bodies = (Some(&js_body), Some(&js_body));
        let sent = forward::unprotected(&self.env, &self.policy, wire_method, &target, &headers, bodies);
        let answer = forward::origin_or_problem(forward::answer(sent.await).await);
        let status = answer.as_ref().map_or(500, Response::status);
        let log = RequestLog::failed_open(short.to_owned(), object_calls, status, scope_log);
        let context = LineContext { trace: Some(&self.trace), ..LineContext::default() };
        metrics::write_point_in(&self.env, &log, context);
        answer
    }
}
