//! What the tests that need packages from PyPI share (tests/frameworks.rs, tests/wheel.rs,
//! tests/deploy.rs): the virtualenvs scripts/test.sh prepares and names in M0S_TEST_VENV
//! and M0S_WHEEL_VENV, and small request builders.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{require, Json, ParseJson, Response};

/// The virtualenv named by `var`, or None (with a note saying how to get it) when the
/// variable is unset: the test then returns early. scripts/test.sh always sets it.
fn venv_from(var: &str, what: &str) -> Option<PathBuf> {
    match std::env::var_os(var).filter(|v| !v.is_empty()) {
        None => {
            require(
                false,
                &format!(
                    "{var}: run scripts/test.sh, which creates {what} and sets {var}, or set \
                     it to such a virtualenv yourself"
                ),
            );
            None
        }
        Some(v) => {
            let p = PathBuf::from(v);
            assert!(
                p.join("pyvenv.cfg").is_file(),
                "{var}={} is not a virtualenv (no pyvenv.cfg)",
                p.display()
            );
            Some(p)
        }
    }
}

/// target/test-venv: Flask, Django, Werkzeug, PyYAML, gunicorn (tests/requirements.txt).
pub fn test_venv() -> Option<PathBuf> {
    venv_from(
        "M0S_TEST_VENV",
        "target/test-venv (Flask, Django, Werkzeug, PyYAML, gunicorn)",
    )
}

/// target/wheel-venv: this tree's wheel pip-installed, with Flask and Django.
pub fn wheel_venv() -> Option<PathBuf> {
    venv_from(
        "M0S_WHEEL_VENV",
        "target/wheel-venv (the m0serve wheel installed with pip, plus Flask and Django)",
    )
}

/// Asserts that an app's JSON says it runs in `venv`: `python` (its sys.prefix) is the
/// virtualenv, and every `*_file` member (a framework's `__file__`) lies inside it.
pub fn assert_from_venv(j: &Json, venv: &Path, what: &str) {
    let venv = std::fs::canonicalize(venv).unwrap();
    let prefix = j["python"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no `python` in {j:?}"));
    assert_eq!(
        std::fs::canonicalize(prefix).unwrap(),
        venv,
        "{what}: sys.prefix"
    );
    for (k, v) in j.as_object().unwrap() {
        if k.ends_with("_file") {
            let f = std::fs::canonicalize(v.as_str().unwrap()).unwrap();
            assert!(
                f.starts_with(&venv),
                "{what}: {k} {} is not in {}",
                f.display(),
                venv.display()
            );
        }
    }
}

/// The lowercase hex SHA-256 of `data` (coreutils' sha256sum).
pub fn sha256_hex(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum (coreutils)");
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// The response body as JSON (panics with the response when it is not).
pub fn json(r: &Response) -> Json {
    Json::parse(&r.body_text()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {} {:?}",
            r.status_line(),
            crate::common::show(&r.raw)
        )
    })
}

/// A request with a Content-Length body (HTTP/1.1, Connection: close).
pub fn request_with_body(method: &str, target: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

/// A `GET` with extra header lines (each `Name: value`).
pub fn get_with(target: &str, headers: &[&str]) -> Vec<u8> {
    let mut head = format!("GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// One part of a multipart/form-data body.
pub enum Part<'a> {
    Field(&'a str, &'a str),
    /// name, filename, content type, bytes
    File(&'a str, &'a str, &'a str, &'a [u8]),
}

/// A multipart/form-data body with `boundary`.
pub fn multipart(boundary: &str, parts: &[Part<'_>]) -> Vec<u8> {
    let mut b = Vec::new();
    for p in parts {
        b.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match p {
            Part::Field(name, value) => {
                b.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                        .as_bytes(),
                );
            }
            Part::File(name, filename, ctype, data) => {
                b.extend_from_slice(
                    format!(
                        "Content-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n\
                         Content-Type: {ctype}\r\n\r\n"
                    )
                    .as_bytes(),
                );
                b.extend_from_slice(data);
                b.extend_from_slice(b"\r\n");
            }
        }
    }
    b.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    b
}

/// `body` cut into `pieces` chunks of chunked transfer coding (with the last chunk):
/// each element is one chunk's bytes on the wire, to send one at a time.
pub fn chunked_pieces(body: &[u8], pieces: usize) -> Vec<Vec<u8>> {
    let size = body.len().div_ceil(pieces).max(1);
    let mut out: Vec<Vec<u8>> = body
        .chunks(size)
        .map(|c| {
            let mut w = format!("{:x}\r\n", c.len()).into_bytes();
            w.extend_from_slice(c);
            w.extend_from_slice(b"\r\n");
            w
        })
        .collect();
    out.push(b"0\r\n\r\n".to_vec());
    out
}

/// The sizes of the chunks of a chunked response, from its raw bytes.
pub fn chunk_sizes(raw: &[u8]) -> Vec<usize> {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    let mut pos = head_end;
    let mut sizes = Vec::new();
    loop {
        let line_end = pos
            + raw[pos..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("a chunk size line");
        let line = std::str::from_utf8(&raw[pos..line_end]).unwrap();
        let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return sizes;
        }
        sizes.push(size);
        pos = line_end + 2 + size + 2;
    }
}
