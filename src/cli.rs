//! The command line, as typed (clap derive). Every flag also reads `M0SERVE_<FLAG>`.
//! Validation into a [`crate::config::Config`] happens in `config.rs`.

use std::path::PathBuf;

use clap::Parser;

use crate::log::Level;

#[derive(Parser, Debug)]
#[command(
    name = "m0serve",
    version,
    about = "A WSGI (PEP 3333) application server: Rust event loop, embedded CPython",
    after_help = "Every option can also be set through an environment variable named \
                  M0SERVE_<OPTION> (e.g. M0SERVE_PORT=9000); the command line wins."
)]
pub struct Cli {
    /// The WSGI application: `module:attr`, or `module:factory()` to call a factory.
    #[arg(env = "M0SERVE_APP", value_name = "APP")]
    pub app: String,

    /// Host address to bind.
    #[arg(long, env = "M0SERVE_HOST", default_value = "127.0.0.1")]
    pub host: String,

    /// Port to bind (0 picks a free port; the startup log line names it).
    #[arg(long, env = "M0SERVE_PORT", default_value_t = 8000)]
    pub port: u16,

    /// Bind a Unix domain socket at PATH instead of TCP.
    #[arg(long, env = "M0SERVE_UDS", value_name = "PATH")]
    pub uds: Option<PathBuf>,

    /// Worker processes, each with its own Python interpreter, loop and handler threads,
    /// sharing the listening socket; a master process supervises them.
    #[arg(long, env = "M0SERVE_WORKERS", default_value_t = 1)]
    pub workers: usize,

    /// Seconds a graceful stop (SIGTERM, SIGINT, a reload) waits for requests in flight
    /// before it closes their connections.
    #[arg(
        long,
        env = "M0SERVE_GRACEFUL_TIMEOUT",
        default_value_t = 30.0,
        value_name = "SECS"
    )]
    pub graceful_timeout: f64,

    /// Handler threads per worker that run the app (each holds the GIL while it works); 0 runs
    /// the app inline on the loop thread.
    #[arg(long, env = "M0SERVE_BLOCKING_THREADS", default_value_t = 1)]
    pub blocking_threads: usize,

    /// Directory put first on `sys.path` before the app is imported.
    #[arg(long, env = "M0SERVE_APP_DIR", default_value = ".", value_name = "DIR")]
    pub app_dir: PathBuf,

    /// Print each thread's pipeline counters at exit (they are also printed on SIGUSR2).
    #[arg(long, env = "M0SERVE_STATS")]
    pub stats: bool,

    /// Benchmarking only: the loop answers every request with a fixed hello-world response
    /// itself, without calling the app (the loop thread's ceiling).
    #[arg(long, env = "M0SERVE_STATIC_RESPONSE")]
    pub static_response: bool,

    /// Error log level.
    #[arg(long, env = "M0SERVE_LOG_LEVEL", value_enum, default_value = "info")]
    pub log_level: Level,
}

/// Parses the process's arguments. `Err(code)` after clap printed help, the version or an
/// error naming the flag at fault.
pub fn parse() -> Result<Cli, i32> {
    Cli::try_parse().map_err(|e| {
        // clap's message names the flag and suggests the right one; exit 2 for usage errors,
        // 0 for --help/--version.
        let _ = e.print();
        e.exit_code()
    })
}
