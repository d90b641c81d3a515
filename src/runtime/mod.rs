//! The wasm32 runtime: carries out what `crate::core` decides, and nothing else.
//!
//! - `entry`: the Worker's fetch handler (`worker`'s `#[event(fetch)]`). Carries out the
//!   core's plan for the request (`core::edge`): hands a covered request, identified
//!   (`core::edge_rules::identify`), to the key's Durable Object; passes uncovered methods through.
//! - `forward`: the Worker's own forwards (pass-through, observe, fail-open), signed.
//! - `object_call`: the Worker's call to a key's object, and whether the object answered.
//! - `object`: the Durable Object (`worker`'s `#[durable_object]`), single writer for one
//!   (scope, key).
//! - `observe`: observe mode's edge half: forward as the request came, record beside it.
//! - `key_sync`: the object's record kept in step between the key's driver and storage.
//! - `key_storage`: the object's storage as one piece: the record, its sealed answer,
//!   chunk rows and the alarm, with the test-only storage faults.
//! - `origin`: the origin fetch with its timeout, classified into an `OriginResult`.
//! - `identity`: the caller's scope: the JWKS fetch (`worker`'s `Fetch`, cached as
//!   `core::edge_rules::jwks_cache` decides), WebCrypto signature checks.
//! - `body`: request bodies read within a limit, or drained, in the Worker and the object.
//! - `admin`: the admin API's edge half (token, routing to the object).
//! - `metrics`: the log line and the optional Analytics Engine data point (`worker`'s).
//! - `reconcile`: the object's lookups of unknown outcomes (`core::key_rules::reconcile`).
//! - `rate_limit`: the Worker's rate limit for covered requests (`worker`'s `RateLimiter`).
//! - `outcome_queue`: published outcomes sent to the optional `OUTCOME_QUEUE` producer
//!   (`worker`'s `Queue`).
//! - `respond`: core values (problems, stored responses) into `Response`s, and the stored
//!   answer prepared once for replays.
//! - `settings`: the configuration and bindings, read once per isolate.
//! - `seal`: stored answers sealed and opened with WebCrypto (`web-sys`'s `SubtleCrypto`).
//! - `origin_auth`: the origin requests' signature, made with WebCrypto.
//! - `bindings`: the platform calls `worker` does not bind (one line each on why): a
//!   namespace's jurisdiction, and the object storage's synchronous key-value API and
//!   `transactionSync`.
//! - `boundary`: headers read whole, and request bodies and answers read up to a limit or
//!   drained, as streams (`wasm-streams`). The origin's probe and exchange are `worker`'s
//!   (`Socket`, `Fetch`), in `origin`.
//! - The runtime's error is `worker::Error` (its fault: [`AnswerFault`]), a race of two
//!   futures `futures_util`'s `select`, the log `worker`'s `console_*!`, timers its `Delay`.

mod admin;
mod bindings;
mod body;
mod boundary;
mod chunks;
mod entry;
mod forward;
mod identity;
mod key_storage;
mod key_sync;
mod metrics;
mod object;
mod object_call;
mod observe;
mod origin;
mod origin_auth;
mod outcome_queue;
mod rate_limit;
mod reconcile;
mod respond;
mod seal;
mod settings;

use crate::core::vocabulary::fault::{Fault, PlatformCall, Stage};

/// A runtime error (`worker::Error`) as a fault (`core::vocabulary::fault`): where it reaches
/// the object's answer, it is a platform call that threw after the key's step was carried out.
trait AnswerFault {
    fn fault(&self) -> Fault;
}

impl AnswerFault for worker::Error {
    fn fault(&self) -> Fault {
        Fault::platform(PlatformCall::Answer, Stage::AfterStep)
    }
}

/// Milliseconds since the epoch. Only the runtime reads the clock; the core is handed it.
fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}

/// 64 random bits (attempt ids, request ids). Fencing and tracing need uniqueness per key
/// and per request, not secrecy.
fn random_u64() -> u64 {
    let high = (js_sys::Math::random() * 4_294_967_296.0) as u64;
    let low = (js_sys::Math::random() * 4_294_967_296.0) as u64;
    (high << 32) | low
}
