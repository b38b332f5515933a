//! `wsgi.file_wrapper` (PEP 3333 "Optional Platform-Specific File Handling"): wraps a
//! file-like object as an iterable of blocks and closes it with the response. Serving it
//! with `sendfile(2)` from the loop comes with the performance issue; this is the portable
//! form every server must provide.

use pyo3::prelude::*;

/// Default block size when the app gives none (the PEP leaves it to the server).
const FILE_WRAPPER_BLOCK_BYTES: usize = 64 * 1024;

#[pyclass(module = "m0serve", name = "FileWrapper")]
pub struct FileWrapper {
    filelike: Py<PyAny>,
    blksize: usize,
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
