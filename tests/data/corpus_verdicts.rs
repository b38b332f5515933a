// What m0serve does with each file of gunicorn's request corpus
// (../shared/corpus/gunicorn-requests) where that is not gunicorn's verdict: ONE table,
// included by both the parser's test (src/http/tests.rs) and the end-to-end test
// (tests/corpus.rs), so the two cannot disagree.
//
// Not listed: a valid file is parsed, and reaches the app, exactly as the manifest says;
// an invalid file is refused at the head (end to end: 4xx, 501 or 505, or closed, the app
// never called). Also not listed: a file refused only because an HTTP/1.1 request lacks
// Host (RFC 9112 section 3.2: a server MUST answer 400; gunicorn accepts it). Both tests
// find those themselves: the parser's test checks the verdict below again with a Host line
// added, the end-to-end test that the requests before it are answered and it gets 400. A
// file whose gunicorn settings lower or raise a request-line or header-count limit, and
// that is not listed, is checked by the parser's test with those limits only.

/// What m0serve does with a corpus file.
#[derive(Clone, Copy, Debug, PartialEq)]
#[allow(dead_code)]
enum Verdict {
    /// Parsed, and seen by the app, exactly as the manifest says, though gunicorn needs a
    /// setting for it.
    AsManifest,
    /// Accepted, each request parsed, but not as the manifest says (the reason says how):
    /// end to end, each request answered 2xx and the app called once for it.
    Accepted,
    /// The parser keeps more than gunicorn does (not compared with the manifest); the app
    /// sees exactly the manifest's requests (the environ builder leaves out the rest).
    AppSeesManifest,
    /// Refused at the head with this status and, where not empty, this reason.
    Refused(u16, &'static str),
    /// Refused at the head, whatever the status.
    RefusedAny,
    /// The head accepted, its chunked body refused (end to end: refused, the app never
    /// called).
    BodyRefused,
    /// Never complete: the server waits, and closes at EOF without calling the app.
    Incomplete,
    /// Its body is shorter than its Content-Length: the parser waits for the rest; end to
    /// end the missing bytes are sent as filler and expected in the body.
    ShortBody,
    /// Accepted within m0serve's request-line limit; refused with 414 at gunicorn's (this
    /// many bytes).
    LongLine(usize),
    /// As the manifest says but for the path, which is urlsplit's reading (gunicorn's test
    /// helper's): the parser's path is these bytes where given, else the manifest's; end to
    /// end PATH_INFO is not checked.
    OtherPath(Option<&'static [u8]>),
}

const TE_NOT_IMPLEMENTED: &str = "unsupported transfer coding";
const GUNICORN_LIMIT_REQUEST_LINE_BYTES: usize = 4094;

/// Every file whose verdict is not the default, with the reason.
const VERDICTS: &[(&str, Verdict, &str)] = &[
    // valid/ files we refuse.
    ("valid/009.http", Verdict::Refused(400, "both Transfer-Encoding and Content-Length"),
        "Transfer-Encoding with Content-Length is refused (RFC 9112 §6.1 MAY reject, §6.3 ¶3 smuggling); gunicorn drops the CL"),
    ("valid/025.http", Verdict::Refused(501, TE_NOT_IMPLEMENTED),
        "gzip before chunked: RFC 9112 §6.1 says 501 for a coding we do not implement; gunicorn hands the app the still-encoded body"),
    ("valid/025_line.http", Verdict::Refused(501, TE_NOT_IMPLEMENTED), "gzip before chunked: 501 (RFC 9112 §6.1)"),
    ("valid/029.http", Verdict::Refused(501, TE_NOT_IMPLEMENTED),
        "identity before chunked: identity is no transfer coding since RFC 7230; 501 (RFC 9112 §6.1)"),
    ("valid/030.http", Verdict::Refused(501, TE_NOT_IMPLEMENTED), "identity before chunked: 501 (RFC 9112 §6.1)"),
    ("valid/rfc9112_smuggle_gzip_chunked_01.http", Verdict::Refused(501, TE_NOT_IMPLEMENTED), "gzip before chunked: 501 (RFC 9112 §6.1)"),
    ("valid/rfc9112_smuggle_te_identity_chunked_01.http", Verdict::Refused(501, TE_NOT_IMPLEMENTED), "identity before chunked: 501 (RFC 9112 §6.1)"),
    ("valid/028.http", Verdict::Refused(400, "invalid header field name"),
        "needs gunicorn's strip_header_spaces; RFC 9112 §5.1 says a space before the colon MUST get 400 (the same bytes as invalid/020)"),
    ("valid/compat_obs_fold.http", Verdict::Refused(400, "invalid header field name"),
        "needs gunicorn's permit_obsolete_folding; obs-fold gets 400 (RFC 9112 §5.2 allows it), no setting to allow it"),
    ("valid/compat_obs_fold_huge.http", Verdict::Refused(400, "invalid header field name"),
        "needs permit_obsolete_folding; obs-fold gets 400 (RFC 9112 §5.2)"),
    ("valid/pp_01.http", Verdict::RefusedAny, "needs gunicorn's proxy_protocol: without --proxy-protocol a PROXY v1 line is not HTTP"),
    ("valid/pp_02.http", Verdict::RefusedAny, "needs proxy_protocol (PROXY v1): not HTTP without --proxy-protocol"),
    ("valid/pp_04.http", Verdict::RefusedAny, "needs proxy_protocol (PROXY v2, binary): not HTTP without --proxy-protocol"),
    ("valid/pp_05.http", Verdict::RefusedAny, "needs proxy_protocol (PROXY v2, binary): not HTTP without --proxy-protocol"),
    // valid/ files we accept, other than gunicorn's reading of them.
    ("valid/pp_03.http", Verdict::AsManifest, "proxy_protocol=auto with no PROXY line: a plain request, parsed as the manifest says"),
    ("valid/031compat.http", Verdict::Accepted,
        "any token is a method (RFC 9110 §9.1) and methods are case-sensitive: `-blargh` is passed as sent, not case-folded as gunicorn's casefold_http_method does (HTTP/1.1 without Host: 400 end to end)"),
    ("valid/031compat2.http", Verdict::AsManifest,
        "any token is a method (RFC 9110 §9.1), no setting needed (HTTP/1.1 without Host: 400 end to end)"),
    ("valid/040_compat.http", Verdict::Accepted,
        "gunicorn's opt-in header_map=dangerous maps `_` names onto `-` ones; here Transfer_Encoding / Content_Length are ordinary names, which the environ builder leaves out"),
    ("valid/040.http", Verdict::AppSeesManifest,
        "gunicorn drops the underscore names Transfer_Encoding / Content_Length in its parser; we parse them as the valid tokens they are and the environ builder leaves them out (framing uses Content-Length: 7 alone, as gunicorn's does)"),
    ("valid/099.http", Verdict::ShortBody,
        "Content-Length is 17914 but the file holds 8599 body bytes: we wait for the rest (gunicorn's test reads to EOF)"),
    ("valid/rfc9112_target_authority_connect_01.http", Verdict::OtherPath(Some(b"example.com:443")),
        "CONNECT's authority-form is the whole target; urlsplit reads `example.com:` as a scheme (PEP 3333 defines no PATH_INFO for it)"),
    ("valid/rfc9112_target_authority_ipv6_01.http", Verdict::OtherPath(None), "CONNECT's authority-form: PEP 3333 defines no PATH_INFO for it"),
    ("valid/100.http", Verdict::OtherPath(Some(b"///keeping_slashes")),
        "an origin-form path is kept as sent; urlsplit reads `//keeping_slashes` as an empty authority (checked end to end with a Host in tests/pep3333.rs)"),
    // invalid/ files not refused at the head.
    ("invalid/001.http", Verdict::Incomplete, "truncated head: waits for more, closed at EOF"),
    ("invalid/003c.http", Verdict::Accepted, "`-bl` is a valid method token (RFC 9110 §9.1); gunicorn refuses lower-case methods by default"),
    ("invalid/006.http", Verdict::LongLine(GUNICORN_LIMIT_REQUEST_LINE_BYTES),
        "4112-byte request line: within our 8190-byte default, 414 at gunicorn's 4094"),
    ("invalid/007.http", Verdict::Accepted, "an 8 KiB header line: no per-field limit, only max_head (64 KiB)"),
    ("invalid/008.http", Verdict::Accepted, "12 KiB of header lines: no per-field limit, only max_head (64 KiB)"),
    ("invalid/017.http", Verdict::Accepted,
        "an 8 KiB header line: no per-field limit, only max_head (64 KiB) (HTTP/1.1 without Host: 400 end to end)"),
    ("invalid/010.http", Verdict::Accepted, "needs gunicorn's limit_request_field_size=10: we have no per-field limit"),
    ("invalid/012.http", Verdict::Accepted, "needs limit_request_field_size=98: no per-field limit"),
    ("invalid/limit_header_default_01.http", Verdict::Accepted, "needs limit_request_field_size: no per-field limit"),
    ("invalid/013.http", Verdict::RefusedAny, "needs permit_obsolete_folding and a field limit; obs-fold is 400 regardless"),
    ("invalid/019.http", Verdict::Accepted,
        "gunicorn's check of X-Forwarded-Proto against X-Forwarded-Ssl: m0serve reads Forwarded and X-Forwarded-For/-Proto only (--forwarded-allow-ips), not X-Forwarded-Ssl, so there is no conflict to refuse"),
    ("invalid/040.http", Verdict::Accepted, "needs header_map=refuse; underscore names are valid tokens (see valid/040_compat)"),
    ("invalid/chunked_07.http", Verdict::Accepted,
        "needs header_map=refuse; Transfer_Encoding is not Transfer-Encoding, and the body is not chunked"),
    ("invalid/pp_01.http", Verdict::RefusedAny, "needs proxy_protocol; a malformed PROXY line is not HTTP: 400"),
    ("invalid/pp_02.http", Verdict::RefusedAny, "needs proxy_protocol; not HTTP: 400"),
    ("invalid/pp_03.http", Verdict::RefusedAny, "needs proxy_protocol; not HTTP: 400"),
    ("invalid/version_02.http", Verdict::Refused(505, ""), "HTTP/2.0 gets 505 (RFC 9110 §15.6.6), a 5xx where the corpus says 4xx"),
    ("invalid/rfc9112_chunked_missing_final_crlf_01.http", Verdict::Incomplete, "the body's final CRLF never comes: waits, closed at EOF"),
    ("invalid/chunked_01.http", Verdict::BodyRefused, "`6_0` chunk size"),
    ("invalid/chunked_09.http", Verdict::BodyRefused, "`0 ` (whitespace not followed by `;`)"),
    ("invalid/chunked_10.http", Verdict::BodyRefused, "` 0` leading whitespace"),
    ("invalid/chunked_11.http", Verdict::BodyRefused, "bare LF after the size"),
    ("invalid/chunked_12.http", Verdict::BodyRefused, "extension without a size"),
    ("invalid/chunked_13.http", Verdict::BodyRefused, "empty size line"),
    ("invalid/chunked_14.http", Verdict::BodyRefused, "bare CR in an extension"),
    ("invalid/rfc9112_chunked_size_minus_sign_01.http", Verdict::BodyRefused, "`-5` size"),
    ("invalid/rfc9112_chunked_size_plus_sign_01.http", Verdict::BodyRefused, "`+5` size"),
    ("invalid/rfc9110_trailer_forbidden_cl_01.http", Verdict::BodyRefused, "Content-Length in trailers"),
    ("invalid/rfc9110_trailer_forbidden_host_01.http", Verdict::BodyRefused, "Host in trailers"),
    ("invalid/rfc9110_trailer_forbidden_te_01.http", Verdict::BodyRefused, "Transfer-Encoding in trailers"),
];

/// The verdict listed for `file`, and why.
fn listed_verdict(file: &str) -> Option<(Verdict, &'static str)> {
    VERDICTS
        .iter()
        .find(|(f, _, _)| *f == file)
        .map(|&(_, v, why)| (v, why))
}
