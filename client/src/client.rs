//! [`Client`]: sends [`Operation`]s through an [`IdempotencyMiddleware`] stack and reports
//! every attempt; for callers that want the whole story of an operation as one value.

use std::fmt;
use std::time::{Duration, Instant};

use http::Extensions;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Error};

use crate::attempt::{AttemptReport, Report, Response, TransportError};
use crate::base_url::{BaseUrl, InvalidBaseUrl};
use crate::key::IDEMPOTENCY_KEY_HEADER;
use crate::middleware::{
    still_pending_message, AttemptObserver, Attempts, IdempotencyError, IdempotencyMiddleware,
};
use crate::operation::Operation;
use crate::policy::{GiveUpReason, RetryConfig, TransportErrorKind};

/// A 2xx answer.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Outcome {
    pub response: Response,
    /// `Idempotent-Replayed: true`: the answer is the stored (or joined) outcome of an
    /// earlier attempt, not of the last one's own execution.
    pub replayed: bool,
    pub attempts: u32,
    pub elapsed: Duration,
    pub history: Vec<AttemptReport>,
}

/// Why [`Client::send`] returned no 2xx answer.
///
/// Its [`source`](std::error::Error::source) is the transport failure, when there is one
/// (`Transport`, and `GaveUp` after a last attempt without an answer), and through it the
/// `reqwest::Error` itself.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// A final answer that is not a success (400, 422 `key-reused`, another 4xx, …). Not
    /// retried: every retry would get the same answer.
    Rejected { response: Response, report: Report },
    /// The operation may or may not have executed: the worker answered `outcome-unknown`,
    /// or a 5xx came that is not one of the worker's own problems. Not retried. Ask the
    /// payment system (by the business id behind the key) what happened.
    ReconciliationNeeded { response: Response, report: Report },
    /// Every attempt got a retryable result and no attempts or time are left. The last
    /// result is kept. Whether the operation executed is not known to the client, but it
    /// is safe to send the same `Operation` again later: its key makes the worker replay
    /// or join the first execution.
    GaveUp { reason: GiveUpReason, last: Result<Response, TransportError>, report: Report },
    /// A failure that retrying cannot fix: a request reqwest cannot build, or an error of
    /// another middleware in the stack.
    Transport { error: TransportError, report: Report },
    /// The worker accepted the operation as a job (202, `Preference-Applied:
    /// respond-async`) and had not finished it by the poll deadline. It is the worker's
    /// now; send the same `Operation` again later to poll it (a new key would be a second
    /// payment). `response` is the last 202.
    StillPending { response: Response, report: Report },
}

impl ClientError {
    pub fn report(&self) -> &Report {
        match self {
            ClientError::Rejected { report, .. }
            | ClientError::ReconciliationNeeded { report, .. }
            | ClientError::GaveUp { report, .. }
            | ClientError::Transport { report, .. }
            | ClientError::StillPending { report, .. } => report,
        }
    }

    pub fn attempts(&self) -> u32 {
        self.report().attempts
    }

    pub fn needs_reconciliation(&self) -> bool {
        matches!(self, ClientError::ReconciliationNeeded { .. })
    }

    /// The worker holds the operation as a job that has not finished: poll later.
    pub fn is_still_pending(&self) -> bool {
        matches!(self, ClientError::StillPending { .. })
    }

    /// The last answer, when there was one (for `StillPending`, the last 202).
    pub fn response(&self) -> Option<&Response> {
        match self {
            ClientError::Rejected { response, .. }
            | ClientError::ReconciliationNeeded { response, .. }
            | ClientError::StillPending { response, .. } => Some(response),
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
            ClientError::ReconciliationNeeded { response, .. } => write!(
                f,
                "outcome unknown after {n} attempt(s) (last answer {}): reconcile with the payment system",
                response.status
            ),
            ClientError::GaveUp { reason, last, .. } => {
                let why = match reason {
                    GiveUpReason::AttemptsExhausted => "no attempts left",
                    GiveUpReason::DeadlineExceeded => "deadline reached",
                };
                write!(f, "gave up after {n} attempt(s), {why}; last: ")?;
                match last {
                    Ok(response) => write!(f, "{}", response.status),
                    // The error itself is the source: named, not repeated.
                    Err(e) => write!(f, "no answer ({:?})", e.kind),
                }
            }
            ClientError::Transport { error, .. } => {
                write!(f, "transport failure after {n} attempt(s) ({:?})", error.kind)
            }
            ClientError::StillPending { report, .. } => f.write_str(&still_pending_message(report)),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Transport { error, .. } | ClientError::GaveUp { last: Err(error), .. } => {
                Some(error)
            }
            _ => None,
        }
    }
}

/// Sends [`Operation`]s to one base URL of the worker through a stack with an
/// [`IdempotencyMiddleware`] that covers it. Cheap to clone and shareable between tasks.
#[derive(Clone)]
pub struct Client {
    base_url: String,
    http: ClientWithMiddleware,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("base_url", &self.base_url).finish()
    }
}

impl Client {
    /// A client for `base_url` (`https://host[:port][/path]`; operations add their paths)
    /// over a default `reqwest::Client` (rustls, the operating system's roots). An error
    /// when `base_url` is not one ([`BaseUrl`]).
    pub fn new(base_url: impl Into<String>, config: RetryConfig) -> Result<Self, InvalidBaseUrl> {
        Client::with_http(base_url, reqwest::Client::new(), config)
    }

    /// The same over a `reqwest::Client` of the caller's (own roots, proxies, timeouts).
    /// Its middleware covers `base_url` only.
    pub fn with_http(
        base_url: impl Into<String>,
        http: reqwest::Client,
        config: RetryConfig,
    ) -> Result<Self, InvalidBaseUrl> {
        let base_url = base_url.into();
        let layer = IdempotencyMiddleware::for_base_urls([&base_url])?.with_config(config);
        Client::with_stack(base_url, ClientBuilder::new(http).with(layer).build())
    }

    /// The same over a middleware stack of the caller's, which must contain an
    /// [`IdempotencyMiddleware`] whose base URLs cover `base_url` (the attempts are
    /// reported from it; an operation the layer does not cover is sent once, unretried).
    pub fn with_stack(
        base_url: impl Into<String>,
        http: ClientWithMiddleware,
    ) -> Result<Self, InvalidBaseUrl> {
        let base_url = base_url.into();
        BaseUrl::parse(&base_url)?;
        Ok(Client { base_url: base_url.trim_end_matches('/').to_string(), http })
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Sends `op` until the policy says stop. `Ok` only for a 2xx answer.
    pub async fn send(&self, op: &Operation) -> Result<Outcome, ClientError> {
        self.send_observed(op, |_| {}).await
    }

    /// [`Client::send`], calling `observe` after each attempt is judged (before the wait
    /// that may follow it).
    pub async fn send_observed(
        &self,
        op: &Operation,
        observe: impl Fn(&AttemptReport) + Send + Sync + 'static,
    ) -> Result<Outcome, ClientError> {
        let started = Instant::now();
        let mut request = self
            .http
            .request(op.http_method().clone(), format!("{}{}", self.base_url, op.path()))
            .header(IDEMPOTENCY_KEY_HEADER, op.wire_key());
        for (name, value) in op.headers() {
            request = request.header(name.as_str(), value.as_str());
        }
        let built = request.body(op.body().to_vec()).build();
        let request = match built {
            Ok(request) => request,
            Err(e) => {
                return Err(ClientError::Transport {
                    error: TransportError::from_reqwest(e),
                    report: Report::default(),
                });
            }
        };
        let mut extensions = Extensions::new();
        extensions.insert(AttemptObserver::new(observe));
        let result = self.http.execute_with_extensions(request, &mut extensions).await;
        let history = extensions.get::<Attempts>().map(|a| a.0.clone()).unwrap_or_default();
        let report = Report { attempts: history.len() as u32, elapsed: started.elapsed(), history };

        match result {
            Ok(response) => {
                // The middleware read the body already; this only copies it.
                let response = Response::read(response).await.map_err(|e| ClientError::Transport {
                    error: TransportError::from_reqwest(e),
                    report: report.clone(),
                })?;
                if (200..300).contains(&response.status) {
                    Ok(Outcome {
                        replayed: response.is_replayed(),
                        response,
                        attempts: report.attempts,
                        elapsed: report.elapsed,
                        history: report.history,
                    })
                } else {
                    Err(ClientError::Rejected { response, report })
                }
            }
            Err(Error::Middleware(e)) => match e.downcast::<IdempotencyError>() {
                Ok(IdempotencyError::ReconciliationNeeded { response, report, .. }) => {
                    Err(ClientError::ReconciliationNeeded { response, report })
                }
                Ok(IdempotencyError::GaveUp { reason, last, report, .. }) => {
                    Err(ClientError::GaveUp { reason, last, report })
                }
                Ok(IdempotencyError::StillPending { response, report, .. }) => {
                    Err(ClientError::StillPending { response, report })
                }
                Ok(other) => Err(ClientError::Transport {
                    error: TransportError::new(TransportErrorKind::Fatal, other.to_string())
                        .with_source(other),
                    report,
                }),
                Err(other) => Err(ClientError::Transport {
                    error: TransportError::new(
                        TransportErrorKind::Fatal,
                        "another layer of the stack failed",
                    )
                    .with_source(other),
                    report,
                }),
            },
            Err(Error::Reqwest(e)) => {
                Err(ClientError::Transport { error: TransportError::from_reqwest(e), report })
            }
        }
    }
}
