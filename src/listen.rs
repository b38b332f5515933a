//! Binding the listening socket (TCP or Unix domain) before Python starts.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;

use crate::config::Listen;
use crate::sys::syscall;

/// Kernel accept queue length. The std default (128) overflows under a connection burst
/// from a load generator; 1024 matches gunicorn's and Granian's defaults.
pub const BACKLOG_CONNECTIONS: i32 = 1024;

pub enum Listener {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener, std::path::PathBuf),
}

impl Listener {
    pub fn bind(listen: &Listen) -> io::Result<Listener> {
        match listen {
            Listen::Tcp(addr) => {
                // std sets SO_REUSEADDR on Unix, so a restart does not wait out TIME_WAIT.
                let l = std::net::TcpListener::bind(addr)?;
                syscall!(listen(l.as_raw_fd(), BACKLOG_CONNECTIONS))?;
                l.set_nonblocking(true)?;
                Ok(Listener::Tcp(mio::net::TcpListener::from_std(l)))
            }
            Listen::Unix(path) => {
                // A socket file left by a previous run would make bind fail; remove it, but
                // never remove anything that is not a socket.
                if let Ok(meta) = std::fs::symlink_metadata(path) {
                    if meta.file_type().is_socket() {
                        std::fs::remove_file(path)?;
                    }
                }
                let l = std::os::unix::net::UnixListener::bind(path)?;
                syscall!(listen(l.as_raw_fd(), BACKLOG_CONNECTIONS))?;
                l.set_nonblocking(true)?;
                Ok(Listener::Unix(
                    mio::net::UnixListener::from_std(l),
                    path.clone(),
                ))
            }
        }
    }

    /// What the startup line prints: `http://127.0.0.1:8000` or `unix:/path`.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => format!("http://{a}"),
                Err(_) => "http://?".to_string(),
            },
            Listener::Unix(_, p) => format!("unix:{}", p.display()),
        }
    }

    /// `SERVER_NAME` and `SERVER_PORT` for the environ (PEP 3333 requires both).
    pub fn server_name_port(&self) -> (String, String) {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => (a.ip().to_string(), a.port().to_string()),
                Err(_) => ("localhost".into(), "0".into()),
            },
            Listener::Unix(..) => ("localhost".into(), "0".into()),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}
