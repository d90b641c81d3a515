//! Seals and opens stored answers with WebCrypto (`crypto.subtle`): AES-256-GCM under a key
//! derived per caller scope with HKDF-SHA-256 (see `core::seal` for the rules). No cipher
//! is compiled into the Wasm.
//!
//! One [`Sealer`] lives in each key's object, whose scope never changes, so the derived
//! keys are cached there, one per ring key and purpose. Stored answers and stored requests
//! (`core::async_job`) share the same sealing: only the HKDF salt and info and the
//! associated data differ.

use std::cell::RefCell;

use js_sys::{Object, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{CryptoKey, SubtleCrypto};

use super::platform::message_of;

use crate::core::async_job::StoredRequest;
use crate::core::fingerprint::Digest256;
use crate::core::record::AttemptId;
use crate::core::record::{StoredResponse, SEALED_RECORD_VERSION};
use crate::core::seal::{
    answer_associated_data, bound_answer_associated_data, bound_request_associated_data,
    request_associated_data, Envelope, KeyRing, RingKey, ANSWER_KEY_INFO, NONCE_LEN, REQUEST_KEY_INFO,
};

/// Why an answer could not be sealed or opened.
#[derive(Debug)]
pub struct SealError(pub String);

impl std::fmt::Display for SealError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn fail(what: &str) -> impl Fn(JsValue) -> SealError + '_ {
    move |error| {
        SealError(format!("{what}: {}", message_of(&error).unwrap_or_else(|| "WebCrypto refused".to_owned())))
    }
}

/// The derived keys of one object (one scope), by ring key id and HKDF info.
#[derive(Default)]
pub struct Sealer {
    derived: RefCell<Vec<(String, &'static [u8], CryptoKey)>>,
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
            .map_err(|error| SealError(format!("the opened answer is unreadable: {error:?}")))
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
        let ring = ring.ok_or_else(|| {
            SealError("the record is sealed but STORAGE_ENCRYPTION_KEYS is not set".to_owned())
        })?;
        let ring_key = ring
            .by_id(key_id)
            .ok_or_else(|| SealError(format!("no key with id {key_id:?} in STORAGE_ENCRYPTION_KEYS")))?;
        self.key(ring_key, scope, ANSWER_KEY_INFO).await
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
        let ring_key = ring.newest();
        let key = self.key(ring_key, salt, info).await?;
        let mut nonce = [0u8; NONCE_LEN];
        crypto()?.get_random_values_with_u8_array(&mut nonce).map_err(fail("drawing a nonce"))?;
        let promise = subtle()?
            .encrypt_with_object_and_u8_array(&aes_gcm(&nonce, aad), &key, plaintext)
            .map_err(fail("sealing"))?;
        let ciphertext = JsFuture::from(promise).await.map_err(fail("sealing"))?;
        let ciphertext = Uint8Array::new(&ciphertext).to_vec();
        Ok(Envelope { key_id: ring_key.id.clone(), nonce, ciphertext }.encode())
    }

    async fn open_bytes(
        &self,
        ring: Option<&KeyRing>,
        salt: &[u8],
        info: &'static [u8],
        aad: &[u8],
        sealed: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let ring = ring.ok_or_else(|| {
            SealError("the record is sealed but STORAGE_ENCRYPTION_KEYS is not set".to_owned())
        })?;
        let envelope =
            Envelope::decode(sealed).ok_or_else(|| SealError("the sealed value is malformed".to_owned()))?;
        let ring_key = ring.by_id(&envelope.key_id).ok_or_else(|| {
            SealError(format!("no key with id {:?} in STORAGE_ENCRYPTION_KEYS", envelope.key_id))
        })?;
        let key = self.key(ring_key, salt, info).await?;
        let promise = subtle()?
            .decrypt_with_object_and_u8_array(&aes_gcm(&envelope.nonce, aad), &key, &envelope.ciphertext)
            .map_err(fail("opening"))?;
        let plaintext =
            JsFuture::from(promise).await.map_err(fail("opening (a changed byte or the wrong key)"))?;
        Ok(Uint8Array::new(&plaintext).to_vec())
    }

    /// The AES-GCM key for `ring_key`, `salt` (this object's scope, or its id) and `info`,
    /// derived once.
    async fn key(
        &self,
        ring_key: &RingKey,
        salt: &[u8],
        info: &'static [u8],
    ) -> Result<CryptoKey, SealError> {
        let cached = self
            .derived
            .borrow()
            .iter()
            .find(|(id, i, _)| *id == ring_key.id && *i == info)
            .map(|e| e.2.clone());
        if let Some(key) = cached {
            return Ok(key);
        }
        let subtle = subtle()?;
        let usages = js_sys::Array::of1(&JsValue::from_str("deriveKey"));
        let base = subtle
            .import_key_with_object(
                "raw",
                &Uint8Array::from(&ring_key.secret[..]),
                &named("HKDF"),
                false,
                &usages,
            )
            .map_err(fail("importing a storage key"))?;
        let base: CryptoKey =
            JsFuture::from(base).await.map_err(fail("importing a storage key"))?.unchecked_into();
        let hkdf = named("HKDF");
        set(&hkdf, "hash", &JsValue::from_str("SHA-256"));
        set(&hkdf, "salt", &Uint8Array::from(salt));
        set(&hkdf, "info", &Uint8Array::from(info));
        let aes = named("AES-GCM");
        set(&aes, "length", &JsValue::from_f64(256.0));
        let usages = js_sys::Array::of2(&JsValue::from_str("encrypt"), &JsValue::from_str("decrypt"));
        let derived = subtle
            .derive_key_with_object_and_object(&hkdf, &base, &aes, false, &usages)
            .map_err(fail("deriving a storage key"))?;
        let derived: CryptoKey =
            JsFuture::from(derived).await.map_err(fail("deriving a storage key"))?.unchecked_into();
        self.derived.borrow_mut().push((ring_key.id.clone(), info, derived.clone()));
        Ok(derived)
    }
}

fn crypto() -> Result<web_sys::Crypto, SealError> {
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    global.crypto().map_err(fail("no crypto in this runtime"))
}

fn subtle() -> Result<SubtleCrypto, SealError> {
    Ok(crypto()?.subtle())
}

fn named(name: &str) -> Object {
    let object = Object::new();
    set(&object, "name", &JsValue::from_str(name));
    object
}

fn set(object: &Object, name: &str, value: &JsValue) {
    let _ = Reflect::set(object, &JsValue::from_str(name), value);
}

fn aes_gcm(nonce: &[u8], aad: &[u8]) -> Object {
    let algorithm = named("AES-GCM");
    set(&algorithm, "iv", &Uint8Array::from(nonce));
    set(&algorithm, "additionalData", &Uint8Array::from(aad));
    algorithm
}

/// Opens the sealed bytes `ciphertext` (AES-GCM output) with `key`, bound to `aad`. The bytes
/// stay in JavaScript: nothing of them is copied into Wasm memory.
pub async fn open_view(
    key: &CryptoKey,
    nonce: &[u8],
    aad: &[u8],
    ciphertext: &Uint8Array,
) -> Result<Uint8Array, SealError> {
    let promise = subtle()?
        .decrypt_with_object_and_buffer_source(&aes_gcm(nonce, aad), key, ciphertext)
        .map_err(fail("opening"))?;
    let plaintext =
        JsFuture::from(promise).await.map_err(fail("opening (a changed byte or the wrong key)"))?;
    Ok(Uint8Array::new(&plaintext))
}

/// SHA-256 of `bytes`, by WebCrypto (the bytes stay in JavaScript).
pub async fn sha256(bytes: &Uint8Array) -> Result<[u8; 32], SealError> {
    let promise = subtle()?.digest_with_str_and_buffer_source("SHA-256", bytes).map_err(fail("digesting"))?;
    let digest = JsFuture::from(promise).await.map_err(fail("digesting"))?;
    let digest = Uint8Array::new(&digest);
    let mut out = [0u8; 32];
    if digest.length() != 32 {
        return Err(SealError("digesting: not 32 bytes".to_owned()));
    }
    digest.copy_to(&mut out);
    Ok(out)
}
