//! The client half of idempotency-edge: retries of payment requests that happen when they
//! help, and only when they are safe.
//!
//! The worker (the `idempotency-edge` crate, a Cloudflare Worker) makes a retry safe: one
//! `Idempotency-Key` executes at most once, and every retry gets the stored answer. This
//! crate makes the retries happen, over HTTPS, from Rust services on tokio:
//!
//! - [`IdempotencyMiddleware`] is a [`reqwest_middleware`] layer for the worker's base URLs,
//!   and only those: it gives a covered request (`POST`, `PATCH` under one of them) a key
//!   when it has none, sends the same key and body bytes on every attempt, retries exactly
//!   what the [`policy`] calls safe (honouring `Retry-After`), and returns an outcome the
//!   client cannot know as a typed [`IdempotencyError`], never as a response that looks
//!   final. Requests to any other host or path pass through untouched.
//! - [`Operation`] and [`Client`] are the same loop for callers that form the intent once
//!   (the key fixed with it, for instance from a business id with [`key_for`]) and want the
//!   whole story back: [`Outcome`] or [`ClientError`], each with every attempt.
//!   `blocking::Client` (feature `blocking`) is a thin blocking facade.
//! - Two programs (feature `cli`): `idempotency-edge-send` sends one operation and shows
//!   every attempt; `idempotency-edge-check` checks any endpoint (this worker or another
//!   implementation of the IETF draft) for what the draft promises; see `docs/deploy.md`.
//!
//! # Features
//!
//! | feature    | default | what it adds |
//! |------------|---------|--------------|
//! | `rustls`   | yes     | TLS for reqwest (its `rustls` feature): rustls with aws-lc-rs, certificates checked against the operating system's roots. Off, reqwest gets no TLS from this crate: enable reqwest's `native-tls` (or `rustls-no-provider`) in your own `Cargo.toml` and pass your `reqwest::Client` in. |
//! | `blocking` | no      | `blocking::Client`, on a current-thread tokio runtime of its own |
//! | `tracing`  | no      | one `tracing` event per attempt and per final decision (never a key or a header value) |
//! | `cli`      | no      | the two programs and their argument parser (clap) |
//!
//! # The middleware
//!
//! The layer is built for the worker's base URLs (`https://host[:port][/path]`): it covers
//! a request when the scheme, host and port are a base's and the path is the base's path or
//! continues it after a `/` ([`BaseUrl`]). Every other request, for instance to a payment
//! API that is not behind the worker, passes through untouched (no key added, no retry):
//! there a random key means nothing and a retry after a timeout could pay twice.
//!
//! ```no_run
//! use idempotency_edge_client::{key_for, IdempotencyError, IdempotencyMiddleware};
//!
//! # async fn charge() -> Result<(), Box<dyn std::error::Error>> {
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(IdempotencyMiddleware::for_base_urls(["https://api.example.com/v1"])?)
//!     .build();
//! // The key is fixed when the intent is: charging order 42.
//! let sent = client
//!     .post("https://api.example.com/v1/charges")
//!     .header("Idempotency-Key", key_for("order-42", "charge"))
//!     .header("Content-Type", "application/json")
//!     .body(r#"{"amount":1000,"currency":"eur"}"#)
//!     .send()
//!     .await;
//! match sent {
//!     // 2xx, or a final answer such as 422 key-reused: the operation's result.
//!     Ok(response) => println!("{} {}", response.status(), response.text().await?),
//!     Err(e) => match IdempotencyError::from_middleware(&e) {
//!         Some(e) if e.needs_reconciliation() => println!("ask the payment system whether order 42 was charged"),
//!         Some(IdempotencyError::GaveUp { .. }) => println!("not known yet: send it again later, same key"),
//!         _ => return Err(e.into()),
//!     },
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Operations
//!
//! ```no_run
//! use idempotency_edge_client::{key_for, Client, ClientError, Operation, RetryConfig};
//!
//! # async fn charge() {
//! let client = Client::new("https://api.example.com", RetryConfig::default())
//!     .expect("a valid base URL");
//! let charge = Operation::post_json(key_for("order-42", "charge"), "/v1/charges", r#"{"amount":1000}"#)
//!     .expect("a valid key and path");
//! match client.send(&charge).await {
//!     Ok(outcome) => println!("{} after {} attempt(s), replayed: {}", outcome.response.status, outcome.attempts, outcome.replayed),
//!     Err(ClientError::ReconciliationNeeded { .. }) => println!("ask the payment system whether order 42 was charged"),
//!     Err(e) => println!("failed: {e}"),
//! }
//! # }
//! ```
//!
//! # What is retried
//!
//! Timeouts, broken connections, the worker's `409 in-progress`, `502 origin-unreachable`,
//! `503 storage-unavailable` and `503 origin-unavailable`, and any 429: the request
//! certainly did not execute, or the worker will replay or join the one execution there
//! was. Final answers (2xx, 4xx,
//! `422 key-reused`) are never retried. The worker's `outcome-unknown`, and any other 5xx
//! (an origin's 500, a gateway's 502 or 504, Cloudflare's 520 or 524), call for
//! reconciliation: the request may have executed, and a retry cannot tell. The table is in
//! [`policy`].
//!
//! # Asynchronous acceptance
//!
//! Where the worker runs with `ASYNC_ACCEPT=prefer`, a request with `Prefer: respond-async`
//! is answered 202 with `Preference-Applied: respond-async` and executed by the worker in
//! the background. The middleware and the operation client poll it (the same request, the
//! same key) until its final answer, honouring `Retry-After`, for up to
//! [`RetryConfig::poll_deadline`] (5 minutes by default); past that the result is
//! [`IdempotencyError::StillPending`] / [`ClientError::StillPending`]: poll later with the
//! same key, never send the operation under a new one.
//!
//! # TLS
//!
//! With the default `rustls` feature, reqwest's own default TLS: rustls with the aws-lc-rs
//! provider (compiled from C at build time: a C compiler, no OpenSSL), and
//! certificates checked against the operating system's trust store
//! (`rustls-platform-verifier`). To trust a private CA as well (a staging deployment), give
//! the `reqwest::Client` the root with `tls_certs_merge`, or with `tls_certs_only` to trust
//! it alone (the tests do); never turn certificate checks off.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attempt;
mod base_url;
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod client;
mod key;
pub mod middleware;
mod operation;
pub mod policy;
#[cfg(feature = "tracing")]
mod trace;

pub use attempt::{AttemptReport, AttemptSummary, Report, Response, TransportError};
pub use base_url::{BaseUrl, InvalidBaseUrl};
pub use client::{Client, ClientError, Outcome};
pub use key::{key_for, random_key, wire_key, IDEMPOTENCY_KEY_HEADER};
pub use middleware::{AttemptObserver, Attempts, IdempotencyError, IdempotencyMiddleware, SentKey};
pub use operation::{InvalidOperation, Operation};
pub use policy::{AttemptResult, Decision, GiveUpReason, RetryConfig, TransportErrorKind};

/// A uniform value in `[0, 1)` for the jitter, from std's randomly keyed hasher (the jitter
/// only has to decorrelate clients, not be unpredictable).
pub(crate) fn random_unit() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::random_unit;

    #[test]
    fn random_values_are_in_range_and_vary() {
        let values: Vec<f64> = (0..1000).map(|_| random_unit()).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        let low = values.iter().filter(|v| **v < 0.5).count();
        assert!((350..650).contains(&low), "roughly uniform: {low} of 1000 below 0.5");
    }
}
