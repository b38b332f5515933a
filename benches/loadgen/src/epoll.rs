//! Level-triggered epoll, waited on to the nanosecond.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new fd that
        // nothing else owns, so OwnedFd may close it.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: see above: fd is open and owned by no one else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn ctl(&self, op: i32, fd: i32, events: u32, token: usize) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events,
            u64: token as u64,
        };
        // SAFETY: ev is a valid epoll_event for the call's duration; both fds are open.
        let rc = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits for readiness for up to `timeout`, to the nanosecond (`epoll_pwait2`, Linux
    /// 5.11): the open loop's next request is due microseconds away, not milliseconds.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout: Duration) -> io::Result<usize> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: events is a writable buffer of events.len() epoll_events, and the kernel
        // writes at most that many; ts is a valid timespec for the call's duration; a null
        // sigmask leaves the thread's signal mask as it is.
        let n = unsafe {
            libc::epoll_pwait2(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                &ts,
                std::ptr::null(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            };
        }
        Ok(n as usize)
    }
}
