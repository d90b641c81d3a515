//! The object's half of reconciliation (`core::reconcile` has the rules; the key's driver,
//! `core::key_state`, every decision): the lookup sealed with a claim, the lookup a retry
//! makes at once when it finds the outcome unknown, and the one the alarm makes.
//!
//! Every await comes before the decision it feeds: a retry's lookup runs, and its verdict
//! is written, before the retry itself is decided on the record as it then is. One lookup
//! runs per unknown outcome at a time (`runtime::settlement`): a retry that arrives while
//! one runs waits for it instead of asking again, up to `MAX_WAITERS_PER_KEY` of them;
//! past that, a retry is answered on the record as it is (outcome-unknown), as a duplicate
//! past the waiter cap is.
//!
//! Never logged: the lookup's URL (it holds the key), its headers (credentials) or its
//! answer. The line says the object, the decision and the lookup's status.

use web_sys::Headers;

use super::object::KeyObject;
use super::platform::console_error;
use super::settlement::LookupTurn;
use super::{metrics, now_ms, origin, outcome_queue, settings};
use crate::core::async_job::StoredRequest;
use crate::core::config::ObjectPolicy;
use crate::core::fingerprint::Digest256;
use crate::core::log::RequestLog;
use crate::core::machine::Action;
use crate::core::reconcile::{self, Reconciling};
use crate::core::record::AttemptId;
use crate::core::wire::{KeyCall, ReconcileCall};

/// When an alarm whose lookup cannot be opened looks again.
const AFTER_UNOPENED_LOOKUP_MS: u64 = 60_000;

impl KeyObject {
    /// Before an arrival on a route with a lookup is decided (asynchronous requests aside:
    /// jobs do not reconcile): an unknown outcome is looked up ([`Self::reconcile_for_retry`]),
    /// and the lookup is sealed for a claim ([`Self::sealed_lookup`]). The time the arrival is
    /// then decided at (after those awaits; the seal is bound to it), and the sealed lookup.
    pub(super) async fn reconcile_before_arrival(
        &self,
        headers: &Headers,
        call: &KeyCall,
        may_reconcile: bool,
        now: u64,
    ) -> (u64, Option<Reconciling>) {
        let Some(reconcile) = call.reconcile.as_ref().filter(|_| may_reconcile) else { return (now, None) };
        self.reconcile_for_retry(headers, call, reconcile).await;
        let now = now_ms();
        (now, self.sealed_lookup(headers, call, reconcile, now).await)
    }

    /// The route's lookup, sealed for a claim this arrival may make: bound to the claim's
    /// time (`now`, which the arrival is then decided at) and fingerprint. `None` where the
    /// key is held (no claim follows) or the lookup cannot be sealed; the latter is logged,
    /// and costs only the alarm's lookups (a retry still looks up with its own request).
    async fn sealed_lookup(
        &self,
        headers: &Headers,
        call: &KeyCall,
        reconcile: &ReconcileCall,
        now: u64,
    ) -> Option<Reconciling> {
        if !matches!(self.record(), Ok(None)) {
            return None;
        }
        let settings = settings::get(&self.env);
        let Ok(Some(ring)) = &settings.storage_keys else {
            console_error!("object {}: no STORAGE_ENCRYPTION_KEYS to seal the lookup", self.short_id());
            return None;
        };
        let request = lookup_request(headers, reconcile, call.scope_salt);
        let binding = (now, &call.fingerprint);
        match self.store.sealer.seal_request(ring, self.object_id(), binding, &request).await {
            Ok(sealed_lookup) => Some(Reconciling {
                sealed_lookup,
                bound_at: now,
                not_found: reconcile.not_found,
                asked: 0,
                next_at: 0,
                policy: Box::new(call.policy.clone()),
                // The Worker forwards the key, and built this URL, in its one spelling.
                spelling_known: true,
            }),
            Err(error) => {
                console_error!("object {}: sealing the lookup failed: {}", self.short_id(), error);
                None
            }
        }
    }

    /// A retry on a route with a lookup: if the key's outcome is unknown (or its claim's
    /// owner is gone, past its lease), it is looked up once, with this request's scope
    /// headers, before the retry is decided.
    async fn reconcile_for_retry(&self, headers: &Headers, call: &KeyCall, reconcile: &ReconcileCall) {
        if self.record().is_err() {
            return;
        }
        let Some(attempt) = self.key.borrow().reconcile_first(call.fingerprint, now_ms()) else { return };
        let request = lookup_request(headers, reconcile, call.scope_salt);
        self.look_up(attempt, &request, reconcile.not_found, &call.policy).await;
    }

    /// The alarm's lookup of `attempt`'s unknown outcome, with the lookup the claim sealed.
    /// An error is thrown to the platform, which retries the alarm.
    pub(super) async fn reconcile_from_alarm(&self, attempt: AttemptId) -> std::result::Result<(), String> {
        let Some(record) = self.cached_record() else { return Ok(()) };
        let Some(reconciling) = record.reconciling() else { return Ok(()) };
        let settings = settings::get(&self.env);
        let ring = settings.storage_keys.as_ref().ok().and_then(Option::as_ref);
        let binding = Some((reconciling.bound_at, &record.fingerprint()));
        let opened =
            self.store.sealer.open_request(ring, self.object_id(), binding, &reconciling.sealed_lookup).await;
        let request = match opened {
            Ok(request) => request,
            Err(error) => {
                // Nothing is asked unopened; look again later (the key may come back into
                // the ring), whatever becomes of the platform's retries.
                self.store.set_alarm(now_ms().saturating_add(AFTER_UNOPENED_LOOKUP_MS)).await;
                return Err(format!("the stored lookup cannot be opened: {error}"));
            }
        };
        // A reconciled answer is sealed under the caller's scope, which the lookup carries.
        let _ = self.store.scope_salt.set(Digest256(request.scope_salt));
        if self.look_up(attempt, &request, reconciling.not_found, &reconciling.policy).await {
            Ok(())
        } else {
            Err("the reconciliation could not be recorded; the alarm runs again".to_owned())
        }
    }

    /// One lookup of `attempt`'s outcome (or a wait for the one running): the verdict
    /// stepped, written, logged and published, and the alarm it asks for set. Whether it
    /// all held (a lookup waited for counts as held).
    async fn look_up(
        &self,
        attempt: AttemptId,
        request: &StoredRequest,
        not_found: u16,
        policy: &ObjectPolicy,
    ) -> bool {
        let over = match self.live.begin_lookup(attempt, &policy.limits) {
            LookupTurn::Run(over) => over,
            LookupTurn::Wait(running) => {
                running.wait().await;
                return true;
            }
            // The one that runs sets what comes next.
            LookupTurn::Full => return true,
        };
        let started = now_ms();
        let answer = match Headers::new() {
            Ok(headers) => {
                for (name, value) in &request.headers {
                    let _ = headers.append(name, value);
                }
                origin::look_up(&self.env, &request.target, &headers, policy).await
            }
            // Nothing asked: as a lookup that got no answer.
            Err(_) => None,
        };
        let origin_ms = now_ms().saturating_sub(started);
        let origin_status = answer.as_ref().map(|(status, _)| *status);
        let verdict = reconcile::verdict(answer, not_found);
        let jitter = js_sys::Math::random();
        let pending = self.key.borrow_mut().handle_reconciled(attempt, verdict, policy, jitter, now_ms());
        let (decided, written) = self.write_verdict(pending).await;
        let mut held = written;
        for action in &decided.step.actions {
            if let Action::SetAlarm(at) = action {
                held &= self.store.set_alarm(*at).await;
            }
        }
        if let Some(decision) = decided.decision {
            let object = Some(self.object_id().to_owned());
            let status = origin_status.unwrap_or(0);
            let log = RequestLog {
                origin_status,
                origin_ms: Some(origin_ms),
                ..RequestLog::new(object, decision, status, None)
            };
            metrics::record(&self.env, &log);
            outcome_queue::publish(&self.env, self.object_id(), decision, origin_status, false);
        }
        self.live.end_lookup(attempt);
        drop(over);
        held
    }
}

/// The lookup as this request would send it: `GET` of the route's URL for the key, with
/// the caller's scope headers as the request carries them.
fn lookup_request(headers: &Headers, reconcile: &ReconcileCall, scope_salt: Digest256) -> StoredRequest {
    let headers = reconcile
        .scope_headers
        .iter()
        .filter_map(|name| headers.get(name).ok().flatten().map(|value| (name.clone(), value)))
        .collect();
    StoredRequest {
        scope_salt: scope_salt.0,
        method: "GET".to_owned(),
        target: reconcile.url.clone(),
        headers,
        body: Vec::new(),
    }
}
