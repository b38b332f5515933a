//! `--metrics-port`: the Prometheus endpoint, answered by the loop from counters shared
//! by every worker. Counters move with traffic and add up across workers, histogram
//! buckets are cumulative, the endpoint answers while every handler is busy, and counts
//! survive a worker's death.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;

/// A server with `--metrics-port 0`, and the address its metrics port got.
fn start(extra: &[&str]) -> (Server, SocketAddr) {
    let server = Server::builder("pep3333:app")
        .args(&["--metrics-port", "0"])
        .args(extra)
        .start();
    let addr = server.metrics_addr();
    (server, addr)
}

/// The exposition as series name (with labels) -> value; also checks the format's shape.
fn scrape(addr: SocketAddr) -> BTreeMap<String, f64> {
    let mut c = Conn::connect(addr);
    c.send(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let r = c.read_response();
    assert_eq!(r.status, 200, "{}", show(&r.raw));
    assert_eq!(
        r.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = r.body_text();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') {
            assert!(
                line.starts_with("# HELP m0serve_") || line.starts_with("# TYPE m0serve_"),
                "{line}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a series and a value");
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        assert!(out.insert(series.to_string(), v).is_none(), "twice: {line}");
    }
    out
}

/// Scrapes until `ok` holds (a handler counts a request just after handing its response
/// to the loop, so a count may trail the response the client read by a moment).
fn scrape_until(
    addr: SocketAddr,
    ok: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> BTreeMap<String, f64> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = scrape(addr);
        if ok(&m) || Instant::now() > deadline {
            return m;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn get(m: &BTreeMap<String, f64>, series: &str) -> f64 {
    *m.get(series)
        .unwrap_or_else(|| panic!("no {series} in {:#?}", m.keys()))
}

/// Buckets of histogram `name` in the order given, with their bounds; checks they are
/// cumulative and end in `+Inf` equal to `_count`.
fn buckets(m: &BTreeMap<String, f64>, name: &str) -> Vec<(f64, f64)> {
    let mut b: Vec<(f64, f64)> = m
        .iter()
        .filter_map(|(k, v)| {
            let le = k.strip_prefix(&format!("{name}_bucket{{le=\""))?;
            let le = le.strip_suffix("\"}")?;
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            Some((bound, *v))
        })
        .collect();
    b.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap());
    assert!(b.len() > 5, "{name}: {b:?}");
    for w in b.windows(2) {
        assert!(w[0].1 <= w[1].1, "{name}: buckets not cumulative: {b:?}");
    }
    let last = b.last().unwrap();
    assert!(last.0.is_infinite());
    assert_eq!(last.1, get(m, &format!("{name}_count")), "{name}");
    b
}

#[test]
fn counters_move_with_traffic_across_workers() {
    let (server, metrics) = start(&[
        "--workers",
        "2",
        "--blocking-threads",
        "2",
        "--header-timeout",
        "1",
    ]);
    server.wait_for_workers(2, Duration::from_secs(10));
    let before = scrape(metrics);
    assert_eq!(get(&before, "m0serve_workers"), 2.0);
    assert_eq!(get(&before, "m0serve_requests_total{status=\"2xx\"}"), 0.0);
    for _ in 0..30 {
        assert_eq!(server.get("/status?code=200").status, 200);
    }
    for _ in 0..4 {
        assert_eq!(server.get("/nowhere").status, 404);
    }
    // An answer of the loop's own: a malformed request gets 400 and counts as 4xx.
    let bad = server.request(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n");
    assert_eq!(bad.status, 400);
    // A head not finished within --header-timeout: the loop's 408, a 4xx too.
    let mut slow = server.connect();
    slow.send(b"GET / HTTP/1.1\r\nHost:");
    assert_eq!(slow.read_response().status, 408);
    drop(slow);
    // Garbage on the metrics port is answered (400) but is not the app's traffic.
    let mut junk = Conn::connect(metrics);
    junk.send(b"NOT HTTP\r\n\r\n");
    assert_eq!(junk.read_response().status, 400);
    // A slow one, long enough to land in a known bucket.
    assert_eq!(server.get("/slow?secs=0.3").status, 200);

    // A handler writes the app time, the duration, then its busy time: wait for all.
    let busy_sum = |m: &BTreeMap<String, f64>| -> f64 {
        m.iter()
            .filter(|(k, _)| k.starts_with("m0serve_handler_busy_seconds_total{"))
            .map(|(_, v)| *v)
            .sum()
    };
    let after = scrape_until(metrics, |m| {
        get(m, "m0serve_app_seconds_count") >= 35.0
            && get(m, "m0serve_request_duration_seconds_count") >= 35.0
            && (busy_sum(m) - get(m, "m0serve_app_seconds_sum")).abs() < 1e-6
    });
    assert_eq!(get(&after, "m0serve_requests_total{status=\"2xx\"}"), 31.0);
    assert_eq!(get(&after, "m0serve_requests_total{status=\"4xx\"}"), 6.0);
    assert_eq!(get(&after, "m0serve_requests_total{status=\"5xx\"}"), 0.0);
    // The app ran 35 times: every histogram of the handlers saw each of them.
    for name in [
        "m0serve_request_duration_seconds",
        "m0serve_queue_wait_seconds",
        "m0serve_app_seconds",
    ] {
        assert_eq!(get(&after, &format!("{name}_count")), 35.0, "{name}");
        buckets(&after, name);
    }
    let app = buckets(&after, "m0serve_app_seconds");
    let at = |le: f64| app.iter().find(|b| b.0 == le).unwrap().1;
    // Exactly one request took 0.3 s: above the 0.25 s bucket, within the 0.5 s one.
    assert_eq!(at(0.5) - at(0.25), 1.0, "{app:?}");
    assert!(get(&after, "m0serve_app_seconds_sum") >= 0.3);
    assert!(
        get(&after, "m0serve_request_duration_seconds_sum")
            >= get(&after, "m0serve_app_seconds_sum")
    );
    // One busy-time series per handler thread of each worker, adding up to the app time.
    let busy: Vec<(&String, &f64)> = after
        .iter()
        .filter(|(k, _)| k.starts_with("m0serve_handler_busy_seconds_total{"))
        .collect();
    assert_eq!(busy.len(), 4, "{busy:?}");
    for w in ["0", "1"] {
        for h in ["0", "1"] {
            let key =
                format!("m0serve_handler_busy_seconds_total{{worker=\"{w}\",handler=\"{h}\"}}");
            assert!(after.contains_key(&key), "{key}");
        }
    }
    assert!((busy_sum(&after) - get(&after, "m0serve_app_seconds_sum")).abs() < 1e-6);

    // The gauge sees open client connections (not the scrape's own).
    let mut held: Vec<Conn> = (0..3).map(|_| server.connect()).collect();
    for c in &mut held {
        c.send(b"GET /status?code=200 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.read_response().status, 200);
    }
    let m = scrape_until(metrics, |m| get(m, "m0serve_connections") == 3.0);
    assert_eq!(get(&m, "m0serve_connections"), 3.0);
    drop(held);
    assert!(
        wait_until(Duration::from_secs(5), || get(
            &scrape(metrics),
            "m0serve_connections"
        ) == 0.0),
        "the connections gauge did not go back to 0"
    );
    server.assert_no_panic();
}

#[test]
fn answers_while_every_handler_is_busy() {
    // No queue-wait budget: the queued request waits the slow one out (and its wait is
    // measured).
    let (server, metrics) = start(&[
        "--blocking-threads",
        "1",
        "--max-blocking-threads",
        "1",
        "--max-queue-wait",
        "0",
    ]);
    let mut slow = server.connect();
    slow.send(b"GET /slow?secs=3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut queued = server.connect();
    queued.send(b"GET /status?code=200 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    // Both are in: the slow one runs, the other waits for the only handler.
    let during = scrape_until(metrics, |m| get(m, "m0serve_connections") == 2.0);
    assert_eq!(get(&during, "m0serve_connections"), 2.0);
    let t = Instant::now();
    let during = scrape(metrics);
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "the scrape waited for the app ({:?})",
        t.elapsed()
    );
    assert_eq!(get(&during, "m0serve_requests_total{status=\"2xx\"}"), 0.0);
    // /healthz answers too, and other paths are 404, all on the loop.
    let mut c = Conn::connect(metrics);
    c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /other HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.read_response().body_text(), "ok\n");
    assert_eq!(c.read_response().status, 404);
    assert_eq!(slow.read_response().status, 200);
    assert_eq!(queued.read_response().status, 200);
    let after = scrape_until(metrics, |m| get(m, "m0serve_app_seconds_count") >= 2.0);
    assert_eq!(get(&after, "m0serve_requests_total{status=\"2xx\"}"), 2.0);
    // The queued request waited in the ring for the slow one.
    let wait = buckets(&after, "m0serve_queue_wait_seconds");
    assert_eq!(
        wait.iter().find(|b| b.0 == 1.0).unwrap().1,
        1.0,
        "one request waited under 1 s, the other over: {wait:?}"
    );
    server.assert_no_panic();
}

#[test]
fn counts_survive_a_dead_worker_and_restarts_are_counted() {
    let (server, metrics) = start(&["--workers", "1"]);
    let pids = server.wait_for_workers(1, Duration::from_secs(10));
    for _ in 0..5 {
        assert_eq!(server.get("/status?code=200").status, 200);
    }
    scrape_until(metrics, |m| get(m, "m0serve_app_seconds_count") >= 5.0);
    // SAFETY: kill(2) on the worker, a child of the server we started.
    unsafe { libc::kill(pids[0] as libc::pid_t, libc::SIGKILL) };
    assert!(server.wait_for_log("starting a replacement", Duration::from_secs(10)));
    let ok = wait_until(Duration::from_secs(10), || {
        let p = server.worker_pids();
        p.len() == 1 && p != pids && server.get("/status?code=200").status == 200
    });
    assert!(ok, "{}", server.log_text());
    let m = scrape_until(metrics, |m| get(m, "m0serve_app_seconds_count") >= 6.0);
    assert_eq!(get(&m, "m0serve_worker_restarts_total"), 1.0);
    assert_eq!(get(&m, "m0serve_workers"), 1.0);
    // The dead worker's five and the new one's requests (at least one) are all there.
    assert!(get(&m, "m0serve_requests_total{status=\"2xx\"}") >= 6.0);
    server.assert_no_panic();
}

#[test]
fn inline_mode_counts_too() {
    let (server, metrics) = start(&["--blocking-threads", "0"]);
    for _ in 0..3 {
        assert_eq!(server.get("/status?code=200").status, 200);
    }
    let m = scrape_until(metrics, |m| get(m, "m0serve_app_seconds_count") >= 3.0);
    assert_eq!(get(&m, "m0serve_requests_total{status=\"2xx\"}"), 3.0);
    assert_eq!(get(&m, "m0serve_app_seconds_count"), 3.0);
    server.assert_no_panic();
}

#[test]
fn a_bad_metrics_address_names_the_flag() {
    let out = run_to_exit(
        &[
            "hello:app",
            "--metrics-port",
            "9999",
            "--metrics-address",
            "not-an-ip",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--metrics-address"), "{}", out.stderr);
}

#[test]
fn a_reload_with_more_handler_threads_than_counted_serves_on() {
    // The master sized the shared counters for one handler thread per worker; after the
    // --config file asks for three and a SIGHUP, the new worker serves with all three and
    // counts what it can.
    let tmp = TempDir::new("metrics-conf");
    let conf = tmp.path.join("m0serve.conf");
    std::fs::write(&conf, "--blocking-threads 1\n--max-blocking-threads 1\n").unwrap();
    let (server, metrics) = start(&["--config", conf.to_str().unwrap()]);
    std::fs::write(&conf, "--blocking-threads 3\n--max-blocking-threads 3\n").unwrap();
    server.signal(libc::SIGHUP);
    assert!(
        server.wait_for_log("reload done", Duration::from_secs(15)),
        "{}",
        server.log_text()
    );
    assert!(server.log_text().contains("room for 1 handler thread(s)"));
    let mut conns: Vec<Conn> = (0..6).map(|_| server.connect()).collect();
    for c in &mut conns {
        c.send(b"GET /slow?secs=0.2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    }
    for c in &mut conns {
        assert_eq!(c.read_response().status, 200);
    }
    let m = scrape_until(metrics, |m| {
        get(m, "m0serve_requests_total{status=\"2xx\"}") >= 1.0
    });
    assert!(get(&m, "m0serve_requests_total{status=\"2xx\"}") >= 1.0);
    server.assert_no_panic();
}

#[test]
fn a_worker_full_of_clients_still_answers_the_metrics_port() {
    let (server, metrics) = start(&["--max-connections", "2"]);
    let mut held: Vec<Conn> = (0..2).map(|_| server.connect()).collect();
    for c in &mut held {
        c.send(b"GET /status?code=200 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.read_response().status, 200);
    }
    // A third client waits in the backlog; the probe does not.
    let mut waiting = server.connect();
    waiting.send(b"GET /status?code=200 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut probe = Conn::connect(metrics);
    probe.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(probe.read_response().body_text(), "ok\n");
    assert_eq!(get(&scrape(metrics), "m0serve_connections"), 2.0);
    drop(held);
    assert_eq!(waiting.read_response().status, 200);
    server.assert_no_panic();
}
