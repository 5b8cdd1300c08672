//! What the demo tests that run AMD's libraries under kfd-sim-preload share:
//! the interposer cargo built, and skipping (or failing under `CI`) when a
//! prerequisite is missing.

use std::path::{Path, PathBuf};

/// Says why the test cannot run; fails under CI (`test_env::skip`).
pub fn skip(reason: &str) {
    test_env::skip(reason);
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
