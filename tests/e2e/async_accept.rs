//! End-to-end tests of asynchronous acceptance (`ASYNC_ACCEPT=prefer`, RFC 7240
//! `Prefer: respond-async`), in real workerd in front of an origin that deduplicates by key
//! (`support::dedup_origin`), which can be overloaded on purpose (`x-test-fail-first`) or
//! taken down (connections refused):
//!
//! - two 503s then success: 202 at once, the poll ends in 201, every later poll replays it;
//! - the origin down, a SIGKILL and restart of workerd, then the origin back: the poll ends
//!   in 201 with one execution, and the stored request was in no SQLite file in the clear;
//! - the deadline reached: 503 `origin-unavailable`, then the key is released;
//! - an unknown outcome: held (502 `outcome-unknown`), unless the origin deduplicates, where
//!   it is sent again;
//! - the admin API shows the job, and a purge cancels it;
//! - without `STORAGE_ENCRYPTION_KEYS`, `ASYNC_ACCEPT=prefer` is 500 `invalid-config`;
//! - a body too large to store with the claim is forwarded at once, without the preference;
//!   one just under the limit is stored and executed.
//!
//! Backoffs and deadlines are set small with `--var`; every wait is a generous poll.

use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use idempotency_edge::core::key_rules::machine::async_job::MAX_STORED_REQUEST_BODY_BYTES;

use crate::support::assert::assert_problem;
use crate::support::dedup_origin::DedupOrigin;
use crate::support::http::{Request, Response};
use crate::support::logs::wait_for_line;
use crate::support::requests::{new_credential, request, secret, unique};
use crate::support::storage::{self, files_contain};
use crate::support::worker::{shared, Readiness, Worker, WorkerConfig};

/// 32 bytes 0..31 in standard base64: a test key, never a real one.
const STORAGE_KEYS: &str = r#"[{"id":"async-test","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]"#;
const ADMIN_TOKEN: &str = "e2e-async-admin-token-0123456789abcdef0123";

fn start(
    name: &str,
    origin: &DedupOrigin,
    deadline_seconds: u32,
    readiness: Readiness,
) -> Result<Worker, String> {
    start_with(name, origin, deadline_seconds, readiness, &[])
}

fn start_with(
    name: &str,
    origin: &DedupOrigin,
    deadline_seconds: u32,
    readiness: Readiness,
    extra: &[(&str, &str)],
) -> Result<Worker, String> {
    let vars = [
        ("ORIGIN_URL", origin.url()),
        ("ASYNC_ACCEPT", "prefer".to_owned()),
        ("ASYNC_DEADLINE_SECONDS", deadline_seconds.to_string()),
        ("ASYNC_MAX_BACKOFF_SECONDS", "1".to_owned()),
        ("STORAGE_ENCRYPTION_KEYS", STORAGE_KEYS.to_owned()),
        ("ORIGIN_TIMEOUT_SECONDS", "5".to_owned()),
        ("IDEMPOTENCY_TTL_SECONDS", "600".to_owned()),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
        // Under /dedup/ the origin is declared to deduplicate by key.
        ("IDEMPOTENCY_ROUTES", r#"[{"pattern":"/dedup/*","origin_deduplicates":true}]"#.to_owned()),
    ];
    let vars = vars
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .chain(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())))
        .collect();
    Worker::start(WorkerConfig { name: name.into(), vars, readiness })
}

/// [`start_with`] in front of another origin (any URL), e.g. the plain test origin.
fn start_with_origin_url(
    name: &str,
    origin_url: &str,
    deadline_seconds: u32,
    extra: &[(&str, &str)],
) -> Result<Worker, String> {
    let mut vars: Vec<(String, String)> = [
        ("ORIGIN_URL", origin_url.to_owned()),
        ("ASYNC_ACCEPT", "prefer".to_owned()),
        ("ASYNC_DEADLINE_SECONDS", deadline_seconds.to_string()),
        ("STORAGE_ENCRYPTION_KEYS", STORAGE_KEYS.to_owned()),
        ("ORIGIN_TIMEOUT_SECONDS", "5".to_owned()),
        ("IDEMPOTENCY_TTL_SECONDS", "600".to_owned()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v))
    .collect();
    vars.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    Worker::start(WorkerConfig { name: name.into(), vars, readiness: Readiness::OriginAnswers })
}

fn origin() -> &'static DedupOrigin {
    static ORIGIN: OnceLock<DedupOrigin> = OnceLock::new();
    ORIGIN.get_or_init(DedupOrigin::start)
}

/// The instance most tests share: a 15 s deadline, and a send cap high enough that the
/// deadline, not the cap, ends a job that keeps failing.
fn accepting() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        start_with("async", origin(), 15, Readiness::OriginAnswers, &[("MAX_ORIGIN_ATTEMPTS", "100")])
    })
}

fn charge(path: &str, key: &str) -> Request {
    request("POST", path)
        .header("Idempotency-Key", key)
        .header("Prefer", "respond-async")
        .json(r#"{"amount":2500,"currency":"eur"}"#)
}

fn assert_accepted(r: &Response) {
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(r.header("preference-applied"), Some("respond-async"), "{r:?}");
    assert!(r.header("retry-after").is_some_and(|v| v.parse::<u64>().is_ok()), "{r:?}");
}

/// Polls with `request` until the answer is not 202, for at most two minutes.
fn poll_until_done(w: &Worker, request: &Request) -> Response {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = w.send(request);
        if r.status != 202 {
            return r;
        }
        assert_accepted(&r);
        assert!(Instant::now() < deadline, "still pending after two minutes: {r:?}");
        thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn async_two_503s_then_success_answers_202_at_once_and_the_poll_ends_in_201() {
    crate::support::worker::require_build();
    let o = origin();
    let w = &start("async-503s", o, 15, Readiness::OriginAnswers).unwrap_or_else(|e| panic!("{e}"));
    let key = unique("async");
    let path = format!("/v1/charges/{}", unique("p"));
    let req = charge(&path, &key).header("x-test-fail-first", "2");
    assert_accepted(&w.send(&req));
    let done = poll_until_done(w, &req);
    assert_eq!(done.status, 201, "{done:?}");
    assert!(done.is_replayed(), "the job's answer is replayed: {done:?}");
    assert_eq!(o.received(&key), 3, "two 503s, then the execution");
    assert_eq!(o.executions(&key), 1);
    // Every later poll, with or without the preference, replays the same answer.
    for later in [req.clone(), req.clone().without_header("Prefer")] {
        let replay = w.send(&later);
        assert!(replay.is_replayed(), "{replay:?}");
        assert_eq!(replay.body, done.body);
    }
    // A different payload is still refused.
    let other = request("POST", &path).header("Idempotency-Key", &key).json(r#"{"amount":1}"#);
    assert_problem(&w.send(&other), 422, "key-reused");
    assert_eq!(o.received(&key), 3);
    // The instance is this test's alone, so its lines are this key's: the
    // job's object logged its acceptance, both retries and the execution.
    let accepted = wait_for_line(w, "accepted", |line| line["decision"] == "accepted");
    let object = accepted["object"].as_str().unwrap_or_default().to_owned();
    let lines = crate::support::logs::wait_for_lines_of(w, &object, 4);
    let count = |decision: &str| lines.iter().filter(|line| line["decision"] == decision).count();
    assert_eq!(count("retry-scheduled"), 2, "{lines:?}");
    assert_eq!(count("executed"), 1, "{lines:?}");
}

#[test]
fn the_async_deadline_gives_503_origin_unavailable_then_the_key_is_released() {
    let (w, o) = (accepting(), origin());
    let key = unique("deadline");
    let path = format!("/v1/charges/{}", unique("p"));
    // The origin is overloaded for longer than the 15 s deadline.
    let req = charge(&path, &key).header("x-test-fail-first", "1000");
    assert_accepted(&w.send(&req));
    // The job's deadline is 15 s from its claim, which came before this answer.
    let deadline = Instant::now() + Duration::from_secs(15);
    let gave_up = poll_until_done(w, &req);
    assert_problem(&gave_up, 503, "origin-unavailable");
    assert!(gave_up.text().contains("never executed"), "{}", gave_up.text());
    let arrivals = o.arrivals(&key);
    assert!(arrivals.len() >= 2, "it was retried: {arrivals:?}");
    // No attempt starts at or after the deadline: each arrived before it, give or
    // take the moment a request takes to reach the origin on loopback.
    let late: Vec<_> = arrivals.iter().filter(|&&at| at > deadline + Duration::from_secs(3)).collect();
    assert!(late.is_empty(), "{} attempt(s) after the deadline", late.len());
    assert_eq!(o.executions(&key), 0);
    wait_for_line(w, "gave-up", |line| line["decision"] == "gave-up");
    // Released: the same key runs again (here at once, the origin being well again).
    let again = req.without_header("x-test-fail-first").without_header("Prefer");
    let executed = w.send(&again);
    assert_eq!(executed.status, 201, "{executed:?}");
    assert!(!executed.is_replayed());
    assert_eq!(o.executions(&key), 1);
}

/// An origin that executes and answers 503 every time (a proxy's 503 after the origin ran):
/// without `ORIGIN_DEDUPLICATES`, the job is still sent at most `MAX_ORIGIN_ATTEMPTS` times,
/// then gives up.
#[test]
fn an_async_job_is_sent_at_most_max_origin_attempts_times_without_origin_deduplicates() {
    crate::support::worker::require_build();
    let o = crate::support::origin::Origin::start();
    let extra = [("MAX_ORIGIN_ATTEMPTS", "3"), ("ASYNC_MAX_BACKOFF_SECONDS", "1")];
    let w = &start_with_origin_url("async-cap", &o.url(), 300, &extra).unwrap_or_else(|e| panic!("{e}"));
    let key = unique("capped");
    let req = charge(&format!("/v1/charges/{}", unique("p")), &key).header("x-test-status", "503");
    assert_accepted(&w.send(&req));
    let gave_up = poll_until_done(w, &req);
    assert_problem(&gave_up, 503, "origin-unavailable");
    assert_eq!(o.executions(&key), 3, "sent exactly MAX_ORIGIN_ATTEMPTS times, long before the deadline");
    wait_for_line(w, "gave-up", |line| line["decision"] == "gave-up");
    // Nothing more is sent: a sentinel request's execution proves the origin was reached
    // after the job ended, and the job's key stayed at three.
    let sentinel = unique("after");
    let after = w.send(
        &request("POST", &format!("/v1/charges/{}", unique("p")))
            .header("Idempotency-Key", &sentinel)
            .json("{}"),
    );
    assert_eq!(after.status, 201, "{after:?}");
    assert_eq!(o.executions(&key), 3);
}

#[test]
fn an_async_attempt_whose_outcome_is_unknown_is_held_without_origin_deduplicates() {
    let (w, o) = (accepting(), origin());
    let key = unique("lost");
    let req = charge(&format!("/v1/charges/{}", unique("p")), &key).header("x-test-drop", "1");
    assert_accepted(&w.send(&req));
    // The connection broke after the request was sent: it may have executed.
    let held = poll_until_done(w, &req);
    assert_problem(&held, 502, "outcome-unknown");
    assert_problem(&w.send(&req), 502, "outcome-unknown");
    assert_eq!(o.received(&key), 1, "never sent again");
}

#[test]
fn where_the_origin_deduplicates_an_unknown_async_attempt_is_sent_again() {
    let (w, o) = (accepting(), origin());
    let key = unique("resent");
    let req = charge(&format!("/dedup/charges/{}", unique("p")), &key).header("x-test-drop-first", "1");
    assert_accepted(&w.send(&req));
    let done = poll_until_done(w, &req);
    assert_eq!(done.status, 201, "{done:?}");
    assert_eq!(o.received(&key), 2, "lost once, then sent again under the same key");
    assert_eq!(o.executions(&key), 1);
    wait_for_line(w, "reforwarded", |line| line["decision"] == "reforwarded");
}

#[test]
fn async_with_the_origin_down_survives_a_sigkill_and_stores_no_credential_in_clear() {
    crate::support::worker::require_build();
    let o = DedupOrigin::start();
    let w = &start("async-restart", &o, 300, Readiness::OriginAnswers).unwrap_or_else(|e| panic!("{e}"));
    let key = secret("key");
    let credential = new_credential("async-cred");
    let marker = secret("body");
    let path = format!("/v1/charges/{}", unique("p"));
    let req = request("POST", &path)
        .header("Authorization", &credential)
        .header("Idempotency-Key", &key)
        .header("Prefer", "respond-async")
        .json(&format!(r#"{{"amount":2500,"memo":"{marker}"}}"#));

    o.stop();
    assert_accepted(&w.send(&req));
    // The alarm tried and found the origin down.
    wait_for_line(w, "retry-scheduled", |line| line["decision"] == "retry-scheduled");
    w.crash();
    // The job is in the files (its envelope names its key id), so the scan below can see it.
    assert!(files_contain(w.persist_dir(), b"async-test"), "the sealed job is stored");
    let token = credential.trim_start_matches("Bearer ");
    for (what, needle) in [("credential", token), ("key", key.as_str()), ("body", marker.as_str())] {
        assert!(
            !files_contain(w.persist_dir(), needle.as_bytes()),
            "the {what} is in a SQLite file in the clear"
        );
    }
    // The restart also changes the stored layout: the job as the releases before the
    // key-value layout stored it (`runtime::key_storage`), which this one finishes in its own.
    assert_eq!(storage::move_records_to_the_legacy_table(w.persist_dir()), 1, "the job moved");
    w.restart(Readiness::AnyResponse).unwrap_or_else(|e| panic!("restart: {e}"));
    // Still pending after the restart: the stored job and its alarm survived.
    assert_accepted(&w.send(&req));
    o.resume();
    let done = poll_until_done(w, &req);
    assert_eq!(done.status, 201, "{done:?}");
    assert_eq!(o.executions(&key), 1, "one execution");
    assert_eq!(o.received(&key), 1, "nothing reached the origin while it was down");
    assert!(w.send(&req).is_replayed());
    // The outcome was written as the key-value value, and the job's row removed with it.
    w.crash();
    let stored = storage::snapshot(w.persist_dir());
    let layouts: Vec<(u64, u64)> = stored
        .non_empty()
        .iter()
        .map(|file| (file.rows_of("_cf_KV"), file.rows_of("idempotency_record")))
        .collect();
    assert_eq!(layouts, [(1, 0)], "one record, in the key-value store: {}", stored.describe());
}

#[test]
fn the_admin_api_shows_a_pending_job_and_a_purge_cancels_it() {
    crate::support::worker::require_build();
    let o = DedupOrigin::start();
    let w = &start("async-admin", &o, 300, Readiness::OriginAnswers).unwrap_or_else(|e| panic!("{e}"));
    let key = unique("admin");
    let path = format!("/v1/charges/{}", unique("p"));
    assert_accepted(&w.send(&charge(&path, &key).header("x-test-fail-first", "1000")));
    // The only job of this instance: its lines name its object.
    let line = wait_for_line(w, "retry-scheduled", |line| line["decision"] == "retry-scheduled");
    let object = line["object"].as_str().expect("an object id").to_owned();
    let record = format!("/__idempotency/records/{object}");
    let admin = |method: &str| {
        Request::new(method, &record)
            .header("Authorization", format!("Bearer {ADMIN_TOKEN}"))
            .header("X-Operator", "async-test")
    };
    let view = w.send(&admin("GET")).json();
    assert_eq!(view["state"], "in-flight", "{view}");
    assert!(view["attempts"].as_u64().is_some_and(|n| n >= 1), "{view}");
    assert_eq!(view["async"]["request_stored"], true, "{view}");
    assert!(view["async"]["deadline_ms"].as_u64().is_some(), "{view}");
    // Never the request, in the clear or in base64 (`{"amount"`): not its amount either, as
    // a number would be found in the view's timestamps (1796494250060 holds 2500).
    for trace in ["amount", "currency", "eur", "eyJhbW91bnQi"] {
        assert!(!view.to_string().contains(trace), "never the request ({trace}): {view}");
    }
    // Between attempts, nothing can have executed: a purge needs no force, and cancels the
    // job (its alarm is deleted).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let purged = w.send(&admin("DELETE"));
        if purged.status == 200 {
            break;
        }
        // It was sending at that moment: try again between attempts.
        assert_problem(&purged, 409, "in-progress");
        assert!(Instant::now() < deadline, "never between attempts");
        thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(w.send(&admin("GET")).json()["state"], "absent");
    let received = o.received(&key);
    // Ten times the longest backoff (1 s) later, the origin saw nothing more: a lower bound
    // on the wait, which load can only lengthen.
    thread::sleep(Duration::from_secs(10));
    assert!(o.received(&key) <= received + 1, "a purged job is not sent again");
    assert_eq!(w.send(&admin("GET")).json()["state"], "absent");
}

#[test]
fn async_accept_without_storage_keys_is_invalid_config() {
    crate::support::worker::require_build();
    let w = Worker::start(WorkerConfig {
        name: "async-no-keys".into(),
        vars: vec![
            ("ORIGIN_URL".to_owned(), origin().url()),
            ("ASYNC_ACCEPT".to_owned(), "prefer".to_owned()),
        ],
        readiness: Readiness::AnyResponse,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let key = unique("nokeys");
    let r = w.send(&charge(&format!("/v1/charges/{}", unique("p")), &key));
    assert_problem(&r, 500, "invalid-config");
    assert!(r.text().contains("STORAGE_ENCRYPTION_KEYS"), "{}", r.text());
    assert_eq!(origin().received(&key), 0);
}

/// A body too large to be stored with the claim (over `MAX_STORED_REQUEST_BODY_BYTES`, 1.5 MB,
/// under a `MAX_BODY_BYTES` that admits it) is not accepted asynchronously: it is forwarded
/// at once, as if it had not asked, and answered by the origin without
/// `Preference-Applied`. Its key is protected as usual: the retry replays. A body just under
/// the limit is accepted and stored.
#[test]
fn a_body_too_large_to_store_is_forwarded_at_once_without_the_preference() {
    let o = origin();
    let w = start_with("async-large-body", o, 15, Readiness::OriginAnswers, &[("MAX_BODY_BYTES", "2000000")])
        .unwrap_or_else(|e| panic!("{e}"));
    let key = unique("large");
    let path = format!("/v1/charges/{}", unique("p"));
    let body = format!(r#"{{"amount":2500,"currency":"eur","memo":"{}"}}"#, "m".repeat(1_600_000));
    let req = request("POST", &path)
        .header("Idempotency-Key", &key)
        .header("Prefer", "respond-async")
        .json(&body)
        .timeout(Duration::from_secs(120));
    let first = w.send(&req);
    assert_eq!(first.status, 201, "answered by the origin at once: {first:?}");
    assert_eq!(first.header("preference-applied"), None, "the preference was not applied: {first:?}");
    assert!(!first.is_replayed(), "{first:?}");
    assert_eq!(o.executions(&key), 1);
    let retry = w.send(&req);
    assert!(retry.is_replayed(), "{retry:?}");
    assert_eq!(retry.body, first.body);
    assert_eq!(o.executions(&key), 1);

    // Just under the limit: stored with the claim (sealed, in one key-value value) and
    // executed from the alarm.
    let key = unique("largest");
    let body = format!(r#"{{"amount":2500,"currency":"eur","memo":"{}"}}"#, "m".repeat(1_499_000));
    assert!(body.len() as u64 <= MAX_STORED_REQUEST_BODY_BYTES, "{}", body.len());
    let req = request("POST", &path)
        .header("Idempotency-Key", &key)
        .header("Prefer", "respond-async")
        .json(&body)
        .timeout(Duration::from_secs(120));
    assert_accepted(&w.send(&req));
    let done = poll_until_done(&w, &req);
    assert_eq!(done.status, 201, "{done:?}");
    assert_eq!(o.executions(&key), 1, "one execution of the stored job");
}

/// A SIGKILL while the job's send is at the origin: after the restart the job's alarm finds
/// the send orphaned, and without `ORIGIN_DEDUPLICATES` it is held unknown, never sent again
/// (counted at the origin).
#[test]
fn an_async_job_killed_mid_send_is_held_unknown_and_never_sent_again() {
    crate::support::worker::require_build();
    let o = crate::support::origin::Origin::start();
    let w = &start_with_origin_url("async-killed", &o.url(), 300, &[]).unwrap_or_else(|e| panic!("{e}"));
    let key = unique("killed");
    let gate = o.gate();
    let req = gate.on(charge(&format!("/v1/charges/{}", unique("p")), &key));
    assert_accepted(&w.send(&req));
    gate.expect_arrival("the job's send");
    w.crash();
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    let held = poll_until_done(w, &req);
    assert_problem(&held, 502, "outcome-unknown");
    assert_problem(&w.send(&req.clone().without_header("Prefer")), 502, "outcome-unknown");
    gate.release();
    assert_eq!(gate.arrived(), 1, "the orphaned send was never sent again");
    assert_eq!(o.executions(&key), 1);
}
