//! The platform: one helper turning libc calls into `io::Result` (after mio's `syscall!`),
//! the listening sockets, signals, body spooling, and the master-worker protocol. Nothing
//! here runs Python or speaks HTTP.

pub mod ipc;
pub mod listen;
pub mod signals;
pub mod spool;

/// Calls a libc function and maps a `-1` return to `io::Error::last_os_error()`.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        #[allow(unused_unsafe)]
        // SAFETY: the caller of `syscall!` upholds the libc function's contract for the
        // arguments it passes; the macro only checks the return value.
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}
pub(crate) use syscall;
