//! Reading a response: its head (status, Content-Length, Connection) and its body, counted
//! and not kept, from bytes as they arrive, cut anywhere.

const MAX_HEAD: usize = 64 * 1024;

/// Where a connection's current response is.
pub enum Reading {
    /// The head, whole or in part: the part that has arrived is in `Response::head` unless
    /// it arrived within one read.
    Head,
    /// The body: this many bytes still to come.
    Body(usize),
}

/// A response being read.
pub struct Response {
    pub reading: Reading,
    pub head: Vec<u8>,
    pub status: u16,
    pub close_after: bool,
}

impl Response {
    pub fn new() -> Response {
        Response {
            reading: Reading::Head,
            head: Vec::new(),
            status: 0,
            close_after: false,
        }
    }
}

/// What reading a response's bytes came to.
pub enum Fed {
    /// More bytes are needed.
    More,
    /// The response is complete.
    Done,
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Whether a Connection header's comma-separated tokens include `token`.
fn has_token(value: &str, token: &str) -> bool {
    value
        .split(',')
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Reads a response head: the status and how long its body is. A head's bytes need not
/// be UTF-8 (a Latin-1 header value is read as it is).
fn parse_head(head: &[u8], c: &mut Response) -> Result<usize, String> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    c.status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let http10 = version == "HTTP/1.0";
    c.close_after = http10;
    let mut length = None;
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header {line:?}"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(format!(
                "Transfer-Encoding: {value}: m0load reads Content-Length bodies only"
            ));
        } else if name.eq_ignore_ascii_case("connection") {
            c.close_after =
                has_token(value, "close") || (http10 && !has_token(value, "keep-alive"));
        }
    }
    // A 1xx, 204 or 304 response has no body, whatever Content-Length says (RFC 9112 6.3).
    if c.status < 200 || c.status == 204 || c.status == 304 {
        return Ok(0);
    }
    length.ok_or_else(|| format!("status {}: no Content-Length", c.status))
}

/// Takes `data` as the next bytes of the connection's response.
pub fn feed(c: &mut Response, mut data: &[u8]) -> Result<Fed, String> {
    loop {
        if let Reading::Head = c.reading {
            // Where the head ends in `data`: a terminator straddling the join with bytes
            // already kept starts in their last three.
            let before = c.head.len();
            let keep = before.min(3);
            let mut join = [0u8; 6];
            join[..keep].copy_from_slice(&c.head[before - keep..]);
            let take = data.len().min(3);
            join[keep..keep + take].copy_from_slice(&data[..take]);
            let end = match find_head_end(&join[..keep + take]) {
                Some(e) if before > 0 => Some(e - keep),
                _ => find_head_end(data),
            };
            let Some(end) = end else {
                if before + data.len() > MAX_HEAD {
                    return Err(format!("response head over {MAX_HEAD} bytes"));
                }
                c.head.extend_from_slice(data);
                return Ok(Fed::More);
            };
            let length = if before == 0 {
                parse_head(&data[..end], c)?
            } else {
                let mut head = std::mem::take(&mut c.head);
                head.extend_from_slice(&data[..end]);
                let r = parse_head(&head, c);
                head.clear();
                c.head = head;
                r?
            };
            data = &data[end..];
            if (100..200).contains(&c.status) {
                if c.status == 101 {
                    return Err("101 Switching Protocols: m0load speaks HTTP/1.1 only".into());
                }
                // An interim response (100 Continue, 103 Early Hints): the final one follows.
                continue;
            }
            c.reading = Reading::Body(length);
        }
        let Reading::Body(left) = c.reading else {
            unreachable!("the head was read above")
        };
        if data.len() > left {
            return Err(format!(
                "{} bytes past the end of a response (m0load sends one request at a time)",
                data.len() - left
            ));
        }
        let left = left - data.len();
        c.reading = Reading::Body(left);
        return Ok(if left == 0 { Fed::Done } else { Fed::More });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY_LEN: usize = 1000;

    fn response(extra_header: &str) -> Vec<u8> {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {BODY_LEN}\r\n{extra_header}Date: x\r\n\r\n"
        )
        .into_bytes();
        r.resize(r.len() + BODY_LEN, b'b');
        r
    }

    /// Feeds `bytes` cut at `cuts`; returns what each piece came to.
    fn feed_cut(bytes: &[u8], cuts: &[usize]) -> (Response, Vec<Result<bool, String>>) {
        let mut resp = Response::new();
        let mut out = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain([bytes.len()].iter()) {
            out.push(feed(&mut resp, &bytes[from..to]).map(|f| matches!(f, Fed::Done)));
            from = to;
        }
        (resp, out)
    }

    #[test]
    fn a_response_cut_anywhere_is_done_exactly_at_its_last_byte() {
        let r = response("");
        for a in 1..r.len() {
            // A second cut after the first, anywhere up to the last byte.
            for b in [a + 1, a + 7, r.len() - 1]
                .into_iter()
                .filter(|&b| b < r.len())
            {
                let cuts: Vec<usize> = if b > a { vec![a, b] } else { vec![a] };
                let (resp, out) = feed_cut(&r, &cuts);
                let (last, rest) = out.split_last().unwrap();
                assert_eq!(last, &Ok(true), "cut at {a} and {b}");
                assert!(
                    rest.iter().all(|x| x == &Ok(false)),
                    "cut at {a} and {b}: {out:?}"
                );
                assert_eq!(resp.status, 200);
                assert!(!resp.close_after);
            }
        }
    }

    #[test]
    fn the_next_response_on_a_connection_is_read_after_the_first() {
        let mut resp = Response::new();
        let r = response("");
        assert!(matches!(feed(&mut resp, &r), Ok(Fed::Done)));
        resp.reading = Reading::Head;
        let (head, body) = r.split_at(20);
        assert!(matches!(feed(&mut resp, head), Ok(Fed::More)));
        assert!(matches!(feed(&mut resp, body), Ok(Fed::Done)));
    }

    #[test]
    fn bytes_past_the_end_and_chunked_bodies_are_errors() {
        let mut r = response("");
        r.extend_from_slice(b"HTTP/1.1");
        let (_, out) = feed_cut(&r, &[]);
        assert!(
            out[0]
                .as_ref()
                .unwrap_err()
                .contains("8 bytes past the end"),
            "{out:?}"
        );
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        let (_, out) = feed_cut(chunked, &[]);
        assert!(
            out[0].as_ref().unwrap_err().contains("Transfer-Encoding"),
            "{out:?}"
        );
        let (_, out) = feed_cut(b"HTTP/1.1 200 OK\r\n\r\n", &[]);
        assert!(
            out[0].as_ref().unwrap_err().contains("no Content-Length"),
            "{out:?}"
        );
    }

    #[test]
    fn a_closing_response_and_a_bodiless_status_are_read() {
        for close in ["connection: Close\r\n", "Connection: foo, close\r\n"] {
            let (resp, out) = feed_cut(&response(close), &[]);
            assert_eq!(out, [Ok(true)]);
            assert!(resp.close_after, "{close:?}");
        }
        let (resp, _) = feed_cut(&response("Connection: keep-alive\r\n"), &[]);
        assert!(!resp.close_after);
        let (resp, out) = feed_cut(b"HTTP/1.1 304 Not Modified\r\n\r\n", &[]);
        assert_eq!(out, [Ok(true)]);
        assert_eq!(resp.status, 304);
        // No body after a 204 or 304, whatever Content-Length says.
        let (resp, out) = feed_cut(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", &[]);
        assert_eq!(out, [Ok(true)]);
        assert_eq!(resp.status, 204);
        // An HTTP/1.0 response closes unless it says keep-alive.
        let (resp, _) = feed_cut(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", &[]);
        assert!(resp.close_after);
    }

    #[test]
    fn an_interim_response_is_passed_over_for_the_final_one() {
        let mut bytes = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
        bytes.extend_from_slice(&response(""));
        let (resp, out) = feed_cut(&bytes, &[]);
        assert_eq!(out, [Ok(true)]);
        assert_eq!(resp.status, 200);
        let (resp, out) = feed_cut(&bytes, &[10, 30]);
        assert_eq!(out, [Ok(false), Ok(false), Ok(true)]);
        assert_eq!(resp.status, 200);
    }

    #[test]
    fn a_header_value_that_is_not_utf8_is_read() {
        let mut r = b"HTTP/1.1 200 OK\r\nServer: caf\xe9\r\nContent-Length: 2\r\n\r\nok".to_vec();
        let (_, out) = feed_cut(&r, &[]);
        assert_eq!(out, [Ok(true)]);
        r.truncate(r.len() - 1);
        let (_, out) = feed_cut(&r, &[]);
        assert_eq!(out, [Ok(false)]);
    }
}
