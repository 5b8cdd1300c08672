//! Processes whose only GPU files are render nodes (no `/dev/kfd`), through
//! the emulated CRIU with kfd-sim's render-only workload: dumped as
//! render-only images (`gpu_id` 0 plus the GPU's device entry), restored on
//! the same machine and on a renumbered machine of the same model with
//! every BO's handle, size, domains, GPU mapping and bytes, with two GPUs
//! (never both on one local GPU), refused with the reason when no local GPU
//! is compatible; and the cases that cannot be told apart at dump: a render
//! fd before its own task's `/dev/kfd`, and a render-only process next to a
//! KFD process on the same GPU, in either dump order.

mod common;

use std::os::fd::{AsFd, BorrowedFd};

use amdgpu_image::{verify_set, CriuRenderNode, DirStore, ImageName, ImageStore, ReadLimits};
use common::{
    add_drm_bo, device_vmas, hook_errno, kfd_image_of, read_drm_bo, render_image, restored_file,
    vmas_of, Dirs, DrmBo,
};
use criu_host_emulator::{
    DeviceVma, ImageStreamer, RestoredTask, TaskFile, TaskToDump, TaskToRestore, VmaOutcome,
};
use criu_plugin_amdgpu::hooks::NOT_MINE;
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd::{GemHandle, RenderNode};
use kfd_sim::workload::render_only::{DrmBoDescription, RenderOnly};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

/// The CPU mappings of a render-only process's BOs, as CRIU finds them in
/// its memory map: each BO mapped through its render node at its GPU
/// address with its checkpointed mmap offset.
fn drm_vmas(sim: &Sim, app: &RenderOnly, gpus: &[u32]) -> Vec<DeviceVma> {
    let fds = app.render_fds();
    app.describe()
        .unwrap()
        .iter()
        .map(|bo| {
            let node = RenderNode::from_fd(sim.driver(app.pid()), fds[bo.file]);
            DeviceVma {
                path: sim.render_path(gpus[bo.file]).unwrap(),
                addr: bo.va,
                pgoff: node.gem_mmap_offset(GemHandle(bo.handle)).unwrap(),
            }
        })
        .collect()
}

/// What a dumped render-only process is restored against.
struct Dumped {
    pid: kfd_sim::Pid,
    ids: Vec<u32>,
    expected: Vec<DrmBoDescription>,
    vmas: Vec<DeviceVma>,
    minors: Vec<u32>,
}

/// Restores `dumped` from `dirs` on `sim`, which must be refused (`why`) at
/// `RESTORE_EXT_FILE` with `ENODEV`; returns the error lines logged.
fn refused(dirs: &Dirs, sim: &Sim, dumped: &Dumped, why: &str) -> Vec<String> {
    let capture = Capture::start();
    let err = dirs
        .emulator(sim, |_| {})
        .restore(dumped.pid, &dumped.ids, &dumped.vmas)
        .expect_err(why);
    assert_eq!(hook_errno(&err), ("RESTORE_EXT_FILE", -libc::ENODEV));
    capture
        .lines()
        .into_iter()
        .filter(|(level, _)| *level == Level::Error)
        .map(|(_, text)| text)
        .collect()
}

/// Launches a render-only process on `gpus` (positions in `sim.gpus()`)
/// and dumps it into `dirs`; the process exits afterwards.
fn dump_render_only(sim: &Sim, dirs: &Dirs, gpus: &[usize], bos: usize) -> Dumped {
    let all = sim.gpus();
    let ids_of_gpus: Vec<u32> = gpus.iter().map(|&g| all[g].gpu_id).collect();
    let app = RenderOnly::launch(sim, &ids_of_gpus, bos).expect("launch");
    let expected = app.describe().unwrap();
    let vmas = drm_vmas(sim, &app, &ids_of_gpus);
    let ids: Vec<u32> = (0..gpus.len() as u32).map(|i| 3 + i).collect();
    let files: Vec<TaskFile<'_>> = app
        .render_fds()
        .into_iter()
        .zip(&ids)
        .map(|(fd, &id)| TaskFile { fd, id })
        .collect();
    let report = dirs
        .emulator(sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(sim))
        .expect("a render-only process dumps");
    assert_eq!(
        report.late_answer,
        Some(0),
        "render-only images written late"
    );
    assert!(report.file_answers.iter().all(|(_, a)| *a == 0));
    let minors = gpus
        .iter()
        .map(|&g| {
            sim.render_path(all[g].gpu_id)
                .unwrap()
                .to_string_lossy()
                .trim_start_matches("/dev/dri/renderD")
                .parse()
                .unwrap()
        })
        .collect();
    let pid = app.pid();
    drop(files);
    app.exit().unwrap();
    Dumped {
        pid,
        ids,
        expected,
        vmas,
        minors,
    }
}

/// Checks a restored render-only task: every BO as checkpointed, every BO
/// mapping translated to the BO's new mmap offset through a render file,
/// and the process not KFD's (`RESUME_DEVICES_LATE` is not ours).
fn check_restored(target: &Sim, dumped: &Dumped, task: &RestoredTask) {
    let fds: Vec<BorrowedFd<'_>> = dumped
        .ids
        .iter()
        .map(|&id| restored_file(task, id))
        .collect();
    RenderOnly::verify(target, dumped.pid, &fds, &dumped.expected).expect("bit-identical BOs");
    assert_eq!(task.resume_answer, NOT_MINE, "no KFD process to resume");
    for bo in &dumped.expected {
        let (_, outcome) = task
            .vmas
            .iter()
            .find(|(v, _)| v.addr == bo.va)
            .expect("the BO's mapping was offered");
        let VmaOutcome::Translated {
            pgoff,
            file: Some(file),
        } = outcome
        else {
            panic!("the mapping of BO {} is translated: {outcome:?}", bo.handle);
        };
        let node = RenderNode::from_fd(target.driver(dumped.pid), file.as_fd());
        assert_eq!(
            *pgoff,
            node.gem_mmap_offset(GemHandle(bo.handle)).unwrap(),
            "translated to the BO's new offset in the file CRIU maps"
        );
    }
}

/// On the machine it was dumped on: the image is render-only and names the
/// GPU by its device entry; the restored BOs are bit-identical, keep their
/// handles and mappings, and the process works on.
#[test]
fn a_render_only_process_restores_on_the_same_machine() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let dirs = Dirs::new();
    let dumped = dump_render_only(&sim, &dirs, &[0], 3);

    let image = render_image(&dirs, dumped.ids[0]);
    assert!(image.is_render_only());
    assert_eq!(image.gpu_id, 0);
    let device = image.device.as_ref().expect("device entry");
    assert_eq!(device.gpu_id, sim.gpus()[0].gpu_id, "the machine's gpu_id");
    assert_eq!(device.drm_render_minor, dumped.minors[0]);
    assert!(device.simd_count > 0 && device.vram_size > 0, "{device:?}");
    assert_eq!(image.bo_entries.len(), 3);
    let report = verify_set(
        &DirStore::open_dir(dirs.images.path()).unwrap(),
        ReadLimits::default(),
    )
    .unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.checksums_verified, 3);

    let task = dirs
        .emulator(&sim, |_| {})
        .restore(dumped.pid, &dumped.ids, &dumped.vmas)
        .expect("restore");
    check_restored(&sim, &dumped, &task);
    RenderOnly::touch(
        &sim,
        dumped.pid,
        restored_file(&task, 3),
        1,
        8,
        b"still works",
    )
    .expect("the restored process writes its BO");
}

/// On a renumbered machine of the same model (other gpu_ids, node order and
/// render minors) the GPU is found by its properties; the task's render
/// file is the local GPU's, above the task's fds.
#[test]
fn a_render_only_process_restores_on_a_renumbered_machine() {
    let system = amdgpu_topology::builtin("pcie-2gpu").unwrap();
    let origin = Sim::new(system.clone(), SimConfig::default()).unwrap();
    let dirs = Dirs::new();
    let dumped = dump_render_only(&origin, &dirs, &[1], 2);

    let (twin, _) = amdgpu_topology::renumbered_with_map(&system, 0x7e57);
    let target = Sim::new(twin, SimConfig::default()).unwrap();
    let origin_ids: Vec<u32> = origin.gpus().iter().map(|g| g.gpu_id).collect();
    assert!(
        target
            .gpus()
            .iter()
            .all(|g| !origin_ids.contains(&g.gpu_id)),
        "the twin numbers its GPUs differently"
    );
    let task = dirs
        .emulator(&target, |c| c.fd_floor = Some(300))
        .restore(dumped.pid, &dumped.ids, &dumped.vmas)
        .expect("restore on the twin");
    check_restored(&target, &dumped, &task);
    let restorer = task.plugin.restorer().expect("restorer");
    assert!(restorer.restored().is_empty(), "no KFD file restored");
    let local = local_gpu_of(&target, dumped.pid, restored_file(&task, dumped.ids[0]));
    assert!(
        target.gpus().iter().any(|g| g.gpu_id == local),
        "restored on a GPU of the twin"
    );
}

/// The local gpu_id of the GPU whose render node `fd` (of process `pid`) is.
fn local_gpu_of(sim: &Sim, pid: kfd_sim::Pid, fd: BorrowedFd<'_>) -> u32 {
    use kfd::{Driver, FdKind};
    let driver = sim.driver(pid);
    let FdKind::CharDevice(dev) = driver.fd_kind(fd).unwrap() else {
        panic!("a render node is a character device");
    };
    sim.gpus()
        .iter()
        .find(|g| {
            sim.render_path(g.gpu_id)
                .and_then(|p| driver.device_number(&p).ok())
                == Some(dev)
        })
        .map(|g| g.gpu_id)
        .expect("the render node of a local GPU")
}

/// Two GPUs: each checkpointed GPU goes to its own local GPU (the same
/// minors on the same machine; distinct GPUs on the twin); a machine with
/// only one such GPU refuses the second instead of doubling up.
#[test]
fn a_render_only_process_with_two_gpus_keeps_them_apart() {
    let system = amdgpu_topology::builtin("pcie-2gpu").unwrap();
    let origin = Sim::new(system.clone(), SimConfig::default()).unwrap();
    let dirs = Dirs::new();
    let dumped = dump_render_only(&origin, &dirs, &[0, 1], 2);
    let images: Vec<CriuRenderNode> = dumped
        .ids
        .iter()
        .map(|&id| render_image(&dirs, id))
        .collect();
    assert!(images.iter().all(CriuRenderNode::is_render_only));
    assert_ne!(images[0].device, images[1].device);

    let task = dirs
        .emulator(&origin, |_| {})
        .restore(dumped.pid, &dumped.ids, &dumped.vmas)
        .expect("restore on the same machine");
    check_restored(&origin, &dumped, &task);
    for (i, &id) in dumped.ids.iter().enumerate() {
        let local = local_gpu_of(&origin, dumped.pid, restored_file(&task, id));
        assert_eq!(
            local,
            images[i].device.as_ref().unwrap().gpu_id,
            "the same GPU (same render minor) on the same machine"
        );
    }

    let (twin, _) = amdgpu_topology::renumbered_with_map(&system, 0xb1);
    let target = Sim::new(twin, SimConfig::default()).unwrap();
    let task = dirs
        .emulator(&target, |_| {})
        .restore(dumped.pid, &dumped.ids, &dumped.vmas)
        .expect("restore on the twin");
    check_restored(&target, &dumped, &task);
    let locals: Vec<u32> = dumped
        .ids
        .iter()
        .map(|&id| local_gpu_of(&target, dumped.pid, restored_file(&task, id)))
        .collect();
    assert_ne!(
        locals[0], locals[1],
        "two local GPUs, one per checkpointed GPU"
    );

    // A machine where only one GPU is of that model (the other reports
    // another device id): the second checkpointed GPU finds it taken.
    let mut one = system.clone();
    let other = one
        .nodes
        .iter_mut()
        .filter(|n| n.is_gpu())
        .nth(1)
        .expect("a second GPU");
    let device_id = other.prop("device_id");
    other.properties.set("device_id", device_id ^ 0x10);
    let small = Sim::new(one, SimConfig::default()).unwrap();
    let errors = refused(
        &dirs,
        &small,
        &dumped,
        "one local GPU cannot stand in for two",
    );
    assert!(
        errors
            .iter()
            .any(|t| t.contains("already stands in for another checkpointed GPU")),
        "{errors:?}"
    );
    assert!(!small.process_alive(dumped.pid));
}

/// No compatible GPU (another model): refused with `ENODEV`, and the log
/// says which property differs.
#[test]
fn a_render_only_process_is_refused_without_a_compatible_gpu() {
    let origin = Sim::builtin("single-gpu", SimConfig::default()).unwrap();
    let dirs = Dirs::new();
    let dumped = dump_render_only(&origin, &dirs, &[0], 1);
    let other = Sim::builtin("pcie-2gpu", SimConfig::default()).unwrap();
    let errors = refused(
        &dirs,
        &other,
        &dumped,
        "an MI100 cannot stand in for an MI210",
    );
    let refusal: Vec<&String> = errors
        .iter()
        .filter(|t| t.contains("cannot restore"))
        .collect();
    assert!(
        refusal
            .iter()
            .any(|t| t.contains("no local GPU can stand in for renderD") && t.contains("device_id")),
        "{refusal:?}"
    );
    assert!(!other.process_alive(dumped.pid));
}

/// A KFD process whose render fd comes before its `/dev/kfd` (lower fd):
/// the render node waits at dump for the KFD file and is written with the
/// user gpu_id; at restore it waits (retry) for the task's KFD file, found
/// in the image set by the task's pid, and is never taken for render-only.
#[test]
fn a_render_fd_before_its_kfd_fd_is_not_render_only() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch");
    app.step().unwrap();
    let DrmBo {
        handle, pattern, ..
    } = add_drm_bo(&app);
    let expected = app.describe().unwrap();
    let dirs = Dirs::new();
    let files = vec![
        TaskFile {
            fd: app.render_fds()[0],
            id: 1,
        },
        TaskFile {
            fd: app.kfd_fd().unwrap(),
            id: 2,
        },
    ];
    dirs.emulator(&sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump");
    let image = render_image(&dirs, 1);
    let kfd = kfd_image_of(dirs.images.path(), 2);
    let user = kfd.device_entries.iter().find(|d| d.is_gpu()).unwrap();
    assert_eq!(image.gpu_id, user.gpu_id, "named by the KFD file's user id");
    assert!(!image.is_render_only());
    assert_eq!(
        image.device.as_ref().map(|d| d.drm_render_minor),
        Some(user.drm_render_minor)
    );
    let pid = app.pid();
    drop(files);
    app.exit().unwrap();

    let capture = Capture::start();
    let task = dirs
        .emulator(&sim, |_| {})
        .restore(pid, &[1, 2], &vmas_of(&kfd))
        .expect("restore, render node retried after /dev/kfd");
    assert_eq!(task.resume_answer, 0);
    Workload::verify(&sim, pid, &expected).expect("KFD state matches");
    assert_eq!(read_drm_bo(&sim, &task, 1, handle, pattern.len()), pattern);
    assert!(
        !capture
            .lines()
            .iter()
            .any(|(_, t)| t.contains("no KFD process) restored")),
        "never restored as render-only"
    );
}

/// A render-only process next to a KFD process on the same GPU: dumped
/// after the KFD process its node is written with the KFD process's user
/// id; dumped before it, the KFD file names its GPU before the dump ends.
/// Either way the dump cannot tell it is render-only; restore does (the
/// image set has no KFD image of its pid) and restores it by its device
/// entry, while the KFD process's own render node uses its KFD mapping.
#[test]
fn a_render_only_process_next_to_a_kfd_process_on_its_gpu() {
    for (render_only_first, streamed) in
        [(false, false), (true, false), (false, true), (true, true)]
    {
        let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
        let gpu = sim.gpus()[0].gpu_id;
        let mut kfd_app = Workload::launch(&sim, &Profile::Basic).expect("launch");
        kfd_app.step().unwrap();
        let DrmBo {
            handle, pattern, ..
        } = add_drm_bo(&kfd_app);
        let kfd_expected = kfd_app.describe().unwrap();
        let drm_app = RenderOnly::launch(&sim, &[gpu], 2).expect("render-only launch");
        let drm_expected = drm_app.describe().unwrap();
        let drm_vmas = drm_vmas(&sim, &drm_app, &[gpu]);

        let kfd_task = TaskToDump {
            pid: kfd_app.pid(),
            files: vec![
                TaskFile {
                    fd: kfd_app.kfd_fd().unwrap(),
                    id: 1,
                },
                TaskFile {
                    fd: kfd_app.render_fds()[0],
                    id: 2,
                },
            ],
            vmas: device_vmas(&sim),
        };
        let drm_task = TaskToDump {
            pid: drm_app.pid(),
            files: vec![TaskFile {
                fd: drm_app.render_fds()[0],
                id: 10,
            }],
            vmas: device_vmas(&sim),
        };
        let tree = if render_only_first {
            vec![drm_task, kfd_task]
        } else {
            vec![kfd_task, drm_task]
        };
        let dirs = Dirs::new();
        // With `--stream` the set cannot be listed at restore: the render
        // image's KFD pids tell the tasks apart.
        let capture = streamed.then(ImageStreamer::capture);
        dirs.emulator(&sim, |c| c.streamer = capture.clone())
            .dump_tree(&tree)
            .expect("dump of both");
        if let Some(capture) = &capture {
            capture.extract(dirs.images.path()).unwrap();
        }
        let kfd = kfd_image_of(dirs.images.path(), 1);
        let user = kfd
            .device_entries
            .iter()
            .find(|d| d.is_gpu())
            .unwrap()
            .gpu_id;
        let image = render_image(&dirs, 10);
        assert_eq!(
            image.gpu_id, user,
            "first={render_only_first}: named by the KFD process's id"
        );
        assert!(image.device.is_some());
        let (kfd_pid, drm_pid) = (kfd_app.pid(), drm_app.pid());
        assert_eq!(
            image.kfd_pids,
            vec![kfd_pid.0],
            "the KFD process using the GPU"
        );
        drop(tree);
        kfd_app.exit().unwrap();
        drm_app.exit().unwrap();

        let tasks = dirs
            .emulator(&sim, |c| {
                c.streamer = capture.as_ref().map(ImageStreamer::serve)
            })
            .restore_tree(&[
                TaskToRestore {
                    pid: drm_pid,
                    file_ids: vec![10],
                    vmas: drm_vmas.clone(),
                },
                TaskToRestore {
                    pid: kfd_pid,
                    file_ids: vec![1, 2],
                    vmas: vmas_of(&kfd),
                },
            ])
            .unwrap_or_else(|e| {
                panic!("first={render_only_first}, streamed={streamed}: restore: {e}")
            });
        RenderOnly::verify(
            &sim,
            drm_pid,
            &[restored_file(&tasks[0], 10)],
            &drm_expected,
        )
        .expect("render-only BOs");
        assert_eq!(tasks[0].resume_answer, NOT_MINE);
        assert_eq!(tasks[1].resume_answer, 0);
        Workload::verify(&sim, kfd_pid, &kfd_expected).expect("KFD state");
        assert_eq!(
            read_drm_bo(&sim, &tasks[1], 2, handle, pattern.len()),
            pattern
        );
    }
}

/// CRIU v4.0 (no `DUMP_DEVICES_LATE`, no retry protocol): the render-only
/// node is written at its own `DUMP_EXT_FILE` (CRIU calls the dump done
/// after the last one), and restores without waiting for anything.
#[test]
fn a_render_only_process_on_criu_without_dump_devices_late() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let gpu = sim.gpus()[0].gpu_id;
    let app = RenderOnly::launch(&sim, &[gpu], 2).expect("launch");
    let expected = app.describe().unwrap();
    let vmas = drm_vmas(&sim, &app, &[gpu]);
    let dirs = Dirs::new();
    let files = vec![TaskFile {
        fd: app.render_fds()[0],
        id: 9,
    }];
    let report = dirs
        .emulator(&sim, |c| c.max_hooks = 12)
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump on CRIU 4.0");
    assert_eq!(report.late_answer, None);
    assert!(
        render_image(&dirs, 9).is_render_only(),
        "written at DUMP_EXT_FILE"
    );
    let pid = app.pid();
    drop(files);
    app.exit().unwrap();
    let task = dirs
        .emulator(&sim, |c| c.max_hooks = 12)
        .restore(pid, &[9], &vmas)
        .expect("restore on CRIU 4.0");
    RenderOnly::verify(&sim, pid, &[restored_file(&task, 9)], &expected).expect("BOs");
}

/// A render-only process that never mapped a BO offers `HANDLE_DEVICE_VMA`
/// nothing: its render file still puts the plugin into the inventory, so
/// CRIU (v4.1 and later gate plugins on it) loads the plugin at restore.
#[test]
fn a_render_only_process_without_mappings_is_in_the_inventory() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let gpu = sim.gpus()[0].gpu_id;
    let app = RenderOnly::launch(&sim, &[gpu], 1).expect("launch");
    let expected = app.describe().unwrap();
    let dirs = Dirs::new();
    let files = vec![TaskFile {
        fd: app.render_fds()[0],
        id: 2,
    }];
    let emulator = dirs.emulator(&sim, |_| {});
    let report = emulator.dump(app.pid(), &files, &[]).expect("dump");
    assert!(report.vma_answers.is_empty());
    let inventory =
        std::fs::read_to_string(dirs.images.path().join(criu_host_emulator::INVENTORY_FILE))
            .unwrap();
    assert_eq!(inventory, "amdgpu_plugin\n");
    let pid = app.pid();
    drop(files);
    app.exit().unwrap();
    let task = emulator.restore(pid, &[2], &[]).expect("restore");
    RenderOnly::verify(&sim, pid, &[restored_file(&task, 2)], &expected).expect("BOs");
}

/// A render-node image without a device entry (as the C plugin writes, with
/// a KFD user id) in a task that has no KFD image: no local GPU can be
/// chosen for it, and the restore says so instead of waiting forever.
#[test]
fn a_render_node_without_device_entry_or_kfd_image_is_refused() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let dirs = Dirs::new();
    let dumped = dump_render_only(&sim, &dirs, &[0], 1);
    let store = DirStore::open_dir(dirs.images.path()).unwrap();
    let mut image = render_image(&dirs, dumped.ids[0]);
    image.device = None;
    image.gpu_id = 0x1234;
    store
        .write_message(&ImageName::RenderNode { id: dumped.ids[0] }, &image)
        .unwrap();
    let errors = refused(&dirs, &sim, &dumped, "nothing to choose a GPU by");
    assert!(
        errors.iter().any(|t| t.contains("records no device entry")),
        "{errors:?}"
    );
}

/// CRIU without `DUMP_DEVICES_LATE` reports its dump a success once the
/// last `DUMP_EXT_FILE` answers; an image still to be written after that
/// (in `exit`) cannot fail the dump any more. A render-only image that
/// cannot be written must fail its own `DUMP_EXT_FILE`.
#[test]
fn on_criu_without_dump_devices_late_an_unwritable_render_only_image_fails_the_dump() {
    for max_hooks in [10, 12, 13] {
        let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
        let gpu = sim.gpus()[0].gpu_id;
        let app = RenderOnly::launch(&sim, &[gpu], 2).expect("launch");
        let dirs = Dirs::new();
        let files = vec![TaskFile {
            fd: app.render_fds()[0],
            id: 9,
        }];
        sim.inject("AMDGPU_GEM_OP=EIO".parse::<kfd_sim::FaultSpec>().unwrap());
        let err = dirs
            .emulator(&sim, |c| c.max_hooks = max_hooks)
            .dump(app.pid(), &files, &device_vmas(&sim))
            .expect_err("the render-only image cannot be written");
        assert_eq!(
            hook_errno(&err),
            ("DUMP_EXT_FILE", -libc::EIO),
            "{max_hooks} hooks"
        );
        let left = common::amdgpu_files(dirs.images.path());
        assert!(left.is_empty(), "{max_hooks} hooks: {left:?} left behind");
        drop(files);
        app.exit().unwrap();
    }
}

/// On CRIU 4.2 (no late hook) a render fd before its own task's `/dev/kfd`
/// is written render-only at once, and named by the KFD file's user id
/// when that file comes: the image is as with the late hook.
#[test]
fn on_criu_4_2_a_render_fd_before_its_kfd_fd_is_renamed_when_the_kfd_file_comes() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch");
    app.step().unwrap();
    let DrmBo {
        handle, pattern, ..
    } = add_drm_bo(&app);
    let expected = app.describe().unwrap();
    let dirs = Dirs::new();
    let files = vec![
        TaskFile {
            fd: app.render_fds()[0],
            id: 1,
        },
        TaskFile {
            fd: app.kfd_fd().unwrap(),
            id: 2,
        },
    ];
    let report = dirs
        .emulator(&sim, |c| c.max_hooks = 13)
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump");
    assert_eq!(report.late_answer, None);
    let image = render_image(&dirs, 1);
    let kfd = kfd_image_of(dirs.images.path(), 2);
    let user = kfd.device_entries.iter().find(|d| d.is_gpu()).unwrap();
    assert_eq!(image.gpu_id, user.gpu_id, "named by the KFD file's user id");
    assert_eq!(image.kfd_pids, [kfd.pid]);
    let report = verify_set(
        &DirStore::open_dir(dirs.images.path()).unwrap(),
        ReadLimits::default(),
    )
    .unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    // (CRIU 4.2 cannot retry a render node restored before its task's
    // /dev/kfd; a later CRIU restores the set.)
    let pid = app.pid();
    drop(files);
    app.exit().unwrap();
    let task = dirs
        .emulator(&sim, |_| {})
        .restore(pid, &[1, 2], &vmas_of(&kfd))
        .expect("restore");
    Workload::verify(&sim, pid, &expected).expect("KFD state matches");
    assert_eq!(read_drm_bo(&sim, &task, 1, handle, pattern.len()), pattern);
}
