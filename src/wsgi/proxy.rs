//! `--forwarded-allow-ips`: from the listed peers only (default 127.0.0.1, and peers on a
//! Unix socket), `X-Forwarded-For` / `X-Forwarded-Proto`, or, when neither is present,
//! `Forwarded` (RFC 7239), set `REMOTE_ADDR` and `wsgi.url_scheme`. From any other peer
//! those headers are plain headers.
//!
//! The `X-Forwarded-*` pair comes first because it is what common proxies set (nginx's
//! usual configuration): a proxy that sets them but passes `Forwarded` through untouched
//! would otherwise let the client choose its own address with `Forwarded`.
//!
//! The client is the rightmost address in the chain that is not itself a listed proxy: a
//! proxy appends the address it received from, so everything to the left of that was
//! written by the client and may be forged. `*` trusts the peer that connects, whoever it
//! is, but names no address in the chain, so behind `*` the client is the rightmost
//! address, the one the peer wrote (Werkzeug's `ProxyFix` with one hop). When every
//! address is a listed proxy, the leftmost is taken.

use std::net::IpAddr;

pub(crate) use crate::http::trusted::Trusted;

/// What a trusted peer's headers say about the client.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Forwarded {
    pub(crate) client: Option<String>,
    /// `Some(true)` for https, `Some(false)` for http.
    pub(crate) https: Option<bool>,
}

/// From the raw header values (each as received, possibly repeated lines joined by the
/// caller in order): `Forwarded` wins over the `X-Forwarded-*` pair when present.
pub(crate) fn resolve(
    trusted: &Trusted,
    forwarded: &[&[u8]],
    x_forwarded_for: &[&[u8]],
    x_forwarded_proto: &[&[u8]],
) -> Forwarded {
    if x_forwarded_for.is_empty() && x_forwarded_proto.is_empty() {
        return from_forwarded(trusted, forwarded);
    }
    let mut out = Forwarded::default();
    let chain: Vec<String> = x_forwarded_for
        .iter()
        .flat_map(|v| {
            latin(v)
                .split(',')
                .map(|s| s.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|s| !s.is_empty())
        .collect();
    out.client = pick_client(trusted, &chain);
    if let Some(last) = x_forwarded_proto
        .iter()
        .flat_map(|v| {
            latin(v)
                .split(',')
                .map(|s| s.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .rfind(|s| !s.is_empty())
    {
        out.https = scheme(&last);
    }
    out
}

fn from_forwarded(trusted: &Trusted, values: &[&[u8]]) -> Forwarded {
    // RFC 7239 §4: forwarded-element *( "," forwarded-element ), each a ";" list of
    // token=value pairs, values possibly quoted. Each element is one hop: its `for` and its
    // `proto` go together.
    let mut hops: Vec<(String, Option<String>)> = Vec::new();
    for v in values {
        for element in latin(v).split(',') {
            let (mut node, mut proto) = (None, None);
            for pair in element.split(';') {
                let Some((k, val)) = pair.split_once('=') else {
                    continue;
                };
                let val = val.trim().trim_matches('"');
                match k.trim().to_ascii_lowercase().as_str() {
                    "for" => node = Some(node_address(val)),
                    "proto" => proto = Some(val.to_ascii_lowercase()),
                    _ => {}
                }
            }
            if let Some(node) = node {
                hops.push((node, proto));
            }
        }
    }
    let chain: Vec<String> = hops.iter().map(|(n, _)| n.clone()).collect();
    let client = pick_client(trusted, &chain);
    // The scheme the chosen client's hop was received on.
    let https = client.as_ref().and_then(|c| {
        hops.iter()
            .rev()
            .find(|(n, _)| n == c)
            .and_then(|(_, p)| p.as_deref())
            .and_then(scheme)
    });
    Forwarded { client, https }
}

/// RFC 7239 §6: `node = nodename [ ":" node-port ]`, an IPv6 nodename in brackets.
fn node_address(node: &str) -> String {
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("").to_string();
    }
    match node.split_once(':') {
        Some((host, _port)) => host.to_string(),
        None => node.to_string(),
    }
}

fn pick_client(trusted: &Trusted, chain: &[String]) -> Option<String> {
    let parsed: Vec<Option<IpAddr>> = chain.iter().map(|s| s.parse().ok()).collect();
    for (s, ip) in chain.iter().zip(&parsed).rev() {
        match ip {
            Some(ip) if trusted.names(*ip) => continue,
            // An address that is not a trusted proxy: the client as far as we can tell.
            Some(_) => return Some(s.clone()),
            // "unknown", an obfuscated identifier: nothing to trust beyond it.
            None => return None,
        }
    }
    chain.first().filter(|_| parsed[0].is_some()).cloned()
}

fn scheme(s: &str) -> Option<bool> {
    match s {
        "https" => Some(true),
        "http" => Some(false),
        _ => None,
    }
}

fn latin(b: &[u8]) -> String {
    b.iter().map(|&c| c as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Trusted {
        Trusted::parse("--forwarded-allow-ips", s).unwrap()
    }

    #[test]
    fn parses_addresses_and_cidrs() {
        let tr = t("127.0.0.1, 10.0.0.0/8, ::1, 2001:db8::/32");
        assert!(tr.contains("127.0.0.1".parse().unwrap()));
        assert!(tr.contains("10.200.3.4".parse().unwrap()));
        assert!(!tr.contains("11.0.0.1".parse().unwrap()));
        assert!(tr.contains("::1".parse().unwrap()));
        assert!(tr.contains("2001:db8:5::9".parse().unwrap()));
        assert!(tr.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(t("*").contains("8.8.8.8".parse().unwrap()));
        assert!(Trusted::parse("--forwarded-allow-ips", "300.1.1.1").is_err());
        assert!(Trusted::parse("--forwarded-allow-ips", "10.0.0.0/33").is_err());
        assert!(t("").is_empty());
    }

    #[test]
    fn the_client_is_the_rightmost_untrusted_address() {
        let tr = t("127.0.0.1,10.0.0.0/8");
        let f = resolve(&tr, &[], &[b"1.1.1.1, 203.0.113.7, 10.0.0.2"], &[b"https"]);
        assert_eq!(f.client.as_deref(), Some("203.0.113.7"));
        assert_eq!(f.https, Some(true));
        let f = resolve(&tr, &[], &[b"10.0.0.3, 10.0.0.2"], &[]);
        assert_eq!(f.client.as_deref(), Some("10.0.0.3"));
        assert_eq!(f.https, None);
    }

    #[test]
    fn behind_any_proxy_the_client_is_the_hop_the_proxy_wrote() {
        // A client's own X-Forwarded-For, with the proxy's entry appended: behind `*` the
        // forged left part is not believed.
        let f = resolve(&t("*"), &[], &[b"6.6.6.6, 203.0.113.7"], &[]);
        assert_eq!(f.client.as_deref(), Some("203.0.113.7"));
        let f = resolve(
            &t("*,10.0.0.0/8"),
            &[],
            &[b"6.6.6.6, 203.0.113.7, 10.1.1.1"],
            &[],
        );
        assert_eq!(f.client.as_deref(), Some("203.0.113.7"));
        let f = resolve(&t("*"), &[b"for=6.6.6.6, for=198.51.100.4"], &[], &[]);
        assert_eq!(f.client.as_deref(), Some("198.51.100.4"));
    }

    #[test]
    fn forwarded_is_used_without_x_forwarded_and_parsed_per_rfc_7239() {
        let tr = t("127.0.0.1");
        let f = resolve(
            &tr,
            &[b"for=192.0.2.43, for=\"[2001:db8:cafe::17]:4711\";proto=https"],
            &[],
            &[],
        );
        assert_eq!(f.client.as_deref(), Some("2001:db8:cafe::17"));
        assert_eq!(f.https, Some(true));
        let f = resolve(&tr, &[b"for=unknown"], &[], &[]);
        assert_eq!(f.client, None);
        // The client's own element cannot choose the scheme of the proxy's hop.
        let f = resolve(
            &tr,
            &[b"for=1.1.1.1;proto=https, for=203.0.113.9"],
            &[],
            &[],
        );
        assert_eq!(f.client.as_deref(), Some("203.0.113.9"));
        assert_eq!(f.https, None);
        // With X-Forwarded-For present, a Forwarded header the proxy passed through is
        // ignored.
        let f = resolve(&tr, &[b"for=6.6.6.6;proto=https"], &[b"203.0.113.7"], &[]);
        assert_eq!(f.client.as_deref(), Some("203.0.113.7"));
        assert_eq!(f.https, None);
    }

    #[test]
    fn mapped_ipv4_nets_are_kept_as_ipv4() {
        let tr = t("::ffff:127.0.0.0/104");
        assert!(tr.contains("127.3.4.5".parse().unwrap()));
        assert!(!tr.contains("128.0.0.1".parse().unwrap()));
        assert!(Trusted::parse("--forwarded-allow-ips", "::ffff:127.0.0.0/90").is_err());
    }
}
