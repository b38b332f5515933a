//! A bounded single-producer/single-consumer ring: the handoff between the loop thread and
//! one handler thread, one ring per direction.
//!
//! All of the queue's `unsafe` lives in this file. The design follows `rtrb`:
//!
//! - `head` (next slot to read, written only by the [`Consumer`]) and `tail` (next slot to
//!   write, written only by the [`Producer`]) are free-running `usize` counters, each on its
//!   own cache line. The capacity is a power of two, so `index & mask` is the slot and
//!   `tail - head` (wrapping) is the length, and the counters may wrap around `usize::MAX`.
//! - Each handle keeps its own index in a plain field and a *cache* of the opposite index.
//!   The cache only ever lags the real value, so it gives a conservative answer ("full" /
//!   "empty" too early, never too late); the handle reloads the shared atomic only when the
//!   cache says it must. On the common path a push touches only the tail line and the slot,
//!   and a pop only the head line and the slot.
//! - Ownership of a slot moves with the indices: the producer writes slot `t`, then
//!   `Release`-stores `tail = t + 1`; the consumer `Acquire`-loads `tail`, and only then reads
//!   the slots below it. Symmetrically the consumer moves the value out of slot `h`, then
//!   `Release`-stores `head = h + 1`; the producer `Acquire`-loads `head` before it reuses a
//!   slot below it. Those two Release/Acquire pairs are the only synchronisation the data
//!   path needs; waking a parked side is [`crate::park`]'s business.

use std::cell::Cell;
use std::fmt;
use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::sync::{Arc, AtomicUsize, Ordering, UnsafeCell};

/// A slot is initialised exactly when its index is in `head..tail` (wrapping).
type Slot<T> = UnsafeCell<MaybeUninit<T>>;

/// The state both handles share.
struct Shared<T> {
    /// Next index to read. Stored only by the consumer.
    head: CachePadded<AtomicUsize>,
    /// Next index to write. Stored only by the producer.
    tail: CachePadded<AtomicUsize>,
    /// `capacity` slots, `capacity` a power of two.
    slots: Box<[Slot<T>]>,
    /// `capacity - 1`.
    mask: usize,
}

// SAFETY: `Shared` is only reachable through one `Producer` and one `Consumer`. A slot is
// accessed by the producer only while it is outside `head..tail` and by the consumer only
// while it is inside, and the Release/Acquire pairs on `head` and `tail` hand each slot over
// with a happens-before edge, so no two threads ever access the same slot concurrently.
// Values of `T` move from the producer's thread to the consumer's, hence `T: Send`.
unsafe impl<T: Send> Sync for Shared<T> {}

// SAFETY: as for `Sync`: the only `T`s inside are values in transit from one thread to
// another, which `T: Send` allows; the atomics and the box are `Send` themselves.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T> Shared<T> {
    fn capacity(&self) -> usize {
        self.mask + 1
    }

    fn slot(&self, index: usize) -> &Slot<T> {
        // The mask keeps this in bounds; the check is cheap and lets the indexing stay safe.
        &self.slots[index & self.mask]
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Relaxed: this runs after the last handle's `Arc` decrement (Release) and the
        // final drop's Acquire, which order both handles' last stores before these loads.
        let mut head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        while head != tail {
            self.slot(head).with_mut(|slot| {
                // SAFETY: `head..tail` are exactly the initialised slots, each dropped once
                // here as `head` advances; `&mut self` means no handle is left to race.
                unsafe { (*slot).assume_init_drop() }
            });
            head = head.wrapping_add(1);
        }
    }
}

/// Creates a ring holding at least `capacity` items (rounded up to a power of two) and
/// returns its two ends.
///
/// # Panics
///
/// If `capacity` is 0 or its next power of two overflows `usize`: both are programming
/// errors, never something a client can cause.
#[must_use]
pub fn ring<T: Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    assert!(capacity >= 1, "ring capacity must be at least 1");
    let capacity = capacity
        .checked_next_power_of_two()
        .unwrap_or_else(|| panic!("ring capacity {capacity} is too large"));
    let slots = (0..capacity)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let shared = Arc::new(Shared {
        head: CachePadded::new(AtomicUsize::new(0)),
        tail: CachePadded::new(AtomicUsize::new(0)),
        slots,
        mask: capacity - 1,
    });
    let producer = Producer {
        shared: Arc::clone(&shared),
        tail: 0,
        head_cache: Cell::new(0),
    };
    let consumer = Consumer {
        shared,
        head: 0,
        tail_cache: Cell::new(0),
    };
    (producer, consumer)
}

/// The writing end of a [`ring`]. `Send`, not `Clone`, not `Sync` (the cached index is a
/// `Cell`), so exactly one thread pushes at a time.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// Always equal to `shared.tail`: only this handle stores it.
    tail: usize,
    /// A value `shared.head` had at some point; it only lags the real one.
    head_cache: Cell<usize>,
}

impl<T> Producer<T> {
    /// Moves `value` into the ring.
    ///
    /// # Errors
    ///
    /// Hands `value` back as `Err(value)` when the ring is full.
    pub fn push(&mut self, value: T) -> Result<(), T> {
        let tail = self.tail;
        if self.full_at(tail) {
            return Err(value);
        }
        self.shared.slot(tail).with_mut(|slot| {
            // SAFETY: `tail - head < capacity` (checked just above against a `head` loaded
            // with Acquire, or a cached value lagging it), so slot `tail` lies outside
            // `head..tail`: the consumer does not read it until the Release store below, and
            // its previous value was moved out before the consumer's Release store of
            // `head` that our Acquire load saw. Writing a `MaybeUninit` drops nothing.
            unsafe { slot.write(MaybeUninit::new(value)) }
        });
        self.tail = tail.wrapping_add(1);
        // Release: publishes the slot write above; pairs with the Acquire load of `tail`
        // in `Consumer::tail_has_passed`.
        self.shared.tail.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Whether a [`push`](Self::push) now would fail. May be stale (the consumer may be
    /// popping right now), never wrongly "not full".
    pub fn is_full(&self) -> bool {
        self.full_at(self.tail)
    }

    /// The number of items the ring holds (the requested capacity rounded up to a power of
    /// two).
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    fn full_at(&self, tail: usize) -> bool {
        let capacity = self.shared.capacity();
        if tail.wrapping_sub(self.head_cache.get()) < capacity {
            return false;
        }
        // Acquire: pairs with the Release store of `head` in `Consumer::pop`, so the value
        // moved out of a freed slot is gone before we overwrite the slot.
        let head = self.shared.head.load(Ordering::Acquire);
        self.head_cache.set(head);
        tail.wrapping_sub(head) >= capacity
    }
}

/// The reading end of a [`ring`]. `Send`, not `Clone`, not `Sync` (the cached index is a
/// `Cell`), so exactly one thread pops at a time.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    /// Always equal to `shared.head`: only this handle stores it.
    head: usize,
    /// A value `shared.tail` had at some point; it only lags the real one.
    tail_cache: Cell<usize>,
}

impl<T> Consumer<T> {
    /// Moves the oldest item out of the ring, or `None` when it is empty.
    pub fn pop(&mut self) -> Option<T> {
        let head = self.head;
        if !self.tail_has_passed(head) {
            return None;
        }
        let value = self.shared.slot(head).with(|slot| {
            // SAFETY: `head` is below a `tail` we loaded with Acquire (now or earlier, into
            // `tail_cache`), which pairs with the producer's Release store made after it
            // wrote this slot: the slot is initialised and the write happened-before this
            // read. The producer will not touch it again until our Release store of `head`
            // below, and advancing `head` makes this the value's only owner.
            unsafe { slot.read().assume_init() }
        });
        self.head = head.wrapping_add(1);
        // Release: hands the emptied slot back; pairs with the Acquire load of `head` in
        // `Producer::full_at`.
        self.shared.head.store(self.head, Ordering::Release);
        Some(value)
    }

    /// Whether a [`pop`](Self::pop) now would find nothing. May be stale, but never reports
    /// empty when an item was published before this call with a happens-before edge (or, in
    /// the wake protocol, behind a `fence(SeqCst)` on each side; see [`crate::park`]).
    pub fn is_empty(&self) -> bool {
        !self.tail_has_passed(self.head)
    }

    fn tail_has_passed(&self, head: usize) -> bool {
        if self.tail_cache.get() != head {
            return true;
        }
        // Acquire: pairs with the Release store of `tail` in `Producer::push`, so the
        // slot writes below the loaded `tail` are visible before we read them.
        let tail = self.shared.tail.load(Ordering::Acquire);
        self.tail_cache.set(tail);
        tail != head
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity())
            .field("tail", &self.tail)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.shared.capacity())
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;

    #[test]
    fn pops_in_push_order() {
        let (mut p, mut c) = ring(8);
        for i in 0..5 {
            p.push(i).unwrap();
        }
        for i in 0..5 {
            assert_eq!(c.pop(), Some(i));
        }
        assert_eq!(c.pop(), None);
    }

    #[test]
    fn rejects_push_when_full_and_hands_value_back() {
        let (mut p, mut c) = ring(4);
        assert_eq!(p.capacity(), 4);
        for i in 0..4 {
            assert!(!p.is_full());
            p.push(i).unwrap();
        }
        assert!(p.is_full());
        assert_eq!(p.push(99), Err(99));
        assert_eq!(c.pop(), Some(0));
        assert!(!p.is_full());
        p.push(4).unwrap();
        assert!(p.is_full());
    }

    #[test]
    fn reports_empty_only_when_empty() {
        let (mut p, mut c) = ring(2);
        assert!(c.is_empty());
        p.push("a").unwrap();
        assert!(!c.is_empty());
        assert_eq!(c.pop(), Some("a"));
        assert!(c.is_empty());
        assert_eq!(c.pop(), None);
    }

    #[test]
    fn rounds_capacity_up_to_a_power_of_two() {
        assert_eq!(ring::<u8>(1).0.capacity(), 1);
        assert_eq!(ring::<u8>(3).0.capacity(), 4);
        assert_eq!(ring::<u8>(64).0.capacity(), 64);
        assert_eq!(ring::<u8>(65).0.capacity(), 128);
    }

    #[test]
    #[should_panic(expected = "at least 1")]
    fn refuses_capacity_zero() {
        let _ = ring::<u8>(0);
    }

    #[test]
    fn capacity_one_alternates() {
        let (mut p, mut c) = ring(1);
        for i in 0..10 {
            p.push(i).unwrap();
            assert!(p.is_full());
            assert_eq!(p.push(100), Err(100));
            assert_eq!(c.pop(), Some(i));
            assert!(c.is_empty());
        }
    }

    #[test]
    fn wraps_around_many_times_with_partial_fills() {
        let (mut p, mut c) = ring(4);
        let (mut next_in, mut next_out) = (0u32, 0u32);
        for round in 0..1000 {
            for _ in 0..=(round % 4) {
                p.push(next_in).unwrap();
                next_in += 1;
            }
            while let Some(v) = c.pop() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
        }
        assert_eq!(next_in, next_out);
    }

    #[test]
    fn survives_index_wraparound_at_usize_max() {
        let (mut p, mut c) = ring(4);
        // Start both ends just below the wrap of the free-running counters.
        let start = usize::MAX - 5;
        p.tail = start;
        p.head_cache.set(start);
        c.head = start;
        c.tail_cache.set(start);
        p.shared.head.store(start, Ordering::Relaxed);
        p.shared.tail.store(start, Ordering::Relaxed);
        for i in 0..40 {
            p.push(i).unwrap();
            p.push(i + 1000).unwrap();
            assert_eq!(c.pop(), Some(i));
            assert_eq!(c.pop(), Some(i + 1000));
            assert!(c.is_empty());
        }
        for i in 0..4 {
            p.push(i).unwrap();
        }
        assert!(p.is_full());
    }

    /// Counts its drops in a shared static-free counter.
    struct DropCounter<'a>(&'a StdAtomicUsize);

    impl Drop for DropCounter<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn drops_items_left_in_the_ring_exactly_once() {
        let drops = StdAtomicUsize::new(0);
        {
            let (mut p, mut c) = ring(8);
            for _ in 0..6 {
                assert!(p.push(DropCounter(&drops)).is_ok());
            }
            // Two popped and dropped by the test, four left inside, and a wrap so that the
            // remaining items straddle the end of the buffer.
            drop(c.pop());
            drop(c.pop());
            for _ in 0..3 {
                assert!(p.push(DropCounter(&drops)).is_ok());
            }
            assert_eq!(drops.load(std::sync::atomic::Ordering::Relaxed), 2);
            drop(p);
            assert_eq!(drops.load(std::sync::atomic::Ordering::Relaxed), 2);
        }
        assert_eq!(drops.load(std::sync::atomic::Ordering::Relaxed), 9);
    }

    #[test]
    fn full_push_does_not_drop_the_returned_value() {
        let drops = StdAtomicUsize::new(0);
        let (mut p, _c) = ring(1);
        assert!(p.push(DropCounter(&drops)).is_ok());
        let back = p.push(DropCounter(&drops));
        assert_eq!(drops.load(std::sync::atomic::Ordering::Relaxed), 0);
        drop(back);
        assert_eq!(drops.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn handles_are_send() {
        fn assert_send<S: Send>() {}
        assert_send::<Producer<String>>();
        assert_send::<Consumer<String>>();
    }

    #[test]
    fn moves_items_between_threads_in_order() {
        let (mut p, mut c) = ring::<u64>(16);
        let n = 100_000u64;
        let t = std::thread::spawn(move || {
            for i in 0..n {
                let mut v = i;
                while let Err(back) = p.push(v) {
                    v = back;
                    crate::sync::spin_hint();
                }
            }
        });
        let mut expected = 0;
        while expected < n {
            if let Some(v) = c.pop() {
                assert_eq!(v, expected);
                expected += 1;
            } else {
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
        assert!(c.is_empty());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::thread;

    /// Three items through a capacity-2 ring, so the producer must wait for the consumer to
    /// free a slot and slot 0 is reused: no loss, order kept, and loom's `UnsafeCell`
    /// tracking fails the model if a slot is read before its write happened-before, or
    /// written while the consumer may still read it.
    #[test]
    fn ring_hands_over_three_items_through_two_slots() {
        loom::model(|| {
            let (mut p, mut c) = ring::<String>(2);
            let producer = thread::spawn(move || {
                for i in 0..3 {
                    let mut v = i.to_string();
                    while let Err(back) = p.push(v) {
                        v = back;
                        thread::yield_now();
                    }
                }
            });
            let mut got = Vec::new();
            while got.len() < 3 {
                match c.pop() {
                    Some(v) => got.push(v),
                    None => thread::yield_now(),
                }
            }
            producer.join().unwrap();
            assert_eq!(got, ["0", "1", "2"]);
            assert!(c.is_empty());
        });
    }

    /// Dropping both ends with items still inside drops them; loom checks the final drop
    /// (on whichever thread lets go last) is ordered after the other thread's slot accesses.
    #[test]
    fn ring_drop_races_with_nothing() {
        loom::model(|| {
            let (mut p, mut c) = ring::<String>(2);
            let producer = thread::spawn(move || {
                let _ = p.push("a".to_owned());
                let _ = p.push("b".to_owned());
            });
            let _ = c.pop();
            drop(c);
            producer.join().unwrap();
        });
    }
}
