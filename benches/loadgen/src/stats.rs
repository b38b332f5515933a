//! The figures a run keeps: latency histograms, percentiles of a list, and each target's
//! counts of requests, bytes and errors.

/// Latencies in microseconds, one bucket a microsecond up to a second (the last bucket
/// holds everything longer): recording one costs an increment, nothing grows during a run.
pub struct Histogram {
    pub buckets: Vec<u64>,
    pub count: u64,
    pub sum_us: u64,
    pub max_us: u64,
}

const HISTOGRAM_US: usize = 1_000_000;

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            // Zeroed memory comes from the kernel untouched: only used buckets cost a page.
            buckets: vec![0; HISTOGRAM_US + 1],
            count: 0,
            sum_us: 0,
            max_us: 0,
        }
    }

    pub fn record(&mut self, us: u64) {
        self.buckets[(us as usize).min(HISTOGRAM_US)] += 1;
        self.count += 1;
        self.sum_us += us;
        self.max_us = self.max_us.max(us);
    }

    /// The latency at percentile `p` (0-100) in ms; 0 when nothing was recorded.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (us, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return if us == HISTOGRAM_US {
                    self.max_us as f64 / 1000.0
                } else {
                    us as f64 / 1000.0
                };
            }
        }
        self.max_us as f64 / 1000.0
    }

    pub fn avg_ms(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_us as f64 / self.count as f64 / 1000.0
        }
    }
}

/// The latency at percentile `p` (0-100) of `lat` (reordered); 0 for none.
pub fn percentile_of(lat: &mut [u32], p: f64) -> u32 {
    if lat.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * lat.len() as f64).ceil().max(1.0) as usize - 1;
    *lat.select_nth_unstable(rank).1
}

pub struct Counts {
    pub requests: u64,
    /// How late each request was sent after it was due (open loop).
    pub send_lag: Histogram,
    pub bytes: u64,
    pub non_2xx: u64,
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    /// Protocol errors: what the server sent cannot be read as the response asked for.
    pub protocol: u64,
    pub latency: Histogram,
    pub first_protocol_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_gives_percentiles_and_the_maximum() {
        let mut h = Histogram::new();
        assert_eq!(h.percentile_ms(99.0), 0.0);
        for us in 1..=100 {
            h.record(us);
        }
        h.record(5_000_000);
        assert_eq!(h.percentile_ms(50.0), 0.051);
        assert_eq!(h.percentile_ms(99.0), 0.1);
        assert_eq!(h.percentile_ms(100.0), 5000.0);
        assert_eq!(h.max_us, 5_000_000);
    }
}
