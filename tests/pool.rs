//! The handler pool (`--max-blocking-threads`, `--blocking-threads-idle-timeout`): with
//! default flags, requests that wait (on a database, a service: here `time.sleep`) are run
//! at once on threads the pool starts; requests that compute are not given threads that
//! would only wait for the GIL; threads above the floor go once idle. The app is
//! tests/apps/pool.py, which counts how many requests run at once.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Sends `n` requests for `target` at once, each on its own connection; every answer must
/// be 200.
fn burst(s: &Server, n: usize, target: &str) {
    let addr = s.addr();
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let target = target.to_string();
            std::thread::spawn(move || {
                let mut c = Conn::connect(addr);
                c.send(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
                c.read_response().status
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 200, "a request of the burst failed");
    }
}

/// The most requests the app ran at once since the last look.
fn most_at_once(s: &Server) -> usize {
    s.get("/max").body_text().parse().unwrap()
}

/// The loop's "handler threads N (S started by the pool, R retired)", from a `--stats`
/// report asked for with SIGUSR2.
fn threads(s: &Server) -> (u64, u64, u64) {
    let before = s.stderr_text().matches("stats m0s-loop:").count();
    s.signal(libc::SIGUSR2);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = s.stderr_text();
        if let Some(line) = log
            .lines()
            .filter(|l| l.contains("stats m0s-loop:"))
            .nth(before)
        {
            let rest = &line[line.find("handler threads ").expect(line) + 16..];
            let nums: Vec<u64> = rest
                .split(|c: char| !c.is_ascii_digit())
                .filter(|w| !w.is_empty())
                .take(3)
                .map(|w| w.parse().unwrap())
                .collect();
            return (nums[0], nums[1], nums[2]);
        }
        assert!(Instant::now() < deadline, "no report after SIGUSR2:\n{log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn requests_that_wait_run_at_once_on_threads_the_pool_starts() {
    let s = Server::start("pool:app", &["--stats"]);
    // 20 requests of 100 ms of waiting: on the one thread of the floor they would take
    // 2 s one after another.
    let t = Instant::now();
    burst(&s, 20, "/sleep?0.1");
    let took = t.elapsed();
    let most = most_at_once(&s);
    assert!(most >= 10, "at most {most} ran at once (in {took:?})");
    let (now, started, _) = threads(&s);
    assert!(
        started >= 9 && now == started + 1,
        "threads {now}, started {started}"
    );
    // 200 at once: the pool stops at its most (64), the rest wait their turn; none fails.
    burst(&s, 200, "/sleep?0.05");
    let (now, _, _) = threads(&s);
    assert!(
        now <= 64,
        "{now} threads, past --max-blocking-threads' default"
    );
    s.assert_no_panic();
}

#[test]
fn requests_that_compute_get_no_threads_that_would_only_wait_for_the_gil() {
    // (Without a queue-wait budget: on a host busy with other tests the burst's 320 ms of
    // CPU may take longer than the budget's slack, and a 503 would say nothing of growth.)
    let s = Server::start("pool:app", &["--stats", "--max-queue-wait", "0"]);
    // Each holds the GIL for 20 ms of its thread's CPU time: a thread more would wait.
    burst(&s, 16, "/burn?0.02");
    let most = most_at_once(&s);
    let (now, started, _) = threads(&s);
    // (One misjudged window, on a host busy with other work, may start one.)
    assert!(
        most <= 2 && started <= 1,
        "{most} ran at once, {started} threads started, {now} now"
    );
    s.assert_no_panic();
}

#[test]
fn a_fixed_pool_never_grows_and_threads_above_the_floor_go_once_idle() {
    let fixed = Server::start("pool:app", &["--stats", "--max-blocking-threads", "1"]);
    burst(&fixed, 6, "/sleep?0.05");
    assert_eq!(most_at_once(&fixed), 1);
    assert_eq!(threads(&fixed), (1, 0, 0));
    fixed.assert_no_panic();

    let s = Server::start(
        "pool:app",
        &["--stats", "--blocking-threads-idle-timeout", "0.5"],
    );
    burst(&s, 8, "/sleep?0.2");
    let (_, started, _) = threads(&s);
    assert!(started >= 1, "the pool did not grow");
    // Idle past the timeout (the sweep looks every second at most): back to the floor.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (now, _, retired) = threads(&s);
        if now == 1 && retired == started {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "threads {now}, retired {retired} of {started}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // And it grows again, in the places of those that went.
    burst(&s, 8, "/sleep?0.2");
    assert!(most_at_once(&s) >= 4);
    s.assert_no_panic();
}

#[test]
fn max_blocking_threads_is_checked_at_start() {
    for (args, want) in [
        (
            &["--blocking-threads", "4", "--max-blocking-threads", "2"][..],
            "--max-blocking-threads 2: must be between --blocking-threads (4) and 1024",
        ),
        (
            &["--blocking-threads", "0", "--max-blocking-threads", "8"][..],
            "--max-blocking-threads: there are no handler threads with --blocking-threads 0",
        ),
    ] {
        let mut all = vec!["pool:app"];
        all.extend_from_slice(args);
        let out = run_to_exit(&all, &[], Duration::from_secs(20));
        let err = &out.stderr;
        assert!(
            !out.status.success() && err.contains(want),
            "{args:?}: {err}"
        );
    }
}
