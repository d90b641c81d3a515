//! SHA-256 (FIPS 180-4): the one hash the core uses, for the fingerprint, the object name,
//! HMAC (`core::hmac`), the verified-token memo and the chunk rows' digests.
//!
//! Owns the hash only. It replaces the `sha2` crate in the Wasm (issue 23, size): `sha2`'s
//! portable code unrolls the 64 rounds and brings the `digest` crate's buffering with it,
//! about 5.6 KB of code, where this loop of rounds is under a kilobyte. Every digest it
//! makes is stored (fingerprints in records, chunk digests in manifests) or compared
//! with one made elsewhere (origin signatures, keyed names), so it must agree with the
//! standard bit for bit: the tests check it against the NIST examples and against `sha2`
//! itself (a dev-dependency) for every length across three blocks and random splits of
//! the input between `update` calls, and the stored-format fixtures pin the fingerprints.

/// The round constants: the first 32 bits of the fractional parts of the cube roots of the
/// first 64 primes.
const ROUND_CONSTANTS: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// The initial hash value: the first 32 bits of the fractional parts of the square roots of
/// the first 8 primes.
const INITIAL_STATE: [u32; 8] =
    [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

const BLOCK_BYTES: usize = 64;

/// The SHA-256 digest of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(bytes);
    hasher.finalize()
}

/// A SHA-256 computation fed in parts: the digest of the parts' concatenation.
#[derive(Clone)]
pub struct Sha256 {
    state: [u32; 8],
    /// Input not yet compressed: the first `buffered` bytes of a block.
    block: [u8; BLOCK_BYTES],
    buffered: usize,
    /// Bytes fed so far; the standard counts the message's length in bits modulo 2^64.
    length: u64,
}

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}

impl Sha256 {
    pub fn new() -> Self {
        Sha256 { state: INITIAL_STATE, block: [0; BLOCK_BYTES], buffered: 0, length: 0 }
    }

    /// Feeds `bytes` (a slice, not `impl AsRef`: one copy of this code in the Wasm).
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.length = self.length.wrapping_add(bytes.len() as u64);
        if self.buffered > 0 {
            let take = bytes.len().min(BLOCK_BYTES - self.buffered);
            self.block[self.buffered..self.buffered + take].copy_from_slice(&bytes[..take]);
            self.buffered += take;
            bytes = &bytes[take..];
            if self.buffered < BLOCK_BYTES {
                return;
            }
            compress(&mut self.state, &self.block);
            self.buffered = 0;
        }
        let mut blocks = bytes.chunks_exact(BLOCK_BYTES);
        for block in &mut blocks {
            compress(&mut self.state, block);
        }
        let rest = blocks.remainder();
        self.block[..rest.len()].copy_from_slice(rest);
        self.buffered = rest.len();
    }

    /// The digest: the input, a 1 bit, zeros up to 8 bytes short of a block's end, and the
    /// input's length in bits as a big-endian 64-bit number.
    pub fn finalize(mut self) -> [u8; 32] {
        let bits = self.length.wrapping_mul(8);
        self.block[self.buffered] = 0x80;
        self.block[self.buffered + 1..].fill(0);
        if self.buffered + 1 > BLOCK_BYTES - 8 {
            compress(&mut self.state, &self.block);
            self.block.fill(0);
        }
        self.block[BLOCK_BYTES - 8..].copy_from_slice(&bits.to_be_bytes());
        compress(&mut self.state, &self.block);
        let mut digest = [0u8; 32];
        for (out, word) in digest.chunks_exact_mut(4).zip(self.state) {
            out.copy_from_slice(&word.to_be_bytes());
        }
        digest
    }
}

/// One block into the state: the message schedule, then 64 rounds, as a loop (not unrolled:
/// the size is the point, and a body's hash is a small part of a request's time).
fn compress(state: &mut [u32; 8], block: &[u8]) {
    let mut schedule = [0u32; 64];
    for (word, bytes) in schedule.iter_mut().zip(block.chunks_exact(4)) {
        *word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    for i in 16..64 {
        let (w15, w2) = (schedule[i - 15], schedule[i - 2]);
        let s0 = w15.rotate_right(7) ^ w15.rotate_right(18) ^ (w15 >> 3);
        let s1 = w2.rotate_right(17) ^ w2.rotate_right(19) ^ (w2 >> 10);
        schedule[i] = schedule[i - 16].wrapping_add(s0).wrapping_add(schedule[i - 7]).wrapping_add(s1);
    }
    let mut working = *state;
    for (constant, word) in ROUND_CONSTANTS.iter().zip(schedule) {
        let [a, b, c, d, e, f, g, h] = working;
        let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
        let choice = (e & f) ^ (!e & g);
        let t1 = h.wrapping_add(s1).wrapping_add(choice).wrapping_add(*constant).wrapping_add(word);
        let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
        let majority = (a & b) ^ (a & c) ^ (b & c);
        let t2 = s0.wrapping_add(majority);
        working = [t1.wrapping_add(t2), a, b, c, d.wrapping_add(t1), e, f, g];
    }
    for (value, added) in state.iter_mut().zip(working) {
        *value = value.wrapping_add(added);
    }
}

#[cfg(test)]
mod tests;
