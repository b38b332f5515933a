//! Taking connections: from every listener a batch each pass, from the metrics port all
//! that wait, and what happens when the process runs out of descriptors. The `Acceptor`
//! owns the listening sockets and decides what to take; the loop gives each connection a
//! slot (`EventLoop::add_conn`).

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Interest, Registry, Token};

use super::conns::{conn_token, FIRST_LISTENER, METRICS};
use super::EventLoop;
use crate::http::trusted::Trusted;
use crate::log;
use crate::metrics::Refused;
use crate::pipeline::msg::Peer;
use crate::sys::listen::{Listener, MAX_LISTENERS};
use crate::worker::conn::{Conn, Sock};
use crate::worker::tls::TlsStream;

/// Connections one accept pass takes when other workers share the listening socket. Every
/// worker is woken for a new connection; taking a few each per pass (and the rest on the
/// next pass) spreads a burst of connections over the workers instead of the first one
/// awake taking them all (benchmarks/decisions.md, "workers").
const ACCEPT_BATCH_SHARED: usize = 4;

/// The same, for a worker alone on its socket: take all that is waiting.
const ACCEPT_BATCH_ALONE: usize = 1024;

/// A worker that would shed the next request leaves new connections this long to another
/// worker on the same socket (every worker was woken for them) before it takes them.
const ACCEPT_DEFER: Duration = Duration::from_millis(5);

/// The same, for a worker whose every handler is on a long piece of work: it would serve
/// nothing soon, and another worker's loop may need a moment to run on a busy host.
const ACCEPT_DEFER_STUCK: Duration = Duration::from_millis(100);

/// Most connections to the metrics port one worker holds (outside `--max-connections`).
const METRICS_MAX_CONNECTIONS: usize = 16;

/// At most one log line per this long about failing accepts (descriptors exhausted, say).
const ACCEPT_ERROR_LOG_EVERY: Duration = Duration::from_secs(1);

/// Accept failures counted between two log lines.
#[derive(Default)]
struct AcceptErrors {
    logged_at: Option<Instant>,
    since_logged: u64,
    /// The last one's message.
    last: String,
}

/// What one accept gave.
enum Accepted {
    Conn(Sock, Peer),
    /// Nothing more now (the backlog is empty, or the accept failed: said in the log).
    Stop,
    /// Interrupted: try again.
    Again,
}

pub(super) struct Acceptor {
    /// Every socket this worker accepts on (`--bind`, repeatable); empty once stopping.
    listeners: Vec<Listener>,
    /// `--metrics-port`'s listener (until a stop).
    metrics: Option<Listener>,
    /// Per listener: the TLS configuration its connections speak, if any.
    tls: Vec<Option<Arc<rustls::ServerConfig>>>,
    /// `--proxy-protocol`: the peers that may send the header (and so connect at all).
    proxy_protocol: Option<Trusted>,
    /// Connections taken per accept pass (`ACCEPT_BATCH_SHARED` when workers share the
    /// socket, so each takes its turn).
    batch: usize,
    /// The last accept failed, or stopped at a limit: retry after a close.
    pub(crate) blocked: bool,
    /// The last accept pass stopped at its batch, not at `WouldBlock`.
    pub(crate) more: bool,
    /// Accepting waits until then: this worker sheds, another may take them first.
    pub(crate) deferred: Option<Instant>,
    errors: AcceptErrors,
}

impl Acceptor {
    /// Registers the listeners with the poller.
    pub(super) fn new(
        mut listeners: Vec<Listener>,
        registry: &Registry,
        opts: &super::LoopOptions,
    ) -> io::Result<Acceptor> {
        if listeners.len() > MAX_LISTENERS {
            return Err(io::Error::other(format!(
                "more than {MAX_LISTENERS} listeners"
            )));
        }
        for (i, listener) in listeners.iter_mut().enumerate() {
            registry.register(
                listener.source(),
                Token(FIRST_LISTENER + i),
                Interest::READABLE,
            )?;
        }
        Ok(Acceptor {
            listeners,
            metrics: None,
            tls: opts.tls.clone(),
            proxy_protocol: opts.proxy_protocol.clone(),
            batch: if opts.shared_listener {
                ACCEPT_BATCH_SHARED
            } else {
                ACCEPT_BATCH_ALONE
            },
            blocked: false,
            more: false,
            deferred: None,
            errors: AcceptErrors::default(),
        })
    }

    /// `--metrics-port`: also accept scrapes from `listener`.
    pub(super) fn set_metrics(
        &mut self,
        mut listener: Listener,
        registry: &Registry,
    ) -> io::Result<()> {
        registry.register(listener.source(), METRICS, Interest::READABLE)?;
        self.metrics = Some(listener);
        Ok(())
    }

    /// A graceful stop: no more connections; scrapes go to the workers still serving (a
    /// reload's new ones).
    pub(super) fn close(&mut self, registry: &Registry) {
        let metrics = self.metrics.take();
        for mut l in std::mem::take(&mut self.listeners)
            .into_iter()
            .chain(metrics)
        {
            let _ = registry.deregister(l.source());
        }
    }

    /// Whether a token is one of the app's listeners'.
    pub(super) fn is_listener(t: Token) -> bool {
        (FIRST_LISTENER..FIRST_LISTENER + MAX_LISTENERS).contains(&t.0)
    }

    /// The next connection waiting on listener `i`.
    fn next(&mut self, i: usize, now: Instant) -> Accepted {
        let Some(listener) = self.listeners.get(i) else {
            return Accepted::Stop;
        };
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
            Listener::Unix { listener, .. } => {
                listener.accept().map(|(s, _)| (Sock::Unix(s), Peer::Unix))
            }
        };
        self.outcome(accepted, "accept", now)
    }

    /// The next scrape waiting on the metrics port, if it has room for one.
    fn next_scrape(&mut self, open: usize, now: Instant) -> Accepted {
        let Some(Listener::Tcp(l)) = &self.metrics else {
            return Accepted::Stop;
        };
        // Scrapes and probes have a small cap of their own, so a server full of clients
        // still answers them (and a flood of scrapes takes no client's place).
        if open >= METRICS_MAX_CONNECTIONS {
            self.blocked = true;
            return Accepted::Stop;
        }
        let accepted = l.accept().map(|(s, addr)| {
            let _ = s.set_nodelay(true);
            (Sock::Tcp(s), Peer::Tcp(addr))
        });
        self.outcome(accepted, "accept on the metrics port", now)
    }

    fn outcome(&mut self, r: io::Result<(Sock, Peer)>, what: &str, now: Instant) -> Accepted {
        match r {
            Ok((sock, peer)) => Accepted::Conn(sock, peer),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Accepted::Stop,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Accepted::Again,
            Err(e) => {
                // EMFILE and friends: the connection stays in the backlog; retry when a
                // connection closes (or on the next edge) rather than spin.
                self.failed(what, &e, now);
                Accepted::Stop
            }
        }
    }

    /// Whether `peer` may connect: behind `--proxy-protocol`, only a trusted proxy may say
    /// who the client is; anyone else is closed at once, before a byte is read.
    fn admits(&self, peer: Peer) -> bool {
        let Some(trusted) = &self.proxy_protocol else {
            return true;
        };
        match peer {
            Peer::Tcp(addr) => trusted.contains(addr.ip()),
            Peer::Unix => !trusted.is_empty(),
        }
    }

    /// An accept failed for lack of a resource (descriptors, memory): retried when a
    /// connection closes. Under churn that is often, so the log gets the first failure,
    /// then at most a line a second counting the others (`report_failures`).
    fn failed(&mut self, what: &str, e: &io::Error, now: Instant) {
        self.blocked = true;
        let errors = &mut self.errors;
        errors.since_logged += 1;
        errors.last = format!("{what} failed: {e}");
        if errors
            .logged_at
            .is_none_or(|t| now.saturating_duration_since(t) >= ACCEPT_ERROR_LOG_EVERY)
        {
            self.report_failures(now);
        }
    }

    /// Logs the accept failures since the last line (at most one line a second): the
    /// count, and the last one's cause.
    pub(super) fn report_failures(&mut self, now: Instant) {
        let e = &mut self.errors;
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
}

impl EventLoop {
    /// Takes new connections from every listener, a batch from each.
    pub(super) fn accept(&mut self) {
        self.acceptor.more = false;
        let Some(batch) = self.accept_batch() else {
            return;
        };
        for i in 0..self.acceptor.listeners.len() {
            self.accept_from(i, batch);
        }
    }

    /// Whether to leave the connections waiting to another worker for now: one shares the
    /// socket, and a request read now would be shed (`Admission::admits`), or every handler
    /// is on a long piece of work (stuck on a slow request, it would serve nothing soon).
    /// They are taken a moment later if still there (`ACCEPT_DEFER`), all of them: no other
    /// worker had room. So none waits while a worker has room, and none waits long when
    /// none has. The connections to take per listener now; `None` to wait.
    fn accept_batch(&mut self) -> Option<usize> {
        if !self.opts.shared_listener {
            return Some(self.acceptor.batch);
        }
        let stuck = self.handlers.all_on_long_work(self.clock.now_ns());
        if self.work.admission.admits(self.waiting()) && !stuck {
            self.acceptor.deferred = None;
            return Some(self.acceptor.batch);
        }
        match self.acceptor.deferred {
            Some(t) if self.clock.now >= t => {
                self.acceptor.deferred = None;
                Some(ACCEPT_BATCH_ALONE)
            }
            Some(_) => None,
            None => {
                let wait = if stuck {
                    ACCEPT_DEFER_STUCK
                } else {
                    ACCEPT_DEFER
                };
                self.acceptor.deferred = Some(self.clock.now + wait);
                None
            }
        }
    }

    fn accept_from(&mut self, i: usize, batch: usize) {
        let mut taken = 0;
        while taken < batch {
            if self.conns.counts().serving() >= self.opts.max_connections || !self.conns.has_room()
            {
                // `--max-connections`: the rest wait in the kernel's backlog until a
                // connection closes (`close` accepts again).
                self.acceptor.blocked = true;
                return;
            }
            match self.acceptor.next(i, self.clock.now) {
                Accepted::Conn(sock, peer) => {
                    taken += 1;
                    // (At most `MAX_LISTENERS`, 64, so the index fits.)
                    self.add_conn(sock, peer, Some(i as u8));
                }
                Accepted::Again => {}
                Accepted::Stop => return,
            }
        }
        // The batch is spent and more may be waiting (no WouldBlock seen, so no new edge
        // will say so): take more on the next pass, after this one's work.
        self.acceptor.more = true;
    }

    /// Takes the scrapes waiting on the metrics port (few, so all of them).
    pub(super) fn accept_metrics(&mut self) {
        loop {
            match self
                .acceptor
                .next_scrape(self.conns.counts().metrics, self.clock.now)
            {
                Accepted::Conn(sock, peer) => self.add_conn(sock, peer, None),
                Accepted::Again => {}
                Accepted::Stop => return,
            }
        }
    }

    /// `listener`: the index of the listener that accepted it; `None` for the metrics port.
    fn add_conn(&mut self, sock: Sock, peer: Peer, listener: Option<u8>) {
        let app = listener.is_some();
        if app && !self.acceptor.admits(peer) {
            log::debug!("--proxy-protocol: {peer:?} is not in --proxy-allow-from: closed");
            self.outlets.count_refused(Refused::ProxyUntrusted);
            return;
        }
        // Below the table's size, which the accept checked: always there.
        let Some(me) = self.conns.reserve(&self.shared.departures) else {
            return;
        };
        let mut conn = Box::new(Conn::new(sock, me, peer, listener, self.clock.now));
        if app && self.acceptor.proxy_protocol.is_some() {
            conn.expect_proxy_header();
        }
        let registered = self.poller.registry().register(
            conn.source(),
            conn_token(me),
            Interest::READABLE | Interest::WRITABLE,
        );
        if let Err(e) = registered {
            log::warning!("cannot register a connection: {e}");
            self.conns.unreserve(me);
            return;
        }
        self.conns.insert(conn);
        self.outlets.count_connections(self.conns.counts());
    }

    /// A descriptor was freed (or a place under `--max-connections`): if accepting stopped
    /// for lack of them, take the connections waiting in the backlog.
    pub(super) fn accept_again(&mut self) {
        if std::mem::take(&mut self.acceptor.blocked) {
            self.accept();
            self.accept_metrics();
        }
    }
}
