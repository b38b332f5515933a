//! `--proxy-protocol`: the PROXY header (v1 text, v2 binary) that HAProxy and AWS NLB
//! send before the client's bytes sets REMOTE_ADDR and REMOTE_PORT; only peers in
//! `--forwarded-allow-ips` may connect, and a connection without a valid header is
//! closed, logged at debug and counted. The app is tests/apps/tls_app.py.

mod common;

use std::time::Duration;

use common::*;

const PROMPT: Duration = Duration::from_secs(10);
const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

fn server(extra: &[&str]) -> Server {
    Server::builder("tls_app:app")
        .args(&[
            "--proxy-protocol",
            "--metrics-port",
            "0",
            "--log-level",
            "debug",
        ])
        .args(extra)
        .start()
}

/// A v2 header: PROXY over TCP from `src` to `dst`, with one TLV after the addresses.
fn v2(src: std::net::SocketAddr, dst: std::net::SocketAddr) -> Vec<u8> {
    let mut addrs = Vec::new();
    let fam = match (src, dst) {
        (std::net::SocketAddr::V4(s), std::net::SocketAddr::V4(d)) => {
            addrs.extend_from_slice(&s.ip().octets());
            addrs.extend_from_slice(&d.ip().octets());
            0x11
        }
        (std::net::SocketAddr::V6(s), std::net::SocketAddr::V6(d)) => {
            addrs.extend_from_slice(&s.ip().octets());
            addrs.extend_from_slice(&d.ip().octets());
            0x21
        }
        _ => panic!("mixed families"),
    };
    addrs.extend_from_slice(&src.port().to_be_bytes());
    addrs.extend_from_slice(&dst.port().to_be_bytes());
    // PP2_TYPE_ALPN, "h2": skipped by the server.
    addrs.extend_from_slice(&[0x01, 0x00, 0x02, b'h', b'2']);
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.push(0x21);
    h.push(fam);
    h.extend_from_slice(&(addrs.len() as u16).to_be_bytes());
    h.extend_from_slice(&addrs);
    h
}

/// v2 LOCAL (a load balancer's own health check): no address.
fn v2_local() -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
    h
}

fn remote(r: &Response) -> (String, String) {
    assert_eq!(r.status, 200, "{}", show(&r.raw));
    let j = Json::parse(&r.body_text()).unwrap();
    (
        j["remote_addr"].as_str().unwrap_or("").to_string(),
        j["remote_port"].as_str().unwrap_or("").to_string(),
    )
}

/// The server's `m0serve_connections_refused_total` for `reason`.
fn refused(s: &Server, reason: &str) -> String {
    assert!(s.wait_for_log("metrics on http://", PROMPT));
    let log = s.log_text();
    let at = &log[log.find("metrics on http://").unwrap() + "metrics on http://".len()..];
    let addr = at[..at.find("/metrics").unwrap()].parse().unwrap();
    let mut c = Conn::connect(addr);
    c.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let text = c.read_response().body_text();
    let key = format!("m0serve_connections_refused_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .unwrap_or_else(|| panic!("no {key} in\n{text}"))
        .to_string()
}

#[test]
fn v1_and_v2_headers_set_remote_addr_and_port_for_every_request_of_the_connection() {
    let s = server(&[]);
    let mut c = s.connect();
    c.send(b"PROXY TCP4 203.0.113.7 10.0.0.1 4711 443\r\n");
    c.send(GET);
    assert_eq!(
        remote(&c.read_response()),
        ("203.0.113.7".into(), "4711".into())
    );
    // The next request on the connection keeps it.
    c.send(GET);
    assert_eq!(
        remote(&c.read_response()),
        ("203.0.113.7".into(), "4711".into())
    );

    let mut c = s.connect();
    c.send(b"PROXY TCP6 2001:db8::7 2001:db8::1 65535 443\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(
        remote(&c.read_response()),
        ("2001:db8::7".into(), "65535".into())
    );

    let mut c = s.connect();
    let mut bytes = v2(
        "198.51.100.9:5000".parse().unwrap(),
        "10.0.0.1:443".parse().unwrap(),
    );
    bytes.extend_from_slice(GET);
    c.send(&bytes);
    assert_eq!(
        remote(&c.read_response()),
        ("198.51.100.9".into(), "5000".into())
    );

    let mut c = s.connect();
    let header = v2(
        "[2001:db8::9]:6000".parse().unwrap(),
        "[2001:db8::1]:443".parse().unwrap(),
    );
    // Split inside the header, with pauses: the server waits for the rest.
    let mut bytes = header.clone();
    bytes.extend_from_slice(GET);
    c.send_split(&bytes, &[3, 14, 30], Duration::from_millis(150));
    assert_eq!(
        remote(&c.read_response()),
        ("2001:db8::9".into(), "6000".into())
    );

    // LOCAL and UNKNOWN: the connection's own peer.
    for header in [v2_local(), b"PROXY UNKNOWN\r\n".to_vec()] {
        let mut c = s.connect();
        let mut bytes = header;
        bytes.extend_from_slice(GET);
        c.send(&bytes);
        let local_port = c.local_port().to_string();
        assert_eq!(remote(&c.read_response()), ("127.0.0.1".into(), local_port));
    }
}

#[test]
fn a_connection_without_a_valid_header_is_closed_and_counted_at_debug() {
    let s = server(&[]);
    let bad: [&[u8]; 4] = [
        GET,
        b"PROXY TCP4 203.0.113.7 10.0.0.1 04711 443\r\nGET / HTTP/1.1\r\n\r\n",
        b"PROXY TCP4 203.0.113.7\r\n",
        b"\r\n\r\n\0\r\nQUIT\n\x31\x11\x00\x0c",
    ];
    for bytes in bad {
        let mut c = s.connect();
        c.send(bytes);
        let (got, closed) = c.read_until_close(PROMPT);
        assert!(
            closed && got.is_empty(),
            "{:?} answered {}",
            show(bytes),
            show(&got)
        );
    }
    assert_eq!(refused(&s, "proxy_malformed"), "4");
    let log = s.log_text();
    assert!(
        log.contains("[DEBUG]") && log.contains("--proxy-protocol"),
        "{log}"
    );
    assert!(
        !log.contains("[ERROR]") && !log.contains("[WARNING]"),
        "{log}"
    );
    // And the server still serves a good one.
    let mut c = s.connect();
    c.send(b"PROXY TCP4 203.0.113.7 10.0.0.1 4711 443\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(remote(&c.read_response()).0, "203.0.113.7");
}

#[test]
fn a_peer_not_in_forwarded_allow_ips_is_closed_before_a_byte_is_read() {
    let s = server(&["--forwarded-allow-ips", "10.0.0.0/8"]);
    let mut c = s.connect();
    c.send(b"PROXY TCP4 203.0.113.7 10.0.0.1 4711 443\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let (got, closed) = c.read_until_close(PROMPT);
    assert!(closed && got.is_empty(), "answered {}", show(&got));
    assert_eq!(refused(&s, "proxy_untrusted"), "1");
    // Written before the close, but it reaches the test through the stderr pipe its
    // reader thread drains, which may lag the close the client saw: wait for it.
    assert!(
        s.wait_for_log("is not in --forwarded-allow-ips", PROMPT),
        "{}",
        s.log_text()
    );
}

#[test]
fn a_header_trickled_past_the_header_timeout_is_closed() {
    let s = server(&["--header-timeout", "1"]);
    let mut c = s.connect();
    let started = std::time::Instant::now();
    let mut closed = false;
    for b in b"PROXY TCP4 203.0.113.7 10.0.0.1 4711 443\r\n".iter() {
        if c.try_send(&[*b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        if started.elapsed() > Duration::from_secs(4) {
            break;
        }
    }
    let (_, eof) = c.read_until_close(PROMPT);
    assert!(closed || eof, "still open after {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
