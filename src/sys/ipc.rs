//! The master-worker protocol: what a worker is handed across its exec (one environment
//! variable naming its descriptors) and what it says back on its status pipe (one byte a
//! message).

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

/// Set in a worker's environment by the master; its presence is what makes the process a
/// worker. Removed by the worker at once, so nothing the app starts mistakes itself for one.
pub const WORKER_ENV: &str = "M0SERVE_INTERNAL_WORKER_FDS";

/// `--metrics-port`: the metrics socket, the shared counters, and the worker's slot in
/// them (`None`: none was free; it answers scrapes but counts nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsFds {
    pub listener: RawFd,
    pub region: RawFd,
    pub slot: Option<usize>,
}

/// What a worker gets across its exec, as [`WORKER_ENV`] carries it:
/// `LISTENER;LISTENER...,STATUS,HEARTBEAT_MS,METRICS_LISTENER,METRICS_REGION,SLOT,CPU`
/// (`HEARTBEAT_MS` 0: no systemd watchdog; the metrics fields `-` without `--metrics-port`;
/// `CPU` `-` without `--cpu-affinity`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerEnv {
    pub listeners: Vec<RawFd>,
    /// The status pipe's write end.
    pub status: RawFd,
    /// How often the systemd watchdog wants a heartbeat, when there is one.
    pub heartbeat: Option<Duration>,
    pub metrics: Option<MetricsFds>,
    /// `--cpu-affinity`: the CPU this worker pins itself to.
    pub cpu: Option<usize>,
}

impl WorkerEnv {
    pub fn encode(&self) -> String {
        let listeners: Vec<String> = self.listeners.iter().map(|f| f.to_string()).collect();
        let metrics = match self.metrics {
            Some(m) => format!(
                "{},{},{}",
                m.listener,
                m.region,
                m.slot.map_or("-".to_string(), |s| s.to_string())
            ),
            None => "-,-,-".to_string(),
        };
        format!(
            "{},{},{},{metrics},{}",
            listeners.join(";"),
            self.status,
            self.heartbeat.map_or(0, |w| w.as_millis().max(1)),
            self.cpu.map_or("-".to_string(), |c| c.to_string())
        )
    }

    /// The variable's value, checked: every descriptor a number above 2 (0-2 are the
    /// standard streams, never the master's to hand over).
    pub fn decode(value: &str) -> Result<WorkerEnv, String> {
        let fd = |s: &str| s.parse::<RawFd>().ok().filter(|&f| f > 2);
        let bad = || format!("{WORKER_ENV}={value:?}: not what a master of this version sets");
        let mut fields = value.split(',');
        let (listeners, status) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
        let heartbeat_ms: u64 = fields.next().and_then(|h| h.parse().ok()).unwrap_or(0);
        let metrics = match (fields.next(), fields.next(), fields.next()) {
            (Some(l), Some(r), Some(slot)) => match (fd(l), fd(r)) {
                (Some(listener), Some(region)) => Some(MetricsFds {
                    listener,
                    region,
                    slot: slot.parse().ok(),
                }),
                _ => None,
            },
            _ => None,
        };
        let cpu = fields.next().and_then(|c| c.parse().ok());
        let listeners: Option<Vec<RawFd>> = listeners.split(';').map(fd).collect();
        match (listeners.filter(|l| !l.is_empty()), fd(status)) {
            (Some(listeners), Some(status)) => Ok(WorkerEnv {
                listeners,
                status,
                heartbeat: (heartbeat_ms > 0).then(|| Duration::from_millis(heartbeat_ms)),
                metrics,
                cpu,
            }),
            _ => Err(bad()),
        }
    }

    /// Every descriptor it names.
    pub fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        let metrics = self.metrics.iter().flat_map(|m| [m.listener, m.region]);
        self.listeners
            .iter()
            .copied()
            .chain([self.status])
            .chain(metrics)
    }
}

/// What a worker says on its status pipe, a byte each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Its loop serves.
    Ready,
    /// Replace me (`--max-requests` reached, or a request past `--timeout`): the master
    /// starts a replacement and then drains this worker.
    Recycle,
    /// The loop lives and its handlers make progress (what feeds the systemd watchdog).
    Heartbeat,
    /// The loop lives, but a handler looks stuck to the watchdog.
    Alive,
}

impl Status {
    pub fn byte(self) -> u8 {
        match self {
            Status::Ready => b'R',
            Status::Recycle => b'M',
            Status::Heartbeat => b'H',
            Status::Alive => b'L',
        }
    }

    pub fn from_byte(b: u8) -> Option<Status> {
        match b {
            b'R' => Some(Status::Ready),
            b'M' => Some(Status::Recycle),
            b'H' => Some(Status::Heartbeat),
            b'L' => Some(Status::Alive),
            _ => None,
        }
    }

    /// Writes this status to the pipe. Best effort: a full pipe (a master too busy to read
    /// a second of heartbeats) or a closed one (the master gone) loses the byte, which is
    /// all that can be done then.
    pub fn send(self, pipe: BorrowedFd<'_>) {
        let b = [self.byte()];
        // SAFETY: a one-byte write from a live buffer to a descriptor the caller holds.
        let _ = unsafe { crate::sys::syscall!(write(pipe.as_raw_fd(), b.as_ptr().cast(), 1)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_env_round_trips() {
        for env in [
            WorkerEnv {
                listeners: vec![3],
                status: 4,
                heartbeat: None,
                metrics: None,
                cpu: None,
            },
            WorkerEnv {
                listeners: vec![5, 6, 7],
                status: 9,
                heartbeat: Some(Duration::from_millis(2500)),
                metrics: Some(MetricsFds {
                    listener: 10,
                    region: 11,
                    slot: Some(3),
                }),
                cpu: Some(5),
            },
            WorkerEnv {
                listeners: vec![5],
                status: 9,
                heartbeat: None,
                metrics: Some(MetricsFds {
                    listener: 10,
                    region: 11,
                    slot: None,
                }),
                cpu: None,
            },
        ] {
            assert_eq!(WorkerEnv::decode(&env.encode()), Ok(env.clone()));
        }
    }

    #[test]
    fn worker_env_refuses_standard_streams_and_garbage() {
        for bad in [
            "",
            "x",
            "0,4,0,-,-,-",
            "3,1,0,-,-,-",
            "3;;4,5,0,-,-,-",
            ",4,0",
        ] {
            assert!(WorkerEnv::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn status_bytes_round_trip() {
        for s in [
            Status::Ready,
            Status::Recycle,
            Status::Heartbeat,
            Status::Alive,
        ] {
            assert_eq!(Status::from_byte(s.byte()), Some(s));
        }
        assert_eq!(Status::from_byte(b'?'), None);
    }
}
