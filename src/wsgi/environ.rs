//! Building the environ dict (PEP 3333 "environ Variables").
//!
//! Keys are interned once per handler thread; the constant entries live in a base dict
//! that is copied for each request (`PyDict_Copy` of a small dict is one allocation and a
//! memcpy-like fill); values are created straight from the request's bytes as latin-1
//! native strings.
//!
//! Measured in `benches/parts.rs` (benchmarks/decisions.md, "environ build"), three things keep the
//! build short:
//! - The base dict's table is presized for a whole environ, and `PyDict_Copy` clones the
//!   table at its size, so adding the request's entries never resizes the copy.
//! - Header names are matched by position against the previous request's (clients send the
//!   same headers in the same order): one `memcmp` instead of hashing the name. A value
//!   equal to the previous request's at that position reuses its `str` (immutable, so
//!   sharing it is invisible to the app) instead of allocating another.
//! - One `PyDict_SetDefault` per header inserts it and tells a repeated one apart.
//! - A request whose method, version and header lines are byte for byte the previous
//!   request's (clients of one kind send the same headers every time; only the target and
//!   the peer differ) starts from a copy of the environ those made, kept after the second
//!   time in a row: no header is matched or inserted (`Memo`).
//! - `PATH_INFO` is the previous request's string when the path is, and `REMOTE_PORT` is
//!   made once per connection.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::file_wrapper::FileWrapper;
use super::pystr::{latin1, latin1_str};
use crate::http::parse::Version;
use crate::http::percent;
use crate::pipeline::msg::{Peer, Request};

/// Distinct header names whose environ keys are kept per handler thread; names past this
/// are converted for each request (a client sending endless new names gains nothing).
const HEADER_KEY_CACHE_ENTRIES: usize = 512;

/// What the environ says about this server, fixed per worker.
pub struct ServerInfo {
    /// `SERVER_NAME` and `SERVER_PORT` of the first listener (in the base environ).
    pub server_name: String,
    pub server_port: String,
    /// Those of the others (`--bind` repeated), by listener index from 1.
    pub other_listeners: Vec<(String, String)>,
    pub multithread: bool,
    pub multiprocess: bool,
    /// The peers whose forwarding headers are believed (`Config::trusted`: none behind
    /// `--proxy-protocol` unless `--proxy-forwarded-headers`, and then the peer is the
    /// address the PROXY header named).
    pub trusted: super::proxy::Trusted,
    /// `--root-path`: SCRIPT_NAME, taken off the front of PATH_INFO.
    pub root_path: Option<String>,
}

/// Header positions remembered from the previous request.
const RECENT_HEADER_POSITIONS: usize = 32;

/// Header values (and paths) longer than this are not remembered for reuse.
const RECENT_VALUE_MAX_BYTES: usize = 512;

/// Connections (by their slot in the loop's table) whose `REMOTE_PORT` string is kept.
const PORT_CACHE_SLOTS: usize = 4096;

/// Heads whose header lines are longer than this are not remembered (`Memo`).
const MEMO_MAX_BYTES: usize = 4096;

/// What the previous request's method, version and header lines made, for the next
/// request that sends the same bytes.
#[derive(Default)]
struct Memo {
    method: Vec<u8>,
    version: Option<Version>,
    /// The header lines as received, from the first name to the end of the head.
    lines: Vec<u8>,
    /// The base environ with those entries (and nothing of the target or the peer), kept
    /// once the same bytes came twice in a row; never handed out, only copied.
    environ: Option<Py<PyDict>>,
    /// Those lines hold a forwarding header.
    forwarding: bool,
}

impl Memo {
    fn matches(&self, method: &[u8], version: Version, lines: &[u8]) -> bool {
        self.version == Some(version) && self.method == method && self.lines == lines
    }
}

/// Entries the base dict's table is sized for: the constant ones, the per-request ones and
/// a browser's headers, so that filling a copy never resizes it.
const ENVIRON_PRESIZE_ENTRIES: isize = 48;

/// FNV-1a: header names are short, and SipHash's setup costs more than the hash here.
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

struct Keys {
    request_method: Py<PyString>,
    path_info: Py<PyString>,
    script_name: Py<PyString>,
    query_string: Py<PyString>,
    server_protocol: Py<PyString>,
    remote_addr: Py<PyString>,
    remote_port: Py<PyString>,
    remote_host: Py<PyString>,
    pub(crate) wsgi_input: Py<PyString>,
    url_scheme: Py<PyString>,
    forwarded: Py<PyString>,
    x_forwarded_for: Py<PyString>,
    x_forwarded_proto: Py<PyString>,
    server_name: Py<PyString>,
    server_port: Py<PyString>,
    http_host: Py<PyString>,
    ssl_client_s_dn: Py<PyString>,
}

/// One header position of the previous request: its name, key, and value.
#[derive(Default)]
struct Recent {
    name: Vec<u8>,
    key: Option<Py<PyString>>,
    /// The value's `str`; it stands for its bytes alone, so a new name at this position
    /// keeps it.
    value: LastStr,
}

/// The `str` made from some bytes last time, for the next time they are the same bytes
/// (`str` is immutable, so sharing it is invisible to the app).
#[derive(Default)]
struct LastStr {
    bytes: Vec<u8>,
    s: Option<Py<PyString>>,
}

impl LastStr {
    /// The `str` for `bytes`: the kept one when they are the same, else what `make` makes,
    /// kept when `bytes` are short.
    fn get(
        &mut self,
        py: Python<'_>,
        bytes: &[u8],
        make: impl FnOnce() -> PyResult<Py<PyString>>,
    ) -> PyResult<Py<PyString>> {
        if let Some(s) = &self.s {
            if self.bytes == bytes {
                return Ok(s.clone_ref(py));
            }
        }
        let s = make()?;
        self.bytes.clear();
        self.s = None;
        if bytes.len() <= RECENT_VALUE_MAX_BYTES {
            self.bytes.extend_from_slice(bytes);
            self.s = Some(s.clone_ref(py));
        }
        Ok(s)
    }
}

pub struct EnvBuilder {
    base: Py<PyDict>,
    keys: Keys,
    methods: Vec<(&'static [u8], Py<PyString>)>,
    http10: Py<PyString>,
    http11: Py<PyString>,
    empty: Py<PyString>,
    /// Raw header name -> environ key; `None` for names that are dropped.
    header_keys: HashMap<Box<[u8]>, Option<Py<PyString>>, BuildHasherDefault<Fnv>>,
    last_ip: Option<(IpAddr, Py<PyString>)>,
    recent: Vec<Recent>,
    trusted: super::proxy::Trusted,
    https: Py<PyString>,
    scratch: Vec<u8>,
    /// `--root-path`.
    root: Option<String>,
    /// `SERVER_NAME` and `SERVER_PORT` of listeners after the first (whose are in `base`).
    other_listeners: Vec<(Py<PyString>, Py<PyString>)>,
    /// The client a trusted proxy named for the last request built (its `REMOTE_ADDR`),
    /// for the access log.
    forwarded_client: Option<String>,
    memo: Memo,
    /// The previous request's path as sent, and its `PATH_INFO` (decoded).
    last_path: LastStr,
    /// `REMOTE_PORT` by connection slot, with the port it was made for (a slot is reused by
    /// later connections).
    ports: Vec<Option<(u16, Py<PyString>)>>,
}

/// An empty dict whose table holds `n` entries without resizing, when this Python exports
/// `_PyDict_NewPresized` (CPython 3.6 and later, a private function, so looked up at run
/// time rather than linked); else an ordinary empty dict.
fn presized_dict(py: Python<'_>, n: isize) -> Bound<'_, PyDict> {
    type NewPresized = unsafe extern "C" fn(ffi::Py_ssize_t) -> *mut ffi::PyObject;
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the loaded
    // objects' symbol tables.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_PyDict_NewPresized".as_ptr()) };
    if !sym.is_null() {
        // SAFETY: the symbol is CPython's `PyObject *_PyDict_NewPresized(Py_ssize_t)`,
        // called with the GIL held (`py`); it returns a new dict reference or NULL with an
        // exception set, which `from_owned_ptr_or_err` turns into an Err.
        let made = unsafe {
            let f: NewPresized = std::mem::transmute::<*mut libc::c_void, NewPresized>(sym);
            Bound::from_owned_ptr_or_err(py, f(n))
        };
        if let Ok(d) = made {
            if let Ok(d) = d.cast_into::<PyDict>() {
                return d;
            }
        }
    }
    PyDict::new(py)
}

impl EnvBuilder {
    pub fn new(py: Python<'_>, info: &ServerInfo) -> PyResult<EnvBuilder> {
        let i = |s: &str| PyString::intern(py, s).unbind();
        let base = presized_dict(py, ENVIRON_PRESIZE_ENTRIES);
        let sys = py.import("sys")?;
        base.set_item(i("wsgi.version"), PyTuple::new(py, [1, 0])?)?;
        base.set_item(i("wsgi.url_scheme"), i("http"))?;
        base.set_item(i("wsgi.errors"), sys.getattr("stderr")?)?;
        base.set_item(i("wsgi.multithread"), info.multithread)?;
        base.set_item(i("wsgi.multiprocess"), info.multiprocess)?;
        base.set_item(i("wsgi.run_once"), false)?;
        // The body is read whole before the app runs, so reading past its end returns
        // b"" (the input_terminated extension).
        base.set_item(i("wsgi.input_terminated"), true)?;
        base.set_item(i("wsgi.file_wrapper"), py.get_type::<FileWrapper>())?;
        base.set_item(i("SCRIPT_NAME"), i(info.root_path.as_deref().unwrap_or("")))?;
        // RFC 3875 §4.1.17; apps read it (httpbin refuses chunked uploads without it).
        base.set_item(
            i("SERVER_SOFTWARE"),
            i(concat!("m0serve/", env!("CARGO_PKG_VERSION"))),
        )?;
        base.set_item(i("SERVER_NAME"), PyString::new(py, &info.server_name))?;
        base.set_item(i("SERVER_PORT"), PyString::new(py, &info.server_port))?;
        let methods = [
            "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
        ]
        .into_iter()
        .map(|m| (m.as_bytes(), i(m)))
        .collect();
        Ok(EnvBuilder {
            base: base.unbind(),
            keys: Keys {
                request_method: i("REQUEST_METHOD"),
                path_info: i("PATH_INFO"),
                script_name: i("SCRIPT_NAME"),
                query_string: i("QUERY_STRING"),
                server_protocol: i("SERVER_PROTOCOL"),
                remote_addr: i("REMOTE_ADDR"),
                remote_port: i("REMOTE_PORT"),
                remote_host: i("REMOTE_HOST"),
                wsgi_input: i("wsgi.input"),
                url_scheme: i("wsgi.url_scheme"),
                forwarded: i("HTTP_FORWARDED"),
                x_forwarded_for: i("HTTP_X_FORWARDED_FOR"),
                x_forwarded_proto: i("HTTP_X_FORWARDED_PROTO"),
                server_name: i("SERVER_NAME"),
                server_port: i("SERVER_PORT"),
                http_host: i("HTTP_HOST"),
                ssl_client_s_dn: i("SSL_CLIENT_S_DN"),
            },
            methods,
            http10: i("HTTP/1.0"),
            http11: i("HTTP/1.1"),
            empty: i(""),
            header_keys: HashMap::default(),
            last_ip: None,
            recent: Vec::new(),
            trusted: info.trusted.clone(),
            https: i("https"),
            scratch: Vec::with_capacity(256),
            root: info.root_path.clone(),
            other_listeners: info
                .other_listeners
                .iter()
                .map(|(n, p)| (PyString::new(py, n).unbind(), PyString::new(py, p).unbind()))
                .collect(),
            forwarded_client: None,
            memo: Memo::default(),
            last_path: LastStr::default(),
            ports: Vec::new(),
        })
    }

    /// Adds an entry every environ gets (set once, copied with the base dict).
    pub(crate) fn add_constant(
        &self,
        py: Python<'_>,
        key: &str,
        value: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.base
            .bind(py)
            .set_item(PyString::intern(py, key), value)
    }

    pub(crate) fn input_key<'py>(&self, py: Python<'py>) -> &Bound<'py, PyString> {
        self.keys.wsgi_input.bind(py)
    }

    /// The client a trusted proxy named for the request just built, if one did (taken).
    pub(crate) fn take_forwarded_client(&mut self) -> Option<String> {
        self.forwarded_client.take()
    }

    /// The environ for `req`, without `wsgi.input` (the caller moves the body into it).
    pub fn build<'py>(&mut self, py: Python<'py>, req: &Request) -> PyResult<Bound<'py, PyDict>> {
        self.forwarded_client = None;
        let data = &req.data;
        let head = &req.head;
        let method = head.method.get(data);
        let lines = match head.headers.first() {
            Some(h) => &data[h.name.start as usize..head.head_len],
            None => &[][..],
        };
        let (env, forwarding) = match &self.memo.environ {
            Some(memo) if self.memo.matches(method, head.version, lines) => {
                (memo.bind(py).copy()?, self.memo.forwarding)
            }
            _ => {
                let env = self.base.bind(py).copy()?;
                let forwarding = self.add_head(py, &env, req)?;
                self.remember(&env, method, head.version, lines, forwarding)?;
                (env, forwarding)
            }
        };
        let k = &self.keys;

        let (path, query) = percent::split_target(head.target.get(data));
        // Under --root-path the prefix is SCRIPT_NAME (in the base environ); a request
        // outside it reaches the app only with `--root-path-outside app`, as it came.
        let path = match &self.root {
            Some(root) => match percent::under_root(path, root.as_bytes()) {
                Some(rest) => rest,
                None => {
                    env.set_item(k.script_name.bind(py), self.empty.bind(py))?;
                    path
                }
            },
            None => path,
        };
        let path_info = self.path_info(py, path)?;
        let k = &self.keys;
        env.set_item(k.path_info.bind(py), path_info.bind(py))?;
        if query.is_empty() {
            env.set_item(k.query_string.bind(py), self.empty.bind(py))?;
        } else {
            env.set_item(k.query_string.bind(py), latin1_str(py, query)?)?;
        }
        // The base has the first listener's; a connection another one accepted gets its own.
        if let Some((name, port)) = (req.listener as usize)
            .checked_sub(1)
            .and_then(|i| self.other_listeners.get(i))
        {
            env.set_item(k.server_name.bind(py), name.bind(py))?;
            env.set_item(k.server_port.bind(py), port.bind(py))?;
        }

        if req.secure {
            env.set_item(k.url_scheme.bind(py), self.https.bind(py))?;
            if let Some(dn) = &req.client_dn {
                // The subject of the certificate the client proved it holds (mod_ssl's
                // name for it, RFC 4514 form).
                env.set_item(k.ssl_client_s_dn.bind(py), PyString::new(py, dn))?;
            }
        }
        match req.peer {
            Peer::Tcp(addr) => {
                let ip = addr.ip();
                let cached = match &self.last_ip {
                    Some((last, s)) if *last == ip => s.clone_ref(py),
                    _ => {
                        let s = PyString::new(py, &ip.to_string()).unbind();
                        self.last_ip = Some((ip, s.clone_ref(py)));
                        s
                    }
                };
                env.set_item(k.remote_addr.bind(py), cached.bind(py))?;
                // RFC 3875 §4.1.9: the server "MAY substitute the REMOTE_ADDR value" for
                // the host name it does not look up.
                env.set_item(k.remote_host.bind(py), cached.bind(py))?;
                let port = self.remote_port(py, req.conn.slot, addr.port())?;
                env.set_item(self.keys.remote_port.bind(py), port.bind(py))?;
            }
            Peer::Unix => {
                env.set_item(k.remote_addr.bind(py), self.empty.bind(py))?;
                env.set_item(k.remote_host.bind(py), self.empty.bind(py))?;
            }
        }
        if let Some((authority, host)) = percent::absolute_form_authority(head.target.get(data)) {
            // RFC 9112 §3.2.2: the target's authority replaces Host.
            let k = &self.keys;
            env.set_item(k.http_host.bind(py), latin1_str(py, authority)?)?;
            env.set_item(k.server_name.bind(py), latin1_str(py, host)?)?;
        }
        if forwarding {
            self.apply_forwarding(py, &env, req)?;
        }
        Ok(env)
    }

    /// `PATH_INFO` for `path` (as sent): the previous request's string when the bytes are
    /// the same.
    fn path_info(&mut self, py: Python<'_>, path: &[u8]) -> PyResult<Py<PyString>> {
        let scratch = &mut self.scratch;
        self.last_path.get(py, path, || {
            scratch.clear();
            percent::percent_decode_into(path, scratch);
            Ok(latin1_str(py, scratch)?.unbind())
        })
    }

    /// `REMOTE_PORT` for the connection in `slot`, whose peer port is `port`: made once per
    /// connection.
    fn remote_port(&mut self, py: Python<'_>, slot: u32, port: u16) -> PyResult<Py<PyString>> {
        let slot = slot as usize;
        if let Some(Some((p, s))) = self.ports.get(slot) {
            if *p == port {
                return Ok(s.clone_ref(py));
            }
        }
        let mut buf = [0u8; 5];
        let s = latin1_str(py, fmt_port(port, &mut buf))?.unbind();
        if slot < PORT_CACHE_SLOTS {
            if slot >= self.ports.len() {
                self.ports.resize_with(slot + 1, || None);
            }
            self.ports[slot] = Some((port, s.clone_ref(py)));
        }
        Ok(s)
    }

    /// Remembers the method, version and header lines just built into `env` (a request's
    /// own entries not yet added): the second time in a row the same bytes come, a copy of
    /// `env` is kept for the next ones.
    fn remember(
        &mut self,
        env: &Bound<'_, PyDict>,
        method: &[u8],
        version: Version,
        lines: &[u8],
        forwarding: bool,
    ) -> PyResult<()> {
        let m = &mut self.memo;
        if m.matches(method, version, lines) {
            m.environ = Some(env.copy()?.unbind());
            m.forwarding = forwarding;
            return Ok(());
        }
        m.environ = None;
        m.version = None;
        if lines.len() <= MEMO_MAX_BYTES {
            m.method.clear();
            m.method.extend_from_slice(method);
            m.lines.clear();
            m.lines.extend_from_slice(lines);
            m.version = Some(version);
        }
        Ok(())
    }

    /// Adds what the request's method, version and header lines make to `env`; whether a
    /// forwarding header is among them.
    fn add_head(
        &mut self,
        py: Python<'_>,
        env: &Bound<'_, PyDict>,
        req: &Request,
    ) -> PyResult<bool> {
        let data = &req.data;
        let head = &req.head;
        let k = &self.keys;
        let method = head.method.get(data);
        match self.methods.iter().find(|(m, _)| *m == method) {
            Some((_, s)) => env.set_item(k.request_method.bind(py), s.bind(py))?,
            None => env.set_item(k.request_method.bind(py), latin1_str(py, method)?)?,
        }
        let proto = match head.version {
            Version::Http10 => &self.http10,
            Version::Http11 => &self.http11,
        };
        env.set_item(k.server_protocol.bind(py), proto.bind(py))?;

        // Positions of the forwarding headers, noticed by key identity (interned keys).
        let mut forwarding = false;
        for (pos, h) in head.headers.iter().enumerate() {
            let name = h.name.get(data);
            let value = h.value.get(data);
            let Some((key, value_str)) = self.header_entry(py, pos, name, value)? else {
                continue;
            };
            let kp = key.as_ptr();
            forwarding |= kp == self.keys.forwarded.as_ptr()
                || kp == self.keys.x_forwarded_for.as_ptr()
                || kp == self.keys.x_forwarded_proto.as_ptr();
            let before = env.len();
            // SAFETY: `env`, `key` and `value_str` are live objects and the GIL is held;
            // PyDict_SetDefault returns a borrowed reference, or NULL with an exception set.
            let got =
                unsafe { ffi::PyDict_SetDefault(env.as_ptr(), key.as_ptr(), value_str.as_ptr()) };
            if got.is_null() {
                return Err(PyErr::fetch(py));
            }
            if env.len() > before {
                continue;
            }
            // The name was seen before in this request. RFC 9110 §5.3: repeated fields
            // combine into one comma-separated list; RFC 6265 §5.4: cookies with "; ".
            let key = key.bind(py);
            let prev = env
                .get_item(key)?
                .unwrap_or_else(|| self.empty.bind(py).clone().into_any());
            let sep: &[u8] = if latin1(key.as_any(), "key")? == b"HTTP_COOKIE" {
                b"; "
            } else {
                b","
            };
            let prev_bytes = latin1(&prev, "header value")?;
            let mut joined = Vec::with_capacity(prev_bytes.len() + sep.len() + value.len());
            joined.extend_from_slice(prev_bytes);
            joined.extend_from_slice(sep);
            joined.extend_from_slice(value);
            env.set_item(key, latin1_str(py, &joined)?)?;
        }
        Ok(forwarding)
    }

    /// `--forwarded-allow-ips`: from a trusted peer, the forwarding headers set
    /// `REMOTE_ADDR` and `wsgi.url_scheme` (`proxy.rs`).
    fn apply_forwarding(
        &mut self,
        py: Python<'_>,
        env: &Bound<'_, PyDict>,
        req: &Request,
    ) -> PyResult<()> {
        // A peer on a Unix socket is a local process the socket's permissions let in (a
        // proxy on the same host): trusted unless the list is empty.
        let trusted = match req.peer {
            Peer::Tcp(addr) => self.trusted.contains(addr.ip()),
            Peer::Unix => !self.trusted.is_empty(),
        };
        if !trusted {
            return Ok(());
        }
        let data = &req.data;
        let values = |name: &[u8]| -> Vec<&[u8]> {
            req.head
                .headers
                .iter()
                .filter(|h| h.name.get(data).eq_ignore_ascii_case(name))
                .map(|h| h.value.get(data))
                .collect()
        };
        let f = super::proxy::resolve(
            &self.trusted,
            &values(b"forwarded"),
            &values(b"x-forwarded-for"),
            &values(b"x-forwarded-proto"),
        );
        if let Some(client) = f.client {
            let s = PyString::new(py, &client);
            env.set_item(self.keys.remote_addr.bind(py), &s)?;
            env.set_item(self.keys.remote_host.bind(py), s)?;
            self.forwarded_client = Some(client);
        }
        if f.https == Some(true) {
            env.set_item(self.keys.url_scheme.bind(py), self.https.bind(py))?;
        }
        Ok(())
    }

    /// The environ key and value for the header at `pos`, from the previous request's
    /// header at that position when the bytes match; `None` for a dropped name.
    fn header_entry(
        &mut self,
        py: Python<'_>,
        pos: usize,
        name: &[u8],
        value: &[u8],
    ) -> PyResult<Option<(Py<PyString>, Py<PyString>)>> {
        if pos >= RECENT_HEADER_POSITIONS {
            let Some(key) = self.header_key(py, name) else {
                return Ok(None);
            };
            return Ok(Some((key, latin1_str(py, value)?.unbind())));
        }
        if pos >= self.recent.len() {
            self.recent.resize_with(pos + 1, Recent::default);
        }
        if self.recent[pos].name != name {
            let key = self.header_key(py, name);
            let r = &mut self.recent[pos];
            r.name.clear();
            r.name.extend_from_slice(name);
            r.key = key;
        }
        let r = &mut self.recent[pos];
        let Some(key) = &r.key else {
            return Ok(None);
        };
        let key = key.clone_ref(py);
        let s = r
            .value
            .get(py, value, || Ok(latin1_str(py, value)?.unbind()))?;
        Ok(Some((key, s)))
    }

    /// The environ key for a header name: `CONTENT_TYPE`, `CONTENT_LENGTH`, else `HTTP_`
    /// and the name upper-cased with `-` as `_`. Names containing `_` are dropped: after
    /// the mapping they would be indistinguishable from the `-` form, which lets a client
    /// smuggle a header past a proxy that filters it (gunicorn and nginx drop them too).
    fn header_key(&mut self, py: Python<'_>, name: &[u8]) -> Option<Py<PyString>> {
        if let Some(k) = self.header_keys.get(name) {
            return k.as_ref().map(|k| k.clone_ref(py));
        }
        let key = if name.contains(&b'_') {
            None
        } else if name.eq_ignore_ascii_case(b"content-type") {
            Some(PyString::intern(py, "CONTENT_TYPE").unbind())
        } else if name.eq_ignore_ascii_case(b"content-length") {
            Some(PyString::intern(py, "CONTENT_LENGTH").unbind())
        } else {
            let mut k = Vec::with_capacity(5 + name.len());
            k.extend_from_slice(b"HTTP_");
            k.extend(name.iter().map(|&b| {
                if b == b'-' {
                    b'_'
                } else {
                    b.to_ascii_uppercase()
                }
            }));
            // Header names are tokens (ASCII), so this cannot fail.
            latin1_str(py, &k).ok().map(|s| {
                let s = s.unbind();
                // SAFETY: `s` is a str we own; interning replaces it with the canonical
                // object (or keeps it), so equal keys share one object and hash once.
                unsafe {
                    let mut p = s.into_ptr();
                    ffi::PyUnicode_InternInPlace(&mut p);
                    Bound::from_owned_ptr(py, p)
                        .cast_into_unchecked::<PyString>()
                        .unbind()
                }
            })
        };
        if self.header_keys.len() < HEADER_KEY_CACHE_ENTRIES {
            self.header_keys
                .insert(name.into(), key.as_ref().map(|k| k.clone_ref(py)));
        }
        key
    }
}

fn fmt_port(port: u16, buf: &mut [u8; 5]) -> &[u8] {
    let mut n = port;
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}
