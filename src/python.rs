//! Starting the embedded interpreter and importing the app.
//!
//! The interpreter is initialised through `PyConfig` so that Python installs no signal
//! handlers (the server owns the signals: see `signals.rs`) and so that its path
//! configuration starts from the right interpreter: a virtualenv's `bin/python` (CPython
//! then reads that venv's `pyvenv.cfg`, and `sys.prefix` and `site-packages` are the
//! venv's), else the interpreter the binary was built against. The virtualenv is, first
//! found first: `--venv`, `VIRTUAL_ENV`, or the one this binary itself lives in (its
//! `bin/`'s parent holds a `pyvenv.cfg`: installed there with pip, it uses that
//! environment whether or not it is activated).

use std::ffi::CString;
use std::fmt;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// `module:attr`, or `module:factory(ARGS)` with ARGS Python literals (`"prod"`,
/// `debug=True`), as gunicorn takes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AppSpec {
    pub(crate) module: String,
    pub(crate) attr: String,
    /// A factory's arguments as written between its parentheses (empty for `()`); `None`
    /// for an app that is not called.
    pub(crate) call: Option<String>,
}

impl AppSpec {
    pub(crate) fn parse(s: &str) -> Result<AppSpec, String> {
        let (module, attr) = match s.split_once(':') {
            Some((m, a)) => (m.trim(), a.trim()),
            None => (s.trim(), "application"),
        };
        let (attr, call) = match attr.split_once('(') {
            Some((name, rest)) => match rest.strip_suffix(')') {
                Some(args) => (name.trim(), Some(args.trim().to_string())),
                None => {
                    return Err(format!(
                        "APP {s:?}: a factory's call ends with ')' (`module:factory()`, or \
                         with literal arguments `module:factory(\"prod\")`)"
                    ))
                }
            },
            None => (attr, None),
        };
        let is_ident = |p: &str| {
            let mut chars = p.chars();
            matches!(chars.next(), Some(c) if c.is_alphabetic() || c == '_')
                && chars.all(|c| c.is_alphanumeric() || c == '_')
        };
        if module.is_empty() || !module.split('.').all(is_ident) {
            return Err(format!(
                "APP {s:?}: expected `module:attr` or `module:factory()` with a dotted module name"
            ));
        }
        if !is_ident(attr) {
            return Err(format!(
                "APP {s:?}: the attribute after ':' must be a Python identifier"
            ));
        }
        Ok(AppSpec {
            module: module.to_string(),
            attr: attr.to_string(),
            call,
        })
    }

    /// Granian's `--factory`: the attribute is a factory, called without arguments unless
    /// the spec gave some.
    pub(crate) fn called(mut self) -> AppSpec {
        self.call.get_or_insert_with(String::new);
        self
    }
}

impl fmt::Display for AppSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.module, self.attr)?;
        match &self.call {
            Some(args) => write!(f, "({args})"),
            None => Ok(()),
        }
    }
}

/// A virtualenv's interpreter, if `venv` is one.
fn venv_python(venv: &Path) -> Option<PathBuf> {
    ["python3", "python"]
        .into_iter()
        .map(|name| venv.join("bin").join(name))
        .find(|p| p.exists())
}

/// Why this interpreter: what chose the environment Python starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Chosen {
    /// `--venv`.
    VenvFlag,
    /// The `VIRTUAL_ENV` variable (an activated virtualenv).
    VirtualEnv,
    /// The binary lies in a virtualenv's `bin/`.
    BinaryInVenv,
    /// The interpreter the binary was built against.
    Build,
    /// `python3` on `PATH`.
    Path,
    /// The Python package: the interpreter already running this process.
    Running,
}

impl fmt::Display for Chosen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Chosen::VenvFlag => "from --venv",
            Chosen::VirtualEnv => "from VIRTUAL_ENV",
            Chosen::BinaryInVenv => "from the virtualenv this binary is in",
            Chosen::Build => "from the interpreter m0serve was built with",
            Chosen::Path => "from python3 on PATH",
            Chosen::Running => "from the environment m0serve is installed in",
        })
    }
}

/// The interpreter whose path configuration Python starts from, and why that one.
#[derive(Clone, Debug)]
pub struct Interpreter {
    pub(crate) program: PathBuf,
    /// The virtualenv it belongs to, when a virtualenv chose it.
    pub(crate) venv: Option<PathBuf>,
    pub(crate) chosen: Chosen,
}

/// Where the embedded interpreter's path configuration starts (`venv`: `--venv`), and why.
pub(crate) fn program_name(venv: Option<&Path>) -> Interpreter {
    let in_venv = |dir: &Path, chosen| {
        venv_python(dir).map(|program| Interpreter {
            program,
            venv: Some(dir.to_path_buf()),
            chosen,
        })
    };
    if let Some(i) = venv.and_then(|v| in_venv(v, Chosen::VenvFlag)) {
        return i;
    }
    if let Some(dir) = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        if let Some(i) = in_venv(Path::new(&dir), Chosen::VirtualEnv) {
            return i;
        }
    }
    // Installed into a virtualenv by hand: <venv>/bin/m0serve.
    if let Some(i) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(Path::to_path_buf))
        .filter(|dir| dir.join("pyvenv.cfg").is_file())
        .and_then(|dir| in_venv(&dir, Chosen::BinaryInVenv))
    {
        return i;
    }
    let (program, chosen) = match option_env!("M0SERVE_BUILD_PYTHON") {
        Some(p) => (PathBuf::from(p), Chosen::Build),
        None => (PathBuf::from("python3"), Chosen::Path),
    };
    Interpreter {
        program,
        venv: None,
        chosen,
    }
}

/// `major.minor` at the start of a version string ("3.11.7 (main, ...)" -> "3.11").
fn major_minor(version: &str) -> Option<&str> {
    let end = version
        .char_indices()
        .filter(|&(_, c)| c == '.' || !c.is_ascii_digit())
        .map(|(i, _)| i)
        .nth(1)
        .unwrap_or(version.len());
    let mm = &version[..end];
    let (major, minor) = mm.split_once('.')?;
    (!major.is_empty() && !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()))
        .then_some(mm)
}

/// The Python version a virtualenv was made by, from its `pyvenv.cfg` (`version`, as
/// `python -m venv` writes it, or `version_info`, as virtualenv and uv do).
pub(crate) fn venv_version(venv: &Path) -> Option<String> {
    let text = std::fs::read_to_string(venv.join("pyvenv.cfg")).ok()?;
    let value = |key: &str| {
        text.lines().find_map(|line| {
            let (k, v) = line.split_once('=')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    value("version").or_else(|| value("version_info"))
}

/// The version of the CPython this binary runs (its libpython), before initialisation.
fn embedded_version() -> String {
    // SAFETY: Py_GetVersion may be called before Py_Initialize (Python's "Before Python
    // Initialization" list); it returns a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(ffi::Py_GetVersion()) };
    v.to_string_lossy().into_owned()
}

/// The binary refuses a virtualenv made by another Python version than the one it embeds
/// (its site-packages, compiled extensions first, are not for this interpreter), with the
/// fix. A virtualenv whose version it cannot read is left to Python.
pub(crate) fn check_venv_version(venv: Option<&Path>) -> Result<(), String> {
    let interpreter = program_name(venv);
    let Some(dir) = &interpreter.venv else {
        return Ok(());
    };
    let Some(theirs) = venv_version(dir) else {
        return Ok(());
    };
    let ours = embedded_version();
    match (major_minor(&theirs), major_minor(&ours)) {
        (Some(t), Some(o)) if t != o => Err(format!(
            "{dir} ({chosen}) is a virtualenv of Python {t}, but this m0serve binary embeds \
             Python {o}, which cannot use its packages. Install m0serve into that environment \
             (its wheel: `{dir}/bin/python -m pip install --no-index --find-links DIST m0serve-wsgi`) \
             and run `{dir}/bin/m0serve`",
            dir = dir.display(),
            chosen = interpreter.chosen,
        )),
        _ => Ok(()),
    }
}

/// Initialises CPython once for this process (`venv`: `--venv`), and says which
/// interpreter. The calling thread then holds the GIL. In the Python package the
/// interpreter is running already: nothing is initialised, and it is the one.
pub fn initialize(venv: Option<&Path>) -> Result<Interpreter, String> {
    // SAFETY: Py_IsInitialized may be called at any time.
    if unsafe { ffi::Py_IsInitialized() } != 0 {
        return Ok(Interpreter {
            program: PathBuf::new(),
            venv: None,
            chosen: Chosen::Running,
        });
    }
    let interpreter = program_name(venv);
    let program = CString::new(interpreter.program.as_os_str().as_encoded_bytes())
        .map_err(|_| "the interpreter path contains a NUL byte".to_string())?;
    let mut config = MaybeUninit::<ffi::PyConfig>::uninit();
    // SAFETY: PyConfig_InitPythonConfig fully initialises the struct it is given; the
    // struct is then only used through the PyConfig API below and cleared exactly once.
    unsafe {
        ffi::PyConfig_InitPythonConfig(config.as_mut_ptr());
        let config = config.assume_init_mut();
        // The server owns SIGINT/SIGTERM; Python handlers would only run on the main
        // thread, which never runs Python here.
        config.install_signal_handlers = 0;
        // Our argv is m0serve's, not Python's.
        config.parse_argv = 0;
        let status =
            ffi::PyConfig_SetBytesString(config, &mut config.program_name, program.as_ptr());
        if ffi::PyStatus_Exception(status) != 0 {
            ffi::PyConfig_Clear(config);
            return Err("cannot set the interpreter's program name".into());
        }
        let status = ffi::Py_InitializeFromConfig(config);
        ffi::PyConfig_Clear(config);
        if ffi::PyStatus_Exception(status) != 0 {
            let msg = if status.err_msg.is_null() {
                "unknown error".to_string()
            } else {
                std::ffi::CStr::from_ptr(status.err_msg)
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(format!("cannot initialise Python: {msg}"));
        }
    }
    Ok(interpreter)
}

/// The version, `sys.prefix` and why that environment, for the startup line and errors:
/// "Python 3.11.7 (/srv/app/.venv, from VIRTUAL_ENV)".
pub(crate) fn describe(py: Python<'_>, interpreter: &Interpreter) -> String {
    let get = || -> PyResult<String> {
        let sys = py.import("sys")?;
        let version: String = sys.getattr("version")?.extract()?;
        let prefix: String = sys.getattr("prefix")?.extract()?;
        let version = version.split_whitespace().next().unwrap_or("").to_string();
        Ok(format!(
            "Python {version} ({prefix}, {})",
            interpreter.chosen
        ))
    };
    get().unwrap_or_else(|_| "Python".into())
}

/// Imports `spec` with `app_dir` first on `sys.path`. On failure the Python traceback has
/// been written to stderr and the error names the module or attribute at fault.
/// `interp` (from [`describe`]) is named when the module cannot be imported;
/// `pythonpath` (`--pythonpath`) follows `app_dir` at the front of `sys.path`.
pub(crate) fn load_app(
    py: Python<'_>,
    spec: &AppSpec,
    app_dir: &Path,
    pythonpath: &[PathBuf],
    interp: &str,
) -> Result<Py<PyAny>, String> {
    let fail = |what: String, err: PyErr| -> String {
        if err.is_instance_of::<pyo3::exceptions::PySystemExit>(py) {
            let code = err
                .value(py)
                .getattr("code")
                .map(|c| c.to_string())
                .unwrap_or_default();
            return format!("{what}: the module called sys.exit({code}) while it was imported");
        }
        print_exception(py, &err);
        let ty = err
            .get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "Exception".into());
        let msg = err.value(py).to_string();
        format!("{what}: {ty}: {msg}")
    };
    let sys = py
        .import("sys")
        .map_err(|e| fail("cannot import sys".into(), e))?;
    let path = sys
        .getattr("path")
        .and_then(|p| p.cast_into::<PyList>().map_err(Into::into))
        .map_err(|e| fail("cannot read sys.path".into(), e))?;
    for (i, dir) in std::iter::once(app_dir)
        .chain(pythonpath.iter().map(PathBuf::as_path))
        .enumerate()
    {
        path.insert(i, dir.to_string_lossy().as_ref())
            .map_err(|e| fail("cannot change sys.path".into(), e))?;
    }
    let module = py.import(spec.module.as_str()).map_err(|e| {
        fail(
            format!(
                "cannot import module '{}' (app '{spec}') with {interp}",
                spec.module
            ),
            e,
        )
    })?;
    let mut app = match module.getattr(spec.attr.as_str()) {
        Ok(app) => app,
        // A plain missing attribute: its one-line traceback would only repeat this.
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => {
            let hint = suggest_attr(&module, spec)
                .map(|s| format!("; did you mean {s}?"))
                .unwrap_or_default();
            return Err(format!(
                "module '{}' has no attribute '{}' (app '{spec}'){hint}",
                spec.module, spec.attr
            ));
        }
        Err(e) => {
            return Err(fail(
                format!(
                    "cannot read '{}' from module '{}' (app '{spec}')",
                    spec.attr, spec.module
                ),
                e,
            ))
        }
    };
    if let Some(args) = &spec.call {
        app = call_factory(py, &app, args, spec, &fail)?;
    }
    if !app.is_callable() {
        let ty = app
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        return Err(format!("app '{spec}' is not callable (it is a {ty})"));
    }
    Ok(app.unbind())
}

/// Calls the factory `f` with `args`, the text between its parentheses in the app spec:
/// Python literals, positional then by keyword (`"prod", debug=True`), read with `ast` as
/// gunicorn reads them; anything else (a name, a call, `*args`) is refused by name.
fn call_factory<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    args: &str,
    spec: &AppSpec,
    fail: &dyn Fn(String, PyErr) -> String,
) -> Result<Bound<'py, PyAny>, String> {
    if args.is_empty() {
        return f
            .call0()
            .map_err(|e| fail(format!("the app factory '{spec}' raised"), e));
    }
    let parse = || -> PyResult<(Bound<'py, pyo3::types::PyTuple>, Bound<'py, pyo3::types::PyDict>)> {
        let ast = py.import("ast")?;
        let call = ast
            .call_method1("parse", (format!("f({args})"), "<app>", "eval"))?
            .getattr("body")?;
        let literal = |node: Bound<'py, PyAny>| ast.call_method1("literal_eval", (node,));
        let mut positional = Vec::new();
        for a in call.getattr("args")?.try_iter()? {
            positional.push(literal(a?)?);
        }
        let named = pyo3::types::PyDict::new(py);
        for k in call.getattr("keywords")?.try_iter()? {
            let k = k?;
            let name = k.getattr("arg")?;
            if name.is_none() {
                return Err(pyo3::exceptions::PyValueError::new_err("**kwargs"));
            }
            named.set_item(name, literal(k.getattr("value")?)?)?;
        }
        Ok((pyo3::types::PyTuple::new(py, positional)?, named))
    };
    let (positional, named) = parse().map_err(|e| {
        format!(
            "APP '{spec}': the factory's arguments must be Python literals (strings, numbers, \
             True, False, None, and lists, tuples and dicts of them), positional or by \
             keyword; {args:?} is not ({})",
            e.value(py)
        )
    })?;
    f.call(positional, Some(&named))
        .map_err(|e| fail(format!("the app factory '{spec}' raised"), e))
}

/// The app spec the user most likely meant, when `spec.attr` is missing from `module`: the
/// callable whose name is closest to the one given (at most two edits: a typo), else one
/// named `application` or `app`, else a factory named `create_app` or `make_app` (called).
/// Classes, modules and names starting with `_` are not apps.
fn suggest_attr(module: &Bound<'_, PyModule>, spec: &AppSpec) -> Option<String> {
    let names: Vec<String> = module.dir().ok()?.extract().ok()?;
    let apps: Vec<(String, bool)> = names
        .into_iter()
        .filter(|n| !n.starts_with('_'))
        .filter_map(|n| {
            let v = module.getattr(n.as_str()).ok()?;
            let plain = v.is_callable()
                && !v.is_instance_of::<pyo3::types::PyType>()
                && !v.is_instance_of::<PyModule>();
            let function = v.hasattr("__code__").unwrap_or(false);
            plain.then_some((n, function))
        })
        .collect();
    let form = |name: &str, factory: bool| {
        format!("{}:{name}{}", spec.module, if factory { "()" } else { "" })
    };
    let called = spec.call.is_some();
    // A typo first, then the names apps are usually given.
    if let Some((_, name)) = apps
        .iter()
        .map(|(n, _)| (crate::text::edit_distance(n, &spec.attr), n))
        .filter(|(d, _)| *d <= 2)
        .min()
    {
        return Some(form(name, called));
    }
    for known in ["application", "app"] {
        if apps.iter().any(|(n, _)| n == known) {
            return Some(form(known, false));
        }
    }
    ["create_app", "make_app"]
        .into_iter()
        .find(|known| apps.iter().any(|(n, function)| n == known && *function))
        .map(|known| form(known, true))
}

/// Takes `name` out of `os.environ` where Python runs already (the package's worker, whose
/// interpreter read the environment at its start); nothing before Python starts, where
/// the process's own environment is what it will read.
pub(crate) fn forget_env(name: &str) {
    // SAFETY: Py_IsInitialized may be called at any time.
    if unsafe { ffi::Py_IsInitialized() } == 0 {
        return;
    }
    Python::attach(|py| {
        let popped = py
            .import("os")
            .and_then(|os| os.getattr("environ"))
            .and_then(|env| env.call_method1("pop", (name, py.None())));
        if let Err(e) = popped {
            e.print(py);
        }
    });
}

/// Runs Python `code` in this process's embedded interpreter with `sys.argv[1]` set to
/// `arg` (the binary's side of running a gunicorn configuration, for a master that runs no
/// Python); the exit code: 0, or 1 after the traceback.
pub(crate) fn run_script(code: &str, arg: &std::ffi::OsStr) -> i32 {
    if let Err(e) = initialize(None) {
        eprintln!("m0serve: error: {e}");
        return 1;
    }
    let ran = Python::attach(|py| -> PyResult<()> {
        let sys = py.import("sys")?;
        sys.setattr(
            "argv",
            vec![std::ffi::OsString::from("m0serve"), arg.to_owned()],
        )?;
        let code = std::ffi::CString::new(code)
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("a NUL in the code"))?;
        let result = py.run(&code, None, None);
        if let Err(e) = &result {
            e.print(py);
        }
        flush_stdio(py);
        result
    });
    i32::from(ran.is_err())
}

/// `err` with its traceback, as Python's `traceback.format_exception` writes it (or its
/// message alone, if that fails).
pub(crate) fn format_exception(py: Python<'_>, err: &PyErr) -> String {
    py.import("traceback")
        .and_then(|m| {
            m.call_method1(
                "format_exception",
                (err.get_type(py), err.value(py), err.traceback(py)),
            )
        })
        .and_then(|lines| lines.extract::<Vec<String>>())
        .map(|lines| lines.concat())
        .unwrap_or_else(|_| format!("{err}\n"))
}

/// Writes `err`'s traceback to standard error in one write, as Python prints it, or under
/// `--log-format json` as one error record. Unlike `PyErr::print` (Python's
/// `PyErr_Print`), a `SystemExit` is printed, not obeyed: it must not end the process.
pub(crate) fn print_exception(py: Python<'_>, err: &PyErr) {
    use std::io::Write;
    let text = format_exception(py, err);
    flush_stdio(py);
    if crate::log::is_json() {
        crate::log::error!("{}", text.trim_end());
        return;
    }
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// `--timeout`: registers `faulthandler` on `sys::signals::stack_dump()` (all threads).
pub(crate) fn register_stack_dump(py: Python<'_>) -> PyResult<()> {
    let fh = py.import("faulthandler")?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("all_threads", true)?;
    kwargs.set_item("chain", false)?;
    fh.call_method(
        "register",
        (crate::sys::signals::stack_dump(),),
        Some(&kwargs),
    )?;
    Ok(())
}

/// Applies the decrefs pyo3 deferred for references dropped off the GIL (the loop thread
/// drops each `msg::PyBytesRef` once it is written). pyo3 drains its pool whenever a thread
/// attaches, even when already attached: with nothing pending this is a flag check.
pub(crate) fn drop_deferred_refs(_py: Python<'_>) {
    Python::attach(|_| {});
}

/// The app's `print()` reaches a pipe (a container's log, systemd's journal) line by line:
/// when `sys.stdout` is not a terminal, Python buffers it in blocks, so it is switched to
/// line buffering (`sys.stderr` is line-buffered already). Nothing changes on a terminal,
/// and a stream that cannot be reconfigured is left as it is.
pub(crate) fn line_buffer_stdout(py: Python<'_>) {
    let Ok(stdout) = py.import("sys").and_then(|sys| sys.getattr("stdout")) else {
        return;
    };
    if stdout.is_none() {
        return;
    }
    let tty = stdout
        .call_method0("isatty")
        .and_then(|t| t.is_truthy())
        .unwrap_or(true);
    if !tty {
        let kwargs = pyo3::types::PyDict::new(py);
        if kwargs.set_item("line_buffering", true).is_ok() {
            let _ = stdout.call_method("reconfigure", (), Some(&kwargs));
        }
    }
}

/// Replaces `os._exit` with the same call preceded by `sys::fatal::run_hook` (the GIL
/// released meanwhile): an app that ends the process that way lets the loop write the
/// responses already finished first.
pub(crate) fn hook_os_exit(py: Python<'_>) -> PyResult<()> {
    let os = py.import("os")?;
    os.setattr("_exit", wrap_pyfunction!(os_exit, &os)?)
}

/// `os._exit(status)`: exits at once, without cleanup (as CPython's), after the hook.
#[pyfunction]
#[pyo3(name = "_exit", signature = (status, /))]
fn os_exit(py: Python<'_>, status: i32) {
    // Exits with the GIL released, as it was for the hook: taking it back could wait on a
    // thread in a long C call, where CPython's `os._exit` goes at once.
    py.detach(|| {
        crate::sys::fatal::run_hook();
        // SAFETY: _exit ends the process; nothing after it runs.
        unsafe { libc::_exit(status) }
    })
}

pub(crate) fn flush_stdio(py: Python<'_>) {
    if let Ok(sys) = py.import("sys") {
        for name in ["stdout", "stderr"] {
            if let Ok(stream) = sys.getattr(name) {
                let _ = stream.call_method0("flush");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AppSpec;

    #[test]
    fn app_spec_forms() {
        assert_eq!(
            AppSpec::parse("pkg.mod:app").unwrap(),
            AppSpec {
                module: "pkg.mod".into(),
                attr: "app".into(),
                call: None
            }
        );
        assert_eq!(
            AppSpec::parse("mod:make()").unwrap().call.as_deref(),
            Some("")
        );
        let with = AppSpec::parse("mod:make(\"prod\", debug=True)").unwrap();
        assert_eq!(with.attr, "make");
        assert_eq!(with.call.as_deref(), Some("\"prod\", debug=True"));
        assert_eq!(with.to_string(), "mod:make(\"prod\", debug=True)");
        assert!(AppSpec::parse("mod:make(").is_err());
        assert_eq!(
            AppSpec::parse("mod:app").unwrap().called().to_string(),
            "mod:app()"
        );
        assert_eq!(AppSpec::parse("mod").unwrap().attr, "application");
        assert!(AppSpec::parse("mod:").is_err());
        assert!(AppSpec::parse(":app").is_err());
        assert!(AppSpec::parse("bad-name:app").is_err());
        assert!(AppSpec::parse("mod:a.b").is_err());
    }
}
