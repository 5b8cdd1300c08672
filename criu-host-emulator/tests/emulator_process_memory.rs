//! The emulated CRIU carries a process's own CPU memory, where its USERPTR
//! BOs point: the dump writes it into `pages-<pid>.img` (an emulated CRIU
//! core image the plugin and `verify_set` leave alone), the restore maps it
//! back at the same addresses, on another simulated machine too, before the
//! USERPTR BOs are revalidated at RESUME.

use amdgpu_image::{verify_set, DirStore, ReadLimits};
use criu_host_emulator::{pages, EmulatorError};
use criu_plugin_amdgpu::log::Capture;
use kfd_sim::workload::{CpuMemory, Profile, Workload};
use kfd_sim::{synthetic_system, Sim, SimConfig, SimError};

mod common;

use common::{device_vmas, gpu_files, kfd_image, vmas_of, Dirs};

/// Between the checkpointed process's exit and the restore of its memory at
/// the same addresses, a concurrent test's `mmap` could take the freed
/// range: the tests of this binary run one at a time, each holding the
/// plugin's log capture (exclusive in the process; it also keeps the
/// plugin's log lines out of the test output).
fn serial() -> Capture {
    Capture::start()
}

/// Two machines of one model, numbered differently.
fn machines() -> (Sim, Sim) {
    let system = synthetic_system(2);
    let origin = Sim::new(system.clone(), SimConfig::default()).unwrap();
    let target = Sim::new(
        amdgpu_topology::renumbered(&system, 3),
        SimConfig::default(),
    )
    .unwrap();
    (origin, target)
}

fn launch(sim: &Sim) -> Workload {
    let mut w = Workload::launch_with_memory(sim, &Profile::Basic, CpuMemory::Process).unwrap();
    for _ in 0..3 {
        w.step().unwrap();
    }
    w
}

#[test]
fn userptr_memory_moves_to_another_machine() {
    let _serial = serial();
    let (origin, target) = machines();
    let app = launch(&origin);
    let mut twin = launch(&origin);
    let expected = app.describe().unwrap();
    assert!(expected.bos.iter().any(|b| b.user_addr != 0), "has USERPTR");
    let pid = app.pid();
    let memory = origin.host_memory_of(pid);
    assert!(!memory.is_empty());

    let dirs = Dirs::new();
    let images = dirs.images.path();
    let (files, ids) = gpu_files(&app);
    dirs.emulator(&origin, |_| {})
        .dump(pid, &files, &device_vmas(&origin))
        .expect("dump succeeds");
    drop(files);

    // CRIU's pages dump of the task, next to the plugin's images and
    // invisible to the image-set checks.
    assert_eq!(pages::read(images, pid.0).unwrap(), Some(memory.clone()));
    let set = verify_set(&DirStore::open_dir(images).unwrap(), ReadLimits::default()).unwrap();
    assert!(set.is_clean(), "{:?}", set.problems);
    let amdgpu_files = std::fs::read_dir(images)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("amdgpu-")
        })
        .count();
    assert_eq!(set.files, amdgpu_files, "pages-{pid}.img is not counted");

    let vmas = vmas_of(&kfd_image(images));
    app.exit().unwrap();
    assert!(origin.host_memory_of(pid).is_empty(), "unmapped at exit");

    let task = dirs
        .emulator(&target, |_| {})
        .restore(pid, &ids, &vmas)
        .expect("restore succeeds");
    assert_eq!(task.resume_answer, 0, "USERPTR BOs revalidated at RESUME");
    assert_eq!(target.host_memory_of(pid), memory, "same addresses, bytes");
    Workload::verify(&target, pid, &expected).expect("restored state matches");
    let mut restored = Workload::attach(&target, pid);
    for _ in 0..2 {
        restored.step().unwrap();
        twin.step().unwrap();
    }
    assert_eq!(restored.fingerprint().unwrap(), twin.fingerprint().unwrap());
}

#[test]
fn memory_still_mapped_by_the_checkpointed_process_fails_the_restore() {
    let _serial = serial();
    let (origin, target) = machines();
    let app = launch(&origin);
    let pid = app.pid();
    let dirs = Dirs::new();
    let (files, ids) = gpu_files(&app);
    let emulator = dirs.emulator(&origin, |_| {});
    emulator
        .dump(pid, &files, &device_vmas(&origin))
        .expect("dump succeeds");
    drop(files);
    let vmas = vmas_of(&kfd_image(dirs.images.path()));

    // --leave-running: the process still holds its memory in this host
    // process, so the restore cannot map it at the same addresses.
    let err = dirs
        .emulator(&target, |_| {})
        .restore(pid, &ids, &vmas)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            EmulatorError::Sim(SimError::HostMemoryAt { errno, .. }) if errno.0 == libc::EEXIST
        ),
        "{err}"
    );
    assert!(!target.process_alive(pid), "the failed task is killed");
    assert!(target.host_memory_of(pid).is_empty());

    // Once it ended, the same images restore.
    app.exit().unwrap();
    let task = dirs
        .emulator(&target, |_| {})
        .restore(pid, &ids, &vmas)
        .expect("restore succeeds");
    assert_eq!(task.resume_answer, 0);
}

#[test]
fn a_damaged_pages_image_fails_the_restore_naming_it() {
    let _serial = serial();
    let (origin, target) = machines();
    let app = launch(&origin);
    let pid = app.pid();
    let dirs = Dirs::new();
    let (files, ids) = gpu_files(&app);
    dirs.emulator(&origin, |_| {})
        .dump(pid, &files, &device_vmas(&origin))
        .expect("dump succeeds");
    drop(files);
    let vmas = vmas_of(&kfd_image(dirs.images.path()));
    app.exit().unwrap();

    let path = pages::path_of(dirs.images.path(), pid.0);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    let err = dirs
        .emulator(&target, |_| {})
        .restore(pid, &ids, &vmas)
        .unwrap_err();
    assert!(matches!(err, EmulatorError::Pages(_)), "{err}");
    assert!(
        err.to_string().contains(&format!("pages-{pid}.img")),
        "{err}"
    );
    assert!(!target.process_alive(pid), "the failed task is killed");
    assert!(target.host_memory_of(pid).is_empty());
}
