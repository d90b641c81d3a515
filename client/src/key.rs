//! Keys: deterministic ones for business operations ([`key_for`]), random ones for requests
//! that come without ([`random_key`]), and the wire form the worker reads back unchanged.
//!
//! The key grammar is the worker's own (`idempotency_edge_protocol::key`), so a key this crate
//! accepts is one the worker accepts, and both halves change together.

use std::fmt;

use idempotency_edge_protocol::key::{parse_key, MAX_KEY_LEN};
use sha2::{Digest, Sha256};

/// The header that carries the key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// A deterministic key for one logical operation on one business object:
/// `key_for("order-42", "charge")` is `order-42-charge`. The same intent always gets the
/// same key, so even a process that crashes and starts over retries under the first key.
///
/// A new intent needs a new key: charging order 42 again after a final decline is another
/// operation (`key_for("order-42", "charge-2")`). When the result would not be a valid key
/// (over 255 characters, or characters outside printable ASCII or `"` `,` `\`), it is
/// `<action>-sha256-<hex of the composed key>` instead (or `sha256-<hex>` when the action
/// itself is unusable), still deterministic.
pub fn key_for(business_id: impl fmt::Display, action: &str) -> String {
    let key = format!("{business_id}-{action}");
    let plain = |s: &str| s.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b'\\'));
    if !key.is_empty() && key.len() <= MAX_KEY_LEN && plain(&key) {
        return key;
    }
    let hex = hex::encode(Sha256::digest(key.as_bytes()));
    if !action.is_empty() && action.len() <= 64 && plain(action) {
        format!("{action}-sha256-{hex}")
    } else {
        format!("sha256-{hex}")
    }
}

/// A fresh random key, a version-4 UUID (hyphenated, lower case) from the operating
/// system's random source, through the `uuid` crate's `getrandom`. The middleware gives one
/// to a covered request that has none; it is made once per request, before the first
/// attempt, and every retry sends it again.
///
/// Panics only when the operating system has no random source at all.
pub fn random_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The header value for `key`: the key itself when the worker reads it back unchanged,
/// otherwise an sf-string (`"a,b"`); an error, in the worker's words, when no form is a
/// valid key.
pub fn wire_key(key: &str) -> Result<String, &'static str> {
    if key.trim() != key {
        return Err("The Idempotency-Key must not start or end with whitespace.");
    }
    let reads_as = |wire: &str| parse_key(wire.as_bytes()).ok().filter(|k| k.as_str() == key).is_some();
    if reads_as(key) {
        return Ok(key.to_string());
    }
    let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
    if reads_as(&quoted) {
        return Ok(quoted);
    }
    Err(parse_key(quoted.as_bytes()).err().map_or("The Idempotency-Key is not valid.", |e| e.detail()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_for_is_deterministic_and_always_valid() {
        assert_eq!(key_for("order-42", "charge"), "order-42-charge");
        assert_eq!(key_for(format!("order-{}", 42), "refund"), "order-42-refund");
        assert_eq!(key_for(42, "charge"), "42-charge");
        let long = "x".repeat(300);
        let odd = "client@example.com, order 7";
        for (id, action) in
            [(long.as_str(), "charge"), (odd, "charge"), ("é", "charge"), ("id", "bad action")]
        {
            let key = key_for(id, action);
            assert_eq!(key, key_for(id, action), "deterministic");
            assert_eq!(wire_key(&key), Ok(key.clone()), "a bare key the worker reads back");
            assert!(key.len() <= 255);
        }
        assert!(key_for(&long, "charge").starts_with("charge-sha256-"));
        assert!(key_for("id", "bad action").starts_with("sha256-"));
        assert_ne!(key_for(&long, "charge"), key_for(&long, "refund"));
    }

    #[test]
    fn wire_keys_follow_the_worker_rules() {
        assert_eq!(wire_key("order-42-charge").as_deref(), Ok("order-42-charge"));
        // Characters a bare key may not hold travel as an sf-string.
        assert_eq!(wire_key("a,b").as_deref(), Ok(r#""a,b""#));
        assert_eq!(wire_key(r#"say "hi""#).as_deref(), Ok(r#""say \"hi\"""#));
        assert_eq!(wire_key(r"back\slash").as_deref(), Ok(r#""back\\slash""#));
        assert!(wire_key(&"k".repeat(255)).is_ok());
        for bad in ["", " ", " padded", "padded ", "tab\tinside", "new\nline", "clé", "\u{7f}"] {
            assert!(wire_key(bad).is_err(), "{bad:?}");
        }
        assert!(wire_key(&"k".repeat(256)).is_err());
    }

    #[test]
    fn random_keys_are_uuids_and_differ() {
        let a = random_key();
        let b = random_key();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4", "version 4: {a}");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "RFC 4122 variant: {a}");
        assert_eq!(wire_key(&a), Ok(a.clone()));
    }
}
