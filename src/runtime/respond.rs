//! Turns core values into `Response`s. Owns no decision.

use worker::{Env, Headers, Response, ResponseBuilder, Result};

use super::metrics;
use crate::core::log::{Decision, RequestLog};
use crate::core::machine::problem_response;
use crate::core::problem::Problem;
use crate::core::record::StoredResponse;

/// The header that marks every answer that did not come from this request's own execution.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// A problem+json response.
pub fn problem(problem: &Problem) -> Result<Response> {
    stored(&problem_response(problem), false)
}

/// A problem+json response for a request refused before it reached a key's object, with
/// its log line (no object: none exists for it).
pub fn refused(env: &Env, problem: &Problem) -> Result<Response> {
    let log = RequestLog {
        object: None,
        decision: Decision::Rejected(problem.kind),
        status: problem.status(),
        origin_status: None,
        origin_ms: None,
        wait_ms: None,
    };
    metrics::record(env, &log);
    self::problem(problem)
}

/// A stored response, marked `Idempotent-Replayed: true` when `replayed`.
pub fn stored(response: &StoredResponse, replayed: bool) -> Result<Response> {
    let headers = Headers::new();
    for (name, value) in &response.headers {
        headers.append(name, value)?;
    }
    if replayed {
        headers.set(REPLAYED_HEADER, "true")?;
    }
    Ok(build(response.status, headers, response.body.clone()))
}

/// A response from parts. Statuses that may not carry a body get none (the runtime throws
/// otherwise).
pub fn build(status: u16, headers: Headers, body: Vec<u8>) -> Response {
    let builder = ResponseBuilder::new().with_status(status).with_headers(headers);
    if matches!(status, 101 | 204 | 205 | 304) {
        builder.empty()
    } else {
        builder.fixed(body)
    }
}
