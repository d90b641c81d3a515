//! Parsing of the `Idempotency-Key` request header: the rules live in the protocol crate
//! (`idempotency_edge_protocol::key`), which the worker and its clients share, so that a
//! key a client accepts is one the worker accepts.

pub use idempotency_edge_protocol::key::*;
