//! Signs origin requests: the `Idempotency-Edge-Signature` header of `core::origin_auth`,
//! whose canonical string and format this file only fills in.
//!
//! The digest of the body and the HMAC are one WebCrypto call (`webcrypto.mjs`'s
//! `originMac`, which imports the key once per isolate: the secret cannot change while it
//! lives); the nonce, the time and everything signed besides the body are decided here.

use js_sys::{Promise, Uint8Array};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::Headers;

use crate::core::hex::encode as hex;
use crate::core::origin_auth::{canonical_head, header_value, Protection, Signed, NONCE_BYTES};
use crate::core::url::path_and_query;

#[wasm_bindgen(module = "/src/runtime/webcrypto.mjs")]
extern "C" {
    #[wasm_bindgen(js_name = originMac)]
    fn origin_mac(secret: &str, canonical_head: &str, body: &JsValue) -> Promise;
}

/// The header value for a request to `path_and_query` (as sent to the origin) with the
/// `Idempotency-Key` it carries (if any), whether the edge protected it, and `body` (an
/// `ArrayBuffer` or `Uint8Array`, or `None` for no body), signed at the current time.
pub async fn signature(
    secret: &str,
    method: &str,
    path_and_query: &str,
    idempotency_key: Option<&str>,
    protection: Protection,
    body: Option<&JsValue>,
) -> Result<String, JsValue> {
    let timestamp = (js_sys::Date::now() / 1000.0) as u64;
    let mut nonce = [0u8; NONCE_BYTES];
    crypto()?.get_random_values_with_u8_array(&mut nonce)?;
    let nonce = hex(&nonce);
    let idempotency_key = idempotency_key.unwrap_or("");
    let signed = Signed { method, path_and_query, idempotency_key, protection, timestamp, nonce: &nonce };
    let mac =
        JsFuture::from(origin_mac(secret, &canonical_head(&signed), body.unwrap_or(&JsValue::NULL))).await?;
    Ok(header_value(&signed, &Uint8Array::new(&mac).to_vec()))
}

/// The signature of one hop to the origin, as every forward signs it (the object's, a
/// pass-through, a fail-open or an observed forward): the path is `target`'s as sent, and
/// the key line is the value of `key_header` in `headers` (the route's key header,
/// `Idempotency-Key` unless `key_header` names another), whatever else the request carries.
pub async fn sign_hop(
    secret: &str,
    method: &str,
    target: &str,
    headers: &Headers,
    key_header: &str,
    protection: Protection,
    body: Option<&JsValue>,
) -> Result<String, JsValue> {
    let key = headers.get(key_header)?;
    signature(secret, method, &path_and_query(target), key.as_deref(), protection, body).await
}

fn crypto() -> Result<web_sys::Crypto, JsValue> {
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    global.crypto()
}
