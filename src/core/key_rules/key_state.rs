//! The per-key driver: what one instance of a key's Durable Object holds in memory, and
//! every decision it makes about it.
//!
//! quinn-proto's shape. `core::key_rules::machine::step` is the rule book for one event on a stored
//! record; `KeyState` is the instance that lives with it: the record as this instance
//! knows it and the execution it is running (with its waiters, or the lease of an observed
//! claim). The runtime (`runtime::object`) feeds in what happened, each `handle_*` with
//! `now`, and gets back a [`Pending`] step: it writes the step's record change, tells the
//! storage's answer (`handle_written` / `handle_write_failed`), and carries out the
//! [`Decided`] step, whose decision is the log line's. Requests interleave at every await
//! of the runtime, so a step and its decision travel together rather than sit in one slot
//! of the key. The record in memory follows storage at the moment of each write
//! ([`KeyState::remember`], [`KeyState::handle_deleting`]), not when the step is reported:
//! another request may have claimed the key in between. It reads no clock and does no
//! I/O.
//!
//! Decisions that live here and nowhere else:
//! - expire-on-read: a record past its expiry, with no execution of its own running here,
//!   is gone the moment anything reads it ([`KeyState::expired_on_read`]);
//! - the live load an arrival is judged by (waiters, the bytes they brought);
//! - what an alarm that cannot be set does to the rest of a step, by what the step was for
//!   ([`KeyState::handle_alarm_unset`]): a claim is withdrawn, nothing having been sent; a
//!   job whose send could not be scheduled is put back as it was; the alarm's own run
//!   fails, so that the platform retries it ([`Decided::fails_alarm`]);
//! - which write failures fail the alarm's run ([`KeyState::handle_write_failed`]), and
//!   which fencing a write is made under ([`Pending::fence`]);
//! - a job's send goes out only as the request that was opened for it
//!   ([`KeyState::check_job_send`]);
//! - an observed claim lives for its lease and no longer ([`KeyState::expire_observed`]);
//! - a failed outcome write still answers the callers, the claim holding the key;
//! - how much of an origin's answer may be stored ([`answer_body_cap`]);
//! - who waits for the live execution, and for what: the driver holds the execution's
//!   answer as its waiters share it (`A`, the runtime's prepared answer), so the waiters
//!   live with the execution they wait for, in one state; an execution that ends without
//!   an answer releases them ([`KeyState::waiters_of`], [`KeyState::handle_settled`]);
//! - one lookup of an unknown outcome runs at a time, and the retries that wait for it are
//!   capped by count and by the body bytes they hold, as an execution's waiters are
//!   ([`KeyState::handle_lookup_turn`]);
//! - a claim on a route with a lookup is never made without its lookup: where it could not
//!   be sealed, the arrival claims nothing ([`KeyState::handle_lookup_unsealed`]).

use std::sync::Arc;

use futures_channel::oneshot;
use futures_util::future::{FutureExt, Shared};

use super::machine::async_job::{job_decision, AsyncAccept};
use super::machine::{self, outcome_unknown, Action, Event, KeyRecordChange, Step};
use super::reconcile::Verdict;
use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::key_record::{AttemptId, KeyRecord, StoredResponse, Unknown, UnknownReason};
use crate::core::formats::reconciling::Reconciling;
use crate::core::primitives::time::Millis;
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::fault::{Fault, FaultSource, Stage, StorageOperation};
use crate::core::vocabulary::key_terms::KeyTerms;
use crate::core::vocabulary::key_terms::WaiterLimits;
use crate::core::vocabulary::outcome_table::OriginResult;
use crate::core::vocabulary::problem::{Problem, ProblemKind};

/// What a waiter awaits (a clone each of it): the value its sender sends, or `Err` once the
/// sender is gone without one, which releases every waiter. A waiter that gives up (its
/// deadline passed) is dropped, and `Shared` lets go of its waker.
pub type Awaited<T> = Shared<oneshot::Receiver<T>>;

/// A new hand-over: the sending half, kept by whoever answers, and the waiters' half.
fn handover<T: Clone>() -> (oneshot::Sender<T>, Awaited<T>) {
    let (sender, receiver) = oneshot::channel();
    (sender, receiver.shared())
}

/// The execution this instance is running for its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveAttempt {
    pub attempt: AttemptId,
    /// Requests waiting on it.
    pub waiters: usize,
    /// The body bytes those waiters brought in (see `key_terms::WaiterLimits`).
    pub waiting_bytes: u64,
    /// Set for a claim made in observe mode, whose outcome the Worker brings: past this
    /// time no outcome is expected any more.
    pub observed_until: Option<Millis>,
}

/// A covered request's arrival, as the envelope describes it
/// (`core::edge_rules::wire::KeyCall::arrival` builds it).
#[derive(Debug)]
pub struct Arrival<'a> {
    pub fingerprint: Digest256,
    /// The id a claim made by this request gets (the runtime draws it at random).
    pub new_attempt: AttemptId,
    pub policy: &'a KeyTerms,
    pub body_bytes: u64,
    /// Set for asynchronous acceptance, with the sealed request.
    pub accept: Option<AsyncAccept>,
    /// The route's lookup, sealed, for a claim this arrival makes (`core::key_rules::reconcile`).
    pub lookup: Option<Reconciling>,
    /// Observe mode: the Worker forwards; a claim lives for its lease.
    pub observing: bool,
}

/// One lookup of an unknown outcome running in this instance (`core::key_rules::reconcile`), and the
/// retries that wait for it: each holds its request's body (read before it waits, so that
/// the one that forwards once the key is released has it), so they are capped by count
/// and by bytes, with the limits of an execution's waiters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunningLookup {
    pub attempt: AttemptId,
    pub waiters: usize,
    pub waiting_bytes: u64,
}

/// Whose turn a lookup is ([`KeyState::handle_lookup_turn`]).
#[derive(Debug)]
pub enum LookupTurn {
    /// Ask the origin; report the end with [`KeyState::handle_lookup_over`], and drop the
    /// sender then: that wakes whoever waits for this lookup.
    Run(oneshot::Sender<()>),
    /// Wait for the lookup that runs (a retry reads its body first) to end, then be decided
    /// on the record as it is then.
    Wait(Awaited<()>),
    /// Past the waiters' cap: answer this problem at once (502 `outcome-unknown`), the
    /// body drained, nothing looked up or forwarded.
    Full(Problem),
}

/// Who asks for a lookup's turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupAsker {
    /// A retry, whose request body has this size.
    Retry { body_bytes: u64 },
    /// The object's alarm: it holds no body, and is neither counted nor capped.
    Alarm,
}

/// The answer to a retry past the cap of the retries waiting on a running lookup: the
/// outcome is unknown (nothing is known until the lookup answers), and a retry soon may
/// find the lookup's answer.
pub fn lookup_waiters_full(reason: UnknownReason) -> Problem {
    let unknown = outcome_unknown(reason);
    Problem::new(
        ProblemKind::OutcomeUnknown,
        format!(
            "{} A lookup of the outcome is under way, and as many retries as allowed (MAX_WAITERS_PER_KEY, MAX_WAITING_BYTES) already wait for it; retry with the same key later.",
            unknown.detail
        ),
    )
    .with_retry_after(1)
}

/// What a pending step was for, so that its outcome (`handle_written` /
/// `handle_write_failed`) is judged by what it meant to do.
#[derive(Clone, Debug, PartialEq)]
enum InProgress {
    Arrival {
        new_attempt: AttemptId,
        body_bytes: u64,
        observed_until: Option<Millis>,
    },
    Outcome {
        attempt: AttemptId,
        job: bool,
    },
    /// A job's send, claimed from the alarm over the record `before`: a failed write
    /// sends nothing, and the platform retries the alarm.
    JobSend {
        before: Option<KeyRecord>,
    },
    /// A job put back as it was: its send's alarm could not be set.
    PutBack,
    /// A lookup's verdict, fenced by the unknown outcome it settles.
    Verdict,
    /// A claim withdrawn: its alarm could not be set.
    Withdrawal,
    /// The alarm's clean-up.
    Other,
}

/// Which record a write is fenced by: it is made only while that record is still current
/// ([`KeyState::is_current`]), asked again after any await before the write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// The claim of the attempt the written record is for (rule 4).
    Claim,
    /// The unknown outcome a lookup's verdict settles (rule 9).
    Lookup,
}

/// What an alarm that could not be set does to the rest of its step
/// ([`KeyState::handle_alarm_unset`]).
#[derive(Debug)]
pub enum AlarmUnset {
    /// Carry on with the rest.
    Carry(Decided),
    /// Write this step and carry it out instead of the rest.
    Instead(Pending),
}

/// A step whose record change is yet to be written. Handed back to
/// [`KeyState::handle_written`] or [`KeyState::handle_write_failed`].
#[derive(Debug)]
#[must_use = "a pending step is reported as written or failed"]
pub struct Pending {
    what: InProgress,
    step: Step,
    decision: Option<Decision>,
}

impl Pending {
    /// The step to write (its `change`) and, once written, to carry out.
    pub fn step(&self) -> &Step {
        &self.step
    }

    /// The decision so far (a forward is `executed` until its outcome says otherwise).
    pub fn decision(&self) -> Option<Decision> {
        self.decision
    }

    /// The attempt the step would forward (and claims the key for), if it does.
    pub fn forwarded(&self) -> Option<AttemptId> {
        forwarded_in(&self.step.actions)
    }

    /// Which record the write is fenced by.
    pub fn fence(&self) -> Fence {
        match self.what {
            InProgress::Verdict => Fence::Lookup,
            _ => Fence::Claim,
        }
    }

    /// What the step writes, as a log line names it when the write fails.
    pub fn describe(&self) -> &'static str {
        match self.what {
            InProgress::Arrival { observed_until: Some(_), .. } => "the observed claim",
            InProgress::Arrival { .. } => "the claim",
            InProgress::Outcome { job: false, .. } => "the outcome",
            InProgress::Outcome { job: true, .. } => "the job's outcome",
            InProgress::JobSend { .. } => "the job",
            InProgress::PutBack => "putting the job back",
            InProgress::Verdict => "the reconciliation",
            InProgress::Withdrawal => "withdrawing the claim",
            InProgress::Other => "the clean-up",
        }
    }

    /// The stored answer, when all this step does is replay it: nothing to write, so its
    /// report ([`KeyState::handle_written`]) follows at once, and nothing else to carry
    /// out. The runtime answers such an arrival without awaiting anything but the body's
    /// drain (`runtime::object`'s replay path); every other step goes the whole way.
    pub fn replay_only(&self) -> Option<&Arc<StoredResponse>> {
        match (&self.step.change, &self.step.actions[..]) {
            (KeyRecordChange::Keep, [Action::Replay(stored)]) => Some(stored),
            _ => None,
        }
    }
}

/// How a step's `Settle` is carried out in this instance ([`KeyState::handle_settled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settled {
    /// Which answer the caller whose request executed gets (waiters always get the
    /// settled one, marked replayed).
    pub caller: CallerAnswer,
    /// Whether the answer prepared for the waiters stays in memory for later replays.
    pub keep_in_memory: bool,
}

/// The answer the caller whose request executed gets ([`Settled::caller`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallerAnswer {
    /// The origin's own answer, as it came (the runtime's, where it holds one; otherwise
    /// the settled answer).
    Live,
    /// The settled answer, unmarked: the origin gave none, or not the one the key keeps.
    Settled,
}

/// A step to carry out, with the decision for the request's log line.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    pub step: Step,
    pub decision: Option<Decision>,
    /// Why the alarm's run that carries this step out fails, if it does: the platform then
    /// retries the alarm (a failed write of the alarm's clean-up, of a job's send or of a
    /// lookup's verdict; an alarm that could not be set from the alarm).
    pub fails_alarm: Option<&'static str>,
    what: InProgress,
}

impl Decided {
    /// The next of the step's actions to carry out, in order, each handed out once
    /// (quinn-proto's `poll_*`); `None` when all were.
    pub fn poll_action(&mut self) -> Option<Action> {
        (!self.step.actions.is_empty()).then(|| self.step.actions.remove(0))
    }

    /// A step that followed from one of this step's actions (the outcome of its forward,
    /// the verdict of its lookup), written: its actions are carried out next, before the
    /// rest of this step's; its decision is the line's from now on, and a failure of
    /// either fails the alarm's run.
    pub fn follow(&mut self, next: Decided) {
        let Decided { step, decision, fails_alarm, what } = next;
        let rest = std::mem::replace(&mut self.step.actions, step.actions);
        self.step.actions.extend(rest);
        self.step.change = step.change;
        self.decision = decision.or(self.decision);
        self.fails_alarm = self.fails_alarm.or(fails_alarm);
        self.what = what;
    }

    /// What the step claimed, taken before its actions are handed out: what withdrawing
    /// the claim needs should its alarm fail ([`KeyState::handle_alarm_unset`]).
    pub fn claimed(&self) -> Claimed {
        let step = &self.step;
        let job = matches!(&step.change, KeyRecordChange::Put(record) if record.async_job().is_some())
            && step.actions.iter().any(|action| matches!(action, Action::Accepted { .. }));
        Claimed { forwarded: self.forwarded(), job }
    }

    /// The attempt the step forwards (and claimed the key for), if it does.
    pub fn forwarded(&self) -> Option<AttemptId> {
        forwarded_in(&self.step.actions)
    }
}

/// A step that only refuses: for an arrival refused before its step was decided (its
/// record unreadable, its request not sealed, past the cap of a lookup's waiters), so that
/// its answer, its line and its body's drain go the way every step's do.
pub fn refusal(problem: Problem) -> Decided {
    let decision = Some(Decision::Rejected(problem.kind));
    Decided {
        step: Step::keep(vec![Action::Reject(problem)]),
        decision,
        fails_alarm: None,
        what: InProgress::Other,
    }
}

/// The attempt a step's actions forward, if they do.
fn forwarded_in(actions: &[Action]) -> Option<AttemptId> {
    actions.iter().find_map(|action| match action {
        Action::Forward { attempt } => Some(*attempt),
        _ => None,
    })
}

/// What a written step claimed ([`Decided::claimed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The attempt it forwards, the key claimed for it.
    pub forwarded: Option<AttemptId>,
    /// Whether it claimed the key for an asynchronous job (answered 202).
    pub job: bool,
}

/// The live execution's waiters: what they wait for, and the sender that answers them.
/// Dropped with the execution, which releases them (`None`: the driver's 409).
#[derive(Debug)]
struct Waiters<A> {
    attempt: AttemptId,
    answer: oneshot::Sender<A>,
    answered: Awaited<A>,
}

/// The in-memory state of one key in one object instance. `A` is the answer an
/// execution's waiters share (the runtime's prepared response; `()` in tests).
#[derive(Debug)]
pub struct KeyState<A = ()> {
    /// `None` until storage was read; then the record as this instance knows it.
    record: Option<Option<KeyRecord>>,
    live: Option<LiveAttempt>,
    /// Whoever waits for the live execution (an enforce-mode arrival's, or an observed
    /// claim's until the Worker brings its outcome; a job's send has none).
    waiters: Option<Waiters<A>>,
    /// The waiters of an attempt whose step settles it, until the runtime hands over the
    /// answer ([`KeyState::handle_settled`]).
    settling: Option<Waiters<A>>,
    /// The lookup of an unknown outcome running now, with its waiters.
    lookup: Option<RunningLookup>,
    /// What those waiters wait for: the running lookup's end (its sender is the runner's).
    lookup_over: Option<Awaited<()>>,
}

impl<A> Default for KeyState<A> {
    fn default() -> Self {
        KeyState { record: None, live: None, waiters: None, settling: None, lookup: None, lookup_over: None }
    }
}

impl KeyState {
    /// A key not yet read, whose waiters share no value (the host tests').
    pub fn new() -> KeyState {
        KeyState::default()
    }
}

impl<A: Clone> KeyState<A> {
    // -- The record as this instance knows it -------------------------------------------

    /// Whether storage has been read (or written) by this instance.
    pub fn is_loaded(&self) -> bool {
        self.record.is_some()
    }

    /// The record as this instance knows it (`None` before it was read).
    pub fn record(&self) -> Option<&KeyRecord> {
        self.record.as_ref().and_then(Option::as_ref)
    }

    /// What storage holds, as read or just written (or a form of it this instance opened:
    /// an unsealed answer, a chunked answer's head); from now on the record is known.
    pub fn remember(&mut self, record: Option<KeyRecord>) {
        self.record = Some(record);
    }

    /// A deletion is under way: from this turn on the key reads as absent, so that a
    /// request arriving while it is confirmed claims anew (its write is ordered after the
    /// deletion). Should the deletion fail, [`KeyState::forget`].
    pub fn handle_deleting(&mut self) {
        self.record = Some(None);
    }

    /// Forgets the record: the next read goes to storage. After a deletion that failed,
    /// the record (a claim) may still be stored, and must not be believed gone.
    pub fn forget(&mut self) {
        self.record = None;
    }

    /// A deletion reported by [`KeyState::handle_deleting`] failed: the record (a claim) may
    /// still be stored. Unless a request claimed anew meanwhile (its record is the one
    /// known now), the record is forgotten, and the caller reads it again at once (`true`):
    /// the key stays held, and is never claimed and forwarded again on the belief that it
    /// is gone.
    pub fn handle_delete_failed(&mut self) -> bool {
        let still_absent = self.is_loaded() && self.record().is_none();
        if still_absent {
            self.forget();
        }
        still_absent
    }

    /// Expire-on-read: whether the record this instance knows is past its expiry with no
    /// execution of its own running here. The caller deletes it from storage, then reports
    /// [`KeyState::handle_deleting`]; a claim whose execution still runs here is
    /// left to that execution.
    pub fn expired_on_read(&self, now: Millis) -> bool {
        let live = self.live.map(|live| live.attempt);
        self.record().is_some_and(|record| record.is_expired(now) && live != Some(record.attempt()))
    }

    /// Whether `attempt` still holds the claim (rule 4's fencing, asked again just before
    /// an outcome that had to await is written).
    pub fn claim_is_current(&self, attempt: AttemptId) -> bool {
        machine::claim_is_current(self.record(), attempt)
    }

    /// Whether `attempt`'s unknown outcome is still the record (rule 9's fencing, asked again
    /// just before a verdict that had to await is written).
    pub fn lookup_is_current(&self, attempt: AttemptId) -> bool {
        machine::lookup_is_current(self.record(), attempt)
    }

    /// Whether a write fenced by `fence` ([`Pending::fence`]) for `attempt` may still be made.
    pub fn is_current(&self, fence: Fence, attempt: AttemptId) -> bool {
        match fence {
            Fence::Claim => self.claim_is_current(attempt),
            Fence::Lookup => self.lookup_is_current(attempt),
        }
    }

    // -- The live execution ---------------------------------------------------------------

    pub fn live(&self) -> Option<&LiveAttempt> {
        self.live.as_ref()
    }

    /// Ends an observed claim whose lease is over (the Worker's background work was cut
    /// short): its record says what enforcing would say of it. Returns the attempt ended;
    /// its waiters are released with no answer (their sender goes).
    pub fn expire_observed(&mut self, now: Millis) -> Option<AttemptId> {
        let live = self.live?;
        if live.observed_until.is_some_and(|until| now >= until) {
            self.end(live.attempt);
            return Some(live.attempt);
        }
        None
    }

    /// What a waiter on `attempt` (a step's `Join`) waits for: the execution's answer, or
    /// `None` where nothing here will answer it (no execution of its own runs here, or a
    /// job's send, which keeps no waiters).
    pub fn waiters_of(&self, attempt: AttemptId) -> Option<Awaited<A>> {
        let waiters = self.waiters.as_ref().filter(|waiters| waiters.attempt == attempt)?;
        Some(waiters.answered.clone())
    }

    /// The runtime carried out a step's `Settle` for `attempt` with the answer as its
    /// waiters share it: every one of them gets it (a clone each), and the sender goes.
    /// `origin_answered` is the `Settle`'s own. Returns which answer the caller whose
    /// request executed gets, and whether the shared answer stays in memory for replays.
    pub fn handle_settled(&mut self, attempt: AttemptId, answer: A, origin_answered: bool) -> Settled {
        let settling = self.settling.take_if(|waiters| waiters.attempt == attempt);
        if let Some(waiters) = settling {
            // A send with nobody left waiting finds no receiver: nothing to hand over.
            let _ = waiters.answer.send(answer);
        }
        // A chunked answer is replayed from its rows from now on: the whole body the
        // waiters shared is not kept for the rest of this instance's life.
        let keep_in_memory = self.record().is_none_or(|record| record.chunks().is_none());
        // The origin's own answer (its headers, cookies included; a body too large to
        // store streamed as it came) goes to its caller; where the origin gave none, or
        // what it gave is not what the key settled on, the settled answer does.
        let caller = if origin_answered { CallerAnswer::Live } else { CallerAnswer::Settled };
        Settled { caller, keep_in_memory }
    }

    /// A waiter on `attempt` is done waiting: its answer came (`settled`: `Ok`, decided
    /// `coalesced`), or its wait ran out, which is answered with the problem returned.
    pub fn handle_wait_over(
        &mut self,
        attempt: AttemptId,
        body_bytes: u64,
        settled: bool,
        now: Millis,
    ) -> Result<Decision, Problem> {
        if let Some(live) = self.live.as_mut().filter(|live| live.attempt == attempt) {
            live.waiters = live.waiters.saturating_sub(1);
            live.waiting_bytes = live.waiting_bytes.saturating_sub(body_bytes);
        }
        if settled {
            return Ok(Decision::Coalesced);
        }
        let step = machine::step(self.record(), Event::WaitExpired { attempt }, now);
        match step.actions.into_iter().next() {
            Some(Action::Reject(problem)) => Err(problem),
            _ => Err(Fault { source: FaultSource::NoAnswer, stage: Stage::BeforeClaim }.problem()),
        }
    }

    /// [`KeyState::handle_wait_over`] with what the wait got (`answer`, `None` when it ran
    /// out or the execution ended without settling): the waiter's decision, and the answer
    /// to give (decided `coalesced`), or the problem (409 while the claim runs; the driver's
    /// 409 where nothing answered although the wait did not run out), decided rejected.
    pub fn handle_waited(
        &mut self,
        attempt: AttemptId,
        body_bytes: u64,
        answer: Option<A>,
        now: Millis,
    ) -> (Decision, Result<A, Problem>) {
        let over = self.handle_wait_over(attempt, body_bytes, answer.is_some(), now);
        let waited = match (answer, over) {
            (Some(answer), Ok(_)) => Ok(answer),
            (None, Ok(_)) => Err(Fault { source: FaultSource::NoAnswer, stage: Stage::AfterStep }.problem()),
            (Some(_) | None, Err(problem)) => Err(problem),
        };
        let decision = match &waited {
            Ok(_) => Decision::Coalesced,
            Err(problem) => Decision::Rejected(problem.kind),
        };
        (decision, waited)
    }

    // -- The running lookup ---------------------------------------------------------------

    pub fn running_lookup(&self) -> Option<&RunningLookup> {
        self.lookup.as_ref()
    }

    /// A lookup of `attempt`'s unknown outcome is wanted (`reconcile_first` said so, or the
    /// alarm's step did): run it, wait for the one running, or, for a retry past the cap
    /// (`MAX_WAITERS_PER_KEY` waiting, or their bodies and this one's over
    /// `MAX_WAITING_BYTES`), [`LookupTurn::Full`]: answered at once, holding nothing, so a
    /// flood of retries cannot hold more than an execution's waiters may while the origin
    /// is asked. The alarm waits uncounted. A lookup for another attempt (the record moved
    /// on) replaces the one remembered: that one's end is then ignored.
    pub fn handle_lookup_turn(
        &mut self,
        attempt: AttemptId,
        asker: LookupAsker,
        limits: &WaiterLimits,
    ) -> LookupTurn {
        let Some(running) = self.lookup.as_mut().filter(|running| running.attempt == attempt) else {
            self.lookup = Some(RunningLookup { attempt, waiters: 0, waiting_bytes: 0 });
            let (over, done) = handover();
            self.lookup_over = Some(done);
            return LookupTurn::Run(over);
        };
        let over = self.lookup_over.clone().unwrap_or_else(|| handover().1);
        let LookupAsker::Retry { body_bytes } = asker else { return LookupTurn::Wait(over) };
        let bytes = running.waiting_bytes.saturating_add(body_bytes);
        if !limits.admits(running.waiters) || bytes > limits.max_waiting_bytes {
            let reason = match self.record() {
                Some(KeyRecord::Unknown(Unknown { reason, .. })) => *reason,
                // A claim whose owner is gone, past its lease.
                _ => UnknownReason::OriginTimeout,
            };
            return LookupTurn::Full(lookup_waiters_full(reason));
        }
        running.waiters += 1;
        running.waiting_bytes = bytes;
        LookupTurn::Wait(over)
    }

    /// The headers of the lookup of `attempt` this caller runs ([`LookupTurn::Run`]): the
    /// request's scope headers with the claim's time, the record's (the one it was sealed
    /// at), never a retry's (`core::key_rules::reconcile::lookup_headers`). `None` where the
    /// record keeps no lookup any more: nothing is asked, and the lookup is over.
    pub fn lookup_headers(
        &mut self,
        attempt: AttemptId,
        scope_headers: &[(String, String)],
    ) -> Option<Vec<(String, String)>> {
        let claimed_at = self.record().and_then(KeyRecord::reconciling).map(|lookup| lookup.bound_at);
        let Some(claimed_at) = claimed_at else {
            self.handle_lookup_over(attempt);
            return None;
        };
        Some(super::reconcile::lookup_headers(scope_headers, claimed_at))
    }

    /// The lookup of `attempt` is over (its verdict written or not): its waiters are woken
    /// and decided on the record as it then is, and hold no place any more.
    pub fn handle_lookup_over(&mut self, attempt: AttemptId) {
        if self.lookup.is_some_and(|running| running.attempt == attempt) {
            self.lookup = None;
            self.lookup_over = None;
        }
    }

    // -- Events ---------------------------------------------------------------------------

    /// A covered request arrived: the step on the record as it is now, judged with this
    /// instance's live load. Its record change is written before anything else is awaited.
    pub fn handle_arrival(&mut self, arrival: Arrival<'_>, now: Millis) -> Pending {
        let Arrival { fingerprint, new_attempt, policy, body_bytes, accept, observing, lookup } = arrival;
        let (live_attempt, waiters, waiting_bytes) = match self.live {
            Some(live) => (Some(live.attempt), live.waiters, live.waiting_bytes),
            None => (None, 0, 0),
        };
        let event = Event::Arrival {
            fingerprint,
            new_attempt,
            live_attempt,
            waiters,
            waiting_bytes,
            max_origin_attempts: policy.max_origin_attempts,
            body_bytes,
            limits: policy.limits,
            timing: policy.timing,
            accept: accept.map(Box::new),
            lookup: lookup.map(Box::new),
        };
        let step = machine::step(self.record(), event, now);
        let observed_until = observing.then(|| now.saturating_add(policy.timing.lease_ms()));
        let decision = decision_of(&step.actions);
        Pending { what: InProgress::Arrival { new_attempt, body_bytes, observed_until }, step, decision }
    }

    /// An arrival answered at once (the runtime's replay path): where its step replays and
    /// writes nothing
    /// ([`Pending::replay_only`]), the step reported as written (there is nothing to write),
    /// with the answer to replay and the line's decision; `None` where the arrival must go
    /// the whole way, its step dropped.
    pub fn handle_replay(
        &mut self,
        arrival: Arrival<'_>,
        now: Millis,
    ) -> Option<(Arc<StoredResponse>, Decided)> {
        // An observed claim past its lease is left for the whole way to end
        // (`expire_observed`): while it is live the record is not final, so nothing replays.
        let pending = self.handle_arrival(arrival, now);
        let stored = pending.replay_only()?.clone();
        Some((stored, self.handle_written(pending)))
    }

    /// The arrival's step (`pending`, not yet written) was decided without the route's
    /// lookup, which could not be sealed (no key ring, or WebCrypto refused; the runtime
    /// logs why). A claim without it could never be looked up once its outcome became
    /// unknown (held until the TTL ends, when the route promises a lookup), so none is
    /// made: a step that would claim and forward becomes 503, nothing written or
    /// forwarded, and the caller may retry; so for a job's claim (`core::key_rules::machine::async_job` rule 9).
    /// A step that claims nothing (a replay, a join, a refusal, a poll) is kept as it is.
    pub fn handle_lookup_unsealed(&mut self, pending: Pending) -> Pending {
        let step = &pending.step;
        let forwards = step.actions.iter().any(|action| matches!(action, Action::Forward { .. }));
        // A job's claim answers 202; a poll of a job does too, but writes nothing.
        let takes_job = matches!(&step.change, KeyRecordChange::Put(record) if record.async_job().is_some())
            && step.actions.iter().any(|action| matches!(action, Action::Accepted { .. }));
        if !forwards && !takes_job {
            return pending;
        }
        let step = Step::keep(vec![Action::Reject(lookup_unsealed())]);
        let decision = decision_of(&step.actions);
        Pending { step, decision, ..pending }
    }

    /// The attempt forwarded by this instance finished. `response` is the origin's answer
    /// as it would be stored, when it gave one; it is taken only where the result keeps an
    /// answer (`OriginResult::keeps_answer`): an answer over the cap, or a broken one, says
    /// nothing, its headers included. The decision for the log follows from the result,
    /// whatever becomes of the write.
    pub fn handle_origin_finished(
        &mut self,
        attempt: AttemptId,
        result: OriginResult,
        response: Option<Arc<StoredResponse>>,
        policy: &KeyTerms,
        now: Millis,
    ) -> Pending {
        let response = response.filter(|_| result.keeps_answer());
        let (_, disposition) = machine::classify(result, response.as_deref(), &policy.outcome);
        let event = Event::OriginFinished {
            attempt,
            result,
            response,
            timing: policy.timing,
            outcome: policy.outcome,
        };
        let step = machine::step(self.record(), event, now);
        let decision = Some(Decision::after_forward(disposition));
        Pending { what: InProgress::Outcome { attempt, job: false }, step, decision }
    }

    /// The alarm fired on a key without a job (or whose job is not due). An observed
    /// claim whose outcome never came ends with its lease here too, not only when a request
    /// arrives: left live, it would keep its record past the TTL.
    pub fn handle_alarm(&mut self, now: Millis) -> Pending {
        self.expire_observed(now);
        let live_attempt = self.live.map(|live| live.attempt);
        let step = machine::step(self.record(), Event::Alarm { live_attempt }, now);
        Pending { what: InProgress::Other, step, decision: None }
    }

    /// The alarm fired, on the record as it is once whatever the alarm opened first (a
    /// job's request, [`KeyState::job_request`]) is open: a key with a job steps as its job
    /// ([`KeyState::handle_job_alarm`], `new_attempt` the id its send gets); any other is
    /// cleaned up, and an unknown outcome due is looked up ([`KeyState::handle_alarm`]).
    pub fn handle_alarm_run(&mut self, new_attempt: AttemptId, now: Millis) -> Pending {
        match self.record().and_then(KeyRecord::async_job) {
            Some(_) => self.handle_job_alarm(new_attempt, now),
            None => self.handle_alarm(now),
        }
    }

    /// Rule 9 of `core::key_rules::machine` for an arrival on a route with a lookup, before
    /// anything else of it is decided: where an unknown outcome is to be looked up first, the
    /// arrival's first step (`machine::lookup_before_arrival`: `Lookup`, then `Arrive`, which
    /// decides it with [`KeyState::handle_arrival`] on the record as the verdict left it);
    /// `None` where the arrival is decided at once. The `Lookup` is carried out with
    /// [`KeyState::handle_lookup_turn`] for a [`LookupAsker::Retry`].
    pub fn handle_retry(&mut self, fingerprint: Digest256, now: Millis) -> Option<Pending> {
        let live = self.live.map(|live| live.attempt);
        let step = machine::lookup_before_arrival(self.record(), fingerprint, live, now)?;
        Some(Pending { what: InProgress::Other, step, decision: None })
    }

    /// An arrival's first step, before anything of it is decided: on a route with a lookup
    /// (`reconciles`, and its record readable), a retry that finds its outcome to look up
    /// first gets [`KeyState::handle_retry`]'s `Lookup`, then `Arrive`; any other arrival,
    /// an observed one included, `Arrive` alone. Nothing is written either way.
    pub fn handle_call(&mut self, reconciles: bool, fingerprint: Digest256, now: Millis) -> Pending {
        let first = reconciles.then(|| self.handle_retry(fingerprint, now)).flatten();
        let arrive =
            || Pending { what: InProgress::Other, step: Step::keep(vec![Action::Arrive]), decision: None };
        first.unwrap_or_else(arrive)
    }

    /// A lookup of the unknown outcome of `attempt` answered (`core::key_rules::reconcile`). The
    /// decision is `reconciled-executed`, `reconciled-not-executed` or `reconcile-failed`
    /// (also for a "not found" the machine does not believe yet), whatever becomes of the
    /// write (a failed one leaves the key unknown).
    pub fn handle_reconciled(
        &mut self,
        attempt: AttemptId,
        verdict: Verdict,
        policy: &KeyTerms,
        jitter: f64,
        now: Millis,
    ) -> Pending {
        let unsure = verdict == Verdict::Unsure;
        let event = Event::Reconciled { attempt, verdict, timing: policy.timing, jitter };
        let step = machine::step(self.record(), event, now);
        // What the step made of the verdict (a "not found" too soon after the outcome became
        // unknown is asked again later); a fenced step (the record moved on meanwhile)
        // decided nothing.
        let decision = match &step.change {
            KeyRecordChange::Delete => Some(Decision::ReconciledNotExecuted),
            KeyRecordChange::Put(KeyRecord::Completed(_)) => Some(Decision::ReconciledExecuted),
            KeyRecordChange::Put(_) => Some(Decision::ReconcileFailed),
            KeyRecordChange::Keep => unsure.then_some(Decision::ReconcileFailed),
        };
        Pending { what: InProgress::Verdict, step, decision }
    }

    /// The alarm fired on a key with a job: `new_attempt` is the id its send gets. The
    /// decision is the job's (`core::key_rules::machine::async_job::job_decision`), or `unknown` for an orphaned
    /// send held unknown, or none for a job that is not due.
    pub fn handle_job_alarm(&mut self, new_attempt: AttemptId, now: Millis) -> Pending {
        let live_attempt = self.live.map(|live| live.attempt);
        let step = machine::step(self.record(), Event::JobAlarm { live_attempt, new_attempt }, now);
        let decision = job_decision(self.record(), &step.change).map(Decision::from).or(match &step.change {
            KeyRecordChange::Put(KeyRecord::Unknown(_)) => Some(Decision::Unknown),
            _ => None,
        });
        Pending { what: InProgress::JobSend { before: self.record().cloned() }, step, decision }
    }

    /// What the alarm opens before a job's step: the job's sealed request, with the claim's
    /// time and fingerprint it is bound to (`None` for a job written before requests were
    /// bound). `None` where there is nothing to open (no job, or one that gave up).
    pub fn job_request(&self) -> Option<(Vec<u8>, Option<SealBinding>)> {
        let Some(KeyRecord::InFlight(claim)) = self.record() else { return None };
        let job = claim.async_job.as_ref().filter(|job| !job.sealed_request.is_empty())?;
        let binding = job.request_bound.then_some((claim.claimed_at, claim.fingerprint));
        Some((job.sealed_request.clone(), binding))
    }

    /// Whether a job's step (`pending`, from [`KeyState::handle_job_alarm`]) may be written
    /// and carried out, given the stored request that was opened for it (`opened`, the
    /// sealed bytes, read before the step's awaits): a send goes out only as the request
    /// the record still holds. Otherwise nothing is written or sent, and the platform
    /// retries the alarm.
    pub fn check_job_send(&self, pending: &Pending, opened: Option<&[u8]>) -> Result<(), &'static str> {
        let stored = self.record().and_then(KeyRecord::async_job).map(|job| &job.sealed_request[..]);
        match pending.forwarded() {
            Some(_) if opened.is_none() || stored != opened => {
                Err("the job changed while its request was opened; the alarm runs again")
            }
            _ => Ok(()),
        }
    }

    /// A job's send finished (see [`Event::JobFinished`]).
    #[allow(clippy::too_many_arguments)]
    pub fn handle_job_finished(
        &mut self,
        attempt: AttemptId,
        result: OriginResult,
        response: Option<Arc<StoredResponse>>,
        policy: &KeyTerms,
        retry_after_ms: Option<u64>,
        jitter: f64,
        now: Millis,
    ) -> Pending {
        let response = response.filter(|_| result.keeps_answer());
        let (_, disposition) = machine::classify(result, response.as_deref(), &policy.outcome);
        let event = Event::JobFinished {
            attempt,
            result,
            response,
            timing: policy.timing,
            outcome: policy.outcome,
            retry_after_ms,
            jitter,
        };
        let mut step = machine::step(self.record(), event, now);
        // Nobody waits on a job's send (a duplicate meanwhile is told it is in progress):
        // its outcome settles no caller, so the runtime prepares no answer for it.
        step.actions.retain(|action| !matches!(action, Action::Settle { .. }));
        // A job that ends held unknown is `unknown` whatever this attempt's answer was: a
        // refusal after an earlier send whose outcome is unknown does not release the key,
        // and its line and published outcome must not say "released".
        let decision = job_decision(self.record(), &step.change).map(Decision::from).unwrap_or_else(|| {
            match &step.change {
                KeyRecordChange::Put(KeyRecord::Unknown(_)) => Decision::Unknown,
                _ => Decision::after_forward(disposition),
            }
        });
        Pending { what: InProgress::Outcome { attempt, job: true }, step, decision: Some(decision) }
    }

    /// The pending step's record change is durable (memory already follows storage):
    /// the step's own bookkeeping is done (a forward becomes the live execution, a join
    /// one more waiter, a settled attempt stops being live), and the step is carried out.
    pub fn handle_written(&mut self, pending: Pending) -> Decided {
        let Pending { what, step, decision } = pending;
        self.carry_out(&what, &step);
        let fails_alarm = (what == InProgress::PutBack).then_some(SEND_UNSCHEDULED);
        Decided { step, decision, fails_alarm, what }
    }

    /// The pending step's record write failed. Returns the step to carry out instead:
    /// - a claim: 503, nothing forwarded (rule 6);
    /// - an outcome: the callers still get what the origin said, and the stored claim
    ///   keeps holding the key (it reads as unknown after its lease);
    /// - a job's outcome: nothing more; the claim and its alarm stay, and it reads as an
    ///   unknown outcome, never as "not executed";
    /// - anything else (an alarm's clean-up, a job's send, a lookup's verdict): nothing; the
    ///   platform retries the alarm ([`Decided::fails_alarm`]).
    ///
    /// `now` is when the failure was seen.
    pub fn handle_write_failed(&mut self, pending: Pending, now: Millis) -> Decided {
        let Pending { what, step: failed, decision } = pending;
        let (step, decision) = match &what {
            InProgress::Arrival { new_attempt, .. } => {
                let step =
                    machine::step(self.record(), Event::ClaimWriteFailed { attempt: *new_attempt }, now);
                let decision = decision_of(&step.actions);
                (step, decision)
            }
            InProgress::Outcome { attempt, job: false } => {
                let settled = failed.actions.iter().find_map(|action| match action {
                    Action::Settle { answer, origin_answered, .. } => {
                        Some((answer.clone(), *origin_answered))
                    }
                    _ => None,
                });
                let step = match settled {
                    Some((answer, origin_answered)) => machine::step(
                        self.record(),
                        Event::OutcomeWriteFailed { attempt: *attempt, answer, origin_answered },
                        now,
                    ),
                    None => Step::keep(Vec::new()),
                };
                (step, decision)
            }
            InProgress::Outcome { job: true, .. } => {
                (Step::keep(Vec::new()), Some(Decision::Rejected(ProblemKind::StorageUnavailable)))
            }
            InProgress::JobSend { .. }
            | InProgress::PutBack
            | InProgress::Verdict
            | InProgress::Withdrawal
            | InProgress::Other => (Step::keep(Vec::new()), None),
        };
        self.carry_out(&what, &step);
        let fails_alarm = match &what {
            InProgress::Arrival { .. } | InProgress::Outcome { .. } | InProgress::Withdrawal => None,
            InProgress::JobSend { .. } => Some("writing the job failed"),
            InProgress::PutBack => Some(SEND_UNSCHEDULED),
            InProgress::Verdict => Some("the reconciliation could not be recorded; the alarm runs again"),
            InProgress::Other => Some("clean-up failed"),
        };
        Decided { step, decision, fails_alarm, what }
    }

    /// A step's `SetAlarm` could not be set (tried twice); `rest` is what is left of the
    /// step. What that does depends on what the step was for:
    /// - an arrival's claim in enforce mode (a forward, or a job accepted): nothing was sent
    ///   yet, and without its alarm the record might never be deleted, so the claim is
    ///   withdrawn (the key may be retried), its waiters released, and the caller gets 503;
    /// - observe mode has forwarded already, and an outcome was sent and cannot be taken
    ///   back: carry on (the claim's alarm stays in place, and a record whose alarm is
    ///   missing is still deleted when read past its expiry);
    /// - a job's send that is not out yet: the job is put back as it was, nothing sent
    ///   (without the alarm, a restart would read the claim as an unknown outcome);
    /// - any other alarm's step: carry on, and the alarm's run fails, so that the
    ///   platform retries it.
    pub fn handle_alarm_unset(&mut self, mut rest: Decided) -> AlarmUnset {
        let next_alarm = Some("the next alarm could not be set");
        match &rest.what {
            InProgress::Arrival { observed_until: Some(_), .. } | InProgress::Outcome { job: false, .. } => {}
            InProgress::Arrival { .. } => {
                let Claimed { forwarded, job } = rest.claimed();
                if let Some(attempt) = forwarded {
                    self.end(attempt);
                } else if !job {
                    return AlarmUnset::Carry(rest);
                }
                // The fault's consequence (`core::vocabulary::fault`): a claim, nothing sent, released.
                let withdrawn = Fault::storage(StorageOperation::Alarm, Stage::Claimed);
                let step = Step {
                    change: KeyRecordChange::Delete,
                    actions: vec![Action::Reject(withdrawn.problem())],
                };
                let decision = Some(Decision::Rejected(ProblemKind::StorageUnavailable));
                return AlarmUnset::Instead(Pending { what: InProgress::Withdrawal, step, decision });
            }
            InProgress::JobSend { before } => match rest.forwarded() {
                Some(attempt) => {
                    let change = match before.clone() {
                        Some(record) => KeyRecordChange::Put(record),
                        None => KeyRecordChange::Keep,
                    };
                    self.end(attempt);
                    let step = Step { change, actions: Vec::new() };
                    return AlarmUnset::Instead(Pending { what: InProgress::PutBack, step, decision: None });
                }
                None => rest.fails_alarm = rest.fails_alarm.or(next_alarm),
            },
            InProgress::Outcome { job: true, .. }
            | InProgress::PutBack
            | InProgress::Verdict
            | InProgress::Withdrawal
            | InProgress::Other => rest.fails_alarm = rest.fails_alarm.or(next_alarm),
        }
        AlarmUnset::Carry(rest)
    }

    /// The send of `attempt` is over, whatever became of it: it stops being live.
    pub fn handle_send_over(&mut self, attempt: AttemptId) {
        self.end(attempt);
    }

    /// What a step that is final (written, or replaced after a failed write) does to this
    /// instance's memory beyond the record.
    fn carry_out(&mut self, what: &InProgress, step: &Step) {
        for action in &step.actions {
            match (action, what) {
                (Action::Forward { attempt }, InProgress::Arrival { observed_until, .. }) => {
                    self.live = Some(LiveAttempt {
                        attempt: *attempt,
                        waiters: 0,
                        waiting_bytes: 0,
                        observed_until: *observed_until,
                    });
                    let (answer, answered) = handover();
                    self.waiters = Some(Waiters { attempt: *attempt, answer, answered });
                }
                (Action::Forward { attempt }, InProgress::JobSend { .. }) => {
                    self.live = Some(LiveAttempt {
                        attempt: *attempt,
                        waiters: 0,
                        waiting_bytes: 0,
                        observed_until: None,
                    });
                }
                // Observing never waits, nor counts a waiter.
                (
                    Action::Join { attempt, .. },
                    InProgress::Arrival { body_bytes, observed_until: None, .. },
                ) => {
                    if let Some(live) = self.live.as_mut().filter(|live| live.attempt == *attempt) {
                        live.waiters += 1;
                        live.waiting_bytes = live.waiting_bytes.saturating_add(*body_bytes);
                    }
                }
                (Action::Settle { attempt, .. }, _) => {
                    // Kept for the answer the runtime prepares; no new waiter joins it. A
                    // settle with no waiters of its own (an older execution left running by a purge)
                    // leaves another settle's waiters for their answer.
                    if let Some(waiters) = self.waiters.take_if(|waiters| waiters.attempt == *attempt) {
                        self.settling = Some(waiters);
                    }
                    self.end(*attempt);
                }
                _ => {}
            }
        }
        if let InProgress::Outcome { attempt, .. } = what {
            // Should the step not settle (it always does), the attempt is over all the same.
            self.end(*attempt);
        }
    }

    /// `attempt` stops being live; whoever still waits for it is released.
    fn end(&mut self, attempt: AttemptId) {
        if self.live.is_some_and(|live| live.attempt == attempt) {
            self.live = None;
        }
        if self.waiters.as_ref().is_some_and(|waiters| waiters.attempt == attempt) {
            self.waiters = None;
        }
    }
}

/// What a stored request is sealed to: the claim's time and fingerprint.
pub type SealBinding = (Millis, Digest256);

/// Why an alarm whose job was put back fails: the platform retries it.
const SEND_UNSCHEDULED: &str = "the send's alarm could not be set; nothing was sent";

/// How long an alarm that could not read what it works on (the record, a job's stored
/// request, a claim's stored lookup) waits before it looks again, whatever becomes of the
/// platform's own retries of the failed alarm: a corrupt record is still a record (kept,
/// never forwarded unprotected), and a key may come back into the ring.
pub const LOOK_AGAIN_AFTER_MS: Millis = 60_000;

/// When an alarm that could not read what it works on at `now` runs again
/// ([`LOOK_AGAIN_AFTER_MS`]).
pub fn look_again_at(now: Millis) -> Millis {
    now.saturating_add(LOOK_AGAIN_AFTER_MS)
}

/// 503 for an arrival whose claim would have no lookup: the route's lookup could not be
/// sealed, so nothing was claimed or forwarded.
pub fn lookup_unsealed() -> Problem {
    Problem::new(
        ProblemKind::StorageUnavailable,
        "The route's lookup (reconcile_url) could not be sealed for storage with the claim, so the request was not forwarded. Retry with the same key.",
    )
    .with_retry_after(1)
}

/// What an arrival's actions decide, for the log line: the first answer they give. A
/// forward is `Executed` until its outcome says otherwise; a join `Coalesced` until its
/// wait says otherwise.
pub fn decision_of(actions: &[Action]) -> Option<Decision> {
    actions.iter().find_map(|action| match action {
        Action::Forward { .. } => Some(Decision::Executed),
        Action::Replay(_) => Some(Decision::Replayed),
        Action::Join { .. } => Some(Decision::Coalesced),
        Action::Reject(problem) => Some(Decision::Rejected(problem.kind)),
        Action::Accepted { .. } => Some(Decision::Accepted),
        Action::SetAlarm(_) | Action::Settle { .. } | Action::Lookup { .. } | Action::Arrive => None,
    })
}

/// How many body bytes of an origin's answer may be stored, given its headers: the cap on
/// the whole stored answer (`KeyTerms::max_stored_response_bytes`), less what the
/// headers take ([`machine::stored_header_bytes`], the rule a stored answer's size is judged
/// by).
pub fn answer_body_cap(max_stored_bytes: u64, headers: &[(String, String)]) -> u64 {
    max_stored_bytes.saturating_sub(machine::stored_header_bytes(headers))
}

#[cfg(test)]
mod tests;
