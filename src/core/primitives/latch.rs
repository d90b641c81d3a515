//! A value set once and awaited by any number of waiters on one thread: how the live
//! execution's answer reaches the duplicates that wait for it, and how the end of a lookup
//! reaches the retries that wait for it (both held by `core::key_rules::key_state`).
//!
//! Owns only the hand-over: who executes and who waits, and for how long, is the key's
//! driver's (`core::key_rules::key_state`). A Durable Object runs on one thread (an isolate's event
//! loop), so the state is an `Rc<RefCell<…>>`, with none of the atomics, `Arc`s and slab of
//! `futures`' `Shared` over a `oneshot` channel that it replaces (for size). It reads
//! no clock and does no I/O: a waiter's deadline is the caller's (`race` with a timer).
//! It is also how observe mode's caller hands the origin's answer to its recording, the
//! one waiter, which takes the value rather than a clone ([`Latch::take`]).
//!
//! - [`Setter::set`] gives every waiter, present and future, a clone of the value.
//! - A [`Setter`] dropped without a value releases every waiter with `None`, so an execution
//!   that ends without settling never leaves anyone waiting for ever.
//! - A [`Wait`] dropped before the end (its deadline passed) takes its waker out, so a flood
//!   of waiters that give up holds no more wakers than are waiting at once.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

struct State<T> {
    value: Option<T>,
    /// Whether the setter can still set a value.
    open: bool,
    /// One slot per waiter registered and not yet gone; a gone waiter's slot is reused.
    wakers: Vec<Option<Waker>>,
}

/// The setting half.
pub struct Setter<T>(Rc<RefCell<State<T>>>);

/// The waiting half; each waiter takes a clone and calls [`Latch::wait`].
pub struct Latch<T>(Rc<RefCell<State<T>>>);

/// One waiter's wait: the value, or `None` once the setter is gone without one.
pub struct Wait<T> {
    state: Rc<RefCell<State<T>>>,
    slot: Option<usize>,
}

/// A new latch, unset.
pub fn latch<T>() -> (Setter<T>, Latch<T>) {
    let state = Rc::new(RefCell::new(State { value: None, open: true, wakers: Vec::new() }));
    (Setter(state.clone()), Latch(state))
}

impl<T> Setter<T> {
    /// Sets the value and wakes every waiter.
    pub fn set(self, value: T) {
        self.0.borrow_mut().value = Some(value);
        // Dropping `self` closes the latch and wakes the waiters.
    }
}

impl<T> Drop for Setter<T> {
    fn drop(&mut self) {
        let wakers = {
            let mut state = self.0.borrow_mut();
            state.open = false;
            std::mem::take(&mut state.wakers)
        };
        // Woken after the borrow ends: a waker may poll its task at once.
        for waker in wakers.into_iter().flatten() {
            waker.wake();
        }
    }
}

impl<T> std::fmt::Debug for Setter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Setter")
    }
}

impl<T> std::fmt::Debug for Latch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Latch")
    }
}

impl<T> Clone for Latch<T> {
    fn clone(&self) -> Self {
        Latch(self.0.clone())
    }
}

impl<T> Latch<T> {
    /// Waits for the value.
    pub fn wait(&self) -> Wait<T> {
        Wait { state: self.0.clone(), slot: None }
    }

    /// Waits for the value and takes it, for the latch's one waiter: a value is never
    /// cloned, and a wait after it finds none.
    pub fn take(self) -> Take<T> {
        Take(self.wait())
    }
}

/// [`Latch::take`]'s wait.
pub struct Take<T>(Wait<T>);

impl<T: Clone> Future for Wait<T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.poll_value(cx, |value| value.clone())
    }
}

impl<T> Future for Take<T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.0.poll_value(cx, Option::take)
    }
}

impl<T> Wait<T> {
    /// The value as `read` reads it out of the state, `None` once the setter is gone
    /// without one, or pending with this waiter's waker registered.
    fn poll_value(&mut self, cx: &mut Context<'_>, read: fn(&mut Option<T>) -> Option<T>) -> Poll<Option<T>> {
        let mut state = self.state.borrow_mut();
        if let Some(value) = read(&mut state.value) {
            return Poll::Ready(Some(value));
        }
        if !state.open {
            return Poll::Ready(None);
        }
        let waker = Some(cx.waker().clone());
        match self.slot {
            Some(slot) => state.wakers[slot] = waker,
            None => {
                let slot = match state.wakers.iter().position(Option::is_none) {
                    Some(free) => free,
                    None => {
                        state.wakers.push(None);
                        state.wakers.len() - 1
                    }
                };
                state.wakers[slot] = waker;
                self.slot = Some(slot);
            }
        }
        Poll::Pending
    }
}

impl<T> Drop for Wait<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            // After the setter has gone the slots are gone too: nothing to take out. Should
            // the state be borrowed (it never is while a wait drops), a stale waker only
            // wakes its task once for nothing.
            if let Ok(mut state) = self.state.try_borrow_mut() {
                if let Some(waker) = state.wakers.get_mut(slot) {
                    *waker = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
