//! End-to-end tests of large answers: an answer over one SQLite row (about
//! 1.9 MB) is stored in chunk rows with its record in one transaction, and replayed by
//! streaming them (`core::formats::chunks`, `runtime::chunks`). In real workerd, against the test
//! origin's `x-test-answer-bytes` answers (pseudo-random bytes, different per execution, so
//! a moved, repeated or missing chunk shows). Bodies are compared by SHA-256 and length.
//! - 5 MiB and 16 MiB (the default `MAX_STORED_RESPONSE_BYTES`) replay byte for byte, in
//!   the same object life and after a restart (read back from storage);
//! - an answer just under one row is kept whole in its record (one key-value value), and
//!   replays byte for byte after a restart;
//! - duplicates that wait on a large answer all get it, from one execution;
//! - over a smaller configured limit, today's behaviour: the first caller gets the whole
//!   answer, the key is held outcome-unknown (502), nothing is forwarded again;
//! - sealed (`STORAGE_ENCRYPTION_KEYS`): a 5 MiB answer replays byte for byte, and no
//!   plaintext chunk is in the SQLite files;
//! - a missing chunk row, or two sealed chunks swapped, is 503 storage-unavailable, never a
//!   short or wrong answer or a second forward;
//! - purged and expired large answers leave no chunk row behind;
//! - observe mode records a large answer in chunks, and it replays once the route enforces.
//!
//! Generous timeouts only: no figure here depends on speed.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::basics::{fresh_object, wait_for_waiters};
use crate::support::assert::{assert_problem, assert_replay_of};
use crate::support::http::{Request, Response};
use crate::support::origin::{answer_bytes, Origin};
use crate::support::requests::{new_key, new_path, payment};
use crate::support::storage::{files_contain, python_on_files};
use crate::support::worker::{shared, Readiness, Worker, WorkerConfig};

const MIB: usize = 1024 * 1024;
const TOKEN: &str = "e2e-large-answers-admin-token-5c1e-0123456789abcdef";
/// A test key ring (32 bytes 0..31 in standard base64), never a real key.
const RING: &str = r#"[{"id":"k1","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]"#;
/// Long enough for 16 MiB through workerd on a busy 2-core machine.
const SLOW: Duration = Duration::from_secs(240);

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn start(name: &str, extra: &[(&str, &str)]) -> Result<Worker, String> {
    crate::support::worker::require_build();
    let mut vars = vec![
        ("ORIGIN_URL".to_owned(), origin().url()),
        ("IDEMPOTENCY_TTL_SECONDS".to_owned(), "600".to_owned()),
        ("ORIGIN_TIMEOUT_SECONDS".to_owned(), "120".to_owned()),
        ("DUPLICATE_WAIT_SECONDS".to_owned(), "120".to_owned()),
        ("ADMIN_TOKEN".to_owned(), TOKEN.to_owned()),
    ];
    vars.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    Worker::start(WorkerConfig { name: name.into(), vars, readiness: Readiness::OriginAnswers })
}

/// The instance with the default limits (16 MiB), shared by the tests that never crash it.
fn large_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || start("large-answers", &[]))
}

fn admin(method: &str, object: &str, query: &str) -> Request {
    Request::new(method, &format!("/__idempotency/records/{object}{query}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
}

/// A payment whose answer is `bytes` pseudo-random bytes.
fn large(path: &str, key: &str, bytes: usize) -> Request {
    payment(path, key).header("x-test-answer-bytes", bytes.to_string()).timeout(SLOW)
}

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The execution serial the origin answered with (it draws the body from it).
fn serial(r: &Response) -> u64 {
    r.header("x-origin-execution")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no serial: {}", r.status))
}

/// Asserts that `r` is the origin's `bytes`-byte answer of its execution, whole and exact.
fn assert_whole_answer(r: &Response, bytes: usize) {
    assert!(
        matches!(r.status, 200 | 201),
        "status {} {:?}",
        r.status,
        r.text().chars().take(300).collect::<String>()
    );
    assert_eq!(r.body.len(), bytes, "the whole body");
    assert_eq!(sha(&r.body), sha(&answer_bytes(serial(r), bytes)), "byte for byte what the origin sent");
}

/// Asserts that `replay` replays `first` byte for byte (compared by digest first, so that a
/// failure does not print megabytes), marked replayed.
fn assert_large_replay(replay: &Response, first: &Response) {
    assert_eq!(replay.status, first.status, "{:?}", replay.text().chars().take(300).collect::<String>());
    assert_eq!(replay.body.len(), first.body.len(), "the replay's length");
    assert_eq!(sha(&replay.body), sha(&first.body), "the replay's bytes");
    let length = replay.header("content-length").and_then(|v| v.parse::<usize>().ok());
    assert_eq!(length, Some(first.body.len()), "the replay says its length, as the original did");
    assert_replay_of(replay, first);
}

/// 32-byte samples of `body`, three from every MiB. SQLite splits a large blob across
/// 4 KiB overflow pages, so a sample that straddles a page boundary is not found even in
/// the clear; these offsets sit inside a page for a 1 MiB chunk row (about 1 KiB of it in
/// the leaf page, then 4092 bytes per overflow page), and the control counts them.
fn samples(body: &[u8]) -> Vec<&[u8]> {
    (0..body.len() / MIB)
        .flat_map(|i| [100_000, 300_000, 700_000].map(|at| &body[i * MIB + at..i * MIB + at + 32]))
        .collect()
}

#[test]
fn a_5_mib_answer_is_stored_in_chunks_and_replays_byte_exact() {
    let (w, o) = (large_worker(), origin());
    let key = new_key();
    let path = new_path();
    let object = fresh_object(w, &payment(&path, &key), admin);
    let first = w.send(&large(&path, &key, 5 * MIB));
    assert_whole_answer(&first, 5 * MIB);
    assert!(!first.is_replayed());
    for _ in 0..2 {
        let replay = w.send(&large(&path, &key, 5 * MIB));
        assert_large_replay(&replay, &first);
    }
    assert_eq!(o.executions(&key), 2, "the marker execution, then the large one once");
    let view = w.send(&admin("GET", &object, "")).json();
    assert_eq!(view["state"], "completed", "{view}");
    assert_eq!(view["body_bytes"], 5 * MIB, "{view}");
    assert_eq!(view["chunks"], 5, "1 MiB chunks: {view}");
}

#[test]
fn a_16_mib_answer_at_the_default_limit_replays_byte_exact() {
    let (w, o) = (large_worker(), origin());
    let key = new_key();
    let path = new_path();
    // The limit counts the stored headers too: the body is 16 MiB less what they take.
    let bytes = 16 * MIB - 4096;
    let first = w.send(&large(&path, &key, bytes));
    assert_whole_answer(&first, bytes);
    let replay = w.send(&large(&path, &key, bytes));
    assert_large_replay(&replay, &first);
    assert_eq!(o.executions(&key), 1, "executed once");
}

#[test]
fn duplicates_waiting_on_a_large_answer_all_get_it_from_one_execution() {
    const WAITERS: usize = 4;
    let (w, o) = (large_worker(), origin());
    let key = new_key();
    let path = new_path();
    let req = large(&path, &key, 3 * MIB);
    let object = fresh_object(w, &payment(&path, &key), admin);
    let gate = o.gate();
    let first = gate.on(req.clone()).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");
    let waiting: Vec<_> = (0..WAITERS).map(|_| req.start(w.addr).expect("send a duplicate")).collect();
    wait_for_waiters(w, &object, WAITERS as u64, admin);
    gate.release();
    let first = first.finish().expect("the first attempt's answer");
    assert_whole_answer(&first, 3 * MIB);
    for waiter in waiting {
        let answer = waiter.finish().expect("every waiter is answered");
        assert_large_replay(&answer, &first);
    }
    assert_large_replay(&w.send(&req), &first);
    assert_eq!(o.executions(&key), 2, "the marker execution and the one large execution");
}

#[test]
fn an_answer_over_a_smaller_configured_limit_keeps_todays_behaviour() {
    let w =
        start("large-limit", &[("MAX_STORED_RESPONSE_BYTES", "3145728")]).unwrap_or_else(|e| panic!("{e}"));
    let o = origin();
    // Under the configured 3 MiB: stored in chunks and replayed.
    let (key, path) = (new_key(), new_path());
    let first = w.send(&large(&path, &key, 2 * MIB + MIB / 2));
    assert_whole_answer(&first, 2 * MIB + MIB / 2);
    assert_large_replay(&w.send(&large(&path, &key, 2 * MIB + MIB / 2)), &first);
    // Over it: the first caller gets the whole answer, the key is then held unknown.
    let (key, path) = (new_key(), new_path());
    let first = w.send(&large(&path, &key, 4 * MIB));
    assert_whole_answer(&first, 4 * MIB);
    for _ in 0..2 {
        let retry = w.send(&large(&path, &key, 4 * MIB));
        assert_problem(&retry, 502, "outcome-unknown");
    }
    assert_eq!(o.executions(&key), 1, "never forwarded again");
}

#[test]
fn a_sealed_5_mib_answer_replays_byte_exact_and_no_plaintext_chunk_is_stored() {
    let w = start("large-sealed", &[("STORAGE_ENCRYPTION_KEYS", RING)]).unwrap_or_else(|e| panic!("{e}"));
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let first = w.send(&large(&path, &key, 5 * MIB));
    assert_whole_answer(&first, 5 * MIB);
    assert_large_replay(&w.send(&large(&path, &key, 5 * MIB)), &first);
    w.crash();
    for sample in samples(&first.body) {
        assert!(
            !files_contain(w.persist_dir(), sample),
            "a plaintext sample of the answer is in the SQLite files"
        );
    }
    // Read back from storage: the head and every chunk opened.
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    assert_large_replay(&w.send(&large(&path, &key, 5 * MIB)), &first);
    // Two sealed chunks swapped in place: refused (503), never replayed out of order.
    w.crash();
    assert_eq!(sqlite(w.persist_dir(), SWAP_CHUNKS_0_AND_1), "1");
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    assert_problem(&w.send(&large(&path, &key, 5 * MIB)), 503, "storage-unavailable");
    assert_eq!(o.executions(&key), 1, "executed once");
}

/// Swaps the bytes of chunk rows 0 and 1 in every object database; prints how many were.
const SWAP_CHUNKS_0_AND_1: &str = r#"
rows = dict(con.execute("SELECT seq, bytes FROM idempotency_chunk WHERE seq IN (0, 1)").fetchall())
if len(rows) == 2:
    con.execute("UPDATE idempotency_chunk SET bytes = ? WHERE seq = 0", (rows[1],))
    con.execute("UPDATE idempotency_chunk SET bytes = ? WHERE seq = 1", (rows[0],))
    count += 1
"#;

/// Counts the records (in either layout) and chunk rows left in every object database, as
/// `records chunks`.
const COUNT_ROWS: &str = r#"
totals["records"] = totals.get("records", 0) + (read_record(con) is not None)
if has_table(con, "idempotency_chunk"):
    totals["chunks"] = totals.get("chunks", 0) + con.execute("SELECT count(*) FROM idempotency_chunk").fetchone()[0]
count = "%d %d" % (totals.get("records", 0), totals.get("chunks", 0))
"#;

/// Runs `body` (Python, with `con` open on each object database in turn, and `count` and
/// `totals` kept across them) on a stopped instance's `--persist-to` directory; returns
/// what it left in `count`.
fn sqlite(dir: &Path, body: &str) -> String {
    let indented: String = body.lines().map(|line| format!("        {line}\n")).collect();
    let script = format!(
        "count = 0\ntotals = {{}}\n\
         for path in glob.glob(os.path.join(sys.argv[1], 'v3', 'do', '*', '*.sqlite')):\n\
         \x20   con = sqlite3.connect(path)\n\
         \x20   try:\n{indented}\
         \x20       con.commit()\n\
         \x20   except sqlite3.OperationalError:\n\
         \x20       pass\n\
         \x20   con.close()\n\
         print(count)\n"
    );
    python_on_files("read the object databases", &script, dir, &[])
}

/// The largest answer kept whole in its record (`core::formats::chunks::INLINE_MAX_BYTES`, under
/// the platform's 2 MB for a row), now that the record is one value of the object's
/// key-value store (`runtime::key_storage`): stored without chunk rows, and replayed byte for
/// byte after a restart, read back from that value.
#[test]
fn an_answer_just_under_one_row_is_kept_whole_in_its_record_and_replays_after_a_restart() {
    let w = start("large-inline", &[]).unwrap_or_else(|e| panic!("{e}"));
    let (key, path) = (new_key(), new_path());
    let object = fresh_object(&w, &payment(&path, &key), admin);
    // The record's 1,900,000 bytes hold the body, its headers and the record's own fields.
    let bytes = 1_890_000;
    let first = w.send(&large(&path, &key, bytes));
    assert_whole_answer(&first, bytes);
    // The marker's execution and this one.
    let executions = origin().executions(&key);
    let view = w.send(&admin("GET", &object, "")).json();
    assert_eq!(view["body_bytes"], bytes, "{view}");
    assert!(view.get("chunks").is_none(), "kept whole, not in chunk rows: {view}");
    w.crash();
    assert_eq!(sqlite(w.persist_dir(), COUNT_ROWS), "1 0", "one record, no chunk row");
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    assert_large_replay(&w.send(&large(&path, &key, bytes)), &first);
    assert_eq!(origin().executions(&key), executions, "replayed, not executed again");
}

#[test]
fn purged_and_expired_large_answers_leave_no_chunk_behind() {
    let w = start("large-cleanup", &[("IDEMPOTENCY_TTL_SECONDS", "8")]).unwrap_or_else(|e| panic!("{e}"));
    // Purged by the admin API.
    let (key, path) = (new_key(), new_path());
    let object = fresh_object(&w, &payment(&path, &key), admin);
    assert_whole_answer(&w.send(&large(&path, &key, 3 * MIB)), 3 * MIB);
    assert_eq!(w.send(&admin("GET", &object, "")).json()["chunks"], 3);
    let purged = w.send(&admin("DELETE", &object, "?force=true"));
    assert_eq!(purged.status, 200, "{:?}", purged.text());
    // Expired: deleted by its alarm, or when read past its expiry, whichever comes first.
    let (key, path) = (new_key(), new_path());
    let object = fresh_object(&w, &payment(&path, &key), admin);
    assert_whole_answer(&w.send(&large(&path, &key, 3 * MIB)), 3 * MIB);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while w.send(&admin("GET", &object, "")).json()["state"] != "absent" {
        assert!(std::time::Instant::now() < deadline, "the answer never expired");
        std::thread::sleep(Duration::from_millis(250));
    }
    w.crash();
    assert_eq!(sqlite(w.persist_dir(), COUNT_ROWS), "0 0", "no record and no chunk row is left");
}

#[test]
fn a_missing_chunk_is_503_and_never_a_short_answer_or_a_second_forward() {
    let w = start("large-tamper", &[]).unwrap_or_else(|e| panic!("{e}"));
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let first = w.send(&large(&path, &key, 5 * MIB));
    assert_whole_answer(&first, 5 * MIB);
    w.crash();
    let found = samples(&first.body).into_iter().filter(|s| files_contain(w.persist_dir(), s)).count();
    assert!(found >= 10, "in the clear the check sees the answer's bytes ({found} of 15 samples)");
    // After a restart the chunks are read back from storage and replay whole.
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    assert_large_replay(&w.send(&large(&path, &key, 5 * MIB)), &first);
    w.crash();
    let script = r#"
deleted = 0
for path in glob.glob(os.path.join(sys.argv[1], "v3", "do", "*", "*.sqlite")):
    con = sqlite3.connect(path)
    try:
        deleted += con.execute("DELETE FROM idempotency_chunk WHERE seq = 2").rowcount
        con.commit()
    except sqlite3.OperationalError:
        pass
    con.close()
print(deleted)
"#;
    assert_eq!(python_on_files("delete a chunk row", script, w.persist_dir(), &[]), "1");
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    for _ in 0..2 {
        assert_problem(&w.send(&large(&path, &key, 5 * MIB)), 503, "storage-unavailable");
    }
    assert_eq!(o.executions(&key), 1, "a record whose chunks are missing is never forwarded again");
}

#[test]
fn a_large_answer_observed_is_recorded_in_chunks_and_replays_once_enforced() {
    let w = start("large-observe", &[("MODE", "observe")]).unwrap_or_else(|e| panic!("{e}"));
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let object = fresh_object(&w, &payment(&path, &key), admin);
    let first = w.send(&large(&path, &key, 5 * MIB));
    assert_whole_answer(&first, 5 * MIB);
    // The Worker brings the answer to the object after answering: wait until it is recorded.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let view = w.send(&admin("GET", &object, "")).json();
        if view["state"] == "completed" {
            assert_eq!(view["chunks"], 5, "{view}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the observed answer was never recorded: {view}");
        std::thread::sleep(Duration::from_millis(250));
    }
    // Enforcing from now on, the recorded answer is replayed byte for byte.
    w.crash();
    w.restart_with_vars(Readiness::OriginAnswers, &[("MODE", "enforce")]).unwrap_or_else(|e| panic!("{e}"));
    assert_large_replay(&w.send(&large(&path, &key, 5 * MIB)), &first);
    assert_eq!(o.executions(&key), 2, "the marker execution and the observed one; the replay none");
}

/// Observe mode, an answer over the stored-size cap: the caller still gets every byte,
/// while the Worker's copy for the object is read only up to the cap and then cancelled
/// (`tee` never holds a large answer); the object records it as too large to
/// replay, as enforce mode would, so the key is held unknown once the route enforces.
#[test]
fn an_observed_answer_over_the_cap_reaches_its_caller_whole_and_is_held_unknown() {
    let w = start("large-observe-cap", &[("MODE", "observe"), ("MAX_STORED_RESPONSE_BYTES", "1048576")])
        .unwrap_or_else(|e| panic!("{e}"));
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let object = fresh_object(&w, &payment(&path, &key), admin);
    let first = w.send(&large(&path, &key, 4 * MIB));
    assert_whole_answer(&first, 4 * MIB);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let view = w.send(&admin("GET", &object, "")).json();
        if view["state"] == "unknown" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the observed answer was never recorded: {view}");
        std::thread::sleep(Duration::from_millis(250));
    }
    w.crash();
    w.restart_with_vars(Readiness::OriginAnswers, &[("MODE", "enforce")]).unwrap_or_else(|e| panic!("{e}"));
    assert_problem(&w.send(&large(&path, &key, 4 * MIB)), 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 2, "the marker execution and the observed one; nothing after");
}

/// A write of chunk rows that fails half-way through its transaction
/// (`CHUNK_WRITE_FAULT_INJECTION`, test-only) leaves no row behind: the record stays the
/// claim, held as a failed outcome write (409, then unknown), the caller still got the whole
/// answer, and nothing is forwarded again.
#[test]
fn a_chunk_write_that_fails_mid_transaction_leaves_no_row_and_forwards_nothing() {
    let w =
        start("large-write-fault", &[("CHUNK_WRITE_FAULT_INJECTION", "1"), ("ORIGIN_TIMEOUT_SECONDS", "5")])
            .unwrap_or_else(|e| panic!("{e}"));
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let first = w.send(&large(&path, &key, 3 * MIB));
    assert_whole_answer(&first, 3 * MIB);
    for _ in 0..2 {
        let retry = w.send(&large(&path, &key, 3 * MIB));
        assert!(
            retry.status == 409 || retry.status == 502,
            "held as a failed outcome write (409 in the lease, then unknown), never replayed: {retry:?}"
        );
    }
    assert_eq!(o.executions(&key), 1, "never forwarded again");
    w.crash();
    // The claim's record, and not one chunk row: the transaction rolled back whole.
    assert_eq!(sqlite(w.persist_dir(), COUNT_ROWS), "1 0");
}
