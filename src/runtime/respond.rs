//! Turns core values into the runtime's `Response`s. Owns no decision: which headers an
//! answer from the store carries, and which statuses carry a body, are
//! `core::edge_rules::headers`'s (rule 6).
//!
//! Works on the raw `web_sys` types where a response is built from a body held in Rust or
//! in JavaScript: `worker`'s `ResponseBuilder` takes a body only as an owned `Vec` (one more
//! copy) and reads a `Response` back into a new one on every conversion. The answers built
//! without such a body (admin views, observe mode's verdict) are `worker`'s.

use std::sync::Arc;

use wasm_bindgen::JsValue;
use web_sys::{Blob, Headers, Response, ResponseInit};

use super::chunks::Source;
use super::metrics;
use super::origin::{AnswerBody, OriginAnswer};
use crate::core::edge_rules::headers::{carries_body, pass_to_caller, replay_headers};
use crate::core::edge_rules::log::{LineContext, RequestLog};
use crate::core::edge_rules::wire::{Answered, ANSWERED_HEADER, ANSWERED_PLAIN};
use crate::core::formats::key_record::{AttemptId, StoredResponse};
use crate::core::key_rules::machine::problem_response;
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::problem::Problem;
use crate::core::vocabulary::trace::Trace;
use worker::{Env, ResponseBuilder, Result};

/// A problem+json response.
pub fn problem(problem: &Problem) -> Result<Response> {
    stored(&problem_response(problem))
}

/// A problem+json response for a request refused before it reached a key's object, with
/// its log line (no object: none exists for it); both name the request (`trace`).
pub fn refused(env: &Env, problem: &Problem, trace: &Trace) -> Result<Response> {
    let log = RequestLog::new(None, Decision::Rejected(problem.kind), problem.status(), None);
    refused_as(env, &log, problem, trace)
}

/// A refusal with the log line `log` says (one that names the object it was for, say),
/// written before the problem is answered; both name the request (`trace`).
pub fn refused_as(env: &Env, log: &RequestLog, problem: &Problem, trace: &Trace) -> Result<Response> {
    metrics::write_point_in(env, log, LineContext { trace: Some(trace), ..LineContext::default() });
    traced_problem(problem, trace)
}

/// A stored response as the caller whose request made it gets it (never marked replayed:
/// replays go through `Prepared`).
pub fn stored(response: &StoredResponse) -> Result<Response> {
    build(response.status, &headers_from(&replay_headers(&response.headers, false, None))?, &response.body)
}

/// A `Headers` of `lines`, in order.
fn headers_from(lines: &[(&str, &str)]) -> Result<Headers> {
    let headers = Headers::new()?;
    for (name, value) in lines {
        headers.append(name, value)?;
    }
    Ok(headers)
}

/// The status and headers of a response.
fn init(status: u16, headers: &Headers) -> ResponseInit {
    let init = ResponseInit::new();
    init.set_status(status);
    init.set_headers(headers);
    init
}

/// A response from parts. Statuses that may not carry a body get none (the runtime throws
/// otherwise).
pub fn build(status: u16, headers: &Headers, body: &[u8]) -> Result<Response> {
    let init = init(status, headers);
    let response = if !carries_body(status) {
        Response::new_with_opt_str_and_init(None, &init)?
    } else {
        let body = js_sys::Uint8Array::from(body);
        Response::new_with_opt_buffer_source_and_init(Some(&body), &init)?
    };
    Ok(response)
}

/// A stored answer made ready for replays once per object life: the headers (with
/// `Idempotent-Replayed: true` and the object's answer marker) as one `Headers`, the body as
/// one `Blob`. Every replay and every coalesced waiter is then one `new Response(blob,
/// init)`: the runtime copies the headers but shares the blob's bytes, so a hundred waiters
/// hold one body, not a hundred.
///
/// A large answer read back from storage (`runtime::chunks`) has no blob: each replay is a
/// stream over its chunk rows, so no replay holds the body whole.
pub struct Prepared {
    stored: Arc<StoredResponse>,
    /// Why the runtime refused to build them (stored headers it does not take): building
    /// each response from `stored` would fail the same way, so every replay fails with it.
    parts: std::result::Result<(Headers, Option<Blob>), String>,
    chunks: Option<Source>,
}

impl Prepared {
    pub fn new(stored: Arc<StoredResponse>, chunks: Option<Source>) -> Prepared {
        let parts = prepare(&stored, chunks.is_none()).map_err(|error| error.to_string());
        Prepared { stored, parts, chunks }
    }

    /// Whether this is the preparation of `stored` (the same stored answer, not an equal one).
    pub fn is_for(&self, stored: &Arc<StoredResponse>) -> bool {
        Arc::ptr_eq(&self.stored, stored)
    }

    /// One replay of the answer, marked as the object's own.
    pub fn response(&self) -> Result<Response> {
        let (headers, body) = self.parts.as_ref().map_err(|error| worker::Error::RustError(error.clone()))?;
        if let Some(chunks) = &self.chunks {
            return streamed(self.stored.status, headers, chunks);
        }
        Ok(Response::new_with_opt_blob_and_init(body.as_ref(), &init(self.stored.status, headers))?)
    }

    /// The answer for the caller whose request executed: `headers` (its own, cookies
    /// included) around the same body the waiters share.
    pub fn live(&self, headers: &Headers) -> Result<Response> {
        match &self.parts {
            Ok((_, body)) if self.chunks.is_none() => {
                Ok(Response::new_with_opt_blob_and_init(body.as_ref(), &init(self.stored.status, headers))?)
            }
            _ => build(self.stored.status, headers, &self.stored.body),
        }
    }
}

fn streamed(status: u16, headers: &Headers, chunks: &Source) -> Result<Response> {
    Ok(Response::new_with_opt_readable_stream_and_init(Some(&chunks.stream()), &init(status, headers))?)
}

/// A replay's headers, marked as the object's own, and its body (none for a chunked one).
fn prepare(stored: &StoredResponse, with_body: bool) -> Result<(Headers, Option<Blob>)> {
    let headers =
        headers_from(&replay_headers(&stored.headers, true, Some((ANSWERED_HEADER, ANSWERED_PLAIN))))?;
    let body = if !carries_body(stored.status) || !with_body {
        None
    } else {
        let parts = js_sys::Array::of1(&js_sys::Uint8Array::from(stored.body.as_slice()));
        Some(Blob::new_with_u8_array_sequence(&JsValue::from(parts))?)
    };
    Ok((headers, body))
}

/// A problem answered to the request `trace` names (its `instance`).
pub fn traced_problem(refusal: &Problem, trace: &Trace) -> Result<Response> {
    problem(&refusal.clone().for_request(Some(trace)))
}

/// Marks an answer as the object's own (`core::edge_rules::wire::ANSWERED_HEADER`). Prepared replays carry
/// the marker already. Should the answer's headers be immutable, it is rebuilt around the
/// same body with a marked copy of them.
pub fn marked(response: Result<Response>) -> Result<Response> {
    let response = response?;
    let headers = response.headers();
    if headers.has(ANSWERED_HEADER)? || headers.set(ANSWERED_HEADER, ANSWERED_PLAIN).is_ok() {
        return Ok(response);
    }
    let copy = Headers::new_with_headers(&headers)?;
    copy.set(ANSWERED_HEADER, ANSWERED_PLAIN)?;
    rewrapped(&response, &copy)
}

/// `response`'s status and body around `headers`: a fetched answer's own are immutable.
pub fn rewrapped(response: &Response, headers: &Headers) -> Result<Response> {
    let init = init(response.status(), headers);
    Ok(Response::new_with_opt_readable_stream_and_init(response.body().as_ref(), &init)?)
}

/// Observe mode's answer to the Worker: 204, marked with the decision (and the claimed
/// attempt).
pub fn observed_decision(decision: Decision, claimed: Option<AttemptId>) -> Result<Response> {
    let mark = Answered::Observed { decision, claimed }.encode();
    Ok(ResponseBuilder::new().with_status(204).with_header(ANSWERED_HEADER, &mark)?.empty().into())
}

/// 200 with `value` as JSON (the admin API's views).
pub fn json(value: &serde_json::Value) -> Result<Response> {
    Ok(worker::Response::from_json(value)?.into())
}

/// The origin's answer for the caller whose request executed: every end-to-end header,
/// cookies included; the body the waiters share (`prepared`, which `OriginAnswer::take_storable` moved it
/// into), or one over the stored-size cap as the stream it is.
pub fn live(answer: OriginAnswer, prepared: &Prepared) -> Result<Response> {
    let headers = Headers::new()?;
    for (name, value) in &answer.headers {
        if pass_to_caller(name, &answer.connection_tokens) {
            headers.append(name, value)?;
        }
    }
    match answer.body {
        AnswerBody::Complete(_) => prepared.live(&headers),
        AnswerBody::Streamed(stream) => Ok(Response::new_with_opt_readable_stream_and_init(
            Some(&stream),
            &init(answer.status, &headers),
        )?),
    }
}
