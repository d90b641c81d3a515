//! The basics, end to end: keys, execute and replay, coalescing, fingerprints, origin
//! outcomes, the body limit and the TTL.
//!
//! Instances shared between the tests of this module:
//! - `main_worker()`: the shared origin, TTL 600 s, duplicate wait 5 s, origin timeout 12 s,
//!   4096-byte body limit, scope header `Authorization`, and the admin API under a custom
//!   prefix (`ADMIN_PATH_PREFIX`), with its token;
//! - `short_ttl_worker()`: the same with a 10 s TTL;
//! - `limits_worker()`: the main configuration again, only for the chunked 413 test;
//! - `refused_worker()`: its origin URL names a loopback port where nothing listens until
//!   the test starts an origin there.
//!
//! Every test uses its own keys and paths, so the tests never share a key.

use std::sync::{Arc, Barrier, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert::{
    assert_executed, assert_from_origin, assert_problem, assert_replay_of, check_problem,
};
use crate::support::http::{Request, Response};
use crate::support::logs;
use crate::support::origin::Origin;
use crate::support::requests::{covered, new_credential, new_key, new_path, payment, request};
use crate::support::worker::{free_port, shared, Readiness, Worker, WorkerConfig};

pub const MAX_BODY_BYTES: usize = 4096;
pub const DUPLICATE_WAIT_SECONDS: u64 = 5;
const SHORT_TTL_SECONDS: u64 = 10;
pub const ADMIN_PREFIX: &str = "/__e2e-admin/";
pub const ADMIN_TOKEN: &str = "e2e-main-admin-token-5d1c9a-0123456789abcdef";

// ---------------------------------------------------------------------------------------
// Shared instances

pub fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn vars(origin_url: &str, ttl_seconds: u32) -> Vec<(String, String)> {
    [
        ("ORIGIN_URL", origin_url.to_string()),
        ("IDEMPOTENCY_TTL_SECONDS", ttl_seconds.to_string()),
        ("DUPLICATE_WAIT_SECONDS", DUPLICATE_WAIT_SECONDS.to_string()),
        ("ORIGIN_TIMEOUT_SECONDS", "12".to_string()),
        ("MAX_BODY_BYTES", MAX_BODY_BYTES.to_string()),
        ("SCOPE_HEADER", "Authorization".to_string()),
        ("ADMIN_PATH_PREFIX", ADMIN_PREFIX.to_string()),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

/// An instance in front of the shared origin with the standard variables and this TTL.
fn standard(
    cell: &'static OnceLock<Result<Worker, String>>,
    name: &str,
    ttl_seconds: u32,
) -> &'static Worker {
    shared(cell, || {
        Worker::start(WorkerConfig {
            name: name.into(),
            vars: vars(&origin().url(), ttl_seconds),
            readiness: Readiness::OriginAnswers,
        })
    })
}

pub fn main_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    standard(&CELL, "main", 600)
}

fn short_ttl_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    standard(&CELL, "short-ttl", SHORT_TTL_SECONDS as u32)
}

/// The main configuration again, for the chunked-body limit test alone.
fn limits_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    standard(&CELL, "limits", 600)
}

/// A worker whose origin port has nothing listening (until a test starts an origin there).
fn refused_worker() -> &'static (Worker, u16) {
    static CELL: OnceLock<Result<(Worker, u16), String>> = OnceLock::new();
    shared(&CELL, || {
        let port = free_port();
        let worker = Worker::start(WorkerConfig {
            name: "refused".into(),
            vars: vars(&format!("http://127.0.0.1:{port}"), 600),
            readiness: Readiness::AnyResponse,
        })?;
        Ok((worker, port))
    })
}

/// A worker with an invalid variable: it must refuse everything and forward nothing.
fn misconfigured_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        let mut vars = vars(&origin().url(), 600);
        for (name, value) in &mut vars {
            if name == "IDEMPOTENCY_TTL_SECONDS" {
                *value = "one day".to_string();
            }
        }
        Worker::start(WorkerConfig { name: "misconfigured".into(), vars, readiness: Readiness::AnyResponse })
    })
}

// ---------------------------------------------------------------------------------------
// Helpers

/// An admin call on the main instance.
pub fn admin(method: &str, object: &str, query: &str) -> Request {
    Request::new(method, &format!("{ADMIN_PREFIX}records/{object}{query}"))
        .header("Authorization", format!("Bearer {ADMIN_TOKEN}"))
}

/// The admin view of an object of the main instance.
pub fn inspect(w: &Worker, object: &str) -> serde_json::Value {
    let r = w.send(&admin("GET", object, ""));
    assert_eq!(r.status, 200, "admin inspect: {r:?}");
    r.json()
}

/// The object id of `request`'s key on an instance with the admin API, with the key
/// made fresh again: the request executes once with a marker status (its log line names
/// the object), and the record is purged. Returns the object id.
pub fn fresh_object(
    w: &Worker,
    request: &Request,
    admin_call: impl Fn(&str, &str, &str) -> Request,
) -> String {
    let object = logs::object_of(w, request);
    // The marker record is completed: purging it needs force.
    let purged = w.send(&admin_call("DELETE", &object, "?force=true"));
    assert_eq!(purged.status, 200, "purge of the marker record: {purged:?}");
    object
}

/// Waits until `object` has `n` duplicates waiting on its running execution.
pub fn wait_for_waiters(w: &Worker, object: &str, n: u64, admin_call: impl Fn(&str, &str, &str) -> Request) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let view = w.send(&admin_call("GET", object, "")).json();
        if view["waiters"].as_u64() == Some(n) {
            assert_eq!(view["executing_now"], true, "{view}");
            return;
        }
        assert!(Instant::now() < deadline, "{n} waiters never reached the object: {view}");
        thread::sleep(Duration::from_millis(50));
    }
}

fn header_is(headers: &[(String, String)], name: &str) -> Vec<String> {
    headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone()).collect()
}

// ---------------------------------------------------------------------------------------
// Keys

#[test]
fn missing_key_is_rejected_and_nothing_is_forwarded() {
    let w = main_worker();
    let o = origin();
    for method in ["POST", "PATCH"] {
        let path = new_path();
        let r = w.send(&request(method, &path).json(r#"{"amount":1}"#));
        assert_problem(&r, 400, "missing-key");
        assert_eq!(o.executions_at(&path), 0, "{method} without a key must not reach the origin");
    }
}

#[test]
fn invalid_keys_are_rejected_and_nothing_is_forwarded() {
    let w = main_worker();
    let o = origin();
    let too_long = format!("{}{}", new_key(), "k".repeat(256));
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("empty", vec![b"".to_vec()]),
        ("whitespace only", vec![b"   ".to_vec()]),
        ("256+ characters", vec![too_long.as_bytes().to_vec()]),
        ("control character 0x01", vec![format!("{}\x01x", new_key()).into_bytes()]),
        ("DEL 0x7f", vec![format!("{}\x7fx", new_key()).into_bytes()]),
        ("tab inside", vec![format!("{}\tx", new_key()).into_bytes()]),
        ("non-ASCII (UTF-8)", vec![format!("{}-clé", new_key()).into_bytes()]),
        ("sf-string with a bad escape", vec![b"\"a\\x\"".to_vec()]),
        ("unterminated sf-string", vec![format!("\"{}", new_key()).into_bytes()]),
        ("two Idempotency-Key headers", vec![new_key().into_bytes(), new_key().into_bytes()]),
    ];
    let mut failures = Vec::new();
    for (label, values) in cases {
        let path = new_path();
        let mut req = request("POST", &path).json(r#"{"amount":1}"#);
        for v in &values {
            req = req.header("Idempotency-Key", v);
        }
        let r = w.send(&req);
        if let Err(e) = check_problem(&r, 400, "invalid-key") {
            failures.push(format!("{label}: {e}"));
        }
        let forwarded = o.executions_at(&path);
        if forwarded != 0 {
            failures.push(format!("{label}: forwarded to the origin {forwarded} time(s)"));
        }
    }
    assert!(failures.is_empty(), "invalid keys:\n{}", failures.join("\n"));
}

#[test]
fn longest_valid_key_is_accepted() {
    let w = main_worker();
    let o = origin();
    let base = new_key();
    let key = format!("{base}{}", "k".repeat(255 - base.len()));
    assert_eq!(key.len(), 255);
    let req = payment(&new_path(), &key);
    let first = w.send(&req);
    assert_from_origin(&first, 201);
    let second = w.send(&req);
    assert_replay_of(&second, &first);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn quoted_and_bare_forms_are_one_key() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let body = r#"{"amount":5}"#;
    let quoted = w.send(&request("POST", &path).header("Idempotency-Key", format!("\"{key}\"")).json(body));
    assert_from_origin(&quoted, 201);
    assert!(!quoted.is_replayed(), "first attempt marked replayed: {quoted:?}");
    let bare = w.send(&request("POST", &path).header("Idempotency-Key", &key).json(body));
    assert_replay_of(&bare, &quoted);
    assert_eq!(o.executions(&key), 1, "\"k\" and k must be one key");
    // And one spelling at the origin: the bare one, whatever the client sent.
    let forwarded = o.last_headers(&key).expect("origin saw the key");
    assert_eq!(header_is(&forwarded, "idempotency-key"), vec![key.clone()], "{forwarded:?}");
}

// ---------------------------------------------------------------------------------------
// Execute and replay

#[test]
fn first_attempt_executes_and_retry_replays_stored_response() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = format!("{}?currency=eur&x=1", new_path());
    let body = r#"{"amount":1000,"currency":"eur"}"#;
    let req = request("POST", &path)
        .header("Idempotency-Key", &key)
        .header("Keep-Alive", "timeout=99")
        .header("Proxy-Connection", "keep-alive")
        .json(body);

    let first = w.send(&req);
    let json = assert_from_origin(&first, 201);
    assert!(!first.is_replayed(), "first attempt marked replayed: {first:?}");
    assert_eq!(first.header("x-custom"), Some("kept"), "origin headers are returned: {first:?}");
    assert_eq!(json["method"], "POST");
    assert_eq!(json["path"], path.as_str(), "forwarded to ORIGIN_URL + path + query");
    assert_eq!(json["body_len"], body.len(), "the body is forwarded as sent");
    assert_eq!(o.executions(&key), 1);

    let forwarded = o.last_headers(&key).expect("origin saw the key");
    let keys = header_is(&forwarded, "idempotency-key");
    assert!(
        keys == vec![key.clone()] || keys == vec![format!("\"{key}\"")],
        "Idempotency-Key forwarded once, as sent or as an sf-string; got {keys:?}"
    );
    assert!(
        header_is(&forwarded, "keep-alive").iter().all(|v| v != "timeout=99"),
        "hop-by-hop Keep-Alive forwarded: {forwarded:?}"
    );
    assert!(
        header_is(&forwarded, "proxy-connection").is_empty(),
        "hop-by-hop Proxy-Connection forwarded: {forwarded:?}"
    );
    assert_eq!(
        header_is(&forwarded, "content-type"),
        vec!["application/json".to_string()],
        "content type forwarded"
    );

    let second = w.send(&req);
    assert_replay_of(&second, &first);
    let third = w.send(&req);
    assert_replay_of(&third, &first);
    assert_eq!(o.executions(&key), 1, "retries must not execute again");
}

#[test]
fn patch_is_covered_too() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = request("PATCH", &new_path()).header("Idempotency-Key", &key).json(r#"{"status":"void"}"#);
    let first = w.send(&req);
    let json = assert_from_origin(&first, 201);
    assert_eq!(json["method"], "PATCH");
    let second = w.send(&req);
    assert_replay_of(&second, &first);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn concurrent_duplicates_execute_once() {
    const N: usize = 20;
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key).header("x-test-delay-ms", "800");
    let barrier = Arc::new(Barrier::new(N));
    let handles: Vec<_> = (0..N)
        .map(|_| {
            let req = req.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                w.send(&req)
            })
        })
        .collect();
    let responses: Vec<Response> = handles.into_iter().map(|h| h.join().expect("request thread")).collect();

    assert_eq!(o.executions(&key), 1, "{N} concurrent duplicates must execute once");
    let (executed, replayed): (Vec<&Response>, Vec<&Response>) =
        responses.iter().partition(|r| !r.is_replayed());
    assert_eq!(
        executed.len(),
        1,
        "exactly one answer is the execution's own (not marked replayed), the other {} are marked: {executed:?}",
        N - 1
    );
    let first = executed[0];
    assert_executed(first, 201);
    for r in replayed {
        assert_replay_of(r, first);
    }
}

#[test]
fn reply_lost_to_client_timeout_is_replayed_on_retry() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key);
    let gate = o.gate();

    // The client gives up once the origin has the request, before any answer exists.
    let lost = gate.on(req.clone()).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");
    lost.abandon();
    gate.release();
    assert!(
        o.wait_for_answers(&key, 1, Duration::from_secs(60)),
        "the origin answered the abandoned attempt"
    );

    let retry = w.send(&req);
    let json = assert_from_origin(&retry, 201);
    assert!(retry.is_replayed(), "the retry gets the stored outcome, marked replayed: {retry:?}");
    assert!(!retry.has_header("set-cookie"), "replay carries Set-Cookie: {retry:?}");
    assert_eq!(json["method"], "POST");
    assert_eq!(o.executions(&key), 1, "the retry must not execute again");

    let again = w.send(&req);
    assert_replay_of(&again, &retry);
    assert_eq!(o.executions(&key), 1);
}

/// The retry arrives while the origin holds the first attempt (the admin view counts it
/// among the waiters before the origin is released), and its log line says it was
/// coalesced after a wait: a join, not a replay after completion.
#[test]
fn retry_during_flight_joins_running_execution() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key);
    let object = fresh_object(w, &req, admin);
    let gate = o.gate();

    let first = gate.on(req.clone()).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");
    let retry = req.start(w.addr).expect("send the retry");
    wait_for_waiters(w, &object, 1, admin);
    gate.release();
    let retry = retry.finish().expect("the retry's answer");
    let first = first.finish().expect("the first attempt's answer");

    assert_executed(&first, 201);
    assert_replay_of(&retry, &first);
    assert_eq!(o.executions(&key), 2, "the marker execution, then one for both requests");
    let lines = logs::wait_for_lines_of(w, &object, 3);
    let coalesced: Vec<_> = lines.iter().filter(|line| line["decision"] == "coalesced").collect();
    assert_eq!(coalesced.len(), 1, "one coalesced line: {lines:?}");
    assert!(coalesced[0]["wait_ms"].as_u64().is_some_and(|ms| ms > 0), "the retry waited: {lines:?}");
    assert_eq!(inspect(w, &object)["waiters"], 0, "no waiter is left behind");
}

/// Duplicates that reached the object (the admin view counts them) and then disconnect
/// leave it (the count returns to 0 while the execution still runs) and change nothing.
#[test]
fn waiters_that_disconnect_cancel_nothing() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key);
    let object = fresh_object(w, &req, admin);
    let gate = o.gate();

    let first = gate.on(req.clone()).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");
    let quitters: Vec<_> = (0..5).map(|_| req.start(w.addr).expect("send a waiter")).collect();
    wait_for_waiters(w, &object, 5, admin);
    for quitter in quitters {
        quitter.abandon();
    }
    // They leave, by cancellation or at the end of their wait, while the origin still holds
    // the execution.
    wait_for_waiters(w, &object, 0, admin);
    assert_eq!(gate.held(), 1, "the execution is still at the origin");
    gate.release();

    let first = first.finish().expect("the first attempt's answer");
    assert_executed(&first, 201);
    let retry = w.send(&req);
    assert_replay_of(&retry, &first);
    assert_eq!(o.executions(&key), 2, "the marker execution, then one: waiters that left changed nothing");
}

/// Fencing, end to end: the claim of a running attempt is force-purged (admin) and a new
/// attempt claims the key while the first is still at the origin. When the first finishes,
/// its caller gets its own answer, but only the current claim's outcome is recorded.
#[test]
fn a_late_finisher_of_a_purged_claim_records_nothing() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key);
    let object = fresh_object(w, &req, admin);
    let (late, current) = (o.gate(), o.gate());

    let first = late.on(req.clone()).start(w.addr).expect("send the first attempt");
    late.expect_arrival("the first attempt");
    let forced = w.send(&admin("DELETE", &object, "?force=true"));
    assert_eq!(forced.status, 200, "{forced:?}");
    let second = current.on(req.clone()).start(w.addr).expect("send the second attempt");
    current.expect_arrival("the second attempt, which claimed the purged key");

    late.release();
    let first = first.finish().expect("the first attempt's answer");
    assert_executed(&first, 201);
    let view = inspect(w, &object);
    assert_eq!(view["state"], "in-flight", "the late finisher recorded nothing: {view}");
    assert_eq!(view["executing_now"], true, "{view}");

    current.release();
    let second = second.finish().expect("the second attempt's answer");
    assert_executed(&second, 201);
    assert_replay_of(&w.send(&req), &second);
    assert_eq!(o.executions(&key), 3, "the marker execution and the two attempts");
}

// ---------------------------------------------------------------------------------------
// Payload fingerprint

#[test]
fn different_body_under_same_key_is_key_reused() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let original = request("POST", &path).header("Idempotency-Key", &key).json(r#"{"amount":100}"#);
    let first = w.send(&original);
    assert_from_origin(&first, 201);

    let other = w.send(&request("POST", &path).header("Idempotency-Key", &key).json(r#"{"amount":200}"#));
    assert_problem(&other, 422, "key-reused");
    let other_type = w.send(
        &request("POST", &path)
            .header("Idempotency-Key", &key)
            .header("Content-Type", "text/plain")
            .body(r#"{"amount":100}"#),
    );
    assert_problem(&other_type, 422, "key-reused");
    assert_eq!(o.executions(&key), 1, "a reused key must not be forwarded");

    let retry = w.send(&original);
    assert_replay_of(&retry, &first);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn different_path_query_or_method_under_same_key_is_key_reused() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let body = r#"{"amount":100}"#;
    let first = w.send(&request("POST", &path).header("Idempotency-Key", &key).json(body));
    assert_from_origin(&first, 201);

    let other_path = new_path();
    let r = w.send(&request("POST", &other_path).header("Idempotency-Key", &key).json(body));
    assert_problem(&r, 422, "key-reused");
    assert_eq!(o.executions_at(&other_path), 0);

    let with_query = format!("{path}?force=1");
    let r = w.send(&request("POST", &with_query).header("Idempotency-Key", &key).json(body));
    assert_problem(&r, 422, "key-reused");
    assert_eq!(o.executions_at(&with_query), 0);

    let r = w.send(&request("PATCH", &path).header("Idempotency-Key", &key).json(body));
    assert_problem(&r, 422, "key-reused");

    assert_eq!(o.executions(&key), 1);
    assert_eq!(o.executions_at(&path), 1);
}

#[test]
fn reordered_json_is_the_same_payload() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let first = w.send(&request("POST", &path).header("Idempotency-Key", &key).json(r#"{"a":1,"b":2}"#));
    assert_from_origin(&first, 201);
    let second =
        w.send(&request("POST", &path).header("Idempotency-Key", &key).json("{ \"b\": 2,\n  \"a\": 1 }"));
    assert_replay_of(&second, &first);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn same_key_under_two_callers_executes_twice() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let alice = new_credential("alice");
    let bob = new_credential("bob");
    let as_caller = |auth: Option<&str>| {
        let req = payment(&path, &key);
        match auth {
            Some(a) => req.set_header("Authorization", a),
            None => req.without_header("Authorization"),
        }
    };

    let a1 = w.send(&as_caller(Some(&alice)));
    let b1 = w.send(&as_caller(Some(&bob)));
    let a_json = assert_executed(&a1, 201);
    let b_json = assert_executed(&b1, 201);
    assert_ne!(a_json["execution"], b_json["execution"], "two callers, two executions");
    assert_eq!(o.executions(&key), 2);

    let a2 = w.send(&as_caller(Some(&alice)));
    let b2 = w.send(&as_caller(Some(&bob)));
    assert_replay_of(&a2, &a1);
    assert_replay_of(&b2, &b1);

    // Without a credential there is no caller to scope by: refused, nothing forwarded
    // (`identity` covers ALLOW_ANONYMOUS).
    let anonymous = w.send(&as_caller(None).anonymous());
    assert_problem(&anonymous, 401, "missing-credential");
    assert_eq!(o.executions(&key), 2);
}

// ---------------------------------------------------------------------------------------
// Origin outcomes

#[test]
fn status_503_is_passed_on_and_releases_the_key() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let failing = w.send(&payment(&path, &key).header("x-test-status", "503"));
    assert_from_origin(&failing, 503);
    assert!(!failing.is_replayed(), "{failing:?}");
    assert_eq!(o.executions(&key), 1);

    let retry = w.send(&payment(&path, &key));
    assert_from_origin(&retry, 201);
    assert!(!retry.is_replayed(), "the retry executes again: {retry:?}");
    assert_eq!(o.executions(&key), 2);

    let replay = w.send(&payment(&path, &key));
    assert_replay_of(&replay, &retry);
    assert_eq!(o.executions(&key), 2);
}

#[test]
fn status_429_keeps_retry_after_and_releases_the_key() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let limited =
        w.send(&payment(&path, &key).header("x-test-status", "429").header("x-test-retry-after", "7"));
    assert_from_origin(&limited, 429);
    assert_eq!(limited.header("retry-after"), Some("7"), "Retry-After passed on: {limited:?}");
    assert!(!limited.is_replayed(), "{limited:?}");

    let retry = w.send(&payment(&path, &key));
    assert_from_origin(&retry, 201);
    assert!(!retry.is_replayed(), "the retry executes again: {retry:?}");
    assert_eq!(o.executions(&key), 2);
}

#[test]
fn final_400_is_stored_and_replayed() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key).header("x-test-status", "400");
    let first = w.send(&req);
    assert_from_origin(&first, 400);
    assert!(!first.is_replayed(), "{first:?}");
    let second = w.send(&req);
    assert_replay_of(&second, &first);
    // Without the control header the origin would answer 201: a replay must not ask it.
    let third = w.send(&payment(&req.path, &key));
    assert_replay_of(&third, &first);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn status_500_is_stored_and_replayed() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key).header("x-test-status", "500");
    let first = w.send(&req);
    assert_from_origin(&first, 500);
    let second = w.send(&payment(&req.path, &key));
    assert_replay_of(&second, &first);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn get_passes_through_without_key_or_dedup() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let with_key = request("GET", &path).header("Idempotency-Key", &key);
    let g1 = w.send(&with_key);
    let g2 = w.send(&with_key);
    let j1 = assert_from_origin(&g1, 200);
    let j2 = assert_from_origin(&g2, 200);
    assert_ne!(j1["execution"], j2["execution"], "two GETs are two origin hits");
    assert!(!g1.is_replayed() && !g2.is_replayed());
    assert_eq!(g1.header("x-custom"), Some("kept"));
    assert_eq!(o.executions(&key), 2);

    let plain = w.send(&request("GET", &path));
    let j3 = assert_from_origin(&plain, 200);
    assert_eq!(j3["method"], "GET");
    assert_eq!(o.executions_at(&path), 3, "a GET without a key passes through too");
}

#[test]
fn body_over_limit_with_content_length_is_413() {
    let w = main_worker();
    let o = origin();

    let key = new_key();
    let path = new_path();
    let big = vec![b'x'; MAX_BODY_BYTES + 1];
    let r = w.send(
        &request("POST", &path)
            .header("Idempotency-Key", &key)
            .header("Content-Type", "text/plain")
            .body(big),
    );
    assert_problem(&r, 413, "body-too-large");
    assert_eq!(o.executions(&key), 0);
    assert_eq!(o.executions_at(&path), 0);

    // Exactly the limit is allowed.
    let key = new_key();
    let at_limit = vec![b'y'; MAX_BODY_BYTES];
    let r = w.send(
        &request("POST", &new_path())
            .header("Idempotency-Key", &key)
            .header("Content-Type", "text/plain")
            .body(at_limit),
    );
    let json = assert_from_origin(&r, 201);
    assert_eq!(json["body_len"], MAX_BODY_BYTES);
    assert_eq!(o.executions(&key), 1);
}

/// A body far over the limit, declared by its `Content-Length`, gets the 413 problem and
/// not a reset connection: the Worker reads the refused body (as far as the core's drain
/// limit) before it answers. Answered with most of the body unread, the runtime closes the
/// connection under a client still sending it, and the client sees the reset, not the 413.
#[test]
fn a_large_declared_body_over_the_limit_gets_its_413_not_a_reset() {
    let w = limits_worker();
    let o = origin();
    for _ in 0..3 {
        let (key, path) = (new_key(), new_path());
        let r = w.send_once(
            &request("POST", &path)
                .header("Idempotency-Key", &key)
                .header("Content-Type", "text/plain")
                .body(vec![b'x'; 4 * 1024 * 1024]),
        );
        assert_problem(&r, 413, "body-too-large");
        assert_eq!(o.executions_at(&path), 0);
    }
}

#[test]
fn chunked_body_over_limit_is_413() {
    // Its own instance: a worker that answers without consuming the rest of a request body
    // can break wrangler's connection to it, and the next request then fails with 503
    // "Your worker restarted mid-request". Several rounds make that visible here, and only here.
    let w = limits_worker();
    let o = origin();
    for round in 0..40 {
        let key = new_key();
        let path = new_path();
        let big = vec![b'x'; MAX_BODY_BYTES + 904];
        let r = w.send_once(
            &request("POST", &path)
                .header("Idempotency-Key", &key)
                .header("Content-Type", "text/plain")
                .body(big)
                .chunked(),
        );
        assert_problem(&r, 413, "body-too-large");
        assert_eq!(o.executions(&key), 0);
        assert_eq!(o.executions_at(&path), 0);

        // The next request, and a small chunked body, are forwarded whole.
        let key = new_key();
        let r = w.send_once(
            &request("POST", &new_path())
                .header("Idempotency-Key", &key)
                .header("Content-Type", "text/plain")
                .body(vec![b'z'; 2500])
                .chunked(),
        );
        assert_eq!(r.status, 201, "round {round}: the request after a chunked 413 failed: {r:?}");
        let json = assert_from_origin(&r, 201);
        assert_eq!(json["body_len"], 2500);
        assert_eq!(o.executions(&key), 1);
    }
}

#[test]
fn duplicate_wait_is_bounded_by_409_in_progress() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key);
    let gate = o.gate();

    // The origin holds the first attempt until the duplicate has its answer.
    let first = gate.on(req.clone()).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");
    let sent = Instant::now();
    let dup = w.send(&req);
    let waited = sent.elapsed();
    assert_problem(&dup, 409, "in-progress");
    assert_eq!(gate.held(), 1, "the 409 came while the first attempt was still at the origin");
    // A lower bound only: the duplicate waited DUPLICATE_WAIT_SECONDS before its 409.
    assert!(
        waited >= Duration::from_secs(DUPLICATE_WAIT_SECONDS - 1),
        "the duplicate should wait DUPLICATE_WAIT_SECONDS ({DUPLICATE_WAIT_SECONDS} s) first, answered after {waited:?}"
    );
    gate.release();

    let first = first.finish().expect("the first attempt's answer");
    assert_executed(&first, 201);
    assert_eq!(o.executions(&key), 1);

    let later = w.send(&req);
    assert_replay_of(&later, &first);
    assert_eq!(o.executions(&key), 1);
}

/// Before the TTL every retry is a replay (at least one is checked: the TTL leaves it 10 s);
/// the first answer that is not comes no sooner than the TTL and is a new execution.
#[test]
fn key_executes_again_after_ttl() {
    let w = short_ttl_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key);
    let sent = Instant::now();
    let first = w.send(&req);
    assert_executed(&first, 201);
    let soon = w.send(&req);
    assert_replay_of(&soon, &first);

    let deadline = Instant::now() + Duration::from_secs(SHORT_TTL_SECONDS + 60);
    let after = loop {
        let r = w.send(&req);
        if !r.is_replayed() {
            break r;
        }
        assert_replay_of(&r, &first);
        assert!(
            Instant::now() < deadline,
            "the key never executed again after its {SHORT_TTL_SECONDS} s TTL"
        );
        thread::sleep(Duration::from_millis(250));
    };
    assert!(
        sent.elapsed() >= Duration::from_secs(SHORT_TTL_SECONDS),
        "the key executed again before its TTL ({:?} after the first attempt)",
        sent.elapsed()
    );
    let json = assert_executed(&after, 201);
    assert_ne!(json["execution"].to_string(), first.header("x-origin-execution").unwrap());
    assert_eq!(o.executions(&key), 2);
}

/// The origin holds the request past `ORIGIN_TIMEOUT_SECONDS`: the worker gives up (the
/// origin sees it close the connection), answers outcome-unknown, and keeps answering it,
/// also once the origin would have answered.
#[test]
fn origin_timeout_is_outcome_unknown_for_every_retry() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key);
    let gate = o.gate();
    let first = w.send(&gate.on(req.clone()));
    assert_problem(&first, 502, "outcome-unknown");
    assert!(
        gate.wait_abandoned(1, Duration::from_secs(60)),
        "the worker closed the timed-out origin request"
    );
    assert_eq!(o.executions(&key), 1);

    let retry = w.send(&req);
    assert_problem(&retry, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1, "an unknown outcome is never forwarded again");

    // The origin lets the request go on (its answer goes nowhere): still unknown.
    gate.release();
    assert!(gate.wait_none_held(Duration::from_secs(60)), "the origin let the request go");
    let late = w.send(&req);
    assert_problem(&late, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn reset_after_send_is_outcome_unknown_for_every_retry() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key).header("x-test-reset", "1").header("x-test-delay-ms", "200");
    let first = w.send(&req);
    assert_problem(&first, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1);

    let retry = w.send(&payment(&req.path, &key));
    assert_problem(&retry, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1, "an unknown outcome is never forwarded again");
}

#[test]
fn refused_origin_is_unreachable_and_releases_the_key() {
    let (w, port) = refused_worker();
    let key = new_key();
    let req = payment(&new_path(), &key);
    let down = w.send(&req);
    assert_problem(&down, 502, "origin-unreachable");

    let deadline = Instant::now() + Duration::from_secs(10);
    let up = loop {
        match Origin::start_on(*port) {
            Ok(o) => break o,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("could not start the origin on 127.0.0.1:{port}: {e}"),
        }
    };
    let retry = w.send(&req);
    assert_from_origin(&retry, 201);
    assert!(!retry.is_replayed(), "the retry executes: {retry:?}");
    assert_eq!(up.executions(&key), 1);

    let replay = w.send(&req);
    assert_replay_of(&replay, &retry);
    assert_eq!(up.executions(&key), 1);
}

// ---------------------------------------------------------------------------------------
// Logs

/// Each covered request logs one structured line, found here by its object id (which the
/// key's first, marked execution names), and no line holds the key or the credential. The
/// negative check reads the log only once a later sentinel line is in it.
#[test]
fn worker_logs_never_contain_keys_or_credentials() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let lost_key = new_key();
    let auth = new_credential("secret-token");
    let path = new_path();

    let req = payment(&path, &key).set_header("Authorization", &auth);
    let object = fresh_object(w, &req, admin);
    let first = w.send(&req);
    assert_executed(&first, 201);
    assert_replay_of(&w.send(&req), &first);
    let reused = w.send(&covered("POST", &path, &key, r#"{"amount":1}"#).set_header("Authorization", &auth));
    assert_problem(&reused, 422, "key-reused");
    let invalid = w.send(&payment(&path, &format!("{key}\x01")).set_header("Authorization", &auth));
    assert_problem(&invalid, 400, "invalid-key");
    let lost = payment(&new_path(), &lost_key).set_header("Authorization", &auth);
    let lost_object = fresh_object(w, &lost, admin);
    let unknown = w.send(&lost.clone().header("x-test-reset", "1"));
    assert_problem(&unknown, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 2, "the marker execution and the real one");
    assert_eq!(o.executions(&lost_key), 2);

    logs::sentinel(w, o);
    let decisions: Vec<String> = logs::lines_of(w, &object)
        .iter()
        .map(|line| {
            format!("{} {}", line["decision"].as_str().unwrap_or("?"), line["problem"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        decisions,
        ["executed ", "executed ", "replayed ", "rejected key-reused"],
        "one line per request to the object, in order (the marker first)"
    );
    let lost_lines = logs::lines_of(w, &lost_object);
    assert_eq!(lost_lines.len(), 2, "{lost_lines:?}");
    assert_eq!(lost_lines[1]["decision"], "unknown", "{lost_lines:?}");
    assert_eq!(lost_lines[1]["status"], 502, "{lost_lines:?}");
    logs::scan_for_leaks(w, &[ADMIN_TOKEN]).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn invalid_configuration_answers_500_naming_the_variable_and_forwards_nothing() {
    let w = misconfigured_worker();
    let o = origin();
    let path = new_path();
    // A large body too: the refusal reads it first, so that its client gets the 500 and not
    // a connection closed under the body it is still sending.
    let large = request("POST", &path).header("Content-Type", "text/plain").body(vec![b'x'; 4 * 1024 * 1024]);
    for request in [payment(&path, &new_key()), large, request("GET", &path)] {
        let r = w.send(&request);
        assert_problem(&r, 500, "invalid-config");
        let detail = r.json()["detail"].as_str().unwrap_or_default().to_string();
        assert!(detail.contains("IDEMPOTENCY_TTL_SECONDS"), "the problem names the variable: {detail}");
    }
    assert_eq!(o.executions_at(&path), 0, "a misconfigured worker forwards nothing");
}

// ---------------------------------------------------------------------------------------
// The test origin itself: its gate is what the tests above synchronise on, so it is
// checked directly (no worker in between).

#[test]
fn test_origin_holds_requests_at_a_gate_until_released() {
    let o = Origin::start();
    let gate = o.gate();
    let key = new_key();
    let held = gate.on(payment("/gate/held", &key)).start(o.addr()).expect("send to the origin");
    assert!(gate.wait_arrived(1, Duration::from_secs(30)), "the origin reports the arrival");
    assert!(o.wait_for_executions(&key, 1, Duration::from_secs(30)), "a held request has executed");
    assert_eq!((gate.arrived(), gate.held(), gate.abandoned(), o.answers(&key)), (1, 1, 0, 0));

    // A second request is held too; one that gives up is reported as abandoned.
    let quitter = gate.on(payment("/gate/quitter", &new_key())).start(o.addr()).expect("send");
    assert!(gate.wait_arrived(2, Duration::from_secs(30)));
    quitter.abandon();
    assert!(gate.wait_abandoned(1, Duration::from_secs(30)), "the origin notices a closed connection");
    assert_eq!(gate.abandoned(), 1);

    gate.release();
    let answer = held.finish().expect("the released request is answered");
    assert_from_origin(&answer, 201);
    assert!(o.wait_for_answers(&key, 1, Duration::from_secs(30)));
    // The quitter's handler leaves the gate on its own thread after the release, so the
    // count reaches 0 a moment after the held request is answered: wait, do not sample.
    assert!(gate.wait_none_held(Duration::from_secs(30)), "a released gate holds nothing");
    assert_eq!(gate.held(), 0);

    // After the release, the gate holds nothing.
    let later = gate.on(payment("/gate/later", &new_key())).send(o.addr()).expect("answered at once");
    assert_from_origin(&later, 201);
    assert_eq!(gate.arrived(), 3);
}

// ---------------------------------------------------------------------------------------
// Traceable failures

/// A caller's failure can be traced to its log line: a problem's `instance` names the
/// request, and the request's line carries the same id, the method and the route. Both for
/// a problem the object gives (422) and one the Worker gives before any object (400), and
/// the `cf-ray` a request arrives with is its id when Cloudflare set one.
#[test]
fn a_problem_names_its_request_and_the_log_line_carries_the_same_id() {
    let w = main_worker();
    let key = new_key();
    let path = new_path();
    let first = w.send(&request("POST", &path).header("Idempotency-Key", &key).json(r#"{"amount":100}"#));
    assert_from_origin(&first, 201);
    let reused = w.send(&request("POST", &path).header("Idempotency-Key", &key).json(r#"{"amount":200}"#));
    assert_problem(&reused, 422, "key-reused");
    let instance = reused.json()["instance"].as_str().expect("an instance member").to_owned();
    let id = instance.strip_prefix("urn:idempotency-edge:request:").expect("the request URN").to_owned();
    assert!(id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()), "a drawn id: {id}");
    let line = logs::wait_for_line(w, "the 422's line", |line| line["request_id"] == id.as_str());
    assert_eq!(line["problem"], "key-reused", "{line}");
    assert_eq!(line["method"], "POST", "{line}");

    // Refused by the Worker, with a cf-ray as Cloudflare sets one: that is the id.
    let ray = format!("{:016x}-AMS", rand_suffix());
    let missing = w.send(&request("POST", &new_path()).header("cf-ray", &ray).json("{}"));
    assert_problem(&missing, 400, "missing-key");
    assert_eq!(missing.json()["instance"], format!("urn:idempotency-edge:request:{ray}"));
    let line = logs::wait_for_line(w, "the 400's line", |line| line["request_id"] == ray.as_str());
    assert_eq!(line["problem"], "missing-key", "{line}");
    assert_eq!(line["method"], "POST", "{line}");
}

fn rand_suffix() -> u64 {
    let key = new_key();
    key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, b| (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}
