//! The command line, the environment fallbacks, start-up failures and signals.

mod common;

use common::*;
use std::time::Duration;

const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

fn apps() -> String {
    apps_dir().to_string_lossy().into_owned()
}

/// A failed start: non-zero exit, something on stderr, never a Rust panic,
/// never a `listening on` line.
fn assert_clean_failure(out: &Output, what: &str) {
    assert!(
        !out.status.success(),
        "{what}: expected a non-zero exit, got {}\nstderr:\n{}",
        describe_status(&out.status),
        out.stderr
    );
    assert!(
        out.status.code().is_some(),
        "{what}: expected an exit code, the process was {}\nstderr:\n{}",
        describe_status(&out.status),
        out.stderr
    );
    assert!(!out.stderr.trim().is_empty(), "{what}: nothing on stderr");
    assert!(
        !out.stderr.contains(PANIC_MARKER),
        "{what}: a Rust panic instead of an error message:\n{}",
        out.stderr
    );
    assert!(
        !out.stdout.contains(PANIC_MARKER),
        "{what}: a Rust panic on stdout:\n{}",
        out.stdout
    );
}

#[test]
fn version_prints_name_and_version() {
    let out = run_to_exit(&["--version"], &[], EXIT_TIMEOUT);
    assert!(
        out.status.success(),
        "--version: {}\n{}",
        describe_status(&out.status),
        out.stderr
    );
    assert_eq!(out.stdout.trim(), "m0serve 0.1.0");
}

#[test]
fn help_lists_the_flags() {
    let out = run_to_exit(&["--help"], &[], EXIT_TIMEOUT);
    assert!(
        out.status.success(),
        "--help: {}\n{}",
        describe_status(&out.status),
        out.stderr
    );
    for flag in [
        "--host",
        "--port",
        "--uds",
        "--workers",
        "--blocking-threads",
        "--app-dir",
        "--log-level",
        "--version",
        "--help",
    ] {
        assert!(
            out.stdout.contains(flag),
            "--help does not mention {flag}:\n{}",
            out.stdout
        );
    }
}

#[test]
fn short_help_fits_one_screen_and_long_help_is_grouped_by_topic() {
    let short = run_to_exit(&["-h"], &[], EXIT_TIMEOUT);
    assert!(short.status.success(), "{}", short.stderr);
    let lines: Vec<&str> = short.stdout.lines().collect();
    assert!(
        lines.len() <= 60,
        "-h has {} lines:\n{}",
        lines.len(),
        short.stdout
    );
    for l in &lines {
        assert!(
            l.chars().count() <= 100,
            "-h line of {} chars: {l}",
            l.len()
        );
    }
    for flag in [
        "--bind",
        "--workers",
        "--timeout",
        "--access-log",
        "--reload",
        "--check-config",
    ] {
        assert!(short.stdout.contains(flag), "-h lacks {flag}");
    }
    let long = run_to_exit(&["--help"], &[], EXIT_TIMEOUT);
    assert!(long.status.success(), "{}", long.stderr);
    for l in long.stdout.lines() {
        assert!(
            l.chars().count() <= 100,
            "--help line of {} chars: {l}",
            l.len()
        );
    }
    let headings = [
        "Serving:",
        "Processes and threads:",
        "Limits and timeouts:",
        "TLS:",
        "Proxies:",
        "Logging:",
        "Metrics:",
        "Static files:",
        "Development and tuning:",
    ];
    for h in headings {
        assert!(long.stdout.lines().any(|l| l == h), "--help lacks {h}");
    }
    // Every option sits under a topic (only help and version under "Options:").
    let options = long
        .stdout
        .split("\nOptions:\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next().map(str::to_string))
        .unwrap_or_default();
    let untopical: Vec<&str> = options
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .filter(|l| !l.contains("--help") && !l.contains("--version"))
        .collect();
    assert!(untopical.is_empty(), "{untopical:?}");
    assert!(long.stdout.contains("[default: 0.5]"), "defaults are shown");
}

#[test]
fn every_documentation_link_in_the_help_and_messages_resolves_in_this_repository() {
    const HOME: &str = "https://github.com/m0serve/m0serve/";
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut text = String::new();
    for args in [
        &["-h"][..],
        &["--help"],
        &["hello:app", "--access-log-format", "%(zz)s"],
    ] {
        let out = run_to_exit(args, &[], EXIT_TIMEOUT);
        text.push_str(&out.stdout);
        text.push_str(&out.stderr);
    }
    // Wrapped help may break a line after a link, never inside one.
    let links: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ';')
        .filter(|w| w.starts_with("https://"))
        .map(|w| w.trim_end_matches(['.', ',']))
        .collect();
    assert!(links.len() >= 5, "{links:?}");
    for link in links {
        let rest = link
            .strip_prefix(HOME)
            .unwrap_or_else(|| panic!("{link} is not the project's home"));
        let rest = rest
            .strip_prefix("blob/main/")
            .or_else(|| rest.strip_prefix("tree/main/"))
            .unwrap_or_else(|| panic!("{link}: not a path on main"));
        let (path, anchor) = rest.split_once('#').unwrap_or((rest, ""));
        let file = root.join(path);
        assert!(
            file.exists(),
            "{link}: {} is not in the repository",
            file.display()
        );
        if !anchor.is_empty() {
            let doc = std::fs::read_to_string(&file).unwrap();
            // GitHub's anchor for a heading: lower case, spaces as '-', the rest of the
            // punctuation dropped.
            let found = doc.lines().filter_map(|l| l.strip_prefix("## ")).any(|h| {
                let slug: String = h
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                slug == anchor
            });
            assert!(found, "{link}: no heading for #{anchor} in {path}");
        }
    }
}

#[test]
fn unknown_flag_exits_nonzero_naming_the_flag() {
    let out = run_to_exit(
        &["hello:app", "--port", "0", "--no-such-flag-m0test"],
        &[],
        EXIT_TIMEOUT,
    );
    assert_clean_failure(&out, "unknown flag");
    assert!(
        out.stderr.contains("--no-such-flag-m0test"),
        "stderr does not name the flag:\n{}",
        out.stderr
    );
    assert!(
        find_listening_addr(&out.stderr).is_none(),
        "started listening despite a bad flag"
    );
}

#[test]
fn invalid_port_value_exits_nonzero_naming_the_flag() {
    let out = run_to_exit(&["hello:app", "--port", "not-a-port"], &[], EXIT_TIMEOUT);
    assert_clean_failure(&out, "--port not-a-port");
    assert!(
        out.stderr.contains("--port") || out.stderr.contains("not-a-port"),
        "stderr:\n{}",
        out.stderr
    );
}

#[test]
fn a_bad_address_list_names_its_own_flag() {
    for flag in ["--forwarded-allow-ips", "--proxy-allow-from"] {
        let out = run_to_exit(
            &[
                "hello:app",
                "--port",
                "0",
                "--proxy-protocol",
                flag,
                "10.0.0.0/33",
            ],
            &[],
            EXIT_TIMEOUT,
        );
        assert_clean_failure(&out, flag);
        let says = format!("{flag}: \"10.0.0.0/33\" is not an address or a CIDR");
        assert!(out.stderr.contains(&says), "stderr:\n{}", out.stderr);
    }
}

#[test]
fn invalid_blocking_threads_value_exits_nonzero_naming_the_flag() {
    let out = run_to_exit(
        &["hello:app", "--port", "0", "--blocking-threads", "many"],
        &[],
        EXIT_TIMEOUT,
    );
    assert_clean_failure(&out, "--blocking-threads many");
    assert!(
        out.stderr.contains("--blocking-threads") || out.stderr.contains("many"),
        "stderr:\n{}",
        out.stderr
    );
}

#[test]
fn blocking_threads_past_the_limit_exits_nonzero_naming_the_flag() {
    let out = run_to_exit(
        &["hello:app", "--port", "0", "--blocking-threads", "5000"],
        &[],
        EXIT_TIMEOUT,
    );
    assert_clean_failure(&out, "--blocking-threads 5000");
    assert!(
        out.stderr.contains("--blocking-threads 5000") && out.stderr.contains("between 0"),
        "stderr:\n{}",
        out.stderr
    );
}

#[test]
fn missing_app_argument_exits_nonzero() {
    let out = run_to_exit(&["--port", "0"], &[], EXIT_TIMEOUT);
    assert_clean_failure(&out, "no APP");
}

#[test]
fn unimportable_module_exits_nonzero_naming_it() {
    let out = run_to_exit(
        &[
            "no_such_module_m0test:app",
            "--port",
            "0",
            "--app-dir",
            &apps(),
        ],
        &[],
        EXIT_TIMEOUT,
    );
    assert_clean_failure(&out, "missing module");
    assert!(
        out.stderr.contains("no_such_module_m0test"),
        "stderr does not name the module:\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("ModuleNotFoundError"),
        "stderr has no Python error:\n{}",
        out.stderr
    );
}

#[test]
fn module_raising_at_import_exits_nonzero_with_its_traceback() {
    let out = run_to_exit(
        &["broken_import:app", "--port", "0", "--app-dir", &apps()],
        &[],
        EXIT_TIMEOUT,
    );
    assert_clean_failure(&out, "module raising at import");
    assert!(
        out.stderr.contains("Traceback (most recent call last)"),
        "no traceback:\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("broken_import.py"),
        "traceback does not show the module's file:\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("RuntimeError: m0test-import-failure"),
        "traceback does not show the error:\n{}",
        out.stderr
    );
}

#[test]
fn under_log_format_json_an_import_traceback_is_one_record_of_each_worker() {
    // Issue 40: the traceback was plain text in a JSON log.
    let out = run_to_exit(
        &[
            "broken_import:app",
            "--port",
            "0",
            "--app-dir",
            &apps(),
            "--workers",
            "2",
            "--log-format",
            "json",
        ],
        &[],
        EXIT_TIMEOUT,
    );
    assert_clean_failure(&out, "module raising at import");
    let mut tracebacks = 0;
    for line in out.stderr.lines().filter(|l| !l.is_empty()) {
        let j = Json::parse(line).unwrap_or_else(|e| panic!("not a JSON record: {line:?} ({e:?})"));
        let message = j["message"].as_str().unwrap_or_default();
        if message.starts_with("Traceback (most recent call last)") {
            assert!(
                message.contains("RuntimeError: m0test-import-failure"),
                "{line}"
            );
            tracebacks += 1;
        }
    }
    assert!(tracebacks >= 1, "no traceback record in\n{}", out.stderr);
}

#[test]
fn missing_attribute_exits_nonzero_naming_it() {
    let out = run_to_exit(
        &[
            "hello:no_such_attr_m0test",
            "--port",
            "0",
            "--app-dir",
            &apps(),
        ],
        &[],
        EXIT_TIMEOUT,
    );
    assert_clean_failure(&out, "missing attribute");
    assert!(
        out.stderr.contains("no_such_attr_m0test"),
        "stderr does not name the attribute:\n{}",
        out.stderr
    );
}

#[test]
fn module_attr_form_serves_the_app() {
    let s = Server::start("hello:app", &[]);
    let r = s.get("/");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"Hello, World!");
}

#[test]
fn factory_call_form_serves_the_app_the_factory_returns() {
    let s = Server::start("pep3333:factory()", &[]);
    let r = s.get("/anything");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_text(), "made by factory");
}

#[test]
fn listening_line_names_the_address_actually_bound() {
    let s = Server::start(
        "hello:app",
        &[
            "--host",
            "127.0.0.1",
            "--workers",
            "1",
            "--log-level",
            "info",
        ],
    );
    assert_eq!(s.addr().ip().to_string(), "127.0.0.1");
    assert_ne!(s.port(), 0, "--port 0 must report the port picked");
    assert_eq!(s.get("/").status, 200);
}

/// `--port P` and `M0SERVE_PORT=P`: the server listens on P. A port found free
/// may be taken by a parallel test before the server binds it, so retry.
fn start_on_fixed_port(use_env: bool) -> (Server, u16) {
    let mut last = String::new();
    for _ in 0..5 {
        let port = free_port();
        let ps = port.to_string();
        let b = Server::builder("hello:app").without_port_flag();
        let b = if use_env {
            b.env("M0SERVE_PORT", &ps)
        } else {
            b.args(&["--port", &ps])
        };
        match b.try_start() {
            Ok(s) => return (s, port),
            Err(e) => last = e,
        }
    }
    panic!("could not start on a fixed port: {last}");
}

#[test]
fn port_flag_is_used() {
    let (s, port) = start_on_fixed_port(false);
    assert_eq!(s.port(), port);
    assert_eq!(s.get("/").status, 200);
}

#[test]
fn port_is_read_from_m0serve_port() {
    let (s, port) = start_on_fixed_port(true);
    assert_eq!(s.port(), port, "M0SERVE_PORT={port} was not used");
    assert_eq!(s.get("/").status, 200);
}

#[test]
fn app_dir_is_read_from_m0serve_app_dir() {
    let s = Server::builder("hello:app")
        .without_app_dir_flag()
        .env("M0SERVE_APP_DIR", &apps())
        .start();
    assert_eq!(s.get("/").body, b"Hello, World!");
}

#[test]
fn blocking_threads_is_read_from_m0serve_blocking_threads() {
    let s = Server::builder("echo:app")
        .env("M0SERVE_BLOCKING_THREADS", "2")
        .start();
    let e = s.get("/").echo();
    assert_eq!(
        e.wsgi("multithread").as_bool(),
        Some(true),
        "with M0SERVE_BLOCKING_THREADS=2 the app can run on two threads at once"
    );
}

#[test]
fn flag_wins_over_environment_variable() {
    // One thread, never more: the app never runs on two at once.
    let s = Server::builder("echo:app")
        .env("M0SERVE_MAX_BLOCKING_THREADS", "2")
        .args(&["--max-blocking-threads", "1"])
        .start();
    assert_eq!(s.get("/").echo().wsgi("multithread").as_bool(), Some(false));
}

#[test]
fn sigterm_exits_zero() {
    let mut s = Server::start("hello:app", &[]);
    assert_eq!(s.get("/").status, 200);
    let st = s.stop();
    assert_eq!(
        st.code(),
        Some(0),
        "SIGTERM: {}\nstderr:\n{}",
        describe_status(&st),
        s.stderr_text()
    );
}

#[test]
fn sigint_exits_zero() {
    let mut s = Server::start("hello:app", &[]);
    assert_eq!(s.get("/").status, 200);
    s.signal(libc::SIGINT);
    let st = s
        .wait_exit(STOP_TIMEOUT)
        .expect("no exit within the timeout after SIGINT");
    assert_eq!(
        st.code(),
        Some(0),
        "SIGINT: {}\nstderr:\n{}",
        describe_status(&st),
        s.stderr_text()
    );
}

#[test]
fn sigterm_while_a_slow_request_is_in_flight_still_delivers_it() {
    let tmp = TempDir::new("sigterm-slow");
    let mark = tmp.file("mark");
    let mut s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(&get(&format!("/slow?secs=2&mark={mark}")));
    wait_for_file_containing(&mark, "started", Duration::from_secs(10))
        .expect("the slow request never started");
    s.signal(libc::SIGTERM);
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert_eq!(r.body_text(), "slow done");
    let st = s
        .wait_exit(STOP_TIMEOUT)
        .expect("no exit after finishing the in-flight request");
    assert_eq!(
        st.code(),
        Some(0),
        "{}\nstderr:\n{}",
        describe_status(&st),
        s.stderr_text()
    );
}

#[test]
fn sigterm_closes_idle_keep_alive_connections_and_exits() {
    let mut s = Server::start("hello:app", &[]);
    let mut c = s.connect();
    c.send(&get("/"));
    assert_eq!(c.read_response().status, 200);
    let st = s.stop();
    assert_eq!(st.code(), Some(0), "{}", describe_status(&st));
    c.expect_closed(Duration::from_secs(5));
}

#[test]
fn sigterm_still_serves_a_connection_that_had_not_sent_its_request_yet() {
    // A client that connected just before the stop is about to send its request (during
    // a reload, this is every client that raced the signal): it gets an answer, with
    // Connection: close, not a closed socket.
    let mut s = Server::start("hello:app", &[]);
    let mut c = s.connect();
    // The connection is accepted by now (the worker's loop is idle and quick).
    std::thread::sleep(Duration::from_millis(300));
    s.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    c.send(&get("/"));
    let r = c.read_response();
    assert_eq!(r.status, 200, "{}", r.status_line());
    assert!(r.connection_has("close"), "{:?}", r.header("Connection"));
    let st = s
        .wait_exit(Duration::from_secs(10))
        .expect("the server exits");
    assert_eq!(st.code(), Some(0), "{}", describe_status(&st));
}

#[test]
fn sigterm_closes_a_connection_that_never_sends_a_request_after_a_grace() {
    let mut s = Server::start("hello:app", &[]);
    let mut c = s.connect();
    std::thread::sleep(Duration::from_millis(300));
    let t = std::time::Instant::now();
    s.signal(libc::SIGTERM);
    c.expect_closed(Duration::from_secs(10));
    let st = s
        .wait_exit(Duration::from_secs(10))
        .expect("the server exits");
    assert_eq!(st.code(), Some(0), "{}", describe_status(&st));
    assert!(
        t.elapsed() < Duration::from_secs(6),
        "the silent connection held the stop for {:?}",
        t.elapsed()
    );
}

#[test]
fn check_config_imports_the_app_and_exits_without_serving() {
    let apps = apps_dir();
    let dir = apps.to_str().unwrap();
    let out = run_to_exit(
        &[
            "hello:app",
            "--app-dir",
            dir,
            "--workers",
            "3",
            "--check-config",
        ],
        &[],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("configuration OK"), "{}", out.stdout);
    assert!(
        !out.stderr.contains("listening on"),
        "it served:\n{}",
        out.stderr
    );

    let out = run_to_exit(
        &["hello:nope", "--app-dir", dir, "--check-config"],
        &[],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("nope"), "{}", out.stderr);

    let out = run_to_exit(
        &["broken_import:app", "--app-dir", dir, "--check-config"],
        &[],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("broken_import"), "{}", out.stderr);

    let out = run_to_exit(
        &[
            "hello:app",
            "--app-dir",
            dir,
            "--check-config",
            "--max-headers",
            "0",
        ],
        &[],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--max-headers"), "{}", out.stderr);
}

#[test]
fn config_file_flags_yield_to_the_environment_and_the_command_line() {
    let tmp = TempDir::new("config-file");
    let file = tmp.file("m0serve.conf");
    std::fs::write(
        &file,
        "# m0serve flags, one per line\n--workers 2\n\n--access-log\n--max-headers 50\n\
         --keep-alive-timeout=7\n--port 0\n",
    )
    .unwrap();
    let out = run_to_exit(
        &[
            "hello:app",
            "--config",
            &file,
            "--port",
            "5555",
            "--print-config",
        ],
        &[("M0SERVE_MAX_HEADERS", "60")],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let line = |flag: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{flag} = ")))
            .unwrap_or_else(|| panic!("no {flag} in:\n{}", out.stdout))
            .to_string()
    };
    assert_eq!(line("--workers"), "--workers = \"2\"  # file");
    assert_eq!(
        line("--keep-alive-timeout"),
        "--keep-alive-timeout = \"7\"  # file"
    );
    assert_eq!(
        line("--max-headers"),
        "--max-headers = \"60\"  # environment (M0SERVE_MAX_HEADERS)"
    );
    assert_eq!(line("--port"), "--port = \"5555\"  # flag");
    assert!(
        line("--backlog").ends_with("# default"),
        "{}",
        line("--backlog")
    );
    assert_eq!(
        line("--cpu-affinity"),
        "--cpu-affinity = \"adaptive\"  # default"
    );

    // And a server started with it runs as the file says.
    let s = Server::builder("regress:app")
        .args(&["--config", &file])
        .start();
    s.wait_for_workers(2, Duration::from_secs(10));
    let r = s.request(
        b"GET /hello HTTP/1.1\r\nHost: x\r\nUser-Agent: m0test-conf\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert!(
        s.wait_for_log("m0test-conf", Duration::from_secs(5)),
        "{}",
        s.log_text()
    );
}

#[test]
fn a_bad_config_file_is_refused_naming_the_line() {
    let tmp = TempDir::new("config-bad");
    let file = tmp.file("bad.conf");
    std::fs::write(&file, "--workers 2\n--no-such-flag 1\n").unwrap();
    let out = run_to_exit(&["hello:app", "--config", &file], &[], EXIT_TIMEOUT);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("line 2") && out.stderr.contains("--no-such-flag"),
        "{}",
        out.stderr
    );
    let out = run_to_exit(
        &["hello:app", "--config", "/nonexistent/m0.conf"],
        &[],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--config"), "{}", out.stderr);
}

/// A config file's value is the rest of the line as written, less one pair of quotes
/// around all of it; a flag that needs a value and has none, or takes none and has one, is
/// refused naming the line (neither may take the APP argument as its value).
#[test]
fn config_file_values_keep_their_own_quotes_and_an_empty_value_stays_a_value() {
    let tmp = TempDir::new("config-quotes");
    let file = tmp.file("m0serve.conf");
    std::fs::write(
        &file,
        "--access-log-format %(h)s \"%(r)s\" %(s)s \"%(a)s\"\n\
         --forwarded-allow-ips \"\"\n\
         --root-path '/api'\n\
         --env A=\"x y\"\n",
    )
    .unwrap();
    let out = run_to_exit(
        &["hello:app", "--config", &file, "--print-config"],
        &[],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    for want in [
        r#"--access-log-format = "%(h)s \"%(r)s\" %(s)s \"%(a)s\""  # file"#,
        r#"--forwarded-allow-ips = ""  # file"#,
        r#"--root-path = "/api"  # file"#,
        r#"--env = "A=\"x y\""  # file"#,
    ] {
        assert!(
            out.stdout.lines().any(|l| l == want),
            "{want}\n{}",
            out.stdout
        );
    }
    for (line, says) in [
        ("--workers\n", "--workers needs a value"),
        ("--proxy-protocol true\n", "--proxy-protocol takes no value"),
    ] {
        std::fs::write(&file, format!("--access-log\n{line}")).unwrap();
        let out = run_to_exit(&["hello:app", "--config", &file], &[], EXIT_TIMEOUT);
        assert_eq!(out.status.code(), Some(2), "{line:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("line 2") && out.stderr.contains(says),
            "{line:?}: {}",
            out.stderr
        );
    }
}

/// A relative --config with --chdir: the workers (which read the file again, from the
/// directory --chdir moved to) read the file the master read.
#[test]
fn a_relative_config_file_reaches_the_workers_after_chdir() {
    let tmp = TempDir::new("config-chdir");
    let launch = tmp.file("");
    std::fs::write(tmp.file("m0.conf"), "--workers 2\n--access-log\n").unwrap();
    let log = tmp.file("stderr.log");
    let port = free_port();
    let mut child = std::process::Command::new(bin())
        .args(["hello:app", "--config", "m0.conf", "--chdir"])
        .arg(apps_dir())
        .args(["--port", &port.to_string()])
        .current_dir(&launch)
        .env_remove("M0SERVE_PORT")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    let both = wait_until(Duration::from_secs(20), || {
        text().matches("worker: m0serve").count() == 2
    });
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let _ = child.wait();
    assert!(both, "{}", text());
    assert!(!text().contains("failed to boot"), "{}", text());
}

/// `m0serve hello:app --check-config ARGS...` to its exit.
fn check_config(args: &[&str]) -> Output {
    let argv: Vec<&str> = ["hello:app", "--check-config"]
        .iter()
        .chain(args)
        .copied()
        .collect();
    run_to_exit(&argv, &[], EXIT_TIMEOUT)
}

/// A value that does nothing in the configuration it is given in is warned about (at
/// start, and by --check-config), not dropped in silence.
#[test]
fn values_that_do_nothing_are_warned_about() {
    let cases: [(&[&str], &str); 8] = [
        (
            &["--bind", "127.0.0.1:0", "--uds", "/tmp/m0-unused.sock"],
            "--uds: ignored",
        ),
        (&["--bind", "127.0.0.1:0", "--port", "9"], "--port: ignored"),
        (
            &["--blocking-threads", "0", "--timeout", "5"],
            "--timeout 5: does nothing",
        ),
        (
            &["--max-requests-jitter", "10"],
            "--max-requests-jitter: does nothing",
        ),
        (
            &["--uds-permissions", "600"],
            "--uds-permissions: no Unix socket",
        ),
        (
            &["--proxy-allow-from", "10.0.0.0/8"],
            "--proxy-allow-from: does nothing without --proxy-protocol",
        ),
        (
            &["--proxy-forwarded-headers"],
            "--proxy-forwarded-headers: does nothing without --proxy-protocol",
        ),
        // Once, it also said who may send a PROXY header; behind one, nothing.
        (
            &["--proxy-protocol", "--forwarded-allow-ips", "10.0.0.0/8"],
            "--forwarded-allow-ips: does nothing behind --proxy-protocol",
        ),
    ];
    for (args, says) in cases {
        let out = check_config(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    // --host is ignored beside --bind too; from the environment (an image's M0SERVE_HOST
    // and M0SERVE_PORT) it is no mistake; the defaults say nothing.
    let out = run_to_exit(
        &[
            "hello:app",
            "--check-config",
            "--bind",
            "127.0.0.1:0",
            "--host",
            "0.0.0.0",
        ],
        &[],
        EXIT_TIMEOUT,
    );
    assert!(out.stderr.contains("--host: ignored"), "{}", out.stderr);
    let out = run_to_exit(
        &["hello:app", "--check-config", "--bind", "127.0.0.1:0"],
        &[("M0SERVE_HOST", "0.0.0.0"), ("M0SERVE_PORT", "8000")],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    let out = run_to_exit(&["hello:app", "--check-config"], &[], EXIT_TIMEOUT);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
}

/// Every on/off option reads its environment variable the same way (1/0, yes/no, on/off,
/// true/false).
#[test]
fn boolean_environment_variables_all_take_the_same_words() {
    for var in [
        "M0SERVE_PROXY_PROTOCOL",
        "M0SERVE_ACCESS_LOG",
        "M0SERVE_STATS",
        "M0SERVE_RELOAD",
    ] {
        for word in ["1", "yes", "on", "true"] {
            let out = run_to_exit(
                &["hello:app", "--print-config"],
                &[(var, word)],
                EXIT_TIMEOUT,
            );
            assert_eq!(out.status.code(), Some(0), "{var}={word}: {}", out.stderr);
        }
    }
}

/// --check-config refuses what no host could start with (a file that is a directory, a
/// metrics port on a listening address), warns about what this host lacks (a missing
/// directory, `fd://N` not open here: the check may run in CI), and creates nothing.
#[test]
fn check_config_refuses_what_no_start_could_use_warns_of_what_is_missing_here() {
    let tmp = TempDir::new("check-places");
    let dir = tmp.file("");
    let missing = tmp.file("missing/x");
    let refused: [(&[&str], &str); 4] = [
        (&["--pid-file", &dir], "--pid-file"),
        (&["--access-log-file", &dir], "--access-log-file"),
        (
            &["--port", "18011", "--metrics-port", "18011"],
            "--metrics-port",
        ),
        (
            &["--bind", "0.0.0.0:18011", "--metrics-port", "18011"],
            "--metrics-port",
        ),
    ];
    for (args, flag) in refused {
        let out = check_config(args);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(flag), "{args:?}: {}", out.stderr);
    }
    let warned: [(&[&str], &str); 5] = [
        (&["--pid-file", &missing], "--pid-file"),
        (&["--access-log-file", &missing], "--access-log-file"),
        (&["--error-log-file", &missing], "--error-log-file"),
        (&["--uds", &missing], "the Unix socket"),
        (&["--bind", "fd://99"], "fd://99: not open here"),
    ];
    for (args, says) in warned {
        let out = check_config(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("warning") && out.stderr.contains(says),
            "{args:?}: {}",
            out.stderr
        );
    }
    // Another address on the metrics port is fine.
    let out = run_to_exit(
        &[
            "hello:app",
            "--check-config",
            "--bind",
            "10.0.0.5:18011",
            "--metrics-port",
            "18011",
        ],
        &[],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let (pid, log, sock) = (tmp.file("m0.pid"), tmp.file("a.log"), tmp.file("m0.sock"));
    let out = run_to_exit(
        &[
            "hello:app",
            "--check-config",
            "--pid-file",
            &pid,
            "--access-log-file",
            &log,
            "--uds",
            &sock,
        ],
        &[],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    for p in [&pid, &log, &sock] {
        assert!(
            !std::path::Path::new(p).exists(),
            "--check-config created {p}"
        );
    }
}

#[test]
fn docs_configuration_md_is_what_the_binary_generates() {
    let out = run_to_exit(&["--print-flags-markdown"], &[], EXIT_TIMEOUT);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    let file = std::fs::read_to_string(path).expect("docs/configuration.md");
    assert!(
        file == out.stdout,
        "docs/configuration.md is stale: regenerate it with \
         `target/debug/m0serve --print-flags-markdown > docs/configuration.md`"
    );
}

#[test]
fn an_app_that_cannot_boot_is_said_first_and_no_signal_is_invented() {
    let out = run_to_exit(
        &["broken_import:app", "--port", "0", "--app-dir", &apps()],
        &[],
        EXIT_TIMEOUT,
    );
    assert_clean_failure(&out, "module raising at import");
    // After the traceback and the worker's error, the master's first word is the failure;
    // nobody sent a signal, so none is reported.
    assert!(!out.stderr.contains("received signal"), "{}", out.stderr);
    let master_lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("[ERROR]") && !l.contains("cannot import module"))
        .collect();
    assert_eq!(
        master_lines.len(),
        2,
        "the failure, then the stop:\n{}",
        out.stderr
    );
    assert!(
        master_lines[0].contains("failed to boot")
            && master_lines[0].contains("the application cannot start"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .trim_end()
            .ends_with("stopped: the application cannot start"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_missing_attribute_suggests_the_likely_one_once() {
    for (app, want) in [
        ("hello:ap", "did you mean hello:app?"),
        ("hello:application", "did you mean hello:app?"),
        ("pep3333:factroy()", "did you mean pep3333:factory()?"),
    ] {
        let out = run_to_exit(
            &[app, "--check-config", "--app-dir", &apps()],
            &[],
            EXIT_TIMEOUT,
        );
        assert_eq!(out.status.code(), Some(1), "{app}: {}", out.stderr);
        assert!(out.stderr.contains(want), "{app}: {}", out.stderr);
        // Said once: no traceback repeating the same line.
        assert_eq!(
            out.stderr.matches("has no attribute").count(),
            1,
            "{app}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("Traceback"), "{app}: {}", out.stderr);
    }
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // `m0serve --print-config | head -1`: the reader is gone before the first line.
    for args in [
        vec!["hello:app", "--print-config"],
        vec!["--print-flags-markdown"],
        vec!["hello:app", "--check-config", "--app-dir", &apps()],
        vec!["--version"],
        vec!["--help"],
    ] {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both descriptors were just created and are owned here once.
        let (read, write) = unsafe {
            use std::os::fd::FromRawFd;
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        drop(read);
        let out = std::process::Command::new(bin())
            .args(&args)
            .current_dir(apps())
            .stdout(std::process::Stdio::from(write))
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains(PANIC_MARKER), "{args:?}: {stderr}");
        assert!(stderr.trim().is_empty(), "{args:?}: {stderr}");
    }
}

#[test]
fn an_app_that_calls_sys_exit_at_import_fails_the_check_and_the_start() {
    // SystemExit must not be obeyed by the server while it reports the error.
    let out = run_to_exit(
        &[
            "exits_at_import:app",
            "--check-config",
            "--app-dir",
            &apps(),
        ],
        &[],
        EXIT_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("the module called sys.exit(0) while it was imported"),
        "{}",
        out.stderr
    );
    let out = run_to_exit(
        &["exits_at_import:app", "--port", "0", "--app-dir", &apps()],
        &[],
        EXIT_TIMEOUT,
    );
    assert_clean_failure(&out, "sys.exit at import");
    assert!(out.stderr.contains("called sys.exit(0)"), "{}", out.stderr);
}
