//! The PEP 3333 bridge: one [`Bridge`] per handler thread turns a [`Request`] into an
//! environ, calls the app, and drives its response into the response ring.

pub(crate) mod environ;
pub(crate) mod errors;
pub(crate) mod file_wrapper;
pub(crate) mod handover;
pub(crate) mod input;
pub(crate) mod proxy;
pub(crate) mod pystr;
pub(crate) mod response;
pub(crate) mod start_response;

use std::collections::VecDeque;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator, PyList, PyTuple};

use crate::access_log::AccessLogger;
use crate::log;
use crate::pipeline::msg::{ConnRef, Request, StreamCredit};
use crate::pipeline::ring::Consumer;
use crate::pipeline::shared::REQUEST_RING_SLOTS;
use crate::pipeline::shared::{HandlerShared, LoopShared};
use crate::pipeline::stats;
use environ::EnvBuilder;
pub use environ::ServerInfo;
use file_wrapper::FileWrapper;
use input::Inputs;
use pystr::bytes_of;
pub use response::Sink;
use response::{Credit, Exchange, LengthMismatch, ReqInfo};
use start_response::{Callables, ClientDisconnected};

/// What the access log needs of the request being served, kept from its start.
struct LogCtx {
    peer: crate::pipeline::msg::Peer,
    head_bytes: Vec<u8>,
    head: crate::http::parse::Head,
    started: std::time::Instant,
    /// The client a trusted proxy named, once the environ is built.
    client: Option<String>,
    /// Its client left before the app ran: logged as 499 (nginx's "client closed
    /// request"), not as the 500 that closes the exchange.
    cancelled: bool,
    /// The environ's values the log format shows (`%({KEY}e)s`), as the app left them.
    environ_values: Vec<Option<String>>,
}

/// What watches a bridge's requests: the access log and the metrics (each optional).
pub struct Observers {
    pub access_log: Option<Arc<crate::access_log::AccessLog>>,
    pub metrics: Option<crate::metrics::Recorder>,
}

/// `--metrics-port`: when the request being served was queued and taken.
struct Timing {
    queued_at: std::time::Instant,
    taken_at: std::time::Instant,
}

/// Most requests a handler keeps waiting behind bodies set aside (as many as its ring
/// holds): past it, it leaves the rest in the ring, which fills, and the loop stops reading
/// those connections, so clients that pipeline behind a stalled body cannot make it hold
/// more.
const DEFERRED_MAX: usize = REQUEST_RING_SLOTS;

/// A handler writes a response to its lent socket itself (`Request::socket`) only while
/// fewer requests than this wait in its ring: then the hand-back to the loop would cost the
/// response a wake-up or a wait for the loop's next pass. With more queued the loop is
/// awake and writes the responses of a pass together, which the client side takes with
/// fewer wake-ups of its own (benchmarks/decisions.md, "the handler writes small responses
/// itself").
const OWN_WRITE_MAX_QUEUED: usize = 8;

pub struct Bridge {
    app: Py<PyAny>,
    /// `--access-log`: this handler's logger, and the request being served.
    log: Option<AccessLogger>,
    current: Option<LogCtx>,
    /// `--metrics-port`: this thread's counters, and the request being served.
    metrics: Option<crate::metrics::Recorder>,
    timing: Option<Timing>,
    ex: Arc<Exchange>,
    env: EnvBuilder,
    /// `start_response` and `write`, handed to one request after another.
    callables: Callables,
    /// `wsgi.input`, likewise.
    inputs: Inputs,
    next_id: u64,
    /// Streamed bodies set aside while their clients catch up, oldest first, and their
    /// credits (the same order), which a waiting handler checks without the GIL.
    suspended: Vec<Pending>,
    credits: Vec<Arc<StreamCredit>>,
    /// Requests whose connection has a body set aside (or an earlier request here): they
    /// wait for it, in the order they came, so a connection's responses stay in order.
    deferred: VecDeque<Box<Request>>,
    /// Inline mode: a streamed body gives the loop back its thread after every part it
    /// produced, so the part is written at once (the loop is this thread), and a body
    /// that waits between items delays only itself, by one item.
    yield_each_part: bool,
    /// The last piece of work resumed a body: a new request goes first next, so requests
    /// are not starved by many bodies that can always go on.
    resumed_last: bool,
    /// The request being served asks to become a WebSocket and its socket was offered
    /// (`handover::HandOver`): whether the app took it.
    taken: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// A streamed body set aside between two items, with everything its response needs to go
/// on: served again by the same thread (Python objects never leave it).
struct Pending {
    iterable: Py<PyAny>,
    iter: Py<PyIterator>,
    environ: Py<PyDict>,
    /// Its request (its response waits in the exchange, `Exchange::set_aside`).
    id: u64,
    /// Inline mode: set aside only to let the loop write what it produced; resumed on the
    /// loop's next pass, not in this one.
    yielded: bool,
    log: Option<LogCtx>,
    timing: Option<Timing>,
    conn: ConnRef,
}

/// How driving the body ended when it did not fail.
enum Outcome {
    Done,
    /// The body was known whole and the response is finished already (`send_whole`),
    /// with what `Exchange::finish` would have said of its length.
    Finished(Option<LengthMismatch>),
    /// The client went away; the rest of the body was not produced.
    Cancelled,
    /// The response's credit is spent: iteration goes on in `Bridge::resume`.
    Suspended(Py<PyIterator>),
}

/// What serving (or resuming) a request left behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// The final part is queued.
    Done,
    /// The body is set aside until the loop has written some of it.
    Suspended,
}

impl Bridge {
    pub fn new(
        py: Python<'_>,
        app: Py<PyAny>,
        sink: Sink,
        shared: Arc<HandlerShared>,
        loop_shared: Arc<LoopShared>,
        info: &ServerInfo,
        observers: Observers,
    ) -> PyResult<Bridge> {
        let Observers {
            access_log,
            metrics,
        } = observers;
        let inline = matches!(sink, Sink::Inline(_));
        let ex = Arc::new(Exchange::new(sink, shared, loop_shared));
        let env = EnvBuilder::new(py, info)?;
        let gone = Bound::new(py, ClientDisconnected { ex: ex.clone() })?;
        env.add_constant(py, "m0serve.client_disconnected", gone.into_any())?;
        let callables = Callables::new(py, &ex)?;
        Ok(Bridge {
            app,
            log: access_log.map(AccessLogger::new),
            current: None,
            metrics,
            timing: None,
            ex,
            env,
            callables,
            inputs: Inputs::default(),
            next_id: 0,
            suspended: Vec::new(),
            credits: Vec::new(),
            deferred: VecDeque::new(),
            yield_each_part: inline,
            resumed_last: false,
            taken: None,
        })
    }

    /// The credits of the bodies set aside: a waiting handler wakes when one can go on.
    pub(crate) fn credits(&self) -> &[Arc<StreamCredit>] {
        &self.credits
    }

    /// It takes requests from its ring: fewer than `DEFERRED_MAX` wait behind bodies set
    /// aside. (Past that the ring fills, and the loop stops reading those connections.)
    pub(crate) fn takes_requests(&self) -> bool {
        self.deferred.len() < DEFERRED_MAX
    }

    /// Does one piece of work if there is one: resumes the oldest body set aside whose
    /// client took some of it (or left), else serves the next request in order (a
    /// deferred one whose connection is free again, else one from the ring). `false` when
    /// there was nothing to do.
    pub(crate) fn step(&mut self, py: Python<'_>, rx: &mut Consumer<Box<Request>>) -> bool {
        if self.resumed_last {
            self.resumed_last = false;
            if self.serve_next(py, rx) {
                return true;
            }
        }
        let resumable = self
            .credits
            .iter()
            .zip(&self.suspended)
            .position(|(c, p)| !p.yielded && c.can_go_on());
        if let Some(i) = resumable {
            self.ex.shared.busy.start();
            self.resume(py, i);
            self.resumed_last = true;
            return true;
        }
        self.serve_next(py, rx)
    }

    /// Serves the next request that may be served now, if there is one.
    fn serve_next(&mut self, py: Python<'_>, rx: &mut Consumer<Box<Request>>) -> bool {
        let Some(req) = self.next_request(rx) else {
            return false;
        };
        stats::bump(&self.ex.shared.counters.requests, 1);
        self.ex.shared.busy.start();
        // Requests behind this one: its response need not wake the loop by itself.
        // Only for the final part this thread pushes while serving it: anything pushed
        // later (a body resumed, a thread the app started) wakes the loop as usual.
        self.ex
            .shared
            .defer_loop_wake
            .store(!rx.is_empty(), std::sync::atomic::Ordering::Relaxed);
        let mut req = req;
        if req.socket.is_some() && rx.holds_at_least(OWN_WRITE_MAX_QUEUED) {
            // A deep queue: the loop is busy with this handler's responses anyway, and
            // writes this one with the rest of its pass.
            req.socket = None;
        }
        self.serve(py, req);
        self.ex
            .shared
            .defer_loop_wake
            .store(false, std::sync::atomic::Ordering::Relaxed);
        true
    }

    /// Inline mode, at the start of a loop pass: the bodies that yielded in the last one
    /// may go on.
    pub(crate) fn new_pass(&mut self) {
        for p in &mut self.suspended {
            p.yielded = false;
        }
    }

    /// The next request that may be served now.
    fn next_request(&mut self, rx: &mut Consumer<Box<Request>>) -> Option<Box<Request>> {
        if !self.deferred.is_empty() {
            // The first deferred request of each connection is its oldest.
            if let Some(i) = self.deferred.iter().position(|r| !self.blocked(r.conn)) {
                return self.deferred.remove(i);
            }
        }
        while self.takes_requests() {
            let req = rx.pop()?;
            if self.blocked(req.conn) || self.deferred.iter().any(|r| r.conn == req.conn) {
                self.deferred.push_back(req);
                continue;
            }
            return Some(req);
        }
        None
    }

    /// A body of this connection is set aside: its next request must wait for it.
    fn blocked(&self, conn: ConnRef) -> bool {
        self.suspended.iter().any(|p| p.conn == conn)
    }

    /// Serves one request; every outcome ends in exactly one final part on the sink, or in
    /// `Served::Suspended` until `resume` ends it.
    pub fn serve(&mut self, py: Python<'_>, req: Box<Request>) -> Served {
        // One clock reading for the access log and the metrics, none for neither.
        let now = (self.log.is_some() || self.metrics.is_some()).then(std::time::Instant::now);
        if let (Some(log), Some(now)) = (self.log.as_mut(), now) {
            log.flush_if_old();
            self.current = Some(LogCtx {
                peer: req.peer,
                head_bytes: req.data[..req.head.head_len].to_vec(),
                head: req.head.clone(),
                started: now,
                client: None,
                cancelled: false,
                environ_values: Vec::new(),
            });
        }
        if let (Some(_), Some(now)) = (&self.metrics, now) {
            self.timing = Some(Timing {
                queued_at: req.queued_at,
                taken_at: now,
            });
        }
        let served = self.serve_request(py, req);
        self.inputs.release(py);
        if served == Served::Done {
            self.request_done(py);
        }
        served
    }

    /// The request being served ended: its access log line and its metrics.
    fn request_done(&mut self, py: Python<'_>) {
        if self.current.is_none() && self.timing.is_none() {
            return;
        }
        let now = std::time::Instant::now();
        let (code, body_bytes) = self.ex.outcome(py);
        let response_headers = match &self.log {
            Some(log) if !log.response_header_names().is_empty() => {
                self.ex.response_headers(py, log.response_header_names())
            }
            _ => Vec::new(),
        };
        self.log_response(now, code, body_bytes, &response_headers);
        self.count_response(now, code);
    }

    /// Adds the request just ended to the metrics.
    fn count_response(&mut self, now: std::time::Instant, code: u16) {
        let (Some(m), Some(t)) = (self.metrics.as_ref(), self.timing.take()) else {
            return;
        };
        m.section().request_done(
            code,
            t.taken_at.saturating_duration_since(t.queued_at),
            now.saturating_duration_since(t.taken_at),
            now.saturating_duration_since(t.queued_at),
        );
    }

    /// Writes the access log line of the request just ended.
    fn log_response(
        &mut self,
        now: std::time::Instant,
        code: u16,
        body_bytes: u64,
        response_headers: &[Option<Vec<u8>>],
    ) {
        let (Some(log), Some(ctx)) = (self.log.as_mut(), self.current.take()) else {
            return;
        };
        log.record(&crate::access_log::Entry {
            peer: ctx.peer,
            client: ctx.client.as_deref(),
            head_bytes: &ctx.head_bytes,
            head: &ctx.head,
            status: if ctx.cancelled { 499 } else { code },
            body_bytes,
            duration: now.saturating_duration_since(ctx.started),
            response_headers,
            environ_values: &ctx.environ_values,
        });
    }

    /// Writes buffered access log lines (before the handler waits).
    pub(crate) fn flush_log(&mut self) {
        if let Some(log) = self.log.as_mut() {
            log.flush();
        }
    }

    fn serve_request(&mut self, py: Python<'_>, req: Box<Request>) -> Served {
        self.next_id += 1;
        let id = self.next_id;
        let method = req.head.method.get(&req.data);
        let info = ReqInfo {
            id,
            conn: req.conn,
            version: req.head.version,
            is_head: method == b"HEAD",
            keep_alive: req.head.keep_alive,
            socket: req.socket,
        };
        if self.ex.begin(py, info) {
            // Its connection closed before the app ran (a response ahead of it in the
            // pipeline closed it, or the client left): do not run the app for nobody, and
            // do not count it as served (the metrics would show a 500 nobody got).
            self.timing = None;
            if let Some(ctx) = self.current.as_mut() {
                ctx.cancelled = true;
            }
            if let Some(m) = &self.metrics {
                m.section().count_abandoned();
            }
            self.ex.fail(py);
            return Served::Done;
        }
        let environ = match self.env.build(py, &req) {
            Ok(e) => e,
            Err(e) => {
                let what = errors::describe_request(&req);
                errors::log_exception(py, &e, &format!("building the environ for {what}"));
                self.ex.fail(py);
                return Served::Done;
            }
        };
        if let Some(ctx) = self.current.as_mut() {
            ctx.client = self.env.take_forwarded_client();
        }
        self.taken = None;
        if req.head.websocket {
            if let Err(e) = self.offer_socket(py, &environ, &req) {
                errors::log_exception(py, &e, "offering a WebSocket's socket");
            }
        }
        // For log lines on the error paths only: a reference, not a formatted string.
        let env_ref = environ.clone();
        let head_len = req.head.head_len;
        let called = self
            .inputs
            .for_request(py, req.data, head_len, req.spooled)
            .and_then(|input| environ.set_item(self.env.input_key(py), input))
            .and_then(|()| self.callables.for_request(py, id))
            .and_then(|sr| self.app.bind(py).call1((environ, sr)));
        let iterable = match called {
            Ok(it) => it,
            Err(e) => {
                self.note_environ(&env_ref);
                if self.handed_over() {
                    // simple-websocket's libraries end their call so under gunicorn
                    // (StopIteration); nothing is the server's to answer.
                    log::debug!(
                        "the app took the socket of {}; it raised {e}",
                        errors::describe_environ(&env_ref)
                    );
                    self.ex.hand_over(py);
                    return Served::Done;
                }
                self.app_failed(py, &e, &env_ref);
                self.ex.fail(py);
                return Served::Done;
            }
        };
        if self.handed_over() {
            // Its body is not the server's to send on a socket the app has taken.
            return self.conclude(py, iterable, env_ref, Ok(Outcome::Done));
        }
        let outcome = self.drive(py, &iterable);
        self.conclude(py, iterable, env_ref, outcome)
    }

    /// Puts `gunicorn.socket` in the environ of a request that asks to become a WebSocket:
    /// the connection's socket when it may be handed over, else a value that says why not.
    fn offer_socket(
        &mut self,
        py: Python<'_>,
        environ: &Bound<'_, PyDict>,
        req: &Request,
    ) -> PyResult<()> {
        let offer = match (req.socket, self.yield_each_part) {
            (_, true) => handover::HandOver::refused(
                "m0serve cannot hand a WebSocket's socket over in inline mode \
                 (--blocking-threads 0): the app runs on the loop thread, which the WebSocket \
                 would hold",
            ),
            (Some(fd), false) => {
                let taken = Arc::new(std::sync::atomic::AtomicBool::new(false));
                self.taken = Some(taken.clone());
                handover::HandOver::new(fd.fd(), taken, self.ex.shared.clone())
            }
            (None, false) if req.secure => handover::HandOver::refused(
                "m0serve hands a WebSocket's socket over on plain TCP and Unix sockets only; \
                 this connection is TLS: terminate TLS in a proxy in front of m0serve",
            ),
            (None, false) => handover::HandOver::refused(
                "other requests or bytes came with the WebSocket request on its connection \
                 (a client waits for the handshake's answer before it sends): its socket \
                 cannot be handed over",
            ),
        };
        environ.set_item("gunicorn.socket", Bound::new(py, offer)?)
    }

    /// The app took the current request's socket (`handover::HandOver`).
    fn handed_over(&self) -> bool {
        // Acquire: pairs with the Release in `HandOver::socket`, which may run on a thread
        // the app started.
        self.taken
            .as_ref()
            .is_some_and(|t| t.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Goes on with the body set aside at `i` (its credit came back, or its client left).
    fn resume(&mut self, py: Python<'_>, i: usize) -> Served {
        let p = self.suspended.remove(i);
        self.credits.remove(i);
        self.ex.shared.set_aside(self.suspended.len());
        self.ex.resume(py, p.id);
        self.current = p.log;
        self.timing = p.timing;
        let iter = p.iter.into_bound(py);
        let outcome = if self.ex.cancelled(py) {
            Ok(Outcome::Cancelled)
        } else {
            self.pump(py, iter)
        };
        let served = self.conclude(
            py,
            p.iterable.into_bound(py),
            p.environ.into_bound(py),
            outcome,
        );
        self.inputs.release(py);
        if served == Served::Done {
            self.request_done(py);
        }
        served
    }

    /// At exit: bodies still set aside are given up, their iterables closed; deferred
    /// requests are dropped (the loop has stopped).
    pub(crate) fn abandon(&mut self, py: Python<'_>) {
        self.credits.clear();
        self.deferred.clear();
        self.ex.drop_aside(py);
        for p in std::mem::take(&mut self.suspended) {
            let iterable = p.iterable.into_bound(py);
            if let Err(e) = close_iterable(&iterable) {
                let what = errors::describe_environ(p.environ.bind(py));
                errors::log_exception(py, &e, &format!("the application failed on {what}"));
            }
        }
    }

    /// Ends a response once its body was driven: `close()`, then the final part; or sets
    /// the body aside.
    fn conclude(
        &mut self,
        py: Python<'_>,
        iterable: Bound<'_, PyAny>,
        environ: Bound<'_, PyDict>,
        outcome: PyResult<Outcome>,
    ) -> Served {
        if let Ok(Outcome::Suspended(iter)) = outcome {
            let (id, conn) = self.ex.current(py);
            let Some(credit) = self.ex.set_aside(py) else {
                // (Unreachable: a spent credit exists.) Serve on as if it were done.
                self.ex.resume(py, id);
                return self.conclude(py, iterable, environ, Ok(Outcome::Done));
            };
            self.credits.push(credit);
            self.suspended.push(Pending {
                iterable: iterable.unbind(),
                iter,
                environ: environ.unbind(),
                id,
                yielded: self.yield_each_part,
                conn,
                log: self.current.take(),
                timing: self.timing.take(),
            });
            self.ex.shared.set_aside(self.suspended.len());
            return Served::Suspended;
        }
        self.note_environ(&environ);
        if self.handed_over() {
            // The connection is the app's: its iterable is closed (PEP 3333) and nothing is
            // written, whatever it held.
            if let Err(e) = close_iterable(&iterable) {
                log::debug!("the app took its socket; its close() raised {e}");
            }
            self.ex.hand_over(py);
            return Served::Done;
        }
        let what = || errors::describe_environ(&environ);
        // PEP 3333: "If the iterable returned by the application has a close() method,
        // the server or gateway must call that method upon completion of the current
        // request, whether the request was completed normally, or terminated early due to
        // an application error during iteration or an early disconnect of the browser."
        // A close() that raises is the app's error, logged, but the body it closed is
        // whole: the response is still finished (as gunicorn does).
        if let Err(e) = close_iterable(&iterable) {
            let what = format!("the application's close() failed on {}", what());
            errors::log_exception(py, &e, &what);
        }
        let result = match outcome {
            Ok(Outcome::Cancelled) => {
                self.ex.fail(py);
                return Served::Done;
            }
            Err(e) => Err(e),
            Ok(Outcome::Finished(mismatch)) => Ok(mismatch),
            Ok(Outcome::Done | Outcome::Suspended(_)) => self.ex.finish(py),
        };
        match result {
            Ok(None) => {}
            Ok(Some(LengthMismatch { declared, produced })) => {
                // PEP 3333: "the server should" note an app that sends other than the
                // Content-Length it declared; the connection closes after the response.
                log::warning!(
                    "{}: the application declared Content-Length: {declared} but its body had \
                     {produced} bytes; the response was cut to match and its connection closed",
                    what()
                );
            }
            Err(e) => {
                self.app_failed(py, &e, &environ);
                self.ex.fail(py);
            }
        }
        Served::Done
    }

    /// Keeps the environ's values the access log shows (`%({KEY}e)s`), once the app is done
    /// with it: each key as written, else in any case (gunicorn's lookup), as `str()` makes
    /// it.
    fn note_environ(&mut self, environ: &Bound<'_, PyDict>) {
        let Some(ctx) = self.current.as_mut() else {
            return;
        };
        let keys = match &self.log {
            Some(log) if !log.environ_keys().is_empty() => log.environ_keys(),
            _ => return,
        };
        ctx.environ_values = keys
            .iter()
            .map(|k| {
                let v = environ.get_item(k).ok().flatten().or_else(|| {
                    environ.iter().find_map(|(name, v)| {
                        name.extract::<&str>()
                            .ok()
                            .filter(|n| n.eq_ignore_ascii_case(k))
                            .map(|_| v)
                    })
                })?;
                v.str().ok().map(|s| s.to_string_lossy().into_owned())
            })
            .collect();
    }

    /// Logs what the app raised: with its traceback, unless its client had left (then the
    /// app most likely stopped on `write()`'s error, as it should), at debug.
    fn app_failed(&self, py: Python<'_>, e: &PyErr, environ: &Bound<'_, PyDict>) {
        let what = errors::describe_environ(environ);
        if self.ex.cancelled(py) {
            log::debug!("{what}: the application stopped after its client left: {e}");
        } else {
            errors::log_exception(py, e, &format!("the application failed on {what}"));
        }
    }

    fn drive(&self, py: Python<'_>, iterable: &Bound<'_, PyAny>) -> PyResult<Outcome> {
        // A list or tuple has a known length: head and body go out in one buffer with a
        // Content-Length, in one message.
        if let Ok(list) = iterable.cast_exact::<PyList>() {
            let items: Vec<Bound<'_, PyAny>> = list.iter().collect();
            return self.send_known(py, &items);
        }
        // PEP 3333: a server may serve its own file wrapper "in a platform-specific way" as
        // long as the result is as if it had been iterated.
        if let Ok(wrapper) = iterable.cast_exact::<FileWrapper>() {
            if let Some((fd, offset, len)) = wrapper.borrow().regular_file(py) {
                if self.ex.take_file(py, fd, offset, len)? {
                    return Ok(Outcome::Done);
                }
            }
        }
        if let Ok(tuple) = iterable.cast_exact::<PyTuple>() {
            let items: Vec<Bound<'_, PyAny>> = tuple.iter().collect();
            return self.send_known(py, &items);
        }
        self.pump(py, iterable.try_iter()?)
    }

    /// Iterates a body to its end, its client's departure, or its spent credit (then it
    /// is set aside: this thread serves others until the loop has written some).
    fn pump(&self, py: Python<'_>, mut iter: Bound<'_, PyIterator>) -> PyResult<Outcome> {
        loop {
            if self.ex.out_of_credit(py) {
                return Ok(Outcome::Suspended(iter.unbind()));
            }
            let Some(item) = iter.next() else {
                return Ok(Outcome::Done);
            };
            let item = item?;
            let pushed = self.ex.send(py, None, bytes_of(&item)?, Credit::Checked)?;
            if self.ex.cancelled(py) {
                return Ok(Outcome::Cancelled);
            }
            if self.ex.body_complete(py) {
                return Ok(Outcome::Done);
            }
            if pushed && self.yield_each_part {
                return Ok(Outcome::Suspended(iter.unbind()));
            }
        }
    }

    fn send_known(&self, py: Python<'_>, items: &[Bound<'_, PyAny>]) -> PyResult<Outcome> {
        let mut total = 0u64;
        for item in items {
            total += bytes_of(item)?.as_bytes().len() as u64;
        }
        self.ex.send_whole(py, items, total).map(Outcome::Finished)
    }
}

/// The references to `obj`: an object the bridge holds and finds with one reference (its
/// own) is nobody else's, and may be handed to the next request.
fn refs<T>(_py: Python<'_>, obj: &Py<T>) -> isize {
    // SAFETY: `obj` is alive for the borrow, and its count is read with the GIL held.
    unsafe { pyo3::ffi::Py_REFCNT(obj.as_ptr()) }
}

fn close_iterable(iterable: &Bound<'_, PyAny>) -> PyResult<()> {
    // An exact list or tuple has no close(); asking would build an AttributeError (its
    // message formatted) on every request.
    if iterable.is_exact_instance_of::<PyList>() || iterable.is_exact_instance_of::<PyTuple>() {
        return Ok(());
    }
    if iterable.hasattr("close")? {
        iterable.call_method0("close")?;
    }
    Ok(())
}
