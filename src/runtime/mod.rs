//! The wasm32 runtime: carries out what `crate::core` decides, and nothing else.
//!
//! - `entry`: the Worker's fetch handler. Validates the request, fingerprints it and hands
//!   it to the key's Durable Object; passes uncovered methods through.
//! - `object`: the Durable Object, single writer for one (scope, key).
//! - `observe`: observe mode's edge half: forward as the request came, record beside it.
//! - `storage`: the object's one-row SQLite record.
//! - `origin`: the origin fetch with its timeout, classified into an `OriginResult`.
//! - `identity`: the caller's scope: the JWKS fetch (cached as `core::jwks_cache` decides),
//!   WebCrypto signature checks.
//! - `admin`: the admin API's edge half (token, routing to the object).
//! - `metrics`: the log line and the optional Analytics Engine data point.
//! - `respond`: core values (problems, stored responses) into `Response`s, and the stored
//!   answer prepared once for replays.
//! - `settings`: the configuration and bindings, read once per isolate.
//! - `seal`: stored answers sealed and opened with WebCrypto.
//! - `origin_auth`: the origin requests' signature, made with WebCrypto.

mod admin;
mod chunks;
mod entry;
mod identity;
mod metrics;
mod object;
mod observe;
mod origin;
mod origin_auth;
mod respond;
mod seal;
mod settings;
mod storage;

/// The header names the Worker uses to talk to its object (see `core::headers`).
mod internal {
    pub const FINGERPRINT: &str = "x-idempotency-edge-fingerprint";
    /// How the scope was reached (`core::scope::ScopeLog`), for the object's log line.
    pub const SCOPE: &str = "x-idempotency-edge-scope";
    /// What the object needs of the configuration (`core::config::encode_object_policy`).
    pub const POLICY: &str = "x-idempotency-edge-policy";
    /// The caller scope's key salt (`core::fingerprint::Scope::key_salt`), for sealing the
    /// key's stored answer.
    pub const SCOPE_SALT: &str = "x-idempotency-edge-scope-salt";
    /// Present when the request prefers `respond-async` on a route that accepts it: the
    /// job's settings (`core::async_job::AsyncConfig::encode`).
    pub const ASYNC: &str = "x-idempotency-edge-async";
    /// The request body's size, for the waiters' byte limit.
    pub const BODY_BYTES: &str = "x-idempotency-edge-body-bytes";
    /// Present when the origin is a configured `ORIGIN_URL` (not route mode): the object may
    /// probe it with a TCP connect before sending (see `origin`).
    pub const PROBE_ORIGIN: &str = "x-idempotency-edge-probe-origin";
    /// Set by the object on every answer it gives, and removed by the Worker. An answer
    /// without it came from the platform, which may have answered after the object ran: it
    /// is a 503, never a reason to fail open.
    pub const ANSWERED: &str = "x-idempotency-edge-answered";
    /// An admin operation for the object: `inspect`, `inspect-reveal`, `purge` or
    /// `purge-force`.
    pub const ADMIN: &str = "x-idempotency-edge-admin";
    /// Observe mode: `arrival` (record the request, say what enforcing would do, forward
    /// nothing) or `outcome` (record the origin's answer, which the Worker got itself).
    pub const OBSERVE: &str = "x-idempotency-edge-observe";
    /// Observe mode, the object's answer: the decision enforcing would have made
    /// (`core::log::Decision::token`).
    pub const DECISION: &str = "x-idempotency-edge-decision";
    /// Observe mode: the attempt the object claimed for a request (16 hex digits); the
    /// Worker names it again with the outcome.
    pub const ATTEMPT: &str = "x-idempotency-edge-attempt";
    /// Observe mode, with an outcome: `responded`, `timeout` or `reset`.
    pub const RESULT: &str = "x-idempotency-edge-result";
    /// Observe mode, with a `responded` outcome: the origin's status and headers as JSON,
    /// `{"status":201,"headers":[["name","value"],...]}`; the body is the request body.
    pub const ANSWER_HEAD: &str = "x-idempotency-edge-answer-head";
}

/// Milliseconds since the epoch. Only the runtime reads the clock; the core is handed it.
fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}
