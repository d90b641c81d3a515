//! The lookup of an unknown outcome as the key's record stores it (record extension tag
//! 0x86): when the claim was bound, how often the origin was asked and when next, the
//! route's policy (`core::formats::stored_terms`) and the sealed lookup. The format's own
//! encoding, versioned; what a lookup's answer means is `core::key_rules::reconcile`'s.

use super::stored_terms;
use crate::core::primitives::codec::{Reader, Writer};
use crate::core::primitives::time::Millis;
use crate::core::vocabulary::key_terms::KeyTerms;

/// What a key's record keeps for its reconciliation (record extension, `core::formats::key_record`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciling {
    /// The lookup as a sealed `core::formats::job::StoredRequest` (`GET`, the URL, the scope
    /// headers, the scope salt), bound to `bound_at` and the record's fingerprint.
    pub sealed_lookup: Vec<u8>,
    /// When the lookup was sealed (the claim's time): part of the seal's binding.
    pub bound_at: Millis,
    pub not_found: u16,
    /// Lookups made so far that said nothing.
    pub asked: u16,
    /// When the alarm asks next (0: not before the outcome is unknown).
    pub next_at: Millis,
    /// The route's policy as the claim had it: the alarm has no request to read it from
    /// (the lookup's timeout, the answer's cap and TTL, the origin's service binding).
    pub policy: Box<KeyTerms>,
    /// The claim forwarded the key in its one spelling, the lookup's (`core::primitives::key` rule 6).
    /// Not so for a claim made before that rule (its record has no mark of it,
    /// `core::formats::key_record`): its first attempt carried the client's own spelling, perhaps
    /// `"k"` where the lookup asks for `k`, so its lookup's "not found" is not believed
    /// (rule 7); "executed" still is.
    pub spelling_known: bool,
}

const RECONCILING_VERSION: u8 = 1;

impl Reconciling {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Writer::with_capacity(self.sealed_lookup.len() + 32);
        out.u8(RECONCILING_VERSION);
        out.bytes(&self.sealed_lookup);
        out.u64(self.bound_at);
        out.u16(self.not_found);
        out.u16(self.asked);
        out.u64(self.next_at);
        out.bytes(&stored_terms::encode(&self.policy));
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Option<Reconciling> {
        let mut input = Reader::new(bytes);
        if input.u8().ok()? != RECONCILING_VERSION {
            return None;
        }
        let sealed_lookup = input.bytes().ok()?.to_vec();
        let reconciling = Reconciling {
            sealed_lookup,
            bound_at: input.u64().ok()?,
            not_found: input.u16().ok()?,
            asked: input.u16().ok()?,
            next_at: input.u64().ok()?,
            policy: Box::new(stored_terms::decode(input.bytes().ok()?)?),
            // Kept beside the extension, as a mark of its own (`core::formats::key_record`).
            spelling_known: false,
        };
        input.finish().ok()?;
        (!reconciling.sealed_lookup.is_empty()).then_some(reconciling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extension_round_trips_and_refuses_what_it_cannot_read() {
        let reconciling = Reconciling {
            sealed_lookup: vec![1, 2, 3],
            bound_at: 7,
            not_found: 404,
            asked: 2,
            next_at: 99,
            policy: Box::new(crate::core::format_fixtures::policy()),
            spelling_known: false,
        };
        assert_eq!(Reconciling::decode(&reconciling.encode()), Some(reconciling.clone()));
        let mut other_version = reconciling.encode();
        other_version[0] = 2;
        assert_eq!(Reconciling::decode(&other_version), None);
        let mut longer = reconciling.encode();
        longer.push(0);
        assert_eq!(Reconciling::decode(&longer), None);
        let empty = Reconciling { sealed_lookup: Vec::new(), ..reconciling };
        assert_eq!(Reconciling::decode(&empty.encode()), None);
    }
}
