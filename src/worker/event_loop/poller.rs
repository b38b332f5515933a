//! The loop's `epoll`: taking what is ready without sleeping, sleeping until an event or
//! a timeout (releasing the GIL inline, so the app's own threads run meanwhile), and
//! `--idle-poll`'s polling before a sleep.

use std::io;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry};
use pyo3::Python;

use crate::pipeline::stats::LoopCounters;

pub(super) struct Poller {
    poll: Poll,
    /// `--idle-poll`: how long the loop polls before it sleeps with no request out.
    idle_poll: Option<Duration>,
    /// The loop's last wake-up brought work (events, or responses pushed while it slept),
    /// so the next may come soon: only then does `--idle-poll` poll before the sleep. A
    /// sleep that ended on its timeout (the sweep's heartbeat, a lingering close) does not,
    /// so that an idle worker's timers do not each start a window.
    pub(crate) armed: bool,
}

impl Poller {
    pub(super) fn new(poll: Poll, idle_poll: Option<Duration>) -> Poller {
        Poller {
            poll,
            idle_poll,
            armed: false,
        }
    }

    pub(super) fn registry(&self) -> &Registry {
        self.poll.registry()
    }

    /// What is ready now, without sleeping.
    pub(super) fn take_ready(
        &mut self,
        events: &mut Events,
        counters: &mut LoopCounters,
    ) -> io::Result<()> {
        counters.epoll_waits += 1;
        self.poll.poll(events, Some(Duration::ZERO))
    }

    /// Sleeps until an event, or `timeout`. Inline (`py`), other Python threads (the app's
    /// own) run meanwhile.
    pub(super) fn sleep(
        &mut self,
        py: Option<Python<'_>>,
        events: &mut Events,
        timeout: Option<Duration>,
        counters: &mut LoopCounters,
    ) -> io::Result<()> {
        counters.epoll_waits += 1;
        counters.sleeps += 1;
        let poll = &mut self.poll;
        match py {
            Some(py) => py.detach(|| poll.poll(events, timeout)),
            None => poll.poll(events, timeout),
        }
    }

    /// `--idle-poll`'s window, when it applies: with no request out (a handler thread with
    /// one needs this CPU more than a poll does) and work just done.
    pub(super) fn idle_window(&self, requests_out: usize) -> Option<Duration> {
        self.idle_poll.filter(|_| requests_out == 0 && self.armed)
    }

    /// `--idle-poll`: `epoll_wait` without sleeping, again and again for `window`, or
    /// until `work_came` (a response, which wakes only a loop that announced its sleep).
    /// True when it found events (in `events`); false when the window passed or work came
    /// meanwhile, which the caller's re-check before sleeping takes. Inline, each poll
    /// releases the GIL, as a sleep does, so that the app's own threads are not held up by
    /// the polling. The empty polls are counted apart from the loop's other `epoll_wait`s.
    pub(super) fn poll_idle(
        &mut self,
        py: Option<Python<'_>>,
        events: &mut Events,
        window: Duration,
        counters: &mut LoopCounters,
        mut work_came: impl FnMut() -> bool,
    ) -> bool {
        let until = Instant::now() + window;
        loop {
            let poll = &mut self.poll;
            let res = match py {
                Some(py) => py.detach(|| poll.poll(events, Some(Duration::ZERO))),
                None => poll.poll(events, Some(Duration::ZERO)),
            };
            // An error is left to the caller's next `epoll_wait` to meet and report.
            if res.is_err() || !events.is_empty() {
                counters.epoll_waits += 1;
                counters.idle_polls_caught += 1;
                return true;
            }
            counters.idle_poll_calls += 1;
            if work_came() {
                counters.idle_polls_caught += 1;
                return false;
            }
            if Instant::now() >= until {
                counters.idle_polls_out += 1;
                return false;
            }
            std::hint::spin_loop();
        }
    }
}
