//! Real frameworks from PyPI served by the cargo-built binary, through real HTTP requests:
//! Flask (tests/apps/flask_app.py), a minimal Django project (tests/apps/djangoproj/) and
//! Werkzeug's own request parsing of chunked uploads (tests/apps/werkzeug_app.py). Each
//! runs with one handler thread and inline (`--blocking-threads 0`).
//!
//! The packages come from the virtualenv scripts/test.sh prepares (`--venv
//! $M0S_TEST_VENV`); without M0S_TEST_VENV every test here is skipped (`common::require`).

mod common;
mod venvs;

use std::path::Path;
use std::time::Duration;

use common::*;
use venvs::*;

/// The server shapes each framework runs under.
const SHAPES: [(&str, &[&str]); 2] = [
    ("one handler thread", &["--blocking-threads", "1"]),
    ("inline", &["--blocking-threads", "0"]),
];

/// Size of the file send_file / FileResponse serve: several wsgi.file_wrapper blocks.
const FILE_SIZE: usize = 300_000;

fn start(app: &str, venv: &Path, shape: &[&str], file: &str) -> Server {
    Server::builder(app)
        .args(&["--venv", venv.to_str().unwrap()])
        .args(shape)
        .env("M0S_SEND_FILE", file)
        .start()
}

/// A file of FILE_SIZE pseudo-random bytes in `dir`: (its path, its bytes).
fn data_file(dir: &TempDir) -> (String, Vec<u8>) {
    let path = dir.file("served.bin");
    let data = pseudo_random(0x5eed, FILE_SIZE);
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

/// A 200 response carrying exactly `data` with a Content-Length.
fn assert_whole_file(r: &Response, data: &[u8], what: &str) {
    assert_eq!(r.status, 200, "{what}: {}", r.status_line());
    assert_eq!(
        r.header("content-length"),
        Some(data.len().to_string().as_str()),
        "{what}"
    );
    assert_eq!(r.framing, Framing::ContentLength(data.len()), "{what}");
    assert!(r.body == data, "{what}: the body differs from the file");
}

#[test]
fn flask() {
    let Some(venv) = test_venv() else { return };
    let dir = TempDir::new("flask");
    let (file, data) = data_file(&dir);
    for (shape, args) in SHAPES {
        let s = start("flask_app:probed", &venv, args, &file);
        let what = |w: &str| format!("flask, {shape}: {w}");

        // Routing, URL parameters, converters, 404s.
        let r = s.get("/hello/m0serve");
        assert_eq!(r.status, 200, "{}", what("/hello"));
        assert_eq!(r.body_text(), "hello m0serve", "{}", what("/hello"));
        let j = json(&s.get("/items/42"));
        assert_eq!(j["n"].as_f64(), Some(42.0), "{}", what("/items/42"));
        assert_eq!(j["double"].as_f64(), Some(84.0), "{}", what("/items/42"));
        assert_eq!(
            s.get("/items/forty-two").status,
            404,
            "{}",
            what("int converter")
        );
        assert_eq!(
            s.get("/no/such/route").status,
            404,
            "{}",
            what("unknown route")
        );

        // JSON both ways; the app runs in the test virtualenv.
        let j = json(&s.get("/json"));
        assert_eq!(j["ok"].as_bool(), Some(true), "{}", what("GET /json"));
        assert_from_venv(&j, &venv, &what("GET /json"));
        let r = s.request(&request_with_body(
            "POST",
            "/json",
            "application/json",
            br#"{"numbers": [1, 2, 3.5], "name": "n\u00e4me"}"#,
        ));
        assert_eq!(r.header("content-type"), Some("application/json"));
        let j = json(&r);
        assert_eq!(j["sum"].as_f64(), Some(6.5), "{}", what("POST /json"));
        assert_eq!(
            j["got"]["name"].as_str(),
            Some("näme"),
            "{}",
            what("POST /json")
        );

        // An urlencoded form.
        let j = json(&s.request(&request_with_body(
            "POST",
            "/form",
            "application/x-www-form-urlencoded",
            b"name=J%C3%BCrgen+M&tag=a&tag=b%26c",
        )));
        assert_eq!(
            j["form"]["name"][0].as_str(),
            Some("Jürgen M"),
            "{}",
            what("form")
        );
        assert_eq!(j["form"]["tag"][0].as_str(), Some("a"), "{}", what("form"));
        assert_eq!(
            j["form"]["tag"][1].as_str(),
            Some("b&c"),
            "{}",
            what("form")
        );

        // A multipart upload, larger than --body-buffer-size (1M): spooled to a file.
        let upload = pseudo_random(11, 1_500_000);
        let boundary = "m0sBoundary7MA4YWxkTrZu0gW";
        let body = multipart(
            boundary,
            &[
                Part::Field("title", "Grüße & more"),
                Part::File("file", "data.bin", "application/octet-stream", &upload),
            ],
        );
        let r = s.request(&request_with_body(
            "POST",
            "/upload",
            &format!("multipart/form-data; boundary={boundary}"),
            &body,
        ));
        assert_eq!(r.status, 200, "{}: {}", what("upload"), r.body_text());
        let j = json(&r);
        assert_eq!(
            j["title"].as_str(),
            Some("Grüße & more"),
            "{}",
            what("upload")
        );
        assert_eq!(
            j["filename"].as_str(),
            Some("data.bin"),
            "{}",
            what("upload")
        );
        assert_eq!(
            j["mimetype"].as_str(),
            Some("application/octet-stream"),
            "{}",
            what("upload")
        );
        assert_eq!(
            j["size"].as_f64(),
            Some(upload.len() as f64),
            "{}",
            what("upload")
        );
        assert_eq!(
            j["sha256"].as_str(),
            Some(sha256_hex(&upload).as_str()),
            "{}",
            what("upload")
        );

        // stream_with_context: the generator reads the request while the server iterates.
        let r = s.get("/stream?n=5&word=abc");
        assert_eq!(r.status, 200, "{}", what("stream"));
        assert_eq!(r.framing, Framing::Chunked, "{}", what("stream"));
        assert_eq!(
            r.body_text(),
            "0:abc:GET\n1:abc:GET\n2:abc:GET\n3:abc:GET\n4:abc:GET\n",
            "{}",
            what("stream")
        );
        let sizes = chunk_sizes(&r.raw);
        assert!(sizes.len() >= 2, "{}: chunks {sizes:?}", what("stream"));
        let r = s.request(&request_with_body(
            "POST",
            "/stream",
            "application/x-www-form-urlencoded",
            b"n=3&word=posted",
        ));
        assert_eq!(r.framing, Framing::Chunked, "{}", what("POST stream"));
        assert_eq!(
            r.body_text(),
            "0:posted:POST\n1:posted:POST\n2:posted:POST\n",
            "{}",
            what("POST stream")
        );

        // send_file: the server's wsgi.file_wrapper, a Range, a conditional GET.
        let r = s.get("/file");
        assert_whole_file(&r, &data, &what("send_file"));
        assert_eq!(
            s.get("/_last_iterable").body_text(),
            "m0serve.FileWrapper",
            "{}",
            what("send_file should return wsgi.file_wrapper")
        );
        assert_eq!(
            r.header("accept-ranges"),
            Some("bytes"),
            "{}",
            what("send_file")
        );
        let etag = r
            .header("etag")
            .unwrap_or_else(|| panic!("{}: no ETag", what("send_file")))
            .to_string();
        let r = s.request(&get_with("/file", &["Range: bytes=1000-1999"]));
        assert_eq!(r.status, 206, "{}", what("Range"));
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes 1000-1999/{FILE_SIZE}").as_str()),
            "{}",
            what("Range")
        );
        assert_eq!(
            r.header("content-length"),
            Some("1000"),
            "{}",
            what("Range")
        );
        assert!(r.body == data[1000..2000], "{}: wrong bytes", what("Range"));
        let r = s.request(&get_with("/file", &["Range: bytes=-100"]));
        assert_eq!(r.status, 206, "{}", what("suffix Range"));
        assert!(
            r.body == data[FILE_SIZE - 100..],
            "{}",
            what("suffix Range")
        );
        let r = s.request(&get_with("/file", &[&format!("If-None-Match: {etag}")]));
        assert_eq!(r.status, 304, "{}", what("If-None-Match"));
        assert!(r.body.is_empty(), "{}", what("If-None-Match"));
    }
}

#[test]
fn django() {
    let Some(venv) = test_venv() else { return };
    let dir = TempDir::new("django");
    let (file, data) = data_file(&dir);
    for (shape, args) in SHAPES {
        let s = start("djangoproj.wsgi:probed", &venv, args, &file);
        let what = |w: &str| format!("django, {shape}: {w}");

        let r = s.get("/");
        assert_eq!(r.status, 200, "{}: {}", what("/"), s.log_text());
        assert_eq!(r.body_text(), "django ok", "{}", what("/"));

        let j = json(&s.get("/items/7/"));
        assert_eq!(j["n"].as_f64(), Some(7.0), "{}", what("/items/7/"));
        assert_eq!(j["double"].as_f64(), Some(14.0), "{}", what("/items/7/"));
        assert_from_venv(&j, &venv, &what("/items/7/"));

        // A POST body, echoed with its length (the view is csrf_exempt).
        let body: Vec<u8> = b"bytes \x00\x01 and \xff, "
            .iter()
            .copied()
            .cycle()
            .take(40_000)
            .collect();
        let r = s.request(&request_with_body(
            "POST",
            "/echo/",
            "application/octet-stream",
            &body,
        ));
        assert_eq!(r.status, 200, "{}: {}", what("echo"), r.body_text());
        let j = json(&r);
        assert_eq!(j["method"].as_str(), Some("POST"), "{}", what("echo"));
        assert_eq!(
            j["length"].as_f64(),
            Some(body.len() as f64),
            "{}",
            what("echo")
        );
        let latin1: String = body.iter().map(|&b| b as char).collect();
        assert_eq!(
            j["body"].as_str(),
            Some(latin1.as_str()),
            "{}",
            what("echo")
        );
        assert_eq!(
            j["content_type"].as_str(),
            Some("application/octet-stream"),
            "{}",
            what("echo")
        );

        // The CSRF middleware is on: a POST without a token to a view that is not exempt.
        let r = s.request(&request_with_body(
            "POST",
            "/protected/",
            "text/plain",
            b"x",
        ));
        assert_eq!(r.status, 403, "{}", what("CSRF"));

        // StreamingHttpResponse: chunked, several chunks.
        let r = s.get("/stream/?n=4&word=dj");
        assert_eq!(r.status, 200, "{}", what("stream"));
        assert_eq!(r.framing, Framing::Chunked, "{}", what("stream"));
        assert_eq!(
            r.body_text(),
            "0:dj\n1:dj\n2:dj\n3:dj\n",
            "{}",
            what("stream")
        );
        let sizes = chunk_sizes(&r.raw);
        assert!(sizes.len() >= 2, "{}: chunks {sizes:?}", what("stream"));

        // FileResponse: Django hands the server wsgi.file_wrapper.
        let r = s.get("/file/");
        assert_whole_file(&r, &data, &what("FileResponse"));
        assert_eq!(
            s.get("/_last_iterable").body_text(),
            "m0serve.FileWrapper",
            "{}",
            what("FileResponse should become wsgi.file_wrapper")
        );

        // DEBUG is off: the plain 404 page; a host not in ALLOWED_HOSTS is a 400.
        let r = s.get("/missing/");
        assert_eq!(r.status, 404, "{}", what("404"));
        assert!(
            !r.body_text().contains("Traceback"),
            "{}: {}",
            what("404"),
            r.body_text()
        );
        let r = s.request(b"GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n");
        assert_eq!(r.status, 400, "{}", what("ALLOWED_HOSTS"));
    }
}

/// Sends a chunked POST (`pieces`, from `chunked_pieces`) one chunk at a time with a short
/// pause, so the server sees the body arrive in several reads; the response.
fn chunked_post(s: &Server, target: &str, content_type: &str, pieces: &[Vec<u8>]) -> Response {
    let mut c = s.connect();
    c.send(
        format!(
            "POST {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
             Content-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        .as_bytes(),
    );
    for p in pieces {
        c.send(p);
        std::thread::sleep(Duration::from_millis(15));
    }
    c.read_response()
}

#[test]
fn werkzeug_parses_chunked_uploads() {
    let Some(venv) = test_venv() else { return };
    let dir = TempDir::new("werkzeug");
    let (file, _) = data_file(&dir);
    for (shape, args) in SHAPES {
        let s = start("werkzeug_app:app", &venv, args, &file);
        let what = |w: &str| format!("werkzeug, {shape}: {w}");

        // Raw bytes: request.get_data() reads to the end of the chunked body.
        let body = pseudo_random(3, 200_000);
        let r = chunked_post(
            &s,
            "/raw",
            "application/octet-stream",
            &chunked_pieces(&body, 7),
        );
        assert_eq!(r.status, 200, "{}: {}", what("raw"), r.body_text());
        let j = json(&r);
        assert!(j["content_length"].is_null(), "{}: {j:?}", what("raw"));
        assert_eq!(
            j["transfer_encoding"].as_str(),
            Some("chunked"),
            "{}",
            what("raw")
        );
        assert_eq!(
            j["body"]["size"].as_f64(),
            Some(body.len() as f64),
            "{}",
            what("raw")
        );
        assert_eq!(
            j["body"]["sha256"].as_str(),
            Some(sha256_hex(&body).as_str()),
            "{}",
            what("raw")
        );

        // An urlencoded form, chunked.
        let r = chunked_post(
            &s,
            "/form",
            "application/x-www-form-urlencoded",
            &chunked_pieces(b"a=1&b=two%20words&b=3", 3),
        );
        let j = json(&r);
        assert_eq!(j["form"]["a"][0].as_str(), Some("1"), "{}", what("form"));
        assert_eq!(
            j["form"]["b"][0].as_str(),
            Some("two words"),
            "{}",
            what("form")
        );
        assert_eq!(j["form"]["b"][1].as_str(), Some("3"), "{}", what("form"));

        // A multipart upload, chunked: a field and two files.
        let one = pseudo_random(5, 300_000);
        let two = b"small file\n".to_vec();
        let boundary = "----m0sChunkedBoundary";
        let body = multipart(
            boundary,
            &[
                Part::Field("title", "chunked upload"),
                Part::File("file", "one.bin", "application/octet-stream", &one),
                Part::File("file", "two.txt", "text/plain", &two),
            ],
        );
        let r = chunked_post(
            &s,
            "/form",
            &format!("multipart/form-data; boundary={boundary}"),
            &chunked_pieces(&body, 9),
        );
        assert_eq!(r.status, 200, "{}: {}", what("multipart"), r.body_text());
        let j = json(&r);
        assert_eq!(
            j["form"]["title"][0].as_str(),
            Some("chunked upload"),
            "{}",
            what("multipart")
        );
        let files = j["files"].as_array().cloned().unwrap_or_default();
        assert_eq!(files.len(), 2, "{}: {j:?}", what("multipart"));
        for (f, (name, bytes)) in files.iter().zip([("one.bin", &one), ("two.txt", &two)]) {
            assert_eq!(f["filename"].as_str(), Some(name), "{}", what("multipart"));
            assert_eq!(
                f["size"].as_f64(),
                Some(bytes.len() as f64),
                "{}",
                what(name)
            );
            assert_eq!(
                f["sha256"].as_str(),
                Some(sha256_hex(bytes).as_str()),
                "{}",
                what(name)
            );
        }
    }
}

#[test]
fn django_admin_with_collectstatic_output_is_served_by_static_map() {
    let Some(venv) = test_venv() else { return };
    let root = TempDir::new("django-static");
    let apps = apps_dir();
    let out = std::process::Command::new(venv.join("bin/python"))
        .args(["-m", "django", "collectstatic", "--noinput"])
        .current_dir(&apps)
        .env("PYTHONPATH", &apps)
        .env("DJANGO_SETTINGS_MODULE", "djangoproj.settings_static")
        .env("M0TEST_STATIC_ROOT", &root.path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "collectstatic: {out:?}");
    let static_root = root.path.join("static");
    assert!(
        static_root.join("staticfiles.json").is_file(),
        "no manifest"
    );
    let map = format!("/static={}", static_root.display());
    let s = Server::builder("djangoproj.wsgi:application")
        .args(&["--venv", venv.to_str().unwrap(), "--static-map", &map])
        .env("DJANGO_SETTINGS_MODULE", "djangoproj.settings_static")
        .env("M0TEST_STATIC_ROOT", root.path.to_str().unwrap())
        .start();
    let page =
        s.request(b"GET /admin/login/ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!(page.status, 200, "{}\n{}", page.body_text(), s.log_text());
    let html = page.body_text();
    // Every stylesheet and script the page names, under its hashed name.
    let mut assets = Vec::new();
    for attr in ["href=\"", "src=\""] {
        for part in html.split(attr).skip(1) {
            let url = &part[..part.find('"').unwrap()];
            if url.starts_with("/static/") {
                assets.push(url.to_string());
            }
        }
    }
    assert!(
        assets.iter().any(|a| a.ends_with(".css")) && assets.iter().any(|a| a.ends_with(".js")),
        "{assets:?}\n{html}"
    );
    for url in &assets {
        let r = s.request(
            format!("GET {url} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(r.status, 200, "{url}");
        assert_eq!(
            r.header("cache-control"),
            Some("public, max-age=31536000, immutable"),
            "{url}: a hashed name"
        );
        let want = if url.ends_with(".css") {
            "text/css; charset=utf-8"
        } else {
            "text/javascript; charset=utf-8"
        };
        assert_eq!(r.header("content-type"), Some(want), "{url}");
        let rel = url.trim_start_matches("/static/");
        assert_eq!(
            r.body,
            std::fs::read(static_root.join(rel)).unwrap(),
            "{url}"
        );
    }
    // The images the stylesheet names (rewritten to their hashed names) are there too, as
    // image/svg+xml, immutable.
    let base = assets
        .iter()
        .find(|a| a.contains("admin/css/base."))
        .unwrap();
    let css = s.get(base).body_text();
    let dir = &base[..base.rfind('/').unwrap()];
    let mut images = 0;
    for part in css.split("url(").skip(1) {
        let u = part[..part.find(')').unwrap()].trim_matches(['"', '\'']);
        let Some(rel) = u.strip_prefix("../") else {
            continue;
        };
        let url = format!("{}/{rel}", &dir[..dir.rfind('/').unwrap()]);
        let r = s.get(&url);
        assert_eq!(r.status, 200, "{url}");
        assert!(is_hashed(&url), "{url}");
        assert_eq!(
            r.header("content-type"),
            Some("image/svg+xml; charset=utf-8"),
            "{url}"
        );
        images += 1;
    }
    assert!(images >= 5, "{images} images in {base}");
    eprintln!(
        "{} assets of the admin's login page served from collectstatic output",
        assets.len()
    );
}

/// A name as ManifestStaticFilesStorage writes it: `stem.<12 hex>.ext`.
fn is_hashed(url: &str) -> bool {
    let name = url.rsplit('/').next().unwrap_or(url);
    name.split('.')
        .any(|p| p.len() == 12 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}
