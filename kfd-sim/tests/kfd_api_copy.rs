//! `CopyEngine` against the simulated SDMA engine: blocking and pipelined
//! copies in both directions, slot and BO busy rules, error propagation
//! (submission failure, short DMA), the shared-VM restore path with
//! reserved ranges, and that closing the engine releases everything.

mod kfd_api_support;

use std::os::fd::AsFd;
use std::str::FromStr;

use kfd::{CopyEngine, CopyEngineConfig, Error, Fence, RenderMinor, RenderNode, StagingBuffer};
use kfd_api_support::{gtt, pattern, sim, vram, GpuProcess};
use kfd_sim::{FaultSpec, Sim, SimDriver};

const VA: u64 = 0x7f00_0000_0000;

/// A fresh render node of GPU 0 in a new process (CRIU's dumper uses its
/// own DRM file, separate from the application's VM).
fn engine(sim: &Sim) -> CopyEngine<SimDriver> {
    let pid = sim.spawn_process().unwrap();
    let render =
        RenderNode::open(sim.driver(pid), RenderMinor(sim.gpus()[0].render_minor)).unwrap();
    CopyEngine::new(render, CopyEngineConfig::default()).unwrap()
}

#[test]
fn blocking_round_trip_in_chunks() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let size = (3 << 20) + 4096;
    let a = p.alloc(0, VA, size as u64, vram());
    p.fill(0, &a, size, pattern(9));
    let dmabuf = p.kfd.export_dmabuf(a.handle).unwrap();

    let mut e = engine(&sim);
    let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    assert_eq!(bo.size(), size as u64);
    let slot = e.add_staging(StagingBuffer::new(1 << 20).unwrap()).unwrap();
    let mut out = vec![0u8; size];
    e.copy_bo_to_host(&bo, 0, &mut out, slot).unwrap();
    assert_eq!(out, p.read(0, &a, size));

    // Write a new pattern back and check it through the CPU mapping.
    let new: Vec<u8> = (0..size).map(pattern(200)).collect();
    e.copy_host_to_bo(&bo, 0, &new, slot).unwrap();
    assert_eq!(p.read(0, &a, size), new);

    // A partial copy at an offset.
    let mut mid = vec![0u8; 10_000];
    e.copy_bo_to_host(&bo, 123_457, &mut mid, slot).unwrap();
    assert_eq!(&mid[..], &new[123_457..133_457]);
    e.release_bo(bo).unwrap();
    e.close().unwrap();
}

#[test]
fn double_buffered_pipeline_overlaps_two_slots() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let size = 5 << 20;
    let a = p.alloc(0, VA, size as u64, gtt());
    p.fill(0, &a, size, pattern(3));
    let dmabuf = p.kfd.export_dmabuf(a.handle).unwrap();
    let mut e = engine(&sim);
    let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    let slots = [
        e.add_staging(StagingBuffer::new(1 << 20).unwrap()).unwrap(),
        e.add_staging(StagingBuffer::new(1 << 20).unwrap()).unwrap(),
    ];
    let chunk = e.staging_len(slots[0]).unwrap() as u64;
    let mut out = Vec::new();
    let mut pending: Option<(Fence, usize)> = None;
    let mut offset = 0;
    let mut turn = 0;
    let mut overlapped = 0;
    while offset < bo.size() {
        let len = (bo.size() - offset).min(chunk) as usize;
        let fence = e.submit_read(&bo, offset, slots[turn], len).unwrap();
        if let Some((prev, prev_len)) = pending.take() {
            // Two copies outstanding at this point.
            assert!(!e.is_idle(slots[turn]).unwrap());
            assert!(!e.is_idle(prev.slot()).unwrap());
            overlapped += 1;
            assert!(e.wait(&prev, None).unwrap());
            out.extend_from_slice(&e.staging(prev.slot()).unwrap()[..prev_len]);
        }
        pending = Some((fence, len));
        offset += len as u64;
        turn ^= 1;
    }
    let (last, len) = pending.unwrap();
    e.wait(&last, None).unwrap();
    out.extend_from_slice(&e.staging(last.slot()).unwrap()[..len]);
    assert_eq!(overlapped, 4);
    assert_eq!(out, p.read(0, &a, size));
    // Waiting again for a finished fence is fine.
    assert!(e.wait(&last, None).unwrap());
}

#[test]
fn busy_slots_and_bos_are_refused_until_waited() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let a = p.alloc(0, VA, 1 << 20, gtt());
    let dmabuf = p.kfd.export_dmabuf(a.handle).unwrap();
    let mut e = engine(&sim);
    let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    let slot = e.add_staging(StagingBuffer::new(1 << 20).unwrap()).unwrap();
    let fence = e.submit_read(&bo, 0, slot, 1 << 20).unwrap();
    assert!(matches!(e.staging(slot), Err(Error::Busy { slot: 0, .. })));
    assert!(matches!(e.staging_mut(slot), Err(Error::Busy { .. })));
    assert!(matches!(
        e.submit_write(&bo, 0, slot, 4096),
        Err(Error::Busy { .. })
    ));
    assert!(matches!(e.remove_staging(slot), Err(Error::Busy { .. })));
    let err = e.release_bo(bo).unwrap_err();
    assert_eq!(err.errno(), libc::EBUSY);
    assert_eq!(
        err.to_string(),
        "release BO: staging slot 0 is busy; wait for its fence first"
    );
    assert!(e.wait(&fence, None).unwrap());
    assert!(e.staging(slot).is_ok());
    let buffer = e.remove_staging(slot).unwrap();
    assert_eq!(buffer.len(), 1 << 20);
    assert!(e.staging(slot).is_err());
}

#[test]
fn out_of_range_and_foreign_handles_are_rejected() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let a = p.alloc(0, VA, 64 << 10, gtt());
    let dmabuf = p.kfd.export_dmabuf(a.handle).unwrap();
    let mut e = engine(&sim);
    let mut other = engine(&sim);
    let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    let slot = e
        .add_staging(StagingBuffer::new(16 << 10).unwrap())
        .unwrap();
    let other_slot = other
        .add_staging(StagingBuffer::new(4096).unwrap())
        .unwrap();
    for (off, len) in [
        (0, 0),
        (0, (16 << 10) + 1),
        (60 << 10, 8 << 10),
        (u64::MAX, 1),
    ] {
        let err = e.submit_read(&bo, off, slot, len).unwrap_err();
        assert_eq!(err.errno(), libc::EINVAL, "{off} {len}: {err}");
    }
    assert!(matches!(
        e.submit_read(&bo, 0, other_slot, 4096),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        other.submit_read(&bo, 0, other_slot, 4096),
        Err(Error::InvalidArgument { .. })
    ));
    // Nothing was submitted: the slot is idle.
    assert!(e.is_idle(slot).unwrap());
}

#[test]
fn submission_and_dma_failures_are_reported() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let a = p.alloc(0, VA, 1 << 20, gtt());
    p.fill(0, &a, 1 << 20, pattern(5));
    let dmabuf = p.kfd.export_dmabuf(a.handle).unwrap();
    let mut e = engine(&sim);
    let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    let slot = e.add_staging(StagingBuffer::new(1 << 20).unwrap()).unwrap();

    sim.inject(FaultSpec::from_str("AMDGPU_CS=ENOMEM").unwrap());
    let err = e.submit_read(&bo, 0, slot, 4096).unwrap_err();
    assert_eq!(err.op(), "AMDGPU_CS");
    assert_eq!(err.errno(), libc::ENOMEM);
    assert!(e.is_idle(slot).unwrap());

    // A short DMA: the fence reports the error and the slot is free again.
    sim.inject(FaultSpec::from_str("SDMA_SHORT").unwrap());
    let fence = e.submit_read(&bo, 0, slot, 1 << 20).unwrap();
    let err = e.wait(&fence, None).unwrap_err();
    assert_eq!(err.op(), "AMDGPU_WAIT_CS");
    assert!(e.is_idle(slot).unwrap());

    // The blocking helper propagates the same failure.
    sim.inject(FaultSpec::from_str("SDMA_SHORT").unwrap());
    let mut out = vec![0u8; 1 << 20];
    assert!(e.copy_bo_to_host(&bo, 0, &mut out, slot).is_err());
    // And works again afterwards.
    e.copy_bo_to_host(&bo, 0, &mut out, slot).unwrap();
    assert_eq!(out, p.read(0, &a, 1 << 20));
}

#[test]
fn read_only_dmabuf_can_be_read_not_written() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let a = p.alloc(
        0,
        VA,
        64 << 10,
        ::kfd::AllocFlags::GTT | ::kfd::AllocFlags::EXECUTABLE,
    );
    p.fill(0, &a, 64 << 10, pattern(11));
    // CHECKPOINT exports non-WRITABLE BOs read-only.
    let criu = sim.spawn_process().unwrap();
    sim.ptrace_attach(criu, p.pid).unwrap();
    let d = ::kfd::Kfd::from_fd(sim.driver(criu), p.kfd.as_fd());
    let info = d.process_info().unwrap();
    let cp = d.checkpoint(&info).unwrap();
    let dmabuf = cp.bos[0].dmabuf.as_ref().unwrap();
    let render =
        RenderNode::open(sim.driver(criu), RenderMinor(sim.gpus()[0].render_minor)).unwrap();
    let mut e = CopyEngine::new(render, CopyEngineConfig::default()).unwrap();
    let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    let slot = e
        .add_staging(StagingBuffer::new(64 << 10).unwrap())
        .unwrap();
    let mut out = vec![0u8; 64 << 10];
    e.copy_bo_to_host(&bo, 0, &mut out, slot).unwrap();
    assert_eq!(out, p.read(0, &a, 64 << 10));
    // Mapped read-only: a write faults and the fence says so.
    assert!(e.copy_host_to_bo(&bo, 0, &out, slot).is_err());
    assert_eq!(p.read(0, &a, 64 << 10), out);
    drop(e);
    d.unpause().unwrap();
}

#[test]
fn restore_path_shares_the_kfd_vm_with_reserved_ranges() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    // KFD BOs of the process, mapped in the same VM the engine uses.
    let a = p.alloc(0, VA, 2 << 20, vram());
    let b = p.alloc(0, VA + (2 << 20), 1 << 20, gtt());
    let dmabuf = p.kfd.export_dmabuf(a.handle).unwrap();
    let info = p.renders[0].device_info().unwrap();
    let config = CopyEngineConfig {
        // Squeeze the window so only the reserved ranges keep us off the
        // KFD BOs: without them the top-down allocator would hit them.
        va_window: Some(VA..VA + (16 << 20)),
        reserved: std::iter::once(VA..VA + (3 << 20)).collect(),
        ..Default::default()
    };
    assert!(info.virtual_address_max > VA + (16 << 20));
    let render = RenderNode::from_fd(p.driver.clone(), p.renders[0].as_fd());
    let mut e = CopyEngine::new(render, config).unwrap();
    let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    assert!(bo.gpu_address() >= VA + (3 << 20));
    let slot = e.add_staging(StagingBuffer::new(1 << 20).unwrap()).unwrap();
    let data: Vec<u8> = (0..2 << 20).map(pattern(77)).collect();
    e.copy_host_to_bo(&bo, 0, &data, slot).unwrap();
    assert_eq!(p.read(0, &a, 2 << 20), data);
    // The application's own BO is untouched.
    let _ = b;
    e.close().unwrap();

    // Without the reservation, a window that only covers KFD BOs fails
    // with the kernel's overlap error, not silently.
    let render = RenderNode::from_fd(p.driver.clone(), p.renders[0].as_fd());
    let config = CopyEngineConfig {
        va_window: Some(VA..VA + (3 << 20)),
        ..Default::default()
    };
    let mut e = CopyEngine::new(render, config).unwrap();
    let err = e.import_dmabuf(dmabuf.as_fd()).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(err.op(), "AMDGPU_GEM_VA MAP");
}

#[test]
fn close_releases_everything() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let a = p.alloc(0, VA, 1 << 20, gtt());
    let dmabuf = p.kfd.export_dmabuf(a.handle).unwrap();
    let before = sim.accounting();
    let mut e = engine(&sim);
    let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    // The same dma-buf again shares the mapping.
    let again = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    assert_eq!(again.gpu_address(), bo.gpu_address());
    let slot = e
        .add_staging(StagingBuffer::new(256 << 10).unwrap())
        .unwrap();
    let _fence = e.submit_read(&bo, 0, slot, 256 << 10).unwrap();
    let during = sim.accounting();
    assert!(during.live_bos > before.live_bos);
    assert!(during.pinned_userptr_pages > 0);
    assert_eq!(during.cpu_mappings, before.cpu_mappings + 1);
    e.release_bo(again).unwrap_err(); // busy: the read is in flight
                                      // Close waits for the copy, then frees IB, userptr, mappings, context.
    e.close().unwrap();
    let after = sim.accounting();
    // The engine's own render fd is closed too (it owned it).
    assert_eq!(after.render_fds + 1, during.render_fds);
    assert_eq!(after.live_bos, before.live_bos);
    assert_eq!(after.pinned_userptr_pages, before.pinned_userptr_pages);
    assert_eq!(after.cpu_mappings, before.cpu_mappings);
}

#[test]
fn drop_with_copies_in_flight_is_safe() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let a = p.alloc(0, VA, 4 << 20, gtt());
    let dmabuf = p.kfd.export_dmabuf(a.handle).unwrap();
    let before = sim.accounting();
    {
        let mut e = engine(&sim);
        let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
        let s1 = e.add_staging(StagingBuffer::new(2 << 20).unwrap()).unwrap();
        let s2 = e.add_staging(StagingBuffer::new(2 << 20).unwrap()).unwrap();
        e.submit_read(&bo, 0, s1, 2 << 20).unwrap();
        e.submit_read(&bo, 2 << 20, s2, 2 << 20).unwrap();
    }
    let after = sim.accounting();
    assert_eq!(after.live_bos, before.live_bos);
    assert_eq!(after.pinned_userptr_pages, before.pinned_userptr_pages);
}

#[test]
fn a_missing_ring_is_reported() {
    let sim = sim(1);
    let pid = sim.spawn_process().unwrap();
    let render =
        RenderNode::open(sim.driver(pid), RenderMinor(sim.gpus()[0].render_minor)).unwrap();
    let config = CopyEngineConfig {
        ring: 31,
        ..Default::default()
    };
    let err = CopyEngine::new(render, config).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    assert_eq!(err.errno(), libc::ENODEV);
    assert!(
        err.to_string()
            .starts_with("copy engine setup: SDMA ring 31 is not available"),
        "{err}"
    );
}

#[test]
fn a_failed_bo_list_destroy_leaves_the_slot_usable() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let a = p.alloc(0, VA, 64 << 10, gtt());
    p.fill(0, &a, 64 << 10, pattern(21));
    let dmabuf = p.kfd.export_dmabuf(a.handle).unwrap();
    let mut e = engine(&sim);
    let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    let slot = e
        .add_staging(StagingBuffer::new(64 << 10).unwrap())
        .unwrap();
    // The second BO_LIST call of the next submission is its DESTROY.
    sim.inject(FaultSpec::from_str("AMDGPU_BO_LIST:2=EIO").unwrap());
    let err = e.submit_read(&bo, 0, slot, 64 << 10).unwrap_err();
    assert_eq!(err.op(), "AMDGPU_BO_LIST DESTROY");
    assert_eq!(err.errno(), libc::EIO);
    // No fence was handed out, so the engine finished the copy itself.
    assert!(e.is_idle(slot).unwrap());
    let mut out = vec![0u8; 64 << 10];
    e.copy_bo_to_host(&bo, 0, &mut out, slot).unwrap();
    assert_eq!(out, p.read(0, &a, 64 << 10));
}

#[test]
fn slots_spread_over_the_ready_rings() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let size = 4 << 20;
    let a = p.alloc(0, VA, size as u64, vram());
    p.fill(0, &a, size, pattern(41));
    let dmabuf = p.kfd.export_dmabuf(a.handle).unwrap();
    let render_of = || {
        let pid = sim.spawn_process().unwrap();
        RenderNode::open(sim.driver(pid), RenderMinor(sim.gpus()[0].render_minor)).unwrap()
    };
    // The simulated GPU has five rings (2 PCIe + 3 XGMI SDMA engines).
    let config = CopyEngineConfig {
        spread: 2,
        ..Default::default()
    };
    let mut e = CopyEngine::new(render_of(), config).unwrap();
    assert_eq!(e.rings(), &[0, 1]);
    let bo = e.import_dmabuf(dmabuf.as_fd()).unwrap();
    let slots: Vec<_> = (0..4)
        .map(|_| e.add_staging(StagingBuffer::new(1 << 20).unwrap()).unwrap())
        .collect();
    // Four copies in flight at once, alternating rings; each lands whole.
    let fences: Vec<Fence> = slots
        .iter()
        .enumerate()
        .map(|(i, s)| e.submit_read(&bo, (i as u64) << 20, *s, 1 << 20).unwrap())
        .collect();
    let rings: Vec<u32> = fences.iter().map(|f| f.submission().ring).collect();
    assert_eq!(rings, [0, 1, 0, 1]);
    let mut out = Vec::new();
    for (f, s) in fences.iter().zip(&slots) {
        assert!(e.wait(f, None).unwrap());
        out.extend_from_slice(e.staging(*s).unwrap());
    }
    assert_eq!(out, p.read(0, &a, size));
    // And back, through both rings.
    let new: Vec<u8> = (0..size).map(pattern(42)).collect();
    for (i, s) in slots.iter().enumerate() {
        e.staging_mut(*s)
            .unwrap()
            .copy_from_slice(&new[i << 20..(i + 1) << 20]);
    }
    let fences: Vec<Fence> = slots
        .iter()
        .enumerate()
        .map(|(i, s)| e.submit_write(&bo, (i as u64) << 20, *s, 1 << 20).unwrap())
        .collect();
    for f in &fences {
        assert!(e.wait(f, None).unwrap());
    }
    assert_eq!(p.read(0, &a, size), new);
    e.release_bo(bo).unwrap();
    e.close().unwrap();

    // Only ready rings count, from `ring` up: ring 4 is the last.
    let config = CopyEngineConfig {
        ring: 4,
        spread: 3,
        ..Default::default()
    };
    let e = CopyEngine::new(render_of(), config).unwrap();
    assert_eq!(e.rings(), &[4]);
    e.close().unwrap();
    // The default stays on one ring.
    let e = CopyEngine::new(render_of(), CopyEngineConfig::default()).unwrap();
    assert_eq!(e.rings(), &[0]);
    e.close().unwrap();
}
