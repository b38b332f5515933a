//! The command line, as typed (clap derive). Every flag also reads `M0SERVE_<FLAG>`, and
//! `--config FILE` holds more flags, one per line. Precedence, lowest first: default, the
//! file, the environment, the command line. Validation into a [`crate::config::Config`]
//! happens in `config.rs`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};

use crate::log::{Format as LogFormat, Level};

pub(crate) mod foreign;
pub(crate) mod gunicorn_conf;

use foreign::Rewritten;

/// `--root-path-outside`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Outside {
    #[value(name = "404")]
    NotFound,
    App,
}

/// `--scheduling-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SchedulingPolicy {
    Batch,
    Normal,
}

// The fields' doc comments are the command's help text, printed by clap as written: a
// link there is a plain URL, and `[V6]:PORT` is an address form, not an intra-doc link.
#[allow(rustdoc::bare_urls, rustdoc::broken_intra_doc_links)]
#[derive(Parser, Debug)]
#[command(
    name = "m0serve",
    version,
    about = "A WSGI (PEP 3333) application server: a Rust event loop, the app on CPython \
             handler threads",
    after_help = "`m0serve --help` lists every option, by topic. Documentation: \
                  https://github.com/m0serve/m0serve/tree/main/docs",
    after_long_help = "Every option can also be set through an environment variable named \
                  M0SERVE_<OPTION> (e.g. M0SERVE_PORT=9000), or in a --config file (one \
                  flag per line); the command line wins over both, the environment over \
                  the file. gunicorn's and Granian's spellings of these options are taken \
                  too. Every option: \
                  https://github.com/m0serve/m0serve/blob/main/docs/configuration.md; \
                  running it: https://github.com/m0serve/m0serve/blob/main/docs/operations.md; \
                  coming from gunicorn or Granian: \
                  https://github.com/m0serve/m0serve/blob/main/docs/migration.md",
    args_override_self = true
)]
pub(crate) struct Cli {
    /// The WSGI application: `module:attr`, or `module:factory()` to call a factory.
    #[arg(env = "M0SERVE_APP", value_name = "APP", hide_env = true)]
    pub(crate) app: String,

    /// Host address (or name) to bind.
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        long,
        env = "M0SERVE_HOST",
        default_value = "127.0.0.1"
    )]
    pub(crate) host: String,

    /// Port to bind (0 picks a free port; the startup log line names it).
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        long,
        env = "M0SERVE_PORT",
        default_value_t = 8000
    )]
    pub(crate) port: u16,

    /// Where to listen, repeatable: HOST:PORT, [V6]:PORT, :PORT, unix:PATH, fd://N.
    ///
    /// Instead of --host/--port/--uds: `HOST:PORT` (HOST an
    /// address or a name: every address it resolves to), `[V6]:PORT`, `:PORT` (every IPv4
    /// interface), `HOST` (port 8000), `unix:PATH`, or `fd://N` for a socket already open as
    /// descriptor N.
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        short = 'b',
        long,
        env = "M0SERVE_BIND",
        value_name = "ADDRESS",
        value_delimiter = ','
    )]
    pub(crate) bind: Vec<String>,

    /// Serve HTTPS with this certificate chain (PEM).
    ///
    /// The server's certificate first. HTTPS is served on
    /// every TCP address of --bind/--host (Unix sockets, and --insecure-bind, stay plain).
    /// Re-read by the new workers at each SIGHUP.
    #[arg(
        hide_env = true,
        help_heading = "TLS",
        long,
        env = "M0SERVE_CERTFILE",
        value_name = "FILE",
        alias = "ssl-certificate"
    )]
    pub(crate) certfile: Option<PathBuf>,

    /// The private key of --certfile (PEM).
    ///
    /// PKCS #8, RSA or EC; not encrypted.
    #[arg(
        hide_env = true,
        help_heading = "TLS",
        long,
        env = "M0SERVE_KEYFILE",
        value_name = "FILE",
        alias = "ssl-keyfile"
    )]
    pub(crate) keyfile: Option<PathBuf>,

    /// Certificate authorities (PEM) that sign the clients' certificates: asks clients for
    /// one (mutual TLS); see --client-cert.
    #[arg(
        hide_env = true,
        help_heading = "TLS",
        hide_short_help = true,
        long,
        env = "M0SERVE_CA_CERTS",
        value_name = "FILE"
    )]
    pub(crate) ca_certs: Option<PathBuf>,

    /// With --ca-certs: `required` (the default) refuses a client without a valid
    /// certificate at the handshake; `optional` serves it too. A verified certificate's
    /// subject is the environ's SSL_CLIENT_S_DN.
    #[arg(
        hide_env = true,
        help_heading = "TLS",
        hide_short_help = true,
        long,
        env = "M0SERVE_CLIENT_CERT",
        value_name = "MODE",
        value_enum
    )]
    pub(crate) client_cert: Option<crate::tls::ClientCert>,

    /// Also listen, without TLS, here (repeatable; the --bind forms): a plain port beside
    /// the HTTPS ones, for a health check or a redirect.
    #[arg(
        hide_env = true,
        help_heading = "TLS",
        hide_short_help = true,
        long,
        env = "M0SERVE_INSECURE_BIND",
        value_name = "ADDRESS",
        value_delimiter = ','
    )]
    pub(crate) insecure_bind: Vec<String>,

    /// Permissions of the Unix sockets m0serve binds, in octal (e.g. 660).
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        long,
        env = "M0SERVE_UDS_PERMISSIONS",
        value_name = "MODE"
    )]
    pub(crate) uds_permissions: Option<String>,

    /// Bind a Unix domain socket at PATH instead of TCP.
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        long,
        env = "M0SERVE_UDS",
        value_name = "PATH"
    )]
    pub(crate) uds: Option<PathBuf>,

    /// Worker processes, each with its own Python interpreter.
    ///
    /// Each has its own loop and handler threads,
    /// sharing the listening socket; a master process supervises them.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        short = 'w',
        long,
        env = "M0SERVE_WORKERS",
        default_value_t = 1
    )]
    pub(crate) workers: usize,

    /// gunicorn's worker class, for command lines brought over: `gthread` is what m0serve's
    /// workers are (a loop thread and --blocking-threads handler threads), `sync` is
    /// accepted with a warning; any other is refused.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        hide_short_help = true,
        short = 'k',
        long,
        env = "M0SERVE_WORKER_CLASS",
        value_name = "CLASS"
    )]
    pub(crate) worker_class: Option<String>,

    /// Import the app once, in a process that forks the workers, so they share its memory.
    ///
    /// That process (the preloader) imports the app, freezes the garbage
    /// collector's view of it (gc.freeze) and forks each worker; the master still runs no
    /// Python. SIGHUP starts a new preloader with the new code. An app whose import starts
    /// threads cannot be forked safely: it is then imported by each worker, with a
    /// warning.
    #[arg(hide_env = true, help_heading = "Processes and threads", long, env = "M0SERVE_PRELOAD", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) preload: bool,

    /// Seconds a request may run before its stack is logged and its worker recycled.
    ///
    /// Past it, the request's handler thread's Python stack is
    /// written to the log and the worker is recycled gracefully (0: no limit). Not in
    /// inline mode.
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        short = 't',
        long,
        env = "M0SERVE_TIMEOUT",
        default_value_t = 0.0,
        value_name = "SECS"
    )]
    pub(crate) timeout: f64,

    /// Seconds a worker's loop thread may go without its heartbeat to the master (one a
    /// second while it runs) before the master kills it (SIGKILL) and starts another: a
    /// worker stopped (SIGSTOP) or frozen. In inline mode the app runs on that thread, so
    /// this is also the longest one request may take there. Must be longer than --timeout;
    /// not given, it is --timeout plus 30 where --timeout is 60 or more.
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        hide_short_help = true,
        long,
        env = "M0SERVE_SILENT_TIMEOUT",
        default_value_t = 60.0,
        value_name = "SECS"
    )]
    pub(crate) silent_timeout: f64,

    /// Recycle a worker after it has served this many requests (0: never); its
    /// replacement is ready before it drains.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        hide_short_help = true,
        long,
        env = "M0SERVE_MAX_REQUESTS",
        default_value_t = 0,
        value_name = "N"
    )]
    pub(crate) max_requests: u64,

    /// Add a random 0..=J to each worker's --max-requests, so workers do not all recycle
    /// at once.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        hide_short_help = true,
        long,
        env = "M0SERVE_MAX_REQUESTS_JITTER",
        default_value_t = 0,
        value_name = "J"
    )]
    pub(crate) max_requests_jitter: u64,

    /// Recycle a worker whose resident memory passes this many MiB (0: never).
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        hide_short_help = true,
        long,
        env = "M0SERVE_WORKERS_MAX_RSS",
        default_value_t = 0,
        value_name = "MIB"
    )]
    pub(crate) workers_max_rss: u64,

    /// Seconds a graceful stop (SIGTERM, SIGINT, a reload) waits for requests in flight
    /// before it closes their connections.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        hide_short_help = true,
        long,
        env = "M0SERVE_GRACEFUL_TIMEOUT",
        default_value_t = 30.0,
        value_name = "SECS"
    )]
    pub(crate) graceful_timeout: f64,

    /// Handler threads per worker at start (0: the app runs on the loop thread).
    ///
    /// These run the app (each holds the GIL while it works); 0 runs
    /// the app inline on the loop thread.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        long,
        env = "M0SERVE_BLOCKING_THREADS",
        default_value_t = 1
    )]
    pub(crate) blocking_threads: usize,

    /// Most handler threads per worker, added while all wait on I/O (default 64).
    ///
    /// Past --blocking-threads, a worker starts another
    /// when requests wait while every handler holds one without using the CPU (waiting on
    /// a database or a service); one idle for --blocking-threads-idle-timeout goes. Default: 64, or
    /// --blocking-threads if more; equal to --blocking-threads for a fixed pool.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        long,
        env = "M0SERVE_MAX_BLOCKING_THREADS",
        value_name = "N"
    )]
    pub(crate) max_blocking_threads: Option<usize>,

    /// Seconds a handler thread above --blocking-threads may stay idle before it goes
    /// (Granian's flag of the same name).
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        hide_short_help = true,
        long,
        env = "M0SERVE_BLOCKING_THREADS_IDLE_TIMEOUT",
        default_value_t = 30.0,
        value_name = "SECS"
    )]
    pub(crate) blocking_threads_idle_timeout: f64,

    /// WebSockets a worker serves at once with a handler thread started in the place of
    /// each: the app's call holds its thread for as long as the WebSocket lives (with
    /// simple-websocket's own thread, about 210 KiB of memory and 10 MiB of address space
    /// a WebSocket). Past it, a WebSocket holds a thread of the pool.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        hide_short_help = true,
        long,
        env = "M0SERVE_MAX_WEBSOCKETS",
        default_value_t = 256,
        value_name = "N"
    )]
    pub(crate) max_websockets: usize,

    /// Seconds a request may wait for a handler; past it, 503 (0: no limit).
    ///
    /// A request that would wait longer, at
    /// the pace the handlers finish requests, is answered 503 with Retry-After by the loop
    /// as soon as it is read, and so is one that has waited twice as long; neither runs
    /// the app. For a second after it refused one, a worker admits only what would wait a
    /// fifth of this, and leaves new connections to another worker first. 0 turns it off
    /// (requests queue without limit, as in gunicorn and Granian).
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        long,
        env = "M0SERVE_MAX_QUEUE_WAIT",
        default_value_t = 0.5,
        value_name = "SECS"
    )]
    pub(crate) max_queue_wait: f64,

    /// Kernel accept queue length for the listening socket.
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        long,
        env = "M0SERVE_BACKLOG",
        default_value_t = 1024,
        value_name = "N"
    )]
    pub(crate) backlog: u32,

    /// Write the master's process id to PATH (removed at exit).
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        hide_short_help = true,
        short = 'p',
        long,
        env = "M0SERVE_PID_FILE",
        value_name = "PATH"
    )]
    pub(crate) pid_file: Option<PathBuf>,

    /// The standalone binary's virtualenv, whose site-packages the app imports from
    /// (default: VIRTUAL_ENV, else the virtualenv the binary lies in, else the interpreter it
    /// was built with); one of another Python version is refused. The pip-installed
    /// `m0serve` always runs in the environment it is installed in.
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        long,
        env = "M0SERVE_VENV",
        value_name = "PATH"
    )]
    pub(crate) venv: Option<PathBuf>,

    /// Run as this user after binding (started as root).
    ///
    /// A name or a numeric id: the workers wholly, so the app is imported as it; the master with it as its effective id, root kept as its
    /// saved one (the app cannot signal it, and it removes its pid file and Unix sockets at
    /// exit). The Unix sockets are given to it; its supplementary groups come with it.
    /// Needs m0serve started as root; a switch that fails stops the start.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        short = 'u',
        long,
        env = "M0SERVE_USER",
        value_name = "USER"
    )]
    pub(crate) user: Option<String>,

    /// After binding, run as this group (a name or a numeric id); the default with --user
    /// is that user's primary group.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        hide_short_help = true,
        short = 'g',
        long,
        env = "M0SERVE_GROUP",
        value_name = "GROUP"
    )]
    pub(crate) group: Option<String>,

    /// File mode creation mask, in octal (e.g. 027), set before anything is bound or
    /// written: Unix sockets (unless --uds-permissions), the pid file, and files the app
    /// creates.
    #[arg(
        hide_env = true,
        help_heading = "Processes and threads",
        hide_short_help = true,
        short = 'm',
        long,
        env = "M0SERVE_UMASK",
        value_name = "MASK"
    )]
    pub(crate) umask: Option<String>,

    /// Directory put first on `sys.path` before the app is imported.
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        long,
        env = "M0SERVE_APP_DIR",
        default_value = ".",
        value_name = "DIR"
    )]
    pub(crate) app_dir: PathBuf,

    /// Change to DIR before anything else (the app's relative paths, and a relative
    /// --app-dir, start there).
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        long,
        env = "M0SERVE_CHDIR",
        value_name = "DIR"
    )]
    pub(crate) chdir: Option<PathBuf>,

    /// More directories for `sys.path`, after --app-dir, in order; comma-separated or
    /// repeated.
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        long,
        env = "M0SERVE_PYTHONPATH",
        value_name = "DIRS",
        value_delimiter = ','
    )]
    pub(crate) pythonpath: Vec<PathBuf>,

    /// Set an environment variable for the app, `KEY=VALUE`; repeatable (one from the
    /// environment variable).
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        short = 'e',
        long = "env",
        env = "M0SERVE_ENV",
        value_name = "KEY=VALUE"
    )]
    pub(crate) env_vars: Vec<String>,

    /// Set the app's environment variables from FILE: `KEY=VALUE` lines (`export ` and
    /// quotes allowed, `#` comments); --env wins over it.
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        long,
        env = "M0SERVE_ENV_FILE",
        value_name = "FILE"
    )]
    pub(crate) env_file: Option<PathBuf>,

    /// Serve the app under this URL prefix (a proxy passes `/prefix/...` on unchanged): a
    /// request under it gets SCRIPT_NAME=PREFIX and PATH_INFO the rest. Default: the
    /// SCRIPT_NAME environment variable, as gunicorn reads it.
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        long,
        env = "M0SERVE_ROOT_PATH",
        value_name = "PREFIX"
    )]
    pub(crate) root_path: Option<String>,

    /// With --root-path, a request outside the prefix: `404` (answered by the server) or
    /// `app` (passed on as it is, with SCRIPT_NAME empty).
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        hide_short_help = true,
        long,
        env = "M0SERVE_ROOT_PATH_OUTSIDE",
        value_enum,
        default_value = "404"
    )]
    pub(crate) root_path_outside: Outside,

    /// Serve the files under DIR at URL prefix PREFIX from the loop, without the app.
    ///
    /// Repeatable (`/static=/srv/app/static`, `/media=/srv/app/media`). A request under a
    /// prefix (matched on the path as sent, --root-path included) gets the file, with
    /// ETag, Last-Modified, 304, ranges and precompressed `.br`/`.gz` siblings; no byte
    /// outside DIR is ever served, and files whose name begins with a dot are not.
    #[arg(
        hide_env = true,
        help_heading = "Static files",
        hide_short_help = true,
        long,
        env = "M0SERVE_STATIC_MAP",
        value_name = "PREFIX=DIR",
        value_delimiter = ','
    )]
    pub(crate) static_map: Vec<String>,

    /// The Content-Type of a static file by extension, over the built-in table
    /// (`webmanifest=application/manifest+json`); repeatable.
    #[arg(
        hide_env = true,
        help_heading = "Static files",
        hide_short_help = true,
        long,
        env = "M0SERVE_MIME_TYPE",
        value_name = "EXT=TYPE",
        value_delimiter = ','
    )]
    pub(crate) mime_type: Vec<String>,

    /// Cache-Control max-age, in seconds, of a static file whose name carries no content
    /// hash (0: `no-cache`); a hashed name (`app.3f2a9c1d0b7e.css`) is `immutable` for a
    /// year.
    #[arg(
        hide_env = true,
        help_heading = "Static files",
        hide_short_help = true,
        long,
        env = "M0SERVE_STATIC_MAX_AGE",
        default_value_t = 60,
        value_name = "SECONDS"
    )]
    pub(crate) static_max_age: u64,

    /// Serve a directory's `index.html` (a directory named without its slash is
    /// redirected to it); directories are never listed.
    #[arg(hide_env = true, help_heading = "Static files", hide_short_help = true, long, env = "M0SERVE_STATIC_INDEX", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) static_index: bool,

    /// Follow symbolic links that lead outside a --static-map directory (a `collectstatic
    /// --link` tree); the request path itself still cannot climb out.
    #[arg(hide_env = true, help_heading = "Static files", hide_short_help = true, long, env = "M0SERVE_STATIC_FOLLOW_SYMLINKS", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) static_follow_symlinks: bool,

    /// Longest request line, in bytes (longer: 414).
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        hide_short_help = true,
        long,
        env = "M0SERVE_MAX_REQUEST_LINE",
        default_value_t = 8190,
        value_name = "BYTES"
    )]
    pub(crate) max_request_line: usize,

    /// Largest request head (request line and headers), in bytes (larger: 431).
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        hide_short_help = true,
        long,
        env = "M0SERVE_MAX_HEADER_SIZE",
        default_value_t = 65536,
        value_name = "BYTES"
    )]
    pub(crate) max_header_size: usize,

    /// Most header lines in a request (more: 431).
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        hide_short_help = true,
        long,
        env = "M0SERVE_MAX_HEADERS",
        default_value_t = 100,
        value_name = "N"
    )]
    pub(crate) max_headers: usize,

    /// Largest request body, in bytes, or with a K, M or G suffix (larger: 413, answered
    /// before `100 Continue` and before the app runs when the length is declared). 0 is a
    /// limit, not none: every request with a body gets 413.
    #[arg(hide_env = true, help_heading = "Limits and timeouts", hide_short_help = true, long, env = "M0SERVE_MAX_BODY_SIZE", default_value = "100M", value_name = "SIZE",
          value_parser = parse_size)]
    pub(crate) max_body_size: u64,

    /// Request bodies larger than this (bytes, or K, M, G) are spooled to a temporary file
    /// instead of being held in memory; `wsgi.input` reads them back from it.
    #[arg(hide_env = true, help_heading = "Limits and timeouts", hide_short_help = true, long, env = "M0SERVE_BODY_BUFFER_SIZE", default_value = "1M", value_name = "SIZE",
          value_parser = parse_size)]
    pub(crate) body_buffer_size: u64,

    /// Most connections one worker holds open; past it the worker stops accepting and the
    /// kernel's backlog holds the rest.
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        hide_short_help = true,
        long,
        env = "M0SERVE_MAX_CONNECTIONS",
        default_value_t = 10_000,
        value_name = "N"
    )]
    pub(crate) max_connections: usize,

    /// Seconds a client may take to send a whole request head, counted from its first byte
    /// (from the accept for a new connection's first) and never restarted by later bytes;
    /// then it is closed (with 408 if it had sent part of one).
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        hide_short_help = true,
        long,
        env = "M0SERVE_HEADER_TIMEOUT",
        default_value_t = 10.0,
        value_name = "SECS"
    )]
    pub(crate) header_timeout: f64,

    /// Seconds an idle keep-alive connection stays open.
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        hide_short_help = true,
        long,
        env = "M0SERVE_KEEP_ALIVE_TIMEOUT",
        default_value_t = 5.0,
        value_name = "SECS"
    )]
    pub(crate) keep_alive_timeout: f64,

    /// Seconds a request body may go without new bytes; then 408 and the connection
    /// closes.
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        hide_short_help = true,
        long,
        env = "M0SERVE_BODY_TIMEOUT",
        default_value_t = 30.0,
        value_name = "SECS"
    )]
    pub(crate) body_timeout: f64,

    /// Slowest average rate a request body may arrive at, in bytes per second, once its
    /// first --body-timeout seconds are over (each BYTES received buy one more second); a
    /// slower body gets 408 and the connection closes. 0: no minimum rate.
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        hide_short_help = true,
        long,
        env = "M0SERVE_BODY_MIN_RATE",
        default_value_t = 1024,
        value_name = "BYTES"
    )]
    pub(crate) body_min_rate: u64,

    /// Seconds a response may wait on a client that reads none of it; then the connection
    /// is dropped.
    #[arg(
        hide_env = true,
        help_heading = "Limits and timeouts",
        hide_short_help = true,
        long,
        env = "M0SERVE_WRITE_TIMEOUT",
        default_value_t = 30.0,
        value_name = "SECS"
    )]
    pub(crate) write_timeout: f64,

    /// Write an access log line per response, to standard error.
    ///
    /// --access-log-file writes it elsewhere.
    #[arg(hide_env = true, help_heading = "Logging", long, env = "M0SERVE_ACCESS_LOG", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) access_log: bool,

    /// Write the access log to PATH (`-`: standard output).
    ///
    /// Appending; implies --access-log.
    #[arg(
        hide_env = true,
        help_heading = "Logging",
        long,
        env = "M0SERVE_ACCESS_LOG_FILE",
        value_name = "PATH"
    )]
    pub(crate) access_log_file: Option<PathBuf>,

    /// The access log format: gunicorn's `%(name)s` atoms
    /// (https://github.com/m0serve/m0serve/blob/main/docs/operations.md#access-log), or
    /// `json`.
    #[arg(
        hide_env = true,
        help_heading = "Logging",
        hide_short_help = true,
        long,
        env = "M0SERVE_ACCESS_LOG_FORMAT",
        value_name = "FORMAT",
        default_value = crate::access_log::DEFAULT_FORMAT
    )]
    pub(crate) access_log_format: String,

    /// Proxies whose forwarding headers set REMOTE_ADDR and the scheme.
    ///
    /// Peers whose Forwarded / X-Forwarded-For / X-Forwarded-Proto headers are believed:
    /// comma-separated addresses and CIDRs, or `*`; empty for none.
    #[arg(
        hide_env = true,
        help_heading = "Proxies",
        long,
        env = "M0SERVE_FORWARDED_ALLOW_IPS",
        default_value = "127.0.0.1,::1",
        value_name = "LIST"
    )]
    pub(crate) forwarded_allow_ips: String,

    /// Every connection starts with a PROXY protocol header (v1 or v2, as HAProxy and AWS
    /// NLB send), whose source address becomes REMOTE_ADDR and REMOTE_PORT. Only peers in
    /// --proxy-allow-from may connect; others, and connections without a valid header,
    /// are closed (logged at debug, counted in the metrics). Forwarding headers are not
    /// believed on these connections (see --proxy-forwarded-headers).
    #[arg(hide_env = true, help_heading = "Proxies", hide_short_help = true, long, env = "M0SERVE_PROXY_PROTOCOL", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) proxy_protocol: bool,

    /// With --proxy-protocol: the load balancers that may send a PROXY header, as
    /// comma-separated addresses and CIDRs, or `*`; empty for none (peers on a Unix
    /// socket are allowed unless it is empty).
    #[arg(
        hide_env = true,
        help_heading = "Proxies",
        hide_short_help = true,
        long,
        env = "M0SERVE_PROXY_ALLOW_FROM",
        default_value = "127.0.0.1,::1",
        value_name = "LIST"
    )]
    pub(crate) proxy_allow_from: String,

    /// With --proxy-protocol: an HTTP proxy in front of the TCP load balancer adds
    /// Forwarded / X-Forwarded-* headers, so believe them when the address the PROXY header
    /// names is in --forwarded-allow-ips. Off by default: a TCP balancer writes no HTTP
    /// header, so any such header came from the client.
    #[arg(hide_env = true, help_heading = "Proxies", hide_short_help = true, long, env = "M0SERVE_PROXY_FORWARDED_HEADERS", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) proxy_forwarded_headers: bool,

    /// Serve Prometheus metrics and /healthz on this port.
    ///
    /// `/metrics`, `/healthz`, `/readyz` and `/livez`, answered by the
    /// workers' loops without the GIL and added up across workers
    /// (https://github.com/m0serve/m0serve/blob/main/docs/operations.md#metrics-prometheus).
    #[arg(
        hide_env = true,
        help_heading = "Metrics",
        long,
        env = "M0SERVE_METRICS_PORT",
        value_name = "PORT"
    )]
    pub(crate) metrics_port: Option<u16>,

    /// The address the metrics port listens on.
    #[arg(
        hide_env = true,
        help_heading = "Metrics",
        hide_short_help = true,
        long,
        env = "M0SERVE_METRICS_ADDRESS",
        default_value = "127.0.0.1",
        value_name = "ADDRESS"
    )]
    pub(crate) metrics_address: String,

    /// Restart the workers when a `.py` file under --app-dir changes (development only).
    #[arg(hide_env = true, help_heading = "Development and tuning", long, env = "M0SERVE_RELOAD", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) reload: bool,

    /// With --reload: paths (relative to --app-dir) or file names matching these glob
    /// patterns are not watched, repeatable or comma-separated (e.g. `tests/*`).
    #[arg(
        hide_env = true,
        help_heading = "Development and tuning",
        hide_short_help = true,
        long,
        env = "M0SERVE_RELOAD_IGNORE",
        value_name = "PATTERN",
        value_delimiter = ','
    )]
    pub(crate) reload_ignore: Vec<String>,

    /// Check the configuration and import the app, then exit.
    ///
    /// Exits 0 when both are good, else 1
    /// with a message naming the module, attribute or file at fault (2 for a bad flag).
    /// What this host lacks and the server's may not (a log file's directory, `fd://N`)
    /// is a warning. Serves nothing and creates nothing.
    #[arg(hide_env = true, help_heading = "Serving", long, env = "M0SERVE_CHECK_CONFIG", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) check_config: bool,

    /// Print each thread's pipeline counters at exit (they are also printed on SIGUSR2).
    #[arg(hide_env = true, help_heading = "Metrics", hide_short_help = true, long, env = "M0SERVE_STATS", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) stats: bool,

    /// How the kernel schedules each worker's loop and handler threads: `batch`
    /// (SCHED_BATCH: a thread woken waits for the one running on its core to sleep, so
    /// the loop finishes its pass and a handler its batch before they switch) or `normal`
    /// (SCHED_OTHER: a thread woken may preempt the one running). Inline mode
    /// (--blocking-threads 0) keeps the normal policy; threads and processes the app starts
    /// from a handler inherit its policy.
    #[arg(
        hide_env = true,
        help_heading = "Development and tuning",
        hide_short_help = true,
        long,
        env = "M0SERVE_SCHEDULING_POLICY",
        value_enum,
        default_value = "batch"
    )]
    pub(crate) scheduling_policy: SchedulingPolicy,

    /// Where each worker's threads run. `adaptive` (the default): with one handler thread,
    /// the loop runs on the CPU its handler is on (and follows it there) while the worker
    /// uses half a core to 1.2 cores while awake (quiet spells between bursts left out) and
    /// neither thread fills one, so requests change hands within a core; it lets the loop go when that CPU is full while another idles, other
    /// processes crowd it, or the kernel keeps moving the handler (judged each second).
    /// Only the loop thread, which never runs
    /// Python, is pinned: the app, its threads and its processes keep every CPU. `auto` pins
    /// each whole worker process (its loop, its handlers and any thread the app starts) to
    /// one CPU, the Nth worker the Nth CPU this process may run on (round robin when there
    /// are more workers than CPUs), or a list such as `0,2,4-7` to take them from: for apps
    /// light on Python, since one whose Python keeps a core busy loses the other core its
    /// loop would use (https://github.com/m0serve/m0serve/blob/main/docs/operations.md).
    /// `none` pins nothing.
    #[arg(
        hide_env = true,
        help_heading = "Development and tuning",
        hide_short_help = true,
        long,
        env = "M0SERVE_CPU_AFFINITY",
        value_name = "CPUS",
        default_value = "adaptive"
    )]
    pub(crate) cpu_affinity: String,

    /// Microseconds each worker's loop goes on polling its sockets, once its work is done
    /// and no request is at a handler thread, before it sleeps: the next request then finds
    /// it awake instead of waking an idle CPU. A lower latency at the price of CPU (up to a
    /// core per worker: the polling counts as busy), and only while requests come closer
    /// together than this; further apart, the windows run out and cost CPU for nothing.
    /// Mostly for inline mode (`--blocking-threads 0`) on cores of its own; 0 (the
    /// default) sleeps at once (measured: "idle poll" in
    /// https://github.com/m0serve/m0serve/blob/main/benchmarks/decisions.md).
    #[arg(
        hide_env = true,
        help_heading = "Development and tuning",
        hide_short_help = true,
        long,
        env = "M0SERVE_IDLE_POLL",
        default_value_t = 0,
        value_name = "MICROSECONDS"
    )]
    pub(crate) idle_poll: u64,

    /// Benchmarking only: the loop answers every request with a fixed hello-world response
    /// itself, without calling the app (the loop thread's ceiling).
    #[arg(hide_env = true, help_heading = "Development and tuning", hide_short_help = true, long, env = "M0SERVE_STATIC_RESPONSE", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) static_response: bool,

    /// Read more flags from FILE, one per line.
    ///
    /// One per line as on the command line (`--workers 4`,
    /// `--access-log`); blank lines and lines starting with `#` are skipped. The rest of a
    /// line after the flag is its value as written, less one pair of quotes around all of
    /// it (`--forwarded-allow-ips ""` is an empty value; an access log format keeps its own
    /// quotes). A file ending in `.py` is a gunicorn configuration: Python runs it, and its
    /// settings are read as gunicorn's flags (server hooks are named, not run).
    #[arg(
        hide_env = true,
        help_heading = "Serving",
        short = 'c',
        long,
        env = "M0SERVE_CONFIG",
        value_name = "FILE"
    )]
    pub(crate) config: Option<PathBuf>,

    /// Print the resolved configuration, each value with where it came from (default,
    /// file, environment, flag), and exit.
    #[arg(hide_env = true, help_heading = "Serving", hide_short_help = true, long, env = "M0SERVE_PRINT_CONFIG", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) print_config: bool,

    /// Print docs/configuration.md (every option, generated from this definition).
    #[arg(long, hide = true)]
    pub(crate) print_flags_markdown: bool,

    /// Error log level.
    ///
    /// Any case; `warn` and `critical` as gunicorn spells them.
    #[arg(
        hide_env = true,
        help_heading = "Logging",
        long,
        env = "M0SERVE_LOG_LEVEL",
        value_enum,
        default_value = "info",
        ignore_case = true
    )]
    pub(crate) log_level: Level,

    /// Error log format: `text` (`[2026-12-01 17:17:08 +0000] [PID] [LEVEL] [THREAD]
    /// message`) or `json` (one object a line: time in ISO 8601 with its zone, level, pid,
    /// thread, message).
    #[arg(
        hide_env = true,
        help_heading = "Logging",
        hide_short_help = true,
        long,
        env = "M0SERVE_LOG_FORMAT",
        value_enum,
        default_value = "text",
        ignore_case = true
    )]
    pub(crate) log_format: LogFormat,

    /// Write the error log, and everything the app writes to standard error, to PATH
    /// (appending; reopened on SIGUSR1); `-` is standard error.
    #[arg(
        hide_env = true,
        help_heading = "Logging",
        hide_short_help = true,
        long,
        env = "M0SERVE_ERROR_LOG_FILE",
        value_name = "PATH"
    )]
    pub(crate) error_log_file: Option<PathBuf>,

    /// The options given (flag, file or environment) rather than left to their defaults,
    /// by clap id (`cpu_affinity`): for warnings about a value that does nothing.
    #[arg(skip)]
    pub(crate) given: std::collections::BTreeSet<String>,

    /// Of `given`, those the environment set (an image's `M0SERVE_HOST`, say).
    #[arg(skip)]
    pub(crate) from_env: std::collections::BTreeSet<String>,

    /// What the foreign spellings in the command line, `GUNICORN_CMD_ARGS` and the
    /// `--config` file did (`foreign::rewrite`), to log at start.
    #[arg(skip)]
    pub(crate) foreign_warnings: Vec<String>,

    /// Granian's `--factory`: the app is a factory to call (`module:factory()`).
    #[arg(long, hide = true)]
    pub(crate) factory: bool,
}

/// Parses a command line (`argv[0]` first). `Err(code)` after clap printed help, the
/// version or an error naming the flag at fault.
pub(crate) fn parse(argv: &[OsString], runner: &gunicorn_conf::Runner) -> Result<Cli, i32> {
    let fail = |e: clap::Error| {
        // An unknown flag gets m0serve's own message (clap's "similar argument" may be a
        // flag of another meaning: --threads was offered --reload); the rest name the flag
        // at fault. Exit 2 for usage errors, 0 for --help/--version.
        if e.kind() == clap::error::ErrorKind::UnknownArgument {
            if let Some(clap::error::ContextValue::String(flag)) = e
                .get(clap::error::ContextKind::InvalidArg)
                .filter(|v| matches!(v, clap::error::ContextValue::String(f) if f.starts_with('-')))
            {
                eprintln!(
                    "m0serve: error: {}",
                    foreign::unknown_flag(flag, &long_flags())
                );
                return 2;
            }
        }
        let _ = e.print();
        e.exit_code()
    };
    let usage = |e: String| {
        eprintln!("m0serve: error: {e}");
        2
    };
    if argv.iter().any(|a| a == "--print-flags-markdown") {
        print!("{}", flags_markdown());
        return Err(0);
    }
    let program = argv.first().cloned().unwrap_or_else(|| "m0serve".into());
    let given = foreign_rewritten(argv.get(1..).unwrap_or_default()).map_err(usage)?;
    // GUNICORN_CMD_ARGS, read as gunicorn reads it: over the --config file, under the
    // command line (and under M0SERVE_ variables, as the file is).
    let gunicorn_env = match std::env::var_os("GUNICORN_CMD_ARGS") {
        Some(v) if !v.is_empty() => {
            let text = v.to_string_lossy();
            let words = shlex::split(&text).ok_or_else(|| {
                usage(format!(
                    "GUNICORN_CMD_ARGS {text:?}: unbalanced quotes (it is split as a shell \
                     would)"
                ))
            })?;
            let words: Vec<OsString> = words.into_iter().map(Into::into).collect();
            let mut r =
                foreign_rewritten(&words).map_err(|e| usage(format!("GUNICORN_CMD_ARGS: {e}")))?;
            // Its words alone, so that what is wrong in them is said to be there.
            let alone = std::iter::once(program.clone()).chain(r.args.iter().cloned());
            if let Err(e) = Cli::command().try_get_matches_from(alone) {
                if e.kind() != clap::error::ErrorKind::MissingRequiredArgument {
                    eprint!("m0serve: in GUNICORN_CMD_ARGS: ");
                    return Err(fail(e));
                }
            }
            r.warnings.insert(
                0,
                format!(
                    "GUNICORN_CMD_ARGS is set: read as gunicorn reads it ({text}); \
                     M0SERVE_<FLAG> variables are m0serve's own"
                ),
            );
            Some(r)
        }
        _ => None,
    };
    let with = |parts: &[&[OsString]]| {
        let mut all = vec![program.clone()];
        for p in parts {
            all.extend(p.iter().cloned());
        }
        all
    };
    // The command line alone: where the --config file is, and what it sets. A gunicorn
    // configuration may name the app (`wsgi_app`), so a missing APP waits for it.
    let first = match Cli::command().try_get_matches_from(with(&[&given.args])) {
        Ok(m) => m,
        Err(e) if e.kind() == clap::error::ErrorKind::MissingRequiredArgument => {
            let tolerant = Cli::command()
                .ignore_errors(true)
                .try_get_matches_from(with(&[&given.args]));
            match tolerant {
                Ok(m) if m.get_one::<PathBuf>("config").is_some() => m,
                _ => return Err(fail(e)),
            }
        }
        Err(e) => return Err(fail(e)),
    };
    // What GUNICORN_CMD_ARGS holds, less what the environment or the command line set.
    let gunicorn_args = match &gunicorn_env {
        Some(r) => not_set_in(&r.args, &first),
        None => Vec::new(),
    };
    // Both: the --config file (which GUNICORN_CMD_ARGS may name, as in gunicorn), and what
    // the file's flags must leave to them.
    let above = Cli::command()
        .ignore_errors(true)
        .try_get_matches_from(with(&[&gunicorn_args, &given.args]))
        .unwrap_or_else(|_| first.clone());
    let file = match above.get_one::<PathBuf>("config") {
        Some(path) => match file_flags(path, &above, runner) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("m0serve: error: --config {}: {e}", path.display());
                return Err(2);
            }
        },
        None => Rewritten::default(),
    };
    // The file's flags go first, then GUNICORN_CMD_ARGS's, so the command line's override
    // them; a flag the environment sets was left out of both, so the environment wins.
    // The app a gunicorn configuration names (`wsgi_app`), where the command line has none.
    let app_from_file: Vec<OsString> = match (&file.app, above.get_one::<String>("app")) {
        (Some(app), None) if given.args.iter().any(|a| a == "--") => vec![app.into()],
        (Some(app), None) => vec!["--".into(), app.into()],
        _ => Vec::new(),
    };
    let matches = Cli::command()
        .try_get_matches_from(with(&[
            &file.args,
            &gunicorn_args,
            &given.args,
            &app_from_file,
        ]))
        .map_err(fail)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(fail)?;
    cli.foreign_warnings = file.warnings;
    if let Some(r) = gunicorn_env {
        cli.foreign_warnings.extend(r.warnings);
    }
    cli.foreign_warnings.extend(given.warnings);
    cli.given = matches
        .ids()
        .filter(|id| {
            matches!(
                matches.value_source(id.as_str()),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        })
        .map(|id| id.as_str().to_string())
        .collect();
    cli.from_env = cli
        .given
        .iter()
        .filter(|id| matches.value_source(id) == Some(ValueSource::EnvVariable))
        .cloned()
        .collect();
    if cli.print_config {
        // Which of them GUNICORN_CMD_ARGS set (its words alone, the app not required).
        let from_gunicorn_env = Cli::command()
            .ignore_errors(true)
            .try_get_matches_from(with(&[&gunicorn_args]))
            .ok();
        print_config(&matches, &first, from_gunicorn_env.as_ref());
        return Err(0);
    }
    Ok(cli)
}

/// `args` with foreign spellings rewritten (`foreign::rewrite`).
fn foreign_rewritten(args: &[OsString]) -> Result<Rewritten, String> {
    let cmd = Cli::command();
    foreign::rewrite(args, &|flag: &str| {
        cmd.get_arguments().any(|a| {
            let named = if flag.len() == 1 {
                a.get_short().is_some_and(|c| flag.starts_with(c))
            } else {
                a.get_long() == Some(flag)
            };
            named && a.get_action().takes_values()
        })
    })
}

/// The long flags m0serve takes, its own and the foreign spellings, for a typo's
/// correction.
fn long_flags() -> Vec<String> {
    Cli::command()
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long().map(str::to_string))
        .chain(
            foreign::SPELLINGS
                .iter()
                .filter(|s| !matches!(s.becomes, foreign::Becomes::Refused(_)))
                .map(|s| s.name.to_string()),
        )
        .collect()
}

/// The words of `args` (flags as m0serve spells them) whose option the environment or the
/// command line did not set, per `first`: those lower in precedence drop out whole, so
/// that a list set above replaces theirs rather than adding to it.
fn not_set_in(args: &[OsString], first: &ArgMatches) -> Vec<OsString> {
    let cmd = Cli::command();
    let set_above = |id: &str| {
        matches!(
            first.value_source(id),
            Some(ValueSource::EnvVariable | ValueSource::CommandLine)
        )
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let word = args[i].to_string_lossy().into_owned();
        i += 1;
        let (arg, attached) = if let Some(long) = word.strip_prefix("--") {
            let (name, v) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            (cmd.get_arguments().find(|a| a.get_long() == Some(name)), v)
        } else if let Some(short) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = short.chars().next().unwrap_or('-');
            (
                cmd.get_arguments().find(|a| a.get_short() == Some(c)),
                short.len() > 1,
            )
        } else {
            // The app: dropped when the command line names one.
            if !set_above("app") {
                out.push(args[i - 1].clone());
            }
            continue;
        };
        let mut group = vec![args[i - 1].clone()];
        if let Some(a) = arg {
            if a.get_action().takes_values() && !attached && i < args.len() {
                group.push(args[i].clone());
                i += 1;
            }
            if set_above(a.get_id().as_str()) {
                continue;
            }
        }
        out.extend(group);
    }
    out
}

/// The flags in a `--config` file, without those the environment or the command line set
/// (per `first`, the matches without the file).
fn file_flags(
    path: &std::path::Path,
    first: &ArgMatches,
    runner: &gunicorn_conf::Runner,
) -> Result<Rewritten, String> {
    if path.extension().is_some_and(|e| e == "py") {
        let read = gunicorn_conf::read(path, runner)?;
        let mut warnings = read.warnings;
        let mut args = Vec::new();
        // Each setting alone, so that what is refused is named by the setting the file
        // wrote (`preload_app`), not only by its flag.
        for (setting, word) in read.flags {
            let r = foreign_rewritten(&[word]).map_err(|e| format!("{setting}: {e}"))?;
            args.extend(r.args);
            warnings.extend(r.warnings);
        }
        return Ok(Rewritten {
            args: not_set_in(&args, first),
            warnings,
            app: read.app,
        });
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let cmd = Cli::command();
    let mut out = Rewritten::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (flag, value) = match line.split_once(|c: char| c == '=' || c.is_whitespace()) {
            Some((f, v)) => (f.trim(), Some(file_value(v.trim()))),
            None => (line, None),
        };
        let Some(long) = flag.strip_prefix("--") else {
            return Err(format!("line {}: {line:?} is not a --flag", n + 1));
        };
        let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(long)) else {
            if foreign::find(long).is_none() {
                return Err(format!("line {}: unknown flag --{long}", n + 1));
            }
            let words: Vec<OsString> = match value {
                Some(v) => vec![format!("--{long}={v}").into()],
                None => vec![format!("--{long}").into()],
            };
            let r = foreign_rewritten(&words).map_err(|e| format!("line {}: {e}", n + 1))?;
            out.args.extend(not_set_in(&r.args, first));
            out.warnings.extend(r.warnings);
            continue;
        };
        if long == "config" {
            return Err(format!("line {}: --config cannot be nested", n + 1));
        }
        let id = arg.get_id().as_str();
        if matches!(
            first.value_source(id),
            Some(ValueSource::EnvVariable | ValueSource::CommandLine)
        ) {
            continue;
        }
        // One `--flag=VALUE` word: an empty value stays a value, and a value never becomes
        // the next word (the APP argument).
        match (value, arg.get_action().takes_values()) {
            (Some(v), true) => out.args.push(format!("--{long}={v}").into()),
            (None, false) => out.args.push(format!("--{long}").into()),
            (Some(_), false) => {
                return Err(format!(
                    "line {}: --{long} takes no value (the flag alone turns it on)",
                    n + 1
                ))
            }
            (None, true) => {
                return Err(format!(
                    "line {}: --{long} needs a value (`\"\"` for an empty one)",
                    n + 1
                ))
            }
        }
    }
    Ok(out)
}

/// A `--config` file's value: the rest of the line as written, less one pair of quotes
/// around all of it (`"..."` or `'...'`, with no other quote of that kind inside), so that
/// `""` is an empty value and a value with its own quotes (an access log format) is kept.
fn file_value(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            if !inner.contains(q) {
                return inner;
            }
        }
    }
    v
}

/// docs/configuration.md, from the clap definition itself (a test keeps the file equal to
/// this, so it cannot go stale).
pub(crate) fn flags_markdown() -> String {
    let mut out = String::from(
        "# Configuration\n\n\
         Every option of `m0serve`, generated from its command-line definition \
         (`m0serve --print-flags-markdown`; a test checks this file against it). Each can be \
         given on the command line, in the environment variable shown, or in a `--config` \
         file (one flag per line); the command line wins over the environment, which wins \
         over the file. A list option (`--bind`, `--env`, `--pythonpath`...) set in a place \
         that wins replaces the list the others give; it is not added to it. \
         `m0serve --print-config` shows the values in effect and where each came from.\n\n\
         | option | environment | default | what it does |\n|---|---|---|---|\n",
    );
    let cmd = Cli::command();
    for arg in cmd.get_arguments() {
        if arg.is_hide_set() || matches!(arg.get_id().as_str(), "help" | "version") {
            continue;
        }
        let name = match arg.get_long() {
            Some(l) => {
                let long = match arg.get_value_names() {
                    Some(v) if arg.get_action().takes_values() => format!("`--{l} {}`", v[0]),
                    _ => format!("`--{l}`"),
                };
                match arg.get_short() {
                    Some(c) => format!("`-{c}`, {long}"),
                    None => long,
                }
            }
            None => format!("`{}` (positional)", arg.get_id().as_str().to_uppercase()),
        };
        let env = arg
            .get_env()
            .map_or_else(String::new, |e| format!("`{}`", e.to_string_lossy()));
        let default = arg
            .get_default_values()
            .iter()
            .map(|d| format!("`{}`", d.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(", ");
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string().replace('\n', " ").replace('|', "\\|"))
            .unwrap_or_default();
        out.push_str(&format!("| {name} | {env} | {default} | {help} |\n"));
    }
    out
}

/// `--print-config`: every option's value and where it came from.
fn print_config(matches: &ArgMatches, first: &ArgMatches, gunicorn_env: Option<&ArgMatches>) {
    let cmd = Cli::command();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if matches!(id, "help" | "version" | "print_config") || arg.is_hide_set() {
            continue;
        }
        let name = arg
            .get_long()
            .map_or_else(|| id.to_uppercase(), |l| format!("--{l}"));
        let value = matches
            .get_raw(id)
            .map(|vals| {
                vals.map(|v| v.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let source = match matches.value_source(id) {
            Some(ValueSource::DefaultValue) => "default".to_string(),
            Some(ValueSource::EnvVariable) => format!(
                "environment ({})",
                arg.get_env()
                    .map_or_else(String::new, |e| e.to_string_lossy().into_owned())
            ),
            Some(ValueSource::CommandLine) => {
                if first.value_source(id) == Some(ValueSource::CommandLine) {
                    "flag".to_string()
                } else if gunicorn_env
                    .is_some_and(|g| g.value_source(id) == Some(ValueSource::CommandLine))
                {
                    "GUNICORN_CMD_ARGS".to_string()
                } else {
                    "file".to_string()
                }
            }
            _ => "unset".to_string(),
        };
        println!("{name} = {value:?}  # {source}");
    }
}

/// A byte count: digits, optionally followed by K, M or G (powers of 1024).
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1u64 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1u64 << 30),
        _ => (t, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a size (bytes, or a number with K, M or G)"))
}
