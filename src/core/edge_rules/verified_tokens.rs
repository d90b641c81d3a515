//! Tokens that verified, as one isolate remembers them: a client sends one access token
//! many times, and a signature check is most of the cost of a verified scope.
//!
//! Owns when a remembered verification may be reused and what is forgotten; never sees a
//! clock (each call is handed the time in milliseconds since the epoch). The runtime
//! (`runtime::identity`) keeps one per isolate and asks it before checking a signature.
//!
//! 1. A verification is found by `jwt::verification_id`: the very token that verified,
//!    read for the same claim.
//! 2. It is reused for at most [`VERIFIED_TOKEN_TTL_MS`] and only while the token's
//!    `exp`/`nbf` still hold (checked on every use), so a key removed from the JWKS stops
//!    verifying within the JWKS cache time plus that, and an expired token is refused as
//!    one that was never seen.
//! 3. At most [`MAX_VERIFIED_TOKENS`] are kept; one more starts the memo again (cheaper
//!    than tracking age, and a miss costs only a signature check).

use std::collections::HashMap;

use crate::core::primitives::jwt::{Identity, Validity};

/// How long a verification is reused, at most.
pub const VERIFIED_TOKEN_TTL_MS: u64 = 600_000;
/// Verifications kept per isolate; past this the memo starts again.
pub const MAX_VERIFIED_TOKENS: usize = 1_024;

/// The tokens that verified in this isolate, by verification id.
#[derive(Debug, Default)]
pub struct VerifiedTokens {
    tokens: HashMap<[u8; 32], Remembered>,
}

/// A token that verified, and until when that may be reused.
#[derive(Debug)]
struct Remembered {
    identity: Identity,
    validity: Validity,
    until_ms: u64,
}

impl VerifiedTokens {
    /// The identity of the token `id` if it verified before and may be reused at `now_ms`
    /// (rule 2); one that may not is forgotten.
    pub fn recall(&mut self, id: &[u8; 32], now_ms: u64) -> Option<Identity> {
        let remembered = self.tokens.get(id)?;
        if now_ms < remembered.until_ms && remembered.validity.contains(now_ms / 1_000) {
            return Some(remembered.identity.clone());
        }
        self.tokens.remove(id);
        None
    }

    /// Remembers that the token `id` verified at `now_ms` into `identity`, valid in `validity`.
    pub fn remember(&mut self, id: [u8; 32], identity: Identity, validity: Validity, now_ms: u64) {
        if self.tokens.len() >= MAX_VERIFIED_TOKENS {
            self.tokens.clear();
        }
        let remembered = Remembered { identity, validity, until_ms: now_ms + VERIFIED_TOKEN_TTL_MS };
        self.tokens.insert(id, remembered);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::primitives::jwt::{ClaimPath, ClaimValue, Validation};

    const NOW_S: u64 = 1_700_000_000;
    const NOW_MS: u64 = NOW_S * 1_000;

    fn identity(subject: &str) -> Identity {
        Identity {
            issuer: None,
            claim_path: ClaimPath::parse("sub").unwrap(),
            value: ClaimValue::String(subject.to_owned()),
        }
    }

    /// The window of a token with these claims, under a leeway of 60 s.
    fn validity(claims: serde_json::Value) -> Validity {
        let rules = Validation { issuer: None, audience: None, leeway_seconds: 60 };
        Validity::of(claims.as_object().unwrap(), &rules)
    }

    fn id(n: usize) -> [u8; 32] {
        let mut id = [0; 32];
        id[..8].copy_from_slice(&(n as u64).to_be_bytes());
        id
    }

    #[test]
    fn a_verification_is_reused_for_10_minutes_at_most() {
        let mut memo = VerifiedTokens::default();
        let long_lived = validity(json!({"exp": NOW_S + 86_400}));
        memo.remember(id(1), identity("acct_1"), long_lived, NOW_MS);
        assert_eq!(memo.recall(&id(1), NOW_MS), Some(identity("acct_1")));
        assert_eq!(memo.recall(&id(2), NOW_MS), None, "only the very token");
        assert_eq!(memo.recall(&id(1), NOW_MS + VERIFIED_TOKEN_TTL_MS - 1), Some(identity("acct_1")));
        assert_eq!(memo.recall(&id(1), NOW_MS + VERIFIED_TOKEN_TTL_MS), None);
        // Forgotten: even an earlier time no longer finds it.
        assert_eq!(memo.recall(&id(1), NOW_MS), None);
    }

    #[test]
    fn a_verification_is_never_reused_outside_the_tokens_exp_and_nbf() {
        let mut memo = VerifiedTokens::default();
        memo.remember(id(1), identity("acct_1"), validity(json!({"exp": NOW_S + 10})), NOW_MS);
        // The leeway of 60 s counts, as it did when the token verified.
        assert!(memo.recall(&id(1), (NOW_S + 70) * 1_000).is_some());
        assert_eq!(memo.recall(&id(1), (NOW_S + 71) * 1_000), None);
        assert_eq!(memo.recall(&id(1), NOW_MS), None, "forgotten once expired");
        let not_before = validity(json!({"exp": NOW_S + 3_600, "nbf": NOW_S + 100}));
        memo.remember(id(2), identity("acct_2"), not_before, NOW_MS);
        assert_eq!(memo.recall(&id(2), NOW_MS), None, "before nbf - leeway");
    }

    #[test]
    fn the_memo_starts_again_when_full() {
        let mut memo = VerifiedTokens::default();
        let long_lived = validity(json!({"exp": NOW_S + 86_400}));
        for n in 0..MAX_VERIFIED_TOKENS {
            memo.remember(id(n), identity("acct"), long_lived, NOW_MS);
        }
        assert!((0..MAX_VERIFIED_TOKENS).all(|n| memo.recall(&id(n), NOW_MS).is_some()));
        memo.remember(id(MAX_VERIFIED_TOKENS), identity("acct_new"), long_lived, NOW_MS);
        assert!((0..MAX_VERIFIED_TOKENS).all(|n| memo.recall(&id(n), NOW_MS).is_none()));
        assert_eq!(memo.recall(&id(MAX_VERIFIED_TOKENS), NOW_MS), Some(identity("acct_new")));
    }

    /// The rules above, as a hash map keeps them (the memo's layout before it became a
    /// sorted list): what any sequence of calls must answer.
    #[derive(Default)]
    struct Model(std::collections::HashMap<[u8; 32], (Identity, Validity, u64)>);

    impl Model {
        fn recall(&mut self, id: &[u8; 32], now_ms: u64) -> Option<Identity> {
            let (identity, validity, until_ms) = self.0.get(id)?;
            if now_ms < *until_ms && validity.contains(now_ms / 1_000) {
                return Some(identity.clone());
            }
            self.0.remove(id);
            None
        }

        fn remember(&mut self, id: [u8; 32], identity: Identity, validity: Validity, now_ms: u64) {
            if self.0.len() >= MAX_VERIFIED_TOKENS {
                self.0.clear();
            }
            self.0.insert(id, (identity, validity, now_ms + VERIFIED_TOKEN_TTL_MS));
        }
    }

    proptest::proptest! {
        #[test]
        fn any_sequence_of_calls_answers_as_a_hash_map_would(
            calls in proptest::collection::vec((proptest::bool::ANY, 0u8..24, 0u8..4, 0u64..1_500_000, 0u64..200), 1..300),
        ) {
            let mut memo = VerifiedTokens::default();
            let mut model = Model::default();
            for (remember, first_byte, last_byte, later_ms, exp_after_s) in calls {
                // Ids that differ in their first and last bytes.
                let mut token = [7; 32];
                token[0] = first_byte;
                token[31] = last_byte;
                let now_ms = NOW_MS + later_ms;
                if remember {
                    let window = validity(json!({"exp": NOW_S + exp_after_s}));
                    let subject = format!("acct_{first_byte}_{last_byte}_{later_ms}");
                    memo.remember(token, identity(&subject), window, now_ms);
                    model.remember(token, identity(&subject), window, now_ms);
                } else {
                    proptest::prop_assert_eq!(memo.recall(&token, now_ms), model.recall(&token, now_ms));
                }
            }
        }
    }
}
