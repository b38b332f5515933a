//! A gunicorn configuration file (`-c gunicorn.conf.py`), run as gunicorn runs it: the
//! file is executed by Python in a process of its own (this binary, or the package's
//! interpreter), which reports its module-level values; each gunicorn setting becomes the
//! gunicorn flag that sets it, and from there m0serve's (`foreign::rewrite`), so that a
//! setting and its flag mean one thing. Names that are not gunicorn settings are ignored,
//! as gunicorn ignores them; a server hook is named in a warning, since m0serve's master
//! runs no Python.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

/// The hidden first argument that makes the binary run a configuration file with
/// `EVALUATE` and exit (`python::run_script`).
pub(crate) const EVALUATE_FLAG: &str = "--m0serve-evaluate-gunicorn-config";

/// How long a configuration file may take to run.
const EVALUATE_LIMIT: Duration = Duration::from_secs(30);

/// Runs the file named by `sys.argv[1]` and writes one line per module-level name:
/// `set NAME VALUE`, `list NAME V1 V2...` (tab-separated), `hook NAME` for a callable,
/// `other NAME WHY` for a value m0serve cannot read.
pub(crate) const EVALUATE: &str = r#"
import os, sys, types
path = sys.argv[1]
# What the file prints goes to standard error; the report alone to standard output.
sys.stdout.flush()
report = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
ns = {"__file__": path, "__name__": "__config__"}
with open(path, "rb") as f:
    code = compile(f.read(), path, "exec")
exec(code, ns)
sys.stderr.flush()

def text(v):
    s = str(v)
    if "\t" in s or "\n" in s:
        raise ValueError("a value with a tab or a newline")
    return s

def scalar(v):
    return v is None or isinstance(v, (str, int, float, bool))

out = []
for k, v in ns.items():
    if k.startswith("__") or isinstance(v, types.ModuleType):
        continue
    try:
        if callable(v) and not isinstance(v, type):
            out.append("hook\t" + k)
        elif scalar(v):
            out.append("set\t%s\t%s" % (k, text(v)))
        elif isinstance(v, (list, tuple)) and all(scalar(x) for x in v):
            out.append("\t".join(["list", k] + [text(x) for x in v]))
        else:
            out.append("other\t%s\ta %s" % (k, type(v).__name__))
    except ValueError as e:
        out.append("other\t%s\t%s" % (k, e))
report.write("".join(line + "\n" for line in out))
report.flush()
"#;

/// What runs a configuration file: this binary (its embedded Python), or the package's
/// interpreter; a worker runs none and reads its master's report.
#[derive(Clone, Debug)]
pub(crate) enum Runner {
    Binary,
    Python(std::path::PathBuf),
    Worker,
}

/// How a gunicorn setting is written as its gunicorn flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `--flag VALUE`, once per value of a list.
    Value,
    /// A list given as one comma-separated value (`forwarded_allow_ips`).
    Joined,
    /// `--flag` when true.
    Switch,
    /// `--flag` when false (`sendfile = False` is `--no-sendfile`).
    Negated,
    /// An integer mode, written in octal (`umask = 0o22`).
    Octal,
}

/// gunicorn's settings and their flags (gunicorn 27's `KNOWN_SETTINGS`), or `None` for
/// one without a flag m0serve reads.
const SETTINGS: &[(&str, Option<&str>, Kind)] = &[
    ("bind", Some("--bind"), Kind::Value),
    ("backlog", Some("--backlog"), Kind::Value),
    ("workers", Some("--workers"), Kind::Value),
    ("worker_class", Some("--worker-class"), Kind::Value),
    ("threads", Some("--threads"), Kind::Value),
    (
        "worker_connections",
        Some("--worker-connections"),
        Kind::Value,
    ),
    ("max_requests", Some("--max-requests"), Kind::Value),
    (
        "max_requests_jitter",
        Some("--max-requests-jitter"),
        Kind::Value,
    ),
    ("timeout", Some("--timeout"), Kind::Value),
    ("graceful_timeout", Some("--graceful-timeout"), Kind::Value),
    ("keepalive", Some("--keep-alive"), Kind::Value),
    (
        "limit_request_line",
        Some("--limit-request-line"),
        Kind::Value,
    ),
    (
        "limit_request_fields",
        Some("--limit-request-fields"),
        Kind::Value,
    ),
    (
        "limit_request_field_size",
        Some("--limit-request-field_size"),
        Kind::Value,
    ),
    ("reload", Some("--reload"), Kind::Switch),
    (
        "reload_extra_files",
        Some("--reload-extra-file"),
        Kind::Value,
    ),
    ("preload_app", Some("--preload"), Kind::Switch),
    ("sendfile", Some("--no-sendfile"), Kind::Negated),
    ("reuse_port", Some("--reuse-port"), Kind::Switch),
    ("chdir", Some("--chdir"), Kind::Value),
    ("daemon", Some("--daemon"), Kind::Switch),
    ("raw_env", Some("--env"), Kind::Value),
    ("pidfile", Some("--pid"), Kind::Value),
    ("worker_tmp_dir", Some("--worker-tmp-dir"), Kind::Value),
    ("user", Some("--user"), Kind::Value),
    ("group", Some("--group"), Kind::Value),
    ("umask", Some("--umask"), Kind::Octal),
    ("initgroups", Some("--initgroups"), Kind::Switch),
    (
        "forwarded_allow_ips",
        Some("--forwarded-allow-ips"),
        Kind::Joined,
    ),
    ("accesslog", Some("--access-logfile"), Kind::Value),
    ("access_log_format", Some("--access-logformat"), Kind::Value),
    ("errorlog", Some("--error-logfile"), Kind::Value),
    ("loglevel", Some("--log-level"), Kind::Value),
    ("capture_output", Some("--capture-output"), Kind::Switch),
    ("logconfig", Some("--log-config"), Kind::Value),
    ("syslog", Some("--log-syslog"), Kind::Switch),
    (
        "enable_stdio_inheritance",
        Some("--enable-stdio-inheritance"),
        Kind::Switch,
    ),
    ("statsd_host", Some("--statsd-host"), Kind::Value),
    ("statsd_prefix", Some("--statsd-prefix"), Kind::Value),
    ("proc_name", Some("--name"), Kind::Value),
    ("pythonpath", Some("--pythonpath"), Kind::Value),
    ("paste", Some("--paste"), Kind::Value),
    ("proxy_protocol", Some("--proxy-protocol"), Kind::Switch),
    ("proxy_allow_ips", Some("--proxy-allow-from"), Kind::Joined),
    ("keyfile", Some("--keyfile"), Kind::Value),
    ("certfile", Some("--certfile"), Kind::Value),
    ("ssl_version", Some("--ssl-version"), Kind::Value),
    ("cert_reqs", Some("--cert-reqs"), Kind::Value),
    ("ca_certs", Some("--ca-certs"), Kind::Value),
    (
        "suppress_ragged_eofs",
        Some("--suppress-ragged-eofs"),
        Kind::Switch,
    ),
    (
        "do_handshake_on_connect",
        Some("--do-handshake-on-connect"),
        Kind::Switch,
    ),
    ("ciphers", Some("--ciphers"), Kind::Value),
    ("root_path", Some("--root-path"), Kind::Value),
    ("check_config", Some("--check-config"), Kind::Switch),
    ("print_config", Some("--print-config"), Kind::Switch),
    // Settings m0serve has no flag for: said when set to something.
    ("reload_engine", None, Kind::Value),
    ("spew", None, Kind::Switch),
    ("tmp_upload_dir", None, Kind::Value),
    ("secure_scheme_headers", None, Kind::Value),
    ("disable_redirect_access_to_syslog", None, Kind::Switch),
    ("logger_class", None, Kind::Value),
    ("logconfig_dict", None, Kind::Value),
    ("logconfig_json", None, Kind::Value),
    ("syslog_addr", None, Kind::Value),
    ("syslog_prefix", None, Kind::Value),
    ("syslog_facility", None, Kind::Value),
    ("dogstatsd_tags", None, Kind::Value),
    ("enable_backlog_metric", None, Kind::Switch),
    ("default_proc_name", None, Kind::Value),
    ("protocol", None, Kind::Value),
    ("uwsgi_allow_ips", None, Kind::Value),
    ("http_protocols", None, Kind::Value),
    ("http2_cleartext", None, Kind::Switch),
    ("raw_paste_global_conf", None, Kind::Value),
    ("permit_obsolete_folding", None, Kind::Switch),
    ("strip_header_spaces", None, Kind::Switch),
    ("permit_unconventional_http_method", None, Kind::Switch),
    ("permit_unconventional_http_version", None, Kind::Switch),
    ("casefold_http_method", None, Kind::Switch),
    ("forwarder_headers", None, Kind::Value),
    ("header_map", None, Kind::Value),
    ("control_socket", None, Kind::Value),
];

/// gunicorn's server hooks.
const HOOKS: &[&str] = &[
    "on_starting",
    "on_reload",
    "when_ready",
    "pre_fork",
    "post_fork",
    "post_worker_init",
    "worker_int",
    "worker_abort",
    "pre_exec",
    "pre_request",
    "post_request",
    "child_exit",
    "worker_exit",
    "nworkers_changed",
    "on_exit",
    "ssl_context",
];

/// A configuration file, read: each setting's gunicorn flag to rewrite, the app it names
/// (`wsgi_app`), and what is said at start.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// (the setting, its flag word).
    pub(crate) flags: Vec<(String, OsString)>,
    pub(crate) app: Option<String>,
    pub(crate) warnings: Vec<String>,
}

/// The environment variable that carries the master's report to its workers: the file
/// runs in the master alone (as root before `--user`, once per start or reload), never in
/// a worker.
pub(crate) const REPORT_ENV: &str = "M0SERVE_GUNICORN_CONF_REPORT";

/// Reads the settings of `path`: a worker from the report its master left in
/// `REPORT_ENV`; anyone else runs the file (with `runner`), and a master leaves the report
/// there for its workers.
pub(crate) fn read(path: &Path, runner: &Runner) -> Result<Read, String> {
    if let Runner::Worker = runner {
        let report = std::env::var_os(REPORT_ENV)
            .ok_or("its master left no report of it (a worker does not run the file)")?;
        // Read once, before any thread starts: the app's environment is not the place for
        // it.
        std::env::remove_var(REPORT_ENV);
        return translate(&report.to_string_lossy());
    }
    let report = evaluate(path, runner)?;
    let read = translate(&report)?;
    std::env::set_var(REPORT_ENV, &report);
    Ok(read)
}

/// A reload: runs `path` again, so that the new workers read its settings as they are
/// now; `Err` keeps the report read before.
pub(crate) fn refresh(path: &Path, runner: &Runner) -> Result<(), String> {
    read(path, runner).map(drop)
}

/// Runs the file in a process of its own; its report (`EVALUATE`'s lines).
fn evaluate(path: &Path, runner: &Runner) -> Result<String, String> {
    let mut cmd = match runner {
        Runner::Binary => {
            let exe = std::env::current_exe()
                .map_err(|e| format!("cannot find this program to run the file: {e}"))?;
            let mut c = std::process::Command::new(exe);
            c.arg(EVALUATE_FLAG);
            c
        }
        Runner::Python(python) => {
            let mut c = std::process::Command::new(python);
            c.args(["-c", EVALUATE]);
            c
        }
        Runner::Worker => return Err("a worker does not run the file".into()),
    };
    // The file's own errors (a traceback) reach the terminal as they are.
    let child = cmd
        .arg(path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot run Python on it: {e}"))?;
    let out = wait_bounded(child, EVALUATE_LIMIT)?;
    if !out.status.success() {
        return Err(
            "the gunicorn configuration failed when Python ran it (its error is above)".into(),
        );
    }
    String::from_utf8(out.stdout).map_err(|_| "its values are not UTF-8".to_string())
}

/// The child's output once it exits, or an error (and the child killed) past `limit`.
fn wait_bounded(
    mut child: std::process::Child,
    limit: Duration,
) -> Result<std::process::Output, String> {
    use std::io::Read as _;
    let mut stdout = child.stdout.take().expect("piped");
    // The report is small; read it on a thread so a full pipe never blocks the child.
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the gunicorn configuration still ran after {} s; stopped",
                    limit.as_secs()
                ));
            }
            Err(e) => return Err(format!("waiting for Python: {e}")),
        }
    };
    let stdout = reader.join().unwrap_or_default();
    Ok(std::process::Output {
        status,
        stdout,
        stderr: Vec::new(),
    })
}

/// The report's settings as gunicorn flags.
fn translate(report: &str) -> Result<Read, String> {
    let mut read = Read::default();
    for line in report.lines() {
        let mut fields = line.split('\t');
        let (Some(what), Some(name)) = (fields.next(), fields.next()) else {
            continue;
        };
        let values: Vec<&str> = fields.collect();
        if what == "hook" {
            if HOOKS.contains(&name) {
                read.warnings.push(format!(
                    "the gunicorn configuration's server hook {name}() is not run: m0serve's \
                     master runs no Python (work for each worker belongs in the app's import)"
                ));
            }
            continue;
        }
        if name == "wsgi_app" {
            read.app = values
                .first()
                .filter(|v| *v != &"None")
                .map(|v| v.to_string());
            continue;
        }
        let Some(&(_, flag, kind)) = SETTINGS.iter().find(|(n, _, _)| *n == name) else {
            // Not a gunicorn setting: a helper name, ignored as gunicorn ignores it.
            continue;
        };
        let unset = |v: &&str| matches!(*v, "None" | "False" | "");
        let set: Vec<&str> = values.iter().copied().filter(|v| !unset(v)).collect();
        let Some(flag) = flag else {
            if what == "other" || !set.is_empty() {
                read.warnings.push(format!(
                    "the gunicorn configuration's {name} has no m0serve equivalent: ignored"
                ));
            }
            continue;
        };
        if what == "other" {
            let why = values.first().copied().unwrap_or("");
            return Err(format!(
                "{name}: m0serve cannot read its value ({why}); give a string, a number, a \
                 boolean, or a list of them"
            ));
        }
        // A boolean as gunicorn reads one: True or False, or a string of either in any
        // case.
        let truth = || -> Result<bool, String> {
            let v = values.first().copied().unwrap_or("");
            match v.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" | "none" => Ok(false),
                _ => Err(format!("{name} = {v}: expected True or False")),
            }
        };
        let mut push = |word: String| read.flags.push((name.to_string(), word.into()));
        match kind {
            Kind::Switch => {
                if truth()? {
                    push(flag.to_string());
                }
            }
            Kind::Negated => {
                if !truth()? {
                    push(flag.to_string());
                }
            }
            Kind::Joined if !set.is_empty() => push(format!("{flag}={}", set.join(","))),
            Kind::Octal => {
                for v in set {
                    let mode: u32 = v.parse().map_err(|_| {
                        format!("umask = {v}: expected an integer mode (0o022, or 18)")
                    })?;
                    push(format!("{flag}=0o{mode:o}"));
                }
            }
            Kind::Value | Kind::Joined => {
                for v in set {
                    push(format!("{flag}={v}"));
                }
            }
        }
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(r: &Read) -> Vec<String> {
        r.flags
            .iter()
            .map(|(_, f)| f.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn settings_become_gunicorn_flags() {
        let r = translate(
            "list\tbind\t0.0.0.0:8000\tunix:/run/x.sock\n\
             set\tworkers\t9\nset\treload\tTrue\nset\tdaemon\tFalse\n\
             list\traw_env\tA=x,y\tB=2\nset\tumask\t18\n\
             list\tforwarded_allow_ips\t10.0.0.1\t10.0.0.2\nset\taccesslog\tNone\n\
             set\tsendfile\tFalse\nset\twsgi_app\tproj.wsgi:application\n\
             set\tmy_helper\t5\nhook\tpost_fork\nhook\tcpu_count\n\
             set\tspew\tFalse\nother\tsecure_scheme_headers\ta dict\n",
        )
        .unwrap();
        assert_eq!(
            words(&r),
            [
                "--bind=0.0.0.0:8000",
                "--bind=unix:/run/x.sock",
                "--workers=9",
                "--reload",
                "--env=A=x,y",
                "--env=B=2",
                "--umask=0o22",
                "--forwarded-allow-ips=10.0.0.1,10.0.0.2",
                "--no-sendfile",
            ]
        );
        assert_eq!(r.app.as_deref(), Some("proj.wsgi:application"));
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        assert!(r.warnings[0].contains("hook post_fork() is not run"));
        assert!(r.warnings[1].contains("secure_scheme_headers has no m0serve equivalent"));
        let e = translate("other\tbind\ta dict\n").unwrap_err();
        assert!(
            e.contains("bind: m0serve cannot read its value (a dict)"),
            "{e}"
        );
        // Booleans as gunicorn reads them, strings of either included.
        let r = translate("set\treload\ttrue\nset\tpreload_app\tFALSE\n").unwrap();
        assert_eq!(words(&r), ["--reload"]);
        let e = translate("set\treload\tyes\n").unwrap_err();
        assert!(e.contains("reload = yes: expected True or False"), "{e}");
    }
}
