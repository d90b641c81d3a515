//! The object's half of asynchronous acceptance (`core::key_rules::machine::async_job` has the rules): a
//! request that prefers `respond-async` is sealed and stored with its claim, answered 202,
//! and executed from the object's one alarm, which also does the expiry clean-up.
//!
//! Every await comes before the decision it feeds: an arrival reads and seals its request
//! first (`sealed_for_later`), then goes the way every arrival goes (`KeyObject::handle`):
//! the driver steps on the record as it is after those awaits (never a copy from before
//! them), and the claim, with the sealed request, is written in the same turn. The alarm
//! opens the stored request first, then steps on the fresh record, and claims the send
//! durably (with its lease, and the alarm for that lease) before anything is sent. A send
//! is tied to no client connection: a restart mid-send leaves a claim whose lease ends, and
//! the next alarm treats it as an unknown outcome (`core::key_rules::machine::async_job`, rule 4).
//!
//! Never logged: the request, its headers or body, the key. The log line names the object
//! id digest and the decision only.

use std::sync::Arc;

use js_sys::Uint8Array;
use wasm_bindgen::JsValue;
use web_sys::{Headers, Response};

use super::{body, metrics, now_ms, random_u64, settings, Carry, KeyObject};
use crate::core::edge_rules::headers::forward_to_origin;
use crate::core::edge_rules::log::RequestLog;
use crate::core::edge_rules::wire::KeyCall;
use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::job::StoredRequest;
use crate::core::formats::key_record::{AttemptId, KeyRecord};
use crate::core::key_rules::key_state::look_again_at;
use crate::core::key_rules::machine::async_job::{
    no_key_ring_to_seal_requests, parse_retry_after, prefer_for_origin, AsyncAccept, AsyncConfig,
};
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::fault::{Fault, FaultSource, PlatformCall, Stage, StorageOperation};
use crate::core::vocabulary::problem::{Problem, ProblemKind};
use crate::runtime::boundary::header_lines;
use crate::runtime::origin::{self, AnswerBody, OriginAnswer, Outgoing};
use crate::runtime::outcome_queue;
use crate::runtime::respond;
use worker::{console_error, Result};

/// A job's request that could not be read whole (its body, its headers, the call's scope)
/// before anything was claimed.
const UNREADABLE_REQUEST: Fault =
    Fault { source: FaultSource::Platform { what: PlatformCall::Request }, stage: Stage::BeforeClaim };

/// 202 Accepted for a job that runs: `Preference-Applied: respond-async` (RFC 7240 §3) and
/// when to poll again.
pub(super) fn accepted(retry_after: u64) -> Result<Response> {
    let headers = Headers::new()?;
    headers.set("content-type", "application/json")?;
    headers.set("preference-applied", "respond-async")?;
    headers.set("retry-after", &retry_after.to_string())?;
    let body = format!("{{\"status\":\"pending\",\"retry_after\":{retry_after}}}");
    respond::build(202, &headers, body.as_bytes())
}

impl KeyObject {
    /// An arrival that asks for asynchronous acceptance: its request read whole (unless it
    /// was read already, `read`: while it waited on a lookup) and sealed, bound to the
    /// claim's time (`now`) and fingerprint, ready to be stored with the claim. The problem
    /// to answer when it cannot be (nothing is claimed then).
    pub(super) async fn sealed_for_later(
        &self,
        req: &web_sys::Request,
        read: Option<std::result::Result<JsValue, JsValue>>,
        call: &KeyCall,
        config: AsyncConfig,
        now: u64,
    ) -> std::result::Result<AsyncAccept, Problem> {
        let headers = &req.headers();
        let read = match read {
            Some(read) => read,
            None => body::read_whole(req).await,
        };
        let body = match read {
            Ok(buffer) => Uint8Array::new(&buffer).to_vec(),
            Err(_) => return Err(UNREADABLE_REQUEST.problem()),
        };
        let settings = settings::get(&self.env);
        // The Worker refuses this configuration; an object never stores a request unsealed
        // whatever it is handed.
        let Ok(Some(ring)) = &settings.storage_keys else { return Err(no_key_ring_to_seal_requests()) };
        let Some(salt) = self.store.scope_salt.get() else { return Err(UNREADABLE_REQUEST.problem()) };
        let request = StoredRequest {
            scope_salt: salt.0,
            method: req.method(),
            target: req.url(),
            // Unreadable only where a header holds a line feed, which the Worker refused
            // already: nothing is sealed or claimed then.
            headers: end_to_end(headers).map_err(|_| UNREADABLE_REQUEST.problem())?,
            body,
        };
        let binding = (now, &call.fingerprint);
        match self.store.sealer.seal_request(ring, self.object_id(), binding, &request).await {
            Ok(sealed_request) => Ok(AsyncAccept {
                sealed_request,
                policy: call.policy.clone(),
                probe_origin: call.probe_origin,
                config,
            }),
            Err(error) => {
                let fault = Fault::storage(StorageOperation::Seal, Stage::BeforeClaim);
                console_error!("{}", fault.source.log_line(&self.subject(), "sealing the request", &error));
                Err(fault.problem())
            }
        }
    }

    /// The alarm of a key with a job: opens the stored request (an await), then steps on
    /// the fresh record, and sends when the step says so. An error is thrown to the
    /// platform, which retries the alarm.
    pub(super) async fn run_job(&self) -> std::result::Result<(), String> {
        let cached = self.cached_record();
        let job = cached.as_ref().and_then(|record| match record {
            KeyRecord::InFlight(claim) => claim.async_job.as_ref().map(|job| (claim, job)),
            _ => None,
        });
        let sealed = job.map(|(claim, job)| {
            let binding = job.request_bound.then_some((claim.claimed_at, claim.fingerprint));
            (job.sealed_request.clone(), binding)
        });
        let request = match sealed.filter(|(sealed, _)| !sealed.is_empty()) {
            Some((sealed, binding)) => {
                let settings = settings::get(&self.env);
                let ring = settings.storage_keys.as_ref().ok().and_then(Option::as_ref);
                let binding = binding.as_ref().map(|(claimed_at, fingerprint)| (*claimed_at, fingerprint));
                match self.store.sealer.open_request(ring, self.object_id(), binding, &sealed).await {
                    Ok(request) => Some((sealed, request)),
                    Err(error) => {
                        // Nothing is sent unopened; look again later, whatever becomes of
                        // the platform's retries (the key may come back into the ring).
                        self.store.set_alarm(look_again_at(now_ms())).await;
                        return Err(format!("the stored request cannot be opened: {error}"));
                    }
                }
            }
            None => None,
        };
        // Fresh: whatever happened while the request was opened (a poll, a purge).
        let record = self.record().map_err(|error| format!("could not read the record: {error}"))?;
        let pending = self.key.borrow_mut().handle_job_alarm(AttemptId(random_u64()), now_ms());
        // Whether the step sends: asked before it is written, to check what it would send.
        let forward = pending.forwarded();
        // The send must be the request that was opened (the record could have been replaced).
        let request = match (forward, request) {
            (None, _) => None,
            (Some(_), Some((sealed, request)))
                if record
                    .as_ref()
                    .and_then(KeyRecord::async_job)
                    .is_some_and(|job| job.sealed_request == sealed) =>
            {
                Some(request)
            }
            (Some(_), _) => {
                return Err("the job changed while its request was opened; the alarm runs again".to_owned())
            }
        };
        let (decided, written) = self.write(pending, "the job").await;
        if !written {
            return Err("writing the job failed".to_owned());
        }
        let carry = Carry::of(decided);
        let alarm_set = self.set_alarms(&carry.alarms).await;
        if let Some(decision) = carry.decision {
            self.log_job(decision, None, None);
        }
        // A send has no waiters: a duplicate that arrives meanwhile is told it is in
        // progress (the driver keeps no waiters for it).
        let (Some(attempt), Some(request)) = (forward, request) else {
            return if alarm_set { Ok(()) } else { Err("the next alarm could not be set".to_owned()) };
        };
        if !alarm_set {
            // Nothing was sent: the driver puts the job back as it was.
            let put_back = self.key.borrow_mut().handle_job_unscheduled(attempt, record);
            let _ = self.write(put_back, "putting the job back").await;
            return Err("the send's alarm could not be set; nothing was sent".to_owned());
        }
        let sent = self.send_job(attempt, request).await;
        self.key.borrow_mut().handle_send_over(attempt);
        sent
    }

    /// Sends the job's request as `attempt` and records the outcome.
    async fn send_job(&self, attempt: AttemptId, request: StoredRequest) -> std::result::Result<(), String> {
        let before = self.cached_record();
        let job = before.as_ref().and_then(KeyRecord::async_job).cloned().ok_or("the job is gone")?;
        let policy = &job.policy;
        // The answer is sealed under the caller's scope, which the request carries.
        let _ = self.store.scope_salt.set(Digest256(request.scope_salt));
        let headers = Headers::new().map_err(|_| "headers")?;
        for (name, value) in &request.headers {
            let _ = headers.append(name, value);
        }
        let body: JsValue = Uint8Array::from(&request.body[..]).into();
        let started = now_ms();
        let outgoing =
            Outgoing { target: &request.target, method: &request.method, headers: &headers, body: &body };
        let (result, mut answer) = origin::send(&self.env, outgoing, policy, job.probe_origin).await;
        drop(request);
        let origin_ms = now_ms().saturating_sub(started);
        let origin_status = answer.as_ref().map(|answer| answer.status);
        let retry_after_ms = answer.as_ref().and_then(|answer| {
            let value = answer.headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("retry-after"));
            parse_retry_after(value.map(|(_, value)| value.as_str()), now_ms())
        });
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
        let (decided, written) = self.write(pending, "the job's outcome").await;
        let carry = Carry::of(decided);
        let decision = carry.decision.unwrap_or(Decision::Rejected(ProblemKind::StorageUnavailable));
        self.log_job(decision, origin_status, Some(origin_ms));
        if !written {
            return Ok(());
        }
        if !self.set_alarms(&carry.alarms).await {
            return Err("the next alarm could not be set".to_owned());
        }
        Ok(())
    }

    /// The job's log line and data point: the decision and the origin's status, no more.
    fn log_job(&self, decision: Decision, origin_status: Option<u16>, origin_ms: Option<u64>) {
        let object = Some(self.object_id().to_owned());
        let log = RequestLog {
            origin_status,
            origin_ms,
            ..RequestLog::new(object, decision, origin_status.unwrap_or(0), None)
        };
        metrics::write_point(&self.env, &log);
        outcome_queue::publish(&self.env, self.object_id(), decision, origin_status, true);
    }
}

/// The request's end-to-end headers as the origin gets them: the Worker's internal headers
/// dropped, and `respond-async` taken out of `Prefer` (the edge honoured it; the origin
/// must answer with its final answer).
fn end_to_end(headers: &Headers) -> Result<Vec<(String, String)>> {
    let lines = header_lines(headers)?;
    let kept = lines.pairs().filter(|(name, _)| forward_to_origin(name, &[])).filter_map(|(name, value)| {
        if name.eq_ignore_ascii_case("prefer") {
            prefer_for_origin(value).map(|value| (name.to_owned(), value))
        } else {
            Some((name.to_owned(), value.to_owned()))
        }
    });
    Ok(kept.collect())
}
