//! An asynchronous job as the key's record stores it (record extension tag 3): where the
//! job stands, its deadline and backoff, the route's policy (`core::formats::stored_terms`) and the
//! sealed request it sends. The format's own encoding, versioned; what a job does next is
//! `core::key_rules::machine::async_job`'s.

use super::stored_terms;
use crate::core::primitives::codec::{Reader, Writer};
use crate::core::primitives::time::Millis;
use crate::core::vocabulary::key_terms::KeyTerms;

/// The request a job sends: what is sealed into the record. Headers are the end-to-end
/// ones the Worker hands the object (credentials included, which is why it is sealed).
/// It also carries the caller scope's key salt, which the alarm needs to seal the answer
/// (`core::formats::seal`) in an object that no request has reached since a restart; sealed, it
/// is no fingerprint of the caller's credential either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRequest {
    pub scope_salt: [u8; 32],
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl StoredRequest {
    /// `version 1 ‖ scope salt (32 bytes) ‖ method ‖ target ‖ header count ‖ (name,
    /// value)* ‖ body`, each length-prefixed (u32, big-endian).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Writer::with_capacity(self.body.len() + self.target.len() + 256);
        out.u8(1);
        out.raw(&self.scope_salt);
        out.string(&self.method);
        out.string(&self.target);
        out.string_pairs(&self.headers);
        out.bytes(&self.body);
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Option<StoredRequest> {
        let mut input = Reader::new(bytes);
        let version = input.u8().ok()?;
        if !(1..=JOB_VERSION).contains(&version) {
            return None;
        }
        let scope_salt = input.array().ok()?;
        let method = input.string().ok()?;
        let target = input.string().ok()?;
        let headers = input.string_pairs().ok()?;
        let body = input.bytes().ok()?.to_vec();
        input.finish().ok()?;
        Some(StoredRequest { scope_salt, method, target, headers, body })
    }
}

/// Where a job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobPhase {
    /// Waiting for its next attempt at `next_attempt_at`.
    Waiting,
    /// An attempt was claimed (the record's `attempt`, with its lease) and sent, or is
    /// being sent.
    Sending,
    /// The deadline came with no execution: the next poll gets 503 and releases the key.
    GaveUp,
}

/// An asynchronous job: record extension tag 3, on an in-flight record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncJob {
    pub phase: JobPhase,
    /// No attempt starts at or after it.
    pub deadline: Millis,
    pub next_attempt_at: Millis,
    pub max_backoff_ms: u64,
    /// Whether some attempt's outcome was unknown (it may have executed): the job can then
    /// never say "never executed".
    pub unknown_seen: bool,
    /// Whether the origin may be probed with a TCP connect before a send.
    pub probe_origin: bool,
    /// The most sends of this job (rule 5).
    pub max_sends: u16,
    /// Whether `sealed_request` is bound to the job's claim time and fingerprint
    /// (`core::formats::seal::bound_request_associated_data`): jobs written since version 2.
    pub request_bound: bool,
    /// The route's policy, as the Worker handed it over with the job's first request.
    /// Stored versioned (`core::formats::stored_terms::encode`) since job version 3; versions 1 and 2
    /// stored the positional text (`stored_terms::encode_text`), still read. A policy
    /// that cannot be read makes the job unreadable: 503, never a send on a guess. Boxed:
    /// every cached record would otherwise carry its size.
    pub policy: Box<KeyTerms>,
    /// The sealed [`StoredRequest`] (an encoded `core::formats::seal::Envelope`); empty once the
    /// job gave up (nothing is kept that is no longer needed).
    pub sealed_request: Vec<u8>,
}

impl AsyncJob {
    /// `version 3 ‖ phase ‖ deadline ‖ next_attempt_at ‖ max_backoff_ms ‖ flags ‖ max_sends
    /// (u16) ‖ policy ‖ sealed request`, the policy versioned (`core::formats::stored_terms::encode`).
    /// Versions 1 and 2 (read, never written) hold the policy as positional text; version 1
    /// has no `max_sends`: such a job takes the policy's `MAX_ORIGIN_ATTEMPTS` where the
    /// origin deduplicates, else [`DEFAULT_MAX_SENDS`]. A release that knows only earlier
    /// versions refuses a later one (the record reads as unreadable: 503, never a send).
    pub fn encode(&self) -> Vec<u8> {
        let policy = stored_terms::encode(&self.policy);
        let mut out = Writer::with_capacity(self.sealed_request.len() + policy.len() + 50);
        out.u8(JOB_VERSION);
        out.u8(match self.phase {
            JobPhase::Waiting => 0,
            JobPhase::Sending => 1,
            JobPhase::GaveUp => 2,
        });
        out.u64(self.deadline);
        out.u64(self.next_attempt_at);
        out.u64(self.max_backoff_ms);
        out.u8(u8::from(self.unknown_seen)
            | u8::from(self.probe_origin) << 1
            | u8::from(self.request_bound) << 2);
        out.u16(self.max_sends);
        out.bytes(&policy);
        out.bytes(&self.sealed_request);
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Option<AsyncJob> {
        let mut input = Reader::new(bytes);
        let version = input.u8().ok()?;
        if !(1..=JOB_VERSION).contains(&version) {
            return None;
        }
        let phase = match input.u8().ok()? {
            0 => JobPhase::Waiting,
            1 => JobPhase::Sending,
            2 => JobPhase::GaveUp,
            _ => return None,
        };
        let deadline = input.u64().ok()?;
        let next_attempt_at = input.u64().ok()?;
        let max_backoff_ms = input.u64().ok()?;
        let flags = input.u8().ok()?;
        // Version 1 had two flags; version 2 adds "the request is bound" (bit 2).
        if flags > if version == 1 { 3 } else { 7 } {
            return None;
        }
        let stored_max_sends = match version {
            1 => None,
            _ => Some(input.u16().ok()?).filter(|&sends| sends >= 1),
        };
        if version > 1 && stored_max_sends.is_none() {
            return None;
        }
        let policy = Box::new(match version {
            1 | 2 => stored_terms::decode_text(&input.string().ok()?)?,
            _ => stored_terms::decode(input.bytes().ok()?)?,
        });
        let sealed_request = input.bytes().ok()?.to_vec();
        // A job that can still send holds its request.
        if phase != JobPhase::GaveUp && sealed_request.is_empty() {
            return None;
        }
        let max_sends = stored_max_sends.unwrap_or(policy.max_origin_attempts.unwrap_or(DEFAULT_MAX_SENDS));
        input.finish().ok()?;
        Some(AsyncJob {
            phase,
            deadline,
            next_attempt_at,
            max_backoff_ms,
            unknown_seen: flags & 1 != 0,
            probe_origin: flags & 2 != 0,
            max_sends,
            request_bound: flags & 4 != 0,
            policy,
            sealed_request,
        })
    }
}

/// A job's send cap where none was stored (jobs written before the cap was: version 1),
/// and that the origin does not deduplicate: `MAX_ORIGIN_ATTEMPTS`'s default.
pub const DEFAULT_MAX_SENDS: u16 = 5;

/// The job encoding written now (see [`AsyncJob::encode`]).
const JOB_VERSION: u8 = 3;
