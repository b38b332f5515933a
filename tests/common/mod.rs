//! The black-box harness: start the real `m0serve` binary on a free port with an
//! app from `tests/apps/`, speak raw HTTP/1.x to it over `TcpStream`, and read
//! what it logs.
//!
//! Nothing here can hang: every socket operation has a timeout, every wait has
//! a deadline, and the server guard kills the process when it goes out of scope
//! (SIGTERM, then SIGKILL after 5 s; the child also gets SIGKILL if the test
//! thread that started it dies, through `PR_SET_PDEATHSIG`).
//!
//! Only std and libc: the JSON the apps print and the corpus manifest are read
//! with the small parser at the bottom of this file.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bound on any single socket read or write.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server may take to print its `listening on` line.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a stopped server may take to exit.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Grace between SIGTERM and SIGKILL when a guard is dropped.
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// Bound on reading one whole response, however the bytes trickle in.
pub const RESPONSE_DEADLINE: Duration = Duration::from_secs(30);

/// The marker of a Rust panic in a process's stderr.
pub const PANIC_MARKER: &str = "panicked at";

/// The program under test: this build's binary, or what `M0S_TEST_BINARY` names
/// (scripts/test.sh runs the HTTP suites once more with the Python package's `m0serve`).
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("M0S_TEST_BINARY")
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_m0serve").to_string())
    })
}

pub fn apps_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps"))
}

mod captured;
mod client;
mod echo;
mod json;
mod moves;
mod server;
mod skip;
mod util;

pub use captured::*;
pub use client::*;
pub use echo::*;
pub use json::*;
pub use moves::*;
pub use server::*;
#[allow(unused_imports)] // Only the tests that can be skipped use it.
pub use skip::*;
pub use util::*;
