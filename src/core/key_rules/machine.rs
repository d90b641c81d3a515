//! The per-key state machine: (record, event, now) → record change + actions.
//!
//! Owns every decision a key's Durable Object makes. It reads no clock, does no I/O and
//! keeps no state: the object passes in what it has stored and what happened, and carries
//! out the returned [`Step`] in order: first the record change (durably), then the actions.
//! If the record change cannot be written, the object steps again with the matching
//! `*WriteFailed` event and carries out that step instead.
//!
//! Rules:
//! 1. An absent or expired record is claimed: an in-flight record with a lease is written
//!    before anything is forwarded.
//! 2. A request whose fingerprint differs from the record's is refused (422), whatever the
//!    state, and nothing is forwarded.
//! 3. While the claim's owner is alive in this object, duplicates join it (bounded by the
//!    duplicate wait and the waiter cap). A claim with no live owner (the object restarted)
//!    is answered 409 until its lease ends, and outcome-unknown afterwards: it is never
//!    forwarded again, unless the origin deduplicates by key itself (rule 7).
//! 4. An origin result is recorded only for the claim that is still current (fencing).
//! 5. A completed record is replayed unchanged until it expires.
//! 6. A failed claim write forwards nothing (503). A failed outcome write still answers the
//!    caller, and the key stays held: the stored claim outlives its lease as unknown.
//! 7. Where the origin honours `Idempotency-Key` itself (`ORIGIN_DEDUPLICATES`), sending the
//!    same request again under the same key cannot execute it twice, and it turns an
//!    unknown outcome into the real answer. So an unknown outcome, or a claim whose lease
//!    ran out with no live owner, is claimed again under a new fenced attempt and
//!    forwarded, until the key has been sent `MAX_ORIGIN_ATTEMPTS` times; then it is held
//!    unknown as without the option. An answer too large to store is never sent again: it
//!    would be too large again. A re-send carries the key in the one spelling the first
//!    attempt had (`core::primitives::key` rule 6) and, since a shaped fingerprint cannot be combined
//!    with this option (`core::edge_rules::config`), the first attempt's body. A re-send answered with
//!    a client error (4xx that would be final) is held unknown and its callers told so:
//!    the first attempt never got that answer (it got none), and such an answer may be the
//!    origin's refusal of the re-send itself (Stripe's 400 `idempotency_error`), not the
//!    key's outcome.
//! 8. A request that asks for asynchronous acceptance (`core::key_rules::machine::async_job`) claims an absent
//!    key as a job, which the alarm executes; an arrival on a job's key is a poll (202, or
//!    503 `origin-unavailable` once the job gave up). An unknown outcome taken up again for
//!    such a request (rule 7) becomes a job too, instead of a forward.
//! 9. Where the route has a lookup (`core::key_rules::reconcile`), a claim stores it, sealed, and its
//!    alarm is set for the lease's end, so that an owner that died is noticed. An unknown
//!    outcome (or such a claim, past its lease) is looked up: from the alarm, with backoff,
//!    until the record expires, and once at once for a retry ([`reconcile_first`]). "Not
//!    executed" releases the key, once the origin has had its timeout again since the outcome
//!    became unknown (a dead claim's: when its lease ended), not sooner: it may be a request
//!    the origin has not committed yet;
//!    "executed" stores the lookup's answer as the final one; anything else leaves the key
//!    unknown and asks again later.

use std::sync::Arc;

use super::reconcile::{self, Verdict};
use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::job::JobPhase;
use crate::core::formats::key_record::{
    AttemptId, Completed, InFlight, KeyRecord, StoredResponse, Unknown, UnknownReason,
};
use crate::core::formats::reconciling::Reconciling;
use crate::core::vocabulary::key_terms::{Timing, WaiterLimits, LEASE_MARGIN_MS, MAX_STORED_RESPONSE_BYTES};
use crate::core::vocabulary::outcome_table::{
    disposition, release_confirmed, Disposition, OriginResult, OutcomeTable,
};
use crate::core::vocabulary::problem::{Problem, ProblemKind};

pub mod async_job;
use crate::core::primitives::time::Millis;
use async_job::AsyncAccept;

/// Something that happened to the key.
#[derive(Clone, Debug)]
pub enum Event {
    /// A covered request arrived.
    Arrival {
        fingerprint: Digest256,
        /// The id this request's claim gets if it executes (the runtime draws it at random).
        new_attempt: AttemptId,
        /// The claim this object instance is executing right now, if any.
        live_attempt: Option<AttemptId>,
        /// How many requests already wait on the live attempt.
        waiters: usize,
        /// The body bytes those waiters brought in.
        waiting_bytes: u64,
        /// `Some(n)` where the origin deduplicates by key itself: an unknown outcome may be
        /// sent again, until the key has been sent `n` times in all (rule 7).
        max_origin_attempts: Option<u16>,
        /// This request's body size.
        body_bytes: u64,
        limits: WaiterLimits,
        timing: Timing,
        /// Set when the request asks for asynchronous acceptance (`Prefer: respond-async`
        /// where `ASYNC_ACCEPT=prefer`), with its sealed request.
        accept: Option<Box<AsyncAccept>>,
        /// The route's lookup, sealed for a claim this arrival makes (rule 9).
        lookup: Option<Box<Reconciling>>,
    },
    /// The claim could not be written.
    ClaimWriteFailed { attempt: AttemptId },
    /// The forwarded attempt finished. `response` is the origin's answer, as it would be
    /// stored, when `result` is `Responded`.
    OriginFinished {
        attempt: AttemptId,
        result: OriginResult,
        response: Option<Arc<StoredResponse>>,
        timing: Timing,
        /// How this route's origin answers are classified.
        outcome: OutcomeTable,
    },
    /// The outcome of `attempt` could not be written; `answer` is what its callers get, as
    /// the failed step's `Settle` said.
    OutcomeWriteFailed { attempt: AttemptId, answer: Arc<StoredResponse>, origin_answered: bool },
    /// A duplicate's wait on `attempt` ran out.
    WaitExpired { attempt: AttemptId },
    /// The object's alarm fired. `live_attempt` as for an arrival.
    Alarm { live_attempt: Option<AttemptId> },
    /// The alarm fired, with the id a job's next send gets (the runtime draws it). For a
    /// record without a job, as [`Event::Alarm`].
    JobAlarm { live_attempt: Option<AttemptId>, new_attempt: AttemptId },
    /// A lookup of the unknown outcome of `attempt` answered (rule 9); `jitter` in `[0, 1]`
    /// for the backoff, drawn by the runtime.
    Reconciled { attempt: AttemptId, verdict: Verdict, timing: Timing, jitter: f64 },
    /// A job's send finished (fields as for [`Event::OriginFinished`]), with the origin's
    /// `Retry-After` in milliseconds and the jitter for the backoff: a number in `[0, 1]`
    /// that the runtime drew.
    JobFinished {
        attempt: AttemptId,
        result: OriginResult,
        response: Option<Arc<StoredResponse>>,
        timing: Timing,
        outcome: OutcomeTable,
        retry_after_ms: Option<u64>,
        jitter: f64,
    },
}

/// What becomes of the stored record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyRecordChange {
    Keep,
    Put(KeyRecord),
    /// Forget the key: delete all of the object's storage.
    Delete,
}

/// Something for the object to carry out, after the record change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Schedule the object's alarm at this time.
    SetAlarm(Millis),
    /// Send this request to the origin as `attempt`.
    Forward { attempt: AttemptId },
    /// Answer with the stored response, marked `Idempotent-Replayed: true`.
    Replay(Arc<StoredResponse>),
    /// Wait up to `wait_ms` for `attempt` to settle, then answer with its outcome.
    Join { attempt: AttemptId, wait_ms: u64 },
    /// Answer with this problem.
    Reject(Problem),
    /// Answer 202 Accepted (`Preference-Applied: respond-async`) with this `Retry-After`:
    /// the key's job runs (`core::key_rules::machine::async_job`).
    Accepted { retry_after: u64 },
    /// `attempt` is over: its own caller gets the origin's live answer (or `answer` when the
    /// origin gave none), and every waiter gets `answer`, marked replayed.
    Settle { attempt: AttemptId, answer: Arc<StoredResponse>, origin_answered: bool },
    /// Ask the origin's lookup whether the unknown outcome of `attempt` executed, then step
    /// with [`Event::Reconciled`] (rule 9).
    Lookup { attempt: AttemptId },
    /// Decide the arrival that asked for the lookup before it (rule 9's "once at once for a
    /// retry"), on the record as the lookup's verdict left it, without asking again.
    Arrive,
}

/// The result of one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub change: KeyRecordChange,
    pub actions: Vec<Action>,
}

impl Step {
    pub(super) fn keep(actions: Vec<Action>) -> Step {
        Step { change: KeyRecordChange::Keep, actions }
    }
}

/// Decides what `event` does to a key whose stored record is `record`, at `now`.
pub fn step(record: Option<&KeyRecord>, event: Event, now: Millis) -> Step {
    match event {
        Event::Arrival {
            fingerprint,
            new_attempt,
            live_attempt,
            waiters,
            waiting_bytes,
            max_origin_attempts,
            body_bytes,
            limits,
            timing,
            accept,
            lookup,
        } => {
            let room = Room { waiters, waiting_bytes, body_bytes, limits };
            let arrival =
                Arrival { fingerprint, new_attempt, live_attempt, room, max_origin_attempts, timing, accept, lookup };
            on_arrival(record, arrival, now)
        }
        Event::JobAlarm { live_attempt, new_attempt } => match record {
            Some(KeyRecord::InFlight(claim @ InFlight { async_job: Some(job), .. })) if !record_expired(claim, now) => {
                async_job::on_alarm(claim, job, live_attempt, Some(new_attempt), now)
            }
            _ => step(record, Event::Alarm { live_attempt }, now),
        },
        Event::JobFinished { attempt, result, response, timing, outcome, retry_after_ms, jitter } => {
            if let Some(KeyRecord::InFlight(claim @ InFlight { async_job: Some(job), .. })) = record {
                if claim.attempt == attempt && job.phase == JobPhase::Sending {
                    let (result, disposition) = classify(result, response.as_deref(), &outcome);
                    if let Some(step) =
                        async_job::on_finished(claim, job, disposition, result, retry_after_ms, jitter, now)
                    {
                        return step;
                    }
                }
            }
            // A stored answer, an unknown outcome held, or a stale attempt (fencing): as
            // for any attempt.
            on_origin_finished(record, attempt, result, response, timing, &outcome, now)
        }
        Event::ClaimWriteFailed { .. } => Step::keep(vec![Action::Reject(
            Problem::new(
                ProblemKind::StorageUnavailable,
                "The key could not be claimed durably, so the request was not forwarded. Retry with the same key.",
            )
            .with_retry_after(1),
        )]),
        Event::OriginFinished { attempt, result, response, timing, outcome } => {
            on_origin_finished(record, attempt, result, response, timing, &outcome, now)
        }
        Event::OutcomeWriteFailed { attempt, answer, origin_answered } => {
            // The claim stays stored: once its lease ends the key reads as unknown, and it
            // is never forwarded again. The callers still get what the origin said.
            Step::keep(vec![Action::Settle { attempt, answer, origin_answered }])
        }
        Event::WaitExpired { attempt } => {
            let lease_left = match record {
                Some(KeyRecord::InFlight(claim)) if claim.attempt == attempt => claim.lease_until.saturating_sub(now),
                _ => 0,
            };
            Step::keep(vec![Action::Reject(in_progress(lease_left.min(5_000)))])
        }
        Event::Alarm { live_attempt } => match record {
            // A job is sent only with an attempt id ([`Event::JobAlarm`]): look again when due.
            Some(KeyRecord::InFlight(claim @ InFlight { async_job: Some(job), .. })) if !record_expired(claim, now) => {
                Step::keep(vec![Action::SetAlarm(job.due(claim).max(now))])
            }
            // An execution still running keeps its claim, even past expiry; look again later.
            Some(KeyRecord::InFlight(claim)) if live_attempt == Some(claim.attempt) => {
                Step::keep(vec![Action::SetAlarm(now.saturating_add(LEASE_MARGIN_MS).max(claim.expires_at))])
            }
            // Rule 9: a claim whose owner died, past its lease, is an unknown outcome to look
            // up now; an unknown outcome is looked up when due.
            Some(KeyRecord::InFlight(claim @ InFlight { reconcile: Some(reconciling), .. }))
                if now >= claim.lease_until && !record_expired(claim, now) =>
            {
                let reconcile = Some(Reconciling { next_at: now, ..reconciling.clone() });
                let unknown = KeyRecord::Unknown(unknown_of_dead_claim(claim, reconcile));
                Step { change: KeyRecordChange::Put(unknown), actions: vec![Action::Lookup { attempt: claim.attempt }] }
            }
            Some(KeyRecord::Unknown(unknown @ Unknown { reconcile: Some(reconciling), .. })) if now < unknown.expires_at => {
                if now >= reconciling.next_at {
                    Step::keep(vec![Action::Lookup { attempt: unknown.attempt }])
                } else {
                    Step::keep(vec![Action::SetAlarm(reconciling.next_at.min(unknown.expires_at))])
                }
            }
            Some(record) if !record.is_expired(now) => Step::keep(vec![Action::SetAlarm(record.expires_at())]),
            _ => Step { change: KeyRecordChange::Delete, actions: vec![] },
        },
        Event::Reconciled { attempt, verdict, timing, jitter } => on_reconciled(record, attempt, verdict, timing, jitter, now),
    }
}

/// Rule 9 for a retry, as the first step of its arrival: where [`reconcile_first`] names an
/// attempt, the arrival looks it up, then is decided on the record the verdict leaves
/// (nothing written before); otherwise `None`, and the arrival is decided at once.
pub fn lookup_before_arrival(
    record: Option<&KeyRecord>,
    fingerprint: Digest256,
    live_attempt: Option<AttemptId>,
    now: Millis,
) -> Option<Step> {
    let attempt = reconcile_first(record, fingerprint, live_attempt, now)?;
    Some(Step::keep(vec![Action::Lookup { attempt }, Action::Arrive]))
}

/// Rule 9 for a retry: the attempt whose outcome a lookup should settle before the arrival
/// is decided, if any: an unknown outcome whose record keeps a lookup, not asked yet or due
/// again, or a claim with a lookup whose owner is gone, past its lease. Bounded so that
/// retries cannot turn into a stream of lookups: once a lookup said nothing, the next is
/// not asked before the backoff's time, however often the client retries (and a lookup
/// that runs is joined, `runtime::reconcile`). A record without a lookup (written before
/// the route had one) is not looked up; an answer too large to store neither: it would be
/// too large again. Only a retry of the same request asks (`fingerprint`): a request that
/// reuses the key for another payload is refused 422 as ever, and drives no lookup.
pub fn reconcile_first(
    record: Option<&KeyRecord>,
    fingerprint: Digest256,
    live_attempt: Option<AttemptId>,
    now: Millis,
) -> Option<AttemptId> {
    match record? {
        record if record.is_expired(now) || record.fingerprint() != fingerprint => None,
        KeyRecord::Unknown(Unknown { reason: UnknownReason::ResponseTooLarge { .. }, .. }) => None,
        KeyRecord::Unknown(Unknown { attempt, reconcile: Some(reconciling), .. }) => {
            (reconciling.asked == 0 || now >= reconciling.next_at).then_some(*attempt)
        }
        KeyRecord::InFlight(claim)
            if claim.async_job.is_none()
                && claim.reconcile.is_some()
                && live_attempt != Some(claim.attempt)
                && now >= claim.lease_until =>
        {
            Some(claim.attempt)
        }
        _ => None,
    }
}

/// Rule 9's fencing, asked again just before a verdict that had to await (sealing) is
/// written: whether `record` is still the unknown outcome (or the dead claim) of `attempt`.
pub fn lookup_is_current(record: Option<&KeyRecord>, attempt: AttemptId) -> bool {
    match record {
        Some(KeyRecord::Unknown(unknown)) => unknown.attempt == attempt,
        Some(KeyRecord::InFlight(claim)) => claim.attempt == attempt && claim.async_job.is_none(),
        _ => false,
    }
}

/// A claim whose owner died, past its lease: its outcome is unknown, and became so when the
/// lease ended (the owner could have sent it until then), whenever it is noticed.
fn unknown_of_dead_claim(claim: &InFlight, reconcile: Option<Reconciling>) -> Unknown {
    Unknown {
        attempt: claim.attempt,
        fingerprint: claim.fingerprint,
        origin_attempts: claim.origin_attempts,
        since: claim.lease_until,
        expires_at: claim.expires_at,
        reason: UnknownReason::OriginTimeout,
        reconcile,
    }
}

/// Rule 9: what a lookup's verdict does to the unknown outcome of `attempt` (fenced: a
/// record that moved on meanwhile is kept as it is).
fn on_reconciled(
    record: Option<&KeyRecord>,
    attempt: AttemptId,
    verdict: Verdict,
    timing: Timing,
    jitter: f64,
    now: Millis,
) -> Step {
    let Some(current) = record.filter(|record| record.attempt() == attempt && !record.is_expired(now)) else {
        return Step::keep(Vec::new());
    };
    let unknown = match current {
        KeyRecord::Unknown(unknown) => unknown.clone(),
        KeyRecord::InFlight(claim @ InFlight { async_job: None, .. }) if now >= claim.lease_until => {
            unknown_of_dead_claim(claim, claim.reconcile.clone())
        }
        _ => return Step::keep(Vec::new()),
    };
    // "Not found" is believed only once the origin has had the origin timeout again after
    // the outcome became unknown: an origin still working on a request it has not committed
    // yet may not find it, and releasing the key then would execute it twice. Sooner, it
    // is asked again later. A dead claim's outcome became unknown when its lease ended (its
    // owner may have sent the request at the last moment), so it waits as long.
    let trusted_from = unknown.since.saturating_add(timing.origin_timeout_ms);
    let too_soon = matches!(verdict, Verdict::NotExecuted) && now < trusted_from;
    // A claim from before the key had one spelling at the origin may have sent another
    // than the lookup asks for (`core::key_rules::reconcile` rule 7): its "not found" says nothing.
    let spelling_unknown = !unknown.reconcile.as_ref().is_some_and(|reconciling| reconciling.spelling_known);
    let unbelieved = matches!(verdict, Verdict::NotExecuted) && spelling_unknown;
    let verdict = if too_soon || unbelieved { Verdict::Unsure } else { verdict };
    match verdict {
        Verdict::NotExecuted => Step { change: KeyRecordChange::Delete, actions: Vec::new() },
        Verdict::Executed(answer) if stored_size(&answer) <= MAX_STORED_RESPONSE_BYTES => {
            let expires_at = now.saturating_add(timing.ttl_ms).max(unknown.expires_at);
            let done = KeyRecord::Completed(Completed {
                attempt,
                fingerprint: unknown.fingerprint,
                completed_at: now,
                expires_at,
                response: Arc::new(answer),
                sealed_answer: None,
                sealed_bound: false,
                chunks: None,
            });
            Step { change: KeyRecordChange::Put(done), actions: vec![Action::SetAlarm(expires_at)] }
        }
        // Nothing known (or an answer too large to keep): ask again later, until expiry.
        _ => match &unknown.reconcile {
            Some(reconciling) => {
                // A not-found that came too soon is asked again when it can be believed.
                let next_at = if too_soon && !unbelieved {
                    trusted_from
                } else {
                    now.saturating_add(reconcile::next_delay(reconciling.asked, jitter))
                };
                let asked = reconciling.asked.saturating_add(1);
                let reconcile = Some(Reconciling { asked, next_at, ..reconciling.clone() });
                let alarm = next_at.min(unknown.expires_at);
                let next = KeyRecord::Unknown(Unknown { reconcile, ..unknown });
                Step { change: KeyRecordChange::Put(next), actions: vec![Action::SetAlarm(alarm)] }
            }
            // Looked up for a retry only (the record kept no lookup): nothing to schedule.
            None if matches!(current, KeyRecord::Unknown(_)) => Step::keep(Vec::new()),
            None => Step { change: KeyRecordChange::Put(KeyRecord::Unknown(unknown)), actions: Vec::new() },
        },
    }
}

/// Whether `record` is still the claim of `attempt`: rule 4's fencing, asked again by the
/// runtime just before it writes an outcome that it had to await (sealing), since other
/// requests may have purged the key and claimed it anew meanwhile.
pub fn claim_is_current(record: Option<&KeyRecord>, attempt: AttemptId) -> bool {
    matches!(record, Some(KeyRecord::InFlight(claim)) if claim.attempt == attempt)
}

fn record_expired(claim: &InFlight, now: Millis) -> bool {
    now >= claim.expires_at
}

/// What one more waiter would add to the live execution's waiters.
struct Room {
    waiters: usize,
    waiting_bytes: u64,
    body_bytes: u64,
    limits: WaiterLimits,
}

impl Room {
    fn is_full(&self) -> bool {
        !self.limits.admits(self.waiters)
            || self.waiting_bytes.saturating_add(self.body_bytes) > self.limits.max_waiting_bytes
    }
}

/// An arrival's facts, gathered for [`on_arrival`].
struct Arrival {
    fingerprint: Digest256,
    new_attempt: AttemptId,
    live_attempt: Option<AttemptId>,
    room: Room,
    max_origin_attempts: Option<u16>,
    timing: Timing,
    /// The arrival asks for asynchronous acceptance (rule 8).
    accept: Option<Box<AsyncAccept>>,
    /// The route's lookup, sealed, for a claim (rule 9).
    lookup: Option<Box<Reconciling>>,
}

/// A claim for `new_attempt`, forwarded at once: the key's `origin_attempts`-th sending.
/// `earlier` is the lookup of the record it replaces, kept where this arrival brings none.
fn claim_and_forward(
    arrival: &Arrival,
    origin_attempts: u16,
    keep_until: Millis,
    earlier: Option<&Reconciling>,
    now: Millis,
) -> Step {
    if let Some(accept) = &arrival.accept {
        // Rule 8: a job instead, sent by the alarm (the `origin_attempts`-th sending).
        let sent = origin_attempts.saturating_sub(1);
        let fingerprint = arrival.fingerprint;
        let lookup = arrival.lookup.as_deref().or(earlier).cloned();
        return async_job::claim(
            arrival.new_attempt,
            fingerprint,
            accept,
            arrival.timing.ttl_ms,
            sent,
            keep_until,
            lookup,
            now,
        );
    }
    let lease_until = now.saturating_add(arrival.timing.lease_ms());
    let expires_at = now.saturating_add(arrival.timing.ttl_ms).max(lease_until).max(keep_until);
    let claim = InFlight {
        reconcile: arrival.lookup.as_deref().or(earlier).map(|lookup| Reconciling {
            asked: 0,
            next_at: 0,
            ..lookup.clone()
        }),
        attempt: arrival.new_attempt,
        fingerprint: arrival.fingerprint,
        origin_attempts,
        claimed_at: now,
        lease_until,
        expires_at,
        async_job: None,
    };
    let alarm_at = claim_alarm(&claim, &arrival.timing);
    Step {
        change: KeyRecordChange::Put(KeyRecord::InFlight(claim)),
        actions: vec![Action::SetAlarm(alarm_at), Action::Forward { attempt: arrival.new_attempt }],
    }
}

/// When a claim's alarm is set: late enough for whatever outcome it gets, so that the
/// outcome's write sets no alarm of its own (one `setAlarm` per key, a billed row write
/// each). An outcome is recorded at the latest when the claim's lease ends (the origin call
/// is bounded by the timeout the lease covers), and kept for the TTL from then. A claim's
/// own expiry is not moved: past it, the claim reads as expired whatever the alarm, and an
/// alarm that finds a record not yet expired sets itself again at the record's expiry.
///
/// A claim with a lookup (rule 9) sets its alarm for the lease's end instead, so that an
/// owner that died is noticed and its outcome looked up; its outcome then moves the alarm.
pub fn claim_alarm(claim: &InFlight, timing: &Timing) -> Millis {
    if claim.reconcile.is_some() {
        return claim.lease_until;
    }
    claim.lease_until.saturating_add(timing.ttl_ms).max(claim.expires_at)
}

/// Rule 7 for a key whose outcome is unknown: claim it again, or say why not.
fn reforward_or_hold(arrival: &Arrival, record: &KeyRecord, reason: UnknownReason, now: Millis) -> Step {
    let sent = record.origin_attempts();
    match arrival.max_origin_attempts {
        Some(max) if sent < max && !matches!(reason, UnknownReason::ResponseTooLarge { .. }) => {
            claim_and_forward(arrival, sent.saturating_add(1), record.expires_at(), record.reconciling(), now)
        }
        Some(max) if sent >= max => Step::keep(vec![Action::Reject(attempts_exhausted(reason, sent))]),
        _ => Step::keep(vec![Action::Reject(outcome_unknown(reason))]),
    }
}

fn on_arrival(record: Option<&KeyRecord>, arrival: Arrival, now: Millis) -> Step {
    let Arrival { fingerprint, live_attempt, timing, .. } = arrival;
    let room = &arrival.room;
    let live = |attempt: AttemptId| live_attempt == Some(attempt);
    let current = match record {
        Some(KeyRecord::InFlight(claim)) if live(claim.attempt) => record,
        Some(record) if record.is_expired(now) => None,
        other => other,
    };
    let Some(current) = current else {
        return claim_and_forward(&arrival, 1, 0, None, now);
    };
    if current.fingerprint() != fingerprint {
        return Step::keep(vec![Action::Reject(Problem::new(
            ProblemKind::KeyReused,
            "This Idempotency-Key was first used with a different request (method, path, content type or body), or by a request with other credentials (REPLAY_CREDENTIAL_HEADERS). Nothing was forwarded. Use a new key for a new request.",
        ))]);
    }
    let action = match current {
        // Rule 8: a poll of a job, whatever this arrival prefers.
        KeyRecord::InFlight(claim @ InFlight { async_job: Some(job), .. }) => {
            return async_job::on_poll(claim, job, now)
        }
        KeyRecord::Completed(done) => Action::Replay(done.response.clone()),
        KeyRecord::Unknown(unknown) => return reforward_or_hold(&arrival, current, unknown.reason, now),
        KeyRecord::InFlight(claim) if live(claim.attempt) => {
            if room.is_full() {
                Action::Reject(in_progress(1_000))
            } else {
                Action::Join { attempt: claim.attempt, wait_ms: timing.duplicate_wait_ms }
            }
        }
        // Claimed by an instance that is gone (a restart or reset). It may still be running
        // until its lease ends; afterwards nobody can know whether it executed.
        KeyRecord::InFlight(claim) if now < claim.lease_until => {
            Action::Reject(in_progress(claim.lease_until - now))
        }
        KeyRecord::InFlight(_) => {
            return reforward_or_hold(&arrival, current, UnknownReason::OriginTimeout, now)
        }
    };
    Step::keep(vec![action])
}

/// The disposition of a finished attempt: the outcome table applied to its result and, for
/// an answer, to its `Idempotency-Released` header. A "response" without its answer cannot
/// be stored or replayed; all that is known is that the request was sent.
pub fn classify(
    result: OriginResult,
    response: Option<&StoredResponse>,
    outcome: &OutcomeTable,
) -> (OriginResult, Disposition) {
    let result = match (result, response) {
        (OriginResult::Responded(_), None) => OriginResult::ResetAfterSend,
        (result, _) => result,
    };
    let confirmed = response.is_some_and(|response| {
        release_confirmed(response.headers.iter().map(|(name, value)| (name.as_str(), value.as_str())))
    });
    (result, disposition(result, outcome, confirmed))
}

/// Why an attempt's outcome is unknown, in the record's terms. A status that leaves the
/// outcome unknown is told as what it stands for: a timeout (504, 524, 408) or a connection
/// that broke after the request was sent (520, a gateway's 502, anything else).
fn unknown_reason(result: OriginResult) -> UnknownReason {
    match result {
        OriginResult::TimedOut | OriginResult::Responded(408 | 504 | 524) => UnknownReason::OriginTimeout,
        OriginResult::Oversized(status) => UnknownReason::ResponseTooLarge { status },
        _ => UnknownReason::ResetAfterSend,
    }
}

fn on_origin_finished(
    record: Option<&KeyRecord>,
    attempt: AttemptId,
    result: OriginResult,
    response: Option<Arc<StoredResponse>>,
    timing: Timing,
    outcome: &OutcomeTable,
    now: Millis,
) -> Step {
    let (result, mut disposition) = classify(result, response.as_deref(), outcome);
    // Rule 7: a re-send refused as a client error says nothing of the first attempt (an
    // origin that saw something else under the key, or that was still executing it, answers
    // so): held unknown, and told as unknown, never stored as the key's answer.
    let resent = matches!(record, Some(KeyRecord::InFlight(claim)) if claim.attempt == attempt && claim.origin_attempts > 1);
    let refused_resend =
        resent && disposition == Disposition::Final && matches!(result, OriginResult::Responded(400..=499));
    if refused_resend {
        disposition = Disposition::Unknown;
    }
    let (answer, origin_answered) = match (&response, result) {
        (Some(_), OriginResult::Responded(_)) if refused_resend => {
            (Arc::new(problem_response(&outcome_unknown(UnknownReason::ResetAfterSend))), false)
        }
        (Some(response), OriginResult::Responded(_)) => (response.clone(), true),
        // The answer went to its caller as a stream; waiters cannot share it.
        (_, OriginResult::Oversized(status)) => (
            Arc::new(problem_response(&outcome_unknown(UnknownReason::ResponseTooLarge { status }))),
            true,
        ),
        (_, OriginResult::ConnectRefused) => (
            Arc::new(problem_response(&Problem::new(
                ProblemKind::OriginUnreachable,
                "The origin refused the connection before the request was sent. Nothing was executed; retry with the same key.",
            ).with_retry_after(1))),
            false,
        ),
        (_, OriginResult::ResetAfterSend) => (Arc::new(problem_response(&outcome_unknown(UnknownReason::ResetAfterSend))), false),
        _ => (Arc::new(problem_response(&outcome_unknown(UnknownReason::OriginTimeout))), false),
    };
    let settle = Action::Settle { attempt, answer: answer.clone(), origin_answered };

    // Fencing: only the claim that is still current may record an outcome.
    let claim = match record {
        Some(KeyRecord::InFlight(claim)) if claim.attempt == attempt => claim,
        _ => return Step::keep(vec![settle]),
    };
    let fingerprint = claim.fingerprint;
    let retained_until = now.saturating_add(timing.ttl_ms).max(claim.expires_at);
    let origin_attempts = claim.origin_attempts;
    let unknown = |reason| {
        // Rule 9: looked up from the alarm, unless it would be too large again.
        let reconcile = match reason {
            UnknownReason::ResponseTooLarge { .. } => None,
            _ => claim.reconcile.as_ref().map(|lookup| Reconciling {
                next_at: now.saturating_add(reconcile::FIRST_DELAY_MS),
                ..lookup.clone()
            }),
        };
        KeyRecord::Unknown(Unknown {
            reconcile,
            attempt,
            fingerprint,
            origin_attempts,
            since: now,
            expires_at: retained_until,
            reason,
        })
    };
    let next = match disposition {
        Disposition::Release => return Step { change: KeyRecordChange::Delete, actions: vec![settle] },
        Disposition::Unknown => unknown(unknown_reason(result)),
        Disposition::Final if stored_size(&answer) > MAX_STORED_RESPONSE_BYTES => {
            unknown(UnknownReason::ResponseTooLarge { status: answer.status })
        }
        Disposition::Final => KeyRecord::Completed(Completed {
            attempt,
            fingerprint,
            completed_at: now,
            expires_at: now.saturating_add(timing.ttl_ms),
            response: answer,
            sealed_answer: None,
            sealed_bound: false,
            chunks: None,
        }),
    };
    // The claim's alarm (`claim_alarm`) covers an outcome recorded within the lease; one
    // recorded later (a claim of an earlier release, or an outcome write that outlasted the
    // lease) moves it.
    let expires_at = next.expires_at();
    let actions = if let Some(reconciling) = next.reconciling() {
        vec![Action::SetAlarm(reconciling.next_at.min(expires_at)), settle]
    } else if expires_at <= claim_alarm(claim, &timing) {
        vec![settle]
    } else {
        vec![Action::SetAlarm(expires_at), settle]
    };
    Step { change: KeyRecordChange::Put(next), actions }
}

fn stored_size(response: &StoredResponse) -> usize {
    response.body.len() + stored_header_bytes(&response.headers) as usize
}

/// What an answer's headers count for against the stored-size cap: each name and value,
/// with 8 bytes of framing. The one rule for it: the size a stored answer is judged by here
/// and the cap its body is read up to (`key_state::answer_body_cap`) both come from it.
pub fn stored_header_bytes(headers: &[(String, String)]) -> u64 {
    headers.iter().map(|(name, value)| (name.len() + value.len() + 8) as u64).sum()
}

/// 409 with a `Retry-After` of the given time, rounded up to whole seconds.
fn in_progress(retry_after_ms: u64) -> Problem {
    Problem::new(
        ProblemKind::InProgress,
        "A request with this Idempotency-Key is still being processed. Retry later with the same key and payload.",
    )
    .with_retry_after(retry_after_ms.div_ceil(1_000))
}

/// The problem every caller of a key with an unknown outcome gets.
pub fn outcome_unknown(reason: UnknownReason) -> Problem {
    let why = match reason {
        UnknownReason::OriginTimeout => "The origin did not answer in time".to_owned(),
        UnknownReason::ResetAfterSend => {
            "The connection to the origin broke after the request was sent, or the origin's answer did not say whether it was executed".to_owned()
        }
        UnknownReason::ResponseTooLarge { status } => {
            format!("The origin answered {status}, but the response is too large to store for replay")
        }
    };
    Problem::new(
        ProblemKind::OutcomeUnknown,
        format!("{why}, so the request may or may not have been executed. It will not be forwarded again with this key; reconcile with the origin before creating a new request."),
    )
}

/// The problem for a key that was sent to the origin as often as allowed, and whose outcome
/// is still unknown.
pub fn attempts_exhausted(reason: UnknownReason, sent: u16) -> Problem {
    let unknown = outcome_unknown(reason);
    Problem::new(
        ProblemKind::OutcomeUnknown,
        format!("{} The request was sent to the origin {sent} times with this key, the most allowed (MAX_ORIGIN_ATTEMPTS).", unknown.detail),
    )
}

/// A problem in the form of a stored response, so that waiters can be given it.
pub fn problem_response(problem: &Problem) -> StoredResponse {
    let mut headers =
        vec![("content-type".to_owned(), crate::core::vocabulary::problem::PROBLEM_CONTENT_TYPE.to_owned())];
    if let Some(seconds) = problem.retry_after {
        headers.push(("retry-after".to_owned(), seconds.to_string()));
    }
    // RFC 9110 §15.5.2: a 401 names how to authenticate.
    if matches!(
        problem.kind,
        ProblemKind::MissingCredential | ProblemKind::UnverifiedCredential | ProblemKind::Unauthorized
    ) {
        headers.push(("www-authenticate".to_owned(), "Bearer".to_owned()));
    }
    StoredResponse { status: problem.status(), headers, body: problem.to_json() }
}

#[cfg(test)]
mod reconcile_tests;
#[cfg(test)]
mod tests;
