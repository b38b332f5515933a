//! `wsgi.input`: a file-like object over the request body (PEP 3333 "Input and Error
//! Streams": `read(size)`, `readline(size)`, `readlines(hint)`, iteration).
//!
//! The body arrives whole from the loop (`msg::Request::data`, after the head), so this
//! object owns that buffer and hands out `bytes` slices of it: the body is not copied again
//! until the app asks for it. A body over `--body-buffer-size` arrives as a spooled file
//! instead (`crate::sys::spool`), read with `pread` as the app asks.

use std::os::unix::fs::FileExt;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::sys::spool::SpooledBody;

/// Bytes read from a spooled body per step while looking for a line's end.
const LINE_SCAN_BYTES: usize = 8 * 1024;

#[pyclass(module = "m0serve", name = "Input")]
pub(crate) struct Input {
    data: Vec<u8>,
    pos: usize,
    /// A body over `--body-buffer-size`, read from its file (then `data` holds no body).
    file: Option<SpooledBody>,
    /// Read position in `file`.
    fpos: u64,
}

impl Input {
    /// `data[start..]` is the body, or `spooled` holds it.
    pub(crate) fn new(data: Vec<u8>, start: usize, spooled: Option<SpooledBody>) -> Input {
        let pos = start.min(data.len());
        Input {
            data,
            pos,
            file: spooled,
            fpos: 0,
        }
    }

    fn remaining(&self) -> usize {
        match &self.file {
            Some(f) => (f.len - self.fpos) as usize,
            None => self.data.len() - self.pos,
        }
    }

    /// How many bytes the next line takes, at most `limit`.
    fn line_len(&self, limit: usize) -> PyResult<usize> {
        let Some(f) = &self.file else {
            let rest = &self.data[self.pos..];
            let window = &rest[..limit.min(rest.len())];
            return Ok(match window.iter().position(|&b| b == b'\n') {
                Some(i) => i + 1,
                None => window.len(),
            });
        };
        let max = limit.min(self.remaining());
        let mut buf = [0u8; LINE_SCAN_BYTES];
        let mut seen = 0usize;
        while seen < max {
            let want = (max - seen).min(LINE_SCAN_BYTES);
            f.file
                .read_exact_at(&mut buf[..want], self.fpos + seen as u64)
                .map_err(|e| PyOSError::new_err(format!("reading the spooled body: {e}")))?;
            if let Some(i) = buf[..want].iter().position(|&b| b == b'\n') {
                return Ok(seen + i + 1);
            }
            seen += want;
        }
        Ok(max)
    }

    fn take<'py>(&mut self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let Some(f) = &self.file else {
            let out = PyBytes::new(py, &self.data[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(out);
        };
        let at = self.fpos;
        let out = PyBytes::new_with(py, n, |buf| {
            f.file
                .read_exact_at(buf, at)
                .map_err(|e| PyOSError::new_err(format!("reading the spooled body: {e}")))
        })?;
        self.fpos += n as u64;
        Ok(out)
    }
}

/// A handler's `wsgi.input`, handed to one request after another while nothing else holds
/// it (an app may keep it, or a body set aside keeps its environ): a request allocates no
/// object for it.
#[derive(Default)]
pub(crate) struct Inputs {
    last: Option<Py<Input>>,
}

impl Inputs {
    /// `wsgi.input` over `data[start..]` or `spooled`.
    pub(crate) fn for_request<'py>(
        &mut self,
        py: Python<'py>,
        data: Vec<u8>,
        start: usize,
        spooled: Option<SpooledBody>,
    ) -> PyResult<Bound<'py, Input>> {
        let fresh = Input::new(data, start, spooled);
        if let Some(last) = self.unshared(py) {
            if let Ok(mut input) = last.try_borrow_mut() {
                *input = fresh;
                drop(input);
                return Ok(last);
            }
        }
        let input = Bound::new(py, fresh)?;
        self.last = Some(input.clone().unbind());
        Ok(input)
    }

    /// The request is over: the body is let go now, not when the next request comes, if
    /// nothing else holds the object (else its holder keeps it).
    pub(crate) fn release(&mut self, py: Python<'_>) {
        if let Some(last) = self.unshared(py) {
            if let Ok(mut input) = last.try_borrow_mut() {
                *input = Input::new(Vec::new(), 0, None);
            }
        }
    }

    /// The last object handed out, if only this holds it.
    fn unshared<'py>(&self, py: Python<'py>) -> Option<Bound<'py, Input>> {
        let last = self.last.as_ref()?;
        (super::refs(py, last) == 1).then(|| last.bind(py).clone())
    }
}

/// A size argument: `None` or a negative number means "no limit".
fn limit(size: Option<isize>) -> usize {
    match size {
        Some(n) if n >= 0 => n as usize,
        _ => usize::MAX,
    }
}

#[pymethods]
impl Input {
    #[pyo3(signature = (size = None))]
    fn read<'py>(&mut self, py: Python<'py>, size: Option<isize>) -> PyResult<Bound<'py, PyBytes>> {
        let n = limit(size).min(self.remaining());
        self.take(py, n)
    }

    #[pyo3(signature = (size = None))]
    fn readline<'py>(
        &mut self,
        py: Python<'py>,
        size: Option<isize>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let n = self.line_len(limit(size))?;
        self.take(py, n)
    }

    /// Lines until `hint` bytes have been read (PEP 3333: the hint may be ignored; we
    /// honour it as `io.IOBase.readlines` does).
    #[pyo3(signature = (hint = None))]
    fn readlines<'py>(
        &mut self,
        py: Python<'py>,
        hint: Option<isize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let hint = match hint {
            Some(h) if h > 0 => h as usize,
            _ => usize::MAX,
        };
        let lines = PyList::empty(py);
        let mut total = 0usize;
        while self.remaining() > 0 && total < hint {
            let n = self.line_len(usize::MAX)?;
            total += n;
            lines.append(self.take(py, n)?)?;
        }
        Ok(lines)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        if self.remaining() == 0 {
            return Ok(None);
        }
        let n = self.line_len(usize::MAX)?;
        self.take(py, n).map(Some)
    }

    /// Not in PEP 3333, but frameworks probe for it.
    fn readable(&self) -> bool {
        true
    }

    fn close(&mut self) {}
}
