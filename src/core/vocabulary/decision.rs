//! What the worker did with a covered request: the one word a log line, an observe-mode
//! answer mark (`core::edge_rules::wire`) and the metrics schema (`core::edge_rules::metrics_schema`) all name it by.

use super::outcome_table::Disposition;
use super::problem::ProblemKind;

/// What the worker did with a covered request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Forwarded; the final answer was stored.
    Executed,
    /// Forwarded; the origin certainly did not execute it, and the key was released.
    Released,
    /// Forwarded; the outcome is unknown and the key is held.
    Unknown,
    /// Answered from the stored outcome.
    Replayed,
    /// Answered with the running execution's outcome.
    Coalesced,
    /// Refused with a problem of this kind.
    Rejected(ProblemKind),
    /// The key's object provably never received the request, and the route chose
    /// availability: forwarded without protection.
    FailedOpen,
    /// Asynchronous acceptance (`core::key_rules::machine::async_job`): a job was claimed for the request, or
    /// a poll found it still running; answered 202.
    Accepted,
    /// A job's attempt was not executed (refused, 429, 503, …): the next one is scheduled.
    RetryScheduled,
    /// A job's attempt, whose outcome is unknown, was sent again to an origin that
    /// deduplicates by key.
    Reforwarded,
    /// A job's deadline came with no execution: it gave up (503 `origin-unavailable` to
    /// the next poll, then the key is released).
    GaveUp,
    /// An unknown outcome looked up (`core::key_rules::reconcile`): the origin executed it, and its
    /// lookup's answer is now the stored final answer.
    ReconciledExecuted,
    /// An unknown outcome looked up: the origin never executed it, and the key is released.
    ReconciledNotExecuted,
    /// An unknown outcome looked up, and the lookup said nothing (an error, a timeout): still
    /// unknown, asked again later.
    ReconcileFailed,
}

impl Decision {
    /// The decision for a forwarded attempt, from its classified origin result.
    pub fn after_forward(disposition: Disposition) -> Decision {
        match disposition {
            Disposition::Final => Decision::Executed,
            Disposition::Release => Decision::Released,
            Disposition::Unknown => Decision::Unknown,
        }
    }

    /// The decision as one token, `name` or `rejected:<problem>`: how the key's object
    /// tells the Worker, in observe mode, what enforcing would have done.
    pub fn token(self) -> String {
        match self {
            Decision::Rejected(kind) => format!("rejected:{}", kind.slug()),
            other => other.name().to_owned(),
        }
    }

    /// The inverse of [`Decision::token`].
    pub fn from_token(token: &str) -> Option<Decision> {
        if let Some(slug) = token.strip_prefix("rejected:") {
            return ProblemKind::from_slug(slug).map(Decision::Rejected);
        }
        Decision::WITHOUT_PROBLEM.into_iter().find(|decision| decision.name() == token)
    }

    /// Every decision but `Rejected`, which carries its problem.
    const WITHOUT_PROBLEM: [Decision; 13] = [
        Decision::Executed,
        Decision::Released,
        Decision::Unknown,
        Decision::Replayed,
        Decision::Coalesced,
        Decision::FailedOpen,
        Decision::Accepted,
        Decision::RetryScheduled,
        Decision::Reforwarded,
        Decision::GaveUp,
        Decision::ReconciledExecuted,
        Decision::ReconciledNotExecuted,
        Decision::ReconcileFailed,
    ];

    /// Every value of the line's `decision` field (`rejected` once, whatever its problem).
    pub fn names() -> impl Iterator<Item = &'static str> {
        Decision::WITHOUT_PROBLEM.into_iter().map(Decision::name).chain(["rejected"])
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Decision::Executed => "executed",
            Decision::Released => "released",
            Decision::Unknown => "unknown",
            Decision::Replayed => "replayed",
            Decision::Coalesced => "coalesced",
            Decision::Rejected(_) => "rejected",
            Decision::FailedOpen => "failed-open",
            Decision::Accepted => "accepted",
            Decision::RetryScheduled => "retry-scheduled",
            Decision::Reforwarded => "reforwarded",
            Decision::GaveUp => "gave-up",
            Decision::ReconciledExecuted => "reconciled-executed",
            Decision::ReconciledNotExecuted => "reconciled-not-executed",
            Decision::ReconcileFailed => "reconcile-failed",
        }
    }
}
