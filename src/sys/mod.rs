//! The platform: one helper turning libc calls into `io::Result` (after mio's `syscall!`),
//! the listening sockets, signals, body spooling, and the master-worker protocol. Nothing
//! here runs Python or speaks HTTP.

pub(crate) mod beneath;
pub(crate) mod fatal;
pub(crate) mod ipc;
pub(crate) mod listen;
pub(crate) mod privileges;
pub(crate) mod shm;
pub(crate) mod signals;
pub(crate) mod spawn;
pub(crate) mod spool;

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

/// Grows the calling process's descriptor table to hold descriptors below `n` (at most
/// RLIMIT_NOFILE's soft limit), for a process that still has one thread. The kernel grows
/// the table as descriptors need it, doubling it, and while more than one thread shares
/// the table each growth waits for an RCU grace period (`expand_fdtable`). A worker taking
/// its first 256 connections at 27 000 requests a second slept 11 ms in `accept` that way
/// (state D), and every request then arriving waited; with one thread the growth costs no
/// wait.
pub(crate) fn presize_fd_table(n: usize) -> std::io::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the rlimit it is given, which outlives the call.
    unsafe { syscall!(getrlimit(libc::RLIMIT_NOFILE, &mut lim)) }?;
    let reach = (n as u64).min(lim.rlim_cur).min(libc::c_int::MAX as u64) as libc::c_int;
    if reach <= 64 {
        // The table a process starts with holds 64.
        return Ok(());
    }
    // SAFETY: a NUL-terminated path and flags; the descriptor returned is closed below.
    let null = unsafe {
        syscall!(open(
            c"/dev/null".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC
        ))
    }?;
    // The lowest free descriptor at or above `reach - 1`: the table grows to hold it.
    // SAFETY: `null` is open; F_DUPFD_CLOEXEC takes an integer argument.
    let high = unsafe { syscall!(fcntl(null, libc::F_DUPFD_CLOEXEC, reach - 1)) };
    // SAFETY: both descriptors were opened here and are used no more.
    unsafe {
        if let Ok(fd) = high {
            libc::close(fd);
        }
        libc::close(null);
    }
    high.map(drop)
}

/// Makes the calling thread a batch thread (`SCHED_BATCH`): when it is woken it does not
/// preempt the thread running on its core, it waits for that one to sleep or use up its
/// slice. A worker's loop and handler threads use it so that, sharing a core, the loop
/// finishes its pass (every request read, every response written) before the handler runs,
/// and the handler its batch before the loop takes the responses, instead of each wake-up
/// switching threads mid-pass. Threads and processes the app starts from a handler inherit
/// the policy (`SCHED_RESET_ON_FORK` resets only real-time policies and negative nice
/// values, so it would not help); one that wants the normal policy back can ask for it
/// (`os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))`, no privilege needed).
pub(crate) fn batch_scheduling() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is the calling
    // thread, and SCHED_BATCH with priority 0 needs no privilege.
    unsafe { syscall!(sched_setscheduler(0, libc::SCHED_BATCH, &param)) }.map(drop)
}

/// The CPUs the calling thread may run on (its affinity: a container's cpuset, `taskset`),
/// in ascending order.
pub(crate) fn allowed_cpus() -> std::io::Result<Vec<usize>> {
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
    Ok(set_members(&set))
}

/// A CPU set holding `cpus`; `EINVAL` for a number past the set's size.
fn cpu_set(cpus: &[usize]) -> std::io::Result<libc::cpu_set_t> {
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    Ok(set)
}

/// Binds the calling thread to `cpu` alone; threads it starts afterwards inherit the binding.
pub(crate) fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    set_own_cpus(&[cpu])
}

/// Lets the calling thread run on `cpus`.
pub(crate) fn set_own_cpus(cpus: &[usize]) -> std::io::Result<()> {
    let set = cpu_set(cpus)?;
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

/// The CPUs `thread` (a live thread of this process) may run on, in ascending order.
pub(crate) fn thread_cpus<T>(thread: &std::thread::JoinHandle<T>) -> std::io::Result<Vec<usize>> {
    use std::os::unix::thread::JoinHandleExt;
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a JoinHandle not yet joined keeps its thread's pthread_t valid (the thread
    // may have exited, but it is not detached, so the handle is not reused); the call
    // writes at most the given size into the live set, and returns an error number, not -1.
    let rc = unsafe {
        libc::pthread_getaffinity_np(
            thread.as_pthread_t(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(set_members(&set))
}

/// The CPUs in `set`, in ascending order.
fn set_members(set: &libc::cpu_set_t) -> Vec<usize> {
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: every index is below CPU_SETSIZE, the set's size in bits.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, set) })
        .collect()
}

/// This process may write `path` (a file, or a directory to create one in), by its
/// effective ids as `open(2)` would check them.
pub(crate) fn may_write(path: &std::path::Path) -> std::io::Result<()> {
    may(path, libc::W_OK)
}

/// This process may execute `path`, by its effective ids as `execve(2)` would check them.
pub(crate) fn may_execute(path: &std::path::Path) -> std::io::Result<()> {
    may(path, libc::X_OK)
}

/// This process may read `path`, by its effective ids as `open(2)` would check them.
pub(crate) fn may_read(path: &std::path::Path) -> std::io::Result<()> {
    may(path, libc::R_OK)
}

/// The shared libraries this process has mapped, each once, from /proc/self/maps: the
/// loader, libc, libpython where it is shared, and the extension modules a Python master
/// imported (m0serve's own among them). A worker executing the same program loads them
/// again by these paths.
pub(crate) fn loaded_libraries() -> Vec<std::path::PathBuf> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut out: Vec<std::path::PathBuf> = Vec::new();
    // The path is the sixth field; a path with spaces in it, or one marked " (deleted)",
    // is not one a worker could open again and is left out.
    for path in maps.lines().filter_map(|l| {
        let mut f = l.split_whitespace();
        let path = f.nth(5)?;
        f.next().is_none().then_some(path)
    }) {
        let p = std::path::Path::new(path);
        let shared = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".so") || n.contains(".so."));
        if shared && path.starts_with('/') && !out.iter().any(|o| o == p) {
            out.push(p.to_path_buf());
        }
    }
    out
}

/// Names the calling thread after the program it runs (`/proc/self/exe`'s file name) where
/// its name is a number: a program executed through a descriptor (`execveat` with
/// `AT_EMPTY_PATH`) is named after the descriptor before Linux 6.14, and `pgrep m0serve`
/// would miss it.
pub(crate) fn name_after_program() {
    let named_by_fd = std::fs::read_to_string("/proc/self/comm")
        .is_ok_and(|n| !n.trim().is_empty() && n.trim().bytes().all(|b| b.is_ascii_digit()));
    if !named_by_fd {
        return;
    }
    let Some(name) = std::fs::read_link("/proc/self/exe")
        .ok()
        .and_then(|p| p.file_name().map(|n| n.as_encoded_bytes().to_vec()))
    else {
        return;
    };
    set_thread_name(&name);
}

/// The calling thread's name (what `ps` and `top` show for a process's main thread).
pub(crate) fn thread_name() -> Vec<u8> {
    let mut buf = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into the live buffer.
    unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) };
    buf.split(|&b| b == 0).next().unwrap_or_default().to_vec()
}

/// Names the calling thread; the kernel keeps the first 15 bytes.
pub(crate) fn set_thread_name(name: &[u8]) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from the live
    // buffer.
    unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr()) };
}

/// Opens `path` to be executed later through the descriptor (`O_PATH`, close-on-exec):
/// that exec checks the file's own mode, not the directories above it.
pub(crate) fn open_program(path: &std::path::Path) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is NUL-terminated and lives across the call.
    let fd = unsafe { syscall!(open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC)) }?;
    // SAFETY: open just returned this descriptor; it is owned once here.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// This process may execute the file `fd` names (opened by `open_program`), by its
/// effective ids; `None` where the kernel cannot say (faccessat2 came in Linux 5.8, and a
/// seccomp profile may refuse it with EPERM).
pub(crate) fn may_execute_opened(fd: std::os::fd::BorrowedFd) -> Option<std::io::Result<()>> {
    use std::os::fd::AsRawFd;
    // SAFETY: faccessat2 reads the NUL-terminated empty path, a static; AT_EMPTY_PATH makes
    // it ask about the descriptor's own file.
    let r = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::X_OK,
            libc::AT_EACCESS | libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        return Some(Ok(()));
    }
    let e = std::io::Error::last_os_error();
    (!matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM))).then_some(Err(e))
}

/// This process may list `path` and reach what is in it (read and search permission).
pub(crate) fn may_read_dir(path: &std::path::Path) -> std::io::Result<()> {
    may(path, libc::R_OK | libc::X_OK)
}

fn may(path: &std::path::Path, mode: libc::c_int) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated path that lives across the call; AT_FDCWD resolves
    // a relative one from the working directory.
    let r = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), mode, libc::AT_EACCESS) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether descriptor `fd` is a socket; `None` when it is not open.
pub(crate) fn is_socket(fd: i32) -> Option<bool> {
    // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one stat into the live `st`; a closed `fd` only fails.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_mode & libc::S_IFMT) == libc::S_IFSOCK)
}

/// A process `pid` (above 0: 0 and below name process groups) exists, ours to signal or
/// not.
pub(crate) fn process_exists(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 sends nothing; kill only checks that `pid` exists and whether we
    // may signal it.
    let sent = unsafe { libc::kill(pid, 0) };
    sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The CPU the calling thread is running on.
pub(crate) fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments; it returns -1 where the kernel cannot say.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// What `clock` reads now, as a duration; `None` if it cannot be read.
fn clock_time(clock: libc::clockid_t) -> Option<std::time::Duration> {
    // SAFETY: an all-zero timespec is a valid value for the call to overwrite.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes one timespec into the live `ts`.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(std::time::Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

/// The CPU time every thread of this process has used so far.
pub(crate) fn process_cpu_time() -> std::time::Duration {
    clock_time(libc::CLOCK_PROCESS_CPUTIME_ID).unwrap_or_default()
}

/// The CPU time the calling thread has used so far.
pub(crate) fn own_cpu_time() -> std::time::Duration {
    clock_time(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or_default()
}

/// The CPU time `thread` has used so far; `None` if its clock cannot be read.
pub(crate) fn thread_cpu_time<T>(
    thread: &std::thread::JoinHandle<T>,
) -> Option<std::time::Duration> {
    use std::os::unix::thread::JoinHandleExt;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: a JoinHandle not yet joined keeps its thread's pthread_t valid (the thread
    // may have exited, but it is not detached, so the handle is not reused); the call
    // writes one clockid_t into the live `clock`, and returns an error number, not -1.
    if unsafe { libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock) } != 0 {
        return None;
    }
    clock_time(clock)
}

/// One CPU's time since boot from `/proc/stat`, in clock ticks: what tasks ran on it
/// (user, nice, system), its idle time (idle, iowait), and everything (those, irq, softirq,
/// steal). Interrupt and softirq time is the kernel's own (a loopback send's receive path,
/// say): neither a task's nor idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CpuTicks {
    pub(crate) cpu: usize,
    pub(crate) busy: u64,
    pub(crate) idle: u64,
    pub(crate) total: u64,
}

/// `/proc/stat`, opened once and read again from its start each time: a worker at its
/// descriptor limit can still read it.
pub(crate) struct ProcStat {
    file: std::fs::File,
    buf: Vec<u8>,
}

impl ProcStat {
    pub(crate) fn open() -> std::io::Result<ProcStat> {
        Ok(ProcStat {
            file: std::fs::File::open("/proc/stat")?,
            buf: Vec::new(),
        })
    }

    /// Every CPU's line, as it is now.
    pub(crate) fn cpu_ticks(&mut self) -> std::io::Result<Vec<CpuTicks>> {
        use std::os::unix::fs::FileExt;
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        loop {
            let n = self.file.read_at(&mut chunk, self.buf.len() as u64)?;
            if n == 0 {
                break;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        Ok(parse_cpu_ticks(&String::from_utf8_lossy(&self.buf)))
    }
}

/// The `cpuN user nice system idle iowait irq softirq steal ...` lines of `stat`.
fn parse_cpu_ticks(stat: &str) -> Vec<CpuTicks> {
    stat.lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let cpu = fields.next()?.strip_prefix("cpu")?.parse().ok()?;
            let t: Vec<u64> = fields.take(8).map(|f| f.parse().unwrap_or(0)).collect();
            (t.len() == 8).then(|| CpuTicks {
                cpu,
                busy: t[0] + t[1] + t[2],
                idle: t[3] + t[4],
                total: t.iter().sum(),
            })
        })
        .collect()
}

/// Opens `/dev/null` on whichever of descriptors 0, 1 and 2 is closed (a process started
/// with `<&-` or `2>&-`). Rust's runtime does this before a binary's `main`; the Python
/// package's process never ran it, and a listening socket that landed on 2 would be written
/// to as the error log.
pub(crate) fn open_standard_descriptors() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_lines_per_cpu() {
        let stat = "cpu  10 0 5 100 0 0 0 0 0 0\n\
                    cpu0 4 1 2 50 3 1 2 0 0 0\n\
                    cpu1 6 0 3 50 0 0 0 1 0 0\n\
                    intr 1 2 3\n\
                    cpu2 1 2\n";
        assert_eq!(
            parse_cpu_ticks(stat),
            [
                CpuTicks {
                    cpu: 0,
                    busy: 7,
                    idle: 53,
                    total: 63
                },
                CpuTicks {
                    cpu: 1,
                    busy: 9,
                    idle: 50,
                    total: 60
                },
            ]
        );
        let mut stat = ProcStat::open().unwrap();
        let first = stat.cpu_ticks().unwrap();
        assert!(!first.is_empty());
        // Read again from the start, it is current: time only goes on.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let again = stat.cpu_ticks().unwrap();
        assert_eq!(again.len(), first.len());
        assert!(again.iter().zip(&first).all(|(b, a)| b.total >= a.total));
        assert!(again.iter().map(|t| t.total).sum::<u64>() > first.iter().map(|t| t.total).sum());
        assert!(current_cpu().is_some());
    }
}

/// The calling thread's kernel id.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// One thread's `/proc/self/task/TID/schedstat` and `stat`, held open: how long it ran on
/// a CPU, how long it was ready to run but waited for one (counted once it runs again),
/// and whether it is ready to run now. What is left of the wall time it was blocked (on
/// I/O, a lock, the GIL).
pub(crate) struct SchedStat {
    schedstat: std::fs::File,
    stat: std::fs::File,
}

/// What `SchedStat::read` found.
pub(crate) struct Sched {
    /// Time on a CPU since the thread started.
    pub(crate) run: std::time::Duration,
    /// Time ready to run, waiting for a CPU, until it last got one.
    pub(crate) wait: std::time::Duration,
    /// Running, or ready to run, now (state `R`).
    pub(crate) runnable: bool,
}

impl SchedStat {
    pub(crate) fn open(tid: i32) -> std::io::Result<SchedStat> {
        Ok(SchedStat {
            schedstat: std::fs::File::open(format!("/proc/self/task/{tid}/schedstat"))?,
            stat: std::fs::File::open(format!("/proc/self/task/{tid}/stat"))?,
        })
    }

    pub(crate) fn read(&self) -> std::io::Result<Sched> {
        use std::os::unix::fs::FileExt;
        let bad = || std::io::Error::other("unexpected /proc contents");
        let mut buf = [0u8; 512];
        let n = self.schedstat.read_at(&mut buf, 0)?;
        let (run, wait) = parse_schedstat(&buf[..n]).ok_or_else(bad)?;
        let n = self.stat.read_at(&mut buf, 0)?;
        let runnable = stat_state(&buf[..n]).ok_or_else(bad)? == b'R';
        Ok(Sched {
            run,
            wait,
            runnable,
        })
    }
}

/// The state letter of a `stat` line (`PID (COMM) S ...`; the name may hold anything, so
/// the state follows its last `)`).
fn stat_state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

/// `schedstat`: `RUN_NS WAIT_NS TIMESLICES`.
fn parse_schedstat(text: &[u8]) -> Option<(std::time::Duration, std::time::Duration)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut fields = text.split_ascii_whitespace().map(|f| f.parse::<u64>().ok());
    let (run, wait) = (fields.next()??, fields.next()??);
    Some((
        std::time::Duration::from_nanos(run),
        std::time::Duration::from_nanos(wait),
    ))
}

#[cfg(test)]
mod schedstat_tests {
    use super::*;

    #[test]
    fn schedstat_reads_run_and_wait_times() {
        assert_eq!(
            parse_schedstat(b"1500 250 7\n"),
            Some((
                std::time::Duration::from_nanos(1500),
                std::time::Duration::from_nanos(250)
            ))
        );
        assert_eq!(parse_schedstat(b"garbage"), None);
        assert_eq!(stat_state(b"12 (a) b) (c) S 1 2 3"), Some(b'S'));
        // This very thread's, after some work (the kernel adds the slice running now at
        // its next tick): it has run, and runs.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(50);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        let own = SchedStat::open(gettid()).unwrap().read().unwrap();
        assert!(own.run > std::time::Duration::ZERO);
        assert!(own.runnable);
    }
}

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): a descendant whose
/// parent exits becomes its child, not init's (`--preload`: the workers the preloader
/// forks through a process that exits at once).
pub(crate) fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer argument.
    unsafe { syscall!(prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong)) }.map(drop)
}

/// The threads of this process other than the calling one, by name (`/proc/self/task`);
/// `Err` when they cannot be counted.
pub(crate) fn other_threads() -> std::io::Result<Vec<String>> {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) }.to_string();
    let mut names = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        let entry = entry?;
        if entry.file_name().to_str() == Some(me.as_str()) {
            continue;
        }
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        names.push(comm.trim_end().to_string());
    }
    Ok(names)
}

/// Sets the parent-death signal of the calling thread's process to `sig` (the parent
/// being the process it has now).
pub(crate) fn die_with_parent(sig: libc::c_int) -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes one signal number.
    unsafe { syscall!(prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong)) }.map(drop)
}

/// A pipe, both ends close-on-exec, with `flags` besides (`O_NONBLOCK`): (read, write).
pub(crate) fn pipe(
    flags: libc::c_int,
) -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the live two-element array.
    unsafe { syscall!(pipe2(fds.as_mut_ptr(), flags | libc::O_CLOEXEC)) }?;
    // SAFETY: pipe2 just returned these descriptors; each is owned once here.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}
