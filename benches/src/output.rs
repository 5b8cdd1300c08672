//! What the report binaries share: where they work and how they print a
//! figure.

use std::path::{Path, PathBuf};

/// The directory a report works in: `BENCH_DIR` when set, else
/// `target/bench-report` of the workspace (found by its `[workspace]`
/// manifest), else `bench-report` in the temporary directory.
pub fn work_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BENCH_DIR") {
        return PathBuf::from(dir);
    }
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    loop {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        if manifest.contains("[workspace]") {
            return dir.join("target/bench-report");
        }
        match dir.parent() {
            Some(parent) => dir = parent,
            None => return std::env::temp_dir().join("bench-report"),
        }
    }
}

/// Prints one figure as `name=value`, the form the README's tables are
/// filled from.
pub fn line(name: &str, value: impl std::fmt::Display) {
    println!("{name}={value}");
}
