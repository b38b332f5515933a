//! Reporting application errors: the traceback goes to the error log with the request
//! it happened on (PEP 3333 leaves the how to the server; gunicorn and Granian log the
//! traceback too).

use pyo3::prelude::*;

use crate::log;
use crate::pipeline::msg::Request;

/// `METHOD target` for log lines, lossy and bounded.
pub(crate) fn describe_request(req: &Request) -> String {
    let method = String::from_utf8_lossy(req.head.method.get(&req.data));
    let target = req.head.target.get(&req.data);
    let target = String::from_utf8_lossy(&target[..target.len().min(200)]);
    format!("{method} {target}")
}

/// `METHOD /path?query` from an environ, for log lines.
pub(crate) fn describe_environ(environ: &Bound<'_, pyo3::types::PyDict>) -> String {
    let get = |k: &str| -> String {
        environ
            .get_item(k)
            .ok()
            .flatten()
            .and_then(|v| v.extract::<String>().ok())
            .unwrap_or_default()
    };
    let query = get("QUERY_STRING");
    let sep = if query.is_empty() { "" } else { "?" };
    format!("{} {}{sep}{query}", get("REQUEST_METHOD"), get("PATH_INFO"))
}

/// Logs `err` with its Python traceback.
pub(crate) fn log_exception(py: Python<'_>, err: &PyErr, context: &str) {
    let tb = crate::python::format_exception(py, err);
    log::error!("{context}:\n{}", tb.trim_end());
}
