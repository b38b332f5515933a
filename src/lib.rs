//! m0serve: a WSGI (PEP 3333) application server.
//!
//! One mio event-loop thread (`worker::event_loop`) owns every socket and never runs
//! Python; handler threads (`worker::handler`) hold the GIL while they run the app. The
//! two meet through lock-free SPSC rings (`pipeline::ring`) with a park-only-if-parked
//! handshake (`pipeline::park`).
//! `docs/architecture.md` walks one request through these modules.

#![cfg_attr(loom, allow(dead_code))]

// Under `--cfg loom` only the lock-free core is built: the models in `pipeline::ring` and
// `pipeline::park` exercise it, and nothing else may run on loom's atomics.
#[cfg(not(loom))]
pub(crate) mod access_log;
#[cfg(not(loom))]
pub(crate) mod cli;
#[cfg(not(loom))]
pub(crate) mod config;
#[cfg(not(loom))]
pub(crate) mod http;
#[cfg(not(loom))]
pub(crate) mod log;
#[cfg(not(loom))]
pub(crate) mod master;
#[cfg(not(loom))]
pub(crate) mod metrics;
#[cfg(not(loom))]
pub(crate) mod package;
pub(crate) mod pipeline;
#[cfg(not(loom))]
pub(crate) mod python;
#[cfg(not(loom))]
pub(crate) mod sys;
#[cfg(not(loom))]
pub(crate) mod text;
#[cfg(not(loom))]
pub(crate) mod tls;
#[cfg(not(loom))]
pub(crate) mod worker;
#[cfg(not(loom))]
pub(crate) mod wsgi;

/// The parts the benchmarks (`benches/`) and the fuzz targets (`fuzz/`) drive directly.
/// Not an API: the crate's one public function is [`run`]; everything else is
/// `pub(crate)`, so that the compiler finds what nothing uses.
#[cfg(not(loom))]
#[doc(hidden)]
pub mod internals {
    pub use crate::http::body::ChunkedDecoder;
    pub use crate::http::date::DateCache;
    pub use crate::http::encode::{decide_framing, HeadWriter};
    pub use crate::http::limits::Limits;
    pub use crate::http::parse::{parse_head, Version};
    pub use crate::http::proxy_protocol;
    pub use crate::http::static_files;
    pub use crate::pipeline::msg::{ConnRef, Peer, Request};
    pub use crate::pipeline::park::{wait_until, WakeFlag};
    pub use crate::pipeline::ring::{ring, Consumer, Producer};
    pub use crate::pipeline::shared::{HandlerShared, LoopShared};
    pub use crate::python::initialize;
    pub use crate::worker::conn::{Conn, Effects, Next, ReadCtx, Sock};
    pub use crate::wsgi::environ::EnvBuilder;
    pub use crate::wsgi::{Bridge, Observers, ServerInfo, Sink};
}

/// Every Rust allocation of the binary and of the Python package's extension module.
/// Buffers cross threads: the loop allocates a request that a handler frees, and a handler
/// a response that the loop frees. glibc's malloc frees a chunk into the arena of the thread
/// that allocated it, under that arena's lock, so the loop's frees contended with the
/// handler's own allocations (and the interpreter's, which share its arena): `perf` counted
/// a quarter of the worker's futex calls in `__lll_lock_wait_private`/`_wake_private`.
/// mimalloc frees another thread's block onto that block's page with one atomic push.
/// Measured in benchmarks/decisions.md ("mimalloc"). Built without transparent huge pages
/// (`no_thp`): with them each thread's first arena took a 2 MiB page, 8 MiB more per worker
/// at rest.
#[cfg(not(loom))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `--check-config`: the flags are valid (they parsed), and the app imports and is
/// callable. Nothing is bound and no worker starts.
#[cfg(not(loom))]
fn check(config: &config::Config, host: &Host) -> Result<String, String> {
    use pyo3::prelude::*;
    for w in check_places(config)? {
        eprintln!("m0serve: warning: {w}");
    }
    let as_user = check_as_user(config, host)?;
    let interpreter = python::initialize(config.venv.as_deref())?;
    Python::attach(|py| {
        let imported = worker::import(py, config, &interpreter, worker::Purpose::Check)?;
        Ok(format!(
            "{} imports and is callable ({}){as_user}; would listen on {}",
            config.app,
            imported.interp,
            config.describe_listen()
        ))
    })
}

/// `--user`/`--group`: a start binds and writes its pid file with the ids it was started
/// with, then the master and its workers switch to these. So the check switches too, and
/// what the workers use is checked as them: the program a worker runs, the TLS files and
/// the access log (each worker opens them), the app's directories, and then the import.
/// Only root can switch: another user's check says it did not (a warning, as for what
/// only the host the server runs on has). `" as ..."` for the report, or nothing.
#[cfg(not(loom))]
fn check_as_user(config: &config::Config, host: &Host) -> Result<String, String> {
    let who = &config.identity.describe;
    if config.identity.is_empty() {
        return Ok(String::new());
    }
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 && !config.identity.is_current() {
        eprintln!(
            "m0serve: warning: --user/--group: checked as uid {euid}, not as {who} (only \
             root can switch)"
        );
        return Ok(String::new());
    }
    let program = host.worker_command(&[])?.program;
    // Opened before the switch, as the master opens it (`master::run`).
    let opened = sys::open_program(&program).ok();
    config.identity.assume()?;
    let as_them = |what: String, e: std::io::Error| format!("{what}: {who} cannot use it: {e}");
    let reach = sys::privileges::can_start_workers(
        &program,
        opened.as_ref().map(std::os::fd::AsFd::as_fd),
        who,
    )?;
    if reach == sys::privileges::ProgramReach::Opened {
        eprintln!(
            "m0serve: note: {who} cannot reach {} by its path: the workers will execute it \
             as it is opened at start, so a reload does not run a new binary installed there",
            program.display()
        );
    }
    if let Some(tls) = &config.tls_options {
        crate::tls::server_config(tls).map_err(|e| format!("as {who}: {e}"))?;
    }
    if let Some((crate::access_log::Target::File(path), _)) = &config.access_log {
        let place = if path.exists() { path } else { dir_of(path) };
        sys::may_write(place)
            .map_err(|e| as_them(format!("--access-log-file {}", path.display()), e))?;
    }
    let dirs = std::iter::once(("--app-dir", &config.app_dir))
        .chain(config.pythonpath.iter().map(|d| ("--pythonpath", d)));
    for (flag, dir) in dirs {
        sys::may_read_dir(dir).map_err(|e| as_them(format!("{flag} {}", dir.display()), e))?;
    }
    Ok(format!(" as {who}"))
}

/// Where a file is created: its directory, the working one for a bare name.
#[cfg(not(loom))]
fn dir_of(path: &std::path::Path) -> &std::path::Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    }
}

/// `--check-config`: what a start would open or be handed, without opening or creating
/// anything. Wrong anywhere (an error): a file that is a directory, `fd://N` open but not
/// a socket, a metrics port on a listening address. True only of the host the check runs
/// on, as its user (a warning, so a check in CI passes): a missing or unwritable
/// directory, `fd://N` not open here. The warnings are returned.
#[cfg(not(loom))]
fn check_places(config: &config::Config) -> Result<Vec<String>, String> {
    use std::path::Path;
    let mut warnings = Vec::new();
    // A directory something is to be created in.
    fn dir_place(what: &str, dir: &Path, warnings: &mut Vec<String>) {
        if !dir.is_dir() {
            warnings.push(format!("{what}: no directory {} here", dir.display()));
        } else if let Err(e) = sys::may_write(dir) {
            warnings.push(format!(
                "{what}: {} cannot be written here: {e}",
                dir.display()
            ));
        }
    }
    // The files a start writes, or creates if missing.
    let access_log = match &config.access_log {
        Some((crate::access_log::Target::File(path), _)) => Some(path.as_path()),
        _ => None,
    };
    let files = [
        ("--pid-file", config.pid_file.as_deref()),
        ("--access-log-file", access_log),
        ("--error-log-file", config.error_log_file.as_deref()),
    ];
    for (flag, path) in files {
        let Some(path) = path else { continue };
        let what = format!("{flag} {}", path.display());
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => return Err(format!("{what}: is a directory")),
            Ok(_) => {
                if let Err(e) = sys::may_write(path) {
                    warnings.push(format!("{what}: cannot be written here: {e}"));
                }
            }
            Err(_) => dir_place(&what, dir_of(path), &mut warnings),
        }
    }
    // `--static-map`: a file where a directory is wanted is wrong anywhere; a directory
    // missing here may be made by the deploy (a warning).
    for (prefix, dir) in &config.static_map {
        match std::fs::metadata(dir) {
            Ok(m) if !m.is_dir() => {
                return Err(format!(
                    "--static-map {prefix}={}: not a directory",
                    dir.display()
                ))
            }
            Ok(_) => {}
            Err(e) => warnings.push(format!(
                "--static-map {prefix}={}: cannot be served from here: {e}",
                dir.display()
            )),
        }
    }
    for spec in &config.listen {
        match spec {
            sys::listen::ListenSpec::Unix(path) => {
                let what = format!("the Unix socket {}", path.display());
                dir_place(&what, dir_of(path), &mut warnings);
            }
            sys::listen::ListenSpec::Fd(fd) => match sys::is_socket(*fd) {
                Some(true) => {}
                Some(false) => return Err(format!("--bind fd://{fd}: not a socket")),
                None => warnings.push(format!(
                    "--bind fd://{fd}: not open here (the supervisor that starts the server \
                     must pass it)"
                )),
            },
            sys::listen::ListenSpec::Tcp(addr) => {
                if let Some(m) = config.metrics {
                    let overlap = addr.ip() == m.ip()
                        || (addr.is_ipv4() == m.is_ipv4()
                            && (addr.ip().is_unspecified() || m.ip().is_unspecified()));
                    if addr.port() != 0 && addr.port() == m.port() && overlap {
                        return Err(format!(
                            "--metrics-port {}: {m} is also an address the server listens \
                             on ({addr})",
                            m.port()
                        ));
                    }
                }
            }
        }
    }
    Ok(warnings)
}

/// How this process came to run m0serve: it decides who initialises Python and what a
/// worker executes.
#[cfg(not(loom))]
#[derive(Clone, Debug)]
pub(crate) enum Host {
    /// The `m0serve` binary, CPython embedded: it initialises the interpreter itself (from
    /// `--venv`, `VIRTUAL_ENV`, the virtualenv it lies in, or the build interpreter) and a
    /// worker runs the binary again.
    Binary,
    /// The Python package (`python -m m0serve`, or the `m0serve` console script): Python
    /// is already running, and a worker runs the same interpreter with the same flags.
    Package {
        /// `sys.executable`.
        python: std::path::PathBuf,
        /// What follows the interpreter in a worker's command line, before the master's
        /// arguments: its own flags (`-X`, `-W`, `-O`...) and the code that starts the
        /// worker (`-c ...`).
        worker_args: Vec<std::ffi::OsString>,
        /// `sys.prefix`: the environment the package is installed in.
        prefix: std::path::PathBuf,
    },
}

#[cfg(not(loom))]
impl Host {
    /// What a worker executes for the command line `argv` (`argv[0]` first).
    fn worker_command(&self, argv: &[std::ffi::OsString]) -> Result<master::WorkerCommand, String> {
        match self {
            Host::Binary => {
                let program = std::env::current_exe().map_err(|e| {
                    format!("cannot find this program's path to start workers: {e}")
                })?;
                Ok(master::WorkerCommand {
                    program,
                    argv: argv.to_vec(),
                    on_reload: None,
                })
            }
            Host::Package {
                python,
                worker_args,
                ..
            } => {
                if python.as_os_str().is_empty() {
                    return Err(
                        "cannot start workers: Python does not know its own executable \
                                (sys.executable is empty)"
                            .into(),
                    );
                }
                let mut all = vec![python.as_os_str().to_owned()];
                all.extend(worker_args.iter().cloned());
                all.extend(argv.iter().skip(1).cloned());
                Ok(master::WorkerCommand {
                    program: python.clone(),
                    argv: all,
                    on_reload: None,
                })
            }
        }
    }

    /// Whether `config` can run here: the binary refuses a virtualenv of another Python
    /// version; the package runs only in the environment it is installed in.
    fn check(&self, config: &config::Config) -> Result<(), String> {
        match self {
            Host::Binary => python::check_venv_version(config.venv.as_deref()),
            Host::Package { prefix, .. } => match &config.venv {
                Some(venv) if !same_dir(venv, prefix) => Err(format!(
                    "--venv {}: this m0serve is the Python package installed in {}, and runs \
                     with that environment's interpreter. To serve from {0}, install m0serve \
                     there (its wheel: `{0}/bin/python -m pip install --no-index --find-links DIST \
                     m0serve-wsgi`) and run `{0}/bin/m0serve`",
                    venv.display(),
                    prefix.display()
                )),
                _ => Ok(()),
            },
        }
    }
}

#[cfg(not(loom))]
impl Host {
    /// The package ignores an activated virtualenv other than its own (the interpreter is
    /// chosen by whoever started it, as with gunicorn); it says so once, at start.
    fn warn_other_venv(&self) {
        let Host::Package { prefix, .. } = self else {
            return;
        };
        if let Some(active) = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
            if !same_dir(std::path::Path::new(&active), prefix) {
                log::warning!(
                    "VIRTUAL_ENV is {}, but this m0serve is installed in {} and imports the \
                     app from there; to use the active virtualenv, install m0serve into it",
                    std::path::Path::new(&active).display(),
                    prefix.display()
                );
            }
        }
    }
}

#[cfg(not(loom))]
fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Runs the server with the process's command line, as the binary; returns the exit code.
#[cfg(not(loom))]
pub fn run() -> i32 {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // A gunicorn configuration file, run in this process's Python for a master that runs
    // none (`cli::gunicorn_conf`).
    if argv
        .get(1)
        .is_some_and(|a| a == cli::gunicorn_conf::EVALUATE_FLAG)
    {
        return match argv.get(2) {
            Some(path) => python::run_script(cli::gunicorn_conf::EVALUATE, path),
            None => 2,
        };
    }
    run_with(&argv, Host::Binary)
}

/// Runs the server with the command line `argv` (`argv[0]` first), hosted as `host`;
/// returns the exit code.
#[cfg(not(loom))]
pub(crate) fn run_with(argv: &[std::ffi::OsString], host: Host) -> i32 {
    sys::open_standard_descriptors();
    // Until the server sets up its own handling (it ignores SIGPIPE), output to a closed
    // pipe (`m0serve --print-config | head`) ends the process quietly, as it does any Unix
    // tool, instead of failing a print. (Rust and Python both start with it ignored.)
    // SAFETY: setting a disposition to SIG_DFL has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // A worker reads a gunicorn configuration from its master's report; the master runs it
    // with this binary's Python or the package's interpreter.
    let runner = match &host {
        _ if std::env::var_os(sys::ipc::WORKER_ENV).is_some() => cli::gunicorn_conf::Runner::Worker,
        Host::Binary => cli::gunicorn_conf::Runner::Binary,
        Host::Package { python, .. } => cli::gunicorn_conf::Runner::Python(python.clone()),
    };
    let cli = match cli::parse(argv, &runner) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    // A worker reads the --config file again (a reload's new workers see an edit), from
    // the directory --chdir moved to: it is given the path the master read, made absolute
    // here, last on its command line (a repeated flag's last value wins).
    let mut worker_argv = argv.to_vec();
    // A gunicorn configuration is run again by the master at each reload (its workers read
    // the report it leaves them, `cli::gunicorn_conf::read`).
    let config_script = cli
        .config
        .as_deref()
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .and_then(|p| std::path::absolute(p).ok())
        .map(|path| {
            let runner = runner.clone();
            master::OnReload(std::sync::Arc::new(move || {
                cli::gunicorn_conf::refresh(&path, &runner)
                    .map_err(|e| format!("--config {}: {e}", path.display()))
            }))
        });
    if let Some(path) = cli.config.as_deref().filter(|p| p.is_relative()) {
        if let Ok(abs) = std::path::absolute(path) {
            worker_argv.push("--config".into());
            worker_argv.push(abs.into_os_string());
        }
    }
    // The master changes directory and sets the app's environment; a worker inherits both.
    let is_worker = std::env::var_os(sys::ipc::WORKER_ENV).is_some();
    // A start that cannot go on: a worker's reason is a log record, the master's a line
    // for whoever typed the command.
    let refuse = |e: &str| {
        if is_worker {
            log::error!("{e}");
        } else {
            eprintln!("m0serve: error: {e}");
        }
        2
    };
    if is_worker {
        sys::name_after_program();
        // A worker's every message is a log record in the format asked for, written
        // whole, from the first: workers failing together (a file only root can read,
        // after --user) must not interleave their words, nor break a JSON log.
        log::set_level(cli.log_level);
        log::set_format(cli.log_format);
    } else if let Err(e) = config::prepare_process(&cli) {
        return refuse(&e);
    }
    let config = match config::Config::from_cli(cli)
        .and_then(config::Unresolved::resolve)
        .and_then(|c| host.check(&c).map(|()| c))
    {
        Ok(c) => c,
        Err(e) => return refuse(&e),
    };
    log::set_level(config.log_level);
    log::set_format(config.log_format);
    if config.check_only {
        for w in &config.warnings {
            eprintln!("m0serve: warning: {w}");
        }
        return match check(&config, &host) {
            Ok(what) => {
                println!("m0serve: configuration OK; {what}");
                0
            }
            Err(e) => {
                eprintln!("m0serve: error: {e}");
                1
            }
        };
    }
    if let Some(path) = &config.error_log_file {
        if let Err(e) = log::redirect_stderr(path) {
            return refuse(&format!("--error-log-file {}: {e}", path.display()));
        }
    }
    // A worker is started by the master with the listener's and the status pipe's
    // descriptors named in its environment.
    let result = match worker::Inherited::from_env() {
        Ok(Some(inherited)) => {
            // The master's report of a gunicorn configuration is the worker's, read above,
            // not the app's.
            python::forget_env(cli::gunicorn_conf::REPORT_ENV);
            if inherited.is_preloader() {
                worker::preload::run(config, inherited)
            } else {
                worker::run(config, inherited)
            }
        }
        Ok(None) => {
            for w in &config.warnings {
                log::warning!("{w}");
            }
            host.warn_other_venv();
            host.worker_command(&worker_argv).and_then(|mut command| {
                command.on_reload = config_script;
                master::run(config, command)
            })
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            log::error!("{e}");
            1
        }
    }
}
