//! Overload (`--max-queue-wait`): a request that would wait for a handler past its budget is
//! answered 503 with `Retry-After` by the loop at once and never reaches the app; one whose
//! client left before the app was called is never run; `/readyz` on the metrics port says
//! 503 while a worker sheds and 200 after; a worker whose handler is stuck leaves new
//! connections to its sibling. The app is tests/apps/pool.py (`/burn?SECS` computes,
//! `/ran` counts the requests it ran).

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// A server of pool.py with `--metrics-port 0`, and its metrics address.
fn start(extra: &[&str]) -> (Server, SocketAddr) {
    let s = Server::builder("pool:app")
        .args(&["--metrics-port", "0"])
        .args(extra)
        .start();
    let addr = s.metrics_addr();
    (s, addr)
}

/// `target` on a connection of its own: status, `Retry-After`, how long it took.
fn fetch(addr: SocketAddr, target: &str) -> (u16, Option<String>, Duration) {
    let t = Instant::now();
    let mut c = Conn::connect(addr);
    c.send(format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes());
    let r = c.read_response();
    (
        r.status,
        r.header("Retry-After").map(str::to_string),
        t.elapsed(),
    )
}

/// `n` requests for `target` at once, each on its own connection.
fn burst(addr: SocketAddr, n: usize, target: &str) -> Vec<(u16, Option<String>, Duration)> {
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let target = target.to_string();
            std::thread::spawn(move || fetch(addr, &target))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// One series' value from a scrape (0 when absent).
fn metric(addr: SocketAddr, series: &str) -> f64 {
    let (_, body) = scrape(addr, "/metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// A path of the metrics port: status and body.
fn scrape(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut c = Conn::connect(addr);
    c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes());
    let r = c.read_response();
    (r.status, r.body_text())
}

fn ran(s: &Server) -> u64 {
    s.get("/ran").body_text().parse().unwrap()
}

#[test]
fn a_request_that_would_wait_past_its_budget_is_answered_503_at_once_and_never_run() {
    let (s, m) = start(&["--max-blocking-threads", "1", "--max-queue-wait", "0.3"]);
    // The handler's pace (known after 8): 50 ms a request, so about 6 fit in the budget.
    for _ in 0..10 {
        assert_eq!(s.get("/burn?0.05").status, 200);
    }
    let before = ran(&s);
    let answers = burst(s.addr(), 30, "/burn?0.05");
    let ok = answers.iter().filter(|a| a.0 == 200).count();
    let shed: Vec<_> = answers.iter().filter(|a| a.0 == 503).collect();
    assert_eq!(ok + shed.len(), 30, "{answers:?}");
    // At least the one running and one waiting: once a request is refused, the worker is
    // overloaded and admits only what would wait a fifth of the budget (60 ms, one
    // request); the burst may arrive spread over passes on a loaded machine.
    assert!(
        shed.len() >= 10 && ok >= 2,
        "{ok} served, {} shed",
        shed.len()
    );
    for a in &shed {
        assert_eq!(
            a.1.as_deref(),
            Some("1"),
            "a 503 without Retry-After: {a:?}"
        );
    }
    // Shed as they were read, not after waiting their budget out.
    let quick = shed
        .iter()
        .filter(|a| a.2 < Duration::from_millis(250))
        .count();
    assert!(quick * 2 >= shed.len(), "{shed:?}");
    // The app ran the requests answered 200 and no other.
    assert_eq!(ran(&s) - before, ok as u64);
    assert_eq!(metric(m, "m0serve_requests_shed_total"), shed.len() as f64);
    s.assert_no_panic();
}

#[test]
fn a_request_that_waited_twice_its_budget_is_answered_503_when_looked_at() {
    // No pace known yet (nothing finished): the burst is admitted whole, and what waits
    // past twice the budget (0.4 s; the burst is 0.8 s of work) is answered 503 from the
    // loop's queue.
    let (s, m) = start(&["--max-blocking-threads", "1", "--max-queue-wait", "0.2"]);
    let answers = burst(s.addr(), 16, "/burn?0.05");
    let ok = answers.iter().filter(|a| a.0 == 200).count();
    let shed = answers.iter().filter(|a| a.0 == 503).count();
    assert_eq!(ok + shed, 16, "{answers:?}");
    assert!(
        shed >= 4 && ok >= 1,
        "{ok} served, {shed} shed: {answers:?}"
    );
    assert_eq!(ran(&s), ok as u64);
    assert_eq!(metric(m, "m0serve_requests_shed_total"), shed as f64);
    s.assert_no_panic();
}

#[test]
fn after_refusing_at_the_door_a_worker_admits_a_fifth_of_its_budget_for_a_second() {
    let (s, _) = start(&["--max-blocking-threads", "1", "--max-queue-wait", "0.1"]);
    // A pace of 2 ms a request: 50 fit in the budget, 10 in a fifth of it.
    for _ in 0..12 {
        assert_eq!(s.get("/burn?0.002").status, 200);
    }
    let count = |answers: &[(u16, Option<String>, Duration)], code| {
        answers.iter().filter(|a| a.0 == code).count()
    };
    // Past the budget: some are refused at the door...
    let first = burst(s.addr(), 90, "/burn?0.002");
    assert!(count(&first, 503) >= 20, "{first:?}");
    // ...and just after, with the queue empty again, a burst that the whole budget would
    // take is cut to a fifth of it.
    let next = burst(s.addr(), 30, "/burn?0.002");
    assert!(
        count(&next, 503) >= 10,
        "{} of 30 refused just after shedding",
        count(&next, 503)
    );
    // A second later the worker takes its whole budget again.
    std::thread::sleep(Duration::from_millis(1500));
    let later = burst(s.addr(), 20, "/burn?0.002");
    assert_eq!(count(&later, 200), 20, "{later:?}");
    s.assert_no_panic();
}

#[test]
fn many_bodies_set_aside_for_clients_that_do_not_read_make_no_request_shed() {
    // 40 endless streams whose clients read nothing: their bodies are set aside, out on the
    // handler but taking none of its time. With a pace of 50 ms a request and a budget of
    // 0.3 s (6 requests' worth), they must not make the worker shed.
    let s = Server::start(
        "regress:app",
        &["--max-blocking-threads", "1", "--max-queue-wait", "0.3"],
    );
    let idle: Vec<Conn> = (0..40)
        .map(|_| {
            let mut c = Conn::connect_small(s.addr(), 4096);
            c.send(b"GET /endless HTTP/1.1\r\nHost: x\r\n\r\n");
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..24 {
        let r = s.get("/slow?secs=0.05");
        assert_eq!(r.status, 200, "request {i}: {}", r.status_line());
    }
    drop(idle);
    s.assert_no_panic();
}

#[test]
fn max_queue_wait_0_sheds_nothing() {
    let (s, m) = start(&["--max-blocking-threads", "1", "--max-queue-wait", "0"]);
    for _ in 0..10 {
        assert_eq!(s.get("/burn?0.05").status, 200);
    }
    // 0.6 s of work at once: past the default budget, served whole when it is off.
    let answers = burst(s.addr(), 12, "/burn?0.05");
    assert!(answers.iter().all(|a| a.0 == 200), "{answers:?}");
    assert_eq!(metric(m, "m0serve_requests_shed_total"), 0.0);
    s.assert_no_panic();
}

#[test]
fn a_burst_that_fits_the_default_budget_is_served_whole() {
    let (s, _) = start(&["--max-blocking-threads", "1"]);
    for _ in 0..10 {
        assert_eq!(s.get("/burn?0.01").status, 200);
    }
    // 10 requests of 10 ms: 100 ms of work, within the 0.5 s default.
    let answers = burst(s.addr(), 10, "/burn?0.01");
    assert!(answers.iter().all(|a| a.0 == 200), "{answers:?}");
    s.assert_no_panic();
}

#[test]
fn readiness_turns_503_while_the_worker_sheds_and_200_after() {
    let (s, m) = start(&["--max-blocking-threads", "1", "--max-queue-wait", "0.2"]);
    assert_eq!(scrape(m, "/readyz").0, 200);
    for _ in 0..10 {
        assert_eq!(s.get("/burn?0.05").status, 200);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut unready, mut live) = (false, true);
            while !stop.load(Ordering::Relaxed) {
                unready |= scrape(m, "/readyz").0 == 503;
                live &= scrape(m, "/healthz").0 == 200 && scrape(m, "/livez").0 == 200;
                std::thread::sleep(Duration::from_millis(10));
            }
            (unready, live)
        })
    };
    let answers = burst(s.addr(), 30, "/burn?0.05");
    assert!(answers.iter().any(|a| a.0 == 503), "{answers:?}");
    let shedding = metric(m, "m0serve_workers_shedding");
    stop.store(true, Ordering::Relaxed);
    let (unready, live) = watcher.join().unwrap();
    assert!(unready, "/readyz never said 503 while the worker shed");
    assert!(live, "liveness failed while the worker shed");
    // A second after the last shed, it is ready again.
    assert!(
        wait_until(Duration::from_secs(5), || scrape(m, "/readyz").0 == 200),
        "still not ready"
    );
    assert!(shedding <= 1.0);
    assert_eq!(metric(m, "m0serve_workers_shedding"), 0.0);
    s.assert_no_panic();
}

#[test]
fn a_request_whose_client_left_before_the_app_ran_is_never_run() {
    let (s, m) = start(&["--max-blocking-threads", "1"]);
    assert_eq!(s.get("/burn?0.01").status, 200);
    let addr = s.addr();
    let long = std::thread::spawn(move || fetch(addr, "/burn?0.4"));
    std::thread::sleep(Duration::from_millis(100));
    // Held behind the long one, then its client goes.
    let mut gone = Conn::connect(addr);
    gone.send(b"GET /burn?0.01 HTTP/1.1\r\nHost: x\r\n\r\n");
    std::thread::sleep(Duration::from_millis(50));
    drop(gone);
    assert_eq!(long.join().unwrap().0, 200);
    assert!(
        wait_until(Duration::from_secs(5), || metric(
            m,
            "m0serve_requests_abandoned_total"
        ) == 1.0),
        "the abandoned request was not counted"
    );
    // The first and the long one ran; the one whose client left did not.
    assert_eq!(ran(&s), 2);
    s.assert_no_panic();
}

#[test]
fn with_two_workers_a_handler_stuck_on_a_long_request_holds_up_no_new_client() {
    let s = Server::start(
        "pool:app",
        &["--workers", "2", "--max-blocking-threads", "1"],
    );
    s.wait_for_workers(2, Duration::from_secs(10));
    let addr = s.addr();
    // One worker's only handler computes for 3 s (it cannot grow: its pool is fixed).
    let stuck = std::thread::spawn(move || fetch(addr, "/burn?3"));
    std::thread::sleep(Duration::from_millis(300));
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let (status, _, took) = fetch(addr, "/burn?0.005");
        assert_eq!(status, 200, "request {i} after {took:?}");
        slowest = slowest.max(took);
    }
    // The other worker took them all: none waited for the stuck one.
    assert!(
        slowest < Duration::from_secs(1),
        "a request took {slowest:?}"
    );
    assert_eq!(stuck.join().unwrap().0, 200);
    s.assert_no_panic();
}
