//! The request-target, split into path and query, and the path's percent-decoding
//! (PEP 3333 `PATH_INFO` is decoded, `QUERY_STRING` is not).

/// Appends `input` to `out` with each `%XX` (two hex digits, either case) replaced by the
/// byte it encodes (RFC 3986 §2.1). An invalid escape (`%zz`, a `%` near the end) is kept as
/// it is, and `+` stays `+`: it means space only in form data, never in a path.
pub(crate) fn percent_decode_into(input: &[u8], out: &mut Vec<u8>) {
    out.reserve(input.len());
    let mut rest = input;
    // Copy the runs between escapes in one go; most paths have no `%` at all.
    while let Some(i) = rest.iter().position(|&b| b == b'%') {
        out.extend_from_slice(&rest[..i]);
        match rest.get(i + 1..i + 3) {
            Some(&[hi, lo]) if hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit() => {
                out.push(hex_value(hi) << 4 | hex_value(lo));
                rest = &rest[i + 3..];
            }
            _ => {
                out.push(b'%');
                rest = &rest[i + 1..];
            }
        }
    }
    out.extend_from_slice(rest);
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0,
    }
}

/// Splits a request-target (RFC 9112 §3.2) into the raw path and query (without the `?`);
/// a `#fragment` (which clients should not send) is dropped first.
///
/// - origin-form `/a/b?q` -> (`/a/b`, `q`);
/// - absolute-form `http://host:80/p?q` -> (`/p`, `q`); an empty path is `/`
///   (RFC 9110 §4.2.3: an empty path is equivalent to `/`);
/// - asterisk-form `*` -> (`*`, ``);
/// - authority-form `host:443` (CONNECT) and anything else -> the whole target as the path,
///   split at `?` if there is one.
pub(crate) fn split_target(target: &[u8]) -> (&[u8], &[u8]) {
    split_target_inner(target)
}

/// A request path under the URL prefix `root` (`--root-path`, `/app`): the rest after it
/// (`/app/x` -> `/x`, `/app` -> ``), or `None` outside it (`/apple`, `/`). Compared as sent,
/// before percent-decoding.
pub(crate) fn under_root<'a>(path: &'a [u8], root: &[u8]) -> Option<&'a [u8]> {
    let rest = path.strip_prefix(root)?;
    (rest.is_empty() || rest[0] == b'/').then_some(rest)
}

fn split_target_inner(target: &[u8]) -> (&[u8], &[u8]) {
    let target = match target.iter().position(|&b| b == b'#') {
        Some(i) => &target[..i],
        None => target,
    };
    let (path_and_query, absolute) = match target.first() {
        // The common case: one compare.
        Some(b'/') | None => (target, false),
        Some(_) => match absolute_form_path(target) {
            Some(p) => (p, true),
            None => (target, false),
        },
    };
    let (path, query) = match path_and_query.iter().position(|&b| b == b'?') {
        Some(i) => (&path_and_query[..i], &path_and_query[i + 1..]),
        None => (path_and_query, &b""[..]),
    };
    if absolute && path.is_empty() {
        // "http://h" or "http://h?q".
        return (b"/", query);
    }
    (path, query)
}

/// For `scheme://authority/path?query`, the `/path?query` part (possibly empty); `None` if
/// `target` is not of that shape.
fn absolute_form_path(target: &[u8]) -> Option<&[u8]> {
    split_absolute_form(target).map(|(_, path)| path)
}

/// For an absolute-form target (RFC 9112 §3.2.2, `scheme://authority/path?query`), the
/// authority without any userinfo (what Host would say) and its host alone (no port, an
/// IPv6 literal without its brackets); `None` for the other forms. (RFC 9112 §3.2.2: the
/// server "MUST ignore the received Host header field ... and instead use the host
/// information of the request-target".)
pub(crate) fn absolute_form_authority(target: &[u8]) -> Option<(&[u8], &[u8])> {
    if matches!(target.first(), Some(b'/' | b'*') | None) {
        return None;
    }
    let (authority, _) = split_absolute_form(target)?;
    // RFC 3986 §3.2: [ userinfo "@" ] host [ ":" port ].
    let authority = match authority.iter().rposition(|&b| b == b'@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let host = match authority {
        [b'[', rest @ ..] => rest.split(|&b| b == b']').next().unwrap_or(rest),
        _ => authority.split(|&b| b == b':').next().unwrap_or(authority),
    };
    if host.is_empty() {
        return None;
    }
    Some((authority, host))
}

/// `scheme://authority` + the rest (`/path?query`, possibly empty).
fn split_absolute_form(target: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = target.iter().position(|&b| b == b':')?;
    let scheme = &target[..colon];
    if scheme.is_empty()
        || !scheme
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return None;
    }
    let after = target[colon..].strip_prefix(b"://")?;
    let path_start = after
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(after.len());
    Some((&after[..path_start], &after[path_start..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(s: &[u8]) -> Vec<u8> {
        let mut out = b">".to_vec();
        percent_decode_into(s, &mut out);
        out.remove(0);
        out
    }

    #[test]
    fn absolute_form_authority_is_the_host_information() {
        let a = absolute_form_authority;
        assert_eq!(
            a(b"http://a.example/x"),
            Some((&b"a.example"[..], &b"a.example"[..]))
        );
        assert_eq!(
            a(b"http://a.example:8080?q"),
            Some((&b"a.example:8080"[..], &b"a.example"[..]))
        );
        assert_eq!(a(b"http://user:pw@h:1/p"), Some((&b"h:1"[..], &b"h"[..])));
        assert_eq!(
            a(b"https://[::1]:8443/"),
            Some((&b"[::1]:8443"[..], &b"::1"[..]))
        );
        assert_eq!(a(b"/origin/form"), None);
        assert_eq!(a(b"*"), None);
        assert_eq!(a(b"http:///nohost"), None);
        assert_eq!(a(b"a.example:443"), None);
    }

    #[test]
    fn decodes_escapes() {
        assert_eq!(decode(b"/a%2Fb"), b"/a/b");
        assert_eq!(decode(b"/a%2fb"), b"/a/b");
        assert_eq!(decode(b"%20%41%7e"), b" A~");
        assert_eq!(decode(b"%00"), b"\0");
        assert_eq!(decode(b"%ff%C3%A9"), b"\xff\xc3\xa9");
        assert_eq!(decode(b"/\xc3\xa0%20k"), b"/\xc3\xa0 k");
        assert_eq!(decode(b""), b"");
        assert_eq!(decode(b"/plain"), b"/plain");
    }

    #[test]
    fn keeps_invalid_escapes() {
        assert_eq!(decode(b"%zz"), b"%zz");
        assert_eq!(decode(b"%2"), b"%2");
        assert_eq!(decode(b"%"), b"%");
        assert_eq!(decode(b"a%"), b"a%");
        assert_eq!(decode(b"%%41"), b"%A");
        assert_eq!(decode(b"%4%41"), b"%4A");
        assert_eq!(decode(b"%g1%1g"), b"%g1%1g");
        assert_eq!(decode(b"%2541"), b"%41", "decoded once, not twice");
    }

    #[test]
    fn plus_is_not_space() {
        assert_eq!(decode(b"a+b%2B"), b"a+b+");
    }

    #[test]
    fn splits_origin_form() {
        assert_eq!(split_target(b"/a?b"), (&b"/a"[..], &b"b"[..]));
        assert_eq!(split_target(b"/a"), (&b"/a"[..], &b""[..]));
        assert_eq!(split_target(b"/a?"), (&b"/a"[..], &b""[..]));
        assert_eq!(split_target(b"/a?b?c"), (&b"/a"[..], &b"b?c"[..]));
        assert_eq!(split_target(b"/?x=1"), (&b"/"[..], &b"x=1"[..]));
        assert_eq!(
            split_target(b"///keeping_slashes"),
            (&b"///keeping_slashes"[..], &b""[..])
        );
        assert_eq!(
            split_target(b"/with_\"quotes\"?foo=\"bar\""),
            (&b"/with_\"quotes\""[..], &b"foo=\"bar\""[..])
        );
    }

    #[test]
    fn strips_fragment() {
        assert_eq!(
            split_target(b"/forums/1/topics/2375?page=1#posts-17408"),
            (&b"/forums/1/topics/2375"[..], &b"page=1"[..])
        );
        assert_eq!(split_target(b"/a#b?c"), (&b"/a"[..], &b""[..]));
        assert_eq!(
            split_target(b"/post?q=search#hey"),
            (&b"/post"[..], &b"q=search"[..])
        );
        assert_eq!(split_target(b"http://h/p#f"), (&b"/p"[..], &b""[..]));
    }

    #[test]
    fn splits_absolute_form() {
        assert_eq!(split_target(b"http://host/p?q"), (&b"/p"[..], &b"q"[..]));
        assert_eq!(
            split_target(b"http://example.com/foo?q=1"),
            (&b"/foo"[..], &b"q=1"[..])
        );
        assert_eq!(
            split_target(b"https://example.com/foo"),
            (&b"/foo"[..], &b""[..])
        );
        assert_eq!(
            split_target(b"http://[::1]:8080/foo"),
            (&b"/foo"[..], &b""[..])
        );
        assert_eq!(
            split_target(b"http://user:pass@example.com:8080/foo?q=1"),
            (&b"/foo"[..], &b"q=1"[..])
        );
        assert_eq!(split_target(b"http://host"), (&b"/"[..], &b""[..]));
        assert_eq!(split_target(b"http://host?q"), (&b"/"[..], &b"q"[..]));
        assert_eq!(split_target(b"http://host#f"), (&b"/"[..], &b""[..]));
    }

    #[test]
    fn splits_asterisk_and_authority_forms() {
        assert_eq!(split_target(b"*"), (&b"*"[..], &b""[..]));
        assert_eq!(
            split_target(b"example.com:443"),
            (&b"example.com:443"[..], &b""[..])
        );
        assert_eq!(split_target(b"[::1]:443"), (&b"[::1]:443"[..], &b""[..]));
        assert_eq!(split_target(b""), (&b""[..], &b""[..]));
        assert_eq!(split_target(b"foo?x"), (&b"foo"[..], &b"x"[..]));
    }
}
