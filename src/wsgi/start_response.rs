//! The `start_response` and `write` callables handed to the app.
//!
//! Both are thin handles on the handler thread's [`Exchange`]; each remembers the request
//! it was made for, so one kept past its request raises instead of touching the next.

use std::rc::Rc;

use pyo3::prelude::*;

use super::response::{bytes_of, Exchange};

#[pyclass(module = "m0serve", name = "StartResponse", unsendable)]
pub struct StartResponse {
    pub ex: Rc<Exchange>,
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
/// handed to the loop before `write` returns.
#[pyclass(module = "m0serve", name = "Write", unsendable)]
pub struct Write {
    ex: Rc<Exchange>,
    id: u64,
}

#[pymethods]
impl Write {
    fn __call__(&self, py: Python<'_>, data: Bound<'_, PyAny>) -> PyResult<()> {
        if self.ex.st.borrow().req.id != self.id {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "write() called after its request finished",
            ));
        }
        self.ex.send(py, bytes_of(&data)?)
    }
}

/// `environ["m0serve.client_disconnected"]`: returns whether the client of the request
/// being served has gone (its end of stream or a reset reached the loop), so a long-running
/// app can stop early. One object per handler, answering for the request it is called
/// during: a flag check, no system call.
#[pyclass(module = "m0serve", name = "ClientDisconnected", unsendable)]
pub struct ClientDisconnected {
    pub ex: Rc<Exchange>,
}

#[pymethods]
impl ClientDisconnected {
    fn __call__(&self) -> bool {
        self.ex.client_gone()
    }
}
