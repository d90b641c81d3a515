//! Hexadecimal: how digests, object names and nonces are written as text (lowercase), how a
//! percent-encoded byte is written (uppercase, RFC 3986), a JSON string's `\u00XX` escape,
//! and how one digit is read back.
//!
//! Owns the names the call sites use; the spelling is the `hex` crate's and `std`'s.

use std::fmt::Write;

/// `bytes` as lowercase hex digits, two per byte.
pub fn encode(bytes: &[u8]) -> String {
    ::hex::encode(bytes)
}

/// `byte` as two lowercase hex digits, at the end of `out`.
pub fn push(out: &mut String, byte: u8) {
    let _ = write!(out, "{byte:02x}");
}

/// `byte` as two uppercase hex digits, at the end of `out` (a percent-encoded byte).
pub fn push_upper(out: &mut String, byte: u8) {
    let _ = write!(out, "{byte:02X}");
}

/// The value of one hex digit, either case; `None` for anything else.
pub fn digit_value(digit: u8) -> Option<u8> {
    // `to_digit` knows only ASCII digits and letters, so no byte above 0x7f has a value.
    char::from(digit).to_digit(16).map(|value| value as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spells_as_format_does_and_reads_back() {
        let bytes: Vec<u8> = (0..=u8::MAX).collect();
        let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(encode(&bytes), formatted);
        for byte in 0..=u8::MAX {
            let (mut lower, mut upper) = (String::new(), String::new());
            push(&mut lower, byte);
            push_upper(&mut upper, byte);
            assert_eq!(lower, format!("{byte:02x}"));
            assert_eq!(upper, format!("{byte:02X}"));
            let read = |s: &str| Some((digit_value(s.as_bytes()[0])? << 4) | digit_value(s.as_bytes()[1])?);
            assert_eq!((read(&lower), read(&upper)), (Some(byte), Some(byte)));
        }
    }

    #[test]
    fn only_hex_digits_have_a_value() {
        let digits = b"0123456789abcdefABCDEF";
        for byte in 0..=u8::MAX {
            assert_eq!(digit_value(byte).is_some(), digits.contains(&byte), "{byte:#04x}");
        }
    }
}
