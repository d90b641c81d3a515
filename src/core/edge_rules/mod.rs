//! The edge's rules: what the Worker decides for each request before and after a key's
//! object, and the configuration it decides by: the variables and routes, the caller's
//! scope and its tokens, headers, the envelope it hands the object (`wire`), the admin API,
//! the origin hop's signature, the log line and the metrics schema.
//!
//! May import: every layer below (`primitives`, `vocabulary`, `formats`, `key_rules`).

pub mod admin;
pub mod config;
pub mod edge;
pub mod env_names;
pub mod headers;
pub mod hop_signature;
pub mod identify;
pub mod jwks_cache;
pub mod log;
pub mod log_decisions;
pub mod message_signature;
pub mod metrics_schema;
pub mod observed;
pub mod origin_auth;
pub mod outcome_events;
pub mod routes;
pub mod scope;
pub mod settings;
pub mod verified_tokens;
pub mod wire;
