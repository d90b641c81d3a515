//! [`IdempotencyMiddleware`]: the retry loop as a `reqwest_middleware` layer.
//!
//! The layer covers a request when its URL is under one of the worker's base URLs it was
//! built with ([`IdempotencyMiddleware::for_base_urls`]; same scheme, host and port, and
//! the base's path on a segment boundary, see [`BaseUrl`]) and its method is covered
//! (`POST` and `PATCH` by default, as the worker's). For such a request:
//!
//! 1. It keeps the request's `Idempotency-Key`, or adds a fresh random one. The key is fixed
//!    before the first attempt; every attempt sends it again.
//! 2. Every attempt is a clone of the original request: the same method, URL, headers and
//!    body bytes. A body that cannot be cloned (a stream) is refused with
//!    [`IdempotencyError::UnbufferedBody`] before anything is sent, because its bytes could
//!    not be sent again.
//! 3. Each answer is read to the end inside the middleware (payment APIs answer small
//!    documents), so a connection that breaks in the middle of an answer is retried under
//!    the same key like any other lost reply. The response handed on is rebuilt from those
//!    bytes, with its status, version, headers and URL.
//! 4. The pure [`policy`](crate::policy) decides: done, final (handed on as it is), retry
//!    after a jittered backoff raised to `Retry-After`, reconcile, or give up.
//! 5. An outcome the client cannot know is an error, never a response that looks final:
//!    [`IdempotencyError::ReconciliationNeeded`] (the worker's `outcome-unknown`, or a 5xx
//!    that the worker did not write) and [`IdempotencyError::GaveUp`] (retryable to the
//!    end). Both carry the key, so the application can reconcile or send it again later.
//! 6. A 202 with `Preference-Applied: respond-async` (the worker's `ASYNC_ACCEPT`, for a
//!    request that carries `Prefer: respond-async`) is not the answer: the worker holds the
//!    request as a job. The layer polls it by sending the same request with the same key,
//!    which the worker answers 202 while the job runs and with the job's final answer once
//!    there is one; that answer is judged as any other (a replayed 201 is handed on).
//!    Polls wait `Retry-After` (at least [`RetryConfig::poll_interval`]) and stop at
//!    [`RetryConfig::poll_deadline`], counted from the first 202, with
//!    [`IdempotencyError::StillPending`], which carries the key to poll with later.
//!
//! Every other request passes through untouched, exactly as if the layer were not there:
//! no key added, no timeout set, no retry. That is what makes the layer safe on a
//! `reqwest::Client` shared with APIs that are not behind the worker: a random key and a
//! retry after a timeout are safe only where the worker deduplicates, and elsewhere could
//! execute a payment twice. Errors of middleware further down the stack are
//! handed on at once: they are not this layer's to retry.
//!
//! Like `reqwest-retry`'s `RetryTransientMiddleware`, it is configured once, at
//! construction, and per request through [`Extensions`]: an [`AttemptObserver`] put there
//! with `RequestBuilder::with_extension` sees every attempt, and the layer leaves the
//! [`SentKey`] and the [`Attempts`] there for callers of `execute_with_extensions`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode, Version};
use reqwest::{Request, ResponseBuilderExt, Url};
use reqwest_middleware::{Error, Middleware, Next};

use crate::attempt::{error_chain, AttemptReport, AttemptSummary, Report, Response, TransportError};
use crate::base_url::{BaseUrl, InvalidBaseUrl};
use crate::key::{random_key, IDEMPOTENCY_KEY_HEADER};
use crate::policy::{AttemptResult, Decision, GiveUpReason, RetryConfig};
use crate::random_unit;

type Sleeper = Arc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;
type RandomSource = Arc<dyn Fn() -> f64 + Send + Sync>;

/// Retries covered requests under one `Idempotency-Key`, exactly as far as that is safe
/// (see the [module docs](crate::middleware)). It covers only the worker's base URLs it is
/// built with; requests to any other host or path pass through untouched:
///
/// ```
/// # use idempotency_edge_client::{IdempotencyMiddleware, RetryConfig};
/// # fn main() -> Result<(), idempotency_edge_client::InvalidBaseUrl> {
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(IdempotencyMiddleware::for_base_urls(["https://pay.example.com/v1"])?)
///     .build();
/// // Or with limits of your own:
/// let layer = IdempotencyMiddleware::for_base_urls(["https://pay.example.com"])?
///     .with_config(RetryConfig::default().with_max_attempts(4));
/// # Ok(())
/// # }
/// ```
///
/// Put it before other middleware that should run once per attempt (tracing, auth that
/// signs each attempt): layers added after it run inside its retry loop.
#[derive(Clone)]
pub struct IdempotencyMiddleware {
    config: RetryConfig,
    base_urls: Vec<BaseUrl>,
    covered: Vec<Method>,
    random: RandomSource,
    sleep: Sleeper,
}

impl fmt::Debug for IdempotencyMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyMiddleware")
            .field("config", &self.config)
            .field("base_urls", &self.base_urls)
            .field("covered", &self.covered)
            .finish()
    }
}

impl IdempotencyMiddleware {
    /// Covers `POST` and `PATCH` requests under these base URLs of the worker
    /// (`https://host[:port][/path]`, see [`BaseUrl`]), with [`RetryConfig::default`].
    /// There is no layer that covers every host: an empty list is refused, as is a base
    /// URL with a scheme other than `http`/`https`, a credential, a query or a fragment.
    pub fn for_base_urls<I>(base_urls: I) -> Result<Self, InvalidBaseUrl>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let base_urls =
            base_urls.into_iter().map(|b| BaseUrl::parse(b.as_ref())).collect::<Result<Vec<_>, _>>()?;
        if base_urls.is_empty() {
            return Err(InvalidBaseUrl::none());
        }
        Ok(IdempotencyMiddleware {
            config: RetryConfig::default(),
            base_urls,
            covered: vec![Method::POST, Method::PATCH],
            random: Arc::new(random_unit),
            sleep: Arc::new(|d| Box::pin(tokio::time::sleep(d))),
        })
    }

    /// With these limits instead of [`RetryConfig::default`].
    pub fn with_config(mut self, config: RetryConfig) -> Self {
        self.config = config;
        self
    }

    /// The methods to cover, as the worker's routes do (`PUT` and `DELETE` may be added
    /// there). Requests with other methods pass through untouched, under the base URLs too.
    pub fn covered_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.covered = methods.into_iter().collect();
        self
    }

    /// Replaces the jitter source (values in `[0, 1]`), for deterministic tests.
    pub fn with_random(mut self, random: impl Fn() -> f64 + Send + Sync + 'static) -> Self {
        self.random = Arc::new(random);
        self
    }

    /// Replaces how the layer waits between attempts, for tests (by default
    /// `tokio::time::sleep`).
    pub fn with_sleep<F>(mut self, sleep: impl Fn(Duration) -> F + Send + Sync + 'static) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.sleep = Arc::new(move |d| Box::pin(sleep(d)));
        self
    }

    pub fn config(&self) -> &RetryConfig {
        &self.config
    }

    /// The base URLs whose requests the layer covers.
    pub fn base_urls(&self) -> &[BaseUrl] {
        &self.base_urls
    }

    /// Whether the layer handles a request with this method and URL; any other passes
    /// through untouched.
    pub fn covers(&self, method: &Method, url: &Url) -> bool {
        self.covered.contains(method) && self.base_urls.iter().any(|base| base.covers(url))
    }
}

/// Sees each attempt once it is judged, before the wait that may follow it. Put one in a
/// request's extensions (`RequestBuilder::with_extension`) to log or count attempts.
#[derive(Clone)]
pub struct AttemptObserver(Arc<dyn Fn(&AttemptReport) + Send + Sync>);

impl AttemptObserver {
    pub fn new(observe: impl Fn(&AttemptReport) + Send + Sync + 'static) -> Self {
        AttemptObserver(Arc::new(observe))
    }
}

impl fmt::Debug for AttemptObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AttemptObserver")
    }
}

/// The key the layer sent (the request's own, or the one it added), left in the extensions.
/// Its `Debug` form does not show the key.
#[derive(Clone, PartialEq, Eq)]
pub struct SentKey(pub String);

impl fmt::Debug for SentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SentKey(<{} chars>)", self.0.len())
    }
}

/// Every attempt so far, left in the extensions after each one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attempts(pub Vec<AttemptReport>);

/// What the layer returns instead of a response when the outcome is not a final answer.
///
/// It reaches the application as `reqwest_middleware::Error::Middleware`; get it back with
/// [`IdempotencyError::from_middleware`]. Neither `Display` nor `Debug` shows the key
/// ([`IdempotencyError::key`] gives it). Its [`source`](std::error::Error::source) is the
/// last transport failure of a give-up that ended without an answer.
#[non_exhaustive]
pub enum IdempotencyError {
    /// The operation may or may not have executed, and retrying cannot tell: the worker
    /// answered `outcome-unknown` (it will give every retry the same problem), or a 5xx
    /// came that is not one of the worker's own problems (an origin's 500, a gateway's 502
    /// or 504, Cloudflare's 520 or 524), after which the request may have been executed.
    /// Ask the payment system (by the business id behind the key) what happened.
    ReconciliationNeeded { key: String, response: Response, report: Report },
    /// Every attempt got a retryable result and no attempts or time are left. Whether the
    /// operation executed is not known to the client, but sending the same request with
    /// the same key later is safe: the worker replays or joins the first execution.
    GaveUp { key: String, reason: GiveUpReason, last: Result<Response, TransportError>, report: Report },
    /// The worker accepted the request as a job (202 with `Preference-Applied:
    /// respond-async`) and had not finished it when the poll deadline
    /// ([`RetryConfig::poll_deadline`]) or the attempts after its last 202 ran out. The job
    /// is the worker's now: it executes it (or, at its own deadline, gives up without
    /// executing it). Poll again later by sending the same request with the same key
    /// ([`IdempotencyError::key`]); do not send a new one. `response` is the last 202.
    StillPending { key: String, response: Response, report: Report },
    /// The request body is a stream: its bytes cannot be kept for a retry, so nothing was
    /// sent. Give the body as bytes.
    UnbufferedBody,
}

impl IdempotencyError {
    /// The layer's error inside a `reqwest_middleware::Error`, if it is one.
    pub fn from_middleware(error: &Error) -> Option<&IdempotencyError> {
        match error {
            Error::Middleware(e) => e.downcast_ref::<IdempotencyError>(),
            Error::Reqwest(_) => None,
        }
    }

    /// The key that was sent, to reconcile by, to poll with or to send again.
    pub fn key(&self) -> Option<&str> {
        match self {
            IdempotencyError::ReconciliationNeeded { key, .. }
            | IdempotencyError::GaveUp { key, .. }
            | IdempotencyError::StillPending { key, .. } => Some(key),
            IdempotencyError::UnbufferedBody => None,
        }
    }

    pub fn needs_reconciliation(&self) -> bool {
        matches!(self, IdempotencyError::ReconciliationNeeded { .. })
    }

    /// The worker holds the request as a job that has not finished: poll later.
    pub fn is_still_pending(&self) -> bool {
        matches!(self, IdempotencyError::StillPending { .. })
    }

    pub fn report(&self) -> Option<&Report> {
        match self {
            IdempotencyError::ReconciliationNeeded { report, .. }
            | IdempotencyError::GaveUp { report, .. }
            | IdempotencyError::StillPending { report, .. } => Some(report),
            IdempotencyError::UnbufferedBody => None,
        }
    }

    /// The last answer, when there was one (for `StillPending`, the last 202).
    pub fn response(&self) -> Option<&Response> {
        match self {
            IdempotencyError::ReconciliationNeeded { response, .. }
            | IdempotencyError::StillPending { response, .. } => Some(response),
            IdempotencyError::GaveUp { last: Ok(response), .. } => Some(response),
            _ => None,
        }
    }
}

impl fmt::Debug for IdempotencyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |key: &str| format!("<{} chars>", key.len());
        match self {
            IdempotencyError::ReconciliationNeeded { key, response, report } => f
                .debug_struct("ReconciliationNeeded")
                .field("key", &hidden(key))
                .field("response", response)
                .field("report", report)
                .finish(),
            IdempotencyError::GaveUp { key, reason, last, report } => f
                .debug_struct("GaveUp")
                .field("key", &hidden(key))
                .field("reason", reason)
                .field("last", last)
                .field("report", report)
                .finish(),
            IdempotencyError::StillPending { key, response, report } => f
                .debug_struct("StillPending")
                .field("key", &hidden(key))
                .field("response", response)
                .field("report", report)
                .finish(),
            IdempotencyError::UnbufferedBody => f.write_str("UnbufferedBody"),
        }
    }
}

impl fmt::Display for IdempotencyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdempotencyError::ReconciliationNeeded { response, report, .. } => {
                write!(
                    f,
                    "outcome unknown after {} attempt(s) (last answer {}): reconcile with the payment system",
                    report.attempts, response.status
                )
            }
            IdempotencyError::GaveUp { reason, last, report, .. } => {
                let why = match reason {
                    GiveUpReason::AttemptsExhausted => "no attempts left",
                    GiveUpReason::DeadlineExceeded => "deadline reached",
                };
                write!(f, "gave up after {} attempt(s), {why}; last: ", report.attempts)?;
                match last {
                    Ok(response) => write!(f, "{}", response.status),
                    // The error itself is the source: named, not repeated.
                    Err(e) => write!(f, "no answer ({:?})", e.kind),
                }
            }
            IdempotencyError::StillPending { report, .. } => f.write_str(&still_pending_message(report)),
            IdempotencyError::UnbufferedBody => f.write_str(
                "a streaming request body cannot be sent again on a retry; give the body as bytes",
            ),
        }
    }
}

impl std::error::Error for IdempotencyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IdempotencyError::GaveUp { last: Err(error), .. } => Some(error),
            _ => None,
        }
    }
}

/// What `StillPending` says, for [`IdempotencyError`] and [`crate::ClientError`] alike. The
/// key is the caller's own (and may hold a business id), so the error carries it
/// ([`IdempotencyError::key`], [`crate::Operation::key`]) rather than print it.
pub(crate) fn still_pending_message(report: &Report) -> String {
    format!(
        "still pending after {} attempt(s) in {} s: the worker accepted the operation as a job and has not \
         finished it; poll later with the same request and the same Idempotency-Key, never a new key",
        report.attempts,
        report.elapsed.as_secs()
    )
}

/// What an attempt got, kept in the form its decision needs: an answer read to the end; a
/// transport failure kept for the report and a later give-up, its reqwest error as the
/// source; or one the loop ends on, handed on as reqwest's own error.
enum Got {
    Answer(ReadAnswer),
    Kept(TransportError),
    Failed(reqwest::Error),
}

impl Got {
    /// The result as a give-up reports it.
    fn into_last(self) -> Result<Response, TransportError> {
        match self {
            Got::Answer(answer) => Ok(answer.to_response()),
            Got::Kept(error) => Err(error),
            Got::Failed(error) => Err(TransportError::from_reqwest(error)),
        }
    }
}

/// An answer read to the end, with what is needed to hand it on as a reqwest response.
struct ReadAnswer {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    url: Url,
    body: Bytes,
}

impl ReadAnswer {
    async fn read(response: reqwest::Response) -> Result<ReadAnswer, reqwest::Error> {
        let status = response.status();
        let version = response.version();
        let headers = response.headers().clone();
        let url = response.url().clone();
        let body = response.bytes().await?;
        Ok(ReadAnswer { status, version, headers, url, body })
    }

    fn to_response(&self) -> Response {
        Response {
            status: self.status.as_u16(),
            headers: crate::attempt::header_lines(&self.headers),
            body: self.body.to_vec(),
        }
    }

    fn into_reqwest(self) -> reqwest::Response {
        let mut builder = http::Response::builder().status(self.status).version(self.version).url(self.url);
        if let Some(headers) = builder.headers_mut() {
            *headers = self.headers;
        }
        // The parts came from a valid response, so the builder cannot fail.
        let response = builder.body(self.body).unwrap_or_else(|_| http::Response::new(Bytes::new()));
        reqwest::Response::from(response)
    }
}

#[async_trait::async_trait]
impl Middleware for IdempotencyMiddleware {
    async fn handle(
        &self,
        mut req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        if !self.covers(req.method(), req.url()) {
            return next.run(req, extensions).await;
        }
        // Checked before anything is sent: a stream's bytes would be gone after one attempt.
        if req.try_clone().is_none() {
            return Err(Error::middleware(IdempotencyError::UnbufferedBody));
        }
        let key = match req.headers().get(IDEMPOTENCY_KEY_HEADER) {
            Some(value) => String::from_utf8_lossy(value.as_bytes()).into_owned(),
            None => {
                let key = random_key();
                // A UUID is visible ASCII, always a valid header value.
                let value = HeaderValue::from_str(&key).map_err(Error::middleware)?;
                req.headers_mut().insert(IDEMPOTENCY_KEY_HEADER, value);
                key
            }
        };
        extensions.insert(SentKey(key.clone()));
        let observer = extensions.get::<AttemptObserver>().cloned();
        let own_timeout = req.timeout().copied();

        let started = Instant::now();
        let mut history: Vec<AttemptReport> = Vec::new();
        let mut last: Option<Result<Response, TransportError>> = None;
        // Set by the first 202 that says the worker accepted the request as a job; from then
        // on every attempt is a poll of that job (or a retry of a failed poll).
        let mut pending: Option<Pending> = None;
        // Attempts since the first, or since the last 202 of a job.
        let mut tries = 0u32;
        for number in 1u32.. {
            tries += 1;
            let timeout = match &pending {
                Some(p) => self.config.poll_timeout_at(p.since.elapsed()),
                None => self.config.attempt_timeout_at(started.elapsed()),
            };
            let timeout = match (timeout, pending.take(), last.take()) {
                (Some(timeout), p, _) => {
                    pending = p;
                    timeout
                }
                // A wait overran the poll deadline: the job is still the worker's.
                (None, Some(p), _) => {
                    let report = report(started, history);
                    return Err(self.still_pending(key, p.response, report));
                }
                // A wait overran the deadline: give up with the result that led to it.
                (None, None, Some(last)) => {
                    let report = report(started, history);
                    return Err(self.gave_up(key, GiveUpReason::DeadlineExceeded, last, report));
                }
                // A zero deadline still allows one (instant) attempt.
                (None, None, None) => Duration::from_millis(1),
            };
            let Some(mut attempt) = req.try_clone() else {
                return Err(Error::middleware(IdempotencyError::UnbufferedBody));
            };
            *attempt.timeout_mut() = Some(own_timeout.map_or(timeout, |own| own.min(timeout)));

            let attempt_started = Instant::now();
            let result = match next.clone().run(attempt, extensions).await {
                Ok(response) => ReadAnswer::read(response).await,
                Err(Error::Reqwest(e)) => Err(e),
                // Another layer's failure: not a lost reply, and not ours to retry.
                Err(other) => return Err(other),
            };
            let took = attempt_started.elapsed();

            let decide = |facts: AttemptResult<'_>| match &pending {
                Some(p) => self.config.decide_pending(facts, tries, p.since.elapsed(), (self.random)()),
                None => self.config.decide(facts, tries, started.elapsed(), (self.random)()),
            };
            let (summary, decision, got) = match result {
                Ok(answer) => {
                    let response = answer.to_response();
                    let problem_type = response.problem_type();
                    let retry_after = response.retry_after();
                    let facts = AttemptResult::answer(response.status)
                        .with_retry_after(retry_after)
                        .with_problem_type(problem_type.as_deref())
                        .with_respond_async(response.is_accepted_async());
                    let decision = decide(facts);
                    let summary = AttemptSummary::Answered {
                        status: response.status,
                        replayed: response.is_replayed(),
                        problem_type,
                        retry_after,
                    };
                    (summary, decision, Got::Answer(answer))
                }
                Err(error) => {
                    let kind = TransportError::kind_of(&error);
                    let decision = decide(AttemptResult::Transport(kind));
                    match decision {
                        Decision::Retry { .. } | Decision::GiveUp(_) | Decision::StillPending => {
                            let error = TransportError::from_reqwest(error);
                            (AttemptSummary::TransportFailed(error.clone()), decision, Got::Kept(error))
                        }
                        // Handed on as it is, with its own sources; the report names them.
                        _ => {
                            let summary = TransportError::new(kind, error_chain(&error));
                            (AttemptSummary::TransportFailed(summary), decision, Got::Failed(error))
                        }
                    }
                }
            };
            let attempt = AttemptReport { number, took, result: summary, decision };
            #[cfg(feature = "tracing")]
            crate::trace::attempt(&attempt, pending.is_some());
            if let Some(observer) = &observer {
                (observer.0)(&attempt);
            }
            history.push(attempt);
            extensions.insert(Attempts(history.clone()));

            match (decision, got) {
                (Decision::Poll { after }, Got::Answer(answer)) => {
                    let since = pending.map_or_else(Instant::now, |p| p.since);
                    pending = Some(Pending { since, response: answer.to_response() });
                    tries = 0;
                    (self.sleep)(after).await;
                }
                (Decision::Retry { after }, got) => {
                    last = Some(got.into_last());
                    (self.sleep)(after).await;
                }
                (Decision::GiveUp(reason), got) => {
                    let report = report(started, history);
                    return Err(self.gave_up(key, reason, got.into_last(), report));
                }
                (Decision::StillPending, got) => {
                    // The 202 that said so, or the last one before the polls that failed.
                    let response = match (got, pending) {
                        (Got::Answer(answer), _) => answer.to_response(),
                        (_, Some(p)) => p.response,
                        // Only an answer or a failure after a 202 can be StillPending.
                        (got, None) => {
                            let report = report(started, history);
                            return Err(self.gave_up(
                                key,
                                GiveUpReason::DeadlineExceeded,
                                got.into_last(),
                                report,
                            ));
                        }
                    };
                    let report = report(started, history);
                    return Err(self.still_pending(key, response, report));
                }
                (_, Got::Failed(e)) => return Err(Error::Reqwest(e)),
                (Decision::NeedsReconciliation, Got::Answer(answer)) => {
                    let report = report(started, history);
                    let response = answer.to_response();
                    #[cfg(feature = "tracing")]
                    crate::trace::reconcile(&response, &report);
                    return Err(Error::middleware(IdempotencyError::ReconciliationNeeded {
                        key,
                        response,
                        report,
                    }));
                }
                (Decision::Done | Decision::Fail, Got::Answer(answer)) => {
                    return Ok(answer.into_reqwest());
                }
                // Kept only for a retry, a give-up or a still-pending (above); a poll is an
                // answer's.
                (
                    Decision::Done | Decision::Fail | Decision::NeedsReconciliation | Decision::Poll { .. },
                    Got::Kept(error),
                ) => {
                    return Err(Error::middleware(error));
                }
            }
        }
        unreachable!("the attempt loop returns")
    }
}

/// A job the worker accepted: since its first 202, and the last 202.
struct Pending {
    since: Instant,
    response: Response,
}

impl IdempotencyMiddleware {
    fn gave_up(
        &self,
        key: String,
        reason: GiveUpReason,
        last: Result<Response, TransportError>,
        report: Report,
    ) -> Error {
        #[cfg(feature = "tracing")]
        crate::trace::gave_up(reason, &report);
        Error::middleware(IdempotencyError::GaveUp { key, reason, last, report })
    }

    fn still_pending(&self, key: String, response: Response, report: Report) -> Error {
        #[cfg(feature = "tracing")]
        crate::trace::still_pending(&report);
        Error::middleware(IdempotencyError::StillPending { key, response, report })
    }
}

fn report(started: Instant, history: Vec<AttemptReport>) -> Report {
    Report { attempts: history.len() as u32, elapsed: started.elapsed(), history }
}
