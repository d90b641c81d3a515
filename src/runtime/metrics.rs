//! Where a request's log line goes: the log, and the optional Workers Analytics Engine
//! dataset bound as `IDEMPOTENCY_METRICS`. The worker runs the same without the binding.

use wasm_bindgen::JsValue;
use worker::AnalyticsEngineDataPointBuilder;

use super::settings;
use crate::core::edge_rules::log::{LineContext, RequestLog};
use crate::core::edge_rules::metrics_schema::BINDING as METRICS_BINDING;
use worker::{console_log, Env};

/// Logs the line and, when the binding exists, writes its data point.
pub fn write_point(env: &Env, log: &RequestLog) {
    write_point_in(env, log, LineContext::default());
}

/// [`write_point`] for a line written in `context` (observe mode names its mode and route).
/// The line is written when `LOG_DECISIONS` keeps it; the data point always is.
pub fn write_point_in(env: &Env, log: &RequestLog, context: LineContext<'_>) {
    let settings = settings::get(env);
    let version = settings::worker_version(env);
    let context = LineContext { version: version.as_deref(), ..context };
    let filter = settings.log_decisions;
    let draw = if filter.samples() { js_sys::Math::random() } else { 0.0 };
    if filter.keeps(log.decision, draw) {
        web_sys::console::log_1(&JsValue::from_str(&log.to_json_in(context)));
    }
    if !settings.metrics_bound {
        return;
    }
    if let Ok(dataset) = env.analytics_engine(METRICS_BINDING) {
        let point = log.data_point_in(context);
        let written = AnalyticsEngineDataPointBuilder::new()
            .indexes([point.index])
            .blobs(point.blobs)
            .doubles(point.doubles)
            .write_to(&dataset);
        if let Err(error) = written {
            console_log!("metrics: writing a data point failed: {}", error);
        }
    }
}
