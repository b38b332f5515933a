//! The parts of a request's path in isolation, in ns per request (performance issue: "the
//! parts in isolation ... so the in-situ profile can be split into the parts and what lies
//! between them").
//!
//! `cargo bench --bench parts`. A hand-written harness (no criterion): each part runs for a
//! warm-up period, then `REPS` timed repetitions of a fixed wall time; the table shows the
//! median (and the fastest and slowest repetition) in ns per call.
//!
//! - `parse_head`: a Firefox navigation request (582 bytes, 12 header lines), the whole
//!   head in the buffer, as the loop parses it once a read completes it. Includes the
//!   `Vec` of header spans the `Head` owns (allocated and freed per call).
//! - Response head encode: `decide_framing`, `HeadWriter::new` ("200 OK"), two app headers
//!   (Content-Type, Cache-Control), `finish` (Content-Length, Date, Server), into a reused
//!   `Vec`, as the handler does for a hello-world response.
//! - `DateCache::get`: one clock read and a compare (the text is re-rendered once a second).
//!
//! - The hand-off record (`parse_head` and the copy into a `msg::Request`).
//! - The environ build, on the embedded interpreter.
//!
//! `cargo bench --bench parts -- WORD` runs only the parts whose name contains WORD (to
//! profile one with `perf record`).
//!
//! With `M0S_PARTS_CALLS=N` each part runs exactly N times, untimed: for counting
//! instructions, which a host's noise does not change. The difference between two counts of
//! the whole process, at two N, divided by their difference, is one call's:
//!
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/deps/parts-HASH "app's side"
//!
//! with `M0S_PARTS_CALLS` 1000 and then 11000 ("Collected" in valgrind's summary).

use m0serve::internals::EnvBuilder;
use m0serve::internals::{Bridge, Observers, ServerInfo, Sink};
use m0serve::internals::{ConnRef, Peer, Request};
use m0serve::internals::{HandlerShared, LoopShared};
use pyo3::prelude::*;
use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use m0serve::internals::DateCache;
use m0serve::internals::Limits;
use m0serve::internals::{decide_framing, HeadWriter};
use m0serve::internals::{parse_head, Version};

#[path = "support/harness.rs"]
mod harness;
use harness::{measure, median, REPS, WARM_UP};

/// Wall time of one timed repetition.
const REP_TARGET: Duration = Duration::from_millis(300);
/// Calls between two clock reads.
const BATCH: u64 = 256;

/// What Firefox 128 on Linux sends for a page navigation (cookies shortened to typical
/// session and CSRF tokens).
const FIREFOX_GET: &[u8] = b"GET /articles/2024/11/rust-wsgi-servers?ref=home HTTP/1.1\r\n\
Host: www.example.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Referer: https://www.example.com/\r\n\
Connection: keep-alive\r\n\
Cookie: sessionid=8f3b2a1c9d7e6f5a4b3c2d1e0f9a8b7c; csrftoken=Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe\r\n\
Upgrade-Insecure-Requests: 1\r\n\
Sec-Fetch-Dest: document\r\n\
Sec-Fetch-Mode: navigate\r\n\
Sec-Fetch-Site: same-origin\r\n\
\r\n";

/// What `curl` sends: the smallest realistic head, for contrast.
const CURL_GET: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: curl/8.5.0\r\n\
Accept: */*\r\n\r\n";

struct Row {
    name: &'static str,
    /// ns per call, one per repetition, sorted.
    reps: Vec<f64>,
    note: String,
}

/// Runs `f` for the warm-up, then `REPS` repetitions of `REP_TARGET` each; ns per call.
/// A part the command line's filter leaves out is not run (no repetitions).
fn bench(name: &'static str, note: String, f: impl FnMut()) -> Row {
    let wanted = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .is_none_or(|w| name.contains(&w));
    if !wanted {
        return Row {
            name,
            reps: Vec::new(),
            note,
        };
    }
    if let Some(calls) = std::env::var("M0S_PARTS_CALLS")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    {
        let mut f = f;
        for _ in 0..calls {
            f();
        }
        return Row {
            name,
            reps: Vec::new(),
            note,
        };
    }
    let reps = measure(REP_TARGET, BATCH, f);
    Row { name, reps, note }
}

/// Parses `req` once outside the timing and checks it is one whole head.
fn check_parse(req: &[u8]) -> usize {
    let head = parse_head(req, &Limits::default())
        .expect("a valid request")
        .expect("a whole head");
    assert_eq!(head.head_len, req.len());
    assert!(head.keep_alive);
    head.headers.len()
}

fn main() {
    let started = Instant::now();
    let limits = Limits::default();
    let mut rows = Vec::new();

    for (name, req) in [
        ("`parse_head`, Firefox navigation", FIREFOX_GET),
        ("`parse_head`, curl (for contrast)", CURL_GET),
    ] {
        let headers = check_parse(req);
        rows.push(bench(
            name,
            format!("{} bytes, {headers} header lines", req.len()),
            || {
                let head = parse_head(black_box(req), black_box(&limits));
                black_box(head.ok());
            },
        ));
    }

    // What the handler writes for a hello-world app: status, two app headers, and the
    // framing, Date and Server headers the server adds.
    let date: Vec<u8> = DateCache::new().get().to_vec();
    let mut out = Vec::with_capacity(512);
    let encode = |out: &mut Vec<u8>| {
        out.clear();
        let (mut w, status) = HeadWriter::new(out, black_box(b"200 OK")).expect("valid status");
        w.header(b"Content-Type", black_box(b"text/plain; charset=utf-8"))
            .expect("valid header");
        w.header(b"Cache-Control", black_box(b"no-cache"))
            .expect("valid header");
        let (framing, keep_alive) =
            decide_framing(Version::Http11, false, status, None, Some(13), true);
        w.finish(framing, keep_alive, Version::Http11, black_box(&date));
    };
    encode(&mut out);
    let encoded = String::from_utf8_lossy(&out).into_owned();
    assert!(encoded.starts_with("HTTP/1.1 200 OK\r\n") && encoded.ends_with("\r\n\r\n"));
    let encoded_len = out.len();
    rows.push(bench(
        "response head encode (`HeadWriter`, 2 app headers + `finish`)",
        format!("{encoded_len} bytes out, into a reused `Vec`"),
        || {
            encode(&mut out);
            black_box(&out);
        },
    ));

    // The hand-off record: what the loop builds for the ring from a parsed head (one buffer
    // holding the head bytes, the spans, the peer).
    let peer = Peer::Tcp("127.0.0.1:50000".parse().expect("an address"));
    let conn = ConnRef { slot: 7, gen: 1 };
    let queued_at = std::time::Instant::now();
    let record = |req: &[u8]| -> Box<Request> {
        let head = parse_head(req, &limits)
            .expect("a valid request")
            .expect("a whole head");
        let mut data = Vec::with_capacity(head.head_len);
        data.extend_from_slice(&req[..head.head_len]);
        Box::new(Request {
            conn,
            data,
            chunked: false,
            spooled: None,
            head,
            peer,
            queued_at,
            listener: 0,
            secure: false,
            client_dn: None,
            socket: None,
        })
    };
    rows.push(bench(
        "hand-off record (`parse_head` + copy into a `msg::Request`), Firefox",
        "the parse above plus the one copy and the three allocations (the record is boxed)"
            .to_string(),
        || {
            black_box(record(black_box(FIREFOX_GET)));
        },
    ));

    // The environ (handler thread): interned keys, the base dict copied, values from the
    // request's bytes. The dict is dropped each time, as after a request.
    m0serve::internals::initialize(None).expect("Python starts");
    let request = record(FIREFOX_GET);
    let info = ServerInfo {
        server_name: "127.0.0.1".into(),
        server_port: "8000".into(),
        other_listeners: Vec::new(),
        multithread: false,
        multiprocess: false,
        trusted: Default::default(),
        root_path: None,
    };
    Python::attach(|py| {
        let mut env = EnvBuilder::new(py, &info).expect("the environ builder");
        let keys = env.build(py, &request).expect("an environ").len();
        rows.push(bench(
            "environ build (`EnvBuilder::build`), Firefox",
            format!("{keys} keys (without `wsgi.input`); dict created and freed; the same head every time"),
            || {
                black_box(env.build(py, black_box(&request)).ok());
            },
        ));
        // Two clients interleaved: no head is the previous one's, so none starts from a
        // remembered environ, and each header position changes name every time.
        let other = record(CURL_GET);
        let mut flip = false;
        rows.push(bench(
            "environ build, Firefox and curl alternating (per build)",
            "never the previous request's head".to_string(),
            || {
                flip = !flip;
                let r = if flip { &request } else { &other };
                black_box(env.build(py, black_box(r)).ok());
            },
        ));
    });

    // The app's side of a request, inline mode: the bridge serves a hello-world app (the
    // one every server is measured with) and its response is taken from the inline queue,
    // as the loop takes it. Includes the hand-off record above (a `Request` is consumed).
    Python::attach(|py| {
        let code = c"def app(environ, start_response):\n    start_response('200 OK', [('Content-Type', 'text/plain'), ('Content-Length', '13')])\n    return [b'Hello, World!']\n";
        let module = PyModule::from_code(py, code, c"hello.py", c"hello").expect("the app");
        let app = module.getattr("app").expect("app").unbind();
        let out = Arc::new(Mutex::new(VecDeque::new()));
        let poll = mio::Poll::new().expect("a poller");
        let waker = mio::Waker::new(poll.registry(), mio::Token(1)).expect("a waker");
        let loop_shared = Arc::new(LoopShared::new(waker));
        let mut bridge = Bridge::new(
            py,
            app,
            Sink::Inline(out.clone()),
            Arc::new(HandlerShared::new(0, false)),
            loop_shared,
            &info,
            Observers {
                access_log: None,
                metrics: None,
            },
        )
        .expect("the bridge");
        let mut serve = || {
            bridge.serve(py, record(FIREFOX_GET));
            let resp = out.lock().expect("the queue").pop_front();
            resp.expect("a response")
        };
        let first = serve();
        assert!(
            first.data.starts_with(b"HTTP/1.1 200 OK\r\n")
                && first.data.ends_with(b"Hello, World!")
        );
        rows.push(bench(
            "the app's side, inline (`Bridge::serve`, hello world), Firefox",
            "environ, call, start_response, response encoded; with the hand-off record".to_string(),
            || {
                black_box(serve());
            },
        ));
    });

    let mut dates = DateCache::new();
    rows.push(bench(
        "`DateCache::get`",
        "a coarse clock read and a compare; re-rendered once a second".to_string(),
        || {
            black_box(dates.get());
        },
    ));

    println!();
    println!(
        "ns per call; median of {REPS} repetitions ({} ms each) after {} ms warm-up.",
        REP_TARGET.as_millis(),
        WARM_UP.as_millis()
    );
    println!();
    println!("| part | ns / call (median) | min .. max | notes |");
    println!("|---|---:|---|---|");
    for r in rows.iter().filter(|r| !r.reps.is_empty()) {
        println!(
            "| {} | {:.1} | {:.1} .. {:.1} | {} |",
            r.name,
            median(&r.reps),
            r.reps[0],
            r.reps[REPS - 1],
            r.note
        );
    }
    println!();
    println!("Encoded head:\n\n```\n{}```", encoded.replace("\r\n", "\n"));
    println!("Total time: {:.1} s.", started.elapsed().as_secs_f64());
}
