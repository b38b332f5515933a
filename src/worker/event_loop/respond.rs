//! The way back: responses taken from the handlers (or inline mode's bridge), queued on
//! their connections and written, and what a connection does once its queue is empty (go
//! on, close, linger).

use std::sync::Arc;

use pyo3::Python;

use super::EventLoop;
use crate::pipeline::msg::{wire_len, ConnRef, Part, Response, StreamCredit};
use crate::worker::conn::Written;

impl EventLoop {
    /// Drains every response ring, writes what came, then lets connections that were
    /// waiting on their responses (or on ring space) go on.
    pub(super) fn service_rings(&mut self, py: Option<Python<'_>>) {
        // A thread is dying (`LoopShared::flush_before_death`): what was pushed before it
        // asked is taken and written in this pass, then it is told.
        let dying = self.shared.dying();
        if let Some(py) = py {
            self.run_inline(py);
        }
        self.pop_responses();
        self.quiet_if_idle();
        self.adopt_websockets();
        if !self.work.stalled.is_empty() {
            self.grow_pool();
        }
        // The requests waiting for a handler go first, oldest first, before the
        // connections their handlers' responses let go on (`settle`): a client pipelining
        // without end does not take every free turn from them.
        for _ in 0..self.work.stalled.len() {
            let Some(r) = self.work.stalled.pop_front() else {
                break;
            };
            if let Some(conn) = self.conns.by_ref(r) {
                conn.listed(false);
                self.advance(r.slot);
            }
        }
        self.settle();
        self.notify_handlers();
        if let Some(asked) = dying {
            self.shared.flushed(asked);
        }
    }

    /// Threads whose app took a WebSocket leave the pool, replaced.
    fn adopt_websockets(&mut self) {
        let (started, refused) = self.handlers.adopt_websockets();
        if started > 0 {
            self.counters.threads_started += started as u64;
            crate::log::debug!("{started} handler thread(s) started in the place of WebSockets");
        }
        if refused > 0 {
            crate::log::warning!(
                "{refused} more WebSocket(s) past --max-websockets hold their handler thread \
                 with none started in its place"
            );
        }
        if started + refused > 0 {
            self.threads_changed();
        }
    }

    /// Requests wait in the loop: the handler pool may start threads for them.
    fn grow_pool(&mut self) {
        let started = self.handlers.grow(self.work.stalled.len(), self.clock.now);
        if started > 0 {
            self.counters.threads_started += started as u64;
            crate::log::debug!(
                "{started} more handler thread(s): requests wait while every handler waits"
            );
            self.threads_changed();
        }
    }

    /// The handler threads running changed: the counters and the metrics' gauge follow.
    pub(super) fn threads_changed(&mut self) {
        let live = self.handlers.live();
        self.counters.threads = live as u64;
        self.outlets.count_threads(live);
    }

    /// Inline mode: runs the app for what can be served now, one request (or body resumed)
    /// at a time, and writes each one's response before the next runs: a quick request is
    /// not held behind a slow one taken in the same pass, and a finished response is in
    /// the socket before the next request could take the process down.
    fn run_inline(&mut self, py: Python<'_>) {
        let Some(inline) = self.inline.as_mut() else {
            return;
        };
        inline.begin_run();
        let mut began = self.clock.now;
        while self.inline.as_mut().is_some_and(|i| i.step(py)) {
            // The app may have run for a while: stamps from here on use the time now.
            let now = self.clock.tick();
            // How long its pieces of work take, as a handler thread keeps it (admission).
            if let Some(inline) = self.inline.as_ref() {
                let took = now.saturating_duration_since(began).as_nanos();
                inline
                    .shared()
                    .note_service(u64::try_from(took).unwrap_or(u64::MAX));
            }
            began = now;
            // Written, and nothing more: connections its response lets go on are resumed
            // after the run (`settle`), so that a client pipelining without end cannot keep
            // the run, and the loop's polling, from ending.
            self.pop_responses();
            self.flush_dirty();
        }
        if let Some(inline) = self.inline.as_mut() {
            inline.end_run();
        }
    }

    /// Drains the handler threads' response rings and writes what came; connections their
    /// last response leaves quiet go on. The handlers hear of it (ring room, credit) from
    /// the caller's `notify_handlers`.
    pub(super) fn take_responses(&mut self) {
        self.pop_responses();
        self.quiet_if_idle();
        self.settle();
    }

    fn quiet_if_idle(&mut self) {
        if self.handlers.queued == 0 && self.drain.is_none() {
            // No request is out: no connection waits on one (set again as one does).
            self.shared.quiet.set(false);
        }
    }

    /// Takes every message the handlers pushed into the loop's connections (`on_response`).
    fn pop_responses(&mut self) {
        for h in 0..self.handlers.links.len() {
            let mut popped = false;
            while let Some(resp) = self.pop_response(h) {
                popped = true;
                self.on_response(h, resp);
            }
            if popped {
                self.handlers.mark(h);
            }
        }
    }

    /// The next response message from handler `h`.
    fn pop_response(&mut self, h: usize) -> Option<Response> {
        match &mut self.handlers.links[h].rx {
            super::Responses::Ring(rx) => rx.pop(),
            super::Responses::Inline => self.inline.as_mut()?.pop_response(),
        }
    }

    /// Wakes the handlers that may wait for what this pass did (ring room, stream credit, a
    /// closed connection), each only if it sleeps.
    pub(super) fn notify_handlers(&mut self) {
        self.counters.handler_wakes += self.handlers.notify_marked();
    }

    /// Writes what is queued and lets resumed connections go on, until neither produces
    /// more work: the loop must not sleep with a connection waiting to be resumed.
    fn settle(&mut self) {
        loop {
            self.flush_dirty();
            if self.work.resume.is_empty() {
                return;
            }
            while let Some(slot) = self.work.resume.pop() {
                self.advance(slot);
            }
        }
    }

    fn on_response(&mut self, h: usize, mut resp: Response) {
        let end = !matches!(resp.part, Part::Partial);
        if end {
            self.handlers.finished_one(h, self.clock.now);
        }
        // A middle part's bytes count against its stream's credit until written.
        let credit = match (resp.part, resp.stream.take()) {
            (Part::Partial, Some(c)) => {
                let n = StreamCredit::charge(wire_len(&resp.data, &resp.more));
                Some((c, n))
            }
            _ => None,
        };
        let now = self.clock.now;
        let r = resp.conn;
        let Some(conn) = self.conns.by_ref(r).filter(|c| c.takes_responses()) else {
            self.response_unwritten(h, r, end, credit);
            return;
        };
        let resume = conn.on_response(resp, credit, now);
        // Requests pipelined behind a response that closes the connection will never be
        // answered: tell the handler, so it does not run the app for them.
        let orphaned = conn.has_orphans();
        self.work.dirty.push(r.slot);
        if resume {
            self.work.resume.push(r.slot);
        }
        if orphaned {
            self.depart(h, r);
        }
    }

    /// A response message for connection `r`, which closed or is closing: dropped. `end`:
    /// it is the request's final part; `credit`: a streamed middle part's.
    fn response_unwritten(
        &mut self,
        h: usize,
        r: ConnRef,
        end: bool,
        credit: Option<(Arc<StreamCredit>, usize)>,
    ) {
        let live = self.conns.by_ref(r);
        let closed = live.is_none();
        if let (Some(conn), true) = (live, end) {
            // A response that must not follow the one that closed the connection.
            conn.response_dropped();
        }
        // If its socket was lent for this request, the handler is done with the
        // descriptor number now.
        if closed && end && self.conns.release_reserved(r) {
            self.accept_again();
        }
        if let Some((c, n)) = credit {
            // The handler is still producing for a connection that is gone: tell the
            // stream itself (the connection's close may not have known it).
            c.cancel();
            self.handlers.credit_returned(c, n);
        } else if !end && !closed {
            // Closing: its handler stops producing. (A closed connection departed as it
            // closed; its slot's word may be another connection's by now.)
            self.depart(h, r);
        }
    }

    pub(super) fn flush_dirty(&mut self) {
        while let Some(slot) = self.work.dirty.pop() {
            self.flush_one(slot);
        }
    }

    /// Writes a connection's queue; closes it when it is done and closing, or failed.
    pub(super) fn flush_one(&mut self, slot: u32) {
        let Some(mut conn) = self.conns.take(slot) else {
            return;
        };
        // The connection is out of its slot, so credit can go back to the handlers as the
        // parts are written.
        let handlers = &mut self.handlers;
        let res = conn.flush(self.clock.now, &mut |c, n| handlers.credit_returned(c, n));
        self.counters.sendfile_bytes += conn.take_sendfile_bytes();
        self.conns.put_back(conn);
        match res {
            Ok(true) => self.after_output(slot),
            Ok(false) => {}
            Err(_) => self.close(slot),
        }
    }

    /// After the queue emptied: a connection goes on, or starts its lingering close.
    pub(super) fn after_output(&mut self, slot: u32) {
        let now = self.clock.now;
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        if conn.has_output() || conn.is_lingering() {
            return;
        }
        let counted = !conn.is_metrics();
        match conn.after_output(now) {
            Written::Open { resume: true, .. } => self.work.resume.push(slot),
            Written::Open { idle: true, .. } => {
                if let Some(drain) = self.drain.as_mut() {
                    // A graceful stop keeps it for the grace (`close_drained_idle`).
                    drain.check_by(conn.drain_due(drain.started, drain.grace));
                }
            }
            Written::Open { .. } => {}
            Written::Close => self.close(slot),
            // The writable edge that takes the rest comes back here through `flush_one`.
            Written::Flushing => {}
            Written::Lingering => {
                // A lingering connection is on its way out (within its timeout): it takes
                // no `--max-connections` place from a client waiting to be served.
                let me = conn.me();
                self.conns.linger(me, counted, std::time::Instant::now());
                self.accept_again();
            }
        }
    }
}
