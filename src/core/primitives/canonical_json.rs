//! Canonical form of a JSON body, for the payload fingerprint.
//!
//! Owns [`canonicalize`], and the reading of JSON one level at a time (`read`, `level`)
//! that `core::formats::body_shape` shares; it reads bytes and allocates, nothing else.
//!
//! Rules (what makes two bodies "the same payload"):
//! 1. Insignificant whitespace is dropped.
//! 2. Object members are sorted by the value of their key: escapes decoded, compared by
//!    code point. The sort is stable, so duplicate keys (also `"a"` and `"\u0061"`) keep
//!    their written order: parsers disagree on which duplicate wins, so their order stays
//!    part of the payload, and `{"a":1,"a":2}` and `{"a":2,"a":1}` differ.
//!    An object with two keys that differ as written but that some common decoder reads as
//!    one key is not sorted at all: its members keep their written order. Such lookalikes
//!    are keys equal when compared case-insensitively (Go's `encoding/json`, ASP.NET's
//!    defaults; full Unicode case folding, so `K`, `k` and the Kelvin sign are one), or when
//!    a lone surrogate escape is read as U+FFFD. `{"amount":100,"Amount":200}` and
//!    `{"Amount":200,"amount":100}` are 100 and 200 to such a decoder, so they must differ.
//!    Objects without lookalikes canonicalise as they always did, so stored fingerprints
//!    stay valid.
//! 3. Strings and numbers are kept exactly as written. `1.0` and `1`, `"\u0041"` and `"A"`
//!    therefore differ. That errs towards calling two payloads different (a 422), never
//!    towards replaying one payload's outcome for another. Huge numbers (`1e400`, a 40-digit
//!    integer) are kept digit for digit: never rounded, never refused.
//! 4. A body that is not UTF-8, nesting deeper than [`MAX_DEPTH`], or anything that is not
//!    a single JSON value yields `None`; the caller then fingerprints the raw bytes (and still
//!    forwards the body).
//!
//! The JSON is read by serde_json, never by a parser of this crate's own: serde_json checks
//! the syntax (RFC 8259: one value, whitespace around it, no trailing text), and hands each
//! level over as [`RawValue`]s, the exact text of every member name, member value and array
//! element, so that names and scalars can be kept as written and duplicate members seen
//! (a `serde_json::Value` keeps neither). An object or array is read one level at a time
//! from its raw text (`level`), so a byte is read once per level of nesting above it, at
//! most [`MAX_DEPTH`] times; serde_json skips a raw value without recursing, so no input
//! can overflow the stack (tested with 100,000 levels), and the depth limit is this
//! module's own (128 levels, as before; serde_json's own limit, 127, never applies, since
//! each read goes one level deep).

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::case_fold::push_folded;

/// Deepest nesting of arrays and objects that is canonicalised.
pub const MAX_DEPTH: usize = 128;

/// Returns the canonical bytes of `body`, or `None` when it is not one JSON value in UTF-8
/// within the depth limit.
pub fn canonicalize(body: &[u8]) -> Option<Vec<u8>> {
    // RFC 8259 §8.1. Parsers differ in what they make of invalid UTF-8 (refuse it, or read
    // distinct byte sequences as the same U+FFFD), so such a body is only ever raw bytes.
    let text = std::str::from_utf8(body).ok()?;
    let mut out = Vec::with_capacity(body.len());
    write(read(text)?, &mut out, 0)?;
    Some(out)
}

/// The whole of `text` as one JSON value, as serde_json reads it (whitespace around it, no
/// trailing text), its top level read at once ([`level`]), so that the text is not scanned
/// once more just to find where the value ends.
pub(crate) fn read(text: &str) -> Option<Level<'_>> {
    match text.trim_start_matches([' ', '\t', '\n', '\r']).as_bytes().first()? {
        b'{' | b'[' => container(text),
        _ => Some(Level::Token(serde_json::from_str::<&RawValue>(text).ok()?.get())),
    }
}

/// One level of a JSON value: an object's members (the name's string token as written,
/// and the value) in written order, duplicates included; an array's elements; or the token
/// of a string, number or literal.
pub(crate) enum Level<'a> {
    Object(Vec<(&'a str, &'a RawValue)>),
    Array(Vec<&'a RawValue>),
    Token(&'a str),
}

/// Reads one level of `raw`, a value serde_json has already checked.
pub(crate) fn level(raw: &RawValue) -> Option<Level<'_>> {
    match raw.get().as_bytes().first()? {
        b'{' | b'[' => container(raw.get()),
        _ => Some(Level::Token(raw.get())),
    }
}

/// The members or elements of the object or array `text` holds (and nothing else).
fn container(text: &str) -> Option<Level<'_>> {
    Some(match text.trim_start_matches([' ', '\t', '\n', '\r']).as_bytes().first()? {
        b'{' => Level::Object(serde_json::from_str::<Members<'_>>(text).ok()?.0),
        _ => Level::Array(serde_json::from_str::<Vec<&RawValue>>(text).ok()?),
    })
}

/// An object's members as serde_json reads them, each as its raw text, in written order.
struct Members<'a>(Vec<(&'a str, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(name) = map.next_key::<&'de RawValue>()? {
                    members.push((name.get(), map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// Writes the canonical form of `raw`, a value at `depth` levels of nesting.
fn value(raw: &RawValue, out: &mut Vec<u8>, depth: usize) -> Option<()> {
    write(level(raw)?, out, depth)
}

/// Writes the canonical form of a value read as `level`, at `depth` levels of nesting.
fn write(level: Level<'_>, out: &mut Vec<u8>, depth: usize) -> Option<()> {
    match level {
        Level::Token(token) => out.extend_from_slice(token.as_bytes()),
        _ if depth >= MAX_DEPTH => return None,
        Level::Array(elements) => {
            out.push(b'[');
            for (i, element) in elements.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value(element, out, depth + 1)?;
            }
            out.push(b']');
        }
        Level::Object(written) => {
            let mut members: Vec<(&[u8], Vec<u8>)> = Vec::with_capacity(written.len());
            for (key, raw_value) in written {
                let mut canonical = Vec::new();
                value(raw_value, &mut canonical, depth + 1)?;
                members.push((key.as_bytes(), canonical));
            }
            if !has_lookalike_keys(&members) {
                // Each key decoded once; the sort is stable, so duplicates keep their order.
                members.sort_by_cached_key(|&(key, _)| key_value(key));
            }
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
        }
    }
    Some(())
}

/// The value of a string token serde_json has checked, for sorting: its escapes decoded by
/// serde_json as a byte string, so in generalised UTF-8 (WTF-8: a lone surrogate escape is
/// encoded like a code point, a pair as the one code point it stands for), whose byte order
/// is code point order. Borrowed when the token has no escape.
pub(crate) fn key_value(token: &[u8]) -> Cow<'_, [u8]> {
    let inner = token.get(1..token.len().saturating_sub(1)).unwrap_or_default();
    if !inner.contains(&b'\\') {
        return Cow::Borrowed(inner);
    }
    struct Decoded;
    impl<'de> Visitor<'de> for Decoded {
        type Value = Cow<'de, [u8]>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON string")
        }
        fn visit_borrowed_bytes<E>(self, bytes: &'de [u8]) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(bytes))
        }
        fn visit_bytes<E>(self, bytes: &[u8]) -> Result<Self::Value, E> {
            Ok(Cow::Owned(bytes.to_vec()))
        }
    }
    let mut deserializer = serde_json::Deserializer::from_slice(token);
    deserializer.deserialize_bytes(Decoded).unwrap_or(Cow::Borrowed(inner))
}

/// Whether two of these keys differ as written but are one key to a case-insensitive
/// decoder, or to one that reads a lone surrogate as U+FFFD (see rule 2).
fn has_lookalike_keys(members: &[(&[u8], Vec<u8>)]) -> bool {
    // Lowercase ASCII keys without escapes are their own folded form: only exact duplicates
    // can look alike, and the stable sort keeps those in order.
    let plain = |key: &[u8]| key.iter().all(|&b| b.is_ascii() && !b.is_ascii_uppercase() && b != b'\\');
    if members.len() < 2 || members.iter().all(|(key, _)| plain(key)) {
        return false;
    }
    let mut keys: Vec<(String, Cow<'_, [u8]>)> =
        members.iter().map(|(key, _)| (folded_key(key), key_value(key))).collect();
    keys.sort_unstable();
    keys.windows(2).any(|pair| pair[0].0 == pair[1].0 && pair[0].1 != pair[1].1)
}

/// A key as the most lenient common decoder reads it: escapes decoded, a lone surrogate as
/// U+FFFD, and fully case-folded (upper case, then lower case, so that `ſ`, `S` and `s`, or
/// the Kelvin sign and `k`, come out equal). Folding too much only keeps more objects in
/// written order, which errs towards a 422, never towards a wrong replay.
pub(crate) fn folded_key(token: &[u8]) -> String {
    let value = key_value(token);
    fold(generalised_code_points(&value).map(|cp| char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER)))
}

/// A name (a JSON Pointer's token, say) folded as [`folded_key`] folds a key, so that the two
/// compare.
pub(crate) fn folded_name(name: &str) -> String {
    fold(name.chars())
}

/// Upper case, then lower case, per character (`core::primitives::case_fold`: the standard library's
/// mapping, from a table of this crate's own).
fn fold(chars: impl Iterator<Item = char>) -> String {
    let mut folded = String::new();
    for c in chars {
        push_folded(&mut folded, c);
    }
    folded
}

/// The code points of generalised UTF-8 (as [`key_value`] writes it: surrogates encoded
/// like any other code point).
fn generalised_code_points(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        let (&lead, tail) = rest.split_first()?;
        let (len, initial) = match lead {
            0x00..=0x7f => (0, u32::from(lead)),
            0xc0..=0xdf => (1, u32::from(lead & 0x1f)),
            0xe0..=0xef => (2, u32::from(lead & 0x0f)),
            _ => (3, u32::from(lead & 0x07)),
        };
        let take = len.min(tail.len());
        let code_point = tail[..take].iter().fold(initial, |cp, &b| cp << 6 | u32::from(b & 0x3f));
        rest = &tail[take..];
        Some(code_point)
    })
}

#[cfg(test)]
mod known_answers;

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
    fn keys_that_differ_only_in_case_keep_their_order() {
        // A case-insensitive, last-wins decoder reads the first as 200 and the second as 100.
        let first = canon(r#"{"amount":100,"Amount":200}"#);
        let second = canon(r#"{"Amount":200,"amount":100}"#);
        assert_ne!(first, second);
        assert_eq!(first.as_deref(), Some(r#"{"amount":100,"Amount":200}"#));
        // The whole object keeps its written order, other members too.
        assert_eq!(canon(r#"{"z":1,"ID":2,"id":3}"#).as_deref(), Some(r#"{"z":1,"ID":2,"id":3}"#));
        assert_ne!(canon(r#"{"z":1,"ID":2,"id":3}"#), canon(r#"{"ID":2,"z":1,"id":3}"#));
        // Full folding: the Kelvin sign and the long s fold onto ASCII letters.
        assert_ne!(canon("{\"k\":1,\"\u{212a}\":2}"), canon("{\"\u{212a}\":2,\"k\":1}"));
        assert_ne!(canon("{\"s\":1,\"\u{17f}\":2}"), canon("{\"\u{17f}\":2,\"s\":1}"));
        assert_ne!(canon(r#"{"k":1,"\u212A":2}"#), canon(r#"{"\u212A":2,"k":1}"#));
        // In nested objects too.
        assert_ne!(canon(r#"{"x":{"a":1,"A":2}}"#), canon(r#"{"x":{"A":2,"a":1}}"#));
    }

    #[test]
    fn lone_surrogates_and_the_replacement_character_keep_their_order() {
        // A decoder that reads a lone surrogate as U+FFFD sees one key twice.
        assert_ne!(canon(r#"{"\ud800":1,"\ufffd":2}"#), canon(r#"{"\ufffd":2,"\ud800":1}"#));
        assert_ne!(canon(r#"{"\udc00":1,"\ud800":2}"#), canon(r#"{"\ud800":2,"\udc00":1}"#));
    }

    #[test]
    fn objects_without_lookalikes_sort_as_before() {
        // Mixed case alone changes nothing: stored fingerprints stay valid across the fix.
        assert_eq!(canon(r#"{"b":1,"B":2,"a":3}"#).as_deref(), Some(r#"{"b":1,"B":2,"a":3}"#));
        assert_eq!(canon(r#"{"b":1,"A":3}"#).as_deref(), Some(r#"{"A":3,"b":1}"#));
        assert_eq!(canon(r#"{"Zeta":1,"alpha":2}"#).as_deref(), Some(r#"{"Zeta":1,"alpha":2}"#));
        assert_eq!(canon(r#"{"alpha":2,"Zeta":1}"#).as_deref(), Some(r#"{"Zeta":1,"alpha":2}"#));
    }

    use proptest::strategy::Strategy;

    /// What a decoder makes of an object with duplicate or lookalike keys.
    // Each name says which duplicate wins: the shared suffix is the point.
    #[allow(clippy::enum_variant_names)]
    #[derive(Clone, Copy, Debug)]
    enum Decoder {
        /// Exact keys, the last duplicate wins (JavaScript, Python, serde_json's Map).
        LastWins,
        /// Exact keys, the first duplicate wins.
        FirstWins,
        /// Case-insensitive matching, the last wins (Go's encoding/json into a struct).
        CaseInsensitiveLastWins,
        /// Lone surrogates read as U+FFFD, the last wins.
        LossyLastWins,
    }

    fn decode(members: &[(&str, u8)], decoder: Decoder) -> Vec<(String, u8)> {
        let mut seen: Vec<(String, u8)> = Vec::new();
        for &(key, value) in members {
            let token = format!("\"{key}\"");
            let name = match decoder {
                Decoder::LastWins | Decoder::FirstWins => format!("{:?}", key_value(token.as_bytes())),
                Decoder::CaseInsensitiveLastWins | Decoder::LossyLastWins => folded_key(token.as_bytes()),
            };
            match seen.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) if !matches!(decoder, Decoder::FirstWins) => slot.1 = value,
                Some(_) => {}
                None => seen.push((name, value)),
            }
        }
        seen.sort();
        seen
    }

    const LOOKALIKE_KEYS: [&str; 12] = [
        "a", "A", "\\u0061", "amount", "Amount", "AMOUNT", "k", "\\u212A", "s", "\u{17f}", "\\ud800",
        "\\ufffd",
    ];

    proptest::proptest! {
        // Two payloads with one canonical form are read alike by every decoder above.
        #[test]
        fn one_canonical_form_means_one_reading(
            (a, b) in proptest::collection::vec((0..LOOKALIKE_KEYS.len(), 0u8..3), 1..6)
                .prop_flat_map(|members| {
                    let shuffled = proptest::strategy::Just(members.clone()).prop_shuffle();
                    (proptest::strategy::Just(members), shuffled)
                })
        ) {
            let render = |members: &[(usize, u8)]| {
                let body: Vec<String> =
                    members.iter().map(|&(k, v)| format!("\"{}\":{v}", LOOKALIKE_KEYS[k])).collect();
                format!("{{{}}}", body.join(","))
            };
            let (text_a, text_b) = (render(&a), render(&b));
            if canon(&text_a) == canon(&text_b) {
                let members = |m: &[(usize, u8)]| m.iter().map(|&(k, v)| (LOOKALIKE_KEYS[k], v)).collect::<Vec<_>>();
                for decoder in [Decoder::LastWins, Decoder::FirstWins, Decoder::CaseInsensitiveLastWins, Decoder::LossyLastWins] {
                    proptest::prop_assert_eq!(
                        decode(&members(&a), decoder),
                        decode(&members(&b), decoder),
                        "{} and {} share a fingerprint but {:?} reads them differently", text_a, text_b, decoder
                    );
                }
            }
        }
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
