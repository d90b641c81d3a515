//! Seals and opens stored answers with WebCrypto (`crypto.subtle`): AES-256-GCM under a key
//! derived per caller scope with HKDF-SHA-256 (see `core::formats::seal` for the rules). No cipher
//! is compiled into the Wasm.
//!
//! One [`Sealer`] lives in each key's object, whose scope never changes, so the derived
//! keys are cached there, one per ring key and purpose. Stored answers and stored requests
//! (`core::key_rules::machine::async_job`) share the same sealing: only the HKDF salt and info and the
//! associated data differ.
//!
//! The WebCrypto steps of one operation (derive the key once, draw a nonce, seal; or open)
//! are one call into `webcrypto.mjs`, so each operation here awaits one promise; what is
//! sealed, under which key and bound to what stays decided here and in `core::formats::seal`.

use std::cell::OnceCell;

use js_sys::{Map, Promise, Uint8Array};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::CryptoKey;

use super::platform::message_of;

use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::job::StoredRequest;
use crate::core::formats::record::AttemptId;
use crate::core::formats::record::{StoredResponse, SEALED_RECORD_VERSION};
use crate::core::formats::seal::{
    answer_associated_data, bound_answer_associated_data, bound_request_associated_data,
    request_associated_data, Envelope, KeyRing, RingKey, ANSWER_KEY_INFO, NONCE_LEN, REQUEST_KEY_INFO,
};

#[wasm_bindgen(module = "/src/runtime/webcrypto.mjs")]
extern "C" {
    #[wasm_bindgen(js_name = derivedKey)]
    fn derived_key_js(cache: &Map, key_id: &str, secret: &[u8], salt: &[u8], info: &[u8]) -> Promise;
    #[wasm_bindgen(js_name = seal)]
    #[allow(clippy::too_many_arguments)]
    fn seal_js(
        cache: &Map,
        key_id: &str,
        secret: &[u8],
        salt: &[u8],
        info: &[u8],
        nonce_length: u32,
        aad: &[u8],
        plaintext: &[u8],
    ) -> Promise;
    #[wasm_bindgen(js_name = open)]
    #[allow(clippy::too_many_arguments)]
    fn open_js(
        cache: &Map,
        key_id: &str,
        secret: &[u8],
        salt: &[u8],
        info: &[u8],
        nonce: &[u8],
        aad: &[u8],
        ciphertext: &[u8],
    ) -> Promise;
    #[wasm_bindgen(js_name = openWith)]
    fn open_with_js(key: &CryptoKey, nonce: &[u8], aad: &[u8], ciphertext: &Uint8Array) -> Promise;
    #[wasm_bindgen(js_name = sha256)]
    fn sha256_js(bytes: &Uint8Array) -> Promise;
}

/// What `promise` resolves to, or its rejection's message (`webcrypto.mjs` names the step).
async fn settled(promise: Promise) -> Result<JsValue, SealError> {
    JsFuture::from(promise)
        .await
        .map_err(|error| SealError(message_of(&error).unwrap_or_else(|| "WebCrypto refused".to_owned())))
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
    /// `webcrypto.mjs`'s cache of this object's derived keys, made on first use.
    derived: OnceCell<Map>,
}

impl Sealer {
    /// Seals `answer` for the object `object_id` of scope `scope` under the ring's newest
    /// key; returns the encoded envelope.
    ///
    /// The seal is bound to `binding`, the record's attempt and fingerprint (record tag 5).
    pub async fn seal(
        &self,
        ring: &KeyRing,
        scope: &[u8],
        object_id: &str,
        binding: (AttemptId, &Digest256),
        answer: &StoredResponse,
    ) -> Result<Vec<u8>, SealError> {
        let (attempt, fingerprint) = binding;
        let aad = bound_answer_associated_data(object_id, SEALED_RECORD_VERSION, attempt.0, &fingerprint.0);
        self.seal_bytes(ring, scope, ANSWER_KEY_INFO, &aad, &answer.encode()).await
    }

    /// Opens an envelope sealed by [`Sealer::seal`]. Any change to it, another object, an
    /// unknown key id or a missing ring is an error: the caller answers 503.
    ///
    /// `binding`: the record's attempt and fingerprint for an answer sealed bound to them
    /// (tag 5), `None` for one sealed by an earlier release (tag 2).
    pub async fn open(
        &self,
        ring: Option<&KeyRing>,
        scope: &[u8],
        object_id: &str,
        binding: Option<(AttemptId, &Digest256)>,
        sealed: &[u8],
    ) -> Result<StoredResponse, SealError> {
        let aad = match binding {
            Some((attempt, fingerprint)) => {
                bound_answer_associated_data(object_id, SEALED_RECORD_VERSION, attempt.0, &fingerprint.0)
            }
            None => answer_associated_data(object_id, SEALED_RECORD_VERSION),
        };
        let plaintext = self.open_bytes(ring, scope, ANSWER_KEY_INFO, &aad, sealed).await?;
        StoredResponse::decode(&plaintext)
            .map_err(|error| SealError(format!("the opened answer is unreadable: {error}")))
    }

    /// Seals `plaintext` bound to `aad` under the ring's newest key, with the answer key of
    /// `scope` (for the parts of a chunked answer, `runtime::chunks`); returns the envelope.
    pub async fn seal_with(
        &self,
        ring: &KeyRing,
        scope: &[u8],
        aad: &[u8],
        plaintext: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        self.seal_bytes(ring, scope, ANSWER_KEY_INFO, aad, plaintext).await
    }

    /// Opens an envelope sealed by [`Sealer::seal_with`] with the same `aad`.
    pub async fn open_with(
        &self,
        ring: Option<&KeyRing>,
        scope: &[u8],
        aad: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        self.open_bytes(ring, scope, ANSWER_KEY_INFO, aad, sealed).await
    }

    /// The answer key of `scope` derived from the ring key named `key_id`.
    pub async fn key_by_id(
        &self,
        ring: Option<&KeyRing>,
        scope: &[u8],
        key_id: &str,
    ) -> Result<CryptoKey, SealError> {
        let ring_key = ring_key(needed(ring)?, key_id)?;
        let promise = derived_key_js(self.cache(), &ring_key.id, &ring_key.secret, scope, ANSWER_KEY_INFO);
        Ok(settled(promise).await?.unchecked_into())
    }

    /// Seals a job's request for the object `object_id` (the key derived with the object id
    /// as salt: the alarm knows it without a request).
    /// Bound to `binding`: the job's claim time and fingerprint (job version 2).
    pub async fn seal_request(
        &self,
        ring: &KeyRing,
        object_id: &str,
        binding: (u64, &Digest256),
        request: &StoredRequest,
    ) -> Result<Vec<u8>, SealError> {
        let (claimed_at, fingerprint) = binding;
        let aad = bound_request_associated_data(object_id, SEALED_RECORD_VERSION, claimed_at, &fingerprint.0);
        self.seal_bytes(ring, object_id.as_bytes(), REQUEST_KEY_INFO, &aad, &request.encode()).await
    }

    /// Opens a request sealed by [`Sealer::seal_request`].
    /// `binding`: the job's claim time and fingerprint for a request sealed bound to them,
    /// `None` for one sealed by an earlier release (job version 1).
    pub async fn open_request(
        &self,
        ring: Option<&KeyRing>,
        object_id: &str,
        binding: Option<(u64, &Digest256)>,
        sealed: &[u8],
    ) -> Result<StoredRequest, SealError> {
        let aad = match binding {
            Some((claimed_at, fingerprint)) => {
                bound_request_associated_data(object_id, SEALED_RECORD_VERSION, claimed_at, &fingerprint.0)
            }
            None => request_associated_data(object_id, SEALED_RECORD_VERSION),
        };
        let plaintext = self.open_bytes(ring, object_id.as_bytes(), REQUEST_KEY_INFO, &aad, sealed).await?;
        StoredRequest::decode(&plaintext)
            .ok_or_else(|| SealError("the opened request is unreadable".to_owned()))
    }

    /// Seals `plaintext` under the ring's newest key, derived with `salt` and `info`;
    /// returns the encoded envelope.
    async fn seal_bytes(
        &self,
        ring: &KeyRing,
        salt: &[u8],
        info: &'static [u8],
        aad: &[u8],
        plaintext: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let RingKey { id, secret } = ring.newest();
        let promise = seal_js(self.cache(), id, secret, salt, info, NONCE_LEN as u32, aad, plaintext);
        let sealed = Uint8Array::new(&settled(promise).await?);
        if (sealed.length() as usize) < NONCE_LEN {
            return Err(SealError("sealing: no nonce came back".to_owned()));
        }
        // The nonce and the ciphertext copied into Wasm once each, straight from the result.
        let mut nonce = [0u8; NONCE_LEN];
        sealed.subarray(0, NONCE_LEN as u32).copy_to(&mut nonce);
        let ciphertext = sealed.subarray(NONCE_LEN as u32, sealed.length()).to_vec();
        Ok(Envelope { key_id: id.clone(), nonce, ciphertext }.encode())
    }

    async fn open_bytes(
        &self,
        ring: Option<&KeyRing>,
        salt: &[u8],
        info: &'static [u8],
        aad: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let ring = needed(ring)?;
        let envelope =
            Envelope::decode(sealed).ok_or_else(|| SealError("the sealed value is malformed".to_owned()))?;
        let ring_key = ring_key(ring, &envelope.key_id)?;
        let promise = open_js(
            self.cache(),
            &ring_key.id,
            &ring_key.secret,
            salt,
            info,
            &envelope.nonce,
            aad,
            &envelope.ciphertext,
        );
        Ok(Uint8Array::new(&settled(promise).await?).to_vec())
    }

    fn cache(&self) -> &Map {
        self.derived.get_or_init(Map::new)
    }
}

/// The ring, which a sealed value needs to be opened.
fn needed(ring: Option<&KeyRing>) -> Result<&KeyRing, SealError> {
    ring.ok_or_else(|| SealError("the record is sealed but STORAGE_ENCRYPTION_KEYS is not set".to_owned()))
}

/// The ring key named `key_id`.
fn ring_key<'r>(ring: &'r KeyRing, key_id: &str) -> Result<&'r RingKey, SealError> {
    ring.by_id(key_id).ok_or_else(|| {
        // Quoted as JSON: the id comes from stored bytes, and the log shows it as text.
        let quoted = serde_json::Value::from(key_id);
        SealError(format!("no key with id {quoted} in STORAGE_ENCRYPTION_KEYS"))
    })
}

/// Opens the sealed bytes `ciphertext` (AES-GCM output) with `key`, bound to `aad`. The bytes
/// stay in JavaScript: nothing of them is copied into Wasm memory.
pub async fn open_view(
    key: &CryptoKey,
    nonce: &[u8],
    aad: &[u8],
    ciphertext: &Uint8Array,
) -> Result<Uint8Array, SealError> {
    Ok(settled(open_with_js(key, nonce, aad, ciphertext)).await?.unchecked_into())
}

/// SHA-256 of `bytes`, by WebCrypto (the bytes stay in JavaScript).
pub async fn sha256(bytes: &Uint8Array) -> Result<[u8; 32], SealError> {
    let digest: Uint8Array = settled(sha256_js(bytes)).await?.unchecked_into();
    let mut out = [0u8; 32];
    if digest.length() != 32 {
        return Err(SealError("digesting: not 32 bytes".to_owned()));
    }
    digest.copy_to(&mut out);
    Ok(out)
}
