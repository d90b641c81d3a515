//! The authenticated origin hop: the `Idempotency-Edge-Signature` header.
//!
//! Owns the signature's format and canonical string, and a reference verifier. With the
//! `ORIGIN_AUTH_SECRET` secret set, every request the worker sends to the origin carries
//!
//! ```text
//! Idempotency-Edge-Signature: t=<unix seconds>,v1=<64 lowercase hex digits>
//! ```
//!
//! where `v1` is HMAC-SHA-256 under the secret's bytes (UTF-8, as set) over the canonical
//! string, five lines joined by `\n` with no trailing newline:
//!
//! ```text
//! idempotency-edge-signature-v1
//! <METHOD>
//! <path and query, exactly as sent to the origin>
//! <t>
//! <SHA-256 of the body bytes, 64 lowercase hex digits>
//! ```
//!
//! The origin recomputes it from what it received, compares in constant time, and refuses
//! a timestamp more than [`DEFAULT_TOLERANCE_SECONDS`] from its clock (a replay later than
//! that fails; a replay within it is a retry of the same request, which the worker's own
//! deduplication, and the origin's `Idempotency-Key` handling, make harmless). Any change
//! to the method, path, query, timestamp or body changes the HMAC.
//!
//! The runtime computes the HMAC and the digest with WebCrypto (`runtime::origin_auth`);
//! this module builds the canonical string for it and holds the known-answer vectors that
//! pin both implementations, and the documented Rust and Python verifiers, to one format.

use sha2::{Digest, Sha256};

use super::hmac::{constant_time_eq, hex, hmac_sha256};

/// The header the worker adds to every origin request.
pub const SIGNATURE_HEADER: &str = "idempotency-edge-signature";
/// The secret that turns signing on.
pub const VAR_ORIGIN_AUTH_SECRET: &str = "ORIGIN_AUTH_SECRET";
/// The shortest accepted secret.
pub const MIN_SECRET_BYTES: usize = 32;
/// How far a timestamp may be from the verifier's clock.
pub const DEFAULT_TOLERANCE_SECONDS: u64 = 300;
/// The canonical string's first line: the format's version.
const VERSION_LINE: &str = "idempotency-edge-signature-v1";

/// The canonical string for a request, given the body's SHA-256 in lowercase hex.
pub fn canonical_string(method: &str, path_and_query: &str, timestamp: u64, body_sha256_hex: &str) -> String {
    format!("{VERSION_LINE}\n{method}\n{path_and_query}\n{timestamp}\n{body_sha256_hex}")
}

/// The header value for a timestamp and an HMAC (32 bytes).
pub fn header_value(timestamp: u64, mac: &[u8]) -> String {
    format!("t={timestamp},v1={}", hex(mac))
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
pub fn sign(secret: &[u8], method: &str, path_and_query: &str, timestamp: u64, body: &[u8]) -> String {
    let digest = hex(&Sha256::digest(body));
    let mac = hmac_sha256(secret, canonical_string(method, path_and_query, timestamp, &digest).as_bytes());
    header_value(timestamp, &mac)
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

/// The reference verifier: what an origin does with the header.
pub fn verify(
    secret: &[u8],
    header: Option<&str>,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    now_seconds: u64,
    tolerance_seconds: u64,
) -> Result<(), Refusal> {
    let header = header.ok_or(Refusal::Missing)?;
    let (t, v1) = header.split_once(',').ok_or(Refusal::Malformed)?;
    let timestamp: u64 = t.strip_prefix("t=").and_then(|t| t.parse().ok()).ok_or(Refusal::Malformed)?;
    let v1 = v1.strip_prefix("v1=").ok_or(Refusal::Malformed)?;
    if timestamp.abs_diff(now_seconds) > tolerance_seconds {
        return Err(Refusal::Stale);
    }
    let expected = sign(secret, method, path_and_query, timestamp, body);
    if constant_time_eq(expected.as_bytes(), format!("t={timestamp},v1={v1}").as_bytes()) {
        Ok(())
    } else {
        Err(Refusal::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &[u8] = b"whsec-test-0123456789abcdef0123456789abcdef";

    /// Known answers, computed independently with Python's `hmac` and `hashlib` (the
    /// verifier in docs/operations.md):
    /// `hmac.new(secret, canonical.encode(), hashlib.sha256).hexdigest()`.
    #[test]
    fn known_answer_vectors() {
        let body = br#"{"amount":1000,"currency":"eur"}"#;
        assert_eq!(
            canonical_string(
                "POST",
                "/v1/charges?expand=customer",
                1_796_300_000,
                &hex(&Sha256::digest(body))
            ),
            "idempotency-edge-signature-v1\nPOST\n/v1/charges?expand=customer\n1796300000\n4e493e4ce0e474c166303ac8affb1464ce2a54f9299ae1e25f7a4360993d22bb"
        );
        assert_eq!(
            sign(SECRET, "POST", "/v1/charges?expand=customer", 1_796_300_000, body),
            "t=1796300000,v1=17680ca8268e45a0e1c51968dcc1f552ae33277dc115396e12a9ef1c5e057b3c"
        );
        // An empty body signs the digest of no bytes.
        assert_eq!(
            sign(SECRET, "PATCH", "/v1/charges/ch_1", 1_796_300_001, b""),
            "t=1796300001,v1=a7187e0745992995dc15e68220c8d2999470b1454288a1987d0c258d27d42ecb"
        );
    }

    #[test]
    fn verification_refuses_replays_late_and_changes() {
        let body = b"{\"amount\":1}";
        let header = sign(SECRET, "POST", "/v1/charges", 1_000, body);
        let check = |header: Option<&str>, method, path, body: &[u8], now| {
            verify(SECRET, header, method, path, body, now, DEFAULT_TOLERANCE_SECONDS)
        };
        assert_eq!(check(Some(&header), "POST", "/v1/charges", body, 1_010), Ok(()));
        assert_eq!(check(Some(&header), "POST", "/v1/charges", body, 1_301), Err(Refusal::Stale));
        assert_eq!(check(Some(&header), "POST", "/v1/refunds", body, 1_010), Err(Refusal::Mismatch));
        assert_eq!(check(Some(&header), "PUT", "/v1/charges", body, 1_010), Err(Refusal::Mismatch));
        assert_eq!(
            check(Some(&header), "POST", "/v1/charges", b"{\"amount\":2}", 1_010),
            Err(Refusal::Mismatch)
        );
        let moved = header.replace("t=1000", "t=1001");
        assert_eq!(check(Some(&moved), "POST", "/v1/charges", body, 1_010), Err(Refusal::Mismatch));
        assert_eq!(check(None, "POST", "/v1/charges", body, 1_010), Err(Refusal::Missing));
        assert_eq!(check(Some("v1=00"), "POST", "/v1/charges", body, 1_010), Err(Refusal::Malformed));
        assert_eq!(
            verify(
                b"another-secret-of-enough-length-000000",
                Some(&header),
                "POST",
                "/v1/charges",
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
            let header = sign(SECRET, "POST", "/p", 5, &body);
            let mut changed = body.clone();
            let at = at % changed.len();
            changed[at] ^= flip;
            prop_assert_eq!(verify(SECRET, Some(&header), "POST", "/p", &body, 5, 0), Ok(()));
            prop_assert_eq!(verify(SECRET, Some(&header), "POST", "/p", &changed, 5, 0), Err(Refusal::Mismatch));
        }
    }
}
