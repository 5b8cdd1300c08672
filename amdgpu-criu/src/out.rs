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
    use super::plural;

    #[test]
    fn plurals() {
        assert_eq!(plural(1u32, "GPU"), "1 GPU");
        assert_eq!(plural(0u32, "GPU"), "0 GPUs");
        assert_eq!(plural(2u32, "process"), "2 processes");
        assert_eq!(plural(1u32, "process"), "1 process");
        assert_eq!(plural(3u32, "reason"), "3 reasons");
    }
}
