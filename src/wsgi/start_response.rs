//! The `start_response` and `write` callables handed to the app.
//!
//! Both are handles on the handler's [`Exchange`], usable from any thread (PEP 3333 ties
//! them to none, and apps call them from threads they start): each remembers the request
//! it was made for, so one kept past its request, or called while that request's body is
//! set aside, raises a `RuntimeError` instead of touching another request.

use std::sync::Arc;

use pyo3::prelude::*;

use super::pystr::bytes_of;
use super::response::{Credit, Exchange};

#[pyclass(module = "m0serve", name = "StartResponse", frozen)]
pub struct StartResponse {
    pub ex: Arc<Exchange>,
    pub id: u64,
}

#[pymethods]
impl StartResponse {
    /// PEP 3333: `start_response(status, response_headers, exc_info=None)` returns a
    /// `write(body_data)` callable.
    #[pyo3(signature = (status, headers, exc_info = None))]
    fn __call__(
        &self,
        py: Python<'_>,
        status: Bound<'_, PyAny>,
        headers: Bound<'_, PyAny>,
        exc_info: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<Write>> {
        self.ex.start(py, self.id, status, headers, exc_info)?;
        Py::new(
            py,
            Write {
                ex: self.ex.clone(),
                id: self.id,
            },
        )
    }
}

/// The imperative `write()` callable (PEP 3333 "The write() Callable"): the data is
/// handed to the loop before `write` returns, after waiting (GIL released) while the
/// client has too much of this response unread.
#[pyclass(module = "m0serve", name = "Write", frozen)]
pub struct Write {
    ex: Arc<Exchange>,
    id: u64,
}

#[pymethods]
impl Write {
    fn __call__(&self, py: Python<'_>, data: Bound<'_, PyAny>) -> PyResult<()> {
        self.ex
            .send(py, Some(self.id), bytes_of(&data)?, Credit::Wait)
            .map(|_| ())
    }
}

/// `environ["m0serve.client_disconnected"]`: returns whether the client of the request
/// being served has gone (its end of stream or a reset reached the loop), so a long-running
/// app can stop early. One object per handler, answering for the request it is called
/// during: a flag check, no system call.
#[pyclass(module = "m0serve", name = "ClientDisconnected", frozen)]
pub struct ClientDisconnected {
    pub ex: Arc<Exchange>,
}

#[pymethods]
impl ClientDisconnected {
    fn __call__(&self) -> bool {
        self.ex.client_gone()
    }
}
