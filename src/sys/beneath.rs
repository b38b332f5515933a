//! Files opened beneath a directory descriptor (`--static-map`): whatever the path says,
//! and wherever a symbolic link on it points, the file opened is under that directory.
//!
//! `openat2` with `RESOLVE_BENEATH` (Linux 5.6) makes the kernel refuse any step out of the
//! directory: `..` past it, an absolute symbolic link, one whose target climbs out. Where
//! the kernel lacks it (ENOSYS, or a seccomp filter's EPERM), each component is opened in
//! turn with `O_NOFOLLOW`, so no symbolic link is followed at all: stricter, never looser.
//! The callers' paths have no `.` or `..` segment (`http::static_files::file_path`), which
//! the walk also refuses on its own.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use super::syscall;

/// `openat2` is known to be missing here (the first ENOSYS or EPERM said so).
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Which symbolic links a path may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Links {
    /// Those that stay under the directory (with `openat2`; the fallback takes none).
    Beneath,
    /// Any (`--static-follow-symlinks`: a `collectstatic --link` tree); the path itself
    /// still cannot climb.
    Anywhere,
}

/// Opens `path` (relative, `/`-separated, no NUL, no `.` or `..` segment) under `dir` for
/// reading, close-on-exec, taking the symbolic links `links` allows.
pub(crate) fn open_beneath(dir: BorrowedFd<'_>, path: &[u8], links: Links) -> io::Result<OwnedFd> {
    if path.is_empty()
        || path[0] == b'/'
        || path.contains(&0)
        || path.split(|&b| b == b'/').any(|p| p == b"." || p == b"..")
    {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    if links == Links::Anywhere {
        return openat(dir, path, libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY);
    }
    // Relaxed: a hint only; two threads finding out at once both fall back.
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        match openat2(dir, path) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) => {
                NO_OPENAT2.store(true, Ordering::Relaxed);
            }
            r => return r,
        }
    }
    walk(dir, path)
}

fn openat(dir: BorrowedFd<'_>, path: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `c` is NUL-terminated and lives across the call; `dir` is a live descriptor.
    let fd = unsafe { syscall!(openat(dir.as_raw_fd(), c.as_ptr(), flags)) }?;
    // SAFETY: openat returned a new descriptor; it is owned once here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn openat2(dir: BorrowedFd<'_>, path: &[u8]) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: a zeroed open_how is a valid value (no flags, no mode, no resolve flags).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    loop {
        // SAFETY: `c` is NUL-terminated and `how` a valid open_how of the size given, both
        // alive across the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: openat2 returned a new descriptor; it is owned once here.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) });
        }
        let e = io::Error::last_os_error();
        // EAGAIN: a rename raced the lookup (RESOLVE_BENEATH asks to try again).
        if !matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN)) {
            return Err(e);
        }
    }
}

/// The fallback: each directory on the path opened with `O_PATH | O_DIRECTORY |
/// O_NOFOLLOW`, the file with `O_NOFOLLOW`; a `.` or `..` component is refused.
fn walk(dir: BorrowedFd<'_>, path: &[u8]) -> io::Result<OwnedFd> {
    let parts: Vec<&[u8]> = path
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    let Some((last, dirs)) = parts.split_last() else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    let mut held: Option<OwnedFd> = None;
    for (i, part) in dirs.iter().chain(std::iter::once(last)).enumerate() {
        if *part == b"." || *part == b".." {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let flags = libc::O_CLOEXEC
            | libc::O_NOFOLLOW
            | if i == dirs.len() {
                libc::O_RDONLY | libc::O_NOCTTY
            } else {
                libc::O_PATH | libc::O_DIRECTORY
            };
        let at = held.as_ref().map_or(dir, |f| f.as_fd());
        held = Some(openat(at, part, flags)?);
    }
    held.ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Opens a directory to serve files beneath (`O_PATH | O_DIRECTORY`, close-on-exec).
pub(crate) fn open_dir(path: &std::path::Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is NUL-terminated and lives across the call.
    let fd = unsafe {
        syscall!(open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC
        ))
    }?;
    // SAFETY: open returned a new descriptor; it is owned once here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn tree() -> (std::path::PathBuf, OwnedFd) {
        let base = std::env::temp_dir().join(format!("m0s-beneath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("mount/sub")).unwrap();
        std::fs::write(base.join("secret"), "outside").unwrap();
        std::fs::write(base.join("mount/sub/a.txt"), "inside").unwrap();
        std::os::unix::fs::symlink("../secret", base.join("mount/out")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", base.join("mount/abs")).unwrap();
        std::os::unix::fs::symlink("sub/a.txt", base.join("mount/in")).unwrap();
        let dir = open_dir(&base.join("mount")).unwrap();
        (base, dir)
    }

    fn read(fd: OwnedFd) -> String {
        let mut s = String::new();
        use std::io::Read;
        std::fs::File::from(fd).read_to_string(&mut s).unwrap();
        s
    }

    #[test]
    fn nothing_outside_the_directory_is_opened_by_any_path_or_link() {
        let (base, dir) = tree();
        assert_eq!(
            read(open_beneath(dir.as_fd(), b"sub/a.txt", Links::Beneath).unwrap()),
            "inside"
        );
        for bad in [
            &b"out"[..],
            b"abs",
            b"../secret",
            b"sub/../../secret",
            b"/etc/passwd",
        ] {
            assert!(
                open_beneath(dir.as_fd(), bad, Links::Beneath).is_err(),
                "{:?}",
                bad
            );
        }
        // A link that stays inside is followed.
        assert_eq!(
            read(open_beneath(dir.as_fd(), b"in", Links::Beneath).unwrap()),
            "inside"
        );
        // Anywhere: any link, but the path itself never climbs.
        assert_eq!(
            read(open_beneath(dir.as_fd(), b"out", Links::Anywhere).unwrap()),
            "outside"
        );
        for bad in [&b"../secret"[..], b"sub/../../secret", b"/etc/passwd"] {
            assert!(
                open_beneath(dir.as_fd(), bad, Links::Anywhere).is_err(),
                "{:?}",
                bad
            );
        }
        // The fallback refuses every link and every climb.
        assert_eq!(read(walk(dir.as_fd(), b"sub/a.txt").unwrap()), "inside");
        for bad in [&b"out"[..], b"abs", b"in", b"../secret", b"sub/../a.txt"] {
            assert!(walk(dir.as_fd(), bad).is_err(), "{:?}", bad);
        }
        std::fs::remove_dir_all(base).unwrap();
    }
}
