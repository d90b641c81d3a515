//! The Durable Object for one (caller scope, idempotency key): the key's single writer.
//!
//! Every decision comes from the key's driver, `core::key_rules::key_state::KeyState`, which holds the
//! record as this instance knows it and the live execution: this file loads, hands it what
//! happened, writes the step it returns, and carries the step out. The driver also holds
//! the live execution's waiters (they share its prepared answer). What stays here is what
//! only the runtime has: the origin fetch, the prepared answers, and the calls into the
//! key's storage (`runtime::key_storage`: the record, sealing, chunk rows, the alarm).
//!
//! Order inside `fetch`, which is what makes duplicates safe:
//! 1. Decide from the envelope (`core::edge_rules::wire`), the cached record (one synchronous SQL read the first time)
//!    and the live execution, and write the claim, all before the first `.await`. Other
//!    requests reach the object whenever the handler awaits, so whatever they must see has
//!    to be in place by then.
//! 2. Read the request body (every path reads it: the runtime drops a connection whose
//!    request body was left unread). Only the execution keeps it, to forward it; every
//!    other path drains it chunk by chunk, so a waiter holds no body.
//! 3. Carry out the actions: forward, replay, join, reject.
//!
//! A replay of an answer already in memory takes none of those awaits but the drain:
//! `replay` decides it in one turn, in the same order, and `src/entry.mjs` drains the body
//! and answers (the replay is the hot path). Any other arrival goes to `fetch`.
//!
//! Every answer the object gives carries its mark (`core::edge_rules::wire::ANSWERED_HEADER`), added in one
//! place (`fetch`) whatever path made the answer, errors included: the Worker treats an
//! unmarked answer as one the object may not have given, and never fails open on it.
//!
//! In observe mode (`core::vocabulary::key_terms::Mode`) the object forwards nothing: the Worker forwards
//! every request itself and tells the object about it in two calls. `arrival` steps the
//! machine as for a real request (the claim is written, a duplicate is told it would have
//! been coalesced or replayed, a mismatch that it would have been refused) and answers
//! with the decision; `outcome` brings the origin's answer, which is recorded as enforcing
//! would have recorded it (stored for replay, released or held unknown). So a route that
//! later switches to enforce finds its keys' records already right. An observed claim is
//! live in this instance until its outcome comes or its lease ends.
//!
//! Asynchronous acceptance (`core::key_rules::machine::async_job`) lives in the child module `async_job`: the
//! request is sealed and stored with the claim, and executed from the alarm.
//!
//! The execution runs inside the first caller's handler. If that caller disconnects, the
//! handler still runs to the end (the runtime keeps driving it), so the outcome is recorded
//! and every waiter is answered.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::{durable_object, DurableObject, Result, State};

use web_sys::Response;

use super::key_storage::StorageError;
use super::key_storage::{IssuedAlarm, KeyStorage};
use super::origin::{self, OriginAnswer, Outgoing};
use super::reconcile::BeforeArrival;
use super::respond::{self, Prepared};
use super::settings;
use super::settlement::{self, Settlement, Settlements};
use super::{body, metrics, outcome_queue};
use super::{now_ms, random_u64, AnswerFault};
use crate::core::edge_rules::config::{PanicSite, PANIC_TEST_HEADER};
use crate::core::edge_rules::log::{LineContext, RequestLog, StorageCalls};
use crate::core::edge_rules::scope::ScopeLog;
use crate::core::edge_rules::wire::{
    KeyCall, KeyStep, ObservedOutcome, ToObject, WireError, ENVELOPE_HEADER,
};
use crate::core::formats::key_record::{AttemptId, KeyRecord, StoredResponse};
use crate::core::formats::reconciling::Reconciling;
use crate::core::key_rules::key_state::{look_again_at, Arrival, Decided, KeyState, Pending};
use crate::core::key_rules::machine::async_job::{ArrivalPlan, AsyncAccept};
use crate::core::key_rules::machine::Action;
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::fault::{Fault, FaultSource, Stage, StorageOperation};
use crate::core::vocabulary::key_terms::KeyTerms;
use crate::core::vocabulary::outcome_table::{OriginResult, OriginVerdict};
use crate::core::vocabulary::problem::{Problem, ProblemKind};
use crate::core::vocabulary::trace::Trace;
use worker::{console_error, Env};

mod async_job;

/// The object (`worker`'s `#[durable_object]`, which `src/entry.mjs` builds): `fetch` works
/// on the runtime's own `Request` and `Response`.
#[durable_object(alarm)]
pub struct KeyObject {
    pub(super) env: Env,
    /// The key's driver: the record as this instance knows it, and the live execution
    /// with its waiters, who share its prepared answer.
    pub(super) key: RefCell<KeyState<Rc<Prepared>>>,
    /// The stored answer prepared for replays.
    pub(super) replays: Settlements,
    /// The key's storage: record, sealing, chunk rows and alarm.
    pub(super) store: KeyStorage,
    /// Alarm runs of this instance so far (for `ALARM_FAULT_INJECTION`).
    alarm_runs: Cell<u32>,
}

impl DurableObject for KeyObject {
    fn new(state: State, env: Env) -> KeyObject {
        KeyObject {
            store: KeyStorage::new(state, env.clone()),
            env,
            key: RefCell::new(KeyState::default()),
            replays: Settlements::default(),
            alarm_runs: Cell::new(0),
        }
    }

    /// The runtime's `fetch` on the object. The one place where answers leave it: each
    /// gets the object's marker, and an error becomes a marked 503 (never a thrown error,
    /// which the Worker could not tell from a platform failure).
    async fn fetch(&self, req: worker::Request) -> worker::Result<worker::Response> {
        let req = Clone::clone(req.inner());
        let answer = self.handle(req).await.or_else(|error| {
            let fault = error.fault();
            console_error!("{}", fault.source.log_line(&self.subject(), "answering", &error));
            respond::problem(&fault.problem())
        });
        respond::marked(answer).map(worker::Response::from).map_err(|error| JsValue::from(error).into())
    }

    /// The runtime's `alarm` on the object. A failure is thrown, never swallowed: the
    /// platform then retries the alarm (with backoff), so a deletion that failed once is
    /// tried again.
    async fn alarm(&self) -> worker::Result<worker::Response> {
        match self.on_alarm().await {
            Ok(()) => worker::Response::empty(),
            Err(error) => {
                console_error!(
                    "object {}: alarm failed, the platform retries it: {}",
                    self.short_id(),
                    error
                );
                Err(JsValue::from(js_sys::Error::new(&format!("alarm failed: {error}"))).into())
            }
        }
    }
}

/// The replay's hot path, beside the trait's `fetch`: `src/entry.mjs` asks it first.
#[wasm_bindgen]
impl KeyObject {
    /// A replay answered at once, where the arrival needs no await before its answer: its
    /// envelope asks to enforce, with no lookup and no asynchronous acceptance, the record
    /// is in memory with nothing to open, and the key's driver decides a replay that writes
    /// nothing (`core::key_rules::key_state::Pending::replay_only`). Returns `[answer, drained]` (the
    /// marked answer, and the drain of the request's body under way, which `src/entry.mjs`
    /// awaits before it answers), or `undefined`, having changed nothing a request could
    /// see, for `fetch` to take the arrival the whole way. An answer that cannot be marked
    /// is thrown, as `fetch` rejects with it.
    pub fn replay(&self, req: web_sys::Request) -> std::result::Result<JsValue, JsValue> {
        let Some((response, drained)) = self.replayed(&req) else { return Ok(JsValue::UNDEFINED) };
        let answer = response.or_else(|error| {
            let fault = error.fault();
            console_error!("{}", fault.source.log_line(&self.subject(), "answering", &error));
            respond::problem(&fault.problem())
        });
        let marked = respond::marked(answer).map_err(JsValue::from)?;
        Ok(js_sys::Array::of2(&marked.into(), &drained).into())
    }
}

impl KeyObject {
    async fn handle(&self, req: web_sys::Request) -> Result<Response> {
        // When the request reached the object: its line's `edge_ms` counts from here, and
        // so do its storage calls.
        let received = now_ms();
        let calls = self.store.calls();
        // The one envelope the Worker sends (`core::edge_rules::wire`): an unknown version is a 503,
        // never a guess.
        let call = match self.envelope(&req)? {
            Ok(ToObject::Key(call)) => call,
            Ok(ToObject::Admin(operation)) => return self.admin(&operation).await,
            Err(error) => {
                // Never silent: a Worker and an object that cannot read each other refuse
                // every request until the deploy settles.
                console_error!("object {}: the call's envelope is unreadable: {}", self.short_id(), error);
                body::drain(&req, None).await;
                let problem = error.problem();
                let object = Some(self.object_id().to_owned());
                metrics::write_point(
                    &self.env,
                    &RequestLog::new(object, Decision::Rejected(problem.kind), problem.status(), None),
                );
                return respond::problem(&problem);
            }
        };
        let now = now_ms();
        let KeyCall { scope_salt, ref policy, body_bytes, .. } = call;
        let _ = self.store.scope_salt.set(scope_salt);
        // A sealed answer is opened first (an await): the decision below reads the record as
        // it is after that, never a copy from before it.
        if let Err(error) = self.open_sealed_record().await {
            let log = self.request_log(Some(call.scope), calls);
            return self
                .refuse_unreadable(Some(&req), &call, "opening the stored answer", error, log, received)
                .await;
        }
        // Observe mode: the same record, opened the same way; nothing forwarded from here.
        self.expire_observed(now);
        let accept = match &call.step {
            KeyStep::ObserveArrival => return self.observe_arrival(&req, &call, now).await,
            KeyStep::ObserveOutcome { attempt, outcome } => {
                return self.observe_outcome(&req, *attempt, outcome, policy).await
            }
            KeyStep::Enforce { accept_async } => *accept_async,
        };
        // An arrival that asks for asynchronous acceptance brings its request read whole and
        // sealed (`async_job`), before anything is decided: every await comes before the
        // decision it feeds.
        let mut log = self.request_log(Some(call.scope), calls);
        // Served as a job or synchronously, and whether it reconciles: the core's plan.
        let plan = ArrivalPlan::new(accept, body_bytes, call.reconcile.is_some());
        // On a route with a lookup: an unknown outcome is looked up first (`runtime::reconcile`).
        let before = self.reconcile_before_arrival(&req, &call, plan.reconcile, now).await;
        let BeforeArrival { now, lookup, unsealed, body: mut read_early, refused } = before;
        if let Some(problem) = refused {
            // Past the cap of the retries waiting on a running lookup: nothing held.
            body::drain(&req, Some(body_bytes)).await;
            log.decision = Decision::Rejected(problem.kind);
            return self.refuse(&problem, &mut log, &call.trace, received);
        }
        let read_before = read_early.is_some();
        let accept = match plan.accept {
            None => None,
            Some(config) => match self.sealed_for_later(&req, read_early.take(), &call, config, now).await {
                Ok(accept) => Some(accept),
                Err(problem) => {
                    log.decision = Decision::Rejected(problem.kind);
                    return self.refuse(&problem, &mut log, &call.trace, received);
                }
            },
        };
        let body_read = accept.is_some() || read_before;
        if let Err(error) = self.record() {
            return self
                .refuse_unreadable(
                    (!body_read).then_some(&req),
                    &call,
                    "reading the record",
                    error,
                    log,
                    received,
                )
                .await;
        }
        let accept_read = accept.is_some();
        let mut pending = self.arrive(&call, accept, lookup, false, now);
        if unsealed {
            pending = self.key.borrow_mut().handle_lookup_unsealed(pending);
        }
        let what = if accept_read { "the job's claim" } else { "the claim" };
        let (decided, _) = self.write(pending, what).await;
        let claimed = decided.claimed();
        let carry = Carry::of(decided);

        // Still before any await that lets other requests in: become the live execution, or take
        // a place among its waiters; the alarm is issued too, to join the claim's durable write.
        let execution = carry.forward;
        let mut joined = carry.join.and_then(|(attempt, _)| self.key.borrow().waiters_of(attempt));
        let alarms = self.issue_alarms(&carry.alarms);

        // Reading the body is the first await. A failure matters only to an execution, which
        // then forwards nothing and releases the key. The body stays a JavaScript value: the
        // object forwards it and never looks inside. Any other request only drains its body.
        let body = if execution.is_some() {
            Some(match read_early.take() {
                Some(read) => read,
                None => body::read_whole(&req).await,
            })
        } else {
            // A body read while waiting on a lookup is let go: it is not forwarded.
            drop(read_early.take());
            if !body_read {
                body::drain(&req, Some(body_bytes)).await;
            }
            None
        };
        if !self.confirm_alarms(alarms).await {
            let withdrawal = self.key.borrow_mut().handle_alarm_failed(claimed);
            if let Some(withdrawal) = withdrawal {
                // Nothing was sent: the waiters are released (409, the driver let them
                // go), the claim (or the job, which without its alarm would never run)
                // withdrawn; the caller may retry.
                let (withdrawn, _) = self.write(withdrawal, "withdrawing the claim").await;
                log.decision = withdrawn.decision.unwrap_or(log.decision);
                let fault = Fault::storage(StorageOperation::Alarm, Stage::Claimed);
                return self.refuse(&fault.problem(), &mut log, &call.trace, received);
            }
        }
        if let Some(decision) = carry.decision {
            log.decision = decision;
        }
        // The caller's answer: the step's own (a replay, a refusal, a job's 202), else the
        // forward's or the wait's. Settling only follows an origin result, and a lookup an
        // alarm or a retry's reconciliation (above), never an arrival's step.
        let response = match (carry.answer, execution, carry.join) {
            (Some(answer), _, _) => Some(self.answer_of(answer, &call.trace)),
            (None, Some(attempt), _) => {
                let body = body.as_ref().and_then(|body| body.as_ref().ok());
                let sent = Sending { attempt, policy, probe_first: call.probe_origin };
                Some(self.execute(&req, body, sent, &mut log).await)
            }
            (None, None, Some((attempt, wait_ms))) => {
                let waiting = Waiting { attempt, settled: joined.take(), body_bytes, wait_ms };
                Some(self.wait(waiting, &call.trace, &mut log).await)
            }
            (None, None, None) => None,
        };
        let response = response.unwrap_or_else(|| respond::traced_problem(&NO_ANSWER.problem(), &call.trace));
        self.answer(response, &mut log, &call.trace, received)
    }

    /// [`KeyObject::replay`]'s arrival: `None` where it must go the whole way (`handle`).
    /// The order is `handle`'s, without its awaits: each check below is one that `handle`
    /// would pass without awaiting, and the step is decided and reported in one turn.
    fn replayed(&self, req: &web_sys::Request) -> Option<(Result<Response>, js_sys::Promise)> {
        // Only an answer already in memory is replayed here. A claim, a job or a record not
        // yet read goes to `fetch` before the envelope is read, so that it is read once.
        if !matches!(self.key.borrow().record(), Some(KeyRecord::Completed(_))) {
            return None;
        }
        let Ok(Ok(ToObject::Key(call))) = self.envelope(req) else { return None };
        let KeyCall { scope_salt, body_bytes, .. } = call;
        if call.step != (KeyStep::Enforce { accept_async: None }) || call.reconcile.is_some() {
            return None;
        }
        let _ = self.store.scope_salt.set(scope_salt);
        let record = self.record().ok()??;
        if self.store.has_to_open(&record) {
            return None;
        }
        let now = now_ms();
        let received = now;
        self.expire_observed(now);
        let pending = self.arrive(&call, None, None, false, now);
        let stored = pending.replay_only()?.clone();
        // Nothing to write: the step is reported at once, as `write` would after a `Keep`.
        let decided = self.key.borrow_mut().handle_written(pending);
        let drained = body::start_drain(req, Some(body_bytes));
        let mut log = self.request_log(Some(call.scope), self.store.calls());
        log.decision = decided.decision.unwrap_or(log.decision);
        let response = self.prepared(&stored).response();
        Some((self.answer(response, &mut log, &call.trace, received), drained))
    }

    /// The call's envelope (`core::wire`), read in this one place for `fetch` and `replay`
    /// alike, once the panic of the fault injection (a test setting) had its say.
    fn envelope(&self, req: &web_sys::Request) -> Result<std::result::Result<ToObject, WireError>> {
        let headers = req.headers();
        let panic_asked = || headers.get(PANIC_TEST_HEADER).ok().flatten();
        if settings::get(&self.env).fault_injection.panics_at(panic_asked, PanicSite::Object) {
            panic!("PANIC_FAULT_INJECTION: the object panics on purpose");
        }
        Ok(ToObject::decode(headers.get(ENVELOPE_HEADER)?.as_deref()))
    }

    /// The one place an arrival is built and handed to the key's driver: the request as
    /// the envelope describes it, the id a claim it makes gets (drawn here, at random),
    /// its job's sealed request and its route's sealed lookup, if any, and whether it is
    /// observed.
    fn arrive(
        &self,
        call: &KeyCall,
        accept: Option<AsyncAccept>,
        lookup: Option<Reconciling>,
        observing: bool,
        now: u64,
    ) -> Pending {
        let arrival = Arrival {
            fingerprint: call.fingerprint,
            new_attempt: AttemptId(random_u64()),
            policy: &call.policy,
            body_bytes: call.body_bytes,
            accept,
            observing,
            lookup,
        };
        self.key.borrow_mut().handle_arrival(arrival, now)
    }

    /// A step's answer to its caller ([`CallerAnswer`]), naming the request.
    fn answer_of(&self, answer: CallerAnswer, trace: &Trace) -> Result<Response> {
        match answer {
            CallerAnswer::Replay(stored) => self.prepared(&stored).response(),
            CallerAnswer::Reject(problem) => respond::traced_problem(&problem, trace),
            // A poll of the key's asynchronous job.
            CallerAnswer::Accepted { retry_after } => async_job::accepted(retry_after),
        }
    }

    /// Issues a step's alarms in this turn, so that each joins the record write of the
    /// same turn (one durable write); [`KeyObject::confirm_alarms`] awaits them.
    pub(super) fn issue_alarms(&self, alarms: &[u64]) -> Vec<(u64, IssuedAlarm<'_>)> {
        alarms.iter().map(|&at| (at, self.store.issue_alarm(at))).collect()
    }

    /// Awaits issued alarms (each tried once more if it failed); whether all are set.
    pub(super) async fn confirm_alarms(&self, issued: Vec<(u64, IssuedAlarm<'_>)>) -> bool {
        let mut all_set = true;
        for (at, alarm) in issued {
            all_set &= self.store.confirm_alarm(at, alarm).await;
        }
        all_set
    }

    /// Sets a step's alarms now: [`KeyObject::issue_alarms`], then confirmed.
    pub(super) async fn set_alarms(&self, alarms: &[u64]) -> bool {
        self.confirm_alarms(self.issue_alarms(alarms)).await
    }

    /// [`KeyObject::answer`] with `problem`, naming the request.
    fn refuse(
        &self,
        problem: &Problem,
        log: &mut RequestLog,
        trace: &Trace,
        received: u64,
    ) -> Result<Response> {
        self.answer(respond::traced_problem(problem, trace), log, trace, received)
    }

    /// A key request's answer, after its line (with the answer's status, and the time the
    /// object took since it `received` the request) is written.
    fn answer(
        &self,
        response: Result<Response>,
        log: &mut RequestLog,
        trace: &Trace,
        received: u64,
    ) -> Result<Response> {
        log.status = response.as_ref().map_or(500, Response::status);
        log.answered_after(now_ms().saturating_sub(received));
        // Until now `storage` held the count at arrival (`request_log`): the line says
        // what was done since.
        log.storage = log.storage.map(|before| self.store.calls().since(before));
        self.write_line(log, trace);
        response
    }

    /// The answer when the record cannot be read or opened: 503, nothing forwarded, the
    /// body of `drain` drained (none where it was read already), and the decision logged
    /// (an unreadable record must never pass quietly).
    async fn refuse_unreadable(
        &self,
        drain: Option<&web_sys::Request>,
        call: &KeyCall,
        what: &str,
        error: StorageError,
        mut log: RequestLog,
        received: u64,
    ) -> Result<Response> {
        let fault = Fault::storage(error.operation(), Stage::BeforeClaim);
        console_error!("{}", fault.source.log_line(&self.subject(), what, &error));
        if let Some(req) = drain {
            body::drain(req, Some(call.body_bytes)).await;
        }
        self.refuse(&fault.problem(), &mut log, &call.trace, received)
    }

    /// Writes a request's line, naming the request (`core::vocabulary::trace::Trace`).
    pub(super) fn write_line(&self, log: &RequestLog, trace: &Trace) {
        metrics::write_point_in(&self.env, log, LineContext { trace: Some(trace), ..LineContext::default() });
    }

    /// The log line of a request to this object before its decision is known: storage
    /// unavailable (what it is unless something better is decided), no status yet, and the
    /// storage calls made before the request arrived (`calls`), which [`KeyObject::answer`]
    /// turns into those made for it.
    fn request_log(&self, scope: Option<ScopeLog>, calls: StorageCalls) -> RequestLog {
        let object = Some(self.object_id().to_owned());
        RequestLog {
            storage: Some(calls),
            ..RequestLog::new(object, Decision::Rejected(ProblemKind::StorageUnavailable), 0, scope)
        }
    }

    async fn on_alarm(&self) -> std::result::Result<(), String> {
        // An observed claim whose outcome never came ends with its lease (`KeyState`).
        self.expire_observed(now_ms());
        let runs = self.alarm_runs.get();
        self.alarm_runs.set(runs.saturating_add(1));
        if runs < settings::get(&self.env).fault_injection.alarm_failures {
            return Err(format!("ALARM_FAULT_INJECTION: run {} fails on purpose", runs + 1));
        }
        let record = match self.record() {
            Ok(record) => record,
            Err(error) => {
                // A corrupt record is still a record: keep it (never forward unprotected),
                // and look again later, whatever becomes of the platform's retries.
                self.store.set_alarm(look_again_at(now_ms())).await;
                return Err(format!("could not read the record: {error}"));
            }
        };
        if record.as_ref().and_then(KeyRecord::async_job).is_some() {
            return self.run_job().await;
        }
        let pending = self.key.borrow_mut().handle_alarm(now_ms());
        let (decided, written) = self.write(pending, "the clean-up").await;
        if !written {
            return Err("clean-up failed".to_owned());
        }
        let carry = Carry::of(decided);
        if !self.set_alarms(&carry.alarms).await {
            return Err("the next alarm could not be set".to_owned());
        }
        // An unknown outcome due to be looked up (`runtime::reconcile`).
        if let Some(attempt) = carry.lookup {
            self.reconcile_from_alarm(attempt).await?;
        }
        Ok(())
    }
    /// Runs the first attempt: forwards it, records the outcome, wakes the waiters and
    /// answers the caller.
    async fn execute(
        &self,
        req: &web_sys::Request,
        body: Option<&JsValue>,
        sending: Sending<'_>,
        log: &mut RequestLog,
    ) -> Result<Response> {
        let Sending { attempt, policy, probe_first } = sending;
        let started = now_ms();
        let target = req.url();
        let headers = req.headers();
        let (result, mut answer) = match body {
            Some(body) => {
                let request = Outgoing { target: &target, method: &req.method(), headers: &headers, body };
                origin::send(&self.env, request, policy, probe_first).await
            }
            // The body could not be read: nothing was sent, and the key is released.
            None => (OriginVerdict::NotSent.result(), None),
        };
        // The body moves into the stored answer: the caller's response shares it below.
        let stored = answer.as_mut().and_then(OriginAnswer::take_storable).map(Arc::new);
        log.origin_status = answer.as_ref().map(|answer| answer.status);
        log.origin_ms = Some(now_ms().saturating_sub(started));
        let (decision, settled) = self.finish(attempt, result, stored, policy, "the outcome").await;
        if let Some(decision) = decision {
            log.decision = decision;
            outcome_queue::publish(&self.env, self.object_id(), decision, log.origin_status, false);
        }
        match settled {
            Some(Settled { prepared, answer: shared, origin_answered }) => match (answer, origin_answered) {
                (Some(answer), true) => respond::live(answer, &prepared),
                _ => respond::stored(&shared, false),
            },
            // Should the step not settle (it always does), the waiters are released by the
            // dropped sender and get 409.
            None => respond::problem(&NO_ANSWER.problem()),
        }
    }

    /// Records an attempt's outcome (the object's own forward, or the one observe mode
    /// reports), wakes whoever waits on it (the driver holds them), and confirms the alarms
    /// the step set.
    /// The decision, and the answer it settled with (`None` if it settled nothing).
    async fn finish(
        &self,
        attempt: AttemptId,
        result: OriginResult,
        stored: Option<Arc<StoredResponse>>,
        policy: &KeyTerms,
        what: &str,
    ) -> (Option<Decision>, Option<Settled>) {
        let pending = self.key.borrow_mut().handle_origin_finished(attempt, result, stored, policy, now_ms());
        let (decided, _) = self.write(pending, what).await;
        let carry = Carry::of(decided);
        // Issued in the same turn as the outcome write (one durable write), and confirmed
        // once the waiters are woken.
        let alarms = self.issue_alarms(&carry.alarms);
        let settled = carry.settle.map(|Settling { attempt, answer, origin_answered }| {
            // One copy of the body for the waiters and the caller alike.
            let prepared = self.prepared(&answer);
            self.key.borrow_mut().handle_settled(attempt, prepared.clone());
            Settled { prepared, answer, origin_answered }
        });
        // The outcome was already sent and cannot be taken back. Should the alarm still
        // fail, the claim's alarm stays in place (it fires at the claim's expiry, and moves
        // itself to the record's), and an expired record is deleted when read.
        self.confirm_alarms(alarms).await;
        // A chunked answer is replayed from its rows from now on: the whole body the
        // waiters shared is not kept for the rest of this instance's life.
        if self.key.borrow().record().is_some_and(|record| record.chunks().is_some()) {
            self.replays.forget_prepared();
        }
        (carry.decision, settled)
    }

    /// Observe mode, a request's arrival: steps the machine as for a real request, writes
    /// what it would write (the claim, the alarm) and answers with the decision, without
    /// forwarding, replaying or waiting. A claim becomes the live execution until the
    /// Worker brings its outcome ([`KeyObject::observe_outcome`]) or its lease ends.
    async fn observe_arrival(&self, req: &web_sys::Request, call: &KeyCall, now: u64) -> Result<Response> {
        if let Err(error) = self.record() {
            let fault = Fault::storage(error.operation(), Stage::BeforeClaim);
            console_error!("{}", fault.source.log_line(&self.subject(), "reading the record", &error));
            body::drain(req, None).await;
            return respond::observed_decision(Decision::Rejected(fault.problem().kind), None);
        }
        let pending = self.arrive(call, None, None, true, now);
        let (decided, _) = self.write(pending, "the observed claim").await;
        // As for a real request, everything is in place before the first await. Enforcing
        // would have waited on a live attempt; observing never does: what the step would
        // answer is the decision it reports.
        let carry = Carry::of(decided);
        let decision = carry.decision.unwrap_or(Decision::Rejected(ProblemKind::StorageUnavailable));
        let alarms = self.issue_alarms(&carry.alarms);
        body::drain(req, None).await;
        // Observing, the Worker has forwarded already: nothing to fail closed on. A claim
        // whose alarm could not be set is still deleted when read past its expiry.
        self.confirm_alarms(alarms).await;
        respond::observed_decision(decision, carry.forward)
    }

    /// Observe mode, the origin's answer to a claimed request, as the Worker got it: recorded
    /// as enforcing would have recorded it (as [`KeyObject::execute`] does after its own
    /// forward), and anyone who joined it woken. Answers with the decision (`executed`,
    /// `released` or `unknown`).
    async fn observe_outcome(
        &self,
        req: &web_sys::Request,
        attempt: AttemptId,
        outcome: &ObservedOutcome,
        policy: &KeyTerms,
    ) -> Result<Response> {
        let (result, mut answer) = origin::reported(req, outcome, policy).await;
        let stored = match result {
            OriginResult::Responded(_) => answer.as_mut().and_then(OriginAnswer::take_storable).map(Arc::new),
            OriginResult::Oversized(_)
            | OriginResult::ConnectRefused
            | OriginResult::TimedOut
            | OriginResult::ResetAfterSend => None,
        };
        let (decision, _) = self.finish(attempt, result, stored, policy, "the observed outcome").await;
        respond::observed_decision(decision.unwrap_or(Decision::Unknown), None)
    }

    /// Forgets an observed claim whose lease has ended: its outcome will not come (the
    /// Worker's background work was cut short), and its record says what enforcing would
    /// say of it.
    pub(super) fn expire_observed(&self, now: u64) {
        // Whoever joined it is released with it (the driver holds them).
        self.key.borrow_mut().expire_observed(now);
    }

    /// The stored answer prepared for replays, shared by every replay and waiter.
    fn prepared(&self, stored: &Arc<StoredResponse>) -> Rc<Prepared> {
        self.replays.prepared(stored, || self.store.chunk_source(self.key.borrow().record(), stored))
    }

    /// A duplicate waits for the live execution's answer, at most `wait_ms`. Returns the
    /// answer and whether it already carries the object's marker.
    async fn wait(&self, waiting: Waiting, trace: &Trace, log: &mut RequestLog) -> Result<Response> {
        let Waiting { attempt, settled, body_bytes, wait_ms } = waiting;
        let started = now_ms();
        let outcome = settlement::wait_for(settled, wait_ms).await;
        log.wait_ms = Some(now_ms().saturating_sub(started));
        let over = self.key.borrow_mut().handle_wait_over(attempt, body_bytes, outcome.is_some(), now_ms());
        match (outcome, over) {
            (Some(answer), Ok(decision)) => {
                log.decision = decision;
                answer.response()
            }
            (_, Err(problem)) => {
                log.decision = Decision::Rejected(problem.kind);
                respond::traced_problem(&problem, trace)
            }
            (None, Ok(_)) => respond::traced_problem(&NO_ANSWER.problem(), trace),
        }
    }

    pub(super) fn object_id(&self) -> &str {
        self.store.object_id()
    }

    pub(super) fn short_id(&self) -> &str {
        self.store.short_id()
    }

    /// This object as a log line names it (`object {short id}`).
    pub(super) fn subject(&self) -> String {
        format!("object {}", self.short_id())
    }
}

/// One attempt to send, as the envelope described it.
struct Sending<'a> {
    attempt: AttemptId,
    policy: &'a KeyTerms,
    /// Whether the origin may be probed with a TCP connect first (`KeyCall::probe_origin`).
    probe_first: bool,
}

/// The answer an execution settled with, as its waiters got it.
struct Settled {
    prepared: Rc<Prepared>,
    answer: Arc<StoredResponse>,
    /// Whether the origin gave it (rather than a stored answer the outcome left in place).
    origin_answered: bool,
}

/// A duplicate's place among an execution's waiters.
pub(super) struct Waiting {
    pub attempt: AttemptId,
    /// What it waits for (`None` where nothing will settle it here).
    pub settled: Option<Settlement>,
    pub body_bytes: u64,
    pub wait_ms: u64,
}

/// A step's actions as the object carries them out: each handed out once by the key's
/// driver (`core::key_rules::key_state::Decided::poll_action`) and sorted here, in the one match over
/// them, with no arm for "the rest"; every path (an arrival, an outcome, the alarm, a job,
/// a lookup) then acts on the slots it has, and a new action fails to compile here until
/// it has its own.
#[derive(Default)]
pub(super) struct Carry {
    /// The decision for the log line.
    pub decision: Option<Decision>,
    /// `Forward`: the attempt to send, the key claimed for it.
    pub forward: Option<AttemptId>,
    /// `Join`: the live attempt to wait on, and for how long.
    pub join: Option<(AttemptId, u64)>,
    /// `SetAlarm`: when.
    pub alarms: Vec<u64>,
    /// `Replay`, `Reject`, `Accepted`: the caller's answer, given by the step itself.
    pub answer: Option<CallerAnswer>,
    /// `Settle`: the answer an attempt's waiters get.
    pub settle: Option<Settling>,
    /// `Lookup`: the attempt whose unknown outcome is to be looked up.
    pub lookup: Option<AttemptId>,
}

impl Carry {
    pub fn of(mut decided: Decided) -> Carry {
        let mut carry = Carry { decision: decided.decision, ..Carry::default() };
        while let Some(action) = decided.poll_action() {
            match action {
                Action::Forward { attempt } => carry.forward = Some(attempt),
                Action::Join { attempt, wait_ms } => carry.join = Some((attempt, wait_ms)),
                Action::SetAlarm(at) => carry.alarms.push(at),
                Action::Replay(stored) => carry.answer = Some(CallerAnswer::Replay(stored)),
                Action::Reject(problem) => carry.answer = Some(CallerAnswer::Reject(problem)),
                Action::Accepted { retry_after } => {
                    carry.answer = Some(CallerAnswer::Accepted { retry_after })
                }
                Action::Settle { attempt, answer, origin_answered } => {
                    carry.settle = Some(Settling { attempt, answer, origin_answered })
                }
                Action::Lookup { attempt } => carry.lookup = Some(attempt),
            }
        }
        carry
    }
}

/// The answer a step gives its caller itself.
pub(super) enum CallerAnswer {
    Replay(Arc<StoredResponse>),
    Reject(Problem),
    /// 202 for a job (its claim, or a poll of it), with when to poll again.
    Accepted {
        retry_after: u64,
    },
}

/// An attempt's settling, as the step hands it out.
pub(super) struct Settling {
    pub attempt: AttemptId,
    pub answer: Arc<StoredResponse>,
    /// Whether the origin gave it (rather than a stored answer the outcome left in place).
    pub origin_answered: bool,
}

/// The fault of a step that gave no answer to send (the key's driver always gives one).
const NO_ANSWER: Fault = Fault { source: FaultSource::NoAnswer, stage: Stage::AfterStep };
