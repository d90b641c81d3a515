//! The end-to-end suite: the built Wasm worker runs in real workerd (`wrangler dev`, local
//! mode) in front of a real HTTP origin on loopback. No mocks.
//!
//! One test binary, so that every helper in `tests/support` is used by some test (an unused
//! one is reported as dead code) and the tests of every module run side by side.
//!
//! - `basics`: keys, execute and replay, coalescing, fencing, fingerprints, origin outcomes,
//!   the TTL, and the test origin's gate itself;
//! - `answers`: how each kind of origin answer is stored, released and replayed;
//! - `boundaries`: where one key could reach the origin twice (fail-open, the outcome table,
//!   bounded memory, policy bypass);
//! - `waiters`: duplicates waiting on an attempt, whatever its end;
//! - `storage_faults`: a corrupt, unreadable or unwritable record inside the object;
//! - `route_mode`: `ORIGIN_URL` empty, the request's own URL is the origin;
//! - `routes`: per-route policy (`IDEMPOTENCY_ROUTES`) and an unreachable object;
//! - `admin`: the admin API; `metrics`: the Analytics Engine binding;
//! - `at_rest`: stored answers sealed with `STORAGE_ENCRYPTION_KEYS`;
//! - `large_answers`: answers over one SQLite row, stored in chunks and replayed as streams;
//! - `outcomes`: `ORIGIN_DEDUPLICATES` against an origin that honours keys itself;
//! - `reconcile`: unknown outcomes looked up at the origin (`reconcile_url`);
//! - `outcome_queue`: outcomes published to `OUTCOME_QUEUE`, read by a consumer worker;
//! - `async_accept`: `ASYNC_ACCEPT` (`Prefer: respond-async`): jobs run from the object's
//!   alarm, through overloads, an origin that is down, a restart and the deadline;
//! - `identity`: scopes from verified JWT claims, and callers without a credential;
//! - `rollout`: per-route service bindings beside `ORIGIN_URL`;
//! - `signatures`: the origin hop's RFC 9421 signature, verified by an independent library;
//! - `hardening`: the signed origin hop, trusted client IP, rate limits, keyed object names,
//!   alarm retries and deletion on read, misspelt variables and short admin tokens;
//! - `docs_citations`: every test the docs cite exists (no worker);
//! - `work_per_request`: origin requests, writes and rows written per payment, counted from
//!   outside (the origin's count, the object's SQLite history);
//! - `reliability`: faults, load, hostile input, bounded storage, logs;
//! - `reliability_run`: the long mixed run (`./scripts/reliability.sh`; `./scripts/test.sh`
//!   runs it only with `--with-reliability-run`, as CI does);
//! - `zz_after_all`: the leak and panic scan of every instance, once every other test is
//!   done (it sorts last, so it starts last).
//!
//! Prerequisites: `./scripts/test.sh` (installs the toolchain and builds the worker); a
//! plain `cargo test --test e2e` rebuilds the worker when `src/` changed.
//! Randomised tests take their seed from `TEST_SEED` when it is set.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod answers;
mod async_accept;
mod at_rest;
mod basics;
mod boundaries;
mod docs_citations;
mod hardening;
mod identity;
mod large_answers;
mod metrics;
mod outcome_queue;
mod outcomes;
mod reconcile;
mod reliability;
mod reliability_run;
mod rollout;
mod route_mode;
mod routes;
mod signatures;
mod storage_faults;
mod waiters;
mod work_per_request;
mod zz_after_all;
