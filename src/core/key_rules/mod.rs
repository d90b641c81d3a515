//! The key's rules: what one key's Durable Object decides, as a pure state machine
//! (claim, forward, replay, join, refuse, hold unknown, release), its asynchronous jobs,
//! its waiters, and the lookup of unknown outcomes at the origin.
//!
//! May import: `primitives`, `vocabulary`, `formats`.

pub mod key_state;
pub mod machine;
pub mod origin_attempt;
pub mod reconcile;
