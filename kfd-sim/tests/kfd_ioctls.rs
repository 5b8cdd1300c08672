//! The KFD ioctls a workload uses, with the errors of spec §2.1 and §3:
//! ACQUIRE_VM, ALLOC/FREE/MAP/UNMAP, AVAILABLE_MEMORY, dma-buf info, import
//! and export, queues, events and SVM.

mod kfd_support;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use kfd_sim::workload::Workload;
use kfd_sim::{ProcessConfig, Sim, SimConfig};
use kfd_support::*;
use kfd_sys::*;

const VRAM_W: u32 = KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
const GTT_W: u32 = KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;

fn sim(n: usize) -> Sim {
    Sim::synthetic(n, SimConfig::default()).unwrap()
}

#[test]
fn acquire_vm_rules() {
    let sim = sim(2);
    let pid = sim.spawn_process().unwrap();
    let drv = sim.driver(pid);
    let kfd = open(&drv, "/dev/kfd");
    let ids: Vec<u32> = sim.gpus().iter().map(|g| g.gpu_id).collect();
    let r0 = open(&drv, sim.render_path(ids[0]).unwrap().to_str().unwrap());
    let r0b = open(&drv, sim.render_path(ids[0]).unwrap().to_str().unwrap());
    let r1 = open(&drv, sim.render_path(ids[1]).unwrap().to_str().unwrap());
    let acquire = |fd: i32, gpu: u32| {
        let mut a = kfd_ioctl_acquire_vm_args {
            drm_fd: fd as u32,
            gpu_id: gpu,
        };
        ioctl(&drv, kfd.as_fd(), AMDKFD_IOC_ACQUIRE_VM, &mut a)
    };
    assert_eq!(acquire(9999, ids[0]), Err(libc::EINVAL), "drm_fd not open");
    assert_eq!(
        acquire(r0.as_raw_fd(), 0x4242),
        Err(libc::EINVAL),
        "unknown gpu"
    );
    assert_eq!(
        acquire(kfd.as_raw_fd(), ids[0]),
        Err(libc::EINVAL),
        "not a DRM file"
    );
    assert_eq!(
        acquire(r1.as_raw_fd(), ids[0]),
        Err(libc::EINVAL),
        "render node of another GPU"
    );
    acquire(r0.as_raw_fd(), ids[0]).unwrap();
    let dup = r0.try_clone().unwrap();
    assert_eq!(
        acquire(dup.as_raw_fd(), ids[0]),
        Ok(0),
        "same file again: 0"
    );
    assert_eq!(
        acquire(r0b.as_raw_fd(), ids[0]),
        Err(libc::EBUSY),
        "another file: EBUSY"
    );
    // Another process cannot take a VM that belongs to this one.
    let other = sim.spawn_process().unwrap();
    let odrv = sim.driver(other);
    let okfd = open(&odrv, "/dev/kfd");
    let mut a = kfd_ioctl_acquire_vm_args {
        drm_fd: r0.as_raw_fd() as u32,
        gpu_id: ids[0],
    };
    assert_eq!(
        ioctl(&odrv, okfd.as_fd(), AMDKFD_IOC_ACQUIRE_VM, &mut a),
        Err(libc::EINVAL)
    );
}

#[test]
fn alloc_errors() {
    let sim = Sim::new(
        {
            let mut sys = kfd_sim::synthetic_system(1);
            // A small-BAR GPU: VRAM not CPU visible.
            let bank = &mut sys.nodes[1].mem_banks.as_mut().unwrap()[0];
            bank.properties.set("heap_type", 2);
            sys
        },
        SimConfig::default(),
    )
    .unwrap();
    let pid = sim.spawn_process().unwrap();
    let drv = sim.driver(pid);
    let kfd = open(&drv, "/dev/kfd");
    let g = sim.gpus()[0].gpu_id;
    let alloc = |va: u64, size: u64, flags: u32, off: u64| {
        let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: va,
            size,
            handle: 0,
            mmap_offset: off,
            gpu_id: g,
            flags,
        };
        ioctl(&drv, kfd.as_fd(), AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a).map(|_| a)
    };
    assert_eq!(
        alloc(0x10_0000_0000, 4096, VRAM_W, 0).map(|_| ()),
        Err(libc::ENODEV),
        "no VM acquired"
    );
    let p = Proc::in_pid(&sim, pid);
    assert_eq!(
        p.alloc(g, 0x10_0000_0000, 0, VRAM_W, 0).map(|_| ()),
        Err(libc::EINVAL),
        "size 0"
    );
    assert_eq!(
        p.alloc(0x4242, 0x10_0000_0000, 4096, VRAM_W, 0).map(|_| ()),
        Err(libc::EINVAL),
        "unknown gpu"
    );
    assert_eq!(
        p.alloc(0, 0x10_0000_0000, 4096, VRAM_W, 0).map(|_| ()),
        Err(libc::EINVAL),
        "gpu id 0"
    );
    assert_eq!(
        p.alloc(g, 0x10_0000_0000, 4096, KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE, 0)
            .map(|_| ()),
        Err(libc::EINVAL),
        "no memory type"
    );
    assert_eq!(
        p.alloc(
            g,
            0x10_0000_0000,
            4096,
            VRAM_W | KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC,
            0
        )
        .map(|_| ()),
        Err(libc::EINVAL),
        "public VRAM on a small-BAR GPU"
    );
    assert_eq!(
        p.alloc(g, 0x10_0000_0000, 4096, KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL, 0)
            .map(|_| ()),
        Err(libc::EINVAL),
        "doorbell size must be the slice"
    );
    assert_eq!(
        p.alloc(
            g,
            0x10_0000_0000,
            8192,
            KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP,
            0
        )
        .map(|_| ()),
        Err(libc::EINVAL),
        "mmio size must be one page"
    );
    assert_eq!(
        p.alloc(g, 0x10_0000_0000, 4096, KFD_IOC_ALLOC_MEM_FLAGS_USERPTR, 0)
            .map(|_| ()),
        Err(libc::EINVAL),
        "userptr without an address"
    );
    assert_eq!(
        p.alloc(g, 0x10_0000_0000, 1 << 40, VRAM_W, 0).map(|_| ()),
        Err(libc::ENOMEM),
        "more VRAM than available"
    );
    // Handles are gpu_id << 32 | lowest free IDR slot, from 0.
    let a = p.alloc(g, 0x10_0000_0000, 4096, VRAM_W, 0).unwrap();
    let b = p.alloc(g, 0x10_0010_0000, 4096, GTT_W, 0).unwrap();
    assert_eq!(
        (a.handle, b.handle),
        ((u64::from(g) << 32), (u64::from(g) << 32) | 1)
    );
    assert!(a.mmap_offset >= 0x1_0000_0000 && a.mmap_offset.is_multiple_of(4096));
    let m = p
        .alloc(
            g,
            0x10_0020_0000,
            4096,
            KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP,
            0,
        )
        .unwrap();
    assert_eq!(m.mmap_offset, KFD_MMAP_TYPE_MMIO | KFD_MMAP_GPU_ID(g));
    p.free(a.handle).unwrap();
    let c = p.alloc(g, 0x10_0030_0000, 4096, GTT_W, 0).unwrap();
    assert_eq!(c.handle, a.handle, "slot 0 is reused");
    // AQL queue memory: the kernel allocates half.
    let aql = p
        .alloc(
            g,
            0x10_0040_0000,
            64 * KIB,
            GTT_W | KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM,
            0,
        )
        .unwrap();
    let desc = Workload::attach(&sim, pid).describe().unwrap();
    assert_eq!(
        desc.bos
            .iter()
            .find(|x| x.handle == aql.handle)
            .unwrap()
            .size,
        32 * KIB
    );
}

#[test]
fn alloc_overlapping_an_svm_range_is_eaddrinuse() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    let g = p.gpu_ids[0];
    svm_set(
        &p,
        0x40_0000_0000,
        64 * KIB,
        &[(KFD_IOCTL_SVM_ATTR_ACCESS, g)],
    )
    .unwrap();
    assert_eq!(
        p.alloc(g, 0x40_0000_8000, 4096, VRAM_W, 0).map(|_| ()),
        Err(libc::EADDRINUSE)
    );
    p.alloc(g, 0x40_0001_0000, 4096, VRAM_W, 0).unwrap();
    // And an SVM range over a BO is refused too.
    assert_eq!(
        svm_set(&p, 0x40_0001_0000, 4096, &[]),
        Err(libc::EADDRINUSE)
    );
}

#[test]
fn free_and_map_errors() {
    let sim = sim(2);
    let p = Proc::new(&sim);
    let (g0, g1) = (p.gpu_ids[0], p.gpu_ids[1]);
    let a = p.alloc(g0, 0x10_0000_0000, 64 * KIB, VRAM_W, 0).unwrap();
    assert_eq!(p.free(a.handle | 0x77), Err(libc::EINVAL), "unknown slot");
    assert_eq!(p.free(0x4242u64 << 32), Err(libc::EINVAL), "unknown gpu");
    assert_eq!(p.map(a.handle, &[], 0).0, Err(libc::EINVAL), "n_devices 0");
    assert_eq!(
        p.map(a.handle, &[g0], 2).0,
        Err(libc::EINVAL),
        "n_success > n_devices"
    );
    assert_eq!(
        p.map(a.handle | 0x77, &[g0], 0).0,
        Err(libc::ENOMEM),
        "unknown slot maps to ENOMEM"
    );
    assert_eq!(
        p.map(0x4242u64 << 32, &[g0], 0).0,
        Err(libc::EINVAL),
        "unknown handle gpu"
    );
    assert_eq!(p.map(a.handle, &[g0, g1], 0), (Ok(0), 2));
    assert_eq!(
        p.map(a.handle, &[g0], 0),
        (Ok(0), 1),
        "mapping again is harmless"
    );
    assert_eq!(p.free(a.handle), Err(libc::EBUSY), "still mapped");
    // An overlapping allocation cannot be mapped on the same VM.
    let b = p.alloc(g0, 0x10_0000_8000, 4096, GTT_W, 0).unwrap();
    assert_eq!(p.map(b.handle, &[g0], 0).0, Err(libc::EINVAL), "VA overlap");
    p.unmap(a.handle, &[g0, g1]).unwrap();
    assert_eq!(
        p.unmap(a.handle, &[g0]),
        Err(libc::EINVAL),
        "not mapped any more"
    );
    p.free(a.handle).unwrap();
    assert_eq!(p.map(b.handle, &[g0], 0), (Ok(0), 1));
    // A misaligned VA cannot be mapped.
    let c = p.alloc(g0, 0x10_1000_0100, 4096, GTT_W, 0).unwrap();
    assert_eq!(p.map(c.handle, &[g0], 0).0, Err(libc::EINVAL));
    // The signal page cannot be freed through FREE_MEMORY.
    let page = p.alloc(g0, 0x10_2000_0000, 64 * KIB, GTT_W, 0).unwrap();
    p.create_event(page.handle).unwrap();
    assert_eq!(p.free(page.handle), Err(libc::EPERM));
    assert_eq!(
        p.create_event(page.handle).map(|_| ()),
        Err(libc::EINVAL),
        "event page already set"
    );
}

#[test]
fn available_memory_tracks_vram_use() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    let g = p.gpu_ids[0];
    let avail = || {
        let mut a = kfd_ioctl_get_available_memory_args {
            gpu_id: g,
            ..Default::default()
        };
        p.ioctl(AMDKFD_IOC_AVAILABLE_MEMORY, &mut a)
            .map(|_| a.available)
    };
    let before = avail().unwrap();
    assert_eq!(before % (2 << 20), 0);
    assert!(before < sim.gpus()[0].vram_bytes);
    let a = p.alloc(g, 0x10_0000_0000, 64 << 20, VRAM_W, 0).unwrap();
    assert_eq!(avail().unwrap(), before - (64 << 20));
    p.alloc(g, 0x20_0000_0000, 64 << 20, GTT_W, 0).unwrap();
    assert_eq!(avail().unwrap(), before - (64 << 20), "GTT does not count");
    p.free(a.handle).unwrap();
    assert_eq!(avail().unwrap(), before);
    let mut bad = kfd_ioctl_get_available_memory_args {
        gpu_id: 0x4242,
        ..Default::default()
    };
    assert_eq!(
        p.ioctl(AMDKFD_IOC_AVAILABLE_MEMORY, &mut bad),
        Err(libc::EINVAL)
    );
}

#[test]
fn dmabuf_info_import_and_export() {
    let sim = sim(2);
    let a = Proc::new(&sim);
    let b = Proc::new(&sim);
    let (g0, g1) = (a.gpu_ids[0], a.gpu_ids[1]);
    let vram = a
        .alloc(
            g0,
            0x10_0000_0000,
            64 * KIB,
            VRAM_W | KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC,
            0,
        )
        .unwrap();
    let host = sim.alloc_host_memory(4096).unwrap();
    let uptr = a
        .alloc(g0, host, 4096, KFD_IOC_ALLOC_MEM_FLAGS_USERPTR, host)
        .unwrap();
    let db = a
        .alloc(
            g0,
            0x10_0010_0000,
            8192,
            KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL,
            0,
        )
        .unwrap();
    let export = |handle: u64| {
        let mut e = kfd_ioctl_export_dmabuf_args {
            handle,
            flags: libc::O_CLOEXEC as u32,
            dmabuf_fd: 0,
        };
        a.ioctl(AMDKFD_IOC_EXPORT_DMABUF, &mut e)
            .map(|_| e.dmabuf_fd as i32)
    };
    assert_eq!(
        export(uptr.handle),
        Err(libc::EPERM),
        "userptr BOs are not exported"
    );
    assert_eq!(export(db.handle), Err(libc::EINVAL));
    assert_eq!(export(vram.handle | 0x55), Err(libc::EINVAL));
    let fd = export(vram.handle).unwrap();
    // SAFETY: F_GETFD/F_GETFL on the fd EXPORT_DMABUF just installed.
    let (fdfl, fl) = unsafe {
        (
            libc::fcntl(fd, libc::F_GETFD),
            libc::fcntl(fd, libc::F_GETFL),
        )
    };
    assert_eq!(
        fdfl & libc::FD_CLOEXEC,
        libc::FD_CLOEXEC,
        "flags carry O_CLOEXEC"
    );
    assert_eq!(fl & libc::O_ACCMODE, libc::O_RDWR);
    let mut info = kfd_ioctl_get_dmabuf_info_args {
        dmabuf_fd: fd as u32,
        ..Default::default()
    };
    b.ioctl(AMDKFD_IOC_GET_DMABUF_INFO, &mut info).unwrap();
    assert_eq!(info.size, 64 * KIB);
    assert_eq!(info.gpu_id, g0);
    assert_eq!(
        info.flags,
        KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC
    );
    // Another process imports it on the other GPU: one shared object.
    let mut imp = kfd_ioctl_import_dmabuf_args {
        va_addr: 0x30_0000_0000,
        handle: 0,
        gpu_id: g1,
        dmabuf_fd: fd as u32,
    };
    b.ioctl(AMDKFD_IOC_IMPORT_DMABUF, &mut imp).unwrap();
    assert_eq!((imp.handle >> 32) as u32, g1);
    Workload::attach(&sim, a.pid)
        .write_bo(vram.handle, 0, b"one object")
        .unwrap();
    assert_eq!(
        Workload::attach(&sim, b.pid)
            .read_bo(imp.handle, 0, 10)
            .unwrap(),
        b"one object"
    );
    let desc = Workload::attach(&sim, b.pid).describe().unwrap();
    let imported = desc.bos.iter().find(|x| x.handle == imp.handle).unwrap();
    assert_eq!(
        imported.flags,
        KFD_IOC_ALLOC_MEM_FLAGS_VRAM
            | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE
            | KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE
    );
    close(fd);
    // Errors: closed fd, non-dma-buf fd, unknown gpu.
    let mut bad = kfd_ioctl_get_dmabuf_info_args {
        dmabuf_fd: 9999,
        ..Default::default()
    };
    assert_eq!(
        b.ioctl(AMDKFD_IOC_GET_DMABUF_INFO, &mut bad),
        Err(libc::EBADF)
    );
    let (r, _w) = std::io::pipe().unwrap();
    let pipe: OwnedFd = r.into();
    bad.dmabuf_fd = pipe.as_raw_fd() as u32;
    assert_eq!(
        b.ioctl(AMDKFD_IOC_GET_DMABUF_INFO, &mut bad),
        Err(libc::EINVAL)
    );
    let mut imp2 = kfd_ioctl_import_dmabuf_args {
        gpu_id: 0x4242,
        dmabuf_fd: pipe.as_raw_fd() as u32,
        ..imp
    };
    assert_eq!(
        b.ioctl(AMDKFD_IOC_IMPORT_DMABUF, &mut imp2),
        Err(libc::EINVAL)
    );
    imp2.gpu_id = g1;
    assert_eq!(
        b.ioctl(AMDKFD_IOC_IMPORT_DMABUF, &mut imp2),
        Err(libc::EINVAL)
    );
    // The exporter frees its handle; the importer keeps the BO alive.
    a.free(vram.handle).unwrap();
    assert_eq!(
        Workload::attach(&sim, b.pid)
            .read_bo(imp.handle, 0, 10)
            .unwrap(),
        b"one object"
    );
}

#[test]
fn queue_rules() {
    let sim = sim(1);
    let pid = sim.spawn_process().unwrap();
    let drv = sim.driver(pid);
    let kfd = open(&drv, "/dev/kfd");
    let g = sim.gpus()[0].gpu_id;
    let mut q = kfd_ioctl_create_queue_args {
        ring_base_address: 0x1000_0000,
        ring_size: 4096,
        gpu_id: g,
        queue_type: KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
        queue_percentage: 100,
        ..Default::default()
    };
    assert_eq!(
        ioctl(&drv, kfd.as_fd(), AMDKFD_IOC_CREATE_QUEUE, &mut q),
        Err(libc::ESRCH),
        "no VM"
    );
    let p = Proc::in_pid(&sim, pid);
    for (name, patch) in [
        (
            "percentage",
            kfd_ioctl_create_queue_args {
                queue_percentage: 101,
                ..q
            },
        ),
        (
            "priority",
            kfd_ioctl_create_queue_args {
                queue_priority: 16,
                ..q
            },
        ),
        (
            "ring size",
            kfd_ioctl_create_queue_args {
                ring_size: 3000,
                ..q
            },
        ),
        ("type", kfd_ioctl_create_queue_args { queue_type: 9, ..q }),
        (
            "gpu",
            kfd_ioctl_create_queue_args {
                gpu_id: 0x4242,
                ..q
            },
        ),
    ] {
        let mut a = patch;
        assert_eq!(
            p.ioctl(AMDKFD_IOC_CREATE_QUEUE, &mut a),
            Err(libc::EINVAL),
            "{name}"
        );
    }
    let c0 = p.create_queue(g, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL).unwrap();
    let c1 = p.create_queue(g, KFD_IOC_QUEUE_TYPE_COMPUTE).unwrap();
    let s0 = p.create_queue(g, KFD_IOC_QUEUE_TYPE_SDMA).unwrap();
    let x0 = p.create_queue(g, KFD_IOC_QUEUE_TYPE_SDMA_XGMI).unwrap();
    assert_eq!(
        (c0.queue_id, c1.queue_id, s0.queue_id, x0.queue_id),
        (0, 1, 2, 3)
    );
    assert_eq!(
        c0.doorbell_offset & KFD_MMAP_TYPE_MASK,
        KFD_MMAP_TYPE_DOORBELL
    );
    assert_eq!(KFD_MMAP_GET_GPU_ID(c0.doorbell_offset), g);
    // Doorbell offsets inside the process slice differ per queue.
    let slots: Vec<u64> = [c0, c1, s0, x0]
        .iter()
        .map(|q| q.doorbell_offset & KFD_MMAP_OFFSET_VALUE_MASK)
        .collect();
    assert_eq!(
        slots.len(),
        slots
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    let mut d = kfd_ioctl_destroy_queue_args {
        queue_id: c1.queue_id,
        pad: 0,
    };
    p.ioctl(AMDKFD_IOC_DESTROY_QUEUE, &mut d).unwrap();
    assert_eq!(
        p.ioctl(AMDKFD_IOC_DESTROY_QUEUE, &mut d),
        Err(libc::EINVAL),
        "already destroyed"
    );
    assert_eq!(
        p.create_queue(g, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL)
            .unwrap()
            .queue_id,
        1,
        "lowest free q_id"
    );
    // UPDATE_QUEUE / SET_CU_MASK / GWS.
    let mut u = kfd_ioctl_update_queue_args {
        ring_base_address: 0x2000_0000,
        queue_id: c0.queue_id,
        ring_size: 8192,
        queue_percentage: 50,
        queue_priority: 3,
    };
    p.ioctl(AMDKFD_IOC_UPDATE_QUEUE, &mut u).unwrap();
    u.queue_id = 77;
    assert_eq!(p.ioctl(AMDKFD_IOC_UPDATE_QUEUE, &mut u), Err(libc::EFAULT));
    let mask = [0xFFFF_FFFFu32; 2];
    let mut cu = kfd_ioctl_set_cu_mask_args {
        queue_id: c0.queue_id,
        num_cu_mask: 64,
        cu_mask_ptr: mask.as_ptr() as u64,
    };
    p.ioctl(AMDKFD_IOC_SET_CU_MASK, &mut cu).unwrap();
    cu.num_cu_mask = 33;
    assert_eq!(p.ioctl(AMDKFD_IOC_SET_CU_MASK, &mut cu), Err(libc::EINVAL));
    let mut gws = kfd_ioctl_alloc_queue_gws_args {
        queue_id: c0.queue_id,
        num_gws: 1,
        ..Default::default()
    };
    p.ioctl(AMDKFD_IOC_ALLOC_QUEUE_GWS, &mut gws).unwrap();
    gws.queue_id = s0.queue_id;
    assert_eq!(
        p.ioctl(AMDKFD_IOC_ALLOC_QUEUE_GWS, &mut gws),
        Err(libc::EBUSY),
        "one GWS queue per device"
    );
    // Wave state needs a compute queue that is not running.
    let mut stack = vec![0u8; 4096];
    let mut ws = kfd_ioctl_get_queue_wave_state_args {
        ctl_stack_address: stack.as_mut_ptr() as u64,
        queue_id: c0.queue_id,
        ..Default::default()
    };
    assert_eq!(
        p.ioctl(AMDKFD_IOC_GET_QUEUE_WAVE_STATE, &mut ws),
        Err(libc::EINVAL),
        "running"
    );
    let criu = criu_for(&sim, pid);
    process_info(&criu, p.kfd.as_fd()).unwrap();
    p.ioctl(AMDKFD_IOC_GET_QUEUE_WAVE_STATE, &mut ws).unwrap();
    assert_eq!(ws.ctl_stack_used_size, 4096);
    // XNACK mode cannot change while queues exist.
    let mut x = kfd_ioctl_set_xnack_mode_args { xnack_enabled: 1 };
    assert_eq!(p.ioctl(AMDKFD_IOC_SET_XNACK_MODE, &mut x), Err(libc::EBUSY));
    let mut x = kfd_ioctl_set_xnack_mode_args { xnack_enabled: -1 };
    p.ioctl(AMDKFD_IOC_SET_XNACK_MODE, &mut x).unwrap();
    assert_eq!(x.xnack_enabled, 0);
}

#[test]
fn event_rules() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    // Without a user page the kernel allocates one: mmap it through /dev/kfd.
    let e1 = p.create_event(0).unwrap();
    assert_eq!(e1.event_id, 1, "event id 0 is reserved");
    assert_eq!(e1.event_page_offset, KFD_MMAP_TYPE_EVENTS);
    assert_eq!((e1.event_slot_index, e1.event_trigger_data), (1, 1));
    let e2 = p.create_event(0).unwrap();
    let mut other = kfd_ioctl_create_event_args {
        event_type: KFD_IOC_EVENT_MEMORY,
        ..Default::default()
    };
    p.ioctl(AMDKFD_IOC_CREATE_EVENT, &mut other).unwrap();
    assert_eq!(
        other.event_id, KFD_SIGNAL_EVENT_LIMIT,
        "non-signal events above the signal range"
    );
    let mut set = kfd_ioctl_set_event_args {
        event_id: other.event_id,
        pad: 0,
    };
    assert_eq!(
        p.ioctl(AMDKFD_IOC_SET_EVENT, &mut set),
        Err(libc::EINVAL),
        "memory events are not CPU-signaled"
    );
    set.event_id = 999;
    assert_eq!(p.ioctl(AMDKFD_IOC_SET_EVENT, &mut set), Err(libc::EINVAL));
    // WAIT_EVENTS: nothing signaled times out at once; signaled completes and auto-resets.
    let mut data = vec![[0u8; 48]; 2];
    data[0][40..44].copy_from_slice(&e1.event_id.to_ne_bytes());
    data[1][40..44].copy_from_slice(&e2.event_id.to_ne_bytes());
    let mut w = kfd_ioctl_wait_events_args {
        events_ptr: data.as_mut_ptr() as u64,
        num_events: 2,
        wait_for_all: 0,
        timeout: 0,
        wait_result: 0,
    };
    p.ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut w).unwrap();
    assert_eq!(w.wait_result, KFD_IOC_WAIT_RESULT_TIMEOUT);
    set.event_id = e2.event_id;
    p.ioctl(AMDKFD_IOC_SET_EVENT, &mut set).unwrap();
    p.ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut w).unwrap();
    assert_eq!(w.wait_result, KFD_IOC_WAIT_RESULT_COMPLETE);
    p.ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut w).unwrap();
    assert_eq!(
        w.wait_result, KFD_IOC_WAIT_RESULT_TIMEOUT,
        "auto-reset consumed the signal"
    );
    // The signal page: event 2's slot, which SET_EVENT leaves alone (a fence writes slots).
    p.ioctl(AMDKFD_IOC_SET_EVENT, &mut set).unwrap();
    // SAFETY: no MAP_FIXED; unmapped below.
    let m = unsafe {
        ::kfd::Driver::mmap(
            &p.drv,
            std::ptr::null_mut(),
            32 * 1024,
            libc::PROT_READ,
            libc::MAP_SHARED,
            p.kfd.as_fd(),
            KFD_MMAP_TYPE_EVENTS,
        )
    }
    .unwrap();
    // SAFETY: the mapping is 32 KiB and readable; slots are u64.
    let slots = unsafe { std::slice::from_raw_parts(m.as_ptr().cast::<u64>(), 4) }.to_vec();
    assert_eq!(slots[0], u64::MAX, "unsignaled slots are all ones");
    assert_eq!(slots[e2.event_id as usize], u64::MAX);
    // SAFETY: unmapping the mapping made above.
    unsafe { ::kfd::Driver::munmap(&p.drv, m, 32 * 1024) }.unwrap();
    let mut reset = kfd_ioctl_reset_event_args {
        event_id: e2.event_id,
        pad: 0,
    };
    p.ioctl(AMDKFD_IOC_RESET_EVENT, &mut reset).unwrap();
    let mut destroy = kfd_ioctl_destroy_event_args {
        event_id: e1.event_id,
        pad: 0,
    };
    p.ioctl(AMDKFD_IOC_DESTROY_EVENT, &mut destroy).unwrap();
    assert_eq!(
        p.ioctl(AMDKFD_IOC_DESTROY_EVENT, &mut destroy),
        Err(libc::EINVAL)
    );
    // A wait naming an unknown event fails.
    p.ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut w)
        .map(|_| ())
        .unwrap_err();
}

#[test]
fn svm_ranges_split_and_report_attributes() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    let g = p.gpu_ids[0];
    let base = 0x50_0000_0000u64;
    svm_set(
        &p,
        base,
        64 * KIB,
        &[
            (KFD_IOCTL_SVM_ATTR_PREFERRED_LOC, g),
            (KFD_IOCTL_SVM_ATTR_GRANULARITY, 4),
        ],
    )
    .unwrap();
    // Setting flags on the middle splits the range in three.
    svm_set(
        &p,
        base + 16 * KIB,
        16 * KIB,
        &[(KFD_IOCTL_SVM_ATTR_SET_FLAGS, KFD_IOCTL_SVM_FLAG_GPU_RO)],
    )
    .unwrap();
    let desc = Workload::attach(&sim, p.pid).describe().unwrap();
    assert_eq!(
        desc.svm_ranges,
        vec![
            (base, 16 * KIB),
            (base + 16 * KIB, 16 * KIB),
            (base + 32 * KIB, 32 * KIB)
        ]
    );
    let got = svm_call(
        &p,
        KFD_IOCTL_SVM_OP_GET_ATTR,
        base,
        64 * KIB,
        &[
            (KFD_IOCTL_SVM_ATTR_PREFERRED_LOC, 0),
            (KFD_IOCTL_SVM_ATTR_GRANULARITY, 0),
            (KFD_IOCTL_SVM_ATTR_SET_FLAGS, 0),
            (KFD_IOCTL_SVM_ATTR_ACCESS, g),
        ],
    )
    .unwrap();
    assert_eq!(got[0], (KFD_IOCTL_SVM_ATTR_PREFERRED_LOC, g));
    assert_eq!(got[1], (KFD_IOCTL_SVM_ATTR_GRANULARITY, 4));
    assert_eq!(
        got[2].1 & KFD_IOCTL_SVM_FLAG_GPU_RO,
        0,
        "only the middle part is read-only"
    );
    // No ACCESS attribute was given and XNACK is off: no GPU has access.
    assert_eq!(got[3], (KFD_IOCTL_SVM_ATTR_NO_ACCESS, g));
    // Errors: unaligned, empty, unknown gpu, unknown attribute, unknown op
    // (any granularity is taken: see kfdtest_findings.rs).
    assert_eq!(svm_set(&p, base + 1, 4096, &[]), Err(libc::EINVAL));
    assert_eq!(svm_set(&p, base, 0, &[]), Err(libc::EINVAL));
    assert_eq!(
        svm_set(&p, base, 4096, &[(KFD_IOCTL_SVM_ATTR_ACCESS, 0x4242)]),
        Err(libc::EINVAL)
    );
    assert_eq!(svm_set(&p, base, 4096, &[(99, 0)]), Err(libc::EINVAL));
    assert_eq!(
        svm_call(&p, 7, base, 4096, &[]).map(|_| ()),
        Err(libc::EINVAL)
    );
    // Checkpoint counts the three ranges as objects.
    let info = process_info(&p.drv, p.kfd.as_fd()).unwrap();
    assert_eq!(info.num_objects, 3);
    assert_eq!(info.priv_data_size, 8 + 8 + 3 * (24 + 8 * 5));
}

#[test]
fn process_without_visible_gpus_still_answers_version_queries() {
    let sim = sim(2);
    let pid = sim
        .spawn_process_with(ProcessConfig {
            visible_gpus: Some(vec![]),
            ..ProcessConfig::default()
        })
        .unwrap();
    let drv = sim.driver(pid);
    let kfd = open(&drv, "/dev/kfd");
    let mut v = kfd_ioctl_get_version_args::default();
    ioctl(&drv, kfd.as_fd(), AMDKFD_IOC_GET_VERSION, &mut v).unwrap();
    assert!(apertures(&drv, kfd.as_fd()).is_empty());
    let path = sim.render_path(sim.gpus()[0].gpu_id).unwrap();
    let err = ::kfd::Driver::open(&drv, &path, libc::O_RDWR).unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::EPERM),
        "render node hidden by the device cgroup"
    );
}

#[test]
fn topology_nodes_of_hidden_gpus_answer_eperm_to_the_process_only() {
    let sim = sim(2);
    let gpus = sim.gpus();
    let boxed = sim
        .spawn_process_with(ProcessConfig {
            visible_gpus: Some(vec![gpus[1].gpu_id]),
            ..ProcessConfig::default()
        })
        .unwrap();
    let host = sim.spawn_process().unwrap();
    let node = |n: u32, file: &str| sim.sysfs_root().join(format!("nodes/{n}/{file}"));
    let hidden = node(gpus[0].node_id, "properties");
    let shown = node(gpus[1].node_id, "gpu_id");
    let cpu = node(0, "properties");
    let read =
        |pid, path: &std::path::Path| ::kfd::Driver::read_sysfs(&sim.driver(pid), path, 4096);
    assert_eq!(
        read(boxed, &hidden).unwrap_err().raw_os_error(),
        Some(libc::EPERM),
        "a node of a GPU the device cgroup hides"
    );
    assert_eq!(
        read(boxed, &node(gpus[0].node_id, "mem_banks/0/properties"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EPERM),
        "files below the hidden node too"
    );
    let id = read(boxed, &shown).unwrap();
    assert_eq!(
        String::from_utf8(id).unwrap().trim(),
        gpus[1].gpu_id.to_string()
    );
    assert!(
        !read(boxed, &cpu).unwrap().is_empty(),
        "CPU nodes are never hidden"
    );
    assert_eq!(
        read(host, &hidden).unwrap(),
        std::fs::read(&hidden).unwrap(),
        "a process seeing every GPU reads the file as it is"
    );
    assert_eq!(
        read(host, &shown).unwrap().len(),
        std::fs::read(&shown).unwrap().len()
    );
}

#[test]
fn absurd_counts_fail_without_exhausting_memory() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    let a = p
        .alloc(p.gpu_ids[0], 0x10_0000_0000, 4096, GTT_W, 0)
        .unwrap();
    let ids = [p.gpu_ids[0]];
    let mut m = kfd_ioctl_map_memory_to_gpu_args {
        handle: a.handle,
        device_ids_array_ptr: ids.as_ptr() as u64,
        n_devices: u32::MAX,
        n_success: 0,
    };
    assert_eq!(
        p.ioctl(AMDKFD_IOC_MAP_MEMORY_TO_GPU, &mut m),
        Err(libc::ENOMEM)
    );
    let mut w = kfd_ioctl_wait_events_args {
        events_ptr: ids.as_ptr() as u64,
        num_events: u32::MAX,
        ..Default::default()
    };
    assert_eq!(p.ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut w), Err(libc::ENOMEM));
}

#[test]
fn a_compute_vm_outlives_the_applications_render_fd() {
    let sim = sim(1);
    let mut p = Proc::new(&sim);
    let g = p.gpu_ids[0];
    p.renders.clear();
    assert_eq!(
        sim.accounting().render_fds,
        0,
        "the kernel's own reference is not an application fd"
    );
    // The VM is still bound: allocations and mappings keep working.
    let a = p.alloc(g, 0x10_0000_0000, 4096, GTT_W, 0).unwrap();
    assert_eq!(p.map(a.handle, &[g], 0), (Ok(0), 1));
    assert!(sim.kfd_state(p.pid).unwrap().vm_acquired[0]);
    // Many new render files later, none is mistaken for the held one.
    let others: Vec<OwnedFd> = (0..32)
        .map(|_| open(&p.drv, sim.render_path(g).unwrap().to_str().unwrap()))
        .collect();
    let q = sim.spawn_process().unwrap();
    let qdrv = sim.driver(q);
    let qkfd = open(&qdrv, "/dev/kfd");
    for r in &others {
        let mut acq = kfd_ioctl_acquire_vm_args {
            drm_fd: r.as_raw_fd() as u32,
            gpu_id: g,
        };
        let res = ioctl(&qdrv, qkfd.as_fd(), AMDKFD_IOC_ACQUIRE_VM, &mut acq);
        assert!(res == Ok(0) || res == Err(libc::EBUSY), "{res:?}");
    }
    drop(others);
    sim.exit_process(p.pid).unwrap();
    let after = sim.accounting();
    assert_eq!(after.live_bos, 0);
}
