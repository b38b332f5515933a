//! Client moves shared by the regression and inline-mode tests.

use super::*;

/// Closes the connection with a reset (SO_LINGER 0), as a client that gives up does.
pub fn reset(c: Conn) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt(2) on a descriptor `c` owns, with a pointer to a live `linger`
    // and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            c.stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER: {}", io::Error::last_os_error());
    drop(c);
}

/// Reads raw bytes from `c` until `needle` has been seen `n` times in all of them.
pub fn read_until_count(c: &mut Conn, needle: &[u8], n: usize, timeout: Duration) -> Vec<u8> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while count(&got, needle) < n {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "saw {needle:?} {} times of {n} within {timeout:?}: {:?}",
            count(&got, needle),
            show(&got)
        );
        c.stream.set_read_timeout(Some(left)).unwrap();
        match c.stream.read(&mut buf) {
            Ok(0) => panic!("the server closed the connection after {:?}", show(&got)),
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading after {:?}: {e}", show(&got)),
        }
    }
    got
}

pub fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// `GET target` on a fresh connection, answered within `within` (or an Err saying how not).
pub fn try_get(s: &Server, target: &str, within: Duration) -> Result<Response, String> {
    let mut c = s.connect();
    c.set_io_timeout(within);
    c.send(
        format!("GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    c.try_read_response()
        .map_err(|e| format!("GET {target}: {e:?}"))
}

/// Asserts a plain request on a new connection is answered within `within`.
pub fn assert_served(s: &Server, within: Duration, what: &str) {
    let t = Instant::now();
    match try_get(s, "/hello", within) {
        Ok(r) => assert_eq!(r.body_text(), "hello", "{what}: {}", r.status_line()),
        Err(e) => panic!(
            "{what}: a new request was not answered within {within:?} ({:?} waited): {e}",
            t.elapsed()
        ),
    }
}

/// Polls `f` every 20 ms until it is true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir {
    pub path: PathBuf,
}

static TEMP_COUNTER: AtomicUsize = AtomicUsize::new(0);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("m0serve-tests-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir { path }
    }

    /// A path inside the directory, as a string safe to put in a query string.
    pub fn file(&self, name: &str) -> String {
        let p = self.path.join(name).to_string_lossy().into_owned();
        assert!(
            p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b)),
            "temp path {p:?} has characters that need escaping in a query"
        );
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The file's contents, or "" if it does not exist (yet).
pub fn read_or_empty(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until the file at `path` contains `needle`; returns its contents.
pub fn wait_for_file_containing(
    path: &str,
    needle: &str,
    timeout: Duration,
) -> Result<String, String> {
    let mut last = String::new();
    if wait_until(timeout, || {
        last = read_or_empty(path);
        last.contains(needle)
    }) {
        Ok(last)
    } else {
        Err(last)
    }
}

/// Resident set size of a process, in KiB (from /proc/PID/status).
/// Resident memory of `pid` and all its descendants (the master and its workers), KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let own: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    own + child_pids(pid).into_iter().map(rss_kib).sum::<u64>()
}

/// [`rss_kib`] after `settle`, and again `window` later: what a server takes on over a
/// stretch in which nothing should grow it.
pub fn rss_kib_over(pid: u32, settle: Duration, window: Duration) -> (u64, u64) {
    std::thread::sleep(settle);
    let before = rss_kib(pid);
    std::thread::sleep(window);
    (before, rss_kib(pid))
}

/// The direct children of `pid` (for the server: its worker processes).
pub fn child_pids(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        out.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    out.sort_unstable();
    out
}

/// Whether process `pid` is a preloader (`--preload`): named so, or (in the moment after its
/// exec, before it names itself) started as one and still with one thread. The workers it
/// forks share the environment it was started with, but not its name, and serve with
/// threads.
pub fn is_preloader(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim_end() == "m0s-preloader" {
        return true;
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let started_as_one = environ
        .split(|&b| b == 0)
        .any(|e| e.starts_with(b"M0SERVE_INTERNAL_WORKER_FDS=") && e.ends_with(b",preload"));
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count());
    started_as_one && threads == 1
}

/// Deterministic pseudo-random bytes (an LCG), for garbage inputs.
pub fn pseudo_random(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}
