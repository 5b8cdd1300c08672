//! The plugin's path end to end, through the `kfd` crate's safe API instead
//! of raw ioctls: CRIU's process pauses and checkpoints a workload with
//! `Kfd`, copies every VRAM/GTT BO out through SDMA (`CopyEngine` on its own
//! render node, importing the checkpoint dma-bufs), unpauses; a new process
//! RESTOREs, copies the contents back through SDMA on the very render fd
//! that became its compute VM, and CRIU RESUMEs it. The restored process
//! must hold the same BOs with the same contents and continue to the same
//! result.

mod kfd_support;

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;

use ::kfd::{CopyEngine, CopyEngineConfig, Kfd, RenderNode, StagingBuffer};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig, SimDriver};
use kfd_support::criu_for;
use kfd_sys::*;

fn render_path(sim: &Sim, actual: u32) -> PathBuf {
    sim.render_path(actual).unwrap()
}

const STAGING: usize = 64 * 1024;

fn engine(
    render: RenderNode<SimDriver>,
    reserved: Vec<std::ops::Range<u64>>,
) -> (CopyEngine<SimDriver>, ::kfd::StagingSlot) {
    let mut e = CopyEngine::new(
        render,
        CopyEngineConfig {
            reserved,
            ..CopyEngineConfig::default()
        },
    )
    .unwrap();
    let slot = e.add_staging(StagingBuffer::new(STAGING).unwrap()).unwrap();
    (e, slot)
}

#[test]
fn checkpoint_and_restore_through_the_kfd_api_and_sdma() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let profile = Profile::PyTorchLike {
        bos_per_gpu: 40,
        max_bo_bytes: 256 * 1024,
    };
    let mut w = Workload::launch(&sim, &profile).unwrap();
    for _ in 0..3 {
        w.step().unwrap();
    }

    // Dump, in CRIU's process.
    let criu = criu_for(&sim, w.pid());
    let target = Kfd::from_fd(criu.clone(), w.kfd_fd().unwrap());
    let info = target.process_info().unwrap();
    assert_eq!(info.pid, w.pid().0);
    let cp = target.checkpoint(&info).unwrap();
    let desc = w.describe().unwrap();
    let actual_of: BTreeMap<u32, u32> = cp
        .devices
        .iter()
        .map(|d| (d.user_gpu_id, d.actual_gpu_id))
        .collect();
    let mut engines = BTreeMap::new();
    let mut contents = Vec::new();
    for bo in &cp.bos {
        let Some(dmabuf) = &bo.dmabuf else {
            contents.push(None);
            continue;
        };
        let actual = actual_of[&bo.bucket.gpu_id];
        let (e, slot) = engines.entry(actual).or_insert_with(|| {
            let render = RenderNode::open_path(criu.clone(), &render_path(&sim, actual)).unwrap();
            engine(render, Vec::new())
        });
        let imported = e.import_dmabuf(dmabuf.as_fd()).unwrap();
        let mut out = vec![0u8; bo.bucket.size as usize];
        e.copy_bo_to_host(&imported, 0, &mut out, *slot).unwrap();
        e.release_bo(imported).unwrap();
        contents.push(Some(out));
    }
    for (_, (e, _)) in engines {
        e.close().unwrap();
    }
    let buckets: Vec<kfd_criu_bo_bucket> = cp.bos.iter().map(|b| b.bucket).collect();
    drop(cp.bos);
    target.unpause().unwrap();
    drop(target);
    w.exit().unwrap();

    // Restore, in the new process.
    let pid = sim.spawn_process().unwrap();
    let drv = sim.driver(pid);
    let kfd = Kfd::open(drv.clone()).unwrap();
    assert!(kfd.version().unwrap().supports_criu());
    let mut renders = Vec::new();
    let mut devices = cp.devices.clone();
    for d in &mut devices {
        let render =
            RenderNode::open_path(drv.clone(), &render_path(&sim, d.actual_gpu_id)).unwrap();
        d.drm_fd = render.as_fd().as_raw_fd() as u32;
        renders.push((d.user_gpu_id, render));
    }
    let restored = kfd
        .restore(&devices, &buckets, &cp.priv_data, info.num_objects)
        .unwrap();
    // The copier must not map over the process's own BOs in the shared VM.
    let reserved: BTreeMap<u32, Vec<std::ops::Range<u64>>> =
        buckets.iter().fold(BTreeMap::new(), |mut m, b| {
            m.entry(b.gpu_id)
                .or_default()
                .push(b.addr..b.addr + b.size.max(4096));
            m
        });
    let mut engines: BTreeMap<u32, _> = renders
        .into_iter()
        .map(|(user, render)| {
            (
                user,
                engine(render, reserved.get(&user).cloned().unwrap_or_default()),
            )
        })
        .collect();
    for (bo, content) in restored.iter().zip(&contents) {
        let (Some(dmabuf), Some(content)) = (&bo.dmabuf, content) else {
            continue;
        };
        let (e, slot) = engines.get_mut(&bo.bucket.gpu_id).unwrap();
        let imported = e.import_dmabuf(dmabuf.as_fd()).unwrap();
        e.copy_host_to_bo(&imported, 0, content, *slot).unwrap();
        e.release_bo(imported).unwrap();
    }
    drop(restored);
    Kfd::open(criu.clone()).unwrap().resume(pid.0).unwrap();
    Workload::verify(&sim, pid, &desc).unwrap();

    // It continues to the same result as an uninterrupted run.
    let mut r = Workload::attach(&sim, pid);
    for _ in 0..2 {
        r.step().unwrap();
    }
    let mut u = Workload::launch(&sim, &profile).unwrap();
    for _ in 0..5 {
        u.step().unwrap();
    }
    assert_eq!(r.fingerprint().unwrap(), u.fingerprint().unwrap());
    for (_, (e, _)) in engines {
        e.close().unwrap();
    }
}
