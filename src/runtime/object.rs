//! The Durable Object for one (caller scope, idempotency key): the key's single writer.
//!
//! Every decision comes from the key's driver, `core::key_rules::key_state::KeyState` (its
//! doc says how the runtime feeds it events, writes its steps and carries them out). This
//! file is load, feed the event, write the step (`runtime::key_sync`), and carry out its
//! actions in one loop, [`KeyObject::carry_out`]: one `match`, no arm for "the rest". What
//! stays here is what only the runtime has: the origin fetch, the prepared answers, and
//! the key's storage (`runtime::key_storage`: the record, sealing, chunk rows, the alarm).
//!
//! Order inside `fetch`, which is what makes duplicates safe:
//! 1. Decide from the envelope (`core::edge_rules::wire`), the cached record (one
//!    synchronous SQL read the first time) and the live execution, and write the claim, all
//!    before the first `.await`. Other requests reach the object whenever the handler
//!    awaits, so whatever they must see has to be in place by then.
//! 2. Carry out the actions: set the alarm, forward (the request body read first), replay,
//!    join, reject. Every path reads the body (the runtime drops a connection whose request
//!    body was left unread): only a forward keeps it; every other path drains it chunk by
//!    chunk, so a waiter holds no body.
//!
//! A replay of an answer already in memory takes none of those awaits but the drain:
//! `replay` decides it in one turn, in the same order, and `src/entry.mjs` drains the body
//! and answers (the replay is the hot path). Any other arrival goes to `fetch`.
//!
//! Every answer the object gives carries its mark (`core::edge_rules::wire::ANSWERED_HEADER`), added in one
//! place (`fetch`) whatever path made the answer, errors included: the Worker treats an
//! unmarked answer as one the object may not have given, and never fails open on it.
//!
//! Observe mode's two calls (`core::vocabulary::key_terms::Mode` says what each records)
//! go through the same loop; the object forwards nothing and answers with the decision.
//! Asynchronous acceptance's half is the child module `async_job`.
//!
//! The execution runs inside the first caller's handler. If that caller disconnects, the
//! handler still runs to the end (the runtime keeps driving it), so the outcome is recorded
//! and every waiter is answered.

use std::cell::{Cell, RefCell};
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{select, Either};

use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::{console_error, durable_object, Delay, DurableObject, Env, Result, State};

use web_sys::Response;

use super::key_storage::KeyStorage;
use super::origin::{self, OriginAnswer, Outgoing};
use super::respond::{self, Prepared};
use super::{body, metrics, now_ms, outcome_queue, random_u64, settings, AnswerFault};
use crate::core::edge_rules::config::{PanicSite, PANIC_TEST_HEADER};
use crate::core::edge_rules::log::{LineContext, RequestLog};
use crate::core::edge_rules::scope::ScopeLog;
use crate::core::edge_rules::wire::{KeyCall, KeyStep, ToObject, WireError, ENVELOPE_HEADER};
use crate::core::formats::job::StoredRequest;
use crate::core::formats::key_record::{AttemptId, KeyRecord, StoredResponse};
use crate::core::key_rules::key_state::{refusal, AlarmUnset, CallerAnswer, Decided, KeyState};
use crate::core::key_rules::machine::async_job::accepted_response;
use crate::core::key_rules::machine::Action;
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::fault::{Fault, FaultSource, Stage};
use crate::core::vocabulary::outcome_table::OriginVerdict;
use crate::core::vocabulary::problem::Problem;
use crate::core::vocabulary::trace::Trace;

mod async_job;

/// The object (`worker`'s `#[durable_object]`, which `src/entry.mjs` builds): `fetch` works
/// on the runtime's own `Request` and `Response`.
#[durable_object(alarm)]
pub struct KeyObject {
    pub(super) env: Env,
    /// The key's driver: the record as this instance knows it, and the live execution
    /// with its waiters, who share its prepared answer.
    pub(super) key: RefCell<KeyState<Rc<Prepared>>>,
    /// The stored answer prepared for replays, made once per stored answer and shared by
    /// every replay and waiter.
    replays: RefCell<Option<Rc<Prepared>>>,
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
            replays: RefCell::new(None),
            alarm_runs: Cell::new(0),
        }
    }

    /// The runtime's `fetch` on the object. The one place where answers leave it: each
    /// gets the object's marker, and an error becomes a marked 503 (never a thrown error,
    /// which the Worker could not tell from a platform failure).
    async fn fetch(&self, req: worker::Request) -> worker::Result<worker::Response> {
        let req = Clone::clone(req.inner());
        self.marked(self.handle(req).await).map(worker::Response::from).map_err(Into::into)
    }

    /// The runtime's `alarm` on the object. A failure is thrown, never swallowed: the
    /// platform then retries the alarm (with backoff), so a deletion that failed once is
    /// tried again.
    async fn alarm(&self) -> worker::Result<worker::Response> {
        match self.on_alarm().await {
            Ok(()) => worker::Response::empty(),
            Err(error) => {
                console_error!("{}: alarm failed, the platform retries it: {error}", self.subject());
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
    /// nothing (`core::key_rules::key_state::KeyState::handle_replay`). Returns `[answer, drained]` (the
    /// marked answer, and the drain of the request's body under way, which `src/entry.mjs`
    /// awaits before it answers), or `undefined`, having changed nothing a request could
    /// see, for `fetch` to take the arrival the whole way. An answer that cannot be marked
    /// is thrown, as `fetch` rejects with it.
    pub fn replay(&self, req: web_sys::Request) -> std::result::Result<JsValue, JsValue> {
        let Some((response, drained)) = self.replayed(&req) else { return Ok(JsValue::UNDEFINED) };
        Ok(js_sys::Array::of2(&self.marked(response)?.into(), &drained).into())
    }
}

impl KeyObject {
    /// An answer as it leaves the object (`fetch`, `replay`): marked, and an error a marked
    /// problem, logged.
    fn marked(&self, answer: Result<Response>) -> std::result::Result<Response, JsValue> {
        let answer =
            answer.or_else(|error| respond::problem(&self.logged(error.fault(), "answering", &error)));
        respond::marked(answer).map_err(JsValue::from)
    }

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
                console_error!("{}: the call's envelope is unreadable: {error}", self.subject());
                body::drain(&req, None).await;
                let problem = error.problem();
                let object = Some(self.object_id().to_owned());
                metrics::write_point(&self.env, &RequestLog::refused(object, &problem));
                return respond::problem(&problem);
            }
        };
        let now = now_ms();
        let _ = self.store.scope_salt.set(call.scope_salt);
        // A sealed answer is opened first (an await): the decision below reads the record as
        // it is after that, never a copy from before it.
        let mut log = RequestLog { storage: Some(calls), ..self.request_log(Some(call.scope)) };
        // `consumed`: an observed outcome's body was read for its answer.
        let (decided, observing, consumed) = match self.open_sealed_record().await {
            Err(error) => {
                let fault = Fault::storage(error.operation(), Stage::BeforeClaim);
                (refusal(self.logged(fault, "opening the stored answer", &error)), false, false)
            }
            Ok(()) => {
                // Observe mode: the same record, opened the same way; nothing forwarded from
                // here (`KeyState::expire_observed` first).
                self.key.borrow_mut().expire_observed(now);
                let plan = call.arrival_plan();
                let pending = match &call.step {
                    // The origin's answer to an observed claim, as the Worker got it.
                    KeyStep::ObserveOutcome { attempt, outcome } => {
                        log.decision = Decision::Unknown;
                        let (result, mut answer) = origin::reported(&req, outcome, &call.policy).await;
                        let stored = answer.as_mut().and_then(OriginAnswer::take_storable).map(Arc::new);
                        let (policy, now) = (&call.policy, now_ms());
                        self.key.borrow_mut().handle_origin_finished(*attempt, result, stored, policy, now)
                    }
                    // The driver's first step (`KeyState::handle_call`): a retry's lookup
                    // (`runtime::reconcile`), then `Arrive` ([`KeyObject::arrival`]), in the loop.
                    KeyStep::Enforce { .. } | KeyStep::ObserveArrival => {
                        let reconciles = plan.reconcile && self.record().is_ok();
                        self.key.borrow_mut().handle_call(reconciles, call.fingerprint, now)
                    }
                };
                let consumed = matches!(call.step, KeyStep::ObserveOutcome { .. });
                (self.write(pending).await, plan.observing, consumed)
            }
        };
        let start = Start::Arrival { req: &req, call: &call, body: None, consumed, observing };
        let mut turn = Turn::new(start, log);
        let done = self.carry_out(decided, &mut turn).await;
        let Turn { mut log, answer, forwarded, .. } = turn;
        if observing {
            // Observing, the Worker answers and logs: it is told the decision.
            return respond::observed_decision(done.decision.unwrap_or(log.decision), forwarded);
        }
        log.decision = done.decision.unwrap_or(log.decision);
        let response = answer.unwrap_or_else(|| respond::traced_problem(&NO_ANSWER.problem(), &call.trace));
        self.answer(response, &mut log, &call.trace, received)
    }

    /// An arrival's step (`Arrive`), written: decided on the record as it is after every
    /// await that feeds it (its lookup's verdict, when one came first; the sealing of the
    /// route's lookup and of a job's request, `async_job`), and written before any further
    /// await lets other requests in (a forward is the live execution from then on, a join
    /// one of its waiters). `body`: the request's body where it was read already (while the
    /// arrival waited on a lookup), left there for a forward; `consumed`: whether its
    /// stream was read (for that, or for a job). Observed, it is stepped as for a real
    /// request (`KeyState::handle_arrival`).
    async fn arrival(
        &self,
        req: &web_sys::Request,
        call: &KeyCall,
        body: &mut Option<JsResult>,
        consumed: &mut bool,
        now: u64,
    ) -> Decided {
        // Served as a job or synchronously, and whether it reconciles: the core's plan.
        let plan = call.arrival_plan();
        let (mut lookup, mut unsealed) = (None, false);
        // The route's lookup, sealed for a claim (`runtime::reconcile`), bound to the time
        // the arrival is decided at.
        if let Some(reconcile) = call.reconcile.as_ref().filter(|_| plan.reconcile) {
            (lookup, unsealed) = match self.sealed_lookup(&req.headers(), call, reconcile, now).await {
                Ok(lookup) => (lookup, false),
                Err(()) => (None, true),
            };
        }
        let accept = match plan.accept {
            None => None,
            Some(config) => {
                // A job's request is read whole (unless it was already) and sealed.
                let read = read_body(req, body, consumed).await;
                match self.sealed_for_later(req, read, call, config, now).await {
                    Ok(accept) => Some(accept),
                    Err(problem) => return refusal(problem),
                }
            }
        };
        if let Err(error) = self.record() {
            let fault = Fault::storage(error.operation(), Stage::BeforeClaim);
            return refusal(self.logged(fault, "reading the record", &error));
        }
        let arrival = call.arrival(AttemptId(random_u64()), accept, lookup);
        let mut pending = self.key.borrow_mut().handle_arrival(arrival, now);
        if unsealed {
            pending = self.key.borrow_mut().handle_lookup_unsealed(pending);
        }
        self.write(pending).await
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
        if !call.may_replay_at_once() {
            return None;
        }
        let _ = self.store.scope_salt.set(call.scope_salt);
        let record = self.record().ok()??;
        if self.store.has_to_open(&record) {
            return None;
        }
        let received = now_ms();
        let (stored, decided) = self
            .key
            .borrow_mut()
            .handle_replay(call.arrival(AttemptId(random_u64()), None, None), received)?;
        let drained = body::start_drain(req, Some(call.body_bytes));
        let mut log = RequestLog { storage: Some(self.store.calls()), ..self.request_log(Some(call.scope)) };
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

    /// The carry-out loop: the step's actions, as the key's driver hands them out
    /// (`Decided::poll_action`, `Decided::follow`), each carried out here, in order. `turn`
    /// says what started it, and so who gets the answer. Returns the step as it ended: its
    /// decision, and whether it fails the alarm.
    pub(super) async fn carry_out(&self, mut decided: Decided, turn: &mut Turn<'_>) -> Decided {
        while let Some(action) = decided.poll_action() {
            match action {
                Action::SetAlarm(at) => {
                    if !self.store.set_alarm(at).await {
                        // What the rest of the step then does is the driver's to say.
                        let unset = self.key.borrow_mut().handle_alarm_unset(decided);
                        decided = match unset {
                            AlarmUnset::Carry(rest) => rest,
                            AlarmUnset::Instead(pending) => self.write(pending).await,
                        };
                    }
                }
                Action::Forward { attempt } => {
                    if let Some(outcome) = self.forward(attempt, turn).await {
                        decided.follow(outcome);
                    }
                }
                Action::Settle { attempt, answer, origin_answered } => {
                    self.settle(attempt, &answer, origin_answered, turn)
                }
                Action::Lookup { attempt } => match self.carry_out_lookup(attempt, turn).await {
                    Ok(Some(verdict)) => decided.follow(verdict),
                    Ok(None) => {}
                    // Past the lookup's waiters' caps: answered at once, holding nothing.
                    Err(problem) => decided = refusal(problem),
                },
                // The arrival whose lookup came first, decided on the record as it is now.
                Action::Arrive => {
                    if let Start::Arrival { req, call, body, consumed, .. } = &mut turn.start {
                        decided.follow(self.arrival(req, call, body, consumed, now_ms()).await);
                    }
                }
                Action::Join { attempt, wait_ms } => {
                    // What it waits for is taken before any await: the execution may end
                    // during one.
                    let settled = self.key.borrow().waiters_of(attempt);
                    if let Some(body_bytes) = turn.caller().map(|call| call.body_bytes) {
                        turn.let_go_of_body().await;
                        let started = now_ms();
                        // At most `wait_ms` (what a waiter then gets: `KeyState::handle_waited`).
                        let wait = async { settled?.await.ok() };
                        let deadline = Delay::from(Duration::from_millis(wait_ms));
                        let outcome = match select(pin!(wait), deadline).await {
                            Either::Left((answer, _)) => answer,
                            Either::Right(((), _)) => None,
                        };
                        turn.log.wait_ms = Some(now_ms().saturating_sub(started));
                        let (decision, waited) =
                            self.key.borrow_mut().handle_waited(attempt, body_bytes, outcome, now_ms());
                        let answer = match waited {
                            Ok(answer) => answer.response(),
                            Err(problem) => respond::traced_problem(&problem, turn.trace()),
                        };
                        decided.decision = Some(decision);
                        turn.answer = Some(answer);
                    }
                }
                Action::Replay(stored) => turn.give(|_| self.prepared(&stored).response()).await,
                Action::Reject(problem) => turn.give(|trace| respond::traced_problem(&problem, trace)).await,
                // A job's 202: its claim, or a poll of it.
                Action::Accepted { retry_after } => {
                    turn.give(|_| respond::stored(&accepted_response(retry_after))).await
                }
            }
        }
        turn.let_go_of_body().await;
        decided.fails_alarm = decided.fails_alarm.or(turn.fails);
        decided
    }

    /// A step's `Forward` of `attempt`: an arrival's request sent to the origin (its body
    /// read first), or the alarm's job sent; observing, only noted (the Worker forwards).
    /// The outcome is stepped and written, its decision logged and published, and the
    /// step returned to join the loop.
    async fn forward(&self, attempt: AttemptId, turn: &mut Turn<'_>) -> Option<Decided> {
        let (req, call, read) = match &mut turn.start {
            Start::Arrival { observing: true, .. } => {
                turn.forwarded = Some(attempt);
                return None;
            }
            Start::Alarm { request } => {
                let request = request.take();
                return self.send_job(attempt, request, turn).await;
            }
            Start::Arrival { req, call, body, consumed, .. } => {
                // The body stays a JavaScript value: the object forwards it and never looks
                // inside. A failure to read it forwards nothing, and the key is released.
                (*req, *call, read_body(req, body, consumed).await)
            }
        };
        let started = now_ms();
        let (result, mut answer) = match read {
            Ok(body) => {
                let (target, headers) = (req.url(), req.headers());
                let request =
                    Outgoing { target: &target, method: &req.method(), headers: &headers, body: &body };
                origin::send(&self.env, request, &call.policy, call.probe_origin).await
            }
            Err(_) => (OriginVerdict::NotSent.result(), None),
        };
        // The body moves into the stored answer: the caller's response shares it.
        let stored = answer.as_mut().and_then(OriginAnswer::take_storable).map(Arc::new);
        turn.log.origin_status = answer.as_ref().map(|answer| answer.status);
        turn.log.origin_ms = Some(now_ms().saturating_sub(started));
        turn.live = answer;
        let pending =
            self.key.borrow_mut().handle_origin_finished(attempt, result, stored, &call.policy, now_ms());
        let decided = self.write(pending).await;
        if let Some(decision) = decided.decision {
            outcome_queue::publish(&self.env, self.object_id(), decision, turn.log.origin_status, false);
        }
        Some(decided)
    }

    /// A step's `Settle`: whoever waits on `attempt` gets `answer` (one copy of the body for
    /// the waiters and the caller alike), and an arrival's caller the answer the driver
    /// says (`KeyState::handle_settled`), which also says whether memory keeps it.
    fn settle(
        &self,
        attempt: AttemptId,
        answer: &Arc<StoredResponse>,
        origin_answered: bool,
        turn: &mut Turn<'_>,
    ) {
        let prepared = self.prepared(answer);
        let settled = self.key.borrow_mut().handle_settled(attempt, prepared.clone(), origin_answered);
        if !settled.keep_in_memory {
            self.replays.take();
        }
        if turn.caller().is_some() {
            turn.answer = Some(match (settled.caller, turn.live.take()) {
                (CallerAnswer::Live, Some(live)) => respond::live(live, &prepared),
                (CallerAnswer::Live, None) | (CallerAnswer::Settled, _) => respond::stored(answer),
            });
        }
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
        // Until now `storage` held the count at arrival (`handle`, `replayed`): the line says
        // what was done since.
        log.storage = log.storage.map(|before| self.store.calls().since(before));
        // The line names the request (`core::vocabulary::trace::Trace`).
        metrics::write_point_in(&self.env, log, LineContext { trace: Some(trace), ..LineContext::default() });
        response
    }

    /// The log line of a request to this object before its decision is known
    /// (`RequestLog::undecided`).
    pub(super) fn request_log(&self, scope: Option<ScopeLog>) -> RequestLog {
        RequestLog::undecided(Some(self.object_id().to_owned()), scope)
    }

    /// The stored answer prepared for replays, shared by every replay and waiter.
    fn prepared(&self, stored: &Arc<StoredResponse>) -> Rc<Prepared> {
        let mut prepared = self.replays.borrow_mut();
        match &*prepared {
            Some(ready) if ready.is_for(stored) => ready.clone(),
            Some(_) | None => {
                // A chunked answer's body is read from its rows.
                let chunks = self.store.chunk_source(self.key.borrow().record(), stored);
                prepared.insert(Rc::new(Prepared::new(stored.clone(), chunks))).clone()
            }
        }
    }

    pub(super) fn object_id(&self) -> &str {
        self.store.object_id()
    }

    /// Logs `fault` (what was being done, and the detail): the problem it answers with.
    pub(super) fn logged(&self, fault: Fault, what: &str, detail: impl std::fmt::Display) -> Problem {
        console_error!("{}", fault.source.log_line(&self.subject(), what, detail));
        fault.problem()
    }

    /// This object as a log line names it (`object {short id}`).
    pub(super) fn subject(&self) -> String {
        format!("object {}", self.store.short_id())
    }
}

/// What started a turn of the carry-out loop: who gets its answer, and what a `Forward`
/// sends.
pub(super) enum Start<'a> {
    /// A request's arrival: enforcing, it gets the answer; `observing`, the Worker forwards
    /// and answers, and the object records and answers with the decision. Its body is read
    /// for a forward and drained otherwise (`body`: read already, while it waited on a
    /// lookup; `consumed`: the stream was read, for that, for a job or for an outcome).
    Arrival {
        req: &'a web_sys::Request,
        call: &'a KeyCall,
        body: Option<JsResult>,
        consumed: bool,
        observing: bool,
    },
    /// The alarm: nobody to answer; a job's send carries the request opened for it.
    Alarm { request: Option<StoredRequest> },
}

/// One turn of the carry-out loop: what started it, and what it has come to.
pub(super) struct Turn<'a> {
    pub start: Start<'a>,
    /// The request's log line (an arrival's).
    pub log: RequestLog,
    /// The caller's answer (an arrival's).
    pub answer: Option<Result<Response>>,
    /// The origin's answer to the forward, for its caller.
    live: Option<OriginAnswer>,
    /// Observing: the attempt the claim would forward.
    forwarded: Option<AttemptId>,
    /// Why the alarm's run fails, where the runtime found it (a stored request or lookup
    /// that could not be opened).
    pub fails: Option<&'static str>,
}

impl<'a> Turn<'a> {
    pub fn new(start: Start<'a>, log: RequestLog) -> Turn<'a> {
        Turn { start, log, answer: None, live: None, forwarded: None, fails: None }
    }

    /// The call of the caller this turn answers (an arrival, enforcing), if it answers one.
    fn caller(&self) -> Option<&KeyCall> {
        match &self.start {
            Start::Arrival { call, observing: false, .. } => Some(call),
            Start::Arrival { observing: true, .. } | Start::Alarm { .. } => None,
        }
    }

    /// The request's name, for a problem's answer.
    fn trace(&self) -> &Trace {
        self.caller().map_or(&NO_TRACE, |call| &call.trace)
    }

    /// The request's body, where nothing forwards it: drained (a waiter holds no body),
    /// or, read already, let go.
    async fn let_go_of_body(&mut self) {
        match &mut self.start {
            Start::Arrival { req, call, body, consumed, observing } => {
                drop(body.take());
                if !*consumed {
                    *consumed = true;
                    body::drain(req, (!*observing).then_some(call.body_bytes)).await;
                }
            }
            Start::Alarm { .. } => {}
        }
    }

    /// The step's own answer to the caller (a replay, a refusal, a job's 202), made for the
    /// request's name before the body is let go (an await, during which the record may
    /// change); nothing where the turn answers no caller.
    async fn give(&mut self, answer: impl FnOnce(&Trace) -> Result<Response>) {
        if self.caller().is_some() {
            let answer = answer(self.trace());
            self.let_go_of_body().await;
            self.answer = Some(answer);
        }
    }
}

/// An arrival's body, read once: the read it kept while it waited on a lookup, or read
/// whole now.
async fn read_body(req: &web_sys::Request, body: &mut Option<JsResult>, consumed: &mut bool) -> JsResult {
    *consumed = true;
    match body.take() {
        Some(read) => read,
        None => body::read_whole(req).await,
    }
}

/// A body's read: the `ArrayBuffer`, or the error reading it.
pub(super) type JsResult = std::result::Result<JsValue, JsValue>;

/// The name of a turn with no request (the alarm's, observe mode's).
static NO_TRACE: Trace = Trace { request_id: String::new(), method: String::new(), route: None };

/// The fault of a step that gave no answer to send (the key's driver always gives one).
const NO_ANSWER: Fault = Fault { source: FaultSource::NoAnswer, stage: Stage::AfterStep };
