//! The binary (CPython embedded) finds its libpython without LD_LIBRARY_PATH, imports from
//! the virtualenv chosen by --venv, VIRTUAL_ENV or its own location, refuses one of another
//! Python version, and names the interpreter before it imports the app.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::Server;

fn scratch_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("m0serve-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn binary_runs_without_ld_library_path() {
    let out = Command::new(common::bin())
        .arg("--version")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "m0serve 0.1.0");
}

#[test]
fn imports_from_the_virtualenv_named_by_virtual_env() {
    let (venv, app_dir) = venv_with_marker("venv");

    let mut server = Server::builder("venvapp:app")
        .without_app_dir_flag()
        .arg("--app-dir")
        .arg(app_dir.to_str().unwrap())
        .env("VIRTUAL_ENV", venv.to_str().unwrap())
        .start();
    assert_serves_from(&server, &venv, "VIRTUAL_ENV");
    server.stop();

    // Without VIRTUAL_ENV the module is not importable, and the error names it.
    let out = common::run_to_exit(
        &[
            "venvapp:app",
            "--port",
            "0",
            "--app-dir",
            app_dir.to_str().unwrap(),
        ],
        &[("VIRTUAL_ENV", "")],
        std::time::Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("No module named 'm0serve_venv_marker'"),
        "{}",
        out.stderr
    );
    let _ = std::fs::remove_dir_all(venv.parent().unwrap());
}

/// A fresh virtualenv holding a module only it has, and an app dir whose app reports
/// `sys.prefix` and that module's mark: (venv, app dir).
fn venv_with_marker(tag: &str) -> (PathBuf, PathBuf) {
    let root = scratch_dir(tag);
    let venv = root.join("venv");
    let status = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(status.success(), "python3 -m venv failed");
    let site = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let site = PathBuf::from(String::from_utf8(site.stdout).unwrap().trim());
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(
        site.join("m0serve_venv_marker.py"),
        "MARK = 'from-the-venv'\n",
    )
    .unwrap();
    let app_dir = root.join("app");
    std::fs::create_dir_all(&app_dir).unwrap();
    std::fs::write(
        app_dir.join("venvapp.py"),
        "import sys, m0serve_venv_marker\n\
         def app(environ, start_response):\n\
         \x20   start_response('200 OK', [('Content-Type', 'text/plain')])\n\
         \x20   return [('%s|%s' % (sys.prefix, m0serve_venv_marker.MARK)).encode()]\n",
    )
    .unwrap();
    (venv, app_dir)
}

fn assert_serves_from(server: &Server, venv: &std::path::Path, why: &str) {
    let resp = server.get("/");
    assert_eq!(resp.status, 200, "{}", server.stderr_text());
    let body = String::from_utf8(resp.body.clone()).unwrap();
    let (prefix, mark) = body.split_once('|').unwrap();
    assert_eq!(mark, "from-the-venv");
    assert_eq!(
        std::fs::canonicalize(prefix).unwrap(),
        std::fs::canonicalize(venv).unwrap()
    );
    assert!(
        server.stderr_text().contains(&format!("from {why}")),
        "{}",
        server.stderr_text()
    );
}

#[test]
fn venv_flag_chooses_the_virtualenv() {
    let (venv, app_dir) = venv_with_marker("venv-flag");
    let server = Server::builder("venvapp:app")
        .without_app_dir_flag()
        .args(&[
            "--app-dir",
            app_dir.to_str().unwrap(),
            "--venv",
            venv.to_str().unwrap(),
        ])
        .start();
    assert_serves_from(&server, &venv, "--venv");
    let out = common::run_to_exit(
        &["venvapp:app", "--venv", "/nonexistent-venv"],
        &[],
        std::time::Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--venv"), "{}", out.stderr);
}

#[test]
fn a_binary_installed_in_a_virtualenv_uses_it_without_activation() {
    let (venv, app_dir) = venv_with_marker("venv-installed");
    let installed = venv.join("bin/m0serve");
    std::fs::copy(common::bin(), &installed).unwrap();
    let server = Server::builder("venvapp:app")
        .binary(installed.to_str().unwrap())
        .without_app_dir_flag()
        .args(&["--app-dir", app_dir.to_str().unwrap()])
        .start();
    assert_serves_from(&server, &venv, "the virtualenv this binary is in");
}

/// A directory that looks like a virtualenv of Python `version` to the binary's check: a
/// `pyvenv.cfg` saying so and a `bin/python3` (never run: the check refuses first).
fn fake_venv(tag: &str, version: &str) -> PathBuf {
    let venv = scratch_dir(tag).join("venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::write(
        venv.join("pyvenv.cfg"),
        format!(
            "home = /nonexistent/bin\ninclude-system-site-packages = false\nversion = {version}\n"
        ),
    )
    .unwrap();
    std::os::unix::fs::symlink("/bin/false", venv.join("bin/python3")).unwrap();
    venv
}

/// The Python version this binary embeds, as its startup line names it ("3.11").
fn embedded_version() -> String {
    let out = common::run_to_exit(
        &["hello:app", "--check-config"],
        &[("VIRTUAL_ENV", "")],
        std::time::Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", out.stderr);
    let at = out
        .stdout
        .find("(Python ")
        .expect("the interpreter in --check-config's line")
        + "(Python ".len();
    let full: String = out.stdout[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    full.rsplit_once('.').map(|(mm, _)| mm.to_string()).unwrap()
}

#[test]
fn a_virtualenv_of_another_python_version_is_refused_with_both_versions_and_the_fix() {
    let ours = embedded_version();
    let venv = fake_venv("venv-other-version", "3.99.1");
    let venv_s = venv.to_str().unwrap();
    for (args, env, why) in [
        (
            vec!["hello:app", "--port", "0", "--venv", venv_s],
            vec![],
            "from --venv",
        ),
        (
            vec!["hello:app", "--port", "0"],
            vec![("VIRTUAL_ENV", venv_s)],
            "from VIRTUAL_ENV",
        ),
        (
            vec!["hello:app", "--check-config"],
            vec![("VIRTUAL_ENV", venv_s)],
            "from VIRTUAL_ENV",
        ),
    ] {
        let out = common::run_to_exit(&args, &env, std::time::Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        let want = format!(
            "m0serve: error: {venv_s} ({why}) is a virtualenv of Python 3.99, but this m0serve \
             binary embeds Python {ours}, which cannot use its packages. Install m0serve into \
             that environment (its wheel: `{venv_s}/bin/python -m pip install --no-index \
             --find-links DIST m0serve-wsgi`) and run \
             `{venv_s}/bin/m0serve`"
        );
        assert_eq!(out.stderr.trim(), want, "{args:?}");
    }
    // A virtualenv of the same version passes the check (and then fails for being fake,
    // in Python's own words, not ours).
    let same = fake_venv("venv-same-version", &format!("{ours}.0"));
    let out = common::run_to_exit(
        &[
            "hello:app",
            "--check-config",
            "--venv",
            same.to_str().unwrap(),
        ],
        &[],
        std::time::Duration::from_secs(10),
    );
    assert!(
        !out.stderr.contains("is a virtualenv of Python"),
        "{}",
        out.stderr
    );
    for v in [venv, same] {
        let _ = std::fs::remove_dir_all(v.parent().unwrap());
    }
}

#[test]
fn a_failed_import_names_the_interpreter_and_environment_it_looked_in() {
    let (venv, app_dir) = venv_with_marker("venv-failed-import");
    let out = common::run_to_exit(
        &[
            "no_such_module_here:app",
            "--port",
            "0",
            "--app-dir",
            app_dir.to_str().unwrap(),
        ],
        &[("VIRTUAL_ENV", venv.to_str().unwrap())],
        std::time::Duration::from_secs(20),
    );
    assert!(!out.status.success());
    let where_ = format!("{}, from VIRTUAL_ENV)", venv.display());
    // The line before the import, and the error itself, both say where it looked.
    let importing = out
        .stderr
        .lines()
        .position(|l| {
            l.contains("importing no_such_module_here:app with Python 3.") && l.contains(&where_)
        })
        .unwrap_or_else(|| panic!("no 'importing' line naming {where_}:\n{}", out.stderr));
    let traceback = out
        .stderr
        .lines()
        .position(|l| l.contains("No module named 'no_such_module_here'"))
        .unwrap_or_else(|| panic!("no import error:\n{}", out.stderr));
    assert!(importing < traceback, "{}", out.stderr);
    assert!(
        out.stderr.lines().any(|l| l.contains(
            "cannot import module 'no_such_module_here' (app 'no_such_module_here:app') with Python 3."
        ) && l.contains(&where_)),
        "{}",
        out.stderr
    );
    let _ = std::fs::remove_dir_all(venv.parent().unwrap());
}
