//! `OUTCOME_QUEUE` (issue 25.2): the key's object publishes the outcomes a caller may never
//! come back for to a Cloudflare Queue. Here the queue is local workerd's, and its consumer
//! is a second worker in the same `wrangler dev` that prints every message it gets.

use std::collections::HashSet;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::assert::{assert_executed, assert_problem};
use crate::support::logs::{self, decision_lines, LOG_TIMEOUT};
use crate::support::origin::Origin;
use crate::support::requests::{new_key, new_path, payment};
use crate::support::worker::{key_object_toml, shared, Readiness, Worker, WorkerConfig};

/// The producer binding, on the worker's configuration (`key_object_toml`).
const PRODUCER: &str = "\n[[queues.producers]]\nbinding = \"OUTCOME_QUEUE\"\nqueue = \"e2e-outcomes\"\n";

/// One message per batch, delivered within a second.
const CONSUMER_TOML: &str = r#"
name = "e2e-outcome-consumer"
main = "{DIR}/consumer.mjs"
compatibility_date = "2026-04-26"

[[queues.consumers]]
queue = "e2e-outcomes"
max_batch_size = 1
max_batch_timeout = 1
"#;

/// Prints every message as one JSON line.
const CONSUMER: &str = r#"
export default {
  fetch() { return new Response("outcome consumer"); },
  async queue(batch) {
    for (const message of batch.messages) console.log("e2e-outcome " + JSON.stringify(message.body));
  },
};
"#;

/// 32 bytes 0..31 in standard base64: a test key, never a real one.
const STORAGE_KEYS: &str = r#"[{"id":"queue-test","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]"#;

const ORIGIN_TIMEOUT_SECONDS: u64 = 2;

fn queued() -> &'static (Origin, Worker) {
    static CELL: OnceLock<Result<(Origin, Worker), String>> = OnceLock::new();
    shared(&CELL, || {
        let origin = Origin::start();
        let vars = [
            ("ORIGIN_URL", origin.url()),
            ("ASYNC_ACCEPT", "prefer".to_owned()),
            ("STORAGE_ENCRYPTION_KEYS", STORAGE_KEYS.to_owned()),
            ("ORIGIN_TIMEOUT_SECONDS", ORIGIN_TIMEOUT_SECONDS.to_string()),
            ("IDEMPOTENCY_TTL_SECONDS", "600".to_owned()),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect();
        let w = Worker::start_with_configs(
            WorkerConfig { name: "outcome-queue".into(), vars, readiness: Readiness::OriginAnswers },
            &key_object_toml("e2e-outcome-queue", PRODUCER),
            &[CONSUMER_TOML],
            &[("consumer.mjs", CONSUMER)],
        )?;
        Ok((origin, w))
    })
}

/// The messages the consumer printed so far.
fn messages(w: &Worker) -> Vec<Value> {
    w.log_contents()
        .lines()
        .filter_map(|line| line.split_once("e2e-outcome ").map(|(_, json)| json))
        .filter_map(|json| serde_json::from_str(json.trim()).ok())
        .collect()
}

/// Waits for the message about `object`.
fn wait_for_message(w: &Worker, object: &str) -> Value {
    let deadline = Instant::now() + LOG_TIMEOUT;
    loop {
        if let Some(message) = messages(w).into_iter().find(|m| m["object_id"] == object) {
            return message;
        }
        assert!(Instant::now() < deadline, "no message about object {object}; see {}", w.dir().display());
        thread::sleep(Duration::from_millis(100));
    }
}

/// The objects the decision lines name so far.
fn objects_seen(w: &Worker) -> HashSet<String> {
    decision_lines(&w.log_contents()).iter().filter_map(|l| l["object"].as_str().map(str::to_owned)).collect()
}

/// Waits for a decision line `decision` of an object not in `before`; returns its object.
fn new_object_with(w: &Worker, before: &HashSet<String>, decision: &str) -> String {
    let line = logs::wait_for_line(w, &format!("'{decision}' of a new object"), |line| {
        line["decision"] == decision && line["object"].as_str().is_some_and(|object| !before.contains(object))
    });
    line["object"].as_str().unwrap_or_default().to_owned()
}

/// An asynchronous job's final outcome and an unknown outcome are published, each once,
/// naming the object and the decision and nothing of the request; an outcome its caller
/// was answered with (a plain execution) is not.
#[test]
fn a_jobs_outcome_and_an_unknown_outcome_are_published_and_nothing_of_the_request() {
    let (o, w) = queued();

    // 1. A job: 202 now, executed from the alarm, then published.
    let before = objects_seen(w);
    let key = new_key();
    let job = payment(&new_path(), &key).header("Prefer", "respond-async");
    let accepted = w.send(&job);
    assert_eq!(accepted.status, 202, "{accepted:?}");
    let job_object = new_object_with(w, &before, "accepted");
    let message = wait_for_message(w, &job_object);
    assert_eq!(message["version"], 1, "{message}");
    assert_eq!(message["decision"], "executed", "{message}");
    assert_eq!(message["asynchronous"], true, "{message}");
    assert_eq!(message["origin_status"], 201, "{message}");
    assert!(message["at_ms"].as_u64().is_some_and(|ms| ms > 1_700_000_000_000), "{message}");
    assert_eq!(o.executions(&key), 1);
    let fields: Vec<&String> = message.as_object().map(|m| m.keys().collect()).unwrap_or_default();
    assert_eq!(
        fields,
        ["asynchronous", "at_ms", "decision", "object_id", "origin_status", "version"]
            .iter()
            .collect::<Vec<_>>(),
        "only these fields: {message}"
    );

    // 2. A plain execution: its caller has the answer; nothing is published.
    let before = objects_seen(w);
    let key = new_key();
    assert_executed(&w.send(&payment(&new_path(), &key)), 201);
    let executed_object = new_object_with(w, &before, "executed");

    // 3. An origin slower than the timeout: 502 outcome-unknown, and published.
    let before = objects_seen(w);
    let key = new_key();
    let delay = (ORIGIN_TIMEOUT_SECONDS * 1000 + 1500).to_string();
    let slow = w.send(&payment(&new_path(), &key).header("x-test-delay-ms", delay));
    assert_problem(&slow, 502, "outcome-unknown");
    let unknown_object = new_object_with(w, &before, "unknown");
    let message = wait_for_message(w, &unknown_object);
    assert_eq!(message["decision"], "unknown", "{message}");
    assert_eq!(message["asynchronous"], false, "{message}");
    assert!(message["origin_status"].is_null(), "the origin never answered: {message}");

    // The queue delivers in order here (one message a batch): the execution's message, had
    // there been one, would have come before the unknown outcome's.
    let all = messages(w);
    assert!(all.iter().all(|m| m["object_id"] != executed_object.as_str()), "a plain execution: {all:?}");
    for object in [&job_object, &unknown_object] {
        let count = all.iter().filter(|m| m["object_id"] == object.as_str()).count();
        assert_eq!(count, 1, "one message about {object}: {all:?}");
    }
    assert!(!w.log_contents().contains("outcome-publish-failed"), "{}", w.log_tail(40));
    logs::scan_for_leaks(w, &[]).unwrap_or_else(|e| panic!("{e}"));
}
