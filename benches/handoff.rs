//! The hand-off's ceiling: one request/response round trip between a "loop" thread and a
//! "handler" thread, through m0serve's SPSC rings and through the alternatives, both
//! spinning and parked (performance issue, "the ceilings beside the servers").
//!
//! `cargo bench --bench handoff`. A hand-written harness (no criterion): for each variant
//! two threads are started (pinned to different CPUs when the process may use two or more),
//! the loop thread runs round trips for a warm-up period, then `REPS` timed repetitions of
//! a fixed wall time each; the table shows the median (and the fastest and slowest
//! repetition) in ns per round trip. The message is a `u64` each way (the handler
//! answers `v + 1`, which the loop checks), so every variant moves the same 8 bytes and the
//! figures are the cost of the hand-off itself.
//!
//! Variants:
//! - `ring, spin`: m0serve's `ring` pair, both sides busy-polling (`pop` + `spin_loop`).
//! - `ring, park (as the server)`: the handler waits with `park::wait_until` (Backoff spin,
//!   then announce / re-check / `thread::park`); the loop, like `EventLoop::run`, does not
//!   spin: it checks once, then announces, re-checks and parks. Each side pushes, then
//!   `should_wake()` and `unpark`s the other when it wins. The counters say how often.
//! - `ring, wait_until both sides`: both sides spin with Backoff, then park.
//! - `crossbeam-channel bounded, spin` (`try_recv` loops) and `..., blocking` (`recv`).
//! - `Mutex<VecDeque> + Condvar, blocking`.
//! - `AF_UNIX SOCK_DGRAM socketpair, blocking` (`send`/`recv`), and `..., spin`
//!   (`recv(MSG_DONTWAIT)` until a datagram is there).

use std::collections::VecDeque;
use std::hint::spin_loop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use m0serve::internals::{ring, Consumer, Producer};
use m0serve::internals::{wait_until, WakeFlag};

#[path = "support/harness.rs"]
mod harness;
use harness::{measure, median, REPS, WARM_UP};

/// Wall time of one timed repetition.
const REP_TARGET: Duration = Duration::from_millis(250);
/// Capacity of every queue (the server's request ring has 256 slots).
const CAPACITY: usize = 256;
/// Tells the handler thread to stop (never a real message: messages count up from 0).
const STOP: u64 = u64::MAX;

/// One end of a bidirectional hand-off: the loop's end sends requests and receives
/// responses, the handler's end the other way round.
trait End: Send + 'static {
    fn send(&mut self, v: u64);
    fn recv(&mut self) -> u64;
    /// The other side's thread, for the variants that `unpark` it. Called once, before the
    /// first message.
    fn set_peer(&mut self, _peer: Thread) {}
}

// ---------------------------------------------------------------------------------------
// m0serve ring, both sides spinning.

struct RingSpin {
    tx: Producer<u64>,
    rx: Consumer<u64>,
}

impl End for RingSpin {
    fn send(&mut self, v: u64) {
        // Capacity 256 and one message in flight: never full.
        self.tx.push(v).expect("ring full");
    }

    fn recv(&mut self) -> u64 {
        loop {
            if let Some(v) = self.rx.pop() {
                return v;
            }
            spin_loop();
        }
    }
}

fn ring_spin() -> (RingSpin, RingSpin) {
    let (req_tx, req_rx) = ring(CAPACITY);
    let (resp_tx, resp_rx) = ring(CAPACITY);
    (
        RingSpin {
            tx: req_tx,
            rx: resp_rx,
        },
        RingSpin {
            tx: resp_tx,
            rx: req_rx,
        },
    )
}

// ---------------------------------------------------------------------------------------
// m0serve ring with the park protocol.

/// How one side of a parked ring pair waits for its next message.
#[derive(Clone, Copy)]
enum Wait {
    /// `park::wait_until`: Backoff spin, then announce / re-check / park (the handler).
    WaitUntil,
    /// Check once, then announce / re-check / park, no spin (the loop before `epoll_wait`).
    NoSpin,
}

/// Which end of the pair, for the counters.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Loop,
    Handler,
}

/// Summed from both ends when they drop (each end counts in plain fields while it runs).
#[derive(Default)]
struct ParkCounters {
    /// `thread::park` calls by the loop side (counted for `Wait::NoSpin` only: `wait_until`
    /// does not say whether it parked).
    loop_parks: AtomicU64,
    /// `unpark`s the loop delivered to the handler (it won `should_wake`).
    handler_unparks: AtomicU64,
    /// `unpark`s the handler delivered to the loop.
    loop_unparks: AtomicU64,
}

struct RingPark {
    tx: Producer<u64>,
    rx: Consumer<u64>,
    /// This side's flag: announced before it sleeps.
    mine: Arc<WakeFlag>,
    /// The other side's flag: checked after every push.
    theirs: Arc<WakeFlag>,
    peer: Option<Thread>,
    wait: Wait,
    side: Side,
    counters: Arc<ParkCounters>,
    parks: u64,
    unparks: u64,
}

impl Drop for RingPark {
    fn drop(&mut self) {
        let c = &self.counters;
        match self.side {
            Side::Loop => {
                c.loop_parks.fetch_add(self.parks, Ordering::Relaxed);
                c.handler_unparks.fetch_add(self.unparks, Ordering::Relaxed);
            }
            Side::Handler => {
                c.loop_unparks.fetch_add(self.unparks, Ordering::Relaxed);
            }
        }
    }
}

impl End for RingPark {
    fn send(&mut self, v: u64) {
        self.tx.push(v).expect("ring full");
        if self.theirs.should_wake() {
            self.unparks += 1;
            self.peer.as_ref().expect("peer not set").unpark();
        }
    }

    fn recv(&mut self) -> u64 {
        match self.wait {
            Wait::WaitUntil => {
                let rx = &self.rx;
                wait_until(&self.mine, || !rx.is_empty());
            }
            Wait::NoSpin => {
                // As `EventLoop::run`: look once; then announce (store + SeqCst fence),
                // re-check, and only then sleep; cancel on the way out.
                while self.rx.is_empty() {
                    self.mine.announce();
                    if !self.rx.is_empty() {
                        self.mine.cancel();
                        break;
                    }
                    self.parks += 1;
                    thread::park();
                    self.mine.cancel();
                }
            }
        }
        self.rx.pop().expect("woken with an empty ring")
    }

    fn set_peer(&mut self, peer: Thread) {
        self.peer = Some(peer);
    }
}

fn ring_park(loop_wait: Wait, counters: &Arc<ParkCounters>) -> (RingPark, RingPark) {
    let (req_tx, req_rx) = ring(CAPACITY);
    let (resp_tx, resp_rx) = ring(CAPACITY);
    let loop_flag = Arc::new(WakeFlag::new());
    let handler_flag = Arc::new(WakeFlag::new());
    let loop_end = RingPark {
        tx: req_tx,
        rx: resp_rx,
        mine: Arc::clone(&loop_flag),
        theirs: Arc::clone(&handler_flag),
        peer: None,
        wait: loop_wait,
        side: Side::Loop,
        counters: Arc::clone(counters),
        parks: 0,
        unparks: 0,
    };
    let handler_end = RingPark {
        tx: resp_tx,
        rx: req_rx,
        mine: handler_flag,
        theirs: loop_flag,
        peer: None,
        wait: Wait::WaitUntil,
        side: Side::Handler,
        counters: Arc::clone(counters),
        parks: 0,
        unparks: 0,
    };
    (loop_end, handler_end)
}

// ---------------------------------------------------------------------------------------
// crossbeam-channel, bounded.

struct Chan {
    tx: Sender<u64>,
    rx: Receiver<u64>,
    spin: bool,
}

impl End for Chan {
    fn send(&mut self, v: u64) {
        if self.spin {
            // One message in flight and capacity 256: `try_send` never finds it full.
            self.tx.try_send(v).expect("channel full or closed");
        } else {
            self.tx.send(v).expect("channel closed");
        }
    }

    fn recv(&mut self) -> u64 {
        if !self.spin {
            return self.rx.recv().expect("channel closed");
        }
        loop {
            match self.rx.try_recv() {
                Ok(v) => return v,
                Err(TryRecvError::Empty) => spin_loop(),
                Err(TryRecvError::Disconnected) => panic!("channel closed"),
            }
        }
    }
}

fn channel_pair(spin: bool) -> (Chan, Chan) {
    let (req_tx, req_rx) = crossbeam_channel::bounded(CAPACITY);
    let (resp_tx, resp_rx) = crossbeam_channel::bounded(CAPACITY);
    (
        Chan {
            tx: req_tx,
            rx: resp_rx,
            spin,
        },
        Chan {
            tx: resp_tx,
            rx: req_rx,
            spin,
        },
    )
}

// ---------------------------------------------------------------------------------------
// Mutex<VecDeque> + Condvar.

#[derive(Default)]
struct CvQueue {
    items: Mutex<VecDeque<u64>>,
    ready: Condvar,
}

struct CvEnd {
    tx: Arc<CvQueue>,
    rx: Arc<CvQueue>,
}

impl End for CvEnd {
    fn send(&mut self, v: u64) {
        self.tx.items.lock().expect("poisoned").push_back(v);
        self.tx.ready.notify_one();
    }

    fn recv(&mut self) -> u64 {
        let mut items = self.rx.items.lock().expect("poisoned");
        loop {
            if let Some(v) = items.pop_front() {
                return v;
            }
            items = self.rx.ready.wait(items).expect("poisoned");
        }
    }
}

fn condvar_pair() -> (CvEnd, CvEnd) {
    let req = Arc::new(CvQueue {
        items: Mutex::new(VecDeque::with_capacity(CAPACITY)),
        ready: Condvar::new(),
    });
    let resp = Arc::new(CvQueue {
        items: Mutex::new(VecDeque::with_capacity(CAPACITY)),
        ready: Condvar::new(),
    });
    (
        CvEnd {
            tx: Arc::clone(&req),
            rx: Arc::clone(&resp),
        },
        CvEnd { tx: resp, rx: req },
    )
}

// ---------------------------------------------------------------------------------------
// AF_UNIX SOCK_DGRAM socketpair: one datagram of 8 bytes each way.

struct Dgram {
    fd: OwnedFd,
    spin: bool,
}

impl End for Dgram {
    fn send(&mut self, v: u64) {
        let bytes = v.to_ne_bytes();
        loop {
            // SAFETY: `fd` is an open socket this end owns; `bytes` is a live 8-byte buffer
            // that `send` only reads, for exactly its length.
            let n =
                unsafe { libc::send(self.fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), 0) };
            if n == 8 {
                return;
            }
            let err = std::io::Error::last_os_error();
            assert!(
                n < 0 && err.kind() == std::io::ErrorKind::Interrupted,
                "send: {n} ({err})"
            );
        }
    }

    fn recv(&mut self) -> u64 {
        let flags = if self.spin { libc::MSG_DONTWAIT } else { 0 };
        let mut bytes = [0u8; 8];
        loop {
            // SAFETY: `fd` is an open socket this end owns; `bytes` is a live, writable
            // 8-byte buffer and `recv` writes at most its length into it.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    bytes.as_mut_ptr().cast(),
                    bytes.len(),
                    flags,
                )
            };
            if n == 8 {
                return u64::from_ne_bytes(bytes);
            }
            let err = std::io::Error::last_os_error();
            match err.kind() {
                _ if n >= 0 => panic!("recv: a {n}-byte datagram"),
                std::io::ErrorKind::WouldBlock => spin_loop(),
                std::io::ErrorKind::Interrupted => {}
                _ => panic!("recv: {err}"),
            }
        }
    }
}

fn socketpair(spin: bool) -> (Dgram, Dgram) {
    let mut fds = [-1; 2];
    // SAFETY: `fds` is a writable array of two `c_int`, as `socketpair` requires.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "socketpair: {}", std::io::Error::last_os_error());
    // SAFETY: `socketpair` succeeded, so both are open descriptors that nothing else owns;
    // each `OwnedFd` closes its own exactly once.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    (Dgram { fd: a, spin }, Dgram { fd: b, spin })
}

// ---------------------------------------------------------------------------------------
// CPU pinning.

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; `set` is a writable `cpu_set_t` of the size
    // passed.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` < CPU_SETSIZE, so `CPU_ISSET` reads inside `set`.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: `cpu_set_t` is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from `allowed_cpus`, so it is < CPU_SETSIZE and `CPU_SET` writes
    // inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a valid `cpu_set_t` of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity({cpu}): {}",
        std::io::Error::last_os_error()
    );
}

// ---------------------------------------------------------------------------------------
// The harness.

struct Row {
    name: &'static str,
    /// ns per round trip, one per repetition, sorted.
    reps: Vec<f64>,
    /// Round trips run in all (warm-up included), for the per-round-trip counters.
    total: u64,
    note: String,
}

impl Row {
    fn median(&self) -> f64 {
        median(&self.reps)
    }
}

/// One round trip: send `next`, expect `next + 1` back.
#[inline(always)]
fn round_trip<L: End>(l: &mut L, next: &mut u64) {
    l.send(*next);
    let got = l.recv();
    assert_eq!(got, *next + 1, "wrong answer");
    *next += 1;
}

/// Runs the round-trip benchmark for one pair of ends: `l` on the "loop" thread, `h` on
/// the "handler" thread.
fn run_pair<L: End, H: End>(
    name: &'static str,
    cpus: Option<(usize, usize)>,
    mut l: L,
    mut h: H,
) -> Row {
    let loop_thread: Arc<OnceLock<Thread>> = Arc::new(OnceLock::new());
    let handler_thread: Arc<OnceLock<Thread>> = Arc::new(OnceLock::new());
    let barrier = Arc::new(Barrier::new(2));

    let handler = {
        let (lt, ht, barrier) = (
            Arc::clone(&loop_thread),
            Arc::clone(&handler_thread),
            Arc::clone(&barrier),
        );
        thread::Builder::new()
            .name("bench-handler".into())
            .spawn(move || {
                if let Some((_, cpu)) = cpus {
                    pin_to(cpu);
                }
                ht.set(thread::current()).expect("set once");
                barrier.wait();
                h.set_peer(lt.get().expect("set before the barrier").clone());
                loop {
                    let v = h.recv();
                    if v == STOP {
                        break;
                    }
                    h.send(v + 1);
                }
            })
            .expect("spawn handler")
    };

    let looper = thread::Builder::new()
        .name("bench-loop".into())
        .spawn(move || {
            if let Some((cpu, _)) = cpus {
                pin_to(cpu);
            }
            loop_thread.set(thread::current()).expect("set once");
            barrier.wait();
            l.set_peer(
                handler_thread
                    .get()
                    .expect("set before the barrier")
                    .clone(),
            );
            let mut next = 0u64;
            // Warm-up, then REPS timed repetitions, in batches of 64 round trips.
            let reps = measure(REP_TARGET, 64, || round_trip(&mut l, &mut next));
            l.send(STOP);
            (reps, next)
        })
        .expect("spawn loop");

    let (reps, total) = looper.join().expect("loop thread panicked");
    handler.join().expect("handler thread panicked");
    Row {
        name,
        reps,
        total,
        note: String::new(),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; filters are not supported (the whole run is ~15 s).
    let cpus = allowed_cpus();
    let pinning = (cpus.len() >= 2).then(|| (cpus[0], cpus[1]));
    let pinned = match pinning {
        Some((a, b)) => format!("loop thread pinned to CPU {a}, handler thread to CPU {b}"),
        None => format!("fewer than 2 CPUs allowed ({cpus:?}): threads not pinned"),
    };
    let started = Instant::now();
    let mut rows = Vec::new();

    let (l, h) = ring_spin();
    rows.push(run_pair("m0serve ring, spin (busy-poll)", pinning, l, h));

    for (name, loop_wait) in [
        (
            "m0serve ring, park: handler `wait_until`, loop no spin (as the server)",
            Wait::NoSpin,
        ),
        (
            "m0serve ring, park: `wait_until` on both sides",
            Wait::WaitUntil,
        ),
    ] {
        let counters = Arc::new(ParkCounters::default());
        let (l, h) = ring_park(loop_wait, &counters);
        let mut row = run_pair(name, pinning, l, h);
        let per = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / row.total as f64;
        let loop_parks = match loop_wait {
            Wait::NoSpin => format!("{:.3}", per(&counters.loop_parks)),
            Wait::WaitUntil => "n/a".to_string(),
        };
        row.note = format!(
            "per round trip: loop parks {loop_parks}, unparks of the handler {:.3}, \
             unparks of the loop {:.3}",
            per(&counters.handler_unparks),
            per(&counters.loop_unparks),
        );
        rows.push(row);
    }

    let (l, h) = channel_pair(true);
    rows.push(run_pair(
        "crossbeam-channel bounded, spin (`try_recv` loop)",
        pinning,
        l,
        h,
    ));
    let (l, h) = channel_pair(false);
    rows.push(run_pair(
        "crossbeam-channel bounded, blocking `recv`",
        pinning,
        l,
        h,
    ));

    let (l, h) = condvar_pair();
    rows.push(run_pair(
        "`Mutex<VecDeque>` + `Condvar`, blocking",
        pinning,
        l,
        h,
    ));

    let (l, h) = socketpair(false);
    rows.push(run_pair(
        "AF_UNIX SOCK_DGRAM socketpair, blocking `recv`",
        pinning,
        l,
        h,
    ));
    let (l, h) = socketpair(true);
    rows.push(run_pair(
        "AF_UNIX SOCK_DGRAM socketpair, spin (`recv(MSG_DONTWAIT)`)",
        pinning,
        l,
        h,
    ));

    let ring = rows[0].median();
    println!();
    println!(
        "Round trip = loop sends a u64, handler answers; median of {REPS} repetitions \
         ({} ms each) after {} ms warm-up; {pinned}.",
        REP_TARGET.as_millis(),
        WARM_UP.as_millis()
    );
    println!();
    println!("| variant | ns / round trip (median) | min .. max | ÷ ring spin | notes |");
    println!("|---|---:|---|---:|---|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.0} .. {:.0} | {:.1}× | {} |",
            r.name,
            r.median(),
            r.reps[0],
            r.reps[r.reps.len() - 1],
            r.median() / ring,
            r.note
        );
    }
    let sock = rows
        .iter()
        .find(|r| {
            r.name
                .starts_with("AF_UNIX SOCK_DGRAM socketpair, blocking")
        })
        .expect("socketpair row")
        .median();
    let ring_fastest = rows[0].reps[0];
    println!();
    println!(
        "Targets (performance issue), judged on the medians: ring round trip, both sides \
         spinning, <= 200 ns: {ring:.0} ns (fastest repetition {ring_fastest:.0} ns), {}; \
         >= 10x cheaper than a datagram socketpair round trip (blocking): {:.1}x, {}.",
        if ring <= 200.0 { "met" } else { "NOT met" },
        sock / ring,
        if sock / ring >= 10.0 {
            "met"
        } else {
            "NOT met"
        },
    );
    println!("Total time: {:.1} s.", started.elapsed().as_secs_f64());
}
