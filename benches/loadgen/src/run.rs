//! A run: every target's connections on one epoll set, the events on them (connect,
//! write, read), and the loop that drives it all to the end of the duration.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::conn::{request, start_connect, write_request, Conn};
use crate::epoll::Epoll;
use crate::response::{feed, Fed, Reading, Response};
use crate::schedule::{cpu_jiffies, requests_due, Schedule};
use crate::stall_probe::Stalls;
use crate::stats::{Counts, Histogram};
use crate::target::Target;

/// The most one `read` takes: a 64 KiB response whole, in one call a wake-up.
const READ_BUF: usize = 256 * 1024;

const RETRY: Duration = Duration::from_millis(10);

/// How long requests still outstanding when an open-loop run ends may take to be answered.
pub const GRACE: Duration = Duration::from_secs(2);

/// How long an open loop waits for its connections to be up before its clock starts.
const CONNECT_WAIT: Duration = Duration::from_secs(2);

/// A run's state: the epoll set, every connection, the targets' figures and the schedule.
pub struct Run {
    pub ep: Epoll,
    /// Every target's connections, `per_target` each, target by target.
    pub conns: Vec<Option<Conn>>,
    pub per_target: usize,
    pub targets: Vec<Target>,
    /// Connections lost (closed by the server, or broken): opened again after this pass.
    pub closed: Vec<usize>,
    /// Connections whose connect failed: tried again every `RETRY` (a server that
    /// refuses is not hammered).
    pub refused: Vec<usize>,
    /// The open loop's schedule; None in the closed loop.
    pub schedule: Option<Schedule>,
    /// Open loop: the duration is over, and no request is sent any more.
    pub stopped: bool,
    /// The host's steal share in each turn of the run, by turn (`--switch`).
    pub turn_steal: Vec<Option<f64>>,
    /// `--stall-probe`: the host's stalls, once the probe has been stopped.
    pub stalls: Option<Stalls>,
}

impl Run {
    /// Opens again the connections that closed, and those refused once `retry_at` has
    /// passed (then due again `RETRY` later).
    pub fn reopen(&mut self, retry_at: &mut Instant) {
        for i in std::mem::take(&mut self.closed) {
            self.open(i);
        }
        if !self.refused.is_empty() && Instant::now() >= *retry_at {
            *retry_at = Instant::now() + RETRY;
            for i in std::mem::take(&mut self.refused) {
                self.open(i);
            }
        }
    }

    fn target_of(&self, i: usize) -> usize {
        i / self.per_target
    }

    fn counts(&mut self, i: usize) -> &mut Counts {
        let t = self.target_of(i);
        &mut self.targets[t].counts
    }

    /// Starts connecting connection `i`; its first request goes once it is connected.
    pub fn open(&mut self, i: usize) {
        let stream = match start_connect(self.targets[self.target_of(i)].addr) {
            Ok(s) => s,
            Err(_) => {
                self.counts(i).connect += 1;
                self.refused.push(i);
                return;
            }
        };
        let out = libc::EPOLLOUT as u32;
        if let Err(e) = self.ep.ctl(libc::EPOLL_CTL_ADD, stream.as_raw_fd(), out, i) {
            eprintln!("m0load: epoll_ctl: {e}");
            self.counts(i).connect += 1;
            self.refused.push(i);
            return;
        }
        self.conns[i] = Some(Conn {
            stream,
            connecting: true,
            want_out: true,
            resp: Response::new(),
            written: 0,
            outstanding: false,
            idle: false,
            due_at: Instant::now(),
        });
    }

    /// Drops connection `i` (closing it takes it out of the epoll set); it is opened again
    /// on a later pass.
    pub fn lose(&mut self, i: usize) {
        self.conns[i] = None;
        self.closed.push(i);
    }

    /// Writes what is left of connection `i`'s request, with EPOLLOUT in its interest
    /// exactly while some is left.
    pub fn write(&mut self, i: usize) {
        let t = self.target_of(i);
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        let done = match write_request(c, &self.targets[t].req) {
            Ok(done) => done,
            Err(_) => {
                self.counts(i).write += 1;
                self.lose(i);
                return;
            }
        };
        if c.want_out != done {
            return;
        }
        c.want_out = !done;
        let ev = if done {
            libc::EPOLLIN as u32
        } else {
            (libc::EPOLLIN | libc::EPOLLOUT) as u32
        };
        if self
            .ep
            .ctl(libc::EPOLL_CTL_MOD, c.stream.as_raw_fd(), ev, i)
            .is_err()
        {
            self.counts(i).write += 1;
            self.lose(i);
        }
    }

    /// Starts the next request on connection `i`; its latency counts from `due`.
    pub fn send(&mut self, i: usize, due: Instant) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        c.written = 0;
        c.resp.reading = Reading::Head;
        c.outstanding = true;
        c.due_at = due;
        self.write(i);
    }

    /// Connection `i` has nothing outstanding: the closed loop sends its next request at
    /// once, the open loop queues it for the next due one.
    pub fn ready(&mut self, i: usize) {
        if self.schedule.is_none() {
            self.send(i, Instant::now());
            return;
        }
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        if c.want_out {
            // Just connected: EPOLLOUT leaves the interest until a request is written,
            // or the level-triggered wait would report the idle socket every pass.
            c.want_out = false;
            let fd = c.stream.as_raw_fd();
            if self
                .ep
                .ctl(libc::EPOLL_CTL_MOD, fd, libc::EPOLLIN as u32, i)
                .is_err()
            {
                self.counts(i).connect += 1;
                self.lose(i);
                return;
            }
        }
        if let Some(c) = self.conns[i].as_mut() {
            c.idle = true;
            let t = self.target_of(i);
            self.targets[t].idle.push_back(i);
        }
    }

    /// Requests sent and not yet answered.
    pub fn outstanding(&self) -> usize {
        self.conns
            .iter()
            .flatten()
            .filter(|c| c.outstanding)
            .count()
    }

    pub fn writable(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        if c.connecting {
            if !matches!(c.stream.take_error(), Ok(None)) {
                self.conns[i] = None;
                self.counts(i).connect += 1;
                self.refused.push(i);
                return;
            }
            c.connecting = false;
            self.ready(i);
            return;
        }
        if c.outstanding {
            self.write(i);
        }
    }

    pub fn readable(&mut self, i: usize, buf: &mut [u8]) {
        let t = self.target_of(i);
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        if c.connecting {
            // A refused connect reports EPOLLERR/EPOLLHUP: `writable` counts it.
            return;
        }
        let target = &mut self.targets[t];
        let n = match c.stream.read(buf) {
            Ok(0) => {
                // The server closed the connection: an error with a request outstanding; an
                // idle connection (open loop) is opened again.
                if c.outstanding {
                    target.counts.read += 1;
                }
                self.lose(i);
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return,
            Err(_) => {
                target.counts.read += 1;
                self.lose(i);
                return;
            }
        };
        target.counts.bytes += n as u64;
        if !c.outstanding {
            target.counts.protocol += 1;
            target
                .counts
                .first_protocol_error
                .get_or_insert(format!("{n} bytes with no request outstanding"));
            self.lose(i);
            return;
        }
        match feed(&mut c.resp, &buf[..n]) {
            Ok(Fed::More) => {}
            Ok(Fed::Done) => {
                c.outstanding = false;
                let us = c.due_at.elapsed().as_micros() as u64;
                target.counts.latency.record(us);
                target.counts.requests += 1;
                if let Some(log) = target.log.as_mut() {
                    log.push((c.due_at, us.min(u32::MAX as u64) as u32));
                }
                if self.schedule.as_ref().is_some_and(|s| s.switch.is_some()) {
                    target.turn.push(us.min(u32::MAX as u64) as u32);
                }
                if !(200..400).contains(&c.resp.status) {
                    target.counts.non_2xx += 1;
                }
                if c.written < target.req.len() {
                    // Answered before the request was all written (a 413 to a large
                    // body): the rest of it must not be taken for the next request.
                    target.counts.write += 1;
                    self.lose(i);
                } else if c.resp.close_after {
                    self.lose(i);
                } else {
                    self.ready(i);
                }
            }
            Err(msg) => {
                target.counts.protocol += 1;
                target.counts.first_protocol_error.get_or_insert(msg);
                self.lose(i);
            }
        }
    }
}

/// Drives the run to its end: for `duration`, then (open loop) until nothing is
/// outstanding or `GRACE` has passed. Returns the seconds requests were sent for.
pub fn drive(run: &mut Run, duration: Duration) -> io::Result<f64> {
    let mut retry_at = Instant::now();
    for i in 0..run.conns.len() {
        // After a warm-up (`Run::restart`) its connections are kept.
        if run.conns[i].is_none() {
            run.open(i);
        }
    }
    let mut buf = vec![0u8; READ_BUF];
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let (out, fail) = (
        libc::EPOLLOUT as u32,
        (libc::EPOLLHUP | libc::EPOLLERR) as u32,
    );
    if run.schedule.is_some() {
        // The open loop's clock starts once its connections are up (or CONNECT_WAIT has
        // passed): a burst of connects and accepts is no part of any server's first turn.
        let deadline = Instant::now() + CONNECT_WAIT;
        loop {
            let now = Instant::now();
            let connecting = run.conns.iter().flatten().any(|c| c.connecting);
            if now >= deadline || (!connecting && run.refused.is_empty()) {
                break;
            }
            let n = run.ep.wait(&mut events, (deadline - now).min(RETRY))?;
            for ev in &events[..n] {
                let (flags, i) = (ev.events, ev.u64 as usize);
                if run.conns[i].as_ref().is_some_and(|c| c.connecting) && flags & (out | fail) != 0
                {
                    run.writable(i);
                }
            }
            run.reopen(&mut retry_at);
        }
        if let Some(s) = run.schedule.as_mut() {
            s.start = Instant::now();
            s.turn_jiffies = cpu_jiffies();
        }
    }
    let start = run.schedule.as_ref().map_or_else(Instant::now, |s| s.start);
    let end = start + duration;
    loop {
        let now = Instant::now();
        if now >= end && !run.stopped {
            // What fell due before the end and found a connection goes out late rather than
            // never.
            run.dispatch(now);
            run.stopped = true;
            if run.schedule.is_none() {
                break;
            }
        }
        if run.stopped && (run.outstanding() == 0 || now >= end + GRACE) {
            break;
        }
        let mut wake = if run.stopped {
            end + GRACE
        } else {
            run.wake_at(end)
        };
        if !run.refused.is_empty() && !run.stopped {
            wake = wake.min(retry_at);
        }
        let n = run
            .ep
            .wait(&mut events, wake.saturating_duration_since(now))?;
        for ev in &events[..n] {
            let (flags, i) = (ev.events, ev.u64 as usize);
            let connecting = run.conns[i].as_ref().is_some_and(|c| c.connecting);
            // A connect that failed may report only EPOLLERR/EPOLLHUP: `writable` judges it.
            if flags & out != 0 || (connecting && flags & fail != 0) {
                run.writable(i);
            }
            if flags & (libc::EPOLLIN as u32 | fail) != 0 {
                run.readable(i, &mut buf);
            }
        }
        if !run.stopped {
            run.reopen(&mut retry_at);
        }
        run.dispatch(Instant::now());
    }
    run.finish_turns();
    Ok(if run.schedule.is_some() {
        duration.as_secs_f64()
    } else {
        start.elapsed().as_secs_f64()
    })
}

pub fn new_run(args: &Args, ep: Epoll) -> Run {
    let targets = args
        .urls
        .iter()
        .map(|u| Target {
            url: u.text.clone(),
            addr: u.addr,
            req: request(args, u),
            counts: Counts {
                requests: 0,
                send_lag: Histogram::new(),
                bytes: 0,
                non_2xx: 0,
                connect: 0,
                read: 0,
                write: 0,
                protocol: 0,
                latency: Histogram::new(),
                first_protocol_error: None,
            },
            idle: VecDeque::new(),
            turn: Vec::new(),
            turns: Vec::new(),
            quiet: Histogram::new(),
            // Room for the most any target's turns hold, so that no log grows mid-run.
            log: (args.stall_probe || args.log.is_some()).then(|| {
                let secs = args.duration.as_secs_f64();
                let share = match args.switch {
                    Some(sw) => {
                        let turns = (secs / sw.as_secs_f64()).ceil();
                        (turns / args.urls.len() as f64).ceil() / turns
                    }
                    None => 1.0,
                };
                let due = args.rate.unwrap_or(0.0) * secs * share;
                Vec::with_capacity((due * 1.02) as usize + 1024)
            }),
            warmup_requests: 0,
        })
        .collect::<Vec<_>>();
    Run {
        ep,
        conns: (0..args.conns * targets.len()).map(|_| None).collect(),
        per_target: args.conns,
        targets,
        closed: Vec::new(),
        refused: Vec::new(),
        schedule: args.rate.map(|rate| Schedule {
            start: Instant::now(),
            rate,
            next: 0,
            total: requests_due(rate, args.duration),
            switch: args.switch,
            turn: 0,
            turn_jiffies: cpu_jiffies(),
        }),
        stopped: false,
        turn_steal: Vec::new(),
        stalls: None,
    }
}
