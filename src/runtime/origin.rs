//! The origin fetch: one attempt, bounded by the origin timeout, reported as an
//! `OriginResult` plus the answer when there is one.
//!
//! Owns the mapping from the runtime's fetch failures to the core's results. When it cannot
//! tell whether the request reached the origin, it says `ResetAfterSend` (unknown), never
//! `ConnectRefused`: mistaking an executed payment for an unexecuted one would charge twice.
//!
//! workerd reports every failed fetch alike ("Network connection lost."), a refused connect
//! and a reset after the request was sent included. So, in `ORIGIN_URL` mode, the attempt
//! first opens a plain TCP connection to the origin's host and port: if that is refused,
//! nothing was sent and the key can be released. Any later fetch failure is unknown. In
//! route mode the origin sits behind Cloudflare, where outbound sockets may not connect, so
//! there is no probe and every fetch failure is unknown.

use futures_util::future::{select, Either};
use std::time::Duration;
use wasm_bindgen::JsValue;
use worker::Socket;
use worker::{
    console_warn, AbortController, Delay, Fetch, Headers, Method, Request, RequestInit, RequestRedirect,
    Response,
};

use crate::core::headers::{connection_tokens, forward_to_origin};
use crate::core::policy::OriginResult;
use crate::core::url::host_and_port;

/// A complete answer from the origin.
pub struct OriginAnswer {
    pub status: u16,
    /// Every header as received, in order (`Set-Cookie` lines separately).
    pub headers: Vec<(String, String)>,
    /// Tokens of the answer's `Connection` header (they name more hop-by-hop headers).
    pub connection_tokens: Vec<String>,
    pub body: Vec<u8>,
}

/// Sends one attempt and waits at most `timeout_ms` for the whole answer, body included: a
/// body that stalls is a timeout like any other.
pub async fn forward(
    target: &str,
    method: Method,
    headers: &Headers,
    body: &[u8],
    timeout_ms: u64,
    probe_first: bool,
) -> (OriginResult, Option<OriginAnswer>) {
    if probe_first && !accepts_connections(target).await {
        return (OriginResult::ConnectRefused, None);
    }
    let request = match build_request(target, method, headers, body) {
        Ok(request) => request,
        // Nothing was sent.
        Err(_) => return (OriginResult::ConnectRefused, None),
    };
    let controller = AbortController::default();
    let signal = controller.signal();
    let exchange = Box::pin(async move {
        let fetch = Fetch::Request(request);
        let response = fetch.send_with_signal(&signal).await.map_err(classify_fetch_error)?;
        read_answer(response).await.map_err(|_| OriginResult::ResetAfterSend)
    });
    let timeout = Delay::from(Duration::from_millis(timeout_ms));
    match select(exchange, timeout).await {
        Either::Left((Ok(answer), _)) => (OriginResult::Responded(answer.status), Some(answer)),
        Either::Left((Err(result), _)) => (result, None),
        Either::Right(((), _)) => {
            controller.abort();
            (OriginResult::TimedOut, None)
        }
    }
}

fn build_request(target: &str, method: Method, headers: &Headers, body: &[u8]) -> worker::Result<Request> {
    let tokens = connection_tokens(headers.get("connection")?.as_deref());
    let outgoing = Headers::new();
    for (name, value) in headers.entries() {
        if forward_to_origin(&name, &tokens) {
            outgoing.append(&name, &value)?;
        }
    }
    let mut init = RequestInit::new();
    init.with_method(method)
        .with_headers(outgoing)
        // A proxy hands redirects to the client; following one would be a second request.
        .with_redirect(RequestRedirect::Manual)
        .with_body(Some(JsValue::from(js_sys::Uint8Array::from(body))));
    Request::new_with_init(target, &init)
}

async fn read_answer(mut response: Response) -> worker::Result<OriginAnswer> {
    let status = response.status_code();
    let headers: Vec<(String, String)> = response.headers().entries().collect();
    let connection = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("connection"))
        .map(|(_, value)| value.as_str());
    let connection_tokens = connection_tokens(connection);
    let body = response.bytes().await?;
    Ok(OriginAnswer { status, headers, connection_tokens, body })
}

/// A fetch failure may have happened after the request left: the outcome is unknown.
fn classify_fetch_error(error: worker::Error) -> OriginResult {
    console_warn!("origin fetch failed: {}", error);
    OriginResult::ResetAfterSend
}

/// Whether a TCP connection to the target's host and port opens. Sends no byte.
async fn accepts_connections(target: &str) -> bool {
    let Some((host, port)) = host_and_port(target) else { return false };
    let Ok(mut socket) = Socket::builder().connect(host, port) else { return false };
    let opened = socket.opened().await.is_ok();
    if opened {
        let _ = socket.close().await;
    }
    opened
}
