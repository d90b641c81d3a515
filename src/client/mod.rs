//! The client half: a reference retrying client for services behind the worker (native
//! targets only).
//!
//! The worker makes retries safe; this client makes them happen, and only when they are
//! useful:
//!
//! - One key per logical operation. An [`Operation`] is created once, with its key, when the
//!   intent is formed (the key can be derived from a business id with [`key_for`]); the retry
//!   loop never makes a key, and every attempt sends the same key, method, path, headers and
//!   body bytes.
//! - Retries only when the request was certainly not executed or its outcome is unknown to
//!   the client: timeouts, connection errors, 409 `in-progress`, 429, 503 and 502
//!   `origin-unreachable`, honouring `Retry-After`. A final answer (2xx, 4xx, 422
//!   `key-reused`, a stored 500) is never retried, and the `outcome-unknown` problem is
//!   reported as [`ClientError::ReconciliationNeeded`] without a retry: the worker will give
//!   every retry the same problem, and only the payment system can say what happened.
//! - Full-jitter exponential backoff with an attempt cap and an overall deadline; the
//!   decisions live in the pure [`policy`] module.
//!
//! ```no_run
//! use idempotency_edge::client::{key_for, ClientError, Operation, RetryConfig, RetryingClient};
//!
//! let client = RetryingClient::new("http://127.0.0.1:8787", RetryConfig::default());
//! // The key is fixed when the intent is: charging order 42.
//! let charge = Operation::post_json(key_for("order-42", "charge"), "/v1/charges", r#"{"amount":1000}"#)
//!     .expect("a valid key and path");
//! match client.send(&charge) {
//!     Ok(outcome) => println!("{} after {} attempt(s), replayed: {}", outcome.response.status, outcome.attempts, outcome.replayed),
//!     Err(ClientError::ReconciliationNeeded { .. }) => println!("ask the payment system whether order 42 was charged"),
//!     Err(e) => println!("failed: {e}"),
//! }
//! ```
//!
//! Transport: [`HttpTransport`] speaks HTTP/1.1 over a plain TCP stream, std only, for
//! `http://` URLs. HTTPS needs a user-supplied [`Transport`] (one method: send one request
//! with a timeout), typically a thin wrapper around the HTTP client the application already
//! uses; that keeps a TLS stack out of this crate's dependencies.

pub mod http;
pub mod policy;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::core::key::{parse_key, MAX_KEY_LEN};

pub use http::{split_url, HttpTransport};
pub use policy::{AttemptResult, Decision, GiveUpReason, RetryConfig, TransportErrorKind};

/// The header that carries the key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

// ---------------------------------------------------------------------------------------
// Transport

/// One HTTP request as a [`Transport`] sends it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    /// Absolute URL.
    pub url: &'a str,
    /// Header lines in order, `Idempotency-Key` included. The transport adds its own
    /// framing headers (`Host`, `Content-Length`, …).
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// A complete HTTP response.
#[derive(Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Header lines as received, in order; lookups ignore case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// `Idempotent-Replayed: true`: the answer was not produced by this request's own
    /// execution (a stored answer, or a running execution's that this request joined).
    pub fn is_replayed(&self) -> bool {
        self.headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case("idempotent-replayed") && v.trim().eq_ignore_ascii_case("true")
        })
    }

    /// The problem `type`, when the answer is `application/problem+json`.
    pub fn problem_type(&self) -> Option<String> {
        policy::problem_type(self.header("content-type"), &self.body)
    }

    /// `Retry-After` as a wait from now.
    pub fn retry_after(&self) -> Option<Duration> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.header("retry-after").and_then(|v| policy::parse_retry_after(v, now))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.text();
        let shown: String = text.chars().take(300).collect();
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &format_args!("{} bytes: {shown:?}", self.body.len()))
            .finish()
    }
}

/// A failure below HTTP, classified for the retry policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportError {
    pub kind: TransportErrorKind,
    pub message: String,
}

impl TransportError {
    pub fn new(kind: TransportErrorKind, message: impl Into<String>) -> Self {
        TransportError { kind, message: message.into() }
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for TransportError {}

/// Sends one HTTP request. Implement it to use another HTTP stack (for HTTPS, say).
///
/// An implementation sends the request once, with exactly the given method, URL, headers
/// and body, and returns the complete response within `timeout` (connect, send and receive
/// together) or an error whose kind says what happened: [`TransportErrorKind::Timeout`]
/// when the time ran out, `ConnectionRefused` when nothing was sent, `ConnectionReset` or
/// `Other` for other failures (all retried), and `Fatal` for one that retrying cannot fix.
/// It must not retry by itself: the client does.
pub trait Transport: Send + Sync {
    fn send(&self, request: &Request<'_>, timeout: Duration) -> Result<Response, TransportError>;
}

// ---------------------------------------------------------------------------------------
// Operations and keys

/// A deterministic key for one logical operation on one business object:
/// `key_for("order-42", "charge")` is `order-42-charge`. The same intent always gets the
/// same key, so even a process that crashes and starts over retries under the first key.
///
/// A new intent needs a new key: charging order 42 again after a final decline is another
/// operation (`key_for("order-42", "charge-2")`). When the result would not be a valid key
/// (over 255 characters, or characters outside printable ASCII or `"` `,` `\`), it is
/// `<action>-sha256-<hex of the composed key>` instead (or `sha256-<hex>` when the action
/// itself is unusable), still deterministic.
pub fn key_for(business_id: impl fmt::Display, action: &str) -> String {
    let key = format!("{business_id}-{action}");
    let plain = |s: &str| s.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b'\\'));
    if !key.is_empty() && key.len() <= MAX_KEY_LEN && plain(&key) {
        return key;
    }
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    if !action.is_empty() && action.len() <= 64 && plain(action) {
        format!("{action}-sha256-{hex}")
    } else {
        format!("sha256-{hex}")
    }
}

/// Why an [`Operation`] could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidOperation(pub String);

impl fmt::Display for InvalidOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid operation: {}", self.0)
    }
}

impl std::error::Error for InvalidOperation {}

/// One logical operation: its key and the exact request every attempt sends. Immutable once
/// built, so no attempt can send another key or payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    key: String,
    /// The key as it goes on the wire: bare, or as an sf-string when it contains a
    /// character a bare key may not.
    wire_key: String,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Headers the client or the transport set; an operation may not carry its own.
const RESERVED_HEADERS: [&str; 5] =
    ["idempotency-key", "host", "content-length", "transfer-encoding", "connection"];

impl Operation {
    /// An operation with this key, method, path (and query) and body. The key follows the
    /// worker's rules: 1 to 255 printable ASCII characters.
    pub fn new(
        key: impl Into<String>,
        method: &str,
        path: &str,
        body: impl Into<Vec<u8>>,
    ) -> Result<Operation, InvalidOperation> {
        let key = key.into();
        let wire_key = wire_key(&key)?;
        if !http::is_valid_method(method) {
            return Err(InvalidOperation(format!("invalid method {method:?}")));
        }
        if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(InvalidOperation(format!(
                "the path must start with / and contain no whitespace or control characters: {path:?}"
            )));
        }
        Ok(Operation {
            key,
            wire_key,
            method: method.to_string(),
            path: path.to_string(),
            headers: Vec::new(),
            body: body.into(),
        })
    }

    /// A `POST` of a JSON body, with `Content-Type: application/json`.
    pub fn post_json(
        key: impl Into<String>,
        path: &str,
        json: impl Into<String>,
    ) -> Result<Operation, InvalidOperation> {
        Operation::new(key, "POST", path, json.into().into_bytes())?
            .header("Content-Type", "application/json")
    }

    /// Adds a header line (repeated names give repeated lines). `Idempotency-Key` is set by
    /// [`Operation::new`], and the framing headers by the transport, so those are refused.
    pub fn header(mut self, name: &str, value: &str) -> Result<Operation, InvalidOperation> {
        if !http::is_valid_header_name(name) || !http::is_valid_header_value(value) {
            return Err(InvalidOperation(format!("invalid header {name:?}")));
        }
        if RESERVED_HEADERS.iter().any(|r| name.eq_ignore_ascii_case(r)) {
            return Err(InvalidOperation(format!("{name} is set by the client, not by the operation")));
        }
        self.headers.push((name.to_string(), value.to_string()));
        Ok(self)
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn method(&self) -> &str {
        &self.method
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

/// The header value for `key`: the key itself when the worker reads it back unchanged,
/// otherwise an sf-string (`"a,b"`); an error when no form is a valid key.
fn wire_key(key: &str) -> Result<String, InvalidOperation> {
    if key.trim() != key {
        return Err(InvalidOperation("The Idempotency-Key must not start or end with whitespace.".into()));
    }
    let reads_as = |wire: &str| parse_key(wire.as_bytes()).ok().filter(|k| k.as_str() == key).is_some();
    if reads_as(key) {
        return Ok(key.to_string());
    }
    let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
    if reads_as(&quoted) {
        return Ok(quoted);
    }
    let why = parse_key(quoted.as_bytes()).err().map_or("The Idempotency-Key is not valid.", |e| e.detail());
    Err(InvalidOperation(why.to_string()))
}

// ---------------------------------------------------------------------------------------
// Results

/// What one attempt got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptSummary {
    Answered { status: u16, replayed: bool, problem_type: Option<String>, retry_after: Option<Duration> },
    TransportFailed(TransportError),
}

/// One attempt, as the client saw and judged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptReport {
    /// 1 for the first attempt.
    pub number: u32,
    /// How long the attempt took.
    pub took: Duration,
    pub result: AttemptSummary,
    pub decision: Decision,
}

impl AttemptReport {
    /// The wait before the next attempt, when there is one.
    pub fn wait(&self) -> Option<Duration> {
        match self.decision {
            Decision::Retry { after } => Some(after),
            _ => None,
        }
    }
}

/// The attempts behind a result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub attempts: u32,
    /// From the first attempt's start to the end of the last.
    pub elapsed: Duration,
    pub history: Vec<AttemptReport>,
}

/// A 2xx answer.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub response: Response,
    /// `Idempotent-Replayed: true`: the answer is the stored (or joined) outcome of an
    /// earlier attempt, not of the last one's own execution.
    pub replayed: bool,
    pub attempts: u32,
    pub elapsed: Duration,
    pub history: Vec<AttemptReport>,
}

/// Why [`RetryingClient::send`] returned no 2xx answer.
#[derive(Clone, Debug)]
pub enum ClientError {
    /// A final answer that is not a success (400, 422 `key-reused`, another 4xx, a stored
    /// 500, …). Not retried: every retry would get the same answer.
    Rejected { response: Response, report: Report },
    /// The worker answered `outcome-unknown`: the operation may or may not have executed,
    /// and the worker will not forward this key again while it retains it. Not retried.
    /// Ask the payment system (by the business id behind the key) what happened.
    ReconciliationNeeded { response: Response, report: Report },
    /// Every attempt got a retryable result and no attempts or time are left. The last
    /// result is kept. Whether the operation executed is not known to the client, but it
    /// is safe to send the same `Operation` again later: its key makes the worker replay
    /// or join the first execution.
    GaveUp { reason: GiveUpReason, last: Result<Response, TransportError>, report: Report },
    /// A transport failure that retrying cannot fix (an `https://` URL with the built-in
    /// transport, a response over its size limit, …).
    Transport { error: TransportError, report: Report },
}

impl ClientError {
    pub fn report(&self) -> &Report {
        match self {
            ClientError::Rejected { report, .. }
            | ClientError::ReconciliationNeeded { report, .. }
            | ClientError::GaveUp { report, .. }
            | ClientError::Transport { report, .. } => report,
        }
    }

    pub fn attempts(&self) -> u32 {
        self.report().attempts
    }

    pub fn needs_reconciliation(&self) -> bool {
        matches!(self, ClientError::ReconciliationNeeded { .. })
    }

    /// The last answer, when there was one.
    pub fn response(&self) -> Option<&Response> {
        match self {
            ClientError::Rejected { response, .. } | ClientError::ReconciliationNeeded { response, .. } => {
                Some(response)
            }
            ClientError::GaveUp { last: Ok(response), .. } => Some(response),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.attempts();
        match self {
            ClientError::Rejected { response, .. } => {
                write!(f, "rejected with {} after {n} attempt(s)", response.status)?;
                if let Some(t) = response.problem_type() {
                    write!(f, " ({t})")?;
                }
                Ok(())
            }
            ClientError::ReconciliationNeeded { .. } => {
                write!(f, "outcome unknown after {n} attempt(s): reconcile with the payment system")
            }
            ClientError::GaveUp { reason, last, .. } => {
                let why = match reason {
                    GiveUpReason::AttemptsExhausted => "no attempts left",
                    GiveUpReason::DeadlineExceeded => "deadline reached",
                };
                write!(f, "gave up after {n} attempt(s), {why}; last: ")?;
                match last {
                    Ok(response) => write!(f, "{}", response.status),
                    Err(e) => write!(f, "{e}"),
                }
            }
            ClientError::Transport { error, .. } => {
                write!(f, "transport failure after {n} attempt(s): {error}")
            }
        }
    }
}

impl std::error::Error for ClientError {}

// ---------------------------------------------------------------------------------------
// The client

type RandomSource = Box<dyn Fn() -> f64 + Send + Sync>;
type Sleeper = Box<dyn Fn(Duration) + Send + Sync>;

/// Sends [`Operation`]s through the worker, retrying as [`policy`] decides. Shareable
/// between threads.
pub struct RetryingClient {
    base_url: String,
    config: RetryConfig,
    transport: Box<dyn Transport>,
    random: RandomSource,
    sleep: Sleeper,
}

impl fmt::Debug for RetryingClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryingClient")
            .field("base_url", &self.base_url)
            .field("config", &self.config)
            .finish()
    }
}

impl RetryingClient {
    /// A client for `base_url` (`scheme://host[:port]`, operations add their paths) over
    /// the built-in [`HttpTransport`].
    pub fn new(base_url: impl Into<String>, config: RetryConfig) -> Self {
        RetryingClient {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            config,
            transport: Box::new(HttpTransport::new()),
            random: Box::new(random_unit),
            sleep: Box::new(thread::sleep),
        }
    }

    /// Uses another transport (for HTTPS, or to add behaviour around each attempt).
    pub fn with_transport(mut self, transport: impl Transport + 'static) -> Self {
        self.transport = Box::new(transport);
        self
    }

    /// Replaces the jitter source (values in `[0, 1]`), for deterministic tests.
    pub fn with_random(mut self, random: impl Fn() -> f64 + Send + Sync + 'static) -> Self {
        self.random = Box::new(random);
        self
    }

    /// Replaces how the client waits between attempts, for tests.
    pub fn with_sleep(mut self, sleep: impl Fn(Duration) + Send + Sync + 'static) -> Self {
        self.sleep = Box::new(sleep);
        self
    }

    pub fn config(&self) -> &RetryConfig {
        &self.config
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Sends `op` until the policy says stop. `Ok` only for a 2xx answer.
    pub fn send(&self, op: &Operation) -> Result<Outcome, ClientError> {
        self.send_observed(op, |_| {})
    }

    /// [`RetryingClient::send`], calling `observe` after each attempt is judged (before
    /// the wait that may follow it).
    pub fn send_observed(
        &self,
        op: &Operation,
        mut observe: impl FnMut(&AttemptReport),
    ) -> Result<Outcome, ClientError> {
        // The request is built once: every attempt sends these very bytes.
        let url = format!("{}{}", self.base_url, op.path);
        let mut headers = op.headers.clone();
        headers.push((IDEMPOTENCY_KEY_HEADER.to_string(), op.wire_key.clone()));
        let request = Request { method: &op.method, url: &url, headers: &headers, body: &op.body };

        let started = Instant::now();
        let mut history: Vec<AttemptReport> = Vec::new();
        let mut last: Option<Result<Response, TransportError>> = None;
        for number in 1u32.. {
            let timeout = match (self.config.attempt_timeout_at(started.elapsed()), last.take()) {
                (Some(timeout), _) => timeout,
                // A wait overran the deadline: give up with the result that led to it.
                (None, Some(last)) => {
                    let report = report(started, history);
                    return Err(ClientError::GaveUp { reason: GiveUpReason::DeadlineExceeded, last, report });
                }
                // A zero deadline still allows one (instant) attempt.
                (None, None) => Duration::from_millis(1),
            };
            let attempt_started = Instant::now();
            let result = self.transport.send(&request, timeout);
            let took = attempt_started.elapsed();

            let (summary, decision) = match &result {
                Ok(response) => {
                    let problem_type = response.problem_type();
                    let retry_after = response.retry_after();
                    let facts = AttemptResult::Response {
                        status: response.status,
                        retry_after,
                        problem_type: problem_type.as_deref(),
                    };
                    let decision = self.config.decide(facts, number, started.elapsed(), (self.random)());
                    let summary = AttemptSummary::Answered {
                        status: response.status,
                        replayed: response.is_replayed(),
                        problem_type,
                        retry_after,
                    };
                    (summary, decision)
                }
                Err(error) => {
                    let facts = AttemptResult::Transport(error.kind);
                    let decision = self.config.decide(facts, number, started.elapsed(), (self.random)());
                    (AttemptSummary::TransportFailed(error.clone()), decision)
                }
            };
            let attempt = AttemptReport { number, took, result: summary, decision };
            observe(&attempt);
            history.push(attempt);

            match (decision, result) {
                (Decision::Retry { after }, result) => {
                    last = Some(result);
                    (self.sleep)(after);
                }
                (Decision::Done, Ok(response)) => {
                    let report = report(started, history);
                    return Ok(Outcome {
                        replayed: response.is_replayed(),
                        response,
                        attempts: report.attempts,
                        elapsed: report.elapsed,
                        history: report.history,
                    });
                }
                (Decision::NeedsReconciliation, Ok(response)) => {
                    return Err(ClientError::ReconciliationNeeded {
                        response,
                        report: report(started, history),
                    })
                }
                (Decision::GiveUp(reason), last) => {
                    return Err(ClientError::GaveUp { reason, last, report: report(started, history) })
                }
                (_, Ok(response)) => {
                    return Err(ClientError::Rejected { response, report: report(started, history) })
                }
                (_, Err(error)) => {
                    return Err(ClientError::Transport { error, report: report(started, history) })
                }
            }
        }
        unreachable!("the attempt loop returns")
    }
}

fn report(started: Instant, history: Vec<AttemptReport>) -> Report {
    Report { attempts: history.len() as u32, elapsed: started.elapsed(), history }
}

/// A uniform value in `[0, 1)` from std's randomly keyed hasher (no `rand` dependency; the
/// jitter only has to decorrelate clients, not be unpredictable).
fn random_unit() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    type Sent = (String, String, Vec<(String, String)>, Vec<u8>, Duration);

    /// Answers from a script and records every request.
    #[derive(Clone, Default)]
    struct Scripted {
        script: Arc<Mutex<VecDeque<Result<Response, TransportError>>>>,
        sent: Arc<Mutex<Vec<Sent>>>,
    }

    impl Scripted {
        fn new(script: Vec<Result<Response, TransportError>>) -> Self {
            Scripted { script: Arc::new(Mutex::new(script.into())), sent: Arc::default() }
        }

        fn sent(&self) -> Vec<Sent> {
            self.sent.lock().unwrap().clone()
        }
    }

    impl Transport for Scripted {
        fn send(&self, r: &Request<'_>, timeout: Duration) -> Result<Response, TransportError> {
            self.sent.lock().unwrap().push((
                r.method.to_string(),
                r.url.to_string(),
                r.headers.to_vec(),
                r.body.to_vec(),
                timeout,
            ));
            self.script.lock().unwrap().pop_front().expect("the script ran out: too many attempts")
        }
    }

    fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Result<Response, TransportError> {
        Ok(Response {
            status,
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            body: body.as_bytes().to_vec(),
        })
    }

    fn problem(status: u16, kind: &str, retry_after: Option<&str>) -> Result<Response, TransportError> {
        let mut headers = vec![("content-type", "application/problem+json")];
        if let Some(seconds) = retry_after {
            headers.push(("retry-after", seconds));
        }
        let body = format!(
            r#"{{"type":"urn:idempotency-edge:problem:{kind}","status":{status},"title":"t","detail":"d"}}"#
        );
        answer(status, &headers, &body)
    }

    fn failed(kind: TransportErrorKind) -> Result<Response, TransportError> {
        Err(TransportError::new(kind, "scripted"))
    }

    fn config() -> RetryConfig {
        RetryConfig {
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            max_attempts: 5,
            deadline: Duration::from_secs(60),
            attempt_timeout: Duration::from_secs(10),
        }
    }

    /// A client over `transport` whose waits are recorded, not slept, with jitter 1.0.
    fn client(transport: &Scripted, config: RetryConfig) -> (RetryingClient, Arc<Mutex<Vec<Duration>>>) {
        let slept = Arc::new(Mutex::new(Vec::new()));
        let record = slept.clone();
        let client = RetryingClient::new("http://127.0.0.1:8787/", config)
            .with_transport(transport.clone())
            .with_random(|| 1.0)
            .with_sleep(move |d| record.lock().unwrap().push(d));
        (client, slept)
    }

    fn charge() -> Operation {
        Operation::post_json("order-42-charge", "/v1/charges?x=1", r#"{"amount":1000}"#)
            .unwrap()
            .header("Authorization", "Bearer t")
            .unwrap()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn retries_a_lost_reply_with_the_same_key_and_payload() {
        use TransportErrorKind::*;
        let t = Scripted::new(vec![
            failed(Timeout),
            failed(ConnectionReset),
            failed(ConnectionRefused),
            failed(Other),
            answer(201, &[("Idempotent-Replayed", "true")], r#"{"id":"ch_1"}"#),
        ]);
        let (c, slept) = client(&t, config());
        let mut observed = Vec::new();
        let outcome = c.send_observed(&charge(), |a| observed.push(a.clone())).unwrap();
        assert_eq!(outcome.response.status, 201);
        assert!(outcome.replayed);
        assert_eq!(outcome.attempts, 5);
        assert_eq!(outcome.history, observed, "the observer saw every attempt, in order");
        assert_eq!(*slept.lock().unwrap(), [ms(100), ms(200), ms(400), ms(800)]);
        let waits: Vec<_> = outcome.history.iter().map(AttemptReport::wait).collect();
        assert_eq!(waits, [Some(ms(100)), Some(ms(200)), Some(ms(400)), Some(ms(800)), None]);

        let sent = t.sent();
        assert_eq!(sent.len(), 5);
        let (method, url, headers, body, timeout) = &sent[0];
        assert_eq!(method, "POST");
        assert_eq!(url, "http://127.0.0.1:8787/v1/charges?x=1");
        assert_eq!(
            headers,
            &[
                ("Content-Type".to_string(), "application/json".to_string()),
                ("Authorization".to_string(), "Bearer t".to_string()),
                ("Idempotency-Key".to_string(), "order-42-charge".to_string()),
            ]
        );
        assert_eq!(body, br#"{"amount":1000}"#);
        assert_eq!(*timeout, Duration::from_secs(10));
        for other in &sent[1..] {
            assert_eq!(&other.0, method);
            assert_eq!(&other.1, url);
            assert_eq!(&other.2, headers, "every attempt carries the same key and headers");
            assert_eq!(&other.3, body, "every attempt carries the same body");
        }
    }

    #[test]
    fn a_first_success_is_one_attempt_not_replayed() {
        let t = Scripted::new(vec![answer(201, &[], "{}")]);
        let (c, slept) = client(&t, config());
        let outcome = c.send(&charge()).unwrap();
        assert_eq!((outcome.attempts, outcome.replayed), (1, false));
        assert!(slept.lock().unwrap().is_empty());
        assert_eq!(outcome.history[0].decision, Decision::Done);
    }

    #[test]
    fn in_progress_waits_for_retry_after() {
        let t = Scripted::new(vec![
            problem(409, "in-progress", Some("3")),
            answer(201, &[("idempotent-replayed", "true")], "{}"),
        ]);
        let (c, slept) = client(&t, config());
        let outcome = c.send(&charge()).unwrap();
        assert_eq!(outcome.attempts, 2);
        assert!(outcome.replayed);
        assert_eq!(*slept.lock().unwrap(), [Duration::from_secs(3)], "Retry-After over the 100 ms backoff");
        match &outcome.history[0].result {
            AttemptSummary::Answered { status: 409, problem_type: Some(t), retry_after: Some(r), .. } => {
                assert!(t.ends_with(":in-progress"));
                assert_eq!(*r, Duration::from_secs(3));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn origin_unreachable_429_and_503_are_retried() {
        let t = Scripted::new(vec![
            problem(502, "origin-unreachable", Some("1")),
            answer(429, &[("Retry-After", "2")], "{}"),
            answer(503, &[], "{}"),
            problem(503, "storage-unavailable", Some("1")),
            answer(200, &[], "ok"),
        ]);
        let (c, slept) = client(&t, config());
        let outcome = c.send(&charge()).unwrap();
        assert_eq!(outcome.attempts, 5);
        assert!(!outcome.replayed);
        assert_eq!(*slept.lock().unwrap(), [ms(1000), ms(2000), ms(400), ms(1000)]);
    }

    #[test]
    fn final_answers_are_not_retried() {
        for (label, result) in [
            ("422 key-reused", problem(422, "key-reused", None)),
            ("400 invalid-key", problem(400, "invalid-key", None)),
            ("402 from the origin", answer(402, &[], "{}")),
            ("409 from the origin", answer(409, &[], "{}")),
            ("500 stored as final", answer(500, &[], "{}")),
            ("502 from the origin", answer(502, &[("content-type", "application/json")], "{}")),
        ] {
            let status = result.as_ref().unwrap().status;
            let t = Scripted::new(vec![result]);
            let (c, slept) = client(&t, config());
            match c.send(&charge()) {
                Err(ClientError::Rejected { response, report }) => {
                    assert_eq!(response.status, status, "{label}");
                    assert_eq!(report.attempts, 1, "{label}");
                    assert_eq!(report.history[0].decision, Decision::Fail, "{label}");
                }
                other => panic!("{label}: {other:?}"),
            }
            assert!(slept.lock().unwrap().is_empty(), "{label}");
            assert_eq!(t.sent().len(), 1, "{label}");
        }
    }

    #[test]
    fn outcome_unknown_needs_reconciliation_without_a_retry() {
        let t = Scripted::new(vec![problem(502, "outcome-unknown", None)]);
        let (c, _) = client(&t, config());
        let e = c.send(&charge()).unwrap_err();
        assert!(e.needs_reconciliation(), "{e:?}");
        assert_eq!(e.attempts(), 1);
        assert_eq!(e.response().map(|r| r.status), Some(502));
        assert!(e.to_string().contains("reconcile"), "{e}");
        assert_eq!(t.sent().len(), 1);
    }

    #[test]
    fn gives_up_after_the_attempt_cap() {
        let t = Scripted::new((0..3).map(|_| answer(503, &[("Retry-After", "1")], "{}")).collect());
        let (c, slept) = client(&t, RetryConfig { max_attempts: 3, ..config() });
        match c.send(&charge()) {
            Err(ClientError::GaveUp { reason: GiveUpReason::AttemptsExhausted, last: Ok(last), report }) => {
                assert_eq!(last.status, 503);
                assert_eq!(report.attempts, 3);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(*slept.lock().unwrap(), [ms(1000), ms(1000)]);
        assert_eq!(t.sent().len(), 3);
    }

    #[test]
    fn gives_up_when_the_wait_passes_the_deadline() {
        let t = Scripted::new(vec![answer(429, &[("Retry-After", "120")], "{}")]);
        let (c, slept) = client(&t, config());
        match c.send(&charge()) {
            Err(ClientError::GaveUp { reason: GiveUpReason::DeadlineExceeded, report, .. }) => {
                assert_eq!(report.attempts, 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(slept.lock().unwrap().is_empty(), "no sleeping in vain");
    }

    #[test]
    fn a_timeout_at_the_end_is_a_give_up_with_the_transport_error() {
        let t = Scripted::new(vec![failed(TransportErrorKind::Timeout)]);
        let (c, _) = client(&t, RetryConfig { max_attempts: 1, ..config() });
        match c.send(&charge()) {
            Err(ClientError::GaveUp { last: Err(e), .. }) => assert_eq!(e.kind, TransportErrorKind::Timeout),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_attempt_timeout_is_cut_to_the_deadline() {
        let t = Scripted::new(vec![answer(201, &[], "{}")]);
        let (c, _) = client(&t, RetryConfig { deadline: Duration::from_secs(2), ..config() });
        c.send(&charge()).unwrap();
        let timeout = t.sent()[0].4;
        assert!(timeout <= Duration::from_secs(2) && timeout > Duration::from_millis(1900), "{timeout:?}");
    }

    #[test]
    fn a_fatal_transport_error_is_not_retried() {
        let t = Scripted::new(vec![failed(TransportErrorKind::Fatal)]);
        let (c, _) = client(&t, config());
        match c.send(&charge()) {
            Err(ClientError::Transport { error, report }) => {
                assert_eq!(error.kind, TransportErrorKind::Fatal);
                assert_eq!(report.attempts, 1);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn https_with_the_built_in_transport_fails_at_once() {
        let c = RetryingClient::new("https://api.example.com", config());
        match c.send(&charge()) {
            Err(ClientError::Transport { error, report }) => {
                assert_eq!(error.kind, TransportErrorKind::Fatal);
                assert_eq!(report.attempts, 1);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_follow_the_worker_rules() {
        let op = |key: &str| Operation::new(key, "POST", "/x", Vec::new());
        assert_eq!(op("order-42-charge").unwrap().wire_key, "order-42-charge");
        assert_eq!(
            op("550e8400-e29b-41d4-a716-446655440000").unwrap().key(),
            "550e8400-e29b-41d4-a716-446655440000"
        );
        // Characters a bare key may not hold travel as an sf-string.
        assert_eq!(op("a,b").unwrap().wire_key, r#""a,b""#);
        assert_eq!(op(r#"say "hi""#).unwrap().wire_key, r#""say \"hi\"""#);
        assert_eq!(op(r"back\slash").unwrap().wire_key, r#""back\\slash""#);
        assert_eq!(op(&"k".repeat(255)).unwrap().key().len(), 255);
        for bad in ["", " ", " padded", "padded ", "tab\tinside", "new\nline", "clé", "\u{7f}"] {
            assert!(op(bad).is_err(), "{bad:?}");
        }
        assert!(op(&"k".repeat(256)).is_err());
    }

    #[test]
    fn operations_refuse_what_the_client_sets() {
        let base = || Operation::post_json("k", "/v1/charges", "{}").unwrap();
        for name in [
            "Idempotency-Key",
            "idempotency-key",
            "Host",
            "Content-Length",
            "Transfer-Encoding",
            "Connection",
        ] {
            assert!(base().header(name, "x").is_err(), "{name}");
        }
        assert!(base().header("X-A", "b\r\nX-Injected: 1").is_err());
        assert!(base().header("Bad Name", "v").is_err());
        assert!(base().header("X-Request-Source", "batch").is_ok());
        for path in ["v1/charges", "/v1/a b", "", "http://x/y"] {
            assert!(Operation::new("k", "POST", path, Vec::new()).is_err(), "{path:?}");
        }
        assert!(Operation::new("k", "PO ST", "/x", Vec::new()).is_err());
        assert_eq!(base().headers(), &[("Content-Type".to_string(), "application/json".to_string())]);
        assert_eq!(base().method(), "POST");
        assert_eq!(base().path(), "/v1/charges");
        assert_eq!(base().body(), b"{}");
    }

    #[test]
    fn key_for_is_deterministic_and_always_valid() {
        assert_eq!(key_for("order-42", "charge"), "order-42-charge");
        assert_eq!(key_for(format!("order-{}", 42), "refund"), "order-42-refund");
        assert_eq!(key_for(42, "charge"), "42-charge");
        let long = "x".repeat(300);
        let odd = "client@example.com, order 7";
        for (id, action) in
            [(long.as_str(), "charge"), (odd, "charge"), ("é", "charge"), ("id", "bad action")]
        {
            let key = key_for(id, action);
            assert_eq!(key, key_for(id, action), "deterministic");
            assert!(Operation::new(key.clone(), "POST", "/x", Vec::new()).is_ok(), "{key}");
            assert!(key.len() <= 255);
        }
        assert!(key_for(&long, "charge").starts_with("charge-sha256-"));
        assert!(key_for("id", "bad action").starts_with("sha256-"));
        assert_ne!(key_for(&long, "charge"), key_for(&long, "refund"));
    }

    #[test]
    fn random_values_are_in_range_and_vary() {
        let values: Vec<f64> = (0..1000).map(|_| random_unit()).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        let low = values.iter().filter(|v| **v < 0.5).count();
        assert!((350..650).contains(&low), "roughly uniform: {low} of 1000 below 0.5");
    }
}
