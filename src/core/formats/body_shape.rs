//! Fingerprints shaped per route: which parts of a JSON body count as the payload (the route
//! options `fingerprint_ignore` and `fingerprint_only`, `core::edge_rules::routes`).
//!
//! Owns JSON Pointers (RFC 6901) and what they do to a body's canonical form
//! (`core::primitives::canonical_json`) before `core::formats::fingerprint` hashes it. It reads bytes, nothing
//! else. Only the body is shaped: method, path and query, content type, fingerprint headers
//! and the caller's binding count as on every route.
//!
//! Rules:
//! 1. A pointer is a run of `/`-prefixed tokens, `~0` standing for `~` and `~1` for `/`;
//!    any other `~` is an error, and so is a pointer that does not start with `/`. The empty
//!    pointer (the whole body) is refused: ignoring it would make every body one payload,
//!    and counting only it is what a route without the options does.
//! 2. A token selects, in an object, the members of that name (every one of them when a
//!    name is repeated), and in an array the element at that index when the token is an
//!    index as RFC 6901 writes one (`0`, or digits without a leading zero): `-`, `01` or
//!    `x` select no element. A pointer that runs into a string, a number, a literal or past
//!    an array's end selects nothing.
//! 3. `fingerprint_ignore`: what the pointers select is removed from the canonical form,
//!    every pointer resolved against the body as it came (removing `/items/0` does not make
//!    `/items/1` name another element). What is left is the canonical form of the smaller
//!    body and is hashed as such, so a body in which no ignored field occurs hashes exactly
//!    as on a route without the option. Names match exactly (escapes decoded): ignoring
//!    `/ts` leaves `TS` counted, since a decoder that tells them apart reads another field.
//! 4. `fingerprint_only`: the hash covers, pointer by pointer in the configured order, the
//!    pointer and each value it selects (its canonical form, and the names on its way as
//!    the body spells them), or that it selects none (so an absent field and `null`
//!    differ). Nothing else of the body counts. Here names match
//!    as a case-insensitive decoder reads them (`canonical_json`, rule 2): with
//!    `/amount`, `{"amount":1,"AMOUNT":9}` counts both members, in canonical order, so a
//!    body that such an origin reads as another amount is never the same payload. Matching
//!    too much only errs towards a 422.
//! 5. Changing an ignored field's value never changes the fingerprint, nor does adding or
//!    removing it, but for one case: in an object where a lookalike of its name occurs
//!    (`ts` beside `TS`), the object keeps its written order (`canonical_json`, rule 2),
//!    so where the ignored member stood still counts. That errs towards a 422.
//! 6. A body that is not canonicalised (not JSON, or not a JSON content type) is not
//!    shaped: it is hashed whole, as raw bytes, as on every route, so a retry must then be
//!    byte-identical. The options cannot be applied to what cannot be read as JSON, and
//!    counting everything never replays one payload's answer for another.
//!
//! The pointers are this module's own, not serde_json's `Value::pointer`, which cannot
//! express rules 2 to 4: it reads a `Value`, which keeps one member of a repeated name (the
//! last) where rule 2 selects every one of them, matches names exactly where rule 4 matches
//! them as a case-insensitive decoder does, and gives a value, not its canonical text (exact
//! numbers, names as spelled) that rules 3 and 4 hash. The JSON itself is read by serde_json
//! (`canonical_json::level`); what is left here is RFC 6901's token syntax (`~0`, `~1`,
//! array indices) and the walk.

use serde_json::value::RawValue;

use crate::core::primitives::canonical_json::{self, folded_key, folded_name, key_value, Level, MAX_DEPTH};

/// Most pointers a route may list.
pub const MAX_POINTERS: usize = 32;
/// Longest pointer accepted, in bytes.
pub const MAX_POINTER_BYTES: usize = 1024;

/// A JSON Pointer (RFC 6901), parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonPointer {
    /// As configured, for messages and for the `fingerprint_only` hash.
    text: String,
    /// The reference tokens, `~1` and `~0` decoded.
    tokens: Vec<String>,
    /// The tokens folded as a case-insensitive decoder folds a name (rule 4).
    folded: Vec<String>,
}

impl JsonPointer {
    /// Parses a pointer; the error says what is wrong, for a configuration error.
    pub fn parse(text: &str) -> Result<JsonPointer, String> {
        if text.is_empty() {
            return Err("the empty pointer names the whole body; name a field (\"/amount\")".to_owned());
        }
        if text.len() > MAX_POINTER_BYTES {
            return Err(format!("longer than {MAX_POINTER_BYTES} bytes"));
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err("a JSON Pointer starts with \"/\" (RFC 6901)".to_owned());
        };
        let tokens = rest.split('/').map(unescape).collect::<Result<Vec<_>, _>>()?;
        if tokens.len() > MAX_DEPTH {
            return Err(format!("deeper than the {MAX_DEPTH} levels a body is read to"));
        }
        let folded = tokens.iter().map(|token| folded_name(token)).collect();
        Ok(JsonPointer { text: text.to_owned(), tokens, folded })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// `~1` is `/`, `~0` is `~` (in that order of decoding, so `~01` is `~1`).
fn unescape(token: &str) -> Result<String, String> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c != '~' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') => out.push('~'),
            Some('1') => out.push('/'),
            _ => return Err("\"~\" must be followed by 0 or 1 (RFC 6901: ~0 is ~, ~1 is /)".to_owned()),
        }
    }
    Ok(out)
}

/// An array index as RFC 6901 writes one.
fn array_index(token: &str) -> Option<usize> {
    let digits = token.as_bytes();
    let canonical = digits == b"0" || (!digits.is_empty() && digits[0] != b'0');
    if !canonical || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    token.parse().ok()
}

/// Which parts of a JSON body count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyShape {
    /// Everything but what these select (rule 3).
    Ignore(Vec<JsonPointer>),
    /// Only what these select (rule 4).
    Only(Vec<JsonPointer>),
}

/// What stands for a shaped body in the fingerprint: a form label and the bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shaped {
    pub form: &'static [u8],
    pub bytes: Vec<u8>,
}

impl BodyShape {
    /// Shapes a body's canonical form. `None` when `canonical` cannot be read, which never
    /// happens to `canonical_json`'s output: the caller then counts the whole body.
    pub fn apply(&self, canonical: &[u8]) -> Option<Shaped> {
        let root = Reader::parse(canonical)?;
        Some(match self {
            BodyShape::Ignore(pointers) => {
                let mut trie = Trie::default();
                for pointer in pointers {
                    trie.insert(&pointer.tokens);
                }
                let mut bytes = Vec::with_capacity(canonical.len());
                without(&root, &trie, &mut bytes);
                // The canonical form of the smaller body, labelled as any canonical body.
                Shaped { form: b"json", bytes }
            }
            BodyShape::Only(pointers) => {
                let mut bytes = Vec::new();
                for pointer in pointers {
                    let mut selected = Vec::new();
                    select(&root, &pointer.tokens, &pointer.folded, &mut Vec::new(), &mut selected);
                    push_field(&mut bytes, pointer.text.as_bytes());
                    push_field(&mut bytes, &(selected.len() as u64).to_be_bytes());
                    for (path, value) in selected {
                        push_field(&mut bytes, &path);
                        push_field(&mut bytes, value);
                    }
                }
                Shaped { form: b"json only", bytes }
            }
        })
    }
}

/// Length-prefixed, as every field of a fingerprint: no two selections share an encoding.
fn push_field(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(&(field.len() as u64).to_be_bytes());
    out.extend_from_slice(field);
}

/// A value of the canonical form: its bytes, and its members or elements.
struct Node<'a> {
    span: &'a [u8],
    kind: Kind<'a>,
}

enum Kind<'a> {
    /// Members: the name's string token (quotes and escapes as written) and the value.
    Object(Vec<(&'a [u8], Node<'a>)>),
    Array(Vec<Node<'a>>),
    Scalar,
}

/// Reads canonical JSON into [`Node`]s, with serde_json (`canonical_json::level`): the
/// canonical form has no whitespace, so each value's raw text is its span. Its depth is
/// bounded by `canonical_json`'s, so the recursion is too.
struct Reader;

impl Reader {
    fn parse(input: &[u8]) -> Option<Node<'_>> {
        let text = std::str::from_utf8(input).ok()?;
        Reader::node(text, canonical_json::read(text)?, 0)
    }

    fn value(raw: &RawValue, depth: usize) -> Option<Node<'_>> {
        Reader::node(raw.get(), canonical_json::level(raw)?, depth)
    }

    /// The node of `span` (no whitespace around it), read as `level`.
    fn node<'a>(span: &'a str, level: Level<'a>, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let kind = match level {
            Level::Object(members) => Kind::Object(
                members
                    .into_iter()
                    .map(|(name, value)| Some((name.as_bytes(), Reader::value(value, depth + 1)?)))
                    .collect::<Option<_>>()?,
            ),
            Level::Array(items) => Kind::Array(
                items.into_iter().map(|item| Reader::value(item, depth + 1)).collect::<Option<_>>()?,
            ),
            Level::Token(_) => Kind::Scalar,
        };
        Some(Node { span: span.as_bytes(), kind })
    }
}

/// The ignored pointers as a tree of tokens: a node marked `whole` is removed with all
/// below it.
#[derive(Default)]
struct Trie {
    whole: bool,
    children: Vec<(String, Trie)>,
}

impl Trie {
    fn insert(&mut self, tokens: &[String]) {
        let Some((first, rest)) = tokens.split_first() else {
            self.whole = true;
            return;
        };
        let at = match self.children.iter().position(|(token, _)| token == first) {
            Some(at) => at,
            None => {
                self.children.push((first.clone(), Trie::default()));
                self.children.len() - 1
            }
        };
        self.children[at].1.insert(rest);
    }

    fn child(&self, matches: impl Fn(&str) -> bool) -> Option<&Trie> {
        self.children.iter().find(|(token, _)| matches(token)).map(|(_, trie)| trie)
    }
}

/// Writes `node` without what `trie` removes (rule 3), untouched parts byte for byte.
fn without(node: &Node<'_>, trie: &Trie, out: &mut Vec<u8>) {
    if trie.children.is_empty() {
        out.extend_from_slice(node.span);
        return;
    }
    match &node.kind {
        Kind::Object(members) => {
            out.push(b'{');
            let mut first = true;
            for (name, value) in members {
                let decoded = key_value(name);
                let below = trie.child(|token| token.as_bytes() == &decoded[..]);
                if below.is_some_and(|below| below.whole) {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(name);
                out.push(b':');
                match below {
                    Some(below) => without(value, below, out),
                    None => out.extend_from_slice(value.span),
                }
            }
            out.push(b'}');
        }
        Kind::Array(items) => {
            out.push(b'[');
            let mut first = true;
            for (index, item) in items.iter().enumerate() {
                let below = trie.child(|token| array_index(token) == Some(index));
                if below.is_some_and(|below| below.whole) {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                match below {
                    Some(below) => without(item, below, out),
                    None => out.extend_from_slice(item.span),
                }
            }
            out.push(b']');
        }
        Kind::Scalar => out.extend_from_slice(node.span),
    }
}

/// Collects every value the pointer selects (rule 4), each with its path as written: the
/// members' names as the body spells them (quoted, so no name reads as an index) and the
/// indices. `{"Amount":1}` and `{"amount":1}` are two payloads: an origin that tells the
/// names apart reads the first without an amount.
fn select<'a>(
    node: &Node<'a>,
    tokens: &[String],
    folded: &[String],
    path: &mut Vec<u8>,
    out: &mut Vec<(Vec<u8>, &'a [u8])>,
) {
    let (Some((token, rest)), Some((folded_token, folded_rest))) =
        (tokens.split_first(), folded.split_first())
    else {
        out.push((path.clone(), node.span));
        return;
    };
    let depth = path.len();
    match &node.kind {
        Kind::Object(members) => {
            for (name, value) in members {
                if folded_key(name) == *folded_token {
                    push_field(path, name);
                    select(value, rest, folded_rest, path, out);
                    path.truncate(depth);
                }
            }
        }
        Kind::Array(items) => {
            if let Some(item) = array_index(token).and_then(|index| items.get(index)) {
                push_field(path, token.as_bytes());
                select(item, rest, folded_rest, path, out);
                path.truncate(depth);
            }
        }
        Kind::Scalar => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::primitives::canonical_json::canonicalize;

    fn pointers(texts: &[&str]) -> Vec<JsonPointer> {
        texts.iter().map(|text| JsonPointer::parse(text).unwrap()).collect()
    }

    fn ignoring(texts: &[&str], body: &str) -> String {
        let canonical = canonicalize(body.as_bytes()).expect("valid JSON");
        let shaped = BodyShape::Ignore(pointers(texts)).apply(&canonical).unwrap();
        assert_eq!(shaped.form, b"json");
        String::from_utf8(shaped.bytes).unwrap()
    }

    fn only(texts: &[&str], body: &str) -> Shaped {
        let canonical = canonicalize(body.as_bytes()).expect("valid JSON");
        BodyShape::Only(pointers(texts)).apply(&canonical).unwrap()
    }

    #[test]
    fn pointers_are_parsed_as_rfc_6901_says() {
        let tokens = |text: &str| JsonPointer::parse(text).map(|p| p.tokens);
        assert_eq!(tokens("/a/b"), Ok(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(tokens("/a~1b/m~0n"), Ok(vec!["a/b".to_owned(), "m~n".to_owned()]));
        assert_eq!(tokens("/~01"), Ok(vec!["~1".to_owned()]), "~0 is decoded after ~1");
        assert_eq!(tokens("/"), Ok(vec![String::new()]), "the member named \"\"");
        assert_eq!(tokens("//x"), Ok(vec![String::new(), "x".to_owned()]));
        assert_eq!(tokens("/items/0/é"), Ok(vec!["items".to_owned(), "0".to_owned(), "é".to_owned()]));
        for bad in ["", "a", "a/b", "/a~", "/a~2", "/~x", "#/a"] {
            assert!(JsonPointer::parse(bad).is_err(), "{bad:?}");
        }
        assert!(JsonPointer::parse(&format!("/{}", "x".repeat(MAX_POINTER_BYTES))).is_err());
        assert!(JsonPointer::parse(&"/x".repeat(MAX_DEPTH + 1)).is_err());
        assert!(JsonPointer::parse(&"/x".repeat(MAX_DEPTH)).is_ok());
    }

    #[test]
    fn array_indices_are_rfc_6901_indices() {
        assert_eq!(array_index("0"), Some(0));
        assert_eq!(array_index("12"), Some(12));
        for bad in ["", "-", "01", "00", "+1", "1x", " 1", "99999999999999999999999"] {
            assert_eq!(array_index(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ignored_members_are_removed_from_the_canonical_form() {
        let body =
            r#"{"ts":"2026-12-01T10:00:00Z","amount":1000,"meta":{"ts":1,"note":"x"},"currency":"eur"}"#;
        assert_eq!(
            ignoring(&["/ts", "/meta/ts"], body),
            r#"{"amount":1000,"currency":"eur","meta":{"note":"x"}}"#
        );
        // Exactly the canonical form of the body without them.
        let smaller = canonicalize(br#"{"amount":1000,"meta":{"note":"x"},"currency":"eur"}"#).unwrap();
        assert_eq!(ignoring(&["/ts", "/meta/ts"], body).as_bytes(), &smaller[..]);
        // A body without the ignored fields is its canonical form, byte for byte.
        let plain = r#"{"b":[1,{"c":null}],"a":"\u0041"}"#;
        assert_eq!(
            ignoring(&["/ts", "/b/1/d"], plain).as_bytes(),
            &canonicalize(plain.as_bytes()).unwrap()[..]
        );
        // Names match with escapes decoded, and exactly: TS is another field.
        assert_eq!(ignoring(&["/ts"], r#"{"\u0074s":1,"a":2}"#), r#"{"a":2}"#);
        assert_eq!(ignoring(&["/ts"], r#"{"TS":1,"a":2}"#), r#"{"TS":1,"a":2}"#);
        // Every member of a repeated name, and a pointer above another wins.
        assert_eq!(ignoring(&["/ts"], r#"{"ts":1,"a":2,"ts":3}"#), r#"{"a":2}"#);
        assert_eq!(ignoring(&["/m/ts", "/m"], r#"{"m":{"ts":1},"a":2}"#), r#"{"a":2}"#);
        // Escaped pointer tokens.
        assert_eq!(ignoring(&["/a~1b", "/m~0n"], r#"{"a/b":1,"m~n":2,"c":3}"#), r#"{"c":3}"#);
        // A pointer through a scalar, or to what is absent, removes nothing.
        assert_eq!(ignoring(&["/a/b", "/z"], r#"{"a":"text"}"#), r#"{"a":"text"}"#);
        // Only objects and arrays have members; a scalar body is left whole.
        assert_eq!(ignoring(&["/a"], "42"), "42");
    }

    #[test]
    fn ignored_elements_are_resolved_against_the_body_as_it_came() {
        assert_eq!(ignoring(&["/items/0"], r#"{"items":["a","b","c"]}"#), r#"{"items":["b","c"]}"#);
        assert_eq!(ignoring(&["/items/0", "/items/1"], r#"{"items":["a","b","c"]}"#), r#"{"items":["c"]}"#);
        assert_eq!(
            ignoring(&["/items/1/ts"], r#"{"items":[{"ts":1},{"ts":2,"n":3}]}"#),
            r#"{"items":[{"ts":1},{"n":3}]}"#
        );
        // `01` and `-` name no element, but `01` names a member.
        assert_eq!(ignoring(&["/items/01", "/items/-"], r#"{"items":[1,2]}"#), r#"{"items":[1,2]}"#);
        assert_eq!(ignoring(&["/items/01"], r#"{"items":{"01":1,"1":2}}"#), r#"{"items":{"1":2}}"#);
        assert_eq!(ignoring(&["/0"], r#"[1,2]"#), "[2]");
    }

    #[test]
    fn only_the_selected_values_count() {
        let base = only(&["/amount", "/currency"], r#"{"amount":1000,"currency":"eur","ts":1}"#);
        assert_eq!(base.form, b"json only");
        assert_eq!(base, only(&["/amount", "/currency"], r#"{"ts":2,"currency":"eur","amount":1000}"#));
        assert_eq!(base, only(&["/amount", "/currency"], r#"{"currency":"eur","amount":1000}"#));
        assert_ne!(base, only(&["/amount", "/currency"], r#"{"amount":1001,"currency":"eur","ts":1}"#));
        // The pointers' order is part of the shape; absent and null differ.
        assert_ne!(base, only(&["/currency", "/amount"], r#"{"amount":1000,"currency":"eur"}"#));
        let absent = only(&["/amount"], r#"{}"#);
        assert_ne!(absent, only(&["/amount"], r#"{"amount":null}"#));
        // A value moved from one pointer to the other is another payload.
        assert_ne!(only(&["/a", "/b"], r#"{"a":1}"#), only(&["/a", "/b"], r#"{"b":1}"#),);
        // Nested, and in arrays.
        let nested = |body| only(&["/payment/amount", "/items/0"], body);
        assert_eq!(
            nested(r#"{"payment":{"amount":5,"ts":1},"items":["x","y"]}"#),
            nested(r#"{"payment":{"ts":2,"amount":5},"items":["x","z"]}"#)
        );
        assert_ne!(
            nested(r#"{"payment":{"amount":5},"items":["x"]}"#),
            nested(r#"{"payment":{"amount":5},"items":["w"]}"#)
        );
    }

    #[test]
    fn only_matches_names_as_a_case_insensitive_decoder_reads_them() {
        let counted = |body: &str| only(&["/amount"], body);
        // A case-insensitive, last-wins decoder reads 9 here: it must not pass for 1.
        assert_ne!(counted(r#"{"amount":1}"#), counted(r#"{"amount":1,"AMOUNT":9}"#));
        assert_ne!(counted(r#"{"amount":1,"AMOUNT":9}"#), counted(r#"{"AMOUNT":9,"amount":1}"#));
        assert_eq!(counted(r#"{"Amount":1}"#).bytes, counted(r#"{"Amount":1,"x":2}"#).bytes);
        assert_ne!(counted(r#"{"Amount":1}"#), counted(r#"{"amount":1}"#), "the member's spelling counts");
    }

    use proptest::prelude::*;

    /// Names a generated body uses: none of them looks like `ts` or `amount` (rule 5).
    const NAMES: [&str; 5] = ["a", "b", "c", "\\u0062", "x/y"];

    /// A JSON value as text: scalars, and arrays and objects of them over [`NAMES`].
    fn value() -> impl Strategy<Value = String> {
        let scalar = prop_oneof![
            (0u32..3).prop_map(|n| n.to_string()),
            Just("\"s\"".to_owned()),
            Just("true".to_owned()),
            Just("null".to_owned()),
        ];
        scalar.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(|items| format!("[{}]", items.join(","))),
                members(inner).prop_map(|members| object(&members)),
            ]
        })
    }

    fn members(values: impl Strategy<Value = String>) -> impl Strategy<Value = Vec<(String, String)>> {
        prop::collection::vec((prop::sample::select(&NAMES[..]).prop_map(str::to_owned), values), 0..4)
    }

    fn object(members: &[(String, String)]) -> String {
        let written: Vec<String> =
            members.iter().map(|(name, value)| format!("\"{name}\":{value}")).collect();
        format!("{{{}}}", written.join(","))
    }

    /// `members` with `name: value` put in at `at` (any position), when there is a value.
    fn with(
        members: &[(String, String)],
        at: prop::sample::Index,
        name: &str,
        value: Option<&str>,
    ) -> String {
        let mut members = members.to_vec();
        if let Some(value) = value {
            members.insert(at.index(members.len() + 1), (name.to_owned(), value.to_owned()));
        }
        object(&members)
    }

    fn fingerprint_of(body: &str, shape: &BodyShape) -> crate::core::formats::fingerprint::Digest256 {
        use crate::core::formats::fingerprint::{fingerprint, Payload};
        fingerprint(&Payload {
            method: "POST",
            path_and_query: "/v1/charges",
            content_type: Some("application/json"),
            extra_headers: &[],
            body: body.as_bytes(),
            body_shape: Some(shape),
        })
    }

    proptest! {
        /// Adding, removing or changing an ignored field (at the top or nested, anywhere in
        /// its object) never changes the fingerprint.
        #[test]
        fn an_ignored_field_never_changes_the_fingerprint(
            top in members(value()),
            meta in members(value()),
            at in any::<prop::sample::Index>(),
            meta_at in any::<prop::sample::Index>(),
            ts in prop::option::of(value()),
            other_ts in prop::option::of(value()),
            nested_ts in prop::option::of(value()),
            other_nested_ts in prop::option::of(value()),
        ) {
            let shape = BodyShape::Ignore(pointers(&["/ts", "/meta/ts"]));
            let body = |ts: Option<&str>, nested: Option<&str>| {
                let meta = with(&meta, meta_at, "ts", nested);
                let mut top = top.clone();
                top.push(("meta".to_owned(), meta));
                with(&top, at, "ts", ts)
            };
            let a = body(ts.as_deref(), nested_ts.as_deref());
            let b = body(other_ts.as_deref(), other_nested_ts.as_deref());
            prop_assert_eq!(fingerprint_of(&a, &shape), fingerprint_of(&b, &shape), "{} and {}", a, b);
            // Without any ignored field, the body hashes as on a route without the option.
            let bare = body(None, None);
            let unshaped = crate::core::formats::fingerprint::fingerprint(&crate::core::formats::fingerprint::Payload {
                method: "POST",
                path_and_query: "/v1/charges",
                content_type: Some("application/json"),
                extra_headers: &[],
                body: bare.as_bytes(),
                body_shape: None,
            });
            prop_assert_eq!(fingerprint_of(&bare, &shape), unshaped);
        }

        /// Changing a counted field's value always changes the fingerprint, ignored fields
        /// present or not.
        #[test]
        fn a_changed_counted_field_always_changes_the_fingerprint(
            top in members(value()),
            which in any::<prop::sample::Index>(),
            replacement in value(),
            ts in prop::option::of(value()),
            at in any::<prop::sample::Index>(),
        ) {
            prop_assume!(!top.is_empty());
            let i = which.index(top.len());
            prop_assume!(canonicalize(top[i].1.as_bytes()) != canonicalize(replacement.as_bytes()));
            let mut changed = top.clone();
            changed[i].1 = replacement;
            let shape = BodyShape::Ignore(pointers(&["/ts", "/meta/ts"]));
            let a = with(&top, at, "ts", ts.as_deref());
            let b = with(&changed, at, "ts", ts.as_deref());
            prop_assert_ne!(fingerprint_of(&a, &shape), fingerprint_of(&b, &shape), "{} and {}", a, b);
        }

        /// With `fingerprint_only`, any other field may change; the counted one may not.
        #[test]
        fn only_the_counted_field_changes_the_fingerprint(
            top in members(value()),
            other in members(value()),
            amount in value(),
            other_amount in value(),
            at in any::<prop::sample::Index>(),
        ) {
            let shape = BodyShape::Only(pointers(&["/amount"]));
            let a = with(&top, at, "amount", Some(&amount));
            let b = with(&other, at, "amount", Some(&amount));
            prop_assert_eq!(fingerprint_of(&a, &shape), fingerprint_of(&b, &shape), "{} and {}", a, b);
            let c = with(&top, at, "amount", Some(&other_amount));
            if canonicalize(amount.as_bytes()) != canonicalize(other_amount.as_bytes()) {
                prop_assert_ne!(fingerprint_of(&a, &shape), fingerprint_of(&c, &shape), "{} and {}", a, c);
            }
        }
    }
}
