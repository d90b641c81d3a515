//! Idempotency-Key parsing (`core::primitives::key`) and header-name rules.
//! The checks live in `idempotency_edge::core::fuzz_checks::key`, shared with the stable smoke test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idempotency_edge::core::fuzz_checks::key(data));
