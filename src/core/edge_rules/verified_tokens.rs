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
//! 4. A token not recalled is checked under the HS256 secret when it is signed HS256 (no
//!    secret: no key), and under the JWKS keys otherwise ([`VerifiedTokens::begin`]); only
//!    a signature that verified is remembered ([`VerifiedTokens::end`]).

use std::collections::HashMap;

use super::scope::ScopeConfig;
use crate::core::primitives::jwt::{
    self, verification_id, Algorithm, ClaimPath, Identity, Token, Unverified, Validation, Validity,
};

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

/// Imported verification keys kept per isolate (an import costs more than a check), by the
/// key's public JWK, or by `"HS256"` for the one HS256 secret: at most [`MAX_IMPORTED_KEYS`]
/// (rotation leaves old keys behind); one more starts the list again, like the memo (rule 3).
#[derive(Debug)]
pub struct ImportedKeys<K> {
    keys: Vec<(String, K)>,
}

/// Imported keys kept per isolate; past this the list starts again.
pub const MAX_IMPORTED_KEYS: usize = 64;

impl<K> Default for ImportedKeys<K> {
    fn default() -> Self {
        ImportedKeys { keys: Vec::new() }
    }
}

impl<K: Clone> ImportedKeys<K> {
    /// The key imported under `id`, if it is kept.
    pub fn get(&self, id: &str) -> Option<K> {
        self.keys.iter().find(|(kept, _)| kept == id).map(|(_, key)| key.clone())
    }

    /// Keeps `key`, imported under `id`.
    pub fn keep(&mut self, id: &str, key: K) {
        if self.keys.len() >= MAX_IMPORTED_KEYS {
            self.keys.clear();
        }
        self.keys.push((id.to_owned(), key));
    }
}

/// What a token's signature is checked under (rule 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySource<'c> {
    /// The HS256 secret (`SCOPE_JWT_HS256_SECRET`), as raw HMAC key bytes.
    Secret(&'c [u8]),
    /// The keys `core::edge_rules::jwks_cache::candidate_keys` chooses.
    Jwks,
}

/// A token's verification, as [`VerifiedTokens::begin`] starts it.
#[derive(Debug)]
pub enum Verification<'a> {
    /// It verified before and may be reused: no signature check.
    Recalled(Identity),
    /// Check its signature under `keys`, then hand the result to [`VerifiedTokens::end`].
    Check(Pending<'a>),
}

/// A token whose claims hold and whose signature is to be checked.
#[derive(Debug)]
pub struct Pending<'a> {
    id: [u8; 32],
    identity: Identity,
    pub token: Token<'a>,
    pub keys: KeySource<'a>,
}

impl Pending<'_> {
    pub fn algorithm(&self) -> Algorithm {
        self.token.algorithm
    }
}

impl VerifiedTokens {
    /// How `token` (read for `claim`) is verified at `now_ms` (rules 1, 2 and 4): recalled,
    /// or checked under the key source its algorithm names; or why it cannot verify
    /// (its structure, its claims, no secret for HS256), before any crypto.
    pub fn begin<'a>(
        &mut self,
        token: &'a str,
        config: &'a ScopeConfig,
        claim: &ClaimPath,
        now_ms: u64,
    ) -> Result<Verification<'a>, Unverified> {
        let id = verification_id(claim, token);
        if let Some(identity) = self.recall(&id, now_ms) {
            return Ok(Verification::Recalled(identity));
        }
        let (token, identity) = jwt::prepare(token, &config.validation, claim, now_ms / 1_000)?;
        let keys = match token.algorithm {
            Algorithm::Hs256 => {
                KeySource::Secret(config.hs256_secret.as_ref().ok_or(Unverified::NoKey)?.bytes())
            }
            Algorithm::Rs256 | Algorithm::Es256 | Algorithm::EdDsa => KeySource::Jwks,
        };
        Ok(Verification::Check(Pending { id, identity, token, keys }))
    }

    /// The identity of `pending` once its signature was checked at `now_ms` (`verified`),
    /// remembered for reuse under `rules`; a signature that did not verify is refused.
    pub fn end(
        &mut self,
        pending: Pending<'_>,
        verified: bool,
        rules: &Validation,
        now_ms: u64,
    ) -> Result<Identity, Unverified> {
        if !verified {
            return Err(Unverified::Signature);
        }
        let validity = Validity::of(&pending.token.claims, rules);
        self.remember(pending.id, pending.identity.clone(), validity, now_ms);
        Ok(pending.identity)
    }

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
    use crate::core::primitives::jwt::ClaimValue;

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

    #[test]
    fn imported_keys_are_found_by_id_and_start_again_when_full() {
        let mut keys = ImportedKeys::default();
        for n in 0..MAX_IMPORTED_KEYS {
            keys.keep(&format!("k{n}"), n);
        }
        assert_eq!(keys.get("k0"), Some(0));
        assert_eq!(keys.get(&format!("k{}", MAX_IMPORTED_KEYS - 1)), Some(MAX_IMPORTED_KEYS - 1));
        assert_eq!(keys.get("HS256"), None);
        keys.keep("HS256", 99);
        assert_eq!((keys.get("k0"), keys.get("HS256")), (None, Some(99)), "started again");
    }

    /// The scope configuration of `vars` (a claim of `sub`, plus these).
    fn scope_config(vars: &[(&'static str, &str)]) -> ScopeConfig {
        let mut all = vec![(crate::core::edge_rules::scope::VAR_JWT_CLAIM, "sub")];
        all.extend_from_slice(vars);
        let lookup = |name: &str| all.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        crate::core::edge_rules::config::Config::from_vars(lookup).unwrap().scope
    }

    /// A token signed (with a dummy signature of the right length) under `alg`.
    fn token(alg: &str, subject: &str) -> String {
        use crate::core::primitives::jwt::base64url_encode as b64;
        let header = json!({"alg": alg, "typ": "JWT", "kid": "k1"}).to_string();
        let claims = json!({"sub": subject, "exp": NOW_S + 300}).to_string();
        let signature = vec![
            7u8;
            if alg == "RS256" {
                256
            } else if alg == "HS256" {
                32
            } else {
                64
            }
        ];
        format!("{}.{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()), b64(&signature))
    }

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn an_hs256_token_is_checked_under_the_secret_and_others_under_the_jwks() {
        let claim = ClaimPath::parse("sub").unwrap();
        let with_secret = scope_config(&[(crate::core::edge_rules::scope::VAR_JWT_HS256_SECRET, SECRET)]);
        let mut memo = VerifiedTokens::default();
        let hs = token("HS256", "acct_1");
        match memo.begin(&hs, &with_secret, &claim, NOW_MS) {
            Ok(Verification::Check(pending)) => {
                assert_eq!(pending.keys, KeySource::Secret(SECRET.as_bytes()));
                assert_eq!(pending.algorithm(), Algorithm::Hs256);
            }
            other => panic!("{other:?}"),
        }
        for alg in ["RS256", "ES256", "EdDSA"] {
            let other = token(alg, "acct_1");
            match memo.begin(&other, &with_secret, &claim, NOW_MS) {
                Ok(Verification::Check(pending)) => assert_eq!(pending.keys, KeySource::Jwks, "{alg}"),
                other => panic!("{alg}: {other:?}"),
            }
        }
        // Without the secret an HS256 token has no key, whatever the JWKS holds.
        let without =
            scope_config(&[(crate::core::edge_rules::scope::VAR_JWKS_URL, "https://idp.example/jwks")]);
        assert_eq!(memo.begin(&hs, &without, &claim, NOW_MS).unwrap_err(), Unverified::NoKey);
        // The claims are checked first: an expired token is refused before any key is chosen.
        let later = (NOW_S + 10_000) * 1_000;
        assert_eq!(memo.begin(&hs, &with_secret, &claim, later).unwrap_err(), Unverified::Expired);
    }

    #[test]
    fn only_a_signature_that_verified_is_remembered_and_then_recalled() {
        let claim = ClaimPath::parse("sub").unwrap();
        let config = scope_config(&[(crate::core::edge_rules::scope::VAR_JWT_HS256_SECRET, SECRET)]);
        let mut memo = VerifiedTokens::default();
        let hs = token("HS256", "acct_1");
        let begin = |memo: &mut VerifiedTokens| match memo.begin(&hs, &config, &claim, NOW_MS).unwrap() {
            Verification::Check(pending) => Some(pending),
            Verification::Recalled(_) => None,
        };
        let failed = begin(&mut memo).expect("first seen: checked");
        assert_eq!(memo.end(failed, false, &config.validation, NOW_MS), Err(Unverified::Signature));
        let passed = begin(&mut memo).expect("a failed check is not remembered");
        let expected =
            Identity { issuer: None, claim_path: claim.clone(), value: ClaimValue::String("acct_1".into()) };
        assert_eq!(memo.end(passed, true, &config.validation, NOW_MS), Ok(expected.clone()));
        match memo.begin(&hs, &config, &claim, NOW_MS + 1).unwrap() {
            Verification::Recalled(identity) => assert_eq!(identity, expected),
            other => panic!("{other:?}"),
        }
        // Remembered for the claim it was read for: read for another route's claim, the
        // same token is checked again, never recalled into the first claim's identity.
        let other_claim = ClaimPath::parse("exp").unwrap();
        match memo.begin(&hs, &config, &other_claim, NOW_MS + 1).unwrap() {
            Verification::Check(pending) => assert_eq!(pending.algorithm(), Algorithm::Hs256),
            other => panic!("another claim is not recalled: {other:?}"),
        }
        // Remembered within the token's own `exp` (plus the leeway), not past it.
        let past_exp = (NOW_S + 361) * 1_000;
        assert_eq!(memo.begin(&hs, &config, &claim, past_exp).unwrap_err(), Unverified::Expired);
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
