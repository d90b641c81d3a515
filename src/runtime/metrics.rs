//! Where a request's log line goes: the log, and the optional Workers Analytics Engine
//! dataset bound as `IDEMPOTENCY_METRICS`. The worker runs the same without the binding.

use worker::{console_log, AnalyticsEngineDataPointBuilder, Env};

use crate::core::log::RequestLog;

/// The optional Analytics Engine binding.
const METRICS_BINDING: &str = "IDEMPOTENCY_METRICS";

/// Logs the line and, when the binding exists, writes its data point.
pub fn record(env: &Env, log: &RequestLog) {
    console_log!("{}", log.to_json());
    if let Ok(dataset) = env.analytics_engine(METRICS_BINDING) {
        let point = log.data_point();
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
