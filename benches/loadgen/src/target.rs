//! One server of a run (a target) and its turns (`--switch`).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use crate::stats::{percentile_of, Counts, Histogram};

/// One server's share of a run: its requests, connections and figures.
pub struct Target {
    pub url: String,
    pub addr: SocketAddr,
    pub req: Vec<u8>,
    pub counts: Counts,
    /// Open loop: its connected connections with nothing outstanding, longest idle first.
    /// An entry whose connection has since been lost or used is passed over.
    pub idle: VecDeque<usize>,
    /// Latencies (µs) of the requests of its current turn (`--switch`).
    pub turn: Vec<u32>,
    /// Its turns so far, closed.
    pub turns: Vec<Turn>,
    /// The latencies of its quiet turns (under `QUIET_STEAL` steal), pooled.
    pub quiet: Histogram,
    /// With `--stall-probe` or `--log`: each request's due time and latency (us), to be
    /// judged against the host's stalls, or written out, once the run is over.
    pub log: Option<Vec<(Instant, u32)>>,
    /// `--warmup`: the requests it answered in the warm-up, which its figures leave out.
    pub warmup_requests: u64,
}

/// A turn is quiet when the hypervisor took under this share of all CPUs' time during it:
/// its latencies are also pooled with the target's other quiet turns'.
pub const QUIET_STEAL: f64 = 0.02;

/// One turn of a target (`--switch`): the figures of the requests due in it.
pub struct Turn {
    /// Which turn of the whole run (0, 1, ...): target `index % targets`.
    pub index: u64,
    pub requests: usize,
    pub p50_us: u32,
    pub p99_us: u32,
    pub max_us: u32,
    /// The share of all CPUs' time the hypervisor gave to others during the turn
    /// (/proc/stat's steal), where it could be read.
    pub steal: Option<f64>,
}

impl Target {
    /// Closes the current turn, whose index is `index`.
    pub fn close_turn(&mut self, index: u64, steal: Option<f64>) {
        let mut lat = std::mem::take(&mut self.turn);
        if steal.is_some_and(|s| s < QUIET_STEAL) {
            for &us in &lat {
                self.quiet.record(u64::from(us));
            }
        }
        self.turns.push(Turn {
            index,
            requests: lat.len(),
            p50_us: percentile_of(&mut lat, 50.0),
            p99_us: percentile_of(&mut lat, 99.0),
            max_us: lat.iter().copied().max().unwrap_or(0),
            steal,
        });
        lat.clear();
        self.turn = lat;
    }
}
