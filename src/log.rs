//! The error log: one line per event, with the level, the process id and the thread's
//! name, on stderr.
//!
//! Deliberately small: a global level and `eprintln!`-style macros (`error!`, `warning!`,
//! `info!`, `debug!`). The access log is `access_log.rs`.

use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
#[repr(u8)]
pub enum Level {
    Error = 1,
    Warning = 2,
    Info = 3,
    Debug = 4,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

pub fn set_level(level: Level) {
    // Relaxed: a plain configuration value; no other memory is published with it.
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    // Relaxed: see `set_level`.
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

#[doc(hidden)]
pub fn write(level: Level, args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let name = match level {
        Level::Error => "ERROR",
        Level::Warning => "WARN",
        Level::Info => "INFO",
        Level::Debug => "DEBUG",
    };
    let thread = std::thread::current();
    let tname = thread.name().unwrap_or("main");
    let pid = std::process::id();
    // The whole line in one write(2): stderr is unbuffered, and the master and every
    // worker share it, so a line written in pieces would interleave with theirs (a pipe
    // keeps a write of up to PIPE_BUF bytes whole).
    let line = format!("[{}] [{pid}] [{name}] [{tname}] {args}\n", timestamp());
    // A failed write to stderr has nowhere else to go.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `YYYY-MM-DD HH:MM:SS` in UTC, without a date crate.
fn timestamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = crate::http::date::civil_from_days(secs / 86_400);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

macro_rules! log_at {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level) {
            $crate::log::write($level, format_args!($($arg)*))
        }
    };
}
macro_rules! error { ($($arg:tt)*) => { $crate::log::log_at!($crate::log::Level::Error, $($arg)*) }; }
macro_rules! warning { ($($arg:tt)*) => { $crate::log::log_at!($crate::log::Level::Warning, $($arg)*) }; }
macro_rules! info { ($($arg:tt)*) => { $crate::log::log_at!($crate::log::Level::Info, $($arg)*) }; }
macro_rules! debug { ($($arg:tt)*) => { $crate::log::log_at!($crate::log::Level::Debug, $($arg)*) }; }
pub(crate) use {debug, error, info, log_at, warning};
