//! The `preflight` example's decision (examples/preflight/preflight.rs,
//! included here) on image sets written from built-in machines: the same
//! machine, a renumbered copy read back from a sysfs tree, smaller and
//! different machines, firmware checks, several processes, broken images.

#[path = "../examples/preflight/preflight.rs"]
mod preflight;

use std::path::Path;

use amdgpu_image::topology::device_entry;
use amdgpu_image::{CriuKfd, DirStore, ImageName, ImageStore, KfdDeviceEntry};
use amdgpu_topology::devices::DeviceTopology;
use amdgpu_topology::options::CheckOptions;
use amdgpu_topology::{builtin, renumbered, write};
use preflight::{preflight, read_checkpoint, Machine, Process, Report, Verdict};

/// The device entries the plugin writes for `machine`.
fn device_entries(machine: &str) -> Vec<KfdDeviceEntry> {
    let system = builtin(machine).expect("a built-in machine");
    let topology = DeviceTopology::from_system(&system).unwrap();
    topology
        .nodes
        .iter()
        .map(|n| device_entry(n, n.gpu_id, &topology))
        .collect()
}

/// Writes `amdgpu-kfd-<id>.img` with `entries` (no BOs) into `dir`.
fn write_kfd(dir: &Path, id: u32, pid: u32, entries: Vec<KfdDeviceEntry>) {
    let gpus = entries.iter().filter(|e| e.is_gpu()).count() as u32;
    let mut kfd = CriuKfd {
        pid,
        num_of_gpus: gpus,
        num_of_cpus: entries.len() as u32 - gpus,
        device_entries: entries,
        num_of_bos: 0,
        bo_entries: Vec::new(),
        num_of_objects: 0,
        shared_mem_size: 0,
        shared_mem_magic: 0,
        priv_data: Vec::new(),
        producer: None,
        format_version: None,
        kfd_major_version: None,
        kfd_minor_version: None,
        kfd_required_minor: None,
        message_checksum: None,
        ..Default::default()
    };
    kfd.mark_producer();
    let store = DirStore::open_dir(dir).unwrap();
    store.write_message(&ImageName::Kfd { id }, &kfd).unwrap();
}

fn checkpoint_of(machine: &str) -> (tempfile::TempDir, Vec<Process>) {
    let dir = tempfile::tempdir().unwrap();
    write_kfd(dir.path(), 3, 4242, device_entries(machine));
    let processes = read_checkpoint(dir.path()).unwrap();
    (dir, processes)
}

fn text(machine: &Machine, processes: &[Process], verdict: &Verdict) -> String {
    Report {
        machine,
        processes,
        verdict,
    }
    .to_string()
}

#[test]
fn same_machine_and_renumbered_copy_are_compatible() {
    let (_dir, processes) = checkpoint_of("mi210-8gpu-2hive");
    assert_eq!(processes.len(), 1);
    assert_eq!(processes[0].pid, 4242);
    assert_eq!(processes[0].topology.gpus().count(), 8);

    let same = Machine::load("a=builtin:mi210-8gpu-2hive");
    let Verdict::Compatible(maps) = preflight(&processes, &same, &CheckOptions::all()) else {
        panic!("the checkpointing machine must take its own checkpoint");
    };
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].len(), 8);

    // Another machine of the same kind: new gpu_ids, GPUs on other nodes,
    // read from a sysfs tree as from a real machine.
    let sysfs = tempfile::tempdir().unwrap();
    let other = renumbered(&builtin("mi210-8gpu-2hive").unwrap(), 7);
    write(&other, &sysfs.path().join("topology")).unwrap();
    let spec = format!("b={}", sysfs.path().join("topology").display());
    let copy = Machine::load(&spec);
    let verdict = preflight(&processes, &copy, &CheckOptions::all());
    let Verdict::Compatible(maps) = &verdict else {
        panic!("{}", text(&copy, &processes, &verdict));
    };
    let local: Vec<u32> = copy
        .topology
        .as_ref()
        .unwrap()
        .gpus()
        .map(|n| n.gpu_id)
        .collect();
    let checkpointed: Vec<u32> = processes[0].topology.gpus().map(|n| n.gpu_id).collect();
    for (c, l) in &maps[0] {
        assert!(checkpointed.contains(c) && local.contains(l));
        assert_ne!(c, l, "renumbered gpu_ids never coincide");
    }
    let report = text(&copy, &processes, &verdict);
    assert!(report.starts_with("b: compatible\n"), "{report}");
    assert!(
        report.contains("amdgpu-kfd-3.img (pid 4242): gpu_ids "),
        "{report}"
    );
}

#[test]
fn other_machines_are_refused_with_reasons() {
    let (_dir, processes) = checkpoint_of("mi210-8gpu-2hive");
    let small = Machine::load("builtin:pcie-2gpu");
    let verdict = preflight(&processes, &small, &CheckOptions::all());
    let Verdict::Incompatible(refusals) = &verdict else {
        panic!("2 GPUs cannot take an 8-GPU checkpoint");
    };
    assert_eq!(refusals.len(), 1);
    assert!(
        refusals[0].1.iter().any(|r| r.contains("number of GPUs")),
        "{refusals:?}"
    );
    let report = text(&small, &processes, &verdict);
    assert!(
        report.starts_with("builtin:pcie-2gpu: not compatible\n"),
        "{report}"
    );
    assert!(report.contains("  amdgpu-kfd-3.img: "), "{report}");

    let missing = Machine::load("gone=/nonexistent/topology");
    let verdict = preflight(&processes, &missing, &CheckOptions::all());
    assert!(matches!(verdict, Verdict::Unknown(_)));
    assert!(
        text(&missing, &processes, &verdict).starts_with("gone: unknown: cannot read the topology")
    );

    let unknown = Machine::load("builtin:no-such-machine");
    assert!(matches!(
        preflight(&processes, &unknown, &CheckOptions::all()),
        Verdict::Unknown(_)
    ));
}

#[test]
fn newer_firmware_in_the_checkpoint_is_refused_unless_the_check_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut entries = device_entries("pcie-2gpu");
    for e in entries.iter_mut().filter(|e| e.is_gpu()) {
        e.fw_version += 1;
    }
    write_kfd(dir.path(), 1, 10, entries);
    let processes = read_checkpoint(dir.path()).unwrap();
    let machine = Machine::load("builtin:pcie-2gpu");
    let Verdict::Incompatible(refusals) = preflight(&processes, &machine, &CheckOptions::all())
    else {
        panic!("a checkpoint from newer firmware must be refused");
    };
    assert!(
        refusals[0].1.iter().all(|r| r.contains("fw_version")),
        "{refusals:?}"
    );
    let relaxed = CheckOptions {
        fw_version: false,
        ..CheckOptions::all()
    };
    assert!(matches!(
        preflight(&processes, &machine, &relaxed),
        Verdict::Compatible(_)
    ));
}

#[test]
fn every_process_must_map() {
    let dir = tempfile::tempdir().unwrap();
    write_kfd(dir.path(), 1, 100, device_entries("pcie-2gpu"));
    let mut entries = device_entries("pcie-2gpu");
    for e in entries.iter_mut().filter(|e| e.is_gpu()) {
        e.device_id ^= 1;
    }
    write_kfd(dir.path(), 2, 101, entries);
    let processes = read_checkpoint(dir.path()).unwrap();
    assert_eq!(processes.len(), 2);
    let machine = Machine::load("builtin:pcie-2gpu");
    let Verdict::Incompatible(refusals) = preflight(&processes, &machine, &CheckOptions::all())
    else {
        panic!("the second process's GPUs do not exist here");
    };
    let images: Vec<&str> = refusals.iter().map(|(image, _)| image.as_str()).collect();
    assert_eq!(images, ["amdgpu-kfd-2.img"]);
}

#[test]
fn unreadable_checkpoints_are_errors() {
    let empty = tempfile::tempdir().unwrap();
    let err = read_checkpoint(empty.path()).err().unwrap();
    assert!(err.contains("no amdgpu-kfd-*.img"), "{err}");

    let broken = tempfile::tempdir().unwrap();
    let mut entries = device_entries("pcie-2gpu");
    entries[1].gpu_id = entries[2].gpu_id;
    write_kfd(broken.path(), 1, 1, entries);
    assert!(
        read_checkpoint(broken.path()).is_err(),
        "duplicate gpu_ids must not validate"
    );

    let truncated = tempfile::tempdir().unwrap();
    std::fs::write(truncated.path().join("amdgpu-kfd-1.img"), [9, 0, 0]).unwrap();
    assert!(read_checkpoint(truncated.path()).is_err());
}
