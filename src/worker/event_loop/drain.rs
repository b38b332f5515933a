//! A graceful stop (SIGTERM, and every drain of a reload or recycle): no new connections;
//! every request a client has sent, or sends within the grace, is served, the last with
//! `Connection: close`; idle connections close once their grace is over.

use std::time::{Duration, Instant};

use super::EventLoop;
use crate::log;

/// In a graceful stop, how long an idle connection is kept for the request its client may
/// be sending (counted from the stop, or from when its last response was written, whichever
/// is later). A response written before the stop said the connection stays open, and a
/// client opens a connection to send a request: closing either at once would lose the
/// request already on its way (during a reload, for one). What arrives in the grace is
/// served with `Connection: close`; then the idle connections close.
const DRAIN_IDLE_GRACE: Duration = Duration::from_secs(2);

/// A graceful stop under way.
pub(super) struct Drain {
    /// When it began.
    pub(crate) started: Instant,
    /// When it closes what is still open, served or not (`--graceful-timeout`).
    pub(crate) deadline: Instant,
    /// How long an idle connection is kept.
    pub(crate) grace: Duration,
    /// When idle connections are next looked at for the end of their grace.
    pub(crate) check_at: Option<Instant>,
}

impl Drain {
    /// Its idle connections are next looked at by `due` at the latest.
    pub(super) fn check_by(&mut self, due: Instant) {
        self.check_at = Some(self.check_at.map_or(due, |t| t.min(due)));
    }
}

impl EventLoop {
    /// A graceful stop: no new connections; every request a client has sent, or sends
    /// within the grace, is served (the last with `Connection: close`); idle connections
    /// close once their grace is over (`close_drained_idle`).
    pub(super) fn begin_shutdown(&mut self, sig: i32) {
        if self.drain.is_some() {
            return;
        }
        log::info!(
            "received signal {sig}: stopping gracefully ({} connection(s) open)",
            self.conns.counts().open
        );
        self.acceptor.close(self.poller.registry());
        let now = Instant::now();
        // The stop waits for every request out: hear of each end at once.
        self.shared.quiet.set(true);
        let grace = DRAIN_IDLE_GRACE.min(self.opts.graceful_timeout);
        self.drain = Some(Drain {
            started: now,
            deadline: now + self.opts.graceful_timeout,
            grace,
            check_at: Some(now + grace),
        });
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
        let Some((started, grace)) = self.drain.as_ref().map(|d| (d.started, d.grace)) else {
            return;
        };
        let now = self.clock.now;
        let mut next: Option<Instant> = None;
        for slot in 0..self.conns.len() {
            let Some(conn) = self.conns.get_mut(slot).filter(|c| c.is_idle()) else {
                continue;
            };
            let due = conn.drain_due(started, grace);
            if now < due {
                next = Some(next.map_or(due, |t| t.min(due)));
                continue;
            }
            conn.read_again();
            self.advance(slot);
            if let Some(conn) = self.conns.get_mut(slot).filter(|c| c.is_idle()) {
                conn.close_gracefully();
                self.after_output(slot);
            }
        }
        if let Some(d) = self.drain.as_mut() {
            d.check_at = next;
        }
    }

    /// Whether the loop is done: a graceful stop with nothing left open or out, or one
    /// past its deadline (what is still open is closed now).
    pub(super) fn finished(&mut self) -> bool {
        let Some(deadline) = self.drain.as_ref().map(|d| d.deadline) else {
            return false;
        };
        // Requests whose clients left still run to the end (within the deadline).
        if self.conns.counts().open == 0 && self.handlers.queued == 0 {
            return true;
        }
        if Instant::now() >= deadline {
            log::warning!(
                "graceful timeout: closing {} connection(s) with work in flight",
                self.conns.counts().open
            );
            // Closed now, so the handlers learn their clients are gone: a body they
            // produce stops at its next item and is closed (`close()`), before they stop.
            self.close_all();
            self.notify_handlers();
            return true;
        }
        false
    }
}
