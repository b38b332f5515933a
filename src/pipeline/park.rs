//! Park only if parked: the handshake that lets either side of a ring sleep without the
//! other paying a syscall on every push.
//!
//! Each side that can sleep owns a [`WakeFlag`], shared by `Arc` with whoever pushes work to
//! it. The handler thread sleeps in [`wait_until`] (`std::thread::park`); the loop thread
//! sleeps in `mio::Poll::poll` and is woken through a `mio::Waker`. The protocol is the same
//! (shown for "wait for an item"; "wait for room" is the same with the consumer's store of
//! the slot's `seq` for the producer's):
//!
//! ```text
//!   sleeper                                  waker
//!   parked.store(true)          (announce)   slot.seq.store(t + 1, Release)    (push)
//!   fence(SeqCst)                            fence(SeqCst)                     (should_wake)
//!   re-check: slot.seq.load(Acquire)         parked.load() -> if true, swap(false)
//!   empty? sleep : cancel                    won the swap? unpark / Waker::wake
//! ```
//!
//! # Why one `SeqCst` fence on each side
//!
//! Each side stores to one location and then loads the other's: that is the
//! store-buffering pattern. With only Release/Acquire, both loads may read the old values
//! (each store may still sit in its core's store buffer when the load runs): the sleeper sees
//! the ring empty, the waker sees `parked == false`, nobody wakes anybody, and the request
//! sits in the ring while the handler sleeps (or the response while the loop blocks in
//! `epoll_wait`). Release/Acquire only say what a load sees *once it has read a given
//! store*; nothing forces either load to read the other side's new store. (`SeqCst` on all
//! four accesses would also do, but it would make the ring's own stores `SeqCst`, and loom
//! models `SeqCst` fences, not `SeqCst` accesses.)
//!
//! The fences fix that. All `SeqCst` fences fall into one total order `S`. If the sleeper's
//! fence comes first in `S`, the waker's load of `parked` (after its fence) must see the
//! sleeper's `true` or a later value; if the waker's fence comes first, the sleeper's load
//! of the slot's `seq` (after its fence) must see the new value or a later one (the fence-to-fence rule
//! of C++'s `[atomics.order]`, which Rust's atomics follow). So at least one side sees the
//! other: either the waker sees `parked` and wakes, or the sleeper sees the item and does
//! not sleep. That is *sufficient*: the data itself still moves with the ring's
//! Release/Acquire pairs, and the fence costs one `mfence`/`dmb` per push and per announce.
//! It is *necessary* on both sides: without the waker's fence its load of `parked` may be
//! satisfied before its `seq` store leaves the store buffer, and without the sleeper's fence
//! its load of `seq` may be satisfied before `parked = true` is visible; either reordering
//! alone reproduces the lost wake-up (the loom models in this file deadlock when either
//! fence is removed).
//!
//! If `parked` is seen set, the waker swaps it to `false` (a compare-exchange `true ->
//! false`, so that a loser writes nothing; see [`WakeFlag::should_wake`]); the one caller
//! whose swap reads `true` delivers the wake, so several wakers (every handler thread wakes
//! the one loop) make one syscall, not several. A waker whose swap reads `false` lost to
//! either another waker (who delivers the wake) or the sleeper's own [`WakeFlag::cancel`]
//! (it is already awake and re-checks after cancelling).
//!
//! # Why "announce, fence, re-check, sleep" is safe with an early wake
//!
//! The waker may see `parked` and deliver its wake *before* the sleeper actually blocks
//! (between its re-check and its call to `park`/`poll`). That wake is not lost:
//! `std::thread::park` has a token that `unpark` sets and the next `park` consumes, and
//! `mio::Waker` writes an eventfd whose readiness the next `poll` reports at once. A wake can
//! also arrive late or for no reason (a token left from an earlier round, a spurious
//! return); that costs one extra loop: the sleeper always cancels and re-checks after waking
//! and goes back through announce, fence, re-check before it sleeps again.

use crossbeam_utils::CachePadded;

use crate::pipeline::sync::{fence, thread, AtomicBool, Ordering};

/// One per sleeping side. Shared by `Arc` between the sleeper and the waker(s).
#[derive(Debug, Default)]
pub struct WakeFlag {
    /// `true` from the sleeper's announce until the sleeper cancels or a waker wins the
    /// swap. On its own cache line: the waker reads it after every push.
    parked: CachePadded<AtomicBool>,
}

impl WakeFlag {
    /// A flag for a side that is awake.
    #[must_use]
    pub fn new() -> Self {
        Self {
            parked: CachePadded::new(AtomicBool::new(false)),
        }
    }

    /// Sleeper: announce that it is about to sleep. Stores `parked = true`, then
    /// `fence(SeqCst)`. The caller MUST re-check its queues afterwards and call
    /// [`cancel`](Self::cancel) if it found work, else sleep.
    pub fn announce(&self) {
        // Release: pairs with the Acquire compare-exchange in `should_wake`, so a waker that
        // wins this announce's `true` delivers its wake after the announce, never to an
        // earlier sleep.
        self.parked.store(true, Ordering::Release);
        // SeqCst fence: pairs with the fence in `should_wake` (store-buffering; module doc).
        fence(Ordering::SeqCst);
    }

    /// Sleeper: it will not sleep after all, or it has woken up.
    pub fn cancel(&self) {
        // Relaxed: publishes nothing; a waker that reads this `false` skips the wake, which
        // is right because the sleeper re-checks its queues after cancelling.
        self.parked.store(false, Ordering::Relaxed);
    }

    /// Waker: call after publishing work (the ring push's Release store). `fence(SeqCst)`,
    /// then if `parked` is set, swap it to `false`; returns `true` only to the one caller
    /// that won the swap, who must deliver the wake (`Thread::unpark` / `mio::Waker::wake`).
    #[must_use = "a `true` obliges the caller to deliver the wake, or it is lost"]
    pub fn should_wake(&self) -> bool {
        // SeqCst fence: pairs with the fence in `announce` (store-buffering; module doc).
        fence(Ordering::SeqCst);
        // Relaxed: the fence pair above decides what this load must see. A plain load keeps
        // the common "nobody sleeps" path free of a locked instruction, and leaves the
        // flag's cache line shared instead of pulling it away from the sleeper on every push.
        if !self.parked.load(Ordering::Relaxed) {
            return false;
        }
        // The swap to `false` is a compare-exchange so that a loser writes nothing: a `swap`
        // that reads `false` still stores `false`, a needless write that (besides costing
        // the line) loom cannot order against the sleeper's next announce, so the model
        // would then let a later load read it and report a lost wake-up that C++'s single
        // modification order rules out.
        // Acquire on success: pairs with the Release store in `announce`.
        // Relaxed on failure: the loser does nothing with what it read.
        self.parked
            .compare_exchange(true, false, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[cfg(test)]
    /// Whether the sleeper has announced and not yet been woken or cancelled. For tests; the
    /// answer may be stale.
    pub(crate) fn is_parked(&self) -> bool {
        // Relaxed: a snapshot with no data behind it.
        self.parked.load(Ordering::Relaxed)
    }
}

/// A sleeper's wish to be woken for work it would otherwise take at its next wake anyway.
///
/// The loop uses it for a handler's final part with nothing left to write (the handler
/// wrote the response itself): all the loop learns from it is that the connection is quiet
/// again, which matters at once only when something waits on that connection (bytes
/// pipelined behind the request, an answer held, a close, a graceful stop). Otherwise the
/// part waits in the ring for the loop's next wake (a new request, a timer; the loop bounds
/// its sleep while requests are out), and the handler saves a wake-up a request.
///
/// The protocol beside [`WakeFlag`]'s:
///
/// ```text
///   sleeper (awake)                 waker
///   wanted.store(true)              slot.seq.store(t + 1, Release)   (push)
///   ... announce: fence(SeqCst)     fence(SeqCst)                    (wanted)
///   re-check: slot.seq.load()       wanted.load() -> if true, should_wake / wake
/// ```
///
/// Store-buffering again: the sleeper's store of `wanted` comes before the `SeqCst` fence
/// of its next announce, the waker's push before the fence in [`wanted`](Self::wanted), so
/// either the waker sees the wish (and goes on to `should_wake`, which sees the announce
/// after that fence) or the sleeper's re-check sees the item and it does not sleep. A wish
/// made after the item was pushed is met by the re-check of the same announce. The
/// sleeper clears the wish only when no item it could be waiting for is outstanding; a
/// waker that reads a stale `true` makes one wake-up too many.
#[derive(Debug, Default)]
pub(crate) struct WantFlag {
    wanted: AtomicBool,
}

impl WantFlag {
    /// Sleeper, while awake (before its next announce): whether it wants wakes for such
    /// items. Stores only a change, so the line stays shared while the wish holds.
    pub(crate) fn set(&self, on: bool) {
        // Relaxed, both: the fence of the sleeper's next announce orders the store before
        // its re-check (module doc, and the type's doc above).
        if self.wanted.load(Ordering::Relaxed) != on {
            self.wanted.store(on, Ordering::Relaxed);
        }
    }

    /// Waker, after publishing an item (the ring push's Release store): whether the sleeper
    /// wants to be woken for it. If `true`, go on as for any item (`should_wake`, wake).
    #[must_use]
    pub(crate) fn wanted(&self) -> bool {
        // SeqCst fence: pairs with the fence in the sleeper's `WakeFlag::announce`
        // (store-buffering; the type's doc).
        fence(Ordering::SeqCst);
        // Relaxed: the fence pair decides what this load must see.
        self.wanted.load(Ordering::Relaxed)
    }
}

/// Handler-side wait: spin with `crossbeam_utils::Backoff` (checking `ready()` each step)
/// until `backoff.is_completed()`; then
/// `loop { announce; if ready() { cancel; return }; park(); cancel(); if ready() { return } }`.
///
/// `park` is `std::thread::park` outside loom, `loom::thread::park` under loom (the shim's
/// `thread` module). Spurious wakes are handled by the loop. `ready` must be the re-check of every
/// queue whose wakers use `flag` (typically `|| !consumer.is_empty()`), and the waker must
/// `unpark` this thread when [`WakeFlag::should_wake`] says so.
///
/// Returns how many times it parked (0 when the spin or the re-check found the condition),
/// for the pipeline counters.
pub fn wait_until(flag: &WakeFlag, mut ready: impl FnMut() -> bool) -> u32 {
    if spin_until(&mut ready) {
        return 0;
    }
    let mut parks = 0;
    loop {
        flag.announce();
        if ready() {
            flag.cancel();
            return parks;
        }
        thread::park();
        parks += 1;
        flag.cancel();
        if ready() {
            return parks;
        }
    }
}

#[cfg(not(loom))]
thread_local! {
    /// Whether this thread's waits spin before they yield (see [`set_spin`]).
    static SPIN: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Whether the calling thread's waits ([`wait_until`]) spin on `pause` before they yield
/// and park. A thread that may run on one CPU only turns it off: there the thread it waits
/// for cannot run while it spins, so spinning only delays what it waits for.
#[cfg(not(loom))]
pub(crate) fn set_spin(on: bool) {
    SPIN.with(|s| s.set(on));
}

/// Yields before parking on a thread that does not spin: each lets a thread woken on the
/// same CPU (the loop, with a request to push) run first; as many as `Backoff` makes.
#[cfg(not(loom))]
const YIELDS_WITHOUT_SPIN: usize = 4;

/// The spin phase: true if `ready()` became true before the backoff ran out.
#[cfg(not(loom))]
fn spin_until(ready: &mut impl FnMut() -> bool) -> bool {
    if !SPIN.with(std::cell::Cell::get) {
        for _ in 0..YIELDS_WITHOUT_SPIN {
            if ready() {
                return true;
            }
            std::thread::yield_now();
        }
        return ready();
    }
    let backoff = crossbeam_utils::Backoff::new();
    loop {
        if ready() {
            return true;
        }
        if backoff.is_completed() {
            return false;
        }
        backoff.snooze();
    }
}

/// Under loom spinning only multiplies the states to explore: one check, one yield.
#[cfg(loom)]
fn spin_until(ready: &mut impl FnMut() -> bool) -> bool {
    if ready() {
        return true;
    }
    crate::pipeline::sync::spin_hint();
    false
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::pipeline::ring::ring;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn should_wake_is_false_when_nobody_sleeps() {
        let flag = WakeFlag::new();
        assert!(!flag.is_parked());
        assert!(!flag.should_wake());
    }

    #[test]
    fn only_one_waker_wins_an_announce() {
        let flag = WakeFlag::new();
        flag.announce();
        assert!(flag.is_parked());
        assert!(flag.should_wake());
        assert!(!flag.is_parked());
        assert!(!flag.should_wake());
    }

    #[test]
    fn cancel_withdraws_the_announce() {
        let flag = WakeFlag::new();
        flag.announce();
        flag.cancel();
        assert!(!flag.should_wake());
    }

    #[test]
    fn wait_until_returns_at_once_when_ready() {
        let flag = WakeFlag::new();
        wait_until(&flag, || true);
        assert!(!flag.is_parked());
    }

    /// A cheap xorshift64 for the random pauses.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        /// Sometimes sleep a few microseconds, sometimes yield, mostly go on.
        fn maybe_pause(&mut self) {
            let r = self.next();
            // About one step in 512 sleeps (the other side's backoff runs out and it parks),
            // one in 64 yields, one in 32 spins a little.
            match r % 512 {
                0 => std::thread::sleep(Duration::from_micros(r >> 60)),
                1..=8 => std::thread::yield_now(),
                9..=24 => {
                    for _ in 0..(r >> 58) {
                        crate::pipeline::sync::spin_hint();
                    }
                }
                _ => {}
            }
        }
    }

    fn stress_items(default: u64) -> u64 {
        std::env::var("M0SERVE_STRESS_ITEMS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// Runs `body` on a thread and fails the test (instead of hanging it) if it has not
    /// finished after `limit`: a lost wake-up shows up as a thread that parks forever.
    fn within<R: Send + 'static>(limit: Duration, body: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        let runner = std::thread::spawn(move || {
            let _ = tx.send(body());
        });
        match rx.recv_timeout(limit) {
            Ok(r) => r,
            // The body panicked (a failed assertion): report that panic, not a hang.
            Err(mpsc::RecvTimeoutError::Disconnected) => match runner.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the body ended without sending its result"),
            },
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("no progress after {limit:?}: lost wake-up?")
            }
        }
    }

    /// Pushes `0..n` through a capacity-64 ring; the consumer waits with the full park
    /// protocol; both sides pause at random. No loss, no duplicate, order kept.
    #[test]
    fn stress_one_way_keeps_every_item_in_order() {
        stress_one_way(stress_items(2_000_000), true);
    }

    /// The same with a consumer that does not spin (a thread pinned to one CPU): it yields
    /// and parks at once, so far more of its waits go through the park protocol.
    #[test]
    fn stress_one_way_without_spinning_keeps_every_item_in_order() {
        stress_one_way(stress_items(2_000_000) / 4, false);
    }

    fn stress_one_way(n: u64, spin: bool) {
        let started = Instant::now();
        let (parks, wakes) = within(Duration::from_secs(120), move || {
            let (mut tx, mut rx) = ring::<u64>(64);
            let flag = Arc::new(WakeFlag::new());
            let consumer_flag = Arc::clone(&flag);
            let consumer = std::thread::spawn(move || {
                set_spin(spin);
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
                let mut expected = 0u64;
                let mut parks = 0u64;
                while expected < n {
                    if rx.is_empty() {
                        parks += 1;
                        wait_until(&consumer_flag, || !rx.is_empty());
                    }
                    while let Some(v) = rx.pop() {
                        assert_eq!(v, expected, "lost, duplicated or reordered item");
                        expected += 1;
                        rng.maybe_pause();
                    }
                }
                assert!(rx.pop().is_none());
                parks
            });
            let consumer_thread = consumer.thread().clone();
            let mut rng = Rng(0xD1B5_4A32_D192_ED03);
            let mut wakes = 0u64;
            for i in 0..n {
                let mut v = i;
                while let Err(back) = tx.push(v) {
                    v = back;
                    std::thread::yield_now();
                }
                if flag.should_wake() {
                    wakes += 1;
                    consumer_thread.unpark();
                }
                rng.maybe_pause();
            }
            (consumer.join().unwrap(), wakes)
        });
        eprintln!(
            "one-way (spin {spin}): {n} items in {:?}, consumer waited {parks} times, {wakes} \
             unparks",
            started.elapsed()
        );
    }

    /// Request ring + response ring, one round trip at a time, both sides parking with the
    /// protocol and waking each other with `Thread::unpark`.
    #[test]
    fn stress_ping_pong_parks_on_both_sides() {
        let n = stress_items(2_000_000) / 10;
        let started = Instant::now();
        let (client_wakes, server_wakes) = within(Duration::from_secs(120), move || {
            let (mut req_tx, mut req_rx) = ring::<u64>(4);
            let (mut resp_tx, mut resp_rx) = ring::<u64>(4);
            let server_flag = Arc::new(WakeFlag::new());
            let client_flag = Arc::new(WakeFlag::new());
            let client_thread = std::thread::current();
            let (sf, cf) = (Arc::clone(&server_flag), Arc::clone(&client_flag));
            let server = std::thread::spawn(move || {
                let mut rng = Rng(0x2545_F491_4F6C_DD1D);
                let mut wakes = 0u64;
                for i in 0..n {
                    wait_until(&sf, || !req_rx.is_empty());
                    let v = req_rx.pop().expect("woken with an empty request ring");
                    assert_eq!(v, i);
                    rng.maybe_pause();
                    resp_tx.push(v * 2).expect("response ring full");
                    if cf.should_wake() {
                        wakes += 1;
                        client_thread.unpark();
                    }
                }
                wakes
            });
            let server_thread = server.thread().clone();
            let mut rng = Rng(0x1234_5678_9ABC_DEF1);
            let mut wakes = 0u64;
            for i in 0..n {
                req_tx.push(i).expect("request ring full");
                if server_flag.should_wake() {
                    wakes += 1;
                    server_thread.unpark();
                }
                rng.maybe_pause();
                wait_until(&client_flag, || !resp_rx.is_empty());
                assert_eq!(resp_rx.pop(), Some(i * 2));
            }
            assert!(resp_rx.is_empty());
            (wakes, server.join().unwrap())
        });
        eprintln!(
            "ping-pong: {n} round trips in {:?}, {client_wakes} server unparks, \
             {server_wakes} client unparks",
            started.elapsed()
        );
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::pipeline::ring::ring;
    use crate::pipeline::sync::Arc;

    /// (b) The handler side: the producer pushes two items and wakes only if
    /// `should_wake`; the consumer waits with `wait_until`. A lost wake-up leaves the
    /// consumer parked forever, which loom reports as a deadlock.
    #[test]
    fn handler_wait_never_misses_a_push() {
        loom::model(|| {
            let (mut tx, mut rx) = ring::<u32>(2);
            let flag = Arc::new(WakeFlag::new());
            let consumer_flag = Arc::clone(&flag);
            let consumer = thread::spawn(move || {
                let mut got = Vec::new();
                while got.len() < 2 {
                    wait_until(&consumer_flag, || !rx.is_empty());
                    while let Some(v) = rx.pop() {
                        got.push(v);
                    }
                }
                got
            });
            let consumer_thread = consumer.thread().clone();
            for i in 0..2 {
                tx.push(i).unwrap();
                if flag.should_wake() {
                    consumer_thread.unpark();
                }
            }
            assert_eq!(consumer.join().unwrap(), [0, 1]);
        });
    }

    /// (d) A waker that wakes only when the sleeper wants the item (`WantFlag`): the
    /// sleeper wishes while awake, then sleeps with the usual protocol; the item must
    /// still reach it. Without the fence in `wanted`, loom finds the lost wake-up.
    #[test]
    fn a_wanted_item_always_wakes_the_sleeper() {
        loom::model(|| {
            let (mut tx, mut rx) = ring::<u32>(1);
            let flag = Arc::new(WakeFlag::new());
            let want = Arc::new(WantFlag::default());
            let sleeper = thread::current();
            let (f, w) = (Arc::clone(&flag), Arc::clone(&want));
            let waker = thread::spawn(move || {
                tx.push(7).unwrap();
                if w.wanted() && f.should_wake() {
                    sleeper.unpark();
                }
            });
            want.set(true);
            loop {
                if let Some(v) = rx.pop() {
                    assert_eq!(v, 7);
                    break;
                }
                flag.announce();
                if !rx.is_empty() {
                    flag.cancel();
                    continue;
                }
                thread::park();
                flag.cancel();
            }
            waker.join().unwrap();
        });
    }

    /// (c) The loop side: one sleeper, two rings, two wakers sharing the sleeper's flag
    /// (every handler thread wakes the one loop). The sleeper announces, re-checks every
    /// ring, then blocks (`park` stands in for `epoll_wait` on the `mio::Waker` eventfd);
    /// each waker wakes only when its `should_wake` wins.
    #[test]
    fn loop_sleep_never_misses_a_response() {
        // Unbounded, this model takes ~4 million interleavings (~15 minutes). A lost
        // wake-up here needs a single preemption (with either fence removed, loom finds the
        // deadlock at bound 1), so 4 (a few seconds) leaves a wide margin.
        // `LOOM_MAX_PREEMPTIONS` overrides it.
        let mut model = loom::model::Builder::new();
        model.preemption_bound.get_or_insert(4);
        model.check(|| {
            let flag = Arc::new(WakeFlag::new());
            let sleeper = thread::current();
            let mut rings = Vec::new();
            let mut wakers = Vec::new();
            for id in 0..2u32 {
                let (mut tx, rx) = ring::<u32>(1);
                rings.push(rx);
                let flag = Arc::clone(&flag);
                let sleeper = sleeper.clone();
                wakers.push(thread::spawn(move || {
                    tx.push(id).unwrap();
                    if flag.should_wake() {
                        sleeper.unpark();
                    }
                }));
            }
            let mut got = Vec::new();
            loop {
                for rx in &mut rings {
                    while let Some(v) = rx.pop() {
                        got.push(v);
                    }
                }
                if got.len() == 2 {
                    break;
                }
                flag.announce();
                if rings.iter().any(|rx| !rx.is_empty()) {
                    flag.cancel();
                    continue;
                }
                thread::park();
                flag.cancel();
            }
            got.sort_unstable();
            assert_eq!(got, [0, 1]);
            for w in wakers {
                w.join().unwrap();
            }
        });
    }
}
