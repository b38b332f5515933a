//! `--preload`, the master's side: the preloader is started as a worker is (the same
//! program, with `WorkerEnv::preloader`), imports the app once, and forks the workers the
//! master asks for over their control socket (`ipc::Control`). The master stays free of app
//! code.
//!
//! The workers are the master's children all the same. The master is a child subreaper,
//! and the preloader forks each worker through a process that exits at once, so the worker
//! is re-parented to the master, which signals it, watches its status pipe and reaps it as
//! any other. The preloader belongs to one reload generation: a SIGHUP retires it and starts
//! a new one, which imports the new code.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::sys::ipc::{Control, WorkerEnv};

/// How long the master waits for the preloader to answer a fork. A fork of even a large
/// app takes milliseconds; a preloader that takes this long is stuck, and is replaced.
const FORK_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a preloader is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Importing the app: it forks nothing yet.
    Importing,
    /// The app imported: it forks workers when asked.
    Ready,
    /// Told to go (a reload, a stop, a refusal, a failure): its exit is expected.
    Leaving,
}

/// One preloader process.
pub(crate) struct Preloader {
    pub(crate) pid: libc::pid_t,
    /// The reload generation it imported the app for.
    pub(crate) generation: u64,
    /// The master's end of the control socket (read without waiting: `try_recv`).
    control: OwnedFd,
    pub(crate) state: State,
}

/// What a preloader said while it was importing.
pub(crate) enum Said {
    Nothing,
    /// It imported the app and forks workers from now on.
    Ready,
    /// It will not fork (its import started threads: why); it exits.
    Refused(String),
}

/// Why a fork was not done.
pub(crate) enum NotForked {
    /// The preloader found threads besides its own: forking is unsafe; it exits.
    Refused(String),
    /// This fork failed (the system refused it); the preloader goes on.
    Failed(String),
    /// The preloader did not answer as it should: it is killed.
    Broken(String),
}

impl Preloader {
    /// A preloader just started, `control` the master's end of its control socket.
    pub(crate) fn new(pid: libc::pid_t, generation: u64, control: OwnedFd) -> Preloader {
        Preloader {
            pid,
            generation,
            control,
            state: State::Importing,
        }
    }

    /// The control socket, for the master's poll while the preloader imports.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.control.as_fd()
    }

    /// What the preloader said since the last look, without waiting.
    pub(crate) fn read(&mut self) -> Said {
        let mut buf = [0u8; Control::MAX_MESSAGE];
        match Control::try_recv(self.control.as_fd(), &mut buf) {
            Ok((n, _)) if n > 0 => match buf[0] {
                Control::READY => {
                    self.state = State::Ready;
                    Said::Ready
                }
                Control::REFUSED => {
                    self.state = State::Leaving;
                    Said::Refused(String::from_utf8_lossy(&buf[1..n]).into_owned())
                }
                _ => Said::Nothing,
            },
            // Closed (it is exiting: the reap says how), or nothing yet.
            _ => Said::Nothing,
        }
    }

    /// Asks for one worker with `env` (whose status pipe's write end is `status`) and waits
    /// for the answer: the new worker's pid.
    pub(crate) fn fork(
        &mut self,
        env: &WorkerEnv,
        status: BorrowedFd<'_>,
    ) -> Result<libc::pid_t, NotForked> {
        let sent = Control::send(
            self.control.as_fd(),
            Control::FORK,
            env.encode().as_bytes(),
            Some(status),
        );
        if let Err(e) = sent {
            return Err(self.broken(format!("cannot ask it for a worker: {e}")));
        }
        let deadline = Instant::now() + FORK_TIMEOUT;
        let mut buf = [0u8; Control::MAX_MESSAGE];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.broken(format!(
                    "it did not answer a fork within {} s",
                    FORK_TIMEOUT.as_secs()
                )));
            }
            let mut pfd = libc::pollfd {
                fd: self.control.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd for the call's duration; EINTR (a signal, handled by
            // the master's self-pipe) only ends this wait early.
            unsafe { libc::poll(&mut pfd, 1, left.as_millis().clamp(1, 60_000) as i32) };
            let (n, _) = match Control::try_recv(self.control.as_fd(), &mut buf) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(self.broken(format!("cannot read its answer: {e}"))),
            };
            let text = String::from_utf8_lossy(&buf[1..n.max(1)]).into_owned();
            return match buf[..n].first() {
                None => Err(self.broken("it exited".into())),
                Some(&Control::FORKED) => match text.parse::<libc::pid_t>() {
                    Ok(pid) if pid > 0 => Ok(pid),
                    _ => Err(self.broken(format!("it answered {text:?}"))),
                },
                Some(&Control::FAILED) => Err(NotForked::Failed(text)),
                Some(&Control::REFUSED) => {
                    self.state = State::Leaving;
                    Err(NotForked::Refused(text))
                }
                Some(_) => Err(self.broken(format!("it answered {:?}", &buf[..n]))),
            };
        }
    }

    /// Tells it to go with `sig` (it exits at once: it serves nothing).
    pub(crate) fn leave(&mut self, sig: libc::c_int) {
        self.state = State::Leaving;
        // SAFETY: kill(2) on our own unreaped child.
        unsafe { libc::kill(self.pid, sig) };
    }

    /// It cannot be trusted with another fork: killed, and `why` returned.
    fn broken(&mut self, why: String) -> NotForked {
        self.leave(libc::SIGKILL);
        NotForked::Broken(why)
    }
}
