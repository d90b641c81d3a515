//! idempotency-edge: a Cloudflare Worker that makes retries of payment requests safe.
//!
//! - [`core`] decides (pure, host-tested).
//! - `runtime` (wasm32 only) carries out: the Worker entry, the per-key Durable Object,
//!   its storage and the origin fetch.
#![forbid(unsafe_code)]

pub mod core;

#[cfg(target_arch = "wasm32")]
mod runtime;
