//! Reliability and security, end to end: the built worker in real workerd
//! (`wrangler dev`, local mode) in front of a real loopback origin, under faults, load and
//! hostile input. `docs/reliability.md` explains what each test proves.
//!
//! Instances:
//! - `hostile_worker()`: origin timeout 4 s, duplicate wait 30 s, 256 KiB body limit, TTL
//!   600 s; the stalled-body, 503, hostile-input, scope and log tests share it;
//! - `storm_worker()`: its own instance for the storm (so no other test's traffic is in it);
//! - the small-backlog storm starts an instance of its own, in front of its own origin
//!   (`support::backlog_origin`);
//! - `storage_worker()`: TTL 30 s and origin timeout 5 s, alone in its `--persist-to`
//!   directory, whose SQLite files the storage test reads;
//! - the crash test starts (and SIGKILLs) an instance of its own.
//!
//! Prerequisites: `./scripts/test.sh` (installs the toolchain and builds the worker).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert::{
    assert_executed, assert_from_origin, assert_problem, assert_replay_of, check_problem, is_problem,
    problem_kind, retry_after_seconds,
};
use crate::support::backlog_origin::BacklogOrigin;
use crate::support::hostile::bad_inputs;
use crate::support::http::{send_raw, send_raw_then_close, Request, Response};
use crate::support::logs;
use crate::support::origin::Origin;
use crate::support::requests::{
    covered, new_credential, new_key, new_path, payment, request, secret, DEFAULT_CREDENTIAL,
};
use crate::support::rng::{self, Rng};
use crate::support::storage::{self, Snapshot};
use crate::support::worker::{send_past_dev_proxy, shared, Readiness, Worker, WorkerConfig};

const MAX_BODY_BYTES: usize = 262_144;
const HOSTILE_ORIGIN_TIMEOUT_SECONDS: u64 = 4;

// ---------------------------------------------------------------------------------------
// Instances and helpers

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn vars(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()
}

fn start(name: &str, ttl: u64, wait: u64, timeout: u64, max_body: usize) -> Result<Worker, String> {
    Worker::start(WorkerConfig {
        name: name.into(),
        vars: vars(&[
            ("ORIGIN_URL", origin().url()),
            ("IDEMPOTENCY_TTL_SECONDS", ttl.to_string()),
            ("DUPLICATE_WAIT_SECONDS", wait.to_string()),
            ("ORIGIN_TIMEOUT_SECONDS", timeout.to_string()),
            ("MAX_BODY_BYTES", max_body.to_string()),
            ("SCOPE_HEADER", "Authorization".to_string()),
        ]),
        readiness: Readiness::OriginAnswers,
    })
}

fn hostile_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || start("rel-hostile", 600, 30, HOSTILE_ORIGIN_TIMEOUT_SECONDS, MAX_BODY_BYTES))
}

fn storm_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || start("rel-storm", 600, 120, 30, 4096))
}

/// Long enough that every outcome the test stores is certainly still there when it counts
/// them (a margin of tens of seconds on a loaded machine), short enough to wait out.
const STORAGE_TTL_SECONDS: u64 = 30;
const STORAGE_ORIGIN_TIMEOUT_SECONDS: u64 = 5;

fn storage_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || start("rel-storage", STORAGE_TTL_SECONDS, 10, STORAGE_ORIGIN_TIMEOUT_SECONDS, 4096))
}

/// The worker still executes and replays a normal request: whatever came before did not
/// break it (a panic would reset the instance and could break the connection).
fn assert_still_serves(w: &Worker, after: &str) {
    let key = new_key();
    let req = payment(&new_path(), &key);
    let first = w.send(&req);
    assert!(
        first.status == 201 && first.has_header("x-origin-execution"),
        "after {after}, a normal request failed: {first:?}"
    );
    let second = w.send(&req);
    assert!(
        second.is_replayed() && second.body == first.body,
        "after {after}, the replay failed: {second:?}"
    );
    assert_eq!(origin().executions(&key), 1, "after {after}");
}

// ---------------------------------------------------------------------------------------
// Faults

/// Workerd dies (SIGKILL of wrangler and workerd together) while
/// the first attempt is at the origin, and starts again on the same state. The in-memory
/// execution and its waiters are gone, exactly as after a panic (which resets the Wasm
/// instance), so this also covers "panic or instance reset".
#[test]
fn sigkill_mid_flight_then_restart_never_executes_again() {
    // A long lease, so that the restart certainly ends inside it, even on a loaded machine
    // (in the whole suite this test runs beside the storm below: a restart took 75 s there).
    const ORIGIN_TIMEOUT_SECONDS: u64 = 110;
    // LEASE_MARGIN_MS in src/core/key_rules/machine.rs.
    let lease = Duration::from_secs(ORIGIN_TIMEOUT_SECONDS + 10);
    let o = origin();
    let w = start("rel-crash", 600, 5, ORIGIN_TIMEOUT_SECONDS, 4096).unwrap_or_else(|e| panic!("{e}"));

    // A key completed before the crash: its stored answer must survive it.
    let done_key = new_key();
    let done_req = payment(&new_path(), &done_key);
    let done = w.send(&done_req);
    assert_executed(&done, 201);

    // The origin holds the first attempt of another key when workerd dies.
    let key = new_key();
    let path = new_path();
    let gate = o.gate();
    let first = gate.on(payment(&path, &key)).timeout(Duration::from_secs(120)).start(w.addr).expect("send");
    gate.expect_arrival("the first attempt");
    // The claim was written before the origin saw the request, so its lease ends before
    // `at_origin + lease`.
    let at_origin = Instant::now();
    w.crash();
    let cut = first.finish();
    assert!(cut.is_err(), "the caller's connection must die with workerd, got {cut:?}");
    assert!(
        gate.wait_abandoned(1, Duration::from_secs(60)),
        "workerd's connection to the origin died with it"
    );
    gate.release();

    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart on the same state: {e}"));
    let restarted_after = at_origin.elapsed();

    // The stored answer is still replayed.
    assert_replay_of(&w.send(&done_req), &done);
    assert_eq!(o.executions(&done_key), 1);

    // During the lease: 409 in-progress with Retry-After, nothing forwarded.
    let during = w.send(&payment(&path, &key));
    let during_at = at_origin.elapsed();
    assert!(
        during_at < lease,
        "the restart took {restarted_after:?}, longer than the {lease:?} lease; the machine is overloaded \
         (answer: {during:?})"
    );
    assert_problem(&during, 409, "in-progress");
    let retry_after = retry_after_seconds(&during);
    assert!((1..=lease.as_secs()).contains(&retry_after), "Retry-After {retry_after} s: {during:?}");
    assert_eq!(o.executions(&key), 1, "a retry during the lease must not execute");
    // Another payload under the key is still refused: the fingerprint survived the crash.
    let other = w.send(&covered("POST", &path, &key, r#"{"amount":1}"#));
    assert_problem(&other, 422, "key-reused");

    // Retries answer 409 until the lease ends, then outcome-unknown, for good.
    let deadline = at_origin + lease + Duration::from_secs(60);
    loop {
        let r = w.send(&payment(&path, &key));
        if r.status == 502 {
            assert_problem(&r, 502, "outcome-unknown");
            break;
        }
        assert_problem(&r, 409, "in-progress");
        assert!(Instant::now() < deadline, "still 409 a minute after the lease ended: {r:?}");
        thread::sleep(Duration::from_millis(500));
    }
    assert!(at_origin.elapsed() + Duration::from_secs(1) >= lease, "outcome-unknown before the lease ended");
    for _ in 0..3 {
        let after = w.send(&payment(&path, &key));
        assert_problem(&after, 502, "outcome-unknown");
        assert!(!after.has_header("x-origin-execution"), "{after:?}");
    }
    assert_eq!(o.executions(&key), 1, "the key was executed again after the crash");
    assert_eq!(o.executions_at(&path), 1, "the path was executed again after the crash");
    let log = w.log_contents();
    assert!(log.matches("Ready on").count() >= 2, "the log should show two starts of wrangler");
}

/// The origin sends its headers and part of the body, then stalls. The
/// body is part of the answer, so the origin timeout covers it: the caller gets 502
/// outcome-unknown while the origin still stalls, and the key is never forwarded again.
/// The stall lasts until the test releases a gate, so the order of events is observed, not
/// timed: the 502 comes while the origin still holds the half-sent answer, and the origin
/// sees the worker close the connection.
/// A completed key is never executed again after a crash, however often. A
/// sealed instance (`STORAGE_ENCRYPTION_KEYS`, the ring's order changed on each restart,
/// as an operator rotating keys does) completes a new key, then is SIGKILLed while new keys
/// are in flight on it, and restarted, twenty times, while another instance takes load
/// beside it. The keys in flight at each crash are at every stage a request can be in: one
/// held at the origin (claimed and forwarded, certainly), one the origin answers at once
/// (often answered before the kill), one the origin answers after 1.5 s (at the origin when
/// it dies), and one sent just before the kill (often not yet claimed). After every restart
/// each round's completed key so far must replay its first answer, executed once; each key
/// in flight at this crash whose caller got no answer is retried: it executes only if the
/// origin never had it, and is otherwise held (409 `in-progress` while its lease lasts,
/// then 502 `outcome-unknown`). Every fourth restart, and after the last, the keys in flight
/// at earlier crashes are sent again too: each completed one replays, each held one stays
/// held, none executed a second time, whatever later rounds did. (Every restart for all of
/// them made the test a third longer for no other finding.)
#[test]
fn completed_keys_survive_twenty_crashes_under_load_without_a_second_execution() {
    const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const KEY_B: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
    let ring = |first: (&str, &str), second: (&str, &str)| {
        format!(
            r#"[{{"id":"{}","key":"{}"}},{{"id":"{}","key":"{}"}}]"#,
            first.0, first.1, second.0, second.1
        )
    };
    let (a, b) = (("crash-a", KEY_A), ("crash-b", KEY_B));
    crate::support::worker::require_build();
    let o = origin();
    let w = Worker::start(WorkerConfig {
        name: "rel-crash-rounds".into(),
        vars: vars(&[
            ("ORIGIN_URL", o.url()),
            ("IDEMPOTENCY_TTL_SECONDS", "3600".to_string()),
            ("STORAGE_ENCRYPTION_KEYS", ring(a, b)),
        ]),
        readiness: Readiness::OriginAnswers,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    // Load beside it: new keys on another instance, until the rounds are over, at most one
    // every LOAD_INTERVAL (20 a second). Paced, not as fast as answers come: unpaced it
    // sent about 56 a second alone (5,010 in 90 s), each a new object with its own SQLite
    // file on the storm instance, whose deletions begin when its 600 s TTL ends, so what it
    // left behind grew with the rounds' length, whatever slowed them.
    const LOAD_INTERVAL: Duration = Duration::from_millis(50);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        let other = storm_worker();
        thread::spawn(move || {
            let mut sent = 0usize;
            let started = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                let r = other.send(&payment(&new_path(), &new_key()));
                assert_eq!(r.status, 201, "the load beside the crashes: {r:?}");
                sent += 1;
                let next = started + LOAD_INTERVAL * u32::try_from(sent).unwrap_or(u32::MAX);
                thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            (sent, started.elapsed())
        })
    };
    // Keys with a stored answer: the request, the answer every replay must equal, the key;
    // each round's own key, and the keys in flight at a crash.
    let mut completed: Vec<(Request, Response, String)> = Vec::new();
    let mut completed_in_flight: Vec<(Request, Response, String)> = Vec::new();
    // Keys whose caller never got an answer and whose retry found them held.
    let mut held: Vec<(Request, String)> = Vec::new();
    // How the in-flight keys of all rounds ended, for the summary line.
    let (mut answered_before, mut executed_after, mut held_after) = (0usize, 0usize, 0usize);
    for round in 0..20 {
        let key = new_key();
        let req = payment(&new_path(), &key);
        let first = w.send(&req);
        assert_executed(&first, 201);
        completed.push((req, first, key));

        // New keys in flight on this instance when it dies.
        let gate = o.gate();
        let in_flight = |request: Request| {
            let key = new_key();
            let request = request.header("Idempotency-Key", &key).timeout(Duration::from_secs(60));
            let sent = request.start(w.addr).unwrap_or_else(|e| panic!("round {round}: send: {e}"));
            (request, key, sent)
        };
        let body = |path: &str| request("POST", path).json(crate::support::requests::PAYMENT_BODY);
        let mut flying = vec![
            in_flight(gate.on(body(&new_path()))),
            in_flight(body(&new_path())),
            in_flight(body(&new_path()).header("x-test-delay-ms", "1500")),
        ];
        gate.expect_arrival(&format!("round {round}'s held key"));
        flying.push(in_flight(body(&new_path())));
        w.crash();
        let answers: Vec<(Request, String, Option<Response>)> = flying
            .into_iter()
            .map(|(request, key, sent)| {
                let answer =
                    sent.finish().ok().filter(|r| r.status == 201 && r.has_header("x-origin-execution"));
                (request, key, answer)
            })
            .collect();
        gate.release();

        let rotated = if round % 2 == 0 { ring(b, a) } else { ring(a, b) };
        w.restart_with_vars(Readiness::OriginAnswers, &[("STORAGE_ENCRYPTION_KEYS", &rotated)])
            .unwrap_or_else(|e| panic!("round {round}: restart: {e}"));

        for (request, key, answer) in answers {
            let executions = o.executions(&key);
            assert!(
                executions <= 1,
                "round {round}: a key in flight at the crash executed {executions} times"
            );
            let retry = w.send(&request);
            if let Some(first) = answer {
                answered_before += 1;
                assert_replay_of(&retry, &first);
                assert_eq!(
                    o.executions(&key),
                    1,
                    "round {round}: a key answered before the crash executed again"
                );
                completed_in_flight.push((request, first, key));
            } else if retry.status == 201 && !retry.is_replayed() {
                executed_after += 1;
                assert_executed(&retry, 201);
                assert_eq!(executions, 0, "round {round}: a key the origin had executed was executed again");
                assert_eq!(o.executions(&key), 1, "round {round}");
                completed_in_flight.push((request, retry, key));
            } else if retry.is_replayed() {
                // Stored before the crash, its answer lost on the way to the caller.
                assert_eq!(retry.status, 201, "round {round}: {retry:?}");
                assert_eq!(o.executions(&key), 1, "round {round}: a stored key executed again");
                answered_before += 1;
                completed_in_flight.push((request, retry, key));
            } else {
                held_after += 1;
                assert_held(&retry, &format!("round {round}: a key in flight at the crash"));
                assert!(o.executions(&key) <= 1, "round {round}: a held key executed again");
                held.push((request, key));
            }
        }
        for (done, (req, first, key)) in completed.iter().enumerate() {
            let replay = w.send(req);
            assert!(
                replay.is_replayed(),
                "round {round}: the completed key {done} was not replayed: {replay:?}"
            );
            assert_replay_of(&replay, first);
            assert_eq!(o.executions(key), 1, "round {round}: the completed key {done} executed again");
        }
        if round % 4 == 3 || round == 19 {
            for (n, (req, first, key)) in completed_in_flight.iter().enumerate() {
                assert_replay_of(&w.send(req), first);
                assert_eq!(o.executions(key), 1, "round {round}: completed in-flight key {n} executed again");
            }
            for (n, (req, key)) in held.iter().enumerate() {
                assert_held(&w.send(req), &format!("round {round}: held key {n}"));
                assert!(o.executions(key) <= 1, "round {round}: held key {n} executed again");
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    let (sent, took) = load.join().expect("the load thread");
    eprintln!(
        "crash rounds: {} keys completed, {} held; of the keys in flight at a crash, {answered_before} \
         were answered before it, {executed_after} executed on their retry, {held_after} held; \
         {sent} new keys sent beside them in {took:?}",
        completed.len() + completed_in_flight.len(),
        held.len()
    );
    assert!(sent > 0, "load ran beside the crashes");
    assert!(held_after >= 20, "each round held at least its gated key: {held_after} held");
}

/// A key whose claim outlived its instance: 409 `in-progress` while its lease lasts, then
/// 502 `outcome-unknown`; never forwarded.
fn assert_held(r: &Response, what: &str) {
    let held = check_problem(r, 409, "in-progress").or_else(|_| check_problem(r, 502, "outcome-unknown"));
    assert!(held.is_ok() && !r.has_header("x-origin-execution"), "{what}: held expected, got {r:?}");
}

#[test]
fn origin_that_stalls_the_body_is_outcome_unknown_and_never_retried() {
    let w = hostile_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let stall = o.gate();
    let first = w.send(&payment(&path, &key).header("x-test-stall-body-at-gate", stall.name()));
    assert_problem(&first, 502, "outcome-unknown");
    assert_eq!(stall.held(), 1, "the 502 came while the origin still stalled the body");
    assert!(
        stall.wait_abandoned(1, Duration::from_secs(60)),
        "the worker gave up on the stalled body and closed the connection (origin timeout {HOSTILE_ORIGIN_TIMEOUT_SECONDS} s)"
    );
    assert_eq!(o.executions(&key), 1);

    let retry = w.send(&payment(&path, &key));
    assert_problem(&retry, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1, "an unknown outcome is never forwarded again");

    // Once the origin has ended the stalled connection, still unknown.
    stall.release();
    assert!(stall.wait_none_held(Duration::from_secs(60)), "the origin ended the stalled answer");
    let late = w.send(&payment(&path, &key));
    assert_problem(&late, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1);
    assert_eq!(o.answers(&key), 0, "the origin never finished an answer for the key");
}

/// An answer whose head came and whose body broke off: the origin answered, so the outcome
/// is unknown and never sent again, and the log says which status the origin sent (what
/// the engineer reconciling the key needs first).
#[test]
fn an_answer_that_breaks_off_mid_body_is_outcome_unknown_and_its_status_is_logged() {
    let w = hostile_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    // The origin sends its 201's head and half its body, waits 300 ms and closes.
    let first = w.send(&payment(&path, &key).header("x-test-stall-body-ms", "300"));
    assert_problem(&first, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1);
    logs::wait_for_text(w, "origin answered 201 and its answer broke off");
    let retry = w.send(&payment(&path, &key));
    assert_problem(&retry, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1, "an unknown outcome is never forwarded again");
}

/// 503 with Retry-After is passed on as the origin sent it (header
/// included) and releases the key. (429 with Retry-After: `tests/e2e.rs`,
/// `status_429_keeps_retry_after_and_releases_the_key`.)
#[test]
fn status_503_passes_retry_after_on_and_releases_the_key() {
    let w = hostile_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let busy = w.send(&payment(&path, &key).header("x-test-status", "503").header("x-test-retry-after", "9"));
    assert_from_origin(&busy, 503);
    assert_eq!(busy.header("retry-after"), Some("9"), "Retry-After passed on: {busy:?}");
    assert!(!busy.is_replayed(), "{busy:?}");

    let retry = w.send(&payment(&path, &key));
    assert_from_origin(&retry, 201);
    assert!(!retry.is_replayed(), "the released key executes on retry: {retry:?}");
    assert_eq!(o.executions(&key), 2);
    assert_replay_of(&w.send(&payment(&path, &key)), &retry);
    assert_eq!(o.executions(&key), 2);
}

// ---------------------------------------------------------------------------------------
// Load

/// One storm request: which key, and its answer or why none came.
type Answer = (usize, Result<Response, String>);

/// Storm: 200 keys × 10 duplicates, shuffled, 32 connections at once, origin
/// delay 50 ms. Exactly one execution per key, one answer per key, no 5xx, nothing lost.
#[test]
fn storm_of_duplicates_executes_each_key_exactly_once() {
    const KEYS: usize = 200;
    const DUPLICATES: usize = 10;
    const CONNECTIONS: usize = 32;
    let w = storm_worker();
    let o = origin();
    let keys: Vec<(String, String)> = (0..KEYS).map(|_| (new_key(), new_path())).collect();
    let mut order: Vec<usize> = (0..KEYS).flat_map(|k| std::iter::repeat_n(k, DUPLICATES)).collect();
    let seed = rng::seed();
    Rng::new(seed).shuffle(&mut order);

    let order = Arc::new(order);
    let keys = Arc::new(keys);
    let next = Arc::new(AtomicUsize::new(0));
    let results: Arc<Mutex<Vec<Answer>>> = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (order, keys, next, results) = (order.clone(), keys.clone(), next.clone(), results.clone());
            let addr = w.addr;
            thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&k) = order.get(i) else { break };
                let (key, path) = &keys[k];
                let req =
                    payment(path, key).header("x-test-delay-ms", "50").timeout(Duration::from_secs(180));
                let answer = send_past_dev_proxy(addr, &req).map_err(|e| e.to_string());
                results.lock().unwrap().push((k, answer));
            })
        })
        .collect();
    for t in threads {
        t.join().expect("storm thread");
    }
    let elapsed = started.elapsed();
    let results = std::mem::take(&mut *results.lock().unwrap());

    let mut failures = Vec::new();
    let mut by_key: HashMap<usize, Vec<Response>> = HashMap::new();
    let mut lost = 0;
    for (k, answer) in results {
        match answer {
            Ok(r) => by_key.entry(k).or_default().push(r),
            Err(e) => {
                lost += 1;
                failures.push(format!("key #{k}: no answer ({e})"));
            }
        }
    }
    let answered: usize = by_key.values().map(Vec::len).sum();
    let server_errors = by_key.values().flatten().filter(|r| r.status >= 500).count();
    let replayed = by_key.values().flatten().filter(|r| r.is_replayed()).count();
    for (k, responses) in &by_key {
        let first = &responses[0];
        if responses.iter().any(|r| r.status != first.status || r.body != first.body) {
            let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
            failures.push(format!("key #{k}: answers differ (statuses {statuses:?})"));
        }
        if first.status != 201 {
            failures.push(format!("key #{k}: expected 201, got {first:?}"));
        }
    }
    let executions: Vec<usize> = keys.iter().map(|(key, _)| o.executions(key)).collect();
    let total: usize = executions.iter().sum();
    for (k, n) in executions.iter().enumerate() {
        if *n != 1 {
            failures.push(format!("key #{k}: {n} executions"));
        }
    }
    println!(
        "storm: {} requests ({KEYS} keys x {DUPLICATES}), {CONNECTIONS} connections, origin delay 50 ms: \
         {answered} answered, {lost} lost, {server_errors} 5xx, {total} executions, {replayed} marked replayed, \
         {:.1} s ({:.0} req/s), seed {seed:#x}",
        KEYS * DUPLICATES,
        elapsed.as_secs_f64(),
        (KEYS * DUPLICATES) as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(
        answered,
        KEYS * DUPLICATES,
        "every request gets an answer (TEST_SEED={seed:#x}); {}",
        failures.join("\n")
    );
    assert_eq!(server_errors, 0, "no 5xx in the storm (TEST_SEED={seed:#x})");
    assert_eq!(total, KEYS, "exactly one execution per key (TEST_SEED={seed:#x})");
    assert_eq!(
        replayed,
        KEYS * DUPLICATES - KEYS,
        "every answer but the executing one is marked replayed (TEST_SEED={seed:#x})"
    );
    assert!(failures.is_empty(), "storm failures (TEST_SEED={seed:#x}):\n{}", failures.join("\n"));
}

/// A storm of new keys against an origin with a small listen backlog (Python's
/// `http.server`, whose default backlog is 5): 100 new keys x 5 duplicates, shuffled, 25 at
/// a time, origin timeout 4 s. The full accept queue drops SYNs, which the kernel sends
/// again after 1 s, 3 s, 7 s; the origin serves every request in the end. The TCP probe must
/// not give up on a connection before the origin timeout: no key may be answered 502
/// `origin-unreachable` sooner than that (the probe used to give up at a quarter of it, and
/// 3-8 of 100 keys were refused that way in every run). No key executes twice, and a key's
/// duplicates get its one answer.
///
/// A probe that waited the whole timeout without a connection releases its key rightly: a
/// fetch would not have connected in that time either (it would have left the key unknown),
/// and an origin that accepts nothing for 4 s is unreachable by the configured measure. On a
/// quiet machine that does not happen here (0 such keys in every run before this test
/// checked the time); with the suite's other tests beside it on 2 cores, one key in one
/// fresh-clone run saw its SYN dropped at 0, 1 and 3 s. So such a key is counted and
/// printed, and what fails the test is a refusal that came before the timeout.
///
/// A backlog of 5 also bounds the origin's SYN queue, so its kernel answers some SYNs with
/// SYN cookies, and a cookie that fails to validate (`TcpExtSyncookiesFailed` in `nstat`)
/// resets the connection after the worker wrote the request. The worker cannot tell that
/// reset from one after an execution, so it holds the key unknown, rightly; the origin
/// never read it. That is rare here (3 keys in 1 of 17 runs, on a loaded machine) and no
/// probe design changes it (it happens without the probe too), so such a key may have 0
/// executions; every other key executes exactly once and is answered 201.
#[test]
fn storm_against_a_small_backlog_origin_has_no_false_origin_unreachable() {
    const KEYS: usize = 100;
    const DUPLICATES: usize = 5;
    const CONNECTIONS: usize = 25;
    const BACKLOG: u32 = 5;
    const ORIGIN_TIMEOUT_SECONDS: u64 = 4;
    let origin = BacklogOrigin::start(BACKLOG);
    let w = Worker::start(WorkerConfig {
        name: "rel-backlog-storm".into(),
        vars: vars(&[
            ("ORIGIN_URL", origin.url()),
            ("IDEMPOTENCY_TTL_SECONDS", "600".to_string()),
            ("DUPLICATE_WAIT_SECONDS", "120".to_string()),
            ("ORIGIN_TIMEOUT_SECONDS", ORIGIN_TIMEOUT_SECONDS.to_string()),
            ("SCOPE_HEADER", "Authorization".to_string()),
        ]),
        readiness: Readiness::OriginAnswers,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let keys: Vec<(String, String)> = (0..KEYS).map(|_| (new_key(), new_path())).collect();
    let mut order: Vec<usize> = (0..KEYS).flat_map(|k| std::iter::repeat_n(k, DUPLICATES)).collect();
    let seed = rng::seed();
    Rng::new(seed).shuffle(&mut order);

    let order = Arc::new(order);
    let keys = Arc::new(keys);
    let next = Arc::new(AtomicUsize::new(0));
    // Each answer with how long its request took.
    let results: Arc<Mutex<Vec<(Answer, Duration)>>> = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (order, keys, next, results) = (order.clone(), keys.clone(), next.clone(), results.clone());
            let addr = w.addr;
            thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&k) = order.get(i) else { break };
                let (key, path) = &keys[k];
                let req =
                    payment(path, key).header("x-test-delay-ms", "50").timeout(Duration::from_secs(180));
                let sent = Instant::now();
                let answer = send_past_dev_proxy(addr, &req).map_err(|e| e.to_string());
                results.lock().unwrap().push(((k, answer), sent.elapsed()));
            })
        })
        .collect();
    for t in threads {
        t.join().expect("storm thread");
    }
    let timed = std::mem::take(&mut *results.lock().unwrap());
    // The longest any request of a key waited: its executing request's, which includes the
    // probe's wait (a duplicate may have joined later).
    let mut longest_wait: HashMap<usize, Duration> = HashMap::new();
    for ((k, _), took) in &timed {
        let longest = longest_wait.entry(*k).or_default();
        *longest = (*longest).max(*took);
    }
    let results: Vec<Answer> = timed.into_iter().map(|(answer, _)| answer).collect();

    let mut failures = Vec::new();
    let mut by_key: HashMap<usize, Vec<Response>> = HashMap::new();
    for (k, answer) in results {
        match answer {
            Ok(r) => by_key.entry(k).or_default().push(r),
            Err(e) => failures.push(format!("key #{k}: no answer ({e})")),
        }
    }
    // What each key's answers were, by status and problem kind.
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    for r in by_key.values().flatten() {
        let kind = problem_kind(r).map(|kind| format!(" {kind}")).unwrap_or_default();
        *outcomes.entry(format!("{}{kind}", r.status)).or_default() += 1;
    }
    // A key refused as unreachable before the origin timeout was up: the probe gave up on a
    // connection that might still have opened. After it, the refusal is the timeout's.
    let origin_timeout = Duration::from_secs(ORIGIN_TIMEOUT_SECONDS);
    let unreachable_keys: Vec<usize> =
        by_key.iter().filter(|(_, answers)| answers.iter().any(is_unreachable)).map(|(k, _)| *k).collect();
    let premature: Vec<String> = unreachable_keys
        .iter()
        .filter(|k| longest_wait.get(k).is_none_or(|waited| *waited < origin_timeout))
        .map(|k| format!("key #{k} after {:?}", longest_wait.get(k).copied().unwrap_or_default()))
        .collect();
    // The same outcome for every duplicate: byte for byte for an answer from the origin; a
    // problem by its kind, since each names its own request (`instance`).
    let same = |a: &Response, b: &Response| {
        a.status == b.status
            && match (problem_kind(a), problem_kind(b)) {
                (Some(a), Some(b)) => a == b,
                (None, None) => a.body == b.body,
                _ => false,
            }
    };
    // A key refused as unreachable was released (nothing was sent): a later duplicate may
    // execute it, and every answer but the refusals is then that execution's one answer.
    let answered = |answers: &[Response]| -> Vec<Response> {
        answers.iter().filter(|r| !is_unreachable(r)).cloned().collect()
    };
    for (k, answers) in &by_key {
        let answers = answered(answers);
        let Some(first) = answers.first() else { continue };
        if answers.iter().any(|r| !same(r, first)) {
            let statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
            failures.push(format!("key #{k}: its answers differ (statuses {statuses:?})"));
        }
    }
    // A key held unknown executed at most once (a failed SYN cookie may have reset its
    // request before the origin read it); a key only ever refused as unreachable, never;
    // every other key exactly once, answered 201.
    let executed = origin.executions();
    let mut unknown_keys = 0;
    for (k, (key, _)) in keys.iter().enumerate() {
        let n = executed.get(key).copied().unwrap_or(0);
        let Some(answers) = by_key.get(&k) else { continue };
        let Some(first) = answered(answers).into_iter().next() else {
            if n != 0 {
                failures.push(format!("key #{k}: {n} executions, every answer 502 origin-unreachable"));
            }
            continue;
        };
        let unknown = check_problem(&first, 502, "outcome-unknown").is_ok();
        unknown_keys += usize::from(unknown);
        let expected = if unknown { n <= 1 } else { n == 1 && first.status == 201 };
        if !expected {
            failures.push(format!("key #{k}: {n} executions, answered {first:?}"));
        }
    }
    let mut outcomes: Vec<_> = outcomes.into_iter().collect();
    outcomes.sort();
    println!(
        "backlog storm: {} requests ({KEYS} keys x {DUPLICATES}), {CONNECTIONS} at a time, backlog {BACKLOG}: \
         answers {outcomes:?}; {} of {KEYS} keys got 502 origin-unreachable ({} of them before the \
         {ORIGIN_TIMEOUT_SECONDS} s origin timeout), {unknown_keys} outcome-unknown (a reset after sending); \
         seed {seed:#x}",
        KEYS * DUPLICATES,
        unreachable_keys.len(),
        premature.len(),
    );
    assert!(
        premature.is_empty(),
        "502 origin-unreachable before the origin timeout, from an origin that would have \
         served them (TEST_SEED={seed:#x}): {}; answers: {outcomes:?}",
        premature.join(", ")
    );
    assert!(failures.is_empty(), "backlog storm failures (TEST_SEED={seed:#x}):\n{}", failures.join("\n"));
}

fn is_unreachable(r: &Response) -> bool {
    check_problem(r, 502, "origin-unreachable").is_ok()
}

// ---------------------------------------------------------------------------------------
// Bounded storage, read from the SQLite files that `wrangler dev --persist-to` leaves

/// Bounded storage: keys that were only released or refused leave nothing, and
/// everything else is gone from the object's SQLite file after the TTL and the alarm.
#[test]
fn storage_is_empty_after_ttl_and_released_or_refused_keys_leave_nothing() {
    let w = storage_worker();
    let o = origin();
    let persist = w.persist_dir();
    let snap = || storage::snapshot(persist);
    let before = snap();
    assert!(before.objects.is_empty(), "a fresh instance stores no key objects: {}", before.describe());

    // Released keys (the origin answered 503 or 429): the object deletes its storage.
    let mut released = Vec::new();
    for status in ["503", "429", "503", "429"] {
        let key = new_key();
        let r = w.send(&payment(&new_path(), &key).header("x-test-status", status));
        assert_from_origin(&r, status.parse().unwrap());
        released.push(key);
    }
    let after_released = snap();
    assert!(
        after_released.non_empty().is_empty(),
        "released keys must leave nothing behind: {}",
        after_released.describe()
    );
    assert_eq!(after_released.alarms, 0, "released keys leave no alarm: {}", after_released.describe());

    // Refused before any claim (400, 413): no object is even created.
    let files_before = after_released.objects.len();
    let mut refused = 0;
    for case in bad_inputs(4096) {
        case.check(w.addr, o).unwrap_or_else(|e| panic!("{e}"));
        refused += 1;
    }
    let after_refused = snap();
    assert_eq!(
        after_refused.objects.len(),
        files_before,
        "{refused} refused requests created object files: {}",
        after_refused.describe()
    );
    assert!(after_refused.non_empty().is_empty(), "{}", after_refused.describe());

    // Stored outcomes: completed (201 and a final 500), unknown (reset after send), and a
    // 422 refused while its key was in flight.
    let mut stored_keys = Vec::new();
    for status in ["201", "201", "201", "500"] {
        let key = new_key();
        let r = w.send(&payment(&new_path(), &key).header("x-test-status", status));
        assert_from_origin(&r, status.parse().unwrap());
        stored_keys.push(key);
    }
    for _ in 0..2 {
        let key = new_key();
        let r = w.send(&payment(&new_path(), &key).header("x-test-reset", "1"));
        assert_problem(&r, 502, "outcome-unknown");
        stored_keys.push(key);
    }
    let key = new_key();
    let path = new_path();
    let gate = o.gate();
    let slow = gate.on(payment(&path, &key)).start(w.addr).expect("send the held attempt");
    gate.expect_arrival("the held attempt");
    let reused = w.send(&covered("POST", &path, &key, r#"{"amount":2}"#));
    assert_problem(&reused, 422, "key-reused");
    gate.release();
    assert_executed(&slow.finish().expect("the held attempt's answer"), 201);
    stored_keys.push(key);

    let stored = snap();
    // Every stored outcome is within its TTL (30 s) here, so the files hold exactly one
    // record row and one alarm per stored key, in one object each: nothing more for the
    // released and refused keys, nothing less for the ones the worker must remember.
    let expected = stored_keys.len() as u64;
    assert_eq!(stored.records(), expected, "one record per stored key: {}", stored.describe());
    assert_eq!(stored.alarms, expected, "one alarm per stored key: {}", stored.describe());
    assert_eq!(stored.non_empty().len() as u64, expected, "one object per stored key: {}", stored.describe());
    for object in stored.non_empty() {
        assert_eq!(object.records(), 1, "an object stores one record: {}", stored.describe());
    }
    let named: Vec<&String> = stored.non_empty().into_iter().filter_map(|o| o.name.as_ref()).collect();
    assert_eq!(
        named.len(),
        stored.non_empty().len(),
        "every object that stores something has its name stored beside it: {}",
        stored.describe()
    );
    for name in named {
        assert!(
            name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()),
            "an object name is a hash, got one of {} characters",
            name.len()
        );
    }
    for path in storage::file_names(persist) {
        let name = path.to_string_lossy();
        for key in stored_keys.iter().chain(&released) {
            assert!(!name.contains(key.as_str()), "a stored file name contains a raw key");
        }
    }

    // After the TTL (30 s), the alarms delete it all.
    let started = Instant::now();
    let deadline = Duration::from_secs(120);
    let emptied: Snapshot = loop {
        let now = snap();
        if now.non_empty().is_empty() && now.alarms == 0 {
            break now;
        }
        assert!(
            started.elapsed() < deadline,
            "storage not empty {deadline:?} after the TTL: {}",
            now.describe()
        );
        thread::sleep(Duration::from_secs(1));
    };
    println!(
        "storage: {} object files, all empty, no pending alarm, {:.0} s after the last outcome was stored",
        emptied.objects.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(emptied.records(), 0);
    for key in &stored_keys {
        assert!(o.executions(key) >= 1);
    }
}

// ---------------------------------------------------------------------------------------
// Hostile input

/// Keys and bodies that must be refused with a problem (or by the HTTP server in front),
/// with nothing forwarded, and the worker still serving afterwards.
#[test]
fn hostile_keys_and_bodies_are_refused_and_nothing_is_forwarded() {
    let w = hostile_worker();
    let o = origin();
    let mut failures = Vec::new();
    let cases = bad_inputs(MAX_BODY_BYTES);
    for case in &cases {
        if let Err(e) = case.check(w.addr, o) {
            failures.push(e);
        }
        assert_still_serves(w, case.label);
    }
    assert!(
        failures.is_empty(),
        "{} of {} hostile inputs mishandled:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Framing a client can lie with. `Content-Length` frames the body, so a small one makes
/// the surplus bytes not part of the request: only the declared bytes are forwarded.
#[test]
fn lying_or_broken_framing_never_forwards_more_than_the_declared_body() {
    let w = hostile_worker();
    let o = origin();

    // Declares 10 bytes, sends 300 KB (over the limit).
    let path = new_path();
    let key = new_key();
    let mut raw = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {DEFAULT_CREDENTIAL}\r\nIdempotency-Key: {key}\r\nContent-Type: text/plain\r\nContent-Length: 10\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    raw.extend(vec![b'x'; MAX_BODY_BYTES + 40_000]);
    let r = send_raw(w.addr, &raw, Duration::from_secs(60)).expect("an answer to a small Content-Length");
    let json = assert_from_origin(&r, 201);
    assert_eq!(json["body_len"], 10, "only the declared bytes are the body");
    assert_eq!(o.executions_at(&path), 1);
    assert_still_serves(w, "a lying small Content-Length");

    // Declares more than the limit, sends 3 bytes and ends the stream. The worker refuses
    // on the declared length, after reading what comes of the body, which ends short; then
    // wrangler dev's proxy may answer 503 text/plain ("Your worker restarted mid-request")
    // for the broken request. Either way nothing is forwarded.
    let path = new_path();
    let raw = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {DEFAULT_CREDENTIAL}\r\nIdempotency-Key: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\nabc",
        new_key(),
        MAX_BODY_BYTES + 1
    );
    let r = send_raw_then_close(w.addr, raw.as_bytes(), Duration::from_secs(60)).expect("an answer");
    let refused = check_problem(&r, 413, "body-too-large").is_ok() || (r.status == 503 && !is_problem(&r));
    assert!(refused, "a lying large Content-Length: expected 413, or wrangler dev's 503; got {r:?}");
    assert_eq!(o.executions_at(&path), 0);
    assert_still_serves(w, "a lying large Content-Length");

    // Malformed framing never reaches the worker: workerd's HTTP parser refuses it (it
    // answers 500 with no body type of ours; Cloudflare's edge answers 400).
    for (label, header) in [
        ("two different Content-Length values", "Content-Length: 2\r\nContent-Length: 3"),
        ("a negative Content-Length", "Content-Length: -5"),
        ("a Content-Length that is not a number", "Content-Length: 12abc"),
    ] {
        let path = new_path();
        let raw = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {DEFAULT_CREDENTIAL}\r\nIdempotency-Key: {}\r\n{header}\r\nConnection: close\r\n\r\n{{}}x",
            new_key()
        );
        match send_raw(w.addr, raw.as_bytes(), Duration::from_secs(60)) {
            Ok(r) => assert!(
                matches!(r.status, 400 | 500) && !is_problem(&r),
                "{label}: expected the HTTP layer's 400 or 500, got {r:?}"
            ),
            Err(e) => panic!("{label}: no answer ({e})"),
        }
        assert_eq!(o.executions_at(&path), 0, "{label}: forwarded");
        assert_still_serves(w, label);
    }
}

#[test]
fn invalid_utf8_json_body_is_forwarded_and_fingerprinted_raw() {
    let w = hostile_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let body = b"{\"note\":\"\xff\xfe\xc3\x28\"}".to_vec();
    let req =
        request("POST", &path).header("Idempotency-Key", &key).header("Content-Type", "application/json");
    let first = w.send(&req.clone().body(body.clone()));
    let json = assert_from_origin(&first, 201);
    assert_eq!(json["body_len"], body.len(), "forwarded as sent");
    assert_replay_of(&w.send(&req.clone().body(body.clone())), &first);
    // Other invalid bytes are another payload: the raw bytes are the fingerprint.
    let other = w.send(&req.clone().body(b"{\"note\":\"\xff\xfd\xc3\x28\"}".to_vec()));
    assert_problem(&other, 422, "key-reused");
    assert_eq!(o.executions(&key), 1);
    assert_still_serves(w, "an invalid UTF-8 JSON body");
}

#[test]
fn json_nested_100000_levels_is_forwarded_once_and_replayed() {
    let w = hostile_worker();
    let o = origin();
    let arrays = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let objects = format!("{}1{}", "{\"a\":".repeat(40_000), "}".repeat(40_000));
    for (label, body) in [("arrays", arrays), ("objects", objects)] {
        assert!(body.len() <= MAX_BODY_BYTES);
        let key = new_key();
        let path = new_path();
        let req = request("POST", &path).header("Idempotency-Key", &key).json(&body);
        let first = w.send(&req);
        let json = assert_from_origin(&first, 201);
        assert_eq!(json["body_len"], body.len(), "{label}: forwarded whole");
        assert_replay_of(&w.send(&req), &first);
        // Beyond the canonicaliser's depth bound the raw bytes are the fingerprint, so
        // the same value with whitespace added is another payload.
        let spaced = format!(" {body}");
        let other = w.send(&request("POST", &path).header("Idempotency-Key", &key).json(&spaced));
        assert_problem(&other, 422, "key-reused");
        assert_eq!(o.executions(&key), 1, "{label}");
        assert_still_serves(w, label);
    }
}

/// `src/core/primitives/canonical_json.rs`: numbers are kept as written (never rounded), members are
/// sorted by key with a stable sort, so duplicate keys keep their order.
#[test]
fn huge_numbers_and_duplicate_keys_have_a_defined_fingerprint() {
    let w = hostile_worker();
    let o = origin();
    let send = |path: &str, key: &str, body: &str| {
        w.send(&request("POST", path).header("Idempotency-Key", key).json(body))
    };

    let key = new_key();
    let path = new_path();
    let huge = r#"{"amount":123456789012345678901234567890.000000000000000000001e999999,"fee":-0.0}"#;
    let first = send(&path, &key, huge);
    assert_from_origin(&first, 201);
    assert_replay_of(&send(&path, &key, huge), &first);
    let reordered =
        r#"{ "fee": -0.0, "amount": 123456789012345678901234567890.000000000000000000001e999999 }"#;
    assert_replay_of(&send(&path, &key, reordered), &first);
    for other in [
        r#"{"amount":1.2345678901234568e1000028,"fee":-0.0}"#,
        r#"{"amount":123456789012345678901234567890.000000000000000000001e999999,"fee":0}"#,
    ] {
        assert_problem(&send(&path, &key, other), 422, "key-reused");
    }
    assert_eq!(o.executions(&key), 1);

    let key = new_key();
    let path = new_path();
    let first = send(&path, &key, r#"{"a":1,"b":0,"a":2}"#);
    assert_from_origin(&first, 201);
    assert_replay_of(&send(&path, &key, r#"{"a":1,"b":0,"a":2}"#), &first);
    // Members sorted, duplicates in their order: the same payload.
    assert_replay_of(&send(&path, &key, r#"{"b":0,"a":1,"a":2}"#), &first);
    // The duplicates the other way round: parsers that keep the last one disagree.
    assert_problem(&send(&path, &key, r#"{"a":2,"b":0,"a":1}"#), 422, "key-reused");
    assert_problem(&send(&path, &key, r#"{"a":2,"b":0}"#), 422, "key-reused");
    assert_eq!(o.executions(&key), 1);
}

/// Long paths and large header sets get the answer `docs/reliability.md` gives each:
/// 8 KB and 60 KB paths, 1,000 headers of 100 bytes and one 100 KB header execute and
/// replay; a 200 KB path and 5,000 headers of 50 bytes are over workerd's header limit (431
/// from its HTTP server, nothing forwarded). Never a hang, never a 5xx.
#[test]
fn very_long_paths_and_huge_header_sets_get_a_clean_answer() {
    let w = hostile_worker();
    let o = origin();
    let check = |label: String, path: &str, req: Request, key: &str, executes: bool| {
        let req = req.timeout(Duration::from_secs(120));
        let r = w.send(&req);
        if executes {
            assert_executed(&r, 201);
            assert_replay_of(&w.send(&req), &r);
            assert_eq!(o.executions(key), 1, "{label}");
        } else {
            assert_eq!(r.status, 431, "{label}: expected 431 from workerd's HTTP server, got {r:?}");
            assert!(!is_problem(&r), "{label}: {r:?}");
            assert_eq!(o.executions_at(path), 0, "{label}: forwarded");
        }
        assert_still_serves(w, &label);
    };
    for (len, executes) in [(8_000usize, true), (60_000, true), (200_000, false)] {
        let key = new_key();
        let path = format!("{}/{}", new_path(), "a".repeat(len));
        check(format!("path of {len} bytes"), &path, payment(&path, &key), &key, executes);
    }
    for (count, size, executes) in [(1000usize, 100usize, true), (1, 100_000, true), (5000, 50, false)] {
        let key = new_key();
        let path = new_path();
        let mut req = payment(&path, &key);
        for i in 0..count {
            req = req.header(&format!("x-extra-{i}"), "v".repeat(size));
        }
        check(format!("{count} headers of {size} bytes"), &path, req, &key, executes);
    }
}

/// The same key under several callers (`SCOPE_HEADER` values, the last one the support
/// client's default credential): one
/// execution each, and each caller only ever gets its own answer. Object names are hashes:
/// no file name or stored object name holds the key or a credential.
#[test]
fn one_key_under_different_scopes_executes_separately_and_never_crosses() {
    let w = hostile_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let callers: Vec<Option<String>> = vec![
        Some(new_credential("alice")),
        Some(new_credential("bob")),
        Some(format!("Basic {}", secret("carol"))),
        None,
    ];
    let request = |caller: &Option<String>| {
        let req = payment(&path, &key);
        match caller {
            Some(auth) => req.set_header("Authorization", auth),
            None => req.without_header("Authorization"),
        }
    };
    let firsts: Vec<Response> = callers.iter().map(|c| w.send(&request(c))).collect();
    let executions: Vec<String> =
        firsts.iter().map(|r| assert_executed(r, 201)["execution"].to_string()).collect();
    let mut distinct = executions.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), callers.len(), "one execution per caller");
    assert_eq!(o.executions(&key), callers.len());

    // Retries, interleaved and concurrent: each caller gets its own answer only.
    let retries: Vec<_> = (0..3)
        .flat_map(|_| callers.iter().enumerate())
        .map(|(i, c)| {
            let req = request(c);
            let addr = w.addr;
            thread::spawn(move || (i, send_past_dev_proxy(addr, &req)))
        })
        .collect();
    for t in retries {
        let (i, r) = t.join().expect("retry thread");
        let r = r.expect("an answer");
        assert_replay_of(&r, &firsts[i]);
    }
    assert_eq!(o.executions(&key), callers.len());

    let credentials: Vec<&str> = callers.iter().flatten().map(|c| c.split(' ').nth(1).unwrap()).collect();
    let snapshot = storage::snapshot(w.persist_dir());
    for path in storage::file_names(w.persist_dir()) {
        let name = path.to_string_lossy();
        assert!(!name.contains(key.as_str()), "a file name holds the raw key");
        for c in &credentials {
            assert!(!name.contains(c), "a file name holds a credential");
        }
    }
    // miniflare stores the name each object was addressed by: it must be there (else this
    // check would be empty), and a hash.
    let names: Vec<&String> = snapshot.objects.iter().filter_map(|o| o.name.as_ref()).collect();
    assert!(!names.is_empty(), "no stored object name to check: {}", snapshot.describe());
    for name in names {
        assert!(!name.contains(key.as_str()) && credentials.iter().all(|c| !name.contains(c)));
        assert!(name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()), "object name is a hash");
    }
}

/// Logs: workerd's captured output holds no raw key, no Authorization value and
/// no body, whatever the request did; and no panic was ever reported. Read once a sentinel
/// line sent after everything else is in the log.
#[test]
fn logs_hold_no_keys_credentials_or_bodies_and_no_panic() {
    let w = hostile_worker();
    let o = origin();
    let auth = new_credential("token");
    let marker = secret("body");
    let body = format!(r#"{{"amount":1000,"note":"{marker}"}}"#);
    // Executed and replayed, then the key reused.
    let k = new_key();
    let logged = |k: &str, body: &str| {
        w.send(&covered("POST", "/v1/logs", k, body).set_header("Authorization", &auth))
    };
    let first = logged(&k, &body);
    assert_executed(&first, 201);
    assert_replay_of(&logged(&k, &body), &first);
    assert_problem(&logged(&k, r#"{"amount":1}"#), 422, "key-reused");
    // Origin outcomes, a refused body, invalid keys.
    let send = |key: String, extra: &[(&str, &str)], body: &str| {
        let mut req = covered("POST", &new_path(), &key, body).set_header("Authorization", &auth);
        for (n, v) in extra {
            req = req.header(n, v);
        }
        w.send(&req)
    };
    assert_problem(&send(new_key(), &[("x-test-reset", "1")], &body), 502, "outcome-unknown");
    assert_from_origin(&send(new_key(), &[("x-test-status", "503")], &body), 503);
    assert_from_origin(&send(new_key(), &[("x-test-status", "400")], &body), 400);
    let big = format!(r#"{{"note":"{marker}","pad":"{}"}}"#, "x".repeat(MAX_BODY_BYTES));
    assert_problem(&send(new_key(), &[], &big), 413, "body-too-large");
    assert_problem(&send(format!("{}\x01", new_key()), &[], &body), 400, "invalid-key");
    assert_problem(&send(format!("{}-clé", new_key()), &[], &body), 400, "invalid-key");
    // Every hostile input, too.
    for case in &bad_inputs(MAX_BODY_BYTES) {
        let _ = case.send(w.addr);
    }
    assert_eq!(o.executions_at("/v1/logs"), 1);

    logs::sentinel(w, o);
    assert!(w.log_contents().contains("\"event\":\"idempotency\""), "the log holds the worker's lines");
    logs::scan_for_leaks(w, &[]).unwrap_or_else(|e| panic!("{e}"));
}

/// A Rust panic traps the Wasm instance (the release build aborts on panic), and a trapped
/// instance's memory is not to be trusted again. The entry module (src/entry.mjs) resets
/// the instance on the next call, and the key's object builds a new Rust half, which reads
/// the key's record from storage. Proven here with the test-only `PANIC_FAULT_INJECTION`
/// (a request with `x-test-panic: worker` or `object` panics there): after a panic in the
/// Worker and after one in the object, the key's stored outcome is replayed, nothing is
/// executed again, a new key executes once, and neither panic reached the origin.
#[test]
fn after_a_panic_in_the_worker_or_the_object_the_instance_recovers_and_replays() {
    let o = Origin::start();
    let vars = [("ORIGIN_URL", o.url()), ("PANIC_FAULT_INJECTION", "1".to_string())]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let w = Worker::start(WorkerConfig {
        name: "panics-on-purpose".into(),
        vars,
        readiness: Readiness::OriginAnswers,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let key = new_key();
    let request = payment(&new_path(), &key);
    let first = w.send(&request);
    assert_executed(&first, 201);

    for site in ["worker", "object"] {
        let trapped = w.send(&request.clone().header("x-test-panic", site));
        assert!(trapped.status >= 500, "a panic in the {site} is a server error: {trapped:?}");
        assert!(
            !trapped.has_header("x-origin-execution"),
            "a panic in the {site} reached the origin: {trapped:?}"
        );
        logs::wait_for_text(
            &w,
            &format!(
                "PANIC_FAULT_INJECTION: the {} panics on purpose",
                if site == "worker" { "Worker" } else { "object" }
            ),
        );
        let replay = w.send(&request);
        assert_replay_of(&replay, &first);
        assert_eq!(o.executions(&key), 1, "after a panic in the {site}: executed again");
    }
    logs::wait_for_text(&w, "resetting the Wasm instance after a trap");

    let other = new_key();
    let fresh = w.send(&payment(&new_path(), &other));
    assert_executed(&fresh, 201);
    assert_eq!(o.executions(&other), 1);
    assert_eq!(o.executions(&key), 1);

    // The log scans let these panics pass, and only these: one more panic of any other
    // kind in the same log is reported.
    let log = w.log_contents();
    assert_eq!(logs::unexpected_panic_signs(&log), Vec::<&str>::new());
    logs::scan_for_leaks(&w, &[]).unwrap_or_else(|e| panic!("{e}"));
    let with_another = format!("{log}\npanicked at src/runtime/object.rs:1:1:\n  something else\n");
    assert_eq!(logs::unexpected_panic_signs(&with_another), vec!["panicked at", "RuntimeError: unreachable"]);
    let unannounced = log.replace("\"panics_on_request\":1", "\"panics_on_request\":0");
    assert!(!logs::unexpected_panic_signs(&unannounced).is_empty());
}
