//! Signs origin requests with WebCrypto: the `Idempotency-Edge-Signature` header of
//! `core::origin_auth`, whose canonical string and format this file only fills in.
//!
//! The HMAC key is imported once per isolate (the secret cannot change while it lives).

use std::cell::RefCell;

use js_sys::{Object, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{CryptoKey, Headers, SubtleCrypto};

use crate::core::origin_auth::{canonical_string, header_value, Protection, Signed, NONCE_BYTES};
use crate::core::url::path_and_query;

thread_local! {
    static HMAC_KEY: RefCell<Option<CryptoKey>> = const { RefCell::new(None) };
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
    let subtle = subtle()?;
    let empty: JsValue = Uint8Array::new_with_length(0).into();
    let body = body.unwrap_or(&empty);
    let body: Object = body.clone().unchecked_into();
    let digest = JsFuture::from(subtle.digest_with_str_and_buffer_source("SHA-256", &body)?).await?;
    let digest_hex: String = Uint8Array::new(&digest).to_vec().iter().map(|b| format!("{b:02x}")).collect();
    let timestamp = (js_sys::Date::now() / 1000.0) as u64;
    let mut nonce = [0u8; NONCE_BYTES];
    crypto()?.get_random_values_with_u8_array(&mut nonce)?;
    let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    let idempotency_key = idempotency_key.unwrap_or("");
    let signed = Signed { method, path_and_query, idempotency_key, protection, timestamp, nonce: &nonce };
    let canonical = canonical_string(&signed, &digest_hex);
    let key = hmac_key(&subtle, secret).await?;
    let mac = JsFuture::from(subtle.sign_with_str_and_u8_array("HMAC", &key, canonical.as_bytes())?).await?;
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

async fn hmac_key(subtle: &SubtleCrypto, secret: &str) -> Result<CryptoKey, JsValue> {
    if let Some(key) = HMAC_KEY.with(|cell| cell.borrow().clone()) {
        return Ok(key);
    }
    let algorithm = Object::new();
    Reflect::set(&algorithm, &"name".into(), &"HMAC".into())?;
    Reflect::set(&algorithm, &"hash".into(), &"SHA-256".into())?;
    let usages = js_sys::Array::of1(&JsValue::from_str("sign"));
    let pending = subtle.import_key_with_object(
        "raw",
        &Uint8Array::from(secret.as_bytes()),
        &algorithm,
        false,
        &usages,
    )?;
    let key: CryptoKey = JsFuture::from(pending).await?.unchecked_into();
    HMAC_KEY.with(|cell| *cell.borrow_mut() = Some(key.clone()));
    Ok(key)
}

fn crypto() -> Result<web_sys::Crypto, JsValue> {
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    global.crypto()
}

fn subtle() -> Result<SubtleCrypto, JsValue> {
    Ok(crypto()?.subtle())
}
