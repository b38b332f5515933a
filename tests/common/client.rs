//! Raw HTTP client.

use super::*;

/// How a response body was delimited on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framing {
    /// No body by definition (HEAD, 1xx, 204, 304).
    NoBody,
    ContentLength(usize),
    Chunked,
    /// Read until the server closed the connection.
    Close,
}

#[derive(Debug, Clone)]
pub struct Response {
    /// e.g. "HTTP/1.1"
    pub version: String,
    pub status: u16,
    pub reason: String,
    /// In the order received, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body with any chunked framing removed.
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
    pub framing: Framing,
    /// Every byte of this response as received.
    pub raw: Vec<u8>,
}

impl Response {
    /// First value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn has_header(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    /// True if a Connection header lists `token` (case-insensitive).
    pub fn connection_has(&self, token: &str) -> bool {
        self.header_all("connection")
            .iter()
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn status_line(&self) -> String {
        format!("{} {} {}", self.version, self.status, self.reason)
    }

    /// The echo app's JSON.
    pub fn echo(&self) -> Echo {
        Echo::parse(self)
    }
}

/// Why a response could not be read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadErrorKind {
    /// The connection closed before the first byte of a response.
    ClosedBeforeResponse,
    /// The connection closed in the middle of the head or the body.
    Truncated,
    /// No progress within IO_TIMEOUT (or RESPONSE_DEADLINE overall).
    Timeout,
    /// The bytes are not an HTTP/1.x response.
    Malformed(String),
}

#[derive(Clone)]
pub struct ReadError {
    pub kind: ReadErrorKind,
    /// The bytes of the (partial) response received before the error.
    pub raw: Vec<u8>,
    /// The head, when it was complete.
    pub head: Option<Box<Response>>,
}

impl std::fmt::Debug for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} after {} bytes: {:?}",
            self.kind,
            self.raw.len(),
            show(&self.raw)
        )
    }
}

/// Bytes shown for a failure message: lossy text, long inputs shortened.
pub fn show(b: &[u8]) -> String {
    const MAX: usize = 1500;
    if b.len() <= MAX {
        String::from_utf8_lossy(b).into_owned()
    } else {
        format!(
            "{} ...[{} bytes]... {}",
            String::from_utf8_lossy(&b[..MAX / 2]),
            b.len() - MAX,
            String::from_utf8_lossy(&b[b.len() - MAX / 2..])
        )
    }
}

enum Fill {
    Data,
    Eof,
    Timeout,
}

/// One client connection with a buffer of received-but-unparsed bytes.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
    /// The server closed (read returned 0 or the connection was reset).
    eof: bool,
    /// Bound on each read (IO_TIMEOUT unless changed).
    io_timeout: Duration,
}

impl Conn {
    pub fn connect(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        Conn::from_stream(stream)
    }

    /// A connection whose receive buffer is `rcvbuf` bytes (set before the connect, so the
    /// window stays small): a client that does not read holds back the server within a few KiB.
    pub fn connect_small(addr: SocketAddr, rcvbuf: i32) -> Conn {
        use std::os::fd::FromRawFd;
        let SocketAddr::V4(v4) = addr else {
            panic!("IPv4 only: {addr}")
        };
        // SAFETY: plain socket calls on a descriptor this function owns until it is handed to
        // the TcpStream; the sockaddr is built in full and outlives the connect call.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0);
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&rcvbuf as *const i32).cast(),
                4,
            );
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            let rc = libc::connect(
                fd,
                (&sin as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
            Conn::from_stream(TcpStream::from_raw_fd(fd))
        }
    }

    /// Wraps a connected stream (made some other way, e.g. from a chosen local address).
    pub fn from_stream(stream: TcpStream) -> Conn {
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            buf: Vec::new(),
            eof: false,
            io_timeout: IO_TIMEOUT,
        }
    }

    pub fn local_port(&self) -> u16 {
        self.stream.local_addr().unwrap().port()
    }

    /// Writes all of `bytes` (panics on error or after IO_TIMEOUT).
    pub fn send(&mut self, bytes: &[u8]) {
        self.try_send(bytes)
            .unwrap_or_else(|e| panic!("send {} bytes: {e}", bytes.len()));
    }

    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Sends `bytes` in pieces cut at `cuts`, pausing between them so the
    /// server sees separate reads.
    pub fn send_split(&mut self, bytes: &[u8], cuts: &[usize], pause: Duration) {
        let mut start = 0;
        for &c in cuts.iter().chain(std::iter::once(&bytes.len())) {
            let c = c.min(bytes.len());
            if c > start {
                self.send(&bytes[start..c]);
                start = c;
                thread::sleep(pause);
            }
        }
    }

    /// Bounds each read at `d` instead of IO_TIMEOUT.
    pub fn set_io_timeout(&mut self, d: Duration) {
        self.io_timeout = d;
    }

    /// Waits up to `timeout` for the server to send something or close;
    /// true if it did (the bytes stay buffered for the next read).
    pub fn wait_readable(&mut self, timeout: Duration) -> bool {
        if !self.buf.is_empty() || self.eof {
            return true;
        }
        let deadline = Instant::now() + timeout;
        !matches!(self.fill(deadline), Fill::Timeout)
    }

    /// Half-closes: the server reads EOF after what was sent.
    pub fn shutdown_write(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// Where the line that starts at `pos` in the buffer ends (the index of its CRLF),
    /// reading more as needed; the end of stream or the deadline as the failure's kind.
    fn line_end(&mut self, pos: usize, deadline: Instant) -> Result<usize, ReadErrorKind> {
        loop {
            if let Some(i) = find(&self.buf[pos..], b"\r\n") {
                return Ok(pos + i);
            }
            match self.fill(deadline) {
                Fill::Data => {}
                Fill::Eof => return Err(ReadErrorKind::Truncated),
                Fill::Timeout => return Err(ReadErrorKind::Timeout),
            }
        }
    }

    fn fill(&mut self, deadline: Instant) -> Fill {
        if self.eof {
            return Fill::Eof;
        }
        let now = Instant::now();
        if now >= deadline {
            return Fill::Timeout;
        }
        let wait = (deadline - now)
            .min(self.io_timeout)
            .max(Duration::from_millis(1));
        self.stream.set_read_timeout(Some(wait)).unwrap();
        let mut tmp = [0u8; 65536];
        loop {
            match self.stream.read(&mut tmp) {
                Ok(0) => {
                    self.eof = true;
                    return Fill::Eof;
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    return Fill::Data;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Fill::Timeout
                }
                Err(_) => {
                    // Reset or another error: the server is gone.
                    self.eof = true;
                    return Fill::Eof;
                }
            }
        }
    }

    /// Reads one response to a request that may have a body (GET, POST, ...).
    pub fn read_response(&mut self) -> Response {
        self.try_read_response()
            .unwrap_or_else(|e| panic!("reading a response: {e:?}"))
    }

    /// Reads one response to a HEAD request (never a body).
    pub fn read_head_response(&mut self) -> Response {
        self.try_read_response_to(true)
            .unwrap_or_else(|e| panic!("reading a HEAD response: {e:?}"))
    }

    pub fn try_read_response(&mut self) -> Result<Response, ReadError> {
        self.try_read_response_to(false)
    }

    /// Reads `n` responses in order (GET-like requests).
    pub fn read_responses(&mut self, n: usize) -> Vec<Response> {
        (0..n)
            .map(|i| {
                self.try_read_response().unwrap_or_else(|e| {
                    panic!("reading pipelined response {} of {n}: {e:?}", i + 1)
                })
            })
            .collect()
    }

    /// Reads one response; `head_request` means the body is absent whatever
    /// the headers say (RFC 9112 section 6.3, rule 1).
    pub fn try_read_response_to(&mut self, head_request: bool) -> Result<Response, ReadError> {
        let deadline = Instant::now() + RESPONSE_DEADLINE;
        // The head.
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            if self.buf.len() > 1 << 20 {
                let raw = std::mem::take(&mut self.buf);
                return Err(ReadError {
                    kind: ReadErrorKind::Malformed("head over 1 MiB".into()),
                    raw,
                    head: None,
                });
            }
            match self.fill(deadline) {
                Fill::Data => {}
                Fill::Eof => {
                    let raw = std::mem::take(&mut self.buf);
                    let kind = if raw.is_empty() {
                        ReadErrorKind::ClosedBeforeResponse
                    } else {
                        ReadErrorKind::Truncated
                    };
                    return Err(ReadError {
                        kind,
                        raw,
                        head: None,
                    });
                }
                Fill::Timeout => {
                    let raw = self.buf.clone();
                    return Err(ReadError {
                        kind: ReadErrorKind::Timeout,
                        raw,
                        head: None,
                    });
                }
            }
        };
        let head_bytes: Vec<u8> = self.buf[..head_end].to_vec();
        let mut resp = match parse_head(&head_bytes[..head_end - 4]) {
            Ok(r) => r,
            Err(msg) => {
                let raw = std::mem::take(&mut self.buf);
                return Err(ReadError {
                    kind: ReadErrorKind::Malformed(msg),
                    raw,
                    head: None,
                });
            }
        };
        self.buf.drain(..head_end);
        let mut raw = head_bytes;

        let no_body = head_request
            || (100..200).contains(&resp.status)
            || resp.status == 204
            || resp.status == 304;
        let te = resp.header_all("transfer-encoding").join(",");
        let cls = resp.header_all("content-length");
        let framing = if no_body {
            Framing::NoBody
        } else if !te.trim().is_empty() {
            let last = te
                .rsplit(',')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if last == "chunked" {
                Framing::Chunked
            } else {
                Framing::Close
            }
        } else if !cls.is_empty() {
            let first = cls[0].trim();
            if cls.iter().any(|v| v.trim() != first)
                || first.is_empty()
                || !first.bytes().all(|b| b.is_ascii_digit())
            {
                let e = ReadError {
                    kind: ReadErrorKind::Malformed(format!("bad Content-Length {cls:?}")),
                    raw: raw.clone(),
                    head: Some(Box::new(resp.clone())),
                };
                return Err(e);
            }
            Framing::ContentLength(first.parse().unwrap())
        } else {
            Framing::Close
        };
        resp.framing = framing.clone();
        let truncated = |raw: Vec<u8>, resp: &Response, kind: ReadErrorKind| ReadError {
            kind,
            raw,
            head: Some(Box::new(resp.clone())),
        };
        match framing {
            Framing::NoBody => {}
            Framing::ContentLength(n) => {
                while self.buf.len() < n {
                    match self.fill(deadline) {
                        Fill::Data => {}
                        Fill::Eof => {
                            raw.append(&mut self.buf);
                            return Err(truncated(raw, &resp, ReadErrorKind::Truncated));
                        }
                        Fill::Timeout => {
                            raw.extend_from_slice(&self.buf);
                            return Err(truncated(raw, &resp, ReadErrorKind::Timeout));
                        }
                    }
                }
                resp.body = self.buf.drain(..n).collect();
                raw.extend_from_slice(&resp.body);
            }
            Framing::Close => loop {
                match self.fill(deadline) {
                    Fill::Data => {}
                    Fill::Eof => {
                        resp.body = std::mem::take(&mut self.buf);
                        raw.extend_from_slice(&resp.body);
                        break;
                    }
                    Fill::Timeout => {
                        raw.extend_from_slice(&self.buf);
                        return Err(truncated(raw, &resp, ReadErrorKind::Timeout));
                    }
                }
            },
            Framing::Chunked => {
                // chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF; last-chunk;
                // trailer-section; CRLF (RFC 9112 section 7.1).
                let mut pos = 0usize;
                loop {
                    let line_end = match self.line_end(pos, deadline) {
                        Ok(end) => end,
                        Err(kind) => {
                            raw.append(&mut self.buf);
                            return Err(truncated(raw, &resp, kind));
                        }
                    };
                    let line = String::from_utf8_lossy(&self.buf[pos..line_end]).into_owned();
                    let size_str = line.split(';').next().unwrap_or("").trim();
                    let size = match usize::from_str_radix(size_str, 16) {
                        Ok(s) if !size_str.is_empty() => s,
                        _ => {
                            raw.extend_from_slice(&self.buf);
                            self.buf.clear();
                            return Err(truncated(
                                raw,
                                &resp,
                                ReadErrorKind::Malformed(format!("bad chunk size line {line:?}")),
                            ));
                        }
                    };
                    pos = line_end + 2;
                    if size == 0 {
                        // Trailer fields, then an empty line.
                        loop {
                            let end = match self.line_end(pos, deadline) {
                                Ok(end) => end,
                                Err(kind) => {
                                    raw.append(&mut self.buf);
                                    return Err(truncated(raw, &resp, kind));
                                }
                            };
                            let l = String::from_utf8_lossy(&self.buf[pos..end]).into_owned();
                            pos = end + 2;
                            if l.is_empty() {
                                break;
                            }
                            if let Some((k, v)) = l.split_once(':') {
                                resp.trailers.push((k.to_string(), v.trim().to_string()));
                            }
                        }
                        raw.extend(self.buf.drain(..pos));
                        break;
                    }
                    while self.buf.len() < pos + size + 2 {
                        match self.fill(deadline) {
                            Fill::Data => {}
                            other => {
                                let avail = self.buf.len().min(pos + size);
                                if avail > pos {
                                    resp.body.extend_from_slice(&self.buf[pos..avail]);
                                }
                                raw.extend_from_slice(&self.buf);
                                self.buf.clear();
                                let kind = if matches!(other, Fill::Eof) {
                                    ReadErrorKind::Truncated
                                } else {
                                    ReadErrorKind::Timeout
                                };
                                let mut e = truncated(raw, &resp, kind);
                                if let Some(h) = e.head.as_mut() {
                                    h.body = resp.body.clone();
                                }
                                return Err(e);
                            }
                        }
                    }
                    resp.body.extend_from_slice(&self.buf[pos..pos + size]);
                    if &self.buf[pos + size..pos + size + 2] != b"\r\n" {
                        raw.extend_from_slice(&self.buf);
                        self.buf.clear();
                        return Err(truncated(
                            raw,
                            &resp,
                            ReadErrorKind::Malformed("chunk data not followed by CRLF".into()),
                        ));
                    }
                    pos += size + 2;
                }
            }
        }
        resp.raw = raw;
        Ok(resp)
    }

    /// Everything the server sends until it closes the connection, and whether
    /// it did close within `timeout`.
    pub fn read_until_close(&mut self, timeout: Duration) -> (Vec<u8>, bool) {
        let deadline = Instant::now() + timeout;
        loop {
            match self.fill(deadline) {
                Fill::Data => {}
                Fill::Eof => return (std::mem::take(&mut self.buf), true),
                Fill::Timeout => return (std::mem::take(&mut self.buf), false),
            }
        }
    }

    /// Asserts the server closes the connection within `timeout` without
    /// sending anything more.
    pub fn expect_closed(&mut self, timeout: Duration) {
        let (rest, closed) = self.read_until_close(timeout);
        assert!(
            rest.is_empty(),
            "expected the connection to close, got more bytes: {:?}",
            show(&rest)
        );
        assert!(
            closed,
            "the server did not close the connection within {timeout:?}"
        );
    }

    /// Asserts nothing arrives and the connection stays open for `quiet`.
    pub fn expect_open_and_quiet(&mut self, quiet: Duration) {
        let (rest, closed) = self.read_until_close(quiet);
        assert!(rest.is_empty(), "unexpected bytes: {:?}", show(&rest));
        assert!(!closed, "the server closed the connection");
    }

    /// Bytes received but not yet consumed.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}

fn parse_head(head: &[u8]) -> Result<Response, String> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("").to_string();
    let code = parts.next().unwrap_or("");
    let reason = parts.next().unwrap_or("").to_string();
    if !(version == "HTTP/1.1" || version == "HTTP/1.0") {
        return Err(format!("bad status line {status_line:?}"));
    }
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad status code in {status_line:?}"));
    }
    let mut headers = Vec::new();
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            return Err(format!("header line without a colon: {l:?}"));
        };
        if k.is_empty() || k.bytes().any(|b| b <= b' ' || b >= 0x7f) {
            return Err(format!("bad header name in {l:?}"));
        }
        headers.push((
            k.to_string(),
            v.trim_matches(|c| c == ' ' || c == '\t').to_string(),
        ));
    }
    Ok(Response {
        version,
        status: code.parse().unwrap(),
        reason,
        headers,
        body: Vec::new(),
        trailers: Vec::new(),
        framing: Framing::NoBody,
        raw: Vec::new(),
    })
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

/// A GET request for `target` with a Host header (HTTP/1.1, keep-alive).
pub fn get(target: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n").into_bytes()
}

/// A request with a Content-Length body.
pub fn post(target: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST {target} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// A request with a chunked body cut into the given chunk sizes.
pub fn post_chunked(target: &str, body: &[u8], chunk_sizes: &[usize]) -> Vec<u8> {
    let mut r =
        format!("POST {target} HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n")
            .into_bytes();
    r.extend_from_slice(&chunked(body, chunk_sizes));
    r
}

/// Chunked framing of `body`, cycling through `chunk_sizes`.
pub fn chunked(body: &[u8], chunk_sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut k = 0;
    while i < body.len() {
        let n = chunk_sizes[k % chunk_sizes.len()]
            .max(1)
            .min(body.len() - i);
        k += 1;
        out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        out.extend_from_slice(&body[i..i + n]);
        out.extend_from_slice(b"\r\n");
        i += n;
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}
