//! `--reload` (development): the master watches the `.py` files under `--app-dir` with
//! inotify and starts a rolling reload (as on SIGHUP) once changes have been quiet for
//! [`DEBOUNCE`], so an editor's burst of writes, or a `git checkout`, restarts once.
//!
//! Not watched: hidden files and directories (`.git`, `.venv`, an editor's `.#app.py`),
//! `__pycache__`, `node_modules`, virtualenvs (a directory with a `pyvenv.cfg`, also one
//! made while the server runs), and whatever matches a `--reload-ignore` glob (matched
//! with fnmatch(3) against the path relative to the app directory and against the file's
//! name). Directories created later are watched as they appear; one that is removed or
//! moved out counts as a change. Symbolic links to directories are not followed. A steady
//! stream of changes reloads at the latest [`MAX_DELAY`] after the first. A new file counts
//! once written and closed. Edits made through a symbolic link to a file outside the tree
//! are not seen (inotify reports the link's directory, not the target's).

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use crate::log;

/// Quiet time after the last change before the reload starts.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(300);

/// Longest a stream of changes (a code generator writing on and on) postpones the reload.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(3);

/// Most directories watched; past it, deeper ones are left out (with a warning). The tree
/// is walked breadth first, so what is left out is the deepest.
const MAX_WATCHES: usize = 8192;

const DIR_EVENTS: WatchMask = WatchMask::CLOSE_WRITE
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::CREATE)
    .union(WatchMask::DELETE)
    .union(WatchMask::ONLYDIR);

/// A change waiting for its quiet time.
struct Pending {
    /// The first file (or directory) changed since the last reload, for the log.
    path: PathBuf,
    first: Instant,
    last: Instant,
}

pub(crate) struct Watcher {
    /// Non-blocking, close-on-exec.
    inotify: Inotify,
    root: PathBuf,
    ignore: Vec<CString>,
    /// Watch descriptor -> its directory.
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// Watched directories known to have held a source file: moving one of them out of
    /// the tree is a change; moving out a directory of assets is not.
    with_sources: std::collections::HashSet<PathBuf>,
    changed: Option<Pending>,
    warned_full: bool,
}

impl Watcher {
    pub(crate) fn new(root: &Path, ignore: &[String]) -> io::Result<Watcher> {
        let ignore = ignore
            .iter()
            .map(|p| CString::new(p.as_str()).map_err(|_| io::Error::other("a NUL byte")))
            .collect::<io::Result<Vec<_>>>()?;
        let mut w = Watcher {
            inotify: Inotify::init()?,
            root: root.to_path_buf(),
            ignore,
            dirs: HashMap::new(),
            with_sources: std::collections::HashSet::new(),
            changed: None,
            warned_full: false,
        };
        w.watch_tree(root)?;
        Ok(w)
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.inotify.as_raw_fd()
    }

    /// How many directories are watched.
    pub(crate) fn watched(&self) -> usize {
        self.dirs.len()
    }

    /// `path` (under the root) is left out by a `--reload-ignore` pattern.
    fn ignored(&self, path: &Path) -> bool {
        if self.ignore.is_empty() {
            return false;
        }
        let rel = path.strip_prefix(&self.root).unwrap_or(path);
        let name = path.file_name().unwrap_or_default();
        let (Ok(rel), Ok(name)) = (
            CString::new(rel.as_os_str().as_bytes()),
            CString::new(name.as_bytes()),
        ) else {
            return true;
        };
        self.ignore.iter().any(|p| {
            [&rel, &name].iter().any(|s| {
                // SAFETY: both are valid NUL-terminated strings for the call.
                unsafe { libc::fnmatch(p.as_ptr(), s.as_ptr(), 0) == 0 }
            })
        })
    }

    fn skip_dir(&self, dir: &Path) -> bool {
        let name = dir.file_name().unwrap_or_default().as_bytes();
        (dir != self.root
            && (name.starts_with(b".")
                || name == b"__pycache__"
                || name == b"node_modules"
                || dir.join("pyvenv.cfg").exists()))
            || self.ignored(dir)
    }

    /// `path` lies in a virtualenv under the root (one made after its directories were
    /// watched: `python -m venv` writes `pyvenv.cfg` last).
    fn in_venv(&self, path: &Path) -> bool {
        path.ancestors()
            .skip(1)
            .take_while(|a| *a != self.root && a.starts_with(&self.root))
            .any(|a| a.join("pyvenv.cfg").exists())
    }

    /// A file that may hold the app's code: `.py`, not hidden (an editor's lock file
    /// such as `.#app.py`), not ignored, not in a virtualenv.
    fn is_source(&self, path: &Path) -> bool {
        path.extension() == Some(OsStr::new("py"))
            && !path
                .file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b"."))
            && !self.ignored(path)
            && !self.in_venv(path)
    }

    /// Watches `top` and every directory under it (not the skipped ones), breadth first;
    /// the first source file it saw (for a directory that just appeared, whose files may
    /// have been written before its watch was in place).
    fn watch_tree(&mut self, top: &Path) -> io::Result<Option<PathBuf>> {
        let mut first = None;
        let mut queue = std::collections::VecDeque::from([top.to_path_buf()]);
        while let Some(dir) = queue.pop_front() {
            if self.skip_dir(&dir) {
                continue;
            }
            if self.dirs.len() >= MAX_WATCHES {
                if !std::mem::replace(&mut self.warned_full, true) {
                    log::warning!(
                        "--reload: more than {MAX_WATCHES} directories; {} and others are not \
                         watched",
                        dir.display()
                    );
                }
                return Ok(first);
            }
            let wd = match self.inotify.watches().add(&dir, DIR_EVENTS) {
                Ok(wd) => wd,
                Err(e) if dir == self.root => return Err(e),
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    if !std::mem::replace(&mut self.warned_full, true) {
                        log::warning!(
                            "--reload: the kernel's inotify watch limit is reached \
                             (fs.inotify.max_user_watches): {} and others are not watched",
                            dir.display()
                        );
                    }
                    return Ok(first);
                }
                Err(e) => {
                    // Gone already, or unreadable: nothing to watch there.
                    log::debug!("--reload: not watching {}: {e}", dir.display());
                    continue;
                }
            };
            self.dirs.insert(wd, dir.clone());
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                // Symbolic links are not followed (a link to `/` would watch everything).
                match e.file_type() {
                    Ok(t) if t.is_dir() => queue.push_back(e.path()),
                    Ok(t) if t.is_file() && self.is_source(&e.path()) => {
                        self.with_sources.insert(dir.clone());
                        first.get_or_insert_with(|| e.path());
                    }
                    _ => {}
                }
            }
        }
        Ok(first)
    }

    /// Stops watching `dir` and everything under it; whether any of it held sources.
    fn unwatch_under(&mut self, dir: &Path) -> bool {
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, d)| d.starts_with(dir))
            .map(|(wd, _)| wd.clone())
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            // One the kernel already dropped (a deleted directory) fails harmlessly with
            // EINVAL.
            let _ = self.inotify.watches().remove(wd);
        }
        let before = self.with_sources.len();
        self.with_sources.retain(|d| !d.starts_with(dir));
        self.with_sources.len() < before
    }

    /// Reads what the kernel queued (never waits): notes source changes, follows
    /// directories that come and go.
    pub(crate) fn read(&mut self, now: Instant) {
        let mut buf = [0u8; 8192];
        // Until the queue is empty (WouldBlock) or the descriptor fails.
        while let Ok(events) = self.inotify.read_events(&mut buf) {
            // The events borrow `buf`, not `self`.
            for e in events {
                let name = e.name.map_or(&b""[..], |n| n.as_bytes());
                self.on_event(e.wd, e.mask, name, now);
            }
        }
    }

    fn on_event(&mut self, wd: WatchDescriptor, mask: EventMask, name: &[u8], now: Instant) {
        if mask.contains(EventMask::Q_OVERFLOW) {
            // Events were lost: something changed; watch what may have appeared meanwhile.
            let root = self.root.clone();
            let _ = self.watch_tree(&root);
            self.note(root, now);
            return;
        }
        if mask.contains(EventMask::IGNORED) {
            self.dirs.remove(&wd);
            return;
        }
        let Some(dir) = self.dirs.get(&wd) else {
            return;
        };
        let path = dir.join(OsStr::from_bytes(name));
        if name == b"pyvenv.cfg" && !mask.contains(EventMask::ISDIR) {
            // A virtualenv is being made here: stop watching it (pip installs into it
            // would reload on and on), unless it is the app directory itself.
            let dir = dir.clone();
            if dir != self.root && mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                self.unwatch_under(&dir);
            }
            return;
        }
        if mask.contains(EventMask::ISDIR) {
            if name.starts_with(b".") {
                return;
            }
            if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                // A new directory: watch it, and count the sources it already holds
                // (written before the watch was in place) as a change.
                if let Ok(Some(file)) = self.watch_tree(&path) {
                    self.note(file, now);
                }
            } else if mask.contains(EventMask::MOVED_FROM) {
                // Moved out (or renamed: its new name comes as IN_MOVED_TO): its watches
                // must not report from where it went, and its modules are gone from here.
                // (A deleted directory needs nothing: its files' deletions were reported,
                // and its watches were dropped by the kernel.)
                if self.unwatch_under(&path) {
                    self.note(path, now);
                }
            }
            return;
        }
        // A file just created is still being written: its IN_CLOSE_WRITE follows. Only a
        // symbolic link (or a hard link) arrives complete with IN_CREATE alone.
        if mask.contains(EventMask::CREATE)
            && std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.nlink() == 1)
        {
            return;
        }
        if self.is_source(&path) {
            if let Some(parent) = path.parent() {
                self.with_sources.insert(parent.to_path_buf());
            }
            self.note(path, now);
        }
    }

    fn note(&mut self, path: PathBuf, now: Instant) {
        match &mut self.changed {
            Some(p) => p.last = now,
            None => {
                self.changed = Some(Pending {
                    path,
                    first: now,
                    last: now,
                })
            }
        }
    }

    /// When a pending change's quiet time ends (or it has waited long enough).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.changed
            .as_ref()
            .map(|p| (p.last + DEBOUNCE).min(p.first + MAX_DELAY))
    }

    /// The first changed path, once the changes have been quiet for `DEBOUNCE` (or have
    /// gone on for `MAX_DELAY`).
    pub(crate) fn due(&mut self, now: Instant) -> Option<PathBuf> {
        if self.deadline().is_some_and(|d| now >= d) {
            return self.changed.take().map(|p| p.path);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "m0s-reload-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Reads events until one is due or a second passes.
    fn settle(w: &mut Watcher) -> Option<PathBuf> {
        let end = Instant::now() + Duration::from_secs(1);
        while Instant::now() < end {
            w.read(Instant::now());
            if let Some(p) = w.due(Instant::now()) {
                return Some(p);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    #[test]
    fn python_changes_are_seen_once_quiet_others_are_not() {
        let root = scratch();
        std::fs::create_dir_all(root.join("pkg")).unwrap();
        std::fs::create_dir_all(root.join("__pycache__")).unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        let mut w = Watcher::new(&root, &["tests/*".into(), "*_local.py".into()]).unwrap();
        assert_eq!(w.watched(), 3, "root, pkg and tests (pycache skipped)");

        std::fs::write(root.join("notes.txt"), "x").unwrap();
        std::fs::write(root.join("tests/test_x.py"), "x").unwrap();
        std::fs::write(root.join("settings_local.py"), "x").unwrap();
        std::fs::write(root.join("__pycache__/m.py"), "x").unwrap();
        assert_eq!(settle(&mut w), None);

        // A burst of writes: one change, reported after the quiet time.
        for i in 0..5 {
            std::fs::write(root.join("pkg/mod.py"), format!("v = {i}")).unwrap();
        }
        w.read(Instant::now());
        assert_eq!(w.due(Instant::now()), None, "not before the quiet time");
        assert_eq!(settle(&mut w), Some(root.join("pkg/mod.py")));
        assert_eq!(settle(&mut w), None);

        // A directory created later is watched.
        std::fs::create_dir_all(root.join("newpkg")).unwrap();
        std::fs::write(root.join("newpkg/a.py"), "x").unwrap();
        assert!(settle(&mut w).is_some());
        std::fs::write(root.join("newpkg/a.py"), "y").unwrap();
        assert_eq!(settle(&mut w), Some(root.join("newpkg/a.py")));

        // An editor's hidden lock file is no source.
        std::fs::write(root.join(".#mod.py"), "x").unwrap();
        assert_eq!(settle(&mut w), None);

        // A virtualenv made after the start (`python -m venv` writes pyvenv.cfg after its
        // directories): nothing in it counts, then or later.
        std::fs::create_dir_all(root.join("venv/lib/site-packages")).unwrap();
        std::fs::write(root.join("venv/pyvenv.cfg"), "home = /usr\n").unwrap();
        std::fs::write(root.join("venv/lib/site-packages/pkg.py"), "x").unwrap();
        assert_eq!(settle(&mut w), None);
        std::fs::write(root.join("venv/lib/site-packages/pkg.py"), "y").unwrap();
        assert_eq!(settle(&mut w), None);

        // A package moved out of the tree is a change; its new home is not watched.
        let away = root.with_extension("away");
        let _ = std::fs::remove_dir_all(&away);
        std::fs::rename(root.join("newpkg"), &away).unwrap();
        assert_eq!(settle(&mut w), Some(root.join("newpkg")));
        std::fs::write(away.join("a.py"), "z").unwrap();
        assert_eq!(settle(&mut w), None);
        let _ = std::fs::remove_dir_all(&away);

        // A directory of assets moved out is no change.
        std::fs::create_dir_all(root.join("static")).unwrap();
        std::fs::write(root.join("static/site.css"), "x").unwrap();
        assert_eq!(settle(&mut w), None);
        std::fs::rename(root.join("static"), &away).unwrap();
        assert_eq!(settle(&mut w), None);
        let _ = std::fs::remove_dir_all(&away);

        // A file being written is reported once, when it is closed.
        {
            use std::io::Write;
            let mut f = std::fs::File::create(root.join("slow.py")).unwrap();
            std::thread::sleep(DEBOUNCE * 2);
            w.read(Instant::now());
            assert_eq!(w.deadline(), None, "not while it is still open");
            f.write_all(b"x = 1\n").unwrap();
        }
        assert_eq!(settle(&mut w), Some(root.join("slow.py")));
        let _ = std::fs::remove_dir_all(&root);
    }
}
