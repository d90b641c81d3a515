//! Observe mode's verdicts on the Worker's side (`runtime::observe` carries them out): what
//! became of a forward the Worker made itself, what it reports to the key's object, what
//! its log line says, and what enforce mode would have decided when the object could not
//! be reached.
//!
//! The rule that matters: an answer later than the route's origin timeout is reported as a
//! timeout (enforce mode would have given up on it and held the key unknown), whatever it
//! said; a body that broke off, or a failed forward, is a reset (the origin may have
//! executed it).

use super::log::RequestLog;
use super::routes::{after_object_failure, AfterObjectFailure, ObjectCallFailure, Unavailable};
use super::scope::ScopeLog;
use super::wire::{Answered, ObservedOutcome};
use crate::core::formats::key_record::AttemptId;
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::problem::ProblemKind;

/// What became of the forward, handed from the caller's side to the recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forwarded {
    /// The origin answered; `body` is what was captured of the recording's half of its body.
    Answered { status: u16, headers: Vec<(String, String)>, body: Captured, ms: u64 },
    /// The fetch failed (the caller got 502).
    Failed { ms: u64 },
}

impl Forwarded {
    /// What the caller's side `handed` over: a handler cut short hands nothing, which is
    /// recorded as a broken connection (the origin may have executed it), never as no forward.
    pub fn handed(handed: Option<Forwarded>) -> Forwarded {
        handed.unwrap_or(Forwarded::Failed { ms: 0 })
    }
}

/// What the recording gets of the origin's body: read as it comes, and only up to what
/// could be stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Captured {
    /// No body, or none to keep (a WebSocket).
    Nothing,
    Whole(Vec<u8>),
    /// Over the stored-size cap: read no further (the object records it as too large).
    TooLarge,
    /// The body broke off.
    Broken,
}

/// The status its caller got from this forward (502 for a failed one, as for a method
/// passed through), the origin's status if it answered, and how long it took.
pub fn log_fields(forwarded: &Forwarded) -> (u16, Option<u16>, u64) {
    match forwarded {
        Forwarded::Answered { status, ms, .. } => (*status, Some(*status), *ms),
        Forwarded::Failed { ms } => (502, None, *ms),
    }
}

/// The line of a request enforce mode would have refused (`kind`) before any object: the
/// status its caller got from the origin instead, and how long the origin took.
pub fn refusal_line(kind: ProblemKind, status: u16, origin_ms: u64) -> RequestLog {
    RequestLog { origin_ms: Some(origin_ms), ..RequestLog::new(None, Decision::Rejected(kind), status, None) }
}

/// The error line of an object not reached in observe mode (`failure`, with the platform's
/// `error`): the request was forwarded anyway, and nothing was recorded.
pub fn not_reached_line(object: &str, failure: ObjectCallFailure, error: &str) -> String {
    format!(
        "object {object}: not reached in observe mode ({failure}): {error}; \
         the request was forwarded anyway, unrecorded"
    )
}

/// The error line of an observed outcome the object did not record, saying why
/// ([`after_outcome`]).
pub fn not_recorded_line(object: &str, why: &str) -> String {
    format!("object {object}: the observed outcome was not recorded: {why}")
}

/// The line of a recorded request: the `decision` enforce mode would have made (by
/// `object`, after `object_calls` calls), and the forward's [`log_fields`].
pub fn recorded_line(
    object: String,
    decision: Decision,
    (status, origin_status, origin_ms): (u16, Option<u16>, u64),
    object_calls: u32,
    scope: ScopeLog,
) -> RequestLog {
    RequestLog {
        origin_status,
        origin_ms: Some(origin_ms),
        object_calls: Some(object_calls),
        ..RequestLog::new(Some(object), decision, status, Some(scope))
    }
}

/// The outcome the object records for a claimed request, and the body it stores with a
/// `Responded` one.
pub fn reported_outcome(forwarded: Forwarded, origin_timeout_ms: u64) -> (ObservedOutcome, Option<Vec<u8>>) {
    match forwarded {
        Forwarded::Answered { ms, .. } if ms > origin_timeout_ms => (ObservedOutcome::Timeout, None),
        Forwarded::Answered { status, headers, body, .. } => match body {
            Captured::Whole(bytes) => (ObservedOutcome::Responded { status, headers }, Some(bytes)),
            Captured::Nothing => (ObservedOutcome::Responded { status, headers }, None),
            Captured::TooLarge => (ObservedOutcome::Oversized { status }, None),
            Captured::Broken => (ObservedOutcome::Reset, None),
        },
        Forwarded::Failed { .. } => (ObservedOutcome::Reset, None),
    }
}

/// What enforce mode would have decided for a request whose object could not be reached
/// (the request went to the origin anyway): fail open where the route chose it and the
/// object provably never had the request, else the refusal (503).
pub fn unreached(failure: ObjectCallFailure, on_unavailable: Unavailable) -> Decision {
    match after_object_failure(failure, on_unavailable) {
        AfterObjectFailure::FailOpen => Decision::FailedOpen,
        AfterObjectFailure::Refuse(problem) => Decision::Rejected(problem.kind),
    }
}

/// What the object's answer to an observed arrival says: the decision enforcing would have
/// made and the attempt it claimed, if any. An answer without a decision is as a store that
/// failed (nothing was recorded, nothing claimed); an object not reached is [`unreached`].
pub fn after_arrival(
    answer: Result<&Answered, ObjectCallFailure>,
    on_unavailable: Unavailable,
) -> (Decision, Option<AttemptId>) {
    match answer {
        Ok(Answered::Observed { decision, claimed }) => (*decision, *claimed),
        Ok(Answered::Plain) => (Decision::Rejected(ProblemKind::StorageUnavailable), None),
        Err(failure) => (unreached(failure, on_unavailable), None),
    }
}

/// The decision once the claimed attempt's outcome was reported (`recorded`: the object's
/// answer, or why it was not reached): the object's, or unknown when it was not recorded,
/// with why not, for the log. The claim then stays: past its lease, enforce mode would hold
/// the key.
pub fn after_outcome(recorded: Result<&Answered, &str>) -> (Decision, Option<String>) {
    match recorded {
        Ok(Answered::Observed { decision, .. }) => (*decision, None),
        Ok(Answered::Plain) => (Decision::Unknown, Some("the object answered without a decision".to_owned())),
        Err(why) => (Decision::Unknown, Some(why.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arrival_is_the_objects_decision_or_a_refusal_when_it_recorded_none() {
        let claimed = Answered::Observed { decision: Decision::Executed, claimed: Some(AttemptId(7)) };
        let fail_open = Unavailable::FailOpen;
        assert_eq!(after_arrival(Ok(&claimed), fail_open), (Decision::Executed, Some(AttemptId(7))));
        let refused = Decision::Rejected(ProblemKind::StorageUnavailable);
        assert_eq!(after_arrival(Ok(&Answered::Plain), fail_open), (refused, None));
        // Unreached: what enforce mode would have decided, and never a claim.
        assert_eq!(
            after_arrival(Err(ObjectCallFailure::BeforeSend), fail_open),
            (Decision::FailedOpen, None)
        );
        let after = ObjectCallFailure::UnmarkedAnswer;
        assert_eq!(after_arrival(Err(after), fail_open), (refused, None));
    }

    #[test]
    fn an_outcome_not_recorded_is_unknown() {
        let replayed = Answered::Observed { decision: Decision::Replayed, claimed: None };
        assert_eq!(after_outcome(Ok(&replayed)), (Decision::Replayed, None));
        let plain = after_outcome(Ok(&Answered::Plain));
        assert_eq!(plain, (Decision::Unknown, Some("the object answered without a decision".to_owned())));
        let unreached = after_outcome(Err("the stub threw"));
        assert_eq!(unreached, (Decision::Unknown, Some("the stub threw".to_owned())));
    }

    fn answered(body: Captured, ms: u64) -> Forwarded {
        Forwarded::Answered { status: 201, headers: vec![("a".into(), "b".into())], body, ms }
    }

    #[test]
    fn an_answer_within_the_timeout_is_reported_with_its_body() {
        let (outcome, body) = reported_outcome(answered(Captured::Whole(b"ok".to_vec()), 100), 4_000);
        assert_eq!(
            outcome,
            ObservedOutcome::Responded { status: 201, headers: vec![("a".into(), "b".into())] }
        );
        assert_eq!(body.as_deref(), Some(&b"ok"[..]));
        let (outcome, body) = reported_outcome(answered(Captured::Nothing, 100), 4_000);
        assert!(matches!(outcome, ObservedOutcome::Responded { status: 201, .. }));
        assert_eq!(body, None);
    }

    #[test]
    fn an_answer_later_than_the_timeout_is_a_timeout_whatever_it_said() {
        for body in [Captured::Whole(b"ok".to_vec()), Captured::TooLarge, Captured::Broken, Captured::Nothing]
        {
            assert_eq!(reported_outcome(answered(body, 4_001), 4_000), (ObservedOutcome::Timeout, None));
        }
        // At the timeout exactly, enforce mode would still have had the answer.
        assert!(matches!(
            reported_outcome(answered(Captured::Nothing, 4_000), 4_000).0,
            ObservedOutcome::Responded { .. }
        ));
    }

    #[test]
    fn a_broken_body_or_a_failed_forward_is_a_reset_and_a_large_one_oversized() {
        assert_eq!(reported_outcome(answered(Captured::Broken, 10), 4_000), (ObservedOutcome::Reset, None));
        assert_eq!(reported_outcome(Forwarded::Failed { ms: 10 }, 4_000), (ObservedOutcome::Reset, None));
        assert_eq!(
            reported_outcome(answered(Captured::TooLarge, 10), 4_000),
            (ObservedOutcome::Oversized { status: 201 }, None)
        );
    }

    #[test]
    fn the_error_lines_name_the_object_the_failure_and_what_became_of_the_request() {
        assert_eq!(
            not_reached_line("ab12", ObjectCallFailure::BeforeSend, "no stub"),
            "object ab12: not reached in observe mode (the call could not be made): no stub; \
             the request was forwarded anyway, unrecorded"
        );
        assert_eq!(
            not_recorded_line("ab12", "the object answered without a decision"),
            "object ab12: the observed outcome was not recorded: the object answered without a decision"
        );
    }

    #[test]
    fn nothing_handed_over_is_a_failed_forward_and_so_an_unknown_outcome() {
        let nothing = Forwarded::handed(None);
        assert_eq!(nothing, Forwarded::Failed { ms: 0 });
        // The origin may have executed it: a reset, which the object holds as unknown.
        assert_eq!(reported_outcome(nothing, 30_000), (ObservedOutcome::Reset, None));
        assert_eq!(log_fields(&Forwarded::handed(None)).0, 502);
        let answered = answered(Captured::Nothing, 7);
        assert_eq!(Forwarded::handed(Some(answered.clone())), answered);
    }

    #[test]
    fn a_refusal_line_names_the_refusal_and_the_origins_status_and_time() {
        let line = refusal_line(ProblemKind::BodyTooLarge, 201, 12);
        assert_eq!(line.decision, Decision::Rejected(ProblemKind::BodyTooLarge));
        assert_eq!((line.status, line.origin_status, line.origin_ms), (201, None, Some(12)));
        assert_eq!((line.object, line.object_calls, line.scope), (None, None, None));
    }

    #[test]
    fn a_recorded_line_carries_the_decision_the_forward_and_the_calls() {
        let scope = ScopeLog { kind: crate::core::edge_rules::scope::ScopeKind::Anonymous, unverified: None };
        let fields = log_fields(&Forwarded::Failed { ms: 9 });
        let line = recorded_line("ab12".to_owned(), Decision::Unknown, fields, 2, scope);
        assert_eq!((line.object.as_deref(), line.decision), (Some("ab12"), Decision::Unknown));
        assert_eq!((line.status, line.origin_status, line.origin_ms), (502, None, Some(9)));
        assert_eq!((line.object_calls, line.scope), (Some(2), Some(scope)));
    }

    #[test]
    fn the_log_fields_say_502_for_a_failed_forward() {
        assert_eq!(log_fields(&answered(Captured::Nothing, 7)), (201, Some(201), 7));
        assert_eq!(log_fields(&Forwarded::Failed { ms: 9 }), (502, None, 9));
    }

    #[test]
    fn an_unreached_object_fails_open_only_where_enforce_mode_would() {
        let before = ObjectCallFailure::BeforeSend;
        let after = ObjectCallFailure::Rejected { overloaded: false, remote: true };
        assert_eq!(unreached(before, Unavailable::FailOpen), Decision::FailedOpen);
        assert_eq!(
            unreached(before, Unavailable::FailClosed),
            Decision::Rejected(ProblemKind::StorageUnavailable)
        );
        assert_eq!(
            unreached(after, Unavailable::FailOpen),
            Decision::Rejected(ProblemKind::StorageUnavailable)
        );
    }
}
