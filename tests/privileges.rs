//! `--user`, `--group` and `--umask`, as root with the real unprivileged user `nobody`:
//! the master binds a port under 1024, then it and its workers run as the user (real,
//! effective and saved ids, the user's own supplementary groups only) before the app is
//! imported; a switch that cannot be made stops the start; the mask reaches Unix sockets
//! and the app's files. The app is tests/apps/identity.py.
//!
//! The interpreter lives under /root (pyenv), which only root may enter; each server runs
//! in a mount namespace where /root is a world-readable directory holding that tree, so
//! that `nobody` can load it. The checkout may be somewhere only root may enter too (a
//! clone in `mktemp -d`, or under /root): a server that runs as another user runs a copy
//! of the binary and of the apps it imports, in a directory under /tmp that anyone may
//! read (`readable_copy`). Needs root and `unshare` (as CI has): without them each test
//! is skipped (`common::require`).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::*;

const NOBODY: u32 = 65534;

/// Why these tests cannot run here, if they cannot.
fn cannot_run() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("root");
    }
    let unshare = std::process::Command::new("unshare")
        .args(["-m", "true"])
        .status();
    if !unshare.map(|s| s.success()).unwrap_or(false) {
        return Some("`unshare -m` to work");
    }
    None
}

macro_rules! needs_root {
    () => {
        if let Some(why) = cannot_run() {
            require(false, why);
            return;
        }
    };
}

/// This build's binary and the apps these tests import, where any user may read them.
struct Readable {
    /// The binary (a hard link to this build's, or a copy).
    bin: String,
    /// The apps' directory (identity.py, hello.py).
    apps: std::path::PathBuf,
    _dir: TempDir,
}

/// Copies what a server running as another user needs from the checkout, which may be in
/// a directory only root may enter, into a fresh directory under /tmp with every level
/// world-readable (0755; /tmp itself is 1777).
fn readable_copy() -> Readable {
    let dir = TempDir::new("readable");
    let root = std::path::PathBuf::from("/tmp").join(
        dir.path
            .file_name()
            .expect("a temporary directory has a name"),
    );
    // TempDir is under $TMPDIR, which may be private: the copy goes under /tmp itself.
    let dir = if dir.path.parent() == Some(Path::new("/tmp")) {
        dir
    } else {
        std::fs::create_dir_all(&root).unwrap();
        TempDir { path: root }
    };
    let open = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    open(&dir.path, 0o755);
    let apps = dir.path.join("apps");
    std::fs::create_dir(&apps).unwrap();
    open(&apps, 0o755);
    for app in ["identity.py", "hello.py"] {
        std::fs::copy(apps_dir().join(app), apps.join(app)).unwrap();
        open(&apps.join(app), 0o644);
    }
    let bin_copy = dir.path.join("m0serve");
    if std::fs::hard_link(bin(), &bin_copy).is_err() {
        std::fs::copy(bin(), &bin_copy).unwrap();
    }
    open(&bin_copy, 0o755);
    Readable {
        bin: bin_copy.to_string_lossy().into_owned(),
        apps,
        _dir: dir,
    }
}

/// `Server::builder(app)` running the readable copy of the binary and the apps.
fn builder_as_user(app: &str, copy: &Readable) -> ServerBuilder {
    Server::builder(app).binary(&copy.bin).apps_in(&copy.apps)
}

/// A directory anyone may write in, for the app's files.
fn writable_dir(tmp: &TempDir) -> std::path::PathBuf {
    let d = tmp.path.join("out");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

/// A directory `name` in `tmp` with `mode`.
fn dir_with_mode(tmp: &TempDir, name: &str, mode: u32) -> std::path::PathBuf {
    let d = tmp.path.join(name);
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
    d
}

/// A free TCP port under 1024 on 127.0.0.1 (only root may bind one).
fn low_port() -> u16 {
    (600..1000)
        .find(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        .expect("no free port under 1024")
}

/// `Uid:`, `Gid:` and `Groups:` of a process, from /proc.
fn ids_of(pid: u32) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> Vec<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or("")
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    (field("Uid:"), field("Gid:"), field("Groups:"))
}

/// What the app reports: the ids at "import" and "now", and the mode of the file it made
/// (`made`), if any.
fn reported(s: &Server, target: &str) -> Json {
    let r = s.get(target);
    assert_eq!(r.status, 200, "{}\n{}", r.body_text(), s.log_text());
    Json::parse(&r.body_text()).unwrap()
}

fn num(j: &Json, path: &[&str]) -> f64 {
    let mut v = j;
    for p in path {
        v = &v[*p];
    }
    v.as_f64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {j:?}"))
}

fn groups(j: &Json, when: &str) -> Vec<f64> {
    j[when]["groups"]
        .as_array()
        .unwrap_or_else(|| panic!("no {when}.groups in {j:?}"))
        .iter()
        .map(|g| g.as_f64().unwrap())
        .collect()
}

#[test]
fn a_low_port_is_bound_then_master_and_workers_run_as_the_user_before_the_import() {
    needs_root!();
    let tmp = TempDir::new("user");
    let script = open_root(&tmp);
    let copy = readable_copy();
    let port = low_port();
    // The server starts as root with a supplementary group it must not keep (disk, 6).
    let s = builder_as_user("identity:application", &copy)
        .without_port_flag()
        .wrapped(&[
            "unshare", "-m", "sh", &script, "setpriv", "--groups", "6", "--",
        ])
        .args(&[
            "-b",
            &format!("127.0.0.1:{port}"),
            "--user",
            "nobody",
            "--workers",
            "2",
        ])
        .start();
    assert_eq!(s.port(), port);
    assert!(
        s.log_text().contains("running as user nobody"),
        "{}",
        s.log_text()
    );
    let workers = s.wait_for_workers(2, Duration::from_secs(10));
    for pid in workers {
        let (uid, gid, groups) = ids_of(pid);
        assert_eq!(uid, vec![NOBODY; 4], "worker {pid}");
        assert_eq!(gid, vec![NOBODY; 4], "worker {pid}");
        assert_eq!(
            groups,
            vec![NOBODY],
            "worker {pid}: root's groups were kept"
        );
    }
    // The master: the user's effective (and file system) ids and groups, root kept as its
    // real and saved ids (as gunicorn's arbiter keeps root), so the app cannot signal it.
    let (uid, gid, master_groups) = ids_of(s.pid());
    assert_eq!(uid, vec![0, NOBODY, 0, NOBODY], "master");
    assert_eq!(gid, vec![0, NOBODY, 0, NOBODY], "master");
    assert_eq!(
        master_groups,
        vec![NOBODY],
        "master: root's groups were kept"
    );
    let j = reported(&s, "/");
    for when in ["import", "now"] {
        for key in ["uid", "euid", "gid", "egid"] {
            assert_eq!(
                num(&j, &[when, key]),
                f64::from(NOBODY),
                "{when} {key}: {j:?}"
            );
        }
        assert_eq!(groups(&j, when), vec![f64::from(NOBODY)], "{when}: {j:?}");
    }
}

#[test]
fn numeric_ids_the_user_database_does_not_know_are_used_as_given() {
    needs_root!();
    let tmp = TempDir::new("numeric");
    let script = open_root(&tmp);
    let copy = readable_copy();
    let s = builder_as_user("identity:application", &copy)
        .wrapped(&["unshare", "-m", "sh", &script])
        .args(&["--user", "3999999", "--group", "3999998"])
        .start();
    let j = reported(&s, "/");
    assert_eq!(num(&j, &["import", "uid"]), 3999999.0, "{j:?}");
    assert_eq!(num(&j, &["import", "gid"]), 3999998.0, "{j:?}");
    assert_eq!(groups(&j, "import"), vec![3999998.0], "{j:?}");
}

#[test]
fn group_alone_changes_the_group_and_keeps_the_user() {
    needs_root!();
    let s = Server::start("identity:application", &["--group", "nogroup"]);
    let j = reported(&s, "/");
    assert_eq!(num(&j, &["import", "uid"]), 0.0, "{j:?}");
    assert_eq!(num(&j, &["import", "gid"]), f64::from(NOBODY), "{j:?}");
    assert_eq!(num(&j, &["import", "egid"]), f64::from(NOBODY), "{j:?}");
    assert_eq!(groups(&j, "import"), vec![f64::from(NOBODY)], "{j:?}");
}

#[test]
fn a_switch_that_cannot_be_made_stops_the_start_before_any_import() {
    needs_root!();
    let tmp = TempDir::new("refused");
    let script = open_root(&tmp);
    let copy = readable_copy();
    // Started as nobody, it cannot become root.
    let e = builder_as_user("identity:application", &copy)
        .wrapped(&[
            "unshare",
            "-m",
            "sh",
            &script,
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ])
        .args(&["--user", "root"])
        .try_start()
        .map(|_| ())
        .expect_err("started although it could not switch");
    assert!(e.contains("exited with exit status: 1"), "{e}");
    assert!(
        e.contains("cannot switch to user root: only root can, and m0serve runs as uid 65534"),
        "{e}"
    );
    assert!(!e.contains("importing"), "a worker started: {e}");
}

#[test]
fn unknown_names_and_bad_masks_are_refused_at_start() {
    for (args, says) in [
        (
            &["--user", "no-such-user-m0s"][..],
            "--user no-such-user-m0s: no such user",
        ),
        (
            &["--group", "no-such-group-m0s"][..],
            "--group no-such-group-m0s: no such group",
        ),
        (&["--user", "3999999"][..], "give --group too"),
        (&["--umask", "8"][..], "--umask 8: expected an octal mask"),
        (
            &["--umask", "1000"][..],
            "--umask 1000: expected an octal mask",
        ),
    ] {
        let mut all = vec!["identity:application", "--check-config"];
        all.extend_from_slice(args);
        let out = run_to_exit(&all, &[], Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}

/// The mode of a file, as `0o...` bits.
fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn umask_reaches_the_unix_socket_and_the_apps_files() {
    let tmp = TempDir::new("umask");
    let out = writable_dir(&tmp);
    for (mask, expect_socket, expect_file) in [(None, 0o755, 0o644), (Some("077"), 0o700, 0o600)] {
        let sock = out.join(format!("s-{}.sock", mask.unwrap_or("default")));
        let mut b = Server::builder("identity:application")
            .without_port_flag()
            .args(&[
                "-b",
                &format!("unix:{}", sock.display()),
                "-b",
                "127.0.0.1:0",
            ]);
        if let Some(m) = mask {
            b = b.args(&["--umask", m]);
        }
        // Without --umask the server keeps the mask it was started with: 022 here.
        let s = b
            .wrapped(&["sh", "-c", "umask 022 && exec \"$@\"", "sh"])
            .start();
        assert_eq!(mode(&sock), expect_socket, "socket, --umask {mask:?}");
        let made = out.join(format!("made-{}", mask.unwrap_or("default")));
        let j = reported(&s, &format!("/?{}", made.display()));
        assert_eq!(
            num(&j, &["made"]) as u32,
            expect_file,
            "app's file, --umask {mask:?}"
        );
        drop(s);
    }
}

/// `--check-config ARGS`, as root, in a mount namespace where nobody may use the
/// interpreter (`open_root`), with the readable copy of the binary, in its apps' directory.
fn check_as_root(script: &str, copy: &Readable, args: &[&str]) -> std::process::Output {
    std::process::Command::new("timeout")
        .args(["60", "unshare", "-m", "sh", script, &copy.bin])
        .arg("--check-config")
        .args(args)
        .current_dir(&copy.apps)
        .env_remove("M0SERVE_USER")
        .output()
        .expect("cannot run the check")
}

/// `BIN ARGS` as root with `--user nobody`, bounded; through `wrap` (a mount namespace)
/// when given.
fn run_as_nobody(
    wrap: Option<&str>,
    bin: &str,
    apps: &Path,
    args: &[&str],
) -> std::process::Output {
    let mut cmd = std::process::Command::new("timeout");
    cmd.arg("60");
    if let Some(script) = wrap {
        cmd.args(["unshare", "-m", "sh", script]);
    }
    cmd.arg(bin)
        .args(["hello:app", "--port", "0", "--user", "nobody"])
        .arg("--app-dir")
        .arg(apps)
        .args(args)
        .current_dir(apps)
        .env_remove("M0SERVE_USER")
        .output()
        .expect("cannot run m0serve")
}

#[test]
fn a_program_under_a_closed_directory_runs_from_its_descriptor() {
    // Issue 43: the workers executed the program by its path as the user; under a
    // directory only root may enter (as `cargo install` puts it under /root/.cargo/bin)
    // every worker exited 127 with nothing said ("worker failed to boot").
    needs_root!();
    let tmp = TempDir::new("closed-dir");
    let script = open_root(&tmp);
    let copy = readable_copy();
    let private = dir_with_mode(&tmp, "private", 0o700);
    let hidden = private.join("m0serve");
    std::fs::copy(&copy.bin, &hidden).unwrap();
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hidden = hidden.to_string_lossy().into_owned();
    let s = Server::builder("identity:application")
        .binary(&hidden)
        .apps_in(&copy.apps)
        .wrapped(&["unshare", "-m", "sh", &script])
        .args(&["--user", "nobody", "--workers", "2"])
        .start();
    let workers = s.wait_for_workers(2, Duration::from_secs(10));
    for pid in workers {
        assert_eq!(ids_of(pid).0, vec![NOBODY; 4], "worker {pid}");
    }
    let j = reported(&s, "/");
    assert_eq!(num(&j, &["now", "uid"]), f64::from(NOBODY), "{j:?}");
    assert!(
        s.log_text()
            .contains(&format!("user nobody cannot reach {hidden} by its path")),
        "{}",
        s.log_text()
    );
    // A reload starts its workers the same way.
    assert!(s.sighup_until_replaced(2, Duration::from_secs(20)));
    assert_eq!(num(&reported(&s, "/"), &["now", "uid"]), f64::from(NOBODY));
    drop(s);
    let out = run_as_nobody(Some(&script), &hidden, &copy.apps, &["--check-config"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("cannot reach") && err.contains("by its path"),
        "{:?}\n{err}",
        out.status
    );
}

#[test]
fn a_program_or_a_libpython_the_user_cannot_reach_is_refused_at_start_naming_it() {
    // The workers execute the program and load libpython as the user; one they could not
    // reach made every worker exit 127 with nothing said ("worker failed to boot"), and
    // --check-config passed.
    needs_root!();
    let tmp = TempDir::new("unreachable");
    let script = open_root(&tmp);
    let copy = readable_copy();
    // The program itself only root may execute, in a directory anyone may enter.
    let open_dir = dir_with_mode(&tmp, "open", 0o755);
    let hidden = open_dir.join("m0serve");
    std::fs::copy(&copy.bin, &hidden).unwrap();
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).unwrap();
    let hidden = hidden.to_string_lossy().into_owned();
    for extra in [&[][..], &["--check-config"][..]] {
        let out = run_as_nobody(Some(&script), &hidden, &copy.apps, extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains(&format!(
                    "the workers' program {hidden}: user nobody cannot run it"
                ))
                && !err.contains("failed to boot"),
            "{extra:?}: {:?}\n{err}",
            out.status
        );
    }
    // The program reachable, the libpython it links under /root, which only root may
    // enter (the real one: no namespace).
    let lib = std::process::Command::new("ldd")
        .arg(&copy.bin)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let lib = lib
        .lines()
        .filter(|l| l.contains("libpython"))
        .find_map(|l| {
            l.split("=>")
                .nth(1)?
                .split_whitespace()
                .next()
                .map(str::to_string)
        });
    let lib = lib.and_then(|l| std::fs::canonicalize(l).ok());
    let lib = lib.map(|l| l.to_string_lossy().into_owned());
    let Some(lib) = lib.filter(|l| l.starts_with("/root/")) else {
        require(
            false,
            "a standalone binary whose libpython is under /root (pyenv)",
        );
        return;
    };
    for extra in [&[][..], &["--check-config"][..]] {
        let out = run_as_nobody(None, &copy.bin, &copy.apps, extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains(&format!(
                    "the workers' libpython {lib}: user nobody cannot read it"
                )),
            "{extra:?}: {:?}\n{err}",
            out.status
        );
    }
}

#[test]
fn check_config_with_user_checks_what_the_user_can_read() {
    // Issue 40: the check ran as root, so a key or an app directory only root can read
    // passed it, and then the start failed.
    needs_root!();
    let tmp = TempDir::new("check-user");
    let script = open_root(&tmp);
    let copy = readable_copy();
    let private = dir_with_mode(&tmp, "private", 0o700);
    std::fs::copy(apps_dir().join("hello.py"), private.join("hello.py")).unwrap();
    let (cert, key) = (tmp.path.join("cert.pem"), tmp.path.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args([
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=x",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(made.status.success(), "{made:?}");
    std::fs::set_permissions(&cert, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let user = ["--user", "nobody"];

    let dir = private.to_str().unwrap();
    let o = check_as_root(
        &script,
        &copy,
        &[&["hello:app", "--app-dir", dir][..], &user].concat(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let says = format!("--app-dir {dir}: user nobody cannot use it: Permission denied");
    assert!(text(&o).contains(&says), "{}", text(&o));
    // Root alone may: the same check without --user passes.
    let o = check_as_root(&script, &copy, &["hello:app", "--app-dir", dir]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let tls = [
        "hello:app",
        "--certfile",
        cert.to_str().unwrap(),
        "--keyfile",
        key.to_str().unwrap(),
    ];
    let o = check_as_root(&script, &copy, &[&tls[..], &user].concat());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("as user nobody: --keyfile {}", key.display()))
            && text(&o).contains("Permission denied"),
        "{}",
        text(&o)
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = check_as_root(&script, &copy, &[&tls[..], &user].concat());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("as user nobody; would listen on https://"),
        "{}",
        text(&o)
    );

    // Another user cannot switch: the check says what it did not check, and passes.
    let o = std::process::Command::new("timeout")
        .args([
            "60",
            "unshare",
            "-m",
            "sh",
            &script,
            "setpriv",
            "--reuid=65534",
        ])
        .args(["--regid=65534", "--clear-groups", "--", &copy.bin])
        .args(["--check-config", "hello:app", "--user", "root"])
        .current_dir(&copy.apps)
        .output()
        .expect("cannot run the check");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("warning: --user/--group: checked as uid 65534, not as user root"),
        "{}",
        text(&o)
    );
}

#[test]
fn with_user_the_socket_is_the_users_the_app_cannot_signal_its_master_and_nothing_is_left() {
    // Issue 40: the Unix socket stayed root's 0755 (a proxy running as the user could not
    // connect), the pid file and the socket were left behind at exit (the master, as the
    // user, could not remove them from root's directory), and the app could signal its
    // master (the same uid).
    needs_root!();
    let tmp = TempDir::new("user-files");
    let script = open_root(&tmp);
    // A directory only root may write, as /run is.
    let run = dir_with_mode(&tmp, "run", 0o755);
    let (sock, pid_file) = (run.join("app.sock"), run.join("app.pid"));
    let copy = readable_copy();
    let mut s = builder_as_user("identity:application", &copy)
        .without_port_flag()
        .wrapped(&["unshare", "-m", "sh", &script])
        .args(&[
            "-b",
            &format!("unix:{}", sock.display()),
            "-b",
            "127.0.0.1:0",
            "--user",
            "nobody",
            "--uds-permissions",
            "660",
            "--pid-file",
            pid_file.to_str().unwrap(),
        ])
        .start();
    let meta = std::fs::metadata(&sock).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (meta.uid(), meta.gid()),
        (NOBODY, NOBODY),
        "the socket's owner"
    );
    assert_eq!(mode(&sock), 0o660, "the socket's mode");
    // A client running as the user connects.
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg("--unix-socket")
        .arg(&sock)
        .arg("http://localhost/")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The app, as the user, may not signal its master.
    let j = reported(&s, "/?signal-master");
    assert_eq!(
        j["signal_master"].as_str(),
        Some("PermissionError"),
        "{j:?}"
    );
    s.stop();
    assert!(
        !sock.exists() && !pid_file.exists(),
        "left behind: socket {}, pid file {}",
        sock.exists(),
        pid_file.exists()
    );
}
