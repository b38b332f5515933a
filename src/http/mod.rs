//! HTTP/1.1 as pure functions over byte slices.
//!
//! The loop thread uses [`parse`] (request head -> spans and framing) and [`body`] (chunked
//! decoding); the handler threads use [`encode`] (response head and chunked framing),
//! [`date`] (the `Date` header, rendered once a second per thread) and [`percent`]
//! (`PATH_INFO` decoding). Nothing here does I/O, allocates per header, or panics on any
//! input; each module cites the RFC 9112 / RFC 9110 section at the branch that implements it.

pub(crate) mod body;
pub(crate) mod date;
pub(crate) mod encode;
pub(crate) mod limits;
pub(crate) mod parse;
pub(crate) mod percent;
pub mod proxy_protocol;
pub mod static_files;
pub(crate) mod trusted;

#[cfg(test)]
mod tests;

/// RFC 9110 §5.6.2 `tchar`, as a table: the hot loops (trailer names, chunk-extension
/// names, response header names) look a byte up instead of running a chain of compares.
static TCHAR: [bool; 256] = byte_class(b"!#$%&'*+-.^_`|~");

/// A byte-class table: ASCII letters and digits plus `extra`. Built at compile time, so a
/// hot loop looks a byte up instead of running a chain of compares.
pub(crate) const fn byte_class(extra: &[u8]) -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0usize;
    while b < 256 {
        t[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut i = 0;
    while i < extra.len() {
        t[extra[i] as usize] = true;
        i += 1;
    }
    t
}

/// RFC 9110 §5.6.2: `tchar`.
#[inline]
pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

/// RFC 9110 §5.6.2: `token = 1*tchar`.
#[inline]
pub(crate) fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// RFC 9110 §5.6.3: strips optional whitespace (SP / HTAB) from both ends.
#[inline]
pub(crate) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}
