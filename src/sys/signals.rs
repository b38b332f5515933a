//! Signals delivered through a self-pipe: to a worker's event loop (SIGINT/SIGTERM stop
//! gracefully, SIGQUIT at once, SIGUSR1 reopens the access log file, SIGUSR2 prints the
//! pipeline counters) and to the master's supervision loop (the same, plus SIGHUP,
//! SIGTTIN, SIGTTOU and SIGCHLD).
//!
//! The server owns the signals, not Python: the interpreter is initialised without its own
//! handlers, and these async-signal-safe handlers only write the signal number into a pipe
//! that the loop thread polls. A self-pipe (rather than `signalfd`) keeps the signal mask
//! untouched, so processes the app spawns inherit a normal mask.
//!
//! Written here rather than with `signal-hook`'s pipe, which would do the writing but not
//! the two things this module is for: [`reclaim`] puts back a handler the app replaced with
//! Python's `signal.signal` (signal-hook installs its handler once per signal and does not
//! notice it replaced), and a worker still importing the app exits on a stop signal at once.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::sys::syscall;

/// The signals a worker handles (`SignalPipe::install`).
const WORKER_SIGNALS: &[libc::c_int] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// A worker's handlers that the app replaced (Python's `signal.signal` while the app was
/// imported) are put back; the names of those signals. Without this, an app's SIGTERM
/// handler would keep the worker from draining when the master asks.
pub(crate) fn reclaim() -> Vec<&'static str> {
    let mut taken = Vec::new();
    for &sig in WORKER_SIGNALS {
        // SAFETY: a zeroed sigaction is a valid out-buffer; sigaction with a NULL new
        // action only reads the current one.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
            continue;
        }
        if old.sa_sigaction == on_signal as extern "C" fn(libc::c_int) as usize {
            continue;
        }
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        // SAFETY: as in `with_handlers`: a handler that only writes to the self-pipe.
        if unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) } == 0 {
            taken.push(match sig {
                libc::SIGINT => "SIGINT",
                libc::SIGTERM => "SIGTERM",
                libc::SIGQUIT => "SIGQUIT",
                libc::SIGUSR1 => "SIGUSR1",
                _ => "SIGUSR2",
            });
        }
    }
    taken
}

/// The signals the master handles (`SignalPipe::install_master`).
pub(crate) const MASTER_SIGNALS: &[libc::c_int] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGQUIT,
    libc::SIGHUP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCHLD,
];

/// The signal the loop raises on a stuck handler thread (`--timeout`), on which
/// `faulthandler` is registered to write every thread's Python stack. A real-time signal
/// nothing else uses.
pub(crate) fn stack_dump() -> libc::c_int {
    libc::SIGRTMIN() + 2
}

static PIPE_WRITE_FD: AtomicI32 = AtomicI32::new(-1);

/// A worker still starting (importing the app): nothing reads the self-pipe yet, so a stop
/// signal ends the process at once instead of waiting for an import that may take long.
static EXIT_ON_STOP: AtomicBool = AtomicBool::new(false);

/// The worker's loop now drains the self-pipe: stop signals are graceful from here on.
pub(crate) fn serving() {
    // Relaxed: read by the handler on this process's threads; a stop that races the
    // switch either exits (nothing is served yet) or is drained by the loop.
    EXIT_ON_STOP.store(false, Ordering::Relaxed);
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Relaxed: see `serving`.
    if EXIT_ON_STOP.load(Ordering::Relaxed)
        && matches!(sig, libc::SIGINT | libc::SIGTERM | libc::SIGQUIT)
    {
        // SAFETY: _exit is async-signal-safe; the worker has served nothing yet.
        unsafe { libc::_exit(0) };
    }
    // Relaxed: the fd was stored before the handler was installed (sigaction is the fence).
    let fd = PIPE_WRITE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = sig as u8;
        // SAFETY: write(2) is async-signal-safe; `byte` outlives the call. A full pipe
        // (EAGAIN) already holds a pending signal for the loop, so the result is ignored.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
}

/// The read end of the self-pipe, for the loop to register.
pub(crate) struct SignalPipe {
    pub(crate) read: mio::unix::pipe::Receiver,
    _write: OwnedFd,
}

impl SignalPipe {
    /// A worker's: handlers for SIGINT, SIGTERM, SIGQUIT and SIGUSR2; SIGHUP, SIGTTIN and
    /// SIGTTOU (meant for the master) are ignored; SIGPIPE is ignored (a peer that goes away
    /// must surface as EPIPE on its own socket, not kill the process).
    pub(crate) fn install() -> io::Result<SignalPipe> {
        // Relaxed: set before the handlers are installed (sigaction is the fence).
        EXIT_ON_STOP.store(true, Ordering::Relaxed);
        let pipe = SignalPipe::with_handlers(WORKER_SIGNALS)?;
        for sig in [libc::SIGHUP, libc::SIGTTIN, libc::SIGTTOU] {
            // SAFETY: setting a disposition to SIG_IGN has no preconditions.
            unsafe { libc::signal(sig, libc::SIG_IGN) };
        }
        Ok(pipe)
    }

    /// The master's: every signal it acts on, and SIGCHLD to wake it when a worker exits.
    pub(crate) fn install_master() -> io::Result<SignalPipe> {
        SignalPipe::with_handlers(MASTER_SIGNALS)
    }

    fn with_handlers(signals: &[libc::c_int]) -> io::Result<SignalPipe> {
        let (read, write) = super::pipe(libc::O_NONBLOCK)?;
        // Relaxed: published to the handler by the sigaction calls below.
        PIPE_WRITE_FD.store(write.as_raw_fd(), Ordering::Relaxed);
        for &sig in signals {
            // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value.
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            // SAFETY: `sa` is a fully initialised sigaction whose handler only writes to
            // the self-pipe (async-signal-safe); the old action is not asked for.
            unsafe { syscall!(sigaction(sig, &sa, std::ptr::null_mut())) }?;
        }
        // SAFETY: setting a disposition to SIG_IGN has no preconditions.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        Ok(SignalPipe {
            read: mio::unix::pipe::Receiver::from(read),
            _write: write,
        })
    }

    /// Drains the pipe: which signals arrived since the last drain.
    pub(crate) fn drain(&mut self) -> Received {
        use std::io::Read;
        let mut buf = [0u8; 16];
        let mut got = Received::default();
        loop {
            match self.read.read(&mut buf) {
                Ok(0) => return got,
                Ok(n) => {
                    for &b in &buf[..n] {
                        match i32::from(b) {
                            libc::SIGUSR2 => got.stats = true,
                            libc::SIGUSR1 => got.reopen = true,
                            libc::SIGQUIT => got.quit = true,
                            libc::SIGHUP => got.reload = true,
                            libc::SIGTTIN => got.more += 1,
                            libc::SIGTTOU => got.fewer += 1,
                            libc::SIGCHLD => got.child = true,
                            sig => got.stop = Some(sig),
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return got,
            }
        }
    }
}

/// What a drain of the self-pipe found.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct Received {
    /// SIGINT or SIGTERM: stop gracefully.
    pub(crate) stop: Option<i32>,
    /// SIGQUIT: stop at once.
    pub(crate) quit: bool,
    /// SIGUSR2: print the pipeline counters.
    pub(crate) stats: bool,
    /// SIGUSR1: reopen log files (after a rotation).
    pub(crate) reopen: bool,
    /// SIGHUP (master): reload the workers.
    pub(crate) reload: bool,
    /// SIGTTIN / SIGTTOU (master): one worker more / fewer, per signal.
    pub(crate) more: u32,
    pub(crate) fewer: u32,
    /// SIGCHLD (master): a worker may have exited.
    pub(crate) child: bool,
}
