//! The loop's poll before it sleeps, with handler threads: when nothing is in flight, the
//! loop keeps calling `epoll_wait` without a timeout for a short window before it blocks,
//! so that a next request arriving within the window is read at once.
//!
//! When the loop and its handler both sleep, the CPU they were on goes idle. Waking an idle
//! CPU for the next request costs more than polling for it: the kernel's switch to and
//! from the idle task, and in a virtual machine the exit to the hypervisor and the wait
//! until it runs the virtual CPU again (time a guest sees as steal). BENCHMARKS.md ("the
//! loop polls before it sleeps") has the side-by-side runs.
//!
//! The window adapts as the idle governor `haltpoll` does: it grows (doubling from
//! [`START`] up to [`MAX`]) after each idle spell that outlasted it but ended within
//! [`MAX`], and halves (to none below [`START`]) after each that outlasted [`MAX`]. Under
//! load the gaps between requests are short and the window stays open; an idle server or a
//! sparse stream of requests closes it within three sleeps, after which polling costs
//! nothing. Only the loop polls, and only while nothing is in flight, so no handler waits
//! for the CPU it holds. Inline and with `--static-response` it does not poll: there the
//! loop is busy at load anyway, and polling lost up to a fifth of the requests a second
//! (BENCHMARKS.md).

use std::time::Duration;

/// The longest window.
pub const MAX: Duration = Duration::from_micros(50);
/// The first window opened, and the shortest kept.
pub const START: Duration = Duration::from_micros(10);

/// The window. (What polling took is counted in the loop's `LoopCounters`; the
/// placement's judgement leaves that time out of the loop's CPU use.)
#[derive(Debug, Default)]
pub struct IdleSpin {
    window: Duration,
}

impl IdleSpin {
    pub fn new() -> IdleSpin {
        IdleSpin::default()
    }

    /// How long to poll before sleeping now.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// An idle spell of `idle` (from the moment the loop found nothing to do, through its
    /// poll and its sleep, to the next event) ended: the window adapts.
    pub fn ended(&mut self, idle: Duration) {
        if idle <= self.window {
            return;
        }
        if idle <= MAX {
            self.window = (self.window * 2).clamp(START, MAX);
        } else {
            self.window /= 2;
            if self.window < START {
                self.window = Duration::ZERO;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn opens_on_short_gaps_and_closes_on_long_ones() {
        let mut s = IdleSpin::new();
        assert_eq!(
            s.window(),
            Duration::ZERO,
            "closed until a short gap is seen"
        );
        s.ended(500 * US);
        assert_eq!(s.window(), Duration::ZERO, "a long gap opens nothing");
        s.ended(30 * US);
        assert_eq!(s.window(), START);
        s.ended(30 * US);
        assert_eq!(s.window(), 20 * US);
        s.ended(30 * US);
        assert_eq!(s.window(), 40 * US);
        s.ended(30 * US);
        assert_eq!(s.window(), 40 * US, "a gap the window covered keeps it");
        s.ended(45 * US);
        assert_eq!(s.window(), MAX, "never past MAX");
        s.ended(MAX);
        assert_eq!(s.window(), MAX);
        // An idle server: each sleep outlasts MAX, and the window is gone in three.
        s.ended(Duration::from_secs(1));
        assert_eq!(s.window(), 25 * US);
        s.ended(Duration::from_secs(1));
        assert_eq!(s.window(), 12500 * Duration::from_nanos(1));
        s.ended(Duration::from_secs(1));
        assert_eq!(s.window(), Duration::ZERO);
        s.ended(Duration::from_secs(1));
        assert_eq!(s.window(), Duration::ZERO);
    }
}
