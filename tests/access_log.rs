//! The access log: one line per response, in gunicorn's format by default, any format of
//! its atoms, or JSON; to standard error or a file. The app is tests/apps/regress.py.

mod common;

use common::*;
use std::time::Duration;

const PROMPT: Duration = Duration::from_secs(5);

fn request_with(target: &str, headers: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n").into_bytes()
}

fn check_default_format(args: &[&str]) {
    let s = Server::start("regress:app", args);
    let r = s.request(&request_with(
        "/hello?x=1",
        "User-Agent: m0test-agent/1.0\r\nReferer: http://ref.example/\r\n",
    ));
    assert_eq!(r.status, 200);
    let found = s.wait_for_log("m0test-agent/1.0", PROMPT);
    let log = s.log_text();
    assert!(found, "no access log line:\n{log}");
    let line = log
        .lines()
        .find(|l| l.contains("m0test-agent/1.0"))
        .unwrap();
    // 127.0.0.1 - - [30/Nov/2026:04:52:06 +0000] "GET /hello?x=1 HTTP/1.1" 200 5 "http://ref.example/" "m0test-agent/1.0"
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(line.contains(" +0000] "), "{line}");
    assert!(
        line.ends_with(
            r#""GET /hello?x=1 HTTP/1.1" 200 5 "http://ref.example/" "m0test-agent/1.0""#
        ),
        "{line}"
    );
}

#[test]
fn default_format_is_gunicorns_on_stderr() {
    check_default_format(&["--access-log"]);
}

#[test]
fn default_format_inline() {
    check_default_format(&["--access-log", "--blocking-threads", "0"]);
}

#[test]
fn off_by_default() {
    let s = Server::start("regress:app", &[]);
    let r = s.request(&request_with("/hello", "User-Agent: m0test-quiet\r\n"));
    assert_eq!(r.status, 200);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!s.log_text().contains("m0test-quiet"), "{}", s.log_text());
}

#[test]
fn json_lines_to_a_file_parse_back() {
    let tmp = TempDir::new("access-json");
    let file = tmp.file("access.log");
    let mut s = Server::start(
        "regress:app",
        &["--access-log-file", &file, "--access-log-format", "json"],
    );
    let mut raw = request_with("/hello?q=a%20b", "User-Agent: say \"hi\"\r\n");
    assert_eq!(s.request(&raw).status, 200);
    raw = b"GET /nowhere HTTP/1.1\r\nHost: x\r\nUser-Agent: caf\xe9\r\nConnection: close\r\n\r\n"
        .to_vec();
    assert_eq!(s.request(&raw).status, 404);
    s.stop();
    let text = std::fs::read_to_string(&file).expect("the access log file");
    let lines: Vec<Json> = text
        .lines()
        .map(|l| Json::parse(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["method"].as_str(), Some("GET"));
    assert_eq!(lines[0]["path"].as_str(), Some("/hello"));
    assert_eq!(lines[0]["query"].as_str(), Some("q=a%20b"));
    assert_eq!(lines[0]["status"].as_f64(), Some(200.0));
    assert_eq!(lines[0]["size"].as_f64(), Some(5.0));
    assert_eq!(lines[0]["user_agent"].as_str(), Some("say \"hi\""));
    assert_eq!(lines[0]["remote_addr"].as_str(), Some("127.0.0.1"));
    assert_eq!(lines[1]["status"].as_f64(), Some(404.0));
    assert_eq!(lines[1]["user_agent"].as_str(), Some("caf\u{e9}"));
    // ISO 8601 with milliseconds and the zone, as the error log's JSON has it.
    let time = lines[0]["time"].as_str().unwrap();
    let b = time.as_bytes();
    assert!(
        time.len() == 29
            && b[4] == b'-'
            && b[10] == b'T'
            && b[19] == b'.'
            && time.ends_with("+00:00")
            && time.starts_with("20"),
        "{time}"
    );
}

#[test]
fn custom_format_with_a_request_header_and_the_duration() {
    let s = Server::start(
        "regress:app",
        &[
            "--access-log",
            "--access-log-format",
            "rid=%({X-Request-Id}i)s us=%(D)s st=%(s)s m=%(m)s",
        ],
    );
    let r = s.request(&request_with("/hello", "X-Request-Id: m0test-42\r\n"));
    assert_eq!(r.status, 200);
    assert!(s.wait_for_log("rid=m0test-42", PROMPT), "{}", s.log_text());
    let log = s.log_text();
    let line = log.lines().find(|l| l.contains("rid=m0test-42")).unwrap();
    let us: u64 = line
        .split("us=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(us < 5_000_000, "{line}");
    assert!(line.ends_with("st=200 m=GET"), "{line}");
}

#[test]
fn a_bad_format_is_refused_naming_the_flag() {
    let out = run_to_exit(
        &[
            "hello:app",
            "--port",
            "0",
            "--access-log",
            "--access-log-format",
            "%(nope)s",
        ],
        &[],
        PROMPT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--access-log-format"), "{}", out.stderr);
}

#[test]
fn sigusr1_reopens_the_log_file_after_a_rotation() {
    let tmp = TempDir::new("access-rotate");
    let file = tmp.file("access.log");
    let rotated = tmp.file("access.log.1");
    let s = Server::start(
        "regress:app",
        &["--access-log-file", &file, "--workers", "2"],
    );
    s.wait_for_workers(2, PROMPT);
    let hit = |agent: &str| {
        let r = s.request(&request_with("/hello", &format!("User-Agent: {agent}\r\n")));
        assert_eq!(r.status, 200);
    };
    hit("m0test-before");
    assert!(
        wait_until(PROMPT, || read_or_empty(&file).contains("m0test-before")),
        "the first line never reached the file"
    );
    std::fs::rename(&file, &rotated).unwrap();
    s.signal(libc::SIGUSR1);
    assert!(
        s.wait_for_log("reopen their log files", PROMPT),
        "{}",
        s.log_text()
    );
    // Both workers must have reopened: send enough for each to log at least once.
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..20 {
        hit(&format!("m0test-after-{i}"));
    }
    assert!(
        wait_until(PROMPT, || read_or_empty(&file)
            .matches("m0test-after-")
            .count()
            == 20),
        "not every line after the rotation reached the new file:\nnew: {}\nold: {}",
        read_or_empty(&file),
        read_or_empty(&rotated)
    );
    assert!(read_or_empty(&rotated).contains("m0test-before"));
    assert!(!read_or_empty(&rotated).contains("m0test-after-"));
}

#[test]
fn the_client_a_trusted_proxy_names_is_logged_as_the_app_sees_it() {
    // 127.0.0.1 is trusted by default: `%(h)s` is the forwarded client, as gunicorn logs
    // REMOTE_ADDR; with no proxy trusted, the forged header changes nothing.
    for (args, want) in [
        (&["--access-log"][..], "203.0.113.9 - - ["),
        (
            &["--access-log", "--forwarded-allow-ips", ""][..],
            "127.0.0.1 - - [",
        ),
    ] {
        let s = Server::start("regress:app", args);
        let r = s.request(&request_with(
            "/hello",
            "User-Agent: m0test-proxied\r\nX-Forwarded-For: 203.0.113.9\r\n",
        ));
        assert_eq!(r.status, 200);
        assert!(s.wait_for_log("m0test-proxied", PROMPT), "{}", s.log_text());
        let log = s.log_text();
        let line = log.lines().find(|l| l.contains("m0test-proxied")).unwrap();
        assert!(line.starts_with(want), "{args:?}: {line}");
    }
}

#[test]
fn a_request_whose_client_left_before_the_app_ran_is_logged_as_499() {
    // One handler thread, never more: the second request waits for it.
    let s = Server::start(
        "pep3333:app",
        &[
            "--access-log",
            "--blocking-threads",
            "1",
            "--max-blocking-threads",
            "1",
        ],
    );
    let mut busy = s.connect();
    busy.send(b"GET /slow?secs=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    std::thread::sleep(Duration::from_millis(200));
    // Queued behind the slow one on the only handler; its client resets meanwhile.
    let mut gone = s.connect();
    gone.send(&request_with(
        "/status?code=200",
        "User-Agent: m0test-left\r\n",
    ));
    std::thread::sleep(Duration::from_millis(200));
    reset(gone);
    assert_eq!(busy.read_response().status, 200);
    assert!(s.wait_for_log("m0test-left", PROMPT), "{}", s.log_text());
    let log = s.log_text();
    let line = log.lines().find(|l| l.contains("m0test-left")).unwrap();
    assert!(line.contains("\" 499 "), "{line}");
}

#[test]
fn gunicorns_other_atoms_response_headers_environ_pid_and_fractional_seconds() {
    let s = Server::builder("regress:app")
        .args(&[
            "--access-log",
            "--access-log-format",
            "m0test L=%(L)s M=%(M)s p=%(p)s ct=%({Content-Type}o)s none=%({X-Not-Sent}o)s env=%({M0TEST_LOG_ENV}e)s path=%({PATH_INFO}e)s method=%({request_method}e)s unset=%({M0TEST_UNSET_ENV}e)s",
        ])
        .env("M0TEST_LOG_ENV", "from-env")
        .start();
    assert_eq!(s.request(&request_with("/hello", "")).status, 200);
    assert!(s.wait_for_log("m0test L=", PROMPT), "{}", s.log_text());
    let log = s.log_text();
    let line = log.lines().find(|l| l.contains("m0test L=")).unwrap();
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} in {line}"))
            .to_string()
    };
    let secs = field("L");
    assert_eq!(secs.split('.').nth(1).map(str::len), Some(6), "{line}");
    assert!(secs.parse::<f64>().unwrap() < 5.0, "{line}");
    let workers = s.worker_pids();
    assert!(
        workers.iter().any(|p| field("p") == format!("<{p}>")),
        "{line} not one of {workers:?}"
    );
    assert_eq!(field("ct"), "text/plain", "{line}");
    assert_eq!(field("none"), "-");
    // gunicorn's {KEY}e is the request's environ (any case), not the process's.
    assert_eq!(field("env"), "-", "{line}");
    assert_eq!(field("path"), "/hello", "{line}");
    assert_eq!(field("method"), "GET", "{line}");
    assert_eq!(field("unset"), "-");
    // Whole milliseconds, as gunicorn's %(M)s.
    assert!(field("M").parse::<u64>().is_ok(), "{line}");
}
