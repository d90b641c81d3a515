use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

fn b64(bytes: &[u8]) -> String {
    base64url_encode(bytes)
}

/// A compact token from a header and claims, with a signature of `sig_len` bytes.
fn token(header: Value, claims: Value, sig_len: usize) -> String {
    format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes()),
        b64(&vec![7u8; sig_len])
    )
}

fn rules() -> Validation {
    Validation {
        issuer: Some("https://idp.example".into()),
        audience: Some("payments".into()),
        leeway_seconds: 60,
    }
}

const NOW: u64 = 1_700_000_000;

fn good_claims() -> Value {
    json!({"iss": "https://idp.example", "aud": ["other", "payments"], "sub": "acct_1", "exp": NOW + 300, "nbf": NOW - 10})
}

#[test]
fn base64url_known_vectors() {
    for (raw, encoded) in
        [(&b""[..], ""), (b"f", "Zg"), (b"fo", "Zm8"), (b"foo", "Zm9v"), (&[0xfb, 0xff][..], "-_8")]
    {
        assert_eq!(b64(raw), encoded);
        assert_eq!(base64url_decode(encoded).as_deref(), Some(raw));
    }
}

#[test]
fn base64url_is_strict() {
    for bad in ["Zg==", "Zm9v=", "Z", "Zm9vY", "Zm+v", "Zm/v", "Zm9 v", "Zh", "Zm9"] {
        // "Zh" and "Zm9" leave non-zero unused bits: a second spelling of "f" and "fo".
        assert_eq!(base64url_decode(bad), None, "{bad}");
    }
}

#[test]
fn a_well_formed_token_parses() {
    let text = token(json!({"alg": "ES256", "kid": "k1", "typ": "JWT"}), good_claims(), 64);
    let parsed = parse(&text).unwrap();
    assert_eq!(parsed.algorithm, Algorithm::Es256);
    assert_eq!(parsed.kid.as_deref(), Some("k1"));
    assert_eq!(parsed.signature, vec![7u8; 64]);
    assert_eq!(parsed.signing_input, text.rsplit_once('.').unwrap().0.as_bytes());
    assert_eq!(parsed.claims["sub"], "acct_1");
}

#[test]
fn structure_and_header_errors() {
    let claims = good_claims();
    let cases: Vec<(String, Unverified)> = vec![
        (token(json!({"alg": "none"}), claims.clone(), 0), Unverified::Algorithm),
        (token(json!({"alg": "None"}), claims.clone(), 0), Unverified::Algorithm),
        (token(json!({"alg": "HS512"}), claims.clone(), 64), Unverified::Algorithm),
        (token(json!({"alg": "rs256"}), claims.clone(), 256), Unverified::Algorithm),
        (token(json!({"typ": "JWT"}), claims.clone(), 32), Unverified::Malformed),
        (token(json!({"alg": ["HS256"]}), claims.clone(), 32), Unverified::Malformed),
        (token(json!({"alg": "HS256", "kid": 5}), claims.clone(), 32), Unverified::Malformed),
        (token(json!({"alg": "HS256", "crit": ["exp"]}), claims.clone(), 32), Unverified::CriticalExtension),
        (token(json!({"alg": "HS256"}), json!(["not", "an", "object"]), 32), Unverified::Malformed),
        (token(json!({"alg": "HS256"}), claims.clone(), 31), Unverified::Signature),
        (token(json!({"alg": "ES256"}), claims.clone(), 65), Unverified::Signature),
        (token(json!({"alg": "EdDSA"}), claims.clone(), 0), Unverified::Signature),
        (token(json!({"alg": "RS256"}), claims.clone(), 128), Unverified::Signature),
        ("a.b".to_owned(), Unverified::Malformed),
        ("a.b.c.d".to_owned(), Unverified::Malformed),
        ("".to_owned(), Unverified::Malformed),
        (format!("{}.", token(json!({"alg": "HS256"}), claims.clone(), 32)), Unverified::Malformed),
        ("x".repeat(MAX_TOKEN_BYTES + 1), Unverified::Malformed),
    ];
    for (text, expected) in cases {
        assert_eq!(parse(&text).map(|t| t.algorithm), Err(expected), "{text:.80}");
    }
    // A header that is not JSON, and JSON that is not an object.
    let not_json = format!("{}.{}.{}", b64(b"{alg"), b64(b"{}"), b64(&[0; 32]));
    assert_eq!(parse(&not_json).unwrap_err(), Unverified::Malformed);
    let padded = format!("{}=.{}.{}", b64(br#"{"alg":"HS256"}"#), b64(b"{}"), b64(&[0; 32]));
    assert_eq!(parse(&padded).unwrap_err(), Unverified::Malformed);
}

#[test]
fn claim_rules() {
    let check = |claims: Value, rules: &Validation| check_claims(claims.as_object().unwrap(), rules, NOW);
    let r = rules();
    assert_eq!(check(good_claims(), &r), Ok(()));
    let with = |key: &str, value: Value| {
        let mut claims = good_claims();
        claims[key] = value;
        claims
    };
    let without = |key: &str| {
        let mut claims = good_claims();
        claims.as_object_mut().unwrap().remove(key);
        claims
    };
    assert_eq!(check(without("exp"), &r), Err(Unverified::MissingExpiry));
    assert_eq!(check(with("exp", json!("soon")), &r), Err(Unverified::MissingExpiry));
    // Expiry: within the leeway is still good; a second past it is not.
    assert_eq!(check(with("exp", json!(NOW - 60)), &r), Ok(()));
    assert_eq!(check(with("exp", json!(NOW - 61)), &r), Err(Unverified::Expired));
    assert_eq!(check(with("exp", json!((NOW - 60) as f64 - 0.5)), &r), Err(Unverified::Expired));
    assert_eq!(check(with("nbf", json!(NOW + 60)), &r), Ok(()));
    assert_eq!(check(with("nbf", json!(NOW + 61)), &r), Err(Unverified::NotYetValid));
    assert_eq!(check(with("nbf", json!("now")), &r), Err(Unverified::Malformed));
    assert_eq!(check(without("nbf"), &r), Ok(()));
    assert_eq!(check(with("iss", json!("https://evil.example")), &r), Err(Unverified::Issuer));
    assert_eq!(check(without("iss"), &r), Err(Unverified::Issuer));
    assert_eq!(check(with("aud", json!("payments")), &r), Ok(()));
    assert_eq!(check(with("aud", json!("other")), &r), Err(Unverified::Audience));
    assert_eq!(check(with("aud", json!([])), &r), Err(Unverified::Audience));
    assert_eq!(check(with("aud", json!({"payments": true})), &r), Err(Unverified::Audience));
    assert_eq!(check(without("aud"), &r), Err(Unverified::Audience));
    // Unconfigured issuer and audience are not checked, but a present `iss` must be text.
    let open = Validation { issuer: None, audience: None, leeway_seconds: 0 };
    assert_eq!(check(without("aud"), &open), Ok(()));
    assert_eq!(check(without("iss"), &open), Ok(()));
    assert_eq!(check(with("iss", json!(5)), &open), Err(Unverified::Issuer));
    assert_eq!(check(with("exp", json!(NOW - 1)), &open), Err(Unverified::Expired));
}

/// A cached verification checks the same window as `check_claims`.
#[test]
fn validity_windows_agree_with_the_claim_rules() {
    let open = Validation { issuer: None, audience: None, leeway_seconds: 60 };
    for (exp, nbf) in [
        (NOW, None),
        (NOW - 60, Some(NOW + 60)),
        (NOW - 61, None),
        (NOW + 10, Some(NOW + 61)),
        (NOW + 10, Some(NOW - 5)),
    ] {
        let mut claims = json!({"exp": exp});
        if let Some(nbf) = nbf {
            claims["nbf"] = json!(nbf);
        }
        let claims = claims.as_object().unwrap();
        for now in [NOW - 200, NOW - 1, NOW, NOW + 1, NOW + 200] {
            let accepted = check_claims(claims, &open, now).is_ok();
            assert_eq!(
                Validity::of(claims, &open).contains(now),
                accepted,
                "exp {exp} nbf {nbf:?} now {now}"
            );
        }
    }
}

#[test]
fn claim_paths() {
    let claims = json!({"sub": "acct_1", "org": {"id": 42, "name": {"x": true}}, "https://ex.com/tenant": "t1", "n": null, "a/b~c": "odd"});
    let claims = claims.as_object().unwrap();
    let find = |path: &str| ClaimPath::parse(path).unwrap().find(claims).and_then(ClaimValue::of);
    assert_eq!(find("sub"), Some(ClaimValue::String("acct_1".into())));
    assert_eq!(find("/sub"), Some(ClaimValue::String("acct_1".into())));
    assert_eq!(find("org.id"), Some(ClaimValue::Number("42".into())));
    assert_eq!(find("/org/id"), Some(ClaimValue::Number("42".into())));
    assert_eq!(find("/https:~1~1ex.com~1tenant"), Some(ClaimValue::String("t1".into())));
    assert_eq!(find("/a~1b~0c"), Some(ClaimValue::String("odd".into())));
    assert_eq!(find("org"), None, "an object is not an identity");
    assert_eq!(find("org.name.x"), None, "a boolean is not an identity");
    assert_eq!(find("n"), None);
    assert_eq!(find("missing"), None);
    assert_eq!(find("sub.x"), None);
    assert_eq!(find("/org.id"), None, "a pointer names the member org.id, which this token lacks");
    for bad in ["", "  ", "org..id", ".sub", "sub.", "a\u{7}b", "/", "/org//id", "/org/", "/a~2", "/a~"] {
        assert!(ClaimPath::parse(bad).is_err(), "{bad:?}");
    }
    assert_eq!(ClaimPath::parse(" org.id ").unwrap().as_str(), "org.id");
    // A dotted path that could be a URL-named claim is refused, and told how to write it.
    let refused = ClaimPath::parse("https://ex.com/tenant").unwrap_err();
    assert!(refused.contains("/https:~1~1ex.com~1tenant"), "{refused}");
    assert!(ClaimPath::parse("custom:tenant").is_ok(), "no dot: one name, as before");
}

/// A claim path has one meaning whatever the token holds: a top-level member literally
/// named `org.id` never stands in for the nested `org.id`, and a pointer to the member named
/// `org.id` never reads the nested one.
#[test]
fn a_member_named_with_dots_never_stands_in_for_a_nested_path() {
    let claims = json!({"org.id": "victim-org", "org": {"id": "own-org"}});
    let claims = claims.as_object().unwrap();
    let find = |path: &str| ClaimPath::parse(path).unwrap().find(claims).and_then(ClaimValue::of);
    assert_eq!(find("org.id"), Some(ClaimValue::String("own-org".into())));
    assert_eq!(find("/org/id"), Some(ClaimValue::String("own-org".into())));
    assert_eq!(find("/org.id"), Some(ClaimValue::String("victim-org".into())));
    let only_literal = json!({"org.id": "victim-org"});
    let only_literal = only_literal.as_object().unwrap();
    assert_eq!(ClaimPath::parse("org.id").unwrap().find(only_literal), None, "no nested member, no claim");
}

/// The scope hashes the names joined by dots, so a path keeps its callers' keys whichever
/// spelling names it; the verification memo tells every path apart.
#[test]
fn both_spellings_of_a_path_name_one_scope() {
    let parse = |path: &str| ClaimPath::parse(path).unwrap();
    assert_eq!(parse("/org/id").as_str(), "org.id");
    assert_eq!(parse("/sub").as_str(), "sub");
    assert_eq!(parse("/https:~1~1ex.com~1tenant").as_str(), "https://ex.com/tenant");
    assert_eq!(parse("org.id").pointer(), "/org/id");
    assert_eq!(parse("/org.id").pointer(), "/org.id");
    assert_eq!(parse("/a~1b~0c").pointer(), "/a~1b~0c");
    let token = "a.b.c";
    assert_eq!(verification_id(&parse("org.id"), token), verification_id(&parse("/org/id"), token));
    assert_ne!(verification_id(&parse("org.id"), token), verification_id(&parse("/org.id"), token));
}

/// A token whose payload is written by hand, so that a number keeps the digits it was sent
/// with (`json!` would round it first).
fn token_with_payload(payload: &str) -> String {
    format!("{}.{}.{}", b64(br#"{"alg":"HS256"}"#), b64(payload.as_bytes()), b64(&[0u8; 32]))
}

#[test]
fn numeric_claims_compare_as_their_exact_text() {
    let path = ClaimPath::parse("sub").unwrap();
    let claims_with = |sub: &str| {
        format!(r#"{{"iss":"https://idp.example","aud":"payments","exp":{},"sub":{sub}}}"#, NOW + 600)
    };
    let identity = |sub: &str| {
        let text = token_with_payload(&claims_with(sub));
        prepare(&text, &rules(), &path, NOW).map(|(_, identity)| identity)
    };
    // Two subjects past 2^64 would round to one f64 and share a scope: both are refused.
    for sub in
        ["12345678901234567890123", "12345678901234567890124", "1.5", "1e3", "-0.0", "18446744073709551616"]
    {
        assert_eq!(identity(sub).unwrap_err(), Unverified::Claim, "{sub}");
    }
    // Whole numbers within 64 bits keep their exact text, and differ when they differ.
    let max = identity("18446744073709551615").unwrap().value;
    assert_eq!(max, ClaimValue::Number("18446744073709551615".into()));
    let near = identity("18446744073709551614").unwrap().value;
    assert_ne!(max, near);
    assert_eq!(identity("-42").unwrap().value, ClaimValue::Number("-42".into()));
    assert_eq!(identity("9007199254740993").unwrap().value, ClaimValue::Number("9007199254740993".into()));
}

#[test]
fn prepare_checks_claims_before_any_crypto() {
    let path = ClaimPath::parse("sub").unwrap();
    let text = token(json!({"alg": "HS256"}), good_claims(), 32);
    let (parsed, identity) = prepare(&text, &rules(), &path, NOW).unwrap();
    assert_eq!(parsed.algorithm, Algorithm::Hs256);
    assert_eq!(identity.issuer.as_deref(), Some("https://idp.example"));
    assert_eq!(identity.value, ClaimValue::String("acct_1".into()));
    let mut claims = good_claims();
    claims["sub"] = json!(["a"]);
    assert_eq!(
        prepare(&token(json!({"alg": "HS256"}), claims, 32), &rules(), &path, NOW).unwrap_err(),
        Unverified::Claim
    );
    let mut claims = good_claims();
    claims["exp"] = json!(NOW - 3600);
    assert_eq!(
        prepare(&token(json!({"alg": "HS256"}), claims, 32), &rules(), &path, NOW).unwrap_err(),
        Unverified::Expired
    );
}

fn rsa_key(kid: &str, modulus_bytes: usize) -> Value {
    let mut n = vec![0xc5u8; modulus_bytes];
    n[modulus_bytes - 1] = 0x01;
    json!({"kty": "RSA", "kid": kid, "n": b64(&n), "e": "AQAB", "use": "sig"})
}

fn ec_key(kid: &str) -> Value {
    json!({"kty": "EC", "crv": "P-256", "kid": kid, "x": b64(&[1; 32]), "y": b64(&[2; 32]), "alg": "ES256"})
}

fn ed_key(kid: &str) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(&[3; 32])})
}

#[test]
fn jwks_keeps_usable_keys_only() {
    let jwks = json!({"keys": [
        rsa_key("rsa", 256),
        rsa_key("weak", 128),
        ec_key("ec"),
        ed_key("ed"),
        {"kty": "oct", "kid": "hmac", "k": b64(&[9; 32])},
        {"kty": "EC", "crv": "P-384", "kid": "p384", "x": b64(&[1; 48]), "y": b64(&[2; 48])},
        {"kty": "EC", "crv": "P-256", "kid": "short", "x": b64(&[1; 31]), "y": b64(&[2; 32])},
        {"kty": "RSA", "kid": "ps", "alg": "PS256", "n": b64(&[0xc5; 256]), "e": "AQAB"},
        {"kty": "RSA", "kid": "enc", "use": "enc", "n": b64(&[0xc5; 256]), "e": "AQAB"},
        {"kty": "OKP", "crv": "X25519", "kid": "x", "x": b64(&[3; 32])},
        "not an object",
    ]});
    let set = parse_jwks(&jwks.to_string(), JwksSource::Fetched).unwrap();
    let kept: Vec<(&str, Algorithm)> =
        set.keys.iter().map(|k| (k.kid.as_deref().unwrap(), k.algorithm)).collect();
    assert_eq!(kept, [("rsa", Algorithm::Rs256), ("ec", Algorithm::Es256), ("ed", Algorithm::EdDsa)]);
    // The import form holds public members only.
    let ec: Value = serde_json::from_str(&set.keys[1].import_json).unwrap();
    assert_eq!(ec, json!({"kty": "EC", "crv": "P-256", "x": b64(&[1; 32]), "y": b64(&[2; 32])}));
    // The oct key made it no further: inline, it is refused outright as secret material.
    let err = parse_jwks(&jwks.to_string(), JwksSource::Inline).unwrap_err();
    assert!(err.contains("keys[4]") && err.contains("SCOPE_JWT_HS256_SECRET"), "{err}");
}

#[test]
fn jwks_errors() {
    let mut private = ec_key("ec");
    private["d"] = json!(b64(&[4; 32]));
    for (text, expected) in [
        ("{".to_owned(), "not valid JSON"),
        ("[]".to_owned(), "expected a JWKS"),
        (json!({"keys": {}}).to_string(), "expected a JWKS"),
        (json!({"keys": []}).to_string(), "no usable key"),
        (json!({"keys": [rsa_key("weak", 200)]}).to_string(), "no usable key"),
        (json!({"keys": [private]}).to_string(), "private"),
    ] {
        let err = parse_jwks(&text, JwksSource::Inline).unwrap_err();
        assert!(err.contains(expected), "{text}: {err}");
    }
    let many = json!({"keys": (0..=MAX_JWKS_KEYS).map(|i| ed_key(&i.to_string())).collect::<Vec<_>>()});
    assert!(parse_jwks(&many.to_string(), JwksSource::Fetched).unwrap_err().contains("at most"));
}

#[test]
fn the_key_decides_the_algorithm() {
    let set = parse_jwks(
        &json!({"keys": [rsa_key("a", 256), ec_key("b"), ed_key("c"), ed_key("d")]}).to_string(),
        JwksSource::Inline,
    )
    .unwrap();
    let kids = |result: Result<Vec<&Jwk>, Unverified>| {
        result.map(|keys| keys.iter().map(|k| k.kid.clone().unwrap()).collect::<Vec<_>>())
    };
    assert_eq!(kids(candidates(&set, Algorithm::Rs256, Some("a"))), Ok(vec!["a".to_owned()]));
    assert_eq!(kids(candidates(&set, Algorithm::EdDsa, None)), Ok(vec!["c".to_owned(), "d".to_owned()]));
    // A known kid under another algorithm: no key (and no refetch).
    assert_eq!(kids(candidates(&set, Algorithm::Es256, Some("a"))), Err(Unverified::NoKey));
    assert_eq!(kids(candidates(&set, Algorithm::Rs256, Some("zz"))), Err(Unverified::UnknownKid));
    // HS256 never takes a JWKS key, whatever the kid.
    assert_eq!(kids(candidates(&set, Algorithm::Hs256, Some("a"))), Err(Unverified::NoKey));
    assert_eq!(kids(candidates(&set, Algorithm::Hs256, None)), Err(Unverified::NoKey));
    let only_ec = parse_jwks(&json!({"keys": [ec_key("b")]}).to_string(), JwksSource::Inline).unwrap();
    assert_eq!(kids(candidates(&only_ec, Algorithm::Rs256, None)), Err(Unverified::NoKey));
}

#[test]
fn cache_control_max_age() {
    assert_eq!(max_age_seconds("public, max-age=300"), Some(300));
    assert_eq!(max_age_seconds("Max-Age = \"60\", must-revalidate"), Some(60));
    assert_eq!(max_age_seconds("no-store"), None);
    assert_eq!(max_age_seconds("max-age=-1"), None);
    assert_eq!(max_age_seconds("max-age=99999999999999999999999"), Some(u64::MAX));
    assert_eq!(max_age_seconds("s-maxage=10"), None);
}

#[test]
fn reasons_round_trip_through_their_slugs() {
    for reason in Unverified::ALL {
        assert_eq!(Unverified::from_slug(reason.slug()), Some(reason));
    }
    assert_eq!(Unverified::from_slug("nope"), None);
}

proptest! {
    #[test]
    fn base64url_round_trips(bytes in prop::collection::vec(any::<u8>(), 0..100)) {
        let encoded = base64url_encode(&bytes);
        prop_assert_eq!(base64url_decode(&encoded), Some(bytes));
    }

    #[test]
    fn base64url_decoding_is_canonical(text in "[A-Za-z0-9_=+/-]{0,40}") {
        if let Some(bytes) = base64url_decode(&text) {
            prop_assert_eq!(base64url_encode(&bytes), text);
        }
    }

    #[test]
    fn tokens_round_trip(
        alg in prop::sample::select(vec!["RS256", "ES256", "EdDSA", "HS256"]),
        kid in prop::option::of("[ -~]{0,12}"),
        sub in "[ -~]{0,20}",
        exp in 0u64..4_000_000_000,
    ) {
        let algorithm = Algorithm::from_jose(alg).unwrap();
        let sig_len = match algorithm { Algorithm::Rs256 => 256, Algorithm::Hs256 => 32, _ => 64 };
        let mut header = json!({"alg": alg});
        if let Some(kid) = &kid { header["kid"] = json!(kid); }
        let text = token(header, json!({"sub": sub, "exp": exp}), sig_len);
        let parsed = parse(&text).unwrap();
        prop_assert_eq!(parsed.algorithm, algorithm);
        prop_assert_eq!(parsed.kid, kid);
        prop_assert_eq!(&parsed.claims["sub"], &json!(sub));
        prop_assert_eq!(parsed.signing_input, text.rsplit_once('.').unwrap().0.as_bytes());
        let open = Validation { issuer: None, audience: None, leeway_seconds: 0 };
        let verdict = check_claims(&parsed.claims, &open, NOW);
        prop_assert_eq!(verdict.is_ok(), exp >= NOW);
        prop_assert_eq!(Validity::of(&parsed.claims, &open).contains(NOW), exp >= NOW);
    }

    #[test]
    fn parsing_never_panics(text in "[A-Za-z0-9_.=-]{0,200}") {
        if let Ok(parsed) = parse(&text) {
            prop_assert!(text.as_bytes().starts_with(parsed.signing_input));
            prop_assert_eq!(parsed.signing_input.iter().filter(|&&b| b == b'.').count(), 1);
        }
    }
}

#[test]
fn webcrypto_params_name_each_algorithm_with_its_hash_and_curve() {
    let params = |algorithm: Algorithm| algorithm.webcrypto_params();
    let rsa: WebCryptoParams = &[("name", "RSASSA-PKCS1-v1_5"), ("hash", "SHA-256")];
    assert_eq!(params(Algorithm::Rs256), (rsa, &[("name", "RSASSA-PKCS1-v1_5")][..]));
    // ECDSA: the curve at import, the hash at verify (WebCrypto refuses it elsewhere).
    let ec_import: WebCryptoParams = &[("name", "ECDSA"), ("namedCurve", "P-256")];
    assert_eq!(params(Algorithm::Es256), (ec_import, &[("name", "ECDSA"), ("hash", "SHA-256")][..]));
    assert_eq!(params(Algorithm::EdDsa), (&[("name", "Ed25519")][..], &[("name", "Ed25519")][..]));
    assert_eq!(
        params(Algorithm::Hs256),
        (&[("name", "HMAC"), ("hash", "SHA-256")][..], &[("name", "HMAC")][..])
    );
}

#[test]
fn webcrypto_json_spells_the_params_as_objects() {
    assert_eq!(
        Algorithm::Es256.webcrypto_json(),
        (
            r#"{"name":"ECDSA","namedCurve":"P-256"}"#.to_owned(),
            r#"{"hash":"SHA-256","name":"ECDSA"}"#.to_owned()
        )
    );
    assert_eq!(
        Algorithm::Hs256.webcrypto_json(),
        (r#"{"hash":"SHA-256","name":"HMAC"}"#.to_owned(), r#"{"name":"HMAC"}"#.to_owned())
    );
    for algorithm in [Algorithm::Rs256, Algorithm::Es256, Algorithm::EdDsa, Algorithm::Hs256] {
        let (import, check) = algorithm.webcrypto_json();
        let read = |text: &str| serde_json::from_str::<Map<String, Value>>(text).unwrap();
        let pairs = |map: Map<String, Value>| -> Vec<(String, String)> {
            map.into_iter().map(|(k, v)| (k, v.as_str().unwrap().to_owned())).collect()
        };
        let (want_import, want_check) = algorithm.webcrypto_params();
        let owned = |p: WebCryptoParams| -> Vec<(String, String)> {
            let mut v: Vec<_> = p.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            v.sort();
            v
        };
        let sorted = |mut v: Vec<(String, String)>| {
            v.sort();
            v
        };
        assert_eq!(sorted(pairs(read(&import))), owned(want_import));
        assert_eq!(sorted(pairs(read(&check))), owned(want_check));
    }
}
