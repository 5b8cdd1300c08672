//! `amdgpu-criu demo --workload hsakmt`: AMD's thunk builds the process,
//! CRIU checkpoints it, restores it renumbered and checkpoints it again,
//! and the demo verifies the two checkpoints and the recreated shared
//! memory. Needs libhsakmt-dev, a C compiler and kfd-sim-preload's library
//! (built with the workspace); says why it skips without them, and fails
//! when `CI` is set.

use std::path::Path;
use std::process::Command;

mod preload;

use preload::{preload_lib, skip};

#[test]
fn the_thunk_built_process_is_checkpointed_restored_and_verified() {
    if !Path::new("/usr/include/hsakmt.h").is_file() {
        skip("libhsakmt-dev is not installed (/usr/include/hsakmt.h is missing)");
        return;
    }
    let Some(lib) = preload_lib() else {
        skip("libkfd_sim_preload.so is not built (cargo build -p kfd-sim-preload, or test the workspace)");
        return;
    };
    // The images where --dir says, as with every workload.
    let kept = tempfile::tempdir().unwrap();
    let dir = kept.path().join("hk");
    let out = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .args([
            "demo",
            "--workload",
            "hsakmt",
            "--json",
            "--seed",
            "3",
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
    assert_eq!(report["workload"], "hsakmt");
    assert!(
        report["checkpoint"]["bos"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert!(
        report["checkpoint"]["content_bytes"].as_u64().unwrap() > 0,
        "{report}"
    );
    // The default machine's eight GPUs, each with a new gpu_id, in hex.
    let map = report["gpu_map"].as_object().expect("a gpu map");
    assert_eq!(map.len(), 8, "{report}");
    assert!(map
        .iter()
        .all(|(from, to)| Some(from.as_str()) != to.as_str()));
    assert!(
        map.iter()
            .all(|(from, to)| from.starts_with("0x") && to.as_str().unwrap().starts_with("0x")),
        "{report}"
    );
    assert_eq!(report["image_dir"], dir.to_str().unwrap(), "{report}");
    assert_eq!(
        report["restored_image_dir"],
        dir.join("restored").to_str().unwrap(),
        "{report}"
    );
    for set in [dir.clone(), dir.join("restored")] {
        for command in ["show", "verify"] {
            let out = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
                .arg(command)
                .arg(&set)
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{command} {}: {}{}",
                set.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    // What does not apply is refused as a usage error.
    let refused = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .args(["demo", "--workload", "hsakmt", "--size", "1G"])
        .env("KFD_SIM_PRELOAD_LIB", &lib)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--size does not apply"));
}
