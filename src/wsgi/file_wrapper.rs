//! `wsgi.file_wrapper` (PEP 3333 "Optional Platform-Specific File Handling"): wraps a
//! file-like object as an iterable of blocks and closes it with the response. When the app
//! returns the wrapper itself over a regular binary file, the handler hands the loop a dup
//! of its descriptor and the loop sends it with `sendfile(2)`: the body never passes
//! through user space. Anything else is iterated block by block.

use std::os::fd::{FromRawFd, OwnedFd};

use pyo3::prelude::*;

use crate::sys::syscall;

/// Default block size when the app gives none (the PEP leaves it to the server).
const FILE_WRAPPER_BLOCK_BYTES: usize = 64 * 1024;

#[pyclass(module = "m0serve", name = "FileWrapper")]
pub(crate) struct FileWrapper {
    filelike: Py<PyAny>,
    blksize: usize,
}

impl FileWrapper {
    /// The wrapped object as a regular file the loop can `sendfile(2)` from: a descriptor
    /// of our own (a dup, close-on-exec), the object's current position, and the bytes
    /// from there to the end. `None` (and the body is iterated instead) for anything else:
    /// no `fileno()`, a text-mode file, a pipe or socket, an error on the way.
    pub(crate) fn regular_file(&self, py: Python<'_>) -> Option<(OwnedFd, u64, u64)> {
        let f = self.filelike.bind(py);
        let probe = || -> PyResult<Option<(i32, u64)>> {
            if f.hasattr("encoding")? {
                return Ok(None); // text mode: iterating it yields str, an app error
            }
            let fd: i32 = f.call_method0("fileno")?.extract()?;
            // The object's own position, not the descriptor's: a buffered reader may have
            // read ahead.
            let pos: u64 = f.call_method0("tell")?.extract()?;
            Ok(Some((fd, pos)))
        };
        let (fd, pos) = match probe() {
            Ok(Some(p)) => p,
            Ok(None) | Err(_) => return None,
        };
        // SAFETY: a zeroed stat is a valid out-value for fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes one stat into the live `st`; a bad descriptor is an error.
        unsafe { syscall!(fstat(fd, &mut st)) }.ok()?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return None;
        }
        let size = st.st_size as u64;
        // SAFETY: F_DUPFD_CLOEXEC duplicates the descriptor into a new one this code owns.
        let dup = unsafe { syscall!(fcntl(fd, libc::F_DUPFD_CLOEXEC, 0)) }.ok()?;
        // SAFETY: fcntl just returned this new descriptor; nothing else owns it.
        let dup = unsafe { OwnedFd::from_raw_fd(dup) };
        Some((dup, pos.min(size), size.saturating_sub(pos)))
    }
}

#[pymethods]
impl FileWrapper {
    #[new]
    #[pyo3(signature = (filelike, blksize = FILE_WRAPPER_BLOCK_BYTES))]
    fn new(filelike: Py<PyAny>, blksize: usize) -> FileWrapper {
        FileWrapper {
            filelike,
            blksize: blksize.max(1),
        }
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let block = self
            .filelike
            .bind(py)
            .call_method1("read", (self.blksize,))?;
        if block.len().unwrap_or(0) == 0 {
            return Ok(None);
        }
        Ok(Some(block))
    }

    /// PEP 3333: the wrapper's `close()` calls the file-like object's `close()` if it has
    /// one.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let f = self.filelike.bind(py);
        if f.hasattr("close")? {
            f.call_method0("close")?;
        }
        Ok(())
    }
}
