//! `amdgpu-criu topology` against a real fixture, a built-in, and bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .arg("topology")
        .args(args)
        .output()
        .expect("run amdgpu-criu")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// `../shared/fixtures/topology/<name>` next to the workspace root, or
/// `None` after printing why the test is skipped.
fn fixture(name: &str) -> Option<PathBuf> {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    while !std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]"))
    {
        dir = dir.parent()?;
    }
    let path = dir.join("../shared/fixtures/topology").join(name);
    if path.is_dir() {
        Some(path)
    } else {
        test_env::skip(format!("{} is absent", path.display()));
        None
    }
}

#[test]
fn text_for_a_fixture() {
    let Some(dir) = fixture("mi210-8gpu-xgmi-2hives") else {
        return;
    };
    let out = run(&["--sysfs", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("10 nodes: 2 CPUs, 8 GPUs; 2 XGMI hives"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "hive_id {:#x}: nodes 2-5 (4 GPUs)",
            12609507387757274807u64
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "hive_id {:#x}: nodes 6-9 (4 GPUs)",
            18091350218769748594u64
        )),
        "{text}"
    );
    assert!(text.contains("node   2: io PCIe->0; XGMI->3-5"), "{text}");
    assert!(text.contains("note: no gpu_id file in nodes 0-9"), "{text}");
    let gpu_line = text
        .lines()
        .find(|l| l.trim_start().starts_with("2  GPU"))
        .unwrap();
    assert!(
        gpu_line.contains("0x740f") && gpu_line.contains("gfx90a"),
        "{gpu_line}"
    );
    assert!(
        gpu_line.contains("0000:63:00.0") && gpu_line.contains("128"),
        "{gpu_line}"
    );
}

#[test]
fn json_for_a_fixture_completed() {
    let Some(dir) = fixture("mi300x-cpx-8gpu") else {
        return;
    };
    let out = run(&["--sysfs", dir.to_str().unwrap(), "--complete", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["nodes"], 65);
    assert_eq!(v["cpus"], 2);
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 63);
    assert!(gpus
        .iter()
        .all(|g| g["gpu_id"].as_u64().is_some_and(|id| id > 0)));
    assert!(gpus.iter().all(|g| g["vram_bytes"] == 24u64 << 30));
    assert_eq!(gpus[0]["gfx_target"], "gfx942");
    assert_eq!(v["hives"][0]["nodes"].as_array().unwrap().len(), 63);
    // 2 CPU gpu_ids, 63 banks, 63 gpu_ids.
    assert_eq!(v["synthesized"].as_array().unwrap().len(), 128);
    let node2 = &v["system"]["nodes"][2];
    assert_eq!(node2["properties"]["device_id"], 29857);
}

#[test]
fn json_for_a_builtin() {
    let out = run(&["--builtin", "mi210-8gpu-2hive", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["source"], "builtin:mi210-8gpu-2hive");
    assert_eq!(v["nodes"], 10);
    assert_eq!(v["gpus"].as_array().unwrap().len(), 8);
    let hives = v["hives"].as_array().unwrap();
    assert_eq!(hives.len(), 2);
    assert_eq!(hives[0]["nodes"], serde_json::json!([2, 3, 4, 5]));
    let minors: Vec<u64> = v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["render_minor"].as_u64().unwrap())
        .collect();
    assert_eq!(minors, (128..136).collect::<Vec<u64>>());
    // The cache sibling maps come out as strings.
    let cache = &v["system"]["nodes"][2]["caches"][0]["properties"];
    assert!(cache["sibling_map"].as_str().unwrap().starts_with("1,0"));
}

#[test]
fn builtin_list_and_unknown_builtin() {
    let out = run(&["--builtin", "list"]);
    assert_eq!(out.status.code(), Some(0));
    // Each machine with its GPU count and model.
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("builtin:mi300x-64 ") && l.contains("64 x ")),
        "{}",
        stdout(&out)
    );
    let out = run(&["--builtin", "mi999"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no built-in topology \"mi999\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn unreadable_topologies_exit_2_with_a_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&["--sysfs", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("nodes does not exist"),
        "{}",
        stderr(&out)
    );

    // A malformed properties file names the file and line.
    let node = tmp.path().join("nodes/0");
    std::fs::create_dir_all(&node).unwrap();
    std::fs::write(node.join("properties"), "cpu_cores_count 4\nsimd_count x\n").unwrap();
    let out = run(&["--sysfs", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("nodes/0/properties:2:"), "{err}");

    // This machine's sysfs: when there is no KFD, say so and what to do.
    if !Path::new("/sys/class/kfd/kfd/topology").exists() {
        let out = run(&[]);
        assert_eq!(out.status.code(), Some(2));
        let err = stderr(&out);
        assert!(
            err.contains("--sysfs") && err.contains("builtin:NAME"),
            "{err}"
        );
    } else {
        test_env::skip("this host has a KFD topology; the missing-sysfs message is not shown");
    }
}

#[test]
fn sysfs_and_builtin_conflict() {
    let out = run(&["--sysfs", "/tmp", "--builtin", "single-gpu"]);
    assert_eq!(out.status.code(), Some(2), "clap usage errors exit 2");
}
