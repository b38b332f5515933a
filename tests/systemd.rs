//! Running under systemd and as PID 1: socket activation through the real
//! `systemd-socket-activate`, the notify protocol on a datagram socket of the test's own,
//! `--pid-file`, and a master that is PID 1 of a PID namespace (`unshare`), as in a
//! container: it reaps orphans and stops gracefully on SIGTERM.

mod common;

use common::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

const PROMPT: Duration = Duration::from_secs(10);

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn serves_on_the_socket_systemd_passes() {
    if !require(
        have("systemd-socket-activate"),
        "systemd-socket-activate (apt-get install systemd)",
    ) {
        return;
    }
    let port = free_port();
    let tmp = TempDir::new("socket-activation");
    let log = tmp.file("log");
    let mut child = Command::new("systemd-socket-activate")
        .args([
            "-l",
            &format!("127.0.0.1:{port}"),
            bin(),
            "regress:app",
            "--workers",
            "2",
        ])
        .arg("--app-dir")
        .arg(apps_dir())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("systemd-socket-activate runs");
    // systemd-socket-activate binds at once and execs m0serve on the first connection.
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let connected = wait_until(PROMPT, || std::net::TcpStream::connect(addr).is_ok());
    assert!(connected, "nothing listens on {addr}");
    let mut c = Conn::connect(addr);
    c.set_io_timeout(PROMPT);
    c.send(&get("/hello"));
    let r = c.read_response();
    assert_eq!(r.body_text(), "hello", "{}", r.status_line());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("master starting 2 worker(s)"), "{text}");
    assert!(!text.contains("cannot bind"), "{text}");
    // SAFETY: kill(2) on the child this test started (m0serve, exec'd in its place).
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let done = wait_until(PROMPT, || {
        child.try_wait().map(|s| s.is_some()).unwrap_or(true)
    });
    if !done {
        let _ = child.kill();
    }
    assert!(done, "m0serve did not stop:\n{}", read_or_empty(&log));
    assert_eq!(
        child.wait().unwrap().code(),
        Some(0),
        "{}",
        read_or_empty(&log)
    );
}

/// Receives notifications until one contains `want`; all of them joined, for messages.
fn expect_notification(sock: &UnixDatagram, want: &str, seen: &mut Vec<String>) {
    let mut buf = [0u8; 4096];
    sock.set_read_timeout(Some(PROMPT)).unwrap();
    loop {
        match sock.recv(&mut buf) {
            Ok(n) => {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let hit = msg.lines().any(|l| l == want || l.starts_with(want));
                seen.push(msg);
                if hit {
                    return;
                }
            }
            Err(e) => panic!("no {want:?} notification ({e}); got {seen:?}"),
        }
    }
}

#[test]
fn notifies_ready_reloading_and_stopping() {
    let tmp = TempDir::new("notify");
    let path = tmp.file("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    let mut s = Server::builder("regress:app")
        .args(&["--workers", "2"])
        .env("NOTIFY_SOCKET", &path)
        .start();
    let mut seen = Vec::new();
    expect_notification(&sock, "READY=1", &mut seen);
    let first = seen.last().unwrap().clone();
    assert!(first.contains(&format!("MAINPID={}", s.pid())), "{first}");
    assert!(first.contains("STATUS=serving regress:app"), "{first}");
    s.signal(libc::SIGHUP);
    expect_notification(&sock, "RELOADING=1", &mut seen);
    assert!(seen.last().unwrap().contains("MONOTONIC_USEC="), "{seen:?}");
    expect_notification(&sock, "READY=1", &mut seen);
    s.stop();
    expect_notification(&sock, "STOPPING=1", &mut seen);
}

#[test]
fn pid_file_holds_the_master_pid_until_exit() {
    let tmp = TempDir::new("pid-file");
    let pid_file = tmp.file("m0serve.pid");
    let mut s = Server::start("hello:app", &["--pid-file", &pid_file]);
    let text = std::fs::read_to_string(&pid_file).expect("the pid file exists");
    assert_eq!(text.trim(), s.pid().to_string());
    s.stop();
    assert!(
        !std::path::Path::new(&pid_file).exists(),
        "the pid file outlived the server"
    );
}

/// The pid file is not taken over from a running server, nor written over a file that
/// holds something else; a stale one is replaced; at exit it is removed only while it still
/// names this server.
#[test]
fn pid_file_is_not_taken_from_a_running_server_and_removed_only_while_ours() {
    let tmp = TempDir::new("pid-file-shared");
    let pid_file = tmp.file("m0serve.pid");
    let sock = tmp.file("m0.sock");
    let port = free_port();
    let mut first = Server::builder("hello:app")
        .without_port_flag()
        .args(&[
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--bind",
            &format!("unix:{sock}"),
            "--pid-file",
            &pid_file,
        ])
        .start();
    let first_pid = first.pid().to_string();

    // The second is refused before it binds: the first's Unix socket stays its own.
    let second = run_to_exit(
        &["hello:app", "--uds", &sock, "--pid-file", &pid_file],
        &[],
        Duration::from_secs(10),
    );
    assert_ne!(second.status.code(), Some(0), "{}", second.stderr);
    assert!(
        second.stderr.contains("--pid-file") && second.stderr.contains("running"),
        "{}",
        second.stderr
    );
    let text = std::fs::read_to_string(&pid_file).expect("the first server's pid file");
    assert_eq!(
        text.trim(),
        first_pid,
        "the second server took the file over"
    );
    let r = first.request(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200, "the first server still serves");
    let mut u = std::os::unix::net::UnixStream::connect(&sock).expect("the first's socket");
    u.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    u.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // Someone else's pid written there meanwhile stays when this server exits.
    std::fs::write(&pid_file, "4194304\n").unwrap();
    first.stop();
    let text = std::fs::read_to_string(&pid_file).expect("a pid file not ours is left");
    assert_eq!(text.trim(), "4194304");

    // A stale pid (no such process: above the kernel's pid_max) is replaced.
    let mut s = Server::start("hello:app", &["--pid-file", &pid_file]);
    let text = std::fs::read_to_string(&pid_file).unwrap();
    assert_eq!(text.trim(), s.pid().to_string());
    s.stop();
    assert!(!std::path::Path::new(&pid_file).exists());

    // A file that holds something else is not written over.
    let other = tmp.file("notes.txt");
    std::fs::write(&other, "keep me\n").unwrap();
    let out = run_to_exit(
        &["hello:app", "--port", "0", "--pid-file", &other],
        &[],
        Duration::from_secs(10),
    );
    assert_ne!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("--pid-file"), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "keep me\n");
}

/// Zombie processes whose parent is `pid`.
fn zombies_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        // pid (comm) state ppid ...: the fields after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.first() == Some(&"Z") && f.get(1).and_then(|x| x.parse().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

#[test]
fn as_pid_1_it_reaps_orphans_and_stops_gracefully_on_sigterm() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !require(
        have("unshare") && root,
        "unshare(1) and root for a PID namespace",
    ) {
        return;
    }
    // Configured through M0SERVE_* variables, as a container would be.
    let s = Server::builder("regress:app")
        .wrapped(&["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"])
        .env("M0SERVE_WORKERS", "2")
        .env("M0SERVE_ACCESS_LOG", "1")
        .start();
    // The master is unshare's child (PID 1 inside the namespace).
    let master = s.wait_for_workers(1, PROMPT)[0];
    let workers = wait_until(PROMPT, || {
        child_pids(master)
            .into_iter()
            .filter(|&p| !is_preloader(p))
            .count()
            == 2
    });
    assert!(workers, "M0SERVE_WORKERS=2 did not give two workers");
    let status = std::fs::read_to_string(format!("/proc/{master}/status")).unwrap();
    let nspid = status
        .lines()
        .find(|l| l.starts_with("NSpid:"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or("?");
    assert_eq!(
        nspid, "1",
        "the master is not PID 1 of its namespace:\n{status}"
    );
    for _ in 0..5 {
        assert_eq!(s.get("/orphan").body_text(), "orphaned");
    }
    // Each orphaned `sleep 0.2` exits and is reparented to PID 1: the master must reap it.
    std::thread::sleep(Duration::from_millis(1500));
    let left = zombies_of(master);
    assert!(left.is_empty(), "zombies left under PID 1: {left:?}");
    // SAFETY: kill(2) on the master this test started.
    unsafe { libc::kill(master as i32, libc::SIGTERM) };
    let mut s = s;
    assert_eq!(
        exit_code(&mut s, PROMPT, "SIGTERM to PID 1"),
        0,
        "{}",
        s.log_text()
    );
    assert!(
        s.log_text().contains("stopping 2 worker(s) gracefully")
            && s.log_text().contains("\"GET /orphan HTTP/1.1\" 200"),
        "{}",
        s.log_text()
    );
}

#[test]
fn bad_backlog_is_refused_naming_the_flag() {
    let out = run_to_exit(&["hello:app", "--port", "0", "--backlog", "0"], &[], PROMPT);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--backlog"), "{}", out.stderr);
}

/// Notifications that arrive within `window`.
fn collect_for(sock: &UnixDatagram, window: Duration) -> Vec<String> {
    let mut out = Vec::new();
    let end = std::time::Instant::now() + window;
    let mut buf = [0u8; 4096];
    while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
        if left.is_zero() {
            break;
        }
        sock.set_read_timeout(Some(left)).unwrap();
        match sock.recv(&mut buf) {
            Ok(n) => out.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => break,
        }
    }
    out
}

#[test]
fn feeds_the_watchdog_only_while_every_handler_makes_progress() {
    let tmp = TempDir::new("watchdog");
    let path = tmp.file("notify.sock");
    let mark = tmp.file("mark");
    let sock = UnixDatagram::bind(&path).unwrap();
    let s = Server::builder("regress:app")
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "400000")
        .start();
    let mut seen = Vec::new();
    expect_notification(&sock, "READY=1", &mut seen);
    // Idle: WATCHDOG=1 every 0.2 s.
    let idle = collect_for(&sock, Duration::from_millis(1200));
    let fed = idle.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    assert!(fed >= 3, "idle, only {fed} WATCHDOG=1 in 1.2 s: {idle:?}");
    // A handler stuck in one request for 2.8 s: the watchdog goes unfed.
    let mut c = s.connect();
    c.set_io_timeout(PROMPT);
    c.send(&get(&format!("/slow?secs=2.8&mark={mark}")));
    if let Err(m) = wait_for_file_containing(&mark, "started", PROMPT) {
        panic!("the slow request never started: {m:?}");
    }
    // The first second covers the handler's grace (four heartbeats) and the master's
    // (one watchdog interval); what was sent then is read and set aside.
    let _ = collect_for(&sock, Duration::from_millis(1000));
    let stuck = collect_for(&sock, Duration::from_millis(800));
    assert!(
        stuck.iter().all(|m| !m.contains("WATCHDOG=1")),
        "the watchdog was fed while a handler was stuck: {stuck:?}"
    );
    assert!(
        s.log_text().contains("not feeding the systemd watchdog"),
        "{}",
        s.log_text()
    );
    assert_eq!(c.read_response().body_text(), "slow done");
    // Progress again: fed again.
    let after = collect_for(&sock, Duration::from_millis(1200));
    assert!(
        after.iter().any(|m| m.contains("WATCHDOG=1")),
        "never fed again: {after:?}"
    );
}
