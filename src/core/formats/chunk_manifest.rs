//! The manifest of a chunked answer, as the key's record carries it (record extension tag
//! 4): the body's length, the chunk length, the attempt whose rows they are, and the
//! SHA-256 of every stored row in order. Its own encoding, versioned; the chunking rules
//! (the plan, what each sealed chunk is bound to) are `core::formats::chunks`'.

use std::ops::Range;

use crate::core::primitives::codec::{Reader, Writer};

/// Most chunks a manifest may name: 64 MiB (the most `MAX_STORED_RESPONSE_BYTES` may be)
/// in 1 MiB chunks, with room to spare. A forged count larger than this is refused before
/// anything is allocated.
pub const MAX_CHUNKS: usize = 128;

/// The manifest's own encoding version.
const MANIFEST_V1: u8 = 1;

/// A SHA-256 digest of one stored chunk row.
pub type RowDigest = [u8; 32];

/// How an answer's body is chunked, as the record says (extension tag 4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkManifest {
    /// The body's length in bytes.
    pub body_len: u64,
    /// Body bytes per chunk (the last one may be shorter).
    pub chunk_len: u32,
    /// The attempt whose answer the rows hold (binds sealed chunks to this record).
    pub attempt: u64,
    /// SHA-256 of each stored row, in order: one per chunk.
    pub digests: Vec<RowDigest>,
}

impl ChunkManifest {
    pub fn count(&self) -> usize {
        self.digests.len()
    }

    /// The body range chunk `index` holds.
    pub fn range(&self, index: usize) -> Range<u64> {
        let start = index as u64 * u64::from(self.chunk_len);
        start.min(self.body_len)..(start + u64::from(self.chunk_len)).min(self.body_len)
    }

    /// `version (1) ‖ body_len (u64) ‖ chunk_len (u32) ‖ attempt (u64) ‖ count (u32) ‖ digests`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Writer::with_capacity(25 + 32 * self.digests.len());
        out.u8(MANIFEST_V1);
        out.u64(self.body_len);
        out.u32(self.chunk_len);
        out.u64(self.attempt);
        out.count(self.digests.len());
        for digest in &self.digests {
            out.raw(digest);
        }
        out.into_bytes()
    }

    /// The inverse of [`ChunkManifest::encode`]. Refuses anything inconsistent: a chunk
    /// count that does not match the lengths or the digests that follow, no chunk at all,
    /// or too many.
    pub fn decode(bytes: &[u8]) -> Option<ChunkManifest> {
        let mut input = Reader::new(bytes);
        if input.u8().ok()? != MANIFEST_V1 {
            return None;
        }
        let body_len = input.u64().ok()?;
        let chunk_len = input.u32().ok()?;
        let attempt = input.u64().ok()?;
        // More digests than the bytes left hold is refused before anything is allocated.
        let count = input.count(size_of::<RowDigest>()).ok()?;
        if chunk_len == 0 || count == 0 || count > MAX_CHUNKS {
            return None;
        }
        if body_len.div_ceil(u64::from(chunk_len)) != count as u64 {
            return None;
        }
        let digests = (0..count).map(|_| input.array()).collect::<Result<Vec<RowDigest>, _>>().ok()?;
        input.finish().ok()?;
        Some(ChunkManifest { body_len, chunk_len, attempt, digests })
    }
}
