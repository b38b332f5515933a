//! `--stall-probe` against the real binary: the whole client stopped for 200 ms
//! (SIGSTOP, as a hypervisor stops a guest) is a host stall. The probe notes it, the
//! requests due in it are left out of the figures outside stalls, and not out of the rest.

use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "../src/test_server.rs"]
mod test_server;

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
    let (addr, _) = test_server::stalling_server(usize::MAX, Duration::ZERO);
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
    // ms, so the run's p99 is over 150 ms. All of them are left out, and with them those due
    // from 2 ms before it to 402 ms after it: 20 % in all. The bounds leave room for a busy
    // host's own hiccups (a quiet one gives a p99 outside of well under 1 ms); with the
    // stopped requests left in, the p99 outside would be the run's.
    assert!(number(&json, "{", "latency_p99_ms") > 100.0, "{json}");
    let excluded = number(&json, "\"outside_stalls\"", "excluded");
    assert!((0.15..0.5).contains(&excluded), "{json}");
    assert!(
        number(&json, "\"outside_stalls\"", "p99_ms") < 100.0,
        "{json}"
    );
}
