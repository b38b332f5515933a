//! A WebSocket's socket, handed over to the app: `environ["gunicorn.socket"]` on a request
//! that asks to become a WebSocket (`Head::websocket`), where simple-websocket (Flask-Sock,
//! Flask-SocketIO's threading mode, python-socketio) looks for gunicorn's.
//!
//! The value stands in for a `socket.socket`: the connection's own socket is made (a
//! duplicate of the loop's descriptor, with a timeout so that the shared descriptor stays
//! non-blocking for the loop) the first time the app touches it, and from then on the
//! connection is the app's: the handler writes no response for it, whatever the app
//! returns or raises, and the loop forgets it (`Part::HandedOver`). The loop read nothing
//! after the request's head (it was the connection's last request), so no byte of the
//! WebSocket went astray; a client sends none before the handshake's answer.
//!
//! Where the socket cannot be handed over (TLS, whose records are the loop's; inline mode,
//! where the app runs on the loop thread; a request pipelined behind others), the value
//! is there all the same and says why when touched, instead of the libraries' "cannot
//! obtain socket".

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::IntoPyDict;

/// How long the handed-over socket's blocking calls may wait: a timeout makes CPython
/// wait with `poll` on a non-blocking descriptor, where `setblocking(True)` would clear
/// `O_NONBLOCK` on the open file the loop shares.
const SOCKET_TIMEOUT_SECS: f64 = 365.0 * 86_400.0;

/// The environ's `gunicorn.socket` (see the module).
#[pyclass(frozen, module = "m0serve")]
pub(crate) struct HandOver {
    /// The loop's descriptor for the connection, lent for this request; or why there is
    /// none.
    fd: Result<RawFd, &'static str>,
    socket: OnceLock<Py<PyAny>>,
    taken: Arc<AtomicBool>,
    /// The handler serving the request, told when the socket is taken (`None` when there
    /// is none to take).
    handler: Option<Arc<crate::pipeline::shared::HandlerShared>>,
}

impl HandOver {
    /// The socket `fd` (lent for this request), taken when first touched; `taken` and the
    /// serving `handler`'s `HandlerShared::websocket` say so.
    pub(crate) fn new(
        fd: RawFd,
        taken: Arc<AtomicBool>,
        handler: Arc<crate::pipeline::shared::HandlerShared>,
    ) -> HandOver {
        HandOver {
            fd: Ok(fd),
            socket: OnceLock::new(),
            taken,
            handler: Some(handler),
        }
    }

    /// No socket to give: touching it raises `RuntimeError(why)`.
    pub(crate) fn refused(why: &'static str) -> HandOver {
        HandOver {
            fd: Err(why),
            socket: OnceLock::new(),
            taken: Arc::new(AtomicBool::new(false)),
            handler: None,
        }
    }

    /// The `socket.socket`, made on first use.
    fn socket<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(s) = self.socket.get() {
            return Ok(s.bind(py).clone());
        }
        let fd = self.fd.map_err(PyRuntimeError::new_err)?;
        // SAFETY: `fd` is the connection's socket, lent for this request: the loop keeps
        // the descriptor number reserved until the request's final part comes back, which
        // is not before the app returns. F_DUPFD_CLOEXEC only creates a new descriptor.
        let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if own < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let made = py
            .import("socket")?
            .getattr("socket")?
            .call((), Some(&[("fileno", own)].into_py_dict(py)?));
        let sock = match made {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: `own` was just created here and is owned by nothing else.
                unsafe { libc::close(own) };
                return Err(e);
            }
        };
        sock.call_method1("settimeout", (SOCKET_TIMEOUT_SECS,))?;
        // Release: pairs with the Acquire in `Bridge::handed_over`, on the thread serving
        // the request (the app may touch the socket from a thread of its own).
        self.taken.store(true, Ordering::Release);
        if let Some(h) = &self.handler {
            // Release: pairs with the loop's Acquire in `Handlers::adopt_websockets`.
            h.websocket.store(true, Ordering::Release);
        }
        // Two threads that raced here (Python calls above may let the GIL go) keep the
        // first socket; the other is closed when dropped.
        let _ = self.socket.set(sock.unbind());
        Ok(self.socket.get().expect("set above").bind(py).clone())
    }
}

#[pymethods]
impl HandOver {
    /// Every attribute is the socket's (`send`, `recv`, `fileno`, `close`...).
    fn __getattr__<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        self.socket(py)?.getattr(name)
    }

    fn __repr__(&self) -> String {
        match (self.fd, self.socket.get()) {
            (Err(why), _) => format!("<m0serve.HandOver: none here: {why}>"),
            (Ok(_), None) => "<m0serve.HandOver: the connection's socket, not taken>".into(),
            (Ok(_), Some(_)) => "<m0serve.HandOver: the connection's socket, taken>".into(),
        }
    }
}
