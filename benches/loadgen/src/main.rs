//! m0load: a one-thread HTTP/1.1 load generator for scripts/bench.py, closed-loop or at a
//! fixed rate.
//!
//! Closed loop (the default), it does what `wrk -t1` does (N keep-alive connections, one request outstanding on each,
//! the next sent as soon as a response is complete) at a lower cost a response, so that a
//! large response measures the server and not the client: wrk reads 8 KiB a `read` and asks
//! `FIONREAD` between reads, 20 system calls for a 64 KiB response; m0load waits on
//! level-triggered epoll and reads up to 256 KiB a wake-up, one `read` and one `write` a
//! response when the response has arrived whole. Bodies are counted, not kept.
//!
//!     m0load -c 256 -d 10 [--rate R] [-H 'Name: value']... [--body-bytes N] http://127.0.0.1:8000/path
//!
//! Prints one JSON object: requests, seconds, rps, bytes read, non_2xx, errors, and
//! latency (send of a request to the end of its response; closed loop, like wrk's).
//!
//! With `--rate R` it is an open loop instead: request k is due at start + k/R, whatever
//! the server has answered, and goes out on the connection that has been idle longest (one
//! request outstanding a connection, as a browser's keep-alive connection has). A request
//! that finds no connection idle waits for one. Its latency runs from when it was due, not
//! from when it went out, so a stall of the server is charged to every request it held up
//! (no coordinated omission, as wrk2 measures; oha's `--latency-correction` counts from when
//! its timer let a request go, up to a tick of tokio's 1 ms timer after it was due, and lets
//! them go in bursts). This client waits for the next due time with `epoll_pwait2` and a
//! 1 ns timer slack, and sends each request at its own time; how late it sent (for any
//! reason: its own scheduling, or no idle connection) is reported beside the latency, so a
//! run whose client fell behind shows it. Its clock starts once every connection is up (2 s
//! at most), so connecting is no part of it. After the duration no request is sent, and
//! those outstanding get up to 2 s more to be answered (later ones count as timeouts).
//!
//! With several URLs and `--switch S`, the servers take turns: the schedule runs on, and the
//! requests due in turn t go to server t mod n, each server with `-c` connections of its own
//! (idle through the others' turns). Each server's figures are its own, and each turn's
//! p50/p99/max and the host's steal during it (/proc/stat) are kept; the latencies of its
//! turns with under 2 % steal are also pooled. So servers measured together meet the same
//! minutes of a host whose hypervisor takes CPU in bursts.
//!
//! With `--stall-probe` (open loop only) a second thread naps 1 ms at a time and notes each
//! wake-up 150 us or more late: a stretch when this host ran nothing of ours (a hypervisor's
//! steal, another tenant). It runs as a real-time thread where it may (`SCHED_FIFO`), and
//! in either case leaves out of its lateness the time it waited for a CPU while this machine
//! ran its other threads (its schedstat run delay): that wait is the load's, the servers'
//! among it, not the host's. Each target then also reports the percentiles of its requests
//! due outside those stretches (from 2 ms before one was noticed, since it began up to a
//! nap before, to 2 ms plus twice its noticed length after it, while the backlog it left
//! drains), and the stretches themselves, whose lengths are lower bounds. The probe sees a
//! stall that holds up the end of one of its naps on the CPU it runs on: every one over
//! 1.15 ms there, a shorter one in proportion; a stall of the other CPU alone stays in the
//! figures. With neither the real-time class nor the run delay it says so and reports no
//! figures outside stalls. It costs about 16 us of CPU a wake-up on a virtual machine, 1.6 %
//! of a CPU. It shows what part of a tail was the host's, in a run whose servers met
//! different minutes.
//!
//! With `--warmup S` (open loop only) it first sends at the rate for S seconds (with
//! `--switch`, in turns as the run does) on the connections the run then uses, waits for
//! those requests' responses, and starts the schedule again: the figures leave out the
//! warm-up's requests (reported as `warmup_requests`; its errors stay counted), and with
//! them a fresh connection's first requests, which every server answers late while it takes
//! in a burst of new connections (0.5-13 ms for the first 20-30 ms of a run at 256
//! connections here).
//!
//! With `--log FILE` (open loop only) it also writes, once the run is over, one line a
//! request answered: `TARGET DUE_NS LATENCY_US`, the target's index in the URLs given, when
//! the request was due on the CLOCK_MONOTONIC clock in nanoseconds (the clock `perf record
//! -k CLOCK_MONOTONIC` stamps its events with), and its latency. So a script can set each
//! request beside what else the machine ran then (scripts/bench.py `--trace-others`).
//!
//! Content-Length bodies and bodiless statuses are read (an interim 1xx is passed over); a
//! chunked response is an error that names itself, so the run fails rather than measuring
//! something else. Connects are non-blocking, so a server slow to accept holds up neither
//! the other connections nor the end of the run; a lost connection is opened again.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

const READ_BUF: usize = 256 * 1024;
const MAX_HEAD: usize = 64 * 1024;

struct Args {
    conns: usize,
    duration: Duration,
    headers: Vec<String>,
    body_bytes: usize,
    /// The servers, in the order their turns come with `--switch`; one without it.
    urls: Vec<Url>,
    /// Requests a second, for an open-loop run; None for the closed loop.
    rate: Option<f64>,
    /// With several URLs: how long each has the schedule before the next takes it.
    switch: Option<Duration>,
    /// Watch for host stalls and report each target's figures outside them too.
    stall_probe: bool,
    /// Write each answered request's due time and latency here after the run.
    log: Option<std::path::PathBuf>,
    /// Open loop: send at the rate this long first, on the same connections, and forget it.
    warmup: Option<Duration>,
}

/// One server to load: where it is, and what its requests name.
struct Url {
    text: String,
    addr: SocketAddr,
    host: String,
    path: String,
}

fn parse_url(url: &str) -> Result<Url, String> {
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
    Ok(Url {
        text: url.to_string(),
        addr,
        host: host.to_string(),
        path: path.to_string(),
    })
}

fn usage() -> String {
    "usage: m0load -c CONNECTIONS -d SECONDS [--rate REQUESTS_A_SECOND [--switch SECONDS] \
     [--warmup SECONDS] [--stall-probe] [--log FILE]] [-H 'Name: value']... [--body-bytes N] http://HOST:PORT/PATH [URL...]"
        .to_string()
}

/// A number of seconds above 0 as a duration, or an error that names the option.
fn seconds(name: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or(format!("{name}: give a number of seconds above 0"))
}

/// An option's value as a number, or an error that names the option.
fn parsed<T: std::str::FromStr>(name: &str, v: String) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    v.parse().map_err(|e| format!("{name}: {e}"))
}

fn parse_args() -> Result<Args, String> {
    let mut conns: Option<usize> = None;
    let mut secs: Option<f64> = None;
    let mut headers = Vec::new();
    let mut body_bytes = 0;
    let mut rate: Option<f64> = None;
    let mut switch: Option<f64> = None;
    let mut stall_probe = false;
    let mut log = None;
    let mut warmup: Option<f64> = None;
    let mut urls = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "-c" => conns = Some(parsed("-c", value("-c")?)?),
            "-d" => secs = Some(parsed("-d", value("-d")?)?),
            "-H" => headers.push(value("-H")?),
            "--rate" => rate = Some(parsed("--rate", value("--rate")?)?),
            "--switch" => switch = Some(parsed("--switch", value("--switch")?)?),
            "--stall-probe" => stall_probe = true,
            "--log" => log = Some(value("--log")?.into()),
            "--warmup" => warmup = Some(parsed("--warmup", value("--warmup")?)?),
            "--body-bytes" => body_bytes = parsed("--body-bytes", value("--body-bytes")?)?,
            "-h" | "--help" => return Err(usage()),
            _ if a.starts_with('-') => return Err(format!("unknown option {a}\n{}", usage())),
            _ => urls.push(parse_url(&a)?),
        }
    }
    if urls.is_empty() {
        return Err(usage());
    }
    let conns = conns.filter(|&c| c > 0).ok_or("-c: give 1 or more")?;
    let duration = seconds("-d", secs.unwrap_or(0.0))?;
    if let Some(r) = rate {
        if !(r.is_finite() && r > 0.0) {
            return Err("--rate: give a number of requests a second above 0".into());
        }
    }
    if stall_probe && rate.is_none() {
        return Err("--stall-probe needs --rate".into());
    }
    if log.is_some() && rate.is_none() {
        return Err("--log needs --rate".into());
    }
    let warmup = match warmup {
        None => None,
        Some(_) if rate.is_none() => return Err("--warmup needs --rate".into()),
        Some(w) => Some(seconds("--warmup", w)?),
    };
    let switch = match switch {
        None if urls.len() > 1 => {
            return Err("several URLs take turns: give --rate and --switch SECONDS".into())
        }
        None => None,
        Some(_) if rate.is_none() => return Err("--switch needs --rate".into()),
        Some(s) => Some(seconds("--switch", s)?),
    };
    Ok(Args {
        conns,
        duration,
        headers,
        body_bytes,
        urls,
        rate,
        switch,
        stall_probe,
        log,
        warmup,
    })
}

fn request(a: &Args, url: &Url) -> Vec<u8> {
    let method = if a.body_bytes > 0 { "POST" } else { "GET" };
    let mut r = format!("{method} {} HTTP/1.1\r\nHost: {}\r\n", url.path, url.host);
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
    /// A request is out on this connection and its response not yet all read.
    outstanding: bool,
    /// The connection waits in `Run::idle` for the next due request (open loop).
    idle: bool,
    /// When the current request was due: when it was sent in the closed loop, its place
    /// in the schedule in the open loop. Its latency is counted from here.
    due_at: Instant,
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
    /// How late each request was sent after it was due (open loop).
    send_lag: Histogram,
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

    /// Waits for readiness for up to `timeout`, to the nanosecond (`epoll_pwait2`, Linux
    /// 5.11): the open loop's next request is due microseconds away, not milliseconds.
    fn wait(&self, events: &mut [libc::epoll_event], timeout: Duration) -> io::Result<usize> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: events is a writable buffer of events.len() epoll_events, and the kernel
        // writes at most that many; ts is a valid timespec for the call's duration; a null
        // sigmask leaves the thread's signal mask as it is.
        let n = unsafe {
            libc::epoll_pwait2(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                &ts,
                std::ptr::null(),
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

/// One server's share of a run: its requests, connections and figures.
struct Target {
    url: String,
    addr: SocketAddr,
    req: Vec<u8>,
    counts: Counts,
    /// Open loop: its connected connections with nothing outstanding, longest idle first.
    /// An entry whose connection has since been lost or used is passed over.
    idle: VecDeque<usize>,
    /// Latencies (µs) of the requests of its current turn (`--switch`).
    turn: Vec<u32>,
    /// Its turns so far, closed.
    turns: Vec<Turn>,
    /// The latencies of its quiet turns (under `QUIET_STEAL` steal), pooled.
    quiet: Histogram,
    /// With `--stall-probe` or `--log`: each request's due time and latency (us), to be
    /// judged against the host's stalls, or written out, once the run is over.
    log: Option<Vec<(Instant, u32)>>,
    /// `--warmup`: the requests it answered in the warm-up, which its figures leave out.
    warmup_requests: u64,
}

/// A turn is quiet when the hypervisor took under this share of all CPUs' time during it:
/// its latencies are also pooled with the target's other quiet turns'.
const QUIET_STEAL: f64 = 0.02;

/// One turn of a target (`--switch`): the figures of the requests due in it.
struct Turn {
    /// Which turn of the whole run (0, 1, ...): target `index % targets`.
    index: u64,
    requests: usize,
    p50_us: u32,
    p99_us: u32,
    max_us: u32,
    /// The share of all CPUs' time the hypervisor gave to others during the turn
    /// (/proc/stat's steal), where it could be read.
    steal: Option<f64>,
}

impl Target {
    /// Closes the current turn, whose index is `index`.
    fn close_turn(&mut self, index: u64, steal: Option<f64>) {
        let mut lat = std::mem::take(&mut self.turn);
        if steal.is_some_and(|s| s < QUIET_STEAL) {
            for &us in &lat {
                self.quiet.record(u64::from(us));
            }
        }
        self.turns.push(Turn {
            index,
            requests: lat.len(),
            p50_us: percentile_of(&mut lat, 50.0),
            p99_us: percentile_of(&mut lat, 99.0),
            max_us: lat.iter().copied().max().unwrap_or(0),
            steal,
        });
        lat.clear();
        self.turn = lat;
    }
}

/// The latency at percentile `p` (0-100) of `lat` (reordered); 0 for none.
fn percentile_of(lat: &mut [u32], p: f64) -> u32 {
    if lat.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * lat.len() as f64).ceil().max(1.0) as usize - 1;
    *lat.select_nth_unstable(rank).1
}

/// The probe's nap, and how late a wake-up from it must be to count as a host stall.
/// Each wake-up costs a virtual machine about 16 us: 1 ms naps take 1.6 % of a CPU.
const PROBE_NAP: Duration = Duration::from_millis(1);
const PROBE_LATE: Duration = Duration::from_micros(150);

/// What `--stall-probe`'s thread saw.
struct Stalls {
    /// Each stretch the host ran nothing of ours, as (start, end): from when the nap it
    /// held up was due to end (it may have begun up to a nap before) to the wake-up.
    spans: Vec<(Instant, Instant)>,
    /// The probe ran as a real-time thread (`SCHED_FIFO`), ahead of every other thread of
    /// this machine.
    realtime: bool,
    /// The time it waited for a CPU could be read (schedstat) and was taken off its
    /// lateness. With neither this nor `realtime` its spans are mostly this machine's own
    /// contention, and are not used.
    run_delay: bool,
    /// The time it waited for a CPU, in all: what was taken off.
    waited: Duration,
}

/// The time the calling thread has spent runnable but waiting for a CPU, from its
/// schedstat (`/proc/thread-self/schedstat`, opened by that thread).
fn run_delay(schedstat: &std::fs::File) -> Option<Duration> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 96];
    let n = schedstat.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let ns: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// `--stall-probe`'s thread: naps `PROBE_NAP` at a time until `stop`, and notes each
/// stretch it woke `PROBE_LATE` or more late for, not counting the time it waited for a
/// CPU this machine gave to another of its threads. A wake-up late for that is this
/// machine's load, the servers' own work among it, and not the host's: as a plain thread
/// the probe woke 150 us to 2 ms late some 60 times in 10 s beside a server at 27 000
/// requests a second, nearly every time for its run queue; as a real-time one, once.
/// `want_realtime` false keeps it in the normal class (the tests' use).
fn probe_stalls(stop: &AtomicBool, want_realtime: bool) -> Stalls {
    // Timed waits end when they are due, not up to 50 us later (this thread's own slack).
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and no pointers.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: pid 0 names the calling thread; `param` is a valid sched_param that outlives
    // the call. Without the privilege it fails and changes nothing.
    let realtime =
        want_realtime && unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0;
    let schedstat = std::fs::File::open("/proc/thread-self/schedstat")
        .ok()
        .filter(|f| run_delay(f).is_some());
    let delay = || schedstat.as_ref().and_then(run_delay).unwrap_or_default();
    let mut spans = Vec::new();
    let first = delay();
    // Relaxed: `stop` carries no data; the caller's join() publishes what was seen.
    while !stop.load(Ordering::Relaxed) {
        let waited = delay();
        let due = Instant::now() + PROBE_NAP;
        std::thread::sleep(PROBE_NAP);
        let woke = Instant::now();
        let late = woke
            .saturating_duration_since(due)
            .saturating_sub(delay().saturating_sub(waited));
        if late >= PROBE_LATE {
            spans.push((woke - late, woke));
        }
    }
    Stalls {
        spans,
        realtime,
        run_delay: schedstat.is_some(),
        waited: delay().saturating_sub(first),
    }
}

/// The requests in `log` due outside every stall's window: from 2 ms
/// before its noticed start (it began up to a nap earlier, and requests then in flight met
/// it) to 2 ms plus twice its noticed length after it ends (the backlog it left drains at
/// the spare capacity, about half the rate at a load at half a server's maximum).
fn outside_stalls(log: &[(Instant, u32)], stalls: &[(Instant, Instant)]) -> Vec<(Instant, u32)> {
    let mut windows: Vec<(Instant, Instant)> = stalls
        .iter()
        .map(|&(s, e)| {
            let from = s.checked_sub(Duration::from_millis(2)).unwrap_or(s);
            (from, e + Duration::from_millis(2) + 2 * (e - s))
        })
        .collect();
    windows.sort_unstable();
    let mut merged: Vec<(Instant, Instant)> = Vec::with_capacity(windows.len());
    for (s, e) in windows {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    log.iter()
        .filter(|&&(due, _)| {
            // The last window starting at or before `due` is the only one that can hold it.
            let i = merged.partition_point(|w| w.0 <= due);
            i == 0 || merged[i - 1].1 < due
        })
        .copied()
        .collect()
}

/// (steal, total) jiffies of all CPUs, from /proc/stat's first line.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest and guest_nice are in user).
    let steal = *v.get(7)?;
    Some((steal, v.iter().take(8).sum()))
}

struct Run {
    ep: Epoll,
    /// Every target's connections, `per_target` each, target by target.
    conns: Vec<Option<Conn>>,
    per_target: usize,
    targets: Vec<Target>,
    /// Connections lost (closed by the server, or broken): opened again after this pass.
    closed: Vec<usize>,
    /// Connections whose connect failed: tried again every `RETRY` (a server that
    /// refuses is not hammered).
    refused: Vec<usize>,
    /// The open loop's schedule; None in the closed loop.
    schedule: Option<Schedule>,
    /// Open loop: the duration is over, and no request is sent any more.
    stopped: bool,
    /// The host's steal share in each turn of the run, by turn (`--switch`).
    turn_steal: Vec<Option<f64>>,
    /// `--stall-probe`: the host's stalls, once the probe has been stopped.
    stalls: Option<Stalls>,
}

const RETRY: Duration = Duration::from_millis(10);

/// How long requests still outstanding when an open-loop run ends may take to be answered.
const GRACE: Duration = Duration::from_secs(2);

/// How long an open loop waits for its connections to be up before its clock starts.
const CONNECT_WAIT: Duration = Duration::from_secs(2);

/// An open loop's schedule: request k is due at `start + k / rate`, and goes to the target
/// whose turn it is then.
struct Schedule {
    start: Instant,
    rate: f64,
    /// The next request to send.
    next: u64,
    /// How many requests the run has: those due before its end.
    total: u64,
    /// How long a turn is (`--switch`); None: one target has the whole run.
    switch: Option<Duration>,
    /// The turn the last request sent fell in, and /proc/stat's jiffies when it began.
    turn: u64,
    turn_jiffies: Option<(u64, u64)>,
}

/// How many requests a schedule at `rate` has in `duration`: request k is due at k / rate
/// seconds, and those due before the end are sent.
fn requests_due(rate: f64, duration: Duration) -> u64 {
    (duration.as_secs_f64() * rate).ceil() as u64
}

impl Schedule {
    fn due(&self, k: u64) -> Instant {
        self.start + Duration::from_secs_f64(k as f64 / self.rate)
    }

    /// The turn a request due at `due` fell in (`due` is `self.due(k)` for its k).
    fn turn_at(&self, due: Instant) -> u64 {
        let k = (due.saturating_duration_since(self.start).as_secs_f64() * self.rate).round();
        self.turn_of(k as u64)
    }

    /// The turn request k falls in.
    fn turn_of(&self, k: u64) -> u64 {
        match self.switch {
            Some(sw) => (k as f64 / self.rate / sw.as_secs_f64()) as u64,
            None => 0,
        }
    }

    /// The steal share since the current turn began, and the jiffies now.
    fn steal_since_turn(&self) -> (Option<f64>, Option<(u64, u64)>) {
        let now = cpu_jiffies();
        let share = match (self.turn_jiffies, now) {
            (Some((s0, t0)), Some((s1, t1))) if t1 > t0 => {
                Some((s1.saturating_sub(s0)) as f64 / (t1 - t0) as f64)
            }
            _ => None,
        };
        (share, now)
    }
}

impl Run {
    /// Opens again the connections that closed, and those refused once `retry_at` has
    /// passed (then due again `RETRY` later).
    fn reopen(&mut self, retry_at: &mut Instant) {
        for i in std::mem::take(&mut self.closed) {
            self.open(i);
        }
        if !self.refused.is_empty() && Instant::now() >= *retry_at {
            *retry_at = Instant::now() + RETRY;
            for i in std::mem::take(&mut self.refused) {
                self.open(i);
            }
        }
    }

    fn target_of(&self, i: usize) -> usize {
        i / self.per_target
    }

    fn counts(&mut self, i: usize) -> &mut Counts {
        let t = self.target_of(i);
        &mut self.targets[t].counts
    }

    /// Starts connecting connection `i`; its first request goes once it is connected.
    fn open(&mut self, i: usize) {
        let stream = match start_connect(self.targets[self.target_of(i)].addr) {
            Ok(s) => s,
            Err(_) => {
                self.counts(i).connect += 1;
                self.refused.push(i);
                return;
            }
        };
        let out = libc::EPOLLOUT as u32;
        if let Err(e) = self.ep.ctl(libc::EPOLL_CTL_ADD, stream.as_raw_fd(), out, i) {
            eprintln!("m0load: epoll_ctl: {e}");
            self.counts(i).connect += 1;
            self.refused.push(i);
            return;
        }
        self.conns[i] = Some(Conn {
            stream,
            connecting: true,
            want_out: true,
            resp: Response::new(),
            written: 0,
            outstanding: false,
            idle: false,
            due_at: Instant::now(),
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
        let t = self.target_of(i);
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        let done = match write_request(c, &self.targets[t].req) {
            Ok(done) => done,
            Err(_) => {
                self.counts(i).write += 1;
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
            self.counts(i).write += 1;
            self.lose(i);
        }
    }

    /// Starts the next request on connection `i`; its latency counts from `due`.
    fn send(&mut self, i: usize, due: Instant) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        c.written = 0;
        c.resp.reading = Reading::Head;
        c.outstanding = true;
        c.due_at = due;
        self.write(i);
    }

    /// Connection `i` has nothing outstanding: the closed loop sends its next request at
    /// once, the open loop queues it for the next due one.
    fn ready(&mut self, i: usize) {
        if self.schedule.is_none() {
            self.send(i, Instant::now());
            return;
        }
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        if c.want_out {
            // Just connected: EPOLLOUT leaves the interest until a request is written,
            // or the level-triggered wait would report the idle socket every pass.
            c.want_out = false;
            let fd = c.stream.as_raw_fd();
            if self
                .ep
                .ctl(libc::EPOLL_CTL_MOD, fd, libc::EPOLLIN as u32, i)
                .is_err()
            {
                self.counts(i).connect += 1;
                self.lose(i);
                return;
            }
        }
        if let Some(c) = self.conns[i].as_mut() {
            c.idle = true;
            let t = self.target_of(i);
            self.targets[t].idle.push_back(i);
        }
    }

    /// Open loop: sends every request due by `now` that finds an idle connection of the
    /// target whose turn it is.
    fn dispatch(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        loop {
            let Some(s) = self.schedule.as_ref() else {
                return;
            };
            let due = s.due(s.next);
            if due > now || s.next >= s.total {
                return;
            }
            let turn = s.turn_of(s.next);
            if turn != s.turn {
                self.begin_turn(turn);
            }
            let t = (turn % self.targets.len() as u64) as usize;
            let Some(i) = self.pop_idle(t) else {
                return;
            };
            let lag = now.saturating_duration_since(due).as_micros() as u64;
            self.targets[t].counts.send_lag.record(lag);
            if let Some(s) = self.schedule.as_mut() {
                s.next += 1;
            }
            self.send(i, due);
        }
    }

    /// The schedule has moved into turn `turn`: the turn just ended is charged the host's
    /// steal since it began, and the target whose turn it now is closes its last one (its
    /// requests have had every other target's turn to be answered).
    fn begin_turn(&mut self, turn: u64) {
        let n = self.targets.len() as u64;
        let Some(s) = self.schedule.as_mut() else {
            return;
        };
        let (steal, now) = s.steal_since_turn();
        let ended = s.turn;
        s.turn = turn;
        s.turn_jiffies = now;
        self.set_turn_steal(ended, steal);
        // Turns the client slept through (over a whole turn late) close with no steal.
        for u in ended + 1..=turn {
            if u >= n {
                let index = u - n;
                let steal = self.turn_steal.get(index as usize).copied().flatten();
                self.targets[(u % n) as usize].close_turn(index, steal);
            }
        }
    }

    fn set_turn_steal(&mut self, turn: u64, steal: Option<f64>) {
        let at = turn as usize;
        if self.turn_steal.len() <= at {
            self.turn_steal.resize(at + 1, None);
        }
        self.turn_steal[at] = steal;
    }

    /// `--warmup`: the schedule starts again for a run of `duration` on the same
    /// connections (the warm-up's drive has waited for its last responses), and what the
    /// warm-up measured is forgotten but for its errors, which stay counted.
    fn restart(&mut self, duration: Duration) {
        self.stopped = false;
        self.turn_steal.clear();
        for t in &mut self.targets {
            t.warmup_requests = t.counts.requests;
            t.counts.requests = 0;
            t.counts.bytes = 0;
            t.counts.send_lag = Histogram::new();
            t.counts.latency = Histogram::new();
            t.turn.clear();
            t.turns.clear();
            t.quiet = Histogram::new();
            if let Some(log) = t.log.as_mut() {
                log.clear();
            }
        }
        if let Some(s) = self.schedule.as_mut() {
            s.next = 0;
            s.turn = 0;
            s.total = requests_due(s.rate, duration);
        }
    }

    /// The run has ended: the last turn is charged its steal, and every target closes the
    /// turn it has open.
    fn finish_turns(&mut self) {
        let n = self.targets.len() as u64;
        let Some(s) = self.schedule.as_ref().filter(|s| s.switch.is_some()) else {
            return;
        };
        let (last, steal) = (s.turn, s.steal_since_turn().0);
        self.set_turn_steal(last, steal);
        for u in last.saturating_sub(n - 1)..=last {
            let steal = self.turn_steal.get(u as usize).copied().flatten();
            self.targets[(u % n) as usize].close_turn(u, steal);
        }
    }

    /// The connection of target `t` idle longest, taken out of its queue.
    fn pop_idle(&mut self, t: usize) -> Option<usize> {
        while let Some(i) = self.targets[t].idle.pop_front() {
            if let Some(c) = self.conns[i].as_mut().filter(|c| c.idle) {
                c.idle = false;
                return Some(i);
            }
        }
        None
    }

    /// When the loop must wake even if no socket is ready: the next due request's time
    /// when a connection of its target is idle to take it (open loop), else `end`.
    fn wake_at(&mut self, end: Instant) -> Instant {
        let Some(s) = self.schedule.as_ref() else {
            return end;
        };
        let (due, t) = (
            s.due(s.next),
            (s.turn_of(s.next) % self.targets.len() as u64) as usize,
        );
        if self.stopped || !self.has_idle(t) {
            return end;
        }
        due.min(end)
    }

    /// Whether a connection of target `t` is idle; entries passed over are dropped.
    fn has_idle(&mut self, t: usize) -> bool {
        while let Some(&i) = self.targets[t].idle.front() {
            if self.conns[i].as_ref().is_some_and(|c| c.idle) {
                return true;
            }
            self.targets[t].idle.pop_front();
        }
        false
    }

    /// Requests sent and not yet answered.
    fn outstanding(&self) -> usize {
        self.conns
            .iter()
            .flatten()
            .filter(|c| c.outstanding)
            .count()
    }

    fn writable(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        if c.connecting {
            if !matches!(c.stream.take_error(), Ok(None)) {
                self.conns[i] = None;
                self.counts(i).connect += 1;
                self.refused.push(i);
                return;
            }
            c.connecting = false;
            self.ready(i);
            return;
        }
        if c.outstanding {
            self.write(i);
        }
    }

    fn readable(&mut self, i: usize, buf: &mut [u8]) {
        let t = self.target_of(i);
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        if c.connecting {
            // A refused connect reports EPOLLERR/EPOLLHUP: `writable` counts it.
            return;
        }
        let target = &mut self.targets[t];
        let n = match c.stream.read(buf) {
            Ok(0) => {
                // The server closed the connection: an error with a request outstanding; an
                // idle connection (open loop) is opened again.
                if c.outstanding {
                    target.counts.read += 1;
                }
                self.lose(i);
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return,
            Err(_) => {
                target.counts.read += 1;
                self.lose(i);
                return;
            }
        };
        target.counts.bytes += n as u64;
        if !c.outstanding {
            target.counts.protocol += 1;
            target
                .counts
                .first_protocol_error
                .get_or_insert(format!("{n} bytes with no request outstanding"));
            self.lose(i);
            return;
        }
        match feed(&mut c.resp, &buf[..n]) {
            Ok(Fed::More) => {}
            Ok(Fed::Done) => {
                c.outstanding = false;
                let us = c.due_at.elapsed().as_micros() as u64;
                target.counts.latency.record(us);
                target.counts.requests += 1;
                if let Some(log) = target.log.as_mut() {
                    log.push((c.due_at, us.min(u32::MAX as u64) as u32));
                }
                if self.schedule.as_ref().is_some_and(|s| s.switch.is_some()) {
                    target.turn.push(us.min(u32::MAX as u64) as u32);
                }
                if !(200..400).contains(&c.resp.status) {
                    target.counts.non_2xx += 1;
                }
                if c.written < target.req.len() {
                    // Answered before the request was all written (a 413 to a large
                    // body): the rest of it must not be taken for the next request.
                    target.counts.write += 1;
                    self.lose(i);
                } else if c.resp.close_after {
                    self.lose(i);
                } else {
                    self.ready(i);
                }
            }
            Err(msg) => {
                target.counts.protocol += 1;
                target.counts.first_protocol_error.get_or_insert(msg);
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

/// Drives the run to its end: for `duration`, then (open loop) until nothing is
/// outstanding or `GRACE` has passed. Returns the seconds requests were sent for.
fn drive(run: &mut Run, duration: Duration) -> io::Result<f64> {
    let mut retry_at = Instant::now();
    for i in 0..run.conns.len() {
        // After a warm-up (`Run::restart`) its connections are kept.
        if run.conns[i].is_none() {
            run.open(i);
        }
    }
    let mut buf = vec![0u8; READ_BUF];
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let (out, fail) = (
        libc::EPOLLOUT as u32,
        (libc::EPOLLHUP | libc::EPOLLERR) as u32,
    );
    if run.schedule.is_some() {
        // The open loop's clock starts once its connections are up (or CONNECT_WAIT has
        // passed): a burst of connects and accepts is no part of any server's first turn.
        let deadline = Instant::now() + CONNECT_WAIT;
        loop {
            let now = Instant::now();
            let connecting = run.conns.iter().flatten().any(|c| c.connecting);
            if now >= deadline || (!connecting && run.refused.is_empty()) {
                break;
            }
            let n = run.ep.wait(&mut events, (deadline - now).min(RETRY))?;
            for ev in &events[..n] {
                let (flags, i) = (ev.events, ev.u64 as usize);
                if run.conns[i].as_ref().is_some_and(|c| c.connecting) && flags & (out | fail) != 0
                {
                    run.writable(i);
                }
            }
            run.reopen(&mut retry_at);
        }
        if let Some(s) = run.schedule.as_mut() {
            s.start = Instant::now();
            s.turn_jiffies = cpu_jiffies();
        }
    }
    let start = run.schedule.as_ref().map_or_else(Instant::now, |s| s.start);
    let end = start + duration;
    loop {
        let now = Instant::now();
        if now >= end && !run.stopped {
            // What fell due before the end and found a connection goes out late rather than
            // never.
            run.dispatch(now);
            run.stopped = true;
            if run.schedule.is_none() {
                break;
            }
        }
        if run.stopped && (run.outstanding() == 0 || now >= end + GRACE) {
            break;
        }
        let mut wake = if run.stopped {
            end + GRACE
        } else {
            run.wake_at(end)
        };
        if !run.refused.is_empty() && !run.stopped {
            wake = wake.min(retry_at);
        }
        let n = run
            .ep
            .wait(&mut events, wake.saturating_duration_since(now))?;
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
        if !run.stopped {
            run.reopen(&mut retry_at);
        }
        run.dispatch(Instant::now());
    }
    run.finish_turns();
    Ok(if run.schedule.is_some() {
        duration.as_secs_f64()
    } else {
        start.elapsed().as_secs_f64()
    })
}

fn new_run(args: &Args, ep: Epoll) -> Run {
    let targets = args
        .urls
        .iter()
        .map(|u| Target {
            url: u.text.clone(),
            addr: u.addr,
            req: request(args, u),
            counts: Counts {
                requests: 0,
                send_lag: Histogram::new(),
                bytes: 0,
                non_2xx: 0,
                connect: 0,
                read: 0,
                write: 0,
                protocol: 0,
                latency: Histogram::new(),
                first_protocol_error: None,
            },
            idle: VecDeque::new(),
            turn: Vec::new(),
            turns: Vec::new(),
            quiet: Histogram::new(),
            // Room for the most any target's turns hold, so that no log grows mid-run.
            log: (args.stall_probe || args.log.is_some()).then(|| {
                let secs = args.duration.as_secs_f64();
                let share = match args.switch {
                    Some(sw) => {
                        let turns = (secs / sw.as_secs_f64()).ceil();
                        (turns / args.urls.len() as f64).ceil() / turns
                    }
                    None => 1.0,
                };
                let due = args.rate.unwrap_or(0.0) * secs * share;
                Vec::with_capacity((due * 1.02) as usize + 1024)
            }),
            warmup_requests: 0,
        })
        .collect::<Vec<_>>();
    Run {
        ep,
        conns: (0..args.conns * targets.len()).map(|_| None).collect(),
        per_target: args.conns,
        targets,
        closed: Vec::new(),
        refused: Vec::new(),
        schedule: args.rate.map(|rate| Schedule {
            start: Instant::now(),
            rate,
            next: 0,
            total: requests_due(rate, args.duration),
            switch: args.switch,
            turn: 0,
            turn_jiffies: cpu_jiffies(),
        }),
        stopped: false,
        turn_steal: Vec::new(),
        stalls: None,
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("m0load: {e}");
            return ExitCode::from(2);
        }
    };
    if args.rate.is_some() {
        // Timed waits end when they are due, not up to 50 us later (the default slack):
        // the open loop sends each request at its own time.
        // SAFETY: PR_SET_TIMERSLACK takes an integer argument and no pointers.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    }
    let ep = match Epoll::new() {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("m0load: epoll_create1: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut run = new_run(&args, ep);
    let stop = Arc::new(AtomicBool::new(false));
    let probe = args.stall_probe.then(|| {
        let stop = stop.clone();
        std::thread::spawn(move || probe_stalls(&stop, true))
    });
    let driven = match args.warmup {
        Some(w) => {
            if let Some(s) = run.schedule.as_mut() {
                s.total = requests_due(s.rate, w);
            }
            drive(&mut run, w).and_then(|_| {
                run.restart(args.duration);
                drive(&mut run, args.duration)
            })
        }
        None => drive(&mut run, args.duration),
    };
    if let Some(probe) = probe {
        stop.store(true, Ordering::Relaxed);
        match probe.join() {
            Ok(s) if s.realtime || s.run_delay => run.stalls = Some(s),
            Ok(_) => eprintln!(
                "m0load: --stall-probe could neither run real-time nor read its run delay \
                 (/proc/thread-self/schedstat): its late wake-ups would be this machine's own \
                 load, so no figures outside stalls are reported"
            ),
            Err(_) => eprintln!("m0load: the stall probe failed: no figures outside stalls"),
        }
    }
    let secs = match driven {
        Ok(secs) => secs,
        Err(e) => {
            eprintln!("m0load: epoll_pwait2: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", report(&run, secs));
    if let Some(path) = &args.log {
        let written = std::fs::File::create(path)
            .map(io::BufWriter::new)
            .and_then(|mut f| write_log(&run, &mut f).and_then(|()| f.flush()));
        if let Err(e) = written {
            eprintln!("m0load: --log {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    let failed = run
        .targets
        .iter()
        .any(|t| t.counts.requests == 0 || t.counts.protocol > 0);
    if failed {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// `--log`: each target's answered requests, one line each, `TARGET DUE_NS LATENCY_US`,
/// in the order they were answered, the due time on the CLOCK_MONOTONIC clock.
fn write_log(run: &Run, out: &mut impl Write) -> io::Result<()> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // `Instant` reads CLOCK_MONOTONIC on Linux: one reading of each places every due time.
    let now = Instant::now();
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mono_now = ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128;
    for (i, t) in run.targets.iter().enumerate() {
        for &(due, us) in t.log.as_deref().unwrap_or(&[]) {
            let due_ns = mono_now - now.saturating_duration_since(due).as_nanos() as i128;
            writeln!(out, "{i} {due_ns} {us}")?;
        }
    }
    Ok(())
}

/// The run's figures as one JSON object: one target's, or with several (`--switch`),
/// `{"rate", "switch", "targets": [...]}` with each target's in the order given.
fn report(run: &Run, secs: f64) -> String {
    let n = run.targets.len();
    // Unsent requests were due when the run ended: they fall in the last turn.
    let unsent = run
        .schedule
        .as_ref()
        .map(|s| (s.total - s.next, (s.turn_of(s.next) % n as u64) as usize));
    let per: Vec<String> = (0..n)
        .map(|t| {
            let conns = &run.conns[t * run.per_target..(t + 1) * run.per_target];
            // With several targets each had the schedule for its turns only.
            let active = secs / n as f64;
            let sent = run.targets[t].counts.send_lag.count;
            let unsent = unsent.map(|(u, at)| if at == t { u } else { 0 });
            target_report(
                &run.targets[t],
                conns,
                active,
                sent,
                unsent,
                run.schedule.as_ref(),
                run.stalls.as_ref(),
            )
        })
        .collect();
    match (&run.schedule, per.as_slice()) {
        (Some(s), _) if s.switch.is_some() => format!(
            "{{\"rate\": {}, \"switch\": {}, \"targets\": [{}]}}",
            s.rate,
            s.switch.map_or(0.0, |d| d.as_secs_f64()),
            per.join(", ")
        ),
        (_, [one]) => one.clone(),
        _ => unreachable!("several targets need --switch"),
    }
}

fn target_report(
    t: &Target,
    conns: &[Option<Conn>],
    secs: f64,
    sent: u64,
    unsent: Option<u64>,
    schedule: Option<&Schedule>,
    stalls: Option<&Stalls>,
) -> String {
    let c = &t.counts;
    // Requests outstanding for over 2 s at the end count as timeouts, as wrk counts them.
    let timeout = conns
        .iter()
        .flatten()
        .filter(|c| c.outstanding && c.due_at.elapsed() > GRACE)
        .count();
    let mut out = format!(
        "{{\"url\": {}, \"requests\": {}, \"seconds\": {:.3}, \"rps\": {:.1}, \"bytes\": {}, \
         \"non_2xx\": {}, \"errors\": {{\"connect\": {}, \"read\": {}, \"write\": {}, \
         \"timeout\": {}, \"protocol\": {}}}, \"first_protocol_error\": {}, \
         \"latency_avg_ms\": {:.3}, \"latency_p50_ms\": {:.3}, \"latency_p90_ms\": {:.3}, \
         \"latency_p99_ms\": {:.3}, \"latency_p999_ms\": {:.3}, \"latency_max_ms\": {:.3}",
        json_str(&t.url),
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
        c.first_protocol_error
            .as_deref()
            .map_or("null".to_string(), json_str),
        c.latency.avg_ms(),
        c.latency.percentile_ms(50.0),
        c.latency.percentile_ms(90.0),
        c.latency.percentile_ms(99.0),
        c.latency.percentile_ms(99.9),
        c.latency.max_us as f64 / 1000.0,
    );
    if let Some(s) = schedule {
        out.push_str(&format!(
            ", \"rate\": {}, \"warmup_requests\": {}, \"sent\": {}, \"unsent\": {}, \
             \"send_lag_p50_ms\": {:.3}, \"send_lag_p99_ms\": {:.3}, \"send_lag_max_ms\": {:.3}",
            s.rate,
            t.warmup_requests,
            sent,
            unsent.unwrap_or(0),
            c.send_lag.percentile_ms(50.0),
            c.send_lag.percentile_ms(99.0),
            c.send_lag.max_us as f64 / 1000.0,
        ));
    }
    // With the probe: the requests due outside the host's stalls, by turn too.
    let kept = stalls
        .zip(t.log.as_deref())
        .map(|(st, log)| outside_stalls(log, &st.spans));
    let mut kept_by_turn: std::collections::HashMap<u64, Vec<u32>> = Default::default();
    if let (Some(kept), Some(s)) = (&kept, schedule.filter(|s| s.switch.is_some())) {
        for &(due, us) in kept {
            kept_by_turn.entry(s.turn_at(due)).or_default().push(us);
        }
    }
    if let (Some(stalls), Some(log), Some(kept)) = (stalls, t.log.as_deref(), &kept) {
        let mut kept: Vec<u32> = kept.iter().map(|&(_, us)| us).collect();
        let ms = |us: u32| us as f64 / 1000.0;
        let lengths = stalls.spans.iter().map(|&(s, e)| e - s);
        out.push_str(&format!(
            ", \"outside_stalls\": {{\"requests\": {}, \"excluded\": {:.4}, \
             \"p50_ms\": {:.3}, \"p90_ms\": {:.3}, \"p99_ms\": {:.3}, \"p999_ms\": {:.3}}}, \
             \"host_stalls\": {{\"count\": {}, \"total_ms\": {:.3}, \"max_ms\": {:.3}, \
             \"realtime\": {}, \"run_delay\": {}, \"probe_waited_ms\": {:.3}}}",
            kept.len(),
            1.0 - kept.len() as f64 / log.len().max(1) as f64,
            ms(percentile_of(&mut kept, 50.0)),
            ms(percentile_of(&mut kept, 90.0)),
            ms(percentile_of(&mut kept, 99.0)),
            ms(percentile_of(&mut kept, 99.9)),
            stalls.spans.len(),
            lengths.clone().sum::<Duration>().as_secs_f64() * 1000.0,
            lengths.max().unwrap_or_default().as_secs_f64() * 1000.0,
            stalls.realtime,
            stalls.run_delay,
            stalls.waited.as_secs_f64() * 1000.0,
        ));
    }
    if schedule.is_some_and(|s| s.switch.is_some()) {
        let turns: Vec<String> = t
            .turns
            .iter()
            .map(|u| {
                // The turn's p99 over its requests due outside the host's stalls (null
                // without the probe, or when every request of the turn was left out).
                let outside = kept_by_turn
                    .get_mut(&u.index)
                    .map_or("null".to_string(), |lat| {
                        format!("{:.3}", percentile_of(lat, 99.0) as f64 / 1000.0)
                    });
                format!(
                    "{{\"turn\": {}, \"requests\": {}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \
                     \"max_ms\": {:.3}, \"steal\": {}, \"p99_outside_ms\": {outside}}}",
                    u.index,
                    u.requests,
                    u.p50_us as f64 / 1000.0,
                    u.p99_us as f64 / 1000.0,
                    u.max_us as f64 / 1000.0,
                    u.steal.map_or("null".to_string(), |x| format!("{x:.4}")),
                )
            })
            .collect();
        out.push_str(&format!(
            ", \"quiet\": {{\"turns\": {}, \"requests\": {}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \
             \"p999_ms\": {:.3}, \"max_ms\": {:.3}}}, \"turns\": [{}]",
            t.turns
                .iter()
                .filter(|u| u.steal.is_some_and(|s| s < QUIET_STEAL))
                .count(),
            t.quiet.count,
            t.quiet.percentile_ms(50.0),
            t.quiet.percentile_ms(99.0),
            t.quiet.percentile_ms(99.9),
            t.quiet.max_us as f64 / 1000.0,
            turns.join(", ")
        ));
    }
    out.push('}');
    out
}

#[cfg(test)]
mod test_server;

#[cfg(test)]
mod tests {
    use super::test_server::stalling_server;
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

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

    fn args(addr: SocketAddr, conns: usize, rate: Option<f64>) -> Args {
        Args {
            conns,
            duration: Duration::from_secs(1),
            headers: Vec::new(),
            body_bytes: 0,
            urls: vec![parse_url(&format!("http://{addr}/")).unwrap()],
            rate,
            switch: None,
            stall_probe: false,
            log: None,
            warmup: None,
        }
    }

    fn counts(run: &Run) -> &Counts {
        &run.targets[0].counts
    }

    /// The open loop charges a stall to every request it held up: at 1000 requests a
    /// second over one connection, a 300 ms stall delays the ~300 requests due during it
    /// (their latencies spread over 0-300 ms), so the p90 is over 100 ms; measured from
    /// when each request went out (coordinated omission), one request would be slow and
    /// the p90 well under 1 ms. The closed loop, run the same way, shows that.
    #[test]
    fn the_open_loop_counts_latency_from_when_a_request_was_due() {
        let stall = Duration::from_millis(300);
        let a = args(stalling_server(100, stall).0, 1, Some(1000.0));
        let mut run = new_run(&a, Epoll::new().unwrap());
        let secs = drive(&mut run, a.duration).unwrap();
        let c = counts(&run);
        assert_eq!(secs, 1.0);
        assert_eq!(c.protocol + c.connect + c.read + c.write, 0);
        let sent = run.schedule.as_ref().unwrap().next;
        assert_eq!(c.requests, sent, "every request sent was answered");
        assert!(
            (990..=1001).contains(&sent),
            "{sent} requests sent at 1000/s for 1 s"
        );
        let p90 = c.latency.percentile_ms(90.0);
        assert!(p90 > 100.0, "p90 {p90} ms");
        assert!(c.latency.max_us >= 290_000, "max {} us", c.latency.max_us);
        // The requests held up went out late: the client itself kept to its schedule.
        assert!(
            c.send_lag.max_us >= 250_000,
            "send lag max {} us",
            c.send_lag.max_us
        );
        assert!(c.send_lag.percentile_ms(50.0) < 1.0);
        let out = report(&run, secs);
        assert!(out.contains("\"unsent\": 0"), "{out}");

        let a = args(stalling_server(100, stall).0, 1, None);
        let mut run = new_run(&a, Epoll::new().unwrap());
        drive(&mut run, a.duration).unwrap();
        let p90 = counts(&run).latency.percentile_ms(90.0);
        assert!(p90 < 100.0, "closed loop p90 {p90} ms");
        assert!(counts(&run).latency.max_us >= 290_000);
    }

    /// Many connections, most of them idle at any moment: each scheduled request is sent
    /// once, on one connection, and nothing else is (the server reads exactly as many
    /// requests as were sent, and no connection gets a second response it did not ask for).
    #[test]
    fn the_open_loop_sends_each_request_once_over_idle_connections() {
        let (addr, served) = stalling_server(usize::MAX, Duration::ZERO);
        let a = args(addr, 64, Some(3000.0));
        let mut run = new_run(&a, Epoll::new().unwrap());
        drive(&mut run, a.duration).unwrap();
        let c = counts(&run);
        let sent = run.schedule.as_ref().unwrap().next;
        assert_eq!(c.protocol, 0, "{:?}", c.first_protocol_error);
        assert_eq!(c.connect + c.read + c.write, 0);
        assert!(
            (2990..=3001).contains(&sent),
            "{sent} sent at 3000/s for 1 s"
        );
        assert_eq!(c.requests, sent);
        assert_eq!(served.load(Ordering::Relaxed) as u64, sent);
        assert!(c.latency.percentile_ms(50.0) < 5.0);
    }

    /// Two servers taking turns of 200 ms at 1000 requests a second for 1.2 s, `conns`
    /// connections each: the second holds its 250th request 100 ms, in its second turn.
    /// The arguments, and each server's count of requests served.
    fn two_servers_in_turns(conns: usize) -> (Args, [Arc<AtomicUsize>; 2]) {
        let (a_addr, a_served) = stalling_server(usize::MAX, Duration::ZERO);
        let (b_addr, b_served) = stalling_server(250, Duration::from_millis(100));
        let mut a = args(a_addr, conns, Some(1000.0));
        a.urls
            .push(parse_url(&format!("http://{b_addr}/")).unwrap());
        a.switch = Some(Duration::from_millis(200));
        a.duration = Duration::from_millis(1200);
        (a, [a_served, b_served])
    }

    /// Two servers in turns: each gets three turns, the requests of a turn all go to its
    /// server, and a stall of the second server shows in that server's turn only.
    #[test]
    fn targets_take_turns_and_each_turn_has_its_own_figures() {
        let (a, [a_served, b_served]) = two_servers_in_turns(8);
        let a_addr = a.urls[0].addr;
        let mut run = new_run(&a, Epoll::new().unwrap());
        let secs = drive(&mut run, a.duration).unwrap();
        for (t, served) in run.targets.iter().zip([&a_served, &b_served]) {
            let c = &t.counts;
            assert_eq!(c.protocol + c.connect + c.read + c.write, 0);
            assert_eq!(
                c.requests,
                served.load(Ordering::Relaxed) as u64,
                "{}",
                t.url
            );
            assert!(
                (590..=610).contains(&c.requests),
                "{}: {}",
                t.url,
                c.requests
            );
            let turns: Vec<u64> = t.turns.iter().map(|u| u.index).collect();
            let requests: usize = t.turns.iter().map(|u| u.requests).sum();
            assert_eq!(requests as u64, c.requests);
            assert!(t.turns.iter().all(|u| (190..=210).contains(&u.requests)));
            if t.url.contains(&a_addr.to_string()) {
                assert_eq!(turns, [0, 2, 4]);
                assert!(t.turns.iter().all(|u| u.max_us < 50_000));
            } else {
                assert_eq!(turns, [1, 3, 5]);
                let max: Vec<u32> = t.turns.iter().map(|u| u.max_us).collect();
                assert!(
                    max[1] >= 90_000 && max[0] < 50_000 && max[2] < 50_000,
                    "{max:?}"
                );
            }
        }
        for t in &run.targets {
            // The quiet turns' latencies are pooled, and only theirs.
            let quiet = t
                .turns
                .iter()
                .filter(|u| u.steal.is_some_and(|s| s < QUIET_STEAL));
            assert_eq!(t.quiet.count, quiet.map(|u| u.requests as u64).sum::<u64>());
        }
        let out = report(&run, secs);
        assert!(out.starts_with("{\"rate\": 1000, \"switch\": 0.2, \"targets\": [{\"url\""));
        assert!(
            out.contains("\"turns\": [{\"turn\": 1, \"requests\": "),
            "{out}"
        );
    }

    /// A request is left out when it was due from 2 ms before a stall to 2 ms plus twice
    /// the stall's length after it, and only then; overlapping windows join, and a window
    /// inside another does not cut the outer one short.
    #[test]
    fn requests_due_in_a_stalls_window_are_left_out() {
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        // One request every 100 us for 20 ms, each with its own latency (its index).
        let log: Vec<(Instant, u32)> = (0..200).map(|k| (at(k * 100), k as u32)).collect();
        // 5.0-5.5 ms: left out 3.0-8.5 ms. 12.0-12.1 and 14.0-14.2: 10.0-14.3 and 12.0-16.6.
        let stalls = [
            (at(14_000), at(14_200)),
            (at(5_000), at(5_500)),
            (at(12_000), at(12_100)),
        ];
        let lat =
            |kept: Vec<(Instant, u32)>| kept.into_iter().map(|(_, us)| us).collect::<Vec<u32>>();
        let kept = lat(outside_stalls(&log, &stalls));
        let expect: Vec<u32> = (0..200)
            .filter(|k| !(30..=85).contains(k) && !(100..=166).contains(k))
            .collect();
        assert_eq!(kept, expect);
        // A stall at the very start (nothing to subtract from) and none at all.
        assert_eq!(
            outside_stalls(&log, &[(t0, at(100))]).first().map(|e| e.1),
            Some(24)
        );
        assert_eq!(outside_stalls(&log, &[]).len(), 200);
        // 1.0-3.0 ms leaves out up to 9.0 ms; 2.5-2.6 ms, inside it, only up to 4.8 ms.
        let nested = lat(outside_stalls(
            &log,
            &[(at(1_000), at(3_000)), (at(2_500), at(2_600))],
        ));
        assert_eq!(nested, (91..200).collect::<Vec<u32>>());
    }

    /// The probe's wait for a CPU that this machine's own threads hold is no host stall:
    /// a probe in the normal class at nice 19, on one CPU with two threads spinning there,
    /// waits for that CPU for much of a second and notes (nearly) nothing.
    #[test]
    fn a_wait_for_a_cpu_busy_with_this_machines_threads_is_no_stall() {
        // SAFETY: sched_getcpu takes no arguments.
        let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
        let pin = move || {
            // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes within it; pid
            // 0 names the calling thread, and the size is the set's own.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
        };
        let stop = AtomicBool::new(false);
        let stalls = std::thread::scope(|sc| {
            for _ in 0..2 {
                sc.spawn(|| {
                    pin();
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                });
            }
            let probe = sc.spawn(|| {
                pin();
                // SAFETY: who 0 names the calling thread (PRIO_PROCESS takes a thread id on
                // Linux); raising one's own nice value needs no privilege.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
                probe_stalls(&stop, false)
            });
            std::thread::sleep(Duration::from_secs(1));
            stop.store(true, Ordering::Relaxed);
            probe.join().unwrap()
        });
        assert!(!stalls.realtime && stalls.run_delay);
        // The spinners held the CPU it wanted (about 630 ms of the second here); without
        // the run delay taken off, some 110 late wake-ups came to as much.
        assert!(
            stalls.waited > Duration::from_millis(200),
            "waited {:?}",
            stalls.waited
        );
        let total: Duration = stalls.spans.iter().map(|&(s, e)| e - s).sum();
        assert!(
            stalls.spans.len() < 20 && total < Duration::from_millis(50),
            "{} stalls, {total:?} in all",
            stalls.spans.len()
        );
    }

    /// The probe hides only the host's stalls: a server's own 300 ms stall stays in the
    /// figures outside stalls, and the report carries both parts.
    #[test]
    fn a_servers_own_stall_stays_in_the_figures_outside_host_stalls() {
        let mut a = args(
            stalling_server(100, Duration::from_millis(300)).0,
            1,
            Some(1000.0),
        );
        a.stall_probe = true;
        let mut run = new_run(&a, Epoll::new().unwrap());
        let stop = AtomicBool::new(false);
        let secs = std::thread::scope(|sc| {
            let probe = sc.spawn(|| probe_stalls(&stop, true));
            let secs = drive(&mut run, a.duration).unwrap();
            stop.store(true, Ordering::Relaxed);
            run.stalls = Some(probe.join().unwrap());
            secs
        });
        let log = run.targets[0].log.as_deref().unwrap();
        assert_eq!(log.len() as u64, counts(&run).requests);
        let stalls = &run.stalls.as_ref().unwrap().spans;
        let mut kept: Vec<u32> = outside_stalls(log, stalls).iter().map(|e| e.1).collect();
        // ~300 requests were held up by the server; the host's own stalls, if any, are short.
        let p90 = percentile_of(&mut kept, 90.0);
        assert!(
            p90 > 100_000,
            "p90 outside host stalls {p90} us ({} stalls)",
            stalls.len()
        );
        let out = report(&run, secs);
        assert!(
            out.contains(", \"outside_stalls\": {\"requests\": "),
            "{out}"
        );
        assert!(out.contains(", \"host_stalls\": {\"count\": "), "{out}");
    }

    /// With the probe each turn also has its p99 outside the host's stalls. Over one
    /// connection the second server's 100 ms hold delays the ~100 requests due during it;
    /// taken for a host stall, it leaves that turn (and the neighbours its window reaches)
    /// nothing slow, or nothing at all (null), while its p99 shows the hold.
    #[test]
    fn each_turn_has_its_p99_outside_the_host_stalls() {
        let (mut a, _) = two_servers_in_turns(1);
        a.stall_probe = true;
        let mut run = new_run(&a, Epoll::new().unwrap());
        let secs = drive(&mut run, a.duration).unwrap();
        // The hold, as the probe would have seen it had it been the host's.
        let &(due, us) = run.targets[1]
            .log
            .as_ref()
            .unwrap()
            .iter()
            .max_by_key(|e| e.1)
            .unwrap();
        assert!(us >= 90_000);
        let held = due + Duration::from_micros(u64::from(us));
        run.stalls = Some(Stalls {
            spans: vec![(held - Duration::from_millis(100), held)],
            realtime: true,
            run_delay: true,
            waited: Duration::ZERO,
        });
        let out = report(&run, secs);
        let turns: Vec<(f64, Option<f64>)> = out
            .split("{\"turn\": ")
            .skip(1)
            .map(|t| {
                let num = |key: &str| -> Option<f64> {
                    let at = t.find(key).unwrap() + key.len();
                    let end = t[at..].find([',', '}']).unwrap();
                    t[at..at + end].parse().ok()
                };
                (num("\"p99_ms\": ").unwrap(), num("\"p99_outside_ms\": "))
            })
            .collect();
        assert_eq!(turns.len(), 6, "{out}");
        // Target a's three turns, then b's: b's second held the requests.
        for (i, &(p99, outside)) in turns.iter().enumerate() {
            if i == 4 {
                assert!(p99 >= 50.0 && outside.is_none_or(|o| o < 5.0), "{out}");
            } else {
                assert!(p99 < 5.0 && outside.is_some_and(|o| o <= 5.0), "{out}");
            }
        }
    }

    /// A turn's figures are its own, and only a quiet turn's latencies join the pool.
    #[test]
    fn a_turn_closes_with_its_percentiles_and_only_quiet_turns_are_pooled() {
        let (addr, _) = stalling_server(usize::MAX, Duration::ZERO);
        let run = new_run(&args(addr, 1, Some(1.0)), Epoll::new().unwrap());
        let mut t = run.targets.into_iter().next().unwrap();
        for (index, steal) in [(0, Some(0.01)), (1, Some(0.05)), (2, None), (3, Some(0.0))] {
            t.turn.extend((1..=100).map(|us| us * (index + 1)));
            t.close_turn(u64::from(index), steal);
        }
        let figures: Vec<(u32, u32, u32, usize)> = t
            .turns
            .iter()
            .map(|u| (u.p50_us, u.p99_us, u.max_us, u.requests))
            .collect();
        assert_eq!(
            figures,
            [
                (50, 99, 100, 100),
                (100, 198, 200, 100),
                (150, 297, 300, 100),
                (200, 396, 400, 100)
            ]
        );
        // Turns 0 and 3: 1..=100 us and 4..=400 us.
        assert_eq!(t.quiet.count, 200);
        assert_eq!(t.quiet.max_us, 400);
        // The 50th of the 200: 1..=40 and 4, 8, .., 40.
        assert_eq!(t.quiet.percentile_ms(25.0), 0.04);
    }
}
