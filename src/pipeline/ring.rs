//! A bounded single-producer/single-consumer ring: the handoff between the loop thread and
//! one handler thread, one ring per direction.
//!
//! All of the queue's `unsafe` lives in this file. Each slot carries its own sequence
//! number (the bounded-queue design of Dmitry Vyukov, reduced to one producer and one
//! consumer), so a hand-over moves one cache line, the slot's, instead of the slot and a
//! shared index:
//!
//! - The producer's `tail` and the consumer's `head` are free-running `usize` counters kept
//!   in plain fields of their own handle; nothing else shares them. The capacity is a power
//!   of two (at least 2), so `index & mask` is the slot, and the counters may wrap around
//!   `usize::MAX`.
//! - Slot `i`'s `seq` says whose it is: `seq == t` means free for the producer's write of
//!   index `t`; `seq == h + 1` means it holds the value of index `h` for the consumer. The
//!   slot starts with `seq = i`. The producer writes the value, then `Release`-stores
//!   `seq = t + 1`; the consumer `Acquire`-loads `seq`, moves the value out, then
//!   `Release`-stores `seq = h + capacity` (free for the producer's next lap), which the
//!   producer `Acquire`-loads before it writes the slot again. Those two Release/Acquire
//!   pairs per slot are the only synchronisation the data path needs; waking a parked side
//!   is [`crate::pipeline::park`]'s business.
//! - Free (`≡ i`) and full (`≡ i + 1`) differ modulo the capacity, which is why it is at
//!   least 2; a ring dropped with values inside finds them by that test.
//!
//! Measured against the earlier design (shared head and tail indices, each cached by the
//! opposite side, like `rtrb`): benchmarks/decisions.md, "ring round trip".

use std::fmt;
use std::mem::MaybeUninit;

use crate::pipeline::sync::{Arc, AtomicUsize, Ordering, UnsafeCell};

struct Slot<T> {
    /// Whose the slot is (module doc). Stored by the producer after it writes `value`, and
    /// by the consumer after it moves `value` out.
    seq: AtomicUsize,
    /// Initialised exactly while `seq ≡ index + 1` (mod capacity).
    value: UnsafeCell<MaybeUninit<T>>,
}

/// The state both handles share.
struct Shared<T> {
    /// `capacity` slots, `capacity` a power of two, at least 2.
    slots: Box<[Slot<T>]>,
    /// `capacity - 1`.
    mask: usize,
}

// SAFETY: `Shared` is only reachable through one `Producer` and one `Consumer`. A slot's
// value is accessed by the producer only while its `seq` says free and by the consumer only
// while it says full, and each side hands it over with a Release store of `seq` that the
// other side's Acquire load sees before touching the value, so no two threads ever access
// the same value concurrently. Values of `T` move from the producer's thread to the
// consumer's, hence `T: Send`.
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
        for (i, slot) in self.slots.iter().enumerate() {
            // Relaxed: this runs after the last handle's `Arc` decrement (Release) and the
            // final drop's Acquire, which order both handles' last stores before this load.
            let seq = slot.seq.load(Ordering::Relaxed);
            if seq.wrapping_sub(i) & self.mask == 1 {
                slot.value.with_mut(|v| {
                    // SAFETY: `seq ≡ i + 1` means the slot holds a value the consumer has
                    // not moved out; each slot is visited once, and `&mut self` means no
                    // handle is left to race.
                    unsafe { (*v).assume_init_drop() }
                });
            }
        }
    }
}

/// Creates a ring holding at least `capacity` items (rounded up to a power of two, and to
/// at least 2) and returns its two ends.
///
/// # Panics
///
/// If `capacity` is 0 or its next power of two overflows `usize`: both are programming
/// errors, never something a client can cause.
#[must_use]
pub fn ring<T: Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    assert!(capacity >= 1, "ring capacity must be at least 1");
    let capacity = capacity
        .max(2)
        .checked_next_power_of_two()
        .unwrap_or_else(|| panic!("ring capacity {capacity} is too large"));
    let slots = (0..capacity)
        .map(|i| Slot {
            seq: AtomicUsize::new(i),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        })
        .collect();
    let shared = Arc::new(Shared {
        slots,
        mask: capacity - 1,
    });
    let producer = Producer {
        shared: Arc::clone(&shared),
        tail: 0,
    };
    let consumer = Consumer { shared, head: 0 };
    (producer, consumer)
}

/// The writing end of a [`ring`]. `Send`, not `Clone`, not `Sync`, so exactly one thread
/// pushes at a time.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// The next index to write.
    tail: usize,
}

impl<T> Producer<T> {
    /// Moves `value` into the ring.
    ///
    /// # Errors
    ///
    /// Hands `value` back as `Err(value)` when the ring is full.
    pub fn push(&mut self, value: T) -> Result<(), T> {
        let tail = self.tail;
        let slot = self.shared.slot(tail);
        if !Self::free_for(slot, tail) {
            return Err(value);
        }
        slot.value.with_mut(|v| {
            // SAFETY: `seq == tail` (loaded with Acquire in `free_for`) means the consumer
            // moved the slot's previous value out (or there never was one) before its
            // Release store of `seq`, and it will not read the slot again until our
            // Release store below. Writing a `MaybeUninit` drops nothing.
            unsafe { v.write(MaybeUninit::new(value)) }
        });
        self.tail = tail.wrapping_add(1);
        // Release: publishes the value written above; pairs with the Acquire load of `seq`
        // in `Consumer::full_at`.
        slot.seq.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Whether a [`push`](Self::push) now would fail. May be stale (the consumer may be
    /// popping right now), never wrongly "not full".
    pub(crate) fn is_full(&self) -> bool {
        !Self::free_for(self.shared.slot(self.tail), self.tail)
    }

    /// Whether the consumer has taken every item pushed so far. A hint: it may be stale
    /// (the consumer may be popping right now), and nothing is published through it.
    pub(crate) fn is_drained(&self) -> bool {
        let last = self.tail.wrapping_sub(1);
        // Acquire: pairs with the Release store of `seq` in `Consumer::pop`. The slot of
        // the last item pushed holds `tail` until the consumer takes it.
        self.shared.slot(last).seq.load(Ordering::Acquire) != self.tail
    }

    /// The number of items the ring holds (the requested capacity rounded up to a power of
    /// two, and to at least 2).
    pub(crate) fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    fn free_for(slot: &Slot<T>, tail: usize) -> bool {
        // Acquire: pairs with the Release store of `seq` in `Consumer::pop`, so the value
        // moved out of the slot is gone before we overwrite it.
        slot.seq.load(Ordering::Acquire) == tail
    }
}

/// The reading end of a [`ring`]. `Send`, not `Clone`, not `Sync`, so exactly one thread
/// pops at a time.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    /// The next index to read.
    head: usize,
}

impl<T> Consumer<T> {
    /// Moves the oldest item out of the ring, or `None` when it is empty.
    pub fn pop(&mut self) -> Option<T> {
        let head = self.head;
        let slot = self.shared.slot(head);
        if !Self::full_at(slot, head) {
            return None;
        }
        let value = slot.value.with(|v| {
            // SAFETY: `seq == head + 1` (loaded with Acquire in `full_at`) pairs with the
            // producer's Release store made after it wrote this slot: the value is
            // initialised and the write happened-before this read. The producer will not
            // touch the slot again until our Release store below, and advancing `head`
            // makes this the value's only owner.
            unsafe { v.read().assume_init() }
        });
        self.head = head.wrapping_add(1);
        // Release: hands the emptied slot back for the producer's next lap; pairs with the
        // Acquire load of `seq` in `Producer::free_for`.
        slot.seq
            .store(head.wrapping_add(self.shared.capacity()), Ordering::Release);
        Some(value)
    }

    /// Whether a [`pop`](Self::pop) now would find nothing. May be stale, but never reports
    /// empty when an item was published before this call with a happens-before edge (or, in
    /// the wake protocol, behind a `fence(SeqCst)` on each side; see [`crate::pipeline::park`]).
    pub fn is_empty(&self) -> bool {
        !Self::full_at(self.shared.slot(self.head), self.head)
    }

    /// Whether at least `n` items (1 to the capacity) are ready to pop. May be stale, as
    /// `is_empty`.
    pub(crate) fn holds_at_least(&self, n: usize) -> bool {
        debug_assert!(n >= 1 && n <= self.shared.capacity());
        // Items are published in order, so the `n`th is ready only if all before it are.
        let at = self.head.wrapping_add(n - 1);
        Self::full_at(self.shared.slot(at), at)
    }

    fn full_at(slot: &Slot<T>, head: usize) -> bool {
        // Acquire: pairs with the Release store of `seq` in `Producer::push`, so the value
        // written to the slot is visible before we read it.
        slot.seq.load(Ordering::Acquire) == head.wrapping_add(1)
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
    fn the_producer_sees_when_everything_pushed_was_taken() {
        let (mut p, mut c) = ring(4);
        assert!(p.is_drained());
        // Over several laps of the ring.
        for i in 0..10 {
            p.push(i).unwrap();
            assert!(!p.is_drained());
            p.push(i).unwrap();
            c.pop().unwrap();
            assert!(!p.is_drained(), "one is left");
            c.pop().unwrap();
            assert!(p.is_drained());
        }
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
    fn counts_what_it_holds_across_laps() {
        let (mut p, mut c) = ring(4);
        for lap in 0..3 {
            assert!(!c.holds_at_least(1));
            for i in 0..4 {
                p.push(lap * 10 + i).unwrap();
                assert!(c.holds_at_least(i + 1));
                if i < 3 {
                    assert!(!c.holds_at_least(i + 2));
                }
            }
            assert_eq!(c.pop(), Some(lap * 10));
            assert!(c.holds_at_least(3) && !c.holds_at_least(4));
            while c.pop().is_some() {}
        }
    }

    #[test]
    fn rounds_capacity_up_to_a_power_of_two_of_at_least_two() {
        assert_eq!(ring::<u8>(1).0.capacity(), 2);
        assert_eq!(ring::<u8>(2).0.capacity(), 2);
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
    fn smallest_ring_fills_and_drains_alternately() {
        let (mut p, mut c) = ring(1);
        for i in 0..10 {
            p.push(i).unwrap();
            p.push(i + 100).unwrap();
            assert!(p.is_full());
            assert_eq!(p.push(1000), Err(1000));
            assert_eq!(c.pop(), Some(i));
            assert!(!p.is_full());
            assert_eq!(c.pop(), Some(i + 100));
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
        // Start both ends just below the wrap of the free-running counters: each slot's
        // sequence is what an empty ring at that position has.
        let start = usize::MAX - 5;
        p.tail = start;
        c.head = start;
        for j in 0..4 {
            let index = start.wrapping_add(j);
            p.shared.slot(index).seq.store(index, Ordering::Relaxed);
        }
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
                    crate::pipeline::sync::spin_hint();
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
    use crate::pipeline::sync::thread;

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

    /// `is_drained` on the producer's side while the consumer pops: when it says drained,
    /// every slot is free (both items were taken, so two more pushes fit); it may say not
    /// drained a moment late, never drained early.
    #[test]
    fn the_producer_never_takes_a_ring_with_an_item_for_drained() {
        loom::model(|| {
            let (mut p, mut c) = ring::<usize>(2);
            p.push(1).unwrap();
            p.push(2).unwrap();
            let consumer = thread::spawn(move || {
                for want in 1..=2 {
                    loop {
                        match c.pop() {
                            Some(v) => {
                                assert_eq!(v, want);
                                break;
                            }
                            None => thread::yield_now(),
                        }
                    }
                }
            });
            if p.is_drained() {
                p.push(3).unwrap();
                p.push(4).unwrap();
            }
            consumer.join().unwrap();
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
