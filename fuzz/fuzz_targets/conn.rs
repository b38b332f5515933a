//! A connection's whole read-and-parse state machine (`Conn::read_some` and
//! `Conn::parse_step`: heads, Content-Length and chunked bodies, pipelining, errors) fed
//! arbitrary bytes through a real socket, then end of stream: never a panic, every request
//! it yields well-formed, and it always comes to an end.
#![no_main]

use std::io::Write;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use m0serve::worker::conn::{Conn, Sock, Step};
use m0serve::http::limits::Limits;
use m0serve::pipeline::msg::{ConnRef, Peer};

fuzz_target!(|data: &[u8]| {
    // A socket buffer takes this much without blocking.
    let data = &data[..data.len().min(60 * 1024)];
    let (mut client, server) = mio::net::UnixStream::pair().expect("a socketpair");
    client.write_all(data).expect("the bytes fit the socket buffer");
    drop(client);
    let mut conn = Conn::new(
        Sock::Unix(server),
        ConnRef { slot: 0, gen: 0 },
        Peer::Unix,
        Instant::now(),
    );
    let limits = Limits {
        max_request_line: 512,
        max_head: 4096,
        max_headers: 16,
    };
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 100_000, "the state machine does not come to an end");
        match conn.parse_step(&limits, 8192, 1024) {
            Step::Request(req) => {
                assert!(req.head.head_len <= req.data.len());
                let _ = req.head.method.get(&req.data);
                let _ = req.head.target.get(&req.data);
                for h in &req.head.headers {
                    let _ = h.name.get(&req.data);
                    let _ = h.value.get(&req.data);
                }
                let body_len = req.spooled.as_ref().map_or(req.body().len() as u64, |s| s.len);
                assert!(body_len <= 8192);
            }
            Step::NeedMore => match conn.read_some(limits.max_head + 16 * 1024) {
                Ok(0) | Ok(usize::MAX) | Err(_) => break,
                Ok(_) => {}
            },
            Step::Error(e) => {
                let _ = (e.status(), e.reason());
                break;
            }
            Step::TooLarge | Step::SpoolFailed => break,
        }
    }
});
