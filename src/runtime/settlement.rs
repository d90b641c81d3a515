//! What only the runtime has of a key's answers: the stored answer prepared for replays
//! (`respond::Prepared`), made once per stored answer and object life, and a waiter's
//! wait for the live execution's answer, against its deadline.
//!
//! Who executes, who waits and for what (the execution's answer as its waiters share it,
//! and the lookup running now) is the key's driver's (`core::key_rules::key_state`). A
//! waiter released without an answer gets the driver's 409, so an execution that ends
//! without settling never leaves anyone waiting for ever. The hand-over itself is
//! `core::primitives::latch` (host-tested).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{select, Either};

use super::chunks;
use super::respond::Prepared;
use crate::core::formats::key_record::StoredResponse;
use crate::core::primitives::latch::Latch;
use worker::Delay;

/// The answer that settles an execution, shared by its waiters.
pub(super) type Settlement = Latch<Rc<Prepared>>;

/// The answers of one key's object that only the runtime holds.
#[derive(Default)]
pub(super) struct Settlements {
    /// The stored answer made ready for replays.
    prepared: RefCell<Option<Rc<Prepared>>>,
}

impl Settlements {
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
    match select(std::pin::pin!(settled.wait()), Delay::from(Duration::from_millis(wait_ms))).await {
        Either::Left((Some(answer), _)) => Some(answer),
        _ => None,
    }
}
