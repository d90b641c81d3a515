//! idempotency-edge: a Cloudflare Worker that makes retries of payment requests safe.
//!
//! - [`core`] decides (pure, host-tested).
//! - `runtime` (wasm32 only) carries out: the Worker entry, the per-key Durable Object,
//!   its storage and the origin fetch.
//! - [`client`] (native targets only) is the client half: a reference retrying client that
//!   sends one key per operation and retries only when that is safe and useful.
#![forbid(unsafe_code)]

pub mod core;

#[cfg(not(target_arch = "wasm32"))]
pub mod client;

#[cfg(target_arch = "wasm32")]
mod runtime;
