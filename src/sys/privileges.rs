//! `--user`, `--group` and `--umask`: who the server runs as once its sockets are bound.
//!
//! The master binds (ports under 1024 need root), writes its pid file and gives its Unix
//! sockets to the identity, then calls [`Identity::assume_effective`]: it runs with the
//! identity's effective ids and groups, and keeps root as its real and saved user id, as
//! gunicorn's arbiter keeps root. So the app, which runs as the identity, cannot signal or
//! trace its master, and the master can take root back to remove its pid file and sockets
//! as it exits ([`Identity::regain_root`]). Each worker switches all its ids in the fork
//! before its exec ([`Identity::ids`]: unprivileged, since the identity's ids are the
//! master's effective ones), and calls [`Identity::assume`] again before Python starts,
//! where it only checks that it runs as the identity named. A switch that does not take
//! refuses the start: a worker that was told to shed root and still holds it must not
//! serve.

use std::ffi::{CStr, CString};

use super::syscall;

/// The user and group to switch to, resolved against the user database at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    /// `--user`: the numeric id, and the name (for the supplementary groups) when the
    /// user database has one.
    pub(crate) user: Option<(libc::uid_t, Option<CString>)>,
    /// `--group`, or the user's primary group.
    pub(crate) group: Option<libc::gid_t>,
    /// The flags as given, for messages.
    pub(crate) describe: String,
}

/// A user-database entry: id, name and primary group.
struct Passwd {
    uid: libc::uid_t,
    gid: libc::gid_t,
    name: CString,
}

/// getpwnam_r / getpwuid_r's buffer: the size sysconf suggests, grown on ERANGE.
fn lookup_user(by: Result<&CStr, libc::uid_t>) -> Result<Option<Passwd>, String> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: passwd is plain data; all-zero is a valid (empty) value for it.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = match by {
            // SAFETY: `name` is NUL-terminated; `pw`, `buf` and `found` are live and `buf`'s
            // length is passed, so the call writes only inside them.
            Ok(name) => unsafe {
                libc::getpwnam_r(
                    name.as_ptr(),
                    &mut pw,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut found,
                )
            },
            // SAFETY: as above.
            Err(uid) => unsafe {
                libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found)
            },
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc).to_string());
        }
        if found.is_null() {
            return Ok(None);
        }
        // SAFETY: on success pw_name points at a NUL-terminated string inside `buf`, which
        // is still alive; it is copied before `buf` goes.
        let name = unsafe { CStr::from_ptr(pw.pw_name) }.to_owned();
        return Ok(Some(Passwd {
            uid: pw.pw_uid,
            gid: pw.pw_gid,
            name,
        }));
    }
}

/// A group's id by name, from the group database.
fn lookup_group(name: &CStr) -> Result<Option<libc::gid_t>, String> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: group is plain data; all-zero is a valid (empty) value for it.
        let mut gr: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `name` is NUL-terminated; `gr`, `buf` and `found` are live and `buf`'s
        // length is passed.
        let rc = unsafe {
            libc::getgrnam_r(
                name.as_ptr(),
                &mut gr,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc).to_string());
        }
        return Ok((!found.is_null()).then_some(gr.gr_gid));
    }
}

/// A name for the databases: no NUL, not empty.
fn c_name(flag: &str, s: &str) -> Result<CString, String> {
    if s.is_empty() {
        return Err(format!("{flag}: empty name"));
    }
    CString::new(s).map_err(|_| format!("{flag} {s:?}: the name contains a NUL byte"))
}

/// An id given as digits: a number below 2^32 - 1 (that value is the "no change" id of the
/// system calls, not an identity).
fn numeric_id(flag: &str, s: &str) -> Result<Option<u32>, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    match s.parse::<u32>() {
        Ok(v) if v != u32::MAX => Ok(Some(v)),
        _ => Err(format!("{flag} {s}: not a valid id")),
    }
}

impl Identity {
    /// Resolves `--user` and `--group` (names or numeric ids). Without `--group`, the
    /// user's primary group; a numeric user the database does not know needs `--group`.
    pub(crate) fn resolve(user: Option<&str>, group: Option<&str>) -> Result<Identity, String> {
        let mut id = Identity::default();
        let mut primary = None;
        if let Some(u) = user {
            let entry = match numeric_id("--user", u)? {
                Some(uid) => lookup_user(Err(uid))
                    .map_err(|e| format!("--user {u}: cannot read the user database: {e}"))?
                    .map(Ok)
                    .unwrap_or(Err(uid)),
                None => {
                    let name = c_name("--user", u)?;
                    match lookup_user(Ok(&name))
                        .map_err(|e| format!("--user {u}: cannot read the user database: {e}"))?
                    {
                        Some(p) => Ok(p),
                        None => return Err(format!("--user {u}: no such user")),
                    }
                }
            };
            id.user = Some(match entry {
                Ok(p) => {
                    primary = Some(p.gid);
                    (p.uid, Some(p.name))
                }
                Err(uid) => (uid, None),
            });
        }
        if let Some(g) = group {
            id.group = Some(match numeric_id("--group", g)? {
                Some(gid) => gid,
                None => {
                    let name = c_name("--group", g)?;
                    lookup_group(&name)
                        .map_err(|e| format!("--group {g}: cannot read the group database: {e}"))?
                        .ok_or_else(|| format!("--group {g}: no such group"))?
                }
            });
        } else if let Some(u) = user {
            id.group = Some(primary.ok_or_else(|| {
                format!(
                    "--user {u}: the user database has no entry for this id, so it names no \
                     primary group: give --group too"
                )
            })?);
        }
        id.describe = match (user, group) {
            (Some(u), Some(g)) => format!("user {u}, group {g}"),
            (Some(u), None) => format!("user {u}"),
            (None, Some(g)) => format!("group {g}"),
            (None, None) => String::new(),
        };
        Ok(id)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.user.is_none() && self.group.is_none()
    }

    /// Whether this process already runs as the identity: real, effective and saved ids.
    pub(crate) fn is_current(&self) -> bool {
        let (mut r, mut e, mut s) = (0, 0, 0);
        // SAFETY: getresuid writes three ids into live locals.
        let uid_ok = unsafe { libc::getresuid(&mut r, &mut e, &mut s) } == 0
            && self.user.as_ref().is_none_or(|(u, _)| [r, e, s] == [*u; 3]);
        let (mut r, mut e, mut s) = (0, 0, 0);
        // SAFETY: getresgid writes three ids into live locals.
        let gid_ok = unsafe { libc::getresgid(&mut r, &mut e, &mut s) } == 0
            && self.group.is_none_or(|g| [r, e, s] == [g; 3]);
        uid_ok && gid_ok
    }

    /// Switches this process to the identity: supplementary groups (the user's own, or the
    /// group alone), then the group, then the user, real, effective and saved alike, so
    /// that nothing can switch back. A process already running as the identity (a worker,
    /// whose master switched before it started it) only checks that it does. Before any
    /// thread starts: the ids are per thread to the kernel, and glibc's broadcast to other
    /// threads is not something to lean on here.
    pub(crate) fn assume(&self) -> Result<(), String> {
        if self.is_empty() || self.is_current() {
            return Ok(());
        }
        self.require_root()?;
        let fail = |step: &str| self.failed(step);
        if let Some(gid) = self.group {
            self.set_groups()
                .map_err(|_| fail("setting the supplementary groups"))?;
            // SAFETY: setgid has no memory preconditions; as root it sets all three gids.
            unsafe { syscall!(setgid(gid)) }.map_err(|_| fail("setgid"))?;
        }
        if let Some((uid, _)) = &self.user {
            // SAFETY: setuid has no memory preconditions; as root it sets all three uids.
            unsafe { syscall!(setuid(*uid)) }.map_err(|_| fail("setuid"))?;
        }
        if !self.is_current() {
            return Err(format!(
                "cannot switch to {}: the process's ids did not all change",
                self.describe
            ));
        }
        if let Some((uid, _)) = &self.user {
            // SAFETY: setuid has no memory preconditions. It must fail now: an identity
            // that can take root back has not dropped it.
            if *uid != 0 && unsafe { libc::setuid(0) } == 0 {
                return Err(format!(
                    "cannot switch to {}: root could be taken back",
                    self.describe
                ));
            }
        }
        Ok(())
    }
}

impl Identity {
    /// The user and group ids to switch to (each `None` to keep the current one).
    pub(crate) fn ids(&self) -> (Option<libc::uid_t>, Option<libc::gid_t>) {
        (self.user.as_ref().map(|(uid, _)| *uid), self.group)
    }

    /// The master's switch (see the module documentation): the identity's supplementary
    /// groups, and its group and user as the effective ids; the real and saved ids stay
    /// root's. As root only.
    pub(crate) fn assume_effective(&self) -> Result<(), String> {
        // Started as the identity already (a container's `USER`): nothing to switch.
        if self.is_empty() || self.is_current() {
            return Ok(());
        }
        self.require_root()?;
        let fail = |step: &str| self.failed(step);
        self.set_groups()
            .map_err(|_| fail("setting the supplementary groups"))?;
        let keep = libc::gid_t::MAX;
        if let Some(gid) = self.group {
            // SAFETY: setresgid has no memory preconditions; -1 keeps an id.
            unsafe { syscall!(setresgid(keep, gid, keep)) }.map_err(|_| fail("setresgid"))?;
        }
        if let Some((uid, _)) = &self.user {
            // SAFETY: as above.
            unsafe { syscall!(setresuid(keep, *uid, keep)) }.map_err(|_| fail("setresuid"))?;
        }
        Ok(())
    }

    /// The master, as it exits: root again as its effective user and group (its saved
    /// ids), to remove what it made in directories only root may write.
    pub(crate) fn regain_root(&self) {
        if self.is_empty() {
            return;
        }
        let keep = libc::gid_t::MAX;
        // SAFETY: setresuid and setresgid have no memory preconditions; the user first,
        // since changing the group back needs root.
        unsafe {
            libc::setresuid(keep, 0, keep);
            libc::setresgid(keep, 0, keep);
        }
    }

    /// Only root can switch.
    fn require_root(&self) -> Result<(), String> {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Err(format!(
                "cannot switch to {}: only root can, and m0serve runs as uid {euid} (start \
                 it as root, or leave --user and --group out)",
                self.describe
            ));
        }
        Ok(())
    }

    /// The message for a `step` of the switch that failed, with the system's reason.
    fn failed(&self, step: &str) -> String {
        format!(
            "cannot switch to {}: {step}: {}",
            self.describe,
            std::io::Error::last_os_error()
        )
    }

    /// The supplementary groups: the user's own, or the group alone.
    fn set_groups(&self) -> std::io::Result<libc::c_int> {
        let Some(gid) = self.group else {
            return Ok(0);
        };
        match &self.user {
            // SAFETY: `name` is NUL-terminated; initgroups reads the group database and
            // sets this process's supplementary groups.
            Some((_, Some(name))) => unsafe { syscall!(initgroups(name.as_ptr(), gid)) },
            // SAFETY: one gid, read from a live local.
            _ => unsafe { syscall!(setgroups(1, &gid)) },
        }
    }

    /// Gives `path` (a Unix socket the master bound) to the identity, so that the master
    /// and the workers, and whoever the identity's group or `--uds-permissions` let in,
    /// may use it.
    pub(crate) fn give(&self, path: &std::path::Path) -> std::io::Result<()> {
        let (uid, gid) = self.ids();
        std::os::unix::fs::chown(path, uid, gid)
    }
}

/// How a worker reaches the program it executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProgramReach {
    /// By its path: a reload runs whatever is installed there then.
    Path,
    /// Only through the descriptor opened before the switch (a directory above the
    /// program is closed to the identity): every worker runs the file as it was at start.
    Opened,
}

/// With the identity's effective ids assumed: whether it can start a worker, which executes
/// `program` (by its path, or else through `opened`, the descriptor `sys::open_program`
/// took before the switch) and loads again the shared libraries this process loaded
/// (libpython among them). `Err` names the path, the identity (`who`) and why.
pub(crate) fn can_start_workers(
    program: &std::path::Path,
    opened: Option<std::os::fd::BorrowedFd>,
    who: &str,
) -> Result<ProgramReach, String> {
    let reach = match super::may_execute(program) {
        Ok(()) => ProgramReach::Path,
        Err(by_path) => match opened.and_then(super::may_execute_opened) {
            Some(Ok(())) => ProgramReach::Opened,
            Some(Err(e)) => return Err(cannot_run(program, who, &e)),
            None => return Err(cannot_run(program, who, &by_path)),
        },
    };
    // The program itself is executed, not opened by path, so it is not asked about again.
    let itself = std::fs::canonicalize(program).ok();
    for lib in super::loaded_libraries() {
        if itself.as_deref() == Some(lib.as_path()) {
            continue;
        }
        super::may_read(&lib).map_err(|e| {
            let what = if lib
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libpython"))
            {
                "libpython"
            } else {
                "shared library"
            };
            format!(
                "the workers' {what} {}: {who} cannot read it ({e}); the workers run as \
                 {who} and load it, so install Python and m0serve where {who} can reach \
                 them (every directory above searchable), or start without --user",
                lib.display()
            )
        })?;
    }
    Ok(reach)
}

fn cannot_run(program: &std::path::Path, who: &str, e: &std::io::Error) -> String {
    format!(
        "the workers' program {}: {who} cannot run it ({e}); install m0serve where {who} \
         can reach it (every directory above it searchable, the file executable by \
         {who}), or start without --user",
        program.display()
    )
}

/// An octal mode or mask (`022`, `0o027`, `660`), at most 0o777.
pub(crate) fn octal_mode(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    if digits.is_empty() || digits.starts_with('+') {
        return None;
    }
    u32::from_str_radix(digits, 8).ok().filter(|&v| v <= 0o777)
}

/// `--umask`: an octal mask (`022`, `0o027`, `77`), at most 0o777.
pub(crate) fn parse_umask(s: &str) -> Result<libc::mode_t, String> {
    octal_mode(s)
        .ok_or_else(|| format!("--umask {s}: expected an octal mask from 0 to 777 (e.g. 022)"))
}

/// Sets the process's file creation mask; the workers inherit it.
pub(crate) fn set_umask(mask: libc::mode_t) {
    // SAFETY: umask cannot fail and has no memory preconditions.
    unsafe { libc::umask(mask) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn umask_is_read_as_octal_and_bounded() {
        assert_eq!(parse_umask("022"), Ok(0o22));
        assert_eq!(parse_umask("0o027"), Ok(0o27));
        assert_eq!(parse_umask("77"), Ok(0o77));
        // --uds-permissions reads its mode the same way.
        assert_eq!(octal_mode("0o660"), Some(0o660));
        assert_eq!(octal_mode("660"), Some(0o660));
        assert_eq!(parse_umask("0"), Ok(0));
        for bad in ["", "8", "0o", "1000", "-1", "+7", "0x12", "abc"] {
            assert!(parse_umask(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn root_resolves_by_name_and_by_id_and_unknown_names_are_refused() {
        let by_name = Identity::resolve(Some("root"), None).unwrap();
        assert_eq!(by_name.user.as_ref().unwrap().0, 0);
        assert_eq!(by_name.group, Some(0));
        let by_id = Identity::resolve(Some("0"), Some("0")).unwrap();
        assert_eq!(by_id.user.as_ref().unwrap().0, 0);
        let e = Identity::resolve(Some("no-such-user-m0s"), None).unwrap_err();
        assert!(e.contains("no such user"), "{e}");
        let e = Identity::resolve(None, Some("no-such-group-m0s")).unwrap_err();
        assert!(e.contains("no such group"), "{e}");
        let e = Identity::resolve(Some("4294967295"), None).unwrap_err();
        assert!(e.contains("not a valid id"), "{e}");
    }

    #[test]
    fn an_id_the_database_does_not_know_needs_a_group() {
        let e = Identity::resolve(Some("3999999999"), None).unwrap_err();
        assert!(e.contains("give --group too"), "{e}");
        let id = Identity::resolve(Some("3999999999"), Some("3999999999")).unwrap();
        assert_eq!(id.user, Some((3999999999, None)));
        assert_eq!(id.group, Some(3999999999));
    }
}
