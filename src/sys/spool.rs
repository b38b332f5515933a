//! Request bodies larger than `--body-buffer-size` are not held in memory: past that size
//! the loop appends them to an unlinked temporary file (`O_TMPFILE` in the temporary
//! directory), and `wsgi.input` reads them back from it with `pread`.
//!
//! Spooling rather than streaming the body to a running app: the app still starts only once
//! the whole body is in (so a slow upload never holds a handler thread, which stays the
//! scarcer resource), and `wsgi.input` keeps its simple whole-body semantics. The cost is
//! one write and one read of the body through the page cache, on bodies large enough
//! (1 MiB by default) that the app's own work on them dominates. The writes happen on the
//! loop thread; they go to the page cache and do not wait for the disk.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A request body spooled to a file, `len` bytes from its start.
#[derive(Debug)]
pub struct SpooledBody {
    pub(crate) file: File,
    pub len: u64,
}

/// A body being spooled.
#[derive(Debug)]
pub(crate) struct Spool {
    file: File,
    len: u64,
}

impl Spool {
    pub(crate) fn create() -> io::Result<Spool> {
        Ok(Spool {
            file: temp_file()?,
            len: 0,
        })
    }

    pub(crate) fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    pub(crate) fn finish(self) -> SpooledBody {
        SpooledBody {
            file: self.file,
            len: self.len,
        }
    }
}

/// An anonymous read-write file: `O_TMPFILE` where the file system supports it, else a
/// uniquely named file removed at once.
fn temp_file() -> io::Result<File> {
    let dir = std::env::temp_dir();
    let cdir = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("the temporary directory's path contains a NUL"))?;
    // SAFETY: open(2) with a NUL-terminated path and flags; the returned descriptor is owned
    // by the `File` made from it, once.
    let fd = unsafe {
        libc::open(
            cdir.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd >= 0 {
        // SAFETY: see above.
        return Ok(unsafe { File::from_raw_fd(fd) });
    }
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Relaxed: only uniqueness within this process matters.
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("m0serve-body-{}-{n}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}
