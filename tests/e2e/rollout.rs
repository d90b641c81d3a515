//! End-to-end tests of the rollout features, in real workerd in front of a real
//! loopback origin:
//! - observe mode: every request reaches the origin as it came and its caller gets the
//!   origin's answer untouched, while the log names what enforce mode would have done;
//!   an unreachable object never stops the forward;
//! - an origin reached through a `[[services]]` binding: two workers in one `wrangler dev`
//!   (`-c edge.toml -c origin.toml`); the origin worker hands requests to the test origin,
//!   so executions are counted there;
//! - the demo: `demo/walkthrough.py` against `demo/origin.py` tells the same story twice,
//!   and docs/getting-started.md shows that story.
//!
//! Every covered request carries `Authorization: Bearer test-caller`, so the tests hold
//! when identity scoping (which refuses requests without one) is in force.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::http::{Request, Response};
use crate::support::origin::Origin;
use crate::support::requests::unique;
use crate::support::worker::{
    built_module, free_port, repo_root, send_past_dev_proxy, shared as instance, Readiness, Worker,
    WorkerConfig,
};

const CALLER: &str = "Bearer test-caller";
const BODY: &str = r#"{"amount":1200,"currency":"eur"}"#;
const ADMIN_TOKEN: &str = "rollout-admin-token-5d1-0123456789abcdef";

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
}

fn payment(path: &str, key: &str) -> Request {
    Request::post(path)
        .header("Authorization", CALLER)
        .header("Idempotency-Key", key)
        .json(BODY)
        .timeout(Duration::from_secs(120))
}

fn path_under(prefix: &str) -> String {
    format!("{prefix}/{}", unique("p"))
}

/// A directory of this test process's own, for the wrangler configurations it writes.
fn scratch(name: &str) -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("rollout-{}-{name}", std::process::id()));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// The worker's structured lines in observe mode, in the order they were written.
fn observe_lines(w: &Worker) -> Vec<serde_json::Value> {
    w.log_contents()
        .lines()
        .filter_map(|line| line.find("{\"event\":\"idempotency\"").map(|at| &line[at..]))
        .filter_map(|json| serde_json::from_str::<serde_json::Value>(json.trim()).ok())
        .filter(|line| line["mode"] == "observe")
        .collect()
}

/// Waits until the worker has written more than `seen` observe-mode lines (they are
/// written after the answer has gone) and returns the new ones.
fn next_observe_lines(w: &Worker, seen: usize, count: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = observe_lines(w);
        if lines.len() >= seen + count {
            return lines[seen..].to_vec();
        }
        assert!(
            Instant::now() < deadline,
            "expected {count} new observe-mode line(s) after {seen}; log tail:\n{}",
            w.log_tail(40)
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The answer came from an execution at the origin and carries nothing the worker added.
fn assert_untouched(r: &Response, status: u16) {
    assert_eq!(r.status, status, "{r:?}");
    assert!(r.header("x-origin-execution").is_some(), "the origin's answer: {r:?}");
    assert!(r.header("idempotent-replayed").is_none(), "no added header: {r:?}");
    assert_eq!(r.header("x-custom"), Some("kept"), "{r:?}");
    assert_eq!(r.header("set-cookie"), Some("sid=abc; Path=/"), "{r:?}");
    assert!(!r.headers.iter().any(|(n, _)| n.starts_with("x-idempotency-edge")), "{r:?}");
    assert_eq!(
        r.header("content-length").and_then(|v| v.parse::<usize>().ok()),
        Some(r.body.len()),
        "framed as the origin framed it: {r:?}"
    );
}

fn decision(line: &serde_json::Value) -> (String, String) {
    (
        line["decision"].as_str().unwrap_or_default().to_owned(),
        line["problem"].as_str().unwrap_or_default().to_owned(),
    )
}

// ---------------------------------------------------------------------------------------
// Observe mode
// ---------------------------------------------------------------------------------------

const OBSERVE_ROUTES: &str = r#"[
  {"pattern": "/enforced/*", "mode": "enforce"},
  {"pattern": "/observed/*"}
]"#;

fn observer() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, || {
        Worker::start(WorkerConfig {
            name: "observer".into(),
            vars: vars(&[
                ("ORIGIN_URL", &origin().url()),
                ("MODE", "observe"),
                ("IDEMPOTENCY_ROUTES", OBSERVE_ROUTES),
                ("MAX_BODY_BYTES", "4096"),
                ("ADMIN_TOKEN", ADMIN_TOKEN),
            ]),
            readiness: Readiness::OriginAnswers,
        })
    })
}

/// One test, so that the log lines it reads follow its requests in order.
#[test]
fn observe_mode_forwards_everything_and_logs_what_enforce_would_have_done() {
    let (w, o) = (observer(), origin());
    let path = path_under("/observed");
    let key = unique("observe");
    let mut seen = observe_lines(w).len();
    let mut expect = |label: &str, count: usize| {
        let lines = next_observe_lines(w, seen, count);
        seen += count;
        eprintln!("{label}: {lines:?}");
        lines
    };

    // A first attempt: executed, and the record is kept.
    let first = w.send(&payment(&path, &key));
    assert_untouched(&first, 201);
    let line = &expect("first", 1)[0];
    assert_eq!(decision(line), ("executed".into(), String::new()), "{line}");
    assert_eq!((line["status"].as_u64(), line["origin_status"].as_u64()), (Some(201), Some(201)), "{line}");
    assert_eq!(line["route"], "/observed/*", "{line}");
    // The Worker's own line counts its calls to the object: the arrival, then the outcome.
    assert_eq!(line["object_calls"], 2, "{line}");
    let object = line["object"].as_str().expect("the line names the object").to_owned();
    let record = w.send(
        &Request::get(&format!("/__idempotency/records/{object}"))
            .header("Authorization", format!("Bearer {ADMIN_TOKEN}")),
    );
    assert_eq!(record.status, 200, "{record:?}");
    assert_eq!(record.json()["state"], "completed", "the object kept the key's record: {record:?}");
    assert_eq!(record.json()["status"], 201, "{record:?}");
    assert!(
        record.json()["body_bytes"].as_u64().unwrap_or(0) > 0,
        "the answer is stored for replay: {record:?}"
    );

    // A retry: forwarded again and answered by the origin, logged as a replay.
    let retry = w.send(&payment(&path, &key));
    assert_untouched(&retry, 201);
    assert_ne!(retry.body, first.body, "a new execution, not a replay");
    assert_eq!(o.executions(&key), 2);
    let line = &expect("retry", 1)[0];
    assert_eq!(decision(line), ("replayed".into(), String::new()));
    assert_eq!(line["object_calls"], 1, "no claim, so no outcome to report: {line}");

    // The same key with another payload: forwarded, logged as key-reused.
    let mismatch = w.send(
        &Request::post(&path)
            .header("Authorization", CALLER)
            .header("Idempotency-Key", &key)
            .json(r#"{"amount":99}"#),
    );
    assert_untouched(&mismatch, 201);
    assert_eq!(o.executions(&key), 3);
    let line = &expect("mismatch", 1)[0];
    assert_eq!(decision(line), ("rejected".into(), "key-reused".into()), "{line}");
    assert_eq!(line["status"], 201, "the status the caller got: {line}");

    // Without a key, and with a malformed one: forwarded, logged as the refusals.
    let keyless_path = path_under("/observed");
    let keyless = w.send(&Request::post(&keyless_path).header("Authorization", CALLER).json(BODY));
    assert_untouched(&keyless, 201);
    assert_eq!(o.executions_at(&keyless_path), 1);
    let line = &expect("keyless", 1)[0];
    assert_eq!(decision(line), ("rejected".into(), "missing-key".into()), "{line}");
    assert!(line.get("object").is_none(), "{line}");
    let malformed = w.send(&payment(&path_under("/observed"), "\"unterminated"));
    assert_untouched(&malformed, 201);
    assert_eq!(decision(&expect("malformed", 1)[0]), ("rejected".into(), "invalid-key".into()));

    // A body over MAX_BODY_BYTES: forwarded whole, logged as body-too-large.
    let big_key = unique("observe-big");
    let big = w.send(
        &Request::post(&path_under("/observed"))
            .header("Authorization", CALLER)
            .header("Idempotency-Key", &big_key)
            .body(vec![b'a'; 10_000]),
    );
    assert_untouched(&big, 201);
    assert_eq!(big.json()["body_len"], 10_000, "the whole body reached the origin: {big:?}");
    assert_eq!(decision(&expect("too large", 1)[0]), ("rejected".into(), "body-too-large".into()));

    // A streamed (chunked) body over MAX_BODY_BYTES: what was read, then the rest, forwarded
    // whole and in order, logged as body-too-large.
    let big_chunked_key = unique("observe-big-chunked");
    let big_body: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let big_chunked = w.send(
        &Request::post(&path_under("/observed"))
            .header("Authorization", CALLER)
            .header("Idempotency-Key", &big_chunked_key)
            .header("x-test-body-sum", "1")
            .body(big_body.clone())
            .chunked(),
    );
    assert_untouched(&big_chunked, 201);
    assert_eq!(big_chunked.json()["body_len"], 10_000, "the whole body reached the origin: {big_chunked:?}");
    let sum = format!("{:016x}", crate::support::origin::fnv1a(&big_body));
    assert_eq!(big_chunked.json()["body_fnv"], sum.as_str(), "in order, unchanged: {big_chunked:?}");
    assert_eq!(decision(&expect("too large, streamed", 1)[0]), ("rejected".into(), "body-too-large".into()));

    // A streamed (chunked) body within the limit: forwarded whole.
    let chunked_key = unique("observe-chunked");
    let chunked = w.send(
        &Request::post(&path_under("/observed"))
            .header("Authorization", CALLER)
            .header("Idempotency-Key", &chunked_key)
            .body(vec![b'c'; 3_000])
            .chunked(),
    );
    assert_untouched(&chunked, 201);
    assert_eq!(chunked.json()["body_len"], 3_000, "{chunked:?}");
    assert_eq!(decision(&expect("chunked", 1)[0]), ("executed".into(), String::new()));

    // A status that enforce mode would release: the answer as the origin gave it.
    let limited_key = unique("observe-429");
    let limited = w.send(
        &payment(&path_under("/observed"), &limited_key)
            .header("x-test-status", "429")
            .header("x-test-retry-after", "7"),
    );
    assert_untouched(&limited, 429);
    assert_eq!(limited.header("retry-after"), Some("7"));
    assert_eq!(decision(&expect("429", 1)[0]), ("released".into(), String::new()));

    // A duplicate while the first attempt runs: both execute; enforce would have coalesced.
    let slow_key = unique("observe-slow");
    let slow_path = path_under("/observed");
    let slow = payment(&slow_path, &slow_key).header("x-test-delay-ms", "3000");
    let running = {
        let (addr, slow) = (w.addr, slow.clone());
        thread::spawn(move || send_past_dev_proxy(addr, &slow))
    };
    assert!(
        o.wait_for_executions(&slow_key, 1, Duration::from_secs(60)),
        "the first attempt reached the origin"
    );
    let duplicate = w.send(&payment(&slow_path, &slow_key));
    assert_untouched(&duplicate, 201);
    let first_slow = running.join().expect("first attempt thread").expect("first attempt answered");
    assert_untouched(&first_slow, 201);
    assert_eq!(o.executions(&slow_key), 2);
    let mut decisions: Vec<String> = expect("concurrent", 2).iter().map(|l| decision(l).0).collect();
    decisions.sort();
    assert_eq!(decisions, ["coalesced", "executed"]);

    // A route in enforce mode in the same deployment enforces.
    let enforced_path = path_under("/enforced");
    let enforced_key = unique("enforced");
    assert_eq!(w.send(&payment(&enforced_path, &enforced_key)).status, 201);
    let replay = w.send(&payment(&enforced_path, &enforced_key));
    assert!(replay.is_replayed(), "{replay:?}");
    assert_eq!(o.executions(&enforced_key), 1);
    let refused = w.send(&Request::post(&enforced_path).header("Authorization", CALLER).json(BODY));
    assert_eq!(refused.status, 400, "{refused:?}");
}

/// An object that cannot be reached: the request is forwarded anyway, and the log says so.
#[test]
fn observe_mode_forwards_when_the_object_is_unreachable() {
    let dir = scratch("unreachable");
    let toml = format!(
        "name = \"rollout-unreachable-{pid}\"\nmain = \"{{MAIN}}\"\ncompatibility_date = \"2026-04-26\"\n\n\
         [[durable_objects.bindings]]\nname = \"IDEMPOTENCY_KEYS\"\nclass_name = \"KeyObject\"\n\
         script_name = \"rollout-no-such-script-{pid}\"\n",
        pid = std::process::id()
    );
    let _ = dir;
    let w = Worker::start_with_config(
        WorkerConfig {
            name: "observe-unreachable".into(),
            vars: vars(&[("ORIGIN_URL", &origin().url()), ("MODE", "observe")]),
            readiness: Readiness::OriginAnswers,
        },
        &toml,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let key = unique("unreachable");
    let r = w.send(&payment(&path_under("/v1/charges"), &key));
    assert_untouched(&r, 201);
    assert_eq!(origin().executions(&key), 1);
    let line = &next_observe_lines(&w, 0, 1)[0];
    assert_eq!(decision(line), ("rejected".into(), "storage-unavailable".into()), "{line}");
    assert!(
        w.log_contents().contains("not reached in observe mode"),
        "a line says the request went unrecorded: {}",
        w.log_tail(30)
    );
}

/// The records observe mode keeps are the ones enforce mode uses: after the switch, a retry
/// of a key first seen under observe is replayed from the answer stored then.
#[test]
fn a_route_switched_from_observe_to_enforce_replays_what_was_observed() {
    let toml = |mode: &str| {
        format!(
            "name = \"rollout-switch-{}\"\nmain = \"{{MAIN}}\"\ncompatibility_date = \"2026-04-26\"\n\n\
             [[durable_objects.bindings]]\nname = \"IDEMPOTENCY_KEYS\"\nclass_name = \"KeyObject\"\n\n\
             [[migrations]]\ntag = \"v1\"\nnew_sqlite_classes = [\"KeyObject\"]\n\n[vars]\nMODE = \"{mode}\"\n",
            std::process::id()
        )
    };
    let w = Worker::start_with_config(
        WorkerConfig {
            name: "observe-switch".into(),
            vars: vars(&[("ORIGIN_URL", &origin().url())]),
            readiness: Readiness::OriginAnswers,
        },
        &toml("observe"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (path, key) = (path_under("/v1/charges"), unique("switch"));
    let observed = w.send(&payment(&path, &key));
    assert_untouched(&observed, 201);
    // The outcome is recorded once its line is written.
    assert_eq!(decision(&next_observe_lines(&w, 0, 1)[0]), ("executed".into(), String::new()));

    // Deploy the same worker in enforce mode, on the same storage.
    w.crash();
    let config = w.dir().join("wrangler.toml");
    let enforcing = toml("enforce").replace("{MAIN}", &built_module().display().to_string());
    fs::write(&config, enforcing).unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart in enforce mode: {e}"));
    let retry = w.send(&payment(&path, &key));
    assert_eq!(retry.status, 201, "{retry:?}");
    assert!(retry.is_replayed(), "{retry:?}");
    assert_eq!(retry.body, observed.body, "the answer observed before the switch");
    assert_eq!(origin().executions(&key), 1, "not executed again after the switch");
    let reused = w.send(
        &Request::post(&path).header("Authorization", CALLER).header("Idempotency-Key", &key).json("{}"),
    );
    assert_eq!(reused.status, 422, "{reused:?}");
}

/// With an Analytics Engine dataset bound, observe mode writes its points (which carry the
/// mode and the route; their layout is unit-tested in `core::edge_rules::log`) and answers the same.
#[test]
fn observe_mode_writes_its_data_points() {
    let toml = format!(
        "name = \"rollout-metrics-{}\"\nmain = \"{{MAIN}}\"\ncompatibility_date = \"2026-04-26\"\n\n\
         [[durable_objects.bindings]]\nname = \"IDEMPOTENCY_KEYS\"\nclass_name = \"KeyObject\"\n\n\
         [[migrations]]\ntag = \"v1\"\nnew_sqlite_classes = [\"KeyObject\"]\n\n\
         [[analytics_engine_datasets]]\nbinding = \"IDEMPOTENCY_METRICS\"\ndataset = \"idempotency_edge\"\n",
        std::process::id()
    );
    let w = Worker::start_with_config(
        WorkerConfig {
            name: "observe-metrics".into(),
            vars: vars(&[("ORIGIN_URL", &origin().url()), ("MODE", "observe")]),
            readiness: Readiness::OriginAnswers,
        },
        &toml,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (path, key) = (path_under("/v1/charges"), unique("observe-metrics"));
    for _ in 0..2 {
        assert_untouched(&w.send(&payment(&path, &key)), 201);
    }
    let keyless = w.send(&Request::post(&path).header("Authorization", CALLER).json(BODY));
    assert_untouched(&keyless, 201);
    let lines = next_observe_lines(&w, 0, 3);
    let decisions: Vec<(String, String)> = lines.iter().map(decision).collect();
    assert!(decisions.contains(&("replayed".into(), String::new())), "{lines:?}");
    assert!(decisions.contains(&("rejected".into(), "missing-key".into())), "{lines:?}");
    assert!(!w.log_contents().contains("metrics: writing a data point failed"), "{}", w.log_tail(40));
}

// ---------------------------------------------------------------------------------------
// Origin through a service binding
// ---------------------------------------------------------------------------------------

/// The origin worker: hands every request to the test origin (which counts it), and throws
/// after the origin executed when asked with `x-test-throw: 1`.
fn origin_worker_js(port: u16) -> String {
    format!(
        r#"export default {{
  async fetch(request) {{
    const url = new URL(request.url);
    const response = await fetch(new Request("http://127.0.0.1:{port}" + url.pathname + url.search, request));
    if (request.headers.get("x-test-throw") === "1") {{
      await response.arrayBuffer();
      throw new Error("the payments worker failed after the payment executed");
    }}
    const answer = new Response(response.body, response);
    answer.headers.set("x-via-service", "payments");
    return answer;
  }},
}};
"#
    )
}

/// The edge (the built worker) and the payments worker in one `wrangler dev`, the edge
/// bound to it as `PAYMENTS`.
fn start_with_payments(name: &str, vars: Vec<(String, String)>) -> Result<Worker, String> {
    let pid = std::process::id();
    let dir = scratch(name);
    let origin_name = format!("rollout-payments-{name}-{pid}");
    let js = dir.join("payments.js");
    fs::write(&js, origin_worker_js(origin().port())).map_err(|e| e.to_string())?;
    let origin_toml = dir.join("payments.toml");
    fs::write(
        &origin_toml,
        // Unbundled: wrangler's dev middleware would turn a thrown error into a 500
        // answer, which a deployed service binding never does.
        format!(
            "name = \"{origin_name}\"\nmain = \"{}\"\ncompatibility_date = \"2026-04-26\"\nno_bundle = true\n",
            js.display()
        ),
    )
    .map_err(|e| e.to_string())?;
    let edge_toml = dir.join("edge.toml");
    fs::write(
        &edge_toml,
        format!(
            "name = \"rollout-edge-{name}-{pid}\"\nmain = \"{}\"\ncompatibility_date = \"2026-04-26\"\n\n\
             [[durable_objects.bindings]]\nname = \"IDEMPOTENCY_KEYS\"\nclass_name = \"KeyObject\"\n\n\
             [[migrations]]\ntag = \"v1\"\nnew_sqlite_classes = [\"KeyObject\"]\n\n\
             [[services]]\nbinding = \"PAYMENTS\"\nservice = \"{origin_name}\"\n",
            built_module().display()
        ),
    )
    .map_err(|e| e.to_string())?;
    let (edge, payments) = (edge_toml.display().to_string(), origin_toml.display().to_string());
    Worker::start_with_args(
        WorkerConfig { name: name.into(), vars, readiness: Readiness::OriginAnswers },
        &["-c", &edge, "-c", &payments],
    )
}

fn serviced() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, || {
        start_with_payments(
            "service-origin",
            vars(&[
                ("ORIGIN_SERVICE", "PAYMENTS"),
                ("ORIGIN_TIMEOUT_SECONDS", "30"),
                ("IDEMPOTENCY_ROUTES", r#"[{"pattern": "/observed/*", "mode": "observe"}]"#),
            ]),
        )
    })
}

#[test]
fn a_service_binding_origin_executes_once_and_replays() {
    let (w, o) = (serviced(), origin());
    let path = path_under("/v1/charges");
    let key = unique("service");
    let first = w.send(&payment(&path, &key));
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.is_replayed() && first.header("x-origin-execution").is_some(), "{first:?}");
    assert_eq!(first.header("x-via-service"), Some("payments"), "through the binding: {first:?}");
    let retry = w.send(&payment(&path, &key));
    assert!(retry.is_replayed(), "{retry:?}");
    assert_eq!(retry.body, first.body);
    assert_eq!(o.executions(&key), 1, "one execution through the binding");
    let reused = w.send(
        &Request::post(&path).header("Authorization", CALLER).header("Idempotency-Key", &key).json("{}"),
    );
    assert_eq!(reused.status, 422, "{reused:?}");
    // Uncovered methods reach the origin through the binding too.
    let read_path = path_under("/v1/charges");
    let read = w.send(&Request::get(&read_path).header("Authorization", CALLER));
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(o.executions_at(&read_path), 1);
}

#[test]
fn a_service_binding_that_throws_leaves_the_outcome_unknown() {
    let (w, o) = (serviced(), origin());
    let path = path_under("/v1/charges");
    let key = unique("service-throw");
    let first = w.send(&payment(&path, &key).header("x-test-throw", "1"));
    assert_eq!(first.status, 502, "{first:?}");
    assert_eq!(first.json()["type"], "urn:idempotency-edge:problem:outcome-unknown", "{first:?}");
    assert_eq!(o.executions(&key), 1, "the payments worker executed before it threw");
    // Never released: the retry is not sent again.
    let retry = w.send(&payment(&path, &key));
    assert_eq!(retry.status, 502, "{retry:?}");
    assert_eq!(retry.json()["type"], "urn:idempotency-edge:problem:outcome-unknown", "{retry:?}");
    assert_eq!(o.executions(&key), 1, "held as unknown, never forwarded again");
}

/// A route names its own binding; the others keep `ORIGIN_URL`.
#[test]
fn a_route_may_reach_its_origin_through_a_service_binding() {
    let o = origin();
    let w = start_with_payments(
        "service-route",
        vars(&[
            ("ORIGIN_URL", &o.url()),
            ("IDEMPOTENCY_ROUTES", r#"[{"pattern": "/svc/*", "origin_service": "PAYMENTS"}]"#),
        ]),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let key = unique("service-route");
    let routed = w.send(&payment(&path_under("/svc"), &key));
    assert_eq!(routed.status, 201, "{routed:?}");
    assert_eq!(routed.header("x-via-service"), Some("payments"), "{routed:?}");
    let thrown_key = unique("service-route-throw");
    let thrown = w.send(&payment(&path_under("/svc"), &thrown_key).header("x-test-throw", "1"));
    assert_eq!(thrown.json()["type"], "urn:idempotency-edge:problem:outcome-unknown", "{thrown:?}");
    let direct_key = unique("direct");
    let direct = w.send(&payment(&path_under("/v1/charges"), &direct_key));
    assert_eq!(direct.status, 201, "{direct:?}");
    assert_eq!(direct.header("x-via-service"), None, "ORIGIN_URL, not the binding: {direct:?}");
    assert_eq!((o.executions(&key), o.executions(&thrown_key), o.executions(&direct_key)), (1, 1, 1));
}

#[test]
fn observe_mode_forwards_through_the_service_binding() {
    let (w, o) = (serviced(), origin());
    let path = path_under("/observed");
    let key = unique("service-observe");
    for _ in 0..2 {
        let r = w.send(&payment(&path, &key));
        assert_untouched(&r, 201);
        assert_eq!(r.header("x-via-service"), Some("payments"), "{r:?}");
    }
    assert_eq!(o.executions(&key), 2, "observe mode forwards every attempt");
}

// ---------------------------------------------------------------------------------------
// The demo
// ---------------------------------------------------------------------------------------

/// `python3 demo/origin.py PORT`, stopped when dropped.
struct DemoOrigin(Child);

impl Drop for DemoOrigin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// 32 bytes 0..31 in standard base64: a test key, never a real one (scripts/demo.sh makes
/// one per demo state).
const DEMO_STORAGE_KEYS: &str = r#"[{"id":"demo","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]"#;

/// `demo/origin.py` on a port from `free_port`, and that port. On another port when the
/// first was taken before the demo origin bound it (its bind fails and it exits): a port
/// that answers is this child's only while the child still runs.
fn start_demo_origin() -> (DemoOrigin, u16) {
    const ATTEMPTS: u32 = 5;
    for attempt in 1..=ATTEMPTS {
        let port = free_port();
        let child = Command::new("python3")
            .arg(repo_root().join("demo/origin.py"))
            .arg(port.to_string())
            .env("DEMO_DELAY_MS", "700")
            .env_remove("DEMO_DROP_RATE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("the demo test needs python3 on PATH (python3 demo/origin.py): {e}"));
        let mut demo = DemoOrigin(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = demo.0.try_wait().expect("poll demo/origin.py") {
                assert!(
                    attempt < ATTEMPTS,
                    "demo/origin.py exited ({status}) on port {port}, {ATTEMPTS} times"
                );
                eprintln!("demo/origin.py exited ({status}): port {port} was taken; trying another");
                break;
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && demo.0.try_wait().ok().flatten().is_none()
            {
                return (demo, port);
            }
            assert!(Instant::now() < deadline, "demo/origin.py did not listen on 127.0.0.1:{port}");
            thread::sleep(Duration::from_millis(100));
        }
    }
    unreachable!("the last attempt returns or panics")
}

fn run_walkthrough(w: &Worker) -> String {
    let output = Command::new("python3")
        .arg(repo_root().join("demo/walkthrough.py"))
        .arg(format!("http://{}", w.addr))
        .output()
        .unwrap_or_else(|e| panic!("python3 demo/walkthrough.py: {e}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the walkthrough failed:\n{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

/// The walkthrough's output without what differs between runs: latencies and charge ids.
fn decisions_of(output: &str) -> Vec<String> {
    output
        .lines()
        .map(|line| {
            let mut words: Vec<String> = Vec::new();
            let mut parts = line.split_whitespace().peekable();
            while let Some(word) = parts.next() {
                if parts.peek() == Some(&"ms") && word.parse::<f64>().is_ok() {
                    parts.next();
                    words.push("<ms>".into());
                } else if word.starts_with("ch_") {
                    words.push("ch_<n>".into());
                } else {
                    words.push(word.to_owned());
                }
            }
            words.join(" ")
        })
        .collect()
}

/// The walkthrough output shown in docs/getting-started.md, between its markers.
fn readme_walkthrough() -> String {
    let readme =
        fs::read_to_string(repo_root().join("docs/getting-started.md")).expect("docs/getting-started.md");
    let start = readme
        .find("<!-- walkthrough-output -->")
        .expect("docs/getting-started.md marks the walkthrough output");
    let block = &readme[start..];
    let open = block.find("```text\n").expect("a text block after the marker") + "```text\n".len();
    let close = block[open..].find("```").expect("the block ends");
    block[open..open + close].to_owned()
}

#[test]
fn the_walkthrough_tells_the_same_story_every_run() {
    let (_demo, port) = start_demo_origin();
    // As scripts/demo.sh sets them: the demo origin's lookup reconciles step 5.
    let routes = format!(
        r#"[{{"pattern":"/v1/charges","reconcile_url":"http://127.0.0.1:{port}/v1/charges?idempotency_key={{key}}"}}]"#
    );
    let w = Worker::start(WorkerConfig {
        name: "demo".into(),
        vars: vars(&[
            ("ORIGIN_URL", &format!("http://127.0.0.1:{port}")),
            ("IDEMPOTENCY_ROUTES", &routes),
            ("STORAGE_ENCRYPTION_KEYS", DEMO_STORAGE_KEYS),
        ]),
        readiness: Readiness::AnyResponse,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let first = run_walkthrough(&w);
    let second = run_walkthrough(&w);
    assert_eq!(decisions_of(&first), decisions_of(&second), "first run:\n{first}\nsecond run:\n{second}");
    assert_eq!(
        decisions_of(&first),
        decisions_of(&readme_walkthrough()),
        "docs/getting-started.md shows what a newcomer sees; this run printed:\n{first}"
    );
    for expected in [
        "replayed=true",
        "outcome-unknown",
        "key-reused",
        "1 distinct answer(s) for 10 requests",
        "(reconciled)",
    ] {
        assert!(first.contains(expected), "{expected:?} in:\n{first}");
    }
}
