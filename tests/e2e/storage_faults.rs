//! Storage faults inside the key's Durable Object, in real workerd: the object's SQLite
//! file is changed from the outside while the instance is stopped, and the worker meets the
//! fault through its ordinary storage calls after the restart (`support::storage::Fault`).
//!
//! - An unreadable record (bytes that are not a record, a value of the wrong type) and an
//!   unreadable database file: 503 `storage-unavailable` with `Retry-After`, and nothing
//!   forwarded, for every retry; also on a route that fails open, since the object did
//!   answer.
//! - A failed claim write (a `CHECK` constraint on the key-value table that no record
//!   meets, so the `put` fails as a full disk would): 503, nothing forwarded.
//! - A failed outcome write (a `CHECK` constraint that refuses a completed record): the
//!   caller still gets the origin's answer, and the key stays held, never forwarded again:
//!   409 `in-progress` until the claim's lease ends, `outcome-unknown` after it.
//! - The record's legacy layout (a row of the table earlier releases wrote): read when the
//!   key-value store holds none; a row that is not a record is 503, never a forward.
//!
//! These are real write failures of workerd's SQLite storage. A failed release (a failed
//! `deleteAll()`) cannot be made from the database file, so its test injects it with the
//! test-only `DELETE_FAULT_INJECTION` (docs/reliability.md says so).

use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert::{assert_executed, assert_problem, assert_replay_of};
use crate::support::http::Request;
use crate::support::logs;
use crate::support::origin::Origin;
use crate::support::requests::{new_key, new_path, payment, unique};
use crate::support::storage::{self, Fault};
use crate::support::worker::{Readiness, Worker, WorkerConfig};

/// Short, so that the held claim's lease (timeout + 10 s) ends within the test.
const ORIGIN_TIMEOUT_SECONDS: u64 = 2;

/// One key prepared for a fault: its request, its object, and its executions so far.
struct Case {
    fault: Fault,
    request: Request,
    key: String,
    object: String,
    executions: usize,
}

/// Sends `request` (alone on the instance) and returns the id of the object file that
/// appeared for it.
fn object_created_by(w: &Worker, request: &Request, status: u16) -> String {
    let before = storage::snapshot(w.persist_dir());
    let r = w.send(&request.clone().header("x-test-status", status.to_string()));
    assert_eq!(r.status, status, "preparing a fault case: {r:?}");
    let after = storage::snapshot(w.persist_dir());
    let new: Vec<&storage::ObjectFile> =
        after.objects.iter().filter(|o| !before.objects.iter().any(|b| b.id == o.id)).collect();
    assert_eq!(new.len(), 1, "one new object file for one new key: {}", after.describe());
    new[0].id.clone()
}

#[test]
fn storage_faults_inside_the_object_fail_closed_and_forward_nothing() {
    let o = Origin::start();
    let vars = [
        ("ORIGIN_URL", o.url()),
        ("ORIGIN_TIMEOUT_SECONDS", ORIGIN_TIMEOUT_SECONDS.to_string()),
        ("DUPLICATE_WAIT_SECONDS", "5".to_string()),
        ("IDEMPOTENCY_TTL_SECONDS", "600".to_string()),
        (
            "IDEMPOTENCY_ROUTES",
            r#"[{"pattern": "/open/*", "on_object_unavailable": "fail-open"}]"#.to_string(),
        ),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    let w = Worker::start(WorkerConfig {
        name: "storage-faults".into(),
        vars,
        readiness: Readiness::OriginAnswers,
    })
    .unwrap_or_else(|e| panic!("{e}"));

    // A stored answer (201) for the read faults; a released key (503: an empty database
    // file) for the write faults, which need no record.
    // The first case sits on a fail-open route: an object that answers (here, that it
    // cannot read its record) is not an unavailable object, so nothing is forwarded.
    let mut cases: Vec<Case> = [
        (Fault::GarbageRecord, 201, format!("/open/{}", unique("p"))),
        (Fault::GarbageRecord, 201, new_path()),
        (Fault::RecordOfTheWrongType, 201, new_path()),
        (Fault::UnreadableFile, 201, new_path()),
        (Fault::EveryWriteFails, 503, new_path()),
        (Fault::WritesAfterTheClaimFail, 503, new_path()),
    ]
    .into_iter()
    .map(|(fault, status, path)| {
        let key = new_key();
        let request = payment(&path, &key);
        let object = object_created_by(&w, &request, status);
        Case { fault, request, executions: o.executions(&key), key, object }
    })
    .collect();
    // A key that no fault touches: the restart keeps it.
    let healthy = payment(&new_path(), &new_key());
    let healthy_answer = w.send(&healthy);
    assert_executed(&healthy_answer, 201);

    w.crash();
    for case in &cases {
        storage::inject(w.persist_dir(), &case.object, case.fault);
    }
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart after the faults: {e}"));
    assert_replay_of(&w.send(&healthy), &healthy_answer);

    for case in &mut cases {
        let label = format!("{:?}", case.fault);
        match case.fault {
            Fault::GarbageRecord
            | Fault::RecordOfTheWrongType
            | Fault::UnreadableFile
            | Fault::EveryWriteFails
            | Fault::GarbageInTheLegacyTable
            | Fault::TextInTheLegacyTable => {
                for attempt in 0..3 {
                    let r = w.send(&case.request);
                    assert_problem(&r, 503, "storage-unavailable");
                    assert_eq!(
                        o.executions(&case.key),
                        case.executions,
                        "{label}, attempt {attempt}: forwarded"
                    );
                }
            }
            Fault::RecordMovedToTheLegacyTable => {
                unreachable!("{label}: a layout, not a fault; its test is the next one")
            }
            Fault::WritesAfterTheClaimFail => {
                // The claim is written, the origin executes, the outcome write fails: the
                // caller gets the origin's answer all the same.
                let first = w.send(&case.request);
                assert_executed(&first, 201);
                case.executions += 1;
                assert_eq!(o.executions(&case.key), case.executions, "{label}");
                // The key stays held: 409 while the claim's lease runs, then unknown.
                let deadline = Instant::now() + Duration::from_secs(ORIGIN_TIMEOUT_SECONDS + 10 + 60);
                let mut saw_in_progress = false;
                loop {
                    let r = w.send(&case.request);
                    if r.status == 409 {
                        assert_problem(&r, 409, "in-progress");
                        saw_in_progress = true;
                    } else {
                        assert_problem(&r, 502, "outcome-unknown");
                        break;
                    }
                    assert!(Instant::now() < deadline, "{label}: still 409 long after the lease: {r:?}");
                    thread::sleep(Duration::from_millis(500));
                }
                assert!(saw_in_progress, "{label}: a retry inside the lease gets 409 in-progress");
                assert_eq!(o.executions(&case.key), case.executions, "{label}: forwarded again");
            }
        }
    }

    logs::sentinel(&w, &o);
    let log = w.log_contents();
    // The object answered for each unreadable record itself (its decision line names it).
    for case in cases.iter().filter(|c| matches!(c.fault, Fault::GarbageRecord | Fault::RecordOfTheWrongType))
    {
        let lines = logs::lines_of(&w, &case.object);
        assert!(
            lines
                .iter()
                .any(|line| line["decision"] == "rejected" && line["problem"] == "storage-unavailable"),
            "{:?}: the object's own storage-unavailable line: {lines:?}",
            case.fault
        );
    }
    for (what, line) in [
        ("a failed claim write", "writing the claim failed"),
        ("a failed outcome write", "writing the outcome failed"),
        ("an unreadable database file", "SQLITE_NOTADB"),
    ] {
        assert!(log.contains(line), "the log names {what} ({line:?}); see {}", w.dir().display());
    }
    logs::scan_for_leaks(&w, &[]).unwrap_or_else(|e| panic!("{e}"));
}

/// A failed release write: the origin answers 503 (it certainly did not execute), so the
/// object deletes the key's record to release it, and that deletion fails. Workerd offers no
/// outside handle to fail `deleteAll()` (a trigger or a broken file does not stop it), so
/// the failure is injected with the test-only `DELETE_FAULT_INJECTION` (the first deletion
/// of each object instance fails before touching anything). The caller gets the origin's
/// 503 all the same; the claim is still in storage, so the key stays held (409 while the
/// claim's lease runs) and is never forwarded again by the instance that failed.
#[test]
fn a_failed_release_write_holds_the_key_and_forwards_nothing_again() {
    let o = Origin::start();
    let vars = [
        ("ORIGIN_URL", o.url()),
        ("ORIGIN_TIMEOUT_SECONDS", "20".to_string()),
        ("DUPLICATE_WAIT_SECONDS", "2".to_string()),
        ("DELETE_FAULT_INJECTION", "1".to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    let w = Worker::start(WorkerConfig {
        name: "release-fails".into(),
        vars,
        readiness: Readiness::OriginAnswers,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let key = new_key();
    let request = payment(&new_path(), &key);
    let busy = w.send(&request.clone().header("x-test-status", "503").header("x-test-retry-after", "1"));
    assert_eq!(busy.status, 503, "the origin's own 503 reaches the caller: {busy:?}");
    assert!(busy.has_header("x-origin-execution"), "the origin's answer, not the worker's: {busy:?}");
    assert_eq!(o.executions(&key), 1);
    logs::wait_for_text(&w, "DELETE_FAULT_INJECTION: deletion 1 fails on purpose");

    // Released in the origin's eyes, but the release was never written: held, not forwarded.
    for attempt in 0..3 {
        let retry = w.send(&request);
        assert_problem(&retry, 409, "in-progress");
        assert_eq!(o.executions(&key), 1, "attempt {attempt}: forwarded again after a failed release");
    }
    logs::scan_for_leaks(&w, &[]).unwrap_or_else(|e| panic!("{e}"));
}

/// The record's legacy layout (`runtime::key_storage`): releases before this layout wrote the
/// record as the one row of their own table, and this release reads that row when the
/// object's key-value store holds no record, for the keys they claimed. A record moved
/// there (bytes unchanged) replays byte for byte; a row that is not a record is 503, never
/// read as absent and never a forward; the read of a row is logged for the operator; a purge
/// deletes the moved record, and the key's next execution is written as the key-value
/// value, with no row left behind it.
#[test]
fn a_record_in_the_previous_layout_stays_readable_and_is_never_taken_for_absent() {
    const TOKEN: &str = "e2e-record-layouts-admin-token-0123456789abcdef";
    let o = Origin::start();
    let vars = [
        ("ORIGIN_URL", o.url()),
        ("IDEMPOTENCY_TTL_SECONDS", "600".to_string()),
        ("ADMIN_TOKEN", TOKEN.to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    let w = Worker::start(WorkerConfig {
        name: "record-layouts".into(),
        vars,
        readiness: Readiness::OriginAnswers,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let cases: Vec<(Fault, Request, String, String, usize)> =
        [Fault::RecordMovedToTheLegacyTable, Fault::GarbageInTheLegacyTable, Fault::TextInTheLegacyTable]
            .into_iter()
            .map(|fault| {
                let key = new_key();
                let request = payment(&new_path(), &key);
                let object = object_created_by(&w, &request, 201);
                assert_eq!(o.executions(&key), 1);
                (fault, request, key, object, 1)
            })
            .collect();
    // The answer the moved record must replay.
    let moved = &cases[0];
    let original = w.send(&moved.1);
    assert_eq!(original.status, 201, "{original:?}");
    assert_eq!(original.header("idempotent-replayed"), Some("true"), "{original:?}");

    w.crash();
    assert_layout_rows(&w, &moved.3, (1, 0), "this release writes the key-value value");
    for (fault, _, _, object, _) in &cases {
        storage::inject(w.persist_dir(), object, *fault);
    }
    assert_layout_rows(&w, &moved.3, (0, 1), "the record moved to the legacy table");
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart after the moves: {e}"));

    let replay = w.send(&moved.1);
    assert_replay_of(&replay, &original);
    // The operator sees that a key stored by an older release was read.
    let legacy_read = format!("{{\"event\":\"legacy-record-read\",\"object\":\"{}\"}}", moved.3);
    logs::wait_for_text(&w, &legacy_read);
    for (fault, request, key, _, executions) in &cases[1..] {
        for attempt in 0..3 {
            assert_problem(&w.send(request), 503, "storage-unavailable");
            assert_eq!(o.executions(key), *executions, "{fault:?}, attempt {attempt}: forwarded");
        }
    }
    assert_eq!(o.executions(&moved.2), 1, "the moved record was replayed, not forwarded");

    // Purged, then executed again: the new record is the key-value value, and nothing of
    // the moved one is left behind it.
    let purge = Request::new("DELETE", &format!("/__idempotency/records/{}?force=true", moved.3))
        .header("Authorization", format!("Bearer {TOKEN}"));
    let purged = w.send(&purge);
    assert_eq!(purged.status, 200, "purging the moved record: {purged:?}");
    assert_executed(&w.send(&moved.1), 201);
    assert_eq!(o.executions(&moved.2), 2, "a purged key executes again");
    let again = w.send(&moved.1);
    assert_eq!(again.header("idempotent-replayed"), Some("true"), "{again:?}");
    assert_eq!(o.executions(&moved.2), 2);
    w.crash();
    assert_layout_rows(&w, &moved.3, (1, 0), "after the purge and the new execution, the value and no row");
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    let after_restart = w.send(&moved.1);
    assert_eq!(after_restart.header("idempotent-replayed"), Some("true"), "{after_restart:?}");
    assert_eq!(o.executions(&moved.2), 2, "read back from the key-value store after a restart");
    let log = w.log_contents();
    assert_eq!(log.matches(&legacy_read).count(), 1, "only the read of the row says so");
    logs::sentinel(&w, &o);
    logs::scan_for_leaks(&w, &[]).unwrap_or_else(|e| panic!("{e}"));
}

/// Asserts how many values of the key-value store and rows of the legacy record table
/// `object`'s database holds (the instance stopped).
fn assert_layout_rows(w: &Worker, object: &str, expected: (u64, u64), what: &str) {
    let stored = storage::snapshot(w.persist_dir());
    let file = stored.objects.iter().find(|f| f.id == object).expect("the key's object file");
    assert_eq!(
        (file.rows_of("_cf_KV"), file.rows_of("idempotency_record")),
        expected,
        "{what}: {}",
        stored.describe()
    );
}
