//! Static files answered by the loop (`--static-map`): their HTTP, with no I/O. The
//! request path under a mount turned into a relative file path that no spelling can lead
//! out of the mount; the validators (`ETag`, `Last-Modified`) and the conditional requests
//! (`If-None-Match`, `If-Modified-Since`, `If-Range`, RFC 9110 §13); one byte range (§14);
//! the content type and the cache lifetime by the file's name; the precompressed variant
//! by `Accept-Encoding` (§12.5.3).

use super::percent::percent_decode_into;

/// The longest file path a request may name (Linux's `PATH_MAX`), and the longest segment
/// (`NAME_MAX`).
const PATH_MAX_BYTES: usize = 4096;
const NAME_MAX_BYTES: usize = 255;

/// What a request path under a mount names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named {
    /// A file: `out` holds its path relative to the mount.
    File,
    /// The mount's directory or one under it (the path ends in `/`, or is the prefix
    /// itself): `out` holds the directory's relative path, empty for the mount's own.
    Directory,
}

/// The relative path under a mount that the request path `rest` names (`rest` is what
/// follows the mount's prefix, as sent: `/css/app.css`), percent-decoded once, written to
/// `out` with its segments joined by `/` (no leading or doubled slash). `None` (answered
/// 404) for:
/// - a segment that begins with a dot, once decoded: `.`, `..` and hidden files (`.env`,
///   `.git`), however spelled (`%2e%2e`, `.%2E`); a second decoding is never made, so
///   `%252e%252e` names a file called `%2e%2e`;
/// - a NUL byte or a backslash anywhere (no file name here has either; a backslash is a
///   separator to other systems and to some proxies);
/// - a path longer than Linux allows.
///
/// Every other byte is part of a name (an overlong UTF-8 `%c0%ae` is the two bytes it
/// spells, not a dot). The file is then opened beneath the mount's directory descriptor, so
/// a symbolic link cannot lead out either (`sys::beneath`).
pub fn file_path(rest: &[u8], out: &mut Vec<u8>) -> Option<Named> {
    out.clear();
    let mut decoded = Vec::with_capacity(rest.len());
    percent_decode_into(rest, &mut decoded);
    if decoded.len() > PATH_MAX_BYTES || decoded.iter().any(|&b| b == 0 || b == b'\\') {
        return None;
    }
    for segment in decoded.split(|&b| b == b'/').filter(|s| !s.is_empty()) {
        if segment[0] == b'.' || segment.len() > NAME_MAX_BYTES {
            return None;
        }
        if !out.is_empty() {
            out.push(b'/');
        }
        out.extend_from_slice(segment);
    }
    Some(if out.is_empty() || decoded.last() == Some(&b'/') {
        Named::Directory
    } else {
        Named::File
    })
}

/// A file's strong entity tag, from its modification time and size (nginx's shape, with
/// the nanoseconds, so that an edit within the same second that keeps the size changes it
/// too): `"5f1b2c3d.1a2b3c4d-1f40"`.
pub(crate) fn etag(mtime_secs: i64, mtime_nsecs: u32, size: u64, out: &mut Vec<u8>) {
    use std::io::Write;
    let _ = write!(out, "\"{mtime_secs:x}.{mtime_nsecs:x}-{size:x}\"");
}

/// The entity tags of an `If-None-Match` or `If-Range` value, each with whether it is weak.
fn tags(value: &[u8]) -> impl Iterator<Item = (bool, &[u8])> {
    value.split(|&b| b == b',').filter_map(|t| {
        let t = t.trim_ascii();
        match t.strip_prefix(b"W/") {
            Some(weak) => Some((true, weak)),
            None if !t.is_empty() => Some((false, t)),
            None => None,
        }
    })
}

/// `If-None-Match` holds back the body (RFC 9110 §13.1.2): `*`, or a tag equal to `etag`
/// by the weak comparison.
pub fn none_match_hits(value: &[u8], etag: &[u8]) -> bool {
    value.trim_ascii() == b"*" || tags(value).any(|(_, t)| t == etag)
}

/// `If-Modified-Since` holds back the body: the file was last modified at or before the
/// given HTTP-date (any of its three forms; anything else, an impossible date included, is
/// ignored, as if absent).
pub fn not_modified_since(value: &[u8], mtime_secs: i64) -> bool {
    super::date::parse_http_date(value.trim_ascii()).is_some_and(|since| mtime_secs <= since as i64)
}

/// `If-Range` lets the range through (RFC 9110 §13.1.5): an entity tag equal to `etag` by
/// the strong comparison (a weak tag never is), or the exact `Last-Modified` date.
pub fn if_range_holds(value: &[u8], etag: &[u8], mtime_secs: i64) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return tags(value).any(|(weak, t)| !weak && t == etag);
    }
    super::date::parse_http_date(value).is_some_and(|d| d as i64 == mtime_secs)
}

/// What a `Range` header asks of a representation of `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Range {
    /// The whole: no range, one this server does not read (another unit, bad syntax), or
    /// several (RFC 9110 §14.2 lets a server send the whole instead).
    Whole,
    /// Bytes `start..=end`, answered 206.
    Part { start: u64, end: u64 },
    /// No byte of it exists: 416, with `Content-Range: bytes */LEN`.
    Unsatisfiable,
}

/// Reads a `Range` value (`bytes=0-99`, `bytes=100-`, `bytes=-100`; RFC 9110 §14.1.2).
pub fn range(value: &[u8], len: u64) -> Range {
    let value = value.trim_ascii();
    let Some(eq) = value.iter().position(|&b| b == b'=') else {
        return Range::Whole;
    };
    if !value[..eq].trim_ascii().eq_ignore_ascii_case(b"bytes") {
        return Range::Whole;
    }
    let spec = &value[eq + 1..];
    if spec.contains(&b',') {
        return Range::Whole;
    }
    let Some(dash) = spec.iter().position(|&b| b == b'-') else {
        return Range::Whole;
    };
    let (first, last) = (spec[..dash].trim_ascii(), spec[dash + 1..].trim_ascii());
    let number = |s: &[u8]| -> Option<u64> {
        if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(s).ok()?.parse().ok()
    };
    match (first.is_empty(), last.is_empty()) {
        // `-N`: the last N bytes.
        (true, false) => match number(last) {
            Some(0) => Range::Unsatisfiable,
            Some(_) if len == 0 => Range::Unsatisfiable,
            Some(n) => Range::Part {
                start: len.saturating_sub(n),
                end: len - 1,
            },
            None => Range::Whole,
        },
        // `N-`: from N to the end.
        (false, true) => match number(first) {
            Some(start) if start >= len => Range::Unsatisfiable,
            Some(start) => Range::Part {
                start,
                end: len - 1,
            },
            None => Range::Whole,
        },
        (false, false) => match (number(first), number(last)) {
            (Some(start), Some(end)) if start <= end => {
                if start >= len {
                    Range::Unsatisfiable
                } else {
                    Range::Part {
                        start,
                        end: end.min(len - 1),
                    }
                }
            }
            _ => Range::Whole,
        },
        (true, true) => Range::Whole,
    }
}

/// Whether `Accept-Encoding` (`value`) accepts `coding` (`br`, `gzip`): named with a
/// weight above 0, or covered by `*` when not named.
pub fn accepts(value: &[u8], coding: &[u8]) -> bool {
    let mut star = false;
    for item in value.split(|&b| b == b',') {
        let mut parts = item.split(|&b| b == b';');
        let name = parts.next().unwrap_or_default().trim_ascii();
        let q_zero = parts.any(|p| {
            let p = p.trim_ascii();
            (p.starts_with(b"q=") || p.starts_with(b"Q="))
                && p[2..].iter().all(|&b| b == b'0' || b == b'.')
        });
        if name.eq_ignore_ascii_case(coding) {
            return !q_zero;
        }
        if name == b"*" {
            star = !q_zero;
        }
    }
    star
}

/// Content types by extension (lower case). Text types get `; charset=utf-8`.
const TYPES: &[(&str, &str)] = &[
    ("html", "text/html"),
    ("htm", "text/html"),
    ("css", "text/css"),
    ("js", "text/javascript"),
    ("mjs", "text/javascript"),
    ("json", "application/json"),
    ("map", "application/json"),
    ("webmanifest", "application/manifest+json"),
    ("txt", "text/plain"),
    ("md", "text/markdown"),
    ("csv", "text/csv"),
    ("xml", "text/xml"),
    ("svg", "image/svg+xml"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("ico", "image/vnd.microsoft.icon"),
    ("bmp", "image/bmp"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("ttf", "font/ttf"),
    ("otf", "font/otf"),
    ("eot", "application/vnd.ms-fontobject"),
    ("pdf", "application/pdf"),
    ("wasm", "application/wasm"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("mp3", "audio/mpeg"),
    ("ogg", "audio/ogg"),
    ("wav", "audio/wav"),
];

/// The type of what has none known.
pub(crate) const DEFAULT_TYPE: &str = "application/octet-stream";

/// The `Content-Type` of the file `name` (its last segment is read): an `--mime-type`
/// override for its extension first (`overrides`: lower-case extension, type), then the
/// table, else `application/octet-stream`; text types with `; charset=utf-8` unless the
/// type names a charset.
pub fn content_type(name: &[u8], overrides: &[(String, String)], out: &mut Vec<u8>) {
    let file = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    let ext = match file.iter().rposition(|&b| b == b'.') {
        Some(i) if i > 0 => &file[i + 1..],
        _ => b"",
    };
    let found = overrides
        .iter()
        .find(|(e, _)| e.as_bytes().eq_ignore_ascii_case(ext))
        .map(|(_, t)| t.as_str())
        .or_else(|| {
            TYPES
                .iter()
                .find(|(e, _)| e.as_bytes().eq_ignore_ascii_case(ext))
                .map(|(_, t)| *t)
        })
        .unwrap_or(DEFAULT_TYPE);
    out.extend_from_slice(found.as_bytes());
    if is_text(found) && !found.contains("charset") {
        out.extend_from_slice(b"; charset=utf-8");
    }
}

fn is_text(t: &str) -> bool {
    let t = t.split(';').next().unwrap_or(t).trim();
    t.starts_with("text/")
        || t.ends_with("+json")
        || t.ends_with("+xml")
        || matches!(
            t,
            "application/json" | "application/javascript" | "application/xml"
        )
}

/// Whether the file `name` carries a content hash, so that its content never changes under
/// that name: a dot-separated part of exactly 12 lower-case hex digits between the stem and
/// the extension, as Django's `ManifestStaticFilesStorage` names its copies
/// (`app.3f2a9c1d0b7e.css`) and WhiteNoise recognises them.
pub fn is_hashed_name(name: &[u8]) -> bool {
    let file = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    let parts: Vec<&[u8]> = file.split(|&b| b == b'.').collect();
    parts.len() >= 3
        && parts[1..parts.len() - 1].iter().any(|p| {
            p.len() == 12
                && p.iter()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(rest: &str) -> Option<(Named, String)> {
        let mut out = Vec::new();
        file_path(rest.as_bytes(), &mut out)
            .map(|n| (n, String::from_utf8_lossy(&out).into_owned()))
    }

    #[test]
    fn a_path_is_decoded_once_and_never_climbs_or_names_a_hidden_file() {
        assert_eq!(
            path("/css/app.css"),
            Some((Named::File, "css/app.css".into()))
        );
        assert_eq!(
            path("//css///app.css"),
            Some((Named::File, "css/app.css".into()))
        );
        assert_eq!(path("/a%20b.txt"), Some((Named::File, "a b.txt".into())));
        assert_eq!(path(""), Some((Named::Directory, "".into())));
        assert_eq!(path("/"), Some((Named::Directory, "".into())));
        assert_eq!(path("/img/"), Some((Named::Directory, "img".into())));
        // Decoded once: a double encoding is a literal name.
        assert_eq!(
            path("/%252e%252e/x"),
            Some((Named::File, "%2e%2e/x".into()))
        );
        // Overlong UTF-8 for a dot is two bytes, not a dot.
        assert_eq!(path("/%c0%ae%c0%ae/x").map(|(n, _)| n), Some(Named::File));
        for bad in [
            "/..",
            "/../x",
            "/a/../../x",
            "/%2e%2e/x",
            "/%2E%2e/x",
            "/.%2e/x",
            "/a/.",
            "/./x",
            "/.env",
            "/a/.git/config",
            "/%2egit",
            "/a%00b",
            "/a%5c..%5cx",
            "/a\\b",
            "/..%2f..%2fetc/passwd",
            "/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        ] {
            assert_eq!(path(bad), None, "{bad}");
        }
        assert_eq!(path(&format!("/{}", "a".repeat(256))), None);
        assert_eq!(path(&format!("/{}", "a/".repeat(2100))), None);
    }

    #[test]
    fn ranges_as_rfc_9110_reads_them() {
        use Range::*;
        assert_eq!(range(b"bytes=0-99", 1000), Part { start: 0, end: 99 });
        assert_eq!(
            range(b"bytes=900-", 1000),
            Part {
                start: 900,
                end: 999
            }
        );
        assert_eq!(
            range(b"bytes=-100", 1000),
            Part {
                start: 900,
                end: 999
            }
        );
        assert_eq!(range(b"bytes=-5000", 1000), Part { start: 0, end: 999 });
        assert_eq!(
            range(b"bytes=500-5000", 1000),
            Part {
                start: 500,
                end: 999
            }
        );
        assert_eq!(range(b"Bytes = 1-1", 10), Part { start: 1, end: 1 });
        assert_eq!(range(b"bytes=1000-", 1000), Unsatisfiable);
        assert_eq!(range(b"bytes=1000-2000", 1000), Unsatisfiable);
        assert_eq!(range(b"bytes=-0", 1000), Unsatisfiable);
        assert_eq!(range(b"bytes=0-0", 0), Unsatisfiable);
        for whole in [
            "",
            "bytes",
            "bytes=",
            "bytes=-",
            "bytes=5-1",
            "bytes=a-b",
            "items=0-1",
            "bytes=0-1,5-6",
            "bytes=99999999999999999999-",
            "bytes=+1-2",
        ] {
            assert_eq!(range(whole.as_bytes(), 1000), Whole, "{whole}");
        }
    }

    #[test]
    fn validators_and_conditions() {
        let mut t = Vec::new();
        etag(0x5f1b2c3d, 7, 0x1f40, &mut t);
        assert_eq!(t, b"\"5f1b2c3d.7-1f40\"");
        assert!(none_match_hits(b"\"x\", \"5f1b2c3d.7-1f40\"", &t));
        assert!(none_match_hits(b"W/\"5f1b2c3d.7-1f40\"", &t));
        assert!(none_match_hits(b" * ", &t));
        assert!(!none_match_hits(b"\"other\"", &t));
        // If-Range: strong comparison only.
        assert!(if_range_holds(b"\"5f1b2c3d.7-1f40\"", &t, 0));
        assert!(!if_range_holds(b"W/\"5f1b2c3d.7-1f40\"", &t, 0));
        assert!(if_range_holds(
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            &t,
            784111777
        ));
        assert!(!if_range_holds(
            b"Sun, 06 Nov 1994 08:49:38 GMT",
            &t,
            784111777
        ));
        assert!(not_modified_since(
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            784111777
        ));
        assert!(!not_modified_since(
            b"Sun, 06 Nov 1994 08:49:36 GMT",
            784111777
        ));
        assert!(!not_modified_since(b"yesterday", 0));
    }

    #[test]
    fn accept_encoding_weights() {
        assert!(accepts(b"gzip, deflate, br", b"br"));
        assert!(accepts(b"gzip;q=0.5, BR;q=1.0", b"br"));
        assert!(!accepts(b"gzip, br;q=0", b"br"));
        assert!(!accepts(b"gzip", b"br"));
        assert!(accepts(b"*", b"br"));
        assert!(!accepts(b"*, br;q=0", b"br"));
        assert!(!accepts(b"*;q=0", b"gzip"));
        assert!(!accepts(b"", b"gzip"));
    }

    #[test]
    fn types_and_cache_lifetimes_by_name() {
        let ty = |name: &str, o: &[(String, String)]| {
            let mut out = Vec::new();
            content_type(name.as_bytes(), o, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(ty("a/app.css", &[]), "text/css; charset=utf-8");
        assert_eq!(ty("app.JS", &[]), "text/javascript; charset=utf-8");
        assert_eq!(ty("logo.svg", &[]), "image/svg+xml; charset=utf-8");
        assert_eq!(ty("x.png", &[]), "image/png");
        assert_eq!(ty("README", &[]), DEFAULT_TYPE);
        assert_eq!(ty(".hidden", &[]), DEFAULT_TYPE);
        let o = [
            ("md".to_string(), "text/x-markdown".to_string()),
            ("bin".to_string(), "application/x-thing".to_string()),
        ];
        assert_eq!(ty("a.md", &o), "text/x-markdown; charset=utf-8");
        assert_eq!(ty("a.bin", &o), "application/x-thing");
        assert!(is_hashed_name(b"css/base.3f2a9c1d0b7e.css"));
        assert!(is_hashed_name(b"app.3f2a9c1d0b7e.js.map"));
        assert!(!is_hashed_name(b"base.css"));
        assert!(!is_hashed_name(b"3f2a9c1d0b7e.css"));
        assert!(!is_hashed_name(b"base.3F2A9C1D0B7E.css"));
        assert!(!is_hashed_name(b"base.3f2a9c1d0b7.css"));
    }
}
