//! The `start_response` and `write` callables handed to the app.
//!
//! Both are handles on the handler's [`Exchange`], usable from any thread (PEP 3333 ties
//! them to none, and apps call them from threads they start): each remembers the request
//! it was made for, so one kept past its request, or called while that request's body is
//! set aside, raises a `RuntimeError` instead of touching another request.
//!
//! The app gets them as bound methods (`StartResponse.start_response`, `Write.write`):
//! CPython calls a built-in method with its arguments in place (vectorcall), where a
//! `__call__` would get them packed into a new tuple. A handler keeps one set of these
//! objects and hands it to the next request again while nothing else holds any of them
//! ([`Callables`]), so a request allocates none.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::ffi;
use pyo3::prelude::*;

use super::pystr::bytes_of;
use super::refs;
use super::response::{Credit, Exchange};

#[pyclass(module = "m0serve", name = "StartResponse", frozen)]
pub(crate) struct StartResponse {
    ex: Arc<Exchange>,
    /// The request these callables are for. Relaxed: it is stored and read only with the
    /// GIL held, whose hand-over orders them.
    id: AtomicU64,
    writer: Py<Write>,
    /// `writer.write`, which every call returns.
    write_fn: Py<PyAny>,
}

#[pymethods]
impl StartResponse {
    /// PEP 3333: `start_response(status, response_headers, exc_info=None)` returns a
    /// `write(body_data)` callable.
    #[pyo3(signature = (status, headers, exc_info = None))]
    fn start_response(
        &self,
        py: Python<'_>,
        status: Bound<'_, PyAny>,
        headers: Bound<'_, PyAny>,
        exc_info: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let id = self.id.load(Ordering::Relaxed);
        self.ex.start(py, id, status, headers, exc_info)?;
        Ok(self.write_fn.clone_ref(py))
    }
}

/// The imperative `write()` callable (PEP 3333 "The write() Callable"): the data is
/// handed to the loop before `write` returns, after waiting (GIL released) while the
/// client has too much of this response unread.
#[pyclass(module = "m0serve", name = "Write", frozen)]
pub(crate) struct Write {
    ex: Arc<Exchange>,
    /// As `StartResponse::id`.
    id: AtomicU64,
}

#[pymethods]
impl Write {
    fn write(&self, py: Python<'_>, data: Bound<'_, PyAny>) -> PyResult<()> {
        let id = self.id.load(Ordering::Relaxed);
        self.ex
            .send(py, Some(id), bytes_of(&data)?, Credit::Wait)
            .map(|_| ())
    }
}

/// A handler's `start_response` (and with it `write`), handed to one request after
/// another while nothing else holds them.
pub(crate) struct Callables {
    sr: Py<StartResponse>,
    /// `sr.start_response`, what the app gets.
    start_fn: Py<PyAny>,
    /// Both methods are built-in method objects (as CPython makes them), whose weak
    /// references `unshared` can see.
    reusable: bool,
}

impl Callables {
    pub(crate) fn new(py: Python<'_>, ex: &Arc<Exchange>) -> PyResult<Callables> {
        let writer = Bound::new(
            py,
            Write {
                ex: ex.clone(),
                id: AtomicU64::new(0),
            },
        )?;
        let write_fn = writer.getattr("write")?.unbind();
        let sr = Bound::new(
            py,
            StartResponse {
                ex: ex.clone(),
                id: AtomicU64::new(0),
                writer: writer.unbind(),
                write_fn,
            },
        )?;
        let start_fn = sr.getattr("start_response")?.unbind();
        // SAFETY: type checks of live objects, with the GIL held (`py`).
        let reusable = unsafe {
            ffi::PyCFunction_Check(start_fn.as_ptr()) != 0
                && ffi::PyCFunction_Check(sr.get().write_fn.as_ptr()) != 0
        };
        Ok(Callables {
            sr: sr.unbind(),
            start_fn,
            reusable,
        })
    }

    /// `start_response` for request `id`: the same objects as the last request's when
    /// nothing but this holds them (so no app can still call them for that request), else
    /// new ones, and these are left to whoever kept them, still answering for their own
    /// request.
    pub(crate) fn for_request<'py>(
        &mut self,
        py: Python<'py>,
        id: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !self.unshared(py) {
            let ex = self.sr.get().ex.clone();
            *self = Callables::new(py, &ex)?;
        }
        let sr = self.sr.get();
        sr.id.store(id, Ordering::Relaxed);
        sr.writer.get().id.store(id, Ordering::Relaxed);
        Ok(self.start_fn.bind(py).clone())
    }

    /// Only the references these objects hold to one another are left: `start_fn` is held
    /// here; `sr` here and by `start_fn`; `write_fn` by `sr`; `writer` by `sr` and by
    /// `write_fn`; and no weak reference to either method exists (the two classes take
    /// none). A reference the GIL-less side of pyo3 has yet to release counts as held,
    /// which errs toward new objects.
    fn unshared(&self, py: Python<'_>) -> bool {
        let sr = self.sr.get();
        self.reusable
            && refs(py, &self.start_fn) == 1
            && refs(py, &self.sr) == 2
            && refs(py, &sr.write_fn) == 1
            && refs(py, &sr.writer) == 2
            && no_weak_refs(&self.start_fn)
            && no_weak_refs(&sr.write_fn)
    }
}

/// No weak reference to the built-in method `f` is alive.
fn no_weak_refs(f: &Py<PyAny>) -> bool {
    // SAFETY: `f` is a built-in function object (`Callables::reusable` checked it), whose
    // memory starts with a `PyCFunctionObject`, and it lives as long as the borrow; its
    // list of weak references is read with the GIL held by the caller, the only way
    // CPython changes it.
    unsafe {
        (*f.as_ptr().cast::<ffi::PyCFunctionObject>())
            .m_weakreflist
            .is_null()
    }
}

/// `environ["m0serve.client_disconnected"]`: returns whether the client of the request
/// being served has gone (its end of stream or a reset reached the loop), so a long-running
/// app can stop early. One object per handler, answering for the request it is called
/// during: a flag check, no system call.
#[pyclass(module = "m0serve", name = "ClientDisconnected", frozen)]
pub(crate) struct ClientDisconnected {
    pub(crate) ex: Arc<Exchange>,
}

#[pymethods]
impl ClientDisconnected {
    fn __call__(&self) -> bool {
        self.ex.client_gone()
    }
}
