//! The access log (`--access-log`, `--access-log-file`, `--access-log-format`): one line
//! per response, written by the handler thread that served it, never by the loop.
//!
//! Each handler formats its lines into its own buffer and writes the buffer with one
//! `write(2)` when it grows past `FLUSH_BYTES` or before the handler waits for work, so a
//! busy handler pays no system call per request; lines from different handlers never
//! interleave inside a line (each write holds whole lines, and a log file is opened with
//! `O_APPEND`).
//!
//! The format is gunicorn's: `%(name)s` atoms in literal text. `h` client address, `t` time
//! (`[30/Nov/2026:04:52:06 +0000]`), `r` request line, `m` method, `U` path, `q` query,
//! `H` protocol, `s` status, `B` response body bytes, `b` the same or `-` for none, `f`
//! referer, `a` user agent, `T` whole seconds, `L` seconds with six decimals, `M` whole
//! milliseconds, `D` microseconds, `p` the worker's `<PID>`, `{name}i` any request header,
//! `{name}o` any response header, `{KEY}e` a key of the request's WSGI environ as the app
//! left it (its name in any case, as gunicorn looks it up), `l` and `u` a `-`.
//! `--access-log-format json` writes one JSON object per line with the same facts, every
//! string escaped, its time in ISO 8601 (`2026-11-30T04:52:06.250+00:00`).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::http::parse::{Head, Version};
use crate::pipeline::msg::Peer;

/// gunicorn's default access log format.
pub(crate) const DEFAULT_FORMAT: &str =
    r#"%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s""#;

/// A handler's buffered lines are written once they pass this size.
const FLUSH_BYTES: usize = 16 * 1024;

/// A buffered line older than this is written before the handler's next request runs (so a
/// slow request does not hold the previous requests' lines back).
pub(crate) const FLUSH_AGE: std::time::Duration = std::time::Duration::from_millis(200);

/// Writes to standard error (a pipe, often shared by the workers) go in runs of whole lines
/// no longer than this: pipes keep writes up to `PIPE_BUF` (4096) whole.
const PIPE_WRITE_MAX: usize = 4096;

/// One piece of a format: literal text, or a fact of the response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Atom {
    Lit(String),
    Remote,
    Time,
    RequestLine,
    Method,
    Path,
    Query,
    Protocol,
    Status,
    Bytes,
    BytesOrDash,
    Referer,
    UserAgent,
    Seconds,
    Millis,
    Micros,
    Header(String),
    /// `%({name}o)s`: a response header; the index into `Entry::response_headers` (the
    /// names are `Format::response_header_names`).
    ResponseHeader(usize),
    /// `%(L)s`: the duration in seconds, with six decimals.
    SecondsFraction,
    /// `%(p)s`: `<PID>` of the worker.
    Pid,
    /// `%({KEY}e)s`: a key of the request's environ; the index into
    /// `Entry::environ_values` (the keys are `Format::environ_keys`).
    Environ(usize),
    Dash,
}

/// A parsed `--access-log-format`.
#[derive(Clone, Debug)]
pub(crate) enum Format {
    /// The atoms, the response headers they name (`%({name}o)s`, lowercase) and the
    /// environ keys (`%({KEY}e)s`, as written).
    Atoms {
        atoms: Vec<Atom>,
        response: Vec<String>,
        environ: Vec<String>,
    },
    Json,
}

impl Format {
    pub(crate) fn parse(s: &str) -> Result<Format, String> {
        if s == "json" {
            return Ok(Format::Json);
        }
        let mut response_names = Vec::new();
        let mut environ = Vec::new();
        let mut atoms = Vec::new();
        let mut lit = String::new();
        let mut rest = s;
        while let Some(i) = rest.find("%(") {
            lit.push_str(&rest[..i]);
            let after = &rest[i + 2..];
            let end = after
                .find(")s")
                .ok_or_else(|| format!("--access-log-format: unclosed %( in {s:?}"))?;
            let name = &after[..end];
            let atom = match name {
                "h" => Atom::Remote,
                "t" => Atom::Time,
                "r" => Atom::RequestLine,
                "m" => Atom::Method,
                "U" => Atom::Path,
                "q" => Atom::Query,
                "H" => Atom::Protocol,
                "s" => Atom::Status,
                "B" => Atom::Bytes,
                "b" => Atom::BytesOrDash,
                "f" => Atom::Referer,
                "a" => Atom::UserAgent,
                "T" => Atom::Seconds,
                "M" => Atom::Millis,
                "D" => Atom::Micros,
                "l" | "u" => Atom::Dash,
                "L" => Atom::SecondsFraction,
                "p" => Atom::Pid,
                n if n.starts_with('{') && n.ends_with("}i") && n.len() > 3 => {
                    Atom::Header(n[1..n.len() - 2].to_ascii_lowercase())
                }
                n if n.starts_with('{') && n.ends_with("}o") && n.len() > 3 => {
                    let name = n[1..n.len() - 2].to_ascii_lowercase();
                    let idx = match response_names.iter().position(|x| *x == name) {
                        Some(i) => i,
                        None => {
                            response_names.push(name);
                            response_names.len() - 1
                        }
                    };
                    Atom::ResponseHeader(idx)
                }
                n if n.starts_with('{') && n.ends_with("}e") && n.len() > 3 => {
                    let key = n[1..n.len() - 2].to_string();
                    let idx = match environ.iter().position(|x| *x == key) {
                        Some(i) => i,
                        None => {
                            environ.push(key);
                            environ.len() - 1
                        }
                    };
                    Atom::Environ(idx)
                }
                other => {
                    return Err(format!(
                        "--access-log-format: unknown atom %({other})s (the atoms: \
                         https://github.com/m0serve/m0serve/blob/main/docs/operations.md#access-log)"
                    ))
                }
            };
            if !lit.is_empty() {
                atoms.push(Atom::Lit(std::mem::take(&mut lit)));
            }
            atoms.push(atom);
            rest = &after[end + 2..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            atoms.push(Atom::Lit(lit));
        }
        Ok(Format::Atoms {
            atoms,
            response: response_names,
            environ,
        })
    }

    /// The environ keys the format shows, in `Environ` order.
    pub(crate) fn environ_keys(&self) -> &[String] {
        match self {
            Format::Atoms { environ, .. } => environ,
            Format::Json => &[],
        }
    }

    /// The response headers the format shows (lowercase), in `ResponseHeader` order.
    pub(crate) fn response_header_names(&self) -> &[String] {
        match self {
            Format::Atoms { response, .. } => response,
            Format::Json => &[],
        }
    }
}

/// Where the access log goes (`--access-log`, `--access-log-file`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// `--access-log` alone.
    Stderr,
    /// `--access-log-file -`, as gunicorn reads it.
    Stdout,
    File(PathBuf),
}

impl Target {
    /// `--access-log-file`'s value: `-` is standard output.
    pub(crate) fn from_flag(path: Option<PathBuf>) -> Target {
        match path {
            None => Target::Stderr,
            Some(p) if p.as_os_str() == "-" => Target::Stdout,
            Some(p) => Target::File(p),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Target::Stderr => "standard error".into(),
            Target::Stdout => "standard output".into(),
            Target::File(p) => p.display().to_string(),
        }
    }
}

/// Where lines go: shared by every handler of a worker.
pub(crate) struct LogFile {
    /// The file and its path, or `None` for a standard stream. The lock is taken once per
    /// flush (a 16 KiB batch), and by `reopen`.
    file: Option<(Mutex<File>, PathBuf)>,
    /// With no file: standard output, else standard error.
    stdout: bool,
}

fn open_append(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .open(path)
}

impl LogFile {
    /// A file opened for appending, or a standard stream.
    pub(crate) fn open(target: &Target) -> io::Result<LogFile> {
        let file = match target {
            Target::File(p) => Some((Mutex::new(open_append(p)?), p.to_path_buf())),
            Target::Stderr | Target::Stdout => None,
        };
        Ok(LogFile {
            file,
            stdout: *target == Target::Stdout,
        })
    }

    /// SIGUSR1: opens the file's path again (after a log rotation moved the old file).
    pub(crate) fn reopen(&self) {
        let Some((file, path)) = &self.file else {
            return;
        };
        match open_append(path) {
            Ok(new) => {
                if let Ok(mut f) = file.lock() {
                    *f = new;
                }
            }
            Err(e) => crate::log::warning!("cannot reopen {}: {e}", path.display()),
        }
    }

    fn write(&self, bytes: &[u8]) {
        let res = match &self.file {
            Some((f, _)) => match f.lock() {
                Ok(mut f) => f.write_all(bytes),
                Err(_) => Ok(()),
            },
            None if self.stdout => write_lines(&mut io::stdout().lock(), bytes),
            None => write_lines(&mut io::stderr().lock(), bytes),
        };
        if let Err(e) = res {
            crate::log::warning!("cannot write the access log: {e}");
        }
    }
}

/// Writes `bytes` (whole lines) to a standard stream, often a pipe the workers share, in
/// runs of whole lines of at most `PIPE_WRITE_MAX` bytes (or one long line whole), each
/// one write(2) that a pipe keeps whole.
fn write_lines(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let mut rest = bytes;
    while !rest.is_empty() {
        // The longest run of whole lines within PIPE_WRITE_MAX (or one long line whole,
        // when a single line is longer).
        let window = &rest[..rest.len().min(PIPE_WRITE_MAX)];
        let cut = if rest.len() <= PIPE_WRITE_MAX {
            rest.len()
        } else {
            match window.iter().rposition(|&b| b == b'\n') {
                Some(i) => i + 1,
                None => rest
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(rest.len(), |i| i + 1),
            }
        };
        out.write_all(&rest[..cut])?;
        // Standard output is line-buffered in Rust: the run leaves now.
        out.flush()?;
        rest = &rest[cut..];
    }
    Ok(())
}

/// The facts of one response.
pub(crate) struct Entry<'a> {
    pub(crate) peer: Peer,
    /// The client a trusted proxy named (`--forwarded-allow-ips`): what `%(h)s` and
    /// `remote_addr` show instead of the peer, as the app's `REMOTE_ADDR` does.
    pub(crate) client: Option<&'a str>,
    /// The request head as received, with its parse.
    pub(crate) head_bytes: &'a [u8],
    pub(crate) head: &'a Head,
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
    pub(crate) duration: Duration,
    /// The values of `AccessLog::response_header_names`, in order (`None`: not sent).
    pub(crate) response_headers: &'a [Option<Vec<u8>>],
    /// The values of `Format::environ_keys`, in order (`None`: not in the environ).
    pub(crate) environ_values: &'a [Option<String>],
}

/// A worker's access log: the format and where lines go, shared by its handlers.
pub struct AccessLog {
    pub(crate) format: Format,
    pub(crate) sink: LogFile,
}

/// One handler's access log: its buffer, over the worker's shared format and sink.
pub(crate) struct AccessLogger {
    shared: Arc<AccessLog>,
    buf: Vec<u8>,
    /// When the oldest buffered line was added.
    oldest: Option<std::time::Instant>,
    line: String,
    time: TimeCache,
}

/// The `%(t)s` text and the second it was rendered for.
struct TimeCache(u64, String);

impl AccessLogger {
    pub(crate) fn new(shared: Arc<AccessLog>) -> AccessLogger {
        AccessLogger {
            shared,
            buf: Vec::with_capacity(FLUSH_BYTES + 1024),
            oldest: None,
            line: String::with_capacity(512),
            time: TimeCache(u64::MAX, String::new()),
        }
    }

    /// The response headers the format shows (`Entry::response_headers` follows them).
    pub(crate) fn response_header_names(&self) -> &[String] {
        self.shared.format.response_header_names()
    }

    /// The environ keys the format shows (`Entry::environ_values` follows them).
    pub(crate) fn environ_keys(&self) -> &[String] {
        self.shared.format.environ_keys()
    }

    pub(crate) fn record(&mut self, e: &Entry<'_>) {
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        match &self.shared.format {
            Format::Json => json(&mut line, e),
            Format::Atoms { atoms, .. } => {
                for atom in atoms {
                    render(&mut self.time, &mut line, atom, e);
                }
            }
        }
        line.push('\n');
        if self.buf.is_empty() {
            self.oldest = Some(std::time::Instant::now());
        }
        self.buf.extend_from_slice(line.as_bytes());
        self.line = line;
        if self.buf.len() >= FLUSH_BYTES {
            self.flush();
        }
    }

    /// Writes the buffered lines (before the handler waits, and at exit).
    pub(crate) fn flush(&mut self) {
        if !self.buf.is_empty() {
            self.shared.sink.write(&self.buf);
            self.buf.clear();
        }
        self.oldest = None;
    }

    /// Writes the buffer if its oldest line has waited `FLUSH_AGE` (before a request runs).
    pub(crate) fn flush_if_old(&mut self) {
        if self.oldest.is_some_and(|t| t.elapsed() >= FLUSH_AGE) {
            self.flush();
        }
    }
}

impl TimeCache {
    /// `[30/Nov/2026:04:52:06 +0000]`, rendered once a second.
    fn get(&mut self) -> &str {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if self.0 != secs {
            *self = TimeCache(secs, clf(secs));
        }
        &self.1
    }
}

fn render(time: &mut TimeCache, out: &mut String, atom: &Atom, e: &Entry<'_>) {
    {
        let data = e.head_bytes;
        let (path, query) = split_target(e.head.target.get(data));
        match atom {
            Atom::Lit(s) => out.push_str(s),
            Atom::Remote => push_remote(out, e),
            Atom::Time => out.push_str(time.get()),
            Atom::RequestLine => {
                push_text(out, e.head.method.get(data));
                out.push(' ');
                push_text(out, e.head.target.get(data));
                out.push(' ');
                out.push_str(protocol(e.head.version));
            }
            Atom::Method => push_text(out, e.head.method.get(data)),
            Atom::Path => push_text(out, path),
            Atom::Query => push_text(out, query),
            Atom::Protocol => out.push_str(protocol(e.head.version)),
            Atom::Status => {
                let _ = write!(out, "{}", e.status);
            }
            Atom::Bytes => {
                let _ = write!(out, "{}", e.body_bytes);
            }
            Atom::BytesOrDash if e.body_bytes == 0 => out.push('-'),
            Atom::BytesOrDash => {
                let _ = write!(out, "{}", e.body_bytes);
            }
            Atom::Referer => push_text(out, header(e, "referer").unwrap_or(b"-")),
            Atom::UserAgent => push_text(out, header(e, "user-agent").unwrap_or(b"-")),
            Atom::Seconds => {
                let _ = write!(out, "{}", e.duration.as_secs());
            }
            Atom::Millis => {
                let _ = write!(out, "{}", e.duration.as_millis());
            }
            Atom::Micros => {
                let _ = write!(out, "{}", e.duration.as_micros());
            }
            Atom::Header(name) => push_text(out, header(e, name).unwrap_or(b"-")),
            Atom::ResponseHeader(i) => match e.response_headers.get(*i) {
                Some(Some(v)) => push_text(out, v),
                _ => out.push('-'),
            },
            Atom::SecondsFraction => {
                let _ = write!(out, "{:.6}", e.duration.as_secs_f64());
            }
            Atom::Pid => {
                let _ = write!(out, "<{}>", std::process::id());
            }
            Atom::Environ(i) => match e.environ_values.get(*i) {
                Some(Some(v)) => push_text(out, v.as_bytes()),
                _ => out.push('-'),
            },
            Atom::Dash => out.push('-'),
        }
    }
}

fn json(out: &mut String, e: &Entry<'_>) {
    {
        let data = e.head_bytes;
        let (path, query) = split_target(e.head.target.get(data));
        let mut peer = String::new();
        push_remote(&mut peer, e);
        // ISO 8601 with milliseconds, as the error log's JSON lines have it.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        out.push_str("{\"time\":");
        json_str(out, crate::log::iso8601(now).as_bytes());
        out.push_str(",\"remote_addr\":");
        json_str(out, peer.as_bytes());
        out.push_str(",\"method\":");
        json_str(out, e.head.method.get(data));
        out.push_str(",\"path\":");
        json_str(out, path);
        out.push_str(",\"query\":");
        json_str(out, query);
        out.push_str(",\"protocol\":");
        json_str(out, protocol(e.head.version).as_bytes());
        let _ = write!(
            out,
            ",\"status\":{},\"size\":{},\"duration_us\":{}",
            e.status,
            e.body_bytes,
            e.duration.as_micros()
        );
        out.push_str(",\"referer\":");
        json_str(out, header(e, "referer").unwrap_or(b""));
        out.push_str(",\"user_agent\":");
        json_str(out, header(e, "user-agent").unwrap_or(b""));
        out.push('}');
    }
}

impl Drop for AccessLogger {
    fn drop(&mut self) {
        self.flush();
    }
}

fn protocol(v: Version) -> &'static str {
    match v {
        Version::Http10 => "HTTP/1.0",
        Version::Http11 => "HTTP/1.1",
    }
}

fn split_target(target: &[u8]) -> (&[u8], &[u8]) {
    match target.iter().position(|&b| b == b'?') {
        Some(i) => (&target[..i], &target[i + 1..]),
        None => (target, b""),
    }
}

/// The first value of request header `name` (lower case).
fn header<'a>(e: &Entry<'a>, name: &str) -> Option<&'a [u8]> {
    e.head
        .headers
        .iter()
        .find(|h| {
            h.name
                .get(e.head_bytes)
                .eq_ignore_ascii_case(name.as_bytes())
        })
        .map(|h| h.value.get(e.head_bytes))
}

/// The client: the one a trusted proxy named, else the peer.
fn push_remote(out: &mut String, e: &Entry<'_>) {
    match e.client {
        Some(c) => out.push_str(c),
        None => push_peer(out, e.peer),
    }
}

fn push_peer(out: &mut String, peer: Peer) {
    match peer {
        Peer::Tcp(a) => {
            let _ = write!(out, "{}", a.ip());
        }
        Peer::Unix => out.push_str("unix"),
    }
}

/// Request bytes as log text: printable ASCII as is, anything else as `\xHH`, and `"` and
/// `\` escaped, so a client cannot forge a line or a field.
fn push_text(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
}

/// A JSON string of latin-1 bytes (RFC 8259: `"`, `\` and control characters escaped).
fn json_str(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\u{:04x}", u16::from(b));
            }
        }
    }
    out.push('"');
}

/// Common Log Format time for `secs` since the epoch, in UTC.
fn clf(secs: u64) -> String {
    crate::log::utc(std::time::Duration::from_secs(secs))
        .strftime("[%d/%b/%Y:%H:%M:%S +0000]")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_gunicorns_default_format() {
        let Format::Atoms { atoms, .. } = Format::parse(DEFAULT_FORMAT).unwrap() else {
            panic!("not atoms");
        };
        assert_eq!(atoms[0], Atom::Remote);
        assert!(atoms.contains(&Atom::RequestLine));
        assert!(Format::parse("%(zz)s").is_err());
        assert!(Format::parse("%(h").is_err());
        assert!(matches!(Format::parse("json"), Ok(Format::Json)));
        let Format::Atoms { atoms: a, .. } = Format::parse("x %({X-Request-Id}i)s y").unwrap()
        else {
            panic!("not atoms");
        };
        assert_eq!(a[1], Atom::Header("x-request-id".into()));
        // Response headers are numbered by first mention, one slot per name.
        let Format::Atoms {
            atoms: a,
            response: names,
            ..
        } = Format::parse("%({Content-Type}o)s %({ETag}o)s %({content-type}o)s %(L)s %(p)s")
            .unwrap()
        else {
            panic!("not atoms");
        };
        assert_eq!(names, ["content-type", "etag"]);
        assert_eq!(a[0], Atom::ResponseHeader(0));
        assert_eq!(a[2], Atom::ResponseHeader(1));
        assert_eq!(a[4], Atom::ResponseHeader(0));
        assert_eq!(a[6], Atom::SecondsFraction);
        assert_eq!(a[8], Atom::Pid);
    }

    #[test]
    fn clf_time_is_right() {
        // 2026-11-30T04:52:06Z
        assert_eq!(clf(1_796_014_326), "[30/Nov/2026:04:52:06 +0000]");
        assert_eq!(clf(0), "[01/Jan/1970:00:00:00 +0000]");
    }

    #[test]
    fn text_and_json_escape_what_could_forge_a_line() {
        let mut s = String::new();
        push_text(&mut s, b"a\"b\\c\nd\xff");
        assert_eq!(s, "a\\\"b\\\\c\\x0ad\\xff");
        let mut j = String::new();
        json_str(&mut j, b"a\"b\n\x01\xe9");
        assert_eq!(j, "\"a\\\"b\\n\\u0001\\u00e9\"");
    }
}
