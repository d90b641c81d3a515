//! Every stored or handed-over format, as one release wrote it, decoded by today's code.
//!
//! `testdata/formats-<commit>.txt` holds one value per line (a name, a space, the hex or
//! text of its encoding) written by the release at that commit: records of every kind
//! (sealed and bound answers, chunked answers, asynchronous jobs), the job's sealed
//! request, a chunk manifest, a sealed envelope, a stored response, the object policy and
//! the asynchronous settings the Worker hands its object. The test decodes each line with
//! today's decoder and compares it with the value the release encoded, so a change of
//! layout that cannot read what production stores fails here, before it ships.
//!
//! A new layout adds a new file (its commit in the name); the old files stay.
//!
//! The binary formats (all spelled by `core::primitives::codec`) are also decoded from arbitrary bytes
//! and from changed copies of these values: whatever decodes must encode to bytes that
//! decode to it again, so a value read from storage and written back is the value read.

use std::sync::Arc;

use proptest::prelude::*;

use super::formats::chunk_manifest::ChunkManifest;
use super::formats::fingerprint::Digest256;
use super::formats::job::{AsyncJob, JobPhase, StoredRequest};
use super::formats::key_record::{
    AttemptId, Completed, InFlight, KeyRecord, StoredResponse, Unknown, UnknownReason,
};
use super::formats::seal::Envelope;
use super::formats::stored_terms::decode_text;
use super::key_rules::machine::async_job::AsyncConfig;
use super::vocabulary::key_terms::KeyTerms;
use super::vocabulary::key_terms::Mode;
use super::vocabulary::key_terms::{Timing, WaiterLimits};
use super::vocabulary::outcome_table::{OutcomeTable, StatusSet};

/// One value of a stored or handed-over format.
#[derive(Debug, PartialEq)]
enum Stored {
    KeyRecord(KeyRecord),
    Job(AsyncJob),
    Request(StoredRequest),
    Manifest(ChunkManifest),
    Envelope(Envelope),
    Response(StoredResponse),
    Policy(KeyTerms),
    Async(AsyncConfig),
}

impl Stored {
    /// Decodes `payload` as the same format as `self`.
    fn decode_like(&self, payload: &str) -> Option<Stored> {
        match self {
            Stored::Policy(_) => Some(Stored::Policy(decode_text(payload)?)),
            Stored::Async(_) => Some(Stored::Async(AsyncConfig::decode(payload)?)),
            _ => {
                let bytes: Vec<u8> = (0..payload.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&payload[i..i + 2], 16).unwrap())
                    .collect();
                self.decode_bytes_like(&bytes)
            }
        }
    }

    /// Decodes `bytes` as the same binary format as `self` (`None` for a text format).
    fn decode_bytes_like(&self, bytes: &[u8]) -> Option<Stored> {
        Some(match self {
            Stored::KeyRecord(_) => Stored::KeyRecord(KeyRecord::decode(bytes).ok()?),
            Stored::Job(_) => Stored::Job(AsyncJob::decode(bytes)?),
            Stored::Request(_) => Stored::Request(StoredRequest::decode(bytes)?),
            Stored::Manifest(_) => Stored::Manifest(ChunkManifest::decode(bytes)?),
            Stored::Envelope(_) => Stored::Envelope(Envelope::decode(bytes)?),
            Stored::Response(_) => Stored::Response(StoredResponse::decode(bytes).ok()?),
            Stored::Policy(_) | Stored::Async(_) => return None,
        })
    }

    /// The value's encoding in a binary format (`None` for a text format).
    fn encode_bytes(&self) -> Option<Vec<u8>> {
        Some(match self {
            Stored::KeyRecord(value) => value.encode(),
            Stored::Job(value) => value.encode(),
            Stored::Request(value) => value.encode(),
            Stored::Manifest(value) => value.encode(),
            Stored::Envelope(value) => value.encode(),
            Stored::Response(value) => value.encode(),
            Stored::Policy(_) | Stored::Async(_) => return None,
        })
    }
}

fn fingerprint() -> Digest256 {
    Digest256([0x11; 32])
}

fn response() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("x-request-id".into(), "r-1".into()),
        ],
        body: br#"{"id":"ch_1","amount":1000}"#.to_vec(),
    }
}

fn manifest() -> ChunkManifest {
    ChunkManifest {
        body_len: 2_500_000,
        chunk_len: 1 << 20,
        attempt: 9,
        digests: vec![[0x33; 32], [0x44; 32], [0x55; 32]],
    }
}

fn envelope() -> Envelope {
    Envelope { key_id: "2026-12".into(), nonce: [0x22; 12], ciphertext: vec![0x66; 40] }
}

/// A policy with every field set (also the envelope's tests' sample).
pub(super) fn policy() -> KeyTerms {
    KeyTerms {
        timing: Timing { ttl_ms: 86_400_000, duplicate_wait_ms: 10_000, origin_timeout_ms: 30_000 },
        limits: WaiterLimits { max_waiters: 100, max_waiting_bytes: 8 << 20 },
        outcome: OutcomeTable {
            release: StatusSet::of(&[401, 403, 429, 503]).unwrap(),
            unknown: StatusSet::of(&[502, 504]).unwrap(),
            release_requires_header: true,
            via_cloudflare: true,
        },
        max_stored_response_bytes: 10 << 20,
        max_origin_attempts: Some(3),
        mode: Mode::Enforce,
        origin_service: Some("PAYMENTS".into()),
        key_header: None,
    }
}

fn job(phase: JobPhase) -> AsyncJob {
    AsyncJob {
        phase,
        deadline: 1_790_003_600_000,
        next_attempt_at: 1_790_000_003_000,
        max_backoff_ms: 30_000,
        unknown_seen: phase == JobPhase::GaveUp,
        probe_origin: true,
        max_sends: 3,
        request_bound: true,
        policy: Box::new(policy()),
        sealed_request: if phase == JobPhase::GaveUp { Vec::new() } else { envelope().encode() },
    }
}

fn in_flight(attempt: u64, origin_attempts: u16, async_job: Option<AsyncJob>) -> KeyRecord {
    KeyRecord::InFlight(InFlight {
        reconcile: None,
        attempt: AttemptId(attempt),
        fingerprint: fingerprint(),
        origin_attempts,
        claimed_at: 1_790_000_000_000,
        lease_until: 1_790_000_040_000,
        expires_at: 1_790_086_400_000,
        async_job,
    })
}

fn completed(attempt: u64, sealed: bool, bound: bool, chunks: Option<ChunkManifest>) -> KeyRecord {
    let head_only = StoredResponse { status: 0, headers: Vec::new(), body: Vec::new() };
    let response = match (sealed, &chunks) {
        (true, _) => head_only,
        (false, Some(_)) => StoredResponse { body: Vec::new(), ..response() },
        (false, None) => response(),
    };
    KeyRecord::Completed(Completed {
        attempt: AttemptId(attempt),
        fingerprint: fingerprint(),
        completed_at: 1_790_000_001_000,
        expires_at: 1_790_086_401_000,
        response: Arc::new(response),
        sealed_answer: sealed.then(|| envelope().encode()),
        sealed_bound: bound,
        chunks,
    })
}

fn unknown(attempt: u64, origin_attempts: u16, reason: UnknownReason) -> KeyRecord {
    KeyRecord::Unknown(Unknown {
        reconcile: None,
        attempt: AttemptId(attempt),
        fingerprint: fingerprint(),
        origin_attempts,
        since: 1_790_000_030_000,
        expires_at: 1_790_086_430_000,
        reason,
    })
}

/// The values of today's release, by the names its fixture file uses.
fn values() -> Vec<(&'static str, Stored)> {
    vec![
        ("record_in_flight", Stored::KeyRecord(in_flight(1, 1, None))),
        ("record_in_flight_second_send", Stored::KeyRecord(in_flight(2, 2, None))),
        ("record_job_waiting", Stored::KeyRecord(in_flight(3, 1, Some(job(JobPhase::Waiting))))),
        ("record_job_sending", Stored::KeyRecord(in_flight(4, 2, Some(job(JobPhase::Sending))))),
        ("record_job_gave_up", Stored::KeyRecord(in_flight(5, 3, Some(job(JobPhase::GaveUp))))),
        ("record_completed", Stored::KeyRecord(completed(6, false, false, None))),
        ("record_completed_sealed_bound", Stored::KeyRecord(completed(7, true, true, None))),
        ("record_completed_chunked", Stored::KeyRecord(completed(8, false, false, Some(manifest())))),
        (
            "record_completed_chunked_sealed_bound",
            Stored::KeyRecord(completed(9, true, true, Some(manifest()))),
        ),
        ("record_unknown_timeout", Stored::KeyRecord(unknown(10, 1, UnknownReason::OriginTimeout))),
        ("record_unknown_reset", Stored::KeyRecord(unknown(11, 2, UnknownReason::ResetAfterSend))),
        (
            "record_unknown_too_large",
            Stored::KeyRecord(unknown(12, 1, UnknownReason::ResponseTooLarge { status: 200 })),
        ),
        ("job_waiting", Stored::Job(job(JobPhase::Waiting))),
        (
            "stored_request",
            Stored::Request(StoredRequest {
                scope_salt: [0x44; 32],
                method: "POST".into(),
                target: "https://origin.example/v1/charges?expand=customer".into(),
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    ("idempotency-key".into(), "k-1".into()),
                ],
                body: br#"{"amount":1000}"#.to_vec(),
            }),
        ),
        ("chunk_manifest", Stored::Manifest(manifest())),
        ("envelope", Stored::Envelope(envelope())),
        ("stored_response", Stored::Response(response())),
        ("object_policy", Stored::Policy(policy())),
        (
            "object_policy_observe",
            Stored::Policy(KeyTerms {
                mode: Mode::Observe,
                origin_service: None,
                max_origin_attempts: None,
                ..policy()
            }),
        ),
        (
            "async_config",
            Stored::Async(AsyncConfig {
                prefer: true,
                deadline_ms: 3_600_000,
                max_backoff_ms: 30_000,
                max_sends: 3,
            }),
        ),
    ]
}

/// Decodes every line of a fixture file; the names it holds.
fn decode_fixture_file(fixtures: &str) -> Vec<&str> {
    let expected = values();
    let mut seen = Vec::new();
    for line in fixtures.lines().filter(|line| !line.starts_with('#') && !line.is_empty()) {
        let (name, payload) = line.split_once(' ').expect("a name and a payload");
        let (_, value) = expected
            .iter()
            .find(|(known, _)| *known == name)
            .unwrap_or_else(|| panic!("{name}: no expected value"));
        let decoded =
            value.decode_like(payload).unwrap_or_else(|| panic!("{name}: does not decode any more"));
        assert_eq!(&decoded, value, "{name}: decodes to another value");
        seen.push(name);
    }
    seen
}

#[test]
fn formats_written_by_the_release_of_2026_12_03_still_decode() {
    let seen = decode_fixture_file(include_str!("testdata/formats-c54e2d5.txt"));
    assert_eq!(seen.len(), values().len(), "every value has its line");
}

/// Job version 3 (the policy stored versioned, `core::formats::stored_terms::encode`), as the
/// release that introduced it writes it.
#[test]
fn jobs_of_version_3_still_decode() {
    let seen = decode_fixture_file(include_str!("testdata/formats-jobs-v3.txt"));
    assert_eq!(seen, ["record_job_waiting", "record_job_sending", "record_job_gave_up", "job_waiting"]);
}

/// The stored job's own codec (`core::formats::job`, with the policy through
/// `core::formats::stored_terms`) writes today's jobs byte for byte as the release that
/// introduced version 3 did, when the policy was written by the envelope's codec.
#[test]
fn jobs_of_version_3_encode_to_the_bytes_stored() {
    let expected = values();
    let fixtures = include_str!("testdata/formats-jobs-v3.txt");
    let mut compared = 0;
    for line in fixtures.lines().filter(|line| !line.starts_with('#') && !line.is_empty()) {
        let (name, payload) = line.split_once(' ').expect("a name and a payload");
        let (_, value) = expected.iter().find(|(known, _)| *known == name).expect("an expected value");
        let encoded = value.encode_bytes().expect("a binary format");
        let hex: String = encoded.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, payload, "{name}: written otherwise than stored");
        compared += 1;
    }
    assert_eq!(compared, 4);
}

/// One change to a value's bytes: overwrite, flip a bit, insert, remove, or cut there.
fn edit() -> impl Strategy<Value = (prop::sample::Index, u8, u8)> {
    (any::<prop::sample::Index>(), any::<u8>(), 0u8..5)
}

fn apply(bytes: &mut Vec<u8>, (at, byte, kind): &(prop::sample::Index, u8, u8)) {
    let end = at.index(bytes.len() + 1);
    let within = end.min(bytes.len().saturating_sub(1));
    match kind {
        0 if !bytes.is_empty() => bytes[within] = *byte,
        1 if !bytes.is_empty() => bytes[within] ^= 1 << (byte % 8),
        2 => bytes.insert(end, *byte),
        3 if !bytes.is_empty() => {
            bytes.remove(within);
        }
        _ => bytes.truncate(end),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_048, ..ProptestConfig::default() })]

    /// For every binary format: bytes that decode (arbitrary ones, or a fixture value's
    /// encoding with a few changes) re-encode to bytes that decode to the same value, and
    /// encoding that value again gives the same bytes.
    #[test]
    fn whatever_decodes_re_encodes_to_itself(
        noise in proptest::collection::vec(any::<u8>(), 0..160),
        edits in proptest::collection::vec(edit(), 0..6),
    ) {
        for (name, value) in values() {
            let Some(encoded) = value.encode_bytes() else { continue };
            let mut changed = encoded;
            for one in &edits {
                apply(&mut changed, one);
            }
            for input in [&noise, &changed] {
                let Some(decoded) = value.decode_bytes_like(input) else { continue };
                let again = decoded.encode_bytes().expect("a binary format");
                let redecoded = value.decode_bytes_like(&again);
                prop_assert_eq!(redecoded.as_ref(), Some(&decoded), "{}: decode(encode(decode(b)))", name);
                let encoded_again = redecoded.and_then(|value| value.encode_bytes());
                prop_assert_eq!(encoded_again, Some(again), "{}: encoding is stable", name);
            }
        }
    }
}
