//! The error log: one line per event, with the time (UTC, its zone written out), the
//! process id, the level and the thread's name, as text (gunicorn's layout) or as one JSON
//! object per line (`--log-format json`), on standard error or `--error-log-file`.
//!
//! Deliberately small: a global level and format and `eprintln!`-style macros (`error!`,
//! `warning!`, `info!`, `debug!`). The access log is `access_log.rs`.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
#[repr(u8)]
pub(crate) enum Level {
    /// Also `critical` (gunicorn's highest level).
    #[value(alias = "critical")]
    Error = 1,
    #[value(alias = "warn")]
    Warning = 2,
    Info = 3,
    Debug = 4,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[repr(u8)]
pub(crate) enum Format {
    /// `[2026-12-01 17:17:08 +0000] [PID] [LEVEL] [THREAD] message`
    Text = 0,
    /// `{"time": "2026-12-01T17:17:08.123+00:00", "level": "info", "pid": PID,
    /// "thread": "m0s-loop", "message": "..."}`
    Json = 1,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);
static FORMAT: AtomicU8 = AtomicU8::new(Format::Text as u8);

pub(crate) fn set_level(level: Level) {
    // Relaxed: a plain configuration value; no other memory is published with it.
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub(crate) fn set_format(format: Format) {
    // Relaxed: as `set_level`.
    FORMAT.store(format as u8, Ordering::Relaxed);
}

/// `--log-format json`: every line a JSON record.
pub(crate) fn is_json() -> bool {
    // Relaxed: see `set_format`.
    FORMAT.load(Ordering::Relaxed) == Format::Json as u8
}

pub(crate) fn enabled(level: Level) -> bool {
    // Relaxed: see `set_level`.
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

#[doc(hidden)]
pub(crate) fn write(level: Level, args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let thread = std::thread::current();
    let tname = thread.name().unwrap_or("main");
    let pid = std::process::id();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // Relaxed: see `set_format`.
    let line = if FORMAT.load(Ordering::Relaxed) == Format::Json as u8 {
        let mut line = String::with_capacity(160);
        let _ = write!(
            line,
            "{{\"time\": \"{}\", \"level\": \"{}\", \"pid\": {pid}, \"thread\": ",
            iso8601(now),
            level_name(level).to_ascii_lowercase()
        );
        json_string(&mut line, tname);
        line.push_str(", \"message\": ");
        json_string(&mut line, &args.to_string());
        line.push_str("}\n");
        line
    } else {
        format!(
            "[{}] [{pid}] [{}] [{tname}] {args}\n",
            text_time(now.as_secs()),
            level_name(level)
        )
    };
    // The whole line in one write(2): stderr is unbuffered, and the master and every
    // worker share it, so a line written in pieces would interleave with theirs (a pipe
    // keeps a write of up to PIPE_BUF bytes whole).
    // A failed write to stderr has nowhere else to go.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Error => "ERROR",
        Level::Warning => "WARN",
        Level::Info => "INFO",
        Level::Debug => "DEBUG",
    }
}

/// `YYYY-MM-DD HH:MM:SS +0000`: UTC, and it says so.
fn text_time(secs: u64) -> String {
    utc(std::time::Duration::from_secs(secs))
        .strftime("%Y-%m-%d %H:%M:%S +0000")
        .to_string()
}

/// ISO 8601 with milliseconds and the zone: `YYYY-MM-DDTHH:MM:SS.mmm+00:00`.
pub(crate) fn iso8601(since_epoch: std::time::Duration) -> String {
    utc(since_epoch)
        .strftime("%Y-%m-%dT%H:%M:%S%.3f+00:00")
        .to_string()
}

/// `since_epoch` as a timestamp (formatted in UTC); past jiff's range (which ends on
/// 9999-12-30), its end.
pub(crate) fn utc(since_epoch: std::time::Duration) -> jiff::Timestamp {
    let nanos = since_epoch.subsec_nanos() as i32;
    i64::try_from(since_epoch.as_secs())
        .ok()
        .and_then(|secs| jiff::Timestamp::new(secs, nanos).ok())
        .unwrap_or(jiff::Timestamp::MAX)
}

/// `s` as a JSON string (RFC 8259: `"`, `\` and control characters escaped).
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `--error-log-file`, once set.
static ERROR_LOG: OnceLock<PathBuf> = OnceLock::new();

/// `--error-log-file PATH`: opens PATH for appending and puts it in place of standard error
/// (descriptor 2), so the server's lines and everything Python writes to `sys.stderr` (the
/// app's tracebacks) go to it. Each process (the master, every worker) does this itself.
pub(crate) fn redirect_stderr(path: &Path) -> io::Result<()> {
    let _ = ERROR_LOG.set(path.to_path_buf());
    put_on_stderr(path)
}

fn put_on_stderr(path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .open(path)?;
    // SAFETY: dup2 onto descriptor 2 with a descriptor `file` owns; it replaces what fd 2
    // refers to in one step, so a concurrent write goes to the old file or the new one.
    if unsafe { libc::dup2(file.as_raw_fd(), 2) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// SIGUSR1: opens `--error-log-file` again (after a rotation moved the old file).
pub(crate) fn reopen() {
    if let Some(path) = ERROR_LOG.get() {
        if let Err(e) = put_on_stderr(path) {
            crate::log::warning!("cannot reopen the error log {}: {e}", path.display());
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_say_their_zone() {
        assert_eq!(text_time(0), "1970-01-01 00:00:00 +0000");
        assert_eq!(
            iso8601(std::time::Duration::from_millis(1_764_609_428_123)),
            "2025-12-01T17:17:08.123+00:00"
        );
        // A clock past jiff's range (which ends on 9999-12-30) is written as its end, not
        // a panic.
        for secs in [u64::MAX, 253_402_300_800] {
            assert!(text_time(secs).starts_with("9999-12-"), "{secs}");
        }
    }

    #[test]
    fn json_strings_escape_what_could_break_a_line() {
        let mut s = String::new();
        json_string(&mut s, "a\"b\\c\nd\u{1}é");
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }
}
