//! Bearer tokens and key sets (`core::primitives::jwt`, `core::edge_rules::scope`).
//! The checks live in `idempotency_edge::core::fuzz_checks::jwt`, shared with the stable smoke test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idempotency_edge::core::fuzz_checks::jwt(data));
