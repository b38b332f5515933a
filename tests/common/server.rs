//! The server guard.

use super::*;

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
    /// A file the server logs to (`--error-log-file`), searched for the listening line too.
    log_file: Option<PathBuf>,
    /// The apps' directory (`--app-dir`, and the server's working directory) instead of
    /// tests/apps.
    apps: Option<PathBuf>,
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

    /// The server logs to `path` (`--error-log-file`): its listening line is looked for
    /// there as well.
    pub fn log_file(mut self, path: &Path) -> Self {
        self.log_file = Some(path.to_path_buf());
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

    /// Runs the server in `dir` and passes `--app-dir DIR` instead of tests/apps (a copy of
    /// the apps that another user may read, say).
    pub fn apps_in(mut self, dir: &Path) -> Self {
        self.apps = Some(dir.to_path_buf());
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
        // An empty app: the server takes it from elsewhere (a gunicorn configuration).
        if !self.app.is_empty() {
            cmd.arg(&self.app);
        }
        if self.port_flag {
            cmd.args(["--port", "0"]);
        }
        let apps = self.apps.clone().unwrap_or_else(apps_dir);
        if self.app_dir_flag {
            cmd.arg("--app-dir").arg(&apps);
        }
        cmd.args(&self.args);
        // `M0S_TEST_BLOCKING_THREADS=N` runs every server whose test does not choose its
        // own shape with `--blocking-threads N` or `--max-blocking-threads N`
        // (scripts/test.sh runs the HTTP suites a second time with 0: the app inline on the
        // loop thread).
        if let Ok(n) = std::env::var("M0S_TEST_BLOCKING_THREADS") {
            let chosen = self.args.iter().any(|a| {
                a.starts_with("--blocking-threads") || a.starts_with("--max-blocking-threads")
            }) || self.env.iter().any(|(k, _)| {
                k == "M0SERVE_BLOCKING_THREADS" || k == "M0SERVE_MAX_BLOCKING_THREADS"
            });
            if !chosen {
                cmd.args(["--blocking-threads", &n]);
            }
        }
        // `M0S_TEST_PRELOAD=1` runs every server whose test does not choose `--preload`
        // with it (scripts/test.sh runs the process suites a second time so).
        if std::env::var_os("M0S_TEST_PRELOAD").is_some_and(|v| v == "1")
            && !self.args.iter().any(|a| a.starts_with("--preload"))
        {
            cmd.arg("--preload");
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
        cmd.current_dir(&apps);
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
            let found = find_listening_addr(&stderr.text())
                .or_else(|| find_listening_addr_of(&stderr.text(), "https"))
                .or_else(|| find_listening_addr(&stdout.text()))
                .or_else(|| {
                    let text = std::fs::read_to_string(self.log_file.as_ref()?).ok()?;
                    find_listening_addr(&text)
                });
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
    find_listening_addr_of(text, "http")
}

/// Parses `listening on SCHEME://HOST:PORT` (the first such line) out of a log.
pub fn find_listening_addr_of(text: &str, scheme: &str) -> Option<SocketAddr> {
    let needle = format!("listening on {scheme}://");
    for line in text.lines() {
        if let Some(i) = line.find(&needle) {
            let rest = &line[i + needle.len()..];
            let end = rest
                .find(|c: char| c.is_whitespace() || matches!(c, '/' | ',' | ')' | '"'))
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
            log_file: None,
            apps: None,
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

    /// The address `--metrics-port` listens on, from the line that says so (waited for).
    pub fn metrics_addr(&self) -> SocketAddr {
        const LINE: &str = "metrics on http://";
        assert!(
            self.wait_for_log(LINE, Duration::from_secs(10)),
            "no metrics port: {}",
            self.log_text()
        );
        let log = self.log_text();
        let at = &log[log.find(LINE).unwrap() + LINE.len()..];
        at[..at.find("/metrics").unwrap()].parse().unwrap()
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
    /// The master's children that are workers: not the preloader (`--preload`).
    pub fn worker_pids(&self) -> Vec<u32> {
        let mut pids = child_pids(self.pid());
        pids.retain(|&p| !is_preloader(p));
        pids
    }

    /// The master's child that is the preloader (`--preload`), if one runs.
    pub fn preloader_pids(&self) -> Vec<u32> {
        let mut pids = child_pids(self.pid());
        pids.retain(|&p| is_preloader(p));
        pids
    }

    /// Kills worker `pid` with SIGKILL; whether, within `timeout`, `n` workers run again
    /// and `pid` is not among them (the master replaced it).
    pub fn kill_worker_until_replaced(&self, pid: u32, n: usize, timeout: Duration) -> bool {
        // SAFETY: kill(2) on a worker of this server, a process the test started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        wait_until(timeout, || {
            let now = self.worker_pids();
            now.len() == n && !now.contains(&pid)
        })
    }

    /// Sends SIGHUP; whether, within `timeout`, `n` workers run and none of them was
    /// running before (the reload replaced every one).
    pub fn sighup_until_replaced(&self, n: usize, timeout: Duration) -> bool {
        let before = self.worker_pids();
        self.signal(libc::SIGHUP);
        wait_until(timeout, || {
            let now = self.worker_pids();
            now.len() == n && now.iter().all(|p| !before.contains(p))
        })
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
