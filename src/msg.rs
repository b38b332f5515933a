//! What crosses the rings: plain `Send` data, never a Python object.
//!
//! A [`Request`] owns one buffer holding the request head exactly as received followed by
//! the (decoded) body, with the parsed head as offsets into it: the loop copies a request's
//! bytes once, out of the connection's read buffer, and nothing is copied per header.
//! A [`Response`] carries bytes ready for the wire (head and body already framed by the
//! handler thread), so the loop only writes.

use std::net::SocketAddr;

use crate::http::parse::Head;

/// Names a connection across the rings: its slot in the loop's slab and the slot's
/// generation, so a response for a connection that has since closed (and whose slot was
/// reused) is recognised and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnRef {
    pub slot: u32,
    pub gen: u32,
}

impl ConnRef {
    /// One word, for the handler's "this connection is gone" flag.
    pub fn packed(self) -> u64 {
        (u64::from(self.slot) << 32) | u64::from(self.gen)
    }
}

/// The peer of a connection.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    Tcp(SocketAddr),
    Unix,
}

/// One complete request, head and body.
#[derive(Debug)]
pub struct Request {
    pub conn: ConnRef,
    /// The head bytes (`head.head_len` of them) followed by the body.
    pub data: Vec<u8>,
    pub head: Head,
    /// The body was sent chunked (then `CONTENT_LENGTH` is absent from the environ).
    pub chunked: bool,
    pub peer: Peer,
}

impl Request {
    pub fn body(&self) -> &[u8] {
        &self.data[self.head.head_len..]
    }
}

/// What a response message is in the sequence of one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// More parts follow. Counts against the handler's chunks-in-flight credit until the
    /// loop has written it (or dropped it with its connection).
    Partial,
    /// The response is complete; keep the connection open afterwards or close it.
    Last { keep_alive: bool },
    /// The response failed after it started: write out what is already queued, then close
    /// the connection without ending the body (no final chunk, a short Content-Length), so
    /// the client cannot take a truncated body for a whole one. `reset`: the body was
    /// delimited by the close itself (HTTP/1.0 streaming), so only a reset tells the client
    /// it is incomplete.
    Abort { reset: bool },
}

#[derive(Debug)]
pub struct Response {
    pub conn: ConnRef,
    /// Wire bytes: status line and headers on the first part, framed body data after.
    pub data: Vec<u8>,
    /// A body the loop sends straight from a file after `data` (`wsgi.file_wrapper` over a
    /// regular file): `sendfile(2)`, nothing copied through user space.
    pub file: Option<FileBody>,
    pub part: Part,
}

/// `len` bytes of a file from `offset`, through a descriptor of its own (a dup, so the app
/// may close its file object at once).
#[derive(Debug)]
pub struct FileBody {
    pub fd: std::os::fd::OwnedFd,
    pub offset: u64,
    pub len: u64,
}
