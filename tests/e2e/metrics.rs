//! End-to-end test of the optional Analytics Engine binding (`IDEMPOTENCY_METRICS`): with
//! the dataset bound, the worker writes a data point per decision and behaves exactly as
//! without it. (Local workerd accepts the writes but offers no way to read them back; the
//! data point's layout is unit-tested in `core::log`.)

mod support;

use support::http::Request;
use support::origin::Origin;
use support::unique;
use support::worker::{require_build, Readiness, Worker, WorkerConfig};

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

[[analytics_engine_datasets]]
binding = "IDEMPOTENCY_METRICS"
dataset = "idempotency_edge"
"#;

#[test]
fn decisions_are_the_same_with_the_metrics_binding() {
    require_build();
    let origin = Origin::start();
    let vars = vec![("ORIGIN_URL".to_string(), origin.url())];
    let w = Worker::start_with_config(
        WorkerConfig { name: "metrics".into(), vars, readiness: Readiness::OriginAnswers },
        WRANGLER_TOML,
    )
    .unwrap_or_else(|e| panic!("{e}"));

    let key = unique("metrics");
    let path = format!("/v1/charges/{}", unique("p"));
    let payment = Request::post(&path).header("Idempotency-Key", &key).json(r#"{"amount":1}"#);
    let first = w.send(&payment);
    assert_eq!(first.status, 201, "{first:?}");
    let replay = w.send(&payment);
    assert!(replay.is_replayed(), "{replay:?}");
    assert_eq!(replay.body, first.body);
    let missing = w.send(&Request::post(&path).json("{}"));
    assert_eq!(missing.status, 400, "{missing:?}");
    assert_eq!(origin.executions(&key), 1);
    assert!(!w.log_contents().contains("metrics: writing a data point failed"), "{}", w.log_tail(40));
}
