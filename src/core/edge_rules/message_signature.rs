//! The origin hop's signature in the standard form: RFC 9421 (HTTP Message Signatures) with
//! `hmac-sha256`, over RFC 9530's `Content-Digest`, so that an origin verifies it with a
//! library of its language instead of code of its own.
//!
//! Owns the covered components, the signature base and the header values, and a reference
//! verifier. With `ORIGIN_AUTH_SECRET` set, every request the worker sends to the origin
//! (every forward, the object's, a pass-through, a fail-open or an observed one, and every
//! lookup of an unknown outcome) carries:
//!
//! ```text
//! Content-Digest: sha-256=:<base64 of the body's SHA-256>:
//! Idempotency-Edge-Protection: protected | passed
//! Signature-Input: edge=("@method" "@target-uri" "content-digest" "idempotency-key" "idempotency-edge-protection");created=<unix seconds>;keyid="idempotency-edge";alg="hmac-sha256";nonce="<32 hex digits>";tag="idempotency-edge"
//! Signature: edge=:<base64 of the HMAC-SHA-256>:
//! ```
//!
//! Rules:
//! 1. The covered components, in this order: the method, the target URI as sent, the
//!    `Content-Digest` (RFC 9530, `sha-256`, of the body as sent; an empty body has one
//!    too), the route's key header (`Idempotency-Key`, or the header `key_header` names)
//!    when the request carries one, the edge's protection verdict (`protected` when the
//!    key's object claimed the request and sends it, at most once per key; `passed` when
//!    the Worker sends it on without protection), and on a lookup of an unknown outcome the
//!    claim's time (`Idempotency-Claimed-At`, `core::key_rules::reconcile`), which the lookup answers
//!    from.
//! 2. The parameters: `created` (the signing time), `keyid="idempotency-edge"`,
//!    `alg="hmac-sha256"`, a random `nonce` (16 bytes, hex; the origin refuses one it has
//!    seen within its tolerance, so a captured request replayed is refused) and
//!    `tag="idempotency-edge"`, by which a verifier picks this signature out of others the
//!    request may carry (a client's own, under another label). The key is the secret's
//!    bytes as set (UTF-8).
//! 3. The signature base is RFC 9421 §2.5's: one line per component, `"name": value`, then
//!    `"@signature-params": ` and the serialized `Signature-Input` member, joined by `\n`
//!    with no trailing newline. A header's value is its field value with surrounding
//!    whitespace removed, exactly as sent: the key keeps the spelling the origin receives.
//! 4. The verifier refuses a missing or malformed signature, one whose `created` is further
//!    than its tolerance from its clock, one that does not cover rules 1's components
//!    (the key header where the request has one), a `Content-Digest` that is not the body's,
//!    and any change to a covered component or parameter.
//!
//! No clock and no randomness: the time and the nonce are passed in.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::origin_auth::Protection;

/// The signature's label in `Signature-Input` and `Signature`.
pub const LABEL: &str = "edge";
/// The `keyid` parameter: the secret it names is `ORIGIN_AUTH_SECRET`.
pub const KEY_ID: &str = "idempotency-edge";
/// The `alg` parameter.
pub const ALGORITHM: &str = "hmac-sha256";
/// The `tag` parameter: this application's signature among any others.
pub const TAG: &str = "idempotency-edge";
/// The lookup's claim time, covered when the request carries it.
pub const CLAIMED_AT_HEADER: &str = "idempotency-claimed-at";
/// The header that carries the edge's protection verdict (rule 1).
pub const PROTECTION_HEADER: &str = "idempotency-edge-protection";
pub const CONTENT_DIGEST_HEADER: &str = "content-digest";
pub const SIGNATURE_INPUT_HEADER: &str = "signature-input";
pub const SIGNATURE_HEADER: &str = "signature";
/// The nonce's length in bytes (hex-encoded).
pub const NONCE_BYTES: usize = 16;

/// What is signed besides the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Covered<'a> {
    pub method: &'a str,
    /// The target URI exactly as sent (`https://origin.example/v1/charges?expand=x`).
    pub target_uri: &'a str,
    /// The route's key header, lower case, and its value as sent, when the request has one.
    pub key: Option<(&'a str, &'a str)>,
    pub protection: Protection,
    /// A lookup's `Idempotency-Claimed-At` value, when the request carries one.
    pub claimed_at: Option<&'a str>,
    pub created: u64,
    /// Lowercase hex of [`NONCE_BYTES`] random bytes.
    pub nonce: &'a str,
}

/// The headers a signed request carries: (lower-case name, value), in this order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureHeaders {
    pub content_digest: String,
    pub protection: &'static str,
    pub signature_input: String,
    pub signature: String,
}

impl SignatureHeaders {
    pub fn pairs(&self) -> [(&'static str, &str); 4] {
        [
            (CONTENT_DIGEST_HEADER, &self.content_digest),
            (PROTECTION_HEADER, self.protection),
            (SIGNATURE_INPUT_HEADER, &self.signature_input),
            (SIGNATURE_HEADER, &self.signature),
        ]
    }
}

/// The value a field of the edge's (`Signature-Input`, `Signature`) takes on a request that
/// may already carry the client's own: the client's members, then the edge's. A client
/// member under the edge's own label cannot stand beside it (a verifier would have two), so
/// then the client's field is replaced.
pub fn merged_field(existing: Option<&str>, ours: &str) -> String {
    match existing.map(str::trim).filter(|e| !e.is_empty()) {
        Some(existing)
            if dictionary_member(existing, LABEL).is_none() && !existing.contains(&format!("{LABEL}=")) =>
        {
            format!("{existing}, {ours}")
        }
        _ => ours.to_owned(),
    }
}

/// RFC 9530's `Content-Digest` value for a body whose SHA-256 is `sha256`.
pub fn content_digest(sha256: &[u8]) -> String {
    format!("sha-256=:{}:", BASE64.encode(sha256))
}

/// An RFC 8941 sf-string.
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The `Signature-Input` member (without the label): the covered components and parameters.
fn signature_params(covered: &Covered<'_>) -> String {
    let mut names = vec!["@method", "@target-uri", CONTENT_DIGEST_HEADER];
    if let Some((name, _)) = covered.key {
        names.push(name);
    }
    names.push(PROTECTION_HEADER);
    if covered.claimed_at.is_some() {
        names.push(CLAIMED_AT_HEADER);
    }
    let list: Vec<String> = names.into_iter().map(sf_string).collect();
    format!(
        "({});created={};keyid={};alg={};nonce={};tag={}",
        list.join(" "),
        covered.created,
        sf_string(KEY_ID),
        sf_string(ALGORITHM),
        sf_string(covered.nonce),
        sf_string(TAG)
    )
}

/// Rule 3: the signature base, given the `Content-Digest` value.
pub fn signature_base(covered: &Covered<'_>, content_digest: &str) -> String {
    base_with_params(covered, content_digest, &signature_params(covered))
}

/// The signature base with the `@signature-params` line as given: a verifier takes the
/// parameters as they were sent, in their order.
fn base_with_params(covered: &Covered<'_>, content_digest: &str, params: &str) -> String {
    let mut lines = vec![
        format!("\"@method\": {}", covered.method),
        format!("\"@target-uri\": {}", covered.target_uri),
        format!("\"{CONTENT_DIGEST_HEADER}\": {content_digest}"),
    ];
    if let Some((name, value)) = covered.key {
        lines.push(format!("\"{name}\": {}", value.trim()));
    }
    lines.push(format!("\"{PROTECTION_HEADER}\": {}", covered.protection.as_str()));
    if let Some(claimed_at) = covered.claimed_at {
        lines.push(format!("\"{CLAIMED_AT_HEADER}\": {}", claimed_at.trim()));
    }
    lines.push(format!("\"@signature-params\": {params}"));
    lines.join("\n")
}

fn mac(secret: &[u8], base: &str) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(base.as_bytes());
    mac
}

/// The headers for a request whose body's SHA-256 is `body_sha256`.
pub fn sign(secret: &[u8], covered: &Covered<'_>, body_sha256: &[u8]) -> SignatureHeaders {
    let content_digest = content_digest(body_sha256);
    let base = signature_base(covered, &content_digest);
    let tag = mac(secret, &base).finalize().into_bytes();
    SignatureHeaders {
        content_digest,
        protection: covered.protection.as_str(),
        signature_input: format!("{LABEL}={}", signature_params(covered)),
        signature: format!("{LABEL}=:{}:", BASE64.encode(tag)),
    }
}

/// Why a signature was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    Malformed,
    /// `created` is further than the tolerance from the verifier's clock.
    Stale,
    /// A component rule 1 requires is not covered.
    Uncovered,
    /// The `Content-Digest` is not the body's.
    Digest,
    Mismatch,
}

/// What a verified signature says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The nonce, which the origin remembers for its tolerance window and refuses again.
    pub nonce: String,
    pub protection: Protection,
    pub created: u64,
}

/// The reference verifier: what an origin does with a request as it arrived. `header`
/// returns a header's value by lower-case name; `key_header` is the route's key header,
/// lower case (`idempotency-key` unless the route names another).
#[allow(clippy::too_many_arguments)]
pub fn verify(
    secret: &[u8],
    header: &dyn Fn(&str) -> Option<String>,
    method: &str,
    target_uri: &str,
    key_header: &str,
    body: &[u8],
    now_seconds: u64,
    tolerance_seconds: u64,
) -> Result<Verified, Refusal> {
    let input = header(SIGNATURE_INPUT_HEADER).ok_or(Refusal::Missing)?;
    let signature = header(SIGNATURE_HEADER).ok_or(Refusal::Missing)?;
    let member = dictionary_member(&input, LABEL).ok_or(Refusal::Malformed)?;
    let (names, params) = parse_member(member).ok_or(Refusal::Malformed)?;
    let param = |name: &str| params.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    if param("alg") != Some(ALGORITHM) || param("keyid") != Some(KEY_ID) || param("tag") != Some(TAG) {
        return Err(Refusal::Malformed);
    }
    let created: u64 = param("created").and_then(|c| c.parse().ok()).ok_or(Refusal::Malformed)?;
    let nonce = param("nonce").ok_or(Refusal::Malformed)?;
    if nonce.len() != 2 * NONCE_BYTES || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Refusal::Malformed);
    }
    if created.abs_diff(now_seconds) > tolerance_seconds {
        return Err(Refusal::Stale);
    }
    let key = header(key_header);
    let claimed_at = header(CLAIMED_AT_HEADER);
    let expected_names: Vec<&str> = ["@method", "@target-uri", CONTENT_DIGEST_HEADER]
        .into_iter()
        .chain(key.as_ref().map(|_| key_header))
        .chain([PROTECTION_HEADER])
        .chain(claimed_at.as_ref().map(|_| CLAIMED_AT_HEADER))
        .collect();
    if names.iter().map(String::as_str).ne(expected_names.iter().copied()) {
        return Err(Refusal::Uncovered);
    }
    let digest = content_digest(&Sha256::digest(body));
    if header(CONTENT_DIGEST_HEADER).as_deref().map(str::trim) != Some(digest.as_str()) {
        return Err(Refusal::Digest);
    }
    let protection = match header(PROTECTION_HEADER).as_deref().map(str::trim) {
        Some("protected") => Protection::Protected,
        Some("passed") => Protection::Passed,
        _ => return Err(Refusal::Malformed),
    };
    let covered = Covered {
        method,
        target_uri,
        key: key.as_deref().map(|value| (key_header, value)),
        protection,
        claimed_at: claimed_at.as_deref(),
        created,
        nonce,
    };
    let base = base_with_params(&covered, &digest, member);
    let sent = dictionary_member(&signature, LABEL)
        .and_then(|value| value.strip_prefix(':')?.strip_suffix(':'))
        .and_then(|b64| BASE64.decode(b64).ok())
        .ok_or(Refusal::Malformed)?;
    mac(secret, &base).verify_slice(&sent).map_err(|_| Refusal::Mismatch)?;
    Ok(Verified { nonce: nonce.to_owned(), protection, created })
}

/// The member labelled `label` of a dictionary field (members joined by `,`, as when a
/// client's own signature precedes this one). A label found twice, or a value that cannot be
/// told apart from another member, is no member: the verifier refuses rather than guesses.
fn dictionary_member<'f>(field: &'f str, label: &str) -> Option<&'f str> {
    let prefix = format!("{label}=");
    let mut found = None;
    for member in field.split(',') {
        if let Some(value) = member.trim().strip_prefix(&prefix) {
            if found.is_some() {
                return None;
            }
            found = Some(value);
        }
    }
    found
}

/// A `Signature-Input` member read: the covered components, and the parameters (name, value).
type Member = (Vec<String>, Vec<(String, String)>);

/// An inner list of sf-strings and its parameters (strings or integers), as this module
/// writes them.
fn parse_member(member: &str) -> Option<Member> {
    let rest = member.strip_prefix('(')?;
    let (list, params) = rest.split_once(')')?;
    let names = list
        .split(' ')
        .filter(|n| !n.is_empty())
        .map(|n| n.strip_prefix('"')?.strip_suffix('"').map(str::to_owned))
        .collect::<Option<Vec<_>>>()?;
    let params = params
        .split(';')
        .skip(1)
        .map(|param| {
            let (name, value) = param.split_once('=')?;
            let value = match value.strip_prefix('"') {
                Some(quoted) => quoted.strip_suffix('"')?.to_owned(),
                None => value.to_owned(),
            };
            Some((name.to_owned(), value))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((names, params))
}

#[cfg(test)]
mod tests;
