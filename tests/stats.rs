//! `--stats`: each thread's pipeline counters, on SIGUSR2 and at exit.

mod common;

use std::time::Duration;

use common::Server;

fn count_in(log: &str, line_start: &str, field: &str) -> Option<u64> {
    let line = log.lines().rev().find(|l| l.contains(line_start))?;
    let rest = &line[line.find(field)? + field.len()..];
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[test]
fn stats_report_counts_requests_per_thread_on_sigusr2_and_at_exit() {
    let mut s = Server::start("hello:app", &["--stats", "--blocking-threads", "2"]);
    for _ in 0..5 {
        assert_eq!(s.get("/").status, 200);
    }
    s.signal(libc::SIGUSR2);
    assert!(
        s.wait_for_log("stats m0s-loop:", Duration::from_secs(10)),
        "no report on SIGUSR2:\n{}",
        s.stderr_text()
    );
    assert!(s.wait_for_log("stats m0s-handler-1:", Duration::from_secs(10)));
    let log = s.stderr_text();
    assert_eq!(
        count_in(&log, "stats m0s-loop:", "requests"),
        Some(5),
        "{log}"
    );
    let per_handler: u64 = ["stats m0s-handler-0:", "stats m0s-handler-1:"]
        .iter()
        .map(|h| count_in(&log, h, "requests").unwrap_or(0))
        .sum();
    assert_eq!(per_handler, 5, "{log}");
    assert!(log.contains("epoll_wait"), "{log}");

    // The server keeps serving after a report, and reports again at exit.
    assert_eq!(s.get("/").status, 200);
    let status = s.stop();
    assert!(status.success());
    let log = s.stderr_text();
    assert_eq!(
        count_in(&log, "stats m0s-loop:", "requests"),
        Some(6),
        "{log}"
    );
    assert!(log.contains("% of wall time waiting"), "{log}");
}

#[test]
fn without_stats_nothing_is_reported_at_exit() {
    let mut s = Server::start("hello:app", &[]);
    assert_eq!(s.get("/").status, 200);
    assert!(s.stop().success());
    assert!(
        !s.stderr_text().contains("stats m0s-loop"),
        "{}",
        s.stderr_text()
    );
}
