//! Request bodies, in the Worker and in the object. The Worker reads a covered request's
//! body whole, up to `MAX_BODY_BYTES`, counting a streamed body as it arrives (a
//! `Content-Length` can only make a refusal come sooner); observe mode reads the same but
//! forwards a larger body as it came. Every answer that does not use a body still reads
//! it: the runtime drops a connection whose request body was left unread.

use js_sys::Uint8Array;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;
use web_sys::{ReadableStream, Request};

use super::boundary;
use crate::core::edge_rules::edge::{declared_body, drain_limit, drains_whole, DeclaredBody};
use worker::Result;

/// The body (in Rust for the fingerprint, and as the JavaScript value to send on), or `None`
/// when it is larger than `limit` ([`read_observed`]); a refused body, declared over the
/// limit or streamed past it, is first read and thrown away as far as
/// `core::edge_rules::edge::drain_limit` says, so that the refusal reaches its client.
pub(super) async fn read_within(
    req: &Request,
    content_length: Option<&str>,
    limit: u64,
) -> Result<Option<(Vec<u8>, JsValue)>> {
    Ok(match read(req, content_length, limit, false).await? {
        ObservedBody::Declared => {
            discard(req).await;
            None
        }
        ObservedBody::OverLimit(rest) => {
            // The limits are settings of at most a few hundred MiB, exact as an f64.
            boundary::drain(&rest, drain_limit(limit) as f64).await;
            None
        }
        ObservedBody::Read(bytes, to_send) => {
            let to_send = to_send.unwrap_or_else(|| Uint8Array::from(&bytes[..]).into());
            Some((bytes, to_send))
        }
    })
}

/// Reads and discards a refused request's body in the Worker, up to `edge::drain_limit`.
pub(super) async fn discard(req: &Request) {
    drain_request(req, false, drain_limit(0) as f64).await;
}

/// A body read up to a limit (in observe mode, where the request is forwarded whatever its
/// size).
pub(super) enum ObservedBody {
    /// `Content-Length` says it is over the limit: nothing was read (observe mode forwards
    /// the request as it came; [`read_within`] reads and drops the body before the refusal).
    Declared,
    /// A streamed body over the limit: what was read, then the rest (never buffered).
    OverLimit(ReadableStream),
    /// The body's bytes (for the fingerprint) and the value to send on: the same
    /// `ArrayBuffer` for a declared length, a stream of the same chunks for a streamed body
    /// in observe mode (so it is forwarded streamed, as it came). `None`: there was no body,
    /// or a streamed one to send on as bytes.
    Read(Vec<u8>, Option<JsValue>),
}

/// Observe mode's read of a body up to `limit`: a `Content-Length` (then the body's length:
/// HTTP framing) can only make the answer come sooner, and such a body is read in one
/// `arrayBuffer()`; a body without one is counted as it streams in.
pub(super) async fn read_observed(
    req: &Request,
    content_length: Option<&str>,
    limit: u64,
) -> Result<ObservedBody> {
    read(req, content_length, limit, true).await
}

/// [`read_observed`], with a stream of a streamed body's chunks to send on when
/// `forward_streamed`. An error where the body could not be read.
async fn read(
    req: &Request,
    content_length: Option<&str>,
    limit: u64,
    forward_streamed: bool,
) -> Result<ObservedBody> {
    let declared = declared_body(content_length, limit);
    if declared == DeclaredBody::OverLimit {
        return Ok(ObservedBody::Declared);
    }
    let Some(raw) = req.body() else { return Ok(ObservedBody::Read(Vec::new(), None)) };
    if declared == DeclaredBody::Within {
        let buffer = JsFuture::from(req.array_buffer()?).await?;
        let body = Uint8Array::new(&buffer).to_vec();
        return Ok(ObservedBody::Read(body, Some(buffer)));
    }
    Ok(match boundary::read_up_to(&raw, limit, forward_streamed).await? {
        (Some(body), forward) => ObservedBody::Read(body, forward.map(JsValue::from)),
        (None, Some(rest)) => ObservedBody::OverLimit(rest),
        // Never: past the limit the rest is always handed back. Not forwarding it without.
        (None, None) => return Err(worker::Error::RustError("the body to forward went missing".into())),
    })
}

/// The request body as one `ArrayBuffer`.
pub(super) async fn read_whole(req: &Request) -> std::result::Result<JsValue, JsValue> {
    JsFuture::from(req.array_buffer()?).await
}

/// Reads the request body to its end and keeps none of it: each chunk stays a JavaScript
/// value and is dropped at once (the runtime drops a connection whose body is left unread);
/// a small one in one read (`core::edge_rules::edge::drains_whole`).
pub(super) async fn drain(req: &Request, declared_bytes: Option<u64>) {
    drain_request(req, drains_whole(declared_bytes), f64::INFINITY).await;
}

/// [`drain`], under way: a promise that never rejects.
pub(super) fn start_drain(req: &Request, declared_bytes: Option<u64>) -> js_sys::Promise {
    // The same request (a handle to it, not `Request.clone()`).
    let req = Clone::clone(req);
    wasm_bindgen_futures::future_to_promise(async move {
        drain(&req, declared_bytes).await;
        Ok(JsValue::UNDEFINED)
    })
}

/// The request body read to its end and dropped: with `whole` in one `arrayBuffer()`,
/// otherwise (or should that fail) chunk by chunk up to `limit` bytes. It never fails.
async fn drain_request(req: &Request, whole: bool, limit: f64) {
    if whole {
        if let Ok(read) = req.array_buffer() {
            if JsFuture::from(read).await.is_ok() {
                return;
            }
        }
    }
    if let Some(body) = req.body() {
        boundary::drain(&body, limit).await;
    }
}
