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
//! connecting IP. With `OBJECT_NAME_KEY` the object name is keyed (`core::formats::keyed_name`). Any other method passes
//! through to the origin untouched, except that a method-override header on it is refused
//! (the origin might execute it as a covered method without a key). On a method that a
//! route could cover, a path that origins may read as another path is refused, and route
//! patterns match the normalised path (`core::primitives::url::normalised_path`).
//!
//! If the object cannot be reached, the answer is 503 and nothing is forwarded. A route with
//! `on_object_unavailable: "fail-open"` forwards without protection only when the request
//! provably never left the Worker: the stub could not be made, or the call threw before it
//! was sent (`core::edge_rules::routes::after_object_failure`). Any other failure is 503 on every route:
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
//!
//! A covered request in enforce mode, the worker's hot path, is a small state machine
//! ([`Covered::step`]): each step starts one JavaScript call (the body's read, a token's
//! check, the rate limiter, the object call), and the next decides in Rust what its result
//! means and what comes next.

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::{future_to_promise, JsFuture};
use worker::event;
use web_sys::{Headers, Request, RequestInit, RequestRedirect, Response};

use super::boundary::{self, filtered_copy, header_lines};
use super::forward::{self, pass_through, replace_client_ip};
use super::identity::{
    identified, scope_finish, scope_start, token_identity, Arrived, Identified, ScopeStart,
};
use super::object_call::{cached_key_namespace, classify, OBJECT_BINDING};
use super::platform::{console_error, describe, Context, Env, Error, Result};
use super::rate_limit::{self, Limit};
use super::{admin, body, metrics, observe, random_u64, respond, settings};
use crate::core::edge_rules::config::{Config, PanicSite, PathConfig, PANIC_TEST_HEADER};
use crate::core::edge_rules::edge::{self, Edge, RequestHead};
use crate::core::edge_rules::headers::{forward_to_origin, honoured_connection_tokens, HeaderLines};
use crate::core::edge_rules::log::{request_id, LineContext, RequestLog};
use crate::core::edge_rules::routes::{
    after_object_failure, object_unreachable, AfterObjectFailure, ObjectCallFailure, Unavailable,
};
use crate::core::edge_rules::scope::{rate_limit_keys, ScopeLog};
use crate::core::edge_rules::wire::{
    KeyCall, KeyStep, ReconcileCall, ToObject, ANSWERED_HEADER, ENVELOPE_HEADER,
};
use crate::core::formats::fingerprint::Scope;
use crate::core::key_rules::machine::async_job::prefers_respond_async;
use crate::core::primitives::jwt::{Identity, Unverified};
use crate::core::primitives::key::IdempotencyKey;
use crate::core::primitives::url::{path_and_query, path_and_query_parts};
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::trace::Trace;

/// The Worker's `fetch` (`worker`'s `#[event(fetch)]`, which `src/entry.mjs` calls): the
/// answer to `req`, whatever happens; an error that reaches the top is logged and answered
/// 500 with a plain body, as the macro would answer it.
#[event(fetch)]
async fn fetch(req: Request, env: worker::Env, ctx: worker::Context) -> worker::Result<Response> {
    let env = Env::new(env.into());
    let ctx = Context::new(AsRef::<JsValue>::as_ref(ctx.as_ref()).clone());
    match arrived(req, env, ctx).await {
        Ok(answer) => Ok(answer),
        Err(error) => internal_error(error).dyn_into::<Response>().map_err(worker::Error::from),
    }
}

/// An error that reaches the top is logged and answered 500 with a plain body, as
/// `worker`'s `#[event(fetch)]` answers it.
fn internal_error(error: Error) -> JsValue {
    console_error!("{}", error);
    let init = web_sys::ResponseInit::new();
    init.set_status(500);
    Response::new_with_opt_str_and_init(Some("INTERNAL SERVER ERROR"), &init)
        .map_or_else(|error| error, JsValue::from)
}

/// What a promise that never rejects came to (a rejection, should one come, is its value).
async fn settled(promise: js_sys::Promise) -> JsValue {
    JsFuture::from(promise).await.unwrap_or_else(|value| value)
}

async fn arrived(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let method = req.method();
    // The headers, read whole in one call: every decision below reads this copy.
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
        Err(error) => return respond::refused(&env, &error.problem(), &trace),
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
    if let Edge::PassThrough(policy) | Edge::PassObserved(policy, _) | Edge::Covered { policy, .. } = &edge {
        trace.route = policy.route.map(str::to_owned);
    }
    match edge {
        Edge::Covered { policy, key } if policy.mode == Mode::Enforce => {
            let Some(read) =
                body::start_read(&req, lines.get("content-length").as_deref(), config.max_body_bytes)
            else {
                return respond::refused(&env, &edge::body_too_large(config.max_body_bytes), &trace);
            };
            let mut covered =
                Covered { req, env, ctx, lines, url, config, policy, key, trace, phase: Phase::Reading };
            // Each step takes what the last promise came to, and returns the answer or the
            // next promise.
            let mut next = covered.step(settled(read).await);
            while let Some(promise) = next.dyn_ref::<js_sys::Promise>() {
                next = covered.step(settled(promise.clone()).await);
            }
            Ok(next.dyn_into::<Response>()?)
        }
        Edge::Admin => {
            let token = settings.admin_token.as_deref().unwrap_or_default();
            admin::call(req, &url, &env, config, token).await
        }
        Edge::Refuse(problem) => {
            body::discard(&req).await;
            respond::refused(&env, &problem, &trace)
        }
        Edge::PassThrough(policy) => pass_through(req, &url, &env, config, &policy, &trace).await,
        Edge::PassObserved(policy, kind) => observe::passed(req, &url, &env, config, &policy, kind, &trace).await,
        Edge::Covered { policy, key } => observe::covered(req, &url, &env, &ctx, config, &policy, key, trace).await,
    }
}

/// A covered request in enforce mode on its way through the Worker: read its body within
/// `MAX_BODY_BYTES`, identify it (scope, fingerprint, object name), ask the rate limiter,
/// call its key's object, and answer with what the object answered, or as
/// `core::edge_rules::routes::after_object_failure` says when the object could not answer.
///
/// [`arrived`] drives it: it starts with the body's read under way, and each
/// [`Covered::step`] takes what the last promise came to and returns the answer or the next
/// promise. No promise it returns rejects.
struct Covered {
    req: Request,
    env: Env,
    ctx: Context,
    lines: HeaderLines,
    url: String,
    config: &'static Config,
    policy: PathConfig<'static>,
    key: IdempotencyKey,
    trace: Trace,
    phase: Phase,
}

/// What the promise a step returned was, and what the step after it holds.
enum Phase {
    /// The body's read (`body::start_read`).
    Reading,
    /// A token's check, whose result lands in `verified`.
    Verifying { body: Vec<u8>, js_body: JsValue, verified: Rc<RefCell<Option<TokenCheck>>> },
    /// The rate limiter's verdict.
    Limiting { identified: Identified, js_body: JsValue, body_bytes: usize },
    /// The object call's outcome (`boundary.mjs`'s `callObject`).
    Calling(Unanswered),
    /// The answer itself (a fail-open forward), handed on as it came.
    Answering,
    /// Answered: no step is left.
    Done,
}

type TokenCheck = std::result::Result<Identity, Unverified>;

/// What a failed object call's answer needs: the object's name for the log, and a
/// fail-open route's forward.
struct Unanswered {
    short: String,
    scope_log: ScopeLog,
    wire_method: &'static str,
    /// With `on_object_unavailable: "fail-open"`: the target, the end-to-end headers and
    /// the body, kept for the forward.
    unprotected: Option<(String, Headers, JsValue)>,
}

impl Covered {
    /// The step after the last promise came to `settled`: the answer (a `Response`), or the
    /// next promise, whose result is the next step's `settled`.
    fn step(&mut self, settled: JsValue) -> JsValue {
        match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Reading => self.read(settled),
            Phase::Verifying { body, js_body, verified } => {
                // A check that left no result fails closed, as a signature that did not verify.
                let verified = verified.take().unwrap_or(Err(Unverified::Signature));
                match scope_finish(&self.lines, self.config, verified) {
                    Ok((scope, scope_log)) => self.identify(&body, js_body, scope, scope_log),
                    Err(problem) => self.refuse(&problem),
                }
            }
            Phase::Limiting { identified, js_body, body_bytes } => {
                match rate_limit::refusal(&self.env, settled, &self.trace) {
                    Some(answer) => answer.map_or_else(internal_error, JsValue::from),
                    None => self.call(identified, js_body, body_bytes),
                }
            }
            Phase::Calling(unanswered) => match classify(settled.unchecked_ref()) {
                Ok((response, _)) => response.into(),
                Err(failure) => self.unanswered(unanswered, failure),
            },
            Phase::Answering => settled,
            Phase::Done => {
                internal_error(Error::Rust("a covered request was stepped after its answer".into()))
            }
        }
    }
}

impl Covered {
    /// A refusal before the object was called (nothing forwarded).
    fn refuse(&self, problem: &crate::core::vocabulary::problem::Problem) -> JsValue {
        respond::refused(&self.env, problem, &self.trace).map_or_else(internal_error, JsValue::from)
    }

    /// The body read: the scope, at once or after a token's check.
    fn read(&mut self, read: JsValue) -> JsValue {
        let (body, js_body) = match body::taken(read) {
            Ok(Some(read)) => read,
            Ok(None) => return self.refuse(&edge::body_too_large(self.config.max_body_bytes)),
            Err(error) => return internal_error(error),
        };
        match scope_start(&self.lines, self.config, &self.policy) {
            ScopeStart::Decided(scope, scope_log) => self.identify(&body, js_body, scope, scope_log),
            ScopeStart::Refused(problem) => self.refuse(&problem),
            ScopeStart::Verify(token) => {
                let verified = Rc::new(RefCell::new(None));
                let slot = Rc::clone(&verified);
                let (config, claim, ctx) = (self.config, self.policy.scope.claim, self.ctx.clone());
                let check = future_to_promise(async move {
                    let identity = token_identity(&token, &config.scope, claim, Some(&ctx)).await;
                    slot.replace(Some(identity));
                    Ok(JsValue::UNDEFINED)
                });
                self.phase = Phase::Verifying { body, js_body, verified };
                check.into()
            }
        }
    }

    /// The scope known: the fingerprint and the object's name, then the rate limit.
    fn identify(&mut self, body: &[u8], js_body: JsValue, scope: Scope, scope_log: ScopeLog) -> JsValue {
        let path_and_query = path_and_query(&self.url);
        let request = Arrived {
            headers: &self.lines,
            method: &self.trace.method,
            path_and_query: &path_and_query,
            key: &self.key,
            config: self.config,
            policy: &self.policy,
            body,
            name_key: settings::get(&self.env).object_name_key.as_deref(),
        };
        let identified = identified(&request, scope, scope_log);
        let client_ip = self.lines.get("cf-connecting-ip");
        let limit_keys = rate_limit_keys(
            identified.scope_log.kind,
            &identified.scope_salt,
            identified.binding.as_ref(),
            client_ip.as_deref(),
        );
        match rate_limit::ask(&self.env, self.policy.rate_limiter, &limit_keys, &self.trace) {
            Limit::Free => self.call(identified, js_body, body.len()),
            Limit::Refused(answer) => answer.map_or_else(internal_error, JsValue::from),
            Limit::Asked(verdict) => {
                self.phase = Phase::Limiting { identified, js_body, body_bytes: body.len() };
                verdict.into()
            }
        }
    }

    /// The call to the key's object: its request (the envelope, the end-to-end headers and
    /// the body), under way.
    fn call(&mut self, identified: Identified, js_body: JsValue, body_bytes: usize) -> JsValue {
        self.send_to_object(identified, js_body, body_bytes).unwrap_or_else(internal_error)
    }

    fn send_to_object(
        &mut self,
        identified: Identified,
        js_body: JsValue,
        body_bytes: usize,
    ) -> Result<JsValue> {
        let Identified { fingerprint, name, scope_salt, scope_log, .. } = identified;
        let (config, policy, lines) = (self.config, &self.policy, &self.lines);
        let path_and_query = path_and_query(&self.url);
        // A client's `Connection` never takes the key or the caller off the forward
        // (`core::edge_rules::headers`, rule 4).
        let end_to_end = config.end_to_end_headers(policy);
        let tokens = honoured_connection_tokens(lines.get("connection").as_deref(), &end_to_end);
        let outgoing = filtered_copy(&self.req.headers(), lines, |name| forward_to_origin(name, &tokens))?;
        // One spelling of the key at the origin, whatever this request's (`core::primitives::key` rule
        // 6): the first attempt, every re-send and a fail-open forward carry it.
        outgoing.set(policy.key_header.lowercase, &self.key.forwarded())?;
        if settings::get(&self.env).trusted_client_ip {
            replace_client_ip(&outgoing)?;
        }
        // The target and the end-to-end headers, kept for a fail-open forward.
        let target = config.target_for(policy, &self.url, &path_and_query);
        let keep_headers = (policy.on_unavailable == Unavailable::FailOpen)
            .then(|| Headers::new_with_headers(&outgoing))
            .transpose()?;
        // Everything the object needs, in one envelope (`core::edge_rules::wire`), the asynchronous
        // settings (`core::key_rules::machine::async_job`) included when the request prefers `respond-async`.
        let accept_async =
            policy.async_accept.filter(|_| prefers_respond_async(lines.get("prefer").as_deref()));
        let call = ToObject::Key(KeyCall {
            fingerprint,
            scope_salt,
            scope: scope_log,
            policy: config.key_terms(policy),
            body_bytes: body_bytes as u64,
            probe_origin: config.probes_origin(policy),
            step: KeyStep::Enforce { accept_async },
            trace: self.trace.clone(),
            reconcile: match policy.reconcile.map(|route| (route, route.lookup_url(&self.key))) {
                None => None,
                Some((route, Ok(url))) => Some(ReconcileCall {
                    url,
                    not_found: route.not_found,
                    scope_headers: config.scope.lookup_headers(),
                }),
                // `core::edge_rules::edge` refused such a key already; never asked of another URL.
                Some((_, Err(refused))) => return Ok(self.refuse(&refused)),
            },
        });
        outgoing.set(ENVELOPE_HEADER, &call.encode())?;
        let wire_method = edge::method_on_the_wire(&self.trace.method);
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
        let unprotected = keep_headers.map(|headers| (target, headers, js_body));

        let namespace = match cached_key_namespace(&self.env, config.jurisdiction.as_deref()) {
            Ok(namespace) => namespace,
            Err(error) => {
                console_error!("configuration: the Durable Object namespace is unusable: {}", error);
                return Ok(self.refuse(&edge::namespace_unusable(OBJECT_BINDING)));
            }
        };
        // The object name is a hash: safe to log, unlike the key or the credential.
        let unanswered = Unanswered { short: name[..16].to_owned(), scope_log, wire_method, unprotected };
        match namespace.get_by_name(&name) {
            Err(error) => Ok(self.unanswered(unanswered, (ObjectCallFailure::BeforeSend, describe(error)))),
            Ok(stub) => {
                self.phase = Phase::Calling(unanswered);
                Ok(boundary::call_object_js(&stub, &to_object, ANSWERED_HEADER).into())
            }
        }
    }

    /// The object did not answer: a fail-open forward (a promise of its answer) where the
    /// core says the request provably never left the Worker, 503 otherwise.
    fn unanswered(
        &mut self,
        unanswered: Unanswered,
        (failure, error): (ObjectCallFailure, String),
    ) -> JsValue {
        let Unanswered { short, scope_log, wire_method, unprotected } = unanswered;
        match (after_object_failure(failure, self.policy.on_unavailable), unprotected) {
            (AfterObjectFailure::FailOpen, Some((target, headers, js_body))) => {
                // The route chose availability over protection, and the object never had the
                // request, so nothing can have been sent for this attempt.
                console_error!(
                    "object {}: not reached ({}); failing open, forwarding without protection",
                    short,
                    error
                );
                let (env, policy, trace) = (self.env.clone(), self.policy.clone(), self.trace.clone());
                self.phase = Phase::Answering;
                future_to_promise(async move {
                    let answer =
                        forward::fail_open(&env, &policy, wire_method, &target, &headers, &js_body).await;
                    let status = answer.as_ref().map_or(500, Response::status);
                    let log = RequestLog::new(Some(short), Decision::FailedOpen, status, Some(scope_log));
                    metrics::record_in(
                        &env,
                        &log,
                        LineContext { trace: Some(&trace), ..LineContext::default() },
                    );
                    Ok(answer.map_or_else(internal_error, JsValue::from))
                })
                .into()
            }
            (decision, _) => {
                console_error!("object {}: unavailable ({}): {}", short, failure, error);
                let problem = match decision {
                    AfterObjectFailure::Refuse(problem) => problem,
                    // A fail-open decision always has its forward at hand (see `unprotected`).
                    AfterObjectFailure::FailOpen => object_unreachable(),
                };
                self.refuse(&problem)
            }
        }
    }
}
