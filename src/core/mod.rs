//! The pure core: every decision the worker makes, with no clock, no I/O and no `worker`
//! import. It builds and is tested on the host with plain `cargo test`; the wasm32 runtime
//! (`crate::runtime`) converts between the platform's types and these, and carries out
//! what the core decides.

// The layers, lowest first: primitives, vocabulary, formats, key_rules, edge_rules. A module
// imports only its own layer and those below it, and no import cycle runs through the core
// (tests/core_layers.rs fails the build otherwise).
pub mod edge_rules;
pub mod formats;
pub mod key_rules;
pub mod primitives;
pub mod vocabulary;

// The stored fixtures every format must keep decoding (tests only).
#[cfg(test)]
mod format_fixtures;
// The fuzz targets' checks, with serde_json as their oracle: built for the tests and for
// fuzz/ (the `fuzz` feature) only, so that the worker carries no test code.
#[cfg(any(test, feature = "fuzz"))]
#[doc(hidden)]
pub mod fuzz_checks;
