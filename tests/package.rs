//! The Python package, installed with pip as a user would: scripts/test.sh builds a wheel
//! per CPython found (scripts/wheels.sh) and the base interpreter's from the sdist, and
//! installs each with Flask into a fresh virtualenv (M0S_PACKAGE_VENVS; the base one, with
//! Django too, is M0S_WHEEL_VENV). Here: `m0serve` and `python -m m0serve` from each, run
//! without activation; workers that are the same interpreter; a wheel that serves with
//! another installation of its Python, the build interpreter hidden and no libpython
//! (M0S_PORTABLE_WHEEL, M0S_BUILD_PYTHON_PREFIX). Without those variables the tests are
//! skipped (`common::require`).

mod common;
mod venvs;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use venvs::*;

/// `<venv>/bin/m0serve`: a console script, a regular executable file whose `#!` line runs
/// the virtualenv's own interpreter.
fn installed_script(venv: &Path) -> PathBuf {
    let path = venv.join("bin").join("m0serve");
    let meta = std::fs::symlink_metadata(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (is the wheel installed?)", path.display()));
    assert!(
        meta.file_type().is_file() && meta.permissions().mode() & 0o111 != 0,
        "{} is not an executable file",
        path.display()
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let shebang = text.lines().next().unwrap_or_default();
    assert!(
        shebang.starts_with(&format!("#!{}", venv.join("bin").join("python").display())),
        "{}: {shebang}",
        path.display()
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

/// The environment of a user who has not activated `venv`: no VIRTUAL_ENV, PYTHONHOME or
/// PYTHONPATH, and the venv not on PATH.
fn unactivated(venv: &Path) -> Vec<String> {
    [
        "env",
        "-u",
        "VIRTUAL_ENV",
        "-u",
        "PYTHONHOME",
        "-u",
        "PYTHONPATH",
    ]
    .into_iter()
    .map(String::from)
    .chain([format!("PATH={}", path_without(venv))])
    .collect()
}

/// The console script of `venv` serving `app`, not activated.
fn start_script(venv: &Path, app: &str, args: &[&str]) -> Server {
    let script = installed_script(venv);
    let env = unactivated(venv);
    let env: Vec<&str> = env.iter().map(String::as_str).collect();
    Server::builder(app)
        .binary(script.to_str().unwrap())
        .wrapped(&env)
        .args(args)
        .start()
}

/// `python -m m0serve` of `venv` serving `app`, not activated.
fn start_module(venv: &Path, app: &str, args: &[&str]) -> Server {
    let python = venv.join("bin").join("python");
    let mut wrapper = unactivated(venv);
    wrapper.extend([python.to_str().unwrap().to_string(), "-m".into()]);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    Server::builder(app)
        .binary("m0serve")
        .wrapped(&wrapper)
        .args(args)
        .start()
}

/// The startup line names the version, the virtualenv and why:
/// `Python 3.X.Y (<venv>, from the environment m0serve is installed in)`; the version.
fn assert_startup_line(s: &Server, venv: &Path) -> String {
    const WHY: &str = ", from the environment m0serve is installed in)";
    let log = s.stderr_text();
    let line = log
        .lines()
        .find(|l| l.contains("importing ") && l.contains(WHY))
        .unwrap_or_else(|| panic!("no 'importing' line ending {WHY:?}:\n{log}"));
    let start = line.find("Python ").expect("Python version") + "Python ".len();
    let rest = &line[start..];
    let open = rest.find(" (").expect("(prefix");
    let prefix = &rest[open + 2..rest.find(WHY).unwrap()];
    assert_eq!(
        std::fs::canonicalize(prefix).unwrap(),
        std::fs::canonicalize(venv).unwrap(),
        "startup line: {line}"
    );
    rest[..open].to_string()
}

/// `major.minor` of the Python that made `venv` (its pyvenv.cfg).
fn venv_version(venv: &Path) -> String {
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).unwrap();
    let full = cfg
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "version" || k.trim() == "version_info").then(|| v.trim().to_string())
        })
        .expect("version in pyvenv.cfg");
    full.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// The virtualenvs named by M0S_PACKAGE_VENVS (one per CPython found), or None.
fn package_venvs() -> Option<Vec<PathBuf>> {
    match std::env::var("M0S_PACKAGE_VENVS") {
        Ok(v) if !v.trim().is_empty() => Some(v.split_whitespace().map(PathBuf::from).collect()),
        _ => {
            require(
                false,
                "M0S_PACKAGE_VENVS: run scripts/test.sh, which builds a wheel per CPython \
                 found and installs each into a virtualenv",
            );
            None
        }
    }
}

fn version_output(program: &Path, args: &[&str], venv: &Path) -> String {
    let out = Command::new(program)
        .args(args)
        .env_remove("VIRTUAL_ENV")
        .env("PATH", path_without(venv))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {out:?}",
        program.display()
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn every_python_version_installs_the_wheel_and_serves_flask_from_its_virtualenv() {
    let Some(venvs) = package_venvs() else { return };
    let want = format!("m0serve {}", env!("CARGO_PKG_VERSION"));
    for venv in &venvs {
        let version = venv_version(venv);
        let script = installed_script(venv);
        assert_eq!(version_output(&script, &["--version"], venv), want);
        let python = venv.join("bin").join("python");
        assert_eq!(
            version_output(&python, &["-m", "m0serve", "--version"], venv),
            want
        );

        let s = start_module(venv, "flask_app:app", &[]);
        let full = assert_startup_line(&s, venv);
        assert!(
            full.starts_with(&format!("{version}.")),
            "{full} for {version}"
        );
        let r = s.get("/hello/package");
        assert_eq!(r.status, 200, "{}", s.log_text());
        assert_eq!(r.body_text(), "hello package");
        let j = json(&s.get("/json"));
        assert_from_venv(&j, venv, "flask from the package");
        assert_eq!(j["version"].as_str(), Some(version.as_str()), "{j:?}");
        s.assert_no_panic();
    }
    eprintln!("served from {} virtualenv(s): {venvs:?}", venvs.len());
}

#[test]
fn the_distribution_is_m0serve_wsgi_with_one_version_and_metadata_that_leads_to_the_docs() {
    let Some(venvs) = package_venvs() else { return };
    let script = "import importlib.metadata as m, json, m0serve\n\
                  d = m.metadata('m0serve-wsgi')\n\
                  print(json.dumps({'name': d['Name'], 'version': d['Version'], \
                  'module': m0serve.__version__, 'summary': d['Summary'] or '', \
                  'license': d['License'] or d['License-Expression'] or '', \
                  'urls': d.get_all('Project-URL') or [], \
                  'classifiers': d.get_all('Classifier') or []}))";
    for venv in venvs {
        let python = venv.join("bin").join("python");
        let out = Command::new(&python).args(["-c", script]).output().unwrap();
        assert!(out.status.success(), "{}: {out:?}", venv.display());
        let meta = Json::parse(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
        let text = |k: &str| meta[k].as_str().unwrap().to_string();
        assert_eq!(text("name"), "m0serve-wsgi", "{}", venv.display());
        // One version: Cargo.toml's, in the metadata, the module and `--version`.
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(text("version"), version);
        assert_eq!(text("module"), version);
        let said = version_output(&installed_script(&venv), &["--version"], &venv);
        assert!(said.ends_with(version), "m0serve --version: {said}");
        assert!(text("summary").contains("WSGI"), "{}", text("summary"));
        assert_eq!(text("license"), "MIT");
        let urls: Vec<String> = meta["urls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap().to_string())
            .collect();
        for label in ["Homepage", "Documentation", "Changelog", "Issues"] {
            assert!(
                urls.iter()
                    .any(|u| u.starts_with(&format!("{label}, https://"))),
                "no {label} URL: {urls:?}"
            );
        }
        let classifiers: Vec<&str> = meta["classifiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let mut wanted = vec![
            "Topic :: Internet :: WWW/HTTP :: WSGI :: Server".to_string(),
            "Operating System :: POSIX :: Linux".to_string(),
            "License :: OSI Approved :: MIT License".to_string(),
        ];
        wanted.extend((9..=13).map(|m| format!("Programming Language :: Python :: 3.{m}")));
        for c in &wanted {
            assert!(
                classifiers.contains(&c.as_str()),
                "no {c:?}: {classifiers:?}"
            );
        }
    }
}

#[test]
fn the_console_script_serves_flask_and_django_from_its_own_virtualenv() {
    let Some(venv) = wheel_venv() else { return };

    let s = start_script(&venv, "flask_app:app", &[]);
    assert_startup_line(&s, &venv);
    let r = s.get("/hello/wheel");
    assert_eq!(r.status, 200, "{}", s.log_text());
    assert_eq!(r.body_text(), "hello wheel");
    assert_from_venv(&json(&s.get("/json")), &venv, "flask from the wheel");
    assert_eq!(s.get("/nowhere").status, 404);
    drop(s);

    let s = start_script(&venv, "djangoproj.wsgi:application", &[]);
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

/// A process's argv.
fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_master_is_the_python_process_and_its_workers_run_the_same_python() {
    let Some(venv) = wheel_venv() else { return };
    let mut s = start_script(&venv, "hello:app", &["--workers", "2"]);
    // The console script runs the master in the interpreter its `#!` names: no second
    // process in between.
    let script = installed_script(&venv);
    let shebang = std::fs::read_to_string(&script).unwrap();
    let python = PathBuf::from(shebang.lines().next().unwrap().trim_start_matches("#!"));
    let master = cmdline(s.pid());
    assert_eq!(
        master.first().map(PathBuf::from),
        Some(python.clone()),
        "{master:?}"
    );
    let check_workers = |pids: &[u32]| {
        for &pid in pids {
            let argv = cmdline(pid);
            assert_eq!(
                argv.first().map(PathBuf::from),
                Some(python.clone()),
                "{argv:?}"
            );
            // `python -c WORKER_BOOT ARGS...`: the code imports m0serve and serves.
            let c = argv.iter().position(|a| a == "-c").expect("-c");
            assert!(
                argv.get(c + 1)
                    .is_some_and(|code| code.contains("import m0serve")),
                "{argv:?}"
            );
            assert_eq!(argv[c + 2..], master[2..], "the master's arguments follow");
        }
    };
    let first = s.wait_for_workers(2, Duration::from_secs(20));
    check_workers(&first);
    assert_eq!(s.get("/").status, 200);

    // A reload starts new workers the same way.
    s.signal(libc::SIGHUP);
    let mut now = Vec::new();
    let replaced = wait_until(Duration::from_secs(20), || {
        now = s.worker_pids();
        now.len() == 2 && now.iter().all(|p| !first.contains(p))
    });
    assert!(
        replaced,
        "workers {first:?} not replaced: {now:?}\n{}",
        s.log_text()
    );
    check_workers(&now);
    assert_eq!(s.get("/").status, 200);
    assert_eq!(s.stop().code(), Some(0), "{}", s.log_text());
    s.assert_no_panic();
}

#[test]
fn a_thread_the_app_started_does_not_hold_up_a_stopping_worker() {
    let Some(venv) = wheel_venv() else { return };
    let mut s = start_script(&venv, "thread_at_import:app", &["--graceful-timeout", "20"]);
    assert_eq!(s.get("/").status, 200);
    // The worker ends from Rust as the binary's does: Python is not finalised, so the
    // non-daemon thread is not waited for (it would be until the master's kill, 25 s on).
    let t0 = Instant::now();
    s.signal(libc::SIGTERM);
    let status = s.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some() && t0.elapsed() < Duration::from_secs(5),
        "still running {:?} after SIGTERM\n{}",
        t0.elapsed(),
        s.log_text()
    );
    assert_eq!(status.unwrap().code(), Some(0), "{}", s.log_text());
}

#[test]
fn the_package_serves_only_from_its_own_environment_and_says_so() {
    let Some(venv) = wheel_venv() else { return };
    let Some(other) = test_venv() else { return };
    let script = installed_script(&venv);
    // --venv naming another environment: refused at start, with the fix.
    let out = Command::new(&script)
        .args([
            "hello:app",
            "--port",
            "0",
            "--venv",
            other.to_str().unwrap(),
        ])
        .current_dir(apps_dir())
        .env_remove("VIRTUAL_ENV")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--venv {}: this m0serve is the Python package installed in {}",
            other.display(),
            venv.display()
        )) && stderr.contains(&format!(
            "{}/bin/python -m pip install --no-index --find-links DIST m0serve-wsgi",
            other.display()
        )),
        "{stderr}"
    );
    // Its own environment is fine.
    let s = start_script(&venv, "hello:app", &["--venv", venv.to_str().unwrap()]);
    assert_eq!(s.get("/").status, 200);
    drop(s);
    // An activated virtualenv that is not its own: served from its own, with a warning.
    let s = Server::builder("flask_app:app")
        .binary(script.to_str().unwrap())
        .env("VIRTUAL_ENV", other.to_str().unwrap())
        .start();
    assert_from_venv(
        &json(&s.get("/json")),
        &venv,
        "flask with another VIRTUAL_ENV",
    );
    assert!(
        s.stderr_text().lines().any(|l| l.contains("[WARN]")
            && l.contains(&format!("VIRTUAL_ENV is {}", other.display()))
            && l.contains(&format!("installed in {}", venv.display()))),
        "{}",
        s.stderr_text()
    );
}

/// M0S_PORTABLE_WHEEL, a wheel, and M0S_BUILD_PYTHON_PREFIX, the prefix of the Python it
/// was built with (scripts/test.sh sets both).
fn portable_wheel() -> Option<(String, String)> {
    match (
        std::env::var("M0S_PORTABLE_WHEEL"),
        std::env::var("M0S_BUILD_PYTHON_PREFIX"),
    ) {
        (Ok(wheel), Ok(prefix)) => Some((wheel, prefix)),
        _ => {
            require(
                false,
                "M0S_PORTABLE_WHEEL and M0S_BUILD_PYTHON_PREFIX (scripts/test.sh sets them)",
            );
            None
        }
    }
}

#[test]
fn a_wheel_serves_with_another_installation_of_its_python_and_no_libpython() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let Some((wheel, build_prefix)) = portable_wheel() else {
        return;
    };
    // cpXY in the wheel's name: the Python version it is for.
    let name = Path::new(&wheel)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let tag = name
        .split('-')
        .nth(2)
        .expect("python tag")
        .trim_start_matches("cp");
    let version = format!("{}.{}", &tag[..1], &tag[1..]);
    let other = PathBuf::from(format!("/usr/bin/python{version}"));
    let other_prefix = Command::new(&other)
        .args(["-c", "import ensurepip, sys; print(sys.base_prefix)"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let can = root && Command::new("unshare").arg("--version").output().is_ok();
    if !require(can, "root and unshare(1) for a mount namespace") {
        return;
    }
    let Some(other_prefix) = other_prefix.filter(|p| *p != build_prefix) else {
        require(
            false,
            &format!(
                "another installation of Python {version} ({} is missing, has no venv module, \
                 or is the build interpreter's)",
                other.display()
            ),
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("m0s-portable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let venv = dir.join("venv");
    // Inside the namespace: the build interpreter's installation is an empty tmpfs, and
    // every libpython of this version is /dev/null.
    let hide = format!(
        "mount -t tmpfs -o size=1m m0s-hidden '{build_prefix}'\n\
         test ! -e '{build_prefix}/bin'\n\
         for f in $(find /usr/lib /usr/local/lib -name 'libpython{version}*.so*' -type f 2>/dev/null); do\n\
         \x20   mount --bind /dev/null \"$f\"\n\
         done\n"
    );
    let prepare = format!(
        "{hide}'{}' -m venv '{}'\n'{}/bin/python' -m pip install --quiet --no-index '{wheel}'\n",
        other.display(),
        venv.display(),
        venv.display()
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-ec", &prepare])
        .env_remove("VIRTUAL_ENV")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "preparing {} with {}: {}{}",
        venv.display(),
        other.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let serve = format!("{hide}exec \"$@\"\n");
    let script = installed_script(&venv);
    let mut s = Server::builder("hello:app")
        .binary(script.to_str().unwrap())
        .wrapped(&["unshare", "-m", "sh", "-ec", &serve, "sh"])
        .args(&["--workers", "2"])
        .start();
    let r = s.get("/");
    assert_eq!(r.status, 200, "{}", s.log_text());
    assert_startup_line(&s, &venv);
    // What the workers mapped: the other installation's interpreter, no libpython, and
    // nothing of the build interpreter's.
    let workers = s.wait_for_workers(2, Duration::from_secs(20));
    for pid in &workers {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        assert!(
            !maps.contains("libpython"),
            "worker {pid} mapped a libpython:\n{maps}"
        );
        assert!(
            !maps.contains(&build_prefix),
            "worker {pid} mapped {build_prefix}:\n{maps}"
        );
        assert!(
            maps.contains("_m0serve"),
            "worker {pid} has no extension module:\n{maps}"
        );
    }
    eprintln!(
        "the wheel for {version}, built with {build_prefix}, served with {other_prefix} \
         (workers {workers:?})"
    );
    assert_eq!(s.stop().code(), Some(0), "{}", s.log_text());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `sh -c SCRIPT` in `dir`, the venv unactivated; its output.
fn sh_in(venv: &Path, dir: &Path, script: &str) -> std::process::Output {
    Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .env_remove("VIRTUAL_ENV")
        .env("PATH", path_without(venv))
        .output()
        .unwrap()
}

#[test]
fn a_local_m0serve_module_does_not_shadow_the_package_and_sys_path_is_the_same_everywhere() {
    let Some(venv) = wheel_venv() else { return };
    let tmp = TempDir::new("shadow");
    let cwd = tmp.path.join("cwd");
    let app_dir = tmp.path.join("appdir");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&app_dir).unwrap();
    // A module named m0serve where the server is started, and a module the app imports
    // that only the current directory has.
    std::fs::write(
        cwd.join("m0serve.py"),
        "raise SystemExit('the local m0serve.py was imported')\n",
    )
    .unwrap();
    std::fs::write(cwd.join("helper_in_cwd.py"), "X = 1\n").unwrap();
    std::fs::copy(apps_dir().join("hello.py"), app_dir.join("hello.py")).unwrap();
    std::fs::write(
        app_dir.join("needs_cwd.py"),
        "import helper_in_cwd\napp = None\n",
    )
    .unwrap();
    let script = installed_script(&venv);
    let python = venv.join("bin/python");
    let p = free_port();
    // Workers boot (they import the package, not ./m0serve.py) and serve.
    let child = Command::new(&script)
        .args(["hello:app", "--workers", "2", "--port", &p.to_string()])
        .arg("--app-dir")
        .arg(&app_dir)
        .current_dir(&cwd)
        .env_remove("VIRTUAL_ENV")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ok = wait_until(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", p)).is_ok()
    });
    let addr: std::net::SocketAddr = format!("127.0.0.1:{p}").parse().unwrap();
    let served = ok && {
        let mut c = Conn::connect(addr);
        c.send(&get("/"));
        c.read_response().status == 200
    };
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(served, "{stderr}");
    assert!(!stderr.contains("local m0serve.py"), "{stderr}");
    // --check-config, with the console script or python -m, sees what the workers see:
    // the current directory is not on sys.path unless it is --app-dir. (`python -m
    // m0serve` typed by the user imports a local m0serve.py by Python's own rule: gone.)
    std::fs::remove_file(cwd.join("m0serve.py")).unwrap();
    for cmd in [
        format!(
            "'{}' needs_cwd:app --check-config --app-dir '{}'",
            script.display(),
            app_dir.display()
        ),
        format!(
            "'{}' -m m0serve needs_cwd:app --check-config --app-dir '{}'",
            python.display(),
            app_dir.display()
        ),
    ] {
        let out = sh_in(&venv, &cwd, &cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {stderr}");
        assert!(
            stderr.contains("No module named 'helper_in_cwd'"),
            "{cmd}: {stderr}"
        );
    }
}

#[test]
fn closed_standard_descriptors_are_not_taken_by_the_listener() {
    let Some(venv) = wheel_venv() else { return };
    let script = installed_script(&venv);
    for redirect in ["<&-", ">&-", "2>&-", "<&- >&- 2>&-"] {
        let p = free_port();
        let cmd = format!(
            "exec '{}' hello:app --workers 2 --port {p} {redirect}",
            script.display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &cmd])
            .current_dir(apps_dir())
            .env_remove("VIRTUAL_ENV")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let up = wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", p)).is_ok()
        });
        let status = up.then(|| {
            let mut c = Conn::connect(format!("127.0.0.1:{p}").parse().unwrap());
            c.send(&get("/"));
            c.read_response().status
        });
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let exit = child.wait().unwrap();
        assert_eq!(status, Some(200), "{redirect}: {exit:?}");
        assert_eq!(exit.code(), Some(0), "{redirect}");
    }
}

#[test]
fn python_dash_u_reaches_the_workers() {
    let Some(venv) = wheel_venv() else { return };
    let python = venv.join("bin/python");
    let s = Server::builder("logs_app:app")
        .binary("m0serve")
        .wrapped(&[python.to_str().unwrap(), "-u", "-m"])
        .env("PYTHONUNBUFFERED", "")
        .start();
    let workers = s.worker_pids();
    assert!(
        workers
            .iter()
            .all(|&p| cmdline(p).iter().any(|a| a == "-u")),
        "{:?}",
        workers.iter().map(|&p| cmdline(p)).collect::<Vec<_>>()
    );
}

#[test]
fn ctrl_c_while_workers_start_prints_no_python_traceback() {
    let Some(venv) = wheel_venv() else { return };
    let script = installed_script(&venv);
    for _ in 0..3 {
        // Its own process group, as a shell gives a foreground job; SIGINT to all of it.
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(&script)
            .args(["hello:app", "--workers", "3", "--port", "0"])
            .current_dir(apps_dir())
            .env_remove("VIRTUAL_ENV")
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pgid = child.id() as libc::pid_t;
        let mut stderr = child.stderr.take().unwrap();
        // The master's first line: the workers are being started now.
        let mut seen = Vec::new();
        let mut byte = [0u8; 1];
        use std::io::Read;
        while !String::from_utf8_lossy(&seen).contains("master starting") {
            if stderr.read(&mut byte).unwrap_or(0) == 0 {
                break;
            }
            seen.push(byte[0]);
        }
        std::thread::sleep(Duration::from_millis(15));
        // SAFETY: kill(2) on the process group of a child we spawned.
        unsafe { libc::kill(-pgid, libc::SIGINT) };
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        let status = child.wait().unwrap();
        let all = format!("{}{rest}", String::from_utf8_lossy(&seen));
        assert!(!all.contains("Traceback"), "{all}");
        assert!(!all.contains("KeyboardInterrupt"), "{all}");
        assert_eq!(status.code(), Some(0), "{all}");
    }
}

#[test]
fn with_user_a_virtualenv_the_user_cannot_reach_is_named_before_any_worker_starts() {
    // Issue 43: a package worker executes the interpreter and loads the extension module
    // as --user; a virtualenv under a directory the user cannot enter made every worker
    // fail to boot.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let can = root && Command::new("unshare").arg("--version").output().is_ok();
    if !require(can, "root and unshare(1) for a mount namespace") {
        return;
    }
    let Some((wheel, build_prefix)) = portable_wheel() else {
        return;
    };
    let tmp = TempDir::new("closed-venv");
    // In the namespace /root (where pyenv keeps the interpreter) is open to the user.
    let script = open_root(&tmp);
    let closed = tmp.path.join("closed");
    std::fs::create_dir(&closed).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let venv = closed.join("v");
    let python = Path::new(&build_prefix).join("bin/python3");
    let made = Command::new(&python)
        .args(["-m", "venv"])
        .arg(&venv)
        .env_remove("VIRTUAL_ENV")
        .status()
        .unwrap()
        .success()
        && Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet", "--no-index", &wheel])
            .status()
            .unwrap()
            .success();
    assert!(made, "a virtualenv with {wheel} in {}", venv.display());
    let apps = tmp.path.join("apps");
    std::fs::create_dir(&apps).unwrap();
    std::fs::copy(apps_dir().join("hello.py"), apps.join("hello.py")).unwrap();
    for p in [&apps, &apps.join("hello.py")] {
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let run = |extra: &[&str]| {
        Command::new("timeout")
            .args(["60", "unshare", "-m", "sh", &script])
            .arg(installed_script(&venv))
            .args(["hello:app", "--port", "0", "--user", "nobody", "--app-dir"])
            .arg(&apps)
            .args(extra)
            .env_remove("VIRTUAL_ENV")
            .output()
            .unwrap()
    };
    for extra in [&["--check-config"][..], &[][..]] {
        let out = run(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        let named = format!("the workers' shared library {}/lib/python", venv.display());
        assert!(
            !out.status.success()
                && err.contains(&named)
                && err.contains("user nobody cannot read it")
                && !err.contains("failed to boot"),
            "{extra:?}: {:?}\n{err}",
            out.status
        );
    }
    // Opened to the user, the same virtualenv passes the check.
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(&["--check-config"]);
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_gunicorn_config_is_run_by_the_packages_interpreter() {
    // The package's master runs no Python of the file's: its own interpreter runs it in a
    // process of its own, as the binary runs it in its embedded one.
    let Some(venv) = wheel_venv() else { return };
    let tmp = TempDir::new("package-gunicorn-conf");
    let conf = tmp.path.join("gunicorn.conf.py");
    std::fs::write(
        &conf,
        "import sys\nworkers = 3\nwsgi_app = 'hello:app'\nraw_env = ['M0TEST_PY=' + sys.prefix]\n",
    )
    .unwrap();
    let out = Command::new(installed_script(&venv))
        .args(["-c", conf.to_str().unwrap(), "--print-config"])
        .env_remove("VIRTUAL_ENV")
        .env("PATH", path_without(&venv))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("APP = \"hello:app\"  # file"), "{text}");
    assert!(text.contains("--workers = \"3\"  # file"), "{text}");
    // Run by the virtualenv's interpreter.
    let prefix = std::fs::canonicalize(&venv).unwrap();
    assert!(
        text.contains(&format!("M0TEST_PY={}", prefix.display()))
            || text.contains(&format!("M0TEST_PY={}", venv.display())),
        "{text}"
    );
    // Served: the master's report reaches the workers, not the app (whose os.environ the
    // package's interpreter read before the worker did).
    std::fs::write(
        &conf,
        "workers = 2\nwsgi_app = 'environ_dump:app'\nraw_env = ['M0TEST_CONF=yes']\n",
    )
    .unwrap();
    let s = start_script(&venv, "", &["-c", conf.to_str().unwrap()]);
    let body = s.get("/").body_text();
    assert!(body.contains("\"os.M0TEST_CONF\": \"yes\""), "{body}");
    assert!(!body.contains("M0SERVE_GUNICORN"), "{body}");
}

#[test]
fn every_python_version_forks_preloaded_workers_with_pythons_own_fork() {
    let Some(venvs) = package_venvs() else { return };
    for venv in &venvs {
        let python = venv.join("bin").join("python");
        let mut wrapper = unactivated(venv);
        wrapper.extend([python.to_str().unwrap().to_string(), "-m".into()]);
        let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
        let s = Server::builder("preload_probe:app")
            .binary("m0serve")
            .wrapped(&wrapper)
            .args(&["--workers", "2", "--preload"])
            .start();
        let workers = s.wait_for_workers(2, Duration::from_secs(15));
        let preloader = s.preloader_pids();
        assert_eq!(preloader.len(), 1, "{}", s.log_text());
        let mut seen = std::collections::BTreeSet::new();
        let ok = wait_until(Duration::from_secs(15), || {
            let j = json(&s.get("/"));
            // One import, by the preloader; each worker the master's child, with the
            // app's after-fork hook run in it (Python's os.fork, not a bare one).
            assert_eq!(j["imported_by"], preloader[0], "{j}");
            assert_eq!(j["ppid"], s.pid(), "{j}");
            assert_eq!(j["forked_into"], serde_json::json!([j["pid"]]), "{j}");
            assert!(j["frozen"].as_u64().unwrap() > 0, "{j}");
            seen.insert(j["pid"].as_u64().unwrap() as u32);
            seen.len() == 2
        });
        assert!(ok, "{seen:?} of {workers:?}\n{}", s.log_text());
        // No warning: Python 3.12 and later warn about a fork of a process with threads.
        assert!(!s.log_text().contains("Warning"), "{}", s.log_text());
        s.assert_no_panic();
    }
}
