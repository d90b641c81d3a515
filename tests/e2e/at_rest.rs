//! End-to-end tests of stored answers sealed at rest (`STORAGE_ENCRYPTION_KEYS`),
//! in real workerd, looking at the SQLite files `--persist-to` leaves from the outside:
//! - no byte of an answer's body is in any file, and the answer still replays byte for byte
//!   after a restart (opened from storage); without keys the same check finds the bytes;
//! - rotation: a record sealed under an old key stays readable once a new key is in front,
//!   and fails closed (503, nothing forwarded) once its key is removed;
//! - a changed byte of a sealed answer is 503, never a second forward;
//! - an invalid key ring is 500 `invalid-config` naming the secret, never its value;
//! - an older attempt's sealed answer written back into a newer record is 503, never that
//!   answer and never a forward (the seal binds attempt and fingerprint);
//! - an answer stored in the clear is 503 once a key ring is set, unless
//!   `STORAGE_ALLOW_UNSEALED=true` (the rollout of sealing).

use std::sync::OnceLock;

use crate::support::assert::{assert_problem, assert_replay_of};
use crate::support::http::Request;
use crate::support::origin::Origin;
use crate::support::requests::{request, unique};
use crate::support::storage::{files_contain, python_on_files};
use crate::support::worker::{Readiness, Worker, WorkerConfig};

/// 32 bytes 0..31 and 32..63, in standard base64: test keys, never real ones.
const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_B: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

fn ring(keys: &[(&str, &str)]) -> String {
    for (_, key) in keys {
        crate::support::requests::register_secret(key);
    }
    let keys: Vec<String> =
        keys.iter().map(|(id, key)| format!(r#"{{"id":"{id}","key":"{key}"}}"#)).collect();
    format!("[{}]", keys.join(","))
}

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn start(name: &str, keys: Option<String>) -> Worker {
    crate::support::worker::require_build();
    let mut vars = vec![
        ("ORIGIN_URL".to_owned(), origin().url()),
        ("IDEMPOTENCY_TTL_SECONDS".to_owned(), "600".to_owned()),
    ];
    if let Some(keys) = keys {
        vars.push(("STORAGE_ENCRYPTION_KEYS".to_owned(), keys));
    }
    Worker::start(WorkerConfig { name: name.into(), vars, readiness: Readiness::OriginAnswers })
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A payment whose path carries `marker`: the test origin echoes the path in its answer's
/// body, so the marker is a byte string that only the stored answer can hold.
fn payment(marker: &str, key: &str) -> Request {
    request("POST", &format!("/v1/charges/{marker}"))
        .header("Idempotency-Key", key)
        .json(r#"{"amount":4200}"#)
}

#[test]
fn no_byte_of_an_answer_is_stored_in_the_clear_and_it_still_replays() {
    let plain = start("at-rest-plain", None);
    let sealed = start("at-rest-sealed", Some(ring(&[("k1", KEY_A)])));
    for (w, encrypted) in [(&plain, false), (&sealed, true)] {
        let marker = unique("marker");
        let key = unique("k");
        let first = w.send(&payment(&marker, &key));
        assert_eq!(first.status, 201, "{first:?}");
        assert!(first.text().contains(&marker), "the answer carries the marker");
        // After a crash the object reads its record from storage (and opens it).
        w.crash();
        assert_eq!(
            files_contain(w.persist_dir(), marker.as_bytes()),
            !encrypted,
            "encrypted: {encrypted}: the answer's bytes are {} the SQLite files",
            if encrypted { "not in" } else { "in (the check can see them)" }
        );
        w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
        assert_replay_of(&w.send(&payment(&marker, &key)), &first);
        assert_eq!(origin().executions(&key), 1);
    }
}

#[test]
fn rotation_keeps_old_answers_readable_and_a_removed_key_fails_closed() {
    let w = start("at-rest-rotation", Some(ring(&[("2026-06", KEY_A)])));
    let (old_marker, old_key) = (unique("old"), unique("k"));
    let old = w.send(&payment(&old_marker, &old_key));
    assert_eq!(old.status, 201);

    // A new key in front: new answers are sealed with it, old ones still open.
    w.crash();
    w.restart_with_vars(
        Readiness::OriginAnswers,
        &[("STORAGE_ENCRYPTION_KEYS", &ring(&[("2026-12", KEY_B), ("2026-06", KEY_A)]))],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_replay_of(&w.send(&payment(&old_marker, &old_key)), &old);
    let (new_marker, new_key) = (unique("new"), unique("k"));
    let new = w.send(&payment(&new_marker, &new_key));
    assert_eq!(new.status, 201);

    // The old key removed: its records can no longer be opened, and are never forwarded.
    w.crash();
    assert!(files_contain(w.persist_dir(), b"2026-12"), "the new answer names its key id");
    w.restart_with_vars(
        Readiness::OriginAnswers,
        &[("STORAGE_ENCRYPTION_KEYS", &ring(&[("2026-12", KEY_B)]))],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let refused = w.send(&payment(&old_marker, &old_key));
    assert_problem(&refused, 503, "storage-unavailable");
    assert_eq!(origin().executions(&old_key), 1, "a record that cannot be opened is never forwarded again");
    assert_replay_of(&w.send(&payment(&new_marker, &new_key)), &new);
    assert!(!w.log_contents().contains(KEY_A) && !w.log_contents().contains(KEY_B), "no key in the logs");
}

#[test]
fn a_changed_byte_in_a_sealed_answer_is_503_and_forwards_nothing() {
    let w = start("at-rest-tamper", Some(ring(&[("k1", KEY_A)])));
    let (marker, key) = (unique("tamper"), unique("k"));
    assert_eq!(w.send(&payment(&marker, &key)).status, 201);
    w.crash();
    let script = r#"
def flip_last_byte(con, layout, record):
    write_record(con, layout, record[:-1] + bytes([record[-1] ^ 1]))
print(change_each_record(sys.argv[1], flip_last_byte))
"#;
    assert_eq!(on_the_files(&w, script), "1");
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    for _ in 0..2 {
        assert_problem(&w.send(&payment(&marker, &key)), 503, "storage-unavailable");
    }
    assert_eq!(origin().executions(&key), 1);
}

#[test]
fn an_invalid_key_ring_is_refused_without_its_value() {
    let bad = r#"[{"id":"k1","key":"c2hvcnQta2V5"}]"#;
    crate::support::worker::require_build();
    let w = Worker::start(WorkerConfig {
        name: "at-rest-invalid".into(),
        vars: vec![
            ("ORIGIN_URL".to_owned(), origin().url()),
            ("STORAGE_ENCRYPTION_KEYS".to_owned(), bad.to_owned()),
        ],
        readiness: Readiness::AnyResponse,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let key = unique("k");
    let r = w.send(&payment(&unique("m"), &key));
    assert_problem(&r, 500, "invalid-config");
    assert!(
        r.text().contains("STORAGE_ENCRYPTION_KEYS") && !r.text().contains("c2hvcnQta2V5"),
        "{}",
        r.text()
    );
    assert_eq!(origin().executions(&key), 0);
}

/// Runs `script` (Python, with the persist folder as its argument, `glob`, `os`, `sqlite3`
/// and `sys` imported, and `support::storage`'s helpers for the stored record defined) on
/// the SQLite files of a crashed instance, and returns what it printed.
fn on_the_files(w: &Worker, script: &str) -> String {
    python_on_files("change the stored records", script, w.persist_dir(), &[])
}

/// The object id and the stored record (hex) of the instance's one object with a record
/// (a dedicated instance), separated by a space.
const READ_RECORD: &str = r#"
found = []
for path in glob.glob(os.path.join(sys.argv[1], "v3", "do", "*", "*.sqlite")):
    con = sqlite3.connect(path)
    stored = read_record(con)
    if stored is not None:
        object_id = os.path.basename(path)[: -len(".sqlite")]
        found.append(object_id + " " + stored[1].hex())
    con.close()
assert len(found) == 1, found
print(found[0])
"#;

#[test]
fn an_older_attempts_sealed_answer_written_back_is_503_and_forwards_nothing() {
    const ADMIN: &str = "e2e-at-rest-admin-token-0123456789abcdef01";
    crate::support::worker::require_build();
    let w = Worker::start(WorkerConfig {
        name: "at-rest-write-back".into(),
        vars: vec![
            ("ORIGIN_URL".to_owned(), origin().url()),
            ("IDEMPOTENCY_TTL_SECONDS".to_owned(), "600".to_owned()),
            ("STORAGE_ENCRYPTION_KEYS".to_owned(), ring(&[("k1", KEY_A)])),
            ("ADMIN_TOKEN".to_owned(), ADMIN.to_owned()),
        ],
        readiness: Readiness::OriginAnswers,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let (marker, key) = (unique("write-back"), unique("k"));
    let first = w.send(&payment(&marker, &key));
    assert_eq!(first.status, 201);
    w.crash();
    // The object id is its database file's name (a log line may be lost to the SIGKILL).
    let read = on_the_files(&w, READ_RECORD);
    let (object, older) = read.split_once(' ').expect("an object id and its record");
    let (object, older) = (object.to_owned(), older.to_owned());
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    // The operator purges the key (force), and the same request executes anew.
    let purge = Request::new("DELETE", &format!("/__idempotency/records/{object}?force=true"))
        .header("Authorization", format!("Bearer {ADMIN}"));
    assert_eq!(w.send(&purge).status, 200);
    let second = w.send(&payment(&marker, &key));
    assert_eq!(second.status, 201);
    assert!(!second.is_replayed());
    assert_eq!(origin().executions(&key), 2);
    w.crash();
    // Someone with write access puts the older attempt's sealed answer into the newer
    // record (same object, same payload, same key ring): it must not open.
    let splice = format!(
        r#"
older = bytes.fromhex("{older}")
# Header 60 bytes, an empty inline response 10, one extension: count, tag, u32 length.
HEAD = 60 + 10 + 2
def splice(con, layout, record):
    assert record[HEAD - 1] == 5 and older[HEAD - 1] == 5, "a bound sealed answer (tag 5)"
    envelope = older[HEAD + 4:]
    spliced = record[:HEAD] + len(envelope).to_bytes(4, "big") + envelope
    assert spliced != record
    write_record(con, layout, spliced)
print(change_each_record(sys.argv[1], splice))
"#
    );
    assert_eq!(on_the_files(&w, &splice), "1");
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    for _ in 0..2 {
        assert_problem(&w.send(&payment(&marker, &key)), 503, "storage-unavailable");
    }
    assert_eq!(origin().executions(&key), 2, "never forwarded again");
}

#[test]
fn an_answer_stored_in_the_clear_is_503_once_a_key_ring_is_set_unless_allowed() {
    let w = start("at-rest-clear", None);
    let (marker, key) = (unique("clear"), unique("k"));
    let first = w.send(&payment(&marker, &key));
    assert_eq!(first.status, 201);
    // Sealing turned on: the answer stored before it is not replayed (storage could hold
    // anything in the clear), and nothing is forwarded.
    w.crash();
    w.restart_with_vars(Readiness::OriginAnswers, &[("STORAGE_ENCRYPTION_KEYS", &ring(&[("k1", KEY_A)]))])
        .unwrap_or_else(|e| panic!("restart: {e}"));
    assert_problem(&w.send(&payment(&marker, &key)), 503, "storage-unavailable");
    // The rollout's escape hatch: such answers replay while it is set.
    w.crash();
    w.restart_with_vars(
        Readiness::OriginAnswers,
        &[("STORAGE_ENCRYPTION_KEYS", &ring(&[("k1", KEY_A)])), ("STORAGE_ALLOW_UNSEALED", "true")],
    )
    .unwrap_or_else(|e| panic!("restart: {e}"));
    assert_replay_of(&w.send(&payment(&marker, &key)), &first);
    assert_eq!(origin().executions(&key), 1);
}

/// Tampering of every kind gives 503 and forwards nothing: a changed key id, a
/// changed nonce, a sealed record moved into another key's object, and (after a restart) a
/// ring that holds another key under the same id.
#[test]
fn every_kind_of_tampering_with_a_sealed_record_is_503_and_forwards_nothing() {
    let w = start("at-rest-tamper-kinds", Some(ring(&[("k1", KEY_A)])));
    let keys: Vec<(String, String)> = (0..4).map(|i| (unique(&format!("tamper{i}")), unique("k"))).collect();
    for (marker, key) in &keys {
        assert_eq!(w.send(&payment(marker, key)).status, 201);
    }
    w.crash();
    // Three of the four files, in name order: the first gets another key id, the second
    // another nonce, the third the first one's original record (moved across objects).
    let script = r#"
HEAD = 60 + 10 + 2 + 4   # header, empty inline response, count, tag, u32 length
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "v3", "do", "*", "*.sqlite"))):
    con = sqlite3.connect(path)
    stored = read_record(con)
    if stored is not None:
        rows.append((path, stored[1]))
    con.close()
assert len(rows) == 4, len(rows)
def write(path, record):
    con = sqlite3.connect(path)
    write_record(con, read_record(con)[0], record)
    con.commit()
    con.close()
(p0, r0), (p1, r1), (p2, r2), _ = rows
assert r0[HEAD] == 2 and r0[HEAD + 1 : HEAD + 3] == b"k1", "key id k1 at its place"
write(p0, r0[: HEAD + 1] + b"k9" + r0[HEAD + 3 :])
nonce = HEAD + 3
write(p1, r1[:nonce] + bytes([r1[nonce] ^ 1]) + r1[nonce + 1 :])
write(p2, r0)
print("ok")
"#;
    assert_eq!(on_the_files(&w, script), "ok");
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    // Which key's file got which change is not known here, but three of the four must be
    // refused, and none of them forwarded.
    let answers: Vec<u16> = keys.iter().map(|(marker, key)| w.send(&payment(marker, key)).status).collect();
    assert_eq!(answers.iter().filter(|&&s| s == 503).count(), 3, "{answers:?}");
    assert_eq!(answers.iter().filter(|&&s| s == 201).count(), 1, "the untouched one replays: {answers:?}");
    // Another key under the same id: the one left untouched is refused too.
    w.crash();
    w.restart_with_vars(Readiness::OriginAnswers, &[("STORAGE_ENCRYPTION_KEYS", &ring(&[("k1", KEY_B)]))])
        .unwrap_or_else(|e| panic!("restart: {e}"));
    for (marker, key) in &keys {
        assert_problem(&w.send(&payment(marker, key)), 503, "storage-unavailable");
        assert_eq!(origin().executions(key), 1, "never forwarded again");
    }
}
