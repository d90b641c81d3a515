//! End-to-end tests of the admin API, in real workerd in front of a real loopback origin.
//!
//! - `with_token()`: `ADMIN_TOKEN` is set; one test drives it, so the object ids in its log
//!   belong to that test's requests.
//! - `without_token()`: no token, so the admin paths are ordinary traffic.

use std::sync::OnceLock;

use crate::support::assert::{assert_problem, is_problem, problem_kind};
use crate::support::http::Request;
use crate::support::logs;
use crate::support::origin::Origin;
use crate::support::requests::{covered, new_key, unique, DEFAULT_CREDENTIAL};
use crate::support::worker::{shared, Readiness, Worker, WorkerConfig};

const TOKEN: &str = "e2e-admin-token-7f3a-0123456789abcdef01234567";

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
    covered("POST", path, key, r#"{"amount":300,"currency":"eur"}"#)
}

fn admin(method: &str, path: &str, token: Option<&str>) -> Request {
    let request = Request::new(method, path).header("X-Operator", "alice@example.com");
    match token {
        Some(token) => request.header("Authorization", format!("Bearer {token}")),
        None => request.anonymous(),
    }
}

#[test]
fn inspect_and_purge_a_record_by_the_object_id_in_the_logs() {
    let (w, o) = (with_token(), origin());
    let key = new_key();
    let path = format!("/v1/charges/{}", unique("p"));
    // The first execution has a status of its own, so its log line names the object.
    let object = logs::object_of(w, &payment(&path, &key));
    let record = format!("/__idempotency/records/{object}");

    // A wrong or absent token is 401 and says nothing about the record.
    for token in [None, Some("wrong-token"), Some(&TOKEN[..TOKEN.len() - 1])] {
        for method in ["GET", "DELETE"] {
            let r = w.send(&admin(method, &record, token));
            assert_problem(&r, 401, "unauthorized");
            assert!(!r.text().contains(&object), "a refused call reveals nothing: {r:?}");
        }
    }
    let absent = format!("/__idempotency/records/{}", "0".repeat(64));
    assert_problem(&w.send(&admin("GET", &absent, None)), 401, "unauthorized");
    assert!(w.send(&payment(&path, &key)).is_replayed(), "refused admin calls changed nothing");

    // Inspect.
    let inspected = w.send(&admin("GET", &record, Some(TOKEN)));
    assert_eq!(inspected.status, 200, "{inspected:?}");
    let view = inspected.json();
    assert_eq!(view["object_id"], object.as_str(), "{view}");
    assert_eq!(view["state"], "completed", "{view}");
    assert!(view.get("fault_injection").is_none(), "no fault injection here: {view}");
    assert!(view["status"].as_u64().is_some_and(|s| (227..=299).contains(&s)), "the marked status: {view}");
    assert!(view["body_bytes"].as_u64().unwrap_or(0) > 0, "{view}");
    assert!(view.get("fingerprint").is_none(), "no fingerprint unless revealed: {view}");
    let revealed = w.send(&admin("GET", &format!("{record}?reveal=fingerprint"), Some(TOKEN))).json();
    assert_eq!(revealed["fingerprint"].as_str().map(str::len), Some(64), "{revealed}");
    let created = view["created_at_ms"].as_u64().unwrap_or_else(|| panic!("created_at_ms: {view}"));
    let expires = view["expires_at_ms"].as_u64().unwrap_or_else(|| panic!("expires_at_ms: {view}"));
    assert_eq!(expires - created, 86_400_000, "expires after the default TTL of a day: {view}");
    assert_eq!(view["waiters"], 0, "{view}");
    assert!(!inspected.text().contains("amount"), "inspect never shows the stored body: {view}");

    // Look the record up by what a customer can tell: the key and the credential it was
    // sent with (in a JSON body, never the URL). The answer is the same view, naming the
    // object id and never the scope.
    let lookup = |body: String| {
        w.send(
            &admin("POST", "/__idempotency/lookup", Some(TOKEN))
                .header("Content-Type", "application/json")
                .body(body),
        )
    };
    let found = lookup(format!(r#"{{"key":"{key}","credential":"{DEFAULT_CREDENTIAL}"}}"#));
    assert_eq!(found.status, 200, "{found:?}");
    assert_eq!(found.json()["object_id"], object.as_str(), "{}", found.text());
    assert_eq!(found.json()["state"], "completed");
    assert!(!found.text().contains("e2e-default-caller"), "the scope is never shown: {}", found.text());
    // Another caller's credential names another object: nothing is there.
    let other = lookup(format!(r#"{{"key":"{key}","credential":"Bearer someone-else"}}"#));
    assert_eq!(other.json()["state"], "absent", "{}", other.text());
    assert_ne!(other.json()["object_id"], object.as_str());
    assert_problem(&lookup(r#"{"credential":"Bearer x"}"#.to_owned()), 400, "invalid-lookup");
    assert_problem(&w.send(&admin("GET", "/__idempotency/lookup", Some(TOKEN))), 405, "method-not-allowed");

    // Endpoints and objects that do not exist.
    assert_problem(&w.send(&admin("GET", "/__idempotency/records/not-an-id", Some(TOKEN))), 404, "not-found");
    let never_issued = format!("/__idempotency/records/{}", "b".repeat(64));
    assert_problem(&w.send(&admin("GET", &never_issued, Some(TOKEN))), 404, "not-found");
    assert_problem(&w.send(&admin("POST", &record, Some(TOKEN))), 405, "method-not-allowed");

    // A completed record is only purged with force: the next retry would charge again.
    let refused = w.send(&admin("DELETE", &record, Some(TOKEN)));
    assert_eq!(refused.status, 409, "{refused:?}");
    assert!(w.send(&payment(&path, &key)).is_replayed(), "the refused purge changed nothing");
    // Purge with force: the key executes again.
    let purged = w.send(&admin("DELETE", &format!("{record}?force=true"), Some(TOKEN)));
    assert_eq!(purged.status, 200, "{purged:?}");
    assert_eq!(w.send(&admin("GET", &record, Some(TOKEN))).json()["state"], "absent");
    let again = w.send(&payment(&path, &key));
    assert_eq!(again.status, 201);
    assert!(!again.is_replayed(), "a purged key executes again: {again:?}");
    assert_eq!(o.executions(&key), 2);

    // A record in flight (the origin holds it) is only purged with force.
    let slow_path = format!("/v1/charges/{}", unique("p"));
    let slow_key = new_key();
    let slow_object = logs::object_of(w, &payment(&slow_path, &slow_key));
    let slow_record = format!("/__idempotency/records/{slow_object}");
    assert_eq!(w.send(&admin("DELETE", &format!("{slow_record}?force=true"), Some(TOKEN))).status, 200);
    let gate = o.gate();
    let second = gate.on(payment(&slow_path, &slow_key)).start(w.addr).expect("send the held attempt");
    gate.expect_arrival("the held attempt");
    let view = w.send(&admin("GET", &slow_record, Some(TOKEN))).json();
    assert_eq!(view["state"], "in-flight", "{view}");
    assert_eq!(view["executing_now"], true, "{view}");
    let refused = w.send(&admin("DELETE", &slow_record, Some(TOKEN)));
    assert_eq!(refused.status, 409, "an in-flight record needs force: {refused:?}");
    assert_eq!(problem_kind(&refused).as_deref(), Some("in-progress"), "{refused:?}");
    let forced = w.send(&admin("DELETE", &format!("{slow_record}?force=true"), Some(TOKEN)));
    assert_eq!(forced.status, 200, "{forced:?}");
    assert_eq!(w.send(&admin("GET", &slow_record, Some(TOKEN))).json()["state"], "absent");
    gate.release();
    assert_eq!(second.finish().expect("the held attempt's answer").status, 201);
    assert_eq!(o.executions(&slow_key), 2);

    // Every call wrote an audit line naming the operator, refused ones included, and no
    // line holds the token.
    let audits = audit_lines(w);
    let about = |operation: &str, status: u64| {
        audits.iter().any(|a| {
            a["operation"] == operation
                && a["status"] == status
                && a["object"] == object.as_str()
                && a["operator"] == "alice@example.com"
        })
    };
    assert!(about("refused", 401), "{audits:?}");
    assert!(about("inspect", 200), "{audits:?}");
    assert!(about("inspect-reveal", 200), "{audits:?}");
    assert!(about("purge", 409), "{audits:?}");
    assert!(about("purge-force", 200), "{audits:?}");
    assert!(!w.log_contents().contains(TOKEN), "the token is never logged");
}

/// The audit lines in the worker's log.
fn audit_lines(w: &Worker) -> Vec<serde_json::Value> {
    w.log_contents()
        .lines()
        .filter_map(|line| line.find("{\"event\":\"admin-audit\"").map(|at| line[at..].trim_end().to_owned()))
        .filter_map(|json| serde_json::from_str(&json).ok())
        .collect()
}

#[test]
fn without_a_token_the_admin_paths_are_ordinary_traffic() {
    let (w, o) = (without_token(), origin());
    let path = format!("/__idempotency/records/{}", "a".repeat(64));
    let r = w.send(&admin("GET", &path, Some(TOKEN)));
    assert!(
        r.has_header("x-origin-execution") && !is_problem(&r),
        "the worker exposes nothing; the origin answered: {r:?}"
    );
    assert_eq!(o.executions_at(&path), 1);
}
