//! Fault injection and resource accounting: the Nth call of an ioctl, a CRIU
//! op, an internal dma-buf export, an open or an mmap fails with the chosen
//! errno, once, and a failed operation leaks nothing.

mod kfd_support;

use std::os::fd::AsFd;

use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Errno, FaultKind, FaultSpec, Sim, SimConfig};
use kfd_support::*;
use kfd_sys::*;

fn sim(n: usize) -> Sim {
    Sim::synthetic(n, SimConfig::default()).unwrap()
}

fn inject(sim: &Sim, spec: &str) {
    sim.inject(spec.parse::<FaultSpec>().unwrap());
}

#[test]
fn a_criu_sub_operation_fails_once() {
    let sim = sim(1);
    let w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let criu = criu_for(&sim, w.pid());
    let kfd = w.kfd_fd().unwrap();
    inject(&sim, "CRIU_OP:CHECKPOINT=EIO");
    assert_eq!(sim.pending_faults()[0].kind(), FaultKind::CriuOp);
    let info = process_info(&criu, kfd).unwrap();
    let (r, _) = checkpoint_raw(&criu, kfd, &info);
    assert_eq!(r, Err(libc::EIO));
    assert!(sim.pending_faults().is_empty(), "a fault fires once");
    let (r, d) = checkpoint_raw(&criu, kfd, &info);
    r.unwrap();
    for b in d.bos.iter().filter(|b| b.dmabuf_fd != KFD_INVALID_FD) {
        close(b.dmabuf_fd as i32);
    }
    unpause(&criu, kfd).unwrap();
}

#[test]
fn the_nth_call_of_an_ioctl_fails() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    let g = p.gpu_ids[0];
    inject(&sim, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU:3=ENOSPC");
    let flags = KFD_IOC_ALLOC_MEM_FLAGS_GTT;
    p.alloc(g, 0x10_0000_0000, 4096, flags, 0).unwrap();
    p.alloc(g, 0x10_0010_0000, 4096, flags, 0).unwrap();
    assert_eq!(
        p.alloc(g, 0x10_0020_0000, 4096, flags, 0).map(|_| ()),
        Err(libc::ENOSPC)
    );
    p.alloc(g, 0x10_0030_0000, 4096, flags, 0).unwrap();
    // Numbers work as errno values; the plain name counts every CRIU op.
    inject(&sim, "CRIU_OP:2=16");
    process_info(&p.drv, p.kfd.as_fd()).unwrap();
    assert_eq!(unpause(&p.drv, p.kfd.as_fd()), Err(libc::EBUSY));
    unpause(&p.drv, p.kfd.as_fd()).unwrap();
}

#[test]
fn a_failed_export_inside_checkpoint_releases_every_fd() {
    let sim = sim(2);
    let w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let criu = criu_for(&sim, w.pid());
    let kfd = w.kfd_fd().unwrap();
    let before = sim.accounting();
    inject(&sim, "DMABUF_EXPORT:3=ENOMEM");
    let info = process_info(&criu, kfd).unwrap();
    let (r, _) = checkpoint_raw(&criu, kfd, &info);
    assert_eq!(r, Err(libc::ENOMEM));
    let after = sim.accounting();
    assert_eq!(
        after.dmabuf_fds, before.dmabuf_fds,
        "the two fds made before the failure are gone"
    );
    assert_eq!(after.live_bos, before.live_bos);
    unpause(&criu, kfd).unwrap();
}

#[test]
fn accounting_sees_a_leaked_dmabuf_fd() {
    let sim = sim(1);
    let w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let criu = criu_for(&sim, w.pid());
    let kfd = w.kfd_fd().unwrap();
    let info = process_info(&criu, kfd).unwrap();
    let (r, d) = checkpoint_raw(&criu, kfd, &info);
    r.unwrap();
    let exported: Vec<i32> = d
        .bos
        .iter()
        .filter(|b| b.dmabuf_fd != KFD_INVALID_FD)
        .map(|b| b.dmabuf_fd as i32)
        .collect();
    assert_eq!(sim.accounting().dmabuf_fds, exported.len());
    for fd in exported {
        close(fd);
    }
    assert_eq!(sim.accounting().dmabuf_fds, 0);
    unpause(&criu, kfd).unwrap();
}

#[test]
fn open_and_mmap_faults() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    inject(&sim, "OPEN");
    let err = ::kfd::Driver::open(&p.drv, "/dev/kfd".as_ref(), libc::O_RDWR).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    open(&p.drv, "/dev/kfd");
    let bo = p
        .alloc(
            p.gpu_ids[0],
            0x10_0000_0000,
            4096,
            KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
            0,
        )
        .unwrap();
    inject(&sim, "mmap");
    let map = || {
        // SAFETY: no MAP_FIXED; a successful mapping is released by the caller.
        unsafe {
            ::kfd::Driver::mmap(
                &p.drv,
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                p.renders[0].as_fd(),
                bo.mmap_offset,
            )
        }
    };
    assert_eq!(map().unwrap_err().raw_os_error(), Some(libc::ENOMEM));
    let m = map().unwrap();
    // SAFETY: unmapping the mapping made above.
    unsafe { ::kfd::Driver::munmap(&p.drv, m, 4096) }.unwrap();
    assert_eq!(sim.accounting().cpu_mappings, 0);
}

#[test]
fn faults_can_be_listed_and_cleared() {
    let sim = sim(1);
    sim.inject(FaultSpec::new("amdgpu_cs", 2, Errno(libc::ENOMEM)));
    inject(&sim, "CRIU_OP:RESUME");
    let pending = sim.pending_faults();
    assert_eq!(pending.len(), 2);
    assert_eq!(pending[0].op, "AMDGPU_CS");
    assert_eq!(pending[0].to_string(), "AMDGPU_CS:2=ENOMEM");
    sim.clear_faults();
    assert!(sim.pending_faults().is_empty());
}

#[test]
fn a_failed_eviction_is_rolled_back_and_unpauses() {
    let sim = sim(2);
    let mut w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let criu = criu_for(&sim, w.pid());
    // The second device's eviction fails: the first is rolled back, nothing stays paused.
    inject(&sim, "EVICT:2=ENOMEM");
    assert_eq!(
        process_info(&criu, w.kfd_fd().unwrap()).map(|_| ()),
        Err(libc::ENOMEM)
    );
    assert_eq!(
        unpause(&criu, w.kfd_fd().unwrap()),
        Err(libc::EINVAL),
        "not paused"
    );
    w.step().unwrap();
    // EIO (a hung GPU) is tolerated.
    inject(&sim, "EVICT=EIO");
    process_info(&criu, w.kfd_fd().unwrap()).unwrap();
    assert!(w.step().is_err());
    // A failure while already paused: the error path's restore undoes the
    // earlier level too (spec §1.3, inferred), and the pause flag is cleared.
    inject(&sim, "EVICT=ENOMEM");
    assert_eq!(
        process_info(&criu, w.kfd_fd().unwrap()).map(|_| ()),
        Err(libc::ENOMEM)
    );
    w.step().unwrap();
    assert_eq!(unpause(&criu, w.kfd_fd().unwrap()), Err(libc::EINVAL));
}

#[test]
fn a_failed_queue_restore_keeps_the_process_paused() {
    let sim = sim(1);
    let mut w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let criu = criu_for(&sim, w.pid());
    process_info(&criu, w.kfd_fd().unwrap()).unwrap();
    inject(&sim, "RESTORE_QUEUES=EBUSY");
    assert_eq!(unpause(&criu, w.kfd_fd().unwrap()), Err(libc::EBUSY));
    assert!(w.step().is_err(), "still evicted");
    unpause(&criu, w.kfd_fd().unwrap()).unwrap();
    w.step().unwrap();
}
