//! HTTP/1.1 as clients expect it (RFC 9112 / RFC 9110): persistence,
//! pipelining, 100-continue, response framing, bodiless responses, Date and
//! Server, chunked uploads, requests split across reads, and backpressure.

mod common;

use common::*;
use std::io::Read;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Persistence
// ---------------------------------------------------------------------------

#[test]
fn http11_connection_stays_open_by_default() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    for i in 0..3 {
        c.send(&get("/list"));
        let r = c.read_response();
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.body_text(), "abcdefg");
        assert!(
            !r.connection_has("close"),
            "request {i}: an HTTP/1.1 response closed the connection unasked"
        );
    }
    c.expect_open_and_quiet(Duration::from_millis(300));
}

#[test]
fn http10_connection_closes_after_the_response_by_default() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(b"GET /list HTTP/1.0\r\n\r\n");
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert_eq!(r.body_text(), "abcdefg");
    assert!(
        !r.connection_has("keep-alive"),
        "HTTP/1.0 without keep-alive was answered keep-alive"
    );
    c.expect_closed(Duration::from_secs(5));
}

#[test]
fn http10_keep_alive_is_honoured_when_asked() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    for i in 0..3 {
        c.send(b"GET /list HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        let r = c.read_response();
        assert_eq!(r.status, 200, "request {i}");
        // RFC 9112 section 9.3: an HTTP/1.0 client only knows the connection
        // persists if the response says keep-alive.
        assert!(
            r.connection_has("keep-alive"),
            "request {i}: no `Connection: keep-alive` in {:?}",
            r.headers
        );
        assert_eq!(r.framing, Framing::ContentLength(7));
    }
}

#[test]
fn connection_close_is_honoured() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(b"GET /list HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert!(
        r.connection_has("close"),
        "RFC 9112 section 9.6: the response to `Connection: close` says close; got {:?}",
        r.headers
    );
    c.expect_closed(Duration::from_secs(5));
}

// ---------------------------------------------------------------------------
// Pipelining
// ---------------------------------------------------------------------------

#[test]
fn fifty_pipelined_requests_in_one_write_are_answered_in_order() {
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    let mut burst = Vec::new();
    for i in 0..50 {
        if i % 5 == 3 {
            burst.extend_from_slice(&post(&format!("/p/{i}"), format!("body-{i}").as_bytes()));
        } else if i % 7 == 6 {
            burst.extend_from_slice(&post_chunked(
                &format!("/p/{i}"),
                format!("chunked-{i}").as_bytes(),
                &[2, 3],
            ));
        } else {
            burst.extend_from_slice(&get(&format!("/p/{i}?i={i}")));
        }
    }
    c.send(&burst);
    let rs = c.read_responses(50);
    for (i, r) in rs.iter().enumerate() {
        let e = r.echo();
        assert_eq!(
            e.must("PATH_INFO"),
            format!("/p/{i}"),
            "response {i} is out of order"
        );
        let want_body = if i % 5 == 3 {
            format!("body-{i}")
        } else if i % 7 == 6 {
            format!("chunked-{i}")
        } else {
            String::new()
        };
        assert_eq!(e.body, want_body.as_bytes(), "response {i}");
    }
    c.send(&get("/after"));
    assert_eq!(c.read_response().echo().must("PATH_INFO"), "/after");
}

#[test]
fn pipelined_responses_keep_request_order_when_an_earlier_one_is_slower() {
    let s = Server::start("pep3333:app", &["--blocking-threads", "2"]);
    let mut c = s.connect();
    let mut burst = get("/slow?secs=1");
    burst.extend_from_slice(&get("/list"));
    burst.extend_from_slice(&get("/tuple"));
    c.send(&burst);
    let rs = c.read_responses(3);
    assert_eq!(rs[0].body_text(), "slow done");
    assert_eq!(rs[1].body_text(), "abcdefg");
    assert_eq!(rs[2].body_text(), "abcde");
}

// ---------------------------------------------------------------------------
// Expect: 100-continue
// ---------------------------------------------------------------------------

#[test]
fn expect_100_continue_gets_an_interim_response_before_the_final_one() {
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    c.send(
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n",
    );
    // The body is withheld until the server asks for it.
    let interim = c.read_response();
    assert_eq!(
        interim.status_line(),
        "HTTP/1.1 100 Continue",
        "expected the interim response first"
    );
    assert!(interim.raw.starts_with(b"HTTP/1.1 100 Continue\r\n"));
    c.send(b"hello world");
    // RFC 9110 section 15.2: a client must accept more 1xx before the final one.
    let mut r = c.read_response();
    while r.status < 200 {
        r = c.read_response();
    }
    assert_eq!(r.status, 200);
    assert_eq!(r.echo().body, b"hello world");
}

// ---------------------------------------------------------------------------
// Response framing
// ---------------------------------------------------------------------------

#[test]
fn app_content_length_frames_the_response() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(&get("/gen-cl"));
    let r = c.read_response();
    assert_eq!(r.framing, Framing::ContentLength(8));
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(
        r.header_all("content-length"),
        vec!["8"],
        "exactly one Content-Length"
    );
    assert_eq!(r.body_text(), "gen-body");
    assert!(
        !r.connection_has("close"),
        "a framed HTTP/1.1 response closed the connection"
    );
    c.send(&get("/list"));
    assert_eq!(c.read_response().body_text(), "abcdefg");
}

#[test]
fn list_and_tuple_bodies_get_a_content_length() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    for (path, body) in [
        ("/list", "abcdefg"),
        ("/tuple", "abcde"),
        ("/empty-list", ""),
        ("/empty-chunks", "abcdef"),
    ] {
        c.send(&get(path));
        let r = c.read_response();
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(
            r.framing,
            Framing::ContentLength(body.len()),
            "{path}: {:?}",
            r.headers
        );
        assert_eq!(r.header("transfer-encoding"), None, "{path}");
        assert_eq!(r.body_text(), body, "{path}");
    }
}

#[test]
fn generator_body_is_chunked_on_http11() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(&get("/gen"));
    let r = c.read_response();
    assert_eq!(r.framing, Framing::Chunked, "{:?}", r.headers);
    assert_eq!(r.header("content-length"), None);
    assert_eq!(r.body_text(), "gen-body");
    assert!(
        !r.connection_has("close"),
        "the connection must survive a chunked response"
    );
    c.send(&get("/list"));
    assert_eq!(
        c.read_response().body_text(),
        "abcdefg",
        "the connection must survive a chunked response"
    );
}

#[test]
fn generator_body_is_close_delimited_on_http10() {
    let s = Server::start("pep3333:app", &[]);
    for req in [
        &b"GET /gen HTTP/1.0\r\n\r\n"[..],
        b"GET /gen HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    ] {
        let mut c = s.connect();
        c.send(req);
        let r = c.read_response();
        assert_eq!(r.status, 200);
        // RFC 9112 section 6.1: no Transfer-Encoding to an HTTP/1.0 request.
        assert_eq!(r.header("transfer-encoding"), None, "{:?}", r.headers);
        assert_eq!(r.header("content-length"), None);
        assert_eq!(r.framing, Framing::Close);
        assert_eq!(r.body_text(), "gen-body");
        assert!(
            !r.connection_has("keep-alive"),
            "a close-delimited response cannot keep the connection"
        );
    }
}

#[test]
fn body_shorter_than_the_apps_content_length_closes_the_connection() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    let mut burst = get("/cl-short");
    burst.extend_from_slice(&get("/list"));
    c.send(&burst);
    let err = c
        .try_read_response()
        .expect_err("10 bytes promised, 3 produced: the response cannot complete");
    assert_eq!(err.kind, ReadErrorKind::Truncated, "{err:?}");
    let head = err.head.as_ref().expect("head");
    assert_eq!(head.header("content-length"), Some("10"));
    assert!(contains(&err.raw, b"\r\n\r\nabc"));
    assert!(
        !contains(&err.raw, b"abcdefg"),
        "the next pipelined request was answered on a broken connection"
    );
    // PEP 3333: the server should note it; one warning naming the request and both
    // lengths.
    let line =
        "GET /cl-short: the application declared Content-Length: 10 but its body had 3 bytes";
    assert!(
        s.wait_for_log(line, Duration::from_secs(5)),
        "{}",
        s.log_text()
    );
    assert_eq!(s.log_text().matches("declared Content-Length").count(), 1);
}

#[test]
fn body_longer_than_the_apps_content_length_is_cut_at_the_length() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    let mut burst = get("/cl-long");
    burst.extend_from_slice(&get("/list"));
    c.send(&burst);
    let r = c.read_response();
    assert_eq!(r.framing, Framing::ContentLength(3));
    assert_eq!(r.body_text(), "abc");
    let line = "GET /cl-long: the application declared Content-Length: 3 but its body had 58 bytes";
    assert!(
        s.wait_for_log(line, Duration::from_secs(5)),
        "{}",
        s.log_text()
    );
    match c.try_read_response() {
        Ok(next) => {
            assert_eq!(
                next.header("x-smuggled"),
                None,
                "bytes beyond Content-Length were sent as a response"
            );
            assert_eq!(next.body_text(), "abcdefg");
        }
        Err(e) => {
            assert_eq!(e.kind, ReadErrorKind::ClosedBeforeResponse, "{e:?}");
            assert!(!contains(&e.raw, b"X-Smuggled"));
        }
    }
}

// ---------------------------------------------------------------------------
// Responses without a body
// ---------------------------------------------------------------------------

#[test]
fn head_response_has_no_body() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    for path in ["/head", "/head-gen", "/list"] {
        let mut burst = format!("HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
        burst.extend_from_slice(&get("/tuple"));
        c.send(&burst);
        let h = c.read_head_response();
        assert_eq!(h.status, 200, "HEAD {path}");
        if path == "/head" {
            // RFC 9110 section 8.6: if sent, it is the length GET would have.
            if let Some(cl) = h.header("content-length") {
                assert_eq!(cl, "10", "HEAD {path}");
            }
        }
        let next = c.read_response();
        assert_eq!(
            next.body_text(),
            "abcde",
            "HEAD {path} sent body bytes: the next response was misread"
        );
    }
}

#[test]
fn status_204_and_304_have_no_body() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    for q in ["code=204", "code=204&body=1", "code=304", "code=304&body=1"] {
        let mut burst = get(&format!("/status?{q}"));
        burst.extend_from_slice(&get("/tuple"));
        c.send(&burst);
        let r = c.read_response();
        assert_eq!(r.framing, Framing::NoBody);
        if q.contains("204") {
            assert_eq!(r.status, 204);
            // RFC 9110 section 8.6 and RFC 9112 section 6.1.
            assert_eq!(
                r.header("content-length"),
                None,
                "{q}: Content-Length on a 204"
            );
            assert_eq!(
                r.header("transfer-encoding"),
                None,
                "{q}: Transfer-Encoding on a 204"
            );
        } else {
            assert_eq!(r.status, 304);
            assert_eq!(r.header("etag"), Some("\"m0test\""));
        }
        let next = c.read_response();
        assert_eq!(
            next.body_text(),
            "abcde",
            "{q}: body bytes after a {}",
            r.status
        );
    }
}

#[test]
fn an_app_1xx_status_is_never_sent_as_the_response() {
    let s = Server::start("pep3333:app", &[]);
    for code in ["100", "103"] {
        let mut c = s.connect();
        c.send(&get(&format!("/status?code={code}&body=1")));
        let r = c.read_response();
        assert!(
            r.status >= 200,
            "the app's {code} status was sent as a response: {}",
            r.status_line()
        );
    }
    assert_eq!(s.get("/list").status, 200);
}

// ---------------------------------------------------------------------------
// Date and Server
// ---------------------------------------------------------------------------

#[test]
fn date_and_server_headers_are_present_and_date_is_an_imf_fixdate() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    for path in ["/list", "/gen", "/no-such-route"] {
        c.send(&get(path));
        let r = c.read_response();
        let dates = r.header_all("date");
        assert_eq!(
            dates.len(),
            1,
            "{path}: exactly one Date header, got {:?}",
            r.headers
        );
        let t = parse_imf_fixdate(dates[0])
            .unwrap_or_else(|| panic!("{path}: Date {:?} is not an IMF-fixdate", dates[0]));
        let now = unix_now();
        assert!(
            (t - now).abs() <= 3,
            "{path}: Date {:?} is {}s away from now",
            dates[0],
            t - now
        );
        let server = r
            .header("server")
            .unwrap_or_else(|| panic!("{path}: no Server header in {:?}", r.headers));
        assert!(!server.trim().is_empty());
    }
}

#[test]
fn imf_fixdate_reader_is_strict() {
    assert_eq!(
        parse_imf_fixdate("Sun, 06 Nov 1994 08:49:37 GMT"),
        Some(784111777)
    );
    assert_eq!(parse_imf_fixdate("Mon, 06 Nov 1994 08:49:37 GMT"), None);
    assert_eq!(parse_imf_fixdate("Sunday, 06-Nov-94 08:49:37 GMT"), None);
    assert_eq!(parse_imf_fixdate("Sun Nov  6 08:49:37 1994"), None);
}

// ---------------------------------------------------------------------------
// Request bodies and reads at odd boundaries
// ---------------------------------------------------------------------------

#[test]
fn chunked_upload_reaches_the_app_whole_with_input_terminated() {
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    let body: Vec<u8> = (0..200_000usize).map(|i| (i % 251) as u8).collect();
    let mut req = b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/octet-stream\r\n\r\n".to_vec();
    req.extend_from_slice(b"5;name=value;quoted=\"a b\"\r\n");
    req.extend_from_slice(&body[..5]);
    req.extend_from_slice(b"\r\n");
    let rest = chunked(&body[5..], &[1, 0xfff, 3, 65536, 17]);
    // Replace the last-chunk's empty trailer section with one trailer field.
    req.extend_from_slice(&rest[..rest.len() - 2]);
    req.extend_from_slice(b"X-Trailer: t\r\n\r\n");
    c.send(&req);
    let e = c.read_response().echo();
    assert!(
        e.body == body,
        "the app read {} bytes of {}",
        e.body.len(),
        body.len()
    );
    assert_eq!(e.wsgi("input_terminated").as_bool(), Some(true));
    assert_eq!(e.var("CONTENT_LENGTH"), None, "no Content-Length was sent");
    assert_eq!(e.must("CONTENT_TYPE"), "application/octet-stream");
    // RFC 9110 section 6.5.1: trailer fields are not merged into the header section.
    assert_eq!(e.var("HTTP_X_TRAILER"), None);
    c.send(&get("/next"));
    assert_eq!(c.read_response().echo().must("PATH_INFO"), "/next");
}

const SPLIT_REQUESTS: [&[u8]; 2] = [
    b"POST /split?read=all HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;e=v\r\n world\r\n0\r\nT: v\r\n\r\n",
    b"POST /split?read=all HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world",
];

#[test]
fn request_split_at_every_byte_offset_is_parsed_the_same() {
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    for req in SPLIT_REQUESTS {
        for cut in 1..req.len() {
            c.send_split(req, &[cut], Duration::from_millis(3));
            let r = c
                .try_read_response()
                .unwrap_or_else(|e| panic!("split at {cut} of {:?}: {e:?}", show(req)));
            let e = r.echo();
            assert_eq!(e.must("PATH_INFO"), "/split", "split at {cut}");
            assert_eq!(e.body, b"hello world", "split at {cut} of {:?}", show(req));
        }
    }
}

#[test]
fn request_sent_one_byte_at_a_time_is_parsed_the_same() {
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    for req in SPLIT_REQUESTS {
        let cuts: Vec<usize> = (1..req.len()).collect();
        c.send_split(req, &cuts, Duration::from_millis(1));
        let e = c.read_response().echo();
        assert_eq!(e.body, b"hello world", "{:?}", show(req));
    }
}

// ---------------------------------------------------------------------------
// Backpressure
// ---------------------------------------------------------------------------

fn read_count(path: &str) -> usize {
    read_or_empty(path).trim().parse().unwrap_or(0)
}

#[test]
fn a_client_that_does_not_read_stalls_neither_the_loop_nor_other_clients() {
    const CHUNK: usize = 1 << 20;
    const CHUNKS: usize = 512;
    let tmp = TempDir::new("backpressure");
    let count = tmp.file("count");
    let s = Server::start("pep3333:app", &["--blocking-threads", "2"]);
    let rss_before = rss_kib(s.pid());

    // A asks for 512 MiB and reads none of it.
    let mut a = s.connect();
    a.send(&get(&format!(
        "/stream?n={CHUNKS}&size={CHUNK}&count={count}"
    )));
    assert!(
        wait_until(Duration::from_secs(10), || read_count(&count) > 0),
        "the stream never started"
    );

    // The app's iterator must stop once a bounded number of chunks is queued.
    let mut last = read_count(&count);
    let settle = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = read_count(&count);
        if now == last || settle.elapsed() > Duration::from_secs(10) {
            break;
        }
        last = now;
    }
    std::thread::sleep(Duration::from_secs(1));
    let produced = read_count(&count);
    assert_eq!(
        produced, last,
        "the app kept producing for a client that reads nothing"
    );
    assert!(
        produced <= 128,
        "{produced} MiB produced for a client that read nothing: chunks in flight are not bounded"
    );
    let rss_growth_mib = rss_kib(s.pid()).saturating_sub(rss_before) / 1024;
    assert!(
        rss_growth_mib <= 256,
        "server memory grew by {rss_growth_mib} MiB for one unread response"
    );

    // Meanwhile other clients are served promptly.
    let t = Instant::now();
    for i in 0..5 {
        let r = s.get("/list");
        assert_eq!(r.body_text(), "abcdefg", "request {i}");
    }
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "other clients waited {:?}",
        t.elapsed()
    );

    // When A starts reading, the flow resumes: the iterator produces again.
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    while got < 64 * CHUNK {
        match a.stream.read(&mut buf) {
            Ok(0) => panic!("A's response ended after {got} bytes"),
            Ok(n) => got += n,
            Err(e) => panic!("reading A's response after {got} bytes: {e}"),
        }
    }
    assert!(
        wait_until(Duration::from_secs(10), || read_count(&count) > produced),
        "the app's iterator did not resume after the client read {got} bytes"
    );
}

#[test]
fn a_full_request_ring_holds_requests_back_and_loses_none() {
    // More concurrent requests than the handler's request ring has slots (256): the loop
    // must stop taking requests off sockets while the ring is full, then go on.
    const CLIENTS: usize = 320;
    // (1.3 s of work at once: past the default queue-wait budget, which would shed some.)
    let s = Server::start(
        "pep3333:app",
        &["--blocking-threads", "1", "--max-queue-wait", "0"],
    );
    let mut conns: Vec<_> = (0..CLIENTS).map(|_| s.connect()).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.send(&get(&format!("/slow?secs=0.004&i={i}")));
    }
    for (i, c) in conns.iter_mut().enumerate() {
        c.set_io_timeout(Duration::from_secs(30));
        let r = c.read_response();
        assert_eq!(r.status, 200, "client {i}");
        assert_eq!(r.body_text(), "slow done", "client {i}");
    }
    // Every connection is still usable afterwards.
    conns[0].send(&get("/list"));
    let r = conns[0].read_response();
    assert_eq!(r.body_text(), "abcdefg");
}

#[test]
fn a_large_body_arriving_in_odd_pieces_reaches_the_app_byte_for_byte() {
    // Several MiB: the loop reads large Content-Length bodies straight into the request's
    // buffer; pieces of odd sizes (some smaller than its threshold) cross every path.
    const SIZE: usize = 3 * 1024 * 1024 + 12_345;
    let body: Vec<u8> = (0..SIZE).map(|i| (i * 31 % 253) as u8).collect();
    let s = Server::start("pep3333:app", &[]);
    for round in 0..2 {
        let mut c = s.connect();
        c.set_io_timeout(Duration::from_secs(30));
        let req = post("/echo-body", &body);
        let head_end = find(&req, b"\r\n\r\n").unwrap() + 4;
        c.send(&req[..head_end + 100]);
        let mut at = head_end + 100;
        let mut piece = 7_777 + round * 40_000;
        while at < req.len() {
            let end = (at + piece).min(req.len());
            c.send(&req[at..end]);
            at = end;
            piece = piece * 3 % 200_003 + 1;
        }
        let r = c.read_response();
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), SIZE);
        assert!(r.body == body, "round {round}: the echoed body differs");
        // The connection is usable for the next request.
        c.send(&get("/list"));
        assert_eq!(c.read_response().body_text(), "abcdefg");
    }
}
