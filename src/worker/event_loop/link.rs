//! The loop's end of each handler (its rings, its shared state, what the loop counts of
//! it), and how the loop runs (`LoopOptions`, from the configuration).

use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::http::limits::{Limits, Timeouts};
use crate::pipeline::msg::{Request, Response, StreamCredit};
use crate::pipeline::ring::{Consumer, Producer};
use crate::pipeline::shared::HandlerShared;
use crate::pipeline::stats;
use crate::worker::handler::Spawner;

/// How long a stop past its deadline waits for the handlers to close what they hold.
const HANDLER_EXIT_GRACE: Duration = Duration::from_secs(1);

/// A handler whose pieces of work take at most this long on average is quick: requests
/// may queue in its ring behind the one it runs, where handing them over costs no wake.
/// Behind a slower one they wait in the loop instead, for whichever handler is free first
/// (or one the pool starts).
const QUICK_SERVICE: Duration = Duration::from_millis(1);

/// A piece of work running longer than this is a long one, even on a quick handler:
/// nothing more queues behind it.
const LONG_WORK: Duration = Duration::from_millis(2);

/// Pieces of work the handlers finish before their pace is believed (`Handlers::pace`).
const PACE_SAMPLES: u64 = 8;

/// A piece of work this many times its handler's average is a long one (with `LONG_WORK`).
const LONG_RUN: u32 = 4;

/// While requests wait in the loop with every handler busy, how often the pool looks at
/// whether the handlers compute or wait (their threads' CPU clocks).
const GROW_WINDOW: Duration = Duration::from_millis(2);

/// Below this share of one CPU over a window, the busy handlers together were blocked
/// (on a database, a service), neither running nor ready to run: more threads serve more.
/// At or above it, one of them computes (holding the GIL, or waiting for a CPU the host
/// gives others), and a thread more would only wait for the GIL.
const WAITING_SHARE: f64 = 0.5;

/// Threads the pool starts after one window, at most.
const GROW_STEP: usize = 8;

/// After a thread could not be started (a limit on threads, memory), how long the pool
/// waits before it tries again.
const SPAWN_RETRY: Duration = Duration::from_secs(1);

/// Where the loop takes one handler's response messages from.
pub(crate) enum Responses {
    /// A handler thread's response ring.
    Ring(Consumer<Response>),
    /// Inline mode: the queue the app's responses land in on this very thread, kept by
    /// the loop's `Inline` (which, unlike the links, never crosses threads).
    Inline,
}

/// The loop's end of one handler (a thread, or inline mode's bridge on the loop thread).
pub(crate) struct HandlerLink {
    pub(crate) tx: Producer<Box<Request>>,
    pub(super) rx: Responses,
    pub(crate) shared: Arc<HandlerShared>,
    /// `None` inline: the handler is the loop thread itself.
    pub(super) join: Option<JoinHandle<()>>,
    /// Requests pushed whose final part has not come back.
    pub(super) queued: usize,
    /// Something this handler may wait for happened (ring space, stream credit).
    pub(super) wake_check: bool,
    /// `--timeout`: the start of the busy stretch already reported (once each).
    pub(super) reported: u64,
    /// When its last request out came back (the start, before any).
    idle_since: Instant,
    /// The pool asked it to go (idle above the floor): it takes no more requests, and its
    /// place is taken by the next thread the pool starts once it has gone.
    retiring: bool,
    /// Its thread's scheduler times, opened when the pool first looks at it.
    sched: Option<crate::sys::SchedStat>,
    /// A WebSocket upgrade is out on it: nothing is queued behind it (the app may take its
    /// socket and keep the thread for as long as the WebSocket lives).
    upgrade_out: bool,
    /// Its app took a WebSocket: it left the pool (`Handlers::adopt_websockets`).
    websocket: bool,
}

impl HandlerLink {
    pub(crate) fn new(
        tx: Producer<Box<Request>>,
        rx: Responses,
        shared: Arc<HandlerShared>,
        join: Option<JoinHandle<()>>,
    ) -> HandlerLink {
        HandlerLink {
            tx,
            rx,
            shared,
            join,
            queued: 0,
            wake_check: false,
            reported: 0,
            idle_since: Instant::now(),
            retiring: false,
            sched: None,
            upgrade_out: false,
            websocket: false,
        }
    }

    /// How long its thread has run or been ready to run (waiting for a CPU), and whether
    /// it is ready to run now; what is left of the wall time it was blocked: on I/O, or on
    /// the GIL. Without the scheduler's times (`schedstat`), its CPU time.
    fn active(&mut self) -> (Duration, bool) {
        let join = self.join.as_ref();
        if self.sched.is_none() {
            // Relaxed: see `HandlerShared::tid`.
            let tid = self.shared.tid.load(Ordering::Relaxed);
            self.sched = (tid > 0)
                .then(|| crate::sys::SchedStat::open(tid).ok())
                .flatten();
        }
        match self.sched.as_ref().map(|s| s.read()) {
            Some(Ok(s)) => (s.run + s.wait, s.runnable),
            _ => {
                let cpu = join.and_then(|j| stats::thread_cpu(j.as_pthread_t()));
                (cpu.unwrap_or_default(), false)
            }
        }
    }

    /// Whether the piece of work it is on began more than `limit` before `now_ns`.
    pub(super) fn stuck(&self, now_ns: u64, limit: Duration) -> bool {
        self.shared
            .work_since()
            .is_some_and(|since| Duration::from_nanos(now_ns.saturating_sub(since)) > limit)
    }

    /// Whether a request may go to it now: it is idle or waiting for the loop, or quick and
    /// not on a long piece of work (`QUICK_SERVICE`, `LONG_WORK`); always inline, where the
    /// loop is the handler.
    fn takes(&self, now_ns: u64) -> bool {
        if self.retiring || self.upgrade_out {
            return false;
        }
        if self.queued == 0 || self.join.is_none() {
            return true;
        }
        let quick = self.shared.service().is_some_and(|s| s <= QUICK_SERVICE);
        match self.shared.work_since() {
            // Not on a piece of work: quick, it is about to take what it was given; or,
            // with every request given to it taken, it waits for the loop (ring room, a
            // slow client's credit for a body it set aside) and takes the next at once.
            None => quick || self.tx.is_drained(),
            // Quick, unless the piece of work it is on has run long.
            Some(since) => quick && Duration::from_nanos(now_ns.saturating_sub(since)) <= LONG_WORK,
        }
    }

    /// Loop side, after publishing work or room: unpark the handler only if it sleeps.
    /// `true` when it did (a syscall).
    pub(super) fn notify(&self) -> bool {
        let Some(join) = &self.join else {
            return false;
        };
        let mut woke = false;
        if self.shared.wake.should_wake() {
            join.thread().unpark();
            woke = true;
        }
        if self.shared.exchange_wake.should_wake() {
            let waiter = self
                .shared
                .waiter
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(t) = waiter {
                t.unpark();
                woke = true;
            }
        }
        woke
    }
}

/// The loop's ends of its handlers, and the requests out on them.
pub(super) struct Handlers {
    pub(crate) links: Vec<HandlerLink>,
    /// Requests pushed, over every handler, whose final part has not come back.
    pub(crate) queued: usize,
    /// Handlers with a WebSocket upgrade out (`HandlerLink::upgrade_out`): only while there
    /// is one may an app take a socket, so only then does a pass look for it.
    upgrades: usize,
    /// The threads past `--blocking-threads` the loop may start, when it may.
    pool: Option<Pool>,
}

/// The handler pool's growth: past the floor (`--blocking-threads`), up to the most
/// (`--max-blocking-threads`), a thread is started when requests wait in the loop while
/// every handler holds one and none uses the CPU; one idle for `idle` goes
/// (`--blocking-threads-idle-timeout`).
struct Pool {
    spawner: Spawner,
    floor: usize,
    max: usize,
    idle: Duration,
    /// `--max-websockets`: threads the app may hold with WebSockets, each replaced.
    max_websockets: usize,
    /// While requests wait with every handler on a piece of work: when the window began,
    /// which pieces of work they were on (their busy clocks' starts, added up), and their
    /// active time then (`HandlerLink::active`).
    window: Option<Window>,
    /// The last window found the handlers computing: more threads would not serve more.
    /// Until a window says so, the pool counts on growing (`Handlers::pace`).
    computing: bool,
}

#[derive(Clone, Copy)]
struct Window {
    at: Instant,
    work: u64,
    active: Duration,
}

impl Handlers {
    /// `spawner`, with `max` above the links there are: the pool may grow to `max`, and
    /// a thread above them idle for `idle` goes; a thread whose app took a WebSocket is
    /// replaced, up to `max_websockets` of them.
    pub(super) fn new(
        links: Vec<HandlerLink>,
        spawner: Option<Spawner>,
        max: usize,
        idle: Duration,
        max_websockets: usize,
    ) -> Handlers {
        let floor = links.len();
        let pool = spawner.map(|spawner| Pool {
            spawner,
            floor,
            max: max.max(floor),
            idle,
            max_websockets,
            window: None,
            computing: false,
        });
        Handlers {
            links,
            queued: 0,
            upgrades: 0,
            pool,
        }
    }

    /// The handler a request goes to: `pinned` if the connection has requests out (they
    /// stay on one handler, so their responses come back in order), else the least loaded;
    /// `None` when it may not take it now (`HandlerLink::takes`): the loop holds it.
    /// `now_ns`: the pass's `stats::mono_ns`.
    pub(super) fn choose(&self, pinned: Option<usize>, now_ns: u64) -> Option<usize> {
        if let Some(h) = pinned {
            return self.links[h].takes(now_ns).then_some(h);
        }
        let best = self.least_loaded();
        self.links[best].takes(now_ns).then_some(best)
    }

    /// The live handler with the fewest requests out (the floor's threads never go, so
    /// there is one).
    pub(super) fn least_loaded(&self) -> usize {
        let mut best = 0;
        for (i, h) in self.links.iter().enumerate() {
            if !h.retiring && (self.links[best].retiring || h.queued < self.links[best].queued) {
                best = i;
            }
        }
        best
    }

    /// How fast the handlers finish requests, for admission: their pieces of work's average
    /// length, and how many handlers take them at once. Those are the handlers not asked
    /// to go and not on a piece of work longer than `stuck` (one stuck on a request takes
    /// nothing until it ends), or the pool's most while it may grow and was not seen
    /// computing (threads it starts serve the waiting). `None` before the handlers
    /// finished `PACE_SAMPLES` pieces of work (one slow request says little of the next).
    /// `now`: the pass's `stats::mono_ns`.
    pub(super) fn pace(&self, stuck: Duration, now: u64) -> Option<(Duration, usize)> {
        let (mut sum, mut known, mut able, mut samples) = (0u128, 0u32, 0usize, 0u64);
        for h in self.links.iter().filter(|h| !h.retiring) {
            if let Some(s) = h.shared.service() {
                sum += s.as_nanos();
                known += 1;
                samples += h.shared.service_samples();
            }
            able += usize::from(!h.stuck(now, stuck));
        }
        if known == 0 || samples < PACE_SAMPLES {
            return None;
        }
        let capacity = match &self.pool {
            Some(p) if !p.computing && p.max > p.floor => p.max,
            _ => able,
        };
        let avg = u64::try_from(sum / u128::from(known)).unwrap_or(u64::MAX);
        Some((Duration::from_nanos(avg), capacity))
    }

    /// Of `pinned` (the connection's handler) or else every live handler, the least loaded
    /// that a held request may queue behind: one that has taken everything given to it
    /// (the request is next) and whose piece of work has not run `limit` (it is not on a
    /// slow request). `None` when none may: the request waits in the loop.
    pub(super) fn next_in_line(
        &self,
        pinned: Option<usize>,
        limit: Duration,
        now: u64,
    ) -> Option<usize> {
        let may = |h: &HandlerLink| {
            !h.retiring && !h.upgrade_out && h.tx.is_drained() && !h.stuck(now, limit)
        };
        match pinned {
            Some(h) => may(&self.links[h]).then_some(h),
            None => (self.links.iter().enumerate())
                .filter(|(_, h)| may(h))
                .min_by_key(|(_, h)| h.queued)
                .map(|(i, _)| i),
        }
    }

    /// Whether every live handler thread is on a long piece of work: longer than
    /// `LONG_WORK` and than `LONG_RUN` times its average (a request that may run for a
    /// while yet: another worker would serve a new connection sooner). Never inline.
    pub(super) fn all_on_long_work(&self, now: u64) -> bool {
        self.links.iter().filter(|h| !h.retiring).all(|h| {
            let limit = h
                .shared
                .service()
                .map_or(LONG_WORK, |s| (s * LONG_RUN).max(LONG_WORK));
            h.join.is_some() && h.stuck(now, limit)
        })
    }

    /// Requests out on the handlers that are streamed bodies set aside for slow clients:
    /// they take none of the handlers' time.
    pub(super) fn aside(&self) -> usize {
        self.links.iter().map(|h| h.shared.aside()).sum()
    }

    /// Handler threads running (or starting), not counting those asked to go.
    pub(super) fn live(&self) -> usize {
        self.links.iter().filter(|h| !h.retiring).count()
    }

    /// Requests wait in the loop (`held` of them): if every handler was on one piece of
    /// work through the last window and all of them together were active (running, or
    /// ready to run) for less than `WAITING_SHARE` of it, starts threads for them (up to
    /// the most, `GROW_STEP` at a time). The number started.
    pub(super) fn grow(&mut self, held: usize, now: Instant) -> usize {
        let Some(pool) = self.pool.as_mut() else {
            return 0;
        };
        // Each handler's current piece of work (a handler between two, or waiting for the
        // loop to give it one, is not waiting on the app's I/O).
        let (mut busy, mut work) = (0, Some(0u64));
        for h in self.links.iter().filter(|h| !h.retiring) {
            busy += 1;
            let since = h.shared.work_since();
            work = work.zip(since).map(|(w, s)| w.wrapping_add(s));
        }
        let (true, Some(work)) = (held > 0 && busy < pool.max, work) else {
            pool.window = None;
            return 0;
        };
        if pool
            .window
            .is_some_and(|w| now.saturating_duration_since(w.at) < GROW_WINDOW)
        {
            return 0;
        }
        let (mut active, mut runnable) = (Duration::ZERO, false);
        for h in self.links.iter_mut().filter(|h| !h.retiring) {
            let (a, r) = h.active();
            active += a;
            runnable |= r;
        }
        let next = Window {
            at: now,
            work,
            active,
        };
        let Some(last) = pool.window.replace(next).filter(|w| w.work == work) else {
            // A handler moved to other work: the window begins again.
            return 0;
        };
        let wall = now.saturating_duration_since(last.at).as_secs_f64();
        let share = active.saturating_sub(last.active).as_secs_f64() / wall.max(1e-9);
        // One that is ready to run computes (its wait for a CPU shows only once it runs).
        pool.computing = share >= WAITING_SHARE || runnable;
        if pool.computing {
            return 0;
        }
        let n = held.min(pool.max - busy).min(GROW_STEP);
        let mut started = 0;
        for _ in 0..n {
            match self.start_one() {
                Ok(()) => started += 1,
                Err(e) => {
                    crate::log::warning!(
                        "cannot start another handler thread: {e} (trying again in {} s)",
                        SPAWN_RETRY.as_secs()
                    );
                    if let Some(pool) = self.pool.as_mut() {
                        // The next window begins only after the pause.
                        pool.window = Some(Window {
                            at: now + SPAWN_RETRY,
                            work: 0,
                            active: Duration::ZERO,
                        });
                    }
                    break;
                }
            }
        }
        started
    }

    /// When the pool next looks at its handlers, while requests wait.
    pub(super) fn next_look(&self) -> Option<Instant> {
        Some(self.pool.as_ref()?.window?.at + GROW_WINDOW)
    }

    /// Starts a handler thread, in the place of one that went if there is one.
    fn start_one(&mut self) -> std::io::Result<()> {
        let Some(pool) = self.pool.as_ref() else {
            return Ok(());
        };
        let gone = self.links.iter().position(|h| {
            h.retiring && h.queued == 0 && h.join.as_ref().is_some_and(|j| j.is_finished())
        });
        let idx = gone.unwrap_or(self.links.len());
        let s = pool.spawner.spawn(idx)?;
        let link = HandlerLink::new(s.tx, Responses::Ring(s.rx), s.shared, Some(s.join));
        if idx == self.links.len() {
            self.links.push(link);
        } else if let Some(join) = std::mem::replace(&mut self.links[idx], link).join {
            let _ = join.join();
        }
        Ok(())
    }

    /// Asks the threads above the floor idle for the pool's `idle` to go. The number asked.
    pub(super) fn retire_idle(&mut self, now: Instant) -> usize {
        let Some(pool) = self.pool.as_ref() else {
            return 0;
        };
        let mut asked = 0;
        // Never below the floor (a thread of the floor may have left with a WebSocket).
        let mut live = self.links.iter().filter(|h| !h.retiring).count();
        for h in self.links.iter_mut().skip(pool.floor) {
            if h.retiring
                || h.queued > 0
                || now.saturating_duration_since(h.idle_since) < pool.idle
                || live <= pool.floor
            {
                continue;
            }
            live -= 1;
            h.retiring = true;
            // Release: pairs with the handler's Acquire load of `stop` after it wakes; it
            // leaves once its ring is empty.
            h.shared.stop.store(true, Ordering::Release);
            if let Some(join) = &h.join {
                join.thread().unpark();
            }
            asked += 1;
        }
        asked
    }

    /// Handlers whose app took a WebSocket (`HandlerShared::websocket`) leave the pool: no
    /// request goes to them any more, and each goes once its call returns; a thread is
    /// started in the place of each, while fewer than `--max-websockets` are held so.
    /// (started, refused): threads started, and WebSockets past the bound, left holding
    /// their threads with none started for them.
    pub(super) fn adopt_websockets(&mut self) -> (usize, usize) {
        let (mut started, mut refused) = (0, 0);
        let Some(max) = self.pool.as_ref().map(|p| p.max_websockets) else {
            return (0, 0);
        };
        if self.upgrades == 0 {
            return (0, 0);
        }
        for i in 0..self.links.len() {
            let h = &mut self.links[i];
            // Acquire: pairs with the Release in `HandOver::socket`.
            if h.websocket || !h.shared.websocket.load(Ordering::Acquire) {
                continue;
            }
            h.websocket = true;
            h.retiring = true;
            // Release: pairs with the handler's Acquire load of `stop`: it leaves once the
            // app's call returns (nothing is queued behind a WebSocket upgrade).
            h.shared.stop.store(true, Ordering::Release);
            let held = self
                .links
                .iter()
                .filter(|h| h.websocket && !h.join.as_ref().is_some_and(|j| j.is_finished()))
                .count();
            if held > max {
                refused += 1;
                continue;
            }
            match self.start_one() {
                Ok(()) => started += 1,
                Err(e) => crate::log::warning!(
                    "cannot start a handler thread in the place of one a WebSocket holds: {e}"
                ),
            }
        }
        (started, refused)
    }

    /// A handler thread's response ring holds a message.
    pub(super) fn any_ring_ready(&self) -> bool {
        self.links.iter().any(|h| match &h.rx {
            Responses::Ring(rx) => !rx.is_empty(),
            Responses::Inline => false,
        })
    }

    /// Pushes a request that will not be served (its client left) into the least loaded
    /// ring with room, whatever the handlers are doing: the handler only logs it. `None`
    /// when every ring is full; else whether a handler was woken.
    pub(super) fn push_anywhere(&mut self, mut req: Box<Request>) -> Option<bool> {
        let mut order: Vec<usize> = (0..self.links.len()).collect();
        order.sort_by_key(|&i| self.links[i].queued);
        for h in order {
            match self.push(h, req) {
                Ok(woke) => return Some(woke),
                Err(back) => req = back,
            }
        }
        None
    }

    /// Pushes a request into handler `h`'s ring; `Err` gives it back when the ring is
    /// full. `Ok(true)` when the handler was woken (a syscall).
    pub(super) fn push(&mut self, h: usize, req: Box<Request>) -> Result<bool, Box<Request>> {
        let link = &mut self.links[h];
        let websocket = req.head.websocket;
        link.tx.push(req)?;
        if websocket && !link.upgrade_out {
            link.upgrade_out = true;
            self.upgrades += 1;
        }
        link.queued += 1;
        self.queued += 1;
        Ok(link.notify())
    }

    /// Handler `h` handed back a request's final part.
    pub(super) fn finished_one(&mut self, h: usize, now: Instant) {
        let link = &mut self.links[h];
        link.queued -= 1;
        if link.queued == 0 {
            link.idle_since = now;
            if std::mem::take(&mut link.upgrade_out) {
                self.upgrades -= 1;
            }
        }
        self.queued -= 1;
    }

    /// Something handler `h` may wait for happened: it is looked at (`notify_marked`).
    pub(super) fn mark(&mut self, h: usize) {
        if let Some(link) = self.links.get_mut(h) {
            link.wake_check = true;
        }
    }

    /// `n` bytes of a stream were written (or dropped): back to its credit, and its
    /// handler looks at it.
    pub(super) fn credit_returned(&mut self, c: Arc<StreamCredit>, n: usize) {
        c.returned(n);
        self.mark(c.handler());
    }

    /// Wakes the handlers that may wait for what this pass did (ring room, stream credit,
    /// a closed connection), each only if it sleeps. The number woken.
    pub(super) fn notify_marked(&mut self) -> u64 {
        let mut woken = 0;
        for h in &mut self.links {
            if !std::mem::take(&mut h.wake_check) {
                continue;
            }
            woken += u64::from(h.notify());
            h.shared.credits_returned();
        }
        woken
    }

    /// Handlers on one piece of work for longer than `limit` not reported before: their
    /// threads' names, how long, and their pthreads (`--timeout`).
    pub(super) fn newly_stuck(
        &mut self,
        limit: Duration,
    ) -> Vec<(String, Duration, libc::pthread_t)> {
        let now = stats::mono_ns();
        let mut stuck = Vec::new();
        for link in &mut self.links {
            let (Some((since, _)), Some(join)) = (link.shared.busy.read(), &link.join) else {
                continue;
            };
            let ran = Duration::from_nanos(now.saturating_sub(since));
            if link.reported == since || ran <= limit {
                continue;
            }
            link.reported = since;
            let name = join.thread().name().unwrap_or("m0s-handler").to_string();
            stuck.push((name, ran, join.as_pthread_t()));
        }
        stuck
    }

    /// Whether a handler has been on one piece of work without handing back a response
    /// message for longer than `limit` (what the systemd watchdog is fed on).
    pub(super) fn any_without_progress(&self, limit: Duration) -> bool {
        let now = stats::mono_ns();
        self.links.iter().any(|h| {
            h.shared.busy.read().is_some_and(|(_, progress)| {
                Duration::from_nanos(now.saturating_sub(progress)) > limit
            })
        })
    }

    /// Each handler's name, counters and thread, for `stats::report`.
    pub(super) fn report_entries(
        &self,
    ) -> Vec<(String, &stats::HandlerCounters, Option<libc::pthread_t>)> {
        self.links
            .iter()
            .map(|h| match &h.join {
                Some(join) => {
                    let name = join.thread().name().unwrap_or("m0s-handler").to_string();
                    (name, &*h.shared.counters, Some(join.as_pthread_t()))
                }
                None => (
                    "m0s-loop (inline app)".to_string(),
                    &*h.shared.counters,
                    None,
                ),
            })
            .collect()
    }

    /// Stops the handlers: joined when `wait` (before the deadline) and nothing is out;
    /// else each gets a moment to give up what it holds (closing the bodies it set aside
    /// or was producing, as PEP 3333 asks) before the process exits under it, and a
    /// handler stuck inside the app is not waited for longer.
    pub(super) fn stop(&mut self, wait: bool) {
        for h in &self.links {
            // Release: pairs with the handler's Acquire load of `stop` after it wakes.
            h.shared.stop.store(true, Ordering::Release);
            if let Some(join) = &h.join {
                join.thread().unpark();
            }
        }
        if wait && self.queued == 0 {
            for join in self.links.drain(..).filter_map(|h| h.join) {
                let _ = join.join();
            }
            return;
        }
        let until = Instant::now() + HANDLER_EXIT_GRACE;
        while Instant::now() < until
            && self
                .links
                .iter()
                .any(|h| h.join.as_ref().is_some_and(|j| !j.is_finished()))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// How the loop runs, from the configuration.
#[derive(Clone, Debug, Default)]
pub(crate) struct LoopOptions {
    /// Other workers accept from the same socket.
    pub(crate) shared_listener: bool,
    pub(crate) limits: Limits,
    /// `--max-body-size`.
    pub(crate) max_body_bytes: u64,
    /// `--body-buffer-size`: larger bodies spool to a temporary file.
    pub(crate) body_buffer: usize,
    /// `--max-connections`.
    pub(crate) max_connections: usize,
    pub(crate) timeouts: Timeouts,
    /// `--max-requests` (with its jitter drawn): after this many the worker asks the master
    /// to be replaced; 0 for never.
    pub(crate) max_requests: u64,
    /// `--timeout`.
    pub(crate) timeout: Option<Duration>,
    /// The systemd watchdog through the master: how often it wants a heartbeat.
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) stats: bool,
    pub(crate) static_response: bool,
    /// `--graceful-timeout`: how long a graceful stop waits for requests in flight.
    pub(crate) graceful_timeout: Duration,
    /// `--root-path` when requests outside it get 404 from the loop.
    pub(crate) root_path: Option<String>,
    /// Per listener (by index): the TLS configuration its connections speak, if any.
    pub(crate) tls: Vec<Option<std::sync::Arc<rustls::ServerConfig>>>,
    /// `--proxy-protocol`: the peers that may send the header (and so connect at all).
    pub(crate) proxy_protocol: Option<crate::http::trusted::Trusted>,
    /// `--cpu-affinity adaptive`.
    pub(crate) adaptive_affinity: bool,
    /// `--max-blocking-threads`: the most handler threads the pool grows to.
    pub(crate) max_handlers: usize,
    /// `--blocking-threads-idle-timeout`: how long a thread above the floor may idle.
    pub(crate) handler_idle: Duration,
    /// `--max-websockets`: threads held by WebSockets that are replaced.
    pub(crate) max_websockets: usize,
    /// `--max-queue-wait` (`None`: off).
    pub(crate) max_queue_wait: Option<Duration>,
    /// `--idle-poll`.
    pub(crate) idle_poll: Option<Duration>,
}
