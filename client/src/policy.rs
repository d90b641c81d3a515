//! The retry policy of the reference client: pure, with no I/O, no clock and no randomness
//! of its own. The caller passes in what happened, how many attempts were made, how much
//! time has passed and a random number; the policy answers what to do next.
//!
//! | attempt result                                              | decision |
//! |-------------------------------------------------------------|----------|
//! | 202 with `Preference-Applied: respond-async`: the worker accepted the request as a job (`ASYNC_ACCEPT`) and it has not finished | `Poll`: the same request again, not before `Retry-After` |
//! | 2xx (any other 202 included: an origin's own)               | `Done` (a replay too) |
//! | problem `outcome-unknown` (502)                             | `NeedsReconciliation`, never retried |
//! | problem `in-progress` (409)                                 | retry, not before `Retry-After` |
//! | problem `origin-unreachable` (502): nothing was executed    | retry |
//! | problem `storage-unavailable` (503): nothing was forwarded  | retry, not before `Retry-After` |
//! | problem `origin-unavailable` (503): a job's deadline passed, never executed, the key released | retry |
//! | any 429                                                     | retry, not before `Retry-After` |
//! | timeout, connection refused / reset / other transport error | retry |
//! | problem `invalid-config` (500): nothing was forwarded       | `Fail` |
//! | any other 5xx: an origin's 500, 502, 503 or 504, a gateway's 502 or 504, Cloudflare's 520 to 526, a worker problem this client does not know | `NeedsReconciliation`, never retried |
//! | a transport failure retrying cannot fix (a request that cannot be built) | `Fail` |
//! | anything else: 400, 422 `key-reused`, other 4xx, 3xx        | `Fail`, never retried |
//!
//! A retryable result is retried while attempts are left and the wait fits in the overall
//! deadline; otherwise the decision is `GiveUp`. The wait is full-jitter exponential
//! backoff, `random × min(cap, base × 2^(attempts − 1))`, raised to `Retry-After` when the
//! answer carries one.
//!
//! Polling ([`RetryConfig::decide_pending`]): once the worker has accepted the request as a
//! job, the same request with the same key is a poll of that job. The worker answers 202
//! again while the job runs and replays its final answer once there is one. Polls wait
//! `Retry-After`, at least `poll_interval`, and end at `poll_deadline`, counted from the
//! first 202; the overall deadline and the attempt cap no longer apply to polls, which
//! execute nothing. A retryable failure while polling (a lost reply, a 409) is retried
//! as before, its attempts counted from the last 202, within the poll deadline. When time
//! or attempts run out after an acceptance, the decision is `StillPending`: the job is the
//! worker's, and the same request with the same key polls it later.
//!
//! Why every 5xx that is not the worker's own problem asks for reconciliation: the client
//! cannot tell where such an answer came from. An origin's 500, 502 or 504 is stored by the
//! worker as final (the origin may have acted), so a retry would only replay it; Cloudflare's
//! 520 and 524 and a gateway's 502 or 504 may come after the request reached the
//! application; and even a 503 can (a router's timeout after the application received the
//! request). None of them says that nothing happened, so none is a failure the caller may
//! act on as if the payment had not been made, and none is worth a blind retry. Only the
//! worker's own problems say what happened, and those are matched by their `type`.

use std::time::Duration;

use idempotency_edge_protocol::problem::{ProblemKind, PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_PREFIX};
use idempotency_edge_protocol::{retry_after, RESPOND_ASYNC};

/// How an attempt failed below HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// No complete answer within the attempt's timeout (connect, send or receive).
    Timeout,
    /// The server refused the connection: nothing was sent.
    ConnectionRefused,
    /// The connection broke (reset, aborted, closed before a complete answer).
    ConnectionReset,
    /// Any other failure to get an answer: name resolution, a malformed response, …
    Other,
    /// A failure that retrying cannot fix: a request that cannot be built (reqwest's
    /// builder errors).
    Fatal,
}

impl TransportErrorKind {
    /// Everything but [`TransportErrorKind::Fatal`]: with the same key a retry is safe.
    pub fn is_retryable(self) -> bool {
        self != TransportErrorKind::Fatal
    }
}

/// What one attempt produced, as far as the policy cares.
/// Build an answer with [`AttemptResult::answer`] and the `with_*` methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptResult<'a> {
    Transport(TransportErrorKind),
    #[non_exhaustive]
    Response {
        status: u16,
        /// The parsed `Retry-After` (see [`parse_retry_after`]).
        retry_after: Option<Duration>,
        /// The problem `type`, when the answer is `application/problem+json` (see
        /// [`problem_type`]).
        problem_type: Option<&'a str>,
        /// The answer carries `Preference-Applied: respond-async` (see
        /// [`applies_respond_async`]).
        respond_async: bool,
    },
}

impl<'a> AttemptResult<'a> {
    /// An answer with this status and nothing else of note.
    pub const fn answer(status: u16) -> Self {
        AttemptResult::Response { status, retry_after: None, problem_type: None, respond_async: false }
    }

    /// With this `Retry-After` (an answer; a transport failure is unchanged).
    pub const fn with_retry_after(mut self, wait: Option<Duration>) -> Self {
        if let AttemptResult::Response { retry_after, .. } = &mut self {
            *retry_after = wait;
        }
        self
    }

    /// With this problem `type`.
    pub const fn with_problem_type(mut self, kind: Option<&'a str>) -> Self {
        if let AttemptResult::Response { problem_type, .. } = &mut self {
            *problem_type = kind;
        }
        self
    }

    /// With or without `Preference-Applied: respond-async`.
    pub const fn with_respond_async(mut self, applied: bool) -> Self {
        if let AttemptResult::Response { respond_async, .. } = &mut self {
            *respond_async = applied;
        }
        self
    }
}

/// What an attempt's result means, before attempts and time are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    Done,
    Fail,
    NeedsReconciliation,
    Retryable {
        retry_after: Option<Duration>,
    },
    /// Accepted as a job that has not finished: poll.
    Pending {
        retry_after: Option<Duration>,
    },
}

/// The whole decision after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// A 2xx answer: the operation succeeded (the answer may be a replay).
    Done,
    /// A final answer that is not a success, or an unfixable transport failure.
    Fail,
    /// `outcome-unknown`: the operation may or may not have executed. Retrying with the same
    /// key gets the same problem; the caller must reconcile with the payment system.
    NeedsReconciliation,
    /// Send the same request again after this wait.
    Retry { after: Duration },
    /// Accepted as a job that is still running: send the same request again (a poll) after
    /// this wait.
    Poll { after: Duration },
    /// Retryable, but no attempts or time are left.
    GiveUp(GiveUpReason),
    /// The worker accepted the request as a job and had not finished it when the poll
    /// deadline (or the attempts after the last 202) ran out. Not a failure: the same
    /// request with the same key polls it later.
    StillPending,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUpReason {
    /// `max_attempts` attempts were made.
    AttemptsExhausted,
    /// The next attempt could not start before the overall deadline.
    DeadlineExceeded,
}

/// Timing and limits of the retry loop. Start from [`RetryConfig::default`] and change what
/// differs (`RetryConfig::default().with_max_attempts(3)`); the fields are public to read.
/// New limits may come in a minor release, hence `#[non_exhaustive]`.
///
/// ```
/// use std::time::Duration;
/// use idempotency_edge_client::RetryConfig;
///
/// let config = RetryConfig::default()
///     .with_max_attempts(4)
///     .with_deadline(Duration::from_secs(30));
/// assert_eq!(config.max_attempts, 4);
/// assert_eq!(config.base_backoff, Duration::from_millis(200));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryConfig {
    /// Backoff ceiling before the first retry; it doubles with every attempt.
    pub base_backoff: Duration,
    /// Largest backoff ceiling (`Retry-After` may ask for longer and is honoured).
    pub max_backoff: Duration,
    /// Attempts in all, the first included (0 counts as 1).
    pub max_attempts: u32,
    /// Time from the first attempt's start after which no attempt starts; a running
    /// attempt's timeout is cut to end by then.
    pub deadline: Duration,
    /// Time one attempt may take (connect, send, whole answer). Choose it longer than the
    /// worker's `ORIGIN_TIMEOUT_SECONDS` so that a slow but normal answer is not cut off;
    /// a shorter one still works (the retry joins or replays the running execution).
    pub attempt_timeout: Duration,
    /// How long to poll a job the worker accepted (202 with `Preference-Applied:
    /// respond-async`), from its first 202. Past it the result is `StillPending`; zero hands
    /// that back at the first 202.
    pub poll_deadline: Duration,
    /// The shortest wait between two polls, and the wait when a 202 has no `Retry-After`.
    pub poll_interval: Duration,
}

impl Default for RetryConfig {
    /// 200 ms base, 10 s cap, 8 attempts, 2 min deadline, 35 s per attempt (longer than
    /// the worker's default 30 s origin timeout); polls for 5 min, at least 1 s apart.
    ///
    /// Five minutes of polling: a poll costs the worker one storage read and the origin
    /// nothing, and a job outlives the minute or two that an origin's deploy or a burst of
    /// 429 lasts; an outage longer than that is better handed back as `StillPending` than
    /// waited out by a caller that holds a request open.
    fn default() -> Self {
        RetryConfig {
            base_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            max_attempts: 8,
            deadline: Duration::from_secs(120),
            attempt_timeout: Duration::from_secs(35),
            poll_deadline: Duration::from_secs(300),
            poll_interval: Duration::from_secs(1),
        }
    }
}

impl RetryConfig {
    /// With another backoff base.
    pub const fn with_base_backoff(mut self, base_backoff: Duration) -> Self {
        self.base_backoff = base_backoff;
        self
    }

    /// With another backoff cap.
    pub const fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// With another attempt cap (the first attempt included; 0 counts as 1).
    pub const fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// With another overall deadline.
    pub const fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// With another per-attempt timeout.
    pub const fn with_attempt_timeout(mut self, attempt_timeout: Duration) -> Self {
        self.attempt_timeout = attempt_timeout;
        self
    }

    /// With another poll deadline (zero: no polling, `StillPending` at the first 202).
    pub const fn with_poll_deadline(mut self, poll_deadline: Duration) -> Self {
        self.poll_deadline = poll_deadline;
        self
    }

    /// With another shortest wait between polls.
    pub const fn with_poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// `min(cap, base × 2^(attempts_made − 1))`: the largest backoff after `attempts_made`
    /// attempts.
    pub fn backoff_ceiling(&self, attempts_made: u32) -> Duration {
        let exponent = attempts_made.saturating_sub(1);
        let factor = 1u32.checked_shl(exponent).unwrap_or(0);
        let grown = if factor == 0 { None } else { self.base_backoff.checked_mul(factor) };
        grown.unwrap_or(Duration::MAX).min(self.max_backoff)
    }

    /// Full jitter: `random × backoff_ceiling(attempts_made)`, `random` in `[0, 1]` (values
    /// outside are clamped, NaN counts as 0).
    pub fn backoff(&self, attempts_made: u32, random: f64) -> Duration {
        let random = if random.is_nan() { 0.0 } else { random.clamp(0.0, 1.0) };
        self.backoff_ceiling(attempts_made).mul_f64(random)
    }

    /// The timeout for an attempt that starts `elapsed` after the first one: the attempt
    /// timeout, cut to the deadline. `None` when the deadline has passed.
    pub fn attempt_timeout_at(&self, elapsed: Duration) -> Option<Duration> {
        let left = self.deadline.checked_sub(elapsed).filter(|left| !left.is_zero())?;
        Some(left.min(self.attempt_timeout))
    }

    /// The same for a poll that starts `pending_for` after the first 202: cut to the poll
    /// deadline.
    pub fn poll_timeout_at(&self, pending_for: Duration) -> Option<Duration> {
        let left = self.poll_deadline.checked_sub(pending_for).filter(|left| !left.is_zero())?;
        Some(left.min(self.attempt_timeout))
    }

    /// The decision after attempt number `attempts_made` (1 for the first), `elapsed`
    /// after the first attempt started, with `random` in `[0, 1]` for the jitter. For
    /// attempts before the worker accepted the request as a job; a 202 that says it did is
    /// judged as the first of [`RetryConfig::decide_pending`].
    pub fn decide(
        &self,
        result: AttemptResult<'_>,
        attempts_made: u32,
        elapsed: Duration,
        random: f64,
    ) -> Decision {
        self.decide_in(result, attempts_made, elapsed, false, random)
    }

    /// The decision for an attempt after the worker accepted the request as a job (a poll,
    /// or a retry of one): `attempts_since` counts the attempts since the last 202 (1 for
    /// the first after it), `pending_for` is the time since the first 202.
    pub fn decide_pending(
        &self,
        result: AttemptResult<'_>,
        attempts_since: u32,
        pending_for: Duration,
        random: f64,
    ) -> Decision {
        self.decide_in(result, attempts_since, pending_for, true, random)
    }

    /// Before an acceptance, attempts and time count against `max_attempts` and `deadline`;
    /// after it, against `max_attempts` since the last 202 and `poll_deadline`, and running
    /// out is `StillPending` instead of a give-up.
    fn decide_in(
        &self,
        result: AttemptResult<'_>,
        attempts: u32,
        elapsed: Duration,
        pending: bool,
        random: f64,
    ) -> Decision {
        match classify(result) {
            Verdict::Done => Decision::Done,
            Verdict::Fail => Decision::Fail,
            Verdict::NeedsReconciliation => Decision::NeedsReconciliation,
            Verdict::Pending { retry_after } => {
                // The first 202 starts the poll deadline's clock.
                let pending_for = if pending { elapsed } else { Duration::ZERO };
                let after = self.poll_interval.max(retry_after.unwrap_or(Duration::ZERO));
                match pending_for.checked_add(after) {
                    Some(next_start) if next_start < self.poll_deadline => Decision::Poll { after },
                    _ => Decision::StillPending,
                }
            }
            Verdict::Retryable { retry_after } => {
                let (deadline, out_of_attempts, out_of_time) = if pending {
                    (self.poll_deadline, Decision::StillPending, Decision::StillPending)
                } else {
                    (
                        self.deadline,
                        Decision::GiveUp(GiveUpReason::AttemptsExhausted),
                        Decision::GiveUp(GiveUpReason::DeadlineExceeded),
                    )
                };
                if attempts >= self.max_attempts.max(1) {
                    return out_of_attempts;
                }
                let after = self.backoff(attempts, random).max(retry_after.unwrap_or(Duration::ZERO));
                match elapsed.checked_add(after) {
                    Some(next_start) if next_start < deadline => Decision::Retry { after },
                    _ => out_of_time,
                }
            }
        }
    }
}

/// What a result means on its own (see the module doc's table).
pub fn classify(result: AttemptResult<'_>) -> Verdict {
    let (status, retry_after, problem_type, respond_async) = match result {
        AttemptResult::Transport(kind) if kind.is_retryable() => {
            return Verdict::Retryable { retry_after: None }
        }
        AttemptResult::Transport(_) => return Verdict::Fail,
        AttemptResult::Response { status, retry_after, problem_type, respond_async } => {
            (status, retry_after, problem_type, respond_async)
        }
    };
    // Only the preference applied makes a 202 a job's: an origin's own 202 is its answer.
    if status == 202 && respond_async {
        return Verdict::Pending { retry_after };
    }
    if (200..300).contains(&status) {
        return Verdict::Done;
    }
    let is = |kind: ProblemKind| problem_type.is_some_and(|t| is_problem(t, kind));
    if is(ProblemKind::OutcomeUnknown) {
        return Verdict::NeedsReconciliation;
    }
    // origin-unavailable: an accepted job's deadline passed and nothing was executed; the
    // worker released the key, so sending again is a new first attempt.
    if is(ProblemKind::InProgress)
        || is(ProblemKind::OriginUnreachable)
        || is(ProblemKind::StorageUnavailable)
        || is(ProblemKind::OriginUnavailable)
        || status == 429
    {
        return Verdict::Retryable { retry_after };
    }
    if (500..600).contains(&status) && !is(ProblemKind::InvalidConfig) {
        return Verdict::NeedsReconciliation;
    }
    Verdict::Fail
}

/// Whether a `Preference-Applied` value (RFC 7240: comma-separated preferences, each a token
/// with optional `=value` and `;` parameters) includes `respond-async`.
pub fn applies_respond_async(preference_applied: Option<&str>) -> bool {
    preference_applied.is_some_and(|value| {
        value.split(',').any(|preference| {
            let token = preference.split([';', '=']).next().unwrap_or("");
            token.trim().eq_ignore_ascii_case(RESPOND_ASYNC)
        })
    })
}

/// Whether a problem `type` URI is the worker's problem of this kind.
pub fn is_problem(problem_type: &str, kind: ProblemKind) -> bool {
    problem_type.strip_prefix(PROBLEM_TYPE_PREFIX) == Some(kind.slug())
}

/// The `type` member of an RFC 9457 problem body, when the content type is
/// `application/problem+json` (parameters allowed) and the body is a JSON object with a
/// string `type`.
pub fn problem_type(content_type: Option<&str>, body: &[u8]) -> Option<String> {
    let media_type = content_type?.split(';').next()?.trim();
    if !media_type.eq_ignore_ascii_case(PROBLEM_CONTENT_TYPE) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("type")?.as_str().map(str::to_owned)
}

/// Parses a `Retry-After` value as the worker reads one
/// (`idempotency_edge_protocol::retry_after`): delay-seconds of at most nine digits, or an
/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) relative to `now_unix_seconds`, a date in
/// the past being a zero wait. Anything else (the obsolete date forms, a number too long to
/// mean anything) is `None`, and the policy's own backoff applies.
pub fn parse_retry_after(value: &str, now_unix_seconds: u64) -> Option<Duration> {
    retry_after::parse_retry_after(Some(value), now_unix_seconds.saturating_mul(1_000))
        .map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttemptResult::{Response, Transport};
    use TransportErrorKind::*;

    const UNKNOWN: &str = "urn:idempotency-edge:problem:outcome-unknown";
    const IN_PROGRESS: &str = "urn:idempotency-edge:problem:in-progress";
    const UNREACHABLE: &str = "urn:idempotency-edge:problem:origin-unreachable";
    const STORAGE: &str = "urn:idempotency-edge:problem:storage-unavailable";
    const KEY_REUSED: &str = "urn:idempotency-edge:problem:key-reused";
    const MISSING_KEY: &str = "urn:idempotency-edge:problem:missing-key";
    const INVALID_CONFIG: &str = "urn:idempotency-edge:problem:invalid-config";
    const NEWER: &str = "urn:idempotency-edge:problem:something-newer";
    const UNAVAILABLE: &str = "urn:idempotency-edge:problem:origin-unavailable";

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn config() -> RetryConfig {
        RetryConfig {
            base_backoff: ms(100),
            max_backoff: secs(2),
            max_attempts: 5,
            deadline: secs(30),
            attempt_timeout: secs(10),
            poll_deadline: secs(60),
            poll_interval: secs(1),
        }
    }

    fn response(status: u16) -> AttemptResult<'static> {
        Response { status, retry_after: None, problem_type: None, respond_async: false }
    }

    fn problem(
        status: u16,
        problem_type: &'static str,
        retry_after: Option<Duration>,
    ) -> AttemptResult<'static> {
        Response { status, retry_after, problem_type: Some(problem_type), respond_async: false }
    }

    #[test]
    fn problem_constants_match_the_core() {
        for (uri, kind) in [
            (UNKNOWN, ProblemKind::OutcomeUnknown),
            (IN_PROGRESS, ProblemKind::InProgress),
            (UNREACHABLE, ProblemKind::OriginUnreachable),
            (STORAGE, ProblemKind::StorageUnavailable),
            (UNAVAILABLE, ProblemKind::OriginUnavailable),
            (KEY_REUSED, ProblemKind::KeyReused),
            (INVALID_CONFIG, ProblemKind::InvalidConfig),
        ] {
            assert!(is_problem(uri, kind), "{uri}");
            assert_eq!(uri, format!("{PROBLEM_TYPE_PREFIX}{}", kind.slug()));
        }
        assert!(!is_problem(UNKNOWN, ProblemKind::InProgress));
        assert!(!is_problem("urn:other:problem:outcome-unknown", ProblemKind::OutcomeUnknown));
    }

    #[test]
    fn every_row_of_the_table() {
        use Verdict::*;
        let retry = |retry_after| Retryable { retry_after };
        let cases: Vec<(&str, AttemptResult<'static>, Verdict)> = vec![
            ("200", response(200), Done),
            ("201", response(201), Done),
            ("204", response(204), Done),
            ("timeout", Transport(Timeout), retry(None)),
            ("refused", Transport(ConnectionRefused), retry(None)),
            ("reset", Transport(ConnectionReset), retry(None)),
            ("other transport error", Transport(Other), retry(None)),
            ("fatal transport error", Transport(Fatal), Fail),
            ("409 in-progress", problem(409, IN_PROGRESS, Some(secs(3))), retry(Some(secs(3)))),
            ("409 in-progress without Retry-After", problem(409, IN_PROGRESS, None), retry(None)),
            (
                "429",
                Response {
                    status: 429,
                    retry_after: Some(secs(7)),
                    problem_type: None,
                    respond_async: false,
                },
                retry(Some(secs(7))),
            ),
            ("429 without Retry-After", response(429), retry(None)),
            (
                "503 that is not the worker's (an origin's, a router's)",
                Response {
                    status: 503,
                    retry_after: Some(secs(2)),
                    problem_type: None,
                    respond_async: false,
                },
                NeedsReconciliation,
            ),
            ("503 storage-unavailable", problem(503, STORAGE, Some(secs(1))), retry(Some(secs(1)))),
            ("502 origin-unreachable", problem(502, UNREACHABLE, Some(secs(1))), retry(Some(secs(1)))),
            ("502 outcome-unknown", problem(502, UNKNOWN, None), NeedsReconciliation),
            ("outcome-unknown with Retry-After", problem(502, UNKNOWN, Some(secs(1))), NeedsReconciliation),
            ("422 key-reused", problem(422, KEY_REUSED, None), Fail),
            ("400 missing-key", problem(400, MISSING_KEY, None), Fail),
            ("400 from the origin", response(400), Fail),
            ("402", response(402), Fail),
            ("404", response(404), Fail),
            ("409 that is not in-progress", response(409), Fail),
            ("408 (not in the retry list)", response(408), Fail),
            ("413", response(413), Fail),
            ("500 from the origin (stored as final)", response(500), NeedsReconciliation),
            ("502 from the origin or a gateway", response(502), NeedsReconciliation),
            ("504 from the origin or a gateway", response(504), NeedsReconciliation),
            ("Cloudflare 520 (reset after send)", response(520), NeedsReconciliation),
            ("Cloudflare 521 (origin down)", response(521), NeedsReconciliation),
            ("Cloudflare 522 (connection timed out)", response(522), NeedsReconciliation),
            ("Cloudflare 524 (timeout after send)", response(524), NeedsReconciliation),
            ("599", response(599), NeedsReconciliation),
            ("500 invalid-config: nothing forwarded", problem(500, INVALID_CONFIG, None), Fail),
            ("a worker problem this client does not know", problem(502, NEWER, None), NeedsReconciliation),
            (
                "a foreign problem type at 502",
                problem(502, "https://example.com/outcome-unknown", None),
                NeedsReconciliation,
            ),
            ("301", response(301), Fail),
            ("202 accepted as a job", accepted(Some(secs(2))), Pending { retry_after: Some(secs(2)) }),
            ("202 accepted, no Retry-After", accepted(None), Pending { retry_after: None }),
            ("202 from the origin (no preference applied)", response(202), Done),
            ("Preference-Applied on a 200", response(200).with_respond_async(true), Done),
            (
                "503 origin-unavailable: the job never executed, the key is released",
                problem(503, UNAVAILABLE, None),
                retry(None),
            ),
            ("a foreign problem type", problem(409, "https://example.com/in-progress", None), Fail),
        ];
        for (label, result, expected) in cases {
            assert_eq!(classify(result), expected, "{label}");
        }
    }

    fn accepted(retry_after: Option<Duration>) -> AttemptResult<'static> {
        AttemptResult::answer(202).with_retry_after(retry_after).with_respond_async(true)
    }

    #[test]
    fn the_builder_makes_the_same_values() {
        assert_eq!(AttemptResult::answer(201), response(201));
        assert_eq!(
            AttemptResult::answer(409).with_problem_type(Some(IN_PROGRESS)).with_retry_after(Some(secs(3))),
            problem(409, IN_PROGRESS, Some(secs(3)))
        );
        assert_eq!(
            AttemptResult::Transport(Timeout).with_retry_after(Some(secs(1))).with_respond_async(true),
            Transport(Timeout),
            "a transport failure has no headers"
        );
        let c = RetryConfig::default()
            .with_base_backoff(ms(100))
            .with_max_backoff(secs(2))
            .with_max_attempts(5)
            .with_deadline(secs(30))
            .with_attempt_timeout(secs(10))
            .with_poll_deadline(secs(60))
            .with_poll_interval(secs(1));
        assert_eq!(c, config());
    }

    #[test]
    fn preference_applied_is_read_as_rfc_7240_says() {
        for yes in [
            "respond-async",
            "Respond-Async",
            " respond-async ",
            "return=minimal, respond-async",
            "respond-async; x=1",
        ] {
            assert!(applies_respond_async(Some(yes)), "{yes:?}");
        }
        for no in ["", "return=minimal", "respond-asynchronously", "return=respond-async", "wait=10"] {
            assert!(!applies_respond_async(Some(no)), "{no:?}");
        }
        assert!(!applies_respond_async(None));
    }

    #[test]
    fn a_job_is_polled_until_its_answer_within_the_poll_deadline() {
        let c = config(); // polls: 1 s apart at least, for 60 s
                          // The first 202 (judged by decide): Retry-After, at least the poll interval.
        assert_eq!(c.decide(accepted(Some(secs(3))), 1, secs(50), 0.5), Decision::Poll { after: secs(3) });
        assert_eq!(c.decide(accepted(None), 1, secs(0), 0.5), Decision::Poll { after: secs(1) });
        assert_eq!(c.decide(accepted(Some(ms(0))), 1, secs(0), 0.5), Decision::Poll { after: secs(1) });
        // The overall deadline (30 s) does not end polling; the poll deadline does.
        assert_eq!(
            c.decide_pending(accepted(Some(secs(2))), 1, secs(40), 0.5),
            Decision::Poll { after: secs(2) }
        );
        assert_eq!(
            c.decide_pending(accepted(Some(secs(2))), 1, secs(57), 0.5),
            Decision::Poll { after: secs(2) }
        );
        assert_eq!(
            c.decide_pending(accepted(Some(secs(2))), 1, secs(58), 0.5),
            Decision::StillPending,
            "the next poll would start exactly at the poll deadline"
        );
        assert_eq!(c.decide_pending(accepted(Some(Duration::MAX)), 1, secs(1), 0.5), Decision::StillPending);
        // A Retry-After past the poll deadline hands the job back at once.
        assert_eq!(c.decide(accepted(Some(secs(90))), 1, secs(0), 0.5), Decision::StillPending);
        // No polling at all.
        let no_polls = config().with_poll_deadline(Duration::ZERO);
        assert_eq!(no_polls.decide(accepted(Some(secs(1))), 1, secs(0), 0.5), Decision::StillPending);
        // The final answer of a poll is judged as any answer.
        assert_eq!(c.decide_pending(response(201), 1, secs(59), 0.5), Decision::Done);
        assert_eq!(c.decide_pending(problem(422, KEY_REUSED, None), 1, secs(5), 0.5), Decision::Fail);
        assert_eq!(
            c.decide_pending(problem(502, UNKNOWN, None), 1, secs(5), 0.5),
            Decision::NeedsReconciliation
        );
    }

    #[test]
    fn a_failed_poll_is_retried_within_the_poll_deadline_and_ends_still_pending() {
        let c = config(); // 5 attempts, 100 ms base
        assert_eq!(
            c.decide_pending(Transport(Timeout), 1, secs(45), 1.0),
            Decision::Retry { after: ms(100) }
        );
        assert_eq!(
            c.decide_pending(problem(409, IN_PROGRESS, Some(secs(2))), 2, secs(45), 1.0),
            Decision::Retry { after: secs(2) }
        );
        assert_eq!(c.decide_pending(Transport(Timeout), 5, secs(1), 1.0), Decision::StillPending, "attempts");
        assert_eq!(c.decide_pending(Transport(Timeout), 1, ms(59_950), 1.0), Decision::StillPending, "time");
        assert_eq!(c.decide_pending(Transport(Fatal), 1, secs(1), 1.0), Decision::Fail);
        // Before an acceptance the same failures give up.
        assert_eq!(
            c.decide(Transport(Timeout), 5, secs(1), 1.0),
            Decision::GiveUp(GiveUpReason::AttemptsExhausted)
        );
    }

    #[test]
    fn poll_timeouts_end_by_the_poll_deadline() {
        let c = config(); // 10 s per attempt, 60 s of polling
        assert_eq!(c.poll_timeout_at(secs(0)), Some(secs(10)));
        assert_eq!(c.poll_timeout_at(secs(55)), Some(secs(5)));
        assert_eq!(c.poll_timeout_at(secs(60)), None);
    }

    #[test]
    fn decide_follows_the_verdict() {
        let c = config();
        assert_eq!(c.decide(response(201), 1, ms(0), 0.5), Decision::Done);
        assert_eq!(c.decide(response(201), 5, ms(0), 0.5), Decision::Done, "success on the last attempt");
        assert_eq!(c.decide(problem(422, KEY_REUSED, None), 1, ms(0), 0.5), Decision::Fail);
        assert_eq!(c.decide(response(400), 1, ms(0), 0.5), Decision::Fail);
        assert_eq!(c.decide(Transport(Fatal), 1, ms(0), 0.5), Decision::Fail);
        assert_eq!(c.decide(problem(502, UNKNOWN, None), 1, ms(0), 0.5), Decision::NeedsReconciliation);
        assert_eq!(
            c.decide(problem(502, UNKNOWN, None), 1, ms(0), 0.5),
            Decision::NeedsReconciliation,
            "reconciliation is never retried, even with attempts and time left"
        );
        assert_eq!(c.decide(Transport(Timeout), 1, ms(0), 1.0), Decision::Retry { after: ms(100) });
    }

    #[test]
    fn full_jitter_exponential_backoff() {
        let c = config();
        // Ceilings: 100, 200, 400, 800, 1600, then the 2 s cap.
        let ceilings: Vec<u64> = (1..=8).map(|n| c.backoff_ceiling(n).as_millis() as u64).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
        assert_eq!(c.backoff(3, 0.0), ms(0));
        assert_eq!(c.backoff(3, 0.5), ms(200));
        assert_eq!(c.backoff(3, 1.0), ms(400));
        assert_eq!(c.backoff(3, 0.25), ms(100));
        assert_eq!(c.backoff(3, 7.0), ms(400), "clamped to 1");
        assert_eq!(c.backoff(3, -1.0), ms(0), "clamped to 0");
        assert_eq!(c.backoff(3, f64::NAN), ms(0));
        assert_eq!(c.backoff(0, 1.0), ms(100), "attempt 0 counts as the first");
        // Huge exponents saturate at the cap instead of overflowing.
        assert_eq!(c.backoff_ceiling(40), secs(2));
        assert_eq!(c.backoff_ceiling(u32::MAX), secs(2));
        let huge = RetryConfig { base_backoff: Duration::MAX, max_backoff: secs(5), ..c };
        assert_eq!(huge.backoff_ceiling(3), secs(5));
    }

    #[test]
    fn retry_waits_the_jittered_backoff() {
        let c = config();
        for (attempt, random, wait) in
            [(1, 1.0, 100), (1, 0.5, 50), (2, 1.0, 200), (4, 0.5, 400), (4, 0.0, 0)]
        {
            assert_eq!(
                c.decide(Transport(ConnectionReset), attempt, secs(1), random),
                Decision::Retry { after: ms(wait) },
                "attempt {attempt}, random {random}"
            );
        }
    }

    #[test]
    fn retry_after_is_a_lower_bound() {
        let c = config();
        let limited =
            Response { status: 429, retry_after: Some(secs(3)), problem_type: None, respond_async: false };
        // The jitter (at most 100 ms here) is below Retry-After: Retry-After wins.
        assert_eq!(c.decide(limited, 1, ms(0), 1.0), Decision::Retry { after: secs(3) });
        assert_eq!(c.decide(limited, 1, ms(0), 0.0), Decision::Retry { after: secs(3) });
        // A backoff above Retry-After is kept.
        let brief =
            Response { status: 429, retry_after: Some(ms(50)), problem_type: None, respond_async: false };
        assert_eq!(c.decide(brief, 4, ms(0), 1.0), Decision::Retry { after: ms(800) });
        // Retry-After above the cap is still honoured.
        let long = problem(409, IN_PROGRESS, Some(secs(5)));
        assert_eq!(c.decide(long, 1, ms(0), 1.0), Decision::Retry { after: secs(5) });
        // Zero Retry-After: the backoff alone.
        let zero =
            Response { status: 429, retry_after: Some(ms(0)), problem_type: None, respond_async: false };
        assert_eq!(c.decide(zero, 1, ms(0), 0.5), Decision::Retry { after: ms(50) });
    }

    #[test]
    fn attempt_cap() {
        let c = config();
        assert_eq!(c.decide(Transport(Timeout), 4, ms(0), 1.0), Decision::Retry { after: ms(800) });
        assert_eq!(
            c.decide(Transport(Timeout), 5, ms(0), 1.0),
            Decision::GiveUp(GiveUpReason::AttemptsExhausted)
        );
        assert_eq!(c.decide(response(429), 6, ms(0), 1.0), Decision::GiveUp(GiveUpReason::AttemptsExhausted));
        let once = RetryConfig { max_attempts: 1, ..c };
        assert_eq!(
            once.decide(response(429), 1, ms(0), 0.0),
            Decision::GiveUp(GiveUpReason::AttemptsExhausted)
        );
        let zero = RetryConfig { max_attempts: 0, ..c };
        assert_eq!(
            zero.decide(response(429), 1, ms(0), 0.0),
            Decision::GiveUp(GiveUpReason::AttemptsExhausted)
        );
        assert_eq!(zero.decide(response(201), 1, ms(0), 0.0), Decision::Done);
    }

    #[test]
    fn overall_deadline() {
        let c = config(); // 30 s
        assert_eq!(c.decide(Transport(Timeout), 1, ms(29_800), 1.0), Decision::Retry { after: ms(100) });
        assert_eq!(
            c.decide(Transport(Timeout), 1, ms(29_900), 1.0),
            Decision::GiveUp(GiveUpReason::DeadlineExceeded),
            "the next attempt would start exactly at the deadline"
        );
        assert_eq!(
            c.decide(Transport(Timeout), 1, secs(31), 0.0),
            Decision::GiveUp(GiveUpReason::DeadlineExceeded)
        );
        // A Retry-After that ends past the deadline gives up now instead of sleeping in vain.
        let late =
            Response { status: 429, retry_after: Some(secs(20)), problem_type: None, respond_async: false };
        assert_eq!(c.decide(late, 1, secs(11), 0.0), Decision::GiveUp(GiveUpReason::DeadlineExceeded));
        assert_eq!(c.decide(late, 1, secs(9), 0.0), Decision::Retry { after: secs(20) });
        let forever = Response {
            status: 429,
            retry_after: Some(Duration::MAX),
            problem_type: None,
            respond_async: false,
        };
        assert_eq!(c.decide(forever, 1, secs(1), 0.0), Decision::GiveUp(GiveUpReason::DeadlineExceeded));
        // The deadline does not turn a final answer into a give-up.
        assert_eq!(c.decide(response(201), 1, secs(60), 0.0), Decision::Done);
        assert_eq!(c.decide(problem(502, UNKNOWN, None), 1, secs(60), 0.0), Decision::NeedsReconciliation);
    }

    #[test]
    fn attempt_timeouts_end_by_the_deadline() {
        let c = config(); // 10 s per attempt, 30 s deadline
        assert_eq!(c.attempt_timeout_at(secs(0)), Some(secs(10)));
        assert_eq!(c.attempt_timeout_at(secs(20)), Some(secs(10)));
        assert_eq!(c.attempt_timeout_at(secs(25)), Some(secs(5)));
        assert_eq!(c.attempt_timeout_at(ms(29_999)), Some(ms(1)));
        assert_eq!(c.attempt_timeout_at(secs(30)), None);
        assert_eq!(c.attempt_timeout_at(secs(31)), None);
    }

    #[test]
    fn problem_type_needs_the_problem_media_type() {
        let body = br#"{"type":"urn:idempotency-edge:problem:in-progress","status":409}"#;
        assert_eq!(problem_type(Some("application/problem+json"), body).as_deref(), Some(IN_PROGRESS));
        assert_eq!(
            problem_type(Some("Application/Problem+JSON; charset=utf-8"), body).as_deref(),
            Some(IN_PROGRESS)
        );
        assert_eq!(problem_type(Some("application/json"), body), None, "an origin's JSON is not a problem");
        assert_eq!(problem_type(None, body), None);
        assert_eq!(problem_type(Some("application/problem+json"), b"not json"), None);
        assert_eq!(problem_type(Some("application/problem+json"), br#"{"type":7}"#), None);
        assert_eq!(problem_type(Some("application/problem+json"), br#"["type"]"#), None);
    }

    /// The protocol crate's rule (its own tests hold the table), read as a wait from now.
    #[test]
    fn retry_after_is_the_workers_rule_as_a_wait() {
        // Sun, 06 Nov 1994 08:49:37 GMT is 784111777.
        let now = 784_111_777;
        assert_eq!(parse_retry_after(" 120 ", now), Some(secs(120)));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now), Some(secs(30)));
        assert_eq!(parse_retry_after("Sat, 05 Nov 1994 08:49:37 GMT", now), Some(secs(0)), "past: no wait");
        assert_eq!(parse_retry_after("99999999999999999999999", now), None, "the backoff applies");
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
