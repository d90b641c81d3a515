//! End-to-end tests of stored answers sealed at rest (issue 14, `STORAGE_ENCRYPTION_KEYS`),
//! in real workerd, looking at the SQLite files `--persist-to` leaves from the outside:
//! - no byte of an answer's body is in any file, and the answer still replays byte for byte
//!   after a restart (opened from storage); without keys the same check finds the bytes;
//! - rotation: a record sealed under an old key stays readable once a new key is in front,
//!   and fails closed (503, nothing forwarded) once its key is removed;
//! - a changed byte of a sealed answer is 503, never a second forward;
//! - an invalid key ring is 500 `invalid-config` naming the secret, never its value.

use std::process::Command;
use std::sync::OnceLock;

use crate::support::assert::{assert_problem, assert_replay_of};
use crate::support::http::Request;
use crate::support::origin::Origin;
use crate::support::requests::{request, unique};
use crate::support::storage::files_contain;
use crate::support::worker::{Readiness, Worker, WorkerConfig};

/// 32 bytes 0..31 and 32..63, in standard base64: test keys, never real ones.
const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_B: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

fn ring(keys: &[(&str, &str)]) -> String {
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
import glob, os, sqlite3, sys
changed = 0
for path in glob.glob(os.path.join(sys.argv[1], "v3", "do", "*", "*.sqlite")):
    con = sqlite3.connect(path)
    try:
        for (record,) in con.execute("SELECT record FROM idempotency_record"):
            flipped = bytes(record[:-1]) + bytes([record[-1] ^ 1])
            changed += con.execute("UPDATE idempotency_record SET record = ?", (flipped,)).rowcount
        con.commit()
    except sqlite3.OperationalError:
        pass
    con.close()
print(changed)
"#;
    let out =
        Command::new("python3").arg("-c").arg(script).arg(w.persist_dir()).output().expect("python3 runs");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "{}", String::from_utf8_lossy(&out.stderr));
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
