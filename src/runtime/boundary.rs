//! Bindings to `boundary.mjs`, the runtime's JavaScript helpers: a request's headers read in
//! one call (`core::edge_rules::headers::HeaderLines`) and a copy of headers without some names, each
//! one crossing of the JS↔Wasm boundary where `web_sys` would make one per header (a
//! replay crossed it about 160 times); the runtime's stream work done in JavaScript (a
//! replay's chunk rows pulled one at a time, a body or an origin's answer read up to a limit
//! and passed on as it came, a body read and thrown away): with it, nothing hands a Rust
//! `Stream` to JavaScript, and nothing reads a JavaScript stream through one; and the
//! Worker's call to a key's object with its answer's mark read and taken off, in one call.

use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Headers, ReadableStream, Request};

use crate::core::edge_rules::headers::HeaderLines;

#[wasm_bindgen(module = "/src/runtime/boundary.mjs")]
extern "C" {
    #[wasm_bindgen(js_name = headerLines, catch)]
    fn header_lines_text(headers: &Headers) -> Result<String, JsValue>;
    #[wasm_bindgen(js_name = headersWithout, catch)]
    fn headers_without_text(headers: &Headers, refused: &str) -> Result<Headers, JsValue>;
    #[wasm_bindgen(js_name = pulledStream)]
    fn pulled_stream_js(count: u32, read: &JsValue) -> ReadableStream;
    #[wasm_bindgen(js_name = readUpTo)]
    fn read_up_to_js(stream: &ReadableStream, limit: f64, forward_whole: bool) -> js_sys::Promise;
    #[wasm_bindgen(js_name = drain)]
    fn drain_js(stream: &ReadableStream, limit: f64) -> js_sys::Promise;
    /// A covered request's body read up to `limit` (see `boundary.mjs`); never rejects.
    #[wasm_bindgen(js_name = readWithin)]
    pub(super) fn read_within(
        request: &Request,
        declared: bool,
        limit: f64,
        drain_limit: f64,
    ) -> js_sys::Promise;
    /// A request's body read to its end and dropped (see `boundary.mjs`); never rejects.
    #[wasm_bindgen(js_name = drainRequest)]
    pub(super) fn drain_request_js(request: &Request, whole: bool, limit: f64) -> js_sys::Promise;
    /// `stub.fetch(request)` and what came of it (see `boundary.mjs`); never rejects.
    #[wasm_bindgen(js_name = callObject)]
    pub(super) fn call_object_js(stub: &JsValue, request: &Request, mark: &str) -> js_sys::Promise;
}

/// `headers`, read whole. An error only where a header holds a line feed, which HTTP and
/// `Headers` never let through: each caller then fails closed (nothing is forwarded on it).
pub(super) fn header_lines(headers: &Headers) -> worker::Result<HeaderLines> {
    Ok(HeaderLines::new(header_lines_text(headers)?))
}

/// A copy of `headers` (read whole as `lines`) without the names `keep` refuses.
pub(super) fn filtered_copy(
    headers: &Headers,
    lines: &HeaderLines,
    keep: impl Fn(&str) -> bool,
) -> worker::Result<Headers> {
    Ok(headers_without_text(headers, &lines.refused_names(keep))?)
}

/// A stream of `count` parts, pulled one at a time as its reader asks: part `i` is what the
/// promise `read(i)` resolves to, and a rejected one errors the stream.
pub(super) fn pulled_stream(
    count: u32,
    read: impl FnMut(u32) -> js_sys::Promise + 'static,
) -> ReadableStream {
    let read = wasm_bindgen::closure::Closure::<dyn FnMut(u32) -> js_sys::Promise>::new(read);
    // The stream holds the function; wasm-bindgen frees it when the stream is collected.
    pulled_stream_js(count, &read.into_js_value())
}

/// `stream` read up to `limit` bytes: `Some(bytes)` (with a stream of the same chunks to send
/// on when `forward_whole`), or, past the limit, `None` and a stream of what was read
/// followed by the rest, never buffered. An error where the stream could not be read.
pub(super) async fn read_up_to(
    stream: &ReadableStream,
    limit: u64,
    forward_whole: bool,
) -> std::result::Result<(Option<Vec<u8>>, Option<ReadableStream>), JsValue> {
    // The limits are settings of at most a few hundred MiB, exact as an f64.
    let read: js_sys::Array =
        wasm_bindgen_futures::JsFuture::from(read_up_to_js(stream, limit as f64, forward_whole))
            .await?
            .unchecked_into();
    let parts = read.get(0);
    let whole = (!parts.is_null()).then(|| joined(&parts.unchecked_into()));
    Ok((whole, read.get(1).dyn_into::<ReadableStream>().ok()))
}

/// `parts` (an array of `Uint8Array`s) copied into one buffer, chunk by chunk: the whole
/// body is never copied twice.
pub(super) fn joined(parts: &js_sys::Array) -> Vec<u8> {
    let parts: Vec<js_sys::Uint8Array> = parts.iter().map(JsCast::unchecked_into).collect();
    let mut whole = vec![0; parts.iter().map(|part| part.length() as usize).sum()];
    let mut at = 0;
    for part in parts {
        let end = at + part.length() as usize;
        part.copy_to(&mut whole[at..end]);
        at = end;
    }
    whole
}

/// Reads `stream` and keeps nothing, until it ends or more than `limit` bytes have passed (a
/// failed read ends it too).
pub(super) async fn drain(stream: &ReadableStream, limit: f64) {
    // It never rejects.
    let _ = wasm_bindgen_futures::JsFuture::from(drain_js(stream, limit)).await;
}

/// `stub.fetch(request)` and what came of it, as `boundary.mjs`'s `callObject` reports it
/// (`[kind, …]`: thrown before sending, rejected with its flags, not the object's answer,
/// or the answer without its `mark` header and that header's value). It never rejects.
pub(super) async fn call_object(stub: &JsValue, request: &Request, mark: &str) -> js_sys::Array {
    wasm_bindgen_futures::JsFuture::from(call_object_js(stub, request, mark))
        .await
        .map_or_else(|_| js_sys::Array::new(), JsCast::unchecked_into)
}

/// A request's body read to its end and dropped (in one `arrayBuffer()` when `whole`),
/// chunk by chunk up to `limit` bytes otherwise. It never fails.
pub(super) async fn drain_request(request: &Request, whole: bool, limit: f64) {
    // It never rejects.
    let _ = wasm_bindgen_futures::JsFuture::from(drain_request_js(request, whole, limit)).await;
}
