//! `wsgi.input`: a file-like object over the request body (PEP 3333 "Input and Error
//! Streams": `read(size)`, `readline(size)`, `readlines(hint)`, iteration).
//!
//! The body arrives whole from the loop (`msg::Request::data`, after the head), so this
//! object owns that buffer and hands out `bytes` slices of it: the body is not copied again
//! until the app asks for it.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

#[pyclass(module = "m0serve", name = "Input")]
pub struct Input {
    data: Vec<u8>,
    pos: usize,
}

impl Input {
    /// `data[start..]` is the body.
    pub fn new(data: Vec<u8>, start: usize) -> Input {
        let pos = start.min(data.len());
        Input { data, pos }
    }

    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// How many bytes the next line takes, at most `limit`.
    fn line_len(&self, limit: usize) -> usize {
        let rest = &self.data[self.pos..];
        let window = &rest[..limit.min(rest.len())];
        match window.iter().position(|&b| b == b'\n') {
            Some(i) => i + 1,
            None => window.len(),
        }
    }

    fn take<'py>(&mut self, py: Python<'py>, n: usize) -> Bound<'py, PyBytes> {
        let out = PyBytes::new(py, &self.data[self.pos..self.pos + n]);
        self.pos += n;
        out
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
    fn read<'py>(&mut self, py: Python<'py>, size: Option<isize>) -> Bound<'py, PyBytes> {
        let n = limit(size).min(self.remaining());
        self.take(py, n)
    }

    #[pyo3(signature = (size = None))]
    fn readline<'py>(&mut self, py: Python<'py>, size: Option<isize>) -> Bound<'py, PyBytes> {
        let n = self.line_len(limit(size));
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
            let n = self.line_len(usize::MAX);
            total += n;
            lines.append(self.take(py, n))?;
        }
        Ok(lines)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        if self.remaining() == 0 {
            return None;
        }
        let n = self.line_len(usize::MAX);
        Some(self.take(py, n))
    }

    /// Not in PEP 3333, but frameworks probe for it.
    fn readable(&self) -> bool {
        true
    }

    fn close(&mut self) {}
}
