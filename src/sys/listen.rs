//! Binding the listening socket (TCP or Unix domain) before Python starts.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::sys::syscall;

/// Most sockets one worker listens on (`--bind` repeated): the loop's tokens for them are
/// reserved up front.
pub(crate) const MAX_LISTENERS: usize = 64;

/// Where a worker listens, as `--bind`, `--host`/`--port` or `--uds` say.
#[derive(Clone, Debug)]
pub(crate) enum ListenSpec {
    Tcp(SocketAddr),
    Unix(PathBuf),
    /// A listening socket already open as this descriptor (`fd://N`).
    Fd(i32),
}

/// The port a `--bind` without one listens on (gunicorn's).
pub(crate) const DEFAULT_PORT: u16 = 8000;

/// An address from the command line, before a host name in it is looked up.
#[derive(Clone, Debug)]
pub(crate) enum Address {
    Spec(ListenSpec),
    /// A host name and port: [`Address::resolve`] asks the resolver for its addresses.
    Name(String, u16),
}

impl Address {
    /// `host` (an IP address, a name, or empty for every IPv4 interface) and `port`: only
    /// a name is left to look up.
    pub(crate) fn host(host: &str, port: u16) -> Address {
        if host.is_empty() {
            return Address::Spec(ListenSpec::Tcp(SocketAddr::new(
                std::net::Ipv4Addr::UNSPECIFIED.into(),
                port,
            )));
        }
        match host.parse::<std::net::IpAddr>() {
            Ok(ip) => Address::Spec(ListenSpec::Tcp(SocketAddr::new(ip, port))),
            Err(_) => Address::Name(host.to_string(), port),
        }
    }

    /// Whether it is a Unix socket's path (a name is always TCP).
    pub(crate) fn is_unix(&self) -> bool {
        matches!(self, Address::Spec(ListenSpec::Unix(_)))
    }

    /// The sockets it stands for: a name's every address, in the resolver's order; `flag`
    /// names it in an error.
    pub(crate) fn resolve(self, flag: &str) -> Result<Vec<ListenSpec>, String> {
        match self {
            Address::Spec(spec) => Ok(vec![spec]),
            Address::Name(host, port) => Ok(lookup(flag, &host, port)?
                .into_iter()
                .map(ListenSpec::Tcp)
                .collect()),
        }
    }

    /// One `--bind` value, as gunicorn reads them: `HOST:PORT` (HOST an address or a name,
    /// which listens on every address it resolves to), `[V6]:PORT`, `:PORT` (every IPv4
    /// interface), `HOST` (port 8000), `unix:PATH` or `fd://N`.
    pub(crate) fn parse(s: &str) -> Result<Address, String> {
        // An empty value (`M0SERVE_BIND=`, a trailing comma) is a mistake, not a request for
        // every interface: that takes `:PORT` or `0.0.0.0`, said outright.
        if s.is_empty() {
            return Err(format!(
                "--bind {s:?}: empty; give HOST:PORT, [V6]:PORT, :PORT (every IPv4 \
                 interface), HOST, unix:PATH or fd://N"
            ));
        }
        if let Some(path) = s.strip_prefix("unix:") {
            if path.trim().is_empty() {
                return Err(format!("--bind {s:?}: empty path after unix:"));
            }
            return Ok(Address::Spec(ListenSpec::Unix(PathBuf::from(path))));
        }
        if let Some(n) = s.strip_prefix("fd://") {
            return n
                .parse::<i32>()
                .ok()
                .filter(|&fd| fd >= 0)
                .map(|fd| Address::Spec(ListenSpec::Fd(fd)))
                .ok_or_else(|| format!("--bind {s:?}: not a descriptor number"));
        }
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(Address::Spec(ListenSpec::Tcp(addr)));
        }
        let bad = || {
            format!("--bind {s:?}: expected HOST:PORT, [V6]:PORT, :PORT, HOST, unix:PATH or fd://N")
        };
        let (host, port) = match s.rsplit_once(':') {
            // A bare IPv6 address has colons of its own: it needs its brackets.
            Some((h, _)) if h.contains(':') && !h.starts_with('[') => return Err(bad()),
            Some((h, p)) => (h, p.parse::<u16>().map_err(|_| bad())?),
            None => (s, DEFAULT_PORT),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Ok(Address::host(host, port))
    }
}

impl ListenSpec {
    pub(crate) fn describe(&self) -> String {
        match self {
            ListenSpec::Tcp(a) => a.to_string(),
            ListenSpec::Unix(p) => format!("unix:{}", p.display()),
            ListenSpec::Fd(fd) => format!("fd://{fd}"),
        }
    }
}

/// Every address the name `host` stands for, with `port`, without duplicates, in the
/// resolver's order.
fn lookup(flag: &str, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    use std::net::ToSocketAddrs;
    let found = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{flag} {host:?}: cannot resolve it: {e}"))?;
    let mut out: Vec<SocketAddr> = Vec::new();
    for a in found {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    if out.is_empty() {
        return Err(format!("{flag} {host:?}: resolves to no address"));
    }
    Ok(out)
}

pub(crate) enum Listener {
    Tcp(mio::net::TcpListener),
    Unix {
        listener: mio::net::UnixListener,
        path: std::path::PathBuf,
        /// This process removes the socket file when it closes the listener (the master
        /// that bound it does; a worker that inherited it does not).
        owned: bool,
    },
}

impl Listener {
    /// Binds and listens with a `backlog`-long accept queue (`--backlog`; the default 1024
    /// matches gunicorn's and Granian's: the std default of 128 overflows under a burst of
    /// connections from a load generator).
    pub(crate) fn bind(
        listen: &ListenSpec,
        backlog: i32,
        uds_mode: Option<u32>,
    ) -> io::Result<Listener> {
        match listen {
            ListenSpec::Fd(fd) => {
                // `fd://N`: ours from here; it must be a listening socket already.
                let l = Listener::from_inherited(*fd)?;
                // SAFETY: fcntl on the descriptor just taken over.
                unsafe { libc::fcntl(*fd, libc::F_SETFD, libc::FD_CLOEXEC) };
                Ok(l)
            }
            ListenSpec::Tcp(addr) => {
                // std sets SO_REUSEADDR on Unix, so a restart does not wait out TIME_WAIT.
                let l = std::net::TcpListener::bind(addr)?;
                // SAFETY: listen(2) on the socket `l` owns, with a plain integer.
                unsafe { syscall!(listen(l.as_raw_fd(), backlog)) }?;
                l.set_nonblocking(true)?;
                Ok(Listener::Tcp(mio::net::TcpListener::from_std(l)))
            }
            ListenSpec::Unix(path) => {
                // A socket file left by a previous run would make bind fail; remove it, but
                // never remove anything that is not a socket.
                if let Ok(meta) = std::fs::symlink_metadata(path) {
                    if meta.file_type().is_socket() {
                        std::fs::remove_file(path)?;
                    }
                }
                let l = std::os::unix::net::UnixListener::bind(path)?;
                if let Some(mode) = uds_mode {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
                }
                // SAFETY: listen(2) on the socket `l` owns, with a plain integer.
                unsafe { syscall!(listen(l.as_raw_fd(), backlog)) }?;
                l.set_nonblocking(true)?;
                Ok(Listener::Unix {
                    listener: mio::net::UnixListener::from_std(l),
                    path: path.clone(),
                    owned: true,
                })
            }
        }
    }

    /// The listening socket a worker inherited from the master (`fd`, left open across its
    /// exec): TCP or Unix, told apart by its address family.
    pub(crate) fn from_inherited(fd: RawFd) -> io::Result<Listener> {
        // SAFETY: a zeroed sockaddr_storage is a valid out-buffer; getsockname writes at
        // most `len` bytes into it.
        let family = unsafe {
            let mut addr: libc::sockaddr_storage = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            syscall!(getsockname(
                fd,
                (&mut addr as *mut libc::sockaddr_storage).cast(),
                &mut len
            ))?;
            libc::c_int::from(addr.ss_family)
        };
        match family {
            libc::AF_INET | libc::AF_INET6 => {
                // SAFETY: `fd` is a listening TCP socket handed to this process for it to own.
                let l = unsafe { std::net::TcpListener::from_raw_fd(fd) };
                l.set_nonblocking(true)?;
                Ok(Listener::Tcp(mio::net::TcpListener::from_std(l)))
            }
            libc::AF_UNIX => {
                // SAFETY: as above, a listening Unix socket.
                let l = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
                l.set_nonblocking(true)?;
                let path = l
                    .local_addr()?
                    .as_pathname()
                    .map(|p| p.to_path_buf())
                    .unwrap_or_default();
                Ok(Listener::Unix {
                    listener: mio::net::UnixListener::from_std(l),
                    path,
                    owned: false,
                })
            }
            _ => Err(io::Error::other(format!(
                "inherited descriptor {fd} is not a TCP or Unix socket"
            ))),
        }
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix { listener, .. } => listener.as_raw_fd(),
        }
    }

    /// For registration with a poller.
    pub(crate) fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Listener::Tcp(l) => l,
            Listener::Unix { listener, .. } => listener,
        }
    }

    /// What the startup line prints: `http://127.0.0.1:8000` or `unix:/path`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => format!("http://{a}"),
                Err(_) => "http://?".to_string(),
            },
            Listener::Unix { path, .. } => format!("unix:{}", path.display()),
        }
    }

    /// `SERVER_NAME` and `SERVER_PORT` for the environ (PEP 3333 requires both).
    pub(crate) fn server_name_port(&self) -> (String, String) {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => (a.ip().to_string(), a.port().to_string()),
                Err(_) => ("localhost".into(), "0".into()),
            },
            Listener::Unix { .. } => ("localhost".into(), "0".into()),
        }
    }
}

impl Listener {
    /// Closes it, leaving its socket file for the caller to remove (a master running as
    /// `--user` removes it as root, at exit): the path, if this process would have removed
    /// it.
    pub(crate) fn close_keeping_file(mut self) -> Option<std::path::PathBuf> {
        match &mut self {
            Listener::Unix {
                path,
                owned: owned @ true,
                ..
            } => {
                *owned = false;
                Some(path.clone())
            }
            _ => None,
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix {
            path, owned: true, ..
        } = self
        {
            let _ = std::fs::remove_file(path);
        }
    }
}
