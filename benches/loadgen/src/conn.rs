//! A connection to a server, and writing a request on it: the request's bytes, made once
//! a target, a non-blocking connect, and a write that picks up where the last one stopped.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::Instant;

use mio::net::TcpStream;

use crate::args::{Args, Url};
use crate::response::Response;

pub struct Conn {
    pub stream: TcpStream,
    /// The connect has not completed yet (it completes when the socket is writable).
    pub connecting: bool,
    /// EPOLLOUT is in the socket's epoll interest (a request is partly written).
    pub want_out: bool,
    pub resp: Response,
    /// Bytes of the request written so far (the whole request once sent).
    pub written: usize,
    /// A request is out on this connection and its response not yet all read.
    pub outstanding: bool,
    /// The connection waits in `Run::idle` for the next due request (open loop).
    pub idle: bool,
    /// When the current request was due: when it was sent in the closed loop, its place
    /// in the schedule in the open loop. Its latency is counted from here.
    pub due_at: Instant,
}

pub fn request(a: &Args, url: &Url) -> Vec<u8> {
    let method = if a.body_bytes > 0 { "POST" } else { "GET" };
    let mut r = format!("{method} {} HTTP/1.1\r\nHost: {}\r\n", url.path, url.host);
    for h in &a.headers {
        r.push_str(h);
        r.push_str("\r\n");
    }
    if a.body_bytes > 0 {
        r.push_str(&format!(
            "Content-Type: application/octet-stream\r\nContent-Length: {}\r\n",
            a.body_bytes
        ));
    }
    r.push_str("\r\n");
    let mut r = r.into_bytes();
    r.resize(r.len() + a.body_bytes, b'x');
    r
}

/// Starts a non-blocking connect (mio's; it completes when the socket turns writable), so
/// that a server slow to accept never holds up the other connections or the end of the run.
pub fn start_connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Writes what is left of the request; Ok(true) once all of it is written.
pub fn write_request(c: &mut Conn, req: &[u8]) -> io::Result<bool> {
    while c.written < req.len() {
        match c.stream.write(&req[c.written..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => c.written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
