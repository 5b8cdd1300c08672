//! `amdgpu-criu demo --workload rocr-copy`: AMD's ROCr queues copies on the
//! simulated GPUs, CRIU checkpoints it while they are in flight, restores
//! it renumbered where the restored queues finish them, and the program
//! goes on from the checkpoint to the same end. Needs libhsa-runtime-dev, a
//! C compiler and kfd-sim-preload's library (built with the workspace);
//! says why it skips without them, and fails when `CI` is set.

use std::path::Path;
use std::process::Command;

mod preload;

use preload::{preload_lib, skip};

#[test]
fn rocr_copies_in_flight_are_checkpointed_restored_and_finish() {
    if !Path::new("/usr/include/hsa/hsa.h").is_file() {
        skip("libhsa-runtime-dev is not installed (/usr/include/hsa/hsa.h is missing)");
        return;
    }
    let Some(lib) = preload_lib() else {
        skip("libkfd_sim_preload.so is not built (cargo build -p kfd-sim-preload, or test the workspace)");
        return;
    };
    // The images where --dir says, as with every workload.
    let kept = tempfile::tempdir().unwrap();
    let dir = kept.path().join("rc");
    let out = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .args([
            "demo",
            "--workload",
            "rocr-copy",
            "--json",
            "--seed",
            "4",
            "--dir",
        ])
        .arg(&dir)
        .env("KFD_SIM_PRELOAD_LIB", &lib)
        .output()
        .expect("running amdgpu-criu");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["verified"], true, "{report}");
    assert_eq!(report["workload"], "rocr-copy");
    let paused = report["checkpoint"]["queues"]
        .as_array()
        .expect("the saved queues");
    assert!(!paused.is_empty(), "{report}");
    assert!(paused
        .iter()
        .all(|q| q.as_str().unwrap().contains("paused at read pointer")));
    let map = report["gpu_map"].as_object().expect("a gpu map");
    assert!(map
        .iter()
        .all(|(from, to)| Some(from.as_str()) != to.as_str()));
    assert!(map.keys().all(|id| id.starts_with("0x")), "{report}");
    assert_eq!(report["image_dir"], dir.to_str().unwrap(), "{report}");
    for command in ["show", "verify"] {
        let out = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
            .arg(command)
            .arg(&dir)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{command}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let refused = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .args(["demo", "--workload", "rocr-copy", "--size", "1G"])
        .env("KFD_SIM_PRELOAD_LIB", &lib)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("do not apply"));
}
