//! End-to-end tests of the admin API, in real workerd in front of a real loopback origin.
//!
//! - `with_token()`: `ADMIN_TOKEN` is set; one test drives it, so the object ids in its log
//!   belong to that test's requests.
//! - `without_token()`: no token, so the admin paths are ordinary traffic.

mod support;

use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use support::http::{Request, Response};
use support::origin::Origin;
use support::unique;
use support::worker::{shared, Readiness, Worker, WorkerConfig};

const TOKEN: &str = "e2e-admin-token-7f3a";

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn start(name: &str, token: Option<&str>) -> Result<Worker, String> {
    let mut vars = vec![
        ("ORIGIN_URL".to_string(), origin().url()),
        ("ORIGIN_TIMEOUT_SECONDS".to_string(), "20".to_string()),
        ("DUPLICATE_WAIT_SECONDS".to_string(), "10".to_string()),
    ];
    if let Some(token) = token {
        vars.push(("ADMIN_TOKEN".to_string(), token.to_string()));
    }
    Worker::start(WorkerConfig { name: name.into(), vars, readiness: Readiness::OriginAnswers })
}

fn instance(
    cell: &'static OnceLock<Result<Worker, String>>,
    name: &str,
    token: Option<&str>,
) -> &'static Worker {
    shared(cell, || start(name, token))
}

fn with_token() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, "admin", Some(TOKEN))
}

fn without_token() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, "no-admin", None)
}

fn payment(path: &str, key: &str) -> Request {
    Request::post(path).header("Idempotency-Key", key).json(r#"{"amount":300,"currency":"eur"}"#)
}

fn admin(method: &str, path: &str, token: Option<&str>) -> Request {
    let request = Request::new(method, path);
    match token {
        Some(token) => request.header("Authorization", format!("Bearer {token}")),
        None => request,
    }
}

fn problem_type(r: &Response) -> String {
    r.json()["type"].as_str().unwrap_or_default().to_string()
}

/// The object ids of the executed requests in the worker's log, oldest first.
fn executed_objects(w: &Worker) -> Vec<String> {
    w.log_contents()
        .lines()
        .filter_map(|line| line.find("{\"event\":\"idempotency\"").map(|at| &line[at..]))
        .filter_map(|json| serde_json::from_str::<serde_json::Value>(json.trim_end()).ok())
        .filter(|line| line["decision"] == "executed")
        .filter_map(|line| line["object"].as_str().map(str::to_owned))
        .collect()
}

/// The object id of the execution logged after the first `seen` ones (wrangler writes the
/// log a moment after the response).
fn next_executed_object(w: &Worker, seen: usize) -> String {
    for _ in 0..40 {
        if let Some(id) = executed_objects(w).get(seen) {
            return id.clone();
        }
        thread::sleep(Duration::from_millis(250));
    }
    panic!("no new executed log line with an object id; see {}", w.dir().display());
}

#[test]
fn inspect_and_purge_a_record_by_the_object_id_in_the_logs() {
    let (w, o) = (with_token(), origin());
    let key = unique("admin");
    let path = format!("/v1/charges/{}", unique("p"));
    let seen = executed_objects(w).len();
    assert_eq!(w.send(&payment(&path, &key)).status, 201);
    let object = next_executed_object(w, seen);
    let record = format!("/__idempotency/records/{object}");

    // A wrong or absent token is 401 and says nothing about the record.
    for token in [None, Some("wrong-token"), Some("e2e-admin-token-7f3")] {
        for method in ["GET", "DELETE"] {
            let r = w.send(&admin(method, &record, token));
            assert_eq!(r.status, 401, "{method} with {token:?}: {r:?}");
            assert_eq!(problem_type(&r), "urn:idempotency-edge:problem:unauthorized");
            assert!(!r.text().contains(&object), "a refused call reveals nothing: {r:?}");
        }
    }
    let absent = format!("/__idempotency/records/{}", "0".repeat(64));
    assert_eq!(w.send(&admin("GET", &absent, None)).status, 401, "unknown records are refused alike");
    assert!(w.send(&payment(&path, &key)).is_replayed(), "refused admin calls changed nothing");

    // Inspect.
    let inspected = w.send(&admin("GET", &record, Some(TOKEN)));
    assert_eq!(inspected.status, 200, "{inspected:?}");
    let view = inspected.json();
    assert_eq!(view["state"], "completed", "{view}");
    assert_eq!(view["status"], 201);
    assert!(view["body_bytes"].as_u64().unwrap_or(0) > 0, "{view}");
    assert_eq!(view["fingerprint"].as_str().map(str::len), Some(64));
    assert!(view["expires_at_ms"].as_u64() > view["created_at_ms"].as_u64(), "{view}");
    assert!(!inspected.text().contains("amount"), "inspect never shows the stored body: {view}");

    // Endpoints that do not exist.
    assert_eq!(w.send(&admin("GET", "/__idempotency/records/not-an-id", Some(TOKEN))).status, 404);
    assert_eq!(w.send(&admin("POST", &record, Some(TOKEN))).status, 405);

    // Purge: the key executes again.
    let purged = w.send(&admin("DELETE", &record, Some(TOKEN)));
    assert_eq!(purged.status, 200, "{purged:?}");
    assert_eq!(w.send(&admin("GET", &record, Some(TOKEN))).json()["state"], "absent");
    let seen = executed_objects(w).len();
    let again = w.send(&payment(&path, &key));
    assert_eq!(again.status, 201);
    assert!(!again.is_replayed(), "a purged key executes again: {again:?}");
    assert_eq!(o.executions(&key), 2);

    // A record in flight is only purged with force.
    let slow_key = unique("admin-slow");
    let slow = payment(&format!("/v1/charges/{}", unique("p")), &slow_key).header("x-test-delay-ms", "2500");
    let first = {
        let slow = slow.clone();
        thread::spawn(move || w.send(&slow))
    };
    assert!(o.wait_for_executions(&slow_key, 1, Duration::from_secs(30)));
    // The object id is logged when the attempt finishes. Purge that record, then send the
    // same key again: it is in flight under the same id for 2.5 s.
    let done = first.join().expect("slow request");
    assert_eq!(done.status, 201);
    let slow_object = next_executed_object(w, seen + 1);
    let slow_record = format!("/__idempotency/records/{slow_object}");
    assert_eq!(w.send(&admin("GET", &slow_record, Some(TOKEN))).json()["state"], "completed");
    assert_eq!(w.send(&admin("DELETE", &slow_record, Some(TOKEN))).status, 200);
    let second = {
        let slow = slow.clone();
        thread::spawn(move || w.send(&slow))
    };
    assert!(o.wait_for_executions(&slow_key, 2, Duration::from_secs(30)));
    let view = w.send(&admin("GET", &slow_record, Some(TOKEN))).json();
    assert_eq!(view["state"], "in-flight", "{view}");
    assert_eq!(view["executing_now"], true, "{view}");
    let refused = w.send(&admin("DELETE", &slow_record, Some(TOKEN)));
    assert_eq!(refused.status, 409, "an in-flight record needs force: {refused:?}");
    let forced = w.send(&admin("DELETE", &format!("{slow_record}?force=true"), Some(TOKEN)));
    assert_eq!(forced.status, 200, "{forced:?}");
    assert_eq!(second.join().expect("second slow request").status, 201);
}

#[test]
fn without_a_token_the_admin_paths_are_ordinary_traffic() {
    let (w, o) = (without_token(), origin());
    let path = format!("/__idempotency/records/{}", "a".repeat(64));
    let r = w.send(&admin("GET", &path, Some(TOKEN)));
    assert!(r.has_header("x-origin-execution"), "the worker exposes nothing; the origin answered: {r:?}");
    assert_eq!(o.executions_at(&path), 1);
}
