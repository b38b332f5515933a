//! gunicorn's request-parser corpus (../shared/corpus/gunicorn-requests, see
//! its README) sent to a real m0serve running tests/apps/echo.py.
//!
//! Valid cases: every request answered 2xx, and the app saw exactly the
//! manifest's method, PATH_INFO (percent-decoded), QUERY_STRING, protocol,
//! headers (as HTTP_* / CONTENT_TYPE / CONTENT_LENGTH, repeats joined) and
//! body. Invalid cases: refused (4xx, or 501/505 where the RFC says so) with
//! `Connection: close`, or the connection closed with nothing sent; the app
//! never called; nothing after the bad request answered.
//!
//! Every case where this test departs from the manifest is in `VERDICTS`
//! (tests/data/corpus_verdicts.rs, one table with the parser's test in src/http/tests.rs)
//! with its reason, so a reader sees each deliberate difference. Where the corpus is
//! absent (a clone without ../shared/corpus) these tests are skipped (`common::require_or_skip_in_ci`). The
//! largest group: gunicorn accepts HTTP/1.1 requests without Host, RFC 9112
//! section 3.2 says a server MUST answer them 400, and m0serve follows the RFC.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const CORPUS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/corpus/gunicorn-requests"
);

// What m0serve does with each file, where that is not gunicorn's verdict: one table with the
// parser's test in src/http/tests.rs (`VERDICTS`, `Verdict`, `listed_verdict`).
include!("data/corpus_verdicts.rs");

/// Whether the file's gunicorn settings change a limit m0serve has as a flag (the request
/// line, the number of header fields): such a file, unless listed, is checked by the
/// parser's test with those limits, not here with the server's defaults.
fn needs_other_limits(settings: &Json) -> bool {
    ["limit_request_line", "limit_request_fields"]
        .iter()
        .any(|k| !settings[*k].is_null())
}

/// Whether the first request of `bytes` is HTTP/1.1 without a Host field (RFC 9112
/// section 3.2: 400).
fn first_lacks_host(bytes: &[u8]) -> bool {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(bytes.len());
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let mut lines = head.split("\r\n");
    let http11 = lines.next().is_some_and(|l| l.ends_with(" http/1.1"));
    http11 && !lines.any(|l| l.starts_with("host:"))
}

/// The corpus: `M0SERVE_CORPUS/gunicorn-requests` or ../shared/corpus beside the checkout;
/// `None` (the test skipped: `require_or_skip_in_ci`) where it is absent, as in a plain
/// clone: it is another project's, never copied here.
fn corpus_dir() -> Option<PathBuf> {
    let p = match std::env::var_os("M0SERVE_CORPUS").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("gunicorn-requests"),
        None => PathBuf::from(CORPUS),
    };
    let found = p.join("manifest.json").is_file();
    require_or_skip_in_ci(
        found,
        "the gunicorn corpus in ../shared/corpus (or M0SERVE_CORPUS, the directory holding \
         gunicorn-requests/)",
    )
    .then_some(p)
}

fn replace_all(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// Decodes a `.http` file into the bytes to send, in the README's order.
fn decode_http(raw: &[u8]) -> Vec<u8> {
    let b: Vec<u8> = raw.iter().copied().filter(|&c| c != b'\n').collect();
    let b = replace_all(&b, br"\r\n", b"\r\n");
    let b = replace_all(&b, br"\0", b"\0");
    let b = replace_all(&b, br"\n", b"\n");
    let b = replace_all(&b, br"\t", b"\t");
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && b.get(i + 1) == Some(&b'x') && i + 4 <= b.len() {
            let hex = std::str::from_utf8(&b[i + 2..i + 4])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(v) = hex {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[derive(Debug, Clone)]
struct Expected {
    method: String,
    /// PATH_INFO as bytes (None: not checked).
    path: Option<Vec<u8>>,
    query: String,
    version: String,
    headers: Vec<(String, String)>,
    /// None: not checked.
    body: Option<Vec<u8>>,
}

struct Case {
    file: String,
    valid: bool,
    bytes: Vec<u8>,
    requests: Vec<Expected>,
    /// Its gunicorn settings change the request-line or header-count limit.
    other_limits: bool,
}

/// The corpus's cases, or `None` where it is absent (skipped).
fn load_cases() -> Option<Vec<Case>> {
    let dir = corpus_dir()?;
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let manifest = Json::parse(&text).unwrap_or_else(|e| panic!("manifest.json: {e}"));
    let entries = manifest.as_array().expect("manifest.json is a list");
    let cases = entries
        .iter()
        .map(|e| {
            let file = e["file"].as_str().expect("file").to_string();
            let raw = std::fs::read(dir.join(&file)).unwrap_or_else(|err| panic!("{file}: {err}"));
            let bytes = decode_http(&raw);
            let valid = match e["kind"].as_str() {
                Some("valid") => true,
                Some("invalid") => false,
                k => panic!("{file}: kind {k:?}"),
            };
            let requests = e["requests"]
                .as_array()
                .map(|rs| {
                    rs.iter()
                        .map(|r| {
                            let v = r["version"].as_array().expect("version");
                            let headers = r["headers"]
                                .as_array()
                                .expect("headers")
                                .iter()
                                .map(|h| {
                                    (
                                        h[0].as_str().unwrap().to_string(),
                                        h[1].as_str().unwrap().to_string(),
                                    )
                                })
                                .collect();
                            Expected {
                                method: r["method"].as_str().unwrap().to_string(),
                                path: Some(percent_decode(&latin1_bytes(
                                    r["path"].as_str().unwrap(),
                                ))),
                                query: r["query"].as_str().unwrap().to_string(),
                                version: format!(
                                    "HTTP/{}.{}",
                                    v[0].as_f64().unwrap(),
                                    v[1].as_f64().unwrap()
                                ),
                                headers,
                                body: r["body_latin1"].as_str().map(latin1_bytes),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            Case {
                file,
                valid,
                bytes,
                requests,
                other_limits: needs_other_limits(&e["server_settings"]),
            }
        })
        .collect();
    Some(cases)
}

/// What happened on the wire and in the app for one case.
struct Outcome {
    responses: Vec<Response>,
    error: Option<ReadError>,
    /// Bytes after the responses read, until the server closed.
    tail: Vec<u8>,
    closed: bool,
    /// The app's calls caused by this case.
    calls: Vec<String>,
}

struct Runner {
    server: Server,
    calls_path: String,
    seen_calls: usize,
    n: usize,
    _tmp: TempDir,
}

impl Runner {
    fn new(name: &str) -> Runner {
        let tmp = TempDir::new(name);
        let calls_path = tmp.file("calls");
        let server = Server::builder("echo:app")
            .env("M0TEST_CALL_LOG", &calls_path)
            .start();
        Runner {
            server,
            calls_path,
            seen_calls: 0,
            n: 0,
            _tmp: tmp,
        }
    }

    fn exchange(&mut self, bytes: &[u8], expect_responses: usize, valid: bool) -> Outcome {
        let mut c = self.server.connect();
        c.set_io_timeout(Duration::from_secs(5));
        let _ = c.try_send(bytes);
        // An incomplete request waits for bytes that never come: end it.
        if !valid && !c.wait_readable(Duration::from_millis(1500)) {
            c.shutdown_write();
        }
        let mut responses = Vec::new();
        let mut error = None;
        while responses.len() < expect_responses.max(1) {
            match c.try_read_response() {
                Ok(r) => {
                    let refused = r.status >= 300;
                    responses.push(r);
                    if refused {
                        break;
                    }
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        c.shutdown_write();
        let (tail, closed) = c.read_until_close(Duration::from_secs(5));
        // A well-formed request on a fresh connection: once it is answered,
        // every call the case caused has been logged.
        self.n += 1;
        let sentinel = format!("/corpus-sentinel-{}", self.n);
        let r = self.server.get(&sentinel);
        assert_eq!(
            r.status,
            200,
            "the server stopped answering well-formed requests; log:\n{}",
            self.server.log_text()
        );
        let log: Vec<String> = read_or_empty(&self.calls_path)
            .lines()
            .map(|l| l.to_string())
            .collect();
        let mut calls: Vec<String> = log[self.seen_calls.min(log.len())..].to_vec();
        self.seen_calls = log.len();
        assert!(
            calls.last().is_some_and(|l| l.contains(&sentinel)),
            "sentinel call missing from {calls:?}"
        );
        calls.pop();
        Outcome {
            responses,
            error,
            tail,
            closed,
            calls,
        }
    }
}

fn check_accepted(o: &Outcome, want: &[Expected], check_path: bool) -> Vec<String> {
    let mut p = Vec::new();
    if let Some(e) = &o.error {
        p.push(format!(
            "read error after {} responses: {e:?}",
            o.responses.len()
        ));
    }
    if o.responses.len() != want.len() {
        p.push(format!(
            "{} responses, expected {}",
            o.responses.len(),
            want.len()
        ));
    }
    for (i, (r, w)) in o.responses.iter().zip(want).enumerate() {
        if !(200..300).contains(&r.status) {
            p.push(format!(
                "request {i}: {} {:?}",
                r.status_line(),
                show(&r.body)
            ));
            continue;
        }
        let text = String::from_utf8_lossy(&r.body);
        let Ok(json) = Json::parse(&text) else {
            p.push(format!(
                "request {i}: body is not the echo JSON: {:?}",
                show(&r.body)
            ));
            continue;
        };
        let cgi: BTreeMap<String, String> = json["cgi"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("<non-str>").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let get = |k: &str| cgi.get(k).cloned().unwrap_or_else(|| "<absent>".into());
        if get("REQUEST_METHOD") != w.method {
            p.push(format!(
                "request {i}: REQUEST_METHOD {:?}, expected {:?}",
                get("REQUEST_METHOD"),
                w.method
            ));
        }
        if let (true, Some(path)) = (check_path, &w.path) {
            let want_path = latin1_string(path);
            if get("PATH_INFO") != want_path {
                p.push(format!(
                    "request {i}: PATH_INFO {:?}, expected {want_path:?}",
                    get("PATH_INFO")
                ));
            }
        }
        if get("QUERY_STRING") != w.query {
            p.push(format!(
                "request {i}: QUERY_STRING {:?}, expected {:?}",
                get("QUERY_STRING"),
                w.query
            ));
        }
        if get("SERVER_PROTOCOL") != w.version {
            p.push(format!(
                "request {i}: SERVER_PROTOCOL {:?}, expected {:?}",
                get("SERVER_PROTOCOL"),
                w.version
            ));
        }
        let seen: BTreeMap<String, String> = cgi
            .iter()
            .filter(|(k, _)| {
                k.starts_with("HTTP_") || *k == "CONTENT_TYPE" || *k == "CONTENT_LENGTH"
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let want_headers = expected_header_vars(&w.headers);
        if seen != want_headers {
            p.push(format!(
                "request {i}: headers {seen:?}, expected {want_headers:?}"
            ));
        }
        if let Some(body) = &w.body {
            let got = latin1_bytes(json["body"].as_str().unwrap_or(""));
            if &got != body {
                p.push(format!(
                    "request {i}: body {:?}, expected {:?}",
                    show(&got),
                    show(body)
                ));
            }
        }
    }
    if !o.tail.is_empty() {
        p.push(format!(
            "bytes after the expected responses: {:?}",
            show(&o.tail)
        ));
    }
    if !o.closed {
        p.push("the connection was not closed after the client's EOF".into());
    }
    if o.calls.len() != want.len() {
        p.push(format!(
            "the app was called {} times, expected {}: {:?}",
            o.calls.len(),
            want.len(),
            o.calls
        ));
    }
    p
}

fn check_refused(o: &Outcome, allowed: &[u16]) -> Vec<String> {
    let mut p = Vec::new();
    match (o.responses.first(), &o.error) {
        (Some(r), _) => {
            let ok = if allowed.is_empty() {
                (400..500).contains(&r.status) || r.status == 501 || r.status == 505
            } else {
                allowed.contains(&r.status)
            };
            if !ok {
                p.push(format!(
                    "answered {} (allowed: {})",
                    r.status_line(),
                    if allowed.is_empty() {
                        "4xx, 501, 505".to_string()
                    } else {
                        format!("{allowed:?}")
                    }
                ));
            }
            if !r.connection_has("close") {
                p.push(format!(
                    "the refusal has no `Connection: close`: {:?}",
                    r.headers
                ));
            }
            if o.responses.len() > 1 {
                p.push("more than one response".into());
            }
        }
        (None, Some(e)) if e.kind == ReadErrorKind::ClosedBeforeResponse => {}
        (None, e) => p.push(format!("neither a response nor a clean close: {e:?}")),
    }
    if !o.tail.is_empty() {
        p.push(format!(
            "bytes after the refusal (the rest of the input was answered?): {:?}",
            show(&o.tail)
        ));
    }
    if !o.closed {
        p.push("the connection was not closed".into());
    }
    if !o.calls.is_empty() {
        p.push(format!("the app was called: {:?}", o.calls));
    }
    p
}

/// The first `want.len()` responses answer `want` as parsed; the next one is a
/// 400 refusal, after which the connection closes.
fn check_accepted_then_refused(o: &Outcome, want: &[Expected]) -> Vec<String> {
    let n = want.len().min(o.responses.len());
    let accepted = Outcome {
        responses: o.responses[..n].to_vec(),
        error: None,
        tail: Vec::new(),
        closed: true,
        calls: o.calls.clone(),
    };
    let refused = Outcome {
        responses: o.responses[n..].to_vec(),
        error: o.error.clone(),
        tail: o.tail.clone(),
        closed: o.closed,
        calls: Vec::new(),
    };
    let mut p = check_accepted(&accepted, want, true);
    p.extend(check_refused(&refused, &[400]));
    p
}

/// `n` requests answered 2xx and each reaching the app once, not compared with the
/// manifest (`Verdict::Accepted`).
fn check_answered(o: &Outcome, n: usize) -> Vec<String> {
    let mut p = Vec::new();
    if o.responses.len() != n || !o.responses.iter().all(|r| (200..300).contains(&r.status)) {
        let statuses: Vec<u16> = o.responses.iter().map(|r| r.status).collect();
        p.push(format!(
            "answered {statuses:?} ({:?}), expected {n} 2xx",
            o.error
        ));
    }
    if o.calls.len() != n {
        p.push(format!(
            "the app was called {} times, expected {n}",
            o.calls.len()
        ));
    }
    if !o.tail.is_empty() {
        p.push(format!("bytes after the responses: {:?}", show(&o.tail)));
    }
    p
}

fn run(valid: bool) {
    let Some(cases) = load_cases() else {
        return;
    };
    let mut runner = Runner::new(if valid {
        "corpus-valid"
    } else {
        "corpus-invalid"
    });
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in cases.iter().filter(|c| c.valid == valid) {
        let listed = listed_verdict(&case.file);
        if let Some((_, why)) = listed {
            // Visible with --nocapture: every deliberate departure and why.
            eprintln!("{}: {why}", case.file);
        } else if case.other_limits {
            eprintln!(
                "{}: not sent: its gunicorn limits are checked by the parser's test",
                case.file
            );
            continue;
        }
        let verdict = listed.map(|(v, _)| v);
        // HTTP/1.1 without Host: the requests before it answered, it refused with 400.
        let hostless = if valid {
            case.requests.iter().position(|r| {
                r.version == "HTTP/1.1" && !r.headers.iter().any(|(h, _)| h == "HOST")
            })
        } else {
            first_lacks_host(&case.bytes).then_some(0)
        };
        let head_refused = matches!(
            verdict,
            Some(
                Verdict::Refused(..)
                    | Verdict::RefusedAny
                    | Verdict::BodyRefused
                    | Verdict::Incomplete
            )
        );
        let problems = match (hostless, verdict) {
            (Some(_), Some(Verdict::Refused(status, _))) => {
                // Which comes first, the missing Host or the other fault, is the parser's
                // order: either status.
                let o = runner.exchange(&case.bytes, 1, false);
                check_refused(&o, &[400, status])
            }
            (Some(k), _) if !head_refused => {
                let o = runner.exchange(&case.bytes, k + 1, true);
                if valid {
                    check_accepted_then_refused(&o, &case.requests[..k])
                } else {
                    check_refused(&o, &[400])
                }
            }
            (_, None) if valid => {
                let o = runner.exchange(&case.bytes, case.requests.len(), true);
                check_accepted(&o, &case.requests, true)
            }
            (_, None)
            | (_, Some(Verdict::RefusedAny | Verdict::BodyRefused | Verdict::Incomplete)) => {
                let o = runner.exchange(&case.bytes, 1, false);
                check_refused(&o, &[])
            }
            (_, Some(Verdict::Refused(status, _))) => {
                let o = runner.exchange(&case.bytes, 1, false);
                check_refused(&o, &[status])
            }
            (_, Some(Verdict::AsManifest | Verdict::AppSeesManifest | Verdict::OtherPath(_))) => {
                let o = runner.exchange(&case.bytes, case.requests.len(), true);
                let check_path = !matches!(verdict, Some(Verdict::OtherPath(_)));
                check_accepted(&o, &case.requests, check_path)
            }
            (_, Some(Verdict::Accepted | Verdict::LongLine(_))) => {
                let n = case.requests.len().max(1);
                let o = runner.exchange(&case.bytes, n, valid);
                check_answered(&o, n)
            }
            (_, Some(Verdict::ShortBody)) => {
                assert_eq!(case.requests.len(), 1, "{}", case.file);
                let mut want = case.requests.clone();
                let declared: usize = want[0]
                    .headers
                    .iter()
                    .find(|(k, _)| k == "CONTENT-LENGTH")
                    .map(|(_, v)| v.parse().unwrap())
                    .expect("a Content-Length");
                let body = want[0].body.clone().expect("a body");
                assert!(declared > body.len(), "{}: nothing to pad", case.file);
                let filler = vec![b'Z'; declared - body.len()];
                let mut bytes = case.bytes.clone();
                bytes.extend_from_slice(&filler);
                let mut full = body;
                full.extend_from_slice(&filler);
                want[0].body = Some(full);
                let o = runner.exchange(&bytes, 1, true);
                check_accepted(&o, &want, true)
            }
        };
        ran += 1;
        if !problems.is_empty() {
            let why = listed
                .map(|(v, why)| format!(" (verdict {v:?}: {why})"))
                .unwrap_or_default();
            failures.push(format!(
                "{}{why}:\n    {}",
                case.file,
                problems.join("\n    ")
            ));
        }
    }
    assert!(ran > 30, "only {ran} cases ran");
    assert!(
        failures.is_empty(),
        "{} of {ran} {} cases failed:\n{}",
        failures.len(),
        if valid { "valid" } else { "invalid" },
        failures.join("\n")
    );
}

#[test]
fn valid_cases_reach_the_app_exactly_as_parsed() {
    run(true);
}

#[test]
fn invalid_cases_are_refused_and_never_reach_the_app() {
    run(false);
}

#[test]
fn every_case_decodes_and_every_verdict_names_a_real_case() {
    let Some(cases) = load_cases() else {
        return;
    };
    assert_eq!(cases.len(), 137, "the manifest lists 137 files");
    assert_eq!(cases.iter().filter(|c| c.valid).count(), 63);
    for c in &cases {
        assert!(
            !c.bytes.contains(&b'\\'),
            "{}: a backslash survived decoding",
            c.file
        );
        if c.valid {
            assert!(
                !c.requests.is_empty(),
                "{}: a valid case without requests",
                c.file
            );
        }
    }
    for (file, _, _) in VERDICTS {
        assert!(
            cases.iter().any(|c| c.file == *file),
            "a verdict for {file}, which is not in the manifest"
        );
    }
    // Spot-check the decoder against the README's rules.
    let c = cases
        .iter()
        .find(|c| c.file == "invalid/chunked_14.http")
        .unwrap();
    assert!(contains(&c.bytes, b"5;ext=val\rue\r\n"));
    let c = cases.iter().find(|c| c.file == "invalid/005.http").unwrap();
    assert!(contains(&c.bytes, b"ba\0z: bar\r\n"));
}

// The harness's own pieces that only this file leans on heavily.

#[test]
fn json_reader_reads_what_python_writes() {
    let j = Json::parse(
        r#"{"a": [1, -2.5e3, true, false, null], "s": "x\u00e9\ud83d\ude00\n\"", "o": {}}"#,
    )
    .unwrap();
    assert_eq!(j["a"][1].as_f64(), Some(-2500.0));
    assert_eq!(j["s"].as_str(), Some("x\u{e9}\u{1F600}\n\""));
    assert!(j["missing"].is_null());
    assert!(Json::parse("[1,]").is_err());
    assert!(Json::parse("{\"a\":1} x").is_err());
}

#[test]
fn percent_decoding_is_bytewise() {
    assert_eq!(
        percent_decode(b"/a%20b%2f%E9%zz%"),
        b"/a b/\xe9%zz%".to_vec()
    );
}

#[test]
fn repeated_headers_join_like_pep3333() {
    let h: Vec<(String, String)> = [
        ("Cookie", "a=1"),
        ("X-A", "1"),
        ("cookie", "b=2"),
        ("x-a", "2"),
        ("Content-Type", "t/p"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let m = expected_header_vars(&h);
    assert_eq!(m["HTTP_COOKIE"], "a=1; b=2");
    assert_eq!(m["HTTP_X_A"], "1,2");
    assert_eq!(m["CONTENT_TYPE"], "t/p");
}
