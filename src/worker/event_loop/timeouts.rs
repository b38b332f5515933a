//! The loop's clock work, one sweep every quarter of the shortest timeout: the
//! per-connection timeouts (docs/security.md), the handlers' watchdog (`--timeout`) and
//! the heartbeat to the master. `Clock` holds the pass's reading and when each is due.

use std::time::{Duration, Instant};

use super::EventLoop;
use crate::http::limits::Timeouts;
use crate::log;
use crate::sys::ipc::Status;
use crate::worker::conn::{Expiry, Refusal};

/// Longest gap between two timeout sweeps; shorter timeouts sweep more often (a quarter
/// of the shortest), down to `SWEEP_MIN`.
const SWEEP_MAX: Duration = Duration::from_secs(1);
const SWEEP_MIN: Duration = Duration::from_millis(25);

/// How often a worker's loop tells the master it lives (`--silent-timeout` counts from the
/// last beat): a write of one byte a second.
const LIVENESS_BEAT: Duration = Duration::from_secs(1);

/// The longest the loop sleeps while a request is out: a final part a handler pushed
/// without waking it (more requests behind it, or nothing to write) waits at most this long.
/// Longer than a scheduler tick on purpose: a timer that is the CPU's earliest is
/// reprogrammed in hardware at every sleep, which measured 9 µs a sleep in this VM with a
/// 1 ms bound (hello at 16 connections lost 7 %; benchmarks/decisions.md, "deferred wake").
const DEFERRED_WAKE_BOUND: Duration = Duration::from_millis(20);

/// The longest the loop holds a request for a free handler (or one the pool starts);
/// then it queues in the least loaded handler's ring (a handler whose long steps never
/// leave a gap would otherwise starve it). Long enough for the pool to see its threads
/// wait and grow (a few 2 ms windows, slower on a busy host). While requests are held the
/// loop looks again at least this often.
pub(super) const HOLD_MAX: Duration = Duration::from_millis(100);

/// The pass's clock reading, and when the sweep and the heartbeat are next due.
pub(super) struct Clock {
    /// This pass's reading (one `clock_gettime` per pass, for the timeouts).
    pub(crate) now: Instant,
    /// `stats::mono_ns` (the handlers' clock, the same monotonic one) at one instant, so
    /// that `now_ns` needs no second reading.
    base: (Instant, u64),
    sweep_every: Duration,
    next_sweep: Instant,
    /// The heartbeat's period: a second, or the systemd watchdog's shorter one.
    beat_every: Duration,
    next_heartbeat: Instant,
}

impl Clock {
    pub(super) fn new(opts: &super::LoopOptions) -> Clock {
        let now = Instant::now();
        let beat_every = opts
            .heartbeat
            .map_or(LIVENESS_BEAT, |w| w.min(LIVENESS_BEAT));
        Clock {
            now,
            base: (Instant::now(), crate::pipeline::stats::mono_ns()),
            sweep_every: sweep_interval(&opts.timeouts, opts.timeout, beat_every),
            next_sweep: now,
            beat_every,
            next_heartbeat: now,
        }
    }

    /// Reads the clock.
    pub(super) fn tick(&mut self) -> Instant {
        self.now = Instant::now();
        self.now
    }

    /// This pass's reading as `stats::mono_ns` would give it.
    pub(super) fn now_ns(&self) -> u64 {
        let (at, ns) = self.base;
        ns + self.now.saturating_duration_since(at).as_nanos() as u64
    }

    /// When the sweep is next due (the loop sleeps no longer).
    pub(super) fn next_sweep(&self) -> Instant {
        self.next_sweep
    }

    /// Whether the sweep is due now; if so, the next is scheduled.
    fn sweep_due(&mut self) -> bool {
        if self.now < self.next_sweep {
            return false;
        }
        self.next_sweep = self.now + self.sweep_every;
        true
    }

    /// Whether the heartbeat is due now; if so, the next is scheduled.
    fn beat_due(&mut self) -> bool {
        if self.now < self.next_heartbeat {
            return false;
        }
        self.next_heartbeat = self.now + self.beat_every;
        true
    }
}

impl EventLoop {
    /// Reads the clock, and sweeps if the sweep is due.
    pub(super) fn maybe_sweep(&mut self) {
        self.clock.tick();
        if self.clock.sweep_due() {
            self.sweep();
        }
    }

    /// Applies the per-connection timeouts (docs/security.md): a head that takes too long
    /// (`--header-timeout`, also a new connection's first), an idle keep-alive connection
    /// (`--keep-alive-timeout`), a body that stops arriving (`--body-timeout`), a client
    /// that stops reading its response (`--write-timeout`). Each cuts only its connection.
    fn sweep(&mut self) {
        let now = self.clock.now;
        self.acceptor.report_failures(now);
        if let Some(limit) = self.opts.timeout {
            self.check_stuck(limit);
        }
        if self.clock.beat_due() {
            self.heartbeat();
        }
        for slot in 0..self.conns.len() {
            self.expire(slot, now);
        }
        let retired = self.handlers.retire_idle(now);
        if retired > 0 {
            self.counters.threads_retired += retired as u64;
            self.threads_changed();
            log::debug!("{retired} idle handler thread(s) above --blocking-threads go");
        }
        self.flush_dirty();
        // A connection closed for a timeout may be one a handler waits on.
        self.notify_handlers();
    }

    /// Applies the timeout connection `slot` has run past, if any.
    fn expire(&mut self, slot: u32, now: Instant) {
        let t = self.opts.timeouts;
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        conn.note_kernel_progress(now);
        let Some(expiry) = conn.expired(now, &t) else {
            return;
        };
        match expiry {
            Expiry::Write => {
                log::debug!(
                    "write timeout: {:?} read nothing for {:?}",
                    conn.peer(),
                    t.write
                );
                self.close_with(slot, true);
            }
            Expiry::KeepAlive => {
                log::debug!("keep-alive timeout: closing {:?}", conn.peer());
                self.close(slot);
            }
            Expiry::Request { which, answer } => {
                log::debug!("{which} timeout: closing {:?}", conn.peer());
                if !answer {
                    self.close(slot);
                    return;
                }
                let scrape = conn.is_metrics();
                conn.refuse_now(Refusal::timeout(), now, self.answers.date.get());
                self.work.dirty.push(slot);
                self.outlets.count_loop_answer(scrape, 408);
            }
        }
    }

    /// `--timeout`: a handler on one request (or one resumed stretch of a body set aside
    /// for a slow client) for longer than the limit gets its Python stack written to the
    /// log (`faulthandler`, registered on `sys::signals::stack_dump()` at start), and the
    /// worker asks the master to replace it (it drains once the replacement is ready).
    fn check_stuck(&mut self, limit: Duration) {
        for (name, ran, thread) in self.handlers.newly_stuck(limit) {
            log::error!(
                "a request on {name} has run for {:.1} s, past --timeout {:.1} s: the Python \
                 stacks follow; this worker will be replaced",
                ran.as_secs_f64(),
                limit.as_secs_f64()
            );
            // SAFETY: pthread_kill on a live thread of this process (its JoinHandle is
            // held); the signal's handler is faulthandler's, which only writes tracebacks.
            unsafe { libc::pthread_kill(thread, crate::sys::signals::stack_dump()) };
            self.outlets.tell(Status::Recycle);
        }
    }

    /// The heartbeat to the master, sent while this loop runs (it is running this): "H"
    /// when no handler has been on one piece of work without handing back a response
    /// message for four watchdog periods (what the systemd watchdog is fed on), else "L"
    /// (the loop lives; `--silent-timeout` counts either).
    fn heartbeat(&self) {
        let stuck = self
            .opts
            .heartbeat
            .is_some_and(|every| self.handlers.any_without_progress(every * 4));
        self.outlets.tell(if stuck {
            Status::Alive
        } else {
            Status::Heartbeat
        });
    }

    /// How long the loop may sleep: until its next timer, and, while a request is out on
    /// a handler thread, at most `DEFERRED_WAKE_BOUND`.
    pub(super) fn sleep_timeout(&self) -> Option<Duration> {
        let timeout = self.next_timeout();
        if self.handlers.queued == 0 || self.inline.is_some() {
            return timeout;
        }
        // A handler thread may push a final part without waking this loop: one with
        // nothing to write when nothing waits on its connection (`LoopShared::quiet`), or
        // one with more requests queued behind it (`handler::LOOP_WAKE_BATCH`). The request
        // is counted in `queued` until its final part is popped, so every sleep until then
        // comes here and is bounded: the loop takes the part within this bound. (Inline,
        // no wake is deferred: the app's messages are queued on this thread and taken
        // before it sleeps, and a thread the app started wakes it for what it pushes while
        // the app is not running here: `HandlerShared::app_running`.)
        Some(timeout.map_or(DEFERRED_WAKE_BOUND, |t| t.min(DEFERRED_WAKE_BOUND)))
    }

    /// The loop's next timer: the stop's deadline, the sweep, a stop's idle check, the
    /// first lingering close, the pool's next look, a held request's next try, a deferred
    /// accept.
    pub(super) fn next_timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        let drain = self.drain.as_ref();
        let next = [
            drain.map(|d| d.deadline),
            drain.and_then(|d| d.check_at),
            self.conns.next_linger_deadline(),
            // Requests wait for a handler: the pool looks again at its handlers, and a held
            // request queues once it has waited `HOLD_MAX`.
            self.handlers
                .next_look()
                .filter(|_| !self.work.stalled.is_empty()),
            (!self.work.stalled.is_empty()).then(|| self.clock.now + HOLD_MAX),
            // Connections left to another worker for a moment.
            self.acceptor.deferred,
        ]
        .into_iter()
        .flatten()
        // Idle, the loop still wakes for its heartbeat.
        .fold(self.clock.next_sweep(), Instant::min);
        Some(next.saturating_duration_since(now))
    }

    /// Closes the lingering connections whose time is up.
    pub(super) fn expire_lingering(&mut self) {
        let now = Instant::now();
        while let Some(r) = self.conns.next_expired_linger(now) {
            self.close(r.slot);
        }
    }
}

/// How often the timeouts are checked: a quarter of the shortest, within
/// `SWEEP_MIN..=SWEEP_MAX`.
fn sweep_interval(t: &Timeouts, timeout: Option<Duration>, heartbeat: Duration) -> Duration {
    let shortest = t.header.min(t.keep_alive).min(t.body).min(t.write);
    let shortest = timeout.map_or(shortest, |d| shortest.min(d));
    let shortest = shortest.min(heartbeat * 4);
    (shortest / 4).clamp(SWEEP_MIN, SWEEP_MAX)
}
