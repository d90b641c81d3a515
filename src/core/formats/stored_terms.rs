//! The terms a key is held under (`core::vocabulary::key_terms::KeyTerms`) as a stored format: how an
//! asynchronous job (`core::key_rules::machine::async_job`) and the lookup of an unknown outcome
//! (`core::key_rules::reconcile`) keep it in the key's record, and how the jobs of earlier releases
//! kept it.
//!
//! This format is the storage's own: the envelope the Worker hands the object
//! (`core::edge_rules::wire`) has a layout of its own for them, so a change to that message changes
//! nothing stored. Today both write the same fields in the same order (the stored form
//! was the envelope's when it was introduced), which the fixtures of
//! `testdata/formats-jobs-v3.txt` pin.

use crate::core::primitives::codec::{Reader, Writer};
use crate::core::primitives::key::IDEMPOTENCY_KEY;
use crate::core::primitives::names::{is_binding_name, is_header_name};
use crate::core::vocabulary::key_terms::{KeyTerms, Mode, Timing, WaiterLimits};
use crate::core::vocabulary::outcome_table::{OutcomeTable, StatusSet};

/// The version of a stored policy ([`encode`]).
const POLICY_VERSION: u8 = 1;

const POLICY_VIA_CLOUDFLARE: u8 = 1;
const POLICY_RELEASE_REQUIRES_HEADER: u8 = 2;
const POLICY_OBSERVE: u8 = 4;
/// The route takes its key from another header than `Idempotency-Key`, whose name follows
/// the service binding. A policy without it is stored exactly as before the flag existed,
/// so only routes that set `key_header` store the longer form; a release that does not
/// know the flag reads the job as unreadable (503), sending nothing.
const POLICY_KEY_HEADER: u8 = 8;

/// A policy as it is stored: `version ‖ fields`, the fields in order: timing, waiter
/// limits, stored-answer cap, flags, the two status lists, the send cap (0: the origin does
/// not deduplicate), the service binding (empty: none), and with [`POLICY_KEY_HEADER`] the
/// key header's lowercase name.
pub fn encode(policy: &KeyTerms) -> Vec<u8> {
    let mut out = Writer::with_capacity(96);
    out.u8(POLICY_VERSION);
    out.u64(policy.timing.ttl_ms);
    out.u64(policy.timing.duplicate_wait_ms);
    out.u64(policy.timing.origin_timeout_ms);
    out.u32(policy.limits.max_waiters as u32);
    out.u64(policy.limits.max_waiting_bytes);
    out.u64(policy.max_stored_response_bytes);
    out.u8((u8::from(policy.outcome.via_cloudflare) * POLICY_VIA_CLOUDFLARE)
        | (u8::from(policy.outcome.release_requires_header) * POLICY_RELEASE_REQUIRES_HEADER)
        | (u8::from(policy.mode == Mode::Observe) * POLICY_OBSERVE)
        | (u8::from(policy.key_header.is_some()) * POLICY_KEY_HEADER));
    for set in [&policy.outcome.release, &policy.outcome.unknown] {
        let statuses: Vec<u16> = set.iter().collect();
        out.u8(statuses.len() as u8);
        for status in statuses {
            out.u16(status);
        }
    }
    out.u16(policy.max_origin_attempts.unwrap_or(0));
    out.string(policy.origin_service.as_deref().unwrap_or(""));
    if let Some(name) = &policy.key_header {
        out.string(name);
    }
    out.into_bytes()
}

/// The inverse of [`encode`]: `None` for another version or anything malformed (the job or
/// lookup holding it is then unreadable: 503, never a send on a guess).
pub fn decode(bytes: &[u8]) -> Option<KeyTerms> {
    let mut input = Reader::new(bytes);
    if input.u8().ok()? != POLICY_VERSION {
        return None;
    }
    let timing = Timing {
        ttl_ms: input.u64().ok()?,
        duplicate_wait_ms: input.u64().ok()?,
        origin_timeout_ms: input.u64().ok()?,
    };
    let limits =
        WaiterLimits { max_waiters: input.u32().ok()? as usize, max_waiting_bytes: input.u64().ok()? };
    let max_stored_response_bytes = input.u64().ok()?;
    let flags = input.u8().ok()?;
    if flags > POLICY_VIA_CLOUDFLARE | POLICY_RELEASE_REQUIRES_HEADER | POLICY_OBSERVE | POLICY_KEY_HEADER {
        return None;
    }
    let mut statuses = || -> Option<StatusSet> {
        let count = usize::from(input.u8().ok()?);
        let list = (0..count).map(|_| input.u16()).collect::<Result<Vec<u16>, _>>().ok()?;
        let set = StatusSet::of(&list)?;
        // One set has one encoding: ascending, no repeats.
        (set.iter().collect::<Vec<_>>() == list).then_some(set)
    };
    let release = statuses()?;
    let unknown = statuses()?;
    let max_origin_attempts = match input.u16().ok()? {
        0 => None,
        sends => Some(sends),
    };
    let origin_service = match input.string().ok()? {
        name if name.is_empty() => None,
        name if is_binding_name(&name) => Some(name),
        _ => return None,
    };
    let key_header = if flags & POLICY_KEY_HEADER != 0 {
        // One name has one encoding: lower case, and never the default's (which is
        // written as no name at all).
        match input.string().ok()? {
            name if is_header_name(&name)
                && name == name.to_ascii_lowercase()
                && name != IDEMPOTENCY_KEY.lowercase =>
            {
                Some(name)
            }
            _ => return None,
        }
    } else {
        None
    };
    input.finish().ok()?;
    Some(KeyTerms {
        timing,
        limits,
        outcome: OutcomeTable {
            release,
            unknown,
            release_requires_header: flags & POLICY_RELEASE_REQUIRES_HEADER != 0,
            via_cloudflare: flags & POLICY_VIA_CLOUDFLARE != 0,
        },
        max_stored_response_bytes,
        max_origin_attempts,
        mode: if flags & POLICY_OBSERVE != 0 { Mode::Observe } else { Mode::Enforce },
        origin_service,
        key_header,
    })
}

/// The positional text form of a policy, as releases before `core::edge_rules::wire` sent it and as
/// asynchronous jobs of versions 1 and 2 store it (read, never written; the encoder is kept
/// to prove that the reader reads it):
/// `ttl_ms,wait_ms,timeout_ms,max_waiters,max_waiting_bytes,max_stored_bytes,flags,release,unknown,max_attempts,service`:
/// flags bit 0 is "via Cloudflare", bit 1 "release requires the header", bit 2 "observe
/// mode"; the status lists are joined with `.` and may be empty; `max_attempts` is 0 when
/// the origin does not deduplicate; `service` is the origin's binding name or empty.
pub fn encode_text(policy: &KeyTerms) -> String {
    let statuses = |set: &StatusSet| set.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(".");
    let flags = u8::from(policy.outcome.via_cloudflare)
        | u8::from(policy.outcome.release_requires_header) << 1
        | u8::from(policy.mode == Mode::Observe) << 2;
    format!(
        "{},{},{},{},{},{},{},{},{},{},{}",
        policy.timing.ttl_ms,
        policy.timing.duplicate_wait_ms,
        policy.timing.origin_timeout_ms,
        policy.limits.max_waiters,
        policy.limits.max_waiting_bytes,
        policy.max_stored_response_bytes,
        flags,
        statuses(&policy.outcome.release),
        statuses(&policy.outcome.unknown),
        policy.max_origin_attempts.unwrap_or(0),
        policy.origin_service.as_deref().unwrap_or(""),
    )
}

/// The inverse of [`encode_text`].
pub fn decode_text(value: &str) -> Option<KeyTerms> {
    let mut parts = value.split(',');
    let mut number = || parts.next()?.trim().parse::<u64>().ok();
    let timing = Timing { ttl_ms: number()?, duplicate_wait_ms: number()?, origin_timeout_ms: number()? };
    let limits = WaiterLimits { max_waiters: usize::try_from(number()?).ok()?, max_waiting_bytes: number()? };
    let max_stored_response_bytes = number()?;
    let flags = number()?;
    let mut statuses = || -> Option<StatusSet> {
        let list = parts.next()?;
        let numbers = list
            .split('.')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u16>().ok())
            .collect::<Option<Vec<_>>>()?;
        StatusSet::of(&numbers)
    };
    let outcome = OutcomeTable {
        release: statuses()?,
        unknown: statuses()?,
        release_requires_header: flags & 2 != 0,
        via_cloudflare: flags & 1 != 0,
    };
    let max_origin_attempts = match parts.next()?.parse::<u16>().ok()? {
        0 => None,
        n => Some(n),
    };
    let origin_service = match parts.next()? {
        "" => None,
        name if is_binding_name(name) => Some(name.to_owned()),
        _ => return None,
    };
    let mode = if flags & 4 != 0 { Mode::Observe } else { Mode::Enforce };
    (flags < 8 && parts.next().is_none()).then_some(KeyTerms {
        timing,
        limits,
        outcome,
        max_stored_response_bytes,
        max_origin_attempts,
        mode,
        origin_service,
        // The text form predates `key_header`: every route it was written for used
        // `Idempotency-Key`.
        key_header: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::format_fixtures::policy;
    use proptest::prelude::*;

    #[test]
    fn a_stored_policy_round_trips_and_is_versioned() {
        let bytes = encode(&policy());
        assert_eq!(decode(&bytes), Some(policy()));
        let observe =
            KeyTerms { mode: Mode::Observe, origin_service: None, max_origin_attempts: None, ..policy() };
        assert_eq!(decode(&encode(&observe)), Some(observe));
        let mut future = bytes.clone();
        future[0] = 9;
        assert_eq!(decode(&future), None);
    }

    /// A policy without a key header is written byte for byte as before `key_header`
    /// existed (these bytes are the policy inside `testdata/formats-jobs-v3.txt`'s
    /// `job_waiting`), so no release mix sees a change on a route that does not set it.
    #[test]
    fn a_policy_without_a_key_header_is_written_as_before() {
        let hex: String = encode(&policy()).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "010000000005265c00000000000000271000000000000075300000006400000000008000000000000000a0000003040191019301ad01f70201f601f80003000000085041594d454e5453"
        );
    }

    #[test]
    fn a_key_header_round_trips_in_one_encoding() {
        let routed = KeyTerms { key_header: Some("x-request-id".into()), ..policy() };
        let bytes = encode(&routed);
        assert_eq!(decode(&bytes), Some(routed.clone()));
        assert_eq!(decode(&bytes).map(|p| p.key_header().to_owned()), Some("x-request-id".to_owned()));
        assert_eq!(policy().key_header(), "idempotency-key");
        // Another spelling of a name, the default's name, or no name at all: not one
        // policy's encoding.
        for name in ["X-Request-Id", "idempotency-key", "", "x request"] {
            let mut odd = encode(&policy());
            odd[POLICY_FLAGS_AT] |= POLICY_KEY_HEADER;
            odd.extend((name.len() as u32).to_be_bytes());
            odd.extend(name.as_bytes());
            assert_eq!(decode(&odd), None, "{name:?}");
        }
        let mut named = encode(&policy());
        named[POLICY_FLAGS_AT] |= POLICY_KEY_HEADER;
        named.extend(12u32.to_be_bytes());
        named.extend(b"x-request-id");
        assert_eq!(decode(&named), Some(routed));
    }

    /// Where the flags byte sits in an encoded policy: version, three timings, the waiter
    /// count and bytes, the stored-answer cap.
    const POLICY_FLAGS_AT: usize = 1 + 8 * 3 + 4 + 8 + 8;

    proptest! {
        /// Whatever the bytes, reading a stored policy never panics.
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
        }
    }
}
