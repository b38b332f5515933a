//! Whole runs against the tests' server: the open loop, turns, and the stall probe's
//! figures in the report.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::args::{parse_url, Args};
use crate::epoll::Epoll;
use crate::report::report;
use crate::run::{drive, new_run, Run};
use crate::stall_probe::{outside_stalls, probe_stalls, Stalls};
use crate::stats::{percentile_of, Counts};
use crate::target::QUIET_STEAL;
use crate::test_server::stalling_server;

/// Holds the tests whose figures are timings (a run against the tests' server, the probe
/// beside spinning threads) one at a time: a run's turn met by another test's spinning
/// threads shows tens of ms that were no part of it. Taken whatever became of the test
/// that held it last.
pub fn one_timed_test_at_a_time() -> MutexGuard<'static, ()> {
    static TIMED: Mutex<()> = Mutex::new(());
    TIMED.lock().unwrap_or_else(PoisonError::into_inner)
}

fn args(addr: SocketAddr, conns: usize, rate: Option<f64>) -> Args {
    Args {
        conns,
        duration: Duration::from_secs(1),
        headers: Vec::new(),
        body_bytes: 0,
        urls: vec![parse_url(&format!("http://{addr}/")).unwrap()],
        rate,
        switch: None,
        stall_probe: false,
        log: None,
        warmup: None,
    }
}

fn counts(run: &Run) -> &Counts {
    &run.targets[0].counts
}

/// The open loop charges a stall to every request it held up: at 1000 requests a
/// second over one connection, a 300 ms stall delays the ~300 requests due during it
/// (their latencies spread over 0-300 ms), so the p90 is over 100 ms; measured from
/// when each request went out (coordinated omission), one request would be slow and
/// the p90 well under 1 ms. The closed loop, run the same way, shows that.
#[test]
fn the_open_loop_counts_latency_from_when_a_request_was_due() {
    let _timed = one_timed_test_at_a_time();
    let stall = Duration::from_millis(300);
    let a = args(stalling_server(100, stall).0, 1, Some(1000.0));
    let mut run = new_run(&a, Epoll::new().unwrap());
    let secs = drive(&mut run, a.duration).unwrap();
    let c = counts(&run);
    assert_eq!(secs, 1.0);
    assert_eq!(c.protocol + c.connect + c.read + c.write, 0);
    let sent = run.schedule.as_ref().unwrap().next;
    assert_eq!(c.requests, sent, "every request sent was answered");
    assert!(
        (990..=1001).contains(&sent),
        "{sent} requests sent at 1000/s for 1 s"
    );
    let p90 = c.latency.percentile_ms(90.0);
    assert!(p90 > 100.0, "p90 {p90} ms");
    assert!(c.latency.max_us >= 290_000, "max {} us", c.latency.max_us);
    // The requests held up went out late: the client itself kept to its schedule.
    assert!(
        c.send_lag.max_us >= 250_000,
        "send lag max {} us",
        c.send_lag.max_us
    );
    assert!(c.send_lag.percentile_ms(50.0) < 1.0);
    let out = report(&run, secs);
    assert!(out.contains("\"unsent\": 0"), "{out}");

    let a = args(stalling_server(100, stall).0, 1, None);
    let mut run = new_run(&a, Epoll::new().unwrap());
    drive(&mut run, a.duration).unwrap();
    let p90 = counts(&run).latency.percentile_ms(90.0);
    assert!(p90 < 100.0, "closed loop p90 {p90} ms");
    assert!(counts(&run).latency.max_us >= 290_000);
}

/// Many connections, most of them idle at any moment: each scheduled request is sent
/// once, on one connection, and nothing else is (the server reads exactly as many
/// requests as were sent, and no connection gets a second response it did not ask for).
#[test]
fn the_open_loop_sends_each_request_once_over_idle_connections() {
    let _timed = one_timed_test_at_a_time();
    let (addr, served) = stalling_server(usize::MAX, Duration::ZERO);
    let a = args(addr, 64, Some(3000.0));
    let mut run = new_run(&a, Epoll::new().unwrap());
    drive(&mut run, a.duration).unwrap();
    let c = counts(&run);
    let sent = run.schedule.as_ref().unwrap().next;
    assert_eq!(c.protocol, 0, "{:?}", c.first_protocol_error);
    assert_eq!(c.connect + c.read + c.write, 0);
    assert!(
        (2990..=3001).contains(&sent),
        "{sent} sent at 3000/s for 1 s"
    );
    assert_eq!(c.requests, sent);
    assert_eq!(served.load(Ordering::Relaxed) as u64, sent);
    assert!(c.latency.percentile_ms(50.0) < 5.0);
}

/// Two servers taking turns of 200 ms at 1000 requests a second for 1.2 s, `conns`
/// connections each: the second holds its 250th request 100 ms, in its second turn.
/// The arguments, and each server's count of requests served.
fn two_servers_in_turns(conns: usize) -> (Args, [Arc<AtomicUsize>; 2]) {
    let (a_addr, a_served) = stalling_server(usize::MAX, Duration::ZERO);
    let (b_addr, b_served) = stalling_server(250, Duration::from_millis(100));
    let mut a = args(a_addr, conns, Some(1000.0));
    a.urls
        .push(parse_url(&format!("http://{b_addr}/")).unwrap());
    a.switch = Some(Duration::from_millis(200));
    a.duration = Duration::from_millis(1200);
    (a, [a_served, b_served])
}

/// Two servers in turns: each gets three turns, the requests of a turn all go to its
/// server, and a stall of the second server shows in that server's turn only.
#[test]
fn targets_take_turns_and_each_turn_has_its_own_figures() {
    let _timed = one_timed_test_at_a_time();
    let (a, [a_served, b_served]) = two_servers_in_turns(8);
    let a_addr = a.urls[0].addr;
    let mut run = new_run(&a, Epoll::new().unwrap());
    let secs = drive(&mut run, a.duration).unwrap();
    for (t, served) in run.targets.iter().zip([&a_served, &b_served]) {
        let c = &t.counts;
        assert_eq!(c.protocol + c.connect + c.read + c.write, 0);
        assert_eq!(
            c.requests,
            served.load(Ordering::Relaxed) as u64,
            "{}",
            t.url
        );
        assert!(
            (590..=610).contains(&c.requests),
            "{}: {}",
            t.url,
            c.requests
        );
        let turns: Vec<u64> = t.turns.iter().map(|u| u.index).collect();
        let requests: usize = t.turns.iter().map(|u| u.requests).sum();
        assert_eq!(requests as u64, c.requests);
        assert!(t.turns.iter().all(|u| (190..=210).contains(&u.requests)));
        if t.url.contains(&a_addr.to_string()) {
            assert_eq!(turns, [0, 2, 4]);
            assert!(t.turns.iter().all(|u| u.max_us < 50_000));
        } else {
            assert_eq!(turns, [1, 3, 5]);
            let max: Vec<u32> = t.turns.iter().map(|u| u.max_us).collect();
            assert!(
                max[1] >= 90_000 && max[0] < 50_000 && max[2] < 50_000,
                "{max:?}"
            );
        }
    }
    for t in &run.targets {
        // The quiet turns' latencies are pooled, and only theirs.
        let quiet = t
            .turns
            .iter()
            .filter(|u| u.steal.is_some_and(|s| s < QUIET_STEAL));
        assert_eq!(t.quiet.count, quiet.map(|u| u.requests as u64).sum::<u64>());
    }
    let out = report(&run, secs);
    assert!(out.starts_with("{\"rate\": 1000, \"switch\": 0.2, \"targets\": [{\"url\""));
    assert!(
        out.contains("\"turns\": [{\"turn\": 1, \"requests\": "),
        "{out}"
    );
}

/// The probe hides only the host's stalls: a server's own 300 ms stall stays in the
/// figures outside stalls, and the report carries both parts.
#[test]
fn a_servers_own_stall_stays_in_the_figures_outside_host_stalls() {
    let _timed = one_timed_test_at_a_time();
    let mut a = args(
        stalling_server(100, Duration::from_millis(300)).0,
        1,
        Some(1000.0),
    );
    a.stall_probe = true;
    let mut run = new_run(&a, Epoll::new().unwrap());
    let stop = AtomicBool::new(false);
    let secs = std::thread::scope(|sc| {
        let probe = sc.spawn(|| probe_stalls(&stop, true));
        let secs = drive(&mut run, a.duration).unwrap();
        stop.store(true, Ordering::Relaxed);
        run.stalls = Some(probe.join().unwrap());
        secs
    });
    let log = run.targets[0].log.as_deref().unwrap();
    assert_eq!(log.len() as u64, counts(&run).requests);
    let stalls = &run.stalls.as_ref().unwrap().spans;
    let mut kept: Vec<u32> = outside_stalls(log, stalls).iter().map(|e| e.1).collect();
    // ~300 requests were held up by the server; the host's own stalls, if any, are short.
    let p90 = percentile_of(&mut kept, 90.0);
    assert!(
        p90 > 100_000,
        "p90 outside host stalls {p90} us ({} stalls)",
        stalls.len()
    );
    let out = report(&run, secs);
    assert!(
        out.contains(", \"outside_stalls\": {\"requests\": "),
        "{out}"
    );
    assert!(out.contains(", \"host_stalls\": {\"count\": "), "{out}");
}

/// With the probe each turn also has its p99 outside the host's stalls. Over one
/// connection the second server's 100 ms hold delays the ~100 requests due during it;
/// taken for a host stall, it leaves that turn (and the neighbours its window reaches)
/// nothing slow, or nothing at all (null), while its p99 shows the hold.
#[test]
fn each_turn_has_its_p99_outside_the_host_stalls() {
    let _timed = one_timed_test_at_a_time();
    let (mut a, _) = two_servers_in_turns(1);
    a.stall_probe = true;
    let mut run = new_run(&a, Epoll::new().unwrap());
    let secs = drive(&mut run, a.duration).unwrap();
    // The hold, as the probe would have seen it had it been the host's: from when the
    // longest-waiting request fell due to when it was answered (on a busy host, more than
    // the server's 100 ms).
    let &(due, us) = run.targets[1]
        .log
        .as_ref()
        .unwrap()
        .iter()
        .max_by_key(|e| e.1)
        .unwrap();
    assert!(us >= 90_000);
    let held = due + Duration::from_micros(u64::from(us));
    run.stalls = Some(Stalls {
        spans: vec![(due, held)],
        realtime: true,
        run_delay: true,
        waited: Duration::ZERO,
    });
    let out = report(&run, secs);
    let turns: Vec<(f64, Option<f64>)> = out
        .split("{\"turn\": ")
        .skip(1)
        .map(|t| {
            let num = |key: &str| -> Option<f64> {
                let at = t.find(key).unwrap() + key.len();
                let end = t[at..].find([',', '}']).unwrap();
                t[at..at + end].parse().ok()
            };
            (num("\"p99_ms\": ").unwrap(), num("\"p99_outside_ms\": "))
        })
        .collect();
    assert_eq!(turns.len(), 6, "{out}");
    // Target a's three turns, then b's: b's second held the requests for 100 ms. The
    // bounds are half the hold, not what a quiet host gives (well under 1 ms), so that a
    // busy host's own hiccups do not fail the test: a held request left in, or the hold
    // counted in another turn, still does.
    for (i, &(p99, outside)) in turns.iter().enumerate() {
        if i == 4 {
            assert!(p99 >= 50.0 && outside.is_none_or(|o| o < 50.0), "{out}");
        } else {
            assert!(p99 < 50.0 && outside.is_some_and(|o| o < 50.0), "{out}");
        }
    }
}

/// A turn's figures are its own, and only a quiet turn's latencies join the pool.
#[test]
fn a_turn_closes_with_its_percentiles_and_only_quiet_turns_are_pooled() {
    let (addr, _) = stalling_server(usize::MAX, Duration::ZERO);
    let run = new_run(&args(addr, 1, Some(1.0)), Epoll::new().unwrap());
    let mut t = run.targets.into_iter().next().unwrap();
    for (index, steal) in [(0, Some(0.01)), (1, Some(0.05)), (2, None), (3, Some(0.0))] {
        t.turn.extend((1..=100).map(|us| us * (index + 1)));
        t.close_turn(u64::from(index), steal);
    }
    let figures: Vec<(u32, u32, u32, usize)> = t
        .turns
        .iter()
        .map(|u| (u.p50_us, u.p99_us, u.max_us, u.requests))
        .collect();
    assert_eq!(
        figures,
        [
            (50, 99, 100, 100),
            (100, 198, 200, 100),
            (150, 297, 300, 100),
            (200, 396, 400, 100)
        ]
    );
    // Turns 0 and 3: 1..=100 us and 4..=400 us.
    assert_eq!(t.quiet.count, 200);
    assert_eq!(t.quiet.max_us, 400);
    // The 50th of the 200: 1..=40 and 4, 8, .., 40.
    assert_eq!(t.quiet.percentile_ms(25.0), 0.04);
}
