//! The vocabulary the key's rules and the edge's rules share: the problems a request can
//! be answered with (RFC 9457), the request's trace, the decision a log line names, how an
//! origin's answer is classified (the outcome policy), what a key's object is told about a
//! route (the object policy), and a configuration error.
//!
//! May import: `primitives`. Owns no stored layout and no decision about a key.

pub mod config_error;
pub mod decision;
pub mod fault;
pub mod key_terms;
pub mod outcome_table;
pub mod problem;
pub mod trace;
