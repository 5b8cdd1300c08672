//! Standard output that ends quietly when the reader goes away.
//!
//! `amdgpu-criu show DIR | head` closes the pipe while the tool still
//! writes; std's `println!` panics then ("failed printing to stdout: Broken
//! pipe", exit 101). Every command prints through [`line()`] instead (main.rs
//! shadows `println!` with it): a write that fails with `EPIPE`
//! ends the process with status 0 and no message, as `cat` killed by
//! `SIGPIPE` would leave nothing on the terminal. Any other write error is
//! reported once on stderr and ends the process with status 2.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

static QUIET: AtomicBool = AtomicBool::new(false);
static VERBOSE: AtomicU8 = AtomicU8::new(0);
static LOG: OnceLock<Mutex<File>> = OnceLock::new();
/// When the command started: `--log` lines carry the time since, as
/// CRIU's `-o` log does.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Applies the global `-v`, `--quiet` and `--log FILE` options: `-v` shows
/// the plugin's and engine's log lines down to debug (CRIU's `-v4`),
/// `--quiet` only errors (no notes or hints); `--log FILE` appends every
/// line written to stderr, and every log line whatever the verbosity, to
/// FILE (CRIU's `-o`).
pub fn configure(verbose: u8, quiet: bool, log: Option<&Path>) -> io::Result<()> {
    QUIET.store(quiet, Ordering::Relaxed);
    VERBOSE.store(verbose, Ordering::Relaxed);
    let _ = STARTED.set(Instant::now());
    if let Some(path) = log {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let _ = LOG.set(Mutex::new(file));
    }
    Ok(())
}

/// How many `-v` were given.
pub fn verbose() -> u8 {
    VERBOSE.load(Ordering::Relaxed)
}

/// Whether `--quiet` was given.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Appends `text` and a newline to the `--log` file, if there is one, each
/// line after the seconds since the command started, as CRIU's `-o` log
/// writes them: `(00.012345) text`.
pub fn log_only(text: &str) {
    if let Some(file) = LOG.get() {
        let since = STARTED.get().map(Instant::elapsed).unwrap_or_default();
        let stamp = format!("({:02}.{:06})", since.as_secs(), since.subsec_micros());
        let mut f = file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Best effort: a full disk must not end the command.
        for line in text.lines() {
            let _ = writeln!(f, "{stamp} {line}");
        }
    }
}

/// A line for stderr (errors, warnings): always shown, and logged.
pub fn err_line(args: fmt::Arguments<'_>) {
    let text = fmt::format(args);
    log_only(&text);
    // Best effort: nobody is left to tell when stderr is gone.
    let _ = writeln!(io::stderr().lock(), "{text}");
}

/// A note or hint for stderr: logged, shown unless `--quiet`.
pub fn note(text: &str) {
    log_only(text);
    if !quiet() {
        let _ = writeln!(io::stderr().lock(), "{text}");
    }
}

/// Writes `args` and a newline to standard output.
pub fn line(args: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        gone(&e);
    }
}

fn gone(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    // Best effort: stderr may be gone as well.
    let _ = writeln!(io::stderr(), "amdgpu-criu: writing to standard output: {e}");
    std::process::exit(2);
}

/// "1 GPU", "2 GPUs": `count` and `word` with an `s` unless the count is 1.
pub fn plural(count: impl Into<u64>, word: &str) -> String {
    let count = count.into();
    if count == 1 {
        format!("{count} {word}")
    } else if word.ends_with('s') || word.ends_with("sh") || word.ends_with('x') {
        format!("{count} {word}es")
    } else {
        format!("{count} {word}s")
    }
}

/// A gpu_id as every command shows it: hex with at least 4 digits, as in
/// image file names (`amdgpu-pages-1-0237.img` is gpu `0x0237`).
pub fn gpu_id(id: u32) -> String {
    format!("{id:#06x}")
}

/// A gpu_id as typed or printed: hex with `0x` (as every command shows
/// it) or decimal (as the kernel's sysfs and older output give it).
pub fn parse_gpu_id(text: &str) -> Option<u32> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// An I/O error as the tool words it: `no such file` for a path that is
/// not there, else the system's text without its `(os error N)`.
pub fn io_error(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such file or directory".to_owned(),
        io::ErrorKind::PermissionDenied => {
            "permission denied (run as a user who may read it, or as root)".to_owned()
        }
        _ => {
            let text = e.to_string();
            match text.rfind(" (os error") {
                Some(i) => text[..i].to_owned(),
                None => text,
            }
        }
    }
}

/// `error` about image `file`, naming the file once: errors of the image
/// crate start with the file's name already.
pub fn about(file: impl fmt::Display, error: impl fmt::Display) -> String {
    let (file, error) = (file.to_string(), error.to_string());
    if error.starts_with(&format!("{file}:")) {
        error
    } else {
        format!("{file}: {error}")
    }
}

/// `bytes` for people: `512 B`, `4.0 KiB`, `1.5 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::{human_bytes, plural};

    #[test]
    fn sizes() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(4096), "4.0 KiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(1u32, "GPU"), "1 GPU");
        assert_eq!(plural(0u32, "GPU"), "0 GPUs");
        assert_eq!(plural(2u32, "process"), "2 processes");
        assert_eq!(plural(1u32, "process"), "1 process");
        assert_eq!(plural(3u32, "reason"), "3 reasons");
    }
}
