//! `--stall-probe`: a thread that notes the stretches this host ran nothing of ours, and
//! the requests due outside them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The probe's nap, and how late a wake-up from it must be to count as a host stall.
/// Each wake-up costs a virtual machine about 16 us: 1 ms naps take 1.6 % of a CPU.
const PROBE_NAP: Duration = Duration::from_millis(1);
const PROBE_LATE: Duration = Duration::from_micros(150);

/// What `--stall-probe`'s thread saw.
pub struct Stalls {
    /// Each stretch the host ran nothing of ours, as (start, end): from when the nap it
    /// held up was due to end (it may have begun up to a nap before) to the wake-up.
    pub spans: Vec<(Instant, Instant)>,
    /// The probe ran as a real-time thread (`SCHED_FIFO`), ahead of every other thread of
    /// this machine.
    pub realtime: bool,
    /// The time it waited for a CPU could be read (schedstat) and was taken off its
    /// lateness. With neither this nor `realtime` its spans are mostly this machine's own
    /// contention, and are not used.
    pub run_delay: bool,
    /// The time it waited for a CPU, in all: what was taken off.
    pub waited: Duration,
}

/// The time the calling thread has spent runnable but waiting for a CPU, from its
/// schedstat (`/proc/thread-self/schedstat`, opened by that thread).
fn run_delay(schedstat: &std::fs::File) -> Option<Duration> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 96];
    let n = schedstat.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let ns: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// `--stall-probe`'s thread: naps `PROBE_NAP` at a time until `stop`, and notes each
/// stretch it woke `PROBE_LATE` or more late for, not counting the time it waited for a
/// CPU this machine gave to another of its threads. A wake-up late for that is this
/// machine's load, the servers' own work among it, and not the host's: as a plain thread
/// the probe woke 150 us to 2 ms late some 60 times in 10 s beside a server at 27 000
/// requests a second, nearly every time for its run queue; as a real-time one, once.
/// `want_realtime` false keeps it in the normal class (the tests' use).
pub fn probe_stalls(stop: &AtomicBool, want_realtime: bool) -> Stalls {
    // Timed waits end when they are due, not up to 50 us later (this thread's own slack).
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and no pointers.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: pid 0 names the calling thread; `param` is a valid sched_param that outlives
    // the call. Without the privilege it fails and changes nothing.
    let realtime =
        want_realtime && unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0;
    let schedstat = std::fs::File::open("/proc/thread-self/schedstat")
        .ok()
        .filter(|f| run_delay(f).is_some());
    let delay = || schedstat.as_ref().and_then(run_delay).unwrap_or_default();
    let mut spans = Vec::new();
    let first = delay();
    // Relaxed: `stop` carries no data; the caller's join() publishes what was seen.
    while !stop.load(Ordering::Relaxed) {
        let waited = delay();
        let due = Instant::now() + PROBE_NAP;
        std::thread::sleep(PROBE_NAP);
        let woke = Instant::now();
        let late = woke
            .saturating_duration_since(due)
            .saturating_sub(delay().saturating_sub(waited));
        if late >= PROBE_LATE {
            spans.push((woke - late, woke));
        }
    }
    Stalls {
        spans,
        realtime,
        run_delay: schedstat.is_some(),
        waited: delay().saturating_sub(first),
    }
}

/// The requests in `log` due outside every stall's window: from 2 ms
/// before its noticed start (it began up to a nap earlier, and requests then in flight met
/// it) to 2 ms plus twice its noticed length after it ends (the backlog it left drains at
/// the spare capacity, about half the rate at a load at half a server's maximum).
pub fn outside_stalls(
    log: &[(Instant, u32)],
    stalls: &[(Instant, Instant)],
) -> Vec<(Instant, u32)> {
    let mut windows: Vec<(Instant, Instant)> = stalls
        .iter()
        .map(|&(s, e)| {
            let from = s.checked_sub(Duration::from_millis(2)).unwrap_or(s);
            (from, e + Duration::from_millis(2) + 2 * (e - s))
        })
        .collect();
    windows.sort_unstable();
    let mut merged: Vec<(Instant, Instant)> = Vec::with_capacity(windows.len());
    for (s, e) in windows {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    log.iter()
        .filter(|&&(due, _)| {
            // The last window starting at or before `due` is the only one that can hold it.
            let i = merged.partition_point(|w| w.0 <= due);
            i == 0 || merged[i - 1].1 < due
        })
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request is left out when it was due from 2 ms before a stall to 2 ms plus twice
    /// the stall's length after it, and only then; overlapping windows join, and a window
    /// inside another does not cut the outer one short.
    #[test]
    fn requests_due_in_a_stalls_window_are_left_out() {
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        // One request every 100 us for 20 ms, each with its own latency (its index).
        let log: Vec<(Instant, u32)> = (0..200).map(|k| (at(k * 100), k as u32)).collect();
        // 5.0-5.5 ms: left out 3.0-8.5 ms. 12.0-12.1 and 14.0-14.2: 10.0-14.3 and 12.0-16.6.
        let stalls = [
            (at(14_000), at(14_200)),
            (at(5_000), at(5_500)),
            (at(12_000), at(12_100)),
        ];
        let lat =
            |kept: Vec<(Instant, u32)>| kept.into_iter().map(|(_, us)| us).collect::<Vec<u32>>();
        let kept = lat(outside_stalls(&log, &stalls));
        let expect: Vec<u32> = (0..200)
            .filter(|k| !(30..=85).contains(k) && !(100..=166).contains(k))
            .collect();
        assert_eq!(kept, expect);
        // A stall at the very start (nothing to subtract from) and none at all.
        assert_eq!(
            outside_stalls(&log, &[(t0, at(100))]).first().map(|e| e.1),
            Some(24)
        );
        assert_eq!(outside_stalls(&log, &[]).len(), 200);
        // 1.0-3.0 ms leaves out up to 9.0 ms; 2.5-2.6 ms, inside it, only up to 4.8 ms.
        let nested = lat(outside_stalls(
            &log,
            &[(at(1_000), at(3_000)), (at(2_500), at(2_600))],
        ));
        assert_eq!(nested, (91..200).collect::<Vec<u32>>());
    }

    /// The probe's wait for a CPU that this machine's own threads hold is no host stall:
    /// a probe in the normal class at nice 19, on one CPU with two threads spinning there,
    /// waits for that CPU for much of a second and notes (nearly) nothing.
    #[test]
    fn a_wait_for_a_cpu_busy_with_this_machines_threads_is_no_stall() {
        let _timed = crate::tests::one_timed_test_at_a_time();
        // SAFETY: sched_getcpu takes no arguments.
        let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
        let pin = move || {
            // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes within it; pid
            // 0 names the calling thread, and the size is the set's own.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
        };
        let stop = AtomicBool::new(false);
        let stalls = std::thread::scope(|sc| {
            for _ in 0..2 {
                sc.spawn(|| {
                    pin();
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                });
            }
            let probe = sc.spawn(|| {
                pin();
                // SAFETY: who 0 names the calling thread (PRIO_PROCESS takes a thread id on
                // Linux); raising one's own nice value needs no privilege.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
                probe_stalls(&stop, false)
            });
            std::thread::sleep(Duration::from_secs(1));
            stop.store(true, Ordering::Relaxed);
            probe.join().unwrap()
        });
        assert!(!stalls.realtime && stalls.run_delay);
        // The spinners held the CPU it wanted (about 630 ms of the second here); without
        // the run delay taken off, some 110 late wake-ups came to as much.
        assert!(
            stalls.waited > Duration::from_millis(200),
            "waited {:?}",
            stalls.waited
        );
        let total: Duration = stalls.spans.iter().map(|&(s, e)| e - s).sum();
        assert!(
            stalls.spans.len() < 20 && total < Duration::from_millis(50),
            "{} stalls, {total:?} in all",
            stalls.spans.len()
        );
    }
}
