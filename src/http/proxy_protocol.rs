//! The PROXY protocol header (HAProxy's proxy-protocol.txt, versions 1 and 2): what a load
//! balancer in TCP mode prepends to a connection so that the server sees the client's
//! address and port instead of the balancer's.
//!
//! One pure function, [`parse`], over the bytes that have arrived so far: a whole header
//! (its length, so the first request starts right after it, and the client's address when
//! the header carries one), more bytes needed, or a refusal. It decides from the first byte
//! when it can: proxy-protocol.txt §2 says the receiver "MUST not try to guess whether the
//! protocol header is present", so a plain HTTP request or a TLS hello on a listener that
//! expects the header is refused at once instead of waiting for a signature's worth of bytes.
//!
//! Strict throughout (proxy-protocol.txt §2.1: "Any sequence which does not exactly match
//! the protocol must be discarded and cause the receiver to abort the connection"): the
//! header decides which address `REMOTE_ADDR` and the access log show, so a lenient reading
//! only helps whoever forges one. Nothing here allocates, does I/O or panics on any input.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// proxy-protocol.txt §2.1: a v1 header starts with "PROXY" and exactly one space.
const V1_PREFIX: &[u8] = b"PROXY ";
/// proxy-protocol.txt §2.1: the longest v1 line, in bytes including its CRLF (the "worst
/// case" UNKNOWN line with two full IPv6 addresses and ports); "If the CRLF sequence is not
/// found in the first 107 characters, the receiver should declare the line invalid".
pub(crate) const MAX_V1_LEN: usize = 107;
/// proxy-protocol.txt §2.2: the 12-byte v2 signature (note the NUL at the 5th byte).
const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";
/// proxy-protocol.txt §2.2: signature, version/command byte, family/protocol byte and the
/// 2-byte length of what follows, in bytes.
const V2_HEADER_BYTES: usize = 16;
/// Longest v2 address block plus TLVs we accept, in bytes (the length field allows 65535).
/// The address block is at most 216 bytes (two AF_UNIX paths, proxy-protocol.txt §2.2) and
/// the TLVs a load balancer sends (ALPN, authority, unique ID of up to 128 bytes, SSL
/// details, a CRC, a VPC endpoint ID) fit well within this; a peer announcing more is not a
/// load balancer, and waiting for 64 KiB of it would let it hold a connection's buffer.
pub(crate) const MAX_V2_LEN: usize = 4096;

/// proxy-protocol.txt §2.2: the command, the low nibble of the 13th byte.
const CMD_LOCAL: u8 = 0x0;
const CMD_PROXY: u8 = 0x1;
/// proxy-protocol.txt §2.2: the address family, the high nibble of the 14th byte.
const AF_UNSPEC: u8 = 0x0;
const AF_INET: u8 = 0x1;
const AF_INET6: u8 = 0x2;
const AF_UNIX: u8 = 0x3;
/// proxy-protocol.txt §2.2: the transport protocol, the low nibble of the 14th byte.
const PROTO_UNSPEC: u8 = 0x0;
const PROTO_STREAM: u8 = 0x1;
const PROTO_DGRAM: u8 = 0x2;
/// proxy-protocol.txt §2.2: address block sizes, in bytes: two addresses, then (INET and
/// INET6) two 2-byte ports.
const INET_ADDR_BYTES: usize = 2 * 4 + 2 * 2;
const INET6_ADDR_BYTES: usize = 2 * 16 + 2 * 2;
const UNIX_ADDR_BYTES: usize = 2 * 108;
/// proxy-protocol.txt §2.2: a TLV's type byte and 2-byte length, in bytes.
const TLV_HEADER_BYTES: usize = 3;

/// What the bytes at the start of a connection amount to so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed; nothing consumed.
    Partial,
    /// A complete header of `len` bytes at the start of the buffer; the first request starts
    /// at `buf[len..]`. `source` is the client's address and port, or `None` when the
    /// connection keeps its real peer address (v1 UNKNOWN; v2 LOCAL, AF_UNSPEC, AF_UNIX or
    /// DGRAM).
    Done {
        len: usize,
        source: Option<SocketAddr>,
    },
}

/// Why a connection's first bytes were refused. Every one closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The bytes cannot be the start of either header (e.g. a plain HTTP request).
    NotProxy,
    /// A header that breaks the grammar; the str is a short reason for the log.
    Malformed(&'static str),
    /// A v1 line without CRLF within `MAX_V1_LEN` bytes, or a v2 length over `MAX_V2_LEN`.
    TooLong,
    /// A v2 header with a version or command this parser does not know.
    Unsupported(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotProxy => f.write_str("not a proxy protocol header"),
            Error::Malformed(why) => write!(f, "malformed proxy protocol header: {why}"),
            Error::TooLong => f.write_str("proxy protocol header too long"),
            Error::Unsupported(what) => write!(f, "unsupported proxy protocol header: {what}"),
        }
    }
}

impl std::error::Error for Error {}

fn malformed(why: &'static str) -> Error {
    Error::Malformed(why)
}

/// Parses the PROXY protocol header at the start of `buf`.
///
/// Incremental: call again with the same buffer, grown. Every proper prefix of a valid
/// header gives `Partial`, and the parse never looks past the header (what follows is the
/// first request). A buffer that cannot start either header gives `NotProxy` from its first
/// differing byte; other refusals also come as early as the bytes allow.
pub fn parse(buf: &[u8]) -> Result<Parsed, Error> {
    if buf.starts_with(V1_PREFIX) {
        return parse_v1(buf);
    }
    if buf.starts_with(V2_SIGNATURE) {
        return parse_v2(buf);
    }
    // proxy-protocol.txt §2.2 ("Identifying the protocol version"): anything but the two
    // signatures "is not covered by this specification and the connection must be dropped".
    // The signatures differ in their first byte, so a buffer is a proper prefix of at most
    // one of them; the empty buffer is a prefix of both.
    if V1_PREFIX.starts_with(buf) || V2_SIGNATURE.starts_with(buf) {
        Ok(Parsed::Partial)
    } else {
        Err(Error::NotProxy)
    }
}

/// proxy-protocol.txt §2.1: the v1 line, "PROXY " already matched at the start of `buf`.
fn parse_v1(buf: &[u8]) -> Result<Parsed, Error> {
    let window = buf.get(..MAX_V1_LEN).unwrap_or(buf);
    let rest = window.get(V1_PREFIX.len()..).unwrap_or(&[]);
    for (i, &b) in rest.iter().enumerate() {
        match b {
            b'\r' => {
                // Length of the line if the CR is followed by its LF.
                let len = V1_PREFIX.len() + i + 2;
                if len > MAX_V1_LEN {
                    // §2.1: "If the CRLF sequence is not found in the first 107 characters,
                    // the receiver should declare the line invalid."
                    return Err(Error::TooLong);
                }
                return match buf.get(V1_PREFIX.len() + i + 1) {
                    None => Ok(Parsed::Partial),
                    Some(b'\n') => {
                        // §2.1: "The receiver must wait for the CRLF sequence before starting
                        // to decode the addresses": only now is the line read.
                        let line = rest.get(..i).unwrap_or(&[]);
                        let source = parse_v1_line(line)?;
                        Ok(Parsed::Done { len, source })
                    }
                    // §2.1: "The receiver must not tolerate a single CR or LF character to end
                    // the line when a complete CRLF sequence is expected."
                    Some(_) => Err(malformed("v1 CR not followed by LF")),
                };
            }
            b'\n' => return Err(malformed("v1 LF without CR")),
            // §2.1: the header is "one line of US-ASCII text"; a control byte or a byte
            // above 0x7F can never become valid, so refuse it before the CRLF arrives.
            0x00..=0x1f | 0x7f..=0xff => {
                return Err(malformed("v1 control or non-ASCII byte"));
            }
            _ => {}
        }
    }
    if window.len() >= MAX_V1_LEN {
        // §2.1: 107 bytes in and no CR: the CRLF cannot come in time.
        Err(Error::TooLong)
    } else {
        Ok(Parsed::Partial)
    }
}

/// proxy-protocol.txt §2.1: the line between "PROXY " and the CRLF, checked to be printable
/// ASCII: `("TCP4" | "TCP6") SP src SP dst SP srcport SP dstport`, or "UNKNOWN" and anything.
fn parse_v1_line(line: &[u8]) -> Result<Option<SocketAddr>, Error> {
    let (proto, fields) = match line.iter().position(|&b| b == b' ') {
        Some(sp) => (line.get(..sp).unwrap_or(&[]), line.get(sp + 1..)),
        None => (line, None),
    };
    let v6 = match proto {
        // §2.1: "For "UNKNOWN", the rest of the line before the CRLF may be omitted by the
        // sender, and the receiver must ignore anything presented before the CRLF is found."
        // §2.1 also: the receiver "SHOULD accept the connection and use the real
        // connection's parameters".
        b"UNKNOWN" => return Ok(None),
        // §2.1: "only "TCP4" ... for TCP over IPv4, and "TCP6" ... for TCP over IPv6 are
        // allowed" (case-sensitive: the spec gives the exact bytes).
        b"TCP4" => false,
        b"TCP6" => true,
        // "PROXY \r\n": no protocol at all.
        b"" if fields.is_none() => return Err(malformed("v1 header has too few fields")),
        // "PROXY  TCP4 ...": §2.1 "exactly one space".
        b"" => {
            return Err(malformed(
                "v1 fields must be separated by exactly one space",
            ))
        }
        _ => return Err(malformed("v1 protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    let Some(fields) = fields else {
        return Err(malformed("v1 header has too few fields"));
    };
    // §2.1: "exactly one space" between fields, so an empty field (two spaces in a row, or a
    // space before the CRLF) is an error, not something to skip.
    let mut it = fields.split(|&b| b == b' ');
    let src = next_field(&mut it)?;
    let dst = next_field(&mut it)?;
    let src_port = next_field(&mut it)?;
    let dst_port = next_field(&mut it)?;
    if it.next().is_some() {
        return Err(malformed("v1 header has bytes after the destination port"));
    }
    // §2.1: "The advertised protocol family dictates what format to use", and the
    // destination "matches the same family": both addresses are checked, though only the
    // source is used.
    let (src, _dst) = if v6 {
        (parse_ipv6(src)?, parse_ipv6(dst)?)
    } else {
        (parse_ipv4(src)?, parse_ipv4(dst)?)
    };
    let src_port = parse_port(src_port)?;
    parse_port(dst_port)?;
    Ok(Some(SocketAddr::new(src, src_port)))
}

/// The next space-separated v1 field, which must not be empty (§2.1: "exactly one space").
fn next_field<'a>(it: &mut impl Iterator<Item = &'a [u8]>) -> Result<&'a [u8], Error> {
    match it.next() {
        None => Err(malformed("v1 header has too few fields")),
        Some([]) => Err(malformed(
            "v1 fields must be separated by exactly one space",
        )),
        Some(field) => Ok(field),
    }
}

/// proxy-protocol.txt §2.1: "IPv4 addresses must be indicated as a series of exactly 4
/// integers in the range [0..255] inclusive written in decimal representation separated by
/// exactly one dot between each other. Heading zeroes are not permitted".
fn parse_ipv4(field: &[u8]) -> Result<IpAddr, Error> {
    const BAD: Error = Error::Malformed("v1 TCP4 address is not a dotted quad");
    let mut octets = [0u8; 4];
    let mut parts = field.split(|&b| b == b'.');
    for octet in &mut octets {
        let part = parts.next().ok_or(BAD)?;
        *octet = parse_decimal(part, u8::MAX.into())
            .and_then(|n| u8::try_from(n).ok())
            .ok_or(BAD)?;
    }
    if parts.next().is_some() {
        return Err(BAD);
    }
    Ok(IpAddr::V4(Ipv4Addr::from(octets)))
}

/// proxy-protocol.txt §2.1: an IPv6 address, hex groups with at most one "::". std's parser
/// takes exactly the RFC 4291 §2.2 text forms (no zone, no brackets, no sign), including
/// the embedded-IPv4 form, which is an IPv6 address all the same.
fn parse_ipv6(field: &[u8]) -> Result<IpAddr, Error> {
    std::str::from_utf8(field)
        .ok()
        .and_then(|s| s.parse::<Ipv6Addr>().ok())
        .map(IpAddr::V6)
        .ok_or(malformed("v1 TCP6 address is not an IPv6 address"))
}

/// proxy-protocol.txt §2.1: a port is "a decimal integer in the range [0..65535] inclusive.
/// Heading zeroes are not permitted".
fn parse_port(field: &[u8]) -> Result<u16, Error> {
    parse_decimal(field, u16::MAX.into())
        .and_then(|n| u16::try_from(n).ok())
        .ok_or(malformed("v1 port is not a decimal number from 0 to 65535"))
}

/// A decimal number of at most `max`: ASCII digits only (no sign, no space), no leading
/// zero unless it is "0" itself (proxy-protocol.txt §2.1, "to avoid any possible confusion
/// with octal numbers").
fn parse_decimal(digits: &[u8], max: u32) -> Option<u32> {
    if digits.is_empty() || (digits.len() > 1 && digits.first() == Some(&b'0')) {
        return None;
    }
    let mut n: u32 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u32::from(d - b'0'))?;
        if n > max {
            return None;
        }
    }
    Some(n)
}

/// proxy-protocol.txt §2.2: the binary header, the 12-byte signature already matched at the
/// start of `buf`. Each fixed byte is judged as soon as it arrives.
fn parse_v2(buf: &[u8]) -> Result<Parsed, Error> {
    let Some(&ver_cmd) = buf.get(V2_SIGNATURE.len()) else {
        return Ok(Parsed::Partial);
    };
    // §2.2: "The highest four bits contains the version. As of this specification, it must
    // always be sent as \x2 and the receiver must only accept this value."
    if ver_cmd >> 4 != 2 {
        return Err(Error::Unsupported("v2 version is not 2"));
    }
    // §2.2: the command is LOCAL or PROXY; "other values are unassigned and must not be
    // emitted by senders. Receivers must drop connections presenting unexpected values".
    let command = ver_cmd & 0x0f;
    if command != CMD_LOCAL && command != CMD_PROXY {
        return Err(Error::Unsupported("v2 command is neither LOCAL nor PROXY"));
    }
    let Some(&fam) = buf.get(V2_SIGNATURE.len() + 1) else {
        return Ok(Parsed::Partial);
    };
    let (family, proto) = (fam >> 4, fam & 0x0f);
    // §2.2: for LOCAL the receiver "must use the real connection endpoints and discard the
    // protocol block including the family which is ignored", so the family byte is only
    // checked for PROXY, where families above AF_UNIX and protocols above DGRAM "must be
    // rejected as invalid by receivers".
    if command == CMD_PROXY && (family > AF_UNIX || proto > PROTO_DGRAM) {
        return Err(malformed("v2 address family or protocol is unassigned"));
    }
    let Some(&[hi, lo]) = buf.get(V2_SIGNATURE.len() + 2..V2_HEADER_BYTES) else {
        return Ok(Parsed::Partial);
    };
    // §2.2: "the length of the protocol header in bytes is always exactly 16 + this value"
    // (big-endian). Over MAX_V2_LEN is refused now rather than waited for.
    let len = usize::from(u16::from_be_bytes([hi, lo]));
    if len > MAX_V2_LEN {
        return Err(Error::TooLong);
    }
    // §2.2: the address block sizes: "Address length is 2*4 + 2*2 = 12 bytes" for TCP and
    // UDP over IPv4, 36 over IPv6, "2*108 = 216 bytes" for AF_UNIX. A block shorter than its
    // family's is refused as soon as the length is in. With an UNSPEC family or protocol
    // (and for LOCAL) the block is not read at all, so its size is not checked.
    let addr_bytes = match (command, family, proto) {
        (CMD_PROXY, _, PROTO_UNSPEC) | (CMD_PROXY, AF_UNSPEC, _) => 0,
        (CMD_PROXY, AF_INET, _) => INET_ADDR_BYTES,
        (CMD_PROXY, AF_INET6, _) => INET6_ADDR_BYTES,
        (CMD_PROXY, AF_UNIX, _) => UNIX_ADDR_BYTES,
        _ => 0,
    };
    if len < addr_bytes {
        return Err(malformed(
            "v2 address block shorter than its family's addresses",
        ));
    }
    // §2.2: "The receiver must not start to parse an address before the whole address block
    // is received": wait for the whole header, TLVs included.
    let total = V2_HEADER_BYTES + len;
    let Some(block) = buf.get(V2_HEADER_BYTES..total) else {
        return Ok(Parsed::Partial);
    };
    let (addrs, tlvs) = block.split_at_checked(addr_bytes).unwrap_or((&[], &[]));
    if addr_bytes > 0 {
        check_tlvs(tlvs)?;
    }
    // §2.2: AF_INET/AF_INET6 over STREAM is TCP, the one case whose address the connection
    // takes. LOCAL ("must use the real connection endpoints"), AF_UNSPEC ("The receiver
    // should ignore address information"), AF_UNIX (no IP address to report) and DGRAM (the
    // header describes a UDP flow, not this TCP connection) keep the real peer address, as §2.2
    // allows: a receiver "automatically falls back to the UNSPEC mode for the valid
    // combinations above that it does not support".
    let source = match (command, family, proto) {
        (CMD_PROXY, AF_INET, PROTO_STREAM) => Some(inet_source(addrs)?),
        (CMD_PROXY, AF_INET6, PROTO_STREAM) => Some(inet6_source(addrs)?),
        _ => None,
    };
    Ok(Parsed::Done { len: total, source })
}

/// proxy-protocol.txt §2.2: `src_addr[4] dst_addr[4] src_port[2] dst_port[2]`, big-endian.
fn inet_source(addrs: &[u8]) -> Result<SocketAddr, Error> {
    let &[a, b, c, d, _, _, _, _, p0, p1, _, _] = addrs else {
        return Err(malformed("v2 IPv4 address block has the wrong size"));
    };
    let ip = Ipv4Addr::new(a, b, c, d);
    Ok(SocketAddr::new(
        IpAddr::V4(ip),
        u16::from_be_bytes([p0, p1]),
    ))
}

/// proxy-protocol.txt §2.2: `src_addr[16] dst_addr[16] src_port[2] dst_port[2]`,
/// big-endian.
fn inet6_source(addrs: &[u8]) -> Result<SocketAddr, Error> {
    const BAD: Error = Error::Malformed("v2 IPv6 address block has the wrong size");
    let ip: [u8; 16] = addrs.get(..16).ok_or(BAD)?.try_into().map_err(|_| BAD)?;
    let Some(&[p0, p1]) = addrs.get(32..34) else {
        return Err(BAD);
    };
    let ip = Ipv6Addr::from(ip);
    Ok(SocketAddr::new(
        IpAddr::V6(ip),
        u16::from_be_bytes([p0, p1]),
    ))
}

/// proxy-protocol.txt §2.2: after the address block, "Type-Length-Value (TLV vectors)": a
/// type byte, a 2-byte big-endian length, that many value bytes. A receiver "may choose to
/// skip over and ignore the TLVs it is not interested in", and we use none, so only the
/// framing is checked: each TLV must end exactly within the header, as HAProxy requires.
/// PP2_TYPE_CRC32C (§2.2.3) is not verified: the checksum is for receivers that choose to
/// support it, and the header comes from a trusted proxy over TCP anyway.
fn check_tlvs(mut tlvs: &[u8]) -> Result<(), Error> {
    while !tlvs.is_empty() {
        let Some((&[_kind, hi, lo], rest)) = tlvs.split_first_chunk::<TLV_HEADER_BYTES>() else {
            return Err(malformed("v2 TLV shorter than its type and length"));
        };
        let value_len = usize::from(u16::from_be_bytes([hi, lo]));
        tlvs = rest
            .get(value_len..)
            .ok_or(malformed("v2 TLV runs past the end of the header"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTTP: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

    /// Parses `header` whole and checks everything an incremental caller relies on: every
    /// proper prefix is `Partial`, the whole is `Done` with `len == header.len()`, and the
    /// same `Done` comes back with an HTTP request appended (which is not consumed).
    fn done(header: &[u8]) -> Option<SocketAddr> {
        for k in 0..header.len() {
            assert_eq!(
                parse(&header[..k]),
                Ok(Parsed::Partial),
                "prefix {k} of {header:?}"
            );
        }
        let whole = parse(header);
        let Ok(Parsed::Done { len, source }) = whole else {
            panic!("{header:?}: {whole:?}");
        };
        assert_eq!(len, header.len(), "{header:?}");
        let mut followed = header.to_vec();
        followed.extend_from_slice(HTTP);
        assert_eq!(parse(&followed), whole, "{header:?} followed by a request");
        source
    }

    fn err(buf: &[u8]) -> Error {
        match parse(buf) {
            Err(e) => e,
            other => panic!("{buf:?}: {other:?}"),
        }
    }

    fn addr(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    /// A v2 header: signature, `ver_cmd`, `fam`, the length of `body`, then `body`.
    fn v2(ver_cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(ver_cmd);
        out.push(fam);
        out.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn tlv(kind: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
        out.extend_from_slice(value);
        out
    }

    /// 1.2.3.4:5678 -> 10.0.0.1:443.
    const INET_BLOCK: [u8; 12] = [1, 2, 3, 4, 10, 0, 0, 1, 0x16, 0x2e, 0x01, 0xbb];

    fn inet6_block() -> Vec<u8> {
        let mut out = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets().to_vec();
        out.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        out.extend_from_slice(&[0xff, 0xff, 0x00, 0x50]);
        out
    }

    // ---- signature detection ----

    #[test]
    fn empty_and_signature_prefixes_are_partial() {
        assert_eq!(parse(b""), Ok(Parsed::Partial));
        for k in 1..V1_PREFIX.len() {
            assert_eq!(parse(&V1_PREFIX[..k]), Ok(Parsed::Partial), "{k}");
        }
        for k in 1..=V2_SIGNATURE.len() {
            assert_eq!(parse(&V2_SIGNATURE[..k]), Ok(Parsed::Partial), "{k}");
        }
    }

    #[test]
    fn plain_http_is_refused_from_the_first_byte() {
        let req = b"GET / HTTP/1.1\r\n";
        for k in 1..=req.len() {
            assert_eq!(parse(&req[..k]), Err(Error::NotProxy), "{k}");
        }
        // A TLS ClientHello, a lower-case "proxy", HTTP's tolerated leading CRLFs.
        assert_eq!(err(b"\x16\x03\x01\x02\x00"), Error::NotProxy);
        assert_eq!(err(b"p"), Error::NotProxy);
        assert_eq!(err(b"PROXZ"), Error::NotProxy);
        assert_eq!(err(b"PROXY\r\n"), Error::NotProxy);
        assert_eq!(err(b"POST / HTTP/1.1\r\n"), Error::NotProxy);
        assert_eq!(err(b"\r\n\r\nGET"), Error::NotProxy);
        assert_eq!(err(b"\r\n\r\n\0\r\nQUIT\r"), Error::NotProxy);
    }

    // ---- v1 ----

    #[test]
    fn v1_tcp4() {
        assert_eq!(
            done(b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"),
            addr("192.168.0.1:56324")
        );
        assert_eq!(
            done(b"PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n"),
            addr("0.0.0.0:0")
        );
        // The longest TCP4 line (§2.1: 56 bytes).
        let line = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
        assert_eq!(line.len(), 56);
        assert_eq!(done(line), addr("255.255.255.255:65535"));
    }

    #[test]
    fn v1_tcp6() {
        assert_eq!(
            done(b"PROXY TCP6 2001:db8::1 2001:db8::2 1234 80\r\n"),
            addr("[2001:db8::1]:1234")
        );
        assert_eq!(done(b"PROXY TCP6 :: ::1 0 1\r\n"), addr("[::]:0"));
        assert_eq!(
            done(b"PROXY TCP6 ABCD:ef01::1 ::ffff:1.2.3.4 9 9\r\n"),
            addr("[abcd:ef01::1]:9")
        );
        // The longest TCP6 line (§2.1: 104 bytes).
        let f = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
        let line = format!("PROXY TCP6 {f} {f} 65535 65535\r\n");
        assert_eq!(line.len(), 104);
        assert_eq!(
            done(line.as_bytes()),
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from([0xff; 16])),
                65535
            ))
        );
    }

    #[test]
    fn v1_unknown_keeps_the_peer_address() {
        assert_eq!(done(b"PROXY UNKNOWN\r\n"), None);
        assert_eq!(done(b"PROXY UNKNOWN ffff::1 ffff::2 65535 65535\r\n"), None);
        // §2.1: anything before the CRLF is ignored, even what would be malformed for TCP4.
        assert_eq!(done(b"PROXY UNKNOWN  x  y 007 99999 \r\n"), None);
        assert_eq!(done(b"PROXY UNKNOWN \r\n"), None);
    }

    #[test]
    fn v1_107_byte_limit() {
        let head = b"PROXY UNKNOWN ";
        let line = |total: usize| {
            let mut l = head.to_vec();
            l.resize(total - 2, b'f');
            l.extend_from_slice(b"\r\n");
            l
        };
        let ok = line(MAX_V1_LEN);
        assert_eq!(ok.len(), 107);
        assert_eq!(done(&ok), None);
        let long = line(MAX_V1_LEN + 1);
        assert_eq!(err(&long), Error::TooLong);
        // Refused as soon as 107 bytes without a CRLF have arrived, not before.
        assert_eq!(parse(&long[..MAX_V1_LEN - 1]), Ok(Parsed::Partial));
        assert_eq!(err(&long[..MAX_V1_LEN]), Error::TooLong);
        // The CR as the 107th byte leaves no room for the LF.
        let mut cr_last = long[..MAX_V1_LEN - 1].to_vec();
        cr_last.push(b'\r');
        assert_eq!(err(&cr_last), Error::TooLong);
        // A long run of spaces (no CR at all).
        let mut spaces = b"PROXY ".to_vec();
        spaces.resize(200, b' ');
        assert_eq!(err(&spaces), Error::TooLong);
    }

    #[test]
    fn v1_malformed() {
        let cases: &[&[u8]] = &[
            // Spacing.
            b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8  1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1  2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n",
            b"PROXY TCP4 1.2.3.4\t5.6.7.8 1 2\r\n",
            b"PROXY \r\n",
            // Protocol word.
            b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY UNKNOWNX\r\n",
            b"PROXY unknown\r\n",
            // Missing fields.
            b"PROXY TCP4\r\n",
            b"PROXY TCP4 \r\n",
            b"PROXY TCP4 1.2.3.4\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            // Trailing junk before the CRLF.
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 x\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2x\r\n",
            // Ports.
            b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 99999999999 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 00 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 0x50 2\r\n",
            // IPv4 addresses.
            b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.004 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 256.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1..3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4. 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.+8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.256 1 2\r\n",
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n",
            // IPv6 addresses.
            b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            b"PROXY TCP6 ::1 1.2.3.4 1 2\r\n",
            b"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n",
            b"PROXY TCP6 [::1] ::1 1 2\r\n",
            b"PROXY TCP6 1::2::3 ::1 1 2\r\n",
            b"PROXY TCP6 12345::1 ::1 1 2\r\n",
            b"PROXY TCP6 1:2:3:4:5:6:7 ::1 1 2\r\n",
            // Line endings and bytes.
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n",
            b"PROXY UNKNOWN\n",
            b"PROXY UNKNOWN\0\r\n",
            b"PROXY UNKNOWN \x7f\r\n",
            b"PROXY UNKNOWN \xc3\xa9\r\n",
            b"PROXY UNKNOWN\t\r\n",
        ];
        for &case in cases {
            assert!(
                matches!(parse(case), Err(Error::Malformed(_))),
                "{:?}: {:?}",
                String::from_utf8_lossy(case),
                parse(case)
            );
        }
    }

    #[test]
    fn v1_bad_bytes_are_refused_before_the_crlf() {
        assert!(matches!(err(b"PROXY TCP4 1.2\n"), Error::Malformed(_)));
        assert!(matches!(err(b"PROXY TCP4 1.2\0"), Error::Malformed(_)));
        assert!(matches!(err(b"PROXY TCP4 1.2\rx"), Error::Malformed(_)));
        assert_eq!(parse(b"PROXY TCP4 1.2\r"), Ok(Parsed::Partial));
    }

    // ---- v2 ----

    #[test]
    fn v2_proxy_inet_with_tlvs() {
        let mut body = INET_BLOCK.to_vec();
        body.extend(tlv(0x01, b"h2")); // PP2_TYPE_ALPN
        body.extend(tlv(0x04, b"")); // PP2_TYPE_NOOP
        body.extend(tlv(0x05, &[7; 128])); // PP2_TYPE_UNIQUE_ID
        assert_eq!(done(&v2(0x21, 0x11, &body)), addr("1.2.3.4:5678"));
        // No TLVs.
        assert_eq!(done(&v2(0x21, 0x11, &INET_BLOCK)), addr("1.2.3.4:5678"));
    }

    #[test]
    fn v2_proxy_inet6() {
        assert_eq!(
            done(&v2(0x21, 0x21, &inet6_block())),
            addr("[2001:db8::1]:65535")
        );
        let mut body = inet6_block();
        body.extend(tlv(0x02, b"example.com")); // PP2_TYPE_AUTHORITY
        assert_eq!(done(&v2(0x21, 0x21, &body)), addr("[2001:db8::1]:65535"));
    }

    #[test]
    fn v2_without_an_address_keeps_the_peer_address() {
        // LOCAL (a health check), with and without an address block; its family is ignored.
        assert_eq!(done(&v2(0x20, 0x00, b"")), None);
        assert_eq!(done(&v2(0x20, 0x11, &INET_BLOCK)), None);
        assert_eq!(done(&v2(0x20, 0xff, b"anything")), None);
        // PROXY with AF_UNSPEC or an UNSPEC protocol: the block is skipped unread.
        assert_eq!(done(&v2(0x21, 0x00, b"")), None);
        assert_eq!(done(&v2(0x21, 0x00, b"xyz")), None);
        assert_eq!(done(&v2(0x21, 0x10, b"")), None);
        // AF_UNIX, stream and datagram.
        let mut unix = vec![0u8; UNIX_ADDR_BYTES];
        unix[..9].copy_from_slice(b"/tmp/sock");
        assert_eq!(done(&v2(0x21, 0x31, &unix)), None);
        assert_eq!(done(&v2(0x21, 0x32, &unix)), None);
        // UDP over IPv4 and IPv6.
        assert_eq!(done(&v2(0x21, 0x12, &INET_BLOCK)), None);
        assert_eq!(done(&v2(0x21, 0x22, &inet6_block())), None);
    }

    #[test]
    fn v2_bad_version_or_command_is_refused_at_the_13th_byte() {
        for ver_cmd in [0x11, 0x01, 0x31, 0xf1] {
            let h = v2(ver_cmd, 0x11, &INET_BLOCK);
            assert!(
                matches!(err(&h[..13]), Error::Unsupported(_)),
                "{ver_cmd:#x}"
            );
            assert!(matches!(err(&h), Error::Unsupported(_)), "{ver_cmd:#x}");
        }
        for ver_cmd in [0x22, 0x2f] {
            let h = v2(ver_cmd, 0x11, &INET_BLOCK);
            assert!(
                matches!(err(&h[..13]), Error::Unsupported(_)),
                "{ver_cmd:#x}"
            );
        }
    }

    #[test]
    fn v2_unassigned_family_or_protocol() {
        for fam in [0x41, 0xf1, 0x13, 0x1f] {
            let h = v2(0x21, fam, &INET_BLOCK);
            assert!(matches!(err(&h[..14]), Error::Malformed(_)), "{fam:#x}");
        }
    }

    #[test]
    fn v2_short_address_block() {
        // Refused once the length is in (16 bytes), without waiting for the block.
        let h = v2(0x21, 0x11, &INET_BLOCK[..8]);
        assert!(matches!(err(&h[..16]), Error::Malformed(_)));
        assert!(matches!(err(&h), Error::Malformed(_)));
        assert!(matches!(
            err(&v2(0x21, 0x21, &[0; 12])),
            Error::Malformed(_)
        ));
        assert!(matches!(
            err(&v2(0x21, 0x21, &[0; 35])),
            Error::Malformed(_)
        ));
        assert!(matches!(
            err(&v2(0x21, 0x12, &[0; 11])),
            Error::Malformed(_)
        ));
        assert!(matches!(
            err(&v2(0x21, 0x31, &[0; 215])),
            Error::Malformed(_)
        ));
        assert!(matches!(err(&v2(0x21, 0x11, b"")), Error::Malformed(_)));
    }

    #[test]
    fn v2_bad_tlvs() {
        let mut body = INET_BLOCK.to_vec();
        body.extend_from_slice(&[0x04, 0x00]);
        assert!(matches!(err(&v2(0x21, 0x11, &body)), Error::Malformed(_)));
        let mut body = INET_BLOCK.to_vec();
        body.extend_from_slice(&[0x04, 0x00, 0x05, 1, 2, 3, 4]);
        assert!(matches!(err(&v2(0x21, 0x11, &body)), Error::Malformed(_)));
    }

    #[test]
    fn v2_length_limit() {
        // Exactly MAX_V2_LEN: the address block and one NOOP TLV filling the rest.
        let mut body = INET_BLOCK.to_vec();
        body.extend(tlv(
            0x04,
            &vec![0; MAX_V2_LEN - INET_ADDR_BYTES - TLV_HEADER_BYTES],
        ));
        assert_eq!(body.len(), MAX_V2_LEN);
        let h = v2(0x21, 0x11, &body);
        assert_eq!(
            parse(&h),
            Ok(Parsed::Done {
                len: 16 + MAX_V2_LEN,
                source: addr("1.2.3.4:5678")
            })
        );
        assert_eq!(parse(&h[..h.len() - 1]), Ok(Parsed::Partial));
        // One more, refused at the 16th byte; also the largest the field can say.
        let mut h = v2(0x21, 0x11, &INET_BLOCK);
        h[14..16].copy_from_slice(&u16::try_from(MAX_V2_LEN + 1).unwrap().to_be_bytes());
        assert_eq!(err(&h[..16]), Error::TooLong);
        h[14..16].copy_from_slice(&[0xff, 0xff]);
        assert_eq!(err(&h[..16]), Error::TooLong);
        // Also for LOCAL, whose block is otherwise ignored.
        let mut h = v2(0x20, 0x00, b"");
        h[14..16].copy_from_slice(&[0x10, 0x01]);
        assert_eq!(err(&h), Error::TooLong);
    }

    #[test]
    fn bytes_after_the_header_are_not_consumed() {
        let mut buf = b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec();
        let len = buf.len();
        buf.extend_from_slice(HTTP);
        assert_eq!(
            parse(&buf),
            Ok(Parsed::Done {
                len,
                source: addr("1.2.3.4:1")
            })
        );
        assert_eq!(&buf[len..], HTTP);
        // A request right after a v2 header, starting with bytes that look like a TLV.
        let mut buf = v2(0x21, 0x11, &INET_BLOCK);
        let len = buf.len();
        buf.extend_from_slice(b"\x04\xff\xffGET / HTTP/1.1\r\n\r\n");
        assert_eq!(
            parse(&buf),
            Ok(Parsed::Done {
                len,
                source: addr("1.2.3.4:5678")
            })
        );
        // A second PROXY header is not consumed either (it is the caller's first request).
        let mut buf = b"PROXY UNKNOWN\r\nPROXY UNKNOWN\r\n".to_vec();
        buf.extend_from_slice(HTTP);
        assert_eq!(
            parse(&buf),
            Ok(Parsed::Done {
                len: 15,
                source: None
            })
        );
    }

    #[test]
    fn error_messages() {
        assert_eq!(Error::NotProxy.to_string(), "not a proxy protocol header");
        assert_eq!(Error::TooLong.to_string(), "proxy protocol header too long");
        assert_eq!(
            Error::Malformed("v1 LF without CR").to_string(),
            "malformed proxy protocol header: v1 LF without CR"
        );
        assert_eq!(
            Error::Unsupported("v2 version is not 2").to_string(),
            "unsupported proxy protocol header: v2 version is not 2"
        );
    }

    /// Every prefix of a few valid headers (followed by a request), with each byte in turn
    /// XORed with a few masks: never a panic, `Done` never claims more than it was given,
    /// and re-parsing exactly the claimed header gives the same answer.
    #[test]
    fn no_panic_on_mutated_headers() {
        let mut with_tlvs = INET_BLOCK.to_vec();
        with_tlvs.extend(tlv(0x01, b"http/1.1"));
        let headers: Vec<Vec<u8>> = vec![
            b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n".to_vec(),
            b"PROXY TCP6 2001:db8::1 ::ffff:1.2.3.4 65535 0\r\n".to_vec(),
            b"PROXY UNKNOWN\r\n".to_vec(),
            v2(0x21, 0x11, &with_tlvs),
            v2(0x21, 0x21, &inet6_block()),
            v2(0x20, 0x00, b""),
        ];
        let mut runs = 0usize;
        for header in &headers {
            let mut base = header.clone();
            base.extend_from_slice(HTTP);
            for i in 0..base.len() {
                for mask in [0x01, 0x02, 0x10, 0x20, 0x80, 0xff] {
                    let mut m = base.clone();
                    m[i] ^= mask;
                    for k in 0..=m.len() {
                        let buf = &m[..k];
                        runs += 1;
                        if let Ok(Parsed::Done { len, .. }) = parse(buf) {
                            assert!(len <= k, "len {len} of {k}: {buf:?}");
                            assert_eq!(parse(&buf[..len]), parse(buf), "{buf:?}");
                        }
                    }
                }
            }
        }
        assert!(runs > 100_000, "{runs}");
    }
}
