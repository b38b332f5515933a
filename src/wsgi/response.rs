//! The response side of one exchange: what `start_response` recorded, the head encoded on
//! the first non-empty body data (PEP 3333 "the server must not transmit the headers until
//! the first non-empty bytestring is yielded"), framing, and pushing wire bytes into the
//! response ring with flow control.
//!
//! PEP 3333 does not tie `start_response` and `write` to a thread, and apps do call them
//! from threads they start: everything here may run on any thread that holds the GIL, for
//! the request being served. See [`Exchange`] for how that stays safe.

use std::cell::Cell;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use super::pystr::{bytes_of, latin1};
use crate::http::date::DateCache;
use crate::http::encode::{self, EncodeError, Framing, HeadWriter, HeaderKind};
use crate::http::parse::Version;
use crate::pipeline::departures::Departures;
use crate::pipeline::msg::{
    Buf, ConnRef, FileBody, LentSocket, Part, PyBytesRef, Response, StreamCredit,
};
use crate::pipeline::park;
use crate::pipeline::ring::Producer;
use crate::pipeline::shared::{HandlerShared, LoopShared};
use crate::pipeline::stats;

/// Body bytes gathered into one message before a streamed part is pushed when the app
/// declared a Content-Length (the whole response then goes out in one write).
const HOLD_DECLARED_BODY_MAX_BYTES: usize = 256 * 1024;

/// Body items this large are not copied: the loop writes them straight from the app's
/// `bytes` object (`msg::PyBytesRef`). Below it a copy costs less than the reference's
/// round trip through pyo3's deferred-decref pool (benchmarks/decisions.md, "zero-copy bodies").
const ZERO_COPY_MIN_BYTES: usize = 32 * 1024;

fn encode_err(e: EncodeError) -> PyErr {
    PyValueError::new_err(match e {
        EncodeError::BadStatus => "invalid status: expected '<3 digits> <reason>'",
        EncodeError::BadHeaderName => "invalid response header name",
        EncodeError::BadHeaderValue => "invalid response header value (CR, LF or NUL)",
        EncodeError::BadContentLength => {
            "invalid Content-Length: it must be a decimal number of bytes (digits only)"
        }
        EncodeError::TwoContentLengths => "two Content-Length headers",
        EncodeError::HopByHop => "hop-by-hop header set by the application (PEP 3333)",
    })
}

/// The request facts the response needs.
#[derive(Clone, Copy)]
pub(crate) struct ReqInfo {
    pub(crate) id: u64,
    pub(crate) conn: ConnRef,
    pub(crate) version: Version,
    pub(crate) is_head: bool,
    pub(crate) keep_alive: bool,
    /// The connection's socket, lent for this response (`Request::socket`).
    pub(crate) socket: Option<LentSocket>,
}

/// Where an exchange's response messages go.
pub enum Sink {
    /// A handler thread's response ring: a full ring waits, GIL released, until the loop
    /// makes room.
    Ring(Producer<Response>),
    /// Inline mode (`--blocking-threads 0`): the app runs on the loop thread, which takes
    /// these after the app returns. Pushing never waits (the loop cannot run while the app
    /// does); a streamed body is set aside between items instead when its credit is spent.
    Inline(Arc<Mutex<VecDeque<Response>>>),
}

/// The app's body disagreed with its own Content-Length (PEP 3333: the server should
/// note it): what it declared and what it produced.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LengthMismatch {
    pub(crate) declared: u64,
    pub(crate) produced: u64,
}

/// One handler's exchange: the response of the request being served, and where its
/// messages go. Shared (`Arc`) with the callables handed to the app.
///
/// Those callables may be called from any thread, so all that changes is behind one lock,
/// always taken with `lock_py_attached`: a thread that must wait for it lets go of the
/// GIL first. That matters because the holder may itself wait for the loop (ring room,
/// stream credit) with the GIL released and the lock kept (so the messages of one response
/// stay in order); it needs the GIL back afterwards, which a thread blocked on the lock
/// while holding the GIL would never give. No Python code runs with the lock held (the
/// headers are a list by then, see `start`), so the lock is never taken twice by a thread.
pub(crate) struct Exchange {
    inner: Mutex<Inner>,
    /// `ConnRef::packed` of the current response's connection (`u64::MAX`: none), for
    /// `client_gone`, which must not wait for the lock.
    current_conn: AtomicU64,
    pub(crate) shared: Arc<HandlerShared>,
    loop_shared: Arc<LoopShared>,
}

struct Inner {
    /// The current response: the request being served (or an idle one between requests).
    st: State,
    /// Responses whose bodies are set aside for slow clients (`set_aside`): an app thread
    /// may still `write()` to them.
    aside: Vec<State>,
    out: Outlet,
    head: HeadParts,
}

/// What encoding a response head reads besides the response: the Date header's clock, and
/// the last head's status and app headers.
struct HeadParts {
    date: DateCache,
    last: LastHead,
}

/// The last response head's status and app headers, held by identity, with the bytes and
/// facts they encoded to. An app that answers with a literal status and literal
/// `(name, value)` tuples passes the same objects every time (CPython keeps them as
/// constants of its code), and those are not validated and encoded again.
///
/// Only exact `str`s and exact tuples of exact `str`s are kept. Holding them keeps each
/// alive, so a pointer equal to a kept one is that same object, and none of them can change:
/// a tuple's items are fixed, and CPython alters a `str` in place (`+=`) only while nothing
/// else holds it. Dropping them runs no Python code, so they may be replaced with the
/// exchange's lock held.
#[derive(Default)]
struct LastHead {
    status: Option<Py<PyString>>,
    pairs: Vec<Py<PyTuple>>,
    /// The status line and the app's header lines, as `HeadWriter` wrote them.
    lines: Vec<u8>,
    facts: AppHead,
}

/// What the rest of a head depends on in the app's status and headers.
#[derive(Clone, Copy, Default)]
struct AppHead {
    code: u16,
    /// Its Content-Length.
    app_len: Option<u64>,
    /// The server's headers it sent itself.
    sent: encode::Sent,
}

impl LastHead {
    /// `status` and `headers` are the objects the last head was encoded from.
    fn matches(&self, status: &Bound<'_, PyString>, headers: &Bound<'_, PyList>) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.as_ptr() == status.as_ptr())
            && headers.len() == self.pairs.len()
            && headers
                .iter()
                .zip(&self.pairs)
                .all(|(h, kept)| h.as_ptr() == kept.as_ptr())
    }

    /// Remembers a head just encoded, when its objects can be kept (see the type), else
    /// forgets the last one.
    fn keep(
        &mut self,
        status: &Bound<'_, PyString>,
        headers: &Bound<'_, PyList>,
        lines: &[u8],
        facts: AppHead,
    ) {
        let exact_str = |o: &Bound<'_, PyAny>| o.is_exact_instance_of::<PyString>();
        self.pairs.clear();
        self.status = None;
        if !status.is_exact_instance_of::<PyString>() {
            return;
        }
        for item in headers.iter() {
            let Ok(pair) = item.cast_exact::<PyTuple>() else {
                self.pairs.clear();
                return;
            };
            if !pair.iter().all(|o| exact_str(&o)) {
                self.pairs.clear();
                return;
            }
            self.pairs.push(pair.clone().unbind());
        }
        self.status = Some(status.clone().unbind());
        self.lines.clear();
        self.lines.extend_from_slice(lines);
        self.facts = facts;
    }
}

/// Where messages go.
struct Outlet {
    sink: Sink,
    /// `ConnRef::packed` of the last connection this handler answered with a close.
    closed_conn: u64,
}

impl Inner {
    /// The response of request `id` (current or set aside), while it has not ended.
    fn response(&mut self, id: u64) -> Option<&mut State> {
        if self.st.req.id == id {
            Some(&mut self.st)
        } else {
            self.aside.iter_mut().find(|s| s.req.id == id)
        }
        .filter(|s| !s.ended)
    }
}

/// One response in the making: current, or set aside while its body waits for a slow
/// client (`set_aside`, `resume`).
struct State {
    pub(crate) req: ReqInfo,
    status: Option<Py<PyString>>,
    /// Always a list (`start` copies another iterable into one).
    headers: Option<Py<PyList>>,
    /// The head has been encoded into `out`.
    sent: bool,
    /// The head has left for the loop: from here on the response cannot be replaced.
    pushed: bool,
    /// Its final part has left: the app's callables kept past it raise.
    ended: bool,
    framing: Framing,
    keep_alive: bool,
    /// For `Framing::Length`: body bytes the declared length still allows.
    remaining: u64,
    /// The app sent fewer or more bytes than it declared: close after this response.
    mismatch: bool,
    /// The app's own Content-Length, and the body bytes it produced (for the warning).
    declared: Option<u64>,
    produced: u64,
    /// Wire bytes not yet pushed: `out`, then `more` (large items uncopied, and the bytes
    /// after them).
    out: Vec<u8>,
    more: Vec<Buf>,
    /// A file body to send after `out` with the last part.
    file: Option<FileBody>,
    /// The flow control of this response's middle parts (made with the first one).
    stream: Option<Arc<StreamCredit>>,
    /// For the access log: the status sent, and the body bytes framed so far.
    pub(crate) code: u16,
    pub(crate) body_bytes: u64,
}

impl State {
    fn new(req: ReqInfo) -> State {
        State {
            req,
            status: None,
            headers: None,
            sent: false,
            pushed: false,
            ended: false,
            framing: Framing::NoBody,
            keep_alive: false,
            remaining: 0,
            mismatch: false,
            declared: None,
            produced: 0,
            out: Vec::new(),
            more: Vec::new(),
            file: None,
            stream: None,
            code: 0,
            body_bytes: 0,
        }
    }
}

/// A wait that may be needed before a body item is sent.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credit {
    /// `write()`: PEP 3333 has it block until the data is on its way, so a spent credit
    /// waits (on a handler thread; inline mode never waits, the loop being this thread).
    Wait,
    /// An item of the body iterable: the caller checks the credit before it asks the
    /// iterator for the item, and sets the body aside instead of waiting.
    Checked,
}

impl Exchange {
    pub(crate) fn new(
        sink: Sink,
        shared: Arc<HandlerShared>,
        loop_shared: Arc<LoopShared>,
    ) -> Exchange {
        let idle = ReqInfo {
            id: 0,
            conn: ConnRef { slot: 0, gen: 0 },
            version: Version::Http11,
            is_head: false,
            keep_alive: false,
            socket: None,
        };
        Exchange {
            inner: Mutex::new(Inner {
                st: State::new(idle),
                aside: Vec::new(),
                out: Outlet {
                    sink,
                    closed_conn: u64::MAX,
                },
                head: HeadParts {
                    date: DateCache::new(),
                    last: LastHead::default(),
                },
            }),
            current_conn: AtomicU64::new(u64::MAX),
            shared,
            loop_shared,
        }
    }

    /// The lock (see the type's doc). A poisoned lock (a panic while it was held, which
    /// would be a bug) is taken as it is: its state is still a valid response in the making.
    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, Inner> {
        self.inner
            .lock_py_attached(py)
            .unwrap_or_else(|e| e.into_inner())
    }

    /// A new request; what the exchange held (a finished response) is dropped. Whether
    /// its connection is already gone (`cancelled`), read under the same lock.
    pub(crate) fn begin(&self, py: Python<'_>, req: ReqInfo) -> bool {
        self.set_current(req.conn);
        let mut inner = self.lock(py);
        let old = std::mem::replace(&mut inner.st, State::new(req));
        let cancelled = is_cancelled(&self.loop_shared.departures, &inner);
        drop(inner);
        // Dropped with the lock released: a decref may run Python code (a `__del__`).
        drop(old);
        cancelled
    }

    /// Sets the current response aside (its body waits for a slow client): the exchange
    /// is idle until the next `begin` or `resume`. Its stream credit, which the caller
    /// watches.
    pub(crate) fn set_aside(&self, py: Python<'_>) -> Option<Arc<StreamCredit>> {
        let mut inner = self.lock(py);
        let idle = ReqInfo {
            id: 0,
            ..inner.st.req
        };
        // Relaxed: see `client_gone`.
        self.current_conn.store(u64::MAX, Ordering::Relaxed);
        let st = std::mem::replace(&mut inner.st, State::new(idle));
        let credit = st.stream.clone();
        inner.aside.push(st);
        credit
    }

    fn set_current(&self, conn: ConnRef) {
        // Relaxed: see `client_gone`.
        self.current_conn.store(conn.packed(), Ordering::Relaxed);
    }

    /// Makes the response of request `id`, set aside, current again.
    pub(crate) fn resume(&self, py: Python<'_>, id: u64) {
        let mut inner = self.lock(py);
        let Some(i) = inner.aside.iter().position(|s| s.req.id == id) else {
            return;
        };
        let st = inner.aside.swap_remove(i);
        self.set_current(st.req.conn);
        let old = std::mem::replace(&mut inner.st, st);
        drop(inner);
        drop(old);
    }

    /// At exit: the responses set aside are dropped (with the lock released).
    pub(crate) fn drop_aside(&self, py: Python<'_>) {
        let aside = std::mem::take(&mut self.lock(py).aside);
        drop(aside);
    }

    /// The current request's id and connection.
    pub(crate) fn current(&self, py: Python<'_>) -> (u64, ConnRef) {
        let inner = self.lock(py);
        (inner.st.req.id, inner.st.req.conn)
    }

    /// The access log's view of the response: its status and body bytes.
    pub(crate) fn outcome(&self, py: Python<'_>) -> (u16, u64) {
        let inner = self.lock(py);
        (inner.st.code, inner.st.body_bytes)
    }

    /// The current response's values of the headers `names` (lowercase), for the access
    /// log's `%({name}o)s`: the first of each name the app gave, or `None`.
    pub(crate) fn response_headers(
        &self,
        py: Python<'_>,
        names: &[String],
    ) -> Vec<Option<Vec<u8>>> {
        let mut out = vec![None; names.len()];
        let headers = {
            let inner = self.lock(py);
            match &inner.st.headers {
                Some(h) => h.clone_ref(py),
                None => return out,
            }
        };
        for item in headers.bind(py).iter() {
            let Ok(pair) = item.cast::<PyTuple>() else {
                continue;
            };
            let (Ok(name), Ok(value)) = (pair.get_item(0), pair.get_item(1)) else {
                continue;
            };
            let (Ok(name), Ok(value)) = (latin1(&name, "name"), latin1(&value, "value")) else {
                continue;
            };
            for (slot, want) in out.iter_mut().zip(names) {
                if slot.is_none() && name.eq_ignore_ascii_case(want.as_bytes()) {
                    *slot = Some(value.to_vec());
                }
            }
        }
        out
    }

    /// `start_response(status, headers, exc_info)`, PEP 3333 "The start_response()
    /// Callable", for request `id`.
    pub(crate) fn start(
        &self,
        py: Python<'_>,
        id: u64,
        status: Bound<'_, PyAny>,
        headers: Bound<'_, PyAny>,
        exc_info: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        // Fail fast where the app can see it: the status must be a valid status string.
        let code = encode::parse_status(latin1(&status, "status")?).map_err(encode_err)?;
        if code < 200 {
            return Err(PyValueError::new_err(
                "a WSGI application cannot send a 1xx status",
            ));
        }
        let status = status.cast_into::<PyString>()?;
        // Any iterable of pairs, copied into a list here, before the lock: iterating it
        // may run Python code, and the head is encoded from the list with the lock held.
        let headers = match headers.cast_into_exact::<PyList>() {
            Ok(list) => list,
            Err(e) => {
                let it = e.into_inner().try_iter().map_err(|_| {
                    PyTypeError::new_err("response headers must be a list of (name, value) tuples")
                })?;
                PyList::new(py, it.collect::<PyResult<Vec<_>>>()?)?
            }
        };
        let mut inner = self.lock(py);
        let Some(st) = inner.response(id) else {
            return Err(outside_request("start_response"));
        };
        match exc_info.filter(|e| !e.is_none()) {
            Some(exc) => {
                if st.pushed {
                    drop(inner);
                    // "if exc_info is provided, and the HTTP headers have already been
                    // sent, start_response must raise an error, and should re-raise using
                    // the exc_info tuple."
                    let value = exc.cast::<PyTuple>()?.get_item(1)?;
                    return Err(PyErr::from_value(value));
                }
                // Encoded but still held here: nothing went out, so it can be replaced.
                st.sent = false;
                st.mismatch = false;
                st.out.clear();
                // Dropped with the lock released (a decref may run a `__del__`).
                let held = std::mem::take(&mut st.more);
                let old = (
                    st.status.replace(status.unbind()),
                    st.headers.replace(headers.unbind()),
                );
                drop(inner);
                drop((held, old));
                return Ok(());
            }
            None => {
                if st.status.is_some() {
                    return Err(PyRuntimeError::new_err(
                        "start_response called a second time without exc_info",
                    ));
                }
            }
        }
        let old = (
            st.status.replace(status.unbind()),
            st.headers.replace(headers.unbind()),
        );
        drop(inner);
        drop(old);
        Ok(())
    }

    /// Encodes the head into `out`. `known_len` is the whole body's length when known.
    /// Runs no Python code: the status is a str and the headers a list.
    fn encode_head(
        py: Python<'_>,
        st: &mut State,
        head: &mut HeadParts,
        known_len: Option<u64>,
    ) -> PyResult<()> {
        let (Some(status), Some(headers)) = (&st.status, &st.headers) else {
            return Err(PyRuntimeError::new_err(
                "the application returned a body before calling start_response",
            ));
        };
        let status = status.bind(py).clone();
        let headers = headers.bind(py).clone();
        let mut out = std::mem::take(&mut st.out);
        let mark = out.len();
        let result = (|| -> PyResult<(u16, Option<u64>)> {
            let last = &mut head.last;
            let (w, facts) = if last.matches(&status, &headers) {
                let f = last.facts;
                let w = HeadWriter::resume(&mut out, &last.lines, f.code, f.sent);
                (w, f)
            } else {
                let (w, facts) = Self::encode_app_head(&mut out, &status, &headers)?;
                last.keep(&status, &headers, w.written(), facts);
                (w, facts)
            };
            let AppHead { code, app_len, .. } = facts;
            // (A graceful stop's last request comes with `keep_alive` false: the loop
            // decides which request is a connection's last.)
            let (framing, keep_alive) = encode::decide_framing(
                st.req.version,
                st.req.is_head,
                code,
                app_len,
                known_len,
                st.req.keep_alive,
            );
            w.finish(framing, keep_alive, st.req.version, head.date.get());
            st.framing = framing;
            st.keep_alive = keep_alive;
            st.remaining = match framing {
                Framing::Length(n) => n,
                _ => 0,
            };
            Ok((code, app_len))
        })();
        if result.is_err() {
            out.truncate(mark);
        }
        st.out = out;
        let (code, declared) = result?;
        st.code = code;
        st.declared = declared;
        st.body_bytes = 0;
        st.sent = true;
        Ok(())
    }

    /// Validates and writes the status line and the app's headers; what the rest of the
    /// head depends on: the status code, the app's Content-Length, and whether it sent
    /// Date and Server.
    fn encode_app_head<'o>(
        out: &'o mut Vec<u8>,
        status: &Bound<'_, PyString>,
        headers: &Bound<'_, PyList>,
    ) -> PyResult<(HeadWriter<'o>, AppHead)> {
        let (mut w, code) =
            HeadWriter::new(out, latin1(status.as_any(), "status")?).map_err(encode_err)?;
        let mut app_len = None;
        for item in headers.iter() {
            let pair = item.cast::<PyTuple>().map_err(|_| {
                PyTypeError::new_err("each response header must be a (name, value) tuple")
            })?;
            if pair.len() != 2 {
                return Err(PyTypeError::new_err(
                    "each response header must be a (name, value) tuple",
                ));
            }
            let name = pair.get_item(0)?;
            let value = pair.get_item(1)?;
            let kind = w
                .header(
                    latin1(&name, "header name")?,
                    latin1(&value, "header value")?,
                )
                .map_err(encode_err)?;
            match kind {
                HeaderKind::ContentLength(n) => {
                    if app_len.is_some_and(|m| m != n) {
                        return Err(PyValueError::new_err(
                            "two different Content-Length headers",
                        ));
                    }
                    app_len = Some(n);
                }
                HeaderKind::Date | HeaderKind::Server | HeaderKind::Other => {}
            }
        }
        let facts = AppHead {
            code,
            app_len,
            sent: w.sent(),
        };
        Ok((w, facts))
    }

    /// Body data from the app: an item of its iterable (`id` `None`: the current request),
    /// or `write()` for request `id` (current, or set aside: an app thread may write to a
    /// response whose iterable waits for its client). `true` when a message went to the
    /// loop.
    pub(crate) fn send(
        &self,
        py: Python<'_>,
        id: Option<u64>,
        data: &Bound<'_, PyBytes>,
        credit: Credit,
    ) -> PyResult<bool> {
        if credit == Credit::Wait {
            // Waited for without the lock, so a slow client holds only this thread.
            let (stream, conn) = {
                let mut inner = self.lock(py);
                let wanted = id.unwrap_or(inner.st.req.id);
                let st = inner
                    .response(wanted)
                    .ok_or_else(|| outside_request("write()"))?;
                (st.stream.clone(), st.req.conn)
            };
            if let Some(c) = stream {
                self.wait_for_credit(py, &c, conn);
                if c.is_gone() {
                    return Err(client_left());
                }
                // Inline, nothing waited: the credit may still be spent, and what the app
                // writes stays in memory until it returns. Bounded, by refusing.
                if c.inline_full() {
                    return Err(inline_write_full());
                }
            }
        }
        let mut inner = self.lock(py);
        let Inner {
            st,
            aside,
            out,
            head,
        } = &mut *inner;
        let st = match id {
            None => st,
            Some(id) if st.req.id == id => st,
            Some(id) => aside
                .iter_mut()
                .find(|s| s.req.id == id)
                .ok_or_else(|| outside_request("write()"))?,
        };
        if st.ended {
            return Err(outside_request("write()"));
        }
        if data.as_bytes().is_empty() {
            return Ok(false);
        }
        if !st.sent {
            Self::encode_head(py, st, head, None)?;
        }
        let hold = append_body(st, data);
        if !hold && (!st.out.is_empty() || !st.more.is_empty()) {
            st.pushed = true;
            let (data, more) = take_message(st);
            let conn = st.req.conn;
            let stream = st
                .stream
                .get_or_insert_with(|| {
                    Arc::new(StreamCredit::new(
                        self.shared.index,
                        self.shared.budget.clone(),
                    ))
                })
                .clone();
            self.push(
                py,
                out,
                Response {
                    conn,
                    data,
                    more,
                    file: None,
                    part: Part::Partial,
                    stream: Some(stream),
                },
            );
            return Ok(true);
        }
        Ok(false)
    }

    /// `write()` with its response's credit spent: waits, GIL released (other Python
    /// threads run) and the exchange lock not held (the handler serves others meanwhile),
    /// until the loop has written some or the client is gone.
    fn wait_for_credit(&self, py: Python<'_>, stream: &StreamCredit, conn: ConnRef) {
        // Inline, the loop thread never waits: it is the one that returns the credit.
        if stream.can_go_on() || INLINE_LOOP.with(Cell::get) {
            return;
        }
        let shared = &*self.shared;
        let departures = &self.loop_shared.departures;
        let conn = conn.packed();
        py.detach(|| {
            shared.wait_for_credit(|| {
                // `departed`: Acquire inside. `app_running` (inline; Relaxed, ordered by
                // the SeqCst fences of `wait_for_credit` and `credits_returned`): the loop
                // thread runs the app, which may be waiting on this thread.
                stream.can_go_on()
                    || departures.departed(conn)
                    || shared.app_running.load(Ordering::Relaxed)
            })
        });
    }

    /// A body of known items (`total` bytes in all), whole: head and items go into one
    /// message, and the response is finished, under one lock (see `finish`).
    pub(crate) fn send_whole(
        &self,
        py: Python<'_>,
        chunks: &[Bound<'_, PyAny>],
        total: u64,
    ) -> PyResult<Option<LengthMismatch>> {
        let mut inner = self.lock(py);
        Self::append_whole(py, &mut inner, chunks, total)?;
        self.finish_locked(py, &mut inner)
    }

    fn append_whole(
        py: Python<'_>,
        inner: &mut Inner,
        chunks: &[Bound<'_, PyAny>],
        total: u64,
    ) -> PyResult<()> {
        let Inner { st, head, .. } = inner;
        if !st.sent {
            // Room for what is copied: the head and the items too small to go uncopied.
            let copied: usize = chunks
                .iter()
                .filter_map(|c| bytes_of(c).ok())
                .map(|b| b.as_bytes().len())
                .filter(|&n| n < ZERO_COPY_MIN_BYTES)
                .sum();
            st.out.reserve(256 + copied);
            Self::encode_head(py, st, head, Some(total))?;
        }
        for c in chunks {
            let b = bytes_of(c)?;
            if !b.as_bytes().is_empty() {
                append_body(st, b);
            }
        }
        Ok(())
    }

    /// The body is complete: end it and push the last part. A body that disagreed with
    /// the app's Content-Length is reported (the connection closes after it).
    pub(crate) fn finish(&self, py: Python<'_>) -> PyResult<Option<LengthMismatch>> {
        let mut inner = self.lock(py);
        self.finish_locked(py, &mut inner)
    }

    fn finish_locked(&self, py: Python<'_>, inner: &mut Inner) -> PyResult<Option<LengthMismatch>> {
        let Inner { st, out, head, .. } = inner;
        if !st.sent {
            Self::encode_head(py, st, head, Some(0))?;
        }
        match st.framing {
            Framing::Chunked => encode::write_last_chunk(&mut st.out),
            Framing::Length(_) if st.remaining > 0 => st.mismatch = true,
            _ => {}
        }
        let mismatch = match (st.mismatch, st.declared) {
            (true, Some(declared)) => Some(LengthMismatch {
                declared,
                produced: st.produced,
            }),
            _ => None,
        };
        let keep_alive = st.keep_alive && !st.mismatch;
        let (mut data, mut more) = take_message(st);
        if let Some(fd) = st.req.socket {
            // The whole response is here (nothing pushed before it, no file): in `data`
            // and a few uncopied items, and not large. Written here, the client has it
            // without a hand-back to the loop, and a large body is copied into the socket
            // on this thread's core rather than the loop's. What the socket does not take
            // goes to the loop as usual.
            if keep_alive
                && !st.pushed
                && st.file.is_none()
                && more.len() < OWN_WRITE_MAX_SLICES
                && data.len() + more.iter().map(Buf::len).sum::<usize>() <= OWN_WRITE_MAX_BYTES
            {
                let counters = &self.shared.counters;
                match write_own(fd.fd(), &mut data, &mut more) {
                    OwnWrite::All => stats::bump(&counters.own_writes, 1),
                    OwnWrite::Part => stats::bump(&counters.own_writes_partial, 1),
                    OwnWrite::None => {}
                }
            }
        }
        let resp = Response {
            conn: st.req.conn,
            data,
            more,
            file: st.file.take(),
            part: Part::Last { keep_alive },
            stream: None,
        };
        st.ended = true;
        self.push(py, out, resp);
        Ok(mismatch)
    }

    /// The body is `len` bytes of a regular file from `offset`: the head goes out with a
    /// Content-Length and the loop sends the file with `sendfile(2)` (in `finish`).
    /// `false` when the response already started otherwise (after `write()`): the caller
    /// then iterates the file as any body.
    pub(crate) fn take_file(
        &self,
        py: Python<'_>,
        fd: OwnedFd,
        offset: u64,
        len: u64,
    ) -> PyResult<bool> {
        let mut inner = self.lock(py);
        let Inner { st, head, .. } = &mut *inner;
        if st.sent {
            return Ok(false);
        }
        Self::encode_head(py, st, head, Some(len))?;
        st.produced = len;
        let len = match st.framing {
            Framing::Length(n) => {
                // The app's own Content-Length wins; a file shorter than it is a mismatch.
                let send = n.min(len);
                st.remaining -= send;
                send
            }
            // HEAD, 204, 304: no body at all.
            _ => return Ok(true),
        };
        if len > 0 {
            st.body_bytes += len;
            st.file = Some(FileBody {
                fd: std::sync::Arc::new(fd),
                offset,
                len,
            });
        }
        Ok(true)
    }

    /// The response failed. Before the head went out: a 500 (the connection stays usable).
    /// After: close the connection without ending the body.
    pub(crate) fn fail(&self, py: Python<'_>) {
        let mut inner = self.lock(py);
        let Inner { st, out, head, .. } = &mut *inner;
        let conn = st.req.conn;
        if st.pushed {
            let (data, more) = take_message(st);
            // A close-delimited body (HTTP/1.0 streaming) only looks truncated to the
            // client if the connection is reset.
            let reset = st.framing == Framing::Close;
            let resp = Response {
                conn,
                data,
                more,
                file: None,
                part: Part::Abort { reset },
                stream: None,
            };
            st.ended = true;
            self.push(py, out, resp);
            return;
        }
        // Whatever was encoded but held is dropped (once the lock is released: a decref may
        // run a `__del__`): the 500 replaces it.
        st.out.clear();
        let held = (std::mem::take(&mut st.more), st.file.take());
        let keep_alive = st.req.keep_alive;
        let (version, is_head) = (st.req.version, st.req.is_head);
        let body: &[u8] = b"Internal Server Error\n";
        let mut data = Vec::with_capacity(256);
        if let Ok((mut w, _)) = HeadWriter::new(&mut data, b"500 Internal Server Error") {
            let _ = w.header(b"Content-Type", b"text/plain; charset=utf-8");
            w.finish(
                Framing::Length(body.len() as u64),
                keep_alive,
                version,
                head.date.get(),
            );
        }
        if !is_head {
            data.extend_from_slice(body);
        }
        st.code = 500;
        st.body_bytes = if is_head { 0 } else { body.len() as u64 };
        st.sent = true;
        st.ended = true;
        let resp = Response {
            conn,
            data,
            more: Vec::new(),
            file: None,
            part: Part::Last { keep_alive },
            stream: None,
        };
        self.push(py, out, resp);
        drop(inner);
        drop(held);
    }

    /// The app took the connection's socket (a WebSocket): nothing of the response is
    /// written (what the app gave `start_response` or `write()` is dropped; it spoke on the
    /// socket itself), and the loop forgets the connection. The access log shows 101.
    pub(crate) fn hand_over(&self, py: Python<'_>) {
        let mut inner = self.lock(py);
        let Inner { st, out, .. } = &mut *inner;
        let conn = st.req.conn;
        st.out.clear();
        let held = (std::mem::take(&mut st.more), st.file.take());
        st.code = 101;
        st.body_bytes = 0;
        st.sent = true;
        st.ended = true;
        let resp = Response {
            conn,
            data: Vec::new(),
            more: Vec::new(),
            file: None,
            part: Part::HandedOver,
            stream: None,
        };
        self.push(py, out, resp);
        drop(inner);
        drop(held);
    }

    /// The head is out and the response has no body (HEAD, 204, 304): iterating further
    /// would only produce bytes to discard, and a client that left would never be noticed.
    pub(crate) fn body_complete(&self, py: Python<'_>) -> bool {
        let inner = self.lock(py);
        inner.st.sent && inner.st.framing == Framing::NoBody
    }

    /// The client of the current request has left (or half-closed): the loop saw its end
    /// of stream or closed its connection. `m0serve.client_disconnected()`.
    ///
    /// Without the lock (another thread may hold it, waiting in `write()` for a slow
    /// client): one load of the connection's word in the departures.
    pub(crate) fn client_gone(&self) -> bool {
        // Relaxed: written by the thread serving the request (under the lock), which is the
        // one that lets the app run, so any caller sees this request's value.
        let conn = self.current_conn.load(Ordering::Relaxed);
        self.loop_shared.departures.departed(conn)
    }

    /// The current request's connection is gone: stop producing its body.
    pub(crate) fn cancelled(&self, py: Python<'_>) -> bool {
        let inner = self.lock(py);
        is_cancelled(&self.loop_shared.departures, &inner)
    }

    /// The current response's credit is spent: its body should be set aside.
    pub(crate) fn out_of_credit(&self, py: Python<'_>) -> bool {
        self.lock(py).st.stream.as_ref().is_some_and(|c| c.spent())
    }

    /// Pushes one message, waiting with the GIL released (and the lock kept, so the
    /// messages of a response stay in order) when the ring is full; wakes the loop only if
    /// it sleeps. Inline, it queues the message for the loop and never waits.
    fn push(&self, py: Python<'_>, out: &mut Outlet, resp: Response) {
        let shared = &*self.shared;
        if matches!(
            resp.part,
            Part::Abort { .. } | Part::Last { keep_alive: false } | Part::HandedOver
        ) {
            out.closed_conn = resp.conn.packed();
        }
        let tx = match &mut out.sink {
            Sink::Inline(queue) => {
                let mut queue = queue.lock().unwrap_or_else(|e| e.into_inner());
                match queue.back_mut().filter(|back| joins(back, &resp)) {
                    // Body data the loop has not taken yet (the app is still running on
                    // its thread, or was when it came) takes this part in: one message,
                    // whose charge is its size, where small `write()`s would each be
                    // charged `STREAM_PART_MIN_BYTES`.
                    Some(back) => {
                        let before = StreamCredit::charge(back.wire_len());
                        back.data.extend_from_slice(&resp.data);
                        if let Some(c) = &resp.stream {
                            c.add(StreamCredit::charge(back.wire_len()) - before);
                        }
                    }
                    None => {
                        if let Some(c) = &resp.stream {
                            c.add(StreamCredit::charge(resp.wire_len()));
                        }
                        queue.push_back(resp);
                    }
                }
                drop(queue);
                // Relaxed: only the loop thread stores it. While the app runs there, the
                // loop takes this message when it returns; else this is a thread the app
                // started, writing to a response set aside, and the loop may sleep: its
                // re-check of the queue after its announce pairs with `notify`'s fence. (If
                // the loop took the queue before this push, the queue's lock orders its
                // store of `false` before this load.)
                if !shared.app_running.load(Ordering::Relaxed) {
                    self.notify_loop();
                }
                return;
            }
            Sink::Ring(tx) => {
                if let Some(c) = &resp.stream {
                    c.add(StreamCredit::charge(resp.wire_len()));
                }
                tx
            }
        };
        // The final part of a response with more requests queued behind it: the loop is
        // woken once for the batch (the handler thread does it), not for each response.
        // A keep-alive final part with nothing left to write (the handler wrote the
        // response itself, or the body went before it) only tells the loop that its
        // connection is quiet again: it is owed a wake like those only if something waits
        // on that (`LoopShared::quiet`); else it waits for the loop's next wake, and only
        // counts towards the batch (`HandlerShared::quiet_owed`).
        let nothing_to_write = matches!(resp.part, Part::Last { keep_alive: true })
            && resp.data.is_empty()
            && resp.more.is_empty()
            && resp.file.is_none();
        let defer = matches!(resp.part, Part::Last { .. })
            && (nothing_to_write || shared.defer_loop_wake.load(Ordering::Relaxed));
        let mut resp = resp;
        loop {
            match tx.push(resp) {
                Ok(()) => break,
                Err(back) => {
                    resp = back;
                    self.notify_loop();
                    let parks = wait_on_loop(py, shared, || !tx.is_full());
                    stats::bump(&shared.counters.parks, u64::from(parks));
                }
            }
        }
        shared.busy.progressed();
        if nothing_to_write && !self.loop_shared.quiet.wanted() {
            // Taken at the loop's next wake; it counts towards the batch of owed wakes,
            // but never wakes the loop by itself when the ring empties.
            shared.quiet_owed.fetch_add(1, Ordering::Relaxed);
        } else if defer {
            shared.wake_owed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.notify_loop();
        }
    }

    fn notify_loop(&self) {
        if self.loop_shared.notify() {
            stats::bump(&self.shared.counters.loop_wakes, 1);
        }
    }
}

thread_local! {
    /// This thread is an inline worker's loop thread (`mark_inline_loop_thread`).
    static INLINE_LOOP: Cell<bool> = const { Cell::new(false) };
}

/// Called by the loop thread of an inline worker: a `write()` on it (the app's own call, or
/// code the loop runs as it closes a body) never waits for credit.
pub(crate) fn mark_inline_loop_thread() {
    INLINE_LOOP.with(|l| l.set(true));
}

/// Most bytes of a response a handler writes to its lent socket itself: a 64 KiB body
/// and its head, some microseconds of copying into the socket with the GIL held. A larger
/// response goes to the loop.
const OWN_WRITE_MAX_BYTES: usize = 65 * 1024;

/// Most buffers (`data` and the uncopied items after it) of a response a handler writes
/// itself, in one `sendmsg`.
const OWN_WRITE_MAX_SLICES: usize = 4;

/// What `write_own` got out.
enum OwnWrite {
    All,
    Part,
    None,
}

/// Writes `data`, then `more`, to the lent socket `fd` without waiting, and removes from
/// them what the socket took. An error (the client left; or the loop closed the
/// connection, when `fd` holds the loop's placeholder) leaves them whole for the loop,
/// which meets the same condition, or drops the bytes with their connection.
fn write_own(fd: std::os::fd::RawFd, data: &mut Vec<u8>, more: &mut Vec<Buf>) -> OwnWrite {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; OWN_WRITE_MAX_SLICES];
    let mut n = 0;
    for part in std::iter::once(data.as_slice()).chain(more.iter().map(Buf::as_slice)) {
        if !part.is_empty() && n < iov.len() {
            iov[n] = libc::iovec {
                iov_base: part.as_ptr() as *mut libc::c_void,
                iov_len: part.len(),
            };
            n += 1;
        }
    }
    // SAFETY: all-zero is a valid `msghdr` (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    let sent = loop {
        // SAFETY: `msg` names `n` iovecs, each over a live buffer of its length (`data`
        // and `more`, not touched until the call returns; `sendmsg` only reads them).
        // `fd` stays open for as long as this request's final part has not reached the
        // loop (`Request::socket`); it is the connection's socket or, once the loop closed
        // it, a placeholder.
        match unsafe {
            crate::sys::syscall!(sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL))
        } {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => break other,
        }
    };
    match sent {
        Err(_) | Ok(0) => OwnWrite::None,
        Ok(sent) => {
            // The socket took the first `sent` bytes, in the order the iovecs name them.
            let mut left = sent as usize;
            let step = left.min(data.len());
            data.drain(..step);
            left -= step;
            for buf in more.iter_mut() {
                let step = left.min(buf.len());
                buf.advance(step);
                left -= step;
            }
            more.retain(|b| !b.is_empty());
            if data.is_empty() && more.is_empty() {
                OwnWrite::All
            } else {
                OwnWrite::Part
            }
        }
    }
}

/// Waits, GIL released, until `ready` (the loop makes it so and wakes the handler's
/// `exchange_wake`), on whichever thread this is: the handler's, or one the app started;
/// the loop unparks it through `waiter`. Only with the exchange lock held, so one at a time.
fn wait_on_loop(py: Python<'_>, shared: &HandlerShared, ready: impl FnMut() -> bool + Send) -> u32 {
    let me = std::thread::current();
    let set = |t: Option<std::thread::Thread>| {
        *shared.waiter.lock().unwrap_or_else(|e| e.into_inner()) = t;
    };
    set(Some(me));
    let parks = py.detach(|| park::wait_until(&shared.exchange_wake, ready));
    set(None);
    parks
}

/// The request's connection is gone, as far as this handler knows.
fn is_cancelled(departures: &Departures, inner: &Inner) -> bool {
    let conn = inner.st.req.conn.packed();
    // This handler itself ended the connection's last response with a close: requests
    // pipelined behind it will never be answered (known here before the loop knows).
    if inner.out.closed_conn == conn {
        return true;
    }
    if inner.st.stream.as_ref().is_some_and(|c| c.is_gone()) {
        return true;
    }
    departures.departed(conn)
}

/// Inline: `next`, a middle part of body data, may be appended to `back`, the last message
/// queued: a middle part of the same response, neither with large items or a file, and
/// the two together at most `STREAM_CREDIT_BYTES`.
fn joins(back: &Response, next: &Response) -> bool {
    let same_stream = match (&back.stream, &next.stream) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    };
    same_stream
        && back.conn == next.conn
        && matches!((back.part, next.part), (Part::Partial, Part::Partial))
        && back.more.is_empty()
        && next.more.is_empty()
        && back.file.is_none()
        && next.file.is_none()
        && back.data.len() + next.data.len() <= crate::pipeline::msg::STREAM_CREDIT_BYTES
}

/// What `write()` raises inline once its response holds as much unwritten as it may
/// (`INLINE_WRITE_MAX_BYTES`): an `OSError` with ENOBUFS.
fn inline_write_full() -> PyErr {
    pyo3::exceptions::PyOSError::new_err((
        libc::ENOBUFS,
        "write(): inline mode (--blocking-threads 0) cannot wait for the client, and this \
         response holds as much unwritten as it may (16 MiB, or 1 MiB while the worker's \
         responses hold 8 MiB): return an iterable, which waits for its client, or run \
         with handler threads",
    ))
}

/// What `write()` raises once its client is gone: the app should stop producing (an
/// `OSError`, as a socket write to a closed connection gives).
fn client_left() -> PyErr {
    pyo3::exceptions::PyConnectionAbortedError::new_err("write(): the client has disconnected")
}

/// The error for a callable used outside its request's time.
fn outside_request(what: &str) -> PyErr {
    PyRuntimeError::new_err(format!(
        "{what} called outside its request: its response has ended (start_response and \
         write work from any thread until the response's last part is sent)"
    ))
}

/// The message being built, taken for a push.
fn take_message(st: &mut State) -> (Vec<u8>, Vec<Buf>) {
    (std::mem::take(&mut st.out), std::mem::take(&mut st.more))
}

/// Where the next copied wire bytes go: `out`, or, once large items are queued in
/// `more`, a buffer after them.
fn tail(st: &mut State) -> &mut Vec<u8> {
    if st.more.is_empty() {
        return &mut st.out;
    }
    if !matches!(st.more.last(), Some(Buf::Vec(_))) {
        st.more.push(Buf::Vec(Vec::new()));
    }
    match st.more.last_mut() {
        Some(Buf::Vec(v)) => v,
        _ => unreachable!("a Vec buffer was just pushed"),
    }
}

/// `data[range]` goes on the wire: copied, or, when large, referenced.
fn put(st: &mut State, data: &Bound<'_, PyBytes>, range: std::ops::Range<usize>) {
    if range.len() >= ZERO_COPY_MIN_BYTES {
        st.more.push(Buf::Py(PyBytesRef::new(data, range)));
    } else {
        tail(st).extend_from_slice(&data.as_bytes()[range]);
    }
}

/// Appends framed body bytes; `true` when the output should be held back (the declared
/// length is complete and the whole response can go out with the last part).
fn append_body(st: &mut State, data: &Bound<'_, PyBytes>) -> bool {
    let len = data.as_bytes().len();
    st.produced += len as u64;
    if st.framing != Framing::NoBody {
        st.body_bytes += len as u64;
    }
    match st.framing {
        Framing::NoBody => false,
        Framing::Chunked if len >= ZERO_COPY_MIN_BYTES => {
            encode::write_chunk_size(tail(st), len as u64);
            put(st, data, 0..len);
            tail(st).extend_from_slice(b"\r\n");
            false
        }
        Framing::Chunked => {
            encode::write_chunk(tail(st), data.as_bytes());
            false
        }
        Framing::Close => {
            put(st, data, 0..len);
            false
        }
        Framing::Length(_) => {
            // "the server should not transmit more bytes than the Content-Length".
            let n = (len as u64).min(st.remaining) as usize;
            if n < len {
                st.mismatch = true;
                st.body_bytes -= (len - n) as u64;
            }
            put(st, data, 0..n);
            st.remaining -= n as u64;
            st.remaining == 0 && st.out.len() <= HOLD_DECLARED_BODY_MAX_BYTES
        }
    }
}
