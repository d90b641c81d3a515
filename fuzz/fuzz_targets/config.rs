//! The wrangler variables (`core::config`, `core::routes`) and admin routing.
//! The checks live in `idempotency_edge::core::fuzz_checks::config`, shared with the stable smoke test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idempotency_edge::core::fuzz_checks::config(data));
