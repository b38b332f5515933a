//! The response side of one exchange: what `start_response` recorded, the head encoded on
//! the first non-empty body data (PEP 3333 "the server must not transmit the headers until
//! the first non-empty bytestring is yielded"), framing, and pushing wire bytes into the
//! response ring with flow control.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::event_loop::{HandlerShared, LoopShared};
use crate::http::date::DateCache;
use crate::http::encode::{self, EncodeError, Framing, HeadWriter, HeaderKind};
use crate::http::parse::Version;
use crate::msg::{Buf, ConnRef, FileBody, Part, PyBytesRef, Response};
use crate::park;
use crate::ring::Producer;
use crate::stats;

/// Streamed chunks a handler may have in the response ring or a connection's write queue
/// before it waits for the loop to write them: a client that does not read stalls only the
/// handler streaming to it, and memory stays bounded.
pub const MAX_CHUNKS_IN_FLIGHT: usize = 16;

/// Body bytes gathered into one message before a streamed part is pushed when the app
/// declared a Content-Length (the whole response then goes out in one write).
const HOLD_DECLARED_BODY_MAX_BYTES: usize = 256 * 1024;

/// Body items this large are not copied: the loop writes them straight from the app's
/// `bytes` object (`msg::PyBytesRef`). Below it a copy costs less than the reference's
/// round trip through pyo3's deferred-decref pool (BENCHMARKS.md, "zero-copy bodies").
const ZERO_COPY_MIN_BYTES: usize = 32 * 1024;

/// The latin-1 bytes of a native string (PEP 3333: status and header names and values are
/// `str` holding only code points below 256).
pub fn latin1<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a [u8]> {
    let s = obj.cast::<PyString>().map_err(|_| {
        let ty = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!("{what} must be str, not {ty}"))
    })?;
    let p = s.as_ptr();
    // SAFETY: `p` is a live str object (borrowed by `s` for 'a). A str created by Python
    // code is always "ready" (PEP 393), so KIND/DATA/GET_LENGTH are valid; a 1-byte kind
    // stores exactly its latin-1 code points, GET_LENGTH of them, for as long as the object
    // lives, which `'a` covers.
    unsafe {
        if ffi::PyUnicode_READY(p) != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        if ffi::PyUnicode_KIND(p) != ffi::PyUnicode_1BYTE_KIND {
            return Err(PyValueError::new_err(format!(
                "{what} must contain only latin-1 characters"
            )));
        }
        let data = ffi::PyUnicode_DATA(p) as *const u8;
        let len = ffi::PyUnicode_GET_LENGTH(p) as usize;
        Ok(std::slice::from_raw_parts(data, len))
    }
}

fn encode_err(e: EncodeError) -> PyErr {
    PyValueError::new_err(match e {
        EncodeError::BadStatus => "invalid status: expected '<3 digits> <reason>'",
        EncodeError::BadHeaderName => "invalid response header name",
        EncodeError::BadHeaderValue => "invalid response header value (CR, LF or NUL)",
        EncodeError::HopByHop => "hop-by-hop header set by the application (PEP 3333)",
    })
}

/// The request facts the response needs.
#[derive(Clone, Copy)]
pub struct ReqInfo {
    pub id: u64,
    pub conn: ConnRef,
    pub version: Version,
    pub is_head: bool,
    pub keep_alive: bool,
}

/// Where an exchange's response messages go.
pub enum Sink {
    /// A handler thread's response ring: a full ring or spent chunk credit waits with the
    /// GIL released until the loop makes room.
    Ring(RefCell<Producer<Response>>),
    /// Inline mode (`--blocking-threads 0`): the app runs on the loop thread, which takes
    /// these after the app returns. Pushing never waits (the loop cannot run while the app
    /// does); a streamed body is suspended between items instead when its credit is spent
    /// (`Bridge::resume`).
    Inline(Rc<RefCell<VecDeque<Response>>>),
}

/// Per handler thread, reset for each request.
pub struct Exchange {
    pub shared: Arc<HandlerShared>,
    pub loop_shared: Arc<LoopShared>,
    sink: Sink,
    pub st: RefCell<State>,
    date: RefCell<DateCache>,
    /// `ConnRef::packed` of the last connection this handler answered with a close.
    closed_conn: Cell<u64>,
}

pub struct State {
    pub req: ReqInfo,
    pub status: Option<Py<PyAny>>,
    pub headers: Option<Py<PyAny>>,
    /// The head has been encoded into `out`.
    pub sent: bool,
    /// The head has left for the loop: from here on the response cannot be replaced.
    pushed: bool,
    framing: Framing,
    keep_alive: bool,
    /// For `Framing::Length`: body bytes the declared length still allows.
    remaining: u64,
    /// The app sent fewer or more bytes than it declared: close after this response.
    pub mismatch: bool,
    /// Wire bytes not yet pushed: `out`, then `more` (large items uncopied, and the bytes
    /// after them).
    out: Vec<u8>,
    more: Vec<Buf>,
    /// A file body to send after `out` with the last part.
    file: Option<FileBody>,
    /// For the access log: the status sent, and the body bytes framed so far.
    pub code: u16,
    pub body_bytes: u64,
}

impl Exchange {
    pub fn new(sink: Sink, shared: Arc<HandlerShared>, loop_shared: Arc<LoopShared>) -> Exchange {
        Exchange {
            shared,
            loop_shared,
            sink,
            st: RefCell::new(State {
                req: ReqInfo {
                    id: 0,
                    conn: ConnRef { slot: 0, gen: 0 },
                    version: Version::Http11,
                    is_head: false,
                    keep_alive: false,
                },
                status: None,
                headers: None,
                sent: false,
                pushed: false,
                framing: Framing::NoBody,
                keep_alive: false,
                remaining: 0,
                mismatch: false,
                out: Vec::new(),
                more: Vec::new(),
                file: None,
                code: 0,
                body_bytes: 0,
            }),
            date: RefCell::new(DateCache::new()),
            closed_conn: Cell::new(u64::MAX),
        }
    }

    pub fn begin(&self, req: ReqInfo) {
        let mut st = self.st.borrow_mut();
        st.req = req;
        st.status = None;
        st.headers = None;
        st.sent = false;
        st.pushed = false;
        st.mismatch = false;
        st.out = Vec::new();
        st.more = Vec::new();
        st.file = None;
        st.code = 0;
        st.body_bytes = 0;
    }

    /// `start_response(status, headers, exc_info)`, PEP 3333 "The start_response()
    /// Callable".
    pub fn start(
        &self,
        py: Python<'_>,
        id: u64,
        status: Bound<'_, PyAny>,
        headers: Bound<'_, PyAny>,
        exc_info: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let mut st = self.st.borrow_mut();
        if st.req.id != id {
            return Err(PyRuntimeError::new_err(
                "start_response called after its request finished",
            ));
        }
        match exc_info.filter(|e| !e.is_none()) {
            Some(exc) => {
                if st.pushed {
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
                st.more.clear();
            }
            None => {
                if st.status.is_some() {
                    return Err(PyRuntimeError::new_err(
                        "start_response called a second time without exc_info",
                    ));
                }
            }
        }
        // Fail fast where the app can see it: the status must be a valid status string.
        let code = encode::parse_status(latin1(&status, "status")?).map_err(encode_err)?;
        if code < 200 {
            return Err(PyValueError::new_err(
                "a WSGI application cannot send a 1xx status",
            ));
        }
        headers.try_iter().map_err(|_| {
            PyTypeError::new_err("response headers must be a list of (name, value) tuples")
        })?;
        st.status = Some(status.unbind());
        st.headers = Some(headers.unbind());
        drop(st);
        let _ = py;
        Ok(())
    }

    /// Encodes the head into `out`. `known_len` is the whole body's length when known.
    fn encode_head(&self, py: Python<'_>, st: &mut State, known_len: Option<u64>) -> PyResult<()> {
        let (Some(status), Some(headers)) = (&st.status, &st.headers) else {
            return Err(PyRuntimeError::new_err(
                "the application returned a body before calling start_response",
            ));
        };
        let status = status.bind(py).clone();
        let headers = headers.bind(py).clone();
        let mut out = std::mem::take(&mut st.out);
        let mark = out.len();
        let result = (|| -> PyResult<u16> {
            let (mut w, code) =
                HeadWriter::new(&mut out, latin1(&status, "status")?).map_err(encode_err)?;
            let (mut app_len, mut app_date, mut app_server) = (None, false, false);
            for item in headers.try_iter()? {
                let item = item?;
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
                    HeaderKind::Date => app_date = true,
                    HeaderKind::Server => app_server = true,
                    HeaderKind::Other => {}
                }
            }
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
            let mut date = self.date.borrow_mut();
            w.finish(
                framing,
                app_len.is_some(),
                keep_alive,
                st.req.version,
                date.get(),
                app_date,
                app_server,
            );
            st.framing = framing;
            st.keep_alive = keep_alive;
            st.remaining = match framing {
                Framing::Length(n) => n,
                _ => 0,
            };
            Ok(code)
        })();
        if result.is_err() {
            out.truncate(mark);
        }
        st.out = out;
        st.code = result?;
        st.body_bytes = 0;
        st.sent = true;
        Ok(())
    }

    /// Body data from the app (an item of its iterable, or `write()`).
    pub fn send(&self, py: Python<'_>, data: &Bound<'_, PyBytes>) -> PyResult<()> {
        if data.as_bytes().is_empty() {
            return Ok(());
        }
        let mut st = self.st.borrow_mut();
        if !st.sent {
            self.encode_head(py, &mut st, None)?;
        }
        let hold = append_body(&mut st, data);
        if !hold && (!st.out.is_empty() || !st.more.is_empty()) {
            st.pushed = true;
            let (out, more) = take_message(&mut st);
            let conn = st.req.conn;
            drop(st);
            self.push(py, conn, out, more, Part::Partial);
        }
        Ok(())
    }

    /// A body whose total length is known up front (a list or tuple): head and body
    /// in one buffer.
    pub fn send_whole(
        &self,
        py: Python<'_>,
        chunks: &[Bound<'_, PyAny>],
        total: u64,
    ) -> PyResult<()> {
        let mut st = self.st.borrow_mut();
        if !st.sent {
            // Room for what is copied: the head and the items too small to go uncopied.
            let copied: usize = chunks
                .iter()
                .filter_map(|c| bytes_of(c).ok())
                .map(|b| b.as_bytes().len())
                .filter(|&n| n < ZERO_COPY_MIN_BYTES)
                .sum();
            st.out.reserve(256 + copied);
            self.encode_head(py, &mut st, Some(total))?;
        }
        for c in chunks {
            let b = bytes_of(c)?;
            if !b.as_bytes().is_empty() {
                append_body(&mut st, b);
            }
        }
        Ok(())
    }

    /// The body is complete: end it and push the last part.
    pub fn finish(&self, py: Python<'_>) -> PyResult<()> {
        let mut st = self.st.borrow_mut();
        if !st.sent {
            self.encode_head(py, &mut st, Some(0))?;
        }
        match st.framing {
            Framing::Chunked => encode::write_last_chunk(&mut st.out),
            Framing::Length(_) if st.remaining > 0 => st.mismatch = true,
            _ => {}
        }
        let keep_alive = st.keep_alive && !st.mismatch;
        let (out, more) = take_message(&mut st);
        let file = st.file.take();
        let conn = st.req.conn;
        drop(st);
        self.push_with_file(
            py,
            Response {
                conn,
                data: out,
                more,
                file,
                part: Part::Last { keep_alive },
            },
        );
        Ok(())
    }

    /// The body is `len` bytes of a regular file from `offset`: the head goes out with a
    /// Content-Length and the loop sends the file with `sendfile(2)` (in `finish`).
    /// `false` when the response already started otherwise (after `write()`): the caller
    /// then iterates the file as any body.
    pub fn take_file(&self, py: Python<'_>, fd: OwnedFd, offset: u64, len: u64) -> PyResult<bool> {
        let mut st = self.st.borrow_mut();
        if st.sent {
            return Ok(false);
        }
        self.encode_head(py, &mut st, Some(len))?;
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
            st.file = Some(FileBody { fd, offset, len });
        }
        Ok(true)
    }

    /// The response failed. Before the head went out: a 500 (the connection stays usable).
    /// After: close the connection without ending the body.
    pub fn fail(&self, py: Python<'_>) {
        let mut st = self.st.borrow_mut();
        let conn = st.req.conn;
        if st.pushed {
            let (out, more) = take_message(&mut st);
            // A close-delimited body (HTTP/1.0 streaming) only looks truncated to the
            // client if the connection is reset.
            let reset = st.framing == Framing::Close;
            drop(st);
            self.push(py, conn, out, more, Part::Abort { reset });
            return;
        }
        // Whatever was encoded but held is dropped: the 500 replaces it.
        st.out.clear();
        st.more.clear();
        let keep_alive = st.req.keep_alive;
        let body: &[u8] = b"Internal Server Error\n";
        let mut out = Vec::with_capacity(256);
        if let Ok((mut w, _)) = HeadWriter::new(&mut out, b"500 Internal Server Error") {
            let _ = w.header(b"Content-Type", b"text/plain; charset=utf-8");
            let mut date = self.date.borrow_mut();
            w.finish(
                Framing::Length(body.len() as u64),
                false,
                keep_alive,
                st.req.version,
                date.get(),
                false,
                false,
            );
        }
        if !st.req.is_head {
            out.extend_from_slice(body);
        }
        st.code = 500;
        st.body_bytes = if st.req.is_head { 0 } else { body.len() as u64 };
        st.sent = true;
        drop(st);
        self.push(py, conn, out, Vec::new(), Part::Last { keep_alive });
    }

    /// The head is out and the response has no body (HEAD, 204, 304): iterating further
    /// would only produce bytes to discard, and a client that left would never be noticed.
    pub fn body_complete(&self) -> bool {
        let st = self.st.borrow();
        st.sent && st.framing == Framing::NoBody
    }

    /// The client of the current request has left (or half-closed): the loop saw its end
    /// of stream or closed its connection. `m0serve.client_disconnected()`.
    pub fn client_gone(&self) -> bool {
        if self.cancelled() {
            return true;
        }
        let conn = self.st.borrow().req.conn.packed();
        // Acquire: pairs with the loop's Release store in `mark_gone`.
        self.shared
            .gone
            .iter()
            .any(|g| g.load(Ordering::Acquire) == conn)
    }

    /// The loop closed this request's connection: stop producing its body.
    pub fn cancelled(&self) -> bool {
        let conn = self.st.borrow().req.conn.packed();
        // This handler itself ended the connection's last response with a close: requests
        // pipelined behind it will never be answered (known here before the loop knows).
        if self.closed_conn.get() == conn {
            return true;
        }
        // Acquire: pairs with the loop's Release store when it closed the connection.
        self.shared.cancelled.load(Ordering::Acquire) == conn
    }

    /// Streamed chunks are unwritten up to the credit: the next body item should wait.
    pub fn out_of_credit(&self) -> bool {
        // Acquire: pairs with the loop's Release `fetch_sub` when it wrote a chunk.
        self.shared.chunks_in_flight.load(Ordering::Acquire) >= MAX_CHUNKS_IN_FLIGHT
    }

    /// Pushes one message, waiting with the GIL released when the ring is full or too
    /// many streamed chunks are unwritten; wakes the loop only if it sleeps. Inline, it
    /// queues the message for the loop and never waits.
    fn push(&self, py: Python<'_>, conn: ConnRef, data: Vec<u8>, more: Vec<Buf>, part: Part) {
        self.push_with_file(
            py,
            Response {
                conn,
                data,
                more,
                file: None,
                part,
            },
        );
    }

    fn push_with_file(&self, py: Python<'_>, resp: Response) {
        let shared = &*self.shared;
        let ring = match &self.sink {
            Sink::Ring(tx) => Some(tx),
            Sink::Inline(_) => None,
        };
        if resp.part == Part::Partial {
            if ring.is_some() && self.out_of_credit() {
                let conn = resp.conn.packed();
                let parks = py.detach(|| {
                    park::wait_until(&shared.wake, || {
                        shared.chunks_in_flight.load(Ordering::Acquire) < MAX_CHUNKS_IN_FLIGHT
                            || shared.cancelled.load(Ordering::Acquire) == conn
                    })
                });
                stats::bump(&shared.counters.parks, u64::from(parks));
            }
            // Relaxed: the count is published to the loop by the ring push below (inline,
            // the loop runs on this thread).
            shared.chunks_in_flight.fetch_add(1, Ordering::Relaxed);
        }
        if matches!(
            resp.part,
            Part::Abort { .. } | Part::Last { keep_alive: false }
        ) {
            self.closed_conn.set(resp.conn.packed());
        }
        let Some(tx) = ring else {
            if let Sink::Inline(queue) = &self.sink {
                queue.borrow_mut().push_back(resp);
            }
            return;
        };
        let mut tx = tx.borrow_mut();
        let mut resp = resp;
        loop {
            match tx.push(resp) {
                Ok(()) => break,
                Err(back) => {
                    resp = back;
                    self.notify_loop();
                    let tx = &mut *tx;
                    let parks = py.detach(move || park::wait_until(&shared.wake, || !tx.is_full()));
                    stats::bump(&shared.counters.parks, u64::from(parks));
                }
            }
        }
        drop(tx);
        self.notify_loop();
    }

    fn notify_loop(&self) {
        if self.loop_shared.notify() {
            stats::bump(&self.shared.counters.loop_wakes, 1);
        }
    }
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

/// A body item (PEP 3333: bytestrings only).
pub fn bytes_of<'a, 'py>(item: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyBytes>> {
    match item.cast::<PyBytes>() {
        Ok(b) => Ok(b),
        Err(_) => {
            let ty = item
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            Err(PyTypeError::new_err(format!(
                "response body items must be bytes, not {ty}"
            )))
        }
    }
}
