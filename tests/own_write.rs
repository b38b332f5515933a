//! A handler thread writes a small finished response to its connection's socket itself
//! when the connection was quiet (`Request::socket`): order on the wire, sockets taken only
//! in part, and a client that leaves while the app runs (the descriptor number must never
//! reach the connection accepted after it).

mod common;

use std::time::Duration;

use common::*;

/// The figure after `label` in the last `--stats` report of the handler ("written here
/// 0.98/req", "loop wakes 0.50/req"), and the rest of its line after it.
fn handler_figure<'a>(log: &'a str, label: &str) -> (f64, &'a str) {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("stats m0s-handler-0:"))
        .unwrap_or_else(|| panic!("no handler report:\n{log}"));
    let rest = &line[line
        .find(label)
        .unwrap_or_else(|| panic!("no {label}: {line}"))
        + label.len()..];
    let figure = rest
        .trim_start()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    (figure, rest)
}

/// The handler's "written here N/req (M in part)" figures from the last `--stats` report.
fn written_here(log: &str) -> (f64, u64) {
    let (per, rest) = handler_figure(log, "written here");
    let part = rest[rest.find('(').unwrap() + 1..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    (per, part)
}

fn report(s: &Server) -> String {
    s.signal(libc::SIGUSR2);
    assert!(s.wait_for_log("stats m0s-handler-0:", Duration::from_secs(10)));
    // The loop's line comes first; give the handler's a moment to follow it.
    std::thread::sleep(Duration::from_millis(200));
    s.stderr_text()
}

#[test]
fn a_handler_writes_the_responses_of_a_quiet_connection_itself() {
    let s = Server::start("own_write:app", &["--stats", "--blocking-threads", "1"]);
    let mut c = s.connect();
    for _ in 0..20 {
        c.send(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        let r = c.read_response();
        assert_eq!((r.status, r.body_text().as_str()), (200, "hello"));
    }
    let (per, part) = written_here(&report(&s));
    // Each request came alone on a quiet connection: the handler wrote the response
    // itself, except when the next request overtook the news that the last one was out
    // (its connection then still looked busy to the loop, which then writes it).
    assert!(per >= 0.25, "written here {per}/req:\n{}", s.stderr_text());
    assert_eq!(part, 0);
    s.assert_no_panic();
}

#[test]
fn pipelined_requests_behind_one_a_handler_writes_itself_keep_their_order() {
    let s = Server::start("own_write:app", &["--blocking-threads", "1"]);
    let mut c = s.connect();
    // Only the first request finds the connection quiet (its socket is lent); the ones
    // behind it go through the loop and must not overtake it or each other. The first is
    // too large for the handler to write (items written without copying, by the loop):
    // a small response behind it that the handler wrote itself would arrive first.
    c.send(
        b"GET /many?n=3&size=40000 HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /hello HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /sleep?s=0.1 HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /many?n=60&size=1000 HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let bodies: Vec<String> = c.read_responses(5).iter().map(|r| r.body_text()).collect();
    assert_eq!(bodies[0].len(), 120_000);
    assert_eq!(bodies[1], "hello");
    assert_eq!(bodies[2], "slept");
    assert_eq!(bodies[3].len(), 60_000);
    assert_eq!(bodies[4], "hello");
    // The same with a slow first response the handler does write itself.
    c.send(
        b"GET /sleep?s=0.3 HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let bodies: Vec<String> = c.read_responses(2).iter().map(|r| r.body_text()).collect();
    assert_eq!(bodies, ["slept", "hello"]);
    // And the connection goes on, quiet again.
    c.send(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.read_response().body_text(), "hello");
    s.assert_no_panic();
}

/// A response the handler wrote itself ends with a final part that has nothing to write,
/// which wakes the sleeping loop only when something waits on its connection
/// (`LoopShared::quiet`); else the loop takes it at its next wake, within 20 ms. Here
/// something always waits: the client has half-closed while the app ran (the loop closes
/// the connection after the response), or a request outside `--root-path` is held behind
/// (the loop answers it after the response). Each such end must wake the loop: counted by the
/// handler's "loop wakes", which is 0 when the loop is left to its bound.
#[test]
fn a_response_a_handler_wrote_itself_wakes_the_loop_when_its_connection_has_more_to_do() {
    let s = Server::start(
        "own_write:app",
        &["--stats", "--blocking-threads", "1", "--root-path", "/app"],
    );
    let tmp = TempDir::new("own-write-half-close");
    for i in 0..5 {
        let mark = tmp.file(&format!("mark{i}"));
        let mut c = s.connect();
        c.send(format!("GET /app/sleep?s=0.05&mark={mark} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        // Once the app runs: a request whose client half-closed before it ran is not run.
        wait_for_file_containing(&mark, "started", Duration::from_secs(5))
            .expect("the request never started");
        c.shutdown_write();
        assert_eq!(c.read_response().body_text(), "slept");
        c.expect_closed(Duration::from_secs(5));
    }
    let mut c = s.connect();
    for _ in 0..5 {
        c.send(
            b"GET /app/sleep?s=0.02 HTTP/1.1\r\nHost: x\r\n\r\n\
              GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        let statuses: Vec<u16> = c.read_responses(2).iter().map(|r| r.status).collect();
        assert_eq!(statuses, [200, 404]);
    }
    let log = report(&s);
    // The handler wrote each of the ten responses itself, and woke the loop for each.
    let (written, _) = written_here(&log);
    assert!(written >= 0.99, "written here {written}/req:\n{log}");
    let (wakes, _) = handler_figure(&log, "loop wakes");
    assert!(wakes >= 0.9, "loop wakes {wakes}/req:\n{log}");
    s.assert_no_panic();
}

/// Sends `request` on a connection with a small receive window that reads only at the
/// end, until the kernel's send buffer (it may grow to `tcp_wmem`'s maximum) has been
/// offered half again as much as it holds: each response finds the socket's buffer
/// fuller, until one is taken only in part (the loop writes the rest as the client reads)
/// and the next not at all. Every response must arrive as `expected`, and the connection
/// stay usable.
fn fill_the_socket_and_read_it_all(s: &Server, request: &[u8], expected: &[u8]) {
    let max_sndbuf: usize = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|t| t.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(4 << 20);
    let requests = (max_sndbuf * 3 / 2) / expected.len() + 1;
    let mut c = Conn::connect_small(s.addr(), 4096);
    for _ in 0..requests {
        c.send(request);
        std::thread::sleep(Duration::from_millis(10));
    }
    for r in c.read_responses(requests) {
        assert_eq!(r.status, 200);
        assert!(r.body == expected, "body differs ({} bytes)", r.body.len());
    }
    c.send(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.read_response().body_text(), "hello");
}

#[test]
fn a_response_the_socket_takes_only_in_part_arrives_whole() {
    let s = Server::start("own_write:app", &["--stats", "--blocking-threads", "1"]);
    let expected: Vec<u8> = (0..60)
        .flat_map(|i| vec![b'a' + (i % 26) as u8; 1000])
        .collect();
    for _ in 0..3 {
        fill_the_socket_and_read_it_all(
            &s,
            b"GET /many?n=60&size=1000 HTTP/1.1\r\nHost: x\r\n\r\n",
            &expected,
        );
    }
    let (_, part) = written_here(&report(&s));
    assert!(
        part >= 1,
        "no response was written in part:\n{}",
        s.stderr_text()
    );
    s.assert_no_panic();
}

#[test]
fn a_large_response_of_uncopied_items_the_socket_takes_only_in_part_arrives_whole() {
    // As above, for a body whose first item goes out uncopied (a reference to the app's
    // bytes, then a copied buffer): the handler writes both with one `sendmsg`, and what
    // the socket does not take, cut inside either, goes to the loop.
    let s = Server::start("own_write:app", &["--stats", "--blocking-threads", "1"]);
    let mut expected = vec![b'x'; 33_000];
    expected.push(b'-');
    expected.extend(std::iter::repeat_n(b'y', 31_000));
    fill_the_socket_and_read_it_all(&s, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n", &expected);
    let (per, part) = written_here(&report(&s));
    assert!(
        part >= 1 && per > 0.0,
        "no large response was written here in part:\n{}",
        s.stderr_text()
    );
    s.assert_no_panic();
}

#[test]
fn a_socket_lent_to_a_handler_whose_client_left_is_never_written_to_the_next_connection() {
    let s = Server::start("own_write:app", &["--stats", "--blocking-threads", "1"]);
    for round in 0..3 {
        // A asks for a slow response, then leaves with a reset while the app runs: the
        // loop closes its connection at once.
        let mut a = s.connect();
        a.send(b"GET /sleep?s=0.6 HTTP/1.1\r\nHost: x\r\n\r\n");
        std::thread::sleep(Duration::from_millis(150));
        reset(a);
        std::thread::sleep(Duration::from_millis(150));
        // B connects while the handler still holds A's request; the kernel gives B's
        // socket the lowest free descriptor number, which A's would be had it been freed.
        let mut b = s.connect();
        // When the app returns, the handler writes A's response to A's descriptor number:
        // B must not see it. B asks for nothing until then.
        assert!(
            !b.wait_readable(Duration::from_millis(900)),
            "round {round}: the connection after A received bytes it never asked for"
        );
        b.send(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        let r = b.read_response();
        assert_eq!(
            (r.status, r.body_text().as_str()),
            (200, "hello"),
            "round {round}"
        );
    }
    s.assert_no_panic();
}
