//! m0serve: a WSGI (PEP 3333) application server.
//!
//! One mio event-loop thread ([`event_loop`]) owns every socket and never runs Python;
//! handler threads ([`handler`]) hold the GIL while they run the app. The two meet through
//! lock-free SPSC rings ([`ring`]) with a park-only-if-parked handshake ([`park`]).
//! `docs/architecture.md` walks one request through these modules.

// Under `--cfg loom` only the lock-free core is built: the models in `pipeline::ring` and
// `pipeline::park` exercise it, and nothing else may run on loom's atomics.
#[cfg(not(loom))]
pub mod access_log;
#[cfg(not(loom))]
pub mod cli;
#[cfg(not(loom))]
pub mod config;
#[cfg(not(loom))]
pub mod http;
#[cfg(not(loom))]
pub mod log;
#[cfg(not(loom))]
pub mod master;
#[cfg(not(loom))]
pub mod metrics;
pub mod pipeline;
#[cfg(not(loom))]
pub mod python;
#[cfg(not(loom))]
pub mod sys;
#[cfg(not(loom))]
pub mod worker;
#[cfg(not(loom))]
pub mod wsgi;

/// `--check-config`: the flags are valid (they parsed), and the app imports and is
/// callable. Nothing is bound and no worker starts.
#[cfg(not(loom))]
fn check(config: &config::Config) -> Result<String, String> {
    use pyo3::prelude::*;
    let interpreter = python::initialize(config.venv.as_deref())?;
    Python::attach(|py| {
        let app = python::load_app(py, &config.app, &config.app_dir)?;
        if !app.bind(py).is_callable() {
            return Err(format!(
                "{}: the application object is not callable",
                config.app
            ));
        }
        Ok(format!(
            "{} imports and is callable ({}); would listen on {}",
            config.app,
            python::describe(py, &interpreter),
            config.describe_listen()
        ))
    })
}

/// Runs the server with the process's command line; returns the exit code.
#[cfg(not(loom))]
pub fn run() -> i32 {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let config = match config::Config::from_cli(cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("m0serve: error: {e}");
            return 2;
        }
    };
    log::set_level(config.log_level);
    if config.check_only {
        return match check(&config) {
            Ok(what) => {
                println!("m0serve: configuration OK; {what}");
                0
            }
            Err(e) => {
                eprintln!("m0serve: error: {e}");
                1
            }
        };
    }
    // A worker is this program re-executed by the master, with the listener's and the
    // ready pipe's descriptors named in its environment.
    let result = match worker::Inherited::from_env() {
        Ok(Some(inherited)) => worker::run(config, inherited),
        Ok(None) => master::run(config),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            log::error!("{e}");
            1
        }
    }
}
