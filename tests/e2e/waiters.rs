//! Duplicates that wait on an attempt which then fails: released by a 429 or 503, reset
//! after the request was sent, or timed out. The origin holds the first attempt until the
//! admin view counts every duplicate among its waiters, so each of them has certainly
//! joined; then the attempt ends, and every waiter's answer is checked, and that none is
//! left waiting in the object.
//!
//! Instance: `waiters_worker()`, duplicate wait 60 s (longer than the origin timeout, so
//! that waiters see a timeout end the attempt), with the admin API. The origin timeout
//! (`ORIGIN_TIMEOUT`) must outlast the duplicates' joining, or a held attempt meant to be
//! released would time out first: on a loaded machine that took more than 3 s.

use std::sync::OnceLock;
use std::time::Duration;

use crate::basics::{fresh_object, wait_for_waiters};
use crate::support::assert::{assert_executed, assert_from_origin, assert_problem, retry_after_seconds};
use crate::support::http::{Request, Response};
use crate::support::logs;
use crate::support::origin::Origin;
use crate::support::requests::{new_key, new_path, payment};
use crate::support::worker::{shared, Readiness, Worker, WorkerConfig};

const WAITERS: usize = 4;
/// The worker's origin timeout: what the timed-out case waits for, and the time every
/// duplicate has to join a held attempt.
const ORIGIN_TIMEOUT: Duration = Duration::from_secs(15);
const TOKEN: &str = "e2e-waiters-admin-token-91b2-0123456789abcdef";

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn waiters_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        let vars = [
            ("ORIGIN_URL", origin().url()),
            ("DUPLICATE_WAIT_SECONDS", "60".to_string()),
            ("ORIGIN_TIMEOUT_SECONDS", ORIGIN_TIMEOUT.as_secs().to_string()),
            ("ADMIN_TOKEN", TOKEN.to_string()),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        Worker::start(WorkerConfig { name: "waiters".into(), vars, readiness: Readiness::OriginAnswers })
    })
}

fn admin(method: &str, object: &str, query: &str) -> Request {
    Request::new(method, &format!("/__idempotency/records/{object}{query}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    Released429,
    Released503,
    Reset,
    Timeout,
}

/// Holds a first attempt that ends as `end`, with `WAITERS` duplicates waiting on it.
/// Returns the first caller's answer and the waiters' answers, after checking that no
/// waiter is left in the object.
fn run(end: End) -> (Response, Vec<Response>, String, String) {
    let (w, o) = (waiters_worker(), origin());
    let key = new_key();
    let req = payment(&new_path(), &key);
    let object = fresh_object(w, &req, admin);
    let gate = o.gate();
    let first = match end {
        End::Released429 => req.clone().header("x-test-status", "429").header("x-test-retry-after", "7"),
        End::Released503 => req.clone().header("x-test-status", "503").header("x-test-retry-after", "7"),
        End::Reset => req.clone().header("x-test-reset", "1"),
        End::Timeout => req.clone(),
    };
    let first = gate.on(first).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");
    let waiting: Vec<_> = (0..WAITERS).map(|_| req.start(w.addr).expect("send a duplicate")).collect();
    wait_for_waiters(w, &object, WAITERS as u64, admin);
    if end == End::Timeout {
        // The origin keeps holding: the worker's origin timeout ends the attempt.
        let within = ORIGIN_TIMEOUT + Duration::from_secs(60);
        assert!(gate.wait_abandoned(1, within), "the worker gave up on the origin");
    } else {
        gate.release();
    }
    let first = first.finish().expect("the first attempt's answer");
    let answers: Vec<Response> =
        waiting.into_iter().map(|waiter| waiter.finish().expect("every waiter is answered")).collect();
    gate.release();

    let view = w.send(&admin("GET", &object, "")).json();
    assert_eq!(view["waiters"], 0, "{end:?}: no waiter left behind: {view}");
    assert!(view["executing_now"] != true, "{end:?}: nothing runs any more: {view}");
    let lines = logs::wait_for_lines_of(w, &object, 2 + WAITERS);
    let coalesced = lines.iter().filter(|line| line["decision"] == "coalesced").count();
    assert_eq!(coalesced, WAITERS, "{end:?}: every waiter logged as coalesced: {lines:?}");
    (first, answers, key, view["state"].as_str().unwrap_or_default().to_string())
}

/// A 429 or 503 releases the key: the first caller gets the origin's answer; every waiter
/// gets the same answer (status, `Retry-After`, body), marked replayed; the key is free.
fn released(end: End, status: u16) {
    let (first, answers, key, state) = run(end);
    let (w, o) = (waiters_worker(), origin());
    assert_executed(&first, status);
    assert_eq!(retry_after_seconds(&first), 7, "{first:?}");
    for waiter in &answers {
        assert_from_origin(waiter, status);
        assert_eq!(waiter.body, first.body, "{end:?}: the waiter gets the attempt's answer: {waiter:?}");
        assert!(waiter.is_replayed(), "{end:?}: not the waiter's own execution: {waiter:?}");
        assert_eq!(retry_after_seconds(waiter), 7, "{waiter:?}");
    }
    assert_eq!(state, "absent", "{end:?}: released");
    assert_eq!(o.executions(&key), 2, "{end:?}: the marker execution and the held attempt");
    let again = w.send(&payment(&first_path(&first), &key));
    assert_executed(&again, 201);
    assert_eq!(o.executions(&key), 3, "{end:?}: the released key executes on the next request");
}

/// The path the origin saw for this answer.
fn first_path(r: &Response) -> String {
    r.json()["path"].as_str().unwrap_or_default().to_string()
}

/// A reset or a timeout leaves the outcome unknown: the first caller and every waiter get
/// 502 outcome-unknown, and the key is held.
fn unknown(end: End) {
    let (first, answers, key, state) = run(end);
    assert_problem(&first, 502, "outcome-unknown");
    for waiter in &answers {
        assert_problem(waiter, 502, "outcome-unknown");
        assert_eq!(waiter.body, first.body, "{end:?}: the same problem: {waiter:?}");
    }
    assert_eq!(state, "unknown", "{end:?}: held");
    assert_eq!(origin().executions(&key), 2, "{end:?}: the marker execution and the held attempt");
}

#[test]
fn waiters_of_an_attempt_released_by_429_get_its_answer_and_the_key_is_free() {
    released(End::Released429, 429);
}

#[test]
fn waiters_of_an_attempt_released_by_503_get_its_answer_and_the_key_is_free() {
    released(End::Released503, 503);
}

#[test]
fn waiters_of_an_attempt_reset_after_send_get_outcome_unknown() {
    unknown(End::Reset);
}

#[test]
fn waiters_of_an_attempt_that_timed_out_get_outcome_unknown() {
    unknown(End::Timeout);
}

/// The waiter cap end to end (`MAX_WAITERS_PER_KEY`, here 2): once two duplicates wait on
/// the held attempt, a third is told to come back (409 + `Retry-After`) at once instead of
/// waiting; the two waiters get the answer, and nothing executes twice.
#[test]
fn past_the_waiter_cap_a_duplicate_gets_409_at_once() {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    let o = origin();
    let w = shared(&CELL, || {
        let vars = [
            ("ORIGIN_URL", o.url()),
            ("DUPLICATE_WAIT_SECONDS", "60".to_string()),
            ("MAX_WAITERS_PER_KEY", "2".to_string()),
            ("ADMIN_TOKEN", TOKEN.to_string()),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        Worker::start(WorkerConfig { name: "waiter-cap".into(), vars, readiness: Readiness::OriginAnswers })
    });
    let key = new_key();
    let req = payment(&new_path(), &key);
    let object = fresh_object(w, &req, admin);
    let gate = o.gate();
    let first = gate.on(req.clone()).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");
    let waiting: Vec<_> = (0..2).map(|_| req.start(w.addr).expect("send a duplicate")).collect();
    wait_for_waiters(w, &object, 2, admin);
    // The attempt is still held: this answer cannot come from its outcome.
    let turned_away = w.send(&req);
    assert_problem(&turned_away, 409, "in-progress");
    assert!(retry_after_seconds(&turned_away) >= 1, "{turned_away:?}");
    gate.release();
    let first = first.finish().expect("the first attempt's answer");
    assert_executed(&first, 201);
    for waiter in waiting {
        let waiter = waiter.finish().expect("every waiter is answered");
        assert!(waiter.is_replayed() && waiter.body == first.body, "{waiter:?}");
    }
    assert_eq!(o.executions(&key), 2, "the marker execution and the held attempt, nothing more");
}

/// `MAX_WAITING_BYTES`: the body bytes that duplicates waiting on one execution may bring
/// in. Past it a duplicate gets 409 with `Retry-After` at once, instead of waiting, and
/// nothing is forwarded; the duplicate that fit still gets the answer.
#[test]
fn a_duplicate_past_max_waiting_bytes_gets_409_at_once_and_the_others_still_wait() {
    crate::support::worker::require_build();
    let o = origin();
    let vars = [
        ("ORIGIN_URL", o.url()),
        ("DUPLICATE_WAIT_SECONDS", "60".to_string()),
        ("ORIGIN_TIMEOUT_SECONDS", "30".to_string()),
        ("ADMIN_TOKEN", TOKEN.to_string()),
        ("MAX_WAITING_BYTES", "1000".to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    let w = &Worker::start(WorkerConfig {
        name: "waiting-bytes".into(),
        vars,
        readiness: Readiness::OriginAnswers,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let key = new_key();
    // 600 bytes of body: one waiter fits under 1000, two do not.
    let body = format!(r#"{{"amount":1000,"memo":"{}"}}"#, "m".repeat(600 - 25));
    assert_eq!(body.len(), 600);
    let req = crate::support::requests::covered("POST", &new_path(), &key, &body);
    let object = fresh_object(w, &req, admin);
    let gate = o.gate();
    let first = gate.on(req.clone()).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");
    let fits = req.start(w.addr).expect("send a duplicate that fits");
    wait_for_waiters(w, &object, 1, admin);
    let refused = w.send(&req);
    assert_problem(&refused, 409, "in-progress");
    assert!(retry_after_seconds(&refused) >= 1, "{refused:?}");
    assert_eq!(gate.arrived(), 1, "the refused duplicate forwarded nothing");
    gate.release();
    let first = first.finish().expect("the first attempt's answer");
    assert_executed(&first, 201);
    let waited = fits.finish().expect("the waiter's answer");
    assert!(waited.is_replayed() && waited.body == first.body, "{waited:?}");
    assert_eq!(o.executions(&key), 2, "the marker execution and the held attempt, nothing else");
}
