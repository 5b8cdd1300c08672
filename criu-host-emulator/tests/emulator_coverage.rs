//! Coverage scenarios through the emulated CRIU: a whole
//! 8-GPU machine restored on its renumbered twin hive by hive, and each
//! `KFD_*_CHECK` device check (the six property checks and CPU placement),
//! refused with its reason when on and restored when off.
//!
//! `--stream` is covered in `emulator_stream.rs`, containers in
//! `emulator_container.rs`.

mod common;

use amdgpu_checkpoint::options::Options;
use amdgpu_topology::model::System;
use common::{checkpoint, hook_errno, vmas_of, Checkpointed};
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

/// The options with every check on except variable `off` set to `NO`.
fn options_without(off: Option<&'static str>) -> Options {
    let (options, invalid) = Options::default()
        .read(|name| (Some(name) == off).then(|| "NO".to_owned()), &[])
        .unwrap();
    assert!(invalid.is_empty(), "{invalid:?}");
    options
}

/// One device check: its variable, the property named in the reason, and
/// how the restore machine differs from the checkpoint machine.
struct Check {
    variable: &'static str,
    property: &'static str,
    change: fn(&mut System),
}

fn gpu_prop_lower(system: &mut System, key: &str) {
    for node in system.nodes.iter_mut().filter(|n| n.is_gpu()) {
        let value = node.prop(key);
        assert!(value > 0, "{key} of the builtin GPU is 0");
        node.properties.set(key, value - 1);
    }
}

const CHECKS: &[Check] = &[
    Check {
        variable: "KFD_FW_VER_CHECK",
        property: "fw_version",
        change: |s| gpu_prop_lower(s, "fw_version"),
    },
    Check {
        variable: "KFD_SDMA_FW_VER_CHECK",
        property: "sdma_fw_version",
        change: |s| gpu_prop_lower(s, "sdma_fw_version"),
    },
    Check {
        variable: "KFD_CACHES_COUNT_CHECK",
        property: "caches_count",
        change: |s| gpu_prop_lower(s, "caches_count"),
    },
    Check {
        variable: "KFD_NUM_GWS_CHECK",
        property: "num_gws",
        change: |s| gpu_prop_lower(s, "num_gws"),
    },
    Check {
        variable: "KFD_VRAM_SIZE_CHECK",
        property: "vram_size",
        change: |s| {
            for node in s.nodes.iter_mut().filter(|n| n.is_gpu()) {
                let (size, _) = node.vram().expect("builtin GPU has VRAM");
                for bank in node.mem_banks.iter_mut().flatten() {
                    if bank.properties.get_or_zero("size_in_bytes") == size {
                        bank.properties.set("size_in_bytes", size / 2);
                    }
                }
            }
        },
    },
    Check {
        variable: "KFD_CAPABILITY_CHECK",
        property: "capability",
        change: |s| {
            for node in s.nodes.iter_mut().filter(|n| n.is_gpu()) {
                let value = node.prop("capability");
                // A bit of the reserved range: nothing the simulator reads.
                node.properties.set("capability", value ^ (1 << 30));
            }
        },
    },
];

/// Each property check: with its option on the restore is refused for that
/// property; with it off the same image restores and verifies.
#[test]
fn each_property_check_refuses_when_on_and_restores_when_off() {
    let base = amdgpu_topology::builtin("single-gpu").unwrap();
    for check in CHECKS {
        let origin = Sim::new(base.clone(), SimConfig::default()).unwrap();
        let Checkpointed {
            dirs,
            pid,
            ids,
            expected,
            image,
        } = checkpoint(&origin, &Profile::TensorFlowLike { bo_bytes: 64 << 10 });

        let mut changed = base.clone();
        (check.change)(&mut changed);
        assert_ne!(changed, base, "{}: the machine differs", check.variable);
        let target = Sim::new(changed, SimConfig::default())
            .unwrap_or_else(|e| panic!("{}: restore machine: {e}", check.variable));

        {
            let capture = Capture::start();
            let err = dirs
                .emulator(&target, |c| c.options = options_without(None))
                .restore(pid, &ids, &vmas_of(&image))
                .expect_err(check.variable);
            assert_eq!(
                hook_errno(&err),
                ("RESTORE_EXT_FILE", -libc::ENODEV),
                "{}",
                check.variable
            );
            let lines = capture.lines();
            let refusal: Vec<&String> = lines
                .iter()
                .filter(|(l, t)| *l == Level::Error && t.contains("cannot restore"))
                .map(|(_, t)| t)
                .collect();
            assert!(
                refusal.iter().any(|t| t.contains(check.property)),
                "{}: {refusal:?}",
                check.variable
            );
            assert!(!target.process_alive(pid));
        }

        let task = dirs
            .emulator(&target, |c| {
                c.options = options_without(Some(check.variable));
            })
            .restore(pid, &ids, &vmas_of(&image))
            .unwrap_or_else(|e| panic!("{} off: {e}", check.variable));
        assert_eq!(task.resume_answer, 0);
        Workload::verify(&target, pid, &expected)
            .unwrap_or_else(|e| panic!("{} off: {e}", check.variable));
    }
}

/// What a container cannot do, a process using the whole MI210 machine can:
/// restored on the same machine as another host numbers it (GPU nodes
/// permuted, new gpu_ids, render minors and hive ids), every checkpointed
/// GPU goes to a distinct local GPU, GPUs of one hive stay together in one
/// local hive, and the BOs come back with their contents.
#[test]
fn a_whole_mi210_machine_restores_on_its_renumbered_twin_hive_by_hive() {
    let system = amdgpu_topology::builtin("mi210-8gpu-2hive").unwrap();
    let origin = Sim::new(system.clone(), SimConfig::default()).unwrap();
    let Checkpointed {
        dirs,
        pid,
        ids,
        expected,
        image,
    } = checkpoint(&origin, &Profile::TensorFlowLike { bo_bytes: 16 << 10 });
    assert_eq!(image.num_of_gpus, 8);

    let (twin, _) = amdgpu_topology::renumbered_with_map(&system, 0x5eed);
    let target = Sim::new(twin.clone(), SimConfig::default()).unwrap();
    let task = dirs
        .emulator(&target, |_| {})
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restore on the renumbered twin");
    assert_eq!(task.resume_answer, 0);
    let restored = task.plugin.restorer().expect("a restorer").restored();
    assert_eq!(restored.len(), 1);
    let map = &restored[0].gpu_map;

    let hive_of = |s: &System, gpu: u32| {
        s.gpus()
            .find(|n| n.gpu_id == Some(gpu))
            .unwrap_or_else(|| panic!("GPU {gpu:#x} not in the topology"))
            .hive_id()
    };
    let mut origin_ids: Vec<u32> = origin.gpus().iter().map(|g| g.gpu_id).collect();
    let mut local_ids: Vec<u32> = target.gpus().iter().map(|g| g.gpu_id).collect();
    let mut mapped_from: Vec<u32> = map.keys().copied().collect();
    let mut mapped_to: Vec<u32> = map.values().copied().collect();
    for v in [
        &mut origin_ids,
        &mut local_ids,
        &mut mapped_from,
        &mut mapped_to,
    ] {
        v.sort_unstable();
    }
    assert_eq!(mapped_from, origin_ids, "every checkpointed GPU is mapped");
    assert_eq!(mapped_to, local_ids, "onto distinct local GPUs");
    assert!(
        origin_ids.iter().all(|id| !local_ids.contains(id)),
        "the twin's gpu_ids are all new"
    );
    for (&a, &la) in map {
        for (&b, &lb) in map {
            assert_eq!(
                hive_of(&system, a) == hive_of(&system, b),
                hive_of(&twin, la) == hive_of(&twin, lb),
                "hive membership of {a:#x}/{b:#x} -> {la:#x}/{lb:#x}"
            );
        }
    }
    Workload::verify(&target, pid, &expected).expect("restored state matches the checkpoint");
    Workload::attach(&target, pid)
        .step()
        .expect("restored process runs");
}

/// `pcie-2gpu` with a second CPU socket holding the second GPU: the two
/// GPUs, on one CPU at checkpoint, are on two CPUs here.
fn pcie_2gpu_split_over_two_sockets() -> System {
    let mut system = amdgpu_topology::builtin("pcie-2gpu").unwrap();
    let gpu_nodes: Vec<u32> = system.gpus().map(|n| n.id).collect();
    assert_eq!(gpu_nodes.len(), 2);
    let (kept, moved) = (gpu_nodes[0], gpu_nodes[1]);
    let new_cpu = system.nodes.iter().map(|n| n.id).max().unwrap() + 1;
    let cpu = system
        .nodes
        .iter_mut()
        .find(|n| !n.is_gpu())
        .expect("a CPU node");
    let cpu_id = cpu.id;
    let mut second = cpu.clone();
    cpu.io_links
        .as_mut()
        .unwrap()
        .retain(|l| l.node_to() != moved);
    cpu.properties.set("io_links_count", 1);
    assert!(cpu.io_links().iter().all(|l| l.node_to() == kept));
    second.id = new_cpu;
    let links = second.io_links.as_mut().unwrap();
    links.retain(|l| l.node_to() == moved);
    for link in links.iter_mut() {
        link.index = 0;
        link.properties.set("node_from", u64::from(new_cpu));
    }
    second.properties.set("io_links_count", 1);
    for node in system.nodes.iter_mut().filter(|n| n.id == moved) {
        for link in node.io_links.iter_mut().flatten() {
            if link.node_to() == cpu_id {
                link.properties.set("node_to", u64::from(new_cpu));
            }
        }
    }
    system.nodes.push(second);
    system
}

/// `KFD_NUMA_CHECK`: two GPUs of one CPU, restored where they hang off two
/// CPUs, are refused for CPU placement with the check on and restored with
/// it off.
#[test]
fn numa_placement_refuses_when_on_and_restores_when_off() {
    let origin = Sim::builtin("pcie-2gpu", SimConfig::default()).unwrap();
    let Checkpointed {
        dirs,
        pid,
        ids,
        expected,
        image,
    } = checkpoint(&origin, &Profile::TensorFlowLike { bo_bytes: 16 << 10 });
    let target = Sim::new(pcie_2gpu_split_over_two_sockets(), SimConfig::default())
        .expect("the split machine");

    {
        let capture = Capture::start();
        let err = dirs
            .emulator(&target, |c| c.options = options_without(None))
            .restore(pid, &ids, &vmas_of(&image))
            .expect_err("NUMA placement differs");
        assert_eq!(hook_errno(&err), ("RESTORE_EXT_FILE", -libc::ENODEV));
        let lines = capture.lines();
        assert!(
            lines.iter().any(|(l, t)| *l == Level::Error
                && t.contains("cannot restore")
                && t.contains(
                    "2 GPUs share its CPU node, at most 1 of them fit on one local CPU node"
                )),
            "{lines:?}"
        );
    }
    let task = dirs
        .emulator(&target, |c| {
            c.options = options_without(Some("KFD_NUMA_CHECK"))
        })
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restored without the NUMA check");
    assert_eq!(task.resume_answer, 0);
    Workload::verify(&target, pid, &expected).expect("restored state matches the checkpoint");
}
