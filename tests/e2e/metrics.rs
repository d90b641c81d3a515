//! The optional Analytics Engine binding (`IDEMPOTENCY_METRICS`), with a positive control.
//!
//! Local workerd's Analytics Engine simulator accepts data points and throws them away, so
//! a test against it passes whether or not the worker writes any. Here the binding is a
//! service binding to a small recording worker in the same workerd (`wrangler dev -c … -c
//! …`): its `writeDataPoint` (an RPC method, called exactly as the real dataset's) prints
//! each point. The test checks that the blobs and doubles of its requests arrive, laid out
//! as `docs/operations.md` says, and that the worker answers as without the binding.

use crate::support::assert::{assert_executed, assert_problem, assert_replay_of};
use crate::support::logs;
use crate::support::origin::Origin;
use crate::support::requests::{new_key, payment, request, unique};
use crate::support::worker::{Readiness, Worker, WorkerConfig};
use std::thread;
use std::time::{Duration, Instant};

const WRANGLER_TOML: &str = r#"
name = "idempotency-edge-metrics"
main = "{MAIN}"
compatibility_date = "2026-04-26"

[[durable_objects.bindings]]
name = "IDEMPOTENCY_KEYS"
class_name = "KeyObject"

[[migrations]]
tag = "v1"
new_sqlite_classes = ["KeyObject"]

[[services]]
binding = "IDEMPOTENCY_METRICS"
service = "e2e-metrics-recorder"
"#;

const RECORDER_TOML: &str = r#"
name = "e2e-metrics-recorder"
main = "{DIR}/recorder.mjs"
compatibility_date = "2026-04-26"
"#;

/// Prints every data point it is handed, as one JSON line.
const RECORDER: &str = r#"
import { WorkerEntrypoint } from "cloudflare:workers";
export default class Recorder extends WorkerEntrypoint {
  fetch() { return new Response("metrics recorder"); }
  writeDataPoint(point) {
    console.log("e2e-data-point " + JSON.stringify({
      indexes: point.indexes ?? [], blobs: point.blobs ?? [], doubles: point.doubles ?? [],
    }));
  }
}
"#;

/// The data points the recorder printed so far.
fn data_points(w: &Worker) -> Vec<serde_json::Value> {
    w.log_contents()
        .lines()
        .filter_map(|line| line.split_once("e2e-data-point ").map(|(_, json)| json))
        .filter_map(|json| serde_json::from_str(json.trim()).ok())
        .collect()
}

/// Waits for the data point whose blobs and doubles satisfy `wanted`.
fn wait_for_point(w: &Worker, what: &str, wanted: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + logs::LOG_TIMEOUT;
    loop {
        if let Some(point) = data_points(w).into_iter().find(|p| wanted(p)) {
            return point;
        }
        assert!(Instant::now() < deadline, "no data point {what}; see {}", w.dir().display());
        thread::sleep(Duration::from_millis(100));
    }
}

/// A test origin and a worker in front of it whose metrics binding is the recorder, with
/// `extra` variables.
fn recorded_worker(name: &str, extra: &[(&str, &str)]) -> (Origin, Worker) {
    let origin = Origin::start();
    let vars = [("ORIGIN_URL".to_string(), origin.url())]
        .into_iter()
        .chain(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())))
        .collect();
    let w = Worker::start_with_configs(
        WorkerConfig { name: name.into(), vars, readiness: Readiness::OriginAnswers },
        WRANGLER_TOML,
        &[RECORDER_TOML],
        &[("recorder.mjs", RECORDER)],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    (origin, w)
}

#[test]
fn every_decision_writes_its_data_point_to_the_bound_dataset() {
    let (origin, w) = recorded_worker("metrics", &[]);

    // Executed, with a status of its own so that its point is told apart; then replayed.
    let key = new_key();
    let path = format!("/v1/charges/{}", unique("p"));
    let status = w.next_marker_status();
    let charge = payment(&path, &key).header("x-test-status", status.to_string());
    let sent = Instant::now();
    let first = w.send(&charge);
    let client_ms = sent.elapsed().as_secs_f64() * 1000.0;
    assert_executed(&first, status);
    assert_replay_of(&w.send(&charge), &first);
    let missing = w.send(&request("POST", &path).json("{}"));
    assert_problem(&missing, 400, "missing-key");
    assert_eq!(origin.executions(&key), 1);

    // Layout (docs/operations.md): index1 = decision; blob1 = decision, blob2 = problem kind
    // or "", blob3 = object id or ""; double1 = status, double2 = origin status (0: none),
    // double3 = origin latency in ms, double4 = wait in ms (-1: none), double5 = what the
    // edge added in ms (the object's time less the origin's and the wait's).
    let executed = wait_for_point(&w, &format!("for the execution (status {status})"), |p| {
        p["blobs"][0] == "executed" && p["doubles"][1] == f64::from(status)
    });
    assert_eq!(executed["indexes"], serde_json::json!(["executed"]), "{executed}");
    assert_eq!(executed["blobs"][1], "", "{executed}");
    let object = executed["blobs"][2].as_str().unwrap_or_default().to_string();
    assert_eq!(object.len(), 64, "blob3 is the object id: {executed}");
    assert_eq!(executed["doubles"][0], f64::from(status), "{executed}");
    assert!(executed["doubles"][2].as_f64().is_some_and(|ms| ms >= 0.0), "origin latency: {executed}");
    assert_eq!(executed["doubles"][3], -1.0, "no wait: {executed}");
    let edge_ms = executed["doubles"][4].as_f64();
    assert!(
        edge_ms.is_some_and(|ms| ms >= 0.0 && ms <= client_ms),
        "the edge's time, within the {client_ms} ms the client measured: {executed}"
    );
    let line = logs::wait_for_line(&w, "for the execution's line", |l| {
        l["decision"] == "executed" && l["origin_status"] == status
    });
    assert!(
        line["edge_ms"].as_f64().is_some_and(|ms| ms >= 0.0 && ms <= client_ms),
        "the line carries edge_ms, within the {client_ms} ms the client measured: {line}"
    );

    let replayed =
        wait_for_point(&w, "for the replay", |p| p["blobs"][0] == "replayed" && p["blobs"][2] == object);
    assert_eq!(replayed["doubles"][0], f64::from(status), "{replayed}");
    assert_eq!(replayed["doubles"][1], 0.0, "a replay has no origin status: {replayed}");
    let rejected =
        wait_for_point(&w, "for the 400", |p| p["blobs"][0] == "rejected" && p["blobs"][1] == "missing-key");
    assert_eq!(rejected["blobs"][2], "", "refused before any object: {rejected}");
    assert_eq!(rejected["doubles"][0], 400.0, "{rejected}");

    logs::sentinel(&w, &origin);
    assert!(!w.log_contents().contains("metrics: writing a data point failed"), "{}", w.log_tail(40));
    logs::scan_for_leaks(&w, &[]).unwrap_or_else(|e| panic!("{e}"));
}

/// `LOG_DECISIONS=problems`: the healthy requests (executed, replayed) write their data
/// points and no line; a rejection writes both. The rejection's line is the sentinel: it
/// comes from the same object after the two healthy requests, so once it is in the log,
/// theirs would be too.
#[test]
fn log_decisions_problems_keeps_only_the_lines_an_operator_must_see() {
    let (origin, w) = recorded_worker("log-decisions", &[("LOG_DECISIONS", "problems")]);

    let key = new_key();
    let path = format!("/v1/charges/{}", unique("p"));
    let status = w.next_marker_status();
    let charge = payment(&path, &key).header("x-test-status", status.to_string());
    let first = w.send(&charge);
    assert_executed(&first, status);
    assert_replay_of(&w.send(&charge), &first);
    let reused = w.send(&charge.clone().json(r#"{"amount":1}"#));
    assert_problem(&reused, 422, "key-reused");
    assert_eq!(origin.executions(&key), 1);

    let executed = wait_for_point(&w, "for the execution", |p| {
        p["blobs"][0] == "executed" && p["doubles"][1] == f64::from(status)
    });
    let object = executed["blobs"][2].as_str().unwrap_or_default().to_string();
    wait_for_point(&w, "for the replay", |p| p["blobs"][0] == "replayed" && p["blobs"][2] == object);
    wait_for_point(&w, "for the rejection", |p| p["blobs"][1] == "key-reused" && p["blobs"][2] == object);

    let line = logs::wait_for_line(&w, "for the rejection", |l| l["problem"] == "key-reused");
    assert_eq!(line["object"], object.as_str(), "{line}");
    let decisions: Vec<String> = logs::decision_lines(&w.log_contents())
        .iter()
        .map(|l| l["decision"].as_str().unwrap_or("?").to_string())
        .collect();
    assert!(
        decisions.iter().all(|d| d == "rejected"),
        "only problem lines are written (the readiness check's requests included): {decisions:?}"
    );
    logs::scan_for_leaks(&w, &[]).unwrap_or_else(|e| panic!("{e}"));
}
