//! Canonical form of a JSON body, for the payload fingerprint.
//!
//! Owns one function, [`canonicalize`]; it reads bytes and allocates, nothing else.
//!
//! Rules (what makes two bodies "the same payload"):
//! 1. Insignificant whitespace is dropped.
//! 2. Object members are sorted by the value of their key: escapes decoded, compared by
//!    code point. The sort is stable, so duplicate keys (also `"a"` and `"\u0061"`) keep
//!    their written order: parsers disagree on which duplicate wins, so their order stays
//!    part of the payload, and `{"a":1,"a":2}` and `{"a":2,"a":1}` differ.
//! 3. Strings and numbers are kept exactly as written. `1.0` and `1`, `"\u0041"` and `"A"`
//!    therefore differ. That errs towards calling two payloads different (a 422), never
//!    towards replaying one payload's outcome for another. Huge numbers (`1e400`, a 40-digit
//!    integer) are kept digit for digit: never rounded, never refused.
//! 4. A body that is not UTF-8, nesting deeper than [`MAX_DEPTH`], or anything that is not
//!    a single JSON value yields `None`; the caller then fingerprints the raw bytes (and still
//!    forwards the body). Recursion is bounded by the depth limit, so no input can overflow
//!    the stack (tested with 100,000 levels).

use std::borrow::Cow;

/// Deepest nesting of arrays and objects that is canonicalised.
pub const MAX_DEPTH: usize = 128;

/// Returns the canonical bytes of `body`, or `None` when it is not one JSON value in UTF-8
/// within the depth limit.
pub fn canonicalize(body: &[u8]) -> Option<Vec<u8>> {
    // RFC 8259 §8.1. Parsers differ in what they make of invalid UTF-8 (refuse it, or read
    // distinct byte sequences as the same U+FFFD), so such a body is only ever raw bytes.
    std::str::from_utf8(body).ok()?;
    let mut parser = Parser { input: body, pos: 0 };
    let mut out = Vec::with_capacity(body.len());
    parser.skip_ws();
    parser.value(&mut out, 0)?;
    parser.skip_ws();
    (parser.pos == body.len()).then_some(out)
}

struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    fn value(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(out, depth + 1),
            b'[' => self.array(out, depth + 1),
            b'"' => {
                let token = self.string()?;
                out.extend_from_slice(token);
                Some(())
            }
            b't' => self.literal(out, b"true"),
            b'f' => self.literal(out, b"false"),
            b'n' => self.literal(out, b"null"),
            _ => {
                let token = self.number()?;
                out.extend_from_slice(token);
                Some(())
            }
        }
    }

    fn literal(&mut self, out: &mut Vec<u8>, word: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(word.len())?;
        (self.input.get(self.pos..end)? == word).then(|| {
            self.pos = end;
            out.extend_from_slice(word);
        })
    }

    fn object(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        let mut members: Vec<(&'a [u8], Vec<u8>)> = Vec::new();
        self.skip_ws();
        if self.eat(b'}').is_none() {
            loop {
                self.skip_ws();
                let key = self.string()?;
                self.skip_ws();
                self.eat(b':')?;
                self.skip_ws();
                let mut value = Vec::new();
                self.value(&mut value, depth)?;
                members.push((key, value));
                self.skip_ws();
                if self.eat(b',').is_some() {
                    continue;
                }
                self.eat(b'}')?;
                break;
            }
        }
        members.sort_by_cached_key(|(key, _)| key_value(key));
        out.push(b'{');
        for (i, (key, value)) in members.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(key);
            out.push(b':');
            out.extend_from_slice(value);
        }
        out.push(b'}');
        Some(())
    }

    fn array(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        out.push(b'[');
        self.skip_ws();
        if self.eat(b']').is_none() {
            loop {
                self.skip_ws();
                self.value(out, depth)?;
                self.skip_ws();
                if self.eat(b',').is_some() {
                    out.push(b',');
                    continue;
                }
                self.eat(b']')?;
                break;
            }
        }
        out.push(b']');
        Some(())
    }

    /// A string token, quotes included, validated but not decoded.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.pos;
        self.eat(b'"')?;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    let input: &'a [u8] = self.input;
                    return Some(&input[start..self.pos]);
                }
                b'\\' => {
                    self.pos += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.pos += 1,
                        b'u' => {
                            let hex = self.input.get(self.pos + 1..self.pos + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.pos += 5;
                        }
                        _ => return None,
                    }
                }
                0x00..=0x1f => return None,
                _ => self.pos += 1,
            }
        }
    }

    /// A number token per RFC 8259 §6, kept verbatim.
    fn number(&mut self) -> Option<&'a [u8]> {
        let start = self.pos;
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.require_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.require_digits()?;
        }
        let input: &'a [u8] = self.input;
        Some(&input[start..self.pos])
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn require_digits(&mut self) -> Option<()> {
        let before = self.pos;
        self.digits();
        (self.pos > before).then_some(())
    }
}

/// The value of a validated string token, for sorting: its escapes decoded, as generalised
/// UTF-8 (a lone surrogate escape is encoded like a code point), whose byte order is code
/// point order. Borrowed when the token has no escape.
fn key_value(token: &[u8]) -> Cow<'_, [u8]> {
    let inner = token.get(1..token.len().saturating_sub(1)).unwrap_or_default();
    if !inner.contains(&b'\\') {
        return Cow::Borrowed(inner);
    }
    let mut out = Vec::with_capacity(inner.len());
    let mut rest = inner;
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        if byte != b'\\' {
            out.push(byte);
            continue;
        }
        let Some((&escape, tail)) = rest.split_first() else { break };
        rest = tail;
        let unit = match escape {
            b'u' => match hex4(rest) {
                Some(unit) => {
                    rest = &rest[4..];
                    unit
                }
                None => break,
            },
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => 0x0a,
            b'r' => 0x0d,
            b't' => 0x09,
            other => u32::from(other),
        };
        // A high surrogate followed by a low one is one code point.
        let low = rest.strip_prefix(b"\\u").and_then(hex4).filter(|low| (0xdc00..0xe000).contains(low));
        let code_point = match low {
            Some(low) if (0xd800..0xdc00).contains(&unit) => {
                rest = &rest[6..];
                0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00)
            }
            _ => unit,
        };
        push_code_point(&mut out, code_point);
    }
    Cow::Owned(out)
}

fn hex4(bytes: &[u8]) -> Option<u32> {
    let digits = bytes.get(..4)?;
    digits.iter().try_fold(0, |value, &digit| Some(value << 4 | char::from(digit).to_digit(16)?))
}

/// UTF-8's encoding of any code point below 0x110000, surrogates included.
fn push_code_point(out: &mut Vec<u8>, cp: u32) {
    let continuation = |shift: u32| 0x80 | ((cp >> shift) & 0x3f) as u8;
    match cp {
        0..=0x7f => out.push(cp as u8),
        0x80..=0x7ff => out.extend_from_slice(&[0xc0 | (cp >> 6) as u8, continuation(0)]),
        0x800..=0xffff => out.extend_from_slice(&[0xe0 | (cp >> 12) as u8, continuation(6), continuation(0)]),
        _ => out.extend_from_slice(&[
            0xf0 | (cp >> 18) as u8,
            continuation(12),
            continuation(6),
            continuation(0),
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> Option<String> {
        canonicalize(s.as_bytes()).map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn whitespace_is_dropped_and_keys_sorted() {
        assert_eq!(
            canon(" { \"b\" : [ 1 , 2 ], \"a\": {\"z\":null,\"y\":true} }\n").as_deref(),
            Some(r#"{"a":{"y":true,"z":null},"b":[1,2]}"#)
        );
        assert_eq!(canon(r#"{"a":1,"b":2}"#), canon(r#"{ "b": 2, "a": 1 }"#));
    }

    #[test]
    fn strings_and_numbers_are_kept_verbatim() {
        assert_eq!(canon(r#""a b\u0041""#).as_deref(), Some(r#""a b\u0041""#));
        assert_ne!(canon("1.0"), canon("1"));
        let huge_a = "123456789012345678901234567890";
        let huge_b = "123456789012345678901234567891";
        assert_ne!(canon(huge_a), canon(huge_b));
        assert_eq!(canon("-0.5e+10").as_deref(), Some("-0.5e+10"));
    }

    #[test]
    fn duplicate_keys_keep_their_order() {
        assert_eq!(canon(r#"{"a":1,"a":2}"#).as_deref(), Some(r#"{"a":1,"a":2}"#));
        assert_ne!(canon(r#"{"a":1,"a":2}"#), canon(r#"{"a":2,"a":1}"#));
    }

    #[test]
    fn duplicates_spelled_with_escapes_keep_their_order() {
        // Found by the json fuzz check: sorting raw tokens put "\u0061" before "a", so two
        // bodies that a last-wins parser reads as a=1 and a=2 had one canonical form.
        assert_eq!(canon(r#"{"a":1,"\u0061":2}"#).as_deref(), Some(r#"{"a":1,"\u0061":2}"#));
        assert_eq!(canon(r#"{"\u0061":2,"a":1}"#).as_deref(), Some(r#"{"\u0061":2,"a":1}"#));
        assert_eq!(canon(r#"{"b":1,"\u0061":2}"#).as_deref(), Some(r#"{"\u0061":2,"b":1}"#));
        // Keys sort by code point, escaped or not; a surrogate pair is one code point.
        let sorted = r#"{"\n":0,"A":1,"\u00e9":2,"\ud83e":4,"\ud83d\ude00":3}"#;
        assert_eq!(canon(sorted).as_deref(), Some(sorted));
        let reversed = r#"{"\ud83e":4,"\ud83d\ude00":3,"\u00e9":2,"A":1,"\n":0}"#;
        assert_eq!(canon(reversed).as_deref(), Some(sorted));
        assert_eq!(
            canon("{\"\u{1f600}\":1,\"\u{e9}\":2}").as_deref(),
            Some("{\"\u{e9}\":2,\"\u{1f600}\":1}")
        );
    }

    #[test]
    fn invalid_json_is_not_canonicalised() {
        for bad in ["", "{", "[1,]", "{\"a\"}", "01", "1.", "\"\u{1}\"", "\"\\x\"", "tru", "1 2"] {
            assert_eq!(canon(bad), None, "{bad:?}");
        }
        assert_eq!(canonicalize(b"\"\xff\""), None, "not UTF-8: fingerprinted raw");
        assert_eq!(canonicalize(b"{\"b\":1,\"\xff\":2}"), None);
    }

    #[test]
    fn depth_is_bounded_without_overflowing_the_stack() {
        let at_limit = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(canon(&at_limit).is_some());
        let over = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(canon(&over), None);
        let hostile = "[{\"a\":".repeat(100_000);
        assert_eq!(canon(&hostile), None);
    }
}
