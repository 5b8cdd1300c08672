//! Log lines of the plugin.
//!
//! Inside CRIU every line goes to CRIU's log through its `print_on_level`
//! service (looked up at run time, see [`crate::criu`]), prefixed with
//! `amdgpu_plugin: ` like the C plugin's lines, so `grep amdgpu_plugin` over a
//! CRIU log finds them. Without CRIU (tests, the emulator, the command-line
//! tool) lines go to stderr, filtered by `AMDGPU_PLUGIN_LOG_LEVEL`
//! (`0`..=`4`, default `3` = info).
//!
//! The engine (`amdgpu-checkpoint`) logs through the `log` facade;
//! [`install`] routes those records here too, so every line of a dump or
//! restore reaches the same place with the same prefix. Tests can install a
//! [`Capture`] to assert on lines instead.
//!
//! This module never fails and never panics: logging is best effort.

use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

/// The prefix of every line, as the C plugin's `LOG_PREFIX`.
pub const PREFIX: &str = "amdgpu_plugin: ";

/// CRIU's log levels (`LOG_MSG` .. `LOG_DEBUG` in criu/include/log.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u32)]
pub enum Level {
    /// Always printed (`LOG_MSG`).
    Msg = 0,
    /// `LOG_ERROR`.
    Error = 1,
    /// `LOG_WARN`.
    Warn = 2,
    /// `LOG_INFO`.
    Info = 3,
    /// `LOG_DEBUG`.
    Debug = 4,
}

impl Level {
    fn from_env(value: &str) -> Option<Level> {
        Some(match value.trim() {
            "0" => Level::Msg,
            "1" => Level::Error,
            "2" => Level::Warn,
            "3" => Level::Info,
            "4" => Level::Debug,
            _ => return None,
        })
    }
}

/// Lines collected by a [`Capture`].
pub type CapturedLines = Arc<Mutex<Vec<(Level, String)>>>;

/// While alive, every log line of this process is appended to a shared list
/// instead of going to CRIU or stderr. Captures are exclusive: a second
/// [`Capture::start`] waits until the first capture is dropped, so parallel
/// tests do not steal each other's lines.
#[derive(Debug)]
pub struct Capture {
    lines: CapturedLines,
    _exclusive: MutexGuard<'static, ()>,
}

fn capture_slot() -> &'static Mutex<Option<CapturedLines>> {
    static SLOT: OnceLock<Mutex<Option<CapturedLines>>> = OnceLock::new();
    SLOT.get_or_init(|| Mutex::new(None))
}

impl Capture {
    /// Starts capturing.
    pub fn start() -> Capture {
        static EXCLUSIVE: Mutex<()> = Mutex::new(());
        let exclusive = EXCLUSIVE.lock().unwrap_or_else(PoisonError::into_inner);
        let lines: CapturedLines = Arc::default();
        *capture_slot()
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(lines.clone());
        Capture {
            lines,
            _exclusive: exclusive,
        }
    }

    /// The lines captured so far, without the prefix.
    pub fn lines(&self) -> Vec<(Level, String)> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether any captured line at `level` contains `needle`.
    pub fn contains(&self, level: Level, needle: &str) -> bool {
        self.lines()
            .iter()
            .any(|(l, text)| *l == level && text.contains(needle))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let mut slot = capture_slot()
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if slot
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, &self.lines))
        {
            *slot = None;
        }
    }
}

fn stderr_level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        std::env::var("AMDGPU_PLUGIN_LOG_LEVEL")
            .ok()
            .and_then(|v| Level::from_env(&v))
            .unwrap_or(Level::Info)
    })
}

/// Emits one line at `level`.
pub fn log(level: Level, args: fmt::Arguments<'_>) {
    let text = fmt::format(args);
    if let Some(lines) = capture_slot()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
    {
        lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((level, text));
        return;
    }
    if crate::criu::services().print(level, PREFIX, &text) {
        return;
    }
    if level <= stderr_level() {
        let _ = writeln!(std::io::stderr().lock(), "{PREFIX}{text}");
    }
}

impl From<log::Level> for Level {
    fn from(level: log::Level) -> Level {
        match level {
            log::Level::Error => Level::Error,
            log::Level::Warn => Level::Warn,
            log::Level::Info => Level::Info,
            log::Level::Debug | log::Level::Trace => Level::Debug,
        }
    }
}

/// The `log` facade's records, into [`log()`].
struct Forward;

impl log::Log for Forward {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        log(record.level().into(), *record.args());
    }

    fn flush(&self) {}
}

/// Makes this module the `log` facade's logger, so the engine's records
/// reach CRIU's log (or a [`Capture`]). Idempotent; a program that already
/// installed a logger of its own keeps it.
pub fn install() {
    static FORWARD: Forward = Forward;
    if log::set_logger(&FORWARD).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
}

/// Logs at error level.
#[macro_export]
#[doc(hidden)]
macro_rules! log_error {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Error, format_args!($($arg)*)) };
}

/// Logs at warning level.
#[macro_export]
#[doc(hidden)]
macro_rules! log_warn {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Warn, format_args!($($arg)*)) };
}

/// Logs at info level.
#[macro_export]
#[doc(hidden)]
macro_rules! log_info {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Info, format_args!($($arg)*)) };
}

/// Logs at debug level.
#[macro_export]
#[doc(hidden)]
macro_rules! log_debug {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Debug, format_args!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_collects_lines_with_levels() {
        let capture = Capture::start();
        log(Level::Warn, format_args!("gpu {:#x} missing", 0x1234));
        log(Level::Debug, format_args!("details"));
        assert!(capture.contains(Level::Warn, "gpu 0x1234 missing"));
        assert!(capture.contains(Level::Debug, "details"));
        assert!(!capture.contains(Level::Error, "details"));
    }

    #[test]
    fn log_facade_records_reach_the_capture() {
        install();
        let capture = Capture::start();
        log::warn!("from the engine: gpu {:#x}", 0x42);
        log::trace!("fine detail");
        assert!(capture.contains(Level::Warn, "from the engine: gpu 0x42"));
        assert!(capture.contains(Level::Debug, "fine detail"));
    }

    #[test]
    fn env_levels_parse() {
        assert_eq!(Level::from_env("4"), Some(Level::Debug));
        assert_eq!(Level::from_env(" 1 "), Some(Level::Error));
        assert_eq!(Level::from_env("debug"), None);
    }
}
