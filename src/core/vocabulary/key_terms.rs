//! The terms a key is held under: what a key's object is told about the route a request
//! came on: its timing, its waiter
//! limits, how the origin's answers are classified, whether the route enforces or only
//! observes, and the bounds every configuration of these is checked against. The Worker
//! builds it from the configuration (`core::edge_rules::config`) and hands it over in the call's
//! envelope (`core::edge_rules::wire`); an asynchronous job and a lookup store it (`core::formats::stored_terms`).

use super::outcome_table::OutcomeTable;
use crate::core::primitives::key::IDEMPOTENCY_KEY;

/// Whether the worker enforces its rules on a route, or only watches (`MODE`, route option
/// `mode`).
///
/// In `Observe`, every request goes to the origin exactly as it came and its caller gets the
/// origin's answer exactly as it was given: no problem, no replay, no wait, no added header.
/// The key's object still keeps the key's record, and each request's log line names the
/// decision that `Enforce` would have made, marked `"mode":"observe"`. It is the first step
/// of a rollout, as a Content-Security-Policy is first deployed report-only.
///
/// Observing, the key's object forwards nothing: the Worker forwards every request itself
/// and tells the object about it in two calls (`core::edge_rules::wire::KeyStep`). The
/// arrival steps the key as a real request would (the claim is written, a duplicate is told
/// it would have been coalesced or replayed, a mismatch that it would have been refused);
/// the outcome brings the origin's answer, recorded as enforcing would have recorded it
/// (stored for replay, released or held unknown). So a route that later switches to
/// `Enforce` finds its keys' records already right. An observed claim is live in its
/// object until its outcome comes or its lease ends (`core::key_rules::key_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Enforce,
    Observe,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Observe => "observe",
        }
    }
}

/// Extra lease beyond the origin timeout: time to read the origin's body and write the
/// outcome after the origin call returns.
pub const LEASE_MARGIN_MS: u64 = 10_000;

/// The most `MAX_WAITERS_PER_KEY` may be set to.
pub const MAX_WAITERS_PER_KEY: usize = 1_000;
/// Requests that may wait on one running execution unless configured otherwise.
pub const DEFAULT_WAITERS_PER_KEY: usize = 100;
/// Request-body bytes that the waiters of one execution may have brought in, unless
/// configured otherwise.
pub const DEFAULT_WAITING_BYTES: u64 = 16 * 1024 * 1024;

/// Largest response (body plus headers) that is ever stored for replay, whatever is
/// configured (64 MiB). One SQLite row holds at most 2 MB, so an answer over one row is
/// stored in chunk rows (`core::formats::chunks`); a larger final answer is held as outcome-unknown.
pub const MAX_STORED_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// The timing that applies to one request (from configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub ttl_ms: u64,
    pub duplicate_wait_ms: u64,
    pub origin_timeout_ms: u64,
}

impl Timing {
    pub fn lease_ms(&self) -> u64 {
        self.origin_timeout_ms.saturating_add(LEASE_MARGIN_MS)
    }
}

/// How many duplicates may wait on one running execution. Past either limit a duplicate
/// gets 409 at once, so the memory that waiters hold stays bounded whatever a client does.
/// A waiter keeps no body (the object drains it), but every duplicate's body is in memory
/// while it is read, on the Worker's side too, so bytes are capped as well as requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaiterLimits {
    pub max_waiters: usize,
    /// Sum of the waiting requests' body sizes, this one included.
    pub max_waiting_bytes: u64,
}

impl WaiterLimits {
    /// Whether one more request may wait where `waiters` already do (on an execution, or on
    /// the lookup of an unknown outcome, `core::key_rules::reconcile`).
    pub fn admits(&self, waiters: usize) -> bool {
        waiters < self.max_waiters
    }
}

impl Default for WaiterLimits {
    fn default() -> Self {
        WaiterLimits { max_waiters: DEFAULT_WAITERS_PER_KEY, max_waiting_bytes: DEFAULT_WAITING_BYTES }
    }
}

/// The terms a key is held under for one request: what the key's object needs of the
/// configuration (the route's timing, waiter limits, outcome table, caps, mode, origin
/// binding and key header). The Worker hands them over in the call's envelope (`core::edge_rules::wire`), so the object parses no configuration itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTerms {
    pub timing: Timing,
    pub limits: WaiterLimits,
    pub outcome: OutcomeTable,
    pub max_stored_response_bytes: u64,
    pub max_origin_attempts: Option<u16>,
    /// In `Observe`, the object records and decides but never forwards or answers for the
    /// origin: the Worker does.
    pub mode: Mode,
    /// The service binding to forward through, instead of the request's URL.
    pub origin_service: Option<String>,
    /// The route's key header in lower case, when it is not `Idempotency-Key`: the origin
    /// signature's key line is its value (`core::edge_rules::origin_auth`).
    pub key_header: Option<String>,
}

impl KeyTerms {
    /// The lowercase name of the header the key came from.
    pub fn key_header(&self) -> &str {
        self.key_header.as_deref().unwrap_or(IDEMPOTENCY_KEY.lowercase)
    }
}

/// Thirty days: longer retention is allowed by nothing in the product, and a typo of
/// several extra digits should fail loudly rather than keep records for years.
pub(crate) const MAX_TTL_SECONDS: u64 = 30 * 24 * 3600;
/// A duplicate holds a connection open while it waits; more than five minutes is a mistake.
pub(crate) const MAX_DUPLICATE_WAIT_SECONDS: u64 = 300;
/// Workers' own subrequest limits make longer origin calls pointless.
pub(crate) const MAX_ORIGIN_TIMEOUT_SECONDS: u64 = 600;
