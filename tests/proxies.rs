//! `--forwarded-allow-ips`: the forwarding headers of a trusted peer (default: the local
//! host) set REMOTE_ADDR and wsgi.url_scheme; anyone else's are plain headers. The app is
//! tests/apps/echo.py.

mod common;

use common::*;

fn echo_with(s: &Server, headers: &str) -> Echo {
    s.request(format!("GET / HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n").as_bytes())
        .echo()
}

#[test]
fn a_trusted_proxy_sets_the_client_address_and_scheme() {
    let s = Server::start("echo:app", &[]);
    let e = echo_with(
        &s,
        "X-Forwarded-For: 203.0.113.7\r\nX-Forwarded-Proto: https\r\n",
    );
    assert_eq!(e.must("REMOTE_ADDR"), "203.0.113.7");
    assert_eq!(e.wsgi("url_scheme").as_str(), Some("https"));
    // The headers themselves stay visible.
    assert_eq!(e.must("HTTP_X_FORWARDED_FOR"), "203.0.113.7");
}

#[test]
fn a_forged_address_left_of_the_proxy_is_not_believed() {
    // nginx appends the address it received from: what is left of it, the client wrote.
    let s = Server::start(
        "echo:app",
        &["--forwarded-allow-ips", "127.0.0.1,10.0.0.0/8"],
    );
    let e = echo_with(&s, "X-Forwarded-For: 6.6.6.6, 203.0.113.7, 10.1.2.3\r\n");
    assert_eq!(e.must("REMOTE_ADDR"), "203.0.113.7");
    assert_eq!(e.wsgi("url_scheme").as_str(), Some("http"));
}

#[test]
fn behind_any_proxy_the_client_cannot_choose_its_address() {
    // `*` (the usual container setting) trusts whichever peer connects, not the addresses
    // in the header: a client's own X-Forwarded-For, with the proxy's entry appended,
    // gives the entry the proxy wrote (it took every one as a proxy, so the forged
    // leftmost address won).
    let s = Server::start("echo:app", &["--forwarded-allow-ips", "*"]);
    let e = echo_with(&s, "X-Forwarded-For: 6.6.6.6, 203.0.113.7\r\n");
    assert_eq!(e.must("REMOTE_ADDR"), "203.0.113.7");
    let e = echo_with(&s, "Forwarded: for=6.6.6.6, for=198.51.100.4\r\n");
    assert_eq!(e.must("REMOTE_ADDR"), "198.51.100.4");
}

#[test]
fn the_forwarded_header_is_parsed_per_rfc_7239_when_x_forwarded_is_absent() {
    let s = Server::start("echo:app", &[]);
    let e = echo_with(
        &s,
        "Forwarded: for=\"[2001:db8:cafe::17]:4711\";proto=https\r\n",
    );
    assert_eq!(e.must("REMOTE_ADDR"), "2001:db8:cafe::17");
    assert_eq!(e.wsgi("url_scheme").as_str(), Some("https"));
}

#[test]
fn a_forwarded_header_passed_through_by_a_proxy_that_sets_x_forwarded_is_ignored() {
    // nginx sets X-Forwarded-For and passes the client's own Forwarded header through.
    let s = Server::start("echo:app", &[]);
    let e = echo_with(
        &s,
        "Forwarded: for=6.6.6.6;proto=https\r\nX-Forwarded-For: 203.0.113.7\r\n",
    );
    assert_eq!(e.must("REMOTE_ADDR"), "203.0.113.7");
    assert_eq!(e.wsgi("url_scheme").as_str(), Some("http"));
}

#[test]
fn an_untrusted_peer_is_taken_at_its_word_only_as_headers() {
    let s = Server::start("echo:app", &["--forwarded-allow-ips", "10.0.0.0/8"]);
    let e = echo_with(
        &s,
        "X-Forwarded-For: 203.0.113.7\r\nX-Forwarded-Proto: https\r\n",
    );
    assert_eq!(e.must("REMOTE_ADDR"), "127.0.0.1");
    assert_eq!(e.wsgi("url_scheme").as_str(), Some("http"));
    assert_eq!(e.must("HTTP_X_FORWARDED_FOR"), "203.0.113.7");
    let s = Server::start("echo:app", &["--forwarded-allow-ips", ""]);
    let e = echo_with(&s, "X-Forwarded-For: 203.0.113.7\r\n");
    assert_eq!(e.must("REMOTE_ADDR"), "127.0.0.1");
}

#[test]
fn a_bad_list_is_refused_naming_the_flag() {
    let out = run_to_exit(
        &[
            "hello:app",
            "--port",
            "0",
            "--forwarded-allow-ips",
            "300.1.1.1",
        ],
        &[],
        std::time::Duration::from_secs(5),
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("--forwarded-allow-ips"),
        "{}",
        out.stderr
    );
}
