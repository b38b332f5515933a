//! A graceful stop (SIGTERM, and every drain of a reload or recycle): no new connections;
//! every request a client has sent, or sends within the grace, is served, the last with
//! `Connection: close`; idle connections close once their grace is over.

use std::time::{Duration, Instant};

use super::EventLoop;
use crate::log;
use crate::sys::listen::Listener;

/// In a graceful stop, how long an idle connection is kept for the request its client may
/// be sending (counted from the stop, or from when its last response was written, whichever
/// is later). A response written before the stop said the connection stays open, and a
/// client opens a connection to send a request: closing either at once would lose the
/// request already on its way (during a reload, for one). What arrives in the grace is
/// served with `Connection: close`; then the idle connections close.
const DRAIN_IDLE_GRACE: Duration = Duration::from_secs(2);

impl EventLoop {
    /// A graceful stop: no new connections; every request a client has sent, or sends
    /// within the grace, is served (the last with `Connection: close`); idle connections
    /// close once their grace is over (`close_drained_idle`).
    pub(super) fn begin_shutdown(&mut self, sig: i32) {
        if self.deadline.is_some() {
            return;
        }
        log::info!(
            "received signal {sig}: stopping gracefully ({} connection(s) open)",
            self.conns
        );
        // Scrapes go to the workers still serving (a reload's new ones).
        let metrics = self.metrics_listener.take();
        for mut l in std::mem::take(&mut self.listeners)
            .into_iter()
            .chain(metrics)
        {
            let _ = match &mut l {
                Listener::Tcp(l) => self.poll.registry().deregister(l),
                Listener::Unix(l, ..) => self.poll.registry().deregister(l),
            };
        }
        let now = Instant::now();
        // The stop waits for every request out: hear of each end at once.
        self.shared.quiet.set(true);
        self.deadline = Some(now + self.graceful_timeout);
        self.drain_started = Some(now);
        self.drain_check_at = Some(now + self.drain_grace());
    }

    /// How long an idle connection is kept in a graceful stop.
    pub(super) fn drain_grace(&self) -> Duration {
        DRAIN_IDLE_GRACE.min(self.graceful_timeout)
    }

    /// In a graceful stop: closes the connections idle for their whole grace, and says
    /// when to look again for the others.
    ///
    /// The close cannot be atomic with the client's next send: a request may be on its way
    /// at that instant. So first the socket is read once more (what arrived is served, with
    /// `Connection: close`); only if nothing did is the close started, and it is a lingering
    /// one (our FIN first, then what the client still sends is read and dropped), never a
    /// reset. A request that crosses the FIN is then answered by a clean end of stream
    /// before any byte of a response, on a connection the server had kept open for it
    /// since its last response: the one case where HTTP/1.1 lets a client retry on its own
    /// (RFC 9112 §9.3.1), and the app never saw it.
    pub(super) fn close_drained_idle(&mut self) {
        let (Some(started), now) = (self.drain_started, self.now) else {
            self.drain_check_at = None;
            return;
        };
        let grace = self.drain_grace();
        let mut next: Option<Instant> = None;
        for slot in 0..self.slots.len() as u32 {
            let Some(conn) = self.conn_mut(slot) else {
                continue;
            };
            if !conn.is_idle() {
                continue;
            }
            let due = conn.drain_due(started, grace);
            if now < due {
                next = Some(next.map_or(due, |t| t.min(due)));
                continue;
            }
            conn.read_again();
            self.advance(slot);
            let Some(conn) = self.conn_mut(slot) else {
                continue;
            };
            if conn.is_idle() {
                conn.close_gracefully();
                self.after_output(slot);
            }
        }
        self.drain_check_at = next;
    }

    pub(super) fn finished(&mut self) -> bool {
        let Some(deadline) = self.deadline else {
            return false;
        };
        // Requests whose clients left still run to the end (within the deadline).
        if self.conns == 0 && self.total_queued == 0 {
            return true;
        }
        if Instant::now() >= deadline {
            log::warning!(
                "graceful timeout: closing {} connection(s) with work in flight",
                self.conns
            );
            // Closed now, so the handlers learn their clients are gone: a body they
            // produce stops at its next item and is closed (`close()`), before they stop.
            for slot in 0..self.slots.len() as u32 {
                self.close(slot);
            }
            self.notify_handlers();
            return true;
        }
        false
    }
}
