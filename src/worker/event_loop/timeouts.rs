//! The loop's clock work, one sweep every quarter of the shortest timeout: the
//! per-connection timeouts (docs/security.md), the lingering closes that ran out, the
//! handlers' watchdog (`--timeout`) and the heartbeat to the master.

use std::os::fd::AsFd;
use std::os::unix::thread::JoinHandleExt;
use std::time::{Duration, Instant};

use super::EventLoop;
use crate::http::limits::Timeouts;
use crate::log;
use crate::pipeline::stats;
use crate::sys::ipc::Status;
use crate::worker::conn::{Expiry, Refusal};

/// Longest gap between two timeout sweeps; shorter timeouts sweep more often (a quarter
/// of the shortest), down to `SWEEP_MIN`.
const SWEEP_MAX: Duration = Duration::from_secs(1);
const SWEEP_MIN: Duration = Duration::from_millis(25);

/// How often a worker's loop tells the master it lives (`--silent-timeout` counts from the
/// last beat): a write of one byte a second.
const LIVENESS_BEAT: Duration = Duration::from_secs(1);

/// The heartbeat's period: a second, or the systemd watchdog's shorter one.
pub(super) fn beat_every(watchdog: Option<Duration>) -> Duration {
    watchdog.map_or(LIVENESS_BEAT, |w| w.min(LIVENESS_BEAT))
}

impl EventLoop {
    pub(super) fn maybe_sweep(&mut self) {
        self.now = Instant::now();
        if self.now >= self.next_sweep {
            self.sweep();
        }
    }

    /// Applies the per-connection timeouts (docs/security.md): a head that takes too long
    /// (`--header-timeout`, also a new connection's first), an idle keep-alive connection
    /// (`--keep-alive-timeout`), a body that stops arriving (`--body-timeout`), a client
    /// that stops reading its response (`--write-timeout`). Each cuts only its connection.
    pub(super) fn sweep(&mut self) {
        let now = self.now;
        self.next_sweep = now + self.sweep_every;
        self.report_accept_failures();
        if let Some(limit) = self.timeout {
            self.check_stuck(limit);
        }
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.beat_every();
            self.heartbeat();
        }
        let t = self.timeouts;
        for slot in 0..self.slots.len() as u32 {
            let Some(conn) = self
                .slots
                .get_mut(slot as usize)
                .and_then(|s| s.conn.as_deref_mut())
            else {
                continue;
            };
            conn.note_kernel_progress(now);
            let Some(expiry) = conn.expired(now, &t) else {
                continue;
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
                        continue;
                    }
                    let scrape = conn.is_metrics();
                    conn.refuse_now(Refusal::timeout(), now, self.date.get());
                    self.dirty.push(slot);
                    self.count_loop_answer(scrape, 408);
                }
            }
        }
        self.flush_dirty();
        // A connection closed for a timeout may be one a handler waits on.
        self.notify_handlers();
    }

    /// `--timeout`: a handler on one request (or one resumed stretch of a body set aside
    /// for a slow client) for longer than the limit gets its Python stack written to the
    /// log (`faulthandler`, registered on `sys::signals::stack_dump()` at start), and the
    /// worker asks the master to replace it (it drains once the replacement is ready).
    pub(super) fn check_stuck(&mut self, limit: Duration) {
        let now = stats::mono_ns();
        let mut stuck = Vec::new();
        for link in &mut self.handlers {
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
        for (name, ran, thread) in stuck {
            log::error!(
                "a request on {name} has run for {:.1} s, past --timeout {:.1} s: the Python \
                 stacks follow; this worker will be replaced",
                ran.as_secs_f64(),
                limit.as_secs_f64()
            );
            // SAFETY: pthread_kill on a live thread of this process (its JoinHandle is
            // held); the signal's handler is faulthandler's, which only writes tracebacks.
            unsafe { libc::pthread_kill(thread, crate::sys::signals::stack_dump()) };
            self.ask_to_be_replaced();
        }
    }

    /// The heartbeat to the master, sent while this loop runs (it is running this): "H"
    /// when no handler has been on one piece of work without handing back a response
    /// message for four watchdog periods (what the systemd watchdog is fed on), else "L"
    /// (the loop lives; `--silent-timeout` counts either).
    pub(super) fn heartbeat(&self) {
        let now = stats::mono_ns();
        let stuck = self.watchdog.is_some_and(|every| {
            self.handlers.iter().any(|h| {
                h.shared.busy.read().is_some_and(|(_, progress)| {
                    Duration::from_nanos(now.saturating_sub(progress)) > every * 4
                })
            })
        });
        if let Some(fd) = &self.status_pipe {
            let beat = if stuck {
                Status::Alive
            } else {
                Status::Heartbeat
            };
            beat.send(fd.as_fd());
        }
    }

    pub(super) fn expire_lingering(&mut self) {
        let now = Instant::now();
        while let Some(&(t, r)) = self.lingering.front() {
            if t > now {
                break;
            }
            self.lingering.pop_front();
            if self.conn_by_ref(r).is_some() {
                self.close(r.slot);
            }
        }
    }

    pub(super) fn beat_every(&self) -> Duration {
        beat_every(self.watchdog)
    }
}

/// How often the timeouts are checked: a quarter of the shortest, within
/// `SWEEP_MIN..=SWEEP_MAX`.
pub(super) fn sweep_interval(
    t: &Timeouts,
    timeout: Option<Duration>,
    heartbeat: Duration,
) -> Duration {
    let shortest = t.header.min(t.keep_alive).min(t.body).min(t.write);
    let shortest = timeout.map_or(shortest, |d| shortest.min(d));
    let shortest = shortest.min(heartbeat * 4);
    (shortest / 4).clamp(SWEEP_MIN, SWEEP_MAX)
}
