//! Captured output.

use super::*;

/// A growing byte buffer filled by a drain thread, with a condvar to wait on.
///
/// What a reader sees is everything the process wrote before the read: `text` first waits
/// (briefly) for the drain thread to take what is still in the pipe. A server writes a log
/// line before it closes a connection, so a test that saw the close and then reads the log
/// finds the line, however far behind the drain thread was scheduled.
#[derive(Clone)]
pub struct Captured {
    inner: Arc<(Mutex<CapturedState>, Condvar)>,
}

#[derive(Default)]
struct CapturedState {
    bytes: Vec<u8>,
    eof: bool,
    /// The drain thread is waiting for the pipe to turn readable, having appended
    /// everything it read before. Set and cleared under the lock.
    idle: bool,
    /// The pipe's read end; open while `eof` is false (the drain thread closes it only
    /// after setting `eof`, under the lock).
    fd: i32,
}

/// How long `text` waits at most for the drain thread to catch up (a process that writes
/// without pause never leaves the pipe empty).
const CATCH_UP: Duration = Duration::from_secs(2);

impl Captured {
    pub(super) fn drain_from<R: Read + AsRawFd + Send + 'static>(mut r: R) -> Captured {
        let state = CapturedState {
            fd: r.as_raw_fd(),
            ..CapturedState::default()
        };
        let cap = Captured {
            inner: Arc::new((Mutex::new(state), Condvar::new())),
        };
        let c2 = cap.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            let (m, cv) = &*c2.inner;
            loop {
                m.lock().unwrap().idle = true;
                cv.notify_all();
                let mut pfd = libc::pollfd {
                    fd: r.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, owned by this frame, for the call's length.
                let polled = unsafe { libc::poll(&mut pfd, 1, -1) };
                if polled < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                m.lock().unwrap().idle = false;
                match r.read(&mut buf) {
                    Ok(0) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                    Ok(n) => {
                        m.lock().unwrap().bytes.extend_from_slice(&buf[..n]);
                        cv.notify_all();
                    }
                }
            }
            m.lock().unwrap().eof = true;
            cv.notify_all();
            drop(r);
        });
        cap
    }

    /// Everything the process has written so far.
    pub fn text(&self) -> String {
        let deadline = Instant::now() + CATCH_UP;
        let (m, cv) = &*self.inner;
        let mut g = m.lock().unwrap();
        // At the end of the stream, or the drain thread waiting with nothing left unread.
        let caught_up = |g: &CapturedState| g.eof || (g.idle && unread(g.fd) == 0);
        while !caught_up(&g) && Instant::now() < deadline {
            g = cv.wait_timeout(g, Duration::from_millis(5)).unwrap().0;
        }
        String::from_utf8_lossy(&g.bytes).into_owned()
    }

    pub fn at_eof(&self) -> bool {
        self.inner.0.lock().unwrap().eof
    }

    /// Waits until `f(text)` returns Some, the stream ends, or the timeout passes.
    pub fn wait_for<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&str) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.inner;
        let mut g = m.lock().unwrap();
        loop {
            let text = String::from_utf8_lossy(&g.bytes);
            if let Some(v) = f(&text) {
                return Some(v);
            }
            if g.eof {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let wait = (deadline - now).min(Duration::from_millis(100));
            g = cv.wait_timeout(g, wait).unwrap().0;
        }
    }

    /// Waits until the stream ends (the process closed it), up to the timeout.
    pub fn wait_eof(&self, timeout: Duration) -> bool {
        self.wait_for(timeout, |_| None::<()>);
        self.at_eof()
    }
}

/// Bytes waiting in the pipe `fd` (0 if that cannot be asked).
fn unread(fd: i32) -> libc::c_int {
    let mut n: libc::c_int = 0;
    // SAFETY: `fd` is open (the caller holds the lock and saw `eof` false, and the drain
    // thread closes it only after setting `eof`); FIONREAD writes one c_int to `n`.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } < 0 {
        return 0;
    }
    n
}
