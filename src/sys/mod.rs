//! The platform: one helper turning libc calls into `io::Result` (after mio's `syscall!`),
//! the listening sockets, signals, body spooling, and the master-worker protocol. Nothing
//! here runs Python or speaks HTTP.

pub mod ipc;
pub mod listen;
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
