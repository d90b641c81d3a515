//! JSON Web Tokens (RFC 7515/7519) as far as scoping needs them: structure, claims and the
//! choice of key. No signature is checked here.
//!
//! Owns the token's parsing, the claim rules and the JWKS format; never sees a clock (the
//! time is passed in), the network or a crypto primitive. The runtime verifies the
//! signature with WebCrypto over the key this module chooses (the crypto seam, as in
//! rustls' `CryptoProvider`).
//!
//! 1. A token is three base64url parts (no padding, canonical) separated by dots, at most
//!    [`MAX_TOKEN_BYTES`]. The header and the payload are JSON objects.
//! 2. The header's `alg` must be `RS256`, `ES256`, `EdDSA` or `HS256`. `none` and anything
//!    else never verify. A header with `crit` is refused (no extension is understood).
//! 3. The key decides the algorithm. Every JWKS key carries one algorithm, fixed by its type
//!    (`RSA` → `RS256`, `EC` P-256 → `ES256`, `OKP` Ed25519 → `EdDSA`); a key is used only
//!    for a token whose `alg` is that algorithm. `oct` keys in a JWKS are ignored, so a JWKS
//!    key is never an HMAC secret; `HS256` verifies only with the configured secret.
//! 4. With a `kid`, only keys with that `kid` are candidates; a `kid` no key has is
//!    [`Unverified::UnknownKid`] (`jwks_cache` may refetch a JWKS URL once). Without one,
//!    every key of the algorithm is.
//! 5. Claims: `exp` is required, and `exp`/`nbf` must hold within the leeway; `iss` must
//!    equal the configured issuer and `aud` contain the configured audience, when set. The
//!    scope claim, found by its path ([`ClaimPath`]: a JSON pointer such as `/org/id`, or
//!    a dotted path such as `org.id`, each walked one way only), must be a string or a
//!    number.
//!
//! Anything that fails is an [`Unverified`] reason, and the scope rules (`scope.rs`) refuse
//! the request for it: 503 `identity-unavailable` while the keys cannot be had, 401
//! `unverified-credential` otherwise. Only a credential that is no token at all
//! ([`Unverified::Malformed`]) is scoped by its hash, unless a token is required. A reason
//! names a rule, never a value from the token.

use serde_json::{Map, Value};

/// Longest token accepted. Header values are bounded by the platform anyway; this bounds
/// the work per request.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Most keys kept from one JWKS: a token without `kid` is tried against each of its
/// algorithm.
pub const MAX_JWKS_KEYS: usize = 32;
/// Smallest RSA modulus accepted, in bytes (2048 bits).
const MIN_RSA_MODULUS_BYTES: usize = 256;
/// Largest RSA modulus accepted, in bytes (8192 bits).
const MAX_RSA_MODULUS_BYTES: usize = 1024;

/// The members of a WebCrypto algorithm parameter object, as (name, value).
pub type WebCryptoParams = &'static [(&'static str, &'static str)];

/// A signature algorithm the worker verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// ECDSA on P-256 with SHA-256; the JWS signature is raw `r || s` (64 bytes).
    Es256,
    /// Ed25519.
    EdDsa,
    /// HMAC with SHA-256, only with `SCOPE_JWT_HS256_SECRET`.
    Hs256,
}

impl Algorithm {
    /// The algorithm a JOSE header names, exactly as spelled there; `None` for `none` and
    /// every algorithm not listed.
    pub fn from_jose(name: &str) -> Option<Algorithm> {
        match name {
            "RS256" => Some(Algorithm::Rs256),
            "ES256" => Some(Algorithm::Es256),
            "EdDSA" => Some(Algorithm::EdDsa),
            "HS256" => Some(Algorithm::Hs256),
            _ => None,
        }
    }

    /// WebCrypto's parameters for this algorithm, as (member, value) pairs: the key import's
    /// and the `verify` call's. ECDSA names its hash at `verify`, and its signature is raw
    /// `r || s`, which is JWS's format too.
    pub fn webcrypto_params(self) -> (WebCryptoParams, WebCryptoParams) {
        match self {
            Algorithm::Rs256 => {
                (&[("name", "RSASSA-PKCS1-v1_5"), ("hash", "SHA-256")], &[("name", "RSASSA-PKCS1-v1_5")])
            }
            Algorithm::Es256 => {
                (&[("name", "ECDSA"), ("namedCurve", "P-256")], &[("name", "ECDSA"), ("hash", "SHA-256")])
            }
            Algorithm::EdDsa => (&[("name", "Ed25519")], &[("name", "Ed25519")]),
            Algorithm::Hs256 => (&[("name", "HMAC"), ("hash", "SHA-256")], &[("name", "HMAC")]),
        }
    }

    /// [`Algorithm::webcrypto_params`] as the JSON objects WebCrypto takes: the import's and
    /// the `verify` call's.
    pub fn webcrypto_json(self) -> (String, String) {
        let object = |pairs: WebCryptoParams| {
            let members = pairs.iter().map(|(name, value)| ((*name).to_owned(), Value::from(*value)));
            Value::Object(members.collect()).to_string()
        };
        let (import, check) = self.webcrypto_params();
        (object(import), object(check))
    }

    pub fn jose_name(self) -> &'static str {
        match self {
            Algorithm::Rs256 => "RS256",
            Algorithm::Es256 => "ES256",
            Algorithm::EdDsa => "EdDSA",
            Algorithm::Hs256 => "HS256",
        }
    }

    /// Whether a signature of this length can be one of this algorithm's.
    fn signature_length_fits(self, length: usize) -> bool {
        match self {
            Algorithm::Es256 | Algorithm::EdDsa => length == 64,
            Algorithm::Hs256 => length == 32,
            Algorithm::Rs256 => (MIN_RSA_MODULUS_BYTES..=MAX_RSA_MODULUS_BYTES).contains(&length),
        }
    }
}

/// Why a token did not verify. Safe to log: it names a rule, never a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unverified {
    /// Not three base64url parts with JSON object header and payload, or too long.
    Malformed,
    /// `alg` is `none`, or an algorithm the worker does not verify.
    Algorithm,
    /// The header lists critical extensions.
    CriticalExtension,
    /// No configured key for the token's algorithm (e.g. `HS256` without the secret, or a
    /// `kid` whose key has another algorithm).
    NoKey,
    /// A `kid` that no configured key has.
    UnknownKid,
    /// The JWKS URL could not be fetched and no earlier copy is at hand.
    KeysUnavailable,
    /// The signature does not verify under any candidate key.
    Signature,
    /// No `exp` claim, or not a number.
    MissingExpiry,
    Expired,
    NotYetValid,
    Issuer,
    Audience,
    /// The scope claim is missing, or neither a string nor a number.
    Claim,
}

impl Unverified {
    /// Whether the token might verify later, with the same signature and claims: only when
    /// the keys to check it could not be had (`KeysUnavailable`; `jwks_cache` answers an
    /// unknown `kid` that it may not refetch yet as this too). Every other reason is final.
    pub fn is_transient(self) -> bool {
        self == Unverified::KeysUnavailable
    }

    /// A short stable name for logs.
    pub fn slug(self) -> &'static str {
        match self {
            Unverified::Malformed => "malformed",
            Unverified::Algorithm => "algorithm",
            Unverified::CriticalExtension => "critical-extension",
            Unverified::NoKey => "no-key",
            Unverified::UnknownKid => "unknown-kid",
            Unverified::KeysUnavailable => "keys-unavailable",
            Unverified::Signature => "signature",
            Unverified::MissingExpiry => "missing-exp",
            Unverified::Expired => "expired",
            Unverified::NotYetValid => "not-yet-valid",
            Unverified::Issuer => "issuer",
            Unverified::Audience => "audience",
            Unverified::Claim => "claim",
        }
    }

    /// Every reason, for tests and for parsing a slug back.
    pub const ALL: [Unverified; 13] = [
        Unverified::Malformed,
        Unverified::Algorithm,
        Unverified::CriticalExtension,
        Unverified::NoKey,
        Unverified::UnknownKid,
        Unverified::KeysUnavailable,
        Unverified::Signature,
        Unverified::MissingExpiry,
        Unverified::Expired,
        Unverified::NotYetValid,
        Unverified::Issuer,
        Unverified::Audience,
        Unverified::Claim,
    ];

    pub fn from_slug(slug: &str) -> Option<Unverified> {
        Unverified::ALL.into_iter().find(|reason| reason.slug() == slug)
    }
}

/// A token split and decoded, its signature not yet checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Token<'t> {
    pub algorithm: Algorithm,
    pub kid: Option<String>,
    /// `header.payload` as sent: what the signature covers.
    pub signing_input: &'t [u8],
    pub signature: Vec<u8>,
    pub claims: Map<String, Value>,
}

/// Splits and decodes a compact JWS. Checks the structure and the header only.
pub fn parse(token: &str) -> Result<Token<'_>, Unverified> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Unverified::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Unverified::Malformed);
    };
    let header = json_object(&base64url_decode(header_b64).ok_or(Unverified::Malformed)?)?;
    let algorithm = match header.get("alg") {
        Some(Value::String(name)) => Algorithm::from_jose(name).ok_or(Unverified::Algorithm)?,
        _ => return Err(Unverified::Malformed),
    };
    if header.contains_key("crit") {
        return Err(Unverified::CriticalExtension);
    }
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(Unverified::Malformed),
    };
    let claims = json_object(&base64url_decode(payload_b64).ok_or(Unverified::Malformed)?)?;
    let signature = base64url_decode(signature_b64).ok_or(Unverified::Malformed)?;
    if !algorithm.signature_length_fits(signature.len()) {
        return Err(Unverified::Signature);
    }
    let signing_input = &token.as_bytes()[..header_b64.len() + 1 + payload_b64.len()];
    Ok(Token { algorithm, kid, signing_input, signature, claims })
}

fn json_object(bytes: &[u8]) -> Result<Map<String, Value>, Unverified> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Unverified::Malformed),
    }
}

/// The claim rules, built once from configuration (like `jsonwebtoken::Validation`): a
/// token is checked against these, never against what its own header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validation {
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub leeway_seconds: u64,
}

/// Checks `exp`, `nbf`, `iss` and `aud` at `now_seconds` (seconds since the epoch).
pub fn check_claims(
    claims: &Map<String, Value>,
    rules: &Validation,
    now_seconds: u64,
) -> Result<(), Unverified> {
    let now = now_seconds as f64;
    let leeway = rules.leeway_seconds as f64;
    let exp = claims.get("exp").and_then(Value::as_f64).ok_or(Unverified::MissingExpiry)?;
    if now > exp + leeway {
        return Err(Unverified::Expired);
    }
    match claims.get("nbf") {
        None => {}
        Some(nbf) => match nbf.as_f64() {
            Some(nbf) if now + leeway >= nbf => {}
            Some(_) => return Err(Unverified::NotYetValid),
            None => return Err(Unverified::Malformed),
        },
    }
    match (claims.get("iss"), &rules.issuer) {
        (Some(Value::String(iss)), Some(expected)) if iss == expected => {}
        (_, Some(_)) => return Err(Unverified::Issuer),
        // Unchecked, but it is part of the scope: it must be a string when present.
        (None | Some(Value::String(_)), None) => {}
        (Some(_), None) => return Err(Unverified::Issuer),
    }
    if let Some(expected) = &rules.audience {
        let contains = match claims.get("aud") {
            Some(Value::String(aud)) => aud == expected,
            Some(Value::Array(auds)) => auds.iter().any(|aud| aud.as_str() == Some(expected)),
            _ => false,
        };
        if !contains {
            return Err(Unverified::Audience);
        }
    }
    Ok(())
}

/// The time window in which a token's `exp` and `nbf` hold, leeway included: what a
/// cached verification must still check on every use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Validity {
    from_seconds: f64,
    until_seconds: f64,
}

impl Validity {
    /// The window of claims that [`check_claims`] accepted.
    pub fn of(claims: &Map<String, Value>, rules: &Validation) -> Validity {
        let leeway = rules.leeway_seconds as f64;
        let exp = claims.get("exp").and_then(Value::as_f64).unwrap_or(f64::NEG_INFINITY);
        let nbf = claims.get("nbf").and_then(Value::as_f64).unwrap_or(f64::NEG_INFINITY);
        Validity { from_seconds: nbf - leeway, until_seconds: exp + leeway }
    }

    /// Whether [`check_claims`] would still accept the token's `exp` and `nbf` at `now_seconds`.
    pub fn contains(&self, now_seconds: u64) -> bool {
        let now = now_seconds as f64;
        now >= self.from_seconds && now <= self.until_seconds
    }
}

/// What a verification is remembered by: a SHA-256 over the claim path and the whole
/// token (signature included), so only the very token that verified, read for the same
/// claim, finds it.
pub fn verification_id(claim_path: &ClaimPath, token: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update((claim_path.pointer.len() as u64).to_be_bytes());
    hasher.update(claim_path.pointer.as_bytes());
    hasher.update(token.as_bytes());
    hasher.finalize().into()
}

/// The path of the claim that names the caller, in one of two spellings, each with one
/// meaning whatever the token holds:
///
/// - a JSON pointer (RFC 6901): `/` then the members' names, each exactly as the token
///   spells it but `~1` for `/` and `~0` for `~`: `/org/id` is the member `id` of the
///   member `org`, `/org.id` a top-level member named `org.id`, and
///   `/https:~1~1example.com~1tenant` the claim `https://example.com/tenant`;
/// - a dotted path: `sub`, or `org.id` for the member `id` of the member `org`. Its dots
///   always separate names: it never matches a member whose name holds a dot. One with dots
///   and a `/` or `:` reads as a URL-named claim (`https://example.com/tenant`) as much as a
///   path, so it is refused: write it as a pointer.
///
/// Before pointers, a dotted path matched a top-level member named by the whole path first,
/// then the nested one: a token holding both a member `org.id` and `org: {id}` was scoped by
/// the first. Each spelling now walks one way only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimPath {
    /// The members' names, outermost first.
    names: Vec<String>,
    /// The names joined by dots: what the scope hashes (`fingerprint::Scope::claim`), so
    /// that `org.id` and `/org/id` (and `sub` and `/sub`) name one scope, and a key claimed
    /// before pointers existed is found under either spelling.
    dotted: String,
    /// The path as a JSON pointer: one text per path, whatever the spelling (what
    /// [`verification_id`] hashes, so that two paths never share a memo).
    pointer: String,
}

/// Longest claim path, in bytes.
const MAX_CLAIM_PATH_BYTES: usize = 256;

impl ClaimPath {
    /// A JSON pointer (`/org/id`) or a dotted path (`org.id`), trimmed, without empty names
    /// or control characters.
    pub fn parse(text: &str) -> Result<ClaimPath, String> {
        let text = text.trim();
        if text.is_empty() || text.len() > MAX_CLAIM_PATH_BYTES {
            return Err(
                "expected a claim name such as sub, a dotted path such as org.id, or a JSON pointer such as /org/id"
                    .to_owned(),
            );
        }
        let quoted = || Value::from(text);
        if text.chars().any(char::is_control) {
            return Err(format!("{} holds a control character", quoted()));
        }
        let names: Vec<String> = match text.strip_prefix('/') {
            Some(pointer) => pointer
                .split('/')
                .map(|name| {
                    unescape_pointer_name(name).ok_or_else(|| {
                        format!(
                            "{} is not a JSON pointer: ~ must be followed by 0 or 1 (~0 for ~, ~1 for /)",
                            quoted()
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
            None => {
                if text.contains('.') && text.contains(['/', ':']) {
                    return Err(format!(
                        "{} could be one claim named with dots (a URL) or a dotted path: write it as a JSON pointer, /{} for the claim of that name, or with / between nested names",
                        quoted(),
                        escape_pointer_name(text)
                    ));
                }
                text.split('.').map(str::to_owned).collect()
            }
        };
        if names.iter().any(String::is_empty) {
            return Err(format!(
                "{} has an empty name (two separators in a row, or one at an end)",
                quoted()
            ));
        }
        let dotted = names.join(".");
        let pointer = names.iter().map(|name| format!("/{}", escape_pointer_name(name))).collect();
        Ok(ClaimPath { names, dotted, pointer })
    }

    /// The path as the scope hashes it: the names joined by dots (see [`ClaimPath`]).
    pub fn as_str(&self) -> &str {
        &self.dotted
    }

    /// The path as a JSON pointer, one text per path whatever its spelling.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// The claim's value: the walk down the names, member by member, and nothing else.
    pub fn find<'c>(&self, claims: &'c Map<String, Value>) -> Option<&'c Value> {
        let (first, rest) = self.names.split_first()?;
        let mut value = claims.get(first)?;
        for name in rest {
            value = value.as_object()?.get(name)?;
        }
        Some(value)
    }
}

/// A JSON pointer's reference token as the member name it stands for (RFC 6901 §4); `None`
/// for a `~` not followed by `0` or `1`.
fn unescape_pointer_name(token: &str) -> Option<String> {
    let mut name = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        match c {
            '~' => match chars.next() {
                Some('0') => name.push('~'),
                Some('1') => name.push('/'),
                _ => return None,
            },
            c => name.push(c),
        }
    }
    Some(name)
}

/// A member name as a JSON pointer's reference token (RFC 6901 §3).
fn escape_pointer_name(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// The caller's identity as the token states it: a string, or a whole number in its JSON
/// form. The two never compare equal (`"42"` is not `42`).
///
/// A number is taken only when it is a whole number that fits 64 bits, so that its text is
/// exactly the token's. Any other number (a fraction, an exponent, a whole number past
/// 2^64) would be read as an `f64` and rounded: two subjects such as
/// `12345678901234567890123` and `12345678901234567890124` would share one scope. Such a
/// claim is refused (`Unverified::Claim`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimValue {
    String(String),
    Number(String),
}

impl ClaimValue {
    pub fn of(value: &Value) -> Option<ClaimValue> {
        match value {
            Value::String(text) => Some(ClaimValue::String(text.clone())),
            Value::Number(number) if number.is_u64() || number.is_i64() => {
                Some(ClaimValue::Number(number.to_string()))
            }
            Value::Number(_) => None,
            _ => None,
        }
    }
}

/// What a verified token says about its caller, once its signature is confirmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `iss` when present.
    pub issuer: Option<String>,
    pub claim_path: ClaimPath,
    pub value: ClaimValue,
}

/// Everything but the signature: structure, algorithm, claims and the scope claim. Cheap
/// checks first, so an expired or foreign token costs no crypto.
pub fn prepare<'t>(
    token: &'t str,
    rules: &Validation,
    claim_path: &ClaimPath,
    now_seconds: u64,
) -> Result<(Token<'t>, Identity), Unverified> {
    let parsed = parse(token)?;
    check_claims(&parsed.claims, rules, now_seconds)?;
    let value = claim_path.find(&parsed.claims).and_then(ClaimValue::of).ok_or(Unverified::Claim)?;
    let issuer = parsed.claims.get("iss").and_then(Value::as_str).map(str::to_owned);
    Ok((parsed, Identity { issuer, claim_path: claim_path.clone(), value }))
}

/// One public key from a JWKS, reduced to what verification needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jwk {
    pub kid: Option<String>,
    /// The one algorithm this key verifies, fixed by its type.
    pub algorithm: Algorithm,
    /// The key as a minimal public JWK (`kty`, `crv`, `x`, `y`, `n`, `e` only), for
    /// WebCrypto's `importKey("jwk", …)`. Also the key's identity in the runtime's cache.
    pub import_json: String,
}

/// The keys of one JWKS that the worker can use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeySet {
    pub keys: Vec<Jwk>,
}

impl KeySet {
    /// Whether some key has this `kid`: what tells a known `kid` from one to refetch for
    /// (rule 4; `jwks_cache` asks the same question as [`candidates`]).
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|key| key.kid.as_deref() == Some(kid))
    }
}

/// How strictly to read a JWKS: inline configuration is an operator's typo to report;
/// a fetched document is someone else's, read leniently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JwksSource {
    Inline,
    Fetched,
}

/// Parses a JWKS (`{"keys":[…]}`). Keys the worker cannot use (other types, curves or
/// algorithms, `use` other than `sig`, RSA under 2048 bits, `oct`) are skipped. An error
/// when the text is not a JWKS, when no key is usable, or (inline only) when a key holds
/// private material.
pub fn parse_jwks(text: &str, source: JwksSource) -> Result<KeySet, String> {
    let value = serde_json::from_str::<Value>(text).map_err(|e| format!("not valid JSON ({e})"))?;
    let Some(Value::Array(items)) = value.get("keys") else {
        return Err("expected a JWKS: an object with a \"keys\" array".to_owned());
    };
    let mut keys = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let Value::Object(members) = item else { continue };
        if source == JwksSource::Inline
            && ["d", "p", "q", "dp", "dq", "qi", "k"].iter().any(|m| members.contains_key(*m))
        {
            return Err(format!(
                "keys[{index}] holds private or secret key material; publish only public keys (HS256 secrets go in SCOPE_JWT_HS256_SECRET)"
            ));
        }
        if let Some(jwk) = usable_key(members) {
            if keys.len() == MAX_JWKS_KEYS {
                return Err(format!("at most {MAX_JWKS_KEYS} usable keys are supported"));
            }
            keys.push(jwk);
        }
    }
    if keys.is_empty() {
        return Err("no usable key: expected RSA (RS256, 2048 bits or more), EC P-256 (ES256) or OKP Ed25519 (EdDSA) public keys".to_owned());
    }
    Ok(KeySet { keys })
}

fn usable_key(members: &Map<String, Value>) -> Option<Jwk> {
    let text = |name: &str| match members.get(name) {
        Some(Value::String(s)) => Some(s.as_str()),
        _ => None,
    };
    if members.get("use").is_some_and(|u| u.as_str() != Some("sig")) {
        return None;
    }
    if let Some(ops) = members.get("key_ops") {
        let verifies = ops.as_array().is_some_and(|ops| ops.iter().any(|op| op.as_str() == Some("verify")));
        if !verifies {
            return None;
        }
    }
    let kid = match members.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return None,
    };
    // Canonical base64url of `length` bytes (any length when `None`).
    let field = |name: &str, length: Option<usize>| -> Option<String> {
        let raw = text(name)?;
        let bytes = base64url_decode(raw)?;
        length.is_none_or(|n| bytes.len() == n).then(|| raw.to_owned())
    };
    let (algorithm, import) = match text("kty")? {
        "RSA" => {
            let n = field("n", None)?;
            let modulus = base64url_decode(&n)?;
            let significant = modulus.iter().skip_while(|&&b| b == 0).count();
            if !(MIN_RSA_MODULUS_BYTES..=MAX_RSA_MODULUS_BYTES).contains(&significant) {
                return None;
            }
            let e = field("e", None)?;
            (Algorithm::Rs256, serde_json::json!({"kty": "RSA", "n": n, "e": e}))
        }
        "EC" if text("crv")? == "P-256" => {
            let (x, y) = (field("x", Some(32))?, field("y", Some(32))?);
            (Algorithm::Es256, serde_json::json!({"kty": "EC", "crv": "P-256", "x": x, "y": y}))
        }
        "OKP" if text("crv")? == "Ed25519" => {
            let x = field("x", Some(32))?;
            (Algorithm::EdDsa, serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": x}))
        }
        // `oct` (an HMAC secret) and everything else: never from a JWKS.
        _ => return None,
    };
    if text("alg").is_some_and(|alg| alg != algorithm.jose_name())
        || members.get("alg").is_some_and(|a| !a.is_string())
    {
        return None;
    }
    Some(Jwk { kid, algorithm, import_json: import.to_string() })
}

/// The keys a token may verify under, from a key set (rule 4). `HS256` never takes a
/// JWKS key: it is answered [`Unverified::NoKey`] here.
pub fn candidates<'k>(
    keys: &'k KeySet,
    algorithm: Algorithm,
    kid: Option<&str>,
) -> Result<Vec<&'k Jwk>, Unverified> {
    if algorithm == Algorithm::Hs256 {
        return Err(Unverified::NoKey);
    }
    if let Some(kid) = kid {
        if !keys.has_kid(kid) {
            return Err(Unverified::UnknownKid);
        }
    }
    let chosen: Vec<&Jwk> = keys
        .keys
        .iter()
        .filter(|key| key.algorithm == algorithm)
        .filter(|key| kid.is_none() || key.kid.as_deref() == kid)
        .collect();
    if chosen.is_empty() {
        Err(Unverified::NoKey)
    } else {
        Ok(chosen)
    }
}

/// `max-age` from a `Cache-Control` value, in seconds; `None` when absent or unreadable.
pub fn max_age_seconds(cache_control: &str) -> Option<u64> {
    cache_control.split(',').find_map(|directive| {
        let (name, value) = directive.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("max-age") {
            return None;
        }
        let value = value.trim().trim_matches('"');
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Too many digits for a u64 is still a long time.
        Some(value.parse::<u64>().unwrap_or(u64::MAX))
    })
}

/// Decodes unpadded base64url, canonical only: no `=`, no other alphabet, and the unused
/// low bits of the last character are zero (so one value has one encoding): the `base64`
/// crate's `URL_SAFE_NO_PAD`, which decodes exactly so.
pub fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).ok()
}

/// Encodes unpadded base64url (the inverse of [`base64url_decode`]).
pub fn base64url_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests;
