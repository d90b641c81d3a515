//! Stored-record decoding (`core::formats::key_record`) and the state machine on decoded records.
//! The checks live in `idempotency_edge::core::fuzz_checks::record`, shared with the stable smoke test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idempotency_edge::core::fuzz_checks::record(data));
