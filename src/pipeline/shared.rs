//! The state the loop thread and the handler threads share, beside the rings: the wake
//! flags, the departures of clients, stop, and what each handler publishes for the
//! watchdogs and the counters.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crossbeam_utils::CachePadded;

use crate::pipeline::departures::Departures;
use crate::pipeline::msg::StreamBudget;
use crate::pipeline::park::{WakeFlag, WantFlag};
use crate::pipeline::stats::{self, HandlerCounters};

/// Slots in each handler's request ring. A full ring stops the loop from taking more
/// requests off sockets (backpressure), so this bounds queued work per handler.
pub(crate) const REQUEST_RING_SLOTS: usize = 256;

/// Slots in each handler's response ring: enough for every queued request's final part
/// plus streamed chunks, so a handler rarely waits for room.
pub(crate) const RESPONSE_RING_SLOTS: usize = 512;

/// State shared by the loop and every handler thread.
pub struct LoopShared {
    /// The loop's parked flag: set while it is about to block in `epoll_wait`.
    pub(crate) wake: WakeFlag,
    pub(crate) waker: mio::Waker,
    /// Set while something waits on a connection whose request is out (bytes pipelined
    /// behind it, an answer held, its close, a full ring, a graceful stop): then a final
    /// part with nothing to write wakes the loop like any other. Otherwise the loop takes
    /// such a part at its next wake (`DEFERRED_WAKE_BOUND` bounds its sleep meanwhile).
    pub(crate) quiet: WantFlag,
    /// The connections whose clients left while they had requests in flight.
    pub(crate) departures: Departures,
    /// A thread of the worker is dying (`flush_before_death`).
    dying: CachePadded<Dying>,
}

/// `LoopShared::flush_before_death`'s two counts (a process may survive a hook: a fatal
/// signal's earlier handler that recovers, and each later death asks again).
#[derive(Default)]
struct Dying {
    /// How many times a thread asked the loop for a pass that writes what the handlers
    /// finished.
    asked: AtomicU64,
    /// The count of asks the last such pass saw.
    flushed: AtomicU64,
}

impl LoopShared {
    /// The loop's shared state, awake, wanting no news of quiet connections yet.
    pub fn new(waker: mio::Waker) -> LoopShared {
        LoopShared {
            wake: WakeFlag::new(),
            waker,
            quiet: WantFlag::default(),
            departures: Departures::default(),
            dying: CachePadded::default(),
        }
    }

    /// Any thread but the loop's, as the process is about to die (a fatal signal, the
    /// app's `os._exit`): asks the loop for a pass that takes every response the handlers
    /// have pushed and writes it to its socket, and waits for that pass, at most `within`.
    /// Async-signal-safe: atomics, an eventfd write, `nanosleep`.
    pub(crate) fn flush_before_death(&self, within: std::time::Duration) {
        // Release: pairs with the loop's Acquire load in `dying`: every push this thread
        // made before is visible to the pops of the pass that sees it.
        let ask = self.dying.asked.fetch_add(1, Ordering::Release) + 1;
        let _ = self.waker.wake();
        let step = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        for _ in 0..within.as_millis() {
            // Acquire: pairs with the Release store in `flushed`.
            if self.dying.flushed.load(Ordering::Acquire) >= ask {
                return;
            }
            // SAFETY: nanosleep reads the timespec it is given, which outlives the call;
            // the remainder pointer may be null.
            unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
        }
    }

    /// Loop, at the start of a pass that takes the responses: the asks so far, if a thread
    /// is dying and waits for this pass (give it to `flushed` once they are written).
    pub(crate) fn dying(&self) -> Option<u64> {
        // Acquire: pairs with the Release `fetch_add` in `flush_before_death`.
        let asked = self.dying.asked.load(Ordering::Acquire);
        // Relaxed: only the loop stores it.
        (asked > self.dying.flushed.load(Ordering::Relaxed)).then_some(asked)
    }

    /// Loop: the pass that saw `asked` asks has written what it took.
    pub(crate) fn flushed(&self, asked: u64) {
        // Release: pairs with the Acquire load in `flush_before_death`.
        self.dying.flushed.store(asked, Ordering::Release);
    }

    /// Handler side, after pushing a response: wake the loop only if it sleeps. `true`
    /// when it did (a syscall).
    pub(crate) fn notify(&self) -> bool {
        if self.wake.should_wake() {
            // A failed eventfd write leaves the loop to its next event; nothing to do here.
            let _ = self.waker.wake();
            return true;
        }
        false
    }
}

/// State shared by the loop and one handler thread.
pub struct HandlerShared {
    /// The handler's parked flag.
    pub(crate) wake: WakeFlag,
    /// The loop is stopping: exit once the request ring is empty.
    pub(crate) stop: AtomicBool,
    /// The app took the socket of the request this handler serves (a WebSocket,
    /// `wsgi::handover`): the thread is the app's until that call returns, then it goes;
    /// the loop starts another in its place (`Handlers::adopt_websockets`). Release by the
    /// taking thread, Acquire by the loop.
    pub(crate) websocket: AtomicBool,
    /// The handler's pipeline counters (it writes them, a report reads them).
    pub(crate) counters: CachePadded<HandlerCounters>,
    /// What the loop's watchdog reads (`--timeout`, the heartbeat), kept only when `watch`.
    pub(crate) busy: BusyClock,
    /// The handler's index in the loop's list (inline mode's bridge is 0).
    pub(crate) index: usize,
    /// The handler thread's kernel id, once it runs (0 before): where the loop reads how
    /// it spends its time (`sys::SchedStat`). Relaxed: a hint.
    pub(crate) tid: std::sync::atomic::AtomicI32,
    /// Set by the handler thread while the request it serves has others queued behind it
    /// in its ring: the final part of its response then does not wake a sleeping loop
    /// (`wake_owed` records it), and the handler wakes the loop once, when its ring is
    /// empty or `LOOP_WAKE_BATCH` responses are owed. Relaxed, both: only the handler
    /// thread reads them, and the response ring's own Release/Acquire publishes the
    /// responses.
    pub(crate) defer_loop_wake: AtomicBool,
    pub(crate) wake_owed: AtomicUsize,
    /// Final parts with nothing to write pushed without a wake (`LoopShared::quiet`): they
    /// count towards `LOOP_WAKE_BATCH` with `wake_owed`, so the loop still comes by as
    /// often while it has responses to write; alone they never wake it. Relaxed: as above.
    pub(crate) quiet_owed: AtomicUsize,
    /// `--cpu-affinity adaptive`: whether the loop places itself by this handler (set once,
    /// before any request), the CPU the handler thread was on when it last took up work
    /// (`usize::MAX` before then; kept only when placing), and whether the loop runs beside
    /// it there, when its wait does not spin (`park::set_spin`). Relaxed, all: hints,
    /// nothing published with them.
    pub(crate) placing: AtomicBool,
    pub(crate) cpu: AtomicUsize,
    pub(crate) loop_beside: AtomicBool,
    /// What its streamed responses have unwritten, all together.
    pub(crate) budget: Arc<StreamBudget>,
    /// The flag of the one thread that waits inside the handler's exchange (it holds the
    /// exchange lock while it waits: `write()` for credit, or a push for ring room), and
    /// which thread that is (the handler's, or one the app started). Apart from `wake`, the
    /// handler's own idle wait: each flag has one sleeper at most, so one's cancel never
    /// erases the other's announce.
    pub(crate) exchange_wake: WakeFlag,
    pub(crate) waiter: Mutex<Option<std::thread::Thread>>,
    /// Threads in `write()` waiting for their response's stream credit (without the
    /// exchange lock: any number of them), and what they sleep on.
    credit_waiters: AtomicUsize,
    credit_lock: Mutex<()>,
    credit_returned: Condvar,
    /// Inline mode: the loop thread is running the app (`Inline::run`). A thread the app
    /// started then does not wait for credit in `write()` (the loop, which returns it, may
    /// be waiting on that thread), and the loop takes what it pushes when the app is done.
    /// Out of it, such a thread waits for credit as on a handler thread, and wakes the loop
    /// for what it pushes.
    pub(crate) app_running: AtomicBool,
    /// How long its pieces of work take, a moving average in ns (`u64::MAX` until the
    /// first is done), and when the one it is on began (`stats::mono_ns`; 0 while it
    /// waits): the handler writes them, the loop reads them to decide whether a request
    /// may queue behind the one it runs, and whether the pool should grow. Relaxed, all:
    /// hints, nothing is published with them.
    service_ns: AtomicU64,
    work_since: AtomicU64,
    /// Pieces of work in `service_ns` so far (its writer's count, read as a hint too).
    service_samples: AtomicU64,
    /// Streamed bodies it has set aside, waiting for their slow clients (its requests out
    /// that take none of its time).
    aside: AtomicU64,
}

/// When a handler began its current piece of work (a request, or a body it resumed) and
/// when it last handed the loop a message during it, as `stats::mono_ns` readings; 0 while
/// it waits. The handler writes them, the loop's sweep reads them: a body set aside for a
/// slow client is no work, so it never looks stuck.
#[derive(Debug, Default)]
pub(crate) struct BusyClock {
    /// Keep the clock at all (`--timeout` or a heartbeat): two clock reads per request.
    pub(crate) watch: bool,
    since: AtomicU64,
    progress: AtomicU64,
}

impl BusyClock {
    /// Handler: a piece of work starts now.
    pub(crate) fn start(&self) {
        if self.watch {
            let now = stats::mono_ns();
            // Relaxed, both: the loop only compares times, against its own clock.
            self.progress.store(now, Ordering::Relaxed);
            self.since.store(now, Ordering::Relaxed);
        }
    }

    /// Handler: a response message went to the loop.
    pub(crate) fn progressed(&self) {
        if self.watch {
            // Relaxed: a time for the watchdog, nothing is published with it.
            self.progress.store(stats::mono_ns(), Ordering::Relaxed);
        }
    }

    /// Handler: it is about to wait.
    pub(crate) fn idle(&self) {
        if self.watch {
            // Relaxed: as in `start`.
            self.since.store(0, Ordering::Relaxed);
        }
    }

    /// Loop: since when the handler is on its current work, and its last message then;
    /// `None` while it waits.
    pub(crate) fn read(&self) -> Option<(u64, u64)> {
        // Relaxed: see `start`.
        let since = self.since.load(Ordering::Relaxed);
        (since != 0).then(|| (since, self.progress.load(Ordering::Relaxed).max(since)))
    }
}

impl HandlerShared {
    /// A thread waits (its GIL released) until `ready`, which the loop makes true by
    /// returning stream credit or closing a connection, then calls `credits_returned`.
    ///
    /// Store-buffering again (as in `park.rs`): the waiter stores its count and then loads
    /// the credit; the loop stores the credit and then loads the count. A SeqCst fence on
    /// each side lets at least one see the other: the loop notifies, or the waiter does not
    /// sleep. The waiter re-checks while holding `credit_lock`, and the loop takes that lock
    /// before it notifies, so a notify cannot fall between the re-check and the wait.
    pub(crate) fn wait_for_credit(&self, mut ready: impl FnMut() -> bool) {
        while !ready() {
            let held = self.credit_lock.lock().unwrap_or_else(|e| e.into_inner());
            // Relaxed, then the fence: see above (it pairs with `credits_returned`'s).
            self.credit_waiters.fetch_add(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if !ready() {
                drop(
                    self.credit_returned
                        .wait(held)
                        .unwrap_or_else(|e| e.into_inner()),
                );
            }
            // Relaxed: only a count for the loop's check.
            self.credit_waiters.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The loop, after returning credit or closing a connection of this handler: wakes the
    /// threads in `wait_for_credit`, if there are any (a lock and a futex wake; nothing
    /// otherwise).
    pub(crate) fn credits_returned(&self) {
        // SeqCst fence: pairs with the one in `wait_for_credit` (store-buffering).
        fence(Ordering::SeqCst);
        // Relaxed: the fence pair decides what this load must see.
        if self.credit_waiters.load(Ordering::Relaxed) > 0 {
            drop(self.credit_lock.lock().unwrap_or_else(|e| e.into_inner()));
            self.credit_returned.notify_all();
        }
    }

    /// Handler `index`; `watch`: keep the busy clock (`--timeout` or a heartbeat is on).
    pub fn new(index: usize, watch: bool) -> HandlerShared {
        HandlerShared {
            index,
            tid: std::sync::atomic::AtomicI32::new(0),
            defer_loop_wake: AtomicBool::new(false),
            placing: AtomicBool::new(false),
            cpu: AtomicUsize::new(usize::MAX),
            loop_beside: AtomicBool::new(false),
            wake_owed: AtomicUsize::new(0),
            quiet_owed: AtomicUsize::new(0),
            budget: Arc::default(),
            exchange_wake: WakeFlag::new(),
            waiter: Mutex::new(None),
            credit_waiters: AtomicUsize::new(0),
            credit_lock: Mutex::new(()),
            credit_returned: Condvar::new(),
            app_running: AtomicBool::new(false),
            wake: WakeFlag::new(),
            stop: AtomicBool::new(false),
            websocket: AtomicBool::new(false),
            counters: CachePadded::new(HandlerCounters::default()),
            busy: BusyClock {
                watch,
                ..BusyClock::default()
            },
            service_ns: AtomicU64::new(u64::MAX),
            service_samples: AtomicU64::new(0),
            aside: AtomicU64::new(0),
            work_since: AtomicU64::new(0),
        }
    }

    /// Handler: a piece of work begins at `now` (`stats::mono_ns`), or it waits (0).
    pub(crate) fn set_work_since(&self, now: u64) {
        // Relaxed: see `service_ns`.
        self.work_since.store(now, Ordering::Relaxed);
    }

    /// Loop: when the piece of work the handler is on began, if it is on one.
    pub(crate) fn work_since(&self) -> Option<u64> {
        // Relaxed: see `service_ns`.
        Some(self.work_since.load(Ordering::Relaxed)).filter(|&t| t != 0)
    }

    /// Handler: a piece of work took `ns`; the average moves an eighth of the way.
    pub(crate) fn note_service(&self, ns: u64) {
        // Relaxed: see `service_ns`; only this thread writes it.
        let avg = match self.service_ns.load(Ordering::Relaxed) {
            u64::MAX => ns,
            avg => avg - avg / 8 + ns / 8,
        };
        self.service_ns
            .store(avg.min(u64::MAX - 1), Ordering::Relaxed);
        let n = self.service_samples.load(Ordering::Relaxed);
        self.service_samples
            .store(n.saturating_add(1), Ordering::Relaxed);
    }

    /// Handler: it holds `n` bodies set aside.
    pub(crate) fn set_aside(&self, n: usize) {
        // Relaxed: see `service_ns`.
        self.aside.store(n as u64, Ordering::Relaxed);
    }

    /// Loop: the bodies it holds set aside (`set_aside`).
    pub(crate) fn aside(&self) -> usize {
        // Relaxed: see `service_ns`.
        usize::try_from(self.aside.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// Loop: how many pieces of work the average is over (`note_service`).
    pub(crate) fn service_samples(&self) -> u64 {
        // Relaxed: see `service_ns`.
        self.service_samples.load(Ordering::Relaxed)
    }

    /// Loop: how long its pieces of work take, on average (`None` before the first).
    pub(crate) fn service(&self) -> Option<std::time::Duration> {
        // Relaxed: see `service_ns`.
        match self.service_ns.load(Ordering::Relaxed) {
            u64::MAX => None,
            ns => Some(std::time::Duration::from_nanos(ns)),
        }
    }
}
