//! Every workload of `demo`, run again and again as a user runs it (stderr
//! not a terminal, so the progress lines and the thread that prints them are
//! on). A failure that strikes one run in five, as a restore that found its
//! process's memory address taken by another thread of the tool once did,
//! fails a workload's [`RUNS`] runs with probability 1 - 0.8^20, 98.8 %.
//! Nothing here is timed: each run either verifies or fails.

mod cli;
mod preload;

use cli::{run_with, stderr};
use preload::{preload_lib, skip};

/// Runs per workload.
const RUNS: usize = 20;

/// Runs `amdgpu-criu ARGS` [`RUNS`] times (with `env`) and fails listing
/// every run that did not verify.
fn stress_with(args: &[&str], env: &[(&str, &str)]) {
    let mut failures = Vec::new();
    for n in 1..=RUNS {
        let out = run_with(args, env);
        if out.status.code() != Some(0) {
            failures.push(format!(
                "run {n}: exit {:?}: {}",
                out.status.code(),
                stderr(&out).trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{args:?}: {} of {RUNS} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn stress(args: &[&str]) {
    stress_with(args, &[]);
}

/// The interposer a workload of AMD's user space needs, or None after
/// saying why it cannot run here (`test_env::skip`).
fn user_space(header: &str, package: &str) -> Option<std::path::PathBuf> {
    if !std::path::Path::new(header).is_file() {
        skip(&format!("{package} is not installed ({header} is missing)"));
        return None;
    }
    let lib = preload_lib();
    if lib.is_none() {
        skip("libkfd_sim_preload.so is not built (cargo build -p kfd-sim-preload, or test the workspace)");
    }
    lib
}

#[test]
fn basic_verifies_every_time() {
    // The default machine: eight GPUs in two hives.
    stress(&["demo", "--workload", "basic"]);
}

#[test]
fn pytorch_verifies_every_time() {
    stress(&["demo", "--workload", "pytorch", "--size", "6M"]);
}

#[test]
fn tensorflow_verifies_every_time() {
    stress(&["demo", "--workload", "tensorflow", "--size", "36M"]);
}

#[test]
fn multi_verifies_every_time() {
    stress(&["demo", "--workload", "multi", "--size", "42M"]);
}

#[test]
fn data_parallel_verifies_every_time() {
    stress(&["demo", "--workload", "data-parallel", "--size", "2M"]);
}

#[test]
fn hsakmt_verifies_every_time() {
    if let Some(lib) = user_space("/usr/include/hsakmt.h", "libhsakmt-dev") {
        let lib = lib.to_string_lossy();
        stress_with(
            &["demo", "--workload", "hsakmt"],
            &[("KFD_SIM_PRELOAD_LIB", &lib)],
        );
    }
}

#[test]
fn rocr_copy_verifies_every_time() {
    if let Some(lib) = user_space("/usr/include/hsa/hsa.h", "libhsa-runtime-dev") {
        let lib = lib.to_string_lossy();
        stress_with(
            &["demo", "--workload", "rocr-copy"],
            &[("KFD_SIM_PRELOAD_LIB", &lib)],
        );
    }
}
