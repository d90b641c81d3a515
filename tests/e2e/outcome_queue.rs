//! `OUTCOME_QUEUE`: the key's object publishes the outcomes a caller may never
//! come back for to a Cloudflare Queue. Here the queue is local workerd's, and its consumer
//! is a second worker in the same `wrangler dev` that prints every message it gets.
//!
//! Instances: `queued()` (a plain test origin; a job gives up after two refusals; an
//! observe-mode route), `reconciled()` (an origin with a ledger and a lookup,
//! `support::ledger_origin`, behind a `reconcile_url` route) and `failing()` (its
//! `OUTCOME_QUEUE` is no working queue: every send fails), and `deduplicating()` (an origin
//! that deduplicates by key, `support::dedup_origin`, under `ORIGIN_DEDUPLICATES`).
//!
//! "No second message" is read once a later message, sent after everything the check is
//! about, has come: the queue delivers one message a batch, in order, so every earlier one
//! has come by then. Never after a fixed wait.

use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::assert::{assert_executed, assert_problem};
use crate::support::dedup_origin::DedupOrigin;
use crate::support::http::Request;
use crate::support::ledger_origin::{LedgerOrigin, Plan};
use crate::support::logs::{self, LOG_TIMEOUT};
use crate::support::origin::Origin;
use crate::support::requests::{new_credential, new_key, new_path, payment, unique};
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

/// [`CONSUMER_TOML`] for another instance of this process: each names its consumer and
/// queue after `tag`, so that no two workers of one name meet in wrangler's dev registry.
fn consumer_toml(tag: &str) -> String {
    CONSUMER_TOML
        .replace("e2e-outcome-consumer", &format!("e2e-outcome-consumer-{tag}-{}", std::process::id()))
        .replace("e2e-outcomes", &format!("e2e-outcomes-{tag}"))
}

/// [`PRODUCER`] for the queue of [`consumer_toml`]`(tag)`.
fn producer(tag: &str) -> String {
    PRODUCER.replace("e2e-outcomes", &format!("e2e-outcomes-{tag}"))
}

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

/// Every path is covered as by default, but `/v1/observed/*`, in observe mode.
const ROUTES: &str = r#"[{"pattern":"/v1/observed/*","mode":"observe"},{"pattern":"*"}]"#;

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
            // A job the origin keeps refusing gives up after two sends, a second apart.
            ("MAX_ORIGIN_ATTEMPTS", "2".to_owned()),
            ("ASYNC_MAX_BACKOFF_SECONDS", "1".to_owned()),
            ("IDEMPOTENCY_ROUTES", ROUTES.to_owned()),
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

/// `request`, named by a `cf-ray` of its own: its decision line's `request_id`, so that its
/// object is found whatever other tests send to the shared instance meanwhile.
fn named(request: Request) -> (Request, String) {
    let ray = format!("{}-TST", unique("ray"));
    (request.header("cf-ray", &ray), ray)
}

/// Sends `request` named (see [`named`]); its answer and the object of its decision line.
fn send_named(w: &Worker, request: Request) -> (crate::support::http::Response, String) {
    let (request, ray) = named(request);
    let answer = w.send(&request);
    let line = logs::wait_for_line(w, "the named request's line", |line| line["request_id"] == ray.as_str());
    let object = line["object"].as_str().unwrap_or_else(|| panic!("no object in {line}")).to_owned();
    (answer, object)
}

/// An asynchronous job's final outcome and an unknown outcome are published, each once,
/// naming the object and the decision and nothing of the request; an outcome its caller
/// was answered with (a plain execution) is not.
#[test]
fn a_jobs_outcome_and_an_unknown_outcome_are_published_and_nothing_of_the_request() {
    let (o, w) = queued();

    // 1. A job: 202 now, executed from the alarm, then published.
    let key = new_key();
    let job = payment(&new_path(), &key).header("Prefer", "respond-async");
    let (accepted, job_object) = send_named(w, job);
    assert_eq!(accepted.status, 202, "{accepted:?}");
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
    let key = new_key();
    let (executed, executed_object) = send_named(w, payment(&new_path(), &key));
    assert_executed(&executed, 201);

    // 3. An origin slower than the timeout: 502 outcome-unknown, and published.
    let (slow, unknown_object) = send_named(w, slower_than_the_timeout());
    assert_problem(&slow, 502, "outcome-unknown");
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

/// The messages about `object` so far.
fn messages_about(w: &Worker, object: &str) -> Vec<Value> {
    messages(w).into_iter().filter(|m| m["object_id"] == object).collect()
}

/// Waits for a message about `object` with this decision.
fn wait_for_decision(w: &Worker, object: &str, decision: &str) -> Value {
    let deadline = Instant::now() + LOG_TIMEOUT;
    loop {
        if let Some(message) = messages_about(w, object).into_iter().find(|m| m["decision"] == decision) {
            return message;
        }
        assert!(
            Instant::now() < deadline,
            "no '{decision}' message about object {object}: {:?}; see {}",
            messages_about(w, object),
            w.dir().display()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// A message sent after everything before it: an origin slower than the timeout (502
/// `outcome-unknown`, published). Once it has come, every message published before it has
/// come too. Returns its object.
fn sentinel_message(w: &Worker, slow: Request) -> String {
    let (answer, object) = send_named(w, slow);
    assert_problem(&answer, 502, "outcome-unknown");
    wait_for_decision(w, &object, "unknown");
    object
}

/// A payment the test origin answers after the origin timeout (`queued()`'s origin).
fn slower_than_the_timeout() -> Request {
    let delay = (ORIGIN_TIMEOUT_SECONDS * 1000 + 1500).to_string();
    payment(&new_path(), &new_key()).header("x-test-delay-ms", delay)
}

/// A job the origin refuses until it gives up: its `gave-up` is published once,
/// with the origin's last status, and the key is released. Observe mode publishes nothing,
/// not even the outcomes enforcing would publish (an unknown one). Read once a later
/// message has come: no message comes late, and none comes twice.
#[test]
fn a_job_that_gives_up_is_published_once_and_observe_mode_publishes_nothing() {
    let (o, w) = queued();

    // 1. A job the origin refuses (503, a release status) twice: it gives up.
    let key = new_key();
    let job = payment(&new_path(), &key).header("Prefer", "respond-async").header("x-test-status", "503");
    let (accepted, job_object) = send_named(w, job.clone());
    assert_eq!(accepted.status, 202, "{accepted:?}");
    let gave_up = wait_for_decision(w, &job_object, "gave-up");
    assert_eq!(gave_up["asynchronous"], true, "{gave_up}");
    assert_eq!(gave_up["origin_status"], 503, "the origin's last answer: {gave_up}");
    assert_eq!(o.executions(&key), 2, "sent MAX_ORIGIN_ATTEMPTS times");
    // Its poll says so, and the key is released: sent again, it executes.
    assert_problem(&w.send(&job), 503, "origin-unavailable");
    let again = job.clone().without_header("Prefer").without_header("x-test-status");
    assert_executed(&w.send(&again), 201);
    assert_eq!(o.executions(&key), 3);

    // 2. Observe mode: an execution and an origin slower than the timeout. Enforcing, the
    // second would be published as unknown; observing, neither is.
    let observed_key = new_key();
    let (executed, executed_object) =
        send_named(w, payment(&format!("/v1/observed/{}", unique("p")), &observed_key));
    assert_executed(&executed, 201);
    let slow_key = new_key();
    let delay = (ORIGIN_TIMEOUT_SECONDS * 1000 + 1500).to_string();
    let slow = payment(&format!("/v1/observed/{}", unique("p")), &slow_key).header("x-test-delay-ms", delay);
    let (slow_answer, slow_object) = send_named(w, slow);
    assert_eq!(o.executions(&slow_key), 1, "observe mode forwards: {slow_answer:?}");
    let observed_objects = [executed_object, slow_object];

    // 3. A sentinel: every message published before it has come once it has.
    let sentinel = sentinel_message(w, slower_than_the_timeout());
    let all = messages(w);
    let about = |object: &str| all.iter().filter(|m| m["object_id"] == object).cloned().collect::<Vec<_>>();
    assert_eq!(
        about(&job_object).len(),
        1,
        "one message about the job, its gave-up: {:?}",
        about(&job_object)
    );
    for object in &observed_objects {
        assert!(about(object).is_empty(), "observe mode published {:?}", about(object));
    }
    assert_eq!(about(&sentinel).len(), 1, "{all:?}");
    assert!(!w.log_contents().contains("outcome-publish-failed"), "{}", w.log_tail(40));
    logs::scan_for_leaks(w, &[]).unwrap_or_else(|e| panic!("{e}"));
}

// ---------------------------------------------------------------------------------------
// Reconciliation: an origin with a ledger and a lookup

/// Longer than the origin timeout: the worker gives up first.
const STALL: Duration = Duration::from_secs(4);

fn reconciled() -> &'static (LedgerOrigin, Worker) {
    static CELL: OnceLock<Result<(LedgerOrigin, Worker), String>> = OnceLock::new();
    shared(&CELL, || {
        // The ledger verifies the edge's signature on every request, lookups included.
        let secret = crate::support::requests::secret("origin-auth");
        let origin = LedgerOrigin::start(&secret);
        let routes = format!(r#"[{{"pattern":"/v1/charges","reconcile_url":"{}"}}]"#, origin.reconcile_url());
        let vars = [
            ("ORIGIN_URL", origin.url()),
            ("STORAGE_ENCRYPTION_KEYS", STORAGE_KEYS.to_owned()),
            ("ORIGIN_TIMEOUT_SECONDS", ORIGIN_TIMEOUT_SECONDS.to_string()),
            ("IDEMPOTENCY_TTL_SECONDS", "600".to_owned()),
            ("IDEMPOTENCY_ROUTES", routes),
            ("ORIGIN_AUTH_SECRET", secret),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect();
        let w = Worker::start_with_configs(
            WorkerConfig { name: "outcome-queue-ledger".into(), vars, readiness: Readiness::OriginAnswers },
            &key_object_toml("e2e-outcome-queue-ledger", &producer("ledger")),
            &[&consumer_toml("ledger")],
            &[("consumer.mjs", CONSUMER)],
        )?;
        Ok((origin, w))
    })
}

/// A charge under a new key whose first attempt goes as `plan` says (its reply never
/// comes: 502 `outcome-unknown`), with its next `failing_lookups` lookups answering 503.
/// Returns the key and its object.
fn lost_charge(o: &LedgerOrigin, w: &Worker, plan: Plan, failing_lookups: usize) -> (String, String) {
    let (key, credential) = (new_key(), new_credential("queue-reconcile"));
    o.plan_next(&key, plan);
    o.fail_next_lookups(&key, failing_lookups);
    let ray = format!("{}-TST", unique("ray"));
    let charge = Request::post("/v1/charges")
        .header("Authorization", &credential)
        .header("Idempotency-Key", &key)
        .header("cf-ray", &ray)
        .json(r#"{"amount":1000,"currency":"eur"}"#)
        .timeout(Duration::from_secs(120));
    assert_problem(&w.send(&charge), 502, "outcome-unknown");
    let line = logs::wait_for_line(w, "the charge's line", |line| line["request_id"] == ray.as_str());
    let object = line["object"].as_str().unwrap_or_else(|| panic!("no object in {line}")).to_owned();
    (key, object)
}

/// Every reconciliation is published: a lookup that finds the charge
/// (`reconciled-executed`, with the lookup's 200), one that finds none once it can be
/// believed (`reconciled-not-executed`, 404), and one that says nothing
/// (`reconcile-failed`, 503), each after the `unknown` it settles, and none twice.
#[test]
fn every_reconciliation_is_published_after_the_unknown_outcome_it_settles() {
    let (o, w) = reconciled();
    let (executed_key, executed) = lost_charge(o, w, Plan::ChargeThenStall(STALL), 0);
    let (not_executed_key, not_executed) = lost_charge(o, w, Plan::StallThenDrop(STALL), 0);
    let (failed_key, failed) = lost_charge(o, w, Plan::ChargeThenStall(STALL), 1);

    let found = wait_for_decision(w, &executed, "reconciled-executed");
    assert_eq!(found["origin_status"], 200, "the lookup's status: {found}");
    assert_eq!(found["asynchronous"], false, "{found}");
    let none = wait_for_decision(w, &not_executed, "reconciled-not-executed");
    assert_eq!(none["origin_status"], 404, "{none}");
    let silent = wait_for_decision(w, &failed, "reconcile-failed");
    assert_eq!(silent["origin_status"], 503, "{silent}");
    // Asked again later, it finds the charge.
    wait_for_decision(w, &failed, "reconciled-executed");
    assert_eq!(
        (o.charges(&executed_key), o.charges(&not_executed_key), o.charges(&failed_key)),
        (1, 0, 1),
        "the ledger's charges"
    );

    // A sentinel: a fourth charge, settled; every message before its last has come.
    let (_, sentinel) = lost_charge(o, w, Plan::ChargeThenStall(STALL), 0);
    wait_for_decision(w, &sentinel, "reconciled-executed");
    for object in [&executed, &not_executed, &failed, &sentinel] {
        let about = messages_about(w, object);
        let decisions: Vec<&str> = about.iter().filter_map(|m| m["decision"].as_str()).collect();
        assert_eq!(decisions.first(), Some(&"unknown"), "the unknown outcome comes first: {about:?}");
        assert_eq!(decisions.iter().filter(|d| **d == "unknown").count(), 1, "{about:?}");
        let settled = decisions.iter().filter(|d| d.starts_with("reconciled-")).count();
        assert_eq!(settled, 1, "settled once, and nothing after: {about:?}");
        assert!(decisions.last().is_some_and(|d| d.starts_with("reconciled-")), "{about:?}");
    }
    assert!(!w.log_contents().contains("outcome-publish-failed"), "{}", w.log_tail(40));
    logs::scan_for_leaks(w, &[]).unwrap_or_else(|e| panic!("{e}"));
}

// ---------------------------------------------------------------------------------------
// A publish that fails

/// `OUTCOME_QUEUE` bound to something that is no working queue: a service whose `send`
/// throws. (Its `send` is an RPC stub, which the worker's call of a queue's `send` already
/// refuses: either way the send fails, as it does when the queue is down.)
const FAILING_QUEUE_TOML: &str = r#"
name = "e2e-failing-queue-{PID}"
main = "{DIR}/failing-queue.mjs"
compatibility_date = "2026-04-26"
"#;

const FAILING_QUEUE: &str = r#"
import { WorkerEntrypoint } from "cloudflare:workers";
export default class FailingQueue extends WorkerEntrypoint {
  fetch() { return new Response("failing queue"); }
  async send() { throw new Error("the queue is unavailable"); }
}
"#;

fn failing() -> &'static (Origin, Worker) {
    static CELL: OnceLock<Result<(Origin, Worker), String>> = OnceLock::new();
    shared(&CELL, || {
        let origin = Origin::start();
        let pid = std::process::id().to_string();
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
        let binding =
            format!("\n[[services]]\nbinding = \"OUTCOME_QUEUE\"\nservice = \"e2e-failing-queue-{pid}\"\n");
        let w = Worker::start_with_configs(
            WorkerConfig { name: "outcome-queue-failing".into(), vars, readiness: Readiness::OriginAnswers },
            &key_object_toml("e2e-outcome-queue-failing", &binding),
            &[&FAILING_QUEUE_TOML.replace("{PID}", &pid)],
            &[("failing-queue.mjs", FAILING_QUEUE)],
        )?;
        Ok((origin, w))
    })
}

/// A publish that fails changes nothing its caller sees: an unknown outcome is
/// still 502 `outcome-unknown`, to the retry too, and a job still executes once and its
/// poll gets the answer. Each failure is logged with the object (`outcome-publish-failed`),
/// never with the key.
#[test]
fn a_failing_publish_leaves_every_answer_unchanged_and_is_logged() {
    let (o, w) = failing();

    // An unknown outcome.
    let key = new_key();
    let delay = (ORIGIN_TIMEOUT_SECONDS * 1000 + 1500).to_string();
    let slow = payment(&new_path(), &key).header("x-test-delay-ms", delay);
    let (answer, unknown_object) = send_named(w, slow.clone());
    assert_problem(&answer, 502, "outcome-unknown");
    logs::wait_for_text(w, &format!(r#"{{"event":"outcome-publish-failed","object":"{unknown_object}"}}"#));
    assert_problem(&w.send(&slow), 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1, "held, never sent again");

    // A job.
    let key = new_key();
    let job = payment(&new_path(), &key).header("Prefer", "respond-async");
    let (accepted, job_object) = send_named(w, job.clone());
    assert_eq!(accepted.status, 202, "{accepted:?}");
    logs::wait_for_text(w, &format!(r#"{{"event":"outcome-publish-failed","object":"{job_object}"}}"#));
    let done = w.send(&job);
    assert_eq!(done.status, 201, "the job's answer: {done:?}");
    assert!(done.is_replayed(), "{done:?}");
    assert_eq!(o.executions(&key), 1);

    // Nothing of the request is in the failure's line: the object and the error, no more.
    for line in w.log_contents().lines().filter(|line| line.contains("outcome-publish-failed")) {
        assert!(!line.contains(&key), "{line}");
    }
    logs::scan_for_leaks(w, &[]).unwrap_or_else(|e| panic!("{e}"));
}

// ---------------------------------------------------------------------------------------
// A job held unknown

fn deduplicating() -> &'static (DedupOrigin, Worker) {
    static CELL: OnceLock<Result<(DedupOrigin, Worker), String>> = OnceLock::new();
    shared(&CELL, || {
        let origin = DedupOrigin::start();
        let vars = [
            ("ORIGIN_URL", origin.url()),
            ("ASYNC_ACCEPT", "prefer".to_owned()),
            ("ORIGIN_DEDUPLICATES", "true".to_owned()),
            ("MAX_ORIGIN_ATTEMPTS", "2".to_owned()),
            ("ASYNC_MAX_BACKOFF_SECONDS", "1".to_owned()),
            ("STORAGE_ENCRYPTION_KEYS", STORAGE_KEYS.to_owned()),
            ("ORIGIN_TIMEOUT_SECONDS", ORIGIN_TIMEOUT_SECONDS.to_string()),
            ("IDEMPOTENCY_TTL_SECONDS", "600".to_owned()),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect();
        let w = Worker::start_with_configs(
            WorkerConfig { name: "outcome-queue-dedup".into(), vars, readiness: Readiness::OriginAnswers },
            &key_object_toml("e2e-outcome-queue-dedup", &producer("dedup")),
            &[&consumer_toml("dedup")],
            &[("consumer.mjs", CONSUMER)],
        )?;
        Ok((origin, w))
    })
}

/// A job whose first send is lost after it went out (it may have executed) is sent again,
/// the origin deduplicating; the origin refuses that one (503), and the sends are used up.
/// The key is held unknown, and that is what is published: `unknown`, never `released`
/// (which would tell a consumer that the request certainly did not execute).
#[test]
fn a_job_held_unknown_after_a_refused_resend_is_published_as_unknown() {
    let (o, w) = deduplicating();
    let key = new_key();
    let job = Request::post(&format!("/v1/charges/{}", unique("p")))
        .header("Idempotency-Key", &key)
        .header("Prefer", "respond-async")
        .header("x-test-drop-first", "1")
        .header("x-test-fail-first", "1000")
        .json(r#"{"amount":2500,"currency":"eur"}"#);
    let (accepted, object) = send_named(w, job.clone());
    assert_eq!(accepted.status, 202, "{accepted:?}");
    let deadline = Instant::now() + Duration::from_secs(120);
    let held = loop {
        let r = w.send(&job);
        if r.status != 202 {
            break r;
        }
        assert!(Instant::now() < deadline, "still pending after two minutes: {r:?}");
        thread::sleep(Duration::from_millis(300));
    };
    assert_problem(&held, 502, "outcome-unknown");
    assert_eq!(o.received(&key), 2, "lost once, refused once");
    let message = wait_for_message(w, &object);
    assert_eq!(message["decision"], "unknown", "{message}");
    assert_eq!(message["asynchronous"], true, "{message}");
    // Its log line says the same, and no line or message of it says "released".
    logs::wait_for_line(w, "the job's unknown outcome", |line| {
        line["object"] == object.as_str() && line["decision"] == "unknown"
    });
    let lines = logs::lines_of(w, &object);
    assert!(lines.iter().all(|line| line["decision"] != "released"), "{lines:?}");
    // A sentinel: any later message about the job would have come before its own.
    let sentinel_key = new_key();
    let sentinel = Request::post(&format!("/v1/charges/{}", unique("p")))
        .header("Idempotency-Key", &sentinel_key)
        .header("Prefer", "respond-async")
        .json("{}");
    let (accepted, sentinel_object) = send_named(w, sentinel);
    assert_eq!(accepted.status, 202, "{accepted:?}");
    wait_for_decision(w, &sentinel_object, "executed");
    let about = messages_about(w, &object);
    assert_eq!(about.len(), 1, "one message about the job: {about:?}");
}
