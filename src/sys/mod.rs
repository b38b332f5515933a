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

/// Makes the calling thread a batch thread (`SCHED_BATCH`): when it is woken it does not
/// preempt the thread running on its core, it waits for that one to sleep or use up its
/// slice. A worker's loop and handler threads use it so that, sharing a core, the loop
/// finishes its pass (every request read, every response written) before the handler runs,
/// and the handler its batch before the loop takes the responses, instead of each wake-up
/// switching threads mid-pass. Threads and processes the app starts from a handler inherit
/// the policy (`SCHED_RESET_ON_FORK` resets only real-time policies and negative nice
/// values, so it would not help); one that wants the normal policy back can ask for it
/// (`os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))`, no privilege needed).
pub fn batch_scheduling() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is the calling
    // thread, and SCHED_BATCH with priority 0 needs no privilege.
    unsafe { syscall!(sched_setscheduler(0, libc::SCHED_BATCH, &param)) }.map(drop)
}

/// The CPUs the calling thread may run on (its affinity: a container's cpuset, `taskset`),
/// in ascending order.
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most the given size into the live set; pid 0 is
    // the calling thread.
    unsafe {
        syscall!(sched_getaffinity(
            0,
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set
        ))
    }?;
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: every index is below CPU_SETSIZE, the set's size in bits.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Binds the calling thread to `cpu` alone; threads it starts afterwards inherit the binding.
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: sched_setaffinity reads the live set of the given size; pid 0 is the calling
    // thread.
    unsafe {
        syscall!(sched_setaffinity(
            0,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set
        ))
    }
    .map(drop)
}

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
