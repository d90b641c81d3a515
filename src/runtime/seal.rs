//! Seals and opens stored answers with WebCrypto (`crypto.subtle`): AES-256-GCM under a key
//! derived per caller scope with HKDF-SHA-256 (see `core::formats::seal` for the rules). No cipher
//! is compiled into the Wasm.
//!
//! One [`Sealer`] lives in each key's object, whose scope never changes, so the derived
//! keys are cached there, one per ring key and purpose. What is sealed, under which key and
//! bound to what is `core::formats::seal::SealContext`'s. A byte slice from Wasm memory is
//! handed to WebCrypto as a view, which it copies when it is called, before anything here
//! awaits.

use std::cell::RefCell;

use js_sys::{Array, Promise, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{AesDerivedKeyParams, AesGcmParams, CryptoKey, HkdfParams, SubtleCrypto};

use crate::core::formats::seal::{opening_key, Envelope, KeyRing, RingKey, SealContext, NONCE_LEN};

/// The WebCrypto step `what`, called (`step`) and awaited; what it threw or rejected with
/// becomes a message naming the step and what WebCrypto said.
async fn named(what: &str, step: Result<Promise, JsValue>) -> Result<JsValue, SealError> {
    let failed = |error: JsValue| SealError(format!("{what}: {}", message_of(&error)));
    JsFuture::from(step.map_err(failed)?).await.map_err(failed)
}

/// What WebCrypto threw, as its message alone.
pub fn message_of(thrown: &JsValue) -> String {
    let message = thrown
        .as_string()
        .or_else(|| js_sys::Reflect::get(thrown, &JsValue::from_str("message")).ok()?.as_string());
    message.unwrap_or_else(|| "WebCrypto refused".to_owned())
}

fn crypto() -> Result<web_sys::Crypto, SealError> {
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    global.crypto().map_err(|error| SealError(format!("no WebCrypto: {}", message_of(&error))))
}

fn subtle() -> Result<SubtleCrypto, SealError> {
    Ok(crypto()?.subtle())
}

/// Fills `bytes` with random bytes (a nonce).
pub fn random(bytes: &mut [u8]) -> Result<(), SealError> {
    let drawn = crypto()?.get_random_values_with_u8_array(bytes);
    drawn.map(drop).map_err(|error| SealError(format!("drawing a nonce: {}", message_of(&error))))
}

/// The AES-256-GCM parameters of one operation: `nonce` and associated data `aad` (copied
/// into JavaScript: the parameters keep them).
fn gcm(nonce: &[u8], aad: &[u8]) -> AesGcmParams {
    let params = AesGcmParams::new("AES-GCM", &Uint8Array::from(nonce));
    params.set_additional_data(&Uint8Array::from(aad));
    params
}

/// The AES-256-GCM key derived with HKDF-SHA-256 from `secret` with `salt` and `info`.
async fn derive(secret: &[u8], salt: &[u8], info: &[u8]) -> Result<CryptoKey, SealError> {
    let subtle = subtle()?;
    let usages = Array::of1(&JsValue::from_str("deriveKey"));
    let import = subtle.import_key_with_str("raw", &Uint8Array::from(secret), "HKDF", false, &usages);
    let base: CryptoKey = named("importing a storage key", import).await?.unchecked_into();
    let params =
        HkdfParams::new_with_str("HKDF", "SHA-256", &Uint8Array::from(info), &Uint8Array::from(salt));
    let usages = Array::of2(&JsValue::from_str("encrypt"), &JsValue::from_str("decrypt"));
    let derive = subtle.derive_key_with_object_and_object(
        &params,
        &base,
        &AesDerivedKeyParams::new("AES-GCM", 256),
        false,
        &usages,
    );
    Ok(named("deriving a storage key", derive).await?.unchecked_into())
}

/// Why an answer could not be sealed or opened.
#[derive(Debug)]
pub struct SealError(pub String);

impl std::fmt::Display for SealError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The derived keys of one object (one scope), by ring key id and HKDF info.
#[derive(Default)]
pub struct Sealer {
    /// This object's derived keys: (ring key id, HKDF info, key). A handful at most (one per
    /// ring key in use and purpose), so a list.
    derived: RefCell<Vec<(String, &'static [u8], CryptoKey)>>,
}

impl Sealer {
    /// Seals `plaintext` as `context` says under the ring's newest key; returns the encoded
    /// envelope.
    pub async fn seal(
        &self,
        ring: &KeyRing,
        context: &SealContext,
        plaintext: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let newest = ring.newest();
        let key = self.derived_key(newest, context).await?;
        let mut nonce = [0u8; NONCE_LEN];
        random(&mut nonce)?;
        let sealing = subtle()?.encrypt_with_object_and_u8_array(&gcm(&nonce, &context.aad), &key, plaintext);
        let ciphertext = Uint8Array::new(&named("sealing", sealing).await?).to_vec();
        Ok(Envelope { key_id: newest.id.clone(), nonce, ciphertext }.encode())
    }

    /// Opens an envelope sealed by [`Sealer::seal`] with the same `context`. Any change to
    /// it, another object, an unknown key id or a missing ring is an error: the caller
    /// answers 503.
    pub async fn open(
        &self,
        ring: Option<&KeyRing>,
        context: &SealContext,
        sealed: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let envelope =
            Envelope::decode(sealed).ok_or_else(|| SealError("the sealed value is malformed".to_owned()))?;
        let key = self.key(ring, context, &envelope.key_id).await?;
        let opening = subtle()?.decrypt_with_object_and_u8_array(
            &gcm(&envelope.nonce, &context.aad),
            &key,
            &envelope.ciphertext,
        );
        Ok(Uint8Array::new(&named(OPENING, opening).await?).to_vec())
    }

    /// The key of `context` derived from the ring key named `key_id`.
    pub async fn key(
        &self,
        ring: Option<&KeyRing>,
        context: &SealContext,
        key_id: &str,
    ) -> Result<CryptoKey, SealError> {
        self.derived_key(opening_key(ring, key_id).map_err(SealError)?, context).await
    }

    /// The key of `ring_key` derived as `context` says, made once per object.
    async fn derived_key(&self, ring_key: &RingKey, context: &SealContext) -> Result<CryptoKey, SealError> {
        let cached =
            |(id, info, _): &&(String, &[u8], CryptoKey)| *id == ring_key.id && *info == context.info;
        if let Some((_, _, key)) = self.derived.borrow().iter().find(cached) {
            return Ok(key.clone());
        }
        let key = derive(&ring_key.secret, &context.salt, context.info).await?;
        self.derived.borrow_mut().push((ring_key.id.clone(), context.info, key.clone()));
        Ok(key)
    }
}

/// Opens the sealed bytes `ciphertext` (AES-GCM output) with `key`, bound to `aad`. The bytes
/// stay in JavaScript: nothing of them is copied into Wasm memory.
pub async fn open_view(
    key: &CryptoKey,
    nonce: &[u8],
    aad: &[u8],
    ciphertext: &Uint8Array,
) -> Result<Uint8Array, SealError> {
    let opening = subtle()?.decrypt_with_object_and_buffer_source(&gcm(nonce, aad), key, ciphertext);
    Ok(Uint8Array::new(&named(OPENING, opening).await?))
}

/// The opening step's name in its failure: what a failure to open means.
const OPENING: &str = "opening (a changed byte or the wrong key)";

/// SHA-256 of `bytes` (an `ArrayBuffer` or a view), by WebCrypto (the bytes stay in
/// JavaScript).
pub async fn sha256(bytes: &js_sys::Object) -> Result<[u8; 32], SealError> {
    let digest = subtle()?.digest_with_str_and_buffer_source("SHA-256", bytes);
    let digest = Uint8Array::new(&named("digesting", digest).await?).to_vec();
    digest.try_into().map_err(|_| SealError("digesting: not 32 bytes".to_owned()))
}
