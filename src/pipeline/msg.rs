//! What crosses the rings: plain `Send` data, never a Python object, with one exception:
//! a [`PyBytesRef`], a strong reference to an immutable `bytes` object the app returned,
//! whose bytes the loop writes without copying them and without the GIL.
//!
//! A [`Request`] owns one buffer holding the request head exactly as received followed by
//! the (decoded) body, with the parsed head as offsets into it: the loop copies a request's
//! bytes once, out of the connection's read buffer, and nothing is copied per header.
//! A [`Response`] carries bytes ready for the wire (head and body already framed by the
//! handler thread), so the loop only writes.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::http::parse::Head;

/// Names a connection across the rings: its slot in the loop's slab and the slot's
/// generation, so a response for a connection that has since closed (and whose slot was
/// reused) is recognised and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnRef {
    pub slot: u32,
    pub gen: u32,
}

impl ConnRef {
    /// One word, for the handler's "this connection is gone" flag.
    pub(crate) fn packed(self) -> u64 {
        (u64::from(self.slot) << 32) | u64::from(self.gen)
    }
}

/// The peer of a connection.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    Tcp(SocketAddr),
    Unix,
}

/// One complete request, head and body; it crosses the ring boxed (made once by the loop,
/// then only the pointer moves).
#[derive(Debug)]
pub struct Request {
    pub conn: ConnRef,
    /// The head bytes (`head.head_len` of them) followed by the body.
    pub data: Vec<u8>,
    pub head: Head,
    /// The body was sent chunked (then `CONTENT_LENGTH` is absent from the environ).
    pub chunked: bool,
    /// A body over `--body-buffer-size`: in this file, not in `data` (which then holds the
    /// head only).
    pub spooled: Option<crate::sys::spool::SpooledBody>,
    pub peer: Peer,
    /// When the loop had read it whole (the pass's clock): its wait for a handler, in the
    /// loop or in a handler's ring, counts from here (the metrics' queue wait,
    /// `--max-queue-wait`). One pipelined behind requests of its own connection still out
    /// counts from when the loop last found it waiting for them.
    pub queued_at: std::time::Instant,
    /// The index of the listener that accepted its connection.
    pub listener: u8,
    /// It came over TLS (`wsgi.url_scheme` https).
    pub secure: bool,
    /// The subject of the client's verified TLS certificate (RFC 4514), if it sent one.
    pub client_dn: Option<std::sync::Arc<str>>,
    /// The connection's socket, lent for this request's response: the handler may write
    /// the finished response to it itself (non-blocking) instead of pushing it for the
    /// loop to write. Only when nothing of the connection is queued or in flight before
    /// this request (so nothing can come between), on plain TCP or Unix sockets; the loop
    /// keeps the descriptor number reserved until this request's final part comes back
    /// (`Conn::close`), so a write can never reach another connection.
    pub socket: Option<LentSocket>,
}

/// The descriptor number of a socket lent with a request (`Request::socket`); four bytes
/// with a niche, so the option costs the request nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LentSocket(std::num::NonZeroU32);

impl LentSocket {
    pub(crate) fn new(fd: std::os::fd::RawFd) -> Option<LentSocket> {
        let plus_one = u32::try_from(fd).ok()?.checked_add(1)?;
        std::num::NonZeroU32::new(plus_one).map(LentSocket)
    }

    pub(crate) fn fd(self) -> std::os::fd::RawFd {
        (self.0.get() - 1) as std::os::fd::RawFd
    }
}

impl Request {
    pub fn body(&self) -> &[u8] {
        &self.data[self.head.head_len..]
    }
}

/// What a response message is in the sequence of one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// More parts follow. Counts against the handler's chunks-in-flight credit until the
    /// loop has written it (or dropped it with its connection).
    Partial,
    /// The response is complete; keep the connection open afterwards or close it.
    Last { keep_alive: bool },
    /// The response failed after it started: write out what is already queued, then close
    /// the connection without ending the body (no final chunk, a short Content-Length), so
    /// the client cannot take a truncated body for a whole one. `reset`: the body was
    /// delimited by the close itself (HTTP/1.0 streaming), so only a reset tells the client
    /// it is incomplete.
    Abort { reset: bool },
    /// The app took the connection's socket (a WebSocket, the environ's
    /// `gunicorn.socket`): nothing is written for this request, and the loop forgets the
    /// connection, closing only its own descriptor (no shutdown, no lingering read, no
    /// reset), while the app's copy keeps the connection.
    HandedOver,
}

/// A range of a Python `bytes` object's storage, written by the loop straight from there.
///
/// The reference keeps the object alive, and `bytes` are immutable, so the range stays
/// valid and unchanged without the GIL. Dropped off the GIL (the loop thread, after the
/// write), the reference goes to pyo3's deferred-decref pool, which a handler empties
/// after each request (`python::drop_deferred_refs`).
pub(crate) struct PyBytesRef {
    _owner: Py<PyBytes>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: the pointer is into the storage of `_owner`, an immutable object that this value
// keeps alive; reading it from another thread needs no lock and no GIL. `Py<T>` is `Send`
// (its drop without the GIL is deferred by pyo3).
unsafe impl Send for PyBytesRef {}

impl PyBytesRef {
    /// `range` of `obj`'s bytes (clamped to them).
    pub(crate) fn new(obj: &Bound<'_, PyBytes>, range: Range<usize>) -> PyBytesRef {
        let all = obj.as_bytes();
        let end = range.end.min(all.len());
        let start = range.start.min(end);
        let part = &all[start..end];
        PyBytesRef {
            _owner: obj.clone().unbind(),
            ptr: part.as_ptr(),
            len: part.len(),
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` lies in the storage of the bytes object `_owner` keeps
        // alive; bytes objects never change or move their storage.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Drops the first `n` bytes (all of them, if fewer) from the range.
    pub(crate) fn advance(&mut self, n: usize) {
        let n = n.min(self.len);
        // SAFETY: `n <= len`, so `ptr + n` stays within (or one past) the same range.
        self.ptr = unsafe { self.ptr.add(n) };
        self.len -= n;
    }
}

impl std::fmt::Debug for PyBytesRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PyBytesRef({} bytes)", self.len)
    }
}

/// Wire bytes: owned, or borrowed from the app's `bytes` object.
#[derive(Debug)]
pub(crate) enum Buf {
    Vec(Vec<u8>),
    Py(PyBytesRef),
}

impl Buf {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Buf::Vec(v) => v,
            Buf::Py(p) => p.as_slice(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the first `n` bytes (all of them, if fewer).
    pub(crate) fn advance(&mut self, n: usize) {
        match self {
            Buf::Vec(v) => {
                v.drain(..n.min(v.len()));
            }
            Buf::Py(p) => p.advance(n),
        }
    }
}

/// Most bytes of one streamed response that may be unwritten (in the response ring or its
/// connection's write queue) before its producer stops: a handler thread sets the body's
/// iterator aside and serves other requests until the loop has written some, so a client
/// that reads slowly holds memory and no thread. One body item more may go past it (an
/// item is never split). A mebibyte keeps one fast download as quick as blocking on it
/// was (each stop and resume costs the handler a wake; benchmarks/decisions.md, "slow readers").
pub(crate) const STREAM_CREDIT_BYTES: usize = 1024 * 1024;

/// Once a handler's streams together have this much unwritten, each of them may have only
/// `STREAM_CREDIT_CROWDED_BYTES`: many slow readers share a bounded amount of memory
/// (about this plus that much, and an item, per reader), where one alone gets the full
/// credit.
pub(crate) const HANDLER_CREDIT_BYTES: usize = 8 * 1024 * 1024;
pub(crate) const STREAM_CREDIT_CROWDED_BYTES: usize = 64 * 1024;

/// Inline mode (`--blocking-threads 0`), where `write()` cannot wait for the client (the
/// thread that would write its bytes is the one running the app): most bytes of one
/// response that may be unwritten before `write()` refuses more, and, once the worker's
/// other streams together hold `HANDLER_CREDIT_BYTES`, `STREAM_CREDIT_BYTES`.
pub(crate) const INLINE_WRITE_MAX_BYTES: usize = 16 * 1024 * 1024;

/// What one middle part counts against the credit at least, so that a body of tiny items
/// holds a bounded number of unwritten messages (each a buffer the loop keeps until
/// written).
pub(crate) const STREAM_PART_MIN_BYTES: usize = 16 * 1024;

/// The bytes unwritten across all the streamed responses of one handler.
#[derive(Debug, Default)]
pub(crate) struct StreamBudget {
    unwritten: AtomicUsize,
}

/// The flow control of one streamed response, shared by the handler producing it and the
/// loop writing it: how many of its bytes are unwritten, and whether its connection is
/// gone. One per streamed response (made at its first middle part), so a handler can hold
/// many such responses, each waiting for its own client.
#[derive(Debug)]
pub(crate) struct StreamCredit {
    unwritten: AtomicUsize,
    gone: AtomicBool,
    /// The handler producing it (the loop wakes that one when this changes), and the
    /// handler's total.
    handler: usize,
    budget: Arc<StreamBudget>,
}

impl StreamCredit {
    pub(crate) fn new(handler: usize, budget: Arc<StreamBudget>) -> StreamCredit {
        StreamCredit {
            unwritten: AtomicUsize::new(0),
            gone: AtomicBool::new(false),
            handler,
            budget,
        }
    }

    pub(crate) fn handler(&self) -> usize {
        self.handler
    }

    /// What a middle part of `wire_len` bytes counts against the credit (both sides use
    /// this, so what the loop returns is what the handler added).
    pub(crate) fn charge(wire_len: usize) -> usize {
        wire_len.max(STREAM_PART_MIN_BYTES)
    }

    /// Producer: `n` more bytes pushed.
    pub(crate) fn add(&self, n: usize) {
        // Relaxed, both: the counts reach the loop with the ring push that follows (its
        // Release store); the loop's own `returned` is ordered by the same push.
        self.unwritten.fetch_add(n, Ordering::Relaxed);
        self.budget.unwritten.fetch_add(n, Ordering::Relaxed);
    }

    /// Loop: `n` bytes written (or dropped with their connection).
    pub(crate) fn returned(&self, n: usize) {
        // Release, both: pairs with the Acquire loads in `spent`; the wake itself is
        // ordered by the fences of the handler's `WakeFlag`.
        self.budget.unwritten.fetch_sub(n, Ordering::Release);
        self.unwritten.fetch_sub(n, Ordering::Release);
    }

    /// Loop: its connection closed.
    pub(crate) fn cancel(&self) {
        // Release: pairs with the Acquire load in `is_gone`.
        self.gone.store(true, Ordering::Release);
    }

    pub(crate) fn is_gone(&self) -> bool {
        // Acquire: pairs with the Release store in `cancel`.
        self.gone.load(Ordering::Acquire)
    }

    /// The credit is spent: the producer should wait (or set the body aside).
    pub(crate) fn spent(&self) -> bool {
        // Acquire, both: pair with the Release `fetch_sub`s in `returned`.
        let own = self.unwritten.load(Ordering::Acquire);
        own >= STREAM_CREDIT_BYTES
            || (own >= STREAM_CREDIT_CROWDED_BYTES
                && self.budget.unwritten.load(Ordering::Acquire) >= HANDLER_CREDIT_BYTES)
    }

    /// Inline mode: `write()` may queue no more (`INLINE_WRITE_MAX_BYTES`).
    pub(crate) fn inline_full(&self) -> bool {
        // Acquire, both: as in `spent`.
        let own = self.unwritten.load(Ordering::Acquire);
        // The others' unwritten bytes: one large response alone is not a crowd.
        let others = self
            .budget
            .unwritten
            .load(Ordering::Acquire)
            .saturating_sub(own);
        own >= INLINE_WRITE_MAX_BYTES
            || (own >= STREAM_CREDIT_BYTES && others >= HANDLER_CREDIT_BYTES)
    }

    /// The producer may go on: credit came back, or there is nobody left to produce for.
    pub(crate) fn can_go_on(&self) -> bool {
        !self.spent() || self.is_gone()
    }
}

#[derive(Debug)]
pub struct Response {
    pub(crate) conn: ConnRef,
    /// Wire bytes: status line and headers on the first part, framed body data after.
    pub data: Vec<u8>,
    /// Written after `data`, in order: large body items straight from the app's `bytes`
    /// objects, and the framing bytes between them. Empty (no allocation) for most.
    pub(crate) more: Vec<Buf>,
    /// A body the loop sends straight from a file after `data` and `more`
    /// (`wsgi.file_wrapper` over a regular file): `sendfile(2)`, nothing copied through
    /// user space.
    pub(crate) file: Option<FileBody>,
    pub(crate) part: Part,
    /// A streamed response's flow control: a middle part's bytes count against it until
    /// written.
    pub(crate) stream: Option<Arc<StreamCredit>>,
}

impl Response {
    /// Bytes on the wire in `data` and `more` (not the file).
    pub(crate) fn wire_len(&self) -> usize {
        wire_len(&self.data, &self.more)
    }
}

/// Bytes on the wire in a message's `data` and `more`.
pub(crate) fn wire_len(data: &[u8], more: &[Buf]) -> usize {
    data.len() + more.iter().map(Buf::len).sum::<usize>()
}

/// `len` bytes of a file from `offset`, through a descriptor of its own (a dup, so the app
/// may close its file object at once).
#[derive(Debug)]
pub(crate) struct FileBody {
    /// Shared: the loop's open-file cache (`--static-map`) keeps it open for the next
    /// response of the same file.
    pub(crate) fd: std::sync::Arc<std::os::fd::OwnedFd>,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}
