//! Tests of the fault mapping ([`consequence`]): one per source and stage, and the key's
//! fate held to what the key's driver does with the same failure.

use std::sync::Arc;

use super::*;
use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::key_record::{AttemptId, KeyRecord, StoredResponse};
use crate::core::key_rules::key_state::{AlarmUnset, Arrival, KeyState};
use crate::core::key_rules::machine::{self, Action, Event, KeyRecordChange};
use crate::core::vocabulary::key_terms::KeyTerms;
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::key_terms::{Timing, WaiterLimits};
use crate::core::vocabulary::outcome_table::OutcomeTable;

const T0: u64 = 1_700_000_000_000;
const A: AttemptId = AttemptId(7);

const OPERATIONS: [StorageOperation; 6] = [
    StorageOperation::Read,
    StorageOperation::Open,
    StorageOperation::Seal,
    StorageOperation::Write,
    StorageOperation::Delete,
    StorageOperation::Alarm,
];

fn sources() -> Vec<FaultSource> {
    let mut sources: Vec<FaultSource> =
        OPERATIONS.iter().map(|&operation| FaultSource::Storage { operation }).collect();
    sources.push(FaultSource::Platform { what: PlatformCall::Request });
    sources.push(FaultSource::Platform { what: PlatformCall::Answer });
    sources.push(FaultSource::NoAnswer);
    sources
}

fn policy() -> KeyTerms {
    KeyTerms {
        timing: Timing { ttl_ms: 60_000, duplicate_wait_ms: 5_000, origin_timeout_ms: 2_000 },
        limits: WaiterLimits::default(),
        outcome: OutcomeTable::default(),
        max_stored_response_bytes: 1_000,
        max_origin_attempts: None,
        mode: Mode::Enforce,
        origin_service: None,
        key_header: None,
    }
}

fn assert_503_retry_now(consequence: &Consequence) {
    let problem = consequence.problem().expect("a problem is answered");
    assert_eq!(problem.kind, ProblemKind::StorageUnavailable);
    assert_eq!(problem.status(), 503);
    assert_eq!(problem.retry_after, Some(1), "Retry-After: the same key may be retried at once");
}

#[test]
fn a_fault_before_the_claim_is_503_and_leaves_the_key_as_it_was() {
    for source in sources() {
        let fault = Fault { source, stage: Stage::BeforeClaim };
        let consequence = consequence(&fault);
        assert_503_retry_now(&consequence);
        assert_eq!(consequence.key, KeyFate::Untouched, "{fault:?}");
        assert_eq!(consequence.problem().unwrap().detail, fault.problem().detail);
        assert!(fault.problem().detail.contains("not forwarded"), "{fault:?}");
    }
}

#[test]
fn a_storage_fault_before_the_claim_is_written_forwards_nothing() {
    // The key's driver, for a claim whose write failed: nothing stored, nothing forwarded,
    // 503, as the mapping says of a write fault before the claim.
    let policy = policy();
    let mut key = KeyState::new();
    key.remember(None);
    let arrival = Arrival {
        lookup: None,
        fingerprint: Digest256([1; 32]),
        new_attempt: A,
        policy: &policy,
        body_bytes: 10,
        accept: None,
        observing: false,
    };
    let pending = key.handle_arrival(arrival, T0);
    let failed = key.handle_write_failed(pending, T0);
    assert_eq!(failed.step.change, KeyRecordChange::Keep, "nothing stored: the key is untouched");
    assert!(!failed.step.actions.iter().any(|a| matches!(a, Action::Forward { .. })), "{failed:?}");
    let consequence = consequence(&Fault::storage(StorageOperation::Write, Stage::BeforeClaim));
    assert_eq!(consequence.key, KeyFate::Untouched);
    match &failed.step.actions[..] {
        [Action::Reject(problem)] => {
            assert_eq!(Some(problem.kind), consequence.problem().map(|p| p.kind));
            assert_eq!(problem.retry_after, consequence.problem().and_then(|p| p.retry_after));
        }
        other => panic!("one rejection: {other:?}"),
    }
}

#[test]
fn a_fault_after_the_claim_and_before_the_send_releases_the_key() {
    for source in sources() {
        let consequence = consequence(&Fault { source, stage: Stage::Claimed });
        assert_503_retry_now(&consequence);
        assert_eq!(consequence.key, KeyFate::Released, "{source:?}");
    }
    // The key's driver, for a claim whose alarm could not be set: withdrawn (deleted),
    // with the mapping's problem.
    let policy = policy();
    let mut key = KeyState::new();
    key.remember(None);
    let arrival = Arrival {
        lookup: None,
        fingerprint: Digest256([1; 32]),
        new_attempt: A,
        policy: &policy,
        body_bytes: 10,
        accept: None,
        observing: false,
    };
    let pending = key.handle_arrival(arrival, T0);
    let record = match &pending.step().change {
        KeyRecordChange::Put(record) => record.clone(),
        other => panic!("a claim: {other:?}"),
    };
    key.remember(Some(record));
    let mut decided = key.handle_written(pending);
    assert!(matches!(decided.poll_action(), Some(Action::SetAlarm(_))));
    let AlarmUnset::Instead(withdrawn) = key.handle_alarm_unset(decided) else { panic!("withdrawn") };
    assert_eq!(withdrawn.step().change, KeyRecordChange::Delete, "released");
    let fault = Fault::storage(StorageOperation::Alarm, Stage::Claimed);
    assert_eq!(withdrawn.step().actions, vec![Action::Reject(fault.problem())]);
}

#[test]
fn a_storage_fault_after_the_forward_never_releases_the_key() {
    for operation in OPERATIONS {
        let consequence = consequence(&Fault::storage(operation, Stage::Forwarded));
        assert_eq!(consequence.answer, FaultAnswer::Origin, "the origin's answer is passed on");
        assert_eq!(consequence.key, KeyFate::HeldUnknown, "{operation:?}");
    }
    // The key's driver, for an outcome whose write failed: the claim stays stored (kept,
    // not deleted), and the callers get what the origin said.
    let claim = {
        let policy = policy();
        let mut key = KeyState::new();
        key.remember(None);
        let arrival = Arrival {
            lookup: None,
            fingerprint: Digest256([1; 32]),
            new_attempt: A,
            policy: &policy,
            body_bytes: 10,
            accept: None,
            observing: false,
        };
        match &key.handle_arrival(arrival, T0).step().change {
            KeyRecordChange::Put(record @ KeyRecord::InFlight(_)) => record.clone(),
            other => panic!("a claim: {other:?}"),
        }
    };
    let answer = Arc::new(StoredResponse { status: 201, headers: vec![], body: b"{}".to_vec() });
    let event = Event::OutcomeWriteFailed { attempt: A, answer: answer.clone(), origin_answered: true };
    let step = machine::step(Some(&claim), event, T0 + 10);
    assert_eq!(step.change, KeyRecordChange::Keep, "the claim stays: held, never released");
    assert_eq!(step.actions, vec![Action::Settle { attempt: A, answer, origin_answered: true }]);
}

#[test]
fn a_platform_fault_after_the_forward_is_503_and_holds_the_key() {
    for source in [
        FaultSource::Platform { what: PlatformCall::Request },
        FaultSource::Platform { what: PlatformCall::Answer },
        FaultSource::NoAnswer,
    ] {
        let consequence = consequence(&Fault { source, stage: Stage::Forwarded });
        assert_503_retry_now(&consequence);
        assert_eq!(consequence.key, KeyFate::HeldUnknown, "{source:?}");
    }
}

#[test]
fn a_fault_in_giving_the_answer_is_503_and_leaves_the_step_as_written() {
    for source in sources() {
        let consequence = consequence(&Fault { source, stage: Stage::AfterStep });
        assert_503_retry_now(&consequence);
        assert_eq!(consequence.key, KeyFate::AsStepped, "{source:?}");
    }
}

#[test]
fn a_failed_object_call_fails_open_only_where_the_object_never_had_the_request() {
    use crate::core::edge_rules::routes::{
        after_object_failure, AfterObjectFailure, ObjectCallFailure, Unavailable,
    };
    let never_had_it =
        Fault { source: FaultSource::ObjectCall { route_fails_open: true }, stage: Stage::BeforeClaim };
    assert_eq!(consequence(&never_had_it).answer, FaultAnswer::FailOpen);
    assert_eq!(consequence(&never_had_it).key, KeyFate::Untouched);
    for route_fails_open in [false, true] {
        let source = FaultSource::ObjectCall { route_fails_open };
        for stage in [Stage::Claimed, Stage::Forwarded, Stage::AfterStep] {
            // The object may have claimed and sent it: refused, whatever the route chose.
            let consequence = consequence(&Fault { source, stage });
            assert_503_retry_now(&consequence);
            assert!(consequence.problem().unwrap().detail.contains("could not be reached"));
            assert_ne!(consequence.key, KeyFate::Released, "{stage:?}");
        }
    }
    let refused = consequence(&Fault {
        source: FaultSource::ObjectCall { route_fails_open: false },
        stage: Stage::BeforeClaim,
    });
    assert_503_retry_now(&refused);
    assert_eq!(refused.key, KeyFate::Untouched);
    // The Worker's rule is this mapping.
    for failure in [
        ObjectCallFailure::BeforeSend,
        ObjectCallFailure::Rejected { overloaded: true, remote: false },
        ObjectCallFailure::UnmarkedAnswer,
    ] {
        let open = after_object_failure(failure, Unavailable::FailOpen);
        assert_eq!(
            open == AfterObjectFailure::FailOpen,
            failure == ObjectCallFailure::BeforeSend,
            "{failure:?}"
        );
        let closed = after_object_failure(failure, Unavailable::FailClosed);
        assert_eq!(closed, AfterObjectFailure::Refuse(refused.problem().unwrap().clone()), "{failure:?}");
    }
}

#[test]
fn every_fault_is_logged_as_an_error_naming_its_source() {
    let mut labels = Vec::new();
    for source in sources() {
        for stage in [Stage::BeforeClaim, Stage::Claimed, Stage::Forwarded, Stage::AfterStep] {
            let consequence = consequence(&Fault { source, stage });
            assert_eq!(consequence.level, FaultLevel::Error);
            assert_eq!(consequence.field, source.label());
        }
        labels.push(source.label());
    }
    labels.push(FaultSource::ObjectCall { route_fails_open: false }.label());
    let count = labels.len();
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(labels.len(), count, "one label per source");
    assert!(labels.iter().all(|label| label.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')));
}

#[test]
fn the_log_line_keeps_what_failed_and_names_the_source() {
    let source = FaultSource::Storage { operation: StorageOperation::Write };
    let line = source.log_line("object 0a1b", "writing the claim", "SQL error: SQLITE_FULL");
    assert_eq!(line, "object 0a1b: writing the claim failed (fault: storage-write): SQL error: SQLITE_FULL");
}

#[test]
fn a_records_storage_errors_say_what_failed_of_it() {
    let open = [StorageError::Seal("opening".into()), StorageError::Chunks("chunk 2 is missing".into())];
    for error in open {
        assert_eq!(error.operation(), StorageOperation::Open, "{error}");
        assert_eq!(FaultSource::Storage { operation: error.operation() }.label(), "storage-open");
    }
    let read = [
        StorageError::Sql("Error: disk".into()),
        StorageError::Corrupt("version 9".into()),
        StorageError::Fenced,
    ];
    for error in read {
        assert_eq!(error.operation(), StorageOperation::Read, "{error}");
    }
    assert_eq!(
        StorageError::Corrupt("not a record".into()).to_string(),
        "stored record is unreadable: not a record"
    );
    assert_eq!(StorageError::Chunks("x".into()).to_string(), "stored answer chunks: x");
    // Whatever fails of a read, nothing was claimed: 503, the key untouched.
    let fault = Fault::storage(StorageError::Fenced.operation(), Stage::BeforeClaim);
    assert_eq!(consequence(&fault).key, KeyFate::Untouched);
}

#[test]
fn answers_that_cannot_be_opened_as_sealing_requires_are_open_faults() {
    for error in [StorageError::stored_in_clear(), StorageError::no_scope_salt()] {
        assert_eq!(error.operation(), StorageOperation::Open, "{error}");
    }
    let in_clear = StorageError::stored_in_clear().to_string();
    assert!(in_clear.contains("STORAGE_ENCRYPTION_KEYS") && in_clear.contains("STORAGE_ALLOW_UNSEALED"));
}

#[test]
fn a_failed_transaction_reports_its_writes_own_failure_else_what_the_runtime_threw() {
    assert_eq!(transaction_outcome(None, None), Ok(()));
    let own = StorageError::Sql("CHUNK_WRITE_FAULT_INJECTION: fails on purpose".to_owned());
    let thrown = Some("Error: CHUNK_WRITE_FAULT_INJECTION: fails on purpose".to_owned());
    assert_eq!(transaction_outcome(thrown, Some(own.clone())), Err(own), "not the thrown copy of it");
    let commit = Some("Error: SQLITE_FULL".to_owned());
    assert_eq!(transaction_outcome(commit, None), Err(StorageError::Sql("Error: SQLITE_FULL".to_owned())));
}
