//! `amdgpu-criu flatten` and the demo's incremental and data-parallel runs,
//! through the built binary: an incremental checkpoint writes less than the
//! first and restores verified; a deduplicated data-parallel dump references
//! the shared weights; flatten turns a chained set into a standalone one
//! that verifies, and refuses a chain whose parent is gone.

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("amdgpu-criu runs")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn header_sum(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("amdgpu-pages-"))
        .map(|e| {
            let bytes = std::fs::read(e.path()).unwrap();
            u64::from_le_bytes(bytes[..8].try_into().unwrap())
        })
        .sum()
}

#[test]
fn an_incremental_demo_writes_less_and_flatten_makes_it_standalone() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let out = run(
        &[
            "demo",
            "--topology",
            "pcie-2gpu",
            "--size",
            "96M",
            "--incremental",
            "1",
            "--dir",
            dir.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    let v = json(&out);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["verified"], true, "{v:#}");
    let first = v["checkpoint"]["written_bytes"].as_u64().unwrap();
    let second = v["incremental"]["written_bytes"].as_u64().unwrap();
    assert!(second < first / 2, "{second} of {first} bytes: {v:#}");
    assert!(
        v["incremental"]["referenced_bytes"].as_u64().unwrap() > 0,
        "{v:#}"
    );
    let chained = dir.join("incremental");
    // The chain verifies; a header sum below the BOs' sizes is what makes
    // the C plugin refuse it.
    let verify = run(&["verify", chained.to_str().unwrap()], &[]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    let sizes = v["incremental"]["bytes"].as_u64().unwrap();
    assert!(header_sum(&chained) < sizes);

    let flat = root.path().join("flat");
    std::fs::create_dir(&flat).unwrap();
    let out = run(
        &["flatten", chained.to_str().unwrap(), flat.to_str().unwrap()],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("standalone, verified"), "{text}");
    assert!(header_sum(&flat) >= header_sum(&chained));
    let verify = run(&["verify", flat.to_str().unwrap()], &[]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );

    // Not into a directory that holds something.
    let out = run(
        &["flatten", chained.to_str().unwrap(), flat.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));

    // Without its parent the chain is refused by name, by verify and flatten.
    let moved = root.path().join("moved");
    std::fs::rename(&dir, &moved).unwrap();
    std::fs::create_dir(&dir).unwrap();
    let chained = moved.join("incremental");
    std::fs::remove_file(chained.join("parent")).unwrap();
    std::os::unix::fs::symlink("../gone", chained.join("parent")).unwrap();
    let verify = run(&["verify", chained.to_str().unwrap()], &[]);
    assert_eq!(verify.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&verify.stdout).contains("parent -> ../gone"),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    let empty = root.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = run(
        &[
            "flatten",
            chained.to_str().unwrap(),
            empty.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("parent -> ../gone"));
}

#[test]
fn a_deduplicated_data_parallel_demo_writes_the_weights_once() {
    let out = run(
        &[
            "demo",
            "--workload",
            "data-parallel",
            "--topology",
            "pcie-2gpu",
            "--size",
            "64M",
            "--json",
        ],
        &[("KFD_DEDUP", "1")],
    );
    let v = json(&out);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["verified"], true, "{v:#}");
    let c = &v["checkpoint"];
    let (bytes, written, referenced) = (
        c["bytes"].as_u64().unwrap(),
        c["written_bytes"].as_u64().unwrap(),
        c["referenced_bytes"].as_u64().unwrap(),
    );
    // Two replicas: most of one copy of the weights is referenced, not
    // written (the written bytes also hold the group's shared DRM buffer).
    assert!(referenced > bytes / 4, "{v:#}");
    assert!(written < bytes * 3 / 4, "{v:#}");
}
