//! Lowercase hexadecimal: how digests, object names and nonces are written as text, and
//! how a digest written so is read back (`core::fingerprint::Digest256::from_hex`).
//!
//! Owns the spelling only. One table lookup per digit, not `format!("{:02x}")`, which runs
//! the formatting machinery for every byte (and links it into the Wasm) on paths a request
//! takes: an object's keyed name, an origin signature.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lowercase hex digits, two per byte.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}

/// The value of one hex digit, either case; `None` for anything else.
pub fn digit_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The spelling `format!("{:02x}")` gives, and each digit reads back to its nibble.
        #[test]
        fn encode_spells_as_format_does_and_reads_back(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let text = encode(&bytes);
            let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            prop_assert_eq!(&text, &formatted);
            let read: Vec<u8> = text
                .as_bytes()
                .chunks(2)
                .map(|pair| (digit_value(pair[0]).unwrap() << 4) | digit_value(pair[1]).unwrap())
                .collect();
            prop_assert_eq!(read, bytes);
        }
    }

    #[test]
    fn only_hex_digits_have_a_value() {
        for byte in 0..=u8::MAX {
            let expected = char::from(byte).to_digit(16).filter(|_| byte.is_ascii()).map(|v| v as u8);
            assert_eq!(digit_value(byte), expected, "{byte:#04x}");
        }
    }
}
