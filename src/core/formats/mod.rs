//! Stored formats, each with its own versioned codec: the key's record and its extensions
//! (the asynchronous job, the lookup of an unknown outcome, the chunk manifest), the stored
//! policy, sealed envelopes, chunked answers, and the digests records are keyed and bound
//! by (the payload fingerprint, the body shape it reads, the object's keyed name). A change
//! here changes bytes already stored: fixtures in `core/testdata` must keep decoding.
//! No message codec is a storage format: the envelope (`edge_rules::wire`) has its own.
//!
//! May import: `primitives`, `vocabulary`.

pub mod body_shape;
pub mod chunk_manifest;
pub mod chunks;
pub mod fingerprint;
pub mod job;
pub mod key_record;
pub mod keyed_name;
pub mod reconciling;
pub mod record_layout;
pub mod seal;
pub mod stored_terms;
