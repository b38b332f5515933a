//! `--log FILE` against the real binary: one line per request answered, each with when it
//! was due on CLOCK_MONOTONIC (the clock `perf record -k CLOCK_MONOTONIC` stamps its events
//! with) and its latency, so that a request can be set beside what the machine ran then.

use std::process::Command;
use std::time::Duration;

#[path = "../src/test_server.rs"]
mod test_server;

fn monotonic_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// A number after `"key": ` in the JSON text.
fn number(json: &str, key: &str) -> f64 {
    let at = json.find(&format!("\"{key}\": ")).unwrap() + key.len() + 4;
    let end = json[at..].find([',', '}']).unwrap();
    json[at..at + end].parse().unwrap()
}

/// 1000 requests a second over 2 connections for 1 s; the server holds its 500th request
/// 100 ms. The log has every request answered, due 1 ms apart within the run, and the held
/// ones where they were due: the slowest waited the whole hold and was due about when it
/// began, half a second into the run.
#[test]
fn the_log_has_each_request_answered_with_its_due_time_and_latency() {
    let (addr, _) = test_server::stalling_server(500, Duration::from_millis(100));
    let dir = std::env::temp_dir().join(format!("m0load-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("log.txt");
    let before = monotonic_ns();
    let out = Command::new(env!("CARGO_BIN_EXE_m0load"))
        .args(["-c", "2", "-d", "1", "--rate", "1000", "--log"])
        .arg(&path)
        .arg(format!("http://{addr}/"))
        .output()
        .unwrap();
    let after = monotonic_ns();
    assert!(out.status.success(), "{out:?}");
    let json = String::from_utf8(out.stdout).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let mut rows: Vec<(i128, u64)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!((f.len(), f[0]), (3, "0"), "{l}");
            (f[1].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect();
    assert_eq!(rows.len() as f64, number(&json, "requests"), "{json}");
    assert_eq!(rows.len(), 1000, "{json}");
    rows.sort();
    let (first, last) = (rows[0].0, rows[rows.len() - 1].0);
    assert!(
        before < first && last < after,
        "{before} {first} {last} {after}"
    );
    // Request k is due at k ms: 999 ms from the first to the last.
    assert!(
        (last - first - 999_000_000).abs() < 1_000,
        "{}",
        last - first
    );
    let &(held_due, held_us) = rows.iter().max_by_key(|r| r.1).unwrap();
    assert!(held_us >= 95_000, "{held_us}");
    assert!((number(&json, "latency_max_ms") * 1000.0 - held_us as f64).abs() < 1.0);
    let into_run = (held_due - first) as f64 / 1e6;
    assert!((480.0..=520.0).contains(&into_run), "{into_run} ms");
}

/// `--warmup 0.5` at 1000 requests a second: the server holds the warm-up's 100th request
/// 100 ms. The run's own second is reported (1000 requests, none held, every one due after
/// the warm-up's requests were answered, on the warm-up's connections), and the warm-up's
/// 500 apart.
#[test]
fn the_warmup_is_left_out_of_the_figures_and_the_log() {
    let (addr, served, accepted) = test_server::counting_server(100, Duration::from_millis(100));
    let dir = std::env::temp_dir().join(format!("m0load-warmup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("log.txt");
    let before = monotonic_ns();
    let out = Command::new(env!("CARGO_BIN_EXE_m0load"))
        .args([
            "-c", "2", "-d", "1", "--rate", "1000", "--warmup", "0.5", "--log",
        ])
        .arg(&path)
        .arg(format!("http://{addr}/"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let json = String::from_utf8(out.stdout).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(number(&json, "warmup_requests"), 500.0, "{json}");
    assert_eq!(number(&json, "requests"), 1000.0, "{json}");
    assert_eq!(
        served.load(std::sync::atomic::Ordering::Relaxed),
        1500,
        "{json}"
    );
    // On the warm-up's two connections.
    assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 2);
    // The held request and the ~100 due behind it were the warm-up's.
    assert!(number(&json, "latency_max_ms") < 50.0, "{json}");
    let mut due: Vec<i128> = text
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
        .collect();
    due.sort();
    assert_eq!(due.len(), 1000);
    // The run's clock started once the warm-up's 0.5 s were over.
    let after_warmup = (due[0] - before) / 1_000_000;
    assert!((500..900).contains(&after_warmup), "{after_warmup} ms");
}

#[test]
fn the_log_needs_the_open_loop() {
    let out = Command::new(env!("CARGO_BIN_EXE_m0load"))
        .args([
            "-c",
            "1",
            "-d",
            "1",
            "--log",
            "/dev/null",
            "http://127.0.0.1:9/",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--log needs --rate"));
}
