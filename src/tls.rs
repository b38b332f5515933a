//! TLS settings (`--certfile`, `--keyfile`, `--ca-certs`, `--client-cert`): the PEM files
//! read into one rustls server configuration, and the client certificate's subject as a
//! string for the environ. The records themselves are the loop's (`worker/tls.rs`).
//!
//! The configuration is built wherever a `Config` is (the master, so that a bad file
//! stops the start; each worker, which so re-reads the files when it starts: a SIGHUP's
//! new workers serve the new certificate).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// `--client-cert`: whether clients present a certificate signed by `--ca-certs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ClientCert {
    /// Not asked for.
    None,
    /// Asked for; a client without one is served, one with an invalid one is refused.
    Optional,
    /// A client without a valid one is refused at the handshake.
    Required,
}

/// The TLS flags, as given.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) certfile: PathBuf,
    pub(crate) keyfile: PathBuf,
    pub(crate) ca_certs: Option<PathBuf>,
    pub(crate) client_cert: ClientCert,
}

/// Reads every PEM section of `path`: `Err` names the flag and the file.
fn sections(flag: &str, path: &Path) -> Result<Vec<(SectionKind, Vec<u8>)>, String> {
    let text = std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    if text.windows(9).any(|w| w == b"ENCRYPTED") {
        // PKCS #8 "ENCRYPTED PRIVATE KEY", or OpenSSL's legacy "Proc-Type: 4,ENCRYPTED".
        return Err(format!(
            "{flag} {}: the key is encrypted with a passphrase, which m0serve does not \
             ask for; write it out unencrypted (`openssl pkey -in {0} -out KEY.pem`) and keep \
             that file readable only by the server's user",
            path.display()
        ));
    }
    <(SectionKind, Vec<u8>)>::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{flag} {}: not a valid PEM file: {e}", path.display()))
}

/// The certificates in a PEM file, in order.
fn certificates(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = sections(flag, path)?
        .into_iter()
        .filter(|(k, _)| *k == SectionKind::Certificate)
        .map(|(_, der)| CertificateDer::from(der))
        .collect();
    if certs.is_empty() {
        return Err(format!(
            "{flag} {}: no certificate in it (expected a PEM \"BEGIN CERTIFICATE\" section)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The first private key in a PEM file (PKCS #8, PKCS #1 RSA or SEC1 EC).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    for (kind, der) in sections("--keyfile", path)? {
        let key = match kind {
            SectionKind::PrivateKey => PrivateKeyDer::Pkcs8(der.into()),
            SectionKind::RsaPrivateKey => PrivateKeyDer::Pkcs1(der.into()),
            SectionKind::EcPrivateKey => PrivateKeyDer::Sec1(der.into()),
            _ => continue,
        };
        return Ok(key);
    }
    Err(format!(
        "--keyfile {}: no private key in it (expected a PEM \"BEGIN PRIVATE KEY\", \"BEGIN \
         RSA PRIVATE KEY\" or \"BEGIN EC PRIVATE KEY\" section)",
        path.display()
    ))
}

/// The server configuration: TLS 1.3 and 1.2, ALPN `http/1.1`, the certificate chain and
/// key, and the client verifier for `--client-cert`.
pub(crate) fn server_config(o: &Options) -> Result<Arc<ServerConfig>, String> {
    let chain = certificates("--certfile", &o.certfile)?;
    let key = private_key(&o.keyfile)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match (&o.ca_certs, o.client_cert) {
        (None, ClientCert::None) => builder.with_no_client_auth(),
        (None, _) => {
            return Err(
                "--client-cert needs --ca-certs: the authorities that sign the \
                        clients' certificates"
                    .into(),
            )
        }
        (Some(path), ClientCert::None) => {
            return Err(format!(
                "--ca-certs {}: given with --client-cert none; say --client-cert optional or \
                 required, or leave --ca-certs out",
                path.display()
            ))
        }
        (Some(path), mode) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates("--ca-certs", path)? {
                roots.add(cert).map_err(|e| {
                    format!(
                        "--ca-certs {}: a certificate is not usable: {e}",
                        path.display()
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if mode == ClientCert::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| format!("--ca-certs {}: {e}", path.display()))?,
            )
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "--certfile {} with --keyfile {}: {e}",
            o.certfile.display(),
            o.keyfile.display()
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// One DER element: its tag, its contents, and what follows it.
fn der_element(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        // X.690 §8.1.3.5: the long form, in at most 4 bytes here (certificates are small).
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &d| (acc << 8) | usize::from(d));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// X.690 §8.19: an OBJECT IDENTIFIER's contents, dotted.
fn oid_dotted(b: &[u8]) -> Option<String> {
    let mut arcs = Vec::new();
    let mut v: u64 = 0;
    for &byte in b {
        v = v.checked_mul(128)? | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            arcs.push(v);
            v = 0;
        }
    }
    let (&first, rest) = arcs.split_first()?;
    let (a, b) = match first {
        0..=39 => (0, first),
        40..=79 => (1, first - 40),
        _ => (2, first - 80),
    };
    let mut s = format!("{a}.{b}");
    for arc in rest {
        s.push_str(&format!(".{arc}"));
    }
    Some(s)
}

/// RFC 4514 §3's short names, and OpenSSL's `emailAddress` (what `openssl x509 -subject
/// -nameopt RFC2253` prints, and Apache's `SSL_CLIENT_S_DN`).
fn attribute_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        "1.2.840.113549.1.9.1" => "emailAddress",
        // OpenSSL's short names for the other X.520 attributes certificates carry.
        "2.5.4.4" => "SN",
        "2.5.4.5" => "serialNumber",
        "2.5.4.12" => "title",
        "2.5.4.15" => "businessCategory",
        "2.5.4.17" => "postalCode",
        "2.5.4.42" => "GN",
        "2.5.4.43" => "initials",
        "2.5.4.44" => "generationQualifier",
        "2.5.4.46" => "dnQualifier",
        "2.5.4.65" => "pseudonym",
        "2.5.4.97" => "organizationIdentifier",
        _ => return None,
    })
}

/// A directory string's text: UTF8String, PrintableString, IA5String, TeletexString
/// (taken as Latin-1), BMPString (UTF-16), UniversalString (UTF-32).
fn string_value(tag: u8, b: &[u8]) -> Option<String> {
    match tag {
        0x0c | 0x13 | 0x16 => std::str::from_utf8(b).ok().map(str::to_owned),
        0x14 => Some(b.iter().map(|&c| char::from(c)).collect()),
        0x1e if b.len() % 2 == 0 => {
            let units: Vec<u16> = b
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        0x1c if b.len() % 4 == 0 => b
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => None,
    }
}

/// RFC 4514 §2.4: a value with its special characters escaped.
fn escape_value(v: &str, out: &mut String) {
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' | ' ' if i == 0 => {
                out.push('\\');
                out.push(c);
            }
            ' ' if i == last => out.push_str("\\ "),
            // Control characters as `\XX` (as OpenSSL's RFC 2253 output escapes them), so a
            // subject logged or copied into a header cannot break its line.
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\{:02X}", c as u32));
            }
            c => out.push(c),
        }
    }
}

/// The subject of a DER certificate as an RFC 4514 string (`CN=client,O=Example`: the
/// last RDN first), as `openssl x509 -subject -nameopt RFC2253` prints it for the usual
/// attributes; `None` if the certificate cannot be read.
pub(crate) fn subject_dn(cert: &[u8]) -> Option<String> {
    let (_, certificate, _) = der_element(cert)?;
    let (_, tbs, _) = der_element(certificate)?;
    let mut rest = tbs;
    // RFC 5280 §4.1: [0] version (optional), serialNumber, signature, issuer, validity,
    // subject.
    let (tag, _, after) = der_element(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..4 {
        rest = der_element(rest)?.2;
    }
    let (tag, mut name, _) = der_element(rest)?;
    if tag != 0x30 {
        return None;
    }
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (tag, mut set, next) = der_element(name)?;
        name = next;
        if tag != 0x31 {
            return None;
        }
        // The attributes of one RDN, last first, as OpenSSL prints them.
        let mut atvs: Vec<String> = Vec::new();
        while !set.is_empty() {
            let mut rdn = String::new();
            let (_, atv, next) = der_element(set)?;
            set = next;
            let (tag, oid, value) = der_element(atv)?;
            if tag != 0x06 {
                return None;
            }
            let oid = oid_dotted(oid)?;
            let (vtag, vbytes, _) = der_element(value)?;
            match (attribute_name(&oid), string_value(vtag, vbytes)) {
                (Some(short), Some(text)) => {
                    rdn.push_str(short);
                    rdn.push('=');
                    escape_value(&text, &mut rdn);
                }
                // RFC 4514 §2.4: an unknown type or encoding, dotted and as hex of its
                // BER encoding.
                _ => {
                    rdn.push_str(&oid);
                    rdn.push_str("=#");
                    let whole = &value[..value.len() - der_element(value)?.2.len()];
                    for b in whole {
                        rdn.push_str(&format!("{b:02x}"));
                    }
                }
            }
            atvs.push(rdn);
        }
        atvs.reverse();
        rdns.push(atvs.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER element of `tag` around `content` (short or long length form).
    fn el(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if content.len() < 0x80 {
            v.push(content.len() as u8);
        } else {
            v.push(0x82);
            v.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        v.extend_from_slice(content);
        v
    }

    fn atv(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        el(0x31, &el(0x30, &[el(0x06, oid), el(tag, value)].concat()))
    }

    /// A certificate skeleton whose subject holds `rdns` (the other fields are dummies).
    fn cert_with_subject(rdns: &[Vec<u8>]) -> Vec<u8> {
        let tbs = [
            el(0xa0, &el(0x02, &[2])),
            el(0x02, &[1]),
            el(0x30, &[]),
            el(0x30, &[]),
            el(0x30, &[]),
            el(0x30, &rdns.concat()),
            el(0x30, &[0u8; 200]),
        ]
        .concat();
        el(
            0x30,
            &[el(0x30, &tbs), el(0x30, &[]), el(0x03, &[0])].concat(),
        )
    }

    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0a];
    const C: &[u8] = &[0x55, 0x04, 0x06];

    #[test]
    fn subject_is_rfc4514_last_rdn_first() {
        let cert = cert_with_subject(&[
            atv(C, 0x13, b"FR"),
            atv(O, 0x0c, b"Example, Inc."),
            atv(CN, 0x0c, b"client one"),
        ]);
        assert_eq!(
            subject_dn(&cert).as_deref(),
            Some("CN=client one,O=Example\\, Inc.,C=FR")
        );
    }

    #[test]
    fn special_characters_and_unknown_types_follow_rfc4514() {
        let cert = cert_with_subject(&[
            atv(CN, 0x0c, b" #lead+trail "),
            atv(&[0x2a, 0x03], 0x0c, b"x"),
            atv(CN, 0x1e, &[0, b'h', 0, b'i']),
        ]);
        assert_eq!(
            subject_dn(&cert).as_deref(),
            Some("CN=hi,1.2.3=#0c0178,CN=\\ #lead\\+trail\\ ")
        );
    }

    #[test]
    fn multi_valued_rdns_controls_and_openssl_names_read_as_openssl_prints_them() {
        let ou: &[u8] = &[0x55, 0x04, 0x0b];
        let serial: &[u8] = &[0x55, 0x04, 0x05];
        let multi = el(
            0x31,
            &[
                el(0x30, &[el(0x06, CN), el(0x0c, b"x")].concat()),
                el(0x30, &[el(0x06, ou), el(0x0c, b"y")].concat()),
            ]
            .concat(),
        );
        let cert = cert_with_subject(&[atv(serial, 0x13, b"123"), multi]);
        assert_eq!(
            subject_dn(&cert).as_deref(),
            Some("OU=y+CN=x,serialNumber=123")
        );
        let cert = cert_with_subject(&[atv(CN, 0x0c, b"a\r\nb\x7f")]);
        assert_eq!(subject_dn(&cert).as_deref(), Some("CN=a\\0D\\0Ab\\7F"));
    }

    #[test]
    fn truncated_or_garbage_input_gives_none_without_panicking() {
        let cert = cert_with_subject(&[atv(CN, 0x0c, b"client")]);
        assert_eq!(subject_dn(&cert).as_deref(), Some("CN=client"));
        for cut in 0..cert.len() {
            let _ = subject_dn(&cert[..cut]);
        }
        for i in 0..cert.len() {
            let mut bad = cert.clone();
            bad[i] ^= 0xff;
            let _ = subject_dn(&bad);
        }
        assert_eq!(subject_dn(b""), None);
        assert_eq!(subject_dn(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
    }

    #[test]
    fn oids_are_dotted() {
        assert_eq!(
            oid_dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]).as_deref(),
            Some("1.2.840.113549.1.9.1")
        );
        assert_eq!(oid_dotted(&[0x55, 0x04, 0x03]).as_deref(), Some("2.5.4.3"));
        assert_eq!(oid_dotted(&[]), None);
        assert_eq!(oid_dotted(&[0xff; 12]), None);
    }
}
