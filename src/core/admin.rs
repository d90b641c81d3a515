//! The admin API: which requests it answers, who may call it, and what it shows.
//!
//! Owns the paths, the token check and the record summary. The runtime only routes to the
//! object and carries out inspect or purge.
//!
//! 1. The API exists only when the `ADMIN_TOKEN` secret is set; otherwise its paths are
//!    ordinary traffic and pass to the origin like any other.
//! 2. It lives under a prefix that cannot collide with the origin's paths (default
//!    `/__idempotency/`, set with `ADMIN_PATH_PREFIX`).
//! 3. `GET {prefix}records/{object id}` inspects a record; `DELETE` purges it, and a record
//!    in flight is only purged with `?force=true`. The object id is the one log lines print.
//! 4. Every call needs `Authorization: Bearer <token>`. The comparison takes the same time
//!    whatever the token, and a refused call learns nothing about the record.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::record::{Millis, Record, UnknownReason};

/// The default prefix of the admin API.
pub const DEFAULT_PREFIX: &str = "/__idempotency/";

/// What an admin call asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminCall {
    Inspect {
        object_id: String,
    },
    Purge {
        object_id: String,
        force: bool,
    },
    /// Under the prefix, but no such endpoint (or a malformed object id).
    NotFound,
    /// A known path with a method it does not take.
    MethodNotAllowed,
}

/// Whether `path` is under the admin prefix.
pub fn is_admin_path(prefix: &str, path: &str) -> bool {
    path.starts_with(prefix) || path == prefix.trim_end_matches('/')
}

/// Parses an admin request. `query` is the URL's query without `?`.
pub fn parse_call(prefix: &str, method: &str, path: &str, query: Option<&str>) -> AdminCall {
    let Some(rest) = path.strip_prefix(prefix) else { return AdminCall::NotFound };
    let Some(object_id) = rest.strip_prefix("records/") else { return AdminCall::NotFound };
    let valid_id = object_id.len() == 64 && object_id.bytes().all(|b| b.is_ascii_hexdigit());
    if !valid_id {
        return AdminCall::NotFound;
    }
    let object_id = object_id.to_ascii_lowercase();
    let force = query.unwrap_or("").split('&').any(|pair| pair == "force=true" || pair == "force=1");
    match method {
        "GET" => AdminCall::Inspect { object_id },
        "DELETE" => AdminCall::Purge { object_id, force },
        _ => AdminCall::MethodNotAllowed,
    }
}

/// Whether the `Authorization` value carries the expected bearer token. Both sides are
/// hashed first, so the comparison neither stops early nor depends on the lengths.
pub fn token_matches(authorization: Option<&str>, expected: &str) -> bool {
    let presented = authorization.and_then(|value| value.strip_prefix("Bearer ")).unwrap_or("");
    let a = Sha256::digest(presented.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    let difference = a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    difference == 0 && !expected.is_empty() && !presented.is_empty()
}

/// The inspect view of a record: state, fingerprint, times and, for a stored answer, its
/// status and size. Never the body or the headers.
pub fn summary(object_id: &str, record: Option<&Record>, live: bool, now: Millis) -> Value {
    let Some(record) = record.filter(|record| !record.is_expired(now)) else {
        return json!({ "object_id": object_id, "state": "absent" });
    };
    let mut view = json!({
        "object_id": object_id,
        "state": record.state_name(),
        "fingerprint": record.fingerprint().to_hex(),
        "expires_at_ms": record.expires_at(),
    });
    match record {
        Record::InFlight(claim) => {
            view["created_at_ms"] = json!(claim.claimed_at);
            view["lease_until_ms"] = json!(claim.lease_until);
            view["executing_now"] = json!(live);
        }
        Record::Completed(done) => {
            view["created_at_ms"] = json!(done.completed_at);
            match &done.sealed_answer {
                // Sealed: not even the status is known without opening it.
                Some(sealed) => {
                    view["sealed"] = json!(true);
                    if let Some(envelope) = super::seal::Envelope::decode(sealed) {
                        view["key_id"] = json!(envelope.key_id);
                    }
                }
                None => {
                    view["status"] = json!(done.response.status);
                    view["body_bytes"] = json!(done.response.body.len());
                }
            }
        }
        Record::Unknown(unknown) => {
            view["created_at_ms"] = json!(unknown.since);
            view["reason"] = json!(match unknown.reason {
                UnknownReason::OriginTimeout => "origin-timeout",
                UnknownReason::ResetAfterSend => "reset-after-send",
                UnknownReason::ResponseTooLarge { .. } => "response-too-large",
            });
        }
    }
    view
}

/// Whether a purge must be refused: the record is in flight (its execution may still be
/// running) and the caller did not force it.
pub fn purge_refused(record: Option<&Record>, now: Millis, force: bool) -> bool {
    !force && matches!(record, Some(claim @ Record::InFlight(_)) if !claim.is_expired(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fingerprint::Digest256;
    use crate::core::record::{AttemptId, Completed, InFlight, StoredResponse};
    use std::sync::Arc;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn calls_are_parsed() {
        let p = DEFAULT_PREFIX;
        assert_eq!(
            parse_call(p, "GET", &format!("/__idempotency/records/{ID}"), None),
            AdminCall::Inspect { object_id: ID.into() }
        );
        assert_eq!(
            parse_call(p, "DELETE", &format!("/__idempotency/records/{ID}"), Some("force=true")),
            AdminCall::Purge { object_id: ID.into(), force: true }
        );
        assert_eq!(
            parse_call(p, "DELETE", &format!("/__idempotency/records/{ID}"), None),
            AdminCall::Purge { object_id: ID.into(), force: false }
        );
        assert_eq!(
            parse_call(p, "POST", &format!("/__idempotency/records/{ID}"), None),
            AdminCall::MethodNotAllowed
        );
        assert_eq!(parse_call(p, "GET", "/__idempotency/records/xyz", None), AdminCall::NotFound);
        assert_eq!(parse_call(p, "GET", "/__idempotency/other", None), AdminCall::NotFound);
        assert!(is_admin_path(p, "/__idempotency/records/x"));
        assert!(is_admin_path(p, "/__idempotency"));
        assert!(!is_admin_path(p, "/v1/charges"));
    }

    #[test]
    fn tokens_are_compared_whole() {
        assert!(token_matches(Some("Bearer s3cret"), "s3cret"));
        assert!(!token_matches(Some("Bearer s3cre"), "s3cret"));
        assert!(!token_matches(Some("Bearer s3cretX"), "s3cret"));
        assert!(!token_matches(Some("s3cret"), "s3cret"));
        assert!(!token_matches(None, "s3cret"));
        assert!(!token_matches(Some("Bearer "), ""));
    }

    #[test]
    fn summaries_show_no_body() {
        let done = Record::Completed(Completed {
            attempt: AttemptId(1),
            fingerprint: Digest256([7; 32]),
            completed_at: 10,
            expires_at: 1_000,
            response: Arc::new(StoredResponse {
                status: 201,
                headers: vec![],
                body: b"secret body".to_vec(),
            }),
            sealed_answer: None,
        });
        let view = summary(ID, Some(&done), false, 20);
        assert_eq!(view["state"], "completed");
        assert_eq!(view["status"], 201);
        assert_eq!(view["body_bytes"], 11);
        assert!(!view.to_string().contains("secret body"));
        assert_eq!(summary(ID, Some(&done), false, 1_000)["state"], "absent");
        assert_eq!(summary(ID, None, false, 0)["state"], "absent");
    }

    #[test]
    fn in_flight_records_need_force() {
        let claim = Record::InFlight(InFlight {
            attempt: AttemptId(1),
            fingerprint: Digest256([7; 32]),
            origin_attempts: 1,
            claimed_at: 0,
            lease_until: 100,
            expires_at: 1_000,
        });
        assert!(purge_refused(Some(&claim), 50, false));
        assert!(!purge_refused(Some(&claim), 50, true));
        assert!(!purge_refused(Some(&claim), 1_000, false));
        assert!(!purge_refused(None, 0, false));
    }
}
