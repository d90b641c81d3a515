use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use proptest::prelude::*;

use super::*;

/// A waker that counts its wakes.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (Arc<Counting>, Waker) {
    let counter = Arc::new(Counting::default());
    (counter.clone(), Waker::from(counter))
}

fn wakes(counter: &Counting) -> usize {
    counter.0.load(Ordering::SeqCst)
}

fn poll<T: Clone>(wait: &mut Wait<T>, waker: &Waker) -> Poll<Option<T>> {
    Pin::new(wait).poll(&mut Context::from_waker(waker))
}

/// A new waiter on `latch` with its own counting waker, polled once: still waiting.
fn waiting<T: Clone + std::fmt::Debug + PartialEq>(latch: &Latch<T>) -> (Arc<Counting>, Waker, Wait<T>) {
    let (counter, waker) = counting();
    let mut wait = latch.wait();
    assert_eq!(poll(&mut wait, &waker), Poll::Pending);
    (counter, waker, wait)
}

fn slots<T>(latch: &Latch<T>) -> usize {
    latch.0.borrow().wakers.len()
}

#[test]
fn every_waiter_gets_the_value_once_woken_and_later_ones_at_once() {
    let (setter, latch) = latch::<u32>();
    let mut waiters: Vec<_> = (0..3).map(|_| waiting(&latch)).collect();
    setter.set(7);
    for (counter, waker, wait) in &mut waiters {
        assert_eq!(wakes(counter), 1, "woken once by the value");
        assert_eq!(poll(wait, waker), Poll::Ready(Some(7)));
    }
    let (_, waker) = counting();
    assert_eq!(poll(&mut latch.wait(), &waker), Poll::Ready(Some(7)), "a late waiter reads it at once");
}

#[test]
fn a_setter_gone_without_a_value_releases_every_waiter_with_none() {
    let (setter, latch) = latch::<u32>();
    let (counter, waker, mut wait) = waiting(&latch);
    drop(setter);
    assert_eq!(wakes(&counter), 1);
    assert_eq!(poll(&mut wait, &waker), Poll::Ready(None));
    assert_eq!(poll(&mut latch.wait(), &waker), Poll::Ready(None), "and any waiter after");
}

#[test]
fn a_waiter_that_gives_up_is_not_woken_and_its_slot_is_reused() {
    let (setter, latch) = latch::<u32>();
    let (gone_counter, _, gone) = waiting(&latch);
    drop(gone);
    let (counter, waker, mut stays) = waiting(&latch);
    assert_eq!(slots(&latch), 1, "the gone waiter's slot is taken again");
    // Polled again, even with another waker, it keeps its one slot.
    let (other_counter, other_waker) = counting();
    assert_eq!(poll(&mut stays, &other_waker), Poll::Pending);
    assert_eq!(slots(&latch), 1);
    setter.set(1);
    assert_eq!((wakes(&gone_counter), wakes(&counter), wakes(&other_counter)), (0, 0, 1), "the latest waker");
    assert_eq!(poll(&mut stays, &waker), Poll::Ready(Some(1)));
}

#[test]
fn a_wait_dropped_after_the_end_touches_nothing() {
    let (setter, latch) = latch::<u32>();
    let (_, _, wait) = waiting(&latch);
    drop(setter);
    drop(wait);
    assert_eq!(slots(&latch), 0);
}

/// What a test does next with the latch.
#[derive(Clone, Debug)]
enum Step {
    /// A new waiter polls for the first time.
    Arrive,
    /// Waiter `n` (of those still there) polls again.
    Poll(usize),
    /// Waiter `n` gives up.
    GiveUp(usize),
    /// The setter sets this value.
    Set(u8),
    /// The setter goes without a value.
    Abandon,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Arrive),
        2 => any::<usize>().prop_map(Step::Poll),
        2 => any::<usize>().prop_map(Step::GiveUp),
        1 => any::<u8>().prop_map(Step::Set),
        1 => Just(Step::Abandon),
    ]
}

proptest! {
    /// Against a model: a waiter is `Pending` until the setter ends, then reads what it set
    /// (or `None`); each waiter still there when the setter ends is woken exactly once, and
    /// one gone before it never; the slots never outnumber the waiters there at once.
    #[test]
    fn waiters_see_what_the_setter_did_and_are_woken_once(steps in proptest::collection::vec(step(), 0..60)) {
        let (setter, latch) = latch::<u8>();
        let mut setter = Some(setter);
        let mut ended: Option<Option<u8>> = None;
        let mut there: Vec<(Arc<Counting>, Waker, Wait<u8>)> = Vec::new();
        let mut gone: Vec<Arc<Counting>> = Vec::new();
        let mut most_there = 0;
        for step in steps {
            match step {
                Step::Arrive => {
                    let (counter, waker) = counting();
                    let mut wait = latch.wait();
                    let polled = poll(&mut wait, &waker);
                    match ended {
                        Some(value) => prop_assert_eq!(polled, Poll::Ready(value)),
                        None => {
                            prop_assert_eq!(polled, Poll::Pending);
                            there.push((counter, waker, wait));
                        }
                    }
                }
                Step::Poll(n) if !there.is_empty() => {
                    let which = n % there.len();
                    let (_, waker, wait) = &mut there[which];
                    let expected = ended.map_or(Poll::Pending, Poll::Ready);
                    prop_assert_eq!(poll(wait, waker), expected);
                }
                Step::GiveUp(n) if !there.is_empty() => {
                    let (counter, _, wait) = there.remove(n % there.len());
                    drop(wait);
                    if ended.is_none() {
                        gone.push(counter);
                    }
                }
                Step::Set(value) => {
                    if let Some(setter) = setter.take() {
                        setter.set(value);
                        ended = Some(Some(value));
                    }
                }
                Step::Abandon => {
                    if setter.take().is_some() {
                        ended = Some(None);
                    }
                }
                Step::Poll(_) | Step::GiveUp(_) => {}
            }
            if ended.is_none() {
                most_there = most_there.max(there.len());
                prop_assert!(slots(&latch) <= most_there);
            }
        }
        for (counter, _, _) in &there {
            prop_assert_eq!(wakes(counter), usize::from(ended.is_some()));
        }
        for counter in &gone {
            prop_assert_eq!(wakes(counter), 0);
        }
    }
}

/// A value that cannot be cloned: what [`Latch::take`] hands over.
#[derive(Debug, PartialEq)]
struct Owned(Vec<u8>);

fn poll_take(take: &mut Take<Owned>, waker: &Waker) -> Poll<Option<Owned>> {
    Pin::new(take).poll(&mut Context::from_waker(waker))
}

#[test]
fn the_one_waiter_takes_the_value_itself_woken_when_it_is_set() {
    let (setter, latch) = latch::<Owned>();
    let (counter, waker) = counting();
    let mut take = latch.take();
    assert_eq!(poll_take(&mut take, &waker), Poll::Pending);
    setter.set(Owned(vec![1, 2, 3]));
    assert_eq!(wakes(&counter), 1, "woken once by the value");
    assert_eq!(poll_take(&mut take, &waker), Poll::Ready(Some(Owned(vec![1, 2, 3]))));
}

#[test]
fn a_value_set_before_the_take_is_taken_at_once_and_a_setter_gone_without_one_is_none() {
    let (setter, early) = latch::<Owned>();
    setter.set(Owned(vec![9]));
    let (_, waker) = counting();
    assert_eq!(poll_take(&mut early.take(), &waker), Poll::Ready(Some(Owned(vec![9]))));

    let (setter, latch) = latch::<Owned>();
    let (counter, waker) = counting();
    let mut take = latch.take();
    assert_eq!(poll_take(&mut take, &waker), Poll::Pending);
    drop(setter);
    assert_eq!(wakes(&counter), 1, "released by the setter's end");
    assert_eq!(poll_take(&mut take, &waker), Poll::Ready(None));
}
