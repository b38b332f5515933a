//! The loop thread (`m0s-loop`): one `mio::Poll` that accepts, reads, parses, hands
//! requests to the handler threads' rings, and writes their responses. It never runs Python
//! (except in inline mode, `inline.rs`, where it is also the only handler) and never blocks
//! except in `Poll::poll`.
//!
//! Waiting follows the park-only-if-parked protocol (`park.rs`): the loop polls without a
//! timeout only after it has announced that it will sleep and re-checked every response
//! ring, so a handler wakes it (an eventfd write through `mio::Waker`) only when it really
//! sleeps; at load the hand-off costs no syscall.
//!
//! The loop is made of parts, each with its own state and rules: the connection table
//! (`conns.rs`), the acceptor (`accept.rs`), the handlers' ends (`link.rs`), the clock and
//! its sweeps (`timeouts.rs`), a graceful stop (`drain.rs`), the poller (`poller.rs`), the
//! loop's own answers (`answers.rs`) and what it tells the master and the metrics
//! (`outlets.rs`). `EventLoop` moves connections between them: this file reads and
//! dispatches (`advance`), and `respond.rs` takes responses back and writes them.

// Its shape is kept (clippy.toml): no function over 80 lines, no block nested deeper than 4.
#![warn(clippy::too_many_lines, clippy::excessive_nesting)]

mod accept;
mod admission;
mod answers;
mod conns;
mod dispatch;
mod drain;
mod link;
mod outlets;
mod poller;
mod respond;
pub(crate) mod statics;
mod timeouts;

use std::collections::VecDeque;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

use mio::event::Event;
use mio::{Events, Interest, Poll, Token};
use pyo3::Python;

use crate::pipeline::msg::{ConnRef, Request};
use crate::pipeline::shared::LoopShared;
use crate::pipeline::stats::{self, LoopCounters};
use crate::sys::listen::Listener;
use crate::sys::signals::SignalPipe;
use crate::worker::conn::{Conn, Effects, LoopAnswer, Next, ReadCtx};
use crate::worker::inline::{Inline, InlineSetup};
use crate::worker::placer::{self, Placer, Tick};
use crate::{access_log::AccessLog, log};
use accept::Acceptor;
use admission::Admission;
use answers::Answers;
use conns::{ConnTable, METRICS, SIGNALS, WAKER};
use drain::Drain;
use link::Handlers;
pub(crate) use link::{HandlerLink, LoopOptions, Responses};
pub(crate) use outlets::MetricsPort;
use outlets::Outlets;
use poller::Poller;
use timeouts::Clock;

/// Readiness events taken per `epoll_wait` (the rest stay ready for the next pass). A
/// pass reads its requests, serves them, then writes their responses; inline, at 256
/// busy connections, passes of at most 64 gave the client its first responses sooner and
/// cost the loop less kernel time a request than passes of every ready connection
/// (benchmarks/decisions.md, "the app's side of a request, cheaper").
const EVENTS_PER_POLL: usize = 64;

/// Room a connection's read buffer has beyond the largest head (`--max-header-size`), for
/// pipelined bytes behind it.
const READ_BUFFER_SLACK_BYTES: usize = 16 * 1024;

/// What the loop is handed at construction besides its options: its poller and sockets,
/// its ends of the handlers, and its outlets.
pub(crate) struct LoopWiring {
    pub(crate) poll: Poll,
    pub(crate) listeners: Vec<Listener>,
    pub(crate) signals: SignalPipe,
    pub(crate) shared: Arc<LoopShared>,
    pub(crate) handlers: Vec<HandlerLink>,
    /// Starts more handler threads (`--max-blocking-threads` above `--blocking-threads`).
    pub(crate) spawner: Option<crate::worker::handler::Spawner>,
    /// The write end of the status pipe to the master.
    pub(crate) status_pipe: Option<OwnedFd>,
    pub(crate) access_log: Option<Arc<AccessLog>>,
    pub(crate) metrics: Option<MetricsPort>,
    /// `--static-map`: the mounts, their directories open.
    pub(crate) static_files: Option<statics::StaticFiles>,
}

/// The connections with work the pass has yet to do, and the rule for those waiting.
struct Work {
    /// Connections with a parsed request waiting for a handler (held: none was free to
    /// take it, or every ring was full).
    stalled: VecDeque<ConnRef>,
    /// Which requests may wait for a handler, and for how long (`--max-queue-wait`).
    admission: Admission,
    /// Connections whose last in-flight response completed: parse what they buffered.
    resume: Vec<u32>,
    /// Connections with new bytes to write, flushed once per pass (batching pipelined
    /// responses into one `writev`).
    dirty: Vec<u32>,
}

pub(crate) struct EventLoop {
    poller: Poller,
    signals: SignalPipe,
    shared: Arc<LoopShared>,
    opts: LoopOptions,
    handlers: Handlers,
    conns: ConnTable,
    acceptor: Acceptor,
    clock: Clock,
    /// A graceful stop, once one began.
    drain: Option<Drain>,
    work: Work,
    answers: Answers,
    outlets: Outlets,
    counters: LoopCounters,
    /// Inline mode: the app's side, run between passes.
    inline: Option<Inline>,
    /// `--cpu-affinity adaptive` (with one handler thread, on more than one CPU).
    placer: Option<Placer>,
}

impl EventLoop {
    pub(crate) fn new(w: LoopWiring, mut opts: LoopOptions) -> io::Result<EventLoop> {
        opts.max_connections = opts.max_connections.max(1);
        let placer = match w.handlers.as_slice() {
            [h] if opts.adaptive_affinity && !opts.static_response => {
                h.join.as_ref().and_then(|join| {
                    Placer::new(placer::Handler {
                        join,
                        shared: &h.shared,
                    })
                })
            }
            _ => None,
        };
        let mut signals = w.signals;
        let registry = w.poll.registry();
        let mut acceptor = Acceptor::new(w.listeners, registry, &opts)?;
        registry.register(&mut signals.read, SIGNALS, Interest::READABLE)?;
        let mut answers = Answers::new(opts.root_path.clone());
        answers.set_static_files(w.static_files, w.access_log.clone());
        let mut outlets = Outlets {
            status_pipe: w.status_pipe,
            access_log: w.access_log,
            metrics: None,
        };
        if let Some(m) = w.metrics {
            acceptor.set_metrics(m.listener, registry)?;
            answers.set_metrics_region(m.region);
            outlets.metrics = m.recorder;
        }
        let handlers = Handlers::new(
            w.handlers,
            w.spawner,
            opts.max_handlers,
            opts.handler_idle,
            opts.max_websockets,
        );
        let mut event_loop = EventLoop {
            poller: Poller::new(w.poll, opts.idle_poll),
            signals,
            shared: w.shared,
            handlers,
            conns: ConnTable::new()?,
            acceptor,
            clock: Clock::new(&opts),
            drain: None,
            work: Work {
                stalled: VecDeque::new(),
                admission: Admission::new(opts.max_queue_wait),
                resume: Vec::new(),
                dirty: Vec::new(),
            },
            answers,
            outlets,
            counters: LoopCounters::new(),
            inline: None,
            placer,
            opts,
        };
        event_loop.threads_changed();
        Ok(event_loop)
    }

    /// Runs until a graceful stop completes (or its deadline passes); stops the handlers.
    /// `inline`: inline mode's setup, built into the bridge on this thread. `ready` hears
    /// once that the loop is set up (or why it could not be), before it serves anything.
    pub(crate) fn run(
        mut self,
        inline: Option<InlineSetup>,
        ready: impl FnOnce(Result<(), String>),
    ) {
        let Some(setup) = inline else {
            ready(Ok(()));
            self.run_passes(None);
            return;
        };
        // Inline mode: this thread holds the GIL from here to exit (released in sleeps).
        Python::attach(|py| {
            match Inline::new(py, setup, self.shared.clone()) {
                Ok((inline, tx)) => {
                    let link_shared = inline.shared().clone();
                    let link = HandlerLink::new(tx, Responses::Inline, link_shared, None);
                    self.handlers.links.push(link);
                    self.inline = Some(inline);
                    self.threads_changed();
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

    /// Pass after pass: what is due, what is ready without sleeping, then (with nothing)
    /// `--idle-poll`'s window and a sleep; until a stop is done or `epoll_wait` fails.
    fn run_passes(&mut self, py: Option<Python<'_>>) {
        let mut events = Events::with_capacity(EVENTS_PER_POLL);
        loop {
            self.begin_pass(py);
            if self.finished() {
                break;
            }
            match self.take_ready(&mut events) {
                Err(()) => break,
                Ok(true) => continue,
                Ok(false) => {}
            }
            // No spin here before sleeping: measured side by side on 2 cores (wrk on the
            // same cores), a 127-pause spin for the next response cost 2 µs of CPU per
            // request and gained nothing (benchmarks/decisions.md, "loop spin").
            if let Some(inline) = self.inline.as_mut() {
                inline.flush_log();
            }
            self.answers.flush_log();
            if self.idle_poll(py, &mut events) {
                continue;
            }
            if self.sleep(py, &mut events).is_err() {
                break;
            }
        }
        self.shut_down();
    }

    /// What each pass does first: the CPU placement, the lingering closes and accepts
    /// that are due, a stop's idle connections, then the responses.
    fn begin_pass(&mut self, py: Option<Python<'_>>) {
        self.counters.passes += 1;
        let now = self.clock.tick();
        if let Some(placer) = self.placer.as_mut() {
            let tick = match self.handlers.links.as_slice() {
                [HandlerLink {
                    join: Some(join),
                    shared,
                    ..
                }] => placer.tick(now, placer::Handler { join, shared }),
                // The pool grew: no one handler to run beside any more.
                links => {
                    placer.stop();
                    if let Some(first) = links.first() {
                        // Relaxed: see `HandlerShared::cpu`.
                        (first.shared.loop_beside)
                            .store(false, std::sync::atomic::Ordering::Relaxed);
                    }
                    Tick::Over
                }
            };
            match tick {
                Tick::Nothing => {}
                Tick::Moved => self.counters.moves += 1,
                Tick::Over => self.placer = None,
            }
        }
        if self.conns.next_linger_deadline().is_some() {
            self.expire_lingering();
        }
        if self.acceptor.more || self.acceptor.deferred.is_some_and(|t| now >= t) {
            self.accept();
        }
        if self.drain_check_due() {
            self.close_drained_idle();
        }
        let now_ns = self.clock.now_ns();
        self.work.admission.refresh(&self.handlers, now, now_ns);
        self.service_rings(py);
    }

    fn drain_check_due(&self) -> bool {
        let check_at = self.drain.as_ref().and_then(|d| d.check_at);
        check_at.is_some_and(|t| self.clock.now >= t)
    }

    /// Takes what is ready without sleeping. `Ok(true)` when there was something (the
    /// pass is done); `Err` when `epoll_wait` failed.
    fn take_ready(&mut self, events: &mut Events) -> Result<bool, ()> {
        let res = self.poller.take_ready(events, &mut self.counters);
        poll_failed(res)?;
        let found = !events.is_empty();
        if found {
            self.poller.armed = true;
            self.handle_events(events);
        }
        // Timeouts are judged after what is ready has been read, so that a request that
        // arrived while the loop was busy is not taken for silence.
        self.maybe_sweep();
        Ok(found)
    }

    /// `--idle-poll`: with no request out and work just done, poll a while before
    /// sleeping, so that the next request finds the loop awake rather than an idle CPU to
    /// wake. True when it found events (handled here).
    fn idle_poll(&mut self, py: Option<Python<'_>>, events: &mut Events) -> bool {
        let Some(window) = self.poller.idle_window(self.handlers.queued) else {
            return false;
        };
        // Not past the loop's next timer (a timeout, the stop's deadline), which the
        // caller's pass then serves on time.
        let window = self.next_timeout().map_or(window, |t| t.min(window));
        let (more, handlers, inline) = (self.acceptor.more, &self.handlers, &self.inline);
        let found = self
            .poller
            .poll_idle(py, events, window, &mut self.counters, || {
                work_waiting(more, handlers, inline)
            });
        self.clock.tick();
        if found {
            self.handle_events(events);
            self.maybe_sweep();
        }
        found
    }

    /// Announces the sleep, re-checks, sleeps, then takes what woke it. `Err` when
    /// `epoll_wait` failed.
    fn sleep(&mut self, py: Option<Python<'_>>, events: &mut Events) -> Result<(), ()> {
        // Announce, re-check, then sleep: a handler that pushes after the re-check sees
        // the flag and wakes us (the fences pair in `WakeFlag`).
        self.shared.wake.announce();
        if self.any_response_ready() {
            self.shared.wake.cancel();
            return Ok(());
        }
        let timeout = self.sleep_timeout();
        let slept = self.opts.stats.then(Instant::now);
        // `--cpu-affinity adaptive`: a sleep with no request at the handler is the worker
        // idling; measured from the loop's last clock reading before the sleep (what the
        // pass did since is nothing beside a long sleep).
        let idle_from =
            (self.placer.is_some() && self.handlers.queued == 0).then_some(self.clock.now);
        let res = self.poller.sleep(py, events, timeout, &mut self.counters);
        let now = self.clock.tick();
        self.shared.wake.cancel();
        let ring_ready = self.handlers.any_ring_ready();
        self.poller.armed = !events.is_empty() || ring_ready;
        if let (Some(from), Some(placer)) = (idle_from, self.placer.as_mut()) {
            placer.slept(from, now);
        }
        if let Some(t) = slept {
            self.counters.wait += t.elapsed();
        }
        poll_failed(res)?;
        if ring_ready {
            // Final parts pushed while it slept (without a wake) first: the next request
            // of a connection whose response is done then finds it quiet. (Connections
            // this closes may have events in `events`: their tokens' generations keep
            // those from a connection accepted into the same slot.) The handlers are told
            // at the end of the pass, after the requests read now are pushed: waking one
            // before would not bring it work sooner.
            self.take_responses();
        }
        self.handle_events(events);
        Ok(())
    }

    /// After the last pass: the counters reported, what is still open closed (after a
    /// failed `epoll_wait`) as any connection closes, its handler told, then the handlers
    /// stopped.
    fn shut_down(&mut self) {
        if self.opts.stats {
            self.report();
        }
        self.close_all();
        let wait = self
            .drain
            .as_ref()
            .is_none_or(|d| Instant::now() < d.deadline);
        self.handlers.stop(wait);
        self.conns.leak_reserved();
    }

    /// Writes the pipeline counters to the log (`--stats` at exit, and SIGUSR2).
    fn report(&self) {
        stats::report(
            &self.counters,
            self.opts.stats,
            &self.handlers.report_entries(),
        );
    }

    fn any_response_ready(&self) -> bool {
        work_waiting(self.acceptor.more, &self.handlers, &self.inline)
    }

    fn handle_events(&mut self, events: &Events) {
        for ev in events.iter() {
            self.counters.events += 1;
            match ev.token() {
                t if Acceptor::is_listener(t) => self.accept(),
                METRICS => self.accept_metrics(),
                WAKER => {}
                SIGNALS => self.on_signals(),
                t => self.on_conn_event(t, ev),
            }
        }
    }

    fn on_signals(&mut self) {
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
            self.outlets.reopen_access_log();
            log::info!("received SIGUSR1: log files reopened");
        }
        if let Some(sig) = got.stop {
            self.begin_shutdown(sig);
        }
    }

    /// A readiness event for a connection (ignored if it closed since the event was taken).
    fn on_conn_event(&mut self, t: Token, ev: &Event) {
        let Some(slot) = self.conns.slot_of(t) else {
            return;
        };
        if ev.is_error() {
            // A pending socket error (a reset, most often): nothing can be read or written
            // any more. Closing now also tells the handlers, which skip this connection's
            // requests not yet started, even one that asked to close and so is no longer
            // being read.
            self.close(slot);
            return;
        }
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let gone = conn
            .on_readiness(ev.is_readable(), ev.is_read_closed())
            .then(|| (conn.handler(), conn.me()));
        // Most edges are for input; only a connection with bytes waiting for its socket
        // has anything to flush.
        let pending_output = conn.has_output();
        if let Some((Some(h), me)) = gone {
            self.depart(h, me);
        }
        if pending_output {
            self.flush_one(slot);
        }
        self.advance(slot);
    }

    /// Reads, parses and dispatches what a connection has, until the socket would block or
    /// the connection must wait (a full ring, a response in flight it must follow).
    fn advance(&mut self, slot: u32) {
        let Some(mut conn) = self.conns.take(slot) else {
            return;
        };
        let keep = if conn.is_lingering() {
            // Keep lingering only while the peer has nothing more to say right now.
            conn.linger()
        } else {
            self.advance_conn(&mut conn)
        };
        if conn.waits_for_quiet() {
            self.shared.quiet.set(true);
        }
        self.conns.put_back(conn);
        if keep {
            self.after_output(slot);
        } else {
            self.close(slot);
        }
    }

    /// `false` when the connection must be closed now.
    fn advance_conn(&mut self, conn: &mut Conn) -> bool {
        loop {
            if !self.hand_on(conn) {
                return true;
            }
            match self.read_conn(conn) {
                Next::Request(req) => self.route(conn, req),
                Next::Wait => return true,
                Next::Close => return false,
            }
        }
    }

    /// What the connection holds from an earlier turn: an answer of the loop's own that
    /// waited for the responses before it, a request that waited for ring room. `false`
    /// when it must wait more (for those responses, or for room).
    fn hand_on(&mut self, conn: &mut Conn) -> bool {
        if conn.holds() {
            // Responses before it are still to come; `on_response` resumes it.
            let Some((req, answer)) = conn.take_held() else {
                return false;
            };
            match answer {
                LoopAnswer::OutsideRoot => {
                    self.outlets.count_loop_answer(false, 404);
                    self.answers.outside_root(conn, &req);
                }
                LoopAnswer::Busy => {
                    self.counters.shed += 1;
                    let hold = admission::SHEDDING_HOLD.as_nanos() as u64;
                    self.outlets.count_shed(self.clock.now_ns() + hold);
                    self.answers.busy(conn, &req);
                }
                LoopAnswer::Static(m) => {
                    let status = self.answers.static_file(conn, &req, m, self.clock.now);
                    self.counters.static_answers += 1;
                    self.outlets.count_static(status);
                }
            }
            self.work.dirty.push(conn.me().slot);
        }
        if let Some(req) = conn.take_abandoned() {
            self.abandon(conn.me(), req);
        }
        let Some(mut req) = conn.take_parked() else {
            return true;
        };
        if conn.handler().is_some() {
            // Pipelined behind a request of its own connection, it waits for that one, not
            // for a handler: its wait counts from when it was last found doing so.
            req.queued_at = self.clock.now;
        } else if self.work.admission.expired(req.queued_at, self.clock.now) {
            // Waited past its budget: answered 503 now (after any response before it).
            conn.hold(req, LoopAnswer::Busy);
            return self.hand_on(conn);
        }
        let Err(req) = self.dispatch(conn, req) else {
            return true;
        };
        conn.park(req);
        // Room comes as the requests out finish: hear of each at once.
        self.shared.quiet.set(true);
        if !conn.listed(true) {
            self.work.stalled.push_back(conn.me());
        }
        false
    }

    /// Reads and parses one step further (`Conn::poll`), and acts on what it did besides.
    fn read_conn(&mut self, conn: &mut Conn) -> Next {
        let mut ctx = ReadCtx {
            limits: &self.opts.limits,
            max_body_bytes: self.opts.max_body_bytes,
            body_buffer: self.opts.body_buffer,
            read_buffer_max: self.opts.limits.max_head + READ_BUFFER_SLACK_BYTES,
            draining: self.drain.is_some(),
            now: self.clock.now,
            date: &mut self.answers.date,
        };
        let mut fx = Effects::default();
        let next = conn.poll(&mut ctx, &mut fx);
        if fx.queued {
            self.work.dirty.push(conn.me().slot);
        }
        if let (true, Some(h)) = (fx.client_gone, conn.handler()) {
            self.depart(h, conn.me());
        }
        if let Some(status) = fx.answered {
            self.outlets.count_loop_answer(conn.is_metrics(), status);
        }
        if let Some(why) = fx.refused {
            self.outlets.count_refused(why);
        }
        next
    }

    /// Requests a new one would find ahead of it: out on the handlers, or held in the loop.
    fn waiting(&self) -> usize {
        self.handlers.queued + self.work.stalled.len()
    }

    /// A whole request: answered by the loop, or handed on.
    fn route(&mut self, conn: &mut Conn, req: Box<Request>) {
        if self.opts.static_response {
            self.counters.requests += 1;
            self.answers.hello(conn, &req);
        } else if conn.is_metrics() {
            self.answers.metrics(conn, &req);
        } else if let Some(m) = self.answers.static_mount(&req) {
            // A static file: answered like the loop's other answers, below.
            conn.hold(req, LoopAnswer::Static(m));
            return;
        } else if !self.answers.within_root(&req) {
            // Answered at the top of the loop, after the responses before it.
            conn.hold(req, LoopAnswer::OutsideRoot);
            return;
        } else if !self.work.admission.admits(self.waiting()) {
            // It would wait for a handler past its budget: 503, the same way.
            self.work.admission.refused(self.clock.now);
            conn.hold(req, LoopAnswer::Busy);
            return;
        } else {
            // Handed on at the top of the loop (or kept, if every ring is full).
            conn.park(req);
            return;
        }
        self.work.dirty.push(conn.me().slot);
    }

    /// Closes a connection now, telling its handler if it had requests in flight.
    fn close(&mut self, slot: u32) {
        self.close_with(slot, false);
    }

    /// Closes a connection now (`reset`: with a reset).
    fn close_with(&mut self, slot: u32, reset: bool) {
        let Some(mut conn) = self.conns.remove(slot) else {
            return;
        };
        if let Some(req) = conn.take_parked_at_close() {
            self.abandon(conn.me(), req);
        }
        self.outlets.count_connections(self.conns.counts());
        let (me, handler) = (conn.me(), conn.handler());
        let handlers = &mut self.handlers;
        let closed = conn.close(reset, self.conns.placeholder(), &mut |c, n| {
            handlers.credit_returned(c, n)
        });
        let freed = closed.reserved.is_none();
        if let Some(fd) = closed.reserved {
            self.conns.keep_reserved(me, fd);
        }
        if let Some(c) = closed.stream {
            // Its handler may have set the body aside: it must learn there is nobody left.
            c.cancel();
            self.handlers.mark(c.handler());
        }
        if let Some(h) = handler {
            // Its request's end frees a lent descriptor, and may be what a stop waits for.
            self.shared.quiet.set(true);
            self.depart(h, me);
        }
        if freed {
            self.accept_again();
        }
    }

    /// Closes every connection.
    fn close_all(&mut self) {
        for slot in 0..self.conns.len() {
            self.close(slot);
        }
    }
}

/// A response waits to be taken (or accepting to go on): the loop must not sleep.
fn work_waiting(accept_more: bool, handlers: &Handlers, inline: &Option<Inline>) -> bool {
    accept_more
        || handlers.any_ring_ready()
        || inline
            .as_ref()
            .is_some_and(|i| i.has_work() || i.has_output())
}

/// An `epoll_wait` that failed, other than for a signal, ends the loop (said in the log).
fn poll_failed(res: io::Result<()>) -> Result<(), ()> {
    match res {
        Err(e) if e.kind() != io::ErrorKind::Interrupted => {
            log::error!("epoll_wait failed: {e}");
            Err(())
        }
        _ => Ok(()),
    }
}
