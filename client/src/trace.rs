//! The `tracing` events of the retry loop (feature `tracing`): one per attempt, and one for
//! each way the loop ends without an answer to hand on.
//!
//! Rules:
//! 1. An event names the attempt, the status or transport failure, the problem `type`, the
//!    `Retry-After`, the decision and the wait: what an operator needs to see why a request
//!    was retried, polled or given up.
//! 2. Never the key, a header value or a body: a key may hold a business id, a header a
//!    credential. The caller who wants the key in its logs has it (`SentKey`, the error's
//!    `key()`), and can put it in a span of its own around the request.
//! 3. Attempts are `DEBUG`; the end of a loop without an answer (give-up, still pending,
//!    reconciliation needed) is `WARN`, since each asks the application to do something.
//!
//! The target is `idempotency_edge_client`, so `RUST_LOG=idempotency_edge_client=debug`
//! (with `tracing-subscriber`'s `EnvFilter`) shows every attempt.

use crate::attempt::{AttemptReport, AttemptSummary, Report, Response};
use crate::policy::{Decision, GiveUpReason};

const TARGET: &str = "idempotency_edge_client";

fn decision_name(decision: Decision) -> &'static str {
    match decision {
        Decision::Done => "done",
        Decision::Fail => "final",
        Decision::NeedsReconciliation => "reconcile",
        Decision::Retry { .. } => "retry",
        Decision::Poll { .. } => "poll",
        Decision::GiveUp(_) => "give-up",
        Decision::StillPending => "still-pending",
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Rule 1: one event per attempt, once it is judged.
pub(crate) fn attempt(a: &AttemptReport, polling: bool) {
    let decision = decision_name(a.decision);
    let wait_ms = a.wait().map(millis);
    let took_ms = millis(a.took);
    match &a.result {
        AttemptSummary::Answered { status, replayed, problem_type, retry_after } => tracing::debug!(
            target: TARGET,
            attempt = a.number,
            polling,
            status,
            replayed,
            problem_type = problem_type.as_deref(),
            retry_after_ms = retry_after.map(millis),
            decision,
            wait_ms,
            took_ms,
            "idempotency-edge attempt answered"
        ),
        AttemptSummary::TransportFailed(e) => tracing::debug!(
            target: TARGET,
            attempt = a.number,
            polling,
            transport_error = ?e.kind,
            error = %e.detail(),
            decision,
            wait_ms,
            took_ms,
            "idempotency-edge attempt got no answer"
        ),
    }
}

pub(crate) fn gave_up(reason: GiveUpReason, report: &Report) {
    tracing::warn!(
        target: TARGET,
        attempts = report.attempts,
        elapsed_ms = millis(report.elapsed),
        reason = ?reason,
        "idempotency-edge gave up: not known whether the operation executed; the same key may be sent again later"
    );
}

pub(crate) fn still_pending(report: &Report) {
    tracing::warn!(
        target: TARGET,
        attempts = report.attempts,
        elapsed_ms = millis(report.elapsed),
        "idempotency-edge operation still pending at the poll deadline: poll later with the same key"
    );
}

pub(crate) fn reconcile(response: &Response, report: &Report) {
    tracing::warn!(
        target: TARGET,
        attempts = report.attempts,
        elapsed_ms = millis(report.elapsed),
        status = response.status,
        problem_type = response.problem_type().as_deref(),
        "idempotency-edge outcome unknown: reconcile with the payment system"
    );
}
