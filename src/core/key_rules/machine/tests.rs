//! Tests of the per-key state machine ([`step`]).
//!
//! - Unit tests, grouped by the rules in the module doc: claiming an absent or expired
//!   key, refusing a reused key, replaying a completed one, joining a live attempt (and
//!   the waiter cap), orphaned claims, every row of the outcome table, oversized
//!   responses, fencing of stale finishers, failed writes, expired waits and alarms.
//! - Property tests: a small simulator plays random event sequences through the real
//!   per-key driver (`core::key_rules::key_state::KeyState`) the way the runtime does (record change
//!   first, durably, then reported; a failed write is reported and the driver's step
//!   carried out instead; a crash forgets the driver and keeps storage) and checks the
//!   safety invariants after every step. On a route with a lookup (rule 9) the simulator
//!   looks up as the runtime does (a retry first, and the alarm), with generated verdicts.

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;
use crate::core::key_rules::key_state::{Arrival, Decided, KeyState, Pending};
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::key_terms::{KeyTerms, DEFAULT_WAITERS_PER_KEY};
use crate::core::vocabulary::problem::PROBLEM_CONTENT_TYPE;

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

pub(super) const T0: Millis = 1_700_000_000_000;
pub(super) const TTL: u64 = 86_400_000;
pub(super) const ORIGIN_TIMEOUT: u64 = 30_000;
const WAIT: u64 = 5_000;
pub(super) const LEASE: u64 = ORIGIN_TIMEOUT + LEASE_MARGIN_MS;

pub(super) const A: AttemptId = AttemptId(1);
pub(super) const B: AttemptId = AttemptId(2);
pub(super) const FP: Digest256 = Digest256([1; 32]);
const OTHER_FP: Digest256 = Digest256([2; 32]);

pub(super) fn timing() -> Timing {
    Timing { ttl_ms: TTL, duplicate_wait_ms: WAIT, origin_timeout_ms: ORIGIN_TIMEOUT }
}

pub(super) fn arrival(
    fingerprint: Digest256,
    new_attempt: AttemptId,
    live_attempt: Option<AttemptId>,
) -> Event {
    arrival_with_waiters(fingerprint, new_attempt, live_attempt, 0)
}

fn arrival_with_waiters(
    fingerprint: Digest256,
    new_attempt: AttemptId,
    live_attempt: Option<AttemptId>,
    waiters: usize,
) -> Event {
    Event::Arrival {
        lookup: None,
        fingerprint,
        new_attempt,
        live_attempt,
        waiters,
        waiting_bytes: 0,
        max_origin_attempts: None,
        body_bytes: 0,
        limits: WaiterLimits::default(),
        timing: timing(),
        accept: None,
    }
}

/// The claim the machine writes when `attempt` arrives first at `at` (with [`timing`]).
fn claim(attempt: AttemptId, at: Millis) -> InFlight {
    InFlight {
        reconcile: None,
        attempt,
        fingerprint: FP,
        origin_attempts: 1,
        claimed_at: at,
        lease_until: at + LEASE,
        expires_at: at + TTL,
        async_job: None,
    }
}

fn in_flight(attempt: AttemptId, at: Millis) -> KeyRecord {
    KeyRecord::InFlight(claim(attempt, at))
}

fn completed(attempt: AttemptId, at: Millis, response: Arc<StoredResponse>) -> KeyRecord {
    KeyRecord::Completed(Completed {
        attempt,
        fingerprint: FP,
        completed_at: at,
        expires_at: at + TTL,
        response,
        sealed_answer: None,
        sealed_bound: false,
        chunks: None,
    })
}

fn unknown(attempt: AttemptId, at: Millis, reason: UnknownReason) -> KeyRecord {
    KeyRecord::Unknown(Unknown {
        reconcile: None,
        attempt,
        fingerprint: FP,
        origin_attempts: 1,
        since: at,
        expires_at: at + TTL,
        reason,
    })
}

/// A small origin response with this status.
fn response(status: u16) -> Arc<StoredResponse> {
    Arc::new(StoredResponse {
        status,
        headers: vec![("content-type".to_owned(), "application/json".to_owned())],
        body: format!("{{\"status\":{status}}}").into_bytes(),
    })
}

/// A response whose stored size (body plus headers, as the machine counts it) is `size`.
fn response_of_size(status: u16, size: usize) -> Arc<StoredResponse> {
    let headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    let header_bytes: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 8).sum();
    Arc::new(StoredResponse { status, headers, body: vec![b'x'; size - header_bytes] })
}

/// The origin finished `attempt` with `result`; a `Responded` result carries `response`.
fn finished(attempt: AttemptId, result: OriginResult, response: Option<Arc<StoredResponse>>) -> Event {
    Event::OriginFinished { attempt, result, response, timing: timing(), outcome: OutcomeTable::default() }
}

/// The origin answered `attempt` with `answer`.
fn responded(attempt: AttemptId, answer: &Arc<StoredResponse>) -> Event {
    finished(attempt, OriginResult::Responded(answer.status), Some(answer.clone()))
}

/// The problem of a step that must keep the record and do nothing but answer with it.
fn rejection(step: &Step) -> &Problem {
    assert_eq!(step.change, KeyRecordChange::Keep, "a rejection keeps the record: {step:?}");
    match step.actions.as_slice() {
        [Action::Reject(problem)] => problem,
        other => panic!("expected a single Reject, got {other:?}"),
    }
}

/// The single `Settle` of a step: (attempt, answer, origin_answered).
fn settle_of(actions: &[Action]) -> (AttemptId, &Arc<StoredResponse>, bool) {
    settle_of_checked(actions).unwrap_or_else(|error| panic!("{error}"))
}

/// [`rejection`] for property tests.
fn rejection_of(step: &Step) -> Result<&Problem, TestCaseError> {
    prop_assert_eq!(&step.change, &KeyRecordChange::Keep);
    match step.actions.as_slice() {
        [Action::Reject(problem)] => Ok(problem),
        other => Err(TestCaseError::fail(format!("expected a single Reject, got {other:?}"))),
    }
}

/// [`settle_of`] for property tests.
fn settle_of_checked(actions: &[Action]) -> Result<(AttemptId, &Arc<StoredResponse>, bool), TestCaseError> {
    let settles: Vec<_> = actions
        .iter()
        .filter_map(|action| match action {
            Action::Settle { attempt, answer, origin_answered } => Some((*attempt, answer, *origin_answered)),
            _ => None,
        })
        .collect();
    prop_assert_eq!(settles.len(), 1, "expected exactly one Settle in {:?}", actions);
    Ok(settles[0])
}

fn forwards(actions: &[Action]) -> Vec<AttemptId> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Forward { attempt } => Some(*attempt),
            _ => None,
        })
        .collect()
}

fn problem_json(response: &StoredResponse) -> serde_json::Value {
    serde_json::from_slice(&response.body).expect("a problem body is JSON")
}

fn header<'a>(response: &'a StoredResponse, name: &str) -> Option<&'a str> {
    response.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

// ---------------------------------------------------------------------------------------
// Rule 1: an absent or expired record is claimed before anything is forwarded
// ---------------------------------------------------------------------------------------

#[test]
fn first_arrival_claims_then_forwards() {
    let step = step(None, arrival(FP, A, None), T0);
    let lease_until = T0 + ORIGIN_TIMEOUT + LEASE_MARGIN_MS;
    let expires_at = T0 + TTL;
    assert_eq!(
        step.change,
        KeyRecordChange::Put(KeyRecord::InFlight(InFlight {
            reconcile: None,
            attempt: A,
            fingerprint: FP,
            origin_attempts: 1,
            claimed_at: T0,
            lease_until,
            expires_at,
            async_job: None,
        }))
    );
    // The claim's alarm is set once, late enough for the outcome kept a TTL past the lease.
    assert_eq!(step.actions, vec![Action::SetAlarm(lease_until + TTL), Action::Forward { attempt: A }]);
}

#[test]
fn a_claim_is_retained_at_least_until_its_lease_ends() {
    let short = Timing { ttl_ms: 1_000, ..timing() };
    let event = Event::Arrival {
        lookup: None,
        fingerprint: FP,
        new_attempt: A,
        live_attempt: None,
        waiters: 0,
        waiting_bytes: 0,
        max_origin_attempts: None,
        body_bytes: 0,
        limits: WaiterLimits::default(),
        timing: short,
        accept: None,
    };
    let step = step(None, event, T0);
    let KeyRecordChange::Put(KeyRecord::InFlight(claim)) = &step.change else { panic!("no claim: {step:?}") };
    assert_eq!(claim.lease_until, T0 + short.lease_ms());
    assert_eq!(claim.expires_at, claim.lease_until, "expires_at = max(now + ttl, lease_until)");
    assert_eq!(
        step.actions,
        vec![Action::SetAlarm(claim.lease_until + 1_000), Action::Forward { attempt: A }]
    );
}

#[test]
fn claim_times_saturate_instead_of_overflowing() {
    let now = u64::MAX - 5;
    let step = step(None, arrival(FP, A, None), now);
    let KeyRecordChange::Put(KeyRecord::InFlight(claim)) = &step.change else { panic!("no claim: {step:?}") };
    assert_eq!((claim.lease_until, claim.expires_at), (u64::MAX, u64::MAX));
}

#[test]
fn expired_records_of_every_kind_are_claimed_anew() {
    let records = [
        in_flight(A, T0),
        completed(A, T0, response(201)),
        unknown(A, T0, UnknownReason::OriginTimeout),
        unknown(A, T0, UnknownReason::ResetAfterSend),
        unknown(A, T0, UnknownReason::ResponseTooLarge { status: 200 }),
    ];
    for record in &records {
        for now in [record.expires_at(), record.expires_at() + 1, record.expires_at() + TTL] {
            for fingerprint in [FP, OTHER_FP] {
                // The new request is not the claim's owner, whatever this instance runs.
                for live in [None, Some(AttemptId(99))] {
                    let step = step(Some(record), arrival(fingerprint, B, live), now);
                    let expected = InFlight {
                        reconcile: None,
                        attempt: B,
                        fingerprint,
                        origin_attempts: 1,
                        claimed_at: now,
                        lease_until: now + LEASE,
                        expires_at: now + TTL,
                        async_job: None,
                    };
                    assert_eq!(
                        step.change,
                        KeyRecordChange::Put(KeyRecord::InFlight(expected)),
                        "{record:?} at {now}"
                    );
                    assert_eq!(
                        step.actions,
                        vec![Action::SetAlarm(now + LEASE + TTL), Action::Forward { attempt: B }]
                    );
                }
            }
        }
    }
}

#[test]
fn a_record_is_held_until_the_millisecond_it_expires() {
    let records =
        [in_flight(A, T0), completed(A, T0, response(201)), unknown(A, T0, UnknownReason::OriginTimeout)];
    for record in &records {
        let step = step(Some(record), arrival(FP, B, None), record.expires_at() - 1);
        assert_eq!(step.change, KeyRecordChange::Keep, "{record:?}");
        assert!(forwards(&step.actions).is_empty(), "{record:?}: {step:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Rule 2: a different fingerprint is refused (422) in every state
// ---------------------------------------------------------------------------------------

#[test]
fn a_reused_key_is_refused_in_every_state() {
    let cases: [(&str, KeyRecord, Option<AttemptId>, Millis); 8] = [
        ("in flight, owner live", in_flight(A, T0), Some(A), T0 + 1),
        ("in flight, owner live, past expiry", in_flight(A, T0), Some(A), T0 + TTL + 1),
        ("in flight, orphaned within lease", in_flight(A, T0), None, T0 + 1),
        ("in flight, orphaned after lease", in_flight(A, T0), Some(B), T0 + LEASE),
        ("completed", completed(A, T0, response(200)), None, T0 + 1),
        ("unknown (timeout)", unknown(A, T0, UnknownReason::OriginTimeout), None, T0 + 1),
        ("unknown (reset)", unknown(A, T0, UnknownReason::ResetAfterSend), None, T0 + 1),
        (
            "unknown (too large)",
            unknown(A, T0, UnknownReason::ResponseTooLarge { status: 200 }),
            None,
            T0 + 1,
        ),
    ];
    for (name, record, live, now) in cases {
        for waiters in [0, DEFAULT_WAITERS_PER_KEY] {
            let step = step(Some(&record), arrival_with_waiters(OTHER_FP, B, live, waiters), now);
            let problem = rejection(&step);
            assert_eq!(problem.kind, ProblemKind::KeyReused, "{name}");
            assert_eq!(problem.status(), 422, "{name}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Rule 5: a completed record is replayed unchanged
// ---------------------------------------------------------------------------------------

#[test]
fn a_completed_record_is_replayed_with_the_stored_response() {
    let stored = response(201);
    let record = completed(A, T0, stored.clone());
    for now in [T0, T0 + 1, T0 + TTL - 1] {
        for live in [None, Some(A), Some(B)] {
            let step = step(Some(&record), arrival(FP, B, live), now);
            assert_eq!(step.change, KeyRecordChange::Keep);
            match step.actions.as_slice() {
                [Action::Replay(replayed)] => assert!(Arc::ptr_eq(replayed, &stored), "replays the same Arc"),
                other => panic!("expected a Replay, got {other:?}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Rule 3: duplicates join a live attempt; an orphaned claim is 409, then outcome-unknown
// ---------------------------------------------------------------------------------------

#[test]
fn a_duplicate_joins_the_live_attempt() {
    let record = in_flight(A, T0);
    for now in [T0, T0 + LEASE - 1, T0 + LEASE + 1] {
        let step =
            step(Some(&record), arrival_with_waiters(FP, B, Some(A), DEFAULT_WAITERS_PER_KEY - 1), now);
        assert_eq!(
            step,
            Step { change: KeyRecordChange::Keep, actions: vec![Action::Join { attempt: A, wait_ms: WAIT }] }
        );
    }
}

#[test]
fn past_the_waiting_bytes_a_duplicate_is_told_to_retry() {
    let record = in_flight(A, T0);
    let limits = WaiterLimits { max_waiters: 1_000, max_waiting_bytes: 10 * 1024 * 1024 };
    let arrive = |waiting_bytes: u64, body_bytes: u64| Event::Arrival {
        lookup: None,
        fingerprint: FP,
        new_attempt: B,
        live_attempt: Some(A),
        waiters: 3,
        waiting_bytes,
        max_origin_attempts: None,
        body_bytes,
        limits,
        timing: timing(),
        accept: None,
    };
    let fits = step(Some(&record), arrive(9 * 1024 * 1024, 1024 * 1024), T0 + 1);
    assert_eq!(fits.actions, vec![Action::Join { attempt: A, wait_ms: WAIT }]);
    let over = step(Some(&record), arrive(9 * 1024 * 1024, 1024 * 1024 + 1), T0 + 1);
    assert_eq!(rejection(&over).kind, ProblemKind::InProgress);
    let huge = step(Some(&record), arrive(u64::MAX, u64::MAX), T0 + 1);
    assert_eq!(rejection(&huge).status(), 409, "sums saturate instead of wrapping");
}

#[test]
fn the_route_outcome_policy_decides_what_a_status_means() {
    let record = in_flight(A, T0);
    let route_mode = OutcomeTable { via_cloudflare: true, ..OutcomeTable::default() };
    let finish = |status: u16, outcome: OutcomeTable, confirmed: bool| {
        let mut answer = (*response(status)).clone();
        if confirmed {
            answer.headers.push(("Idempotency-Released".to_owned(), "true".to_owned()));
        }
        let event = Event::OriginFinished {
            attempt: A,
            result: OriginResult::Responded(status),
            response: Some(Arc::new(answer)),
            timing: timing(),
            outcome,
        };
        step(Some(&record), event, T0 + 10)
    };
    // 520 and 524 through Cloudflare may have executed: held, and their callers get them.
    for status in [520, 524] {
        let step = finish(status, route_mode, false);
        let KeyRecordChange::Put(KeyRecord::Unknown(held)) = &step.change else {
            panic!("{status}: {step:?}")
        };
        let expected =
            if status == 524 { UnknownReason::OriginTimeout } else { UnknownReason::ResetAfterSend };
        assert_eq!(held.reason, expected);
        assert!(matches!(step.actions[..], [Action::Settle { origin_answered: true, .. }]));
    }
    // 521..526 say that nothing was delivered: released.
    for status in [521, 522, 523, 525, 526] {
        assert_eq!(finish(status, route_mode, false).change, KeyRecordChange::Delete, "{status}");
    }
    // Outside route mode the same statuses are the origin's own final word.
    assert!(matches!(
        finish(521, OutcomeTable::default(), false).change,
        KeyRecordChange::Put(KeyRecord::Completed(_))
    ));
    // A release status without the origin's confirmation, where the route asks for it.
    let strict = OutcomeTable { release_requires_header: true, ..OutcomeTable::default() };
    assert!(matches!(finish(503, strict, false).change, KeyRecordChange::Put(KeyRecord::Unknown(_))));
    assert_eq!(finish(503, strict, true).change, KeyRecordChange::Delete);
}

#[test]
fn an_oversized_answer_goes_to_its_caller_and_the_key_is_held() {
    let record = in_flight(A, T0);
    let event = Event::OriginFinished {
        attempt: A,
        result: OriginResult::Oversized(200),
        response: None,
        timing: timing(),
        outcome: OutcomeTable::default(),
    };
    let step = step(Some(&record), event, T0 + 10);
    let KeyRecordChange::Put(KeyRecord::Unknown(held)) = &step.change else { panic!("{step:?}") };
    assert_eq!(held.reason, UnknownReason::ResponseTooLarge { status: 200 });
    let Action::Settle { answer, origin_answered, .. } = &step.actions[0] else { panic!("{step:?}") };
    assert!(origin_answered, "the caller gets the streamed answer");
    assert_eq!(answer.status, 502, "waiters get outcome-unknown, not a copy of the stream");
}

#[test]
fn past_the_waiter_cap_a_duplicate_is_told_to_retry() {
    let record = in_flight(A, T0);
    for waiters in [DEFAULT_WAITERS_PER_KEY, DEFAULT_WAITERS_PER_KEY + 1, usize::MAX] {
        let step = step(Some(&record), arrival_with_waiters(FP, B, Some(A), waiters), T0 + 1);
        let problem = rejection(&step);
        assert_eq!(problem.kind, ProblemKind::InProgress);
        assert_eq!(problem.status(), 409);
        assert_eq!(problem.retry_after, Some(1));
    }
}

#[test]
fn an_orphaned_claim_within_its_lease_is_in_progress_for_the_rest_of_the_lease() {
    let record = in_flight(A, T0);
    // (time since the claim, expected Retry-After seconds: remaining lease rounded up)
    let cases = [(0, 40), (1, 40), (12_345, 28), (LEASE - 1_001, 2), (LEASE - 1_000, 1), (LEASE - 1, 1)];
    for (elapsed, seconds) in cases {
        for live in [None, Some(B)] {
            let step = step(Some(&record), arrival(FP, B, live), T0 + elapsed);
            let problem = rejection(&step);
            assert_eq!(problem.kind, ProblemKind::InProgress, "after {elapsed} ms");
            assert_eq!(problem.retry_after, Some(seconds), "after {elapsed} ms");
        }
    }
}

#[test]
fn an_orphaned_claim_after_its_lease_is_outcome_unknown() {
    let record = in_flight(A, T0);
    for now in [T0 + LEASE, T0 + LEASE + 1, T0 + TTL - 1] {
        for live in [None, Some(B)] {
            let step = step(Some(&record), arrival(FP, B, live), now);
            assert_eq!(rejection(&step), &outcome_unknown(UnknownReason::OriginTimeout));
            assert_eq!(rejection(&step).status(), 502);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The outcome table, applied to the current claim
// ---------------------------------------------------------------------------------------

#[test]
fn final_answers_are_stored_for_replay() {
    let record = in_flight(A, T0);
    let now = T0 + 2_000;
    for status in [200, 201, 204, 302, 400, 402, 404, 422, 500, 502, 504] {
        let answer = response(status);
        let step = step(Some(&record), responded(A, &answer), now);
        let KeyRecordChange::Put(KeyRecord::Completed(done)) = &step.change else {
            panic!("{status}: {step:?}")
        };
        assert_eq!((done.attempt, done.fingerprint), (A, FP), "{status}");
        assert_eq!((done.completed_at, done.expires_at), (now, now + TTL), "{status}");
        assert!(Arc::ptr_eq(&done.response, &answer), "{status}: stores the origin's response");
        // No alarm of its own: the claim's covers an outcome recorded within the lease.
        assert_eq!(step.actions.len(), 1, "{status}: {step:?}");
        let (attempt, settled, origin_answered) = settle_of(&step.actions);
        assert_eq!(attempt, A);
        assert!(Arc::ptr_eq(settled, &answer), "{status}");
        assert!(origin_answered, "{status}");
    }
}

/// One `setAlarm` per key: the claim's alarm already covers an outcome recorded
/// within the lease, and only one recorded later (a claim of an earlier release, whose
/// alarm is at the claim's expiry, or a write that outlasted the lease) moves it.
#[test]
fn only_an_outcome_past_the_claims_alarm_sets_the_alarm_again() {
    let record = in_flight(A, T0);
    let KeyRecord::InFlight(claim) = &record else { unreachable!() };
    let alarm = claim_alarm(claim, &timing());
    assert_eq!(alarm, T0 + LEASE + TTL);
    let within = step(Some(&record), responded(A, &response(201)), T0 + LEASE);
    assert!(!within.actions.iter().any(|a| matches!(a, Action::SetAlarm(_))), "{within:?}");
    let late = T0 + LEASE + 1;
    let after = step(Some(&record), responded(A, &response(201)), late);
    assert_eq!(after.actions[0], Action::SetAlarm(late + TTL));
    // An alarm that fires before the record expires sets itself at the expiry.
    let KeyRecordChange::Put(done) = &after.change else { panic!("{after:?}") };
    let early = super::step(Some(done), Event::Alarm { live_attempt: None }, alarm);
    assert_eq!(early, Step { change: KeyRecordChange::Keep, actions: vec![Action::SetAlarm(late + TTL)] });
}

#[test]
fn answers_that_mean_not_executed_release_the_key() {
    let record = in_flight(A, T0);
    for status in [408, 409, 425, 429, 503] {
        let answer = response(status);
        let step = step(Some(&record), responded(A, &answer), T0 + 2_000);
        assert_eq!(step.change, KeyRecordChange::Delete, "{status}");
        assert_eq!(step.actions.len(), 1, "{status}: {step:?}");
        let (attempt, settled, origin_answered) = settle_of(&step.actions);
        assert_eq!(attempt, A);
        assert!(Arc::ptr_eq(settled, &answer), "{status}: passes the origin's answer on");
        assert!(origin_answered, "{status}");
        // Released: the next retry runs.
        let retry = super::step(None, arrival(FP, B, None), T0 + 3_000);
        assert_eq!(forwards(&retry.actions), vec![B]);
    }
}

#[test]
fn a_refused_connection_releases_the_key_with_origin_unreachable() {
    let record = in_flight(A, T0);
    let step = step(Some(&record), finished(A, OriginResult::ConnectRefused, None), T0 + 2_000);
    assert_eq!(step.change, KeyRecordChange::Delete);
    assert_eq!(step.actions.len(), 1, "{step:?}");
    let (attempt, answer, origin_answered) = settle_of(&step.actions);
    assert_eq!(attempt, A);
    assert!(!origin_answered);
    assert_eq!(answer.status, 502);
    assert_eq!(header(answer, "content-type"), Some(PROBLEM_CONTENT_TYPE));
    assert_eq!(header(answer, "retry-after"), Some("1"));
    let body = problem_json(answer);
    assert_eq!(body["type"], "urn:idempotency-edge:problem:origin-unreachable");
    assert_eq!(body["status"], 502);
}

#[test]
fn a_timeout_or_reset_holds_the_key_as_unknown() {
    let record = in_flight(A, T0);
    let now = T0 + 35_000;
    for (result, reason) in [
        (OriginResult::TimedOut, UnknownReason::OriginTimeout),
        (OriginResult::ResetAfterSend, UnknownReason::ResetAfterSend),
    ] {
        let step = step(Some(&record), finished(A, result, None), now);
        let expected = KeyRecord::Unknown(Unknown {
            reconcile: None,
            attempt: A,
            fingerprint: FP,
            origin_attempts: 1,
            since: now,
            expires_at: now + TTL,
            reason,
        });
        assert_eq!(step.change, KeyRecordChange::Put(expected.clone()), "{result:?}");
        let problem = outcome_unknown(reason);
        assert_eq!(
            step.actions,
            vec![Action::Settle {
                attempt: A,
                answer: Arc::new(problem_response(&problem)),
                origin_answered: false
            }],
            "{result:?}"
        );
        let (_, answer, _) = settle_of(&step.actions);
        assert_eq!(answer.status, 502);
        assert_eq!(problem_json(answer)["type"], "urn:idempotency-edge:problem:outcome-unknown");

        // A later retry is never forwarded: it is told the outcome is unknown.
        for later in [now + 1, now + TTL - 1] {
            for live in [None, Some(A)] {
                let retry = super::step(Some(&expected), arrival(FP, B, live), later);
                assert_eq!(rejection(&retry), &problem, "{result:?} at {later}");
            }
        }
    }
}

#[test]
fn an_unknown_outcome_keeps_the_claims_expiry_when_that_is_later() {
    // With a TTL shorter than the lease, the claim outlives now + ttl.
    let short = Timing { ttl_ms: 1_000, ..timing() };
    let record = KeyRecord::InFlight(InFlight { expires_at: T0 + short.lease_ms(), ..claim(A, T0) });
    let now = T0 + 5_000;
    let event = Event::OriginFinished {
        attempt: A,
        result: OriginResult::TimedOut,
        response: None,
        timing: short,
        outcome: OutcomeTable::default(),
    };
    let step = step(Some(&record), event, now);
    let KeyRecordChange::Put(KeyRecord::Unknown(held)) = &step.change else { panic!("{step:?}") };
    assert_eq!(held.expires_at, T0 + short.lease_ms());
    assert!(!step.actions.iter().any(|a| matches!(a, Action::SetAlarm(_))), "the claim's alarm covers it");
}

#[test]
fn a_response_too_large_to_store_is_held_as_unknown() {
    let record = in_flight(A, T0);
    let now = T0 + 2_000;

    let fits = response_of_size(200, MAX_STORED_RESPONSE_BYTES);
    let step_fits = step(Some(&record), responded(A, &fits), now);
    assert!(
        matches!(&step_fits.change, KeyRecordChange::Put(KeyRecord::Completed(_))),
        "exactly the limit is stored"
    );

    let big = response_of_size(200, MAX_STORED_RESPONSE_BYTES + 1);
    let step = step(Some(&record), responded(A, &big), now);
    let expected = KeyRecord::Unknown(Unknown {
        reconcile: None,
        attempt: A,
        fingerprint: FP,
        origin_attempts: 1,
        since: now,
        expires_at: now + TTL,
        reason: UnknownReason::ResponseTooLarge { status: 200 },
    });
    assert_eq!(step.change, KeyRecordChange::Put(expected.clone()));
    assert!(!step.actions.iter().any(|a| matches!(a, Action::SetAlarm(_))), "the claim's alarm covers it");
    let (attempt, answer, origin_answered) = settle_of(&step.actions);
    assert_eq!(attempt, A);
    assert!(Arc::ptr_eq(answer, &big), "the callers of the attempt still get the origin's answer");
    assert!(origin_answered);

    let retry = super::step(Some(&expected), arrival(FP, B, None), now + 1);
    assert_eq!(rejection(&retry), &outcome_unknown(UnknownReason::ResponseTooLarge { status: 200 }));
}

// ---------------------------------------------------------------------------------------
// Rule 4: fencing
// ---------------------------------------------------------------------------------------

#[test]
fn a_finisher_of_a_claim_that_is_not_current_only_settles() {
    let records = [
        None,
        Some(in_flight(B, T0)),
        Some(completed(A, T0, response(201))),
        Some(completed(B, T0, response(201))),
        Some(unknown(A, T0, UnknownReason::OriginTimeout)),
        Some(unknown(B, T0, UnknownReason::ResetAfterSend)),
    ];
    let results = [
        (OriginResult::Responded(201), Some(response(201))),
        (OriginResult::Responded(429), Some(response(429))),
        (OriginResult::Responded(200), Some(response_of_size(200, MAX_STORED_RESPONSE_BYTES + 1))),
        (OriginResult::ConnectRefused, None),
        (OriginResult::TimedOut, None),
        (OriginResult::ResetAfterSend, None),
    ];
    for record in &records {
        for (result, answer) in &results {
            let step = step(record.as_ref(), finished(A, *result, answer.clone()), T0 + 2_000);
            assert_eq!(step.change, KeyRecordChange::Keep, "{record:?} / {result:?}");
            assert_eq!(step.actions.len(), 1, "{record:?} / {result:?}: {step:?}");
            assert_eq!(settle_of(&step.actions).0, A);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Rule 6: failed writes
// ---------------------------------------------------------------------------------------

#[test]
fn a_failed_claim_write_forwards_nothing() {
    for record in [None, Some(completed(A, T0, response(200)))] {
        let step = step(record.as_ref(), Event::ClaimWriteFailed { attempt: B }, T0 + TTL + 1);
        let problem = rejection(&step);
        assert_eq!(problem.kind, ProblemKind::StorageUnavailable);
        assert_eq!(problem.status(), 503);
        assert_eq!(problem.retry_after, Some(1));
    }
}

#[test]
fn a_failed_outcome_write_settles_and_the_key_stays_held() {
    let record = in_flight(A, T0);
    let answer = response(201);

    // The outcome cannot be written; the runtime steps again.
    let first = step(Some(&record), responded(A, &answer), T0 + 2_000);
    assert_ne!(first.change, KeyRecordChange::Keep);
    let failed = step(
        Some(&record),
        Event::OutcomeWriteFailed { attempt: A, answer: answer.clone(), origin_answered: true },
        T0 + 2_000,
    );
    assert_eq!(failed.change, KeyRecordChange::Keep);
    assert_eq!(failed.actions.len(), 1, "{failed:?}");
    let (attempt, settled, _) = settle_of(&failed.actions);
    assert_eq!(attempt, A);
    assert!(Arc::ptr_eq(settled, &answer), "the callers still get what the origin said");

    // The claim is still stored and its owner has settled (no live attempt): 409 while
    // the lease lasts, outcome-unknown afterwards, never forwarded until it expires.
    let during = step(Some(&record), arrival(FP, B, None), T0 + 3_000);
    assert_eq!(rejection(&during).kind, ProblemKind::InProgress);
    assert_eq!(rejection(&during).retry_after, Some(37));
    for now in [T0 + LEASE, T0 + TTL - 1] {
        let after = step(Some(&record), arrival(FP, B, None), now);
        assert_eq!(rejection(&after), &outcome_unknown(UnknownReason::OriginTimeout));
    }
    let expired = step(Some(&record), arrival(FP, B, None), T0 + TTL);
    assert_eq!(forwards(&expired.actions), vec![B]);
}

#[test]
fn a_failed_release_write_also_holds_the_key() {
    let record = in_flight(A, T0);
    let first = step(Some(&record), finished(A, OriginResult::ConnectRefused, None), T0 + 2_000);
    assert_eq!(first.change, KeyRecordChange::Delete);
    let (_, answer, _) = settle_of(&first.actions);
    let failed = step(
        Some(&record),
        Event::OutcomeWriteFailed { attempt: A, answer: answer.clone(), origin_answered: true },
        T0 + 2_000,
    );
    assert_eq!(failed.change, KeyRecordChange::Keep);
    assert_eq!(settle_of(&failed.actions).1, answer);
    let retry = step(Some(&record), arrival(FP, B, None), T0 + 3_000);
    assert_eq!(rejection(&retry).kind, ProblemKind::InProgress);
}

// ---------------------------------------------------------------------------------------
// Expired waits and alarms
// ---------------------------------------------------------------------------------------

#[test]
fn an_expired_wait_is_in_progress_with_a_retry_after_of_at_least_a_second() {
    // (stored record, elapsed since T0, expected Retry-After)
    let cases = [
        (Some(in_flight(A, T0)), 0, 5),             // lease left 40 s, capped at 5 s
        (Some(in_flight(A, T0)), LEASE - 2_500, 3), // 2.5 s left, rounded up
        (Some(in_flight(A, T0)), LEASE, 1),         // lease over
        (Some(in_flight(A, T0)), TTL + 1, 1),       // expired
        (Some(in_flight(B, T0)), 0, 1),             // another claim
        (Some(completed(A, T0, response(200))), 0, 1),
        (Some(unknown(A, T0, UnknownReason::OriginTimeout)), 0, 1),
        (None, 0, 1),
    ];
    for (record, elapsed, seconds) in cases {
        let step = step(record.as_ref(), Event::WaitExpired { attempt: A }, T0 + elapsed);
        let problem = rejection(&step);
        assert_eq!(problem.kind, ProblemKind::InProgress, "{record:?}");
        assert_eq!(problem.retry_after, Some(seconds), "{record:?} after {elapsed} ms");
    }
}

#[test]
fn an_alarm_before_expiry_reschedules() {
    let records =
        [in_flight(A, T0), completed(A, T0, response(200)), unknown(A, T0, UnknownReason::ResetAfterSend)];
    for record in &records {
        for now in [T0, record.expires_at() - 1] {
            let step = step(Some(record), Event::Alarm { live_attempt: None }, now);
            assert_eq!(
                step,
                Step { change: KeyRecordChange::Keep, actions: vec![Action::SetAlarm(record.expires_at())] }
            );
        }
    }
}

#[test]
fn an_alarm_at_or_after_expiry_forgets_the_key() {
    let records =
        [in_flight(A, T0), completed(A, T0, response(200)), unknown(A, T0, UnknownReason::ResetAfterSend)];
    for record in &records {
        for now in [record.expires_at(), record.expires_at() + TTL] {
            let step = step(Some(record), Event::Alarm { live_attempt: None }, now);
            assert_eq!(step, Step { change: KeyRecordChange::Delete, actions: vec![] }, "{record:?}");
        }
    }
    assert_eq!(
        step(None, Event::Alarm { live_attempt: None }, T0),
        Step { change: KeyRecordChange::Delete, actions: vec![] }
    );
}

// ---------------------------------------------------------------------------------------
// Property tests: random event sequences through a simulated object
// ---------------------------------------------------------------------------------------

/// What a lookup (rule 9) answers, where the route has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Said {
    Executed,
    NotExecuted,
    Nothing,
}

impl Said {
    fn verdict(self) -> Verdict {
        match self {
            Said::Executed => Verdict::Executed(StoredResponse {
                status: 200,
                headers: vec![(reconcile::RECONCILED_HEADER.to_owned(), "true".to_owned())],
                body: b"{}".to_vec(),
            }),
            Said::NotExecuted => Verdict::NotExecuted,
            Said::Nothing => Verdict::Unsure,
        }
    }
}

fn said() -> impl Strategy<Value = Said> {
    prop_oneof![Just(Said::Executed), Just(Said::NotExecuted), Just(Said::Nothing)]
}

/// One thing that happens to the simulated object.
#[derive(Clone, Debug)]
enum Op {
    /// A request arrives with fingerprint 0 or 1 while `waiters` wait; its claim write may
    /// fail. Where the route has a lookup and the key's outcome is unknown, it asks first,
    /// and the lookup says `said`.
    Arrive { fingerprint: u8, waiters: usize, write_fails: bool, said: Said },
    /// The live attempt (if any) finishes; its outcome write may fail.
    Finish { result: OriginResult, oversized: bool, write_fails: bool },
    /// An attempt forwarded earlier, and no longer live, reports in late.
    LateFinish { pick: Index, result: OriginResult },
    /// The instance resets: memory (the live attempt) is lost, storage is kept.
    Crash,
    /// A duplicate's wait on some attempt runs out.
    WaitExpired { pick: Index },
    /// The alarm fires; deleting the record may fail (the runtime just tries again later).
    /// A lookup it makes says `said`.
    Alarm { write_fails: bool, said: Said },
    /// A lookup of some attempt answers late (its record may have moved on).
    LateVerdict { pick: Index, said: Said },
    /// The clock moves on.
    Advance(u64),
}

fn origin_result() -> impl Strategy<Value = OriginResult> {
    prop_oneof![
        4 => prop::sample::select(vec![200u16, 201, 400, 404, 409, 429, 500, 502, 503]).prop_map(OriginResult::Responded),
        1 => Just(OriginResult::ConnectRefused),
        1 => Just(OriginResult::TimedOut),
        1 => Just(OriginResult::ResetAfterSend),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let waiters = prop_oneof![0usize..3, Just(DEFAULT_WAITERS_PER_KEY - 1), Just(DEFAULT_WAITERS_PER_KEY)];
    let advance = prop_oneof![0u64..2_000, 0u64..120_000, Just(TTL), Just(TTL + LEASE + 1)];
    prop_oneof![
        5 => (0u8..2, waiters, prop::bool::weighted(0.15), said())
            .prop_map(|(fingerprint, waiters, write_fails, said)| Op::Arrive { fingerprint, waiters, write_fails, said }),
        3 => (origin_result(), prop::bool::weighted(0.05), prop::bool::weighted(0.2))
            .prop_map(|(result, oversized, write_fails)| Op::Finish { result, oversized, write_fails }),
        1 => (any::<Index>(), origin_result()).prop_map(|(pick, result)| Op::LateFinish { pick, result }),
        1 => Just(Op::Crash),
        1 => any::<Index>().prop_map(|pick| Op::WaitExpired { pick }),
        1 => (prop::bool::weighted(0.2), said()).prop_map(|(write_fails, said)| Op::Alarm { write_fails, said }),
        1 => (any::<Index>(), said()).prop_map(|(pick, said)| Op::LateVerdict { pick, said }),
        3 => advance.prop_map(Op::Advance),
    ]
}

fn timing_strategy() -> impl Strategy<Value = Timing> {
    (prop::sample::select(vec![2_000u64, 60_000, TTL]), prop::sample::select(vec![1_000u64, ORIGIN_TIMEOUT]))
        .prop_map(|(ttl_ms, origin_timeout_ms)| Timing { ttl_ms, duplicate_wait_ms: WAIT, origin_timeout_ms })
}

/// A key's Durable Object as the runtime drives it: storage, the driver (memory) and a
/// clock, plus what the rules say about when the key may run again.
struct Sim {
    timing: Timing,
    policy: KeyTerms,
    /// The route has a lookup (rule 9): claims store it, unknown outcomes are looked up.
    reconciles: bool,
    now: Millis,
    /// What storage holds.
    stored: Option<KeyRecord>,
    /// This instance's driver (memory: lost in a crash).
    key: KeyState,
    next_attempt: u64,
    /// Every attempt ever forwarded, in order.
    forwarded: Vec<AttemptId>,
    /// What the origin answered to each attempt.
    answers: HashMap<AttemptId, Arc<StoredResponse>>,
    /// Until when the key must not be executed again, derived from the rules rather than
    /// read from the stored record: a claim holds it until its expiry, a final answer for
    /// the TTL, an unknown outcome for at least as long as its claim; only a release (a
    /// deleted record) frees it early.
    held_until: Option<Millis>,
}

impl Sim {
    fn new(timing: Timing, reconciles: bool) -> Sim {
        Sim {
            timing,
            reconciles,
            policy: KeyTerms {
                timing,
                limits: WaiterLimits::default(),
                outcome: OutcomeTable::default(),
                max_stored_response_bytes: MAX_STORED_RESPONSE_BYTES as u64,
                max_origin_attempts: None,
                mode: Mode::Enforce,
                origin_service: None,
                key_header: None,
            },
            now: T0,
            stored: None,
            key: KeyState::new(),
            next_attempt: 1,
            forwarded: Vec::new(),
            answers: HashMap::new(),
            held_until: None,
        }
    }

    fn fingerprint(n: u8) -> Digest256 {
        Digest256([n + 1; 32])
    }

    /// The route's lookup as a claim made now seals it, where the route has one.
    fn lookup(&self) -> Option<Reconciling> {
        self.reconciles.then(|| Reconciling {
            sealed_lookup: vec![7; 40],
            bound_at: self.now,
            not_found: 404,
            asked: 0,
            next_at: 0,
            policy: Box::new(self.policy.clone()),
            spelling_known: true,
        })
    }

    /// A lookup of `attempt`'s outcome answers `said`, as the runtime carries it out. A
    /// verdict never forwards and changes only the unknown outcome (or the claim whose
    /// owner died, past its lease) it was asked about; "not executed" releases the key only
    /// once the origin has had its timeout again since the outcome became unknown (a dead
    /// claim's: its lease's end), and "executed" stores the lookup's answer.
    fn look_up(&mut self, attempt: AttemptId, said: Said) -> Result<(), TestCaseError> {
        let before = self.stored.clone();
        let pending = self.key.handle_reconciled(attempt, said.verdict(), &self.policy, 0.5, self.now);
        let step = pending.step().clone();
        prop_assert!(forwards(&step.actions).is_empty(), "a verdict forwarded: {step:?}");
        let live = self.live();
        let became_unknown = match &before {
            Some(record) if record.attempt() != attempt || record.is_expired(self.now) => None,
            Some(KeyRecord::Unknown(unknown)) => Some(unknown.since),
            Some(KeyRecord::InFlight(claim))
                if claim.async_job.is_none() && live != Some(attempt) && self.now >= claim.lease_until =>
            {
                Some(claim.lease_until)
            }
            _ => None,
        };
        let Some(became_unknown) = became_unknown else {
            prop_assert_eq!(&step.change, &KeyRecordChange::Keep, "a verdict changed {:?}", before);
            self.write(pending, true)?;
            return Ok(());
        };
        let record = before.as_ref().expect("asked about a record");
        match &step.change {
            KeyRecordChange::Delete => {
                prop_assert_eq!(said, Said::NotExecuted);
                prop_assert!(
                    self.now >= became_unknown + self.timing.origin_timeout_ms,
                    "released at {} although the outcome became unknown at {became_unknown}",
                    self.now
                );
                self.held_until = None;
            }
            KeyRecordChange::Put(KeyRecord::Completed(done)) => {
                prop_assert_eq!(said, Said::Executed);
                prop_assert_eq!((done.attempt, done.fingerprint), (attempt, record.fingerprint()));
                prop_assert!(done.expires_at >= record.expires_at());
                self.held_until = Some(done.expires_at);
            }
            KeyRecordChange::Put(KeyRecord::Unknown(unknown)) => {
                prop_assert!(said != Said::Executed, "a found answer was not stored");
                prop_assert_eq!((unknown.attempt, unknown.fingerprint), (attempt, record.fingerprint()));
                prop_assert_eq!(unknown.since, became_unknown);
                prop_assert_eq!(unknown.expires_at, record.expires_at());
                if let Some(reconciling) = &unknown.reconcile {
                    prop_assert!(reconciling.next_at > self.now, "asked again later: {unknown:?}");
                }
            }
            KeyRecordChange::Keep => prop_assert!(said != Said::Executed, "a found answer was not stored"),
            other => return Err(TestCaseError::fail(format!("a verdict made {other:?} of {record:?}"))),
        }
        self.write(pending, true)?;
        Ok(())
    }

    /// The attempt this instance is executing, as its driver knows it.
    fn live(&self) -> Option<AttemptId> {
        self.key.live().map(|live| live.attempt)
    }

    /// What the runtime does before any event: read storage the first time, and delete a
    /// record read past its expiry (expire-on-read, the driver's decision).
    fn read(&mut self) {
        if !self.key.is_loaded() {
            self.key.remember(self.stored.clone());
        }
        if self.key.expired_on_read(self.now) {
            self.stored = None;
            self.key.handle_deleting();
        }
    }

    /// Writes a pending step's record change (unless the write fails) and reports it to
    /// the driver, as the runtime does; returns the step the driver says to carry out.
    fn write(&mut self, pending: Pending, write_succeeds: bool) -> Result<Decided, TestCaseError> {
        let change = pending.step().change.clone();
        if !write_succeeds && change != KeyRecordChange::Keep {
            // A failed deletion leaves the driver to read storage again.
            if change == KeyRecordChange::Delete {
                self.key.handle_deleting();
                self.key.forget();
                self.key.remember(self.stored.clone());
            }
            return Ok(self.key.handle_write_failed(pending, self.now));
        }
        match &change {
            KeyRecordChange::Keep => {}
            KeyRecordChange::Put(record) => {
                self.stored = Some(record.clone());
                self.key.remember(Some(record.clone()));
            }
            KeyRecordChange::Delete => {
                self.stored = None;
                self.key.handle_deleting();
            }
        }
        let decided = self.key.handle_written(pending);
        self.check_actions(&decided.step)?;
        Ok(decided)
    }

    /// Checks a step's actions as they are carried out: a forward only of a claim that is
    /// stored, never twice, and live in the driver afterwards; a settled attempt not live.
    fn check_actions(&mut self, step: &Step) -> Result<(), TestCaseError> {
        for action in &step.actions {
            match action {
                Action::Forward { attempt } => {
                    prop_assert!(!self.forwarded.contains(attempt), "{attempt:?} forwarded twice");
                    prop_assert!(
                        matches!(&self.stored, Some(KeyRecord::InFlight(c)) if c.attempt == *attempt),
                        "{attempt:?} forwarded without its claim stored: {:?}",
                        self.stored
                    );
                    self.forwarded.push(*attempt);
                    prop_assert_eq!(self.live(), Some(*attempt), "a forward is the live execution");
                }
                Action::Settle { attempt, .. } => {
                    prop_assert!(self.live() != Some(*attempt), "a settled attempt stays live");
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        self.read();
        let before = self.stored.clone();
        match op {
            Op::Arrive { fingerprint, waiters, write_fails, said } => {
                let fingerprint = Sim::fingerprint(*fingerprint);
                // On a route with a lookup, an unknown outcome is looked up first: the
                // arrival's first step is `Lookup`, then `Arrive`, nothing written.
                if self.reconciles {
                    if let Some(pending) = self.key.handle_retry(fingerprint, self.now) {
                        prop_assert_eq!(&pending.step().change, &KeyRecordChange::Keep);
                        let mut decided = self.key.handle_written(pending);
                        let Some(Action::Lookup { attempt }) = decided.poll_action() else {
                            return Err(TestCaseError::fail("a retry's lookup is not its first action"));
                        };
                        prop_assert_eq!(decided.poll_action(), Some(Action::Arrive));
                        prop_assert_eq!(decided.poll_action(), None);
                        self.look_up(attempt, *said)?;
                    }
                }
                self.arrive(fingerprint, *waiters, *write_fails)?
            }
            Op::Finish { result, oversized, write_fails } => {
                if let Some(attempt) = self.live() {
                    self.attempt_finishes(attempt, *result, *oversized, *write_fails)?
                }
            }
            Op::LateFinish { pick, result } => {
                let live = self.live();
                let old: Vec<AttemptId> =
                    self.forwarded.iter().copied().filter(|a| live != Some(*a)).collect();
                if !old.is_empty() {
                    self.attempt_finishes(old[pick.index(old.len())], *result, false, false)?
                }
            }
            Op::Crash => self.key = KeyState::new(),
            Op::WaitExpired { pick } => {
                let mut attempts = self.forwarded.clone();
                attempts.push(AttemptId(0));
                let attempt = attempts[pick.index(attempts.len())];
                let problem = self.key.handle_wait_over(attempt, 0, false, self.now);
                let Err(problem) = problem else {
                    return Err(TestCaseError::fail("an expired wait answered"));
                };
                prop_assert_eq!(problem.kind, ProblemKind::InProgress);
                prop_assert!(problem.retry_after.is_some_and(|s| s >= 1), "{:?}", problem.retry_after);
            }
            Op::Alarm { write_fails, said } => {
                let pending = self.key.handle_alarm(self.now);
                let step = pending.step().clone();
                let expires_at = before.as_ref().map_or(0, KeyRecord::expires_at);
                let unexpired = before.as_ref().filter(|record| !record.is_expired(self.now));
                let live = self.live();
                match &before {
                    // Rule 9: a claim whose owner died, past its lease, is made unknown
                    // (since its lease's end) and looked up at once...
                    Some(KeyRecord::InFlight(claim @ InFlight { reconcile: Some(reconciling), .. }))
                        if live != Some(claim.attempt)
                            && self.now >= claim.lease_until
                            && unexpired.is_some() =>
                    {
                        let unknown = Unknown {
                            reconcile: Some(Reconciling { next_at: self.now, ..reconciling.clone() }),
                            attempt: claim.attempt,
                            fingerprint: claim.fingerprint,
                            origin_attempts: claim.origin_attempts,
                            since: claim.lease_until,
                            expires_at: claim.expires_at,
                            reason: UnknownReason::OriginTimeout,
                        };
                        prop_assert_eq!(
                            &step,
                            &Step {
                                change: KeyRecordChange::Put(KeyRecord::Unknown(unknown)),
                                actions: vec![Action::Lookup { attempt: claim.attempt }]
                            }
                        )
                    }
                    // ...and an unknown outcome is looked up when due.
                    Some(KeyRecord::Unknown(unknown @ Unknown { reconcile: Some(reconciling), .. }))
                        if unexpired.is_some() =>
                    {
                        let actions = if self.now >= reconciling.next_at {
                            vec![Action::Lookup { attempt: unknown.attempt }]
                        } else {
                            vec![Action::SetAlarm(reconciling.next_at.min(expires_at))]
                        };
                        prop_assert_eq!(&step, &Step { change: KeyRecordChange::Keep, actions })
                    }
                    // A running execution keeps its claim, even past the claim's expiry.
                    Some(KeyRecord::InFlight(claim)) if self.live() == Some(claim.attempt) => {
                        prop_assert_eq!(
                            &step,
                            &Step {
                                change: KeyRecordChange::Keep,
                                actions: vec![Action::SetAlarm(
                                    (self.now + LEASE_MARGIN_MS).max(claim.expires_at)
                                )]
                            }
                        )
                    }
                    Some(record) if !record.is_expired(self.now) => prop_assert_eq!(
                        &step,
                        &Step {
                            change: KeyRecordChange::Keep,
                            actions: vec![Action::SetAlarm(record.expires_at())]
                        }
                    ),
                    _ => prop_assert_eq!(&step, &Step { change: KeyRecordChange::Delete, actions: vec![] }),
                }
                let decided = self.write(pending, !write_fails)?;
                let asked = decided.step.actions.iter().find_map(|action| match action {
                    Action::Lookup { attempt } => Some(*attempt),
                    _ => None,
                });
                if let Some(attempt) = asked {
                    self.look_up(attempt, *said)?;
                }
            }
            Op::LateVerdict { pick, said } => {
                let live = self.live();
                let asked: Vec<AttemptId> =
                    self.forwarded.iter().copied().filter(|a| live != Some(*a)).collect();
                if !asked.is_empty() {
                    self.look_up(asked[pick.index(asked.len())], *said)?
                }
            }
            Op::Advance(ms) => self.now += ms,
        }

        // A completed record never changes before it expires.
        if let Some(KeyRecord::Completed(done)) = &before {
            if !before.as_ref().is_some_and(|r| r.is_expired(self.now)) {
                let Some(KeyRecord::Completed(now_stored)) = &self.stored else {
                    return Err(TestCaseError::fail(format!("completed record replaced: {:?}", self.stored)));
                };
                prop_assert_eq!(now_stored, done);
                prop_assert!(Arc::ptr_eq(&now_stored.response, &done.response));
            }
        }
        // Whatever is stored was written by a claim that was forwarded.
        if let Some(record) = &self.stored {
            prop_assert!(self.forwarded.contains(&record.attempt()), "{record:?} was never forwarded");
        }
        Ok(())
    }

    /// A request arrives.
    fn arrive(
        &mut self,
        fingerprint: Digest256,
        waiters: usize,
        write_fails: bool,
    ) -> Result<(), TestCaseError> {
        let before = self.stored.clone();
        // `waiters` duplicates of the live execution arrive first and join it (the driver
        // counts them), and leave once this request is answered.
        let joined = self.join_live(waiters)?;
        let new_attempt = AttemptId(self.next_attempt);
        self.next_attempt += 1;
        // The runtime seals the lookup only for a key with no record (a claim may follow).
        let lookup = if self.stored.is_none() { self.lookup() } else { None };
        let arrival = Arrival {
            lookup: lookup.clone(),
            fingerprint,
            new_attempt,
            policy: &self.policy,
            body_bytes: 0,
            accept: None,
            observing: false,
        };
        let running = self.live();
        let pending = self.key.handle_arrival(arrival, self.now);
        let step = pending.step().clone();
        if let Some(live) = self.key.live() {
            prop_assert_eq!(live.waiters, joined, "the driver counts the waiters");
        }
        // Never a second execution while one runs here, whatever expired meanwhile.
        prop_assert!(
            running.is_none() || forwards(&step.actions).is_empty(),
            "forwarded while {running:?} still runs: {step:?}"
        );

        // At most one Forward, for this request's own new claim, written first.
        let sent = forwards(&step.actions);
        prop_assert!(sent.len() <= 1, "several forwards: {step:?}");
        if let Some(&attempt) = sent.first() {
            prop_assert_eq!(attempt, new_attempt);
            prop_assert!(
                matches!(&step.change, KeyRecordChange::Put(KeyRecord::InFlight(c)) if c.attempt == attempt && c.fingerprint == fingerprint),
                "forward without a claim: {step:?}"
            );
            // Never while a record that has not expired exists...
            prop_assert!(
                before.as_ref().is_none_or(|r| r.is_expired(self.now)),
                "forwarded while {before:?} is held at {}",
                self.now
            );
            // ...and, by the rules, only once the previous execution was released or expired.
            prop_assert!(
                self.held_until.is_none_or(|until| self.now >= until),
                "executed again at {} although the key is held until {:?}",
                self.now,
                self.held_until
            );
        }

        // A held record: unexpired, or still being run by its live owner.
        let held = before.as_ref().filter(|r| {
            !r.is_expired(self.now) || matches!(r, KeyRecord::InFlight(c) if self.live() == Some(c.attempt))
        });
        if let Some(record) = held {
            prop_assert!(sent.is_empty(), "forwarded while {record:?} is held");
            let problem = match step.actions.as_slice() {
                [Action::Reject(problem)] => Some(problem),
                _ => None,
            };
            if record.fingerprint() != fingerprint {
                // A mismatched fingerprint never forwards and never changes the record.
                prop_assert_eq!(&step.change, &KeyRecordChange::Keep);
                prop_assert_eq!(problem.map(|p| p.kind), Some(ProblemKind::KeyReused));
            } else {
                let orphaned = matches!(record, KeyRecord::InFlight(c) if self.live() != Some(c.attempt));
                if orphaned || matches!(record, KeyRecord::Unknown(_)) {
                    // After an unknown outcome or an orphaned claim: no Forward until expiry.
                    let kind = problem.map(|p| p.kind);
                    prop_assert!(
                        matches!(kind, Some(ProblemKind::InProgress | ProblemKind::OutcomeUnknown)),
                        "{record:?} answered {step:?}"
                    );
                    prop_assert_eq!(&step.change, &KeyRecordChange::Keep);
                }
                // A claim orphaned by a crash: in progress (with a Retry-After covering the
                // rest of the lease) until its lease expires, outcome-unknown afterwards.
                if let (KeyRecord::InFlight(c), true) = (record, orphaned) {
                    if self.now < c.lease_until {
                        prop_assert_eq!(problem.map(|p| p.kind), Some(ProblemKind::InProgress));
                        let retry_after_ms = problem.and_then(|p| p.retry_after).unwrap_or(0) * 1_000;
                        prop_assert!(retry_after_ms >= c.lease_until - self.now, "{step:?}");
                    } else {
                        prop_assert_eq!(problem.map(|p| p.kind), Some(ProblemKind::OutcomeUnknown));
                    }
                }
            }
        }

        if write_fails && step.change != KeyRecordChange::Keep {
            let failed = self.write(pending, false)?.step;
            prop_assert!(forwards(&failed.actions).is_empty(), "a failed claim write forwarded: {failed:?}");
            prop_assert_eq!(rejection_of(&failed)?.kind, ProblemKind::StorageUnavailable);
            prop_assert!(self.live() != Some(new_attempt));
            return self.leave(joined);
        }
        if !sent.is_empty() {
            let expires_at = self.now + self.timing.ttl_ms.max(self.timing.lease_ms());
            prop_assert_eq!(
                step.change.clone(),
                KeyRecordChange::Put(KeyRecord::InFlight(InFlight {
                    reconcile: lookup,
                    attempt: new_attempt,
                    fingerprint,
                    origin_attempts: 1,
                    claimed_at: self.now,
                    lease_until: self.now + self.timing.lease_ms(),
                    expires_at,
                    async_job: None,
                }))
            );
            self.held_until = Some(expires_at);
        }
        let decided = self.write(pending, true)?;
        let this_one_waits = matches!(decided.step.actions[..], [Action::Join { .. }]);
        prop_assert_eq!(decided.step, step);
        self.leave(joined + usize::from(this_one_waits))
    }

    /// Up to `waiters` duplicates of the live execution's claim arrive and join it; how
    /// many did (past the cap, the driver turns them away with 409).
    fn join_live(&mut self, waiters: usize) -> Result<usize, TestCaseError> {
        let Some(KeyRecord::InFlight(claim)) = self.stored.clone() else { return Ok(0) };
        if self.live() != Some(claim.attempt) {
            return Ok(0);
        }
        let mut joined = 0;
        for _ in 0..waiters {
            let new_attempt = AttemptId(self.next_attempt);
            self.next_attempt += 1;
            let arrival = Arrival {
                lookup: None,
                fingerprint: claim.fingerprint,
                new_attempt,
                policy: &self.policy,
                body_bytes: 0,
                accept: None,
                observing: false,
            };
            let pending = self.key.handle_arrival(arrival, self.now);
            let decided = self.write(pending, true)?;
            match &decided.step.actions[..] {
                [Action::Join { attempt, .. }] if *attempt == claim.attempt => joined += 1,
                [Action::Reject(problem)] => prop_assert_eq!(problem.kind, ProblemKind::InProgress),
                other => {
                    return Err(TestCaseError::fail(format!("a duplicate of a live claim got {other:?}")))
                }
            }
        }
        Ok(joined)
    }

    /// The duplicates that joined leave (their waits run out): the count goes back.
    fn leave(&mut self, joined: usize) -> Result<(), TestCaseError> {
        let Some(live) = self.key.live().copied() else { return Ok(()) };
        for _ in 0..joined.min(live.waiters) {
            prop_assert!(self.key.handle_wait_over(live.attempt, 0, false, self.now).is_err());
        }
        Ok(())
    }

    /// `attempt` finishes (the live one, or a late one); the outcome write may fail.
    fn attempt_finishes(
        &mut self,
        attempt: AttemptId,
        result: OriginResult,
        oversized: bool,
        write_fails: bool,
    ) -> Result<(), TestCaseError> {
        let response = match result {
            OriginResult::Responded(status) if oversized => {
                Some(response_of_size(status, MAX_STORED_RESPONSE_BYTES + 1))
            }
            OriginResult::Responded(status) => Some(response(status)),
            _ => None,
        };
        if let Some(response) = &response {
            self.answers.insert(attempt, response.clone());
        }
        let claim = match &self.stored {
            Some(KeyRecord::InFlight(claim)) if claim.attempt == attempt => Some(claim.clone()),
            _ => None,
        };
        let pending = self.key.handle_origin_finished(attempt, result, response, &self.policy, self.now);
        let step = pending.step().clone();
        prop_assert!(forwards(&step.actions).is_empty());
        let (settled, answer, origin_answered) = settle_of_checked(&step.actions)?;
        prop_assert_eq!(settled, attempt);

        let Some(claim) = claim else {
            // Fencing: a finisher of a claim that is not the stored one never changes the record.
            prop_assert_eq!(
                &step.change,
                &KeyRecordChange::Keep,
                "a finisher of a stale claim changed the record"
            );
            prop_assert_eq!(step.actions.len(), 1);
            self.write(pending, true)?;
            return Ok(());
        };

        // The outcome table, and how long the key is held afterwards.
        let ttl_end = self.now + self.timing.ttl_ms;
        let held_until = match (disposition(result, &OutcomeTable::default(), false), &step.change) {
            (Disposition::Release, KeyRecordChange::Delete) => None,
            (Disposition::Final, KeyRecordChange::Put(KeyRecord::Completed(done))) if !oversized => {
                prop_assert_eq!(done.attempt, attempt);
                prop_assert!(
                    Arc::ptr_eq(&done.response, &self.answers[&attempt]),
                    "stores the origin's answer"
                );
                prop_assert_eq!(done.expires_at, ttl_end);
                Some(ttl_end)
            }
            (
                Disposition::Final | Disposition::Unknown,
                KeyRecordChange::Put(KeyRecord::Unknown(unknown)),
            ) if oversized
                || disposition(result, &OutcomeTable::default(), false) == Disposition::Unknown =>
            {
                prop_assert_eq!(unknown.attempt, attempt);
                prop_assert_eq!(unknown.expires_at, ttl_end.max(claim.expires_at));
                Some(unknown.expires_at)
            }
            (_, change) => {
                return Err(TestCaseError::fail(format!(
                    "{result:?} (oversized: {oversized}) became {change:?}"
                )))
            }
        };

        if write_fails {
            // The claim stays stored and keeps holding the key.
            let answer = answer.clone();
            let failed = self.write(pending, false)?.step;
            prop_assert_eq!(&failed.change, &KeyRecordChange::Keep);
            prop_assert_eq!(failed.actions.len(), 1);
            let (settled, failed_answer, failed_origin_answered) = settle_of_checked(&failed.actions)?;
            prop_assert_eq!(failed_origin_answered, origin_answered);
            prop_assert_eq!(settled, attempt);
            prop_assert!(Arc::ptr_eq(failed_answer, &answer));
            prop_assert!(self.live() != Some(attempt), "the execution is over");
            return Ok(());
        }
        self.held_until = held_until;
        self.write(pending, true)?;
        prop_assert!(self.live() != Some(attempt), "the execution is over");
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    #[test]
    fn random_event_sequences_keep_the_invariants(
        timing in timing_strategy(),
        reconciles in any::<bool>(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut sim = Sim::new(timing, reconciles);
        for op in &ops {
            sim.run(op)?;
        }
    }
}

#[test]
fn an_alarm_never_deletes_a_claim_whose_execution_is_still_running() {
    let timing = Timing { ttl_ms: 1_000, duplicate_wait_ms: 1_000, origin_timeout_ms: 1_000 };
    let claim = KeyRecord::InFlight(InFlight {
        reconcile: None,
        attempt: AttemptId(1),
        fingerprint: Digest256([1; 32]),
        origin_attempts: 1,
        claimed_at: 0,
        lease_until: timing.lease_ms(),
        expires_at: timing.lease_ms(),
        async_job: None,
    });
    let late = timing.lease_ms() + 5_000;
    let live = step(Some(&claim), Event::Alarm { live_attempt: Some(AttemptId(1)) }, late);
    assert_eq!(
        live,
        Step { change: KeyRecordChange::Keep, actions: vec![Action::SetAlarm(late + LEASE_MARGIN_MS)] }
    );
    let orphaned = step(Some(&claim), Event::Alarm { live_attempt: None }, late);
    assert_eq!(orphaned.change, KeyRecordChange::Delete);
}

#[test]
fn a_response_status_without_its_answer_is_held_as_unknown() {
    let timing = Timing { ttl_ms: 60_000, duplicate_wait_ms: 1_000, origin_timeout_ms: 1_000 };
    let claim = KeyRecord::InFlight(InFlight {
        reconcile: None,
        attempt: AttemptId(1),
        fingerprint: Digest256([1; 32]),
        origin_attempts: 1,
        claimed_at: 0,
        lease_until: timing.lease_ms(),
        expires_at: 60_000,
        async_job: None,
    });
    for status in [201, 429] {
        let finished = Event::OriginFinished {
            attempt: AttemptId(1),
            result: OriginResult::Responded(status),
            response: None,
            timing,
            outcome: OutcomeTable::default(),
        };
        let next = step(Some(&claim), finished, 10);
        assert!(matches!(next.change, KeyRecordChange::Put(KeyRecord::Unknown(_))), "{status}: {next:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Rule 7: an origin that deduplicates by key lets an unknown outcome be sent again
// ---------------------------------------------------------------------------------------

fn arrival_to_deduplicating_origin(max: u16, live_attempt: Option<AttemptId>) -> Event {
    Event::Arrival {
        lookup: None,
        fingerprint: FP,
        new_attempt: B,
        live_attempt,
        waiters: 0,
        waiting_bytes: 0,
        max_origin_attempts: Some(max),
        body_bytes: 0,
        limits: WaiterLimits::default(),
        timing: timing(),
        accept: None,
    }
}

fn unknown_sent(times: u16, reason: UnknownReason) -> KeyRecord {
    KeyRecord::Unknown(Unknown {
        reconcile: None,
        attempt: A,
        fingerprint: FP,
        origin_attempts: times,
        since: T0,
        expires_at: T0 + TTL,
        reason,
    })
}

#[test]
fn an_unknown_outcome_is_sent_again_to_an_origin_that_deduplicates() {
    let record = unknown_sent(1, UnknownReason::OriginTimeout);
    let step = step(Some(&record), arrival_to_deduplicating_origin(5, None), T0 + 100);
    let KeyRecordChange::Put(KeyRecord::InFlight(claim)) = &step.change else { panic!("{step:?}") };
    assert_eq!(claim.attempt, B, "a new fenced attempt");
    assert_eq!(claim.origin_attempts, 2);
    assert_eq!(claim.fingerprint, FP);
    assert!(claim.expires_at >= T0 + TTL, "the key is kept at least as long as before");
    assert_eq!(
        step.actions,
        vec![Action::SetAlarm(claim_alarm(claim, &timing())), Action::Forward { attempt: B }]
    );
}

#[test]
fn without_the_option_an_unknown_outcome_is_never_sent_again() {
    let record = unknown_sent(1, UnknownReason::ResetAfterSend);
    let step = step(Some(&record), arrival(FP, B, None), T0 + 100);
    assert_eq!(rejection(&step).kind, ProblemKind::OutcomeUnknown);
}

#[test]
fn the_attempts_are_bounded() {
    let record = unknown_sent(5, UnknownReason::OriginTimeout);
    let step = step(Some(&record), arrival_to_deduplicating_origin(5, None), T0 + 100);
    let problem = rejection(&step);
    assert_eq!(problem.kind, ProblemKind::OutcomeUnknown);
    assert!(
        problem.detail.contains("5 times") && problem.detail.contains("MAX_ORIGIN_ATTEMPTS"),
        "{}",
        problem.detail
    );
    // A lower limit after a configuration change holds too.
    let step = super::step(Some(&record), arrival_to_deduplicating_origin(2, None), T0 + 100);
    assert_eq!(rejection(&step).kind, ProblemKind::OutcomeUnknown);
}

#[test]
fn an_answer_too_large_to_store_is_never_sent_again() {
    let record = unknown_sent(1, UnknownReason::ResponseTooLarge { status: 200 });
    let step = step(Some(&record), arrival_to_deduplicating_origin(5, None), T0 + 100);
    assert_eq!(rejection(&step).kind, ProblemKind::OutcomeUnknown);
}

#[test]
fn an_orphaned_claim_is_sent_again_only_after_its_lease() {
    let record = in_flight(A, T0);
    let within = step(Some(&record), arrival_to_deduplicating_origin(5, None), T0 + LEASE - 1);
    assert_eq!(rejection(&within).kind, ProblemKind::InProgress, "it may still be running");
    let live = step(Some(&record), arrival_to_deduplicating_origin(5, Some(A)), T0 + LEASE + 1);
    assert!(matches!(live.actions[..], [Action::Join { .. }]), "a live attempt is joined: {live:?}");
    let after = step(Some(&record), arrival_to_deduplicating_origin(5, None), T0 + LEASE);
    let KeyRecordChange::Put(KeyRecord::InFlight(claim)) = &after.change else { panic!("{after:?}") };
    assert_eq!((claim.attempt, claim.origin_attempts), (B, 2));
}

#[test]
fn a_resent_attempt_that_stays_unknown_keeps_its_count() {
    let claim = KeyRecord::InFlight(InFlight { origin_attempts: 3, ..claim(B, T0) });
    let step = step(Some(&claim), finished(B, OriginResult::TimedOut, None), T0 + 10);
    let KeyRecordChange::Put(KeyRecord::Unknown(held)) = &step.change else { panic!("{step:?}") };
    assert_eq!(held.origin_attempts, 3);
    // A different payload is still refused.
    let mut arrival = arrival_to_deduplicating_origin(5, None);
    if let Event::Arrival { fingerprint, .. } = &mut arrival {
        *fingerprint = OTHER_FP;
    }
    let other = super::step(Some(&unknown_sent(1, UnknownReason::OriginTimeout)), arrival, T0);
    assert_eq!(rejection(&other).kind, ProblemKind::KeyReused);
}

/// A re-send refused as a client error (an origin's 400 `idempotency_error`, or any 4xx
/// the first attempt never got) is held unknown and told as unknown; a first attempt's 4xx,
/// and a re-send's 2xx or 5xx, are the key's answer as ever.
#[test]
fn a_resent_attempt_refused_as_a_client_error_stays_unknown() {
    let resent = KeyRecord::InFlight(InFlight { origin_attempts: 2, ..claim(B, T0) });
    for status in [400, 404, 422] {
        let step = step(Some(&resent), responded(B, &response(status)), T0 + 10);
        let KeyRecordChange::Put(KeyRecord::Unknown(held)) = &step.change else {
            panic!("{status}: {step:?}")
        };
        assert_eq!((held.attempt, held.origin_attempts, held.reason), (B, 2, UnknownReason::ResetAfterSend));
        let (attempt, answer, origin_answered) = settle_of(&step.actions);
        assert_eq!((attempt, origin_answered), (B, false), "{status}: the origin's refusal is not passed on");
        assert_eq!(answer.status, 502, "{status}");
        assert_eq!(problem_json(answer)["type"].as_str().map(|t| t.ends_with("outcome-unknown")), Some(true));
        // The next retry sends it again (the origin deduplicates), never replays the 4xx.
        let next = super::step(
            Some(&KeyRecord::Unknown(held.clone())),
            arrival_to_deduplicating_origin(5, None),
            T0 + 20,
        );
        assert!(matches!(next.actions[..], [Action::SetAlarm(_), Action::Forward { .. }]), "{next:?}");
    }
    // A re-send's answer that is not a client error is stored.
    for status in [201, 500] {
        let step = step(Some(&resent), responded(B, &response(status)), T0 + 10);
        assert!(matches!(&step.change, KeyRecordChange::Put(KeyRecord::Completed(_))), "{status}: {step:?}");
    }
    // A 4xx that releases (409, the origin's "still running") releases as before.
    let step = super::step(Some(&resent), responded(B, &response(409)), T0 + 10);
    assert_eq!(step.change, KeyRecordChange::Delete);
    // A first attempt's 4xx is its answer.
    let first = super::step(Some(&in_flight(B, T0)), responded(B, &response(400)), T0 + 10);
    assert!(matches!(&first.change, KeyRecordChange::Put(KeyRecord::Completed(_))), "{first:?}");
}

/// The fencing that the runtime asks again just before it writes an outcome it had to
/// await: a purge and a new claim during the sealing await must win.
#[test]
fn an_outcome_is_written_only_over_its_own_claim() {
    let (old, new) = (AttemptId(1), AttemptId(2));
    assert!(claim_is_current(Some(&in_flight(old, 0)), old));
    // Purged meanwhile, or purged and claimed anew: the old outcome is not written.
    assert!(!claim_is_current(None, old));
    assert!(!claim_is_current(Some(&in_flight(new, 5)), old));
    // Never over a stored answer or an unknown outcome, even of the same attempt.
    assert!(!claim_is_current(Some(&completed(old, 0, response(201))), old));
    assert!(!claim_is_current(Some(&unknown(old, 0, UnknownReason::OriginTimeout)), old));
    // And the step that would write it agrees: the new claim's record stays.
    let late = step(Some(&in_flight(new, 5)), responded(old, &response(201)), 10);
    assert_eq!(late.change, KeyRecordChange::Keep);
}
