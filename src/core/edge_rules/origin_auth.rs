//! The authenticated origin hop: which signature it carries, and the `Idempotency-Edge-Signature`
//! header of the version 2 format.
//!
//! `ORIGIN_AUTH_FORMAT` chooses the format ([`SignatureFormat`]): `rfc9421` (the default;
//! `core::edge_rules::message_signature`, verified with any RFC 9421 library) or `v2`, the format below,
//! kept for one release so that origins that verify it can move to RFC 9421 first
//! (docs/operations.md, "Migrating from the v2 signature").
//!
//! Owns the signature's format and canonical string, and a reference verifier. With the
//! `ORIGIN_AUTH_SECRET` secret set, every request the worker sends to the origin carries
//!
//! ```text
//! Idempotency-Edge-Signature: t=<unix seconds>,n=<32 lowercase hex digits>,p=<protected|passed>,v2=<64 lowercase hex digits>
//! ```
//!
//! where `n` is a random nonce (16 bytes), `p` says whether the edge protected the request
//! (`protected`: the key's object claimed it and forwards it; `passed`: the Worker sent it
//! on without protection, as a pass-through, a fail-open forward or an observed request),
//! and `v2` is HMAC-SHA-256 under the secret's bytes (UTF-8, as set) over the canonical
//! string, eight lines joined by `\n` with no trailing newline:
//!
//! ```text
//! idempotency-edge-signature-v2
//! <METHOD>
//! <path and query, exactly as sent to the origin>
//! <t>
//! <n>
//! <the key header's value as sent, or an empty line without one>
//! <protected|passed>
//! <SHA-256 of the body bytes, 64 lowercase hex digits>
//! ```
//!
//! The key header is `Idempotency-Key`, or on a route that names another (`key_header`,
//! `core::primitives::key` rule 5) that one: the line carries the key the edge deduplicated by, and
//! `Idempotency-Key` is then an ordinary header, signed as no other is.
//!
//! Version 2 adds the key and the protection: an origin that deduplicates by
//! key, or refuses unprotected payments, can trust both. Version 1 (the same without those
//! two lines, `v1=`) is no longer sent.
//!
//! The origin recomputes it from what it received, compares in constant time, refuses a
//! timestamp more than [`DEFAULT_TOLERANCE_SECONDS`] from its clock, and refuses a nonce it
//! has already seen within that window (so a captured request replayed is refused at once,
//! and later by its timestamp). Any change to the method, path, query, timestamp, nonce or
//! body changes the HMAC. Every forward draws a new nonce, so the worker's own retries are
//! never mistaken for replays.
//!
//! The runtime digests the body with WebCrypto (`runtime::origin_auth`) and
//! `core::edge_rules::hop_signature` signs the hop in the configured format; this module
//! builds the canonical string and the HMAC over it, and holds the known-answer vectors that
//! pin it, and the documented Rust and Python verifiers, to one format.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::core::primitives::hex::encode as hex;

/// The header the worker adds to every origin request.
pub const SIGNATURE_HEADER: &str = "idempotency-edge-signature";
/// The secret that turns signing on.
pub const VAR_ORIGIN_AUTH_SECRET: &str = "ORIGIN_AUTH_SECRET";
/// Which format signs the hop.
pub const VAR_ORIGIN_AUTH_FORMAT: &str = "ORIGIN_AUTH_FORMAT";

/// The origin hop's signature format (`ORIGIN_AUTH_FORMAT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SignatureFormat {
    /// RFC 9421 with `hmac-sha256` over RFC 9530's `Content-Digest`
    /// (`core::edge_rules::message_signature`).
    #[default]
    Rfc9421,
    /// The `Idempotency-Edge-Signature` header of this module, for one release.
    V2,
}

impl SignatureFormat {
    /// `rfc9421` (also when unset or empty) or `v2`.
    pub fn parse(raw: Option<&str>) -> Result<SignatureFormat, String> {
        match raw.map(str::trim).unwrap_or("") {
            "" | "rfc9421" => Ok(SignatureFormat::Rfc9421),
            "v2" => Ok(SignatureFormat::V2),
            _ => Err(format!("{VAR_ORIGIN_AUTH_FORMAT} is invalid: expected rfc9421 or v2")),
        }
    }
}

/// What signs the origin hop: the secret and the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signer<'a> {
    pub secret: &'a str,
    pub format: SignatureFormat,
}
/// The shortest accepted secret.
pub const MIN_SECRET_BYTES: usize = 32;
/// How far a timestamp may be from the verifier's clock.
pub const DEFAULT_TOLERANCE_SECONDS: u64 = 300;
/// The canonical string's first line: the format's version.
const VERSION_LINE: &str = "idempotency-edge-signature-v2";

/// The nonce's length in bytes (hex-encoded in the header and the canonical string).
pub const NONCE_BYTES: usize = 16;

/// Whether the edge protected a request it sends to the origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// The key's object claimed it and sends it: at most once per key.
    Protected,
    /// The Worker sends it on without protection (pass-through, fail-open, observe mode).
    Passed,
}

impl Protection {
    pub fn as_str(self) -> &'static str {
        match self {
            Protection::Protected => "protected",
            Protection::Passed => "passed",
        }
    }

    fn parse(text: &str) -> Option<Protection> {
        [Protection::Protected, Protection::Passed].into_iter().find(|p| p.as_str() == text)
    }
}

/// What is signed besides the body: the request line's parts, the key, the protection, the
/// time and the nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signed<'a> {
    pub method: &'a str,
    /// Path and query exactly as sent to the origin.
    pub path_and_query: &'a str,
    /// The key header's value as sent (`Idempotency-Key`, or the route's `key_header`);
    /// empty when there is none.
    pub idempotency_key: &'a str,
    pub protection: Protection,
    pub timestamp: u64,
    /// Lowercase hex of [`NONCE_BYTES`] random bytes.
    pub nonce: &'a str,
}

/// The canonical string for a request, given the body's SHA-256 in lowercase hex.
pub fn canonical_string(signed: &Signed<'_>, body_sha256_hex: &str) -> String {
    canonical_head(signed) + body_sha256_hex
}

/// The canonical string up to its last line, the body's digest, which whoever digests the
/// body appends.
pub fn canonical_head(signed: &Signed<'_>) -> String {
    let Signed { method, path_and_query, idempotency_key, protection, timestamp, nonce } = signed;
    let protection = protection.as_str();
    format!(
        "{VERSION_LINE}\n{method}\n{path_and_query}\n{timestamp}\n{nonce}\n{idempotency_key}\n{protection}\n"
    )
}

/// The header value for the signed parts and an HMAC (32 bytes).
pub fn header_value(signed: &Signed<'_>, mac: &[u8]) -> String {
    format!("t={},n={},p={},v2={}", signed.timestamp, signed.nonce, signed.protection.as_str(), hex(mac))
}

/// Checks the secret's value: at least [`MIN_SECRET_BYTES`] bytes, never echoed.
pub fn check_secret(value: &str) -> Result<(), String> {
    if value.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "{VAR_ORIGIN_AUTH_SECRET} is invalid: it must be at least {MIN_SECRET_BYTES} bytes (it has {})",
            value.len()
        ));
    }
    Ok(())
}

/// The whole header value, computed in the core (the reference the runtime must match).
pub fn sign(secret: &[u8], signed: &Signed<'_>, body: &[u8]) -> String {
    sign_digested(secret, signed, &Sha256::digest(body))
}

/// [`sign`] given the body's SHA-256 (32 bytes), which the runtime computes where the body
/// is (WebCrypto).
pub fn sign_digested(secret: &[u8], signed: &Signed<'_>, body_sha256: &[u8]) -> String {
    let mac = keyed(secret, &canonical_string(signed, &hex(body_sha256))).finalize().into_bytes();
    header_value(signed, &mac)
}

/// HMAC-SHA-256 under the secret, over the canonical string.
fn keyed(secret: &[u8], canonical: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(canonical.as_bytes());
    mac
}

/// Why a signature was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    Malformed,
    /// The timestamp is further than the tolerance from `now`.
    Stale,
    Mismatch,
}

/// What a verified signature says: the nonce (which the origin must remember for the
/// tolerance window and refuse when seen again) and whether the edge protected the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub nonce: String,
    pub protection: Protection,
}

/// The reference verifier: what an origin does with the header, given the request as it
/// arrived (`idempotency_key`: its key header, `Idempotency-Key` or the route's `key_header`, if any).
#[allow(clippy::too_many_arguments)]
pub fn verify(
    secret: &[u8],
    header: Option<&str>,
    method: &str,
    path_and_query: &str,
    idempotency_key: Option<&str>,
    body: &[u8],
    now_seconds: u64,
    tolerance_seconds: u64,
) -> Result<Verified, Refusal> {
    let header = header.ok_or(Refusal::Missing)?;
    let mut parts = header.split(',');
    let mut part = |name: &str| parts.next().and_then(|p| p.strip_prefix(name)).ok_or(Refusal::Malformed);
    let timestamp: u64 = part("t=")?.parse().map_err(|_| Refusal::Malformed)?;
    let nonce = part("n=")?;
    let protection = Protection::parse(part("p=")?).ok_or(Refusal::Malformed)?;
    let v2 = part("v2=")?;
    if nonce.len() != 2 * NONCE_BYTES || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Refusal::Malformed);
    }
    if timestamp.abs_diff(now_seconds) > tolerance_seconds {
        return Err(Refusal::Stale);
    }
    let idempotency_key = idempotency_key.unwrap_or("");
    let signed = Signed { method, path_and_query, idempotency_key, protection, timestamp, nonce };
    let digest = hex(&Sha256::digest(body));
    // The MAC is written as lowercase hex, and only that spelling is the signature.
    let presented = ::hex::decode(v2).ok().filter(|_| !v2.bytes().any(|b| b.is_ascii_uppercase()));
    let mac = keyed(secret, &canonical_string(&signed, &digest));
    if presented.is_some_and(|tag| mac.verify_slice(&tag).is_ok()) {
        Ok(Verified { nonce: nonce.to_owned(), protection })
    } else {
        Err(Refusal::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &[u8] = b"whsec-test-0123456789abcdef0123456789abcdef";
    const NONCE: &str = "0123456789abcdef0123456789abcdef";

    fn signed<'a>(method: &'a str, path: &'a str, timestamp: u64, nonce: &'a str) -> Signed<'a> {
        Signed {
            method,
            path_and_query: path,
            idempotency_key: "order-42-charge",
            protection: Protection::Protected,
            timestamp,
            nonce,
        }
    }

    /// Known answers, computed independently with Python's `hmac` and `hashlib` (the
    /// verifier in docs/operations.md):
    /// `hmac.new(secret, canonical.encode(), hashlib.sha256).hexdigest()`.
    #[test]
    fn known_answer_vectors() {
        let body = br#"{"amount":1000,"currency":"eur"}"#;
        let charge = signed("POST", "/v1/charges?expand=customer", 1_796_300_000, NONCE);
        assert_eq!(
            canonical_string(&charge, &hex(&Sha256::digest(body))),
            "idempotency-edge-signature-v2\nPOST\n/v1/charges?expand=customer\n1796300000\n0123456789abcdef0123456789abcdef\norder-42-charge\nprotected\n4e493e4ce0e474c166303ac8affb1464ce2a54f9299ae1e25f7a4360993d22bb"
        );
        assert_eq!(
            sign(SECRET, &charge, body),
            "t=1796300000,n=0123456789abcdef0123456789abcdef,p=protected,v2=fbd9444a3f618ac38a7e1eee9ab596265118817a2c48eca510bfe2f5a7f16d9b"
        );
        // No key, passed on unprotected, and an empty body (the digest of no bytes).
        let passed = Signed {
            idempotency_key: "",
            protection: Protection::Passed,
            ..signed("PATCH", "/v1/charges/ch_1", 1_796_300_001, "ffeeddccbbaa99887766554433221100")
        };
        assert_eq!(
            sign(SECRET, &passed, b""),
            "t=1796300001,n=ffeeddccbbaa99887766554433221100,p=passed,v2=354366f1ed2f2da830ee3068eeb1d17780ebfad2f197f4dd551347aa724b015a"
        );
    }

    #[test]
    fn verification_refuses_late_and_changed_requests() {
        let body = b"{\"amount\":1}";
        let header = sign(SECRET, &signed("POST", "/v1/charges", 1_000, NONCE), body);
        let key = Some("order-42-charge");
        let check = |header: Option<&str>, method, path, key: Option<&str>, body: &[u8], now| {
            verify(SECRET, header, method, path, key, body, now, DEFAULT_TOLERANCE_SECONDS)
        };
        let verified = Verified { nonce: NONCE.to_owned(), protection: Protection::Protected };
        assert_eq!(check(Some(&header), "POST", "/v1/charges", key, body, 1_010), Ok(verified));
        assert_eq!(check(Some(&header), "POST", "/v1/charges", key, body, 1_301), Err(Refusal::Stale));
        assert_eq!(check(Some(&header), "POST", "/v1/refunds", key, body, 1_010), Err(Refusal::Mismatch));
        assert_eq!(check(Some(&header), "PUT", "/v1/charges", key, body, 1_010), Err(Refusal::Mismatch));
        assert_eq!(
            check(Some(&header), "POST", "/v1/charges", key, b"{\"amount\":2}", 1_010),
            Err(Refusal::Mismatch)
        );
        // Another key, or none: the signature covers the key.
        for other in [Some("order-43-charge"), None] {
            assert_eq!(
                check(Some(&header), "POST", "/v1/charges", other, body, 1_010),
                Err(Refusal::Mismatch)
            );
        }
        // A protected request relabelled as passed, or the reverse: refused.
        let relabelled = header.replace("p=protected", "p=passed");
        assert_eq!(check(Some(&relabelled), "POST", "/v1/charges", key, body, 1_010), Err(Refusal::Mismatch));
        let moved = header.replace("t=1000", "t=1001");
        assert_eq!(check(Some(&moved), "POST", "/v1/charges", key, body, 1_010), Err(Refusal::Mismatch));
        let renonced = header.replace(NONCE, "1123456789abcdef0123456789abcdef");
        assert_eq!(check(Some(&renonced), "POST", "/v1/charges", key, body, 1_010), Err(Refusal::Mismatch));
        assert_eq!(check(None, "POST", "/v1/charges", key, body, 1_010), Err(Refusal::Missing));
        // The MAC only as written: lowercase hex, whole.
        let (fields, mac) = header.split_once(",v2=").unwrap();
        for spelling in [mac.to_uppercase(), mac[..62].to_owned(), format!("{mac}00"), "zz".repeat(32)] {
            let respelled = format!("{fields},v2={spelling}");
            assert_eq!(
                check(Some(&respelled), "POST", "/v1/charges", key, body, 1_010),
                Err(Refusal::Mismatch)
            );
        }
        assert_eq!(
            check(Some("t=1000,v1=00"), "POST", "/v1/charges", key, body, 1_010),
            Err(Refusal::Malformed)
        );
        // A version 1 header is no longer accepted.
        let v1 = format!("t=1000,n={NONCE},v1={}", "0".repeat(64));
        assert_eq!(check(Some(&v1), "POST", "/v1/charges", key, body, 1_010), Err(Refusal::Malformed));
        assert_eq!(
            verify(
                b"another-secret-of-enough-length-000000",
                Some(&header),
                "POST",
                "/v1/charges",
                key,
                body,
                1_010,
                300
            ),
            Err(Refusal::Mismatch)
        );
    }

    #[test]
    fn secrets_have_a_minimum_length() {
        assert!(check_secret("short").unwrap_err().contains(VAR_ORIGIN_AUTH_SECRET));
        assert!(check_secret(std::str::from_utf8(SECRET).unwrap()).is_ok());
    }

    proptest! {
        /// Any single changed body byte is refused.
        #[test]
        fn any_changed_body_byte_is_refused(body in proptest::collection::vec(any::<u8>(), 1..200), at in any::<usize>(), flip in 1u8..=255) {
            let header = sign(SECRET, &signed("POST", "/p", 5, NONCE), &body);
            let mut changed = body.clone();
            let at = at % changed.len();
            changed[at] ^= flip;
            let key = Some("order-42-charge");
            prop_assert!(verify(SECRET, Some(&header), "POST", "/p", key, &body, 5, 0).is_ok());
            prop_assert_eq!(verify(SECRET, Some(&header), "POST", "/p", key, &changed, 5, 0), Err(Refusal::Mismatch));
        }
    }
}
