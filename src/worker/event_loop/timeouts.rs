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

/// The pass's clock reading, and when the sweep and the heartbeat are next due.
pub(super) struct Clock {
    /// This pass's reading (one `clock_gettime` per pass, for the timeouts).
    pub now: Instant,
    sweep_every: Duration,
    next_sweep: Instant,
    /// The heartbeat's period: a second, or the systemd watchdog's shorter one.
    beat_every: Duration,
    next_heartbeat: Instant,
}

impl Clock {
    pub fn new(opts: &super::LoopOptions) -> Clock {
        let now = Instant::now();
        let beat_every = opts
            .heartbeat
            .map_or(LIVENESS_BEAT, |w| w.min(LIVENESS_BEAT));
        Clock {
            now,
            sweep_every: sweep_interval(&opts.timeouts, opts.timeout, beat_every),
            next_sweep: now,
            beat_every,
            next_heartbeat: now,
        }
    }

    /// Reads the clock.
    pub fn tick(&mut self) -> Instant {
        self.now = Instant::now();
        self.now
    }

    /// When the sweep is next due (the loop sleeps no longer).
    pub fn next_sweep(&self) -> Instant {
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
