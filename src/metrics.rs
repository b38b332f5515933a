//! Prometheus metrics (`--metrics-port`): counters in memory shared by the master and every
//! worker, written without a lock and served by whichever worker's loop accepts the scrape.
//!
//! The master creates one anonymous shared file (`memfd_create`) before it starts a worker
//! and hands it to each worker with a *slot* of its own. A slot holds one section per
//! thread that writes: the loop's, then one per handler thread (inline mode: the loop
//! writes handler section 0 too). Every counter has exactly one writer, so a count is a
//! relaxed load and store, no locked instruction; a scrape reads all slots with relaxed
//! loads and adds them up, so the numbers are aggregated across workers.
//!
//! A slot outlives its worker: a replacement takes the lowest free slot and counts on from
//! what its predecessor left, so counters never go down when a worker is recycled or dies.
//! Only the connections gauge is zeroed by the master when the slot's worker exits.
//!
//! What each series measures:
//! - `m0serve_requests_total{status="2xx"}`: responses by status class, the app's (counted
//!   by the handler) and the loop's own error answers (400, 408, 413, 431...).
//! - `m0serve_static_requests_total{status="2xx"}`: of those, the loop's answers from
//!   `--static-map` files.
//! - `m0serve_request_duration_seconds`: from the request read whole to its response's
//!   last part handed back to the loop.
//! - `m0serve_queue_wait_seconds`: from the request read whole to a handler taking it (held
//!   in the loop, or queued in a handler's ring).
//! - `m0serve_app_seconds`: the app call and the iteration of its body.
//! - `m0serve_handler_busy_seconds_total{worker,handler}`: per handler thread, the sum of
//!   its app time (its utilisation is this counter's rate).
//! - `m0serve_connections`: open client connections (scrapes not counted).
//! - `m0serve_handler_threads`: handler threads running (the pool grows and shrinks
//!   between `--blocking-threads` and `--max-blocking-threads`).
//! - `m0serve_requests_shed_total`: requests the loop answered 503 because they would have
//!   waited, or had waited, longer than `--max-queue-wait` for a handler.
//! - `m0serve_requests_abandoned_total`: requests whose client left before the app was
//!   called (never run; logged 499).
//! - `m0serve_workers_shedding`: workers that shed a request within the last second
//!   (`/readyz` answers 503 while any does).
//! - `m0serve_workers`: worker processes running; `m0serve_worker_restarts_total`: workers
//!   that exited and were replaced (death, recycling, reload).

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::pipeline::stats::bump;

/// Upper bounds of the histogram buckets, in nanoseconds (the `+Inf` bucket follows): from
/// 100 µs (a queue wait on an idle server) to 10 s.
pub(crate) const BUCKETS_NS: [u64; 16] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];
const NB: usize = BUCKETS_NS.len() + 1;

/// Status classes counted: 1xx to 5xx.
const CLASSES: usize = 5;

/// One histogram: a count per bucket (not cumulative; a scrape adds them up) and the sum.
#[repr(C)]
pub(crate) struct Histogram {
    counts: [AtomicU64; NB],
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records one observation. Single writer (the section's thread).
    #[inline]
    pub(crate) fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let i = BUCKETS_NS.iter().position(|&b| ns <= b).unwrap_or(NB - 1);
        bump(&self.counts[i], 1);
        bump(&self.sum_ns, ns);
    }
}

/// Why a connection was closed before its first request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Plain HTTP to a TLS port (answered 400 in plain text first).
    TlsPlainHttp,
    /// A TLS handshake that failed.
    TlsHandshake,
    /// `--proxy-protocol`: a peer not in `--proxy-allow-from`.
    ProxyUntrusted,
    /// `--proxy-protocol`: no valid PROXY header first.
    ProxyMalformed,
}

impl Refused {
    pub(crate) const ALL: [Refused; 4] = [
        Refused::TlsPlainHttp,
        Refused::TlsHandshake,
        Refused::ProxyUntrusted,
        Refused::ProxyMalformed,
    ];

    /// Its label in the metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Refused::TlsPlainHttp => "tls_plain_http",
            Refused::TlsHandshake => "tls_handshake",
            Refused::ProxyUntrusted => "proxy_untrusted",
            Refused::ProxyMalformed => "proxy_malformed",
        }
    }
}

/// What one thread writes. 64-byte aligned, so two threads never share a cache line.
#[repr(C, align(64))]
pub(crate) struct Section {
    requests: [AtomicU64; CLASSES],
    pub(crate) duration: Histogram,
    pub(crate) queue_wait: Histogram,
    pub(crate) app: Histogram,
    busy_ns: AtomicU64,
    /// The loop's section only: open client connections (a gauge).
    connections: AtomicU64,
    /// The loop's section only: handler threads running (a gauge).
    threads: AtomicU64,
    /// The loop's section only: connections closed before a request, by [`Refused`].
    refused: [AtomicU64; Refused::ALL.len()],
    /// The loop's section only: requests answered 503 for their wait (`--max-queue-wait`).
    shed: AtomicU64,
    /// The loop's section only: until when (`stats::mono_ns`) the worker counts as
    /// shedding.
    shedding_until: AtomicU64,
    /// A handler's section: requests whose client left before the app was called.
    abandoned: AtomicU64,
    /// The loop's section only: `--static-map` answers, by status class.
    static_requests: [AtomicU64; CLASSES],
}

/// The index of `code`'s status class (`1xx` is 0), `None` outside 100..=599.
#[inline]
fn class(code: u16) -> Option<usize> {
    (code / 100)
        .checked_sub(1)
        .map(usize::from)
        .filter(|&c| c < CLASSES)
}

impl Section {
    /// One response with status `code` (codes outside 100..=599 are not counted).
    #[inline]
    pub(crate) fn count_status(&self, code: u16) {
        if let Some(c) = class(code) {
            bump(&self.requests[c], 1);
        }
    }

    /// A handler's request is done: its status, its times.
    #[inline]
    pub(crate) fn request_done(
        &self,
        code: u16,
        queue_wait: Duration,
        app: Duration,
        total: Duration,
    ) {
        self.count_status(code);
        self.queue_wait.observe(queue_wait);
        self.app.observe(app);
        self.duration.observe(total);
        bump(
            &self.busy_ns,
            u64::try_from(app.as_nanos()).unwrap_or(u64::MAX),
        );
    }

    /// The loop's section: a connection closed before its first request.
    #[inline]
    pub(crate) fn count_refused(&self, why: Refused) {
        bump(&self.refused[why as usize], 1);
    }

    /// The loop's section: a request answered 503 for its wait; the worker counts as
    /// shedding until `until` (`stats::mono_ns`).
    #[inline]
    pub(crate) fn count_shed(&self, until: u64) {
        bump(&self.shed, 1);
        // Relaxed: a reading with one writer, compared against the clock by scrapes.
        self.shedding_until.store(until, Ordering::Relaxed);
    }

    /// The loop's section: a `--static-map` answer with status `code` (also counted by
    /// `count_status`).
    #[inline]
    pub(crate) fn count_static(&self, code: u16) {
        if let Some(c) = class(code) {
            bump(&self.static_requests[c], 1);
        }
    }

    /// A handler's section: a request whose client left before the app ran.
    #[inline]
    pub(crate) fn count_abandoned(&self) {
        bump(&self.abandoned, 1);
    }

    /// The loop's section: the open connections now.
    #[inline]
    pub(crate) fn set_connections(&self, n: usize) {
        // Relaxed: a gauge with one writer (the loop; the master once the loop is gone).
        self.connections.store(n as u64, Ordering::Relaxed);
    }

    /// The loop's section: the handler threads running now.
    #[inline]
    pub(crate) fn set_threads(&self, n: usize) {
        // Relaxed: as `set_connections`.
        self.threads.store(n as u64, Ordering::Relaxed);
    }
}

/// The head of the shared file.
#[repr(C, align(64))]
struct Header {
    /// [`MAGIC`], and [`layout`]: a worker of another build (a SIGHUP after an upgrade)
    /// whose sections differ does not use the file.
    magic: AtomicU64,
    layout: AtomicU64,
    slots: AtomicU64,
    handlers: AtomicU64,
    /// Written by the master only.
    restarts: AtomicU64,
}

/// The head of one worker's slot.
#[repr(C, align(64))]
struct SlotHeader {
    /// The pid of the worker using it, 0 when none (written by the master).
    pid: AtomicU64,
    /// Ever used: its sections are reported.
    used: AtomicU64,
}

/// The shared counters of every worker, mapped into this process.
pub(crate) struct Region {
    map: crate::sys::shm::Mapping,
    slots: usize,
    handlers: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is shared memory accessed only through atomics (`AtomicU64` fields of
// `Header`, `SlotHeader` and `Section`); the pointer is valid until `Drop` unmaps it, which
// happens once, when the last `Arc<Region>` goes.
unsafe impl Send for Region {}
// SAFETY: as above: every access through `&Region` is an atomic operation.
unsafe impl Sync for Region {}

const MAGIC: u64 = u64::from_le_bytes(*b"m0smetrx");

/// What a section looks like: a version to bump when fields change meaning, the
/// section's size and the bucket count.
fn layout() -> u64 {
    const VERSION: u64 = 3;
    (VERSION << 48) | ((NB as u64) << 32) | std::mem::size_of::<Section>() as u64
}

/// The file's length for a shape; `None` if it overflows.
fn file_bytes(slots: usize, handlers: usize) -> Option<usize> {
    let slot = handlers
        .checked_add(1)?
        .checked_mul(std::mem::size_of::<Section>())?
        .checked_add(std::mem::size_of::<SlotHeader>())?;
    slots
        .checked_mul(slot)?
        .checked_add(std::mem::size_of::<Header>())
}

fn slot_bytes(handlers: usize) -> usize {
    std::mem::size_of::<SlotHeader>() + (1 + handlers) * std::mem::size_of::<Section>()
}

impl Region {
    /// The master's: a new shared file for `slots` workers of `handlers` handler sections
    /// each, zeroed (by the kernel: a fresh memfd reads as zeros).
    pub(crate) fn create(slots: usize, handlers: usize) -> io::Result<Region> {
        let len = file_bytes(slots, handlers)
            .ok_or_else(|| io::Error::other("too many metrics slots"))?;
        let fd = crate::sys::shm::sealed_memfd(c"m0serve-metrics", len)?;
        let r = Region::map(fd, len, slots, handlers)?;
        let h = r.header();
        h.slots.store(slots as u64, Ordering::Relaxed);
        h.handlers.store(handlers as u64, Ordering::Relaxed);
        h.layout.store(layout(), Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Relaxed);
        Ok(r)
    }

    /// A worker's: the file the master passed as `fd`.
    pub(crate) fn open(fd: RawFd) -> io::Result<Region> {
        // SAFETY: the master left this descriptor open across the exec for this process.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: fcntl on a descriptor this process owns.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        let len = crate::sys::shm::file_len(fd.as_fd())?;
        if len < std::mem::size_of::<Header>() {
            return Err(io::Error::other("the metrics file is too short"));
        }
        // The shape is in the header; until it is read, no slot is reachable.
        let mut r = Region::map(fd, len, 0, 0)?;
        let h = r.header();
        if h.magic.load(Ordering::Relaxed) != MAGIC || h.layout.load(Ordering::Relaxed) != layout()
        {
            return Err(io::Error::other(
                "the metrics file has another layout (a master of another m0serve version)",
            ));
        }
        let slots = usize::try_from(h.slots.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        let handlers = usize::try_from(h.handlers.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        if file_bytes(slots, handlers).is_none_or(|need| need > len) {
            return Err(io::Error::other(
                "the metrics file is shorter than its shape",
            ));
        }
        r.slots = slots;
        r.handlers = handlers;
        Ok(r)
    }

    fn map(fd: OwnedFd, len: usize, slots: usize, handlers: usize) -> io::Result<Region> {
        Ok(Region {
            map: crate::sys::shm::Mapping::shared(fd.as_fd(), len)?,
            slots,
            handlers,
            fd,
        })
    }

    /// The descriptor to hand to a worker.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// Handler sections per slot.
    pub(crate) fn handlers(&self) -> usize {
        self.handlers
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a `Header` (page-aligned, so 64-aligned), valid
        // for as long as `self`; every field is an atomic, valid for any bit pattern.
        unsafe { &*self.map.base().cast::<Header>() }
    }

    fn slot_header(&self, slot: usize) -> &SlotHeader {
        assert!(slot < self.slots);
        let off = std::mem::size_of::<Header>() + slot * slot_bytes(self.handlers);
        debug_assert!(off + slot_bytes(self.handlers) <= self.map.len());
        // SAFETY: `off` is inside the mapping (checked against the shape at open), a
        // multiple of 64; atomics only.
        unsafe { &*self.map.base().add(off).cast::<SlotHeader>() }
    }

    /// Section `i` of `slot`: 0 is the loop's, `1 + h` handler `h`'s.
    fn section(&self, slot: usize, i: usize) -> &Section {
        assert!(slot < self.slots && i <= self.handlers);
        let off = std::mem::size_of::<Header>()
            + slot * slot_bytes(self.handlers)
            + std::mem::size_of::<SlotHeader>()
            + i * std::mem::size_of::<Section>();
        // SAFETY: as in `slot_header`: inside the mapping, 64-aligned, atomics only.
        unsafe { &*self.map.base().add(off).cast::<Section>() }
    }

    /// The master: a worker with `pid` now uses `slot`.
    pub(crate) fn claim(&self, slot: usize, pid: libc::pid_t) {
        let h = self.slot_header(slot);
        h.pid.store(pid as u64, Ordering::Relaxed);
        h.used.store(1, Ordering::Relaxed);
    }

    /// The master: `slot`'s worker exited; `replaced`: it is counted as a restart.
    pub(crate) fn release(&self, slot: usize, replaced: bool) {
        self.slot_header(slot).pid.store(0, Ordering::Relaxed);
        self.section(slot, 0).set_connections(0);
        self.section(slot, 0).set_threads(0);
        self.section(slot, 0)
            .shedding_until
            .store(0, Ordering::Relaxed);
        if replaced {
            bump(&self.header().restarts, 1);
        }
    }

    /// Workers running that shed a request lately (`Section::count_shed`), by `now`
    /// (`stats::mono_ns`).
    pub(crate) fn shedding(&self, now: u64) -> u64 {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (0..self.slots)
            .filter(|&slot| {
                load(&self.slot_header(slot).pid) != 0
                    && load(&self.section(slot, 0).shedding_until) > now
            })
            .count() as u64
    }

    /// The text exposition of every slot's counters, added up.
    pub(crate) fn render(&self, out: &mut Vec<u8>) {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut requests = [0u64; CLASSES];
        let mut hists = [[0u64; NB]; 3];
        let mut sums = [0u64; 3];
        let mut connections = 0;
        let mut threads = 0;
        let mut refused = [0u64; Refused::ALL.len()];
        let (mut shed, mut abandoned) = (0, 0);
        let mut static_requests = [0u64; CLASSES];
        let mut workers = 0;
        let mut busy = Vec::new();
        for slot in 0..self.slots {
            let sh = self.slot_header(slot);
            if load(&sh.used) == 0 {
                continue;
            }
            workers += u64::from(load(&sh.pid) != 0);
            let running = load(&self.section(slot, 0).threads);
            threads += running;
            for i in 0..=self.handlers {
                let s = self.section(slot, i);
                for (c, r) in requests.iter_mut().zip(&s.requests) {
                    *c += load(r);
                }
                for (k, h) in [&s.duration, &s.queue_wait, &s.app].into_iter().enumerate() {
                    for (acc, c) in hists[k].iter_mut().zip(&h.counts) {
                        *acc += load(c);
                    }
                    sums[k] += load(&h.sum_ns);
                }
                abandoned += load(&s.abandoned);
                if i == 0 {
                    connections += load(&s.connections);
                    shed += load(&s.shed);
                    for (acc, r) in static_requests.iter_mut().zip(&s.static_requests) {
                        *acc += load(r);
                    }
                    for (acc, r) in refused.iter_mut().zip(&s.refused) {
                        *acc += load(r);
                    }
                } else if (i as u64) <= running || load(&s.busy_ns) > 0 {
                    // Each handler that runs, or ran (a section of the pool's most is
                    // unused until the pool grows into it).
                    busy.push((slot, i - 1, load(&s.busy_ns)));
                }
            }
        }
        let mut w = |s: std::fmt::Arguments<'_>| {
            let _ = out.write_fmt(s);
        };
        w(format_args!(
            "# HELP m0serve_requests_total Responses sent, by status class, all workers.\n\
             # TYPE m0serve_requests_total counter\n"
        ));
        for (c, n) in requests.iter().enumerate() {
            w(format_args!(
                "m0serve_requests_total{{status=\"{}xx\"}} {n}\n",
                c + 1
            ));
        }
        w(format_args!(
            "# HELP m0serve_static_requests_total Responses the loop sent from --static-map \
             files (also in m0serve_requests_total), by status class, all workers.\n\
             # TYPE m0serve_static_requests_total counter\n"
        ));
        for (c, n) in static_requests.iter().enumerate() {
            w(format_args!(
                "m0serve_static_requests_total{{status=\"{}xx\"}} {n}\n",
                c + 1
            ));
        }
        let names = [
            (
                "m0serve_request_duration_seconds",
                "From a request read whole to its response's last part back at the loop.",
            ),
            (
                "m0serve_queue_wait_seconds",
                "From a request read whole to a handler taking it (waiting in the loop, or in a handler's ring).",
            ),
            (
                "m0serve_app_seconds",
                "The app call and the iteration of its response body.",
            ),
        ];
        for (k, (name, help)) in names.iter().enumerate() {
            w(format_args!(
                "# HELP {name} {help}\n# TYPE {name} histogram\n"
            ));
            let mut cumulative = 0;
            for (i, n) in hists[k].iter().enumerate() {
                cumulative += n;
                match BUCKETS_NS.get(i) {
                    Some(&b) => w(format_args!(
                        "{name}_bucket{{le=\"{}\"}} {cumulative}\n",
                        b as f64 / 1e9
                    )),
                    None => w(format_args!("{name}_bucket{{le=\"+Inf\"}} {cumulative}\n")),
                }
            }
            w(format_args!(
                "{name}_sum {}\n{name}_count {cumulative}\n",
                sums[k] as f64 / 1e9
            ));
        }
        w(format_args!(
            "# HELP m0serve_handler_busy_seconds_total Time each handler thread spent in the app.\n\
             # TYPE m0serve_handler_busy_seconds_total counter\n"
        ));
        for (slot, h, ns) in busy {
            w(format_args!(
                "m0serve_handler_busy_seconds_total{{worker=\"{slot}\",handler=\"{h}\"}} {}\n",
                ns as f64 / 1e9
            ));
        }
        let refused_lines: String = Refused::ALL
            .iter()
            .zip(refused)
            .map(|(r, n)| {
                format!(
                    "m0serve_connections_refused_total{{reason=\"{}\"}} {n}\n",
                    r.name()
                )
            })
            .collect();
        w(format_args!(
            "# HELP m0serve_connections Open client connections, all workers.\n\
             # TYPE m0serve_connections gauge\nm0serve_connections {connections}\n\
             # HELP m0serve_handler_threads Handler threads running, all workers.\n\
             # TYPE m0serve_handler_threads gauge\nm0serve_handler_threads {threads}\n\
             # HELP m0serve_connections_refused_total Connections closed before any request \
             (TLS handshakes that failed, plain HTTP to a TLS port, PROXY protocol refusals).\n\
             # TYPE m0serve_connections_refused_total counter\n\
             {refused_lines}\
             # HELP m0serve_requests_shed_total Requests answered 503 by the loop for waiting \
             longer than --max-queue-wait (or being about to).\n\
             # TYPE m0serve_requests_shed_total counter\nm0serve_requests_shed_total {shed}\n\
             # HELP m0serve_requests_abandoned_total Requests whose client left before the \
             app was called (not run).\n\
             # TYPE m0serve_requests_abandoned_total counter\n\
             m0serve_requests_abandoned_total {abandoned}\n\
             # HELP m0serve_workers_shedding Workers that shed a request within the last second.\n\
             # TYPE m0serve_workers_shedding gauge\nm0serve_workers_shedding {}\n\
             # HELP m0serve_workers Worker processes running.\n\
             # TYPE m0serve_workers gauge\nm0serve_workers {workers}\n\
             # HELP m0serve_worker_restarts_total Workers that exited and were replaced.\n\
             # TYPE m0serve_worker_restarts_total counter\nm0serve_worker_restarts_total {}\n",
            self.shedding(crate::pipeline::stats::mono_ns()),
            load(&self.header().restarts)
        ));
    }
}

/// One thread's section, with the region kept alive: what the loop and the handler
/// threads of a worker hold.
pub struct Recorder {
    region: Arc<Region>,
    slot: usize,
    section: usize,
}

impl Recorder {
    /// The loop's section of `slot`.
    pub(crate) fn for_loop(region: Arc<Region>, slot: usize) -> Recorder {
        Recorder {
            region,
            slot,
            section: 0,
        }
    }

    /// Handler `h`'s section of `slot`.
    pub(crate) fn for_handler(region: Arc<Region>, slot: usize, h: usize) -> Recorder {
        Recorder {
            region,
            slot,
            section: 1 + h,
        }
    }

    pub(crate) fn section(&self) -> &Section {
        self.region.section(self.slot, self.section)
    }
}

/// The answer to a scrape: `/metrics` (200, the text format; 503 from a worker that could
/// not map the counters), `/healthz` or `/livez` (200 "ok": liveness), `/readyz` (503 while
/// a worker sheds, else 200: readiness), anything else 404. `keep_alive`: the
/// client did not ask to close. `head`: no body.
pub(crate) fn http_answer(
    region: Option<&Region>,
    path: &[u8],
    keep_alive: bool,
    head: bool,
    date: &[u8],
) -> Vec<u8> {
    let path = path.split(|&b| b == b'?').next().unwrap_or(b"");
    let (status, reason, ctype, body) = match path {
        b"/metrics" => match region {
            Some(region) => {
                let mut body = Vec::with_capacity(8192);
                region.render(&mut body);
                (200, "OK", "text/plain; version=0.0.4; charset=utf-8", body)
            }
            None => (
                503,
                "Service Unavailable",
                "text/plain",
                b"this worker cannot read the shared metrics (see its log)\n".to_vec(),
            ),
        },
        // Liveness: the loop that answers is alive.
        b"/healthz" | b"/health" | b"/livez" => (200, "OK", "text/plain", b"ok\n".to_vec()),
        // Readiness: no worker is shedding requests (`--max-queue-wait`).
        b"/readyz" => match region.map(|r| r.shedding(crate::pipeline::stats::mono_ns())) {
            Some(n) if n > 0 => (
                503,
                "Service Unavailable",
                "text/plain",
                format!("shedding: {n} worker(s) answered 503 for queue wait in the last second\n")
                    .into_bytes(),
            ),
            _ => (200, "OK", "text/plain", b"ready\n".to_vec()),
        },
        _ => (
            404,
            "Not Found",
            "text/plain",
            b"not found: try /metrics, /healthz or /readyz\n".to_vec(),
        ),
    };
    crate::http::encode::simple_response(status, reason, ctype, &body, keep_alive, head, date)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &Region) -> String {
        let mut out = Vec::new();
        r.render(&mut out);
        String::from_utf8(out).unwrap()
    }

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn counts_add_up_across_slots_and_buckets_are_cumulative() {
        let r = Arc::new(Region::create(4, 2).unwrap());
        r.claim(0, 100);
        r.claim(2, 200);
        let ms = Duration::from_millis;
        let h0 = Recorder::for_handler(r.clone(), 0, 0);
        let h1 = Recorder::for_handler(r.clone(), 2, 1);
        h0.section().request_done(200, ms(0), ms(2), ms(3));
        h0.section().request_done(404, ms(0), ms(20), ms(30));
        h1.section().request_done(201, ms(1), ms(200), ms(300));
        let lp = Recorder::for_loop(r.clone(), 2);
        lp.section().count_status(400);
        lp.section().set_connections(7);
        let t = text(&r);
        assert_eq!(value(&t, "m0serve_requests_total{status=\"2xx\"}"), 2.0);
        assert_eq!(value(&t, "m0serve_requests_total{status=\"4xx\"}"), 2.0);
        assert_eq!(value(&t, "m0serve_connections"), 7.0);
        assert_eq!(value(&t, "m0serve_workers"), 2.0);
        let d = "m0serve_request_duration_seconds";
        assert_eq!(value(&t, &format!("{d}_bucket{{le=\"0.0025\"}}")), 0.0);
        assert_eq!(value(&t, &format!("{d}_bucket{{le=\"0.005\"}}")), 1.0);
        assert_eq!(value(&t, &format!("{d}_bucket{{le=\"0.05\"}}")), 2.0);
        assert_eq!(value(&t, &format!("{d}_bucket{{le=\"+Inf\"}}")), 3.0);
        assert_eq!(value(&t, &format!("{d}_count")), 3.0);
        assert!((value(&t, &format!("{d}_sum")) - 0.333).abs() < 1e-9);
        assert_eq!(
            value(
                &t,
                "m0serve_handler_busy_seconds_total{worker=\"2\",handler=\"1\"}"
            ),
            0.2
        );
        // A slot never used is not reported; a released one keeps its counts.
        assert!(!t.contains("worker=\"1\""));
        r.release(2, true);
        let t = text(&r);
        assert_eq!(value(&t, "m0serve_requests_total{status=\"2xx\"}"), 2.0);
        assert_eq!(value(&t, "m0serve_connections"), 0.0);
        assert_eq!(value(&t, "m0serve_workers"), 1.0);
        assert_eq!(value(&t, "m0serve_worker_restarts_total"), 1.0);
    }

    #[test]
    fn a_worker_maps_the_masters_file() {
        let master = Region::create(3, 1).unwrap();
        master.claim(1, 42);
        // SAFETY: dup of a descriptor we own; the copy is handed to `open`, which owns it.
        let fd = unsafe { libc::dup(master.raw_fd()) };
        let worker = Arc::new(Region::open(fd).unwrap());
        assert_eq!(worker.slots(), 3);
        Recorder::for_handler(worker.clone(), 1, 0)
            .section()
            .request_done(500, Duration::ZERO, Duration::ZERO, Duration::ZERO);
        assert_eq!(
            value(&text(&master), "m0serve_requests_total{status=\"5xx\"}"),
            1.0
        );
    }

    #[test]
    fn answers_by_path() {
        let r = Region::create(1, 1).unwrap();
        let ok =
            String::from_utf8(http_answer(Some(&r), b"/metrics?x=1", true, false, b"D")).unwrap();
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("# TYPE m0serve_requests_total counter"));
        let body_len = ok.split("\r\n\r\n").nth(1).unwrap().len();
        assert!(ok.contains(&format!("Content-Length: {body_len}\r\n")));
        let nf = String::from_utf8(http_answer(Some(&r), b"/", false, false, b"D")).unwrap();
        assert!(nf.starts_with("HTTP/1.1 404 "));
        assert!(nf.contains("Connection: close\r\n"));
        let head = http_answer(Some(&r), b"/healthz", true, true, b"D");
        assert!(head.ends_with(b"\r\n\r\n"));
        let none = String::from_utf8(http_answer(None, b"/metrics", true, false, b"D")).unwrap();
        assert!(none.starts_with("HTTP/1.1 503 "), "{none}");
        let ok = String::from_utf8(http_answer(None, b"/healthz", true, false, b"D")).unwrap();
        assert!(ok.starts_with("HTTP/1.1 200 "), "{ok}");
    }
}
