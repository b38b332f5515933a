//! `--static-map PREFIX=DIR`: files answered by the loop, without the app: two mounts at
//! once, the types and cache lifetimes, validators and 304, ranges, precompressed siblings,
//! methods, directories, the access log, order among pipelined app requests, an edited
//! file, and no byte outside a mount by any spelling of a path or any symbolic link.

mod common;

use common::*;
use std::time::Duration;

/// A tree with two mounts and a secret beside them:
/// `s/` (css, a hashed copy, gz and br siblings, a 100 000-byte file, a dotfile, a
/// directory with an index, links in and out) and `m/` (one file); `secret.txt` outside.
fn tree(tmp: &TempDir) -> (String, String) {
    let base = &tmp.path;
    let s = base.join("s");
    std::fs::create_dir_all(s.join("css")).unwrap();
    std::fs::create_dir_all(s.join("docs")).unwrap();
    std::fs::create_dir_all(base.join("m")).unwrap();
    std::fs::write(base.join("secret.txt"), "SECRET outside the mounts").unwrap();
    std::fs::write(s.join("css/app.css"), "body{color:red}\n").unwrap();
    std::fs::write(s.join("css/app.3f2a9c1d0b7e.css"), "body{color:red}\n").unwrap();
    std::fs::write(s.join("css/app.css.gz"), "GZ-BYTES").unwrap();
    std::fs::write(s.join("css/app.css.br"), "BR-BYTES").unwrap();
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(s.join("big.bin"), &big).unwrap();
    std::fs::write(s.join(".env"), "SECRET dotfile").unwrap();
    std::fs::write(s.join("docs/index.html"), "<p>index</p>").unwrap();
    std::fs::write(s.join("a b.txt"), "spaced").unwrap();
    std::fs::write(s.join("%2e%2e"), "a file named so").unwrap();
    std::os::unix::fs::symlink("../secret.txt", s.join("out.txt")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", s.join("passwd")).unwrap();
    std::os::unix::fs::symlink("css/app.css", s.join("in.css")).unwrap();
    std::fs::write(base.join("m/pic.txt"), "media file").unwrap();
    (
        format!("/static={}", s.display()),
        format!("/media={}", base.join("m").display()),
    )
}

fn start(tmp: &TempDir, extra: &[&str]) -> Server {
    let (s, m) = tree(tmp);
    let mut args = vec!["--static-map", &s, "--static-map", &m, "--access-log"];
    args.extend(extra);
    Server::start("regress:app", &args)
}

fn raw_get(s: &Server, target: &str, headers: &str) -> Response {
    s.request(
        format!("GET {target} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n")
            .as_bytes(),
    )
}

#[test]
fn two_mounts_are_served_with_types_validators_and_cache_lifetimes_and_the_app_gets_the_rest() {
    let tmp = TempDir::new("static-two");
    let s = start(&tmp, &[]);
    let r = s.get("/static/css/app.css");
    assert_eq!(r.status, 200, "{}", s.log_text());
    assert_eq!(r.body_text(), "body{color:red}\n");
    assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
    assert_eq!(r.header("content-length"), Some("16"));
    assert_eq!(r.header("cache-control"), Some("public, max-age=60"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert!(r
        .header("etag")
        .is_some_and(|e| e.starts_with('"') && e.ends_with('"')));
    let lm = r.header("last-modified").unwrap();
    assert!(parse_imf_fixdate(lm).is_some(), "{lm}");
    // A hashed name is immutable for a year.
    let r = s.get("/static/css/app.3f2a9c1d0b7e.css");
    assert_eq!(
        r.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    // The second mount; a name with a space, percent-encoded; a type from the table.
    assert_eq!(s.get("/media/pic.txt").body_text(), "media file");
    assert_eq!(s.get("/static/a%20b.txt").body_text(), "spaced");
    assert_eq!(
        s.get("/static/big.bin").header("content-type"),
        Some("application/octet-stream")
    );
    // Outside the mounts: the app.
    assert_eq!(s.get("/hello").body_text(), "hello");
    assert_eq!(s.get("/staticx").body_text(), "no route");
    // The access log has the static lines.
    let logged = wait_until(Duration::from_secs(5), || {
        s.stdout_text()
            .contains("\"GET /media/pic.txt HTTP/1.1\" 200 10")
            || s.stderr_text()
                .contains("\"GET /media/pic.txt HTTP/1.1\" 200 10")
    });
    assert!(logged, "{}\n{}", s.stdout_text(), s.stderr_text());
}

#[test]
fn conditional_requests_are_answered_304_and_head_has_no_body() {
    let tmp = TempDir::new("static-304");
    let s = start(&tmp, &["--static-max-age", "0"]);
    let r = s.get("/static/css/app.css");
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    let etag = r.header("etag").unwrap().to_string();
    let lm = r.header("last-modified").unwrap().to_string();
    // The same date in the two obsolete forms a recipient must also accept (RFC 9110
    // §5.6.7): RFC 850's and asctime's, made from `Sun, 06 Nov 1994 08:49:37 GMT`.
    let [day, date, month, year, time, _] = lm
        .split([' ', ','])
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()[..]
    else {
        panic!("{lm}")
    };
    let long_day = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ]
    .into_iter()
    .find(|d| d.starts_with(day))
    .unwrap();
    let rfc850 = format!("{long_day}, {date}-{month}-{} {time} GMT", &year[2..]);
    let asctime = format!(
        "{day} {month} {:>2} {time} {year}",
        date.trim_start_matches('0')
    );
    for (headers, want) in [
        (format!("If-Modified-Since: {rfc850}\r\n"), 304),
        (format!("If-Modified-Since: {asctime}\r\n"), 304),
        (format!("If-None-Match: {etag}\r\n"), 304),
        (format!("If-None-Match: \"x\", W/{etag}\r\n"), 304),
        ("If-None-Match: *\r\n".to_string(), 304),
        ("If-None-Match: \"other\"\r\n".to_string(), 200),
        (format!("If-Modified-Since: {lm}\r\n"), 304),
        (
            "If-Modified-Since: Thu, 01 Jan 1970 00:00:01 GMT\r\n".to_string(),
            200,
        ),
        // If-None-Match decides when both are sent.
        (
            format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {lm}\r\n"),
            200,
        ),
    ] {
        let r = raw_get(&s, "/static/css/app.css", &headers);
        assert_eq!(r.status, want, "{headers}");
        if want == 304 {
            assert!(
                r.body.is_empty() && r.header("etag") == Some(etag.as_str()),
                "{headers}"
            );
            assert!(r.header("content-length").is_none(), "{headers}");
        }
    }
    let mut c = s.connect();
    c.send(b"HEAD /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /static/css/app.css HTTP/1.1\r\nHost: x\r\n\r\n");
    let head = c.read_head_response();
    assert_eq!(
        (head.status, head.header("content-length")),
        (200, Some("100000"))
    );
    assert!(head.body.is_empty());
    assert_eq!(c.read_response().body_text(), "body{color:red}\n");
}

#[test]
fn one_range_is_206_several_are_the_whole_and_if_range_guards_them() {
    let tmp = TempDir::new("static-range");
    let s = start(&tmp, &[]);
    let whole = s.get("/static/big.bin").body;
    let r = raw_get(&s, "/static/big.bin", "Range: bytes=10-19\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/100000"));
    assert_eq!(r.body, &whole[10..20]);
    let r = raw_get(&s, "/static/big.bin", "Range: bytes=-5\r\n");
    assert_eq!((r.status, &r.body[..]), (206, &whole[99_995..]));
    let r = raw_get(&s, "/static/big.bin", "Range: bytes=99990-\r\n");
    assert_eq!((r.status, r.body.len()), (206, 10));
    let r = raw_get(&s, "/static/big.bin", "Range: bytes=0-1,5-6\r\n");
    assert_eq!((r.status, r.body.len()), (200, 100_000));
    let r = raw_get(&s, "/static/big.bin", "Range: bytes=100000-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */100000"));
    let etag = s.get("/static/big.bin").header("etag").unwrap().to_string();
    let r = raw_get(
        &s,
        "/static/big.bin",
        &format!("Range: bytes=0-0\r\nIf-Range: {etag}\r\n"),
    );
    assert_eq!((r.status, r.body.len()), (206, 1));
    let r = raw_get(
        &s,
        "/static/big.bin",
        "Range: bytes=0-0\r\nIf-Range: \"stale\"\r\n",
    );
    assert_eq!((r.status, r.body.len()), (200, 100_000));
    let r = raw_get(
        &s,
        "/static/big.bin",
        &format!("Range: bytes=0-0\r\nIf-Range: W/{etag}\r\n"),
    );
    assert_eq!(r.status, 200, "a weak validator never lets a range through");
}

#[test]
fn a_precompressed_sibling_is_sent_to_a_client_that_accepts_it() {
    let tmp = TempDir::new("static-gz");
    let s = start(&tmp, &[]);
    let plain = s.get("/static/css/app.css");
    for (accept, body, coding) in [
        ("gzip, deflate, br", "BR-BYTES", Some("br")),
        ("gzip", "GZ-BYTES", Some("gzip")),
        ("gzip, br;q=0", "GZ-BYTES", Some("gzip")),
        ("identity", "body{color:red}\n", None),
    ] {
        let r = raw_get(
            &s,
            "/static/css/app.css",
            &format!("Accept-Encoding: {accept}\r\n"),
        );
        assert_eq!(r.body_text(), body, "{accept}");
        assert_eq!(r.header("content-encoding"), coding, "{accept}");
        assert_eq!(
            r.header("content-type"),
            Some("text/css; charset=utf-8"),
            "{accept}"
        );
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{accept}");
        if coding.is_some() {
            assert_ne!(
                r.header("etag"),
                plain.header("etag"),
                "each coding its own tag"
            );
        }
    }
    // A file with no sibling says nothing of Accept-Encoding.
    assert_eq!(s.get("/media/pic.txt").header("vary"), None);
}

#[test]
fn other_methods_get_405_and_directories_are_not_listed() {
    let tmp = TempDir::new("static-405");
    let s = start(&tmp, &[]);
    for m in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let r = s.request(
            format!("{m} /static/css/app.css HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(
            (r.status, r.header("allow")),
            (405, Some("GET, HEAD")),
            "{m}"
        );
    }
    for dir in ["/static", "/static/", "/static/docs/", "/static/css"] {
        assert_eq!(s.get(dir).status, 404, "{dir}");
    }
    drop(s);
    let tmp = TempDir::new("static-index");
    let s = start(&tmp, &["--static-index"]);
    assert_eq!(s.get("/static/docs/").body_text(), "<p>index</p>");
    let r = s.get("/static/docs?x=1");
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/static/docs/?x=1"))
    );
    assert_eq!(s.get("/static/css/").status, 404, "no index.html there");
}

#[test]
fn no_byte_outside_a_mount_is_served_by_any_spelling_or_link() {
    let tmp = TempDir::new("static-escape");
    let s = start(&tmp, &[]);
    for target in [
        "/static/../secret.txt",
        "/static/%2e%2e/secret.txt",
        "/static/%2E%2E/secret.txt",
        "/static/.%2e/secret.txt",
        "/static/%2e%2e%2fsecret.txt",
        "/static/..%2f..%2fsecret.txt",
        "/static/%252e%252e/secret.txt",
        "/static/..%5csecret.txt",
        "/static/..\\secret.txt",
        "/static/%c0%ae%c0%ae/secret.txt",
        "/static/%c0%2e%c0%2e/secret.txt",
        "/static/css/../../secret.txt",
        "/static/css/%2e%2e/%2e%2e/secret.txt",
        "/static//../secret.txt",
        "/static/out.txt",
        "/static/passwd",
        "/static/.env",
        "/static/%2eenv",
        "/static/css%00/app.css",
        "/media/../s/.env",
        "/static/./css/app.css",
    ] {
        let r = raw_get(&s, target, "");
        assert_eq!(r.status, 404, "{target}: {}", r.body_text());
        assert!(
            !contains(&r.raw, b"SECRET") && !contains(&r.raw, b"root:"),
            "{target}"
        );
    }
    // A double encoding names a file literally so; a link that stays inside is followed.
    assert_eq!(s.get("/static/%252e%252e").body_text(), "a file named so");
    assert_eq!(s.get("/static/in.css").body_text(), "body{color:red}\n");
    drop(s);
    // Links out, only when asked; the path still cannot climb.
    let tmp = TempDir::new("static-links");
    let s = start(&tmp, &["--static-follow-symlinks"]);
    assert_eq!(
        s.get("/static/out.txt").body_text(),
        "SECRET outside the mounts"
    );
    assert_eq!(raw_get(&s, "/static/%2e%2e/secret.txt", "").status, 404);
}

#[test]
fn static_answers_keep_their_place_among_pipelined_app_requests() {
    let tmp = TempDir::new("static-order");
    let s = start(&tmp, &[]);
    let mut c = s.connect();
    c.send(
        b"GET /slow?secs=0.3 HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /static/css/app.css HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /hello HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /media/pic.txt HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let bodies: Vec<String> = c.read_responses(4).iter().map(|r| r.body_text()).collect();
    assert_eq!(bodies[1..], ["body{color:red}\n", "hello", "media file"]);
}

#[test]
fn an_edited_or_replaced_file_is_served_fresh_within_a_few_seconds() {
    let tmp = TempDir::new("static-edit");
    let s = start(&tmp, &[]);
    let file = tmp.path.join("m/pic.txt");
    assert_eq!(s.get("/media/pic.txt").body_text(), "media file");
    // Replaced by a rename, as deploys do.
    let new = tmp.path.join("m/new.tmp");
    std::fs::write(&new, "replaced!").unwrap();
    std::fs::rename(&new, &file).unwrap();
    let fresh = wait_until(Duration::from_secs(5), || {
        s.get("/media/pic.txt").body_text() == "replaced!"
    });
    assert!(fresh, "still {:?}", s.get("/media/pic.txt").body_text());
    // Edited in place, to another length.
    std::fs::write(&file, "edited in place, longer").unwrap();
    let fresh = wait_until(Duration::from_secs(5), || {
        s.get("/media/pic.txt").body_text() == "edited in place, longer"
    });
    assert!(fresh, "still {:?}", s.get("/media/pic.txt").body_text());
    std::fs::remove_file(&file).unwrap();
    assert!(wait_until(Duration::from_secs(5), || s
        .get("/media/pic.txt")
        .status
        == 404));
}

#[test]
fn root_path_and_static_prefixes_are_both_full_url_paths() {
    let tmp = TempDir::new("static-root");
    let (_, m) = tree(&tmp);
    let app_static = format!("/app/static={}", tmp.path.join("s").display());
    let s = Server::start(
        "regress:app",
        &[
            "--root-path",
            "/app",
            "--static-map",
            &app_static,
            "--static-map",
            &m,
        ],
    );
    assert_eq!(
        s.get("/app/static/css/app.css").body_text(),
        "body{color:red}\n"
    );
    // A mount outside the root path is served all the same; the app's rule holds elsewhere.
    assert_eq!(s.get("/media/pic.txt").body_text(), "media file");
    assert_eq!(s.get("/app/hello").body_text(), "hello");
    assert_eq!(s.get("/hello").status, 404);
}

#[test]
fn bad_static_flags_are_refused_naming_them_and_a_missing_directory_stops_the_start() {
    for (args, says) in [
        (
            &["--static-map", "static=/tmp"][..],
            "--static-map \"static=/tmp\"",
        ),
        (&["--static-map", "/static"][..], "expected PREFIX=DIR"),
        (
            &["--static-map", "/s?x=/tmp"][..],
            "the prefix is a URL path",
        ),
        (&["--static-map", "/s/../x=/tmp"][..], ". or .. segments"),
        (
            &["--static-map", "/s=/tmp,/s/=/var"][..],
            "/s is mapped twice",
        ),
        (&["--mime-type", "md"][..], "--mime-type \"md\""),
        (&["--mime-type", "md=text"][..], "expected EXT=TYPE"),
    ] {
        let mut all = vec!["hello:app", "--check-config"];
        all.extend(args);
        let out = run_to_exit(&all, &[], Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    // --check-config: a file is no directory anywhere; a missing one is this host's.
    let out = run_to_exit(
        &[
            "hello:app",
            "--check-config",
            "--static-map",
            "/s=/etc/hostname",
        ],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("/etc/hostname: not a directory"),
        "{}",
        out.stderr
    );
    let out = run_to_exit(
        &[
            "hello:app",
            "--check-config",
            "--static-map",
            "/s=/nonexistent/m0s-static",
        ],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("warning: --static-map /s=/nonexistent/m0s-static"),
        "{}",
        out.stderr
    );
    let out = run_to_exit(
        &[
            "hello:app",
            "--port",
            "0",
            "--static-map",
            "/s=/nonexistent/m0s-static",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_ne!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("--static-map /s=/nonexistent/m0s-static: cannot open the directory"),
        "{}",
        out.stderr
    );
}

#[test]
fn static_answers_are_counted_in_the_metrics() {
    let tmp = TempDir::new("static-metrics");
    let (s_map, _) = tree(&tmp);
    let s = Server::start(
        "regress:app",
        &["--static-map", &s_map, "--metrics-port", "0"],
    );
    for _ in 0..3 {
        assert_eq!(s.get("/static/css/app.css").status, 200);
    }
    assert_eq!(s.get("/static/nope").status, 404);
    assert_eq!(s.get("/hello").status, 200);
    let scrape = || {
        let mut c = Conn::connect(s.metrics_addr());
        c.send(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        c.read_response().body_text()
    };
    let mut text = String::new();
    // The app's request is counted by its handler a moment after its response.
    let ok = wait_until(Duration::from_secs(5), || {
        text = scrape();
        text.contains("m0serve_requests_total{status=\"2xx\"} 4")
    });
    assert!(ok, "{text}");
    assert!(
        text.contains("m0serve_static_requests_total{status=\"2xx\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("m0serve_static_requests_total{status=\"4xx\"} 1"),
        "{text}"
    );
}

#[test]
fn a_client_that_stops_reading_a_large_file_is_cut_at_the_write_timeout_and_others_are_served() {
    const SIZE: usize = 20_000_000;
    let tmp = TempDir::new("static-stall");
    let (s_map, _) = tree(&tmp);
    std::fs::write(tmp.path.join("s/huge.bin"), vec![7u8; SIZE]).unwrap();
    let s = Server::start(
        "regress:app",
        &[
            "--static-map",
            &s_map,
            "--write-timeout",
            "1",
            "--log-level",
            "debug",
        ],
    );
    let mut c = Conn::connect_small(s.addr(), 4096);
    c.send(b"GET /static/huge.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    // Meanwhile the loop serves everyone else.
    for _ in 0..20 {
        assert_eq!(s.get("/static/css/app.css").status, 200);
        assert_eq!(s.get("/hello").body_text(), "hello");
    }
    assert!(
        s.wait_for_log("write timeout", Duration::from_secs(6)),
        "not cut after 6 s\n{}",
        s.log_text()
    );
    let (got, _) = c.read_until_close(Duration::from_secs(10));
    assert!(got.len() < SIZE, "the whole {} bytes still came", got.len());
}

#[test]
fn mounts_come_from_the_environment_too_and_stats_count_the_answers() {
    let tmp = TempDir::new("static-env");
    let (s_map, m_map) = tree(&tmp);
    let s = Server::builder("regress:app")
        .env("M0SERVE_STATIC_MAP", &format!("{s_map},{m_map}"))
        .args(&["--stats"])
        .start();
    assert_eq!(s.get("/static/css/app.css").status, 200);
    assert_eq!(s.get("/media/pic.txt").body_text(), "media file");
    assert_eq!(s.get("/static/none").status, 404);
    s.signal(libc::SIGUSR2);
    assert!(
        s.wait_for_log("static files 3", Duration::from_secs(5)),
        "{}",
        s.log_text()
    );
}
