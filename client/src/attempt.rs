//! What one attempt produced, as the retry loop records it: a buffered [`Response`], a
//! [`TransportError`] classified for the policy, and the [`AttemptReport`] history.

use std::fmt;
use std::sync::Arc;
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

    /// `Preference-Applied: respond-async`: the worker accepted the request as a job (with a
    /// 202) instead of forwarding it while the client waited.
    pub fn is_accepted_async(&self) -> bool {
        policy::applies_respond_async(self.header("preference-applied"))
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
///
/// Its `Display` is the kind and the failure's own message; [`std::error::Error::source`]
/// is the failure itself (the `reqwest::Error`, and through it hyper's, rustls' or the
/// operating system's), so that a report that walks the chain (`anyhow`'s `{:#}`) names
/// the cause once. [`TransportError::detail`] is the whole chain on one line. Cheap to
/// clone: the source is shared.
#[derive(Clone, Debug)]
pub struct TransportError {
    pub kind: TransportErrorKind,
    pub message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl TransportError {
    /// A failure with no underlying error to point to.
    pub fn new(kind: TransportErrorKind, message: impl Into<String>) -> Self {
        TransportError { kind, message: message.into(), source: None }
    }

    /// The same, caused by `source`.
    pub fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        self.source = Some(Arc::from(source.into()));
        self
    }

    /// Classifies a reqwest failure, and keeps it as the source. A connect error (refused,
    /// DNS, TLS handshake) means nothing of the request was sent; a timeout or a broken body
    /// may come after the request was sent, which is why every retry carries the same key; a
    /// builder error is a request that no retry can fix.
    pub fn from_reqwest(error: reqwest::Error) -> TransportError {
        let kind = TransportError::kind_of(&error);
        TransportError::new(kind, error.to_string()).with_source(error)
    }

    /// How [`TransportError::from_reqwest`] classifies a reqwest failure.
    pub fn kind_of(error: &reqwest::Error) -> TransportErrorKind {
        if error.is_builder() {
            TransportErrorKind::Fatal
        } else if error.is_timeout() {
            TransportErrorKind::Timeout
        } else if error.is_connect() {
            TransportErrorKind::ConnectionRefused
        } else if error.is_body() || error.is_decode() {
            TransportErrorKind::ConnectionReset
        } else {
            TransportErrorKind::Other
        }
    }

    /// The message and every cause below it on one line (reqwest's own message rarely names
    /// the cause: a TLS failure says what was wrong with the certificate only further down).
    pub fn detail(&self) -> String {
        let mut text = self.message.clone();
        if let Some(source) = &self.source {
            // from_reqwest's message is the source's own: name it once.
            if source.to_string() == self.message {
                if let Some(below) = source.source() {
                    text.push_str(": ");
                    text.push_str(&error_chain(below));
                }
            } else {
                text.push_str(": ");
                text.push_str(&error_chain(source.as_ref()));
            }
        }
        text
    }
}

/// Two transport errors are equal when their kind and message are: the sources are not
/// comparable, and the policy and the reports care about the kind.
impl PartialEq for TransportError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for TransportError {}

/// An error and its sources on one line.
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

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// What one attempt got.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptSummary {
    Answered { status: u16, replayed: bool, problem_type: Option<String>, retry_after: Option<Duration> },
    TransportFailed(TransportError),
}

/// One attempt, as the retry loop saw and judged it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The wait before the next attempt (a retry or a poll), when there is one.
    pub fn wait(&self) -> Option<Duration> {
        match self.decision {
            Decision::Retry { after } | Decision::Poll { after } => Some(after),
            _ => None,
        }
    }
}

/// The attempts behind a result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    pub attempts: u32,
    /// From the first attempt's start to the end of the last.
    pub elapsed: Duration,
    pub history: Vec<AttemptReport>,
}
