//! The request head: httparse over the connection's own buffer, byte ranges instead of
//! copies, and the RFC 9112 framing rules httparse leaves to its caller.
//!
//! Cost per request on the loop thread: one httparse pass, one pass over the header list
//! that classifies the few names the server acts on (length first, then
//! `eq_ignore_ascii_case`, so most names cost one integer compare), and one allocation: the
//! `Vec` of spans, sized to the header count. httparse writes into an uninitialised stack
//! array, so an unused header slot costs nothing: with 100 slots an `EMPTY_HEADER` array
//! cost ~290 more instructions per request (callgrind, release; a ten-header browser
//! request is ~2,400 instructions in httparse and ~3,700 in all of `parse_head`, the rest
//! being the span `Vec`, the header classification and the Host check).
//!
//! Strictness is deliberate: a lenient parser behind a proxy is a request-smuggling hole
//! (RFC 9112 §11.2). Every rejection below names the RFC text it follows.

use std::mem::MaybeUninit;

use super::limits::{Limits, MAX_HEADERS_CAP};
use super::{is_token, trim_ows};

/// Empty lines (CRLF) skipped before a request line (RFC 9112 §2.2 allows "at least one";
/// some clients send a CRLF after a POST body). More is not a client bug but a stream of
/// garbage, answered with 400 instead of being skipped forever.
pub(crate) const MAX_LEADING_EMPTY_LINES: usize = 4;
/// Spans are `u32` offsets, so no head may be longer than this, in bytes, whatever the
/// configured `max_head`.
const MAX_HEAD_CAP_BYTES: usize = u32::MAX as usize;
/// `"HTTP/1.1"`: httparse accepts only this exact shape, in bytes.
const VERSION_LEN_BYTES: usize = 8;

/// A byte range of the buffer that was parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub(crate) start: u32,
    pub(crate) len: u32,
}

impl Span {
    /// The bytes of this span in `buf`; empty if `buf` is not the buffer it came from and is
    /// too short (never panics).
    #[inline]
    pub fn get<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        let start = self.start as usize;
        match start.checked_add(self.len as usize) {
            Some(end) => buf.get(start..end).unwrap_or(&[]),
            None => &[],
        }
    }

    /// The span of `part`, which must be a sub-slice of `buf` that ends within the head
    /// (so within `MAX_HEAD_CAP_BYTES`, which keeps the casts lossless).
    #[inline]
    fn of(buf: &[u8], part: &[u8]) -> Span {
        Span {
            start: offset_in(buf, part) as u32,
            len: part.len() as u32,
        }
    }
}

/// Offset of the sub-slice `part` in `buf` (both come from the same allocation: httparse
/// only returns sub-slices of what it was given).
#[inline]
fn offset_in(buf: &[u8], part: &[u8]) -> usize {
    (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderSpan {
    pub name: Span,
    pub value: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// How the request body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head. Every `Span` is an offset into the buffer given to `parse_head`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    pub method: Span,
    pub target: Span,
    pub(crate) version: Version,
    /// In the order sent.
    pub headers: Vec<HeaderSpan>,
    /// Bytes of the head, leading empty lines and the blank line included: the body (or the
    /// next pipelined request) starts at `buf[head_len..]`.
    pub head_len: usize,
    pub(crate) framing: BodyFraming,
    /// HTTP/1.1: true unless `Connection: close`; HTTP/1.0: only with `Connection: keep-alive`
    /// (RFC 9112 §9.3).
    pub keep_alive: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request (RFC 9110 §10.1.1).
    pub(crate) expect_continue: bool,
    /// An HTTP/1.1 GET asking to become a WebSocket (`Connection: upgrade` and `Upgrade:
    /// websocket`, RFC 6455 §4.1): the connection's last request, since its bytes after the
    /// head are the app's once it takes the socket (`keep_alive` is false).
    pub(crate) websocket: bool,
    /// Index into `headers` of the Content-Type header, if any (at most one is accepted).
    pub(crate) content_type: Option<u16>,
    /// Index into `headers` of the Content-Length header, if any (at most one is accepted).
    pub(crate) content_length: Option<u16>,
}

impl Head {
    #[cfg(test)]
    pub(crate) fn method<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        self.method.get(buf)
    }

    #[cfg(test)]
    pub(crate) fn target<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        self.target.get(buf)
    }

    #[cfg(test)]
    /// RFC 9110 §9.3.2: HEAD gets the GET response head without content. Methods are
    /// case-sensitive (RFC 9110 §9.1), so `head` is not HEAD.
    pub(crate) fn is_head(&self, buf: &[u8]) -> bool {
        self.method.get(buf) == b"HEAD"
    }

    /// The value of the first header named `name` (lower case; names are compared without
    /// regard to case).
    pub(crate) fn header_value<'a>(&self, buf: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.get(buf).eq_ignore_ascii_case(name))
            .map(|h| h.value.get(buf))
    }

    #[cfg(test)]
    /// Name and value of header `i` (in the order sent), or `None` past the end.
    pub(crate) fn header<'a>(&self, buf: &'a [u8], i: usize) -> Option<(&'a [u8], &'a [u8])> {
        self.headers
            .get(i)
            .map(|h| (h.name.get(buf), h.value.get(buf)))
    }
}

/// Why a head was refused. `status()` is the one place these map to status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// 400; the str is a short reason for the log.
    BadRequest(&'static str),
    /// 414: the request line is longer than `Limits::max_request_line`.
    UriTooLong,
    /// 431: the head is longer than `Limits::max_head`, or has more than `max_headers` fields.
    HeadersTooLarge,
    /// 501: Transfer-Encoding names a coding this server does not implement.
    NotImplemented(&'static str),
    /// 505: a well-formed `HTTP/x.y` with x >= 2.
    VersionNotSupported,
}

impl HeadError {
    pub(crate) fn status(&self) -> u16 {
        match self {
            HeadError::BadRequest(_) => 400,
            HeadError::UriTooLong => 414,
            HeadError::HeadersTooLarge => 431,
            HeadError::NotImplemented(_) => 501,
            HeadError::VersionNotSupported => 505,
        }
    }

    /// The reason phrase that goes with `status()` (RFC 9110 §15, RFC 6585 §5).
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            HeadError::BadRequest(_) => "Bad Request",
            HeadError::UriTooLong => "URI Too Long",
            HeadError::HeadersTooLarge => "Request Header Fields Too Large",
            HeadError::NotImplemented(_) => "Not Implemented",
            HeadError::VersionNotSupported => "HTTP Version Not Supported",
        }
    }

    #[cfg(test)]
    /// A short description for the log.
    pub(crate) fn detail(&self) -> &'static str {
        match self {
            HeadError::BadRequest(why) | HeadError::NotImplemented(why) => why,
            HeadError::UriTooLong => "request line too long",
            HeadError::HeadersTooLarge => "request head too large or too many header fields",
            HeadError::VersionNotSupported => "HTTP major version not supported",
        }
    }
}

/// The 400 reason for an HTTP/1.1 request without Host (a constant, so that callers and tests
/// can tell this case apart without matching on free text).
pub(crate) const MISSING_HOST: &str = "missing Host header";

fn bad(why: &'static str) -> HeadError {
    HeadError::BadRequest(why)
}

/// Parses the request head at the start of `buf`.
///
/// `Ok(None)`: need more bytes (and the buffer is still within the limits).
/// `Ok(Some(head))`: a whole head; the body or the next request starts at `head.head_len`.
/// `Err(e)`: refuse with `e.status()` and close the connection.
///
/// Incremental in the only way httparse is: call again with the same buffer, grown.
/// Any prefix of a valid head gives `Ok(None)`, and the parse stops at the first head
/// (bytes after it are the body or pipelined requests, never looked at). For a head that
/// is refused, which error comes can depend on how much has arrived (a request line over
/// the limit with a bad byte past the limit is 414 early, 400 if it arrives whole); every
/// error closes the connection alike.
pub fn parse_head(buf: &[u8], limits: &Limits) -> Result<Option<Head>, HeadError> {
    let max_head = limits.max_head.min(MAX_HEAD_CAP_BYTES);
    let max_headers = limits.max_headers.min(MAX_HEADERS_CAP);
    // Never parse past max_head: a head that has not ended by then is refused whatever
    // follows, and the bound caps the re-scan httparse does on every call for a head that
    // arrives in pieces.
    let view = &buf[..buf.len().min(max_head)];

    // RFC 9112 §2.2: "a server that is expecting to receive and parse a request-line SHOULD
    // ignore at least one empty line (CRLF) received prior to the request-line."
    let skip = match skip_empty_lines(view)? {
        Some(skip) => skip,
        None => return incomplete(view.len(), 0, None, limits, max_head),
    };

    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS_CAP];
    let mut req = httparse::Request::new(&mut []);
    let body_start = match req.parse_with_uninit_headers(&view[skip..], &mut slots[..max_headers]) {
        Ok(httparse::Status::Complete(n)) => skip + n,
        Ok(httparse::Status::Partial) => {
            // httparse fills method, path and version as it goes: once the version is in,
            // the request line's length is known even if its CRLF is not.
            let line = match (req.method, req.path, req.version) {
                (Some(m), Some(p), Some(_)) => Some(request_line_len(m, p)),
                _ => None,
            };
            return incomplete(view.len(), skip, line, limits, max_head);
        }
        // RFC 6585 §5: too many header fields -> 431.
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::HeadersTooLarge),
        Err(httparse::Error::Version) => {
            if let Some(i) = higher_minor_version(view, req.path) {
                // RFC 9110 §2.5: a recipient of a higher minor version "SHOULD process the
                // message as if it were in the highest minor version ... to which the
                // recipient is conformant". httparse knows only 1.0 and 1.1, so the head is
                // parsed as 1.1 from a copy that says so (a rare case): every span is an
                // offset, the same in the copy and in `buf`.
                let mut copy = view.to_vec();
                copy[i] = b'1';
                return parse_head(&copy, limits);
            }
            return bad_version(view, skip, req.method, req.path, limits, max_head);
        }
        // RFC 9112 §3: method and request-target are tokens / URI characters separated by
        // single SPs; httparse reports both as Token (also a target that is not UTF-8).
        Err(httparse::Error::Token) => return Err(bad("invalid method or request target")),
        // RFC 9112 §5.1: "No whitespace is allowed between the field name and colon ... a
        // server MUST reject, with a response status code of 400". Also NUL / non-tchar in a
        // name, and RFC 9112 §5.2 obs-fold (a line starting with SP/HTAB is not a name):
        // "A server that receives an obs-fold in a request message ... MUST either reject
        // the message by sending a 400 (Bad Request)...".
        Err(httparse::Error::HeaderName) => return Err(bad("invalid header field name")),
        // RFC 9110 §5.5: CR, LF and NUL (and other CTLs) are not field-content.
        Err(httparse::Error::HeaderValue) => return Err(bad("invalid header field value")),
        // RFC 9112 §2.2: a bare CR is not a line terminator.
        Err(httparse::Error::NewLine) => return Err(bad("invalid line ending")),
        Err(httparse::Error::Status) => return Err(bad("malformed request")),
    };

    let (Some(method), Some(path), Some(minor)) = (req.method, req.path, req.version) else {
        // httparse sets all three before it returns Complete.
        return Err(bad("malformed request line"));
    };
    let head_len = body_start;

    // RFC 9112 §3 ¶5 / RFC 9110 §15.5.15: a request line longer than we are willing to parse
    // gets 414, also when the whole head arrived in one read.
    if request_line_len(method, path) > limits.max_request_line {
        return Err(HeadError::UriTooLong);
    }

    let version = if minor == 1 {
        Version::Http11
    } else {
        Version::Http10
    };
    let method = method.as_bytes();
    let target = path.as_bytes();
    check_target(method, target)?;

    // RFC 9112 §2.2: "a recipient MAY recognize a single LF as a line terminator". We do not:
    // a proxy in front that splits lines only at CRLF would see different header fields than
    // we do (a smuggling vector; see the corpus case invalid_field_value_01). Every line
    // ends right before a header name starts or before the final blank line, so checking
    // the two bytes before each name and the last four bytes of the head checks every line
    // terminator without a scan.
    if !matches!(
        buf.get(head_len.wrapping_sub(4)..head_len),
        Some(b"\r\n\r\n")
    ) {
        return Err(bad("bare LF line terminator"));
    }

    let mut headers = Vec::with_capacity(req.headers.len());
    let mut content_length: Option<(u16, u64)> = None;
    let mut content_type: Option<u16> = None;
    let mut host: Option<&[u8]> = None;
    let mut te = TransferCodings::default();
    let mut conn_close = false;
    let mut conn_keep_alive = false;
    let mut conn_upgrade = false;
    let mut upgrade_websocket = false;
    let mut expect_continue = false;

    for (i, h) in req.headers.iter().enumerate() {
        let name = h.name.as_bytes();
        let value = h.value;
        let name_start = offset_in(buf, name);
        if !matches!(
            buf.get(name_start.wrapping_sub(2)..name_start),
            Some(b"\r\n")
        ) {
            return Err(bad("bare LF line terminator"));
        }
        headers.push(HeaderSpan {
            name: Span::of(buf, name),
            value: Span::of(buf, value),
        });
        // i < max_headers <= MAX_HEADERS_CAP = 256, so this is lossless.
        let index = i as u16;
        // Length and first letter first: most names match no arm after two integer
        // compares, and `eq_ignore_ascii_case` runs only on real candidates (saves ~45 of
        // ~3,700 instructions per request with ten browser headers, callgrind). `| 0x20`
        // lower-cases an ASCII letter; a non-letter that aliases one fails the full compare.
        let first = name.first().map_or(0, |&b| b | 0x20);
        match (name.len(), first) {
            (4, b'h') if name.eq_ignore_ascii_case(b"host") => {
                // RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status code
                // to any HTTP/1.1 request message that lacks a Host header field and to any
                // request message that contains more than one Host header field line or a
                // Host header field with an invalid field value."
                if host.is_some() {
                    return Err(bad("more than one Host header"));
                }
                if !value.is_empty() && !is_valid_authority(value, false, false) {
                    return Err(bad("invalid Host header"));
                }
                host = Some(value);
            }
            // RFC 9110 §10.1.1: Expect = #expectation; only 100-continue is defined.
            (6, b'e')
                if name.eq_ignore_ascii_case(b"expect")
                    && list_members(value).any(|m| m.eq_ignore_ascii_case(b"100-continue")) =>
            {
                expect_continue = true;
            }
            (10, b'c') if name.eq_ignore_ascii_case(b"connection") => {
                // RFC 9110 §7.6.1: Connection = #connection-option, case-insensitive.
                for option in list_members(value) {
                    if option.eq_ignore_ascii_case(b"close") {
                        conn_close = true;
                    } else if option.eq_ignore_ascii_case(b"keep-alive") {
                        conn_keep_alive = true;
                    } else if option.eq_ignore_ascii_case(b"upgrade") {
                        conn_upgrade = true;
                    }
                }
            }
            (12, b'c') if name.eq_ignore_ascii_case(b"content-type") => {
                // RFC 9110 §5.3: Content-Type is a singleton field; two of them leave the
                // app's CONTENT_TYPE ambiguous, so refuse rather than pick one.
                if content_type.is_some() {
                    return Err(bad("more than one Content-Type header"));
                }
                content_type = Some(index);
            }
            (14, b'c') if name.eq_ignore_ascii_case(b"content-length") => {
                // RFC 9112 §6.3 ¶5: an invalid Content-Length is an unrecoverable framing
                // error. RFC 9110 §8.6 lets a recipient either reject a list of identical
                // values ("42, 42") or collapse it; we reject lists and repeated field lines
                // alike, identical or not: a proxy that picks a different member is exactly
                // the smuggling case, and no real client sends either.
                if content_length.is_some() {
                    return Err(bad("more than one Content-Length header"));
                }
                match parse_decimal_u64(value) {
                    Some(n) => content_length = Some((index, n)),
                    None => return Err(bad("invalid Content-Length")),
                }
            }
            (17, b't') if name.eq_ignore_ascii_case(b"transfer-encoding") => te.add(value)?,
            (7, b'u') if name.eq_ignore_ascii_case(b"upgrade") => {
                upgrade_websocket |=
                    list_members(value).any(|p| p.eq_ignore_ascii_case(b"websocket"));
            }
            _ => {}
        }
    }

    let framing = if te.present {
        // RFC 9112 §6.1: "A server or client that receives an HTTP/1.0 message containing a
        // Transfer-Encoding header field MUST treat the message as if the framing is faulty".
        if version == Version::Http10 {
            return Err(bad("Transfer-Encoding on HTTP/1.0"));
        }
        // RFC 9112 §6.3 ¶3 (and §6.1: "A server MAY reject a request that contains both
        // Content-Length and Transfer-Encoding"): the classic smuggling pair, refused.
        if content_length.is_some() {
            return Err(bad("both Transfer-Encoding and Content-Length"));
        }
        // RFC 9112 §7.1: "A sender MUST NOT apply the chunked transfer coding more than once".
        if te.chunked > 1 {
            return Err(bad("chunked applied more than once"));
        }
        // RFC 9112 §6.3 ¶4: "If a Transfer-Encoding header field is present in a request and
        // the chunked transfer coding is not the final encoding, the message body length
        // cannot be determined reliably; the server MUST respond with the 400".
        if !te.last_is_chunked {
            return Err(bad("chunked is not the final transfer coding"));
        }
        // RFC 9112 §6.1: "A server that receives a request message with a transfer coding it
        // does not understand SHOULD respond with 501 (Not Implemented)." We decode only
        // chunked; "identity" is no longer a transfer coding (RFC 7230 removed it).
        if te.other {
            return Err(HeadError::NotImplemented("unsupported transfer coding"));
        }
        BodyFraming::Chunked
    } else if let Some((_, n)) = content_length {
        // RFC 9112 §6.3 ¶6.
        BodyFraming::Length(n)
    } else {
        // RFC 9112 §6.3 ¶7: a request without either has no body.
        BodyFraming::None
    };

    // RFC 9112 §3.2 (quoted above): HTTP/1.1 requires Host. Checked after the framing so
    // that a smuggling attempt is logged as one.
    if version == Version::Http11 && host.is_none() {
        return Err(bad(MISSING_HOST));
    }

    // RFC 9112 §9.3: 1.1 persists unless "close"; 1.0 persists only if asked ("keep-alive",
    // RFC 9112 Appendix C.2.2) and not also told "close".
    let websocket =
        conn_upgrade && upgrade_websocket && version == Version::Http11 && method == b"GET";
    let keep_alive = match version {
        Version::Http11 => !conn_close && !websocket,
        Version::Http10 => conn_keep_alive && !conn_close,
    };
    // RFC 9110 §10.1.1: "A server that receives a 100-continue expectation in an HTTP/1.0
    // request MUST ignore that expectation."
    let expect_continue = expect_continue && version == Version::Http11;

    Ok(Some(Head {
        method: Span {
            start: skip as u32,
            len: method.len() as u32,
        },
        target: Span::of(buf, target),
        version,
        headers,
        head_len,
        framing,
        keep_alive,
        expect_continue,
        websocket,
        content_type,
        content_length: content_length.map(|(i, _)| i),
    }))
}

/// Length of `method SP target SP HTTP/1.x`, without the CRLF (httparse's default config
/// allows exactly one SP at each place).
fn request_line_len(method: &str, path: &str) -> usize {
    method.len() + 1 + path.len() + 1 + VERSION_LEN_BYTES
}

/// The verdict for a head that has not ended within `view` (the buffer cut at max_head):
/// a limit it has already passed, or "need more". `request_line` is the request line's
/// length once known; before that, every byte after the skipped empty lines belongs to it.
/// Measuring the view rather than the buffer keeps the verdict the same for every prefix.
fn incomplete(
    view_len: usize,
    skip: usize,
    request_line: Option<usize>,
    limits: &Limits,
    max_head: usize,
) -> Result<Option<Head>, HeadError> {
    // RFC 9110 §15.5.15 (414), checked first: a long line is the more precise diagnosis.
    let line = request_line.unwrap_or(view_len.saturating_sub(skip));
    if line > limits.max_request_line {
        return Err(HeadError::UriTooLong);
    }
    // RFC 6585 §5 (431): max_head bytes are in and the blank line is not among them.
    if view_len >= max_head {
        return Err(HeadError::HeadersTooLarge);
    }
    Ok(None)
}

/// Skips up to `MAX_LEADING_EMPTY_LINES` CRLFs. `Ok(None)`: the view ends inside them.
fn skip_empty_lines(view: &[u8]) -> Result<Option<usize>, HeadError> {
    let mut pos = 0;
    loop {
        match view.get(pos..) {
            Some([b'\r', b'\n', ..]) if pos < 2 * MAX_LEADING_EMPTY_LINES => pos += 2,
            // RFC 9112 §2.2 suggests ignoring "at least one" empty line; past a few it is
            // not a client quirk.
            Some([b'\r', b'\n', ..]) => return Err(bad("too many empty lines before the request")),
            Some([] | [b'\r']) => return Ok(None),
            // RFC 9112 §2.2: no bare CR, and (our choice, see parse_head) no bare LF.
            Some([b'\r' | b'\n', ..]) => return Err(bad("invalid line ending")),
            _ => return Ok(Some(pos)),
        }
    }
}

/// Where the minor digit of a complete `HTTP/1.y` request line with y >= 2 is in `view`.
fn higher_minor_version(view: &[u8], path: Option<&str>) -> Option<usize> {
    let path = path?;
    let start = offset_in(view, path.as_bytes()) + path.len() + 1;
    match view.get(start..start + 10)? {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', minor, b'\r', b'\n']
            if (b'2'..=b'9').contains(minor) =>
        {
            Some(start + 7)
        }
        _ => None,
    }
}

/// httparse said Version: tell a well-formed `HTTP/x.y` with x >= 2 (505) from garbage or
/// an unsupported 1.x / 0.x (400), waiting for the CRLF before deciding.
fn bad_version(
    view: &[u8],
    skip: usize,
    method: Option<&str>,
    path: Option<&str>,
    limits: &Limits,
    max_head: usize,
) -> Result<Option<Head>, HeadError> {
    let (Some(method), Some(path)) = (method, path) else {
        return Err(bad("invalid HTTP version"));
    };
    let start = offset_in(view, path.as_bytes()) + path.len() + 1;
    let rest = view.get(start..).unwrap_or(&[]);
    // RFC 9112 §2.3: HTTP-version = HTTP-name "/" DIGIT "." DIGIT, HTTP-name = %s"HTTP"
    // (case-sensitive), then the CRLF that ends the request line.
    const SHAPE: &[u8; 10] = b"HTTP/0.0\r\n";
    for (i, (&b, &want)) in rest.iter().zip(SHAPE.iter()).enumerate() {
        let ok = match i {
            5 | 7 => b.is_ascii_digit(),
            _ => b == want,
        };
        if !ok {
            return Err(bad("invalid HTTP version"));
        }
    }
    if rest.len() < SHAPE.len() {
        return incomplete(
            view.len(),
            skip,
            Some(request_line_len(method, path)),
            limits,
            max_head,
        );
    }
    // RFC 9110 §15.6.6: 505 is for a major version the server does not support. (A 1.x
    // above 1.1 never gets here: `higher_minor_version` reads it as 1.1.)
    if rest[5] >= b'2' {
        Err(HeadError::VersionNotSupported)
    } else {
        Err(bad("HTTP/0.x"))
    }
}

/// RFC 9112 §3.2: the request-target's four forms, each only with its method.
fn check_target(method: &[u8], target: &[u8]) -> Result<(), HeadError> {
    // RFC 9112 §3.2.3: "The authority-form is only used for CONNECT requests" and a CONNECT
    // sends "only the host and port": authority = uri-host ":" port.
    if method == b"CONNECT" {
        return if is_valid_authority(target, true, false) {
            Ok(())
        } else {
            Err(bad("CONNECT needs an authority-form target"))
        };
    }
    match target.first() {
        // RFC 9112 §3.2.1 origin-form: the common case costs one compare.
        Some(b'/') => Ok(()),
        // RFC 9112 §3.2.4: asterisk-form is exactly "*", and only for OPTIONS.
        Some(b'*') if target == b"*" && method == b"OPTIONS" => Ok(()),
        Some(b'*') => Err(bad("asterisk-form target outside OPTIONS *")),
        // RFC 9112 §3.2.2 absolute-form.
        _ if is_absolute_form(target) => Ok(()),
        _ => Err(bad("invalid request target")),
    }
}

/// RFC 9112 §3.2.2 absolute-form, as used for http(s): `scheme "://" authority
/// path-abempty [ "?" query ]` (RFC 3986 §3). The path and query bytes were already checked
/// by httparse (VCHAR / obs-text).
fn is_absolute_form(target: &[u8]) -> bool {
    // RFC 3986 §3.1: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )
    let Some(colon) = target.iter().position(|&b| b == b':') else {
        return false;
    };
    let scheme = &target[..colon];
    let scheme_ok = matches!(scheme.first(), Some(b) if b.is_ascii_alphabetic())
        && scheme
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    let Some(rest) = target[colon..].strip_prefix(b"://") else {
        return false;
    };
    let end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    // RFC 9110 §4.2.1: an http URI with an empty host "MUST [be rejected] as invalid".
    scheme_ok && is_valid_authority(&rest[..end], false, true)
}

/// RFC 3986 §3.2: `[ userinfo "@" ] host [ ":" port ]` with a non-empty host; userinfo only
/// where `allow_userinfo`, the port mandatory where `require_port`.
fn is_valid_authority(a: &[u8], require_port: bool, allow_userinfo: bool) -> bool {
    // Without userinfo an '@' fails the host or port check below, so Host (checked on
    // every request) skips this scan.
    let userinfo_end = if allow_userinfo {
        a.iter().rposition(|&b| b == b'@')
    } else {
        None
    };
    let a = match userinfo_end {
        Some(at) => {
            // RFC 3986 §3.2.1: userinfo = *( unreserved / pct-encoded / sub-delims / ":" )
            if !a[..at].iter().all(|&b| is_reg_name_byte(b) || b == b':') {
                return false;
            }
            &a[at + 1..]
        }
        None => a,
    };
    let (host_ok, port) = match a {
        // RFC 3986 §3.2.2: IP-literal = "[" ( IPv6address / IPvFuture ) "]"; the inside is
        // checked for its alphabet, not its grammar.
        [b'[', rest @ ..] => match rest.iter().position(|&b| b == b']') {
            Some(close) => {
                let inside = &rest[..close];
                (
                    !inside.is_empty() && inside.iter().all(|&b| is_reg_name_byte(b) || b == b':'),
                    &rest[close + 1..],
                )
            }
            None => return false,
        },
        // reg-name / IPv4address: one pass up to the first byte that is not reg-name (':'
        // for a port, or an invalid byte, which then fails the port check).
        _ => {
            let end = a
                .iter()
                .position(|&b| !is_reg_name_byte(b))
                .unwrap_or(a.len());
            (end > 0, &a[end..])
        }
    };
    // RFC 3986 §3.2.3: port = *DIGIT.
    let port_ok = match port {
        [] => !require_port,
        [b':', digits @ ..] => {
            digits.iter().all(u8::is_ascii_digit) && !(require_port && digits.is_empty())
        }
        _ => false,
    };
    host_ok && port_ok
}

/// RFC 3986 §3.2.2: reg-name = *( unreserved / pct-encoded / sub-delims ); `%` is let through
/// without checking the two hex digits after it. A table because Host is checked on every
/// request: a chain of compares per byte cost ~240 more instructions per request for
/// `localhost:8000` (callgrind).
static REG_NAME: [bool; 256] = super::byte_class(b"-._~%!$&'()*+,;=");

#[inline]
fn is_reg_name_byte(b: u8) -> bool {
    REG_NAME[b as usize]
}

/// RFC 9110 §5.6.1: the non-empty members of a comma-separated list, OWS trimmed ("a
/// recipient MUST parse and ignore a reasonable number of empty list elements").
fn list_members(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|m| !m.is_empty())
}

/// RFC 9110 §8.6: Content-Length = 1*DIGIT, with no sign, space or list; `None` if invalid
/// or if it overflows u64.
pub(crate) fn parse_decimal_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// What the Transfer-Encoding field lines (all of them, concatenated as one list: RFC 9110
/// §5.3) said.
#[derive(Default)]
struct TransferCodings {
    present: bool,
    chunked: u32,
    last_is_chunked: bool,
    /// A coding other than chunked appeared somewhere.
    other: bool,
}

impl TransferCodings {
    /// RFC 9112 §6.1: Transfer-Encoding = #transfer-coding;
    /// RFC 9110 §10.1.4: transfer-coding = token *( OWS ";" OWS transfer-parameter ).
    fn add(&mut self, value: &[u8]) -> Result<(), HeadError> {
        // An empty field still counts as present: it names no final chunked, so it is refused.
        self.present = true;
        for member in list_members(value) {
            let (name, params) = match member.iter().position(|&b| b == b';') {
                Some(i) => (trim_ows(&member[..i]), Some(&member[i..])),
                None => (member, None),
            };
            if !is_token(name) {
                return Err(bad("invalid transfer coding"));
            }
            // Coding names are case-insensitive (RFC 9110 §10.1.4).
            if name.eq_ignore_ascii_case(b"chunked") {
                // RFC 9112 §7.1 defines no parameters for chunked.
                if params.is_some() {
                    return Err(bad("parameters on chunked"));
                }
                self.chunked += 1;
                self.last_is_chunked = true;
            } else {
                self.other = true;
                self.last_is_chunked = false;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::limits::DEFAULT_MAX_REQUEST_LINE_BYTES;

    fn parse(buf: &[u8]) -> Result<Option<Head>, HeadError> {
        parse_head(buf, &Limits::default())
    }

    /// Parses `buf`, checking that every prefix shorter than the head gives `Ok(None)` and
    /// every longer one the same head (the loop thread calls with whatever has arrived).
    fn parse_split(buf: &[u8], limits: &Limits) -> Result<Option<Head>, HeadError> {
        let whole = parse_head(buf, limits);
        let end = match &whole {
            Ok(Some(head)) => head.head_len,
            _ => buf.len(),
        };
        for k in 0..buf.len() {
            let part = parse_head(&buf[..k], limits);
            if k < end {
                match (&part, &whole) {
                    (Ok(None), _) => {}
                    // A prefix of a refused head may already be refused, for the same reason.
                    (Err(a), Err(b)) if a == b => {}
                    _ => panic!("prefix {k} of {:?}: {part:?} (whole: {whole:?})", buf),
                }
            } else {
                assert_eq!(
                    part,
                    whole,
                    "prefix {k} of {:?}",
                    String::from_utf8_lossy(buf)
                );
            }
        }
        whole
    }

    fn ok(buf: &[u8]) -> Head {
        match parse_split(buf, &Limits::default()) {
            Ok(Some(head)) => head,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn err(buf: &[u8]) -> HeadError {
        match parse_split(buf, &Limits::default()) {
            Err(e) => e,
            other => panic!(
                "{:?}: expected an error, got {other:?}",
                String::from_utf8_lossy(buf)
            ),
        }
    }

    fn is_400(e: HeadError) -> bool {
        matches!(e, HeadError::BadRequest(_))
    }

    #[test]
    fn parses_simple_get_into_spans() {
        let buf = b"GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n";
        let head = ok(buf);
        assert_eq!(head.method(buf), b"GET");
        assert_eq!(head.target(buf), b"/a?b=c");
        assert_eq!(head.version, Version::Http11);
        assert_eq!(head.head_len, buf.len());
        assert_eq!(head.headers.len(), 2);
        assert_eq!(
            head.header(buf, 0),
            Some((&b"Host"[..], &b"example.com"[..]))
        );
        assert_eq!(head.header(buf, 1), Some((&b"Accept"[..], &b"*/*"[..])));
        assert_eq!(head.header(buf, 2), None);
        assert_eq!(head.framing, BodyFraming::None);
        assert!(head.keep_alive);
        assert!(!head.expect_continue);
        assert_eq!(head.content_type, None);
        assert_eq!(head.content_length, None);
        assert!(!head.is_head(buf));
    }

    #[test]
    fn header_values_are_trimmed_and_keep_order() {
        let buf = b"POST / HTTP/1.1\r\nHost: h\r\nX-A: \t one two \t\r\nX-B:\r\nx-a: 3\r\n\r\n";
        let head = ok(buf);
        let got: Vec<_> = (0..head.headers.len())
            .filter_map(|i| head.header(buf, i))
            .collect();
        assert_eq!(
            got,
            vec![
                (&b"Host"[..], &b"h"[..]),
                (&b"X-A"[..], &b"one two"[..]),
                (&b"X-B"[..], &b""[..]),
                (&b"x-a"[..], &b"3"[..]),
            ]
        );
    }

    #[test]
    fn obs_text_in_values_is_kept() {
        let buf = b"GET / HTTP/1.1\r\nHost: h\r\nX: caf\xc3\xa9 \xff\r\n\r\n";
        let head = ok(buf);
        assert_eq!(
            head.header(buf, 1).map(|h| h.1),
            Some(&b"caf\xc3\xa9 \xff"[..])
        );
    }

    #[test]
    fn span_get_never_panics() {
        let s = Span { start: 10, len: 5 };
        assert_eq!(s.get(b"short"), b"");
        let s = Span {
            start: u32::MAX,
            len: u32::MAX,
        };
        assert_eq!(s.get(b"short"), b"");
    }

    #[test]
    fn pipelined_head_len_stops_at_first() {
        let first = b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\n";
        let mut buf = first.to_vec();
        buf.extend_from_slice(b"GET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
        let head = ok(&buf);
        assert_eq!(head.head_len, first.len());
        assert_eq!(head.target(&buf), b"/1");
        let second = ok(&buf[head.head_len..]);
        assert_eq!(second.target(&buf[head.head_len..]), b"/2");
    }

    #[test]
    fn pipelined_after_body_and_partial_second() {
        let buf = b"POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /2 HTT";
        let head = ok(buf);
        assert_eq!(head.framing, BodyFraming::Length(3));
        let rest = &buf[head.head_len + 3..];
        assert_eq!(parse(rest), Ok(None));
    }

    #[test]
    fn skips_leading_empty_lines_and_counts_them() {
        let buf = b"\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";
        let head = ok(buf);
        assert_eq!(head.head_len, buf.len());
        assert_eq!(head.method, Span { start: 4, len: 3 });
        assert_eq!(head.method(buf), b"GET");
        assert_eq!(head.target(buf), b"/");
        assert_eq!(head.header(buf, 0), Some((&b"Host"[..], &b"h"[..])));
    }

    #[test]
    fn rejects_too_many_leading_empty_lines() {
        let mut buf = b"\r\n".repeat(MAX_LEADING_EMPTY_LINES);
        buf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        ok(&buf);
        let mut buf = b"\r\n".repeat(MAX_LEADING_EMPTY_LINES + 1);
        buf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert!(is_400(err(&buf)));
    }

    #[test]
    fn rejects_bare_lf_line_endings() {
        // RFC 9112 §2.2 MAY accept them; we do not (see parse_head).
        for buf in [
            &b"GET / HTTP/1.1\nHost: h\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: h\n\r\n",
            b"GET / HTTP/1.1\r\nHost: h\r\n\n",
            b"GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n",
            b"GET / HTTP/1.0\n\n",
            b"\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nNewline: a\nContent-Length: 26\r\n\r\n",
        ] {
            assert!(is_400(err(buf)), "{buf:?}");
        }
        assert_eq!(
            err(b"GET / HTTP/1.1\nHost: h\r\n\r\n"),
            HeadError::BadRequest("bare LF line terminator")
        );
    }

    #[test]
    fn rejects_bare_cr() {
        for buf in [
            &b"GET / HTTP/1.1\rHost: h\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\rb\r\nHost: h\r\n\r\n",
            b"\rGET / HTTP/1.1\r\nHost: h\r\n\r\n",
        ] {
            assert!(is_400(err(buf)), "{buf:?}");
        }
    }

    #[test]
    fn rejects_obs_fold() {
        assert!(is_400(err(
            b"GET / HTTP/1.1\r\nLong: one\r\n two\r\nHost: h\r\n\r\n"
        )));
        assert!(is_400(err(
            b"GET / HTTP/1.1\r\nHost: h\r\nLong: one\r\n\ttwo\r\n\r\n"
        )));
    }

    #[test]
    fn rejects_nul_and_ctls() {
        assert!(is_400(err(
            b"GET / HTTP/1.1\r\nHost: h\r\nba\0z: bar\r\n\r\n"
        )));
        assert!(is_400(err(b"GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n")));
        assert!(is_400(err(
            b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x07b\r\n\r\n"
        )));
        assert!(is_400(err(
            b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x7fb\r\n\r\n"
        )));
        assert!(is_400(err(b"GET\0 / HTTP/1.1\r\nHost: h\r\n\r\n")));
    }

    #[test]
    fn rejects_space_before_colon() {
        // RFC 9112 §5.1.
        assert!(is_400(err(
            b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length : 3\r\n\r\nxyz"
        )));
        assert!(is_400(err(b"GET / HTTP/1.1\r\nHost : h\r\n\r\n")));
    }

    #[test]
    fn rejects_invalid_request_lines() {
        for buf in [
            &b"GET HTTP/1.1\r\n\r\n"[..],
            b"GET\n/\nHTTP/1.1\r\n\r\n",
            b"bla:rgh /foo HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n",
            b"GET\xc3\x9f / HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET / x HTTP/1.1\r\nHost: h\r\n\r\n",
            b" GET / HTTP/1.1\r\nHost: h\r\n\r\n",
        ] {
            assert!(is_400(err(buf)), "{:?}", String::from_utf8_lossy(buf));
        }
    }

    #[test]
    fn any_token_is_a_method() {
        // RFC 9110 §9.1: method = token, case-sensitive; unknown methods are the app's call.
        let buf = b"-BLARGH /foo HTTP/1.1\r\nHost: h\r\n\r\n";
        assert_eq!(ok(buf).method(buf), b"-BLARGH");
        let buf = b"get /foo HTTP/1.1\r\nHost: h\r\n\r\n";
        assert_eq!(ok(buf).method(buf), b"get");
    }

    #[test]
    fn http2_version_is_505() {
        assert_eq!(
            err(b"GET /foo HTTP/2.0\r\n\r\n"),
            HeadError::VersionNotSupported
        );
        assert_eq!(
            err(b"GET /foo HTTP/3.0\r\nHost: h\r\n\r\n"),
            HeadError::VersionNotSupported
        );
        assert_eq!(
            err(b"GET /foo HTTP/9.9\r\n"),
            HeadError::VersionNotSupported
        );
        assert_eq!(parse(b"GET /foo HTTP/2.0"), Ok(None));
        assert_eq!(parse(b"GET /foo HTTP/2.0\r"), Ok(None));
    }

    #[test]
    fn higher_http_1_minor_versions_are_read_as_1_1() {
        // RFC 9110 §2.5.
        for buf in [
            &b"GET /foo HTTP/1.2\r\nHost: h\r\nX-A: b\r\n\r\n"[..],
            b"GET /foo HTTP/1.9\r\nHost: h\r\nX-A: b\r\n\r\n",
        ] {
            let head = ok(buf);
            assert_eq!(head.version, Version::Http11);
            assert_eq!(head.target.get(buf), b"/foo");
            assert_eq!(head.header(buf, 1), Some((&b"X-A"[..], &b"b"[..])));
            assert_eq!(head.head_len, buf.len());
            assert!(head.keep_alive);
            assert_eq!(parse_split(buf, &Limits::default()), Ok(Some(head)));
        }
        // Still 1.1's rules: Host is required.
        assert!(is_400(err(b"GET /foo HTTP/1.2\r\n\r\n")));
    }

    #[test]
    fn other_versions_are_400() {
        for buf in [
            &b"GET /foo HTTP/0.9\r\n\r\n"[..],
            b"GET /foo HTTP/0.99\r\n\r\n",
            b"GET /foo HTTP/111\r\n\r\n",
            b"GET /foo FTP/1.1\r\n\r\n",
            b"GET /foo http/1.1\r\n\r\n",
            b"GET /foo HTTP/2\r\n\r\n",
            b"GET /foo HTTP/2.0 \r\n\r\n",
            b"GET /foo HTTP/2.0\n\r\n",
            b"GET /foo HTTP/11111111111111111111111111111111111.1\r\n\r\n",
        ] {
            assert!(is_400(err(buf)), "{:?}", String::from_utf8_lossy(buf));
        }
    }

    #[test]
    fn http10_defaults() {
        let buf = b"GET / HTTP/1.0\r\n\r\n";
        let head = ok(buf);
        assert_eq!(head.version, Version::Http10);
        assert!(!head.keep_alive);
        assert_eq!(head.headers.len(), 0);
    }

    #[test]
    fn a_websocket_upgrade_is_the_connections_last_request() {
        let h = ok(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\n\
                     Upgrade: WebSocket\r\nSec-WebSocket-Key: a\r\n\r\n",
        );
        assert!(h.websocket && !h.keep_alive);
        // Either header alone, another protocol, or another method: a plain request.
        for req in [
            &b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\
              Content-Length: 0\r\n\r\n",
        ] {
            let h = ok(req);
            assert!(
                !h.websocket && h.keep_alive,
                "{}",
                String::from_utf8_lossy(req)
            );
        }
    }

    #[test]
    fn keep_alive_rules() {
        let cases: &[(&[u8], bool)] = &[
            (b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", true),
            (
                b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                false,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n",
                false,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, CLOSE , bar\r\n\r\n",
                false,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: h\r\nConnection: foo\r\nConnection: close\r\n\r\n",
                false,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n",
                true,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n",
                true,
            ),
            (b"GET / HTTP/1.0\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true),
            (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
            (b"GET / HTTP/1.0\r\nConnection: x,keep-alive\r\n\r\n", true),
            (
                b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
                false,
            ),
            (b"GET / HTTP/1.0\r\nKeep-Alive: 300\r\n\r\n", false),
        ];
        for (buf, want) in cases {
            assert_eq!(
                ok(buf).keep_alive,
                *want,
                "{:?}",
                String::from_utf8_lossy(buf)
            );
        }
    }

    #[test]
    fn expect_continue_only_on_http11() {
        assert!(ok(b"PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n").expect_continue);
        assert!(ok(b"PUT / HTTP/1.1\r\nHost: h\r\nexpect: 100-Continue\r\n\r\n").expect_continue);
        assert!(!ok(b"PUT / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n").expect_continue);
        assert!(!ok(b"PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expect_continue);
    }

    #[test]
    fn content_length_framing() {
        let buf = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
        let head = ok(buf);
        assert_eq!(head.framing, BodyFraming::Length(5));
        assert_eq!(head.content_type, Some(1));
        assert_eq!(head.content_length, Some(2));
        assert_eq!(head.head_len, buf.len() - 5);
        assert_eq!(
            ok(b"GET / HTTP/1.0\r\nconTENT-Length: 007\r\n\r\n").framing,
            BodyFraming::Length(7)
        );
        assert_eq!(
            ok(b"GET / HTTP/1.0\r\nContent-Length: 0\r\n\r\n").framing,
            BodyFraming::Length(0)
        );
        assert_eq!(
            ok(b"GET / HTTP/1.0\r\nContent-Length: 18446744073709551615\r\n\r\n").framing,
            BodyFraming::Length(u64::MAX)
        );
        assert_eq!(
            ok(b"GET / HTTP/1.0\r\nContent-Length:  5 \t\r\n\r\n").framing,
            BodyFraming::Length(5)
        );
    }

    #[test]
    fn rejects_invalid_content_length() {
        for value in [
            &b"-1"[..],
            b"+1",
            b"-0",
            b"0_1",
            b"0 1",
            b"3 1",
            b"bla-bla-bla",
            b"1e3",
            b"0x10",
            b"18446744073709551616",
            b"99999999999999999999999",
            b"",
            b"5,5",
            b"5, 5",
            b"5,",
            b"\xff",
        ] {
            let mut buf = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: ".to_vec();
            buf.extend_from_slice(value);
            buf.extend_from_slice(b"\r\n\r\n");
            assert_eq!(
                err(&buf),
                HeadError::BadRequest("invalid Content-Length"),
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn rejects_two_content_lengths_with_different_values() {
        let e =
            err(b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 2\r\n\r\nxyz");
        assert_eq!(
            e,
            HeadError::BadRequest("more than one Content-Length header")
        );
    }

    #[test]
    fn rejects_duplicate_content_length_even_if_identical() {
        // Our choice under RFC 9110 §8.6 (see parse_head): duplicates are refused outright.
        let e =
            err(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nxyz");
        assert_eq!(
            e,
            HeadError::BadRequest("more than one Content-Length header")
        );
    }

    #[test]
    fn chunked_framing() {
        let head = ok(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        assert_eq!(head.framing, BodyFraming::Chunked);
        for value in [
            &b"Chunked"[..],
            b"CHUNKED",
            b"\tchunked ",
            b", chunked",
            b"chunked,",
            b" , ,chunked",
        ] {
            let mut buf = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: ".to_vec();
            buf.extend_from_slice(value);
            buf.extend_from_slice(b"\r\n\r\n");
            assert_eq!(
                ok(&buf).framing,
                BodyFraming::Chunked,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn rejects_te_and_cl_together() {
        let e = err(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        assert_eq!(
            e,
            HeadError::BadRequest("both Transfer-Encoding and Content-Length")
        );
        let e = err(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n");
        assert_eq!(
            e,
            HeadError::BadRequest("both Transfer-Encoding and Content-Length")
        );
        // Even with a coding we would answer 501 to: the smuggling shape is the diagnosis.
        let e = err(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\nContent-Length: 5\r\n\r\nWorld");
        assert!(is_400(e));
    }

    #[test]
    fn rejects_te_on_http10() {
        let e =
            err(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        assert_eq!(e, HeadError::BadRequest("Transfer-Encoding on HTTP/1.0"));
    }

    #[test]
    fn rejects_te_whose_final_coding_is_not_chunked() {
        for te in [
            &b"Transfer-Encoding: chunked, gzip\r\n"[..],
            b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
            b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
            b"Transfer-Encoding: gzip\r\n",
            b"Transfer-Encoding: identity\r\n",
            b"Transfer-Encoding:\r\n",
            b"Transfer-Encoding: ,\r\n",
            b"Transfer-Encoding: chunk\r\n",
        ] {
            let mut buf = b"POST / HTTP/1.1\r\nHost: h\r\n".to_vec();
            buf.extend_from_slice(te);
            buf.extend_from_slice(b"\r\n");
            assert_eq!(
                err(&buf),
                HeadError::BadRequest("chunked is not the final transfer coding"),
                "{:?}",
                String::from_utf8_lossy(te)
            );
        }
    }

    #[test]
    fn unknown_coding_is_501() {
        for te in [
            &b"Transfer-Encoding: gzip, chunked\r\n"[..],
            b"Transfer-Encoding: identity, chunked\r\n",
            b"Transfer-Encoding: deflate,chunked\r\n",
            b"Transfer-Encoding: compress, chunked\r\n",
            b"Transfer-Encoding: x-custom;q=1, chunked\r\n",
            b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
        ] {
            let mut buf = b"POST / HTTP/1.1\r\nHost: h\r\n".to_vec();
            buf.extend_from_slice(te);
            buf.extend_from_slice(b"\r\n");
            let e = err(&buf);
            assert_eq!(e, HeadError::NotImplemented("unsupported transfer coding"));
            assert_eq!(e.status(), 501);
        }
    }

    #[test]
    fn rejects_chunked_twice() {
        for te in [
            &b"Transfer-Encoding: chunked, chunked\r\n"[..],
            b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            b"Transfer-Encoding: identity, chunked, identity, chunked\r\n",
            b"Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n",
        ] {
            let mut buf = b"POST / HTTP/1.1\r\nHost: h\r\n".to_vec();
            buf.extend_from_slice(te);
            buf.extend_from_slice(b"\r\n");
            assert_eq!(err(&buf), HeadError::BadRequest("chunked applied more than once"));
        }
    }

    #[test]
    fn te_headers_concatenate_as_a_list() {
        // Order across field lines matters exactly as within one line (RFC 9110 §5.3).
        let a = err(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n");
        let b = err(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert_eq!(a, b);
        let a = err(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n");
        let b = err(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
        assert_eq!(a, b);
        assert!(is_400(a));
    }

    #[test]
    fn rejects_malformed_transfer_codings() {
        assert_eq!(
            err(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked;x=1\r\n\r\n"),
            HeadError::BadRequest("parameters on chunked")
        );
        assert_eq!(
            err(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \"chunked\"\r\n\r\n"),
            HeadError::BadRequest("invalid transfer coding")
        );
        assert_eq!(
            err(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chun ked\r\n\r\n"),
            HeadError::BadRequest("invalid transfer coding")
        );
    }

    #[test]
    fn requires_host_on_http11() {
        assert_eq!(
            err(b"GET / HTTP/1.1\r\n\r\n"),
            HeadError::BadRequest(MISSING_HOST)
        );
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"),
            HeadError::BadRequest(MISSING_HOST)
        );
        // An empty Host is valid (RFC 9110 §7.2), and HTTP/1.0 needs none.
        ok(b"GET / HTTP/1.1\r\nHost:\r\n\r\n");
        ok(b"GET / HTTP/1.0\r\n\r\n");
    }

    #[test]
    fn rejects_two_hosts() {
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost: localhost\r\nHost: evil.example.com\r\n\r\n"),
            HeadError::BadRequest("more than one Host header")
        );
        assert_eq!(
            err(b"GET / HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n"),
            HeadError::BadRequest("more than one Host header")
        );
    }

    #[test]
    fn host_values() {
        for host in [
            &b"example.com"[..],
            b"example.com:8080",
            b"0.0.0.0=5000",
            b"[::1]:8080",
            b"[::1]",
            b"127.0.0.1",
            b"a_b.example",
            b"xn--bcher-kva.example",
            b"h:",
        ] {
            let mut buf = b"GET / HTTP/1.1\r\nHost: ".to_vec();
            buf.extend_from_slice(host);
            buf.extend_from_slice(b"\r\n\r\n");
            ok(&buf);
        }
        for host in [
            &b"evil.com/path"[..],
            b"a b",
            b"user@host",
            b"host:80:80",
            b"host:8o",
            b"[::1",
            b"]ufd",
            b"[::1]x",
            b"h?x",
            b"h#x",
            b":80",
            b"[]",
        ] {
            let mut buf = b"GET / HTTP/1.1\r\nHost: ".to_vec();
            buf.extend_from_slice(host);
            buf.extend_from_slice(b"\r\n\r\n");
            assert_eq!(
                err(&buf),
                HeadError::BadRequest("invalid Host header"),
                "{:?}",
                host
            );
        }
    }

    #[test]
    fn rejects_duplicate_content_type() {
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost: h\r\nContent-Type: a/b\r\nContent-Type: text/html\r\n\r\n"),
            HeadError::BadRequest("more than one Content-Type header")
        );
    }

    #[test]
    fn request_target_forms() {
        for buf in [
            &b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"[..],
            b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
            b"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n",
            b"GET http://example.com/foo?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n",
            b"GET https://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n",
            b"GET http://[::1]:8080/foo HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET http://user:pass@example.com:8080/foo?q=1 HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET http://example.com?q HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET ///keeping_slashes HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET /with_\"quotes\"?foo=\"bar\" HTTP/1.1\r\nHost: h\r\n\r\n",
        ] {
            ok(buf);
        }
        for buf in [
            &b"GET * HTTP/1.1\r\nHost: h\r\n\r\n"[..],
            b"OPTIONS *x HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET example.com:443 HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET foo/bar HTTP/1.1\r\nHost: h\r\n\r\n",
            b"PUT s://]ufd/: HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET http:///foo HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET 1http://h/ HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET http:/h/ HTTP/1.1\r\nHost: h\r\n\r\n",
            b"CONNECT example.com HTTP/1.1\r\nHost: h\r\n\r\n",
            b"CONNECT / HTTP/1.1\r\nHost: h\r\n\r\n",
            b"CONNECT user@h:443 HTTP/1.1\r\nHost: h\r\n\r\n",
        ] {
            assert!(is_400(err(buf)), "{:?}", String::from_utf8_lossy(buf));
        }
    }

    #[test]
    fn uri_too_long_is_414() {
        let limits = Limits {
            max_request_line: 20,
            ..Limits::default()
        };
        // "GET " + target + " HTTP/1.1": 18 and 20 bytes fit, 21 does not.
        for (target, fits) in [
            (&b"/12345"[..], true),
            (b"/123456", true),
            (b"/1234567", false),
        ] {
            let mut buf = b"GET ".to_vec();
            buf.extend_from_slice(target);
            buf.extend_from_slice(b" HTTP/1.1\r\nHost: h\r\n\r\n");
            let got = parse_split(&buf, &limits);
            if fits {
                assert!(matches!(got, Ok(Some(_))), "{got:?}");
            } else {
                assert_eq!(got, Err(HeadError::UriTooLong));
            }
        }
        // Without its line end: refused as soon as the line passes the limit.
        let buf = b"GET /1234567890123456789";
        assert_eq!(parse_head(&buf[..20], &limits), Ok(None));
        assert_eq!(parse_head(&buf[..21], &limits), Err(HeadError::UriTooLong));
        // Leading empty lines do not count towards the request line.
        let buf = b"\r\n\r\nGET /123456 HTTP/1.1\r\nHost: h\r\n\r\n";
        assert!(matches!(parse_split(buf, &limits), Ok(Some(_))));
        // Default limit: 8190 bytes.
        let mut buf = b"GET /".to_vec();
        buf.resize(DEFAULT_MAX_REQUEST_LINE_BYTES - 9, b'a');
        buf.extend_from_slice(b" HTTP/1.0\r\n\r\n");
        assert!(matches!(parse(&buf), Ok(Some(_))));
        let mut buf = b"GET /".to_vec();
        buf.resize(DEFAULT_MAX_REQUEST_LINE_BYTES - 8, b'a');
        buf.extend_from_slice(b" HTTP/1.0\r\n\r\n");
        assert_eq!(parse(&buf), Err(HeadError::UriTooLong));
    }

    #[test]
    fn head_too_large_is_431() {
        let buf = b"GET / HTTP/1.1\r\nHost: h\r\nX: 0123456789\r\n\r\n";
        let fits = Limits {
            max_head: buf.len(),
            ..Limits::default()
        };
        assert!(matches!(parse_split(buf, &fits), Ok(Some(_))));
        let short = Limits {
            max_head: buf.len() - 1,
            ..Limits::default()
        };
        assert_eq!(parse_split(buf, &short), Err(HeadError::HeadersTooLarge));
        // Partial: refused once max_head bytes are in without the blank line.
        assert_eq!(parse_head(&buf[..buf.len() - 2], &short), Ok(None));
        assert_eq!(
            parse_head(&buf[..buf.len() - 1], &short),
            Err(HeadError::HeadersTooLarge)
        );
        // A head whose blank line is past max_head is refused even if more bytes follow.
        let mut more = buf.to_vec();
        more.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(parse_head(&more, &short), Err(HeadError::HeadersTooLarge));
    }

    #[test]
    fn too_many_headers_is_431() {
        let mut buf = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        for i in 0..9 {
            buf.extend_from_slice(format!("X-{i}: {i}\r\n").as_bytes());
        }
        buf.extend_from_slice(b"\r\n");
        let ten = Limits {
            max_headers: 10,
            ..Limits::default()
        };
        assert_eq!(
            parse_split(&buf, &ten).map(|h| h.map(|h| h.headers.len())),
            Ok(Some(10))
        );
        let nine = Limits {
            max_headers: 9,
            ..Limits::default()
        };
        assert_eq!(parse_split(&buf, &nine), Err(HeadError::HeadersTooLarge));
        let zero = Limits {
            max_headers: 0,
            ..Limits::default()
        };
        assert_eq!(
            parse_split(b"GET / HTTP/1.0\r\n\r\n", &zero).map(|h| h.is_some()),
            Ok(true)
        );
        assert_eq!(parse_split(&buf, &zero), Err(HeadError::HeadersTooLarge));
        // Above the cap, the cap applies.
        let huge = Limits {
            max_headers: usize::MAX,
            ..Limits::default()
        };
        let mut buf = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        for i in 0..MAX_HEADERS_CAP {
            buf.extend_from_slice(format!("X-{i}: {i}\r\n").as_bytes());
        }
        buf.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&buf, &huge), Err(HeadError::HeadersTooLarge));
    }

    #[test]
    fn default_limits() {
        let l = Limits::default();
        assert_eq!(
            (l.max_request_line, l.max_head, l.max_headers),
            (8190, 65536, 100)
        );
    }

    #[test]
    fn error_statuses_and_reasons() {
        let table = [
            (HeadError::BadRequest("x"), 400, "Bad Request"),
            (HeadError::UriTooLong, 414, "URI Too Long"),
            (
                HeadError::HeadersTooLarge,
                431,
                "Request Header Fields Too Large",
            ),
            (HeadError::NotImplemented("x"), 501, "Not Implemented"),
            (
                HeadError::VersionNotSupported,
                505,
                "HTTP Version Not Supported",
            ),
        ];
        for (e, status, reason) in table {
            assert_eq!(e.status(), status);
            assert_eq!(e.reason(), reason);
            assert!(!e.detail().is_empty());
        }
    }

    #[test]
    fn head_method() {
        let buf = b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n";
        assert!(ok(buf).is_head(buf));
    }
}
