//! m0serve: a WSGI (PEP 3333) application server.
//!
//! One mio event-loop thread ([`event_loop`]) owns every socket and never runs Python;
//! handler threads ([`handler`]) hold the GIL while they run the app. The two meet through
//! lock-free SPSC rings ([`ring`]) with a park-only-if-parked handshake ([`park`]).
//! `docs/architecture.md` walks one request through these modules.

// Under `--cfg loom` only the lock-free core is built: the models in `pipeline::ring` and
// `pipeline::park` exercise it, and nothing else may run on loom's atomics.
#[cfg(not(loom))]
pub mod access_log;
#[cfg(not(loom))]
pub mod cli;
#[cfg(not(loom))]
pub mod config;
#[cfg(not(loom))]
pub mod http;
#[cfg(not(loom))]
pub mod log;
#[cfg(not(loom))]
pub mod master;
#[cfg(not(loom))]
pub mod metrics;
#[cfg(not(loom))]
pub mod package;
pub mod pipeline;
#[cfg(not(loom))]
pub mod python;
#[cfg(not(loom))]
pub mod sys;
#[cfg(not(loom))]
pub mod tls;
#[cfg(not(loom))]
pub mod worker;
#[cfg(not(loom))]
pub mod wsgi;

/// Every Rust allocation of the binary and of the Python package's extension module.
/// Buffers cross threads: the loop allocates a request that a handler frees, and a handler
/// a response that the loop frees. glibc's malloc frees a chunk into the arena of the thread
/// that allocated it, under that arena's lock, so the loop's frees contended with the
/// handler's own allocations (and the interpreter's, which share its arena): `perf` counted
/// a quarter of the worker's futex calls in `__lll_lock_wait_private`/`_wake_private`.
/// mimalloc frees another thread's block onto that block's page with one atomic push.
/// Measured in BENCHMARKS.md ("mimalloc"). Built without transparent huge pages (`no_thp`):
/// with them each thread's first arena took a 2 MiB page, 8 MiB more per worker at rest.
#[cfg(not(loom))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `--check-config`: the flags are valid (they parsed), and the app imports and is
/// callable. Nothing is bound and no worker starts.
#[cfg(not(loom))]
fn check(config: &config::Config) -> Result<String, String> {
    use pyo3::prelude::*;
    check_places(config)?;
    let interpreter = python::initialize(config.venv.as_deref())?;
    Python::attach(|py| {
        let interp = python::describe(py, &interpreter);
        let app = python::load_app(
            py,
            &config.app,
            &config.app_dir,
            &config.pythonpath,
            &interp,
        )?;
        if !app.bind(py).is_callable() {
            return Err(format!(
                "{}: the application object is not callable",
                config.app
            ));
        }
        Ok(format!(
            "{} imports and is callable ({interp}); would listen on {}",
            config.app,
            config.describe_listen()
        ))
    })
}

/// `--check-config`: what a start would open or be handed, without opening or creating
/// anything: the files it writes (their directory, or the file itself, writable), the
/// directories of the Unix sockets it binds, the descriptors of `fd://N`, and a metrics
/// port that is also a listening port.
fn check_places(config: &config::Config) -> Result<(), String> {
    use std::path::Path;
    fn writable(flag: &str, path: &Path) -> Result<(), String> {
        let shown = path.display();
        let may_write = |p: &Path| sys::may_write(p).map_err(|e| format!("{flag} {shown}: {e}"));
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Err(format!("{flag} {shown}: is a directory")),
            Ok(_) => may_write(path),
            Err(_) => {
                let dir = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                match std::fs::metadata(dir) {
                    Ok(m) if m.is_dir() => may_write(dir),
                    _ => Err(format!("{flag} {shown}: no directory {}", dir.display())),
                }
            }
        }
    }
    if let Some(path) = &config.pid_file {
        writable("--pid-file", path)?;
    }
    if let Some((crate::access_log::Target::File(path), _)) = &config.access_log {
        writable("--access-log-file", path)?;
    }
    if let Some(path) = &config.error_log_file {
        writable("--error-log-file", path)?;
    }
    for spec in &config.listen {
        match spec {
            sys::listen::ListenSpec::Unix(path) => {
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
                let dir = dir.unwrap_or(Path::new("."));
                if !dir.is_dir() {
                    return Err(format!(
                        "--uds {}: no directory {}",
                        path.display(),
                        dir.display()
                    ));
                }
                sys::may_write(dir).map_err(|e| format!("--uds {}: {e}", path.display()))?;
            }
            sys::listen::ListenSpec::Fd(fd) => {
                if !sys::is_socket(*fd) {
                    return Err(format!("--bind fd://{fd}: not an open socket"));
                }
            }
            sys::listen::ListenSpec::Tcp(addr) => {
                if let Some(m) = config.metrics {
                    if addr.port() != 0 && addr.port() == m.port() {
                        return Err(format!(
                            "--metrics-port {}: also the port of {addr}, which the server \
                             listens on",
                            m.port()
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// How this process came to run m0serve: it decides who initialises Python and what a
/// worker executes.
#[cfg(not(loom))]
#[derive(Clone, Debug)]
pub enum Host {
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
                     m0serve`) and run `{0}/bin/m0serve`",
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
    run_with(&argv, Host::Binary)
}

/// Runs the server with the command line `argv` (`argv[0]` first), hosted as `host`;
/// returns the exit code.
#[cfg(not(loom))]
pub fn run_with(argv: &[std::ffi::OsString], host: Host) -> i32 {
    sys::open_standard_descriptors();
    // Until the server sets up its own handling (it ignores SIGPIPE), output to a closed
    // pipe (`m0serve --print-config | head`) ends the process quietly, as it does any Unix
    // tool, instead of failing a print. (Rust and Python both start with it ignored.)
    // SAFETY: setting a disposition to SIG_DFL has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = match cli::parse(argv) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    // The master changes directory and sets the app's environment; a worker inherits both.
    let is_worker = std::env::var_os(sys::ipc::WORKER_ENV).is_some();
    if !is_worker {
        if let Err(e) = config::prepare_process(&cli) {
            eprintln!("m0serve: error: {e}");
            return 2;
        }
    }
    let config = match config::Config::from_cli(cli).and_then(|c| host.check(&c).map(|()| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("m0serve: error: {e}");
            return 2;
        }
    };
    log::set_level(config.log_level);
    log::set_format(config.log_format);
    if config.check_only {
        for w in &config.warnings {
            eprintln!("m0serve: warning: {w}");
        }
        return match check(&config) {
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
            eprintln!("m0serve: error: --error-log-file {}: {e}", path.display());
            return 2;
        }
    }
    // A worker is started by the master with the listener's and the status pipe's
    // descriptors named in its environment.
    let result = match worker::Inherited::from_env() {
        Ok(Some(inherited)) => worker::run(config, inherited),
        Ok(None) => {
            for w in &config.warnings {
                log::warning!("{w}");
            }
            host.warn_other_venv();
            host.worker_command(argv)
                .and_then(|command| master::run(config, command))
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
