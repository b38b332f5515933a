//! Tests across `parse` and `body`: gunicorn's request corpus (with every deliberate
//! difference listed and explained), and a self-made fuzz loop.
//!
//! The corpus lives outside the crate, at `../shared/corpus` from the crate root
//! (`M0SERVE_CORPUS` overrides the directory); without it the corpus test is skipped
//! (`tests/common/skip.rs`), and the fuzz loop runs on its built-in seeds only. What m0serve
//! does with each corpus file, where that is not gunicorn's verdict, is one table shared
//! with tests/corpus.rs: tests/data/corpus_verdicts.rs.

use std::path::PathBuf;

/// How a test that cannot run here says so (tests/common/skip.rs, shared with the
/// integration tests).
#[allow(dead_code)]
#[path = "../../tests/common/skip.rs"]
mod skip;

use super::body::{BodyError, ChunkedDecoder};
use super::limits::Limits;
use super::parse::{parse_head, BodyFraming, HeadError, Version, MISSING_HOST};
use super::percent::split_target;

// ---------------------------------------------------------------------------------------
// Corpus files
// ---------------------------------------------------------------------------------------

fn corpus_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("M0SERVE_CORPUS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus")),
    };
    let dir = dir.join("gunicorn-requests");
    dir.join("manifest.json").is_file().then_some(dir)
}

/// Decodes a `.http` file per the corpus README: drop real newlines; `\r\n` -> CRLF;
/// `\0` -> NUL, `\n` -> LF, `\t` -> TAB; `\xHH` -> the byte.
fn decode_http_file(text: &[u8]) -> Vec<u8> {
    let text: Vec<u8> = text.iter().copied().filter(|&b| b != b'\n').collect();
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\\' {
            match text.get(i + 1) {
                Some(b'r') if text.get(i + 2..i + 4) == Some(b"\\n") => {
                    out.extend_from_slice(b"\r\n");
                    i += 4;
                    continue;
                }
                Some(b'0') => out.push(0),
                Some(b'n') => out.push(b'\n'),
                Some(b't') => out.push(b'\t'),
                Some(b'x') => {
                    let hex = std::str::from_utf8(&text[i + 2..i + 4]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 4;
                    continue;
                }
                other => panic!("unexpected escape {other:?}"),
            }
            i += 2;
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// manifest.json, read with serde_json (a dev-dependency).
// ---------------------------------------------------------------------------------------

use serde_json::Value as Json;

/// What the manifest's values are read as; a value of another kind is a broken manifest.
trait ManifestValue {
    fn str(&self) -> &str;
    fn arr(&self) -> &[Json];
    fn num(&self) -> f64;
    /// A manifest string is latin-1 text: each char is one byte.
    fn latin1(&self) -> Vec<u8>;
}

impl ManifestValue for Json {
    fn str(&self) -> &str {
        self.as_str()
            .unwrap_or_else(|| panic!("not a string: {self:?}"))
    }

    fn arr(&self) -> &[Json] {
        self.as_array()
            .unwrap_or_else(|| panic!("not an array: {self:?}"))
    }

    fn num(&self) -> f64 {
        self.as_f64()
            .unwrap_or_else(|| panic!("not a number: {self:?}"))
    }

    fn latin1(&self) -> Vec<u8> {
        self.str()
            .chars()
            .map(|c| u8::try_from(u32::from(c)).expect("latin-1"))
            .collect()
    }
}

#[test]
fn manifest_strings_are_latin1_bytes() {
    let v: Json = serde_json::from_str(r#"{"b": "x\"\u00e9\n"}"#).unwrap();
    assert_eq!(v["b"].latin1(), b"x\"\xe9\n");
}

#[test]
fn http_file_escapes_decode_per_the_readme() {
    assert_eq!(
        decode_http_file(b"GET / HTTP/1.1\\r\\n\nX: a\\0b\\tc\\nd\\xC3\\xa9\\r\\n\n\\r\\n\n"),
        b"GET / HTTP/1.1\r\nX: a\0b\tc\nd\xc3\xa9\r\n\r\n"
    );
}

// ---------------------------------------------------------------------------------------
// Running a buffer of requests through the parser and the decoder
// ---------------------------------------------------------------------------------------

/// What became of a buffer of (possibly pipelined) requests.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Every request in it parsed, bodies included.
    Accepted,
    Head(HeadError),
    Body(BodyError),
    /// A head or body never ends: the connection layer waits, then closes at EOF or timeout
    /// without calling the app.
    Incomplete,
}

struct Parsed {
    method: Vec<u8>,
    target: Vec<u8>,
    version: Version,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    body: Vec<u8>,
    keep_alive: bool,
}

/// Added after the request line when (and only when) a request was refused for lacking
/// Host, so the rest of the case is still exercised.
const INJECTED_HOST_LINE: &[u8] = b"Host: corpus.invalid\r\n";

struct Run {
    parsed: Vec<Parsed>,
    outcome: Outcome,
    leftover: usize,
    host_injected: bool,
}

fn run_requests(bytes: &[u8], limits: &Limits, max_requests: usize) -> Run {
    let mut cur = bytes.to_vec();
    let mut run = Run {
        parsed: Vec::new(),
        outcome: Outcome::Accepted,
        leftover: 0,
        host_injected: false,
    };
    while !cur.is_empty() && run.parsed.len() < max_requests {
        let mut injected = false;
        let head = loop {
            match parse_head(&cur, limits) {
                Ok(Some(head)) => break head,
                Ok(None) => {
                    run.outcome = Outcome::Incomplete;
                    run.leftover = cur.len();
                    return run;
                }
                Err(HeadError::BadRequest(MISSING_HOST)) if !injected => {
                    cur = inject_host(&cur);
                    injected = true;
                    run.host_injected = true;
                }
                Err(e) => {
                    run.outcome = Outcome::Head(e);
                    run.leftover = cur.len();
                    return run;
                }
            }
        };
        let rest = &cur[head.head_len..];
        let (body, used) = match head.framing {
            BodyFraming::None => (Vec::new(), 0),
            BodyFraming::Length(n) => match usize::try_from(n).ok().filter(|&n| n <= rest.len()) {
                Some(n) => (rest[..n].to_vec(), n),
                None => {
                    run.outcome = Outcome::Incomplete;
                    run.leftover = cur.len();
                    return run;
                }
            },
            BodyFraming::Chunked => {
                let mut d = ChunkedDecoder::new(1 << 30);
                let mut out = Vec::new();
                match d.decode(rest, &mut out) {
                    Ok((n, true)) => (out, n),
                    Ok((_, false)) => {
                        run.outcome = Outcome::Incomplete;
                        run.leftover = cur.len();
                        return run;
                    }
                    Err(e) => {
                        run.outcome = Outcome::Body(e);
                        run.leftover = cur.len();
                        return run;
                    }
                }
            }
        };
        run.parsed.push(Parsed {
            method: head.method(&cur).to_vec(),
            target: head.target(&cur).to_vec(),
            version: head.version,
            headers: (0..head.headers.len())
                .filter_map(|i| head.header(&cur, i))
                .filter(|&(n, v)| !(injected && n == b"Host" && v == b"corpus.invalid"))
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect(),
            body,
            keep_alive: head.keep_alive,
        });
        cur = cur[head.head_len + used..].to_vec();
        if !head.keep_alive {
            break;
        }
    }
    run.leftover = cur.len();
    run
}

fn inject_host(buf: &[u8]) -> Vec<u8> {
    let mut start = 0;
    while buf[start..].starts_with(b"\r\n") {
        start += 2;
    }
    let eol = buf[start..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(buf.len(), |p| start + p + 2);
    [&buf[..eol], INJECTED_HOST_LINE, &buf[eol..]].concat()
}

// ---------------------------------------------------------------------------------------
// The corpus and our verdicts
// ---------------------------------------------------------------------------------------

// The verdicts, one table with tests/corpus.rs (`VERDICTS`, `Verdict`, `listed_verdict`).
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/corpus_verdicts.rs"
));

/// Maps gunicorn settings onto `Limits`; `None` when a setting has no m0serve equivalent
/// (then the file must be in `VERDICTS`).
fn limits_for(settings: Option<&Json>) -> Option<Limits> {
    let mut limits = Limits::default();
    let Some(Json::Object(settings)) = settings else {
        return Some(limits);
    };
    for (key, value) in settings {
        match key.as_str() {
            "limit_request_line" => limits.max_request_line = value.num() as usize,
            "limit_request_fields" => limits.max_headers = value.num() as usize,
            // We have no per-field limit; raising gunicorn's (8190) changes nothing for us.
            "limit_request_field_size" if value.num() >= 8190.0 => {}
            _ => return None,
        }
    }
    Some(limits)
}

fn verdict_matches(verdict: Verdict, run: &Run) -> bool {
    let reason = |e: &HeadError| match e {
        HeadError::BadRequest(r) | HeadError::NotImplemented(r) => *r,
        _ => "",
    };
    match (verdict, &run.outcome) {
        (
            Verdict::AsManifest
            | Verdict::Accepted
            | Verdict::AppSeesManifest
            | Verdict::LongLine(_)
            | Verdict::OtherPath(_),
            Outcome::Accepted,
        ) => true,
        (Verdict::Refused(status, why), Outcome::Head(got)) => {
            got.status() == status && (why.is_empty() || reason(got) == why)
        }
        (Verdict::RefusedAny, Outcome::Head(_)) => true,
        (Verdict::BodyRefused, Outcome::Body(_)) => true,
        (Verdict::Incomplete | Verdict::ShortBody, Outcome::Incomplete) => true,
        _ => false,
    }
}

/// Checks a valid file's parsed requests against the manifest; returns the problems.
fn compare_with_manifest(file: &str, entry: &Json, run: &Run) -> Vec<String> {
    let mut problems = Vec::new();
    let want = entry.get("requests").map_or(&[][..], Json::arr);
    if run.parsed.len() != want.len() {
        problems.push(format!(
            "{} requests parsed, manifest has {}",
            run.parsed.len(),
            want.len()
        ));
        return problems;
    }
    for (i, (got, want)) in run.parsed.iter().zip(want).enumerate() {
        let field = |k: &str| want.get(k).unwrap_or_else(|| panic!("{file}: no {k}"));
        let mut check = |what: &str, ok: bool, detail: String| {
            if !ok {
                problems.push(format!("request {i}: {what}: {detail}"));
            }
        };
        check(
            "method",
            got.method == field("method").latin1(),
            format!("{:?}", String::from_utf8_lossy(&got.method)),
        );
        check(
            "target",
            got.target == field("target").latin1(),
            format!("{:?}", String::from_utf8_lossy(&got.target)),
        );
        let version = field("version").arr();
        let want_version = if version[1].num() == 1.0 {
            Version::Http11
        } else {
            Version::Http10
        };
        check(
            "version",
            got.version == want_version,
            format!("{:?}", got.version),
        );
        let (path, query) = split_target(&got.target);
        let want_path = match listed_verdict(file) {
            Some((Verdict::OtherPath(Some(ours)), _)) => ours.to_vec(),
            _ => field("path").latin1(),
        };
        check(
            "path",
            path == want_path,
            format!("{:?}", String::from_utf8_lossy(path)),
        );
        check(
            "query",
            query == field("query").latin1(),
            format!("{:?}", String::from_utf8_lossy(query)),
        );
        let want_headers: Vec<(Vec<u8>, Vec<u8>)> = field("headers")
            .arr()
            .iter()
            .map(|h| (h.arr()[0].latin1(), h.arr()[1].latin1()))
            .collect();
        let got_headers: Vec<(Vec<u8>, Vec<u8>)> = got
            .headers
            .iter()
            .map(|(n, v)| (n.to_ascii_uppercase(), v.clone()))
            .collect();
        check(
            "headers",
            got_headers == want_headers,
            format!("{got_headers:?} vs {want_headers:?}"),
        );
        if let Some(body @ Json::String(_)) = want.get("body_latin1") {
            check(
                "body",
                got.body == body.latin1(),
                format!("{} bytes", got.body.len()),
            );
        }
    }
    // Bytes after the last listed request are only right if we would close there too.
    if run.leftover > 0 && run.parsed.last().is_some_and(|p| p.keep_alive) {
        problems.push(format!(
            "{} bytes left over on a kept-alive connection",
            run.leftover
        ));
    }
    problems
}

#[test]
fn gunicorn_corpus() {
    let dir = corpus_dir();
    if !skip::require_or_skip_in_ci(
        dir.is_some(),
        "the gunicorn corpus in ../shared/corpus (or M0SERVE_CORPUS, the directory holding \
         gunicorn-requests/)",
    ) {
        return;
    }
    let dir = dir.unwrap();
    let manifest = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let manifest: Json = serde_json::from_str(&manifest).expect("manifest.json");
    let entries = manifest.arr();
    assert!(entries.len() >= 137, "{} manifest entries", entries.len());

    let mut failures = Vec::new();
    let mut report = Vec::new();
    let mut seen_differences = Vec::new();
    let (mut as_expected, mut host_only) = (0, Vec::new());
    for entry in entries {
        let file = entry.get("file").unwrap().str();
        let valid = entry.get("kind").unwrap().str() == "valid";
        let bytes = decode_http_file(&std::fs::read(dir.join(file)).unwrap());
        let listed = listed_verdict(file);
        if listed.is_some() {
            seen_differences.push(file);
        }
        let limits = limits_for(entry.get("server_settings"));
        if limits.is_none() && listed.is_none() {
            failures.push(format!(
                "{file}: needs gunicorn settings we cannot map, and is not in VERDICTS"
            ));
            continue;
        }
        let limits = limits.unwrap_or_default();
        let default = if valid {
            Verdict::AsManifest
        } else {
            Verdict::RefusedAny
        };
        let verdict = listed.map_or(default, |(v, _)| v);
        let compared = matches!(verdict, Verdict::AsManifest | Verdict::OtherPath(_));
        let max_requests = if compared {
            entry.get("requests").map_or(0, |r| r.arr().len())
        } else {
            usize::MAX
        };
        let run = run_requests(&bytes, &limits, max_requests);
        if !verdict_matches(verdict, &run) {
            failures.push(format!(
                "{file}: expected {verdict:?}, got {:?}",
                run.outcome
            ));
            continue;
        }
        if compared {
            let problems = compare_with_manifest(file, entry, &run);
            if !problems.is_empty() {
                failures.push(format!("{file}: {}", problems.join("; ")));
                continue;
            }
        }
        if let Verdict::LongLine(line) = verdict {
            let limits = Limits {
                max_request_line: line,
                ..Limits::default()
            };
            let run = run_requests(&bytes, &limits, usize::MAX);
            if !verdict_matches(Verdict::Refused(414, ""), &run) {
                failures.push(format!(
                    "{file}: with {limits:?} expected 414, got {:?}",
                    run.outcome
                ));
                continue;
            }
        }
        as_expected += 1;
        if run.host_injected {
            host_only.push(file);
        }
        if let Some((_, why)) = listed {
            report.push(format!("  {file}: {:?} -- {why}", run.outcome));
        }
    }
    for (file, _, _) in VERDICTS {
        if !seen_differences.contains(file) {
            failures.push(format!(
                "{file}: listed in VERDICTS but not in the manifest"
            ));
        }
    }

    eprintln!(
        "gunicorn corpus: {as_expected}/{} files as expected",
        entries.len()
    );
    eprintln!(
        "deliberate differences from gunicorn's verdicts:\n{}",
        report.join("\n")
    );
    eprintln!(
        "refused only for lacking Host on HTTP/1.1 (RFC 9112 §3.2 MUST 400), checked again with a Host line: {}",
        host_only.join(", ")
    );
    assert!(
        failures.is_empty(),
        "corpus failures:\n{}",
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// Fuzz: mutated inputs into parse_head and ChunkedDecoder, asserting no panic and the
// invariants callers rely on.
// ---------------------------------------------------------------------------------------

/// Inputs per run: enough to reach the odd corners, a few seconds in a debug build.
const FUZZ_ITERATIONS: usize = 200_000;
/// Seeds are cut to this many bytes to keep a debug-build run short.
const FUZZ_SEED_MAX_BYTES: usize = 768;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: &[u8] = b"\r\n \t:;,=\"\\\0\x01\x7f\x80\xff0123456789abcdefABCDEF-+/?#*%@[]";

fn mutate(seed: &[u8], other: &[u8], rng: &mut XorShift) -> Vec<u8> {
    let mut v = seed.to_vec();
    // Zero to three edits: an unedited seed now and then keeps the "whole body decoded"
    // paths exercised.
    for _ in 0..rng.below(4) {
        let len = v.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] = rng.next() as u8;
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => {
                let i = rng.below(len + 1);
                let b = INTERESTING[rng.below(INTERESTING.len())];
                v.insert(i, b);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(16));
                v.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(32));
                let piece = v[i..i + n].to_vec();
                let at = rng.below(v.len() + 1);
                v.splice(at..at, piece);
            }
            5 => v.truncate(rng.below(len + 1)),
            6 if !other.is_empty() => {
                // Splice a piece of another seed in.
                let i = rng.below(other.len());
                let n = 1 + rng.below((other.len() - i).min(64));
                let at = rng.below(len + 1);
                v.splice(at..at, other[i..i + n].iter().copied());
            }
            _ => {
                let i = rng.below(len + 1);
                v.splice(i..i, b"\r\n".iter().copied());
            }
        }
    }
    v
}

/// Checks what callers rely on, for `input` and for its prefix of `prefix_len` bytes (the
/// loop thread parses whatever has arrived): a head that parses whole is `Ok(None)` on
/// every shorter prefix and the same head on every longer one, and "need more" stays "need
/// more" on a prefix. (For a refused head, which error a prefix gets may differ: a long
/// line with a bad byte past the limit is 414 on a prefix, 400 whole; both close.)
fn check_head_invariants(input: &[u8], limits: &Limits, prefix_len: usize) -> Option<usize> {
    let prefix = parse_head(&input[..prefix_len.min(input.len())], limits);
    let head = match parse_head(input, limits) {
        Ok(Some(head)) => head,
        Ok(None) => {
            assert_eq!(prefix, Ok(None), "{input:?} at {prefix_len}");
            return None;
        }
        Err(e) => {
            assert!([400, 414, 431, 501, 505].contains(&e.status()));
            return None;
        }
    };
    assert!(head.head_len <= input.len());
    assert!(head.head_len <= limits.max_head);
    assert!(head.headers.len() <= limits.max_headers);
    let in_head = |s: super::parse::Span| (s.start as usize + s.len as usize) <= head.head_len;
    assert!(in_head(head.method) && in_head(head.target));
    assert!(head
        .headers
        .iter()
        .all(|h| in_head(h.name) && in_head(h.value)));
    for i in [head.content_length, head.content_type]
        .into_iter()
        .flatten()
    {
        assert!(usize::from(i) < head.headers.len());
    }
    if prefix_len < head.head_len {
        assert_eq!(prefix, Ok(None), "{input:?} at {prefix_len}");
    } else {
        assert_eq!(
            prefix.as_ref(),
            Ok(&Some(head.clone())),
            "{input:?} at {prefix_len}"
        );
    }
    // The verdict depends on the head alone, not on what follows it.
    assert_eq!(
        parse_head(&input[..head.head_len], limits),
        Ok(Some(head.clone()))
    );
    Some(head.head_len)
}

fn check_decoder_invariants(input: &[u8], max_body: u64, split: usize) {
    let run = |parts: &[&[u8]]| {
        let mut d = ChunkedDecoder::new(max_body);
        let mut out = Vec::new();
        let mut consumed = 0;
        for part in parts {
            match d.decode(part, &mut out) {
                Ok((n, done)) => {
                    assert!(n <= part.len());
                    consumed += n;
                    if done {
                        return Ok((out, consumed, true));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        assert!(out.len() as u64 <= max_body);
        Ok((out, consumed, false))
    };
    let split = split.min(input.len());
    assert_eq!(
        run(&[input]),
        run(&[&input[..split], &input[split..]]),
        "{input:?} split at {split}"
    );
}

#[test]
fn fuzz_parse_head_and_chunked_decoder_do_not_panic() {
    let mut heads: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\nHost: h\r\n\r\n".to_vec(),
        b"POST /p?q HTTP/1.1\r\nHost: example.com:80\r\nContent-Length: 5\r\nContent-Type: a/b\r\n\r\nhello".to_vec(),
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\nExpect: 100-continue\r\n\r\n".to_vec(),
        b"\r\nGET http://[::1]:80/x HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n".to_vec(),
        b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\nCONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n".to_vec(),
        b"GET /x HTTP/2.0\r\n\r\n".to_vec(),
    ];
    let mut bodies: Vec<Vec<u8>> = vec![
        b"5\r\nhello\r\n0\r\n\r\n".to_vec(),
        b"5;a=\"b\\\"c\" ; d\r\nhello\r\n0;x\r\nT: v\r\nU:\r\n\r\nNEXT".to_vec(),
        b"ffffffffffffffff\r\n".to_vec(),
        b"0000000000000000000001\r\nx\r\n0\r\n\r\n".to_vec(),
    ];
    if let Some(dir) = corpus_dir() {
        for sub in ["valid", "invalid"] {
            let mut names: Vec<_> = std::fs::read_dir(dir.join(sub))
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            names.sort();
            for path in names {
                let bytes = decode_http_file(&std::fs::read(path).unwrap());
                if let Some(i) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                    let body = &bytes[i + 4..];
                    if !body.is_empty() {
                        bodies.push(body[..body.len().min(FUZZ_SEED_MAX_BYTES)].to_vec());
                    }
                }
                heads.push(bytes[..bytes.len().min(FUZZ_SEED_MAX_BYTES)].to_vec());
            }
        }
    }

    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let (mut complete, mut decoded) = (0, 0);
    for i in 0..FUZZ_ITERATIONS {
        if i % 2 == 0 {
            let seed = &heads[rng.below(heads.len())];
            let other = &heads[rng.below(heads.len())];
            let input = mutate(seed, other, &mut rng);
            let limits = if i % 8 == 0 {
                Limits {
                    max_request_line: rng.below(64),
                    max_head: rng.below(256),
                    max_headers: rng.below(6),
                }
            } else {
                Limits::default()
            };
            let prefix_len = rng.below(input.len() + 1);
            if let Some(head_len) = check_head_invariants(&input, &limits, prefix_len) {
                complete += 1;
                let rest = &input[head_len..];
                check_decoder_invariants(rest, 1 << 16, rng.below(rest.len() + 1));
            }
        } else {
            let seed = &bodies[rng.below(bodies.len())];
            let other = &bodies[rng.below(bodies.len())];
            let input = mutate(seed, other, &mut rng);
            let max_body = [0, 5, 1 << 16, 1 << 16][rng.below(4)];
            check_decoder_invariants(&input, max_body, rng.below(input.len() + 1));
            let mut d = ChunkedDecoder::new(max_body);
            if let Ok((_, true)) = d.decode(&input, &mut Vec::new()) {
                decoded += 1;
            }
        }
    }
    // The mutations must leave enough inputs valid to reach past the first checks.
    eprintln!(
        "fuzz: {complete} heads parsed, {decoded} bodies decoded of {FUZZ_ITERATIONS} inputs"
    );
    assert!(
        complete > FUZZ_ITERATIONS / 50,
        "only {complete} heads parsed"
    );
    assert!(
        decoded > FUZZ_ITERATIONS / 100,
        "only {decoded} bodies decoded"
    );
}
