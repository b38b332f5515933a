//! A TLS connection's transport on the loop thread: rustls (sans I/O) between the socket
//! and the connection's buffers. Reads decrypt into the connection's read buffer; writes
//! encrypt into rustls's own buffer (bounded: a write takes no more once a record batch
//! waits for the socket), which is written out as the socket takes it. The handshake is
//! driven by the same reads and writes, so it never blocks the loop.

use std::io::{self, IoSlice, Read, Write};
use std::sync::Arc;

use rustls::ServerConnection;

/// The body of the plain-text 400 that plain HTTP to a TLS port gets before the close: what
/// curl or a browser shows to someone who typed `http://` for an `https://` address.
pub(crate) const PLAIN_HTTP_BODY: &[u8] = b"This port speaks HTTPS: use an https:// address.\r\n";

/// Why a TLS connection failed before its handshake completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Plain HTTP came to the TLS port.
    PlainHttp,
    /// The handshake failed (no common version or cipher, a client certificate refused,
    /// an alert from the client, garbage).
    Handshake,
}

/// A failed handshake, for the log: at debug, but for the one mistake of the server's
/// own setup that a client's failure shows, said once at error level: rustls (webpki)
/// refuses X.509 version 1 certificates, which `openssl x509 -req` still makes when no
/// extension is given, so a CA that issued those locks every such client out.
pub(crate) fn log_handshake_failure(peer: &dyn std::fmt::Debug, e: &io::Error) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let v1 = e.to_string().contains("UnsupportedCertVersion");
    // Relaxed: a flag for one message; nothing is published with it.
    if v1 && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::log::error!(
            "TLS handshake from {peer:?} failed: its client certificate is X.509 version 1, \
             which m0serve (rustls) refuses: only version 3 is accepted. Reissue the client \
             certificates as version 3 (with openssl, sign them with an extension, such as \
             `-extfile` holding `extendedKeyUsage=clientAuth`). Said once; later ones at debug"
        );
        return;
    }
    crate::log::debug!("TLS handshake from {peer:?} failed: {e}");
}

pub struct TlsStream {
    tcp: mio::net::TcpStream,
    tls: ServerConnection,
    /// The first byte the client sent, to tell plain HTTP from a broken handshake.
    first_byte: Option<u8>,
    /// The socket said end of stream.
    eof: bool,
    /// The handshake is complete (and the client's certificate, if any, read).
    established: bool,
    /// The verified client certificate's subject (RFC 4514), for every request's environ.
    client_dn: Option<Arc<str>>,
    /// How the handshake failed, once it has.
    failure: Option<Failure>,
    /// Plain HTTP came: from here bytes go to the socket as they are (the plain-text
    /// answer, then a lingering close), with no TLS.
    plain: bool,
    /// close_notify is queued (`close_notify`).
    closing: bool,
}

/// Reads from the socket for rustls, noting the first byte the client sent.
struct Recording<'a> {
    tcp: &'a mut mio::net::TcpStream,
    first_byte: &'a mut Option<u8>,
}

impl Read for Recording<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.tcp.read(buf)?;
        if n > 0 && self.first_byte.is_none() {
            *self.first_byte = Some(buf[0]);
        }
        Ok(n)
    }
}

impl TlsStream {
    pub(crate) fn new(
        tcp: mio::net::TcpStream,
        config: &Arc<rustls::ServerConfig>,
    ) -> io::Result<Self> {
        let tls = ServerConnection::new(config.clone()).map_err(io::Error::other)?;
        Ok(TlsStream {
            tcp,
            tls,
            first_byte: None,
            eof: false,
            established: false,
            client_dn: None,
            failure: None,
            plain: false,
            closing: false,
        })
    }

    pub(crate) fn tcp(&self) -> &mio::net::TcpStream {
        &self.tcp
    }

    pub(crate) fn tcp_mut(&mut self) -> &mut mio::net::TcpStream {
        &mut self.tcp
    }

    pub(crate) fn client_dn(&self) -> Option<&Arc<str>> {
        self.client_dn.as_ref()
    }

    pub(crate) fn failure(&self) -> Option<Failure> {
        self.failure
    }

    /// Decrypted bytes into `buf`, as many as are there and the socket has without
    /// blocking. A short count means the socket said `WouldBlock` (or end of stream): the
    /// connection's "drained" rule holds as for a plain socket. `Ok(0)` is the end of the
    /// stream (the client's close_notify, or its TCP close).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        loop {
            if n == buf.len() {
                return Ok(n);
            }
            match self.tls.reader().read(&mut buf[n..]) {
                // close_notify: the clean end.
                Ok(0) => return Ok(n),
                Ok(k) => {
                    n += k;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The TCP stream ended without close_notify: an end of stream all the same
                // (HTTP frames its own messages, so truncation is seen there).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(n),
                Err(e) => return Err(e),
            }
            if self.eof {
                return Ok(n);
            }
            let got = self.tls.read_tls(&mut Recording {
                tcp: &mut self.tcp,
                first_byte: &mut self.first_byte,
            });
            match got {
                Ok(0) => self.eof = true,
                Ok(_) => self.process()?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return if n > 0 { Ok(n) } else { Err(e) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs rustls over the records read: handshake messages are answered (written now,
    /// or when the socket next takes them), a failure is classified and sent its alert.
    fn process(&mut self) -> io::Result<()> {
        if let Err(e) = self.tls.process_new_packets() {
            let plain =
                !self.established && self.first_byte.is_some_and(|b| b.is_ascii_uppercase());
            if plain {
                // The connection queues the plain-text answer and closes as any refusal,
                // lingering so the request's unread bytes do not turn the close into a
                // reset that destroys the answer.
                self.failure = Some(Failure::PlainHttp);
                self.plain = true;
            } else {
                if !self.established {
                    self.failure = Some(Failure::Handshake);
                }
                // The alert rustls queued for the client, as far as the socket takes it.
                let _ = self.write_pending();
            }
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        if !self.established && !self.tls.is_handshaking() {
            self.established = true;
            self.client_dn = self
                .tls
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| crate::tls::subject_dn(c))
                .map(Arc::from);
        }
        if self.tls.wants_write() {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Writes the records rustls holds. `Ok(true)` when none is left.
    pub(crate) fn write_pending(&mut self) -> io::Result<bool> {
        while !self.plain && self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Records are waiting for the socket.
    pub(crate) fn has_pending(&self) -> bool {
        !self.plain && self.tls.wants_write()
    }

    /// Encrypts what rustls's buffer takes of `bufs` and writes what the socket takes.
    /// `WouldBlock` while earlier records still wait for the socket, so rustls holds at
    /// most one batch.
    pub(crate) fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.plain {
            return self.tcp.write_vectored(bufs);
        }
        if !self.write_pending()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.tls.writer().write_vectored(bufs)?;
        self.write_pending()?;
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    /// Queues close_notify (once) and writes what the socket takes: `Ok(true)` once all of
    /// it is written and the TCP half-close may follow, `Ok(false)` to wait for the socket
    /// (so that a full send buffer does not lose the alert: without it a strict client
    /// takes a body delimited by the close for a truncated one).
    pub(crate) fn close_notify(&mut self) -> io::Result<bool> {
        if !self.plain && !self.closing {
            self.closing = true;
            self.tls.send_close_notify();
        }
        self.write_pending()
    }

    /// The TCP half-close, after `close_notify`.
    pub(crate) fn shutdown_write(&mut self) {
        let _ = self.tcp.shutdown(std::net::Shutdown::Write);
    }
}
