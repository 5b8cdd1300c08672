//! Upstream's 2026 plugin defects, each shown absent here (criu#2909,
//! #2960, #3000, #3015): a render node that fails to open at restore fails
//! the restore; a stale, longer image in the images directory is replaced
//! whole (no missing `O_TRUNC`); a kernel without `AMDGPU_GEM_LIST_HANDLES`
//! gives a clear error for a render node that has DRM buffers instead of
//! "0 BOs dumped, success". Short reads and writes are covered by
//! `faults_storage.rs`, the render fds of parallel restore by
//! `parallel_restore_fds.rs`.

mod common;

use amdgpu_image::{DirStore, ImageName, ImageStore, ReadLimits};
use common::{
    add_drm_bo, checkpoint, device_vmas, gpu_files, hook_errno, vmas_of, Checkpointed, Dirs, KFD_ID,
};
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{FaultSpec, Sim, SimConfig};

#[test]
fn a_render_node_that_fails_to_open_at_restore_fails_the_restore() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let Checkpointed {
        dirs,
        pid,
        ids,
        expected,
        image,
    } = checkpoint(&sim, &Profile::Basic);
    let emulator = dirs.emulator(&sim, |_| {});
    let vmas = vmas_of(&image);

    // Every device open of the restore in turn fails with EACCES: each run
    // either fails with an error, or (an open that was not needed) restores
    // the process exactly. Never a restore that "succeeds" without a file.
    let mut render_open_failed = false;
    for nth in 1..=6 {
        sim.clear_faults();
        sim.inject(format!("OPEN:{nth}=EACCES").parse::<FaultSpec>().unwrap());
        let capture = Capture::start();
        let result = emulator.restore(pid, &ids, &vmas);
        let lines = capture.lines();
        drop(capture);
        // A failed RESUME_DEVICES_LATE fails CRIU's restore as an error
        // of RESTORE_EXT_FILE does.
        let errno = match result {
            Ok(task) if task.resume_answer == 0 => {
                Workload::verify(&sim, pid, &expected)
                    .unwrap_or_else(|e| panic!("open {nth} failed yet the restore went on: {e}"));
                drop(task);
                sim.exit_process(pid).unwrap();
                continue;
            }
            Ok(task) => {
                let errno = task.resume_answer;
                drop(task);
                sim.exit_process(pid).unwrap();
                errno
            }
            Err(err) => hook_errno(&err).1,
        };
        assert!(errno < 0 && errno != -libc::ENOTSUP, "open {nth}: {errno}");
        assert!(
            lines.iter().any(|(l, _)| *l == Level::Error),
            "open {nth}: a failure with no error line: {lines:#?}"
        );
        if lines.iter().any(|(l, t)| {
            *l == Level::Error
                && t.contains("opening /dev/dri/renderD")
                && t.contains("Permission denied")
        }) {
            render_open_failed = true;
            assert!(
                lines.iter().any(|(_, t)| t.contains("video/render group")),
                "the EACCES hint: {lines:#?}"
            );
        }
    }
    sim.clear_faults();
    assert!(render_open_failed, "no run failed the render node's open");
    // Without faults the same images restore.
    emulator.restore(pid, &ids, &vmas).expect("restore");
    Workload::verify(&sim, pid, &expected).unwrap();
}

#[test]
fn a_stale_longer_image_is_replaced_whole() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
    app.step().unwrap();
    let dirs = Dirs::new();
    let kfd = ImageName::Kfd { id: KFD_ID };
    let stale = dirs.images.path().join(kfd.to_string());
    std::fs::write(&stale, vec![0x5a; 1 << 20]).unwrap();
    let (files, _) = gpu_files(&app);
    dirs.emulator(&sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump over a stale image");
    let size = std::fs::metadata(&stale).unwrap().len();
    assert!(
        size < 1 << 20,
        "the image kept the stale tail: {size} bytes"
    );
    // It reads back whole: nothing of the stale bytes follows the message.
    let store = DirStore::open_dir(dirs.images.path()).unwrap();
    let msg: amdgpu_image::CriuKfd = store
        .read_message(&kfd, ReadLimits::default())
        .unwrap()
        .expect("the KFD image");
    assert_eq!(msg.pid, app.pid().0);
    let report = amdgpu_image::verify_set(&store, ReadLimits::default()).unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn without_gem_list_handles_a_render_node_with_buffers_is_refused_clearly() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
    app.step().unwrap();
    let dirs = Dirs::new();

    // No DRM buffer on the render node: dumped, with a warning saying why
    // the list is empty.
    sim.inject(
        "AMDGPU_GEM_LIST_HANDLES=EINVAL"
            .parse::<FaultSpec>()
            .unwrap(),
    );
    let (files, _) = gpu_files(&app);
    let capture = Capture::start();
    dirs.emulator(&sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("a render node without buffers dumps");
    assert!(
        capture.contains(
            Level::Warn,
            "the kernel cannot list DRM BOs (no AMDGPU_GEM_LIST_HANDLES)"
        ),
        "{:#?}",
        capture.lines()
    );
    drop(capture);
    drop(files);
    app.step().unwrap();

    // With a DRM buffer: refused, naming the file and what to do; the
    // application runs on.
    let _bo = add_drm_bo(&app);
    let again = Dirs::new();
    sim.inject(
        "AMDGPU_GEM_LIST_HANDLES=EINVAL"
            .parse::<FaultSpec>()
            .unwrap(),
    );
    let (files, _) = gpu_files(&app);
    let capture = Capture::start();
    let err = again
        .emulator(&sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect_err("buffers that cannot be listed refuse the dump");
    assert_eq!(hook_errno(&err).0, "DUMP_EXT_FILE");
    assert!(
        capture.contains(
            Level::Error,
            "holds DRM buffers (GEM handle 1 exists) but this kernel cannot list them"
        ),
        "{:#?}",
        capture.lines()
    );
    drop(capture);
    drop(files);
    app.step()
        .expect("the application runs after the refused dump");
}

#[test]
fn without_gem_list_handles_buffers_above_the_probed_handles_are_found_by_fdinfo() {
    // A render node whose GEM handles 1 to 256 were all closed again: the
    // probe finds none, but the file's fdinfo shows memory no KFD buffer
    // and no page table accounts for. Dumped "without BOs" they would be
    // lost: the dump is refused.
    use kfd::{GemCreate, GemHandle, RenderNode};
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
    app.step().unwrap();
    let node = RenderNode::from_fd(app.driver().clone(), app.render_fds()[0]);
    let handles: Vec<GemHandle> = (0..260)
        .map(|_| {
            node.gem_create(&GemCreate {
                size: 64 << 10,
                alignment: 4096,
                domains: u64::from(kfd_sys::AMDGPU_GEM_DOMAIN_VRAM),
                flags: 0,
            })
            .expect("GEM_CREATE")
        })
        .collect();
    for &handle in handles.iter().filter(|h| h.0 <= 256) {
        node.gem_close(handle).expect("GEM_CLOSE");
    }
    let fdinfo = node.fdinfo().unwrap();
    assert!(fdinfo.contains("drm-total-vram:\t"), "{fdinfo}");
    let dirs = Dirs::new();
    sim.inject(
        "AMDGPU_GEM_LIST_HANDLES=EINVAL"
            .parse::<FaultSpec>()
            .unwrap(),
    );
    let (files, _) = gpu_files(&app);
    let capture = Capture::start();
    let err = dirs
        .emulator(&sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect_err("buffers the probe cannot see refuse the dump");
    assert_eq!(hook_errno(&err).0, "DUMP_EXT_FILE");
    assert!(
        capture.contains(Level::Error, "its fdinfo")
            && capture.contains(Level::Error, "update the kernel"),
        "{:#?}",
        capture.lines()
    );
    drop(capture);
    drop(files);
    app.step()
        .expect("the application runs after the refused dump");
}
