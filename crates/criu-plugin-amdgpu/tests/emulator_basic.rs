//! End-to-end: a simulated ROCm process on one GPU is dumped by the emulated
//! CRIU into a real images directory, killed, restored under its pid, and
//! resumed; its BOs, addresses and contents are identical, its device
//! mappings are translated to the restored BOs, and it continues exactly
//! like a twin that was never interrupted.

use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;

use amdgpu_image::{flags, CriuKfd, DirStore, ImageName, ImageStore, PagesFile, ReadLimits};
use criu_plugin_amdgpu::emulator::{CriuEmulator, DeviceVma, EmulatorConfig, TaskFile, VmaOutcome};
use kfd::Driver;
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

const KFD_ID: u32 = 1;

/// The device mappings CRIU would find for the BOs of a KFD image: VRAM and
/// GTT BOs through the GPU's render node, doorbell and MMIO pages through
/// /dev/kfd, each at CPU address == GPU address with the BO's mmap offset.
fn vmas_of(image: &CriuKfd) -> Vec<DeviceVma> {
    image
        .bo_entries
        .iter()
        .filter_map(|bo| {
            let path = if bo.alloc_flags & (flags::KFD_VRAM | flags::KFD_GTT) != 0 {
                let gpu = image
                    .device_entries
                    .iter()
                    .find(|d| d.gpu_id == bo.gpu_id)?;
                PathBuf::from(format!("/dev/dri/renderD{}", gpu.drm_render_minor))
            } else if bo.alloc_flags & (flags::KFD_DOORBELL | flags::KFD_MMIO_REMAP) != 0 {
                PathBuf::from("/dev/kfd")
            } else {
                return None;
            };
            Some(DeviceVma {
                path,
                addr: bo.addr,
                pgoff: bo.offset,
            })
        })
        .collect()
}

#[test]
fn basic_workload_survives_dump_and_restore_on_one_gpu() {
    let sim = Sim::synthetic(1, SimConfig::default()).expect("simulated machine");
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch app");
    let mut twin = Workload::launch(&sim, &Profile::Basic).expect("launch twin");
    for _ in 0..3 {
        app.step().expect("app step");
        twin.step().expect("twin step");
    }
    let expected = app.describe().expect("describe app");

    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let emulator = CriuEmulator::new(sim.clone(), images.path(), EmulatorConfig::new(shm.path()));

    // Dump: /dev/kfd first (lowest fd), then the render nodes.
    let mut files = vec![TaskFile {
        fd: app.kfd_fd().expect("kfd fd"),
        id: KFD_ID,
    }];
    for (i, fd) in app.render_fds().into_iter().enumerate() {
        files.push(TaskFile {
            fd,
            id: KFD_ID + 1 + i as u32,
        });
    }
    let ids: Vec<u32> = {
        let mut by_fd: Vec<(i32, u32)> = files.iter().map(|f| (f.fd.as_raw_fd(), f.id)).collect();
        by_fd.sort_unstable();
        by_fd.into_iter().map(|(_, id)| id).collect()
    };
    let gpu = sim.gpus()[0].clone();
    let render_path = sim.render_path(gpu.gpu_id).expect("render path");
    let dump_vmas = [
        DeviceVma {
            path: "/dev/kfd".into(),
            addr: 0,
            pgoff: 0,
        },
        DeviceVma {
            path: render_path.clone(),
            addr: 0,
            pgoff: 0,
        },
    ];
    let report = emulator
        .dump(app.pid(), &files, &dump_vmas)
        .expect("dump succeeds");
    assert!(report.vma_answers.iter().all(|&a| a == 0), "{report:?}");
    assert!(
        report.file_answers.iter().all(|(_, a)| *a == 0),
        "{report:?}"
    );
    assert_eq!(report.late_answer, Some(0), "the dump paused a process");

    // The images directory holds what the C plugin would write.
    let store = DirStore::open_dir(images.path()).unwrap();
    let image: CriuKfd = store
        .read_message(&ImageName::Kfd { id: KFD_ID }, ReadLimits::default())
        .unwrap()
        .expect("amdgpu-kfd-1.img");
    assert_eq!(image.num_of_gpus, 1);
    assert_eq!(image.bo_entries.len(), expected.bos.len());
    let pages_name = ImageName::Pages {
        id: KFD_ID,
        gpu_id: image
            .device_entries
            .iter()
            .find(|d| d.gpu_id != 0)
            .unwrap()
            .gpu_id,
    };
    assert!(images.path().join(pages_name.to_string()).exists());
    assert!(images
        .path()
        .join(ImageName::RenderNode { id: KFD_ID + 1 }.to_string())
        .exists());

    // The dumped process was unpaused: it could go on. Kill it instead and
    // restore it under its pid.
    let pid = app.pid();
    app.exit().expect("app exits");
    let vmas = vmas_of(&image);
    let task = emulator
        .restore(pid, &ids, &vmas)
        .expect("restore succeeds");
    assert_eq!(task.resume_answer, 0, "RESUME_DEVICES_LATE");
    assert_eq!(task.files.len(), ids.len());

    // Same BOs at the same handles and addresses with the same contents.
    Workload::verify(&sim, pid, &expected).expect("restored state matches the checkpoint");

    // Every device mapping is translated, and the new offset maps the
    // restored BO through the file CRIU is given.
    let validated = amdgpu_image::ValidatedKfd::new(KFD_ID, image.clone()).unwrap();
    let layout = validated.pages_layout(pages_name_gpu(&pages_name));
    let pages = PagesFile::open(
        std::fs::File::open(images.path().join(pages_name.to_string())).unwrap(),
        &pages_name.to_string(),
        layout.clone(),
    )
    .unwrap();
    let driver = sim.driver(pid);
    let mut checked = 0;
    for (vma, outcome) in &task.vmas {
        let VmaOutcome::Translated { pgoff, file } = outcome else {
            panic!(
                "{} at {:#x} not translated: {outcome:?}",
                vma.path.display(),
                vma.addr
            );
        };
        if vma.path.as_os_str() == "/dev/kfd" {
            assert!(file.is_none(), "KFD mappings reopen /dev/kfd");
            continue;
        }
        let file = file
            .as_ref()
            .expect("render mappings get the owning DRM file");
        let (index, bo) = layout
            .bos()
            .iter()
            .enumerate()
            .find(|(_, b)| image.bo_entries[b.entry].addr == vma.addr)
            .expect("a BO with contents at this address");
        let len = bo.size as usize;
        // SAFETY: a fresh shared read-only mapping chosen by the kernel (no
        // MAP_FIXED), unmapped below before anything else uses it.
        let map = unsafe {
            driver.mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_fd(),
                *pgoff,
            )
        }
        .expect("the translated offset maps the restored BO");
        // SAFETY: the mapping is `len` readable bytes until munmap.
        let mapped = unsafe { std::slice::from_raw_parts(map.as_ptr().cast::<u8>(), len) }.to_vec();
        // SAFETY: the mapping above, no longer referenced.
        unsafe { driver.munmap(map, len) }.unwrap();
        assert_eq!(
            mapped,
            pages.bo_bytes(index).unwrap().to_vec(),
            "BO at {:#x}",
            vma.addr
        );
        checked += 1;
    }
    assert!(checked > 0, "no VRAM/GTT mapping was checked");

    // The restored process continues exactly like the uninterrupted twin.
    let mut restored = Workload::attach(&sim, pid);
    for _ in 0..2 {
        restored.step().expect("restored step");
        twin.step().expect("twin step");
    }
    assert_eq!(
        restored.fingerprint().unwrap(),
        twin.fingerprint().unwrap(),
        "restored process diverged from its twin"
    );
}

fn pages_name_gpu(name: &ImageName) -> u32 {
    match name {
        ImageName::Pages { gpu_id, .. } => *gpu_id,
        _ => unreachable!("a pages name"),
    }
}
