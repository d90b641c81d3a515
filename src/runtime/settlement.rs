//! The live execution's answer as its waiters share it: what only the runtime has of a
//! key's live state (channels and prepared responses), beside the key's driver
//! (`core::key_rules::key_state`), which decides who executes, who waits and for how long.
//!
//! - one settlement channel per execution: the execution's sender settles it, every waiter
//!   shares the receiver, and the answer is prepared once so that they share one body;
//! - the sender of an observe-mode claim, kept until the Worker brings its outcome;
//! - the stored answer prepared for replays (`respond::Prepared`), made once per stored
//!   answer and object life.
//!
//! The lookup of an unknown outcome running now, which other retries wait for, is the
//! key's driver's (`core::key_rules::key_state::LookupTurn`).
//!
//! A dropped sender releases its waiters (they get the driver's 409), so an execution that
//! ends without settling never leaves anyone waiting for ever. The hand-over itself is
//! `core::primitives::latch` (host-tested).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::chunks;
use super::platform::{race, Delay, Either};
use super::respond::Prepared;
use crate::core::formats::record::{AttemptId, StoredResponse};
use crate::core::primitives::latch::{latch, Latch, Setter};

/// The answer that settles an execution, shared by its waiters.
pub(super) type Settlement = Latch<Rc<Prepared>>;

/// The sender that settles an execution.
pub(super) type Settle = Setter<Rc<Prepared>>;

/// The live answers of one key's object.
#[derive(Default)]
pub(super) struct Settlements {
    /// The live execution's answer, which its waiters share.
    live: RefCell<Option<(AttemptId, Settlement)>>,
    /// Wakes whoever joined an observe-mode claim (an enforce-mode duplicate during a
    /// switch of mode) when the Worker brings its outcome.
    observed: RefCell<Option<(AttemptId, Settle)>>,
    /// The stored answer made ready for replays.
    prepared: RefCell<Option<Rc<Prepared>>>,
}

impl Settlements {
    /// The settlement channel of an execution that the driver made live: the sender
    /// settles it, and waiters share the receiver.
    pub fn begin(&self, attempt: AttemptId) -> Settle {
        let (settle, settled) = latch();
        *self.live.borrow_mut() = Some((attempt, settled));
        settle
    }

    /// What a waiter on `attempt` waits for (`None` where nothing will settle it here).
    pub fn of(&self, attempt: AttemptId) -> Option<Settlement> {
        let live = self.live.borrow();
        live.as_ref().filter(|(current, _)| *current == attempt).map(|(_, settled)| settled.clone())
    }

    /// The execution of `attempt` is over (the driver knows it already): its settlement is
    /// let go, so that no finished answer stays held for new waiters.
    pub fn end(&self, attempt: AttemptId) {
        let mut live = self.live.borrow_mut();
        if live.as_ref().is_some_and(|(current, _)| *current == attempt) {
            *live = None;
        }
    }

    /// An observe-mode claim became live: its sender is kept for its outcome.
    pub fn begin_observed(&self, attempt: AttemptId) {
        let settle = self.begin(attempt);
        *self.observed.borrow_mut() = Some((attempt, settle));
    }

    /// The sender that settles the observed claim of `attempt`, if it is the one kept.
    pub fn take_observed(&self, attempt: AttemptId) -> Option<Settle> {
        let mut observed = self.observed.borrow_mut();
        match observed.take() {
            Some((kept, settle)) if kept == attempt => Some(settle),
            other => {
                *observed = other;
                None
            }
        }
    }

    /// The stored answer prepared for replays, made once per stored answer (`chunks` says
    /// where a chunked answer's rows are read from).
    pub fn prepared(
        &self,
        stored: &Arc<StoredResponse>,
        chunks: impl FnOnce() -> Option<chunks::Source>,
    ) -> Rc<Prepared> {
        let mut prepared = self.prepared.borrow_mut();
        match &*prepared {
            Some(ready) if ready.is_for(stored) => ready.clone(),
            _ => {
                let ready = Rc::new(Prepared::new(stored.clone(), chunks()));
                *prepared = Some(ready.clone());
                ready
            }
        }
    }

    /// Lets go of the prepared answer: a chunked answer is replayed from its rows, so the
    /// whole body its waiters shared is not kept for the rest of the object's life.
    pub fn forget_prepared(&self) {
        self.prepared.borrow_mut().take();
    }
}

/// Waits for `settled` at most `wait_ms`: the execution's answer, or `None` when the wait
/// ran out, nothing will settle it here, or the execution ended without settling.
pub(super) async fn wait_for(settled: Option<Settlement>, wait_ms: u64) -> Option<Rc<Prepared>> {
    let settled = settled?;
    match race(settled.wait(), Delay::from(Duration::from_millis(wait_ms))).await {
        Either::Left(Some(answer)) => Some(answer),
        _ => None,
    }
}
