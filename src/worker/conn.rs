//! One connection on the loop thread: its socket, read buffer, request framing and write
//! queue, and the rules it lives by (persistence, pipelining, refusals, timeouts, its
//! lingering close) as state enums. The loop (`event_loop/`) routes events to it and hands
//! its requests to the handlers; what to do next, the connection decides.

// Its shape is kept (clippy.toml): no function over 80 lines, no block nested deeper than 4.
#![warn(clippy::too_many_lines, clippy::excessive_nesting)]

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::http::body::{BodyError, ChunkedDecoder};
use crate::http::date::DateCache;
use crate::http::encode;
use crate::http::limits::{Limits, Timeouts};
use crate::http::parse::{self, BodyFraming, Head, HeadError};
use crate::http::proxy_protocol;
use crate::log;
use crate::metrics::Refused;
use crate::pipeline::msg::{
    Buf, ConnRef, FileBody, LentSocket, Part, Peer, Request, Response, StreamCredit,
};
use crate::sys::spool::Spool;
use crate::worker::tls::{Failure as TlsFailure, TlsStream};

/// First size of a connection's read buffer: a browser's request head fits.
pub(crate) const READ_BUFFER_INITIAL_BYTES: usize = 8 * 1024;

/// Most requests of one connection queued to a handler before the loop stops parsing that
/// connection's pipelined bytes (their responses are written in order, batched).
pub(crate) const MAX_PIPELINED_IN_FLIGHT: u16 = 16;

/// Most bytes reserved ahead of a declared Content-Length; the rest grows as it arrives.
const BODY_RESERVE_MAX_BYTES: u64 = 1024 * 1024;

/// Buffers queued for the socket past which a connection takes no new request: a client
/// that pipelines requests but does not read their responses must not grow the queue
/// without bound.
const WRITE_QUEUE_MAX_BUFFERS: usize = 32;

/// A Content-Length body with at least this much still to come is read straight into the
/// request's buffer (see `read_some`).
const DIRECT_BODY_READ_MIN_BYTES: u64 = 16 * 1024;

/// Most bytes one direct body read asks for.
const DIRECT_BODY_READ_MAX_BYTES: u64 = 1024 * 1024;

/// Most bytes one `sendfile(2)` is asked for, so that one big file does not hold the loop
/// while other connections wait.
const SENDFILE_MAX_BYTES: u64 = 1024 * 1024;

/// Once a body spools, bytes gathered in memory before each write to its file.
const SPOOL_BATCH_BYTES: usize = 256 * 1024;

/// Most bytes of a file read for one TLS write (no `sendfile(2)` under TLS).
const TLS_FILE_CHUNK_BYTES: u64 = 64 * 1024;

/// The longest PROXY header accepted: v2's 16 bytes and its longest address block.
const PROXY_HEADER_MAX_BYTES: usize = 16 + proxy_protocol::MAX_V2_LEN;

/// Most iovecs handed to one `writev`.
const WRITEV_MAX_SLICES: usize = 16;

pub enum Sock {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
    Tls(Box<TlsStream>),
}

impl Sock {
    pub(crate) fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Sock::Tcp(s) => s,
            Sock::Unix(s) => s,
            Sock::Tls(t) => t.tcp_mut(),
        }
    }

    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
            Sock::Tls(t) => t.read(buf),
        }
    }

    /// Reads the socket itself, under any TLS (a lingering close drops what comes).
    fn read_raw(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
            Sock::Tls(t) => t.tcp_mut().read(buf),
        }
    }

    pub(crate) fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write_vectored(bufs),
            Sock::Unix(s) => s.write_vectored(bufs),
            Sock::Tls(t) => t.write_vectored(bufs),
        }
    }

    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
            Sock::Tls(t) => t.write(buf),
        }
    }

    /// Bytes encrypted but not yet taken by the socket (TLS only).
    fn has_pending(&self) -> bool {
        matches!(self, Sock::Tls(t) if t.has_pending())
    }

    /// Writes what the transport itself still holds (TLS records); `Ok(true)` when done.
    fn write_pending(&mut self) -> io::Result<bool> {
        match self {
            Sock::Tls(t) => t.write_pending(),
            _ => Ok(true),
        }
    }

    /// `recv(2)` with `MSG_PEEK` on the socket itself: what has arrived, left in place.
    fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: recv writes at most `buf.len()` bytes into the live buffer.
        let n = unsafe {
            crate::sys::syscall!(recv(
                self.raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
                libc::MSG_PEEK
            ))
        }?;
        Ok(n as usize)
    }

    /// Bytes are read straight from the socket into a request's buffer only without TLS.
    fn reads_direct(&self) -> bool {
        !matches!(self, Sock::Tls(_))
    }

    /// `read(2)` into memory that is not initialised yet.
    fn read_uninit(&mut self, buf: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
        // SAFETY: read(2) writes at most `buf.len()` bytes into the live buffer (which may
        // hold uninitialised memory; only the bytes it reports are read afterwards).
        let n = unsafe {
            crate::sys::syscall!(read(
                self.raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len()
            ))
        }?;
        Ok(n as usize)
    }

    /// One `sendfile(2)` of the rest of `file` (at most `SENDFILE_MAX_BYTES`), advancing it.
    /// Under TLS the file is read (`pread`, at most `TLS_FILE_CHUNK_BYTES`) and encrypted.
    fn send_file(&mut self, file: Option<&mut FileBody>) -> io::Result<usize> {
        let Some(file) = file else { return Ok(0) };
        if let Sock::Tls(t) = self {
            let mut chunk = vec![0u8; file.len.min(TLS_FILE_CHUNK_BYTES) as usize];
            // SAFETY: pread writes at most `chunk.len()` bytes into the live buffer.
            let got = unsafe {
                crate::sys::syscall!(pread(
                    file.fd.as_raw_fd(),
                    chunk.as_mut_ptr().cast::<libc::c_void>(),
                    chunk.len(),
                    file.offset as libc::off_t
                ))
            }? as usize;
            if got == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let n = t.write(&chunk[..got])?;
            file.offset += n as u64;
            file.len -= n as u64;
            return Ok(n);
        }
        let mut offset = file.offset as libc::off_t;
        let count = file.len.min(SENDFILE_MAX_BYTES) as usize;
        // SAFETY: sendfile between two live descriptors, with a live offset it advances.
        let n = unsafe {
            crate::sys::syscall!(sendfile(
                self.raw_fd(),
                file.fd.as_raw_fd(),
                &mut offset,
                count
            ))
        }? as usize;
        file.offset += n as u64;
        file.len -= n as u64;
        Ok(n)
    }

    fn raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
            Sock::Tls(t) => t.tcp().as_raw_fd(),
        }
    }

    /// Bytes the kernel holds for the peer and has not had acknowledged (`SIOCOUTQ`), or
    /// `None` if it cannot say.
    fn unsent_bytes(&self) -> Option<u64> {
        let mut n: libc::c_int = 0;
        // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int into the live `n`.
        let got = unsafe { crate::sys::syscall!(ioctl(self.raw_fd(), libc::TIOCOUTQ, &mut n)) };
        got.ok().map(|_| n.max(0) as u64)
    }

    pub(crate) fn shutdown_write(&mut self) {
        // A peer that is already gone makes this fail; the close that follows is all that
        // matters then.
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Sock::Unix(s) => s.shutdown(std::net::Shutdown::Write),
            Sock::Tls(t) => {
                t.shutdown_write();
                Ok(())
            }
        };
    }

    /// Closes the socket but keeps its descriptor number, holding a duplicate of
    /// `placeholder` from now on (one `dup3`, which closes the socket as `close` would: same
    /// FIN or reset, and out of the epoll set); the number is returned to be closed later.
    /// TLS sockets are never lent (`None`: closed as usual).
    fn into_reserved(
        self,
        placeholder: std::os::fd::BorrowedFd<'_>,
    ) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::{AsRawFd, OwnedFd};
        let fd = match self {
            Sock::Tcp(s) => OwnedFd::from(s),
            Sock::Unix(s) => OwnedFd::from(s),
            Sock::Tls(_) => return None,
        };
        let swapped = loop {
            // SAFETY: both descriptors are open (`placeholder` is borrowed, `fd` owned);
            // dup3 replaces what `fd` refers to atomically, so the number is never free.
            match unsafe {
                crate::sys::syscall!(dup3(
                    placeholder.as_raw_fd(),
                    fd.as_raw_fd(),
                    libc::O_CLOEXEC
                ))
            } {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        if let Err(e) = swapped {
            // Not expected (both descriptors are open). Still safe: the socket keeps its
            // number until the lent request comes back, shut down now so the client sees
            // the close.
            log::warning!("cannot retire a lent socket: {e}; shutting it down instead");
            // SAFETY: `fd` is an open socket descriptor this function owns.
            let _ = unsafe { crate::sys::syscall!(shutdown(fd.as_raw_fd(), libc::SHUT_RDWR)) };
        }
        Some(fd)
    }

    /// Before the half-close: TLS's close_notify written (`Ok(false)`: not yet, wait for
    /// the socket). Nothing to do without TLS.
    fn prepare_close(&mut self) -> io::Result<bool> {
        match self {
            Sock::Tls(t) => t.close_notify(),
            _ => Ok(true),
        }
    }
}

/// What closing a connection leaves to the loop.
pub(crate) struct Closed {
    /// Its own flow control, for the loop to mark gone.
    pub(crate) stream: Option<Arc<StreamCredit>>,
    /// The descriptor number of a socket lent to a handler, now holding a placeholder
    /// (`Conn::close`): kept until the lent request's final part comes back.
    pub(crate) reserved: Option<std::os::fd::OwnedFd>,
}

/// Bytes waiting to be written, and whose they are.
pub(crate) struct Out {
    pub(crate) data: Buf,
    pub(crate) pos: usize,
    /// Sent after `data`, with `sendfile(2)`.
    pub(crate) file: Option<FileBody>,
    /// A streamed response's middle part counts this many bytes against its credit until
    /// written (on the part's last buffer).
    pub(crate) credit: Option<(Arc<StreamCredit>, usize)>,
}

impl Out {
    fn done(&self) -> bool {
        self.pos == self.data.len() && self.file.as_ref().is_none_or(|f| f.len == 0)
    }
}

/// Where the connection is in reading its current request.
pub(crate) enum ReadState {
    /// Waiting for (the rest of) a request head.
    Head,
    /// Reading a Content-Length body of which `need` bytes are still to come.
    Body {
        req: Box<Request>,
        need: u64,
        expect: Expect,
    },
    /// Decoding a chunked body.
    Chunked {
        req: Box<Request>,
        dec: ChunkedDecoder,
        expect: Expect,
    },
}

/// A body's `Expect: 100-continue` (RFC 9110 §10.1.1).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// Nothing is owed: none was asked, the body had come already, or the interim
    /// response was sent.
    Nothing,
    /// The interim response is owed; it goes once every earlier response is done, so it
    /// cannot overtake them.
    Continue,
}

impl ReadState {
    /// Whether an interim `100 Continue` is owed to the body being read.
    fn owes_continue(&self) -> bool {
        matches!(
            self,
            ReadState::Body {
                expect: Expect::Continue,
                ..
            } | ReadState::Chunked {
                expect: Expect::Continue,
                ..
            }
        )
    }

    /// The interim response is being sent: nothing is owed any more.
    fn continue_sent(&mut self) {
        if let ReadState::Body { expect, .. } | ReadState::Chunked { expect, .. } = self {
            *expect = Expect::Nothing;
        }
    }
}

/// Whether reading may go on now, and what the last read said of the socket.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Gate {
    /// `--proxy-protocol`: its PROXY header is still to come, before any other byte.
    ProxyHeader,
    /// Input may be waiting: read until the socket would block.
    Open,
    /// The last read was short, so the socket was drained then; a new edge comes with new
    /// bytes, and reading again now would only cost an `EAGAIN` syscall.
    Drained,
    /// Reading stopped at a cap (requests in flight, a backed-up write queue) without
    /// `WouldBlock`: edge-triggered readiness will not come again for what waits, so
    /// reading resumes by itself once the cap lifts. `drained`: as the socket was when it
    /// stopped.
    Stalled { drained: bool },
}

/// The client's sending side.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Input {
    /// It may send more.
    Open,
    /// The readiness said the peer shut down its side: its end of stream waits in the
    /// socket, and no new edge will come for it, so reading goes on to the end.
    Closing,
    /// A read returned its end of stream.
    Ended,
}

/// The requests of a connection out on a handler.
struct InFlight {
    /// The handler they are on (requests of one connection stay on one handler, so their
    /// responses come back in order).
    handler: usize,
    /// How many (at least one) have no complete response yet.
    count: u16,
    /// The socket is lent to the handler for the first of them (it may write that
    /// response itself): until that request's final part comes back, the descriptor
    /// number must stay this connection's.
    lent: bool,
}

/// Where the connection is in its life. It only moves down this list: whether it goes on
/// serving is decided once.
enum Phase {
    /// Reading requests, one after another.
    Open,
    /// No more requests are read (the last one asked to close, a graceful stop, the
    /// client's end of stream, or a request refused): the responses in flight are written,
    /// then the refusal if there is one, then it closes.
    Last { refusal: Option<Refusal> },
    /// Nothing more is queued: it closes once its queue is written, with a reset when
    /// `reset` (a client that stopped reading), else a lingering close.
    Closing { reset: bool },
    /// Its FIN is sent, and what the client still sends is read and dropped until it
    /// closes or the loop's deadline passes, so that unread input does not turn the close
    /// into a reset that destroys the response in flight (RFC 9112 §9.6).
    Lingering,
}

/// A request the loop refuses itself (the app never sees it), answered with
/// `Connection: close` once the responses before it are written.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) reason: &'static str,
    /// For the debug log.
    why: String,
}

impl Refusal {
    /// RFC 9110 §15.5.9: 408, the server would not wait any longer.
    pub(crate) fn timeout() -> Refusal {
        Refusal {
            status: 408,
            reason: "Request Timeout",
            why: "timed out".into(),
        }
    }

    /// Its whole response (always closing).
    pub(crate) fn response(&self, date: &[u8]) -> Vec<u8> {
        let body = format!("{} {}\n", self.status, self.reason);
        encode::simple_response(
            self.status,
            self.reason,
            "text/plain; charset=utf-8",
            body.as_bytes(),
            false,
            false,
            date,
        )
    }
}

/// What one parse step produced.
pub(crate) enum Step {
    /// A complete request.
    Request(Box<Request>),
    /// The buffer holds no complete request: read more.
    NeedMore,
    /// The request is refused: answer, and read no further.
    Refused(Refusal),
}

impl Step {
    fn refuse(e: HeadError) -> Step {
        Step::Refused(Refusal {
            status: e.status(),
            reason: e.reason(),
            why: format!("{e:?}"),
        })
    }

    fn too_large() -> Step {
        Step::Refused(Refusal {
            status: 413,
            reason: "Content Too Large",
            why: "body over the size limit".into(),
        })
    }

    fn spool_failed() -> Step {
        Step::Refused(Refusal {
            status: 503,
            reason: "Service Unavailable",
            why: "the body could not be spooled".into(),
        })
    }
}

/// What one read got.
pub(crate) enum Got {
    /// This many bytes.
    Bytes(usize),
    /// The peer's end of stream.
    End,
    /// The read buffer is full and holds no complete head (the caller stops reading).
    Full,
}

/// What the loop knows that reading needs: the limits, and the pass's clock and date.
pub struct ReadCtx<'a> {
    pub limits: &'a Limits,
    /// `--max-body-size`.
    pub max_body_bytes: u64,
    /// `--body-buffer-size`: larger bodies spool to a temporary file.
    pub body_buffer: usize,
    /// How large the read buffer may grow (the largest head and room behind it).
    pub read_buffer_max: usize,
    /// A graceful stop is under way: a connection's last request read is answered with
    /// `Connection: close`.
    pub draining: bool,
    pub now: Instant,
    /// The `Date` value, for the loop's own answers.
    pub date: &'a mut DateCache,
}

/// What reading did besides its result, for the loop to act on.
#[derive(Default)]
pub struct Effects {
    /// Bytes were queued (an interim `100 Continue`, a refusal): flush the connection.
    pub(crate) queued: bool,
    /// Its client left (or half-closed) with a request in flight, reported once: what
    /// `m0serve.client_disconnected()` tells the app.
    pub(crate) client_gone: bool,
    /// The loop answered a request itself with this status (for the metrics).
    pub(crate) answered: Option<u16>,
    /// It is closed before any request, and why (for the metrics).
    pub(crate) refused: Option<Refused>,
}

/// What reading came to.
pub enum Next {
    /// A whole request, for the loop to hand to a handler (or answer itself).
    Request(Box<Request>),
    /// Nothing more to do until an event (or until the loop resumes it).
    Wait,
    /// Close it now.
    Close,
}

/// What is next once the write queue is empty.
pub(crate) enum Written {
    /// It goes on. `resume`: parsing waited for the queue to drain; `idle`: nothing is in
    /// flight, buffered or queued (a graceful stop keeps it only for a grace).
    Open { resume: bool, idle: bool },
    /// Close it now.
    Close,
    /// Its lingering close began: the loop closes it when the client does, or at a
    /// deadline.
    Lingering,
    /// TLS's close_notify waits for the socket: the next writable edge flushes it, and
    /// the close goes on from there.
    Flushing,
}

/// A timeout that ran out (docs/security.md).
pub(crate) enum Expiry {
    /// The client took no response bytes for `--write-timeout`: drop it (reset).
    Write,
    /// The head (`header`) or the body (`body`) took too long: 408 if part of a request
    /// arrived, else close.
    Request { which: &'static str, answer: bool },
    /// Idle past `--keep-alive-timeout`: close.
    KeepAlive,
}

/// Its timestamps, from the loop's pass clock.
struct Clock {
    /// When it last became ready for a new request head: accepted, or its last response
    /// written. The keep-alive timeout counts from here.
    ready_at: Instant,
    /// When the first byte of the head being read arrived (the accept, for a new
    /// connection's first head). The header timeout counts from this or `ready_at`,
    /// whichever is later; the bytes that follow never move it.
    head_at: Instant,
    /// The last response in flight is queued: once it is written, the connection is ready
    /// for a new head (`ready_at`).
    idle_pending: bool,
    /// When request bytes last arrived (the body timeout).
    read_at: Instant,
    /// When the current body started and how many of its bytes have arrived since
    /// (`--body-min-rate`).
    body_at: Instant,
    body_read: u64,
    /// When the socket last took response bytes, or the queue last became non-empty, or
    /// the client last took bytes the kernel held (the write timeout).
    write_at: Instant,
    /// What the kernel held for the client at the last sweep (`u64::MAX`: not looked).
    unsent: u64,
}

/// What the loop answers a request with itself, in place of the app.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoopAnswer {
    /// 404: outside `--root-path`.
    OutsideRoot,
    /// 503 with `Retry-After`: it would wait, or has waited, past `--max-queue-wait`.
    Busy,
    /// A file under `--static-map` mount N.
    Static(u8),
}

/// One connection, owned by the loop thread. The loop routes events to it and hands its
/// requests to handlers; the rules of HTTP/1.1 persistence, pipelining and timeouts are
/// kept here.
pub struct Conn {
    sock: Sock,
    me: ConnRef,
    peer: Peer,
    /// Which listener accepted it (its index in the worker's list, for `SERVER_NAME`);
    /// `None` for the metrics port, whose requests the loop answers itself.
    listener: Option<u8>,
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
    reading: ReadState,
    phase: Phase,
    gate: Gate,
    input: Input,
    wq: VecDeque<Out>,
    /// Requests queued to or running on a handler whose responses are not complete.
    in_flight: Option<InFlight>,
    /// A parsed request waiting for a handler (room in a ring, or one free to take it).
    parked: Option<Box<Request>>,
    /// It is on the loop's list of connections with a parked request (`listed`).
    listed: bool,
    /// A request the loop answers itself, and how, waiting for the responses in flight
    /// before it: the answer must not overtake them.
    held: Option<(Box<Request>, LoopAnswer)>,
    /// Requests parsed on it so far.
    requests: u32,
    /// Its client's departure was reported (`Effects::client_gone`).
    gone_reported: bool,
    /// The flow control of the streamed response now being written to it, if any: told
    /// when the connection closes, so its producer stops.
    stream: Option<Arc<StreamCredit>>,
    /// Bytes sent with `sendfile(2)` since the loop last collected them (for the counters).
    sendfile_bytes: u64,
    /// The current request's body, past `--body-buffer-size`, being spooled.
    spool: Option<Spool>,
    clock: Clock,
}

impl Conn {
    /// A connection just accepted; `listener` is `None` for the metrics port.
    pub fn new(sock: Sock, me: ConnRef, peer: Peer, listener: Option<u8>, now: Instant) -> Conn {
        Conn {
            sock,
            me,
            peer,
            listener,
            rbuf: vec![0; READ_BUFFER_INITIAL_BYTES],
            rpos: 0,
            rend: 0,
            reading: ReadState::Head,
            phase: Phase::Open,
            gate: Gate::Open,
            input: Input::Open,
            wq: VecDeque::new(),
            in_flight: None,
            parked: None,
            listed: false,
            held: None,
            requests: 0,
            gone_reported: false,
            stream: None,
            sendfile_bytes: 0,
            spool: None,
            clock: Clock {
                ready_at: now,
                head_at: now,
                idle_pending: false,
                read_at: now,
                body_at: now,
                body_read: 0,
                write_at: now,
                unsent: u64::MAX,
            },
        }
    }

    /// `--proxy-protocol`: its first bytes must be a PROXY header, whose source address
    /// becomes its peer.
    pub(crate) fn expect_proxy_header(&mut self) {
        self.gate = Gate::ProxyHeader;
    }

    /// Reads the PROXY header off the socket itself, before any TLS or HTTP byte: a peek
    /// until the whole header has arrived, then a read of exactly its length, so what
    /// follows it stays in the socket for the connection's own reads. `Ok(true)` once
    /// read; `Ok(false)` to wait for more; `Err` to close.
    fn read_proxy_header(&mut self) -> Result<bool, String> {
        let mut buf = [0u8; PROXY_HEADER_MAX_BYTES];
        let n = match self.sock.peek(&mut buf) {
            Ok(0) => return Err("the connection closed before its PROXY header".into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(false),
            Err(e) => return Err(e.to_string()),
        };
        let (len, source) = match proxy_protocol::parse(&buf[..n]) {
            Ok(proxy_protocol::Parsed::Done { len, source }) => (len, source),
            Ok(proxy_protocol::Parsed::Partial) => return Ok(false),
            Err(e) => return Err(e.to_string()),
        };
        let mut left = len;
        while left > 0 {
            match self.sock.read_raw(&mut buf[..left]) {
                Ok(0) => return Err("the connection closed in its PROXY header".into()),
                Ok(k) => left -= k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The peeked bytes are in the socket: nothing else can take them.
                Err(e) => return Err(e.to_string()),
            }
        }
        self.gate = Gate::Open;
        if let Some(addr) = source {
            self.peer = Peer::Tcp(addr);
        }
        Ok(true)
    }

    pub(crate) fn me(&self) -> ConnRef {
        self.me
    }

    pub(crate) fn peer(&self) -> Peer {
        self.peer
    }

    /// It came to the metrics port: the loop answers its requests itself.
    pub(crate) fn is_metrics(&self) -> bool {
        self.listener.is_none()
    }

    /// The index of the listener that accepted it (0 for the metrics port).
    pub(crate) fn listener(&self) -> u8 {
        self.listener.unwrap_or(0)
    }

    /// The handler its requests in flight are on (requests of one connection stay on one
    /// handler, so their responses come back in order), if any are.
    pub(crate) fn handler(&self) -> Option<usize> {
        self.in_flight.as_ref().map(|f| f.handler)
    }

    /// How many of its requests are out on a handler.
    pub(crate) fn in_flight(&self) -> u16 {
        self.in_flight.as_ref().map_or(0, |f| f.count)
    }

    /// For registration with the poller.
    pub(crate) fn source(&mut self) -> &mut dyn mio::event::Source {
        self.sock.source()
    }

    /// Bytes sent with `sendfile(2)` since the last call.
    pub(crate) fn take_sendfile_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.sendfile_bytes)
    }

    /// Bytes are waiting for the socket (queued, or encrypted and held by TLS).
    pub(crate) fn has_output(&self) -> bool {
        !self.wq.is_empty() || self.sock.has_pending()
    }

    /// In its lingering close.
    pub(crate) fn is_lingering(&self) -> bool {
        matches!(self.phase, Phase::Lingering)
    }

    /// Its responses may still be queued (it is not closing).
    pub(crate) fn takes_responses(&self) -> bool {
        matches!(self.phase, Phase::Open | Phase::Last { .. })
    }

    /// Unparsed bytes are buffered.
    fn has_buffered_input(&self) -> bool {
        self.rpos < self.rend
    }

    /// Idle: nothing buffered, nothing in flight, nothing to write (a drain may close it).
    pub(crate) fn is_idle(&self) -> bool {
        self.in_flight.is_none()
            && self.parked.is_none()
            && self.held.is_none()
            && !self.has_output()
            && matches!(self.reading, ReadState::Head)
            && !self.has_buffered_input()
            && self.takes_responses()
    }

    /// A readiness event for it. `true` when its client just left (or half-closed) with a
    /// request in flight: the loop tells that request's handler, now, even when the
    /// connection reads no further (`Connection: close`).
    pub fn on_readiness(&mut self, readable: bool, read_closed: bool) -> bool {
        // A new readable edge: bytes (or an EOF) arrived since the last short read. A
        // write-only edge says nothing about input.
        if readable || read_closed {
            self.gate = match self.gate {
                Gate::Drained => Gate::Open,
                Gate::Stalled { .. } => Gate::Stalled { drained: false },
                g => g,
            };
        }
        if read_closed && self.input == Input::Open {
            self.input = Input::Closing;
        }
        read_closed && self.in_flight.is_some() && !std::mem::replace(&mut self.gone_reported, true)
    }

    /// A request that found every handler's ring full, kept for the next try.
    pub(crate) fn park(&mut self, req: Box<Request>) {
        self.parked = Some(req);
    }

    /// The parked request, if it may still be handed on: not once the connection closes,
    /// and not once its client has shut down its side (an end of stream is a departure;
    /// `take_abandoned` takes such a request).
    pub(crate) fn take_parked(&mut self) -> Option<Box<Request>> {
        if !self.takes_responses() || self.input != Input::Open {
            return None;
        }
        self.parked.take()
    }

    /// The parked request of a connection that closes, or whose client has shut down its
    /// side: it will never be served, but a handler still logs it (499, the app not run).
    pub(crate) fn take_abandoned(&mut self) -> Option<Box<Request>> {
        if self.takes_responses() && self.input == Input::Open {
            return None;
        }
        self.parked.take()
    }

    /// Its parked request, whatever its state: it closes now.
    pub(crate) fn take_parked_at_close(&mut self) -> Option<Box<Request>> {
        self.parked.take()
    }

    /// Whether it is on the loop's list of connections whose parked request waits for a
    /// handler; set when it is put there, cleared when it is taken off.
    pub(crate) fn listed(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.listed, on)
    }

    /// The socket, if its next request's handler may write that response itself: plain
    /// TCP or Unix (TLS records are the loop's to make), open, and quiet (nothing queued
    /// to write, no request in flight), so no other bytes can come before or between. A
    /// WebSocket upgrade (`websocket`), its connection's last request, gets it too: the
    /// app may take the socket (`Part::HandedOver`); unless bytes came after its head,
    /// which would be lost to the app (a client waits for the handshake's answer).
    pub(crate) fn socket_to_lend(&self, websocket: bool) -> Option<LentSocket> {
        let open = match self.phase {
            Phase::Open => true,
            Phase::Last { refusal: None } => websocket && !self.has_buffered_input(),
            _ => false,
        };
        let quiet = self.in_flight.is_none() && self.wq.is_empty() && open;
        match &self.sock {
            Sock::Tcp(s) if quiet => LentSocket::new(s.as_raw_fd()),
            Sock::Unix(s) if quiet => LentSocket::new(s.as_raw_fd()),
            _ => None,
        }
    }

    /// Keeps a request the loop will answer itself until the responses before it are done
    /// (`take_held`); reading stops meanwhile.
    pub(crate) fn hold(&mut self, req: Box<Request>, answer: LoopAnswer) {
        self.held = Some((req, answer));
    }

    /// A request is held (`hold`).
    pub(crate) fn holds(&self) -> bool {
        self.held.is_some()
    }

    /// The held request, once nothing is in flight before it.
    pub(crate) fn take_held(&mut self) -> Option<(Box<Request>, LoopAnswer)> {
        if self.in_flight.is_some() {
            return None;
        }
        // A response before it ended the connection (cut short, or `Connection: close`):
        // nothing may follow it on the wire.
        if !self.takes_responses() {
            self.held = None;
            return None;
        }
        self.held.take()
    }

    /// A request of it went to handler `h`, with its socket lent (`socket_to_lend`) or not.
    pub(crate) fn dispatched(&mut self, h: usize, lent: bool) {
        match &mut self.in_flight {
            Some(f) => {
                f.count += 1;
                f.lent |= lent;
            }
            None => {
                self.in_flight = Some(InFlight {
                    handler: h,
                    count: 1,
                    lent,
                })
            }
        }
    }

    /// One of its requests out got its final part (or will get none it writes).
    fn one_done(&mut self) {
        if let Some(f) = &mut self.in_flight {
            f.count -= 1;
            f.lent = false;
            if f.count == 0 {
                self.in_flight = None;
            }
        }
    }

    /// Reads and parses as far as it may: until a whole request (for the loop to hand on),
    /// or until it must wait (the socket would block, the pipelining caps, responses it
    /// must follow), or until it must close.
    pub fn poll(&mut self, ctx: &mut ReadCtx<'_>, fx: &mut Effects) -> Next {
        loop {
            if let Some(next) = self.poll_phase(ctx, fx) {
                return next;
            }
            if self.gate == Gate::ProxyHeader {
                match self.read_proxy_header() {
                    Ok(true) => {}
                    Ok(false) => return Next::Wait,
                    Err(why) => {
                        log::debug!("--proxy-protocol: {:?}: {why}: closed", self.peer);
                        fx.refused = Some(Refused::ProxyMalformed);
                        return Next::Close;
                    }
                }
            }
            if self.in_flight() >= MAX_PIPELINED_IN_FLIGHT || self.write_backed_up() {
                self.stall();
                return Next::Wait;
            }
            // Past the caps: from here the connection is read until it would block (or is
            // known drained), so nothing needs to resume it but a new readiness edge.
            self.unstall();
            match self.parse_step(ctx.limits, ctx.max_body_bytes, ctx.body_buffer) {
                Step::Request(req) => return Next::Request(self.parsed(req, ctx)),
                Step::Refused(r) => self.phase = Phase::Last { refusal: Some(r) },
                Step::NeedMore => {
                    if let Some(next) = self.need_more(ctx, fx) {
                        return next;
                    }
                }
            }
        }
    }

    /// What its phase allows: `None` while it reads requests, else what to do (in `Last`,
    /// once the last response is done, the refusal is queued and the close begins).
    fn poll_phase(&mut self, ctx: &mut ReadCtx<'_>, fx: &mut Effects) -> Option<Next> {
        let refusal = match &mut self.phase {
            Phase::Open => return None,
            Phase::Closing { .. } | Phase::Lingering => return Some(Next::Wait),
            Phase::Last { refusal } => refusal,
        };
        if self.in_flight.is_none() {
            // The last response is done (or there was none): answer a refusal, then close
            // once written.
            if let Some(r) = refusal.take() {
                log::debug!("answering {} to {:?}: {}", r.status, self.peer, r.why);
                fx.answered = Some(r.status);
                self.queue(r.response(ctx.date.get()));
            }
            self.phase = Phase::Closing { reset: false };
            fx.queued = true;
        }
        // No more reading: nothing to resume.
        self.unstall();
        Some(Next::Wait)
    }

    /// Reading stops at a cap.
    fn stall(&mut self) {
        self.gate = match self.gate {
            Gate::Open => Gate::Stalled { drained: false },
            Gate::Drained => Gate::Stalled { drained: true },
            g => g,
        };
    }

    /// Reading goes on (or stops for good): no longer stalled.
    fn unstall(&mut self) {
        if let Gate::Stalled { drained } = self.gate {
            self.gate = if drained { Gate::Drained } else { Gate::Open };
        }
    }

    /// Reading stopped at a cap with input perhaps waiting.
    fn stalled(&self) -> bool {
        matches!(self.gate, Gate::Stalled { .. })
    }

    /// A whole request was parsed: its wait for a handler starts now, and the
    /// connection's word on persistence is decided.
    fn parsed(&mut self, mut req: Box<Request>, ctx: &ReadCtx<'_>) -> Box<Request> {
        self.requests = self.requests.saturating_add(1);
        req.queued_at = ctx.now;
        if ctx.draining && !self.has_buffered_input() {
            // A graceful stop answers what the client has sent: this request, and any
            // pipelined behind it, the last of them with `Connection: close` (decided here,
            // per request, so a response the handler encodes keeps its word to the client).
            req.head.keep_alive = false;
        }
        if !req.head.keep_alive {
            self.phase = Phase::Last { refusal: None };
        }
        req
    }

    /// The buffer holds no whole request: sends a `100 Continue` that is due, then reads
    /// once more. `None` to parse again; else what to do.
    fn need_more(&mut self, ctx: &mut ReadCtx<'_>, fx: &mut Effects) -> Option<Next> {
        if self.in_flight.is_none() && self.reading.owes_continue() {
            // RFC 9110 §10.1.1; after every earlier response, never before.
            self.reading.continue_sent();
            self.queue(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec());
            fx.queued = true;
            // The client sends the body on this answer: its clocks start now.
            self.clock.read_at = ctx.now;
            self.clock.body_at = ctx.now;
        }
        match (self.input, self.gate) {
            (Input::Ended, _) => self.ended(fx),
            (_, Gate::Drained) => Some(Next::Wait),
            _ => self.read_once(ctx, fx),
        }
    }

    /// The peer stopped sending. A request cut short gets no answer; one in flight still
    /// does, then the connection closes. `None` to go on (to answer what is in flight).
    fn ended(&mut self, fx: &mut Effects) -> Option<Next> {
        if self.in_flight.is_none() {
            if !self.has_output() {
                return Some(Next::Close);
            }
            self.phase = Phase::Closing { reset: false };
            return Some(Next::Wait);
        }
        self.phase = Phase::Last { refusal: None };
        fx.client_gone |= !std::mem::replace(&mut self.gone_reported, true);
        None
    }

    /// One read. `None` to parse again; else what to do.
    fn read_once(&mut self, ctx: &mut ReadCtx<'_>, fx: &mut Effects) -> Option<Next> {
        // A head's clock starts with its first byte, and only then; a new connection's
        // first head counts from the accept.
        let head_starts = matches!(self.reading, ReadState::Head)
            && !self.has_buffered_input()
            && self.requests > 0;
        match self.read_some(ctx.read_buffer_max) {
            Ok(Got::End) => self.input = Input::Ended,
            // The buffer is full and holds no complete head. Heads are limited below the
            // buffer's size, so the parser refuses first (431); if it ever happened,
            // waiting would never end.
            Ok(Got::Full) => return Some(Next::Close),
            Ok(Got::Bytes(n)) => {
                self.clock.read_at = ctx.now;
                if head_starts {
                    self.clock.head_at = ctx.now;
                } else if !matches!(self.reading, ReadState::Head) {
                    self.clock.body_read += n as u64;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(Next::Wait),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Some(self.read_failed(&e, ctx, fx)),
        }
        None
    }

    /// A read failed: under TLS, plain HTTP gets its 400 first, and a failed handshake
    /// is logged; else it closes.
    fn read_failed(&mut self, e: &io::Error, ctx: &mut ReadCtx<'_>, fx: &mut Effects) -> Next {
        let failure = match &self.sock {
            Sock::Tls(t) => t.failure(),
            _ => None,
        };
        match failure {
            Some(TlsFailure::PlainHttp) => {
                log::debug!(
                    "plain HTTP from {:?} to a TLS port: answered 400",
                    self.peer
                );
                fx.refused = Some(Refused::TlsPlainHttp);
                fx.queued = true;
                self.queue(encode::simple_response(
                    400,
                    "Bad Request",
                    "text/plain",
                    crate::worker::tls::PLAIN_HTTP_BODY,
                    false,
                    false,
                    ctx.date.get(),
                ));
                self.phase = Phase::Closing { reset: false };
                return Next::Wait;
            }
            Some(TlsFailure::Handshake) => {
                crate::worker::tls::log_handshake_failure(&self.peer, e);
                fx.refused = Some(Refused::TlsHandshake);
            }
            None => {}
        }
        Next::Close
    }

    /// A response the loop made itself (`--static-response`, a scrape of the metrics
    /// port), for a request it did not hand on.
    pub(crate) fn answer(&mut self, response: Vec<u8>) {
        self.queue(response);
        // Ready for the next head once this is written, as after a handler's response.
        self.clock.idle_pending = self.in_flight.is_none();
    }

    /// A whole response the loop made itself with a file body to follow its head
    /// (`--static-map`), queued like a handler's last part: the `--write-timeout` clock
    /// starts when nothing was queued before it.
    pub(crate) fn answer_file(&mut self, head: Vec<u8>, file: Option<FileBody>, now: Instant) {
        if self.wq.is_empty() {
            self.clock.write_at = now;
        }
        self.queue_response(head, Vec::new(), file, None);
        self.clock.idle_pending = self.in_flight.is_none();
    }

    /// One message of a response from its handler (the loop checked `takes_responses`),
    /// queued for the socket; `credit` is a streamed middle part's. `true` when reading
    /// must go on from here (its last response is done and it has input waiting, or a
    /// refusal or an interim response to send).
    pub(crate) fn on_response(
        &mut self,
        resp: Response,
        credit: Option<(Arc<StreamCredit>, usize)>,
        now: Instant,
    ) -> bool {
        if self.wq.is_empty() {
            self.clock.write_at = now;
        }
        if let (None, Some((c, _))) = (&self.stream, &credit) {
            self.stream = Some(c.clone());
        }
        self.queue_response(resp.data, resp.more, resp.file, credit);
        match resp.part {
            Part::Partial => false,
            Part::Last { keep_alive } => {
                self.stream = None;
                self.one_done();
                if self.in_flight.is_none() {
                    self.clock.idle_pending = true;
                }
                if !keep_alive {
                    self.phase = Phase::Closing { reset: false };
                    return false;
                }
                self.in_flight.is_none() && self.goes_on_when_quiet()
            }
            Part::Abort { reset } => {
                self.stream = None;
                self.one_done();
                let reset = reset || matches!(self.phase, Phase::Closing { reset: true });
                self.phase = Phase::Closing { reset };
                false
            }
            Part::HandedOver => {
                // Nothing of this connection is the loop's to write or read any more: it
                // closes at once, without lingering (its input is the app's).
                self.stream = None;
                self.one_done();
                self.phase = Phase::Closing { reset: false };
                self.input = Input::Ended;
                false
            }
        }
    }

    /// Something waits for its requests in flight to finish: bytes pipelined behind them,
    /// an answer held, reading stalled, an interim response due, its last request read.
    fn goes_on_when_quiet(&self) -> bool {
        self.has_buffered_input()
            || self.held.is_some()
            || self.stalled()
            || matches!(self.phase, Phase::Last { .. })
            || self.reading.owes_continue()
    }

    /// It has a request out, and the loop must learn at once when the last finishes
    /// (`LoopShared::quiet`; one parked for ring room is said where it is parked).
    pub(crate) fn waits_for_quiet(&self) -> bool {
        self.in_flight.is_some() && self.goes_on_when_quiet()
    }

    /// The final part of a response it will not write (it is closing): one request fewer
    /// in flight.
    pub(crate) fn response_dropped(&mut self) {
        self.one_done();
    }

    /// Requests it has in flight will never be answered (it closes after a response):
    /// their handler should not run the app for them.
    pub(crate) fn has_orphans(&self) -> bool {
        !self.takes_responses() && self.in_flight.is_some()
    }

    /// Its write queue is empty: what now.
    pub(crate) fn after_output(&mut self, now: Instant) -> Written {
        match self.phase {
            Phase::Open | Phase::Last { .. } => {
                if self.clock.idle_pending && self.in_flight.is_none() {
                    // The keep-alive (and next header) timeout counts from here, once the
                    // last response is written, not from when it was queued, and only from
                    // here: bytes that arrive later never restart it.
                    self.clock.idle_pending = false;
                    self.clock.ready_at = now;
                }
                Written::Open {
                    // Parsing waited for the write queue to drain.
                    resume: self.stalled() && self.in_flight() < MAX_PIPELINED_IN_FLIGHT,
                    idle: self.is_idle(),
                }
            }
            Phase::Lingering => Written::Lingering,
            Phase::Closing { reset } => {
                if self.input == Input::Ended || reset {
                    return Written::Close;
                }
                match self.sock.prepare_close() {
                    Ok(true) => {}
                    Ok(false) => return Written::Flushing,
                    Err(_) => return Written::Close,
                }
                // RFC 9112 §9.6: close the sending side first and read until the peer
                // closes, so input it already sent does not turn our close into a reset.
                self.sock.shutdown_write();
                if !self.linger() {
                    // The client already closed (or failed): nothing to linger for.
                    return Written::Close;
                }
                self.phase = Phase::Lingering;
                Written::Lingering
            }
        }
    }

    /// Lingering: reads and drops what the client sends. `false` once it is done (the
    /// client closed, or an error): close it now.
    pub(crate) fn linger(&mut self) -> bool {
        matches!(self.discard_input(), Err(ref e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Reads its socket again even if the last read drained it (a graceful stop's last
    /// look, for a request that crossed its grace).
    pub(crate) fn read_again(&mut self) {
        self.gate = match self.gate {
            Gate::Drained => Gate::Open,
            Gate::Stalled { .. } => Gate::Stalled { drained: false },
            g => g,
        };
    }

    /// A graceful stop is done waiting for it: close it once its queue is written.
    pub(crate) fn close_gracefully(&mut self) {
        self.phase = Phase::Closing { reset: false };
    }

    /// When a graceful stop begun at `started` may close it (idle for `grace`).
    pub(crate) fn drain_due(&self, started: Instant, grace: Duration) -> Instant {
        self.clock.ready_at.max(started) + grace
    }

    /// The sweep, for a connection with bytes queued: a client that reads slowly leaves the
    /// loop's queue waiting for the kernel's buffer to drain far enough to take more (no
    /// writable edge until then), but it does take bytes from that buffer: that counts as
    /// progress for the write timeout too. One `ioctl` per such connection per sweep.
    pub(crate) fn note_kernel_progress(&mut self, now: Instant) {
        if !self.has_output() {
            self.clock.unsent = u64::MAX;
            return;
        }
        if let Some(unsent) = self.sock.unsent_bytes() {
            if unsent < self.clock.unsent {
                self.clock.write_at = now;
            }
            self.clock.unsent = unsent;
        }
    }

    /// The timeout it has run past, if any (docs/security.md).
    pub(crate) fn expired(&self, now: Instant, t: &Timeouts) -> Option<Expiry> {
        let since = |at: Instant| now.saturating_duration_since(at);
        // The write timeout holds in every phase but the lingering close (which has its
        // own deadline): a last response queued whole, then a client that stops reading,
        // must not hold its connection and buffers for ever.
        if self.has_output() && !self.is_lingering() {
            return (since(self.clock.write_at) > t.write).then_some(Expiry::Write);
        }
        if !self.takes_responses() {
            return None;
        }
        if self.in_flight.is_some()
            || self.parked.is_some()
            || matches!(self.phase, Phase::Last { .. })
        {
            return None;
        }
        match self.reading {
            ReadState::Head if self.has_buffered_input() || self.requests == 0 => {
                let from = self.clock.head_at.max(self.clock.ready_at);
                (since(from) > t.header).then_some(Expiry::Request {
                    which: "header",
                    answer: self.has_buffered_input(),
                })
            }
            ReadState::Head => {
                (since(self.clock.ready_at) > t.keep_alive).then_some(Expiry::KeepAlive)
            }
            ReadState::Body { .. } | ReadState::Chunked { .. } => {
                self.body_expired(now, t).then_some(Expiry::Request {
                    which: "body",
                    answer: true,
                })
            }
        }
    }

    /// A body has gone `--body-timeout` without a byte, or arrives slower on average than
    /// `--body-min-rate` allows: the first `--body-timeout` seconds are free, and each
    /// `--body-min-rate` bytes received buy one more second (as Apache's `mod_reqtimeout`).
    fn body_expired(&self, now: Instant, t: &Timeouts) -> bool {
        if now.saturating_duration_since(self.clock.read_at) > t.body {
            return true;
        }
        if t.body_min_rate == 0 {
            return false;
        }
        let earned =
            Duration::try_from_secs_f64(self.clock.body_read as f64 / t.body_min_rate as f64)
                .unwrap_or(Duration::MAX);
        now.saturating_duration_since(self.clock.body_at) > t.body.saturating_add(earned)
    }

    /// Refuses the request being read, now (a timeout): the request read so far is
    /// dropped, the refusal queued, and the connection closes once it is written.
    pub(crate) fn refuse_now(&mut self, r: Refusal, now: Instant, date: &[u8]) {
        log::debug!("answering {} to {:?}: {}", r.status, self.peer, r.why);
        self.reading = ReadState::Head;
        self.queue(r.response(date));
        self.phase = Phase::Closing { reset: false };
        self.clock.write_at = now;
    }

    /// Drops it: what is queued (returning its stream credit) and its own flow control,
    /// which it returns for the loop to mark gone. With a reset when it was closing for a
    /// client that stopped reading (or `reset`).
    ///
    /// A socket lent to a handler is closed all the same (the client sees the same FIN or
    /// reset), but its descriptor number is not freed: `placeholder` is duplicated onto it,
    /// and the descriptor comes back in `Closed::reserved` for the loop to keep until the
    /// lent request's final part returns. A handler that writes to it meanwhile gets an
    /// error, never another connection that was given the same number.
    pub(crate) fn close(
        mut self,
        reset: bool,
        placeholder: std::os::fd::BorrowedFd<'_>,
        returned: &mut impl FnMut(Arc<StreamCredit>, usize),
    ) -> Closed {
        self.drop_queue(returned);
        if reset || matches!(self.phase, Phase::Closing { reset: true }) {
            self.set_reset_on_close();
        }
        let reserved = if self.in_flight.as_ref().is_some_and(|f| f.lent) {
            self.sock.into_reserved(placeholder)
        } else {
            // Dropping the socket closes it, which also removes it from the epoll set.
            None
        };
        Closed {
            stream: self.stream.take(),
            reserved,
        }
    }

    /// Reads once into the free end of the buffer, growing it up to `max_bytes`;
    /// `WouldBlock` passes through.
    pub(crate) fn read_some(&mut self, max_bytes: usize) -> io::Result<Got> {
        if self.rpos == self.rend {
            self.rpos = 0;
            self.rend = 0;
            if let Some(got) = self.read_body_direct() {
                return got;
            }
        }
        if self.rend == self.rbuf.len() {
            if self.rpos > 0 {
                self.rbuf.copy_within(self.rpos..self.rend, 0);
                self.rend -= self.rpos;
                self.rpos = 0;
            } else if self.rbuf.len() < max_bytes {
                let new_len = (self.rbuf.len() * 2).min(max_bytes);
                self.rbuf.resize(new_len, 0);
            } else {
                return Ok(Got::Full);
            }
        }
        let space = self.rbuf.len() - self.rend;
        let n = self.sock.read(&mut self.rbuf[self.rend..])?;
        self.rend += n;
        self.after_read(n, space);
        Ok(if n == 0 { Got::End } else { Got::Bytes(n) })
    }

    /// A large body still to come, and nothing buffered: reads it straight into the
    /// request's own buffer, in large reads. This skips the copy out of the read buffer and
    /// the many small reads its size would impose. `None` when it does not apply.
    fn read_body_direct(&mut self) -> Option<io::Result<Got>> {
        let ReadState::Body { req, need, .. } = &mut self.reading else {
            return None;
        };
        if *need < DIRECT_BODY_READ_MIN_BYTES || !self.sock.reads_direct() {
            return None;
        }
        let want = (*need).min(DIRECT_BODY_READ_MAX_BYTES) as usize;
        req.data.reserve(want);
        let spare = &mut req.data.spare_capacity_mut()[..want];
        let n = match self.sock.read_uninit(spare) {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        // SAFETY: read(2) initialised the first `n` bytes of the spare capacity, which
        // `reserve` made at least `want >= n` long.
        unsafe { req.data.set_len(req.data.len() + n) };
        *need -= n as u64;
        self.after_read(n, want);
        Some(Ok(if n == 0 { Got::End } else { Got::Bytes(n) }))
    }

    /// After a read of `n` bytes into `space`: a short read from a stream socket took
    /// everything queued at that instant, and bytes that arrive later raise a new edge, so
    /// the read that would say `EAGAIN` is skipped. Not once the peer has shut down: its
    /// end of stream is already queued and raises no new edge.
    fn after_read(&mut self, n: usize, space: usize) {
        if matches!(self.gate, Gate::Open | Gate::Drained) {
            let drained = n > 0 && n < space && self.input == Input::Open;
            self.gate = if drained { Gate::Drained } else { Gate::Open };
        }
    }

    /// Discards what the peer sends (lingering close). `Ok(true)` at end of stream.
    fn discard_input(&mut self) -> io::Result<bool> {
        self.rpos = 0;
        self.rend = 0;
        loop {
            match self.sock.read_raw(&mut self.rbuf) {
                Ok(0) => return Ok(true),
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Parses as far as the buffered bytes go: a head, then its body (spooled to a file
    /// past `body_buffer` bytes).
    /// (Public for the fuzz target, which drives it over a socket directly.)
    pub(crate) fn parse_step(
        &mut self,
        limits: &Limits,
        max_body_bytes: u64,
        body_buffer: usize,
    ) -> Step {
        loop {
            match std::mem::replace(&mut self.reading, ReadState::Head) {
                ReadState::Head => {
                    let buf = &self.rbuf[self.rpos..self.rend];
                    if buf.is_empty() {
                        return Step::NeedMore;
                    }
                    let head = match parse::parse_head(buf, limits) {
                        Ok(Some(head)) => head,
                        Ok(None) => return Step::NeedMore,
                        Err(e) => return Step::refuse(e),
                    };
                    match self.start_request(head, max_body_bytes) {
                        Ok(Some(req)) => return Step::Request(req),
                        Ok(None) => continue,
                        Err(step) => return step,
                    }
                }
                ReadState::Body {
                    mut req,
                    need,
                    expect,
                } => {
                    let avail = (self.rend - self.rpos) as u64;
                    let take = avail.min(need) as usize;
                    req.data
                        .extend_from_slice(&self.rbuf[self.rpos..self.rpos + take]);
                    self.rpos += take;
                    let need = need - take as u64;
                    if let Err(step) = self.spill(&mut req, body_buffer, need == 0) {
                        return step;
                    }
                    if need == 0 {
                        return Step::Request(req);
                    }
                    self.reading = ReadState::Body { req, need, expect };
                    return Step::NeedMore;
                }
                ReadState::Chunked {
                    mut req,
                    mut dec,
                    expect,
                } => match dec.decode(&self.rbuf[self.rpos..self.rend], &mut req.data) {
                    Ok((used, done)) => {
                        self.rpos += used;
                        if let Err(step) = self.spill(&mut req, body_buffer, done) {
                            return step;
                        }
                        if done {
                            return Step::Request(req);
                        }
                        self.reading = ReadState::Chunked { req, dec, expect };
                        return Step::NeedMore;
                    }
                    Err(BodyError::TooLarge) => return Step::too_large(),
                    Err(BodyError::BadChunk(why)) => {
                        return Step::refuse(HeadError::BadRequest(why))
                    }
                },
            }
        }
    }

    /// Moves the body read so far out of memory into the request's spool file once it is
    /// over `body_buffer` bytes (then in batches of `SPOOL_BATCH_BYTES`, and the rest when
    /// the body is `done`).
    fn spill(&mut self, req: &mut Request, body_buffer: usize, done: bool) -> Result<(), Step> {
        let head_len = req.head.head_len;
        let in_memory = req.data.len() - head_len;
        let spooling = self.spool.is_some();
        if !spooling && in_memory <= body_buffer {
            return Ok(());
        }
        if spooling && !done && in_memory < SPOOL_BATCH_BYTES {
            return Ok(());
        }
        let result = (|| -> io::Result<()> {
            if self.spool.is_none() {
                self.spool = Some(Spool::create()?);
            }
            if let Some(spool) = self.spool.as_mut() {
                spool.append(&req.data[head_len..])?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            crate::log::error!("cannot spool a request body to a temporary file: {e}");
            self.spool = None;
            return Err(Step::spool_failed());
        }
        req.data.truncate(head_len);
        if done {
            req.spooled = self.spool.take().map(Spool::finish);
        }
        Ok(())
    }

    /// The head is whole: copy it out of the read buffer (the one copy a request's bytes
    /// get) and set up its body. `Ok(None)` when the body is still to be read.
    fn start_request(
        &mut self,
        head: Head,
        max_body_bytes: u64,
    ) -> Result<Option<Box<Request>>, Step> {
        let head_len = head.head_len;
        let body_hint = match head.framing {
            BodyFraming::Length(n) if n > max_body_bytes => return Err(Step::too_large()),
            // Reserve for the declared length only up to a bound: a client that declares a
            // huge body and sends nothing must not make us commit the memory up front.
            BodyFraming::Length(n) => n.min(BODY_RESERVE_MAX_BYTES) as usize,
            _ => 0,
        };
        let mut data = Vec::with_capacity(head_len + body_hint);
        data.extend_from_slice(&self.rbuf[self.rpos..self.rpos + head_len]);
        self.rpos += head_len;
        let framing = head.framing;
        let expect = head.expect_continue;
        // Boxed: the record moves from here through the connection, the ring and the
        // handler's queue, a pointer a move instead of its 200 bytes.
        let req = Box::new(Request {
            conn: self.me,
            data,
            chunked: matches!(framing, BodyFraming::Chunked),
            spooled: None,
            head,
            peer: self.peer,
            queued_at: self.clock.read_at,
            listener: self.listener(),
            secure: matches!(self.sock, Sock::Tls(_)),
            client_dn: match &self.sock {
                Sock::Tls(t) => t.client_dn().cloned(),
                _ => None,
            },
            socket: None,
        });
        // RFC 9110 §10.1.1: a server that receives 100-continue sends the interim response
        // unless it already has the body (or will answer with a final status first).
        let expect = if expect && self.rpos == self.rend {
            Expect::Continue
        } else {
            Expect::Nothing
        };
        match framing {
            BodyFraming::None => return Ok(Some(req)),
            BodyFraming::Length(0) => return Ok(Some(req)),
            BodyFraming::Length(n) => {
                self.reading = ReadState::Body {
                    req,
                    need: n,
                    expect,
                }
            }
            BodyFraming::Chunked => {
                self.reading = ReadState::Chunked {
                    req,
                    dec: ChunkedDecoder::new(max_body_bytes),
                    expect,
                }
            }
        }
        self.clock.body_at = self.clock.read_at;
        self.clock.body_read = (self.rend - self.rpos) as u64;
        Ok(None)
    }

    /// Queues bytes for the socket.
    fn queue(&mut self, data: Vec<u8>) {
        self.queue_response(data, Vec::new(), None, None);
    }

    /// Queues one response message: `data`, then `more` in order, then the file. A
    /// streamed part's `credit` rides on its last buffer, so it returns once all of the
    /// message is written.
    fn queue_response(
        &mut self,
        data: Vec<u8>,
        more: Vec<Buf>,
        file: Option<FileBody>,
        credit: Option<(Arc<StreamCredit>, usize)>,
    ) {
        if !data.is_empty() || (more.is_empty() && (credit.is_some() || file.is_some())) {
            self.wq.push_back(Out {
                data: Buf::Vec(data),
                pos: 0,
                file: None,
                credit: None,
            });
        }
        for buf in more {
            self.wq.push_back(Out {
                data: buf,
                pos: 0,
                file: None,
                credit: None,
            });
        }
        if let Some(last) = self.wq.back_mut() {
            if file.is_some() || credit.is_some() {
                last.file = file;
                last.credit = credit;
            }
        }
    }

    /// Writes the queue with as few syscalls as it can (`writev` of up to
    /// `WRITEV_MAX_SLICES` buffers). `returned` receives the credit of every streamed part
    /// fully written. `Ok(true)` when the queue is empty.
    pub(crate) fn flush(
        &mut self,
        now: Instant,
        returned: &mut impl FnMut(Arc<StreamCredit>, usize),
    ) -> io::Result<bool> {
        loop {
            self.pop_written(returned);
            let Some(front) = self.wq.front() else {
                // Under TLS, the records of what was written may still wait for the socket.
                return self.sock.write_pending();
            };
            let step = if front.pos == front.data.len() {
                // Only the file part is left.
                self.send_file_part(now)
            } else {
                self.write_buffers(now)
            };
            if let Some(done) = step {
                return done;
            }
        }
    }

    /// Drops the written parts from the queue's front, returning their credit.
    fn pop_written(&mut self, returned: &mut impl FnMut(Arc<StreamCredit>, usize)) {
        while self.wq.front().is_some_and(Out::done) {
            if let Some(Out {
                credit: Some((c, n)),
                ..
            }) = self.wq.pop_front()
            {
                returned(c, n);
            }
        }
    }

    /// Sends some of the front part's file. `None` to go on; else what `flush` returns.
    fn send_file_part(&mut self, now: Instant) -> Option<io::Result<bool>> {
        let file = self.wq.front_mut().and_then(|f| f.file.as_mut());
        match self.sock.send_file(file) {
            Ok(0) => Some(Err(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => {
                self.sendfile_bytes += n as u64;
                self.clock.write_at = now;
                None
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(Ok(false)),
            Err(e) => Some(Err(e)),
        }
    }

    /// Writes from the queue's front buffers. `None` to go on; else what `flush` returns.
    fn write_buffers(&mut self, now: Instant) -> Option<io::Result<bool>> {
        match self.write_front() {
            Ok(0) => Some(Err(io::ErrorKind::WriteZero.into())),
            Ok(written) => {
                self.clock.write_at = now;
                self.consume(written);
                None
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(Ok(false)),
            Err(e) => Some(Err(e)),
        }
    }

    /// One `write`, or a `writev` gathering the buffers queued behind the front one (up to
    /// a file part, which must follow its own bytes).
    fn write_front(&mut self) -> io::Result<usize> {
        let Some(front) = self.wq.front() else {
            return Ok(0);
        };
        if self.wq.len() == 1 || front.file.is_some() {
            return self.sock.write(&front.data.as_slice()[front.pos..]);
        }
        let mut slices = [IoSlice::new(&[]); WRITEV_MAX_SLICES];
        let mut n = 0;
        for out in self.wq.iter().take(WRITEV_MAX_SLICES) {
            slices[n] = IoSlice::new(&out.data.as_slice()[out.pos..]);
            n += 1;
            if out.file.is_some() {
                break;
            }
        }
        self.sock.write_vectored(&slices[..n])
    }

    /// `written` bytes of the queue went out, from its front.
    fn consume(&mut self, mut written: usize) {
        for out in self.wq.iter_mut() {
            let step = (out.data.len() - out.pos).min(written);
            out.pos += step;
            written -= step;
            if written == 0 {
                break;
            }
        }
    }

    /// More than this many buffers are waiting for the socket: parse no new request.
    fn write_backed_up(&self) -> bool {
        self.wq.len() > WRITE_QUEUE_MAX_BUFFERS
    }

    /// Sets SO_LINGER to zero so that the close sends a reset.
    fn set_reset_on_close(&self) {
        let fd = self.sock.raw_fd();
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // A failure leaves an ordinary close, which is all we can do then.
        // SAFETY: setsockopt reads one `linger` from the live value, of the size given.
        let _ = unsafe {
            crate::sys::syscall!(setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            ))
        };
    }

    /// Drops whatever remains queued, returning streamed parts' credit.
    fn drop_queue(&mut self, returned: &mut impl FnMut(Arc<StreamCredit>, usize)) {
        for out in self.wq.drain(..) {
            if let Some((c, n)) = out.credit {
                returned(c, n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! `Conn` over a socket pair, driven as the loop drives it: readiness, `poll`, the
    //! handler's responses, `flush` and `after_output`; the client's end reads what it
    //! would see.

    use std::io::{Read, Write};
    use std::time::Instant;

    use super::*;

    struct Pair {
        conn: Conn,
        client: std::os::unix::net::UnixStream,
        limits: Limits,
        date: DateCache,
        now: Instant,
    }

    impl Pair {
        fn new() -> Pair {
            let (client, server) = std::os::unix::net::UnixStream::pair().unwrap();
            server.set_nonblocking(true).unwrap();
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let now = Instant::now();
            let sock = Sock::Unix(mio::net::UnixStream::from_std(server));
            Pair {
                conn: Conn::new(sock, ConnRef { slot: 0, gen: 0 }, Peer::Unix, Some(0), now),
                client,
                limits: Limits::default(),
                date: DateCache::new(),
                now,
            }
        }

        /// The client sends `bytes`; the loop hears a readable edge.
        fn send(&mut self, bytes: &[u8]) {
            self.client.write_all(bytes).unwrap();
            self.conn.on_readiness(true, false);
        }

        /// One `Conn::poll`, as the loop makes it.
        fn poll(&mut self) -> (Next, Effects) {
            let mut ctx = ReadCtx {
                limits: &self.limits,
                max_body_bytes: 1 << 20,
                body_buffer: 1 << 20,
                read_buffer_max: self.limits.max_head + 16 * 1024,
                draining: false,
                now: self.now,
                date: &mut self.date,
            };
            let mut fx = Effects::default();
            let next = self.conn.poll(&mut ctx, &mut fx);
            (next, fx)
        }

        /// Polls for a request, which goes to handler 0.
        fn request(&mut self) -> Box<Request> {
            match self.poll().0 {
                Next::Request(req) => {
                    self.conn.dispatched(0, false);
                    req
                }
                Next::Wait => panic!("no request: it waits"),
                Next::Close => panic!("no request: it closes"),
            }
        }

        /// The handler's whole response to the oldest request out; `true` when reading
        /// must go on from here.
        fn respond(&mut self, body: &str, keep_alive: bool) -> bool {
            let resp = Response {
                conn: self.conn.me(),
                data: format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes(),
                more: Vec::new(),
                file: None,
                part: Part::Last { keep_alive },
                stream: None,
            };
            self.conn.on_response(resp, None, self.now)
        }

        /// Writes what is queued; what comes after, as the loop's `after_output`.
        fn flush(&mut self) -> Written {
            assert!(
                self.conn.flush(self.now, &mut |_, _| {}).unwrap(),
                "all written"
            );
            self.conn.after_output(self.now)
        }

        /// What the client has received so far (until it would wait).
        fn received(&mut self) -> String {
            self.client.set_nonblocking(true).unwrap();
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match self.client.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            self.client.set_nonblocking(false).unwrap();
            String::from_utf8(out).unwrap()
        }

        /// Whether the server has closed its sending side (the client reads its end).
        fn client_sees_end(&mut self) -> bool {
            let mut buf = [0u8; 1];
            matches!(self.client.read(&mut buf), Ok(0))
        }
    }

    fn target(req: &Request) -> &[u8] {
        req.head.target.get(&req.data)
    }

    #[test]
    fn pipelined_requests_are_read_up_to_the_cap_and_reading_resumes_by_itself_below_it() {
        let mut p = Pair::new();
        let n = MAX_PIPELINED_IN_FLIGHT as usize + 2;
        let all: String = (0..n)
            .map(|i| format!("GET /{i} HTTP/1.1\r\nHost: a\r\n\r\n"))
            .collect();
        p.send(all.as_bytes());
        for i in 0..MAX_PIPELINED_IN_FLIGHT as usize {
            assert_eq!(target(&p.request()), format!("/{i}").as_bytes());
        }
        // At the cap: the rest stays buffered, and no edge will come for it.
        assert!(matches!(p.poll().0, Next::Wait));
        assert_eq!(p.conn.in_flight(), MAX_PIPELINED_IN_FLIGHT);
        assert!(
            p.conn.waits_for_quiet(),
            "the loop must hear when one finishes"
        );
        // One response: below the cap again, and the connection says to resume.
        p.respond("0", true);
        match p.flush() {
            Written::Open { resume, .. } => assert!(resume, "reading must resume by itself"),
            _ => panic!("it stays open"),
        }
        assert_eq!(target(&p.request()), format!("/{}", n - 2).as_bytes());
        assert!(matches!(p.poll().0, Next::Wait));
        // The responses went out in the order they came.
        for i in 1..=MAX_PIPELINED_IN_FLIGHT as usize {
            p.respond(&i.to_string(), true);
        }
        p.flush();
        let got = p.received();
        let bodies: Vec<&str> = got
            .split("HTTP/1.1 200 OK\r\nContent-Length: ")
            .skip(1)
            .map(|r| r.split("\r\n\r\n").nth(1).unwrap())
            .collect();
        let want: Vec<String> = (0..=MAX_PIPELINED_IN_FLIGHT as usize)
            .map(|i| i.to_string())
            .collect();
        assert_eq!(bodies, want);
    }

    #[test]
    fn a_100_continue_waits_for_the_responses_before_it() {
        let mut p = Pair::new();
        p.send(
            b"GET /first HTTP/1.1\r\nHost: a\r\n\r\n\
              POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        );
        assert_eq!(target(&p.request()), b"/first");
        // The upload's head is read, its body is not here: no interim answer yet, since
        // the first response is not.
        let (next, fx) = p.poll();
        assert!(matches!(next, Next::Wait));
        assert!(!fx.queued);
        assert_eq!(p.received(), "");
        // The first response is done: reading goes on, and the interim answer follows it.
        assert!(
            p.respond("first", true),
            "the interim answer waits on this response"
        );
        p.flush();
        let (next, fx) = p.poll();
        assert!(matches!(next, Next::Wait));
        assert!(fx.queued);
        p.flush();
        assert_eq!(
            p.received(),
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst\
             HTTP/1.1 100 Continue\r\n\r\n"
        );
        // The body comes on that answer.
        p.send(b"hello");
        let req = p.request();
        assert_eq!(target(&req), b"/upload");
        assert_eq!(req.body(), b"hello");
    }

    #[test]
    fn a_refusal_is_answered_after_the_responses_before_it_then_the_close_lingers() {
        let mut p = Pair::new();
        p.send(b"GET /ok HTTP/1.1\r\nHost: a\r\n\r\nNOT HTTP AT ALL\r\n\r\n");
        assert_eq!(target(&p.request()), b"/ok");
        // The bad request is refused, but its answer waits for the response in flight.
        let (next, fx) = p.poll();
        assert!(matches!(next, Next::Wait));
        assert_eq!(fx.answered, None);
        assert!(p.conn.takes_responses());
        p.respond("ok", true);
        p.flush();
        let (next, fx) = p.poll();
        assert!(matches!(next, Next::Wait));
        assert_eq!(fx.answered, Some(400));
        // Written, then a lingering close: the FIN goes, and what the client still sends
        // is read and dropped until it closes.
        assert!(matches!(p.flush(), Written::Lingering));
        assert!(p.conn.is_lingering());
        let got = p.received();
        assert!(
            got.starts_with("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
            "{got}"
        );
        assert!(got.contains("HTTP/1.1 400 Bad Request\r\n"), "{got}");
        assert!(got.contains("Connection: close\r\n"), "{got}");
        assert!(p.client_sees_end());
        p.client.write_all(b"late bytes").unwrap();
        assert!(
            p.conn.linger(),
            "it lingers while the client is still there"
        );
        p.client.shutdown(std::net::Shutdown::Write).unwrap();
        assert!(!p.conn.linger(), "the client closed: done");
    }

    #[test]
    fn an_end_of_stream_with_a_request_out_is_a_departure_and_its_response_still_goes() {
        let mut p = Pair::new();
        p.send(b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n");
        p.request();
        p.client.shutdown(std::net::Shutdown::Write).unwrap();
        assert!(p.conn.on_readiness(true, true), "the departure is reported");
        assert!(!p.conn.on_readiness(true, true), "once");
        let (next, _) = p.poll();
        assert!(matches!(next, Next::Wait));
        assert!(!p.conn.is_idle());
        // The response is still written, then the connection closes without lingering
        // (the client has nothing more to send).
        p.respond("a", true);
        assert!(matches!(p.poll().0, Next::Wait));
        assert!(matches!(p.flush(), Written::Close));
        assert_eq!(
            p.received(),
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"
        );
    }

    #[test]
    fn a_request_parked_for_ring_room_is_dropped_once_its_client_half_closes() {
        let mut p = Pair::new();
        p.send(b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n");
        let Next::Request(req) = p.poll().0 else {
            panic!("a request");
        };
        p.conn.park(req);
        p.client.shutdown(std::net::Shutdown::Write).unwrap();
        p.conn.on_readiness(true, true);
        assert!(p.conn.take_parked().is_none());
        assert!(matches!(p.poll().0, Next::Close));
    }
}
