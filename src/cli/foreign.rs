//! Command lines brought from gunicorn and Granian: their spellings of flags m0serve has
//! under another name are rewritten before clap reads the line, with a warning where the
//! meaning differs; flags m0serve has no use for are dropped with a warning; the rest are
//! refused with the m0serve way to get the same. docs/migration.md lists them all (a test
//! runs each through the binary).

/// What becomes of a foreign flag.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Becomes {
    /// The m0serve flag of the same meaning (`--threads` is `--blocking-threads`... see
    /// `rewrite` for the few that set two).
    Same(&'static str),
    /// An m0serve flag that does nearly the same: rewritten, and the note said once.
    Differs(&'static str, &'static str),
    /// Its value turned into m0serve arguments (`Err` refuses the value), and the note
    /// said once where the meaning differs.
    Converted(
        fn(&str) -> Result<Vec<String>, String>,
        Option<&'static str>,
    ),
    /// Nothing to do: m0serve always behaves so. Dropped without a word.
    Always,
    /// No effect in m0serve: dropped, with the note as a warning.
    Ignored(&'static str),
    /// Refused, with the m0serve way to get it.
    Refused(&'static str),
}

/// A foreign flag: its long name (no dashes), whose it is (`gunicorn's`), whether it
/// takes a value, and what it becomes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spelling {
    pub(crate) name: &'static str,
    pub(crate) from: &'static str,
    pub(crate) value: bool,
    pub(crate) becomes: Becomes,
}

const G: &str = "gunicorn's";
const GR: &str = "Granian's";
const BOTH: &str = "gunicorn's and Granian's";

const fn s(name: &'static str, from: &'static str, value: bool, becomes: Becomes) -> Spelling {
    Spelling {
        name,
        from,
        value,
        becomes,
    }
}

use Becomes::*;

/// Granian's `--static-path-mount DIR`, at its default route.
fn static_path_mount(dir: &str) -> Result<Vec<String>, String> {
    Ok(vec![format!("--static-map=/static={dir}")])
}

/// Every foreign spelling m0serve knows, gunicorn's first.
pub(crate) const SPELLINGS: &[Spelling] = &[
    s("threads", G, true, Converted(threads, None)),
    s("access-logfile", G, true, Same("access-log-file")),
    s("access-logformat", G, true, Same("access-log-format")),
    s("error-logfile", G, true, Same("error-log-file")),
    s("log-file", G, true, Same("error-log-file")),
    s("keep-alive", G, true, Same("keep-alive-timeout")),
    s("pid", G, true, Same("pid-file")),
    s("worker-connections", G, true, Same("max-connections")),
    s("limit-request-line", G, true, Converted(limit_request_line, None)),
    s("limit-request-fields", G, true, Converted(limit_request_fields, None)),
    s(
        "limit-request-field_size",
        G,
        true,
        Converted(limit_request_field_size, Some(WHOLE_HEAD)),
    ),
    s(
        "limit-request-field-size",
        G,
        true,
        Converted(limit_request_field_size, Some(WHOLE_HEAD)),
    ),
    s("cert-reqs", G, true, Converted(cert_reqs, None)),
    s(
        "initgroups",
        G,
        false,
        Ignored("m0serve always gives the workers --user's own supplementary groups"),
    ),
    s(
        "capture-output",
        G,
        false,
        Ignored("the app's standard output and error are the server's; --error-log-file takes both"),
    ),
    s(
        "enable-stdio-inheritance",
        G,
        false,
        Ignored("the workers always inherit the server's standard streams"),
    ),
    s(
        "name",
        G,
        true,
        Ignored("the processes are named m0serve (no process title)"),
    ),
    s(
        "worker-tmp-dir",
        G,
        true,
        Ignored("m0serve's workers report to the master through a pipe, not a file"),
    ),
    s(
        "reuse-port",
        G,
        false,
        Ignored("the workers share one listening socket, which the master binds"),
    ),
    s(
        "no-sendfile",
        G,
        false,
        Ignored("m0serve writes file responses from the loop without sendfile"),
    ),
    s(
        "do-handshake-on-connect",
        G,
        false,
        Ignored("the TLS handshake is made by the loop as the bytes come"),
    ),
    s(
        "suppress-ragged-eofs",
        G,
        false,
        Ignored("a TLS peer that closes without close_notify ends its connection"),
    ),
    s(
        "daemon",
        G,
        false,
        Refused("m0serve runs in the foreground: run it under systemd, a container or a supervisor"),
    ),
    s(
        "statsd-host",
        G,
        true,
        Refused("m0serve's metrics are Prometheus ones, pulled: --metrics-port PORT"),
    ),
    s(
        "statsd-prefix",
        G,
        true,
        Refused("m0serve's metrics are Prometheus ones, pulled: --metrics-port PORT"),
    ),
    s(
        "log-config",
        BOTH,
        true,
        Refused(
            "m0serve's logs are set by --log-level, --log-format (text or json) and \
             --error-log-file",
        ),
    ),
    s(
        "log-syslog",
        G,
        false,
        Refused("m0serve logs to standard error or --error-log-file (journald takes standard error)"),
    ),
    s(
        "reload-extra-file",
        G,
        true,
        Refused("--reload watches every .py file under --app-dir, and nothing else"),
    ),
    s(
        "paste",
        G,
        true,
        Refused("m0serve serves a module:attr (or module:factory()) WSGI app"),
    ),
    s(
        "ssl-version",
        G,
        true,
        Refused("m0serve speaks TLS 1.3 and 1.2 only (rustls)"),
    ),
    s(
        "ciphers",
        G,
        true,
        Refused("m0serve uses rustls's cipher suites, which cannot be changed"),
    ),
    // Granian's.
    s("interface", GR, true, Converted(interface, None)),
    s("factory", GR, false, Converted(|_| Ok(vec!["--factory".into()]), None)),
    s("working-dir", GR, true, Same("chdir")),
    s("respawn-failed-workers", GR, false, Always),
    s("workers-kill-timeout", GR, true, Same("graceful-timeout")),
    s("ssl-ca", GR, true, Same("ca-certs")),
    s(
        "ssl-client-verify",
        GR,
        false,
        Ignored("with --ca-certs, clients must present a certificate (--client-cert optional lets them not)"),
    ),
    s("url-path-prefix", GR, true, Same("root-path")),
    s("http1-header-read-timeout", GR, true, Converted(header_read_timeout_ms, None)),
    s("access-log-fmt", GR, true, Same("access-log-format")),
    s("env-files", GR, true, Same("env-file")),
    s(
        "reload-ignore-patterns",
        GR,
        true,
        Differs(
            "reload-ignore",
            "m0serve's patterns are globs (`*.tmp`, `migrations/*`), not regular expressions",
        ),
    ),
    s("reload-ignore-dirs", GR, true, Converted(reload_ignore_dir, None)),
    s("reload-ignore-paths", GR, true, Same("reload-ignore")),
    s("http", GR, true, Converted(http_version, None)),
    s(
        "backpressure",
        GR,
        true,
        Ignored(
            "m0serve bounds the wait, not the number waiting: a request that would wait more \
             than --max-queue-wait (0.5 s) for a handler is answered 503 at once",
        ),
    ),
    s(
        "workers-lifetime",
        GR,
        true,
        Ignored("m0serve recycles workers by --max-requests or --workers-max-rss, not by age"),
    ),
    s(
        "runtime-threads",
        GR,
        true,
        Ignored("each m0serve worker has one event-loop thread"),
    ),
    s(
        "runtime-mode",
        GR,
        true,
        Ignored("each m0serve worker has one event-loop thread"),
    ),
    s(
        "runtime-blocking-threads",
        GR,
        true,
        Ignored("each m0serve worker has one event-loop thread"),
    ),
    s("loop", GR, true, Ignored("m0serve's event loop is its own (mio)")),
    s("task-impl", GR, true, Ignored("m0serve's event loop is its own (mio)")),
    s("no-ws", GR, false, Always),
    s("ws", GR, false, Ignored("m0serve serves WSGI over HTTP/1.1")),
    s("process-name", GR, true, Ignored("the processes are named m0serve")),
    s("log", GR, false, Always),
    s("metrics", GR, false, Ignored("a --metrics-port PORT turns the metrics on")),
    s(
        "static-path-mount",
        GR,
        true,
        Converted(
            static_path_mount,
            Some("Granian's route is /static unless --static-path-route says otherwise: m0serve takes --static-map /static=DIR; for another prefix, or a second mount, give --static-map PREFIX=DIR"),
        ),
    ),
    s(
        "static-path-route",
        GR,
        true,
        Refused("give the prefix and the directory together: --static-map PREFIX=DIR (repeatable)"),
    ),
    s("static-path-expires", GR, true, Same("static-max-age")),
    s(
        "ssl-keyfile-password",
        GR,
        true,
        Refused(
            "m0serve refuses encrypted keys: decrypt it once (`openssl pkey -in KEY -out \
             PLAIN`) and keep that file readable by root alone",
        ),
    ),
];

/// How `--limit-request-field_size` differs.
const WHOLE_HEAD: &str = "m0serve limits the whole request head, not each header line";

/// Single-letter flags of gunicorn that m0serve does not have.
const SHORT: &[(char, &str)] = &[
    ('D', "daemon"),
    ('n', "name"),
    ('R', "enable-stdio-inheritance"),
];

fn threads(n: &str) -> Result<Vec<String>, String> {
    // gunicorn's gthread pool is fixed: so many threads, never more.
    Ok(vec![
        format!("--blocking-threads={n}"),
        format!("--max-blocking-threads={n}"),
    ])
}

/// gunicorn's 0 is "no limit"; m0serve's largest.
fn limit_request_line(v: &str) -> Result<Vec<String>, String> {
    let v = if v.trim() == "0" { "65536" } else { v };
    Ok(vec![format!("--max-request-line={v}")])
}

fn limit_request_fields(v: &str) -> Result<Vec<String>, String> {
    let v = if v.trim() == "0" { "256" } else { v };
    Ok(vec![format!("--max-headers={v}")])
}

fn limit_request_field_size(v: &str) -> Result<Vec<String>, String> {
    let v = if v.trim() == "0" { "1048576" } else { v };
    Ok(vec![format!("--max-header-size={v}")])
}

fn cert_reqs(v: &str) -> Result<Vec<String>, String> {
    match v.trim() {
        // ssl.CERT_NONE: no client certificate asked for, which is m0serve without
        // --ca-certs.
        "0" => Ok(Vec::new()),
        "1" => Ok(vec!["--client-cert=optional".into()]),
        "2" => Ok(vec!["--client-cert=required".into()]),
        other => Err(format!("--cert-reqs {other}: expected 0, 1 or 2")),
    }
}

fn interface(v: &str) -> Result<Vec<String>, String> {
    match v.trim() {
        "wsgi" => Ok(Vec::new()),
        other @ ("asgi" | "asginl" | "rsgi") => Err(format!(
            "--interface {other}: m0serve serves WSGI (PEP 3333) apps only; serve an \
             {other} app with Granian or an ASGI server"
        )),
        other => Err(format!("--interface {other}: expected wsgi")),
    }
}

fn header_read_timeout_ms(v: &str) -> Result<Vec<String>, String> {
    let ms: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("--http1-header-read-timeout {v}: expected milliseconds"))?;
    Ok(vec![format!("--header-timeout={}", ms / 1000.0)])
}

fn reload_ignore_dir(v: &str) -> Result<Vec<String>, String> {
    let d = v.trim().trim_end_matches('/');
    // A directory of that name anywhere under --app-dir.
    Ok(vec![
        format!("--reload-ignore={d}/*"),
        format!("--reload-ignore=*/{d}/*"),
    ])
}

fn http_version(v: &str) -> Result<Vec<String>, String> {
    match v.trim() {
        "1" | "auto" => Ok(Vec::new()),
        other => Err(format!("--http {other}: m0serve speaks HTTP/1.1 only")),
    }
}

/// A command line with foreign spellings rewritten, and the warnings to log at start.
#[derive(Debug, Default)]
pub(crate) struct Rewritten {
    pub(crate) args: Vec<std::ffi::OsString>,
    pub(crate) warnings: Vec<String>,
    /// The app a gunicorn configuration file names (`wsgi_app`).
    pub(crate) app: Option<String>,
}

/// `--name`, or `-x` with a letter: a flag, not a value (`-`, `-1` are values).
fn is_flag(word: &str) -> bool {
    word.strip_prefix("--").is_some_and(|n| !n.is_empty())
        || word
            .strip_prefix('-')
            .and_then(|r| r.chars().next())
            .is_some_and(|c| c.is_ascii_alphabetic())
}

/// Looks up a foreign long flag.
pub(crate) fn find(name: &str) -> Option<&'static Spelling> {
    SPELLINGS.iter().find(|s| s.name == name)
}

/// Rewrites the foreign spellings in `args` (no `argv[0]`). `takes_value(long or short)`
/// says whether one of m0serve's own flags takes the next word as its value (so a value
/// is never read as a flag). `Err` refuses a flag, with the m0serve way.
pub(crate) fn rewrite(
    args: &[std::ffi::OsString],
    takes_value: &dyn Fn(&str) -> bool,
) -> Result<Rewritten, String> {
    let mut out = Rewritten::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let Some(text) = arg.to_str() else {
            out.args.push(arg.clone());
            continue;
        };
        if text == "--" {
            out.args.extend(args[i - 1..].iter().cloned());
            break;
        }
        let (name, attached) = if let Some(long) = text.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            }
        } else if let Some(short) = text.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = short.chars().next().unwrap_or('-');
            match SHORT.iter().find(|(s, _)| *s == c) {
                Some((_, long)) if short.len() == 1 || find(long).is_some_and(|f| f.value) => {
                    let attached = (short.len() > 1).then(|| &short[1..]);
                    (*long, attached)
                }
                // A switch clustered with others (`-Dw2`): it, then the rest.
                Some((_, long)) => {
                    let rest: std::ffi::OsString = format!("-{}", &short[1..]).into();
                    let mut again = vec![format!("--{long}").into(), rest];
                    again.extend(args[i..].iter().cloned());
                    let r = rewrite(&again, takes_value)?;
                    out.args.extend(r.args);
                    out.warnings.extend(r.warnings);
                    break;
                }
                _ => {
                    out.args.push(arg.clone());
                    if short.len() == 1 && takes_value(short) && i < args.len() {
                        out.args.push(args[i].clone());
                        i += 1;
                    }
                    continue;
                }
            }
        } else {
            out.args.push(arg.clone());
            continue;
        };
        let Some(spelling) = find(name) else {
            out.args.push(arg.clone());
            if attached.is_none() && takes_value(name) && i < args.len() {
                out.args.push(args[i].clone());
                i += 1;
            }
            continue;
        };
        let shown = format!("--{name}");
        let value = if spelling.value {
            match attached {
                Some(v) => Some(v.to_string()),
                // The next word, unless it is a flag (`-` alone is a value: standard
                // output).
                None if i < args.len() && !is_flag(&args[i].to_string_lossy()) => {
                    i += 1;
                    Some(args[i - 1].to_string_lossy().into_owned())
                }
                None => {
                    return Err(format!(
                        "{shown} ({} spelling) needs a value",
                        spelling.from
                    ))
                }
            }
        } else if attached.is_some() {
            return Err(format!("{shown} takes no value"));
        } else {
            None
        };
        let with_value = |flag: &str| match &value {
            Some(v) => format!("--{flag}={v}"),
            None => format!("--{flag}"),
        };
        match spelling.becomes {
            Same(flag) => out.args.push(with_value(flag).into()),
            Differs(flag, note) => {
                out.args.push(with_value(flag).into());
                out.warnings.push(format!(
                    "{shown} ({}) is read as --{flag}: {note}",
                    spelling.from
                ));
            }
            Converted(f, note) => {
                let v = value.as_deref().unwrap_or("");
                out.args.extend(f(v)?.into_iter().map(Into::into));
                if let Some(note) = note {
                    let to = out.args.last().map(|a| a.to_string_lossy().into_owned());
                    let to = to.as_deref().unwrap_or("").split('=').next().unwrap_or("");
                    out.warnings.push(format!(
                        "{shown} ({}) is read as {to}: {note}",
                        spelling.from
                    ));
                }
            }
            Always => {}
            Ignored(note) => out
                .warnings
                .push(format!("{shown} ({}): ignored; {note}", spelling.from)),
            Refused(how) => {
                return Err(format!(
                    "{shown} ({}) is not supported: {how}",
                    spelling.from
                ))
            }
        }
    }
    Ok(out)
}

/// The message for an unknown flag: no guess at a flag of another meaning, only a typo's
/// correction (at most two edits from one of m0serve's, `known`).
pub(crate) fn unknown_flag(flag: &str, known: &[String]) -> String {
    let bare = flag.trim_start_matches('-');
    let bare = bare.split_once('=').map_or(bare, |(n, _)| n);
    let close = known
        .iter()
        .map(|k| (crate::text::edit_distance(bare, k), k))
        .filter(|(d, k)| *d <= 2 && *d * 3 <= k.len().max(bare.len()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k);
    match close {
        Some(k) => format!(
            "unknown option '{flag}'; did you mean --{k}? (`m0serve --help` lists them all)"
        ),
        None => format!(
            "unknown option '{flag}' (`m0serve --help` lists m0serve's; the gunicorn and \
             Granian spellings it takes are at \
             https://github.com/m0serve/m0serve/blob/main/docs/migration.md)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<std::ffi::OsString> {
        s.split_whitespace().map(Into::into).collect()
    }

    fn takes(f: &str) -> bool {
        matches!(f, "b" | "w" | "bind" | "workers" | "access-log-format")
    }

    fn rw(s: &str) -> Result<(Vec<String>, Vec<String>), String> {
        rewrite(&words(s), &takes).map(|r| {
            (
                r.args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
                r.warnings,
            )
        })
    }

    #[test]
    fn gunicorns_spellings_become_m0serves() {
        let (args, warnings) = rw(
            "-w 4 -k gthread --threads 8 -b 0.0.0.0:8000 --access-logfile - --error-logfile - \
             --keep-alive=5 --pid /run/x.pid app:app",
        )
        .unwrap();
        assert_eq!(
            args,
            [
                "-w",
                "4",
                "-k",
                "gthread",
                "--blocking-threads=8",
                "--max-blocking-threads=8",
                "-b",
                "0.0.0.0:8000",
                "--access-log-file=-",
                "--error-log-file=-",
                "--keep-alive-timeout=5",
                "--pid-file=/run/x.pid",
                "app:app"
            ]
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn a_value_is_never_read_as_a_flag() {
        let (args, _) = rw("--access-log-format --threads app:app").unwrap();
        assert_eq!(args, ["--access-log-format", "--threads", "app:app"]);
        let (args, _) = rw("app:app -- --threads").unwrap();
        assert_eq!(args, ["app:app", "--", "--threads"]);
        let e = rw("--threads --workers 2 app:app").unwrap_err();
        assert!(
            e.contains("--threads (gunicorn's spelling) needs a value"),
            "{e}"
        );
    }

    #[test]
    fn differences_warn_and_the_unsupported_is_refused_with_the_way() {
        let (args, w) = rw("--limit-request-field_size 100 --backpressure 8 x:y").unwrap();
        assert_eq!(args, ["--max-header-size=100", "x:y"]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("whole request head"), "{w:?}");
        assert!(w[1].contains("--max-queue-wait"), "{w:?}");
        // m0serve's own flag, left to clap.
        assert_eq!(rw("--preload x:y").unwrap().0, ["--preload", "x:y"]);
        let e = rw("-D x:y").unwrap_err();
        assert!(e.contains("--daemon"), "{e}");
        let e = rw("--interface asgi x:y").unwrap_err();
        assert!(e.contains("WSGI (PEP 3333) apps only"), "{e}");
        let (args, _) = rw("--interface wsgi --http1-header-read-timeout 2500 x:y").unwrap();
        assert_eq!(args, ["--header-timeout=2.5", "x:y"]);
        let (args, _) = rw("--cert-reqs 2 --limit-request-line 0 x:y").unwrap();
        assert_eq!(
            args,
            ["--client-cert=required", "--max-request-line=65536", "x:y"]
        );
        let (args, w) = rw("--limit-request-fields 0 --limit-request-field_size 0 x:y").unwrap();
        assert_eq!(
            args,
            ["--max-headers=256", "--max-header-size=1048576", "x:y"]
        );
        assert_eq!(w.len(), 1, "{w:?}");
        // A gunicorn switch clustered with m0serve's short flags.
        let e = rw("-Dw2 x:y").unwrap_err();
        assert!(e.contains("--daemon"), "{e}");
        let (args, w) = rw("-Rw 3 x:y").unwrap();
        assert_eq!(args, ["-w", "3", "x:y"]);
        assert_eq!(w.len(), 1, "{w:?}");
    }

    #[test]
    fn an_unknown_flag_gets_a_typo_fix_or_none() {
        let known: Vec<String> = ["workers", "reload", "blocking-threads"]
            .map(String::from)
            .to_vec();
        assert!(unknown_flag("--wrokers", &known).contains("did you mean --workers?"));
        let m = unknown_flag("--thraeds", &known);
        assert!(!m.contains("did you mean"), "{m}");
        assert!(m.contains("migration.md"), "{m}");
    }

    #[test]
    fn docs_migration_md_names_every_spelling() {
        let doc = include_str!("../../docs/migration.md");
        for s in SPELLINGS {
            assert!(
                doc.contains(&format!("`--{}", s.name)),
                "--{} is not in docs/migration.md",
                s.name
            );
        }
        for (c, _) in SHORT {
            assert!(
                doc.contains(&format!("`-{c}`")),
                "-{c} is not in docs/migration.md"
            );
        }
    }

    #[test]
    fn every_spelling_is_named_once_per_server() {
        for (i, a) in SPELLINGS.iter().enumerate() {
            assert!(
                !SPELLINGS[..i]
                    .iter()
                    .any(|b| b.name == a.name && b.from == a.from),
                "{} twice",
                a.name
            );
        }
    }
}
