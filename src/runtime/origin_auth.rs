//! Signs origin requests in the format `ORIGIN_AUTH_FORMAT` names
//! (`core::edge_rules::hop_signature`, which decides what is signed and how).
//!
//! The body's digest is WebCrypto's (`runtime::seal::sha256`), where the body is; the nonce
//! and the time are drawn here; everything else is the core's.

use wasm_bindgen::{JsCast, JsValue};
use web_sys::Headers;

use super::seal::{self, SealError};
use crate::core::edge_rules::hop_signature::{self, applied_value, Hop, NONCE_BYTES};
use crate::core::edge_rules::message_signature::CLAIMED_AT_HEADER;
use crate::core::edge_rules::origin_auth::{Protection, Signer};

/// The headers that sign one request: (lower-case name, value), set on the request as it
/// goes out with [`apply`].
pub type SignatureHeaders = Vec<(&'static str, String)>;

/// The signature of one hop to the origin (`core::edge_rules::hop_signature`): the target
/// is `target` as sent, the key the value of `key_header` in `headers`, and `body` an
/// `ArrayBuffer` or a view (`None` or null: no body), signed at the current time.
pub async fn sign_hop(
    signer: Signer<'_>,
    method: &str,
    target: &str,
    headers: &Headers,
    key_header: &str,
    protection: Protection,
    body: Option<&JsValue>,
) -> Result<SignatureHeaders, SealError> {
    let read = |name: &str| headers.get(name).map_err(|error| SealError(seal::message_of(&error)));
    let (key, claimed_at) = (read(key_header)?, read(CLAIMED_AT_HEADER)?);
    let empty = js_sys::Uint8Array::new_with_length(0);
    let body = body.filter(|body| !body.is_null()).map_or(&*empty, |body| body.unchecked_ref());
    let digest = seal::sha256(body).await?;
    let mut nonce = [0u8; NONCE_BYTES];
    seal::random(&mut nonce)?;
    let hop = Hop {
        method,
        target,
        key_header,
        key: key.as_deref(),
        protection,
        claimed_at: claimed_at.as_deref(),
    };
    let now = (js_sys::Date::now() / 1000.0) as u64;
    Ok(hop_signature::sign(signer, &hop, &digest, now, &nonce))
}

/// Sets `signature` on the outgoing `headers`, as the core says each field is applied.
pub fn apply(headers: &Headers, signature: &SignatureHeaders) -> Result<(), JsValue> {
    for (name, value) in signature {
        headers.set(name, &applied_value(name, headers.get(name)?.as_deref(), value))?;
    }
    Ok(())
}
