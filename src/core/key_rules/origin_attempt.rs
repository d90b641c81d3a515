//! One attempt at the origin: whether a TCP probe goes first, how long the probe and the
//! exchange may wait, and what a reconciliation's lookup learns from its exchange. The
//! runtime (`runtime::origin`) opens the socket and runs the fetch; each end of an attempt
//! is an `OriginVerdict` (`core::vocabulary::outcome_table`), and whatever it cannot place
//! is "maybe sent", never "not sent": mistaking an executed payment for an unexecuted one
//! would charge twice.
//!
//! 1. workerd reports every failed fetch alike ("Network connection lost."), a refused
//!    connect and a reset after the request was sent included: both are the same kind of
//!    kj exception (DISCONNECTED: ECONNREFUSED and ECONNRESET map to it alike), which
//!    workerd's jsg turns into that one message, marked retryable, with no detail. So a
//!    fetch's error never says "not sent", and a second connect after a failed fetch says
//!    only whether the origin accepts connections now, not what became of the request: an
//!    origin that executed it and then crashed refuses that connect too. So, in
//!    `ORIGIN_URL` mode, the attempt first opens a plain TCP connection to the origin's
//!    host and port, before anything is sent: if that is refused, nothing was sent and the
//!    key can be released. Any later fetch failure is unknown. In route mode the origin
//!    sits behind Cloudflare, where outbound sockets may not connect, so there is no probe
//!    and every fetch failure is unknown.
//! 2. Through a service binding (`ORIGIN_SERVICE`) there is no connection to refuse (nor
//!    to probe), so a thrown error is always unknown.
//! 3. The probe waits as long as the fetch would wait for a connection of its own: the
//!    origin timeout. An origin whose accept queue is full drops new SYNs, which the kernel
//!    sends again after 1 s, 3 s, 7 s; a probe that gave up sooner (at a quarter of the
//!    timeout, 1 s of 4 s) released requests that the origin would have served, with 502
//!    `origin-unreachable` (3-8 of 100 new keys in a storm against Python's `http.server`,
//!    `reliability::storm_against_a_small_backlog_origin_has_no_false_origin_unreachable`).
//!    A probe that has not connected when the timeout is up releases the key, rightly:
//!    nothing was sent, and a fetch would not have connected in that time either (it would
//!    have left the key unknown), so a black-holed origin cannot hold a key.
//! 4. Once the probe connects, the exchange has the whole origin timeout of its own, body
//!    included, because its own connect may wait for a dropped SYN too: taking the probe's
//!    wait out of it would turn a slow accept into a timeout, an unknown outcome, which is
//!    worse than a false refusal. So an attempt lasts at most twice the origin timeout,
//!    longer than the claim's lease (timeout + 10 s) when the timeout is over 10 s. That is
//!    safe: a live attempt keeps its key however long it runs (`core::key_rules::machine`,
//!    rule 3), and a lease only matters after the object restarted, which ended the attempt
//!    (the key then reads as unknown, or, with `ORIGIN_DEDUPLICATES`, is sent again to an
//!    origin that deduplicates it).
//! 5. How an attempt ended becomes its verdict here ([`AttemptEnd::verdict`]): only an end
//!    before anything was handed to the fetch is "not sent".

use crate::core::vocabulary::outcome_table::{OriginResult, OriginVerdict};

/// How one attempt ended, as the runtime's probe, fetch and body read saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptEnd {
    /// The probe could not be made (no host and port in the target, no socket), was
    /// refused, or failed before a connection existed.
    ProbeFailed,
    /// The probe did not connect within its wait (rule 3).
    ProbeTimedOut,
    /// The request could not be signed or built: the fetch was never called.
    NotBuilt,
    /// The fetch threw, or what came back was not an answer (rule 1).
    FetchFailed,
    /// The deadline passed before the whole answer came, its head or its body (rule 4).
    DeadlinePassed,
    /// The answer's head came with this status, then its headers or body could not be read.
    BrokeOff(u16),
    /// The whole answer came with this status, its body within the stored-size cap or not.
    Read { status: u16, within_cap: bool },
}

impl AttemptEnd {
    /// The attempt's sent-or-not verdict (rule 5).
    pub fn verdict(self) -> OriginVerdict {
        match self {
            AttemptEnd::ProbeFailed | AttemptEnd::ProbeTimedOut | AttemptEnd::NotBuilt => {
                OriginVerdict::NotSent
            }
            AttemptEnd::FetchFailed => OriginVerdict::MaybeSent,
            AttemptEnd::DeadlinePassed => OriginVerdict::TimedOut,
            AttemptEnd::BrokeOff(status) => OriginVerdict::BrokeOff(status),
            AttemptEnd::Read { status, within_cap: true } => OriginVerdict::Answered(status),
            AttemptEnd::Read { status, within_cap: false } => OriginVerdict::OverCap(status),
        }
    }
}

/// How long each part of one attempt may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptPlan {
    /// The TCP probe's wait before anything is sent, when there is a probe (rules 1-3).
    pub probe_ms: Option<u64>,
    /// The exchange's deadline, from sending to the answer's last byte (rule 4).
    pub exchange_ms: u64,
}

/// The plan of an attempt whose key's call allows a probe (`probe_first`: `ORIGIN_URL`
/// mode), sent through a service binding or not, with the origin timeout `timeout_ms`.
pub fn plan(probe_first: bool, through_service: bool, timeout_ms: u64) -> AttemptPlan {
    let probe_ms = (probe_first && !through_service).then_some(timeout_ms);
    AttemptPlan { probe_ms, exchange_ms: timeout_ms }
}

/// What a reconciliation's lookup (`core::key_rules::reconcile`) learns from its exchange:
/// the status, and whether the answer is kept (it came whole within the stored-size cap);
/// nothing when no answer came (refused, reset, timed out).
pub fn looked_up(result: OriginResult) -> Option<(u16, bool)> {
    match result {
        OriginResult::Responded(status) => Some((status, true)),
        OriginResult::Oversized(status) => Some((status, false)),
        OriginResult::ConnectRefused | OriginResult::TimedOut | OriginResult::ResetAfterSend => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_waits_the_whole_timeout_and_never_through_a_binding() {
        assert_eq!(plan(true, false, 4_000), AttemptPlan { probe_ms: Some(4_000), exchange_ms: 4_000 });
        assert_eq!(plan(true, true, 4_000), AttemptPlan { probe_ms: None, exchange_ms: 4_000 });
        assert_eq!(plan(false, false, 4_000), AttemptPlan { probe_ms: None, exchange_ms: 4_000 });
        assert_eq!(plan(false, true, 30_000).exchange_ms, 30_000, "the exchange keeps the whole timeout");
    }

    /// Only an end before the fetch was called releases the key: once the request was handed
    /// to the fetch, whatever happened is never "not sent".
    #[test]
    fn only_an_attempt_that_never_reached_the_fetch_is_not_sent() {
        let before = [AttemptEnd::ProbeFailed, AttemptEnd::ProbeTimedOut, AttemptEnd::NotBuilt];
        for end in before {
            assert_eq!(end.verdict(), OriginVerdict::NotSent, "{end:?}");
        }
        let after = [
            (AttemptEnd::FetchFailed, OriginVerdict::MaybeSent),
            (AttemptEnd::DeadlinePassed, OriginVerdict::TimedOut),
            (AttemptEnd::BrokeOff(201), OriginVerdict::BrokeOff(201)),
            (AttemptEnd::Read { status: 200, within_cap: true }, OriginVerdict::Answered(200)),
            (AttemptEnd::Read { status: 200, within_cap: false }, OriginVerdict::OverCap(200)),
        ];
        for (end, verdict) in after {
            assert_eq!(end.verdict(), verdict, "{end:?}");
            assert_ne!(end.verdict().result(), OriginResult::ConnectRefused, "{end:?} released the key");
        }
    }

    #[test]
    fn a_lookup_learns_a_status_only_from_an_answer() {
        assert_eq!(looked_up(OriginResult::Responded(404)), Some((404, true)));
        assert_eq!(looked_up(OriginResult::Oversized(200)), Some((200, false)));
        for none in [OriginResult::ConnectRefused, OriginResult::TimedOut, OriginResult::ResetAfterSend] {
            assert_eq!(looked_up(none), None);
        }
    }
}
