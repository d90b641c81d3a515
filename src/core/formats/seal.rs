//! Sealing of what the worker stores: the key ring, the sealed envelope and what a seal is
//! bound to. The cipher itself (AES-256-GCM, keys derived with HKDF-SHA-256) runs in the
//! runtime through WebCrypto; this module decides everything around it, with no I/O.
//!
//! 1. `STORAGE_ENCRYPTION_KEYS` is a secret holding a JSON array of keys, newest first:
//!    `[{"id":"2026-12","key":"<standard base64 of 32 random bytes>"}]`. The newest key
//!    seals; every listed key opens. Rotation is adding a new key in front; a key is removed
//!    once every record it sealed has expired.
//! 2. The key that seals one caller's records is derived from a ring key with HKDF, the
//!    caller's scope hash as salt, so that a leaked derived key opens one caller's records
//!    at most.
//! 3. An envelope is the ring key's id, a random 96-bit nonce and the ciphertext (with its
//!    tag). The associated data binds it to the object and the record version, so a sealed
//!    answer copied into another key's object does not open; and to the
//!    attempt that wrote it and the payload fingerprint (an answer: record tag 5) or to the
//!    job's claim time and the fingerprint (a request: job version 2), so that an older
//!    attempt's sealed answer or request written back into a newer record does not open
//!    either. Records sealed before keep their old binding and are read as written.
//! 4. A record that cannot be opened (unknown key id, a changed byte) is never treated as
//!    absent: the object answers 503 and forwards nothing. Nor is a stored answer in the
//!    clear while a key ring is set: someone who can write storage could plant any answer
//!    that way, so it is refused the same way, unless `STORAGE_ALLOW_UNSEALED=true` (for
//!    the rollout of sealing, while answers stored before it have not expired:
//!    [`refuses_unsealed`]).
//! 5. Stored requests (`core::key_rules::machine::async_job`) are sealed the same way, with keys derived with
//!    the object id as salt and their own `info` ([`REQUEST_KEY_INFO`]): the alarm opens
//!    them in an object that no request has reached since a restart. The scope's key salt
//!    travels inside the sealed request, so the alarm can seal the answer as usual.

use serde_json::Value;

use super::fingerprint::Digest256;
use super::key_record::{Completed, KeyRecord, StoredResponse};
use crate::core::primitives::codec::{Reader, Writer};
use crate::core::vocabulary::fault::StorageError;

/// The variable (a secret) holding the key ring.
pub const VAR_STORAGE_ENCRYPTION_KEYS: &str = "STORAGE_ENCRYPTION_KEYS";
/// `true`: answers stored in the clear are still replayed while a key ring is set (rule 4).
pub const VAR_STORAGE_ALLOW_UNSEALED: &str = "STORAGE_ALLOW_UNSEALED";

/// Parses `STORAGE_ALLOW_UNSEALED`: `true` or `false` (unset or empty: `false`).
pub fn parse_allow_unsealed(raw: Option<&str>) -> Result<bool, String> {
    match raw.map(str::trim) {
        None | Some("") | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(format!("{VAR_STORAGE_ALLOW_UNSEALED} is invalid: expected true or false")),
    }
}

/// Rule 4: whether a record must be refused (503, nothing forwarded) because it holds an
/// answer in the clear while stored answers are sealed (`ring_set`), and the operator did
/// not allow such answers for a rollout.
pub fn refuses_unsealed(ring_set: bool, allow_unsealed: bool, record: &super::key_record::KeyRecord) -> bool {
    use super::key_record::{Completed, KeyRecord};
    ring_set
        && !allow_unsealed
        && matches!(record, KeyRecord::Completed(Completed { sealed_answer: None, .. }))
}

/// What a record read from storage needs before its answer can be replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// Nothing: it is replayed at once.
    Nothing,
    /// Its sealed answer opened, or its chunk rows checked against their manifest
    /// (`core::formats::chunks`, rule 2).
    Open,
    /// Refused (503, nothing forwarded): an answer in the clear while sealing is required
    /// (rule 4).
    Refuse,
}

/// What `record` needs ([`Opening`]). `read_in_clear`: whether the record as storage held
/// it has its answer in the clear (an answer this object opened is kept unsealed in
/// memory, and is not refused for that). `checked_chunks`: the attempt whose chunk rows
/// this object life has checked already (they are checked once).
pub fn opening(
    record: &super::key_record::KeyRecord,
    read_in_clear: bool,
    ring_set: bool,
    allow_unsealed: bool,
    checked_chunks: Option<u64>,
) -> Opening {
    use super::key_record::KeyRecord;
    if read_in_clear && refuses_unsealed(ring_set, allow_unsealed, record) {
        return Opening::Refuse;
    }
    let KeyRecord::Completed(done) = record else { return Opening::Nothing };
    let unchecked = done.chunks.as_ref().is_some_and(|manifest| checked_chunks != Some(manifest.attempt));
    if done.sealed_answer.is_some() || unchecked {
        Opening::Open
    } else {
        Opening::Nothing
    }
}

/// HKDF `info` for the keys that seal stored answers.
pub const ANSWER_KEY_INFO: &[u8] = b"idempotency-edge stored answer v1";

/// HKDF `info` for the keys that seal stored requests (`core::key_rules::machine::async_job`). Their salt is
/// the key's object id, which the object knows without any request: its alarm opens them.
pub const REQUEST_KEY_INFO: &[u8] = b"idempotency-edge stored request v1";

/// The AES-GCM nonce length.
pub const NONCE_LEN: usize = 12;
/// The AES-GCM tag at the end of every ciphertext: no envelope is shorter than its header
/// and a tag.
const TAG_LEN: usize = 16;

/// Most keys in a ring: each may have to be tried by id on every read of an old record.
const MAX_KEYS: usize = 16;
const MAX_ID_LEN: usize = 64;

/// One key of the ring.
#[derive(Clone, PartialEq, Eq)]
pub struct RingKey {
    pub id: String,
    pub secret: [u8; 32],
}

impl std::fmt::Debug for RingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.debug_struct("RingKey").field("id", &self.id).finish_non_exhaustive()
    }
}

/// The ring: newest first, never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRing {
    keys: Vec<RingKey>,
}

impl KeyRing {
    /// Parses the secret's value. The error names what is wrong, never a key's bytes.
    pub fn parse(raw: &str) -> Result<KeyRing, String> {
        let value = serde_json::from_str::<Value>(raw)
            .map_err(|_| "expected a JSON array of {\"id\", \"key\"} objects, newest first".to_owned())?;
        let Value::Array(items) = value else {
            return Err("expected a JSON array of {\"id\", \"key\"} objects, newest first".to_owned());
        };
        if items.is_empty() || items.len() > MAX_KEYS {
            return Err(format!("expected from 1 to {MAX_KEYS} keys"));
        }
        let mut keys: Vec<RingKey> = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let at = |what: &str| format!("[{index}].{what}");
            let Value::Object(members) = item else { return Err(format!("[{index}]: expected an object")) };
            if let Some(unknown) = members.keys().find(|name| *name != "id" && *name != "key") {
                return Err(format!("{}: unknown member", at(unknown)));
            }
            let id = match members.get("id") {
                Some(Value::String(id))
                    if !id.is_empty()
                        && id.len() <= MAX_ID_LEN
                        && id.bytes().all(|b| b.is_ascii_graphic()) =>
                {
                    id.clone()
                }
                _ => {
                    return Err(format!(
                        "{}: expected 1 to {MAX_ID_LEN} printable ASCII characters",
                        at("id")
                    ))
                }
            };
            if keys.iter().any(|key| key.id == id) {
                return Err(format!("{}: the id {} is listed twice", at("id"), Value::String(id.clone())));
            }
            let secret = match members.get("key") {
                Some(Value::String(text)) => {
                    decode_base64(text).and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
                }
                _ => None,
            };
            let Some(secret) = secret else {
                return Err(format!("{}: expected the standard base64 of 32 random bytes", at("key")));
            };
            keys.push(RingKey { id, secret });
        }
        Ok(KeyRing { keys })
    }

    /// The key that seals new records.
    pub fn newest(&self) -> &RingKey {
        &self.keys[0]
    }

    /// The key with this id, to open a record.
    pub fn by_id(&self, id: &str) -> Option<&RingKey> {
        self.keys.iter().find(|key| key.id == id)
    }
}

/// The key of `ring` (`None`: `STORAGE_ENCRYPTION_KEYS` is not set) that opens what was sealed
/// under `key_id`, or why there is none (the caller answers 503). The id comes from stored
/// bytes: the error quotes it as JSON, and the log shows it as text.
pub fn opening_key<'r>(ring: Option<&'r KeyRing>, key_id: &str) -> Result<&'r RingKey, String> {
    let ring = ring.ok_or("the record is sealed but STORAGE_ENCRYPTION_KEYS is not set")?;
    ring.by_id(key_id).ok_or_else(|| {
        let quoted = Value::from(key_id);
        format!("no key with id {quoted} in STORAGE_ENCRYPTION_KEYS")
    })
}

/// A sealed value as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub key_id: String,
    pub nonce: [u8; NONCE_LEN],
    /// The AES-GCM output: ciphertext followed by the 16-byte tag.
    pub ciphertext: Vec<u8>,
}

impl Envelope {
    /// `id length (u8) ‖ id ‖ nonce ‖ ciphertext`, the ciphertext to the end with no
    /// length of its own.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Writer::with_capacity(1 + self.key_id.len() + NONCE_LEN + self.ciphertext.len());
        // A key id fits its u8 length: a ring's are at most `MAX_ID_LEN` bytes.
        out.u8(self.key_id.len() as u8);
        out.raw(self.key_id.as_bytes());
        out.raw(&self.nonce);
        out.raw(&self.ciphertext);
        out.into_bytes()
    }

    /// The longest envelope header: id length, an id of up to 255 bytes, the nonce.
    pub const MAX_HEADER_LEN: usize = 1 + 255 + NONCE_LEN;

    /// The key id, the nonce and where the ciphertext starts, from the envelope's first
    /// bytes (at least the header): for a ciphertext that stays outside Wasm memory. The
    /// ciphertext (with its tag) must be at least 16 bytes of the `total_len`.
    pub fn decode_header(head: &[u8], total_len: usize) -> Option<(String, [u8; NONCE_LEN], usize)> {
        let mut input = Reader::new(head);
        let (key_id, nonce) = read_header(&mut input)?;
        let header_len = head.len() - input.remaining();
        if total_len < header_len + TAG_LEN {
            return None;
        }
        Some((key_id, nonce, header_len))
    }

    pub fn decode(bytes: &[u8]) -> Option<Envelope> {
        let mut input = Reader::new(bytes);
        let (key_id, nonce) = read_header(&mut input)?;
        let ciphertext = input.rest();
        if ciphertext.len() < TAG_LEN {
            return None;
        }
        Some(Envelope { key_id, nonce, ciphertext: ciphertext.to_vec() })
    }
}

/// An envelope's key id (its u8 length first, never empty) and nonce.
fn read_header(input: &mut Reader<'_>) -> Option<(String, [u8; NONCE_LEN])> {
    let id_len = usize::from(input.u8().ok()?);
    if id_len == 0 {
        return None;
    }
    let key_id = input.utf8(id_len).ok()?;
    let nonce = input.array().ok()?;
    Some((key_id, nonce))
}

/// What a sealed answer is bound to: the object that holds it and the record version.
pub fn answer_associated_data(object_id: &str, record_version: u8) -> Vec<u8> {
    let mut aad = Vec::with_capacity(40 + object_id.len());
    aad.extend_from_slice(b"idempotency-edge/answer\0");
    aad.extend_from_slice(object_id.as_bytes());
    aad.push(0);
    aad.push(record_version);
    aad
}

/// What a sealed answer is bound to (record tag 5): the object, the record
/// version, the attempt that wrote it and the payload fingerprint.
pub fn bound_answer_associated_data(
    object_id: &str,
    record_version: u8,
    attempt: u64,
    fingerprint: &[u8; 32],
) -> Vec<u8> {
    bound_associated_data(b"idempotency-edge/answer-bound\0", object_id, record_version, attempt, fingerprint)
}

/// What a job's sealed request is bound to (job version 2): the object, the
/// record version, the job's claim time (the same for all its sends) and the fingerprint.
pub fn bound_request_associated_data(
    object_id: &str,
    record_version: u8,
    claimed_at: u64,
    fingerprint: &[u8; 32],
) -> Vec<u8> {
    bound_associated_data(
        b"idempotency-edge/request-bound\0",
        object_id,
        record_version,
        claimed_at,
        fingerprint,
    )
}

/// `label ‖ object id ‖ 0 ‖ record version ‖ moment (u64) ‖ fingerprint`: the label keeps
/// answers and requests apart, the rest binds the seal to its record.
fn bound_associated_data(
    label: &[u8],
    object_id: &str,
    record_version: u8,
    moment: u64,
    fingerprint: &[u8; 32],
) -> Vec<u8> {
    let mut aad = Vec::with_capacity(label.len() + object_id.len() + 42);
    aad.extend_from_slice(label);
    aad.extend_from_slice(object_id.as_bytes());
    aad.push(0);
    aad.push(record_version);
    aad.extend_from_slice(&moment.to_be_bytes());
    aad.extend_from_slice(fingerprint);
    aad
}

/// What a sealed request is bound to: the object that holds it and the record version
/// (a label apart from answers', so that neither opens as the other).
pub fn request_associated_data(object_id: &str, record_version: u8) -> Vec<u8> {
    let mut aad = Vec::with_capacity(40 + object_id.len());
    aad.extend_from_slice(b"idempotency-edge/request\0");
    aad.extend_from_slice(object_id.as_bytes());
    aad.push(0);
    aad.push(record_version);
    aad
}

/// What one seal is of: the derived key that seals and opens it (HKDF `salt` and `info`,
/// rules 2 and 5) and what it is bound to (`aad`, rule 3). Every sealed value the worker
/// stores is made from one of these; the runtime only runs the cipher with them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealContext {
    pub salt: Vec<u8>,
    pub info: &'static [u8],
    pub aad: Vec<u8>,
}

impl SealContext {
    /// A stored answer of the scope whose key salt is `scope`, in the object `object_id`.
    /// `bound`: the record's attempt and fingerprint (record tag 5); `None` for an answer
    /// an earlier release sealed (tag 2), which is opened as it was written.
    pub fn answer(scope: &[u8], object_id: &str, bound: Option<(u64, &[u8; 32])>) -> SealContext {
        let version = super::key_record::SEALED_RECORD_VERSION;
        let aad = match bound {
            Some((attempt, fingerprint)) => {
                bound_answer_associated_data(object_id, version, attempt, fingerprint)
            }
            None => answer_associated_data(object_id, version),
        };
        SealContext { salt: scope.to_vec(), info: ANSWER_KEY_INFO, aad }
    }

    /// A job's stored request in the object `object_id`, with that id as salt (rule 5).
    /// `bound`: the job's claim time and fingerprint (job version 2); `None` for a request
    /// an earlier release sealed (job version 1).
    pub fn request(object_id: &str, bound: Option<(u64, &[u8; 32])>) -> SealContext {
        let version = super::key_record::SEALED_RECORD_VERSION;
        let aad = match bound {
            Some((claimed_at, fingerprint)) => {
                bound_request_associated_data(object_id, version, claimed_at, fingerprint)
            }
            None => request_associated_data(object_id, version),
        };
        SealContext { salt: object_id.as_bytes().to_vec(), info: REQUEST_KEY_INFO, aad }
    }
}

/// How `done`'s whole (not chunked) answer is sealed by this release: bound to its attempt
/// and fingerprint too (record tag 5), in the scope whose key salt is `scope`.
pub fn answer_seal(scope: &[u8], object_id: &str, done: &Completed) -> SealContext {
    SealContext::answer(scope, object_id, Some((done.attempt.0, &done.fingerprint.0)))
}

/// How `done`'s sealed answer, as read from storage, is opened: as it was sealed, bound
/// (tag 5) or, by an earlier release, to its object and version only (tag 2).
pub fn answer_opening(scope: &[u8], object_id: &str, done: &Completed) -> SealContext {
    let bound = done.sealed_bound.then_some((done.attempt.0, &done.fingerprint.0));
    SealContext::answer(scope, object_id, bound)
}

/// `done` as stored with its answer sealed into `sealed` by [`answer_seal`] (tag 5).
pub fn with_sealed_answer(done: &Completed, sealed: Vec<u8>) -> KeyRecord {
    KeyRecord::Completed(Completed { sealed_answer: Some(sealed), sealed_bound: true, ..done.clone() })
}

/// `done` with its sealed answer opened (`plain`), as the object keeps it. An opened answer
/// that does not decode is a fault (the caller answers 503), never an empty answer.
pub fn opened_answer(done: &Completed, plain: &[u8]) -> Result<Completed, StorageError> {
    let answer = StoredResponse::decode(plain)
        .map_err(|error| StorageError::Seal(format!("the opened answer is unreadable: {error}")))?;
    Ok(Completed { response: std::sync::Arc::new(answer), sealed_answer: None, ..done.clone() })
}

/// How an answer is stored: `None` in the clear (no ring set), else sealed under `ring` in
/// the scope whose key salt is `salt`. A ring that did not parse (`Err`, its problem's
/// detail) is never a reason to store in the clear what the operator asked to seal, nor is
/// a salt not known yet (the first key request brings it): both are faults.
pub fn answer_sealing<'a>(
    ring: Result<Option<&'a KeyRing>, &str>,
    salt: Option<&'a Digest256>,
) -> Result<Option<(&'a KeyRing, &'a [u8])>, StorageError> {
    match ring.map_err(|detail| StorageError::Seal(detail.to_owned()))? {
        None => Ok(None),
        Some(ring) => Ok(Some((ring, &salt.ok_or_else(StorageError::no_scope_salt)?.0))),
    }
}

/// The scope's key salt that opening `done` as read needs: a sealed answer or head needs
/// it, as known (`salt`) or a fault; an answer in the clear (a chunked one's rows are still
/// checked) needs none, and is given the salt if known, else an empty one.
pub fn opening_scope<'a>(done: &Completed, salt: Option<&'a Digest256>) -> Result<&'a [u8], StorageError> {
    match (&done.sealed_answer, salt) {
        (Some(_), None) => Err(StorageError::no_scope_salt()),
        (_, salt) => Ok(salt.map_or(&[][..], |salt| &salt.0[..])),
    }
}

/// Whether `current` (the record as the object knows it once opening is done) is still
/// `opened_from`, the record that was opened: an alarm, a purge or another opener may have
/// replaced it meanwhile, and only then is the opened record kept in its place.
pub fn still_stored(opened_from: &KeyRecord, current: Option<&KeyRecord>) -> bool {
    matches!((opened_from, current), (KeyRecord::Completed(was), Some(KeyRecord::Completed(now)))
        if now.sealed_answer == was.sealed_answer && now.chunks == was.chunks)
}

/// Standard base64 with padding (RFC 4648 §4), strictly: no whitespace, no URL alphabet,
/// canonical padding and no stray bits under it (the `base64` crate's `STANDARD`).
pub fn decode_base64(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::core::formats::fingerprint::Digest256;
    use crate::core::formats::key_record::{AttemptId, InFlight};

    /// A completed record of `attempt` whose answer is stored in the clear.
    fn answered_in_the_clear(attempt: u64) -> Completed {
        Completed {
            attempt: AttemptId(attempt),
            fingerprint: Digest256([1; 32]),
            completed_at: 0,
            expires_at: 10,
            response: std::sync::Arc::new(StoredResponse {
                status: 201,
                headers: vec![],
                body: b"x".to_vec(),
            }),
            sealed_answer: None,
            sealed_bound: false,
            chunks: None,
        }
    }

    /// A claim of `attempt`, which holds no answer.
    fn claimed(attempt: u64) -> KeyRecord {
        KeyRecord::InFlight(InFlight {
            attempt: AttemptId(attempt),
            fingerprint: Digest256([1; 32]),
            origin_attempts: 1,
            claimed_at: 0,
            lease_until: 5,
            expires_at: 10,
            async_job: None,
            reconcile: None,
        })
    }

    const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const KEY_B: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

    #[test]
    fn base64_known_answers() {
        // RFC 4648 §10.
        for (encoded, decoded) in [
            ("", ""),
            ("Zg==", "f"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYg==", "foob"),
            ("Zm9vYmE=", "fooba"),
            ("Zm9vYmFy", "foobar"),
        ] {
            assert_eq!(decode_base64(encoded).as_deref(), Some(decoded.as_bytes()), "{encoded}");
        }
        for bad in ["Zg=", "Zm9v\n", "Zm9v-_==", "Zh==", "Z===", "Zg==Zg==", "Zm 9v"] {
            assert_eq!(decode_base64(bad), None, "{bad:?}");
        }
        assert_eq!(decode_base64(KEY_A).unwrap(), (0u8..32).collect::<Vec<_>>());
    }

    #[test]
    fn the_ring_is_newest_first_and_opens_by_id() {
        let ring = KeyRing::parse(&format!(
            r#"[{{"id":"2026-12","key":"{KEY_B}"}},{{"id":"2026-06","key":"{KEY_A}"}}]"#
        ))
        .unwrap();
        assert_eq!(ring.newest().id, "2026-12");
        assert_eq!(ring.by_id("2026-06").unwrap().secret[..4], [0, 1, 2, 3]);
        assert!(ring.by_id("2025-01").is_none());
        assert!(!format!("{ring:?}").contains("secret"), "Debug never shows a key");
    }

    #[test]
    fn a_sealed_value_opens_only_with_its_keys_id_in_a_set_ring() {
        let ring = KeyRing::parse(&format!(
            r#"[{{"id":"2026-12","key":"{KEY_B}"}},{{"id":"2026-06","key":"{KEY_A}"}}]"#
        ));
        let ring = ring.unwrap();
        assert_eq!(opening_key(Some(&ring), "2026-06").map(|key| &key.id[..]), Ok("2026-06"));
        let unset = opening_key(None, "2026-06").unwrap_err();
        assert!(unset.contains("STORAGE_ENCRYPTION_KEYS is not set"), "{unset}");
        let unknown = opening_key(Some(&ring), "a\"\nb").unwrap_err();
        assert_eq!(unknown, r#"no key with id "a\"\nb" in STORAGE_ENCRYPTION_KEYS"#, "quoted, one line");
    }

    #[test]
    fn a_whole_answer_opens_as_it_was_sealed_and_only_readable_bytes_open() {
        let done = answered_in_the_clear(7);
        let sealing = answer_seal(b"salt", "obj", &done);
        let bound = bound_answer_associated_data("obj", 2, 7, &[1; 32]);
        assert_eq!(
            (sealing.salt.as_slice(), sealing.info, &sealing.aad),
            (&b"salt"[..], ANSWER_KEY_INFO, &bound)
        );
        let KeyRecord::Completed(stored) = with_sealed_answer(&done, vec![9; 40]) else {
            panic!("not completed")
        };
        assert_eq!((stored.sealed_answer.as_deref(), stored.sealed_bound), (Some(&[9u8; 40][..]), true));
        assert_eq!(answer_opening(b"salt", "obj", &stored), sealing, "opened with what sealed it");
        let earlier = Completed { sealed_bound: false, ..stored.clone() };
        assert_eq!(answer_opening(b"salt", "obj", &earlier).aad, answer_associated_data("obj", 2), "tag 2");
        let opened = opened_answer(&stored, &done.response.encode()).unwrap();
        assert_eq!((opened.response.clone(), opened.sealed_answer), (done.response.clone(), None));
        let unreadable = opened_answer(&stored, b"\x01").unwrap_err();
        assert!(matches!(&unreadable, StorageError::Seal(m) if m.contains("unreadable")), "{unreadable}");
    }

    #[test]
    fn invalid_rings_say_what_is_wrong_without_the_key() {
        let cases = [
            ("", "JSON array"),
            ("{}", "JSON array"),
            ("[]", "from 1 to"),
            (r#"[{"id":"a"}]"#, "[0].key"),
            (r#"[{"id":"a","key":"c2hvcnQ="}]"#, "[0].key"),
            (r#"[{"id":"","key":"x"}]"#, "[0].id"),
            (r#"[{"id":"a b","key":"x"}]"#, "[0].id"),
            (r#"[{"id":"a","key":"x","alg":"aes"}]"#, "[0].alg: unknown member"),
        ];
        for (raw, expected) in cases {
            let error = KeyRing::parse(raw).expect_err(raw);
            assert!(error.contains(expected), "{raw}: {error}");
        }
        let twice = format!(r#"[{{"id":"a","key":"{KEY_A}"}},{{"id":"a","key":"{KEY_B}"}}]"#);
        let error = KeyRing::parse(&twice).unwrap_err();
        assert!(error.contains("twice") && !error.contains(KEY_A) && !error.contains(KEY_B), "{error}");
    }

    #[test]
    fn an_answer_in_the_clear_is_refused_while_a_ring_is_set_unless_allowed() {
        let done = answered_in_the_clear(1);
        let clear = KeyRecord::Completed(done.clone());
        let sealed = KeyRecord::Completed(Completed {
            sealed_answer: Some(vec![1, b'k', 0]),
            sealed_bound: true,
            ..done
        });
        let claim = claimed(1);
        assert!(refuses_unsealed(true, false, &clear));
        assert!(!refuses_unsealed(true, true, &clear), "allowed for the rollout");
        assert!(!refuses_unsealed(false, false, &clear), "no ring: nothing is sealed");
        assert!(!refuses_unsealed(true, false, &sealed));
        assert!(!refuses_unsealed(true, false, &claim), "a claim holds no answer");
        assert_eq!(parse_allow_unsealed(None), Ok(false));
        assert_eq!(parse_allow_unsealed(Some("true")), Ok(true));
        assert!(parse_allow_unsealed(Some("yes")).unwrap_err().contains(VAR_STORAGE_ALLOW_UNSEALED));
    }

    #[test]
    fn bound_associated_data_binds_attempt_and_fingerprint_too() {
        let (fp, other) = ([1u8; 32], [2u8; 32]);
        let answer = bound_answer_associated_data("ab", 2, 7, &fp);
        assert_ne!(answer, bound_answer_associated_data("ab", 2, 8, &fp), "another attempt");
        assert_ne!(answer, bound_answer_associated_data("ab", 2, 7, &other), "another payload");
        assert_ne!(answer, bound_answer_associated_data("ac", 2, 7, &fp), "another object");
        assert_ne!(answer, answer_associated_data("ab", 2), "never the unbound form");
        let request = bound_request_associated_data("ab", 2, 7, &fp);
        assert_ne!(request, answer, "a request never opens as an answer");
        assert_ne!(request, bound_request_associated_data("ab", 2, 9, &fp), "another job");
        assert_ne!(request, bound_request_associated_data("ab", 2, 7, &other));
    }

    #[test]
    fn answers_use_the_scopes_key_and_requests_the_objects() {
        let (fp, version) = ([3u8; 32], crate::core::formats::key_record::SEALED_RECORD_VERSION);
        let answer = SealContext::answer(b"scope-salt", "ab", Some((7, &fp)));
        assert_eq!((answer.salt.as_slice(), answer.info), (&b"scope-salt"[..], ANSWER_KEY_INFO));
        assert_eq!(answer.aad, bound_answer_associated_data("ab", version, 7, &fp));
        let legacy = SealContext::answer(b"scope-salt", "ab", None);
        assert_eq!(legacy.aad, answer_associated_data("ab", version), "an earlier release's answer");
        let request = SealContext::request("ab", Some((9, &fp)));
        assert_eq!((request.salt.as_slice(), request.info), (&b"ab"[..], REQUEST_KEY_INFO));
        assert_eq!(request.aad, bound_request_associated_data("ab", version, 9, &fp));
        assert_eq!(SealContext::request("ab", None).aad, request_associated_data("ab", version));
        // The bytes stored records were sealed with: a change here would leave them unopenable.
        assert_eq!(version, 2);
        assert_eq!(legacy.aad, b"idempotency-edge/answer\0ab\0\x02");
        assert_eq!(&request.aad[..32], b"idempotency-edge/request-bound\0a");
    }

    #[test]
    fn a_record_is_opened_once_and_refused_in_the_clear_only_as_storage_held_it() {
        use crate::core::formats::chunk_manifest::ChunkManifest;
        let done = answered_in_the_clear(4);
        let clear = KeyRecord::Completed(done.clone());
        let sealed = KeyRecord::Completed(Completed { sealed_answer: Some(vec![1]), ..done.clone() });
        let manifest = ChunkManifest { body_len: 1, chunk_len: 1, attempt: 4, digests: vec![[0; 32]] };
        let chunked = KeyRecord::Completed(Completed { chunks: Some(manifest), ..done.clone() });
        assert_eq!(opening(&clear, true, true, false, None), Opening::Refuse);
        assert_eq!(opening(&clear, false, true, false, None), Opening::Nothing, "opened by this object");
        assert_eq!(opening(&clear, true, true, true, None), Opening::Nothing, "allowed for a rollout");
        assert_eq!(opening(&clear, true, false, false, None), Opening::Nothing, "no ring");
        assert_eq!(opening(&sealed, false, true, false, Some(4)), Opening::Open, "opened on every read");
        assert_eq!(opening(&chunked, true, false, false, None), Opening::Open);
        assert_eq!(opening(&chunked, true, false, false, Some(3)), Opening::Open, "another attempt's rows");
        assert_eq!(opening(&chunked, true, false, false, Some(4)), Opening::Nothing, "checked once");
        assert_eq!(opening(&chunked, true, true, false, Some(4)), Opening::Refuse, "its head in the clear");
        let claim = claimed(4);
        assert_eq!(opening(&claim, true, true, false, None), Opening::Nothing, "nothing to open");
    }

    #[test]
    fn an_answer_is_sealed_when_a_ring_is_set_and_never_stored_in_the_clear_for_a_fault() {
        let ring = KeyRing::parse(&format!(r#"[{{"id":"k","key":"{KEY_A}"}}]"#)).unwrap();
        let salt = Digest256([9; 32]);
        assert_eq!(answer_sealing(Ok(None), None), Ok(None), "no ring: in the clear, no salt needed");
        assert_eq!(answer_sealing(Ok(Some(&ring)), Some(&salt)), Ok(Some((&ring, &salt.0[..]))));
        assert_eq!(answer_sealing(Ok(Some(&ring)), None), Err(StorageError::no_scope_salt()));
        let invalid = answer_sealing(Err("STORAGE_ENCRYPTION_KEYS is invalid"), Some(&salt));
        assert_eq!(invalid, Err(StorageError::Seal("STORAGE_ENCRYPTION_KEYS is invalid".to_owned())));
    }

    #[test]
    fn only_a_sealed_answer_needs_the_scope_salt_to_be_opened() {
        let salt = Digest256([9; 32]);
        let clear = answered_in_the_clear(4);
        let sealed = Completed { sealed_answer: Some(vec![1]), ..clear.clone() };
        assert_eq!(opening_scope(&sealed, Some(&salt)), Ok(&salt.0[..]));
        assert_eq!(opening_scope(&sealed, None), Err(StorageError::no_scope_salt()));
        assert_eq!(opening_scope(&clear, Some(&salt)), Ok(&salt.0[..]));
        assert_eq!(opening_scope(&clear, None), Ok(&[][..]), "rows in the clear are checked without it");
    }

    #[test]
    fn an_opened_record_is_kept_only_while_storage_still_holds_what_was_opened() {
        let done = Completed { sealed_answer: Some(vec![1]), ..answered_in_the_clear(4) };
        let opened_from = KeyRecord::Completed(done.clone());
        assert!(still_stored(&opened_from, Some(&opened_from)));
        let opened = KeyRecord::Completed(Completed { sealed_answer: None, ..done.clone() });
        assert!(!still_stored(&opened_from, Some(&opened)), "another opener kept its opened record");
        let resealed = KeyRecord::Completed(Completed { sealed_answer: Some(vec![2]), ..done.clone() });
        assert!(!still_stored(&opened_from, Some(&resealed)));
        let manifest = crate::core::formats::chunk_manifest::ChunkManifest {
            body_len: 3,
            chunk_len: 2,
            attempt: 4,
            digests: vec![[0; 32]; 2],
        };
        let chunked = KeyRecord::Completed(Completed { chunks: Some(manifest), ..done.clone() });
        assert!(!still_stored(&opened_from, Some(&chunked)));
        assert!(!still_stored(&opened_from, Some(&claimed(5))), "a purge and a new claim");
        assert!(!still_stored(&opened_from, None), "deleted meanwhile");
        assert!(!still_stored(&claimed(4), Some(&claimed(4))), "only an answer is opened");
    }

    #[test]
    fn associated_data_binds_object_and_version() {
        let a = answer_associated_data("ab", 2);
        assert_ne!(a, answer_associated_data("ac", 2));
        assert_ne!(a, answer_associated_data("ab", 3));
        assert_ne!(answer_associated_data("a", 2), answer_associated_data("a\u{0}", 2));
    }

    proptest! {
        #[test]
        fn envelopes_round_trip(id in "[!-~]{1,64}", nonce in proptest::array::uniform12(any::<u8>()), ciphertext in proptest::collection::vec(any::<u8>(), 16..200)) {
            let envelope = Envelope { key_id: id, nonce, ciphertext };
            prop_assert_eq!(Envelope::decode(&envelope.encode()), Some(envelope.clone()));
            // The header alone says the same as the whole envelope.
            let encoded = envelope.encode();
            let (id, nonce, at) = Envelope::decode_header(&encoded[..encoded.len().min(Envelope::MAX_HEADER_LEN)], encoded.len()).unwrap();
            prop_assert_eq!((id, nonce, &encoded[at..]), (envelope.key_id.clone(), envelope.nonce, &envelope.ciphertext[..]));
            // Any truncation is refused or reads as a different envelope, never panics.
            let bytes = envelope.encode();
            for cut in 0..bytes.len() {
                prop_assert_ne!(Envelope::decode(&bytes[..cut]), Some(envelope.clone()));
            }
        }

        #[test]
        fn base64_never_panics_and_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..64), noise in "\\PC{0,12}") {
            let _ = decode_base64(&noise);
            const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut encoded = String::new();
            for chunk in bytes.chunks(3) {
                let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
                for i in 0..4 {
                    if i <= chunk.len() {
                        encoded.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
                    } else {
                        encoded.push('=');
                    }
                }
            }
            prop_assert_eq!(decode_base64(&encoded), Some(bytes));
        }
    }
}
