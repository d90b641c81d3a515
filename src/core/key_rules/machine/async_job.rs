//! Asynchronous acceptance (RFC 7240 `Prefer: respond-async`): the request is
//! claimed and stored (sealed) with the claim, answered 202 at once, and executed by the
//! key's object from its alarm, with retries while the outcome says that it did not execute.
//!
//! Owns the job's stored form (record extension tag 3), its configuration, the stored
//! request's encoding, the backoff, and the job's part of the state machine
//! (`core::key_rules::machine` delegates here). No clock, no randomness, no I/O: the runtime passes
//! in `now`, the jitter it drew, and the sealed request bytes, sealed bound to that `now`
//! (the job's claim time) and the fingerprint.
//!
//! Rules:
//! 1. A covered request that prefers `respond-async` where `ASYNC_ACCEPT=prefer` claims an
//!    absent key as a *job*: an in-flight record holding the sealed request, the route's
//!    policy and a deadline (`ASYNC_DEADLINE_SECONDS`, at most the TTL). It is answered 202
//!    with `Preference-Applied: respond-async` and `Retry-After`; the alarm is set for now.
//! 2. The alarm sends the stored request under a new fenced attempt (the send is claimed
//!    durably first, with a lease, as every forward is). One alarm per object: the next
//!    attempt, the lease of the running one, or the record's expiry.
//! 3. An outcome that certainly did not execute (the outcome table's `Release`: a refused
//!    connection, 408, 425, 429, 503, …) is retried after an exponential backoff with full
//!    jitter, capped at `ASYNC_MAX_BACKOFF_SECONDS`, and never sooner than the origin's
//!    `Retry-After`. A final answer is stored and replayed, as for any request.
//! 4. An unknown outcome (a timeout, a reset, a send orphaned by a restart) is sent again
//!    only where the origin deduplicates by key (`ORIGIN_DEDUPLICATES`), and only while the
//!    key has been sent fewer than `MAX_ORIGIN_ATTEMPTS` times; otherwise the key is held
//!    unknown, as today, and the stored request is dropped.
//! 5. Every job is sent at most `MAX_ORIGIN_ATTEMPTS` times, whatever the dedupe
//!    setting: a proxy's 503 that came after the origin ran must not become a hundred
//!    executions an hour until the deadline. The send that reaches the cap with a release
//!    status gives up (`gave-up`), as the deadline does; one that might have executed is
//!    held unknown.
//! 6. No attempt starts at or after the deadline. If the next attempt would, the job gives
//!    up: if no attempt could have executed, the next poll gets 503 `origin-unavailable`
//!    (never executed) and the key is released; if one might have, the key is held unknown.
//! 7. A body over [`MAX_STORED_REQUEST_BODY_BYTES`] cannot be stored with the claim: such a
//!    request is served as if it did not prefer `respond-async` ([`ArrivalPlan`]).
//! 9. On a route with a lookup (`core::key_rules::reconcile`), a job reconciles as a synchronous
//!    request does: its claim keeps the lookup, sealed, through every send, and an outcome
//!    it ends with unknown (held under rule 4 or 6, or recorded as for any attempt) is
//!    looked up from the alarm and by the client's polls. Every execution on such a route,
//!    synchronous or not, has its lookup.
//! 8. Polling is sending the same request with the same key: 202 while the job runs, the
//!    stored answer once there is one, 422 for another payload (`core::key_rules::machine`, rule 2).

use crate::core::vocabulary::decision::Decision;

use super::{Action, KeyRecordChange, Step};
use crate::core::formats::job::{AsyncJob, JobPhase, DEFAULT_MAX_SENDS};
use crate::core::formats::key_record::{
    AttemptId, InFlight, KeyRecord, StoredResponse, Unknown, UnknownReason,
};
use crate::core::formats::reconciling::Reconciling;
use crate::core::key_rules::reconcile::FIRST_DELAY_MS;
use crate::core::primitives::time::Millis;
use crate::core::vocabulary::config_error::ConfigError;
use crate::core::vocabulary::key_terms::LEASE_MARGIN_MS;
use crate::core::vocabulary::key_terms::{KeyTerms, MAX_TTL_SECONDS};
use crate::core::vocabulary::problem::{Problem, ProblemKind};

/// `ASYNC_ACCEPT`: `off` (default) or `prefer`.
pub const VAR_ASYNC_ACCEPT: &str = "ASYNC_ACCEPT";
/// `ASYNC_DEADLINE_SECONDS`: how long a job may try (at most the TTL; unset, the smaller of
/// [`DEFAULT_DEADLINE_SECONDS`] and the TTL of the job's policy).
pub const VAR_ASYNC_DEADLINE_SECONDS: &str = "ASYNC_DEADLINE_SECONDS";
/// `ASYNC_MAX_BACKOFF_SECONDS`: the cap of one backoff (default 30).
pub const VAR_ASYNC_MAX_BACKOFF_SECONDS: &str = "ASYNC_MAX_BACKOFF_SECONDS";

/// The header value and token of RFC 7240.
pub use idempotency_edge_protocol::RESPOND_ASYNC;

/// The first backoff's ceiling; it doubles with every send, up to the configured cap.
pub const BACKOFF_BASE_MS: u64 = 1_000;
/// The shortest wait between two sends, whatever the jitter drew.
pub const MIN_RETRY_DELAY_MS: u64 = 250;
/// The largest request body a job stores: the job is one SQLite row (at most 2 MB), which
/// also holds the headers, the policy and the seal. A larger body is served as without
/// the preference (forwarded at once), rather than refused.
pub const MAX_STORED_REQUEST_BODY_BYTES: u64 = 1_500_000;

/// A job's deadline where `ASYNC_DEADLINE_SECONDS` is unset, unless its policy's TTL is
/// shorter: then the TTL (a default is never what makes a configuration invalid).
pub const DEFAULT_DEADLINE_SECONDS: u64 = 3_600;

/// The longest backoff cap that may be configured.
const MAX_MAX_BACKOFF_SECONDS: u64 = 3_600;
/// The flat async settings (`ASYNC_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncConfig {
    /// `ASYNC_ACCEPT=prefer`.
    pub prefer: bool,
    pub deadline_ms: u64,
    pub max_backoff_ms: u64,
    /// The most sends of one job (`MAX_ORIGIN_ATTEMPTS`, rule 5).
    pub max_sends: u16,
}

impl Default for AsyncConfig {
    fn default() -> Self {
        AsyncConfig {
            prefer: false,
            deadline_ms: DEFAULT_DEADLINE_SECONDS * 1_000,
            max_backoff_ms: 30_000,
            max_sends: DEFAULT_MAX_SENDS,
        }
    }
}

impl AsyncConfig {
    /// Parses the `ASYNC_*` variables. Whether a deadline that was set fits the TTL is
    /// checked by the configuration, which knows every route's TTL
    /// ([`AsyncConfig::check_ttl`]); one that was not is derived from each policy's TTL
    /// ([`AsyncConfig::with_default_deadline`]).
    pub fn from_vars<'a>(
        lookup: &impl Fn(&'static str) -> Option<&'a str>,
    ) -> Result<AsyncConfig, ConfigError> {
        let prefer = match lookup(VAR_ASYNC_ACCEPT).map(str::trim).unwrap_or("") {
            "" | "off" => false,
            "prefer" => true,
            _ => return Err(ConfigError::new(VAR_ASYNC_ACCEPT, "expected off or prefer")),
        };
        let seconds = |name: &'static str, default: u64, max: u64| -> Result<u64, ConfigError> {
            let Some(raw) = lookup(name) else { return Ok(default) };
            let text = raw.trim();
            match text.parse::<u64>() {
                Ok(value) if (1..=max).contains(&value) && text.bytes().all(|b| b.is_ascii_digit()) => {
                    Ok(value)
                }
                _ => Err(ConfigError::new(name, format!("expected a whole number from 1 to {max}"))),
            }
        };
        Ok(AsyncConfig {
            prefer,
            deadline_ms: seconds(VAR_ASYNC_DEADLINE_SECONDS, DEFAULT_DEADLINE_SECONDS, MAX_TTL_SECONDS)?
                * 1_000,
            max_backoff_ms: seconds(VAR_ASYNC_MAX_BACKOFF_SECONDS, 30, MAX_MAX_BACKOFF_SECONDS)? * 1_000,
            // `MAX_ORIGIN_ATTEMPTS` is the configuration's: it sets this (`Config::from_vars`).
            max_sends: DEFAULT_MAX_SENDS,
        })
    }

    /// These settings for a policy whose TTL is `ttl_ms`, where `ASYNC_DEADLINE_SECONDS`
    /// is unset: the deadline is the default or the TTL, whichever is shorter.
    pub fn with_default_deadline(self, ttl_ms: u64) -> AsyncConfig {
        AsyncConfig { deadline_ms: (DEFAULT_DEADLINE_SECONDS * 1_000).min(ttl_ms), ..self }
    }

    /// A job must end before its record can expire: a deadline that was set is at most the
    /// TTL of every policy where asynchronous acceptance is on.
    pub fn check_ttl(&self, ttl_ms: u64) -> Result<(), ConfigError> {
        if self.deadline_ms > ttl_ms {
            return Err(ConfigError::new(
                VAR_ASYNC_DEADLINE_SECONDS,
                format!("it must be at most the TTL ({} s) wherever ASYNC_ACCEPT is prefer", ttl_ms / 1_000),
            ));
        }
        Ok(())
    }

    /// `deadline_ms,max_backoff_ms,max_sends`: what the Worker hands the object with a
    /// request that asks for asynchronous acceptance.
    pub fn encode(&self) -> String {
        format!("{},{},{}", self.deadline_ms, self.max_backoff_ms, self.max_sends)
    }

    /// The inverse of [`AsyncConfig::encode`] (with `prefer` set). A value without
    /// `max_sends` (from a Worker of an earlier release) gets [`DEFAULT_MAX_SENDS`].
    pub fn decode(value: &str) -> Option<AsyncConfig> {
        let mut parts = value.split(',');
        let deadline_ms = parts.next()?.trim().parse().ok()?;
        let max_backoff_ms = parts.next()?.trim().parse().ok()?;
        let max_sends = match parts.next() {
            None => DEFAULT_MAX_SENDS,
            Some(text) => text.trim().parse().ok().filter(|&sends: &u16| sends >= 1)?,
        };
        parts.next().is_none().then_some(AsyncConfig { prefer: true, deadline_ms, max_backoff_ms, max_sends })
    }
}

/// Whether a `Prefer` header value (RFC 7240 §2: comma-separated preferences, each a token
/// with optional `=value` and `;` parameters) asks for `respond-async`.
pub fn prefers_respond_async(prefer: Option<&str>) -> bool {
    prefer.is_some_and(|value| value.split(',').any(is_respond_async))
}

fn is_respond_async(preference: &str) -> bool {
    let name = preference.split([';', '=']).next().unwrap_or("").trim();
    name.eq_ignore_ascii_case(RESPOND_ASYNC)
}

/// The `Prefer` value to send on to the origin: without `respond-async`, which the edge
/// has honoured itself (the origin must answer the stored request with its final answer).
/// `None` when nothing is left.
pub fn prefer_for_origin(prefer: &str) -> Option<String> {
    let rest: Vec<&str> = prefer
        .split(',')
        .filter(|pref| !is_respond_async(pref) && !pref.trim().is_empty())
        .map(str::trim)
        .collect();
    (!rest.is_empty()).then(|| rest.join(", "))
}

/// When a job is due, and the facts of its policy that its rules read.
impl AsyncJob {
    /// When the alarm must next look at this job.
    pub fn due(&self, claim: &InFlight) -> Millis {
        match self.phase {
            JobPhase::Waiting => self.next_attempt_at.min(claim.expires_at),
            JobPhase::Sending => claim.lease_until,
            JobPhase::GaveUp => claim.expires_at,
        }
    }

    /// `Some(n)` where the job's origin deduplicates by key (from its policy).
    fn max_origin_attempts(&self) -> Option<u16> {
        self.policy.max_origin_attempts
    }

    fn lease_ms(&self) -> u64 {
        self.policy.timing.lease_ms()
    }

    fn ttl_ms(&self) -> u64 {
        self.policy.timing.ttl_ms
    }
}

/// An object asked to store a request without a key ring to seal it: refused (the Worker
/// refuses such a configuration first; an object never stores a request unsealed).
pub fn no_key_ring_to_seal_requests() -> Problem {
    Problem::new(
        ProblemKind::InvalidConfig,
        "ASYNC_ACCEPT stores requests, credentials included: set the secret STORAGE_ENCRYPTION_KEYS so that they are sealed.",
    )
}

/// What an arrival that asks for asynchronous acceptance brings: its request, sealed by
/// the runtime before the arrival is stepped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncAccept {
    pub sealed_request: Vec<u8>,
    pub policy: KeyTerms,
    pub probe_origin: bool,
    pub config: AsyncConfig,
}

/// The backoff before the next send, after `sent` sends: full jitter (a uniform draw,
/// passed in as `jitter` in `[0, 1]`) under `min(cap, base · 2^(sent-1))`, but never
/// shorter than [`MIN_RETRY_DELAY_MS`] nor than the origin's `Retry-After`.
pub fn backoff_ms(sent: u16, jitter: f64, max_backoff_ms: u64, retry_after_ms: Option<u64>) -> u64 {
    let doublings = u32::from(sent.saturating_sub(1)).min(30);
    let ceiling = BACKOFF_BASE_MS.saturating_mul(1u64 << doublings).min(max_backoff_ms);
    let jitter = if jitter.is_finite() { jitter.clamp(0.0, 1.0) } else { 1.0 };
    let drawn = (ceiling as f64 * jitter) as u64;
    drawn.max(MIN_RETRY_DELAY_MS).max(retry_after_ms.unwrap_or(0))
}

pub use idempotency_edge_protocol::retry_after::parse_retry_after;

/// 202 Accepted for a job that runs (its claim, or a poll of it):
/// `Preference-Applied: respond-async` (RFC 7240 §3) and when to poll again.
pub fn accepted_response(retry_after: u64) -> StoredResponse {
    let header = |name: &str, value: String| (name.to_owned(), value);
    let headers = vec![
        header("content-type", "application/json".to_owned()),
        header("preference-applied", "respond-async".to_owned()),
        header("retry-after", retry_after.to_string()),
    ];
    let body = format!("{{\"status\":\"pending\",\"retry_after\":{retry_after}}}").into_bytes();
    StoredResponse { status: 202, headers, body }
}

/// The delay an origin's answer asks for in its `Retry-After` header (the first, whatever
/// its case), in milliseconds from `now`.
pub fn retry_after_in(headers: &[(String, String)], now: Millis) -> Option<u64> {
    let value = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("retry-after"));
    parse_retry_after(value.map(|(_, value)| value.as_str()), now)
}

/// How an enforced arrival is served, decided before anything is awaited (rule 7): as a job
/// (`accept`, with the request sealed for later), or synchronously; and whether it
/// reconciles (`core::key_rules::reconcile`): an unknown outcome is looked up before it is decided,
/// and a claim it makes keeps the route's lookup, sealed. Every arrival on a route with a
/// lookup reconciles, a job (rule 9) and a request that preferred `respond-async` with a
/// body too large for a job alike: each execution can become unknown, and must then be
/// looked up. An observed arrival (`observing`) is neither: the Worker forwards it, so there
/// is nothing to seal for later and nothing the object would look up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrivalPlan {
    pub accept: Option<AsyncConfig>,
    pub reconcile: bool,
    pub observing: bool,
}

impl ArrivalPlan {
    /// `accept_async`: the envelope's asynchronous settings (the request prefers
    /// `respond-async` where the route accepts it); `body_bytes`: the request's body size;
    /// `route_has_lookup`: the route names a `reconcile_url`.
    pub fn new(accept_async: Option<AsyncConfig>, body_bytes: u64, route_has_lookup: bool) -> ArrivalPlan {
        let accept = accept_async.filter(|_| body_bytes <= MAX_STORED_REQUEST_BODY_BYTES);
        ArrivalPlan { accept, reconcile: route_has_lookup, observing: false }
    }

    /// An observed arrival's plan: recorded as enforcing would, never a job, no lookup.
    pub fn observed() -> ArrivalPlan {
        ArrivalPlan { accept: None, reconcile: false, observing: true }
    }
}

/// The problem for a job that gave up: 503, never executed, the key released.
pub fn origin_unavailable() -> Problem {
    Problem::new(
        ProblemKind::OriginUnavailable,
        "The origin could not take the request before the deadline (ASYNC_DEADLINE_SECONDS): every attempt was refused or answered that it was not executed, so the request was never executed. The key is released; send the request again to start over.",
    )
}

/// Rule 1: claims a key for a job (after `sent` sends of this key, which is more than zero
/// only when an unknown outcome is taken up again under rule 4), keeping the route's
/// `lookup` (rule 9).
#[allow(clippy::too_many_arguments)]
pub(super) fn claim(
    new_attempt: AttemptId,
    fingerprint: crate::core::formats::fingerprint::Digest256,
    accept: &AsyncAccept,
    ttl_ms: u64,
    sent: u16,
    keep_until: Millis,
    lookup: Option<Reconciling>,
    now: Millis,
) -> Step {
    let expires_at = now.saturating_add(ttl_ms).max(keep_until);
    let job = AsyncJob {
        phase: JobPhase::Waiting,
        deadline: now.saturating_add(accept.config.deadline_ms).min(expires_at),
        next_attempt_at: now,
        max_backoff_ms: accept.config.max_backoff_ms,
        unknown_seen: sent > 0,
        probe_origin: accept.probe_origin,
        max_sends: accept.config.max_sends,
        // The runtime seals every new job's request bound to its claim time and payload.
        request_bound: true,
        policy: Box::new(accept.policy.clone()),
        sealed_request: accept.sealed_request.clone(),
    };
    let claim = InFlight {
        reconcile: lookup.map(|lookup| Reconciling { asked: 0, next_at: 0, ..lookup }),
        attempt: new_attempt,
        fingerprint,
        origin_attempts: sent,
        claimed_at: now,
        lease_until: now,
        expires_at,
        async_job: Some(job),
    };
    Step {
        change: KeyRecordChange::Put(KeyRecord::InFlight(claim)),
        actions: vec![Action::SetAlarm(now), Action::Accepted { retry_after: 1 }],
    }
}

/// Rule 6: an arrival (a poll) on a key whose job runs or gave up.
pub(super) fn on_poll(claim: &InFlight, job: &AsyncJob, now: Millis) -> Step {
    let seconds = |at: Millis| at.saturating_sub(now).div_ceil(1_000).max(1);
    match job.phase {
        JobPhase::GaveUp => {
            Step { change: KeyRecordChange::Delete, actions: vec![Action::Reject(origin_unavailable())] }
        }
        JobPhase::Waiting => Step::keep(vec![Action::Accepted { retry_after: seconds(job.next_attempt_at) }]),
        JobPhase::Sending => {
            Step::keep(vec![Action::Accepted { retry_after: seconds(claim.lease_until).min(5) }])
        }
    }
}

/// Rule 2: the alarm on a key with a job. `new_attempt` is the id a send would get.
pub(super) fn on_alarm(
    claim: &InFlight,
    job: &AsyncJob,
    live_attempt: Option<AttemptId>,
    new_attempt: Option<AttemptId>,
    now: Millis,
) -> Step {
    let later = |at: Millis| Step::keep(vec![Action::SetAlarm(at)]);
    match job.phase {
        JobPhase::GaveUp => later(claim.expires_at),
        // This instance is sending it: the send's end sets the next alarm.
        JobPhase::Sending if live_attempt == Some(claim.attempt) => {
            later(now.saturating_add(LEASE_MARGIN_MS).max(claim.lease_until))
        }
        JobPhase::Sending if now < claim.lease_until => later(claim.lease_until),
        // A send whose owner is gone (a restart): it may have executed.
        JobPhase::Sending => after_unknown(claim, job, UnknownReason::OriginTimeout, new_attempt, now),
        JobPhase::Waiting if now < job.next_attempt_at => later(job.next_attempt_at.min(claim.expires_at)),
        JobPhase::Waiting if now >= job.deadline => give_up(claim, job, now),
        JobPhase::Waiting => match new_attempt {
            Some(attempt) => send(claim, job, attempt, now),
            None => later(now),
        },
    }
}

/// A send of the stored request as `attempt`: claimed durably (with a lease) first.
fn send(claim: &InFlight, job: &AsyncJob, attempt: AttemptId, now: Millis) -> Step {
    let lease_until = now.saturating_add(job.lease_ms());
    let next = InFlight {
        reconcile: claim.reconcile.clone(),
        attempt,
        fingerprint: claim.fingerprint,
        origin_attempts: claim.origin_attempts.saturating_add(1),
        claimed_at: claim.claimed_at,
        lease_until,
        expires_at: claim.expires_at.max(lease_until),
        async_job: Some(AsyncJob { phase: JobPhase::Sending, ..job.clone() }),
    };
    Step {
        change: KeyRecordChange::Put(KeyRecord::InFlight(next)),
        actions: vec![Action::SetAlarm(lease_until), Action::Forward { attempt }],
    }
}

/// Rule 5: the deadline came. Held unknown when some attempt may have executed.
fn give_up(claim: &InFlight, job: &AsyncJob, now: Millis) -> Step {
    if job.unknown_seen {
        return hold_unknown(claim, job, UnknownReason::ResetAfterSend, now);
    }
    let next = InFlight {
        lease_until: now.min(claim.lease_until),
        async_job: Some(AsyncJob {
            phase: JobPhase::GaveUp,
            sealed_request: Vec::new(),
            next_attempt_at: claim.expires_at,
            ..job.clone()
        }),
        ..claim.clone()
    };
    let expires_at = next.expires_at;
    Step {
        change: KeyRecordChange::Put(KeyRecord::InFlight(next)),
        actions: vec![Action::SetAlarm(expires_at)],
    }
}

/// The job ends with its outcome unknown: the key is held, the stored request dropped; on
/// a route with a lookup, the alarm asks it first [`FIRST_DELAY_MS`] after (rule 9).
fn hold_unknown(claim: &InFlight, job: &AsyncJob, reason: UnknownReason, now: Millis) -> Step {
    let retained = now.saturating_add(job.ttl_ms()).max(claim.expires_at);
    let reconcile = claim
        .reconcile
        .as_ref()
        .map(|lookup| Reconciling { next_at: now.saturating_add(FIRST_DELAY_MS), ..lookup.clone() });
    let alarm = reconcile.as_ref().map_or(retained, |lookup| lookup.next_at.min(retained));
    let unknown = KeyRecord::Unknown(Unknown {
        reconcile,
        attempt: claim.attempt,
        fingerprint: claim.fingerprint,
        origin_attempts: claim.origin_attempts,
        since: now,
        expires_at: retained,
        reason,
    });
    Step { change: KeyRecordChange::Put(unknown), actions: vec![Action::SetAlarm(alarm)] }
}

/// Rule 4: an attempt whose outcome is unknown. Sent again at once (an orphaned send found
/// by the alarm, with `new_attempt`) or after a backoff (`retry_at`), or held unknown.
fn after_unknown(
    claim: &InFlight,
    job: &AsyncJob,
    reason: UnknownReason,
    new_attempt: Option<AttemptId>,
    now: Millis,
) -> Step {
    let sent = claim.origin_attempts;
    let may_resend = !matches!(reason, UnknownReason::ResponseTooLarge { .. })
        && job.max_origin_attempts().is_some_and(|max| sent < max)
        && sent < job.max_sends
        && now < job.deadline;
    let job = AsyncJob { unknown_seen: true, ..job.clone() };
    match new_attempt {
        Some(attempt) if may_resend => send(claim, &job, attempt, now),
        _ => hold_unknown(claim, &job, reason, now),
    }
}

/// What the job's step after a finished attempt is, when it is not the outcome table's
/// usual one (`None`: `core::key_rules::machine` records the outcome as for any attempt, which for a
/// job is a final answer stored, or an unknown outcome held).
pub(super) fn on_finished(
    claim: &InFlight,
    job: &AsyncJob,
    disposition: crate::core::vocabulary::outcome_table::Disposition,
    result: crate::core::vocabulary::outcome_table::OriginResult,
    retry_after_ms: Option<u64>,
    jitter: f64,
    now: Millis,
) -> Option<Step> {
    use crate::core::vocabulary::outcome_table::{Disposition, OriginResult};
    let sent = claim.origin_attempts;
    // Rule 5: every job's sends are capped, whatever the dedupe setting.
    let exhausted = sent >= job.max_sends || job.max_origin_attempts().is_some_and(|max| sent >= max);
    let (unknown_seen, reason) = match (disposition, result) {
        (Disposition::Final, _) | (Disposition::Unknown, OriginResult::Oversized(_)) => return None,
        (Disposition::Release, _) => (job.unknown_seen, UnknownReason::ResetAfterSend),
        (Disposition::Unknown, OriginResult::TimedOut | OriginResult::Responded(408 | 504 | 524)) => {
            (true, UnknownReason::OriginTimeout)
        }
        (Disposition::Unknown, _) => (true, UnknownReason::ResetAfterSend),
    };
    let job = AsyncJob { unknown_seen, ..job.clone() };
    // An unknown outcome is taken up again only where the origin deduplicates (rule 4).
    let resendable = disposition == Disposition::Release || job.max_origin_attempts().is_some();
    if !resendable {
        return None;
    }
    let next_attempt_at = now.saturating_add(backoff_ms(sent, jitter, job.max_backoff_ms, retry_after_ms));
    if exhausted || next_attempt_at >= job.deadline {
        return Some(if job.unknown_seen {
            hold_unknown(claim, &job, reason, now)
        } else {
            give_up(claim, &job, now)
        });
    }
    let next = InFlight {
        lease_until: now,
        async_job: Some(AsyncJob { phase: JobPhase::Waiting, next_attempt_at, ..job }),
        ..claim.clone()
    };
    Some(Step {
        change: KeyRecordChange::Put(KeyRecord::InFlight(next)),
        actions: vec![Action::SetAlarm(next_attempt_at)],
    })
}

/// The decision a job's step stands for, for the log line and the metric (`None`: the
/// step is not one of the job's own: a stored answer or an unknown outcome is logged as
/// for any request).
pub fn job_decision(before: Option<&KeyRecord>, change: &KeyRecordChange) -> Option<JobDecision> {
    let job_of = |record: Option<&KeyRecord>| match record {
        Some(KeyRecord::InFlight(InFlight { async_job: Some(job), .. })) => Some(job.phase),
        _ => None,
    };
    let KeyRecordChange::Put(after) = change else { return None };
    let unknown_seen = after.async_job().is_some_and(|job| job.unknown_seen);
    match (job_of(before), job_of(Some(after))) {
        (None, Some(JobPhase::Waiting)) => Some(JobDecision::Accepted),
        (Some(JobPhase::Sending), Some(JobPhase::Waiting)) => Some(JobDecision::RetryScheduled),
        // A send after an unknown outcome: only to an origin that deduplicates (rule 4).
        (Some(JobPhase::Sending), Some(JobPhase::Sending)) => Some(JobDecision::Reforwarded),
        (Some(JobPhase::Waiting), Some(JobPhase::Sending)) if unknown_seen => Some(JobDecision::Reforwarded),
        (Some(_), Some(JobPhase::GaveUp)) => Some(JobDecision::GaveUp),
        _ => None,
    }
}

/// The job's own decisions (see `core::vocabulary::decision::Decision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobDecision {
    Accepted,
    RetryScheduled,
    Reforwarded,
    GaveUp,
}

impl From<JobDecision> for Decision {
    fn from(decision: JobDecision) -> Decision {
        match decision {
            JobDecision::Accepted => Decision::Accepted,
            JobDecision::RetryScheduled => Decision::RetryScheduled,
            JobDecision::Reforwarded => Decision::Reforwarded,
            JobDecision::GaveUp => Decision::GaveUp,
        }
    }
}

#[cfg(test)]
mod tests;
