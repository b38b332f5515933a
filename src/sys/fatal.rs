//! A last word before a worker dies of a fatal signal (a segfault in a C extension,
//! `abort()`, a bus error): a hook runs on the dying thread, then the signal goes on as it
//! would have, to the handler that was there before (faulthandler's, if the app enabled it)
//! or to its default action. The worker's hook asks the loop thread to write the responses
//! the handlers had finished, so that a request that crashes the process does not take the
//! answers of the requests before it along. `os._exit` has the same hook (`run_hook`,
//! called by the worker's replacement for it).
//!
//! Everything the handler does is async-signal-safe: atomics, `getpid`, `gettid`,
//! `sigaction`, `raise`, and the hook's own (an eventfd write and `nanosleep`). The hook
//! runs only in the process that installed it (not in a child forked from it, where the
//! loop thread does not exist) and not on the thread that `exempt_this_thread` named (the
//! loop: it cannot wait for itself).

use std::io;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::sys::syscall;

/// The signals whose default action ends the process with a fault.
const FATAL: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// The hook, as a `fn()` address (0: none).
static HOOK: AtomicUsize = AtomicUsize::new(0);
/// The process that installed it.
static PID: AtomicI32 = AtomicI32::new(0);
/// The thread it does not run on (0: none).
static EXEMPT_TID: AtomicI32 = AtomicI32::new(0);
/// The actions the signals had before, by `FATAL` index.
static PREVIOUS: OnceLock<[libc::sigaction; FATAL.len()]> = OnceLock::new();

/// Installs the handler for the fatal signals, with `hook` to run first. Once per process;
/// a second call only replaces the hook.
pub(crate) fn install(hook: fn()) -> io::Result<()> {
    // Relaxed, all three: they are read by a signal handler on a thread of this process,
    // and `sigaction` below (a system call) comes after them in this thread's order; the
    // handler can run only after it.
    HOOK.store(hook as usize, Ordering::Relaxed);
    // SAFETY: getpid has no preconditions.
    PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    if PREVIOUS.get().is_some() {
        return Ok(());
    }
    // SAFETY: a zeroed sigaction is a valid value ("SIG_DFL, no flags, empty mask").
    let mut previous = [unsafe { std::mem::zeroed::<libc::sigaction>() }; FATAL.len()];
    for (sig, old) in FATAL.iter().zip(previous.iter_mut()) {
        // SAFETY: reads the current action into `old`, which outlives the call.
        unsafe { syscall!(sigaction(*sig, std::ptr::null(), old)) }?;
    }
    // Set before any handler can read it.
    let _ = PREVIOUS.set(previous);
    for sig in FATAL {
        // SAFETY: a zeroed sigaction is a valid value, filled in below.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_fatal
            as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as usize;
        // SA_ONSTACK: on a thread with an alternate stack (Rust's, for stack overflows),
        // the handler runs there.
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: the handler only does async-signal-safe work (module documentation).
        unsafe { syscall!(sigaction(sig, &sa, std::ptr::null_mut())) }?;
    }
    Ok(())
}

/// The calling thread's id. (The system call itself: glibc's wrapper came in 2.30, after
/// the oldest glibc the wheels support.)
fn gettid() -> libc::pid_t {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t }
}

/// The calling thread is the one the hook does not run on.
pub(crate) fn exempt_this_thread() {
    let tid = gettid();
    // Relaxed: read by a handler on another thread, which can only run the hook after a
    // request this thread handed it, a hand-off that orders this store before.
    EXEMPT_TID.store(tid, Ordering::Relaxed);
}

/// Runs the hook, if one is installed in this process and this is not the exempt thread.
pub(crate) fn run_hook() {
    // Relaxed: see `install` and `exempt_this_thread`.
    let hook = HOOK.load(Ordering::Relaxed);
    // SAFETY: getpid has no preconditions.
    let (pid, tid) = (unsafe { libc::getpid() }, gettid());
    if hook == 0 || pid != PID.load(Ordering::Relaxed) || tid == EXEMPT_TID.load(Ordering::Relaxed)
    {
        return;
    }
    // SAFETY: `hook` was stored from a `fn()` in `install`, and functions live for the
    // whole program.
    let hook: fn() = unsafe { std::mem::transmute::<usize, fn()>(hook) };
    hook();
}

extern "C" fn on_fatal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    run_hook();
    let Some(i) = FATAL.iter().position(|&s| s == sig) else {
        return;
    };
    let Some(previous) = PREVIOUS.get() else {
        return;
    };
    // SAFETY: puts back the action found at install, a valid sigaction.
    unsafe { libc::sigaction(sig, &previous[i], std::ptr::null_mut()) };
    // A fault returns to the instruction that faults again, now under that action. A
    // signal someone sent (kill, raise, abort's), or a machine-check SIGBUS that reports
    // an error rather than a fault (BUS_MCEERR_AO), would not come again: send it. It is
    // blocked while this handler runs, so it arrives as the handler returns.
    let code = if info.is_null() {
        0
    } else {
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
        unsafe { (*info).si_code }
    };
    let sent = code <= 0 || (sig == libc::SIGBUS && code == libc::BUS_MCEERR_AO);
    if sent {
        // SAFETY: raise is async-signal-safe.
        unsafe { libc::raise(sig) };
    }
}
