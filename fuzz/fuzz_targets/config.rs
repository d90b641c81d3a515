//! The wrangler variables (`core::edge_rules::config`, `core::edge_rules::routes`) and admin routing.
//! The checks live in `idempotency_edge::core::fuzz_checks::config`, shared with the stable smoke test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idempotency_edge::core::fuzz_checks::config(data));
