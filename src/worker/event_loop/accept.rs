//! Taking connections: from every listener a batch each pass, from the metrics port all
//! that wait, and what happens when the process runs out of descriptors.

use std::io;
use std::time::{Duration, Instant};

use mio::Interest;

use super::{conn_token, EventLoop, Slot, MAX_SLOTS, METRICS_MAX_CONNECTIONS};
use crate::log;
use crate::metrics::Refused;
use crate::pipeline::msg::{ConnRef, Peer};
use crate::sys::listen::Listener;
use crate::worker::conn::{Conn, Sock};
use crate::worker::tls::TlsStream;

/// Connections one accept pass takes when other workers share the listening socket. Every
/// worker is woken for a new connection; taking a few each per pass (and the rest on the
/// next pass) spreads a burst of connections over the workers instead of the first one
/// awake taking them all (BENCHMARKS.md, "workers").
pub(super) const ACCEPT_BATCH_SHARED: usize = 4;

/// The same, for a worker alone on its socket: take all that is waiting.
pub(super) const ACCEPT_BATCH_ALONE: usize = 1024;

/// At most one log line per this long about failing accepts (descriptors exhausted, say).
const ACCEPT_ERROR_LOG_EVERY: Duration = Duration::from_secs(1);

/// Accept failures counted between two log lines.
#[derive(Default)]
pub(super) struct AcceptErrors {
    logged_at: Option<Instant>,
    since_logged: u64,
    /// The last one's message.
    last: String,
}

impl EventLoop {
    /// Takes new connections from every listener, a batch from each.
    pub(super) fn accept(&mut self) {
        self.accept_more = false;
        for i in 0..self.listeners.len() {
            self.accept_from(i);
        }
    }

    pub(super) fn accept_from(&mut self, i: usize) {
        for _ in 0..self.accept_batch {
            let Some(listener) = self.listeners.get(i) else {
                return;
            };
            if self.conns - self.metrics_conns - self.lingering_conns >= self.max_connections
                || (self.free.is_empty() && self.slots.len() >= MAX_SLOTS)
            {
                // `--max-connections`: the rest wait in the kernel's backlog until a
                // connection closes (`close` accepts again).
                self.accept_blocked = true;
                return;
            }
            let accepted = match listener {
                Listener::Tcp(l) => l.accept().and_then(|(s, addr)| {
                    // Responses are written whole; Nagle would only delay them.
                    let _ = s.set_nodelay(true);
                    let sock = match self.tls.get(i).and_then(Option::as_ref) {
                        Some(config) => Sock::Tls(Box::new(TlsStream::new(s, config)?)),
                        None => Sock::Tcp(s),
                    };
                    Ok((sock, Peer::Tcp(addr)))
                }),
                Listener::Unix(l, ..) => l.accept().map(|(s, _)| (Sock::Unix(s), Peer::Unix)),
            };
            match accepted {
                // (At most `MAX_LISTENERS`, 64, so the index fits.)
                Ok((sock, peer)) => self.add_conn(sock, peer, Some(i as u8)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: the connection stays in the backlog; retry when
                    // a connection closes (or on the next edge) rather than spin.
                    self.accept_failed("accept", &e);
                    return;
                }
            }
        }
        // The batch is spent and more may be waiting (no WouldBlock seen, so no new edge
        // will say so): take more on the next pass, after this one's work.
        self.accept_more = true;
    }

    /// An accept failed for lack of a resource (descriptors, memory): retried when a
    /// connection closes. Under churn that is often, so the log gets the first failure,
    /// then at most a line a second counting the others (`report_accept_failures`).
    pub(super) fn accept_failed(&mut self, what: &str, e: &io::Error) {
        self.accept_blocked = true;
        let now = self.now;
        let errors = &mut self.accept_errors;
        errors.since_logged += 1;
        errors.last = format!("{what} failed: {e}");
        if errors
            .logged_at
            .is_none_or(|t| now.saturating_duration_since(t) >= ACCEPT_ERROR_LOG_EVERY)
        {
            self.report_accept_failures();
        }
    }

    /// Logs the accept failures since the last line (at most one line a second): the
    /// count, and the last one's cause.
    pub(super) fn report_accept_failures(&mut self) {
        let now = self.now;
        let e = &mut self.accept_errors;
        if e.since_logged == 0
            || e.logged_at
                .is_some_and(|t| now.saturating_duration_since(t) < ACCEPT_ERROR_LOG_EVERY)
        {
            return;
        }
        match std::mem::take(&mut e.since_logged) {
            1 => log::warning!("{}", e.last),
            n => log::warning!(
                "{n} accepts failed since the last report; the last: {}",
                e.last
            ),
        }
        e.logged_at = Some(now);
    }

    /// Takes the scrapes waiting on the metrics port (few, so all of them).
    pub(super) fn accept_metrics(&mut self) {
        loop {
            let Some(Listener::Tcp(l)) = &self.metrics_listener else {
                return;
            };
            // Scrapes and probes have a small cap of their own, so a server full of
            // clients still answers them (and a flood of scrapes takes no client's place).
            if self.metrics_conns >= METRICS_MAX_CONNECTIONS {
                self.accept_blocked = true;
                return;
            }
            match l.accept() {
                Ok((s, addr)) => {
                    let _ = s.set_nodelay(true);
                    self.add_conn(Sock::Tcp(s), Peer::Tcp(addr), None);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    // EMFILE and friends: retry when a connection closes, as `accept_from`.
                    self.accept_failed("accept on the metrics port", &e);
                    return;
                }
            }
        }
    }

    /// `listener`: the index of the listener that accepted it; `None` for the metrics port.
    pub(super) fn add_conn(&mut self, sock: Sock, peer: Peer, listener: Option<u8>) {
        let metrics = listener.is_none();
        let proxy_header = !metrics && self.proxy_protocol.is_some();
        if let (false, Some(trusted)) = (metrics, &self.proxy_protocol) {
            // Only a trusted proxy may say who the client is; anyone else is closed now
            // (dropping the socket), before a byte is read.
            let allowed = match peer {
                Peer::Tcp(addr) => trusted.contains(addr.ip()),
                Peer::Unix => !trusted.is_empty(),
            };
            if !allowed {
                log::debug!("--proxy-protocol: {peer:?} is not in --proxy-allow-from: closed");
                if let Some(m) = &self.metrics {
                    m.section().count_refused(Refused::ProxyUntrusted);
                }
                return;
            }
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                let slot = self.slots.len() as u32;
                // Below MAX_SLOTS, which the accept checked: always opens.
                if !self.shared.departures.open(slot) {
                    return;
                }
                self.slots.push(Slot { gen: 0, conn: None });
                slot
            }
        };
        let gen = self.slots[slot as usize].gen;
        let mut conn = Box::new(Conn::new(
            sock,
            ConnRef { slot, gen },
            peer,
            listener,
            self.now,
        ));
        if proxy_header {
            conn.expect_proxy_header();
        }
        let token = conn_token(ConnRef { slot, gen });
        if let Err(e) = self.poll.registry().register(
            conn.source(),
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            log::warning!("cannot register a connection: {e}");
            self.free.push(slot);
            return;
        }
        self.slots[slot as usize].conn = Some(conn);
        self.conns += 1;
        self.metrics_conns += usize::from(metrics);
        self.count_connections();
    }

    /// The metrics' connections gauge, after a connection came or went.
    pub(super) fn count_connections(&self) {
        if let Some(m) = &self.metrics {
            m.section().set_connections(self.conns - self.metrics_conns);
        }
    }
}
