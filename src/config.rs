//! The validated, immutable configuration a worker runs with.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::Cli;
use crate::http::limits::{Limits, Timeouts};
use crate::log::Level;
use crate::python::AppSpec;
use crate::sys::listen::{Address, ListenSpec, MAX_LISTENERS};
use crate::wsgi::proxy::Trusted;

/// Most handler threads a worker may have: each holds a Python thread state and two rings.
pub(crate) const MAX_BLOCKING_THREADS: usize = 1024;

/// `--max-blocking-threads` by default: enough for an app that waits on its database to
/// serve as many requests at once as a Granian or gunicorn-gthread user would give it
/// threads for, while a thread that is not needed is never started (the pool grows only
/// while its threads wait).
pub(crate) const DEFAULT_MAX_BLOCKING_THREADS: usize = 64;

/// Most worker processes: each is a whole interpreter.
pub(crate) const MAX_WORKERS: usize = 1024;

/// Longest `--graceful-timeout` (a day).
pub(crate) const MAX_GRACEFUL_TIMEOUT_SECS: f64 = 86_400.0;
/// `--idle-poll`'s upper bound (10 ms): the polling is for requests microseconds apart; a
/// longer window would only hold a CPU through gaps that no poll shortens.
pub(crate) const MAX_IDLE_POLL_US: u64 = 10_000;

/// A day in seconds: the longest most timeouts may be.
const DAY: f64 = 86_400.0;

/// An IPv4 or IPv6 address from a flag, the latter with or without its brackets.
fn parse_ip(flag: &str, s: &str) -> Result<IpAddr, String> {
    s.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| format!("{flag} {s:?}: not an IPv4 or IPv6 address"))
}

/// Seconds from a flag, within `lo..=hi`.
fn seconds(flag: &str, v: f64, lo: f64, hi: f64) -> Result<Duration, String> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!("{flag} {v}: must be between {lo} and {hi} seconds"))
    }
}

/// A whole number from a flag, within `lo..=hi`.
fn within(flag: &str, v: u64, lo: u64, hi: u64) -> Result<u64, String> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{flag} {v}: must be between {lo} and {hi}"))
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) app: AppSpec,
    pub(crate) listen: Vec<ListenSpec>,
    /// How many of `listen` come from --bind/--host (the rest: --insecure-bind).
    pub(crate) secure_listeners: usize,
    /// `--certfile` and the rest, read into a rustls configuration.
    pub(crate) tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// The flags it was read from (each worker reads the files again, as `--user`).
    pub(crate) tls_options: Option<crate::tls::Options>,
    /// `--uds-permissions`.
    pub(crate) uds_permissions: Option<u32>,
    pub(crate) workers: usize,
    pub(crate) blocking_threads: usize,
    /// `--max-blocking-threads`: the most handler threads the pool grows to (0 inline).
    pub(crate) max_blocking_threads: usize,
    /// `--blocking-threads-idle-timeout`.
    pub(crate) blocking_threads_idle: std::time::Duration,
    /// `--max-websockets`.
    pub(crate) max_websockets: usize,
    /// `--preload`: a preloader imports the app and forks the workers.
    pub(crate) preload: bool,
    /// `--static-map`: URL prefix (no trailing slash), absolute directory.
    pub(crate) static_map: Vec<(String, PathBuf)>,
    /// `--mime-type`: extension (lower case, no dot), type.
    pub(crate) mime_types: Vec<(String, String)>,
    pub(crate) static_max_age: u64,
    pub(crate) static_index: bool,
    pub(crate) static_follow_symlinks: bool,
    /// `--max-queue-wait`: `None` when off (0).
    pub(crate) max_queue_wait: Option<std::time::Duration>,
    pub(crate) graceful_timeout: std::time::Duration,
    pub(crate) limits: Limits,
    pub(crate) max_body_size: u64,
    pub(crate) body_buffer_size: usize,
    pub(crate) max_connections: usize,
    pub(crate) timeouts: Timeouts,
    pub(crate) backlog: i32,
    /// `--timeout`: `None` for no limit.
    pub(crate) timeout: Option<Duration>,
    /// `--silent-timeout`.
    pub(crate) silent_timeout: Duration,
    pub(crate) max_requests: u64,
    pub(crate) max_requests_jitter: u64,
    pub(crate) workers_max_rss: u64,
    pub(crate) pid_file: Option<PathBuf>,
    /// `--user` and `--group`, resolved.
    pub(crate) identity: crate::sys::privileges::Identity,
    /// `--check-config`: check, import the app, exit.
    pub(crate) check_only: bool,
    /// The peers whose forwarding headers are believed: `--forwarded-allow-ips`, and none
    /// behind `--proxy-protocol` without `--proxy-forwarded-headers`.
    pub(crate) trusted: crate::wsgi::proxy::Trusted,
    /// `--proxy-protocol`.
    pub(crate) proxy_protocol: bool,
    /// `--proxy-allow-from`: who may send a PROXY header.
    pub(crate) proxy_allow: crate::wsgi::proxy::Trusted,
    /// `--access-log`: where and in which format.
    pub(crate) access_log: Option<(crate::access_log::Target, crate::access_log::Format)>,
    pub(crate) app_dir: PathBuf,
    /// `--pythonpath`, absolute, after `app_dir` on `sys.path`.
    pub(crate) pythonpath: Vec<PathBuf>,
    /// `--root-path` (or SCRIPT_NAME): `/prefix`, without a trailing slash.
    pub(crate) root_path: Option<String>,
    /// `--root-path-outside app`: a request outside the prefix goes to the app.
    pub(crate) root_path_app: bool,
    /// What the flags accept but warn about (logged once, by the master).
    pub(crate) warnings: Vec<String>,
    pub(crate) log_level: Level,
    pub(crate) log_format: crate::log::Format,
    /// `--error-log-file` (`None`: standard error, also for `-`).
    pub(crate) error_log_file: Option<PathBuf>,
    pub(crate) stats: bool,
    pub(crate) static_response: bool,
    /// `--scheduling-policy batch` with handler threads: the worker's loop and handler
    /// threads are SCHED_BATCH.
    pub(crate) batch_scheduling: bool,
    /// `--cpu-affinity`: the CPUs workers are pinned to, worker N to the Nth (round robin).
    pub(crate) cpu_affinity: Option<Vec<usize>>,
    /// `--cpu-affinity adaptive` (the default): each worker's loop runs beside its one
    /// handler thread while that suits them (`worker::placement`).
    pub(crate) adaptive_affinity: bool,
    /// `--idle-poll`: how long a loop polls before it sleeps (`None`: it sleeps at once).
    pub(crate) idle_poll: Option<Duration>,
    /// `--metrics-port` (with `--metrics-address`).
    pub(crate) metrics: Option<SocketAddr>,
    /// `--reload`, with its `--reload-ignore` patterns.
    pub(crate) reload: Option<Vec<String>>,
    /// `--venv`, made absolute.
    pub(crate) venv: Option<PathBuf>,
}

/// `--cpu-affinity` other than `none`: `auto` (every CPU in `allowed`, in order) or a list
/// of CPU numbers and ranges (`0,2,4-7`), each one this process may run on.
fn cpu_affinity(spec: &str, allowed: &std::io::Result<Vec<usize>>) -> Result<Vec<usize>, String> {
    let allowed = allowed
        .as_ref()
        .map_err(|e| format!("--cpu-affinity: cannot read the CPUs this process may use: {e}"))?;
    // The value as given, cut short in messages (a list may be long).
    let shown: String = spec.chars().take(40).collect();
    let shown = if shown.len() < spec.len() {
        format!("{shown:?}...")
    } else {
        format!("{shown:?}")
    };
    let spec = spec.trim();
    if spec == "auto" {
        return Ok(allowed.clone());
    }
    let bad = |why: &str| format!("--cpu-affinity {shown}: {why}");
    // Digits only: `parse` alone would also take a sign (`+0`).
    let number = |s: &str| {
        let s = s.trim();
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(
                "expected `auto`, `adaptive`, `none`, or CPU numbers and ranges such as 0,2,4-7",
            ));
        }
        s.parse::<usize>()
            .map_err(|_| bad(&format!("CPU {s} is out of range")))
    };
    let mut cpus = Vec::new();
    for part in spec.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if first > last {
            return Err(bad(&format!("the range {first}-{last} runs backwards")));
        }
        for cpu in first..=last {
            if !allowed.contains(&cpu) {
                return Err(bad(&format!(
                    "CPU {cpu} is not one this process may run on (those are {})",
                    describe_cpus(allowed)
                )));
            }
            if !cpus.contains(&cpu) {
                cpus.push(cpu);
            }
        }
    }
    Ok(cpus)
}

/// `0-3,6`: CPU numbers with runs written as ranges.
fn describe_cpus(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// `--root-path`: `/prefix` (a trailing slash dropped); `/` or empty is no prefix.
fn root_path(r: &str) -> Result<Option<String>, String> {
    let r = r.trim().trim_end_matches('/');
    if r.is_empty() {
        return Ok(None);
    }
    if !r.starts_with('/') || r.contains(['?', '#']) || r.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "--root-path {r:?}: expected a path such as /app (it starts with /, without a \
             query or spaces)"
        ));
    }
    Ok(Some(r.to_string()))
}

/// `--static-map PREFIX=DIR` values: the prefix a path (`/static`; a trailing slash
/// dropped, `/` alone for everything), each prefix once.
fn static_map(values: &[String]) -> Result<Vec<(String, PathBuf)>, String> {
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for v in values {
        let bad = |why: &str| format!("--static-map {v:?}: {why}");
        let Some((prefix, dir)) = v.split_once('=') else {
            return Err(bad("expected PREFIX=DIR, such as /static=/srv/app/static"));
        };
        let prefix = match prefix.trim().trim_end_matches('/') {
            "" => "/",
            p => p,
        };
        if !prefix.starts_with('/')
            || prefix.contains(['?', '#', '%', '\\'])
            || prefix.bytes().any(|b| b <= b' ' || b == 0x7f)
        {
            return Err(bad(
                "the prefix is a URL path such as /static (it starts with /, without a query, \
                 escapes or spaces)",
            ));
        }
        if prefix.split('/').any(|s| s == "." || s == "..") {
            return Err(bad("the prefix may not have . or .. segments"));
        }
        if dir.trim().is_empty() {
            return Err(bad("no directory after ="));
        }
        if out.iter().any(|(p, _)| p == prefix) {
            return Err(bad(&format!("{prefix} is mapped twice")));
        }
        // Made absolute by `Unresolved::resolve`.
        out.push((prefix.to_string(), PathBuf::from(dir.trim())));
    }
    Ok(out)
}

/// `--mime-type EXT=TYPE` values: the extension without its dot, in lower case; the type a
/// `type/subtype` with optional parameters, nothing that could break a header.
fn mime_types(values: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for v in values {
        let bad = || {
            format!(
                "--mime-type {v:?}: expected EXT=TYPE, such as webmanifest=application/manifest+json"
            )
        };
        let (ext, ty) = v.split_once('=').ok_or_else(bad)?;
        let ext = ext.trim().trim_start_matches('.').to_ascii_lowercase();
        let ty = ty.trim();
        let (main, sub) = ty
            .split(';')
            .next()
            .unwrap_or("")
            .split_once('/')
            .ok_or_else(bad)?;
        let token =
            |s: &str| !s.trim().is_empty() && s.trim().bytes().all(|b| b.is_ascii_graphic());
        if ext.is_empty()
            || !ext
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            || !token(main)
            || !token(sub)
            || ty.bytes().any(|b| b < b' ' || b == 0x7f)
        {
            return Err(bad());
        }
        out.push((ext, ty.to_string()));
    }
    Ok(out)
}

/// `--env-file` lines: `KEY=VALUE`, optionally `export KEY=VALUE`, the value optionally in
/// single or double quotes; blank lines and `#` comments skipped.
pub(crate) fn parse_env_file(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        out.push(parse_env_pair(line).map_err(|e| format!("line {}: {e}", n + 1))?);
    }
    Ok(out)
}

/// `KEY=VALUE` (the value optionally quoted).
pub(crate) fn parse_env_pair(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected KEY=VALUE"))?;
    let k = k.trim();
    if k.is_empty()
        || k.starts_with(|c: char| c.is_ascii_digit())
        || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(format!("{s:?}: {k:?} is not a variable name"));
    }
    let v = v.trim();
    let v = match (v.chars().next(), v.chars().last()) {
        (Some(q @ ('"' | '\'')), Some(e)) if q == e && v.len() >= 2 => &v[1..v.len() - 1],
        _ => v,
    };
    if v.contains('\0') {
        return Err(format!("{s:?}: the value contains a NUL byte"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// What the master does to its own process before the configuration is read (a worker
/// inherits all of it): `--umask`, `--chdir`, then `--env-file` and `--env` into the environment, which the
/// workers, and so the app, inherit.
pub(crate) fn prepare_process(cli: &Cli) -> Result<(), String> {
    if let Some(mask) = &cli.umask {
        crate::sys::privileges::set_umask(crate::sys::privileges::parse_umask(mask)?);
    }
    if let Some(dir) = &cli.chdir {
        std::env::set_current_dir(dir).map_err(|e| format!("--chdir {}: {e}", dir.display()))?;
    }
    let mut vars = Vec::new();
    if let Some(path) = &cli.env_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--env-file {}: {e}", path.display()))?;
        vars.extend(
            parse_env_file(&text).map_err(|e| format!("--env-file {}: {e}", path.display()))?,
        );
    }
    for pair in &cli.env_vars {
        vars.push(parse_env_pair(pair).map_err(|e| format!("--env {e}"))?);
    }
    for (k, v) in vars {
        // The master is single-threaded here: nothing reads the environment meanwhile.
        std::env::set_var(k, v);
    }
    Ok(())
}

impl Config {
    /// The listen addresses, for messages, as the start-up log names them: `http://ADDR`,
    /// `https://ADDR` where TLS covers it, `unix:PATH`, `fd://N`.
    pub(crate) fn describe_listen(&self) -> String {
        let all: Vec<String> = self
            .listen
            .iter()
            .enumerate()
            .map(|(i, spec)| match spec {
                ListenSpec::Tcp(a) if self.is_tls(i, true) => format!("https://{a}"),
                ListenSpec::Tcp(a) => format!("http://{a}"),
                other => other.describe(),
            })
            .collect();
        all.join(", ")
    }

    /// Whether TLS covers the `i`th listening socket, `tcp` if it is a TCP one: every TCP
    /// socket of --bind/--host (or passed by systemd) when --certfile is given.
    pub(crate) fn is_tls(&self, i: usize, tcp: bool) -> bool {
        self.tls.is_some() && tcp && !(i >= self.secure_listeners && i < self.listen.len())
    }

    /// The command line, checked, with nothing looked up: no file, name, directory or
    /// environment variable is read here (the parsing read those flags' own). What needs the
    /// system is left in the [`Unresolved`] it returns, whose `resolve` the entry point
    /// calls next.
    pub(crate) fn from_cli(mut cli: Cli) -> Result<Unresolved, String> {
        let app = AppSpec::parse(&cli.app)?;
        let app = if cli.factory { app.called() } else { app };
        let listen = Listen::from_cli(&cli)?;
        let tls_options = tls_options(&cli, &listen)?;
        let (timeout, silent_timeout, timeouts) = timeouts(&cli)?;
        let foreign = std::mem::take(&mut cli.foreign_warnings);
        let warnings = warnings(&cli, foreign, &listen)?;
        // Checked even when the access log is off, so a typo is found before it is needed.
        let access_log_format = crate::access_log::Format::parse(&cli.access_log_format)?;
        let config = Config {
            app,
            listen: Vec::new(),
            secure_listeners: 0,
            uds_permissions: uds_permissions(&cli)?,
            workers: within("--workers", cli.workers as u64, 1, MAX_WORKERS as u64)? as usize,
            max_blocking_threads: max_blocking_threads(&cli)?,
            blocking_threads: cli.blocking_threads,
            max_websockets: cli.max_websockets,
            preload: cli.preload,
            static_map: static_map(&cli.static_map)?,
            mime_types: mime_types(&cli.mime_type)?,
            static_max_age: cli.static_max_age,
            static_index: cli.static_index,
            static_follow_symlinks: cli.static_follow_symlinks,
            blocking_threads_idle: seconds(
                "--blocking-threads-idle-timeout",
                cli.blocking_threads_idle_timeout,
                0.05,
                DAY,
            )?,
            max_queue_wait: (cli.max_queue_wait != 0.0)
                .then(|| seconds("--max-queue-wait", cli.max_queue_wait, 0.01, DAY))
                .transpose()?,
            graceful_timeout: seconds(
                "--graceful-timeout",
                cli.graceful_timeout,
                0.0,
                MAX_GRACEFUL_TIMEOUT_SECS,
            )?,
            limits: limits(&cli)?,
            max_body_size: within("--max-body-size", cli.max_body_size, 0, 1 << 40)?,
            body_buffer_size: within("--body-buffer-size", cli.body_buffer_size, 0, 1 << 30)?
                as usize,
            max_connections: within("--max-connections", cli.max_connections as u64, 1, 1 << 20)?
                as usize,
            timeouts,
            backlog: within("--backlog", u64::from(cli.backlog), 1, 65535)? as i32,
            timeout,
            silent_timeout,
            max_requests: within("--max-requests", cli.max_requests, 0, 1 << 40)?,
            max_requests_jitter: within(
                "--max-requests-jitter",
                cli.max_requests_jitter,
                0,
                1 << 40,
            )?,
            workers_max_rss: within("--workers-max-rss", cli.workers_max_rss, 0, 1 << 30)?,
            trusted: trusted(&cli)?,
            proxy_protocol: cli.proxy_protocol,
            proxy_allow: Trusted::parse("--proxy-allow-from", &cli.proxy_allow_from)?,
            tls: None,
            tls_options,
            identity: Default::default(),
            check_only: cli.check_config,
            root_path: cli
                .root_path
                .as_deref()
                .map(root_path)
                .transpose()?
                .flatten(),
            root_path_app: cli.root_path_outside == crate::cli::Outside::App,
            warnings,
            log_level: cli.log_level,
            log_format: cli.log_format,
            stats: cli.stats,
            static_response: cli.static_response,
            // Inline mode has no handler thread for its loop to share a core with.
            batch_scheduling: cli.scheduling_policy == crate::cli::SchedulingPolicy::Batch
                && cli.blocking_threads > 0,
            metrics: metrics(&cli)?,
            cpu_affinity: None,
            adaptive_affinity: cli.cpu_affinity.trim() == "adaptive",
            idle_poll: idle_poll(&cli)?,
            reload: reload_ignore(&cli)?,
            // Last, the values moved out of `cli`.
            access_log: (cli.access_log || cli.access_log_file.is_some()).then(|| {
                let target = crate::access_log::Target::from_flag(cli.access_log_file);
                (target, access_log_format)
            }),
            pid_file: cli.pid_file,
            app_dir: cli.app_dir,
            pythonpath: cli.pythonpath,
            error_log_file: cli.error_log_file.filter(|p| p.as_os_str() != "-"),
            venv: cli.venv,
        };
        Ok(Unresolved {
            config,
            listen,
            user: cli.user,
            group: cli.group,
            cpu_affinity: Some(cli.cpu_affinity)
                .filter(|spec| !matches!(spec.trim(), "none" | "adaptive")),
            root_path_given: cli.root_path.is_some(),
        })
    }
}

/// A [`Config`] whose command line was checked, with what needs the system still to do.
#[derive(Debug)]
pub(crate) struct Unresolved {
    /// Complete but for `listen`, `secure_listeners`, `tls`, `identity` and
    /// `cpu_affinity`, with the directories as given (`resolve` checks them and `--venv`),
    /// and without what an inherited `SCRIPT_NAME` adds (`root_path` and its warning).
    config: Config,
    listen: Listen,
    /// `--user` and `--group`, as given.
    user: Option<String>,
    group: Option<String>,
    /// `--cpu-affinity` when it names CPUs (`auto` or a list).
    cpu_affinity: Option<String>,
    /// Whether `--root-path` was given (else `SCRIPT_NAME` may stand for it).
    root_path_given: bool,
}

impl Unresolved {
    /// The step that touches the system: looks the host names up, reads the TLS files, the
    /// user database and the CPUs this process may use, makes the directories absolute and
    /// checks them, and takes an inherited `SCRIPT_NAME` as `--root-path`.
    pub(crate) fn resolve(self) -> Result<Config, String> {
        let Unresolved {
            mut config,
            listen,
            user,
            group,
            cpu_affinity: affinity,
            root_path_given,
        } = self;
        let c = &mut config;
        (c.listen, c.secure_listeners) = listen.resolve()?;
        c.tls = c
            .tls_options
            .as_ref()
            .map(crate::tls::server_config)
            .transpose()?;
        if let Some(venv) = &c.venv {
            if !venv.join("pyvenv.cfg").is_file() {
                return Err(format!(
                    "--venv {}: not a virtualenv (no pyvenv.cfg)",
                    venv.display()
                ));
            }
        }
        c.venv = c.venv.take().map(|v| std::path::absolute(&v).unwrap_or(v));
        let app_dir = std::path::absolute(&c.app_dir)
            .map_err(|e| format!("--app-dir {:?}: {e}", c.app_dir))?;
        if !app_dir.is_dir() {
            return Err(format!("--app-dir {:?}: not a directory", c.app_dir));
        }
        c.app_dir = app_dir;
        c.pythonpath = std::mem::take(&mut c.pythonpath)
            .into_iter()
            .filter(|d| !d.as_os_str().is_empty())
            .map(|dir| {
                let abs = std::path::absolute(&dir)
                    .map_err(|e| format!("--pythonpath {}: {e}", dir.display()))?;
                match abs.is_dir() {
                    true => Ok(abs),
                    false => Err(format!("--pythonpath {}: not a directory", dir.display())),
                }
            })
            .collect::<Result<_, String>>()?;
        for (prefix, dir) in &mut c.static_map {
            *dir = std::path::absolute(&*dir).map_err(|e| {
                format!(
                    "--static-map {:?}: {e}",
                    format!("{prefix}={}", dir.display())
                )
            })?;
        }
        if !root_path_given {
            c.root_path = script_name(&mut c.warnings)?;
        }
        c.identity = crate::sys::privileges::Identity::resolve(user.as_deref(), group.as_deref())?;
        // A worker gets its CPU from the master (checked there, against the CPUs the master
        // may use); its own set may since have been narrowed under it.
        c.cpu_affinity = match affinity {
            _ if std::env::var_os(crate::sys::ipc::WORKER_ENV).is_some() => None,
            Some(spec) => Some(cpu_affinity(&spec, &crate::sys::allowed_cpus())?),
            None => None,
        };
        Ok(config)
    }
}

/// The addresses the command line names, before a host name among them is looked up.
#[derive(Debug)]
struct Listen {
    /// `--bind`, else `--uds`, else `--host` and `--port`: TLS covers their TCP addresses.
    secure: Vec<Address>,
    /// Which of those three it was, for messages.
    secure_flag: &'static str,
    /// `--insecure-bind`.
    insecure: Vec<Address>,
}

impl Listen {
    fn from_cli(cli: &Cli) -> Result<Listen, String> {
        let secure = if !cli.bind.is_empty() {
            if cli.bind.len() > MAX_LISTENERS {
                return Err(format!("--bind: at most {} addresses", MAX_LISTENERS));
            }
            let all: Result<Vec<Address>, String> =
                cli.bind.iter().map(|b| Address::parse(b.trim())).collect();
            all?
        } else {
            match &cli.uds {
                Some(path) if path.to_string_lossy().trim().is_empty() => {
                    return Err(format!("--uds {path:?}: empty; give the socket's path"));
                }
                Some(path) => vec![Address::Spec(ListenSpec::Unix(path.clone()))],
                None => {
                    let host = cli
                        .host
                        .trim()
                        .trim_start_matches('[')
                        .trim_end_matches(']');
                    // Empty (`M0SERVE_HOST=`) is a mistake, not every interface.
                    if host.is_empty() {
                        return Err(format!(
                            "--host {:?}: empty; give an address or a name (0.0.0.0 for \
                             every IPv4 interface, 127.0.0.1 for this machine only)",
                            cli.host
                        ));
                    }
                    vec![Address::host(host, cli.port)]
                }
            }
        };
        let insecure = cli
            .insecure_bind
            .iter()
            .map(|b| {
                Address::parse(b.trim())
                    .map_err(|e| format!("--insecure-bind: {}", e.trim_start_matches("--bind ")))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let standard = secure.iter().chain(&insecure).find_map(|a| match a {
            Address::Spec(ListenSpec::Fd(fd)) if *fd < 3 => Some(*fd),
            _ => None,
        });
        if let Some(fd) = standard {
            return Err(format!(
                "--bind fd://{fd}: descriptors 0, 1 and 2 are standard input, output and error"
            ));
        }
        let secure_flag = match (cli.bind.is_empty(), cli.uds.is_some()) {
            (false, _) => "--bind",
            (true, true) => "--uds",
            (true, false) => "--host",
        };
        Ok(Listen {
            secure,
            secure_flag,
            insecure,
        })
    }

    /// The sockets, the secure ones first (each once), and how many those are.
    fn resolve(self) -> Result<(Vec<ListenSpec>, usize), String> {
        let mut listen: Vec<ListenSpec> = Vec::new();
        for address in self.secure {
            for spec in address.resolve(self.secure_flag)? {
                if !listen.iter().any(|s| s.describe() == spec.describe()) {
                    listen.push(spec);
                }
            }
        }
        let secure_listeners = listen.len();
        for address in self.insecure {
            let specs = address
                .resolve("--bind")
                .map_err(|e| format!("--insecure-bind: {}", e.trim_start_matches("--bind ")))?;
            for spec in specs {
                let any_port = matches!(&spec, ListenSpec::Tcp(a) if a.port() == 0);
                if !any_port && listen.iter().any(|s| s.describe() == spec.describe()) {
                    return Err(format!(
                        "--insecure-bind {}: also given to --bind",
                        spec.describe()
                    ));
                }
                listen.push(spec);
            }
        }
        if listen.len() > MAX_LISTENERS {
            return Err(format!(
                "--bind: {} addresses, at most {MAX_LISTENERS}",
                listen.len()
            ));
        }
        Ok((listen, secure_listeners))
    }
}

/// `--certfile`, `--keyfile`, `--ca-certs` and `--client-cert`, each needing the others it
/// goes with, and an address TLS covers.
fn tls_options(cli: &Cli, listen: &Listen) -> Result<Option<crate::tls::Options>, String> {
    let options = match (&cli.certfile, &cli.keyfile) {
        (Some(certfile), Some(keyfile)) => crate::tls::Options {
            certfile: certfile.clone(),
            keyfile: keyfile.clone(),
            ca_certs: cli.ca_certs.clone(),
            client_cert: cli.client_cert.unwrap_or(if cli.ca_certs.is_some() {
                crate::tls::ClientCert::Required
            } else {
                crate::tls::ClientCert::None
            }),
        },
        (None, None) => {
            if cli.ca_certs.is_some() || cli.client_cert.is_some() {
                return Err("--ca-certs and --client-cert need --certfile and --keyfile".into());
            }
            if !cli.insecure_bind.is_empty() {
                return Err(
                    "--insecure-bind is for a plain port beside HTTPS ones: without \
                     --certfile every --bind is plain already"
                        .into(),
                );
            }
            return Ok(None);
        }
        (Some(_), None) => return Err("--certfile needs --keyfile".into()),
        (None, Some(_)) => return Err("--keyfile needs --certfile".into()),
    };
    if listen.secure.iter().all(Address::is_unix) {
        return Err(
            "--certfile: no TCP address to serve HTTPS on (TLS covers the TCP \
                    addresses of --bind/--host; Unix sockets stay plain)"
                .into(),
        );
    }
    Ok(Some(options))
}

/// `--uds-permissions`: an octal mode.
fn uds_permissions(cli: &Cli) -> Result<Option<u32>, String> {
    cli.uds_permissions
        .as_ref()
        .map(|m| {
            crate::sys::privileges::octal_mode(m.trim()).ok_or_else(|| {
                format!("--uds-permissions {m:?}: expected an octal mode such as 660")
            })
        })
        .transpose()
}

/// `--max-request-line`, `--max-header-size` and `--max-headers`.
fn limits(cli: &Cli) -> Result<Limits, String> {
    let max_request_line = within(
        "--max-request-line",
        cli.max_request_line as u64,
        64,
        1 << 20,
    )? as usize;
    let max_head = within(
        "--max-header-size",
        cli.max_header_size as u64,
        1024,
        1 << 20,
    )? as usize;
    Ok(Limits {
        // The request line is part of the head: a smaller head limit caps it too.
        max_request_line: max_request_line.min(max_head),
        max_head,
        max_headers: within(
            "--max-headers",
            cli.max_headers as u64,
            1,
            crate::http::limits::MAX_HEADERS_CAP as u64,
        )? as usize,
    })
}

/// `--timeout` (`None`: no limit), the silent timeout, and the connection timeouts.
fn timeouts(cli: &Cli) -> Result<(Option<Duration>, Duration, Timeouts), String> {
    /// How far past a long --timeout the derived silent timeout is.
    const SILENT_PAST_TIMEOUT: f64 = 30.0;
    let timeout = (cli.timeout != 0.0)
        .then(|| seconds("--timeout", cli.timeout, 0.05, DAY))
        .transpose()?;
    // A --timeout at or past the silent timeout's default (Django's 120, say) moves it
    // along, unless it was given: a request past --timeout is reported before its worker
    // could be killed as silent.
    let silent = match timeout {
        Some(t)
            if !cli.given.contains("silent_timeout") && t.as_secs_f64() >= cli.silent_timeout =>
        {
            t.as_secs_f64() + SILENT_PAST_TIMEOUT
        }
        _ => cli.silent_timeout,
    };
    let silent_timeout = seconds("--silent-timeout", silent, 1.0, 2.0 * DAY)?;
    if let Some(t) = timeout.filter(|t| *t >= silent_timeout) {
        return Err(format!(
            "--silent-timeout {}: must be longer than --timeout {} (a worker is silent while \
             its loop thread waits on the app in inline mode, and a request past --timeout \
             should be reported before its worker is killed)",
            cli.silent_timeout,
            t.as_secs_f64()
        ));
    }
    let timeouts = Timeouts {
        header: seconds("--header-timeout", cli.header_timeout, 0.05, DAY)?,
        keep_alive: seconds("--keep-alive-timeout", cli.keep_alive_timeout, 0.05, DAY)?,
        body: seconds("--body-timeout", cli.body_timeout, 0.05, DAY)?,
        body_min_rate: cli.body_min_rate,
        write: seconds("--write-timeout", cli.write_timeout, 0.05, DAY)?,
    };
    Ok((timeout, silent_timeout, timeouts))
}

/// `--max-blocking-threads`, checked with `--blocking-threads` (0 when inline).
fn max_blocking_threads(cli: &Cli) -> Result<usize, String> {
    if cli.blocking_threads > MAX_BLOCKING_THREADS {
        return Err(format!(
            "--blocking-threads {}: must be between 0 (the app runs inline on the loop \
             thread) and {MAX_BLOCKING_THREADS}",
            cli.blocking_threads
        ));
    }
    match (cli.blocking_threads, cli.max_blocking_threads) {
        (0, Some(_)) => Err("--max-blocking-threads: there are no handler threads with \
                             --blocking-threads 0 (the app runs inline on the loop thread)"
            .into()),
        (0, None) => Ok(0),
        (floor, None) => Ok(DEFAULT_MAX_BLOCKING_THREADS.max(floor)),
        (floor, Some(max)) if max < floor || max > MAX_BLOCKING_THREADS => Err(format!(
            "--max-blocking-threads {max}: must be between --blocking-threads ({floor}) and \
             {MAX_BLOCKING_THREADS}"
        )),
        (_, Some(max)) => Ok(max),
    }
}

/// The peers whose forwarding headers are believed: `--forwarded-allow-ips`, and none
/// behind `--proxy-protocol` without `--proxy-forwarded-headers` (behind a TCP balancer,
/// every forwarding header came from the client).
fn trusted(cli: &Cli) -> Result<Trusted, String> {
    let listed = Trusted::parse("--forwarded-allow-ips", &cli.forwarded_allow_ips)?;
    Ok(match cli.proxy_protocol && !cli.proxy_forwarded_headers {
        true => Trusted::default(),
        false => listed,
    })
}

/// `--metrics-port` with `--metrics-address`.
fn metrics(cli: &Cli) -> Result<Option<SocketAddr>, String> {
    let Some(port) = cli.metrics_port else {
        return Ok(None);
    };
    Ok(Some(SocketAddr::new(
        parse_ip("--metrics-address", &cli.metrics_address)?,
        port,
    )))
}

/// `--idle-poll` (`None`: the loop sleeps at once).
fn idle_poll(cli: &Cli) -> Result<Option<Duration>, String> {
    let us = within("--idle-poll", cli.idle_poll, 0, MAX_IDLE_POLL_US)?;
    Ok(Some(Duration::from_micros(us)).filter(|d| !d.is_zero()))
}

/// `--reload`, with its `--reload-ignore` patterns.
fn reload_ignore(cli: &Cli) -> Result<Option<Vec<String>>, String> {
    if let Some(bad) = cli.reload_ignore.iter().find(|p| p.contains('\0')) {
        return Err(format!("--reload-ignore {bad:?}: contains a NUL byte"));
    }
    Ok(cli.reload.then(|| {
        cli.reload_ignore
            .iter()
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect()
    }))
}

/// What the flags accept but do nothing with here, said rather than silently dropped (the
/// master logs them once), after `foreign`'s (the other servers' spellings); and
/// `--worker-class`, which only names what m0serve's workers are.
fn warnings(cli: &Cli, foreign: Vec<String>, listen: &Listen) -> Result<Vec<String>, String> {
    let mut warnings = foreign;
    // `adaptive` is the default; said, it warns where it does nothing.
    if cli.cpu_affinity.trim() == "adaptive"
        && cli.given.contains("cpu_affinity")
        && cli.blocking_threads != 1
    {
        warnings.push(format!(
            "--cpu-affinity adaptive: does nothing with --blocking-threads {} (it runs the \
             loop beside a worker's one handler thread)",
            cli.blocking_threads
        ));
    }
    if !cli.bind.is_empty() {
        for (id, flag) in [("uds", "--uds"), ("host", "--host"), ("port", "--port")] {
            // An image may set M0SERVE_HOST and M0SERVE_PORT for every container; a --bind
            // of one of them is no mistake.
            let image_default = id != "uds" && cli.from_env.contains(id);
            if cli.given.contains(id) && !image_default {
                warnings.push(format!(
                    "{flag}: ignored, --bind gives the addresses (add this one to it)"
                ));
            }
        }
    }
    if cli.timeout > 0.0 && cli.blocking_threads == 0 {
        warnings.push(format!(
            "--timeout {}: does nothing in inline mode (--blocking-threads 0); \
             --silent-timeout bounds a request there",
            cli.timeout
        ));
    }
    if cli.max_requests_jitter > 0 && cli.max_requests == 0 {
        warnings.push("--max-requests-jitter: does nothing without --max-requests".into());
    }
    let unix = listen
        .secure
        .iter()
        .chain(&listen.insecure)
        .any(Address::is_unix);
    if cli.uds_permissions.is_some() && !unix {
        warnings.push(
            "--uds-permissions: no Unix socket is bound here (--uds, --bind unix:PATH)".into(),
        );
    }
    if let Some(class) = &cli.worker_class {
        match class.trim() {
            // gunicorn's threaded worker is what m0serve's are: a pool of threads, its size
            // --threads (read as --blocking-threads).
            "gthread" => {}
            "sync" => warnings.push(format!(
                "--worker-class {class}: ignored; m0serve's workers each run a loop thread and \
                 --blocking-threads handler threads (--workers and --blocking-threads set \
                 their numbers)"
            )),
            other => {
                return Err(format!(
                    "--worker-class {other}: not supported; m0serve serves WSGI apps with its \
                     own workers (a loop thread and --blocking-threads handler threads), not \
                     gunicorn's worker classes"
                ))
            }
        }
    }
    if cli.proxy_protocol {
        if !cli.proxy_forwarded_headers && cli.given.contains("forwarded_allow_ips") {
            warnings.push(
                "--forwarded-allow-ips: does nothing behind --proxy-protocol (a TCP load \
                 balancer writes no forwarding header, so any came from the client): \
                 --proxy-allow-from names the balancers that may send a PROXY header, and \
                 --proxy-forwarded-headers believes forwarding headers after one"
                    .into(),
            );
        }
    } else {
        for (id, flag) in [
            ("proxy_allow_from", "--proxy-allow-from"),
            ("proxy_forwarded_headers", "--proxy-forwarded-headers"),
        ] {
            if cli.given.contains(id) {
                warnings.push(format!("{flag}: does nothing without --proxy-protocol"));
            }
        }
    }
    Ok(warnings)
}

/// `SCRIPT_NAME` inherited from the environment, taken as `--root-path` (it changes what is
/// served: said at start, and named if bad).
fn script_name(warnings: &mut Vec<String>) -> Result<Option<String>, String> {
    let Some(r) = std::env::var("SCRIPT_NAME").ok().filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let p = root_path(&r).map_err(|e| {
        let why = e.trim_start_matches(&format!("--root-path {r:?}: "));
        format!("SCRIPT_NAME={r:?} in the environment (taken as --root-path): {why}")
    })?;
    if let Some(p) = &p {
        warnings.push(format!(
            "SCRIPT_NAME={r} in the environment: serving under {p} as with --root-path {p} \
             (other paths get 404 unless --root-path-outside app)"
        ));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `from_cli` touches nothing: a name no resolver knows, TLS files, a user, directories
    /// and CPUs that do not exist all pass it, and `resolve` finds each, one at a time.
    #[test]
    fn from_cli_looks_nothing_up_and_resolve_does() {
        use clap::Parser;
        let args = |extra: &[&str]| {
            let base = ["m0serve", "app:application", "--cpu-affinity", "none"];
            let cli = Cli::try_parse_from(base.iter().chain(extra)).unwrap();
            Config::from_cli(cli)
        };
        let cases: [(&[&str], &str); 8] = [
            (
                &["--host", "no-such-host.invalid"],
                "--host \"no-such-host.invalid\"",
            ),
            (
                &[
                    "--bind",
                    "127.0.0.1:0",
                    "--insecure-bind",
                    "no-such-host.invalid:1",
                    "--certfile",
                    "/no/such.pem",
                    "--keyfile",
                    "/no/such.key",
                ],
                "--insecure-bind: \"no-such-host.invalid\"",
            ),
            (
                &["--certfile", "/no/such.pem", "--keyfile", "/no/such.key"],
                "--certfile /no/such.pem",
            ),
            (
                &["--user", "no-such-user-m0s"],
                "--user no-such-user-m0s: no such user",
            ),
            (
                &["--app-dir", "/no/such/dir"],
                "--app-dir \"/no/such/dir\": not a directory",
            ),
            (
                &["--pythonpath", "/no/such/dir"],
                "--pythonpath /no/such/dir: not a directory",
            ),
            (
                &["--venv", "/no/such/venv"],
                "--venv /no/such/venv: not a virtualenv",
            ),
            (&["--cpu-affinity", "100000"], "--cpu-affinity \"100000\""),
        ];
        for (extra, error) in cases {
            let unresolved = args(extra).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
            let e = unresolved.resolve().unwrap_err();
            assert!(e.starts_with(error), "{extra:?}: {e}");
        }
        // The checks that need nothing from the system are made first.
        let e = args(&["--host", "no-such-host.invalid", "--workers", "0"]).unwrap_err();
        assert!(e.starts_with("--workers 0: must be between 1 and"), "{e}");
        let config = args(&["--bind", "127.0.0.1:0", "--bind", "unix:/tmp/m0s-x.sock"])
            .and_then(Unresolved::resolve)
            .unwrap();
        assert_eq!(
            config.describe_listen(),
            "http://127.0.0.1:0, unix:/tmp/m0s-x.sock"
        );
        assert!(config.app_dir.is_absolute());
    }

    #[test]
    fn cpu_affinity_lists_ranges_and_auto() {
        let allowed = Ok(vec![0, 1, 2, 3, 6]);
        assert_eq!(cpu_affinity("auto", &allowed), Ok(vec![0, 1, 2, 3, 6]));
        assert_eq!(cpu_affinity(" 3,0-1 ,1,6", &allowed), Ok(vec![3, 0, 1, 6]));
        assert_eq!(cpu_affinity("2-2", &allowed), Ok(vec![2]));
        let err = cpu_affinity("4", &allowed).unwrap_err();
        assert!(
            err.contains("CPU 4 is not one") && err.contains("(those are 0-3,6)"),
            "{err}"
        );
        for bad in ["", "x", "1-", "-1", "3-1", "0,,1", "1.5", "+0", "0-+1"] {
            assert!(cpu_affinity(bad, &allowed).is_err(), "{bad:?}");
        }
        let err = cpu_affinity("123456789012345678901234", &allowed).unwrap_err();
        assert!(err.contains("is out of range"), "{err}");
        let unreadable = Err(std::io::Error::from_raw_os_error(libc::EPERM));
        assert!(cpu_affinity("auto", &unreadable).is_err());
    }
}
