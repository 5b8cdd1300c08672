//! Dump/restore scenarios through the emulated CRIU: failures never leave
//! the application frozen, older CRIU versions (fewer hooks) still work,
//! the staging bound changes nothing in the result, several GPUs restore in
//! parallel, and what is not ours (or not restorable here) is refused the
//! way CRIU expects.

mod common;

use std::os::fd::AsFd;

use common::{
    add_drm_bo, device_vmas, gpu_files, hook_errno, image_message, kfd_image, vmas_of, Dirs, DrmBo,
    KFD_ID,
};
use criu_host_emulator::TaskFile;
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{FaultSpec, Sim, SimConfig};

fn launch(sim: &Sim, profile: &Profile, steps: usize) -> Workload {
    let mut app = Workload::launch(sim, profile).expect("launch");
    for _ in 0..steps {
        app.step().expect("step");
    }
    app
}

/// Dumps `app`, kills it, restores it and checks it matches its checkpoint.
fn round_trip(
    sim: &Sim,
    app: Workload,
    dirs: &Dirs,
    tweak: impl Fn(&mut criu_host_emulator::EmulatorConfig),
) {
    let emulator = dirs.emulator(sim, &tweak);
    let expected = app.describe().unwrap();
    let (files, ids) = gpu_files(&app);
    emulator
        .dump(app.pid(), &files, &device_vmas(sim))
        .expect("dump");
    let pid = app.pid();
    app.exit().unwrap();
    let image = kfd_image(dirs.images.path());
    let task = emulator
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restore");
    assert_eq!(task.resume_answer, 0);
    Workload::verify(sim, pid, &expected).expect("restored state matches the checkpoint");
    Workload::attach(sim, pid)
        .step()
        .expect("restored process runs");
}

#[test]
fn a_failed_checkpoint_leaves_the_process_running() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = launch(&sim, &Profile::Basic, 1);
    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    sim.inject("CRIU_OP:CHECKPOINT=EIO".parse::<FaultSpec>().unwrap());
    let (files, _) = gpu_files(&app);
    let err = emulator
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect_err("the dump must fail");
    assert_eq!(hook_errno(&err), ("DUMP_EXT_FILE", -libc::EIO));
    drop(files);
    app.step()
        .expect("the process was unpaused after the failed dump");
    assert!(!dirs
        .images
        .path()
        .join(format!("amdgpu-kfd-{KFD_ID}.img"))
        .exists());
}

#[test]
fn a_failed_sdma_copy_unpauses_and_reports_an_error() {
    // criu-dev copies in the background and reports at DUMP_DEVICES_LATE;
    // CRIU 4.2 (13 hooks, no late hook) copies inside DUMP_EXT_FILE.
    let every_hook = criu_plugin_amdgpu::abi::HOOK_SLOTS as u32;
    for (max_hooks, failing_hook) in [(every_hook, "DUMP_DEVICES_LATE"), (13, "DUMP_EXT_FILE")] {
        let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
        let mut app = launch(&sim, &Profile::Basic, 1);
        let dirs = Dirs::new();
        let emulator = dirs.emulator(&sim, |c| c.max_hooks = max_hooks);
        sim.inject("SDMA_SHORT".parse::<FaultSpec>().unwrap());
        let (files, _) = gpu_files(&app);
        let err = emulator
            .dump(app.pid(), &files, &device_vmas(&sim))
            .expect_err("a short copy must fail the dump");
        let (hook, errno) = hook_errno(&err);
        assert_eq!(hook, failing_hook, "{max_hooks} hooks");
        assert!(errno < 0 && errno != -libc::ENOTSUP, "errno {errno}");
        drop(files);
        app.step()
            .expect("the process was unpaused after the failed dump");
        let left = common::amdgpu_files(dirs.images.path());
        assert!(left.is_empty(), "{max_hooks} hooks: {left:?} left behind");
    }
}

#[test]
fn criu_4_2_without_dump_devices_late_unpauses_inside_the_dump() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = launch(&sim, &Profile::Basic, 2);
    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |c| c.max_hooks = 13);
    let (files, _) = gpu_files(&app);
    let report = emulator
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump");
    assert_eq!(
        report.late_answer, None,
        "CRIU 4.2 has no DUMP_DEVICES_LATE"
    );
    drop(files);
    app.step().expect("already unpaused by DUMP_EXT_FILE");
}

#[test]
fn criu_4_2_a_failed_unpause_after_the_dump_is_retried_at_exit() {
    // Without DUMP_DEVICES_LATE the process is unpaused right after its
    // image is written; that UNPAUSE failing once must fail the dump and
    // leave the process recorded as paused, so exit() tries again.
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = launch(&sim, &Profile::Basic, 1);
    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |c| c.max_hooks = 13);
    sim.inject("CRIU_OP:UNPAUSE=EIO".parse::<FaultSpec>().unwrap());
    let (files, _) = gpu_files(&app);
    let err = emulator
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect_err("a failed unpause fails the dump");
    assert_eq!(hook_errno(&err), ("DUMP_EXT_FILE", -libc::EIO));
    drop(files);
    app.step()
        .expect("exit() unpaused the process the failed UNPAUSE left paused");
    let left = common::amdgpu_files(dirs.images.path());
    assert!(left.is_empty(), "{left:?} left behind");
}

#[test]
fn criu_3_17_hooks_round_trip() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = launch(&sim, &Profile::Basic, 2);
    round_trip(&sim, app, &Dirs::new(), |c| c.max_hooks = 10);
}

#[test]
fn a_single_page_of_staging_gives_the_same_result() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = launch(&sim, &Profile::Basic, 3);
    round_trip(&sim, app, &Dirs::new(), |c| {
        c.options = c.options.clone().with_max_buffer_size(4096);
        assert_eq!(c.options.staging().buffers, 1);
    });
}

#[test]
fn two_gpus_round_trip_with_small_double_buffers() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let app = launch(
        &sim,
        &Profile::TensorFlowLike {
            bo_bytes: 256 << 10,
        },
        2,
    );
    let dirs = Dirs::new();
    round_trip(&sim, app, &dirs, |c| {
        c.options = c.options.clone().with_max_buffer_size(64 << 10);
    });
    let image = kfd_image(dirs.images.path());
    assert_eq!(image.num_of_gpus, 2);
    for gpu in image.device_entries.iter().filter(|d| d.gpu_id != 0) {
        let name = format!("amdgpu-pages-{KFD_ID}-{:04x}.img", gpu.gpu_id);
        assert!(dirs.images.path().join(&name).exists(), "{name}");
    }
}

#[test]
fn restore_on_a_machine_with_fewer_gpus_is_refused() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let app = launch(&sim, &Profile::Basic, 1);
    let dirs = Dirs::new();
    let (files, ids) = gpu_files(&app);
    dirs.emulator(&sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump");
    let image = kfd_image(dirs.images.path());

    let small = Sim::synthetic(1, SimConfig::default()).unwrap();
    let err = dirs
        .emulator(&small, |_| {})
        .restore(app.pid(), &ids, &vmas_of(&image))
        .expect_err("2 GPUs cannot be restored on 1");
    assert_eq!(hook_errno(&err), ("RESTORE_EXT_FILE", -libc::ENODEV));
}

#[test]
fn foreign_files_are_left_to_other_plugins() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = launch(&sim, &Profile::Basic, 0);
    let dirs = Dirs::new();
    let (sock, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
    let err = dirs
        .emulator(&sim, |_| {})
        .dump(
            app.pid(),
            &[TaskFile {
                fd: sock.as_fd(),
                id: 9,
            }],
            &[],
        )
        .expect_err("CRIU fails on a file no plugin takes");
    assert_eq!(hook_errno(&err), ("DUMP_EXT_FILE", -libc::ENOTSUP));
}

#[test]
fn images_whose_inventory_lacks_the_plugin_are_not_ours() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = launch(&sim, &Profile::Basic, 1);
    let dirs = Dirs::new();
    let (files, ids) = gpu_files(&app);
    dirs.emulator(&sim, |_| {})
        .dump(app.pid(), &files, &[])
        .expect("dump");
    // Images of a dump whose inventory does not name the plugin (another
    // CRIU run wrote them): the restore must leave them alone.
    let inventory = dirs.images.path().join(criu_host_emulator::INVENTORY_FILE);
    assert_eq!(
        std::fs::read_to_string(&inventory).unwrap(),
        "amdgpu_plugin\n",
        "GPU files put the plugin into the inventory even without mappings"
    );
    std::fs::write(&inventory, "").unwrap();
    let pid = app.pid();
    drop(files);
    app.exit().unwrap();
    let err = dirs
        .emulator(&sim, |_| {})
        .restore(pid, &ids, &[])
        .expect_err("a disabled plugin restores nothing");
    assert_eq!(hook_errno(&err), ("RESTORE_EXT_FILE", -libc::ENOTSUP));
}

#[test]
fn a_render_node_before_dev_kfd_is_dumped_late_and_restored_by_retry() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = launch(&sim, &Profile::Basic, 1);
    let expected = app.describe().unwrap();
    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    let (mut files, mut ids) = gpu_files(&app);
    files.reverse();
    ids.reverse();
    emulator
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("the render node waits for the KFD file");
    assert!(dirs
        .images
        .path()
        .join(format!("amdgpu-renderD-{}.img", KFD_ID + 1))
        .exists());
    let pid = app.pid();
    drop(files);
    app.exit().unwrap();
    let image = kfd_image(dirs.images.path());

    // CRIU 4.2 has no retry protocol: the render node cannot wait.
    let err = dirs
        .emulator(&sim, |c| c.max_hooks = 13)
        .restore(pid, &ids, &vmas_of(&image))
        .expect_err("no retry on CRIU 4.2");
    assert_eq!(hook_errno(&err), ("RESTORE_EXT_FILE", -libc::EINVAL));

    let task = emulator
        .restore(pid, &ids, &vmas_of(&image))
        .expect("the render node is retried after /dev/kfd");
    assert_eq!(task.files.len(), 2);
    Workload::verify(&sim, pid, &expected).expect("restored state matches");
}

/// Render nodes dumped without any KFD file become render-only images at
/// `DUMP_DEVICES_LATE` (see tests/render_only.rs for their restore).
#[test]
fn a_render_node_without_a_kfd_file_is_written_render_only() {
    use amdgpu_image::ImageStore;
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = launch(&sim, &Profile::Basic, 0);
    let dirs = Dirs::new();
    let (files, _) = gpu_files(&app);
    let render_only: Vec<TaskFile<'_>> = files.into_iter().filter(|f| f.id != KFD_ID).collect();
    let report = dirs
        .emulator(&sim, |_| {})
        .dump(app.pid(), &render_only, &device_vmas(&sim))
        .expect("render nodes alone are dumped");
    assert_eq!(report.late_answer, Some(0));
    let image: amdgpu_image::CriuRenderNode = amdgpu_image::DirStore::open_dir(dirs.images.path())
        .unwrap()
        .read_message(
            &amdgpu_image::ImageName::RenderNode { id: KFD_ID + 1 },
            amdgpu_image::ReadLimits::default(),
        )
        .unwrap()
        .expect("the render-node image");
    assert!(image.is_render_only());
    assert_eq!(image.device.map(|d| d.gpu_id), Some(sim.gpus()[0].gpu_id));
}

#[test]
fn a_failure_after_the_kfd_file_is_unpaused_at_exit() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = launch(&sim, &Profile::Basic, 1);
    let dirs = Dirs::new();
    // The KFD file dumps (and stays paused until DUMP_DEVICES_LATE); the
    // render node then fails, so CRIU aborts and only exit() is left.
    sim.inject("AMDGPU_GEM_LIST_HANDLES=EIO".parse::<FaultSpec>().unwrap());
    let (files, _) = gpu_files(&app);
    let err = dirs
        .emulator(&sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect_err("the render node fails");
    assert_eq!(hook_errno(&err), ("DUMP_EXT_FILE", -libc::EIO));
    drop(files);
    app.step().expect("exit() unpaused the process");
}

/// A Basic process dumped with `content` as hsakmt's shared memory, then
/// ended: what its restore needs.
struct DumpedWithShm {
    dirs: Dirs,
    emulator: criu_host_emulator::CriuEmulator,
    shm: std::path::PathBuf,
    pid: kfd_sim::Pid,
    ids: Vec<u32>,
    image: amdgpu_image::CriuKfd,
    _sim: Sim,
}

fn dumped_with_shm(content: &[u8]) -> DumpedWithShm {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = launch(&sim, &Profile::Basic, 1);
    let dirs = Dirs::new();
    let shm = dirs.shm.path().join("hsakmt_shared_mem");
    std::fs::write(&shm, content).unwrap();
    let (files, ids) = gpu_files(&app);
    let emulator = dirs.emulator(&sim, |_| {});
    emulator
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump");
    let image = kfd_image(dirs.images.path());
    let pid = app.pid();
    drop(files);
    app.exit().unwrap();
    DumpedWithShm {
        dirs,
        emulator,
        shm,
        pid,
        ids,
        image,
        _sim: sim,
    }
}

#[test]
fn hsakmt_shared_memory_is_recreated_with_its_size_and_magic() {
    let mut content = vec![0u8; 8192];
    content[..4].copy_from_slice(&0x5a5a_1234u32.to_ne_bytes());
    let DumpedWithShm {
        dirs: _dirs,
        emulator,
        shm,
        pid,
        ids,
        image,
        ..
    } = dumped_with_shm(&content);
    assert_eq!(image.shared_mem_size, 8192);
    assert_eq!(image.shared_mem_magic, 0x5a5a_1234);
    std::fs::remove_file(&shm).unwrap();
    emulator
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restore");
    let recreated = std::fs::read(&shm).expect("recreated");
    assert_eq!(recreated.len(), 8192);
    assert_eq!(&recreated[..4], &0x5a5a_1234u32.to_ne_bytes());
}

#[test]
fn hsakmt_shared_memory_of_live_processes_is_never_resized_or_rewritten() {
    // The dump sees an 8 KiB object; at restore another ROCm process has
    // made and mapped its own (libhsakmt's 8-byte table, live counters).
    // Truncating it would SIGBUS every process mapping past the new end,
    // rewriting its magic would corrupt their shared table: as the C
    // plugin does, restore creates the object only when it is missing.
    let mut content = vec![0u8; 8192];
    content[..4].copy_from_slice(&0x5a5a_1234u32.to_ne_bytes());
    let DumpedWithShm {
        dirs: _dirs,
        emulator,
        shm,
        pid,
        ids,
        image,
        ..
    } = dumped_with_shm(&content);
    assert_eq!(image.shared_mem_size, 8192);
    let mut live = 0x5441_5348u32.to_ne_bytes().to_vec();
    live.extend_from_slice(&7u32.to_ne_bytes());
    std::fs::write(&shm, &live).unwrap();
    emulator
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restore");
    assert_eq!(
        std::fs::read(&shm).unwrap(),
        live,
        "the live object keeps its size and contents"
    );
}

#[test]
fn a_hostile_hsakmt_shared_memory_size_is_refused_before_anything_is_created() {
    let DumpedWithShm {
        dirs,
        emulator,
        shm,
        pid,
        ids,
        mut image,
        ..
    } = dumped_with_shm(&[0u8; 8]);
    std::fs::remove_file(&shm).unwrap();
    // The image claims a 1 TiB object.
    let name = amdgpu_image::ImageName::Kfd { id: KFD_ID };
    image.shared_mem_size = 1 << 40;
    amdgpu_image::ImageStore::write_message(
        &amdgpu_image::DirStore::open_dir(dirs.images.path()).unwrap(),
        &name,
        &image,
    )
    .unwrap();
    let err = emulator
        .restore(pid, &ids, &vmas_of(&image))
        .expect_err("a 1 TiB shared-memory object is never created");
    assert_eq!(hook_errno(&err).0, "RESTORE_EXT_FILE");
    assert!(!shm.exists(), "nothing created");
}

#[test]
fn resume_of_a_pid_without_kfd_state_is_not_ours() {
    use amdgpu_checkpoint::options::Options;
    use criu_host_emulator::EmulatedHost;
    use criu_plugin_amdgpu::abi::Stage;
    use criu_plugin_amdgpu::hooks::{Plugin, PluginConfig, NOT_MINE};

    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let dirs = Dirs::new();
    let main = sim.spawn_process().unwrap();
    let plain = sim.spawn_process().unwrap();
    let config = PluginConfig {
        topology_root: sim.sysfs_root(),
        shm_dir: dirs.shm.path().to_path_buf(),
        has_dump_devices_late: true,
        has_restore_retry: true,
    };
    let mut plugin = Plugin::init(
        sim.driver(main),
        EmulatedHost::new(dirs.images.path(), None),
        Stage::Restore,
        config,
        Options::default(),
    );
    assert_eq!(plugin.resume_devices_late(plain.0 as i32), NOT_MINE);
    assert_eq!(plugin.resume_devices_late(99_999), NOT_MINE);
    assert_eq!(
        plugin.restore_ext_file(42),
        (NOT_MINE, false),
        "no image for id 42"
    );
    plugin.exit(0);
}

/// A copy of the 2-GPU synthetic machine whose GPUs carry other gpu_ids
/// (same hardware, another kernel's hash), so a restore must remap.
fn renumbered_two_gpu_machine() -> Sim {
    let mut system = kfd_sim::synthetic_system(2);
    for (i, node) in system.nodes.iter_mut().filter(|n| n.is_gpu()).enumerate() {
        node.gpu_id = Some(0x1111 * (i as u32 + 1));
    }
    Sim::new(system, SimConfig::default()).expect("renumbered machine")
}

#[test]
fn a_remapped_process_keeps_its_gpu_ids_through_a_second_checkpoint() {
    let origin = Sim::synthetic(2, SimConfig::default()).unwrap();
    // No USERPTR BOs: their memory is ordinary process memory, which CRIU
    // restores and which one simulator cannot hand to another.
    let app = launch(&origin, &Profile::TensorFlowLike { bo_bytes: 64 << 10 }, 2);
    let expected = app.describe().unwrap();
    let first = Dirs::new();
    let (files, ids) = gpu_files(&app);
    first
        .emulator(&origin, |_| {})
        .dump(app.pid(), &files, &device_vmas(&origin))
        .expect("first dump");
    let pid = app.pid();
    drop(files);
    app.exit().unwrap();
    let image = kfd_image(first.images.path());
    let user_ids: Vec<u32> = image
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .map(|d| d.gpu_id)
        .collect();

    // Restore on a machine whose gpu_ids differ: the GPUs are remapped.
    let other = renumbered_two_gpu_machine();
    assert!(other.gpus().iter().all(|g| !user_ids.contains(&g.gpu_id)));
    let task = first
        .emulator(&other, |_| {})
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restore with remapping");
    Workload::verify(&other, pid, &expected).expect("state matches after remapping");

    // Checkpoint the restored process again: the image speaks the user ids
    // the application knows, and names the pages files by them.
    let second = Dirs::new();
    let again: Vec<TaskFile<'_>> = task
        .files
        .iter()
        .map(|(id, fd)| TaskFile {
            fd: fd.as_fd(),
            id: *id,
        })
        .collect();
    second
        .emulator(&other, |_| {})
        .dump(pid, &again, &device_vmas(&other))
        .expect("second dump");
    let image2 = kfd_image(second.images.path());
    let user_ids2: Vec<u32> = image2
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .map(|d| d.gpu_id)
        .collect();
    assert_eq!(
        user_ids2
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        user_ids.iter().copied().collect(),
        "GPUs are named by the ids the application knows"
    );
    for gpu in &user_ids {
        let name = format!("amdgpu-pages-{KFD_ID}-{gpu:04x}.img");
        assert!(second.images.path().join(&name).exists(), "{name}");
    }
    drop(again);
    drop(task);
    other.exit_process(pid).unwrap();

    // And back home.
    second
        .emulator(&origin, |_| {})
        .restore(pid, &ids, &vmas_of(&image2))
        .expect("restore at the origin");
    Workload::verify(&origin, pid, &expected).expect("state matches back home");
}

#[test]
fn drm_bos_of_a_render_node_keep_handles_addresses_and_contents() {
    use amdgpu_image::{CriuRenderNode, DirStore, ImageName, ImageStore, ReadLimits};
    use criu_host_emulator::{DeviceVma, VmaOutcome};
    use kfd::RenderNode;

    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = launch(&sim, &Profile::Basic, 1);
    let expected = app.describe().unwrap();
    let DrmBo {
        handle,
        va,
        offset: old_offset,
        pattern,
    } = add_drm_bo(&app);

    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    let (files, ids) = gpu_files(&app);
    emulator
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump");
    let render_image: CriuRenderNode = DirStore::open_dir(dirs.images.path())
        .unwrap()
        .read_message(
            &ImageName::RenderNode { id: KFD_ID + 1 },
            ReadLimits::default(),
        )
        .unwrap()
        .expect("render-node image");
    assert_eq!(render_image.bo_entries.len(), 1);
    let saved = &render_image.bo_entries[0];
    assert_eq!(
        (saved.handle, saved.addr, saved.offset),
        (handle.0, va, old_offset)
    );
    assert!(saved.content_checksum.is_some());

    let pid = app.pid();
    drop(files);
    app.exit().unwrap();
    let mut vmas = vmas_of(&kfd_image(dirs.images.path()));
    let drm_vma = DeviceVma {
        path: sim.render_path(sim.gpus()[0].gpu_id).unwrap(),
        addr: va,
        pgoff: old_offset,
    };
    vmas.push(drm_vma.clone());
    let task = emulator.restore(pid, &ids, &vmas).expect("restore");
    Workload::verify(&sim, pid, &expected).expect("KFD state matches");

    let (_, outcome) = task
        .vmas
        .iter()
        .find(|(vma, _)| *vma == drm_vma)
        .expect("the DRM BO mapping was offered");
    let VmaOutcome::Translated {
        pgoff,
        file: Some(file),
    } = outcome
    else {
        panic!("DRM BO mapping not translated: {outcome:?}");
    };
    let restored = RenderNode::from_fd(sim.driver(pid), file.as_fd());
    let handles = restored.gem_list_handles().unwrap();
    assert!(
        handles.iter().any(|h| h.gem_handle == handle.0),
        "handle {} kept",
        handle.0
    );
    let vms = restored.gem_mapping_info(handle).unwrap();
    assert_eq!(vms.first().map(|v| v.addr), Some(va), "GPU address kept");
    let map = restored
        .mmap(*pgoff, pattern.len(), libc::PROT_READ)
        .expect("the translated offset maps the BO");
    let mut back = vec![0u8; pattern.len()];
    map.read(0, &mut back).expect("read the restored BO");
    assert_eq!(back, pattern, "DRM BO contents restored");
}

#[test]
fn a_dma_buf_of_the_process_own_bo_is_restored_to_that_bo() {
    use kfd::{Kfd, MemHandle};
    use kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM;

    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = launch(&sim, &Profile::Basic, 1);
    let expected = app.describe().unwrap();
    let vram = expected
        .bos
        .iter()
        .find(|b| b.flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0)
        .expect("a VRAM BO")
        .clone();
    let kfd = Kfd::from_fd(app.driver().clone(), app.kfd_fd().unwrap());
    let exported = kfd
        .export_dmabuf(MemHandle(vram.handle))
        .expect("EXPORT_DMABUF");
    let info = kfd.dmabuf_info(exported.as_fd()).unwrap();

    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    // The dma-buf fd comes first, before /dev/kfd: it waits for the KFD file.
    let (mut files, mut ids) = gpu_files(&app);
    files.insert(
        0,
        TaskFile {
            fd: exported.as_fd(),
            id: 50,
        },
    );
    ids.insert(0, 50);
    emulator
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump with a dma-buf");
    let node: amdgpu_image::CriuDmabufNode = image_message(
        dirs.images.path(),
        &amdgpu_image::ImageName::Dmabuf { id: 50 },
    );
    let image = kfd_image(dirs.images.path());
    let entry = image
        .bo_entries
        .iter()
        .find(|b| b.addr == vram.va)
        .expect("the exported BO in the KFD image");
    assert_eq!(node.gem_handle, entry.handle, "the dma-buf names its BO");
    assert_ne!(entry.handle, amdgpu_image::flags::NO_HANDLE);

    let pid = app.pid();
    drop(files);
    drop(kfd);
    drop(exported);
    app.exit().unwrap();
    let task = emulator
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restore with a dma-buf");
    Workload::verify(&sim, pid, &expected).expect("restored state matches");
    let (_, dmabuf) = task
        .files
        .iter()
        .find(|(id, _)| *id == 50)
        .expect("dma-buf file restored");
    let restored_kfd = task
        .files
        .iter()
        .find(|(id, _)| *id == KFD_ID)
        .map(|(_, fd)| Kfd::from_fd(sim.driver(pid), fd.as_fd()))
        .unwrap();
    let restored_info = restored_kfd.dmabuf_info(dmabuf.as_fd()).unwrap();
    assert_eq!(restored_info.size, info.size);
    assert_eq!(restored_info.flags, info.flags);
}

#[test]
fn a_tree_of_two_gpu_processes_round_trips() {
    use common::{gpu_files_from, kfd_image_of};
    use criu_host_emulator::{TaskToDump, TaskToRestore};

    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let root = launch(&sim, &Profile::Basic, 2);
    let child = launch(
        &sim,
        &Profile::TensorFlowLike {
            bo_bytes: 128 << 10,
        },
        1,
    );
    let expected = [root.describe().unwrap(), child.describe().unwrap()];
    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    let (root_files, root_ids) = gpu_files_from(&root, 1);
    let (child_files, child_ids) = gpu_files_from(&child, 11);
    let report = emulator
        .dump_tree(&[
            TaskToDump {
                pid: root.pid(),
                files: root_files,
                vmas: device_vmas(&sim),
            },
            TaskToDump {
                pid: child.pid(),
                files: child_files,
                vmas: device_vmas(&sim),
            },
        ])
        .expect("dump of the tree");
    assert_eq!(report.late_answer, Some(0), "both processes unpaused late");
    let pids = [root.pid(), child.pid()];
    root.exit().unwrap();
    child.exit().unwrap();
    let images = [
        kfd_image_of(dirs.images.path(), 1),
        kfd_image_of(dirs.images.path(), 11),
    ];
    let tasks = emulator
        .restore_tree(&[
            TaskToRestore {
                pid: pids[0],
                file_ids: root_ids,
                vmas: vmas_of(&images[0]),
            },
            TaskToRestore {
                pid: pids[1],
                file_ids: child_ids,
                vmas: vmas_of(&images[1]),
            },
        ])
        .expect("restore of the tree");
    for (task, (pid, expected)) in tasks.iter().zip(pids.iter().zip(&expected)) {
        assert_eq!(task.resume_answer, 0, "pid {pid}");
        Workload::verify(&sim, *pid, expected).expect("restored state matches");
        Workload::attach(&sim, *pid).step().expect("runs again");
    }
}
