//! The error log as an operator uses it: text lines whose time says its zone, or one JSON
//! object a line (`--log-format json`); `--error-log-file` (the app's tracebacks included,
//! reopened on SIGUSR1); `--log-level` in any case and gunicorn's spellings;
//! `--access-log-file -` is standard output; the app's `print()` reaches a pipe line by
//! line. The app is tests/apps/logs_app.py.

mod common;

use std::time::Duration;

use common::*;

const PROMPT: Duration = Duration::from_secs(5);

#[test]
fn text_log_lines_say_their_time_zone() {
    let s = Server::start("logs_app:app", &[]);
    let log = s.stderr_text();
    let line = log.lines().find(|l| l.contains("listening on")).unwrap();
    // [2026-12-01 17:17:08 +0000] [PID] [INFO] [main] listening on ...
    let time = &line[1..line.find(']').unwrap()];
    assert_eq!(time.len(), "2026-12-01 17:17:08 +0000".len(), "{line}");
    assert!(time.ends_with(" +0000"), "{line}");
}

#[test]
fn json_error_log_is_one_object_a_line_with_iso_8601_times() {
    let s = Server::start("logs_app:app", &["--log-format", "json", "--workers", "2"]);
    assert_eq!(s.get("/").status, 200);
    let log = s.stderr_text();
    let mut n = 0;
    for line in log.lines() {
        let j = Json::parse(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let time = j["time"]
            .as_str()
            .unwrap_or_else(|| panic!("no time: {line}"));
        // 2026-12-01T17:17:08.123+00:00
        assert_eq!(time.len(), "2026-12-01T17:17:08.123+00:00".len(), "{line}");
        assert_eq!(&time[10..11], "T", "{line}");
        assert!(time.ends_with("+00:00"), "{line}");
        assert!(
            matches!(
                j["level"].as_str(),
                Some("error" | "warn" | "info" | "debug")
            ),
            "{line}"
        );
        assert!(j["pid"].as_f64().is_some_and(|p| p > 0.0), "{line}");
        assert!(j["thread"].as_str().is_some(), "{line}");
        assert!(j["message"].as_str().is_some(), "{line}");
        n += 1;
    }
    assert!(
        log.lines()
            .any(|l| l.contains("\"message\": \"listening on http://")),
        "{log}"
    );
    assert!(n >= 5, "{log}");
}

#[test]
fn log_level_takes_any_case_and_gunicorns_spellings() {
    for given in ["DEBUG", "Info", "warn", "WARNING", "critical", "ERROR"] {
        let out = run_to_exit(
            &["hello:app", "--log-level", given, "--print-config"],
            &[],
            PROMPT,
        );
        assert!(out.status.success(), "--log-level {given}: {}", out.stderr);
    }
    // The level applies: at `WARN` the workers' start (INFO) is not logged, their
    // failure to import (ERROR) is.
    let out = run_to_exit(
        &["broken_import:app", "--port", "0", "--log-level", "WARN"],
        &[],
        Duration::from_secs(20),
    );
    assert!(!out.stderr.contains("[INFO]"), "{}", out.stderr);
    assert!(out.stderr.contains("[ERROR]"), "{}", out.stderr);
    let out = run_to_exit(&["hello:app", "--log-level", "loud"], &[], PROMPT);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
}

#[test]
fn the_error_log_file_gets_the_servers_lines_and_the_apps_tracebacks_and_reopens_on_sigusr1() {
    let tmp = TempDir::new("error-log");
    let path = tmp.path.join("error.log");
    let s = Server::builder("logs_app:app")
        .args(&["--error-log-file", path.to_str().unwrap(), "--workers", "2"])
        .log_file(&path)
        .start();
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    assert_eq!(s.get("/raise").status, 500);
    assert!(
        wait_until(PROMPT, || read(&path)
            .contains("RuntimeError: m0test-raised")),
        "{}",
        read(&path)
    );
    let first = read(&path);
    assert!(first.contains("listening on http://"), "{first}");
    assert!(
        first.contains("Traceback (most recent call last)"),
        "{first}"
    );
    // Nothing of it on standard error.
    assert!(
        !s.stderr_text().contains("listening on"),
        "{}",
        s.stderr_text()
    );
    assert!(
        !s.stderr_text().contains("m0test-raised"),
        "{}",
        s.stderr_text()
    );

    // A rotation: the file is moved away, SIGUSR1 opens a new one in every process.
    let rotated = tmp.path.join("error.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    s.signal(libc::SIGUSR1);
    assert!(
        wait_until(PROMPT, || read(&path).matches("log files reopened").count()
            == 2),
        "both workers did not reopen; the new file:\n{}\nthe old one:\n{}",
        read(&path),
        read(&rotated)
    );
    for _ in 0..6 {
        assert_eq!(s.get("/raise").status, 500);
    }
    assert!(
        wait_until(PROMPT, || read(&path)
            .matches("RuntimeError: m0test-raised")
            .count()
            == 6),
        "{}",
        read(&path)
    );
    assert_eq!(
        read(&rotated).matches("m0test-raised").count(),
        first.matches("m0test-raised").count(),
        "lines went to the rotated file"
    );
}

#[test]
fn access_log_file_dash_is_standard_output() {
    let s = Server::start("logs_app:app", &["--access-log-file", "-"]);
    let r = s.request(b"GET /?m0test-dash HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(
        wait_until(PROMPT, || s.stdout_text().contains("m0test-dash")),
        "stdout:\n{}\nstderr:\n{}",
        s.stdout_text(),
        s.stderr_text()
    );
    assert!(!s.stderr_text().contains("m0test-dash"));
    assert!(!std::path::Path::new(&apps_dir()).join("-").exists());
}

#[test]
fn the_apps_print_reaches_a_pipe_line_by_line() {
    // Python buffers stdout in blocks when it is not a terminal; the worker switches it to
    // line buffering, so each print arrives as it happens (PYTHONUNBUFFERED not set).
    let s = Server::builder("logs_app:app")
        .env("PYTHONUNBUFFERED", "")
        .start();
    for n in 1..=3 {
        assert_eq!(s.get("/print").body_text(), n.to_string());
        let want = format!("m0test-print-{n}\n");
        assert!(
            wait_until(PROMPT, || s.stdout_text().contains(&want)),
            "print {n} did not arrive; stdout so far: {:?}",
            s.stdout_text()
        );
    }
}
