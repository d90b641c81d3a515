//! Parsing of the `Idempotency-Key` request header.
//!
//! Owns the rules for what a key is; never looks at anything but the header values.
//!
//! 1. The draft (draft-ietf-httpapi-idempotency-key-header) defines the field as a
//!    Structured Fields sf-string: `"…"`, with `\"` and `\\` as the only escapes.
//! 2. Clients following Stripe's convention send a bare value (often a UUID, which is not a
//!    valid sf-token because it may start with a digit). A bare value is accepted when it is
//!    visible ASCII without `"`, `,` or `\`, so `abc` and `"abc"` name the same key.
//! 3. Surrounding optional whitespace is ignored; an empty or whitespace-only value, a value
//!    with control characters or non-ASCII bytes, a key longer than [`MAX_KEY_LEN`], and a bad
//!    escape are all invalid.
//! 4. Several `Idempotency-Key` fields in one request are invalid: a request names one
//!    operation. Runtimes join repeated fields with `", "`, so a top-level comma (outside an
//!    sf-string) is treated as a second field; that is why a bare key may not contain one.
//! 5. A route may take its key from another header ([`KeyHeader`], route option
//!    `key_header`, for APIs that already name it `X-Idempotency-Key` or
//!    `PayPal-Request-Id`): the same rules apply to that header's value, and the refusals
//!    name that header. On such a route `Idempotency-Key` is an ordinary header.
//! 6. One key has one spelling at the origin ([`IdempotencyKey::forwarded`]): `abc` and
//!    `"abc"` name the same key here, but an origin that stores the header as it came (as
//!    Stripe-like APIs do) would keep two. So the worker rewrites the key header of every
//!    request it forwards for a covered key (the first attempt and every re-send), and
//!    fills a lookup's `{key}` (`core::key_rules::reconcile`), with one canonical spelling, whatever
//!    spelling the client used: the bare value where the key reads back as itself bare (no
//!    `"`, `,` or `\`, no leading or trailing space), else the sf-string with `"` and
//!    `\` escaped. The signature's key line (`core::edge_rules::origin_auth`) signs the header as sent,
//!    so it carries that spelling too. Bare for the common key (a UUID, `order-42`), so
//!    most requests reach the origin byte for byte as the client sent them; an origin that
//!    accepts only the draft's sf-string would refuse a bare key at the first attempt (a
//!    final 4xx, nothing executed), never execute twice.

use std::fmt;

/// Longest key accepted, in characters (bytes, since keys are ASCII). Stripe's limit.
pub const MAX_KEY_LEN: usize = 255;

/// A validated idempotency key. Its `Debug` form never shows the key itself, so it can
/// appear in logs and panics without leaking it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The key's characters, unquoted.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The one spelling the origin receives for this key (rule 6): the bare value when it
    /// parses back to this key, else the sf-string. Either spelling a client sends gives the
    /// same bytes here, and they parse back to the same key.
    pub fn forwarded(&self) -> String {
        let key = self.0.as_bytes();
        // Keys are printable ASCII: a space is the only whitespace a bare value would lose.
        let bare = key.first() != Some(&b' ')
            && key.last() != Some(&b' ')
            && !key.iter().any(|b| matches!(b, b'"' | b',' | b'\\'));
        if bare {
            return self.0.clone();
        }
        let mut out = String::with_capacity(key.len() + 8);
        out.push('"');
        for c in self.0.chars() {
            if matches!(c, '"' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey(<{} chars>)", self.0.len())
    }
}

/// Why a key was refused. Each variant becomes the `detail` of an invalid-key problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    Missing,
    Empty,
    TooLong,
    NotPrintableAscii,
    BadEscape,
    UnterminatedString,
    SeveralValues,
}

impl KeyError {
    /// A sentence for the problem's `detail`. Never includes the key.
    pub fn detail(self) -> &'static str {
        match self {
            KeyError::Missing => "This method requires the Idempotency-Key header.",
            KeyError::Empty => "The Idempotency-Key header is empty.",
            KeyError::TooLong => "The Idempotency-Key is longer than 255 characters.",
            KeyError::NotPrintableAscii => {
                "The Idempotency-Key must be printable ASCII (no control characters, no non-ASCII, no comma in a bare key)."
            }
            KeyError::BadEscape => {
                "The Idempotency-Key sf-string has an escape other than \\\" or \\\\."
            }
            KeyError::UnterminatedString => "The Idempotency-Key sf-string has no closing quote.",
            KeyError::SeveralValues => {
                "The request carries more than one Idempotency-Key value; send exactly one."
            }
        }
    }
}

/// The header a route takes its key from: its name as configured (for messages) and in
/// lower case (to read it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHeader<'a> {
    pub name: &'a str,
    pub lowercase: &'a str,
}

/// `Idempotency-Key`, every route's key header unless it names another.
pub const IDEMPOTENCY_KEY: KeyHeader<'static> =
    KeyHeader { name: "Idempotency-Key", lowercase: "idempotency-key" };

impl KeyHeader<'_> {
    pub fn is_default(&self) -> bool {
        self.lowercase == IDEMPOTENCY_KEY.lowercase
    }
}

impl KeyError {
    /// [`KeyError::detail`] for a key read from `header` (rule 5): the same sentence, naming
    /// that header.
    pub fn detail_for(self, header: KeyHeader<'_>) -> String {
        self.detail().replace(IDEMPOTENCY_KEY.name, header.name)
    }
}

/// Parses the request's `Idempotency-Key` field values (one entry per header line as the
/// runtime reports them; workerd joins repeated lines into one entry with `", "`).
pub fn parse_key_fields<'a, I>(fields: I) -> Result<IdempotencyKey, KeyError>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    let mut fields = fields.into_iter();
    let first = fields.next().ok_or(KeyError::Missing)?;
    if fields.next().is_some() {
        return Err(KeyError::SeveralValues);
    }
    parse_key(first)
}

/// Parses one `Idempotency-Key` field value.
pub fn parse_key(raw: &[u8]) -> Result<IdempotencyKey, KeyError> {
    let value = trim_ows(raw);
    if value.is_empty() {
        return Err(KeyError::Empty);
    }
    let key = if value[0] == b'"' { parse_sf_string(value)? } else { parse_bare(value)? };
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong);
    }
    Ok(IdempotencyKey(key))
}

fn trim_ows(raw: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !is_ows(b)).unwrap_or(raw.len());
    let end = raw.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    &raw[start..end]
}

/// RFC 8941 §4.2.5: `"` then printable ASCII with `\"` / `\\` escapes, then `"`. Anything
/// after the closing quote other than whitespace means another list member was joined in.
fn parse_sf_string(value: &[u8]) -> Result<String, KeyError> {
    let mut out = String::with_capacity(value.len().min(MAX_KEY_LEN + 1));
    let mut bytes = value[1..].iter().copied();
    while let Some(b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(escaped @ (b'"' | b'\\')) => out.push(escaped as char),
                Some(_) => return Err(KeyError::BadEscape),
                None => return Err(KeyError::UnterminatedString),
            },
            b'"' => {
                let rest: Vec<u8> = bytes.collect();
                return if trim_ows(&rest).is_empty() {
                    Ok(out)
                } else if rest.contains(&b',') {
                    Err(KeyError::SeveralValues)
                } else {
                    Err(KeyError::NotPrintableAscii)
                };
            }
            0x20..=0x7e => out.push(b as char),
            _ => return Err(KeyError::NotPrintableAscii),
        }
        if out.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong);
        }
    }
    Err(KeyError::UnterminatedString)
}

fn parse_bare(value: &[u8]) -> Result<String, KeyError> {
    if value.contains(&b',') {
        return Err(KeyError::SeveralValues);
    }
    if value.len() > MAX_KEY_LEN {
        // Checked before the character scan so that the error does not depend on what
        // lies beyond the limit.
        return Err(KeyError::TooLong);
    }
    let printable = |b: &u8| (0x20..=0x7e).contains(b) && *b != b'"' && *b != b'\\';
    if !value.iter().all(printable) {
        return Err(KeyError::NotPrintableAscii);
    }
    // Checked above: every byte is ASCII.
    Ok(value.iter().map(|&b| b as char).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> String {
        parse_key(raw.as_bytes()).expect("valid key").as_str().to_owned()
    }

    fn err(raw: &[u8]) -> KeyError {
        parse_key(raw).expect_err("invalid key")
    }

    #[test]
    fn bare_and_sf_string_forms_name_the_same_key() {
        assert_eq!(ok("abc-123"), "abc-123");
        assert_eq!(ok("\"abc-123\""), "abc-123");
        assert_eq!(ok("  \"abc-123\"\t"), "abc-123");
        assert_eq!(ok("8e03978e-40d5-43e8-bc93-6894a57f9324"), "8e03978e-40d5-43e8-bc93-6894a57f9324");
        assert_eq!(ok("order 42 charge"), "order 42 charge");
    }

    #[test]
    fn sf_string_escapes_are_decoded() {
        assert_eq!(ok(r#""a\"b\\c""#), r#"a"b\c"#);
        assert_eq!(ok(r#""a,b""#), "a,b");
    }

    #[test]
    fn empty_and_whitespace_keys_are_refused() {
        assert_eq!(err(b""), KeyError::Empty);
        assert_eq!(err(b"   \t "), KeyError::Empty);
        assert_eq!(err(b"\"\""), KeyError::Empty);
    }

    #[test]
    fn length_limit_is_255() {
        assert_eq!(ok(&"k".repeat(255)).len(), 255);
        assert_eq!(err("k".repeat(256).as_bytes()), KeyError::TooLong);
        assert_eq!(err(format!("\"{}\"", "k".repeat(256)).as_bytes()), KeyError::TooLong);
        assert_eq!(err("k".repeat(100_000).as_bytes()), KeyError::TooLong);
    }

    #[test]
    fn control_and_non_ascii_bytes_are_refused() {
        assert_eq!(err(b"ab\x00c"), KeyError::NotPrintableAscii);
        assert_eq!(err(b"ab\x7fc"), KeyError::NotPrintableAscii);
        assert_eq!(err(b"ab\nc"), KeyError::NotPrintableAscii);
        assert_eq!(err("caf\u{e9}".as_bytes()), KeyError::NotPrintableAscii);
        assert_eq!(err(b"\"caf\xc3\xa9\""), KeyError::NotPrintableAscii);
        assert_eq!(err(b"a\"b"), KeyError::NotPrintableAscii);
        assert_eq!(err(b"a\\b"), KeyError::NotPrintableAscii);
    }

    #[test]
    fn bad_sf_strings_are_refused() {
        assert_eq!(err(br#""a\x""#), KeyError::BadEscape);
        assert_eq!(err(br#""abc"#), KeyError::UnterminatedString);
        assert_eq!(err(br#""abc\"#), KeyError::UnterminatedString);
        assert_eq!(err(br#""abc"x"#), KeyError::NotPrintableAscii);
    }

    #[test]
    fn several_values_are_refused() {
        assert_eq!(err(b"a, b"), KeyError::SeveralValues);
        assert_eq!(err(br#""a", "b""#), KeyError::SeveralValues);
        let two: [&[u8]; 2] = [b"a", b"b"];
        assert_eq!(parse_key_fields(two), Err(KeyError::SeveralValues));
        assert_eq!(parse_key_fields(std::iter::empty()), Err(KeyError::Missing));
    }

    #[test]
    fn refusals_name_the_routes_key_header() {
        let paypal = KeyHeader { name: "PayPal-Request-Id", lowercase: "paypal-request-id" };
        assert_eq!(
            KeyError::Missing.detail_for(paypal),
            "This method requires the PayPal-Request-Id header."
        );
        assert_eq!(
            KeyError::SeveralValues.detail_for(paypal),
            "The request carries more than one PayPal-Request-Id value; send exactly one."
        );
        for error in [KeyError::Missing, KeyError::Empty, KeyError::TooLong, KeyError::BadEscape] {
            assert_eq!(error.detail_for(IDEMPOTENCY_KEY), error.detail(), "unchanged by default");
            assert!(!error.detail_for(paypal).contains("Idempotency-Key"), "{error:?}");
        }
        assert!(IDEMPOTENCY_KEY.is_default() && !paypal.is_default());
    }

    #[test]
    fn every_spelling_of_a_key_is_forwarded_alike() {
        let forwarded = |raw: &str| parse_key(raw.as_bytes()).unwrap().forwarded();
        for (spellings, expected) in [
            (&["k1", "\"k1\"", "  \"k1\" "][..], "k1"),
            (&["order 42 charge", "\"order 42 charge\""][..], "order 42 charge"),
            (&["\"a,b\""][..], "\"a,b\""),
            (&[r#""a\"b\\c""#][..], r#""a\"b\\c""#),
            (&["\" k \""][..], "\" k \""),
            (&[".", "\".\""][..], "."),
        ] {
            for spelling in spellings {
                assert_eq!(forwarded(spelling), expected, "{spelling:?}");
            }
        }
    }

    proptest::proptest! {
        /// The forwarded spelling names the same key, and is the same whichever spelling
        /// the client chose: bare where it can be, else the sf-string.
        #[test]
        fn the_forwarded_spelling_parses_back_to_the_key(key in "[ -~]{1,40}") {
            let Ok(parsed) = parse_key(format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\"")).as_bytes()) else {
                return Ok(());
            };
            let forwarded = parsed.forwarded();
            proptest::prop_assert_eq!(parse_key(forwarded.as_bytes()), Ok(parsed.clone()));
            if let Ok(bare) = parse_key(key.as_bytes()) {
                if bare == parsed {
                    proptest::prop_assert_eq!(bare.forwarded(), forwarded.clone());
                }
            }
            proptest::prop_assert_eq!(forwarded.starts_with('"'), parse_key(parsed.as_str().as_bytes()).ok() != Some(parsed.clone()));
        }
    }

    #[test]
    fn debug_output_hides_the_key() {
        let key = parse_key(b"secret-key").unwrap();
        assert!(!format!("{key:?}").contains("secret"));
    }
}
