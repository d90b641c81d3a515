//! The runtime's reads of headers and streams, on `web-sys` and `wasm-streams` (both in the
//! build through `worker`): a `Headers` read whole into `core::edge_rules::headers::HeaderLines`
//! and a copy of one with the core's edits; a replay's chunk rows as a stream pulled one row at
//! a time; a stream read up to a limit (past it, passed on as it came, never buffered) or
//! read and thrown away. Owns no decision: the callers say which names, which limits.

use futures_util::stream::{self, StreamExt, TryStreamExt};
use js_sys::Uint8Array;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use wasm_streams::readable::{IntoStream, ReadableStream as Readable};
use web_sys::{Headers, ReadableStream};

use crate::core::edge_rules::headers::{HeaderEdit, HeaderLines};

/// `headers`, read whole, in the order `Headers` iterates them (lowercase names, repeated
/// lines joined with ", ", each Set-Cookie on its own). An error where a header holds a line
/// feed, which HTTP and `Headers` never let through: it would read as another header, so
/// each caller fails closed (nothing is forwarded on it).
pub(super) fn header_lines(headers: &Headers) -> worker::Result<HeaderLines> {
    let mut text = String::new();
    for (name, value) in worker::Headers(headers.clone()).entries() {
        if name.contains('\n') || value.contains('\n') {
            return Err(worker::Error::RustError("a header holds a line feed".into()));
        }
        for field in [name, value] {
            text.push_str(&field);
            text.push('\n');
        }
    }
    Ok(HeaderLines::new(text))
}

/// A copy of `headers` with `edits` applied in order (`core::edge_rules::headers::forward_edits`).
pub(super) fn edited_copy(headers: &Headers, edits: &[HeaderEdit<'_>]) -> worker::Result<Headers> {
    let copy = Headers::new_with_headers(headers)?;
    for (name, value) in edits {
        match value {
            Some(value) => copy.set(name, value)?,
            None => copy.delete(name)?,
        }
    }
    Ok(copy)
}

/// A stream of `count` parts, pulled one at a time as its reader asks (nothing is read
/// ahead of it): part `i` is what the promise `read(i)` resolves to, and a rejected one
/// errors the stream, so a reader never sees it end short.
pub(super) fn pulled_stream(
    count: u32,
    mut read: impl FnMut(u32) -> js_sys::Promise + 'static,
) -> ReadableStream {
    let parts = stream::iter(0..count).then(move |index| JsFuture::from(read(index)));
    Readable::from_stream(parts).into_raw()
}

/// `stream` read up to `limit` bytes: `Some(bytes)` (with a stream of the same chunks to send
/// on when `forward_whole`), or, past the limit, `None` and a stream of what was read
/// followed by the rest, never buffered (cancelling it cancels `stream`). An error where
/// the stream could not be read.
pub(super) async fn read_up_to(
    stream: &ReadableStream,
    limit: u64,
    forward_whole: bool,
) -> Result<(Option<Vec<u8>>, Option<ReadableStream>), JsValue> {
    let mut reader = Readable::from_raw(stream.clone()).try_into_stream().map_err(|(error, _)| error)?;
    let mut parts = Vec::new();
    let mut total = 0;
    while let Some(part) = reader.try_next().await? {
        let part: Uint8Array = part.unchecked_into();
        total += u64::from(part.length());
        parts.push(part);
        if total > limit {
            return Ok((None, Some(parts_then(parts, Some(reader)))));
        }
    }
    // Copied into one buffer chunk by chunk: the whole body is never copied twice.
    let mut whole = vec![0; parts.iter().map(|part| part.length() as usize).sum()];
    let mut at = 0;
    for part in &parts {
        let end = at + part.length() as usize;
        part.copy_to(&mut whole[at..end]);
        at = end;
    }
    Ok((Some(whole), forward_whole.then(|| parts_then(parts, None))))
}

/// A stream of `parts`, then of what `rest` still reads.
fn parts_then(parts: Vec<Uint8Array>, rest: Option<IntoStream<'static>>) -> ReadableStream {
    let parts = stream::iter(parts.into_iter().map(|part| Ok(JsValue::from(part))));
    Readable::from_stream(parts.chain(stream::iter(rest).flatten())).into_raw()
}

/// Reads `stream` and keeps nothing, until it ends or more than `limit` bytes have passed (a
/// failed read ends it too: nothing is left to wait for).
pub(super) async fn drain(stream: &ReadableStream, limit: f64) {
    let mut raw = Readable::from_raw(stream.clone());
    let Ok(reader) = raw.try_get_reader() else { return };
    let mut parts = reader.into_stream();
    let mut total = 0.0;
    while total <= limit {
        let Some(Ok(part)) = parts.next().await else { return };
        total += f64::from(part.unchecked_ref::<Uint8Array>().length());
    }
}
