//! Rule 9 of the machine: unknown outcomes looked up at the origin (`core::key_rules::reconcile`).

use super::tests::{timing, A, B, FP, LEASE, ORIGIN_TIMEOUT, T0, TTL};
use super::*;
use crate::core::formats::reconciling::Reconciling;
use crate::core::key_rules::reconcile::{Verdict, FIRST_DELAY_MS, RECONCILED_HEADER};

fn lookup() -> Reconciling {
    Reconciling {
        sealed_lookup: vec![7; 40],
        bound_at: T0,
        not_found: 404,
        asked: 0,
        next_at: 0,
        policy: Box::new(crate::core::format_fixtures::policy()),
        spelling_known: true,
    }
}

/// The machine's tests' arrival of `new_attempt`, bringing `lookup`.
fn arrival(new_attempt: AttemptId, lookup: Option<Reconciling>, live_attempt: Option<AttemptId>) -> Event {
    let mut event = super::tests::arrival(FP, new_attempt, live_attempt);
    if let Event::Arrival { lookup: brought, .. } = &mut event {
        *brought = lookup.map(Box::new);
    }
    event
}

fn put(step: &Step) -> KeyRecord {
    match &step.change {
        KeyRecordChange::Put(record) => record.clone(),
        other => panic!("expected a put, got {other:?}"),
    }
}

fn claimed() -> KeyRecord {
    put(&step(None, arrival(A, Some(lookup()), None), T0))
}

/// `A`'s origin call finished with `result` (and no answer to store).
fn finished(result: OriginResult) -> Event {
    Event::OriginFinished {
        attempt: A,
        result,
        response: None,
        timing: timing(),
        outcome: OutcomeTable::default(),
    }
}

fn unknown_at(now: Millis) -> KeyRecord {
    put(&step(Some(&claimed()), finished(OriginResult::TimedOut), now))
}

fn reconciled(record: &KeyRecord, attempt: AttemptId, verdict: Verdict, now: Millis) -> Step {
    step(Some(record), Event::Reconciled { attempt, verdict, timing: timing(), jitter: 1.0 }, now)
}

fn answer() -> StoredResponse {
    let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    headers.push((RECONCILED_HEADER.to_owned(), "true".to_owned()));
    StoredResponse { status: 200, headers, body: br#"{"id":"ch_1"}"#.to_vec() }
}

#[test]
fn a_claim_stores_its_lookup_and_sets_its_alarm_for_the_end_of_its_lease() {
    let step = step(None, arrival(A, Some(lookup()), None), T0);
    let KeyRecord::InFlight(claim) = put(&step) else { panic!() };
    assert_eq!(claim.reconcile, Some(lookup()));
    assert_eq!(step.actions, vec![Action::SetAlarm(T0 + LEASE), Action::Forward { attempt: A }]);
}

#[test]
fn a_final_answer_moves_the_alarm_to_its_expiry() {
    let event = Event::OriginFinished {
        attempt: A,
        result: OriginResult::Responded(201),
        response: Some(Arc::new(answer())),
        timing: timing(),
        outcome: OutcomeTable::default(),
    };
    let done = step(Some(&claimed()), event, T0 + 10);
    assert!(matches!(put(&done), KeyRecord::Completed(_)));
    assert_eq!(done.actions[0], Action::SetAlarm(T0 + 10 + TTL));
}

#[test]
fn an_unknown_outcome_keeps_the_lookup_and_asks_from_the_alarm_a_second_later() {
    let now = T0 + 31_000;
    let KeyRecord::Unknown(unknown) = unknown_at(now) else { panic!() };
    assert_eq!(unknown.reconcile, Some(Reconciling { next_at: now + FIRST_DELAY_MS, ..lookup() }));
    let timed_out = step(Some(&claimed()), finished(OriginResult::TimedOut), now);
    assert_eq!(timed_out.actions[0], Action::SetAlarm(now + FIRST_DELAY_MS));
    // Not due yet: the alarm looks again when it is; due: it asks.
    let early =
        step(Some(&KeyRecord::Unknown(unknown.clone())), Event::Alarm { live_attempt: None }, now + 10);
    assert_eq!(early.actions, vec![Action::SetAlarm(now + FIRST_DELAY_MS)]);
    let due =
        step(Some(&KeyRecord::Unknown(unknown)), Event::Alarm { live_attempt: None }, now + FIRST_DELAY_MS);
    assert_eq!(due, Step::keep(vec![Action::Lookup { attempt: A }]));
}

#[test]
fn an_answer_too_large_to_store_is_never_looked_up() {
    let record = put(&step(Some(&claimed()), finished(OriginResult::Oversized(200)), T0 + 10));
    assert_eq!(record.reconciling(), None);
    assert_eq!(reconcile_first(Some(&record), FP, None, T0 + 20), None);
}

#[test]
fn a_claim_whose_owner_died_is_looked_up_when_its_lease_ends_not_before() {
    let claim = claimed();
    let during = step(Some(&claim), Event::Alarm { live_attempt: None }, T0 + LEASE - 1);
    assert!(!during.actions.iter().any(|action| matches!(action, Action::Lookup { .. })));
    // The owner still runs here: no lookup, whatever the time.
    let live = step(Some(&claim), Event::Alarm { live_attempt: Some(A) }, T0 + LEASE + 5);
    assert!(!live.actions.iter().any(|action| matches!(action, Action::Lookup { .. })));
    let after = step(Some(&claim), Event::Alarm { live_attempt: None }, T0 + LEASE);
    assert_eq!(after.actions, vec![Action::Lookup { attempt: A }]);
    let KeyRecord::Unknown(unknown) = put(&after) else { panic!() };
    assert_eq!(unknown.reason, UnknownReason::OriginTimeout);
    assert_eq!(unknown.reconcile.map(|r| r.next_at), Some(T0 + LEASE));
    // Its outcome became unknown when the lease ended, however late the alarm noticed.
    let late = step(Some(&claim), Event::Alarm { live_attempt: None }, T0 + LEASE + 7_000);
    let KeyRecord::Unknown(unknown) = put(&late) else { panic!() };
    assert_eq!(unknown.since, T0 + LEASE);
}

#[test]
fn a_dead_claims_not_found_waits_the_origin_timeout_after_its_lease_as_a_timed_out_one_does() {
    // Its owner may have sent the request at the lease's last moment: the origin may not
    // have committed it when the lease ends. Both ways a dead claim is looked up (a retry
    // finds the claim itself; the alarm made it unknown first) wait as long.
    let claim = claimed();
    let noticed = put(&step(Some(&claim), Event::Alarm { live_attempt: None }, T0 + LEASE));
    for record in [&claim, &noticed] {
        for at in [T0 + LEASE, T0 + LEASE + ORIGIN_TIMEOUT - 1] {
            let early = reconciled(record, A, Verdict::NotExecuted, at);
            let KeyRecord::Unknown(still) = put(&early) else { panic!("{record:?} at {at}: {early:?}") };
            assert_eq!(still.since, T0 + LEASE);
            let next_at = still.reconcile.map(|r| r.next_at);
            assert_eq!(next_at, Some(T0 + LEASE + ORIGIN_TIMEOUT), "asked again when it can be believed");
            assert_eq!(early.actions, vec![Action::SetAlarm(T0 + LEASE + ORIGIN_TIMEOUT)]);
            // And then believed, not asked once more.
            let then = reconciled(&put(&early), A, Verdict::NotExecuted, T0 + LEASE + ORIGIN_TIMEOUT);
            assert_eq!(then.change, KeyRecordChange::Delete, "{then:?}");
        }
        let released = reconciled(record, A, Verdict::NotExecuted, T0 + LEASE + ORIGIN_TIMEOUT);
        assert_eq!(released, Step { change: KeyRecordChange::Delete, actions: vec![] });
        // A found answer is proof at once.
        let found = reconciled(record, A, Verdict::Executed(answer()), T0 + LEASE);
        assert!(matches!(put(&found), KeyRecord::Completed(_)));
    }
}

/// A claim from before the key had one spelling at the origin may have sent the client's
/// `"k"` where the lookup asks for `k`: its "not found" never releases the key; "executed"
/// still settles it.
#[test]
fn a_lookup_of_a_claim_from_before_the_one_spelling_releases_nothing() {
    let since = T0 + 31_000;
    let old = |record: KeyRecord| match record {
        KeyRecord::Unknown(unknown) => KeyRecord::Unknown(Unknown {
            reconcile: unknown.reconcile.map(|r| Reconciling { spelling_known: false, ..r }),
            ..unknown
        }),
        other => other,
    };
    let record = old(unknown_at(since));
    for at in [since + 30_000, since + TTL / 2] {
        let step = reconciled(&record, A, Verdict::NotExecuted, at);
        let KeyRecord::Unknown(still) = put(&step) else { panic!("released: {step:?}") };
        let next = still.reconcile.as_ref().map(|r| (r.asked, r.spelling_known));
        assert_eq!(next, Some((1, false)), "asked again later, as after any lookup that said nothing");
        assert!(still.reconcile.unwrap().next_at > at);
    }
    let executed = reconciled(&record, A, Verdict::Executed(answer()), since + 10);
    assert!(matches!(put(&executed), KeyRecord::Completed(_)), "{executed:?}");
    // A dead claim from before, likewise.
    let KeyRecord::InFlight(claim) = claimed() else { panic!() };
    let dead = KeyRecord::InFlight(InFlight {
        reconcile: claim.reconcile.clone().map(|r| Reconciling { spelling_known: false, ..r }),
        ..claim
    });
    let step = reconciled(&dead, A, Verdict::NotExecuted, T0 + LEASE + 30_000);
    assert!(matches!(put(&step), KeyRecord::Unknown(_)), "{step:?}");
}

#[test]
fn not_executed_releases_the_key_once_the_origin_had_its_timeout_again() {
    let since = T0 + 31_000;
    let record = unknown_at(since);
    // Sooner, the origin may still be working on a request it has not committed: asked again.
    let early = reconciled(&record, A, Verdict::NotExecuted, since + 1_000);
    let KeyRecord::Unknown(still) = put(&early) else { panic!("{early:?}") };
    // Asked again when a not-found can be believed, not later (nor sooner: it would be
    // too soon again).
    assert_eq!(still.reconcile.map(|r| (r.asked, r.next_at)), Some((1, since + 30_000)));
    assert_eq!(early.actions, vec![Action::SetAlarm(since + 30_000)]);
    let just_before = reconciled(&record, A, Verdict::NotExecuted, since + 29_999);
    assert!(matches!(put(&just_before), KeyRecord::Unknown(_)), "{just_before:?}");
    let released = reconciled(&record, A, Verdict::NotExecuted, since + 30_000);
    assert_eq!(released, Step { change: KeyRecordChange::Delete, actions: vec![] });
    let again = step(None, arrival(B, Some(lookup()), None), since + 30_001);
    assert!(again.actions.contains(&Action::Forward { attempt: B }));
    // A found answer is proof at once.
    let found = reconciled(&record, A, Verdict::Executed(answer()), since + 1);
    assert!(matches!(put(&found), KeyRecord::Completed(_)));
}

#[test]
fn executed_stores_the_lookups_answer_as_the_final_one() {
    let record = unknown_at(T0 + 31_000);
    let now = T0 + 32_000;
    let done = reconciled(&record, A, Verdict::Executed(answer()), now);
    let KeyRecord::Completed(completed) = put(&done) else { panic!() };
    assert_eq!(completed.attempt, A);
    assert_eq!(completed.fingerprint, FP);
    assert_eq!(*completed.response, answer());
    assert_eq!(done.actions, vec![Action::SetAlarm(now + TTL)]);
    let replay = step(Some(&KeyRecord::Completed(completed)), arrival(B, Some(lookup()), None), now + 1);
    assert_eq!(replay.actions, vec![Action::Replay(Arc::new(answer()))]);
}

#[test]
fn a_lookup_that_says_nothing_asks_again_later_with_backoff_until_expiry() {
    let mut record = unknown_at(T0 + 31_000);
    let mut now = T0 + 32_000;
    let mut waits = Vec::new();
    for asked in 1..=4u16 {
        let unsure = reconciled(&record, A, Verdict::Unsure, now);
        record = put(&unsure);
        let reconciling = record.reconciling().expect("kept").clone();
        assert_eq!(reconciling.asked, asked);
        assert_eq!(unsure.actions, vec![Action::SetAlarm(reconciling.next_at)]);
        waits.push(reconciling.next_at - now);
        now = reconciling.next_at;
    }
    assert_eq!(waits, vec![1_000, 2_000, 4_000, 8_000]);
    // Near expiry the alarm is the expiry's, and then the record is deleted.
    let expires_at = record.expires_at();
    let late = reconciled(&record, A, Verdict::Unsure, expires_at - 1);
    assert_eq!(late.actions, vec![Action::SetAlarm(expires_at)]);
    let end = step(Some(&put(&late)), Event::Alarm { live_attempt: None }, expires_at);
    assert_eq!(end.change, KeyRecordChange::Delete);
}

#[test]
fn a_verdict_for_a_record_that_moved_on_changes_nothing() {
    let record = unknown_at(T0 + 31_000);
    for verdict in [Verdict::NotExecuted, Verdict::Executed(answer()), Verdict::Unsure] {
        assert_eq!(reconciled(&record, B, verdict.clone(), T0 + 32_000), Step::keep(vec![]), "{verdict:?}");
        assert_eq!(reconciled(&record, A, verdict, record.expires_at()), Step::keep(vec![]), "expired");
    }
    let done = put(&reconciled(&record, A, Verdict::Executed(answer()), T0 + 32_000));
    assert_eq!(reconciled(&done, A, Verdict::NotExecuted, T0 + 33_000), Step::keep(vec![]));
}

#[test]
fn a_retry_looks_up_an_unknown_outcome_or_a_dead_claim_first_and_nothing_else() {
    let unknown = unknown_at(T0 + 31_000);
    assert_eq!(reconcile_first(Some(&unknown), FP, None, T0 + 31_001), Some(A));
    assert_eq!(reconcile_first(Some(&unknown), FP, None, unknown.expires_at()), None, "expired");
    let claim = claimed();
    assert_eq!(reconcile_first(Some(&claim), FP, None, T0 + LEASE - 1), None, "its owner may still run");
    assert_eq!(reconcile_first(Some(&claim), FP, Some(A), T0 + LEASE + 1), None, "its owner runs here");
    assert_eq!(reconcile_first(Some(&claim), FP, None, T0 + LEASE), Some(A));
    let done = put(&reconciled(&unknown, A, Verdict::Executed(answer()), T0 + 32_000));
    assert_eq!(reconcile_first(Some(&done), FP, None, T0 + 33_000), None);
    assert_eq!(reconcile_first(None, FP, None, T0), None);
    // Another payload under the key asks nothing: it is refused 422, as ever.
    assert_eq!(reconcile_first(Some(&unknown), Digest256([2; 32]), None, T0 + 31_001), None);
    assert_eq!(reconcile_first(Some(&claim), Digest256([2; 32]), None, T0 + LEASE), None);
}

#[test]
fn retries_ask_at_once_the_first_time_then_only_when_the_backoff_says() {
    let now = T0 + 31_000;
    let unknown = unknown_at(now);
    // The first retry asks at once, before the alarm would.
    assert_eq!(reconcile_first(Some(&unknown), FP, None, now + 1), Some(A));
    // Once a lookup said nothing, retries do not ask again before it is due.
    let unsure = put(&reconciled(&unknown, A, Verdict::Unsure, now + 2));
    let due = unsure.reconciling().expect("kept").next_at;
    for early in [now + 3, due - 1] {
        assert_eq!(reconcile_first(Some(&unsure), FP, None, early), None, "at {early}");
    }
    assert_eq!(reconcile_first(Some(&unsure), FP, None, due), Some(A));
}

#[test]
fn a_record_without_a_lookup_is_not_looked_up_and_a_verdict_for_it_schedules_nothing() {
    // An unknown outcome recorded before the route had a lookup, or a claim without one.
    let KeyRecord::Unknown(unknown) = unknown_at(T0 + 31_000) else { panic!() };
    let bare = KeyRecord::Unknown(Unknown { reconcile: None, ..unknown });
    assert_eq!(reconcile_first(Some(&bare), FP, None, T0 + 32_000), None);
    let KeyRecord::InFlight(claim) = claimed() else { panic!() };
    let plain = KeyRecord::InFlight(InFlight { reconcile: None, ..claim });
    assert_eq!(reconcile_first(Some(&plain), FP, None, T0 + LEASE), None);
    // Should one be asked all the same, it changes nothing but a found answer.
    assert_eq!(reconciled(&bare, A, Verdict::Unsure, T0 + 32_000), Step::keep(vec![]));
    let done = reconciled(&bare, A, Verdict::Executed(answer()), T0 + 32_000);
    assert!(matches!(put(&done), KeyRecord::Completed(_)));
}

#[test]
fn a_reforward_under_origin_deduplicates_keeps_the_lookup() {
    let record = unknown_at(T0 + 31_000);
    let mut event = arrival(B, None, None);
    if let Event::Arrival { max_origin_attempts, .. } = &mut event {
        *max_origin_attempts = Some(3);
    }
    let again = step(Some(&record), event, T0 + 40_000);
    let KeyRecord::InFlight(claim) = put(&again) else { panic!() };
    assert_eq!(claim.origin_attempts, 2);
    assert_eq!(claim.reconcile, Some(lookup()));
}

#[test]
fn waiters_on_a_lookup_are_bounded_as_waiters_on_an_execution() {
    let limits = WaiterLimits { max_waiters: 2, ..WaiterLimits::default() };
    assert!(limits.admits(0) && limits.admits(1));
    assert!(!limits.admits(2) && !limits.admits(3));
}
