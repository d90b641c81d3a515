//! End-to-end tests of outcomes that resolve themselves (`ORIGIN_DEDUPLICATES`), in
//! real workerd in front of an origin that honours `Idempotency-Key` itself, as Stripe-like
//! APIs do: it executes a key once, answers 409 while that execution runs, and replays the
//! stored answer afterwards.
//!
//! - a timeout, then retries: the origin's original answer, one execution;
//! - a SIGKILL of workerd mid-flight, then a retry after the lease: the original answer;
//! - sending again stops at `MAX_ORIGIN_ATTEMPTS`.

use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert::assert_problem;
use crate::support::dedup_origin::DedupOrigin;
use crate::support::http::{Request, Response};
use crate::support::requests::{request, unique};
use crate::support::worker::{shared as instance, Readiness, Worker, WorkerConfig};

fn origin() -> &'static DedupOrigin {
    static ORIGIN: OnceLock<DedupOrigin> = OnceLock::new();
    ORIGIN.get_or_init(DedupOrigin::start)
}

fn start(name: &str) -> Result<Worker, String> {
    start_with(name, &[])
}

/// [`start`] with some variables overridden.
fn start_with(name: &str, overrides: &[(&str, &str)]) -> Result<Worker, String> {
    let mut vars: Vec<(String, String)> = [
        ("ORIGIN_URL", origin().url()),
        ("ORIGIN_DEDUPLICATES", "true".to_owned()),
        ("MAX_ORIGIN_ATTEMPTS", "3".to_owned()),
        ("ORIGIN_TIMEOUT_SECONDS", "2".to_owned()),
        ("DUPLICATE_WAIT_SECONDS", "10".to_owned()),
        ("IDEMPOTENCY_TTL_SECONDS", "600".to_owned()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v))
    .collect();
    for (name, value) in overrides {
        vars.retain(|(n, _)| n != name);
        vars.push((name.to_string(), value.to_string()));
    }
    Worker::start(WorkerConfig { name: name.into(), vars, readiness: Readiness::OriginAnswers })
}

fn deduplicating() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, || start("deduplicating"))
}

fn charge(path: &str, key: &str) -> Request {
    request("POST", path).header("Idempotency-Key", key).json(r#"{"amount":2500,"currency":"eur"}"#)
}

/// Retries `request` until the answer is not a 409 or a 502, for at most a minute, and
/// returns that answer.
fn retry_until_settled(w: &Worker, request: &Request) -> Response {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = w.send(request);
        if !matches!(r.status, 409 | 502) || Instant::now() > deadline {
            return r;
        }
        thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_timeout_then_retries_get_the_origins_original_answer() {
    let (w, o) = (deduplicating(), origin());
    let key = unique("timeout");
    let path = format!("/v1/charges/{}", unique("p"));
    // The origin takes longer than the worker waits: the outcome is unknown.
    let first = w.send(&charge(&path, &key).header("x-test-delay-ms", "4000"));
    assert_problem(&first, 502, "outcome-unknown");
    // Retries send the same request again under the same key; while the origin's own first
    // execution runs it answers 409, afterwards its stored answer.
    let settled = retry_until_settled(w, &charge(&path, &key));
    assert_eq!(settled.status, 201, "{settled:?}");
    assert_eq!(o.executions(&key), 1, "the origin executed the key once");
    assert!(o.received(&key) >= 2, "the key was sent again");
    // From now on the stored answer is replayed by the edge.
    let replay = w.send(&charge(&path, &key));
    assert!(replay.is_replayed(), "{replay:?}");
    assert_eq!(replay.body, settled.body);
    // A different payload is still refused.
    let other = w.send(&request("POST", &path).header("Idempotency-Key", &key).json(r#"{"amount":1}"#));
    assert_problem(&other, 422, "key-reused");
}

/// One key, one spelling at the origin: a first attempt that quotes its key (`"k"`, the
/// IETF draft's sf-string) times out, and the bare retry (`k`) is sent again under the same
/// spelling, so the origin's own deduplication holds: one execution. (Before, the re-send
/// carried the retry's spelling, a key the origin had never seen, and it executed again.)
#[test]
fn a_quoted_first_attempt_and_a_bare_retry_are_one_key_at_the_origin() {
    let (w, o) = (deduplicating(), origin());
    let key = unique("spelling");
    let quoted = format!("\"{key}\"");
    let path = format!("/v1/charges/{}", unique("p"));
    let first = w.send(&charge(&path, &quoted).header("x-test-delay-ms", "4000"));
    assert_problem(&first, 502, "outcome-unknown");
    let settled = retry_until_settled(w, &charge(&path, &key));
    assert_eq!(settled.status, 201, "{settled:?}");
    assert_eq!(o.executions(&key) + o.executions(&quoted), 1, "the origin executed the key once");
    assert_eq!(o.received(&quoted), 0, "the origin only ever saw one spelling");
    assert!(o.received(&key) >= 2, "the key was sent again");
    let replay = w.send(&charge(&path, &quoted));
    assert!(replay.is_replayed(), "either spelling replays: {replay:?}");
    assert_eq!(replay.body, settled.body);
}

/// A shaped fingerprint lets a retry's body differ from the first attempt's in the fields
/// it leaves out, and a re-send would carry the retry's: with an origin that deduplicates,
/// that is a configuration error naming the route, and nothing is forwarded.
#[test]
fn a_shaped_fingerprint_with_an_origin_that_deduplicates_is_invalid_config() {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    let w = instance(&CELL, || {
        let routes = r#"[{"pattern":"/v1/ok/*"},{"pattern":"/v1/shaped/*","fingerprint_ignore":["/ts"]}]"#;
        let mut vars: Vec<(String, String)> = [
            ("ORIGIN_URL", origin().url()),
            ("ORIGIN_DEDUPLICATES", "true".to_owned()),
            ("IDEMPOTENCY_ROUTES", routes.to_owned()),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect();
        vars.push(("ORIGIN_TIMEOUT_SECONDS".to_owned(), "2".to_owned()));
        Worker::start(WorkerConfig { name: "dedup-shaped".into(), vars, readiness: Readiness::AnyResponse })
    });
    let key = unique("shaped");
    let r = w.send(&charge(&format!("/v1/shaped/{}", unique("p")), &key));
    assert_problem(&r, 500, "invalid-config");
    let detail = r.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("IDEMPOTENCY_ROUTES") && detail.contains("[1] (/v1/shaped/*)"), "{detail}");
    assert_eq!(origin().received(&key), 0, "nothing forwarded");
}

/// A SIGKILL while the origin executes the first attempt: the claim is orphaned, every
/// retry during its lease is answered 409 and reaches nothing, and exactly one re-send goes
/// out after the lease, which the origin answers with its stored answer (counted
/// at the origin, with arrival times, not only its executions, which this origin keeps at
/// one whatever the worker does).
#[test]
fn a_restart_mid_flight_then_a_retry_after_the_lease_gets_the_original_answer() {
    // A 20 s origin timeout gives a 30 s lease; the origin takes 12 s to execute, so the
    // SIGKILL has 12 s to land mid-flight, and the answer is stored well before the lease
    // ends (no window is shorter than 10 s).
    const LEASE: Duration = Duration::from_secs(30);
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    let w = instance(&CELL, || start_with("deduplicating-crash", &[("ORIGIN_TIMEOUT_SECONDS", "20")]));
    let o = origin();
    let key = unique("crash");
    let path = format!("/v1/charges/{}", unique("p"));
    let first = {
        let request = charge(&path, &key).header("x-test-delay-ms", "12000");
        let addr = w.addr;
        thread::spawn(move || request.send(addr))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while o.received(&key) == 0 {
        assert!(Instant::now() < deadline, "the first attempt never reached the origin");
        thread::sleep(Duration::from_millis(20));
    }
    w.crash();
    assert!(first.join().unwrap().is_err(), "the caller's connection dies with workerd");
    assert_eq!(o.executions(&key), 1, "the first attempt was executing when workerd died");
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    // The claim is orphaned: 409 until its lease ends, and nothing is sent meanwhile.
    let in_lease = w.send(&charge(&path, &key));
    assert_problem(&in_lease, 409, "in-progress");
    assert_eq!(o.received(&key), 1, "a retry inside the lease reaches nothing");
    let settled = retry_until_settled(w, &charge(&path, &key));
    assert_eq!(settled.status, 201, "{settled:?}");
    let arrivals = o.arrivals(&key);
    assert_eq!(arrivals.len(), 2, "the first attempt and exactly one re-send after the lease");
    // The lease runs from the claim, a moment before the first arrival: a second of slack.
    let lease_end = arrivals[0] + LEASE - Duration::from_secs(1);
    assert!(arrivals[1] >= lease_end, "the re-send came only after the lease: {arrivals:?}");
    assert_eq!(o.executions(&key), 1);
    assert!(w.send(&charge(&path, &key)).is_replayed());
    assert_eq!(o.received(&key), 2, "the replay reached nothing");
}

#[test]
fn sending_again_stops_at_max_origin_attempts() {
    let (w, o) = (deduplicating(), origin());
    let key = unique("exhausted");
    let path = format!("/v1/charges/{}", unique("p"));
    // Every send is lost after the request went out: each outcome is unknown.
    let dropped = charge(&path, &key).header("x-test-drop", "1");
    for _ in 0..3 {
        assert_problem(&w.send(&dropped), 502, "outcome-unknown");
    }
    assert_eq!(o.received(&key), 3, "sent three times, MAX_ORIGIN_ATTEMPTS");
    let exhausted = w.send(&charge(&path, &key));
    assert_problem(&exhausted, 502, "outcome-unknown");
    assert!(exhausted.text().contains("3 times"), "{}", exhausted.text());
    assert_eq!(o.received(&key), 3, "never a fourth time");
}
