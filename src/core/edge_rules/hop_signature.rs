//! The signature of one hop to the origin, in the format `ORIGIN_AUTH_FORMAT` names: what
//! every forward and lookup the edge sends carries (the object's, a pass-through, a
//! fail-open or an observed forward).
//!
//! 1. The signed target is the URL as sent: RFC 9421 covers it whole (`@target-uri`), the
//!    v2 header its path and query (`core::edge_rules::origin_auth`).
//! 2. The key is the value of the route's key header on the request as sent
//!    (`Idempotency-Key` unless the route names another), whatever else it carries; a
//!    request without one is signed without a key.
//! 3. A lookup's `Idempotency-Claimed-At` is covered by RFC 9421; v2 has no line for it.
//! 4. The runtime digests the body and draws the nonce and the time; everything else is
//!    decided here. The headers it returns replace any the client sent, except that
//!    `Signature-Input` and `Signature` keep the client's own members beside the edge's
//!    ([`applied_value`], `message_signature::merged_field`).

use super::message_signature::{self, Covered};
use super::origin_auth::{sign_digested, Protection, SignatureFormat, Signed, Signer, SIGNATURE_HEADER};
use crate::core::primitives::hex::encode as hex;
use crate::core::primitives::url::path_and_query;

/// The nonce's length in bytes, the same in both formats.
pub const NONCE_BYTES: usize = message_signature::NONCE_BYTES;
const _: () = assert!(message_signature::NONCE_BYTES == super::origin_auth::NONCE_BYTES);

/// One hop as it is signed.
#[derive(Clone, Copy, Debug)]
pub struct Hop<'a> {
    pub method: &'a str,
    /// The URL exactly as sent.
    pub target: &'a str,
    /// The route's key header, lower case.
    pub key_header: &'a str,
    /// Its value on the request, when it has one.
    pub key: Option<&'a str>,
    pub protection: Protection,
    /// The request's `Idempotency-Claimed-At` value, when it carries one (a lookup).
    pub claimed_at: Option<&'a str>,
}

/// The headers that sign `hop` (lower-case name, value), for a body whose SHA-256 is
/// `body_sha256`, at `now_seconds`, with `nonce`.
pub fn sign(
    signer: Signer<'_>,
    hop: &Hop<'_>,
    body_sha256: &[u8],
    now_seconds: u64,
    nonce: &[u8; NONCE_BYTES],
) -> Vec<(&'static str, String)> {
    let nonce = hex(nonce);
    match signer.format {
        SignatureFormat::V2 => {
            let signed = Signed {
                method: hop.method,
                path_and_query: &path_and_query(hop.target),
                idempotency_key: hop.key.unwrap_or(""),
                protection: hop.protection,
                timestamp: now_seconds,
                nonce: &nonce,
            };
            vec![(SIGNATURE_HEADER, sign_digested(signer.secret.as_bytes(), &signed, body_sha256))]
        }
        SignatureFormat::Rfc9421 => {
            let covered = Covered {
                method: hop.method,
                target_uri: hop.target,
                key: hop.key.map(|value| (hop.key_header, value)),
                protection: hop.protection,
                claimed_at: hop.claimed_at,
                created: now_seconds,
                nonce: &nonce,
            };
            let signed = message_signature::sign(signer.secret.as_bytes(), &covered, body_sha256);
            signed.pairs().iter().map(|(name, value)| (*name, (*value).to_owned())).collect()
        }
    }
}

/// The value the signature header `name` takes on a request that carries `existing`:
/// `Signature-Input` and `Signature` keep the client's members; every other is the edge's.
pub fn applied_value(name: &str, existing: Option<&str>, ours: &str) -> String {
    match name {
        message_signature::SIGNATURE_INPUT_HEADER | message_signature::SIGNATURE_HEADER => {
            message_signature::merged_field(existing, ours)
        }
        _ => ours.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::edge_rules::origin_auth;
    use sha2::{Digest, Sha256};

    const SECRET: &str = "a secret of at least thirty-two bytes, for tests";
    const NOW: u64 = 1_700_000_000;

    fn hop(key: Option<&'static str>, claimed_at: Option<&'static str>) -> Hop<'static> {
        Hop {
            method: "POST",
            target: "http://127.0.0.1:8080/v1/charges?expand=x",
            key_header: "idempotency-key",
            key,
            protection: Protection::Protected,
            claimed_at,
        }
    }

    fn header<'a>(pairs: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
        pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn v2_signs_the_path_and_query_and_the_key() {
        let signer = Signer { secret: SECRET, format: SignatureFormat::V2 };
        let body = b"{\"amount\":1}";
        let pairs = sign(signer, &hop(Some("k-1"), None), &Sha256::digest(body), NOW, &[7; NONCE_BYTES]);
        assert_eq!(pairs.len(), 1);
        let value = header(&pairs, SIGNATURE_HEADER);
        let verify = |path: &str, key: Option<&str>, body: &[u8]| {
            origin_auth::verify(SECRET.as_bytes(), value, "POST", path, key, body, NOW, 300)
        };
        let verified = verify("/v1/charges?expand=x", Some("k-1"), body).expect("verifies");
        assert_eq!(verified.protection, Protection::Protected);
        assert_eq!(verified.nonce, "07".repeat(NONCE_BYTES));
        assert!(verify("http://127.0.0.1:8080/v1/charges?expand=x", Some("k-1"), body).is_err());
        assert!(verify("/v1/charges?expand=x", Some("k-2"), body).is_err());
        assert!(verify("/v1/charges?expand=x", None, body).is_err());
        assert!(verify("/v1/charges?expand=x", Some("k-1"), b"{}").is_err());
    }

    #[test]
    fn rfc9421_covers_the_url_the_key_and_a_lookups_claim_time() {
        let signer = Signer { secret: SECRET, format: SignatureFormat::Rfc9421 };
        let hop = hop(Some("k-1"), Some("1700000000000"));
        let pairs = sign(signer, &hop, &Sha256::digest(b""), NOW, &[9; NONCE_BYTES]);
        let names: Vec<&str> = pairs.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["content-digest", "idempotency-edge-protection", "signature-input", "signature"]);
        let verify = |key: Option<&str>, claimed_at: Option<&str>, target: &str| {
            let lookup = |name: &str| match name {
                "idempotency-key" => key.map(str::to_owned),
                message_signature::CLAIMED_AT_HEADER => claimed_at.map(str::to_owned),
                _ => header(&pairs, name).map(str::to_owned),
            };
            message_signature::verify(
                SECRET.as_bytes(),
                &lookup,
                "POST",
                target,
                "idempotency-key",
                b"",
                NOW,
                300,
            )
        };
        let verified = verify(Some("k-1"), Some("1700000000000"), hop.target).expect("verifies");
        assert_eq!((verified.protection, verified.created), (Protection::Protected, NOW));
        assert!(verify(Some("k-2"), Some("1700000000000"), hop.target).is_err());
        assert!(verify(Some("k-1"), Some("1700000000001"), hop.target).is_err());
        assert!(verify(Some("k-1"), Some("1700000000000"), "http://127.0.0.1:8080/v1/charges").is_err());
        assert!(header(&pairs, "signature-input").is_some_and(|v| v.contains("\"idempotency-key\"")));
        let keyless = sign(signer, &Hop { key: None, ..hop }, &Sha256::digest(b""), NOW, &[9; NONCE_BYTES]);
        assert!(header(&keyless, "signature-input").is_some_and(|v| !v.contains("\"idempotency-key\"")));
    }

    #[test]
    fn only_the_signature_fields_keep_the_clients_members() {
        let ours = "edge=(\"@method\");created=1";
        assert_eq!(
            applied_value("signature-input", Some("client=(\"@path\")"), ours),
            format!("client=(\"@path\"), {ours}")
        );
        assert_eq!(
            applied_value("signature", Some("client=:AA==:"), "edge=:BB==:"),
            "client=:AA==:, edge=:BB==:"
        );
        assert_eq!(applied_value("signature", Some("edge=:AA==:"), "edge=:BB==:"), "edge=:BB==:");
        assert_eq!(applied_value("content-digest", Some("sha-256=:x:"), "sha-256=:y:"), "sha-256=:y:");
        assert_eq!(applied_value(SIGNATURE_HEADER, Some("forged"), "t=1"), "t=1");
        assert_eq!(applied_value("idempotency-edge-protection", Some("protected"), "passed"), "passed");
    }
}
