//! The answers the loop makes itself, without the app: `--static-response`'s hello, a
//! scrape of `--metrics-port`, the 404 for a request outside `--root-path`, the 503 for
//! one that waits too long (`--max-queue-wait`), the files of `--static-map`
//! (`statics`). Each is queued on its connection like a handler's response.

use std::sync::Arc;

use crate::http::date::DateCache;
use crate::http::encode::simple_response;
use crate::http::percent;
use crate::pipeline::msg::Request;
use crate::worker::conn::Conn;

pub(super) struct Answers {
    /// The `Date` value, re-rendered once a second (also for reading's own refusals).
    pub(crate) date: DateCache,
    /// `--root-path`, when the loop answers requests outside it with 404.
    root_path: Option<String>,
    /// The counters every worker shares, for scrapes (`None`: this worker could not map
    /// them, and `/metrics` says so).
    metrics_region: Option<Arc<crate::metrics::Region>>,
    /// `--static-map`: the files the loop answers itself.
    statics: Option<super::statics::StaticFiles>,
}

impl Answers {
    pub(super) fn new(root_path: Option<String>) -> Answers {
        Answers {
            date: DateCache::new(),
            root_path,
            metrics_region: None,
            statics: None,
        }
    }

    /// `--static-map`'s files, logged to `log` when there is an access log.
    pub(super) fn set_static_files(
        &mut self,
        statics: Option<super::statics::StaticFiles>,
        log: Option<Arc<crate::access_log::AccessLog>>,
    ) {
        self.statics = statics;
        if let (Some(s), Some(log)) = (self.statics.as_mut(), log) {
            s.log_to(log);
        }
    }

    /// The `--static-map` mount `req` is under, if any.
    pub(super) fn static_mount(&self, req: &Request) -> Option<u8> {
        self.statics.as_ref()?.mount_of(req)
    }

    /// A file of mount `m` (`static_mount`): queued on `conn`, logged; its status.
    pub(super) fn static_file(
        &mut self,
        conn: &mut Conn,
        req: &Request,
        m: u8,
        now: std::time::Instant,
    ) -> u16 {
        match self.statics.as_mut() {
            Some(s) => s.answer(conn, req, m, self.date.get(), now),
            None => 404,
        }
    }

    /// Writes the static files' buffered access log lines (before the loop sleeps).
    pub(super) fn flush_log(&mut self) {
        if let Some(s) = self.statics.as_mut() {
            s.flush_log();
        }
    }

    pub(super) fn set_metrics_region(&mut self, region: Option<Arc<crate::metrics::Region>>) {
        self.metrics_region = region;
    }

    /// A scrape's request: answered from the shared counters.
    pub(super) fn metrics(&mut self, conn: &mut Conn, req: &Request) {
        let out = crate::metrics::http_answer(
            self.metrics_region.as_deref(),
            req.head.target.get(&req.data),
            req.head.keep_alive,
            is_head(req),
            self.date.get(),
        );
        conn.answer(out);
    }

    /// `--static-response`: what the hello-world app answers, without Python; the loop's
    /// ceiling, with the same per-request buffer as a real response.
    pub(super) fn hello(&mut self, conn: &mut Conn, req: &Request) {
        self.plain(conn, req, 200, "OK", b"Hello, World!");
    }

    /// A request outside `--root-path`: 404.
    pub(super) fn outside_root(&mut self, conn: &mut Conn, req: &Request) {
        self.plain(conn, req, 404, "Not Found", b"Not Found");
    }

    /// A request shed for its wait (`--max-queue-wait`): 503, try again in a second.
    pub(super) fn busy(&mut self, conn: &mut Conn, req: &Request) {
        let out = crate::http::encode::simple_response_with(
            503,
            "Service Unavailable",
            "text/plain",
            b"Retry-After: 1\r\n",
            b"Service Unavailable: the server is too busy to answer in time; retry shortly\n",
            req.head.keep_alive,
            is_head(req),
            self.date.get(),
        );
        conn.answer(out);
    }

    /// Whether `req` is for the app under `--root-path` (always, without one; `OPTIONS *`
    /// too).
    pub(super) fn within_root(&self, req: &Request) -> bool {
        let Some(root) = &self.root_path else {
            return true;
        };
        let (path, _) = percent::split_target(req.head.target.get(&req.data));
        path == b"*" || percent::under_root(path, root.as_bytes()).is_some()
    }

    fn plain(&mut self, conn: &mut Conn, req: &Request, status: u16, reason: &str, body: &[u8]) {
        let out = simple_response(
            status,
            reason,
            "text/plain",
            body,
            req.head.keep_alive,
            is_head(req),
            self.date.get(),
        );
        conn.answer(out);
    }
}

fn is_head(req: &Request) -> bool {
    req.head.method.get(&req.data) == b"HEAD"
}
