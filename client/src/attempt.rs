//! What one attempt produced, as the retry loop records it: a buffered [`Response`], a
//! [`TransportError`] classified for the policy, and the [`AttemptReport`] history.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::policy::{self, Decision, TransportErrorKind};

/// A complete HTTP answer, body read.
#[derive(Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Header lines as received, in order; lookups ignore case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// Reads a reqwest answer to the end.
    pub async fn read(response: reqwest::Response) -> Result<Response, reqwest::Error> {
        let status = response.status().as_u16();
        let headers = header_lines(response.headers());
        let body = response.bytes().await?.to_vec();
        Ok(Response { status, headers, body })
    }

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
        self.header("retry-after").and_then(|v| policy::parse_retry_after(v, unix_now()))
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

/// Header lines as text; a value that is not visible ASCII is shown lossily.
pub(crate) fn header_lines(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect()
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
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

    /// Classifies a reqwest failure. A connect error (refused, DNS, TLS handshake) means
    /// nothing of the request was sent; a timeout or a broken body may come after the
    /// request was sent, which is why every retry carries the same key; a builder error is a
    /// request that no retry can fix.
    pub fn from_reqwest(error: &reqwest::Error) -> TransportError {
        let kind = if error.is_builder() {
            TransportErrorKind::Fatal
        } else if error.is_timeout() {
            TransportErrorKind::Timeout
        } else if error.is_connect() {
            TransportErrorKind::ConnectionRefused
        } else if error.is_body() || error.is_decode() {
            TransportErrorKind::ConnectionReset
        } else {
            TransportErrorKind::Other
        };
        TransportError::new(kind, error_chain(error))
    }
}

/// An error and its sources on one line: reqwest's own message rarely names the cause.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for TransportError {}

/// What one attempt got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptSummary {
    Answered { status: u16, replayed: bool, problem_type: Option<String>, retry_after: Option<Duration> },
    TransportFailed(TransportError),
}

/// One attempt, as the retry loop saw and judged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptReport {
    /// 1 for the first attempt.
    pub number: u32,
    /// How long the attempt took (until the answer's head, or its body where the policy
    /// needed to read a problem document).
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub attempts: u32,
    /// From the first attempt's start to the end of the last.
    pub elapsed: Duration,
    pub history: Vec<AttemptReport>,
}
