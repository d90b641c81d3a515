//! JSON canonicalisation (`core::primitives::canonical_json`) and the payload fingerprint (`core::formats::fingerprint`).
//! The checks live in `idempotency_edge::core::fuzz_checks::json`, shared with the stable smoke test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idempotency_edge::core::fuzz_checks::json(data));
