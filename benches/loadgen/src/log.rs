//! `--log FILE`: each answered request's due time and latency, written after the run.

use std::io::{self, Write};
use std::time::Instant;

use crate::run::Run;

/// `--log`: each target's answered requests, one line each, `TARGET DUE_NS LATENCY_US`,
/// in the order they were answered, the due time on the CLOCK_MONOTONIC clock.
pub fn write_log(run: &Run, out: &mut impl Write) -> io::Result<()> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // `Instant` reads CLOCK_MONOTONIC on Linux: one reading of each places every due time.
    let now = Instant::now();
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mono_now = ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128;
    for (i, t) in run.targets.iter().enumerate() {
        for &(due, us) in t.log.as_deref().unwrap_or(&[]) {
            let due_ns = mono_now - now.saturating_duration_since(due).as_nanos() as i128;
            writeln!(out, "{i} {due_ns} {us}")?;
        }
    }
    Ok(())
}
