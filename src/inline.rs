//! Inline mode (`--blocking-threads 0`): the app runs on the loop thread itself, like
//! bjoern, with no hand-off at all: the best shape for one core and a CPU-bound app.
//!
//! The loop keeps its structure: it still pushes parsed requests into a request ring (one
//! "handler" whose consumer lives on the loop thread) and still takes response messages
//! from that handler's link. What changes is who runs the bridge: between its passes the
//! loop calls [`Inline::run`], which serves every queued request on this thread, and the
//! responses land in a plain queue (`Sink::Inline`) that the loop drains right after.
//!
//! Nothing may wait here, because the loop is the waiter's only waker. So the response
//! side never blocks: a streamed body whose chunk credit is spent is *suspended* between
//! two items (`Bridge::resume` goes on once the loop has written some of it, or drops it
//! when its client leaves), and no other request starts until it ends, as with one
//! handler thread. The loop thread holds the GIL from start to exit and releases it only
//! while it sleeps in `epoll_wait`, so threads the app starts still run.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

use pyo3::prelude::*;

use crate::event_loop::{HandlerShared, LoopShared};
use crate::msg::{Request, Response};
use crate::ring::{Consumer, Producer};
use crate::stats;
use crate::wsgi::{Bridge, Served, ServerInfo, Sink};

/// What the worker hands the loop thread for inline mode (all `Send`; the bridge itself is
/// built on the loop thread, where it stays).
pub struct InlineSetup {
    pub tx: Producer<Request>,
    pub rx: Consumer<Request>,
    pub shared: Arc<HandlerShared>,
    pub app: Py<PyAny>,
    pub info: Arc<ServerInfo>,
    pub access_log: Option<Arc<crate::access_log::Shared>>,
    pub metrics: Option<crate::metrics::Recorder>,
}

/// The app's side of inline mode, owned by the loop thread.
pub struct Inline {
    bridge: Bridge,
    rx: Consumer<Request>,
    /// The bridge's response messages, in order, for the loop to take.
    out: Rc<RefCell<VecDeque<Response>>>,
    shared: Arc<HandlerShared>,
}

impl Inline {
    /// Builds the bridge (with the GIL held); the producer is the loop's end of its
    /// request ring.
    pub fn new(
        py: Python<'_>,
        setup: InlineSetup,
        loop_shared: Arc<LoopShared>,
    ) -> PyResult<(Inline, Producer<Request>)> {
        let InlineSetup {
            tx,
            rx,
            shared,
            app,
            info,
            access_log,
            metrics,
        } = setup;
        let out = Rc::new(RefCell::new(VecDeque::new()));
        let bridge = Bridge::new(
            py,
            app,
            Sink::Inline(out.clone()),
            shared.clone(),
            loop_shared,
            &info,
            crate::wsgi::Observers {
                access_log,
                metrics,
            },
        )?;
        Ok((
            Inline {
                bridge,
                rx,
                out,
                shared,
            },
            tx,
        ))
    }

    pub fn pop_response(&mut self) -> Option<Response> {
        self.out.borrow_mut().pop_front()
    }

    pub fn shared(&self) -> &Arc<HandlerShared> {
        &self.shared
    }

    /// There is something `run` would do now.
    pub fn has_work(&self) -> bool {
        if self.bridge.is_suspended() {
            self.bridge.can_resume()
        } else {
            !self.rx.is_empty()
        }
    }

    /// Serves queued requests until none is left or a body is suspended.
    pub fn run(&mut self, py: Python<'_>) {
        if self.bridge.is_suspended()
            && (!self.bridge.can_resume() || self.bridge.resume(py) == Served::Suspended)
        {
            return;
        }
        while let Some(req) = self.rx.pop() {
            stats::bump(&self.shared.counters.requests, 1);
            if self.bridge.serve(py, req) == Served::Suspended {
                return;
            }
        }
    }

    /// Writes buffered access log lines (before the loop sleeps).
    pub fn flush_log(&mut self) {
        self.bridge.flush_log();
    }

    /// At exit: a suspended body is closed; the rest is dropped with the GIL held.
    pub fn finish(mut self, py: Python<'_>) {
        self.bridge.abandon(py);
        crate::python::flush_stdio(py);
    }
}
