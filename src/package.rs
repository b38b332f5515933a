//! The Python package's entry point: the `m0serve._m0serve` extension module.
//!
//! `python -m m0serve` and the `m0serve` console script (python/m0serve/__init__.py) call
//! `serve` with the command line and what a worker needs to run the same interpreter.
//! It releases the GIL for good and runs the same master, worker and request path as the
//! binary ([`crate::run_with`] with [`Host::Package`]): the master never runs Python code,
//! a worker imports the app in its own process.

use std::ffi::OsString;
use std::path::PathBuf;

use pyo3::prelude::*;

use crate::Host;

/// Runs m0serve with `argv` (`argv[0]` first) and ends the process with its exit code.
///
/// `python`, `worker_args` and `prefix` are `sys.executable`, what a worker's command line
/// has between the interpreter and the master's arguments (the interpreter's flags and
/// `-c` with the code that starts a worker), and `sys.prefix`. The process exits from
/// here, as the binary does, without finalising Python: a worker's handler threads and any
/// thread the app started would otherwise be waited for, or torn down mid-call.
#[pyfunction]
fn serve(
    py: Python<'_>,
    argv: Vec<OsString>,
    python: PathBuf,
    worker_args: Vec<OsString>,
    prefix: PathBuf,
) -> i32 {
    let host = Host::Package {
        python,
        worker_args,
        prefix,
    };
    let code = py.detach(|| crate::run_with(&argv, host));
    crate::python::flush_stdio(py);
    std::process::exit(code)
}

#[pymodule]
fn _m0serve(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(serve, m)?)?;
    Ok(())
}
