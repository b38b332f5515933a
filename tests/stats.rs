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
    // Without --idle-poll the loop sleeps at once.
    assert_eq!(
        count_in(&log, "stats m0s-loop:", "idle polls"),
        Some(0),
        "{log}"
    );
}

/// CPU time (user and system) of process `pid` so far, in clock ticks (/proc/PID/stat).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis: state is the 3rd of the line, utime
    // and stime the 14th and 15th.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// `--idle-poll` with a 10 ms window and `--write-timeout 0.1`, whose sweep wakes the loop
/// every 25 ms: 40 keep-alive requests 0.3 ms apart, then a second with nothing, then the
/// loop's counters. Returns the windows that found work, those that ran out, and the
/// worker's CPU ticks in the idle second (a loop that went on polling would use about all
/// of it, 100 ticks; one that polled after each of its timer's wakes, 40).
fn idle_poll_run(blocking_threads: &str) -> (u64, u64, u64) {
    let mut s = Server::start(
        "hello:app",
        &[
            "--stats",
            "--blocking-threads",
            blocking_threads,
            "--idle-poll",
            "10000",
            "--write-timeout",
            "0.1",
        ],
    );
    let worker = s.wait_for_workers(1, Duration::from_secs(10))[0];
    let mut c = s.connect();
    for _ in 0..40 {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.read_response().status, 200);
        // Well inside the window.
        std::thread::sleep(Duration::from_micros(300));
    }
    // Nothing comes for a second, on an open connection.
    let before = cpu_ticks(worker);
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(worker) - before;

    s.signal(libc::SIGUSR2);
    assert!(
        s.wait_for_log("stats m0s-loop:", Duration::from_secs(10)),
        "{}",
        s.stderr_text()
    );
    let log = s.stderr_text();
    let found = count_in(&log, "stats m0s-loop:", "idle polls").unwrap();
    let ran_out = count_in(&log, "stats m0s-loop:", "found work and").unwrap();
    drop(c);
    assert!(s.stop().success());
    (found, ran_out, used)
}

/// Inline, a request that comes within the window after the last is found by the loop's
/// polling, not by a sleep; and once nothing comes, the polling stops when the window has
/// passed, so that an idle worker does not keep a CPU busy, also when its timers wake it.
#[test]
fn idle_poll_finds_the_next_request_and_stops_when_none_comes() {
    let (found, ran_out, used) = idle_poll_run("0");
    assert!(used <= 20, "an idle worker used {used} ticks of CPU in 1 s");
    // Most of the 39 requests after the first were found polling (a test thread held up
    // past 10 ms on a busy machine may miss a few), and the idle second's window ran out.
    assert!(found >= 20, "{found} requests found by polling");
    assert!(ran_out >= 1, "no window ran out");
}

/// Threaded, the loop polls only with no request at its handler, which one request at a
/// time seldom leaves it (the handler writes the response and the loop sleeps until the
/// next request): what must hold is that an idle worker's timers start no window.
#[test]
fn idle_poll_threaded_stops_when_none_comes() {
    let (_, ran_out, used) = idle_poll_run("1");
    assert!(used <= 20, "an idle worker used {used} ticks of CPU in 1 s");
    assert!(ran_out >= 1, "no window ran out");
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

#[test]
fn a_file_wrapper_over_a_regular_file_is_sent_with_sendfile() {
    // 100 MiB, so that a copy through user space could not hide in the noise.
    const SIZE: usize = 100 * 1024 * 1024;
    let tmp = common::TempDir::new("sendfile");
    let path = tmp.file("big.bin");
    let pattern: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &pattern).unwrap();
    let mark = tmp.file("mark");

    let mut s = Server::start("pep3333:app", &["--stats"]);
    let mut c = s.connect();
    c.set_io_timeout(Duration::from_secs(60));
    c.send(&common::get(&format!(
        "/file-wrapper?path={path}&mark={mark}"
    )));
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Length"), Some(SIZE.to_string().as_str()));
    assert_eq!(r.body.len(), SIZE);
    assert!(r.body == pattern, "the body differs from the file");
    // The app's file object was closed with the response (PEP 3333).
    assert!(common::wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&mark)
            .unwrap_or_default()
            .contains("file closed")
    }));
    // The keep-alive connection goes on.
    c.send(&common::get("/list"));
    assert_eq!(c.read_response().body_text(), "abcdefg");
    assert!(s.stop().success());
    assert_eq!(
        count_in(&s.stderr_text(), "stats m0s-loop:", "sendfile"),
        Some(SIZE as u64),
        "the body did not go out through sendfile(2):\n{}",
        s.stderr_text()
    );
}

#[test]
fn static_response_mode_answers_from_the_loop_without_calling_the_app() {
    let tmp = common::TempDir::new("static");
    let calls = tmp.file("calls");
    let s = Server::builder("echo:app")
        .arg("--static-response")
        .env("M0TEST_CALL_LOG", &calls)
        .start();
    let mut c = s.connect();
    for _ in 0..3 {
        c.send(&common::get("/anything"));
        let r = c.read_response();
        assert_eq!(r.status, 200);
        assert_eq!(r.body_text(), "Hello, World!");
        assert!(r.header("Date").is_some());
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap_or_default(),
        "",
        "the app was called"
    );
}
