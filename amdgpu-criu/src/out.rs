//! Standard output that ends quietly when the reader goes away.
//!
//! `amdgpu-criu show DIR | head` closes the pipe while the tool still
//! writes; std's `println!` panics then ("failed printing to stdout: Broken
//! pipe", exit 101). Every command prints through [`line`] instead (main.rs
//! shadows `println!` with it): a write that fails with `EPIPE`
//! ends the process with status 0 and no message, as `cat` killed by
//! `SIGPIPE` would leave nothing on the terminal. Any other write error is
//! reported once on stderr and ends the process with status 2.

use std::fmt;
use std::io::{self, Write};

/// Writes `args` and a newline to standard output.
pub fn line(args: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        gone(&e);
    }
}

/// Flushes standard output (before the process exits or blocks).
pub fn flush() {
    if let Err(e) = io::stdout().lock().flush() {
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

/// A gpu_id as every command shows it: hex with at least 4 digits, as in
/// image file names (`amdgpu-pages-1-0237.img` is gpu `0x0237`).
pub fn gpu_id(id: u32) -> String {
    format!("{id:#06x}")
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
