//! The loop thread (`m0s-loop`): one `mio::Poll` that accepts, reads, parses, hands
//! requests to the handler threads' rings, and writes their responses. It never runs Python
//! (except in inline mode, `inline.rs`, where it is also the only handler) and never blocks
//! except in `Poll::poll`.
//!
//! Waiting follows the park-only-if-parked protocol (`park.rs`): the loop polls without a
//! timeout only after it has announced that it will sleep and re-checked every response
//! ring, so a handler wakes it (an eventfd write through `mio::Waker`) only when it really
//! sleeps; at load the hand-off costs no syscall.

mod accept;
mod drain;
mod link;
mod timeouts;

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use pyo3::Python;

use crate::http::date::DateCache;
use crate::http::limits::{Limits, Timeouts};
use crate::log;
use crate::pipeline::msg::{ConnRef, Part, Request, Response, StreamCredit};
use crate::pipeline::shared::LoopShared;
use crate::pipeline::stats::{self, LoopCounters};
use crate::sys::ipc::Status;
use crate::sys::listen::{Listener, MAX_LISTENERS};
use crate::sys::signals::SignalPipe;
use crate::worker::conn::{Conn, Effects, Next, ReadCtx, Written};
use crate::worker::inline::{Inline, InlineSetup};
use crate::worker::placement::{Move, Placement, Reading, FOLLOW_EVERY, IDLE_GAP};
use accept::{AcceptErrors, ACCEPT_BATCH_ALONE, ACCEPT_BATCH_SHARED};
pub use link::{HandlerLink, LoopOptions, Responses};
use timeouts::{beat_every, sweep_interval};

/// `--metrics-port`'s listener.
const METRICS: Token = Token(0);
/// Most connections to the metrics port one worker holds (outside `--max-connections`).
const METRICS_MAX_CONNECTIONS: usize = 16;
const WAKER: Token = Token(1);
const SIGNALS: Token = Token(2);
/// Listeners take tokens `FIRST_LISTENER..FIRST_LISTENER + MAX_LISTENERS`, connections
/// the tokens from `FIRST_CONN` on.
const FIRST_LISTENER: usize = 3;
const FIRST_CONN: usize = FIRST_LISTENER + MAX_LISTENERS;
/// A connection's token is `FIRST_CONN` plus its slot in the low half, and its generation
/// in the high half: an event taken before its connection closed is then never applied to
/// another accepted into the same slot before that event is handled (a pass may close one
/// while it serves the response rings, then accept into its slot).
const SLOT_BITS: u32 = usize::BITS / 2;
/// Slots a worker may have: each slot's token must keep clear of the generation's bits,
/// and each has its word in the departures.
const MAX_SLOTS: usize = {
    let tokens = (1 << SLOT_BITS) - FIRST_CONN;
    let words = crate::pipeline::departures::Departures::CAPACITY;
    if tokens < words {
        tokens
    } else {
        words
    }
};

/// The token a connection is registered with.
fn conn_token(r: ConnRef) -> Token {
    Token(FIRST_CONN + r.slot as usize + ((r.gen as usize) << SLOT_BITS))
}

/// The slot a connection's token names, and whether `gen` (the slot's generation now) is
/// the one it was registered with (the part of it the token holds).
fn token_slot(t: usize, gen: impl FnOnce(usize) -> Option<u32>) -> Option<u32> {
    let n = t - FIRST_CONN;
    let slot = n & ((1 << SLOT_BITS) - 1);
    let now = gen(slot)?;
    (((now as usize) << SLOT_BITS) >> SLOT_BITS == n >> SLOT_BITS).then_some(slot as u32)
}

/// How long a stop past its deadline waits for the handlers to close what they hold.
const HANDLER_EXIT_GRACE: Duration = Duration::from_secs(1);

/// Readiness events taken per `epoll_wait` (the rest stay ready for the next pass). A
/// pass reads its requests, serves them, then writes their responses; inline, at 256
/// busy connections, passes of at most 64 gave the client its first responses sooner and
/// cost the loop less kernel time a request than passes of every ready connection
/// (BENCHMARKS.md, "the app's side of a request, cheaper").
const EVENTS_PER_POLL: usize = 64;

/// Room a connection's read buffer has beyond the largest head (`--max-header-size`), for
/// pipelined bytes behind it.
const READ_BUFFER_SLACK_BYTES: usize = 16 * 1024;

/// How long a closing connection may keep sending before it is dropped (lingering close).
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest the loop sleeps while a request is out: a final part a handler pushed
/// without waking it (more requests behind it, or nothing to write) waits at most this long.
/// Longer than a scheduler tick on purpose: a timer that is the CPU's earliest is
/// reprogrammed in hardware at every sleep, which measured 9 µs a sleep in this VM with a
/// 1 ms bound (hello at 16 connections lost 7 %; BENCHMARKS.md, "deferred wake").
const DEFERRED_WAKE_BOUND: Duration = Duration::from_millis(20);

struct Slot {
    gen: u32,
    conn: Option<Box<Conn>>,
}

pub struct EventLoop {
    poll: Poll,
    /// Every socket this worker accepts on (`--bind`, repeatable); empty once stopping.
    listeners: Vec<Listener>,
    signals: SignalPipe,
    shared: Arc<LoopShared>,
    handlers: Vec<HandlerLink>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    conns: usize,
    /// Connections with a parsed request that found every ring full.
    stalled: VecDeque<ConnRef>,
    /// Connections whose last in-flight response completed: parse what they buffered.
    resume: Vec<u32>,
    /// Connections with new bytes to write, flushed once per pass (batching pipelined
    /// responses into one `writev`).
    dirty: Vec<u32>,
    lingering: VecDeque<(Instant, ConnRef)>,
    limits: Limits,
    max_body_bytes: u64,
    body_buffer: usize,
    read_buffer_max: usize,
    max_connections: usize,
    timeouts: Timeouts,
    max_requests: u64,
    timeout: Option<Duration>,
    /// The systemd watchdog's heartbeat period, when there is one.
    watchdog: Option<Duration>,
    next_heartbeat: Instant,
    /// The write end of the status pipe to the master ("M": replace me).
    status_pipe: Option<std::os::fd::OwnedFd>,
    /// The access log's sink, reopened on SIGUSR1.
    access_log: Option<Arc<crate::access_log::AccessLog>>,
    /// This pass's clock reading (one `clock_gettime` per pass, for the timeouts).
    now: Instant,
    sweep_every: Duration,
    next_sweep: Instant,
    date: DateCache,
    deadline: Option<Instant>,
    total_queued: usize,
    /// The last accept failed for lack of resources: retry after a close.
    accept_blocked: bool,
    /// Connections taken per accept pass (`ACCEPT_BATCH_SHARED` when workers share the
    /// socket, so each takes its turn).
    accept_batch: usize,
    /// The last accept pass stopped at its batch, not at `WouldBlock`.
    accept_more: bool,
    /// A graceful stop: when it began, and when idle connections are next looked at for
    /// the end of their grace (`DRAIN_IDLE_GRACE`).
    drain_started: Option<Instant>,
    drain_check_at: Option<Instant>,
    counters: LoopCounters,
    /// `--stats`: also time the waits, and report at exit.
    stats: bool,
    /// `--static-response`: the loop answers every request itself (its ceiling).
    static_response: bool,
    /// `--idle-poll`: how long the loop polls before it sleeps with no request out.
    idle_poll: Option<Duration>,
    /// The loop's last wake-up brought work (events, or responses pushed while it slept),
    /// so the next may come soon: only then does `--idle-poll` poll before the sleep. A
    /// sleep that ended on its timeout (the sweep's heartbeat, a lingering close) does not,
    /// so that an idle worker's timers do not each start a window.
    idle_poll_armed: bool,
    /// `--root-path`, when the loop answers requests outside it with 404.
    root_path: Option<String>,
    /// Per listener: the TLS configuration its connections speak, if any.
    tls: Vec<Option<Arc<rustls::ServerConfig>>>,
    /// `--proxy-protocol`: the peers that may send the header.
    proxy_protocol: Option<crate::http::trusted::Trusted>,
    graceful_timeout: Duration,
    /// Inline mode, until `run` builds it on this thread.
    inline_setup: Option<InlineSetup>,
    /// Inline mode: the app's side, run between passes.
    inline: Option<Inline>,
    /// `--cpu-affinity adaptive` (with one handler thread, on more than one CPU), and
    /// `/proc/stat` held open for it.
    placement: Option<Placement>,
    proc_stat: Option<crate::sys::ProcStat>,
    /// While the loop runs beside its handler: when it next looks where that runs.
    follow_at: Instant,
    /// How long the loop slept since the placement's last reading, in sleeps of
    /// `IDLE_GAP` or more with no request at the handler (`Reading::idle`).
    idle: Duration,
    /// `--metrics-port`: the listener scrapes come to (until a stop), and the loop's own
    /// section of the counters.
    metrics_listener: Option<Listener>,
    metrics_region: Option<Arc<crate::metrics::Region>>,
    metrics: Option<crate::metrics::Recorder>,
    /// Of `conns`, those that came to the metrics port.
    metrics_conns: usize,
    /// Of `conns`, those of the app's ports in their lingering close.
    lingering_conns: usize,
    accept_errors: AcceptErrors,
    /// What a closed connection's descriptor holds while its socket is lent to a handler
    /// (an unconnected Unix socket: writes to it fail).
    placeholder: std::os::fd::OwnedFd,
    /// Descriptor numbers of closed connections whose sockets are lent, by connection:
    /// each is freed when the lent request's final part comes back.
    reserved: Vec<(ConnRef, std::os::fd::OwnedFd)>,
}

impl EventLoop {
    pub fn new(
        poll: Poll,
        mut listeners: Vec<Listener>,
        mut signals: SignalPipe,
        shared: Arc<LoopShared>,
        handlers: Vec<HandlerLink>,
        inline: Option<InlineSetup>,
        opts: LoopOptions,
    ) -> io::Result<EventLoop> {
        let threaded = inline.is_none() && !handlers.is_empty();
        let (placement, proc_stat) = match handlers.as_slice() {
            [handler] if opts.adaptive_affinity && threaded && !opts.static_response => {
                adaptive_placement(handler)
            }
            _ => (None, None),
        };
        let registry = poll.registry();
        if listeners.len() > MAX_LISTENERS {
            return Err(io::Error::other(format!(
                "more than {MAX_LISTENERS} listeners"
            )));
        }
        for (i, listener) in listeners.iter_mut().enumerate() {
            let token = Token(FIRST_LISTENER + i);
            match listener {
                Listener::Tcp(l) => registry.register(l, token, Interest::READABLE)?,
                Listener::Unix(l, ..) => registry.register(l, token, Interest::READABLE)?,
            }
        }
        registry.register(&mut signals.read, SIGNALS, Interest::READABLE)?;
        Ok(EventLoop {
            poll,
            listeners,
            signals,
            shared,
            handlers,
            slots: Vec::new(),
            free: Vec::new(),
            conns: 0,
            stalled: VecDeque::new(),
            resume: Vec::new(),
            dirty: Vec::new(),
            lingering: VecDeque::new(),
            limits: opts.limits,
            max_body_bytes: opts.max_body_bytes,
            body_buffer: opts.body_buffer,
            read_buffer_max: opts.limits.max_head + READ_BUFFER_SLACK_BYTES,
            max_connections: opts.max_connections.max(1),
            timeouts: opts.timeouts,
            max_requests: opts.max_requests,
            timeout: opts.timeout,
            watchdog: opts.heartbeat,
            next_heartbeat: Instant::now(),
            status_pipe: None,
            access_log: None,
            now: Instant::now(),
            sweep_every: sweep_interval(&opts.timeouts, opts.timeout, beat_every(opts.heartbeat)),
            next_sweep: Instant::now(),
            date: DateCache::new(),
            deadline: None,
            total_queued: 0,
            accept_blocked: false,
            accept_batch: if opts.shared_listener {
                ACCEPT_BATCH_SHARED
            } else {
                ACCEPT_BATCH_ALONE
            },
            accept_more: false,
            drain_started: None,
            drain_check_at: None,
            counters: LoopCounters::new(),
            stats: opts.stats,
            static_response: opts.static_response,
            idle_poll: opts.idle_poll,
            idle_poll_armed: false,
            root_path: opts.root_path.clone(),
            tls: opts.tls.clone(),
            proxy_protocol: opts.proxy_protocol.clone(),
            graceful_timeout: opts.graceful_timeout,
            placement,
            follow_at: Instant::now(),
            idle: Duration::ZERO,
            proc_stat,
            inline_setup: inline,
            inline: None,
            metrics_listener: None,
            metrics_region: None,
            metrics: None,
            metrics_conns: 0,
            lingering_conns: 0,
            accept_errors: AcceptErrors::default(),
            // An unbound, unconnected datagram socket: every `send` to it fails.
            placeholder: std::os::unix::net::UnixDatagram::unbound()?.into(),
            reserved: Vec::new(),
        })
    }

    /// `--metrics-port`: serve scrapes from `listener`, out of `region` (the counters every
    /// worker shares, if this one could map them), and count into `recorder` (the loop's
    /// own section of them, if this worker has a slot).
    pub fn set_metrics(
        &mut self,
        mut listener: Listener,
        region: Option<Arc<crate::metrics::Region>>,
        recorder: Option<crate::metrics::Recorder>,
    ) -> io::Result<()> {
        match &mut listener {
            Listener::Tcp(l) => self
                .poll
                .registry()
                .register(l, METRICS, Interest::READABLE)?,
            Listener::Unix(l, ..) => {
                self.poll
                    .registry()
                    .register(l, METRICS, Interest::READABLE)?
            }
        }
        self.metrics_listener = Some(listener);
        self.metrics_region = region;
        self.metrics = recorder;
        Ok(())
    }

    /// Runs until a graceful stop completes (or its deadline passes); stops the handlers.
    /// `ready` hears once that the loop is set up (or why it could not be), before it
    /// serves anything.
    pub fn run(mut self, ready: impl FnOnce(Result<(), String>)) {
        let Some(setup) = self.inline_setup.take() else {
            ready(Ok(()));
            self.run_passes(None);
            return;
        };
        // Inline mode: this thread holds the GIL from here to exit (released in sleeps).
        Python::attach(|py| {
            let shared = self.shared.clone();
            match Inline::new(py, setup, shared) {
                Ok((inline, tx)) => {
                    let link_shared = inline.shared().clone();
                    self.handlers
                        .push(HandlerLink::new(tx, Responses::Inline, link_shared, None));
                    self.inline = Some(inline);
                }
                Err(e) => {
                    crate::python::print_exception(py, &e);
                    ready(Err(format!("cannot set up the WSGI bridge: {e}")));
                    return;
                }
            }
            ready(Ok(()));
            self.run_passes(Some(py));
            if let Some(inline) = self.inline.take() {
                inline.finish(py);
            }
        });
    }

    fn run_passes(&mut self, py: Option<Python<'_>>) {
        let mut events = Events::with_capacity(EVENTS_PER_POLL);
        loop {
            self.counters.passes += 1;
            self.now = Instant::now();
            if let Some(placement) = &self.placement {
                if placement.due(self.now) {
                    self.place();
                } else if placement.pinned().is_some() && self.now >= self.follow_at {
                    self.follow();
                }
            }
            if !self.lingering.is_empty() {
                self.expire_lingering();
            }
            if self.accept_more {
                self.accept();
            }
            if self.drain_check_at.is_some_and(|t| self.now >= t) {
                self.close_drained_idle();
            }
            self.service_rings(py);
            if self.finished() {
                break;
            }
            // Take what is ready without sleeping first.
            self.counters.epoll_waits += 1;
            if let Err(e) = self.poll.poll(&mut events, Some(Duration::ZERO)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::error!("epoll_wait failed: {e}");
                    break;
                }
            }
            if !events.is_empty() {
                self.idle_poll_armed = true;
                self.handle_events(&events);
                // Timeouts are judged after what is ready has been read, so that a request
                // that arrived while the loop was busy is not taken for silence.
                self.maybe_sweep();
                continue;
            }
            self.maybe_sweep();
            // No spin here before sleeping: measured side by side on 2 cores (wrk on the
            // same cores), a 127-pause spin for the next response cost 2 µs of CPU per
            // request and gained nothing (BENCHMARKS.md, "loop spin").
            if let Some(inline) = self.inline.as_mut() {
                inline.flush_log();
            }
            // `--idle-poll`: with no request out (a handler thread with one needs this CPU
            // more than a poll does) and work just done, poll a while before sleeping, so
            // that the next request finds the loop awake rather than an idle CPU to wake.
            if let Some(window) = self
                .idle_poll
                .filter(|_| self.total_queued == 0 && self.idle_poll_armed)
            {
                let found = self.poll_idle(py, &mut events, window);
                self.now = Instant::now();
                if found {
                    self.handle_events(&events);
                    self.maybe_sweep();
                    continue;
                }
            }
            // Announce, re-check, then sleep: a handler that pushes after the re-check sees
            // the flag and wakes us (the fences pair in `WakeFlag`).
            self.shared.wake.announce();
            if self.any_response_ready() {
                self.shared.wake.cancel();
                continue;
            }
            let mut timeout = self.next_timeout();
            if self.total_queued > 0 && self.inline.is_none() {
                // A handler thread may push a final part without waking this loop: one
                // with nothing to write when nothing waits on its connection
                // (`LoopShared::quiet`), or one with more requests queued behind it
                // (`handler::LOOP_WAKE_BATCH`). The request is counted in `queued` until
                // its final part is popped, so every sleep until then comes here and is
                // bounded: the loop takes the part within this bound. (Inline, no wake is
                // deferred: the app's messages are queued on this thread and taken before
                // it sleeps, and a thread the app started wakes it for what it pushes
                // while the app is not running here: `HandlerShared::app_running`.)
                timeout = Some(timeout.map_or(DEFERRED_WAKE_BOUND, |t| t.min(DEFERRED_WAKE_BOUND)));
            }
            self.counters.epoll_waits += 1;
            self.counters.sleeps += 1;
            let slept = self.stats.then(Instant::now);
            // `--cpu-affinity adaptive`: a sleep with no request at the handler is the
            // worker idling (one while the handler runs a long request is not).
            let idle_from =
                (self.placement.is_some() && self.total_queued == 0).then_some(self.now);
            let poll = &mut self.poll;
            let res = match py {
                // Inline: other Python threads (the app's own) run while the loop sleeps.
                Some(py) => py.detach(|| poll.poll(&mut events, timeout)),
                None => poll.poll(&mut events, timeout),
            };
            self.now = Instant::now();
            self.shared.wake.cancel();
            let ring_ready = self.any_ring_ready();
            self.idle_poll_armed = !events.is_empty() || ring_ready;
            if let Some(from) = idle_from {
                // From the loop's last clock reading before the sleep (the pass's start, or
                // its sweep of timeouts): what the pass did since is nothing beside a long
                // sleep.
                let gap = self.now.saturating_duration_since(from);
                if gap >= IDLE_GAP {
                    self.idle += gap;
                }
            }
            if let Some(t) = slept {
                self.counters.wait += t.elapsed();
            }
            if let Err(e) = res {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::error!("epoll_wait failed: {e}");
                    break;
                }
            }
            if ring_ready {
                // Final parts pushed while it slept (without a wake) first: the next
                // request of a connection whose response is done then finds it quiet.
                // (Connections this closes may have events in `events`: their tokens'
                // generations keep those from a connection accepted into the same slot.)
                // The handlers are told at the end of the pass, after the requests read
                // now are pushed: waking one before would not bring it work sooner.
                self.take_responses();
            }
            self.handle_events(&events);
        }
        if self.stats {
            self.report();
        }
        // What is still open (after a failed `epoll_wait`) closes as any connection does,
        // its handler told, before the handlers stop.
        for slot in 0..self.slots.len() as u32 {
            self.close(slot);
        }
        self.stop_handlers();
        // A handler still inside the app (one past the graceful timeout) may yet write to a
        // socket it was lent: those descriptor numbers stay taken until the process exits,
        // so nothing it opens meanwhile can receive that write.
        std::mem::forget(std::mem::take(&mut self.reserved));
    }

    /// `--cpu-affinity adaptive`: a window has passed; judge it, and pin the loop beside its
    /// handler or let it go, as `Placement` says.
    fn place(&mut self) {
        let (Some(placement), [handler]) = (self.placement.as_mut(), self.handlers.as_slice())
        else {
            return;
        };
        let Some(join) = handler.join.as_ref() else {
            return;
        };
        if join.is_finished() {
            // The handler is gone (it could not set up, or panicked): nothing to be beside,
            // and its handle no longer names a thread to ask.
            if placement.pinned().is_some() {
                let _ = crate::sys::set_own_cpus(placement.allowed());
            }
            self.placement = None;
            return;
        }
        if moved_by_another(placement, handler, self.now) {
            return;
        }
        // Where the worker may run is where its handler may (the loop's own set is its
        // pin while beside it; `taskset` may have narrowed the handler's since).
        if let Ok(now) = crate::sys::thread_cpus(join) {
            placement.set_allowed(now);
        }
        // /proc/stat only when the judgement uses it (an unreadable one judges nothing).
        let cpus = match self.proc_stat.as_mut() {
            Some(stat) if placement.wants_cpu_ticks() => stat.cpu_ticks().unwrap_or_else(|e| {
                log::warning!("--cpu-affinity adaptive: cannot read /proc/stat ({e})");
                Vec::new()
            }),
            _ => Vec::new(),
        };
        let reading = Reading {
            at: self.now,
            used: crate::sys::process_cpu_time(),
            threads: vec![
                crate::sys::own_cpu_time(),
                crate::sys::thread_cpu_time(join).unwrap_or_default(),
            ],
            cpus,
            idle: std::mem::take(&mut self.idle),
        };
        // Relaxed: see `HandlerShared::cpu`.
        let handler_cpu =
            Some(handler.shared.cpu.load(Ordering::Relaxed)).filter(|&cpu| cpu != usize::MAX);
        let (moved, what) = match placement.judge(reading, handler_cpu) {
            Move::Stay => return,
            Move::Pin(cpu) => (
                crate::sys::pin_to_cpu(cpu),
                format!("beside its handler (CPU {cpu})"),
            ),
            Move::Spread(why) => (
                crate::sys::set_own_cpus(placement.allowed()),
                format!("on every allowed CPU ({why})"),
            ),
        };
        match (moved, placement.pinned()) {
            (Ok(()), pinned) => {
                // Relaxed: see `HandlerShared::cpu`.
                handler
                    .shared
                    .loop_beside
                    .store(pinned.is_some(), Ordering::Relaxed);
                self.follow_at = self.now + FOLLOW_EVERY;
                self.counters.moves += u64::from(pinned.is_some());
                log::debug!("this worker's loop now runs {what}");
            }
            (Err(e), Some(_)) => {
                // The loop is where it was: no pinning for a while.
                log::warning!("cannot run this worker's loop {what} ({e})");
                placement.failed(self.now);
            }
            (Err(e), None) => {
                // Still pinned; the next window tries again.
                log::warning!("cannot run this worker's loop {what} ({e})");
                placement.spread_failed();
            }
        }
    }

    /// `--cpu-affinity adaptive`, beside the handler: the kernel may have moved the handler
    /// since; go after it.
    fn follow(&mut self) {
        self.follow_at = self.now + FOLLOW_EVERY;
        let (Some(placement), [handler]) = (self.placement.as_mut(), self.handlers.as_slice())
        else {
            return;
        };
        // Relaxed: see `HandlerShared::cpu`.
        let cpu = handler.shared.cpu.load(Ordering::Relaxed);
        if placement.pinned() == Some(cpu)
            || !placement.allowed().contains(&cpu)
            || moved_by_another(placement, handler, self.now)
        {
            return;
        }
        match crate::sys::pin_to_cpu(cpu) {
            Ok(()) => {
                placement.followed(cpu);
                self.counters.moves += 1;
            }
            Err(e) => {
                // Apart, then, and no pinning for a while.
                log::warning!("cannot run this worker's loop on CPU {cpu} ({e}); letting it go");
                if let Err(e) = crate::sys::set_own_cpus(placement.allowed()) {
                    log::warning!("cannot run this worker's loop on every allowed CPU ({e})");
                }
                left_apart(placement, handler, self.now);
            }
        }
    }

    /// Writes the pipeline counters to the log (`--stats` at exit, and SIGUSR2).
    fn report(&self) {
        let handlers: Vec<_> = self
            .handlers
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
            .collect();
        stats::report(&self.counters, self.stats, &handlers);
    }

    fn stop_handlers(&mut self) {
        let wait = self.deadline.is_none_or(|d| Instant::now() < d);
        for h in &self.handlers {
            // Release: pairs with the handler's Acquire load of `stop` after it wakes.
            h.shared.stop.store(true, Ordering::Release);
            if let Some(join) = &h.join {
                join.thread().unpark();
            }
        }
        if wait && self.total_queued == 0 {
            for h in self.handlers.drain(..) {
                if let Some(join) = h.join {
                    let _ = join.join();
                }
            }
            return;
        }
        // Past the deadline, or with work still queued (its connections were closed): each
        // handler gets a moment to give up what it holds (closing the bodies it set aside
        // or was producing, as PEP 3333 asks) before the process exits under it; a handler
        // stuck inside the app is not waited for longer.
        let until = Instant::now() + HANDLER_EXIT_GRACE;
        while Instant::now() < until
            && self
                .handlers
                .iter()
                .any(|h| h.join.as_ref().is_some_and(|j| !j.is_finished()))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn next_timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        let mut next = self.deadline;
        // Idle, the loop still wakes for its heartbeat.
        next = Some(next.map_or(self.next_sweep, |d| d.min(self.next_sweep)));
        if let Some(t) = self.drain_check_at {
            next = Some(next.map_or(t, |d| d.min(t)));
        }
        if let Some(&(t, _)) = self.lingering.front() {
            next = Some(next.map_or(t, |d| d.min(t)));
        }
        next.map(|t| t.saturating_duration_since(now))
    }

    fn any_response_ready(&self) -> bool {
        self.accept_more
            || self.any_ring_ready()
            || self
                .inline
                .as_ref()
                .is_some_and(|i| i.has_work() || i.has_output())
    }

    /// A handler thread's response ring holds a message.
    fn any_ring_ready(&self) -> bool {
        self.handlers.iter().any(|h| match &h.rx {
            Responses::Ring(rx) => !rx.is_empty(),
            Responses::Inline => false,
        })
    }

    /// The next response message from handler `h`.
    fn pop_response(&mut self, h: usize) -> Option<Response> {
        match &mut self.handlers[h].rx {
            Responses::Ring(rx) => rx.pop(),
            Responses::Inline => self.inline.as_mut()?.pop_response(),
        }
    }

    fn handle_events(&mut self, events: &Events) {
        for ev in events.iter() {
            self.counters.events += 1;
            match ev.token() {
                Token(t) if (FIRST_LISTENER..FIRST_CONN).contains(&t) => self.accept(),
                METRICS => self.accept_metrics(),
                WAKER => {}
                SIGNALS => {
                    let got = self.signals.drain();
                    if got.quit {
                        log::info!("received SIGQUIT: exiting now");
                        std::process::exit(0);
                    }
                    if got.stats {
                        self.report();
                    }
                    if got.reopen {
                        log::reopen();
                        if let Some(log) = &self.access_log {
                            log.sink.reopen();
                        }
                        log::info!("received SIGUSR1: log files reopened");
                    }
                    if let Some(sig) = got.stop {
                        self.begin_shutdown(sig);
                    }
                }
                Token(t) => {
                    let slots = &self.slots;
                    let Some(slot) = token_slot(t, |s| slots.get(s).map(|s| s.gen)) else {
                        // Its connection closed since the event was taken.
                        continue;
                    };
                    let Some(conn) = self.conn_mut(slot) else {
                        continue;
                    };
                    if ev.is_error() {
                        // A pending socket error (a reset, most often): nothing can be
                        // read or written any more. Closing now also tells the handlers,
                        // which skip this connection's requests not yet started, even one
                        // that asked to close and so is no longer being read.
                        self.close(slot);
                        continue;
                    }
                    let gone = conn
                        .on_readiness(ev.is_readable(), ev.is_read_closed())
                        .then(|| (conn.handler(), conn.me()));
                    // Most edges are for input; only a connection with bytes waiting for
                    // its socket has anything to flush.
                    let pending_output = conn.has_output();
                    if let Some((Some(h), me)) = gone {
                        self.depart(h, me);
                    }
                    if pending_output {
                        self.flush_one(slot);
                    }
                    self.advance(slot);
                }
            }
        }
    }

    fn conn_mut(&mut self, slot: u32) -> Option<&mut Conn> {
        self.slots.get_mut(slot as usize)?.conn.as_deref_mut()
    }

    fn conn_by_ref(&mut self, r: ConnRef) -> Option<&mut Conn> {
        let s = self.slots.get_mut(r.slot as usize)?;
        if s.gen != r.gen {
            return None;
        }
        s.conn.as_deref_mut()
    }

    /// An answer of the loop's own (an error), for the metrics; not on the metrics port,
    /// whose traffic is not the app's.
    fn count_loop_answer(&self, on_metrics_port: bool, status: u16) {
        if let Some(m) = self.metrics.as_ref().filter(|_| !on_metrics_port) {
            m.section().count_status(status);
        }
    }

    /// A scrape's request: the loop answers it itself, from the shared counters.
    fn answer_metrics(&mut self, conn: &mut Conn, req: &Request) {
        let out = crate::metrics::http_answer(
            self.metrics_region.as_deref(),
            req.head.target.get(&req.data),
            req.head.keep_alive,
            req.head.method.get(&req.data) == b"HEAD",
            self.date.get(),
        );
        conn.answer(out);
        self.dirty.push(conn.me().slot);
    }

    /// Reads, parses and dispatches what a connection has, until the socket would block or
    /// the connection must wait (a full ring, a response in flight it must follow).
    fn advance(&mut self, slot: u32) {
        let Some(mut conn) = self
            .slots
            .get_mut(slot as usize)
            .and_then(|s| s.conn.take())
        else {
            return;
        };
        let keep = self.advance_conn(&mut conn);
        if conn.waits_for_quiet() {
            self.shared.quiet.set(true);
        }
        self.slots[slot as usize].conn = Some(conn);
        if !keep {
            self.close(slot);
        } else {
            self.after_output(slot);
        }
    }

    /// `false` when the connection must be closed now.
    fn advance_conn(&mut self, conn: &mut Conn) -> bool {
        if conn.is_lingering() {
            // Keep lingering only while the peer has nothing more to say right now.
            return conn.linger();
        }
        loop {
            if conn.holds() {
                // Responses before it are still to come; `on_response` resumes it.
                let Some(req) = conn.take_held() else {
                    return true;
                };
                self.answer_outside_root(conn, &req);
            }
            if let Some(req) = conn.take_parked() {
                if let Err(req) = self.dispatch(conn, req) {
                    conn.park(req);
                    // Room comes as the requests out finish: hear of each at once.
                    self.shared.quiet.set(true);
                    self.stalled.push_back(conn.me());
                    return true;
                }
            }
            let mut ctx = ReadCtx {
                limits: &self.limits,
                max_body_bytes: self.max_body_bytes,
                body_buffer: self.body_buffer,
                read_buffer_max: self.read_buffer_max,
                draining: self.deadline.is_some(),
                now: self.now,
                date: &mut self.date,
            };
            let mut fx = Effects::default();
            let polled = conn.poll(&mut ctx, &mut fx);
            if fx.queued {
                self.dirty.push(conn.me().slot);
            }
            if let (true, Some(h)) = (fx.client_gone, conn.handler()) {
                self.depart(h, conn.me());
            }
            if let Some(status) = fx.answered {
                self.count_loop_answer(conn.is_metrics(), status);
            }
            if let (Some(why), Some(m)) = (fx.refused, &self.metrics) {
                m.section().count_refused(why);
            }
            match polled {
                Next::Request(req) => {
                    if self.static_response {
                        self.answer_static(conn, &req);
                    } else if conn.is_metrics() {
                        self.answer_metrics(conn, &req);
                    } else if !self.within_root(&req) {
                        // Answered at the top of the loop, after the responses before it.
                        conn.hold(req);
                    } else {
                        // Handed on at the top of the loop (or kept, if every ring is full).
                        conn.park(req);
                    }
                }
                Next::Wait => return true,
                Next::Close => return false,
            }
        }
    }

    /// `--static-response`: answer on the loop itself, without Python, what the hello-world
    /// app answers; the loop's ceiling, with the same per-request buffer as a real
    /// response.
    fn answer_static(&mut self, conn: &mut Conn, req: &Request) {
        self.counters.requests += 1;
        self.answer_plain(conn, req, 200, "OK", b"Hello, World!");
    }

    /// A plain-text answer of the loop's own to `req`, queued on its connection.
    fn answer_plain(
        &mut self,
        conn: &mut Conn,
        req: &Request,
        status: u16,
        reason: &str,
        body: &[u8],
    ) {
        let out = crate::http::encode::simple_response(
            status,
            reason,
            "text/plain",
            body,
            req.head.keep_alive,
            req.head.method.get(&req.data) == b"HEAD",
            self.date.get(),
        );
        conn.answer(out);
        self.dirty.push(conn.me().slot);
    }

    /// Whether `req` is for the app under `--root-path` (always, without one; `OPTIONS *`
    /// too).
    fn within_root(&self, req: &Request) -> bool {
        let Some(root) = &self.root_path else {
            return true;
        };
        let (path, _) = crate::http::percent::split_target(req.head.target.get(&req.data));
        path == b"*" || crate::http::percent::under_root(path, root.as_bytes()).is_some()
    }

    /// A request outside `--root-path`: 404, from the loop.
    fn answer_outside_root(&mut self, conn: &mut Conn, req: &Request) {
        self.count_loop_answer(false, 404);
        self.answer_plain(conn, req, 404, "Not Found", b"Not Found");
    }

    /// Pushes a request into a handler's ring; `Err` gives it back when the ring is full.
    fn dispatch(&mut self, conn: &mut Conn, mut req: Box<Request>) -> Result<(), Box<Request>> {
        req.queued_at = self.now;
        // Requests of one connection stay on one handler so responses come back in order.
        let h = conn.handler().unwrap_or_else(|| self.least_loaded());
        let link = &mut self.handlers[h];
        // A handler thread may write the response itself (inline, the loop writes it in
        // this same pass anyway).
        req.socket = link.join.as_ref().and_then(|_| conn.socket_to_lend());
        let lent = req.socket.is_some();
        if let Err(req) = link.tx.push(req) {
            self.counters.ring_full += 1;
            return Err(req);
        }
        link.queued += 1;
        self.total_queued += 1;
        conn.dispatched(h, lent);
        self.counters.requests += 1;
        if link.notify() {
            self.counters.handler_wakes += 1;
        }
        if self.counters.requests == self.max_requests {
            self.ask_to_be_replaced();
        }
        Ok(())
    }

    /// `--max-requests` reached: tell the master, which starts a replacement and then
    /// stops this worker gracefully; until then it serves on.
    fn ask_to_be_replaced(&self) {
        if let Some(fd) = &self.status_pipe {
            Status::Recycle.send(fd.as_fd());
        }
    }

    /// The status pipe to the master, for `--max-requests`.
    pub fn set_status_pipe(&mut self, fd: std::os::fd::OwnedFd) {
        self.status_pipe = Some(fd);
    }

    /// The access log, for SIGUSR1.
    pub fn set_access_log(&mut self, log: Option<Arc<crate::access_log::AccessLog>>) {
        self.access_log = log;
    }

    fn least_loaded(&self) -> usize {
        let mut best = 0;
        for (i, h) in self.handlers.iter().enumerate().skip(1) {
            if h.queued < self.handlers[best].queued {
                best = i;
            }
        }
        best
    }

    /// `--idle-poll`: `epoll_wait` without sleeping, again and again for up to `window`,
    /// or until the loop's next timer (a timeout, the stop's deadline) is due, which the
    /// caller's pass then serves on time. True when it found events (in `events`); false
    /// when the window passed or a response came meanwhile (a handler's push, or an app
    /// thread's message inline: they wake only a loop that announced its sleep, so it
    /// looks), which the caller's re-check before sleeping takes. Inline, each poll
    /// releases the GIL, as a sleep does, so that the app's own threads are not held up by
    /// the polling. The empty polls are counted apart from the loop's other `epoll_wait`s.
    fn poll_idle(&mut self, py: Option<Python<'_>>, events: &mut Events, window: Duration) -> bool {
        let window = self.next_timeout().map_or(window, |t| t.min(window));
        let until = Instant::now() + window;
        loop {
            let poll = &mut self.poll;
            let res = match py {
                Some(py) => py.detach(|| poll.poll(events, Some(Duration::ZERO))),
                None => poll.poll(events, Some(Duration::ZERO)),
            };
            // An error is left to the caller's next `epoll_wait` to meet and report.
            if res.is_err() || !events.is_empty() {
                self.counters.epoll_waits += 1;
                self.counters.idle_polls_caught += 1;
                return true;
            }
            self.counters.idle_poll_calls += 1;
            if self.any_response_ready() {
                self.counters.idle_polls_caught += 1;
                return false;
            }
            if Instant::now() >= until {
                self.counters.idle_polls_out += 1;
                return false;
            }
            std::hint::spin_loop();
        }
    }

    /// Drains every response ring, writes what came, then lets connections that were
    /// waiting on their responses (or on ring space) go on.
    fn service_rings(&mut self, py: Option<Python<'_>>) {
        // A thread is dying (`LoopShared::flush_before_death`): what was pushed before it
        // asked is taken and written in this pass, then it is told.
        let dying = self.shared.dying();
        if let Some(py) = py {
            self.run_inline(py);
        }
        self.take_responses();
        let stalled = self.stalled.len();
        for _ in 0..stalled {
            let Some(r) = self.stalled.pop_front() else {
                break;
            };
            if self.conn_by_ref(r).is_some() {
                self.advance(r.slot);
            }
        }
        self.settle();
        self.notify_handlers();
        if let Some(asked) = dying {
            self.shared.flushed(asked);
        }
    }

    /// Inline mode: runs the app for what can be served now, one request (or body resumed)
    /// at a time, and writes each one's response before the next runs: a quick request is
    /// not held behind a slow one taken in the same pass, and a finished response is in
    /// the socket before the next request could take the process down.
    fn run_inline(&mut self, py: Python<'_>) {
        let Some(inline) = self.inline.as_mut() else {
            return;
        };
        inline.begin_run();
        while self.inline.as_mut().is_some_and(|i| i.step(py)) {
            // The app may have run for a while: stamps from here on use the time now.
            self.now = Instant::now();
            // Written, and nothing more: connections its response lets go on are resumed
            // after the run (`settle`), so that a client pipelining without end cannot keep
            // the run, and the loop's polling, from ending.
            self.pop_responses();
            self.flush_dirty();
        }
        if let Some(inline) = self.inline.as_mut() {
            inline.end_run();
        }
    }

    /// Drains the handler threads' response rings and writes what came; connections their
    /// last response leaves quiet go on. The handlers hear of it (ring room, credit) from
    /// the caller's `notify_handlers`.
    fn take_responses(&mut self) {
        self.pop_responses();
        if self.total_queued == 0 && self.deadline.is_none() {
            // No request is out: no connection waits on one (set again as one does).
            self.shared.quiet.set(false);
        }
        self.settle();
    }

    /// Takes every message the handlers pushed into the loop's connections (`on_response`).
    fn pop_responses(&mut self) {
        for h in 0..self.handlers.len() {
            let mut popped = false;
            while let Some(resp) = self.pop_response(h) {
                popped = true;
                self.on_response(h, resp);
            }
            if popped {
                self.handlers[h].wake_check = true;
            }
        }
    }

    /// Wakes the handlers that may wait for what this pass did (ring room, stream credit, a
    /// closed connection), each only if it sleeps.
    pub(super) fn notify_handlers(&mut self) {
        for h in &mut self.handlers {
            if !std::mem::take(&mut h.wake_check) {
                continue;
            }
            if h.notify() {
                self.counters.handler_wakes += 1;
            }
            h.shared.credits_returned();
        }
    }

    /// Writes what is queued and lets resumed connections go on, until neither produces
    /// more work: the loop must not sleep with a connection waiting to be resumed.
    fn settle(&mut self) {
        loop {
            self.flush_dirty();
            if self.resume.is_empty() {
                return;
            }
            while let Some(slot) = self.resume.pop() {
                self.advance(slot);
            }
        }
    }

    fn on_response(&mut self, h: usize, mut resp: Response) {
        let end = !matches!(resp.part, Part::Partial);
        if end {
            self.handlers[h].queued -= 1;
            self.total_queued -= 1;
        }
        // A middle part's bytes count against its stream's credit until written.
        let credit = match (resp.part, resp.stream.take()) {
            (Part::Partial, Some(c)) => {
                let n =
                    StreamCredit::charge(crate::pipeline::msg::wire_len(&resp.data, &resp.more));
                Some((c, n))
            }
            _ => None,
        };
        let now = self.now;
        let conn = match self.conn_by_ref(resp.conn) {
            Some(conn) if conn.takes_responses() => conn,
            live => {
                let closed = live.is_none();
                if let (Some(conn), true) = (live, end) {
                    // A response that must not follow the one that closed the connection.
                    conn.response_dropped();
                }
                if closed && end && !self.reserved.is_empty() {
                    // If its socket was lent for this request, the handler is done with the
                    // descriptor number now.
                    if let Some(i) = self.reserved.iter().position(|(r, _)| *r == resp.conn) {
                        self.reserved.swap_remove(i);
                        self.descriptor_freed();
                    }
                }
                if let Some((c, n)) = credit {
                    // The handler is still producing for a connection that is gone: tell
                    // the stream itself (the connection's close may not have known it).
                    c.cancel();
                    self.return_credit(c, n);
                } else if !end && !closed {
                    // Closing: its handler stops producing. (A closed connection departed
                    // as it closed; its slot's word may be another connection's by now.)
                    self.depart(h, resp.conn);
                }
                return;
            }
        };
        let me = conn.me();
        let resume = conn.on_response(resp, credit, now);
        // Requests pipelined behind a response that closes the connection will never be
        // answered: tell the handler, so it does not run the app for them.
        let orphaned = conn.has_orphans();
        self.dirty.push(me.slot);
        if resume {
            self.resume.push(me.slot);
        }
        if orphaned {
            self.depart(h, me);
        }
    }

    /// Connection `r`, with requests on handler `h`, lost its client (a reset, an end of
    /// stream, a close) or will answer nothing more: the handler skips its requests not
    /// yet started, `m0serve.client_disconnected()` says so for the one running, and a
    /// thread waiting in `write()` for its credit wakes and stops.
    fn depart(&mut self, h: usize, r: ConnRef) {
        self.shared.departures.depart(r);
        self.handlers[h].wake_check = true;
    }

    /// `n` bytes of a streamed response were written (or dropped): its producer may go on.
    fn return_credit(&mut self, c: Arc<StreamCredit>, n: usize) {
        credit_returned(&mut self.handlers, c, n);
    }

    fn flush_dirty(&mut self) {
        while let Some(slot) = self.dirty.pop() {
            self.flush_one(slot);
        }
    }

    /// Writes a connection's queue; closes it when it is done and closing, or failed.
    fn flush_one(&mut self, slot: u32) {
        let Some(mut conn) = self
            .slots
            .get_mut(slot as usize)
            .and_then(|s| s.conn.take())
        else {
            return;
        };
        // The connection is out of its slot, so credit can go back to the handlers as the
        // parts are written.
        let now = self.now;
        let res = conn.flush(now, &mut |c, n| self.return_credit(c, n));
        self.counters.sendfile_bytes += conn.take_sendfile_bytes();
        self.slots[slot as usize].conn = Some(conn);
        match res {
            Ok(true) => self.after_output(slot),
            Ok(false) => {}
            Err(_) => self.close(slot),
        }
    }

    /// After the queue emptied: a connection goes on, or starts its lingering close.
    fn after_output(&mut self, slot: u32) {
        let now = self.now;
        let drain = self.drain_started.map(|t| (t, self.drain_grace()));
        let Some(conn) = self.conn_mut(slot) else {
            return;
        };
        if conn.has_output() || conn.is_lingering() {
            return;
        }
        let counted = !conn.is_metrics();
        match conn.after_output(now) {
            Written::Open { resume, idle } => {
                if resume {
                    self.resume.push(slot);
                } else if let (true, Some((started, grace))) = (idle, drain) {
                    // A graceful stop keeps it for the grace (`close_drained_idle`).
                    let due = conn.drain_due(started, grace);
                    self.drain_check_at = Some(self.drain_check_at.map_or(due, |t| t.min(due)));
                }
            }
            Written::Close => self.close(slot),
            // The writable edge that takes the rest comes back here through `flush_one`.
            Written::Flushing => {}
            Written::Lingering => {
                let me = conn.me();
                // A lingering connection is on its way out (within LINGER_TIMEOUT): it
                // takes no `--max-connections` place from a client waiting to be served.
                if counted {
                    self.lingering_conns += 1;
                }
                self.lingering
                    .push_back((Instant::now() + LINGER_TIMEOUT, me));
                if self.accept_blocked {
                    self.accept_blocked = false;
                    self.accept();
                }
            }
        }
    }

    /// Closes a connection now (`reset`: with a reset), telling its handler if it had
    /// requests in flight.
    fn close(&mut self, slot: u32) {
        self.close_with(slot, false);
    }

    fn close_with(&mut self, slot: u32, reset: bool) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let Some(conn) = s.conn.take() else {
            return;
        };
        s.gen = s.gen.wrapping_add(1);
        self.free.push(slot);
        self.conns -= 1;
        if conn.is_metrics() {
            self.metrics_conns -= 1;
        } else if conn.is_lingering() {
            self.lingering_conns -= 1;
        }
        self.count_connections();
        let (me, handler) = (conn.me(), conn.handler());
        let handlers = &mut self.handlers;
        let closed = conn.close(reset, self.placeholder.as_fd(), &mut |c, n| {
            credit_returned(handlers, c, n)
        });
        let freed = closed.reserved.is_none();
        if let Some(fd) = closed.reserved {
            self.reserved.push((me, fd));
        }
        if let Some(c) = closed.stream {
            // Its handler may have set the body aside: it must learn there is nobody left.
            c.cancel();
            if let Some(link) = self.handlers.get_mut(c.handler()) {
                link.wake_check = true;
            }
        }
        if let Some(h) = handler {
            // Its request's end frees a lent descriptor, and may be what a stop waits for.
            self.shared.quiet.set(true);
            self.depart(h, me);
        }
        if freed {
            self.descriptor_freed();
        }
    }

    /// A descriptor was freed: if accepting failed for lack of them, take the connections
    /// waiting in the backlog.
    fn descriptor_freed(&mut self) {
        if self.accept_blocked {
            self.accept_blocked = false;
            self.accept();
            self.accept_metrics();
        }
    }
}

/// `--cpu-affinity adaptive`, beside the handler: whether something else has set the loop's
/// CPUs since it pinned itself (`taskset`, a cpuset, the CPU going offline); they are then
/// left as they are, and pinning waits as after letting go.
fn moved_by_another(placement: &mut Placement, handler: &HandlerLink, now: Instant) -> bool {
    let Some(cpu) = placement.pinned() else {
        return false;
    };
    if !crate::sys::allowed_cpus().is_ok_and(|own| own != [cpu]) {
        return false;
    }
    log::debug!("this worker's loop was moved off CPU {cpu}; leaving it there");
    left_apart(placement, handler, now);
    true
}

/// `--cpu-affinity adaptive`: the loop is no longer beside its handler by its own doing (a
/// move failed, or something else moved it); pinning waits as after letting go.
fn left_apart(placement: &mut Placement, handler: &HandlerLink, now: Instant) {
    placement.failed(now);
    // Relaxed: see `HandlerShared::cpu`.
    handler.shared.loop_beside.store(false, Ordering::Relaxed);
}

/// `--cpu-affinity adaptive`: the placement and `/proc/stat`, or neither (one CPU to run
/// on, or what it needs unreadable: said in the log).
fn adaptive_placement(handler: &HandlerLink) -> (Option<Placement>, Option<crate::sys::ProcStat>) {
    let cpus = match handler.join.as_ref().map(crate::sys::thread_cpus) {
        Some(Ok(cpus)) => cpus,
        None => return (None, None),
        Some(Err(e)) => {
            log::warning!("--cpu-affinity adaptive: cannot read this worker's CPUs ({e}): off");
            return (None, None);
        }
    };
    let Some(placement) = Placement::new(cpus, Instant::now()) else {
        log::debug!("--cpu-affinity adaptive: one CPU to run on, nothing to place");
        return (None, None);
    };
    let mut stat = match crate::sys::ProcStat::open() {
        Ok(stat) => stat,
        Err(e) => {
            log::warning!("--cpu-affinity adaptive: cannot open /proc/stat ({e}): off");
            return (None, None);
        }
    };
    // Where /proc/stat does not list the CPUs as the affinity numbers them (a container
    // with a virtualised /proc), no CPU could be judged.
    let listed = stat.cpu_ticks().is_ok_and(|ticks| {
        placement
            .allowed()
            .iter()
            .all(|c| ticks.iter().any(|t| t.cpu == *c))
    });
    if !listed {
        log::debug!("--cpu-affinity adaptive: /proc/stat does not list this worker's CPUs: off");
        return (None, None);
    }
    // Relaxed: see `HandlerShared::cpu`.
    handler.shared.placing.store(true, Ordering::Relaxed);
    (Some(placement), Some(stat))
}

/// `n` bytes of a stream were written (or dropped): back to its credit, and its handler
/// looks at it.
fn credit_returned(handlers: &mut [HandlerLink], c: Arc<StreamCredit>, n: usize) {
    c.returned(n);
    if let Some(link) = handlers.get_mut(c.handler()) {
        link.wake_check = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_slot_only_while_the_slot_holds_the_same_generation() {
        for (slot, gen) in [
            (0, 0),
            (5, 7),
            (1000, u32::MAX),
            ((MAX_SLOTS - 1) as u32, 3),
        ] {
            let Token(t) = conn_token(ConnRef { slot, gen });
            assert!(t >= FIRST_CONN);
            assert_eq!(
                token_slot(t, |s| (s == slot as usize).then_some(gen)),
                Some(slot)
            );
            // The slot was closed and taken by another connection since.
            let next = gen.wrapping_add(1);
            assert_eq!(
                token_slot(t, |s| (s == slot as usize).then_some(next)),
                None
            );
            // The slot is gone.
            assert_eq!(token_slot(t, |_| None), None);
        }
    }
}
