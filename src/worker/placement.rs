//! `--cpu-affinity adaptive`, the default: a worker's loop thread runs on the CPU its one
//! handler thread is on while that suits them, and anywhere again when it does not.
//!
//! Apart, the kernel places the two threads among whatever else runs (a load generator, a
//! proxy on the same host): on a machine with few cores the handler waits behind another
//! process on one core while the loop's core idles between its passes, because an idle
//! spell that short does not pull the waiting thread over. Together on one core they
//! take turns instead (the loop reads a pass of requests and sleeps, the handler serves
//! them and sleeps), and the rest of the machine is left to the rest. That wins only while
//! the worker needs less than a core: an app whose Python keeps a core busy loses the
//! share of it its loop takes (benchmarks/decisions.md, "`--cpu-affinity`").
//!
//! Only the loop is pinned, which never runs Python: the handler, and every thread and
//! process the app starts from it, keep the CPUs they had, so the app's view of them
//! (`os.sched_getaffinity`, `os.process_cpu_count`) does not change. The handler
//! publishes the CPU it is on each time it takes up work, and the loop, beside it, looks
//! every [`FOLLOW_EVERY`] and goes after it when the kernel has moved it.
//!
//! So on its first pass after each [`WINDOW`] (a window is as long as the loop slept,
//! when it did) the loop judges from the worker's CPU time, its own and its handler's,
//! and each CPU's from `/proc/stat` ([`Placement::judge`]):
//!
//! - apart, it pins itself to the CPU the handler is on after two windows in a row (quiet
//!   ones between them aside, below) in which
//!   the worker used half a core or more ([`MIN_USE`]) but less than [`PIN_BELOW`] cores,
//!   and neither
//!   the loop nor its handler [`BUSY_THREAD`] of a core or more (a thread that fills a core
//!   by itself, a handler running a heavy app or a loop with many clients elsewhere, would
//!   only lose by sharing one);
//! - beside it, it lets itself go after [`SETTLE`] when their CPU is full ([`FULL`], by
//!   its ticks or by the two threads' own time) while another allowed CPU idles
//!   ([`SPARE`]), when other processes take [`CROWDED`] of their CPU, or when that CPU is
//!   gone, and from the first window when it had to follow the handler more than
//!   [`MAX_FOLLOWS`] times a second; then it waits [`HOLD_OFF`] (doubled each time, up to
//!   [`HOLD_OFF_MAX`], and back
//!   to the first after a pin that held that long) before it pins again, so a worker on
//!   the edge does not flap.
//!
//! The worker's use is counted over the part of a window it was awake: the loop's sleeps
//! of [`IDLE_GAP`] or more with no request at the handler are left out
//! ([`Reading::idle`]) of the loop's and handler's time (the app's own threads' is taken
//! over the whole window), so a worker whose traffic comes in bursts (a busy second
//! between seconds of quiet) is judged by its bursts, as a steady one is. Apart, a window
//! awake for less than [`MIN_ACTIVE`] neither counts towards pinning nor breaks the row;
//! beside the handler, one asleep for half of it or more is judged only by whether the two
//! threads filled their CPU while awake (its CPU's ticks are then mostly what others did
//! while the worker slept, which matters once it is busy again, and is judged then).
//!
//! Several workers each run their loop beside their own handler, where the kernel puts
//! that; two that share one CPU crowd each other and let go.

use std::time::{Duration, Instant};

use crate::sys::CpuTicks;

/// How long a window is, at least.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);
/// Beside the handler: how often the loop looks where the handler runs now.
pub(crate) const FOLLOW_EVERY: Duration = Duration::from_millis(2);
/// Beside the handler: more moves after it than this a second, and the loop lets it go
/// (the kernel keeps waking the handler elsewhere: chasing it is no pairing).
pub(crate) const MAX_FOLLOWS: f64 = 50.0;
/// Apart: pin when the worker used less than this many cores, ...
pub(crate) const PIN_BELOW: f64 = 1.2;
/// ... and at least this many (an idle worker stays as it is), ...
pub(crate) const MIN_USE: f64 = 0.5;
/// ... and none of its loop and handler threads this much of a core.
pub(crate) const BUSY_THREAD: f64 = 0.85;
/// Pinned: no judgement this long after pinning.
pub(crate) const SETTLE: Duration = Duration::from_secs(3);
/// Pinned: its CPU counts as full below this idle share, ...
pub(crate) const FULL: f64 = 0.1;
/// ... and another CPU as spare from this idle share.
pub(crate) const SPARE: f64 = 0.3;
/// Pinned: others (busy time on its CPU beyond the worker's own) above this share crowd it.
pub(crate) const CROWDED: f64 = 0.3;
/// After letting go: no pinning again for this long at first, ...
pub(crate) const HOLD_OFF: Duration = Duration::from_secs(30);
/// ... doubled at each letting go, up to this.
pub(crate) const HOLD_OFF_MAX: Duration = Duration::from_secs(480);

/// A sleep of the loop this long or longer, with no request at its handler, is the
/// worker idling: the window's share of it is left out of the worker's use
/// ([`Reading::idle`]). Long enough that the gaps of a steady trickle of requests (four a
/// second or more) are not taken for quiet: that would judge a worker by how heavy one
/// request is rather than by how busy it is.
pub(crate) const IDLE_GAP: Duration = Duration::from_millis(250);
/// Apart: a window in which the worker was active (the window less its idle) for less
/// than this says nothing of whether pinning suits it, ...
pub(crate) const MIN_ACTIVE: Duration = Duration::from_millis(250);
// ... and pinned, one idle for half of it or more says nothing of its CPU (whose ticks
// over the window are then mostly other processes' time while the worker slept), but
// for whether its two threads filled it while awake.

/// One reading: when, the worker's CPU time so far, its loop's and its handler's (in the
/// same order every time), every CPU's ticks so far, and how long the loop slept since
/// the last reading in sleeps of [`IDLE_GAP`] or more with no request at the handler.
#[derive(Clone, Debug)]
pub(crate) struct Reading {
    pub(crate) at: Instant,
    pub(crate) used: Duration,
    pub(crate) threads: Vec<Duration>,
    pub(crate) cpus: Vec<CpuTicks>,
    pub(crate) idle: Duration,
}

/// What the loop is to do with itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Move {
    Stay,
    /// Pin the loop to this CPU, its handler's.
    Pin(usize),
    /// Let it run on every allowed CPU again, for this reason.
    Spread(&'static str),
}

/// The state of one worker's placement.
#[derive(Debug)]
pub(crate) struct Placement {
    /// The CPUs the worker may run on (its handler's).
    allowed: Vec<usize>,
    pinned: Option<usize>,
    /// Since when, and the hold-off before that pin (for `spread_failed`).
    pinned_at: Instant,
    hold_off_before: Duration,
    /// The CPU of the last spread, until the next judgement.
    spread_from: Option<usize>,
    /// No move before this.
    quiet_until: Instant,
    hold_off: Duration,
    last: Option<Reading>,
    /// Windows in a row, apart, in which pinning suited (quiet ones between not counted).
    suited: u32,
    /// Moves after the handler since the last judgement.
    follows: u32,
}

impl Placement {
    /// For a worker that may run on `allowed`; `None` when that is one CPU (nothing to
    /// choose).
    pub(crate) fn new(allowed: Vec<usize>, now: Instant) -> Option<Placement> {
        (allowed.len() > 1).then_some(Placement {
            allowed,
            pinned: None,
            pinned_at: now,
            hold_off_before: HOLD_OFF,
            spread_from: None,
            quiet_until: now,
            hold_off: HOLD_OFF,
            last: None,
            suited: 0,
            follows: 0,
        })
    }

    /// The CPUs to spread over.
    pub(crate) fn allowed(&self) -> &[usize] {
        &self.allowed
    }

    /// The CPUs the worker may run on now (read each window from the handler: `taskset`
    /// may have narrowed them since).
    pub(crate) fn set_allowed(&mut self, cpus: Vec<usize>) {
        if !cpus.is_empty() {
            self.allowed = cpus;
        }
    }

    /// Whether the next judgement uses each CPU's ticks: while pinned, and for the
    /// window that may pin (its reading is the first a pinned judgement compares with).
    pub(crate) fn wants_cpu_ticks(&self) -> bool {
        self.pinned.is_some() || self.suited >= 1
    }

    pub(crate) fn pinned(&self) -> Option<usize> {
        self.pinned
    }

    /// Pinned: the loop went after its handler to `cpu`.
    pub(crate) fn followed(&mut self, cpu: usize) {
        if self.pinned.is_some() {
            self.pinned = Some(cpu);
            self.follows += 1;
        }
    }

    /// Whether a window has passed since the last reading (the loop's cheap check).
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.last.as_ref().is_none_or(|l| now >= l.at + WINDOW)
    }

    /// Takes a reading; `on` is the CPU the handler runs on now. The caller makes the move
    /// and, if it fails, calls [`failed`](Self::failed) (a pin) or
    /// [`spread_failed`](Self::spread_failed).
    pub(crate) fn judge(&mut self, now: Reading, on: Option<usize>) -> Move {
        self.spread_from = None;
        let follows = std::mem::take(&mut self.follows);
        let Some(last) = self.last.replace(now.clone()) else {
            return Move::Stay;
        };
        let at = now.at;
        let secs = at.saturating_duration_since(last.at).as_secs_f64();
        if secs > 0.0 && self.pinned.is_some() && f64::from(follows) / secs > MAX_FOLLOWS {
            // Chasing the handler is judged from the first window: no settling for it.
            self.spread(at);
            return Move::Spread("the kernel keeps moving its handler");
        }
        if secs <= 0.0 || at < self.quiet_until {
            self.suited = 0;
            return Move::Stay;
        }
        let idle = now.idle.as_secs_f64().min(secs);
        let active = secs - idle;
        // CPU seconds in the window: the whole worker's, and its loop's and handler's, which
        // work only while it is awake (the app's own threads run whenever they like).
        let cpu_all = now.used.saturating_sub(last.used).as_secs_f64();
        let cpu_pair: f64 = threads_share(&now, &last, 1.0).sum();
        let Some(cpu) = self.pinned else {
            // A worker busy for a second between seconds of quiet (traffic in bursts) is
            // judged by its bursts, and a window nearly all quiet neither counts towards
            // pinning nor against it.
            if active < MIN_ACTIVE.as_secs_f64() {
                return Move::Stay;
            }
            let used = cpu_pair / active + (cpu_all - cpu_pair).max(0.0) / secs;
            let busiest = threads_share(&now, &last, active).fold(0.0, f64::max);
            if (MIN_USE..PIN_BELOW).contains(&used) && busiest < BUSY_THREAD {
                self.suited += 1;
            } else {
                self.suited = 0;
            }
            return match on {
                Some(cpu) if self.suited >= 2 && self.allowed.contains(&cpu) => {
                    self.suited = 0;
                    self.pinned = Some(cpu);
                    self.pinned_at = at;
                    self.quiet_until = at + SETTLE;
                    Move::Pin(cpu)
                }
                _ => Move::Stay,
            };
        };
        // A CPU's (busy, idle) shares over the window.
        let shares = |c: usize| {
            let a = last.cpus.iter().find(|t| t.cpu == c)?;
            let b = now.cpus.iter().find(|t| t.cpu == c)?;
            let total = b.total.saturating_sub(a.total);
            (total > 0).then(|| {
                let share = |x: u64, y: u64| y.saturating_sub(x) as f64 / total as f64;
                (share(a.busy, b.busy), share(a.idle, b.idle))
            })
        };
        if now.cpus.is_empty() {
            // /proc/stat unreadable this time: no judgement.
            return Move::Stay;
        }
        if !now.cpus.iter().any(|t| t.cpu == cpu) {
            // Offline: nothing says staying is right.
            self.spread(at);
            return Move::Spread("its CPU is gone from /proc/stat");
        }
        let Some((busy_here, idle_here)) = shares(cpu) else {
            return Move::Stay;
        };
        let spare_elsewhere = self
            .allowed
            .iter()
            .filter(|&&c| c != cpu)
            .filter_map(|&c| shares(c))
            .any(|(_, idle)| idle >= SPARE);
        // Mostly asleep, its CPU's ticks are mostly what others did meanwhile (judged when
        // the worker is busy again): then only whether the two threads filled their CPU
        // while awake (bursts shorter than a window) is judged.
        let asleep = idle * 2.0 >= secs;
        if asleep && active < MIN_ACTIVE.as_secs_f64() {
            return Move::Stay;
        }
        // The threads' own time: beside each other they fill the CPU they share (whichever
        // it was: the kernel may have moved the handler, and the loop after it, during the
        // window, splitting the ticks between two CPUs).
        let own = cpu_pair / if asleep { active } else { secs };
        let full = own >= 1.0 - FULL || (!asleep && idle_here < FULL);
        let why = if !asleep && busy_here - cpu_all / secs >= CROWDED {
            "other processes take much of its CPU"
        } else if full && spare_elsewhere {
            "its CPU is full while another idles"
        } else {
            return Move::Stay;
        };
        self.spread(at);
        Move::Spread(why)
    }

    /// The move could not be made, or something else moved the loop: it is left apart (or
    /// where that put it), and pinning waits as after letting go.
    pub(crate) fn failed(&mut self, at: Instant) {
        self.spread(at);
    }

    /// Letting go could not be done: the loop is still pinned, to be judged again at the
    /// next window as before.
    pub(crate) fn spread_failed(&mut self) {
        if let Some(cpu) = self.spread_from.take() {
            self.pinned = Some(cpu);
            self.hold_off = self.hold_off_before;
            self.quiet_until = self.last.as_ref().map_or(self.pinned_at, |l| l.at);
        }
    }

    fn spread(&mut self, at: Instant) {
        self.spread_from = self.pinned.take();
        self.hold_off_before = self.hold_off;
        self.suited = 0;
        if at.saturating_duration_since(self.pinned_at) >= HOLD_OFF_MAX {
            // A pin that held this long was no flapping.
            self.hold_off = HOLD_OFF;
        }
        self.quiet_until = at + self.hold_off;
        self.hold_off = (self.hold_off * 2).min(HOLD_OFF_MAX);
    }
}

/// Each thread's share of a core between two readings `secs` apart.
fn threads_share<'a>(
    now: &'a Reading,
    last: &'a Reading,
    secs: f64,
) -> impl Iterator<Item = f64> + 'a {
    now.threads
        .iter()
        .zip(&last.threads)
        .map(move |(b, a)| b.saturating_sub(*a).as_secs_f64() / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a placement readings one window apart: the worker's CPU use in the window
    /// (its busiest thread half of it unless said), and each CPU's (busy, idle) share of
    /// 100 ticks (the rest interrupt time). The handler runs on CPU `on`.
    struct Driver {
        p: Placement,
        on: usize,
        at: Instant,
        used: Duration,
        busiest: Duration,
        ticks: Vec<CpuTicks>,
        idle: Duration,
    }

    /// A light worker beside a busy client: 0.6 of a core, CPU 0 60 % idle, CPU 1 90 %.
    const LIGHT: (f64, [(u64, u64); 2]) = (0.6, [(40, 60), (10, 90)]);
    /// Its CPU full, the other nearly idle.
    const FULL_BESIDE_SPARE: (f64, [(u64, u64); 2]) = (1.0, [(100, 0), (5, 95)]);

    impl Driver {
        /// Two CPUs, the first reading taken.
        fn new(on: usize) -> Driver {
            let at = Instant::now();
            let mut d = Driver {
                p: Placement::new(vec![0, 1], at).unwrap(),
                on,
                at,
                used: Duration::ZERO,
                busiest: Duration::ZERO,
                idle: Duration::ZERO,
                ticks: (0..2)
                    .map(|cpu| CpuTicks {
                        cpu,
                        busy: 0,
                        idle: 0,
                        total: 0,
                    })
                    .collect(),
            };
            let first = d.reading();
            assert_eq!(d.p.judge(first, Some(on)), Move::Stay);
            d
        }

        fn reading(&self) -> Reading {
            Reading {
                at: self.at,
                used: self.used,
                threads: vec![self.busiest],
                cpus: self.ticks.clone(),
                idle: self.idle,
            }
        }

        fn window(&mut self, (used, shares): (f64, [(u64, u64); 2])) -> Move {
            self.window_with(used, used / 2.0, shares)
        }

        fn window_with(&mut self, used: f64, busiest: f64, shares: [(u64, u64); 2]) -> Move {
            self.span(WINDOW, Duration::ZERO, used, busiest, shares)
        }

        /// A window `len` long in which the loop slept `idle` in long sleeps; `used` and
        /// `busiest` are CPU seconds, the ticks as in `window_with`.
        fn span(
            &mut self,
            len: Duration,
            idle: Duration,
            used: f64,
            busiest: f64,
            shares: [(u64, u64); 2],
        ) -> Move {
            self.at += len;
            self.idle = idle;
            self.used += Duration::from_secs_f64(used);
            self.busiest += Duration::from_secs_f64(busiest);
            for (t, (busy, idle)) in self.ticks.iter_mut().zip(shares) {
                t.busy += busy;
                t.idle += idle;
                t.total += 100.max(busy + idle);
            }
            let r = self.reading();
            self.p.judge(r, Some(self.on))
        }

        /// `n` windows, each `Stay`.
        fn stays(&mut self, n: usize, w: (f64, [(u64, u64); 2])) {
            for i in 0..n {
                assert_eq!(self.window(w), Move::Stay, "window {i} of {n}");
            }
        }

        /// Light windows until pinned, which must take exactly two.
        fn pin(&mut self) {
            assert_eq!(self.window(LIGHT), Move::Stay);
            assert_eq!(self.window(LIGHT), Move::Pin(self.on));
            assert_eq!(self.p.pinned(), Some(self.on));
        }

        /// Through the settling time, then spread for its CPU filling up.
        fn spread_when_full(&mut self) {
            self.stays(2, FULL_BESIDE_SPARE);
            assert_eq!(
                self.window(FULL_BESIDE_SPARE),
                Move::Spread("its CPU is full while another idles")
            );
            assert_eq!(self.p.pinned(), None);
        }

        /// The loop went after the handler `n` times, back and forth between CPUs 0 and 1.
        fn chase(&mut self, n: usize) {
            for cpu in (0..n).map(|i| i % 2) {
                self.p.followed(cpu);
            }
        }

        /// Light windows: no pin for `secs` windows (the hold-off), then pinned.
        fn held_off_for(&mut self, secs: usize) {
            self.stays(secs - 1, LIGHT);
            self.pin();
        }
    }

    #[test]
    fn one_cpu_has_nothing_to_place() {
        assert!(Placement::new(vec![3], Instant::now()).is_none());
    }

    #[test]
    fn pins_after_two_windows_under_a_core_and_stays_while_the_others_are_busy() {
        let mut d = Driver::new(1);
        // Hello world beside its load generator: 0.94 cores apart, no thread near a core.
        assert_eq!(d.window((0.94, [(80, 10), (60, 30)])), Move::Stay);
        assert_eq!(d.window((0.95, [(80, 10), (60, 30)])), Move::Pin(1));
        // Pinned: its CPU full, the other one busy too: it stays, also after settling.
        d.stays(10, (0.9, [(90, 0), (90, 5)]));
    }

    #[test]
    fn a_thread_filling_a_core_or_an_idle_or_busy_worker_is_not_pinned() {
        let mut d = Driver::new(0);
        for _ in 0..5 {
            // Flask: its handler alone keeps a core busy (1.06-1.10 cores apart).
            assert_eq!(d.window_with(1.07, 0.99, [(100, 0), (20, 75)]), Move::Stay);
            // A loop with its clients elsewhere, filling a core by itself.
            assert_eq!(d.window_with(0.95, 0.9, [(95, 0), (5, 90)]), Move::Stay);
        }
        // More than 1.2 cores, however spread; idle.
        d.stays(5, (1.3, [(70, 30), (70, 30)]));
        d.stays(5, (0.001, [(0, 100), (0, 100)]));
        // Under 1.2 cores between windows over it: never two in a row.
        for used in [0.9, 1.3, 0.9, 1.3] {
            assert_eq!(d.window((used, [(90, 10), (30, 70)])), Move::Stay);
        }
    }

    #[test]
    fn a_full_cpu_beside_a_spare_one_spreads_after_settling_then_holds_off() {
        let mut d = Driver::new(0);
        d.pin();
        d.spread_when_full();
        // No pinning during the hold-off (30 s), then again; the next one is twice as long.
        d.held_off_for(30);
        d.spread_when_full();
        d.held_off_for(60);
    }

    #[test]
    fn threads_filling_a_core_spread_when_the_kernel_split_their_cpu_time() {
        let mut d = Driver::new(0);
        d.pin();
        d.stays(2, LIGHT);
        // The handler took 0.95 of a core, moved by the kernel each half window (the loop
        // after it): each CPU half busy, neither full by its ticks; another may take them.
        assert_eq!(
            d.window_with(1.0, 0.95, [(50, 50), (50, 50)]),
            Move::Spread("its CPU is full while another idles")
        );
    }

    #[test]
    fn under_half_a_core_is_not_pinned() {
        let mut d = Driver::new(0);
        // Apart, each thread finds a core idle when it wakes.
        d.stays(5, (0.4, [(40, 60), (10, 90)]));
    }

    #[test]
    fn a_handler_the_kernel_keeps_moving_is_let_go() {
        let mut d = Driver::new(0);
        // In the first window after pinning (no settling for this).
        let chased = Move::Spread("the kernel keeps moving its handler");
        d.pin();
        d.chase(51);
        assert_eq!(d.window(LIGHT), chased);
        // And later, over a limit of 50 a second.
        d.held_off_for(30);
        d.stays(2, LIGHT);
        d.chase(50);
        d.stays(1, LIGHT);
        d.chase(51);
        assert_eq!(d.window(LIGHT), chased);
        // Apart, a move after the handler is none.
        d.p.followed(1);
        assert_eq!(d.p.pinned(), None);
    }

    #[test]
    fn others_crowding_its_cpu_spread_it() {
        let mut d = Driver::new(1);
        d.pin();
        d.stays(2, LIGHT);
        // Another process lands on CPU 1 and takes 60 % of it; CPU 0 is busy too (so
        // "full beside spare" does not apply): crowded.
        assert_eq!(
            d.window((0.3, [(95, 5), (90, 10)])),
            Move::Spread("other processes take much of its CPU")
        );
    }

    #[test]
    fn a_pinned_cpu_gone_from_proc_stat_spreads() {
        let mut d = Driver::new(1);
        d.pin();
        d.stays(2, LIGHT);
        d.at += WINDOW;
        let mut r = d.reading();
        r.cpus.retain(|t| t.cpu != 1);
        assert!(matches!(d.p.judge(r, Some(1)), Move::Spread(_)));
        assert_eq!(d.p.pinned(), None);
    }

    #[test]
    fn an_unreadable_proc_stat_judges_nothing() {
        let mut d = Driver::new(0);
        d.pin();
        d.stays(2, LIGHT);
        for _ in 0..3 {
            d.at += WINDOW;
            let mut r = d.reading();
            r.cpus.clear();
            assert_eq!(d.p.judge(r, Some(0)), Move::Stay);
        }
        assert_eq!(d.p.pinned(), Some(0));
        // Readable again: judged as before (a baseline first).
        d.stays(1, FULL_BESIDE_SPARE);
        assert!(matches!(d.window(FULL_BESIDE_SPARE), Move::Spread(_)));
    }

    #[test]
    fn interrupt_time_is_neither_idle_nor_anyones() {
        let mut d = Driver::new(0);
        d.pin();
        // Its CPU: 75 ticks of its own threads, 25 of softirq (loopback receives), none
        // idle; the other: the client, 10 idle. Neither crowded nor spare elsewhere.
        d.stays(10, (0.75, [(75, 0), (90, 10)]));
    }

    #[test]
    fn a_failed_pin_holds_off_like_a_spread() {
        let mut d = Driver::new(0);
        d.pin();
        d.p.failed(d.at);
        assert_eq!(d.p.pinned(), None);
        d.held_off_for(30);
    }

    #[test]
    fn a_failed_spread_stays_pinned_and_is_judged_again() {
        let mut d = Driver::new(0);
        d.pin();
        d.spread_when_full();
        d.p.spread_failed();
        assert_eq!(d.p.pinned(), Some(0));
        assert!(matches!(d.window(FULL_BESIDE_SPARE), Move::Spread(_)));
        // The hold-off after it is the first one, not doubled by the failed try.
        d.held_off_for(30);
    }

    #[test]
    fn a_long_pin_resets_the_hold_off() {
        let mut d = Driver::new(0);
        // Flapping: the hold-off grows to 240 s.
        for hold in [30, 60, 120] {
            d.pin();
            d.spread_when_full();
            d.stays(hold - 1, LIGHT);
        }
        // Then a pin that holds ten minutes: the next hold-off is 30 s again.
        d.pin();
        d.stays(600, LIGHT);
        assert!(matches!(d.window(FULL_BESIDE_SPARE), Move::Spread(_)));
        d.held_off_for(30);
    }

    /// Traffic in bursts: a second of light load, four of quiet, and again.
    const QUIET: Duration = Duration::from_secs(4);

    #[test]
    fn a_worker_busy_in_bursts_is_judged_by_its_bursts() {
        let mut d = Driver::new(1);
        // A light second, then a quiet window (judged at the first pass after it):
        // the quiet neither counts nor undoes the light second before it.
        assert_eq!(d.window(LIGHT), Move::Stay);
        assert_eq!(
            d.span(QUIET, QUIET, 0.0, 0.0, [(40, 360), (40, 360)]),
            Move::Stay
        );
        assert_eq!(d.window(LIGHT), Move::Pin(1));

        // A window of a light second and the quiet after it (the pass that judges it came
        // only with the next burst) is judged by that second: two such, and it pins.
        let mut d = Driver::new(0);
        let burst_then_quiet = Duration::from_secs(5);
        // (The driver's one thread stands for the loop and handler: all of the worker's
        // time is theirs, spent while it was awake.)
        let shares = [(80, 420), (50, 450)];
        assert_eq!(
            d.span(burst_then_quiet, QUIET, 0.6, 0.6, shares),
            Move::Stay
        );
        assert_eq!(
            d.span(burst_then_quiet, QUIET, 0.6, 0.6, shares),
            Move::Pin(0)
        );
        // The app's own threads' time is taken over the whole window: a worker whose
        // loop and handler used 0.1 s in its awake second, and its other threads 0.75 s
        // in the five (0.15 of a core, quiet or not), uses 0.25 of a core, not 0.85.
        let mut d = Driver::new(0);
        for _ in 0..3 {
            assert_eq!(
                d.span(burst_then_quiet, QUIET, 0.85, 0.1, shares),
                Move::Stay
            );
        }

        // A tenth of a second of work is too little to judge by, however busy.
        let mut d = Driver::new(0);
        let short = Duration::from_millis(900);
        d.stays(1, LIGHT);
        assert_eq!(
            d.span(WINDOW, short, 0.09, 0.05, [(10, 90), (5, 95)]),
            Move::Stay
        );
        assert_eq!(d.window(LIGHT), Move::Pin(0));
    }

    #[test]
    fn a_pinned_worker_asleep_is_judged_when_it_is_busy_again() {
        let mut d = Driver::new(0);
        d.pin();
        d.stays(3, LIGHT);
        // Others fill its CPU while it sleeps: nothing it meets, so it stays ...
        for _ in 0..3 {
            assert_eq!(
                d.span(QUIET, QUIET, 0.0, 0.0, [(380, 20), (40, 360)]),
                Move::Stay
            );
        }
        // ... until it meets them, busy itself.
        assert_eq!(
            d.window((0.6, [(95, 5), (10, 90)])),
            Move::Spread("other processes take much of its CPU")
        );
    }

    #[test]
    fn a_pinned_worker_whose_short_bursts_fill_its_cpu_is_let_go() {
        let mut d = Driver::new(1);
        d.pin();
        d.stays(3, LIGHT);
        // Half a second of work in each two-second window, its threads filling their CPU
        // for it while the other CPU idles.
        let (len, idle) = (Duration::from_secs(2), Duration::from_millis(1500));
        assert_eq!(
            d.span(len, idle, 0.49, 0.49, [(5, 195), (60, 140)]),
            Move::Spread("its CPU is full while another idles")
        );
        // The same half second at a light load stays.
        let mut d = Driver::new(1);
        d.pin();
        d.stays(3, LIGHT);
        assert_eq!(
            d.span(len, idle, 0.3, 0.3, [(5, 195), (40, 160)]),
            Move::Stay
        );
    }

    // The end-to-end scenario of tests/affinity.rs
    // (`by_default_the_loop_runs_beside_a_light_handler_...`, now run by hand only), as
    // recorded readings: one worker with one handler on a two-CPU host, its loop and
    // handler threads' CPU time, each CPU's ticks (100 a second) and no idle sleeps. On a
    // quiet host the loop pins beside the handler, follows it, and is let go when the
    // handler fills its CPU; on a host other processes load, the same worker is pinned and
    // then let go for the crowding, or kept pinned when no CPU is spare. These are the
    // decisions that test saw or failed on.

    /// Cumulative readings built from one window at a time, with the loop's and the
    /// handler's threads apart.
    struct Recorded {
        p: Placement,
        at: Instant,
        used: Duration,
        /// The loop's, then the handler's CPU time.
        threads: [Duration; 2],
        ticks: [CpuTicks; 2],
    }

    /// One window of the scenario: CPU seconds of the loop, of the handler, and of the
    /// worker's other threads; each CPU's (busy, idle) ticks of 100.
    struct Window {
        loop_s: f64,
        handler_s: f64,
        others_s: f64,
        cpus: [(u64, u64); 2],
    }

    impl Recorded {
        fn new() -> Recorded {
            let at = Instant::now();
            let tick = |cpu| CpuTicks {
                cpu,
                busy: 0,
                idle: 0,
                total: 0,
            };
            let mut r = Recorded {
                p: Placement::new(vec![0, 1], at).unwrap(),
                at,
                used: Duration::ZERO,
                threads: [Duration::ZERO; 2],
                ticks: [tick(0), tick(1)],
            };
            assert_eq!(
                r.judge(Some(1)),
                Move::Stay,
                "the first reading is a baseline"
            );
            r
        }

        fn judge(&mut self, on: Option<usize>) -> Move {
            let reading = Reading {
                at: self.at,
                used: self.used,
                threads: self.threads.to_vec(),
                cpus: self.ticks.to_vec(),
                idle: Duration::ZERO,
            };
            self.p.judge(reading, on)
        }

        /// A window of one second with the handler on CPU `on`; the decision.
        fn window(&mut self, w: &Window, on: usize) -> Move {
            self.at += WINDOW;
            let secs = Duration::from_secs_f64;
            self.threads[0] += secs(w.loop_s);
            self.threads[1] += secs(w.handler_s);
            self.used += secs(w.loop_s + w.handler_s + w.others_s);
            for (t, (busy, idle)) in self.ticks.iter_mut().zip(w.cpus) {
                t.busy += busy;
                t.idle += idle;
                t.total += 100;
            }
            self.judge(Some(on))
        }

        /// `n` windows, each `Stay`.
        fn stays(&mut self, n: usize, w: &Window, on: usize) {
            for i in 0..n {
                assert_eq!(self.window(w, on), Move::Stay, "window {i} of {n}");
            }
        }
    }

    /// `/spin?ms=2` then 1 ms of quiet, from one client: the handler 0.6 of a core, the
    /// loop 0.08. Apart on a quiet host: the handler on CPU 1, the loop and the client on
    /// CPU 0.
    const LIGHT_APART_QUIET: Window = Window {
        loop_s: 0.08,
        handler_s: 0.6,
        others_s: 0.0,
        cpus: [(45, 55), (62, 38)],
    };
    /// The same, pinned together on CPU 1; the client alone on CPU 0.
    const LIGHT_BESIDE_QUIET: Window = Window {
        loop_s: 0.08,
        handler_s: 0.6,
        others_s: 0.0,
        cpus: [(35, 65), (70, 30)],
    };
    /// Three clients without pause, pinned together on CPU 1: the handler keeps it full;
    /// the clients take 45 % of CPU 0.
    const HEAVY_BESIDE_QUIET: Window = Window {
        loop_s: 0.07,
        handler_s: 0.93,
        others_s: 0.0,
        cpus: [(45, 55), (100, 0)],
    };

    #[test]
    fn recorded_on_a_quiet_host_the_loop_pins_beside_a_light_handler_follows_it_and_is_let_go_when_it_fills_its_cpu(
    ) {
        let mut r = Recorded::new();
        // Two light windows apart: pinned beside the handler (0.68 of a core, no thread
        // near a whole one).
        assert_eq!(r.window(&LIGHT_APART_QUIET, 1), Move::Stay);
        assert_eq!(r.window(&LIGHT_APART_QUIET, 1), Move::Pin(1));
        // Beside it, light: it stays, through the settling time and after.
        r.stays(6, &LIGHT_BESIDE_QUIET, 1);
        // The handler sent to CPU 0: the loop goes after it (once, far under the limit of
        // MAX_FOLLOWS a second), and stays there.
        r.p.followed(0);
        assert_eq!(r.p.pinned(), Some(0));
        let mirrored = Window {
            cpus: [LIGHT_BESIDE_QUIET.cpus[1], LIGHT_BESIDE_QUIET.cpus[0]],
            ..LIGHT_BESIDE_QUIET
        };
        r.stays(3, &mirrored, 0);
        r.p.followed(1);
        r.stays(3, &LIGHT_BESIDE_QUIET, 1);
        // The handler fills the CPU while the other idles: let go at the first window.
        assert_eq!(
            r.window(&HEAVY_BESIDE_QUIET, 1),
            Move::Spread("its CPU is full while another idles")
        );
        assert_eq!(r.p.pinned(), None);
        // And not pinned again under the heavy load, nor (held off) under a light one.
        r.stays(5, &HEAVY_BESIDE_QUIET, 1);
        r.stays(20, &LIGHT_APART_QUIET, 1);
    }

    #[test]
    fn recorded_on_a_loaded_host_the_loop_is_pinned_then_let_go_for_the_crowding() {
        // Other processes keep both CPUs 95 % busy; the light worker still gets its 0.68 of
        // a core (apart: it is judged by its own use, not by the host's).
        let light_apart_loaded = Window {
            cpus: [(95, 5), (96, 4)],
            ..LIGHT_APART_QUIET
        };
        let mut r = Recorded::new();
        assert_eq!(r.window(&light_apart_loaded, 1), Move::Stay);
        assert_eq!(r.window(&light_apart_loaded, 1), Move::Pin(1));
        // Beside the handler its CPU is full, 0.32 of it other processes': once settled,
        // the loop is let go (where the end-to-end test expected it to stay pinned).
        let light_beside_loaded = Window {
            cpus: [(96, 4), (100, 0)],
            ..LIGHT_BESIDE_QUIET
        };
        r.stays(2, &light_beside_loaded, 1);
        assert_eq!(
            r.window(&light_beside_loaded, 1),
            Move::Spread("other processes take much of its CPU")
        );
        // Then held off: not pinned again for HOLD_OFF, however light.
        r.stays(25, &light_apart_loaded, 1);
    }

    #[test]
    fn recorded_on_a_loaded_host_a_full_cpu_with_none_spare_stays_pinned() {
        // Others take a quarter of the CPU it is pinned to (under CROWDED) and nearly all
        // of the other one.
        let light_apart = Window {
            cpus: [(95, 5), (90, 10)],
            ..LIGHT_APART_QUIET
        };
        let light_beside = Window {
            cpus: [(95, 5), (93, 7)],
            ..LIGHT_BESIDE_QUIET
        };
        let heavy_beside = Window {
            cpus: [(95, 5), (100, 0)],
            ..HEAVY_BESIDE_QUIET
        };
        let mut r = Recorded::new();
        assert_eq!(r.window(&light_apart, 1), Move::Stay);
        assert_eq!(r.window(&light_apart, 1), Move::Pin(1));
        r.stays(5, &light_beside, 1);
        // The handler fills its CPU, but no other CPU is spare: nothing better to go to, it
        // stays pinned (where the end-to-end test expected it let go).
        r.stays(10, &heavy_beside, 1);
        assert_eq!(r.p.pinned(), Some(1));
    }
}
