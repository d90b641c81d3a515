//! Signs origin requests in the format `ORIGIN_AUTH_FORMAT` names: RFC 9421
//! (`core::edge_rules::message_signature`, whose signature base and header values the core computes from
//! the body's digest) or the `Idempotency-Edge-Signature` header of `core::edge_rules::origin_auth`.
//!
//! The body's digest is WebCrypto's (`webcrypto.mjs`), where the body is; the version 2
//! format's digest and HMAC are one WebCrypto call (`originMac`, which imports the key once
//! per isolate). The nonce and the time are drawn here; everything else is the core's.

use js_sys::{Promise, Uint8Array};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::Headers;

use crate::core::edge_rules::message_signature::{self, Covered, CLAIMED_AT_HEADER};
use crate::core::edge_rules::origin_auth::{
    canonical_head, header_value, Protection, SignatureFormat, Signed, Signer, NONCE_BYTES, SIGNATURE_HEADER,
};
use crate::core::primitives::hex::encode as hex;
use crate::core::primitives::url::path_and_query;

#[wasm_bindgen(module = "/src/runtime/webcrypto.mjs")]
extern "C" {
    #[wasm_bindgen(js_name = originMac)]
    fn origin_mac(secret: &str, canonical_head: &str, body: &JsValue) -> Promise;
    #[wasm_bindgen(js_name = bodyDigest)]
    fn body_digest(body: &JsValue) -> Promise;
}

/// The headers that sign one request: (lower-case name, value), set on the request as it
/// goes out with [`apply`].
pub type SignatureHeaders = Vec<(&'static str, String)>;

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

/// The signature of one hop to the origin, as every forward and lookup signs it (the
/// object's, a pass-through, a fail-open or an observed forward): the target is `target` as
/// sent, and the key is the value of `key_header` in `headers` (the route's key header,
/// `Idempotency-Key` unless `key_header` names another), whatever else the request carries.
pub async fn sign_hop(
    signer: Signer<'_>,
    method: &str,
    target: &str,
    headers: &Headers,
    key_header: &str,
    protection: Protection,
    body: Option<&JsValue>,
) -> Result<SignatureHeaders, JsValue> {
    let key = headers.get(key_header)?;
    match signer.format {
        SignatureFormat::V2 => {
            let value =
                signature(signer.secret, method, &path_and_query(target), key.as_deref(), protection, body)
                    .await?;
            Ok(vec![(SIGNATURE_HEADER, value)])
        }
        SignatureFormat::Rfc9421 => {
            let digest = JsFuture::from(body_digest(body.unwrap_or(&JsValue::NULL))).await?;
            let mut nonce = [0u8; message_signature::NONCE_BYTES];
            crypto()?.get_random_values_with_u8_array(&mut nonce)?;
            let nonce = hex(&nonce);
            let claimed_at = headers.get(CLAIMED_AT_HEADER)?;
            let covered = Covered {
                method,
                target_uri: target,
                key: key.as_deref().map(|value| (key_header, value)),
                protection,
                claimed_at: claimed_at.as_deref(),
                created: (js_sys::Date::now() / 1000.0) as u64,
                nonce: &nonce,
            };
            let signed = message_signature::sign(
                signer.secret.as_bytes(),
                &covered,
                &Uint8Array::new(&digest).to_vec(),
            );
            Ok(signed.pairs().iter().map(|(name, value)| (*name, (*value).to_owned())).collect())
        }
    }
}

/// Sets `signature` on the outgoing `headers`. `Signature-Input` and `Signature` keep a
/// member the client's own request carries (`core::edge_rules::message_signature::merged_field`); the
/// others are the edge's alone.
pub fn apply(headers: &Headers, signature: &SignatureHeaders) -> Result<(), JsValue> {
    for (name, value) in signature {
        let value = match *name {
            message_signature::SIGNATURE_INPUT_HEADER | message_signature::SIGNATURE_HEADER => {
                message_signature::merged_field(headers.get(name)?.as_deref(), value)
            }
            _ => value.clone(),
        };
        headers.set(name, &value)?;
    }
    Ok(())
}

fn crypto() -> Result<web_sys::Crypto, JsValue> {
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    global.crypto()
}
