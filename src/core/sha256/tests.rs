use proptest::prelude::*;
use sha2::Digest;

use super::*;
use crate::core::hex::encode as hex;

fn reference(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

/// FIPS 180-4's examples (NIST's "SHA256.pdf" and the long message of its test vectors).
#[test]
fn the_standards_examples() {
    let cases: [(&[u8], &str); 4] = [
        (b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        (b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (
            b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
        ),
        (
            b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(hex(&sha256(input)), expected, "{:?}", String::from_utf8_lossy(input));
    }
    let mut million = Sha256::new();
    for _ in 0..1000 {
        million.update(&[b'a'; 1000]);
    }
    assert_eq!(hex(&million.finalize()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/// Every length from empty to three blocks: each place the padding can fall (the 1 bit and
/// the length in the same block, or the length pushed into a block of its own).
#[test]
fn every_length_up_to_three_blocks_agrees_with_sha2() {
    let input: Vec<u8> = (0..=192u32).map(|i| (i.wrapping_mul(131) ^ (i >> 3)) as u8).collect();
    for length in 0..=input.len() {
        assert_eq!(sha256(&input[..length]), reference(&input[..length]), "length {length}");
    }
}

proptest! {
    /// Fed in any parts, the digest is the whole input's, and `sha2`'s.
    #[test]
    fn any_split_of_any_input_agrees_with_sha2(
        input in proptest::collection::vec(any::<u8>(), 0..600),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut.index(input.len() + 1)).collect();
        cuts.sort_unstable();
        let mut hasher = Sha256::new();
        let mut from = 0;
        for cut in cuts {
            hasher.update(&input[from..cut]);
            from = cut;
        }
        hasher.update(&input[from..]);
        prop_assert_eq!(hasher.finalize(), reference(&input));
    }
}
