//! `--proxy-protocol`: the PROXY header (v1 text, v2 binary) that HAProxy and AWS NLB
//! send before the client's bytes sets REMOTE_ADDR and REMOTE_PORT; only peers in
//! `--proxy-allow-from` may connect, and a connection without a valid header is closed,
//! logged at debug and counted. Forwarding headers after a PROXY header are the client's
//! and change nothing, unless `--proxy-forwarded-headers`. The app is tests/apps/tls_app.py.

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

/// A v2 header with any command (0x20 LOCAL, 0x21 PROXY), family and protocol byte, and
/// address block.
fn v2_raw(command: u8, family: u8, addrs: &[u8]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.push(command);
    h.push(family);
    h.extend_from_slice(&(addrs.len() as u16).to_be_bytes());
    h.extend_from_slice(addrs);
    h
}

/// v2 LOCAL (a load balancer's own health check): no address.
fn v2_local() -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
    h
}

/// Every kind of PROXY header a client could send first, by name: one that names an
/// address inside and one outside the default lists, and each that names none.
fn every_header_kind() -> Vec<(&'static str, Vec<u8>)> {
    let mut unix = vec![0u8; 216];
    unix[..9].copy_from_slice(b"/tmp/sock");
    vec![
        (
            "v1 TCP4 from a listed address",
            b"PROXY TCP4 127.0.0.1 10.0.0.1 4711 443\r\n".to_vec(),
        ),
        (
            "v1 TCP4",
            b"PROXY TCP4 203.0.113.7 10.0.0.1 4711 443\r\n".to_vec(),
        ),
        (
            "v1 TCP6",
            b"PROXY TCP6 ::1 2001:db8::1 4711 443\r\n".to_vec(),
        ),
        ("v1 UNKNOWN", b"PROXY UNKNOWN\r\n".to_vec()),
        (
            "v2 TCP over IPv4",
            v2(
                "198.51.100.9:5000".parse().unwrap(),
                "10.0.0.1:443".parse().unwrap(),
            ),
        ),
        ("v2 LOCAL", v2_local()),
        ("v2 AF_UNIX", v2_raw(0x21, 0x31, &unix)),
        ("v2 AF_UNSPEC", v2_raw(0x21, 0x01, &[])),
        (
            "v2 DGRAM over IPv4",
            v2_raw(0x21, 0x12, &[127, 0, 0, 1, 10, 0, 0, 1, 0, 1, 0, 2]),
        ),
    ]
}

/// The forwarding headers a client forges, each kind on its own.
const FORGED: [&[u8]; 3] = [
    b"X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n",
    b"Forwarded: for=6.6.6.6;proto=https\r\n",
    b"X-Forwarded-For: 127.0.0.1, 6.6.6.6\r\n",
];

fn scheme(r: &Response) -> String {
    let j = Json::parse(&r.body_text()).unwrap();
    j["scheme"].as_str().unwrap_or("").to_string()
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
    let mut c = Conn::connect(s.metrics_addr());
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
fn forwarding_headers_after_any_proxy_header_are_the_clients_and_change_nothing() {
    // Issue 40: --forwarded-allow-ips decided both who may send a PROXY header and whose
    // forwarding headers are believed, checked against the header's source: a client
    // chose its REMOTE_ADDR with UNKNOWN, LOCAL, any v2 family without an address, or a
    // source inside the list. A TCP balancer writes no HTTP header: all came from the
    // client, even with `--forwarded-allow-ips '*'`.
    for extra in [&[][..], &["--forwarded-allow-ips", "*"][..]] {
        let s = server(extra);
        for (kind, header) in every_header_kind() {
            for forged in FORGED {
                let mut c = s.connect();
                let mut bytes = header.clone();
                bytes.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n");
                bytes.extend_from_slice(forged);
                bytes.extend_from_slice(b"\r\n");
                c.send(&bytes);
                let r = c.read_response();
                let (addr, _) = remote(&r);
                assert!(
                    addr != "6.6.6.6" && scheme(&r) == "http",
                    "{extra:?}, {kind} then {}: REMOTE_ADDR {addr}, scheme {}",
                    show(forged),
                    scheme(&r)
                );
            }
        }
    }
}

#[test]
fn proxy_forwarded_headers_believes_them_from_a_listed_source_only() {
    // An HTTP proxy in front of the balancer (a CDN at 198.51.100.0/24) adds them.
    let s = server(&[
        "--proxy-forwarded-headers",
        "--forwarded-allow-ips",
        "198.51.100.0/24",
    ]);
    let send = |header: Vec<u8>| {
        let mut c = s.connect();
        let mut bytes = header;
        bytes.extend_from_slice(
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 6.6.6.6\r\n\
              X-Forwarded-Proto: https\r\n\r\n",
        );
        c.send(&bytes);
        let r = c.read_response();
        (remote(&r).0, scheme(&r))
    };
    let cdn = v2(
        "198.51.100.9:5000".parse().unwrap(),
        "10.0.0.1:443".parse().unwrap(),
    );
    assert_eq!(send(cdn), ("6.6.6.6".into(), "https".into()));
    let other = b"PROXY TCP4 203.0.113.7 10.0.0.1 4711 443\r\n".to_vec();
    assert_eq!(send(other), ("203.0.113.7".into(), "http".into()));
    // No address named: the balancer's own connection, not in the list.
    assert_eq!(send(v2_local()), ("127.0.0.1".into(), "http".into()));
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
fn a_peer_not_in_proxy_allow_from_is_closed_before_a_byte_is_read() {
    // --forwarded-allow-ips says nothing about who may send a PROXY header.
    let s = server(&[
        "--proxy-allow-from",
        "10.0.0.0/8",
        "--forwarded-allow-ips",
        "127.0.0.1",
    ]);
    let mut c = s.connect();
    c.send(b"PROXY TCP4 203.0.113.7 10.0.0.1 4711 443\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let (got, closed) = c.read_until_close(PROMPT);
    assert!(closed && got.is_empty(), "answered {}", show(&got));
    assert_eq!(refused(&s, "proxy_untrusted"), "1");
    // Written before the close, but it reaches the test through the stderr pipe its
    // reader thread drains, which may lag the close the client saw: wait for it.
    assert!(
        s.wait_for_log("is not in --proxy-allow-from", PROMPT),
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
