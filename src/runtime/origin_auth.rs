//! Signs origin requests in the format `ORIGIN_AUTH_FORMAT` names: RFC 9421
//! (`core::edge_rules::message_signature`, whose signature base and header values the core computes from
//! the body's digest) or the `Idempotency-Edge-Signature` header of `core::edge_rules::origin_auth`.
//!
//! The body's digest is WebCrypto's (`web-sys`'s `SubtleCrypto`), where the body is; the
//! HMAC over the signed parts is the core's (`core::origin_auth::sign_digested`,
//! `core::message_signature::sign`). The nonce and the time are drawn here; everything else
//! is the core's.

use js_sys::Uint8Array;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::Headers;

use crate::core::edge_rules::message_signature::{self, Covered, CLAIMED_AT_HEADER};
use crate::core::edge_rules::origin_auth::{
    sign_digested, Protection, SignatureFormat, Signed, Signer, NONCE_BYTES, SIGNATURE_HEADER,
};
use crate::core::primitives::hex::encode as hex;
use crate::core::primitives::url::path_and_query;

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
    let digest = body_digest(body).await?;
    Ok(sign_digested(secret.as_bytes(), &signed, &digest))
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
            let digest = body_digest(body).await?;
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
            let signed = message_signature::sign(signer.secret.as_bytes(), &covered, &digest);
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

/// SHA-256 of a request body (JavaScript's own bytes: an `ArrayBuffer` or a view), or of no
/// bytes for none.
async fn body_digest(body: Option<&JsValue>) -> Result<Vec<u8>, JsValue> {
    let empty;
    let body: &js_sys::Object = match body {
        Some(body) if !body.is_null() => body.unchecked_ref(),
        _ => {
            empty = Uint8Array::new_with_length(0);
            &empty
        }
    };
    let digest = crypto()?.subtle().digest_with_str_and_buffer_source("SHA-256", body)?;
    Ok(Uint8Array::new(&JsFuture::from(digest).await?).to_vec())
}

fn crypto() -> Result<web_sys::Crypto, JsValue> {
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    global.crypto()
}
