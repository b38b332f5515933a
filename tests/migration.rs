//! docs/migration.md says what to type instead of gunicorn's and Granian's flags: every
//! m0serve flag its tables name must be one the real program accepts. Each is run through
//! `--print-config` (with a sample value for its kind, from docs/configuration.md) and must
//! come back as set on the command line. Every gunicorn and Granian spelling in the first
//! column is run through the program too: taken, or refused with the m0serve way, never
//! unknown.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// The flags in backticks in the second column of every table row of `doc`.
fn flags_in_second_column(doc: &str) -> Vec<String> {
    flags_in_column(doc, 2)
}

/// The flags in backticks in column `n` (1 is the first) of every row of `doc`'s
/// three-column tables (theirs, m0serve's, a note; the defaults table has four).
fn flags_in_column(doc: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for line in doc.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').collect();
        if cells.len() != 5 {
            continue;
        }
        let Some(cell) = cells.get(n) else { continue };
        for (i, span) in cell.split('`').enumerate() {
            if i % 2 == 0 {
                continue;
            }
            for word in span.split([' ', ',']) {
                let flag = word.trim();
                let is_flag = (flag.starts_with("--") && flag.len() > 3)
                    || (flag.len() == 2
                        && flag.starts_with('-')
                        && flag.as_bytes()[1].is_ascii_alphabetic());
                if is_flag
                    && flag[1..]
                        .chars()
                        .all(|c| c == '-' || c.is_ascii_alphanumeric())
                    && !out.contains(&flag.to_string())
                {
                    out.push(flag.to_string());
                }
            }
        }
    }
    out
}

/// docs/configuration.md's rows: each flag (long, and short if any) -> (its long form, its
/// value's name, or `None` for a switch).
fn configuration() -> BTreeMap<String, (String, Option<String>)> {
    let mut out = BTreeMap::new();
    for line in repo_file("docs/configuration.md")
        .lines()
        .filter(|l| l.starts_with("| `-"))
    {
        let cell = line.split('|').nth(1).unwrap();
        let spans: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
        let long_span = spans.last().unwrap();
        let mut parts = long_span.split(' ');
        let long = parts.next().unwrap().to_string();
        let value = parts.next().map(String::from);
        for s in &spans {
            out.insert(
                s.split(' ').next().unwrap().to_string(),
                (long.clone(), value.clone()),
            );
        }
    }
    out
}

/// A value `--print-config` accepts for `long` (whose value is named `name`).
fn sample(long: &str, name: &str, tmp: &TempDir) -> String {
    let file = |n: &str, text: &str| {
        let p = tmp.path.join(n);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    match long {
        "--bind" => "127.0.0.1:0".into(),
        "--host" | "--metrics-address" => "127.0.0.1".into(),
        "--forwarded-allow-ips" | "--proxy-allow-from" => "10.0.0.0/8".into(),
        "--worker-class" => "gthread".into(),
        "--uds-permissions" => "660".into(),
        "--access-log-format" => "%(h)s %(s)s".into(),
        "--log-level" => "warning".into(),
        "--log-format" => "json".into(),
        "--root-path" => "/prefix".into(),
        "--root-path-outside" => "app".into(),
        "--env" => "M0TEST_X=1".into(),
        "--env-file" => file("app.env", "M0TEST_Y=2\n"),
        "--config" => file("m0serve.conf", "--backlog 64\n"),
        "--chdir" | "--app-dir" | "--pythonpath" => tmp.path.display().to_string(),
        "--venv" => {
            let v = tmp.path.join("venv");
            std::fs::create_dir_all(&v).unwrap();
            std::fs::write(v.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
            v.display().to_string()
        }
        "--reload-ignore" => "tests/*".into(),
        "--user" => "nobody".into(),
        "--group" => "nogroup".into(),
        "--umask" => "027".into(),
        "--certfile" | "--keyfile" | "--ca-certs" => file("some.pem", "not read here\n"),
        "--client-cert" => "optional".into(),
        "--insecure-bind" => "127.0.0.1:0".into(),
        "--static-map" => format!("/static={}", tmp.path.display()),
        "--static-max-age" => "3600".into(),
        _ => match name {
            "N" | "J" | "MIB" | "WORKERS" | "BLOCKING_THREADS" => "2".into(),
            "SECS" => "7".into(),
            "BYTES" => "4096".into(),
            "SIZE" => "2M".into(),
            "PORT" => "9123".into(),
            "PATH" => tmp.path.join("some.file").display().to_string(),
            other => panic!("{long} {other}: no sample value for this kind; add one"),
        },
    }
}

#[test]
fn every_m0serve_flag_docs_migration_md_names_is_accepted() {
    let flags = flags_in_second_column(&repo_file("docs/migration.md"));
    assert!(flags.len() > 40, "too few flags found: {flags:?}");
    let known = configuration();
    let tmp = TempDir::new("migration");
    let mut checked = Vec::new();
    for flag in &flags {
        let (long, value) = known.get(flag).unwrap_or_else(|| {
            panic!("docs/migration.md names {flag}, which m0serve does not have")
        });
        if long == "--print-config" {
            let out = run_to_exit(&["hello:app", flag], &[], Duration::from_secs(10));
            assert!(
                out.status.success() && out.stdout.contains("APP = "),
                "{}",
                out.stderr
            );
            checked.push(flag.as_str());
            continue;
        }
        let mut args = vec!["hello:app".to_string(), flag.clone()];
        if let Some(name) = value {
            args.push(sample(long, name, &tmp));
        }
        args.push("--print-config".into());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_to_exit(&argv, &[], Duration::from_secs(10));
        assert!(out.status.success(), "{argv:?}: {}", out.stderr);
        let shown = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{long} = ")))
            .unwrap_or_else(|| panic!("{argv:?}: {long} not in --print-config:\n{}", out.stdout));
        assert!(shown.ends_with("# flag"), "{argv:?}: {shown}");
        checked.push(flag.as_str());
    }
    eprintln!("{} flags checked: {checked:?}", checked.len());
}

/// A value a foreign flag takes, for the check below.
fn foreign_sample(flag: &str, tmp: &TempDir) -> String {
    match flag {
        "--interface" => "wsgi".into(),
        "--cert-reqs" | "--http" => "1".into(),
        "--http1-header-read-timeout" => "2500".into(),
        "--access-logfile" | "--error-logfile" | "--log-file" => "-".into(),
        "--url-path-prefix" => "/prefix".into(),
        "--limit-request-field_size" | "--limit-request-field-size" => "4096".into(),
        "--working-dir" | "--worker-tmp-dir" => tmp.path.display().to_string(),
        "--env-files" | "--ssl-ca" | "--pid" | "--ssl-certificate" | "--ssl-keyfile" => {
            let p = tmp.path.join("a.file");
            std::fs::write(&p, "M0TEST_Z=1\n").unwrap();
            p.display().to_string()
        }
        _ => "2".into(),
    }
}

#[test]
fn every_gunicorn_and_granian_spelling_docs_migration_md_names_is_taken_or_refused_with_a_way() {
    let flags = flags_in_column(&repo_file("docs/migration.md"), 1);
    let known = configuration();
    let tmp = TempDir::new("migration-foreign");
    let mut checked = Vec::new();
    for flag in flags.iter().filter(|f| !known.contains_key(*f)) {
        let run = |extra: Option<String>| {
            let mut args = vec!["hello:app".to_string(), flag.clone()];
            args.extend(extra);
            args.push("--print-config".into());
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            (
                run_to_exit(&argv, &[], Duration::from_secs(10)),
                argv.join(" "),
            )
        };
        let (mut out, mut line) = run(None);
        if out.stderr.contains("needs a value") || out.stderr.contains("a value is required") {
            (out, line) = run(Some(foreign_sample(flag, &tmp)));
        }
        let taken = out.status.success() && out.stdout.contains("APP = ");
        let refused = out.status.code() == Some(2) && out.stderr.contains("is not supported: ");
        assert!(taken || refused, "{line}: {:?}\n{}", out.status, out.stderr);
        assert!(
            !out.stderr.contains("unknown option"),
            "{line}: {}",
            out.stderr
        );
        checked.push(flag.as_str());
    }
    assert!(
        checked.len() > 40,
        "too few foreign flags found: {checked:?}"
    );
    eprintln!("{} foreign flags checked: {checked:?}", checked.len());
}

#[test]
fn the_check_sees_a_flag_that_does_not_exist() {
    let doc =
        "| gunicorn | m0serve | note |\n|---|---|---|\n| `--x` | `--no-such-flag`, `-w` | |\n";
    let flags = flags_in_second_column(doc);
    assert_eq!(flags, ["--no-such-flag", "-w"]);
    assert!(!configuration().contains_key("--no-such-flag"));
    assert_eq!(configuration()["-w"].0, "--workers");
}
