//! The pip-installed binary: scripts/test.sh builds this tree's wheel with maturin
//! (pyproject.toml) and installs it, with Flask and Django, into a fresh
//! `target/wheel-venv` (M0S_WHEEL_VENV). That `bin/m0serve`, run without activation (no
//! VIRTUAL_ENV, the venv not on PATH), serves the Flask app and the Django project: their
//! imports work only because the binary finds the virtualenv it is installed in. Without
//! M0S_WHEEL_VENV the test skips with a note.

mod common;
mod venvs;

use std::path::{Path, PathBuf};

use common::*;
use venvs::*;

/// `<venv>/bin/m0serve`, checked to be a regular file inside the venv's bin/ (pip copies
/// the wheel's script; it is not a link to the cargo build).
fn installed_binary(venv: &Path) -> PathBuf {
    let path = venv.join("bin").join("m0serve");
    let meta = std::fs::symlink_metadata(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (is the wheel installed?)", path.display()));
    assert!(
        meta.file_type().is_file(),
        "{} is not a regular file",
        path.display()
    );
    use std::os::unix::fs::PermissionsExt;
    assert!(
        meta.permissions().mode() & 0o111 != 0,
        "{} is not executable",
        path.display()
    );
    let real_dir = std::fs::canonicalize(&path)
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    assert_eq!(real_dir, std::fs::canonicalize(venv.join("bin")).unwrap());
    assert_ne!(
        std::fs::canonicalize(&path).unwrap(),
        std::fs::canonicalize(bin()).unwrap()
    );
    path
}

/// PATH without any entry inside `venv` (the venv is not activated).
fn path_without(venv: &Path) -> String {
    let venv = std::fs::canonicalize(venv).unwrap();
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|p| {
            !p.is_empty()
                && !std::fs::canonicalize(p)
                    .map(|c| c.starts_with(&venv))
                    .unwrap_or(false)
        })
        .collect::<Vec<_>>()
        .join(":")
}

/// Starts the installed binary under `env -u VIRTUAL_ENV PATH=...`, so it inherits no
/// virtualenv from the test's environment.
fn start_installed(binary: &Path, venv: &Path, app: &str) -> Server {
    let path = format!("PATH={}", path_without(venv));
    Server::builder(app)
        .binary(binary.to_str().unwrap())
        .wrapped(&[
            "env",
            "-u",
            "VIRTUAL_ENV",
            "-u",
            "PYTHONHOME",
            "-u",
            "PYTHONPATH",
            &path,
        ])
        .start()
}

/// The startup line names the virtualenv and why: `Python 3.X.Y (<venv>, from the
/// virtualenv this binary is in)`.
fn assert_startup_line(s: &Server, venv: &Path) {
    const WHY: &str = ", from the virtualenv this binary is in)";
    let log = s.stderr_text();
    let line = log
        .lines()
        .find(|l| l.contains(WHY))
        .unwrap_or_else(|| panic!("no startup line ending {WHY:?}:\n{log}"));
    let start = line.find("Python ").expect("Python version") + "Python ".len();
    let rest = &line[start..];
    let open = rest.find(" (").expect("(prefix") + 2;
    let prefix = &rest[open..rest.find(WHY).unwrap()];
    assert_eq!(
        std::fs::canonicalize(prefix).unwrap(),
        std::fs::canonicalize(venv).unwrap(),
        "startup line: {line}"
    );
}

#[test]
fn the_pip_installed_binary_serves_flask_and_django_from_its_own_virtualenv() {
    let Some(venv) = wheel_venv() else { return };
    let binary = installed_binary(&venv);

    let s = start_installed(&binary, &venv, "flask_app:app");
    assert_startup_line(&s, &venv);
    let r = s.get("/hello/wheel");
    assert_eq!(r.status, 200, "{}", s.log_text());
    assert_eq!(r.body_text(), "hello wheel");
    assert_from_venv(&json(&s.get("/json")), &venv, "flask from the wheel");
    assert_eq!(s.get("/nowhere").status, 404);
    drop(s);

    let s = start_installed(&binary, &venv, "djangoproj.wsgi:application");
    assert_startup_line(&s, &venv);
    let r = s.get("/");
    assert_eq!(r.status, 200, "{}", s.log_text());
    assert_eq!(r.body_text(), "django ok");
    assert_from_venv(&json(&s.get("/items/3/")), &venv, "django from the wheel");
    let r = s.request(&request_with_body(
        "POST",
        "/echo/",
        "text/plain",
        b"posted to the wheel",
    ));
    assert_eq!(json(&r)["length"].as_f64(), Some(19.0));
}

#[test]
fn the_pip_installed_binary_reports_its_version() {
    let Some(venv) = wheel_venv() else { return };
    let binary = installed_binary(&venv);
    let out = std::process::Command::new(&binary)
        .arg("--version")
        .env_remove("VIRTUAL_ENV")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("m0serve {}", env!("CARGO_PKG_VERSION"))
    );
}
