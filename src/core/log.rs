//! The structured log line: one JSON object per covered request.
//!
//! Owns the fields and their names. It is built from values that are safe to log by
//! construction: the object id digest (a hash of scope and key), decisions, statuses and
//! durations. There is no field for a key, a credential or a body, so none can leak.

use serde::Serialize;

use super::policy::{disposition, Disposition, OriginResult};
use super::problem::ProblemKind;

/// What the worker did with a covered request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Forwarded; the final answer was stored.
    Executed,
    /// Forwarded; the origin certainly did not execute it, and the key was released.
    Released,
    /// Forwarded; the outcome is unknown and the key is held.
    Unknown,
    /// Answered from the stored outcome.
    Replayed,
    /// Answered with the running execution's outcome.
    Coalesced,
    /// Refused with a problem of this kind.
    Rejected(ProblemKind),
}

impl Decision {
    /// The decision for a forwarded attempt, from its origin result.
    pub fn after_forward(result: OriginResult) -> Decision {
        match disposition(result) {
            Disposition::Final => Decision::Executed,
            Disposition::Release => Decision::Released,
            Disposition::Unknown => Decision::Unknown,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Decision::Executed => "executed",
            Decision::Released => "released",
            Decision::Unknown => "unknown",
            Decision::Replayed => "replayed",
            Decision::Coalesced => "coalesced",
            Decision::Rejected(_) => "rejected",
        }
    }
}

/// One log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestLog {
    /// First 16 hex digits of the object name; absent for requests refused before one.
    pub object: Option<String>,
    pub decision: Decision,
    /// The status the caller got.
    pub status: u16,
    pub origin_status: Option<u16>,
    pub origin_ms: Option<u64>,
    pub wait_ms: Option<u64>,
}

#[derive(Serialize)]
struct Line<'a> {
    event: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    object: Option<&'a str>,
    decision: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<&'static str>,
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_ms: Option<u64>,
}

/// One Workers Analytics Engine data point: the same fields as the log line.
/// Layout (documented in docs/operations.md): index1 = decision; blob1 = decision,
/// blob2 = problem kind or "", blob3 = object id or ""; double1 = status, double2 = origin
/// status (0: none), double3 = origin latency in ms, double4 = wait in ms (-1: none).
#[derive(Clone, Debug, PartialEq)]
pub struct DataPoint {
    pub index: &'static str,
    pub blobs: [String; 3],
    pub doubles: [f64; 4],
}

impl RequestLog {
    pub fn data_point(&self) -> DataPoint {
        let problem = match self.decision {
            Decision::Rejected(kind) => kind.slug(),
            _ => "",
        };
        let millis = |value: Option<u64>| value.map_or(-1.0, |v| v as f64);
        DataPoint {
            index: self.decision.name(),
            blobs: [
                self.decision.name().to_owned(),
                problem.to_owned(),
                self.object.clone().unwrap_or_default(),
            ],
            doubles: [
                f64::from(self.status),
                f64::from(self.origin_status.unwrap_or(0)),
                millis(self.origin_ms),
                millis(self.wait_ms),
            ],
        }
    }

    pub fn to_json(&self) -> String {
        let problem = match self.decision {
            Decision::Rejected(kind) => Some(kind.slug()),
            _ => None,
        };
        let line = Line {
            event: "idempotency",
            object: self.object.as_deref(),
            decision: self.decision.name(),
            problem,
            status: self.status,
            origin_status: self.origin_status,
            origin_ms: self.origin_ms,
            wait_ms: self.wait_ms,
        };
        serde_json::to_string(&line).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_only_safe_fields() {
        let line = RequestLog {
            object: Some("0123456789abcdef".into()),
            decision: Decision::Executed,
            status: 201,
            origin_status: Some(201),
            origin_ms: Some(42),
            wait_ms: None,
        };
        let value: serde_json::Value = serde_json::from_str(&line.to_json()).unwrap();
        assert_eq!(value["event"], "idempotency");
        assert_eq!(value["object"], "0123456789abcdef");
        assert_eq!(value["decision"], "executed");
        assert_eq!(value["origin_ms"], 42);
        assert!(value.get("wait_ms").is_none());
        assert!(value.get("problem").is_none());
    }

    #[test]
    fn rejections_name_their_problem() {
        let line = RequestLog {
            object: None,
            decision: Decision::Rejected(ProblemKind::KeyReused),
            status: 422,
            origin_status: None,
            origin_ms: None,
            wait_ms: None,
        };
        let value: serde_json::Value = serde_json::from_str(&line.to_json()).unwrap();
        assert_eq!(value["decision"], "rejected");
        assert_eq!(value["problem"], "key-reused");
    }

    #[test]
    fn data_points_carry_the_same_fields() {
        let line = RequestLog {
            object: None,
            decision: Decision::Rejected(ProblemKind::InProgress),
            status: 409,
            origin_status: None,
            origin_ms: None,
            wait_ms: Some(5_000),
        };
        let point = line.data_point();
        assert_eq!(point.index, "rejected");
        assert_eq!(point.blobs, ["rejected".to_owned(), "in-progress".to_owned(), String::new()]);
        assert_eq!(point.doubles, [409.0, 0.0, -1.0, 5_000.0]);
    }

    #[test]
    fn forwarded_decisions_follow_the_outcome_table() {
        assert_eq!(Decision::after_forward(OriginResult::Responded(201)), Decision::Executed);
        assert_eq!(Decision::after_forward(OriginResult::Responded(503)), Decision::Released);
        assert_eq!(Decision::after_forward(OriginResult::ConnectRefused), Decision::Released);
        assert_eq!(Decision::after_forward(OriginResult::TimedOut), Decision::Unknown);
    }
}
