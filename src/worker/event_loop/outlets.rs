//! What the loop tells the world outside the process's connections: the master (the
//! status pipe: heartbeats, "replace me"), the access log's sink (reopened on SIGUSR1),
//! and the shared metrics' loop section.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::conns::Counts;
use crate::access_log::AccessLog;
use crate::metrics::{Recorder, Refused};
use crate::sys::ipc::Status;

/// `--metrics-port`: the listener scrapes come to, the counters every worker shares (if
/// this one could map them), and the loop's own section of them (if this worker has a
/// slot).
pub(crate) struct MetricsPort {
    pub(crate) listener: crate::sys::listen::Listener,
    pub(crate) region: Option<Arc<crate::metrics::Region>>,
    pub(crate) recorder: Option<Recorder>,
}

#[derive(Default)]
pub(super) struct Outlets {
    /// The write end of the status pipe to the master.
    pub(crate) status_pipe: Option<OwnedFd>,
    /// The access log, for SIGUSR1.
    pub(crate) access_log: Option<Arc<AccessLog>>,
    /// The loop's section of the shared metrics.
    pub(crate) metrics: Option<Recorder>,
}

impl Outlets {
    /// Tells the master (nothing without a status pipe).
    pub(super) fn tell(&self, status: Status) {
        if let Some(fd) = &self.status_pipe {
            status.send(fd.as_fd());
        }
    }

    /// SIGUSR1: the access log's file is opened again (the error log's is the caller's).
    pub(super) fn reopen_access_log(&self) {
        if let Some(log) = &self.access_log {
            log.sink.reopen();
        }
    }

    /// An answer of the loop's own (an error), for the metrics; not one on the metrics
    /// port, whose traffic is not the app's.
    pub(super) fn count_loop_answer(&self, on_metrics_port: bool, status: u16) {
        if let Some(m) = self.metrics.as_ref().filter(|_| !on_metrics_port) {
            m.section().count_status(status);
        }
    }

    /// A static file's answer (`--static-map`).
    pub(super) fn count_static(&self, status: u16) {
        if let Some(m) = &self.metrics {
            m.section().count_status(status);
            m.section().count_static(status);
        }
    }

    /// A request shed (`--max-queue-wait`); the worker counts as shedding until `until`
    /// (`stats::mono_ns`).
    pub(super) fn count_shed(&self, until: u64) {
        if let Some(m) = self.metrics.as_ref() {
            m.section().count_status(503);
            m.section().count_shed(until);
        }
    }

    /// A connection closed before any request, and why.
    pub(super) fn count_refused(&self, why: Refused) {
        if let Some(m) = &self.metrics {
            m.section().count_refused(why);
        }
    }

    /// The handler threads gauge, after the pool started or retired some.
    pub(super) fn count_threads(&self, n: usize) {
        if let Some(m) = &self.metrics {
            m.section().set_threads(n);
        }
    }

    /// The connections gauge, after a connection came or went.
    pub(super) fn count_connections(&self, counts: Counts) {
        if let Some(m) = &self.metrics {
            m.section().set_connections(counts.app());
        }
    }
}
