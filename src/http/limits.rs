//! The limits on what a client may send, and how long it may take: the server's policy,
//! as plain values the parser and the loop are given (the flags fill them in).

use std::time::Duration;

/// Hard cap on `Limits::max_headers`: the size of the stack array httparse fills
/// (256 slots × 32 bytes = 8 KiB of stack, left uninitialised). Also keeps header indices
/// within `u16`.
pub(crate) const MAX_HEADERS_CAP: usize = 256;
/// Default `Limits::max_request_line`, in bytes without the CRLF: gunicorn's and nginx's
/// 8 KiB line buffers (RFC 9112 §3: recommends at least 8000 octets).
pub(crate) const DEFAULT_MAX_REQUEST_LINE_BYTES: usize = 8190;
/// Default `Limits::max_head`, in bytes including the blank line.
pub(crate) const DEFAULT_MAX_HEAD_BYTES: usize = 64 * 1024;
/// Default `Limits::max_headers`, in header field lines (gunicorn's `limit_request_fields`).
pub(crate) const DEFAULT_MAX_HEADERS: usize = 100;
const _: () = assert!(DEFAULT_MAX_HEADERS <= MAX_HEADERS_CAP);
/// Size limits on a request head. Each one answers with its own status: 414, 431, 431.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line, in bytes without its CRLF (-> 414).
    pub max_request_line: usize,
    /// Longest head, in bytes, leading empty lines and the final blank line included (-> 431).
    pub max_head: usize,
    /// Most header field lines (-> 431); values above `MAX_HEADERS_CAP` act as the cap.
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: DEFAULT_MAX_REQUEST_LINE_BYTES,
            max_head: DEFAULT_MAX_HEAD_BYTES,
            max_headers: DEFAULT_MAX_HEADERS,
        }
    }
}

/// The per-connection timeouts (docs/security.md).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub(crate) header: Duration,
    pub(crate) keep_alive: Duration,
    pub(crate) body: Duration,
    /// `--body-min-rate`, bytes per second (0: none).
    pub(crate) body_min_rate: u64,
    pub(crate) write: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header: Duration::from_secs(10),
            keep_alive: Duration::from_secs(5),
            body: Duration::from_secs(30),
            body_min_rate: 1024,
            write: Duration::from_secs(30),
        }
    }
}
