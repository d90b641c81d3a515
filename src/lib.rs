//! idempotency-edge: a Cloudflare Worker that makes retries of payment requests safe.
//!
//! - [`core`] decides (pure, host-tested).
//! - `runtime` (wasm32 only) carries out: the Worker entry, the per-key Durable Object,
//!   its storage and the origin fetch.
//!
//! The client half (a reqwest middleware that retries only when safe, and a conformance
//! checker) is the workspace's other crate, `idempotency-edge-client` in `client/`, so the
//! worker's Wasm carries none of it.
#![forbid(unsafe_code)]

pub mod core;

#[cfg(target_arch = "wasm32")]
mod runtime;
