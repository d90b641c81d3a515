//! Known answers of canonical JSON, recorded from the hand-written canonicaliser of
//! `d5eb51d` before it was rebuilt on serde_json: every byte of every canonical form (or
//! that there is none) must stay as it was, since stored fingerprints hash these bytes.

use sha2::{Digest, Sha256};

use super::canonicalize;

/// Small inputs (some not UTF-8) and their canonical bytes; `None`: not canonicalised, so
/// the body is fingerprinted raw.
#[rustfmt::skip]
const KNOWN: &[(&[u8], Option<&[u8]>)] = &[
    (b"{}", Some(b"{}")),
    (b"[]", Some(b"[]")),
    (b"\"\"", Some(b"\"\"")),
    (b"0", Some(b"0")),
    (b"-0", Some(b"-0")),
    (b"-0.0", Some(b"-0.0")),
    (b"1.0", Some(b"1.0")),
    (b"1", Some(b"1")),
    (b"1e2", Some(b"1e2")),
    (b"1E2", Some(b"1E2")),
    (b"1e+2", Some(b"1e+2")),
    (b"1e-2", Some(b"1e-2")),
    (b"1E-0", Some(b"1E-0")),
    (b"0.1", Some(b"0.1")),
    (b"100000000000000000000001", Some(b"100000000000000000000001")),
    (b"-100000000000000000000001", Some(b"-100000000000000000000001")),
    (b"1e400", Some(b"1e400")),
    (b"-1e-400", Some(b"-1e-400")),
    (b"-1.5E-7", Some(b"-1.5E-7")),
    (b"123456789012345678901234567890.123456789e-99999", Some(b"123456789012345678901234567890.123456789e-99999")),
    (b"18446744073709551616", Some(b"18446744073709551616")),
    (b"-9223372036854775809", Some(b"-9223372036854775809")),
    (b"true", Some(b"true")),
    (b"false", Some(b"false")),
    (b"null", Some(b"null")),
    (b" \t\n\r{ \"a\" : 1 ,\"b\"\t:\n[ 1 , 2 ] }\r\n", Some(b"{\"a\":1,\"b\":[1,2]}")),
    (b"\n\n0\n\n", Some(b"0")),
    (b"{\"b\":{\"d\":[3,{\"f\":1,\"e\":2}],\"c\":null},\"a\":[]}", Some(b"{\"a\":[],\"b\":{\"c\":null,\"d\":[3,{\"e\":2,\"f\":1}]}}")),
    (b"{\"z\":1,\"y\":2,\"x\":{\"b\":1,\"a\":2}}", Some(b"{\"x\":{\"a\":2,\"b\":1},\"y\":2,\"z\":1}")),
    (b"{\"x\":{\"a\":2,\"b\":1},\"y\":2,\"z\":1}", Some(b"{\"x\":{\"a\":2,\"b\":1},\"y\":2,\"z\":1}")),
    (b"[{\"b\":1,\"a\":2},[{\"d\":4,\"c\":3}],\"s\",1.50,true]", Some(b"[{\"a\":2,\"b\":1},[{\"c\":3,\"d\":4}],\"s\",1.50,true]")),
    (b"{\"\":1,\"a\":{\"\":{\"\":[]}}}", Some(b"{\"\":1,\"a\":{\"\":{\"\":[]}}}")),
    (b"\"\\u00e9\"", Some(b"\"\\u00e9\"")),
    (b"\"\xc3\xa9\"", Some(b"\"\xc3\xa9\"")),
    (b"\"\\ud83d\\ude00\"", Some(b"\"\\ud83d\\ude00\"")),
    (b"\"\\uD83D\\uDE00\"", Some(b"\"\\uD83D\\uDE00\"")),
    (b"\"\xf0\x9f\x98\x80\"", Some(b"\"\xf0\x9f\x98\x80\"")),
    (b"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", Some(b"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"")),
    (b"\"a b\\u0041\"", Some(b"\"a b\\u0041\"")),
    (b"\"\x7f\xc2\x80\xef\xbf\xbf\"", Some(b"\"\x7f\xc2\x80\xef\xbf\xbf\"")),
    (b"\"\\ud800\"", Some(b"\"\\ud800\"")),
    (b"\"\\udc00\\ud800\"", Some(b"\"\\udc00\\ud800\"")),
    (b"\"\\ud800\\u0041\"", Some(b"\"\\ud800\\u0041\"")),
    (b"\"\\ud800\\ud800\"", Some(b"\"\\ud800\\ud800\"")),
    (b"{\"\\u00e9\":1,\"e\":2,\"\\u00E9\":3,\"z\":4}", Some(b"{\"e\":2,\"z\":4,\"\\u00e9\":1,\"\\u00E9\":3}")),
    (b"{\"\xc3\xa9\":1,\"\\u00e9\":2}", Some(b"{\"\xc3\xa9\":1,\"\\u00e9\":2}")),
    (b"{\"\\n\":0,\"A\":1,\"\\u00e9\":2,\"\\ud83e\":4,\"\\ud83d\\ude00\":3}", Some(b"{\"\\n\":0,\"A\":1,\"\\u00e9\":2,\"\\ud83e\":4,\"\\ud83d\\ude00\":3}")),
    (b"{\"\\ud83e\":4,\"\\ud83d\\ude00\":3,\"\\u00e9\":2,\"A\":1,\"\\n\":0}", Some(b"{\"\\n\":0,\"A\":1,\"\\u00e9\":2,\"\\ud83e\":4,\"\\ud83d\\ude00\":3}")),
    (b"{\"\xf0\x9f\x98\x80\":1,\"\xc3\xa9\":2,\"\xef\xbf\xbf\":3,\"\xee\x80\x80\":4}", Some(b"{\"\xc3\xa9\":2,\"\xee\x80\x80\":4,\"\xef\xbf\xbf\":3,\"\xf0\x9f\x98\x80\":1}")),
    (b"{\"\\/\":1,\"/\":2,\"\\u002f\":3}", Some(b"{\"\\/\":1,\"/\":2,\"\\u002f\":3}")),
    (b"{\"b\":1,\"\\u0061\":2}", Some(b"{\"\\u0061\":2,\"b\":1}")),
    (b"{\"a\":1,\"a\":2}", Some(b"{\"a\":1,\"a\":2}")),
    (b"{\"a\":2,\"a\":1}", Some(b"{\"a\":2,\"a\":1}")),
    (b"{\"b\":0,\"a\":1,\"c\":3,\"a\":2}", Some(b"{\"a\":1,\"a\":2,\"b\":0,\"c\":3}")),
    (b"{\"a\":1,\"\\u0061\":2}", Some(b"{\"a\":1,\"\\u0061\":2}")),
    (b"{\"\\u0061\":2,\"a\":1}", Some(b"{\"\\u0061\":2,\"a\":1}")),
    (b"{\"a\":{\"x\":1},\"a\":[2]}", Some(b"{\"a\":{\"x\":1},\"a\":[2]}")),
    (b"{\"amount\":100,\"Amount\":200}", Some(b"{\"amount\":100,\"Amount\":200}")),
    (b"{\"Amount\":200,\"amount\":100}", Some(b"{\"Amount\":200,\"amount\":100}")),
    (b"{\"z\":1,\"ID\":2,\"id\":3}", Some(b"{\"z\":1,\"ID\":2,\"id\":3}")),
    (b"{\"k\":1,\"\xe2\x84\xaa\":2}", Some(b"{\"k\":1,\"\xe2\x84\xaa\":2}")),
    (b"{\"k\":1,\"\\u212A\":2}", Some(b"{\"k\":1,\"\\u212A\":2}")),
    (b"{\"s\":1,\"\xc5\xbf\":2}", Some(b"{\"s\":1,\"\xc5\xbf\":2}")),
    (b"{\"x\":{\"a\":1,\"A\":2},\"b\":0}", Some(b"{\"b\":0,\"x\":{\"a\":1,\"A\":2}}")),
    (b"{\"\\ud800\":1,\"\\ufffd\":2}", Some(b"{\"\\ud800\":1,\"\\ufffd\":2}")),
    (b"{\"\\udc00\":1,\"\\ud800\":2}", Some(b"{\"\\udc00\":1,\"\\ud800\":2}")),
    (b"{\"stra\xc3\x9fe\":1,\"STRASSE\":2}", Some(b"{\"stra\xc3\x9fe\":1,\"STRASSE\":2}")),
    (b"{\"\xce\xa3\":1,\"\xcf\x82\":2,\"\xcf\x83\":3}", Some(b"{\"\xce\xa3\":1,\"\xcf\x82\":2,\"\xcf\x83\":3}")),
    (b"{\"b\":1,\"B\":2,\"a\":3}", Some(b"{\"b\":1,\"B\":2,\"a\":3}")),
    (b"{\"b\":1,\"A\":3}", Some(b"{\"A\":3,\"b\":1}")),
    (b"{\"Zeta\":1,\"alpha\":2}", Some(b"{\"Zeta\":1,\"alpha\":2}")),
    (b"{\"alpha\":2,\"Zeta\":1}", Some(b"{\"Zeta\":1,\"alpha\":2}")),
    (b"{\"$serde_json::private::Number\":\"1\"}", Some(b"{\"$serde_json::private::Number\":\"1\"}")),
    (b"{\"$serde_json::private::RawValue\":\"1\"}", Some(b"{\"$serde_json::private::RawValue\":\"1\"}")),
    (b"{\"$serde_json::private::Number\":1}", Some(b"{\"$serde_json::private::Number\":1}")),
    (b"", None),
    (b" ", None),
    (b"{", None),
    (b"}", None),
    (b"[", None),
    (b"]", None),
    (b"[1,]", None),
    (b"[,1]", None),
    (b"[1 2]", None),
    (b"{\"a\"}", None),
    (b"{\"a\":}", None),
    (b"{,}", None),
    (b"{\"a\":1,}", None),
    (b"{a:1}", None),
    (b"{\'a\':1}", None),
    (b"{\"a\" 1}", None),
    (b"{1:1}", None),
    (b"01", None),
    (b"-01", None),
    (b"00", None),
    (b"1.", None),
    (b".1", None),
    (b"+1", None),
    (b"-", None),
    (b"1e", None),
    (b"1e+", None),
    (b"1.e1", None),
    (b"0x10", None),
    (b"NaN", None),
    (b"Infinity", None),
    (b"-Infinity", None),
    (b"\"\x01\"", None),
    (b"\"\t\"", None),
    (b"\"\\x\"", None),
    (b"\"\\u12\"", None),
    (b"\"\\u12G4\"", None),
    (b"\"\\U0041\"", None),
    (b"\"\\\"", None),
    (b"tru", None),
    (b"nul", None),
    (b"True", None),
    (b"1 2", None),
    (b"{} {}", None),
    (b"[] x", None),
    (b"\"abc", None),
    (b"\'a\'", None),
    (b"//c\n1", None),
    (b"/*c*/1", None),
    (b"1//c", None),
    (b"{}x", None),
    (b"null,", None),
    (b"{}\x00", None),
    (b"\x001", None),
    (b"\x0c1", None),
    (b"\x0b1", None),
    (b"\xc2\xa01", None),
    (b"1\xc2\xa0", None),
    (b"\xef\xbb\xbf{}", None),
    (b"{}\xef\xbb\xbf", None),
    (b"\"\xff\"", None),
    (b"{\"b\":1,\"\xff\":2}", None),
    (b"\"\xc0\xaf\"", None),
    (b"\"\xed\xa0\x80\"", None),
    (b"\xfe\xff\x00{\x00}", None),
    (b"\"\xf4\x90\x80\x80\"", None),
];

/// Large and deeply nested inputs, built here: name, bytes.
fn generated() -> Vec<(&'static str, Vec<u8>)> {
    let nest = |open: &str, inner: &str, close: &str, n: usize| {
        format!("{}{inner}{}", open.repeat(n), close.repeat(n)).into_bytes()
    };
    let members = |n: usize| {
        let body: Vec<String> = (0..n).rev().map(|i| format!("\"k{i:06}\":{i}")).collect();
        format!("{{{}}}", body.join(",")).into_bytes()
    };
    vec![
        ("arrays 127 deep", nest("[", "", "]", 127)),
        ("arrays 128 deep", nest("[", "", "]", 128)),
        ("arrays 129 deep", nest("[", "", "]", 129)),
        ("objects 128 deep", nest("{\"a\":", "1", "}", 128)),
        ("objects 129 deep", nest("{\"a\":", "1", "}", 129)),
        ("mixed 128 deep", nest("[{\"b\":2,\"a\":", "0", "}]", 64)),
        ("mixed 130 deep", nest("[{\"b\":2,\"a\":", "0", "}]", 65)),
        ("hostile 100000 deep", "[{\"a\":".repeat(100_000).into_bytes()),
        ("closed 100000 deep", nest("[", "", "]", 100_000)),
        ("string of 1 MiB", format!("\"{}\"", "x\\u00e9".repeat(1 << 17)).into_bytes()),
        ("object of 100000 members reversed", members(100_000)),
        (
            "array of 100000 numbers",
            format!("[{}]", (0..100_000).map(|i| format!("{i}.{i}e-{i}")).collect::<Vec<_>>().join(" , "))
                .into_bytes(),
        ),
        ("number of 10000 digits", "9".repeat(10_000).into_bytes()),
        (
            "10000 duplicate members",
            format!("{{{}}}", (0..10_000).map(|i| format!("\"d\":{i}")).collect::<Vec<_>>().join(","))
                .into_bytes(),
        ),
        (
            "10000 lookalike members",
            format!(
                "{{{}}}",
                (0..10_000)
                    .map(|i| format!("\"{}\":{i}", if i % 2 == 0 { "Id" } else { "iD" }))
                    .collect::<Vec<_>>()
                    .join(",")
            )
            .into_bytes(),
        ),
    ]
}

fn escaped(bytes: &[u8]) -> String {
    bytes.iter().flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect()
}

fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Large and deep inputs: the SHA-256 and length of their canonical bytes.
#[rustfmt::skip]
const KNOWN_GENERATED: &[(&str, Option<(&str, usize)>)] = &[
    ("arrays 127 deep", Some(("0d0ce008686806cefb2386af80bbb495dc8279da83466a8fc0bb25faa9660142", 254))),
    ("arrays 128 deep", Some(("dbaec29ce2fb52a1a372e1da31b0d434d257fe11bebee2d31c6649710e3052a6", 256))),
    ("arrays 129 deep", None),
    ("objects 128 deep", Some(("a4908c65856c2fb1e94d6b2b55620177bd082f54d43252b9e0648f9ccd53e3fe", 769))),
    ("objects 129 deep", None),
    ("mixed 128 deep", Some(("f84601192bf4621a1cc836c13f32898dd12fcccab34f74ed79dab9d39e35c355", 897))),
    ("mixed 130 deep", None),
    ("hostile 100000 deep", None),
    ("closed 100000 deep", None),
    ("string of 1 MiB", Some(("fdb5ed9f01284c1bf937a0b33695928baa9880b5ba56796d03015413acb2e2db", 917506))),
    ("object of 100000 members reversed", Some(("dbab31ace02352126cf650cb926a0f58696bee9aac873aa0dc2d4fbe89afa6df", 1588891))),
    ("array of 100000 numbers", Some(("4f584575a62074873335bc4603bc0bae17970be10909857d39fb3bc3210967ca", 1866671))),
    ("number of 10000 digits", Some(("4dcfea979eec78559727a01d277f696c73a5df69e834d6dc046d02a0eb15dd9f", 10000))),
    ("10000 duplicate members", Some(("a56b3ae805862e10e921792e713f22bf52d7481a53d1fc6e87e8b3fc3185c741", 88891))),
    ("10000 lookalike members", Some(("53e16dfa9e5c1f6f2aa70ca59fd8f720ee5d4e5a4819d2f2e0667173d300aa89", 98891))),
];

#[test]
fn canonical_forms_are_as_recorded() {
    for &(input, expected) in KNOWN {
        let got = canonicalize(input);
        assert_eq!(got.as_deref().map(escaped), expected.map(escaped), "input b\"{}\"", escaped(input));
    }
}

#[test]
fn large_and_deep_canonical_forms_are_as_recorded() {
    let generated = generated();
    assert_eq!(generated.len(), KNOWN_GENERATED.len());
    for ((name, input), &(known_name, expected)) in generated.iter().zip(KNOWN_GENERATED) {
        assert_eq!(*name, known_name);
        let got = canonicalize(input).map(|out| (digest(&out), out.len()));
        assert_eq!(got, expected.map(|(hash, len)| (hash.to_owned(), len)), "{name}");
    }
}
