//! `amdgpu-criu ps` on this machine and on a simulated 8-GPU machine whose
//! per-process KFD sysfs and DRM fdinfo kfd-sim writes as the kernel does.

use std::path::Path;

mod cli;
use cli::run;

#[test]
fn this_machine() {
    let out = run(&["ps"]);
    if Path::new("/sys/class/kfd/kfd/proc").exists() {
        test_env::skip("this machine has a KFD driver; the no-driver answer needs one without");
        assert_eq!(out.status.code(), Some(0));
        return;
    }
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err,
        "amdgpu-criu ps: /sys/class/kfd/kfd/proc does not exist: no AMD GPU driver (amdgpu with \
         KFD) on this machine, so no ROCm processes\n"
    );
}

fn simulated(extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut args = vec!["ps", "--simulate", "builtin:mi210-8gpu-2hive", "--json"];
    args.extend_from_slice(extra);
    let out = run(&args);
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code(), v)
}

#[test]
fn a_simulated_machine_lists_both_workloads() {
    let (code, v) = simulated(&["--rate", "1G"]);
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["rate_bytes_per_second"], (1u64 << 30) as f64);
    let ps = v["processes"].as_array().unwrap();
    assert_eq!(ps.len(), 2, "{v:#}");
    // The TensorFlow-like process: per GPU 6 VRAM BOs of 4 MiB, 2 compute
    // and 4 SDMA queues.
    let tf = &ps[0];
    assert_eq!(tf["queues"], 48);
    assert_eq!(tf["gpus"].as_array().unwrap().len(), 8);
    let mut sum = 0;
    for g in tf["gpus"].as_array().unwrap() {
        assert_eq!(g["vram_bytes"], 24u64 << 20, "{g}");
        assert_eq!(g["queues"], 6);
        assert!(g["render_minor"].as_u64().unwrap() >= 128);
        sum += g["vram_bytes"].as_u64().unwrap() + g["gtt_bytes"].as_u64().unwrap();
    }
    assert_eq!(tf["checkpoint_bytes"], sum);
    assert_eq!(tf["complete"], true);
    let seconds = tf["estimated_seconds"].as_f64().unwrap();
    assert!((seconds - sum as f64 / (1u64 << 30) as f64).abs() < 1e-9);
    // The basic process: one compute queue per GPU.
    assert_eq!(ps[1]["queues"], 8);

    // One of them, and one that is not a ROCm process.
    let pid = ps[1]["pid"].as_u64().unwrap().to_string();
    let (code, v) = simulated(&["--pid", &pid]);
    assert_eq!(code, Some(0));
    assert_eq!(v["processes"].as_array().unwrap().len(), 1);
    let (code, _) = simulated(&["--pid", "999999"]);
    assert_eq!(code, Some(1));
}

#[test]
fn text_and_bad_arguments() {
    let out = run(&[
        "ps",
        "--simulate",
        "builtin:mi210-8gpu-2hive",
        "--rate",
        "500M",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(": 8 GPUs, 48 queues, checkpoint "), "{text}");
    assert!(text.contains(" at 500.0 MiB/s\n"), "{text}");
    assert!(
        text.contains("  gpu_id   render           VRAM        GTT queues\n"),
        "{text}"
    );
    assert!(text.contains("   24.0 MiB "), "{text}");
    let out = run(&["ps", "--rate", "fast"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate fast"));
}
