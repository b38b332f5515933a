//! The chunked transfer coding (RFC 9112 §7.1), decoded incrementally on the loop thread.
//!
//! A byte-at-a-time state machine for the framing (size lines, extensions, CRLFs,
//! trailers) and one `extend_from_slice` per run of chunk data, so any split of the input
//! across reads gives the same result, and the decoder never reads past the end of the body
//! (what follows is the next pipelined request).
//!
//! Strict where leniency is a smuggling vector (RFC 9112 §11.2): sizes are bare HEXDIG,
//! every line ends in CRLF (a bare LF is refused, unlike RFC 9112 §2.2's MAY: a front proxy
//! that disagrees about where a chunk ends is exactly the attack), and extensions and
//! trailers are checked against their grammar even though they are discarded.

use super::is_tchar;

/// Longest chunk-size line, in bytes without its CRLF (size digits, BWS and extensions): a
/// bound on the bytes consumed without progress (e.g. an endless run of leading zeros).
pub(crate) const MAX_CHUNK_SIZE_LINE_BYTES: usize = 4096;
/// Total chunk-extension bytes allowed across one body (hyper's limit): extensions are
/// discarded, so a peer padding every 1-byte chunk with them would otherwise make us parse
/// up to 4096 bytes per byte of content.
pub(crate) const MAX_CHUNK_EXT_BYTES_TOTAL: u64 = 16 * 1024;
/// Longest trailer section, in bytes including its final CRLF.
pub(crate) const MAX_TRAILER_SECTION_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// 400: the chunked framing is malformed; the str is a short reason for the log.
    BadChunk(&'static str),
    /// 413: the decoded body would exceed `max_body`.
    TooLarge,
}

impl BodyError {
    #[cfg(test)]
    pub(crate) fn status(&self) -> u16 {
        match self {
            BodyError::BadChunk(_) => 400,
            BodyError::TooLarge => 413,
        }
    }

    #[cfg(test)]
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            BodyError::BadChunk(_) => "Bad Request",
            BodyError::TooLarge => "Content Too Large",
        }
    }
}

/// Where in `chunk-ext` we are (RFC 9112 §7.1.1):
/// `chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )`,
/// `chunk-ext-val = token / quoted-string`. BWS may precede `;` and surround `=`, nothing
/// may precede the CRLF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ext {
    /// After `;`: BWS, then a name.
    BeforeName,
    Name,
    /// BWS after a name: only `=` or `;` may follow.
    AfterNameBws,
    /// After `=`: BWS, then a token or a quoted-string.
    BeforeValue,
    Token,
    Quoted,
    /// After a `\` inside a quoted-string.
    QuotedPair,
    /// Right after the closing quote.
    QuotedEnd,
    /// BWS after a value: only `;` may follow.
    AfterValueBws,
}

/// The first bytes of a trailer field name, lower-cased, to recognise the few names that
/// may not appear in trailers without keeping the name (which may span reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TrailerName {
    len: usize,
    lower: [u8; TRAILER_NAME_PROBE_BYTES],
}

/// Longest name we need to recognise: "transfer-encoding", in bytes.
const TRAILER_NAME_PROBE_BYTES: usize = 17;

impl TrailerName {
    fn new() -> Self {
        TrailerName {
            len: 0,
            lower: [0; TRAILER_NAME_PROBE_BYTES],
        }
    }

    fn push(&mut self, b: u8) {
        if let Some(slot) = self.lower.get_mut(self.len) {
            *slot = b.to_ascii_lowercase();
        }
        self.len = self.len.saturating_add(1);
    }

    /// RFC 9110 §6.5.1: fields needed to frame or route the message "cannot be processed
    /// outside the header section". We discard trailers anyway, but one that tries to
    /// re-frame or re-route the request is an attack or a broken client: refuse it.
    fn is_forbidden(&self) -> bool {
        let name = self.lower.get(..self.len).unwrap_or(&[]);
        matches!(
            name,
            b"content-length" | b"transfer-encoding" | b"host" | b"trailer"
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading `chunk-size = 1*HEXDIG`; `digits` is false until the first one.
    Size {
        size: u64,
        digits: bool,
    },
    /// BWS after the size: only a chunk-ext may follow.
    SizeBws {
        size: u64,
    },
    Ext {
        size: u64,
        at: Ext,
    },
    /// After the CR that ends a size line.
    SizeLf {
        size: u64,
    },
    Data {
        remaining: u64,
    },
    /// After chunk data: CR, then LF.
    DataCr,
    DataLf,
    /// Start of a trailer field line, or of the final CRLF.
    TrailerLineStart,
    TrailerName(TrailerName),
    TrailerValue,
    TrailerLf,
    /// After the CR of the final CRLF.
    EndLf,
    Done,
    /// A previous call failed; every later call returns the same error.
    Failed(BodyError),
}

/// Decodes one chunked body. One per request; `decode` as bytes arrive.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    max_body: u64,
    /// Decoded bytes promised so far (counted when a chunk size is accepted).
    decoded: u64,
    /// Bytes of the current size line.
    line_bytes: usize,
    ext_bytes: u64,
    trailer_bytes: usize,
}

impl ChunkedDecoder {
    /// `max_body`: most decoded bytes accepted, in bytes (-> `BodyError::TooLarge`).
    pub fn new(max_body: u64) -> Self {
        ChunkedDecoder {
            state: State::Size {
                size: 0,
                digits: false,
            },
            max_body,
            decoded: 0,
            line_bytes: 0,
            ext_bytes: 0,
            trailer_bytes: 0,
        }
    }

    /// Decodes as much of `input` as possible, appending the decoded data to `out`.
    /// Returns `(consumed, done)`: `done` once the whole body, trailers included, is in;
    /// `consumed` stops there (the rest of `input` is the next request). Incremental: any
    /// split of the input across calls gives the same output and total consumption.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(usize, bool), BodyError> {
        let mut pos = 0;
        while let Some(rest) = input.get(pos..) {
            let Some(&b) = rest.first() else { break };
            match self.state {
                State::Done => break,
                State::Failed(e) => return Err(e),
                State::Data { remaining } => {
                    // Chunk data is copied a run at a time, never per byte.
                    let take = remaining.min(rest.len() as u64) as usize;
                    out.extend_from_slice(&rest[..take]);
                    pos += take;
                    let remaining = remaining - take as u64;
                    self.state = if remaining == 0 {
                        State::DataCr
                    } else {
                        State::Data { remaining }
                    };
                }
                state => {
                    pos += 1;
                    match self.step(state, b) {
                        Ok(next) => self.state = next,
                        Err(e) => {
                            self.state = State::Failed(e);
                            return Err(e);
                        }
                    }
                }
            }
        }
        match self.state {
            State::Failed(e) => Err(e),
            state => Ok((pos, state == State::Done)),
        }
    }

    /// Counts `b` against the size-line, extension and trailer limits.
    fn account(&mut self, state: &State, b: u8) -> Result<(), BodyError> {
        use BodyError::BadChunk;
        match state {
            // The CR ending a size line is not part of it.
            State::Size { .. } | State::SizeBws { .. } | State::Ext { .. } if b != b'\r' => {
                self.line_bytes += 1;
                if self.line_bytes > MAX_CHUNK_SIZE_LINE_BYTES {
                    return Err(BadChunk("chunk size line too long"));
                }
                if let State::Ext { .. } = state {
                    self.ext_bytes += 1;
                    if self.ext_bytes > MAX_CHUNK_EXT_BYTES_TOTAL {
                        return Err(BadChunk("chunk extensions too long"));
                    }
                }
            }
            State::TrailerLineStart
            | State::TrailerName(_)
            | State::TrailerValue
            | State::TrailerLf
            | State::EndLf => {
                self.trailer_bytes += 1;
                if self.trailer_bytes > MAX_TRAILER_SECTION_BYTES {
                    return Err(BadChunk("trailer section too large"));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// One framing byte (never chunk data).
    fn step(&mut self, state: State, b: u8) -> Result<State, BodyError> {
        use BodyError::BadChunk;
        self.account(&state, b)?;
        Ok(match state {
            // RFC 9112 §7.1: chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF;
            // chunk-size = 1*HEXDIG. No sign, no "0x", no leading whitespace.
            State::Size { size, digits } => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                    let digit = u64::from(hex_value(b));
                    // RFC 9112 §7.1: "Recipients MUST anticipate potentially large hexadecimal
                    // numerals and prevent parsing errors due to integer conversion overflows".
                    let size = size
                        .checked_mul(16)
                        .and_then(|s| s.checked_add(digit))
                        .ok_or(BadChunk("chunk size overflows"))?;
                    State::Size { size, digits: true }
                }
                _ if !digits => return Err(BadChunk("missing chunk size")),
                b'\r' => State::SizeLf { size },
                b';' => State::Ext {
                    size,
                    at: Ext::BeforeName,
                },
                // RFC 9112 §7.1.1: BWS is allowed before ";" only (so "0 \r\n" is refused).
                b' ' | b'\t' => State::SizeBws { size },
                _ => return Err(BadChunk("invalid chunk size")),
            },
            State::SizeBws { size } => match b {
                b' ' | b'\t' => State::SizeBws { size },
                b';' => State::Ext {
                    size,
                    at: Ext::BeforeName,
                },
                _ => return Err(BadChunk("whitespace after chunk size")),
            },
            State::Ext { size, at } => {
                let at = match (at, b) {
                    (
                        Ext::BeforeName | Ext::AfterNameBws | Ext::BeforeValue | Ext::AfterValueBws,
                        b' ' | b'\t',
                    ) => at,
                    (Ext::BeforeName, b) if is_tchar(b) => Ext::Name,
                    (Ext::Name, b) if is_tchar(b) => Ext::Name,
                    (Ext::Name, b' ' | b'\t') => Ext::AfterNameBws,
                    (Ext::Name | Ext::AfterNameBws, b'=') => Ext::BeforeValue,
                    (Ext::BeforeValue, b'"') => Ext::Quoted,
                    (Ext::BeforeValue, b) if is_tchar(b) => Ext::Token,
                    (Ext::Token, b) if is_tchar(b) => Ext::Token,
                    (Ext::Token | Ext::QuotedEnd, b' ' | b'\t') => Ext::AfterValueBws,
                    (
                        Ext::Name
                        | Ext::AfterNameBws
                        | Ext::Token
                        | Ext::QuotedEnd
                        | Ext::AfterValueBws,
                        b';',
                    ) => Ext::BeforeName,
                    (Ext::Name | Ext::Token | Ext::QuotedEnd, b'\r') => {
                        return Ok(State::SizeLf { size })
                    }
                    // RFC 9110 §5.6.4: quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE,
                    // qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text.
                    (Ext::Quoted, b'"') => Ext::QuotedEnd,
                    (Ext::Quoted, b'\\') => Ext::QuotedPair,
                    (
                        Ext::Quoted,
                        b'\t' | b' ' | 0x21 | 0x23..=0x5B | 0x5D..=0x7E | 0x80..=0xFF,
                    ) => Ext::Quoted,
                    // quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )
                    (Ext::QuotedPair, b'\t' | b' ' | 0x21..=0x7E | 0x80..=0xFF) => Ext::Quoted,
                    // Includes a bare CR or LF anywhere in an extension.
                    _ => return Err(BadChunk("invalid chunk extension")),
                };
                State::Ext { size, at }
            }
            State::SizeLf { size } => {
                if b != b'\n' {
                    return Err(BadChunk("bare CR in chunk size line"));
                }
                if size == 0 {
                    // RFC 9112 §7.1: last-chunk = 1*("0") [ chunk-ext ] CRLF, then the
                    // trailer section.
                    State::TrailerLineStart
                } else {
                    // The limit is checked against the announced size, before any of its
                    // data is buffered.
                    let decoded = self
                        .decoded
                        .checked_add(size)
                        .filter(|&d| d <= self.max_body)
                        .ok_or(BodyError::TooLarge)?;
                    self.decoded = decoded;
                    State::Data { remaining: size }
                }
            }
            // Unreachable here (decode copies data itself), kept total for safety.
            State::Data { remaining } => State::Data { remaining },
            // RFC 9112 §7.1: chunk-data is followed by CRLF.
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(BadChunk("missing CRLF after chunk data")),
            },
            State::DataLf => match b {
                b'\n' => {
                    self.line_bytes = 0;
                    State::Size {
                        size: 0,
                        digits: false,
                    }
                }
                _ => return Err(BadChunk("bare CR after chunk data")),
            },
            // RFC 9112 §7.1.2: trailer-section = *( field-line CRLF ), then CRLF;
            // field-line = field-name ":" OWS field-value OWS (RFC 9112 §5). Validated and
            // discarded (RFC 9110 §6.5.2 lets a recipient discard trailers).
            State::TrailerLineStart => match b {
                b'\r' => State::EndLf,
                b if is_tchar(b) => {
                    let mut name = TrailerName::new();
                    name.push(b);
                    State::TrailerName(name)
                }
                // Leading whitespace (obs-fold, RFC 9112 §5.2), a bare LF, anything else.
                _ => return Err(BadChunk("invalid trailer field")),
            },
            State::TrailerName(mut name) => match b {
                b if is_tchar(b) => {
                    name.push(b);
                    State::TrailerName(name)
                }
                b':' if name.is_forbidden() => return Err(BadChunk("forbidden trailer field")),
                b':' => State::TrailerValue,
                // RFC 9112 §5.1: no whitespace between a field name and the colon.
                _ => return Err(BadChunk("invalid trailer field name")),
            },
            // RFC 9110 §5.5: field-value = *field-content, VCHAR / obs-text / SP / HTAB; no CTLs.
            State::TrailerValue => match b {
                b'\t' | b' '..=0x7E | 0x80..=0xFF => State::TrailerValue,
                b'\r' => State::TrailerLf,
                _ => return Err(BadChunk("invalid trailer field value")),
            },
            State::TrailerLf => match b {
                b'\n' => State::TrailerLineStart,
                _ => return Err(BadChunk("bare CR in trailer section")),
            },
            State::EndLf => match b {
                b'\n' => State::Done,
                _ => return Err(BadChunk("bare CR after last chunk")),
            },
            State::Done => State::Done,
            State::Failed(e) => return Err(e),
        })
    }
}

/// The value of an ASCII hex digit (callers match the digit ranges first).
fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 1 << 20;

    /// Decodes `input` in one call, then split in two at every offset, then a byte at a
    /// time, and checks all give the same outcome: (decoded, consumed, done) or the error.
    fn decode_all_ways(input: &[u8], max_body: u64) -> Result<(Vec<u8>, usize, bool), BodyError> {
        let feed = |parts: &[&[u8]]| -> Result<(Vec<u8>, usize, bool), BodyError> {
            let mut d = ChunkedDecoder::new(max_body);
            let mut out = Vec::new();
            let mut consumed = 0;
            let mut done = false;
            for part in parts {
                let (n, fin) = d.decode(part, &mut out)?;
                assert!(n <= part.len());
                consumed += n;
                done = fin;
                if fin {
                    // The rest is the next request: never consumed.
                    assert_eq!(d.decode(&part[n..], &mut out), Ok((0, true)));
                    break;
                }
                assert_eq!(n, part.len(), "an unfinished decoder consumes everything");
            }
            Ok((out, consumed, done))
        };
        let whole = feed(&[input]);
        for k in 0..=input.len() {
            let split = feed(&[&input[..k], &input[k..]]);
            assert_eq!(
                split,
                whole,
                "split at {k} of {:?}",
                String::from_utf8_lossy(input)
            );
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(
            feed(&bytes),
            whole,
            "byte at a time: {:?}",
            String::from_utf8_lossy(input)
        );
        whole
    }

    fn body(input: &[u8]) -> Vec<u8> {
        match decode_all_ways(input, MAX) {
            Ok((out, consumed, true)) => {
                assert_eq!(
                    consumed,
                    input.len(),
                    "{:?}",
                    String::from_utf8_lossy(input)
                );
                out
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }

    fn bad(input: &[u8]) -> BodyError {
        match decode_all_ways(input, MAX) {
            Err(e) => e,
            other => panic!(
                "{:?}: expected an error, got {other:?}",
                String::from_utf8_lossy(input)
            ),
        }
    }

    #[test]
    fn decodes_simple_body() {
        assert_eq!(
            body(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            b"hello world"
        );
        assert_eq!(
            body(b"1e\r\nall your base are belong to us\r\n0\r\n\r\n"),
            b"all your base are belong to us"
        );
        assert_eq!(body(b"0\r\n\r\n"), b"");
    }

    #[test]
    fn decodes_hex_sizes() {
        assert_eq!(body(b"A\r\n0123456789\r\n0\r\n\r\n"), b"0123456789");
        assert_eq!(body(b"a\r\n0123456789\r\n0\r\n\r\n"), b"0123456789");
        assert_eq!(body(b"0005\r\nhello\r\n000\r\n\r\n"), b"hello");
        let big = vec![b'x'; 0x1F3];
        let mut input = b"1f3\r\n".to_vec();
        input.extend_from_slice(&big);
        input.extend_from_slice(b"\r\n0\r\n\r\n");
        assert_eq!(body(&input), big);
    }

    #[test]
    fn stops_at_end_of_body() {
        let input = b"5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        let (out, consumed, done) = decode_all_ways(input, MAX).unwrap();
        assert_eq!(out, b"hello");
        assert!(done);
        assert_eq!(consumed, input.len() - b"GET / HTTP/1.1\r\n\r\n".len());
    }

    #[test]
    fn incomplete_body_is_not_done() {
        for input in [
            &b""[..],
            b"5",
            b"5\r\nhel",
            b"5\r\nhello\r\n",
            b"0\r\n",
            b"0\r\nX: y\r\n",
            b"0\r\n\r",
        ] {
            let (_, consumed, done) = decode_all_ways(input, MAX).unwrap();
            assert!(!done, "{input:?}");
            assert_eq!(consumed, input.len());
        }
    }

    #[test]
    fn accepts_extensions() {
        for input in [
            &b"5;a\r\nhello\r\n0\r\n\r\n"[..],
            b"5; some; parameters=stuff\r\nhello\r\n0\r\n\r\n",
            b"5;foo=\"bar baz\"\r\nhello\r\n0\r\n\r\n",
            b"5;foo=\"a\\\"b;c\"; x = y ;z\r\nhello\r\n0;last\r\n\r\n",
            b"5 ;a=b\r\nhello\r\n0\t; x\r\n\r\n",
            b"5;a=\"\"\r\nhello\r\n0\r\n\r\n",
        ] {
            assert_eq!(
                body(input),
                b"hello",
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn discards_valid_trailers() {
        assert_eq!(
            body(b"5\r\nhello\r\n6\r\n world\r\n0\r\nVary: *\r\nContent-Type: text/plain\r\n\r\n"),
            b"hello world"
        );
        assert_eq!(body(b"0\r\nX-Empty:\r\nX-Obs: caf\xc3\xa9\t\r\n\r\n"), b"");
    }

    #[test]
    fn rejects_signs_and_prefixes() {
        for input in [
            &b"-5\r\nhello\r\n0\r\n\r\n"[..],
            b"+5\r\nhello\r\n0\r\n\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
        ] {
            assert!(matches!(bad(input), BodyError::BadChunk(_)), "{input:?}");
        }
    }

    #[test]
    fn rejects_whitespace_around_size() {
        assert_eq!(
            bad(b" 5\r\nhello\r\n0\r\n\r\n"),
            BodyError::BadChunk("missing chunk size")
        );
        assert_eq!(
            bad(b"5\r\nhello\r\n0 \r\n\r\n"),
            BodyError::BadChunk("whitespace after chunk size")
        );
        assert_eq!(
            bad(b"5\r\nhello\r\n 0\r\n\r\n"),
            BodyError::BadChunk("missing chunk size")
        );
        assert_eq!(
            bad(b" ;foo=bar\r\nhello\r\n0\r\n\r\n"),
            BodyError::BadChunk("missing chunk size")
        );
    }

    #[test]
    fn rejects_missing_or_invalid_size() {
        assert_eq!(
            bad(b"\r\nhello\r\n0\r\n\r\n"),
            BodyError::BadChunk("missing chunk size")
        );
        assert_eq!(
            bad(b";a\r\nhello\r\n0\r\n\r\n"),
            BodyError::BadChunk("missing chunk size")
        );
        assert_eq!(
            bad(b"5\r\nhello\r\n6_0\r\n world\r\n0\r\n\r\n"),
            BodyError::BadChunk("invalid chunk size")
        );
        assert_eq!(
            bad(b"5g\r\nhello\r\n0\r\n\r\n"),
            BodyError::BadChunk("invalid chunk size")
        );
    }

    #[test]
    fn rejects_size_overflow() {
        assert_eq!(
            bad(b"10000000000000000\r\n"),
            BodyError::BadChunk("chunk size overflows")
        );
        // The largest size parses, then is over any max_body.
        assert_eq!(bad(b"ffffffffffffffff\r\n"), BodyError::TooLarge);
    }

    #[test]
    fn leading_zeros_do_not_overflow() {
        assert_eq!(
            body(b"00000000000000000000000000000001\r\nx\r\n0\r\n\r\n"),
            b"x"
        );
    }

    #[test]
    fn rejects_bare_lf() {
        assert_eq!(
            bad(b"5\nhello\r\n0\r\n\r\n"),
            BodyError::BadChunk("invalid chunk size")
        );
        assert_eq!(
            bad(b"5\n;\r\nhello\r\n0\r\n\r\n"),
            BodyError::BadChunk("invalid chunk size")
        );
        assert_eq!(
            bad(b"5\r\nhello\n0\r\n\r\n"),
            BodyError::BadChunk("missing CRLF after chunk data")
        );
        assert_eq!(
            bad(b"5\r\nhello\r\n0\n\r\n"),
            BodyError::BadChunk("invalid chunk size")
        );
        assert_eq!(
            bad(b"5\r\nhello\r\n0\r\n\n"),
            BodyError::BadChunk("invalid trailer field")
        );
        assert_eq!(
            bad(b"0\r\nX: y\n\r\n"),
            BodyError::BadChunk("invalid trailer field value")
        );
    }

    #[test]
    fn rejects_bare_cr() {
        assert_eq!(
            bad(b"5\rhello\r\n0\r\n\r\n"),
            BodyError::BadChunk("bare CR in chunk size line")
        );
        assert_eq!(
            bad(b"5\r\nhello\rx0\r\n\r\n"),
            BodyError::BadChunk("bare CR after chunk data")
        );
        assert_eq!(
            bad(b"0\r\n\rx"),
            BodyError::BadChunk("bare CR after last chunk")
        );
        assert_eq!(
            bad(b"0\r\nX: y\rz\r\n\r\n"),
            BodyError::BadChunk("bare CR in trailer section")
        );
        assert_eq!(
            bad(b"5;ext=val\rue\r\nhello\r\n0\r\n\r\n"),
            BodyError::BadChunk("bare CR in chunk size line")
        );
    }

    #[test]
    fn rejects_data_longer_than_its_size() {
        assert_eq!(
            bad(b"5\r\nhello!\r\n0\r\n\r\n"),
            BodyError::BadChunk("missing CRLF after chunk data")
        );
        // Missing the last chunk: "\r\n" where a size should be.
        assert_eq!(
            bad(b"5\r\nhello\r\n6\r\n world\r\n\r\n"),
            BodyError::BadChunk("missing chunk size")
        );
    }

    #[test]
    fn rejects_invalid_extensions() {
        for input in [
            &b"5;\r\nhello\r\n0\r\n\r\n"[..],
            b"5;=x\r\nhello\r\n0\r\n\r\n",
            b"5;a=\r\nhello\r\n0\r\n\r\n",
            b"5;a b\r\nhello\r\n0\r\n\r\n",
            b"5;a=b c\r\nhello\r\n0\r\n\r\n",
            b"5;a \r\nhello\r\n0\r\n\r\n",
            b"5;a=b \r\nhello\r\n0\r\n\r\n",
            b"5;a=\"b\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"b\"c\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"\\\x01\"\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"\\\r\nhello\r\n0\r\n\r\n",
            b"5;a=b\x00\r\nhello\r\n0\r\n\r\n",
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",
            b"5;a@b\r\nhello\r\n0\r\n\r\n",
        ] {
            assert_eq!(
                bad(input),
                BodyError::BadChunk("invalid chunk extension"),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn rejects_invalid_trailers() {
        assert_eq!(
            bad(b"0\r\n X: y\r\n\r\n"),
            BodyError::BadChunk("invalid trailer field")
        );
        assert_eq!(
            bad(b"0\r\nX: y\r\n z\r\n\r\n"),
            BodyError::BadChunk("invalid trailer field")
        );
        assert_eq!(
            bad(b"0\r\nX : y\r\n\r\n"),
            BodyError::BadChunk("invalid trailer field name")
        );
        assert_eq!(
            bad(b"0\r\nX\r\n\r\n"),
            BodyError::BadChunk("invalid trailer field name")
        );
        assert_eq!(
            bad(b"0\r\n:y\r\n\r\n"),
            BodyError::BadChunk("invalid trailer field")
        );
        assert_eq!(
            bad(b"0\r\nX: a\x00b\r\n\r\n"),
            BodyError::BadChunk("invalid trailer field value")
        );
        assert_eq!(
            bad(b"0\r\nX: a\x07b\r\n\r\n"),
            BodyError::BadChunk("invalid trailer field value")
        );
        assert_eq!(
            bad(b"0\r\nX: a\x7fb\r\n\r\n"),
            BodyError::BadChunk("invalid trailer field value")
        );
    }

    #[test]
    fn rejects_forbidden_trailers() {
        for name in [
            "Content-Length",
            "content-length",
            "Transfer-Encoding",
            "HOST",
            "Trailer",
        ] {
            let input = format!("5\r\nhello\r\n0\r\n{name}: 99\r\n\r\n");
            assert_eq!(
                bad(input.as_bytes()),
                BodyError::BadChunk("forbidden trailer field"),
                "{name}"
            );
        }
        // Names that only start like a forbidden one are fine.
        assert_eq!(
            body(b"0\r\nHosts: x\r\nContent-Lengths: 1\r\nHos: y\r\n\r\n"),
            b""
        );
    }

    #[test]
    fn enforces_max_body() {
        let input = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        assert_eq!(
            decode_all_ways(input, 11).map(|r| r.0),
            Ok(b"hello world".to_vec())
        );
        assert_eq!(decode_all_ways(input, 10), Err(BodyError::TooLarge));
        assert_eq!(decode_all_ways(input, 0), Err(BodyError::TooLarge));
        assert_eq!(decode_all_ways(b"0\r\n\r\n", 0).map(|r| r.2), Ok(true));
        // Refused at the size line, before any of the oversized chunk is buffered.
        let mut d = ChunkedDecoder::new(4);
        let mut out = Vec::new();
        assert_eq!(d.decode(b"5\r\n", &mut out), Err(BodyError::TooLarge));
        assert!(out.is_empty());
    }

    #[test]
    fn enforces_size_line_limit() {
        let mut input = vec![b'0'; MAX_CHUNK_SIZE_LINE_BYTES];
        input.extend_from_slice(b"1\r\n");
        let mut d = ChunkedDecoder::new(MAX);
        assert_eq!(
            d.decode(&input, &mut Vec::new()),
            Err(BodyError::BadChunk("chunk size line too long"))
        );
        let mut input = vec![b'0'; MAX_CHUNK_SIZE_LINE_BYTES - 1];
        input.extend_from_slice(b"1\r\nx\r\n0\r\n\r\n");
        let mut out = Vec::new();
        assert_eq!(
            ChunkedDecoder::new(MAX).decode(&input, &mut out),
            Ok((input.len(), true))
        );
        assert_eq!(out, b"x");
    }

    #[test]
    fn enforces_extension_total() {
        let mut input = Vec::new();
        let ext = format!(";{}", "e".repeat(1000));
        for _ in 0..20 {
            input.extend_from_slice(format!("1{ext}\r\nx\r\n").as_bytes());
        }
        let mut d = ChunkedDecoder::new(MAX);
        assert_eq!(
            d.decode(&input, &mut Vec::new()),
            Err(BodyError::BadChunk("chunk extensions too long"))
        );
    }

    #[test]
    fn enforces_trailer_limit() {
        let mut input = b"0\r\n".to_vec();
        for _ in 0..200 {
            input.extend_from_slice(format!("X-Pad: {}\r\n", "p".repeat(100)).as_bytes());
        }
        input.extend_from_slice(b"\r\n");
        let mut d = ChunkedDecoder::new(MAX);
        assert_eq!(
            d.decode(&input, &mut Vec::new()),
            Err(BodyError::BadChunk("trailer section too large"))
        );
    }

    #[test]
    fn errors_are_sticky() {
        let mut d = ChunkedDecoder::new(MAX);
        let mut out = Vec::new();
        let e = d.decode(b"zz", &mut out);
        assert_eq!(e, Err(BodyError::BadChunk("missing chunk size")));
        assert_eq!(d.decode(b"0\r\n\r\n", &mut out), e);
        assert_eq!(d.decode(b"", &mut out), e);
    }

    #[test]
    fn reports_progress() {
        let mut d = ChunkedDecoder::new(MAX);
        let mut out = Vec::new();
        assert_eq!(d.decode(b"5\r\nhe", &mut out), Ok((5, false)));
        assert_eq!(out, b"he");
        assert_eq!(d.decode(b"llo\r\n0\r\n\r\nNEXT", &mut out), Ok((10, true)));
        assert_eq!(out, b"hello");
        assert_eq!(d.decode(b"more", &mut out), Ok((0, true)));
    }

    #[test]
    fn error_statuses() {
        assert_eq!(BodyError::BadChunk("x").status(), 400);
        assert_eq!(BodyError::TooLarge.status(), 413);
        assert_eq!(BodyError::TooLarge.reason(), "Content Too Large");
    }
}
