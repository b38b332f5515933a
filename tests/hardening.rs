//! Limits and timeouts, each through its flag, against the real binary over raw sockets:
//! the right status, only the offender cut, everyone else served. The app is
//! tests/apps/regress.py (and echo.py for bodies).

mod common;

use common::*;
use std::time::{Duration, Instant};

const PROMPT: Duration = Duration::from_secs(5);

fn get_with(target: &str, extra_headers: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: x\r\n{extra_headers}\r\n").into_bytes()
}

// ---------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------

#[test]
fn max_request_line_answers_414_past_the_flag() {
    let s = Server::start("regress:app", &["--max-request-line", "100"]);
    let ok = format!("/hello?{}", "a".repeat(60));
    assert_eq!(
        s.request(&get_with(&ok, "Connection: close\r\n")).status,
        200
    );
    let long = format!("/hello?{}", "a".repeat(120));
    let mut c = s.connect();
    c.send(&get_with(&long, ""));
    let r = c.read_response();
    assert_eq!(r.status, 414, "{}", r.status_line());
    assert!(r.connection_has("close"));
    c.expect_closed(PROMPT);
}

#[test]
fn max_header_size_and_max_headers_answer_431() {
    let s = Server::start(
        "regress:app",
        &["--max-header-size", "2048", "--max-headers", "5"],
    );
    let big = format!("X-Big: {}\r\n", "b".repeat(2100));
    let r = s.request(&get_with("/hello", &big));
    assert_eq!(r.status, 431, "{}", r.status_line());
    let many: String = (0..6).map(|i| format!("X-H{i}: v\r\n")).collect();
    let r = s.request(&get_with("/hello", &many));
    assert_eq!(r.status, 431, "{}", r.status_line());
    let few: String = (0..3).map(|i| format!("X-H{i}: v\r\n")).collect();
    let r = s.request(&get_with("/hello", &format!("{few}Connection: close\r\n")));
    assert_eq!(r.status, 200, "{}", r.status_line());
}

#[test]
fn max_body_size_refuses_a_declared_length_before_100_continue() {
    let s = Server::start("echo:app", &["--max-body-size", "1K"]);
    let mut c = s.connect();
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\nExpect: 100-continue\r\n\r\n");
    let r = c.read_response();
    assert_eq!(
        r.status,
        413,
        "{} (a 100 Continue must not come first)",
        r.status_line()
    );
    assert!(r.connection_has("close"));
    c.expect_closed(PROMPT);
    // At the limit it is served.
    let r = s.request(&post("/", &[b'x'; 1024]));
    assert_eq!(r.status, 200, "{}", r.status_line());
}

#[test]
fn max_body_size_cuts_a_chunked_body_off_at_the_limit() {
    let s = Server::start("echo:app", &["--max-body-size", "1K"]);
    let mut c = s.connect();
    c.send(&post_chunked(
        "/",
        &[b'y'; 3000],
        &[500, 500, 500, 500, 500, 500],
    ));
    let r = c.read_response();
    assert_eq!(r.status, 413, "{}", r.status_line());
    c.expect_closed(PROMPT);
}

#[test]
fn bad_limit_values_are_refused_naming_the_flag() {
    for (args, flag) in [
        (&["--max-body-size", "lots"][..], "--max-body-size"),
        (&["--max-headers", "0"][..], "--max-headers"),
        (&["--max-header-size", "10"][..], "--max-header-size"),
        (&["--header-timeout", "0"][..], "--header-timeout"),
        (&["--max-connections", "0"][..], "--max-connections"),
    ] {
        let mut all = vec!["hello:app", "--port", "0"];
        all.extend_from_slice(args);
        let out = run_to_exit(&all, &[], PROMPT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(flag), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn max_connections_holds_the_rest_in_the_backlog_until_one_closes() {
    let s = Server::start("regress:app", &["--max-connections", "2"]);
    let mut a = s.connect();
    let mut b = s.connect();
    a.send(&get("/hello"));
    b.send(&get("/hello"));
    assert_eq!(a.read_response().status, 200);
    assert_eq!(b.read_response().status, 200);
    let mut c = s.connect();
    c.send(&get("/hello"));
    c.expect_open_and_quiet(Duration::from_millis(500));
    drop(a);
    c.set_io_timeout(PROMPT);
    assert_eq!(
        c.read_response().status,
        200,
        "the third connection was never served"
    );
}

// ---------------------------------------------------------------------------
// Timeouts
// ---------------------------------------------------------------------------

#[test]
fn a_head_that_stops_halfway_gets_408_after_the_header_timeout() {
    let s = Server::start("regress:app", &["--header-timeout", "0.5"]);
    let mut c = s.connect();
    let t = Instant::now();
    c.send(b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Slow: ");
    let r = c.read_response();
    assert_eq!(r.status, 408, "{}", r.status_line());
    assert!(
        t.elapsed() >= Duration::from_millis(450),
        "{:?}",
        t.elapsed()
    );
    c.expect_closed(PROMPT);
}

#[test]
fn a_connection_that_never_sends_is_closed_after_the_header_timeout() {
    let s = Server::start("regress:app", &["--header-timeout", "0.5"]);
    let mut c = s.connect();
    let t = Instant::now();
    c.expect_closed(PROMPT);
    assert!(
        t.elapsed() >= Duration::from_millis(450),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn slowloris_connections_are_cut_while_others_keep_their_latency() {
    let s = Server::start("regress:app", &["--header-timeout", "1"]);
    let head = b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Trickle: abcdefghijklmnopqrstuvwxyz\r\n\r\n";
    let mut slow: Vec<Conn> = (0..20).map(|_| s.connect()).collect();
    let start = Instant::now();
    let mut worst = Duration::ZERO;
    let mut sent = 0;
    // Each slow client sends one byte every 100 ms: the head would take ~7 s whole.
    while start.elapsed() < Duration::from_millis(2500) && sent < head.len() {
        for c in &mut slow {
            let _ = c.try_send(&head[sent..sent + 1]);
        }
        sent += 1;
        let t = Instant::now();
        let r = try_get(&s, "/hello", PROMPT).expect("a normal request is served");
        assert_eq!(r.body_text(), "hello");
        worst = worst.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        worst < Duration::from_millis(500),
        "a normal request took {worst:?}"
    );
    for (i, c) in slow.iter_mut().enumerate() {
        let (bytes, closed) = c.read_until_close(PROMPT);
        assert!(closed, "slow client {i} was not cut off");
        assert!(
            contains(&bytes, b" 408 "),
            "slow client {i} got {:?}",
            show(&bytes)
        );
    }
}

/// Sends `bytes` one at a time, `every` apart, while watching for an answer; returns how
/// long after the first byte the server answered or closed (`None`: it never did within
/// `limit`), with what it sent.
fn trickle(c: &mut Conn, bytes: &[u8], every: Duration, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut next = 0;
    while start.elapsed() < limit {
        if let Some(&b) = bytes.get(next % bytes.len()) {
            // A closed connection fails the send: the answer is then read below.
            let _ = c.try_send(&[b]);
            next += 1;
        }
        if c.wait_readable(every) {
            return Some(start.elapsed());
        }
    }
    None
}

/// Trickles `bytes` (see `trickle`) and expects a 408 and the close, answered within
/// `window` of the first byte.
fn trickle_until_408(
    c: &mut Conn,
    bytes: &[u8],
    every: Duration,
    window: std::ops::Range<Duration>,
    what: &str,
) {
    let took = trickle(c, bytes, every, PROMPT * 2)
        .unwrap_or_else(|| panic!("{what}: still open after {:?} of trickling", PROMPT * 2));
    assert!(window.contains(&took), "{what}: answered after {took:?}");
    let (bytes, _) = c.read_until_close(PROMPT);
    assert!(contains(&bytes, b" 408 "), "{what}: {:?}", show(&bytes));
}

#[test]
fn a_head_that_keeps_trickling_in_gets_408_within_the_header_timeout() {
    // One byte every 100 ms forever: each read must not restart the head's clock.
    let s = Server::start("regress:app", &["--header-timeout", "1"]);
    let mut c = s.connect();
    c.send(b"GET /hello HTTP/1.1\r\nHost: x\r\nX-a: ");
    trickle_until_408(
        &mut c,
        b"abcdefgh",
        Duration::from_millis(100),
        Duration::from_millis(900)..Duration::from_millis(2000),
        "a head trickled with --header-timeout 1",
    );
}

#[test]
fn a_new_connections_first_head_counts_from_the_accept() {
    // Silent for most of the header timeout, then trickling: cut within the timeout of the
    // accept, not of the first byte.
    let s = Server::start("regress:app", &["--header-timeout", "1"]);
    let mut c = s.connect();
    let accepted = Instant::now();
    std::thread::sleep(Duration::from_millis(700));
    trickle_until_408(
        &mut c,
        b"GET /hello HTTP/1.1\r\nX-a: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        Duration::from_millis(50),
        Duration::from_millis(100)..Duration::from_millis(1000),
        "a first head that began 0.7 s after the accept, with --header-timeout 1",
    );
    assert!(
        accepted.elapsed() < Duration::from_millis(1900),
        "{:?}",
        accepted.elapsed()
    );
}

#[test]
fn answers_the_loop_makes_itself_restart_the_keep_alive_clock() {
    // --static-response and the metrics port answer on the loop: their connections stay
    // open between requests like any other, counted from each answer.
    for args in [
        &["--static-response", "--keep-alive-timeout", "1"][..],
        &["--keep-alive-timeout", "1", "--metrics-port", "0"][..],
    ] {
        let s = Server::start("regress:app", args);
        let addr = if args.contains(&"--metrics-port") {
            let log = s.log_text();
            let line = log
                .lines()
                .find(|l| l.contains("metrics on http://"))
                .expect("metrics line");
            let at = line.find("http://").unwrap() + "http://".len();
            let end = line[at..].find('/').unwrap() + at;
            line[at..end].parse().unwrap()
        } else {
            s.addr()
        };
        let mut c = Conn::connect(addr);
        let path = if args.contains(&"--metrics-port") {
            "/healthz"
        } else {
            "/"
        };
        for i in 0..8 {
            c.send(&get(path));
            let r = c
                .try_read_response()
                .unwrap_or_else(|e| panic!("{args:?}: request {i} after {} ms: {e:?}", i * 300));
            assert_eq!(r.status, 200);
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

#[test]
fn the_next_head_on_a_keep_alive_connection_cannot_restart_its_clock() {
    let s = Server::start(
        "regress:app",
        &["--header-timeout", "1", "--keep-alive-timeout", "30"],
    );
    let mut c = s.connect();
    c.send(&get("/hello"));
    assert_eq!(c.read_response().status, 200);
    // Idle for longer than the header timeout (allowed: keep-alive is 30 s), then a head
    // trickles in: its clock starts at its first byte, and only then.
    std::thread::sleep(Duration::from_millis(1200));
    trickle_until_408(
        &mut c,
        b"GET /hello HTTP/1.1\r\nX-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        Duration::from_millis(100),
        Duration::from_millis(900)..Duration::from_millis(2000),
        "the next head trickled with --header-timeout 1",
    );
}

#[test]
fn trickling_heads_free_their_max_connections_slots_within_the_header_timeout() {
    let s = Server::start(
        "regress:app",
        &["--header-timeout", "1", "--max-connections", "5"],
    );
    let mut slow: Vec<Conn> = (0..5).map(|_| s.connect()).collect();
    for c in &mut slow {
        c.send(b"GET /hello HTTP/1.1\r\nHost: x\r\nX-a: ");
    }
    // Every slot is taken by a trickler; a new client waits in the backlog until the
    // header timeout frees one, however the tricklers go on.
    let start = Instant::now();
    let waiting = std::thread::spawn({
        let addr = s.addr();
        move || {
            let mut c = Conn::connect(addr);
            c.send(&get("/hello"));
            (c.read_response().status, Instant::now())
        }
    });
    while !waiting.is_finished() && start.elapsed() < PROMPT * 2 {
        for c in &mut slow {
            let _ = c.try_send(b"a");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, at) = waiting.join().unwrap();
    assert_eq!(status, 200);
    let waited = at.duration_since(start);
    assert!(
        waited < Duration::from_millis(2500),
        "a new client waited {waited:?} behind 5 trickling heads (--header-timeout 1)"
    );
}

#[test]
fn a_body_slower_than_the_minimum_rate_gets_408() {
    // 20 bytes/s against a minimum of 100: after the free second, each 100 bytes buy one
    // more, so the body is cut at about 1 + 0.2 t = t, 1.25 s.
    let s = Server::start(
        "echo:app",
        &["--body-timeout", "1", "--body-min-rate", "100"],
    );
    let mut c = s.connect();
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n");
    trickle_until_408(
        &mut c,
        b"xx",
        Duration::from_millis(50),
        Duration::from_millis(1100)..Duration::from_millis(2500),
        "a body at 20 B/s against --body-min-rate 100",
    );
}

#[test]
fn a_steady_body_longer_than_the_body_timeout_is_served() {
    // 3000 bytes at ~3000 B/s: it takes about twice --body-timeout, but never pauses that
    // long and stays above the minimum rate.
    let s = Server::start(
        "echo:app",
        &["--body-timeout", "0.5", "--body-min-rate", "1000"],
    );
    let mut c = s.connect();
    let body = vec![b'b'; 3000];
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n");
    let start = Instant::now();
    for part in body.chunks(150) {
        c.send(part);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(start.elapsed() > Duration::from_millis(900));
    let r = c.read_response();
    assert_eq!(r.status, 200, "{}", r.status_line());
}

#[test]
fn an_idle_keep_alive_connection_closes_after_the_keep_alive_timeout() {
    let s = Server::start("regress:app", &["--keep-alive-timeout", "0.5"]);
    let mut c = s.connect();
    // Requests closer together than the timeout keep it open.
    for _ in 0..4 {
        c.send(&get("/hello"));
        assert_eq!(c.read_response().status, 200);
        std::thread::sleep(Duration::from_millis(200));
    }
    let t = Instant::now();
    c.expect_closed(PROMPT);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn a_body_that_stops_arriving_gets_408_after_the_body_timeout() {
    let s = Server::start("echo:app", &["--body-timeout", "0.5"]);
    let mut c = s.connect();
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789");
    let r = c.read_response();
    assert_eq!(r.status, 408, "{}", r.status_line());
    c.expect_closed(PROMPT);
    let r = s.request(&post("/", b"whole"));
    assert_eq!(r.status, 200, "after the body timeout: {}", r.status_line());
}

#[test]
fn clients_that_never_read_an_8_mib_response_are_dropped_while_others_are_served() {
    let s = Server::start(
        "regress:app",
        &["--write-timeout", "1", "--blocking-threads", "2"],
    );
    let mut stuck: Vec<Conn> = (0..4).map(|_| s.connect()).collect();
    for c in &mut stuck {
        c.send(&get("/big-list?size=8388608"));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(800) {
        assert_served(&s, PROMPT, "while clients ignore their 8 MiB responses");
    }
    // After the write timeout each stuck connection is dropped (reset): reading what was
    // buffered for it ends well before 8 MiB.
    std::thread::sleep(Duration::from_millis(1500));
    for (i, c) in stuck.iter_mut().enumerate() {
        let (bytes, _) = c.read_until_close(PROMPT);
        assert!(
            bytes.len() < 8 << 20,
            "stuck client {i} got its whole response ({} bytes): it was never dropped",
            bytes.len()
        );
    }
    assert_served(&s, PROMPT, "after the stuck clients were dropped");
}

#[test]
fn running_out_of_descriptors_is_logged_once_then_counted_at_most_once_a_second() {
    // A worker with 64 descriptors and clients that hold ~80 connections, churning: every
    // close lets it accept again, and the next accept fails with EMFILE.
    let s = Server::builder("regress:app")
        .wrapped(&["sh", "-c", "ulimit -n 64 && exec \"$0\" \"$@\""])
        .start();
    let mut held: Vec<Conn> = (0..80).map(|_| s.connect()).collect();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        held.remove(0);
        held.push(s.connect());
        std::thread::sleep(Duration::from_millis(5));
    }
    let log = s.log_text();
    let lines = log.matches("accept failed").count();
    assert!(
        (1..=6).contains(&lines),
        "{lines} lines about failed accepts in 3 s of churn:\n{log}"
    );
    assert!(log.contains("Too many open files"), "{log}");
    drop(held);
    assert_served(&s, PROMPT, "once the descriptors are back");
}

// ---------------------------------------------------------------------------
// Slow readers: a streamed body waits for its client without holding a thread
// ---------------------------------------------------------------------------

/// The time the worst of `n` requests for `/hello` (each on a fresh connection) took.
fn worst_of_probes(s: &Server, n: usize) -> Duration {
    let mut worst = Duration::ZERO;
    for _ in 0..n {
        let t = Instant::now();
        let r = try_get(s, "/hello", PROMPT * 4).expect("a probe is served");
        assert_eq!(r.body_text(), "hello");
        worst = worst.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    worst
}

/// Reads one whole response (head and chunked body) from a connection that waited, and
/// checks that the body is `n` pieces of `size` bytes of the chunk route's letters.
fn expect_chunks_body(c: &mut Conn, n: usize, size: usize, what: &str) {
    c.set_io_timeout(PROMPT * 4);
    let r = c
        .try_read_response()
        .unwrap_or_else(|e| panic!("{what}: {e:?}"));
    assert_eq!(r.status, 200, "{what}");
    assert_eq!(r.body.len(), n * size, "{what}");
    for (i, piece) in r.body.chunks(size).enumerate() {
        let want = b'a' + (i % 26) as u8;
        assert!(piece.iter().all(|&b| b == want), "{what}: piece {i}");
    }
}

#[test]
fn clients_that_do_not_read_streamed_bodies_do_not_hold_the_one_handler_thread() {
    // Ten clients ask for a 16 MiB streamed body (64 KiB items) and read nothing. With one
    // handler thread, every other request is still answered at once; then each slow client
    // reads its whole body, intact.
    clients_that_do_not_read(&["--blocking-threads", "1", "--write-timeout", "60"]);
}

#[test]
fn clients_that_do_not_read_streamed_bodies_do_not_hold_the_inline_app() {
    clients_that_do_not_read(&["--blocking-threads", "0", "--write-timeout", "60"]);
}

fn clients_that_do_not_read(args: &[&str]) {
    let s = Server::start("regress:app", args);
    let (n, size) = (256, 65536);
    let mut slow: Vec<Conn> = (0..10)
        .map(|_| Conn::connect_small(s.addr(), 4096))
        .collect();
    for c in &mut slow {
        c.send(&get(&format!("/chunks?n={n}&size={size}")));
    }
    std::thread::sleep(Duration::from_millis(500));
    let worst = worst_of_probes(&s, 40);
    assert!(
        worst < Duration::from_millis(500),
        "with 10 clients not reading, a request took {worst:?}"
    );
    for (i, c) in slow.iter_mut().enumerate() {
        expect_chunks_body(c, n, size, &format!("slow client {i}"));
    }
}

#[test]
fn clients_reading_slowly_are_served_at_their_pace_while_others_are_served_at_once() {
    // Four clients read a 4 MiB streamed body at about 1 MiB/s each, in small reads; one
    // handler thread answers everyone else meanwhile.
    let s = Server::start("regress:app", &["--blocking-threads", "1"]);
    let (n, size) = (64, 65536);
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let addr = s.addr();
            std::thread::spawn(move || {
                let mut c = Conn::connect_small(addr, 4096);
                c.send(&get(&format!("/chunks?n={n}&size={size}")));
                let mut got = 0usize;
                let mut buf = [0u8; 4096];
                let start = Instant::now();
                c.stream.set_read_timeout(Some(PROMPT)).unwrap();
                // Past the head: a chunked body of n * size bytes plus framing.
                while got < n * size {
                    use std::io::Read;
                    let k = c.stream.read(&mut buf).expect("the body keeps coming");
                    assert!(k > 0, "reader {i}: closed after {got} bytes");
                    got += k;
                    std::thread::sleep(Duration::from_millis(4));
                }
                start.elapsed()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let worst = worst_of_probes(&s, 40);
    assert!(
        worst < Duration::from_millis(500),
        "with 4 slow readers, a request took {worst:?}"
    );
    for r in readers {
        let took = r.join().unwrap();
        assert!(
            took > Duration::from_millis(1500),
            "read too fast to test: {took:?}"
        );
    }
}

#[test]
fn a_last_response_queued_whole_is_still_cut_at_the_write_timeout() {
    // `Connection: close` and a body the app returns as one 20 MB buffer: the whole
    // response is queued at once and the connection is closing. A client that then reads
    // nothing must still be cut at --write-timeout, not hold the connection and its 20 MB
    // for ever.
    const SIZE: usize = 20_000_000;
    let s = Server::start(
        "regress:app",
        &["--write-timeout", "1", "--log-level", "debug"],
    );
    let mut c = Conn::connect_small(s.addr(), 4096);
    c.send(
        format!("GET /big-list?size={SIZE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert!(
        s.wait_for_log("write timeout", Duration::from_secs(6)),
        "not cut after 6 s\n{}",
        s.log_text()
    );
    let (got, _) = c.read_until_close(PROMPT);
    assert!(got.len() < SIZE, "the whole {} bytes still came", got.len());
}

#[test]
fn a_client_reading_steadily_but_slower_than_the_kernel_buffer_drains_is_not_dropped() {
    // 100 KB/s against a body of several MiB: the loop's queue waits for the kernel's
    // buffer (no writable edge for seconds), but the client takes bytes all the while, so
    // --write-timeout 1 must not cut it.
    let s = Server::start("regress:app", &["--write-timeout", "1"]);
    let mut c = Conn::connect_small(s.addr(), 16384);
    c.send(&get("/chunks?n=100&size=65536"));
    let start = Instant::now();
    let mut got = 0usize;
    let mut buf = [0u8; 4096];
    c.stream.set_read_timeout(Some(PROMPT)).unwrap();
    while start.elapsed() < Duration::from_secs(4) {
        use std::io::Read;
        match c.stream.read(&mut buf) {
            Ok(0) => panic!("closed after {got} bytes, {:?}", start.elapsed()),
            Ok(n) => got += n,
            Err(e) => panic!("{e} after {got} bytes, {:?}", start.elapsed()),
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    assert!(got > 200_000, "read only {got} bytes");
}

#[test]
fn many_bodies_that_can_always_go_on_do_not_starve_new_requests() {
    // Fifty clients take an endless stream of tiny items without reading (the kernel
    // buffers absorb a lot of them): their bodies can often go on, and new requests
    // still get their turn.
    let s = Server::start("regress:app", &["--blocking-threads", "1"]);
    let mut slow: Vec<Conn> = (0..50)
        .map(|_| Conn::connect_small(s.addr(), 4096))
        .collect();
    for c in &mut slow {
        c.send(&get("/endless"));
    }
    std::thread::sleep(Duration::from_millis(500));
    let worst = worst_of_probes(&s, 20);
    assert!(
        worst < Duration::from_millis(1000),
        "with 50 endless streams, a request took {worst:?}"
    );
}

#[test]
fn requests_pipelined_behind_a_body_set_aside_keep_their_order() {
    pipelined_behind_a_body_set_aside(&["--blocking-threads", "1"]);
}

#[test]
fn requests_pipelined_behind_a_body_set_aside_keep_their_order_inline() {
    pipelined_behind_a_body_set_aside(&["--blocking-threads", "0"]);
}

fn pipelined_behind_a_body_set_aside(args: &[&str]) {
    let s = Server::start("regress:app", args);
    let (n, size) = (256, 65536);
    let mut c = Conn::connect_small(s.addr(), 4096);
    let mut pipelined = get(&format!("/chunks?n={n}&size={size}"));
    pipelined.extend_from_slice(&get("/hello"));
    pipelined.extend_from_slice(&get("/ticks?n=3"));
    c.send(&pipelined);
    std::thread::sleep(Duration::from_millis(300));
    // The body waits for its reader; the handler serves others meanwhile.
    let worst = worst_of_probes(&s, 10);
    assert!(worst < Duration::from_millis(500), "{worst:?}");
    expect_chunks_body(&mut c, n, size, "the first response");
    let r = c.read_response();
    assert_eq!(r.body_text(), "hello", "the second response");
    let r = c.read_response();
    assert_eq!(r.body_text(), "s0\ns1\ns2\n", "the third response");
}

#[test]
fn a_body_set_aside_is_closed_when_its_client_leaves() {
    let tmp = TempDir::new("aside-gone");
    let mark = tmp.file("mark");
    let s = Server::start("regress:app", &["--blocking-threads", "1"]);
    let mut c = Conn::connect_small(s.addr(), 4096);
    c.send(&get(&format!("/endless?mark={mark}")));
    std::thread::sleep(Duration::from_millis(300));
    // Set aside (nothing read): the handler is free.
    assert!(worst_of_probes(&s, 3) < Duration::from_millis(500));
    reset(c);
    wait_for_file_containing(&mark, "closed", PROMPT)
        .expect("close() of the body set aside, after its client left");
    assert_served(&s, PROMPT, "after the client left");
}

// ---------------------------------------------------------------------------
// Client gone
// ---------------------------------------------------------------------------

#[test]
fn the_app_can_ask_whether_its_client_left() {
    let tmp = TempDir::new("client-gone");
    let mark = tmp.file("mark");
    let s = Server::start("regress:app", &[]);
    // Connected: the flag stays false.
    let r = s.get(&format!("/watch?secs=0.3&mark={mark}.stay"));
    assert_eq!(r.body_text(), "still connected");
    // Gone: the client closes while the app runs, and the app notices.
    let mut c = s.connect();
    c.send(&get(&format!("/watch?secs=5&mark={mark}")));
    if let Err(m) = wait_for_file_containing(&mark, "started", PROMPT) {
        panic!("the request never started: {m:?}");
    }
    drop(c);
    if let Err(m) = wait_for_file_containing(&mark, "noticed", PROMPT) {
        panic!("the app never learnt that its client left: {m:?}");
    }
    assert_served(&s, PROMPT, "after the client left");
}

/// One handler thread busy with `job` (a regress.py route given `mark=`), started; the
/// app's runs of `/count` are counted in a file (`ran`). Taken apart by value: `_tmp`
/// keeps the files.
struct BusyHandler {
    _tmp: TempDir,
    mark: String,
    count: String,
    s: Server,
    job: Conn,
}

impl BusyHandler {
    fn start(name: &str, job: &str) -> BusyHandler {
        let tmp = TempDir::new(name);
        let (mark, count) = (tmp.file("mark"), tmp.file("count"));
        // One handler thread, never more: the requests behind the job wait for it.
        let s = Server::builder("regress:app")
            .args(&["--blocking-threads", "1", "--max-blocking-threads", "1"])
            .env("M0TEST_COUNT_FILE", &count)
            .start();
        let mut c = s.connect();
        c.send(&get(&format!("{job}&mark={mark}")));
        wait_for_file_containing(&mark, "started", PROMPT).expect("the job never started");
        BusyHandler {
            _tmp: tmp,
            mark,
            count,
            s,
            job: c,
        }
    }
}

/// How many times `/count` ran, by its count file.
fn ran(count: &str) -> u64 {
    std::fs::metadata(count).map(|m| m.len()).unwrap_or(0)
}

/// Issue 40: departures are per request, for any number of them. The one handler thread
/// runs a job that watches its client; 100 requests queue behind it, each on its own
/// connection; then the job's client leaves, and the 100 after it. The job is told, and
/// none of the 100 runs. `leave` is a reset, or a close whose FIN says the same.
fn departures_are_per_request(leave: fn(Conn)) {
    let BusyHandler {
        _tmp,
        mark,
        count,
        s,
        job,
    } = BusyHandler::start("departures", "/watch?secs=10");
    let queued: Vec<Conn> = (0..100)
        .map(|_| {
            let mut c = s.connect();
            c.send(&get("/count"));
            c
        })
        .collect();
    // Long enough for the loop to have read and queued them.
    std::thread::sleep(Duration::from_millis(300));
    leave(job);
    for c in queued {
        leave(c);
    }
    wait_for_file_containing(&mark, "noticed", PROMPT)
        .expect("the job was never told that its client left");
    // The handler went through the queue before it got to this one.
    assert_served(&s, PROMPT, "after the clients left");
    let ran = ran(&count);
    assert_eq!(
        ran, 0,
        "{ran} of 100 requests ran for clients that had left"
    );
}

#[test]
fn a_client_that_leaves_and_retries_again_and_again_runs_nothing_it_left() {
    // Each retry takes the slot its last connection freed (the loop reuses the latest):
    // a later departure in a slot must not erase an earlier one.
    let BusyHandler {
        _tmp,
        count,
        s,
        mut job,
        ..
    } = BusyHandler::start("retries", "/slow?secs=1.5");
    for _ in 0..20 {
        let mut c = s.connect();
        c.send(&get("/count"));
        std::thread::sleep(Duration::from_millis(20));
        reset(c);
    }
    assert_eq!(job.read_response().body_text(), "slow done");
    assert_served(&s, PROMPT, "after the retries");
    let ran = ran(&count);
    assert_eq!(ran, 0, "{ran} of 20 abandoned requests ran");
}

#[test]
fn queued_requests_whose_clients_reset_never_run_and_a_running_one_is_told() {
    departures_are_per_request(reset);
}

#[test]
fn queued_requests_whose_clients_closed_never_run_and_a_running_one_is_told() {
    departures_are_per_request(drop);
}

// ---------------------------------------------------------------------------
// Large bodies spool to a file
// ---------------------------------------------------------------------------

/// The worker's open descriptors that are unlinked files (the body spool).
fn deleted_files(s: &Server) -> usize {
    let Some(&worker) = s.worker_pids().first() else {
        return 0;
    };
    std::fs::read_dir(format!("/proc/{worker}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter(|t| t.to_string_lossy().ends_with("(deleted)"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_body_over_the_buffer_size_goes_to_a_temporary_file_and_back_exactly() {
    let s = Server::start("echo:app", &["--body-buffer-size", "64K"]);
    let body = pseudo_random(7, 1 << 20);
    let req = post("/?read=all", &body);
    let head_len = find(&req, b"\r\n\r\n").unwrap() + 4;
    let mut c = s.connect();
    // Head and 200 KiB: past the buffer, so the worker now holds a spool file.
    c.send(&req[..head_len + 200 * 1024]);
    let spooling = wait_until(PROMPT, || deleted_files(&s) == 1);
    assert!(
        spooling,
        "no spool file while a 1 MiB body arrives over a 64 KiB buffer"
    );
    c.send(&req[head_len + 200 * 1024..]);
    let e = c.read_response().echo();
    assert!(e.body == body, "the spooled body came back different");
    // Done: the file is gone with its request.
    assert!(
        wait_until(PROMPT, || deleted_files(&s) == 0),
        "the spool file was not released"
    );
    // Below the buffer size nothing is spooled.
    let small = pseudo_random(8, 60 * 1024);
    let e = s.request(&post("/?read=all", &small)).echo();
    assert!(e.body == small);
}

#[test]
fn a_spool_abandoned_mid_body_is_released() {
    let s = Server::start("echo:app", &["--body-buffer-size", "16K"]);
    let body = vec![b'z'; 512 * 1024];
    let req = post("/", &body);
    let mut c = s.connect();
    c.send(&req[..req.len() / 2]);
    assert!(
        wait_until(PROMPT, || deleted_files(&s) == 1),
        "no spool file"
    );
    drop(c);
    assert!(
        wait_until(PROMPT, || deleted_files(&s) == 0),
        "the spool of an abandoned body stayed open"
    );
}

#[test]
fn the_app_learns_a_connection_close_client_left() {
    // With `Connection: close` the loop reads nothing more from the connection; the end of
    // stream must still reach the app.
    let tmp = TempDir::new("client-gone-close");
    let mark = tmp.file("mark");
    let s = Server::start("regress:app", &[]);
    let mut c = s.connect();
    c.send(
        format!("GET /watch?secs=5&mark={mark} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    if let Err(m) = wait_for_file_containing(&mark, "started", PROMPT) {
        panic!("the request never started: {m:?}");
    }
    drop(c);
    if let Err(m) = wait_for_file_containing(&mark, "noticed", PROMPT) {
        panic!("the app never learnt that its client left: {m:?}");
    }
}

#[test]
fn the_keep_alive_timeout_counts_from_when_the_response_was_written() {
    let s = Server::start("regress:app", &["--keep-alive-timeout", "1"]);
    let mut c = s.connect();
    c.send(&get("/big-list?size=16777216"));
    // Read slowly for 1.5 s (longer than the keep-alive timeout, while the server still has
    // bytes queued), then the rest at once: what the kernel buffered after the server's
    // last write goes in milliseconds, so the next request follows that write closely.
    let start = Instant::now();
    let mut data = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    c.stream.set_read_timeout(Some(PROMPT)).unwrap();
    let mut want = usize::MAX;
    while data.len() < want {
        use std::io::Read;
        let n = c.stream.read(&mut buf).expect("the response keeps coming");
        assert!(n > 0, "closed after {} bytes", data.len());
        data.extend_from_slice(&buf[..n]);
        if want == usize::MAX {
            if let Some(i) = find(&data, b"\r\n\r\n") {
                want = i + 4 + (16 << 20);
            }
        }
        if start.elapsed() < Duration::from_millis(1500) {
            std::thread::sleep(Duration::from_millis(15));
        }
    }
    assert_eq!(data.len(), want, "more than the response arrived");
    assert!(
        start.elapsed() > Duration::from_millis(1200),
        "read too fast to test"
    );
    // Half a keep-alive timeout after the last byte the connection is still usable: the
    // timeout started when the response was written, not when it was queued 1.5 s ago.
    std::thread::sleep(Duration::from_millis(500));
    c.send(&get("/hello"));
    let r = c.read_response();
    assert_eq!(r.body_text(), "hello", "{}", r.status_line());
}

/// What holds for `write()` (issue 40): it blocks the app's call, as PEP 3333 requires, so
/// on a handler thread it holds that thread while its client does not read; the bound is
/// `--write-timeout`, after which the connection is closed, `write()` raises
/// `ConnectionAbortedError`, and the handler serves the requests that waited.
#[test]
fn write_to_a_client_that_does_not_read_holds_its_handler_until_the_write_timeout() {
    let tmp = TempDir::new("write-held");
    let mark = tmp.file("mark");
    let s = Server::start(
        "regress:app",
        &[
            "--blocking-threads",
            "1",
            "--max-blocking-threads",
            "1",
            "--write-timeout",
            "1",
        ],
    );
    let mut c = Conn::connect_small(s.addr(), 4096);
    c.send(&get(&format!("/write-big?mib=100&mark={mark}")));
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    assert_served(
        &s,
        Duration::from_secs(10),
        "behind a write() to a client that does not read",
    );
    let waited = t.elapsed();
    wait_for_file_containing(&mark, "refused None ConnectionAbortedError", PROMPT)
        .expect("write() did not raise once the client was cut");
    // Held, not served meanwhile: the handler thread was the app's.
    assert!(
        waited >= Duration::from_millis(300),
        "answered after {waited:?}"
    );
    drop(c);
}
