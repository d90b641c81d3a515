//! The wasm32 runtime: carries out what `crate::core` decides, and nothing else.
//!
//! - `entry`: the Worker's fetch handler. Validates the request, fingerprints it and hands
//!   it to the key's Durable Object; passes uncovered methods through.
//! - `object`: the Durable Object, single writer for one (scope, key).
//! - `storage`: the object's one-row SQLite record.
//! - `origin`: the origin fetch with its timeout, classified into an `OriginResult`.
//! - `admin`: the admin API's edge half (token, routing to the object).
//! - `metrics`: the log line and the optional Analytics Engine data point.
//! - `respond`: core values (problems, stored responses) into `Response`s, and the stored
//!   answer prepared once for replays.
//! - `settings`: the configuration and bindings, read once per isolate.
//! - `seal`: stored answers sealed and opened with WebCrypto.

mod admin;
mod entry;
mod metrics;
mod object;
mod origin;
mod respond;
mod seal;
mod settings;
mod storage;

/// The header names the Worker uses to talk to its object (see `core::headers`).
mod internal {
    pub const FINGERPRINT: &str = "x-idempotency-edge-fingerprint";
    /// What the object needs of the configuration (`core::config::encode_object_policy`).
    pub const POLICY: &str = "x-idempotency-edge-policy";
    /// The caller scope's key salt (`core::fingerprint::Scope::key_salt`), for sealing the
    /// key's stored answer.
    pub const SCOPE_SALT: &str = "x-idempotency-edge-scope-salt";
    /// The request body's size, for the waiters' byte limit.
    pub const BODY_BYTES: &str = "x-idempotency-edge-body-bytes";
    /// Present when the origin is a configured `ORIGIN_URL` (not route mode): the object may
    /// probe it with a TCP connect before sending (see `origin`).
    pub const PROBE_ORIGIN: &str = "x-idempotency-edge-probe-origin";
    /// Set by the object on every answer it gives, and removed by the Worker. An answer
    /// without it came from the platform, which may have answered after the object ran: it
    /// is a 503, never a reason to fail open.
    pub const ANSWERED: &str = "x-idempotency-edge-answered";
    /// An admin operation for the object: `inspect`, `purge` or `purge-force`.
    pub const ADMIN: &str = "x-idempotency-edge-admin";
}

/// Milliseconds since the epoch. Only the runtime reads the clock; the core is handed it.
fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}
