//! A blocking facade over [`crate::Client`] for programs without an async runtime: it owns
//! a small current-thread tokio runtime and waits for each operation on it.

use std::io;

use crate::attempt::AttemptReport;
use crate::client::{ClientError, Outcome};
use crate::operation::Operation;
use crate::policy::RetryConfig;

/// [`crate::Client`], blocking. Do not call it from inside an async runtime (tokio refuses
/// to block a runtime thread); use the async client there.
#[derive(Debug)]
pub struct Client {
    inner: crate::Client,
    runtime: tokio::runtime::Runtime,
}

impl Client {
    /// A client for `base_url` over a default `reqwest::Client`. An invalid base URL is an
    /// [`io::ErrorKind::InvalidInput`] error whose inner error is the
    /// [`InvalidBaseUrl`](crate::InvalidBaseUrl).
    pub fn new(base_url: impl Into<String>, config: RetryConfig) -> io::Result<Self> {
        let inner = crate::Client::new(base_url, config)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Client::from_async(inner)
    }

    /// Wraps an async client (built with its own `reqwest::Client` or stack).
    pub fn from_async(inner: crate::Client) -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok(Client { inner, runtime })
    }

    /// [`crate::Client::send`], blocking until the policy says stop.
    pub fn send(&self, op: &Operation) -> Result<Outcome, ClientError> {
        self.runtime.block_on(self.inner.send(op))
    }

    /// [`crate::Client::send_observed`], blocking.
    pub fn send_observed(
        &self,
        op: &Operation,
        observe: impl Fn(&AttemptReport) + Send + Sync + 'static,
    ) -> Result<Outcome, ClientError> {
        self.runtime.block_on(self.inner.send_observed(op, observe))
    }
}
