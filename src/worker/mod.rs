//! One worker process: take the listener the master bound, start Python, import the app,
//! start the handler threads and the loop thread, tell the master it is ready, and wait
//! for a stop.

pub(crate) mod conn;
pub(crate) mod event_loop;
pub(crate) mod handler;
pub(crate) mod inline;
pub(crate) mod placement;
pub(crate) mod placer;
pub(crate) mod preload;
pub(crate) mod tls;

use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;

use crate::config::Config;
use crate::log;
use crate::pipeline::ring;
use crate::pipeline::shared::{HandlerShared, LoopShared, REQUEST_RING_SLOTS, RESPONSE_RING_SLOTS};
use crate::python;
use crate::sys::ipc::{MetricsFds, Status, WorkerEnv, WORKER_ENV};
use crate::sys::listen::Listener;
use crate::sys::signals::SignalPipe;
use crate::wsgi::ServerInfo;
use event_loop::{EventLoop, HandlerLink, LoopOptions, LoopWiring, MetricsPort, Responses};
use handler::HandlerSetup;
use inline::InlineSetup;

/// glibc's malloc serves the interpreter (Rust's allocations go to mimalloc: `lib.rs`).
/// Allocations this large or larger still come from the heap, not from a fresh `mmap`
/// (glibc's default is 128 KiB): a 1 MiB `bytes` (a body the app built, or read from
/// `wsgi.input`) then reuses warm pages instead of faulting in 256 new ones every request.
const MALLOC_MMAP_THRESHOLD_BYTES: i32 = 32 * 1024 * 1024;

/// Free memory at the top of a heap is given back to the kernel only past this (glibc's
/// default is 128 KiB): below it, a large block freed and allocated again keeps its pages.
/// Measured: a 64 KiB response spent a third of the handler's time in page faults with the
/// defaults (benchmarks/decisions.md, "malloc thresholds", when Rust's buffers came from
/// glibc too).
const MALLOC_TRIM_THRESHOLD_BYTES: i32 = 64 * 1024 * 1024;

/// Keeps the interpreter's large buffers on warm pages (see the constants). Before any
/// thread starts.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before other threads
    // exist. A rejected value (0 returned) leaves glibc's default, which is still correct.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES);
        libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD_BYTES);
    }
}

/// Descriptors beyond `--max-connections` the worker's table is grown for at its start:
/// listeners, the loop's own, the app's files and sockets.
const FD_HEADROOM: usize = 256;

/// `--scheduling-policy batch`: the calling thread (the loop or a handler) becomes
/// SCHED_BATCH (`sys::batch_scheduling`), or the log says why not and it serves on as it is.
fn enter_batch_scheduling(thread: &str) {
    if let Err(e) = crate::sys::batch_scheduling() {
        log::warning!("cannot make the {thread} thread SCHED_BATCH: {e}");
    }
}

/// What a worker gets from the master across its exec.
pub(crate) struct Inherited {
    listener_fds: Vec<RawFd>,
    /// For the systemd watchdog: how often to tell the master that this worker's threads
    /// make progress.
    heartbeat: Option<Duration>,
    /// The status pipe's write end (`ipc::Status`).
    status_pipe: OwnedFd,
    metrics: Option<MetricsFds>,
    /// `--cpu-affinity`: the CPU the master chose for this worker.
    cpu: Option<usize>,
    /// `--preload`: this process is the preloader (`preload::run`), and `status_pipe` its
    /// control socket.
    preloader: bool,
}

impl Inherited {
    /// This process is the preloader, not a worker (`--preload`).
    pub(crate) fn is_preloader(&self) -> bool {
        self.preloader
    }
}

impl Inherited {
    /// The descriptors named in the environment by the master (`ipc::WORKER_ENV`), or
    /// `None` when this process is not a worker. The variable is removed, so nothing the
    /// app starts mistakes itself for a worker.
    pub(crate) fn from_env() -> Result<Option<Inherited>, String> {
        let Some(value) = std::env::var_os(WORKER_ENV) else {
            return Ok(None);
        };
        std::env::remove_var(WORKER_ENV);
        let env = WorkerEnv::decode(&value.to_string_lossy())?;
        // The master left them open across its exec; nothing the app starts (a
        // subprocess, a fork) may inherit them: a daemonised child would keep the port bound
        // after the server exits.
        for fd in env.fds() {
            // SAFETY: fcntl on descriptors this process was handed; a failure leaves the
            // descriptor inheritable, which is no worse than before.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        Ok(Some(Inherited {
            listener_fds: env.listeners,
            heartbeat: env.heartbeat,
            // SAFETY: the master left this pipe's write end open across the exec for this
            // process alone to own.
            status_pipe: unsafe { OwnedFd::from_raw_fd(env.status) },
            metrics: env.metrics,
            cpu: env.cpu,
            preloader: env.preloader,
        }))
    }
}

/// A random number in `0..n` (for the jitter), from getrandom(2); 0 if it fails. The
/// system call itself, not glibc's wrapper (2.25 and later): the wheels are built for glibc
/// 2.17 (manylinux2014).
fn random_below(n: u64) -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into the live buffer.
    let got = unsafe { libc::syscall(libc::SYS_getrandom, b.as_mut_ptr(), b.len(), 0) };
    if got != b.len() as libc::c_long || n == 0 {
        return 0;
    }
    u64::from_ne_bytes(b) % n
}

/// The worker's line to the master: the status pipe (`ipc::Status`: ready, replace me, the
/// heartbeat), how often to send heartbeats, and the shared metrics.
struct ToMaster {
    status_pipe: OwnedFd,
    heartbeat: Option<Duration>,
    metrics: Option<Metrics>,
}

/// `--metrics-port`: the socket scrapes come to, the counters (if this worker can use
/// the file), and its slot in them (if it has one). Without both it counts nothing, but
/// still answers `/healthz`, and `/metrics` from the file when it could map it.
struct Metrics {
    listener: Listener,
    region: Option<Arc<crate::metrics::Region>>,
    slot: Option<usize>,
}

impl Metrics {
    /// Handler `h`'s section, if the file has one (a worker started with more
    /// `--blocking-threads` than the master sized it for, after a `--config` change and a
    /// SIGHUP, counts only the first ones).
    fn handler(&self, h: usize) -> Option<crate::metrics::Recorder> {
        let (region, slot) = (self.region.as_ref()?, self.slot?);
        (h < region.handlers())
            .then(|| crate::metrics::Recorder::for_handler(region.clone(), slot, h))
    }

    /// The loop's section.
    fn for_loop(&self) -> Option<crate::metrics::Recorder> {
        let (region, slot) = (self.region.as_ref()?, self.slot?);
        Some(crate::metrics::Recorder::for_loop(region.clone(), slot))
    }
}

pub(crate) fn run(config: Config, inherited: Inherited) -> Result<(), String> {
    // The master switched before it started this process; this checks that the switch
    // held (and makes it, should a worker ever start as root).
    config.identity.assume()?;
    // Before the import: threads the app starts then inherit the CPU and the table.
    prepare_process(&config, inherited.cpu);
    let signals =
        SignalPipe::install().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let interpreter = python::initialize(config.venv.as_deref())?;
    // The GIL boundary of the main thread: it holds the GIL from initialisation to here,
    // imports the app, then releases it for good while the worker runs.
    Python::attach(|py| {
        let imported = import(py, &config, &interpreter, Purpose::Serve)?;
        start(py, config, inherited, signals, imported)
    })
}

/// What the process needs before any thread starts: its CPU (`--cpu-affinity`; the loop,
/// the handlers and the app's threads inherit it), glibc's thresholds, and a descriptor
/// table with room for every connection the worker may hold and some for the app's files
/// (`sys::presize_fd_table`).
fn prepare_process(config: &Config, cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        match crate::sys::pin_to_cpu(cpu) {
            Ok(()) => log::debug!("pinned to CPU {cpu}"),
            Err(e) => log::warning!("cannot pin this worker to CPU {cpu} ({e}): it runs unpinned"),
        }
    }
    tune_malloc();
    if let Err(e) = crate::sys::presize_fd_table(config.max_connections.saturating_add(FD_HEADROOM))
    {
        log::debug!("cannot grow the descriptor table ahead ({e}): it grows as needed");
    }
}

/// The app, imported (a callable), and the interpreter that imported it, described for the
/// log.
pub(crate) struct Imported {
    app: Py<PyAny>,
    pub(crate) interp: String,
}

/// What an import is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// A worker's, or the preloader's for the workers it forks.
    Serve,
    /// `--check-config`'s: nothing of the process is changed for serving.
    Check,
}

/// Imports the app from the configuration's directories, the one import of every process
/// that has one (a worker, the preloader, `--check-config`). To serve, the interpreter's
/// output is line-buffered and `os._exit` hooked first, and any signal handler the import
/// installed is taken back.
pub(crate) fn import(
    py: Python<'_>,
    config: &Config,
    interpreter: &python::Interpreter,
    purpose: Purpose,
) -> Result<Imported, String> {
    let interp = python::describe(py, interpreter);
    if purpose == Purpose::Serve {
        python::line_buffer_stdout(py);
        // Before the app is imported, so that `from os import _exit` gets it too.
        python::hook_os_exit(py).map_err(|e| format!("cannot replace os._exit: {e}"))?;
        log::info!("importing {} with {interp}", config.app);
    }
    let app = python::load_app(
        py,
        &config.app,
        &config.app_dir,
        &config.pythonpath,
        &interp,
    )?;
    if purpose == Purpose::Check {
        return Ok(Imported { app, interp });
    }
    let taken = crate::sys::signals::reclaim();
    if !taken.is_empty() {
        log::warning!(
            "{} installed its own handler for {} while it was imported; m0serve's is back \
             (the worker stops as the master asks; the app's handler does not run)",
            config.app,
            taken.join(", ")
        );
    }
    Ok(Imported { app, interp })
}

/// A worker whose app is imported: it takes the descriptors the master handed it, starts
/// its handler threads and its loop, says it is ready, and serves until it is told to stop.
/// The caller holds the GIL; it is released here for good.
fn start(
    py: Python<'_>,
    config: Config,
    inherited: Inherited,
    signals: SignalPipe,
    Imported { app, interp }: Imported,
) -> Result<(), String> {
    let listeners = inherited
        .listener_fds
        .iter()
        .map(|&fd| Listener::from_inherited(fd))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("cannot use the listening sockets from the master: {e}"))?;
    let metrics = inherited
        .metrics
        .map(|fds| take_metrics(&config, fds))
        .transpose()?;
    let (server_name, server_port) = listeners
        .first()
        .map(Listener::server_name_port)
        .unwrap_or_else(|| ("localhost".into(), "0".into()));
    let info = Arc::new(ServerInfo {
        server_name,
        server_port,
        other_listeners: listeners
            .iter()
            .skip(1)
            .map(Listener::server_name_port)
            .collect(),
        multithread: config.max_blocking_threads > 1,
        multiprocess: config.workers > 1,
        trusted: config.trusted.clone(),
        root_path: config.root_path.clone(),
    });
    if config.timeout.is_some() {
        python::register_stack_dump(py)
            .map_err(|e| format!("--timeout: cannot register faulthandler for stack dumps: {e}"))?;
    }
    // Inline mode (`--blocking-threads 0`) has one bridge, on the loop thread; the last
    // reference is the pool's, for the threads it starts later.
    let apps: Vec<Py<PyAny>> = (0..config.blocking_threads.max(1) + 1)
        .map(|_| app.clone_ref(py))
        .collect();
    let to_master = ToMaster {
        status_pipe: inherited.status_pipe,
        heartbeat: inherited.heartbeat,
        metrics,
    };
    let result =
        py.detach(move || serve(&config, listeners, signals, info, apps, interp, to_master));
    python::flush_stdio(py);
    result
}

/// `--metrics-port`: the socket and the shared counters the master handed over. Metrics
/// are not worth failing to serve for: a file this worker cannot use (a master of another
/// version, after an upgrade and SIGHUP) leaves it uncounted, with a warning.
fn take_metrics(config: &Config, fds: MetricsFds) -> Result<Metrics, String> {
    let MetricsFds {
        listener,
        region,
        slot,
    } = fds;
    let listener = Listener::from_inherited(listener)
        .map_err(|e| format!("cannot use the metrics socket from the master: {e}"))?;
    let region = match crate::metrics::Region::open(region) {
        Ok(r) => Some(Arc::new(r)),
        Err(e) => {
            log::warning!("cannot use the shared metrics ({e}): this worker is not counted");
            None
        }
    };
    let slot = match (&region, slot) {
        (Some(r), Some(s)) if s < r.slots() => Some(s),
        (Some(r), Some(s)) => {
            log::warning!(
                "metrics slot {s} is not in the shared file ({} slots): this worker is not \
                 counted",
                r.slots()
            );
            None
        }
        _ => None,
    };
    if let Some(r) = region
        .as_ref()
        .filter(|r| config.max_blocking_threads.max(1) > r.handlers())
    {
        log::warning!(
            "the shared metrics have room for {} handler thread(s) per worker (the master's \
             --max-blocking-threads): the others are not counted",
            r.handlers()
        );
    }
    Ok(Metrics {
        listener,
        region,
        slot,
    })
}

/// The worker's loop, for `flush_before_death`.
static DYING_LOOP: std::sync::OnceLock<Arc<LoopShared>> = std::sync::OnceLock::new();

/// How long a dying thread waits for the loop to write what was finished: the loop's pass
/// takes microseconds, unless the crash left the process unable to go on.
const DEATH_FLUSH_WAIT: Duration = Duration::from_millis(500);

/// The fatal-signal and `os._exit` hook (`sys::fatal`).
fn flush_before_death() {
    if let Some(l) = DYING_LOOP.get() {
        l.flush_before_death(DEATH_FLUSH_WAIT);
    }
}

fn serve(
    config: &Config,
    listeners: Vec<Listener>,
    signals: SignalPipe,
    info: Arc<ServerInfo>,
    apps: Vec<Py<PyAny>>,
    interp: String,
    to_master: ToMaster,
) -> Result<(), String> {
    let ToMaster {
        status_pipe,
        heartbeat,
        metrics,
    } = to_master;
    let poll = mio::Poll::new().map_err(|e| format!("cannot create the poller: {e}"))?;
    let waker = mio::Waker::new(poll.registry(), mio::Token(1))
        .map_err(|e| format!("cannot create the loop waker: {e}"))?;
    let loop_shared = Arc::new(LoopShared::new(waker));
    // A handler thread that dies (a fatal signal, the app's `os._exit`) first has the loop
    // write the responses finished before it.
    let _ = DYING_LOOP.set(loop_shared.clone());
    if let Err(e) = crate::sys::fatal::install(flush_before_death) {
        log::warning!("cannot hook the fatal signals: {e}");
    }
    let access_log = open_access_log(config)?;
    // The loop's watchdog reads a handler's busy clock (`--timeout`, the heartbeat).
    let watch = config.timeout.is_some() || heartbeat.is_some();
    let outlets = Outlets {
        loop_shared: &loop_shared,
        info: &info,
        access_log: &access_log,
        metrics: metrics.as_ref(),
    };
    let Handlers {
        links,
        inline,
        pool_app,
    } = start_handlers(config, apps, &outlets, watch)?;
    let opts = loop_options(config, &listeners, heartbeat);
    let static_files = open_static_files(config)?;
    let spawner = handler::Spawner {
        loop_shared: loop_shared.clone(),
        app: pool_app,
        info,
        access_log: access_log.clone(),
        metrics: metrics
            .as_ref()
            .and_then(|m| Some((m.region.clone()?, m.slot?))),
        batch_scheduling: config.batch_scheduling,
        watch,
        // Where the pool's threads run: the worker's CPUs now, before the loop places
        // itself.
        cpus: crate::sys::allowed_cpus().ok(),
    };
    let wiring = LoopWiring {
        poll,
        listeners,
        signals,
        shared: loop_shared,
        spawner: (config.max_blocking_threads > links.len()).then_some(spawner),
        handlers: links,
        static_files,
        status_pipe: status_pipe.try_clone().ok(),
        access_log,
        metrics: metrics.map(|m| {
            let recorder = m.for_loop();
            MetricsPort {
                listener: m.listener,
                region: m.region,
                recorder,
            }
        }),
    };
    let loop_thread = start_loop(wiring, opts, inline, config.batch_scheduling)?;
    let shape = match config.blocking_threads {
        0 => "the app inline on the loop thread".to_string(),
        n => format!("{n} handler thread(s)"),
    };
    log::info!(
        "worker: m0serve {} serving {} with {shape}, {interp}",
        env!("CARGO_PKG_VERSION"),
        config.app,
    );
    crate::sys::signals::serving();
    // The master counts this worker as serving from here.
    Status::Ready.send(status_pipe.as_fd());
    loop_thread
        .join()
        .map_err(|_| "the loop thread panicked".to_string())?;
    log::info!("stopped");
    Ok(())
}

/// `--access-log`: its file opened (once per worker, shared by its threads).
fn open_access_log(config: &Config) -> Result<Option<Arc<crate::access_log::AccessLog>>, String> {
    let Some((target, format)) = &config.access_log else {
        return Ok(None);
    };
    Ok(Some(Arc::new(crate::access_log::AccessLog {
        format: format.clone(),
        sink: crate::access_log::LogFile::open(target)
            .map_err(|e| format!("--access-log-file {}: {e}", target.describe()))?,
    })))
}

/// What every handler writes to besides its rings.
struct Outlets<'a> {
    loop_shared: &'a Arc<LoopShared>,
    info: &'a Arc<ServerInfo>,
    access_log: &'a Option<Arc<crate::access_log::AccessLog>>,
    metrics: Option<&'a Metrics>,
}

/// The handlers at start: the threads' links, inline mode's setup, and the app for the
/// threads the pool starts later.
struct Handlers {
    links: Vec<HandlerLink>,
    inline: Option<InlineSetup>,
    pool_app: Arc<Py<PyAny>>,
}

/// Starts `--blocking-threads` handler threads (or sets up inline mode), one reference of
/// the app each (`apps`: one more than the threads, the last the pool's).
fn start_handlers(
    config: &Config,
    mut apps: Vec<Py<PyAny>>,
    o: &Outlets<'_>,
    watch: bool,
) -> Result<Handlers, String> {
    let pool_app = Arc::new(apps.pop().ok_or("no application object")?);
    let mut inline = None;
    if config.blocking_threads == 0 {
        let (tx, rx) = ring::ring(REQUEST_RING_SLOTS);
        inline = Some(InlineSetup {
            tx,
            rx,
            shared: Arc::new(HandlerShared::new(0, false)),
            app: apps.pop().ok_or("no application object")?,
            info: o.info.clone(),
            access_log: o.access_log.clone(),
            metrics: o.metrics.and_then(|m| m.handler(0)),
        });
    }
    let mut links = Vec::with_capacity(apps.len());
    for (idx, app) in apps.into_iter().enumerate() {
        let (req_tx, req_rx) = ring::ring(REQUEST_RING_SLOTS);
        let (resp_tx, resp_rx) = ring::ring(RESPONSE_RING_SLOTS);
        let shared = Arc::new(HandlerShared::new(idx, watch));
        let join = handler::spawn(HandlerSetup {
            idx,
            rx: req_rx,
            tx: resp_tx,
            shared: shared.clone(),
            loop_shared: o.loop_shared.clone(),
            app: handler::App::Own(app),
            info: o.info.clone(),
            access_log: o.access_log.clone(),
            metrics: o.metrics.and_then(|m| m.handler(idx)),
            batch_scheduling: config.batch_scheduling,
            cpus: None,
        })
        .map_err(|e| format!("cannot start handler thread {idx}: {e}"))?;
        links.push(HandlerLink::new(
            req_tx,
            Responses::Ring(resp_rx),
            shared,
            Some(join),
        ));
    }
    Ok(Handlers {
        links,
        inline,
        pool_app,
    })
}

/// The loop's settings, from the configuration and the listeners it serves.
fn loop_options(
    config: &Config,
    listeners: &[Listener],
    heartbeat: Option<Duration>,
) -> LoopOptions {
    LoopOptions {
        shared_listener: config.workers > 1,
        limits: config.limits,
        max_body_bytes: config.max_body_size,
        body_buffer: config.body_buffer_size,
        max_connections: config.max_connections,
        timeouts: config.timeouts,
        timeout: config.timeout.filter(|_| config.blocking_threads > 0),
        heartbeat,
        max_requests: if config.max_requests == 0 {
            0
        } else {
            config.max_requests + random_below(config.max_requests_jitter + 1)
        },
        stats: config.stats,
        static_response: config.static_response,
        adaptive_affinity: config.adaptive_affinity,
        idle_poll: config.idle_poll,
        graceful_timeout: config.graceful_timeout,
        root_path: config.root_path.clone().filter(|_| !config.root_path_app),
        tls: listeners
            .iter()
            .enumerate()
            .map(|(i, l)| {
                config
                    .tls
                    .clone()
                    .filter(|_| config.is_tls(i, matches!(l, Listener::Tcp(_))))
            })
            .collect(),
        proxy_protocol: config.proxy_protocol.then(|| config.proxy_allow.clone()),
        max_handlers: config.max_blocking_threads,
        handler_idle: config.blocking_threads_idle,
        max_websockets: config.max_websockets,
        max_queue_wait: config.max_queue_wait,
    }
}

/// `--static-map`: each mount's directory, opened as this worker's user.
fn open_static_files(config: &Config) -> Result<Option<event_loop::statics::StaticFiles>, String> {
    event_loop::statics::StaticFiles::open(&event_loop::statics::StaticOptions {
        mounts: config.static_map.clone(),
        types: config.mime_types.clone(),
        max_age: config.static_max_age,
        index: config.static_index,
        follow_links: config.static_follow_symlinks,
    })
}

/// Builds and runs the loop on its own thread (inline mode's bridge must never leave it);
/// returns once the loop says it is set up, before anything is logged as listening.
fn start_loop(
    wiring: LoopWiring,
    opts: LoopOptions,
    inline: Option<InlineSetup>,
    batch_scheduling: bool,
) -> Result<std::thread::JoinHandle<()>, String> {
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let loop_thread = std::thread::Builder::new()
        .name("m0s-loop".into())
        .spawn(move || {
            // It cannot wait for its own pass (inline, it writes each response before
            // the next request runs anyway).
            crate::sys::fatal::exempt_this_thread();
            if batch_scheduling {
                enter_batch_scheduling("loop");
            }
            let ready = move |r: Result<(), String>| {
                let _ = ready_tx.send(r);
            };
            match EventLoop::new(wiring, opts) {
                Ok(event_loop) => event_loop.run(inline, ready),
                Err(e) => ready(Err(format!("cannot start the event loop: {e}"))),
            }
        })
        .map_err(|e| format!("cannot start the loop thread: {e}"))?;
    let started = ready_rx
        .recv()
        .unwrap_or_else(|_| Err("the loop thread ended before it started".into()));
    if let Err(e) = started {
        let _ = loop_thread.join();
        return Err(e);
    }
    Ok(loop_thread)
}
