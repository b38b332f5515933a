//! The loop's end of each handler (its rings, its shared state, what the loop counts of
//! it), and how the loop runs (`LoopOptions`, from the configuration).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::http::limits::{Limits, Timeouts};
use crate::pipeline::msg::{Request, Response};
use crate::pipeline::ring::{Consumer, Producer};
use crate::pipeline::shared::HandlerShared;

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
        if woke {
            return true;
        }
        false
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
