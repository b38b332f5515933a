//! The tests' server, shared by the unit tests and tests/stall_probe.rs (`#[path]`).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A keep-alive server, a thread a connection: it answers each request with a 2-byte
/// body, and holds the `stall_at`th request it reads (from 0, over all connections)
/// for `stall` first. Returns its address and its count of requests read.
pub fn stalling_server(stall_at: usize, stall: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
    let (addr, served, _) = counting_server(stall_at, stall);
    (addr, served)
}

/// `stalling_server`, also returning its count of connections accepted.
pub fn counting_server(
    stall_at: usize,
    stall: Duration,
) -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let (count, conns) = (served.clone(), accepted.clone());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            // Relaxed: a count, read once the run it counts is over.
            conns.fetch_add(1, Ordering::Relaxed);
            let count = count.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        // Relaxed: a count, read once the requests it counts are answered.
                        if count.fetch_add(1, Ordering::Relaxed) == stall_at {
                            std::thread::sleep(stall);
                        }
                        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if s.write_all(ok).is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (addr, served, accepted)
}
