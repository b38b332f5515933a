//! `--preload`: the preloader, a process between the master and the workers. It is started
//! as a worker is, imports the app once, freezes the garbage collector's view of what the
//! import made (`gc.freeze()`: a collection in a worker then never writes to those shared
//! pages), and forks a worker each time the master asks (`ipc::Control`). Each worker then
//! starts its own loop and handler threads on the app already imported.
//!
//! Forking a process that runs Python is safe only while it has one thread: a lock held by
//! another thread at the fork would stay held in the child for ever. The preloader starts
//! no thread, and checks before it says it is ready and before each fork that the import
//! started none; if it did, it refuses, and the master starts workers that import the app
//! themselves.
//!
//! Each fork goes through a short-lived intermediate process: the preloader forks it (a
//! plain `fork`), it calls Python's `os.fork()` (so the worker gets Python's after-fork
//! handling and the app's `os.register_at_fork` hooks, with its own pid), tells the
//! preloader the worker's pid and exits. The worker, its parent gone, becomes the master's
//! child (the master is a subreaper), and only then asks to die with it.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use super::{Imported, Inherited};
use crate::config::Config;
use crate::log;
use crate::python;
use crate::sys::ipc::{Control, MetricsFds, WorkerEnv};
use crate::sys::signals::SignalPipe;

/// The preloader's process name (its main thread's, 15 bytes at most).
pub(crate) const PRELOADER_NAME: &str = "m0s-preloader";

/// How long a new worker waits to become the master's child: its intermediate parent
/// exits as soon as its fork returns.
const ADOPTION_WAIT: Duration = Duration::from_secs(5);

/// The preloader's life: import, then fork workers until the master closes the control
/// socket (or a stop signal ends it at once). In a worker it forked, this returns what
/// the worker's own run returns.
pub(crate) fn run(config: Config, inherited: Inherited) -> Result<(), String> {
    config.identity.assume()?;
    // The master started this process (its exec checked that), and each worker waits to
    // become its child.
    let master = parent();
    // `ps` and `top` tell it from the workers; each worker takes back the name it had.
    let name = crate::sys::thread_name();
    crate::sys::set_thread_name(PRELOADER_NAME.as_bytes());
    super::prepare_process(&config, None);
    // Its handlers stay in "exit on a stop" (`signals::serving` is never called here): the
    // preloader serves nothing, and goes at once when told.
    let signals =
        SignalPipe::install().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let interpreter = python::initialize(config.venv.as_deref())?;
    let Inherited {
        listener_fds,
        status_pipe: control,
        metrics,
        ..
    } = inherited;
    Python::attach(|py| {
        let imported = super::import(py, &config, &interpreter, super::Purpose::Serve)?;
        // The master says why (one warning, whichever of its preloaders refused).
        if let Some(why) = cannot_fork(&config) {
            let _ = Control::send(control.as_fd(), Control::REFUSED, why.as_bytes(), None);
            return Ok(());
        }
        py.import("gc")
            .and_then(|gc| gc.call_method0("freeze"))
            .map_err(|e| format!("gc.freeze() failed: {e}"))?;
        Control::send(control.as_fd(), Control::READY, b"", None)
            .map_err(|e| format!("cannot tell the master the app is imported: {e}"))?;
        log::info!(
            "preloader: {} imported, forking the workers from here",
            config.app
        );
        let mut buf = [0u8; Control::MAX_MESSAGE];
        loop {
            let (n, fd) = Control::recv(control.as_fd(), &mut buf)
                .map_err(|e| format!("cannot read the master's requests: {e}"))?;
            if n == 0 {
                // The master closed its end: no fork will be asked of this preloader.
                return Ok(());
            }
            let request = std::str::from_utf8(&buf[1..n])
                .ok()
                .filter(|_| buf[0] == Control::FORK)
                .and_then(|text| WorkerEnv::decode(text).ok());
            let (Some(request), Some(status)) = (request, fd) else {
                let _ = Control::send(
                    control.as_fd(),
                    Control::FAILED,
                    b"a request this preloader does not understand",
                    None,
                );
                continue;
            };
            if let Some(why) = cannot_fork(&config) {
                let _ = Control::send(control.as_fd(), Control::REFUSED, why.as_bytes(), None);
                return Ok(());
            }
            match fork_worker(py) {
                Ok(Forked::Parent(pid)) => {
                    drop(status);
                    Control::send(
                        control.as_fd(),
                        Control::FORKED,
                        pid.to_string().as_bytes(),
                        None,
                    )
                    .map_err(|e| format!("cannot tell the master worker {pid} started: {e}"))?;
                }
                Err(e) => {
                    log::error!("cannot fork a worker: {e}");
                    let _ = Control::send(control.as_fd(), Control::FAILED, e.as_bytes(), None);
                }
                Ok(Forked::Child) => {
                    // This is the new worker: the preloader's control socket and
                    // self-pipe are not its own.
                    drop(control);
                    let inherited = Inherited {
                        listener_fds,
                        heartbeat: request.heartbeat,
                        status_pipe: status,
                        metrics: metrics.map(|m| MetricsFds {
                            slot: request.metrics.and_then(|r| r.slot),
                            ..m
                        }),
                        cpu: request.cpu,
                        preloader: false,
                    };
                    crate::sys::set_thread_name(&name);
                    return become_worker(py, config, inherited, signals, imported, master);
                }
            }
        }
    })
}

/// Why this process may not fork now: the threads besides its own (an import that
/// started one), or that they cannot be counted.
fn cannot_fork(config: &Config) -> Option<String> {
    let off = "--preload is off until the next reload";
    match crate::sys::other_threads() {
        Ok(names) if names.is_empty() => None,
        Ok(names) => Some(format!(
            "importing {} started {} thread(s) ({}): a process with threads cannot be forked \
             safely, so {off}; each worker imports the app itself. Start threads when the \
             app first serves, not when it is imported",
            config.app,
            names.len(),
            names.join(", ")
        )),
        Err(e) => Some(format!(
            "cannot count this process's threads (/proc/self/task: {e}), so {off}; each \
             worker imports the app itself"
        )),
    }
}

/// Which side of `fork_worker` this is.
enum Forked {
    /// The preloader: the new worker has this pid.
    Parent(libc::pid_t),
    /// The new worker.
    Child,
}

/// Forks one worker through an intermediate process (see the module's notes). The caller
/// holds the GIL and this process has one thread.
fn fork_worker(py: Python<'_>) -> Result<Forked, String> {
    let os_fork = py
        .import("os")
        .and_then(|os| os.getattr("fork"))
        .map_err(|e| format!("no os.fork: {e}"))?;
    let (read, write) = crate::sys::pipe(0).map_err(|e| format!("cannot create a pipe: {e}"))?;
    // SAFETY: this process has one thread (`cannot_fork` said so just before), so the
    // child is a consistent copy of it, locks included; the child runs Python's own fork
    // and exits.
    let middle = unsafe { libc::fork() };
    if middle < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if middle == 0 {
        drop(read);
        let answer = match os_fork.call0().and_then(|pid| pid.extract::<libc::pid_t>()) {
            Ok(0) => {
                drop(write);
                return Ok(Forked::Child);
            }
            Ok(pid) => format!("P{pid}\n"),
            Err(e) => format!("Eos.fork() failed: {e}\n"),
        };
        // SAFETY: a write from a live buffer to the pipe this process holds, then _exit:
        // the intermediate runs no destructor and no exit handler of the preloader's.
        unsafe {
            libc::write(write.as_raw_fd(), answer.as_ptr().cast(), answer.len());
            libc::_exit(0);
        }
    }
    drop(write);
    // The answer is one line; the worker closed its copy of the pipe at once, and the
    // intermediate exits after writing it.
    let mut answer = String::new();
    let _ = std::fs::File::from(read).read_to_string(&mut answer);
    let mut status = 0;
    // SAFETY: waitpid on the intermediate, our child, with a valid out-pointer.
    while unsafe { libc::waitpid(middle, &mut status, 0) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
    let answer = answer.trim_end();
    match answer.strip_prefix('P').and_then(|p| p.parse().ok()) {
        Some(pid) => Ok(Forked::Parent(pid)),
        None => Err(match answer.strip_prefix('E') {
            Some(why) => why.to_string(),
            None => "the intermediate process exited without a word".into(),
        }),
    }
}

/// The new worker: once the master is its parent (and it dies with the master), it
/// takes its own CPU, signal handlers and descriptors, and serves the app the preloader
/// imported.
fn become_worker(
    py: Python<'_>,
    config: Config,
    inherited: Inherited,
    preloader_signals: SignalPipe,
    imported: Imported,
    master: libc::pid_t,
) -> Result<(), String> {
    adopted_by(master)?;
    // The error log as it is now: the preloader's descriptor may be a file rotated away
    // since (SIGUSR1 reaches the workers, which reopen theirs, not the preloader).
    log::reopen();
    super::prepare_process(&config, inherited.cpu);
    // Its own self-pipe before the preloader's goes, so that no signal is written to a
    // descriptor number that is closed or reused meanwhile.
    let signals =
        SignalPipe::install().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    drop(preloader_signals);
    super::start(py, config, inherited, signals, imported)
}

/// Waits until the master is this process's parent, then sets the parent-death signal
/// (which a change of parent would have fired).
fn adopted_by(master: libc::pid_t) -> Result<(), String> {
    let deadline = Instant::now() + ADOPTION_WAIT;
    while parent() != master {
        if Instant::now() >= deadline {
            return Err(format!(
                "this worker's parent is {}, not the master ({master}): the master is gone, \
                 or is not a subreaper",
                parent()
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    crate::sys::die_with_parent(libc::SIGTERM)
        .map_err(|e| format!("cannot ask to die with the master: {e}"))?;
    if parent() != master {
        return Err("the master is gone".into());
    }
    Ok(())
}

fn parent() -> libc::pid_t {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() }
}
