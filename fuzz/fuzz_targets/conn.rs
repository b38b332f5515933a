//! A connection's whole read-and-parse state machine (`Conn::poll`: heads, Content-Length
//! and chunked bodies, pipelining, refusals, end of stream) fed arbitrary bytes through a
//! real socket: never a panic, every request it yields well-formed, and it always comes to
//! an end (a close, or a wait once it has nothing more to read).
#![no_main]

use std::io::Write;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use m0serve::internals::DateCache;
use m0serve::internals::Limits;
use m0serve::internals::{ConnRef, Peer};
use m0serve::internals::{Conn, Effects, Next, ReadCtx, Sock};

fuzz_target!(|data: &[u8]| {
    // A socket buffer takes this much without blocking.
    let data = &data[..data.len().min(60 * 1024)];
    let (mut client, server) = mio::net::UnixStream::pair().expect("a socketpair");
    client.write_all(data).expect("the bytes fit the socket buffer");
    drop(client);
    let now = Instant::now();
    let mut conn = Conn::new(
        Sock::Unix(server),
        ConnRef { slot: 0, gen: 0 },
        Peer::Unix,
        Some(0),
        now,
    );
    let limits = Limits {
        max_request_line: 512,
        max_head: 4096,
        max_headers: 16,
    };
    let mut date = DateCache::new();
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 100_000, "the state machine does not come to an end");
        let mut ctx = ReadCtx {
            limits: &limits,
            max_body_bytes: 8192,
            body_buffer: 1024,
            read_buffer_max: limits.max_head + 16 * 1024,
            draining: false,
            now,
            date: &mut date,
        };
        // What the loop hears of a socket whose peer wrote and closed: read to the end.
        conn.on_readiness(true, true);
        let mut fx = Effects::default();
        match conn.poll(&mut ctx, &mut fx) {
            Next::Request(req) => {
                assert!(req.head.head_len <= req.data.len());
                let _ = req.head.method.get(&req.data);
                let _ = req.head.target.get(&req.data);
                for h in &req.head.headers {
                    let _ = h.name.get(&req.data);
                    let _ = h.value.get(&req.data);
                }
                let body_len = req.spooled.as_ref().map_or(req.body().len() as u64, |s| s.len);
                assert!(body_len <= 8192);
                // As if its handler answered at once: the next one is read.
            }
            Next::Wait | Next::Close => break,
        }
    }
});
