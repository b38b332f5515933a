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
//! Content-Length and bodiless responses are read; a chunked response is an error that
//! names itself, so the run fails rather than measuring something else.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

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
    let secs = secs
        .filter(|&s| s > 0.0)
        .ok_or("-d: give a number of seconds above 0")?;
    Ok(Args {
        conns,
        duration: Duration::from_secs_f64(secs),
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
    /// The head, whole or in part: the part that has arrived is in `Conn::head` unless it
    /// arrived within one read.
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
    resp: Response,
    /// Bytes of the request written so far (the whole request once sent).
    written: usize,
    sent_at: Instant,
}

#[derive(Default)]
struct Counts {
    requests: u64,
    bytes: u64,
    non_2xx: u64,
    connect: u64,
    read: u64,
    write: u64,
    /// Protocol errors: what the server sent cannot be read as the response asked for.
    protocol: u64,
    latencies_us: Vec<u32>,
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

fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    Ok(s)
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

/// Reads a response head: the status and what frames the body.
fn parse_head(head: &[u8], c: &mut Response) -> Result<usize, String> {
    let text = std::str::from_utf8(head).map_err(|_| "response head is not UTF-8".to_string())?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    c.status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    c.close_after = version == "HTTP/1.0";
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
            c.close_after = value.eq_ignore_ascii_case("close")
                || (version == "HTTP/1.0" && !value.eq_ignore_ascii_case("keep-alive"));
        }
    }
    match length {
        Some(n) => Ok(n),
        None if c.status == 204 || c.status == 304 || c.status < 200 => Ok(0),
        None => Err(format!("status {}: no Content-Length", c.status)),
    }
}

/// Takes `data` as the next bytes of the connection's response.
fn feed(c: &mut Response, mut data: &[u8]) -> Result<Fed, String> {
    if let Reading::Head = c.reading {
        let (head_len, rest_from) = if c.head.is_empty() {
            match find_head_end(data) {
                Some(end) => (end, end),
                None => {
                    c.head.extend_from_slice(data);
                    return Ok(Fed::More);
                }
            }
        } else {
            let before = c.head.len();
            let from = before.saturating_sub(3);
            c.head.extend_from_slice(data);
            match find_head_end(&c.head[from..]) {
                Some(end) => (from + end, from + end - before),
                None if c.head.len() > MAX_HEAD => {
                    return Err(format!("response head over {MAX_HEAD} bytes"))
                }
                None => return Ok(Fed::More),
            }
        };
        let length = if c.head.is_empty() {
            parse_head(&data[..head_len], c)?
        } else {
            let head = std::mem::take(&mut c.head);
            let r = parse_head(&head[..head_len], c);
            c.head = head;
            c.head.clear();
            r?
        };
        data = &data[rest_from..];
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
    Ok(if left == 0 { Fed::Done } else { Fed::More })
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
    /// Connections that could not be opened, tried again one a pass.
    closed: Vec<usize>,
}

impl Run {
    /// Opens connection `i` (again) and sends its first request.
    fn open(&mut self, i: usize) {
        let stream = match connect(self.addr) {
            Ok(s) => s,
            Err(_) => {
                self.counts.connect += 1;
                self.conns[i] = None;
                self.closed.push(i);
                return;
            }
        };
        let fd = stream.as_raw_fd();
        self.conns[i] = Some(Conn {
            stream,
            resp: Response::new(),
            written: 0,
            sent_at: Instant::now(),
        });
        if let Err(e) = self
            .ep
            .ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32, i)
        {
            eprintln!("m0load: epoll_ctl: {e}");
            self.counts.connect += 1;
            self.conns[i] = None;
            self.closed.push(i);
            return;
        }
        self.send(i);
    }

    /// Starts the next request on connection `i`.
    fn send(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        c.written = 0;
        c.resp.reading = Reading::Head;
        c.sent_at = Instant::now();
        match write_request(c, &self.req) {
            Ok(true) => {}
            Ok(false) => {
                let fd = c.stream.as_raw_fd();
                let ev = (libc::EPOLLIN | libc::EPOLLOUT) as u32;
                if self.ep.ctl(libc::EPOLL_CTL_MOD, fd, ev, i).is_err() {
                    self.counts.write += 1;
                    self.reopen(i);
                }
            }
            Err(_) => {
                self.counts.write += 1;
                self.reopen(i);
            }
        }
    }

    fn reopen(&mut self, i: usize) {
        // Dropping the stream closes it, which also takes it out of the epoll set.
        self.conns[i] = None;
        self.open(i);
    }

    fn writable(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        match write_request(c, &self.req) {
            Ok(true) => {
                let fd = c.stream.as_raw_fd();
                if self
                    .ep
                    .ctl(libc::EPOLL_CTL_MOD, fd, libc::EPOLLIN as u32, i)
                    .is_err()
                {
                    self.counts.write += 1;
                    self.reopen(i);
                }
            }
            Ok(false) => {}
            Err(_) => {
                self.counts.write += 1;
                self.reopen(i);
            }
        }
    }

    fn readable(&mut self, i: usize, buf: &mut [u8]) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        let n = match c.stream.read(buf) {
            Ok(0) => {
                // The server closed the connection with a request outstanding.
                self.counts.read += 1;
                self.reopen(i);
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return,
            Err(_) => {
                self.counts.read += 1;
                self.reopen(i);
                return;
            }
        };
        self.counts.bytes += n as u64;
        match feed(&mut c.resp, &buf[..n]) {
            Ok(Fed::More) => {}
            Ok(Fed::Done) => {
                let us = c.sent_at.elapsed().as_micros().min(u32::MAX as u128) as u32;
                self.counts.latencies_us.push(us);
                self.counts.requests += 1;
                if !(200..400).contains(&c.resp.status) {
                    self.counts.non_2xx += 1;
                }
                if c.resp.close_after {
                    self.reopen(i);
                } else {
                    self.send(i);
                }
            }
            Err(msg) => {
                self.counts.protocol += 1;
                self.counts.first_protocol_error.get_or_insert(msg);
                self.reopen(i);
            }
        }
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i] as f64 / 1000.0
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
        counts: Counts::default(),
        closed: Vec::new(),
    };
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
        if !run.closed.is_empty() {
            wait = wait.min(Duration::from_millis(10));
        }
        let n = match run.ep.wait(&mut events, wait) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("m0load: epoll_wait: {e}");
                return ExitCode::FAILURE;
            }
        };
        for ev in &events[..n] {
            let (flags, i) = (ev.events, ev.u64 as usize);
            if flags & libc::EPOLLOUT as u32 != 0 {
                run.writable(i);
            }
            if flags & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                run.readable(i, &mut buf);
            }
        }
        if let Some(i) = run.closed.pop() {
            run.open(i);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let c = &mut run.counts;
    // Requests still outstanding after 2 s count as timeouts, as wrk counts them.
    let timeout = run
        .conns
        .iter()
        .flatten()
        .filter(|c| c.sent_at.elapsed() > Duration::from_secs(2))
        .count();
    c.latencies_us.sort_unstable();
    let avg = if c.latencies_us.is_empty() {
        0.0
    } else {
        c.latencies_us.iter().map(|&u| u as f64).sum::<f64>() / c.latencies_us.len() as f64 / 1000.0
    };
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
        avg,
        percentile(&c.latencies_us, 50.0),
        percentile(&c.latencies_us, 99.0),
        percentile(&c.latencies_us, 100.0),
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
        let (resp, out) = feed_cut(&response("connection: Close\r\n"), &[]);
        assert_eq!(out, [Ok(true)]);
        assert!(resp.close_after);
        let (resp, out) = feed_cut(b"HTTP/1.1 304 Not Modified\r\n\r\n", &[]);
        assert_eq!(out, [Ok(true)]);
        assert_eq!(resp.status, 304);
    }
}
