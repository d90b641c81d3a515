//! The per-key record and its stored encoding.
//!
//! Owns what a Durable Object keeps about its key and the bytes it is stored as. Never
//! touches storage itself.
//!
//! 1. A key is in one of three stored states: in flight (claimed, with a lease), completed
//!    (a final response to replay) or unknown (it may have executed; never forward again).
//!    A released key has no record at all.
//! 2. Every record carries the attempt id of the claim that wrote it (fencing), the payload
//!    fingerprint, and `expires_at`, after which it is as if absent.
//! 3. The encoding is versioned from day one: two magic bytes, a version byte, a kind byte,
//!    then fixed big-endian fields and length-prefixed strings, as `core::primitives::codec` spells
//!    them. A decoder of a later version must keep reading version 1 records, so old and new
//!    code can overlap in a deploy. Decoding never panics: any malformed input is a
//!    [`DecodeError`].
//! 4. Version 2 is version 1 plus a list of extensions at the end: a count, then for each a
//!    tag byte and a length-prefixed value. New facts about a key are new tags, not new
//!    versions. A tag with its high bit clear is critical: a reader that does not know it
//!    refuses the record (the object answers 503 and forwards nothing); a tag with the high
//!    bit set may be skipped. A record with no extension is written as version 1, so that a
//!    release which uses no new feature writes what the release before it reads, and a
//!    rollback finds nothing it cannot read.
//!
//! | tag | extension | kinds |
//! |---|---|---|
//! | 1 (critical) | origin attempts: how many times the key was sent to the origin (u16; absent: 1), for `ORIGIN_DEDUPLICATES` | in flight, unknown |
//! | 2 (critical) | sealed answer: a `core::formats::seal::Envelope` of the encoded [`StoredResponse`]; the inline response is then empty | completed |
//! | 3 (critical) | async job: a `core::formats::job::AsyncJob` (deadline, next attempt, policy, the sealed request) | in flight |
//! | 5 (critical) | sealed answer bound to the record's attempt and fingerprint as well: as tag 2, with `core::formats::seal::bound_answer_associated_data` (tag 2, written by earlier releases, is still read) | completed |
//! | 134 (skippable) | reconciliation: a `core::formats::reconciling::Reconciling` (the sealed lookup, how often it was asked, when next) | in flight, unknown |
//! | 135 (skippable, empty) | the key's one spelling: the claim forwarded the key as `core::primitives::key::IdempotencyKey::forwarded` spells it, as its lookup asks for it (a reconciliation without it was claimed before the key had one spelling, and its "not found" is not believed) | in flight, unknown, with tag 134 |
//! | 4 (critical) | chunked answer: a `core::formats::chunk_manifest::ChunkManifest`; the body is in chunk rows and the inline (or sealed) response has none | completed |

use std::sync::Arc;

use super::chunk_manifest::ChunkManifest;
use super::fingerprint::Digest256;
use super::job::AsyncJob;
use super::reconciling::Reconciling;
use crate::core::primitives::codec::{CodecError, Reader, Writer};
use crate::core::primitives::time::Millis;

/// Identifies one claim of a key. A new claim gets a new id, so a late finisher of an older
/// claim can be told apart and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttemptId(pub u64);

/// A response as stored and replayed: status, the headers worth keeping, the body bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl StoredResponse {
    /// The response without its body: what the record keeps of a chunked answer
    /// (`core::formats::chunks`).
    pub fn head(&self) -> StoredResponse {
        StoredResponse { status: self.status, headers: self.headers.clone(), body: Vec::new() }
    }

    /// The response's own encoding (as inside a record): what a sealed answer seals.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Writer::with_capacity(self.body.len() + 64);
        put_response(&mut out, self);
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<StoredResponse, DecodeError> {
        let mut input = Reader::new(bytes);
        let response = read_response(&mut input)?;
        input.finish()?;
        Ok(response)
    }
}

/// Why an outcome is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownReason {
    /// The origin did not answer completely within the origin timeout.
    OriginTimeout,
    /// The connection broke after the request was sent.
    ResetAfterSend,
    /// The origin answered, but the response is too large to store and replay.
    ResponseTooLarge { status: u16 },
}

/// A claimed key whose first attempt is (or was, before a crash) at the origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub attempt: AttemptId,
    pub fingerprint: Digest256,
    /// How many times this key has been sent to the origin, this claim included.
    pub origin_attempts: u16,
    pub claimed_at: Millis,
    /// Until then, the claim's owner may still be running; afterwards an orphaned claim
    /// means the outcome is unknown.
    pub lease_until: Millis,
    pub expires_at: Millis,
    /// An asynchronous job (`core::key_rules::machine::async_job`): the claim holds its stored request and is
    /// executed from the object's alarm.
    pub async_job: Option<AsyncJob>,
    /// The sealed lookup of a route with `reconcile_url` (`core::key_rules::reconcile`).
    pub reconcile: Option<Reconciling>,
}

/// A key with a final response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed {
    pub attempt: AttemptId,
    pub fingerprint: Digest256,
    pub completed_at: Millis,
    pub expires_at: Millis,
    /// Shared, so that every waiter and replay reads one copy of the body. Empty while
    /// `sealed_answer` holds it, until the runtime has opened it.
    pub response: Arc<StoredResponse>,
    /// The answer as stored when stored answers are encrypted: an encoded
    /// `core::formats::seal::Envelope`, as read from storage and not yet opened.
    pub sealed_answer: Option<Vec<u8>>,
    /// Whether `sealed_answer` is bound to this record's attempt and fingerprint too
    /// (`core::formats::seal::bound_answer_associated_data`, tag 5), not only to its object and
    /// version (tag 2, written by earlier releases).
    pub sealed_bound: bool,
    /// Set when the body is stored in chunk rows (`core::formats::chunks`): `response` then holds
    /// the status and headers only.
    pub chunks: Option<ChunkManifest>,
}

/// A key whose first attempt may have executed, with no answer to replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unknown {
    pub attempt: AttemptId,
    pub fingerprint: Digest256,
    /// How many times this key has been sent to the origin.
    pub origin_attempts: u16,
    pub since: Millis,
    pub expires_at: Millis,
    pub reason: UnknownReason,
    /// The sealed lookup and when the alarm asks next (`core::key_rules::reconcile`).
    pub reconcile: Option<Reconciling>,
}

/// What a Durable Object keeps about its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyRecord {
    InFlight(InFlight),
    Completed(Completed),
    Unknown(Unknown),
}

impl KeyRecord {
    pub fn attempt(&self) -> AttemptId {
        match self {
            KeyRecord::InFlight(r) => r.attempt,
            KeyRecord::Completed(r) => r.attempt,
            KeyRecord::Unknown(r) => r.attempt,
        }
    }

    pub fn fingerprint(&self) -> Digest256 {
        match self {
            KeyRecord::InFlight(r) => r.fingerprint,
            KeyRecord::Completed(r) => r.fingerprint,
            KeyRecord::Unknown(r) => r.fingerprint,
        }
    }

    pub fn expires_at(&self) -> Millis {
        match self {
            KeyRecord::InFlight(r) => r.expires_at,
            KeyRecord::Completed(r) => r.expires_at,
            KeyRecord::Unknown(r) => r.expires_at,
        }
    }

    pub fn is_expired(&self, now: Millis) -> bool {
        now >= self.expires_at()
    }

    /// The state's name, for logs and the inspect API.
    pub fn state_name(&self) -> &'static str {
        match self {
            KeyRecord::InFlight(_) => "in-flight",
            KeyRecord::Completed(_) => "completed",
            KeyRecord::Unknown(_) => "unknown",
        }
    }

    /// How many times the key was sent to the origin, when the record says so.
    pub fn origin_attempts(&self) -> u16 {
        match self {
            KeyRecord::InFlight(r) => r.origin_attempts,
            KeyRecord::Unknown(r) => r.origin_attempts,
            KeyRecord::Completed(_) => 1,
        }
    }

    /// Whether the record holds an answer that must be opened before it can be replayed.
    pub fn is_sealed(&self) -> bool {
        matches!(self, KeyRecord::Completed(Completed { sealed_answer: Some(_), .. }))
    }

    /// The asynchronous job the record holds, if any.
    pub fn async_job(&self) -> Option<&AsyncJob> {
        match self {
            KeyRecord::InFlight(InFlight { async_job: Some(job), .. }) => Some(job),
            _ => None,
        }
    }

    /// The reconciliation the record holds, if any.
    pub fn reconciling(&self) -> Option<&Reconciling> {
        match self {
            KeyRecord::InFlight(InFlight { reconcile, .. })
            | KeyRecord::Unknown(Unknown { reconcile, .. }) => reconcile.as_ref(),
            KeyRecord::Completed(_) => None,
        }
    }

    /// The chunk manifest of an answer whose body is stored in chunk rows.
    pub fn chunks(&self) -> Option<&ChunkManifest> {
        match self {
            KeyRecord::Completed(Completed { chunks, .. }) => chunks.as_ref(),
            _ => None,
        }
    }

    /// The manifest a replay of `answer` reads its body's rows by: this record's chunked
    /// answer's, where `answer` is that very answer (the same one, not an equal copy: an
    /// answer held whole, as a waiter's or a caller's is, is replayed from memory).
    pub fn chunks_of(&self, answer: &Arc<StoredResponse>) -> Option<&ChunkManifest> {
        match self {
            KeyRecord::Completed(done) if Arc::ptr_eq(&done.response, answer) => done.chunks.as_ref(),
            _ => None,
        }
    }

    /// The version [`KeyRecord::encode`] writes for this record.
    pub fn version(&self) -> u8 {
        if self.origin_attempts() != 1
            || self.is_sealed()
            || self.async_job().is_some()
            || self.chunks().is_some()
            || self.reconciling().is_some()
        {
            VERSION_2
        } else {
            VERSION_1
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut extensions: Vec<(u8, &[u8])> = Vec::new();
        let attempts = self.origin_attempts().to_be_bytes();
        if self.origin_attempts() != 1 {
            extensions.push((EXT_ORIGIN_ATTEMPTS, &attempts));
        }
        if let KeyRecord::Completed(Completed { sealed_answer: Some(sealed), sealed_bound: false, .. }) = self
        {
            extensions.push((EXT_SEALED_ANSWER, sealed));
        }
        let job = self.async_job().map(AsyncJob::encode);
        if let Some(job) = &job {
            extensions.push((EXT_ASYNC_JOB, job));
        }
        let manifest = self.chunks().map(ChunkManifest::encode);
        if let Some(manifest) = &manifest {
            extensions.push((EXT_CHUNKED_ANSWER, manifest));
        }
        if let KeyRecord::Completed(Completed { sealed_answer: Some(sealed), sealed_bound: true, .. }) = self
        {
            extensions.push((EXT_BOUND_SEALED_ANSWER, sealed));
        }
        let reconciling = self.reconciling().map(Reconciling::encode);
        if let Some(reconciling) = &reconciling {
            extensions.push((EXT_RECONCILING, reconciling));
        }
        if self.reconciling().is_some_and(|reconciling| reconciling.spelling_known) {
            extensions.push((EXT_SPELLING_KNOWN, &[]));
        }
        let mut out = Writer::with_capacity(64);
        out.raw(MAGIC);
        out.u8(self.version());
        match self {
            KeyRecord::InFlight(r) => {
                out.u8(KIND_IN_FLIGHT);
                put_common(&mut out, r.attempt, &r.fingerprint);
                out.u64(r.claimed_at);
                out.u64(r.lease_until);
                out.u64(r.expires_at);
            }
            KeyRecord::Completed(r) => {
                out.u8(KIND_COMPLETED);
                put_common(&mut out, r.attempt, &r.fingerprint);
                out.u64(r.completed_at);
                out.u64(r.expires_at);
                if r.sealed_answer.is_some() {
                    // The answer is in the extension; nothing of it in the clear.
                    put_response(
                        &mut out,
                        &StoredResponse { status: 0, headers: Vec::new(), body: Vec::new() },
                    );
                } else if r.chunks.is_some() {
                    // The body is in the chunk rows; the record keeps the rest.
                    put_response(&mut out, &r.response.head());
                } else {
                    put_response(&mut out, &r.response);
                }
            }
            KeyRecord::Unknown(r) => {
                out.u8(KIND_UNKNOWN);
                put_common(&mut out, r.attempt, &r.fingerprint);
                out.u64(r.since);
                out.u64(r.expires_at);
                let (reason, status) = match r.reason {
                    UnknownReason::OriginTimeout => (1u8, 0u16),
                    UnknownReason::ResetAfterSend => (2, 0),
                    UnknownReason::ResponseTooLarge { status } => (3, status),
                };
                out.u8(reason);
                out.u16(status);
            }
        }
        if !extensions.is_empty() {
            out.u8(extensions.len() as u8);
            for (tag, value) in extensions {
                out.u8(tag);
                out.bytes(value);
            }
        }
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<KeyRecord, DecodeError> {
        KeyRecord::decode_skipping(bytes).map(|(record, _)| record)
    }

    /// [`KeyRecord::decode`], with how many skippable extensions it did not know and skipped.
    /// Such a record re-encodes without them (shorter, or as version 1 when none is left):
    /// that is what skippable means, a fact a newer release added that an older one may drop.
    pub fn decode_skipping(bytes: &[u8]) -> Result<(KeyRecord, usize), DecodeError> {
        let mut skipped = 0;
        let mut input = Reader::new(bytes);
        if input.take(2)? != MAGIC {
            return Err(DecodeError::NotARecord);
        }
        let version = input.u8()?;
        if version != VERSION_1 && version != VERSION_2 {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let kind = input.u8()?;
        let attempt = AttemptId(input.u64()?);
        let fingerprint = Digest256(input.array()?);
        let record = match kind {
            KIND_IN_FLIGHT => KeyRecord::InFlight(InFlight {
                reconcile: None,
                attempt,
                fingerprint,
                origin_attempts: 1,
                claimed_at: input.u64()?,
                lease_until: input.u64()?,
                expires_at: input.u64()?,
                async_job: None,
            }),
            KIND_COMPLETED => {
                let completed_at = input.u64()?;
                let expires_at = input.u64()?;
                let response = read_response(&mut input)?;
                KeyRecord::Completed(Completed {
                    attempt,
                    fingerprint,
                    completed_at,
                    expires_at,
                    response: Arc::new(response),
                    sealed_answer: None,
                    sealed_bound: false,
                    chunks: None,
                })
            }
            KIND_UNKNOWN => {
                let since = input.u64()?;
                let expires_at = input.u64()?;
                let reason_code = input.u8()?;
                let status = input.u16()?;
                let reason = match reason_code {
                    1 => UnknownReason::OriginTimeout,
                    2 => UnknownReason::ResetAfterSend,
                    3 => UnknownReason::ResponseTooLarge { status },
                    other => return Err(DecodeError::BadField(other)),
                };
                KeyRecord::Unknown(Unknown {
                    reconcile: None,
                    attempt,
                    fingerprint,
                    origin_attempts: 1,
                    since,
                    expires_at,
                    reason,
                })
            }
            other => return Err(DecodeError::BadKind(other)),
        };
        let mut record = record;
        if version == VERSION_2 {
            let count = input.u8()?;
            // A record without an extension is written as version 1: a version 2 record
            // with none would be a second encoding of one record (found by the fuzzer).
            if count == 0 {
                return Err(DecodeError::BadField(0));
            }
            let mut seen: Vec<u8> = Vec::new();
            for _ in 0..count {
                let tag = input.u8()?;
                let value = input.bytes()?;
                // One value per fact, in ascending tag order (as written): a repeated tag would
                // make two readings of one record, another order two encodings of one.
                if seen.last().is_some_and(|&last| last >= tag) {
                    return Err(DecodeError::BadField(tag));
                }
                seen.push(tag);
                match (tag, &mut record) {
                    (EXT_ORIGIN_ATTEMPTS, KeyRecord::InFlight(InFlight { origin_attempts, .. }))
                    | (EXT_ORIGIN_ATTEMPTS, KeyRecord::Unknown(Unknown { origin_attempts, .. })) => {
                        let bytes: [u8; 2] = value.try_into().map_err(|_| DecodeError::BadField(tag))?;
                        *origin_attempts = u16::from_be_bytes(bytes);
                    }
                    (
                        EXT_SEALED_ANSWER | EXT_BOUND_SEALED_ANSWER,
                        KeyRecord::Completed(Completed { sealed_answer, sealed_bound, response, .. }),
                    ) => {
                        // Nothing of a sealed answer is stored in the clear, and there is one.
                        let empty =
                            response.status == 0 && response.headers.is_empty() && response.body.is_empty();
                        if !empty || value.is_empty() || sealed_answer.is_some() {
                            return Err(DecodeError::BadField(tag));
                        }
                        *sealed_answer = Some(value.to_vec());
                        *sealed_bound = tag == EXT_BOUND_SEALED_ANSWER;
                    }
                    (EXT_ASYNC_JOB, KeyRecord::InFlight(InFlight { async_job, .. })) => {
                        *async_job = Some(AsyncJob::decode(value).ok_or(DecodeError::BadField(tag))?);
                    }
                    (EXT_CHUNKED_ANSWER, KeyRecord::Completed(Completed { chunks, response, .. })) => {
                        // The body is in the chunk rows, never also inline.
                        if !response.body.is_empty() {
                            return Err(DecodeError::BadField(tag));
                        }
                        *chunks = Some(ChunkManifest::decode(value).ok_or(DecodeError::BadField(tag))?);
                    }
                    (EXT_RECONCILING, KeyRecord::InFlight(InFlight { reconcile, .. }))
                    | (EXT_RECONCILING, KeyRecord::Unknown(Unknown { reconcile, .. })) => {
                        *reconcile = Some(Reconciling::decode(value).ok_or(DecodeError::BadField(tag))?);
                    }
                    // A mark on the reconciliation (read after it: tags ascend), never alone.
                    (
                        EXT_SPELLING_KNOWN,
                        KeyRecord::InFlight(InFlight { reconcile: Some(reconciling), .. }),
                    )
                    | (
                        EXT_SPELLING_KNOWN,
                        KeyRecord::Unknown(Unknown { reconcile: Some(reconciling), .. }),
                    ) if value.is_empty() => {
                        reconciling.spelling_known = true;
                    }
                    (EXT_SPELLING_KNOWN, _) => return Err(DecodeError::BadField(tag)),
                    (tag, _) if tag & EXT_SKIPPABLE != 0 => skipped += 1,
                    (tag, _) => return Err(DecodeError::UnknownExtension(tag)),
                }
            }
        }
        input.finish()?;
        Ok((record, skipped))
    }
}

/// Why stored bytes are not a record this version can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    NotARecord,
    UnsupportedVersion(u8),
    BadKind(u8),
    BadField(u8),
    Truncated,
    NotUtf8,
    TrailingBytes,
    /// A critical extension this version does not know (see the module doc).
    UnknownExtension(u8),
}

/// Said in the operator's words: a log line names what is wrong with the stored bytes
/// (Rust's `Debug` spelling would need its formatting code in the Wasm for these few lines).
impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::NotARecord => f.write_str("not a record (no record header)"),
            DecodeError::UnsupportedVersion(version) => {
                write!(f, "record version {version}, which this release cannot read")
            }
            DecodeError::BadKind(kind) => write!(f, "unknown record kind {kind}"),
            DecodeError::BadField(field) => write!(f, "field {field} holds a value this release cannot read"),
            DecodeError::Truncated => f.write_str("cut short"),
            DecodeError::NotUtf8 => f.write_str("a text field is not UTF-8"),
            DecodeError::TrailingBytes => f.write_str("bytes after the record's end"),
            DecodeError::UnknownExtension(tag) => {
                write!(f, "critical extension {tag}, which this release does not know")
            }
        }
    }
}

const MAGIC: &[u8; 2] = b"IE";
const VERSION_1: u8 = 1;
const VERSION_2: u8 = 2;
const EXT_ORIGIN_ATTEMPTS: u8 = 1;
const EXT_SEALED_ANSWER: u8 = 2;
const EXT_ASYNC_JOB: u8 = 3;
const EXT_CHUNKED_ANSWER: u8 = 4;
const EXT_BOUND_SEALED_ANSWER: u8 = 5;
/// The record version a sealed answer is stored under (bound into its associated data).
pub const SEALED_RECORD_VERSION: u8 = VERSION_2;
/// Extension tags with this bit may be skipped by a reader that does not know them.
const EXT_SKIPPABLE: u8 = 0x80;
/// The reconciliation of an unknown outcome (`core::formats::reconciling::Reconciling`): skippable, since
/// a release that drops it holds the key unknown, as it would have without it.
const EXT_RECONCILING: u8 = EXT_SKIPPABLE | 6;
/// The reconciliation's claim forwarded the key in its one spelling, which the lookup asks
/// for (`core::formats::reconciling::Reconciling::spelling_known`). Skippable: a release that does not
/// know it believes the lookup as it always did.
const EXT_SPELLING_KNOWN: u8 = EXT_SKIPPABLE | 7;
const KIND_IN_FLIGHT: u8 = 1;
const KIND_COMPLETED: u8 = 2;
const KIND_UNKNOWN: u8 = 3;

/// The codec's refusals are the record's: a truncated field, a string that is not UTF-8,
/// bytes after the record.
impl From<CodecError> for DecodeError {
    fn from(error: CodecError) -> DecodeError {
        match error {
            CodecError::Truncated => DecodeError::Truncated,
            CodecError::NotUtf8 => DecodeError::NotUtf8,
            CodecError::TrailingBytes => DecodeError::TrailingBytes,
        }
    }
}

/// `status (u16) ‖ headers ‖ body`.
fn put_response(out: &mut Writer, response: &StoredResponse) {
    out.reserve(response.body.len() + 64);
    out.u16(response.status);
    out.string_pairs(&response.headers);
    out.bytes(&response.body);
}

fn read_response(input: &mut Reader<'_>) -> Result<StoredResponse, DecodeError> {
    let status = input.u16()?;
    // A forged header count is refused before it allocates (`Reader::string_pairs`).
    let headers = input.string_pairs()?;
    let body = input.bytes()?.to_vec();
    Ok(StoredResponse { status, headers, body })
}

fn put_common(out: &mut Writer, attempt: AttemptId, fingerprint: &Digest256) {
    out.u64(attempt.0);
    out.raw(&fingerprint.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the log says of unreadable stored bytes names the version, kind, field or
    /// extension it met, in words rather than Rust's enum syntax.
    #[test]
    fn decode_errors_are_said_in_words() {
        let said = |error: DecodeError| error.to_string();
        assert_eq!(
            said(DecodeError::UnsupportedVersion(9)),
            "record version 9, which this release cannot read"
        );
        assert_eq!(
            said(DecodeError::UnknownExtension(7)),
            "critical extension 7, which this release does not know"
        );
        assert_eq!(said(DecodeError::BadKind(3)), "unknown record kind 3");
        assert_eq!(said(DecodeError::BadField(4)), "field 4 holds a value this release cannot read");
        for error in [
            DecodeError::NotARecord,
            DecodeError::Truncated,
            DecodeError::NotUtf8,
            DecodeError::TrailingBytes,
        ] {
            let text = said(error);
            assert!(text.contains(' ') && text != format!("{error:?}"), "{text}");
        }
    }

    fn fp(n: u8) -> Digest256 {
        Digest256([n; 32])
    }

    /// Appends a length-prefixed value, as `KeyRecord::encode` writes an extension's.
    fn put_bytes(bytes: &mut Vec<u8>, value: &[u8]) {
        let mut out = Writer::new();
        out.bytes(value);
        bytes.extend_from_slice(&out.into_bytes());
    }

    fn samples() -> Vec<KeyRecord> {
        vec![
            KeyRecord::InFlight(InFlight {
                reconcile: None,
                attempt: AttemptId(7),
                fingerprint: fp(1),
                origin_attempts: 1,
                claimed_at: 1_000,
                lease_until: 41_000,
                expires_at: 86_401_000,
                async_job: None,
            }),
            KeyRecord::Completed(Completed {
                attempt: AttemptId(u64::MAX),
                fingerprint: fp(2),
                completed_at: 2_000,
                expires_at: 3_000,
                response: Arc::new(StoredResponse {
                    status: 201,
                    headers: vec![
                        ("content-type".into(), "application/json".into()),
                        ("x-a".into(), "".into()),
                    ],
                    body: b"{\"id\":1}\xff".to_vec(),
                }),
                sealed_answer: None,
                sealed_bound: false,
                chunks: None,
            }),
            KeyRecord::Unknown(Unknown {
                reconcile: None,
                attempt: AttemptId(0),
                fingerprint: fp(3),
                origin_attempts: 1,
                since: 5,
                expires_at: 6,
                reason: UnknownReason::ResponseTooLarge { status: 200 },
            }),
            KeyRecord::Unknown(Unknown {
                reconcile: None,
                attempt: AttemptId(1),
                fingerprint: fp(4),
                origin_attempts: 1,
                since: 5,
                expires_at: 6,
                reason: UnknownReason::OriginTimeout,
            }),
            // Version 2: a sealed answer (the inline response is empty).
            KeyRecord::Completed(Completed {
                attempt: AttemptId(10),
                fingerprint: fp(7),
                completed_at: 2_000,
                expires_at: 3_000,
                response: Arc::new(StoredResponse { status: 0, headers: Vec::new(), body: Vec::new() }),
                sealed_answer: Some(vec![7, b'2', b'0', b'2', b'6', b'-', b'1', b'2', 0, 1, 2]),
                sealed_bound: false,
                chunks: None,
            }),
            // Version 2: with the origin-attempts extension.
            KeyRecord::InFlight(InFlight {
                reconcile: None,
                attempt: AttemptId(8),
                fingerprint: fp(5),
                origin_attempts: 3,
                claimed_at: 1_000,
                lease_until: 41_000,
                expires_at: 86_401_000,
                async_job: None,
            }),
            KeyRecord::Unknown(Unknown {
                reconcile: None,
                attempt: AttemptId(9),
                fingerprint: fp(6),
                origin_attempts: u16::MAX,
                since: 5,
                expires_at: 6,
                reason: UnknownReason::ResetAfterSend,
            }),
            // Version 2: a chunked answer, in the clear and sealed (tag 4).
            KeyRecord::Completed(Completed {
                attempt: AttemptId(11),
                fingerprint: fp(8),
                completed_at: 2_000,
                expires_at: 3_000,
                response: Arc::new(StoredResponse {
                    status: 200,
                    headers: vec![("content-type".into(), "application/octet-stream".into())],
                    body: Vec::new(),
                }),
                sealed_answer: None,
                sealed_bound: false,
                chunks: Some(manifest()),
            }),
            KeyRecord::Completed(Completed {
                attempt: AttemptId(12),
                fingerprint: fp(9),
                completed_at: 2_000,
                expires_at: 3_000,
                response: Arc::new(StoredResponse { status: 0, headers: Vec::new(), body: Vec::new() }),
                sealed_answer: Some(vec![2, b'k', b'1', 0, 1, 2]),
                sealed_bound: false,
                chunks: Some(manifest()),
            }),
        ]
    }

    fn manifest() -> ChunkManifest {
        ChunkManifest { body_len: 5 << 20, chunk_len: 1 << 20, attempt: 11, digests: vec![[3; 32]; 5] }
    }

    /// Only the record's own chunked answer is read from rows; an equal copy, an answer of a
    /// record held whole, or a record with no answer is not.
    #[test]
    fn a_replay_reads_rows_only_for_the_records_own_chunked_answer() {
        let chunked = &samples()[7];
        let KeyRecord::Completed(done) = chunked else { unreachable!() };
        assert_eq!(chunked.chunks_of(&done.response), Some(&manifest()));
        assert_eq!(chunked.chunks_of(&Arc::new((*done.response).clone())), None, "an equal copy");
        let whole = &samples()[1];
        let KeyRecord::Completed(held) = whole else { unreachable!() };
        assert_eq!(whole.chunks_of(&held.response), None, "held whole");
        assert_eq!(samples()[0].chunks_of(&done.response), None, "a claim");
    }

    #[test]
    fn a_chunked_answer_keeps_its_body_out_of_the_record() {
        let chunked = &samples()[7];
        assert_eq!(chunked.version(), 2);
        assert_eq!(chunked.chunks(), Some(&manifest()));
        let KeyRecord::Completed(done) = chunked else { unreachable!() };
        // Even given the whole body, the record holds the head and the manifest only.
        let whole = StoredResponse { body: vec![0xab; 4096], ..(*done.response).clone() };
        let bytes = KeyRecord::Completed(Completed { response: Arc::new(whole), ..done.clone() }).encode();
        assert!(bytes.len() < 512 && !bytes.windows(64).any(|w| w == [0xab; 64]), "{}", bytes.len());
        assert_eq!(KeyRecord::decode(&bytes).as_ref(), Ok(chunked));
        // A stored record with a body inline and tag 4 is refused, as is a bad manifest.
        let mut both = KeyRecord::Completed(Completed {
            response: Arc::new(StoredResponse { body: b"x".to_vec(), ..(*done.response).clone() }),
            chunks: None,
            ..done.clone()
        })
        .encode();
        both[2] = 2;
        both.push(1);
        both.push(EXT_CHUNKED_ANSWER);
        put_bytes(&mut both, &manifest().encode());
        assert_eq!(KeyRecord::decode(&both), Err(DecodeError::BadField(EXT_CHUNKED_ANSWER)));
        let mut bad = chunked.encode();
        let last = bad.len() - 1;
        bad.truncate(last);
        assert!(KeyRecord::decode(&bad).is_err());
        // Tag 4 on a record that is not a completed answer is not a known combination.
        let mut claim = samples()[0].encode();
        claim[2] = 2;
        claim.push(1);
        claim.push(EXT_CHUNKED_ANSWER);
        put_bytes(&mut claim, &manifest().encode());
        assert_eq!(KeyRecord::decode(&claim), Err(DecodeError::UnknownExtension(EXT_CHUNKED_ANSWER)));
    }

    #[test]
    fn a_reader_without_tag_4_refuses_a_chunked_record() {
        // What a release before chunking does: tag 4 is critical (high bit clear), so a
        // reader that does not know it refuses the record (503) rather than replaying a
        // body-less answer or forwarding again.
        assert_eq!(EXT_CHUNKED_ANSWER & EXT_SKIPPABLE, 0);
        // Small answers keep today's layout exactly: version 1, no extension.
        assert_eq!(samples()[1].encode()[2], 1);
    }

    #[test]
    fn records_round_trip() {
        for record in samples() {
            assert_eq!(KeyRecord::decode(&record.encode()), Ok(record));
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for record in samples() {
            let bytes = record.encode();
            for cut in 0..bytes.len() {
                assert!(KeyRecord::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(KeyRecord::decode(&longer), Err(DecodeError::TrailingBytes));
        }
    }

    #[test]
    fn unknown_versions_and_kinds_are_refused() {
        let mut bytes = samples()[0].encode();
        bytes[2] = 3;
        assert_eq!(KeyRecord::decode(&bytes), Err(DecodeError::UnsupportedVersion(3)));
        bytes[2] = 1;
        bytes[3] = 9;
        assert_eq!(KeyRecord::decode(&bytes), Err(DecodeError::BadKind(9)));
        assert_eq!(KeyRecord::decode(b"{}"), Err(DecodeError::NotARecord));
    }

    #[test]
    fn records_without_extensions_stay_version_1() {
        // What the release before version 2 reads: a rollback finds nothing it cannot read.
        for record in &samples()[..4] {
            assert_eq!(record.encode()[2], 1, "{record:?}");
        }
        for record in &samples()[4..] {
            assert_eq!(record.encode()[2], 2, "{record:?}");
        }
        // A version 1 record of an unknown outcome reads as sent once.
        assert_eq!(KeyRecord::decode(&samples()[3].encode()).unwrap().origin_attempts(), 1);
    }

    #[test]
    fn a_reconciliation_round_trips_and_a_release_without_it_may_skip_it() {
        let reconciling = crate::core::formats::reconciling::Reconciling {
            sealed_lookup: vec![9; 48],
            bound_at: 1_700_000_000_000,
            not_found: 404,
            asked: 3,
            next_at: 1_700_000_009_000,
            policy: Box::new(crate::core::format_fixtures::policy()),
            spelling_known: false,
        };
        let unknown = KeyRecord::Unknown(Unknown {
            attempt: AttemptId(5),
            fingerprint: Digest256([3; 32]),
            origin_attempts: 1,
            since: 1_700_000_000_500,
            expires_at: 1_700_086_400_000,
            reason: UnknownReason::ResetAfterSend,
            reconcile: Some(reconciling.clone()),
        });
        let bytes = unknown.encode();
        assert_eq!(bytes[2], VERSION_2, "an extension makes it version 2");
        assert_eq!(KeyRecord::decode(&bytes), Ok(unknown.clone()));
        // Skippable: a release that does not know it reads the record as without it, and
        // holds the key unknown as it always did (never a second forward).
        assert_ne!(EXT_RECONCILING & EXT_SKIPPABLE, 0);
        let KeyRecord::Unknown(plain) = unknown else { unreachable!() };
        let without = KeyRecord::Unknown(Unknown { reconcile: None, ..plain.clone() });
        assert_eq!(without.encode()[2], VERSION_1, "and without it, what the release before wrote");
        // The one spelling's mark (tag 135, after 134) round-trips; a record without it, as
        // the release before wrote every one, reads as from before the one spelling.
        let marked = Reconciling { spelling_known: true, ..reconciling.clone() };
        let with_mark = KeyRecord::Unknown(Unknown { reconcile: Some(marked.clone()), ..plain.clone() });
        let marked_bytes = with_mark.encode();
        assert_eq!(KeyRecord::decode(&marked_bytes), Ok(with_mark));
        assert_eq!(marked_bytes.len(), bytes.len() + 5, "one more extension: its tag and empty value");
        assert!(marked_bytes.ends_with(&[EXT_SPELLING_KNOWN, 0, 0, 0, 0]), "after the reconciliation");
        assert_ne!(EXT_SPELLING_KNOWN & EXT_SKIPPABLE, 0, "a release before reads the record without it");
        // Never without the reconciliation it marks, and never with a value.
        let mut alone = samples()[3].encode();
        alone[2] = VERSION_2;
        alone.extend_from_slice(&[1, EXT_SPELLING_KNOWN, 0, 0, 0, 0]);
        assert!(KeyRecord::decode(&alone).is_err());
        // An unreadable reconciliation is a bad record, not an absent one.
        let mut broken = KeyRecord::Unknown(Unknown { reconcile: Some(reconciling), ..plain }).encode();
        let at = broken.len() - 1;
        broken[at] ^= 0xff;
        assert!(KeyRecord::decode(&broken).is_err());
    }

    #[test]
    fn unknown_extensions_are_refused_unless_skippable() {
        let base = samples()[5].encode();
        // One more extension: bump the count, append tag + empty value.
        let with = |tag: u8| {
            let mut bytes = base.clone();
            let count_at = bytes.len() - (1 + 4 + 2) - 1;
            bytes[count_at] += 1;
            bytes.push(tag);
            bytes.extend_from_slice(&0u32.to_be_bytes());
            bytes
        };
        assert_eq!(KeyRecord::decode(&with(0x7f)), Err(DecodeError::UnknownExtension(0x7f)));
        assert_eq!(KeyRecord::decode(&with(0x90)), Ok(samples()[5].clone()));
        assert_eq!(KeyRecord::decode_skipping(&with(0x90)), Ok((samples()[5].clone(), 1)));
        // Skipped, it is not written again: a record whose only extension was skipped
        // re-encodes as version 1 (found by the fuzzer: a second encoding, by design).
        let only_skippable =
            [&[b'I', b'E', VERSION_2, KIND_IN_FLIGHT][..], &[0; 8 + 32 + 24], &[1, 0x81, 0, 0, 0, 0]]
                .concat();
        let (decoded, skipped) = KeyRecord::decode_skipping(&only_skippable).expect("decodes");
        assert_eq!(skipped, 1);
        assert_eq!(decoded.encode()[2], VERSION_1);
        assert_eq!(decoded.encode().len(), only_skippable.len() - 6);
        // The attempts extension on a completed record is not a known combination.
        let mut completed = samples()[1].encode();
        completed[2] = 2;
        completed.push(1);
        completed.push(EXT_ORIGIN_ATTEMPTS);
        completed.extend_from_slice(&2u32.to_be_bytes());
        completed.extend_from_slice(&3u16.to_be_bytes());
        assert_eq!(KeyRecord::decode(&completed), Err(DecodeError::UnknownExtension(EXT_ORIGIN_ATTEMPTS)));
        // A malformed value is refused.
        let mut short = base.clone();
        let value_len_at = short.len() - 2 - 4;
        short[value_len_at..value_len_at + 4].copy_from_slice(&1u32.to_be_bytes());
        short.pop();
        assert_eq!(KeyRecord::decode(&short), Err(DecodeError::BadField(EXT_ORIGIN_ATTEMPTS)));
    }

    #[test]
    fn a_sealed_answer_leaves_nothing_in_the_clear() {
        let sealed = &samples()[4];
        assert!(sealed.is_sealed());
        assert_eq!(sealed.version(), 2);
        let answer =
            StoredResponse { status: 201, headers: vec![("a".into(), "b".into())], body: b"secret".to_vec() };
        let KeyRecord::Completed(done) = sealed else { unreachable!() };
        // Even given a plaintext response, the encoding writes only the envelope.
        let with_plaintext =
            KeyRecord::Completed(Completed { response: Arc::new(answer.clone()), ..done.clone() });
        let bytes = with_plaintext.encode();
        assert!(!bytes.windows(6).any(|w| w == b"secret"), "no answer byte in the clear");
        // A stored record with both is refused, as is a repeated extension.
        let mut both = KeyRecord::Completed(Completed { sealed_answer: None, ..done.clone() }).encode();
        both[2] = 2;
        let mut forged = KeyRecord::Completed(Completed {
            sealed_answer: None,
            response: Arc::new(answer.clone()),
            ..done.clone()
        })
        .encode();
        forged[2] = 2;
        forged.push(1);
        forged.push(EXT_SEALED_ANSWER);
        forged.extend_from_slice(&3u32.to_be_bytes());
        forged.extend_from_slice(&[1, 2, 3]);
        assert_eq!(KeyRecord::decode(&forged), Err(DecodeError::BadField(EXT_SEALED_ANSWER)));
        both.push(2);
        for _ in 0..2 {
            both.push(EXT_SEALED_ANSWER);
            both.extend_from_slice(&1u32.to_be_bytes());
            both.push(9);
        }
        assert_eq!(KeyRecord::decode(&both), Err(DecodeError::BadField(EXT_SEALED_ANSWER)));
        // The sealed plaintext is the response's own encoding.
        assert_eq!(StoredResponse::decode(&answer.encode()), Ok(answer));
    }

    #[test]
    fn a_forged_header_count_does_not_allocate() {
        let mut bytes = samples()[1].encode();
        // The header count sits after magic, version, kind, attempt, fingerprint, two
        // timestamps and the status.
        let at = 2 + 1 + 1 + 8 + 32 + 8 + 8 + 2;
        bytes[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(KeyRecord::decode(&bytes), Err(DecodeError::Truncated));
    }

    /// Records written by earlier releases, as they are in production storage: each must
    /// still decode to what it said. Add a file here before any change to the encoding.
    #[test]
    fn records_written_by_earlier_releases_still_decode() {
        use crate::core::formats::job::{JobPhase, DEFAULT_MAX_SENDS};
        let fixtures = include_str!("../testdata/records-70e30c9.txt");
        let unhex = |text: &str| -> Vec<u8> {
            (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
        };
        let mut seen = Vec::new();
        for line in fixtures.lines().filter(|line| !line.starts_with('#')) {
            let (name, hex) = line.split_once(' ').unwrap();
            let record = KeyRecord::decode(&unhex(hex)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(record.fingerprint(), Digest256([0x11; 32]), "{name}");
            match (name, &record) {
                ("in_flight_v1", KeyRecord::InFlight(claim)) => {
                    assert_eq!((claim.attempt, claim.origin_attempts), (AttemptId(0x0102030405060708), 1));
                    assert_eq!(claim.lease_until, 1_790_000_014_000);
                    assert!(claim.async_job.is_none());
                }
                ("in_flight_second_send", KeyRecord::InFlight(claim)) => assert_eq!(claim.origin_attempts, 2),
                ("completed_v1", KeyRecord::Completed(done)) => {
                    assert_eq!(done.response.status, 201);
                    assert_eq!(done.response.body, br#"{"id":"ch_1","amount":1000}"#);
                    assert_eq!(done.expires_at, 1_790_086_401_000);
                }
                ("completed_sealed", KeyRecord::Completed(done)) => {
                    let envelope =
                        crate::core::formats::seal::Envelope::decode(done.sealed_answer.as_ref().unwrap())
                            .unwrap();
                    assert_eq!(envelope.key_id, "2026-06");
                    // Sealed before answers were bound to attempt and fingerprint (tag 2).
                    assert!(!done.sealed_bound);
                }
                ("completed_chunked", KeyRecord::Completed(done)) => {
                    let manifest = done.chunks.as_ref().unwrap();
                    assert_eq!((manifest.body_len, manifest.count(), manifest.attempt), (2_500_000, 3, 9));
                }
                ("unknown_timeout", KeyRecord::Unknown(unknown)) => {
                    assert_eq!(unknown.reason, UnknownReason::OriginTimeout)
                }
                ("unknown_too_large", KeyRecord::Unknown(unknown)) => {
                    assert_eq!(unknown.reason, UnknownReason::ResponseTooLarge { status: 200 });
                    assert_eq!(unknown.origin_attempts, 3);
                }
                ("job_waiting", KeyRecord::InFlight(claim)) => {
                    let job = claim.async_job.as_ref().unwrap();
                    assert_eq!((job.phase, job.next_attempt_at), (JobPhase::Waiting, 1_790_000_003_000));
                    assert_eq!(job.sealed_request, vec![0x77; 24]);
                    // Written before jobs had a send cap: the default, as the origin did not
                    // deduplicate.
                    assert_eq!(job.max_sends, DEFAULT_MAX_SENDS);
                    // Its request was sealed before requests were bound: opened as it was.
                    assert!(!job.request_bound);
                }
                ("job_gave_up", KeyRecord::InFlight(claim)) => {
                    let job = claim.async_job.as_ref().unwrap();
                    assert_eq!(job.phase, JobPhase::GaveUp);
                    // Its origin deduplicated with MAX_ORIGIN_ATTEMPTS=3: that is its cap.
                    assert_eq!(job.max_sends, 3);
                }
                (name, record) => panic!("{name}: unexpected {record:?}"),
            }
            seen.push(name);
        }
        assert_eq!(seen.len(), 9, "every fixture was read");
    }

    /// A version 2 record with no extension is refused: it is written as version 1, and
    /// one record has one encoding (the fuzzer's find, kept as a seed in fuzz/seeds/record).
    #[test]
    fn a_version_2_record_without_extensions_is_refused() {
        let record = samples().into_iter().find(|r| r.version() == VERSION_1).expect("a version 1 sample");
        let mut bytes = record.encode();
        bytes[2] = VERSION_2;
        bytes.push(0);
        assert_eq!(KeyRecord::decode(&bytes), Err(DecodeError::BadField(0)));
    }
}
