//! Bindings to `boundary.mjs`, the runtime's JavaScript helpers: a request's headers read in
//! one call (`core::headers::HeaderLines`), a copy of headers without some names, and an
//! answer rewrapped without one header, each one crossing of the JS↔Wasm boundary where
//! `web_sys` would make one per header (issue 23: a replay crossed it about 160 times).

use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::web_sys::{Headers, Response};

use crate::core::headers::HeaderLines;

#[wasm_bindgen(module = "/src/runtime/boundary.mjs")]
extern "C" {
    #[wasm_bindgen(js_name = headerLines, catch)]
    fn header_lines_text(headers: &Headers) -> Result<String, JsValue>;
    #[wasm_bindgen(js_name = headersWithout, catch)]
    fn headers_without_text(headers: &Headers, refused: &str) -> Result<Headers, JsValue>;
    #[wasm_bindgen(js_name = responseWithout, catch)]
    fn response_without_js(response: &Response, name: &str) -> Result<Response, JsValue>;
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

/// `new Response(response.body, { status, headers })` without the header `name`.
pub(super) fn response_without(response: &Response, name: &str) -> worker::Result<Response> {
    Ok(response_without_js(response, name)?)
}
