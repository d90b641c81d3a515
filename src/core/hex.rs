//! Hexadecimal: how digests, object names and nonces are written as text (lowercase), how a
//! percent-encoded byte is written (uppercase, RFC 3986), a JSON string's `\u00XX` escape,
//! and how any of them is read back.
//!
//! Owns the spelling only. One table lookup per digit, not `format!("{:02x}")`, which runs
//! the formatting machinery for every byte (and links it into the Wasm) on paths a request
//! takes: an object's keyed name, an origin signature, a reconciliation lookup's URL.

const LOWER: &[u8; 16] = b"0123456789abcdef";
const UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// `bytes` as lowercase hex digits, two per byte.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &byte in bytes {
        push(&mut out, byte);
    }
    out
}

/// `byte` as two lowercase hex digits, at the end of `out`.
pub fn push(out: &mut String, byte: u8) {
    push_with(out, byte, LOWER);
}

/// `byte` as two uppercase hex digits, at the end of `out` (a percent-encoded byte).
pub fn push_upper(out: &mut String, byte: u8) {
    push_with(out, byte, UPPER);
}

fn push_with(out: &mut String, byte: u8, digits: &[u8; 16]) {
    out.push(char::from(digits[usize::from(byte >> 4)]));
    out.push(char::from(digits[usize::from(byte & 0xf)]));
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
    fn uppercase_spells_as_format_does() {
        for byte in 0..=u8::MAX {
            let mut out = String::new();
            push_upper(&mut out, byte);
            assert_eq!(out, format!("{byte:02X}"));
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
