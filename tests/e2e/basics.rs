//! End-to-end tests: the built Wasm worker runs in real workerd (`wrangler dev`, local
//! mode) in front of a real HTTP origin on loopback. No mocks.
//!
//! Instances are shared between the tests of this binary (cargo runs them in parallel):
//! - `main_worker()`: the shared origin, TTL 600 s, duplicate wait 5 s, origin timeout 12 s,
//!   4096-byte body limit, scope header `Authorization`;
//! - `short_ttl_worker()`: the same with a 2 s TTL;
//! - `limits_worker()`: the main configuration again, only for the chunked 413 test;
//! - `refused_worker()`: its origin URL names a loopback port where nothing listens until
//!   the test starts an origin there.
//!
//! Every test uses its own random keys and paths, so the tests never share a key.
//! Prerequisites: `./scripts/test.sh` (installs the toolchain and builds the worker).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use support::hostile::{assert_problem, PROBLEM_PREFIX};
use support::http::{Request, Response};
use support::origin::Origin;
use support::unique;
use support::worker::{free_port, shared, Readiness, Worker, WorkerConfig};

const MAX_BODY_BYTES: usize = 4096;

// ---------------------------------------------------------------------------------------
// Shared instances

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn vars(origin_url: &str, ttl_seconds: u32) -> Vec<(String, String)> {
    [
        ("ORIGIN_URL", origin_url.to_string()),
        ("IDEMPOTENCY_TTL_SECONDS", ttl_seconds.to_string()),
        ("DUPLICATE_WAIT_SECONDS", "5".to_string()),
        ("ORIGIN_TIMEOUT_SECONDS", "12".to_string()),
        ("MAX_BODY_BYTES", MAX_BODY_BYTES.to_string()),
        ("SCOPE_HEADER", "Authorization".to_string()),
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

fn main_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    standard(&CELL, "main", 600)
}

fn short_ttl_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    standard(&CELL, "short-ttl", 2)
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

fn new_key() -> String {
    unique("e2e")
}

fn new_path() -> String {
    format!("/v1/payments/{}", unique("p"))
}

fn payment(path: &str, key: &str) -> Request {
    Request::post(path).header("Idempotency-Key", key).json(r#"{"amount":1000,"currency":"eur"}"#)
}

/// Asserts a response produced by the test origin; returns its JSON body.
fn assert_from_origin(r: &Response, status: u16) -> serde_json::Value {
    assert_eq!(r.status, status, "expected {status} from the origin, got {r:?}");
    assert!(r.has_header("x-origin-execution"), "expected a response from the origin, got {r:?}");
    let body = r.json();
    assert_eq!(
        body["execution"].to_string(),
        r.header("x-origin-execution").unwrap(),
        "body and x-origin-execution disagree: {r:?}"
    );
    body
}

/// Asserts that `replay` replays `original`: same status, body bytes and stored headers,
/// marked replayed, without Set-Cookie.
fn assert_replay_of(replay: &Response, original: &Response) {
    assert_eq!(replay.status, original.status, "replay status; original {original:?}\nreplay {replay:?}");
    assert_eq!(replay.body, original.body, "replay body bytes; original {original:?}\nreplay {replay:?}");
    assert!(replay.is_replayed(), "replay lacks Idempotent-Replayed: true: {replay:?}");
    assert_eq!(
        replay.header("x-origin-execution"),
        original.header("x-origin-execution"),
        "replay x-origin-execution; original {original:?}\nreplay {replay:?}"
    );
    assert_eq!(replay.header("x-custom"), Some("kept"), "replay keeps x-custom: {replay:?}");
    assert_eq!(
        replay.header("content-type"),
        original.header("content-type"),
        "replay content-type; original {original:?}\nreplay {replay:?}"
    );
    assert!(!replay.has_header("set-cookie"), "a replay must not carry Set-Cookie: {replay:?}");
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
        let r = w.send(&Request::new(method, &path).json(r#"{"amount":1}"#));
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
        let mut req = Request::post(&path).json(r#"{"amount":1}"#);
        for v in &values {
            req = req.header("Idempotency-Key", v);
        }
        let r = w.send(&req);
        let ok = r.status == 400
            && r.header("content-type").unwrap_or("").starts_with("application/problem+json")
            && serde_json::from_slice::<serde_json::Value>(&r.body)
                .map(|b| b["type"] == format!("{PROBLEM_PREFIX}invalid-key") && b["status"] == 400)
                .unwrap_or(false);
        if !ok {
            failures.push(format!("{label}: expected 400 invalid-key, got {r:?}"));
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
    let quoted = w.send(&Request::post(&path).header("Idempotency-Key", format!("\"{key}\"")).json(body));
    assert_from_origin(&quoted, 201);
    assert!(!quoted.is_replayed(), "first attempt marked replayed: {quoted:?}");
    let bare = w.send(&Request::post(&path).header("Idempotency-Key", &key).json(body));
    assert_replay_of(&bare, &quoted);
    assert_eq!(o.executions(&key), 1, "\"k\" and k must be one key");
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
    let req = Request::post(&path)
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
    let req = Request::new("PATCH", &new_path()).header("Idempotency-Key", &key).json(r#"{"status":"void"}"#);
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
    let first = &responses[0];
    assert_from_origin(first, 201);
    for r in &responses {
        assert_eq!(r.status, 201, "every duplicate gets the one outcome: {r:?}");
        assert_eq!(r.body, first.body, "identical bodies: {first:?}\nvs {r:?}");
        assert_eq!(r.header("x-origin-execution"), first.header("x-origin-execution"));
    }
    let replayed = responses.iter().filter(|r| r.is_replayed()).count();
    assert!(
        replayed == N - 1 || replayed == N,
        "expected {} or {N} responses marked replayed (all but the one that executed), got {replayed}",
        N - 1
    );
    for r in responses.iter().filter(|r| r.is_replayed()) {
        assert!(!r.has_header("set-cookie"), "a replayed duplicate carries Set-Cookie: {r:?}");
    }
}

#[test]
fn reply_lost_to_client_timeout_is_replayed_on_retry() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key).header("x-test-delay-ms", "1500");

    let lost = req.clone().timeout(Duration::from_millis(300)).send(w.addr);
    match lost {
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
        other => panic!("expected the client to give up after 300 ms, got {other:?}"),
    }
    assert!(
        o.wait_for_executions(&key, 1, Duration::from_secs(30)),
        "the abandoned attempt never reached the origin"
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

#[test]
fn retry_during_flight_joins_running_execution() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key).header("x-test-delay-ms", "2000");

    let first = {
        let req = req.clone();
        thread::spawn(move || w.send(&req))
    };
    thread::sleep(Duration::from_millis(300));
    assert!(
        o.wait_for_executions(&key, 1, Duration::from_secs(30)),
        "the first attempt never reached the origin"
    );
    let retry = w.send(&req);
    let first = first.join().expect("first request thread");

    assert_from_origin(&first, 201);
    assert!(!first.is_replayed(), "the first caller's response is not a replay: {first:?}");
    assert_replay_of(&retry, &first);
    assert_eq!(o.executions(&key), 1, "the retry joins the running execution");
}

#[test]
fn waiters_that_disconnect_cancel_nothing() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key).header("x-test-delay-ms", "2000");

    let first = {
        let req = req.clone();
        thread::spawn(move || w.send(&req))
    };
    assert!(
        o.wait_for_executions(&key, 1, Duration::from_secs(30)),
        "the first attempt never reached the origin"
    );
    let quitters: Vec<_> = (0..5)
        .map(|_| {
            let req = req.clone().timeout(Duration::from_millis(200));
            thread::spawn(move || req.send(w.addr))
        })
        .collect();
    for quitter in quitters {
        match quitter.join().expect("waiter thread") {
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            other => panic!("expected the waiter to give up after 200 ms, got {other:?}"),
        }
    }
    let first = first.join().expect("first request thread");
    assert_from_origin(&first, 201);
    let retry = w.send(&req);
    assert_replay_of(&retry, &first);
    assert_eq!(o.executions(&key), 1, "waiters that left changed nothing");
}

// ---------------------------------------------------------------------------------------
// Payload fingerprint

#[test]
fn different_body_under_same_key_is_key_reused() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let original = Request::post(&path).header("Idempotency-Key", &key).json(r#"{"amount":100}"#);
    let first = w.send(&original);
    assert_from_origin(&first, 201);

    let other = w.send(&Request::post(&path).header("Idempotency-Key", &key).json(r#"{"amount":200}"#));
    assert_problem(&other, 422, "key-reused");
    let other_type = w.send(
        &Request::post(&path)
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
    let first = w.send(&Request::post(&path).header("Idempotency-Key", &key).json(body));
    assert_from_origin(&first, 201);

    let other_path = new_path();
    let r = w.send(&Request::post(&other_path).header("Idempotency-Key", &key).json(body));
    assert_problem(&r, 422, "key-reused");
    assert_eq!(o.executions_at(&other_path), 0);

    let with_query = format!("{path}?force=1");
    let r = w.send(&Request::post(&with_query).header("Idempotency-Key", &key).json(body));
    assert_problem(&r, 422, "key-reused");
    assert_eq!(o.executions_at(&with_query), 0);

    let r = w.send(&Request::new("PATCH", &path).header("Idempotency-Key", &key).json(body));
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
    let first = w.send(&Request::post(&path).header("Idempotency-Key", &key).json(r#"{"a":1,"b":2}"#));
    assert_from_origin(&first, 201);
    let second =
        w.send(&Request::post(&path).header("Idempotency-Key", &key).json("{ \"b\": 2,\n  \"a\": 1 }"));
    assert_replay_of(&second, &first);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn same_key_under_two_callers_executes_twice() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let alice = format!("Bearer {}", unique("alice"));
    let bob = format!("Bearer {}", unique("bob"));
    let as_caller = |auth: Option<&str>| {
        let req = payment(&path, &key);
        match auth {
            Some(a) => req.header("Authorization", a),
            None => req,
        }
    };

    let a1 = w.send(&as_caller(Some(&alice)));
    let b1 = w.send(&as_caller(Some(&bob)));
    let a_json = assert_from_origin(&a1, 201);
    let b_json = assert_from_origin(&b1, 201);
    assert!(!a1.is_replayed() && !b1.is_replayed(), "each caller's first attempt executes: {a1:?}\n{b1:?}");
    assert_ne!(a_json["execution"], b_json["execution"], "two callers, two executions");
    assert_eq!(o.executions(&key), 2);

    let a2 = w.send(&as_caller(Some(&alice)));
    let b2 = w.send(&as_caller(Some(&bob)));
    assert_replay_of(&a2, &a1);
    assert_replay_of(&b2, &b1);

    let anonymous = w.send(&as_caller(None));
    assert_from_origin(&anonymous, 201);
    assert!(!anonymous.is_replayed(), "the anonymous scope is a third scope: {anonymous:?}");
    assert_eq!(o.executions(&key), 3);
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
    let with_key = Request::get(&path).header("Idempotency-Key", &key);
    let g1 = w.send(&with_key);
    let g2 = w.send(&with_key);
    let j1 = assert_from_origin(&g1, 200);
    let j2 = assert_from_origin(&g2, 200);
    assert_ne!(j1["execution"], j2["execution"], "two GETs are two origin hits");
    assert!(!g1.is_replayed() && !g2.is_replayed());
    assert_eq!(g1.header("x-custom"), Some("kept"));
    assert_eq!(o.executions(&key), 2);

    let plain = w.send(&Request::get(&path));
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
        &Request::post(&path).header("Idempotency-Key", &key).header("Content-Type", "text/plain").body(big),
    );
    assert_problem(&r, 413, "body-too-large");
    assert_eq!(o.executions(&key), 0);
    assert_eq!(o.executions_at(&path), 0);

    // Exactly the limit is allowed.
    let key = new_key();
    let at_limit = vec![b'y'; MAX_BODY_BYTES];
    let r = w.send(
        &Request::post(&new_path())
            .header("Idempotency-Key", &key)
            .header("Content-Type", "text/plain")
            .body(at_limit),
    );
    let json = assert_from_origin(&r, 201);
    assert_eq!(json["body_len"], MAX_BODY_BYTES);
    assert_eq!(o.executions(&key), 1);
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
        let r = w.send(
            &Request::post(&path)
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
        let r = w.send(
            &Request::post(&new_path())
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
    let req = payment(&new_path(), &key).header("x-test-delay-ms", "8000");

    let first_done = Arc::new(AtomicBool::new(false));
    let first = {
        let req = req.clone();
        let done = first_done.clone();
        thread::spawn(move || {
            let r = w.send(&req);
            done.store(true, Ordering::SeqCst);
            r
        })
    };
    assert!(
        o.wait_for_executions(&key, 1, Duration::from_secs(30)),
        "the first attempt never reached the origin"
    );
    thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    let dup = w.send(&req);
    let waited = sent.elapsed();
    let first_finished_before_dup = first_done.load(Ordering::SeqCst);

    assert_problem(&dup, 409, "in-progress");
    let retry_after = dup.header("retry-after").unwrap_or_else(|| panic!("409 without Retry-After: {dup:?}"));
    let seconds: u64 =
        retry_after.trim().parse().unwrap_or_else(|_| panic!("Retry-After is not integer seconds: {dup:?}"));
    assert!(seconds >= 1, "Retry-After must be at least 1: {dup:?}");
    assert!(
        waited >= Duration::from_secs(3),
        "the duplicate should wait about DUPLICATE_WAIT_SECONDS (5 s) first, answered after {waited:?}"
    );
    assert!(!first_finished_before_dup, "the 409 must come while the first attempt still runs");

    let first = first.join().expect("first request thread");
    assert_from_origin(&first, 201);
    assert!(!first.is_replayed(), "{first:?}");
    assert_eq!(o.executions(&key), 1);

    let later = w.send(&req);
    assert_replay_of(&later, &first);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn key_executes_again_after_ttl() {
    let w = short_ttl_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key);
    let first = w.send(&req);
    let stored_at = Instant::now();
    assert_from_origin(&first, 201);
    let soon = w.send(&req);
    if stored_at.elapsed() < Duration::from_millis(1000) {
        assert_replay_of(&soon, &first);
        assert_eq!(o.executions(&key), 1);
    }

    thread::sleep(Duration::from_millis(3500).saturating_sub(stored_at.elapsed()));
    let after = w.send(&req);
    let json = assert_from_origin(&after, 201);
    assert!(!after.is_replayed(), "after the TTL the key executes again: {after:?}");
    assert_ne!(json["execution"].to_string(), first.header("x-origin-execution").unwrap());
    assert_eq!(o.executions(&key), 2);
}

#[test]
fn origin_timeout_is_outcome_unknown_for_every_retry() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let req = payment(&new_path(), &key).header("x-test-delay-ms", "20000");
    let sent = Instant::now();
    let first = w.send(&req);
    assert_problem(&first, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1);

    let retry = w.send(&req);
    assert_problem(&retry, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1, "an unknown outcome is never forwarded again");

    // After the origin's slow answer would have come, still unknown, still one execution.
    thread::sleep(Duration::from_secs(21).saturating_sub(sent.elapsed()));
    let late = w.send(&payment(&req.path, &key));
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

#[test]
fn worker_logs_never_contain_keys_or_credentials() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let lost_key = new_key();
    let token = unique("secret-token");
    let auth = format!("Bearer {token}");
    let path = new_path();

    let req = payment(&path, &key).header("Authorization", &auth);
    let first = w.send(&req);
    assert_from_origin(&first, 201);
    assert_replay_of(&w.send(&req), &first);
    let reused = w.send(
        &Request::post(&path)
            .header("Idempotency-Key", &key)
            .header("Authorization", &auth)
            .json(r#"{"amount":1}"#),
    );
    assert_problem(&reused, 422, "key-reused");
    let invalid = w.send(&payment(&path, &format!("{key}\x01")).header("Authorization", &auth));
    assert_problem(&invalid, 400, "invalid-key");
    let unknown =
        w.send(&payment(&new_path(), &lost_key).header("Authorization", &auth).header("x-test-reset", "1"));
    assert_problem(&unknown, 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1);
    assert_eq!(o.executions(&lost_key), 1);

    // Give wrangler a moment to write what workerd printed.
    thread::sleep(Duration::from_millis(1500));
    let log = w.log_contents();
    assert!(!log.is_empty(), "the worker log is empty; the harness captures nothing");
    for (what, secret) in
        [("key", key.as_str()), ("key", lost_key.as_str()), ("Authorization token", token.as_str())]
    {
        assert!(
            !log.contains(secret),
            "the worker log contains a raw {what} ({secret}); see {}",
            w.dir().display()
        );
    }
    // One structured line per covered request; the main instance's log holds every test's
    // lines, so only the kinds this test caused are looked for.
    let decisions: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|line| line.find("{\"event\":\"idempotency\"").map(|at| &line[at..]))
        .filter_map(|json| serde_json::from_str(json.trim_end()).ok())
        .collect();
    for (decision, problem) in [
        ("executed", None),
        ("replayed", None),
        ("rejected", Some("key-reused")),
        ("rejected", Some("invalid-key")),
        ("unknown", None),
    ] {
        assert!(
            decisions.iter().any(
                |line| line["decision"] == decision && problem.is_none_or(|kind| line["problem"] == kind)
            ),
            "no structured log line with decision {decision} {problem:?}; see {}",
            w.dir().display()
        );
    }
}

#[test]
fn invalid_configuration_answers_500_naming_the_variable_and_forwards_nothing() {
    let w = misconfigured_worker();
    let o = origin();
    let path = new_path();
    for request in [payment(&path, &new_key()), Request::get(&path)] {
        let r = w.send(&request);
        assert_problem(&r, 500, "invalid-config");
        let detail = r.json()["detail"].as_str().unwrap_or_default().to_string();
        assert!(detail.contains("IDEMPOTENCY_TTL_SECONDS"), "the problem names the variable: {detail}");
    }
    assert_eq!(o.executions_at(&path), 0, "a misconfigured worker forwards nothing");
}

// ---------------------------------------------------------------------------------------
// The client half: the reference retrying client (`idempotency_edge::client`) against the
// real worker, so the two halves are tested together.

use idempotency_edge::client::{
    self, AttemptSummary, ClientError, GiveUpReason, HttpTransport, Operation, RetryConfig, RetryingClient,
    Transport, TransportErrorKind,
};

/// The body `payment()` sends, so that direct requests and the client's are one payload.
const PAYMENT_BODY: &str = r#"{"amount":1000,"currency":"eur"}"#;

fn client_for(w: &Worker, config: RetryConfig) -> RetryingClient {
    RetryingClient::new(format!("http://{}", w.addr), config)
}

/// A charge as the client sends it: the key fixed here, once.
fn client_payment(path: &str, key: &str) -> Operation {
    Operation::post_json(key, path, PAYMENT_BODY).expect("a valid operation")
}

/// Quick retries for tests: 100 ms base, 1 s cap, 10 attempts, 40 s deadline, 15 s per
/// attempt (above the worker's 12 s origin timeout and 5 s duplicate wait).
fn quick_retries() -> RetryConfig {
    RetryConfig {
        base_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        max_attempts: 10,
        deadline: Duration::from_secs(40),
        attempt_timeout: Duration::from_secs(15),
    }
}

/// The client's response in the test support's type, for the shared assertions.
fn as_support(r: &client::Response) -> Response {
    Response { status: r.status, reason: String::new(), headers: r.headers.clone(), body: r.body.clone() }
}

/// Adds headers to the first attempt only: the test origin's control headers (which are
/// not part of the fingerprint) make that one attempt fail, and the retry then runs clean.
struct FirstAttemptHeaders {
    inner: HttpTransport,
    extra: Vec<(String, String)>,
    used: AtomicBool,
}

impl Transport for FirstAttemptHeaders {
    fn send(
        &self,
        request: &client::Request<'_>,
        timeout: Duration,
    ) -> Result<client::Response, client::TransportError> {
        if self.used.swap(true, Ordering::SeqCst) {
            return self.inner.send(request, timeout);
        }
        let mut headers = request.headers.to_vec();
        headers.extend(self.extra.iter().cloned());
        self.inner.send(&client::Request { headers: &headers, ..*request }, timeout)
    }
}

#[test]
fn client_retries_a_lost_reply_and_gets_the_stored_answer() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    // The origin takes 1.5 s; each attempt gives up after 400 ms, as a client whose reply
    // is lost would.
    let op = client_payment(&path, &key).header("x-test-delay-ms", "1500").unwrap();
    let config = RetryConfig {
        attempt_timeout: Duration::from_millis(400),
        base_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(400),
        max_attempts: 30,
        deadline: Duration::from_secs(30),
    };
    let outcome = client_for(w, config).send(&op).unwrap_or_else(|e| panic!("the client failed: {e}\n{e:?}"));

    assert!(outcome.attempts >= 2, "the first attempt cannot have had its reply: {:?}", outcome.history);
    match &outcome.history[0].result {
        AttemptSummary::TransportFailed(e) => assert_eq!(e.kind, TransportErrorKind::Timeout, "{e}"),
        other => panic!("the first attempt should time out, got {other:?}"),
    }
    let response = as_support(&outcome.response);
    let json = assert_from_origin(&response, 201);
    assert!(
        outcome.replayed && response.is_replayed(),
        "the retry gets the stored answer, replayed: {response:?}"
    );
    assert_eq!(json["path"], path.as_str());
    assert_eq!(o.executions(&key), 1, "one execution for {} attempts", outcome.attempts);
    assert_eq!(o.executions_at(&path), 1, "no attempt reached the origin under another key");

    // The answer the client got is the stored one.
    let again = w.send(&payment(&path, &key));
    assert_replay_of(&again, &response);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn client_joins_an_execution_in_flight() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let first = {
        let req = payment(&path, &key).header("x-test-delay-ms", "2000");
        thread::spawn(move || w.send(&req))
    };
    assert!(
        o.wait_for_executions(&key, 1, Duration::from_secs(30)),
        "the first attempt never reached the origin"
    );

    let outcome = client_for(w, quick_retries())
        .send(&client_payment(&path, &key))
        .unwrap_or_else(|e| panic!("the client failed: {e}\n{e:?}"));
    let first = first.join().expect("first request thread");

    assert_from_origin(&first, 201);
    assert!(!first.is_replayed(), "{first:?}");
    assert!(outcome.replayed, "the client gets the running execution's answer, replayed: {outcome:?}");
    assert_replay_of(&as_support(&outcome.response), &first);
    assert_eq!(o.executions(&key), 1, "the client's attempts join the running execution");
}

#[test]
fn client_waits_out_in_progress_and_then_gets_the_answer() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    // Longer than the worker's 5 s duplicate wait: the client's first attempt gets 409.
    let first = {
        let req = payment(&path, &key).header("x-test-delay-ms", "7000");
        thread::spawn(move || w.send(&req))
    };
    assert!(
        o.wait_for_executions(&key, 1, Duration::from_secs(30)),
        "the first attempt never reached the origin"
    );

    let outcome = client_for(w, quick_retries())
        .send(&client_payment(&path, &key))
        .unwrap_or_else(|e| panic!("the client failed: {e}\n{e:?}"));
    let first = first.join().expect("first request thread");

    assert!(outcome.attempts >= 2, "{:?}", outcome.history);
    let head = &outcome.history[0];
    match &head.result {
        AttemptSummary::Answered {
            status: 409,
            problem_type: Some(t),
            retry_after: Some(retry_after),
            ..
        } => {
            assert_eq!(t, &format!("{PROBLEM_PREFIX}in-progress"));
            assert!(*retry_after >= Duration::from_secs(1), "{head:?}");
            let wait = head.wait().unwrap_or_else(|| panic!("409 in-progress must be retried: {head:?}"));
            assert!(wait >= *retry_after, "the client honours Retry-After: {head:?}");
        }
        other => panic!("the first attempt should get 409 in-progress with Retry-After, got {other:?}"),
    }
    assert_from_origin(&first, 201);
    assert_replay_of(&as_support(&outcome.response), &first);
    assert!(outcome.replayed);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn client_retries_429_and_503_that_released_the_key() {
    let w = main_worker();
    let o = origin();
    for status in ["503", "429"] {
        let key = new_key();
        let path = new_path();
        let transport = FirstAttemptHeaders {
            inner: HttpTransport::new(),
            extra: vec![
                ("x-test-status".to_string(), status.to_string()),
                ("x-test-retry-after".to_string(), "1".to_string()),
            ],
            used: AtomicBool::new(false),
        };
        let client = client_for(w, quick_retries()).with_transport(transport);
        let outcome = client
            .send(&client_payment(&path, &key))
            .unwrap_or_else(|e| panic!("{status}: the client failed: {e}\n{e:?}"));

        assert_eq!(outcome.attempts, 2, "{status}: {:?}", outcome.history);
        let head = &outcome.history[0];
        assert!(
            matches!(head.result, AttemptSummary::Answered { status: s, .. } if s.to_string() == status),
            "{status}: {head:?}"
        );
        assert!(
            head.wait().is_some_and(|w| w >= Duration::from_secs(1)),
            "{status}: Retry-After honoured: {head:?}"
        );
        let json = assert_from_origin(&as_support(&outcome.response), 201);
        assert!(!outcome.replayed, "{status} released the key, so the retry executed: {outcome:?}");
        assert_eq!(json["path"], path.as_str());
        assert_eq!(o.executions(&key), 2, "{status}: the released attempt, then the retry");
    }
}

#[test]
fn client_gives_up_on_a_persistent_503_after_max_attempts() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let op = client_payment(&path, &key)
        .header("x-test-status", "503")
        .unwrap()
        .header("x-test-retry-after", "1")
        .unwrap();
    let client = client_for(w, RetryConfig { max_attempts: 3, ..quick_retries() });
    let started = Instant::now();
    match client.send(&op) {
        Err(ClientError::GaveUp { reason: GiveUpReason::AttemptsExhausted, last: Ok(last), report }) => {
            assert_eq!(report.attempts, 3, "{report:?}");
            assert_from_origin(&as_support(&last), 503);
            for attempt in &report.history[..2] {
                assert!(attempt.wait().is_some_and(|w| w >= Duration::from_secs(1)), "{attempt:?}");
            }
        }
        other => panic!("expected the client to give up after 3 attempts, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_secs(2), "two waits of Retry-After: 1");
    assert_eq!(o.executions(&key), 3, "each 503 released the key, so each attempt executed");
}

#[test]
fn client_reports_outcome_unknown_for_reconciliation_without_retrying() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let op = client_payment(&path, &key).header("x-test-reset", "1").unwrap();
    let err = client_for(w, quick_retries()).send(&op).expect_err("an unknown outcome is not a success");
    assert!(err.needs_reconciliation(), "expected reconciliation, got {err:?}");
    assert_eq!(err.attempts(), 1, "outcome-unknown is never retried: {err:?}");
    assert_problem(&as_support(err.response().expect("the worker's answer")), 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn client_does_not_retry_key_reused() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let first = w.send(&payment(&path, &key));
    assert_from_origin(&first, 201);

    let other = Operation::post_json(&key, &path, r#"{"amount":2000,"currency":"eur"}"#).unwrap();
    match client_for(w, quick_retries()).send(&other) {
        Err(ClientError::Rejected { response, report }) => {
            assert_problem(&as_support(&response), 422, "key-reused");
            assert_eq!(report.attempts, 1, "422 is never retried: {report:?}");
        }
        other => panic!("expected a 422 rejection, got {other:?}"),
    }
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn client_does_not_retry_a_final_4xx() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let op = client_payment(&path, &key).header("x-test-status", "400").unwrap();
    match client_for(w, quick_retries()).send(&op) {
        Err(ClientError::Rejected { response, report }) => {
            assert_from_origin(&as_support(&response), 400);
            assert_eq!(report.attempts, 1, "{report:?}");
        }
        other => panic!("expected a final 400, got {other:?}"),
    }
    assert_eq!(o.executions(&key), 1);
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
    assert_eq!((gate.arrived(), gate.held(), o.executions(&key), o.answers(&key)), (1, 1, 1, 0));

    // A second request is held too; one that gives up is reported as abandoned.
    let quitter = gate.on(payment("/gate/quitter", &new_key())).start(o.addr()).expect("send");
    assert!(gate.wait_arrived(2, Duration::from_secs(30)));
    quitter.abandon();
    assert!(gate.wait_abandoned(1, Duration::from_secs(30)), "the origin notices a closed connection");

    gate.release();
    let answer = held.finish().expect("the released request is answered");
    assert_from_origin(&answer, 201);
    assert!(o.wait_for_answers(&key, 1, Duration::from_secs(30)));
    assert_eq!(gate.held(), 0);

    // After the release, the gate holds nothing.
    let later = gate.on(payment("/gate/later", &new_key())).send(o.addr()).expect("answered at once");
    assert_from_origin(&later, 201);
    assert_eq!(gate.arrived(), 3);
}
