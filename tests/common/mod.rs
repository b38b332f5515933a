//! The black-box harness: start the real `m0serve` binary on a free port with an
//! app from `tests/apps/`, speak raw HTTP/1.x to it over `TcpStream`, and read
//! what it logs.
//!
//! Nothing here can hang: every socket operation has a timeout, every wait has
//! a deadline, and the server guard kills the process when it goes out of scope
//! (SIGTERM, then SIGKILL after 5 s; the child also gets SIGKILL if the test
//! thread that started it dies, through `PR_SET_PDEATHSIG`).
//!
//! Only std and libc: the JSON the apps print and the corpus manifest are read
//! with the small parser at the bottom of this file.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bound on any single socket read or write.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server may take to print its `listening on` line.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a stopped server may take to exit.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Grace between SIGTERM and SIGKILL when a guard is dropped.
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// Bound on reading one whole response, however the bytes trickle in.
pub const RESPONSE_DEADLINE: Duration = Duration::from_secs(30);

/// The marker of a Rust panic in a process's stderr.
pub const PANIC_MARKER: &str = "panicked at";

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_m0serve")
}

pub fn apps_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps"))
}

// ---------------------------------------------------------------------------
// Captured output
// ---------------------------------------------------------------------------

/// A growing byte buffer filled by a drain thread, with a condvar to wait on.
#[derive(Clone, Default)]
pub struct Captured {
    inner: Arc<(Mutex<CapturedState>, Condvar)>,
}

#[derive(Default)]
struct CapturedState {
    bytes: Vec<u8>,
    eof: bool,
}

impl Captured {
    fn drain_from<R: Read + Send + 'static>(mut r: R) -> Captured {
        let cap = Captured::default();
        let c2 = cap.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let (m, cv) = &*c2.inner;
                        m.lock().unwrap().bytes.extend_from_slice(&buf[..n]);
                        cv.notify_all();
                    }
                }
            }
            let (m, cv) = &*c2.inner;
            m.lock().unwrap().eof = true;
            cv.notify_all();
        });
        cap
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.inner.0.lock().unwrap().bytes).into_owned()
    }

    pub fn at_eof(&self) -> bool {
        self.inner.0.lock().unwrap().eof
    }

    /// Waits until `f(text)` returns Some, the stream ends, or the timeout passes.
    pub fn wait_for<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&str) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.inner;
        let mut g = m.lock().unwrap();
        loop {
            let text = String::from_utf8_lossy(&g.bytes);
            if let Some(v) = f(&text) {
                return Some(v);
            }
            if g.eof {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let wait = (deadline - now).min(Duration::from_millis(100));
            g = cv.wait_timeout(g, wait).unwrap().0;
        }
    }

    /// Waits until the stream ends (the process closed it), up to the timeout.
    pub fn wait_eof(&self, timeout: Duration) -> bool {
        self.wait_for(timeout, |_| None::<()>);
        self.at_eof()
    }
}

// ---------------------------------------------------------------------------
// The server guard
// ---------------------------------------------------------------------------

/// Builds the command line of a server under test.
pub struct ServerBuilder {
    app: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    port_flag: bool,
    app_dir_flag: bool,
    /// A command the server runs under (`unshare ...`, `systemd-socket-activate ...`).
    wrapper: Vec<String>,
    /// Another copy of the binary to run (one installed in a virtualenv).
    binary: Option<String>,
}

impl ServerBuilder {
    /// Runs this copy of the binary instead of the build's.
    pub fn binary(mut self, path: &str) -> Self {
        self.binary = Some(path.to_string());
        self
    }

    /// Runs the server under `cmd` (the binary and its arguments follow it).
    pub fn wrapped(mut self, cmd: &[&str]) -> Self {
        self.wrapper = cmd.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }

    pub fn args(mut self, a: &[&str]) -> Self {
        self.args.extend(a.iter().map(|s| s.to_string()));
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    /// Do not pass `--port 0` (the test sets the port another way).
    pub fn without_port_flag(mut self) -> Self {
        self.port_flag = false;
        self
    }

    /// Do not pass `--app-dir tests/apps` (the test sets it another way).
    pub fn without_app_dir_flag(mut self) -> Self {
        self.app_dir_flag = false;
        self
    }

    fn command(&self) -> Command {
        let program = self.binary.as_deref().unwrap_or(bin());
        let mut cmd = match self.wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => Command::new(program),
        };
        cmd.arg(&self.app);
        if self.port_flag {
            cmd.args(["--port", "0"]);
        }
        if self.app_dir_flag {
            cmd.arg("--app-dir").arg(apps_dir());
        }
        cmd.args(&self.args);
        // `M0S_TEST_BLOCKING_THREADS=N` runs every server whose test does not choose its
        // own shape with `--blocking-threads N` (scripts/test.sh runs the HTTP suites a
        // second time with 0: the app inline on the loop thread).
        if let Ok(n) = std::env::var("M0S_TEST_BLOCKING_THREADS") {
            let chosen = self
                .args
                .iter()
                .any(|a| a.starts_with("--blocking-threads"))
                || self
                    .env
                    .iter()
                    .any(|(k, _)| k == "M0SERVE_BLOCKING_THREADS");
            if !chosen {
                cmd.args(["--blocking-threads", &n]);
            }
        }
        // The test's own environment must not configure the server under test.
        for (k, _) in std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v))) {
            if k.starts_with("M0SERVE_") {
                cmd.env_remove(&k);
            }
        }
        cmd.env("PYTHONDONTWRITEBYTECODE", "1");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.current_dir(apps_dir());
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        set_parent_death_signal(&mut cmd);
        cmd
    }

    /// Starts the server and waits for its `listening on` line; panics (with the
    /// server's output) if it exits first or takes longer than START_TIMEOUT.
    pub fn start(self) -> Server {
        match self.try_start() {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// Like `start`, but a server that exits before listening is an Err.
    pub fn try_start(self) -> Result<Server, String> {
        let mut cmd = self.command();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", bin()));
        let stderr = Captured::drain_from(child.stderr.take().unwrap());
        let stdout = Captured::drain_from(child.stdout.take().unwrap());
        let deadline = Instant::now() + START_TIMEOUT;
        let describe = |what: &str, stderr: &Captured, stdout: &Captured| {
            format!(
                "m0serve {} {:?}: {what}\n--- stderr ---\n{}\n--- stdout ---\n{}",
                self.app,
                self.args,
                stderr.text(),
                stdout.text()
            )
        };
        loop {
            // The contract is a line on stderr; stdout is searched too so that a
            // server logging there still gets tested for everything else.
            let found =
                find_listening_addr(&stderr.text()).or_else(|| find_listening_addr(&stdout.text()));
            if let Some(addr) = found {
                return Ok(Server {
                    child: Some(child),
                    exit: None,
                    addr,
                    stderr,
                    stdout,
                    app: self.app.clone(),
                });
            }
            if let Some(status) = child.try_wait().unwrap() {
                stderr.wait_eof(Duration::from_secs(2));
                stdout.wait_eof(Duration::from_secs(2));
                return Err(describe(
                    &format!("exited with {status} before listening"),
                    &stderr,
                    &stdout,
                ));
            }
            if Instant::now() >= deadline {
                kill_child(&mut child);
                return Err(describe(
                    &format!("no `listening on http://HOST:PORT` line within {START_TIMEOUT:?}"),
                    &stderr,
                    &stdout,
                ));
            }
            stderr.wait_for(Duration::from_millis(50), |_| None::<()>);
        }
    }
}

/// Parses `listening on http://127.0.0.1:PORT` (or `[::1]:PORT`) out of a log.
pub fn find_listening_addr(text: &str) -> Option<SocketAddr> {
    const NEEDLE: &str = "listening on http://";
    for line in text.lines() {
        if let Some(i) = line.find(NEEDLE) {
            let rest = &line[i + NEEDLE.len()..];
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '/' || c == ',' || c == ')')
                .unwrap_or(rest.len());
            if let Ok(a) = rest[..end].parse::<SocketAddr>() {
                return Some(a);
            }
        }
    }
    None
}

fn set_parent_death_signal(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec; prctl is
    // async-signal-safe and the closure touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
}

fn kill_child(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A running `m0serve`. Dropping it stops the process (SIGTERM, SIGKILL after
/// KILL_GRACE) and, unless the test is already failing, asserts that the
/// server never printed a Rust panic.
pub struct Server {
    child: Option<Child>,
    exit: Option<ExitStatus>,
    addr: SocketAddr,
    stderr: Captured,
    stdout: Captured,
    app: String,
}

impl Server {
    pub fn builder(app: &str) -> ServerBuilder {
        ServerBuilder {
            app: app.to_string(),
            args: vec![],
            env: vec![],
            port_flag: true,
            app_dir_flag: true,
            wrapper: vec![],
            binary: None,
        }
    }

    /// `m0serve APP --port 0 --app-dir tests/apps EXTRA...`, waiting until it listens.
    pub fn start(app: &str, extra_args: &[&str]) -> Server {
        Server::builder(app).args(extra_args).start()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .map(|c| c.id())
            .expect("server already reaped")
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr_text(&self) -> String {
        self.stderr.text()
    }

    pub fn stdout_text(&self) -> String {
        self.stdout.text()
    }

    /// stderr and stdout together, for assertions about what was logged.
    pub fn log_text(&self) -> String {
        format!("{}{}", self.stderr.text(), self.stdout.text())
    }

    /// Waits until `needle` appears in stderr or stdout.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log_text().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.stderr
                .wait_for(Duration::from_millis(50), |_| None::<()>);
        }
    }

    pub fn connect(&self) -> Conn {
        Conn::connect(self.addr)
    }

    /// One request on a fresh connection, the response read and returned.
    pub fn request(&self, raw: &[u8]) -> Response {
        let mut c = self.connect();
        c.send(raw);
        c.read_response()
    }

    /// `GET target` on a fresh connection (HTTP/1.1, Connection: close).
    pub fn get(&self, target: &str) -> Response {
        self.request(
            format!("GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
    }

    /// The worker processes (the master's children), sorted.
    pub fn worker_pids(&self) -> Vec<u32> {
        child_pids(self.pid())
    }

    /// Waits until exactly `n` workers run (each a child of the master); their pids.
    pub fn wait_for_workers(&self, n: usize, timeout: Duration) -> Vec<u32> {
        let mut pids = Vec::new();
        let ok = wait_until(timeout, || {
            pids = self.worker_pids();
            pids.len() == n
        });
        assert!(
            ok,
            "expected {n} worker(s) within {timeout:?}, found {pids:?}\n{}",
            self.log_text()
        );
        pids
    }

    pub fn signal(&self, sig: libc::c_int) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: kill(2) with a pid we spawned and have not reaped.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(
            rc,
            0,
            "kill({pid}, {sig}) failed: {}",
            io::Error::last_os_error()
        );
    }

    /// Waits for the process to exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.exit {
            return Some(s);
        }
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                self.exit = Some(s);
                self.stderr.wait_eof(Duration::from_secs(2));
                self.stdout.wait_eof(Duration::from_secs(2));
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status (panics if it does not exit in STOP_TIMEOUT).
    pub fn stop(&mut self) -> ExitStatus {
        if let Some(s) = self.exit {
            return s;
        }
        self.signal(libc::SIGTERM);
        match self.wait_exit(STOP_TIMEOUT) {
            Some(s) => s,
            None => {
                if let Some(c) = self.child.as_mut() {
                    kill_child(c);
                }
                panic!(
                    "m0serve did not exit within {STOP_TIMEOUT:?} of SIGTERM\n--- stderr ---\n{}",
                    self.stderr_text()
                );
            }
        }
    }

    /// Asserts the server logged no Rust panic.
    pub fn assert_no_panic(&self) {
        let log = self.log_text();
        assert!(
            !log.contains(PANIC_MARKER),
            "m0serve ({}) panicked:\n{log}",
            self.app
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.exit.is_none() {
            if let Some(child) = self.child.as_mut() {
                if child.try_wait().ok().flatten().is_none() {
                    // SAFETY: kill(2) on our own unreaped child.
                    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                    let deadline = Instant::now() + KILL_GRACE;
                    while Instant::now() < deadline {
                        if child.try_wait().ok().flatten().is_some() {
                            break;
                        }
                        thread::sleep(Duration::from_millis(20));
                    }
                }
                kill_child(child);
            }
        }
        if !thread::panicking() {
            self.stderr.wait_eof(Duration::from_secs(2));
            self.assert_no_panic();
        }
    }
}

/// Output of a command run to completion.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `m0serve ARGS` (cwd tests/apps) to exit, with a deadline; panics if it
/// is still running after `timeout` (after killing it).
pub fn run_to_exit(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("M0SERVE_") {
            cmd.env_remove(&k);
        }
    }
    cmd.env("PYTHONDONTWRITEBYTECODE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.current_dir(apps_dir());
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    set_parent_death_signal(&mut cmd);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", bin()));
    let stderr = Captured::drain_from(child.stderr.take().unwrap());
    let stdout = Captured::drain_from(child.stdout.take().unwrap());
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            stderr.wait_eof(Duration::from_secs(2));
            stdout.wait_eof(Duration::from_secs(2));
            return Output {
                status,
                stdout: stdout.text(),
                stderr: stderr.text(),
            };
        }
        if Instant::now() >= deadline {
            kill_child(&mut child);
            panic!(
                "m0serve {args:?} still running after {timeout:?}\n--- stderr ---\n{}\n--- stdout ---\n{}",
                stderr.text(),
                stdout.text()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The exit code, or a description of the signal that ended the process.
/// Waits for the server to exit and returns its exit code; panics (with its log) when it
/// does not exit in time or dies of a signal.
pub fn exit_code(s: &mut Server, within: Duration, what: &str) -> i32 {
    let st = s
        .wait_exit(within)
        .unwrap_or_else(|| panic!("{what}: the server did not exit within {within:?}"));
    st.code().unwrap_or_else(|| {
        panic!(
            "{what}: the server ended with {}\n{}",
            describe_status(&st),
            s.log_text()
        )
    })
}

pub fn describe_status(s: &ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => format!("{s:?}"),
    }
}

/// A port that was free a moment ago (bind :0, read it, release it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// ---------------------------------------------------------------------------
// Raw HTTP client
// ---------------------------------------------------------------------------

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
                    let line_end = loop {
                        if let Some(i) = find(&self.buf[pos..], b"\r\n") {
                            break pos + i;
                        }
                        match self.fill(deadline) {
                            Fill::Data => {}
                            other => {
                                raw.extend_from_slice(&self.buf);
                                self.buf.clear();
                                let kind = if matches!(other, Fill::Eof) {
                                    ReadErrorKind::Truncated
                                } else {
                                    ReadErrorKind::Timeout
                                };
                                return Err(truncated(raw, &resp, kind));
                            }
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
                            let end = loop {
                                if let Some(i) = find(&self.buf[pos..], b"\r\n") {
                                    break pos + i;
                                }
                                match self.fill(deadline) {
                                    Fill::Data => {}
                                    other => {
                                        raw.extend_from_slice(&self.buf);
                                        self.buf.clear();
                                        let kind = if matches!(other, Fill::Eof) {
                                            ReadErrorKind::Truncated
                                        } else {
                                            ReadErrorKind::Timeout
                                        };
                                        return Err(truncated(raw, &resp, kind));
                                    }
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

// ---------------------------------------------------------------------------
// The echo app's answer
// ---------------------------------------------------------------------------

/// What tests/apps/echo.py saw.
#[derive(Debug)]
pub struct Echo {
    pub json: Json,
    /// Every environ key without a dot (CGI variables), value as echoed.
    pub cgi: BTreeMap<String, String>,
    /// Python type name of every environ value.
    pub types: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub pieces: Vec<Vec<u8>>,
}

impl Echo {
    pub fn parse(r: &Response) -> Echo {
        assert_eq!(
            r.status,
            200,
            "echo app did not answer 200: {} {:?}",
            r.status_line(),
            show(&r.body)
        );
        let text = std::str::from_utf8(&r.body)
            .unwrap_or_else(|_| panic!("echo body is not UTF-8: {:?}", show(&r.body)));
        let json = Json::parse(text)
            .unwrap_or_else(|e| panic!("echo body is not JSON ({e}): {}", show(&r.body)));
        let obj_map = |key: &str| -> BTreeMap<String, String> {
            json[key]
                .as_object()
                .unwrap_or_else(|| panic!("echo JSON has no object {key:?}"))
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("<non-string>").to_string()))
                .collect()
        };
        let cgi = obj_map("cgi");
        let types = obj_map("types");
        let body = latin1_bytes(json["body"].as_str().expect("echo body"));
        let pieces = json["pieces"]
            .as_array()
            .expect("echo pieces")
            .iter()
            .map(|p| latin1_bytes(p.as_str().unwrap()))
            .collect();
        Echo {
            json,
            cgi,
            types,
            body,
            pieces,
        }
    }

    pub fn var(&self, key: &str) -> Option<&str> {
        self.cgi.get(key).map(|s| s.as_str())
    }

    /// The value of a CGI variable that must be present.
    pub fn must(&self, key: &str) -> &str {
        self.var(key).unwrap_or_else(|| {
            panic!(
                "environ has no {key}; CGI keys: {:?}",
                self.cgi.keys().collect::<Vec<_>>()
            )
        })
    }

    /// The request's headers as the app saw them: HTTP_* plus CONTENT_TYPE
    /// and CONTENT_LENGTH.
    pub fn header_vars(&self) -> BTreeMap<String, String> {
        self.cgi
            .iter()
            .filter(|(k, _)| {
                k.starts_with("HTTP_") || *k == "CONTENT_TYPE" || *k == "CONTENT_LENGTH"
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn wsgi(&self, key: &str) -> &Json {
        &self.json["wsgi"][key]
    }
}

/// The WSGI environ key a request header maps to (PEP 3333 / CGI 1.1).
pub fn environ_key(header_name: &str) -> String {
    let up = header_name.to_ascii_uppercase().replace('-', "_");
    match up.as_str() {
        "CONTENT_TYPE" | "CONTENT_LENGTH" => up,
        _ => format!("HTTP_{up}"),
    }
}

/// The environ entries a list of request headers must produce: repeated
/// headers joined with "," (Cookie with "; "), as the issue specifies.
pub fn expected_header_vars(headers: &[(String, String)]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in headers {
        let key = environ_key(k);
        let sep = if key == "HTTP_COOKIE" { "; " } else { "," };
        out.entry(key)
            .and_modify(|e| {
                e.push_str(sep);
                e.push_str(v);
            })
            .or_insert_with(|| v.clone());
    }
    out
}

// ---------------------------------------------------------------------------
// Bytes, text, time, files
// ---------------------------------------------------------------------------

/// A latin-1 string (every char <= U+00FF) back to its bytes.
pub fn latin1_bytes(s: &str) -> Vec<u8> {
    s.chars()
        .map(|c| {
            let u = c as u32;
            assert!(u <= 0xff, "char {c:?} (U+{u:04X}) is not latin-1: {s:?}");
            u as u8
        })
        .collect()
}

/// Bytes as a latin-1 string (what PEP 3333 calls a native string).
pub fn latin1_string(b: &[u8]) -> String {
    b.iter().map(|&c| c as char).collect()
}

/// RFC 3986 percent-decoding over bytes; malformed escapes stay as they are.
pub fn percent_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            let h = (s[i + 1] as char).to_digit(16);
            let l = (s[i + 2] as char).to_digit(16);
            if let (Some(h), Some(l)) = (h, l) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// Parses an RFC 9110 IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") strictly,
/// including that the day name matches the date. Returns Unix seconds.
pub fn parse_imf_fixdate(s: &str) -> Option<i64> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let b = s.as_bytes();
    if b.len() != 29
        || &s[3..5] != ", "
        || b[7] != b' '
        || b[11] != b' '
        || b[16] != b' '
        || b[19] != b':'
        || b[22] != b':'
        || &s[25..] != " GMT"
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = &s[r];
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse().ok()
        } else {
            None
        }
    };
    let wday = DAYS.iter().position(|d| *d == &s[0..3])? as i64;
    let day = num(5..7)?;
    let month = MONTHS.iter().position(|m| *m == &s[8..11])? as i64 + 1;
    let year = num(12..16)?;
    let (hh, mm, ss) = (num(17..19)?, num(20..22)?, num(23..25)?);
    if !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    // 1970-01-01 was a Thursday (index 3 with Monday = 0).
    if (days + 3).rem_euclid(7) != wday {
        return None;
    }
    Some(days * 86400 + hh * 3600 + mm * 60 + ss)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

// ---------------------------------------------------------------------------
// Client moves shared by the regression and inline-mode tests
// ---------------------------------------------------------------------------

/// Closes the connection with a reset (SO_LINGER 0), as a client that gives up does.
pub fn reset(c: Conn) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt(2) on a descriptor `c` owns, with a pointer to a live `linger`
    // and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            c.stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER: {}", io::Error::last_os_error());
    drop(c);
}

/// Reads raw bytes from `c` until `needle` has been seen `n` times in all of them.
pub fn read_until_count(c: &mut Conn, needle: &[u8], n: usize, timeout: Duration) -> Vec<u8> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while count(&got, needle) < n {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "saw {needle:?} {} times of {n} within {timeout:?}: {:?}",
            count(&got, needle),
            show(&got)
        );
        c.stream.set_read_timeout(Some(left)).unwrap();
        match c.stream.read(&mut buf) {
            Ok(0) => panic!("the server closed the connection after {:?}", show(&got)),
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading after {:?}: {e}", show(&got)),
        }
    }
    got
}

pub fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// `GET target` on a fresh connection, answered within `within` (or an Err saying how not).
pub fn try_get(s: &Server, target: &str, within: Duration) -> Result<Response, String> {
    let mut c = s.connect();
    c.set_io_timeout(within);
    c.send(
        format!("GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    c.try_read_response()
        .map_err(|e| format!("GET {target}: {e:?}"))
}

/// Asserts a plain request on a new connection is answered within `within`.
pub fn assert_served(s: &Server, within: Duration, what: &str) {
    let t = Instant::now();
    match try_get(s, "/hello", within) {
        Ok(r) => assert_eq!(r.body_text(), "hello", "{what}: {}", r.status_line()),
        Err(e) => panic!(
            "{what}: a new request was not answered within {within:?} ({:?} waited): {e}",
            t.elapsed()
        ),
    }
}

/// Polls `f` every 20 ms until it is true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir {
    pub path: PathBuf,
}

static TEMP_COUNTER: AtomicUsize = AtomicUsize::new(0);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("m0serve-tests-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir { path }
    }

    /// A path inside the directory, as a string safe to put in a query string.
    pub fn file(&self, name: &str) -> String {
        let p = self.path.join(name).to_string_lossy().into_owned();
        assert!(
            p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b)),
            "temp path {p:?} has characters that need escaping in a query"
        );
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The file's contents, or "" if it does not exist (yet).
pub fn read_or_empty(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until the file at `path` contains `needle`; returns its contents.
pub fn wait_for_file_containing(
    path: &str,
    needle: &str,
    timeout: Duration,
) -> Result<String, String> {
    let mut last = String::new();
    if wait_until(timeout, || {
        last = read_or_empty(path);
        last.contains(needle)
    }) {
        Ok(last)
    } else {
        Err(last)
    }
}

/// Resident set size of a process, in KiB (from /proc/PID/status).
/// Resident memory of `pid` and all its descendants (the master and its workers), KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let own: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    own + child_pids(pid).into_iter().map(rss_kib).sum::<u64>()
}

/// The direct children of `pid` (for the server: its worker processes).
pub fn child_pids(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        out.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    out.sort_unstable();
    out
}

/// Deterministic pseudo-random bytes (an LCG), for garbage inputs.
pub fn pseudo_random(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

// ---------------------------------------------------------------------------
// A small JSON reader (RFC 8259), enough for the apps' output and the manifest
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    /// Members in document order.
    Obj(Vec<(String, Json)>),
}

static JSON_NULL: Json = Json::Null;

impl std::ops::Index<&str> for Json {
    type Output = Json;
    /// The member `key` of an object, or Null.
    fn index(&self, key: &str) -> &Json {
        match self {
            Json::Obj(m) => m
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .unwrap_or(&JSON_NULL),
            _ => &JSON_NULL,
        }
    }
}

impl std::ops::Index<usize> for Json {
    type Output = Json;
    fn index(&self, i: usize) -> &Json {
        match self {
            Json::Arr(a) => a.get(i).unwrap_or(&JSON_NULL),
            _ => &JSON_NULL,
        }
    }
}

impl Json {
    pub fn parse(s: &str) -> Result<Json, String> {
        let mut p = JsonParser {
            b: s.as_bytes(),
            i: 0,
        };
        p.ws();
        let v = p.value(0)?;
        p.ws();
        if p.i != p.b.len() {
            return Err(format!("trailing data at byte {}", p.i));
        }
        Ok(v)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Num(n) => Some(*n),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Vec<Json>> {
        match self {
            Json::Arr(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Vec<(String, Json)>> {
        match self {
            Json::Obj(m) => Some(m),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }
}

struct JsonParser<'a> {
    b: &'a [u8],
    i: usize,
}

impl JsonParser<'_> {
    fn err<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("{what} at byte {}", self.i))
    }

    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.b[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, String> {
        if depth > 128 {
            return self.err("nesting too deep");
        }
        match self.b.get(self.i) {
            None => self.err("unexpected end"),
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.eat("}") {
                    return Ok(Json::Obj(members));
                }
                loop {
                    self.ws();
                    if self.b.get(self.i) != Some(&b'"') {
                        return self.err("expected a member name");
                    }
                    let k = self.string()?;
                    self.ws();
                    if !self.eat(":") {
                        return self.err("expected ':'");
                    }
                    self.ws();
                    let v = self.value(depth + 1)?;
                    members.push((k, v));
                    self.ws();
                    if self.eat(",") {
                        continue;
                    }
                    if self.eat("}") {
                        return Ok(Json::Obj(members));
                    }
                    return self.err("expected ',' or '}'");
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.eat("]") {
                    return Ok(Json::Arr(items));
                }
                loop {
                    self.ws();
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    if self.eat(",") {
                        continue;
                    }
                    if self.eat("]") {
                        return Ok(Json::Arr(items));
                    }
                    return self.err("expected ',' or ']'");
                }
            }
            Some(b'"') => Ok(Json::Str(self.string()?)),
            Some(b't') if self.eat("true") => Ok(Json::Bool(true)),
            Some(b'f') if self.eat("false") => Ok(Json::Bool(false)),
            Some(b'n') if self.eat("null") => Ok(Json::Null),
            Some(c) if *c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.b.len()
                    && matches!(
                        self.b[self.i],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.b[start..self.i]).unwrap();
                t.parse::<f64>()
                    .map(Json::Num)
                    .map_err(|_| format!("bad number {t:?} at byte {start}"))
            }
            Some(_) => self.err("unexpected character"),
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let h = self.b.get(self.i..self.i + 4).ok_or("short \\u escape")?;
        let s = std::str::from_utf8(h).map_err(|_| "bad \\u escape")?;
        let v = u32::from_str_radix(s, 16).map_err(|_| format!("bad \\u escape {s:?}"))?;
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, String> {
        self.i += 1; // opening quote
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(&c) = self.b.get(self.i) else {
                return self.err("unterminated string");
            };
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.b.get(self.i) else {
                        return self.err("unterminated escape");
                    };
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let cp = if (0xD800..0xDC00).contains(&hi) {
                                if !self.eat("\\u") {
                                    return self.err("lone high surrogate");
                                }
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return self.err("bad low surrogate");
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(cp).ok_or_else(|| format!("bad code point {cp:#x}"))?
                        }
                        _ => return self.err("bad escape"),
                    };
                    let mut tmp = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                }
                c if c < 0x20 => return self.err("control character in string"),
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| "string is not UTF-8".to_string())
    }
}
