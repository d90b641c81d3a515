//! The one message the Worker hands a key's object, and the one mark the object puts on
//! its answer.
//!
//! Owns the envelope: a version, then what the call is (a key request to enforce, observe
//! mode's arrival or outcome, an admin operation) and everything the object needs with
//! it (fingerprint, scope, scope salt, the route's policy, the body's size, whether it may
//! probe the origin, the asynchronous settings). It is encoded once (`core::primitives::codec`, then
//! base64url) into one header, [`ENVELOPE_HEADER`]; the request's own headers and body
//! travel as they are, for the object to forward. This replaces a dozen internal headers
//! and a positional policy string: one crossing of the boundary to set it, one to read it.
//!
//! A version the object does not know is refused with a 503 (a Worker and an object of
//! different releases, for the moment a deploy takes): never guessed at, since a field
//! read wrongly could forward a request twice or replay another caller's answer.
//!
//! The object marks every answer it gives with [`ANSWERED_HEADER`]; an observe-mode answer
//! carries the decision enforcing would have made, and the attempt it claimed, in the
//! mark's value ([`Answered`]).

use super::scope::ScopeLog;
use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::key_record::AttemptId;
use crate::core::formats::reconciling::Reconciling;
use crate::core::key_rules::key_state::Arrival;
use crate::core::key_rules::machine::async_job::{ArrivalPlan, AsyncAccept, AsyncConfig};
use crate::core::primitives::codec::{CodecError, Reader, Writer};
use crate::core::primitives::jwt::{base64url_decode, base64url_encode};
use crate::core::primitives::key::IDEMPOTENCY_KEY;
use crate::core::primitives::names::{is_binding_name, is_header_name};
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::key_terms::KeyTerms;
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::key_terms::{Timing, WaiterLimits};
use crate::core::vocabulary::outcome_table::{OriginResult, OutcomeTable, StatusSet};
use crate::core::vocabulary::problem::{Problem, ProblemKind};
use crate::core::vocabulary::trace::Trace;

/// The one header the Worker sets on a call to a key's object.
pub const ENVELOPE_HEADER: &str = "x-idempotency-edge-envelope";

/// The mark on every answer the object gives: an answer without it came from the platform,
/// which may have answered after the object ran, so it is a 503, never a reason to fail
/// open. The Worker removes it.
pub const ANSWERED_HEADER: &str = "x-idempotency-edge-answered";

/// The mark's value on an answer that carries nothing else.
pub const ANSWERED_PLAIN: &str = "1";

/// The envelope's version. A later release that changes a field adds a version and keeps
/// reading the one before for as long as a deploy can mix releases. Version 2 added the
/// request's trace (`core::vocabulary::trace::Trace`) at the end of a key call; version 1 is still read,
/// with an empty trace. Version 3 adds the route's lookup ([`ReconcileCall`]) after the
/// trace, and is written only for a call that has one: a call without one is written as
/// version 2, which the release before reads, so a deploy of this release refuses (503)
/// only the calls of routes that reconcile, for the moment it takes.
pub const WIRE_VERSION: u8 = 3;

/// The version written for a call with nothing of version 3 in it.
const WIRE_VERSION_2: u8 = 2;

/// Seconds a caller is told to wait when the Worker and the object disagree on the
/// envelope's version: a deploy finishes rolling out in about that long.
const VERSION_SKEW_RETRY_SECONDS: u64 = 5;

/// A call to a key's object.
// One value per call, alive only while it is encoded or read: not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToObject {
    Key(KeyCall),
    /// An admin operation (`core::edge_rules::admin`): `inspect`, `inspect-reveal`, `purge` or
    /// `purge-force`.
    Admin(String),
}

/// A request under a key, and what the object needs to decide about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyCall {
    pub fingerprint: Digest256,
    /// The caller scope's key salt (`core::formats::fingerprint::Scope::key_salt`): seals the key's
    /// stored answer.
    pub scope_salt: Digest256,
    /// How the scope was reached, for the object's log line.
    pub scope: ScopeLog,
    pub policy: KeyTerms,
    /// The request body's size, for the waiters' byte limit.
    pub body_bytes: u64,
    /// Whether the origin is a configured `ORIGIN_URL` (not route mode or a service
    /// binding), which the object may probe with a TCP connect before sending.
    pub probe_origin: bool,
    pub step: KeyStep,
    /// Which request this is, for the object's log line and its problems' `instance`.
    pub trace: Trace,
    /// The route's lookup for unknown outcomes (`core::key_rules::reconcile`), filled for this key.
    pub reconcile: Option<ReconcileCall>,
}

impl KeyCall {
    /// Whether this call's arrival may be answered with a replay at once, without an await
    /// before its answer (the object's hot path): it enforces, with no lookup to ask first
    /// and no job to seal. Any other call goes the whole way, even where it ends replayed.
    pub fn may_replay_at_once(&self) -> bool {
        self.step == (KeyStep::Enforce { accept_async: None }) && self.reconcile.is_none()
    }

    /// This call's arrival for the key's driver, the one place one is built: the request as
    /// the envelope describes it, `new_attempt` the id a claim it makes gets (the runtime
    /// draws it), its job's sealed request and its route's sealed lookup, if any, and
    /// observed where its plan says so.
    pub fn arrival(
        &self,
        new_attempt: AttemptId,
        accept: Option<AsyncAccept>,
        lookup: Option<Reconciling>,
    ) -> Arrival<'_> {
        let (fingerprint, policy, body_bytes) = (self.fingerprint, &self.policy, self.body_bytes);
        let observing = self.arrival_plan().observing;
        Arrival { fingerprint, new_attempt, policy, body_bytes, accept, lookup, observing }
    }

    /// How this call's arrival is served (`core::key_rules::machine::async_job::ArrivalPlan`):
    /// as a job where an enforcing call asks for one and its body fits, and with the
    /// route's lookup where it has one. An observed arrival is never a job, and looks
    /// nothing up.
    pub fn arrival_plan(&self) -> ArrivalPlan {
        match self.step {
            KeyStep::Enforce { accept_async } => {
                ArrivalPlan::new(accept_async, self.body_bytes, self.reconcile.is_some())
            }
            KeyStep::ObserveArrival | KeyStep::ObserveOutcome { .. } => ArrivalPlan::observed(),
        }
    }
}

/// What the object needs to look up an unknown outcome of this key (`core::key_rules::reconcile`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileCall {
    /// The lookup's URL, with the key in it.
    pub url: String,
    /// The status that means "never executed".
    pub not_found: u16,
    /// The lowercase names of the caller's scope headers, sent with the lookup.
    pub scope_headers: Vec<String>,
}

/// What the object is asked to do with the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyStep {
    /// Enforce: claim and forward, replay, join or refuse. With the asynchronous settings
    /// when the request prefers `respond-async` on a route that accepts it.
    Enforce { accept_async: Option<AsyncConfig> },
    /// Observe mode: record the arrival and say what enforcing would do; forward nothing.
    ObserveArrival,
    /// Observe mode: record the origin's outcome for the attempt the arrival claimed (the
    /// Worker forwarded the request itself). A `Responded` outcome's body is the call's.
    ObserveOutcome { attempt: AttemptId, outcome: ObservedOutcome },
}

/// What the origin did with an observed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObservedOutcome {
    /// The whole answer: its body is the call's body.
    Responded {
        status: u16,
        headers: Vec<(String, String)>,
    },
    /// An answer larger than the stored-size cap: the Worker kept none of it.
    Oversized {
        status: u16,
    },
    Timeout,
    /// The connection broke, or the Worker's copy of the answer did.
    Reset,
}

/// A message's headers as (name, value) pairs, in order.
pub type HeaderPairs = [(String, String)];

impl ObservedOutcome {
    /// The answer's status and headers (its body is the call's), or, for an outcome that
    /// came without an answer to read, its origin result, as the object's own forward would
    /// classify it.
    pub fn answer(&self) -> Result<(u16, &HeaderPairs), OriginResult> {
        match self {
            ObservedOutcome::Responded { status, headers } => Ok((*status, headers)),
            // The Worker read its copy only up to the stored-size cap.
            ObservedOutcome::Oversized { status } => Err(OriginResult::Oversized(*status)),
            ObservedOutcome::Timeout => Err(OriginResult::TimedOut),
            ObservedOutcome::Reset => Err(OriginResult::ResetAfterSend),
        }
    }
}

/// Why a call's envelope cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// No envelope: not a call from this worker's Worker.
    Missing,
    /// A version this release does not know.
    UnknownVersion(u8),
    /// Not a valid envelope of its version.
    Malformed,
}

impl WireError {
    /// The problem the object answers with; nothing is claimed or forwarded.
    pub fn problem(self) -> Problem {
        match self {
            WireError::UnknownVersion(version) => Problem::new(
                ProblemKind::StorageUnavailable,
                format!("The Worker and the key's object are of different releases (envelope version {version}), as for the moment a deploy takes. Nothing was stored or forwarded; retry with the same key."),
            )
            .with_retry_after(VERSION_SKEW_RETRY_SECONDS),
            WireError::Missing | WireError::Malformed => Problem::new(
                ProblemKind::InvalidConfig,
                "The key's object was called without a readable envelope. Nothing was stored or forwarded.",
            ),
        }
    }
}

/// Said in the operator's words, for the object's log line.
impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Missing => f.write_str("no envelope"),
            WireError::UnknownVersion(version) => {
                write!(f, "envelope version {version}, which this release does not know")
            }
            WireError::Malformed => f.write_str("not a valid envelope"),
        }
    }
}

impl From<CodecError> for WireError {
    fn from(_: CodecError) -> WireError {
        WireError::Malformed
    }
}

const CALL_ENFORCE: u8 = 0;
const CALL_OBSERVE_ARRIVAL: u8 = 1;
const CALL_OBSERVE_OUTCOME: u8 = 2;
const CALL_ADMIN: u8 = 3;

const OUTCOME_RESPONDED: u8 = 0;
const OUTCOME_TIMEOUT: u8 = 1;
const OUTCOME_RESET: u8 = 2;
const OUTCOME_OVERSIZED: u8 = 3;

const FLAG_PROBE_ORIGIN: u8 = 1;
const FLAG_ACCEPT_ASYNC: u8 = 2;

impl ToObject {
    /// The header value: `version ‖ call kind ‖ fields`, base64url without padding.
    pub fn encode(&self) -> String {
        let mut out = Writer::with_capacity(160);
        let reconcile = match self {
            ToObject::Key(call) => call.reconcile.as_ref(),
            ToObject::Admin(_) => None,
        };
        out.u8(if reconcile.is_some() { WIRE_VERSION } else { WIRE_VERSION_2 });
        match self {
            ToObject::Admin(operation) => {
                out.u8(CALL_ADMIN);
                out.string(operation);
            }
            ToObject::Key(call) => {
                out.u8(match call.step {
                    KeyStep::Enforce { .. } => CALL_ENFORCE,
                    KeyStep::ObserveArrival => CALL_OBSERVE_ARRIVAL,
                    KeyStep::ObserveOutcome { .. } => CALL_OBSERVE_OUTCOME,
                });
                out.raw(&call.fingerprint.0);
                out.raw(&call.scope_salt.0);
                out.string(&call.scope.encode());
                write_policy(&mut out, &call.policy);
                out.u64(call.body_bytes);
                let accept_async = match &call.step {
                    KeyStep::Enforce { accept_async } => accept_async.as_ref(),
                    _ => None,
                };
                out.u8((u8::from(call.probe_origin) * FLAG_PROBE_ORIGIN)
                    | (u8::from(accept_async.is_some()) * FLAG_ACCEPT_ASYNC));
                if let Some(accept) = accept_async {
                    out.u64(accept.deadline_ms);
                    out.u64(accept.max_backoff_ms);
                    out.u16(accept.max_sends);
                }
                if let KeyStep::ObserveOutcome { attempt, outcome } = &call.step {
                    out.u64(attempt.0);
                    match outcome {
                        ObservedOutcome::Responded { status, headers } => {
                            out.u8(OUTCOME_RESPONDED);
                            out.u16(*status);
                            out.string_pairs(headers);
                        }
                        ObservedOutcome::Oversized { status } => {
                            out.u8(OUTCOME_OVERSIZED);
                            out.u16(*status);
                        }
                        ObservedOutcome::Timeout => out.u8(OUTCOME_TIMEOUT),
                        ObservedOutcome::Reset => out.u8(OUTCOME_RESET),
                    }
                }
                out.string(&call.trace.request_id);
                out.string(&call.trace.method);
                out.string(call.trace.route.as_deref().unwrap_or_default());
                if let Some(reconcile) = reconcile {
                    out.string(&reconcile.url);
                    out.u16(reconcile.not_found);
                    out.count(reconcile.scope_headers.len());
                    for name in &reconcile.scope_headers {
                        out.string(name);
                    }
                }
            }
        }
        base64url_encode(&out.into_bytes())
    }

    /// The inverse of [`ToObject::encode`], from the header's value if there is one.
    pub fn decode(value: Option<&str>) -> Result<ToObject, WireError> {
        let bytes = base64url_decode(value.ok_or(WireError::Missing)?).ok_or(WireError::Malformed)?;
        let mut input = Reader::new(&bytes);
        let version = match input.u8()? {
            version @ (1 | WIRE_VERSION_2 | WIRE_VERSION) => version,
            other => return Err(WireError::UnknownVersion(other)),
        };
        let kind = input.u8()?;
        if kind == CALL_ADMIN {
            let operation = input.string()?;
            input.finish()?;
            return Ok(ToObject::Admin(operation));
        }
        if kind > CALL_OBSERVE_OUTCOME {
            return Err(WireError::Malformed);
        }
        let fingerprint = Digest256(input.array()?);
        let scope_salt = Digest256(input.array()?);
        let scope = ScopeLog::decode(&input.string()?).ok_or(WireError::Malformed)?;
        let policy = read_policy(&mut input)?;
        let body_bytes = input.u64()?;
        let flags = input.u8()?;
        if flags > FLAG_PROBE_ORIGIN | FLAG_ACCEPT_ASYNC
            || (flags & FLAG_ACCEPT_ASYNC != 0 && kind != CALL_ENFORCE)
        {
            return Err(WireError::Malformed);
        }
        let accept_async = if flags & FLAG_ACCEPT_ASYNC != 0 {
            let deadline_ms = input.u64()?;
            let max_backoff_ms = input.u64()?;
            let max_sends = input.u16()?;
            if max_sends == 0 {
                return Err(WireError::Malformed);
            }
            Some(AsyncConfig { prefer: true, deadline_ms, max_backoff_ms, max_sends })
        } else {
            None
        };
        let step = match kind {
            CALL_ENFORCE => KeyStep::Enforce { accept_async },
            CALL_OBSERVE_ARRIVAL => KeyStep::ObserveArrival,
            _ => {
                let attempt = AttemptId(input.u64()?);
                let outcome = match input.u8()? {
                    OUTCOME_RESPONDED => {
                        ObservedOutcome::Responded { status: input.u16()?, headers: input.string_pairs()? }
                    }
                    OUTCOME_OVERSIZED => ObservedOutcome::Oversized { status: input.u16()? },
                    OUTCOME_TIMEOUT => ObservedOutcome::Timeout,
                    OUTCOME_RESET => ObservedOutcome::Reset,
                    _ => return Err(WireError::Malformed),
                };
                KeyStep::ObserveOutcome { attempt, outcome }
            }
        };
        let trace = if version == 1 {
            Trace::default()
        } else {
            let request_id = input.string()?;
            let method = input.string()?;
            let route = Some(input.string()?).filter(|route| !route.is_empty());
            Trace { request_id, method, route }
        };
        let reconcile = if version == WIRE_VERSION {
            let url = input.string()?;
            let not_found = input.u16()?;
            let count = input.count(4)?;
            let scope_headers = (0..count).map(|_| input.string()).collect::<Result<Vec<_>, _>>()?;
            if url.is_empty() || kind != CALL_ENFORCE {
                return Err(WireError::Malformed);
            }
            Some(ReconcileCall { url, not_found, scope_headers })
        } else {
            None
        };
        input.finish()?;
        Ok(ToObject::Key(KeyCall {
            fingerprint,
            scope_salt,
            scope,
            policy,
            body_bytes,
            probe_origin: flags & FLAG_PROBE_ORIGIN != 0,
            step,
            trace,
            reconcile,
        }))
    }
}

const POLICY_VIA_CLOUDFLARE: u8 = 1;
const POLICY_RELEASE_REQUIRES_HEADER: u8 = 2;
const POLICY_OBSERVE: u8 = 4;
/// The route takes its key from another header than `Idempotency-Key`, whose name follows
/// the service binding. A policy without it is written exactly as before the flag existed,
/// so only routes that set `key_header` send the longer form;
/// a release that does not know the flag refuses it as malformed, forwarding nothing.
const POLICY_KEY_HEADER: u8 = 8;

/// The policy's fields in order: timing, waiter limits, stored-answer cap, flags, the two
/// status lists, the send cap (0: the origin does not deduplicate), the service binding
/// (empty: none), and with [`POLICY_KEY_HEADER`] the key header's lowercase name. The
/// message's own layout: what a job or a lookup stores has its own codec
/// (`core::formats::stored_terms`), so a change here changes nothing stored.
fn write_policy(out: &mut Writer, policy: &KeyTerms) {
    out.u64(policy.timing.ttl_ms);
    out.u64(policy.timing.duplicate_wait_ms);
    out.u64(policy.timing.origin_timeout_ms);
    out.u32(policy.limits.max_waiters as u32);
    out.u64(policy.limits.max_waiting_bytes);
    out.u64(policy.max_stored_response_bytes);
    out.u8((u8::from(policy.outcome.via_cloudflare) * POLICY_VIA_CLOUDFLARE)
        | (u8::from(policy.outcome.release_requires_header) * POLICY_RELEASE_REQUIRES_HEADER)
        | (u8::from(policy.mode == Mode::Observe) * POLICY_OBSERVE)
        | (u8::from(policy.key_header.is_some()) * POLICY_KEY_HEADER));
    for set in [&policy.outcome.release, &policy.outcome.unknown] {
        let statuses: Vec<u16> = set.iter().collect();
        out.u8(statuses.len() as u8);
        for status in statuses {
            out.u16(status);
        }
    }
    out.u16(policy.max_origin_attempts.unwrap_or(0));
    out.string(policy.origin_service.as_deref().unwrap_or(""));
    if let Some(name) = &policy.key_header {
        out.string(name);
    }
}

fn read_policy(input: &mut Reader<'_>) -> Result<KeyTerms, WireError> {
    let timing =
        Timing { ttl_ms: input.u64()?, duplicate_wait_ms: input.u64()?, origin_timeout_ms: input.u64()? };
    let limits = WaiterLimits { max_waiters: input.u32()? as usize, max_waiting_bytes: input.u64()? };
    let max_stored_response_bytes = input.u64()?;
    let flags = input.u8()?;
    if flags > POLICY_VIA_CLOUDFLARE | POLICY_RELEASE_REQUIRES_HEADER | POLICY_OBSERVE | POLICY_KEY_HEADER {
        return Err(WireError::Malformed);
    }
    let mut statuses = || -> Result<StatusSet, WireError> {
        let count = usize::from(input.u8()?);
        let list = (0..count).map(|_| input.u16()).collect::<Result<Vec<u16>, _>>()?;
        let set = StatusSet::of(&list).ok_or(WireError::Malformed)?;
        // One set has one encoding: ascending, no repeats.
        if set.iter().collect::<Vec<_>>() != list {
            return Err(WireError::Malformed);
        }
        Ok(set)
    };
    let release = statuses()?;
    let unknown = statuses()?;
    let max_origin_attempts = match input.u16()? {
        0 => None,
        sends => Some(sends),
    };
    let origin_service = match input.string()? {
        name if name.is_empty() => None,
        name if is_binding_name(&name) => Some(name),
        _ => return Err(WireError::Malformed),
    };
    let key_header = if flags & POLICY_KEY_HEADER != 0 {
        // One name has one encoding: lower case, and never the default's (which is
        // written as no name at all).
        match input.string()? {
            name if is_header_name(&name)
                && name == name.to_ascii_lowercase()
                && name != IDEMPOTENCY_KEY.lowercase =>
            {
                Some(name)
            }
            _ => return Err(WireError::Malformed),
        }
    } else {
        None
    };
    Ok(KeyTerms {
        timing,
        limits,
        outcome: OutcomeTable {
            release,
            unknown,
            release_requires_header: flags & POLICY_RELEASE_REQUIRES_HEADER != 0,
            via_cloudflare: flags & POLICY_VIA_CLOUDFLARE != 0,
        },
        max_stored_response_bytes,
        max_origin_attempts,
        mode: if flags & POLICY_OBSERVE != 0 { Mode::Observe } else { Mode::Enforce },
        origin_service,
        key_header,
    })
}

/// The object's mark on its answer: plain (`1`), or an observe-mode arrival's or
/// outcome's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answered {
    Plain,
    /// Observe mode: the decision enforcing would have made, and the attempt the arrival
    /// claimed (which the Worker names again with the outcome).
    Observed {
        decision: Decision,
        claimed: Option<AttemptId>,
    },
}

impl Answered {
    /// `1`, or `<decision token>` with ` <attempt in 16 hex digits>` when one was claimed.
    pub fn encode(&self) -> String {
        match self {
            Answered::Plain => ANSWERED_PLAIN.to_owned(),
            Answered::Observed { decision, claimed: None } => decision.token(),
            Answered::Observed { decision, claimed: Some(AttemptId(attempt)) } => {
                format!("{} {attempt:016x}", decision.token())
            }
        }
    }

    /// The inverse of [`Answered::encode`]; `None` for anything else.
    pub fn decode(value: &str) -> Option<Answered> {
        if value == ANSWERED_PLAIN {
            return Some(Answered::Plain);
        }
        let (token, attempt) = match value.split_once(' ') {
            Some((token, attempt)) => (token, Some(attempt)),
            None => (value, None),
        };
        let decision = Decision::from_token(token)?;
        let claimed = match attempt {
            None => None,
            Some(hex) if hex.len() == 16 => Some(AttemptId(u64::from_str_radix(hex, 16).ok()?)),
            Some(_) => return None,
        };
        Some(Answered::Observed { decision, claimed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The policy every stored-format fixture uses: one sample of a full policy.
    use crate::core::edge_rules::scope::ScopeKind;
    use crate::core::format_fixtures::policy;
    use proptest::prelude::*;

    fn call(step: KeyStep) -> ToObject {
        ToObject::Key(KeyCall {
            fingerprint: Digest256([7; 32]),
            scope_salt: Digest256([9; 32]),
            scope: ScopeLog { kind: ScopeKind::Credential, unverified: None },
            policy: policy(),
            body_bytes: 1234,
            probe_origin: true,
            step,
            trace: Trace {
                request_id: "8f1c2a3b4d5e6f70-AMS".into(),
                method: "POST".into(),
                route: Some("/v1/charges*".into()),
            },
            reconcile: None,
        })
    }

    /// Only a plain enforcing call takes the object's hot path: a lookup may have to be
    /// asked first, a job's request sealed, and observing records rather than replays.
    #[test]
    fn only_a_plain_enforcing_call_may_be_replayed_at_once() {
        let key_call = |step| match call(step) {
            ToObject::Key(call) => call,
            ToObject::Admin(_) => unreachable!(),
        };
        assert!(key_call(KeyStep::Enforce { accept_async: None }).may_replay_at_once());
        let accept_async = Some(crate::core::key_rules::machine::async_job::AsyncConfig::default());
        assert!(!key_call(KeyStep::Enforce { accept_async }).may_replay_at_once());
        assert!(!key_call(KeyStep::ObserveArrival).may_replay_at_once());
        let reconcile =
            Some(ReconcileCall { url: "http://127.0.0.1/k".into(), not_found: 404, scope_headers: vec![] });
        let looked_up = KeyCall { reconcile, ..key_call(KeyStep::Enforce { accept_async: None }) };
        assert!(!looked_up.may_replay_at_once());
    }

    /// An arrival carries its call's request, the attempt drawn for it, and is observed
    /// only where the call observes.
    #[test]
    fn a_calls_arrival_carries_its_request_and_observes_only_when_the_call_does() {
        let key_call = |step| match call(step) {
            ToObject::Key(call) => call,
            ToObject::Admin(_) => unreachable!(),
        };
        let enforced = KeyCall { body_bytes: 77, ..key_call(KeyStep::Enforce { accept_async: None }) };
        let arrival = enforced.arrival(AttemptId(7), None, None);
        let carried = (arrival.fingerprint, arrival.new_attempt, arrival.body_bytes, arrival.observing);
        assert_eq!(carried, (enforced.fingerprint, AttemptId(7), 77, false));
        assert!(std::ptr::eq(arrival.policy, &enforced.policy));
        assert!(key_call(KeyStep::ObserveArrival).arrival(AttemptId(7), None, None).observing);
    }

    /// A job only where an enforcing call asks for one with a body that fits; the lookup
    /// wherever the route has one.
    #[test]
    fn an_arrivals_plan_follows_its_call() {
        use crate::core::key_rules::machine::async_job::MAX_STORED_REQUEST_BODY_BYTES;
        let key_call = |step| match call(step) {
            ToObject::Key(call) => call,
            ToObject::Admin(_) => unreachable!(),
        };
        let config = crate::core::key_rules::machine::async_job::AsyncConfig::default();
        let job = key_call(KeyStep::Enforce { accept_async: Some(config) });
        let enforced = |accept, reconcile| ArrivalPlan { accept, reconcile, observing: false };
        assert_eq!(job.arrival_plan(), enforced(Some(config), false));
        let too_large = KeyCall { body_bytes: MAX_STORED_REQUEST_BODY_BYTES + 1, ..job.clone() };
        assert_eq!(too_large.arrival_plan().accept, None);
        let reconcile =
            Some(ReconcileCall { url: "http://127.0.0.1/k".into(), not_found: 404, scope_headers: vec![] });
        let looked_up = KeyCall { reconcile: reconcile.clone(), ..job };
        assert_eq!(looked_up.arrival_plan(), enforced(Some(config), true));
        // Observed, even on a route with a lookup: recorded, never sealed or looked up.
        let observed = KeyCall { reconcile, ..key_call(KeyStep::ObserveArrival) };
        assert_eq!(observed.arrival_plan(), ArrivalPlan { accept: None, reconcile: false, observing: true });
    }

    /// A Worker of the release before (envelope version 1, no trace) still reaches the
    /// object while a deploy rolls out: its calls are read, with an empty trace.
    #[test]
    fn observed_outcomes_without_an_answer_end_as_the_objects_forward_would() {
        let headers = vec![("content-type".to_owned(), "text/plain".to_owned())];
        let responded = ObservedOutcome::Responded { status: 201, headers: headers.clone() };
        assert_eq!(responded.answer(), Ok((201, &headers[..])), "its body is read");
        assert_eq!(ObservedOutcome::Oversized { status: 200 }.answer(), Err(OriginResult::Oversized(200)));
        assert_eq!(ObservedOutcome::Timeout.answer(), Err(OriginResult::TimedOut));
        // A broken copy is unknown, never "not sent": the request was forwarded.
        assert_eq!(ObservedOutcome::Reset.answer(), Err(OriginResult::ResetAfterSend));
    }

    #[test]
    fn a_version_1_envelope_is_read_with_an_empty_trace() {
        for sample in samples() {
            let ToObject::Key(call) = sample else { continue };
            if call.reconcile.is_some() {
                continue;
            }
            let untraced = KeyCall { trace: Trace::default(), ..call };
            let mut bytes = base64url_decode(&ToObject::Key(untraced.clone()).encode()).unwrap();
            // Version 2 ends a key call with the trace's three strings, empty here: each is
            // its length alone (one zero byte per string in the codec's layout).
            let trace_len = {
                let mut out = Writer::with_capacity(8);
                out.string("");
                out.string("");
                out.string("");
                out.into_bytes().len()
            };
            bytes.truncate(bytes.len() - trace_len);
            bytes[0] = 1;
            assert_eq!(ToObject::decode(Some(&base64url_encode(&bytes))), Ok(ToObject::Key(untraced)));
        }
    }

    fn samples() -> Vec<ToObject> {
        let accept =
            AsyncConfig { prefer: true, deadline_ms: 3_600_000, max_backoff_ms: 30_000, max_sends: 5 };
        vec![
            call(KeyStep::Enforce { accept_async: None }),
            call(KeyStep::Enforce { accept_async: Some(accept) }),
            call(KeyStep::ObserveArrival),
            call(KeyStep::ObserveOutcome {
                attempt: AttemptId(u64::MAX),
                outcome: ObservedOutcome::Responded {
                    status: 201,
                    headers: vec![("content-type".into(), "application/json".into())],
                },
            }),
            call(KeyStep::ObserveOutcome { attempt: AttemptId(1), outcome: ObservedOutcome::Timeout }),
            call(KeyStep::ObserveOutcome {
                attempt: AttemptId(3),
                outcome: ObservedOutcome::Oversized { status: 200 },
            }),
            call(KeyStep::ObserveOutcome { attempt: AttemptId(2), outcome: ObservedOutcome::Reset }),
            ToObject::Admin("inspect".into()),
            ToObject::Key(KeyCall {
                reconcile: Some(ReconcileCall {
                    url: "https://api.example/v1/charges?idempotency_key=order%201".into(),
                    not_found: 404,
                    scope_headers: vec!["authorization".into(), "stripe-account".into()],
                }),
                ..match call(KeyStep::Enforce { accept_async: None }) {
                    ToObject::Key(call) => call,
                    ToObject::Admin(_) => unreachable!(),
                }
            }),
            ToObject::Key(KeyCall {
                policy: KeyTerms { key_header: Some("paypal-request-id".into()), ..policy() },
                ..match call(KeyStep::Enforce { accept_async: Some(accept) }) {
                    ToObject::Key(call) => call,
                    ToObject::Admin(_) => unreachable!(),
                }
            }),
        ]
    }

    #[test]
    fn every_call_round_trips() {
        for sample in samples() {
            let encoded = sample.encode();
            assert!(
                encoded.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{encoded}"
            );
            assert_eq!(ToObject::decode(Some(&encoded)), Ok(sample));
        }
    }

    #[test]
    fn an_unknown_version_is_503_and_never_guessed() {
        let mut bytes = base64url_decode(&samples()[0].encode()).unwrap();
        bytes[0] = WIRE_VERSION + 1;
        let error = ToObject::decode(Some(&base64url_encode(&bytes))).unwrap_err();
        assert_eq!(error, WireError::UnknownVersion(WIRE_VERSION + 1));
        let problem = error.problem();
        assert_eq!((problem.status(), problem.retry_after), (503, Some(VERSION_SKEW_RETRY_SECONDS)));
        assert_eq!(ToObject::decode(None), Err(WireError::Missing));
        assert_eq!(ToObject::decode(Some("not base64!")), Err(WireError::Malformed));
        assert_eq!(WireError::Missing.problem().status(), 500);
    }

    #[test]
    fn a_cut_or_lengthened_envelope_is_refused() {
        for sample in samples() {
            let bytes = base64url_decode(&sample.encode()).unwrap();
            for len in 0..bytes.len() {
                assert!(
                    ToObject::decode(Some(&base64url_encode(&bytes[..len]))).is_err(),
                    "{sample:?} cut at {len}"
                );
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(ToObject::decode(Some(&base64url_encode(&longer))), Err(WireError::Malformed));
        }
    }

    #[test]
    fn the_answer_mark_round_trips() {
        for answered in [
            Answered::Plain,
            Answered::Observed { decision: Decision::Executed, claimed: Some(AttemptId(0xabc)) },
            Answered::Observed { decision: Decision::Rejected(ProblemKind::KeyReused), claimed: None },
        ] {
            assert_eq!(Answered::decode(&answered.encode()), Some(answered));
        }
        assert_eq!(Answered::decode("2"), None);
        assert_eq!(Answered::decode("executed 12"), None);
    }

    proptest! {
        /// Whatever the header holds, decoding never panics, and what decodes re-encodes
        /// to the same bytes (one call, one encoding).
        #[test]
        fn any_header_value_decodes_or_is_refused(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let value = base64url_encode(&bytes);
            if let Ok(call) = ToObject::decode(Some(&value)) {
                prop_assert_eq!(call.encode(), value);
            }
        }
    }
}
