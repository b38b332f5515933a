//! The response head and chunked framing, built on the handler thread into the bytes the
//! loop writes as they are.
//!
//! Integers are formatted into stack buffers (no `format!`, no allocation besides the
//! output `Vec` growing); header names are classified by length first, then
//! `eq_ignore_ascii_case`, like the request parser.

use super::is_token;
use super::parse::{parse_decimal_u64, Version};

/// The `Server` header value when the app sends none.
pub(crate) const SERVER_NAME: &[u8] = b"m0serve";

/// How the response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No content may follow the head (1xx, 204, 304, responses to HEAD).
    NoBody,
    /// Exactly this many bytes follow.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// The body ends when the connection closes (HTTP/1.0 without a known length).
    Close,
}

/// Chooses the framing of a response and whether the connection stays open after it.
///
/// RFC 9112 §6.3 (how a recipient finds the end of the body) read from the sender's side,
/// and §9.3 (persistence).
pub fn decide_framing(
    req_version: Version,
    req_is_head: bool,
    status: u16,
    app_content_length: Option<u64>,
    known_body_len: Option<u64>,
    req_keep_alive: bool,
) -> (Framing, bool) {
    // RFC 9112 §6.3 ¶1: "Any response to a HEAD request and any response with a 1xx
    // (Informational), 204 (No Content), or 304 (Not Modified) status code is always
    // terminated by the first empty line after the header fields". (101 never reaches here:
    // upgrades are refused upstream.)
    if status < 200 || status == 204 || status == 304 || req_is_head {
        return (Framing::NoBody, req_keep_alive);
    }
    // RFC 9112 §6.3 ¶6: the app's Content-Length frames the body; we hold it to it.
    if let Some(n) = app_content_length {
        return (Framing::Length(n), req_keep_alive);
    }
    // A body whose length we know before writing (a list of bytes, a file): we add
    // Content-Length ourselves, which HTTP/1.0 clients can keep alive with.
    if let Some(n) = known_body_len {
        return (Framing::Length(n), req_keep_alive);
    }
    match req_version {
        // RFC 9112 §7: chunked lets a 1.1 connection persist across an unknown length.
        Version::Http11 => (Framing::Chunked, req_keep_alive),
        // RFC 9112 §6.3 ¶8 / §7: a 1.0 client does not understand chunked, so the close of
        // the connection ends the body.
        Version::Http10 => (Framing::Close, false),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// The status string is not `DDD reason` (PEP 3333).
    BadStatus,
    /// A header name is not a token (RFC 9110 §5.1).
    BadHeaderName,
    /// A header value contains CR, LF or NUL (RFC 9110 §5.5).
    BadHeaderValue,
    /// A Content-Length that is not 1*DIGIT (RFC 9110 §8.6), or too large.
    BadContentLength,
    /// A second Content-Length (it would frame the response two ways).
    TwoContentLengths,
    /// PEP 3333: "applications ... must not use hop-by-hop headers" — the server owns them.
    HopByHop,
}

/// What `HeadWriter::header` found, so the caller can fill in what the app left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderKind {
    ContentLength(u64),
    Date,
    Server,
    Other,
}

/// Parses a PEP 3333 status string: three digits, a single space, a reason phrase
/// (RFC 9112 §4: `reason-phrase = 1*( HTAB / SP / VCHAR / obs-text )`, so no CR, LF or other
/// CTL; it may be empty). The code must be 100..=599 (RFC 9110 §15).
pub(crate) fn parse_status(status: &[u8]) -> Result<u16, EncodeError> {
    let [a, b, c, b' ', reason @ ..] = status else {
        return Err(EncodeError::BadStatus);
    };
    if !(a.is_ascii_digit() && b.is_ascii_digit() && c.is_ascii_digit()) {
        return Err(EncodeError::BadStatus);
    }
    let code = u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0');
    if !(100..=599).contains(&code) {
        return Err(EncodeError::BadStatus);
    }
    if reason
        .iter()
        .any(|&b| (b < 0x20 && b != b'\t') || b == 0x7F)
    {
        return Err(EncodeError::BadStatus);
    }
    Ok(code)
}

/// Which of the headers the server would add the app's head already has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) content_length: bool,
    pub(crate) date: bool,
    pub(crate) server: bool,
}

/// Writes one response head into `out`: status line, the app's headers (validated as they
/// come), then the framing headers and the blank line in `finish`.
pub struct HeadWriter<'a> {
    out: &'a mut Vec<u8>,
    /// Where this head starts in `out`, for `abort`.
    start: usize,
    status: u16,
    sent: Sent,
}

impl<'a> HeadWriter<'a> {
    /// Validates `status` and writes `HTTP/1.1 <status>\r\n`. Always an HTTP/1.1 status line:
    /// RFC 9110 §2.5 / RFC 9112 §2.3 let a server answer a 1.0 request with its own (1.1)
    /// version, and the framing rules in `decide_framing` keep a 1.0 client safe.
    pub fn new(out: &'a mut Vec<u8>, status: &[u8]) -> Result<(Self, u16), EncodeError> {
        let code = parse_status(status)?;
        let start = out.len();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status);
        out.extend_from_slice(b"\r\n");
        Ok((
            HeadWriter {
                out,
                start,
                status: code,
                sent: Sent::default(),
            },
            code,
        ))
    }

    /// Goes on with a head whose status line and app header lines are `lines`, as an
    /// earlier writer's `new` and `header` calls for the same status and headers wrote them
    /// (`written`); `status` and `sent` as that writer had them. Validates nothing: the
    /// caller vouches that those calls succeeded on the same input.
    pub(crate) fn resume(out: &'a mut Vec<u8>, lines: &[u8], status: u16, sent: Sent) -> Self {
        let start = out.len();
        out.extend_from_slice(lines);
        HeadWriter {
            out,
            start,
            status,
            sent,
        }
    }

    /// Which server headers the app's headers so far already are.
    pub(crate) fn sent(&self) -> Sent {
        self.sent
    }

    /// What this writer has appended so far: the status line and the app's header lines
    /// until `finish`.
    pub(crate) fn written(&self) -> &[u8] {
        &self.out[self.start..]
    }

    /// Validates one app header and appends `name: value\r\n`. Nothing is written when it
    /// returns an error, so the caller may go on to a 500 after `abort`.
    ///
    /// - name: a token (RFC 9110 §5.1);
    /// - value: no CR, LF or NUL (RFC 9110 §5.5: they would split or truncate the head);
    ///   obs-text and other bytes pass as they are (PEP 3333 latin-1 strings);
    /// - hop-by-hop headers are the server's (PEP 3333 "Other HTTP Features");
    /// - Content-Length must be 1*DIGIT and sent at most once; on a 1xx or 204 it is
    ///   dropped (RFC 9110 §8.6: "A server MUST NOT send a Content-Length header field in
    ///   any response with a status code of 1xx (Informational) or 204 (No Content)").
    pub fn header(&mut self, name: &[u8], value: &[u8]) -> Result<HeaderKind, EncodeError> {
        if !is_token(name) {
            return Err(EncodeError::BadHeaderName);
        }
        if value.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(EncodeError::BadHeaderValue);
        }
        let kind = match name.len() {
            2 if name.eq_ignore_ascii_case(b"te") => return Err(EncodeError::HopByHop),
            4 if name.eq_ignore_ascii_case(b"date") => {
                self.sent.date = true;
                HeaderKind::Date
            }
            6 if name.eq_ignore_ascii_case(b"server") => {
                self.sent.server = true;
                HeaderKind::Server
            }
            7 if name.eq_ignore_ascii_case(b"trailer") || name.eq_ignore_ascii_case(b"upgrade") => {
                return Err(EncodeError::HopByHop)
            }
            10 if name.eq_ignore_ascii_case(b"connection")
                || name.eq_ignore_ascii_case(b"keep-alive") =>
            {
                return Err(EncodeError::HopByHop)
            }
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                // Two Content-Lengths would frame the response two ways (RFC 9112 §6.3 ¶5
                // from the other side).
                if self.sent.content_length {
                    return Err(EncodeError::TwoContentLengths);
                }
                // RFC 9110 §8.6 allows OWS around the value; nothing else.
                let n = parse_decimal_u64(super::trim_ows(value))
                    .ok_or(EncodeError::BadContentLength)?;
                self.sent.content_length = true;
                if self.status < 200 || self.status == 204 {
                    // Reported (the caller must not add one either), not written.
                    return Ok(HeaderKind::ContentLength(n));
                }
                HeaderKind::ContentLength(n)
            }
            16 if name.eq_ignore_ascii_case(b"proxy-connection") => {
                return Err(EncodeError::HopByHop)
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                return Err(EncodeError::HopByHop)
            }
            _ => HeaderKind::Other,
        };
        self.push_header(name, value);
        Ok(kind)
    }

    /// Appends the headers the server owns and the blank line that ends the head (those the
    /// app sent, `sent`, are not written again):
    /// - `Content-Length: n` for `Framing::Length(n)` unless the app sent one;
    /// - `Transfer-Encoding: chunked` for `Framing::Chunked`;
    /// - `Connection: close` when the connection will close; `Connection: keep-alive` when it
    ///   stays open for a 1.0 client (RFC 9112 Appendix C.2.2: 1.0 persistence is opt-in, so
    ///   the answer must say it);
    /// - `Date` (RFC 9110 §6.6.1: an origin server with a clock MUST send it) and
    ///   `Server: m0serve` unless the app sent them.
    pub fn finish(mut self, framing: Framing, keep_alive: bool, req_version: Version, date: &[u8]) {
        match framing {
            Framing::Length(n) if !self.sent.content_length => {
                self.out.extend_from_slice(b"Content-Length: ");
                push_decimal(self.out, n);
                self.out.extend_from_slice(b"\r\n");
            }
            Framing::Chunked => self
                .out
                .extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
            Framing::Length(_) | Framing::NoBody | Framing::Close => {}
        }
        if !keep_alive {
            self.out.extend_from_slice(b"Connection: close\r\n");
        } else if req_version == Version::Http10 {
            self.out.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        if !self.sent.date {
            self.push_header(b"Date", date);
        }
        if !self.sent.server {
            self.push_header(b"Server", SERVER_NAME);
        }
        self.out.extend_from_slice(b"\r\n");
    }

    fn push_header(&mut self, name: &[u8], value: &[u8]) {
        // One reservation instead of up to four growth checks.
        self.out.reserve(name.len() + value.len() + 4);
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
    }
}

/// A whole response the loop sends itself (its refusals, `--static-response`, the metrics
/// port): the status line, `Content-Type`, `Content-Length`, `Connection: close` unless
/// `keep_alive`, `Date`, `Server`, then `body` (none for a HEAD request: `head_only`).
pub(crate) fn simple_response(
    status: u16,
    reason: &str,
    content_type: &str,
    body: &[u8],
    keep_alive: bool,
    head_only: bool,
    date: &[u8],
) -> Vec<u8> {
    simple_response_with(
        status,
        reason,
        content_type,
        b"",
        body,
        keep_alive,
        head_only,
        date,
    )
}

/// `simple_response` with `extra`: header lines, each ending in CRLF, written before the
/// blank line.
#[allow(clippy::too_many_arguments)]
pub(crate) fn simple_response_with(
    status: u16,
    reason: &str,
    content_type: &str,
    extra: &[u8],
    body: &[u8],
    keep_alive: bool,
    head_only: bool,
    date: &[u8],
) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(160 + reason.len() + content_type.len() + extra.len() + body.len());
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(&mut out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\nContent-Type: ");
    out.extend_from_slice(content_type.as_bytes());
    out.extend_from_slice(b"\r\nContent-Length: ");
    push_decimal(&mut out, body.len() as u64);
    if !keep_alive {
        out.extend_from_slice(b"\r\nConnection: close");
    }
    out.extend_from_slice(b"\r\nDate: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\nServer: ");
    out.extend_from_slice(SERVER_NAME);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(extra);
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// Appends one chunk: hex size, CRLF, data, CRLF (RFC 9112 §7.1). Empty data writes
/// nothing: an empty chunk would be the last-chunk and end the body early.
pub(crate) fn write_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    out.reserve(data.len() + 20);
    push_hex(out, data.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends a chunk's size line; the caller sends the `size` bytes and a CRLF after it.
pub(crate) fn write_chunk_size(out: &mut Vec<u8>, size: u64) {
    push_hex(out, size);
    out.extend_from_slice(b"\r\n");
}

/// Appends the last chunk and an empty trailer section: `0\r\n\r\n` (RFC 9112 §7.1).
pub(crate) fn write_last_chunk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"0\r\n\r\n");
}

/// Longest u64 in decimal, in bytes.
const U64_DECIMAL_DIGITS: usize = 20;
/// Longest u64 in hex, in bytes.
const U64_HEX_DIGITS: usize = 16;

/// Appends `n` in decimal, formatted right to left into a stack buffer.
pub(crate) fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; U64_DECIMAL_DIGITS];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends `n` in lower-case hex, without leading zeros.
pub(crate) fn push_hex(out: &mut Vec<u8>, mut n: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; U64_HEX_DIGITS];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = DIGITS[(n & 0xF) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

    #[test]
    fn framing_decisions_table() {
        use Framing::*;
        use Version::*;
        // (version, HEAD?, status, app CL, known len, req keep-alive) -> (framing, keep-alive)
        type Row = (
            (Version, bool, u16, Option<u64>, Option<u64>, bool),
            (Framing, bool),
        );
        let table: &[Row] = &[
            // No body, whatever the app says; persistence as requested.
            ((Http11, false, 204, Some(5), Some(5), true), (NoBody, true)),
            ((Http11, false, 304, Some(5), None, true), (NoBody, true)),
            ((Http11, false, 100, None, None, true), (NoBody, true)),
            ((Http11, false, 199, None, None, false), (NoBody, false)),
            ((Http10, false, 304, None, None, false), (NoBody, false)),
            ((Http11, true, 200, None, None, true), (NoBody, true)),
            (
                (Http11, true, 200, Some(10), Some(10), true),
                (NoBody, true),
            ),
            ((Http10, true, 200, None, None, true), (NoBody, true)),
            ((Http10, true, 200, None, None, false), (NoBody, false)),
            // The app's Content-Length wins over a known length.
            (
                (Http11, false, 200, Some(5), Some(7), true),
                (Length(5), true),
            ),
            (
                (Http11, false, 200, Some(0), None, false),
                (Length(0), false),
            ),
            ((Http10, false, 200, Some(5), None, true), (Length(5), true)),
            (
                (Http10, false, 200, Some(5), None, false),
                (Length(5), false),
            ),
            // A known length: we add Content-Length.
            ((Http11, false, 200, None, Some(7), true), (Length(7), true)),
            ((Http11, false, 500, None, Some(0), true), (Length(0), true)),
            ((Http10, false, 200, None, Some(7), true), (Length(7), true)),
            // Unknown length: chunked on 1.1, close on 1.0.
            ((Http11, false, 200, None, None, true), (Chunked, true)),
            ((Http11, false, 200, None, None, false), (Chunked, false)),
            ((Http10, false, 200, None, None, true), (Close, false)),
            ((Http10, false, 404, None, None, false), (Close, false)),
            ((Http11, false, 205, None, None, true), (Chunked, true)),
        ];
        for &((v, head, status, cl, known, ka), want) in table {
            assert_eq!(
                decide_framing(v, head, status, cl, known, ka),
                want,
                "{v:?} head={head} {status} cl={cl:?} known={known:?} ka={ka}"
            );
        }
    }

    #[test]
    fn parses_status_strings() {
        assert_eq!(parse_status(b"200 OK"), Ok(200));
        assert_eq!(parse_status(b"404 Not Found"), Ok(404));
        assert_eq!(parse_status(b"599 "), Ok(599));
        assert_eq!(parse_status(b"100 Continue"), Ok(100));
        assert_eq!(parse_status(b"200 caf\xe9\tx"), Ok(200));
        for bad in [
            &b""[..],
            b"200",
            b"200OK",
            b"20 OK",
            b"2000 OK",
            b" 200 OK",
            b"abc OK",
            b"099 X",
            b"600 X",
            b"200 OK\r\n",
            b"200 O\nK",
            b"200 O\0K",
            b"200 O\x7fK",
            b"200 O\rK",
            b"-20 X",
        ] {
            assert_eq!(
                parse_status(bad),
                Err(EncodeError::BadStatus),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    fn head(
        status: &[u8],
        headers: &[(&[u8], &[u8])],
        framing: Framing,
        keep_alive: bool,
        version: Version,
    ) -> Vec<u8> {
        let mut out = b"prefix".to_vec();
        let (mut w, _) = HeadWriter::new(&mut out, status).unwrap();
        for (n, v) in headers {
            w.header(n, v).unwrap();
        }
        w.finish(framing, keep_alive, version, DATE);
        assert!(out.starts_with(b"prefix"));
        out.split_off(6)
    }

    #[test]
    fn writes_a_chunked_head() {
        let got = head(
            b"200 OK",
            &[(b"Content-Type", b"text/plain")],
            Framing::Chunked,
            true,
            Version::Http11,
        );
        assert_eq!(
            got,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\
              Date: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: m0serve\r\n\r\n"
        );
    }

    #[test]
    fn writes_content_length_unless_the_app_did() {
        let got = head(
            b"200 OK",
            &[],
            Framing::Length(12345),
            true,
            Version::Http11,
        );
        assert_eq!(
            got,
            b"HTTP/1.1 200 OK\r\nContent-Length: 12345\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: m0serve\r\n\r\n"
        );
        let got = head(
            b"200 OK",
            &[(b"content-length", b"5")],
            Framing::Length(5),
            true,
            Version::Http11,
        );
        assert_eq!(
            got,
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: m0serve\r\n\r\n"
        );
    }

    #[test]
    fn writes_connection_headers() {
        let got = head(b"200 OK", &[], Framing::Close, false, Version::Http10);
        assert_eq!(
            got,
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: m0serve\r\n\r\n"
        );
        let got = head(b"200 OK", &[], Framing::Length(0), true, Version::Http10);
        assert_eq!(
            got,
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: m0serve\r\n\r\n"
        );
        let got = head(
            b"304 Not Modified",
            &[],
            Framing::NoBody,
            false,
            Version::Http11,
        );
        assert_eq!(
            got,
            b"HTTP/1.1 304 Not Modified\r\nConnection: close\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: m0serve\r\n\r\n"
        );
    }

    #[test]
    fn keeps_the_apps_date_and_server() {
        let got = head(
            b"200 OK",
            &[
                (b"Server", b"app/1.0"),
                (b"DATE", b"Mon, 07 Nov 1994 08:49:37 GMT"),
            ],
            Framing::Length(0),
            true,
            Version::Http11,
        );
        assert_eq!(
            got,
            b"HTTP/1.1 200 OK\r\nServer: app/1.0\r\nDATE: Mon, 07 Nov 1994 08:49:37 GMT\r\nContent-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn drops_content_length_on_204_and_1xx() {
        let got = head(
            b"204 No Content",
            &[(b"Content-Length", b"0")],
            Framing::NoBody,
            true,
            Version::Http11,
        );
        assert_eq!(got, b"HTTP/1.1 204 No Content\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: m0serve\r\n\r\n");
        let mut out = Vec::new();
        let (mut w, code) = HeadWriter::new(&mut out, b"103 Early Hints").unwrap();
        assert_eq!(code, 103);
        assert_eq!(
            w.header(b"Content-Length", b"7"),
            Ok(HeaderKind::ContentLength(7))
        );
        // ... but keeps it on 304 and on responses to HEAD (RFC 9110 §8.6 allows both).
        let got = head(
            b"304 Not Modified",
            &[(b"Content-Length", b"9")],
            Framing::NoBody,
            true,
            Version::Http11,
        );
        assert!(got.windows(17).any(|w| w == b"Content-Length: 9"));
    }

    #[test]
    fn validates_header_names() {
        let mut out = Vec::new();
        let (mut w, _) = HeadWriter::new(&mut out, b"200 OK").unwrap();
        for name in [
            &b""[..],
            b"X Y",
            b"X:",
            b"X\r\n",
            b"caf\xe9",
            b"X\0",
            b"(x)",
            b"X\t",
        ] {
            assert_eq!(
                w.header(name, b"v"),
                Err(EncodeError::BadHeaderName),
                "{name:?}"
            );
        }
        assert_eq!(
            w.header(b"X.Custom|Pipe~!#$%&'*+-^_`", b"ok"),
            Ok(HeaderKind::Other)
        );
    }

    #[test]
    fn validates_header_values() {
        let mut out = Vec::new();
        let (mut w, _) = HeadWriter::new(&mut out, b"200 OK").unwrap();
        let before = w.out.len();
        for value in [
            &b"a\rb"[..],
            b"a\nb",
            b"a\0b",
            b"\r\nSet-Cookie: x=1",
            b"x\r",
        ] {
            assert_eq!(
                w.header(b"X", value),
                Err(EncodeError::BadHeaderValue),
                "{value:?}"
            );
        }
        assert_eq!(w.out.len(), before, "a refused header writes nothing");
        assert_eq!(
            w.header(b"X", b"caf\xe9 \t\x01 obs-text"),
            Ok(HeaderKind::Other)
        );
        assert_eq!(w.header(b"X", b""), Ok(HeaderKind::Other));
    }

    #[test]
    fn refuses_hop_by_hop_headers() {
        let mut out = Vec::new();
        let (mut w, _) = HeadWriter::new(&mut out, b"200 OK").unwrap();
        for name in [
            &b"Connection"[..],
            b"keep-alive",
            b"Proxy-Connection",
            b"Transfer-Encoding",
            b"TE",
            b"Trailer",
            b"UPGRADE",
        ] {
            assert_eq!(w.header(name, b"x"), Err(EncodeError::HopByHop), "{name:?}");
        }
        assert_eq!(w.header(b"Trailers", b"x"), Ok(HeaderKind::Other));
        assert_eq!(w.header(b"Tex", b"x"), Ok(HeaderKind::Other));
    }

    #[test]
    fn classifies_and_checks_content_length() {
        let mut out = Vec::new();
        let (mut w, _) = HeadWriter::new(&mut out, b"200 OK").unwrap();
        for value in [
            &b"-1"[..],
            b"+1",
            b"1 2",
            b"0x1",
            b"",
            b"5, 5",
            b"18446744073709551616",
        ] {
            assert_eq!(
                w.header(b"Content-Length", value),
                Err(EncodeError::BadContentLength),
                "{value:?}"
            );
        }
        assert_eq!(
            w.header(b"Content-Length", b" 42 "),
            Ok(HeaderKind::ContentLength(42))
        );
        assert_eq!(
            w.header(b"content-length", b"42"),
            Err(EncodeError::TwoContentLengths)
        );
        assert_eq!(w.header(b"Date", b"x"), Ok(HeaderKind::Date));
        assert_eq!(w.header(b"server", b"x"), Ok(HeaderKind::Server));
    }

    #[test]
    fn a_bad_status_writes_nothing() {
        let mut out = Vec::new();
        assert!(HeadWriter::new(&mut out, b"2000 OK").is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn writes_chunks() {
        let mut out = Vec::new();
        write_chunk(&mut out, b"");
        assert!(out.is_empty());
        write_chunk(&mut out, b"hello");
        write_chunk(&mut out, &[b'x'; 26]);
        write_last_chunk(&mut out);
        let mut want = b"5\r\nhello\r\n1a\r\n".to_vec();
        want.extend_from_slice(&[b'x'; 26]);
        want.extend_from_slice(b"\r\n0\r\n\r\n");
        assert_eq!(out, want);
        // What we write, our own decoder reads back.
        let mut d = super::super::body::ChunkedDecoder::new(1 << 20);
        let mut body = Vec::new();
        assert_eq!(d.decode(&out, &mut body), Ok((out.len(), true)));
        assert_eq!(&body[..5], b"hello");
    }

    #[test]
    fn formats_integers() {
        let dec = |n| {
            let mut v = Vec::new();
            push_decimal(&mut v, n);
            String::from_utf8(v).unwrap()
        };
        let hex = |n| {
            let mut v = Vec::new();
            push_hex(&mut v, n);
            String::from_utf8(v).unwrap()
        };
        for n in [0, 1, 9, 10, 99, 100, 12345, 1 << 32, u64::MAX - 1, u64::MAX] {
            assert_eq!(dec(n), n.to_string());
            assert_eq!(hex(n), format!("{n:x}"));
        }
    }
}
