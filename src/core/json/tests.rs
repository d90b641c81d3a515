use proptest::prelude::*;

use super::*;

fn ours(text: &str) -> Result<Value, Error> {
    parse_str(text)
}

/// serde_json's reading of the same bytes, in our type.
fn theirs(bytes: &[u8]) -> Option<Value> {
    serde_json::from_slice::<serde_json::Value>(bytes).ok().map(Value::from)
}

#[test]
fn values_round_trip_through_text() {
    for text in [
        "null",
        "true",
        "false",
        "0",
        "-1",
        "18446744073709551615",
        "1.5",
        "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\u{7f}é😀\"",
        "[]",
        "{}",
        "[1,[2,{\"a\":[]}],\"x\"]",
        "{\"a\":1,\"b\":{\"c\":null},\"d\":[true,false]}",
    ] {
        let value = ours(text).unwrap();
        assert_eq!(value.to_string(), text, "written back as read");
        assert_eq!(ours(&value.to_string()).unwrap(), value);
    }
}

#[test]
fn written_text_is_serde_jsons() {
    let text = r#" { "z" : [ 1 , -2 , 3.25e2 , "\u00e9\u0000\/" ] , "a" : { "y" : null , "b" : false } } "#;
    let value = ours(text).unwrap();
    let serde: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(value.to_string(), serde.to_string());
    assert_eq!(value.to_string(), r#"{"a":{"b":false,"y":null},"z":[1,-2,325.0,"é\u0000/"]}"#);
}

#[test]
fn strict_rfc_8259_only() {
    for bad in [
        "",
        " ",
        "nul",
        "nulll",
        "True",
        "01",
        "-01",
        "00",
        "+1",
        "-",
        ".5",
        "1.",
        "1.e3",
        "1e",
        "1e+",
        "1E-",
        "0x10",
        "Infinity",
        "NaN",
        "-Infinity",
        "1e309",
        "-1e400",
        "1 2",
        "{} x",
        "[1,]",
        "[,1]",
        "[1 2]",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{a:1}",
        "{'a':1}",
        "{\"a\":1",
        "[1",
        "\"abc",
        "\"a\u{1}b\"",
        "\"a\nb\"",
        "\"a\tb\"",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\u12g4\"",
        "\"\\ud800\"",
        "\"\\ud800x\"",
        "\"\\ud800\\n\"",
        "\"\\ud800\\u0041\"",
        "\"\\udc00\"",
        "\"\\udc00\\ud800\"",
        "/* c */ 1",
        "[1] // c",
        "\u{feff}1",
        "\u{a0}1",
        "\x0b1",
    ] {
        assert!(ours(bad).is_err(), "{bad:?} was accepted");
        assert!(theirs(bad.as_bytes()).is_none(), "serde_json accepts {bad:?}");
    }
    // Not UTF-8, inside a string and out.
    for bad in [&b"\"\xff\""[..], b"\"\xc3\"", b"\"\xed\xa0\x80\"", b"\xff", b"[\"\xe9\"]"] {
        assert!(parse(bad).is_err(), "{bad:?} was accepted");
        assert!(theirs(bad).is_none());
    }
    for good in
        ["\"\\ud83d\\ude00\"", "\"\\uD83D\\uDE00\"", " \t\r\n1 \t\r\n", "-0", "0e0", "1E+2", "\"\u{7f}\""]
    {
        assert!(ours(good).is_ok(), "{good:?} was refused");
        assert_eq!(ours(good).ok(), theirs(good.as_bytes()), "{good:?}");
    }
    assert_eq!(ours("\"\\ud83d\\ude00\"").unwrap(), Value::from("😀"));
}

#[test]
fn an_error_names_the_rule_and_where_never_the_text() {
    let error = ours("{\"secret\": \"hunter2\" x}").unwrap_err().to_string();
    assert_eq!(error, "expected `,` or `}` at line 1 column 22");
    assert!(!error.contains("hunter2"));
    assert_eq!(ours("[\n1,\n]").unwrap_err().to_string(), "expected value at line 3 column 0");
    assert_eq!(ours("").unwrap_err().to_string(), "EOF while parsing a value at line 1 column 0");
}

#[test]
fn the_last_of_a_duplicated_key_wins() {
    let value = ours(r#"{"exp": 1, "b": 0, "exp": 2}"#).unwrap();
    assert_eq!(value["exp"].as_u64(), Some(2));
    assert_eq!(value.as_object().unwrap().len(), 2);
    assert_eq!(value, theirs(br#"{"exp": 1, "b": 0, "exp": 2}"#).unwrap());
    let value = ours(r#"{"b":1,"a":2,"c":3,"a":4}"#).unwrap();
    let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["a", "b", "c"], "keys iterate sorted");
}

#[test]
fn numbers_are_classified_as_serde_json_classifies_them() {
    let number = |text: &str| match ours(text).unwrap() {
        Value::Number(n) => n,
        other => panic!("{other:?}"),
    };
    let cases: [(&str, Option<u64>, Option<i64>, f64); 14] = [
        ("0", Some(0), Some(0), 0.0),
        ("42", Some(42), Some(42), 42.0),
        ("18446744073709551615", Some(u64::MAX), None, u64::MAX as f64),
        ("18446744073709551616", None, None, 18446744073709551616.0),
        ("9223372036854775807", Some(i64::MAX as u64), Some(i64::MAX), i64::MAX as f64),
        ("-1", None, Some(-1), -1.0),
        ("-9223372036854775808", None, Some(i64::MIN), i64::MIN as f64),
        ("-9223372036854775809", None, None, -9223372036854775809.0),
        ("-0", None, None, -0.0),
        ("1.0", None, None, 1.0),
        ("1e3", None, None, 1000.0),
        ("1.5e-3", None, None, 0.0015),
        ("123456789012345678901234567890", None, None, 1.2345678901234568e29),
        ("563000000000000.2", None, None, 563_000_000_000_000.0 + 0.25),
    ];
    for (text, as_u64, as_i64, as_f64) in cases {
        let n = number(text);
        let serde: serde_json::Number = serde_json::from_str(text).unwrap();
        assert_eq!((n.as_u64(), n.as_i64(), n.as_f64()), (as_u64, as_i64, Some(as_f64)), "{text}");
        assert_eq!((n.as_u64(), n.as_i64()), (serde.as_u64(), serde.as_i64()), "{text}");
        assert_eq!(n.as_f64().map(f64::to_bits), serde.as_f64().map(f64::to_bits), "{text}");
        assert_eq!((n.is_u64(), n.is_i64()), (serde.is_u64(), serde.is_i64()), "{text}");
        assert_eq!(n.to_string(), serde.to_string(), "{text}");
    }
}

#[test]
fn nesting_stops_where_serde_jsons_does() {
    for (open, inner, close) in [("[", "", "]"), ("{\"a\":", "1", "}")] {
        let nested = |depth: usize| format!("{}{inner}{}", open.repeat(depth), close.repeat(depth));
        assert!(ours(&nested(127)).is_ok(), "127 deep");
        assert!(theirs(nested(127).as_bytes()).is_some());
        assert_eq!(ours(&nested(128)).unwrap_err().what, "recursion limit exceeded");
        assert!(theirs(nested(128).as_bytes()).is_none());
    }
    // Siblings do not add up: only nesting counts.
    let siblings = format!("[{}]", vec![format!("{}{}", "[".repeat(100), "]".repeat(100)); 50].join(","));
    assert!(ours(&siblings).is_ok());
}

#[test]
fn built_objects_write_sorted_keys_and_null_for_none() {
    let mut value = Value::object(vec![("b", Value::from(1u64)), ("a", Value::from(None::<u64>))]);
    value.insert("c", "x\u{1}");
    value.insert("a", true);
    assert_eq!(value.to_string(), r#"{"a":true,"b":1,"c":"x\u0001"}"#);
    assert_eq!(Value::from(f64::NAN), Value::Null);
    assert_eq!(Value::from(-3i64).to_string(), "-3");
    assert_eq!(value["missing"], Value::Null);
    assert_eq!(Value::Null["a"], Value::Null);
}

#[test]
fn powers_of_two_and_their_neighbours_write_as_serde_json_writes_them() {
    // Where the f64s below are twice as dense as above, the shortest decimal is not
    // always the nearest one.
    let normal = (1u64..2047).map(|exponent| exponent << 52);
    let subnormal = (0..52).map(|bit| 1u64 << bit);
    for bits in normal.chain(subnormal) {
        for x in [f64::from_bits(bits), f64::from_bits(bits + 1), f64::from_bits(bits - 1)] {
            assert_eq!(Value::from(x).to_string(), serde_json::Value::from(x).to_string(), "{x:e}");
        }
    }
    for x in
        [0.0, -0.0, f64::MIN_POSITIVE, f64::MAX, f64::MIN, 5e-324, 0.1, 1e15, 1e16, 1e-5, 1e-6, 123456.789]
    {
        assert_eq!(Value::from(x).to_string(), serde_json::Value::from(x).to_string(), "{x:e}");
    }
}

/// Generated JSON, written by serde_json in its compact and pretty forms.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "[a-c\\\\\"\u{0}-\u{1f}é😀\u{7f}]{0,6}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::vec(("[a-d]{0,2}", inner), 0..6)
                .prop_map(|members| serde_json::Value::Object(members.into_iter().collect())),
        ]
    })
}

/// Bytes that look like JSON: its punctuation, digits, escapes and a few wrong things.
fn jsonish_bytes() -> impl Strategy<Value = Vec<u8>> {
    let pieces = prop_oneof![
        Just(&b"{"[..]),
        Just(&b"}"[..]),
        Just(&b"["[..]),
        Just(&b"]"[..]),
        Just(&b","[..]),
        Just(&b":"[..]),
        Just(&b"\""[..]),
        Just(&b"\"a\""[..]),
        Just(&b"\\"[..]),
        Just(&b"\\u"[..]),
        Just(&b"d83d"[..]),
        Just(&b"de00"[..]),
        Just(&b"00e9"[..]),
        Just(&b"n"[..]),
        Just(&b"0"[..]),
        Just(&b"1"[..]),
        Just(&b"9"[..]),
        Just(&b"-"[..]),
        Just(&b"+"[..]),
        Just(&b"."[..]),
        Just(&b"e"[..]),
        Just(&b"E"[..]),
        Just(&b"99999999999999999999"[..]),
        Just(&b"e400"[..]),
        Just(&b"true"[..]),
        Just(&b"null"[..]),
        Just(&b" "[..]),
        Just(&b"\n"[..]),
        Just(&b"\x01"[..]),
        Just(&b"\xc3\xa9"[..]),
        Just(&b"\xc3"[..]),
        Just(&b"/"[..]),
    ];
    prop::collection::vec(pieces, 0..24).prop_map(|pieces| pieces.concat())
}

fn same_as_serde_json(bytes: &[u8]) -> Result<(), TestCaseError> {
    let serde = serde_json::from_slice::<serde_json::Value>(bytes).ok();
    let mine = parse(bytes).ok();
    prop_assert_eq!(mine.is_some(), serde.is_some(), "acceptance of {:?}", String::from_utf8_lossy(bytes));
    if let (Some(mine), Some(serde)) = (mine, serde) {
        prop_assert_eq!(mine.to_string(), serde.to_string());
        prop_assert_eq!(mine, Value::from(serde));
    }
    Ok(())
}

proptest! {
    #[test]
    fn generated_json_reads_and_writes_as_serde_json_does(value in json_value()) {
        same_as_serde_json(value.to_string().as_bytes())?;
        same_as_serde_json(serde_json::to_string_pretty(&value).unwrap().as_bytes())?;
        prop_assert_eq!(Value::from(&value).to_string(), value.to_string());
    }

    #[test]
    fn jsonish_bytes_are_accepted_exactly_when_serde_json_accepts_them(bytes in jsonish_bytes()) {
        same_as_serde_json(&bytes)?;
    }

    /// Objects whose members repeat keys from a small set, in any order: read as serde_json
    /// reads them (keys sorted, the last value of a repeated key kept).
    #[test]
    fn objects_with_repeated_keys_read_as_serde_json_reads_them(
        members in proptest::collection::vec(("[abc]{0,2}", any::<u8>()), 0..40),
    ) {
        let text: Vec<String> = members.iter().map(|(key, value)| format!("\"{key}\":{value}")).collect();
        same_as_serde_json(format!("{{{}}}", text.join(",")).as_bytes())?;
    }

    /// `Map::insert` and `Map::get` do what a `BTreeMap`'s do, and iterate as it does.
    #[test]
    fn a_map_built_by_inserts_is_a_btree_maps_model(
        inserts in proptest::collection::vec(("[abcd]{0,3}", any::<u8>()), 0..60),
        probes in proptest::collection::vec("[abcd]{0,3}", 0..20),
    ) {
        let mut map = Map::new();
        let mut model = std::collections::BTreeMap::new();
        for (key, value) in &inserts {
            let replaced = map.insert(key.clone(), Value::from(u64::from(*value)));
            let expected = model.insert(key.clone(), Value::from(u64::from(*value)));
            prop_assert_eq!(replaced, expected);
        }
        for key in &probes {
            prop_assert_eq!(map.get(key), model.get(key));
            prop_assert_eq!(map.contains_key(key), model.contains_key(key));
        }
        prop_assert_eq!(map.len(), model.len());
        prop_assert!(map.iter().eq(model.iter()));
        let written: Vec<(String, Value)> =
            inserts.iter().map(|(key, value)| (key.clone(), Value::from(u64::from(*value)))).collect();
        prop_assert_eq!(Map::from_written(written), map);
    }

    #[test]
    fn numbers_read_and_write_as_serde_json_does(
        whole in "-?(0|[1-9][0-9]{0,25})",
        fraction in "(\\.[0-9]{1,25})?",
        exponent in "([eE][+-]?[0-9]{1,4})?",
    ) {
        same_as_serde_json(format!("{whole}{fraction}{exponent}").as_bytes())?;
    }

    #[test]
    fn floats_write_as_serde_json_writes_them(bits in any::<u64>(), m in (1u64 << 52)..(1u64 << 53), shift in -60i32..80) {
        // Random bits, and values with few binary fraction digits, where two shortest
        // decimal forms can be equally near (563000000000000.25).
        for x in [f64::from_bits(bits), m as f64 * 2f64.powi(-shift), -(m as f64 * 2f64.powi(-shift))] {
            prop_assert_eq!(Value::from(x).to_string(), serde_json::Value::from(x).to_string());
        }
    }
}

/// What Rust's correctly rounded parser says of `units × 10^unit`.
fn parses_as(units: u64, unit: i32, x: f64) -> bool {
    format!("{units}e{unit}").parse::<f64>() == Ok(x)
}

/// `x` scaled to 18 digits is its exact decimal expansion (as Rust's formatter writes it at
/// full precision) cut after 18 digits, and the read-back test answers for every candidate
/// near the edges of `x`'s rounding interval as Rust's correctly rounded parser does: each
/// bound exactly, a unit either side, and the bounds and `x` cut short or rounded up in
/// every place, which are the candidates `shortest_digits` tries.
fn reads_back_as_rust_parses(x: f64) -> Result<(), TestCaseError> {
    let (mantissa, binary) = binary_parts(x);
    let (exact, unit) = eighteen_digits(mantissa, binary);
    let expansion = format!("{x:.1100e}");
    let (digits, _) = expansion.split_once('e').unwrap();
    let digits = digits.replace('.', "");
    prop_assert_eq!(exact.whole.to_string(), &digits[..18], "{:e}", x);
    prop_assert_eq!(exact.cut, digits[18..].bytes().any(|b| b != b'0'), "{:e}", x);
    let reads = ReadsBack::of(mantissa, binary, unit);
    let mut candidates = Vec::new();
    for base in [reads.below.whole, reads.above.whole, exact.whole] {
        candidates.extend([base.saturating_sub(1), base, base + 1]);
        let mut step = 1;
        while step < EIGHTEEN_DIGITS {
            candidates.extend([base - base % step, base - base % step + step]);
            step *= 10;
        }
    }
    for units in candidates.into_iter().filter(|&units| units > 0) {
        prop_assert_eq!(reads.contains(units), parses_as(units, unit, x), "{}e{} for {:e}", units, unit, x);
    }
    Ok(())
}

#[test]
fn the_edges_of_every_binade_read_back_as_rust_parses_them() {
    // The midpoints themselves: ties to even, the half-as-far neighbour above a power of
    // two, the least subnormal, the least normal, and the largest finite value.
    let normal = (1u64..2047).map(|exponent| exponent << 52);
    let subnormal = (0..52).map(|bit| 1u64 << bit);
    for bits in normal.chain(subnormal).chain([1, (1 << 52) - 1, 1 << 52, f64::MAX.to_bits()]) {
        for bits in [bits, bits + 1, bits.saturating_sub(1).max(1)] {
            let x = f64::from_bits(bits);
            if x.is_finite() {
                reads_back_as_rust_parses(x).unwrap();
            }
        }
    }
}

proptest! {
    #[test]
    fn the_read_back_test_agrees_with_rusts_parser(bits in 1u64..0x7ff0_0000_0000_0000, m in (1u64 << 52)..(1u64 << 53), shift in -60i32..80) {
        // Random bits, and values with few binary fraction digits, whose midpoints have few
        // decimal digits (so ties are reachable).
        reads_back_as_rust_parses(f64::from_bits(bits))?;
        reads_back_as_rust_parses(m as f64 * 2f64.powi(-shift))?;
    }
}

#[test]
fn every_power_of_ten_is_the_nearest_f64() {
    for k in 0..=308 {
        assert_eq!(power_of_ten(k), Some(format!("1e{k}").parse::<f64>().unwrap()), "1e{k}");
    }
    assert_eq!(power_of_ten(309), None);
    assert_eq!(power_of_ten(i32::MIN.wrapping_abs() as usize), None);
}

/// How error messages quote a value they were given: as a JSON string, so a control
/// character or a quote in an operator's setting (or in stored bytes) cannot break the line.
#[test]
fn quoted_is_a_json_string_literal() {
    assert_eq!(quoted("client_ts"), "\"client_ts\"");
    assert_eq!(quoted("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    assert_eq!(quoted("é"), "\"é\"");
    for text in ["", "x-key", "a\tb", "\u{7f}", "line\r\nfeed"] {
        let read: serde_json::Value = serde_json::from_str(&quoted(text)).expect("a JSON string");
        assert_eq!(read.as_str(), Some(text), "{text:?}");
    }
}
