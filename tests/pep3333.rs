//! PEP 3333, bullet by bullet: the environ, wsgi.input, start_response with
//! exc_info, write(), close(), lazy start_response, wsgi.file_wrapper, and an
//! app wrapped in wsgiref.validate.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

const MARK_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// The environ
// ---------------------------------------------------------------------------

#[test]
fn a_head_repeated_byte_for_byte_still_gets_its_own_target_peer_and_environ() {
    // A handler builds the environ of a head whose method, version and header lines repeat
    // the previous request's from a copy it keeps: each request must still get its own
    // target, peer and forwarded client, and nothing an app did to an earlier environ.
    let s = Server::start(
        "echo:app",
        &[
            "--blocking-threads",
            "1",
            "--forwarded-allow-ips",
            "127.0.0.1",
        ],
    );
    let lines = "Host: memo.test\r\nUser-Agent: m0test/1\r\nAccept: a\r\nAccept: b\r\n\
                 X-Forwarded-For: 203.0.113.7\r\n\r\n";
    let mut c = s.connect();
    for (i, target) in [
        "/one?a=1",
        "/two",
        "/th%20ree?b=2&mutate=1",
        "/four?c",
        "/five",
    ]
    .into_iter()
    .enumerate()
    {
        c.send(format!("GET {target} HTTP/1.1\r\n{lines}").as_bytes());
        let e = c.read_response().echo();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        assert_eq!(e.must("PATH_INFO"), path.replace("%20", " "), "request {i}");
        assert_eq!(e.must("QUERY_STRING"), query, "request {i}");
        assert_eq!(e.must("HTTP_ACCEPT"), "a,b", "request {i}");
        assert_eq!(e.must("HTTP_USER_AGENT"), "m0test/1", "request {i}");
        assert_eq!(e.var("X_ADDED"), None, "request {i}");
        assert_eq!(e.must("REMOTE_ADDR"), "203.0.113.7", "request {i}");
        assert_eq!(
            e.must("REMOTE_PORT"),
            c.local_port().to_string(),
            "request {i}"
        );
        assert_eq!(e.must("HTTP_HOST"), "memo.test", "request {i}");
        assert_eq!(e.must("REQUEST_METHOD"), "GET", "request {i}");
    }
    // Another connection with the same head: its own port.
    let mut d = s.connect();
    d.send(format!("GET /other HTTP/1.1\r\n{lines}").as_bytes());
    let e = d.read_response().echo();
    assert_eq!(e.must("REMOTE_PORT"), d.local_port().to_string());
    assert_eq!(e.must("PATH_INFO"), "/other");
    // An absolute-form target's authority still replaces Host.
    c.send(format!("GET http://elsewhere.test/abs HTTP/1.1\r\n{lines}").as_bytes());
    let e = c.read_response().echo();
    assert_eq!(e.must("HTTP_HOST"), "elsewhere.test");
    assert_eq!(e.must("SERVER_NAME"), "elsewhere.test");
    assert_eq!(e.must("PATH_INFO"), "/abs");
    // The same lines with another method or version, or one byte changed, are their own.
    c.send(format!("POST /p HTTP/1.1\r\n{lines}").as_bytes());
    assert_eq!(c.read_response().echo().must("REQUEST_METHOD"), "POST");
    for (version, want) in [
        ("1.1", "HTTP/1.1"),
        ("1.1", "HTTP/1.1"),
        ("1.0", "HTTP/1.0"),
    ] {
        c.send(format!("GET /v HTTP/{version}\r\n{lines}").as_bytes());
        assert_eq!(c.read_response().echo().must("SERVER_PROTOCOL"), want);
    }
    let mut c = s.connect();
    let changed = lines.replace("m0test/1", "m0test/2");
    for _ in 0..3 {
        c.send(format!("GET /u HTTP/1.1\r\n{changed}").as_bytes());
        assert_eq!(c.read_response().echo().must("HTTP_USER_AGENT"), "m0test/2");
    }
    c.send(format!("GET /w HTTP/1.1\r\n{lines}").as_bytes());
    assert_eq!(c.read_response().echo().must("HTTP_USER_AGENT"), "m0test/1");
    drop((c, d));
    // Connections one after another (a closed one's place in the loop's table goes to the
    // next), each asking the same path twice: its own port and the path every time.
    for i in 0..4 {
        let mut c = s.connect();
        for _ in 0..2 {
            c.send(format!("GET /same%2Fpath HTTP/1.1\r\n{lines}").as_bytes());
            let e = c.read_response().echo();
            assert_eq!(
                e.must("REMOTE_PORT"),
                c.local_port().to_string(),
                "connection {i}"
            );
            assert_eq!(e.must("PATH_INFO"), "/same/path", "connection {i}");
        }
    }
}

#[test]
fn environ_has_every_required_key_with_the_right_type() {
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    c.send(
        b"GET /env/path?x=1&y HTTP/1.1\r\nHost: example.test:8080\r\nUser-Agent: m0test\r\n\r\n",
    );
    let e = c.read_response().echo();

    for key in [
        "REQUEST_METHOD",
        "SCRIPT_NAME",
        "PATH_INFO",
        "QUERY_STRING",
        "SERVER_NAME",
        "SERVER_PORT",
        "SERVER_PROTOCOL",
        "REMOTE_ADDR",
        "REMOTE_PORT",
        "REMOTE_HOST",
        "SERVER_SOFTWARE",
        "HTTP_HOST",
        "HTTP_USER_AGENT",
    ] {
        assert_eq!(
            e.types.get(key).map(|s| s.as_str()),
            Some("str"),
            "{key} must be a native str; types: {:?}",
            e.types
        );
    }
    // PEP 3333: every CGI variable is a native string (type exactly str).
    for (k, t) in &e.types {
        if !k.contains('.') {
            assert_eq!(t, "str", "environ[{k:?}] is a {t}, not str");
        }
    }
    assert_eq!(e.must("REQUEST_METHOD"), "GET");
    assert_eq!(e.must("SCRIPT_NAME"), "");
    assert_eq!(e.must("PATH_INFO"), "/env/path");
    assert_eq!(e.must("QUERY_STRING"), "x=1&y");
    assert_eq!(e.must("SERVER_PROTOCOL"), "HTTP/1.1");
    assert!(!e.must("SERVER_NAME").is_empty(), "SERVER_NAME is empty");
    assert_eq!(e.must("SERVER_PORT"), s.port().to_string());
    assert_eq!(e.must("REMOTE_ADDR"), "127.0.0.1");
    // RFC 3875 §4.1.9 lets REMOTE_HOST be the address; §4.1.17 SERVER_SOFTWARE.
    assert_eq!(e.must("REMOTE_HOST"), "127.0.0.1");
    assert_eq!(
        e.must("SERVER_SOFTWARE"),
        concat!("m0serve/", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(e.must("REMOTE_PORT"), c.local_port().to_string());
    assert_eq!(e.must("HTTP_HOST"), "example.test:8080");

    assert_eq!(
        e.types.get("wsgi.version").map(|s| s.as_str()),
        Some("tuple")
    );
    assert_eq!(
        e.wsgi("version"),
        &serde_json::json!([1, 0]),
        "wsgi.version must be (1, 0)"
    );
    assert_eq!(e.wsgi("url_scheme").as_str(), Some("http"));
    assert_eq!(
        e.types.get("wsgi.url_scheme").map(|s| s.as_str()),
        Some("str")
    );
    for key in [
        "wsgi.multithread",
        "wsgi.multiprocess",
        "wsgi.run_once",
        "wsgi.input_terminated",
    ] {
        assert_eq!(
            e.types.get(key).map(|s| s.as_str()),
            Some("bool"),
            "{key} must be a bool; types: {:?}",
            e.types
        );
    }
    assert_eq!(e.wsgi("run_once").as_bool(), Some(false));
    assert_eq!(
        e.wsgi("multiprocess").as_bool(),
        Some(false),
        "--workers 1: one process"
    );
    assert_eq!(e.wsgi("input_terminated").as_bool(), Some(true));
    assert_eq!(
        e.wsgi("input_methods").as_bool(),
        Some(true),
        "wsgi.input needs read, readline, readlines, __iter__"
    );
    assert_eq!(
        e.wsgi("errors_methods").as_bool(),
        Some(true),
        "wsgi.errors needs write, writelines, flush"
    );
    assert_eq!(
        e.wsgi("has_file_wrapper").as_bool(),
        Some(true),
        "wsgi.file_wrapper must be a callable"
    );
    assert!(e.types.contains_key("wsgi.input") && e.types.contains_key("wsgi.errors"));
}

#[test]
fn multithread_is_true_only_with_several_handler_threads() {
    let one = Server::start("echo:app", &["--max-blocking-threads", "1"]);
    assert_eq!(
        one.get("/").echo().wsgi("multithread").as_bool(),
        Some(false),
        "one handler thread: never concurrent"
    );
    // By default the pool may start more threads, so calls may be concurrent.
    let pool = Server::start("echo:app", &["--blocking-threads", "1"]);
    assert_eq!(
        pool.get("/").echo().wsgi("multithread").as_bool(),
        Some(true),
        "a pool that may grow: concurrent calls"
    );
    let two = Server::start("echo:app", &["--blocking-threads", "2"]);
    assert_eq!(
        two.get("/").echo().wsgi("multithread").as_bool(),
        Some(true),
        "two handler threads: concurrent calls"
    );
}

#[test]
fn path_info_is_percent_decoded_to_latin1_and_query_string_is_raw() {
    let s = Server::start("echo:app", &[]);
    let e = s
        .get("/a%20b/caf%C3%A9/%e9/x%2Fy/%25?q=%20a+b&c=%E9&d=%2F")
        .echo();
    // Each decoded byte is one char of the native string (latin-1), so the
    // UTF-8 pair C3 A9 is two chars and the lone byte E9 is one.
    assert_eq!(e.must("PATH_INFO"), "/a b/caf\u{c3}\u{a9}/\u{e9}/x/y/%");
    assert_eq!(e.must("QUERY_STRING"), "q=%20a+b&c=%E9&d=%2F");

    // Empty segments are part of the path (RFC 9112 section 3.2.1, RFC 3986
    // section 3.3); gunicorn's corpus case valid/100 is about the same.
    let e = s.get("///keeping//slashes/").echo();
    assert_eq!(e.must("PATH_INFO"), "///keeping//slashes/");
    assert_eq!(e.must("QUERY_STRING"), "");
}

#[test]
fn header_values_are_latin1_native_strings() {
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\nX-Latin: caf\xe9\r\nX-Utf8: caf\xc3\xa9\r\n\r\n");
    let e = c.read_response().echo();
    assert_eq!(e.must("HTTP_X_LATIN"), "caf\u{e9}");
    assert_eq!(e.must("HTTP_X_UTF8"), "caf\u{c3}\u{a9}");
    assert_eq!(e.types["HTTP_X_UTF8"], "str");
}

#[test]
fn content_type_and_content_length_are_present_only_when_sent() {
    let s = Server::start("echo:app", &[]);
    let e = s.get("/").echo();
    assert_eq!(
        e.var("CONTENT_TYPE"),
        None,
        "CONTENT_TYPE without a Content-Type header"
    );
    assert_eq!(
        e.var("CONTENT_LENGTH"),
        None,
        "CONTENT_LENGTH without a Content-Length header"
    );

    let mut c = s.connect();
    c.send(b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n\r\nhello");
    let e = c.read_response().echo();
    assert_eq!(e.must("CONTENT_TYPE"), "text/plain; charset=utf-8");
    assert_eq!(e.must("CONTENT_LENGTH"), "5");
    assert_eq!(
        e.var("HTTP_CONTENT_TYPE"),
        None,
        "Content-Type is CONTENT_TYPE, not HTTP_CONTENT_TYPE"
    );
    assert_eq!(
        e.var("HTTP_CONTENT_LENGTH"),
        None,
        "Content-Length is CONTENT_LENGTH, not HTTP_CONTENT_LENGTH"
    );
    assert_eq!(e.body, b"hello");
}

#[test]
fn repeated_headers_are_joined_with_commas_and_cookies_with_semicolons() {
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    c.send(
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Multi: a\r\nCookie: a=1\r\nx-multi: b\r\nCOOKIE: b=2\r\nX-Multi: c\r\n\r\n",
    );
    let e = c.read_response().echo();
    assert_eq!(e.must("HTTP_X_MULTI"), "a,b,c");
    assert_eq!(e.must("HTTP_COOKIE"), "a=1; b=2");
}

#[test]
fn headers_are_never_carried_over_from_the_previous_request() {
    // The environ build remembers the previous request's headers by position: each request
    // must still see exactly its own names and values.
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    let long = "v".repeat(600);
    let cases: [(&str, &[(&str, &str)]); 6] = [
        ("first", &[("X-A", "one"), ("X-B", "two")]),
        ("same names, new values", &[("X-A", "uno"), ("X-B", "dos")]),
        (
            "a new name where X-A was",
            &[("X-C", "uno"), ("X-B", "dos")],
        ),
        (
            "a dropped name, then a repeat",
            &[("X_A", "uno"), ("X-B", "dos"), ("X-B", "tres")],
        ),
        ("a long value", &[("X-A", &long), ("X-B", "dos")]),
        ("the same long value again", &[("X-A", &long), ("X-B", "")]),
    ];
    for (what, headers) in cases {
        let mut req = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("\r\n");
        c.send(req.as_bytes());
        let e = c.read_response().echo();
        let mut want: BTreeMap<String, String> = BTreeMap::new();
        want.insert("HTTP_HOST".into(), "x".into());
        for (n, v) in headers {
            if n.contains('_') {
                continue;
            }
            want.entry(environ_key(n))
                .and_modify(|prev| {
                    prev.push(',');
                    prev.push_str(v);
                })
                .or_insert_with(|| v.to_string());
        }
        assert_eq!(e.header_vars(), want, "{what}");
    }
}

#[test]
fn an_absolute_form_target_replaces_host() {
    // RFC 9112 §3.2.2: the target's authority, not the Host header, names the host.
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    c.send(b"GET http://a.example:8081/p/q?x=1 HTTP/1.1\r\nHost: b.example\r\n\r\n");
    let e = c.read_response().echo();
    assert_eq!(e.must("HTTP_HOST"), "a.example:8081");
    assert_eq!(e.must("SERVER_NAME"), "a.example");
    assert_eq!(e.must("PATH_INFO"), "/p/q");
    assert_eq!(e.must("QUERY_STRING"), "x=1");
    // The next request on the connection, in origin form, has its own Host again.
    c.send(b"GET /o HTTP/1.1\r\nHost: b.example\r\n\r\n");
    let e = c.read_response().echo();
    assert_eq!(e.must("HTTP_HOST"), "b.example");
    assert_ne!(e.must("SERVER_NAME"), "a.example");
}

#[test]
fn a_higher_http_1_minor_version_is_served_as_http_1_1() {
    // RFC 9110 §2.5: HTTP/1.2 is processed as the highest 1.x the server speaks; 2.0 and
    // up keep 505.
    let s = Server::start("echo:app", &[]);
    let r = s.request(b"GET /v HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200, "{}", r.status_line());
    assert_eq!(r.version, "HTTP/1.1");
    assert_eq!(r.echo().must("SERVER_PROTOCOL"), "HTTP/1.1");
    let r = s.request(b"GET /v HTTP/2.0\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 505, "{}", r.status_line());
}

#[test]
fn server_protocol_is_exactly_the_request_version() {
    let s = Server::start("echo:app", &[]);
    let e = s.request(b"GET / HTTP/1.0\r\n\r\n").echo();
    assert_eq!(e.must("SERVER_PROTOCOL"), "HTTP/1.0");
    let e = s
        .request(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .echo();
    assert_eq!(e.must("SERVER_PROTOCOL"), "HTTP/1.1");
}

#[test]
fn wsgi_errors_writes_reach_the_server_log() {
    let s = Server::start("pep3333:app", &[]);
    assert_eq!(s.get("/errors").body, b"ok");
    for line in [
        "m0test-wsgi-errors-write",
        "m0test-wsgi-errors-writelines-1",
        "m0test-wsgi-errors-writelines-2",
    ] {
        assert!(
            s.wait_for_log(line, Duration::from_secs(5)),
            "{line:?} written to wsgi.errors is not in the log:\n{}",
            s.log_text()
        );
    }
}

// ---------------------------------------------------------------------------
// wsgi.input
// ---------------------------------------------------------------------------

/// What io.BytesIO returns for each read mode of tests/apps/echo.py: the exact
/// pieces a correct file-like wsgi.input must produce.
fn expected_pieces(body: &[u8], mode: &str) -> Vec<Vec<u8>> {
    let mut pos = 0usize;
    let mut out = Vec::new();
    let read = |pos: &mut usize, n: usize| -> Vec<u8> {
        let end = (*pos + n).min(body.len());
        let r = body[*pos..end].to_vec();
        *pos = end;
        r
    };
    let readline = |pos: &mut usize, limit: usize| -> Vec<u8> {
        let mut end = *pos;
        while end < body.len() && end - *pos < limit {
            end += 1;
            if body[end - 1] == b'\n' {
                break;
            }
        }
        let r = body[*pos..end].to_vec();
        *pos = end;
        r
    };
    let lines = |pos: &mut usize, out: &mut Vec<Vec<u8>>| {
        while *pos < body.len() {
            out.push(readline(pos, usize::MAX));
        }
    };
    let arg = |m: &str| m.split(':').nth(1).unwrap().parse::<usize>().unwrap();
    match mode {
        "all" => out.push(body.to_vec()),
        "line" | "lines" | "iter" => lines(&mut pos, &mut out),
        m if m.starts_with("lines:") => lines(&mut pos, &mut out),
        m if m.starts_with("n:") => {
            let k = arg(m);
            while pos < body.len() {
                out.push(read(&mut pos, k));
            }
        }
        m if m.starts_with("line:") => {
            let k = arg(m);
            while pos < body.len() {
                out.push(readline(&mut pos, k));
            }
        }
        "mixed" => {
            out.push(read(&mut pos, 3));
            out.push(readline(&mut pos, usize::MAX));
            out.push(read(&mut pos, 5));
            out.push(readline(&mut pos, 4));
            lines(&mut pos, &mut out);
        }
        _ => panic!("unknown mode {mode}"),
    }
    out
}

/// A body whose lines straddle every buffer size a server is likely to use,
/// with CRLF lines, empty lines, and no final newline.
fn tricky_body(big: bool) -> Vec<u8> {
    let mut b = Vec::new();
    let lens: &[usize] = if big {
        &[
            0, 1, 2, 3, 10, 0, 100, 4095, 4096, 4097, 8191, 8192, 8193, 16383, 16384, 65535, 65536,
            65537, 5, 0, 131073, 7,
        ]
    } else {
        &[0, 1, 2, 3, 10, 0, 100, 1023, 1024, 1025, 0, 4097, 7]
    };
    for (i, &n) in lens.iter().enumerate() {
        let line: Vec<u8> = (0..n).map(|j| b'a' + ((i * 7 + j) % 26) as u8).collect();
        b.extend_from_slice(&line);
        b.extend_from_slice(if i % 3 == 1 { b"\r\n" } else { b"\n" });
    }
    b.extend_from_slice(b"no newline at the end \xff\x00\x80 bytes");
    b
}

fn check_read_modes(chunked_upload: bool, args: &[&str]) {
    let s = Server::start("echo:app", args);
    let mut c = s.connect();
    let big = tricky_body(true);
    let small = tricky_body(false);
    let modes: &[(&str, &Vec<u8>)] = &[
        ("all", &big),
        ("n:1", &small),
        ("n:7", &big),
        ("n:4096", &big),
        ("n:65536", &big),
        ("n:1000000", &big),
        ("line", &big),
        ("line:1", &small),
        ("line:5", &big),
        ("line:4096", &big),
        ("line:8192", &big),
        ("line:65536", &big),
        ("line:1000000", &big),
        ("lines", &big),
        ("lines:10", &big),
        ("lines:100000", &big),
        ("iter", &big),
        ("mixed", &big),
    ];
    for (mode, body) in modes {
        let target = format!("/input?read={mode}");
        let req = if chunked_upload {
            post_chunked(&target, body, &[1, 3, 4096, 7, 65536, 100])
        } else {
            post(&target, body)
        };
        c.send(&req);
        let e = c.read_response().echo();
        assert!(
            e.body == **body,
            "read={mode}: the app read {} bytes, {} were sent",
            e.body.len(),
            body.len()
        );
        let want = expected_pieces(body, mode);
        if e.pieces != want {
            let first = e
                .pieces
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(want.len().min(e.pieces.len()));
            panic!(
                "read={mode}: {} pieces, expected {}; first difference at piece {first}: got {:?}, expected {:?}",
                e.pieces.len(),
                want.len(),
                e.pieces.get(first).map(|p| show(p)),
                want.get(first).map(|p| show(p))
            );
        }
        assert_eq!(
            e.json["eof_ok"].as_bool(),
            Some(true),
            "read={mode}: reads after the end must return b''"
        );
    }
}

#[test]
fn wsgi_input_read_readline_readlines_and_iteration_are_exact_at_every_boundary() {
    check_read_modes(false, &[]);
}

#[test]
fn wsgi_input_is_exact_at_every_boundary_for_a_chunked_upload() {
    check_read_modes(true, &[]);
}

#[test]
fn wsgi_input_is_exact_at_every_boundary_for_a_spooled_body() {
    // --body-buffer-size 0: every body goes to a temporary file and is read back from it.
    check_read_modes(false, &["--body-buffer-size", "0"]);
}

#[test]
fn wsgi_input_is_exact_at_every_boundary_for_a_spooled_chunked_upload() {
    check_read_modes(true, &["--body-buffer-size", "0"]);
}

#[test]
fn wsgi_input_without_a_body_reads_empty() {
    let s = Server::start("echo:app", &[]);
    let e = s.get("/?read=all").echo();
    assert_eq!(e.body, b"");
    assert_eq!(e.json["eof_ok"].as_bool(), Some(true));
}

#[test]
fn unread_request_body_does_not_leak_into_the_next_request() {
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    let body = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n".repeat(100);
    c.send(&post("/first?read=none", &body));
    c.send(&get("/second"));
    let first = c.read_response().echo();
    assert_eq!(first.must("PATH_INFO"), "/first");
    let second = c.read_response().echo();
    assert_eq!(
        second.must("PATH_INFO"),
        "/second",
        "the unread body was parsed as a request"
    );
}

// ---------------------------------------------------------------------------
// start_response, write(), lazy headers
// ---------------------------------------------------------------------------

#[test]
fn write_callable_output_comes_before_the_iterable() {
    let tmp = TempDir::new("write");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let r = s.get(&format!("/write?mark={mark}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.body_text(), "Hello, write and iterable");
    wait_for_file_containing(&mark, "closed", MARK_TIMEOUT)
        .expect("close() not called after write()");

    let r = s.get(&format!("/write-only?mark={mark}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.framing, Framing::ContentLength(13));
    assert_eq!(r.body_text(), "all via write");
}

#[test]
fn start_response_and_write_work_from_a_thread_the_app_started() {
    let s = Server::start("pep3333:app", &[]);
    let r = s.get("/thread-start");
    assert_eq!(r.status, 200, "{}", r.status_line());
    assert_eq!(r.body_text(), "from a thread, then the iterable");
}

#[test]
fn threads_writing_at_once_each_get_every_piece_through_whole() {
    // Four threads write 500 pieces of 1000 bytes each at the same time to a client that
    // reads nothing for a while: they wait for credit in write() (the loop must wake the
    // app's threads, not the handler's), then every piece arrives whole (pieces may
    // interleave, bytes within one may not), framed correctly.
    let s = Server::start("pep3333:app", &[]);
    let (n, count, size) = (4, 500, 1000);
    let mut c = Conn::connect_small(s.addr(), 4096);
    c.send(&get(&format!(
        "/thread-writers?n={n}&count={count}&size={size}"
    )));
    std::thread::sleep(Duration::from_millis(500));
    let r = c.read_response();
    assert_eq!(r.status, 200, "{}", r.status_line());
    assert_eq!(r.body.len(), n * count * size);
    for (i, piece) in r.body.chunks(size).enumerate() {
        assert!(
            piece.iter().all(|&b| b == piece[0]),
            "piece {i} mixes two writers' bytes"
        );
    }
    for letter in b"abcd" {
        assert_eq!(
            r.body.iter().filter(|&&b| b == *letter).count(),
            count * size
        );
    }
}

#[test]
fn callables_kept_past_their_request_raise_runtime_error_from_any_thread() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(&get("/stale-callables?keep=1"));
    assert_eq!(c.read_response().body_text(), "kept");
    c.send(&get("/stale-callables?use=1"));
    let r = c.read_response();
    assert_eq!(r.status, 200, "{}", r.status_line());
    let text = r.body_text();
    for what in ["write", "start_response", "thread write"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{what}:")))
            .unwrap_or_else(|| panic!("no line for {what} in {text:?}"));
        assert!(
            line.contains("RuntimeError") && line.contains("outside its request"),
            "{line}"
        );
    }
    // (The server guard asserts that nothing panicked.)
}

#[test]
fn the_callables_or_wsgi_input_kept_past_their_request_stay_with_that_request() {
    // A handler hands the same start_response and write to the next request unless
    // something else still holds them: each way of holding one must make the next request
    // get new ones, so what was kept still answers for its own request (or, for a weak
    // reference, is gone), in both modes.
    for threads in ["1", "0"] {
        let s = Server::start("pep3333:app", &["--blocking-threads", threads]);
        let mut c = s.connect();
        for kind in [
            "sr",
            "write",
            "sr-self",
            "write-self",
            "sr-weak",
            "write-weak",
        ] {
            c.send(&get(&format!("/kept-one?keep={kind}")));
            assert_eq!(c.read_response().body_text(), "kept", "{kind}");
            c.send(&get("/kept-one?use=1"));
            let r = c.read_response();
            assert_eq!(r.status, 200, "{kind}: {}", r.status_line());
            let text = r.body_text();
            let ok = if kind.ends_with("-weak") {
                text == format!("{kind}: gone")
            } else {
                text.starts_with(&format!("{kind}: RuntimeError"))
                    && text.contains("outside its request")
            };
            assert!(ok, "blocking threads {threads}: {text}");
        }
        // wsgi.input kept past its request still reads that request's body, and the next
        // request gets its own.
        c.send(&post("/kept-one?keep=input", b"first body"));
        assert_eq!(c.read_response().body_text(), "kept");
        c.send(&post("/kept-one?use=1", b"second"));
        assert_eq!(
            c.read_response().body_text(),
            "input: first body / this request's: second",
            "blocking threads {threads}"
        );
        // And what is handed on when nothing kept it still serves.
        c.send(&post("/echo-body", b"third"));
        assert_eq!(c.read_response().body_text(), "third");
    }
}

#[test]
fn a_write_from_a_thread_after_its_request_ended_raises_and_sends_nothing() {
    // The thread holds write() past the response's end, on a keep-alive connection: its
    // bytes must not follow the response (the client would take them for the next one).
    let tmp = TempDir::new("late-writer");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(&get(&format!("/late-writer?after=0.3&mark={mark}")));
    let r = c.read_response();
    assert_eq!(r.body_text(), "hello");
    let line = wait_for_file_containing(&mark, "late write", MARK_TIMEOUT)
        .unwrap_or_else(|e| panic!("the late write never ran: {e:?}"));
    assert!(
        line.contains("RuntimeError") && line.contains("outside its request"),
        "{line}"
    );
    c.send(&get("/list"));
    let r = c.read_response();
    assert_eq!(r.status, 200, "{}", r.status_line());
    assert!(!contains(&r.raw, b"INJECTED"), "{:?}", show(&r.raw));
    c.expect_open_and_quiet(Duration::from_millis(100));
}

#[test]
fn a_thread_writes_while_the_body_iterable_yields_and_neither_is_refused() {
    // The writes spend the response's credit, so its iterable is set aside now and then
    // (its client reads as fast as it can): write() must still reach a response set aside.
    let s = Server::start("pep3333:app", &[]);
    let r = s.get("/thread-and-gen?n=3000");
    assert_eq!(r.status, 200, "{}", r.status_line());
    let text = r.body_text();
    let tail = &text[text.rfind('|').map_or(0, |i| i.saturating_sub(20))..];
    assert!(text.ends_with("|errors=[]"), "{tail}");
    let writes: usize = text
        .split("|writes=")
        .nth(1)
        .and_then(|t| t.split('|').next())
        .and_then(|n| n.parse().ok())
        .expect("the count of writes");
    assert_eq!(text.matches('G').count(), 3000);
    assert_eq!(text.matches('T').count(), writes, "{tail}");
}

#[test]
fn a_close_that_raises_after_a_whole_body_is_logged_and_the_response_still_ends() {
    let tmp = TempDir::new("close-raise-after");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    let mut burst = get(&format!("/close/raise-after?mark={mark}"));
    burst.extend_from_slice(&get("/list"));
    c.send(&burst);
    let r = c.read_response();
    assert_eq!(r.body_text(), "whole body");
    let r = c.read_response();
    assert_eq!(r.status, 200, "the pipelined request: {}", r.status_line());
    assert!(
        s.wait_for_log("m0test-close-raises", MARK_TIMEOUT),
        "{}",
        s.log_text()
    );
}

#[test]
fn a_malformed_content_length_from_the_app_is_named_in_the_log() {
    let s = Server::start("pep3333:app", &[]);
    for value in ["3x", "-1", "%2B3", "99999999999999999999999"] {
        let r = s.get(&format!("/bad-length?value={value}"));
        assert_eq!(r.status, 500, "{value}: {}", r.status_line());
    }
    assert!(
        s.wait_for_log(
            "invalid Content-Length: it must be a decimal number",
            MARK_TIMEOUT
        ),
        "{}",
        s.log_text()
    );
}

#[test]
fn exc_info_before_headers_are_sent_replaces_them() {
    let s = Server::start("pep3333:app", &[]);
    let r = s.get("/exc-info/before");
    assert_eq!(r.status, 500, "{}", r.status_line());
    assert_eq!(r.header("x-replaced"), Some("yes"));
    assert_eq!(
        r.header("x-original"),
        None,
        "the replaced headers were sent"
    );
    assert_eq!(r.body_text(), "replaced body");
}

#[test]
fn exc_info_after_only_empty_chunks_still_replaces_the_headers() {
    // PEP 3333: headers are not sent before the first non-empty bytestring, so
    // start_response(..., exc_info) after empty chunks replaces them, no raise.
    let tmp = TempDir::new("exc-lazy");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let r = s.get(&format!("/exc-info/lazy?mark={mark}"));
    let seen = read_or_empty(&mark);
    assert_eq!(
        seen.trim(),
        "replaced",
        "start_response(exc_info) raised although nothing was sent"
    );
    assert_eq!(r.status, 503, "{}", r.status_line());
    assert_eq!(r.header("x-replaced"), Some("yes"));
    assert_eq!(r.header("x-original"), None);
    assert_eq!(r.body_text(), "recovered");
}

#[test]
fn exc_info_after_headers_are_sent_reraises_and_the_connection_closes() {
    let tmp = TempDir::new("exc-after");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(&get(&format!("/exc-info/after?mark={mark}")));
    let res = c.try_read_response();
    let err = res.expect_err("a complete response although the app failed after sending headers");
    let head = err
        .head
        .as_ref()
        .expect("the 200 head went out with the first chunk");
    assert_eq!(head.status, 200);
    // PEP 3333: a block is transmitted (or guaranteed to be) before the app
    // is asked for the next one, so "partial" reached the client.
    assert!(
        contains(&err.raw, b"partial"),
        "the first chunk was not sent: {:?}",
        show(&err.raw)
    );
    assert!(!contains(&err.raw, b"should never be sent"));
    let m = wait_for_file_containing(&mark, "reraised", MARK_TIMEOUT).unwrap_or_else(|m| {
        panic!("start_response(exc_info) after headers were sent did not re-raise; mark: {m:?}")
    });
    assert_eq!(
        m.trim(),
        "reraised ValueError m0test-after-headers",
        "it must re-raise exc_info's own exception"
    );
    assert!(
        s.wait_for_log("m0test-after-headers", Duration::from_secs(5)),
        "the error is not logged:\n{}",
        s.log_text()
    );
}

#[test]
fn second_start_response_without_exc_info_is_an_error() {
    let tmp = TempDir::new("twice");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let r = s.get(&format!("/start-response-twice?mark={mark}"));
    let m = read_or_empty(&mark);
    assert!(
        m.starts_with("raised "),
        "a second start_response without exc_info was accepted (mark {m:?})"
    );
    assert_eq!(r.status, 500);
}

#[test]
fn start_response_called_lazily_in_a_generator_sends_headers_with_the_first_chunk() {
    let s = Server::start("pep3333:app", &[]);
    let r = s.get("/lazy");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-lazy"), Some("yes"));
    assert_eq!(r.body_text(), "lazy-body");
}

#[test]
fn error_after_start_response_but_before_any_body_is_still_a_500() {
    // Only empty chunks were yielded, so nothing was sent: the server can and
    // must still answer 500 rather than the headers the app set.
    let s = Server::start("pep3333:app", &[]);
    let r = s.get("/lazy-error-before-body");
    assert_eq!(r.status, 500, "{}", r.status_line());
    assert_eq!(
        r.header("x-lazy"),
        None,
        "headers went out before a non-empty chunk"
    );
    assert!(s.wait_for_log("m0test-lazy-boom-before-body", Duration::from_secs(5)));
}

#[test]
fn empty_chunks_are_skipped() {
    let s = Server::start("pep3333:app", &[]);
    let r = s.get("/empty-chunks");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_text(), "abcdef");
}

#[test]
fn status_reason_phrase_and_headers_are_sent_as_given() {
    let s = Server::start("pep3333:app", &[]);
    let r = s.get("/status-reason");
    assert_eq!(r.status, 299);
    assert_eq!(r.reason, "Custom Reason Phrase");
    assert_eq!(r.header("x-custom"), Some("a value"));
    assert_eq!(r.body_text(), "ok");
}

// ---------------------------------------------------------------------------
// close()
// ---------------------------------------------------------------------------

fn close_count(mark: &str) -> usize {
    read_or_empty(mark)
        .lines()
        .filter(|l| l.starts_with("closed"))
        .count()
}

#[test]
fn close_is_called_once_after_a_normal_response() {
    let tmp = TempDir::new("close-normal");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let r = s.get(&format!("/close/normal?mark={mark}"));
    assert_eq!(r.body_text(), "one-two");
    assert!(
        wait_until(MARK_TIMEOUT, || close_count(&mark) >= 1),
        "close() not called"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(close_count(&mark), 1, "close() called more than once");
}

#[test]
fn close_is_called_when_iteration_raises() {
    let tmp = TempDir::new("close-raise");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(&get(&format!("/close/raise-mid?mark={mark}")));
    let _ = c.try_read_response();
    assert!(
        wait_until(MARK_TIMEOUT, || close_count(&mark) == 1),
        "close() not called after the iterable raised"
    );
}

#[test]
fn close_is_called_for_a_head_request() {
    let tmp = TempDir::new("close-head");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(format!("HEAD /close/normal?mark={mark} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    assert_eq!(c.read_head_response().status, 200);
    assert!(
        wait_until(MARK_TIMEOUT, || close_count(&mark) == 1),
        "close() not called for HEAD"
    );
}

#[test]
fn close_is_called_when_the_client_disconnects_mid_stream() {
    let tmp = TempDir::new("close-disconnect");
    let mark = tmp.file("mark");
    let count = tmp.file("count");
    let s = Server::start("pep3333:app", &[]);
    {
        let mut c = s.connect();
        // 16 GiB if nobody stops it: only close() on disconnect ends it.
        c.send(&get(&format!(
            "/stream?n=262144&size=65536&mark={mark}&count={count}"
        )));
        let mut got = 0usize;
        let mut buf = [0u8; 65536];
        while got < 300_000 {
            match c.stream.read(&mut buf) {
                Ok(0) | Err(_) => panic!("stream ended after {got} bytes"),
                Ok(n) => got += n,
            }
        }
        // Dropping the connection closes it with unread data: an RST.
    }
    let m = wait_for_file_containing(&mark, "closed after", Duration::from_secs(15))
        .unwrap_or_else(|_| {
            panic!(
                "close() not called after the client went away; chunks produced: {}",
                read_or_empty(&count).trim()
            )
        });
    let produced: usize = m
        .trim()
        .trim_start_matches("closed after ")
        .parse()
        .unwrap();
    assert!(
        produced < 262144,
        "the whole stream was produced for a client that was gone"
    );
    // And the server goes on.
    assert_eq!(s.get("/list").body_text(), "abcdefg");
}

// ---------------------------------------------------------------------------
// wsgi.file_wrapper
// ---------------------------------------------------------------------------

fn file_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + i / 997) % 256) as u8).collect()
}

fn check_file_wrapper(query_extra: &str, offset: usize) {
    let tmp = TempDir::new("file-wrapper");
    let path = tmp.file("data.bin");
    let data = file_bytes(300_001);
    std::fs::write(&path, &data).unwrap();
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    for round in 0..2 {
        c.send(&get(&format!(
            "/file-wrapper?path={path}&mark={mark}&offset={offset}{query_extra}"
        )));
        let r = c.read_response();
        assert_eq!(r.status, 200);
        assert!(
            r.body == data[offset..],
            "round {round}: file body differs ({} bytes, expected {})",
            r.body.len(),
            data.len() - offset
        );
        if query_extra.contains("cl=1") {
            assert_eq!(r.framing, Framing::ContentLength(data.len() - offset));
        }
    }
    assert!(
        wait_until(MARK_TIMEOUT, || read_or_empty(&mark)
            .matches("file closed")
            .count()
            == 2),
        "the file wrapper's close() must close the file; mark: {:?}",
        read_or_empty(&mark)
    );
}

#[test]
fn file_wrapper_sends_a_real_file() {
    check_file_wrapper("", 0);
}

#[test]
fn file_wrapper_sends_a_real_file_with_the_apps_content_length() {
    check_file_wrapper("&cl=1", 0);
}

#[test]
fn file_wrapper_starts_at_the_files_current_position() {
    check_file_wrapper("&cl=1", 12_345);
    check_file_wrapper("", 99_999);
}

#[test]
fn file_wrapper_works_with_a_file_like_object_without_fileno() {
    let tmp = TempDir::new("file-wrapper-bytesio");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let r = s.get(&format!("/file-wrapper-bytesio?n=100000&mark={mark}"));
    assert_eq!(r.status, 200);
    let want: Vec<u8> = (0..100_000usize)
        .map(|i| ((i * 7 + i / 256) % 256) as u8)
        .collect();
    assert!(
        r.body == want,
        "BytesIO body differs ({} bytes)",
        r.body.len()
    );
    wait_for_file_containing(&mark, "file closed", MARK_TIMEOUT)
        .expect("file-like object not closed");
}

// ---------------------------------------------------------------------------
// wsgiref.validate
// ---------------------------------------------------------------------------

#[test]
fn wsgiref_validator_finds_no_violation_in_ordinary_requests() {
    let mut s = Server::start("validate:app", &[]);
    let mut c = s.connect();
    let requests: Vec<(Vec<u8>, bool)> = vec![
        (get("/"), false),
        (get("/with/path?and=query&x=%20"), false),
        (b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), true),
        (post("/post", b"form=data&x=1"), false),
        (post_chunked("/chunked", b"chunked body with several pieces", &[3, 5, 7]), false),
        (
            b"PUT /readline HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 17\r\n\r\nline 1\nline 2\nend"
                .to_vec(),
            false,
        ),
        (get("/gen"), false),
        (get("/write"), false),
        (get("/empty"), false),
        (get("/errors"), false),
        (b"OPTIONS /opt HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), false),
        (b"DELETE /del HTTP/1.1\r\nHost: x\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n".to_vec(), false),
        // Last: the server closes an HTTP/1.0 connection after answering.
        (b"GET /http10 HTTP/1.0\r\n\r\n".to_vec(), false),
    ];
    for (req, head) in &requests {
        c.send(req);
        let r = if *head {
            c.read_head_response()
        } else {
            c.read_response()
        };
        assert!(
            (200..300).contains(&r.status),
            "{:?} -> {}\n{}\nlog:\n{}",
            show(req),
            r.status_line(),
            show(&r.body),
            s.log_text()
        );
    }
    drop(c);
    // Stopping lets every iterable be collected: the validator asserts in
    // __del__ when close() was never called.
    let st = s.stop();
    assert_eq!(st.code(), Some(0));
    let log = s.log_text();
    for bad in ["AssertionError", "WSGIWarning", "Traceback"] {
        assert!(
            !log.contains(bad),
            "wsgiref.validate reported a PEP 3333 violation ({bad}):\n{log}"
        );
    }
}

// ---------------------------------------------------------------------------
// Response heads
// ---------------------------------------------------------------------------

/// The head of `r` with its Date value (the clock's) replaced by `-`.
fn head_without_date(r: &Response) -> String {
    let text = String::from_utf8_lossy(&r.raw).into_owned();
    let head = &text[..text.find("\r\n\r\n").expect("a head") + 2];
    head.split_inclusive("\r\n")
        .map(|line| match line.strip_prefix("Date: ") {
            Some(v) if v != "Thu, 01 Jan 2026 00:00:00 GMT\r\n" => "Date: -\r\n",
            _ => line,
        })
        .collect()
}

#[test]
fn each_response_gets_its_own_head_when_its_status_and_header_objects_repeat_or_change() {
    // A handler remembers the last head by the identity of its status and header tuples
    // (constants of the app's code): a head made of those same objects again is sent as
    // encoded before, one made of other objects (some shared, in another order, under
    // another status, equal but new) is its own, and what depends on the request (HEAD,
    // HTTP/1.0, the body's framing) is decided anew every time.
    let s = Server::start("heads:app", &[]);
    let srv = "Date: -\r\nServer: m0serve\r\n";
    let a = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n{srv}");
    let b = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nX-B: b\r\n{srv}"
    );
    let reordered =
        format!("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Type: text/plain\r\n{srv}");
    let own_date = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\
                    Date: Thu, 01 Jan 2026 00:00:00 GMT\r\nServer: heads-app\r\n"
        .to_string();
    let created =
        format!("HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n{srv}");
    let no_content = format!("HTTP/1.1 204 No Content\r\nContent-Type: text/plain\r\n{srv}");
    let stream = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n{srv}"
    );
    // To HEAD, a body of unknown length is not framed at all.
    let stream_head = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n{srv}");
    let sequence: &[(&str, &str, &String, &str)] = &[
        ("GET", "/a", &a, "a"),
        ("GET", "/a", &a, "a"),
        ("GET", "/b", &b, "bb"),
        ("GET", "/a", &a, "a"),
        ("GET", "/a-short", &a, "a"),
        ("GET", "/a", &a, "a"),
        ("GET", "/reordered", &reordered, "r"),
        ("GET", "/reordered", &reordered, "r"),
        ("GET", "/a", &a, "a"),
        ("GET", "/own-date", &own_date, "d"),
        ("GET", "/own-date", &own_date, "d"),
        ("GET", "/a", &a, "a"),
        ("GET", "/created", &created, "c"),
        ("GET", "/created", &created, "c"),
        ("GET", "/a", &a, "a"),
        ("GET", "/no-content", &no_content, ""),
        ("GET", "/no-content", &no_content, ""),
        ("GET", "/a", &a, "a"),
        ("GET", "/subclass", &a, "s"),
        ("GET", "/subclass", &a, "s"),
        ("GET", "/built", &a, "n"),
        ("GET", "/built", &a, "n"),
        ("GET", "/stream", &stream, "xy"),
        ("GET", "/stream", &stream, "xy"),
        ("HEAD", "/a", &a, ""),
        ("GET", "/a", &a, "a"),
        ("HEAD", "/stream", &stream_head, ""),
        ("GET", "/stream", &stream, "xy"),
    ];
    let mut c = s.connect();
    for (i, (method, path, head, body)) in sequence.iter().enumerate() {
        c.send(format!("{method} {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = if *method == "HEAD" {
            c.read_head_response()
        } else {
            c.read_response()
        };
        assert_eq!(
            head_without_date(&r),
            **head,
            "request {i}: {method} {path}"
        );
        assert_eq!(r.body_text(), *body, "request {i}: {method} {path}");
    }
    // HTTP/1.0 without keep-alive, right after the same objects were sent to 1.1: the
    // connection closes, and a body of unknown length is delimited by that close.
    for (path, head, body) in [
        (
            "/a",
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\
                 Connection: close\r\n{srv}"
            ),
            "a",
        ),
        (
            "/stream",
            format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n{srv}"),
            "xy",
        ),
    ] {
        let mut c = s.connect();
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        c.read_response();
        c.send(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes());
        let (raw, closed) = c.read_until_close(Duration::from_secs(10));
        assert!(closed, "HTTP/1.0 {path}: the connection closes");
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (got_head, got_body) = text.split_once("\r\n\r\n").expect("a head");
        let got_head: String = format!("{got_head}\r\n")
            .split_inclusive("\r\n")
            .map(|l| {
                if l.starts_with("Date: ") {
                    "Date: -\r\n"
                } else {
                    l
                }
            })
            .collect();
        assert_eq!(got_head, head, "HTTP/1.0 {path}");
        assert_eq!(got_body, body, "HTTP/1.0 {path}");
    }
}
