//! What a gunicorn or Granian user types on day one: gunicorn's short flags and
//! `--worker-class`, its `--bind` forms (names that resolve to several addresses
//! included), a gunicorn Python config given to `-c`, `--chdir`, `--pythonpath`, `--env`,
//! `--env-file`, and a URL prefix (`--root-path`, or SCRIPT_NAME in the environment) that
//! Flask's `url_for` and Django's `reverse` follow. The probe app is tests/apps/probe.py.

mod common;
mod venvs;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use venvs::*;

const PROMPT: Duration = Duration::from_secs(10);

/// `--print-config` of `args` as flag -> value.
fn printed(args: &[&str]) -> std::collections::BTreeMap<String, String> {
    let out = run_to_exit(args, &[], PROMPT);
    assert!(out.status.success(), "{args:?}: {}", out.stderr);
    out.stdout
        .lines()
        .filter_map(|l| {
            let (k, rest) = l.split_once(" = ")?;
            let v = rest.strip_prefix('"')?;
            Some((k.trim().to_string(), v[..v.rfind('"')?].to_string()))
        })
        .collect()
}

#[test]
fn gunicorns_short_flags_mean_what_they_mean_there() {
    let tmp = TempDir::new("short-flags");
    let conf = tmp.path.join("m0serve.conf");
    std::fs::write(&conf, "--max-requests 7\n").unwrap();
    let c = printed(&[
        "hello:app",
        "-w",
        "3",
        "-b",
        "127.0.0.1:9123",
        "-t",
        "40",
        "-c",
        conf.to_str().unwrap(),
        "--print-config",
    ]);
    assert_eq!(c["--workers"], "3");
    assert_eq!(c["--bind"], "127.0.0.1:9123");
    assert_eq!(c["--timeout"], "40");
    assert_eq!(c["--max-requests"], "7");
}

#[test]
fn worker_class_sync_warns_gthread_is_taken_and_others_are_refused() {
    let s = Server::start("hello:app", &["-k", "sync"]);
    assert_eq!(s.get("/").status, 200);
    assert!(
        s.stderr_text()
            .lines()
            .any(|l| l.contains("[WARN]") && l.contains("--worker-class sync: ignored")),
        "{}",
        s.stderr_text()
    );
    // gunicorn's threaded worker is what m0serve's workers are.
    let s = Server::start("hello:app", &["-k", "gthread"]);
    assert_eq!(s.get("/").status, 200);
    assert!(!s.stderr_text().contains("[WARN]"), "{}", s.stderr_text());
    for class in ["gevent", "uvicorn.workers.UvicornWorker"] {
        let out = run_to_exit(&["hello:app", "-k", class], &[], PROMPT);
        assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
        assert!(
            out.stderr
                .contains(&format!("--worker-class {class}: not supported")),
            "{}",
            out.stderr
        );
    }
}

/// A gunicorn configuration using every setting m0serve has a flag for, and two hooks.
fn gunicorn_conf(port: u16, tmp: &TempDir) -> String {
    format!(
        r#"import multiprocessing
bind = "127.0.0.1:{port}"
workers = min(multiprocessing.cpu_count(), 2)
threads = 4
worker_class = "gthread"
timeout = 120
graceful_timeout = 20
keepalive = 5
max_requests = 1000
max_requests_jitter = 50
backlog = 512
worker_connections = 500
limit_request_line = 4094
limit_request_fields = 100
limit_request_field_size = 8190
accesslog = "-"
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %({{path_info}}e)s'
errorlog = "-"
loglevel = "info"
pidfile = "{pid}"
chdir = "{apps}"
pythonpath = "{apps}"
raw_env = ["M0TEST_CONF=a,b", "M0TEST_TWO=2"]
forwarded_allow_ips = "127.0.0.1,::1"
umask = 0o22
reload = False
preload_app = False
daemon = False
wsgi_app = "environ_dump:app"
secure_scheme_headers = {{"X-FORWARDED-PROTO": "https"}}
helper_value = 7

def post_fork(server, worker):
    pass

def when_ready(server):
    pass
"#,
        pid = tmp.path.join(format!("{port}.pid")).display(),
        apps = apps_dir().display(),
    )
}

#[test]
fn a_gunicorn_python_config_runs_and_serves_as_under_gunicorn() {
    let Some(venv) = test_venv() else { return };
    let tmp = TempDir::new("gunicorn-conf");
    let conf = tmp.path.join("gunicorn.conf.py");
    // gunicorn, from the test virtualenv.
    let port = free_port();
    std::fs::write(&conf, gunicorn_conf(port, &tmp)).unwrap();
    let (theirs, their_line) =
        gunicorn_answers(&venv, &["-c".to_string(), conf.display().to_string()], port);
    // m0serve, the same file: the app, the address, everything from it.
    let port = free_port();
    std::fs::write(&conf, gunicorn_conf(port, &tmp)).unwrap();
    let mut s = Server::builder("")
        .without_port_flag()
        .without_app_dir_flag()
        .args(&["-c", conf.to_str().unwrap()])
        .start();
    assert_eq!(s.port(), port);
    let ours = ask_environ(s.addr());
    let pid_file = tmp.path.join(format!("{port}.pid"));
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        s.pid().to_string()
    );
    // The hooks, the setting m0serve lacks and the one it reads a little differently are
    // named, one warning each; nothing else is said.
    let text = s.stderr_text();
    let warned: Vec<&str> = text.lines().filter(|l| l.contains("[WARN]")).collect();
    assert_eq!(warned.len(), 4, "{text}");
    for want in [
        "server hook post_fork() is not run",
        "server hook when_ready() is not run",
        "secure_scheme_headers has no m0serve equivalent",
        "--limit-request-field_size (gunicorn's) is read as --max-header-size",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    assert_eq!(s.stop().code(), Some(0));
    assert_eq!(access_line(&s.stdout_text()), their_line);
    let (Some(theirs), Some(ours)) = (theirs.as_object(), ours.as_object()) else {
        panic!("not objects")
    };
    assert_eq!(
        theirs.get("os.M0TEST_CONF").and_then(|v| v.as_str()),
        Some("a,b")
    );
    for (k, v) in theirs {
        if ["SERVER_PORT", "SERVER_SOFTWARE", "REMOTE_PORT", "RAW_URI"].contains(&k.as_str()) {
            continue;
        }
        assert_eq!(ours.get(k), Some(v), "{k}");
    }
    // What the file sets, as m0serve's flags (the command line's equivalent).
    let p = printed(&["-c", conf.to_str().unwrap(), "--print-config"]);
    for (k, v) in [
        ("--workers", "2"),
        ("--blocking-threads", "4"),
        ("--max-blocking-threads", "4"),
        ("--timeout", "120"),
        ("--graceful-timeout", "20"),
        ("--keep-alive-timeout", "5"),
        ("--max-requests", "1000"),
        ("--max-requests-jitter", "50"),
        ("--backlog", "512"),
        ("--max-connections", "500"),
        ("--max-request-line", "4094"),
        ("--max-headers", "100"),
        ("--max-header-size", "8190"),
        ("--log-level", "info"),
        ("--umask", "0o22"),
        ("--forwarded-allow-ips", "127.0.0.1,::1"),
    ] {
        assert_eq!(p.get(k).map(String::as_str), Some(v), "{k}: {p:?}");
    }
}

#[test]
fn a_gunicorn_config_that_cannot_run_or_asks_for_what_m0serve_lacks_is_refused() {
    let tmp = TempDir::new("gunicorn-conf-bad");
    let conf = tmp.path.join("gunicorn.conf.py");
    for (text, says) in [
        ("workers = undefined_name\n", "NameError"),
        ("daemon = True\n", "--daemon (gunicorn's) is not supported"),
        (
            "bind = {\"a\": 1}\n",
            "bind: m0serve cannot read its value (a dict)",
        ),
    ] {
        std::fs::write(&conf, text).unwrap();
        let out = run_to_exit(
            &["hello:app", "-c", conf.to_str().unwrap(), "--check-config"],
            &[],
            PROMPT,
        );
        assert_eq!(out.status.code(), Some(2), "{text}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{text}: {}", out.stderr);
    }
}

fn serves_on(addr: &str) {
    let mut c = Conn::connect(addr.parse().unwrap());
    c.send(&get("/"));
    assert_eq!(c.read_response().status, 200, "on {addr}");
}

#[test]
fn bind_takes_gunicorns_forms() {
    let port = |s: &Server| s.addr().port();
    // :PORT is every IPv4 interface.
    let p = free_port();
    let s = Server::builder("hello:app")
        .without_port_flag()
        .args(&["--bind", &format!(":{p}")])
        .start();
    assert_eq!(s.addr().to_string(), format!("0.0.0.0:{p}"));
    serves_on(&format!("127.0.0.1:{p}"));
    drop(s);
    // A name, an IPv4 address, an IPv6 wildcard.
    for form in ["localhost:{p}", "0.0.0.0:{p}", "[::]:{p}"] {
        let p = free_port();
        let bind = form.replace("{p}", &p.to_string());
        let s = Server::builder("hello:app")
            .without_port_flag()
            .args(&["--bind", &bind])
            .start();
        assert_eq!(port(&s), p, "{bind}");
        serves_on(&format!("127.0.0.1:{p}"));
    }
    // --host takes a name too.
    let p = free_port();
    let s = Server::builder("hello:app")
        .without_port_flag()
        .args(&["--host", "localhost", "--port", &p.to_string()])
        .start();
    serves_on(&format!("127.0.0.1:{p}"));
    drop(s);
    let out = run_to_exit(
        &["hello:app", "--bind", "no-such-host.invalid:80"],
        &[],
        PROMPT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("cannot resolve"), "{}", out.stderr);
}

#[test]
fn a_name_that_resolves_to_several_addresses_listens_on_each() {
    // SAFETY: geteuid has no preconditions.
    let can = unsafe { libc::geteuid() } == 0
        && Command::new("unshare").arg("--version").output().is_ok();
    if !require(can, "root and unshare(1) for a private /etc/hosts") {
        return;
    }
    // A mount namespace whose /etc/hosts names m0test-multi twice.
    let tmp = TempDir::new("multi-hosts");
    let hosts = tmp.path.join("hosts");
    std::fs::write(
        &hosts,
        "127.0.0.1 localhost\n127.0.0.2 m0test-multi\n127.0.0.3 m0test-multi\n",
    )
    .unwrap();
    let p = free_port();
    let script = format!(
        "mount --bind '{}' /etc/hosts\nexec \"$@\"\n",
        hosts.display()
    );
    let s = Server::builder("hello:app")
        .without_port_flag()
        .wrapped(&["unshare", "-m", "sh", "-ec", &script, "sh"])
        .args(&["--bind", &format!("m0test-multi:{p}")])
        .start();
    let log = s.stderr_text();
    for ip in ["127.0.0.2", "127.0.0.3"] {
        assert!(
            log.contains(&format!("listening on http://{ip}:{p}")),
            "{log}"
        );
        serves_on(&format!("{ip}:{p}"));
    }
}

#[test]
fn chdir_changes_the_working_directory_before_anything_else() {
    let tmp = TempDir::new("chdir");
    let dir = tmp.path.join("site");
    std::fs::create_dir_all(dir.join("code")).unwrap();
    std::fs::copy(apps_dir().join("probe.py"), dir.join("code/probe.py")).unwrap();
    std::fs::write(dir.join("data.txt"), "read relative to --chdir").unwrap();
    // A relative --app-dir is taken from the new directory; the workers start there too.
    let s = Server::builder("probe:app")
        .without_app_dir_flag()
        .args(&[
            "--chdir",
            dir.to_str().unwrap(),
            "--app-dir",
            "code",
            "--workers",
            "2",
        ])
        .start();
    for _ in 0..4 {
        let j = json(&s.get("/"));
        assert_eq!(
            std::fs::canonicalize(j["cwd"].as_str().unwrap()).unwrap(),
            std::fs::canonicalize(&dir).unwrap()
        );
        assert_eq!(j["data"].as_str(), Some("read relative to --chdir"));
    }
    let out = run_to_exit(
        &["probe:app", "--chdir", "/nonexistent-m0test"],
        &[],
        PROMPT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("--chdir /nonexistent-m0test"),
        "{}",
        out.stderr
    );
}

#[test]
fn pythonpath_adds_directories_after_the_app_dir_in_order() {
    let tmp = TempDir::new("pythonpath");
    let (a, b) = (tmp.path.join("a"), tmp.path.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    // `shared` is in both: the first directory given wins. The app is in neither's parent.
    std::fs::write(a.join("shared.py"), "WHO = 'a'\n").unwrap();
    std::fs::write(b.join("shared.py"), "WHO = 'b'\n").unwrap();
    std::fs::write(b.join("only_b.py"), "WHO = 'only b'\n").unwrap();
    std::fs::write(
        b.join("ppapp.py"),
        "import shared, only_b\n\
         def app(environ, start_response):\n\
         \x20   start_response('200 OK', [('Content-Type', 'text/plain')])\n\
         \x20   return [(shared.WHO + '|' + only_b.WHO).encode()]\n",
    )
    .unwrap();
    let s = Server::start(
        "ppapp:app",
        &["--pythonpath", &format!("{},{}", a.display(), b.display())],
    );
    assert_eq!(s.get("/").body_text(), "a|only b");
}

#[test]
fn env_and_env_file_set_the_apps_environment() {
    let tmp = TempDir::new("env-file");
    let file = tmp.path.join("app.env");
    std::fs::write(
        &file,
        "# comment\nM0TEST_FROM_FILE=one\nexport M0TEST_QUOTED=\"two words\"\nM0TEST_BOTH=file\n",
    )
    .unwrap();
    let s = Server::start(
        "probe:app",
        &[
            "--env-file",
            file.to_str().unwrap(),
            "--env",
            "M0TEST_FLAG=three",
            "--env",
            "M0TEST_BOTH=flag",
            "--workers",
            "2",
        ],
    );
    let j = json(&s.get("/"));
    let env = &j["env"];
    assert_eq!(env["M0TEST_FROM_FILE"].as_str(), Some("one"));
    assert_eq!(env["M0TEST_QUOTED"].as_str(), Some("two words"));
    assert_eq!(env["M0TEST_FLAG"].as_str(), Some("three"));
    assert_eq!(
        env["M0TEST_BOTH"].as_str(),
        Some("flag"),
        "--env wins over the file"
    );
    for bad in ["NOEQUALS", "1BAD=x"] {
        let out = run_to_exit(&["probe:app", "--env", bad], &[], PROMPT);
        assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
        assert!(out.stderr.contains("--env"), "{}", out.stderr);
    }
}

#[test]
fn root_path_makes_the_prefix_script_name_and_answers_404_outside_it() {
    let s = Server::start("probe:app", &["--root-path", "/prefix/"]);
    let j = json(&s.get("/prefix/items/3?x=1"));
    assert_eq!(j["script_name"].as_str(), Some("/prefix"));
    assert_eq!(j["path_info"].as_str(), Some("/items/3"));
    let j = json(&s.get("/prefix"));
    assert_eq!(
        (j["script_name"].as_str(), j["path_info"].as_str()),
        (Some("/prefix"), Some(""))
    );
    for outside in ["/", "/prefixed", "/other/prefix/x"] {
        let r = s.get(outside);
        assert_eq!(r.status, 404, "{outside}");
        assert_eq!(r.body_text(), "Not Found");
    }
    // Pipelined behind requests for the app, the 404 comes after their responses, in
    // order, and the connection goes on.
    let mut c = s.connect();
    c.send(
        b"GET /prefix/a?sleep=0.3 HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /outside HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /prefix/b HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /outside HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let rs = c.read_responses(4);
    let got: Vec<u16> = rs.iter().map(|r| r.status).collect();
    assert_eq!(got, [200, 404, 200, 404]);
    assert_eq!(json(&rs[0])["path_info"].as_str(), Some("/a"));
    assert_eq!(json(&rs[2])["path_info"].as_str(), Some("/b"));
    c.send(b"GET /prefix/c HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(json(&c.read_response())["path_info"].as_str(), Some("/c"));
    drop(s);

    // Opted in: the app gets what is outside, as it came.
    let s = Server::start(
        "probe:app",
        &["--root-path", "/prefix", "--root-path-outside", "app"],
    );
    let j = json(&s.get("/elsewhere"));
    assert_eq!(
        (j["script_name"].as_str(), j["path_info"].as_str()),
        (Some(""), Some("/elsewhere"))
    );
    let j = json(&s.get("/prefix/in"));
    assert_eq!(
        (j["script_name"].as_str(), j["path_info"].as_str()),
        (Some("/prefix"), Some("/in"))
    );
    drop(s);

    // SCRIPT_NAME in the environment, as gunicorn reads it.
    let s = Server::builder("probe:app")
        .env("SCRIPT_NAME", "/from-env")
        .start();
    let j = json(&s.get("/from-env/x"));
    assert_eq!(
        (j["script_name"].as_str(), j["path_info"].as_str()),
        (Some("/from-env"), Some("/x"))
    );
    assert_eq!(s.get("/x").status, 404);
    // Inherited, it changes what is served: the start says so.
    assert!(
        s.wait_for_log(
            "SCRIPT_NAME=/from-env in the environment",
            Duration::from_secs(5)
        ),
        "{}",
        s.stderr_text()
    );
    drop(s);

    let out = run_to_exit(&["probe:app", "--root-path", "noslash"], &[], PROMPT);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    // A bad one from the environment is named as such.
    let out = run_to_exit(
        &["probe:app", "--check-config"],
        &[("SCRIPT_NAME", "noslash")],
        PROMPT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("SCRIPT_NAME"), "{}", out.stderr);
}

fn with_test_venv(venv: &Path, app: &str, args: &[&str]) -> Server {
    Server::builder(app)
        .env("VIRTUAL_ENV", venv.to_str().unwrap())
        .args(args)
        .start()
}

#[test]
fn flask_url_for_and_django_reverse_carry_the_root_path() {
    let Some(venv) = test_venv() else { return };
    let s = with_test_venv(&venv, "flask_app:app", &["--root-path", "/shop"]);
    let j = json(&s.get("/shop/url-for/7"));
    assert_eq!(j["path"].as_str(), Some("/shop/items/7"), "{j:?}");
    assert!(
        j["external"].as_str().unwrap().ends_with("/shop/items/7"),
        "{j:?}"
    );
    assert_eq!(json(&s.get("/shop/items/7"))["double"].as_f64(), Some(14.0));
    assert_eq!(s.get("/items/7").status, 404);
    drop(s);

    let s = with_test_venv(
        &venv,
        "djangoproj.wsgi:application",
        &["--root-path", "/shop"],
    );
    let j = json(&s.get("/shop/reverse/7/"));
    assert_eq!(j["path"].as_str(), Some("/shop/items/7/"), "{j:?}");
    assert!(
        j["full"].as_str().unwrap().ends_with("/shop/items/7/"),
        "{j:?}"
    );
    assert_eq!(
        json(&s.get("/shop/items/7/"))["double"].as_f64(),
        Some(14.0)
    );
}

/// A production gunicorn command line (issue 44), `PORT` where the port goes.
const GUNICORN_LINE: &[&str] = &[
    "-w",
    "2",
    "-k",
    "gthread",
    "--threads",
    "8",
    "-b",
    "127.0.0.1:PORT",
    "--access-logfile",
    "-",
    "--error-logfile",
    "-",
    "--timeout",
    "30",
    "--graceful-timeout",
    "30",
    "--keep-alive",
    "5",
    "--max-requests",
    "1000",
    "--max-requests-jitter",
    "50",
    "--forwarded-allow-ips",
    "*",
    "environ_dump:app",
];

fn line_with_port(port: u16) -> Vec<String> {
    GUNICORN_LINE
        .iter()
        .map(|a| a.replace("PORT", &port.to_string()))
        .collect()
}

/// The request both servers get, and what they answer (the app's environ as JSON).
fn ask_environ(addr: std::net::SocketAddr) -> Json {
    let mut c = Conn::connect(addr);
    c.send(
        b"POST /a/b?x=1&y=%20 HTTP/1.1\r\nHost: example.test\r\nUser-Agent: ua/1\r\n\
          Referer: http://r/\r\nX-Forwarded-Proto: https\r\n\
          Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 3\r\n\r\nk=v",
    );
    let r = c.read_response();
    assert_eq!(r.status, 200, "{}", r.body_text());
    Json::parse(&r.body_text()).unwrap()
}

/// gunicorn from the test virtualenv, run with `args` in the apps' directory until it
/// listens on `port`: its answer to `ask_environ`, and that request's access line.
fn gunicorn_answers(venv: &Path, args: &[String], port: u16) -> (Json, String) {
    let g = Command::new(venv.join("bin/gunicorn"))
        .args(args)
        .current_dir(apps_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let up = wait_until(Duration::from_secs(20), || {
        std::net::TcpStream::connect(addr).is_ok()
    });
    assert!(up, "gunicorn did not listen on {addr}");
    let theirs = ask_environ(addr);
    // SIGTERM: gunicorn flushes its access log and exits.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(g.id() as i32, libc::SIGTERM) };
    let out = g.wait_with_output().unwrap();
    (theirs, access_line(&String::from_utf8_lossy(&out.stdout)))
}

/// The access line of the POST, its time and size (the environ's length) taken out.
fn access_line(out: &str) -> String {
    let line = out
        .lines()
        .find(|l| l.contains("POST /a/b"))
        .unwrap_or_else(|| panic!("no access line in {out:?}"));
    let (before, rest) = line.split_once(" [").unwrap();
    let (_, after) = rest.split_once("] ").unwrap();
    let mut words: Vec<&str> = after.split(' ').collect();
    // "POST /a/b?x=1&y=%20 HTTP/1.1" 200 SIZE "referer" "agent"
    words[4] = "SIZE";
    format!("{before} [TIME] {}", words.join(" "))
}

#[test]
fn the_gunicorn_production_command_line_runs_unchanged_and_answers_as_gunicorn_does() {
    let Some(venv) = test_venv() else { return };
    let port = free_port();
    let (theirs, their_line) = gunicorn_answers(&venv, &line_with_port(port), port);
    // m0serve, the same words.
    let port = free_port();
    let line = line_with_port(port);
    let args: Vec<&str> = line.iter().map(String::as_str).collect();
    let mut s = Server::builder("environ_dump:app")
        .without_port_flag()
        .args(&args[..args.len() - 1])
        .start();
    assert_eq!(s.port(), port);
    assert!(
        !s.stderr_text().contains("[WARN]"),
        "a production gunicorn line gets no warning:\n{}",
        s.stderr_text()
    );
    let ours = ask_environ(s.addr());
    assert_eq!(s.stop().code(), Some(0));
    let our_line = access_line(&s.stdout_text());
    assert_eq!(our_line, their_line);
    // The environ: every key gunicorn sets, with its value, but for what names the server
    // (its port, its software) or is gunicorn's own (RAW_URI), and the client's port.
    let (Some(theirs), Some(ours)) = (theirs.as_object(), ours.as_object()) else {
        panic!("not objects")
    };
    assert!(theirs.len() > 15, "{theirs:?}");
    for (k, v) in theirs {
        if ["SERVER_PORT", "SERVER_SOFTWARE", "REMOTE_PORT", "RAW_URI"].contains(&k.as_str()) {
            continue;
        }
        assert_eq!(ours.get(k), Some(v), "{k}");
    }
}

#[test]
fn granians_command_line_runs_unchanged() {
    let port = free_port().to_string();
    let s = Server::builder("hello:app")
        .without_port_flag()
        .args(&[
            "--interface",
            "wsgi",
            "--workers",
            "2",
            "--blocking-threads",
            "4",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
        ])
        .start();
    assert_eq!(s.port().to_string(), port);
    assert_eq!(s.get("/").status, 200);
    assert!(!s.stderr_text().contains("[WARN]"), "{}", s.stderr_text());
    // --factory calls the attribute, as `module:factory()` does.
    let f = Server::start("factory_args:make", &["--factory", "--interface=wsgi"]);
    assert_eq!(f.get("/").body_text(), "made False None");
}

#[test]
fn foreign_spellings_map_warn_or_are_refused_with_the_m0serve_way() {
    let p = printed(&[
        "hello:app",
        "--threads",
        "8",
        "--access-logfile=-",
        "--keep-alive",
        "7",
        "--pid",
        "/tmp/x.pid",
        "--working-dir",
        "/tmp",
        "--http1-header-read-timeout",
        "2500",
        "--print-config",
    ]);
    for (k, v) in [
        ("--blocking-threads", "8"),
        ("--max-blocking-threads", "8"),
        ("--access-log-file", "-"),
        ("--keep-alive-timeout", "7"),
        ("--pid-file", "/tmp/x.pid"),
        ("--chdir", "/tmp"),
        ("--header-timeout", "2.5"),
    ] {
        assert_eq!(p.get(k).map(String::as_str), Some(v), "{k}: {p:?}");
    }
    // Refused, with the way; no guess at a flag of another meaning.
    for (args, says) in [
        (&["--daemon"][..], "--daemon (gunicorn's) is not supported"),
        (&["--interface", "asgi"][..], "WSGI (PEP 3333) apps only"),
        (
            &["--static-path-route", "/assets"][..],
            "--static-map PREFIX=DIR",
        ),
        (&["--thread", "4"][..], "did you mean --threads?"),
        (&["--no-such-flag"][..], "migration.md"),
    ] {
        let mut all = vec!["hello:app"];
        all.extend(args);
        let out = run_to_exit(&all, &[], PROMPT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("--reload"), "{args:?}: {}", out.stderr);
    }
    // Where the meaning differs: served, with one warning that says how.
    let s = Server::start("hello:app", &["--limit-request-field_size", "4096"]);
    assert_eq!(s.get("/").status, 200);
    let text = s.stderr_text();
    let warned: Vec<&str> = text.lines().filter(|l| l.contains("[WARN]")).collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("whole request head"), "{warned:?}");
}

#[test]
fn gunicorn_cmd_args_is_read_under_the_command_line() {
    let port = free_port();
    let s = Server::builder("hello:app")
        .without_port_flag()
        .env(
            "GUNICORN_CMD_ARGS",
            &format!("--bind 127.0.0.1:{port} --workers 3 --access-logfile -"),
        )
        .args(&["--workers", "1"])
        .start();
    assert_eq!(s.port(), port, "--bind from GUNICORN_CMD_ARGS");
    assert_eq!(
        s.wait_for_workers(1, PROMPT).len(),
        1,
        "the command line wins"
    );
    assert_eq!(s.get("/").status, 200);
    assert!(
        s.stderr_text().contains("GUNICORN_CMD_ARGS is set"),
        "{}",
        s.stderr_text()
    );
    let out = run_to_exit(
        &["hello:app", "--check-config"],
        &[("GUNICORN_CMD_ARGS", "--daemon")],
        PROMPT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("GUNICORN_CMD_ARGS: --daemon"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_factory_takes_literal_arguments_and_a_long_timeout_moves_the_silent_one() {
    let s = Server::start(
        "factory_args:create_app(\"prod\", debug=True, n=[1, 2])",
        &["--timeout", "120"],
    );
    let r = s.get("/");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_text(), "prod True [1, 2]");
    // Not a literal: refused, naming what is allowed.
    let out = run_to_exit(
        &["factory_args:create_app(open('x'))", "--check-config"],
        &[],
        PROMPT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("the factory's arguments must be Python literals"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_gunicorn_config_runs_in_the_master_once_per_start_or_reload_and_may_print() {
    let tmp = TempDir::new("gunicorn-conf-runs");
    let runs = tmp.path.join("runs");
    let conf = tmp.path.join("gunicorn.conf.py");
    std::fs::write(
        &conf,
        format!(
            "import os, sys\n\
             with open({runs:?}, 'a') as f:\n    f.write(str(os.getpid()) + '\\n')\n\
             def post_fork(server, worker):\n    pass\n\
             print('printed by the file')\n\
             sys.stdout.write('no newline')\n\
             workers = 2\n\
             wsgi_app = 'environ_dump:app'\n",
            runs = runs.display().to_string()
        ),
    )
    .unwrap();
    let s = Server::builder("")
        .args(&["-c", conf.to_str().unwrap()])
        .start();
    s.wait_for_workers(2, PROMPT);
    let r = s.get("/");
    assert_eq!(r.status, 200);
    // The master's report is the workers', not the app's.
    assert!(
        !r.body_text().contains("M0SERVE_GUNICORN"),
        "{}",
        r.body_text()
    );
    let count = || std::fs::read_to_string(&runs).unwrap().lines().count();
    // Once, in the master: the workers read what it found.
    assert_eq!(count(), 1);
    let text = s.stderr_text();
    assert!(text.contains("printed by the file"), "{text}");
    assert!(
        text.contains("server hook post_fork() is not run"),
        "{text}"
    );
    // A reload runs it again, once.
    assert!(s.sighup_until_replaced(2, Duration::from_secs(20)));
    assert_eq!(count(), 2);
}

#[test]
fn the_config_file_gunicorn_cmd_args_and_the_command_line_each_replace_a_list() {
    let tmp = TempDir::new("layers");
    let conf = tmp.path.join("m0serve.conf");
    std::fs::write(&conf, "--bind 127.0.0.1:1\n--workers 5\n").unwrap();
    let conf = conf.to_str().unwrap();
    let env = [("GUNICORN_CMD_ARGS", "-b 127.0.0.1:9")];
    let out = run_to_exit(&["hello:app", "-c", conf, "--print-config"], &env, PROMPT);
    assert!(
        out.stdout
            .contains("--bind = \"127.0.0.1:9\"  # GUNICORN_CMD_ARGS"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("--workers = \"5\"  # file"),
        "{}",
        out.stdout
    );
    // -c in GUNICORN_CMD_ARGS names the file, as in gunicorn.
    let both = format!("-c {conf}");
    let out = run_to_exit(
        &["hello:app", "--print-config"],
        &[("GUNICORN_CMD_ARGS", &both)],
        PROMPT,
    );
    assert!(
        out.stdout.contains("--workers = \"5\"  # file"),
        "{}",
        out.stdout
    );
    // What is wrong there is said to be there.
    let out = run_to_exit(
        &["hello:app", "--check-config"],
        &[("GUNICORN_CMD_ARGS", "--bogus")],
        PROMPT,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stderr.contains("in GUNICORN_CMD_ARGS"),
        "{}",
        out.stderr
    );
    // A stray word is not called an option.
    let out = run_to_exit(&["hello:app", "extra"], &[], PROMPT);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stderr.contains("'extra'"), "{}", out.stderr);
    assert!(!out.stderr.contains("unknown option"), "{}", out.stderr);
}
