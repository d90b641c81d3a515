//! Keyed object names (`OBJECT_NAME_KEY`).
//!
//! Owns the name a key's Durable Object is addressed by when the operator set a name key.
//! Without it the name is `fingerprint::object_name`, a plain SHA-256 of scope and key: a
//! low-entropy scope with a predictable key (`order-42-charge`) gives a name anyone can
//! compute. With it the name is HMAC-SHA-256 under the key over that unkeyed name (itself
//! an unambiguous digest of scope ‖ key), so only the operator can link a name to a key.
//!
//! Changing or setting the key addresses a fresh set of objects, like a jurisdiction
//! change: records under the old names are no longer found (they expire by their alarms).
//! docs/deploy.md describes the migration.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::core::primitives::hex::encode as hex;

/// The variable (a secret) that keys object names.
pub const VAR_OBJECT_NAME_KEY: &str = "OBJECT_NAME_KEY";

/// The shortest accepted name key: 32 bytes, as for every other secret here.
pub const MIN_NAME_KEY_BYTES: usize = 32;

/// The object name: `unkeyed` (from `fingerprint::object_name`) as it is, or keyed.
pub fn keyed_object_name(name_key: Option<&[u8]>, unkeyed: String) -> String {
    match name_key {
        None => unkeyed,
        Some(key) => {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
            mac.update(unkeyed.as_bytes());
            hex(&mac.finalize().into_bytes())
        }
    }
}

/// Checks the secret's value: at least [`MIN_NAME_KEY_BYTES`] bytes. The value is never
/// echoed.
pub fn check_name_key(value: &str) -> Result<(), String> {
    if value.len() < MIN_NAME_KEY_BYTES {
        return Err(format!(
            "{VAR_OBJECT_NAME_KEY} is invalid: it must be at least {MIN_NAME_KEY_BYTES} bytes (it has {})",
            value.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::formats::fingerprint::{object_name, Scope};

    #[test]
    fn without_a_key_the_name_is_unchanged() {
        let plain = object_name(Scope::from_header(Some(b"Bearer a")), "k");
        assert_eq!(keyed_object_name(None, plain.clone()), plain);
    }

    #[test]
    fn keyed_names_are_hmacs_of_the_unkeyed_name() {
        // Computed independently with Python: hmac.new(b"k"*32, b"ab"*32, sha256).
        assert_eq!(
            keyed_object_name(Some(&[b'k'; 32]), "ab".repeat(32)),
            "bbc5acd627425f37bada3c8bbc3d6c31fae200e3c7696c639f37bd26638f17b3"
        );
        let plain = object_name(Scope::from_header(Some(b"Bearer a")), "order-42-charge");
        let a = keyed_object_name(Some(&[1; 32]), plain.clone());
        let b = keyed_object_name(Some(&[2; 32]), plain.clone());
        assert_ne!(a, plain);
        assert_ne!(a, b, "another key addresses other objects");
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn short_keys_are_refused_without_echoing_them() {
        let error = check_name_key("short-secret").unwrap_err();
        assert!(error.contains(VAR_OBJECT_NAME_KEY) && !error.contains("short-secret"));
        assert!(check_name_key(&"x".repeat(32)).is_ok());
    }
}
