//! End-to-end: a simulated ROCm process on one GPU is dumped by the emulated
//! CRIU into a real images directory, killed, restored under its pid, and
//! resumed; its BOs, addresses and contents are identical, its device
//! mappings are translated to the restored BOs, and it continues exactly
//! like a twin that was never interrupted.

use std::os::fd::AsFd;

use amdgpu_image::{ImageName, PagesFile};
use criu_host_emulator::VmaOutcome;
use kfd::Driver;
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

mod common;

use common::{device_vmas, gpu_files, kfd_image, vmas_of, Dirs, KFD_ID};

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

    let dirs = Dirs::new();
    let images = &dirs.images;
    let emulator = dirs.emulator(&sim, |_| {});

    // Dump: /dev/kfd first (lowest fd), then the render nodes.
    let (files, ids) = gpu_files(&app);
    let dump_vmas = device_vmas(&sim);
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
    let image = kfd_image(images.path());
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
