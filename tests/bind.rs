//! `--bind` (repeatable: HOST:PORT, [V6]:PORT, unix:PATH, fd://N) and `--uds-permissions`.

mod common;

use common::*;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

#[test]
fn several_binds_are_all_served() {
    let tmp = TempDir::new("bind-several");
    let sock = tmp.file("m0.sock");
    let (p1, p2) = (free_port(), free_port());
    let s = Server::builder("regress:app")
        .without_port_flag()
        .args(&[
            "--bind",
            &format!("127.0.0.1:{p1}"),
            "--bind",
            &format!("127.0.0.1:{p2}"),
            "--bind",
            &format!("unix:{sock}"),
            "--uds-permissions",
            "600",
        ])
        .start();
    for p in [p1, p2] {
        let mut c = Conn::connect(format!("127.0.0.1:{p}").parse().unwrap());
        c.set_io_timeout(Duration::from_secs(5));
        c.send(&get("/hello"));
        assert_eq!(c.read_response().body_text(), "hello", "port {p}");
    }
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "--uds-permissions 600 gave {mode:o}");
    let mut u = UnixStream::connect(&sock).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    u.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    u.read_to_end(&mut out).unwrap();
    assert!(out.ends_with(b"hello"), "{}", show(&out));
    for needle in [
        format!("127.0.0.1:{p1}"),
        format!("127.0.0.1:{p2}"),
        format!("unix:{sock}"),
    ] {
        assert!(
            s.log_text().contains(&format!(
                "listening on {}",
                if needle.starts_with("unix") {
                    needle.clone()
                } else {
                    format!("http://{needle}")
                }
            )),
            "{needle} not announced:\n{}",
            s.log_text()
        );
    }
}

#[test]
fn a_socket_passed_as_a_descriptor_is_served() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let fd = l.as_raw_fd();
    // SAFETY: clears close-on-exec on a descriptor this test owns, so the server inherits it.
    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    let s = Server::builder("regress:app")
        .without_port_flag()
        .args(&["--bind", &format!("fd://{fd}")])
        .start();
    drop(l);
    assert_eq!(s.port(), port);
    assert_served(&s, Duration::from_secs(5), "on the passed socket");
}

#[test]
fn bad_binds_are_refused_naming_the_flag() {
    for bad in [
        "nowhere.invalid",
        "unix:",
        "fd://x",
        "1.2.3.4:99999",
        "::1:80",
    ] {
        let out = run_to_exit(&["hello:app", "--bind", bad], &[], Duration::from_secs(5));
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", out.stderr);
        assert!(out.stderr.contains("--bind"), "{bad}: {}", out.stderr);
    }
    let out = run_to_exit(
        &["hello:app", "--port", "0", "--uds-permissions", "999"],
        &[],
        Duration::from_secs(5),
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--uds-permissions"), "{}", out.stderr);
}

/// An empty address (an environment variable set to nothing, a trailing comma) is refused
/// at start; it is never taken to mean every interface.
#[test]
fn empty_addresses_are_refused_not_bound_on_every_interface() {
    // (arguments after the app, environment, the flag the error names)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 8] = [
        (&["--uds", " "], &[], "--uds"),
        (&["--bind", "unix: "], &[], "--bind"),
        (&["--bind", ""], &[], "--bind"),
        (&["--bind", " "], &[], "--bind"),
        (&[], &[("M0SERVE_BIND", "")], "--bind"),
        (&[], &[("M0SERVE_BIND", "127.0.0.1:0,")], "--bind"),
        (&["--host", ""], &[], "--host"),
        (&["--port", "0"], &[("M0SERVE_HOST", " ")], "--host"),
    ];
    for (args, env, flag) in cases {
        let argv: Vec<&str> = ["hello:app"].iter().chain(args).copied().collect();
        let out = run_to_exit(&argv, env, Duration::from_secs(5));
        let what = format!("{args:?} {env:?}");
        assert_eq!(out.status.code(), Some(2), "{what}: {}", out.stderr);
        assert!(
            out.stderr.contains(flag) && out.stderr.contains("empty"),
            "{what}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("listening"), "{what}: {}", out.stderr);
    }
}

#[test]
fn server_name_and_port_are_those_of_the_listener_that_accepted() {
    let (p1, p2) = (free_port(), free_port());
    let s = Server::builder("echo:app")
        .without_port_flag()
        .args(&[
            "--bind",
            &format!("127.0.0.1:{p1}"),
            "--bind",
            &format!("127.0.0.2:{p2}"),
        ])
        .start();
    for (ip, p) in [("127.0.0.2", p2), ("127.0.0.1", p1), ("127.0.0.2", p2)] {
        let mut c = Conn::connect(format!("{ip}:{p}").parse().unwrap());
        c.send(b"GET / HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n");
        let e = c.read_response().echo();
        assert_eq!(e.cgi["SERVER_NAME"], ip, "on {ip}:{p}");
        assert_eq!(e.cgi["SERVER_PORT"], p.to_string(), "on {ip}:{p}");
    }
    s.assert_no_panic();
}
