//! One connection's state on the loop thread: its socket, read buffer, request framing and
//! write queue. Pure bookkeeping over bytes; the loop (`event_loop.rs`) drives it.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use crate::http::body::{BodyError, ChunkedDecoder};
use crate::http::limits::Limits;
use crate::http::parse::{self, BodyFraming, Head, HeadError};
use crate::pipeline::msg::{Buf, ConnRef, FileBody, Peer, Request, StreamCredit};
use crate::sys::spool::Spool;

/// First size of a connection's read buffer: a browser's request head fits.
pub const READ_BUFFER_INITIAL_BYTES: usize = 8 * 1024;

/// Most requests of one connection queued to a handler before the loop stops parsing that
/// connection's pipelined bytes (their responses are written in order, batched).
pub const MAX_PIPELINED_IN_FLIGHT: u16 = 16;

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

/// Most iovecs handed to one `writev`.
const WRITEV_MAX_SLICES: usize = 16;

pub enum Sock {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

impl Sock {
    pub fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Sock::Tcp(s) => s,
            Sock::Unix(s) => s,
        }
    }

    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
        }
    }

    pub fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write_vectored(bufs),
            Sock::Unix(s) => s.write_vectored(bufs),
        }
    }

    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }

    /// `read(2)` into memory that is not initialised yet.
    fn read_uninit(&mut self, buf: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
        let n = crate::sys::syscall!(read(
            self.raw_fd(),
            buf.as_mut_ptr().cast::<libc::c_void>(),
            buf.len()
        ))?;
        Ok(n as usize)
    }

    /// One `sendfile(2)` of the rest of `file` (at most `SENDFILE_MAX_BYTES`), advancing it.
    fn send_file(&mut self, file: Option<&mut FileBody>) -> io::Result<usize> {
        let Some(file) = file else { return Ok(0) };
        let mut offset = file.offset as libc::off_t;
        let count = file.len.min(SENDFILE_MAX_BYTES) as usize;
        let n = crate::sys::syscall!(sendfile(
            self.raw_fd(),
            file.fd.as_raw_fd(),
            &mut offset,
            count
        ))? as usize;
        file.offset += n as u64;
        file.len -= n as u64;
        Ok(n)
    }

    fn raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        }
    }

    pub fn shutdown_write(&self) {
        // A peer that is already gone makes this fail; the close that follows is all that
        // matters then.
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Sock::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        };
    }
}

/// Bytes waiting to be written, and whose they are.
pub struct Out {
    pub data: Buf,
    pub pos: usize,
    /// Sent after `data`, with `sendfile(2)`.
    pub file: Option<FileBody>,
    /// A streamed response's middle part counts this many bytes against its credit until
    /// written (on the part's last buffer).
    pub credit: Option<(Arc<StreamCredit>, usize)>,
}

impl Out {
    fn done(&self) -> bool {
        self.pos == self.data.len() && self.file.as_ref().is_none_or(|f| f.len == 0)
    }
}

/// Where the connection is in reading its current request.
pub enum ReadState {
    /// Waiting for (the rest of) a request head.
    Head,
    /// Reading a Content-Length body of which `need` bytes are still to come.
    Body { req: Request, need: u64 },
    /// Decoding a chunked body.
    Chunked { req: Request, dec: ChunkedDecoder },
    /// The server is closing: discard what the peer still sends until it closes or the
    /// deadline passes, so that unread input does not turn our close into a reset that
    /// destroys the response in flight (RFC 9112 §9.6).
    Lingering,
}

/// What one parse step produced.
pub enum Step {
    /// A complete request.
    Request(Request),
    /// The buffer holds no complete request: read more.
    NeedMore,
    /// The request is malformed: answer with this error and close.
    Error(HeadError),
    /// The body went over the size limit: answer 413 and close.
    TooLarge,
    /// The body could not be spooled to a temporary file: answer 503 and close.
    SpoolFailed,
}

pub struct Conn {
    pub sock: Sock,
    pub me: ConnRef,
    pub peer: Peer,
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
    pub state: ReadState,
    pub wq: VecDeque<Out>,
    /// Requests queued to or running on `handler` whose responses are not complete.
    pub in_flight: u16,
    pub handler: usize,
    /// The peer has closed its sending side (read returned 0).
    pub eof: bool,
    /// Nothing more is parsed or dispatched; close once the write queue is empty.
    pub closing: bool,
    /// No more requests are parsed from this connection (a `Connection: close` request, a
    /// parse error, end of input, a graceful stop); it closes when its responses are out.
    pub last_request: bool,
    /// The loop stopped reading without seeing `WouldBlock` (pipelining cap, full buffer):
    /// edge-triggered readiness will not come again, so reading must resume by itself.
    pub read_stalled: bool,
    /// The last read was short, so the socket was drained then; a new edge will come with
    /// new bytes, and reading again now would only cost an `EAGAIN` syscall.
    pub read_drained: bool,
    /// The last readiness event said the peer shut down its side: read to the end.
    pub peer_closed_hint: bool,
    /// Close with a reset (SO_LINGER 0) instead of a lingering close.
    pub reset_on_close: bool,
    /// A parsed request waiting for room in a handler's ring.
    pub ready: Option<Request>,
    /// Bytes sent with `sendfile(2)` since the loop last collected them (for the counters).
    pub sendfile_bytes: u64,
    /// An error to answer once the responses in flight have been written.
    pub pending_error: Option<Step>,
    /// `Expect: 100-continue` arrived while earlier responses were in flight: send the
    /// interim response when they are done, so it cannot overtake them.
    pub continue_pending: bool,
    /// Requests parsed on this connection so far.
    pub requests: u32,
    /// Its client's departure was reported to the handler (`client_disconnected`).
    pub gone_marked: bool,
    /// The flow control of the streamed response now being written to it, if any: told
    /// when the connection closes, so its producer stops.
    pub stream: Option<Arc<StreamCredit>>,
    /// It came to the metrics port: the loop answers its requests itself.
    pub metrics: bool,
    /// Which listener accepted it (its index in the worker's list), for `SERVER_NAME`.
    pub listener: u8,
    /// The current request's body, past `--body-buffer-size`, being spooled.
    spool: Option<Spool>,
    /// When the connection last became ready for a new request head: accepted, or its
    /// last response written. The keep-alive timeout counts from here.
    pub ready_at: Instant,
    /// When the first byte of the head being read arrived (the accept, for a new
    /// connection's first head). The header timeout counts from this or `ready_at`,
    /// whichever is later; the bytes that follow never move it.
    pub head_at: Instant,
    /// The last response in flight is queued: once it is written, the connection is
    /// ready for a new head (`ready_at`).
    pub idle_pending: bool,
    /// When request bytes last arrived (the body timeout).
    pub read_at: Instant,
    /// When the current body started and how many of its bytes have arrived since
    /// (`--body-min-rate`).
    pub body_at: Instant,
    pub body_read: u64,
    /// When the socket last took response bytes, or the queue last became non-empty (the
    /// write timeout).
    pub write_at: Instant,
}

impl Conn {
    pub fn new(sock: Sock, me: ConnRef, peer: Peer, now: Instant) -> Conn {
        Conn {
            sock,
            me,
            peer,
            rbuf: vec![0; READ_BUFFER_INITIAL_BYTES],
            rpos: 0,
            rend: 0,
            state: ReadState::Head,
            wq: VecDeque::new(),
            in_flight: 0,
            handler: 0,
            eof: false,
            closing: false,
            last_request: false,
            read_stalled: false,
            read_drained: false,
            peer_closed_hint: false,
            reset_on_close: false,
            ready: None,
            sendfile_bytes: 0,
            pending_error: None,
            continue_pending: false,
            requests: 0,
            gone_marked: false,
            stream: None,
            metrics: false,
            listener: 0,
            spool: None,
            ready_at: now,
            head_at: now,
            idle_pending: false,
            read_at: now,
            body_at: now,
            body_read: 0,
            write_at: now,
        }
    }

    /// Unparsed bytes are buffered.
    pub fn has_buffered_input(&self) -> bool {
        self.rpos < self.rend
    }

    /// Idle: nothing buffered, nothing in flight, nothing to write (a drain may close it).
    pub fn is_idle(&self) -> bool {
        self.in_flight == 0
            && self.ready.is_none()
            && self.wq.is_empty()
            && matches!(self.state, ReadState::Head)
            && !self.has_buffered_input()
    }

    /// Reads once into the free end of the buffer, growing it up to `max_bytes`.
    /// `Ok(0)` is end of stream; `WouldBlock` passes through; `Ok(usize::MAX)` means the
    /// buffer is full (the caller stops reading until it is consumed).
    pub fn read_some(&mut self, max_bytes: usize) -> io::Result<usize> {
        if self.rpos == self.rend {
            self.rpos = 0;
            self.rend = 0;
            // A large body still to come, and nothing buffered: read it straight into the
            // request's own buffer, in large reads. This skips the copy out of the read
            // buffer and the many small reads its size would impose.
            if let ReadState::Body { req, need } = &mut self.state {
                if *need >= DIRECT_BODY_READ_MIN_BYTES {
                    let want = (*need).min(DIRECT_BODY_READ_MAX_BYTES) as usize;
                    req.data.reserve(want);
                    let spare = &mut req.data.spare_capacity_mut()[..want];
                    let n = self.sock.read_uninit(spare)?;
                    // SAFETY: read(2) initialised the first `n` bytes of the spare capacity,
                    // which `reserve` made at least `want >= n` long.
                    unsafe { req.data.set_len(req.data.len() + n) };
                    *need -= n as u64;
                    self.read_drained = n > 0 && n < want && !self.peer_closed_hint;
                    return Ok(n);
                }
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
                return Ok(usize::MAX);
            }
        }
        let space = self.rbuf.len() - self.rend;
        let n = self.sock.read(&mut self.rbuf[self.rend..])?;
        self.rend += n;
        // A short read from a stream socket took everything queued at that instant; bytes
        // that arrive later raise a new edge. Unless the peer has shut down (its EOF is
        // already queued and raises no new edge), skip the read that would say EAGAIN.
        self.read_drained = n > 0 && n < space && !self.peer_closed_hint;
        Ok(n)
    }

    /// Discards what the peer sends (lingering close). `Ok(true)` at end of stream.
    pub fn discard_input(&mut self) -> io::Result<bool> {
        self.rpos = 0;
        self.rend = 0;
        loop {
            match self.sock.read(&mut self.rbuf) {
                Ok(0) => return Ok(true),
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Parses as far as the buffered bytes go: a head, then its body (spooled to a file
    /// past `body_buffer` bytes).
    pub fn parse_step(&mut self, limits: &Limits, max_body_bytes: u64, body_buffer: usize) -> Step {
        loop {
            match std::mem::replace(&mut self.state, ReadState::Head) {
                ReadState::Head => {
                    let buf = &self.rbuf[self.rpos..self.rend];
                    if buf.is_empty() {
                        return Step::NeedMore;
                    }
                    let head = match parse::parse_head(buf, limits) {
                        Ok(Some(head)) => head,
                        Ok(None) => return Step::NeedMore,
                        Err(e) => return Step::Error(e),
                    };
                    match self.start_request(head, max_body_bytes) {
                        Ok(Some(req)) => return Step::Request(req),
                        Ok(None) => continue,
                        Err(step) => return step,
                    }
                }
                ReadState::Body { mut req, need } => {
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
                    self.state = ReadState::Body { req, need };
                    return Step::NeedMore;
                }
                ReadState::Chunked { mut req, mut dec } => {
                    match dec.decode(&self.rbuf[self.rpos..self.rend], &mut req.data) {
                        Ok((used, done)) => {
                            self.rpos += used;
                            if let Err(step) = self.spill(&mut req, body_buffer, done) {
                                return step;
                            }
                            if done {
                                return Step::Request(req);
                            }
                            self.state = ReadState::Chunked { req, dec };
                            return Step::NeedMore;
                        }
                        Err(BodyError::TooLarge) => return Step::TooLarge,
                        Err(BodyError::BadChunk(why)) => {
                            return Step::Error(HeadError::BadRequest(why))
                        }
                    }
                }
                ReadState::Lingering => {
                    self.state = ReadState::Lingering;
                    return Step::NeedMore;
                }
            }
        }
    }

    /// Moves the body read so far out of memory into the request's spool file once it is
    /// over `body_buffer` bytes (then in batches of `SPOOL_BATCH_BYTES`, and the rest when
    /// the body is `done`).
    #[allow(clippy::result_large_err)] // a Step is moved once per request, never boxed
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
            return Err(Step::SpoolFailed);
        }
        req.data.truncate(head_len);
        if done {
            req.spooled = self.spool.take().map(Spool::finish);
        }
        Ok(())
    }

    /// The head is whole: copy it out of the read buffer (the one copy a request's bytes
    /// get) and set up its body. `Ok(None)` when the body is still to be read.
    #[allow(clippy::result_large_err)] // a Step is moved once per request, never boxed
    fn start_request(&mut self, head: Head, max_body_bytes: u64) -> Result<Option<Request>, Step> {
        let head_len = head.head_len;
        let body_hint = match head.framing {
            BodyFraming::Length(n) if n > max_body_bytes => return Err(Step::TooLarge),
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
        let req = Request {
            conn: self.me,
            data,
            chunked: matches!(framing, BodyFraming::Chunked),
            spooled: None,
            head,
            peer: self.peer,
            queued_at: self.read_at,
            listener: self.listener,
        };
        match framing {
            BodyFraming::None => return Ok(Some(req)),
            BodyFraming::Length(0) => return Ok(Some(req)),
            BodyFraming::Length(n) => self.state = ReadState::Body { req, need: n },
            BodyFraming::Chunked => {
                self.state = ReadState::Chunked {
                    req,
                    dec: ChunkedDecoder::new(max_body_bytes),
                }
            }
        }
        self.body_at = self.read_at;
        self.body_read = (self.rend - self.rpos) as u64;
        // RFC 9110 §10.1.1: a server that receives 100-continue sends the interim response
        // unless it already has the body (or will answer with a final status first).
        if expect && self.rpos == self.rend {
            self.continue_pending = true;
        }
        Ok(None)
    }

    /// Queues bytes for the socket.
    pub fn queue(&mut self, data: Vec<u8>) {
        self.queue_response(data, Vec::new(), None, None);
    }

    /// Queues one response message: `data`, then `more` in order, then the file. A
    /// streamed part's `credit` rides on its last buffer, so it returns once all of the
    /// message is written.
    pub fn queue_response(
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
    pub fn flush(
        &mut self,
        now: Instant,
        returned: &mut impl FnMut(Arc<StreamCredit>, usize),
    ) -> io::Result<bool> {
        loop {
            while let Some(front) = self.wq.front() {
                if !front.done() {
                    break;
                }
                if let Some(Out {
                    credit: Some((c, n)),
                    ..
                }) = self.wq.pop_front()
                {
                    returned(c, n);
                }
            }
            let queued = self.wq.len();
            let Some(front) = self.wq.front_mut() else {
                return Ok(true);
            };
            if front.pos == front.data.len() {
                // Only the file part is left.
                match self.sock.send_file(front.file.as_mut()) {
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) => {
                        self.sendfile_bytes += n as u64;
                        self.write_at = now;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) => return Err(e),
                }
            }
            let res = if queued == 1 || front.file.is_some() {
                self.sock.write(&front.data.as_slice()[front.pos..])
            } else {
                let mut slices = [IoSlice::new(&[]); WRITEV_MAX_SLICES];
                let mut n = 0;
                for out in self.wq.iter().take(WRITEV_MAX_SLICES) {
                    slices[n] = IoSlice::new(&out.data.as_slice()[out.pos..]);
                    n += 1;
                    // A file part must follow its own bytes: gather no further.
                    if out.file.is_some() {
                        break;
                    }
                }
                self.sock.write_vectored(&slices[..n])
            };
            match res {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(mut written) => {
                    self.write_at = now;
                    for out in self.wq.iter_mut() {
                        let left = out.data.len() - out.pos;
                        let step = left.min(written);
                        out.pos += step;
                        written -= step;
                        if written == 0 {
                            break;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    /// More than this many buffers are waiting for the socket: parse no new request.
    pub fn write_backed_up(&self) -> bool {
        self.wq.len() > WRITE_QUEUE_MAX_BUFFERS
    }

    /// Sets SO_LINGER to zero so that the close sends a reset.
    pub fn set_reset_on_close(&self) {
        let fd = self.sock.raw_fd();
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // A failure leaves an ordinary close, which is all we can do then.
        let _ = crate::sys::syscall!(setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        ));
    }

    /// Drops whatever remains queued, returning streamed parts' credit.
    pub fn drop_queue(&mut self, returned: &mut impl FnMut(Arc<StreamCredit>, usize)) {
        for out in self.wq.drain(..) {
            if let Some((c, n)) = out.credit {
                returned(c, n);
            }
        }
    }
}
