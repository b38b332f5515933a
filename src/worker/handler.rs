//! Handler threads (`m0s-handler-N`): each attaches to Python once, then takes requests
//! from its ring and runs the app on them, releasing the GIL only while it waits.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use pyo3::prelude::*;

use crate::pipeline::msg::{Request, Response};
use crate::pipeline::park;
use crate::pipeline::ring::{Consumer, Producer};
use crate::pipeline::shared::{HandlerShared, LoopShared};
use crate::pipeline::stats;
use crate::wsgi::{Bridge, ServerInfo, Sink};

pub(crate) struct HandlerSetup {
    pub(crate) idx: usize,
    pub(crate) rx: Consumer<Box<Request>>,
    pub(crate) tx: Producer<Response>,
    pub(crate) shared: Arc<HandlerShared>,
    pub(crate) loop_shared: Arc<LoopShared>,
    pub(crate) app: App,
    pub(crate) info: Arc<ServerInfo>,
    pub(crate) access_log: Option<Arc<crate::access_log::AccessLog>>,
    /// `--metrics-port`: this thread's section of the shared counters.
    pub(crate) metrics: Option<crate::metrics::Recorder>,
    /// `--scheduling-policy batch`.
    pub(crate) batch_scheduling: bool,
    /// The CPUs it may run on, set first thing (a thread the pool starts from the loop
    /// would otherwise keep the loop's, which may be one CPU beside handler 0).
    pub(crate) cpus: Option<Vec<usize>>,
}

/// The application object a handler calls.
pub(crate) enum App {
    /// Its own reference, made at start.
    Own(Py<PyAny>),
    /// The pool's, for a thread started later: the thread takes its own reference once it
    /// holds the GIL (the loop that starts it never does).
    Shared(Arc<Py<PyAny>>),
}

/// What the loop needs to start a handler thread while it serves (the pool grows past
/// `--blocking-threads` when its threads wait): everything a `HandlerSetup` holds but the
/// thread's own rings and state.
pub(crate) struct Spawner {
    pub(crate) loop_shared: Arc<LoopShared>,
    pub(crate) app: Arc<Py<PyAny>>,
    pub(crate) info: Arc<ServerInfo>,
    pub(crate) access_log: Option<Arc<crate::access_log::AccessLog>>,
    /// `--metrics-port`: the shared counters and this worker's slot, when it has one.
    pub(crate) metrics: Option<(Arc<crate::metrics::Region>, usize)>,
    pub(crate) batch_scheduling: bool,
    /// Keep the busy clock (`--timeout`, a heartbeat).
    pub(crate) watch: bool,
    /// The worker's CPUs, as they were before the loop placed itself.
    pub(crate) cpus: Option<Vec<usize>>,
}

/// A handler thread started by a `Spawner`, and the loop's ends of it.
pub(crate) struct Spawned {
    pub(crate) tx: Producer<Box<Request>>,
    pub(crate) rx: Consumer<Response>,
    pub(crate) shared: Arc<HandlerShared>,
    pub(crate) join: JoinHandle<()>,
}

impl Spawner {
    /// Starts handler thread `idx`.
    pub(crate) fn spawn(&self, idx: usize) -> io::Result<Spawned> {
        let (tx, req_rx) = crate::pipeline::ring::ring(crate::pipeline::shared::REQUEST_RING_SLOTS);
        let (resp_tx, rx) =
            crate::pipeline::ring::ring(crate::pipeline::shared::RESPONSE_RING_SLOTS);
        let shared = Arc::new(HandlerShared::new(idx, self.watch));
        let metrics = self
            .metrics
            .as_ref()
            .filter(|(region, _)| idx < region.handlers())
            .map(|(region, slot)| {
                crate::metrics::Recorder::for_handler(region.clone(), *slot, idx)
            });
        let join = spawn(HandlerSetup {
            idx,
            rx: req_rx,
            tx: resp_tx,
            shared: shared.clone(),
            loop_shared: self.loop_shared.clone(),
            app: App::Shared(self.app.clone()),
            info: self.info.clone(),
            access_log: self.access_log.clone(),
            metrics,
            batch_scheduling: self.batch_scheduling,
            cpus: self.cpus.clone(),
        })?;
        Ok(Spawned {
            tx,
            rx,
            shared,
            join,
        })
    }
}

/// Responses a handler pushes, with more requests queued behind each, before it wakes a
/// sleeping loop for them.
const LOOP_WAKE_BATCH: usize = 8;

pub(crate) fn spawn(setup: HandlerSetup) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("m0s-handler-{}", setup.idx))
        .spawn(move || run(setup))
}

fn run(setup: HandlerSetup) {
    let HandlerSetup {
        idx: _,
        mut rx,
        tx,
        shared,
        loop_shared,
        app,
        info,
        access_log,
        metrics,
        batch_scheduling,
        cpus,
    } = setup;
    if let Some(cpus) = cpus {
        if let Err(e) = crate::sys::set_own_cpus(&cpus) {
            crate::log::warning!("a new handler thread cannot run on the worker's CPUs: {e}");
        }
    }
    // Relaxed: see `HandlerShared::tid`.
    shared.tid.store(crate::sys::gettid(), Ordering::Relaxed);
    if batch_scheduling {
        super::enter_batch_scheduling("handler");
    }
    // Pinned to one CPU (`--cpu-affinity`, `taskset`), waiting spins for nothing; so it
    // does while the loop runs beside it (`adaptive`, looked at before each wait).
    let may_spin = crate::sys::allowed_cpus().map_or(true, |cpus| cpus.len() > 1);
    let loop_waker = loop_shared.clone();
    // Wakes the loop (if it sleeps) for the responses whose wake was deferred: once the
    // ring is empty, or once a batch of them and of quiet connections' news is owed.
    let pay_owed = |all: bool| {
        let owed = shared.wake_owed.load(Ordering::Relaxed);
        let quiet = shared.quiet_owed.load(Ordering::Relaxed);
        if (all && owed > 0) || owed + quiet >= LOOP_WAKE_BATCH {
            shared.wake_owed.store(0, Ordering::Relaxed);
            shared.quiet_owed.store(0, Ordering::Relaxed);
            if loop_waker.notify() {
                stats::bump(&shared.counters.loop_wakes, 1);
            }
        }
    };
    Python::attach(|py| {
        let app = match app {
            App::Own(app) => app,
            App::Shared(app) => app.clone_ref(py),
        };
        let mut bridge = match Bridge::new(
            py,
            app,
            Sink::Ring(tx),
            shared.clone(),
            loop_shared,
            &info,
            crate::wsgi::Observers {
                access_log,
                metrics,
            },
        ) {
            Ok(b) => b,
            Err(e) => {
                crate::log::error!("cannot set up the WSGI bridge: {e}");
                crate::python::print_exception(py, &e);
                return;
            }
        };
        // When the piece of work about to begin began.
        let mut mark = stats::mono_ns();
        loop {
            // Relaxed: see `HandlerShared::cpu`; stored only when it changed.
            if shared.placing.load(Ordering::Relaxed) {
                if let Some(cpu) = crate::sys::current_cpu() {
                    if shared.cpu.load(Ordering::Relaxed) != cpu {
                        shared.cpu.store(cpu, Ordering::Relaxed);
                    }
                }
            }
            shared.set_work_since(mark);
            if bridge.step(py, &mut rx) {
                // How long its work takes: whether the loop queues requests behind it. One
                // clock reading ends this piece and begins the next.
                let now = stats::mono_ns();
                shared.note_service(now.saturating_sub(mark));
                mark = now;
                // Body items the loop wrote without copying are released here (their
                // references were dropped on the loop thread, off the GIL).
                crate::python::drop_deferred_refs(py);
                pay_owed(rx.is_empty());
                continue;
            }
            shared.set_work_since(0);
            pay_owed(true);
            // Acquire: pairs with the loop's Release store when it stops; every request it
            // pushed before is visible to the `pop` that follows.
            if shared.stop.load(Ordering::Acquire) {
                if rx.is_empty() || !bridge.takes_requests() {
                    break;
                }
                continue;
            }
            shared.busy.idle();
            // Lines of the access log go out before a wait, not one write per request.
            bridge.flush_log();
            // Nothing to do: wait with the GIL released (other Python threads run), spinning
            // briefly, then parked until the loop pushes a request, or writes some of a body
            // set aside (or closes its connection), and sees our flag.
            let waiting = &rx;
            let flag = &shared;
            let credits = bridge.credits();
            // (A handler with its deferred requests full waits for a body, not the ring.)
            let takes = bridge.takes_requests();
            // Relaxed: see `HandlerShared::cpu`.
            park::set_spin(may_spin && !shared.loop_beside.load(Ordering::Relaxed));
            let parks = py.detach(move || {
                park::wait_until(&flag.wake, || {
                    (takes && !waiting.is_empty())
                        || flag.stop.load(Ordering::Acquire)
                        || credits.iter().any(|c| c.can_go_on())
                })
            });
            stats::bump(&shared.counters.parks, u64::from(parks));
            mark = stats::mono_ns();
        }
        bridge.abandon(py);
        crate::python::flush_stdio(py);
    });
}
