//! Tests that need something a machine may lack (a tool, root, the virtualenvs
//! scripts/test.sh makes, the gunicorn corpus beside the checkout): how one that cannot
//! run says so. Standalone (std only): src/http/tests.rs includes this file too.

use std::io::Write;

/// Whether a test's requirement is met. When it is not, the test is skipped: the caller
/// returns at once, as in
///
/// ```ignore
/// if !require(nginx.is_some(), "nginx (apt-get install nginx-light)") {
///     return;
/// }
/// ```
///
/// The test runner still counts a skipped test as passed (libtest has no skip decided at
/// run time), so a skip is made visible instead:
///
/// - `SKIPPED: <test>: needs <what>` on stderr;
/// - the same line appended to the file `M0S_SKIP_LOG` names, if set: scripts/test.sh
///   points it at target/skipped-tests.txt and ends with the list and its count;
/// - and where every test must run, a failure naming what is missing instead of a skip:
///   with `M0S_REQUIRE_ALL=1` (.ci/run sets it) or `CI=true`.
pub fn require(met: bool, what: &str) -> bool {
    met || skip(what, false)
}

/// As [`require`], for what even CI may lack by design (the gunicorn request corpus,
/// which lives outside the repository): a skip that is printed and recorded, never a
/// failure.
pub fn require_or_skip_in_ci(met: bool, what: &str) -> bool {
    met || skip(what, true)
}

/// Whether every test must run here (CI).
pub fn all_required() -> bool {
    match std::env::var("M0S_REQUIRE_ALL") {
        Ok(v) if !v.is_empty() => v != "0",
        _ => std::env::var("CI").is_ok_and(|v| v == "true"),
    }
}

fn skip(what: &str, allowed_in_ci: bool) -> bool {
    let thread = std::thread::current();
    let test = format!(
        "{}::{}",
        env!("CARGO_CRATE_NAME"),
        thread.name().unwrap_or("?")
    );
    if all_required() && !allowed_in_ci {
        panic!(
            "{test} cannot run: it needs {what}; every test must run here \
             (M0S_REQUIRE_ALL=1 or CI=true)"
        );
    }
    let line = format!(
        "SKIPPED: {test}: needs {what}{}",
        if allowed_in_ci {
            " (a skip allowed in CI)"
        } else {
            ""
        }
    );
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("M0S_SKIP_LOG").filter(|l| !l.is_empty()) {
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = written {
            panic!("cannot record the skip in M0S_SKIP_LOG={log:?}: {e}");
        }
    }
    false
}
