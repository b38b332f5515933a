//! m0load: a one-thread, closed-loop HTTP/1.1 load generator for scripts/bench.py.
//!
//! It does what `wrk -t1` does (N keep-alive connections, one request outstanding on each,
//! the next sent as soon as a response is complete) at a lower cost a response, so that a
//! large response measures the server and not the client: wrk reads 8 KiB a `read` and asks
//! `FIONREAD` between reads, 20 system calls for a 64 KiB response; m0load waits on
//! level-triggered epoll and reads up to 256 KiB a wake-up, one `read` and one `write` a
//! response when the response has arrived whole. Bodies are counted, not kept.
//!
//!     m0load -c 256 -d 10 [-H 'Name: value']... [--body-bytes N] http://127.0.0.1:8000/path
//!
//! Prints one JSON object: requests, seconds, rps, bytes read, non_2xx, errors, and
//! latency (send of a request to the end of its response; closed loop, like wrk's).
//! Content-Length bodies and bodiless statuses are read (an interim 1xx is passed over); a
//! chunked response is an error that names itself, so the run fails rather than measuring
//! something else. Connects are non-blocking, so a server slow to accept holds up neither
//! the other connections nor the end of the run; a lost connection is opened again.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

const READ_BUF: usize = 256 * 1024;
const MAX_HEAD: usize = 64 * 1024;

struct Args {
    conns: usize,
    duration: Duration,
    headers: Vec<String>,
    body_bytes: usize,
    addr: SocketAddr,
    host: String,
    path: String,
}

fn usage() -> String {
    "usage: m0load -c CONNECTIONS -d SECONDS [-H 'Name: value']... [--body-bytes N] \
     http://HOST:PORT/PATH"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut conns = None;
    let mut secs = None;
    let mut headers = Vec::new();
    let mut body_bytes = 0;
    let mut url = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "-c" => {
                conns = Some(
                    value("-c")?
                        .parse::<usize>()
                        .map_err(|e| format!("-c: {e}"))?,
                )
            }
            "-d" => {
                secs = Some(
                    value("-d")?
                        .parse::<f64>()
                        .map_err(|e| format!("-d: {e}"))?,
                )
            }
            "-H" => headers.push(value("-H")?),
            "--body-bytes" => {
                body_bytes = value("--body-bytes")?
                    .parse()
                    .map_err(|e| format!("--body-bytes: {e}"))?
            }
            "-h" | "--help" => return Err(usage()),
            _ if a.starts_with('-') => return Err(format!("unknown option {a}\n{}", usage())),
            _ if url.is_none() => url = Some(a),
            _ => return Err(format!("one URL only\n{}", usage())),
        }
    }
    let url = url.ok_or_else(usage)?;
    let rest = url
        .strip_prefix("http://")
        .ok_or(format!("{url}: only http:// URLs"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or(format!("{host}: no address"))?;
    let conns = conns.filter(|&c| c > 0).ok_or("-c: give 1 or more")?;
    let duration = secs
        .filter(|&s| s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or("-d: give a number of seconds above 0")?;
    Ok(Args {
        conns,
        duration,
        headers,
        body_bytes,
        addr,
        host: host.to_string(),
        path: path.to_string(),
    })
}

fn request(a: &Args) -> Vec<u8> {
    let method = if a.body_bytes > 0 { "POST" } else { "GET" };
    let mut r = format!("{method} {} HTTP/1.1\r\nHost: {}\r\n", a.path, a.host);
    for h in &a.headers {
        r.push_str(h);
        r.push_str("\r\n");
    }
    if a.body_bytes > 0 {
        r.push_str(&format!(
            "Content-Type: application/octet-stream\r\nContent-Length: {}\r\n",
            a.body_bytes
        ));
    }
    r.push_str("\r\n");
    let mut r = r.into_bytes();
    r.resize(r.len() + a.body_bytes, b'x');
    r
}

/// Where a connection's current response is.
enum Reading {
    /// The head, whole or in part: the part that has arrived is in `Response::head` unless
    /// it arrived within one read.
    Head,
    /// The body: this many bytes still to come.
    Body(usize),
}

/// A response being read.
struct Response {
    reading: Reading,
    head: Vec<u8>,
    status: u16,
    close_after: bool,
}

impl Response {
    fn new() -> Response {
        Response {
            reading: Reading::Head,
            head: Vec::new(),
            status: 0,
            close_after: false,
        }
    }
}

struct Conn {
    stream: TcpStream,
    /// The connect has not completed yet (it completes when the socket is writable).
    connecting: bool,
    /// EPOLLOUT is in the socket's epoll interest (a request is partly written).
    want_out: bool,
    resp: Response,
    /// Bytes of the request written so far (the whole request once sent).
    written: usize,
    sent_at: Instant,
}

/// Latencies in microseconds, one bucket a microsecond up to a second (the last bucket
/// holds everything longer): recording one costs an increment, nothing grows during a run.
struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum_us: u64,
    max_us: u64,
}

const HISTOGRAM_US: usize = 1_000_000;

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            // Zeroed memory comes from the kernel untouched: only used buckets cost a page.
            buckets: vec![0; HISTOGRAM_US + 1],
            count: 0,
            sum_us: 0,
            max_us: 0,
        }
    }

    fn record(&mut self, us: u64) {
        self.buckets[(us as usize).min(HISTOGRAM_US)] += 1;
        self.count += 1;
        self.sum_us += us;
        self.max_us = self.max_us.max(us);
    }

    /// The latency at percentile `p` (0-100) in ms; 0 when nothing was recorded.
    fn percentile_ms(&self, p: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (us, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return if us == HISTOGRAM_US {
                    self.max_us as f64 / 1000.0
                } else {
                    us as f64 / 1000.0
                };
            }
        }
        self.max_us as f64 / 1000.0
    }

    fn avg_ms(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_us as f64 / self.count as f64 / 1000.0
        }
    }
}

struct Counts {
    requests: u64,
    bytes: u64,
    non_2xx: u64,
    connect: u64,
    read: u64,
    write: u64,
    /// Protocol errors: what the server sent cannot be read as the response asked for.
    protocol: u64,
    latency: Histogram,
    first_protocol_error: Option<String>,
}

struct Epoll(OwnedFd);

impl Epoll {
    fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new fd that
        // nothing else owns, so OwnedFd may close it.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: see above: fd is open and owned by no one else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: i32, fd: i32, events: u32, token: usize) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events,
            u64: token as u64,
        };
        // SAFETY: ev is a valid epoll_event for the call's duration; both fds are open.
        let rc = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn wait(&self, events: &mut [libc::epoll_event], timeout: Duration) -> io::Result<usize> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: events is a writable buffer of events.len() epoll_events, and the kernel
        // writes at most that many.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            };
        }
        Ok(n as usize)
    }
}

/// Starts a non-blocking connect (mio's; it completes when the socket turns writable), so
/// that a server slow to accept never holds up the other connections or the end of the run.
fn start_connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// What reading a response's bytes came to.
enum Fed {
    /// More bytes are needed.
    More,
    /// The response is complete.
    Done,
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Whether a Connection header's comma-separated tokens include `token`.
fn has_token(value: &str, token: &str) -> bool {
    value
        .split(',')
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Reads a response head: the status and how long its body is. A head's bytes need not
/// be UTF-8 (a Latin-1 header value is read as it is).
fn parse_head(head: &[u8], c: &mut Response) -> Result<usize, String> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    c.status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let http10 = version == "HTTP/1.0";
    c.close_after = http10;
    let mut length = None;
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header {line:?}"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(format!(
                "Transfer-Encoding: {value}: m0load reads Content-Length bodies only"
            ));
        } else if name.eq_ignore_ascii_case("connection") {
            c.close_after =
                has_token(value, "close") || (http10 && !has_token(value, "keep-alive"));
        }
    }
    // A 1xx, 204 or 304 response has no body, whatever Content-Length says (RFC 9112 6.3).
    if c.status < 200 || c.status == 204 || c.status == 304 {
        return Ok(0);
    }
    length.ok_or_else(|| format!("status {}: no Content-Length", c.status))
}

/// Takes `data` as the next bytes of the connection's response.
fn feed(c: &mut Response, mut data: &[u8]) -> Result<Fed, String> {
    loop {
        if let Reading::Head = c.reading {
            // Where the head ends in `data`: a terminator straddling the join with bytes
            // already kept starts in their last three.
            let before = c.head.len();
            let keep = before.min(3);
            let mut join = [0u8; 6];
            join[..keep].copy_from_slice(&c.head[before - keep..]);
            let take = data.len().min(3);
            join[keep..keep + take].copy_from_slice(&data[..take]);
            let end = match find_head_end(&join[..keep + take]) {
                Some(e) if before > 0 => Some(e - keep),
                _ => find_head_end(data),
            };
            let Some(end) = end else {
                if before + data.len() > MAX_HEAD {
                    return Err(format!("response head over {MAX_HEAD} bytes"));
                }
                c.head.extend_from_slice(data);
                return Ok(Fed::More);
            };
            let length = if before == 0 {
                parse_head(&data[..end], c)?
            } else {
                let mut head = std::mem::take(&mut c.head);
                head.extend_from_slice(&data[..end]);
                let r = parse_head(&head, c);
                head.clear();
                c.head = head;
                r?
            };
            data = &data[end..];
            if (100..200).contains(&c.status) {
                if c.status == 101 {
                    return Err("101 Switching Protocols: m0load speaks HTTP/1.1 only".into());
                }
                // An interim response (100 Continue, 103 Early Hints): the final one follows.
                continue;
            }
            c.reading = Reading::Body(length);
        }
        let Reading::Body(left) = c.reading else {
            unreachable!("the head was read above")
        };
        if data.len() > left {
            return Err(format!(
                "{} bytes past the end of a response (m0load sends one request at a time)",
                data.len() - left
            ));
        }
        let left = left - data.len();
        c.reading = Reading::Body(left);
        return Ok(if left == 0 { Fed::Done } else { Fed::More });
    }
}

/// Writes what is left of the request; Ok(true) once all of it is written.
fn write_request(c: &mut Conn, req: &[u8]) -> io::Result<bool> {
    while c.written < req.len() {
        match c.stream.write(&req[c.written..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => c.written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

struct Run {
    ep: Epoll,
    conns: Vec<Option<Conn>>,
    req: Vec<u8>,
    addr: SocketAddr,
    counts: Counts,
    /// Connections lost (closed by the server, or broken): opened again after this pass.
    closed: Vec<usize>,
    /// Connections whose connect failed: tried again every `RETRY` (a server that
    /// refuses is not hammered).
    refused: Vec<usize>,
}

const RETRY: Duration = Duration::from_millis(10);

impl Run {
    /// Starts connecting connection `i`; its first request goes once it is connected.
    fn open(&mut self, i: usize) {
        let stream = match start_connect(self.addr) {
            Ok(s) => s,
            Err(_) => {
                self.counts.connect += 1;
                self.refused.push(i);
                return;
            }
        };
        let out = libc::EPOLLOUT as u32;
        if let Err(e) = self.ep.ctl(libc::EPOLL_CTL_ADD, stream.as_raw_fd(), out, i) {
            eprintln!("m0load: epoll_ctl: {e}");
            self.counts.connect += 1;
            self.refused.push(i);
            return;
        }
        self.conns[i] = Some(Conn {
            stream,
            connecting: true,
            want_out: true,
            resp: Response::new(),
            written: 0,
            sent_at: Instant::now(),
        });
    }

    /// Drops connection `i` (closing it takes it out of the epoll set); it is opened again
    /// on a later pass.
    fn lose(&mut self, i: usize) {
        self.conns[i] = None;
        self.closed.push(i);
    }

    /// Writes what is left of connection `i`'s request, with EPOLLOUT in its interest
    /// exactly while some is left.
    fn write(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        let done = match write_request(c, &self.req) {
            Ok(done) => done,
            Err(_) => {
                self.counts.write += 1;
                self.lose(i);
                return;
            }
        };
        if c.want_out != done {
            return;
        }
        c.want_out = !done;
        let ev = if done {
            libc::EPOLLIN as u32
        } else {
            (libc::EPOLLIN | libc::EPOLLOUT) as u32
        };
        if self
            .ep
            .ctl(libc::EPOLL_CTL_MOD, c.stream.as_raw_fd(), ev, i)
            .is_err()
        {
            self.counts.write += 1;
            self.lose(i);
        }
    }

    /// Starts the next request on connection `i`.
    fn send(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        c.written = 0;
        c.resp.reading = Reading::Head;
        c.sent_at = Instant::now();
        self.write(i);
    }

    fn writable(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        if c.connecting {
            if !matches!(c.stream.take_error(), Ok(None)) {
                self.counts.connect += 1;
                self.conns[i] = None;
                self.refused.push(i);
                return;
            }
            c.connecting = false;
            self.send(i);
            return;
        }
        self.write(i);
    }

    fn readable(&mut self, i: usize, buf: &mut [u8]) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        if c.connecting {
            // A refused connect reports EPOLLERR/EPOLLHUP: `writable` counts it.
            return;
        }
        let n = match c.stream.read(buf) {
            Ok(0) => {
                // The server closed the connection with a request outstanding.
                self.counts.read += 1;
                self.lose(i);
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return,
            Err(_) => {
                self.counts.read += 1;
                self.lose(i);
                return;
            }
        };
        self.counts.bytes += n as u64;
        match feed(&mut c.resp, &buf[..n]) {
            Ok(Fed::More) => {}
            Ok(Fed::Done) => {
                let us = c.sent_at.elapsed().as_micros() as u64;
                self.counts.latency.record(us);
                self.counts.requests += 1;
                if !(200..400).contains(&c.resp.status) {
                    self.counts.non_2xx += 1;
                }
                if c.written < self.req.len() {
                    // Answered before the request was all written (a 413 to a large
                    // body): the rest of it must not be taken for the next request.
                    self.counts.write += 1;
                    self.lose(i);
                } else if c.resp.close_after {
                    self.lose(i);
                } else {
                    self.send(i);
                }
            }
            Err(msg) => {
                self.counts.protocol += 1;
                self.counts.first_protocol_error.get_or_insert(msg);
                self.lose(i);
            }
        }
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("m0load: {e}");
            return ExitCode::from(2);
        }
    };
    let ep = match Epoll::new() {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("m0load: epoll_create1: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut run = Run {
        ep,
        conns: (0..args.conns).map(|_| None).collect(),
        req: request(&args),
        addr: args.addr,
        counts: Counts {
            requests: 0,
            bytes: 0,
            non_2xx: 0,
            connect: 0,
            read: 0,
            write: 0,
            protocol: 0,
            latency: Histogram::new(),
            first_protocol_error: None,
        },
        closed: Vec::new(),
        refused: Vec::new(),
    };
    let mut retry_at = Instant::now();
    let start = Instant::now();
    for i in 0..args.conns {
        run.open(i);
    }
    let mut buf = vec![0u8; READ_BUF];
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let end = start + args.duration;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let mut wait = end - now + Duration::from_millis(1);
        if !run.refused.is_empty() {
            wait = wait.min(retry_at.saturating_duration_since(now));
        }
        let n = match run.ep.wait(&mut events, wait) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("m0load: epoll_wait: {e}");
                return ExitCode::FAILURE;
            }
        };
        let (out, fail) = (
            libc::EPOLLOUT as u32,
            (libc::EPOLLHUP | libc::EPOLLERR) as u32,
        );
        for ev in &events[..n] {
            let (flags, i) = (ev.events, ev.u64 as usize);
            let connecting = run.conns[i].as_ref().is_some_and(|c| c.connecting);
            // A connect that failed may report only EPOLLERR/EPOLLHUP: `writable` judges it.
            if flags & out != 0 || (connecting && flags & fail != 0) {
                run.writable(i);
            }
            if flags & (libc::EPOLLIN as u32 | fail) != 0 {
                run.readable(i, &mut buf);
            }
        }
        for i in std::mem::take(&mut run.closed) {
            run.open(i);
        }
        if !run.refused.is_empty() && Instant::now() >= retry_at {
            retry_at = Instant::now() + RETRY;
            for i in std::mem::take(&mut run.refused) {
                run.open(i);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let c = &run.counts;
    // Requests still outstanding after 2 s count as timeouts, as wrk counts them.
    let timeout = run
        .conns
        .iter()
        .flatten()
        .filter(|c| c.sent_at.elapsed() > Duration::from_secs(2))
        .count();
    println!(
        "{{\"requests\": {}, \"seconds\": {:.3}, \"rps\": {:.1}, \"bytes\": {}, \"non_2xx\": {}, \
         \"errors\": {{\"connect\": {}, \"read\": {}, \"write\": {}, \"timeout\": {}, \"protocol\": {}}}, \
         \"first_protocol_error\": {}, \"latency_avg_ms\": {:.3}, \"latency_p50_ms\": {:.3}, \
         \"latency_p99_ms\": {:.3}, \"latency_max_ms\": {:.3}}}",
        c.requests,
        secs,
        c.requests as f64 / secs,
        c.bytes,
        c.non_2xx,
        c.connect,
        c.read,
        c.write,
        timeout,
        c.protocol,
        c.first_protocol_error.as_deref().map_or("null".to_string(), json_str),
        c.latency.avg_ms(),
        c.latency.percentile_ms(50.0),
        c.latency.percentile_ms(99.0),
        c.latency.max_us as f64 / 1000.0,
    );
    if c.requests == 0 || c.protocol > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY_LEN: usize = 1000;

    fn response(extra_header: &str) -> Vec<u8> {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {BODY_LEN}\r\n{extra_header}Date: x\r\n\r\n"
        )
        .into_bytes();
        r.resize(r.len() + BODY_LEN, b'b');
        r
    }

    /// Feeds `bytes` cut at `cuts`; returns what each piece came to.
    fn feed_cut(bytes: &[u8], cuts: &[usize]) -> (Response, Vec<Result<bool, String>>) {
        let mut resp = Response::new();
        let mut out = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain([bytes.len()].iter()) {
            out.push(feed(&mut resp, &bytes[from..to]).map(|f| matches!(f, Fed::Done)));
            from = to;
        }
        (resp, out)
    }

    #[test]
    fn a_response_cut_anywhere_is_done_exactly_at_its_last_byte() {
        let r = response("");
        for a in 1..r.len() {
            // A second cut after the first, anywhere up to the last byte.
            for b in [a + 1, a + 7, r.len() - 1]
                .into_iter()
                .filter(|&b| b < r.len())
            {
                let cuts: Vec<usize> = if b > a { vec![a, b] } else { vec![a] };
                let (resp, out) = feed_cut(&r, &cuts);
                let (last, rest) = out.split_last().unwrap();
                assert_eq!(last, &Ok(true), "cut at {a} and {b}");
                assert!(
                    rest.iter().all(|x| x == &Ok(false)),
                    "cut at {a} and {b}: {out:?}"
                );
                assert_eq!(resp.status, 200);
                assert!(!resp.close_after);
            }
        }
    }

    #[test]
    fn the_next_response_on_a_connection_is_read_after_the_first() {
        let mut resp = Response::new();
        let r = response("");
        assert!(matches!(feed(&mut resp, &r), Ok(Fed::Done)));
        resp.reading = Reading::Head;
        let (head, body) = r.split_at(20);
        assert!(matches!(feed(&mut resp, head), Ok(Fed::More)));
        assert!(matches!(feed(&mut resp, body), Ok(Fed::Done)));
    }

    #[test]
    fn bytes_past_the_end_and_chunked_bodies_are_errors() {
        let mut r = response("");
        r.extend_from_slice(b"HTTP/1.1");
        let (_, out) = feed_cut(&r, &[]);
        assert!(
            out[0]
                .as_ref()
                .unwrap_err()
                .contains("8 bytes past the end"),
            "{out:?}"
        );
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        let (_, out) = feed_cut(chunked, &[]);
        assert!(
            out[0].as_ref().unwrap_err().contains("Transfer-Encoding"),
            "{out:?}"
        );
        let (_, out) = feed_cut(b"HTTP/1.1 200 OK\r\n\r\n", &[]);
        assert!(
            out[0].as_ref().unwrap_err().contains("no Content-Length"),
            "{out:?}"
        );
    }

    #[test]
    fn a_closing_response_and_a_bodiless_status_are_read() {
        for close in ["connection: Close\r\n", "Connection: foo, close\r\n"] {
            let (resp, out) = feed_cut(&response(close), &[]);
            assert_eq!(out, [Ok(true)]);
            assert!(resp.close_after, "{close:?}");
        }
        let (resp, _) = feed_cut(&response("Connection: keep-alive\r\n"), &[]);
        assert!(!resp.close_after);
        let (resp, out) = feed_cut(b"HTTP/1.1 304 Not Modified\r\n\r\n", &[]);
        assert_eq!(out, [Ok(true)]);
        assert_eq!(resp.status, 304);
        // No body after a 204 or 304, whatever Content-Length says.
        let (resp, out) = feed_cut(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", &[]);
        assert_eq!(out, [Ok(true)]);
        assert_eq!(resp.status, 204);
        // An HTTP/1.0 response closes unless it says keep-alive.
        let (resp, _) = feed_cut(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", &[]);
        assert!(resp.close_after);
    }

    #[test]
    fn an_interim_response_is_passed_over_for_the_final_one() {
        let mut bytes = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
        bytes.extend_from_slice(&response(""));
        let (resp, out) = feed_cut(&bytes, &[]);
        assert_eq!(out, [Ok(true)]);
        assert_eq!(resp.status, 200);
        let (resp, out) = feed_cut(&bytes, &[10, 30]);
        assert_eq!(out, [Ok(false), Ok(false), Ok(true)]);
        assert_eq!(resp.status, 200);
    }

    #[test]
    fn a_header_value_that_is_not_utf8_is_read() {
        let mut r = b"HTTP/1.1 200 OK\r\nServer: caf\xe9\r\nContent-Length: 2\r\n\r\nok".to_vec();
        let (_, out) = feed_cut(&r, &[]);
        assert_eq!(out, [Ok(true)]);
        r.truncate(r.len() - 1);
        let (_, out) = feed_cut(&r, &[]);
        assert_eq!(out, [Ok(false)]);
    }

    #[test]
    fn the_histogram_gives_percentiles_and_the_maximum() {
        let mut h = Histogram::new();
        assert_eq!(h.percentile_ms(99.0), 0.0);
        for us in 1..=100 {
            h.record(us);
        }
        h.record(5_000_000);
        assert_eq!(h.percentile_ms(50.0), 0.051);
        assert_eq!(h.percentile_ms(99.0), 0.1);
        assert_eq!(h.percentile_ms(100.0), 5000.0);
        assert_eq!(h.max_us, 5_000_000);
    }
}
