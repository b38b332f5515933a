//! HTTPS (`--certfile`, `--keyfile`, `--ca-certs`, `--client-cert`, `--insecure-bind`),
//! tried with real clients: curl and Python's `ssl`. Certificates are made per test with
//! the `openssl` command (a CA, two server certificates it signs, a client certificate it
//! signs, and a client certificate nobody trusts). The app is tests/apps/tls_app.py.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

const PROMPT: Duration = Duration::from_secs(20);

/// Why these tests cannot run here, if they cannot.
fn missing_tools() -> Option<String> {
    for (tool, arg) in [
        ("openssl", "version"),
        ("curl", "--version"),
        ("python3", "-V"),
    ] {
        let ok = Command::new(tool)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Some(format!("`{tool}`"));
        }
    }
    None
}

macro_rules! needs_tools {
    () => {
        if let Some(why) = missing_tools() {
            require(false, &why);
            return;
        }
    };
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("cannot run a tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The test certificates, in a temporary directory.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let pki = Pki {
            dir: TempDir::new(name),
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        run(Command::new("openssl")
            .current_dir(&pki.dir.path)
            .args(["req", "-x509"])
            .args(ec)
            .args(["-keyout", "ca.key", "-out", "ca.pem", "-days", "2"])
            .args(["-subj", "/CN=m0serve test CA"]));
        std::fs::write(
            pki.path("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(pki.path("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        pki.signed("server", "/CN=localhost", "server.ext", "ca");
        pki.signed("server2", "/CN=localhost/O=second", "server.ext", "ca");
        pki.signed(
            "client",
            "/C=FR/O=Example, Inc./CN=client one",
            "client.ext",
            "ca",
        );
        // A multi-valued RDN and attributes outside RFC 4514's short list.
        pki.signed(
            "client2",
            "/serialNumber=123/OU=y+CN=x/title=Dr/GN=Ann",
            "client.ext",
            "ca",
        );
        // A client certificate signed by nobody the server trusts.
        run(Command::new("openssl")
            .current_dir(&pki.dir.path)
            .args(["req", "-x509"])
            .args(ec)
            .args(["-keyout", "rogue.key", "-out", "rogue.pem", "-days", "2"])
            .args([
                "-subj",
                "/CN=rogue",
                "-addext",
                "extendedKeyUsage=clientAuth",
            ]));
        run(Command::new("openssl")
            .current_dir(&pki.dir.path)
            .args([
                "pkey",
                "-in",
                "server.key",
                "-aes256",
                "-passout",
                "pass:secret",
            ])
            .args(["-out", "encrypted.key"]));
        pki
    }

    /// `NAME.key` and `NAME.pem`, with `subject`, signed by `ca`.
    fn signed(&self, name: &str, subject: &str, ext: &str, ca: &str) {
        run(Command::new("openssl")
            .current_dir(&self.dir.path)
            .args([
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ])
            .args([
                "-nodes",
                "-multivalue-rdn",
                "-keyout",
                &format!("{name}.key"),
            ])
            .args(["-out", &format!("{name}.csr"), "-subj", subject]));
        run(Command::new("openssl")
            .current_dir(&self.dir.path)
            .args(["x509", "-req", "-in", &format!("{name}.csr")])
            .args(["-CA", &format!("{ca}.pem"), "-CAkey", &format!("{ca}.key")])
            .args(["-CAcreateserial", "-days", "2", "-extfile", ext])
            .args(["-out", &format!("{name}.pem")]));
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path.join(file)
    }

    fn arg(&self, file: &str) -> String {
        self.path(file).to_string_lossy().into_owned()
    }

    /// `--certfile` and `--keyfile` for `live.pem` and `live.key`, copies of the server's
    /// that a test may overwrite.
    fn live_args(&self) -> Vec<String> {
        std::fs::copy(self.path("server.pem"), self.path("live.pem")).unwrap();
        std::fs::copy(self.path("server.key"), self.path("live.key")).unwrap();
        self.server_args("live")
    }

    /// `--certfile` and `--keyfile` for `name`.
    fn server_args(&self, name: &str) -> Vec<String> {
        vec![
            "--certfile".into(),
            self.arg(&format!("{name}.pem")),
            "--keyfile".into(),
            self.arg(&format!("{name}.key")),
        ]
    }

    /// The subject of `name`'s certificate as openssl prints it in RFC 2253 form.
    fn subject(&self, name: &str) -> String {
        let out = run(Command::new("openssl")
            .current_dir(&self.dir.path)
            .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in"])
            .arg(format!("{name}.pem")));
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .trim_start_matches("subject=")
            .to_string()
    }
}

/// A TLS server of tls_app.py with `args`, on 127.0.0.1.
fn tls_server(pki: &Pki, app: &str, extra: &[&str]) -> Server {
    let mut args: Vec<String> = pki.server_args("server");
    args.extend(["-b".to_string(), "127.0.0.1:0".to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::builder(app).without_port_flag().args(&argv).start()
}

fn https_addr(s: &Server) -> SocketAddr {
    find_listening_addr_of(&s.log_text(), "https").expect("no https listener logged")
}

/// curl's answer: (exit code, HTTP status, body).
fn curl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (
        out.status.code().unwrap_or(-1),
        code.to_string(),
        format!("{body}{}", String::from_utf8_lossy(&out.stderr)),
    )
}

/// What every script below may use: `read_all(sock, got)`, which appends what `sock`
/// sends until its end to the list `got` (so a reset still leaves what came before it).
const PY_PRELUDE: &str = r#"
def read_all(sock, got):
    while True:
        b = sock.recv(65536)
        if not b:
            return b"".join(got)
        got.append(b)
"#;

/// Runs a Python script (standard library only) with `args`; its standard output, parsed
/// as JSON.
fn python(script: &str, args: &[&str]) -> Json {
    let out = Command::new("python3")
        .arg("-c")
        .arg(format!("{PY_PRELUDE}{script}"))
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Json::parse(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

const PY_PROBE: &str = r#"
import json, socket, ssl, sys
port, ca = int(sys.argv[1]), sys.argv[2]
out = {}
def attempt(name, **kw):
    ctx = ssl.create_default_context(cafile=ca)
    for k, v in kw.items():
        setattr(ctx, k, v)
    if name == "alpn":
        ctx.set_alpn_protocols(["h2", "http/1.1"])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                data = read_all(s, [])
                out[name] = {"ok": True, "version": s.version(), "alpn": s.selected_alpn_protocol(),
                             "status": data.split(b" ")[1].decode()}
    except (ssl.SSLError, OSError) as e:
        out[name] = {"ok": False, "error": str(e)}
attempt("default")
attempt("alpn")
attempt("tls12", maximum_version=ssl.TLSVersion.TLSv1_2)
attempt("tls13", minimum_version=ssl.TLSVersion.TLSv1_3)
attempt("tls11", minimum_version=ssl.TLSVersion.TLSv1, maximum_version=ssl.TLSVersion.TLSv1_1)
print(json.dumps(out))
"#;

#[test]
fn https_with_curl_and_python_versions_alpn_and_a_plain_port_beside() {
    needs_tools!();
    let pki = Pki::new("tls-basic");
    let s = tls_server(
        &pki,
        "tls_app:app",
        &["--insecure-bind", "127.0.0.1:0", "--metrics-port", "0"],
    );
    let tls = https_addr(&s);
    let plain = find_listening_addr_of(&s.log_text(), "http").unwrap();
    let ca = pki.arg("ca.pem");
    let url = format!("https://localhost:{}/", tls.port());
    let (rc, code, body) = curl(&["--cacert", &ca, &url]);
    assert_eq!((rc, code.as_str()), (0, "200"), "{body}");
    let j = Json::parse(&body).unwrap();
    assert_eq!(j["scheme"].as_str(), Some("https"), "{body}");
    assert!(j["dn"].is_null(), "{body}");
    // The plain port beside it.
    let (rc, code, body) = curl(&[&format!("http://127.0.0.1:{}/", plain.port())]);
    assert_eq!((rc, code.as_str()), (0, "200"), "{body}");
    assert_eq!(Json::parse(&body).unwrap()["scheme"].as_str(), Some("http"));
    // Plain HTTP to the TLS port: a plain-text 400 that says why, then the close.
    let (_, code, body) = curl(&[&format!("http://127.0.0.1:{}/", tls.port())]);
    assert_eq!(code, "400", "{body}");
    assert!(body.contains("This port speaks HTTPS"), "{body}");
    // Python's ssl: TLS 1.3 and 1.2, ALPN http/1.1, and 1.1 refused.
    let p = python(PY_PROBE, &[&tls.port().to_string(), &ca]);
    assert_eq!(p["default"]["version"].as_str(), Some("TLSv1.3"), "{p:?}");
    assert_eq!(p["default"]["status"].as_str(), Some("200"), "{p:?}");
    assert_eq!(p["alpn"]["alpn"].as_str(), Some("http/1.1"), "{p:?}");
    assert_eq!(p["tls12"]["version"].as_str(), Some("TLSv1.2"), "{p:?}");
    assert_eq!(p["tls12"]["status"].as_str(), Some("200"), "{p:?}");
    assert_eq!(p["tls13"]["version"].as_str(), Some("TLSv1.3"), "{p:?}");
    assert_eq!(p["tls11"]["ok"].as_bool(), Some(false), "{p:?}");
    assert!(s.wait_for_log("metrics on http://", PROMPT));
    let log = s.log_text();
    assert!(
        !log.contains("[ERROR]") && !log.contains("[WARNING]"),
        "a refused client was logged above debug:\n{log}"
    );
    // Counted: the plain request and the TLS 1.1 handshake.
    let at = &log[log.find("metrics on http://").unwrap() + "metrics on ".len()..];
    let metrics_url = at.split_whitespace().next().unwrap();
    let (_, _, text) = curl(&[metrics_url]);
    for reason in ["tls_plain_http", "tls_handshake"] {
        let line = format!("m0serve_connections_refused_total{{reason=\"{reason}\"}} 1\n");
        assert!(text.contains(&line), "{line}{text}");
    }
}

const PY_BODIES: &str = r#"
import hashlib, http.client, json, ssl, sys
port, ca = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=ca)
c = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=30)
def pattern(n):
    block = bytes(range(256)) * 256
    return block * (n // len(block)) + block[: n % len(block)]
out = {}
for route, n in [("big", 5_000_000), ("file", 3_000_001), ("big", 1)]:
    c.request("GET", "/%s?n=%d" % (route, n))
    r = c.getresponse()
    body = r.read()
    out["%s-%d" % (route, n)] = body == pattern(n) and r.status == 200
upload = pattern(4_000_003)
c.request("POST", "/upload", body=upload, headers={"Content-Type": "application/octet-stream"})
out["upload"] = json.loads(c.getresponse().read())["sha256"] == hashlib.sha256(upload).hexdigest()
def chunks():
    for i in range(0, len(upload), 100_000):
        yield upload[i:i + 100_000]
c.request("POST", "/upload", body=chunks(), encode_chunked=True)
out["upload-chunked"] = json.loads(c.getresponse().read())["sha256"] == hashlib.sha256(upload).hexdigest()
print(json.dumps(out))
"#;

#[test]
fn streamed_file_and_uploaded_bodies_cross_tls_whole_on_one_connection() {
    needs_tools!();
    let pki = Pki::new("tls-bodies");
    for threads in ["1", "0"] {
        let s = tls_server(&pki, "tls_app:app", &["--blocking-threads", threads]);
        let p = python(
            PY_BODIES,
            &[&https_addr(&s).port().to_string(), &pki.arg("ca.pem")],
        );
        for key in [
            "big-5000000",
            "file-3000001",
            "big-1",
            "upload",
            "upload-chunked",
        ] {
            assert_eq!(
                p[key].as_bool(),
                Some(true),
                "{key}, --blocking-threads {threads}: {p:?}"
            );
        }
    }
}

#[test]
fn a_required_client_certificate_is_checked_and_its_subject_reaches_the_app() {
    needs_tools!();
    let pki = Pki::new("tls-mtls");
    let ca = pki.arg("ca.pem");
    let expected_dn = pki.subject("client");
    assert_eq!(expected_dn, "CN=client one,O=Example\\, Inc.,C=FR");
    for mode in ["required", "optional"] {
        let s = tls_server(
            &pki,
            "tls_app:app",
            &[
                "--ca-certs",
                &ca,
                "--client-cert",
                mode,
                "--log-level",
                "debug",
            ],
        );
        let url = format!("https://localhost:{}/", https_addr(&s).port());
        let with = |name: &str| {
            curl(&[
                "--cacert",
                &ca,
                "--cert",
                &pki.arg(&format!("{name}.pem")),
                "--key",
                &pki.arg(&format!("{name}.key")),
                &url,
            ])
        };
        let (rc, code, body) = with("client");
        assert_eq!((rc, code.as_str()), (0, "200"), "{mode}: {body}");
        assert_eq!(
            Json::parse(&body).unwrap()["dn"].as_str(),
            Some(expected_dn.as_str()),
            "{mode}"
        );
        let (rc, code, body) = with("client2");
        assert_eq!((rc, code.as_str()), (0, "200"), "{mode}: {body}");
        assert_eq!(
            Json::parse(&body).unwrap()["dn"].as_str(),
            Some(pki.subject("client2").as_str()),
            "{mode}"
        );
        let (rc, code, body) = with("rogue");
        assert_ne!(
            rc, 0,
            "{mode}: a certificate nobody trusts was accepted: {code} {body}"
        );
        let (rc, code, body) = curl(&["--cacert", &ca, &url]);
        if mode == "required" {
            assert_ne!(rc, 0, "served without a client certificate: {code} {body}");
        } else {
            assert_eq!((rc, code.as_str()), (0, "200"), "{body}");
            assert!(Json::parse(&body).unwrap()["dn"].is_null(), "{body}");
        }
        assert!(
            s.wait_for_log("[DEBUG] [m0s-loop] TLS handshake from", PROMPT),
            "{mode}: the refused handshakes were not logged at debug\n{}",
            s.log_text()
        );
    }
}

#[test]
fn bad_tls_settings_stop_the_start_with_a_clear_message() {
    needs_tools!();
    let pki = Pki::new("tls-bad");
    let (cert, key) = (pki.arg("server.pem"), pki.arg("server.key"));
    let other_key = pki.arg("server2.key");
    let enc = pki.arg("encrypted.key");
    let ca = pki.arg("ca.pem");
    let missing = pki.arg("missing.pem");
    for (args, says) in [
        (
            vec!["--certfile", &cert, "--keyfile", &enc],
            "the key is encrypted with a passphrase",
        ),
        (
            vec!["--certfile", &cert, "--keyfile", &other_key],
            "--keyfile",
        ),
        (
            vec!["--certfile", &missing, "--keyfile", &key],
            "missing.pem",
        ),
        (
            vec!["--certfile", &key, "--keyfile", &key],
            "no certificate in it",
        ),
        (
            vec!["--certfile", &cert, "--keyfile", &cert],
            "no private key in it",
        ),
        (vec!["--certfile", &cert], "--certfile needs --keyfile"),
        (
            vec!["--client-cert", "required"],
            "need --certfile and --keyfile",
        ),
        (
            vec![
                "--certfile",
                &cert,
                "--keyfile",
                &key,
                "--client-cert",
                "optional",
            ],
            "--client-cert needs --ca-certs",
        ),
        (
            vec![
                "--certfile",
                &cert,
                "--keyfile",
                &key,
                "--ca-certs",
                &ca,
                "--client-cert",
                "none",
            ],
            "given with --client-cert none",
        ),
        (vec!["--insecure-bind", "127.0.0.1:0"], "without --certfile"),
        (
            vec![
                "--certfile",
                &cert,
                "--keyfile",
                &key,
                "--uds",
                "/tmp/x.sock",
            ],
            "no TCP address to serve HTTPS on",
        ),
    ] {
        let mut all = vec!["tls_app:app", "--check-config"];
        all.extend_from_slice(&args);
        let out = run_to_exit(&all, &[], PROMPT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    // And the same refusal at a real start, before any worker.
    let out = run_to_exit(
        &[
            "tls_app:app",
            "--certfile",
            &cert,
            "--keyfile",
            &enc,
            "--port",
            "0",
        ],
        &[],
        PROMPT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(!out.stderr.contains("importing"), "{}", out.stderr);
}

const PY_LOAD: &str = r#"
import http.client, json, ssl, sys, threading, time
port, ca, seconds, n = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
ctx = ssl.create_default_context(cafile=ca)
stop = time.time() + seconds
tally = [{"sent": 0, "answered": 0, "lost": []} for _ in range(n)]
def client(t):
    c = None
    while time.time() < stop:
        if c is None:
            c = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=20)
        t["sent"] += 1
        try:
            c.request("GET", "/count")
            r = c.getresponse()
            r.read()
            if r.status == 200:
                t["answered"] += 1
            else:
                t["lost"].append("status %d" % r.status)
            if r.will_close:
                c.close()
                c = None
        except Exception as e:
            t["lost"].append(repr(e))
            c.close()
            c = None
threads = [threading.Thread(target=client, args=(t,)) for t in tally]
for th in threads:
    th.start()
for th in threads:
    th.join()
print(json.dumps({"sent": sum(t["sent"] for t in tally),
                  "answered": sum(t["answered"] for t in tally),
                  "lost": [l for t in tally for l in t["lost"]][:5]}))
"#;

const PY_CERT: &str = r#"
import json, ssl, sys
print(json.dumps(ssl.get_server_certificate(("127.0.0.1", int(sys.argv[1])))))
"#;

/// The certificate in a PEM file, as Python prints a peer's (one PEM block).
fn pem_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

fn same_pem(a: &str, b: &str) -> bool {
    let body = |s: &str| -> String { s.lines().filter(|l| !l.starts_with("-----")).collect() };
    body(a) == body(b)
}

#[test]
fn a_certificate_swapped_and_sighup_under_keep_alive_load_fails_no_request() {
    needs_tools!();
    let pki = Pki::new("tls-swap");
    let tmp = TempDir::new("tls-swap-count");
    let count = tmp.file("count");
    // The files the server is given, overwritten by the swap.
    let live = pki.live_args();
    let s = Server::builder("regress:app")
        .without_port_flag()
        .args(&live.iter().map(String::as_str).collect::<Vec<_>>())
        .args(&["-b", "127.0.0.1:0", "--workers", "2"])
        .env("M0TEST_COUNT_FILE", &count)
        .start();
    s.wait_for_workers(2, PROMPT);
    let port = https_addr(&s).port().to_string();
    let before = python(PY_CERT, &[&port]);
    assert!(same_pem(
        before.as_str().unwrap(),
        &pem_of(&pki.path("server.pem"))
    ));
    let ca = pki.arg("ca.pem");
    let load = {
        let (port, ca) = (port.clone(), ca.clone());
        std::thread::spawn(move || python(PY_LOAD, &[&port, &ca, "5", "6"]))
    };
    std::thread::sleep(Duration::from_millis(1200));
    std::fs::copy(pki.path("server2.pem"), pki.path("live.pem")).unwrap();
    std::fs::copy(pki.path("server2.key"), pki.path("live.key")).unwrap();
    s.signal(libc::SIGHUP);
    assert!(
        s.wait_for_log("reload done", PROMPT),
        "the reload did not finish\n{}",
        s.log_text()
    );
    let after = python(PY_CERT, &[&port]);
    let tally = load.join().unwrap();
    assert!(
        same_pem(after.as_str().unwrap(), &pem_of(&pki.path("server2.pem"))),
        "new connections after the SIGHUP still get the old certificate"
    );
    let sent = tally["sent"].as_f64().unwrap() as usize;
    let answered = tally["answered"].as_f64().unwrap() as usize;
    assert_eq!(
        answered,
        sent,
        "{} requests failed across the swap: {:?}\n{}",
        sent - answered,
        tally["lost"],
        s.log_text()
    );
    let ran = std::fs::metadata(&count).map_or(0, |m| m.len() as usize);
    assert_eq!(
        ran, answered,
        "the app ran {ran} requests, clients got {answered}"
    );
    assert!(sent > 200, "only {sent} requests under load");
}

const PY_PROXY_TLS: &str = r#"
import json, socket, ssl, sys
port, ca = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=ca)
raw = socket.create_connection(("127.0.0.1", port), timeout=10)
raw.sendall(b"PROXY TCP4 203.0.113.7 10.0.0.1 4711 443\r\n")
with ctx.wrap_socket(raw, server_hostname="localhost") as s:
    s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    data = read_all(s, [])
print(data.split(b"\r\n\r\n", 1)[1].decode())
"#;

#[test]
fn a_proxy_protocol_header_comes_before_the_tls_handshake() {
    needs_tools!();
    let pki = Pki::new("tls-proxy");
    let s = tls_server(&pki, "tls_app:app", &["--proxy-protocol"]);
    let j = python(
        PY_PROXY_TLS,
        &[&https_addr(&s).port().to_string(), &pki.arg("ca.pem")],
    );
    assert_eq!(j["remote_addr"].as_str(), Some("203.0.113.7"), "{j:?}");
    assert_eq!(j["remote_port"].as_str(), Some("4711"), "{j:?}");
    assert_eq!(j["scheme"].as_str(), Some("https"), "{j:?}");
}

const PY_ENDINGS: &str = r#"
import json, socket, ssl, sys, time
port, ca = int(sys.argv[1]), sys.argv[2]
out = {}
# An HTTP/1.0 body delimited by the close, read slowly through a small buffer: it must end
# with close_notify (a ragged end would read as a truncation).
ctx = ssl.create_default_context(cafile=ca)
raw = socket.create_connection(("127.0.0.1", port), timeout=20)
raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
s = ctx.wrap_socket(raw, server_hostname="localhost", suppress_ragged_eofs=False)
s.sendall(b"GET /big?n=3000000 HTTP/1.0\r\nHost: localhost\r\n\r\n")
time.sleep(0.5)
try:
    data = read_all(s, [])
    out["http10"] = len(data.split(b"\r\n\r\n", 1)[1])
except ssl.SSLEOFError as e:
    out["http10"] = "ragged end: " + str(e)
# Plain HTTP with a body to the TLS port: the 400, then a clean end (no reset).
p = socket.create_connection(("127.0.0.1", port), timeout=20)
p.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n" + b"x" * 200000)
parts = []
try:
    out["plain"] = read_all(p, parts).decode("latin-1")
except ConnectionResetError:
    out["plain"] = "reset after " + repr(b"".join(parts)[:60])
print(json.dumps(out))
"#;

#[test]
fn a_close_delimited_body_ends_with_close_notify_and_plain_http_gets_its_400_whole() {
    needs_tools!();
    let pki = Pki::new("tls-endings");
    let s = tls_server(&pki, "tls_app:app", &[]);
    let p = python(
        PY_ENDINGS,
        &[&https_addr(&s).port().to_string(), &pki.arg("ca.pem")],
    );
    assert_eq!(p["http10"].as_f64(), Some(3_000_000.0), "{p:?}");
    let plain = p["plain"].as_str().unwrap();
    assert!(
        plain.starts_with("HTTP/1.1 400 ") && plain.contains("This port speaks HTTPS"),
        "{plain}"
    );
}

#[test]
fn one_worker_serves_https_on_tcp_and_plain_http_on_a_unix_socket() {
    needs_tools!();
    use std::io::{Read, Write};
    let pki = Pki::new("tls-uds");
    let sock = pki.path("plain.sock");
    let s = tls_server(
        &pki,
        "tls_app:app",
        &["-b", &format!("unix:{}", sock.display())],
    );
    let url = format!("https://localhost:{}/", https_addr(&s).port());
    let (rc, code, body) = curl(&["--cacert", &pki.arg("ca.pem"), &url]);
    assert_eq!((rc, code.as_str()), (0, "200"), "{body}");
    assert_eq!(
        Json::parse(&body).unwrap()["scheme"].as_str(),
        Some("https")
    );
    let mut u = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    u.set_read_timeout(Some(PROMPT)).unwrap();
    u.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    u.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    let j = Json::parse(out.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(j["scheme"].as_str(), Some("http"), "{out}");
    assert!(
        s.log_text()
            .contains(&format!("listening on unix:{}", sock.display())),
        "{}",
        s.log_text()
    );
}

#[test]
fn check_config_names_the_https_addresses() {
    needs_tools!();
    let pki = Pki::new("tls-check");
    let (cert, key) = (pki.arg("server.pem"), pki.arg("server.key"));
    let out = run_to_exit(
        &[
            "tls_app:app",
            "--check-config",
            "--certfile",
            &cert,
            "--keyfile",
            &key,
            "--bind",
            "127.0.0.1:8443",
            "--insecure-bind",
            "127.0.0.1:8080",
        ],
        &[],
        PROMPT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("would listen on https://127.0.0.1:8443, http://127.0.0.1:8080"),
        "{}",
        out.stdout
    );
}

/// Issue 40: a worker's start-up error bypassed the log format: printed as plain text (in
/// pieces, so two workers failing together wrote one merged line), even under
/// `--log-format json`. Each worker of a reload fails to read a key broken since the
/// start: every line of the log must be one whole JSON record, and the error one of them.
#[test]
fn a_workers_start_up_error_is_a_whole_record_in_the_log_format() {
    needs_tools!();
    let pki = Pki::new("tls-worker-error");
    let live = pki.live_args();
    let s = Server::builder("hello:app")
        .without_port_flag()
        .args(&live.iter().map(String::as_str).collect::<Vec<_>>())
        .args(&[
            "-b",
            "127.0.0.1:0",
            "--workers",
            "2",
            "--log-format",
            "json",
        ])
        .start();
    s.wait_for_workers(2, PROMPT);
    std::fs::write(pki.path("live.key"), "not a key\n").unwrap();
    s.signal(libc::SIGHUP);
    assert!(
        s.wait_for_log("failed to boot", PROMPT),
        "no worker failed\n{}",
        s.log_text()
    );
    let log = s.log_text();
    let mut errors = 0;
    for line in log.lines().filter(|l| !l.is_empty()) {
        let j = Json::parse(line).unwrap_or_else(|e| panic!("not a JSON record: {line:?} ({e:?})"));
        let message = j["message"].as_str().unwrap_or_default();
        if j["level"].as_str() == Some("error") && message.starts_with("--keyfile ") {
            assert!(message.contains("no private key in it"), "{line}");
            errors += 1;
        }
    }
    assert!(errors >= 2, "{errors} keyfile errors in\n{log}");
}

/// rustls refuses X.509 version 1 client certificates (which `openssl x509 -req` makes
/// without an extension): said once at error level, with the fix, not only at debug.
#[test]
fn a_version_1_client_certificate_is_named_once_at_error_level() {
    needs_tools!();
    let pki = Pki::new("tls-v1-client");
    run(Command::new("openssl")
        .current_dir(&pki.dir.path)
        .args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args([
            "-nodes", "-keyout", "v1.key", "-out", "v1.csr", "-subj", "/CN=old",
        ]));
    run(Command::new("openssl")
        .current_dir(&pki.dir.path)
        .args([
            "x509", "-req", "-in", "v1.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        ])
        .args(["-CAcreateserial", "-days", "2", "-out", "v1.pem"]));
    let ca = pki.arg("ca.pem");
    let s = tls_server(&pki, "tls_app:app", &["--ca-certs", &ca]);
    let url = format!("https://localhost:{}/", https_addr(&s).port());
    for _ in 0..2 {
        let (rc, code, _) = curl(&[
            "--cacert",
            &ca,
            "--cert",
            &pki.arg("v1.pem"),
            "--key",
            &pki.arg("v1.key"),
            &url,
        ]);
        assert_ne!(rc, 0, "a version 1 certificate was accepted: {code}");
    }
    assert!(
        s.wait_for_log("X.509 version 1", PROMPT),
        "{}",
        s.log_text()
    );
    let log = s.log_text();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("X.509 version 1"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains("[ERROR]") && said[0].contains("version 3"),
        "{log}"
    );
}

#[test]
fn a_static_file_crosses_tls_whole_and_in_range() {
    needs_tools!();
    let pki = Pki::new("tls-static");
    let dir = TempDir::new("tls-static-files");
    let data: Vec<u8> = (0..3_000_001u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(dir.path.join("big.bin"), &data).unwrap();
    let map = format!("/static={}", dir.path.display());
    let s = tls_server(&pki, "tls_app:app", &["--static-map", &map]);
    let url = format!("https://localhost:{}/static/big.bin", https_addr(&s).port());
    let out = dir.path.join("got.bin");
    let (code, status, body) = curl(&[
        "--cacert",
        &pki.arg("ca.pem"),
        "--resolve",
        &format!("localhost:{}:127.0.0.1", https_addr(&s).port()),
        "-o",
        out.to_str().unwrap(),
        &url,
    ]);
    assert_eq!((code, status.as_str()), (0, "200"), "{body}");
    assert!(std::fs::read(&out).unwrap() == data, "the file differs");
    let (code, status, body) = curl(&[
        "--cacert",
        &pki.arg("ca.pem"),
        "--resolve",
        &format!("localhost:{}:127.0.0.1", https_addr(&s).port()),
        "-r",
        "1000000-1000009",
        "-o",
        out.to_str().unwrap(),
        &url,
    ]);
    assert_eq!((code, status.as_str()), (0, "206"), "{body}");
    assert_eq!(std::fs::read(&out).unwrap(), &data[1_000_000..1_000_010]);
}
