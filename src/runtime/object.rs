//! The Durable Object for one (caller scope, idempotency key): the key's single writer.
//!
//! Every decision comes from the key's driver, `core::key_state::KeyState`, which holds the
//! record as this instance knows it and the live execution: this file loads, hands it what
//! happened, writes the step it returns, and carries the step out. What stays here is what
//! only the runtime has: storage, the alarm, sealing, the origin fetch, and the settlement
//! channel the waiters of an execution share.
//!
//! Order inside `fetch`, which is what makes duplicates safe:
//! 1. Decide from the envelope (`core::wire`), the cached record (one synchronous SQL read the first time)
//!    and the live execution, and write the claim, all before the first `.await`. Other
//!    requests reach the object whenever the handler awaits, so whatever they must see has
//!    to be in place by then.
//! 2. Read the request body (every path reads it: the runtime drops a connection whose
//!    request body was left unread). Only the execution keeps it, to forward it; every
//!    other path drains it chunk by chunk, so a waiter holds no body.
//! 3. Carry out the actions: forward, replay, join, reject.
//!
//! Every answer the object gives carries its mark (`core::wire::ANSWERED_HEADER`), added in one
//! place (`fetch`) whatever path made the answer, errors included: the Worker treats an
//! unmarked answer as one the object may not have given, and never fails open on it.
//!
//! In observe mode (`core::routes::Mode`) the object forwards nothing: the Worker forwards
//! every request itself and tells the object about it in two calls. `arrival` steps the
//! machine as for a real request (the claim is written, a duplicate is told it would have
//! been coalesced or replayed, a mismatch that it would have been refused) and answers
//! with the decision; `outcome` brings the origin's answer, which is recorded as enforcing
//! would have recorded it (stored for replay, released or held unknown). So a route that
//! later switches to enforce finds its keys' records already right. An observed claim is
//! live in this instance until its outcome comes or its lease ends.
//!
//! Asynchronous acceptance (`core::async_job`) lives in the child module `async_job`: the
//! request is sealed and stored with the claim, and executed from the alarm.
//!
//! The execution runs inside the first caller's handler. If that caller disconnects, the
//! handler still runs to the end (the runtime keeps driving it), so the outcome is recorded
//! and every waiter is answered.

use std::cell::{Cell, OnceCell, RefCell};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use futures_channel::oneshot;
use futures_util::future::{select, Either, FutureExt, Shared};
use futures_util::StreamExt;
use worker::web_sys::{self, Headers, Response};
use worker::worker_sys::{self, DurableObjectState, DurableObjectStorage};
use worker::{console_error, console_log, Delay, Env, Result, SqlStorage, State, Storage};

use super::chunks;
use super::metrics;
use super::origin::{self, AnswerBody, OriginAnswer};
use super::respond::{self, Prepared};
use super::seal::Sealer;
use super::settings;
use super::storage::{self, StorageError};
use super::{now_ms, random_u64};
use crate::core::admin;
use crate::core::async_job::MAX_STORED_REQUEST_BODY_BYTES;
use crate::core::config::{ObjectPolicy, PanicSite, PANIC_TEST_HEADER};
use crate::core::fingerprint::Digest256;
use crate::core::headers::{connection_tokens, pass_to_caller, store_for_replay};
use crate::core::key_state::{answer_body_cap, Arrival, Decided, KeyState, Pending};
use crate::core::log::{Decision, LineContext, RequestLog, Trace};
use crate::core::machine::{storage_unavailable, Action, RecordChange};
use crate::core::policy::OriginResult;
use crate::core::problem::Problem;
use crate::core::problem::ProblemKind;
use crate::core::record::{AttemptId, Completed, Record, StoredResponse};
use crate::core::scope::ScopeLog;
use crate::core::seal::refuses_unsealed;
use crate::core::wire::{
    Answered, KeyCall, KeyStep, ObservedOutcome, ToObject, ANSWERED_HEADER, ANSWERED_PLAIN, ENVELOPE_HEADER,
};

mod async_job;

/// The answer that settles an execution, shared by its waiters: prepared once, so every
/// waiter's response shares one body.
type Settlement = Shared<oneshot::Receiver<Rc<Prepared>>>;

/// The object. Exported to the runtime by hand (rather than with `#[durable_object]`), so
/// that `fetch` takes and returns the runtime's own `Request` and `Response`: the
/// `worker::Request` conversion reads the method, URL, headers and `cf` of every request,
/// and `worker::Response` builds a second `Response` on the way out.
#[wasm_bindgen]
pub struct KeyObject {
    state: State,
    env: Env,
    /// The key's driver: the record as this instance knows it, and the live execution.
    key: RefCell<KeyState>,
    /// The live execution's answer, which its waiters share.
    settlement: RefCell<Option<(AttemptId, Settlement)>>,
    /// Wakes whoever joined an observe-mode claim (an enforce-mode duplicate during a
    /// switch of mode) when the Worker brings its outcome.
    observed_settle: RefCell<Option<(AttemptId, oneshot::Sender<Rc<Prepared>>)>>,
    /// The stored answer made ready for replays (see `respond::Prepared`).
    prepared: RefCell<Option<Rc<Prepared>>>,
    /// The object id as text, for log lines.
    id: OnceCell<String>,
    storage: OnceCell<Storage>,
    sql: OnceCell<SqlStorage>,
    /// Seals and opens the key's stored answer when `STORAGE_ENCRYPTION_KEYS` is set.
    sealer: Sealer,
    /// The caller scope's key salt, from the first key request (it never changes: the
    /// object's name is derived from the scope).
    scope_salt: OnceCell<Digest256>,
    /// Alarm runs of this instance so far (for `ALARM_FAULT_INJECTION`).
    alarm_runs: Cell<u32>,
    /// Record deletions of this instance so far (for `DELETE_FAULT_INJECTION`).
    deletions: Cell<u32>,
    /// Chunked answer writes of this instance so far (for `CHUNK_WRITE_FAULT_INJECTION`).
    chunk_writes: Cell<u32>,
    /// The chunked answer whose rows this instance has checked (`runtime::chunks`).
    chunk_check: RefCell<Option<chunks::Checked>>,
    /// Whether the record as last read from storage held an answer in the clear (see
    /// `core::seal::refuses_unsealed`); cleared by every write of this instance.
    read_in_clear: Cell<bool>,
    /// Whether the record's table is known to exist (this instance read a record or wrote
    /// one); cleared by a deletion, which drops it.
    record_table: Cell<bool>,
}

#[wasm_bindgen]
impl KeyObject {
    #[wasm_bindgen(constructor)]
    pub fn new(state: DurableObjectState, env: Env) -> KeyObject {
        KeyObject {
            state: State::from(state),
            env,
            key: RefCell::new(KeyState::new()),
            settlement: RefCell::new(None),
            observed_settle: RefCell::new(None),
            prepared: RefCell::new(None),
            id: OnceCell::new(),
            storage: OnceCell::new(),
            sql: OnceCell::new(),
            sealer: Sealer::default(),
            scope_salt: OnceCell::new(),
            alarm_runs: Cell::new(0),
            deletions: Cell::new(0),
            chunk_writes: Cell::new(0),
            chunk_check: RefCell::new(None),
            read_in_clear: Cell::new(false),
            record_table: Cell::new(false),
        }
    }

    /// The runtime's `fetch` on the object. The one place where answers leave it: each
    /// gets the object's marker, and an error becomes a marked 503 (never a thrown error,
    /// which the Worker could not tell from a platform failure).
    pub async fn fetch(&self, req: web_sys::Request) -> std::result::Result<JsValue, JsValue> {
        AssertUnwindSafe(async move {
            let answer = self.handle(req).await.or_else(|error| {
                console_error!("object {}: answering failed: {}", self.short_id(), error);
                respond::problem(&storage_unavailable())
            });
            mark_answered(answer).map(JsValue::from).map_err(JsValue::from)
        })
        .await
    }

    /// The runtime's `alarm` on the object. A failure is thrown, never swallowed: the
    /// platform then retries the alarm (with backoff), so a deletion that failed once is
    /// tried again.
    pub async fn alarm(&self) -> std::result::Result<JsValue, JsValue> {
        AssertUnwindSafe(async move {
            match self.on_alarm().await {
                Ok(()) => Ok(JsValue::UNDEFINED),
                Err(error) => {
                    console_error!(
                        "object {}: alarm failed, the platform retries it: {}",
                        self.short_id(),
                        error
                    );
                    Err(JsValue::from(js_sys::Error::new(&format!("alarm failed: {error}"))))
                }
            }
        })
        .await
    }
}

impl KeyObject {
    async fn handle(&self, req: web_sys::Request) -> Result<Response> {
        let headers = req.headers();
        let panic_asked = || headers.get(PANIC_TEST_HEADER).ok().flatten();
        if settings::get(&self.env).fault_injection.panics_at(panic_asked, PanicSite::Object) {
            panic!("PANIC_FAULT_INJECTION: the object panics on purpose");
        }
        // The one envelope the Worker sends (`core::wire`): an unknown version is a 503,
        // never a guess.
        let call = match ToObject::decode(headers.get(ENVELOPE_HEADER)?.as_deref()) {
            Ok(ToObject::Key(call)) => call,
            Ok(ToObject::Admin(operation)) => return self.admin(&operation).await,
            Err(error) => {
                // Never silent: a Worker and an object that cannot read each other refuse
                // every request until the deploy settles.
                console_error!("object {}: the call's envelope is unreadable: {:?}", self.short_id(), error);
                drain_body(&req, None).await;
                let problem = error.problem();
                let mut log = self.request_log(None);
                (log.decision, log.status) = (Decision::Rejected(problem.kind), problem.status());
                metrics::record(&self.env, &log);
                return respond::problem(&problem);
            }
        };
        let now = now_ms();
        let KeyCall { fingerprint, scope_salt, ref policy, body_bytes, .. } = call;
        let _ = self.scope_salt.set(scope_salt);
        // A sealed answer is opened first (an await): the decision below reads the record as
        // it is after that, never a copy from before it.
        if let Err(error) = self.open_sealed_record().await {
            return self.refuse_unreadable(&req, &call, "opening the stored answer", error).await;
        }
        // Observe mode: the same record, opened the same way; nothing forwarded from here.
        self.expire_observed(now);
        let accept = match &call.step {
            KeyStep::ObserveArrival => {
                return self.observe_arrival(&req, fingerprint, policy, body_bytes, now).await
            }
            KeyStep::ObserveOutcome { attempt, outcome } => {
                return self.observe_outcome(&req, *attempt, outcome, policy).await
            }
            KeyStep::Enforce { accept_async } => *accept_async,
        };
        if let Some(accept) = accept.filter(|_| body_bytes <= MAX_STORED_REQUEST_BODY_BYTES) {
            return self.arrive_async(&req, &headers, &call, accept).await;
        }
        if let Err(error) = self.record() {
            return self.refuse_unreadable(&req, &call, "reading the record", error).await;
        }
        let arrival = Arrival {
            fingerprint,
            new_attempt: AttemptId(random_u64()),
            policy,
            body_bytes,
            accept: None,
            observing: false,
        };
        let pending = self.key.borrow_mut().handle_arrival(arrival, now);
        let (decided, _) = self.write(pending, "the claim").await;

        // Still before any await that lets other requests in: become the live execution, or
        // take a place among its waiters.
        // The alarm is issued here too, so that it joins the claim in one durable write.
        let mut execution = None;
        let mut joined = None;
        let mut alarm = None;
        for action in &decided.step.actions {
            match action {
                Action::Forward { attempt } => execution = Some(self.begin_execution(*attempt)),
                Action::Join { attempt, .. } => joined = self.settlement_of(*attempt),
                Action::SetAlarm(at) => alarm = Some((*at, self.issue_alarm(*at))),
                _ => {}
            }
        }

        // Reading the body is the first await. A failure matters only to an execution, which
        // then forwards nothing and releases the key. The body stays a JavaScript value: the
        // object forwards it and never looks inside. Any other request only drains its body.
        let body = if execution.is_some() {
            Some(read_body(&req).await)
        } else {
            drain_body(&req, Some(body_bytes)).await;
            None
        };
        let alarm_set = match alarm {
            Some((at, alarm)) => self.confirm_alarm(at, alarm).await,
            None => true,
        };
        if !alarm_set {
            let withdrawal = self.key.borrow_mut().handle_alarm_failed(&decided);
            if let Some(withdrawal) = withdrawal {
                // Nothing was sent: the waiters are released (409), the claim withdrawn.
                drop(execution.take());
                if let Some(attempt) = forwarded(&decided) {
                    self.end_execution(attempt);
                }
                self.write(withdrawal, "withdrawing the claim").await;
                return self.refuse_storage_unavailable(&call);
            }
        }
        let Decided { step, decision } = decided;
        let mut log = self.request_log(Some(call.scope));
        if let Some(decision) = decision {
            log.decision = decision;
        }
        let mut response = None;
        for action in step.actions {
            match action {
                // Issued above, with the claim.
                Action::SetAlarm(_) => {}
                Action::Forward { attempt } => {
                    let Some(settle) = execution.take() else { continue };
                    let body = body.as_ref().and_then(|body| body.as_ref().ok());
                    let sent = Sending { attempt, policy, probe_first: call.probe_origin };
                    response = Some(self.execute(&req, body, sent, settle, &mut log).await);
                }
                Action::Replay(stored) => response = Some(self.prepared(&stored).response()),
                Action::Join { attempt, wait_ms } => {
                    let waiting = Waiting { attempt, settled: joined.take(), body_bytes, wait_ms };
                    response = Some(self.wait(waiting, &call.trace, &mut log).await);
                }
                Action::Reject(problem) => response = Some(traced_problem(&problem, &call.trace)),
                // A poll of the key's asynchronous job.
                Action::Accepted { retry_after } => response = Some(async_job::accepted(retry_after)),
                // Settling only follows an origin result, never an arrival.
                Action::Settle { .. } => {}
            }
        }
        let response = response.unwrap_or_else(|| traced_problem(&storage_unavailable(), &call.trace));
        log.status = response.as_ref().map_or(500, Response::status);
        self.record_line(&log, &call.trace);
        response
    }

    /// The answer when the record cannot be read or opened: 503, nothing forwarded, the
    /// body drained, and the decision logged (an unreadable record must never pass quietly).
    async fn refuse_unreadable(
        &self,
        req: &web_sys::Request,
        call: &KeyCall,
        what: &str,
        error: StorageError,
    ) -> Result<Response> {
        console_error!("object {}: {} failed: {}", self.short_id(), what, error);
        drain_body(req, Some(call.body_bytes)).await;
        self.refuse_storage_unavailable(call)
    }

    /// 503 `storage-unavailable`, logged: nothing was forwarded.
    fn refuse_storage_unavailable(&self, call: &KeyCall) -> Result<Response> {
        let mut log = self.request_log(Some(call.scope));
        log.status = 503;
        self.record_line(&log, &call.trace);
        traced_problem(&storage_unavailable(), &call.trace)
    }

    /// Writes a request's line, naming the request (`core::log::Trace`).
    pub(super) fn record_line(&self, log: &RequestLog, trace: &Trace) {
        metrics::record_in(&self.env, log, LineContext { trace: Some(trace), ..LineContext::default() });
    }

    /// The log line of a request to this object before its decision is known: storage
    /// unavailable (what it is unless something better is decided), no status yet.
    fn request_log(&self, scope: Option<ScopeLog>) -> RequestLog {
        RequestLog {
            object: Some(self.object_id().to_owned()),
            decision: Decision::Rejected(ProblemKind::StorageUnavailable),
            status: 0,
            origin_status: None,
            origin_ms: None,
            wait_ms: None,
            scope,
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
                let again = now_ms().saturating_add(ALARM_AFTER_READ_ERROR_MS);
                self.set_alarm(again).await;
                return Err(format!("could not read the record: {error}"));
            }
        };
        if record.as_ref().and_then(Record::async_job).is_some() {
            return self.run_job().await;
        }
        let pending = self.key.borrow_mut().handle_alarm(now_ms());
        let (decided, written) = self.write(pending, "the clean-up").await;
        if !written {
            return Err("clean-up failed".to_owned());
        }
        for action in decided.step.actions {
            if let Action::SetAlarm(at) = action {
                if !self.set_alarm(at).await {
                    return Err("the next alarm could not be set".to_owned());
                }
            }
        }
        Ok(())
    }
    /// Inspects or purges the record for the admin API (`core::admin` has the rules).
    async fn admin(&self, operation: &str) -> Result<Response> {
        let now = now_ms();
        self.expire_observed(now);
        let object_id = self.state.id().to_string();
        let record = match self.record() {
            Ok(record) => record,
            Err(error) => {
                console_error!("object {}: admin could not read the record: {}", self.short_id(), error);
                return respond::problem(&storage_unavailable());
            }
        };
        let waiters = self.key.borrow().live().map(|live| live.waiters);
        let live = waiters.is_some();
        let response = match operation {
            "inspect" | "inspect-reveal" => {
                let reveal = operation == "inspect-reveal";
                let mut view = admin::summary(&object_id, record.as_ref(), live, now, reveal);
                // Duplicates waiting on the running execution: an operator (and the tests)
                // can see who waits, and that nobody is left waiting once it settles.
                view["waiters"] = serde_json::json!(waiters.unwrap_or(0));
                // A test-only fault-injection variable left set degrades alarms or
                // deletions: the operator who looks at a record sees it.
                let settings = settings::get(&self.env);
                let faults = settings.fault_injection;
                if faults.is_set() {
                    view["fault_injection"] = serde_json::json!({
                        "alarm_failures": faults.alarm_failures,
                        "delete_failures": faults.delete_failures,
                        "chunk_write_failures": faults.chunk_write_failures,
                        "panics_on_request": faults.panics_on_request,
                    });
                }
                json_response(&view)
            }
            "purge" | "purge-force" => {
                let force = operation == "purge-force";
                if let Some(refusal) = admin::purge_refusal(record.as_ref(), live, now, force) {
                    respond::problem(&admin::refusals::purge_refused(refusal))
                } else {
                    let job = record.as_ref().and_then(Record::async_job).is_some();
                    match self.apply(&RecordChange::Delete).await {
                        // A pending job's alarm is cancelled with it.
                        Ok(()) if job && self.state.storage().delete_alarm().await.is_err() => {
                            console_error!("object {}: cancelling the job's alarm failed", self.short_id());
                            respond::problem(&storage_unavailable())
                        }
                        Ok(()) => {
                            console_log!(
                                "{{\"event\":\"admin-purge\",\"object\":\"{}\",\"forced\":{}}}",
                                object_id,
                                force
                            );
                            json_response(&serde_json::json!({ "object_id": object_id, "purged": true }))
                        }
                        Err(error) => {
                            console_error!("object {}: purge failed: {}", self.short_id(), error);
                            respond::problem(&storage_unavailable())
                        }
                    }
                }
            }
            _ => respond::problem(&admin::refusals::unknown_operation()),
        };
        response
    }

    /// The record, read from storage the first time and from memory afterwards. A record
    /// past its expiry is deleted here (one synchronous statement) and read as absent, so a
    /// record whose alarm was missed is gone the moment anything looks at it; a claim whose
    /// execution still runs in this instance is left to that execution.
    fn record(&self) -> std::result::Result<Option<Record>, StorageError> {
        if !self.key.borrow().is_loaded() {
            let stored = storage::load(self.sql())?;
            self.record_table.set(stored.is_some());
            let in_clear = matches!(&stored, Some(Record::Completed(Completed { sealed_answer: None, .. })));
            self.read_in_clear.set(in_clear);
            self.key.borrow_mut().remember(stored);
        }
        if self.key.borrow().expired_on_read(now_ms()) {
            storage::delete(self.sql())?;
            self.key.borrow_mut().handle_deleting();
            console_log!("{{\"event\":\"expired-on-read\",\"object\":\"{}\"}}", self.object_id());
        }
        Ok(self.cached_record())
    }

    /// Opens the cached record's sealed answer, if it has one, and keeps the opened record
    /// in memory. A record that cannot be opened is an error: never treated as absent.
    async fn open_sealed_record(&self) -> std::result::Result<(), StorageError> {
        let Some(record) = self.record()? else { return Ok(()) };
        let settings = settings::get(&self.env);
        let ring_set = matches!(settings.storage_keys, Ok(Some(_)));
        // Only what storage held: an answer this instance opened is kept unsealed in memory.
        if self.read_in_clear.get() && refuses_unsealed(ring_set, settings.storage_allow_unsealed, &record) {
            return Err(StorageError::Seal(
                "an answer is stored in the clear while STORAGE_ENCRYPTION_KEYS is set (STORAGE_ALLOW_UNSEALED is not true)"
                    .to_owned(),
            ));
        }
        let Record::Completed(done) = record else { return Ok(()) };
        if done.chunks.is_some() {
            return self.open_chunked_record(&done).await;
        }
        let Some(sealed) = &done.sealed_answer else { return Ok(()) };
        let salt = self.scope_salt.get().ok_or_else(|| StorageError::Seal("no scope salt".to_owned()))?;
        let settings = settings::get(&self.env);
        let ring = settings.storage_keys.as_ref().ok().and_then(Option::as_ref);
        let binding = done.sealed_bound.then_some((done.attempt, &done.fingerprint));
        let answer = self
            .sealer
            .open(ring, &salt.0, self.object_id(), binding, sealed)
            .await
            .map_err(|error| StorageError::Seal(error.to_string()))?;
        let mut key = self.key.borrow_mut();
        // Only if nothing replaced the record meanwhile (an alarm, a purge, another opener).
        if matches!(key.record(), Some(Record::Completed(now)) if now.sealed_answer.as_ref() == Some(sealed))
        {
            let opened = Completed { response: Arc::new(answer), sealed_answer: None, ..done.clone() };
            key.remember(Some(Record::Completed(opened)));
        }
        Ok(())
    }

    /// A chunked answer (`runtime::chunks`): opens its head when sealed and checks its rows,
    /// once per instance, before anything replays it. Never treated as absent on failure.
    async fn open_chunked_record(&self, done: &Completed) -> std::result::Result<(), StorageError> {
        let attempt = done.chunks.as_ref().map(|manifest| manifest.attempt);
        let checked = self.chunk_check.borrow().as_ref().map(|checked| checked.attempt);
        if done.sealed_answer.is_none() && checked == attempt {
            return Ok(());
        }
        // Only a sealed head needs the scope's key (an unsealed answer is checked without it).
        let salt = match (&done.sealed_answer, self.scope_salt.get()) {
            (Some(_), None) => return Err(StorageError::Seal("no scope salt".to_owned())),
            (_, salt) => salt.map_or(&[][..], |salt| &salt.0[..]),
        };
        let settings = settings::get(&self.env);
        let ring = settings.storage_keys.as_ref().ok().and_then(Option::as_ref);
        let sealing =
            chunks::Sealing { sealer: &self.sealer, ring, scope: salt, object_id: self.object_id() };
        let (opened, checked) = chunks::open(self.sql(), done, sealing).await?;
        let mut key = self.key.borrow_mut();
        // Only if nothing replaced the record meanwhile (an alarm, a purge, another opener).
        if matches!(key.record(), Some(Record::Completed(now)) if now.chunks == done.chunks && now.sealed_answer == done.sealed_answer)
        {
            key.remember(Some(Record::Completed(opened)));
            *self.chunk_check.borrow_mut() = Some(checked);
        }
        Ok(())
    }

    /// The record as it is written to storage: a completed answer is sealed when
    /// `STORAGE_ENCRYPTION_KEYS` is set (an await); every other record as it is, at once.
    async fn storable_record(&self, record: &Record) -> std::result::Result<Option<Record>, StorageError> {
        let Record::Completed(done) = record else { return Ok(None) };
        let settings = settings::get(&self.env);
        let ring = match &settings.storage_keys {
            Ok(Some(ring)) => ring,
            Ok(None) => return Ok(None),
            // Never store in the clear what the operator asked to seal.
            Err(problem) => return Err(StorageError::Seal(problem.detail.clone())),
        };
        let salt = self.scope_salt.get().ok_or_else(|| StorageError::Seal("no scope salt".to_owned()))?;
        let binding = (done.attempt, &done.fingerprint);
        let sealed = self
            .sealer
            .seal(ring, &salt.0, self.object_id(), binding, &done.response)
            .await
            .map_err(|error| StorageError::Seal(error.to_string()))?;
        Ok(Some(Record::Completed(Completed {
            sealed_answer: Some(sealed),
            sealed_bound: true,
            ..done.clone()
        })))
    }

    /// Writes a record change to storage, then to memory. A claim's `Put` is synchronous,
    /// so it is in place before the caller awaits anything; only a completed answer that is
    /// sealed awaits (WebCrypto) before it is written.
    async fn apply(&self, change: &RecordChange) -> std::result::Result<(), StorageError> {
        if !matches!(change, RecordChange::Keep) {
            self.read_in_clear.set(false);
        }
        match change {
            RecordChange::Keep => Ok(()),
            // Over one row: the body in chunk rows, written with the record in one
            // transaction; this instance keeps the head and the manifest, not the body.
            RecordChange::Put(Record::Completed(done))
                if crate::core::chunks::needs_chunks(&done.response) =>
            {
                let settings = settings::get(&self.env);
                let ring = match &settings.storage_keys {
                    Ok(ring) => ring.as_ref(),
                    // Never store in the clear what the operator asked to seal.
                    Err(problem) => return Err(StorageError::Seal(problem.detail.clone())),
                };
                let sealing = match ring {
                    None => None,
                    Some(ring) => {
                        let salt = self
                            .scope_salt
                            .get()
                            .ok_or_else(|| StorageError::Seal("no scope salt".to_owned()))?;
                        Some(chunks::Sealing {
                            sealer: &self.sealer,
                            ring: Some(ring),
                            scope: &salt.0,
                            object_id: self.object_id(),
                        })
                    }
                };
                let still_current = || self.claim_is_current(done.attempt);
                // CHUNK_WRITE_FAULT_INJECTION (tests only): this write fails half-way.
                let writes = self.chunk_writes.get();
                self.chunk_writes.set(writes.saturating_add(1));
                let fail_half_way = writes < settings.fault_injection.chunk_write_failures;
                let (cached, checked) =
                    chunks::put(self.raw_storage(), self.sql(), done, sealing, still_current, fail_half_way)
                        .await?;
                self.key.borrow_mut().remember(Some(cached));
                *self.chunk_check.borrow_mut() = Some(checked);
                Ok(())
            }
            RecordChange::Put(record @ Record::Completed(_)) => {
                let sealed = self.storable_record(record).await?;
                // The sealing await let other requests in: write only if the claim is still
                // the live one, checked in the same turn as the write.
                if !self.claim_is_current(record.attempt()) {
                    return Err(StorageError::Fenced);
                }
                match sealed {
                    Some(sealed) => storage::put(self.sql(), &sealed, &self.record_table)?,
                    None => storage::put(self.sql(), record, &self.record_table)?,
                }
                self.key.borrow_mut().remember(Some(record.clone()));
                Ok(())
            }
            RecordChange::Put(record) => {
                storage::put(self.sql(), record, &self.record_table)?;
                self.key.borrow_mut().remember(Some(record.clone()));
                Ok(())
            }
            RecordChange::Delete => {
                // Forgotten in memory in this turn, so that a request arriving while the
                // deletion is confirmed finds no record (and claims anew: its claim's write
                // is ordered after this deletion).
                self.key.borrow_mut().handle_deleting();
                // `deleteAll()` drops the table: a claim written after it creates it again.
                self.record_table.set(false);
                let deletions = self.deletions.get();
                self.deletions.set(deletions.saturating_add(1));
                let deleted = if deletions < settings::get(&self.env).fault_injection.delete_failures {
                    // As a `deleteAll()` that fails without deleting anything.
                    Err(StorageError::Sql(format!(
                        "DELETE_FAULT_INJECTION: deletion {} fails on purpose",
                        deletions + 1
                    )))
                } else {
                    // Deletes the table and the alarm too: a released or expired key
                    // leaves nothing behind.
                    self.state.storage().delete_all().await.map_err(|e| StorageError::Sql(e.to_string()))
                };
                let still_absent = self.key.borrow().is_loaded() && self.key.borrow().record().is_none();
                if deleted.is_err() && still_absent {
                    // The record (a claim) may still be in storage: read it again rather
                    // than believe it gone, so the key stays held and is never claimed and
                    // forwarded again by this instance.
                    self.key.borrow_mut().forget();
                    if let Err(error) = self.record() {
                        console_error!(
                            "object {}: reading the record again failed: {}",
                            self.short_id(),
                            error
                        );
                    }
                }
                deleted
            }
        }
    }

    /// Sets the alarm (and tries once more if that fails); whether it is set.
    async fn set_alarm(&self, at: u64) -> bool {
        let alarm = self.issue_alarm(at);
        self.confirm_alarm(at, alarm).await
    }

    /// Calls `setAlarm` now, without awaiting it: issued in the same turn as a record write,
    /// the two reach storage as one durable write.
    fn issue_alarm(&self, at: u64) -> std::result::Result<JsFuture, JsValue> {
        let when = js_sys::Date::new(&JsValue::from_f64(at as f64));
        self.raw_storage().set_alarm(when, JsValue::NULL.into()).map(JsFuture::from)
    }

    /// Awaits an issued alarm; when it failed, sets it once more in the same request.
    /// Whether the alarm is set. A caller that cannot do without it fails closed.
    async fn confirm_alarm(&self, at: u64, alarm: std::result::Result<JsFuture, JsValue>) -> bool {
        let settle = |alarm: std::result::Result<JsFuture, JsValue>| async move {
            match alarm {
                Ok(pending) => pending.await.map(|_| ()),
                Err(error) => Err(error),
            }
        };
        let Err(error) = settle(alarm).await else { return true };
        console_error!(
            "object {}: setting the alarm failed, trying again: {:?}",
            self.short_id(),
            error.as_string()
        );
        match settle(self.issue_alarm(at)).await {
            Ok(()) => true,
            Err(error) => {
                console_error!(
                    "object {}: setting the alarm failed twice: {:?}",
                    self.short_id(),
                    error.as_string()
                );
                false
            }
        }
    }

    /// The settlement channel of an execution that the driver made live: the sender
    /// settles it, and waiters share the receiver.
    fn begin_execution(&self, attempt: AttemptId) -> oneshot::Sender<Rc<Prepared>> {
        let (settle, settled) = oneshot::channel();
        *self.settlement.borrow_mut() = Some((attempt, settled.shared()));
        settle
    }

    /// What a waiter on `attempt` waits for (`None` where nothing will settle it here).
    fn settlement_of(&self, attempt: AttemptId) -> Option<Settlement> {
        let settlement = self.settlement.borrow();
        settlement.as_ref().filter(|(live, _)| *live == attempt).map(|(_, settled)| settled.clone())
    }

    /// Writes a pending step's record change and tells the driver how it went: the step
    /// to carry out, and whether the write held (a failure is logged here).
    async fn write(&self, pending: Pending, what: &str) -> (Decided, bool) {
        match self.apply(&pending.step().change).await {
            Ok(()) => (self.key.borrow_mut().handle_written(pending), true),
            Err(error) => {
                console_error!("object {}: writing {} failed: {}", self.short_id(), what, error);
                (self.key.borrow_mut().handle_write_failed(pending, now_ms()), false)
            }
        }
    }

    /// Runs the first attempt: forwards it, records the outcome, wakes the waiters and
    /// answers the caller.
    async fn execute(
        &self,
        req: &web_sys::Request,
        body: Option<&JsValue>,
        sending: Sending<'_>,
        settle: oneshot::Sender<Rc<Prepared>>,
        log: &mut RequestLog,
    ) -> Result<Response> {
        let Sending { attempt, policy, probe_first } = sending;
        let started = now_ms();
        let target = req.url();
        let headers = req.headers();
        let (result, mut answer) = match body {
            Some(body) => {
                let request = Outgoing { target: &target, method: &req.method(), headers: &headers, body };
                self.send(request, policy, probe_first).await
            }
            // The body could not be read: nothing was sent, and the key is released.
            None => (OriginResult::ConnectRefused, None),
        };
        // The body moves into the stored answer: the caller's response shares it below.
        let stored = answer.as_mut().and_then(storable).map(Arc::new);
        log.origin_status = answer.as_ref().map(|answer| answer.status);
        log.origin_ms = Some(now_ms().saturating_sub(started));
        let pending = self.key.borrow_mut().handle_origin_finished(attempt, result, stored, policy, now_ms());
        let (decided, _) = self.write(pending, "the outcome").await;
        if let Some(decision) = decided.decision {
            log.decision = decision;
        }
        let mut settle = Some(settle);
        let mut response = None;
        let mut alarms = Vec::new();
        for action in decided.step.actions {
            match action {
                // Issued in the same turn as the outcome write (one durable write), and
                // confirmed once the waiters are woken.
                Action::SetAlarm(at) => alarms.push((at, self.issue_alarm(at))),
                Action::Settle { attempt, answer: shared, origin_answered } => {
                    self.end_execution(attempt);
                    // One copy of the body for the waiters and the caller alike.
                    let prepared = self.prepared(&shared);
                    if let Some(settle) = settle.take() {
                        let _ = settle.send(prepared.clone());
                    }
                    response = Some(match (answer.take(), origin_answered) {
                        (Some(answer), true) => live_response(answer, &prepared),
                        _ => respond::stored(&shared, false),
                    });
                }
                _ => {}
            }
        }
        for (at, alarm) in alarms {
            // The outcome was already sent and cannot be taken back. Should the alarm still
            // fail, the claim's alarm stays in place (it fires at the claim's expiry, and
            // moves itself to the record's), and an expired record is deleted when read.
            self.confirm_alarm(at, alarm).await;
        }
        // A chunked answer is replayed from its rows from now on: the whole body the
        // waiters shared is not kept for the rest of this instance's life.
        if self.key.borrow().record().is_some_and(|record| record.chunks().is_some()) {
            self.prepared.borrow_mut().take();
        }
        // Should the step not settle (it always does), the waiters are released by the
        // dropped sender and get 409.
        self.end_execution(attempt);
        response.unwrap_or_else(|| respond::problem(&storage_unavailable()))
    }

    /// Sends one attempt to the origin (through the route's service binding, when it has
    /// one). A binding that cannot be used sends nothing: the attempt is released.
    pub(super) async fn send(
        &self,
        request: Outgoing<'_>,
        policy: &ObjectPolicy,
        probe_first: bool,
    ) -> (OriginResult, Option<OriginAnswer>) {
        let service = match policy.origin_service.as_deref() {
            None => None,
            Some(name) => match self.env.service(name) {
                Ok(service) => Some(service.into_rpc::<worker_sys::Fetcher>()),
                Err(error) => {
                    console_error!(
                        "object {}: the origin service binding {} is unusable: {}",
                        self.short_id(),
                        name,
                        error
                    );
                    return (OriginResult::ConnectRefused, None);
                }
            },
        };
        origin::forward(
            request.target,
            request.method,
            request.headers,
            request.body,
            policy.timing.origin_timeout_ms,
            probe_first,
            policy.max_stored_response_bytes,
            service,
            settings::get(&self.env).origin_auth_secret.as_deref(),
            policy.key_header(),
        )
        .await
    }

    /// Observe mode, a request's arrival: steps the machine as for a real request, writes
    /// what it would write (the claim, the alarm) and answers with the decision, without
    /// forwarding, replaying or waiting. A claim becomes the live execution until the
    /// Worker brings its outcome ([`KeyObject::observe_outcome`]) or its lease ends.
    async fn observe_arrival(
        &self,
        req: &web_sys::Request,
        fingerprint: Digest256,
        policy: &ObjectPolicy,
        body_bytes: u64,
        now: u64,
    ) -> Result<Response> {
        if let Err(error) = self.record() {
            console_error!("object {}: reading the record failed: {}", self.short_id(), error);
            drain_body(req, None).await;
            return decision_answer(Decision::Rejected(ProblemKind::StorageUnavailable), None);
        }
        let arrival = Arrival {
            fingerprint,
            new_attempt: AttemptId(random_u64()),
            policy,
            body_bytes,
            accept: None,
            observing: true,
        };
        let pending = self.key.borrow_mut().handle_arrival(arrival, now);
        let (decided, _) = self.write(pending, "the observed claim").await;
        // As for a real request, everything is in place before the first await. Enforcing
        // would have waited on a live attempt; observing never does.
        let decision = decided.decision.unwrap_or(Decision::Rejected(ProblemKind::StorageUnavailable));
        let claimed = forwarded(&decided);
        if let Some(attempt) = claimed {
            let settle = self.begin_execution(attempt);
            *self.observed_settle.borrow_mut() = Some((attempt, settle));
        }
        let alarm = decided.step.actions.iter().find_map(|action| match action {
            Action::SetAlarm(at) => Some((*at, self.issue_alarm(*at))),
            _ => None,
        });
        drain_body(req, None).await;
        // Observing, the Worker has forwarded already: nothing to fail closed on. A claim
        // whose alarm could not be set is still deleted when read past its expiry.
        if let Some((at, alarm)) = alarm {
            self.confirm_alarm(at, alarm).await;
        }
        decision_answer(decision, claimed)
    }

    /// Observe mode, the origin's answer to a claimed request, as the Worker got it: recorded
    /// as enforcing would have recorded it. Answers with the decision (`executed`,
    /// `released` or `unknown`).
    async fn observe_outcome(
        &self,
        req: &web_sys::Request,
        attempt: AttemptId,
        outcome: &ObservedOutcome,
        policy: &ObjectPolicy,
    ) -> Result<Response> {
        let (result, answer) = match outcome {
            ObservedOutcome::Responded { status, headers: answer_headers } => {
                let status = *status;
                let answer_headers = answer_headers.clone();
                let cap = answer_body_cap(policy, &answer_headers);
                let body = match req.body() {
                    None => AnswerBody::Complete(Vec::new()),
                    Some(raw) => match origin::read_capped(raw, cap).await {
                        Ok(body) => body,
                        // The Worker's copy of the answer broke off: what the caller got is
                        // not known here.
                        Err(_) => {
                            drain_body(req, None).await;
                            return self
                                .settle_observed(attempt, OriginResult::ResetAfterSend, None, policy)
                                .await;
                        }
                    },
                };
                let result = match body {
                    AnswerBody::Complete(_) => OriginResult::Responded(status),
                    AnswerBody::Streamed(stream) => {
                        // Too large to store: read the rest and drop it.
                        let mut rest =
                            wasm_streams::ReadableStream::from_raw(stream.unchecked_into()).into_stream();
                        while let Some(Ok(_)) = rest.next().await {}
                        return self
                            .settle_observed(attempt, OriginResult::Oversized(status), None, policy)
                            .await;
                    }
                };
                let connection = answer_headers
                    .iter()
                    .find(|(name, _)| name.eq_ignore_ascii_case("connection"))
                    .map(|(_, value)| value.as_str());
                let connection_tokens = connection_tokens(connection);
                (result, Some(OriginAnswer { status, headers: answer_headers, connection_tokens, body }))
            }
            ObservedOutcome::Timeout => {
                drain_body(req, None).await;
                (OriginResult::TimedOut, None)
            }
            // The Worker read its copy only up to the stored-size cap.
            ObservedOutcome::Oversized { status } => {
                drain_body(req, None).await;
                return self.settle_observed(attempt, OriginResult::Oversized(*status), None, policy).await;
            }
            ObservedOutcome::Reset => {
                drain_body(req, None).await;
                (OriginResult::ResetAfterSend, None)
            }
        };
        self.settle_observed(attempt, result, answer, policy).await
    }

    /// Records an observed attempt's outcome (as [`KeyObject::execute`] does after its own
    /// forward), wakes anyone who joined it, and answers with the decision.
    async fn settle_observed(
        &self,
        attempt: AttemptId,
        result: OriginResult,
        mut answer: Option<OriginAnswer>,
        policy: &ObjectPolicy,
    ) -> Result<Response> {
        let stored = match result {
            OriginResult::Responded(_) => answer.as_mut().and_then(storable).map(Arc::new),
            _ => None,
        };
        let pending = self.key.borrow_mut().handle_origin_finished(attempt, result, stored, policy, now_ms());
        let (decided, _) = self.write(pending, "the observed outcome").await;
        let mut settle = self.take_observed_settle(attempt);
        let mut alarms = Vec::new();
        for action in decided.step.actions {
            match action {
                Action::SetAlarm(at) => alarms.push((at, self.issue_alarm(at))),
                Action::Settle { attempt, answer, .. } => {
                    self.end_execution(attempt);
                    if let Some(settle) = settle.take() {
                        let _ = settle.send(self.prepared(&answer));
                    }
                }
                _ => {}
            }
        }
        for (at, alarm) in alarms {
            self.confirm_alarm(at, alarm).await;
        }
        self.end_execution(attempt);
        decision_answer(decided.decision.unwrap_or(Decision::Unknown), None)
    }

    /// Forgets an observed claim whose lease has ended: its outcome will not come (the
    /// Worker's background work was cut short), and its record says what enforcing would
    /// say of it.
    fn expire_observed(&self, now: u64) {
        let expired = self.key.borrow_mut().expire_observed(now);
        if let Some(attempt) = expired {
            drop(self.take_observed_settle(attempt));
            self.end_execution(attempt);
        }
    }

    /// The sender that settles the observed claim of `attempt`, if it is the one kept.
    fn take_observed_settle(&self, attempt: AttemptId) -> Option<oneshot::Sender<Rc<Prepared>>> {
        let mut observed = self.observed_settle.borrow_mut();
        match observed.take() {
            Some((kept, settle)) if kept == attempt => Some(settle),
            other => {
                *observed = other;
                None
            }
        }
    }

    /// The stored answer prepared for replays: made once per stored answer and object life,
    /// then shared by every replay and waiter.
    fn prepared(&self, stored: &Arc<StoredResponse>) -> Rc<Prepared> {
        let mut prepared = self.prepared.borrow_mut();
        match &*prepared {
            Some(ready) if ready.is_for(stored) => ready.clone(),
            _ => {
                let ready = Rc::new(Prepared::new(stored.clone(), self.chunk_source(stored)));
                *prepared = Some(ready.clone());
                ready
            }
        }
    }

    /// Where a replay of `stored` reads its body from, when it is the cached record's
    /// chunked answer (`runtime::chunks`); `None` for an answer held whole in memory.
    fn chunk_source(&self, stored: &Arc<StoredResponse>) -> Option<chunks::Source> {
        let key = self.key.borrow();
        let Some(Record::Completed(done)) = key.record() else { return None };
        let manifest = done.chunks.as_ref().filter(|_| Arc::ptr_eq(&done.response, stored))?;
        Some(chunks::Source::new(self.sql().clone(), manifest.clone(), self.chunk_check.borrow().as_ref()))
    }

    /// The execution of `attempt` is over (the driver knows it already): its settlement
    /// is let go, so that no finished answer stays held for new waiters.
    fn end_execution(&self, attempt: AttemptId) {
        let mut settlement = self.settlement.borrow_mut();
        if settlement.as_ref().is_some_and(|(live, _)| *live == attempt) {
            *settlement = None;
        }
    }

    /// Whether the record is still the claim of `attempt` (the driver's fencing).
    fn claim_is_current(&self, attempt: AttemptId) -> bool {
        self.key.borrow().claim_is_current(attempt)
    }

    fn cached_record(&self) -> Option<Record> {
        self.key.borrow().record().cloned()
    }

    /// A duplicate waits for the live execution's answer, at most `wait_ms`. Returns the
    /// answer and whether it already carries the object's marker.
    async fn wait(&self, waiting: Waiting, trace: &Trace, log: &mut RequestLog) -> Result<Response> {
        let Waiting { attempt, settled, body_bytes, wait_ms } = waiting;
        let started = now_ms();
        let outcome = match settled {
            Some(settled) => {
                let timeout = Delay::from(Duration::from_millis(wait_ms));
                match select(settled, timeout).await {
                    Either::Left((Ok(answer), _)) => Some(answer),
                    _ => None,
                }
            }
            None => None,
        };
        log.wait_ms = Some(now_ms().saturating_sub(started));
        let over = self.key.borrow_mut().handle_wait_over(attempt, body_bytes, outcome.is_some(), now_ms());
        match (outcome, over) {
            (Some(answer), Ok(decision)) => {
                log.decision = decision;
                answer.response()
            }
            (_, Err(problem)) => {
                log.decision = Decision::Rejected(problem.kind);
                traced_problem(&problem, trace)
            }
            (None, Ok(_)) => traced_problem(&storage_unavailable(), trace),
        }
    }

    /// The object id as text (64 hex digits), read once.
    fn object_id(&self) -> &str {
        self.id.get_or_init(|| self.state.id().to_string())
    }

    fn sql(&self) -> &SqlStorage {
        self.sql.get_or_init(|| self.state.storage().sql())
    }

    fn raw_storage(&self) -> &DurableObjectStorage {
        self.storage.get_or_init(|| self.state.storage()).as_raw()
    }

    fn short_id(&self) -> &str {
        &self.object_id()[..16]
    }
}

/// Marks an answer as the object's own (`core::wire::ANSWERED_HEADER`). Prepared replays carry
/// the marker already. Should the answer's headers be immutable, it is rebuilt around the
/// same body with a marked copy of them.
fn mark_answered(response: Result<Response>) -> Result<Response> {
    let response = response?;
    let headers = response.headers();
    if headers.has(ANSWERED_HEADER)? || headers.set(ANSWERED_HEADER, ANSWERED_PLAIN).is_ok() {
        return Ok(response);
    }
    let copy = Headers::new_with_headers(&headers)?;
    copy.set(ANSWERED_HEADER, ANSWERED_PLAIN)?;
    let init = web_sys::ResponseInit::new();
    init.set_status(response.status());
    init.set_headers(&copy);
    Ok(Response::new_with_opt_readable_stream_and_init(response.body().as_ref(), &init)?)
}

/// Observe mode's answer to the Worker: 204, marked with the decision (and the claimed
/// attempt).
fn decision_answer(decision: Decision, claimed: Option<AttemptId>) -> Result<Response> {
    let headers = Headers::new()?;
    headers.set(ANSWERED_HEADER, &Answered::Observed { decision, claimed }.encode())?;
    respond::build(204, &headers, &[])
}

fn json_response(value: &serde_json::Value) -> Result<Response> {
    let headers = Headers::new()?;
    headers.set("content-type", "application/json")?;
    respond::build(200, &headers, &serde_json::to_vec(value).unwrap_or_default())
}

/// The largest declared body [`drain_body`] reads in one call.
const DRAIN_WHOLE_BYTES: u64 = 64 * 1024;

/// One attempt to send, as the envelope described it.
struct Sending<'a> {
    attempt: AttemptId,
    policy: &'a ObjectPolicy,
    /// Whether the origin may be probed with a TCP connect first (`KeyCall::probe_origin`).
    probe_first: bool,
}

/// A duplicate's place among an execution's waiters.
pub(super) struct Waiting {
    pub attempt: AttemptId,
    /// What it waits for (`None` where nothing will settle it here).
    pub settled: Option<Settlement>,
    pub body_bytes: u64,
    pub wait_ms: u64,
}

/// A problem answered to the request `trace` names (its `instance`).
pub(super) fn traced_problem(problem: &Problem, trace: &Trace) -> Result<Response> {
    respond::problem(&problem.clone().for_request(Some(trace)))
}

/// A request on its way to the origin.
pub(super) struct Outgoing<'a> {
    pub target: &'a str,
    pub method: &'a str,
    pub headers: &'a Headers,
    /// As the object holds it: a JavaScript value that never enters Wasm memory.
    pub body: &'a JsValue,
}

/// The request body as one `ArrayBuffer`.
async fn read_body(req: &web_sys::Request) -> std::result::Result<JsValue, JsValue> {
    JsFuture::from(req.array_buffer()?).await
}

/// Reads the request body to its end and keeps none of it: each chunk stays a JavaScript
/// value and is dropped at once (the runtime drops a connection whose body is left unread).
/// A body the Worker declared small (`KeyCall::body_bytes`) is read with one
/// `arrayBuffer()` instead: one call across the boundary rather than a reader, a read per
/// chunk and a release (issue 17); it is dropped as soon as it is read, and a large body
/// still never sits whole in a waiter.
async fn drain_body(req: &web_sys::Request, declared_bytes: Option<u64>) {
    if declared_bytes.is_some_and(|bytes| bytes <= DRAIN_WHOLE_BYTES) {
        if let Ok(read) = req.array_buffer() {
            let _ = JsFuture::from(read).await;
            return;
        }
    }
    let Some(raw) = req.body() else { return };
    let mut chunks = wasm_streams::ReadableStream::from_raw(raw.unchecked_into()).into_stream();
    while let Some(Ok(_)) = chunks.next().await {}
}

/// The attempt a step forwards, if it does.
fn forwarded(decided: &Decided) -> Option<AttemptId> {
    decided.step.actions.iter().find_map(|action| match action {
        Action::Forward { attempt } => Some(*attempt),
        _ => None,
    })
}

/// The origin's answer as it is stored for replay, its body moved out of `answer` (held
/// once, not twice); `None` for one streamed past the cap.
fn storable(answer: &mut OriginAnswer) -> Option<StoredResponse> {
    let AnswerBody::Complete(body) = &mut answer.body else { return None };
    let body = std::mem::take(body);
    let headers = answer
        .headers
        .iter()
        .filter(|(name, _)| store_for_replay(name, &answer.connection_tokens))
        .cloned()
        .collect();
    Some(StoredResponse { status: answer.status, headers, body })
}

/// The origin's answer for the caller whose request executed: every end-to-end header,
/// cookies included; the body the waiters share (`prepared`, which `storable` moved it
/// into), or one over the stored-size cap as the stream it is.
fn live_response(answer: OriginAnswer, prepared: &Prepared) -> Result<Response> {
    let headers = Headers::new()?;
    for (name, value) in &answer.headers {
        if pass_to_caller(name, &answer.connection_tokens) {
            headers.append(name, value)?;
        }
    }
    match answer.body {
        AnswerBody::Complete(_) => prepared.live(&headers),
        AnswerBody::Streamed(stream) => {
            let init = web_sys::ResponseInit::new();
            init.set_status(answer.status);
            init.set_headers(&headers);
            Ok(Response::new_with_opt_readable_stream_and_init(Some(&stream), &init)?)
        }
    }
}

/// When an alarm that could not read its record looks again.
const ALARM_AFTER_READ_ERROR_MS: u64 = 60_000;
