//! Primitives: encodings, grammars and small parsers that know nothing of the product's
//! rules: hex, the big-endian codec every stored layout is written with, Unicode case
//! folding, URL paths, the `Idempotency-Key` grammar, header and binding names, the clock's
//! unit, canonical JSON, and JSON Web Tokens with their signatures.
//!
//! May import: nothing else of the core (only crates). Everything above may import it.

pub mod canonical_json;
pub mod case_fold;
pub mod codec;
pub mod hex;
pub mod jwt;
pub mod key;
pub mod names;
pub mod time;
pub mod url;
