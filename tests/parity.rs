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
fn worker_class_sync_and_gthread_warn_and_others_are_refused() {
    for class in ["sync", "gthread"] {
        let s = Server::start("hello:app", &["-k", class]);
        assert_eq!(s.get("/").status, 200);
        assert!(
            s.stderr_text()
                .lines()
                .any(|l| l.contains("[WARN]")
                    && l.contains(&format!("--worker-class {class}: ignored"))),
            "{}",
            s.stderr_text()
        );
    }
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

#[test]
fn a_gunicorn_python_config_gets_each_setting_moved_to_its_flag() {
    let tmp = TempDir::new("gunicorn-conf");
    let conf = tmp.path.join("gunicorn.conf.py");
    std::fs::write(
        &conf,
        "import multiprocessing\n\
         bind = [\"0.0.0.0:8000\"]\n\
         workers = multiprocessing.cpu_count() * 2\n\
         threads = 4\n\
         accesslog = \"-\"\n\
         preload_app = True\n\
         def on_starting(server):\n    pass\n",
    )
    .unwrap();
    let out = run_to_exit(&["hello:app", "-c", conf.to_str().unwrap()], &[], PROMPT);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    for want in [
        "gunicorn configuration (Python)",
        "bind = [\"0.0.0.0:8000\"]  ->  --bind 0.0.0.0:8000",
        "workers = multiprocessing.cpu_count() * 2  ->  --workers",
        "threads = 4  ->  --blocking-threads 4",
        "accesslog = \"-\"  ->  --access-log-file -",
        "preload_app = True  ->  no m0serve equivalent",
    ] {
        assert!(
            out.stderr.contains(want),
            "{want:?} missing:\n{}",
            out.stderr
        );
    }
    assert!(!out.stderr.contains("on_starting"), "{}", out.stderr);
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
