//! Hostile sysfs under the plugin: the KFD topology the plugin reads (a copy
//! of the simulated machine's tree) has garbage properties, missing files,
//! unreadable nodes, or loses a GPU node between the dump and the restore.
//! Each dump must fail with an error (not `-ENOTSUP`, not a panic) whose log
//! line points at the topology, leave the application running and leak
//! nothing; each restore must be refused before `CRIU_OP RESTORE`.
//!
//! The parser's own behaviour on such trees (skips, notes, a node removed
//! between `readdir` and `read`, a generation change during the read) is
//! tested in amdgpu-topology's `parse_hostile.rs`. This file also replays
//! the `topology_properties` fuzz corpus (fuzz/corpus/topology_properties/)
//! through the fuzz target's check on stable Rust, so every finding stays a
//! regression test.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use amdgpu_topology::parse::parse_properties;
use amdgpu_topology::write::format_properties;
use criu_host_emulator::EmulatedHost;
use criu_plugin_amdgpu::abi::PANIC_ERRNO;
use criu_plugin_amdgpu::hooks::NOT_MINE;
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

mod common;
mod faults_common;

use common::{device_vmas, gpu_files, kfd_image, vmas_of};
use faults_common::{FaultDriver, MiniCriu, Snapshot};

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The directory of the first GPU node of a topology tree.
fn gpu_node(root: &Path) -> PathBuf {
    let nodes = root.join("nodes");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&nodes)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    dirs.into_iter()
        .find(|d| {
            std::fs::read_to_string(d.join("gpu_id"))
                .is_ok_and(|s| s.trim().parse::<u64>().is_ok_and(|id| id != 0))
        })
        .expect("a GPU node")
}

fn replace_line(path: &Path, key: &str, line: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    let out: String = text
        .lines()
        .map(|l| {
            if l.split_whitespace().next() == Some(key) {
                line.to_owned()
            } else {
                l.to_owned()
            }
        })
        .map(|l| l + "\n")
        .collect();
    std::fs::write(path, out).unwrap();
}

type Damage = Box<dyn Fn(&Path)>;

fn damages() -> Vec<(&'static str, Damage)> {
    vec![
        (
            "garbage simd_count",
            Box::new(|root| {
                replace_line(
                    &gpu_node(root).join("properties"),
                    "simd_count",
                    "simd_count banana",
                )
            }),
        ),
        (
            "properties not utf-8",
            Box::new(|root| {
                std::fs::write(gpu_node(root).join("properties"), b"\xff\xfe\n").unwrap()
            }),
        ),
        (
            "properties missing",
            Box::new(|root| std::fs::remove_file(gpu_node(root).join("properties")).unwrap()),
        ),
        (
            "gpu_id garbage",
            Box::new(|root| std::fs::write(gpu_node(root).join("gpu_id"), "0x12zz\n").unwrap()),
        ),
        (
            "gpu_id overflowing",
            Box::new(|root| {
                std::fs::write(gpu_node(root).join("gpu_id"), "99999999999999999999999\n").unwrap()
            }),
        ),
        (
            "GPU node gone",
            Box::new(|root| std::fs::remove_dir_all(gpu_node(root)).unwrap()),
        ),
        (
            "nodes directory gone",
            Box::new(|root| std::fs::remove_dir_all(root.join("nodes")).unwrap()),
        ),
        (
            "mem_banks directory gone",
            Box::new(|root| {
                let _ = std::fs::remove_dir_all(gpu_node(root).join("mem_banks"));
            }),
        ),
    ]
}

/// Whether the log explains the failure: an error line, and an error or
/// warning line that points at the topology (its root, a skipped node) or
/// says the machine does not match the checkpoint.
fn names_topology(lines: &[(Level, String)], root: &Path) -> bool {
    let root = root.display().to_string();
    lines.iter().any(|(l, _)| *l == Level::Error)
        && lines.iter().any(|(l, t)| {
            matches!(l, Level::Error | Level::Warn)
                && (t.contains(&root) || t.contains("topology") || t.contains("this machine"))
        })
}

#[test]
fn dump_on_hostile_sysfs_fails_cleanly() {
    let shm = tempfile::tempdir().unwrap();
    let mut bad = Vec::new();
    for (case, damage) in damages() {
        let images = tempfile::tempdir().unwrap();
        let topo = tempfile::tempdir().unwrap();
        let sim = Sim::synthetic(1, SimConfig::default()).expect("simulated machine");
        copy_tree(&sim.sysfs_root(), topo.path());
        damage(topo.path());
        let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch app");
        app.step().expect("app step");
        let before = Snapshot::take(&sim).accounting;
        let mut criu = MiniCriu::new(&sim, shm.path());
        criu.topology_root = topo.path().to_path_buf();
        let (files, _) = gpu_files(&app);
        let capture = Capture::start();
        let result = criu.dump(
            |pid| sim.driver(pid),
            EmulatedHost::new(images.path(), None),
            app.pid(),
            &files,
            &device_vmas(&sim),
        );
        let lines = capture.lines();
        drop(capture);
        drop(files);
        match result {
            Ok(()) => bad.push(format!("{case}: the dump succeeded")),
            Err(f) if f.errno >= 0 || f.errno == NOT_MINE || f.errno == PANIC_ERRNO => {
                bad.push(format!("{case}: {} answered {}", f.hook, f.errno))
            }
            Err(_) => {}
        }
        if !names_topology(&lines, topo.path()) {
            bad.push(format!(
                "{case}: no error line points at the topology: {lines:?}"
            ));
        }
        let state = sim.kfd_state(app.pid()).unwrap();
        if !state.queues_running() || state.queues_paused {
            bad.push(format!("{case}: the application was left paused"));
        }
        let after = Snapshot::take(&sim).accounting;
        if before != after {
            bad.push(format!("{case}: leak: {before:?} -> {after:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn restore_on_hostile_sysfs_is_refused_before_the_kernel() {
    let shm = tempfile::tempdir().unwrap();
    let mut bad = Vec::new();
    for (case, damage) in damages() {
        let images = tempfile::tempdir().unwrap();
        let topo = tempfile::tempdir().unwrap();
        let sim = Sim::synthetic(1, SimConfig::default()).expect("simulated machine");
        let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch app");
        app.step().expect("app step");
        let mut criu = MiniCriu::new(&sim, shm.path());
        let (files, ids) = gpu_files(&app);
        let quiet = Capture::start();
        criu.dump(
            |pid| sim.driver(pid),
            EmulatedHost::new(images.path(), None),
            app.pid(),
            &files,
            &device_vmas(&sim),
        )
        .expect("clean dump");
        drop(quiet);
        drop(files);
        let pid = app.pid();
        app.exit().unwrap();
        // The machine's topology turns hostile between dump and restore.
        copy_tree(&sim.sysfs_root(), topo.path());
        damage(topo.path());
        criu.topology_root = topo.path().to_path_buf();
        let vmas = vmas_of(&kfd_image(images.path()));
        let before = Snapshot::take(&sim).accounting;
        let base = FaultDriver::new(sim.driver(pid));
        let capture = Capture::start();
        let result = criu.restore(
            |p| base.for_pid(p),
            EmulatedHost::new(images.path(), Some(200)),
            pid,
            &ids,
            &vmas,
        );
        let lines = capture.lines();
        drop(capture);
        match result {
            Ok(_) => bad.push(format!("{case}: the restore succeeded")),
            Err(f) if f.errno >= 0 || f.errno == NOT_MINE || f.errno == PANIC_ERRNO => {
                bad.push(format!("{case}: {} answered {}", f.hook, f.errno))
            }
            Err(_) => {}
        }
        // A node skipped for a missing file is named with its reason.
        if case == "properties missing"
            && !lines.iter().any(|(l, t)| {
                *l == Level::Warn && t.contains("skipped") && t.contains("properties")
            })
        {
            bad.push(format!("{case}: the skipped node is not logged: {lines:?}"));
        }
        if base.sites().iter().any(|s| s.op == "CRIU_OP:RESTORE") {
            bad.push(format!("{case}: CRIU_OP RESTORE was called"));
        }
        if !names_topology(&lines, topo.path()) {
            bad.push(format!(
                "{case}: no error line points at the topology: {lines:?}"
            ));
        }
        let after = Snapshot::take(&sim).accounting;
        if before != after {
            bad.push(format!("{case}: leak: {before:?} -> {after:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn unreadable_gpu_node_fails_the_dump_unless_privileged() {
    // Root reads past chmod 000 (CAP_DAC_OVERRIDE): as root, as in CI, the
    // test runs again as an unprivileged user, where the mode denies.
    if !test_env::unprivileged::run_here("unreadable_gpu_node_fails_the_dump_unless_privileged") {
        return;
    }
    let shm = tempfile::tempdir().unwrap();
    let images = tempfile::tempdir().unwrap();
    let topo = tempfile::tempdir().unwrap();
    let sim = Sim::synthetic(1, SimConfig::default()).expect("simulated machine");
    copy_tree(&sim.sysfs_root(), topo.path());
    let node = gpu_node(topo.path());
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o000)).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch app");
    app.step().expect("app step");
    let mut criu = MiniCriu::new(&sim, shm.path());
    criu.topology_root = topo.path().to_path_buf();
    let (files, _) = gpu_files(&app);
    let capture = Capture::start();
    let result = criu.dump(
        |pid| sim.driver(pid),
        EmulatedHost::new(images.path(), None),
        app.pid(),
        &files,
        &device_vmas(&sim),
    );
    let lines = capture.lines();
    drop(capture);
    drop(files);
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).unwrap();
    let failure = result.expect_err("the dump succeeded without its GPU node");
    assert!(failure.errno < 0 && failure.errno != NOT_MINE && failure.errno != PANIC_ERRNO);
    assert!(names_topology(&lines, topo.path()), "{lines:?}");
    assert!(sim.kfd_state(app.pid()).unwrap().queues_running());
}

/// The `topology_properties` fuzz target's check.
fn check_properties(data: &[u8]) {
    let path = Path::new("nodes/1/properties");
    let _ = amdgpu_topology::parse::parse_u64_file(data, Path::new("nodes/1/gpu_id"));
    if let Ok(props) = parse_properties(data, path) {
        let text = format_properties(&props);
        let again = parse_properties(text.as_bytes(), path)
            .unwrap_or_else(|e| panic!("formatted properties do not parse: {e}\n{text}"));
        assert_eq!(again, props, "properties changed through format and parse");
    }
}

#[test]
fn topology_properties_fuzz_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/topology_properties");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        test_env::skip(format!("no corpus at {}", dir.display()));
        return;
    };
    let mut n = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        if !path.is_file() {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        let result = std::panic::catch_unwind(|| check_properties(&data));
        assert!(result.is_ok(), "{} fails the check", path.display());
        n += 1;
    }
    assert!(n > 0, "empty corpus at {}", dir.display());
}
