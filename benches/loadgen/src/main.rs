//! m0load: a one-thread HTTP/1.1 load generator for scripts/bench.py, closed-loop or at a
//! fixed rate.
//!
//! Closed loop (the default), it does what `wrk -t1` does (N keep-alive connections, one request outstanding on each,
//! the next sent as soon as a response is complete) at a lower cost a response, so that a
//! large response measures the server and not the client: wrk reads 8 KiB a `read` and asks
//! `FIONREAD` between reads, 20 system calls for a 64 KiB response; m0load waits on
//! level-triggered epoll and reads up to 256 KiB a wake-up, one `read` and one `write` a
//! response when the response has arrived whole. Bodies are counted, not kept.
//!
//!     m0load -c 256 -d 10 [--rate R] [-H 'Name: value']... [--body-bytes N] http://127.0.0.1:8000/path
//!
//! Prints one JSON object: requests, seconds, rps, bytes read, non_2xx, errors, and
//! latency (send of a request to the end of its response; closed loop, like wrk's).
//!
//! With `--rate R` it is an open loop instead: request k is due at start + k/R, whatever
//! the server has answered, and goes out on the connection that has been idle longest (one
//! request outstanding a connection, as a browser's keep-alive connection has). A request
//! that finds no connection idle waits for one. Its latency runs from when it was due, not
//! from when it went out, so a stall of the server is charged to every request it held up
//! (no coordinated omission, as wrk2 measures; oha's `--latency-correction` counts from when
//! its timer let a request go, up to a tick of tokio's 1 ms timer after it was due, and lets
//! them go in bursts). This client waits for the next due time with `epoll_pwait2` and a
//! 1 ns timer slack, and sends each request at its own time; how late it sent (for any
//! reason: its own scheduling, or no idle connection) is reported beside the latency, so a
//! run whose client fell behind shows it. Its clock starts once every connection is up (2 s
//! at most), so connecting is no part of it. After the duration no request is sent, and
//! those outstanding get up to 2 s more to be answered (later ones count as timeouts).
//!
//! With several URLs and `--switch S`, the servers take turns: the schedule runs on, and the
//! requests due in turn t go to server t mod n, each server with `-c` connections of its own
//! (idle through the others' turns). Each server's figures are its own, and each turn's
//! p50/p99/max and the host's steal during it (/proc/stat) are kept; the latencies of its
//! turns with under 2 % steal are also pooled. So servers measured together meet the same
//! minutes of a host whose hypervisor takes CPU in bursts.
//!
//! With `--stall-probe` (open loop only) a second thread naps 1 ms at a time and notes each
//! wake-up 150 us or more late: a stretch when this host ran nothing of ours (a hypervisor's
//! steal, another tenant). It runs as a real-time thread where it may (`SCHED_FIFO`), and
//! in either case leaves out of its lateness the time it waited for a CPU while this machine
//! ran its other threads (its schedstat run delay): that wait is the load's, the servers'
//! among it, not the host's. Each target then also reports the percentiles of its requests
//! due outside those stretches (from 2 ms before one was noticed, since it began up to a
//! nap before, to 2 ms plus twice its noticed length after it, while the backlog it left
//! drains), and the stretches themselves, whose lengths are lower bounds. The probe sees a
//! stall that holds up the end of one of its naps on the CPU it runs on: every one over
//! 1.15 ms there, a shorter one in proportion; a stall of the other CPU alone stays in the
//! figures. With neither the real-time class nor the run delay it says so and reports no
//! figures outside stalls. It costs about 16 us of CPU a wake-up on a virtual machine, 1.6 %
//! of a CPU. It shows what part of a tail was the host's, in a run whose servers met
//! different minutes.
//!
//! With `--warmup S` (open loop only) it first sends at the rate for S seconds (with
//! `--switch`, in turns as the run does) on the connections the run then uses, waits for
//! those requests' responses, and starts the schedule again: the figures leave out the
//! warm-up's requests (reported as `warmup_requests`; its errors stay counted), and with
//! them a fresh connection's first requests, which every server answers late while it takes
//! in a burst of new connections (0.5-13 ms for the first 20-30 ms of a run at 256
//! connections here).
//!
//! With `--log FILE` (open loop only) it also writes, once the run is over, one line a
//! request answered: `TARGET DUE_NS LATENCY_US`, the target's index in the URLs given, when
//! the request was due on the CLOCK_MONOTONIC clock in nanoseconds (the clock `perf record
//! -k CLOCK_MONOTONIC` stamps its events with), and its latency. So a script can set each
//! request beside what else the machine ran then (scripts/bench.py `--trace-others`).
//!
//! Content-Length bodies and bodiless statuses are read (an interim 1xx is passed over); a
//! chunked response is an error that names itself, so the run fails rather than measuring
//! something else. Connects are non-blocking, so a server slow to accept holds up neither
//! the other connections nor the end of the run; a lost connection is opened again.
//!
//! The modules: `args` (the command line), `conn` (a connection, and writing a request on
//! it), `response` (reading a response), `epoll`, `run` (the connections' events and the
//! loop that drives a run), `schedule` (the open loop's due times and turns), `target` (one
//! server's share of a run, and its turns), `stats` (histograms and counts),
//! `stall_probe` (`--stall-probe`), `log` (`--log`) and `report` (the JSON printed, which
//! scripts/bench.py reads). `tests` runs whole runs against `test_server`, which
//! tests/ shares.

mod args;
mod conn;
mod epoll;
mod log;
mod report;
mod response;
mod run;
mod schedule;
mod stall_probe;
mod stats;
mod target;
#[cfg(test)]
mod test_server;
#[cfg(test)]
mod tests;

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::args::parse_args;
use crate::epoll::Epoll;
use crate::log::write_log;
use crate::report::report;
use crate::run::{drive, new_run};
use crate::schedule::requests_due;
use crate::stall_probe::probe_stalls;

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("m0load: {e}");
            return ExitCode::from(2);
        }
    };
    if args.rate.is_some() {
        // Timed waits end when they are due, not up to 50 us later (the default slack):
        // the open loop sends each request at its own time.
        // SAFETY: PR_SET_TIMERSLACK takes an integer argument and no pointers.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    }
    let ep = match Epoll::new() {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("m0load: epoll_create1: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut run = new_run(&args, ep);
    let stop = Arc::new(AtomicBool::new(false));
    let probe = args.stall_probe.then(|| {
        let stop = stop.clone();
        std::thread::spawn(move || probe_stalls(&stop, true))
    });
    let driven = match args.warmup {
        Some(w) => {
            if let Some(s) = run.schedule.as_mut() {
                s.total = requests_due(s.rate, w);
            }
            drive(&mut run, w).and_then(|_| {
                run.restart(args.duration);
                drive(&mut run, args.duration)
            })
        }
        None => drive(&mut run, args.duration),
    };
    if let Some(probe) = probe {
        stop.store(true, Ordering::Relaxed);
        match probe.join() {
            Ok(s) if s.realtime || s.run_delay => run.stalls = Some(s),
            Ok(_) => eprintln!(
                "m0load: --stall-probe could neither run real-time nor read its run delay \
                 (/proc/thread-self/schedstat): its late wake-ups would be this machine's own \
                 load, so no figures outside stalls are reported"
            ),
            Err(_) => eprintln!("m0load: the stall probe failed: no figures outside stalls"),
        }
    }
    let secs = match driven {
        Ok(secs) => secs,
        Err(e) => {
            eprintln!("m0load: epoll_pwait2: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", report(&run, secs));
    if let Some(path) = &args.log {
        let written = std::fs::File::create(path)
            .map(io::BufWriter::new)
            .and_then(|mut f| write_log(&run, &mut f).and_then(|()| f.flush()));
        if let Err(e) = written {
            eprintln!("m0load: --log {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    let failed = run
        .targets
        .iter()
        .any(|t| t.counts.requests == 0 || t.counts.protocol > 0);
    if failed {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
