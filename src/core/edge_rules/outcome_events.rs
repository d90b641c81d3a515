//! Outcomes published to a queue: with a Cloudflare Queues producer bound as
//! `OUTCOME_QUEUE`, the key's object publishes a small message for the outcomes a caller
//! may never come back for: every final outcome of an asynchronous job (its caller was told
//! 202 and may have gone away) and every outcome that became unknown (the caller got 502
//! `outcome-unknown`, and someone must find out what happened). An operator's consumer can
//! notify clients or feed a ledger from them.
//!
//! What a message carries: the object id (what the admin API takes; it is derived from a
//! hash of the caller's scope and the key, keyed with `OBJECT_NAME_KEY` when set), the
//! decision, the origin's status when it answered, whether the outcome is an asynchronous
//! job's, and when it was recorded. Never the key, the scope, a credential, a header or a
//! body. The consumer finds its operation by computing the same object id (as the admin
//! API's lookup does), or by asking the admin API.
//!
//! Delivery is Cloudflare Queues' (at least once): a consumer must accept a message twice.
//! A message that cannot be sent is logged (`outcome-publish-failed`), never retried by the
//! worker, and never changes the outcome or its answer.

use crate::core::vocabulary::decision::Decision;

/// The Queues producer binding's name.
pub const OUTCOME_QUEUE_BINDING: &str = "OUTCOME_QUEUE";

/// The version of the message's layout, its `version` field.
pub const MESSAGE_VERSION: u32 = 1;

/// One outcome, as published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutcomeEvent<'a> {
    /// The key's object id (64 hex digits).
    pub object_id: &'a str,
    pub decision: Decision,
    /// The origin's status, when it answered.
    pub origin_status: Option<u16>,
    /// Whether the outcome is an asynchronous job's (`core::key_rules::machine::async_job`).
    pub asynchronous: bool,
    /// When the outcome was recorded, in milliseconds since the epoch.
    pub at_ms: u64,
}

/// Whether an outcome with `decision` is published: every final decision of an
/// asynchronous job (executed, released, unknown, gave up; not a scheduled retry, which is
/// not an outcome), an unknown outcome whatever the request, and every reconciliation
/// (`core::key_rules::reconcile`; a lookup that said nothing too, so that a consumer sees it tried).
pub fn publishes(decision: Decision, asynchronous: bool) -> bool {
    match decision {
        Decision::Unknown
        | Decision::ReconciledExecuted
        | Decision::ReconciledNotExecuted
        | Decision::ReconcileFailed => true,
        Decision::Executed | Decision::Released | Decision::GaveUp => asynchronous,
        _ => false,
    }
}

impl OutcomeEvent<'_> {
    /// The message's body, as JSON.
    pub fn message(&self) -> String {
        // Members in serde_json's order (a `Map` sorts its keys), as they always were.
        serde_json::json!({
            "version": MESSAGE_VERSION,
            "object_id": self.object_id,
            "decision": self.decision.token(),
            "origin_status": self.origin_status,
            "asynchronous": self.asynchronous,
            "at_ms": self.at_ms,
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::vocabulary::problem::ProblemKind;

    #[test]
    fn unknown_outcomes_and_every_final_job_outcome_are_published() {
        assert!(publishes(Decision::Unknown, false));
        assert!(publishes(Decision::Unknown, true));
        for reconciled in
            [Decision::ReconciledExecuted, Decision::ReconciledNotExecuted, Decision::ReconcileFailed]
        {
            assert!(publishes(reconciled, false), "{reconciled:?}");
        }
        for decision in [Decision::Executed, Decision::Released, Decision::GaveUp] {
            assert!(publishes(decision, true), "{decision:?} of a job");
            assert!(!publishes(decision, false), "{decision:?} of a request its caller saw answered");
        }
        for decision in [
            Decision::RetryScheduled,
            // Sent again to an origin that deduplicates: the outcome is still to come.
            Decision::Reforwarded,
            Decision::Accepted,
            Decision::Replayed,
            Decision::Coalesced,
            Decision::FailedOpen,
            Decision::Rejected(ProblemKind::StorageUnavailable),
        ] {
            assert!(!publishes(decision, true) && !publishes(decision, false), "{decision:?}");
        }
    }

    #[test]
    fn a_message_names_the_object_and_the_outcome_and_nothing_of_the_request() {
        let event = OutcomeEvent {
            object_id: "ab12",
            decision: Decision::Executed,
            origin_status: Some(201),
            asynchronous: true,
            at_ms: 1_700_000_000_000,
        };
        let message: serde_json::Value = serde_json::from_str(&event.message()).expect("JSON");
        assert_eq!(
            message,
            json!({
                "version": 1,
                "object_id": "ab12",
                "decision": "executed",
                "origin_status": 201,
                "asynchronous": true,
                "at_ms": 1_700_000_000_000u64,
            })
        );
        // Consumers may compare raw messages: the bytes are as they always were.
        assert_eq!(
            event.message(),
            r#"{"asynchronous":true,"at_ms":1700000000000,"decision":"executed","object_id":"ab12","origin_status":201,"version":1}"#
        );
        let unknown = OutcomeEvent { decision: Decision::Unknown, origin_status: None, ..event };
        let message: serde_json::Value = serde_json::from_str(&unknown.message()).expect("JSON");
        assert_eq!(
            (message["decision"].as_str(), message["origin_status"].is_null()),
            (Some("unknown"), true)
        );
    }
}
