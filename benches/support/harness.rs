//! What the two benches share (each includes this file with `#[path]`): how long a part or
//! a variant is measured, and the timed loop that measures it.

use std::time::{Duration, Instant};

/// Timed repetitions per part or variant; the median is reported.
pub const REPS: usize = 5;
/// Warm-up before the repetitions.
pub const WARM_UP: Duration = Duration::from_millis(200);

/// Runs `f` for the warm-up, then `REPS` repetitions of `rep_target` each, calling it in
/// batches of `batch` between two clock reads (a read per batch costs well under a
/// nanosecond a call, and a part slowed by other work on the machine still takes its set
/// time); ns per call of each repetition, sorted.
pub fn measure(rep_target: Duration, batch: u64, mut f: impl FnMut()) -> Vec<f64> {
    let mut run_for = |d: Duration| {
        let t = Instant::now();
        let mut calls = 0u64;
        while t.elapsed() < d {
            for _ in 0..batch {
                f();
            }
            calls += batch;
        }
        t.elapsed().as_nanos() as f64 / calls as f64
    };
    run_for(WARM_UP);
    let mut reps: Vec<f64> = (0..REPS).map(|_| run_for(rep_target)).collect();
    reps.sort_by(f64::total_cmp);
    reps
}

/// The median of sorted repetitions.
pub fn median(reps: &[f64]) -> f64 {
    reps[reps.len() / 2]
}
