//! Running the built `amdgpu-criu` binary in the tests: with the plugin's
//! and the `KFD_*` variables of the caller's environment removed, so a
//! developer's settings never change what a test sees.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::Read;
use std::process::{Command, Output, Stdio};

/// Every variable the tool or the plugin code it runs reads.
pub const VARIABLES: [&str; 10] = [
    "KFD_FW_VER_CHECK",
    "KFD_SDMA_FW_VER_CHECK",
    "KFD_CACHES_COUNT_CHECK",
    "KFD_NUM_GWS_CHECK",
    "KFD_VRAM_SIZE_CHECK",
    "KFD_NUMA_CHECK",
    "KFD_CAPABILITY_CHECK",
    "KFD_MAX_BUFFER_SIZE",
    "AMDGPU_PLUGIN_LOG_LEVEL",
    "AMDGPU_PLUGIN_PARALLEL_RESTORE",
];

/// `amdgpu-criu ARGS` in a clean environment.
pub fn run(args: &[&str]) -> Output {
    run_with(args, &[])
}

/// `amdgpu-criu ARGS` in a clean environment plus `env`.
pub fn run_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"));
    command.args(args);
    for name in VARIABLES {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("run amdgpu-criu")
}

/// Standard output as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `amdgpu-criu ARGS` with its standard output closed at once (as `| head
/// -0` does): it must end with status 0, no panic and no "Broken pipe".
pub fn into_closed_pipe(args: &[&str]) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"));
    for name in VARIABLES {
        command.env_remove(name);
    }
    let mut child = command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run amdgpu-criu");
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr piped")
        .read_to_string(&mut err)
        .expect("read stderr");
    let status = child.wait().expect("wait for amdgpu-criu");
    assert_eq!(status.code(), Some(0), "{args:?}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{args:?}: {err}"
    );
}
