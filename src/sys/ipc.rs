//! The master-worker protocol: what a worker is handed across its exec (one environment
//! variable naming its descriptors) and what it says back on its status pipe (one byte a
//! message); and with `--preload`, the control socket between the master and the preloader
//! (`Control`: a fork asked for with the new worker's status pipe attached, the pid
//! answered).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Set in a worker's environment by the master; its presence is what makes the process a
/// worker. Removed by the worker at once, so nothing the app starts mistakes itself for one.
pub(crate) const WORKER_ENV: &str = "M0SERVE_INTERNAL_WORKER_FDS";

/// `--metrics-port`: the metrics socket, the shared counters, and the worker's slot in
/// them (`None`: none was free; it answers scrapes but counts nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MetricsFds {
    pub(crate) listener: RawFd,
    pub(crate) region: RawFd,
    pub(crate) slot: Option<usize>,
}

/// What a worker gets across its exec, as [`WORKER_ENV`] carries it:
/// `LISTENER;LISTENER...,STATUS,HEARTBEAT_MS,METRICS_LISTENER,METRICS_REGION,SLOT,CPU,ROLE`
/// (`HEARTBEAT_MS` 0: no systemd watchdog; the metrics fields `-` without `--metrics-port`;
/// `CPU` `-` without `--cpu-affinity`; `ROLE` `preload` for the preloader, `-` for a
/// worker).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WorkerEnv {
    pub(crate) listeners: Vec<RawFd>,
    /// The status pipe's write end.
    pub(crate) status: RawFd,
    /// How often the systemd watchdog wants a heartbeat, when there is one.
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) metrics: Option<MetricsFds>,
    /// `--cpu-affinity`: the CPU this worker pins itself to.
    pub(crate) cpu: Option<usize>,
    /// `--preload`: this process is the preloader, not a worker; `status` is its end of
    /// the control socket.
    pub(crate) preloader: bool,
}

impl WorkerEnv {
    pub(crate) fn encode(&self) -> String {
        let listeners: Vec<String> = self.listeners.iter().map(|f| f.to_string()).collect();
        let metrics = match self.metrics {
            Some(m) => format!(
                "{},{},{}",
                m.listener,
                m.region,
                m.slot.map_or("-".to_string(), |s| s.to_string())
            ),
            None => "-,-,-".to_string(),
        };
        format!(
            "{},{},{},{metrics},{},{}",
            listeners.join(";"),
            self.status,
            self.heartbeat.map_or(0, |w| w.as_millis().max(1)),
            self.cpu.map_or("-".to_string(), |c| c.to_string()),
            if self.preloader { PRELOADER_ROLE } else { "-" }
        )
    }

    /// The variable's value, checked: every descriptor a number above 2 (0-2 are the
    /// standard streams, never the master's to hand over).
    pub(crate) fn decode(value: &str) -> Result<WorkerEnv, String> {
        let fd = |s: &str| s.parse::<RawFd>().ok().filter(|&f| f > 2);
        let bad = || format!("{WORKER_ENV}={value:?}: not what a master of this version sets");
        let mut fields = value.split(',');
        let (listeners, status) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
        let heartbeat_ms: u64 = fields.next().and_then(|h| h.parse().ok()).unwrap_or(0);
        let metrics = match (fields.next(), fields.next(), fields.next()) {
            (Some(l), Some(r), Some(slot)) => match (fd(l), fd(r)) {
                (Some(listener), Some(region)) => Some(MetricsFds {
                    listener,
                    region,
                    slot: slot.parse().ok(),
                }),
                _ => None,
            },
            _ => None,
        };
        let cpu = fields.next().and_then(|c| c.parse().ok());
        let preloader = fields.next() == Some(PRELOADER_ROLE);
        let listeners: Option<Vec<RawFd>> = listeners.split(';').map(fd).collect();
        match (listeners.filter(|l| !l.is_empty()), fd(status)) {
            (Some(listeners), Some(status)) => Ok(WorkerEnv {
                listeners,
                status,
                heartbeat: (heartbeat_ms > 0).then(|| Duration::from_millis(heartbeat_ms)),
                metrics,
                cpu,
                preloader,
            }),
            _ => Err(bad()),
        }
    }

    /// Every descriptor it names.
    pub(crate) fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        let metrics = self.metrics.iter().flat_map(|m| [m.listener, m.region]);
        self.listeners
            .iter()
            .copied()
            .chain([self.status])
            .chain(metrics)
    }
}

/// The last field of [`WorkerEnv`]'s encoding for the preloader.
const PRELOADER_ROLE: &str = "preload";

/// The master's and the preloader's ends of their control socket (`--preload`): a
/// `SOCK_SEQPACKET` pair, so that each message arrives whole or not at all, and a
/// descriptor can go with it (`SCM_RIGHTS`).
///
/// The preloader sends [`Control::READY`] once it has imported the app, or
/// [`Control::REFUSED`] and why (the import started threads). The master then asks for
/// workers one at a time: [`Control::FORK`] followed by the worker's [`WorkerEnv`], with
/// the new worker's status pipe attached; the answer is [`Control::FORKED`] and its pid,
/// or [`Control::FAILED`] and why.
pub(crate) struct Control;

impl Control {
    pub(crate) const READY: u8 = b'R';
    pub(crate) const REFUSED: u8 = b'T';
    pub(crate) const FORK: u8 = b'F';
    pub(crate) const FORKED: u8 = b'P';
    pub(crate) const FAILED: u8 = b'E';
    /// The longest message: a fork request's environment, or a reason.
    pub(crate) const MAX_MESSAGE: usize = 4096;

    /// A connected pair, both ends close-on-exec (the master's first, the preloader's
    /// second).
    pub(crate) fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: socketpair writes two descriptors into the live two-element array.
        unsafe {
            crate::sys::syscall!(socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr()
            ))
        }?;
        // SAFETY: socketpair just returned these descriptors; each is owned once here.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    /// Sends one message (`kind` then `text`), with `fd` attached when given.
    pub(crate) fn send(
        sock: BorrowedFd<'_>,
        kind: u8,
        text: &[u8],
        fd: Option<BorrowedFd<'_>>,
    ) -> io::Result<()> {
        let mut msg = Vec::with_capacity(1 + text.len());
        msg.push(kind);
        msg.extend_from_slice(&text[..text.len().min(Self::MAX_MESSAGE - 1)]);
        let mut iov = libc::iovec {
            iov_base: msg.as_mut_ptr().cast(),
            iov_len: msg.len(),
        };
        // Room for one descriptor's control message, aligned as cmsghdr wants.
        let mut space = [0u64; 4];
        // SAFETY: a zeroed msghdr is a valid empty header; its pointers are set below to
        // live buffers that outlive the call.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        if let Some(fd) = fd {
            // SAFETY: CMSG_SPACE is a pure size computation.
            let len = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
            debug_assert!(len <= std::mem::size_of_val(&space));
            hdr.msg_control = space.as_mut_ptr().cast();
            hdr.msg_controllen = len as _;
            // SAFETY: the header's control buffer is `len` bytes of `space`, room for one
            // cmsghdr with one descriptor (CMSG_SPACE above), so CMSG_FIRSTHDR is non-null
            // and CMSG_DATA points inside it.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&hdr);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd.as_raw_fd());
            }
        }
        loop {
            // SAFETY: `hdr` points at live buffers for the call's duration. MSG_NOSIGNAL: a
            // peer that is gone is EPIPE, not a signal.
            match unsafe {
                crate::sys::syscall!(sendmsg(sock.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL))
            } {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r.map(drop),
            }
        }
    }

    /// Receives one message into `buf`, waiting for it: its length (0: the other end
    /// closed) and the descriptor attached to it, if any (close-on-exec).
    pub(crate) fn recv(
        sock: BorrowedFd<'_>,
        buf: &mut [u8],
    ) -> io::Result<(usize, Option<OwnedFd>)> {
        Self::recv_with(sock, buf, 0)
    }

    /// `recv` without waiting: `WouldBlock` when no message is there.
    pub(crate) fn try_recv(
        sock: BorrowedFd<'_>,
        buf: &mut [u8],
    ) -> io::Result<(usize, Option<OwnedFd>)> {
        Self::recv_with(sock, buf, libc::MSG_DONTWAIT)
    }

    fn recv_with(
        sock: BorrowedFd<'_>,
        buf: &mut [u8],
        flags: libc::c_int,
    ) -> io::Result<(usize, Option<OwnedFd>)> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut space = [0u64; 4];
        // SAFETY: a zeroed msghdr is a valid empty header; its pointers are set below to
        // live buffers that outlive the call.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = space.as_mut_ptr().cast();
        hdr.msg_controllen = std::mem::size_of_val(&space) as _;
        let n = loop {
            // SAFETY: `hdr` points at live buffers for the call's duration.
            match unsafe {
                crate::sys::syscall!(recvmsg(
                    sock.as_raw_fd(),
                    &mut hdr,
                    libc::MSG_CMSG_CLOEXEC | flags
                ))
            } {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r? as usize,
            }
        };
        let mut fd = None;
        // SAFETY: the kernel filled `hdr`'s control buffer (msg_controllen says how much);
        // CMSG_FIRSTHDR/CMSG_NXTHDR walk only inside it, and an SCM_RIGHTS message's data
        // holds descriptors this process now owns.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&hdr);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<RawFd>();
                    let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                        / std::mem::size_of::<RawFd>();
                    for i in 0..count {
                        let got = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                        // One is expected; any other is closed as it drops.
                        if fd.is_none() {
                            fd = Some(got);
                        }
                    }
                }
                c = libc::CMSG_NXTHDR(&hdr, c);
            }
        }
        Ok((n, fd))
    }
}

/// What a worker says on its status pipe, a byte each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Its loop serves.
    Ready,
    /// Replace me (`--max-requests` reached, or a request past `--timeout`): the master
    /// starts a replacement and then drains this worker.
    Recycle,
    /// The loop lives and its handlers make progress (what feeds the systemd watchdog).
    Heartbeat,
    /// The loop lives, but a handler looks stuck to the watchdog.
    Alive,
}

impl Status {
    pub(crate) fn byte(self) -> u8 {
        match self {
            Status::Ready => b'R',
            Status::Recycle => b'M',
            Status::Heartbeat => b'H',
            Status::Alive => b'L',
        }
    }

    pub(crate) fn from_byte(b: u8) -> Option<Status> {
        match b {
            b'R' => Some(Status::Ready),
            b'M' => Some(Status::Recycle),
            b'H' => Some(Status::Heartbeat),
            b'L' => Some(Status::Alive),
            _ => None,
        }
    }

    /// Writes this status to the pipe. Best effort: a full pipe (a master too busy to read
    /// a second of heartbeats) or a closed one (the master gone) loses the byte, which is
    /// all that can be done then.
    pub(crate) fn send(self, pipe: BorrowedFd<'_>) {
        let b = [self.byte()];
        // SAFETY: a one-byte write from a live buffer to a descriptor the caller holds.
        let _ = unsafe { crate::sys::syscall!(write(pipe.as_raw_fd(), b.as_ptr().cast(), 1)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn worker_env_round_trips() {
        for env in [
            WorkerEnv {
                listeners: vec![3],
                status: 4,
                heartbeat: None,
                metrics: None,
                cpu: None,
                preloader: false,
            },
            WorkerEnv {
                listeners: vec![5, 6, 7],
                status: 9,
                heartbeat: Some(Duration::from_millis(2500)),
                metrics: Some(MetricsFds {
                    listener: 10,
                    region: 11,
                    slot: Some(3),
                }),
                cpu: Some(5),
                preloader: false,
            },
            WorkerEnv {
                listeners: vec![5],
                status: 9,
                heartbeat: None,
                metrics: Some(MetricsFds {
                    listener: 10,
                    region: 11,
                    slot: None,
                }),
                cpu: None,
                preloader: true,
            },
        ] {
            assert_eq!(WorkerEnv::decode(&env.encode()), Ok(env.clone()));
        }
    }

    #[test]
    fn worker_env_refuses_standard_streams_and_garbage() {
        for bad in [
            "",
            "x",
            "0,4,0,-,-,-",
            "3,1,0,-,-,-",
            "3;;4,5,0,-,-,-",
            ",4,0",
        ] {
            assert!(WorkerEnv::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_control_message_carries_its_text_and_descriptor_whole() {
        let (master, preloader) = Control::pair().unwrap();
        let (r, w) = {
            let mut fds = [0; 2];
            // SAFETY: pipe writes two descriptors into the live array.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            // SAFETY: just created, owned once here.
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
        };
        let env = "3;4,9,0,-,-,-,2,-";
        Control::send(
            master.as_fd(),
            Control::FORK,
            env.as_bytes(),
            Some(w.as_fd()),
        )
        .unwrap();
        Control::send(master.as_fd(), Control::READY, b"", None).unwrap();
        drop(w);
        let mut buf = [0u8; Control::MAX_MESSAGE];
        let (n, fd) = Control::recv(preloader.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], format!("F{env}").as_bytes());
        // The descriptor that came is the pipe's write end: what goes in comes out of `r`.
        let fd = fd.expect("a descriptor");
        // SAFETY: writes one byte from a live buffer to a descriptor we own.
        let wrote = unsafe { libc::write(fd.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        assert_eq!(wrote, 1);
        drop(fd);
        let mut b = [0u8; 2];
        // SAFETY: reads into a live buffer from a descriptor we own.
        let got = unsafe { libc::read(r.as_raw_fd(), b.as_mut_ptr().cast(), 2) };
        assert_eq!(got, 1);
        // The next message is its own, with nothing attached; then the end.
        let (n, fd) = Control::recv(preloader.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fd.is_none()), (&b"R"[..], true));
        drop(master);
        assert_eq!(Control::recv(preloader.as_fd(), &mut buf).unwrap().0, 0);
    }

    #[test]
    fn status_bytes_round_trip() {
        for s in [
            Status::Ready,
            Status::Recycle,
            Status::Heartbeat,
            Status::Alive,
        ] {
            assert_eq!(Status::from_byte(s.byte()), Some(s));
        }
        assert_eq!(Status::from_byte(b'?'), None);
    }
}
