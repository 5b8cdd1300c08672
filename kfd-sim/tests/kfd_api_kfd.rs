//! `Kfd` against the simulated kernel: every KFD operation, the CRIU ops in
//! the process roles CRIU uses (dumper = ptrace parent, restored task,
//! main restorer), the errno of each documented failure, and that no fd
//! leaks on success or error paths.

mod kfd_api_support;

use std::os::fd::{AsFd, AsRawFd};
use std::str::FromStr;

use kfd::{
    AllocFlags, AllocRequest, Error, GpuId, Kfd, ProcessInfo, QueueRequest, RenderMinor,
    RenderNode, Version,
};
use kfd_api_support::{gtt, pattern, sim, vram, GpuProcess};
use kfd_sim::{FaultSpec, ProcessConfig, Sim};
use kfd_sys::{
    kfd_criu_device_bucket, KFD_INVALID_FD, KFD_IOC_EVENT_SIGNAL, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
    KFD_IOC_QUEUE_TYPE_SDMA,
};

const VA: u64 = 0x7f00_0000_0000;

#[test]
fn version_is_reported() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let v = p.kfd.version().unwrap();
    assert_eq!(
        v,
        Version {
            major: 1,
            minor: 18
        }
    );
    assert!(v.supports_criu());
}

#[test]
fn memory_lifecycle_and_errors() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let gpu = p.gpus[0];
    let before = p.kfd.available_memory(gpu).unwrap();
    let alloc = p.alloc(0, VA, 4 << 20, vram());
    assert_eq!(alloc.handle.gpu_id(), gpu);
    assert!(p.kfd.available_memory(gpu).unwrap() < before);
    // Still mapped: the kernel refuses to free it.
    assert_eq!(
        p.kfd.free_memory(alloc.handle).unwrap_err().errno(),
        libc::EBUSY
    );
    p.kfd.unmap_memory(alloc.handle, &[gpu]).unwrap();
    p.kfd.free_memory(alloc.handle).unwrap();
    assert_eq!(p.kfd.available_memory(gpu).unwrap(), before);
    let err = p.kfd.free_memory(alloc.handle).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(
        err.to_string(),
        "FREE_MEMORY_OF_GPU failed: Invalid argument (EINVAL)"
    );

    // Size 0, unknown gpu, empty map list.
    let req = AllocRequest {
        gpu_id: gpu,
        va_addr: VA,
        size: 0,
        flags: vram(),
    };
    assert_eq!(p.kfd.alloc_memory(&req).unwrap_err().errno(), libc::EINVAL);
    let bad_gpu = AllocRequest {
        gpu_id: GpuId(0xdead),
        size: 4096,
        ..req
    };
    assert_eq!(
        p.kfd.alloc_memory(&bad_gpu).unwrap_err().errno(),
        libc::EINVAL
    );
    let alloc = p.alloc(0, VA, 4096, gtt());
    assert_eq!(
        p.kfd.map_memory(alloc.handle, &[]).unwrap_err().errno(),
        libc::EINVAL
    );
    // USERPTR needs the unsafe entry point.
    let userptr = AllocRequest {
        flags: AllocFlags::USERPTR,
        size: 4096,
        ..req
    };
    assert!(matches!(
        p.kfd.alloc_memory(&userptr),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(
        p.kfd.available_memory(GpuId(0xdead)).unwrap_err().errno(),
        libc::EINVAL
    );
}

#[test]
fn alloc_without_vm_is_enodev_and_acquire_vm_rules() {
    let sim = sim(1);
    let pid = sim.spawn_process().unwrap();
    let driver = sim.driver(pid);
    let kfd = Kfd::open(driver.clone()).unwrap();
    let info = &sim.gpus()[0];
    let gpu = GpuId(info.gpu_id);
    let req = AllocRequest {
        gpu_id: gpu,
        va_addr: VA,
        size: 4096,
        flags: gtt(),
    };
    assert_eq!(kfd.alloc_memory(&req).unwrap_err().errno(), libc::ENODEV);
    // Not a render node.
    assert_eq!(
        kfd.acquire_vm(gpu, kfd.as_fd()).unwrap_err().errno(),
        libc::EINVAL
    );
    let render = RenderNode::open(driver.clone(), RenderMinor(info.render_minor)).unwrap();
    kfd.acquire_vm(gpu, render.as_fd()).unwrap();
    // The same file again is fine, another one is EBUSY.
    kfd.acquire_vm(gpu, render.as_fd()).unwrap();
    let other = RenderNode::open(driver, RenderMinor(info.render_minor)).unwrap();
    assert_eq!(
        kfd.acquire_vm(gpu, other.as_fd()).unwrap_err().errno(),
        libc::EBUSY
    );
    kfd.alloc_memory(&req).unwrap();
}

#[test]
fn userptr_allocation_wraps_host_memory() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let mut host = kfd::StagingBuffer::new(8192).unwrap();
    host.as_mut_slice()[..4].copy_from_slice(b"host");
    // SAFETY: `host` outlives the BO (freed below before `host` drops).
    let alloc = unsafe {
        p.kfd.alloc_userptr(
            p.gpus[0],
            VA,
            host.as_ptr() as u64,
            host.len() as u64,
            AllocFlags::WRITABLE,
        )
    }
    .unwrap();
    p.kfd.free_memory(alloc.handle).unwrap();
}

#[test]
fn queues_and_events() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    let gpu = p.gpus[0];
    let ring = p.alloc(0, VA, 64 << 10, gtt());
    let _ = ring;
    let req = QueueRequest {
        gpu_id: gpu,
        queue_type: KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
        ring_base_address: VA,
        ring_size: 64 << 10,
        write_pointer_address: VA + (60 << 10),
        read_pointer_address: VA + (62 << 10),
        queue_percentage: 100,
        queue_priority: 7,
        ctl_stack_size: 4096,
        ..Default::default()
    };
    let q1 = p.kfd.create_queue(&req).unwrap();
    let q2 = p
        .kfd
        .create_queue(&QueueRequest {
            queue_type: KFD_IOC_QUEUE_TYPE_SDMA,
            ..req
        })
        .unwrap();
    assert_ne!(q1.queue_id, q2.queue_id);
    assert_ne!(q1.doorbell_offset, 0);
    assert_eq!(sim.accounting().queues, 2);
    let bad = QueueRequest {
        queue_priority: 16,
        ..req
    };
    assert_eq!(p.kfd.create_queue(&bad).unwrap_err().errno(), libc::EINVAL);
    p.kfd.destroy_queue(q1.queue_id).unwrap();
    assert_eq!(
        p.kfd.destroy_queue(q1.queue_id).unwrap_err().errno(),
        libc::EINVAL
    );

    let ev = p.kfd.create_event(KFD_IOC_EVENT_SIGNAL, true, 0).unwrap();
    let ev2 = p.kfd.create_event(KFD_IOC_EVENT_SIGNAL, false, 0).unwrap();
    assert_ne!(ev.event_id, ev2.event_id);
    p.kfd.set_event(ev.event_id).unwrap();
    p.kfd.reset_event(ev.event_id).unwrap();
    assert_eq!(sim.accounting().events, 2);
    p.kfd.destroy_event(ev.event_id).unwrap();
    assert_eq!(
        p.kfd.destroy_event(ev.event_id).unwrap_err().op(),
        "DESTROY_EVENT"
    );
    // The event page (8 bytes per signal slot) is mapped through /dev/kfd
    // whole; a partial mapping is refused.
    let len = kfd_sys::KFD_SIGNAL_EVENT_LIMIT as usize * 8;
    let page = p.kfd.mmap(ev2.page_offset, len, libc::PROT_READ).unwrap();
    assert_eq!(page.len(), len);
    let err = p
        .kfd
        .mmap(ev2.page_offset, 4096, libc::PROT_READ)
        .unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(err.op(), "mmap /dev/kfd");
}

#[test]
fn apertures_report_every_gpu_with_actual_ids() {
    let sim = sim(2);
    let p = GpuProcess::start(&sim);
    let apertures = p.kfd.process_apertures().unwrap();
    assert_eq!(apertures.len(), 2);
    let mut ids: Vec<u32> = apertures.iter().map(|a| a.gpu_id).collect();
    ids.sort_unstable();
    let mut expect: Vec<u32> = p.gpus.iter().map(|g| g.0).collect();
    expect.sort_unstable();
    assert_eq!(ids, expect);
    assert!(apertures.iter().all(|a| a.gpuvm_limit > a.gpuvm_base));
}

#[test]
fn dmabuf_export_info_and_import() {
    let sim = sim(2);
    let p = GpuProcess::start(&sim);
    let alloc = p.alloc(0, VA, 2 << 20, vram());
    let dmabuf = p.kfd.export_dmabuf(alloc.handle).unwrap();
    let info = p.kfd.dmabuf_info(dmabuf.as_fd()).unwrap();
    assert_eq!(info.size, 2 << 20);
    assert_eq!(info.gpu_id, p.gpus[0]);
    assert!(info.flags.contains(AllocFlags::VRAM));
    assert_eq!(kfd::dmabuf_size(dmabuf.as_fd()).unwrap(), 2 << 20);
    let imported = p
        .kfd
        .import_dmabuf(p.gpus[1], VA + (16 << 20), dmabuf.as_fd())
        .unwrap();
    assert_eq!(imported.gpu_id(), p.gpus[1]);
    // A file that is not a dma-buf.
    let file = tempfile::tempfile().unwrap();
    let err = p.kfd.dmabuf_info(file.as_fd()).unwrap_err();
    assert!(matches!(err.errno(), libc::EINVAL | libc::EBADF), "{err}");
    assert_eq!(err.op(), "GET_DMABUF_INFO");
}

/// A workload with VRAM, GTT and doorbell BOs, a queue and an event.
fn workload(p: &GpuProcess) {
    let a = p.alloc(0, VA, 1 << 20, vram());
    p.fill(0, &a, 1 << 20, pattern(1));
    let b = p.alloc(0, VA + (4 << 20), 256 << 10, gtt());
    p.fill(0, &b, 256 << 10, pattern(2));
    let ro = p.alloc(
        0,
        VA + (8 << 20),
        64 << 10,
        AllocFlags::GTT | AllocFlags::EXECUTABLE,
    );
    let _ = ro;
    p.kfd
        .create_queue(&QueueRequest {
            gpu_id: p.gpus[0],
            queue_type: KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
            ring_base_address: VA + (4 << 20),
            ring_size: 4096,
            queue_percentage: 100,
            ctl_stack_size: 4096,
            ..Default::default()
        })
        .unwrap();
    p.kfd.create_event(KFD_IOC_EVENT_SIGNAL, true, 0).unwrap();
}

/// A dumper: a process that ptraces the target and looks at its kfd fd.
fn dumper<'a>(
    sim: &Sim,
    target: &'a GpuProcess,
) -> Kfd<kfd_sim::SimDriver, std::os::fd::BorrowedFd<'a>> {
    let criu = sim.spawn_process().unwrap();
    sim.ptrace_attach(criu, target.pid).unwrap();
    Kfd::from_fd(sim.driver(criu), target.kfd.as_fd())
}

#[test]
fn checkpoint_wraps_dmabufs_and_unpause_rules() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    workload(&p);
    let d = dumper(&sim, &p);
    // CHECKPOINT before PROCESS_INFO: not paused.
    let err = d.checkpoint(&ProcessInfo::default()).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    let fds_before = sim.accounting().dmabuf_fds;

    let info = d.process_info().unwrap();
    assert_eq!(info.pid, p.pid.0);
    assert_eq!(info.num_devices, 1);
    assert_eq!(info.num_bos, 3);
    assert_eq!(info.num_objects, 2);
    let cp = d.checkpoint(&info).unwrap();
    assert_eq!(cp.devices.len(), 1);
    assert_eq!(cp.devices[0].user_gpu_id, p.gpus[0].0);
    assert_eq!(cp.devices[0].actual_gpu_id, p.gpus[0].0);
    assert_eq!(cp.priv_data.len() as u64, info.priv_data_size);
    assert_eq!(cp.bos.len(), 3);
    for bo in &cp.bos {
        assert!(bo.flags().has_content());
        let fd = bo
            .dmabuf
            .as_ref()
            .expect("VRAM/GTT BOs come with a dma-buf");
        assert_eq!(bo.bucket.dmabuf_fd as i32, fd.as_raw_fd());
        assert_eq!(kfd::dmabuf_size(fd.as_fd()).unwrap(), bo.bucket.size);
        // Read-write iff WRITABLE.
        // SAFETY: F_GETFL has no pointer argument.
        let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) } & libc::O_ACCMODE;
        let writable = bo.flags().contains(AllocFlags::WRITABLE);
        assert_eq!(fl == libc::O_RDWR, writable, "{:?}", bo.bucket);
    }
    assert_eq!(sim.accounting().dmabuf_fds, fds_before + 3);
    // Stale counts are refused.
    let stale = ProcessInfo {
        num_bos: info.num_bos + 1,
        ..info
    };
    assert_eq!(d.checkpoint(&stale).unwrap_err().errno(), libc::EINVAL);
    drop(cp);
    assert_eq!(sim.accounting().dmabuf_fds, fds_before);

    d.unpause().unwrap();
    let err = d.unpause().unwrap_err();
    assert_eq!(
        err.to_string(),
        "CRIU_OP UNPAUSE failed: Invalid argument (EINVAL)"
    );
}

#[test]
fn criu_permission_rules() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    // A process that is not the ptrace parent: EBADF.
    let stranger = sim.spawn_process().unwrap();
    let k = Kfd::from_fd(sim.driver(stranger), p.kfd.as_fd());
    assert_eq!(k.process_info().unwrap_err().errno(), libc::EBADF);
    // The ptrace parent may use CRIU_OP but not GET_VERSION.
    let d = dumper(&sim, &p);
    assert_eq!(d.version().unwrap_err().errno(), libc::EBADF);
    // Without CAP_CHECKPOINT_RESTORE: EACCES.
    let uncapable = sim
        .spawn_process_with(ProcessConfig {
            checkpoint_restore_capable: false,
            ..Default::default()
        })
        .unwrap();
    let q = GpuProcess::start(&sim);
    sim.ptrace_attach(uncapable, q.pid).unwrap();
    let k = Kfd::from_fd(sim.driver(uncapable), q.kfd.as_fd());
    let err = k.process_info().unwrap_err();
    assert_eq!(err.errno(), libc::EACCES);
    assert!(err.to_string().ends_with("(EACCES)"), "{err}");
}

#[test]
fn process_info_without_gpus_is_enodev() {
    let sim = sim(1);
    let target = sim
        .spawn_process_with(ProcessConfig {
            visible_gpus: Some(Vec::new()),
            ..Default::default()
        })
        .unwrap();
    let kfd = Kfd::open(sim.driver(target)).unwrap();
    let criu = sim.spawn_process().unwrap();
    sim.ptrace_attach(criu, target).unwrap();
    let d = Kfd::from_fd(sim.driver(criu), kfd.as_fd());
    assert_eq!(d.process_info().unwrap_err().errno(), libc::ENODEV);
}

#[test]
fn interrupted_criu_op_is_retried() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    workload(&p);
    let d = dumper(&sim, &p);
    sim.inject(FaultSpec::from_str("CRIU_OP:PROCESS_INFO=EINTR").unwrap());
    let info = d.process_info().unwrap();
    assert_eq!(info.num_bos, 3);
    d.unpause().unwrap();
}

#[test]
fn failed_checkpoint_leaks_no_fd() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    workload(&p);
    let d = dumper(&sim, &p);
    let info = d.process_info().unwrap();
    let before = sim.accounting();
    sim.inject(FaultSpec::from_str("DMABUF_EXPORT:2=ENOMEM").unwrap());
    let err = d.checkpoint(&info).unwrap_err();
    assert_eq!(err.op(), "CRIU_OP CHECKPOINT");
    assert_eq!(err.errno(), libc::ENOMEM);
    assert_eq!(sim.accounting().dmabuf_fds, before.dmabuf_fds);
    sim.inject(FaultSpec::from_str("CRIU_OP:CHECKPOINT=EIO").unwrap());
    assert_eq!(
        d.checkpoint(&info).unwrap_err().to_string(),
        "CRIU_OP CHECKPOINT failed: Input/output error (EIO)"
    );
    assert_eq!(sim.accounting().dmabuf_fds, before.dmabuf_fds);
    d.unpause().unwrap();
}

/// Dump `p`, then restore into a fresh process on `sim`; returns the
/// restored process's pid, its kfd and render nodes, and the restored BOs
/// with the checkpointed ones.
struct Restored {
    pid: kfd_sim::Pid,
    kfd: Kfd<kfd_sim::SimDriver>,
    renders: Vec<RenderNode<kfd_sim::SimDriver>>,
    bos: Vec<kfd::RestoredBo>,
}

fn dump_and_restore(sim: &Sim, p: &GpuProcess) -> (kfd::Checkpoint, Restored) {
    let d = dumper(sim, p);
    let info = d.process_info().unwrap();
    let cp = d.checkpoint(&info).unwrap();
    d.unpause().unwrap();

    let pid = sim.spawn_process().unwrap();
    let driver = sim.driver(pid);
    let kfd = Kfd::open(driver.clone()).unwrap();
    let mut renders = Vec::new();
    let mut devices = Vec::new();
    for (dev, gpu) in cp.devices.iter().zip(sim.gpus()) {
        let render = RenderNode::open(driver.clone(), RenderMinor(gpu.render_minor)).unwrap();
        devices.push(kfd_criu_device_bucket {
            user_gpu_id: dev.user_gpu_id,
            actual_gpu_id: gpu.gpu_id,
            drm_fd: render.as_fd().as_raw_fd() as u32,
            pad: 0,
        });
        renders.push(render);
    }
    let buckets: Vec<_> = cp.bos.iter().map(|b| b.bucket).collect();
    let bos = kfd
        .restore(&devices, &buckets, &cp.priv_data, info.num_objects)
        .unwrap();
    (
        cp,
        Restored {
            pid,
            kfd,
            renders,
            bos,
        },
    )
}

#[test]
fn restore_and_resume() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    workload(&p);
    let (cp, r) = dump_and_restore(&sim, &p);
    assert_eq!(r.bos.len(), cp.bos.len());
    for (old, new) in cp.bos.iter().zip(&r.bos) {
        assert_eq!(new.bucket.addr, old.bucket.addr);
        assert_eq!(new.bucket.size, old.bucket.size);
        let fd = new.dmabuf.as_ref().expect("restored VRAM/GTT BO dma-buf");
        assert_eq!(new.bucket.dmabuf_fd as i32, fd.as_raw_fd());
        assert_eq!(kfd::dmabuf_size(fd.as_fd()).unwrap(), old.bucket.size);
        assert_ne!(new.bucket.restored_offset, 0);
    }
    // RESTORE is single-shot.
    let devices: Vec<_> = cp
        .devices
        .iter()
        .zip(&r.renders)
        .map(|(d, render)| kfd_criu_device_bucket {
            drm_fd: render.as_fd().as_raw_fd() as u32,
            ..*d
        })
        .collect();
    let buckets: Vec<_> = cp.bos.iter().map(|b| b.bucket).collect();
    let before = sim.accounting().dmabuf_fds;
    let err = r
        .kfd
        .restore(&devices, &buckets, &cp.priv_data, 2)
        .unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(sim.accounting().dmabuf_fds, before);

    // RESUME from CRIU's own process.
    let criu = sim.spawn_process().unwrap();
    let main = Kfd::open(sim.driver(criu)).unwrap();
    main.resume(r.pid.0).unwrap();
    let err = main.resume(r.pid.0).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    let err = main.resume(999_999).unwrap_err();
    assert_eq!(err.errno(), libc::ESRCH);
    assert_eq!(
        err.to_string(),
        "CRIU_OP RESUME failed: No such process (ESRCH)"
    );
}

#[test]
fn restore_argument_errors() {
    let sim = sim(1);
    let pid = sim.spawn_process().unwrap();
    let kfd = Kfd::open(sim.driver(pid)).unwrap();
    // No devices: the kernel's precondition check.
    let err = kfd.restore(&[], &[], &[1, 2, 3], 0).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(err.op(), "CRIU_OP RESTORE");
    // Wrong private data version.
    let dev = kfd_criu_device_bucket {
        user_gpu_id: sim.gpus()[0].gpu_id,
        actual_gpu_id: sim.gpus()[0].gpu_id,
        drm_fd: KFD_INVALID_FD,
        pad: 0,
    };
    let err = kfd.restore(&[dev], &[], &[9; 16], 0).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
}

#[test]
fn restore_failing_after_the_bo_stage_closes_the_installed_fds() {
    let sim = sim(1);
    let p = GpuProcess::start(&sim);
    workload(&p);
    let d = dumper(&sim, &p);
    let info = d.process_info().unwrap();
    let cp = d.checkpoint(&info).unwrap();
    d.unpause().unwrap();
    drop(d);

    let pid = sim.spawn_process().unwrap();
    let driver = sim.driver(pid);
    let kfd = Kfd::open(driver.clone()).unwrap();
    let gpu = &sim.gpus()[0];
    let render = RenderNode::open(driver, RenderMinor(gpu.render_minor)).unwrap();
    let devices = [kfd_criu_device_bucket {
        user_gpu_id: cp.devices[0].user_gpu_id,
        actual_gpu_id: gpu.gpu_id,
        drm_fd: render.as_fd().as_raw_fd() as u32,
        pad: 0,
    }];
    let buckets: Vec<_> = cp.bos.iter().map(|b| b.bucket).collect();
    // Trailing bytes: every object is re-created, the BOs' dma-bufs are
    // installed, then the exact-size check fails.
    let mut priv_data = cp.priv_data.clone();
    priv_data.extend_from_slice(&[0; 8]);
    drop(cp);
    let before = sim.accounting();
    let err = kfd
        .restore(&devices, &buckets, &priv_data, info.num_objects)
        .unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    let after = sim.accounting();
    // The BOs exist (no rollback) but no dma-buf fd is left open.
    assert_eq!(after.live_bos, before.live_bos + 3);
    assert_eq!(after.dmabuf_fds, before.dmabuf_fds);
}

#[test]
fn checkpoint_of_a_process_without_bos() {
    let sim = sim(2);
    let p = GpuProcess::start(&sim);
    let d = dumper(&sim, &p);
    let info = d.process_info().unwrap();
    assert_eq!(
        (info.num_devices, info.num_bos, info.num_objects),
        (2, 0, 0)
    );
    // The kernel wants a non-null BO array even for zero BOs.
    let cp = d.checkpoint(&info).unwrap();
    assert!(cp.bos.is_empty());
    assert_eq!(cp.devices.len(), 2);
    assert_eq!(cp.priv_data.len() as u64, info.priv_data_size);
    d.unpause().unwrap();
}
