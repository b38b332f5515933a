//! What crosses between a worker's threads: the SPSC rings and the park-only-if-parked
//! handshake (model-checked with loom), the messages, the state the loop and the handlers
//! share, and the pipeline counters.

// Under `--cfg loom` only the lock-free core is built (see lib.rs).
#[cfg(not(loom))]
pub(crate) mod departures;
#[cfg(not(loom))]
pub(crate) mod msg;
pub(crate) mod park;
pub(crate) mod ring;
#[cfg(not(loom))]
pub(crate) mod shared;
#[cfg(not(loom))]
pub(crate) mod stats;
pub(crate) mod sync;
