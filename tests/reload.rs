//! `--reload`: an edited module is picked up by a rolling restart; files that are not
//! `.py`, or that match `--reload-ignore`, are not; an edit that breaks the import leaves
//! the old workers serving until the next edit fixes it.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

/// The app answers `version`; each version is a different length, so nothing could be
/// mistaken for an unchanged file.
fn write_app(dir: &Path, version: &str) {
    std::fs::write(
        dir.join("live.py"),
        format!(
            "import helper\n\
             def app(environ, start_response):\n\
             \x20   body = ({version:?} + helper.SUFFIX).encode()\n\
             \x20   start_response('200 OK', [('Content-Length', str(len(body)))])\n\
             \x20   return [body]\n"
        ),
    )
    .unwrap();
}

fn body(server: &Server) -> String {
    server.get("/").body_text()
}

fn wait_for_body(server: &Server, want: &str) {
    let mut last = String::new();
    let ok = wait_until(Duration::from_secs(15), || {
        last = body(server);
        last == want
    });
    assert!(ok, "wanted {want:?}, still {last:?}\n{}", server.log_text());
}

#[test]
fn an_edited_module_is_served_after_a_reload() {
    let tmp = TempDir::new("reload");
    let dir = tmp.path.clone();
    std::fs::create_dir_all(dir.join("pkg")).unwrap();
    std::fs::write(dir.join("helper.py"), "SUFFIX = ''\n").unwrap();
    write_app(&dir, "v1");
    let server = Server::builder("live:app")
        .without_app_dir_flag()
        .args(&["--app-dir", dir.to_str().unwrap()])
        .args(&[
            "--reload",
            "--reload-ignore",
            "scratch_*.py,pkg/generated/*",
        ])
        .start();
    assert_eq!(body(&server), "v1");

    // An edit to the app module.
    write_app(&dir, "v22");
    wait_for_body(&server, "v22");
    assert!(
        server.wait_for_log("live.py changed", Duration::from_secs(5)),
        "{}",
        server.log_text()
    );
    // An edit to a module it imports.
    std::fs::write(dir.join("helper.py"), "SUFFIX = '+h'\n").unwrap();
    wait_for_body(&server, "v22+h");
    let reloads = |s: &Server| s.log_text().matches("changed: starting").count();
    assert_eq!(reloads(&server), 2, "{}", server.log_text());

    // Not Python, ignored by a pattern (by name, and by path), or in __pycache__: no reload.
    std::fs::write(dir.join("notes.txt"), "x").unwrap();
    std::fs::write(dir.join("scratch_1.py"), "x = 1\n").unwrap();
    std::fs::create_dir_all(dir.join("pkg/generated")).unwrap();
    std::fs::write(dir.join("pkg/generated/out.py"), "x = 1\n").unwrap();
    std::fs::create_dir_all(dir.join("__pycache__")).unwrap();
    std::fs::write(dir.join("__pycache__/x.py"), "x = 1\n").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(reloads(&server), 2, "{}", server.log_text());

    // A broken edit: the new workers fail to import, the old ones keep serving.
    std::fs::write(dir.join("live.py"), "def app(:\n").unwrap();
    assert!(
        server.wait_for_log("SyntaxError", Duration::from_secs(10)),
        "{}",
        server.log_text()
    );
    assert_eq!(body(&server), "v22+h");
    // One failed boot, one traceback: no worker starts again until the next change.
    std::thread::sleep(Duration::from_secs(3));
    let log = server.log_text();
    assert_eq!(log.matches("failed to boot").count(), 1, "{log}");
    assert_eq!(
        log.matches("waiting for a change under").count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("SyntaxError: ").count(),
        2,
        "the traceback's last line and the error line, once each:\n{log}"
    );
    assert_eq!(body(&server), "v22+h", "the old workers still serve");
    // The fix is picked up at once.
    let fixed = std::time::Instant::now();
    write_app(&dir, "v333");
    wait_for_body(&server, "v333+h");
    assert!(
        fixed.elapsed() < Duration::from_secs(5),
        "the fix took {:?}: the reload waited out the boot backoff\n{}",
        fixed.elapsed(),
        server.log_text()
    );
    server.assert_no_panic();
    drop(server);
}

#[test]
fn an_app_broken_at_start_waits_for_the_fix_instead_of_exiting() {
    let tmp = TempDir::new("reload-broken-start");
    let dir = tmp.path.clone();
    std::fs::write(dir.join("helper.py"), "SUFFIX = ''\n").unwrap();
    std::fs::write(dir.join("live.py"), "def app(:\n").unwrap();
    let builder = Server::builder("live:app").without_app_dir_flag().args(&[
        "--app-dir",
        dir.to_str().unwrap(),
        "--reload",
    ]);
    // The fix comes two seconds after the start; until then the master waits.
    let fixer = {
        let dir = dir.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            write_app(&dir, "fixed");
        })
    };
    let server = builder.start();
    fixer.join().unwrap();
    assert_eq!(body(&server), "fixed");
    let log = server.log_text();
    assert_eq!(log.matches("failed to boot").count(), 1, "{log}");
    assert_eq!(
        log.matches("SyntaxError: ").count(),
        2,
        "the traceback and the error line, once:\n{log}"
    );
    server.assert_no_panic();
}
