//! What the incremental and deduplicated dump scenarios share: numbered
//! images directories linked as `criu dump --prev-images-dir` links them,
//! the bytes a set's pages files hold against its contents, a clean
//! `verify`, and dumping, restoring and stepping a workload.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

use amdgpu_image::{
    verify_set, CriuKfd, CriuRenderNode, DirStore, ImageKind, ImageName, ImageStore, ReadLimits,
    ValidatedKfd, ValidatedRenderNode,
};
use criu_host_emulator::{CriuEmulator, EmulatorConfig, TaskToRestore};
use criu_plugin_amdgpu::log::Level;
use kfd_sim::workload::Workload;
use kfd_sim::{Pid, Sim};

use crate::common::{device_vmas, gpu_files, image_message, vmas_of, KFD_ID};

/// A root holding numbered images directories and a shared-memory dir.
pub struct Root {
    root: tempfile::TempDir,
    shm: tempfile::TempDir,
}

impl Root {
    pub fn new() -> Root {
        Root {
            root: tempfile::tempdir().unwrap(),
            shm: tempfile::tempdir().unwrap(),
        }
    }

    /// Images directory `name`, made on first use, linked to `parent`
    /// (`../<parent>`, as `criu dump --prev-images-dir ../<parent>` does).
    pub fn dir(&self, name: &str, parent: Option<&str>) -> PathBuf {
        let dir = self.root.path().join(name);
        if !dir.exists() {
            std::fs::create_dir(&dir).unwrap();
            if let Some(p) = parent {
                std::os::unix::fs::symlink(format!("../{p}"), dir.join("parent")).unwrap();
            }
        }
        dir
    }

    pub fn emulator(
        &self,
        sim: &Sim,
        dir: &Path,
        tweak: impl FnOnce(&mut EmulatorConfig),
    ) -> CriuEmulator {
        let mut config = EmulatorConfig::new(self.shm.path());
        tweak(&mut config);
        CriuEmulator::new(sim.clone(), dir, config)
    }
}

/// Content bytes of the KFD images in `dir`, and the bytes their pages
/// files hold (length headers).
pub fn bytes_of(dir: &Path) -> (u64, u64) {
    let store = DirStore::open_dir(dir).unwrap();
    let (mut content, mut stored) = (0, 0);
    for name in store.list().unwrap() {
        if name.kind() != ImageKind::Kfd {
            continue;
        }
        let msg: CriuKfd = image_message(dir, &name);
        let image = ValidatedKfd::new(name.id(), msg).unwrap();
        for gpu in image.gpus().map(|d| d.gpu_id).collect::<Vec<_>>() {
            content += image.compat_pages_layout(gpu).total_len();
            stored += image.pages_layout(gpu).total_len();
        }
    }
    (content, stored)
}

pub fn clean(dir: &Path) -> amdgpu_image::SetReport {
    let report = verify_set(&DirStore::open_dir(dir).unwrap(), ReadLimits::default()).unwrap();
    assert!(
        report.is_clean(),
        "{}: {:?}",
        dir.display(),
        report.problems
    );
    report
}

pub fn dump(emulator: &CriuEmulator, sim: &Sim, app: &Workload) {
    let (files, _) = gpu_files(app);
    emulator
        .dump(app.pid(), &files, &device_vmas(sim))
        .expect("dump");
}

pub fn restore_one(emulator: &CriuEmulator, dir: &Path, pid: Pid) {
    let image: CriuKfd = image_message(dir, &ImageName::Kfd { id: KFD_ID });
    let ids: Vec<u32> = (0..=image.num_of_gpus).map(|i| KFD_ID + i).collect();
    let task = emulator
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restore");
    assert_eq!(task.resume_answer, 0);
}

/// Steps the restored process and the twin `more` times: same fingerprint.
pub fn continues_like(sim: &Sim, pid: Pid, twin: &mut Workload, more: usize) {
    let mut restored = Workload::attach(sim, pid);
    for _ in 0..more {
        restored.step().expect("restored step");
        twin.step().expect("twin step");
    }
    assert_eq!(restored.fingerprint().unwrap(), twin.fingerprint().unwrap());
}

pub fn logged(lines: &[(Level, String)], needle: &str) -> bool {
    lines.iter().any(|(_, t)| t.contains(needle))
}

/// Content bytes of the DRM BOs whose contents the render-node images in
/// `dir` saved, and the bytes their drm-pages files hold (length headers).
pub fn drm_bytes_of(dir: &Path) -> (u64, u64) {
    let store = DirStore::open_dir(dir).unwrap();
    let (mut content, mut stored) = (0, 0);
    for name in store.list().unwrap() {
        if name.kind() != ImageKind::RenderNode {
            continue;
        }
        let msg: CriuRenderNode = image_message(dir, &name);
        let image = ValidatedRenderNode::new(name.id(), msg).unwrap();
        for (i, bo) in image.message().bo_entries.iter().enumerate() {
            let (pages, _) = image.drm_pages(i).unwrap();
            let Ok(bytes) = std::fs::read(dir.join(pages.to_string())) else {
                continue;
            };
            content += bo.size;
            stored += u64::from_le_bytes(bytes[..8].try_into().unwrap());
        }
    }
    (content, stored)
}

/// Ends the processes `apps` of a tree dumped into `dir` (process `i`'s
/// files numbered from `10 * i + 1`: its `/dev/kfd`, then a render node per
/// GPU of the `gpus`-GPU machine), restores the tree, and checks that each
/// restored process is what it was and runs on like its twin.
pub fn restore_tree_like_twins(
    emulator: &CriuEmulator,
    sim: &Sim,
    dir: &Path,
    apps: Vec<Workload>,
    twins: &mut [Workload],
    gpus: usize,
) {
    let expected: Vec<_> = apps.iter().map(|a| a.describe().unwrap()).collect();
    let pids: Vec<Pid> = apps.iter().map(Workload::pid).collect();
    let restore: Vec<TaskToRestore> = pids
        .iter()
        .enumerate()
        .map(|(i, pid)| {
            let id = 10 * i as u32 + 1;
            let image: CriuKfd = image_message(dir, &ImageName::Kfd { id });
            TaskToRestore {
                pid: *pid,
                file_ids: (0..=gpus as u32).map(|k| id + k).collect(),
                vmas: vmas_of(&image),
            }
        })
        .collect();
    for a in apps {
        a.exit().unwrap();
    }
    let tasks = emulator
        .restore_tree(&restore)
        .expect("restore of the tree");
    assert!(tasks.iter().all(|t| t.resume_answer == 0));
    for ((pid, expected), twin) in pids.iter().zip(&expected).zip(twins) {
        Workload::verify(sim, *pid, expected).unwrap();
        continues_like(sim, *pid, twin, 2);
    }
}
