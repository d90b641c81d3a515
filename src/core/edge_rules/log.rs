//! The structured log line: one JSON object per covered request.
//!
//! Owns the fields and their names. It is built from values that are safe to log by
//! construction: the object id digest (a hash of scope and key), decisions, statuses and
//! durations, and how the scope was reached (`claim`, `credential`, `anonymous`, with the
//! rule an unverified token failed). There is no field for a key, a credential, a token, a
//! claim value or a body, so none can leak.
//!
//! In observe mode (`core::vocabulary::key_terms::Mode`) the line is the one enforce mode would have
//! written, with the same `decision` and `problem`, plus `"mode":"observe"`; `status` is
//! what the caller really got (the origin's answer).

use serde::Serialize;

use super::metrics_schema::{self, Field};
use super::scope::ScopeLog;
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::problem::{Problem, ProblemKind};
use crate::core::vocabulary::trace::Trace;

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
    /// What the edge added: the time the key's object took from receiving the request to
    /// answering it, less `origin_ms` and `wait_ms` (`edge_ms`).
    pub edge_ms: Option<u64>,
    /// The calls to the key's object the Worker made for the request; only on a line the
    /// Worker writes (the object's own line is one call's).
    pub object_calls: Option<u32>,
    /// The key's storage operations the object made while it handled the request:
    /// reads and writes (`StorageCalls`); only on a line the object writes.
    pub storage: Option<StorageCalls>,
    /// How the scope was reached; absent for requests refused before a scope.
    pub scope: Option<ScopeLog>,
}

/// What a key's object asked of its storage for one request: `reads` (the record, a large
/// answer's rows) and `writes` (a record written or deleted, an alarm set, everything
/// deleted). Each is one call into the storage API; several writes of one turn reach the
/// disk as one durable write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageCalls {
    pub reads: u32,
    pub writes: u32,
}

/// Whether a call into storage reads or writes (an alarm set or deleted is a write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageAccess {
    Read,
    Write,
}

impl StorageCalls {
    /// These calls and one more, of `access`.
    pub fn and(self, access: StorageAccess) -> StorageCalls {
        let StorageCalls { reads, writes } = self;
        match access {
            StorageAccess::Read => StorageCalls { reads: reads.wrapping_add(1), writes },
            StorageAccess::Write => StorageCalls { reads, writes: writes.wrapping_add(1) },
        }
    }

    /// What was done since `before` (a count taken earlier from the same counter).
    pub fn since(self, before: StorageCalls) -> StorageCalls {
        StorageCalls {
            reads: self.reads.wrapping_sub(before.reads),
            writes: self.writes.wrapping_sub(before.writes),
        }
    }
}

/// Where a line was written: the mode, and the route pattern that matched (observe-mode
/// lines carry it, so that rates can be computed per route); which request it is about;
/// and which release wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LineContext<'a> {
    pub mode: Mode,
    pub route: Option<&'a str>,
    pub trace: Option<&'a Trace>,
    /// The worker's version (the version-metadata binding's id), when bound.
    pub version: Option<&'a str>,
}

/// A line about one object that is not a request's decision (`admin-purge`,
/// `expired-on-read`, `legacy-record-read`, `outcome-publish-failed`): the event's name,
/// the object id, and the facts the event adds. Never a key, a credential or a body: only
/// ids and flags reach it.
pub fn event_line(event: &'static str, object: &str, facts: &[(&'static str, bool)]) -> String {
    let mut line = serde_json::Map::new();
    line.insert("event".to_owned(), event.into());
    line.insert("object".to_owned(), object.into());
    for (name, value) in facts {
        line.insert((*name).to_owned(), (*value).into());
    }
    serde_json::Value::Object(line).to_string()
}

/// The request id the Worker gives a request: its `cf-ray` when it is a plain token (hex
/// digits and one dash with a colo code), else `draw()` (random bits the runtime draws only
/// then: two calls across the boundary saved on every request Cloudflare gave a ray), in
/// hex. Never longer than 64 characters.
pub fn request_id(cf_ray: Option<&str>, draw: impl FnOnce() -> u64) -> String {
    match cf_ray {
        Some(ray)
            if !ray.is_empty()
                && ray.len() <= 64
                && ray.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
        {
            ray.to_owned()
        }
        _ => format!("{:016x}", draw()),
    }
}

/// One Workers Analytics Engine data point: the same fields as the log line, each in the
/// column `core::edge_rules::metrics_schema` names for it (documented in docs/operations.md).
#[derive(Clone, Debug, PartialEq)]
pub struct DataPoint {
    pub index: &'static str,
    pub blobs: [String; metrics_schema::BLOBS.len()],
    pub doubles: [f64; metrics_schema::DOUBLES.len()],
}

/// A field's value in a data point.
enum Value<'a> {
    Text(&'a str),
    Number(f64),
}

impl RequestLog {
    /// A line about `object` (if one was reached) and `scope` (if one was reached), with no
    /// origin or wait figures yet.
    pub fn new(
        object: Option<String>,
        decision: Decision,
        status: u16,
        scope: Option<ScopeLog>,
    ) -> RequestLog {
        RequestLog {
            object,
            decision,
            status,
            origin_status: None,
            origin_ms: None,
            wait_ms: None,
            edge_ms: None,
            object_calls: None,
            storage: None,
            scope,
        }
    }

    /// The line of a request to `object` before its decision is known: storage
    /// unavailable, which is what it is unless something better is decided (a failure
    /// before the decision answers 503), and no status yet.
    pub fn undecided(object: Option<String>, scope: Option<ScopeLog>) -> RequestLog {
        RequestLog::new(object, Decision::Rejected(ProblemKind::StorageUnavailable), 0, scope)
    }

    /// The line of work an object did with no caller (a job's send, a lookup's verdict, the
    /// alarm's clean-up): the decision, and the origin's status (the line's status too, 0
    /// where the origin gave none) and time; no more.
    pub fn background(
        object: String,
        decision: Decision,
        origin_status: Option<u16>,
        origin_ms: Option<u64>,
    ) -> RequestLog {
        let status = origin_status.unwrap_or(0);
        RequestLog { origin_status, origin_ms, ..RequestLog::new(Some(object), decision, status, None) }
    }

    /// The line of a request refused with `problem` before anything about its key was
    /// decided: rejected, naming the problem, with the problem's status.
    pub fn refused(object: Option<String>, problem: &Problem) -> RequestLog {
        RequestLog::new(object, Decision::Rejected(problem.kind), problem.status(), None)
    }

    /// The line of a request forwarded without protection because its object was not
    /// reached (`object_calls` tried) and provably never had it: failed open, with the
    /// status its caller got.
    pub fn failed_open(object: String, object_calls: u32, status: u16, scope: ScopeLog) -> RequestLog {
        RequestLog {
            object_calls: Some(object_calls),
            ..RequestLog::new(Some(object), Decision::FailedOpen, status, Some(scope))
        }
    }

    /// The line of a request refused because its object was not reached (`object_calls`
    /// tried): the refusal, named by the object it was for, so that the Worker's error line
    /// about that object and this request's line can be told to belong together.
    pub fn not_reached(object: String, object_calls: u32, problem: &Problem, scope: ScopeLog) -> RequestLog {
        RequestLog {
            object_calls: Some(object_calls),
            ..RequestLog::new(Some(object), Decision::Rejected(problem.kind), problem.status(), Some(scope))
        }
    }

    /// The object answered `elapsed_ms` after it received the request: what the edge
    /// added (`edge_ms`) is that time less the origin's and the wait's, never below zero
    /// (each is measured on its own clock reading, so they may overlap by a millisecond).
    pub fn answered_after(&mut self, elapsed_ms: u64) {
        let spent = self.origin_ms.unwrap_or(0).saturating_add(self.wait_ms.unwrap_or(0));
        self.edge_ms = Some(elapsed_ms.saturating_sub(spent));
    }

    /// The data point of an enforce-mode line.
    pub fn data_point(&self) -> DataPoint {
        self.data_point_in(LineContext::default())
    }

    /// The data point of a line written in `context`, laid out by `core::edge_rules::metrics_schema`.
    pub fn data_point_in(&self, context: LineContext<'_>) -> DataPoint {
        DataPoint {
            index: self.token(metrics_schema::INDEX.field, context),
            blobs: metrics_schema::BLOBS.map(|column| match self.value(column.field, context) {
                Value::Text(text) => text.to_owned(),
                // Unreachable: metrics_schema asserts at compile time that no blob is a number.
                // Not `number.to_string()`: that alone linked Rust's whole float formatter
                // (about 15 KB of Wasm) into the worker, for a branch that never runs.
                Value::Number(_) => String::new(),
            }),
            doubles: metrics_schema::DOUBLES.map(|column| match self.value(column.field, context) {
                Value::Number(number) => number,
                // Unreachable: metrics_schema asserts at compile time that every double is one.
                Value::Text(_) => f64::NAN,
            }),
        }
    }

    /// A token field's value: the empty string when the field is absent (no problem, no
    /// scope, a verified token), and for a field that is not a token.
    fn token(&self, field: Field, context: LineContext<'_>) -> &'static str {
        match field {
            Field::Decision => self.decision.name(),
            Field::Mode => context.mode.name(),
            Field::Problem => match self.decision {
                Decision::Rejected(kind) => kind.slug(),
                _ => "",
            },
            Field::Scope => self.scope.map_or("", |scope| scope.kind.slug()),
            Field::Unverified => {
                self.scope.and_then(|scope| scope.unverified).map_or("", |reason| reason.slug())
            }
            Field::Object
            | Field::Route
            | Field::Method
            | Field::RequestId
            | Field::Version
            | Field::Status
            | Field::OriginStatus
            | Field::OriginMs
            | Field::WaitMs
            | Field::EdgeMs
            | Field::ObjectCalls
            | Field::StorageReads
            | Field::StorageWrites => "",
        }
    }

    fn value<'a>(&'a self, field: Field, context: LineContext<'a>) -> Value<'a> {
        let millis = |value: Option<u64>| Value::Number(value.map_or(-1.0, |v| v as f64));
        match field {
            Field::Object => Value::Text(self.object.as_deref().unwrap_or_default()),
            Field::Route => Value::Text(context.route().unwrap_or_default()),
            Field::Method => Value::Text(context.trace.map_or("", |trace| trace.method.as_str())),
            Field::RequestId => Value::Text(context.trace.map_or("", |trace| trace.request_id.as_str())),
            Field::Version => Value::Text(context.version.unwrap_or_default()),
            Field::Status => Value::Number(f64::from(self.status)),
            Field::OriginStatus => Value::Number(f64::from(self.origin_status.unwrap_or(0))),
            Field::OriginMs => millis(self.origin_ms),
            Field::WaitMs => millis(self.wait_ms),
            Field::EdgeMs => millis(self.edge_ms),
            // -1: not counted (a line the other side wrote, or one from before the count).
            Field::ObjectCalls => Value::Number(self.object_calls.map_or(-1.0, f64::from)),
            Field::StorageReads => Value::Number(self.storage.map_or(-1.0, |calls| f64::from(calls.reads))),
            Field::StorageWrites => Value::Number(self.storage.map_or(-1.0, |calls| f64::from(calls.writes))),
            Field::Decision | Field::Problem | Field::Mode | Field::Scope | Field::Unverified => {
                Value::Text(self.token(field, context))
            }
        }
    }

    /// The line as one JSON object, fields in a fixed order (the order of `Line`'s
    /// fields), absent ones left out.
    pub fn to_json(&self) -> String {
        self.to_json_in(LineContext::default())
    }

    /// The line in `context`: with the route when one is named, and ending with
    /// `"mode":"observe"` in observe mode. An enforce-mode line without a route is as it
    /// always was.
    pub fn to_json_in(&self, context: LineContext<'_>) -> String {
        let line = Line {
            event: "idempotency",
            object: self.object.as_deref(),
            decision: self.decision.name(),
            problem: match self.decision {
                Decision::Rejected(kind) => Some(kind.slug()),
                _ => None,
            },
            status: self.status,
            origin_status: self.origin_status,
            origin_ms: self.origin_ms,
            wait_ms: self.wait_ms,
            edge_ms: self.edge_ms,
            object_calls: self.object_calls,
            storage_reads: self.storage.map(|calls| calls.reads),
            storage_writes: self.storage.map(|calls| calls.writes),
            scope: self.scope.map(|scope| scope.kind.slug()),
            unverified: self.scope.and_then(|scope| scope.unverified).map(|reason| reason.slug()),
            route: context.route(),
            method: context.trace.map(|trace| trace.method.as_str()).filter(|method| !method.is_empty()),
            request_id: context.trace.map(|trace| trace.request_id.as_str()).filter(|id| !id.is_empty()),
            version: context.version,
            mode: (context.mode == Mode::Observe).then_some("observe"),
        };
        serde_json::to_string(&line).expect("strings and numbers always serialize")
    }
}

/// The fields of a log line, in the order they are written; `None` is left out.
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
    #[serde(skip_serializing_if = "Option::is_none")]
    edge_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    object_calls: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    storage_reads: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    storage_writes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unverified: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
}

impl<'a> LineContext<'a> {
    /// The route pattern: the context's own, else the traced request's.
    fn route(&self) -> Option<&'a str> {
        self.route.or_else(|| self.trace.and_then(|trace| trace.route.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::vocabulary::outcome_table::Disposition;

    #[test]
    fn a_failed_open_line_says_so_with_the_calls_tried_and_no_origin_figures() {
        let scope = ScopeLog { kind: crate::core::edge_rules::scope::ScopeKind::Claim, unverified: None };
        let line = RequestLog::failed_open("ab12".to_owned(), 2, 201, scope);
        assert_eq!(line.decision, Decision::FailedOpen);
        assert_eq!((line.object.as_deref(), line.status, line.object_calls), (Some("ab12"), 201, Some(2)));
        assert_eq!(line.scope, Some(scope));
        assert_eq!((line.origin_status, line.origin_ms, line.storage), (None, None, None));
    }

    #[test]
    fn a_refusal_for_an_object_not_reached_names_the_object_and_the_calls_tried() {
        let scope = ScopeLog { kind: crate::core::edge_rules::scope::ScopeKind::Claim, unverified: None };
        let problem = Problem::new(ProblemKind::StorageUnavailable, "the object was not reached");
        let line = RequestLog::not_reached("ab12".to_owned(), 1, &problem, scope);
        assert_eq!(line.decision, Decision::Rejected(ProblemKind::StorageUnavailable));
        assert_eq!((line.object.as_deref(), line.status, line.object_calls), (Some("ab12"), 503, Some(1)));
        assert_eq!(line.scope, Some(scope));
        assert_eq!((line.origin_status, line.origin_ms, line.storage), (None, None, None));
    }

    #[test]
    fn a_background_line_takes_the_origins_status_as_its_own_and_names_no_caller() {
        let line = RequestLog::background("ab12".to_owned(), Decision::Executed, Some(201), Some(7));
        assert_eq!((line.status, line.origin_status, line.origin_ms), (201, Some(201), Some(7)));
        assert_eq!((line.object.as_deref(), line.scope, line.wait_ms), (Some("ab12"), None, None));
        let unanswered = RequestLog::background("ab12".to_owned(), Decision::Executed, None, None);
        assert_eq!((unanswered.status, unanswered.origin_status), (0, None));
    }

    #[test]
    fn an_event_line_names_its_event_and_object_and_only_its_facts() {
        assert_eq!(
            event_line("expired-on-read", "ab12", &[]),
            r#"{"event":"expired-on-read","object":"ab12"}"#
        );
        assert_eq!(
            event_line("admin-purge", "ab12", &[("forced", true)]),
            r#"{"event":"admin-purge","forced":true,"object":"ab12"}"#
        );
        // An object id is hex, but a quote would be escaped, never break the line.
        assert_eq!(event_line("x", "a\"b", &[]), r#"{"event":"x","object":"a\"b"}"#);
    }
    use crate::core::primitives::jwt::Unverified;

    /// A line with every field, as the hand-written writer of `d5eb51d` wrote it.
    const LINE: &str = "{\"event\":\"idempotency\",\"object\":\"0123\\\"\\\\\\u0001\u{7f}é\",\"decision\":\"rejected\",\"problem\":\"key-reused\",\"status\":422,\"origin_status\":0,\"origin_ms\":18446744073709551615,\"wait_ms\":7,\"scope\":\"credential\",\"unverified\":\"expired\",\"route\":\"/v1/*\",\"method\":\"POST\",\"request_id\":\"r\u{2028}1\",\"version\":\"v\\t2\",\"mode\":\"observe\"}";
    use crate::core::edge_rules::scope::ScopeKind;

    #[test]
    fn a_line_has_only_safe_fields() {
        let line = RequestLog {
            object: Some("0123456789abcdef".into()),
            decision: Decision::Executed,
            status: 201,
            origin_status: Some(201),
            origin_ms: Some(42),
            wait_ms: None,
            edge_ms: None,
            object_calls: None,
            storage: None,
            scope: None,
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
    fn lines_are_the_json_serde_would_write() {
        let lines = [
            RequestLog {
                object: Some("0123456789abcdef\"\\\u{1}x".into()),
                decision: Decision::Coalesced,
                status: 201,
                origin_status: Some(201),
                origin_ms: Some(0),
                wait_ms: Some(u64::MAX),
                edge_ms: None,
                object_calls: None,
                storage: None,
                scope: Some(ScopeLog { kind: ScopeKind::Credential, unverified: Some(Unverified::Expired) }),
            },
            RequestLog::new(None, Decision::Rejected(ProblemKind::BodyTooLarge), 413, None),
        ];
        for line in lines {
            let expected = serde_json::json!({
                "event": "idempotency",
                "object": line.object,
                "decision": line.decision.name(),
                "problem": match line.decision { Decision::Rejected(kind) => Some(kind.slug()), _ => None },
                "status": line.status,
                "origin_status": line.origin_status,
                "origin_ms": line.origin_ms,
                "wait_ms": line.wait_ms,
                "scope": line.scope.map(|s| s.kind.slug()),
                "unverified": line.scope.and_then(|s| s.unverified).map(|r| r.slug()),
            });
            let parsed: serde_json::Value = serde_json::from_str(&line.to_json()).unwrap();
            let mut expected = expected.as_object().unwrap().clone();
            expected.retain(|_, value| !value.is_null());
            assert_eq!(parsed, serde_json::Value::Object(expected), "{}", line.to_json());
        }
        let executed = RequestLog {
            object: Some("ab".into()),
            decision: Decision::Executed,
            status: 201,
            origin_status: Some(201),
            origin_ms: Some(42),
            wait_ms: None,
            edge_ms: None,
            object_calls: None,
            storage: None,
            scope: None,
        };
        assert_eq!(
            executed.to_json(),
            r#"{"event":"idempotency","object":"ab","decision":"executed","status":201,"origin_status":201,"origin_ms":42}"#
        );
    }

    #[test]
    fn a_full_line_keeps_its_fields_order_and_escapes() {
        // Dashboards and docs read these lines: every field, in this order, escaped so.
        let line = RequestLog {
            object: Some("0123\"\\\u{1}\u{7f}é".into()),
            decision: Decision::Rejected(ProblemKind::KeyReused),
            status: 422,
            origin_status: Some(0),
            origin_ms: Some(u64::MAX),
            wait_ms: Some(7),
            edge_ms: None,
            object_calls: None,
            storage: None,
            scope: Some(ScopeLog { kind: ScopeKind::Credential, unverified: Some(Unverified::Expired) }),
        };
        let trace =
            Trace { request_id: "r\u{2028}1".into(), method: "POST".into(), route: Some("/v1/*".into()) };
        let context =
            LineContext { mode: Mode::Observe, route: None, trace: Some(&trace), version: Some("v\t2") };
        assert_eq!(line.to_json_in(context), LINE);
        let bare = Trace { request_id: String::new(), method: String::new(), route: None };
        let context =
            LineContext { mode: Mode::Enforce, route: Some("/r"), trace: Some(&bare), version: None };
        assert!(line.to_json_in(context).ends_with(r#""unverified":"expired","route":"/r"}"#));
    }

    #[test]
    fn the_edge_time_is_the_objects_less_the_origins_and_the_waits() {
        let mut line = RequestLog::new(None, Decision::Executed, 201, None);
        line.answered_after(12);
        assert_eq!(line.edge_ms, Some(12), "nothing else spent");
        line.origin_ms = Some(7);
        line.wait_ms = Some(2);
        line.answered_after(12);
        assert_eq!(line.edge_ms, Some(3));
        line.answered_after(8);
        assert_eq!(line.edge_ms, Some(0), "never below zero");
    }

    /// The work a request cost is on its line: the object's storage calls on the object's
    /// line, the Worker's object calls on the Worker's; a count is written even when it is
    /// 0 (a replay from memory), and left out when the side writing the line did not count.
    #[test]
    fn a_line_carries_the_work_counted_for_its_request() {
        let mut line = RequestLog::new(Some("ab".into()), Decision::Replayed, 201, None);
        assert!(!line.to_json().contains("storage") && !line.to_json().contains("object_calls"));
        line.storage = Some(StorageCalls { reads: 0, writes: 0 });
        assert_eq!(
            line.to_json(),
            r#"{"event":"idempotency","object":"ab","decision":"replayed","status":201,"storage_reads":0,"storage_writes":0}"#
        );
        line.storage = Some(StorageCalls { reads: 1, writes: 4 });
        line.object_calls = Some(2);
        line.edge_ms = Some(3);
        assert!(line
            .to_json()
            .ends_with(r#""edge_ms":3,"object_calls":2,"storage_reads":1,"storage_writes":4}"#));
        assert_eq!(line.data_point().doubles[5..], [2.0, 1.0, 4.0]);
        // What a request did is the counter's difference across it, even past a wrap.
        let before = StorageCalls { reads: u32::MAX, writes: 7 };
        let after = before.and(StorageAccess::Read).and(StorageAccess::Write).and(StorageAccess::Read);
        assert_eq!(after, StorageCalls { reads: 1, writes: 8 });
        assert_eq!(after.since(before), StorageCalls { reads: 2, writes: 1 });
    }

    #[test]
    fn a_line_before_its_decision_is_a_storage_failure_and_a_refusal_names_its_problem() {
        let undecided = RequestLog::undecided(Some("abc".into()), None);
        assert_eq!(undecided.decision, Decision::Rejected(ProblemKind::StorageUnavailable));
        assert_eq!((undecided.status, undecided.object.as_deref()), (0, Some("abc")));
        let problem = Problem::new(ProblemKind::KeyReused, "another payload");
        let refused = RequestLog::refused(None, &problem);
        assert_eq!((refused.decision, refused.status), (Decision::Rejected(ProblemKind::KeyReused), 422));
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
            edge_ms: None,
            object_calls: None,
            storage: None,
            scope: None,
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
            edge_ms: None,
            object_calls: None,
            storage: None,
            scope: Some(ScopeLog { kind: ScopeKind::Claim, unverified: None }),
        };
        let point = line.data_point();
        assert_eq!(point.index, "rejected");
        assert_eq!(
            point.blobs,
            [
                "rejected".to_owned(),
                "in-progress".to_owned(),
                String::new(),
                "enforce".to_owned(),
                String::new(),
                "claim".to_owned(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]
        );
        assert_eq!(point.doubles, [409.0, 0.0, -1.0, 5_000.0, -1.0, -1.0, -1.0, -1.0]);
    }

    /// A failure a caller reports can be traced to its line: the request id,
    /// method, route and version are on the line and the data point, and the problem's
    /// `instance` names the same request.
    #[test]
    fn a_traced_line_carries_the_request_id_method_route_and_version() {
        let line = RequestLog {
            object: Some("0123456789abcdef".into()),
            decision: Decision::Rejected(ProblemKind::KeyReused),
            status: 422,
            origin_status: None,
            origin_ms: None,
            wait_ms: None,
            edge_ms: None,
            object_calls: None,
            storage: None,
            scope: None,
        };
        let trace = Trace {
            request_id: request_id(Some("8f1c2a3b4d5e6f70-AMS"), || 7),
            method: "POST".into(),
            route: Some("/v1/charges*".into()),
        };
        let context = LineContext { trace: Some(&trace), version: Some("v-42"), ..LineContext::default() };
        let value: serde_json::Value = serde_json::from_str(&line.to_json_in(context)).unwrap();
        assert_eq!(value["request_id"], "8f1c2a3b4d5e6f70-AMS");
        assert_eq!(value["method"], "POST");
        assert_eq!(value["route"], "/v1/charges*");
        assert_eq!(value["version"], "v-42");
        let point = line.data_point_in(context);
        assert_eq!(point.blobs[4], "/v1/charges*");
        assert_eq!(&point.blobs[7..], ["POST", "8f1c2a3b4d5e6f70-AMS", "v-42"]);
        let problem = crate::core::vocabulary::problem::Problem::new(ProblemKind::KeyReused, "no")
            .for_request(Some(&trace));
        let body: serde_json::Value = serde_json::from_slice(&problem.to_json()).unwrap();
        assert_eq!(body["instance"], "urn:idempotency-edge:request:8f1c2a3b4d5e6f70-AMS");
        // Without a trace, no instance member at all.
        let bare = crate::core::vocabulary::problem::Problem::new(ProblemKind::KeyReused, "no").to_json();
        assert!(!String::from_utf8(bare).unwrap().contains("instance"));
    }

    #[test]
    fn a_request_id_is_the_cf_ray_when_it_is_a_plain_token_else_drawn() {
        assert_eq!(request_id(Some("8f1c2a3b4d5e6f70-AMS"), || panic!("no draw")), "8f1c2a3b4d5e6f70-AMS");
        assert_eq!(request_id(None, || 0xabc), "0000000000000abc");
        for hostile in ["", "a\"b", "x y", "\u{1b}[31m", &"a".repeat(65)] {
            assert_eq!(request_id(Some(hostile), || 5), "0000000000000005", "{hostile:?}");
        }
    }

    #[test]
    fn observe_mode_lines_keep_the_decision_and_add_the_mode() {
        let line = RequestLog {
            object: Some("0123456789abcdef".into()),
            decision: Decision::Rejected(ProblemKind::KeyReused),
            status: 201,
            origin_status: Some(201),
            origin_ms: Some(3),
            wait_ms: None,
            edge_ms: None,
            object_calls: None,
            storage: None,
            scope: None,
        };
        let observed =
            LineContext { mode: Mode::Observe, route: Some("/v1/charges*"), ..LineContext::default() };
        let value: serde_json::Value = serde_json::from_str(&line.to_json_in(observed)).unwrap();
        assert_eq!(value["decision"], "rejected");
        assert_eq!(value["problem"], "key-reused");
        assert_eq!(value["status"], 201);
        assert_eq!(value["mode"], "observe");
        assert_eq!(value["route"], "/v1/charges*");
        assert!(!line.to_json().contains("mode"), "enforce lines are unchanged");
        let point = line.data_point_in(observed);
        assert_eq!((point.blobs[3].as_str(), point.blobs[4].as_str()), ("observe", "/v1/charges*"));
        assert_eq!(point.index, "rejected");
    }

    #[test]
    fn decisions_round_trip_through_their_token() {
        let mut all = vec![
            Decision::Executed,
            Decision::Released,
            Decision::Unknown,
            Decision::Replayed,
            Decision::Coalesced,
            Decision::FailedOpen,
            Decision::Accepted,
            Decision::RetryScheduled,
            Decision::Reforwarded,
            Decision::GaveUp,
            Decision::ReconciledExecuted,
            Decision::ReconciledNotExecuted,
            Decision::ReconcileFailed,
        ];
        all.extend(ProblemKind::ALL.into_iter().map(Decision::Rejected));
        for decision in all {
            assert_eq!(Decision::from_token(&decision.token()), Some(decision), "{decision:?}");
        }
        for bad in ["", "rejected", "rejected:nope", "Executed"] {
            assert_eq!(Decision::from_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn forwarded_decisions_follow_the_outcome_table() {
        assert_eq!(Decision::after_forward(Disposition::Final), Decision::Executed);
        assert_eq!(Decision::after_forward(Disposition::Release), Decision::Released);
        assert_eq!(Decision::after_forward(Disposition::Unknown), Decision::Unknown);
    }

    #[test]
    fn a_failed_open_forward_has_its_own_decision() {
        let line = RequestLog {
            object: Some("0123456789abcdef".into()),
            decision: Decision::FailedOpen,
            status: 201,
            origin_status: Some(201),
            origin_ms: None,
            wait_ms: None,
            edge_ms: None,
            object_calls: None,
            storage: None,
            scope: None,
        };
        let value: serde_json::Value = serde_json::from_str(&line.to_json()).unwrap();
        assert_eq!(value["decision"], "failed-open");
        assert_eq!(line.data_point().index, "failed-open");
    }
}
