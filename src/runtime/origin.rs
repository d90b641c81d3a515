//! The origin fetch: one attempt as `core::key_rules::origin_attempt` plans it (a TCP probe
//! first in `ORIGIN_URL` mode, then the exchange, both within the origin timeout), reported
//! as an `OriginResult` plus the answer when there is one. How the attempt ended
//! (`AttemptEnd`) becomes the core's typed verdict; why only an end before the fetch was
//! called is "not sent" (never through a service binding), and why the probe waits as long
//! as it does, is that module's doc. Through a service binding (`ORIGIN_SERVICE`) the
//! attempt is `env.<binding>.fetch(...)`, with the same request and timeout.
//!
//! With `ORIGIN_AUTH_SECRET` set, the request carries the hop's signature
//! (`core::edge_rules::hop_signature`), made just before it is sent; a client-sent header
//! of that name never passes (it is replaced).
//!
//! The answer's body is read as a stream, up to the stored-size cap. An answer over the cap
//! is not read into memory: its caller gets it as a stream (what was read, then the rest),
//! and the result says `Oversized`, so the key is held unknown.
//!
//! The probe is a `worker::Socket`, the exchange a `worker::Fetch` (or the service
//! binding's fetch) with an abort signal, both raced against their deadline here.

use std::time::Duration;

use futures_util::future::{select, Either};
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;
use web_sys::{self, AbortController, Headers, Request, Response};

use super::boundary::{self, edited_copy, header_lines};
use super::forward;
use super::{body, origin_auth, settings};
use crate::core::edge_rules::headers::{connection_tokens_in, forward_edits, stored_for_replay};
use crate::core::edge_rules::observed::Captured;
use crate::core::edge_rules::origin_auth::Protection;
use crate::core::edge_rules::wire::ObservedOutcome;
use crate::core::formats::key_record::StoredResponse;
use crate::core::key_rules::key_state::answer_body_cap;
use crate::core::key_rules::origin_attempt::{self, AttemptEnd};
use crate::core::primitives::url::host_and_port;
use crate::core::vocabulary::key_terms::KeyTerms;
use crate::core::vocabulary::outcome_table::OriginResult;
use worker::{console_error, console_warn, Delay, Env, ResponseBody};

/// The origin's answer.
pub struct OriginAnswer {
    pub status: u16,
    /// Every header as received, in order (`Set-Cookie` lines separately).
    pub headers: Vec<(String, String)>,
    /// Tokens of the answer's `Connection` header (they name more hop-by-hop headers).
    pub connection_tokens: Vec<String>,
    pub body: AnswerBody,
}

impl OriginAnswer {
    /// The answer as it is stored for replay, its body moved out of this one (held once,
    /// not twice); `None` for one streamed past the cap.
    pub fn take_storable(&mut self) -> Option<StoredResponse> {
        let AnswerBody::Complete(body) = &mut self.body else { return None };
        let headers = stored_for_replay(&self.headers, &self.connection_tokens);
        Some(StoredResponse { status: self.status, headers, body: std::mem::take(body) })
    }
}

pub enum AnswerBody {
    /// The whole body, within the stored-size cap.
    Complete(Vec<u8>),
    /// Over the cap: the body as a stream for the one caller, never held whole in memory.
    Streamed(web_sys::ReadableStream),
}

/// A request on its way to the origin.
pub struct Outgoing<'a> {
    pub target: &'a str,
    pub method: &'a str,
    pub headers: &'a Headers,
    /// As the object holds it: a JavaScript value that never enters Wasm memory.
    pub body: &'a JsValue,
}

/// Sends one attempt of a key's object to the origin ([`forward`]), as the core's verdict.
pub async fn send(
    env: &Env,
    request: Outgoing<'_>,
    policy: &KeyTerms,
    probe_first: bool,
) -> (OriginResult, Option<OriginAnswer>) {
    let (end, answer) = forward(env, request, policy, probe_first).await;
    (end.verdict().result(), answer)
}

/// A reconciliation's lookup (`core::key_rules::reconcile`): `GET url` with `headers` (the caller's
/// scope headers), signed like every hop the edge sends, through the route's service
/// binding if it names one, within the origin timeout and without a probe. The status and,
/// for an answer within the stored-size cap, the answer as it would be stored; `None` when
/// no answer came (refused, reset, timed out).
pub async fn look_up(
    env: &Env,
    url: &str,
    headers: &Headers,
    policy: &KeyTerms,
) -> Option<(u16, Option<StoredResponse>)> {
    let outgoing = Outgoing { target: url, method: "GET", headers, body: &JsValue::NULL };
    let (result, answer) = send(env, outgoing, policy, false).await;
    let (status, kept) = origin_attempt::looked_up(result)?;
    let stored = match answer {
        Some(mut answer) if kept => answer.take_storable(),
        Some(OriginAnswer { body: AnswerBody::Streamed(stream), .. }) => {
            let _ = JsFuture::from(stream.cancel()).await;
            None
        }
        _ => None,
    };
    // An answer to keep comes with its body.
    (!kept || stored.is_some()).then_some((status, stored))
}

/// The origin's answer to an observed request, as observe mode's Worker reports it (its
/// body, up to the stored-size cap, in `req`), classified as this object's own forward
/// would classify it (`AttemptEnd`). Whatever is not kept of the body is read and dropped.
pub async fn reported(
    req: &Request,
    outcome: &ObservedOutcome,
    policy: &KeyTerms,
) -> (OriginResult, Option<OriginAnswer>) {
    let (status, headers) = match outcome.answer() {
        Ok((status, headers)) => (status, headers.to_vec()),
        Err(result) => {
            body::drain(req, None).await;
            return (result, None);
        }
    };
    let cap = answer_body_cap(policy.max_stored_response_bytes, &headers);
    let body = match req.body() {
        None => AnswerBody::Complete(Vec::new()),
        Some(raw) => match read_capped(raw, cap).await {
            Ok(body) => body,
            // The Worker's copy of the answer broke off: what the caller got is not known
            // here.
            Err(_) => {
                body::drain(req, None).await;
                return (AttemptEnd::BrokeOff(status).verdict().result(), None);
            }
        },
    };
    if let AnswerBody::Streamed(stream) = body {
        // Too large to store: read the rest and drop it.
        boundary::drain(&stream, f64::INFINITY).await;
        return (AttemptEnd::Read { status, within_cap: false }.verdict().result(), None);
    }
    let connection_tokens = connection_tokens_in(&headers);
    let answer = OriginAnswer { status, headers, connection_tokens, body };
    (AttemptEnd::Read { status, within_cap: true }.verdict().result(), Some(answer))
}

/// Sends one attempt as `core::key_rules::origin_attempt::plan` says, through the route's
/// service binding when it names one (a binding that cannot be used sends nothing: the
/// attempt is released, and the line says which binding): the probe first when it has one
/// (nothing is sent before it connects), then the exchange, whose whole answer, body
/// included, must come within its deadline (a body that stalls is a timeout like any
/// other). The request body is a JavaScript value (it never enters Wasm memory on this
/// path). How it ended is the core's to read (`core::key_rules::origin_attempt::AttemptEnd`).
async fn forward(
    env: &Env,
    request: Outgoing<'_>,
    policy: &KeyTerms,
    probe_first: bool,
) -> (AttemptEnd, Option<OriginAnswer>) {
    let service = match policy.origin_service.as_deref() {
        None => None,
        Some(name) => match env.service(name) {
            Ok(service) => Some(service),
            Err(error) => {
                console_error!("the origin service binding {} is unusable: {}", name, error);
                return (AttemptEnd::NotBuilt, None);
            }
        },
    };
    let plan = origin_attempt::plan(probe_first, service.is_some(), policy.timing.origin_timeout_ms);
    let Outgoing { target, method, headers, body } = request;
    if let Some(wait_ms) = plan.probe_ms {
        if let Some(end) = probe(target, wait_ms).await {
            return (end, None);
        }
    }
    // Signed before anything is sent: a signature that cannot be made sends nothing. A
    // lookup (`look_up`) has no body: it is signed as one of none.
    let signature = match settings::get(env).signer() {
        None => None,
        Some(signer) => {
            let (key_header, protected) = (policy.key_header(), Protection::Protected);
            match origin_auth::sign_hop(signer, method, target, headers, key_header, protected, Some(body))
                .await
            {
                Ok(value) => Some(value),
                Err(error) => {
                    console_warn!("origin signature failed: {}", error);
                    return (AttemptEnd::NotBuilt, None);
                }
            }
        }
    };
    let Ok(controller) = AbortController::new() else { return (AttemptEnd::NotBuilt, None) };
    let signal = controller.signal();
    let Ok(request) = build_request(target, method, headers, body, &signal, signature.as_ref()) else {
        return (AttemptEnd::NotBuilt, None);
    };
    // Sent, and its answer read, within the one deadline: past it, the fetch is aborted
    // (its body's read with it) and the attempt timed out.
    let ended = |end: AttemptEnd| {
        if end == AttemptEnd::DeadlinePassed {
            controller.abort();
        }
        (end, None)
    };
    let mut deadline = std::pin::pin!(Delay::from(Duration::from_millis(plan.exchange_ms)));
    let fetched = async {
        let request = worker::Request::from(request);
        match &service {
            Some(service) => service.fetch_request(request).await,
            None => worker::Fetch::Request(request).send_with_signal(&signal.into()).await,
        }
    };
    let response = match select(std::pin::pin!(fetched), deadline.as_mut()).await {
        Either::Left((Ok(response), _)) => response,
        Either::Left((Err(error), _)) => {
            console_warn!("origin fetch failed: {}", error);
            return ended(AttemptEnd::FetchFailed);
        }
        Either::Right(_) => return ended(AttemptEnd::DeadlinePassed),
    };
    let status = response.status_code();
    let headers = match header_lines(&response.headers().0) {
        Ok(lines) => lines.to_pairs(),
        Err(error) => return ended(broke_off(status, error.into())),
    };
    // The body's cap: the stored-size cap less the headers, as the core counts them.
    let body_cap = answer_body_cap(policy.max_stored_response_bytes, &headers);
    let body = match response.body() {
        ResponseBody::Stream(stream) => {
            match select(std::pin::pin!(read_capped(stream.clone(), body_cap)), deadline.as_mut()).await {
                Either::Left((Ok(body), _)) => body,
                Either::Left((Err(error), _)) => return ended(broke_off(status, error)),
                Either::Right(_) => return ended(AttemptEnd::DeadlinePassed),
            }
        }
        // A fetched answer's body is a stream or none.
        ResponseBody::Empty | ResponseBody::Body(_) => AnswerBody::Complete(Vec::new()),
    };
    let within_cap = matches!(body, AnswerBody::Complete(_));
    let connection_tokens = connection_tokens_in(&headers);
    let answer = OriginAnswer { status, headers, connection_tokens, body };
    (AttemptEnd::Read { status, within_cap }, Some(answer))
}

/// Logs an answer whose head came with `status` and which then broke off (`error`): the
/// outcome is unknown, but the origin did answer, and the status it sent is what the
/// engineer reconciling this key needs first (a 2xx most likely executed).
fn broke_off(status: u16, error: JsValue) -> AttemptEnd {
    let error = worker::Error::from(error);
    console_warn!("origin answered {} and its answer broke off: {}", status, error);
    AttemptEnd::BrokeOff(status)
}

/// The request as the origin gets it: the end-to-end headers (`core::edge_rules::headers`,
/// rule 5), the hop's signature, redirects handed back (following one would be a second
/// request), and the abort signal on the request itself (a service binding's fetch takes
/// no other).
fn build_request(
    target: &str,
    method: &str,
    headers: &Headers,
    body: &JsValue,
    signal: &web_sys::AbortSignal,
    signature: Option<&origin_auth::SignatureHeaders>,
) -> Result<Request, JsValue> {
    let lines = header_lines(headers).map_err(JsValue::from)?;
    let outgoing = edited_copy(headers, &forward_edits(&lines, &[], None, false)).map_err(JsValue::from)?;
    if let Some(signature) = signature {
        origin_auth::apply(&outgoing, signature)?;
    }
    forward::request(method, target, &outgoing, Some(body), Some(signal))
}

/// Reads `raw` (in JavaScript, `boundary::read_up_to`). Within `cap`, the bytes (copied into
/// Wasm once); past it, a stream of the chunks read so far followed by the rest, which is
/// never buffered here.
async fn read_capped(raw: web_sys::ReadableStream, cap: u64) -> Result<AnswerBody, JsValue> {
    Ok(match boundary::read_up_to(&raw, cap, false).await? {
        (Some(body), _) => AnswerBody::Complete(body),
        (None, Some(rest)) => AnswerBody::Streamed(rest),
        (None, None) => return Err(JsValue::from_str("an answer past its cap came without its stream")),
    })
}

/// Opens a TCP connection to the target's host and port (`worker::Socket`), waiting at
/// most `wait_ms`, and closes it. Sends no byte. `None` when it opened; otherwise how the
/// probe ended (the core says nothing was sent: nothing is sent after it). A socket that
/// opened, or was given up on, is closed at once (a late connection is closed as soon as it
/// opens, so it does not linger at the origin); closing is best effort, nothing was sent on
/// it.
async fn probe(target: &str, wait_ms: u64) -> Option<AttemptEnd> {
    let Some((host, port)) = host_and_port(target) else { return Some(AttemptEnd::ProbeFailed) };
    let Ok(mut socket) = worker::Socket::builder().connect(host, port) else {
        return Some(AttemptEnd::ProbeFailed);
    };
    let end = match select(std::pin::pin!(socket.opened()), Delay::from(Duration::from_millis(wait_ms))).await
    {
        Either::Left((Ok(_), _)) => None,
        Either::Left((Err(_), _)) => return Some(AttemptEnd::ProbeFailed),
        Either::Right(_) => {
            console_warn!("origin probe: no connection within {} ms", wait_ms);
            Some(AttemptEnd::ProbeTimedOut)
        }
    };
    wasm_bindgen_futures::spawn_local(async move {
        let _ = socket.close().await;
    });
    end
}

/// Observe mode's split of the origin's answer (`Response.clone`, which tees its body): the
/// answer for the caller, as the origin gave it, and the recording's copy, read beside it up
/// to `cap` bytes (past it, cancelled: the tee never holds a large answer). A WebSocket's
/// answer is passed on whole, with nothing to capture. The caller's half is never lost to
/// the recording: where the copy cannot be made, the caller still gets the answer the
/// origin gave, and the recording a broken body (an unknown outcome).
pub(super) fn split_answer(
    response: Response,
    cap: u64,
) -> (Response, impl std::future::Future<Output = Captured>) {
    // The recording's half: what it holds when known already, else the stream to read.
    let half = match response.body() {
        _ if forward::has_websocket(&response) => Err(Captured::Nothing),
        None => Err(Captured::Whole(Vec::new())),
        Some(_) => match response.clone() {
            Ok(copy) => copy.body().ok_or(Captured::Whole(Vec::new())),
            Err(_) => Err(Captured::Broken),
        },
    };
    (response, async move {
        match half {
            Err(captured) => captured,
            Ok(half) => capture(half, cap).await,
        }
    })
}

/// Reads `half` to its end, or cancels it past `cap` bytes.
async fn capture(half: web_sys::ReadableStream, cap: u64) -> Captured {
    match read_capped(half, cap).await {
        Ok(AnswerBody::Complete(bytes)) => Captured::Whole(bytes),
        Ok(AnswerBody::Streamed(rest)) => {
            // Cancelling it cancels the half it reads the rest from.
            let _ = JsFuture::from(rest.cancel()).await;
            Captured::TooLarge
        }
        Err(_) => Captured::Broken,
    }
}
