//! The assertions every end-to-end test shares, so that each is equally strict: the
//! origin's own answer, a replay of a given answer, an RFC 9457 problem.

use super::http::Response;

pub const PROBLEM_PREFIX: &str = "urn:idempotency-edge:problem:";

/// Whether the answer is `application/problem+json`.
pub fn is_problem(r: &Response) -> bool {
    r.header("content-type").unwrap_or("").to_ascii_lowercase().starts_with("application/problem+json")
}

/// The problem kind of a problem+json answer (`in-progress`, …), if it is one.
pub fn problem_kind(r: &Response) -> Option<String> {
    if !is_problem(r) {
        return None;
    }
    let body: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
    body["type"].as_str()?.strip_prefix(PROBLEM_PREFIX).map(str::to_string)
}

/// Checks an RFC 9457 problem of this status and kind: the content type, `type`, `status`,
/// `title` and `detail`, and a `Retry-After` of whole seconds ≥ 1 on the kinds that promise
/// one (409 `in-progress`, 503 `storage-unavailable`).
pub fn check_problem(r: &Response, status: u16, kind: &str) -> Result<(), String> {
    if r.status != status {
        return Err(format!("expected {status} {kind}, got HTTP {} {}", r.status, short(r)));
    }
    if !is_problem(r) {
        return Err(format!("expected application/problem+json, got {:?}", r.header("content-type")));
    }
    let body: serde_json::Value =
        serde_json::from_slice(&r.body).map_err(|e| format!("problem body is not JSON: {e}"))?;
    if body["type"] != format!("{PROBLEM_PREFIX}{kind}") || body["status"] != status {
        return Err(format!("expected type {kind} and status {status}, got {body}"));
    }
    if !body["title"].is_string() || !body["detail"].is_string() {
        return Err(format!("a problem has a title and a detail: {body}"));
    }
    if matches!(kind, "in-progress" | "storage-unavailable") {
        match r.header("retry-after").map(|v| v.trim().parse::<u64>()) {
            Some(Ok(seconds)) if seconds >= 1 => {}
            other => return Err(format!("{kind} needs Retry-After of whole seconds >= 1, got {other:?}")),
        }
    }
    Ok(())
}

/// Asserts [`check_problem`].
pub fn assert_problem(r: &Response, status: u16, kind: &str) {
    if let Err(e) = check_problem(r, status, kind) {
        panic!("{e}\nresponse: {r:?}");
    }
}

/// Three calls within one minute against a `limit = 2` binding: the first two are served
/// (201), the third is 429 `rate-limited`.
pub fn assert_limited_on_the_third(answers: &[Response]) {
    assert_eq!(answers.len(), 3, "three calls");
    for served in &answers[..2] {
        assert_eq!(served.status, 201, "{served:?}");
    }
    assert_problem(&answers[2], 429, "rate-limited");
}

/// `Retry-After` in whole seconds; panics without one.
pub fn retry_after_seconds(r: &Response) -> u64 {
    let value = r.header("retry-after").unwrap_or_else(|| panic!("no Retry-After: {r:?}"));
    value.trim().parse().unwrap_or_else(|_| panic!("Retry-After is not whole seconds: {r:?}"))
}

/// Asserts an answer made by the test origin with this status (its `x-origin-execution`
/// header and its JSON body agree); returns the body. A bodiless status (204, 304) has
/// only the header.
pub fn assert_from_origin(r: &Response, status: u16) -> serde_json::Value {
    assert_eq!(r.status, status, "expected {status} from the origin, got {r:?}");
    let execution =
        r.header("x-origin-execution").unwrap_or_else(|| panic!("not the origin's answer: {r:?}"));
    if matches!(status, 204 | 304) {
        assert!(r.body.is_empty(), "a {status} has no body: {r:?}");
        return serde_json::json!({ "execution": execution.parse::<u64>().unwrap_or(0) });
    }
    let body = r.json();
    assert_eq!(body["execution"].to_string(), execution, "body and x-origin-execution disagree: {r:?}");
    body
}

/// Asserts the origin's answer to the request's own execution: from the origin, and not
/// marked replayed.
pub fn assert_executed(r: &Response, status: u16) -> serde_json::Value {
    let body = assert_from_origin(r, status);
    assert!(!r.is_replayed(), "the executing request's own answer is not marked replayed: {r:?}");
    body
}

/// Asserts that `replay` replays `original`: the same status and body bytes, the same
/// stored headers (every header of the original but `Set-Cookie` and hop-by-hop ones, with
/// repeated lines in order), `Idempotent-Replayed: true`, and no `Set-Cookie`.
pub fn assert_replay_of(replay: &Response, original: &Response) {
    let both = || format!("original {original:?}\nreplay {replay:?}");
    assert_eq!(replay.status, original.status, "replay status; {}", both());
    assert_eq!(replay.body, original.body, "replay body bytes; {}", both());
    assert!(replay.is_replayed(), "replay lacks Idempotent-Replayed: true: {replay:?}");
    assert!(!replay.has_header("set-cookie"), "a replay must not carry Set-Cookie: {replay:?}");
    for name in stored_header_names(original) {
        assert_eq!(replay.header_all(&name), original.header_all(&name), "replay header {name}; {}", both());
    }
}

/// The names of the original answer's headers that a replay keeps.
fn stored_header_names(r: &Response) -> Vec<String> {
    const NOT_STORED: &[&str] = &[
        "set-cookie",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "content-length",
        "date",
        "idempotent-replayed",
    ];
    let named_by_connection: Vec<String> = r
        .header_all("connection")
        .iter()
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    let mut names: Vec<String> = r
        .headers
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .filter(|n| !NOT_STORED.contains(&n.as_str()) && !named_by_connection.contains(n))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The start of a body, for messages (never used for request bodies or keys).
fn short(r: &Response) -> String {
    r.text().chars().take(160).collect()
}
