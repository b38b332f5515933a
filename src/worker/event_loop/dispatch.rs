//! Handing requests on: to the handler that may take each now (`Handlers::choose`), or
//! queued behind one after `HOLD_MAX`; and what a handler is told of a request whose
//! client left.

use super::timeouts::HOLD_MAX;
use super::EventLoop;
use crate::pipeline::msg::{ConnRef, Request};
use crate::sys::ipc::Status;
use crate::worker::conn::Conn;

impl EventLoop {
    /// Pushes a request into a handler's ring; `Err` gives it back when the ring is full.
    pub(super) fn dispatch(
        &mut self,
        conn: &mut Conn,
        mut req: Box<Request>,
    ) -> Result<(), Box<Request>> {
        // Requests of one connection stay on one handler so responses come back in order;
        // none may be free for it now (`Handlers::choose`): held, it waits in the loop.
        let h = match self.handlers.choose(conn.handler(), self.clock.now_ns()) {
            Some(h) => h,
            // Held long enough for a handler to free up or the pool to grow: it queues
            // behind a busy one after all (whose steps may never leave a gap for it), next
            // in line and not behind a slow request; the rest wait in the loop, where their
            // budget is kept (`--max-queue-wait`).
            None if self.clock.now.saturating_duration_since(req.queued_at) >= HOLD_MAX => {
                let now = self.clock.now_ns();
                match self.handlers.next_in_line(conn.handler(), HOLD_MAX, now) {
                    Some(h) => h,
                    None => {
                        self.counters.held += 1;
                        return Err(req);
                    }
                }
            }
            None => {
                self.counters.held += 1;
                return Err(req);
            }
        };
        // A handler thread may write the response itself (inline, the loop writes it in
        // this same pass anyway).
        let threaded = self.handlers.links[h].join.is_some();
        req.socket = threaded
            .then(|| conn.socket_to_lend(req.head.websocket))
            .flatten();
        let lent = req.socket.is_some();
        match self.handlers.push(h, req) {
            Ok(woke) => self.counters.handler_wakes += u64::from(woke),
            Err(req) => {
                self.counters.ring_full += 1;
                return Err(req);
            }
        }
        conn.dispatched(h, lent);
        self.counters.requests += 1;
        if self.counters.requests == self.opts.max_requests {
            // `--max-requests` reached: the master starts a replacement, then stops this
            // worker gracefully; until then it serves on.
            self.outlets.tell(Status::Recycle);
        }
        Ok(())
    }

    /// A parked request whose connection closed or whose client left: a handler takes it
    /// anyway, sees the departure, and logs it (499) without running the app; dropped only
    /// if every ring is full.
    pub(super) fn abandon(&mut self, r: ConnRef, req: Box<Request>) {
        self.shared.departures.depart(r);
        match self.handlers.push_anywhere(req) {
            Some(woke) => self.counters.handler_wakes += u64::from(woke),
            None => self.counters.ring_full += 1,
        }
    }

    /// Connection `r`, with requests on handler `h`, lost its client (a reset, an end of
    /// stream, a close) or will answer nothing more: the handler skips its requests not
    /// yet started, `m0serve.client_disconnected()` says so for the one running, and a
    /// thread waiting in `write()` for its credit wakes and stops.
    pub(super) fn depart(&mut self, h: usize, r: ConnRef) {
        self.shared.departures.depart(r);
        self.handlers.mark(h);
    }
}
