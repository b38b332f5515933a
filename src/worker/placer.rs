//! `--cpu-affinity adaptive`'s driver on the loop thread: it takes the readings
//! `placement.rs` judges (the threads' CPU times, `/proc/stat`, how long the loop idled),
//! carries out its moves (pinning the loop beside its one handler thread, or letting it
//! run on every allowed CPU), and follows the handler while beside it.

// Its shape is kept (clippy.toml), as the loop's: no function over 80 lines, no block
// nested deeper than 4.
#![warn(clippy::too_many_lines, clippy::excessive_nesting)]

use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::log;
use crate::pipeline::shared::HandlerShared;
use crate::worker::placement::{Move, Placement, Reading, FOLLOW_EVERY, IDLE_GAP};

/// The one handler thread the loop is placed beside.
pub(crate) struct Handler<'a> {
    pub(crate) join: &'a JoinHandle<()>,
    pub(crate) shared: &'a HandlerShared,
}

/// What a tick did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Tick {
    /// Nothing, or nothing that moved the loop beside its handler.
    Nothing,
    /// The loop was pinned beside its handler (counted as a move).
    Moved,
    /// The handler is gone: the placement is over (the loop runs on every allowed CPU).
    Over,
}

pub(crate) struct Placer {
    placement: Placement,
    /// `/proc/stat`, held open.
    proc_stat: crate::sys::ProcStat,
    /// While the loop runs beside its handler: when it next looks where that runs.
    follow_at: Instant,
    /// How long the loop slept since the placement's last reading, in sleeps of
    /// `IDLE_GAP` or more with no request at the handler (`Reading::idle`).
    idle: Duration,
}

impl Placer {
    /// The placement, or none (one CPU to run on, or what it needs unreadable: said in
    /// the log).
    pub(crate) fn new(handler: Handler<'_>) -> Option<Placer> {
        let cpus = match crate::sys::thread_cpus(handler.join) {
            Ok(cpus) => cpus,
            Err(e) => {
                log::warning!("--cpu-affinity adaptive: cannot read this worker's CPUs ({e}): off");
                return None;
            }
        };
        let Some(placement) = Placement::new(cpus, Instant::now()) else {
            log::debug!("--cpu-affinity adaptive: one CPU to run on, nothing to place");
            return None;
        };
        let mut proc_stat = match crate::sys::ProcStat::open() {
            Ok(stat) => stat,
            Err(e) => {
                log::warning!("--cpu-affinity adaptive: cannot open /proc/stat ({e}): off");
                return None;
            }
        };
        // Where /proc/stat does not list the CPUs as the affinity numbers them (a container
        // with a virtualised /proc), no CPU could be judged.
        let listed = proc_stat.cpu_ticks().is_ok_and(|ticks| {
            placement
                .allowed()
                .iter()
                .all(|c| ticks.iter().any(|t| t.cpu == *c))
        });
        if !listed {
            log::debug!(
                "--cpu-affinity adaptive: /proc/stat does not list this worker's CPUs: off"
            );
            return None;
        }
        // Relaxed: see `HandlerShared::cpu`.
        handler.shared.placing.store(true, Ordering::Relaxed);
        Some(Placer {
            placement,
            proc_stat,
            follow_at: Instant::now(),
            idle: Duration::ZERO,
        })
    }

    /// A pass begins: judges a window that has passed, or follows the handler.
    pub(crate) fn tick(&mut self, now: Instant, handler: Handler<'_>) -> Tick {
        if self.placement.due(now) {
            self.place(now, handler)
        } else if self.placement.pinned().is_some() && now >= self.follow_at {
            self.follow(now, handler)
        } else {
            Tick::Nothing
        }
    }

    /// The placement is over (the pool grew past one handler): the loop runs on every
    /// allowed CPU again.
    pub(crate) fn stop(&mut self) {
        if self.placement.pinned().is_some() {
            let _ = crate::sys::set_own_cpus(self.placement.allowed());
        }
    }

    /// The loop slept from `from` to `now` with no request at the handler: a long sleep
    /// is the worker idling (one while the handler runs a long request is not).
    pub(crate) fn slept(&mut self, from: Instant, now: Instant) {
        let gap = now.saturating_duration_since(from);
        if gap >= IDLE_GAP {
            self.idle += gap;
        }
    }

    /// A window has passed: judge it, and pin the loop beside its handler or let it go,
    /// as `Placement` says.
    fn place(&mut self, now: Instant, handler: Handler<'_>) -> Tick {
        if handler.join.is_finished() {
            // The handler is gone (it could not set up, or panicked): nothing to be beside,
            // and its handle no longer names a thread to ask.
            if self.placement.pinned().is_some() {
                let _ = crate::sys::set_own_cpus(self.placement.allowed());
            }
            return Tick::Over;
        }
        if self.moved_by_another(&handler, now) {
            return Tick::Nothing;
        }
        // Where the worker may run is where its handler may (the loop's own set is its
        // pin while beside it; `taskset` may have narrowed the handler's since).
        if let Ok(cpus) = crate::sys::thread_cpus(handler.join) {
            self.placement.set_allowed(cpus);
        }
        let reading = self.reading(now, &handler);
        // Relaxed: see `HandlerShared::cpu`.
        let handler_cpu =
            Some(handler.shared.cpu.load(Ordering::Relaxed)).filter(|&cpu| cpu != usize::MAX);
        let (moved, what) = match self.placement.judge(reading, handler_cpu) {
            Move::Stay => return Tick::Nothing,
            Move::Pin(cpu) => (
                crate::sys::pin_to_cpu(cpu),
                format!("beside its handler (CPU {cpu})"),
            ),
            Move::Spread(why) => (
                crate::sys::set_own_cpus(self.placement.allowed()),
                format!("on every allowed CPU ({why})"),
            ),
        };
        match (moved, self.placement.pinned()) {
            (Ok(()), pinned) => {
                // Relaxed: see `HandlerShared::cpu`.
                handler
                    .shared
                    .loop_beside
                    .store(pinned.is_some(), Ordering::Relaxed);
                self.follow_at = now + FOLLOW_EVERY;
                log::debug!("this worker's loop now runs {what}");
                if pinned.is_some() {
                    return Tick::Moved;
                }
            }
            (Err(e), Some(_)) => {
                // The loop is where it was: no pinning for a while.
                log::warning!("cannot run this worker's loop {what} ({e})");
                self.placement.failed(now);
            }
            (Err(e), None) => {
                // Still pinned; the next window tries again.
                log::warning!("cannot run this worker's loop {what} ({e})");
                self.placement.spread_failed();
            }
        }
        Tick::Nothing
    }

    /// The window's reading: CPU times, and /proc/stat only when the judgement uses it (an
    /// unreadable one judges nothing).
    fn reading(&mut self, now: Instant, handler: &Handler<'_>) -> Reading {
        let cpus = if self.placement.wants_cpu_ticks() {
            self.proc_stat.cpu_ticks().unwrap_or_else(|e| {
                log::warning!("--cpu-affinity adaptive: cannot read /proc/stat ({e})");
                Vec::new()
            })
        } else {
            Vec::new()
        };
        Reading {
            at: now,
            used: crate::sys::process_cpu_time(),
            threads: vec![
                crate::sys::own_cpu_time(),
                crate::sys::thread_cpu_time(handler.join).unwrap_or_default(),
            ],
            cpus,
            idle: std::mem::take(&mut self.idle),
        }
    }

    /// Beside the handler: the kernel may have moved the handler since; go after it.
    fn follow(&mut self, now: Instant, handler: Handler<'_>) -> Tick {
        self.follow_at = now + FOLLOW_EVERY;
        // Relaxed: see `HandlerShared::cpu`.
        let cpu = handler.shared.cpu.load(Ordering::Relaxed);
        if self.placement.pinned() == Some(cpu)
            || !self.placement.allowed().contains(&cpu)
            || self.moved_by_another(&handler, now)
        {
            return Tick::Nothing;
        }
        match crate::sys::pin_to_cpu(cpu) {
            Ok(()) => {
                self.placement.followed(cpu);
                Tick::Moved
            }
            Err(e) => {
                // Apart, then, and no pinning for a while.
                log::warning!("cannot run this worker's loop on CPU {cpu} ({e}); letting it go");
                if let Err(e) = crate::sys::set_own_cpus(self.placement.allowed()) {
                    log::warning!("cannot run this worker's loop on every allowed CPU ({e})");
                }
                self.left_apart(&handler, now);
                Tick::Nothing
            }
        }
    }

    /// Beside the handler: whether something else has set the loop's CPUs since it pinned
    /// itself (`taskset`, a cpuset, the CPU going offline); they are then left as they
    /// are, and pinning waits as after letting go.
    fn moved_by_another(&mut self, handler: &Handler<'_>, now: Instant) -> bool {
        let Some(cpu) = self.placement.pinned() else {
            return false;
        };
        if !crate::sys::allowed_cpus().is_ok_and(|own| own != [cpu]) {
            return false;
        }
        log::debug!("this worker's loop was moved off CPU {cpu}; leaving it there");
        self.left_apart(handler, now);
        true
    }

    /// The loop is no longer beside its handler by its own doing (a move failed, or
    /// something else moved it); pinning waits as after letting go.
    fn left_apart(&mut self, handler: &Handler<'_>, now: Instant) {
        self.placement.failed(now);
        // Relaxed: see `HandlerShared::cpu`.
        handler.shared.loop_beside.store(false, Ordering::Relaxed);
    }
}
