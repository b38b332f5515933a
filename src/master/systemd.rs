//! systemd integration for the master: socket activation (`LISTEN_FDS`, `LISTEN_PID`) and
//! the notify protocol (`NOTIFY_SOCKET`: `READY=1`, `RELOADING=1`, `STOPPING=1`,
//! `STATUS=`), without libsystemd: both are a few environment variables and datagrams
//! (sd_listen_fds(3), sd_notify(3)).
//!
//! Both variables are taken out of the environment at start, so the workers (and anything
//! the app starts) neither reuse the sockets nor speak for the service.

use std::os::fd::RawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: RawFd = 3;

/// The listening sockets systemd passed to this process (descriptors 3, 4, ...), if any.
pub(crate) fn take_listen_fds() -> Result<Vec<RawFd>, String> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Ok(Vec::new());
    };
    // Meant for another process (a parent that did not clean up): not ours.
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(Vec::new());
    }
    let n: i32 = fds
        .trim()
        .parse()
        .map_err(|_| format!("LISTEN_FDS={fds:?}: not a number"))?;
    let max = crate::sys::listen::MAX_LISTENERS as i32;
    if n > max {
        return Err(format!("LISTEN_FDS={n}: at most {max} sockets"));
    }
    let fds: Vec<RawFd> = (0..n.max(0)).map(|i| LISTEN_FDS_START + i).collect();
    for &fd in &fds {
        // systemd leaves the passed descriptors inheritable; the master hands them to the
        // workers itself.
        // SAFETY: fcntl on a descriptor systemd passed to this process.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(fds)
}

/// The service manager's notification socket, if this process runs under one.
pub(crate) struct Notifier {
    sock: UnixDatagram,
    addr: SocketAddr,
}

impl Notifier {
    /// From `NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace), which is then
    /// removed from the environment.
    pub(crate) fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        std::env::remove_var("NOTIFY_SOCKET");
        let bytes = path.as_encoded_bytes();
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name),
            None => SocketAddr::from_pathname(&path),
        };
        let made = addr.and_then(|addr| Ok((UnixDatagram::unbound()?, addr)));
        match made {
            Ok((sock, addr)) => Some(Notifier { sock, addr }),
            Err(e) => {
                crate::log::warning!("NOTIFY_SOCKET={path:?} unusable, not notifying: {e}");
                None
            }
        }
    }

    /// Sends one notification (newline-separated `KEY=VALUE` lines). A failure is logged
    /// and otherwise ignored: the service runs on without its manager's view of it.
    pub(crate) fn send(&self, state: &str) {
        if let Err(e) = self.sock.send_to_addr(state.as_bytes(), &self.addr) {
            crate::log::warning!("cannot notify the service manager: {e}");
        }
    }
}

/// `WATCHDOG_USEC` (for this process, per `WATCHDOG_PID` when set), taken out of the
/// environment: how often the service manager wants `WATCHDOG=1`.
pub(crate) fn take_watchdog() -> Option<Duration> {
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    std::env::remove_var("WATCHDOG_USEC");
    std::env::remove_var("WATCHDOG_PID");
    if pid.is_some_and(|p| p.trim().parse::<u32>().ok() != Some(std::process::id())) {
        return None;
    }
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    Some(Duration::from_micros(usec))
}

/// `CLOCK_MONOTONIC` now, in microseconds (`MONOTONIC_USEC=` with `RELOADING=1`).
pub(crate) fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let d = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
    d.as_micros() as u64
}
