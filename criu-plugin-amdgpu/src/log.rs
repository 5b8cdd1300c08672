//! Log lines of the plugin.
//!
//! Inside CRIU every line goes to CRIU's log through its `print_on_level`
//! service, the [`Sink`] the hook trampolines set before a hook's body runs
//! ([`set_sink`]), in the form CRIU's own `pr_err`/`pr_warn`/`pr_info` macros
//! give the C plugin's lines:
//!
//! ```text
//! Error (criu-plugin-amdgpu/src/hooks/mod.rs:133): amdgpu_plugin: DUMP_EXT_FILE: ...
//! Warn  (amdgpu-checkpoint/src/dump/kfd.rs:153): amdgpu_plugin: ...
//! amdgpu_plugin: initialized for Dump ...
//! ```
//!
//! so `grep Error dump.log` finds the plugin's errors among CRIU's and `grep
//! amdgpu_plugin` finds every plugin line. The tag names the source file (from
//! its crate directory on) and line, as `__FILE__:__LINE__` does in C; CRIU
//! prepends its timestamp. Without CRIU (tests, the emulator, the command-line
//! tool) the same lines go to stderr, filtered by `AMDGPU_PLUGIN_LOG_LEVEL`
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

/// The prefix of every line's text, as the C plugin's `LOG_PREFIX`.
pub const PREFIX: &str = "amdgpu_plugin: ";

/// Where a line was logged from: a source file and line, as C's
/// `__FILE__` and `__LINE__`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin<'a> {
    /// The source file (`file!()`, or a `log` record's file).
    pub file: &'a str,
    /// The line in it.
    pub line: u32,
}

impl Origin<'_> {
    /// The file as the tag shows it: from the crate directory on
    /// (`criu-plugin-amdgpu/src/hooks/mod.rs`), whatever directory the crate
    /// was built in (a registry checkout has long absolute paths).
    fn short_file(&self) -> &str {
        let file = self.file;
        match file.rfind("/src/") {
            Some(src) => match file[..src].rfind('/') {
                Some(slash) => &file[slash + 1..],
                None => file,
            },
            None => file,
        }
    }
}

/// The start of a line at `level`, as CRIU's macros write it: `Error
/// (FILE:LINE): ` and `Warn  (FILE:LINE): ` (two spaces, so the tags line
/// up) before the prefix; info and debug lines start with the prefix.
pub fn line_start(level: Level, origin: Option<Origin<'_>>) -> String {
    let tag = match level {
        Level::Error => "Error",
        Level::Warn => "Warn ",
        Level::Msg | Level::Info | Level::Debug => return PREFIX.to_owned(),
    };
    match origin {
        Some(origin) => format!("{tag} ({}:{}): {PREFIX}", origin.short_file(), origin.line),
        None => format!("{tag} (amdgpu_plugin): {PREFIX}"),
    }
}

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

/// Where lines go when no [`Capture`] is active: prints a line's start
/// ([`line_start`]) and its text, and answers whether it could (`false`
/// sends the line to stderr instead).
pub type Sink = fn(Level, &str, &str) -> bool;

static SINK: OnceLock<Sink> = OnceLock::new();

/// Sends every later line that no [`Capture`] takes to `sink` (CRIU's log).
/// The first sink set stays for the life of the process.
pub fn set_sink(sink: Sink) {
    let _ = SINK.set(sink);
}

/// Emits one line at `level`, without a source location (error and warning
/// tags then name the plugin instead of a file).
pub fn log(level: Level, args: fmt::Arguments<'_>) {
    log_at(level, None, args);
}

/// Emits one line at `level`, logged at `origin` (the macros pass
/// `file!()` and `line!()`).
pub fn log_at(level: Level, origin: Option<Origin<'_>>, args: fmt::Arguments<'_>) {
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
    let start = line_start(level, origin);
    if SINK.get().is_some_and(|sink| sink(level, &start, &text)) {
        return;
    }
    if level <= stderr_level() {
        let _ = writeln!(std::io::stderr().lock(), "{start}{text}");
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
        let origin = record.file().map(|file| Origin {
            file,
            line: record.line().unwrap_or(0),
        });
        log_at(record.level().into(), origin, *record.args());
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
    ($($arg:tt)*) => { $crate::log::log_at(
        $crate::log::Level::Error,
        Some($crate::log::Origin { file: file!(), line: line!() }),
        format_args!($($arg)*),
    ) };
}

/// Logs at warning level.
#[macro_export]
#[doc(hidden)]
macro_rules! log_warn {
    ($($arg:tt)*) => { $crate::log::log_at(
        $crate::log::Level::Warn,
        Some($crate::log::Origin { file: file!(), line: line!() }),
        format_args!($($arg)*),
    ) };
}

/// Logs at info level.
#[macro_export]
#[doc(hidden)]
macro_rules! log_info {
    ($($arg:tt)*) => { $crate::log::log_at(
        $crate::log::Level::Info,
        Some($crate::log::Origin { file: file!(), line: line!() }),
        format_args!($($arg)*),
    ) };
}

/// Logs at debug level.
#[macro_export]
#[doc(hidden)]
macro_rules! log_debug {
    ($($arg:tt)*) => { $crate::log::log_at(
        $crate::log::Level::Debug,
        Some($crate::log::Origin { file: file!(), line: line!() }),
        format_args!($($arg)*),
    ) };
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
    fn errors_and_warnings_carry_criu_tags() {
        let here = Origin {
            file: "criu-plugin-amdgpu/src/hooks.rs",
            line: 42,
        };
        assert_eq!(
            line_start(Level::Error, Some(here)),
            "Error (criu-plugin-amdgpu/src/hooks.rs:42): amdgpu_plugin: "
        );
        assert_eq!(
            line_start(Level::Warn, Some(here)),
            "Warn  (criu-plugin-amdgpu/src/hooks.rs:42): amdgpu_plugin: "
        );
        assert_eq!(line_start(Level::Info, Some(here)), "amdgpu_plugin: ");
        assert_eq!(line_start(Level::Debug, None), "amdgpu_plugin: ");
        assert_eq!(
            line_start(Level::Error, None),
            "Error (amdgpu_plugin): amdgpu_plugin: "
        );
        let registry = Origin {
            file: "/root/.cargo/registry/src/index-1/amdgpu-checkpoint-0.1.0/src/dump/mod.rs",
            line: 7,
        };
        assert_eq!(
            line_start(Level::Warn, Some(registry)),
            "Warn  (amdgpu-checkpoint-0.1.0/src/dump/mod.rs:7): amdgpu_plugin: "
        );
    }

    #[test]
    fn env_levels_parse() {
        assert_eq!(Level::from_env("4"), Some(Level::Debug));
        assert_eq!(Level::from_env(" 1 "), Some(Level::Error));
        assert_eq!(Level::from_env("debug"), None);
    }
}
