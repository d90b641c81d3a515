//! The object's half of asynchronous acceptance (`core::key_rules::machine::async_job` has the rules): a
//! request that prefers `respond-async` is sealed and stored with its claim, answered 202,
//! and executed from the object's one alarm, which also does the expiry clean-up.
//!
//! Every await comes before the decision it feeds: an arrival reads and seals its request
//! first (`sealed_for_later`), then goes the way every arrival goes (`KeyObject::arrival`):
//! the driver steps on the record as it is after those awaits (never a copy from before
//! them), and the claim, with the sealed request, is written in the same turn. The alarm
//! opens the stored request first (`on_alarm`), then steps on the fresh record, and claims
//! the send durably (with its lease, and the alarm for that lease) before anything is
//! sent: the send is the carry-out loop's `Forward` of an alarm's turn (`send_job`), tied to
//! no client connection (a send a restart orphans: `core::key_rules::machine::async_job` rule 4).
//!
//! Never logged: the request, its headers or body, the key. The log line names the object
//! id digest and the decision only.

use std::sync::Arc;

use js_sys::Uint8Array;
use wasm_bindgen::JsValue;

use super::{metrics, now_ms, random_u64, settings, JsResult, KeyObject, Start, Turn};
use crate::core::edge_rules::log::RequestLog;
use crate::core::edge_rules::wire::KeyCall;
use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::job::StoredRequest;
use crate::core::formats::key_record::{AttemptId, KeyRecord};
use crate::core::key_rules::key_state::{look_again_at, Decided};
use crate::core::key_rules::machine::async_job::{
    no_key_ring_to_seal_requests, retry_after_in, AsyncAccept, AsyncConfig,
};
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::fault::{Fault, FaultSource, PlatformCall, Stage, StorageOperation};
use crate::core::vocabulary::problem::{Problem, ProblemKind};
use crate::runtime::boundary::header_lines;
use crate::runtime::origin::{self, AnswerBody, OriginAnswer, Outgoing};
use crate::runtime::outcome_queue;
use worker::console_error;

/// A job's request that could not be read whole (its body, its headers, the call's scope)
/// before anything was claimed.
const UNREADABLE_REQUEST: Fault =
    Fault { source: FaultSource::Platform { what: PlatformCall::Request }, stage: Stage::BeforeClaim };

impl KeyObject {
    /// An arrival that asks for asynchronous acceptance: its request (its body's `read`)
    /// sealed, bound to the claim's time (`now`) and fingerprint, ready to be stored with
    /// the claim. The problem to answer when it cannot be (nothing is claimed then).
    pub(super) async fn sealed_for_later(
        &self,
        req: &web_sys::Request,
        read: JsResult,
        call: &KeyCall,
        config: AsyncConfig,
        now: u64,
    ) -> std::result::Result<AsyncAccept, Problem> {
        let headers = &req.headers();
        let body = match read {
            Ok(buffer) => Uint8Array::new(&buffer).to_vec(),
            Err(_) => return Err(UNREADABLE_REQUEST.problem()),
        };
        // The Worker refuses this configuration; an object never stores a request unsealed
        // whatever it is handed.
        if self.store.ring().is_none() {
            return Err(no_key_ring_to_seal_requests());
        }
        let Some(salt) = self.store.scope_salt.get() else { return Err(UNREADABLE_REQUEST.problem()) };
        let request = StoredRequest {
            scope_salt: salt.0,
            method: req.method(),
            target: req.url(),
            // Unreadable only where a header holds a line feed, which the Worker refused
            // already: nothing is sealed or claimed then.
            headers: header_lines(headers).map_err(|_| UNREADABLE_REQUEST.problem())?.for_job(),
            body,
        };
        match self.store.seal_request((now, &call.fingerprint), &request).await {
            Ok(sealed_request) => Ok(AsyncAccept {
                sealed_request,
                policy: call.policy.clone(),
                probe_origin: call.probe_origin,
                config,
            }),
            Err(error) => {
                let fault = Fault::storage(StorageOperation::Seal, Stage::BeforeClaim);
                Err(self.logged(fault, "sealing the request", &error))
            }
        }
    }

    /// The alarm's run: a job's stored request opened first (an await), then the step
    /// decided on the fresh record and checked by the driver (a send goes out only as the
    /// request that was opened), written and carried out: the key stepped as its job, or
    /// cleaned up and an unknown outcome due looked up (`runtime::reconcile`). An error is
    /// thrown to the platform, which retries the alarm.
    pub(super) async fn on_alarm(&self) -> std::result::Result<(), String> {
        // An observed claim whose outcome never came ends with its lease (`KeyState`).
        self.key.borrow_mut().expire_observed(now_ms());
        let runs = self.alarm_runs.get();
        self.alarm_runs.set(runs.saturating_add(1));
        if let Some(why) = settings::get(&self.env).fault_injection.alarm_run_fails(runs) {
            return Err(why);
        }
        if let Err(error) = self.record() {
            // A corrupt record is still a record: keep it (never forward unprotected),
            // and look again later, whatever becomes of the platform's retries.
            self.store.set_alarm(look_again_at(now_ms())).await;
            return Err(format!("could not read the record: {error}"));
        }
        let mut opened = None;
        let to_open = self.key.borrow().job_request();
        if let Some((sealed, binding)) = to_open {
            let binding = binding.as_ref().map(|(claimed_at, fingerprint)| (*claimed_at, fingerprint));
            let request = self.open_stored(&sealed, binding, "the stored request cannot be opened").await?;
            opened = Some((sealed, request));
        }
        // Fresh: whatever happened while the request was opened (a poll, a purge).
        self.record().map_err(|error| format!("could not read the record: {error}"))?;
        let pending = self.key.borrow_mut().handle_alarm_run(AttemptId(random_u64()), now_ms());
        let sealed = opened.as_ref().map(|(sealed, _)| &sealed[..]);
        self.key.borrow().check_job_send(&pending, sealed)?;
        let decided = self.write(pending).await;
        self.log_background(decided.decision, None, None, true);
        let mut turn =
            Turn::new(Start::Alarm { request: opened.map(|(_, request)| request) }, self.request_log(None));
        self.carry_out(decided, &mut turn).await.fails_alarm.map_or(Ok(()), |why| Err(why.to_owned()))
    }

    /// A job's `Forward`: its request sent as `attempt` (a send has no waiters: a duplicate
    /// that arrives meanwhile is told it is in progress), and the outcome stepped, written
    /// and logged.
    pub(super) async fn send_job(
        &self,
        attempt: AttemptId,
        request: Option<StoredRequest>,
        turn: &mut Turn<'_>,
    ) -> Option<Decided> {
        let job = self.cached_record().as_ref().and_then(KeyRecord::async_job).cloned();
        let (Some(job), Some(request)) = (job, request) else {
            self.key.borrow_mut().handle_send_over(attempt);
            turn.fails = Some("the job is gone");
            return None;
        };
        let policy = &job.policy;
        // The answer is sealed under the caller's scope, which the request carries.
        let _ = self.store.scope_salt.set(Digest256(request.scope_salt));
        let headers = worker::Headers::from_iter(&request.headers).0;
        let body: JsValue = Uint8Array::from(&request.body[..]).into();
        let started = now_ms();
        let outgoing =
            Outgoing { target: &request.target, method: &request.method, headers: &headers, body: &body };
        let (result, mut answer) = origin::send(&self.env, outgoing, policy, job.probe_origin).await;
        drop(request);
        let origin_ms = now_ms().saturating_sub(started);
        let origin_status = answer.as_ref().map(|answer| answer.status);
        let retry_after_ms = answer.as_ref().and_then(|answer| retry_after_in(&answer.headers, now_ms()));
        let stored = answer.as_mut().and_then(OriginAnswer::take_storable).map(Arc::new);
        if let Some(AnswerBody::Streamed(stream)) = answer.map(|answer| answer.body) {
            // Too large to store: nobody waits for it; let it go.
            let _ = wasm_bindgen_futures::JsFuture::from(stream.cancel()).await;
        }
        let jitter = js_sys::Math::random();
        let pending = self.key.borrow_mut().handle_job_finished(
            attempt,
            result,
            stored,
            policy,
            retry_after_ms,
            jitter,
            now_ms(),
        );
        // A failed write keeps the claim, with its lease and its alarm: afterwards it reads
        // as an unknown outcome, never as "not executed".
        let decided = self.write(pending).await;
        let decision = decided.decision.or(Some(Decision::Rejected(ProblemKind::StorageUnavailable)));
        self.log_background(decision, origin_status, Some(origin_ms), true);
        Some(decided)
    }

    /// A stored request (a job's, or a claim's lookup) opened for the alarm. Nothing is
    /// sent unopened: where it cannot be, the alarm looks again later (the key may come
    /// back into the ring), whatever becomes of the platform's retries, and its run fails
    /// with `why`.
    pub(in crate::runtime) async fn open_stored(
        &self,
        sealed: &[u8],
        binding: Option<(u64, &Digest256)>,
        why: &'static str,
    ) -> std::result::Result<StoredRequest, &'static str> {
        match self.store.open_request(binding, sealed).await {
            Ok(request) => Ok(request),
            Err(error) => {
                console_error!("{}: {why}: {error}", self.subject());
                self.store.set_alarm(look_again_at(now_ms())).await;
                Err(why)
            }
        }
    }

    /// The line and data point of work the alarm or a lookup did with no caller (a job's
    /// send, a lookup's verdict, `RequestLog::background`), once it has a decision.
    pub(in crate::runtime) fn log_background(
        &self,
        decision: Option<Decision>,
        origin_status: Option<u16>,
        origin_ms: Option<u64>,
        job: bool,
    ) {
        let Some(decision) = decision else { return };
        let log = RequestLog::background(self.object_id().to_owned(), decision, origin_status, origin_ms);
        metrics::write_point(&self.env, &log);
        outcome_queue::publish(&self.env, self.object_id(), decision, origin_status, job);
    }
}
