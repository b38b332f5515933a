//! `--static-map PREFIX=DIR`: files the loop thread answers itself, with no handler and no
//! Python. The HTTP of it is `http::static_files`; this part opens the files (beneath each
//! mount's directory descriptor, `sys::beneath`), keeps them open in a bounded cache that
//! notices an edit within a second, and queues the head and the file (sent with sendfile,
//! or read and encrypted under TLS) on the connection, in order with its other responses.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::http::encode::{push_decimal, SERVER_NAME};
use crate::http::parse::Version;
use crate::http::percent;
use crate::http::static_files::{self as sf, Named, Range};
use crate::pipeline::msg::{FileBody, Request};
use crate::sys::beneath::{open_beneath, Links};
use crate::worker::conn::Conn;

/// How long a file's cached descriptor and facts are used before the file is looked at
/// again (one `stat`): an edited or replaced file is served stale for at most this long.
const RECHECK_AFTER: Duration = Duration::from_secs(1);

/// Files (and missing names) kept; past it the cache starts afresh.
const CACHE_ENTRIES: usize = 4096;

/// One year: the lifetime of a file whose name carries its content's hash.
const IMMUTABLE_MAX_AGE: &str = "public, max-age=31536000, immutable";

/// The settings, as the worker reads them from its configuration.
#[derive(Clone, Debug, Default)]
pub(crate) struct StaticOptions {
    /// `PREFIX`, `DIR` pairs.
    pub(crate) mounts: Vec<(String, std::path::PathBuf)>,
    /// `--mime-type`: extension (lower case), type.
    pub(crate) types: Vec<(String, String)>,
    /// `--static-max-age`: the lifetime of a file whose name carries no hash.
    pub(crate) max_age: u64,
    /// `--static-index`: a directory's `index.html` is served.
    pub(crate) index: bool,
    /// `--static-follow-symlinks`: symbolic links leading outside a mount are followed.
    pub(crate) follow_links: bool,
}

struct Mount {
    prefix: Vec<u8>,
    dir: OwnedFd,
}

/// What is known of one file (or of a name that is no regular file).
#[derive(Clone)]
struct Cached {
    /// `None`: missing, not a regular file, or not to be opened (counted as 404).
    file: Option<Open>,
    checked: Instant,
}

#[derive(Clone)]
struct Open {
    fd: Arc<OwnedFd>,
    size: u64,
    mtime: (i64, u32),
    /// For a re-check: the file is the same one if these are.
    id: (u64, u64, i64, u32),
    is_dir: bool,
}

pub(crate) struct StaticFiles {
    /// Longest prefix first.
    mounts: Vec<Mount>,
    types: Vec<(String, String)>,
    cache_control: Vec<u8>,
    index: bool,
    links: Links,
    cache: HashMap<Vec<u8>, Cached>,
    /// Scratch: the cache key (the mount's index, then the path), the decoded path.
    key: Vec<u8>,
    path: Vec<u8>,
    /// The access log, when there is one: these requests get their lines too, with no
    /// response header or environ value to show (`none`: as many as the format names).
    log: Option<StaticLog>,
}

/// The access log's writer, and the values a static answer has none of: one per response
/// header and per environ key the format names.
type StaticLog = (
    crate::access_log::AccessLogger,
    Vec<Option<Vec<u8>>>,
    Vec<Option<String>>,
);

/// What a static answer was, for the log and the counters.
pub(crate) struct Answered {
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
}

impl StaticFiles {
    /// Opens every mount's directory (as the worker's user); `None` without mounts.
    pub(crate) fn open(opts: &StaticOptions) -> Result<Option<StaticFiles>, String> {
        if opts.mounts.is_empty() {
            return Ok(None);
        }
        let mut mounts = Vec::with_capacity(opts.mounts.len());
        for (prefix, dir) in &opts.mounts {
            let fd = crate::sys::beneath::open_dir(dir).map_err(|e| {
                format!(
                    "--static-map {prefix}={}: cannot open the directory: {e}",
                    dir.display()
                )
            })?;
            mounts.push(Mount {
                prefix: prefix.trim_end_matches('/').as_bytes().to_vec(),
                dir: fd,
            });
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.prefix.len()));
        let cache_control = if opts.max_age == 0 {
            b"no-cache".to_vec()
        } else {
            format!("public, max-age={}", opts.max_age).into_bytes()
        };
        Ok(Some(StaticFiles {
            mounts,
            types: opts.types.clone(),
            cache_control,
            index: opts.index,
            links: if opts.follow_links {
                Links::Anywhere
            } else {
                Links::Beneath
            },
            cache: HashMap::new(),
            key: Vec::with_capacity(256),
            path: Vec::with_capacity(256),
            log: None,
        }))
    }

    /// Logs each answer to `log` (the worker's access log).
    pub(crate) fn log_to(&mut self, log: Arc<crate::access_log::AccessLog>) {
        let logger = crate::access_log::AccessLogger::new(log);
        let none_o = vec![None; logger.response_header_names().len()];
        let none_e = vec![None; logger.environ_keys().len()];
        self.log = Some((logger, none_o, none_e));
    }

    /// Writes the access log lines buffered (before the loop sleeps).
    pub(crate) fn flush_log(&mut self) {
        if let Some((l, ..)) = self.log.as_mut() {
            l.flush();
        }
    }

    /// The mount `req`'s path is under (longest prefix), if any.
    pub(crate) fn mount_of(&self, req: &Request) -> Option<u8> {
        let (path, _) = percent::split_target(req.head.target.get(&req.data));
        self.mounts
            .iter()
            .position(|m| m.prefix.is_empty() || percent::under_root(path, &m.prefix).is_some())
            .map(|i| i as u8)
    }

    /// Answers `req` from mount `m`, queuing the response on `conn`, and logs it; its
    /// status.
    pub(crate) fn answer(
        &mut self,
        conn: &mut Conn,
        req: &Request,
        m: u8,
        date: &[u8],
        now: Instant,
    ) -> u16 {
        let answered = self.respond(conn, req, m, date, now);
        if let Some((log, none_o, none_e)) = self.log.as_mut() {
            log.record(&crate::access_log::Entry {
                peer: req.peer,
                client: None,
                head_bytes: &req.data[..req.head.head_len.min(req.data.len())],
                head: &req.head,
                status: answered.status,
                body_bytes: answered.body_bytes,
                duration: now.saturating_duration_since(req.queued_at),
                response_headers: none_o,
                environ_values: none_e,
            });
            log.flush_if_old();
        }
        answered.status
    }

    fn respond(
        &mut self,
        conn: &mut Conn,
        req: &Request,
        m: u8,
        date: &[u8],
        now: Instant,
    ) -> Answered {
        let reply = Reply {
            keep_alive: req.head.keep_alive,
            version: req.head.version,
            date,
        };
        let method = req.head.method.get(&req.data);
        let head_only = method == b"HEAD";
        if method != b"GET" && !head_only {
            return reply.simple(
                conn,
                405,
                "Method Not Allowed",
                b"Allow: GET, HEAD\r\n",
                head_only,
                now,
            );
        }
        let mount = &self.mounts[m as usize];
        let (raw, _) = percent::split_target(req.head.target.get(&req.data));
        let rest = if mount.prefix.is_empty() {
            raw
        } else {
            percent::under_root(raw, &mount.prefix).unwrap_or_default()
        };
        let mut path = std::mem::take(&mut self.path);
        let named = sf::file_path(rest, &mut path);
        let answered = self.answer_path(conn, req, m, named, &mut path, &reply, head_only, now);
        self.path = path;
        answered
    }

    #[allow(clippy::too_many_arguments)]
    fn answer_path(
        &mut self,
        conn: &mut Conn,
        req: &Request,
        m: u8,
        named: Option<Named>,
        path: &mut Vec<u8>,
        reply: &Reply<'_>,
        head_only: bool,
        now: Instant,
    ) -> Answered {
        let not_found = |conn: &mut Conn| reply.simple(conn, 404, "Not Found", b"", head_only, now);
        let Some(named) = named else {
            return not_found(conn);
        };
        if named == Named::Directory {
            if !self.index {
                return not_found(conn);
            }
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(b"index.html");
        }
        let Some(file) = self.lookup(m, path, now) else {
            return not_found(conn);
        };
        if file.is_dir {
            // A directory named without its slash: with an index, send the client to the
            // name with the slash (relative links in the page then resolve), as nginx does.
            if !self.index {
                return not_found(conn);
            }
            let (raw, query) = percent::split_target(req.head.target.get(&req.data));
            let mut location = b"Location: ".to_vec();
            location.extend_from_slice(raw);
            location.push(b'/');
            if !query.is_empty() {
                location.push(b'?');
                location.extend_from_slice(query);
            }
            location.extend_from_slice(b"\r\n");
            return reply.simple(conn, 301, "Moved Permanently", &location, head_only, now);
        }
        let accept = req.head.header_value(&req.data, b"accept-encoding");
        let (encoding, rep, vary) = self.representation(m, path, file, accept, now);
        let mut etag = Vec::with_capacity(40);
        sf::etag(rep.mtime.0, rep.mtime.1, rep.size, &mut etag);
        let mut last_modified = [0u8; crate::http::date::IMF_FIXDATE_LEN_BYTES];
        crate::http::date::render_imf_fixdate(
            u64::try_from(rep.mtime.0).unwrap_or(0),
            &mut last_modified,
        );
        let header = |name: &[u8]| req.head.header_value(&req.data, name);
        // RFC 9110 §13.2.2: If-None-Match, else If-Modified-Since.
        let not_modified = match header(b"if-none-match") {
            Some(v) => sf::none_match_hits(v, &etag),
            None => {
                header(b"if-modified-since").is_some_and(|v| sf::not_modified_since(v, rep.mtime.0))
            }
        };
        let mut h = Head::new(if not_modified {
            "304 Not Modified"
        } else {
            "200 OK"
        });
        h.field(b"ETag", &etag);
        h.field(b"Last-Modified", &last_modified);
        let cache_control = if sf::is_hashed_name(path) {
            IMMUTABLE_MAX_AGE.as_bytes()
        } else {
            &self.cache_control[..]
        };
        h.field(b"Cache-Control", cache_control);
        if vary {
            h.field(b"Vary", b"Accept-Encoding");
        }
        if not_modified {
            let out = h.finish(reply, None);
            conn.answer_file(out, None, now);
            return Answered {
                status: 304,
                body_bytes: 0,
            };
        }
        self.send(
            conn, req, path, h, rep, encoding, &etag, reply, head_only, now,
        )
    }

    /// The `.br` or `.gz` sibling of `file` the client accepts (`accept`), else `file`
    /// itself: which coding, the representation, and whether any sibling exists (then
    /// `Vary: Accept-Encoding` is sent, chosen or not, so that a cache keeps them apart).
    fn representation(
        &mut self,
        m: u8,
        path: &mut Vec<u8>,
        file: Open,
        accept: Option<&[u8]>,
        now: Instant,
    ) -> (Option<&'static [u8]>, Open, bool) {
        let mut vary = false;
        let mut chosen: Option<(&'static [u8], Open)> = None;
        for (coding, ext) in [(&b"br"[..], &b".br"[..]), (b"gzip", b".gz")] {
            let base = path.len();
            path.extend_from_slice(ext);
            let sibling = self.lookup(m, path, now).filter(|s| !s.is_dir);
            path.truncate(base);
            if let Some(s) = sibling {
                vary = true;
                if chosen.is_none() && accept.is_some_and(|a| sf::accepts(a, coding)) {
                    chosen = Some((coding, s));
                }
            }
        }
        match chosen {
            Some((coding, s)) => (Some(coding), s, vary),
            None => (None, file, vary),
        }
    }

    /// The 200, 206 or 416 for representation `rep` of the file at `path`, its head begun
    /// in `h`.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        conn: &mut Conn,
        req: &Request,
        path: &[u8],
        mut h: Head,
        rep: Open,
        encoding: Option<&[u8]>,
        etag: &[u8],
        reply: &Reply<'_>,
        head_only: bool,
        now: Instant,
    ) -> Answered {
        let header = |name: &[u8]| req.head.header_value(&req.data, name);
        let mut content_type = Vec::with_capacity(48);
        sf::content_type(path, &self.types, &mut content_type);
        h.field(b"Content-Type", &content_type);
        if let Some(coding) = encoding {
            h.field(b"Content-Encoding", coding);
        }
        h.field(b"Accept-Ranges", b"bytes");
        let range = match header(b"range") {
            // If-Range: the range only for the representation the client has part of.
            Some(r)
                if header(b"if-range").is_none_or(|v| sf::if_range_holds(v, etag, rep.mtime.0)) =>
            {
                sf::range(r, rep.size)
            }
            _ => Range::Whole,
        };
        let (start, len) = match range {
            Range::Whole => (0, rep.size),
            Range::Part { start, end } => {
                h.status = "206 Partial Content";
                let mut v = b"bytes ".to_vec();
                push_decimal(&mut v, start);
                v.push(b'-');
                push_decimal(&mut v, end);
                v.push(b'/');
                push_decimal(&mut v, rep.size);
                h.field(b"Content-Range", &v);
                (start, end - start + 1)
            }
            Range::Unsatisfiable => {
                h.status = "416 Range Not Satisfiable";
                let mut v = b"bytes */".to_vec();
                push_decimal(&mut v, rep.size);
                h.field(b"Content-Range", &v);
                let out = h.finish(reply, Some(0));
                conn.answer_file(out, None, now);
                return Answered {
                    status: 416,
                    body_bytes: 0,
                };
            }
        };
        let status = if len == rep.size && start == 0 && matches!(range, Range::Whole) {
            200
        } else {
            206
        };
        let out = h.finish(reply, Some(len));
        let body = (!head_only && len > 0).then(|| FileBody {
            fd: rep.fd.clone(),
            offset: start,
            len,
        });
        conn.answer_file(out, body, now);
        Answered {
            status,
            body_bytes: if head_only { 0 } else { len },
        }
    }

    /// The file at `path` under mount `m`: from the cache while fresh, else opened (and
    /// cached, as is a name that is missing).
    fn lookup(&mut self, m: u8, path: &[u8], now: Instant) -> Option<Open> {
        self.key.clear();
        self.key.push(m);
        self.key.extend_from_slice(path);
        if let Some(c) = self.cache.get_mut(&self.key[..]) {
            if now.saturating_duration_since(c.checked) < RECHECK_AFTER {
                return c.file.clone();
            }
            // Looked at again: the same file (device, inode, change time) keeps its
            // descriptor; anything else is opened afresh.
            let same = c.file.as_ref().is_some_and(|f| {
                stat_at(self.mounts[m as usize].dir.as_fd(), path)
                    .is_some_and(|st| id_of(&st) == f.id)
            });
            if same {
                c.checked = now;
                return c.file.clone();
            }
        }
        let file = open(self.mounts[m as usize].dir.as_fd(), path, self.links);
        if self.cache.len() >= CACHE_ENTRIES {
            self.cache.clear();
        }
        self.cache.insert(
            self.key.clone(),
            Cached {
                file: file.clone(),
                checked: now,
            },
        );
        file
    }
}

fn open(dir: std::os::fd::BorrowedFd<'_>, path: &[u8], links: Links) -> Option<Open> {
    let fd = open_beneath(dir, path, links).ok()?;
    // SAFETY: a zeroed stat is a valid out-buffer; fstat fills it for a live descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFREG && kind != libc::S_IFDIR {
        return None;
    }
    Some(Open {
        fd: Arc::new(fd),
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec as u32),
        id: id_of(&st),
        is_dir: kind == libc::S_IFDIR,
    })
}

fn stat_at(dir: std::os::fd::BorrowedFd<'_>, path: &[u8]) -> Option<libc::stat> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: a zeroed stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` writable, both alive across the call; `dir`
    // is a live descriptor.
    (unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), &mut st, 0) } == 0).then_some(st)
}

fn id_of(st: &libc::stat) -> (u64, u64, i64, u32) {
    (st.st_dev, st.st_ino, st.st_ctime, st.st_ctime_nsec as u32)
}

/// What every static response's head needs from its request.
struct Reply<'a> {
    keep_alive: bool,
    version: Version,
    date: &'a [u8],
}

impl Reply<'_> {
    /// A small text answer (404, 405, 301) with `extra` header lines.
    fn simple(
        &self,
        conn: &mut Conn,
        status: u16,
        reason: &str,
        extra: &[u8],
        head_only: bool,
        now: Instant,
    ) -> Answered {
        let body = reason.as_bytes();
        let out = crate::http::encode::simple_response_with(
            status,
            reason,
            "text/plain",
            extra,
            body,
            self.keep_alive,
            head_only,
            self.date,
        );
        conn.answer_file(out, None, now);
        Answered {
            status,
            body_bytes: if head_only { 0 } else { body.len() as u64 },
        }
    }
}

/// A static response's head, built from values the server made (nothing to validate).
struct Head {
    status: &'static str,
    fields: Vec<u8>,
}

impl Head {
    fn new(status: &'static str) -> Head {
        Head {
            status,
            fields: Vec::with_capacity(320),
        }
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.fields.extend_from_slice(name);
        self.fields.extend_from_slice(b": ");
        self.fields.extend_from_slice(value);
        self.fields.extend_from_slice(b"\r\n");
    }

    /// The whole head: status line, fields, `Content-Length` (when `length`), the
    /// connection's fate, `Date`, `Server`.
    fn finish(self, reply: &Reply<'_>, length: Option<u64>) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.fields.len() + 128);
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(self.status.as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.fields);
        if let Some(n) = length {
            out.extend_from_slice(b"Content-Length: ");
            push_decimal(&mut out, n);
            out.extend_from_slice(b"\r\n");
        }
        if !reply.keep_alive {
            out.extend_from_slice(b"Connection: close\r\n");
        } else if reply.version == Version::Http10 {
            out.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        out.extend_from_slice(b"Date: ");
        out.extend_from_slice(reply.date);
        out.extend_from_slice(b"\r\nServer: ");
        out.extend_from_slice(SERVER_NAME);
        out.extend_from_slice(b"\r\n\r\n");
        out
    }
}
