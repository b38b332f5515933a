//! `--stall-probe` against the real binary: the whole client stopped for 200 ms
//! (SIGSTOP, as a hypervisor stops a guest) is a host stall. The probe notes it, the
//! requests due in it are left out of the figures outside stalls, and not out of the rest.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A server answering each request head at once with a 2-byte body.
fn server() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if s.write_all(ok).is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

/// A number after `"key": ` in the JSON text, searched from `from`.
fn number(json: &str, from: &str, key: &str) -> f64 {
    let rest = &json[json
        .find(from)
        .unwrap_or_else(|| panic!("{from} in {json}"))..];
    let at = rest.find(&format!("\"{key}\": ")).unwrap() + key.len() + 4;
    let end = rest[at..].find([',', '}']).unwrap();
    rest[at..at + end].parse().unwrap()
}

#[test]
fn a_stopped_client_is_a_host_stall_and_its_requests_are_left_out() {
    let addr = server();
    let child = Command::new(env!("CARGO_BIN_EXE_m0load"))
        .args(["-c", "4", "-d", "3", "--rate", "2000", "--stall-probe"])
        .arg(format!("http://{addr}/"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    // Its clock starts once its connections are up, well within this.
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill() takes a pid and a signal number; the child is ours and not yet reaped.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let json = String::from_utf8(out.stdout).unwrap();
    // The stop was seen whole, as one stall.
    let longest = number(&json, "\"host_stalls\"", "max_ms");
    assert!((190.0..400.0).contains(&longest), "{json}");
    // About 400 requests fell due during it, 7 % of the run's 6000; each waited up to 200
    // ms. All of them are left out, and with them those due from 2 ms before it to 402 ms
    // after it: 20 % in all.
    assert!(number(&json, "{", "latency_p99_ms") > 20.0, "{json}");
    let excluded = number(&json, "\"outside_stalls\"", "excluded");
    assert!((0.15..0.3).contains(&excluded), "{json}");
    assert!(
        number(&json, "\"outside_stalls\"", "p99_ms") < 20.0,
        "{json}"
    );
}
