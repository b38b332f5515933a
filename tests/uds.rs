//! `--uds PATH`: serving on a Unix domain socket.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn serves_on_a_unix_socket_and_removes_it_on_exit() {
    let tmp = common::TempDir::new("uds");
    let sock = tmp.file("m0.sock");
    let log = tmp.file("stderr.log");
    let mut child = Command::new(common::bin())
        .args(["hello:app", "--uds", &sock, "--app-dir"])
        .arg(common::apps_dir())
        .env_remove("M0SERVE_PORT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let listening = common::wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(&format!("listening on unix:{sock}"))
    });
    if !listening {
        let _ = child.kill();
        panic!(
            "no listening line:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    for _ in 0..2 {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.ends_with("Hello, World!"), "{text}");
    }

    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let exited = common::wait_until(Duration::from_secs(10), || {
        child.try_wait().ok().flatten().is_some()
    });
    if !exited {
        let _ = child.kill();
        panic!("no exit after SIGTERM");
    }
    assert!(child.wait().unwrap().success());
    assert!(
        !std::path::Path::new(&sock).exists(),
        "the socket file is left behind"
    );
}
