//! Who owns a key (scope), where its Durable Object lives (object name), and what payload
//! it was first used with (fingerprint).
//!
//! Owns the hashing; never sees a clock or the network.
//!
//! 1. The caller's scope is a SHA-256 in one of three domains (see [`Scope`] and
//!    `core::edge_rules::scope` for the rules): the credential (the configured scope header, by default
//!    `Authorization`, as every release has hashed it), a verified token's issuer and claim,
//!    or the anonymous scope. Further scope headers are part of each. The raw credential
//!    is hashed at once and never kept.
//! 2. The object name is a SHA-256 over the scope and the key, so two callers using one key
//!    get two objects, and the name reveals neither the credential nor the key.
//! 3. The path is not in the object name but in the fingerprint: a key reused on another
//!    endpoint reaches the same object and is refused there as reused (422).
//! 4. The fingerprint is a SHA-256 over method, path and query, content type and body. A
//!    JSON body (`application/json` or `…+json`) is canonicalised first (see
//!    `canonical_json`); a body that does not parse, is not UTF-8 or nests too deeply is
//!    fingerprinted as raw bytes, so it is still forwarded and deduplicated, never refused
//!    for its encoding. Huge numbers count digit for digit (never rounded), and duplicate
//!    object keys count in their written order (which one wins is left to the origin).
//! 5. Every field is length-prefixed, so no two different requests share an encoding.
//! 6. A route may shape the canonical JSON body (`fingerprint_ignore`, `fingerprint_only`;
//!    `core::formats::body_shape`): only the body is shaped, and a route without the options hashes
//!    exactly as every release before them did (pinned by fixed vectors below).

use sha2::{Digest, Sha256};

use super::body_shape::BodyShape;
use crate::core::primitives::canonical_json;
use crate::core::primitives::hex;
use crate::core::primitives::jwt::{ClaimValue, Identity};

/// A SHA-256 digest. `Debug` and `Display` print hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest256(pub [u8; 32]);

impl Digest256 {
    pub fn to_hex(&self) -> String {
        hex::encode(&self.0)
    }

    /// Parses 64 lowercase or uppercase hex digits.
    pub fn from_hex(text: &str) -> Option<Self> {
        let mut out = [0u8; 32];
        ::hex::decode_to_slice(text, &mut out).ok()?;
        Some(Digest256(out))
    }

    /// The first 8 bytes in hex: enough to tell records apart in a log line.
    pub fn short_hex(&self) -> String {
        hex::encode(&self.0[..8])
    }
}

impl std::fmt::Debug for Digest256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl std::fmt::Display for Digest256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Whose keys these are. Each kind is its own hash domain, so no credential, however
/// chosen, can reach a verified caller's objects, and no two kinds share an object name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// No credential (`ALLOW_ANONYMOUS`): one shared scope, split only by the further
    /// scope headers when `SCOPE_HEADER` lists any (their digest).
    Anonymous(Option<Digest256>),
    /// A hash of the credential (and of the further scope headers): the scope before
    /// verified claims existed, and the fallback for every token that does not verify.
    Credential(Digest256),
    /// A hash of a verified token's issuer and scope claim (and of the further scope
    /// headers).
    Claim(Digest256),
}

/// A further scope header (after the credential): its lowercase name and its value, if
/// present. Absent and empty differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScopeField<'a> {
    pub name: &'a str,
    pub value: Option<&'a [u8]>,
}

impl Scope {
    /// The scope of a request whose single scope header has this value (`None`: absent).
    /// The credential hash is the one every release so far has used, so records stored
    /// before verified claims existed stay reachable.
    pub fn from_header(value: Option<&[u8]>) -> Scope {
        match value {
            None => Scope::Anonymous(None),
            Some(credential) => Scope::credential(credential, &[]),
        }
    }

    /// The credential scope. With no further headers it is exactly [`Scope::from_header`]'s.
    pub fn credential(credential: &[u8], extras: &[ScopeField<'_>]) -> Scope {
        let mut fields: Vec<&[u8]> = vec![credential];
        push_extras(&mut fields, extras);
        Scope::Credential(sha256_fields(b"idempotency-edge scope v1", &fields))
    }

    /// The anonymous scope, split by the further headers when there are any.
    pub fn anonymous(extras: &[ScopeField<'_>]) -> Scope {
        if extras.is_empty() {
            return Scope::Anonymous(None);
        }
        let mut fields: Vec<&[u8]> = Vec::new();
        push_extras(&mut fields, extras);
        Scope::Anonymous(Some(sha256_fields(b"idempotency-edge scope anonymous v1", &fields)))
    }

    /// A verified caller's scope: the issuer, the claim's path and its typed value. Two
    /// tokens for one subject share it, however often the token is refreshed.
    pub fn claim(identity: &Identity, extras: &[ScopeField<'_>]) -> Scope {
        let (issuer_marker, issuer): (&[u8], &[u8]) = match &identity.issuer {
            Some(issuer) => (b"present", issuer.as_bytes()),
            None => (b"absent", b""),
        };
        let (value_type, value): (&[u8], &[u8]) = match &identity.value {
            ClaimValue::String(text) => (b"string", text.as_bytes()),
            ClaimValue::Number(text) => (b"number", text.as_bytes()),
        };
        let mut fields: Vec<&[u8]> =
            vec![issuer_marker, issuer, identity.claim_path.as_str().as_bytes(), value_type, value];
        push_extras(&mut fields, extras);
        Scope::Claim(sha256_fields(b"idempotency-edge scope claim v1", &fields))
    }
}

fn push_extras<'a>(fields: &mut Vec<&'a [u8]>, extras: &[ScopeField<'a>]) {
    for extra in extras {
        fields.push(extra.name.as_bytes());
        fields.push(if extra.value.is_some() { b"present" } else { b"absent" });
        fields.push(extra.value.unwrap_or(b""));
    }
}

impl Scope {
    /// The salt that derives this scope's storage encryption key (`core::formats::seal`): a digest
    /// of the scope, so that one caller's derived key opens no other caller's records.
    pub fn key_salt(&self) -> Digest256 {
        match self {
            Scope::Anonymous(None) => sha256_fields(b"idempotency-edge key salt v1", &[b"anonymous"]),
            Scope::Anonymous(Some(digest)) => {
                sha256_fields(b"idempotency-edge key salt v1", &[b"anonymous", &digest.0])
            }
            Scope::Credential(digest) => {
                sha256_fields(b"idempotency-edge key salt v1", &[b"caller", &digest.0])
            }
            Scope::Claim(digest) => sha256_fields(b"idempotency-edge key salt v1", &[b"claim", &digest.0]),
        }
    }
}

/// The Durable Object name for `key` within `scope`: 64 hex digits, no raw input in it.
pub fn object_name(scope: Scope, key: &str) -> String {
    let (tag, scope_bytes): (&[u8], &[u8]) = match &scope {
        Scope::Anonymous(None) => (b"anonymous", b""),
        Scope::Anonymous(Some(digest)) => (b"anonymous", &digest.0),
        // "caller": the tag every release so far has used for the credential scope.
        Scope::Credential(digest) => (b"caller", &digest.0),
        Scope::Claim(digest) => (b"claim", &digest.0),
    };
    sha256_fields(b"idempotency-edge object v1", &[tag, scope_bytes, key.as_bytes()]).to_hex()
}

/// The parts of a request that make up its payload.
#[derive(Clone, Copy, Debug)]
pub struct Payload<'a> {
    pub method: &'a str,
    /// Path and query, exactly as the client sent them (`/v1/charges?expand=x`).
    pub path_and_query: &'a str,
    /// The `Content-Type` value, if any.
    pub content_type: Option<&'a str>,
    /// Extra request headers that are part of the payload for this route (lowercase name,
    /// value if present), e.g. an API version.
    pub extra_headers: &'a [(&'a str, Option<&'a str>)],
    pub body: &'a [u8],
    /// What of a JSON body counts, when the route says (`None`: all of it).
    pub body_shape: Option<&'a BodyShape>,
}

/// The payload fingerprint.
pub fn fingerprint(payload: &Payload<'_>) -> Digest256 {
    let content_type = payload.content_type.map(|v| v.trim().to_ascii_lowercase());
    let content_type_bytes = content_type.as_deref().unwrap_or("").as_bytes();
    let canonical = if content_type.as_deref().is_some_and(is_json_media_type) {
        canonical_json::canonicalize(payload.body)
    } else {
        None
    };
    // A body that is not canonicalised is never shaped: it counts whole (`body_shape`,
    // rule 6). Should a shape fail to read the canonical form, the whole of it counts.
    let shaped =
        canonical.as_ref().zip(payload.body_shape).and_then(|(canonical, shape)| shape.apply(canonical));
    let (body_form, body): (&[u8], &[u8]) = match (&shaped, &canonical) {
        (Some(shaped), _) => (shaped.form, &shaped.bytes),
        (None, Some(canonical)) => (b"json", canonical),
        (None, None) => (b"raw", payload.body),
    };
    let mut fields: Vec<&[u8]> = vec![
        payload.method.as_bytes(),
        payload.path_and_query.as_bytes(),
        content_type_bytes,
        body_form,
        body,
    ];
    // An absent header and an empty one differ: the presence marker comes first.
    for (name, value) in payload.extra_headers {
        fields.push(name.as_bytes());
        fields.push(if value.is_some() { b"present" } else { b"absent" });
        fields.push(value.unwrap_or("").as_bytes());
    }
    sha256_fields(b"idempotency-edge fingerprint v1", &fields)
}

/// The digest of a caller's replay credential (`core::edge_rules::scope`, rule 5): the headers' names,
/// presence and values, in order. Never logged or stored apart from the fingerprint.
pub fn caller_binding_digest(headers: &[(&str, Option<&[u8]>)]) -> Digest256 {
    let mut fields: Vec<&[u8]> = Vec::with_capacity(headers.len() * 3);
    for (name, value) in headers {
        fields.push(name.as_bytes());
        fields.push(if value.is_some() { b"present" } else { b"absent" });
        fields.push(value.unwrap_or_default());
    }
    sha256_fields(b"idempotency-edge caller binding v1", &fields)
}

/// A payload fingerprint bound to the caller's replay credential: unchanged without a
/// binding (so every key keeps the fingerprint it had), another digest with one, so that
/// the same payload under another credential reads as another request.
pub fn bound_to_caller(fingerprint: Digest256, binding: Option<Digest256>) -> Digest256 {
    match binding {
        None => fingerprint,
        Some(binding) => {
            sha256_fields(b"idempotency-edge bound fingerprint v1", &[&fingerprint.0, &binding.0])
        }
    }
}

/// `application/json`, or any `type/subtype+json`, parameters ignored.
pub fn is_json_media_type(content_type: &str) -> bool {
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    media_type.eq_ignore_ascii_case("application/json") || media_type.to_ascii_lowercase().ends_with("+json")
}

fn sha256_fields(domain: &[u8], fields: &[&[u8]]) -> Digest256 {
    let mut hasher = Sha256::new();
    hasher.update((domain.len() as u64).to_be_bytes());
    hasher.update(domain);
    for field in fields {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field);
    }
    Digest256(hasher.finalize().into())
}

#[cfg(test)]
mod known_answers;

#[cfg(test)]
mod tests {
    use super::*;

    fn payload<'a>(path: &'a str, content_type: Option<&'a str>, body: &'a [u8]) -> Payload<'a> {
        Payload {
            method: "POST",
            path_and_query: path,
            content_type,
            extra_headers: &[],
            body,
            body_shape: None,
        }
    }

    #[test]
    fn extra_headers_are_part_of_the_payload() {
        let with = |extra: &[(&str, Option<&str>)]| {
            fingerprint(&Payload { extra_headers: extra, ..payload("/pay", None, b"x") })
        };
        let v1 = with(&[("api-version", Some("2024-01-01"))]);
        assert_ne!(v1, with(&[("api-version", Some("2025-01-01"))]));
        assert_ne!(with(&[("api-version", None)]), with(&[("api-version", Some(""))]));
        assert_eq!(v1, with(&[("api-version", Some("2024-01-01"))]));
    }

    #[test]
    fn reordered_json_is_the_same_payload() {
        let a = fingerprint(&payload("/pay", Some("application/json"), br#"{"a":1,"b":2}"#));
        let b = fingerprint(&payload(
            "/pay",
            Some("application/json; charset=utf-8 "),
            b"{ \"b\": 2,\n \"a\": 1 }",
        ));
        // Parameters are part of the content type, so they still differ…
        assert_ne!(a, b);
        // …but the same content type with reordered keys is the same payload.
        let c = fingerprint(&payload("/pay", Some("application/json"), b"{ \"b\": 2,\n \"a\": 1 }"));
        assert_eq!(a, c);
    }

    #[test]
    fn every_part_of_the_payload_counts() {
        let base = fingerprint(&payload("/pay", Some("application/json"), br#"{"a":1}"#));
        assert_ne!(base, fingerprint(&payload("/refund", Some("application/json"), br#"{"a":1}"#)));
        assert_ne!(base, fingerprint(&payload("/pay?x=1", Some("application/json"), br#"{"a":1}"#)));
        assert_ne!(base, fingerprint(&payload("/pay", Some("text/plain"), br#"{"a":1}"#)));
        assert_ne!(base, fingerprint(&payload("/pay", Some("application/json"), br#"{"a":2}"#)));
        let patch = Payload { method: "PATCH", ..payload("/pay", Some("application/json"), br#"{"a":1}"#) };
        assert_ne!(base, fingerprint(&patch));
    }

    #[test]
    fn non_json_bodies_are_fingerprinted_raw() {
        let a = fingerprint(&payload("/pay", Some("text/plain"), br#"{"a":1,"b":2}"#));
        let b = fingerprint(&payload("/pay", Some("text/plain"), br#"{"b":2,"a":1}"#));
        assert_ne!(a, b);
        // Invalid UTF-8 under a JSON content type is hashed as it is, not refused.
        let c = fingerprint(&payload("/pay", Some("application/json"), b"\xff\xfe"));
        let d = fingerprint(&payload("/pay", Some("application/json"), b"\xff\xfd"));
        assert_ne!(c, d);
    }

    #[test]
    fn json_media_types() {
        assert!(is_json_media_type("application/json"));
        assert!(is_json_media_type("Application/JSON; charset=utf-8"));
        assert!(is_json_media_type("application/merge-patch+json"));
        assert!(!is_json_media_type("text/plain"));
        assert!(!is_json_media_type("application/jsonx"));
    }

    #[test]
    fn scopes_separate_callers_and_hide_credentials() {
        let alice = Scope::from_header(Some(b"Bearer alice"));
        let bob = Scope::from_header(Some(b"Bearer bob"));
        let anon = Scope::from_header(None);
        assert_eq!(anon, Scope::Anonymous(None));
        let names = [object_name(alice, "k"), object_name(bob, "k"), object_name(anon, "k")];
        assert_ne!(names[0], names[1]);
        assert_ne!(names[0], names[2]);
        assert_ne!(names[1], names[2]);
        assert_eq!(object_name(alice, "k"), names[0]);
        for name in &names {
            assert_eq!(name.len(), 64);
            assert!(
                !name.contains("alice") && !name.contains('k') || name.chars().all(|c| c.is_ascii_hexdigit())
            );
        }
        // An empty credential is still a caller, not the anonymous scope.
        assert_ne!(object_name(Scope::from_header(Some(b"")), "k"), names[2]);
    }

    /// Object names computed with the formula of every earlier release (independently, in
    /// Python's hashlib): records stored before verified claims existed stay reachable.
    #[test]
    fn credential_and_anonymous_object_names_are_unchanged() {
        let credential = Scope::credential(b"Bearer sk_live_51HxAbC", &[]);
        assert_eq!(credential, Scope::from_header(Some(b"Bearer sk_live_51HxAbC")));
        assert_eq!(
            object_name(credential, "order-42-charge"),
            "5916f0c65d4b0d169b254f0793f1805a412e486bc212d2a483168a981107d1ab"
        );
        assert_eq!(
            object_name(Scope::anonymous(&[]), "order-42-charge"),
            "4a3cada3b5010a1518cd1308600eb28f211a643c2edc34a7ec83ff7b7b3ecf23"
        );
    }

    #[test]
    fn further_scope_headers_separate_callers() {
        let account = |value: Option<&'static [u8]>| [ScopeField { name: "stripe-account", value }];
        let a = Scope::credential(b"Bearer platform", &account(Some(b"acct_A")));
        let b = Scope::credential(b"Bearer platform", &account(Some(b"acct_B")));
        let absent = Scope::credential(b"Bearer platform", &account(None));
        let empty = Scope::credential(b"Bearer platform", &account(Some(b"")));
        let alone = Scope::credential(b"Bearer platform", &[]);
        let all = [a, b, absent, empty, alone];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(object_name(*x, "k"), object_name(*y, "k"));
            }
        }
        assert_ne!(Scope::anonymous(&account(Some(b"acct_A"))), Scope::anonymous(&account(Some(b"acct_B"))));
        assert_ne!(Scope::anonymous(&account(None)), Scope::anonymous(&[]));
    }

    #[test]
    fn claim_scopes_are_their_own_domain() {
        use crate::core::primitives::jwt::ClaimPath;
        let identity = |issuer: Option<&str>, path: &str, value: ClaimValue| Identity {
            issuer: issuer.map(str::to_owned),
            claim_path: ClaimPath::parse(path).unwrap(),
            value,
        };
        let sub = identity(Some("https://idp"), "sub", ClaimValue::String("acct_1".into()));
        let base = Scope::claim(&sub, &[]);
        assert_eq!(base, Scope::claim(&sub.clone(), &[]));
        let others = [
            Scope::claim(&identity(Some("https://other"), "sub", ClaimValue::String("acct_1".into())), &[]),
            Scope::claim(&identity(None, "sub", ClaimValue::String("acct_1".into())), &[]),
            Scope::claim(&identity(Some("https://idp"), "org.id", ClaimValue::String("acct_1".into())), &[]),
            Scope::claim(&identity(Some("https://idp"), "sub", ClaimValue::String("acct_2".into())), &[]),
            Scope::claim(&identity(Some("https://idp"), "sub", ClaimValue::Number("1".into())), &[]),
            Scope::credential(b"acct_1", &[]),
        ];
        for other in others {
            assert_ne!(object_name(base, "k"), object_name(other, "k"), "{other:?}");
        }
        // The same digest in another kind is another object.
        let Scope::Claim(digest) = base else { panic!() };
        assert_ne!(object_name(Scope::Credential(digest), "k"), object_name(base, "k"));
    }

    #[test]
    fn every_scope_kind_has_its_own_key_salt() {
        let digest = Digest256([7; 32]);
        let salts = [
            Scope::Anonymous(None).key_salt(),
            Scope::Anonymous(Some(digest)).key_salt(),
            Scope::Credential(digest).key_salt(),
            Scope::Claim(digest).key_salt(),
        ];
        for (i, a) in salts.iter().enumerate() {
            for b in &salts[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    /// A route's shape changes what of the body counts, nothing else: method, path, query,
    /// content type and fingerprint headers count as before, and a body that is not
    /// canonicalised counts whole, byte for byte.
    #[test]
    fn a_shaped_fingerprint_is_bound_to_all_but_the_shaped_body() {
        use crate::core::formats::body_shape::JsonPointer;
        let ignore_ts = BodyShape::Ignore(vec![JsonPointer::parse("/ts").unwrap()]);
        let only_amount = BodyShape::Only(vec![JsonPointer::parse("/amount").unwrap()]);
        for shape in [&ignore_ts, &only_amount] {
            let shaped = |p: Payload<'static>| fingerprint(&Payload { body_shape: Some(shape), ..p });
            let json = |body: &'static str| payload("/pay", Some("application/json"), body.as_bytes());
            let base = shaped(json(r#"{"amount":1,"ts":1}"#));
            assert_eq!(base, shaped(json(r#"{"ts":2,"amount":1}"#)), "{shape:?}");
            assert_ne!(base, shaped(json(r#"{"amount":2,"ts":1}"#)), "{shape:?}");
            assert_ne!(base, shaped(Payload { method: "PATCH", ..json(r#"{"amount":1,"ts":1}"#) }));
            assert_ne!(
                base,
                shaped(payload("/pay?x=1", Some("application/json"), br#"{"amount":1,"ts":1}"#))
            );
            assert_ne!(base, shaped(payload("/refund", Some("application/json"), br#"{"amount":1,"ts":1}"#)));
            assert_ne!(
                base,
                shaped(payload("/pay", Some("application/vnd+json"), br#"{"amount":1,"ts":1}"#))
            );
            let versioned =
                Payload { extra_headers: &[("api-version", Some("1"))], ..json(r#"{"amount":1}"#) };
            assert_ne!(shaped(versioned), shaped(json(r#"{"amount":1}"#)));
            let caller = caller_binding_digest(&[("authorization", Some(b"Bearer a"))]);
            assert_ne!(bound_to_caller(base, Some(caller)), base);
            // Not JSON: the whole body counts, as on a route without the option.
            let text = |body: &'static [u8]| payload("/pay", Some("text/plain"), body);
            assert_eq!(shaped(text(b"amount=1&ts=1")), fingerprint(&text(b"amount=1&ts=1")));
            assert_ne!(shaped(text(b"amount=1&ts=1")), shaped(text(b"amount=1&ts=2")));
            let broken = || payload("/pay", Some("application/json"), br#"{"amount":1,"ts":1"#);
            assert_eq!(shaped(broken()), fingerprint(&broken()));
        }
        // A body without the ignored field hashes as on a route without the option.
        let plain = payload("/pay", Some("application/json"), br#"{"amount":1}"#);
        assert_eq!(fingerprint(&Payload { body_shape: Some(&ignore_ts), ..plain }), fingerprint(&plain));
        assert_ne!(fingerprint(&Payload { body_shape: Some(&only_amount), ..plain }), fingerprint(&plain));
    }

    /// Fingerprints computed with the formula of every release so far (independently, in
    /// Python's hashlib): a stored record's fingerprint stays valid across releases, so a
    /// retry after an upgrade replays instead of answering 422.
    #[test]
    fn fingerprints_are_unchanged_across_releases() {
        let body = br#"{ "currency": "eur", "amount": 1000, "metadata": {"ts": "2026-12-01T10:00:00Z"} }"#;
        let json = fingerprint(&Payload {
            method: "POST",
            path_and_query: "/v1/charges?expand=customer",
            content_type: Some(" Application/JSON; charset=utf-8"),
            extra_headers: &[("stripe-version", Some("2024-06-20"))],
            body,
            body_shape: None,
        });
        assert_eq!(json.to_hex(), "9bf77c7e673d87abfbc1fb4bc6d62355775daac2e50a854a373fb942ab163155");
        let raw = fingerprint(&Payload {
            method: "PATCH",
            path_and_query: "/v1/charges/ch_1",
            content_type: Some("text/plain"),
            extra_headers: &[],
            body: b"amount=1000",
            body_shape: None,
        });
        assert_eq!(raw.to_hex(), "f9c7775ed43b248e6bdffc5c803a2782dcbb68ce6c6ad87bfa0244367a614fd0");
        let binding = caller_binding_digest(&[("authorization", Some(b"Bearer sk_test_1"))]);
        assert_eq!(
            bound_to_caller(json, Some(binding)).to_hex(),
            "3d112e533cd79cad2bd65ce4a6e07ea82f42752f321f5f2b55b59391b355683a"
        );
        assert_eq!(bound_to_caller(json, None), json);
    }

    #[test]
    fn hex_round_trips() {
        let digest = fingerprint(&payload("/", None, b""));
        assert_eq!(Digest256::from_hex(&digest.to_hex()), Some(digest));
        assert_eq!(Digest256::from_hex("zz"), None);
        assert_eq!(digest.short_hex().len(), 16);
    }
}
