//! The one binary codec of what the worker stores: the primitives every stored format is
//! written in, and nothing else.
//!
//! Owns how a value is spelled in bytes: integers big-endian and of fixed width; byte
//! strings and UTF-8 strings as a u32 (big-endian) length and then the bytes; fixed arrays
//! as they are; lists of string pairs (headers) as a u32 count and then the pairs. Each
//! format (`core::formats::key_record`, `core::key_rules::machine::async_job`, `core::formats::chunks`, `core::formats::seal`) owns its own
//! layout on top of these: its fields in order, its version and kind bytes, and every check
//! of what a field may hold. One spelling of each primitive, written and read in one
//! place, keeps the formats from drifting apart.
//!
//! Reading never panics, and never allocates for more than the input holds: a length or a
//! count the rest of the input cannot hold is [`CodecError::Truncated`] before anything is
//! allocated for it. A format ends with [`Reader::finish`]: a decoder that reads a whole
//! value refuses bytes after it, so that one value has one encoding.

/// Why bytes are not what the format expects, as far as the codec can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodecError {
    /// The input ends before the field does (or a count or length promises more than is
    /// left).
    Truncated,
    /// A string's bytes are not UTF-8.
    NotUtf8,
    /// Bytes are left after the value ([`Reader::finish`]).
    TrailingBytes,
}

/// Reads the primitives of a stored format from a byte slice, front to back.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, pos: 0 }
    }

    /// How many bytes are left to read.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes, as they are.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if n > self.remaining() {
            return Err(CodecError::Truncated);
        }
        let slice = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    /// Every byte left: a format's last field when it has no length of its own.
    pub fn rest(&mut self) -> &'a [u8] {
        let slice = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        slice
    }

    /// The next `N` bytes: a fixed-size field (a digest, a salt, a nonce, a magic).
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, CodecError> {
        self.array().map(u16::from_be_bytes)
    }

    pub fn u32(&mut self) -> Result<u32, CodecError> {
        self.array().map(u32::from_be_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, CodecError> {
        self.array().map(u64::from_be_bytes)
    }

    /// A u32 count of items that each take at least `min_item_len` bytes. A count the rest
    /// of the input cannot hold is refused before anything is allocated for it.
    pub fn count(&mut self, min_item_len: usize) -> Result<usize, CodecError> {
        let count = self.u32()? as usize;
        if count > self.remaining() / min_item_len {
            return Err(CodecError::Truncated);
        }
        Ok(count)
    }

    /// A byte string: its u32 length, then its bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    /// A UTF-8 string: its u32 length, then its bytes.
    pub fn string(&mut self) -> Result<String, CodecError> {
        let bytes = self.bytes()?;
        utf8(bytes)
    }

    /// A UTF-8 string of `len` bytes, whose length the format wrote in its own way.
    pub fn utf8(&mut self, len: usize) -> Result<String, CodecError> {
        let bytes = self.take(len)?;
        utf8(bytes)
    }

    /// A list of string pairs (headers): a u32 count, then each name and value as a
    /// string. Each pair takes at least its two lengths, 8 bytes.
    pub fn string_pairs(&mut self) -> Result<Vec<(String, String)>, CodecError> {
        let count = self.count(8)?;
        let mut pairs = Vec::with_capacity(count);
        for _ in 0..count {
            let name = self.string()?;
            let value = self.string()?;
            pairs.push((name, value));
        }
        Ok(pairs)
    }

    /// The value must end here: a byte after it is [`CodecError::TrailingBytes`].
    pub fn finish(&self) -> Result<(), CodecError> {
        match self.remaining() {
            0 => Ok(()),
            _ => Err(CodecError::TrailingBytes),
        }
    }
}

fn utf8(bytes: &[u8]) -> Result<String, CodecError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| CodecError::NotUtf8)
}

/// Writes the primitives of a stored format, front to back: the inverse of [`Reader`].
#[derive(Default)]
pub struct Writer {
    out: Vec<u8>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    /// A writer whose buffer holds `capacity` bytes before it grows.
    pub fn with_capacity(capacity: usize) -> Writer {
        Writer { out: Vec::with_capacity(capacity) }
    }

    /// Makes room for `additional` more bytes (a large body about to be written).
    pub fn reserve(&mut self, additional: usize) {
        self.out.reserve(additional);
    }

    /// Bytes as they are, with no length: a fixed-size field, or a format's last field.
    pub fn raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    pub fn u8(&mut self, value: u8) {
        self.out.push(value);
    }

    pub fn u16(&mut self, value: u16) {
        self.raw(&value.to_be_bytes());
    }

    pub fn u32(&mut self, value: u32) {
        self.raw(&value.to_be_bytes());
    }

    pub fn u64(&mut self, value: u64) {
        self.raw(&value.to_be_bytes());
    }

    /// A count or a length, as a u32: every stored value is bounded far below 4 GiB by the
    /// storage's 2 MB row limit.
    pub fn count(&mut self, count: usize) {
        self.u32(count as u32);
    }

    /// A byte string: its u32 length, then its bytes.
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.count(bytes.len());
        self.raw(bytes);
    }

    /// A UTF-8 string: its u32 length, then its bytes.
    pub fn string(&mut self, text: &str) {
        self.bytes(text.as_bytes());
    }

    /// A list of string pairs (headers): a u32 count, then each name and value as a string.
    pub fn string_pairs(&mut self, pairs: &[(String, String)]) {
        self.count(pairs.len());
        for (name, value) in pairs {
            self.string(name);
            self.string(value);
        }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_primitive_has_one_spelling() {
        let mut out = Writer::new();
        out.u8(0xab);
        out.u16(0x0102);
        out.u32(0x0304_0506);
        out.u64(0x0708_090a_0b0c_0d0e);
        out.raw(&[0xee; 3]);
        out.bytes(b"xy");
        out.string("é");
        out.string_pairs(&[("a".into(), "".into())]);
        let bytes = out.into_bytes();
        #[rustfmt::skip]
        let expected = [
            0xab,
            0x01, 0x02,
            0x03, 0x04, 0x05, 0x06,
            0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e,
            0xee, 0xee, 0xee,
            0, 0, 0, 2, b'x', b'y',
            0, 0, 0, 2, 0xc3, 0xa9,
            0, 0, 0, 1, 0, 0, 0, 1, b'a', 0, 0, 0, 0,
        ];
        assert_eq!(bytes, expected);

        let mut input = Reader::new(&bytes);
        assert_eq!(input.u8(), Ok(0xab));
        assert_eq!(input.u16(), Ok(0x0102));
        assert_eq!(input.u32(), Ok(0x0304_0506));
        assert_eq!(input.u64(), Ok(0x0708_090a_0b0c_0d0e));
        assert_eq!(input.array(), Ok([0xee; 3]));
        assert_eq!(input.bytes(), Ok(&b"xy"[..]));
        assert_eq!(input.string().as_deref(), Ok("é"));
        assert_eq!(input.finish(), Err(CodecError::TrailingBytes), "the pairs are left");
        assert_eq!(input.string_pairs(), Ok(vec![("a".into(), "".into())]));
        assert_eq!(input.remaining(), 0);
        assert_eq!(input.finish(), Ok(()));
    }

    #[test]
    fn short_input_is_truncated() {
        let mut input = Reader::new(&[0, 0, 0, 5, b'a']);
        assert_eq!(input.u64(), Err(CodecError::Truncated));
        assert_eq!(input.bytes(), Err(CodecError::Truncated), "a length longer than what is left");
        assert_eq!(Reader::new(&[1]).u16(), Err(CodecError::Truncated));
        assert_eq!(Reader::new(&[]).u8(), Err(CodecError::Truncated));
        let mut short = Reader::new(&[1, 2]);
        assert_eq!(short.take(3), Err(CodecError::Truncated));
        assert_eq!(short.remaining(), 2, "a refused read moves nothing");
        assert_eq!(short.rest(), &[1, 2]);
        assert_eq!((short.remaining(), short.rest()), (0, &[][..]));
    }

    #[test]
    fn strings_must_be_utf8() {
        assert_eq!(Reader::new(&[0, 0, 0, 1, 0xff]).string(), Err(CodecError::NotUtf8));
        assert_eq!(Reader::new(&[0xc3, 0xa9]).utf8(2).as_deref(), Ok("é"));
        assert_eq!(Reader::new(&[0xc3]).utf8(1), Err(CodecError::NotUtf8));
        assert_eq!(Reader::new(&[0xc3]).utf8(2), Err(CodecError::Truncated));
    }

    #[test]
    fn a_forged_count_is_refused_before_it_allocates() {
        // u32::MAX pairs of at least 8 bytes each cannot be in 8 bytes.
        let forged = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(Reader::new(&forged).string_pairs(), Err(CodecError::Truncated));
        // As many as fit is fine; one more is not.
        assert_eq!(Reader::new(&[0, 0, 0, 2, 0, 0]).count(1), Ok(2));
        assert_eq!(Reader::new(&[0, 0, 0, 3, 0, 0]).count(1), Err(CodecError::Truncated));
        assert_eq!(Reader::new(&[0, 0, 0, 1, 0, 0]).count(3), Err(CodecError::Truncated));
    }

    /// One read of a primitive, to drive a reader over arbitrary input.
    #[derive(Clone, Debug)]
    enum Read {
        U8,
        U16,
        U32,
        U64,
        Array32,
        Take(usize),
        Count(usize),
        Bytes,
        String,
        Utf8(usize),
        Pairs,
        Rest,
    }

    fn read() -> impl Strategy<Value = Read> {
        prop_oneof![
            Just(Read::U8),
            Just(Read::U16),
            Just(Read::U32),
            Just(Read::U64),
            Just(Read::Array32),
            (0usize..40).prop_map(Read::Take),
            (1usize..40).prop_map(Read::Count),
            Just(Read::Bytes),
            Just(Read::String),
            (0usize..40).prop_map(Read::Utf8),
            Just(Read::Pairs),
            Just(Read::Rest),
        ]
    }

    /// A value of one primitive, to write and read back.
    #[derive(Clone, Debug, PartialEq)]
    enum Value {
        U8(u8),
        U16(u16),
        U32(u32),
        U64(u64),
        Array32([u8; 32]),
        Bytes(Vec<u8>),
        String(String),
        Pairs(Vec<(String, String)>),
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<u8>().prop_map(Value::U8),
            any::<u16>().prop_map(Value::U16),
            any::<u32>().prop_map(Value::U32),
            any::<u64>().prop_map(Value::U64),
            any::<[u8; 32]>().prop_map(Value::Array32),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::Bytes),
            "\\PC{0,12}".prop_map(Value::String),
            proptest::collection::vec(("\\PC{0,6}", "\\PC{0,6}"), 0..4).prop_map(Value::Pairs),
        ]
    }

    proptest! {
        #[test]
        fn any_read_of_any_input_never_panics_and_never_overreads(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            reads in proptest::collection::vec(read(), 0..12),
        ) {
            let mut input = Reader::new(&bytes);
            for read in reads {
                let before = input.remaining();
                let ok = match read {
                    Read::U8 => input.u8().is_ok(),
                    Read::U16 => input.u16().is_ok(),
                    Read::U32 => input.u32().is_ok(),
                    Read::U64 => input.u64().is_ok(),
                    Read::Array32 => input.array::<32>().is_ok(),
                    Read::Take(n) => input.take(n).is_ok(),
                    Read::Count(min) => match input.count(min) {
                        Ok(count) => {
                            prop_assert!(count * min <= input.remaining(), "a count the input cannot hold");
                            true
                        }
                        Err(_) => false,
                    },
                    Read::Bytes => input.bytes().is_ok(),
                    Read::String => input.string().is_ok(),
                    Read::Utf8(n) => input.utf8(n).is_ok(),
                    Read::Pairs => input.string_pairs().is_ok(),
                    Read::Rest => { input.rest(); true }
                };
                prop_assert!(input.remaining() <= before);
                if !ok {
                    break;
                }
            }
            prop_assert_eq!(input.finish().is_ok(), input.remaining() == 0);
        }

        #[test]
        fn what_is_written_reads_back(values in proptest::collection::vec(value(), 0..12)) {
            let mut out = Writer::new();
            for value in &values {
                match value {
                    Value::U8(v) => out.u8(*v),
                    Value::U16(v) => out.u16(*v),
                    Value::U32(v) => out.u32(*v),
                    Value::U64(v) => out.u64(*v),
                    Value::Array32(v) => out.raw(v),
                    Value::Bytes(v) => out.bytes(v),
                    Value::String(v) => out.string(v),
                    Value::Pairs(v) => out.string_pairs(v),
                }
            }
            let bytes = out.into_bytes();
            let mut input = Reader::new(&bytes);
            for value in &values {
                let read = match value {
                    Value::U8(_) => Value::U8(input.u8().unwrap()),
                    Value::U16(_) => Value::U16(input.u16().unwrap()),
                    Value::U32(_) => Value::U32(input.u32().unwrap()),
                    Value::U64(_) => Value::U64(input.u64().unwrap()),
                    Value::Array32(_) => Value::Array32(input.array().unwrap()),
                    Value::Bytes(_) => Value::Bytes(input.bytes().unwrap().to_vec()),
                    Value::String(_) => Value::String(input.string().unwrap()),
                    Value::Pairs(_) => Value::Pairs(input.string_pairs().unwrap()),
                };
                prop_assert_eq!(&read, value);
            }
            prop_assert_eq!(input.finish(), Ok(()));
        }
    }
}
