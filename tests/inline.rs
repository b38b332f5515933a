//! Inline mode (`--blocking-threads 0`): the app runs on the loop thread. The rest of the
//! HTTP suites also run in this mode (scripts/test.sh sets `M0S_TEST_BLOCKING_THREADS=0`);
//! these are the cases only inline mode has: a streamed body suspended between items while
//! the loop writes, its client leaving while it is suspended, and the GIL let go while the
//! loop sleeps. The app is tests/apps/regress.py.

mod common;

use common::*;
use std::time::Duration;

const PROMPT: Duration = Duration::from_secs(4);

fn inline(args: &[&str]) -> Server {
    let mut all = vec!["--blocking-threads", "0"];
    all.extend_from_slice(args);
    let s = Server::start("regress:app", &all);
    assert!(
        s.log_text().contains("inline on the loop thread"),
        "the start line does not name inline mode:\n{}",
        s.log_text()
    );
    s
}

#[test]
fn a_stream_longer_than_the_chunk_credit_arrives_whole_and_in_order() {
    // 5000 chunks: the body is suspended and resumed hundreds of times.
    let s = inline(&[]);
    let r = s.get("/ticks?n=5000");
    assert_eq!(r.status, 200, "{}", r.status_line());
    let want: String = (0..5000).map(|i| format!("s{i}\n")).collect();
    assert!(
        r.body_text() == want,
        "the streamed body is not s0..s4999 in order"
    );
    assert_served(&s, PROMPT, "after the long stream");
}

#[test]
fn a_stream_its_client_does_not_read_is_suspended_then_closed_when_the_client_leaves() {
    let tmp = TempDir::new("inline-endless");
    let mark = tmp.file("mark");
    let s = inline(&[]);
    let mut c = s.connect();
    c.send(&get(&format!("/endless?mark={mark}")));
    // Take a little, then stop reading: the socket buffers fill, the credit is spent and
    // the generator must wait (suspended) rather than run on into memory.
    read_until_count(&mut c, b"e100\n", 1, PROMPT);
    let (rss_before, rss_after) = rss_kib_over(
        s.pid(),
        Duration::from_millis(300),
        Duration::from_millis(700),
    );
    assert!(
        rss_after < rss_before + 8 * 1024,
        "memory grew from {rss_before} KiB to {rss_after} KiB while the client did not read"
    );
    assert!(
        read_or_empty(&mark).is_empty(),
        "the generator was closed while its client was still connected"
    );
    reset(c);
    if let Err(m) = wait_for_file_containing(&mark, "closed", PROMPT) {
        panic!("the suspended generator was not closed after its client left; marks: {m:?}");
    }
    assert_served(&s, PROMPT, "after the suspended stream was dropped");
}

#[test]
fn other_connections_are_read_while_a_stream_is_being_written() {
    // One connection takes an endless stream as fast as it can; a second connection's
    // request is answered once that stream ends (one response at a time, as with one
    // handler thread) and the loop keeps accepting meanwhile.
    let tmp = TempDir::new("inline-two");
    let mark = tmp.file("mark");
    let s = inline(&[]);
    let mut a = s.connect();
    a.send(&get(&format!("/endless?mark={mark}")));
    read_until_count(&mut a, b"e1000\n", 1, PROMPT);
    let mut b = s.connect();
    b.set_io_timeout(PROMPT);
    b.send(&get("/hello"));
    std::thread::sleep(Duration::from_millis(100));
    drop(a);
    let r = b.read_response();
    assert_eq!(r.body_text(), "hello", "{}", r.status_line());
    if let Err(m) = wait_for_file_containing(&mark, "closed", PROMPT) {
        panic!("the endless generator was not closed after its client left; marks: {m:?}");
    }
}

#[test]
fn threads_the_app_starts_run_while_the_loop_is_idle() {
    let tmp = TempDir::new("inline-gil");
    let mark = tmp.file("mark");
    let s = inline(&[]);
    let r = s.get(&format!("/bg-thread?after=0.2&mark={mark}"));
    assert_eq!(r.body_text(), "started", "{}", r.status_line());
    // No more requests: the loop sleeps in epoll_wait, and must not hold the GIL there.
    if let Err(m) = wait_for_file_containing(&mark, "thread ran", PROMPT) {
        panic!("the app's thread never ran while the server was idle; marks: {m:?}");
    }
}

#[test]
fn stats_name_the_inline_app_beside_the_loop() {
    let mut s = inline(&["--stats"]);
    for _ in 0..3 {
        assert_eq!(s.get("/hello").body_text(), "hello");
    }
    s.stop();
    let log = s.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("stats m0s-loop (inline app)"))
        .unwrap_or_else(|| panic!("no stats line for the inline app:\n{log}"));
    assert!(line.contains("requests 3"), "{line}");
}

#[test]
fn large_items_written_without_copy_are_released_inline() {
    // The same check as the handler thread's (tests/regressions.rs), on the loop thread,
    // which drops the references with the GIL held.
    let s = inline(&[]);
    let mut c = s.connect();
    let before = {
        for _ in 0..8 {
            c.send(&get("/big-list?size=1048576"));
            assert_eq!(c.read_response().body.len(), 1 << 20);
        }
        rss_kib(s.pid())
    };
    for _ in 0..12 {
        c.send(&get("/big-list?size=1048576").repeat(16));
        for r in c.read_responses(16) {
            assert_eq!(r.body.len(), 1 << 20, "{}", r.status_line());
        }
    }
    let after = rss_kib(s.pid());
    assert!(
        after < before + 96 * 1024,
        "RSS grew from {before} KiB to {after} KiB over 192 responses of 1 MiB"
    );
}

#[test]
fn each_part_of_a_slow_stream_is_written_as_it_is_produced_and_a_stop_closes_it() {
    // An event stream (a part, then a sleep): inline, the loop writes each part before the
    // app produces the next, and a graceful stop ends it, calling close().
    let tmp = TempDir::new("inline-sse");
    let mark = tmp.file("mark");
    let mut s = inline(&["--graceful-timeout", "1"]);
    let mut c = s.connect();
    let t = std::time::Instant::now();
    c.send(&get(&format!("/sse?every=0.3&mark={mark}")));
    assert!(c.wait_readable(PROMPT), "no byte of the stream");
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "the first event came {:?} after the request",
        t.elapsed()
    );
    s.signal(libc::SIGTERM);
    let code = exit_code(&mut s, PROMPT * 2, "a stop during an endless stream");
    assert_eq!(code, 0, "{}", s.log_text());
    wait_for_file_containing(&mark, "closed", PROMPT)
        .unwrap_or_else(|m| panic!("close() was not called: {m:?}\n{}", s.log_text()));
}

/// The loop's `epoll_wait` count in the `nth` (from 1) "stats m0s-loop:" report of `s`,
/// asking for that report with SIGUSR2.
fn epoll_waits_at_report(s: &Server, nth: usize) -> u64 {
    s.signal(libc::SIGUSR2);
    let deadline = std::time::Instant::now() + PROMPT;
    loop {
        let log = s.stderr_text();
        if let Some(line) = log
            .lines()
            .filter(|l| l.contains("stats m0s-loop:"))
            .nth(nth - 1)
        {
            let rest = &line[line.find("epoll_wait ").expect(line) + "epoll_wait ".len()..];
            return rest.split(' ').next().unwrap().parse().expect(line);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no report {nth} after SIGUSR2:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_loop_sleeps_through_a_stream_waiting_for_its_client() {
    // Inline, every response message reaches the loop on its own thread, so nothing can
    // wait in a ring unseen: while a stream waits for its client to read, the loop sleeps
    // until the client reads or a timeout is due, not in bounded naps.
    let s = inline(&["--stats"]);
    let mut c = s.connect();
    // 64 MiB in 64 KiB items: the socket's buffers fill at once, then the credit is spent
    // and the stream is set aside.
    c.send(&get("/chunks?n=1024&size=65536"));
    read_until_count(&mut c, b"aaaa", 1, PROMPT);
    std::thread::sleep(Duration::from_millis(300));
    let before = epoll_waits_at_report(&s, 1);
    std::thread::sleep(Duration::from_millis(1500));
    let after = epoll_waits_at_report(&s, 2);
    // The heartbeat and the two reports wake it a few times (4 here); naps of 20 ms made
    // 154 calls.
    assert!(
        after - before <= 12,
        "the loop called epoll_wait {} times in 1.5 s while its one stream waited",
        after - before
    );
    reset(c);
    assert_served(
        &s,
        PROMPT,
        "after the stream waiting for its client was dropped",
    );
}

#[test]
fn a_thread_writing_to_a_stream_its_client_does_not_read_waits_for_credit() {
    // A thread the app started calls write() over and over while the body iterable yields
    // (tests/apps/pep3333.py /thread-and-gen). When the client stops reading, the iterable
    // is set aside and the loop sleeps; the thread must wait for credit as on a handler
    // thread, not queue its writes in memory (which grew by about 700 MiB a second).
    let s = Server::start("pep3333:app", &["--blocking-threads", "0"]);
    let mut c = s.connect();
    c.send(&get("/thread-and-gen?n=100000000"));
    read_until_count(&mut c, b"T", 100, PROMPT);
    let (before, after) = rss_kib_over(
        s.pid(),
        Duration::from_millis(300),
        Duration::from_millis(1000),
    );
    assert!(
        after < before + 16 * 1024,
        "memory grew from {before} KiB to {after} KiB while the client did not read"
    );
    // Reading again, the thread's writes and the iterable's items both go on.
    read_until_count(&mut c, b"T", 20_000, PROMPT);
    read_until_count(&mut c, b"G", 20_000, PROMPT);
    reset(c);
    let r = s.get("/list");
    assert_eq!(
        r.status,
        200,
        "after the client of the written stream left: {}",
        r.status_line()
    );
}

/// Issue 40: a response finished inline goes out before the next request of the same pass
/// runs. A request holds the loop; meanwhile a quick one and then a slow one arrive, and
/// are taken in one pass: the quick one's answer must not wait for the slow one.
#[test]
fn each_response_is_written_before_the_next_request_of_its_pass_runs() {
    let tmp = TempDir::new("inline-pass");
    let (first, slow) = (tmp.file("first"), tmp.file("slow"));
    let s = inline(&[]);
    let mut a = s.connect();
    a.send(&get(&format!("/slow?secs=0.5&mark={first}")));
    wait_for_file_containing(&first, "started", PROMPT).expect("the first request never ran");
    let mut quick = s.connect();
    quick.send(&get("/hello"));
    std::thread::sleep(Duration::from_millis(50));
    let mut c = s.connect();
    c.send(&get(&format!("/slow?secs=3&mark={slow}")));
    assert_eq!(a.read_response().body_text(), "slow done");
    quick.set_io_timeout(Duration::from_secs(10));
    assert_eq!(quick.read_response().body_text(), "hello");
    let marks = std::fs::read_to_string(&slow).unwrap_or_default();
    assert!(
        !marks.contains("done"),
        "the quick answer came only after the slow request of its pass had finished"
    );
    assert_eq!(c.read_response().body_text(), "slow done");
}

/// Issue 40: inline, `write()` cannot wait for its client (the thread that would write the
/// bytes is the one running the app), and it kept everything: three clients that read
/// none of 100 MiB took the worker from 18 to 328 MB. It refuses past 16 MiB unwritten
/// (an `OSError`, ENOBUFS), and the worker stays small; a client that reads gets a body
/// under the limit whole.
#[test]
fn write_to_a_client_that_does_not_read_is_refused_past_its_limit() {
    let tmp = TempDir::new("inline-write");
    let s = inline(&[]);
    let worker = s.wait_for_workers(1, PROMPT)[0];
    let whole = |s: &Server| {
        let r = s.get("/write-big?mib=10");
        assert_eq!(r.status, 200, "{}", r.status_line());
        assert_eq!(r.body.len(), 10 << 20);
    };
    whole(&s);
    let before = rss_kib(worker);
    let mut idle = Vec::new();
    for i in 0..3 {
        let mark = tmp.file(&format!("mark{i}"));
        let mut c = Conn::connect_small(s.addr(), 4096);
        c.send(&get(&format!("/write-big?mib=100&mark={mark}")));
        wait_for_file_containing(&mark, "refused 105", Duration::from_secs(20))
            .expect("write() went on past its limit");
        idle.push(c);
    }
    let grown = rss_kib(worker).saturating_sub(before);
    assert!(grown < 64 * 1024, "the worker grew by {grown} KiB");
    // Their clients gone, what they held is free for the next.
    drop(idle);
    assert!(
        wait_until(PROMPT, || s.get("/write-big?mib=10").body.len() == 10 << 20),
        "a body under the limit was refused after the slow clients left"
    );
}
