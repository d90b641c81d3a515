//! The Workers Analytics Engine schema: which column of a data point holds which field of
//! the log line, and which values each column can hold.
//!
//! Owns the one table that the writer and every reader share:
//! 1. The writer (`log::RequestLog::data_point_in`) fills each column from the field this
//!    table names for it, in the table's order; no other code decides a position.
//! 2. Every SQL query the project ships (the fenced `sql` blocks of the documentation, the
//!    Grafana dashboard and alert rules under `ops/grafana/`) is checked against it by this
//!    module's tests: a column that is never written, a value a column cannot hold (`blob1 =
//!    'rejected:key-reused'`: the problem is in `blob2`), a string compared with a number, an
//!    unweighted aggregate over sampled rows, or a dataset `wrangler.toml` does not bind
//!    fails the build. Moving a field to another column breaks those queries' test before it
//!    breaks a dashboard in production.
//! 3. The column table in `docs/operations.md` is [`columns`], word for word.
//!
//! No I/O: the runtime (`runtime::metrics`) writes what the writer hands it.

use super::scope::ScopeKind;
use crate::core::primitives::jwt::Unverified;
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::problem::ProblemKind;

/// The binding the worker writes through; `wrangler.toml` names its dataset (the table the
/// SQL API queries).
pub const BINDING: &str = "IDEMPOTENCY_METRICS";

/// A field of the log line (`log::RequestLog` in its `log::LineContext`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Decision,
    Problem,
    Object,
    Mode,
    Route,
    Scope,
    Unverified,
    Method,
    RequestId,
    Version,
    Status,
    OriginStatus,
    OriginMs,
    WaitMs,
    EdgeMs,
    ObjectCalls,
    StorageReads,
    StorageWrites,
}

impl Field {
    pub const ALL: [Field; 18] = [
        Field::Decision,
        Field::Problem,
        Field::Object,
        Field::Mode,
        Field::Route,
        Field::Scope,
        Field::Unverified,
        Field::Method,
        Field::RequestId,
        Field::Version,
        Field::Status,
        Field::OriginStatus,
        Field::OriginMs,
        Field::WaitMs,
        Field::EdgeMs,
        Field::ObjectCalls,
        Field::StorageReads,
        Field::StorageWrites,
    ];

    /// The field's name in the log line (`docs/operations.md`, "Log lines").
    pub fn name(self) -> &'static str {
        match self {
            Field::Decision => "decision",
            Field::Problem => "problem",
            Field::Object => "object",
            Field::Mode => "mode",
            Field::Route => "route",
            Field::Scope => "scope",
            Field::Unverified => "unverified",
            Field::Method => "method",
            Field::RequestId => "request_id",
            Field::Version => "version",
            Field::Status => "status",
            Field::OriginStatus => "origin_status",
            Field::OriginMs => "origin_ms",
            Field::WaitMs => "wait_ms",
            Field::EdgeMs => "edge_ms",
            Field::ObjectCalls => "object_calls",
            Field::StorageReads => "storage_reads",
            Field::StorageWrites => "storage_writes",
        }
    }

    /// Whether the field is a number (a `double` column); the others are text.
    pub const fn is_number(self) -> bool {
        matches!(
            self,
            Field::Status
                | Field::OriginStatus
                | Field::OriginMs
                | Field::WaitMs
                | Field::EdgeMs
                | Field::ObjectCalls
                | Field::StorageReads
                | Field::StorageWrites
        )
    }

    /// Whether the field is one of a closed set of `'static` tokens (a decision, a problem
    /// slug, …), so that it can be an index and its values can be listed.
    pub const fn is_token(self) -> bool {
        matches!(self, Field::Decision | Field::Problem | Field::Mode | Field::Scope | Field::Unverified)
    }

    /// Every value a token field's column can hold, the empty string included where the
    /// field can be absent; `None` for free text (object ids, routes, methods, request ids,
    /// versions) and numbers.
    pub fn values(self) -> Option<Vec<&'static str>> {
        match self {
            Field::Decision => Some(Decision::names().collect()),
            Field::Problem => Some(or_empty(ProblemKind::ALL.into_iter().map(ProblemKind::slug))),
            Field::Mode => Some([Mode::Enforce, Mode::Observe].into_iter().map(Mode::name).collect()),
            Field::Scope => Some(or_empty(
                [ScopeKind::Claim, ScopeKind::Credential, ScopeKind::Anonymous]
                    .into_iter()
                    .map(ScopeKind::slug),
            )),
            Field::Unverified => Some(or_empty(Unverified::ALL.into_iter().map(Unverified::slug))),
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
            | Field::StorageWrites => None,
        }
    }
}

/// `values`, and the empty string the writer puts in a column whose field is absent.
fn or_empty(values: impl Iterator<Item = &'static str>) -> Vec<&'static str> {
    std::iter::once("").chain(values).collect()
}

/// One column of the dataset: its SQL name, the field it holds, and what an operator reads
/// in it (the text of the table in `docs/operations.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub field: Field,
    pub meaning: &'static str,
}

/// `index1`, the sampling key: Analytics Engine samples rows per index value, so that a
/// rare decision keeps its rows when a common one is sampled down.
pub const INDEX: Column = Column { name: "index1", field: Field::Decision, meaning: "decision" };

/// `blob1` … `blob10`, in order.
pub const BLOBS: [Column; 10] = [
    Column { name: "blob1", field: Field::Decision, meaning: "decision" },
    Column { name: "blob2", field: Field::Problem, meaning: "problem kind, or empty" },
    Column { name: "blob3", field: Field::Object, meaning: "object id, or empty" },
    Column { name: "blob4", field: Field::Mode, meaning: "mode: `enforce` or `observe`" },
    Column {
        name: "blob5",
        field: Field::Route,
        meaning: "the route pattern that matched, or empty (no route configured, or a request refused before one was chosen)",
    },
    Column { name: "blob6", field: Field::Scope, meaning: "scope: `claim`, `credential`, `anonymous`, or empty" },
    Column { name: "blob7", field: Field::Unverified, meaning: "why a token did not verify, or empty" },
    Column { name: "blob8", field: Field::Method, meaning: "the request's method, or empty" },
    Column { name: "blob9", field: Field::RequestId, meaning: "the request id (below), or empty" },
    Column {
        name: "blob10",
        field: Field::Version,
        meaning: "the worker's version (the `CF_VERSION_METADATA` binding's id), or empty",
    },
];

/// `double1` … `double8`, in order. The counts (`double6` … `double8`) are what a request
/// cost in the calls the platform bills: summed over rows (weighted by the sampling), they
/// give object requests and storage operations per decision, beside the latencies.
pub const DOUBLES: [Column; 8] = [
    Column { name: "double1", field: Field::Status, meaning: "status sent to the caller" },
    Column { name: "double2", field: Field::OriginStatus, meaning: "origin status (0: no origin answer)" },
    Column { name: "double3", field: Field::OriginMs, meaning: "origin latency in ms (-1: not forwarded)" },
    Column { name: "double4", field: Field::WaitMs, meaning: "duplicate wait in ms (-1: did not wait)" },
    Column {
        name: "double5",
        field: Field::EdgeMs,
        meaning: "the time the key's object took to answer in ms, less the origin's time and a duplicate's wait: what the edge added (-1: not measured)",
    },
    Column {
        name: "double6",
        field: Field::ObjectCalls,
        meaning: "calls to the key's object the Worker made (-1: a line the object wrote, where it is one call)",
    },
    Column {
        name: "double7",
        field: Field::StorageReads,
        meaning: "the key's storage reads the object made for the request (-1: a line the Worker wrote)",
    },
    Column {
        name: "double8",
        field: Field::StorageWrites,
        meaning: "the key's storage writes the object made for the request (-1: a line the Worker wrote)",
    },
];

// The writer relies on these: an index is a token, a blob is text, a double is a number.
const _: () = {
    assert!(INDEX.field.is_token());
    let mut i = 0;
    while i < BLOBS.len() {
        assert!(!BLOBS[i].field.is_number());
        i += 1;
    }
    let mut i = 0;
    while i < DOUBLES.len() {
        assert!(DOUBLES[i].field.is_number());
        i += 1;
    }
};

/// Every column the worker writes: the index, the blobs, then the doubles.
pub fn columns() -> impl Iterator<Item = &'static Column> {
    std::iter::once(&INDEX).chain(BLOBS.iter()).chain(DOUBLES.iter())
}

/// The column named `name` (`blob2`, `double3`, …), when the worker writes it.
pub fn column(name: &str) -> Option<&'static Column> {
    columns().find(|column| column.name == name)
}

#[cfg(test)]
mod tests;
