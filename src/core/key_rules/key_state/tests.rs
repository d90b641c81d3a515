//! Tests of the per-key driver ([`KeyState`]): each decision it owns, with fixed times.
//! The property tests of `core::key_rules::machine` and `core::key_rules::machine::async_job` drive it too.

use super::*;
use crate::core::formats::key_record::{Completed, InFlight, Unknown, UnknownReason};
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::key_terms::{Timing, WaiterLimits};
use crate::core::vocabulary::outcome_table::OutcomeTable;

const T0: Millis = 1_700_000_000_000;
const TTL: u64 = 60_000;
const FP: Digest256 = Digest256([1; 32]);
const A: AttemptId = AttemptId(1);
const B: AttemptId = AttemptId(2);

fn policy() -> KeyTerms {
    KeyTerms {
        timing: Timing { ttl_ms: TTL, duplicate_wait_ms: 5_000, origin_timeout_ms: 2_000 },
        limits: WaiterLimits::default(),
        outcome: OutcomeTable::default(),
        max_stored_response_bytes: 1_000,
        max_origin_attempts: None,
        mode: Mode::Enforce,
        origin_service: None,
        key_header: None,
    }
}

fn arrival(policy: &KeyTerms, new_attempt: AttemptId, observing: bool) -> Arrival<'_> {
    Arrival { lookup: None, fingerprint: FP, new_attempt, policy, body_bytes: 10, accept: None, observing }
}

fn answer(status: u16) -> Arc<StoredResponse> {
    Arc::new(StoredResponse { status, headers: vec![], body: b"{}".to_vec() })
}

/// Writes a pending step as the runtime does: storage (here, memory) first, then the
/// report.
fn written(key: &mut KeyState, pending: Pending) -> Decided {
    match &pending.step().change {
        KeyRecordChange::Keep => {}
        KeyRecordChange::Put(record) => key.remember(Some(record.clone())),
        KeyRecordChange::Delete => key.handle_deleting(),
    }
    key.handle_written(pending)
}

/// A key whose storage was read empty, claimed by `A` at T0 and written.
fn claimed(policy: &KeyTerms) -> KeyState {
    let mut key = KeyState::new();
    key.remember(None);
    let pending = key.handle_arrival(arrival(policy, A, false), T0);
    let decided = written(&mut key, pending);
    assert!(decided.step.actions.contains(&Action::Forward { attempt: A }), "{decided:?}");
    assert_eq!(decided.decision, Some(Decision::Executed));
    key
}

#[test]
fn a_forward_becomes_live_once_its_claim_is_written_and_duplicates_join_it() {
    let policy = policy();
    let key = &mut claimed(&policy);
    assert_eq!(key.live().map(|live| live.attempt), Some(A));
    let pending = key.handle_arrival(arrival(&policy, B, false), T0 + 1);
    let duplicate = written(key, pending);
    assert!(matches!(duplicate.step.actions[..], [Action::Join { attempt: A, .. }]), "{duplicate:?}");
    assert_eq!(key.live().map(|live| (live.waiters, live.waiting_bytes)), Some((1, 10)));
    assert_eq!(key.handle_wait_over(A, 10, true, T0 + 2), Ok(Decision::Coalesced));
    assert_eq!(key.live().map(|live| (live.waiters, live.waiting_bytes)), Some((0, 0)));
}

#[test]
fn a_waiter_gets_the_answer_it_waited_for_or_a_409() {
    let policy = policy();
    let mut key = claimed(&policy);
    let pending = key.handle_arrival(arrival(&policy, B, false), T0 + 1);
    written(&mut key, pending);
    assert_eq!(key.handle_waited(A, 10, Some(()), T0 + 2), (Decision::Coalesced, Ok(())));
    let pending = key.handle_arrival(arrival(&policy, B, false), T0 + 1);
    written(&mut key, pending);
    let (decision, waited) = key.handle_waited(A, 10, None, T0 + 5_001);
    let problem = waited.expect_err("ran out");
    assert_eq!(problem.kind, ProblemKind::InProgress);
    assert_eq!(decision, Decision::Rejected(ProblemKind::InProgress));
    assert_eq!(key.live().map(|live| live.waiters), Some(0), "neither holds a place any more");
}

#[test]
fn a_wait_that_runs_out_is_409_and_leaves_the_waiters() {
    let policy = policy();
    let key = &mut claimed(&policy);
    let pending = key.handle_arrival(arrival(&policy, B, false), T0 + 1);
    written(key, pending);
    let problem = key.handle_wait_over(A, 10, false, T0 + 5_001).expect_err("a problem");
    assert_eq!(problem.kind, ProblemKind::InProgress);
    assert_eq!(key.live().map(|live| live.waiters), Some(0));
}

#[test]
fn a_claim_that_cannot_be_written_forwards_nothing_and_is_not_live() {
    let policy = policy();
    let mut key = KeyState::new();
    key.remember(None);
    let pending = key.handle_arrival(arrival(&policy, A, false), T0);
    let instead = key.handle_write_failed(pending, T0);
    assert!(
        matches!(&instead.step.actions[..], [Action::Reject(p)] if p.kind == ProblemKind::StorageUnavailable)
    );
    assert_eq!(key.live(), None);
    assert_eq!(key.record(), None);
    assert_eq!(instead.decision, Some(Decision::Rejected(ProblemKind::StorageUnavailable)));
}

#[test]
fn a_claim_whose_alarm_cannot_be_set_is_withdrawn() {
    let policy = policy();
    let mut key = KeyState::new();
    key.remember(None);
    let pending = key.handle_arrival(arrival(&policy, A, false), T0);
    let mut decided = written(&mut key, pending);
    assert!(matches!(decided.poll_action(), Some(Action::SetAlarm(_))));
    let AlarmUnset::Instead(withdrawn) = key.handle_alarm_unset(decided) else { panic!("withdrawn") };
    assert_eq!(withdrawn.describe(), "withdrawing the claim");
    assert_eq!(key.live(), None, "its waiters are released");
    let withdrawn = written(&mut key, withdrawn);
    assert_eq!(withdrawn.step.change, KeyRecordChange::Delete);
    assert!(
        matches!(&withdrawn.step.actions[..], [Action::Reject(p)] if p.kind == ProblemKind::StorageUnavailable)
    );
    assert_eq!(withdrawn.decision, Some(Decision::Rejected(ProblemKind::StorageUnavailable)));
    assert_eq!(key.record(), None, "the key may be retried");
}

#[test]
fn an_observed_claim_keeps_its_claim_when_the_alarm_fails_and_lives_for_its_lease() {
    let policy = policy();
    let mut key = KeyState::new();
    key.remember(None);
    let pending = key.handle_arrival(arrival(&policy, A, true), T0);
    let mut decided = written(&mut key, pending);
    assert!(matches!(decided.poll_action(), Some(Action::SetAlarm(_))));
    let AlarmUnset::Carry(rest) = key.handle_alarm_unset(decided) else {
        panic!("observing, the Worker has forwarded already")
    };
    assert_eq!(rest.step.actions, vec![Action::Forward { attempt: A }]);
    assert_eq!(rest.fails_alarm, None);
    let until = T0 + policy.timing.lease_ms();
    assert_eq!(key.live().and_then(|live| live.observed_until), Some(until));
    // Observing never counts a waiter.
    let pending = key.handle_arrival(arrival(&policy, B, true), T0 + 1);
    assert_eq!(written(&mut key, pending).decision, Some(Decision::Coalesced));
    assert_eq!(key.live().map(|live| live.waiters), Some(0));
    assert_eq!(key.expire_observed(until - 1), None);
    assert_eq!(key.expire_observed(until), Some(A));
    assert_eq!(key.live(), None);
}

#[test]
fn a_failed_outcome_write_still_answers_and_the_claim_holds_the_key() {
    let policy = policy();
    let key = &mut claimed(&policy);
    let pending =
        key.handle_origin_finished(A, OriginResult::Responded(201), Some(answer(201)), &policy, T0 + 10);
    assert!(matches!(pending.step().change, KeyRecordChange::Put(KeyRecord::Completed(_))));
    let instead = key.handle_write_failed(pending, T0 + 10);
    assert_eq!(instead.step.change, KeyRecordChange::Keep);
    assert!(
        matches!(&instead.step.actions[..], [Action::Settle { attempt: A, origin_answered: true, answer }] if answer.status == 201)
    );
    assert_eq!(instead.decision, Some(Decision::Executed), "the log says what the origin did");
    assert_eq!(key.live(), None);
    assert!(matches!(key.record(), Some(KeyRecord::InFlight(claim)) if claim.attempt == A));
}

#[test]
fn an_outcome_written_is_remembered_and_ends_the_execution() {
    let policy = policy();
    let key = &mut claimed(&policy);
    let pending = key.handle_origin_finished(A, OriginResult::TimedOut, None, &policy, T0 + 10);
    assert_eq!(written(key, pending).decision, Some(Decision::Unknown));
    assert_eq!(key.live(), None);
    assert!(matches!(key.record(), Some(KeyRecord::Unknown(_))));
}

/// Only a result that keeps an answer takes it: an answer over the cap says nothing, not
/// even the release its headers confirm (the Worker's observed copy and a forward alike).
#[test]
fn an_answer_counts_only_with_a_result_that_keeps_it() {
    let mut policy = policy();
    policy.outcome.release_requires_header = true;
    let released = Arc::new(StoredResponse {
        status: 409,
        headers: vec![("Idempotency-Released".into(), "true".into())],
        body: vec![],
    });
    let oversized = OriginResult::Oversized(409);
    let key = &mut claimed(&policy);
    let pending = key.handle_origin_finished(A, oversized, Some(released.clone()), &policy, T0 + 10);
    assert_eq!(pending.decision(), Some(Decision::Unknown), "never released on an answer not kept");
    assert!(matches!(pending.step().change, KeyRecordChange::Put(KeyRecord::Unknown(_))));
    let key = &mut claimed(&policy);
    let pending =
        key.handle_origin_finished(A, OriginResult::Responded(409), Some(released), &policy, T0 + 10);
    assert_eq!(pending.step().change, KeyRecordChange::Delete, "a kept answer's headers count");
}

#[test]
fn a_record_past_its_expiry_is_gone_when_read_unless_its_execution_runs_here() {
    let policy = policy();
    let key = &mut claimed(&policy);
    let expires_at = key.record().unwrap().expires_at();
    assert!(!key.expired_on_read(expires_at + 1), "the live execution keeps its claim");
    let mut other = KeyState::new();
    other.remember(key.record().cloned());
    assert!(!other.expired_on_read(expires_at - 1));
    assert!(other.expired_on_read(expires_at));
    other.handle_deleting();
    assert_eq!(other.record(), None);
    assert!(other.is_loaded());
}

#[test]
fn a_failed_deletion_is_read_again_unless_a_new_claim_came_meanwhile() {
    let policy = policy();
    let key = &mut claimed(&policy);
    let stored = key.record().cloned();
    let mut deleting = KeyState::new();
    deleting.remember(stored.clone());
    deleting.handle_deleting();
    assert!(deleting.handle_delete_failed(), "the claim may still be stored: read it again");
    assert!(!deleting.is_loaded(), "not believed gone");
    let mut reclaimed = KeyState::new();
    reclaimed.remember(stored.clone());
    reclaimed.handle_deleting();
    reclaimed.remember(stored.clone());
    assert!(!reclaimed.handle_delete_failed(), "a new claim's write is ordered after the deletion");
    assert_eq!(reclaimed.record(), stored.as_ref());
}

#[test]
fn the_alarm_keeps_a_running_claim_and_deletes_an_orphaned_one() {
    let policy = policy();
    let key = &mut claimed(&policy);
    let late = T0 + TTL + 1;
    let pending = key.handle_alarm(late);
    assert_eq!(pending.step().change, KeyRecordChange::Keep);
    let mut restarted = KeyState::new();
    restarted.remember(key.record().cloned());
    assert_eq!(restarted.handle_alarm(late).step().change, KeyRecordChange::Delete);
}

/// The alarm's run steps a key with a job as its job (a send, here), and cleans up any
/// other (an answer past its expiry is deleted), with no decision of its own.
#[test]
fn the_alarm_runs_a_job_or_cleans_up() {
    let mut key = KeyState::new();
    key.remember(Some(job_record(b"sealed")));
    let pending = key.handle_alarm_run(B, T0 + 1);
    assert_eq!((pending.forwarded(), pending.describe()), (Some(B), "the job"));
    let mut key = KeyState::new();
    key.remember(Some(completed_201()));
    let pending = key.handle_alarm_run(B, T0 + TTL + 1);
    assert_eq!(pending.step().change, KeyRecordChange::Delete);
    assert_eq!((pending.forwarded(), pending.decision(), pending.describe()), (None, None, "the clean-up"));
}

#[test]
fn a_job_send_that_cannot_be_scheduled_is_put_back() {
    let before = job_record(b"sealed");
    let mut key = KeyState::new();
    key.remember(Some(before.clone()));
    let pending = key.handle_job_alarm(B, T0 + 1);
    // The alarm step's own job: due, so it sends, under a new claim.
    let Some(attempt) = pending.forwarded() else { panic!("a send: {pending:?}") };
    assert_eq!(pending.describe(), "the job");
    let mut decided = written(&mut key, pending);
    assert!(matches!(decided.poll_action(), Some(Action::SetAlarm(_))));
    let AlarmUnset::Instead(put_back) = key.handle_alarm_unset(decided) else { panic!("put back") };
    assert_eq!(put_back.step().change, KeyRecordChange::Put(before.clone()));
    assert!(put_back.step().actions.is_empty(), "nothing is sent");
    let decided = written(&mut key, put_back);
    assert_eq!(key.record(), Some(&before));
    assert!(key.live().is_none_or(|live| live.attempt != attempt));
    assert!(decided.fails_alarm.is_some(), "the platform retries the alarm");
}

/// Nobody waits on a job's send: its outcome, stored or held unknown, settles no caller,
/// and the attempt is over all the same.
#[test]
fn a_jobs_outcome_settles_nobody() {
    let policy = policy();
    for (result, answer) in
        [(OriginResult::Responded(201), Some(answer(201))), (OriginResult::TimedOut, None)]
    {
        let mut key = KeyState::new();
        key.remember(Some(job_record(b"sealed")));
        let pending = key.handle_job_alarm(B, T0 + 1);
        let attempt = pending.forwarded().expect("a send");
        written(&mut key, pending);
        let pending = key.handle_job_finished(attempt, result, answer, &policy, None, 0.5, T0 + 10);
        assert!(pending.step().change != KeyRecordChange::Keep, "{result:?}: the outcome is recorded");
        let actions = &pending.step().actions;
        assert!(
            !actions.iter().any(|action| matches!(action, Action::Settle { .. })),
            "{result:?}: {actions:?}"
        );
        written(&mut key, pending);
        assert!(key.live().is_none(), "{result:?}: the send is over");
    }
}

#[test]
fn a_job_is_sent_only_as_the_request_that_was_opened_for_it() {
    let mut key = KeyState::new();
    key.remember(Some(job_record(b"sealed")));
    assert_eq!(key.job_request(), Some((b"sealed".to_vec(), Some((T0, FP)))), "bound to the claim");
    let mut unbound = KeyState::new();
    let Some(KeyRecord::InFlight(mut claim)) = Some(job_record(b"sealed")) else { unreachable!() };
    if let Some(job) = claim.async_job.as_mut() {
        job.request_bound = false;
    }
    unbound.remember(Some(KeyRecord::InFlight(claim.clone())));
    assert_eq!(unbound.job_request(), Some((b"sealed".to_vec(), None)), "a job from before binding");
    if let Some(job) = claim.async_job.as_mut() {
        job.sealed_request.clear();
    }
    unbound.remember(Some(KeyRecord::InFlight(claim)));
    assert_eq!(unbound.job_request(), None, "a job that gave up keeps no request");
    let pending = key.handle_job_alarm(B, T0 + 1);
    assert!(pending.forwarded().is_some());
    assert_eq!(key.check_job_send(&pending, Some(b"sealed")), Ok(()));
    assert!(key.check_job_send(&pending, Some(b"other")).is_err(), "the job changed meanwhile");
    assert!(key.check_job_send(&pending, None).is_err(), "nothing was opened");
    // A step that sends nothing needs no request.
    let clean_up = key.handle_alarm(T0 + 1);
    assert_eq!(key.check_job_send(&clean_up, None), Ok(()));
}

#[test]
fn an_alarm_step_whose_alarm_or_write_fails_fails_the_alarm_run_an_outcome_does_not() {
    let policy = policy();
    // The alarm's clean-up: the next alarm unset.
    let mut key = KeyState::new();
    key.remember(Some(completed_201()));
    let mut decided = written(&mut key, key_alarm(T0 + 1));
    assert!(matches!(decided.poll_action(), Some(Action::SetAlarm(_))));
    let AlarmUnset::Carry(rest) = key.handle_alarm_unset(decided) else { panic!() };
    assert!(rest.fails_alarm.is_some());
    // Its write failed.
    let pending = key.handle_alarm(T0 + TTL + 1);
    assert_eq!(pending.describe(), "the clean-up");
    assert!(key.handle_write_failed(pending, T0 + TTL + 1).fails_alarm.is_some());
    // A lookup's verdict is fenced by the unknown outcome, and a failed write of it fails the run.
    let verdict = key.handle_reconciled(A, Verdict::Unsure, &policy, 0.5, T0);
    assert_eq!(verdict.fence(), Fence::Lookup);
    assert!(key.handle_write_failed(verdict, T0).fails_alarm.is_some());
    // An enforce-mode outcome was sent already: its unset alarm fails nothing.
    let mut key = claimed(&policy);
    let pending =
        key.handle_origin_finished(A, OriginResult::Responded(201), Some(answer(201)), &policy, T0 + TTL * 3);
    assert_eq!(pending.fence(), Fence::Claim);
    let mut decided = written(&mut key, pending);
    assert!(matches!(decided.poll_action(), Some(Action::SetAlarm(_))), "{decided:?}");
    let AlarmUnset::Carry(rest) = key.handle_alarm_unset(decided) else { panic!() };
    assert_eq!(rest.fails_alarm, None);
    assert!(matches!(&rest.step.actions[..], [Action::Settle { .. }]));
}

#[test]
fn a_refusal_before_the_step_is_a_step_that_only_refuses() {
    let problem = lookup_unsealed();
    let mut refused = refusal(problem.clone());
    assert_eq!(refused.decision, Some(Decision::Rejected(ProblemKind::StorageUnavailable)));
    assert_eq!(refused.step.change, KeyRecordChange::Keep, "nothing written");
    assert_eq!(refused.poll_action(), Some(Action::Reject(problem)));
    assert_eq!(refused.poll_action(), None);
    assert_eq!(refused.fails_alarm, None);
}

#[test]
fn a_step_that_follows_an_action_is_carried_out_next_with_its_decision() {
    let policy = policy();
    let mut key = claimed(&policy);
    let mut decided = Decided {
        step: Step::keep(vec![Action::Forward { attempt: A }, Action::SetAlarm(T0)]),
        decision: Some(Decision::Executed),
        fails_alarm: None,
        what: InProgress::Other,
    };
    assert_eq!(decided.poll_action(), Some(Action::Forward { attempt: A }));
    let pending = key.handle_origin_finished(A, OriginResult::Responded(503), Some(answer(503)), &policy, T0);
    let outcome = written(&mut key, pending);
    decided.follow(outcome);
    assert_eq!(decided.decision, Some(Decision::Released));
    assert!(matches!(decided.poll_action(), Some(Action::Settle { attempt: A, .. })));
    assert_eq!(decided.poll_action(), Some(Action::SetAlarm(T0)), "the rest comes after");
    assert_eq!(decided.poll_action(), None);
}

fn key_alarm(now: Millis) -> Pending {
    let mut key = KeyState::new();
    key.remember(Some(completed_201()));
    key.handle_alarm(now)
}

/// A job's claim, due at T0, whose request was sealed as `sealed`.
fn job_record(sealed: &[u8]) -> KeyRecord {
    use crate::core::formats::job::{AsyncJob, JobPhase};
    let job = AsyncJob {
        phase: JobPhase::Waiting,
        deadline: T0 + TTL,
        next_attempt_at: T0,
        max_backoff_ms: 1_000,
        unknown_seen: false,
        probe_origin: false,
        max_sends: 3,
        request_bound: true,
        policy: Box::new(policy()),
        sealed_request: sealed.to_vec(),
    };
    KeyRecord::InFlight(InFlight {
        reconcile: None,
        attempt: A,
        fingerprint: FP,
        origin_attempts: 0,
        claimed_at: T0,
        lease_until: T0,
        expires_at: T0 + TTL,
        async_job: Some(job),
    })
}

/// `A`'s answer, 201, completed at T0 and kept for the TTL.
fn completed_201() -> KeyRecord {
    KeyRecord::Completed(Completed {
        attempt: A,
        fingerprint: FP,
        completed_at: T0,
        expires_at: T0 + TTL,
        response: answer(201),
        sealed_answer: None,
        sealed_bound: false,
        chunks: None,
    })
}

#[test]
fn a_replay_is_decided_from_the_record_in_memory() {
    let policy = policy();
    let mut key = KeyState::new();
    key.remember(Some(completed_201()));
    let pending = key.handle_arrival(arrival(&policy, B, false), T0 + 1);
    assert_eq!(pending.replay_only().map(|stored| stored.status), Some(201));
    let decided = written(&mut key, pending);
    assert!(matches!(&decided.step.actions[..], [Action::Replay(stored)] if stored.status == 201));
    assert_eq!(decided.decision, Some(Decision::Replayed));
}

#[test]
fn only_a_step_that_replays_and_writes_nothing_is_replay_only() {
    let policy = policy();
    // A claim: written, and forwarded.
    let mut key = KeyState::new();
    key.remember(None);
    let claim = key.handle_arrival(arrival(&policy, A, false), T0);
    assert_eq!(claim.replay_only(), None);
    written(&mut key, claim);
    // A duplicate of the live claim joins it.
    let duplicate = key.handle_arrival(arrival(&policy, B, false), T0 + 1);
    assert!(duplicate.step().actions.iter().any(|action| matches!(action, Action::Join { .. })));
    assert_eq!(duplicate.replay_only(), None);
    // The same key's answer, past its expiry: not replayed.
    let mut expired = KeyState::new();
    expired.remember(Some(completed_201()));
    assert_eq!(expired.handle_arrival(arrival(&policy, B, false), T0 + TTL + 1).replay_only(), None);
    // Another payload under the key: refused, not replayed.
    let other = Arrival { fingerprint: Digest256([2; 32]), ..arrival(&policy, B, false) };
    let mismatch = expired.handle_arrival(other, T0 + 1);
    assert!(mismatch.step().actions.iter().any(|action| matches!(action, Action::Reject(_))));
    assert_eq!(mismatch.replay_only(), None);
}

/// The replay path's step: a replay that writes nothing is reported at once, with its
/// answer; anything else (a claim, another payload, an answer past its expiry) is `None`.
#[test]
fn an_arrival_is_replayed_at_once_only_where_its_step_replays_and_writes_nothing() {
    let policy = policy();
    let mut key = KeyState::new();
    key.remember(Some(completed_201()));
    let (stored, decided) = key.handle_replay(arrival(&policy, B, false), T0 + 1).expect("replayed");
    assert_eq!((stored.status, decided.decision), (201, Some(Decision::Replayed)));
    let other = Arrival { fingerprint: Digest256([2; 32]), ..arrival(&policy, B, false) };
    assert!(key.handle_replay(other, T0 + 1).is_none(), "another payload is refused the whole way");
    assert!(key.handle_replay(arrival(&policy, B, false), T0 + TTL + 1).is_none(), "expired");
    let mut absent = KeyState::new();
    absent.remember(None);
    assert!(absent.handle_replay(arrival(&policy, A, false), T0).is_none(), "a claim");
    assert!(absent.live().is_none(), "a claim not taken writes nothing and runs nothing");
}

#[test]
fn the_stored_size_cap_counts_the_headers() {
    let policy = policy();
    let headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    assert_eq!(answer_body_cap(policy.max_stored_response_bytes, &headers), 1_000 - (12 + 16 + 8));
    let huge = vec![("x".to_owned(), "y".repeat(2_000))];
    assert_eq!(answer_body_cap(policy.max_stored_response_bytes, &huge), 0);
}

/// Requests interleave at every await of the runtime: an outcome whose write awaits
/// (sealing) while a duplicate arrives and is written still ends its execution, and each
/// step keeps its own decision.
#[test]
fn steps_that_interleave_keep_their_own_bookkeeping_and_decisions() {
    let policy = policy();
    let key = &mut claimed(&policy);
    let outcome =
        key.handle_origin_finished(A, OriginResult::Responded(201), Some(answer(201)), &policy, T0 + 10);
    let duplicate = key.handle_arrival(arrival(&policy, B, false), T0 + 11);
    let duplicate = written(key, duplicate);
    assert_eq!(duplicate.decision, Some(Decision::Coalesced));
    let outcome = written(key, outcome);
    assert_eq!(outcome.decision, Some(Decision::Executed));
    assert_eq!(key.live(), None, "the execution is over");
    assert!(matches!(key.record(), Some(KeyRecord::Completed(done)) if done.attempt == A));
}

/// One lookup of an unknown outcome runs at a time; the retries that wait for it hold their
/// bodies, so they are capped by count and by bytes, as an execution's waiters are, and a
/// retry past either is told at once that the outcome is unknown (502), holding nothing.
/// The alarm waits uncounted.
#[test]
fn retries_waiting_on_a_running_lookup_are_capped_by_count_and_by_bytes() {
    let limits = WaiterLimits { max_waiters: 3, max_waiting_bytes: 250 };
    let retry = |body_bytes| LookupAsker::Retry { body_bytes };
    let mut key = KeyState::new();
    key.remember(Some(KeyRecord::Unknown(Unknown {
        attempt: A,
        fingerprint: FP,
        origin_attempts: 1,
        since: T0,
        expires_at: T0 + TTL,
        reason: UnknownReason::ResetAfterSend,
        reconcile: None,
    })));
    assert!(matches!(key.handle_lookup_turn(A, retry(100), &limits), LookupTurn::Run(_)), "the first asks");
    assert!(matches!(key.handle_lookup_turn(A, retry(100), &limits), LookupTurn::Wait(_)));
    assert!(matches!(key.handle_lookup_turn(A, retry(100), &limits), LookupTurn::Wait(_)));
    let LookupTurn::Full(over_bytes) = key.handle_lookup_turn(A, retry(51), &limits) else {
        panic!("past MAX_WAITING_BYTES")
    };
    assert_eq!((over_bytes.kind, over_bytes.status()), (ProblemKind::OutcomeUnknown, 502));
    assert_eq!(over_bytes.retry_after, Some(1));
    assert!(
        over_bytes.detail.contains("broke after the request was sent"),
        "the record's reason: {over_bytes:?}"
    );
    assert!(over_bytes.detail.contains("MAX_WAITING_BYTES"), "{over_bytes:?}");
    assert!(
        matches!(key.handle_lookup_turn(A, retry(50), &limits), LookupTurn::Wait(_)),
        "exactly the cap fits"
    );
    assert!(
        matches!(key.handle_lookup_turn(A, retry(0), &limits), LookupTurn::Full(_)),
        "past MAX_WAITERS_PER_KEY"
    );
    assert!(
        matches!(key.handle_lookup_turn(A, LookupAsker::Alarm, &limits), LookupTurn::Wait(_)),
        "the alarm, uncounted"
    );
    assert_eq!(
        key.running_lookup(),
        Some(&RunningLookup { attempt: A, waiters: 3, waiting_bytes: 250 }),
        "a refused retry holds no place"
    );

    // The end of another attempt's lookup ends nothing; this one's frees every place.
    key.handle_lookup_over(B);
    assert!(key.running_lookup().is_some());
    key.handle_lookup_over(A);
    assert_eq!(key.running_lookup(), None);
    assert!(
        matches!(key.handle_lookup_turn(A, retry(100), &limits), LookupTurn::Run(_)),
        "asked again later"
    );

    // A retry at no room at all (MAX_WAITERS_PER_KEY=0) never waits; a dead claim's reason
    // is a timeout.
    let mut dead = claimed(&policy());
    dead.handle_send_over(A);
    let none = WaiterLimits { max_waiters: 0, max_waiting_bytes: 0 };
    assert!(matches!(dead.handle_lookup_turn(A, LookupAsker::Alarm, &none), LookupTurn::Run(_)));
    let LookupTurn::Full(problem) = dead.handle_lookup_turn(A, retry(0), &none) else { panic!("full") };
    assert!(problem.detail.starts_with("The origin did not answer in time"), "{problem:?}");
}

/// A route's lookup that could not be sealed: a claim without it could never be looked up,
/// so the arrival claims nothing (503, nothing written or forwarded); an arrival that
/// claims nothing is decided as ever.
#[test]
fn an_arrival_whose_lookup_could_not_be_sealed_claims_nothing() {
    let policy = policy();
    let mut key = KeyState::new();
    key.remember(None);
    let pending = key.handle_arrival(arrival(&policy, A, false), T0);
    let refused = key.handle_lookup_unsealed(pending);
    assert_eq!(refused.step().change, KeyRecordChange::Keep, "nothing claimed");
    let [Action::Reject(problem)] = &refused.step().actions[..] else { panic!("{refused:?}") };
    assert_eq!((problem.status(), problem.retry_after), (503, Some(1)));
    assert!(problem.detail.contains("reconcile_url"), "{problem:?}");
    assert_eq!(refused.decision(), Some(Decision::Rejected(ProblemKind::StorageUnavailable)));
    let decided = written(&mut key, refused);
    assert_eq!(decided.forwarded(), None);
    assert_eq!((key.live(), key.record()), (None, None), "the key is free: the caller may retry");

    // Nor is a job's claim made without it.
    let mut key = KeyState::new();
    key.remember(None);
    let accept = AsyncAccept {
        sealed_request: b"sealed".to_vec(),
        policy: policy.clone(),
        probe_origin: false,
        config: crate::core::key_rules::machine::async_job::AsyncConfig {
            prefer: true,
            ..Default::default()
        },
    };
    let job = Arrival { accept: Some(accept), ..arrival(&policy, A, false) };
    let pending = key.handle_arrival(job, T0);
    assert!(pending.step().actions.iter().any(|action| matches!(action, Action::Accepted { .. })));
    let refused = key.handle_lookup_unsealed(pending);
    assert_eq!(refused.step().change, KeyRecordChange::Keep, "no job claimed: {refused:?}");
    assert!(matches!(refused.step().actions[..], [Action::Reject(_)]), "{refused:?}");

    // A duplicate of a live execution joins it, lookup or not.
    let key = &mut claimed(&policy);
    let pending = key.handle_arrival(arrival(&policy, B, false), T0 + 1);
    let joined = key.handle_lookup_unsealed(pending);
    assert!(matches!(joined.step().actions[..], [Action::Join { attempt: A, .. }]), "{joined:?}");
}

#[test]
fn a_decided_step_hands_out_its_actions_once_each_in_order() {
    let policy = policy();
    let mut key = KeyState::new();
    key.remember(None);
    let pending = key.handle_arrival(arrival(&policy, A, false), T0);
    let mut decided = written(&mut key, pending);
    let expected = decided.step.actions.clone();
    assert!(!expected.is_empty());
    let mut handed = Vec::new();
    while let Some(action) = decided.poll_action() {
        handed.push(action);
    }
    assert_eq!(handed, expected);
    assert_eq!(decided.poll_action(), None);
}

#[test]
fn an_alarm_that_cannot_read_looks_again_a_minute_later() {
    assert_eq!(look_again_at(T0), T0 + 60_000);
    assert_eq!(look_again_at(u64::MAX - 1), u64::MAX);
}

#[test]
fn the_size_a_stored_answer_is_judged_by_and_its_body_cap_count_headers_alike() {
    let headers = vec![("a".to_owned(), "bc".to_owned()), ("set-cookie".to_owned(), "x".to_owned())];
    assert_eq!(machine::stored_header_bytes(&headers), (1 + 2 + 8) + (10 + 1 + 8));
    assert_eq!(answer_body_cap(100, &headers), 100 - machine::stored_header_bytes(&headers));
}

#[test]
fn a_step_says_what_it_claimed_before_its_actions_are_handed_out() {
    let policy = policy();
    let mut key = KeyState::new();
    key.remember(None);
    let pending = key.handle_arrival(arrival(&policy, A, false), T0);
    assert_eq!(pending.forwarded(), Some(A));
    let decided = written(&mut key, pending);
    assert_eq!(decided.claimed(), Claimed { forwarded: Some(A), job: false });
    let pending = key.handle_arrival(arrival(&policy, B, false), T0 + 1);
    assert_eq!(pending.forwarded(), None);
    let duplicate = written(&mut key, pending);
    assert_eq!(duplicate.claimed(), Claimed { forwarded: None, job: false });
}

/// The retries and the alarm that wait on a running lookup wait for its end, which its
/// runner gives by letting go of its turn; a lookup that ran and ended leaves nothing to
/// wait for.
#[test]
fn the_waiters_on_a_lookup_wake_when_its_runner_lets_go() {
    use std::task::{Context, Poll, Waker};
    let limits = WaiterLimits { max_waiters: 3, max_waiting_bytes: 250 };
    let mut key = KeyState::new();
    key.remember(None);
    let LookupTurn::Run(over) = key.handle_lookup_turn(A, LookupAsker::Alarm, &limits) else {
        panic!("the first runs")
    };
    let LookupTurn::Wait(done) = key.handle_lookup_turn(A, LookupAsker::Retry { body_bytes: 1 }, &limits)
    else {
        panic!("the second waits")
    };
    let mut context = Context::from_waker(Waker::noop());
    let mut wait = done;
    assert_eq!(wait.poll_unpin(&mut context), Poll::Pending);
    key.handle_lookup_over(A);
    drop(over);
    assert!(matches!(wait.poll_unpin(&mut context), Poll::Ready(Err(_))), "released with no value");
    assert!(key.running_lookup().is_none());
    assert!(matches!(key.handle_lookup_turn(A, LookupAsker::Alarm, &limits), LookupTurn::Run(_)));
}

/// A key claimed by `A` whose waiters share a number, with one duplicate joined.
fn claimed_with_a_waiter(policy: &KeyTerms) -> (KeyState<u32>, Awaited<u32>) {
    let mut key = KeyState::<u32>::default();
    key.remember(None);
    let pending = key.handle_arrival(arrival(policy, A, false), T0);
    remember_change(&mut key, &pending);
    key.handle_written(pending);
    let pending = key.handle_arrival(arrival(policy, B, false), T0 + 1);
    let mut joined = key.handle_written(pending);
    assert!(matches!(joined.poll_action(), Some(Action::Join { attempt: A, .. })));
    let waiting = key.waiters_of(A).expect("the live execution keeps its waiters");
    (key, waiting)
}

/// Storage (here, memory) follows a pending step's change, as before its report.
fn remember_change(key: &mut KeyState<u32>, pending: &Pending) {
    match &pending.step().change {
        KeyRecordChange::Keep => {}
        KeyRecordChange::Put(record) => key.remember(Some(record.clone())),
        KeyRecordChange::Delete => key.handle_deleting(),
    }
}

/// A waiter's wait, polled once: the value, or `None` once it was released without one.
fn poll_once(wait: &mut Awaited<u32>) -> Poll<Option<u32>> {
    wait.poll_unpin(&mut Context::from_waker(Waker::noop())).map(Result::ok)
}

use std::task::{Context, Poll, Waker};

/// The execution's waiters live in the driver: a step that settles the attempt keeps them
/// for the answer the runtime prepares, and each gets it; no waiter joins once it settles.
#[test]
fn the_waiters_of_an_execution_get_the_answer_its_settle_hands_over() {
    let policy = policy();
    let (mut key, waiting) = claimed_with_a_waiter(&policy);
    let mut wait = waiting.clone();
    assert_eq!(poll_once(&mut wait), Poll::Pending);
    assert!(key.waiters_of(B).is_none(), "only the live attempt has waiters");
    let pending =
        key.handle_origin_finished(A, OriginResult::Responded(201), Some(answer(201)), &policy, T0 + 10);
    remember_change(&mut key, &pending);
    let mut decided = key.handle_written(pending);
    assert!(key.waiters_of(A).is_none(), "settling: nobody joins any more");
    assert_eq!(poll_once(&mut wait), Poll::Pending, "still waiting for the prepared answer");
    match decided.poll_action() {
        Some(Action::Settle { attempt: A, origin_answered, .. }) => {
            let settled = key.handle_settled(A, 201, origin_answered);
            assert_eq!(settled, Settled { caller: CallerAnswer::Live, keep_in_memory: true });
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(poll_once(&mut wait), Poll::Ready(Some(201)));
}

/// Carrying out a `Settle`: the caller whose request executed gets the origin's own answer
/// only where the origin gave the one the key settled on; and an answer stored in chunk
/// rows is not kept in memory once its waiters have it (it is replayed from its rows).
#[test]
fn a_settle_says_which_answer_the_caller_gets_and_what_stays_in_memory() {
    let policy = policy();
    // The origin timed out: the caller gets the settled problem, like every waiter.
    let mut key = claimed(&policy);
    let pending = key.handle_origin_finished(A, OriginResult::TimedOut, None, &policy, T0 + 10);
    let mut decided = written(&mut key, pending);
    let Some(Action::Settle { attempt: A, origin_answered, .. }) = decided.poll_action() else { panic!() };
    let settled = key.handle_settled(A, (), origin_answered);
    assert_eq!(settled, Settled { caller: CallerAnswer::Settled, keep_in_memory: true });
    // A chunked answer, stored: the caller gets the origin's, and memory lets it go.
    let mut key = claimed(&policy);
    let KeyRecord::Completed(done) = completed_201() else { unreachable!() };
    let manifest = crate::core::formats::chunk_manifest::ChunkManifest {
        body_len: 5 << 20,
        chunk_len: 1 << 20,
        attempt: 1,
        digests: vec![[3; 32]; 5],
    };
    key.remember(Some(KeyRecord::Completed(Completed { chunks: Some(manifest), ..done })));
    let settled = key.handle_settled(A, (), true);
    assert_eq!(settled, Settled { caller: CallerAnswer::Live, keep_in_memory: false });
    // The key released (nothing stored): the answer may stay.
    key.remember(None);
    assert!(key.handle_settled(A, (), true).keep_in_memory);
}

/// An execution that ends without an answer (its claim withdrawn, an observed claim's
/// lease over) releases its waiters at once: `None`, which the runtime answers with 409.
#[test]
fn an_execution_that_ends_without_an_answer_releases_its_waiters() {
    let policy = policy();
    let (mut key, waiting) = claimed_with_a_waiter(&policy);
    let mut wait = waiting.clone();
    let rest = Decided {
        step: Step::keep(vec![Action::Forward { attempt: A }]),
        decision: Some(Decision::Executed),
        fails_alarm: None,
        what: InProgress::Arrival { new_attempt: A, body_bytes: 10, observed_until: None },
    };
    let AlarmUnset::Instead(withdrawal) = key.handle_alarm_unset(rest) else { panic!("withdrawn") };
    assert_eq!(poll_once(&mut wait), Poll::Ready(None));
    assert!(key.waiters_of(A).is_none());
    drop(key.handle_written(withdrawal));

    let mut key = KeyState::<u32>::default();
    key.remember(None);
    let pending = key.handle_arrival(arrival(&policy, A, true), T0);
    remember_change(&mut key, &pending);
    key.handle_written(pending);
    let waiting = key.waiters_of(A).expect("an observed claim keeps its waiters for its outcome");
    let mut wait = waiting.clone();
    assert_eq!(key.expire_observed(T0 + policy.timing.lease_ms()), Some(A));
    assert_eq!(poll_once(&mut wait), Poll::Ready(None));
}

/// A retry on a route with a lookup, of a key whose outcome is unknown: its arrival's
/// first step is the lookup (`Lookup`, then `Arrive`, nothing written), and the arrival is
/// decided after the verdict, on the record it left: "executed" replays the answer the
/// lookup brought, "not executed" (believed only once the origin had its timeout again)
/// releases the key, so the retry is the first execution, and anything else leaves the
/// outcome unknown (502), never forwarded again. A retry of another payload, or of a key
/// with nothing to look up, is decided at once.
/// `A`'s outcome, unknown since `since` (its connection reset after the send), on a route
/// with a lookup that has not been asked yet.
fn unknown_with_a_lookup(since: Millis, policy: &KeyTerms) -> KeyRecord {
    KeyRecord::Unknown(Unknown {
        attempt: A,
        fingerprint: FP,
        origin_attempts: 1,
        since,
        expires_at: T0 + TTL,
        reason: UnknownReason::ResetAfterSend,
        reconcile: Some(Reconciling {
            sealed_lookup: vec![7; 40],
            bound_at: T0,
            not_found: 404,
            asked: 0,
            next_at: 0,
            policy: Box::new(policy.clone()),
            spelling_known: true,
        }),
    })
}

#[test]
fn a_retry_of_an_unknown_outcome_looks_it_up_first_then_is_decided_on_the_verdict() {
    use crate::core::key_rules::reconcile::RECONCILED_HEADER;
    let policy = policy();
    let since = T0 + 100;
    let unknown_key = || {
        let mut key = KeyState::new();
        key.remember(Some(unknown_with_a_lookup(since, &policy)));
        key
    };
    let executed = || {
        let headers = vec![(RECONCILED_HEADER.to_owned(), "true".to_owned())];
        Verdict::Executed(StoredResponse { status: 201, headers, body: b"{}".to_vec() })
    };
    let trusted = since + policy.timing.origin_timeout_ms;
    // (verdict, when it comes) → what the retry is then decided.
    type Then = fn(&[Action]) -> bool;
    let cases: [(Verdict, Millis, Then); 4] = [
        (executed(), since + 1, |actions| matches!(actions, [Action::Replay(done)] if done.status == 201)),
        (Verdict::NotExecuted, trusted, |actions| actions.contains(&Action::Forward { attempt: B })),
        (
            Verdict::NotExecuted,
            trusted - 1,
            |actions| matches!(actions, [Action::Reject(problem)] if problem.status() == 502),
        ),
        (
            Verdict::Unsure,
            trusted,
            |actions| matches!(actions, [Action::Reject(problem)] if problem.status() == 502),
        ),
    ];
    for (verdict, now, then) in cases {
        let label = format!("{verdict:?} at {now}");
        let mut key = unknown_key();
        let first = key.handle_retry(FP, now).expect("a lookup first");
        assert_eq!((first.decision(), &first.step().change), (None, &KeyRecordChange::Keep), "{label}");
        let mut decided = written(&mut key, first);
        assert_eq!(decided.poll_action(), Some(Action::Lookup { attempt: A }), "{label}");
        let pending = key.handle_reconciled(A, verdict, &policy, 1.0, now);
        decided.follow(written(&mut key, pending));
        // The verdict's own actions (an alarm for the next lookup) come before the arrival.
        while let Some(action) = decided.poll_action() {
            match action {
                Action::SetAlarm(_) => {}
                Action::Arrive => break,
                other => panic!("{label}: {other:?} before the arrival"),
            }
        }
        assert_eq!(decided.poll_action(), None, "{label}");
        let pending = key.handle_arrival(arrival(&policy, B, false), now);
        let arrived = written(&mut key, pending);
        assert!(then(&arrived.step.actions), "{label}: {arrived:?}");
        let forwards = arrived.forwarded().is_some();
        assert_eq!(forwards, arrived.decision == Some(Decision::Executed), "{label}");
        assert!(key.handle_retry(FP, now).is_none() || !forwards, "{label}: asked again at once");
    }

    // The lookup is sent with the claim's time, the record's, whoever runs it; where the
    // record keeps no lookup any more, nothing is asked and the lookup is over.
    use crate::core::key_rules::reconcile::CLAIMED_AT_HEADER;
    let mut key = unknown_key();
    let LookupTurn::Run(_over) = key.handle_lookup_turn(A, LookupAsker::Alarm, &policy.limits) else {
        panic!()
    };
    let scope =
        vec![("x-account".to_owned(), "acct_1".to_owned()), (CLAIMED_AT_HEADER.to_owned(), "1".to_owned())];
    let expected =
        vec![("x-account".to_owned(), "acct_1".to_owned()), (CLAIMED_AT_HEADER.to_owned(), T0.to_string())];
    assert_eq!(key.lookup_headers(A, &scope), Some(expected));
    assert!(key.running_lookup().is_some(), "still running");
    key.remember(Some(completed_201()));
    assert_eq!(key.lookup_headers(A, &scope), None);
    assert!(key.running_lookup().is_none(), "over: nothing asked");

    // Another payload is refused as ever, and a replay or a key with no lookup asks nothing.
    let mut key = unknown_key();
    assert!(key.handle_retry(Digest256([2; 32]), since + 1).is_none());
    assert!(key.handle_retry(FP, T0 + TTL).is_none(), "expired");
    let mut done = KeyState::new();
    done.remember(Some(completed_201()));
    assert!(done.handle_retry(FP, T0 + 1).is_none());
    let mut plain = unknown_key();
    if let Some(KeyRecord::Unknown(unknown)) = plain.record().cloned() {
        plain.remember(Some(KeyRecord::Unknown(Unknown { reconcile: None, ..unknown })));
    }
    assert!(plain.handle_retry(FP, since + 1).is_none(), "a record kept no lookup");
}

/// An arrival's first step: where it reconciles and its outcome is to be looked up, the
/// lookup, then the arrival; otherwise (no lookup on the route, an unreadable record,
/// another payload, a key with nothing to look up) the arrival alone. Nothing is written.
#[test]
fn an_arrivals_first_step_looks_up_only_where_it_reconciles() {
    let since = T0 + 100;
    let mut key = KeyState::new();
    key.remember(Some(unknown_with_a_lookup(since, &policy())));
    let actions = |pending: Pending| {
        assert_eq!((pending.decision(), &pending.step().change), (None, &KeyRecordChange::Keep));
        pending.step().actions.clone()
    };
    let first = actions(key.handle_call(true, FP, since + 1));
    assert_eq!(first, vec![Action::Lookup { attempt: A }, Action::Arrive]);
    assert_eq!(actions(key.handle_call(false, FP, since + 1)), vec![Action::Arrive]);
    assert_eq!(actions(key.handle_call(true, Digest256([2; 32]), since + 1)), vec![Action::Arrive]);
    assert_eq!(actions(KeyState::<()>::default().handle_call(true, FP, since + 1)), vec![Action::Arrive]);
}

/// Two steps settle before the runtime hands over the first one's answer (an older
/// execution, left running by a forced purge, finishes inside the first step's await):
/// the first execution's waiters still get its answer, not the 409 of waiters released
/// without one.
#[test]
fn a_second_settle_before_the_first_is_carried_out_keeps_the_first_ones_waiters() {
    let policy = policy();
    let (mut key, waiting) = claimed_with_a_waiter(&policy);
    let mut wait = waiting.clone();
    let pending =
        key.handle_origin_finished(A, OriginResult::Responded(201), Some(answer(201)), &policy, T0 + 10);
    remember_change(&mut key, &pending);
    let mut first = key.handle_written(pending);
    let other = AttemptId(9);
    let pending =
        key.handle_origin_finished(other, OriginResult::Responded(200), Some(answer(200)), &policy, T0 + 11);
    remember_change(&mut key, &pending);
    let mut second = key.handle_written(pending);
    assert!(matches!(second.poll_action(), Some(Action::Settle { attempt, .. }) if attempt == other));
    key.handle_settled(other, 200, true);
    assert_eq!(poll_once(&mut wait), Poll::Pending, "the first execution's waiters still wait");
    assert!(matches!(first.poll_action(), Some(Action::Settle { attempt: A, .. })));
    key.handle_settled(A, 201, true);
    assert_eq!(poll_once(&mut wait), Poll::Ready(Some(201)));
}
