//! End-to-end tests of per-route policy (`IDEMPOTENCY_ROUTES`): every override, in real
//! workerd in front of a real loopback origin.
//!
//! Instances:
//! - `routed()`: one route per override, under `/routes/<override>/…`;
//! - `detached()`: its Durable Object binding names a worker that is not running, so every
//!   object call fails; `/open/…` fails open, everything else fails closed;
//! - `misrouted()`: an invalid route list;
//! - `mispointed()`: a route list whose only fault is a `fingerprint_ignore` pointer;
//! - `typed()`: its `[vars]` written as wrangler users write them (a number, a boolean and
//!   an array of tables, not strings).

use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert::{assert_executed, assert_problem, assert_replay_of};
use crate::support::http::Request;
use crate::support::origin::Origin;
use crate::support::requests::{covered, new_key, request, unique};
use crate::support::worker::{key_object_toml, shared as instance, Readiness, Worker, WorkerConfig};

const ROUTE_TTL_SECONDS: u64 = 10;

const ROUTES: &str = r#"[
  {"pattern": "/routes/put/*", "methods": ["PUT"]},
  {"pattern": "/routes/optional/*", "key": "optional"},
  {"pattern": "/routes/ttl/*", "ttl_seconds": 10},
  {"pattern": "/routes/no-wait/*", "duplicate_wait_seconds": 0},
  {"pattern": "/routes/timeout/*", "origin_timeout_seconds": 1},
  {"pattern": "/routes/versioned/*", "fingerprint_headers": ["X-Api-Version"]},
  {"pattern": "/routes/ignore-ts/*", "fingerprint_ignore": ["/client_ts", "/meta/sent~1at"]},
  {"pattern": "/routes/only-amount/*", "fingerprint_only": ["/amount", "/currency"]},
  {"pattern": "/routes/request-id/*", "key_header": "X-Request-Id"}
]"#;

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn vars(routes: &str) -> Vec<(String, String)> {
    [
        ("ORIGIN_URL", origin().url()),
        ("IDEMPOTENCY_TTL_SECONDS", "600".to_string()),
        ("DUPLICATE_WAIT_SECONDS", "300".to_string()),
        ("ORIGIN_TIMEOUT_SECONDS", "20".to_string()),
        ("IDEMPOTENCY_ROUTES", routes.to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

fn routed() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, || {
        Worker::start(WorkerConfig {
            name: "routed".into(),
            vars: vars(ROUTES),
            readiness: Readiness::OriginAnswers,
        })
    })
}

fn detached() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, || {
        let toml = r#"
name = "idempotency-edge-detached"
main = "{MAIN}"
compatibility_date = "2026-04-26"

[[durable_objects.bindings]]
name = "IDEMPOTENCY_KEYS"
class_name = "KeyObject"
script_name = "idempotency-edge-not-running"
"#;
        let routes = r#"[{"pattern": "/open/*", "on_object_unavailable": "fail-open"},
                         {"pattern": "/closed/*", "on_object_unavailable": "fail-closed"}]"#;
        Worker::start_with_config(
            WorkerConfig { name: "detached".into(), vars: vars(routes), readiness: Readiness::OriginAnswers },
            toml,
        )
    })
}

fn misrouted() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, || {
        let routes = r#"[{"pattern": "/a"}, {"pattern": "/b", "ttl_seconds": "sixty"}]"#;
        Worker::start(WorkerConfig {
            name: "misrouted".into(),
            vars: vars(routes),
            readiness: Readiness::AnyResponse,
        })
    })
}

fn mispointed() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, || {
        let routes = r#"[{"pattern": "/a/*", "fingerprint_ignore": ["/ok", "client_ts"]}]"#;
        Worker::start(WorkerConfig {
            name: "mispointed".into(),
            vars: vars(routes),
            readiness: Readiness::AnyResponse,
        })
    })
}

/// `[vars]` as wrangler users write them: wrangler binds a number, a boolean and an array of
/// tables as JSON values, not strings.
fn typed() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, || {
        let vars = format!(
            "[vars]\nORIGIN_URL = \"{}\"\nIDEMPOTENCY_TTL_SECONDS = 600\nORIGIN_DEDUPLICATES = false\n\
             IDEMPOTENCY_ROUTES = [{{ pattern = \"/typed/put/*\", methods = [\"PUT\"] }}, {{ pattern = \"/typed/ttl/*\", ttl_seconds = {ROUTE_TTL_SECONDS} }}]\n",
            origin().url()
        );
        Worker::start_with_config(
            WorkerConfig { name: "typed".into(), vars: Vec::new(), readiness: Readiness::OriginAnswers },
            &key_object_toml("idempotency-edge-typed", &vars),
        )
    })
}

fn payment(method: &str, path: &str, key: &str) -> Request {
    covered(method, path, key, r#"{"amount":700,"currency":"eur"}"#)
}

fn path_under(prefix: &str) -> String {
    format!("{prefix}/{}", unique("p"))
}

#[test]
fn a_route_can_cover_put_and_leave_post_uncovered() {
    let (w, o) = (routed(), origin());
    let path = path_under("/routes/put");
    let key = new_key();
    // The test origin answers PUT with 200.
    let first = w.send(&payment("PUT", &path, &key));
    assert_eq!(first.status, 200, "{first:?}");
    let retry = w.send(&payment("PUT", &path, &key));
    assert!(retry.is_replayed(), "PUT is covered on this route: {retry:?}");
    assert_eq!(retry.body, first.body);
    assert_eq!(o.executions(&key), 1);

    // The route names only PUT, so POST passes through: no key needed, no deduplication.
    let post_path = path_under("/routes/put");
    for _ in 0..2 {
        let r = w.send(&request("POST", &post_path).json("{}"));
        assert_eq!(r.status, 201, "{r:?}");
    }
    assert_eq!(o.executions_at(&post_path), 2);

    // Outside the route the defaults hold: PUT passes through, POST needs a key.
    let elsewhere = path_under("/elsewhere");
    assert_eq!(w.send(&request("PUT", &elsewhere).json("{}")).status, 200);
    assert_eq!(o.executions_at(&elsewhere), 1);
    assert_problem(&w.send(&request("POST", &elsewhere).json("{}")), 400, "missing-key");
}

/// A number, a boolean and an array of tables in `[vars]` mean what they say: the routes
/// apply (PUT covered on its route, POST passing through there), where they once made every
/// request a 500.
#[test]
fn vars_written_as_numbers_booleans_and_tables_mean_what_they_say() {
    let (w, o) = (typed(), origin());
    let path = path_under("/typed/put");
    let key = new_key();
    let first = w.send(&payment("PUT", &path, &key));
    assert_eq!(first.status, 200, "{first:?}");
    let retry = w.send(&payment("PUT", &path, &key));
    assert!(retry.is_replayed(), "PUT is covered on this route: {retry:?}");
    assert_eq!(o.executions(&key), 1);
    let post_path = path_under("/typed/put");
    for _ in 0..2 {
        assert_eq!(w.send(&request("POST", &post_path).json("{}")).status, 201);
    }
    assert_eq!(o.executions_at(&post_path), 2, "the route names only PUT");
    let ttl_key = new_key();
    let ttl_path = path_under("/typed/ttl");
    assert_executed(&w.send(&payment("POST", &ttl_path, &ttl_key)), 201);
    assert!(w.send(&payment("POST", &ttl_path, &ttl_key)).is_replayed());
}

#[test]
fn a_route_can_make_the_key_optional() {
    let (w, o) = (routed(), origin());
    let path = path_under("/routes/optional");
    for _ in 0..2 {
        let r = w.send(&request("POST", &path).json("{}"));
        assert_eq!(r.status, 201, "without a key the request passes through: {r:?}");
    }
    assert_eq!(o.executions_at(&path), 2);
    let key = new_key();
    let keyed = path_under("/routes/optional");
    let first = w.send(&payment("POST", &keyed, &key));
    let retry = w.send(&payment("POST", &keyed, &key));
    assert!(!first.is_replayed() && retry.is_replayed(), "with a key it is protected: {retry:?}");
    assert_eq!(o.executions(&key), 1);
}

/// Every retry before the route's TTL is a replay; the first one that is not comes no
/// sooner than the TTL and executes again.
#[test]
fn a_route_overrides_the_ttl() {
    let (w, o) = (routed(), origin());
    let key = new_key();
    let path = path_under("/routes/ttl");
    let sent = Instant::now();
    let first = w.send(&payment("POST", &path, &key));
    assert_executed(&first, 201);
    assert_replay_of(&w.send(&payment("POST", &path, &key)), &first);
    let deadline = Instant::now() + Duration::from_secs(ROUTE_TTL_SECONDS + 60);
    let again = loop {
        let r = w.send(&payment("POST", &path, &key));
        if !r.is_replayed() {
            break r;
        }
        assert_replay_of(&r, &first);
        assert!(Instant::now() < deadline, "the route's {ROUTE_TTL_SECONDS} s TTL never ended");
        thread::sleep(Duration::from_millis(250));
    };
    assert!(
        sent.elapsed() >= Duration::from_secs(ROUTE_TTL_SECONDS),
        "executed again before the route's TTL"
    );
    assert_executed(&again, 201);
    assert_eq!(o.executions(&key), 2);
}

/// The instance makes duplicates wait up to 300 s, longer than the client waits (90 s);
/// the route's zero wait answers 409 at once, while the origin still holds the first
/// attempt.
#[test]
fn a_route_overrides_the_duplicate_wait() {
    let (w, o) = (routed(), origin());
    let key = new_key();
    let req = payment("POST", &path_under("/routes/no-wait"), &key);
    let gate = o.gate();
    let first = gate.on(req.clone()).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");
    let duplicate = w.send(&req);
    assert_problem(&duplicate, 409, "in-progress");
    assert_eq!(gate.held(), 1, "the 409 came while the origin held the first attempt");
    gate.release();
    assert_executed(&first.finish().expect("the first attempt's answer"), 201);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn a_route_overrides_the_origin_timeout() {
    let (w, o) = (routed(), origin());
    let key = new_key();
    let path = path_under("/routes/timeout");
    let gate = o.gate();
    // The origin holds the request; the route's 1 s timeout (not the instance's 20 s) ends it.
    let slow = gate.on(payment("POST", &path, &key));
    assert_problem(&w.send(&slow), 502, "outcome-unknown");
    assert!(gate.wait_abandoned(1, Duration::from_secs(60)), "the worker gave up on the origin");
    assert_eq!(
        gate.held(),
        1,
        "the origin still holds it: the 502 did not wait for the instance's 20 s timeout"
    );
    assert_problem(&w.send(&payment("POST", &path, &key)), 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1, "an unknown outcome is never forwarded again");
}

#[test]
fn a_route_adds_headers_to_the_fingerprint() {
    let (w, o) = (routed(), origin());
    let key = new_key();
    let path = path_under("/routes/versioned");
    let v1 = payment("POST", &path, &key).header("X-Api-Version", "2024-01-01");
    assert_eq!(w.send(&v1).status, 201);
    assert!(w.send(&v1).is_replayed());
    let v2 = payment("POST", &path, &key).header("X-Api-Version", "2025-06-01");
    assert_problem(&w.send(&v2), 422, "key-reused");
    assert_problem(&w.send(&payment("POST", &path, &key)), 422, "key-reused");
    assert_eq!(o.executions(&key), 1);

    // Elsewhere the header is not part of the payload.
    let other = path_under("/elsewhere");
    let other_key = new_key();
    let plain = payment("POST", &other, &other_key).header("X-Api-Version", "2024-01-01");
    assert_eq!(w.send(&plain).status, 201);
    let changed = payment("POST", &other, &other_key).header("X-Api-Version", "2025-06-01");
    assert!(w.send(&changed).is_replayed());
}

/// `fingerprint_ignore`: a retry whose only change is an ignored field (a client timestamp,
/// at the top or nested) replays the first answer; a changed counted field is 422, and
/// the origin executes once.
#[test]
fn a_route_ignores_fields_that_change_on_every_retry() {
    let (w, o) = (routed(), origin());
    let key = new_key();
    let path = path_under("/routes/ignore-ts");
    let body = |ts: &str, amount: u32| {
        format!(
            r#"{{"amount":{amount},"currency":"eur","client_ts":"{ts}","meta":{{"sent/at":"{ts}","note":"n"}}}}"#
        )
    };
    let first = w.send(&covered("POST", &path, &key, &body("2026-12-01T10:00:00Z", 700)));
    assert_executed(&first, 201);
    let retry = w.send(&covered("POST", &path, &key, &body("2026-12-01T10:00:07Z", 700)));
    assert_replay_of(&retry, &first);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    // Without the ignored fields at all, and with its members in another order: the same.
    let bare = covered("POST", &path, &key, r#"{"meta":{"note":"n"},"currency":"eur","amount":700}"#);
    assert_replay_of(&w.send(&bare), &first);
    // A counted field changed: another payload under the same key.
    let changed = w.send(&covered("POST", &path, &key, &body("2026-12-01T10:00:09Z", 701)));
    assert_problem(&changed, 422, "key-reused");
    let note = covered("POST", &path, &key, r#"{"amount":700,"currency":"eur","meta":{"note":"m"}}"#);
    assert_problem(&w.send(&note), 422, "key-reused");
    assert_eq!(o.executions(&key), 1);

    // Elsewhere the timestamp counts.
    let other_key = new_key();
    let other = path_under("/elsewhere");
    assert_executed(&w.send(&covered("POST", &other, &other_key, &body("t1", 700))), 201);
    assert_problem(&w.send(&covered("POST", &other, &other_key, &body("t2", 700))), 422, "key-reused");
    assert_eq!(o.executions(&other_key), 1);
}

/// A body that is not JSON cannot be shaped: on such a route it counts whole, so only a
/// byte-identical retry replays.
#[test]
fn a_shaped_route_fingerprints_a_body_that_is_not_json_whole() {
    let (w, o) = (routed(), origin());
    let key = new_key();
    let path = path_under("/routes/ignore-ts");
    let form = |ts: &str| {
        request("POST", &path)
            .header("Idempotency-Key", &key)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("amount=700&client_ts={ts}"))
    };
    let first = w.send(&form("1"));
    assert_executed(&first, 201);
    assert_replay_of(&w.send(&form("1")), &first);
    assert_problem(&w.send(&form("2")), 422, "key-reused");
    assert_eq!(o.executions(&key), 1);
}

/// `fingerprint_only`: only the named fields count; a retry that changes anything else
/// replays, one that changes a named field is 422.
#[test]
fn a_route_counts_only_the_fields_it_names() {
    let (w, o) = (routed(), origin());
    let key = new_key();
    let path = path_under("/routes/only-amount");
    let first = w.send(&covered("POST", &path, &key, r#"{"amount":700,"currency":"eur","trace":"a"}"#));
    assert_executed(&first, 201);
    let retry = w.send(&covered("POST", &path, &key, r#"{"trace":"b","currency":"eur","amount":700,"x":1}"#));
    assert_replay_of(&retry, &first);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    for counted in [
        r#"{"amount":701,"currency":"eur","trace":"a"}"#,
        r#"{"amount":700,"currency":"usd","trace":"a"}"#,
        r#"{"amount":700,"trace":"a"}"#,
        // A case-insensitive origin reads this as another amount: never the same payload.
        r#"{"amount":700,"currency":"eur","AMOUNT":9999}"#,
    ] {
        assert_problem(&w.send(&covered("POST", &path, &key, counted)), 422, "key-reused");
    }
    assert_eq!(o.executions(&key), 1);
}

/// An invalid pointer is a configuration error: every request is 500 naming the route,
/// the member and the pointer, and nothing is forwarded.
#[test]
fn an_invalid_pointer_answers_500_naming_it() {
    let (w, o) = (mispointed(), origin());
    let path = path_under("/a");
    for sent in [payment("POST", &path, &new_key()), request("GET", &path)] {
        let r = w.send(&sent);
        assert_problem(&r, 500, "invalid-config");
        let detail = r.json()["detail"].as_str().unwrap_or_default().to_string();
        assert!(
            detail.contains("IDEMPOTENCY_ROUTES")
                && detail.contains("[0].fingerprint_ignore[1]")
                && detail.contains("\"client_ts\""),
            "{detail}"
        );
    }
    assert_eq!(o.executions_at(&path), 0, "nothing forwarded");
}

/// `key_header`: the route takes its key from `X-Request-Id`. Duplicates under one value
/// execute once and get the first answer (a duplicate sent while the first runs included);
/// `Idempotency-Key` is an ordinary header there.
#[test]
fn a_route_takes_its_key_from_its_own_header() {
    let (w, o) = (routed(), origin());
    let path = path_under("/routes/request-id");
    let id = new_key();
    let keyed = |id: &str| request("POST", &path).header("X-Request-Id", id).json(r#"{"amount":700}"#);
    let gate = o.gate();
    let first = gate.on(keyed(&id)).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");
    let duplicate = keyed(&id).start(w.addr).expect("send a duplicate");
    // The duplicate joins the running attempt, or (should it come late) replays its answer.
    thread::sleep(Duration::from_millis(500));
    gate.release();
    let first = first.finish().expect("the first attempt's answer");
    assert_executed(&first, 201);
    assert_replay_of(&duplicate.finish().expect("the duplicate's answer"), &first);
    // Later retries replay; another Idempotency-Key beside the same X-Request-Id changes
    // nothing.
    assert_replay_of(&w.send(&keyed(&id)), &first);
    let both = keyed(&id).header("Idempotency-Key", new_key());
    assert_replay_of(&w.send(&both), &first);
    assert_eq!(o.executions_at(&path), 1, "one execution for every request under one X-Request-Id");

    // Idempotency-Key alone is no key here: refused, naming the route's header.
    let plain = w.send(&payment("POST", &path, &id));
    assert_problem(&plain, 400, "missing-key");
    assert!(plain.text().contains("X-Request-Id"), "{}", plain.text());
    // The route's header has Idempotency-Key's grammar and limits.
    assert_problem(&w.send(&keyed(&"k".repeat(256))), 400, "invalid-key");
    assert_problem(&w.send(&keyed("a, b")), 400, "invalid-key");
    // Another value is another operation.
    let other = w.send(&keyed(&new_key()));
    assert_executed(&other, 201);
    assert_eq!(o.executions_at(&path), 2);
}

#[test]
fn an_unavailable_object_fails_closed_by_default() {
    let (w, o) = (detached(), origin());
    for prefix in ["/closed", "/unrouted"] {
        let key = new_key();
        let r = w.send(&payment("POST", &path_under(prefix), &key));
        assert_problem(&r, 503, "storage-unavailable");
        assert!(r.header("retry-after").is_some(), "{r:?}");
        assert_eq!(o.executions(&key), 0, "nothing is forwarded unprotected");
    }
}

#[test]
fn a_platform_answer_for_the_object_never_fails_open() {
    // The binding names a worker that is not running: the platform answers for the object
    // (503, without the object's marker). That proves nothing about delivery, since a
    // platform answer may come after the object ran, so even a fail-open route refuses.
    let (w, o) = (detached(), origin());
    let key = new_key();
    let path = path_under("/open");
    for _ in 0..2 {
        let r = w.send(&payment("POST", &path, &key));
        assert_problem(&r, 503, "storage-unavailable");
        assert!(r.header("retry-after").is_some(), "{r:?}");
    }
    assert_eq!(o.executions(&key), 0, "nothing is forwarded without proof that the object never had it");
    assert!(!w.log_contents().contains("\"decision\":\"failed-open\""), "no failed-open decision");
}

#[test]
fn invalid_routes_answer_500_saying_what_is_wrong() {
    let (w, o) = (misrouted(), origin());
    let path = path_under("/b");
    let r = w.send(&payment("POST", &path, &new_key()));
    assert_problem(&r, 500, "invalid-config");
    let detail = r.json()["detail"].as_str().unwrap_or_default().to_string();
    assert!(detail.contains("IDEMPOTENCY_ROUTES") && detail.contains("[1].ttl_seconds"), "{detail}");
    assert_eq!(o.executions_at(&path), 0);
}

/// `DURABLE_OBJECT_JURISDICTION` restricts where key objects live (EU data residency).
/// Local workerd does not implement jurisdictions ("Jurisdiction restrictions are not
/// implemented in workerd"), which makes it a real test of the promise that matters: when
/// the restriction cannot be honoured, nothing is forwarded unprotected. It is a
/// configuration error (500 invalid-config), on fail-open routes too.
#[test]
fn a_jurisdiction_that_cannot_be_honoured_fails_closed() {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    let w = instance(&CELL, || {
        let mut vars = vars(r#"[{"pattern": "/open/*", "on_object_unavailable": "fail-open"}]"#);
        vars.push(("DURABLE_OBJECT_JURISDICTION".to_string(), "eu".to_string()));
        Worker::start(WorkerConfig { name: "eu".into(), vars, readiness: Readiness::OriginAnswers })
    });
    let o = origin();
    for prefix in ["/v1/charges", "/open"] {
        let key = new_key();
        let r = w.send(&payment("POST", &path_under(prefix), &key));
        assert_problem(&r, 500, "invalid-config");
        assert!(
            r.text().contains("DURABLE_OBJECT_JURISDICTION") || r.text().contains("jurisdiction"),
            "{}",
            r.text()
        );
        assert_eq!(o.executions(&key), 0);
    }
    // wrangler writes workerd's output a moment later.
    let explained = (0..20).any(|_| {
        let found = w.log_contents().contains("Jurisdiction restrictions are not implemented in workerd");
        if !found {
            thread::sleep(Duration::from_millis(250));
        }
        found
    });
    assert!(
        explained,
        "the refusal should come from the runtime's missing jurisdiction support; see {}",
        w.dir().display()
    );
}
