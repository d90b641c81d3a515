//! Support for the end-to-end tests, one module per kind of helper:
//!
//! - `http`: a std-only HTTP/1.1 client (send, or send now and read or abandon later);
//! - `origin`: the test origin, steered by request headers, with gates that hold requests
//!   until the test releases them and report arrivals;
//! - `backlog_origin`: Python's `http.server` with a small listen backlog, for the storm
//!   that a full accept queue puts the TCP probe through;
//! - `dedup_origin`: an origin that deduplicates by `Idempotency-Key` itself, and can go
//!   down and come back;
//! - `ledger_origin`: a payment origin with a ledger and a lookup by key, for
//!   reconciliation;
//! - `signature_origin`: an origin on Python's `http-message-signatures` that verifies the
//!   edge's RFC 9421 signature with an implementation not ours;
//! - `worker`: the harness that runs the built worker in `wrangler dev` (local workerd);
//! - `requests`: unique keys, paths and credentials, and the standard requests;
//! - `assert`: the shared assertions (origin answer, replay, problem);
//! - `logs`: the worker's decision lines, sentinels, and the leak and panic scan;
//! - `storage`: the SQLite files under `--persist-to`, read and (for fault tests) changed;
//! - `hostile`: the table of hostile inputs and the answer each must get;
//! - `rng`: seeded randomness, replayable with `TEST_SEED`.
//!
//! It is compiled into the one end-to-end test binary (`tests/e2e/main.rs`), so a helper no
//! test uses is reported as dead code.

pub mod assert;
pub mod backlog_origin;
pub mod dedup_origin;
pub mod hostile;
pub mod http;
pub mod ledger_origin;
pub mod logs;
pub mod origin;
pub mod requests;
pub mod rng;
pub mod signature_origin;
pub mod storage;
pub mod worker;
