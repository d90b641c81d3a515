//! Observe mode's edge half: every covered request goes to the origin exactly as it came,
//! its caller gets the origin's answer exactly as it was given, and the key's record is
//! kept beside it, so that the log says what enforce mode would have done. What is reported
//! to the object, logged, and taken for enforce mode's answer when the object cannot be
//! reached is `core::edge_rules::observed`'s; a refusal that enforce mode would give before
//! any object is only logged (`core::edge_rules::edge::Edge::PassObserved`).
//!
//! Rules:
//! 1. The Worker forwards, never the object. The origin call starts before the object is
//!    called, and the caller's answer never waits for the object: the recording runs in
//!    `ctx.waitUntil`, after the answer has gone.
//! 2. The answer is the origin's status, headers and body. Its body is split in two
//!    (`Response.clone`, which tees it): one half for the caller, the other read at once beside it, up
//!    to the stored-size cap (past it, cancelled: `tee` never holds a large answer), and
//!    handed to the object, which stores it for replay as enforce mode would (so a route
//!    switched to enforce replays the keys it observed).
//! 3. Identifying the caller (which may fetch a JWKS) happens in the recording, after the
//!    caller's answer: observing never delays a request.
//! 4. The object is told twice: at `arrival` (it claims, or says replayed, coalesced or
//!    refused, and forwards nothing) and, for a claim, with the `outcome`.
//!
//! With `ORIGIN_AUTH_SECRET` the forward is signed like every other (`runtime::origin_auth`),
//! and `TRUSTED_CLIENT_IP` applies; a body over `MAX_BODY_BYTES`, declared or streamed, is
//! forwarded unsigned (it is never read whole), so an origin that checks signatures refuses
//! it, as enforce mode would (413), and one that does not yet check them serves it. A failed forward cannot be told apart from a reset here
//! (probing first would delay the forward).

use std::future::Future;

use futures_channel::oneshot;

use wasm_bindgen::JsValue;
use web_sys::{Request, Response};

use super::boundary::header_lines;
use super::forward::{self, answer, origin_or_problem, start_send};
use super::identity::identify;
use super::object_call::{call_named, key_namespace};
use super::{body, metrics, now_ms, origin};
use crate::core::edge_rules::config::{Config, PathConfig};
use crate::core::edge_rules::edge::CoveredPlan;
use crate::core::edge_rules::headers::HeaderLines;
use crate::core::edge_rules::identify::{key_call, Arrived};
use crate::core::edge_rules::log::LineContext;
use crate::core::edge_rules::observed::{self, Forwarded};
use crate::core::edge_rules::wire::{KeyCall, KeyStep, ToObject};
use crate::core::primitives::key::IdempotencyKey;
use crate::core::primitives::url::{normalised_path, path_and_query, path_and_query_parts};
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::problem::ProblemKind;
use crate::core::vocabulary::trace::Trace;
use worker::{console_error, Context, Env, Result};

/// `forward`'s answer to a request that enforce mode would have refused (`kind`) before any
/// object: forwarded as it came, and logged with that refusal, the status its caller got
/// from the origin instead, and how long the origin took.
pub(super) async fn passed(
    env: &Env,
    kind: ProblemKind,
    trace: &Trace,
    forward: impl Future<Output = Result<Response>>,
) -> Result<Response> {
    let started = now_ms();
    let answer = forward.await;
    let status = answer.as_ref().map_or(500, Response::status);
    let log = observed::refusal_line(kind, status, now_ms().saturating_sub(started));
    metrics::write_point_in(env, &log, observed(trace));
    answer
}

/// A covered request whose body is over `MAX_BODY_BYTES`: sent on with `body` (the request's
/// own stream, or what was read followed by the rest), unsigned, and logged as enforce mode's
/// `body-too-large` would have been.
async fn over_the_limit(
    env: &Env,
    req: &Request,
    target: &str,
    policy: &PathConfig<'_>,
    trace: &Trace,
    body: Option<web_sys::ReadableStream>,
) -> Result<Response> {
    let headers = forward::client_headers(env, &req.headers())?;
    let body = body.map(JsValue::from);
    let forwarded = forward::request(&req.method(), target, &headers, body.as_ref(), None)?;
    let forward =
        async { origin_or_problem(answer(start_send(env, policy.origin_service, &forwarded)).await) };
    passed(env, ProblemKind::BodyTooLarge, trace, forward).await
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
    policy: &PathConfig<'_>,
    key: IdempotencyKey,
    plan: CoveredPlan,
    trace: Trace,
) -> Result<Response> {
    let method = trace.method.clone();
    // Read before anything is sent, for the recording below.
    let lines = header_lines(&req.headers())?;
    let path_and_query = path_and_query(url);
    let target = config.target_for(policy, url, &path_and_query);
    let declared_length = lines.get("content-length");
    // A body over the limit goes on as it came, unsigned (it is never read whole, so it
    // has no digest): unread when its `Content-Length` said so, else what was read and then
    // the rest.
    let (body, forward_body) =
        match body::read_observed(&req, declared_length.as_deref(), plan.max_body_bytes).await? {
            body::ObservedBody::Declared => {
                return over_the_limit(env, &req, &target, policy, &trace, req.body()).await
            }
            body::ObservedBody::OverLimit(stream) => {
                return over_the_limit(env, &req, &target, policy, &trace, Some(stream)).await
            }
            body::ObservedBody::Read(body, forward_body) => (body, forward_body),
        };

    // The forward goes first: nothing below waits for the object (but for its signature).
    // Observed, the request is sent on unprotected (`Passed`), signed over its body as read.
    let headers = forward::client_headers(env, &req.headers())?;
    let signed_body =
        super::settings::get(env).signer().map(|_| JsValue::from(js_sys::Uint8Array::from(&body[..])));
    let bodies = (forward_body.as_ref(), signed_body.as_ref());
    let pending = match forward::unprotected(env, policy, &method, &target, &headers, bodies).await {
        Ok(pending) => pending,
        Err(error) => return origin_or_problem(Err(error)),
    };
    // The origin's time starts once the request is on its way, as enforce mode's deadline
    // does (after signing).
    let started = now_ms();

    // Who the caller is (which may fetch a JWKS) and everything the object needs are
    // worked out in the recording, after the caller's answer: observing never delays it.
    let recording = Observation {
        env: env.clone(),
        routed_path: normalised_path(path_and_query_parts(url).0).unwrap_or_default(),
        method,
        path_and_query,
        key,
        headers: lines,
        body,
        target,
        plan,
        trace,
    };
    let (handed, forwarded_rx) = oneshot::channel();
    ctx.wait_until(recording.run(forwarded_rx));

    let answered = answer(Ok(pending)).await;
    let ms = now_ms().saturating_sub(started);
    let response = match answered {
        Ok(response) => response,
        Err(error) => {
            // The recording may be gone already: then nobody needs to know.
            let _ = handed.send(Forwarded::Failed { ms });
            return origin_or_problem(Err(error));
        }
    };
    let status = response.status();
    // Only the recording reads them: unreadable, it records none, and the caller still gets
    // the origin's answer.
    let answer_headers = header_lines(&response.headers()).map(|lines| lines.to_pairs()).unwrap_or_default();
    let cap = config.key_terms(policy).max_stored_response_bytes;
    let (answer, captured) = origin::split_answer(response, cap);
    ctx.wait_until(async move {
        let body = captured.await;
        let _ = handed.send(Forwarded::Answered { status, headers: answer_headers, body, ms });
    });
    Ok(answer)
}

/// What the recording needs, the observed request as it identifies it included, owned: it
/// runs after the caller's answer has gone.
struct Observation {
    env: Env,
    /// The normalised path its route was chosen by.
    routed_path: String,
    method: String,
    path_and_query: String,
    key: IdempotencyKey,
    headers: HeaderLines,
    body: Vec<u8>,
    /// The URL the object's requests carry (it reads only their headers).
    target: String,
    plan: CoveredPlan,
    trace: Trace,
}

impl Observation {
    /// Identifies the caller as enforce mode would, then tells the key's object of the
    /// arrival and, for a claim, of the outcome; writes the line. A caller enforce mode would
    /// refuse (401, 503) is logged as that refusal, with the origin's status, and nothing is
    /// recorded.
    async fn run(self, forwarded: oneshot::Receiver<Forwarded>) {
        let Observation { env, routed_path, method, path_and_query, key, headers, body, target, plan, trace } =
            self;
        let settings = super::settings::get(&env);
        let Ok(config) = &settings.config else { return };
        // The route's policy as the caller's side had it (the configuration is the isolate's).
        let policy = config.policy_for(&routed_path);
        let jurisdiction = &config.jurisdiction;
        let name_key = settings.object_name_key.as_deref();
        let request = Arrived {
            headers: &headers,
            method: &method,
            path_and_query: &path_and_query,
            key: &key,
            config,
            policy: &policy,
            body: &body,
            name_key,
        };
        // The recording runs in `waitUntil` already: a fetch it starts outlives the caller.
        let identified = identify(request, None).await;
        let forwarded = async { Forwarded::handed(forwarded.await.ok()) };
        let identified = match identified {
            Ok(identified) => identified,
            Err(problem) => {
                let (status, _, ms) = observed::log_fields(&forwarded.await);
                let log = observed::refusal_line(problem.kind, status, ms);
                return metrics::write_point_in(&env, &log, observed(&trace));
            }
        };
        // As enforce mode builds it (`core::edge_rules::identify::key_call`): observing, the object
        // neither forwards nor looks up.
        let call = key_call(config, &policy, &plan, &identified, body.len() as u64, trace);
        let name = identified.name;
        // The request's copy (its key included) is not held while the object is called.
        drop((headers, body, method, path_and_query, key, routed_path));
        let calls = std::cell::Cell::new(0);
        let object = |step: KeyStep, body: Option<JsValue>| {
            let envelope = ToObject::Key(KeyCall { step, ..call.clone() }).encode();
            call_named(&calls, &env, jurisdiction.as_deref(), &name, &target, envelope, body)
        };
        // The object's id, as the object's own lines name it (and the admin API takes it).
        let short = key_namespace(&env, jurisdiction.as_deref())
            .and_then(|namespace| Ok(namespace.id_from_name(&name)?.to_string()))
            .unwrap_or_else(|_| name[..16].to_owned());
        let arrival = object(KeyStep::ObserveArrival, None).await;
        if let Err((failure, error)) = &arrival {
            console_error!("{}", observed::not_reached_line(&short, *failure, error));
        }
        let (mut decision, claimed) =
            observed::after_arrival(arrival.as_ref().map_err(|(f, _)| *f), policy.on_unavailable);
        let forwarded = forwarded.await;
        let fields = observed::log_fields(&forwarded);
        // A body captured for no claim is simply dropped.
        if let Some(attempt) = claimed {
            // The origin's answer (or failure) for the attempt the object claimed.
            let (outcome, body) = observed::reported_outcome(forwarded, policy.timing.origin_timeout_ms);
            let body = body.map(|bytes| JsValue::from(js_sys::Uint8Array::from(&bytes[..])));
            let recorded = object(KeyStep::ObserveOutcome { attempt, outcome }, body).await;
            let not_recorded;
            (decision, not_recorded) =
                observed::after_outcome(recorded.as_ref().map_err(|(_, e)| e.as_str()));
            if let Some(why) = not_recorded {
                console_error!("{}", observed::not_recorded_line(&short, &why));
            }
        }
        let log = observed::recorded_line(short, decision, fields, calls.get(), call.scope);
        metrics::write_point_in(&env, &log, observed(&call.trace));
    }
}
