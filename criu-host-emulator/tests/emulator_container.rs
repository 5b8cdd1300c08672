//! A process in a container that sees a subset of a machine's GPUs,
//! checkpointed from the host and restored into containers of other
//! machines through the emulated CRIU.
//!
//! The only test of this binary: the process's own memory (where its
//! USERPTR BOs point) is mapped back at its old addresses, which a
//! concurrent test's `mmap` in the same host process could take.

mod common;

use common::{device_vmas, gpu_files, kfd_image, vmas_of, Dirs};
use criu_host_emulator::EmulatorError;
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{CpuMemory, Profile, Workload};
use kfd_sim::{ProcessConfig, Sim, SimConfig};

fn hook_name(err: &EmulatorError) -> &'static str {
    match err {
        EmulatorError::Hook { hook, .. } => hook,
        other => panic!("expected a hook failure, got {other}"),
    }
}

/// The hive (`hive_id`) of each GPU of `sim`, in the order of `sim.gpus()`.
fn hives(sim: &Sim) -> Vec<u64> {
    sim.gpus()
        .iter()
        .map(|g| {
            sim.topology()
                .nodes
                .iter()
                .find(|n| n.gpu_id == Some(g.gpu_id))
                .expect("GPU node")
                .hive_id()
        })
        .collect()
}

/// Two GPUs of hive `hive` and one of another hive, as gpu_ids.
fn pair_in_hive_and_stranger(sim: &Sim, hive: usize) -> (Vec<u32>, u32) {
    let gpus = sim.gpus();
    let hives = hives(sim);
    let mut ids: Vec<u64> = hives.clone();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 2, "two XGMI hives");
    let pair: Vec<u32> = gpus
        .iter()
        .zip(&hives)
        .filter(|(_, h)| **h == ids[hive])
        .map(|(g, _)| g.gpu_id)
        .take(2)
        .collect();
    let stranger = gpus
        .iter()
        .zip(&hives)
        .find(|(_, h)| **h != ids[hive])
        .map(|(g, _)| g.gpu_id)
        .unwrap();
    (pair, stranger)
}

/// A container holding 2 of the 8 GPUs of an MI210 machine (a device cgroup
/// with 2 render nodes; CRIU dumps from the host, where sysfs shows all 8).
/// The image describes what the process sees: its 2 GPUs, the CPU nodes
/// and the links among them (upstream refuses this dump). It restores into
/// a 2-GPU container on a renumbered machine of the same model, on GPUs of
/// the other hive, and the workload goes on to the same result; containers
/// of another shape are refused with the reason before any kernel state is
/// made: 2 GPUs from different hives (the XGMI link is lost), 3 GPUs, and
/// the whole machine.
#[test]
fn a_two_gpu_container_of_an_eight_gpu_machine_restores_into_another_container() {
    let origin = Sim::builtin("mi210-8gpu-2hive", SimConfig::default()).unwrap();
    assert_eq!(origin.gpus().len(), 8);
    let (visible, _) = pair_in_hive_and_stranger(&origin, 0);
    let pid = origin
        .spawn_process_with(ProcessConfig {
            visible_gpus: Some(visible.clone()),
            ..ProcessConfig::default()
        })
        .unwrap();
    // USERPTR memory is the process's own (CRIU's pages images carry it to
    // the other machine).
    let mut app =
        Workload::launch_in_with_memory(&origin, pid, &Profile::Basic, CpuMemory::Process)
            .expect("launch");
    app.step().unwrap();
    let expected = app.describe().unwrap();
    let dirs = Dirs::new();
    let (files, ids) = gpu_files(&app);
    assert_eq!(files.len(), 3, "/dev/kfd and the two visible render nodes");
    let capture = Capture::start();
    dirs.emulator(&origin, |_| {})
        .dump(pid, &files, &device_vmas(&origin))
        .expect("dump of a GPU subset");
    let lines = capture.lines();
    drop(capture);
    let left_out = lines
        .iter()
        .filter(|(l, t)| *l == Level::Info && t.contains("left out of the image"))
        .count();
    assert_eq!(left_out, 6, "the 6 GPUs the container hides: {lines:?}");
    let image = kfd_image(dirs.images.path());
    assert_eq!(image.num_of_gpus, 2);
    let gpu_entries: Vec<_> = image
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .collect();
    assert_eq!(gpu_entries.len(), 2);
    let nodes: std::collections::BTreeSet<u32> =
        image.device_entries.iter().map(|d| d.node_id).collect();
    for entry in &image.device_entries {
        for link in &entry.iolinks {
            assert!(
                nodes.contains(&link.node_to_id),
                "node {} links to node {}, which the image does not hold",
                entry.node_id,
                link.node_to_id
            );
        }
    }
    let xgmi =
        |e: &amdgpu_image::KfdDeviceEntry| e.iolinks.iter().filter(|l| l.r#type == 11).count();
    assert!(
        gpu_entries.iter().all(|e| xgmi(e) == 1),
        "the two GPUs keep their XGMI link to each other"
    );
    drop(files);
    app.exit().unwrap();

    let renumbered =
        amdgpu_topology::renumbered(&amdgpu_topology::builtin("mi210-8gpu-2hive").unwrap(), 7);
    let restore_in =
        |cgroup: Option<Vec<u32>>| -> (Sim, Result<(), EmulatorError>, Vec<(Level, String)>) {
            let target = Sim::new(renumbered.clone(), SimConfig::default()).unwrap();
            let capture = Capture::start();
            let result = dirs
                .emulator(&target, |c| c.restore_visible_gpus = cgroup)
                .restore(pid, &ids, &vmas_of(&image))
                .map(drop);
            let lines = capture.lines();
            (target, result, lines)
        };
    let probe = Sim::new(renumbered.clone(), SimConfig::default()).unwrap();
    let (other_hive, stranger) = pair_in_hive_and_stranger(&probe, 1);
    let (first_hive, _) = pair_in_hive_and_stranger(&probe, 0);
    drop(probe);

    // The same shape on the other hive of a renumbered machine.
    let (target, result, lines) = restore_in(Some(other_hive.clone()));
    result.unwrap_or_else(|e| panic!("restore into a 2-GPU container: {e}: {lines:?}"));
    Workload::verify(&target, pid, &expected).expect("state matches in the new container");
    let mut resumed = Workload::attach(&target, pid);
    resumed.step().expect("the workload goes on");
    drop(resumed);
    target.exit_process(pid).unwrap();

    // Other shapes: refused, naming why, and nothing left in the kernel.
    let shapes: [(&str, Option<Vec<u32>>, &str); 3] = [
        (
            "two GPUs of different hives",
            Some(vec![other_hive[0], first_hive[0]]),
            "number of XGMI hives mismatch: 1 checkpointed, only 0 local",
        ),
        (
            "three GPUs",
            Some(vec![other_hive[0], other_hive[1], stranger]),
            "number of GPUs mismatch: 2 checkpointed, 3 local",
        ),
        (
            "the whole machine",
            None,
            "number of GPUs mismatch: 2 checkpointed, 8 local",
        ),
    ];
    for (shape, cgroup, reason) in shapes {
        let (target, result, lines) = restore_in(cgroup);
        let err = result.expect_err(shape);
        assert_eq!(hook_name(&err), "RESTORE_EXT_FILE", "{shape}");
        assert!(
            lines.iter().any(|(l, t)| *l == Level::Error
                && t.contains("cannot restore on this machine")
                && t.contains(reason)),
            "{shape}: the reason is logged: {lines:?}"
        );
        drop(target);
    }
}
