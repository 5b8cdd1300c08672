//! What the demo tests that run AMD's libraries under kfd-sim-preload share:
//! the interposer cargo built, and skipping (or failing under `CI`) when a
//! prerequisite is missing.

use std::path::{Path, PathBuf};

/// Says why the test cannot run; panics when `CI` is set.
pub fn skip(reason: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("CI is set and this test cannot run: {reason}");
    }
    println!("skipped: {reason}");
}

/// The interposer cargo built for the workspace, next to the binary.
pub fn preload_lib() -> Option<PathBuf> {
    let exe = Path::new(env!("CARGO_BIN_EXE_amdgpu-criu"));
    let dir = exe.parent()?;
    [
        dir.join("libkfd_sim_preload.so"),
        dir.join("deps/libkfd_sim_preload.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}
