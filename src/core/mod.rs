//! The pure core: every decision the worker makes, with no clock, no I/O and no `worker`
//! import. It builds and is tested on the host with plain `cargo test`; the wasm32 runtime
//! (`crate::runtime`) converts between the platform's types and these, and carries out
//! what the core decides.

pub mod admin;
pub mod async_job;
pub mod body_shape;
pub mod canonical_json;
pub mod case_fold;
pub mod chunks;
pub mod codec;
pub mod config;
pub mod edge;
pub mod env_names;
pub mod fault;
pub mod fingerprint;
#[cfg(test)]
mod format_fixtures;
// The fuzz targets' checks, with serde_json as their oracle: built for the tests and for
// fuzz/ (the `fuzz` feature) only, so that the worker carries no test code.
#[cfg(any(test, feature = "fuzz"))]
#[doc(hidden)]
pub mod fuzz_checks;
pub mod headers;
pub mod hex;
pub mod identify;
pub mod jwks_cache;
pub mod jwt;
pub mod key;
pub mod key_state;
pub mod keyed_name;
pub mod latch;
pub mod log;
pub mod log_decisions;
pub mod machine;
pub mod message_signature;
pub mod metrics_schema;
pub mod observed;
pub mod origin_auth;
pub mod outcome_events;
pub mod policy;
pub mod problem;
pub mod reconcile;
pub mod record;
pub mod routes;
pub mod scope;
pub mod seal;
pub mod settings;
pub mod url;
pub mod verified_tokens;
pub mod wire;
