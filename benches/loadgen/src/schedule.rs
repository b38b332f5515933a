//! The open loop's schedule: when each request is due, which target's turn it falls in,
//! and the run's side of it: sending what is due on idle connections, opening and
//! closing turns (with the host's steal in each), and starting again after a warm-up.

use std::time::{Duration, Instant};

use crate::run::Run;
use crate::stats::Histogram;

/// An open loop's schedule: request k is due at `start + k / rate`, and goes to the target
/// whose turn it is then.
pub struct Schedule {
    pub start: Instant,
    pub rate: f64,
    /// The next request to send.
    pub next: u64,
    /// How many requests the run has: those due before its end.
    pub total: u64,
    /// How long a turn is (`--switch`); None: one target has the whole run.
    pub switch: Option<Duration>,
    /// The turn the last request sent fell in, and /proc/stat's jiffies when it began.
    pub turn: u64,
    pub turn_jiffies: Option<(u64, u64)>,
}

/// How many requests a schedule at `rate` has in `duration`: request k is due at k / rate
/// seconds, and those due before the end are sent.
pub fn requests_due(rate: f64, duration: Duration) -> u64 {
    (duration.as_secs_f64() * rate).ceil() as u64
}

impl Schedule {
    pub fn due(&self, k: u64) -> Instant {
        self.start + Duration::from_secs_f64(k as f64 / self.rate)
    }

    /// The turn a request due at `due` fell in (`due` is `self.due(k)` for its k).
    pub fn turn_at(&self, due: Instant) -> u64 {
        let k = (due.saturating_duration_since(self.start).as_secs_f64() * self.rate).round();
        self.turn_of(k as u64)
    }

    /// The turn request k falls in.
    pub fn turn_of(&self, k: u64) -> u64 {
        match self.switch {
            Some(sw) => (k as f64 / self.rate / sw.as_secs_f64()) as u64,
            None => 0,
        }
    }

    /// The steal share since the current turn began, and the jiffies now.
    pub fn steal_since_turn(&self) -> (Option<f64>, Option<(u64, u64)>) {
        let now = cpu_jiffies();
        let share = match (self.turn_jiffies, now) {
            (Some((s0, t0)), Some((s1, t1))) if t1 > t0 => {
                Some((s1.saturating_sub(s0)) as f64 / (t1 - t0) as f64)
            }
            _ => None,
        };
        (share, now)
    }
}

/// (steal, total) jiffies of all CPUs, from /proc/stat's first line.
pub fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest and guest_nice are in user).
    let steal = *v.get(7)?;
    Some((steal, v.iter().take(8).sum()))
}

impl Run {
    /// Open loop: sends every request due by `now` that finds an idle connection of the
    /// target whose turn it is.
    pub fn dispatch(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        loop {
            let Some(s) = self.schedule.as_ref() else {
                return;
            };
            let due = s.due(s.next);
            if due > now || s.next >= s.total {
                return;
            }
            let turn = s.turn_of(s.next);
            if turn != s.turn {
                self.begin_turn(turn);
            }
            let t = (turn % self.targets.len() as u64) as usize;
            let Some(i) = self.pop_idle(t) else {
                return;
            };
            let lag = now.saturating_duration_since(due).as_micros() as u64;
            self.targets[t].counts.send_lag.record(lag);
            if let Some(s) = self.schedule.as_mut() {
                s.next += 1;
            }
            self.send(i, due);
        }
    }

    /// The schedule has moved into turn `turn`: the turn just ended is charged the host's
    /// steal since it began, and the target whose turn it now is closes its last one (its
    /// requests have had every other target's turn to be answered).
    fn begin_turn(&mut self, turn: u64) {
        let n = self.targets.len() as u64;
        let Some(s) = self.schedule.as_mut() else {
            return;
        };
        let (steal, now) = s.steal_since_turn();
        let ended = s.turn;
        s.turn = turn;
        s.turn_jiffies = now;
        self.set_turn_steal(ended, steal);
        // Turns the client slept through (over a whole turn late) close with no steal.
        for u in ended + 1..=turn {
            if u >= n {
                let index = u - n;
                let steal = self.turn_steal.get(index as usize).copied().flatten();
                self.targets[(u % n) as usize].close_turn(index, steal);
            }
        }
    }

    fn set_turn_steal(&mut self, turn: u64, steal: Option<f64>) {
        let at = turn as usize;
        if self.turn_steal.len() <= at {
            self.turn_steal.resize(at + 1, None);
        }
        self.turn_steal[at] = steal;
    }

    /// `--warmup`: the schedule starts again for a run of `duration` on the same
    /// connections (the warm-up's drive has waited for its last responses), and what the
    /// warm-up measured is forgotten but for its errors, which stay counted.
    pub fn restart(&mut self, duration: Duration) {
        self.stopped = false;
        self.turn_steal.clear();
        for t in &mut self.targets {
            t.warmup_requests = t.counts.requests;
            t.counts.requests = 0;
            t.counts.bytes = 0;
            t.counts.send_lag = Histogram::new();
            t.counts.latency = Histogram::new();
            t.turn.clear();
            t.turns.clear();
            t.quiet = Histogram::new();
            if let Some(log) = t.log.as_mut() {
                log.clear();
            }
        }
        if let Some(s) = self.schedule.as_mut() {
            s.next = 0;
            s.turn = 0;
            s.total = requests_due(s.rate, duration);
        }
    }

    /// The run has ended: the last turn is charged its steal, and every target closes the
    /// turn it has open.
    pub fn finish_turns(&mut self) {
        let n = self.targets.len() as u64;
        let Some(s) = self.schedule.as_ref().filter(|s| s.switch.is_some()) else {
            return;
        };
        let (last, steal) = (s.turn, s.steal_since_turn().0);
        self.set_turn_steal(last, steal);
        for u in last.saturating_sub(n - 1)..=last {
            let steal = self.turn_steal.get(u as usize).copied().flatten();
            self.targets[(u % n) as usize].close_turn(u, steal);
        }
    }

    /// The connection of target `t` idle longest, taken out of its queue.
    fn pop_idle(&mut self, t: usize) -> Option<usize> {
        while let Some(i) = self.targets[t].idle.pop_front() {
            if let Some(c) = self.conns[i].as_mut().filter(|c| c.idle) {
                c.idle = false;
                return Some(i);
            }
        }
        None
    }

    /// When the loop must wake even if no socket is ready: the next due request's time
    /// when a connection of its target is idle to take it (open loop), else `end`.
    pub fn wake_at(&mut self, end: Instant) -> Instant {
        let Some(s) = self.schedule.as_ref() else {
            return end;
        };
        let (due, t) = (
            s.due(s.next),
            (s.turn_of(s.next) % self.targets.len() as u64) as usize,
        );
        if self.stopped || !self.has_idle(t) {
            return end;
        }
        due.min(end)
    }

    /// Whether a connection of target `t` is idle; entries passed over are dropped.
    fn has_idle(&mut self, t: usize) -> bool {
        while let Some(&i) = self.targets[t].idle.front() {
            if self.conns[i].as_ref().is_some_and(|c| c.idle) {
                return true;
            }
            self.targets[t].idle.pop_front();
        }
        false
    }
}
