//! `--forwarded-allow-ips` and `--proxy-allow-from`, parsed: the peers (addresses and
//! CIDRs, or any) trusted to say who the client is, in forwarding headers (`wsgi/proxy.rs`)
//! or in a PROXY protocol header (the loop, `--proxy-protocol`).

use std::net::IpAddr;

/// A parsed `--forwarded-allow-ips` or `--proxy-allow-from`.
#[derive(Clone, Debug, Default)]
pub struct Trusted {
    any: bool,
    nets: Vec<(IpAddr, u8)>,
}

impl Trusted {
    /// A comma-separated list of addresses and CIDRs (`10.0.0.0/8`, `::1`), or `*` for any
    /// peer; an error names `flag`.
    pub(crate) fn parse(flag: &str, list: &str) -> Result<Trusted, String> {
        let mut t = Trusted::default();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "*" {
                t.any = true;
                continue;
            }
            let bad = || format!("{flag}: {item:?} is not an address or a CIDR");
            let (addr, len) = match item.split_once('/') {
                Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
                None => (item, None),
            };
            let ip: IpAddr = addr
                .trim_matches(|c| c == '[' || c == ']')
                .parse()
                .map_err(|_| bad())?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let len = len.unwrap_or(max);
            if len > max {
                return Err(bad());
            }
            // An IPv4-mapped IPv6 net is kept as the IPv4 net it is (addresses are compared
            // in that form), its prefix shortened by the 96 mapped bits.
            let (ip, len) = match canonical(ip) {
                IpAddr::V4(v4) if ip.is_ipv6() => {
                    if len < 96 {
                        return Err(bad());
                    }
                    (IpAddr::V4(v4), len - 96)
                }
                other => (other, len),
            };
            t.nets.push((ip, len));
        }
        Ok(t)
    }

    pub(crate) fn is_empty(&self) -> bool {
        !self.any && self.nets.is_empty()
    }

    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        self.any || self.names(ip)
    }

    /// `ip` is in a listed address or network: `*` trusts whichever peer connects, not
    /// the addresses a forwarding header names (any client can write those).
    pub(crate) fn names(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets
            .iter()
            .any(|&(net, len)| in_net(ip, canonical(net), len))
    }
}

/// An IPv4-mapped IPv6 address as IPv4, so `127.0.0.1` matches `::ffff:127.0.0.1`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn in_net(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}
