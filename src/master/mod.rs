//! The master process: binds the listener, starts the workers and keeps them running.
//!
//! The master never runs Python code and never starts a thread. Each worker is a fork that
//! at once executes the [`WorkerCommand`] (the binary itself, or the package's interpreter
//! with its flags and `-c` code that starts m0serve, and the master's own arguments) with the listener's descriptor and
//! the write end of a "ready" pipe left open across the exec, named in [`WORKER_ENV`]. So a worker starts from a clean
//! process image (no inherited master state, signal handlers or locks), starts Python,
//! imports the app and writes one byte to its ready pipe once its loop serves.
//!
//! The workers share the one listening socket: the kernel hands each connection to
//! whichever worker's `accept` takes it first (docs/architecture.md, "Workers").
//!
//! Signals (as gunicorn users know them): SIGTERM and SIGINT stop gracefully (each worker
//! drains, within `--graceful-timeout`; the master kills what is left a little later);
//! SIGQUIT stops at once; SIGHUP is a rolling reload (a new generation starts, and an old
//! worker is told to drain only as a new one reports ready); SIGTTIN and SIGTTOU add and
//! remove a worker; SIGUSR2 is passed on to every worker (their `--stats` report).
//!
//! A worker that dies is replaced at once; one that dies before it is ready is replaced
//! after a backoff that doubles up to `BOOT_BACKOFF_MAX`. If no worker has ever become
//! ready, a boot failure means the app cannot start: the master stops and exits non-zero.

pub(crate) mod preload;
pub(crate) mod reload;
pub(crate) mod systemd;

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::log;
use crate::sys::ipc::{MetricsFds, Status, WorkerEnv, WORKER_ENV};
use crate::sys::listen::Listener;
use crate::sys::signals::{Received, SignalPipe, MASTER_SIGNALS};

/// First wait before replacing a worker that died before it was ready; doubles per
/// consecutive boot failure.
const BOOT_BACKOFF_MIN: Duration = Duration::from_millis(100);
const BOOT_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// How much longer than `--graceful-timeout` the master waits for draining workers before
/// it kills them (the workers enforce the timeout themselves; this is the backstop).
const KILL_MARGIN: Duration = Duration::from_secs(5);

/// How often `--workers-max-rss` is checked.
const RSS_CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long workers get to exit after SIGQUIT before they are killed.
const QUIT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where a worker is in its life, as the master sees it. It moves down the list (a worker
/// told to drain may still report ready, and any that served may be killed for silence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    /// Started, importing the app: it serves nothing yet.
    Booting,
    /// Serving.
    Serving,
    /// Serving, and asked to be replaced (`--max-requests`, `--timeout`,
    /// `--workers-max-rss`): it drains once its replacement is ready.
    Recycling,
    /// Told to drain (SIGTERM sent): its exit is expected. `served`: it had reported
    /// ready; `scaled_down`: one worker fewer is wanted (its exit is no restart).
    Draining { served: bool, scaled_down: bool },
    /// Killed for its silence (`--silent-timeout`): its exit is expected, and a
    /// replacement starts at once.
    Killed,
}

impl Life {
    /// One of the workers that should run (neither leaving nor gone).
    fn counts(self) -> bool {
        matches!(self, Life::Booting | Life::Serving)
    }

    /// It has reported ready.
    fn served(self) -> bool {
        !matches!(self, Life::Booting | Life::Draining { served: false, .. })
    }

    fn draining(self) -> bool {
        matches!(self, Life::Draining { .. })
    }
}

/// One worker process.
struct Worker {
    pid: libc::pid_t,
    life: Life,
    /// The read end of its status pipe, until it closes.
    status_pipe: Option<OwnedFd>,
    /// Its last heartbeat ("H" on the status pipe: its loop and handlers make progress).
    heartbeat: Instant,
    /// The last byte it sent on the status pipe (its loop beats once a second):
    /// `--silent-timeout` counts from here.
    alive_at: Instant,
    /// The reload generation it was started for.
    generation: u64,
    /// Its slot in the shared metrics (`--metrics-port`).
    metrics_slot: Option<usize>,
    /// The CPU it is pinned to (`--cpu-affinity`).
    cpu: Option<usize>,
    /// Told to drain (not as part of a stop): killed if it is still running at this time.
    drain_deadline: Option<Instant>,
}

pub(crate) struct Master {
    config: Config,
    listeners: Vec<Listener>,
    /// The Unix sockets of listeners closed at a stop, removed at exit (as root, with
    /// `--user`: their directory is often root's).
    closed_sockets: Vec<PathBuf>,
    signals: SignalPipe,
    command: WorkerCommand,
    /// The program, opened before the switch to `--user`, where the identity can execute
    /// it only so (`ProgramReach::Opened`).
    program_fd: Option<OwnedFd>,
    workers: Vec<Worker>,
    /// `--preload`: the processes that import the app and fork the workers (the current
    /// generation's, and older ones still exiting).
    preloaders: Vec<preload::Preloader>,
    /// `--preload` refused for this generation (its preloader's import started threads):
    /// its workers start as they do without `--preload`.
    preload_off: Option<u64>,
    /// How many workers of the current generation should run.
    target: usize,
    generation: u64,
    /// Some worker has ever reported ready.
    ever_ready: bool,
    /// `listening on` has been logged (the first full set was ready).
    announced: bool,
    boot_failures: u32,
    /// No worker is started before this (boot backoff).
    spawn_after: Option<Instant>,
    /// `--reload`: the current generation failed to boot; no worker starts until a file
    /// changes (the traceback is not printed again and again meanwhile).
    awaiting_change: bool,
    /// Stopping: the instant after which the workers left are killed.
    stop_deadline: Option<Instant>,
    /// A boot failure before anything ever served: why the master gives up.
    fatal: Option<String>,
    /// systemd's notification socket (`Type=notify`).
    notifier: Option<systemd::Notifier>,
    /// A reload is under way (told to systemd as `RELOADING=1`, ended with `READY=1`).
    reloading: bool,
    /// `WATCHDOG_USEC`: `WATCHDOG=1` goes out every half of it, while every serving
    /// worker's heartbeat is fresh.
    watchdog: Option<Duration>,
    next_watchdog: Instant,
    next_rss_check: Instant,
    /// A worker was over `--workers-max-rss` as it reported ready: recycling for memory
    /// would never end, so it is off (until a reload).
    rss_limit_off: bool,
    /// `--metrics-port`: the counters every worker writes, and the socket they serve them on.
    metrics: Option<(crate::metrics::Region, Listener)>,
    /// `--reload`: the watch on the app's `.py` files.
    watcher: Option<reload::Watcher>,
    pid_file: Option<PidFile>,
}

/// `--pid-file`: written at start, removed when the master exits if it still holds our pid.
struct PidFile(PathBuf);

impl PidFile {
    /// Writes our pid to `path`, which may be missing, empty or stale (a pid no process
    /// has). A file naming a running process (a second server given the same file), or
    /// holding anything but a pid, is left as it is and the start refused. The file is
    /// created only where none is (`O_EXCL`), a stale one removed first, so of two servers
    /// started together one gets it and the other sees it taken.
    fn write(path: &std::path::Path) -> Result<PidFile, String> {
        use std::io::Write;
        let shown = path.display();
        for _ in 0..2 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(mut f) => {
                    f.write_all(format!("{}\n", std::process::id()).as_bytes())
                        .map_err(|e| format!("--pid-file {shown}: {e}"))?;
                    // Readable by all whatever the umask, so that the master, once it runs
                    // as --user, can still see at exit that the file is its own.
                    use std::os::unix::fs::PermissionsExt;
                    let _ = f.set_permissions(std::fs::Permissions::from_mode(0o644));
                    return Ok(PidFile(path.to_path_buf()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    Self::judge_existing(path)?;
                    match std::fs::remove_file(path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(format!("--pid-file {shown}: {e}")),
                    }
                }
                Err(e) => return Err(format!("--pid-file {shown}: {e}")),
            }
        }
        Err(format!(
            "--pid-file {shown}: another server took it as this one started"
        ))
    }

    /// `Ok` for a file that may be replaced: gone meanwhile, empty, or naming no running
    /// process but this one.
    fn judge_existing(path: &std::path::Path) -> Result<(), String> {
        let shown = path.display();
        let not_a_pid = || {
            format!(
                "--pid-file {shown}: the file holds something other than a pid; not overwriting it"
            )
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Err(not_a_pid()),
            Err(e) => return Err(format!("--pid-file {shown}: {e}")),
        };
        match text.trim().parse::<libc::pid_t>() {
            // (`process_exists` takes a pid above 0: 0 and below name groups.)
            Ok(pid)
                if pid > 0
                    && u32::try_from(pid) != Ok(std::process::id())
                    && crate::sys::process_exists(pid) =>
            {
                Err(format!(
                    "--pid-file {shown}: it names process {pid}, which is running \
                     (another server on the same file, or a stale file whose pid was \
                     reused); stop it, remove the file, or give another path"
                ))
            }
            Ok(_) => Ok(()),
            Err(_) if text.trim().is_empty() => Ok(()),
            Err(_) => Err(not_a_pid()),
        }
    }
}

impl PidFile {
    /// The file still names this master (another server may have taken it over
    /// meanwhile: its pid stays; one this master cannot read, made unreadable since, is
    /// taken for its own).
    fn is_ours(&self) -> bool {
        match std::fs::read_to_string(&self.0) {
            Ok(t) => t.trim() == std::process::id().to_string(),
            Err(e) => e.kind() == std::io::ErrorKind::PermissionDenied,
        }
    }

    /// Its path, if it is still ours to remove; the file is left for the caller.
    fn take_if_ours(mut self) -> Option<PathBuf> {
        let ours = self.is_ours();
        let path = std::mem::take(&mut self.0);
        ours.then_some(path)
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Taken (`take_if_ours`): the path is empty.
        if !self.0.as_os_str().is_empty() && self.is_ours() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// What a worker process executes: a program and its whole argument list (`argv[0]`
/// first). The binary runs itself again (`/proc/self/exe` as it was at start); the Python
/// package runs the interpreter it is installed in, with its flags, on code that starts
/// m0serve (python/m0serve/__init__.py, `WORKER_BOOT`). Either way the
/// master's own arguments follow, and the worker tells it is one from [`WORKER_ENV`].
#[derive(Clone, Debug)]
pub(crate) struct WorkerCommand {
    pub(crate) program: PathBuf,
    pub(crate) argv: Vec<OsString>,
    /// What the master does first at each reload: a gunicorn configuration
    /// (`-c gunicorn.conf.py`) is run again, so that the new workers get its settings as
    /// they are then (they find them in their environment).
    pub(crate) on_reload: Option<OnReload>,
}

/// `WorkerCommand::on_reload`: `Err` is logged, and the new workers start as the old did.
#[derive(Clone)]
pub(crate) struct OnReload(pub std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>);

impl std::fmt::Debug for OnReload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnReload")
    }
}

/// Binds, starts the workers and supervises them until a stop; the process's exit code.
pub(crate) fn run(config: Config, command: WorkerCommand) -> Result<(), String> {
    let notifier = systemd::Notifier::from_env();
    let passed = systemd::take_listen_fds()?;
    // Before binding: a second server refused for the pid file must not have replaced a
    // running one's Unix socket meanwhile.
    let pid_file = match &config.pid_file {
        Some(path) => Some(PidFile::write(path)?),
        None => None,
    };
    let listeners = if passed.is_empty() {
        config
            .listen
            .iter()
            .map(|l| {
                Listener::bind(l, config.backlog, config.uds_permissions)
                    .map_err(|e| format!("cannot bind {}: {e}", l.describe()))
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        passed
            .iter()
            .map(|&fd| {
                Listener::from_inherited(fd)
                    .map_err(|e| format!("cannot use the socket systemd passed as {fd}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    let metrics = match config.metrics {
        Some(addr) => {
            let listener = Listener::bind(
                &crate::sys::listen::ListenSpec::Tcp(addr),
                config.backlog,
                None,
            )
            .map_err(|e| format!("--metrics-port: cannot bind {addr}: {e}"))?;
            // Room for a reload's two generations and a few SIGTTINs; a worker past them
            // runs without metrics (and says so).
            let slots = (config.workers * 4).max(64);
            let region = crate::metrics::Region::create(slots, config.max_blocking_threads.max(1))
                .map_err(|e| format!("--metrics-port: cannot create the shared counters: {e}"))?;
            Some((region, listener))
        }
        None => None,
    };
    let watcher = match &config.reload {
        Some(ignore) => {
            let w = reload::Watcher::new(&config.app_dir, ignore)
                .map_err(|e| format!("--reload: cannot watch {}: {e}", config.app_dir.display()))?;
            log::info!(
                "--reload: watching the .py files in {} ({} directories)",
                config.app_dir.display(),
                w.watched()
            );
            // Workers compile the app from its source at every start: a cached `.pyc` is
            // trusted on the source's mtime in whole seconds and its size, which an edit
            // within the same second that keeps the size would not change.
            std::env::set_var("PYTHONDONTWRITEBYTECODE", "1");
            Some(w)
        }
        None => None,
    };
    // Everything that needs root is done: the sockets are bound (and given to the
    // identity), the pid file written, the counters created. The master goes on with the
    // identity's effective ids, root kept as its real and saved ones (so the app cannot
    // signal it, and it can remove its files at exit); the workers are started as the
    // identity, all their ids switched, so the app is imported as it.
    let mut program_fd = None;
    if !config.identity.is_empty() {
        for l in &listeners {
            if let Listener::Unix {
                path, owned: true, ..
            } = l
            {
                config.identity.give(path).map_err(|e| {
                    format!(
                        "cannot give the Unix socket {} to {}: {e}",
                        path.display(),
                        config.identity.describe
                    )
                })?;
            }
        }
        // Opened while root: a worker that cannot reach the program by its path (under
        // a directory only root may enter) executes it through this descriptor.
        program_fd = crate::sys::open_program(&command.program).ok();
        config.identity.assume_effective()?;
        // Each worker executes the program and loads libpython as the identity: what it
        // cannot reach is said now, not as a worker that exits 127 with nothing above.
        let who = &config.identity.describe;
        let reach = crate::sys::privileges::can_start_workers(
            &command.program,
            program_fd.as_ref().map(|fd| fd.as_fd()),
            who,
        )?;
        if reach == crate::sys::privileges::ProgramReach::Opened {
            log::info!(
                "{who} cannot reach {} by its path: the workers execute it as it was opened \
                 at start, so a reload does not run a new binary installed there",
                command.program.display()
            );
        } else {
            program_fd = None;
        }
        log::info!(
            "running as {} (the master keeps root as its saved id, to remove its files at \
             exit; the workers hold none)",
            config.identity.describe
        );
    }
    let signals =
        SignalPipe::install_master().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    // `--preload`: the workers the preloader forks become the master's children.
    if config.preload {
        crate::sys::become_subreaper()
            .map_err(|e| format!("--preload: cannot become the workers' parent: {e}"))?;
    }
    let mut m = Master {
        target: config.workers,
        config,
        listeners,
        closed_sockets: Vec::new(),
        signals,
        command,
        program_fd,
        workers: Vec::new(),
        preloaders: Vec::new(),
        preload_off: None,
        generation: 0,
        ever_ready: false,
        announced: false,
        boot_failures: 0,
        spawn_after: None,
        awaiting_change: false,
        stop_deadline: None,
        fatal: None,
        notifier,
        reloading: false,
        watchdog: systemd::take_watchdog(),
        next_watchdog: Instant::now(),
        next_rss_check: Instant::now(),
        rss_limit_off: false,
        metrics,
        watcher,
        pid_file,
    };
    log::info!(
        "master starting {} worker(s) for {} on {}",
        m.target,
        m.config.app,
        m.describe_listeners()
    );
    let result = m.supervise();
    m.remove_own_files();
    drop(m);
    result
}

impl Master {
    fn supervise(&mut self) -> Result<(), String> {
        loop {
            if self.stop_deadline.is_none() {
                self.converge();
            } else if self.workers.is_empty() && self.preloaders.is_empty() {
                break;
            }
            self.wait(self.next_timeout());
            let got = self.signals.drain();
            self.on_signals(got);
            self.check_watcher();
            self.read_status_pipes();
            self.reap();
            if let Some(deadline) = self.stop_deadline {
                if Instant::now() >= deadline && !self.workers.is_empty() {
                    log::warning!(
                        "killing {} worker(s) that did not stop in time",
                        self.workers.len()
                    );
                    self.signal_all(libc::SIGKILL);
                    // Their exits are reaped on the next turns; stop waiting on a deadline.
                    self.stop_deadline = Some(Instant::now() + Duration::from_secs(3600));
                }
            }
        }
        match self.fatal.take() {
            Some(e) => Err(e),
            None => {
                log::info!("stopped");
                Ok(())
            }
        }
    }

    /// Starts, retires and announces workers so that `target` of the current generation
    /// run.
    fn converge(&mut self) {
        let grace = self.config.graceful_timeout + KILL_MARGIN;
        let current = |w: &&Worker| w.generation == self.generation && w.life.counts();
        let running = self.workers.iter().filter(current).count();
        let ready = self
            .workers
            .iter()
            .filter(current)
            .filter(|w| w.life == Life::Serving)
            .count();
        // Fewer workers wanted (SIGTTOU): the newest of the current generation drains.
        if running > self.target {
            if let Some(w) = self.workers.iter_mut().rev().find(|w| {
                w.generation == self.generation
                    && matches!(w.life, Life::Booting | Life::Serving | Life::Recycling)
            }) {
                retire(w, "one worker fewer", true, grace);
            }
        }
        // A reload: an old worker still starting serves nothing and goes at once; a
        // serving one goes only once a new one is ready to take its place, so the serving
        // capacity never drops below the target (a second SIGHUP during a reload included).
        let generation = self.generation;
        for w in self
            .workers
            .iter_mut()
            .filter(|w| w.generation < generation && w.life == Life::Booting)
        {
            retire(w, "reload: it was still starting", false, grace);
        }
        let old_serving = |w: &&mut Worker| {
            w.generation < generation && matches!(w.life, Life::Serving | Life::Recycling)
        };
        let old = self.workers.iter_mut().filter(old_serving).count();
        if old > 0 && ready + old > self.target {
            let excess = (ready + old - self.target).min(old);
            for w in self.workers.iter_mut().filter(old_serving).take(excess) {
                retire(w, "reload: its replacement is ready", false, grace);
            }
        }
        // Recycling: a worker that asked goes once the others and its replacement serve.
        if ready >= self.target {
            for w in self
                .workers
                .iter_mut()
                .filter(|w| w.life == Life::Recycling)
            {
                retire(w, "recycled: its replacement is ready", false, grace);
            }
        }
        let now = Instant::now();
        if let Some(every) = self.watchdog {
            if self.announced && now >= self.next_watchdog {
                self.next_watchdog = now + every / 2;
                self.feed_watchdog(now, every);
            }
        }
        self.kill_silent(now);
        self.kill_overdue_drains(now);
        if self.config.workers_max_rss > 0 && !self.rss_limit_off && now >= self.next_rss_check {
            self.next_rss_check = now + RSS_CHECK_EVERY;
            self.check_rss();
        }
        if self.spawn_after.is_some_and(|t| now < t) || self.awaiting_change {
            return;
        }
        self.spawn_after = None;
        let can_spawn = match self.preloader() {
            Preload::Off | Preload::Ready(_) => true,
            Preload::Importing => false,
            Preload::Missing => {
                if let Err(e) = self.start_preloader() {
                    log::error!("cannot start the preloader: {e}");
                    self.backoff();
                }
                false
            }
        };
        let wanted = if can_spawn { self.target } else { running };
        for _ in running..wanted {
            if let Err(e) = self.spawn() {
                log::error!("cannot start a worker: {e}");
                self.backoff();
                break;
            }
        }
        if !self.announced && ready >= self.target {
            self.announced = true;
            for i in 0..self.listeners.len() {
                log::info!("listening on {}", self.describe_listener(i));
            }
            if let Some((_, l)) = &self.metrics {
                log::info!("metrics on {}/metrics", l.describe());
            }
            self.notify(&format!(
                "READY=1\nMAINPID={}\nSTATUS={}",
                std::process::id(),
                self.status()
            ));
        }
        let old_left = self.workers.iter().any(|w| w.generation < self.generation);
        if self.reloading && !old_left && ready >= self.target {
            self.reloading = false;
            log::info!("reload done: {} new worker(s) serving", ready);
            self.notify(&format!("READY=1\nSTATUS={}", self.status()));
        }
    }

    fn next_timeout(&self) -> Duration {
        let now = Instant::now();
        let mut next = Duration::from_secs(1);
        if self.watchdog.is_some() {
            next = next.min(self.next_watchdog.saturating_duration_since(now));
        }
        let reload = self.watcher.as_ref().and_then(|w| w.deadline());
        for t in [self.spawn_after, self.stop_deadline, reload]
            .into_iter()
            .flatten()
        {
            next = next.min(t.saturating_duration_since(now));
        }
        next
    }

    /// Sleeps in poll(2) until a signal, a ready byte or the timeout.
    fn wait(&self, timeout: Duration) {
        let mut fds = vec![libc::pollfd {
            fd: self.signals.read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(w) = &self.watcher {
            fds.push(libc::pollfd {
                fd: w.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        for p in self
            .preloaders
            .iter()
            .filter(|p| p.state == preload::State::Importing)
        {
            fds.push(libc::pollfd {
                fd: p.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        for w in &self.workers {
            if let Some(p) = &w.status_pipe {
                fds.push(libc::pollfd {
                    fd: p.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the call's
        // duration. EINTR (a signal) simply ends the wait.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }

    fn on_signals(&mut self, got: Received) {
        if let Some(sig) = got.stop {
            self.begin_stop(Some(sig));
        }
        if got.quit {
            if self.stop_deadline.is_none() {
                log::info!("received SIGQUIT: stopping now");
                self.notify("STOPPING=1\nSTATUS=stopping now");
            }
            self.signal_all(libc::SIGQUIT);
            self.stop_deadline = Some(Instant::now() + QUIT_TIMEOUT);
            self.close_listeners();
        }
        if self.stop_deadline.is_some() {
            return;
        }
        if got.reload {
            self.begin_reload("received SIGHUP");
        }
        for _ in 0..got.more {
            self.target += 1;
            log::info!("received SIGTTIN: {} worker(s)", self.target);
        }
        for _ in 0..got.fewer {
            if self.target > 1 {
                self.target -= 1;
                log::info!("received SIGTTOU: {} worker(s)", self.target);
            } else {
                log::info!("received SIGTTOU: already at one worker, the fewest");
            }
        }
        if got.stats {
            self.signal_all(libc::SIGUSR2);
        }
        if got.reopen {
            log::reopen();
            log::info!("received SIGUSR1: the workers reopen their log files");
            self.signal_all(libc::SIGUSR1);
        }
    }

    /// A rolling reload: a new generation of workers starts; the old ones drain as the
    /// new ones are ready.
    fn begin_reload(&mut self, why: &str) {
        if let Some(OnReload(refresh)) = &self.command.on_reload {
            if let Err(e) = refresh() {
                log::error!("{e}; the new workers keep the settings read before");
            }
        }
        self.generation += 1;
        // `--preload`: the old preloader forks nothing more (a replacement is of the new
        // generation); a new one imports the new code.
        for p in &mut self.preloaders {
            if p.state != preload::State::Leaving {
                p.leave(libc::SIGTERM);
            }
        }
        // New code may be smaller: its workers are measured again when ready.
        self.rss_limit_off = false;
        self.reloading = true;
        // A reload is a new attempt: a generation that failed to boot (a syntax error
        // under `--reload`) does not make the next one wait out its backoff.
        self.boot_failures = 0;
        self.spawn_after = None;
        self.awaiting_change = false;
        self.notify(&format!(
            "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading",
            systemd::monotonic_usec()
        ));
        log::info!(
            "{why}: starting {} new worker(s); the old ones drain as they are ready",
            self.target
        );
    }

    /// `--reload`: a change under the app directory, quiet for a moment, reloads.
    fn check_watcher(&mut self) {
        let Some(w) = self.watcher.as_mut() else {
            return;
        };
        let now = Instant::now();
        w.read(now);
        if let Some(path) = w.due(now) {
            if self.stop_deadline.is_none() {
                self.begin_reload(&format!("--reload: {} changed", path.display()));
            }
        }
    }

    /// A graceful stop: `sig` received, or (`None`) the master's own decision, already
    /// logged with its reason.
    fn begin_stop(&mut self, sig: Option<i32>) {
        if self.stop_deadline.is_some() {
            return;
        }
        if let Some(sig) = sig {
            log::info!(
                "received signal {sig}: stopping {} worker(s) gracefully",
                self.workers.len()
            );
        }
        self.notify("STOPPING=1\nSTATUS=stopping");
        self.signal_all(libc::SIGTERM);
        self.stop_deadline = Some(Instant::now() + self.config.graceful_timeout + KILL_MARGIN);
        self.close_listeners();
    }

    /// At exit: its pid file (if still its own) and the Unix sockets it bound. Each is
    /// removed with the master's effective ids first, so that with `--user` root never
    /// acts on a path the user could have changed; only what the user may not remove (in
    /// a directory only root may write, as /run) is removed as root, the master's saved
    /// id taken back for it.
    fn remove_own_files(&mut self) {
        self.close_listeners();
        let sockets = std::mem::take(&mut self.closed_sockets);
        let pid_file = self.pid_file.take().and_then(PidFile::take_if_ours);
        // Only a socket where a socket was: never a file put there since.
        let is_socket = |p: &std::path::Path| {
            use std::os::unix::fs::FileTypeExt;
            std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket())
        };
        let mut denied = Vec::new();
        let files = sockets
            .into_iter()
            .map(|p| (p, true))
            .chain(pid_file.map(|p| (p, false)));
        for (path, socket) in files {
            if socket && !is_socket(&path) {
                continue;
            }
            if let Err(e) = std::fs::remove_file(&path) {
                if e.kind() == io::ErrorKind::PermissionDenied {
                    denied.push((path, socket));
                }
            }
        }
        if denied.is_empty() || self.config.identity.is_empty() {
            return;
        }
        self.config.identity.regain_root();
        for (path, socket) in denied {
            if !socket || is_socket(&path) {
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    /// A stop: the master's copies of the app's listening sockets close (the workers close
    /// theirs as they begin to drain), so a new connection is refused at once instead of
    /// waiting in a backlog nobody will accept from, to be reset at the end. (A socket
    /// systemd passed stays open in systemd, for the next start.)
    fn close_listeners(&mut self) {
        for l in self.listeners.drain(..) {
            self.closed_sockets.extend(l.close_keeping_file());
        }
    }

    fn describe_listeners(&self) -> String {
        let all: Vec<String> = (0..self.listeners.len())
            .map(|i| self.describe_listener(i))
            .collect();
        all.join(", ")
    }

    /// `http://ADDRESS`, `https://ADDRESS` where TLS covers it, or `unix:PATH`.
    fn describe_listener(&self, i: usize) -> String {
        let l = &self.listeners[i];
        let plain = l.describe();
        match plain.strip_prefix("http://") {
            Some(rest) if self.config.is_tls(i, matches!(l, Listener::Tcp(_))) => {
                format!("https://{rest}")
            }
            _ => plain,
        }
    }

    fn notify(&self, state: &str) {
        if let Some(n) = &self.notifier {
            n.send(state);
        }
    }

    /// The `STATUS=` line for systemd.
    fn status(&self) -> String {
        format!(
            "serving {} on {} with {} worker(s)",
            self.config.app,
            self.describe_listeners(),
            self.target
        )
    }

    /// Sends `sig` to every worker; a stop's (SIGTERM, SIGQUIT, SIGKILL) to the preloaders
    /// too.
    fn signal_all(&mut self, sig: libc::c_int) {
        for w in &self.workers {
            // SAFETY: kill(2) on a child we have not reaped yet (so the pid is still ours).
            unsafe { libc::kill(w.pid, sig) };
        }
        if matches!(sig, libc::SIGTERM | libc::SIGQUIT | libc::SIGKILL) {
            for p in &mut self.preloaders {
                p.leave(sig);
            }
        }
    }

    /// `WATCHDOG=1`, only while every serving worker has sent a heartbeat within the
    /// watchdog interval: a worker whose loop or handler threads stopped making progress
    /// lets the service manager's watchdog fire.
    fn feed_watchdog(&self, now: Instant, every: Duration) {
        let stale: Vec<libc::pid_t> = self
            .workers
            .iter()
            .filter(|w| matches!(w.life, Life::Serving | Life::Recycling))
            .filter(|w| now.saturating_duration_since(w.heartbeat) > every)
            .map(|w| w.pid)
            .collect();
        if stale.is_empty() {
            self.notify("WATCHDOG=1");
        } else {
            log::warning!("no progress from worker(s) {stale:?}: not feeding the systemd watchdog");
        }
    }

    /// `--silent-timeout`: a worker that was serving and has sent nothing for that long
    /// (stopped, or its loop frozen) is killed; `reap` replaces it.
    fn kill_silent(&mut self, now: Instant) {
        let limit = self.config.silent_timeout;
        for w in self
            .workers
            .iter_mut()
            .filter(|w| w.life.served() && w.life != Life::Killed)
        {
            let silent = now.saturating_duration_since(w.alive_at);
            if silent <= limit {
                continue;
            }
            log::error!(
                "worker {} sent no heartbeat for {:.1} s (--silent-timeout {:.1} s): it is \
                 stopped or its loop thread is stuck; killing it (SIGKILL) and starting a \
                 replacement",
                w.pid,
                silent.as_secs_f64(),
                limit.as_secs_f64()
            );
            w.life = Life::Killed;
            // SAFETY: kill(2) on our own unreaped child; SIGKILL ends a stopped process too.
            unsafe { libc::kill(w.pid, libc::SIGKILL) };
        }
    }

    /// A worker told to drain that still runs past `--graceful-timeout` and the margin: its
    /// SIGTERM did not stop it. Killed (SIGKILL), as a stop's leftovers are.
    fn kill_overdue_drains(&mut self, now: Instant) {
        for w in self.workers.iter_mut() {
            if w.drain_deadline.is_some_and(|d| now >= d) {
                w.drain_deadline = None;
                log::warning!(
                    "worker {} still runs {:.0} s after it was told to drain (--graceful-timeout \
                     and {} s): killing it (did the app install its own SIGTERM handler?)",
                    w.pid,
                    (self.config.graceful_timeout + KILL_MARGIN).as_secs_f64(),
                    KILL_MARGIN.as_secs()
                );
                // SAFETY: kill(2) on our own unreaped child.
                unsafe { libc::kill(w.pid, libc::SIGKILL) };
            }
        }
    }

    /// `--workers-max-rss`: a serving worker past the limit is recycled.
    fn check_rss(&mut self) {
        let limit_kib = self.config.workers_max_rss * 1024;
        for w in self.workers.iter_mut().filter(|w| w.life == Life::Serving) {
            let rss = rss_kib(w.pid);
            if rss > limit_kib {
                log::info!(
                    "worker {} uses {} MiB, over --workers-max-rss {}: recycling it",
                    w.pid,
                    rss / 1024,
                    self.config.workers_max_rss
                );
                w.life = Life::Recycling;
            }
        }
    }

    fn read_status_pipes(&mut self) {
        for p in self
            .preloaders
            .iter_mut()
            .filter(|p| p.state == preload::State::Importing)
        {
            match p.read() {
                preload::Said::Ready => log::debug!("preloader {} is ready to fork", p.pid),
                preload::Said::Refused(why) => {
                    log::warning!("{why}");
                    self.preload_off = Some(p.generation);
                }
                preload::Said::Nothing => {}
            }
        }
        let mut became_ready = false;
        for w in &mut self.workers {
            let ready = check_ready(w);
            became_ready |= ready;
            let limit_mib = self.config.workers_max_rss;
            if ready && limit_mib > 0 && !self.rss_limit_off {
                // Ready, it has imported the app and served little or nothing yet (it
                // accepts as it reports): its size now is about what every replacement
                // would start with. A reload turns the limit back on.
                let rss = rss_kib(w.pid);
                if rss > limit_mib * 1024 {
                    log::error!(
                        "worker {} uses {} MiB as it starts serving, over --workers-max-rss \
                         {limit_mib}: every worker would be recycled at once, so the limit is \
                         off; raise it above what a fresh worker uses",
                        w.pid,
                        rss / 1024
                    );
                    self.rss_limit_off = true;
                }
            }
        }
        if became_ready {
            self.ever_ready = true;
            self.boot_failures = 0;
        }
    }

    /// Collects exited workers; replaces the ones that were not meant to stop.
    fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid with WNOHANG and a valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            if let Some(i) = self.preloaders.iter().position(|p| p.pid == pid) {
                let p = self.preloaders.swap_remove(i);
                self.preloader_exited(p, status);
                continue;
            }
            // (With `--preload`, the master is a subreaper: a process the app left behind
            // is reaped here too.)
            let Some(i) = self.workers.iter().position(|w| w.pid == pid) else {
                continue;
            };
            let mut w = self.workers.swap_remove(i);
            if let (Some((region, _)), Some(slot)) = (&self.metrics, w.metrics_slot) {
                let scaled_down = matches!(
                    w.life,
                    Life::Draining {
                        scaled_down: true,
                        ..
                    }
                );
                region.release(slot, self.stop_deadline.is_none() && !scaled_down);
            }
            // It may have reported ready just before it exited.
            if check_ready(&mut w) {
                self.ever_ready = true;
                self.boot_failures = 0;
            }
            let how = describe_exit(status);
            if self.stop_deadline.is_some() || w.life.draining() {
                log::debug!("worker {pid} exited ({how})");
                continue;
            }
            if w.life == Life::Killed {
                log::info!("silent worker {pid} is gone; its replacement starts");
                continue;
            }
            if w.life.served() {
                log::warning!("worker {pid} died ({how}); starting a replacement");
                continue;
            }
            self.boot_failed(&format!("worker {pid}"), &how);
        }
    }

    /// `who` (a worker, or the preloader) exited (`how`) before it was ready.
    fn boot_failed(&mut self, who: &str, how: &str) {
        if self.watcher.is_some() {
            // --reload (development): the code is broken until the next edit.
            if !self.awaiting_change {
                self.awaiting_change = true;
                log::error!(
                    "{who} failed to boot ({how}): its error is above; --reload: waiting for \
                     a change under {} to try again",
                    self.config.app_dir.display()
                );
            }
            return;
        }
        if !self.ever_ready {
            // Said first, plainly; the stop that follows is the master's own.
            log::error!(
                "{who} failed to boot ({how}): the application cannot start (its error is \
                 above)"
            );
            self.fatal = Some("stopped: the application cannot start".into());
            self.begin_stop(None);
            return;
        }
        log::warning!("{who} failed to boot ({how}); retrying after a backoff");
        self.backoff();
    }

    /// A preloader exited with `status`: expected (told to leave, or a stop), a boot
    /// failure (it was importing), or a death (a new one is started when a worker is due).
    fn preloader_exited(&mut self, p: preload::Preloader, status: libc::c_int) {
        let how = describe_exit(status);
        let current = p.generation == self.generation;
        if self.stop_deadline.is_some() || p.state == preload::State::Leaving || !current {
            log::debug!("preloader {} exited ({how})", p.pid);
            return;
        }
        match p.state {
            preload::State::Importing => self.boot_failed(
                &format!("the preloader {} (it imports the app)", p.pid),
                &how,
            ),
            _ => {
                log::warning!(
                    "the preloader {} died ({how}); a new one imports the app (the workers \
                     serve on)",
                    p.pid
                );
                self.backoff();
            }
        }
    }

    /// `--preload`: the state of the current generation's preloader.
    fn preloader(&self) -> Preload {
        if !self.config.preload || self.preload_off == Some(self.generation) {
            return Preload::Off;
        }
        match self
            .preloaders
            .iter()
            .position(|p| p.generation == self.generation && p.state != preload::State::Leaving)
        {
            None => Preload::Missing,
            Some(i) if self.preloaders[i].state == preload::State::Ready => Preload::Ready(i),
            Some(_) => Preload::Importing,
        }
    }

    /// Starts the preloader of the current generation (its end of the control socket is
    /// its "status pipe").
    fn start_preloader(&mut self) -> io::Result<()> {
        let (mine, theirs) = crate::sys::ipc::Control::pair()?;
        let env = WorkerEnv {
            listeners: self.listeners.iter().map(Listener::raw_fd).collect(),
            status: theirs.as_raw_fd(),
            heartbeat: None,
            metrics: self.metrics.as_ref().map(|(region, listener)| MetricsFds {
                listener: listener.raw_fd(),
                region: region.raw_fd(),
                slot: None,
            }),
            cpu: None,
            preloader: true,
        };
        let pid = self.exec_process(&env)?;
        drop(theirs);
        log::info!(
            "preloader {pid} imports {} once for the workers it forks",
            self.config.app
        );
        self.preloaders
            .push(preload::Preloader::new(pid, self.generation, mine));
        Ok(())
    }

    fn backoff(&mut self) {
        self.boot_failures = self.boot_failures.saturating_add(1);
        let wait = BOOT_BACKOFF_MIN
            .saturating_mul(1 << self.boot_failures.min(8).saturating_sub(1))
            .min(BOOT_BACKOFF_MAX);
        self.spawn_after = Some(Instant::now() + wait);
    }

    /// `--cpu-affinity`: the first of `cpus` that the fewest workers still wanted (booting
    /// or serving: not one draining, recycling or killed) are pinned to, so the Nth worker
    /// started gets the Nth CPU and a replacement its predecessor's. Only CPUs the master
    /// may still use are taken, while any is left (its own set narrowed since it started).
    fn next_cpu(&self, cpus: &[usize]) -> Option<usize> {
        let now = crate::sys::allowed_cpus().unwrap_or_default();
        let usable: Vec<usize> = cpus.iter().copied().filter(|c| now.contains(c)).collect();
        let from = if usable.is_empty() { cpus } else { &usable };
        from.iter().copied().min_by_key(|c| {
            self.workers
                .iter()
                .filter(|w| w.life.counts() && w.cpu == Some(*c))
                .count()
        })
    }

    /// Starts a worker with the listeners and a status pipe: forked by the preloader
    /// (`--preload`), or a fork that executes the worker command.
    fn spawn(&mut self) -> io::Result<()> {
        // Non-blocking: the master reads a pipe only when poll says so, but must never wait
        // on a worker that is still starting.
        let (status_read, status_write) = crate::sys::pipe(libc::O_NONBLOCK)?;
        // `--metrics-port`: the lowest slot no live worker holds.
        let metrics_slot = self.metrics.as_ref().and_then(|(region, _)| {
            (0..region.slots()).find(|s| self.workers.iter().all(|w| w.metrics_slot != Some(*s)))
        });
        // A worker without a slot still answers scrapes and `/healthz` (a liveness probe
        // may ask it); it only counts nothing.
        if self.metrics.is_some() && metrics_slot.is_none() {
            log::warning!("no metrics slot is free: this worker's requests are not counted");
        }
        let cpu = self
            .config
            .cpu_affinity
            .as_deref()
            .and_then(|cpus| self.next_cpu(cpus));
        let worker_env = WorkerEnv {
            listeners: self.listeners.iter().map(Listener::raw_fd).collect(),
            status: status_write.as_raw_fd(),
            heartbeat: self.watchdog.map(|w| w / 4),
            metrics: self.metrics.as_ref().map(|(region, listener)| MetricsFds {
                listener: listener.raw_fd(),
                region: region.raw_fd(),
                slot: metrics_slot,
            }),
            cpu,
            preloader: false,
        };
        let pid = match self.preloader() {
            Preload::Ready(i) => {
                let generation = self.preloaders[i].generation;
                match self.preloaders[i].fork(&worker_env, status_write.as_fd()) {
                    Ok(pid) => pid,
                    Err(preload::NotForked::Refused(why)) => {
                        log::warning!("{why}");
                        self.preload_off = Some(generation);
                        self.exec_process(&worker_env)?
                    }
                    Err(preload::NotForked::Failed(why)) => {
                        return Err(io::Error::other(format!("the preloader: {why}")))
                    }
                    Err(preload::NotForked::Broken(why)) => {
                        return Err(io::Error::other(format!(
                            "the preloader {} is killed: {why}",
                            self.preloaders[i].pid
                        )))
                    }
                }
            }
            _ => self.exec_process(&worker_env)?,
        };
        drop(status_write);
        match cpu {
            Some(cpu) => log::debug!("started worker {pid} (on CPU {cpu})"),
            None => log::debug!("started worker {pid}"),
        }
        if let (Some((region, _)), Some(slot)) = (&self.metrics, metrics_slot) {
            region.claim(slot, pid);
        }
        self.workers.push(Worker {
            pid,
            life: Life::Booting,
            status_pipe: Some(status_read),
            heartbeat: Instant::now(),
            alive_at: Instant::now(),
            generation: self.generation,
            metrics_slot,
            cpu,
            drain_deadline: None,
        });
        Ok(())
    }

    /// Forks a child that executes the worker command (a worker, or the preloader) with
    /// the descriptors `env` names, and the environment variable that names them.
    fn exec_process(&self, env: &WorkerEnv) -> io::Result<libc::pid_t> {
        let env_var = format!("{WORKER_ENV}={}", env.encode());
        let keep: Vec<RawFd> = env.fds().collect();
        let child = crate::sys::spawn::Child {
            program: &self.command.program,
            opened: self.program_fd.as_ref().map(|fd| fd.as_fd()),
            argv: &self.command.argv,
            env_var: &env_var,
            keep_fds: &keep,
            ids: self.config.identity.ids(),
            reset_signals: MASTER_SIGNALS,
        };
        // SAFETY: the master is single-threaded: it never starts a thread.
        unsafe { crate::sys::spawn::fork_exec(&child) }
    }
}

/// `--preload`: the current generation's preloader, as `Master::preloader` finds it.
enum Preload {
    /// No preloader is used: the workers execute the program.
    Off,
    /// None runs: one is to be started.
    Missing,
    /// It is importing the app: no worker starts until it is done.
    Importing,
    /// It forks workers (its index in `Master::preloaders`).
    Ready(usize),
}

/// Reads what a worker wrote on its status pipe, without waiting; `true` when it just
/// reported ready.
fn check_ready(w: &mut Worker) -> bool {
    let Some(p) = &w.status_pipe else {
        return false;
    };
    let mut buf = [0u8; 16];
    // SAFETY: reading into a live buffer from a non-blocking descriptor we own.
    let n = unsafe { libc::read(p.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n == 0 {
        // Closed: it is exiting; `reap` tells why.
        w.status_pipe = None;
        return false;
    }
    let mut became_ready = false;
    if n > 0 {
        w.alive_at = Instant::now();
    }
    for status in buf[..n.max(0) as usize]
        .iter()
        .filter_map(|&b| Status::from_byte(b))
    {
        match status {
            Status::Heartbeat => w.heartbeat = Instant::now(),
            Status::Ready if !w.life.served() => {
                w.life = match w.life {
                    Life::Draining { scaled_down, .. } => Life::Draining {
                        served: true,
                        scaled_down,
                    },
                    _ => Life::Serving,
                };
                became_ready = true;
                log::debug!("worker {} is ready", w.pid);
            }
            Status::Recycle if w.life == Life::Serving => {
                log::info!(
                    "worker {} asked to be replaced (--max-requests or --timeout): recycling it",
                    w.pid
                );
                w.life = Life::Recycling;
            }
            _ => {}
        }
    }
    became_ready
}

/// A process's resident memory, KiB (0 when it cannot be read).
fn rss_kib(pid: libc::pid_t) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Tells a worker to drain (`scaled_down`: because fewer are wanted).
/// Tells `w` to drain (SIGTERM); it is killed if it still runs `grace` from now (an app
/// that installed its own SIGTERM handler while serving can keep it from stopping).
fn retire(w: &mut Worker, why: &str, scaled_down: bool, grace: Duration) {
    w.life = Life::Draining {
        served: w.life.served(),
        scaled_down,
    };
    w.drain_deadline = Some(Instant::now() + grace);
    log::info!("worker {} drains: {why}", w.pid);
    // SAFETY: kill(2) on our own unreaped child.
    unsafe { libc::kill(w.pid, libc::SIGTERM) };
}

fn describe_exit(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exit code {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("status {status:#x}")
    }
}
