//! The object's half of reconciliation (`core::key_rules::reconcile` has the rules; the key's
//! driver, `core::key_rules::key_state`, every decision: who runs a lookup and who waits,
//! within which caps, and what an arrival whose lookup could not be sealed gets): the lookup
//! sealed with a claim, the one a retry makes at once when it finds the outcome unknown, and
//! the one the alarm makes (each a `Lookup` action, [`KeyObject::carry_out_lookup`]).
//!
//! Every await comes before the decision it feeds: a retry's lookup is the first step of
//! its arrival (`KeyState::handle_call`: `Lookup`, then `Arrive`), so it runs, and its
//! verdict is written, before the retry itself is decided on the record as it then is, in
//! the object's one carry-out loop. A retry that waits on a running lookup reads its body
//! first (the one that forwards once the key is released needs it, and a body left unread
//! would hold the connection).
//!
//! Never logged: the lookup's URL (it holds the key), its headers (credentials) or its
//! answer. The line says the object, the decision and the lookup's status.

use futures_channel::oneshot;
use web_sys::Headers;

use super::object::{KeyObject, Start, Turn};
use super::{body, now_ms, origin};
use crate::core::edge_rules::wire::{KeyCall, ReconcileCall};
use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::job::StoredRequest;
use crate::core::formats::key_record::AttemptId;
use crate::core::formats::reconciling::Reconciling;
use crate::core::key_rules::key_state::{Decided, LookupAsker, LookupTurn};
use crate::core::key_rules::reconcile;
use crate::core::vocabulary::key_terms::KeyTerms;
use crate::core::vocabulary::problem::Problem;
use worker::console_error;

impl KeyObject {
    /// The route's lookup, sealed for a claim this arrival may make: bound to the claim's
    /// time (`now`, which the arrival is then decided at) and fingerprint. `Ok(None)` where
    /// the key is held (no claim follows); `Err` where it cannot be sealed, which is logged
    /// here (the key's driver then lets the arrival claim nothing).
    pub(super) async fn sealed_lookup(
        &self,
        headers: &Headers,
        call: &KeyCall,
        reconcile: &ReconcileCall,
        now: u64,
    ) -> std::result::Result<Option<Reconciling>, ()> {
        if !matches!(self.record(), Ok(None)) {
            return Ok(None);
        }
        let request = lookup_request(headers, reconcile, call.scope_salt);
        match self.store.seal_request((now, &call.fingerprint), &request).await {
            Ok(sealed) => Ok(Some(reconcile::kept_for_claim(sealed, now, reconcile.not_found, &call.policy))),
            Err(why) => {
                console_error!("{}: the lookup cannot be sealed; nothing is claimed: {why}", self.subject());
                Err(())
            }
        }
    }

    /// A step's `Lookup` of `attempt`'s unknown outcome: a retry's (the first step of its
    /// arrival, `Turn`'s start an arrival), asked with this request's scope headers; or the
    /// alarm's, with the lookup the claim sealed (one that cannot be opened fails the
    /// alarm's run). The driver gives the turn: ask once, or wait for the lookup running (a
    /// retry reads its body first, kept in `turn` for the arrival that follows), or, past
    /// the waiters' caps, `Err`: the problem to answer at once instead of the arrival. The
    /// verdict's step, written, to join the loop.
    pub(super) async fn carry_out_lookup(
        &self,
        attempt: AttemptId,
        turn: &mut Turn<'_>,
    ) -> std::result::Result<Option<Decided>, Problem> {
        let (asker, request, not_found, policy) = match &turn.start {
            Start::Arrival { req, call, .. } => {
                let Some(reconcile) = call.reconcile.as_ref() else { return Ok(None) };
                let request = lookup_request(&req.headers(), reconcile, call.scope_salt);
                let asker = LookupAsker::Retry { body_bytes: call.body_bytes };
                (asker, request, reconcile.not_found, Box::new(call.policy.clone()))
            }
            Start::Alarm { .. } => {
                let Some(record) = self.cached_record() else { return Ok(None) };
                let Some(reconciling) = record.reconciling() else { return Ok(None) };
                let binding = Some((reconciling.bound_at, &record.fingerprint()));
                let what = "the stored lookup cannot be opened";
                let opened = self.open_stored(&reconciling.sealed_lookup, binding, what).await;
                let Ok(request) = opened.map_err(|why| turn.fails = Some(why)) else { return Ok(None) };
                // A reconciled answer is sealed under the caller's scope, which the lookup carries.
                let _ = self.store.scope_salt.set(Digest256(request.scope_salt));
                (LookupAsker::Alarm, request, reconciling.not_found, reconciling.policy.clone())
            }
        };
        let lookup_turn = self.key.borrow_mut().handle_lookup_turn(attempt, asker, &policy.limits);
        match lookup_turn {
            LookupTurn::Run(over) => Ok(self.look_up(attempt, over, &request, not_found, &policy).await),
            LookupTurn::Wait(running) => {
                if let Start::Arrival { req, body, consumed, .. } = &mut turn.start {
                    *body = Some(body::read_whole(req).await);
                    *consumed = true;
                }
                // Its end, whatever it was: this arrival is decided on the record as it is then.
                let _ = running.await;
                Ok(None)
            }
            // Never for the alarm, which is not counted.
            LookupTurn::Full(problem) => Err(problem),
        }
    }

    /// One lookup of `attempt`'s outcome, whose turn the driver gave this caller
    /// ([`LookupTurn::Run`], in this same turn, with `over`): the verdict stepped, written,
    /// logged and published; then its waiters are woken (`over` let go). The verdict's step,
    /// to carry out (the alarm it asks for); `None` where the record keeps no lookup any
    /// more, and nothing is asked.
    async fn look_up(
        &self,
        attempt: AttemptId,
        over: oneshot::Sender<()>,
        request: &StoredRequest,
        not_found: u16,
        policy: &KeyTerms,
    ) -> Option<Decided> {
        let lookup_headers = self.key.borrow_mut().lookup_headers(attempt, &request.headers)?;
        let started = now_ms();
        let headers = worker::Headers::from_iter(&lookup_headers).0;
        let answer = origin::look_up(&self.env, &request.target, &headers, policy).await;
        let origin_ms = now_ms().saturating_sub(started);
        let origin_status = answer.as_ref().map(|(status, _)| *status);
        let verdict = reconcile::verdict(answer, not_found);
        let jitter = js_sys::Math::random();
        let pending = self.key.borrow_mut().handle_reconciled(attempt, verdict, policy, jitter, now_ms());
        let decided = self.write(pending).await;
        self.log_background(decided.decision, origin_status, Some(origin_ms), false);
        self.key.borrow_mut().handle_lookup_over(attempt);
        drop(over);
        Some(decided)
    }
}

/// The lookup as this request would send it (`core::key_rules::reconcile::lookup_request`).
fn lookup_request(headers: &Headers, reconcile: &ReconcileCall, scope_salt: Digest256) -> StoredRequest {
    let header = |name: &str| headers.get(name).ok().flatten();
    reconcile::lookup_request(&reconcile.url, &reconcile.scope_headers, header, scope_salt.0)
}
