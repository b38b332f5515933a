//! The layering of src/, checked: which part of the crate may import which. The rules are
//! docs/architecture.md's ("The layers"); this reads every source file, finds each
//! `crate::` path outside its `#[cfg(test)]` module, and fails naming the file and line
//! of every import that breaks a rule.
//!
//! Parts: a folder of src/ (`sys`, `http`, `pipeline`, `wsgi`, `worker`, `master`) or a
//! file at its top (`log`, `python`, `access_log`, `metrics`, `config`, `cli`, `lib`,
//! `main`, `package`). Arrows point down; nothing imports upward.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What each part may import (besides itself).
fn allowed() -> BTreeMap<&'static str, &'static [&'static str]> {
    BTreeMap::from([
        // Layer 0: pure HTTP, the platform, the error log.
        ("http", &[][..]),
        ("sys", &["log"][..]),
        ("log", &["http"][..]),
        // Layer 1: what crosses threads.
        ("pipeline", &["http", "sys", "log"][..]),
        // Layer 2: what a worker's threads do with it.
        ("text", &[][..]),
        ("python", &["sys", "log", "text"][..]),
        ("access_log", &["http", "pipeline", "sys", "log"][..]),
        ("metrics", &["http", "pipeline", "sys", "log"][..]),
        // The TLS settings read into a rustls configuration (the records are the loop's).
        ("tls", &["sys", "log"][..]),
        // (Of `python`, beside it: the interpreter's helpers, such as formatting a
        // traceback, which the bridge shares with the start-up.)
        (
            "wsgi",
            &[
                "pipeline",
                "http",
                "sys",
                "log",
                "python",
                "access_log",
                "metrics",
            ][..],
        ),
        // Layer 3: the configuration, read by the entry points only.
        ("cli", &["log", "http", "access_log", "tls", "text"][..]),
        // (Of wsgi, only `proxy`: the trusted-proxy list it parses.)
        (
            "config",
            &[
                "cli",
                "log",
                "http",
                "sys",
                "python",
                "wsgi::proxy",
                "access_log",
                "tls",
            ][..],
        ),
        // Layer 4: the two process roles, which never import each other.
        (
            "worker",
            &[
                "config",
                "sys",
                "log",
                "http",
                "pipeline",
                "wsgi",
                "python",
                "access_log",
                "metrics",
                "tls",
            ][..],
        ),
        ("master", &["config", "sys", "log", "metrics"][..]),
        // Layer 5: the entry.
        (
            "lib",
            &[
                "config",
                "cli",
                "sys",
                "log",
                "http",
                "pipeline",
                "wsgi",
                "python",
                "access_log",
                "metrics",
                "tls",
                "worker",
                "master",
                "text",
            ][..],
        ),
        // The Python package's entry, beside main: it calls lib's and flushes Python's
        // streams before it ends the process.
        ("package", &["lib", "python"][..]),
        ("main", &["lib"][..]),
    ])
}

/// Files that may see the whole `Config`: the entry points (the preloader's is a worker's
/// start with the import done before the fork). Everything else takes its own small
/// options.
const CONFIG_READERS: &[&str] = &[
    "src/lib.rs",
    "src/master/mod.rs",
    "src/worker/mod.rs",
    "src/worker/preload.rs",
];

/// Parts that never touch Python (the master never runs the app; http, sys and the
/// lock-free core are plain Rust).
const NO_PYTHON: &[&str] = &["master", "http", "sys", "log", "cli", "config", "tls"];

fn part_of(file: &Path) -> String {
    let rel = file.strip_prefix("src").unwrap_or(file);
    let first = rel.iter().next().unwrap().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// The lines of `text` outside `#[cfg(test)]` modules, with their numbers.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut skip_depth: Option<i64> = None;
    let mut depth: i64 = 0;
    let mut pending_test = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if skip_depth.is_none() && t.starts_with("#[cfg(test)]") {
            pending_test = true;
            continue;
        }
        let opens = line.matches('{').count() as i64;
        let closes = line.matches('}').count() as i64;
        if pending_test
            && ["mod ", "pub mod ", "pub(crate) mod "]
                .iter()
                .any(|m| t.starts_with(m))
        {
            pending_test = false;
            if opens > closes {
                skip_depth = Some(depth);
            }
            depth += opens - closes;
            continue;
        }
        pending_test = false;
        depth += opens - closes;
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push((i + 1, line));
    }
    out
}

/// The `crate::` paths named on a line (`crate::{x, y}` groups are not used in src/).
fn crate_refs(line: &str) -> Vec<String> {
    let mut refs = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        let path: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        if !path.is_empty() {
            refs.push(path.trim_end_matches(':').to_string());
        }
        rest = after;
    }
    refs
}

/// `path` (`a::b::c`) is in part `entry`, or under the module `entry` names (`a::b`).
fn within(path: &str, entry: &str) -> bool {
    path == entry || path.starts_with(&format!("{entry}::"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every import in `src` that breaks the rules, as `file:line: why`.
fn violations(root: &Path) -> Vec<String> {
    let allowed = allowed();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut bad = Vec::new();
    for file in files {
        let rel = file.strip_prefix(root).unwrap().to_path_buf();
        let part = part_of(&rel);
        let text = std::fs::read_to_string(&file).unwrap();
        let rel_s = rel.display().to_string();
        let Some(may) = allowed.get(part.as_str()) else {
            bad.push(format!("{rel_s}: part `{part}` has no layering rule"));
            continue;
        };
        for (n, line) in code_lines(&text) {
            for path in crate_refs(line) {
                if within(&path, &part) {
                    continue;
                }
                let to = path.split("::").next().unwrap_or_default();
                // A path whose first name is no part is an item of lib.rs (`crate::Host`).
                let to = if allowed.contains_key(to) { to } else { "lib" };
                if !may
                    .iter()
                    .any(|entry| within(&path, entry) || (*entry == "lib" && to == "lib"))
                {
                    bad.push(format!(
                        "{rel_s}:{n}: `{part}` may not import `{to}`: {}",
                        line.trim()
                    ));
                }
                if to == "config" && !CONFIG_READERS.contains(&rel_s.as_str()) {
                    bad.push(format!(
                        "{rel_s}:{n}: only the entry points see `Config` (take an options struct): {}",
                        line.trim()
                    ));
                }
            }
            if NO_PYTHON.contains(&part.as_str()) && line.contains("pyo3::") {
                bad.push(format!(
                    "{rel_s}:{n}: `{part}` never touches Python: {}",
                    line.trim()
                ));
            }
            if rel_s.starts_with("src/worker/event_loop/") && line.contains("crate::wsgi") {
                bad.push(format!(
                    "{rel_s}:{n}: the loop reaches the bridge only through worker/inline.rs: {}",
                    line.trim()
                ));
            }
        }
    }
    bad
}

#[test]
fn every_import_follows_the_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bad = violations(root);
    assert!(
        bad.is_empty(),
        "{} layering violation(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn the_check_finds_a_wrong_import() {
    // A copy of src/ with one import that goes upward must fail, naming it.
    let root = std::env::temp_dir().join(format!("m0s-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("src/http")).unwrap();
    std::fs::write(
        root.join("src/http/mod.rs"),
        "//! x\nuse crate::worker::conn::Conn;\n#[cfg(test)]\nmod tests {\n    use crate::worker::x;\n}\n",
    )
    .unwrap();
    // An item of lib.rs, named from below it.
    std::fs::write(root.join("src/http/date.rs"), "use crate::Host;\n").unwrap();
    // The loop naming the bridge (allowed to worker/ as a whole, but not to the loop).
    std::fs::create_dir_all(root.join("src/worker/event_loop")).unwrap();
    std::fs::write(
        root.join("src/worker/event_loop/link.rs"),
        "use crate::wsgi::Bridge;\n",
    )
    .unwrap();
    std::fs::write(root.join("src/lib.rs"), "//! x\npub mod http;\n").unwrap();
    let bad = violations(&root);
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(
        bad[0].starts_with("src/http/date.rs:1: `http` may not import `lib`"),
        "{bad:?}"
    );
    assert!(
        bad[1].starts_with("src/http/mod.rs:2: `http` may not import `worker`"),
        "{bad:?}"
    );
    assert!(
        bad[2].starts_with(
            "src/worker/event_loop/link.rs:1: the loop reaches the bridge only through"
        ),
        "{bad:?}"
    );
}

#[test]
fn the_module_table_in_docs_architecture_md_lists_every_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let missing: Vec<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(root.join("src"))
                .unwrap()
                .display()
                .to_string()
        })
        .filter(|f| !doc.contains(&format!("| `{f}`")) && !doc.contains(&format!(", `{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's module table lacks: {missing:?}"
    );
}

/// The event loop's own size (issue 41's targets): `EventLoop` holds at most 15 parts and
/// its file is at most 700 lines. (No function over 80 lines and no block nested deeper
/// than 4 are clippy's to check: clippy.toml, and the lints the loop's modules turn on.)
#[test]
fn the_event_loop_stays_made_of_parts() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(root.join("src/worker/event_loop/mod.rs")).unwrap();
    let lines = src.lines().count();
    assert!(
        lines <= 700,
        "event_loop/mod.rs has {lines} lines (at most 700)"
    );
    let body = src
        .split("pub(crate) struct EventLoop {")
        .nth(1)
        .and_then(|rest| rest.split("\n}").next())
        .expect("event_loop/mod.rs defines `pub(crate) struct EventLoop { ... }`");
    let fields: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && l.contains(':') && l.ends_with(','))
        .collect();
    assert!(!fields.is_empty(), "no fields found: the check is broken");
    assert!(
        fields.len() <= 15,
        "EventLoop has {} fields (at most 15): {fields:?}",
        fields.len()
    );
    for file in [
        "src/worker/event_loop/mod.rs",
        "src/worker/conn.rs",
        "src/worker/placer.rs",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(
            text.contains("#![warn(clippy::too_many_lines, clippy::excessive_nesting)]"),
            "{file} no longer turns on the shape's lints"
        );
    }
}
