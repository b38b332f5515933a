//! `--preload`: one process imports the app and forks the workers, which share its memory;
//! the master still runs no Python. Each worker is the master's child, gets Python's
//! after-fork handling (the app's `os.register_at_fork` hooks, `random` reseeded), and a
//! SIGHUP imports new code with no request lost. An app whose import starts threads is
//! imported by each worker instead. The app is tests/apps/preload_probe.py.
//!
//! (scripts/test.sh also runs the workers, reload, systemd, privileges and metrics suites a
//! second time with `--preload` on every server.)

mod common;

use common::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const PROMPT: Duration = Duration::from_secs(15);

/// The probe's answer over a fresh connection.
fn probe(s: &Server) -> Json {
    let r = s.get("/");
    assert_eq!(r.status, 200, "{}\n{}", r.status_line(), s.log_text());
    Json::parse(&r.body_text()).expect("the probe's JSON")
}

/// The pids in the import log: one line per import of the app.
fn imports(log: &Path) -> Vec<u32> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// The probe's answers until `n` workers have answered (fresh connections spread them),
/// keyed by pid.
fn answers_from(s: &Server, n: usize) -> std::collections::BTreeMap<u64, Json> {
    let mut by_pid = std::collections::BTreeMap::new();
    let ok = wait_until(PROMPT, || {
        let conns: Vec<Conn> = (0..8)
            .map(|_| {
                let mut c = s.connect();
                c.send(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                c
            })
            .collect();
        for mut c in conns {
            let j = Json::parse(&c.read_response().body_text()).unwrap();
            by_pid.insert(j["pid"].as_u64().unwrap(), j);
        }
        by_pid.len() >= n
    });
    assert!(ok, "only {} of {n} workers answered", by_pid.len());
    by_pid
}

fn ppid_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn the_app_is_imported_once_and_every_worker_is_a_fork_of_it_and_the_masters_child() {
    let tmp = TempDir::new("preload-once");
    let log = tmp.file("imports");
    let s = Server::builder("preload_probe:app")
        .args(&["--workers", "3", "--preload"])
        .env("PRELOAD_PROBE_LOG", &log)
        .start();
    let workers = s.wait_for_workers(3, PROMPT);
    let answers = answers_from(&s, 3);
    let preloader = s.preloader_pids();
    assert_eq!(preloader.len(), 1, "one preloader: {preloader:?}");
    let preloader = preloader[0];
    // One import, by the preloader, which the master started.
    assert_eq!(
        imports(Path::new(&log)),
        vec![preloader],
        "{}",
        s.log_text()
    );
    assert_eq!(ppid_of(preloader), s.pid());
    let pids: BTreeSet<u64> = workers.iter().map(|&p| p as u64).collect();
    assert_eq!(answers.keys().copied().collect::<BTreeSet<_>>(), pids);
    let mut randoms = BTreeSet::new();
    for (pid, a) in &answers {
        // Forked from the preloader's import, yet the master's child.
        assert_eq!(a["imported_by"], preloader, "{a}");
        assert_eq!(a["ppid"], s.pid(), "{a}");
        // gc.freeze() ran after the import.
        assert!(a["frozen"].as_u64().unwrap() > 0, "{a}");
        // Python's own fork ran in the worker: the app's hook saw the worker's pid.
        assert_eq!(a["forked_into"], serde_json::json!([pid]), "{a}");
        randoms.insert(a["random"].to_string());
    }
    assert_eq!(
        randoms.len(),
        3,
        "random is reseeded in each worker: {answers:?}"
    );
    let comm = std::fs::read_to_string(format!("/proc/{preloader}/comm")).unwrap();
    assert_eq!(comm.trim_end(), "m0s-preloader");
    for w in &workers {
        let comm = std::fs::read_to_string(format!("/proc/{w}/comm")).unwrap();
        assert_eq!(comm.trim_end(), "m0serve", "worker {w}");
    }
    assert!(!s.log_text().contains("[WARN]"), "{}", s.log_text());
}

#[test]
fn sighup_imports_new_code_in_a_new_preloader_and_loses_no_request() {
    let tmp = TempDir::new("preload-hup");
    let dir = tmp.path.clone();
    let source = std::fs::read_to_string(apps_dir().join("preload_probe.py")).unwrap();
    std::fs::write(dir.join("live_probe.py"), &source).unwrap();
    let log = tmp.file("imports");
    let s = Arc::new(
        Server::builder("live_probe:app")
            .apps_in(&dir)
            .args(&["--workers", "2", "--preload"])
            .env("PRELOAD_PROBE_LOG", &log)
            .start(),
    );
    s.wait_for_workers(2, PROMPT);
    let first = s.preloader_pids();
    assert_eq!(s.get("/version").body_text(), "v1");
    // Keep-alive clients ask for the version, back to back, across the reload.
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..6)
        .map(|_| {
            let (addr, stop) = (s.addr(), stop.clone());
            std::thread::spawn(move || {
                let (mut seen, mut failed) = (BTreeSet::new(), Vec::new());
                let mut conn: Option<Conn> = None;
                let mut sent = 0;
                while !stop.load(Ordering::Relaxed) {
                    let c = conn.get_or_insert_with(|| Conn::connect(addr));
                    sent += 1;
                    let answer = c
                        .try_send(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
                        .map_err(|e| format!("send: {e}"))
                        .and_then(|()| c.try_read_response().map_err(|e| format!("{e:?}")));
                    match answer {
                        Ok(r) if r.status == 200 => {
                            seen.insert(r.body_text());
                            if r.connection_has("close") {
                                conn = None;
                            }
                        }
                        Ok(r) => {
                            failed.push(r.status_line());
                            conn = None;
                        }
                        Err(e) => {
                            failed.push(e);
                            conn = None;
                        }
                    }
                }
                (sent, seen, failed)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(
        dir.join("live_probe.py"),
        source.replace("VERSION = \"v1\"", "VERSION = \"v2\""),
    )
    .unwrap();
    s.signal(libc::SIGHUP);
    let done = wait_until(PROMPT, || s.log_text().contains("reload done"));
    assert!(done, "the reload did not finish\n{}", s.log_text());
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (mut sent, mut seen, mut failed) = (0, BTreeSet::new(), Vec::new());
    for c in clients {
        let (n, v, f) = c.join().unwrap();
        sent += n;
        seen.extend(v);
        failed.extend(f);
    }
    assert!(
        failed.is_empty(),
        "{} of {sent} failed: {failed:?}",
        failed.len()
    );
    assert!(sent > 200, "only {sent} requests under load");
    assert_eq!(seen, BTreeSet::from(["v1".to_string(), "v2".to_string()]));
    // Every worker now serves the new code, imported once more, by a new preloader; the
    // old one is gone.
    for _ in 0..10 {
        assert_eq!(s.get("/version").body_text(), "v2");
    }
    let now = s.preloader_pids();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, first);
    assert_eq!(imports(Path::new(&log)), vec![first[0], now[0]]);
}

#[test]
fn max_requests_and_a_killed_worker_are_replaced_by_forks_of_the_same_import() {
    let tmp = TempDir::new("preload-recycle");
    let log = tmp.file("imports");
    let s = Server::builder("preload_probe:app")
        .args(&["--workers", "2", "--preload", "--max-requests", "5"])
        .env("PRELOAD_PROBE_LOG", &log)
        .start();
    let first = s.wait_for_workers(2, PROMPT);
    let mut pids = BTreeSet::new();
    for _ in 0..40 {
        pids.insert(probe(&s)["pid"].as_u64().unwrap());
    }
    assert!(pids.len() > 2, "recycled workers answered: {pids:?}");
    let now = s.wait_for_workers(2, PROMPT);
    assert!(
        s.kill_worker_until_replaced(now[0], 2, PROMPT),
        "{}",
        s.log_text()
    );
    assert_eq!(probe(&s)["ppid"], s.pid());
    assert_eq!(imports(Path::new(&log)).len(), 1, "{}", s.log_text());
    assert_ne!(s.worker_pids(), first);
}

#[test]
fn a_killed_preloader_is_replaced_while_the_workers_serve_on() {
    let tmp = TempDir::new("preload-killed");
    let log = tmp.file("imports");
    let s = Server::builder("preload_probe:app")
        .args(&["--workers", "2", "--preload"])
        .env("PRELOAD_PROBE_LOG", &log)
        .start();
    let workers = s.wait_for_workers(2, PROMPT);
    let old = s.preloader_pids()[0];
    // SAFETY: kill(2) on the server's preloader, a process of this test's server.
    unsafe { libc::kill(old as libc::pid_t, libc::SIGKILL) };
    for _ in 0..20 {
        assert_eq!(probe(&s)["imported_by"], old);
    }
    let replaced = wait_until(PROMPT, || {
        s.preloader_pids().first().is_some_and(|&p| p != old) && imports(Path::new(&log)).len() == 2
    });
    assert!(replaced, "no new preloader\n{}", s.log_text());
    assert!(
        s.log_text().contains(&format!("the preloader {old} died")),
        "{}",
        s.log_text()
    );
    assert_eq!(s.worker_pids(), workers, "the workers serve on");
    // A worker started now is a fork of the new import.
    assert!(
        s.kill_worker_until_replaced(workers[0], 2, PROMPT),
        "{}",
        s.log_text()
    );
    let new = s.preloader_pids()[0];
    let answers = answers_from(&s, 2);
    assert!(
        answers.values().any(|a| a["imported_by"] == new),
        "{answers:?}"
    );
}

#[test]
fn an_import_that_starts_a_thread_is_done_by_each_worker_with_a_warning() {
    let s = Server::start("thread_at_import:app", &["--workers", "2", "--preload"]);
    s.wait_for_workers(2, PROMPT);
    assert_eq!(s.get("/").body_text(), "ok");
    let log = s.log_text();
    let warned: Vec<&str> = log.lines().filter(|l| l.contains("[WARN]")).collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(
        warned[0].contains("importing thread_at_import:app started 1 thread(s)")
            && warned[0].contains("--preload is off until the next reload"),
        "{log}"
    );
    // The preloader left; each worker imported the app itself.
    assert!(s.preloader_pids().is_empty(), "{log}");
    assert_eq!(
        log.matches("[INFO] [main] importing thread_at_import:app")
            .count(),
        3,
        "{log}"
    );
}

#[test]
fn an_app_that_cannot_be_imported_stops_the_master_with_its_error() {
    let out = run_to_exit(
        &["broken_import:app", "--preload", "--workers", "2"],
        &[],
        PROMPT,
    );
    assert_ne!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("Traceback"), "{}", out.stderr);
    assert!(
        out.stderr.contains("the preloader") && out.stderr.contains("failed to boot"),
        "{}",
        out.stderr
    );
    // The traceback is printed once: no worker tried.
    assert_eq!(out.stderr.matches("Traceback").count(), 1, "{}", out.stderr);
}

#[test]
fn the_preloader_and_the_workers_exit_when_the_master_is_killed() {
    let s = Server::start("preload_probe:app", &["--workers", "2", "--preload"]);
    let mut all = s.wait_for_workers(2, PROMPT);
    all.extend(s.preloader_pids());
    assert_eq!(all.len(), 3);
    s.signal(libc::SIGKILL);
    let gone = wait_until(PROMPT, || {
        all.iter().all(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .map_or(true, |st| st.contains(") Z "))
        })
    });
    assert!(gone, "still running: {all:?}");
}

#[test]
fn gunicorns_preload_app_and_preload_flag_turn_it_on() {
    let tmp = TempDir::new("preload-gunicorn");
    let conf = tmp.path.join("gunicorn.conf.py");
    std::fs::write(&conf, "preload_app = True\nworkers = 2\n").unwrap();
    let out = run_to_exit(
        &["hello:app", "-c", conf.to_str().unwrap(), "--print-config"],
        &[],
        PROMPT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.contains("--preload") && l.contains("true")),
        "{}",
        out.stdout
    );
    let s = Server::builder("preload_probe:app")
        .env("GUNICORN_CMD_ARGS", "--preload --workers 2")
        .start();
    s.wait_for_workers(2, PROMPT);
    assert_eq!(s.preloader_pids().len(), 1, "{}", s.log_text());
}

#[test]
fn a_worker_forked_after_a_log_rotation_writes_to_the_new_file() {
    let tmp = TempDir::new("preload-rotate");
    let path = tmp.path.join("error.log");
    let s = Server::builder("preload_probe:app")
        .args(&["--workers", "2", "--preload"])
        .args(&["--error-log-file", path.to_str().unwrap()])
        .log_file(&path)
        .start();
    let workers = s.wait_for_workers(2, PROMPT);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let rotated = tmp.path.join("error.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    s.signal(libc::SIGUSR1);
    assert!(
        wait_until(PROMPT, || read(&path).matches("log files reopened").count()
            == 2),
        "{}",
        read(&path)
    );
    // The replacement is forked by the preloader, which holds the file as it was at its
    // start.
    assert!(s.kill_worker_until_replaced(workers[0], 2, PROMPT));
    let new = *s
        .worker_pids()
        .iter()
        .find(|p| !workers.contains(p))
        .unwrap();
    let serving = format!("[{new}] [INFO] [main] worker: m0serve");
    assert!(
        wait_until(PROMPT, || read(&path).contains(&serving)),
        "the new file:\n{}\nthe rotated one:\n{}",
        read(&path),
        read(&rotated)
    );
    assert!(!read(&rotated).contains(&serving), "{}", read(&rotated));
}
