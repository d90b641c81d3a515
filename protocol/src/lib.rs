//! What a client of idempotency-edge shares with the worker: the `Idempotency-Key` grammar,
//! the problem kinds it answers with, the `Retry-After` it sends, and the `Prefer` token of
//! asynchronous acceptance. No I/O and no dependencies, so that the worker (Wasm) and a
//! client (native) read these the same way.

#![forbid(unsafe_code)]

pub mod key;
pub mod problem;
pub mod retry_after;

/// The `Prefer` token (RFC 7240) that asks for asynchronous acceptance.
pub const RESPOND_ASYNC: &str = "respond-async";
