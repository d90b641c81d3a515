//! Request bodies, in the Worker and in the object. The Worker reads a covered request's
//! body whole, up to `MAX_BODY_BYTES`, counting a streamed body as it arrives (a
//! `Content-Length` can only make a refusal come sooner); observe mode reads the same but
//! forwards a larger body as it came. Every answer that does not use a body still reads
//! it: the runtime drops a connection whose request body was left unread.

use js_sys::Uint8Array;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;
use web_sys::Request;

use super::boundary;
use worker::Result;

/// The body (in Rust for the fingerprint, and as the JavaScript value to send on), or `None`
/// when it is larger than `limit`. A `Content-Length` (then the body's length: HTTP framing)
/// can only make the refusal come sooner, and such a body is read in one `arrayBuffer()`. A
/// body without one is counted as it streams in, and past the limit the rest is read and
/// thrown away, as far as `DRAIN_LIMIT_BYTES` beyond the limit. An error where it could not
/// be read.
pub(super) async fn read_within(
    req: &Request,
    content_length: Option<&str>,
    limit: u64,
) -> Result<Option<(Vec<u8>, JsValue)>> {
    let declared = declared_length(content_length);
    if declared.is_some_and(|length| length > limit) {
        return Ok(None);
    }
    let Some(raw) = req.body() else { return Ok(Some((Vec::new(), Uint8Array::new_with_length(0).into()))) };
    if declared.is_some() {
        let buffer = JsFuture::from(req.array_buffer()?).await?;
        return Ok(Some((Uint8Array::new(&buffer).to_vec(), buffer)));
    }
    match boundary::read_up_to(&raw, limit, false).await? {
        (Some(bytes), _) => {
            let to_send = Uint8Array::from(&bytes[..]).into();
            Ok(Some((bytes, to_send)))
        }
        (None, rest) => {
            if let Some(rest) = rest {
                // The limits are settings of at most a few hundred MiB, exact as an f64.
                boundary::drain(&rest, limit as f64 + DRAIN_LIMIT_BYTES).await;
            }
            Ok(None)
        }
    }
}

/// The length a `Content-Length` value declares, when it is a number.
fn declared_length(content_length: Option<&str>) -> Option<u64> {
    content_length.and_then(|value| value.trim().parse::<u64>().ok())
}

/// Most bytes read and thrown away after a rejection. Answering before the request body is
/// consumed makes workerd drop the connection (a proxy in front then fails the next request
/// on it), so the rest is read, but not without end.
const DRAIN_LIMIT_BYTES: f64 = 8.0 * 1024.0 * 1024.0;

/// Reads and discards a refused request's body in the Worker, up to [`DRAIN_LIMIT_BYTES`].
pub(super) async fn discard(req: &Request) {
    drain_request(req, false, DRAIN_LIMIT_BYTES).await;
}

/// A body in observe mode, where the request is forwarded whatever its size.
pub(super) enum ObservedBody {
    /// `Content-Length` says it is over the limit: the request goes on as it is, unread.
    Declared,
    /// A streamed body over the limit: what was read, then the rest (never buffered).
    OverLimit(JsValue),
    /// The body's bytes (for the fingerprint) and the value to forward: the same
    /// `ArrayBuffer` for a declared length, a stream of the same chunks for a streamed body
    /// (so it is forwarded streamed, as it came). `None` to forward: there was no body.
    Read(Vec<u8>, Option<JsValue>),
}

pub(super) async fn read_observed(
    req: &Request,
    content_length: Option<&str>,
    limit: u64,
) -> Result<ObservedBody> {
    let declared = declared_length(content_length);
    if declared.is_some_and(|length| length > limit) {
        return Ok(ObservedBody::Declared);
    }
    let Some(raw) = req.body() else { return Ok(ObservedBody::Read(Vec::new(), None)) };
    if declared.is_some() {
        let buffer = JsFuture::from(req.array_buffer()?).await?;
        let body = Uint8Array::new(&buffer).to_vec();
        return Ok(ObservedBody::Read(body, Some(buffer)));
    }
    Ok(match boundary::read_up_to(&raw, limit, true).await? {
        (Some(body), Some(forward)) => ObservedBody::Read(body, Some(forward.into())),
        (None, Some(forward)) => ObservedBody::OverLimit(forward.into()),
        // Never: the helper always hands back the body to forward. Not forwarding it without.
        (_, None) => return Err(worker::Error::RustError("the body to forward went missing".into())),
    })
}

/// The largest declared body [`drain`] reads in one call.
const DRAIN_WHOLE_BYTES: u64 = 64 * 1024;

/// The request body as one `ArrayBuffer`.
pub(super) async fn read_whole(req: &Request) -> std::result::Result<JsValue, JsValue> {
    JsFuture::from(req.array_buffer()?).await
}

/// Reads the request body to its end and keeps none of it: each chunk stays a JavaScript
/// value and is dropped at once (the runtime drops a connection whose body is left unread).
/// A body the Worker declared small (`KeyCall::body_bytes`) is read with one
/// `arrayBuffer()` instead of a reader, a read per chunk and a release; it is
/// dropped as soon as it is read, and a large body still never sits whole in a waiter.
pub(super) async fn drain(req: &Request, declared_bytes: Option<u64>) {
    let whole = declared_bytes.is_some_and(|bytes| bytes <= DRAIN_WHOLE_BYTES);
    drain_request(req, whole, f64::INFINITY).await;
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
