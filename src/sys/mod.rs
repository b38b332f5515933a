//! The platform: one helper turning libc calls into `io::Result` (after mio's `syscall!`),
//! the listening sockets, signals, body spooling, and the master-worker protocol. Nothing
//! here runs Python or speaks HTTP.

pub mod ipc;
pub mod listen;
pub mod privileges;
pub mod signals;
pub mod spool;

/// Calls a libc function and maps a `-1` return to `io::Error::last_os_error()`. The call
/// is not wrapped in `unsafe` here: each caller writes `unsafe { syscall!(...) }` under its
/// own `// SAFETY:` note, so the lint sees, and asks about, every call.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        let res = libc::$fn($($arg),*);
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}
pub(crate) use syscall;

/// Opens `/dev/null` on whichever of descriptors 0, 1 and 2 is closed (a process started
/// with `<&-` or `2>&-`). Rust's runtime does this before a binary's `main`; the Python
/// package's process never ran it, and a listening socket that landed on 2 would be written
/// to as the error log.
pub fn open_standard_descriptors() {
    for fd in 0..3 {
        // SAFETY: F_GETFD on a descriptor number only asks whether it is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 {
            continue;
        }
        // SAFETY: open(2) with a NUL-terminated path; the lowest free descriptor (this one,
        // or a lower one opened in an earlier turn) is returned.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if null >= 0 && null != fd {
            // SAFETY: both descriptors belong to this process; `null` is closed after its
            // copy is in place.
            unsafe {
                libc::dup2(null, fd);
                libc::close(null);
            }
        }
    }
}
