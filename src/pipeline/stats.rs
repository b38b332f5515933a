//! Pipeline counters (`--stats`): what each thread of a worker did, printed on exit with
//! `--stats` and on SIGUSR2.
//!
//! Each counter has one writer: the loop's are plain fields of the loop; a handler's live
//! on its own cache line and are bumped with a relaxed load and store (no locked
//! instruction), so the loop can read them for a report without a lock. Counting is always
//! on (a few plain stores per request); the clock reads that split the loop's time into
//! "inside passes" and "waiting" happen only with `--stats`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::log;

/// Adds `n` to a counter that only the calling thread writes.
#[inline]
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    // Relaxed: single writer; readers (a report) only need some recent value.
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// Nanoseconds on the monotonic clock (`CLOCK_MONOTONIC`, as `Instant`), as one word that
/// threads can share through an atomic; never 0.
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live out-pointer; the monotonic
    // clock always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
        .max(1)
}

/// A handler thread's counters (in `HandlerShared`, on its own cache line there).
#[derive(Default, Debug)]
pub(crate) struct HandlerCounters {
    pub(crate) requests: AtomicU64,
    /// Times the handler parked (waiting for a request, ring space or chunk credit).
    pub(crate) parks: AtomicU64,
    /// Times it woke the sleeping loop (an eventfd write).
    pub(crate) loop_wakes: AtomicU64,
    /// Responses it wrote to their lent sockets itself, wholly, and in part (the rest
    /// went to the loop).
    pub(crate) own_writes: AtomicU64,
    pub(crate) own_writes_partial: AtomicU64,
}

/// The loop thread's counters.
#[derive(Debug)]
pub(crate) struct LoopCounters {
    pub(crate) started: Instant,
    /// Requests handed to a handler.
    pub(crate) requests: u64,
    /// Iterations of the loop.
    pub(crate) passes: u64,
    pub(crate) epoll_waits: u64,
    pub(crate) events: u64,
    /// `epoll_wait` calls that could block (after announcing).
    pub(crate) sleeps: u64,
    /// Handler unparks the loop paid for.
    pub(crate) handler_wakes: u64,
    /// Requests that found their handler's ring full.
    pub(crate) ring_full: u64,
    /// Requests held by the loop while every handler was busy on a long piece of work
    /// (counted at each try).
    pub(crate) held: u64,
    /// Requests answered 503 for their wait (`--max-queue-wait`).
    pub(crate) shed: u64,
    /// Requests answered from `--static-map` files by the loop.
    pub(crate) static_answers: u64,
    /// Handler threads the pool started past `--blocking-threads`, and those that went
    /// again (idle); and how many run now.
    pub(crate) threads_started: u64,
    pub(crate) threads_retired: u64,
    pub(crate) threads: u64,
    /// Time spent in blocking `epoll_wait` (measured only with `--stats`).
    pub(crate) wait: Duration,
    /// Body bytes sent with `sendfile(2)`.
    pub(crate) sendfile_bytes: u64,
    /// Moves of the loop to its handler's CPU (`--cpu-affinity adaptive`): pins and
    /// follows.
    pub(crate) moves: u64,
    /// `--idle-poll` windows that found work before they passed, and those that passed.
    pub(crate) idle_polls_caught: u64,
    pub(crate) idle_polls_out: u64,
    /// The windows' `epoll_wait`s that found nothing (not in `epoll_waits`).
    pub(crate) idle_poll_calls: u64,
}

impl LoopCounters {
    pub(crate) fn new() -> LoopCounters {
        LoopCounters {
            started: Instant::now(),
            requests: 0,
            passes: 0,
            epoll_waits: 0,
            events: 0,
            sleeps: 0,
            handler_wakes: 0,
            ring_full: 0,
            held: 0,
            shed: 0,
            static_answers: 0,
            threads_started: 0,
            threads_retired: 0,
            threads: 0,
            wait: Duration::ZERO,
            sendfile_bytes: 0,
            moves: 0,
            idle_polls_caught: 0,
            idle_polls_out: 0,
            idle_poll_calls: 0,
        }
    }
}

impl Default for LoopCounters {
    fn default() -> Self {
        Self::new()
    }
}

/// CPU time of a thread of this process.
pub(crate) fn thread_cpu(thread: libc::pthread_t) -> Option<Duration> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `thread` is a live thread of this process (its JoinHandle or pthread_self is
    // held by the caller); `clock` is a valid out-pointer.
    if unsafe { libc::pthread_getcpuclockid(thread, &mut clock) } != 0 {
        return None;
    }
    // SAFETY: a zeroed timespec is a valid out-value for clock_gettime.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `clock` came from pthread_getcpuclockid; `ts` is a valid out-pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

fn per(n: u64, requests: u64) -> f64 {
    n as f64 / requests.max(1) as f64
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "?".into(), |d| format!("{:.3} s", d.as_secs_f64()))
}

/// Writes one line for the loop and one per handler to the error log.
pub(crate) fn report(
    c: &LoopCounters,
    measured_wait: bool,
    handlers: &[(String, &HandlerCounters, Option<libc::pthread_t>)],
) {
    let wall = c.started.elapsed();
    // SAFETY: pthread_self has no preconditions.
    let loop_cpu = thread_cpu(unsafe { libc::pthread_self() });
    let waiting = if measured_wait {
        format!(
            "{:.0}% of wall time waiting in epoll_wait",
            100.0 * c.wait.as_secs_f64() / wall.as_secs_f64().max(1e-9)
        )
    } else {
        "time waiting not measured (run with --stats)".into()
    };
    log::info!(
        "stats m0s-loop: cpu {} over {:.3} s, requests {}, passes {}, epoll_wait {} \
         ({:.2} events/call), sleeps {:.3}/req, {waiting}, handler wakes {:.3}/req, \
         ring-full {}, held {}, shed {}, static files {}, handler threads {} ({} started by the pool, {} retired), \
         sendfile {} bytes, moves to its handler's CPU {}, idle polls {} found work and {} \
         ran out ({} empty epoll_waits)",
        secs(loop_cpu),
        wall.as_secs_f64(),
        c.requests,
        c.passes,
        c.epoll_waits,
        c.events as f64 / c.epoll_waits.max(1) as f64,
        per(c.sleeps, c.requests),
        per(c.handler_wakes, c.requests),
        c.ring_full,
        c.held,
        c.shed,
        c.static_answers,
        c.threads,
        c.threads_started,
        c.threads_retired,
        c.sendfile_bytes,
        c.moves,
        c.idle_polls_caught,
        c.idle_polls_out,
        c.idle_poll_calls,
    );
    for (name, h, thread) in handlers {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let requests = load(&h.requests);
        log::info!(
            "stats {name}: cpu {}, requests {requests}, parks {:.3}/req, loop wakes {:.3}/req, \
             written here {:.3}/req ({} in part)",
            thread.map_or_else(|| "counted in m0s-loop".into(), |t| secs(thread_cpu(t))),
            per(load(&h.parks), requests),
            per(load(&h.loop_wakes), requests),
            per(load(&h.own_writes), requests),
            load(&h.own_writes_partial),
        );
    }
}
