//! Inline mode (`--blocking-threads 0`): the app runs on the loop thread itself, like
//! bjoern, with no hand-off at all: the best shape for one core and a CPU-bound app.
//!
//! The loop keeps its structure: it still pushes parsed requests into a request ring (one
//! "handler" whose consumer lives on the loop thread) and still takes response messages
//! from that handler's link. What changes is who runs the bridge: between its passes the
//! loop serves every queued request on this thread, one [`Inline::step`] at a time, and
//! each step's messages land in a plain queue (`Sink::Inline`) that the loop drains and
//! writes before the next step.
//!
//! Nothing may wait here, because the loop is the waiter's only waker. So the response
//! side never blocks: a streamed body whose credit is spent is set aside between two items,
//! as on a handler thread (`Bridge::step` goes on with it once the loop has written some
//! of it, or closes it when its client leaves), and other requests are served meanwhile.
//! The loop thread holds the GIL from start to exit and releases it only while it sleeps in
//! `epoll_wait`, so threads the app starts still run.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use crate::pipeline::msg::{Request, Response};
use crate::pipeline::ring::{Consumer, Producer};
use crate::pipeline::shared::{HandlerShared, LoopShared};
use crate::wsgi::{Bridge, ServerInfo, Sink};

/// What the worker hands the loop thread for inline mode (all `Send`; the bridge itself is
/// built on the loop thread, where it stays).
pub(crate) struct InlineSetup {
    pub(crate) tx: Producer<Box<Request>>,
    pub(crate) rx: Consumer<Box<Request>>,
    pub(crate) shared: Arc<HandlerShared>,
    pub(crate) app: Py<PyAny>,
    pub(crate) info: Arc<ServerInfo>,
    pub(crate) access_log: Option<Arc<crate::access_log::AccessLog>>,
    pub(crate) metrics: Option<crate::metrics::Recorder>,
}

/// The app's side of inline mode, owned by the loop thread.
pub(crate) struct Inline {
    bridge: Bridge,
    rx: Consumer<Box<Request>>,
    /// The bridge's response messages, in order, for the loop to take.
    out: Arc<Mutex<VecDeque<Response>>>,
    shared: Arc<HandlerShared>,
}

impl Inline {
    /// Builds the bridge (with the GIL held); the producer is the loop's end of its
    /// request ring.
    pub(crate) fn new(
        py: Python<'_>,
        setup: InlineSetup,
        loop_shared: Arc<LoopShared>,
    ) -> PyResult<(Inline, Producer<Box<Request>>)> {
        crate::wsgi::response::mark_inline_loop_thread();
        let InlineSetup {
            tx,
            rx,
            shared,
            app,
            info,
            access_log,
            metrics,
        } = setup;
        let out = Arc::new(Mutex::new(VecDeque::new()));
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

    pub(crate) fn pop_response(&mut self) -> Option<Response> {
        // (Pushed under the bridge's exchange lock, by this thread, or by a thread the app
        // started: a `write()` to a response set aside for its client.)
        self.out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    pub(crate) fn shared(&self) -> &Arc<HandlerShared> {
        &self.shared
    }

    /// There is something `run` would do now.
    pub(crate) fn has_work(&self) -> bool {
        (self.bridge.takes_requests() && !self.rx.is_empty())
            || self.bridge.credits().iter().any(|c| c.can_go_on())
    }

    /// A run begins: `step` serves what can be served now, one request or body at a time,
    /// until it returns false; then `end_run`. The loop writes what each step produced
    /// before the next, so a response is never held behind the requests after it.
    pub(crate) fn begin_run(&mut self) {
        // Relaxed, both: only this thread stores it. A thread in `write()` waiting for
        // credit is told by `credits_returned` (its SeqCst fence pairs with the waiter's, and
        // orders this store before the load of the waiters' count): the app about to run
        // may wait on that thread, which stops waiting for credit now.
        self.shared.app_running.store(true, Ordering::Relaxed);
        self.shared.credits_returned();
        self.bridge.new_pass();
    }

    /// Serves one queued request, or goes on with one body whose client caught up; false
    /// when there was nothing to do.
    pub(crate) fn step(&mut self, py: Python<'_>) -> bool {
        self.bridge.step(py, &mut self.rx)
    }

    pub(crate) fn end_run(&mut self) {
        // Relaxed: as in `begin_run`.
        self.shared.app_running.store(false, Ordering::Relaxed);
    }

    /// A thread the app started pushed a message while the app was not running here.
    pub(crate) fn has_output(&self) -> bool {
        !self
            .out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Writes buffered access log lines (before the loop sleeps).
    pub(crate) fn flush_log(&mut self) {
        self.bridge.flush_log();
    }

    /// At exit: a suspended body is closed; the rest is dropped with the GIL held.
    pub(crate) fn finish(mut self, py: Python<'_>) {
        // The closes below are the app's code on this thread: as in `run`.
        self.shared.app_running.store(true, Ordering::Relaxed);
        self.shared.credits_returned();
        self.bridge.abandon(py);
        crate::python::flush_stdio(py);
    }
}
