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
//! Every case where this test departs from the manifest is in `POLICIES`
//! below with its reason, so a reader sees each deliberate difference. The
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

/// What to expect of a case, when it is not simply what the manifest says.
#[derive(Clone, Copy, Debug)]
enum Policy {
    /// Not sent, for the reason given.
    Skip(&'static str),
    /// Must be refused and never reach the app; `statuses` are the allowed
    /// refusal codes (empty: any 4xx, 501, 505).
    Refuse(&'static [u16], &'static str),
    /// Either accepted exactly as parsed or refused without calling the app:
    /// the RFCs allow both.
    Either(&'static str),
    /// Accepted, but PATH_INFO is not checked (and the manifest's path is wrong).
    AcceptSkipPath(&'static str),
    /// Either accepted or refused with exactly this status (a size limit whose
    /// default is m0serve's own, not gunicorn's).
    Limit(&'static [u16], &'static str),
    /// An HTTP/1.1 request without Host: the requests before it are answered
    /// as parsed, it gets 400 and the connection closes.
    NoHost(&'static str),
    /// Accepted; the file's body is shorter than its Content-Length, so the
    /// missing bytes are sent as filler and expected in the body.
    PadBody(&'static str),
}

use Policy::*;

impl Policy {
    fn reason(&self) -> &'static str {
        match *self {
            Skip(r)
            | Refuse(_, r)
            | Either(r)
            | AcceptSkipPath(r)
            | Limit(_, r)
            | NoHost(r)
            | PadBody(r) => r,
        }
    }
}

const TE_NOT_IMPLEMENTED: &str = "a transfer coding before chunked that m0serve does not implement (gzip; `identity` \
     is no longer a transfer coding, RFC 9112 section 7): RFC 9112 section 6.1 says 501, the design brief 400; \
     gunicorn hands the app the still-encoded body";
const NO_HOST: &str =
    "an HTTP/1.1 request without Host: RFC 9112 section 3.2 says a server MUST answer 400; \
     gunicorn accepts it";
const PROXY_PROTOCOL: &str =
    "server_settings proxy_protocol: the PROXY protocol is not part of m0serve";
const LOWER_LIMIT: &str =
    "server_settings: a lowered gunicorn header limit; m0serve's limits are its own flags";
const CONNECT_PATH: &str = "CONNECT's authority-form target has no path: PEP 3333 does not define PATH_INFO for it \
     and the manifest's path is urlparse's misreading; the method and headers are still checked, and refusing \
     CONNECT (405/501) is allowed too";

const POLICIES: &[(&str, Policy)] = &[
    // --- valid cases that need a gunicorn setting ---------------------------------
    ("valid/024.http", Skip("server_settings limit_request_line=8200, limit_request_field_size=8210: an 8 KiB request line and header field accepted only with raised gunicorn limits; m0serve's limits are tested with its own flags")),
    ("valid/026.http", Skip("server_settings limit_request_field_size=8210: an 8 KiB header field accepted only with a raised gunicorn limit; m0serve's header limit is tested with its own flag")),
    ("valid/028.http", Refuse(&[400], "server_settings strip_header_spaces: whitespace between a field name and the colon; RFC 9112 section 5.1 says a server MUST answer 400 (the same bytes as invalid/020)")),
    ("valid/031compat.http", Skip("server_settings casefold_http_method: gunicorn upper-cases the method; RFC 9110 section 9.1 makes methods case-sensitive, so m0serve passes them as sent")),
    ("valid/031compat2.http", Either("server_settings permit_unconventional_http_method: `-blargh` is a valid token method (RFC 9110 section 9.1), gunicorn refuses lower case by default")),
    ("valid/040_compat.http", Skip("server_settings header_map=dangerous: gunicorn's opt-in mapping of `_` header names onto `-` names; valid/040 checks the default")),
    ("valid/compat_obs_fold.http", Refuse(&[400], "server_settings permit_obsolete_folding: RFC 9112 section 5.2 lets a server refuse obs-fold with 400, which the design brief chooses")),
    ("valid/compat_obs_fold_huge.http", Refuse(&[400, 431], "server_settings permit_obsolete_folding: RFC 9112 section 5.2 lets a server refuse obs-fold with 400, which the design brief chooses")),
    ("valid/pp_01.http", Skip(PROXY_PROTOCOL)),
    ("valid/pp_02.http", Skip(PROXY_PROTOCOL)),
    ("valid/pp_03.http", Skip(PROXY_PROTOCOL)),
    ("valid/pp_04.http", Skip(PROXY_PROTOCOL)),
    ("valid/pp_05.http", Skip(PROXY_PROTOCOL)),
    // --- valid cases where the RFC is stricter than gunicorn ---------------------------
    ("valid/025.http", Refuse(&[400, 501], TE_NOT_IMPLEMENTED)),
    ("valid/025_line.http", Refuse(&[400, 501], TE_NOT_IMPLEMENTED)),
    ("valid/029.http", Refuse(&[400, 501], TE_NOT_IMPLEMENTED)),
    ("valid/030.http", Refuse(&[400, 501], TE_NOT_IMPLEMENTED)),
    ("valid/rfc9112_smuggle_gzip_chunked_01.http", Refuse(&[400, 501], TE_NOT_IMPLEMENTED)),
    ("valid/rfc9112_smuggle_te_identity_chunked_01.http", Refuse(&[400, 501], TE_NOT_IMPLEMENTED)),
    ("valid/014.http", Either("`\"` is not a URI character (RFC 3986), so RFC 9112 section 3.2 allows a 400; gunicorn accepts it")),
    ("valid/027.http", Either("raw non-ASCII octets are not URI characters (RFC 3986), so RFC 9112 section 3.2 allows a 400; gunicorn accepts them")),
    ("valid/rfc9112_target_authority_connect_01.http", AcceptSkipPath(CONNECT_PATH)),
    ("valid/rfc9112_target_authority_ipv6_01.http", AcceptSkipPath(CONNECT_PATH)),
    // --- valid cases whose manifest entry needs a correction ---------------------------
    // --- valid cases where an HTTP/1.1 request lacks Host ---------------------------
    ("valid/004.http", NoHost(NO_HOST)),
    ("valid/005.http", NoHost(NO_HOST)),
    ("valid/006.http", NoHost(NO_HOST)),
    ("valid/007.http", NoHost(NO_HOST)),
    ("valid/009.http", NoHost(NO_HOST)),
    ("valid/010.http", NoHost(NO_HOST)),
    ("valid/011.http", NoHost(NO_HOST)),
    ("valid/012.http", NoHost(NO_HOST)),
    ("valid/013.http", NoHost(NO_HOST)),
    ("valid/018.http", NoHost(NO_HOST)),
    ("valid/021.http", NoHost(NO_HOST)),
    ("valid/022.http", NoHost(NO_HOST)),
    ("valid/023.http", NoHost(NO_HOST)),
    ("valid/031.http", NoHost(NO_HOST)),
    // Its point, `///` kept in PATH_INFO, is checked with a Host in tests/pep3333.rs
    // (the manifest's `/keeping_slashes` comes from urlparse in gunicorn's test helper).
    ("valid/100.http", NoHost(NO_HOST)),
    ("valid/099.http", PadBody("the file holds 8599 body bytes of the 17914 its Content-Length declares; the rest is sent as filler so the request is complete")),
    // --- invalid cases that need a gunicorn setting ---------------------------------
    ("invalid/010.http", Skip(LOWER_LIMIT)),
    ("invalid/011.http", Skip(LOWER_LIMIT)),
    ("invalid/012.http", Skip(LOWER_LIMIT)),
    ("invalid/013.http", Skip(LOWER_LIMIT)),
    ("invalid/limit_header_default_01.http", Skip(LOWER_LIMIT)),
    ("invalid/040.http", Skip("server_settings header_map=refuse: gunicorn's opt-in refusal of `_` header names; valid/040 checks the default")),
    ("invalid/chunked_07.http", Skip("server_settings header_map=refuse: with the default, `Transfer_Encoding` is not Transfer-Encoding and the request is well formed")),
    ("invalid/pp_01.http", Skip(PROXY_PROTOCOL)),
    ("invalid/pp_02.http", Skip(PROXY_PROTOCOL)),
    ("invalid/pp_03.http", Skip(PROXY_PROTOCOL)),
    ("invalid/019.http", Skip("gunicorn's check of X-Forwarded-Proto against X-Forwarded-Ssl, made because it trusts 127.0.0.1 as a proxy by default: well-formed HTTP; m0serve (which also trusts 127.0.0.1 by default) reads Forwarded and X-Forwarded-For/-Proto only, not X-Forwarded-Ssl, so there is no conflict to refuse")),
    // --- invalid cases the RFCs allow either way ---------------------------------
    ("invalid/003c.http", Either("`-bl` is a valid token method (RFC 9110 section 9.1); gunicorn refuses lower-case methods by default")),
    // --- invalid cases decided by a default size limit ---------------------------------
    ("invalid/006.http", Limit(&[414], "a 4 KiB request line: over gunicorn's default limit; m0serve's default may be higher")),
    ("invalid/007.http", Limit(&[431], "an 8 KiB header field: over gunicorn's default limit; m0serve's default may be higher")),
    ("invalid/008.http", Limit(&[431], "a 12 KiB header section: over gunicorn's default limit; m0serve's default may be higher")),
    ("invalid/009.http", Limit(&[431], "104 header fields: over gunicorn's default of 100; m0serve's default may be higher")),
    ("invalid/017.http", Limit(&[400, 431], "an 8 KiB header field: over gunicorn's default limit, m0serve's may be higher; the request is HTTP/1.1 without Host, so 400 when under the limit (RFC 9112 section 3.2)")),
];

/// The expected parse of an `invalid/` case under `Either` (no manifest entry).
fn invalid_either_expectation(file: &str) -> Expected {
    match file {
        "invalid/003c.http" => Expected {
            method: "-bl".into(),
            path: Some(b"/foo".to_vec()),
            query: String::new(),
            version: "HTTP/1.1".into(),
            headers: vec![],
            body: Some(vec![]),
        },
        _ => panic!("no expectation written for {file}"),
    }
}

fn corpus_dir() -> PathBuf {
    let p = PathBuf::from(CORPUS);
    assert!(
        p.join("manifest.json").is_file(),
        "the gunicorn request corpus is missing at {} (it lives in ../shared/corpus next to the crate; CI has it)",
        p.display()
    );
    p
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
    has_server_settings: bool,
}

fn load_cases() -> Vec<Case> {
    let dir = corpus_dir();
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let manifest = Json::parse(&text).unwrap_or_else(|e| panic!("manifest.json: {e}"));
    let entries = manifest.as_array().expect("manifest.json is a list");
    entries
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
                has_server_settings: !e["server_settings"].is_null(),
            }
        })
        .collect()
}

fn policy(file: &str) -> Option<Policy> {
    POLICIES.iter().find(|(f, _)| *f == file).map(|(_, p)| *p)
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

fn first_is_accepted(o: &Outcome) -> bool {
    o.responses
        .first()
        .is_some_and(|r| (200..300).contains(&r.status))
}

fn run(valid: bool) {
    let cases = load_cases();
    let mut runner = Runner::new(if valid {
        "corpus-valid"
    } else {
        "corpus-invalid"
    });
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in cases.iter().filter(|c| c.valid == valid) {
        let pol = policy(&case.file);
        assert!(
            pol.is_some() || !case.has_server_settings,
            "{} needs gunicorn server_settings: give it a policy with a reason",
            case.file
        );
        if let Some(p) = pol {
            // Visible with --nocapture: every deliberate departure and why.
            eprintln!("{}: {}", case.file, p.reason());
        }
        let problems = match pol {
            Some(Skip(_)) => continue,
            None if valid => {
                let o = runner.exchange(&case.bytes, case.requests.len(), true);
                check_accepted(&o, &case.requests, true)
            }
            None => {
                let o = runner.exchange(&case.bytes, 1, false);
                check_refused(&o, &[])
            }
            Some(Refuse(allowed, _)) => {
                let o = runner.exchange(&case.bytes, 1, false);
                check_refused(&o, allowed)
            }
            Some(Either(_)) | Some(AcceptSkipPath(_)) => {
                let want = if valid {
                    case.requests.clone()
                } else {
                    vec![invalid_either_expectation(&case.file)]
                };
                let o = runner.exchange(&case.bytes, want.len(), valid);
                let check_path = !matches!(pol, Some(AcceptSkipPath(_)));
                if first_is_accepted(&o) {
                    check_accepted(&o, &want, check_path)
                } else {
                    check_refused(&o, &[])
                }
            }
            Some(Limit(statuses, _)) => {
                let o = runner.exchange(&case.bytes, 1, false);
                if first_is_accepted(&o) {
                    let mut p = Vec::new();
                    if o.calls.len() != 1 {
                        p.push(format!(
                            "accepted, but the app was called {} times",
                            o.calls.len()
                        ));
                    }
                    p
                } else {
                    check_refused(&o, statuses)
                }
            }
            Some(NoHost(_)) => {
                let k = case
                    .requests
                    .iter()
                    .position(|r| {
                        r.version == "HTTP/1.1" && !r.headers.iter().any(|(h, _)| h == "HOST")
                    })
                    .unwrap_or_else(|| panic!("{}: every HTTP/1.1 request has a Host", case.file));
                let o = runner.exchange(&case.bytes, k + 1, true);
                check_accepted_then_refused(&o, &case.requests[..k])
            }
            Some(PadBody(_)) => {
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
            let why = pol
                .map(|p| format!(" (policy: {})", p.reason()))
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
fn every_case_decodes_and_every_policy_names_a_real_case() {
    let cases = load_cases();
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
    for c in cases.iter().filter(|c| c.valid) {
        let hostless = c
            .requests
            .iter()
            .any(|r| r.version == "HTTP/1.1" && !r.headers.iter().any(|(h, _)| h == "HOST"));
        let p = policy(&c.file);
        if matches!(p, Some(NoHost(_))) {
            assert!(
                hostless,
                "{} has a NoHost policy but every HTTP/1.1 request has Host",
                c.file
            );
        } else if hostless {
            assert!(
                p.is_some(),
                "{} has an HTTP/1.1 request without Host: give it a policy",
                c.file
            );
        }
    }
    for (file, _) in POLICIES {
        assert!(
            cases.iter().any(|c| c.file == *file),
            "policy for {file}, which is not in the manifest"
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
