//! Captured output.

use super::*;

/// A growing byte buffer filled by a drain thread, with a condvar to wait on.
#[derive(Clone, Default)]
pub struct Captured {
    inner: Arc<(Mutex<CapturedState>, Condvar)>,
}

#[derive(Default)]
struct CapturedState {
    bytes: Vec<u8>,
    eof: bool,
}

impl Captured {
    pub(super) fn drain_from<R: Read + Send + 'static>(mut r: R) -> Captured {
        let cap = Captured::default();
        let c2 = cap.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let (m, cv) = &*c2.inner;
                        m.lock().unwrap().bytes.extend_from_slice(&buf[..n]);
                        cv.notify_all();
                    }
                }
            }
            let (m, cv) = &*c2.inner;
            m.lock().unwrap().eof = true;
            cv.notify_all();
        });
        cap
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.inner.0.lock().unwrap().bytes).into_owned()
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
