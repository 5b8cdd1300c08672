//! Shared setup of the emulator scenarios: a simulated machine, an images
//! directory, and the files and mappings CRIU would find in a workload.

#![allow(dead_code)] // each test binary uses a different subset

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use amdgpu_image::{
    CriuKfd, CriuRenderNode, DirStore, ImageMessage, ImageName, ImageStore, ReadLimits,
};
use criu_host_emulator::{
    CriuEmulator, DeviceVma, EmulatorConfig, EmulatorError, RestoredTask, TaskFile, TaskToDump,
};
use kfd_sim::workload::Workload;
use kfd_sim::Sim;

/// CRIU's file id of the workload's /dev/kfd fd; render nodes follow.
pub const KFD_ID: u32 = 1;

/// An images directory and a private shared-memory directory.
pub struct Dirs {
    pub images: tempfile::TempDir,
    pub shm: tempfile::TempDir,
}

impl Dirs {
    pub fn new() -> Dirs {
        Dirs {
            images: tempfile::tempdir().unwrap(),
            shm: tempfile::tempdir().unwrap(),
        }
    }

    pub fn emulator(&self, sim: &Sim, tweak: impl FnOnce(&mut EmulatorConfig)) -> CriuEmulator {
        let mut config = EmulatorConfig::new(self.shm.path());
        tweak(&mut config);
        CriuEmulator::new(sim.clone(), self.images.path(), config)
    }
}

/// The workload's GPU files with CRIU ids in the order a ROCm process has
/// them (/dev/kfd opened first, so lowest), and the ids in that order.
pub fn gpu_files(app: &Workload) -> (Vec<TaskFile<'_>>, Vec<u32>) {
    gpu_files_from(app, KFD_ID)
}

/// [`gpu_files`] with the KFD file's id `first` and the render nodes after it.
pub fn gpu_files_from(app: &Workload, first: u32) -> (Vec<TaskFile<'_>>, Vec<u32>) {
    let mut files = vec![TaskFile {
        fd: app.kfd_fd().expect("kfd fd"),
        id: first,
    }];
    for (i, fd) in app.render_fds().into_iter().enumerate() {
        files.push(TaskFile {
            fd,
            id: first + 1 + i as u32,
        });
    }
    let ids = files.iter().map(|f| f.id).collect();
    (files, ids)
}

/// The KFD image of the dump.
pub fn kfd_image(images: &Path) -> CriuKfd {
    kfd_image_of(images, KFD_ID)
}

/// The KFD image of file `id`.
pub fn kfd_image_of(images: &Path, id: u32) -> CriuKfd {
    image_message(images, &ImageName::Kfd { id })
}

/// The render-node image of file `id`.
pub fn render_image(dirs: &Dirs, id: u32) -> CriuRenderNode {
    image_message(dirs.images.path(), &ImageName::RenderNode { id })
}

/// The message of image file `name` in `images`, which must exist.
pub fn image_message<M: ImageMessage>(images: &Path, name: &ImageName) -> M {
    DirStore::open_dir(images)
        .unwrap()
        .read_message(name, ReadLimits::default())
        .unwrap()
        .unwrap_or_else(|| panic!("{name} is missing"))
}

/// The amdgpu image files in `images`, committed (`amdgpu-*`) or not
/// (`.amdgpu-*` temporaries and unfinished-dump marks): what a failed dump
/// must not leave behind.
pub fn amdgpu_files(images: &Path) -> Vec<String> {
    std::fs::read_dir(images)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("amdgpu-") || n.starts_with(".amdgpu-"))
        .collect()
}

/// The hook and errno of an emulated CRIU run that a hook failed.
pub fn hook_errno(err: &EmulatorError) -> (&'static str, i32) {
    match err {
        EmulatorError::Hook { hook, errno, .. } => (hook, *errno),
        other => panic!("expected a hook failure, got {other}"),
    }
}

/// The restored fd of CRIU file `id`.
pub fn restored_file(task: &RestoredTask, id: u32) -> BorrowedFd<'_> {
    task.files
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, fd)| fd.as_fd())
        .unwrap_or_else(|| panic!("file {id} restored"))
}

/// The mappings CRIU offers `HANDLE_DEVICE_VMA` at dump.
pub fn device_vmas(sim: &Sim) -> Vec<DeviceVma> {
    DeviceVma::offered_at_dump(sim)
}

/// The dump of a process tree: every process of `apps` with its GPU files
/// (process `i`'s file ids from `10 * i + 1`, as CRIU numbers the files of
/// a tree) and the mappings CRIU offers at dump.
pub fn tree_tasks<'a>(sim: &Sim, apps: &'a [Workload]) -> Vec<TaskToDump<'a>> {
    let vmas = device_vmas(sim);
    apps.iter()
        .enumerate()
        .map(|(i, app)| TaskToDump {
            pid: app.pid(),
            files: gpu_files_from(app, 10 * i as u32 + 1).0,
            vmas: vmas.clone(),
        })
        .collect()
}

/// The device mappings of a KFD image's BOs at restore.
pub fn vmas_of(image: &CriuKfd) -> Vec<DeviceVma> {
    DeviceVma::of_kfd_image(image)
}

/// A DRM BO the application created on its first render node (GEM_CREATE),
/// mapped for the GPU and filled through a CPU mapping, so the render-node
/// paths (handles, mappings, contents) have work to do.
#[derive(Debug, Clone)]
pub struct DrmBo {
    /// Its GEM handle.
    pub handle: kfd::GemHandle,
    /// Its GPU address.
    pub va: u64,
    /// Its mmap offset at dump.
    pub offset: u64,
    /// Its contents.
    pub pattern: Vec<u8>,
}

/// Creates a [`DrmBo`] of 64 KiB in `app`'s first render node.
pub fn add_drm_bo(app: &Workload) -> DrmBo {
    add_drm_bo_at(app, 64 << 10, 3 << 40, 0)
}

/// Creates a VRAM [`DrmBo`] of `size` bytes in `app`'s first render node,
/// mapped at GPU address `va`, its bytes a pattern of `seed`.
pub fn add_drm_bo_at(app: &Workload, size: usize, va: u64, seed: usize) -> DrmBo {
    use kfd::{GemCreate, RenderNode};
    use kfd_sys::{AMDGPU_GEM_DOMAIN_VRAM, AMDGPU_VM_PAGE_READABLE, AMDGPU_VM_PAGE_WRITEABLE};
    let node = RenderNode::from_fd(app.driver().clone(), app.render_fds()[0]);
    let handle = node
        .gem_create(&GemCreate {
            size: size as u64,
            alignment: 4096,
            domains: u64::from(AMDGPU_GEM_DOMAIN_VRAM),
            flags: 0,
        })
        .expect("GEM_CREATE");
    node.gem_va_map(
        handle,
        va,
        0,
        size as u64,
        AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE,
    )
    .expect("GEM_VA");
    let offset = node.gem_mmap_offset(handle).expect("GEM_MMAP");
    let pattern: Vec<u8> = (0..size)
        .map(|i| ((i * 7 + seed * 13) % 251) as u8)
        .collect();
    let mut map = node
        .mmap(offset, size, libc::PROT_READ | libc::PROT_WRITE)
        .expect("CPU mapping of the BO");
    map.write(0, &pattern).expect("fill the BO");
    DrmBo {
        handle,
        va,
        offset,
        pattern,
    }
}

/// The first `len` bytes of DRM BO `handle` in the restored render file
/// `id` of `task`, read through a CPU mapping.
pub fn read_drm_bo(
    sim: &Sim,
    task: &RestoredTask,
    id: u32,
    handle: kfd::GemHandle,
    len: usize,
) -> Vec<u8> {
    let node = kfd::RenderNode::from_fd(sim.driver(task.pid), restored_file(task, id));
    let offset = node.gem_mmap_offset(handle).unwrap();
    let mut back = vec![0u8; len];
    node.mmap(offset, len, libc::PROT_READ)
        .unwrap()
        .read(0, &mut back)
        .unwrap();
    back
}

/// A workload checkpointed through the emulated CRIU and gone: what a
/// restore needs and what it must bring back.
pub struct Checkpointed {
    /// The images (and shared-memory) directories.
    pub dirs: Dirs,
    /// The checkpointed process, exited since.
    pub pid: kfd_sim::Pid,
    /// Its GPU file ids in fd order.
    pub ids: Vec<u32>,
    /// Its state at the checkpoint.
    pub expected: kfd_sim::workload::WorkloadDescription,
    /// Its KFD image.
    pub image: CriuKfd,
}

/// Launches `profile` on `sim`, steps it once, dumps it with default
/// options and lets it exit.
pub fn checkpoint(sim: &Sim, profile: &kfd_sim::workload::Profile) -> Checkpointed {
    let mut app = Workload::launch(sim, profile).expect("launch");
    app.step().unwrap();
    let expected = app.describe().unwrap();
    let pid = app.pid();
    let dirs = Dirs::new();
    let (files, ids) = gpu_files(&app);
    dirs.emulator(sim, |_| {})
        .dump(pid, &files, &device_vmas(sim))
        .expect("dump");
    drop(files);
    app.exit().unwrap();
    let image = kfd_image(dirs.images.path());
    Checkpointed {
        dirs,
        pid,
        ids,
        expected,
        image,
    }
}

/// The fingerprints of `app` after each of its next `n` steps: what a
/// process that was paused, killed around or restored must match of an
/// uninterrupted twin.
pub fn steps_after(app: &mut Workload, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            app.step().expect("queues run");
            app.fingerprint().unwrap()
        })
        .collect()
}
