//! `amdgpu-criu demo` on every real topology capture in
//! `../shared/fixtures/topology`: each workload either runs verified on it
//! or is refused with the real reason (never a kernel error from the
//! simulator such as "CREATE_QUEUE failed with ENOMEM", nor a missing SDMA
//! packet for an old chip whose capture predates the keys). The one capture
//! refused is the 2017 Bristol Ridge APU, whose single node holds both the
//! CPU cores and the GPU, which a CRIU amdgpu image cannot record.
//!
//! Each workload runs at the smallest `--size` the demo accepts on the
//! capture (it names it when refusing `--size 1`). Runs above 48 MiB (the
//! tensorflow and multi workloads on the 32- and 63-partition captures) are
//! left to the release-build demo, and the test says so: a debug build
//! fills and hashes dense BOs too slowly for CI.

use std::fs;
use std::path::{Path, PathBuf};

mod cli;
use cli::{run, stderr, stdout};

const CAPTURES: [&str; 8] = [
    "apu-bristol-ridge-a12-9800-issue121",
    "mi100-arcturus-rocmi-test",
    "mi210-8gpu-xgmi-2hives",
    "mi300a-4apu-spx-unattributed",
    "mi300x-cpx-8gpu",
    "mi308x-cpx-8gpu",
    "polaris-rx470-issue474",
    "vega10-mi25-1gpu",
];

/// The capture refused, and why: its APU node is a CPU and a GPU at once.
const REFUSED: &str = "apu-bristol-ridge-a12-9800-issue121";

const MIB: u64 = 1 << 20;
const LARGEST_RUN: u64 = 48 * MIB;

fn captures_dir() -> Option<PathBuf> {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    while !fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]")) {
        dir = dir.parent()?;
    }
    let path = dir.join("../shared/fixtures/topology");
    if path.is_dir() {
        Some(path)
    } else {
        test_env::skip(format!("{} is absent", path.display()));
        None
    }
}

/// The smallest `--size` the demo accepts for `workload` on `topology`, in
/// bytes, from its refusal of `--size 1` ("give --size NM or more").
fn minimum_size(topology: &str, workload: &str) -> u64 {
    let out = run(&[
        "demo",
        "--topology",
        topology,
        "--workload",
        workload,
        "--size",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let mib = err
        .split("give --size ")
        .nth(1)
        .and_then(|rest| rest.split("M or more").next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{topology} {workload}: no minimum size in: {err}"));
    mib * MIB
}

#[test]
fn every_capture_runs_every_workload() {
    let Some(dir) = captures_dir() else {
        return;
    };
    let mut failures = Vec::new();
    for capture in CAPTURES {
        let topology = dir.join(capture);
        let topology = topology.to_str().unwrap();
        if capture == REFUSED {
            for workload in ["basic", "pytorch", "tensorflow", "multi"] {
                let out = run(&["demo", "--topology", topology, "--workload", workload]);
                let err = stderr(&out);
                if out.status.code() != Some(2)
                    || !err.contains("node 0 holds both CPU cores (4) and GPU SIMDs (32)")
                {
                    failures.push(format!("{capture} {workload}: not refused: {err}"));
                }
            }
            continue;
        }
        for workload in ["basic", "pytorch", "tensorflow", "multi"] {
            let size = if workload == "basic" {
                None
            } else {
                let minimum = minimum_size(topology, workload).max(16 * MIB);
                if minimum > LARGEST_RUN {
                    println!(
                        "{capture} {workload}: needs --size {} MiB, left to the release demo",
                        minimum / MIB
                    );
                    continue;
                }
                Some(format!("{}M", minimum / MIB))
            };
            let mut args = vec!["demo", "--topology", topology, "--workload", workload];
            if let Some(size) = &size {
                args.extend(["--size", size.as_str()]);
            }
            let out = run(&args);
            let text = stdout(&out);
            if out.status.code() != Some(0) || !text.contains("verified: ") {
                failures.push(format!(
                    "{capture} {workload}: exit {:?}\n{text}{}",
                    out.status.code(),
                    stderr(&out)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The capture of a GPU older than gfx9, which a checkpoint was not tried on.
const UNTESTED_FAMILY: &str = "polaris-rx470-issue474";

#[test]
fn doctor_says_what_the_demo_does_on_every_capture() {
    let Some(dir) = captures_dir() else {
        return;
    };
    for capture in CAPTURES {
        let topology = dir.join(capture);
        let topology = topology.to_str().unwrap();
        let out = run(&["doctor", "--simulate", topology, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{capture}: {e}: {}", stderr(&out)));
        let check = |name: &str| {
            let c = v["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .unwrap_or_else(|| panic!("{capture}: no {name} check: {v:#}"));
            (
                c["status"].as_str().unwrap().to_owned(),
                c["detail"].as_str().unwrap().to_owned(),
            )
        };
        // The machine as given, not the simulator's temporary tree.
        assert!(
            v["machine"].as_str().unwrap().starts_with(topology),
            "{capture}: {v:#}"
        );
        let (status, detail) = check("topology");
        assert!(detail.starts_with(topology), "{capture}: {detail}");
        assert!(!detail.contains("/dev/shm"), "{capture}: {detail}");
        if capture == REFUSED {
            assert_eq!(status, "fail", "{capture}: {detail}");
            assert!(
                detail.contains("node 0 holds both CPU cores (4) and GPU SIMDs (32)"),
                "{capture}: {detail}"
            );
            continue;
        }
        assert_eq!(status, "ok", "{capture}: {detail}");
        let (status, detail) = check("gpu family");
        if capture == UNTESTED_FAMILY {
            assert_eq!(status, "warn", "{capture}: {detail}");
            assert!(detail.contains("CI or VI (gfx7, gfx8)"), "{detail}");
        } else {
            assert_eq!(status, "ok", "{capture}: {detail}");
        }
    }
}
