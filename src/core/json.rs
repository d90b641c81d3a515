//! JSON values: a strict RFC 8259 parser and a compact writer, for the few JSON documents
//! the worker reads and writes itself (the `ROUTES` setting, JWT headers and claims, JWKS,
//! `STORAGE_ENCRYPTION_KEYS`, the admin API's lookup body and answers, outcome messages).
//!
//! Owns the reading and writing of those values only; request bodies are read by
//! `canonical_json`, which never builds a value. It replaces `serde_json` so that the Wasm
//! links neither serde_json nor serde's generic code, and it reads exactly what
//! `serde_json::from_slice::<serde_json::Value>` reads (the tests compare the two):
//!
//! 1. The whole input is one value with optional whitespace (space, tab, CR, LF) around
//!    it; anything after it is an error. Strings are UTF-8 without raw control characters
//!    and with valid escapes; a `\u` escape of a surrogate must be a high one followed by
//!    a low one. Numbers have no leading zeros, no `+`, no bare `.`.
//! 2. Arrays and objects nest at most 127 deep (serde_json's recursion limit of 128), so
//!    a hostile document cannot exhaust the stack.
//! 3. An object keeps the last value of a key written twice, and iterates its keys sorted
//!    (as serde_json's `Map` without `preserve_order`, a `BTreeMap`). Claims such as
//!    `exp` therefore read as every other serde_json-based JWT library reads them.
//! 4. A number is a `u64` when written as a whole number that fits, an `i64` when a
//!    negative whole number fits, else an `f64` computed as serde_json computes it
//!    (without its `float_roundtrip` feature), including `-0` as `-0.0`; a number too
//!    large for an `f64` is an error.
//! 5. Written JSON is compact, keys sorted, strings escaped as serde_json escapes them
//!    (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, other control characters as `\u00XX`,
//!    everything else as is), so answers stay byte-identical.
//!
//! An error names the rule broken and where (line and column), never the input's text:
//! the parsed documents hold secrets (keys, tokens).

use std::cmp::Ordering;
use std::fmt;

/// An object's members, keys sorted and unique: a sorted list, not a `BTreeMap`, whose
/// tree code was about 6 KB of the Wasm (issue 23, size) for objects of a few members.
///
/// A parsed object is built from its members as written, sorted once ([`Map::from_written`]:
/// at most n·log n comparisons, so a hostile token with many claims costs no more than a
/// tree would); [`Map::insert`] is for the few members the worker sets itself, since each
/// one moves the members after it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Map {
    members: Vec<(String, Value)>,
}

impl Map {
    pub fn new() -> Map {
        Map::default()
    }

    /// The object of `members` in written order: sorted by key (stably), and of a key
    /// written twice the last value kept (rule 3).
    pub fn from_written(mut members: Vec<(String, Value)>) -> Map {
        members.sort_by(|a, b| a.0.cmp(&b.0));
        let mut unique: Vec<(String, Value)> = Vec::with_capacity(members.len());
        for member in members {
            match unique.last_mut() {
                Some(last) if last.0 == member.0 => *last = member,
                _ => unique.push(member),
            }
        }
        Map { members: unique }
    }

    /// Sets `key` to `value`; the value it replaces, if any.
    pub fn insert(&mut self, key: String, value: Value) -> Option<Value> {
        match self.position(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.members[at].1, value)),
            Err(at) => {
                self.members.insert(at, (key, value));
                None
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.position(key).ok().map(|at| &self.members[at].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members, keys in order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.members.iter().map(|(key, value)| (key, value))
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.members.iter().map(|(key, _)| key)
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.members.binary_search_by(|(member, _)| member.as_str().cmp(key))
    }
}

/// `map["key"]`, as for a `BTreeMap`: panics when the key is missing.
impl std::ops::Index<&str> for Map {
    type Output = Value;
    fn index(&self, key: &str) -> &Value {
        self.get(key).expect("no such member")
    }
}

impl FromIterator<(String, Value)> for Map {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(members: I) -> Map {
        Map::from_written(members.into_iter().collect())
    }
}

/// serde_json's default recursion limit: a value nested this deep is refused.
const DEPTH_LIMIT: u8 = 128;

/// A JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Value>),
    Object(Map),
}

/// A JSON number, kept as serde_json keeps it (see rule 4): `1` and `1.0` differ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Number(N);

#[derive(Clone, Copy, Debug, PartialEq)]
enum N {
    PosInt(u64),
    /// Always below zero.
    NegInt(i64),
    /// Always finite.
    Float(f64),
}

impl Number {
    pub fn is_u64(&self) -> bool {
        matches!(self.0, N::PosInt(_))
    }

    pub fn is_i64(&self) -> bool {
        match self.0 {
            N::PosInt(n) => n <= i64::MAX as u64,
            N::NegInt(_) => true,
            N::Float(_) => false,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self.0 {
            N::PosInt(n) => Some(n),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self.0 {
            N::PosInt(n) => i64::try_from(n).ok(),
            N::NegInt(n) => Some(n),
            N::Float(_) => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        Some(match self.0 {
            N::PosInt(n) => n as f64,
            N::NegInt(n) => n as f64,
            N::Float(f) => f,
        })
    }
}

impl fmt::Display for Number {
    /// As serde_json writes it: integers in decimal, an `f64` in its shortest round-trip
    /// digits, in positional form for decimal exponents from -5 to 15 (with `.0` on a
    /// whole number), else `1.5e-7`, `1e+16`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            N::PosInt(n) => write!(f, "{n}"),
            N::NegInt(n) => write!(f, "{n}"),
            N::Float(x) => f.write_str(&format_f64(x)),
        }
    }
}

/// An `f64` as serde_json (zmij) formats a finite one: the shortest digits that read back
/// as the same `f64`, the nearest such (an even last digit on a tie), in serde_json's
/// layout.
///
/// The digits come from integer arithmetic on the exact binary value ([`Scaled`]), never
/// from Rust's float formatter (Grisu and Dragon4, about 10 KB of the Wasm gzipped) nor its
/// float parser (about 15 KB, with its tables of powers of five): the worker writes no
/// float of its own, a float only comes from parsing a body.
fn format_f64(x: f64) -> String {
    let (digits, exponent) = shortest_digits(x.abs());
    let length = digits.len() as i32;
    let mut out = String::with_capacity(length as usize + 8);
    if x.is_sign_negative() {
        out.push('-');
    }
    if (-5..=15).contains(&exponent) {
        if length - 1 <= exponent {
            // 1234e7 -> 12340000000.0
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', (exponent + 1 - length) as usize));
            out.push_str(".0");
        } else if exponent >= 0 {
            // 1234e-2 -> 12.34
            let (whole, fraction) = digits.split_at(exponent as usize + 1);
            out.push_str(whole);
            out.push('.');
            out.push_str(fraction);
        } else {
            // 1234e-6 -> 0.001234
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exponent - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        // 1234e30 -> 1.234e+33
        out.push_str(&digits[..1]);
        if length > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        if exponent >= 0 {
            out.push('+');
        }
        out.push_str(&exponent.to_string());
    }
    out
}

/// `value × 10^unit` for an 18-digit integer `value`: the unit in which [`shortest_digits`]
/// compares `x`, its candidates and the bounds of what reads back as `x`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Scaled {
    /// `⌊v / 10^unit⌋` of the exact value `v`.
    whole: u64,
    /// Whether anything below the unit was cut off (`v` is not a whole number of units).
    cut: bool,
}

impl Scaled {
    /// `mantissa × 2^binary` in units of `10^unit`; the quotient must fit 64 bits.
    fn of(mantissa: u64, binary: i32, unit: i32) -> Scaled {
        let mut n = Big::from(mantissa);
        let (twos, fives) = (binary - unit, -unit);
        if fives > 0 {
            n.multiply_by_power_of_five(fives.unsigned_abs());
        }
        if twos > 0 {
            n.shift_left(twos.unsigned_abs());
        }
        // ⌊⌊n / a⌋ / b⌋ is ⌊n / ab⌋, and the quotient is whole only if both steps were.
        let mut cut = false;
        if fives < 0 {
            cut |= n.divide_by_power_of_five(fives.unsigned_abs());
        }
        if twos < 0 {
            cut |= n.shift_right(twos.unsigned_abs());
        }
        Scaled { whole: n.low_u64(), cut }
    }

    /// How the whole number `units` (in the same unit) compares with this value.
    fn order(self, units: u64) -> Ordering {
        units.cmp(&self.whole).then(if self.cut { Ordering::Less } else { Ordering::Equal })
    }
}

/// The decimals that read as one finite, positive `f64` under correct rounding, as
/// `str::parse::<f64>` reads: those strictly between the midpoints to its two neighbours,
/// and the midpoints themselves when its mantissa is even (a tie reads as the even
/// neighbour).
#[derive(Debug)]
struct ReadsBack {
    below: Scaled,
    above: Scaled,
    ties: bool,
}

impl ReadsBack {
    fn of(mantissa: u64, binary: i32, unit: i32) -> ReadsBack {
        // Above a power of two (not the least normal), the neighbour below is half as far.
        let closer_below = mantissa == 1 << 52 && binary > -1074;
        let below = if closer_below {
            Scaled::of(4 * mantissa - 1, binary - 2, unit)
        } else {
            Scaled::of(2 * mantissa - 1, binary - 1, unit)
        };
        let above = Scaled::of(2 * mantissa + 1, binary - 1, unit);
        ReadsBack { below, above, ties: mantissa % 2 == 0 }
    }

    /// Whether `units` (a whole number of the unit this was made in) reads as the `f64`.
    fn contains(&self, units: u64) -> bool {
        match (self.below.order(units), self.above.order(units)) {
            (Ordering::Greater, Ordering::Less) => true,
            (Ordering::Equal, _) | (_, Ordering::Equal) => self.ties,
            _ => false,
        }
    }
}

/// `x` (finite, positive) as `mantissa × 2^binary`, the mantissa with its hidden bit.
fn binary_parts(x: f64) -> (u64, i32) {
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    match biased {
        0 => (fraction, -1074),
        _ => (fraction | (1 << 52), biased - 1075),
    }
}

/// 10^18: [`shortest_digits`] scales `x` to 18 digits, one past the 17 that always read back.
const EIGHTEEN_DIGITS: u64 = 1_000_000_000_000_000_000;

/// `x` (finite, positive) in the unit that gives it 18 digits before the point, and that
/// unit's exponent.
fn eighteen_digits(mantissa: u64, binary: i32) -> (Scaled, i32) {
    // ⌊log10 x⌋ estimated from x's top bit, as ⌊e × 78913 / 2^18⌋ for 2^e; the loop
    // corrects the estimate, a step at a time (one too low still fits 64 bits: below 10^19).
    // The test of every binade's edges runs each estimate there is.
    let top_bit = binary + 63 - mantissa.leading_zeros() as i32;
    let mut unit = ((i64::from(top_bit) * 78_913) >> 18) as i32 - 17;
    loop {
        let scaled = Scaled::of(mantissa, binary, unit);
        if scaled.whole >= EIGHTEEN_DIGITS {
            unit += 1;
        } else if scaled.whole < EIGHTEEN_DIGITS / 10 {
            unit -= 1;
        } else {
            return (scaled, unit);
        }
    }
}

/// The shortest significant digits of `x` (finite, not negative) that read back as `x`,
/// and the decimal exponent of the first (`d.ddd × 10^exponent`). Of two candidates of one
/// length, the nearer is tried first, and on a tie the even one, as serde_json chooses.
fn shortest_digits(x: f64) -> (String, i32) {
    if x == 0.0 {
        return ("0".to_owned(), 0);
    }
    let (mantissa, binary) = binary_parts(x);
    let (exact, unit) = eighteen_digits(mantissa, binary);
    let reads_back = ReadsBack::of(mantissa, binary, unit);
    let mut step = EIGHTEEN_DIGITS;
    // 17 significant digits always read back, so a candidate is found by then.
    let mut chosen = exact.whole;
    for _length in 1..=17 {
        step /= 10;
        let down = exact.whole - exact.whole % step;
        let rest = exact.whole % step;
        let half = step / 2;
        let tie = rest == half && !exact.cut;
        let down_first = if tie { (down / step) % 2 == 0 } else { rest < half };
        let up = down + step;
        let (nearer, farther) = if down_first { (down, up) } else { (up, down) };
        if let Some(found) = [nearer, farther].into_iter().find(|&units| reads_back.contains(units)) {
            chosen = found;
            break;
        }
    }
    let text = chosen.to_string();
    let exponent = unit + text.len() as i32 - 1;
    (text.trim_end_matches('0').to_owned(), exponent)
}

/// A non-negative integer in binary, 32 bits a limb, least significant first: just the
/// arithmetic [`Scaled`] needs.
struct Big(Vec<u32>);

impl From<u64> for Big {
    fn from(n: u64) -> Big {
        Big(vec![n as u32, (n >> 32) as u32])
    }
}

impl Big {
    /// 5^13, the largest power of five in a limb.
    const FIVES_IN_A_LIMB: (u32, u32) = (13, 1_220_703_125);

    fn multiply_by_power_of_five(&mut self, mut exponent: u32) {
        while exponent > 0 {
            let this = exponent.min(Self::FIVES_IN_A_LIMB.0);
            let factor = u64::from(5u32.pow(this));
            let mut carry = 0u64;
            for limb in &mut self.0 {
                let product = u64::from(*limb) * factor + carry;
                *limb = product as u32;
                carry = product >> 32;
            }
            if carry > 0 {
                self.0.push(carry as u32);
            }
            exponent -= this;
        }
    }

    /// Divides by `5^exponent`, rounding down; whether anything was cut.
    fn divide_by_power_of_five(&mut self, mut exponent: u32) -> bool {
        let mut cut = false;
        while exponent > 0 {
            let this = exponent.min(Self::FIVES_IN_A_LIMB.0);
            let divisor = u64::from(5u32.pow(this));
            let mut remainder = 0u64;
            for limb in self.0.iter_mut().rev() {
                let current = (remainder << 32) | u64::from(*limb);
                *limb = (current / divisor) as u32;
                remainder = current % divisor;
            }
            cut |= remainder != 0;
            while self.0.last() == Some(&0) {
                self.0.pop();
            }
            exponent -= this;
        }
        cut
    }

    fn shift_left(&mut self, bits: u32) {
        let (limbs, bits) = ((bits / 32) as usize, bits % 32);
        if bits > 0 {
            let mut carry = 0u32;
            for limb in &mut self.0 {
                let next = *limb >> (32 - bits);
                *limb = (*limb << bits) | carry;
                carry = next;
            }
            if carry > 0 {
                self.0.push(carry);
            }
        }
        self.0.splice(0..0, std::iter::repeat_n(0, limbs));
    }

    /// Divides by `2^bits`, rounding down; whether anything was cut.
    fn shift_right(&mut self, bits: u32) -> bool {
        let (limbs, bits) = ((bits / 32) as usize, bits % 32);
        if limbs >= self.0.len() {
            let cut = self.0.iter().any(|&limb| limb != 0);
            self.0.clear();
            return cut;
        }
        let mut cut = self.0.drain(..limbs).any(|limb| limb != 0);
        if bits > 0 {
            cut |= self.0[0] & ((1 << bits) - 1) != 0;
            let mut carry = 0u32;
            for limb in self.0.iter_mut().rev() {
                let next = *limb << (32 - bits);
                *limb = (*limb >> bits) | carry;
                carry = next;
            }
        }
        cut
    }

    /// The number of bits up to the highest one set.
    fn bit_length(&self) -> u32 {
        let top = self.0.iter().rposition(|&limb| limb != 0).unwrap_or(0);
        let limb = self.0.get(top).copied().unwrap_or(0);
        top as u32 * 32 + (32 - limb.leading_zeros())
    }

    /// The value, which the caller knows fits 64 bits.
    fn low_u64(&self) -> u64 {
        debug_assert!(self.0.iter().skip(2).all(|&limb| limb == 0), "a scaled value fits 64 bits");
        let limb = |i: usize| u64::from(self.0.get(i).copied().unwrap_or(0));
        limb(0) | (limb(1) << 32)
    }
}

impl Value {
    /// An object of these members (a later duplicate replaces an earlier one).
    pub fn object(members: Vec<(&str, Value)>) -> Value {
        Value::Object(Map::from_written(
            members.into_iter().map(|(key, value)| (key.to_owned(), value)).collect(),
        ))
    }

    /// Sets a member of an object; does nothing to any other value.
    pub fn insert(&mut self, key: &str, value: impl Into<Value>) {
        if let Value::Object(members) = self {
            members.insert(key.to_owned(), value.into());
        }
    }

    /// An object's member; `None` for a missing one and for any other value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_object()?.get(key)
    }

    pub fn as_object(&self) -> Option<&Map> {
        match self {
            Value::Object(members) => Some(members),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Vec<Value>> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(text) => Some(text),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn is_string(&self) -> bool {
        matches!(self, Value::String(_))
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(n) => n.as_i64(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => n.as_f64(),
            _ => None,
        }
    }
}

static NULL: Value = Value::Null;

/// `value["key"]`: the member, or `null` when missing or not an object (as serde_json).
impl std::ops::Index<&str> for Value {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        self.get(key).unwrap_or(&NULL)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Value {
        Value::Number(Number(N::PosInt(n)))
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Value {
        Value::from(u64::from(n))
    }
}

impl From<u16> for Value {
    fn from(n: u16) -> Value {
        Value::from(u64::from(n))
    }
}

impl From<usize> for Value {
    fn from(n: usize) -> Value {
        Value::from(n as u64)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::Number(Number(if n < 0 { N::NegInt(n) } else { N::PosInt(n as u64) }))
    }
}

/// A finite `f64`; anything else is `null`, as serde_json makes it.
impl From<f64> for Value {
    fn from(x: f64) -> Value {
        if x.is_finite() {
            Value::Number(Number(N::Float(x)))
        } else {
            Value::Null
        }
    }
}

impl From<&str> for Value {
    fn from(text: &str) -> Value {
        Value::String(text.to_owned())
    }
}

impl From<String> for Value {
    fn from(text: String) -> Value {
        Value::String(text)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(value: Option<T>) -> Value {
        value.map_or(Value::Null, Into::into)
    }
}

impl From<Map> for Value {
    fn from(members: Map) -> Value {
        Value::Object(members)
    }
}

/// Compact JSON, keys sorted (`to_string()` is the text serde_json writes).
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        write_value(&mut out, self);
        f.write_str(&out)
    }
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(text) => write_string(out, text),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (i, (key, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// `text` as a JSON string literal: how an error message quotes a value it was given, with
/// control characters escaped. (Rust's `{:?}` would quote it much the same, but its
/// formatting code, Unicode tables included, would then be in the Wasm for a few messages.)
pub fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    write_string(&mut out, text);
    out
}

/// A JSON string literal, escaped as serde_json escapes it.
pub fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => {
                out.push_str("\\u00");
                super::hex::push(out, c as u8);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Why a text is not JSON: the rule broken and where. Never the text itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    what: &'static str,
    line: usize,
    column: usize,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at line {} column {}", self.what, self.line, self.column)
    }
}

/// Parses one JSON value (rules 1 to 4).
pub fn parse(bytes: &[u8]) -> Result<Value, Error> {
    let mut parser = Parser { bytes, at: 0, depth_left: DEPTH_LIMIT };
    let value = parser.value()?;
    parser.skip_whitespace();
    if parser.at < bytes.len() {
        return Err(parser.error("trailing characters"));
    }
    Ok(value)
}

/// [`parse`] for text.
pub fn parse_str(text: &str) -> Result<Value, Error> {
    parse(text.as_bytes())
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    depth_left: u8,
}

/// serde_json's check before `a * 10 + b`: whether it would pass `max`.
macro_rules! overflows {
    ($a:ident * 10 + $b:ident, $max:expr) => {
        $a >= $max / 10 && ($a > $max / 10 || $b > $max % 10)
    };
}

impl Parser<'_> {
    fn error(&self, what: &'static str) -> Error {
        let before = &self.bytes[..self.at.min(self.bytes.len())];
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let column = before.len() - before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        Error { what, line, column }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// The next byte, consumed; `None` at the end.
    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn value(&mut self) -> Result<Value, Error> {
        self.skip_whitespace();
        match self.peek() {
            None => Err(self.error("EOF while parsing a value")),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'-') => {
                self.at += 1;
                self.number(false).map(Value::Number)
            }
            Some(b'0'..=b'9') => self.number(true).map(Value::Number),
            Some(b'"') => {
                self.at += 1;
                self.string().map(Value::String)
            }
            Some(open @ (b'[' | b'{')) => {
                self.depth_left -= 1;
                if self.depth_left == 0 {
                    return Err(self.error("recursion limit exceeded"));
                }
                self.at += 1;
                let value = if open == b'[' { self.array() } else { self.object() };
                self.depth_left += 1;
                value
            }
            Some(_) => Err(self.error("expected value")),
        }
    }

    fn literal(&mut self, word: &[u8], value: Value) -> Result<Value, Error> {
        for &expected in word {
            match self.next() {
                None => return Err(self.error("EOF while parsing a value")),
                Some(byte) if byte != expected => return Err(self.error("expected ident")),
                Some(_) => {}
            }
        }
        Ok(value)
    }

    fn array(&mut self) -> Result<Value, Error> {
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_whitespace();
            match self.next() {
                Some(b',') => {}
                Some(b']') => return Ok(Value::Array(items)),
                None => return Err(self.error("EOF while parsing a list")),
                Some(_) => return Err(self.error("expected `,` or `]`")),
            }
        }
    }

    fn object(&mut self) -> Result<Value, Error> {
        // As written; sorted once at the end (`Map::from_written`).
        let mut members = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Object(Map::new()));
        }
        loop {
            self.skip_whitespace();
            match self.next() {
                Some(b'"') => {}
                None => return Err(self.error("EOF while parsing an object")),
                Some(_) => return Err(self.error("key must be a string")),
            }
            let key = self.string()?;
            self.skip_whitespace();
            match self.next() {
                Some(b':') => {}
                None => return Err(self.error("EOF while parsing an object")),
                Some(_) => return Err(self.error("expected `:`")),
            }
            let value = self.value()?;
            // The last of a key written twice wins (rule 3), in `Map::from_written`.
            members.push((key, value));
            self.skip_whitespace();
            match self.next() {
                Some(b',') => {}
                Some(b'}') => return Ok(Value::Object(Map::from_written(members))),
                None => return Err(self.error("EOF while parsing an object")),
                Some(_) => return Err(self.error("expected `,` or `}`")),
            }
        }
    }

    /// The rest of a string whose opening quote is consumed.
    fn string(&mut self) -> Result<String, Error> {
        let mut out = String::new();
        loop {
            // A run of plain bytes, copied at once once its UTF-8 is checked.
            let start = self.at;
            while let Some(byte) = self.peek() {
                if byte == b'"' || byte == b'\\' || byte < 0x20 {
                    break;
                }
                self.at += 1;
            }
            match std::str::from_utf8(&self.bytes[start..self.at]) {
                Ok(run) => out.push_str(run),
                Err(_) => return Err(self.error("invalid unicode code point")),
            }
            match self.next() {
                Some(b'"') => return Ok(out),
                Some(b'\\') => self.escape(&mut out)?,
                Some(_) => {
                    return Err(self.error("control character (\\u0000-\\u001F) found while parsing a string"))
                }
                None => return Err(self.error("EOF while parsing a string")),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), Error> {
        let c = match self.next() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => self.unicode_escape()?,
            Some(_) => return Err(self.error("invalid escape")),
            None => return Err(self.error("EOF while parsing a string")),
        };
        out.push(c);
        Ok(())
    }

    /// A `\u` escape's character: a surrogate only as a high one followed by `\u` and a
    /// low one (rule 1).
    fn unicode_escape(&mut self) -> Result<char, Error> {
        let first = self.hex4()?;
        let code = match first {
            0xDC00..=0xDFFF => return Err(self.error("lone leading surrogate in hex escape")),
            0xD800..=0xDBFF => {
                if self.next() != Some(b'\\') || self.next() != Some(b'u') {
                    return Err(self.error("unexpected end of hex escape"));
                }
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.error("lone leading surrogate in hex escape"));
                }
                0x10000 + ((u32::from(first) - 0xD800) << 10) + (u32::from(second) - 0xDC00)
            }
            code => u32::from(code),
        };
        char::from_u32(code).ok_or_else(|| self.error("invalid unicode code point"))
    }

    fn hex4(&mut self) -> Result<u16, Error> {
        let mut code = 0u16;
        for _ in 0..4 {
            let digit = match self.next() {
                Some(c) => super::hex::digit_value(c).ok_or_else(|| self.error("invalid escape"))?,
                None => return Err(self.error("EOF while parsing a string")),
            };
            code = code * 16 + u16::from(digit);
        }
        Ok(code)
    }

    /// A number whose sign, if any, is consumed: serde_json's `parse_integer` and what it
    /// calls, step for step, so that every value (and every `f64` rounding) is the same.
    fn number(&mut self, positive: bool) -> Result<Number, Error> {
        let significand = match self.next() {
            None => return Err(self.error("EOF while parsing a value")),
            Some(b'0') => {
                // One leading zero only.
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.error("invalid number"));
                }
                0
            }
            Some(c @ b'1'..=b'9') => {
                let mut significand = u64::from(c - b'0');
                while let Some(c @ b'0'..=b'9') = self.peek() {
                    let digit = u64::from(c - b'0');
                    if overflows!(significand * 10 + digit, u64::MAX) {
                        // Past u64: the further digits only raise the exponent.
                        let mut exponent = 0i32;
                        while let Some(b'0'..=b'9') = self.peek() {
                            self.at += 1;
                            exponent += 1;
                        }
                        return self.float_rest(positive, significand, exponent);
                    }
                    self.at += 1;
                    significand = significand * 10 + digit;
                }
                significand
            }
            Some(_) => return Err(self.error("invalid number")),
        };
        match self.peek() {
            Some(b'.' | b'e' | b'E') => self.float_rest(positive, significand, 0),
            _ if positive => Ok(Number(N::PosInt(significand))),
            _ => {
                let negated = (significand as i64).wrapping_neg();
                // Past i64, and `-0`, are floats.
                Ok(Number(if negated >= 0 { N::Float(-(significand as f64)) } else { N::NegInt(negated) }))
            }
        }
    }

    /// A fraction and/or an exponent, if any, after the integer digits.
    fn float_rest(&mut self, positive: bool, significand: u64, exponent: i32) -> Result<Number, Error> {
        let value = match self.peek() {
            Some(b'.') => self.decimal(positive, significand, exponent)?,
            Some(b'e' | b'E') => self.exponent(positive, significand, exponent)?,
            _ => self.float_from_parts(positive, significand, exponent)?,
        };
        Ok(Number(N::Float(value)))
    }

    fn decimal(&mut self, positive: bool, mut significand: u64, exponent_before: i32) -> Result<f64, Error> {
        self.at += 1;
        let mut exponent_after = 0i32;
        let mut digits = false;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            let digit = u64::from(c - b'0');
            digits = true;
            if overflows!(significand * 10 + digit, u64::MAX) {
                // The next digit would overflow: ignore every further one.
                while let Some(b'0'..=b'9') = self.peek() {
                    self.at += 1;
                }
                break;
            }
            self.at += 1;
            significand = significand * 10 + digit;
            exponent_after -= 1;
        }
        if !digits {
            return Err(match self.peek() {
                Some(_) => self.error("invalid number"),
                None => self.error("EOF while parsing a value"),
            });
        }
        let exponent = exponent_before + exponent_after;
        match self.peek() {
            Some(b'e' | b'E') => self.exponent(positive, significand, exponent),
            _ => self.float_from_parts(positive, significand, exponent),
        }
    }

    fn exponent(&mut self, positive: bool, significand: u64, starting: i32) -> Result<f64, Error> {
        self.at += 1;
        let positive_exponent = match self.peek() {
            Some(b'+') => {
                self.at += 1;
                true
            }
            Some(b'-') => {
                self.at += 1;
                false
            }
            _ => true,
        };
        let mut exponent = match self.next() {
            Some(c @ b'0'..=b'9') => i32::from(c - b'0'),
            Some(_) => return Err(self.error("invalid number")),
            None => return Err(self.error("EOF while parsing a value")),
        };
        while let Some(c @ b'0'..=b'9') = self.peek() {
            self.at += 1;
            let digit = i32::from(c - b'0');
            if overflows!(exponent * 10 + digit, i32::MAX) {
                // An exponent past i32: infinity is an error, the rest is zero.
                if significand != 0 && positive_exponent {
                    return Err(self.error("number out of range"));
                }
                while let Some(b'0'..=b'9') = self.peek() {
                    self.at += 1;
                }
                return Ok(if positive { 0.0 } else { -0.0 });
            }
            exponent = exponent * 10 + digit;
        }
        let exponent = if positive_exponent {
            starting.saturating_add(exponent)
        } else {
            starting.saturating_sub(exponent)
        };
        self.float_from_parts(positive, significand, exponent)
    }

    /// serde_json's `f64_from_parts` (without `float_roundtrip`): the significand scaled by
    /// a power of ten from a table, so the rounding is the same as serde_json's.
    fn float_from_parts(&self, positive: bool, significand: u64, mut exponent: i32) -> Result<f64, Error> {
        let mut f = significand as f64;
        loop {
            match power_of_ten(exponent.wrapping_abs() as usize) {
                Some(pow) => {
                    if exponent >= 0 {
                        f *= pow;
                        if f.is_infinite() {
                            return Err(self.error("number out of range"));
                        }
                    } else {
                        f /= pow;
                    }
                    break;
                }
                None => {
                    if f == 0.0 {
                        break;
                    }
                    if exponent >= 0 {
                        return Err(self.error("number out of range"));
                    }
                    f /= 1e308;
                    exponent += 308;
                }
            }
        }
        Ok(if positive { f } else { -f })
    }
}

/// 10^k as the nearest `f64` (as Rust reads the literal `1e{k}`, and as serde_json's table
/// holds it) for k up to 308; `None` above. Computed rather than tabled: the table of 309
/// powers was 2.5 KB of the Wasm that gzip barely packs, for the rare float in a document
/// the worker reads itself. 10^k is 5^k × 2^k: the top 64 bits of 5^k, rounded to an `f64`
/// by the conversion (to even), then scaled by powers of two, which is exact. The bits cut
/// below the top 64 never decide a tie for these 309 powers; the test checks every one.
fn power_of_ten(k: usize) -> Option<f64> {
    let k = u32::try_from(k).ok().filter(|&k| k <= 308)?;
    let mut five = Big::from(1);
    five.multiply_by_power_of_five(k);
    let dropped = five.bit_length().saturating_sub(64);
    five.shift_right(dropped);
    Some(five.low_u64() as f64 * 2f64.powi((dropped + k) as i32))
}

/// Tests build values with serde_json's `json!` and hand them over with this.
#[cfg(test)]
impl From<&serde_json::Value> for Value {
    fn from(value: &serde_json::Value) -> Value {
        match value {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => Value::from(u),
                (None, Some(i), _) => Value::from(i),
                (None, None, Some(f)) => Value::from(f),
                _ => unreachable!("a serde_json number is one of the three"),
            },
            serde_json::Value::String(text) => Value::String(text.clone()),
            serde_json::Value::Array(items) => Value::Array(items.iter().map(Value::from).collect()),
            serde_json::Value::Object(members) => {
                Value::Object(members.iter().map(|(key, value)| (key.clone(), Value::from(value))).collect())
            }
        }
    }
}

#[cfg(test)]
impl From<serde_json::Value> for Value {
    fn from(value: serde_json::Value) -> Value {
        Value::from(&value)
    }
}

/// Comparisons with plain values, as serde_json's `Value` has them, for the tests.
#[cfg(test)]
mod comparisons {
    use super::Value;

    impl PartialEq<str> for Value {
        fn eq(&self, other: &str) -> bool {
            self.as_str() == Some(other)
        }
    }

    impl PartialEq<&str> for Value {
        fn eq(&self, other: &&str) -> bool {
            self.as_str() == Some(*other)
        }
    }

    impl PartialEq<String> for Value {
        fn eq(&self, other: &String) -> bool {
            self.as_str() == Some(other.as_str())
        }
    }

    impl PartialEq<bool> for Value {
        fn eq(&self, other: &bool) -> bool {
            self.as_bool() == Some(*other)
        }
    }

    macro_rules! numeric {
        ($($ty:ty => $as:ident as $wide:ty),*) => {$(
            impl PartialEq<$ty> for Value {
                fn eq(&self, other: &$ty) -> bool {
                    self.$as() == Some(*other as $wide)
                }
            }
        )*};
    }
    numeric!(i32 => as_i64 as i64, i64 => as_i64 as i64, u16 => as_u64 as u64, u32 => as_u64 as u64,
        u64 => as_u64 as u64, usize => as_u64 as u64, f64 => as_f64 as f64);

    impl PartialEq<serde_json::Value> for Value {
        // Tests only: converting first is the simple way, and exact.
        #[allow(clippy::cmp_owned)]
        fn eq(&self, other: &serde_json::Value) -> bool {
            *self == Value::from(other)
        }
    }
}

#[cfg(test)]
mod tests;
