//! Locating the shared read-only fixtures (`../shared` next to the workspace).

use std::path::{Path, PathBuf};

/// The eight real topology fixtures, by directory name.
#[allow(dead_code)]
pub const FIXTURES: &[&str] = &[
    "apu-bristol-ridge-a12-9800-issue121",
    "mi100-arcturus-rocmi-test",
    "mi210-8gpu-xgmi-2hives",
    "mi300a-4apu-spx-unattributed",
    "mi300x-cpx-8gpu",
    "mi308x-cpx-8gpu",
    "polaris-rx470-issue474",
    "vega10-mi25-1gpu",
];

/// The workspace root: the nearest ancestor of this crate whose Cargo.toml
/// declares `[workspace]`.
pub fn workspace_root() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    loop {
        let manifest = dir.join("Cargo.toml");
        if std::fs::read_to_string(&manifest).is_ok_and(|t| t.contains("[workspace]")) {
            return dir.to_owned();
        }
        match dir.parent() {
            Some(parent) => dir = parent,
            None => return PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        }
    }
}

/// `../shared/fixtures/topology`, or `None` after printing why the caller
/// skips.
pub fn topology_fixtures() -> Option<PathBuf> {
    let dir = workspace_root().join("../shared/fixtures/topology");
    if dir.is_dir() {
        Some(dir)
    } else {
        test_env::skip(format!("{} is absent", dir.display()));
        None
    }
}

/// One fixture's root, or `None` (with the skip printed).
#[allow(dead_code)]
pub fn fixture(name: &str) -> Option<PathBuf> {
    let dir = topology_fixtures()?.join(name);
    if dir.is_dir() {
        Some(dir)
    } else {
        test_env::skip(format!("fixture {} is absent", dir.display()));
        None
    }
}
