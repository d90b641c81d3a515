//! Known answers: the digests this crate computed, at commit d5eb51d, for a varied table of
//! requests, recorded as literal hex. A stored record keeps the fingerprint of its first
//! request and the object name of its key, so a retry after an upgrade replays only if
//! both come out byte for byte the same; any change to how a body is read, canonicalised,
//! shaped, folded, sorted or hashed shows up here as a changed line.
//!
//! The table covers methods, paths and query orders, JSON bodies with reordered members,
//! numbers as written, escapes, non-ASCII text, duplicate and case-variant member names
//! (ASCII, Latin-1, Greek sigma, German ß, Turkish dotless and dotted I, the Kelvin sign,
//! the micro sign, titlecase digraphs, lone surrogates), the nesting limit, bodies read raw
//! (forms, text, invalid JSON or UTF-8), fingerprint headers, shaped fingerprints
//! (`fingerprint_ignore`, `fingerprint_only`), the caller binding, and every kind of scope
//! with its object name and key salt. Should one differ, the test prints the whole table as
//! computed, to compare line by line; never paste it back without knowing why it changed.
//! A line changed on purpose goes into `CHANGED` with the reason, and the recorded table
//! stays as it was.

use super::*;
use crate::core::formats::body_shape::JsonPointer;
use crate::core::primitives::jwt::ClaimPath;

/// What the fingerprint's case-variant rule must keep in written order (`canonical_json`,
/// rule 2): each object's first member sorts after its second by code point, so a sorted
/// object and one kept in written order hash differently.
const CASE_VARIANTS: &[&str] = &[
    r#"{"b":1,"B":2,"a":3}"#,
    r#"{"amount":100,"Amount":200}"#,
    r#"{"Amount":200,"amount":100}"#,
    r#"{"z":1,"ID":2,"id":3}"#,
    "{\"\u{e9}\":1,\"\u{c9}\":2}",
    "{\"\u{ff}\":1,\"\u{178}\":2}",
    "{\"\u{3c3}\":1,\"\u{3a3}\":2}",
    "{\"\u{3c3}\":1,\"\u{3c2}\":2}",
    "{\"\u{3c2}\":1,\"\u{3a3}\":2}",
    "{\"\u{df}\":1,\"SS\":2}",
    "{\"\u{df}\":1,\"ss\":2}",
    "{\"stra\u{df}e\":1,\"STRASSE\":2}",
    "{\"\u{1e9e}\":1,\"\u{df}\":2}",
    "{\"\u{1e9e}\":1,\"ss\":2}",
    "{\"\u{130}\":1,\"i\":2}",
    "{\"\u{130}\":1,\"I\":2}",
    "{\"\u{131}\":1,\"I\":2}",
    "{\"\u{131}\":1,\"i\":2}",
    "{\"\u{130}\":1,\"i\u{307}\":2}",
    "{\"\u{212a}\":1,\"k\":2}",
    "{\"\u{212a}\":1,\"K\":2}",
    r#"{"\u212A":1,"k":2}"#,
    "{\"\u{17f}\":1,\"s\":2}",
    "{\"\u{3bc}\":1,\"\u{b5}\":2}",
    "{\"\u{1c5}\":1,\"\u{1c4}\":2}",
    "{\"\u{1c6}\":1,\"\u{1c5}\":2}",
    "{\"\u{212b}\":1,\"\u{e5}\":2}",
    "{\"\u{fb00}\":1,\"ff\":2}",
    "{\"\u{149}\":1,\"\u{2bc}N\":2}",
    "{\"\u{1f88}\":1,\"\u{1f80}\":2}",
    r#"{"\ud800":1,"\ufffd":2}"#,
    r#"{"\udc00":1,"\ud800":2}"#,
    r#"{"x":{"a":1,"A":2}}"#,
    r#"{"e":1,"\u00e9":2,"E":3}"#,
];

/// Bodies read as JSON with no lookalike names: sorted, numbers and strings as written.
const JSON_BODIES: &[&str] = &[
    r#"{"amount":1000,"currency":"eur"}"#,
    "{ \"currency\" : \"eur\",\n\t\"amount\" : 1000 }\r\n",
    r#"{"amount":1000.0,"currency":"eur"}"#,
    r#"{"amount":1e3,"currency":"eur"}"#,
    r#"{"amount":1E+3,"currency":"eur"}"#,
    r#"{"amount":-0,"currency":"eur"}"#,
    r#"{"amount":123456789012345678901234567890123456789012,"currency":"eur"}"#,
    r#"{"amount":1e400,"currency":"eur"}"#,
    r#"{"amount":0.1000000000000000055511151231257827,"currency":"eur"}"#,
    r#"{"amount":"1000","currency":"eur"}"#,
    r#"{"a":1,"a":2}"#,
    r#"{"a":2,"a":1}"#,
    r#"{"a":1,"\u0061":2}"#,
    r#"{"\u0061":2,"a":1}"#,
    r#"{"b":1,"\u0061":2}"#,
    r#"{"b":1,"A":3}"#,
    r#"{"alpha":2,"Zeta":1}"#,
    "{\"name\":\"Zo\u{eb}\",\"emoji\":\"\u{1f600}\",\"city\":\"\u{5317}\u{4eac}\"}",
    r#"{"name":"Zo\u00eb","emoji":"\ud83d\ude00"}"#,
    "{\"\u{1f600}\":1,\"\u{e9}\":2,\"e\":3}",
    r#"{"\ud83e":4,"\ud83d\ude00":3,"\u00e9":2,"A":1,"\n":0}"#,
    r#"{"s":"quote \" backslash \\ slash \/ \/ controls \b\f\n\r\t \u0000 \u001f"}"#,
    r#"{"items":[{"sku":"b","qty":2},{"qty":1,"sku":"a"}],"paid":true,"note":null,"refunded":false}"#,
    r#"[3,1,2]"#,
    r#"[{"b":1,"a":2},[],{}]"#,
    r#""just a string""#,
    "42",
    "null",
    "  true  ",
    r#"{"metadata":{"ts":"2026-12-01T10:00:00Z","order":"o-1"},"amount":1,"ts":5}"#,
];

/// Bodies under a JSON content type that are not read as JSON: hashed as raw bytes.
const RAW_UNDER_JSON: &[&[u8]] = &[
    b"",
    b"{",
    b"[1,]",
    b"{\"a\":1}{\"b\":2}",
    b"01",
    b"{\"a\":1,}",
    b"\"\\x\"",
    b"\xff\xfe",
    b"{\"b\":1,\"\xff\":2}",
    b"{'a':1}",
];

/// One line of the table: a label and the hex of what it names.
type Line = (String, String);

fn lines() -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    let mut push = |label: String, digest: Digest256| lines.push((label, digest.to_hex()));
    let request = |method: &'static str,
                   path: &'static str,
                   content_type: Option<&'static str>,
                   body: &'static [u8]| {
        Payload { method, path_and_query: path, content_type, extra_headers: &[], body, body_shape: None }
    };

    // Methods, paths and query orders.
    for method in ["GET", "POST", "PUT", "PATCH", "DELETE", "post"] {
        push(format!("method {method}"), fingerprint(&request(method, "/v1/charges", None, b"")));
    }
    for path in [
        "/",
        "/v1/charges",
        "/v1/charges/",
        "/v1/charges?a=1&b=2",
        "/v1/charges?b=2&a=1",
        "/v1/charges?a=1&a=2",
        "/v1/charges?a=2&a=1",
        "/v1/charges?expand%5B%5D=customer",
        "/v1/charges?expand[]=customer",
        "/v1/ch%C3%A4rges?q=%E2%82%AC",
    ] {
        push(format!("path {path}"), fingerprint(&request("POST", path, None, b"")));
    }

    // JSON bodies, each under a few JSON content types.
    for (i, body) in JSON_BODIES.iter().enumerate() {
        for content_type in
            ["application/json", " Application/JSON; charset=utf-8", "application/merge-patch+json"]
        {
            let payload = request("POST", "/v1/charges", Some(content_type), body.as_bytes());
            push(format!("json {i} {content_type:?}"), fingerprint(&payload));
        }
    }
    for (i, body) in CASE_VARIANTS.iter().enumerate() {
        let payload = request("POST", "/v1/charges", Some("application/json"), body.as_bytes());
        push(format!("case variant {i}"), fingerprint(&payload));
    }
    // The nesting limit: 128 levels are read as JSON, 129 are raw bytes.
    let at_limit: &'static str = format!("{}{}", "[".repeat(128), "]".repeat(128)).leak();
    let over: &'static str = format!("{}{}", "[".repeat(129), "]".repeat(129)).leak();
    for (label, body) in [("depth 128", at_limit), ("depth 129", over)] {
        push(
            label.to_owned(),
            fingerprint(&request("POST", "/v1/charges", Some("application/json"), body.as_bytes())),
        );
    }
    for (i, body) in RAW_UNDER_JSON.iter().enumerate() {
        push(
            format!("raw under json {i}"),
            fingerprint(&request("POST", "/v1/charges", Some("application/json"), body)),
        );
    }

    // Bodies that are not JSON by their content type: forms, text, none.
    for (content_type, body) in [
        (Some("application/x-www-form-urlencoded"), &b"amount=1000&currency=eur"[..]),
        (Some("application/x-www-form-urlencoded"), b"currency=eur&amount=1000"),
        (Some("application/x-www-form-urlencoded; charset=utf-8"), b"amount=1000&currency=eur"),
        (
            Some("multipart/form-data; boundary=x"),
            b"--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x--\r\n",
        ),
        (Some("text/plain"), br#"{"a":1,"b":2}"#),
        (Some("text/plain"), br#"{"b":2,"a":1}"#),
        (Some("application/jsonx"), br#"{"a":1}"#),
        (Some(""), br#"{"a":1}"#),
        (None, br#"{"a":1}"#),
        (None, b""),
        (Some("application/octet-stream"), b"\x00\x01\xff"),
    ] {
        let payload = request("POST", "/v1/charges", content_type, body);
        push(format!("not json {content_type:?} {}", String::from_utf8_lossy(body)), fingerprint(&payload));
    }

    // Fingerprint headers: present, absent and empty differ, and their order counts.
    for (i, headers) in [
        &[("stripe-version", Some("2024-06-20"))][..],
        &[("stripe-version", Some("2025-01-01"))],
        &[("stripe-version", None)],
        &[("stripe-version", Some(""))],
        &[("stripe-version", Some("2024-06-20")), ("stripe-account", Some("acct_1"))],
        &[("stripe-account", Some("acct_1")), ("stripe-version", Some("2024-06-20"))],
    ]
    .into_iter()
    .enumerate()
    {
        let payload = Payload {
            extra_headers: headers,
            ..request("POST", "/v1/charges", Some("application/json"), br#"{"amount":1}"#)
        };
        push(format!("headers {i}"), fingerprint(&payload));
    }

    // Shaped fingerprints.
    let pointers = |list: &[&str]| list.iter().map(|p| JsonPointer::parse(p).unwrap()).collect::<Vec<_>>();
    let shapes = [
        ("ignore /ts", BodyShape::Ignore(pointers(&["/ts"]))),
        ("ignore /metadata/ts", BodyShape::Ignore(pointers(&["/metadata/ts"]))),
        ("ignore /ts /metadata", BodyShape::Ignore(pointers(&["/ts", "/metadata"]))),
        ("ignore /items/0", BodyShape::Ignore(pointers(&["/items/0"]))),
        ("ignore /a~1b /m~0n", BodyShape::Ignore(pointers(&["/a~1b", "/m~0n"]))),
        ("ignore /TS", BodyShape::Ignore(pointers(&["/TS"]))),
        ("only /amount", BodyShape::Only(pointers(&["/amount"]))),
        ("only /amount /currency", BodyShape::Only(pointers(&["/amount", "/currency"]))),
        ("only /currency /amount", BodyShape::Only(pointers(&["/currency", "/amount"]))),
        ("only /metadata", BodyShape::Only(pointers(&["/metadata"]))),
        ("only /items/1/sku", BodyShape::Only(pointers(&["/items/1/sku"]))),
        ("only /missing", BodyShape::Only(pointers(&["/missing"]))),
        ("only /\u{212a}ey", BodyShape::Only(pointers(&["/\u{212a}ey"]))),
    ];
    let shaped_bodies: &[&[u8]] = &[
        br#"{"amount":1,"currency":"eur","ts":1}"#,
        br#"{"ts":2,"currency":"eur","amount":1}"#,
        br#"{"amount":1,"currency":"eur"}"#,
        br#"{"amount":1,"AMOUNT":9,"ts":1}"#,
        br#"{"ts":1,"TS":2,"amount":1}"#,
        br#"{"metadata":{"ts":"t","order":"o"},"amount":1,"ts":5}"#,
        br#"{"items":[{"sku":"a"},{"sku":"b"}],"a/b":1,"m~n":2,"amount":null}"#,
        br#"{"key":1,"KEY":2,"amount":3}"#,
        br#"{"amount":1,"ts":1"#,
    ];
    for (name, shape) in &shapes {
        for (i, body) in shaped_bodies.iter().enumerate() {
            let payload = Payload {
                body_shape: Some(shape),
                ..request("POST", "/v1/charges", Some("application/json"), body)
            };
            push(format!("shaped {name} body {i}"), fingerprint(&payload));
        }
        let text = Payload {
            body_shape: Some(shape),
            ..request("POST", "/v1/charges", Some("text/plain"), b"amount=1")
        };
        push(format!("shaped {name} text"), fingerprint(&text));
    }

    // The caller binding.
    let base = fingerprint(&request("POST", "/v1/charges", Some("application/json"), br#"{"amount":1}"#));
    for (i, headers) in [
        &[("authorization", Some(&b"Bearer sk_test_1"[..]))][..],
        &[("authorization", None)],
        &[("authorization", Some(b""))],
        &[("authorization", Some(b"Bearer sk_test_1")), ("x-tenant", Some(b"t1"))],
    ]
    .into_iter()
    .enumerate()
    {
        let binding = caller_binding_digest(headers);
        push(format!("binding {i}"), binding);
        push(format!("bound {i}"), bound_to_caller(base, Some(binding)));
    }

    // Scopes: object names and key salts.
    let account = |value: Option<&'static [u8]>| [ScopeField { name: "stripe-account", value }];
    let identity = |issuer: Option<&str>, path: &str, value: ClaimValue| Identity {
        issuer: issuer.map(str::to_owned),
        claim_path: ClaimPath::parse(path).unwrap(),
        value,
    };
    let scopes = [
        ("header none", Scope::from_header(None)),
        ("header bearer", Scope::from_header(Some(b"Bearer sk_live_51HxAbC"))),
        ("header empty", Scope::from_header(Some(b""))),
        ("credential acct_A", Scope::credential(b"Bearer platform", &account(Some(b"acct_A")))),
        ("credential absent", Scope::credential(b"Bearer platform", &account(None))),
        ("credential empty", Scope::credential(b"Bearer platform", &account(Some(b"")))),
        ("anonymous acct_A", Scope::anonymous(&account(Some(b"acct_A")))),
        ("anonymous absent", Scope::anonymous(&account(None))),
        (
            "claim sub",
            Scope::claim(&identity(Some("https://idp"), "sub", ClaimValue::String("acct_1".into())), &[]),
        ),
        ("claim no iss", Scope::claim(&identity(None, "sub", ClaimValue::String("acct_1".into())), &[])),
        (
            "claim org.id",
            Scope::claim(&identity(Some("https://idp"), "org.id", ClaimValue::String("o".into())), &[]),
        ),
        (
            "claim number",
            Scope::claim(&identity(Some("https://idp"), "sub", ClaimValue::Number("1".into())), &[]),
        ),
        (
            "claim extras",
            Scope::claim(
                &identity(Some("https://idp"), "sub", ClaimValue::String("\u{e9}".into())),
                &account(Some(b"acct_A")),
            ),
        ),
    ];
    for (name, scope) in scopes {
        for key in ["order-42-charge", "", "\u{1f600}-key"] {
            let object = object_name(scope, key);
            push(format!("object {name} {key:?}"), Digest256::from_hex(&object).unwrap());
        }
        push(format!("salt {name}"), scope.key_salt());
    }
    lines
}

#[test]
fn fingerprints_object_names_and_salts_are_the_recorded_ones() {
    let computed = lines();
    let expected = |label: &str| {
        let changed = CHANGED.iter().find(|(l, _)| *l == label);
        changed.or_else(|| EXPECTED.iter().find(|(l, _)| *l == label)).map(|(_, hex)| *hex)
    };
    let mismatched: Vec<&Line> =
        computed.iter().filter(|(label, hex)| expected(label) != Some(hex.as_str())).collect();
    let labels: Vec<&str> = computed.iter().map(|(label, _)| label.as_str()).collect();
    let missing: Vec<&str> = EXPECTED.iter().map(|(l, _)| *l).filter(|l| !labels.contains(l)).collect();
    if !mismatched.is_empty() || !missing.is_empty() || computed.len() != EXPECTED.len() {
        let table: String =
            computed.iter().map(|(label, hex)| format!("    ({label:?}, {hex:?}),\n")).collect();
        panic!(
            "{} of {} known answers differ, {} missing; computed table:\n{table}",
            mismatched.len(),
            EXPECTED.len(),
            missing.len()
        );
    }
}

/// Lines computed differently from d5eb51d, on purpose, and what they are now.
const CHANGED: &[(&str, &str)] = &[];

#[test]
fn each_change_is_a_change_of_a_recorded_line() {
    for (label, hex) in CHANGED {
        let recorded = EXPECTED.iter().find(|(l, _)| l == label).map(|(_, h)| h);
        assert!(recorded.is_some_and(|recorded| recorded != hex), "{label}");
    }
}

/// Lines, as computed at d5eb51d.
#[rustfmt::skip]
const EXPECTED: &[(&str, &str)] = &[
    ("method GET", "d1f75b54fb6f1173464713b0ecaec40ea22f9ac996c391aa169dd440a27219ee"),
    ("method POST", "970002547ec8ddb714dc5c67ead51a64b560435354ffa579bad31e29d8eab76c"),
    ("method PUT", "04f7ce2d47b4c57bdf9d97547e575c5d8444efb93caa66c1332030602a31b733"),
    ("method PATCH", "40c2c85de268a1bc571e2b7564e7c3ac09b7bcd05c59e790cc389e3a93e37ce5"),
    ("method DELETE", "ce143b0fb22b2dcf0c8aed1c1f36f01e0ea6429ffbb8eaef9676f7ce133ec07d"),
    ("method post", "d4c430b9fe014ebfd028480dfbc1020ddc04155d617bb0f56cad25bc063f61cf"),
    ("path /", "3c784c575741fac84c8a6405cd6f5674842dc56f0a3fdddf3daf339740187d42"),
    ("path /v1/charges", "970002547ec8ddb714dc5c67ead51a64b560435354ffa579bad31e29d8eab76c"),
    ("path /v1/charges/", "87219e77bc0b95143d59a78b2358806aac09aa8c23ecbba8146ea5a379aa5d85"),
    ("path /v1/charges?a=1&b=2", "6d5108cc64114c0ba79ca6bbb9e3908de843f42795e61e503bfd303d1121dfb3"),
    ("path /v1/charges?b=2&a=1", "808eb4d21da90e63d881d8ebca94207bfe1234650dae9756b988a70adf913d7d"),
    ("path /v1/charges?a=1&a=2", "b9112768f4afbf531ffce51808795652ce11d8a77946609c9a2ac6b0ff5c6262"),
    ("path /v1/charges?a=2&a=1", "c161f305e9845306769bd5f3ddacc6b06383a3307cc7fbf0397a1018e726e3a0"),
    ("path /v1/charges?expand%5B%5D=customer", "5cd8e785f2702be2c197ae04e7d9e84d9eda4975eacda5eee12afe21d46b29cb"),
    ("path /v1/charges?expand[]=customer", "636b2c603c9be39b71faec48f6ec11ffb53d1ff864f435542fd2abba77f90e2e"),
    ("path /v1/ch%C3%A4rges?q=%E2%82%AC", "5876bbb3e5a3fa58b355898dedb5de5e30dff01fea20693dc0a7f9759186f8e8"),
    ("json 0 \"application/json\"", "7c5745bd3a01538554129db8a60500cc21a04d743c0c8f217ebbd7c072e0427d"),
    ("json 0 \" Application/JSON; charset=utf-8\"", "bfae9a24f3882cd53bf6fe9157820afe5dc42931c64110e99d70240d516c4e40"),
    ("json 0 \"application/merge-patch+json\"", "6a47a8d6eb4e9511eeff4669160c46ece5449eca94b982eebb93bc3262ec2d1c"),
    ("json 1 \"application/json\"", "7c5745bd3a01538554129db8a60500cc21a04d743c0c8f217ebbd7c072e0427d"),
    ("json 1 \" Application/JSON; charset=utf-8\"", "bfae9a24f3882cd53bf6fe9157820afe5dc42931c64110e99d70240d516c4e40"),
    ("json 1 \"application/merge-patch+json\"", "6a47a8d6eb4e9511eeff4669160c46ece5449eca94b982eebb93bc3262ec2d1c"),
    ("json 2 \"application/json\"", "c7e147f8cf988dfac87bd8b5eb6ab227ed6bd5ce7a0bd8023af5e35f619896ec"),
    ("json 2 \" Application/JSON; charset=utf-8\"", "f50975463f51580ec38bcc14e41d312e6c42a9cd806a1c514ca52878a8aaa404"),
    ("json 2 \"application/merge-patch+json\"", "699b7b1ffef0d43edf9eac074aec36fb5a310cc8377e10dd20838d1841ef4c3c"),
    ("json 3 \"application/json\"", "df7292dc02c1ac9ffd4e813586359f8cd0fe19d02ac45cfaf2354cca47a0cd10"),
    ("json 3 \" Application/JSON; charset=utf-8\"", "c5595f7ba3899af9b33db9955741a4cfec324f00e208af1e0ba262476daf7038"),
    ("json 3 \"application/merge-patch+json\"", "2505a65df1476d9bccd0324cbb569a6940ce06e29966b757fd1a770d8a887f4f"),
    ("json 4 \"application/json\"", "6b990af2c7c87661c4e36fd6b07ce6a3b73fa1375d9f59fae198f56a27165c08"),
    ("json 4 \" Application/JSON; charset=utf-8\"", "f213a2ea5fb2a0005e69e3febf1d63d4db1d2e1f083269282d0bc1bab2d4ae72"),
    ("json 4 \"application/merge-patch+json\"", "35f72da8da349043cc931657af48f6c2a699c9e3c85f81bfce6130db8444115e"),
    ("json 5 \"application/json\"", "41e4c567d75003639efe26448c37c3635bee9c4526c5a11ba5e62a119d21dc1b"),
    ("json 5 \" Application/JSON; charset=utf-8\"", "eca0cfa183a36a877df38ee34d6d579b858185dcf2c1ce31e5c972261c152515"),
    ("json 5 \"application/merge-patch+json\"", "f21c2527187224638df2cba7d84446886aae81146c26c32639584f2ea55636e8"),
    ("json 6 \"application/json\"", "10b0b563a43b19071d296a765decd836d54a5601fc1527abde07a35f37c39a88"),
    ("json 6 \" Application/JSON; charset=utf-8\"", "308820c8bb604890181291d4c55cdab7a5d56c69b4ee4e51edfdcd80af12cac9"),
    ("json 6 \"application/merge-patch+json\"", "7c1986f6bc48d39a0b20a063f4fc45f0b79f1b2f9efd6751327d6a77dd92da20"),
    ("json 7 \"application/json\"", "ab468a02e904c0ccba1120a7c2c2d9289e6f1936fd11ef8e7730b364eccc57b5"),
    ("json 7 \" Application/JSON; charset=utf-8\"", "a3f01bd1e939de94e93657ef4b03a3118869326500ab9a1edf24f00efecfe0a9"),
    ("json 7 \"application/merge-patch+json\"", "81496c95b39e8c4fc72381b909317b3158091f036a0692c2ff004f9706225543"),
    ("json 8 \"application/json\"", "185c2701ffa6d9379400dd43b3c1ba44cebe70de411a74120bf93b190d5d71f4"),
    ("json 8 \" Application/JSON; charset=utf-8\"", "a10dedea4d50c2de1002dc08c1bf483db66ec3e54b506c2c00d02fbedcba8604"),
    ("json 8 \"application/merge-patch+json\"", "eb8421329f1a5d7f5de23ddc91bec65f150773f2e7389cc5b12cbc1c72346d33"),
    ("json 9 \"application/json\"", "fc21e9b201380600415f802b22b58af5d705ff7bc2cf66eca00628822d0f750d"),
    ("json 9 \" Application/JSON; charset=utf-8\"", "e0c659473209849d789ca77978ed5132076b75d8f8cfb21d2009cfc25d2e03c8"),
    ("json 9 \"application/merge-patch+json\"", "a3f2609e8242cdada611da899c09bf243f77d2a92067918205770366e721e288"),
    ("json 10 \"application/json\"", "3bef8ee0255377d43a971d412954bdb08780bdc63908f14e271867ef466aeb8b"),
    ("json 10 \" Application/JSON; charset=utf-8\"", "3e9ec29cc811bd8298ccd52388f3df970cd9b6516ccd52033567c9a8d26689b9"),
    ("json 10 \"application/merge-patch+json\"", "c7df207134f954b1b470132fa20be4d992a004a0f6bd327ade17881c59cc039f"),
    ("json 11 \"application/json\"", "557dea32272009135f80d88194fec2eda2947c2a3cc10fec59ecbd6e16014d29"),
    ("json 11 \" Application/JSON; charset=utf-8\"", "c75ad546e73c732ba2d684b9a9885ae401990e8e66ecec4ce8f5359095cbb2c0"),
    ("json 11 \"application/merge-patch+json\"", "9488f3c3f3857d4393c76efc9538af6715f35f89259737c36d98d41b9dd7e928"),
    ("json 12 \"application/json\"", "3f7fca075846df55b8d6920911501ad8171f55965c36667b012fd7d5e6ea5f0a"),
    ("json 12 \" Application/JSON; charset=utf-8\"", "f8984315a0360cf72df79d7843a5f00f5eae722d4cdbe73d66a297306d037358"),
    ("json 12 \"application/merge-patch+json\"", "aa040564a49f7935d7af4f37b22cfdf59352f5f9ea90b0c362581023eff01556"),
    ("json 13 \"application/json\"", "a4b6a8f9621ffefbb704bc21db9f487a340c4aa7462526f1120621683d49e077"),
    ("json 13 \" Application/JSON; charset=utf-8\"", "724b9cd5443d362b54cfac013a638ac7521ca7b1d6af7f5e77a753a205a0e079"),
    ("json 13 \"application/merge-patch+json\"", "058d2c8b736e14be741daefb5ee6364187eb300b426510abbe925537e32002b4"),
    ("json 14 \"application/json\"", "b696c9c9771ba39d90d98cd4eef0752385be7a1f4419704fd53dc1fc14c31b69"),
    ("json 14 \" Application/JSON; charset=utf-8\"", "f63252d99f609432551ac32cea18e765587fddab836ab12d7eb7b58096105675"),
    ("json 14 \"application/merge-patch+json\"", "6f6f25d810f530085f5813b3bf8f4302cd517d1737fee5ee14eee558749d6880"),
    ("json 15 \"application/json\"", "ebcb1cd364c5ae3f410bc2e192fea4ff5d59a64ff6d20a8967a311366876702c"),
    ("json 15 \" Application/JSON; charset=utf-8\"", "36ee9e302bde4b5d3b2e347fe7cdf70ad3181bcc127518c8c1dfc0f896751905"),
    ("json 15 \"application/merge-patch+json\"", "a89cabe2e02b90c0d11ec5ace4bd09cd3677015647a521a453e6eae4bcefe3da"),
    ("json 16 \"application/json\"", "2598f0efd27b755025cd255848f339f5aaa60e1fd6f45b731d262910cfb91ad2"),
    ("json 16 \" Application/JSON; charset=utf-8\"", "e13bb320646101546fcd70b5e19d922e723222c2929c9aaf9271df84ba2508fd"),
    ("json 16 \"application/merge-patch+json\"", "229c8a670beacdb953f1535221c6774ec3d66c16aac8c5134b732a636bb2d305"),
    ("json 17 \"application/json\"", "98d3ebb7a6f62c919d314183721df9ee004b53a83931f45a5faa6db61ecdcf70"),
    ("json 17 \" Application/JSON; charset=utf-8\"", "fccf525c7ffad2e2a455886666807978cbda181f4604d8b6fd5af4314ba632b6"),
    ("json 17 \"application/merge-patch+json\"", "88ac73cbd1114da7ccb398e8958c15c20665e4c7d23afc2ac22c82ddf369c1a2"),
    ("json 18 \"application/json\"", "16e0e30154a796ba1a39fc0e918d9989c244d0b48eabb9f86e0c3009a45fa425"),
    ("json 18 \" Application/JSON; charset=utf-8\"", "c00b171dcb1fe0f1bb31f8513c0aafcadbf97682b648ff0b8e75714c9e308044"),
    ("json 18 \"application/merge-patch+json\"", "a44e3503f0ca85813847ef852ea1bcf67809bf9eb61be885f6eda4ade21c5dfc"),
    ("json 19 \"application/json\"", "d0c0fdf4b457a0e978bbd1fc7c60f20708b12e24b8ecf276e55345b04aa340f8"),
    ("json 19 \" Application/JSON; charset=utf-8\"", "5fa376e58b5fbff3316d879b011e15accb95b1344c3ef864546f73f3a2370ccd"),
    ("json 19 \"application/merge-patch+json\"", "e3d2096618ebe39191df0ed6aa156b0c4c8952b561bb1fc609c83c979a4bdf09"),
    ("json 20 \"application/json\"", "6e186cc0bc1b50341ab52bf1f73959dcb3df327dc4938c473f3a231462b97a91"),
    ("json 20 \" Application/JSON; charset=utf-8\"", "ae41521b14751faa476fc5275ff1b8692f67c067e48196b473a7df77f61ff68b"),
    ("json 20 \"application/merge-patch+json\"", "1733cecc575107e8377b724d386f6af4dc59919fba70c2fb315891ca28695cc3"),
    ("json 21 \"application/json\"", "765571d473584f897e93dda6ad50d9e0971ddd7b3b3161dad74999efcf4ff434"),
    ("json 21 \" Application/JSON; charset=utf-8\"", "65eb4fc397a361341e2932a102e311fa2585931634cf2e6fda045ca0093cbdfc"),
    ("json 21 \"application/merge-patch+json\"", "186c1ccefdce2ba9159931b39aa9839f8aa9bed97fd7f34d60fc4a0be2abf183"),
    ("json 22 \"application/json\"", "20f03ea2cbdc07d429830241c46301e0ce764dd2e2923026c5f56d07ef46ef67"),
    ("json 22 \" Application/JSON; charset=utf-8\"", "6f46819feb68771c0a737ffbaeb284960ecf335f96759ddd7294157d17542af3"),
    ("json 22 \"application/merge-patch+json\"", "f8541c32f5d1d128acbd26fb4146f6ee8366d7deff815de21e8456ec0236b84e"),
    ("json 23 \"application/json\"", "1ff88398261cf822e9bad4d26f4e435fc652bfcdfb874f198fb81efb8db67fc3"),
    ("json 23 \" Application/JSON; charset=utf-8\"", "f58b8280e812f37da765b25a4da61adc9e12b7e7b5034f96b60ebb80701b6e09"),
    ("json 23 \"application/merge-patch+json\"", "9f05b8a3a5dc591fcb4337897d0ee942489323a7417aa27c26ca93e76c461fba"),
    ("json 24 \"application/json\"", "cc0c9896ea3a80cae1c7a86089b2fa54c09b896a51bd5e357d00d3d9b4fde67e"),
    ("json 24 \" Application/JSON; charset=utf-8\"", "0e3c8c7e11af61e3e45a46c3afc7b267ef69c8cf2ad7f9a8f2f5e00229b2509c"),
    ("json 24 \"application/merge-patch+json\"", "d97d75f24f5da2988cc16b0cebb7a6396abdc2c99b9cafcff46c678da344a49f"),
    ("json 25 \"application/json\"", "829c80dbf1b7007ab440832e4ccf8c595ec027181d81716ecb453b80a01778fe"),
    ("json 25 \" Application/JSON; charset=utf-8\"", "a768589f0ff95b892d782d5de726617f4bafffeee27e78668d4db8057c63580c"),
    ("json 25 \"application/merge-patch+json\"", "42a52670be3ff2bff78326fd35b0dc60e649712a3d665a7f203b953c2559886b"),
    ("json 26 \"application/json\"", "db1698937b3e867ed83fb1f9564ebb6ad64b98bd84c380831ef3baed0affe661"),
    ("json 26 \" Application/JSON; charset=utf-8\"", "5054c3737a7fee751d463aff8fa34ddb21dd6870306458302c4ab4cfa8b53063"),
    ("json 26 \"application/merge-patch+json\"", "b569d1e3827c23667dc1dc6e4863d26ede526429a763002a5567a3491423d619"),
    ("json 27 \"application/json\"", "239aeb3f0116414946013c85aa814deb15294676ea6341014fc4b171205feca5"),
    ("json 27 \" Application/JSON; charset=utf-8\"", "51be229297f6084e400b0eb2f2e8c463c6b8481381e01e8e7747f6eeb4478219"),
    ("json 27 \"application/merge-patch+json\"", "a8ddad6feba97539ac371fda1404c163a0a95658e323714b061d28cafd80d91d"),
    ("json 28 \"application/json\"", "912a246b12c9cf43cada49b7a445ab4fc297827433e437f8220d0f18b2f016a7"),
    ("json 28 \" Application/JSON; charset=utf-8\"", "2a9b9c2bdc2b57e5c1d99b24c980d0d06677121a69f5c698914b9d2790779fd6"),
    ("json 28 \"application/merge-patch+json\"", "634e7bda0da180bfa755d73a554cb24cffb6ecee1dbf9d4cea292f5dee65a985"),
    ("json 29 \"application/json\"", "e153a1e3e003ecdc5a7b497eafef8151693d8a1f22968222d9a9298acf9647e3"),
    ("json 29 \" Application/JSON; charset=utf-8\"", "2cad751381a0c3c35e06d23f2ff199c71857ae252ef521000e15f8da0562acb8"),
    ("json 29 \"application/merge-patch+json\"", "4c5949ddfe9b9c4b41471cc213ed4c982b0ccfcc27d75fe81ce2c988284ee258"),
    ("case variant 0", "7d57a8368763281b5f60bff6667afcc20d692cfbbb8b6e12e79c22289a0cfad9"),
    ("case variant 1", "d92b0d6b1ffce41b2778955a14c137e39d367e06bb6ba2bc30ac991d213befcb"),
    ("case variant 2", "781f7eb1c7e478fd213f6a493c868c1892b266286e5ee0f656cc781444f46f92"),
    ("case variant 3", "8a970b5c5fac854a819c614009cba3730ec0b333ef5643f474ee8cbdfe50d7de"),
    ("case variant 4", "3ba9264682cbb61512ff943d85dfa752351a23b5cb84a1a4a4a34e2dbc7ebb46"),
    ("case variant 5", "52a830f9a9f60bf00b643dda8e76ea80e9302f3679652064d7ed90f46ad11fdb"),
    ("case variant 6", "1f1e2a9b9d77146814258a5411019e9927c572cdc4388ef65b6d0ee80a983e88"),
    ("case variant 7", "73f9bea8fa373edc51b26daa5156466fbff048736994fda77a84a550e08addcb"),
    ("case variant 8", "cc3646794ecbd842772d388ce8fa4b3070f6b73da85e5c68e9b6d2369d02ecdd"),
    ("case variant 9", "2b28bfad87ba843a5501552a408bed4b6af62f517740b4775a056f7b882f316f"),
    ("case variant 10", "a6260a6a1a43ef12fe91c0203bb934c3853779178ffebd6d32589ae7199cdd4c"),
    ("case variant 11", "06c129ca33f7311ef693e4b25469a522d567545f50e396d1dc30c38dd43351a8"),
    ("case variant 12", "eb2c5b3d478c67e8c5c2dda252e75d7b2d4adf66af07b89f9936aebac20c0546"),
    ("case variant 13", "ce7613ca7846e93b6e1ba09689ba85a023f804b31bb32644ccacde87eca4ae35"),
    ("case variant 14", "f36afdd71855b9a7ea99ac09167d5feed7112314816b7c662db312d8f444f2cc"),
    ("case variant 15", "265398fe2255281ab8f541cf4629c572d595814f0567bdb8cb78dd564840f5e9"),
    ("case variant 16", "a2c2a9f275f235c3e8cec424eccaf8239f847268b7fedb9e70a3f8ee4d85a830"),
    ("case variant 17", "997ff4ab4399a7c5d161e287318459a5b6026dc4c74885ea33d7aa055188988a"),
    ("case variant 18", "60d7e181c0b7df7d2688445a8c4563c51e879b6c669e4adfb9e0d184d3cb5a42"),
    ("case variant 19", "f97668227f87a63bcf48db64ee52cd46d194565da7d3b92970b46d27b62ec27f"),
    ("case variant 20", "d2589b116d05f06e21f1bb6a1ff33d97d958ebd640551fc2b7be488f8585fe63"),
    ("case variant 21", "6d9f264204b01b9955055e74de900bd02c36715fe864535c6a24f4738dd4cbdb"),
    ("case variant 22", "90775fd03d04067061f1c3d56f18851f22ee5d8d4acb084697026aae2faccf4f"),
    ("case variant 23", "410a3702e3f356a1ea0f9c5eaab321c8d54458d8b393b093b1696c5a8d70b7f7"),
    ("case variant 24", "cb88f2b718f2c4e7cf99dcce9e1f8f1d1d6fc5caaa82d108c83b832f7b62dbd7"),
    ("case variant 25", "66bca933029057b784f4d0b2e3c07784c125e211fb917fa73b9363793ca84d34"),
    ("case variant 26", "8163061cad610d7c499478302fac96b820953ee77ced7ca8f4817d2d6a79f3b2"),
    ("case variant 27", "ab81f7ce03bab02b202e868a4f2348151b4c6e8c4f6b6c00f574d74c06c5beaf"),
    ("case variant 28", "a61d0a20502071dc3a20952dc1341aab265f68bf18df169a91ab630ee643d51a"),
    ("case variant 29", "1e909289b6d4c92f7cec1a04d4489def4b5730fe3e72b87f83eeb85f85e184f1"),
    ("case variant 30", "74c34fe30162973337d9292e87f5cef2de1351981989cdd18578f493def8875c"),
    ("case variant 31", "b907addbe097d8a9dfce6f3a6397438935261ee4e0bc0b8ee2c0bf714f546271"),
    ("case variant 32", "9e5e8b39acaab885b17c94bf37cd5c73d7f6148f5f09fa57433ce5fffcf2e3fa"),
    ("case variant 33", "66cf69bfa3a55253dfbb69db695e09f4ef87001b6ef47b9f34f83857aaaf2e10"),
    ("depth 128", "463a7bb3426fcb6882ec5ba788e2c3be2500d8ea3bf7502b0fca1444849d2faf"),
    ("depth 129", "af3cd064947b62e0328dddf7872b01edef251cc94e147df86540d76bc4caa89b"),
    ("raw under json 0", "68553a129931463e628fa154e9fc5fc68b828fde3de92b13c37ca8c959379b68"),
    ("raw under json 1", "e199d73f8e4db8ffe20765ad89d5fbc881677a523937bb9b42d67e3cc9e58a94"),
    ("raw under json 2", "c66c90d11c30013f12dd0ae845e0a37ce41c102cd5578dcc4d184f1d89e28604"),
    ("raw under json 3", "e499018a992e58a2475c74e3fc4da25471065a50d9f6410e45570d0f20a85c07"),
    ("raw under json 4", "f6580d585a3355194ab26fdafff4e86473bad31fb76c2695c9bebaebc3e38e21"),
    ("raw under json 5", "e02329e1b1f1726b463b28c058fca20e7fffe79cd7b973b79644b03f69dfdb52"),
    ("raw under json 6", "ec3f8f28c9b8654333ad2271e94c6f4bf8fbf4c4c6abb75311efa18d9e0cf902"),
    ("raw under json 7", "31a8851da48650b9476417f25525102040df3f3c7fbc4f3a18c607bccea7f948"),
    ("raw under json 8", "a4849f599492e3765eb03dc955fb335a0b19c8f82908ef960433dec52a55d503"),
    ("raw under json 9", "312cc140a1c9bf8189de5e1bbfc0603e3f33f76c35216dc57c122b2ea6af1e0d"),
    ("not json Some(\"application/x-www-form-urlencoded\") amount=1000&currency=eur", "8e156df65f4559a61a1a289d5697736eda925b452cc19b0a05f3777257bba150"),
    ("not json Some(\"application/x-www-form-urlencoded\") currency=eur&amount=1000", "42b99056bb3b3050270747194405ad13694df68449c9b9f34fd840160841b89e"),
    ("not json Some(\"application/x-www-form-urlencoded; charset=utf-8\") amount=1000&currency=eur", "40e3c9f300c1c7b6a43e7608d2974057d48dcf5c3c94f0a32b4c90b7a5603b89"),
    ("not json Some(\"multipart/form-data; boundary=x\") --x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x--\r\n", "d64f751bb17b255df7d62aa841fb1317dbd6fe29d256f910b6a11fa9a658bfc4"),
    ("not json Some(\"text/plain\") {\"a\":1,\"b\":2}", "e65c0638770189daebd2ab55674c7d1c4d90a61f8d0907d968e74266080f83eb"),
    ("not json Some(\"text/plain\") {\"b\":2,\"a\":1}", "107fa9ca863f05d218f2a4cfcbc761d97b2f820cc7309184c43d8b5791057458"),
    ("not json Some(\"application/jsonx\") {\"a\":1}", "6f00f564930b1f44efa46a9bce1d15fba3356040d5b4cf8a75f98c0e8fda6917"),
    ("not json Some(\"\") {\"a\":1}", "441ec4ce6d0ff2501fba002c7464904c835e7f1b1fbd6e2b9b6815b3a4b6d070"),
    ("not json None {\"a\":1}", "441ec4ce6d0ff2501fba002c7464904c835e7f1b1fbd6e2b9b6815b3a4b6d070"),
    ("not json None ", "970002547ec8ddb714dc5c67ead51a64b560435354ffa579bad31e29d8eab76c"),
    ("not json Some(\"application/octet-stream\") \0\u{1}�", "4b53baa72e269d36e40c4df83422a78fa905d3bebb2fdd34537186952a9f5b67"),
    ("headers 0", "78a8c9ea5823cd9e11c556d1833fcfeb96f88824d86216ba7afcab4b703e829e"),
    ("headers 1", "dcb7dca30cc6beedfb443e954399c8e9b592ad160cbb191902aa1b653a603ef8"),
    ("headers 2", "f7738bf892b7ba660013f6f188a6d53fffc0bc577682399765e68909f8a6e6bc"),
    ("headers 3", "a4f0515aaa9a90a5dd3c2428b7a234dc7b0ecc21eed62dac404054bec4001c0b"),
    ("headers 4", "a11d834666eddeba83426594a7223a99fc9f157e550585bd462d406bbf1b61c3"),
    ("headers 5", "67a66e738550384fb92594dd8ed222fc4e6e6f0e50c4e27fffab44e69a45d208"),
    ("shaped ignore /ts body 0", "c89b789a78a58558711d2565a3c468bca02f9dda0e0564074d382bd9a9ca3eb3"),
    ("shaped ignore /ts body 1", "c89b789a78a58558711d2565a3c468bca02f9dda0e0564074d382bd9a9ca3eb3"),
    ("shaped ignore /ts body 2", "c89b789a78a58558711d2565a3c468bca02f9dda0e0564074d382bd9a9ca3eb3"),
    ("shaped ignore /ts body 3", "979046c4b719fe6bfbf76ea1c746352faf2c4212433a0c54c893d8dffcf8f452"),
    ("shaped ignore /ts body 4", "94fa761913ae9a43e74be9f4d792fc5ed7e0722678848df6bfe12f28ec1bb96b"),
    ("shaped ignore /ts body 5", "9e6ea625e6124055490cb6ce4a1d0c7f2bc4e3d1bec411b1523ca28e7bedcf02"),
    ("shaped ignore /ts body 6", "8f83ad4a8c97864fdf1a8e0c267e743c8933033fe1c90dc346f892db61522474"),
    ("shaped ignore /ts body 7", "d7dd999f6cc313a3ef7d07d4451561cdf820f809027e86ae96b1215f65b2957c"),
    ("shaped ignore /ts body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped ignore /ts text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped ignore /metadata/ts body 0", "3b63bf554ef08031a809d35dca4e2bc0307c31f2639a5012b5fda6e92786caa3"),
    ("shaped ignore /metadata/ts body 1", "c91ec66d2e7c577712fc6cd3f1a221db308afd5d588d8b237d268371f1e4af02"),
    ("shaped ignore /metadata/ts body 2", "c89b789a78a58558711d2565a3c468bca02f9dda0e0564074d382bd9a9ca3eb3"),
    ("shaped ignore /metadata/ts body 3", "441cc10207508b8a8b7512b7a37f0e2ec1095b370cfdef600c137b2fa5636098"),
    ("shaped ignore /metadata/ts body 4", "19567c1a77bc5ca80969cec51dc630d240a414866c7e712d09d21bc9e53a5259"),
    ("shaped ignore /metadata/ts body 5", "a26662867f7946c90fe8e0e394f5c6e95b69b2defa475f623ef77cd4b58b0fd5"),
    ("shaped ignore /metadata/ts body 6", "8f83ad4a8c97864fdf1a8e0c267e743c8933033fe1c90dc346f892db61522474"),
    ("shaped ignore /metadata/ts body 7", "d7dd999f6cc313a3ef7d07d4451561cdf820f809027e86ae96b1215f65b2957c"),
    ("shaped ignore /metadata/ts body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped ignore /metadata/ts text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped ignore /ts /metadata body 0", "c89b789a78a58558711d2565a3c468bca02f9dda0e0564074d382bd9a9ca3eb3"),
    ("shaped ignore /ts /metadata body 1", "c89b789a78a58558711d2565a3c468bca02f9dda0e0564074d382bd9a9ca3eb3"),
    ("shaped ignore /ts /metadata body 2", "c89b789a78a58558711d2565a3c468bca02f9dda0e0564074d382bd9a9ca3eb3"),
    ("shaped ignore /ts /metadata body 3", "979046c4b719fe6bfbf76ea1c746352faf2c4212433a0c54c893d8dffcf8f452"),
    ("shaped ignore /ts /metadata body 4", "94fa761913ae9a43e74be9f4d792fc5ed7e0722678848df6bfe12f28ec1bb96b"),
    ("shaped ignore /ts /metadata body 5", "9fa00e710ebb840759686ce1d4b4a7936d3ef17aa5cf30765033fcaad7c1a33a"),
    ("shaped ignore /ts /metadata body 6", "8f83ad4a8c97864fdf1a8e0c267e743c8933033fe1c90dc346f892db61522474"),
    ("shaped ignore /ts /metadata body 7", "d7dd999f6cc313a3ef7d07d4451561cdf820f809027e86ae96b1215f65b2957c"),
    ("shaped ignore /ts /metadata body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped ignore /ts /metadata text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped ignore /items/0 body 0", "3b63bf554ef08031a809d35dca4e2bc0307c31f2639a5012b5fda6e92786caa3"),
    ("shaped ignore /items/0 body 1", "c91ec66d2e7c577712fc6cd3f1a221db308afd5d588d8b237d268371f1e4af02"),
    ("shaped ignore /items/0 body 2", "c89b789a78a58558711d2565a3c468bca02f9dda0e0564074d382bd9a9ca3eb3"),
    ("shaped ignore /items/0 body 3", "441cc10207508b8a8b7512b7a37f0e2ec1095b370cfdef600c137b2fa5636098"),
    ("shaped ignore /items/0 body 4", "19567c1a77bc5ca80969cec51dc630d240a414866c7e712d09d21bc9e53a5259"),
    ("shaped ignore /items/0 body 5", "d743900d57efd210c4cf68bd4bfaaebb03a7fb1b983866f8af9c503f3a748161"),
    ("shaped ignore /items/0 body 6", "2ac4a15a955cbbc7d0d33d2449ac5b01f20f822518647b7ff8f62228f4d1de91"),
    ("shaped ignore /items/0 body 7", "d7dd999f6cc313a3ef7d07d4451561cdf820f809027e86ae96b1215f65b2957c"),
    ("shaped ignore /items/0 body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped ignore /items/0 text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped ignore /a~1b /m~0n body 0", "3b63bf554ef08031a809d35dca4e2bc0307c31f2639a5012b5fda6e92786caa3"),
    ("shaped ignore /a~1b /m~0n body 1", "c91ec66d2e7c577712fc6cd3f1a221db308afd5d588d8b237d268371f1e4af02"),
    ("shaped ignore /a~1b /m~0n body 2", "c89b789a78a58558711d2565a3c468bca02f9dda0e0564074d382bd9a9ca3eb3"),
    ("shaped ignore /a~1b /m~0n body 3", "441cc10207508b8a8b7512b7a37f0e2ec1095b370cfdef600c137b2fa5636098"),
    ("shaped ignore /a~1b /m~0n body 4", "19567c1a77bc5ca80969cec51dc630d240a414866c7e712d09d21bc9e53a5259"),
    ("shaped ignore /a~1b /m~0n body 5", "d743900d57efd210c4cf68bd4bfaaebb03a7fb1b983866f8af9c503f3a748161"),
    ("shaped ignore /a~1b /m~0n body 6", "4d225f1adb25c2a6a75600bb059fdafde29a488042bf188518d5cf1d9a01b579"),
    ("shaped ignore /a~1b /m~0n body 7", "d7dd999f6cc313a3ef7d07d4451561cdf820f809027e86ae96b1215f65b2957c"),
    ("shaped ignore /a~1b /m~0n body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped ignore /a~1b /m~0n text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped ignore /TS body 0", "3b63bf554ef08031a809d35dca4e2bc0307c31f2639a5012b5fda6e92786caa3"),
    ("shaped ignore /TS body 1", "c91ec66d2e7c577712fc6cd3f1a221db308afd5d588d8b237d268371f1e4af02"),
    ("shaped ignore /TS body 2", "c89b789a78a58558711d2565a3c468bca02f9dda0e0564074d382bd9a9ca3eb3"),
    ("shaped ignore /TS body 3", "441cc10207508b8a8b7512b7a37f0e2ec1095b370cfdef600c137b2fa5636098"),
    ("shaped ignore /TS body 4", "db25f6a99415ce408d582bbb56b8196582ebed036c7d19b2fc9f92533ff38f5f"),
    ("shaped ignore /TS body 5", "d743900d57efd210c4cf68bd4bfaaebb03a7fb1b983866f8af9c503f3a748161"),
    ("shaped ignore /TS body 6", "8f83ad4a8c97864fdf1a8e0c267e743c8933033fe1c90dc346f892db61522474"),
    ("shaped ignore /TS body 7", "d7dd999f6cc313a3ef7d07d4451561cdf820f809027e86ae96b1215f65b2957c"),
    ("shaped ignore /TS body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped ignore /TS text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped only /amount body 0", "dec68ea60a6c7796838b71cd0c157ff1ad008b5345e211038171f67516c6a50a"),
    ("shaped only /amount body 1", "dec68ea60a6c7796838b71cd0c157ff1ad008b5345e211038171f67516c6a50a"),
    ("shaped only /amount body 2", "dec68ea60a6c7796838b71cd0c157ff1ad008b5345e211038171f67516c6a50a"),
    ("shaped only /amount body 3", "64ccdc622d9ba75ffd68de3a4cfae21b9c0bd51d73005d538ed1288be2ec5567"),
    ("shaped only /amount body 4", "dec68ea60a6c7796838b71cd0c157ff1ad008b5345e211038171f67516c6a50a"),
    ("shaped only /amount body 5", "dec68ea60a6c7796838b71cd0c157ff1ad008b5345e211038171f67516c6a50a"),
    ("shaped only /amount body 6", "7a4be187f3d817ac84c74835ce9db78349e8a288710d44e48ef43bb2dc68ad5f"),
    ("shaped only /amount body 7", "9ca2643cf9aa49f14634362b5edf72b3349047e2c5b29dfd4a06bd475877aae0"),
    ("shaped only /amount body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped only /amount text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped only /amount /currency body 0", "323872051a72b54a128879ec9e46ffc97ff29afa9ef87a6bdfb4ec88e0ec2d3d"),
    ("shaped only /amount /currency body 1", "323872051a72b54a128879ec9e46ffc97ff29afa9ef87a6bdfb4ec88e0ec2d3d"),
    ("shaped only /amount /currency body 2", "323872051a72b54a128879ec9e46ffc97ff29afa9ef87a6bdfb4ec88e0ec2d3d"),
    ("shaped only /amount /currency body 3", "a95fb59c967379943e0e573d6e19d616fbc7e1d3a38d972ee40ee2178fee0076"),
    ("shaped only /amount /currency body 4", "0e5e28e5a48bbf9c800028a8596d3f29783f20f128f1419f6628e16c3441f157"),
    ("shaped only /amount /currency body 5", "0e5e28e5a48bbf9c800028a8596d3f29783f20f128f1419f6628e16c3441f157"),
    ("shaped only /amount /currency body 6", "9df4c93aa6d4cbf7beafc00660754ce51c1849c98429956ada59da88f69a67e2"),
    ("shaped only /amount /currency body 7", "678e797dff928834492a478da46d1c1607d37e2eddf62ff3f852a1ded7675c2f"),
    ("shaped only /amount /currency body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped only /amount /currency text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped only /currency /amount body 0", "98202c1eb807c0d882247a2f9f9c832fb425a864b1042ccb8bf0d0f66e1ff2df"),
    ("shaped only /currency /amount body 1", "98202c1eb807c0d882247a2f9f9c832fb425a864b1042ccb8bf0d0f66e1ff2df"),
    ("shaped only /currency /amount body 2", "98202c1eb807c0d882247a2f9f9c832fb425a864b1042ccb8bf0d0f66e1ff2df"),
    ("shaped only /currency /amount body 3", "c4cc6669f055da9e2825ddb2993998f72e87c0c092c8115621dd3bcb75b16a45"),
    ("shaped only /currency /amount body 4", "77aab1930eda85c05333482716e96bb4d6905eccad3fc3c13e7611932f6d739b"),
    ("shaped only /currency /amount body 5", "77aab1930eda85c05333482716e96bb4d6905eccad3fc3c13e7611932f6d739b"),
    ("shaped only /currency /amount body 6", "da35155c33555513980b1f57ab4726de524152c49a04124c1ff71d0e1c7e0744"),
    ("shaped only /currency /amount body 7", "2ca2ee7bd17346ff88ce31b89e5bf86014aa80fda97238144dcb1bf2a62101d3"),
    ("shaped only /currency /amount body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped only /currency /amount text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped only /metadata body 0", "eb4402c0ba72a8d3cc83f24faefa0db87bec04d3ca9389b2cfb6305b664b61f2"),
    ("shaped only /metadata body 1", "eb4402c0ba72a8d3cc83f24faefa0db87bec04d3ca9389b2cfb6305b664b61f2"),
    ("shaped only /metadata body 2", "eb4402c0ba72a8d3cc83f24faefa0db87bec04d3ca9389b2cfb6305b664b61f2"),
    ("shaped only /metadata body 3", "eb4402c0ba72a8d3cc83f24faefa0db87bec04d3ca9389b2cfb6305b664b61f2"),
    ("shaped only /metadata body 4", "eb4402c0ba72a8d3cc83f24faefa0db87bec04d3ca9389b2cfb6305b664b61f2"),
    ("shaped only /metadata body 5", "dcb0655b35ca38cc10e93da93a1251469713244e31b6ffe51dce3f463729cae3"),
    ("shaped only /metadata body 6", "eb4402c0ba72a8d3cc83f24faefa0db87bec04d3ca9389b2cfb6305b664b61f2"),
    ("shaped only /metadata body 7", "eb4402c0ba72a8d3cc83f24faefa0db87bec04d3ca9389b2cfb6305b664b61f2"),
    ("shaped only /metadata body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped only /metadata text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped only /items/1/sku body 0", "a4133a29d3f3b122f160dfc2796752e8e7b28ab8aa349ed44759bdce38fc7eb8"),
    ("shaped only /items/1/sku body 1", "a4133a29d3f3b122f160dfc2796752e8e7b28ab8aa349ed44759bdce38fc7eb8"),
    ("shaped only /items/1/sku body 2", "a4133a29d3f3b122f160dfc2796752e8e7b28ab8aa349ed44759bdce38fc7eb8"),
    ("shaped only /items/1/sku body 3", "a4133a29d3f3b122f160dfc2796752e8e7b28ab8aa349ed44759bdce38fc7eb8"),
    ("shaped only /items/1/sku body 4", "a4133a29d3f3b122f160dfc2796752e8e7b28ab8aa349ed44759bdce38fc7eb8"),
    ("shaped only /items/1/sku body 5", "a4133a29d3f3b122f160dfc2796752e8e7b28ab8aa349ed44759bdce38fc7eb8"),
    ("shaped only /items/1/sku body 6", "ed76c55d1fd35abe134f8a2dc8be656c063a0c5e1a4ceda3ec8a4dff4e0e1858"),
    ("shaped only /items/1/sku body 7", "a4133a29d3f3b122f160dfc2796752e8e7b28ab8aa349ed44759bdce38fc7eb8"),
    ("shaped only /items/1/sku body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped only /items/1/sku text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped only /missing body 0", "4ad75e4529863074dd27497a5f2fc2c421144dadc00b09d7ed363e020d9303bb"),
    ("shaped only /missing body 1", "4ad75e4529863074dd27497a5f2fc2c421144dadc00b09d7ed363e020d9303bb"),
    ("shaped only /missing body 2", "4ad75e4529863074dd27497a5f2fc2c421144dadc00b09d7ed363e020d9303bb"),
    ("shaped only /missing body 3", "4ad75e4529863074dd27497a5f2fc2c421144dadc00b09d7ed363e020d9303bb"),
    ("shaped only /missing body 4", "4ad75e4529863074dd27497a5f2fc2c421144dadc00b09d7ed363e020d9303bb"),
    ("shaped only /missing body 5", "4ad75e4529863074dd27497a5f2fc2c421144dadc00b09d7ed363e020d9303bb"),
    ("shaped only /missing body 6", "4ad75e4529863074dd27497a5f2fc2c421144dadc00b09d7ed363e020d9303bb"),
    ("shaped only /missing body 7", "4ad75e4529863074dd27497a5f2fc2c421144dadc00b09d7ed363e020d9303bb"),
    ("shaped only /missing body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped only /missing text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("shaped only /Key body 0", "51773b1df6fd7ed7f05bca9cf454436f7a4b6afdbda00464025c0bf5b4b18665"),
    ("shaped only /Key body 1", "51773b1df6fd7ed7f05bca9cf454436f7a4b6afdbda00464025c0bf5b4b18665"),
    ("shaped only /Key body 2", "51773b1df6fd7ed7f05bca9cf454436f7a4b6afdbda00464025c0bf5b4b18665"),
    ("shaped only /Key body 3", "51773b1df6fd7ed7f05bca9cf454436f7a4b6afdbda00464025c0bf5b4b18665"),
    ("shaped only /Key body 4", "51773b1df6fd7ed7f05bca9cf454436f7a4b6afdbda00464025c0bf5b4b18665"),
    ("shaped only /Key body 5", "51773b1df6fd7ed7f05bca9cf454436f7a4b6afdbda00464025c0bf5b4b18665"),
    ("shaped only /Key body 6", "51773b1df6fd7ed7f05bca9cf454436f7a4b6afdbda00464025c0bf5b4b18665"),
    ("shaped only /Key body 7", "2e231eedbd7d54e3e743369c9020dfa8de3f50fe1f40268006ba5051996d097c"),
    ("shaped only /Key body 8", "53c704f95f749781f4ec2efadc1eb4a4be6a627e5b7bbc1b1e0ef6615f49c1a7"),
    ("shaped only /Key text", "3ac11d72e4debc2428b742ebb487d644716fabe29c7a8fca7a88ea7b25e46982"),
    ("binding 0", "04a50281fc3de291e4969bafce90e75a339d8523e29ee304dcc0708684948286"),
    ("bound 0", "f0d6182968eb1789f93fbd05f2e0d918783d78553a2a422604f653c2a825b76c"),
    ("binding 1", "aadb913189d52cfc523807a64486190820d9ac6073ee1ec6b8717d69115bbf9e"),
    ("bound 1", "1adb76be4daee4559995272bdf1cece57c3db521f4feee3705db58f9d032138f"),
    ("binding 2", "a70d633974ddb9f207559538ca71e7ee2c8ef964d5c73f5daa1e18617e1c2656"),
    ("bound 2", "7374481f4a697a7c844c0cddfd49cf0eff454d089e5fce6d6a5a88550ece6243"),
    ("binding 3", "886d58b0c927f739e41a06cbefb7d63bd7c2841476af3eac85c8f74eb4889576"),
    ("bound 3", "3641feb8f33ac45a7ab716b7a9a1e9d106e4df6fe07258fb075a8972a874216e"),
    ("object header none \"order-42-charge\"", "4a3cada3b5010a1518cd1308600eb28f211a643c2edc34a7ec83ff7b7b3ecf23"),
    ("object header none \"\"", "6e4d6594333f3bb3db1b8dbe186c52633b8624239aa48014bb14167486658d61"),
    ("object header none \"😀-key\"", "0fe9c03b99af55db14171a277789f67911136f686a26efe4a7b74d1c330bd61d"),
    ("salt header none", "a9dcaab19bc6b266e317d6f51f343f11b327f0f19c906871c3f0444240f3f9de"),
    ("object header bearer \"order-42-charge\"", "5916f0c65d4b0d169b254f0793f1805a412e486bc212d2a483168a981107d1ab"),
    ("object header bearer \"\"", "796d4bd56242d56621942bcdc9682cb2d8cf68ef135f519d8efd3d8964b57f6c"),
    ("object header bearer \"😀-key\"", "eb4ab9b83fc09a016a32a4f38ab5dddfac39e88e9328b761179f693e2d633e5d"),
    ("salt header bearer", "d80cace4cd4413f360169ccd6af3b2cfe3c78ab329afb21e535066d4cffa0b9a"),
    ("object header empty \"order-42-charge\"", "f074ca35a8963f7d6ce732ae65a38aec3f8a423020d5de16814e35956eee467d"),
    ("object header empty \"\"", "031ee45ef4c3343cf08c7e7f072475df756983806b89ac1e35db088c77ef1acf"),
    ("object header empty \"😀-key\"", "0f91863fa66095478b07e040562ad40b530dea0d1639480e2b1757ea0b63139d"),
    ("salt header empty", "1bba332cdf1968cb0c9c75fc6bc0f8a6eaef8e66cbbf782bb6a5da09ddf57e05"),
    ("object credential acct_A \"order-42-charge\"", "f146beaead5980ba2b6dd2ecd56071a9bb359f0bade102b7d1600b775e829e28"),
    ("object credential acct_A \"\"", "d7ae8daaad3acc6c07a540cd99868226267587505c6eb0c475e8fabd2286f2d0"),
    ("object credential acct_A \"😀-key\"", "510b477f0706b24afaeb62d43997b739dd39c29f5618e1feb6efc36f51315c5f"),
    ("salt credential acct_A", "7f76b306f92da3b411a367391216322b5ea729ee4145da97ee2433fcf1ff28f1"),
    ("object credential absent \"order-42-charge\"", "6014fafb7eff1235ce9c0b2498129a30aac4d087d0572121d601bf46fb00752b"),
    ("object credential absent \"\"", "6b22115e4e891f39c3f5d4d8d02be72be9d93e3abc4bcaa458d68aee9080847b"),
    ("object credential absent \"😀-key\"", "96bb802c5ee8f91347acb14ebd44ff81dd65ccfeaf167c5c83e0fcc8637d759b"),
    ("salt credential absent", "18c16b7901b47383bd43927ebbaa48e0a43abbecd78d207ef9f2467475347d5f"),
    ("object credential empty \"order-42-charge\"", "1498c9bcc777882d6a19ec19b932d341ef7b1ebe82f7aaf55378f164dd556d5a"),
    ("object credential empty \"\"", "17d4f3ac257ff1fae8ccdc97febb7ae1e3849316a5ce63d4675939aa9c6a8db2"),
    ("object credential empty \"😀-key\"", "e436f55b647c18a303ce8f1ea1078e569a96ac5bdfc953d205a3821054aa5eb4"),
    ("salt credential empty", "87f03bd25fd6339d3262b8dc9d1065842e1b9856f83a4818e9dcba894275c0fb"),
    ("object anonymous acct_A \"order-42-charge\"", "a10820192c8e20a5d623506dccbe1fd7e4a24ff5c1170eac3f5068f0c5574898"),
    ("object anonymous acct_A \"\"", "329a3263122ad2a91e15af6d87fde58b24e567cf4df69a5d36123da1f9a36ff9"),
    ("object anonymous acct_A \"😀-key\"", "65037def4592b3d7c6cd6ecf358fd4631ef61cc187674766123b989422c13b5e"),
    ("salt anonymous acct_A", "33a64b40a8b13f7068f80ece60fff5a5f815cac7af00e622ec11bac599d41448"),
    ("object anonymous absent \"order-42-charge\"", "1316d5120ed7b8e9d81e23a3e762f9fa5c3b81952257669bfa2cab2cb8be496b"),
    ("object anonymous absent \"\"", "c2cfaac198d2e2a0e2b55ef13b148c435fc15d1c02421f4e413741af41f2b835"),
    ("object anonymous absent \"😀-key\"", "bc47fa6ba514d3425501be37bc7608ed19f9923ceada8a91eca50ad88c0e1437"),
    ("salt anonymous absent", "e9d35b3195987ede99faf215a346c0eb5ce2e4f5ddc10e5f6f8e5ad8f2ccba6d"),
    ("object claim sub \"order-42-charge\"", "bc7823d021490281ebdbf2191711e17d5618f7379013937247f25c49fa9e0720"),
    ("object claim sub \"\"", "f2c7459580b0e114bd246e8e4e7bc5895f1226eb950d9ca018a8a324a3d31fcd"),
    ("object claim sub \"😀-key\"", "425b375d08cb37b427c967f9a3e54fa188b9a3219cfcfaea753ed1212df09257"),
    ("salt claim sub", "ecdc5ab56eac483c12cf857534041b235db27e3e9bbd45f1c067c8a5412e7201"),
    ("object claim no iss \"order-42-charge\"", "65ca9c71812564c3af0e6465702b04f01801cfec0063c4aeae4c0e8677696a60"),
    ("object claim no iss \"\"", "ba96a39f3625a50a46248159edf142df259c1d8be99071da55f3ef021bc0a72e"),
    ("object claim no iss \"😀-key\"", "df98968467fdcc658007763c791ce50e8ae45f1e089b4beff7058cc6ed8d28f1"),
    ("salt claim no iss", "9101a6734fa36896624cf9193d2e5776d09cbec555d42637fffd6b985a96eaf4"),
    ("object claim org.id \"order-42-charge\"", "20f6879329a0b8f313c1779cfb8fdc46940e9c82dfc3578789dc624d795ad1a7"),
    ("object claim org.id \"\"", "84a55d41c6127055a1866ff1d94e6710da46c79821dde12b38b78fcedcfb7a38"),
    ("object claim org.id \"😀-key\"", "1648b2c3b055dc1fb966feba91463a71b80461c80ea92974bda753193a3af9b2"),
    ("salt claim org.id", "70320176f62a9e14f8c2f387117539576bb756ff3782295881aacdf00d8e674e"),
    ("object claim number \"order-42-charge\"", "f3538212c820e40435798fe7c4c6230dfa70ad4233da8cf4dd7ba07cf4600738"),
    ("object claim number \"\"", "25e798b9664b4a826540cf1f6755276ec5c33bc97963b3d6c4e4bcfd3f50888b"),
    ("object claim number \"😀-key\"", "b146251aea50c876eb01c068c2857b32abe471ab2b5a091f07c7cf20a25b571b"),
    ("salt claim number", "fb450da675025895d2abd50c615f23bfffc1c64bc93b543ec4f20aaba5978ab9"),
    ("object claim extras \"order-42-charge\"", "1a413cb81ffd52a7ee932e4c4463130b1f5405af2e4fa8b3da9fffae926491ad"),
    ("object claim extras \"\"", "af346d36d35cb718899f40ff032bb4c55690a568856b3ecebe65c9e102226e83"),
    ("object claim extras \"😀-key\"", "a76b1ca2717e4ca0767f8cbfbc0ac8ac7baba1f387def5ba8ac2938312b78268"),
    ("salt claim extras", "fadcfac9498bdb9246f0a7ed0f502a35e3e3ca742d0cb39596c03eb84fbe4578"),
];
