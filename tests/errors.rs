//! Errors: app exceptions before and after the response started, and
//! malformed HTTP (answered 400 with `Connection: close`, the app never
//! called, nothing after the bad request answered). No client input may
//! panic the server (the guard checks the log for a Rust panic on drop).

mod common;

use common::*;
use std::time::Duration;

const LOG_TIMEOUT: Duration = Duration::from_secs(5);

#[test]
fn app_exception_before_start_is_a_500_with_a_logged_traceback_and_the_server_goes_on() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(&get("/error/before-start"));
    let r = c.read_response();
    assert_eq!(r.status, 500, "{}", r.status_line());
    assert!(
        s.wait_for_log("RuntimeError: m0test-boom-before-start", LOG_TIMEOUT),
        "no error in the log:\n{}",
        s.log_text()
    );
    let log = s.log_text();
    assert!(
        log.contains("Traceback (most recent call last)"),
        "no traceback in the log:\n{log}"
    );
    assert!(
        log.contains("pep3333.py"),
        "the traceback does not show the app's frame:\n{log}"
    );

    // The same connection goes on unless the 500 said it would close.
    if !r.connection_has("close") {
        c.send(&get("/list"));
        assert_eq!(c.read_response().body_text(), "abcdefg");
    }
    for _ in 0..3 {
        assert_eq!(s.get("/error/before-start").status, 500);
        assert_eq!(
            s.get("/list").body_text(),
            "abcdefg",
            "the server stopped serving after app errors"
        );
    }
}

#[test]
fn app_that_never_calls_start_response_gets_a_500() {
    let s = Server::start("pep3333:app", &[]);
    let r = s.get("/error/no-start-response");
    assert_eq!(r.status, 500, "{}", r.status_line());
    assert!(
        !contains(&r.body, b"start_response was never called"),
        "the body went out without a status"
    );
    assert_eq!(s.get("/list").status, 200);
}

fn assert_aborted(err: &ReadError, what: &str) {
    let head = err
        .head
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: no response head at all: {err:?}"));
    assert_eq!(head.status, 200, "{what}");
    assert_eq!(
        err.kind,
        ReadErrorKind::Truncated,
        "{what}: the connection must be closed, not left hanging: {err:?}"
    );
    // The client must not be able to mistake the truncated body for a whole one.
    assert!(
        !err.raw.ends_with(b"0\r\n\r\n"),
        "{what}: the chunked body was terminated: {:?}",
        show(&err.raw)
    );
    assert!(
        contains(&err.raw, b"partial-"),
        "{what}: the chunk produced before the error was not sent"
    );
}

#[test]
fn exception_after_the_response_started_closes_the_connection_without_a_last_chunk() {
    let tmp = TempDir::new("after-start");
    let mark = tmp.file("mark");
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    let mut burst = get(&format!("/error/after-start?mark={mark}"));
    burst.extend_from_slice(&get("/list"));
    c.send(&burst);
    let err = c
        .try_read_response()
        .expect_err("a complete response although the app raised mid-body");
    assert_aborted(&err, "chunked");
    assert!(
        !contains(&err.raw, b"abcdefg"),
        "the pipelined request was answered after the abort"
    );
    assert!(
        s.wait_for_log("RuntimeError: m0test-boom-mid-iteration", LOG_TIMEOUT),
        "no error in the log:\n{}",
        s.log_text()
    );
    wait_for_file_containing(&mark, "closed", LOG_TIMEOUT).expect("close() not called");
    assert_eq!(s.get("/list").body_text(), "abcdefg");
}

#[test]
fn exception_after_the_response_started_with_a_content_length_closes_early() {
    let s = Server::start("pep3333:app", &[]);
    let mut c = s.connect();
    c.send(&get("/error/after-start-cl"));
    let err = c
        .try_read_response()
        .expect_err("a complete response although the app raised mid-body");
    assert_aborted(&err, "content-length");
    assert_eq!(
        err.head.as_ref().unwrap().header("content-length"),
        Some("100")
    );
}

// ---------------------------------------------------------------------------
// Malformed requests
// ---------------------------------------------------------------------------

/// Requests a server must refuse with 400 (RFC 9112 / RFC 9110 rule cited).
const MALFORMED: &[(&str, &[u8])] = &[
    // RFC 9112 section 3: request-line = method SP request-target SP HTTP-version.
    ("garbage request line", b"GARBAGE\r\n\r\n"),
    ("request line without a version", b"GET /\r\nHost: x\r\n\r\n"),
    ("request line with an extra part", b"GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n"),
    ("space inside the method", b"G T / HTTP/1.1\r\nHost: x\r\n\r\n"),
    // RFC 9112 section 5: field-line = field-name ":" OWS field-value OWS.
    ("header line without a colon", b"GET / HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n"),
    ("space in a header name", b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n"),
    ("whitespace before the colon", b"GET / HTTP/1.1\r\nHost: x\r\nX-A : v\r\n\r\n"),
    ("empty header name", b"GET / HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n"),
    // RFC 9112 section 5.2: obs-fold; the design answers it with 400.
    ("obsolete line folding", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: one\r\n two\r\n\r\n"),
    // RFC 9110 section 5.5: CR, LF and NUL are never allowed in a field value.
    ("bare CR in a header value", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n"),
    ("NUL in a header value", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n"),
    // RFC 9112 section 6.1: Content-Length and Transfer-Encoding together.
    (
        "Content-Length with Transfer-Encoding",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ),
    // RFC 9112 section 6.3: chunked not final, so the length is unknowable: 400.
    ("chunked not the final coding", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    ("transfer coding without chunked", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: foo\r\n\r\nhello"),
    // RFC 9112 section 6.3: invalid or conflicting Content-Length.
    ("two different Content-Lengths", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nhello"),
    ("negative Content-Length", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\nhello"),
    ("non-numeric Content-Length", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5x\r\n\r\nhello"),
    // RFC 9112 section 7.1: chunk-size = 1*HEXDIG.
    ("bad chunk size", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"),
    ("chunk data longer than its size", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n"),
    // RFC 9112 section 3.2: more than one Host is a 400.
    ("two Host headers", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
];

/// The request sent right after each malformed one on the same connection:
/// it must never be answered (RFC 9112 section 9.6: the server closes).
const FOLLOW_UP: &[u8] = b"GET /follow-up HTTP/1.1\r\nHost: x\r\n\r\n";

fn call_log_lines(path: &str) -> Vec<String> {
    read_or_empty(path).lines().map(|l| l.to_string()).collect()
}

#[test]
fn malformed_requests_get_400_with_connection_close_and_never_reach_the_app() {
    let tmp = TempDir::new("malformed");
    let calls = tmp.file("calls");
    let s = Server::builder("echo:app")
        .env("M0TEST_CALL_LOG", &calls)
        .start();
    let mut failures = Vec::new();
    let mut seen = 0usize;
    for (i, (name, req)) in MALFORMED.iter().enumerate() {
        let mut c = s.connect();
        let mut bytes = req.to_vec();
        bytes.extend_from_slice(FOLLOW_UP);
        c.send(&bytes);
        let (raw, closed) = c.read_until_close(Duration::from_secs(10));
        let mut problems = Vec::new();
        if !raw.starts_with(b"HTTP/1.1 400 ") && !raw.starts_with(b"HTTP/1.0 400 ") {
            problems.push(format!(
                "expected a 400, got {:?}",
                show(&raw[..raw.len().min(200)])
            ));
        } else {
            let head_end = find(&raw, b"\r\n\r\n").map(|p| p + 4).unwrap_or(raw.len());
            let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
            if !head
                .lines()
                .any(|l| l.starts_with("connection:") && l.contains("close"))
            {
                problems.push("the 400 has no `Connection: close`".to_string());
            }
            if contains(&raw[4..], b"HTTP/1.") {
                problems.push(format!("more than one response: {:?}", show(&raw)));
            }
        }
        if !closed {
            problems.push("the connection was not closed".to_string());
        }
        // A well-formed request on a fresh connection, to be sure any call the
        // malformed one caused has been logged before the log is read.
        let sentinel = format!("/sentinel-{i}");
        assert_eq!(s.get(&sentinel).echo().must("PATH_INFO"), sentinel);
        let log = call_log_lines(&calls);
        let new_calls = &log[seen.min(log.len())..];
        seen = log.len();
        if new_calls.len() != 1 || !new_calls[0].contains(&sentinel) {
            problems.push(format!("the app was called: {new_calls:?}"));
        }
        if !problems.is_empty() {
            failures.push(format!("{name} {:?}: {}", show(req), problems.join("; ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} malformed requests mishandled:\n{}",
        failures.len(),
        MALFORMED.len(),
        failures.join("\n")
    );
}

#[test]
fn malformed_request_after_a_good_one_on_the_same_connection() {
    let s = Server::start("echo:app", &[]);
    let mut c = s.connect();
    let mut burst = get("/good");
    burst.extend_from_slice(b"GET /bad HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n");
    burst.extend_from_slice(FOLLOW_UP);
    c.send(&burst);
    assert_eq!(c.read_response().echo().must("PATH_INFO"), "/good");
    let r = c.read_response();
    assert_eq!(r.status, 400);
    assert!(r.connection_has("close"));
    c.expect_closed(Duration::from_secs(5));
}

#[test]
fn garbage_from_clients_never_stops_the_server() {
    let s = Server::start("hello:app", &[]);
    for seed in 0..40u64 {
        let mut c = s.connect();
        let mut bytes = pseudo_random(seed, 1 + (seed as usize * 997) % 20_000);
        if seed % 4 == 0 {
            // Garbage after a plausible start exercises deeper parser states.
            let mut v =
                b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            v.append(&mut bytes);
            bytes = v;
        } else if seed % 4 == 1 {
            let mut v = b"GET / HTTP/1.1\r\nX-".to_vec();
            v.append(&mut bytes);
            bytes = v;
        }
        let _ = c.try_send(&bytes);
        c.shutdown_write();
        let (raw, closed) = c.read_until_close(Duration::from_secs(10));
        assert!(
            closed,
            "seed {seed}: the connection was left open after garbage and EOF"
        );
        if !raw.is_empty() {
            assert!(
                raw.starts_with(b"HTTP/1."),
                "seed {seed}: not an HTTP response: {:?}",
                show(&raw)
            );
        }
    }
    assert_eq!(s.get("/").body, b"Hello, World!");
}

#[test]
fn client_leaving_in_the_middle_of_a_request_does_not_disturb_the_server() {
    let s = Server::start("echo:app", &[]);
    {
        let mut c = s.connect();
        c.send(
            b"POST /partial HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nonly a few bytes",
        );
    }
    {
        let mut c = s.connect();
        c.send(b"GET /partial-head HTTP/1.1\r\nHost: x\r\nX-Unfinished: ");
    }
    {
        let mut c = s.connect();
        c.send(b"POST /partial-chunk HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n100\r\nabc");
    }
    assert_eq!(s.get("/after").echo().must("PATH_INFO"), "/after");
}
