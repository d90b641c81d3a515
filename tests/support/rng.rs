//! Seeded randomness for the randomised tests (the storm, the reliability run): a small
//! deterministic generator (xorshift64*), and the seed, taken from `TEST_SEED` when it is
//! set, so that a failing order or mix can be replayed:
//!
//! ```sh
//! TEST_SEED=0x1234abcd cargo test --test e2e storm
//! ```

pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (0 is mapped to a fixed odd value).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 { 0x9e37_79b9_7f4a_7c15 } else { seed })
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Fisher–Yates, in place.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// The seed of a randomised test: `TEST_SEED` (decimal, or hex with `0x`) when set, else
/// one from the clock. Printed by the caller in its summary and in every failure message.
pub fn seed() -> u64 {
    if let Ok(text) = std::env::var("TEST_SEED") {
        let text = text.trim();
        let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => text.parse(),
        };
        return parsed.unwrap_or_else(|_| panic!("TEST_SEED={text:?} is not a number (decimal or 0x hex)"));
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 | 1)
        .unwrap_or(0x9e37_79b9_7f4a_7c15)
}
