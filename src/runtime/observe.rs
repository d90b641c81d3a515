//! Observe mode's edge half: every covered request goes to the origin exactly as it came,
//! its caller gets the origin's answer exactly as it was given, and the key's record is
//! kept beside it, so that the log says what enforce mode would have done.
//!
//! Rules:
//! 1. The Worker forwards, never the object. The origin call starts before the object is
//!    called, and the caller's answer never waits for the object: the recording runs in
//!    `ctx.waitUntil`, after the answer has gone.
//! 2. The answer is the origin's status, headers and body. Its body is split in two
//!    (`ReadableStream.tee`): one half for the caller, the other read at once beside it, up
//!    to the stored-size cap (past it, cancelled: `tee` never holds a large answer), and
//!    handed to the object, which stores it for replay as enforce mode would (so a route
//!    switched to enforce replays the keys it observed).
//! 3. Identifying the caller (which may fetch a JWKS) happens in the recording, after the
//!    caller's answer: observing never delays a request.
//! 4. A refusal that enforce mode would give before any object (no key, a malformed key, a
//!    body over `MAX_BODY_BYTES`, an ambiguous path, a method-override header) is only
//!    logged.
//! 5. The object is told twice: at `arrival` (it claims, or says replayed, coalesced or
//!    refused, and forwards nothing) and, for a claim, with the `outcome` (the origin's
//!    answer, a failure, or a timeout: an answer later than the route's origin timeout is
//!    recorded as enforce mode would have recorded it, unknown).
//! 6. When the object cannot be reached, the request has been forwarded anyway: a log
//!    line says so, and the structured line carries what enforce mode would have answered
//!    (503 `storage-unavailable`, or `failed-open` on a fail-open route when the object
//!    provably never had the request).
//!
//! With `ORIGIN_AUTH_SECRET` the forward is signed like every other (`runtime::origin_auth`),
//! and `TRUSTED_CLIENT_IP` applies; a streamed body over `MAX_BODY_BYTES` is forwarded
//! unsigned (it is never read whole), so an origin that checks signatures refuses it, as
//! enforce mode would (413).
//!
//! A failed forward cannot be told apart from a reset here (probing first would delay the
//! forward), so it is recorded as unknown; its caller gets 502 `origin-unreachable`, as
//! for a method that is passed through.

use futures_channel::oneshot;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use worker::web_sys::{self, Headers, Request, RequestInit, RequestRedirect, Response, ResponseInit};
use worker::{console_error, Context, Env, Result};

use super::forward::{self, has_websocket, origin_or_problem, pass_through, replace_client_ip, start_send};
use super::identity::{self, identify};
use super::object_call::{cached_key_namespace, call_object_marked};
use super::{body, metrics, now_ms};
use crate::core::config::{Config, Policy};
use crate::core::key::IdempotencyKey;
use crate::core::log::{Decision, LineContext, RequestLog, Trace};
use crate::core::problem::ProblemKind;
use crate::core::record::AttemptId;
use crate::core::routes::{after_object_failure, AfterObjectFailure, Mode, ObjectCallFailure, Unavailable};
use crate::core::url::{normalised_path, path_and_query, path_and_query_parts};
use crate::core::wire::{Answered, KeyCall, KeyStep, ObservedOutcome, ToObject, ENVELOPE_HEADER};

/// What became of the forward, handed from the caller's side to the recording.
enum Forwarded {
    /// The origin answered; `body` is what was captured of the object's half of its body.
    Answered { status: u16, headers: Vec<(String, String)>, body: Captured, ms: u64 },
    /// The fetch failed (the caller got 502).
    Failed { ms: u64 },
}

/// What the recording gets of the origin's body. The object's half of the `tee` is read as
/// it comes, beside the caller's, so that `tee` never holds it whole while the recording
/// identifies the caller or calls the object; and only up to what could be stored.
enum Captured {
    /// No body, or none to keep (a WebSocket).
    Nothing,
    Whole(Vec<u8>),
    /// Over the stored-size cap: read no further (the object records it as too large).
    TooLarge,
    /// The body broke off.
    Broken,
}

/// Reads `half` to its end, or cancels it past `cap` bytes.
async fn capture(half: web_sys::ReadableStream, cap: u64) -> Captured {
    let mut stream = wasm_streams::ReadableStream::from_raw(half.unchecked_into());
    let mut reader = stream.get_reader();
    let mut bytes = Vec::new();
    loop {
        match reader.read().await {
            Ok(None) => return Captured::Whole(bytes),
            Ok(Some(chunk)) => {
                let chunk = js_sys::Uint8Array::new(&chunk);
                if bytes.len() as u64 + u64::from(chunk.length()) > cap {
                    let _ = reader.cancel().await;
                    return Captured::TooLarge;
                }
                bytes.extend(chunk.to_vec());
            }
            Err(_) => return Captured::Broken,
        }
    }
}

/// A request that enforce mode would have refused before any object: forwarded as it
/// came, and logged with the refusal it would have had.
pub(super) async fn passed(
    req: Request,
    url: &str,
    env: &Env,
    config: &Config,
    policy: &Policy<'_>,
    kind: ProblemKind,
    trace: &Trace,
) -> Result<Response> {
    let started = now_ms();
    let answer = pass_through(req, url, env, config, policy, trace).await;
    log_refusal(env, kind, &answer, started, trace);
    answer
}

fn log_refusal(env: &Env, kind: ProblemKind, answer: &Result<Response>, started: u64, trace: &Trace) {
    let status = answer.as_ref().map_or(500, Response::status);
    let log = RequestLog {
        object: None,
        decision: Decision::Rejected(kind),
        status,
        origin_status: None,
        origin_ms: Some(now_ms().saturating_sub(started)),
        wait_ms: None,
        scope: None,
    };
    metrics::record_in(env, &log, observed(trace));
}

/// An observe-mode line about the request `trace` names (its route included).
fn observed(trace: &Trace) -> LineContext<'_> {
    LineContext { mode: Mode::Observe, trace: Some(trace), ..LineContext::default() }
}

/// A covered request on a route in observe mode (see the module doc).
#[allow(clippy::too_many_arguments)]
pub(super) async fn covered(
    req: Request,
    url: &str,
    env: &Env,
    ctx: &Context,
    config: &Config,
    policy: &Policy<'_>,
    key: IdempotencyKey,
    trace: Trace,
) -> Result<Response> {
    let method = trace.method.clone();
    let headers = req.headers();
    let path_and_query = path_and_query(url);
    let target = config.target_for(policy, url, &path_and_query);
    let (body, forward_body) = match body::read_observed(&req, &headers, config.max_body_bytes).await? {
        body::ObservedBody::Declared => {
            return passed(req, url, env, config, policy, ProblemKind::BodyTooLarge, &trace).await
        }
        body::ObservedBody::OverLimit(stream) => {
            let started = now_ms();
            let forwarded = forward_request(&req, &target, Some(&stream))?;
            let answer = origin_or_problem(forward::send(env, policy.origin_service, &forwarded).await);
            log_refusal(env, ProblemKind::BodyTooLarge, &answer, started, &trace);
            return answer;
        }
        body::ObservedBody::Read(body, forward_body) => (body, forward_body),
    };

    // The forward goes first: nothing below waits for the object (but for its signature).
    let forwarded = forward_request(&req, &target, forward_body.as_ref())?;
    let settings = super::settings::get(env);
    if settings.trusted_client_ip {
        replace_client_ip(&forwarded.headers())?;
    }
    if settings.origin_auth_secret.is_some() {
        // Observed, the request is sent on unprotected (`Passed`), its body as read.
        let bytes: JsValue = js_sys::Uint8Array::from(&body[..]).into();
        let (method, headers) = (req.method(), forwarded.headers());
        let signed = forward::sign_passed(env, policy, &method, &target, &headers, Some(&bytes));
        if let Err(error) = signed.await {
            return origin_or_problem(Err(error));
        }
    }
    let started = now_ms();
    let pending = start_send(env, policy.origin_service, &forwarded);

    // Who the caller is (which may fetch a JWKS) and everything the object needs are
    // worked out in the recording, after the caller's answer: observing never delays it.
    let recording = Recording {
        env: env.clone(),
        jurisdiction: config.jurisdiction.clone(),
        request: Observed {
            routed_path: normalised_path(path_and_query_parts(url).0).unwrap_or_default(),
            method,
            path_and_query,
            key,
            headers: Headers::new_with_headers(&headers)?,
            body,
        },
        target,
        trace,
        on_unavailable: policy.on_unavailable,
        origin_timeout_ms: policy.timing.origin_timeout_ms,
    };
    let (handed, forwarded_rx) = oneshot::channel();
    ctx.wait_until(recording.run(forwarded_rx));

    let answered = match pending {
        Ok(promise) => JsFuture::from(promise).await.map_err(worker::Error::from),
        Err(error) => Err(error),
    };
    let ms = now_ms().saturating_sub(started);
    let response = match answered.and_then(|value| value.dyn_into::<Response>().map_err(worker::Error::from))
    {
        Ok(response) => response,
        Err(error) => {
            let _ = handed.send(Forwarded::Failed { ms });
            return origin_or_problem(Err(error));
        }
    };
    let status = response.status();
    let answer_headers: Vec<(String, String)> = worker::Headers(response.headers()).entries().collect();
    if has_websocket(&response) {
        let _ =
            handed.send(Forwarded::Answered { status, headers: answer_headers, body: Captured::Nothing, ms });
        return Ok(response);
    }
    let (to_caller, to_object) = match response.body() {
        Some(body) => {
            let halves = body.tee();
            (
                Some(halves.get(0).unchecked_into::<web_sys::ReadableStream>()),
                Some(halves.get(1).unchecked_into::<web_sys::ReadableStream>()),
            )
        }
        None => (None, None),
    };
    let init = ResponseInit::new();
    init.set_status(status);
    init.set_headers(&response.headers());
    let answer = Response::new_with_opt_readable_stream_and_init(to_caller.as_ref(), &init)?;
    let cap = config.object_policy(policy).max_stored_response_bytes;
    ctx.wait_until(async move {
        let body = match to_object {
            Some(half) => capture(half, cap).await,
            None => Captured::Whole(Vec::new()),
        };
        let _ = handed.send(Forwarded::Answered { status, headers: answer_headers, body, ms });
    });
    Ok(answer)
}

/// `new Request(target, { method, headers, body, redirect: "manual" })`: the request as it
/// came, with the body that was read (or none).
fn forward_request(req: &Request, target: &str, body: Option<&JsValue>) -> Result<Request> {
    let init = RequestInit::new();
    init.set_method(&req.method());
    init.set_headers(&req.headers());
    // A proxy hands redirects to its caller.
    init.set_redirect(RequestRedirect::Manual);
    if let Some(body) = body {
        init.set_body(body);
    }
    Ok(Request::new_with_str_and_init(target, &init)?)
}

/// The observed request as the recording identifies it: owned, since it runs after the
/// caller's answer has gone.
struct Observed {
    /// The normalised path its route was chosen by.
    routed_path: String,
    method: String,
    path_and_query: String,
    key: IdempotencyKey,
    headers: Headers,
    body: Vec<u8>,
}

/// What the recording needs, owned: it runs after the caller's answer has gone.
struct Recording {
    env: Env,
    jurisdiction: Option<String>,
    request: Observed,
    /// The URL the object's requests carry (it reads only their headers).
    target: String,
    trace: Trace,
    on_unavailable: Unavailable,
    origin_timeout_ms: u64,
}

/// The recording once the caller is identified: the object it calls and what it tells it.
struct Identified {
    env: Env,
    jurisdiction: Option<String>,
    /// The key's object name.
    name: String,
    target: String,
    /// Fingerprint, scope (also for the outcome's log line), policy, body size and scope
    /// salt, as enforce mode sends them (the step is set per call).
    call: KeyCall,
    on_unavailable: Unavailable,
    origin_timeout_ms: u64,
}

impl Recording {
    /// Identifies the caller as enforce mode would, then records (see [`Identified::run`]).
    /// A caller enforce mode would refuse (401, 503) is logged as that refusal, with the
    /// origin's status, and nothing is recorded.
    async fn run(self, forwarded: oneshot::Receiver<Forwarded>) {
        let settings = super::settings::get(&self.env);
        let Ok(config) = &settings.config else { return };
        let policy = config.policy_for(&self.request.routed_path);
        let Observed { method, path_and_query, key, headers, body, .. } = &self.request;
        let name_key = settings.object_name_key.as_deref();
        let identified =
            identify(headers, method, path_and_query, key, config, &policy, body, name_key).await;
        let identity::Identified { fingerprint, name, scope_salt, scope_log } = match identified {
            Ok(Ok(identified)) => identified,
            outcome => {
                let kind = match outcome {
                    Ok(Err(problem)) => problem.kind,
                    _ => ProblemKind::StorageUnavailable,
                };
                let forwarded = forwarded.await.unwrap_or(Forwarded::Failed { ms: 0 });
                let (status, ms) = match forwarded {
                    Forwarded::Answered { status, ms, .. } => (status, ms),
                    Forwarded::Failed { ms } => (502, ms),
                };
                let log = RequestLog {
                    object: None,
                    decision: Decision::Rejected(kind),
                    status,
                    origin_status: None,
                    origin_ms: Some(ms),
                    wait_ms: None,
                    scope: None,
                };
                metrics::record_in(&self.env, &log, observed(&self.trace));
                return;
            }
        };
        let call = KeyCall {
            fingerprint,
            scope_salt,
            scope: scope_log,
            policy: config.object_policy(&policy),
            body_bytes: body.len() as u64,
            // The object never sends in observe mode: the Worker forwards.
            probe_origin: false,
            step: KeyStep::ObserveArrival,
            trace: self.trace.clone(),
        };
        let identified = Identified {
            env: self.env.clone(),
            jurisdiction: self.jurisdiction.clone(),
            name,
            target: self.target.clone(),
            call,
            on_unavailable: self.on_unavailable,
            origin_timeout_ms: self.origin_timeout_ms,
        };
        drop(self);
        identified.run(forwarded).await;
    }
}

impl Identified {
    async fn run(self, forwarded: oneshot::Receiver<Forwarded>) {
        // The object's id, as the object's own lines name it (and the admin API takes it).
        let short = cached_key_namespace(&self.env, self.jurisdiction.as_deref())
            .and_then(|namespace| namespace.id_from_name(&self.name).map(|id| id.to_string()))
            .unwrap_or_else(|_| self.name[..16].to_owned());
        let (mut decision, claimed) = match self.call(KeyStep::ObserveArrival, None).await {
            Ok(Answered::Observed { decision, claimed }) => (decision, claimed),
            Ok(Answered::Plain) => (Decision::Rejected(ProblemKind::StorageUnavailable), None),
            Err((failure, error)) => {
                console_error!(
                    "object {}: not reached in observe mode ({:?}): {}; the request was forwarded anyway, unrecorded",
                    short,
                    failure,
                    error
                );
                let decision = match after_object_failure(failure, self.on_unavailable) {
                    AfterObjectFailure::FailOpen => Decision::FailedOpen,
                    AfterObjectFailure::Refuse(problem) => Decision::Rejected(problem.kind),
                };
                (decision, None)
            }
        };
        // A handler cut short hands nothing over: as a broken connection.
        let forwarded = forwarded.await.unwrap_or(Forwarded::Failed { ms: 0 });
        let (status, origin_status, ms) = match &forwarded {
            Forwarded::Answered { status, ms, .. } => (*status, Some(*status), *ms),
            Forwarded::Failed { ms } => (502, None, *ms),
        };
        // A body captured for no claim is simply dropped.
        if let Some(attempt) = claimed {
            decision = match self.outcome(attempt, forwarded).await {
                Ok(decision) => decision,
                Err(error) => {
                    // The claim stays: past its lease, enforce mode would hold the key.
                    console_error!("object {}: the observed outcome was not recorded: {}", short, error);
                    Decision::Unknown
                }
            };
        }
        let log = RequestLog {
            object: Some(short),
            decision,
            status,
            origin_status,
            origin_ms: Some(ms),
            wait_ms: None,
            scope: Some(self.call.scope),
        };
        metrics::record_in(&self.env, &log, observed(&self.call.trace));
    }

    /// Hands the object the origin's answer (or failure) for the attempt it claimed; returns
    /// the decision it recorded.
    async fn outcome(
        &self,
        attempt: AttemptId,
        forwarded: Forwarded,
    ) -> std::result::Result<Decision, String> {
        let (outcome, body) = match forwarded {
            Forwarded::Answered { ms, .. } if ms > self.origin_timeout_ms => (ObservedOutcome::Timeout, None),
            Forwarded::Answered { status, headers, body, .. } => match body {
                Captured::Whole(bytes) => (
                    ObservedOutcome::Responded { status, headers },
                    Some(JsValue::from(js_sys::Uint8Array::from(&bytes[..]))),
                ),
                Captured::Nothing => (ObservedOutcome::Responded { status, headers }, None),
                Captured::TooLarge => (ObservedOutcome::Oversized { status }, None),
                Captured::Broken => (ObservedOutcome::Reset, None),
            },
            Forwarded::Failed { .. } => (ObservedOutcome::Reset, None),
        };
        match self.call(KeyStep::ObserveOutcome { attempt, outcome }, body).await {
            Ok(Answered::Observed { decision, .. }) => Ok(decision),
            Ok(Answered::Plain) => Err("the object answered without a decision".to_owned()),
            Err((_, error)) => Err(error),
        }
    }

    /// One call to the key's object, for one step of observe mode; its answer's mark.
    async fn call(
        &self,
        step: KeyStep,
        body: Option<JsValue>,
    ) -> std::result::Result<Answered, (ObjectCallFailure, String)> {
        let before = |error: worker::Error| (ObjectCallFailure::BeforeSend, error.to_string());
        let envelope = ToObject::Key(KeyCall { step, ..self.call.clone() }).encode();
        let request = (|| -> Result<Request> {
            let headers = Headers::new()?;
            headers.set(ENVELOPE_HEADER, &envelope)?;
            let init = RequestInit::new();
            init.set_method("POST");
            init.set_headers(&headers);
            if let Some(body) = &body {
                init.set_body(body);
            }
            Ok(Request::new_with_str_and_init(&self.target, &init)?)
        })()
        .map_err(before)?;
        let namespace = cached_key_namespace(&self.env, self.jurisdiction.as_deref()).map_err(before)?;
        let stub = namespace.get_by_name(&self.name).map_err(before)?;
        call_object_marked(stub, &request).await.map(|(_, answered)| answered)
    }
}
