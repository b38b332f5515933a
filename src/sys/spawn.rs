//! Starting a child from the single-threaded master (a worker, or the preloader): fork,
//! take the `--user`/`--group` ids, keep the given descriptors open across the exec, die
//! with the parent, and execute the program by its path, or through a descriptor opened
//! before the switch of ids. Everything the child touches is prepared before the fork:
//! between fork and exec it makes async-signal-safe calls only.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What a child executes, and with what.
pub(crate) struct Child<'a> {
    pub(crate) program: &'a Path,
    /// The program opened before the switch of ids (`O_PATH`), to execute through
    /// `execveat` where the identity cannot reach its path.
    pub(crate) opened: Option<BorrowedFd<'a>>,
    /// `argv[0]` first.
    pub(crate) argv: &'a [OsString],
    /// One `KEY=VALUE` added to the parent's environment; a variable of that name the
    /// parent has is left out.
    pub(crate) env_var: &'a str,
    /// Descriptors left open across the exec (every other is close-on-exec).
    pub(crate) keep_fds: &'a [RawFd],
    /// The ids to take (`Identity::ids`).
    pub(crate) ids: (Option<libc::uid_t>, Option<libc::gid_t>),
    /// Signals the parent handles: back to their defaults in the child.
    pub(crate) reset_signals: &'a [libc::c_int],
}

/// Forks a child that executes `c`; its pid.
///
/// # Safety
/// The calling process must have one thread: the child is then a consistent copy of it
/// (no lock held by another thread), which is what makes the calls before the exec safe.
pub(crate) unsafe fn fork_exec(c: &Child<'_>) -> io::Result<libc::pid_t> {
    let exe = CString::new(c.program.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("the program path contains a NUL byte"))?;
    let args: Vec<CString> = c
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| io::Error::other("an argument contains a NUL byte"))?;
    let env_var =
        CString::new(c.env_var).map_err(|_| io::Error::other("the environment has a NUL byte"))?;
    let name = c.env_var.split('=').next().unwrap_or_default();
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp = inherited_environment(name);
    envp.push(env_var.as_ptr());
    envp.push(std::ptr::null());
    let parent = std::process::id() as libc::pid_t;
    let opened = c.opened.map(|fd| fd.as_raw_fd());
    // Signals are blocked across the fork: until its exec the child must not run the
    // parent's handlers (they write into the parent's self-pipe, which it shares).
    // SAFETY: zeroed sigset_t values are valid out-buffers for sigfillset and
    // pthread_sigmask.
    let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; blocking every signal in this (only) thread.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old_mask);
    }
    // SAFETY: the caller vouches for one thread (the function's contract); the child only
    // calls async-signal-safe functions (setresgid, setresuid, setuid, write, signal,
    // sigprocmask, prctl, getppid, fcntl, execve or execveat, _exit) on data prepared above.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: see above; this branch ends in execve or _exit.
        unsafe {
            become_identity(c.ids);
            exec_child(
                (&exe, opened),
                &argv,
                &envp,
                c.keep_fds,
                c.reset_signals,
                parent,
                &old_mask,
            )
        }
    }
    let forked = if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pid)
    };
    // SAFETY: restores this thread's mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut()) };
    forked
}

/// The child, first, with `--user`/`--group` (`Identity::ids`): every id the identity's,
/// root's real and saved ones too (the master's effective ids are the identity's, so no
/// privilege is needed), and root out of reach; or it exits. Before the parent-death
/// signal, which a change of ids clears.
///
/// # Safety
/// As `exec_child`'s.
unsafe fn become_identity((uid, gid): (Option<libc::uid_t>, Option<libc::gid_t>)) {
    // SAFETY: setresgid, setresuid, setuid, write and _exit are async-signal-safe, and
    // read only the integers and the static message given.
    unsafe {
        let switched = gid.is_none_or(|g| libc::setresgid(g, g, g) == 0)
            && uid
                .is_none_or(|u| libc::setresuid(u, u, u) == 0 && (u == 0 || libc::setuid(0) != 0));
        if !switched {
            let msg = b"m0serve: a worker could not switch to --user/--group before its start\n";
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(1);
        }
    }
}

/// The child's side of `fork_exec`: keep the descriptors across exec, die with the parent,
/// and execute the program by its path, or through its descriptor where one was opened.
/// Never returns.
///
/// # Safety
/// Must be called in the child right after `fork` of a single-threaded process, with
/// pointers to live, NUL-terminated data.
unsafe fn exec_child(
    (exe, opened): (&CString, Option<RawFd>),
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    keep_fds: &[RawFd],
    reset_signals: &[libc::c_int],
    parent: libc::pid_t,
    mask: &libc::sigset_t,
) -> ! {
    // SAFETY: async-signal-safe calls only, on descriptors and memory this process
    // owns; see the function's contract.
    unsafe {
        // The parent's handlers go back to the defaults before signals are let in again.
        for &sig in reset_signals {
            libc::signal(sig, libc::SIG_DFL);
        }
        // SIGINT is ignored until the worker installs its own handlers: a Ctrl-C to the
        // terminal's process group reaches the master, which stops the workers, and a
        // Python started by the package installs no KeyboardInterrupt handler over an
        // ignored SIGINT (it would print a traceback from the middle of its start).
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut());
        // A worker whose master is gone (killed) must not serve on: it gets SIGTERM.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        // Leave these open across exec (everything else the parent holds is CLOEXEC).
        for &fd in keep_fds {
            libc::fcntl(fd, libc::F_SETFD, 0);
        }
        match opened {
            // The program through its descriptor; execveat is a bare system call, glibc
            // 2.17 has no wrapper.
            Some(fd) => {
                libc::syscall(
                    libc::SYS_execveat,
                    fd,
                    c"".as_ptr(),
                    argv.as_ptr(),
                    envp.as_ptr(),
                    libc::AT_EMPTY_PATH,
                );
            }
            None => {
                libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr());
            }
        }
        libc::_exit(127);
    }
}

/// The process's environment as `KEY=VALUE` pointers (no terminating NULL), except the
/// variable `name` (the one the child is given anew).
fn inherited_environment(name: &str) -> Vec<*const libc::c_char> {
    extern "C" {
        static environ: *const *const libc::c_char;
    }
    let mut out = Vec::new();
    let prefix = format!("{name}=");
    // SAFETY: `environ` is the process's NULL-terminated array of C strings; the process
    // is single-threaded (`fork_exec`'s contract), so nothing changes it while it is read,
    // and the pointers stay valid in the forked child (a copy of this memory) until its
    // exec.
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let entry = std::ffi::CStr::from_ptr(*p);
            if !entry.to_bytes().starts_with(prefix.as_bytes()) {
                out.push(*p);
            }
            p = p.add(1);
        }
    }
    out
}
