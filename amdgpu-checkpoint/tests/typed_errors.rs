//! Errors a caller can match: an image restored where it does not fit
//! gives the variant of that cause, with the data in its fields, and the
//! message users read is built from them.

use std::os::fd::{AsFd, OwnedFd};

use amdgpu_checkpoint::dump::{DumpConfig, Dumper};
use amdgpu_checkpoint::error::Incompatibility;
use amdgpu_checkpoint::identify::{Devices, DrainedFile, FdClass};
use amdgpu_checkpoint::restore::{RestoreConfig, Restorer, Sharing, TaskIdentity};
use amdgpu_checkpoint::{Error, Options};
use amdgpu_image::DirStore;
use amdgpu_topology::checks::{rule, Reason};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

/// Dumps the /dev/kfd file of a process on a machine of `gpus` GPUs into
/// `store`; its file id.
fn dump_kfd(gpus: usize, store: &DirStore, shm: &std::path::Path) -> u32 {
    let sim = Sim::synthetic(gpus, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
    app.step().unwrap();
    let tool = sim.spawn_process().unwrap();
    sim.ptrace_attach(tool, app.pid()).unwrap();
    let driver = sim.driver(tool);
    let devices = Devices::probe(&driver).unwrap().unwrap();
    let kfd: OwnedFd = app.kfd_fd().unwrap().try_clone_to_owned().unwrap();
    assert!(matches!(
        devices.classify_fd(&driver, kfd.as_fd()).unwrap(),
        FdClass::Kfd
    ));
    let mut dumper = Dumper::new(
        driver.clone(),
        DumpConfig {
            topology_root: sim.sysfs_root(),
            options: Options::default(),
            unpause_early: false,
            shm_dir: shm.to_path_buf(),
            guardian_log_dir: None,
            guardian_driver: Default::default(),
        },
    );
    let id = 1;
    let file = DrainedFile::identify(&driver, kfd.as_fd());
    let dumped = dumper.dump_kfd(store, file, id);
    dumper.unpause_all().unwrap();
    sim.ptrace_detach(app.pid()).unwrap();
    dumped.unwrap();
    id
}

#[test]
fn a_two_gpu_image_on_a_one_gpu_machine_is_incompatible_by_gpu_count() {
    let scratch = tempfile::tempdir().unwrap();
    let (images, shm) = (scratch.path().join("images"), scratch.path().join("shm"));
    std::fs::create_dir_all(&images).unwrap();
    std::fs::create_dir_all(&shm).unwrap();
    let store = DirStore::open_dir(&images).unwrap();
    let id = dump_kfd(2, &store, &shm);

    let machine = Sim::synthetic(1, SimConfig::default()).unwrap();
    let process = machine.spawn_process().unwrap();
    let mut restorer = Restorer::new(
        machine.driver(process),
        RestoreConfig {
            topology_root: machine.sysfs_root(),
            options: Options::default(),
            shm_dir: shm.clone(),
        },
    );
    let task = TaskIdentity {
        pid: Some(process.0),
        find_unused_fd: &|_| None,
    };
    let err = restorer
        .restore_file(&store, id, &task, &Sharing::within_process())
        .unwrap_err();
    let Error::Incompatible { problems } = &err else {
        panic!("not Incompatible: {err:?}");
    };
    let count = problems
        .iter()
        .find_map(|p| match p {
            Incompatibility::Mismatch(
                reason @ Reason {
                    check: rule::GPU_COUNT,
                    ..
                },
            ) => Some(reason),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no gpu_count problem: {problems:?}"));
    assert_eq!((count.checkpointed, count.local), (2, 1));
    // The text is the problems', joined, after the one prefix.
    let joined: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        err.to_string(),
        format!("cannot restore on this machine: {}", joined.join("; "))
    );
    assert_eq!(err.errno(), -libc::ENODEV);
}
