//! The command line: the options, and the URLs of the servers to load.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

pub struct Args {
    pub conns: usize,
    pub duration: Duration,
    pub headers: Vec<String>,
    pub body_bytes: usize,
    /// The servers, in the order their turns come with `--switch`; one without it.
    pub urls: Vec<Url>,
    /// Requests a second, for an open-loop run; None for the closed loop.
    pub rate: Option<f64>,
    /// With several URLs: how long each has the schedule before the next takes it.
    pub switch: Option<Duration>,
    /// Watch for host stalls and report each target's figures outside them too.
    pub stall_probe: bool,
    /// Write each answered request's due time and latency here after the run.
    pub log: Option<std::path::PathBuf>,
    /// Open loop: send at the rate this long first, on the same connections, and forget it.
    pub warmup: Option<Duration>,
}

/// One server to load: where it is, and what its requests name.
pub struct Url {
    pub text: String,
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

pub fn parse_url(url: &str) -> Result<Url, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or(format!("{url}: only http:// URLs"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or(format!("{host}: no address"))?;
    Ok(Url {
        text: url.to_string(),
        addr,
        host: host.to_string(),
        path: path.to_string(),
    })
}

fn usage() -> String {
    "usage: m0load -c CONNECTIONS -d SECONDS [--rate REQUESTS_A_SECOND [--switch SECONDS] \
     [--warmup SECONDS] [--stall-probe] [--log FILE]] [-H 'Name: value']... [--body-bytes N] http://HOST:PORT/PATH [URL...]"
        .to_string()
}

/// A number of seconds above 0 as a duration, or an error that names the option.
fn seconds(name: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or(format!("{name}: give a number of seconds above 0"))
}

/// An option's value as a number, or an error that names the option.
fn parsed<T: std::str::FromStr>(name: &str, v: String) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    v.parse().map_err(|e| format!("{name}: {e}"))
}

pub fn parse_args() -> Result<Args, String> {
    let mut conns: Option<usize> = None;
    let mut secs: Option<f64> = None;
    let mut headers = Vec::new();
    let mut body_bytes = 0;
    let mut rate: Option<f64> = None;
    let mut switch: Option<f64> = None;
    let mut stall_probe = false;
    let mut log = None;
    let mut warmup: Option<f64> = None;
    let mut urls = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "-c" => conns = Some(parsed("-c", value("-c")?)?),
            "-d" => secs = Some(parsed("-d", value("-d")?)?),
            "-H" => headers.push(value("-H")?),
            "--rate" => rate = Some(parsed("--rate", value("--rate")?)?),
            "--switch" => switch = Some(parsed("--switch", value("--switch")?)?),
            "--stall-probe" => stall_probe = true,
            "--log" => log = Some(value("--log")?.into()),
            "--warmup" => warmup = Some(parsed("--warmup", value("--warmup")?)?),
            "--body-bytes" => body_bytes = parsed("--body-bytes", value("--body-bytes")?)?,
            "-h" | "--help" => return Err(usage()),
            _ if a.starts_with('-') => return Err(format!("unknown option {a}\n{}", usage())),
            _ => urls.push(parse_url(&a)?),
        }
    }
    if urls.is_empty() {
        return Err(usage());
    }
    let conns = conns.filter(|&c| c > 0).ok_or("-c: give 1 or more")?;
    let duration = seconds("-d", secs.unwrap_or(0.0))?;
    if let Some(r) = rate {
        if !(r.is_finite() && r > 0.0) {
            return Err("--rate: give a number of requests a second above 0".into());
        }
    }
    if stall_probe && rate.is_none() {
        return Err("--stall-probe needs --rate".into());
    }
    if log.is_some() && rate.is_none() {
        return Err("--log needs --rate".into());
    }
    let warmup = match warmup {
        None => None,
        Some(_) if rate.is_none() => return Err("--warmup needs --rate".into()),
        Some(w) => Some(seconds("--warmup", w)?),
    };
    let switch = match switch {
        None if urls.len() > 1 => {
            return Err("several URLs take turns: give --rate and --switch SECONDS".into())
        }
        None => None,
        Some(_) if rate.is_none() => return Err("--switch needs --rate".into()),
        Some(s) => Some(seconds("--switch", s)?),
    };
    Ok(Args {
        conns,
        duration,
        headers,
        body_bytes,
        urls,
        rate,
        switch,
        stall_probe,
        log,
        warmup,
    })
}
