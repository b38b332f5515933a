//! The loop's end of each handler (its rings, its shared state, what the loop counts of
//! it), and how the loop runs (`LoopOptions`, from the configuration).

use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::http::limits::{Limits, Timeouts};
use crate::pipeline::msg::{Request, Response, StreamCredit};
use crate::pipeline::ring::{Consumer, Producer};
use crate::pipeline::shared::HandlerShared;
use crate::pipeline::stats;

/// How long a stop past its deadline waits for the handlers to close what they hold.
const HANDLER_EXIT_GRACE: Duration = Duration::from_secs(1);

/// Where the loop takes one handler's response messages from.
pub enum Responses {
    /// A handler thread's response ring.
    Ring(Consumer<Response>),
    /// Inline mode: the queue the app's responses land in on this very thread, kept by
    /// the loop's `Inline` (which, unlike the links, never crosses threads).
    Inline,
}

/// The loop's end of one handler (a thread, or inline mode's bridge on the loop thread).
pub struct HandlerLink {
    pub tx: Producer<Box<Request>>,
    pub(super) rx: Responses,
    pub shared: Arc<HandlerShared>,
    /// `None` inline: the handler is the loop thread itself.
    pub(super) join: Option<JoinHandle<()>>,
    /// Requests pushed whose final part has not come back.
    pub(super) queued: usize,
    /// Something this handler may wait for happened (ring space, stream credit).
    pub(super) wake_check: bool,
    /// `--timeout`: the start of the busy stretch already reported (once each).
    pub(super) reported: u64,
}

impl HandlerLink {
    pub fn new(
        tx: Producer<Box<Request>>,
        rx: Responses,
        shared: Arc<HandlerShared>,
        join: Option<JoinHandle<()>>,
    ) -> HandlerLink {
        HandlerLink {
            tx,
            rx,
            shared,
            join,
            queued: 0,
            wake_check: false,
            reported: 0,
        }
    }

    /// Loop side, after publishing work or room: unpark the handler only if it sleeps.
    /// `true` when it did (a syscall).
    pub(super) fn notify(&self) -> bool {
        let Some(join) = &self.join else {
            return false;
        };
        let mut woke = false;
        if self.shared.wake.should_wake() {
            join.thread().unpark();
            woke = true;
        }
        if self.shared.exchange_wake.should_wake() {
            let waiter = self
                .shared
                .waiter
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(t) = waiter {
                t.unpark();
                woke = true;
            }
        }
        woke
    }
}

/// The loop's ends of its handlers, and the requests out on them.
pub(super) struct Handlers {
    pub links: Vec<HandlerLink>,
    /// Requests pushed, over every handler, whose final part has not come back.
    pub queued: usize,
}

impl Handlers {
    pub fn new(links: Vec<HandlerLink>) -> Handlers {
        Handlers { links, queued: 0 }
    }

    /// A handler thread's response ring holds a message.
    pub fn any_ring_ready(&self) -> bool {
        self.links.iter().any(|h| match &h.rx {
            Responses::Ring(rx) => !rx.is_empty(),
            Responses::Inline => false,
        })
    }

    /// The handler with the fewest requests out.
    pub fn least_loaded(&self) -> usize {
        let mut best = 0;
        for (i, h) in self.links.iter().enumerate().skip(1) {
            if h.queued < self.links[best].queued {
                best = i;
            }
        }
        best
    }

    /// Pushes a request into handler `h`'s ring; `Err` gives it back when the ring is
    /// full. `Ok(true)` when the handler was woken (a syscall).
    pub fn push(&mut self, h: usize, req: Box<Request>) -> Result<bool, Box<Request>> {
        let link = &mut self.links[h];
        link.tx.push(req)?;
        link.queued += 1;
        self.queued += 1;
        Ok(link.notify())
    }

    /// Handler `h` handed back a request's final part.
    pub fn finished_one(&mut self, h: usize) {
        self.links[h].queued -= 1;
        self.queued -= 1;
    }

    /// Something handler `h` may wait for happened: it is looked at (`notify_marked`).
    pub fn mark(&mut self, h: usize) {
        if let Some(link) = self.links.get_mut(h) {
            link.wake_check = true;
        }
    }

    /// `n` bytes of a stream were written (or dropped): back to its credit, and its
    /// handler looks at it.
    pub fn credit_returned(&mut self, c: Arc<StreamCredit>, n: usize) {
        c.returned(n);
        self.mark(c.handler());
    }

    /// Wakes the handlers that may wait for what this pass did (ring room, stream credit,
    /// a closed connection), each only if it sleeps. The number woken.
    pub fn notify_marked(&mut self) -> u64 {
        let mut woken = 0;
        for h in &mut self.links {
            if !std::mem::take(&mut h.wake_check) {
                continue;
            }
            woken += u64::from(h.notify());
            h.shared.credits_returned();
        }
        woken
    }

    /// Handlers on one piece of work for longer than `limit` not reported before: their
    /// threads' names, how long, and their pthreads (`--timeout`).
    pub fn newly_stuck(&mut self, limit: Duration) -> Vec<(String, Duration, libc::pthread_t)> {
        let now = stats::mono_ns();
        let mut stuck = Vec::new();
        for link in &mut self.links {
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
        stuck
    }

    /// Whether a handler has been on one piece of work without handing back a response
    /// message for longer than `limit` (what the systemd watchdog is fed on).
    pub fn any_without_progress(&self, limit: Duration) -> bool {
        let now = stats::mono_ns();
        self.links.iter().any(|h| {
            h.shared.busy.read().is_some_and(|(_, progress)| {
                Duration::from_nanos(now.saturating_sub(progress)) > limit
            })
        })
    }

    /// Each handler's name, counters and thread, for `stats::report`.
    pub fn report_entries(
        &self,
    ) -> Vec<(String, &stats::HandlerCounters, Option<libc::pthread_t>)> {
        self.links
            .iter()
            .map(|h| match &h.join {
                Some(join) => {
                    let name = join.thread().name().unwrap_or("m0s-handler").to_string();
                    (name, &*h.shared.counters, Some(join.as_pthread_t()))
                }
                None => (
                    "m0s-loop (inline app)".to_string(),
                    &*h.shared.counters,
                    None,
                ),
            })
            .collect()
    }

    /// Stops the handlers: joined when `wait` (before the deadline) and nothing is out;
    /// else each gets a moment to give up what it holds (closing the bodies it set aside
    /// or was producing, as PEP 3333 asks) before the process exits under it, and a
    /// handler stuck inside the app is not waited for longer.
    pub fn stop(&mut self, wait: bool) {
        for h in &self.links {
            // Release: pairs with the handler's Acquire load of `stop` after it wakes.
            h.shared.stop.store(true, Ordering::Release);
            if let Some(join) = &h.join {
                join.thread().unpark();
            }
        }
        if wait && self.queued == 0 {
            for join in self.links.drain(..).filter_map(|h| h.join) {
                let _ = join.join();
            }
            return;
        }
        let until = Instant::now() + HANDLER_EXIT_GRACE;
        while Instant::now() < until
            && self
                .links
                .iter()
                .any(|h| h.join.as_ref().is_some_and(|j| !j.is_finished()))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// How the loop runs, from the configuration.
#[derive(Clone, Debug, Default)]
pub struct LoopOptions {
    /// Other workers accept from the same socket.
    pub shared_listener: bool,
    pub limits: Limits,
    /// `--max-body-size`.
    pub max_body_bytes: u64,
    /// `--body-buffer-size`: larger bodies spool to a temporary file.
    pub body_buffer: usize,
    /// `--max-connections`.
    pub max_connections: usize,
    pub timeouts: Timeouts,
    /// `--max-requests` (with its jitter drawn): after this many the worker asks the master
    /// to be replaced; 0 for never.
    pub max_requests: u64,
    /// `--timeout`.
    pub timeout: Option<Duration>,
    /// The systemd watchdog through the master: how often it wants a heartbeat.
    pub heartbeat: Option<Duration>,
    pub stats: bool,
    pub static_response: bool,
    /// `--graceful-timeout`: how long a graceful stop waits for requests in flight.
    pub graceful_timeout: Duration,
    /// `--root-path` when requests outside it get 404 from the loop.
    pub root_path: Option<String>,
    /// Per listener (by index): the TLS configuration its connections speak, if any.
    pub tls: Vec<Option<std::sync::Arc<rustls::ServerConfig>>>,
    /// `--proxy-protocol`: the peers that may send the header (and so connect at all).
    pub proxy_protocol: Option<crate::http::trusted::Trusted>,
    /// `--cpu-affinity adaptive`.
    pub adaptive_affinity: bool,
    /// `--idle-poll`.
    pub idle_poll: Option<Duration>,
}
