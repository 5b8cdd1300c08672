//! `RenderNode` against the simulated amdgpu driver: version and device
//! queries, GEM objects, PRIME, VA mappings, handle listing and renaming,
//! contexts, BO lists, a hand-built SDMA submission and its fence.

mod kfd_api_support;

use std::os::fd::AsFd;
use std::time::Duration;

use kfd::sdma::CopyFormat;
use kfd::{GemCreate, GemHandle, IbChunk, RenderMinor, RenderNode, StagingBuffer};
use kfd_api_support::sim;
use kfd_sim::{FaultSpec, SimDriver};
use kfd_sys::{
    AMDGPU_CTX_PRIORITY_NORMAL, AMDGPU_GEM_DOMAIN_DOORBELL, AMDGPU_GEM_DOMAIN_GTT,
    AMDGPU_GEM_USERPTR_ANONONLY, AMDGPU_GEM_USERPTR_REGISTER, AMDGPU_GEM_USERPTR_VALIDATE,
    AMDGPU_HW_IP_DMA, AMDGPU_VM_PAGE_EXECUTABLE, AMDGPU_VM_PAGE_READABLE, AMDGPU_VM_PAGE_WRITEABLE,
    DRM_CLOEXEC, DRM_FILE_PAGE_OFFSET_START, DRM_RDWR,
};

fn open(sim: &kfd_sim::Sim) -> RenderNode<SimDriver> {
    let pid = sim.spawn_process().unwrap();
    RenderNode::open(sim.driver(pid), RenderMinor(sim.gpus()[0].render_minor)).unwrap()
}

fn gtt(size: u64) -> GemCreate {
    GemCreate {
        size,
        alignment: 4096,
        domains: u64::from(AMDGPU_GEM_DOMAIN_GTT),
        flags: 0,
    }
}

const RWX: u32 = AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE | AMDGPU_VM_PAGE_EXECUTABLE;

#[test]
fn version_and_device_queries() {
    let sim = sim(1);
    let r = open(&sim);
    let v = r.version().unwrap();
    assert_eq!(v.name, "amdgpu");
    assert_eq!(v.major, 3);
    assert!(r.accel_working().unwrap());
    let info = r.device_info().unwrap();
    assert_eq!(info.family, sim.gpus()[0].family);
    assert!(info.virtual_address_offset >= 64 << 10);
    assert!(info.virtual_address_max > info.virtual_address_offset);
    let dma = r.hw_ip_info(AMDGPU_HW_IP_DMA, 0).unwrap();
    assert_ne!(dma.available_rings, 0);
    assert_eq!(dma.ib_start_alignment, 256);
    assert_eq!(
        r.hw_ip_info(AMDGPU_HW_IP_DMA, 1).unwrap_err().errno(),
        libc::EINVAL
    );
}

#[test]
fn missing_render_node_is_enoent() {
    let sim = sim(1);
    let pid = sim.spawn_process().unwrap();
    let err = RenderNode::open(sim.driver(pid), RenderMinor(250)).unwrap_err();
    assert_eq!(err.errno(), libc::ENOENT);
    assert_eq!(
        err.to_string(),
        "open /dev/dri/renderD250 failed: No such file or directory (ENOENT)"
    );
}

#[test]
fn gem_objects_prime_and_cpu_mapping() {
    let sim = sim(1);
    let r = open(&sim);
    let h = r.gem_create(&gtt(64 << 10)).unwrap();
    let offset = r.gem_mmap_offset(h).unwrap();
    assert!(offset >= DRM_FILE_PAGE_OFFSET_START);
    let mut map = r
        .mmap(offset, 64 << 10, libc::PROT_READ | libc::PROT_WRITE)
        .unwrap();
    map.write(100, b"hello").unwrap();
    assert!(map.write((64 << 10) - 2, b"xyz").is_err());

    let dmabuf = r.prime_handle_to_fd(h, DRM_CLOEXEC | DRM_RDWR).unwrap();
    assert_eq!(kfd::dmabuf_size(dmabuf.as_fd()).unwrap(), 64 << 10);
    // Importing into the exporting file gives back the same handle.
    assert_eq!(r.prime_fd_to_handle(dmabuf.as_fd()).unwrap(), h);
    // Another file of the same GPU sees the same memory.
    let other = open(&sim);
    let h2 = other.prime_fd_to_handle(dmabuf.as_fd()).unwrap();
    let off2 = other.gem_mmap_offset(h2).unwrap();
    let map2 = other.mmap(off2, 64 << 10, libc::PROT_READ).unwrap();
    let mut got = [0u8; 5];
    map2.read(100, &mut got).unwrap();
    assert_eq!(&got, b"hello");
    // Bad flags.
    assert_eq!(
        r.prime_handle_to_fd(h, 0x4000_0000).unwrap_err().errno(),
        libc::EINVAL
    );
    drop(map);
    map2.unmap().unwrap();
    r.gem_close(h).unwrap();
    let err = r.gem_close(h).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(
        r.gem_mmap_offset(GemHandle(999)).unwrap_err().errno(),
        libc::ENOENT
    );
    assert_eq!(
        r.gem_create(&GemCreate {
            domains: u64::from(AMDGPU_GEM_DOMAIN_DOORBELL),
            ..gtt(4096)
        })
        .unwrap_err()
        .errno(),
        libc::EINVAL
    );
}

#[test]
fn va_mappings_list_handles_and_change_handle() {
    let sim = sim(1);
    let r = open(&sim);
    let a = r.gem_create(&gtt(2 << 20)).unwrap();
    let b = r.gem_create(&gtt(4096)).unwrap();
    let va = 0x40_0000_0000;
    r.gem_va_map(a, va, 0, 1 << 20, RWX).unwrap();
    r.gem_va_map(a, va + (4 << 20), 1 << 20, 1 << 20, AMDGPU_VM_PAGE_READABLE)
        .unwrap();
    // Overlap, below 64 KiB, unaligned.
    assert_eq!(
        r.gem_va_map(b, va + 4096, 0, 4096, RWX)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        r.gem_va_map(b, 0x1000, 0, 4096, RWX).unwrap_err().errno(),
        libc::EINVAL
    );
    let err = r
        .gem_va_map(b, va + (64 << 20) + 1, 0, 4096, RWX)
        .unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(err.op(), "AMDGPU_GEM_VA MAP");

    let mut maps = r.gem_mapping_info(a).unwrap();
    maps.sort_by_key(|m| m.addr);
    assert_eq!(maps.len(), 2);
    assert_eq!(
        (maps[0].addr, maps[0].size, maps[0].offset),
        (va, 1 << 20, 0)
    );
    assert_eq!(maps[1].offset, 1 << 20);
    assert!(r.gem_mapping_info(b).unwrap().is_empty());

    // More than the initial capacity of 8: the list grows.
    let many: Vec<GemHandle> = (0..20).map(|_| r.gem_create(&gtt(4096)).unwrap()).collect();
    let listed = r.gem_list_handles().unwrap();
    assert_eq!(listed.len(), 22);
    assert!(listed
        .iter()
        .any(|e| e.gem_handle == a.0 && e.size == 2 << 20));
    for i in 0..10u64 {
        r.gem_va_map(many[0], va + (100 << 20) + i * (1 << 20), 0, 4096, RWX)
            .unwrap();
    }
    assert_eq!(r.gem_mapping_info(many[0]).unwrap().len(), 10);

    // Unmap needs the exact start.
    assert_eq!(
        r.gem_va_unmap(a, va + 4096, 0, 1 << 20)
            .unwrap_err()
            .errno(),
        libc::ENOENT
    );
    r.gem_va_unmap(a, va, 0, 1 << 20).unwrap();
    assert_eq!(r.gem_mapping_info(a).unwrap().len(), 1);

    r.gem_change_handle(b, GemHandle(1000)).unwrap();
    assert_eq!(r.gem_close(b).unwrap_err().errno(), libc::EINVAL);
    r.gem_close(GemHandle(1000)).unwrap();
}

#[test]
fn contexts_and_bo_lists() {
    let sim = sim(1);
    let r = open(&sim);
    let c1 = r.ctx_alloc(AMDGPU_CTX_PRIORITY_NORMAL).unwrap();
    let c2 = r.ctx_alloc(AMDGPU_CTX_PRIORITY_NORMAL).unwrap();
    assert_ne!(c1, c2);
    assert!(c1.0 >= 1);
    r.ctx_free(c1).unwrap();
    assert_eq!(r.ctx_free(c1).unwrap_err().op(), "AMDGPU_CTX FREE");
    let h = r.gem_create(&gtt(4096)).unwrap();
    let list = r.bo_list_create(&[h]).unwrap();
    assert_eq!(
        r.bo_list_create(&[h, GemHandle(4242)]).unwrap_err().errno(),
        libc::ENOENT
    );
    r.bo_list_destroy(list).unwrap();
}

/// A hand-built SDMA copy from one GTT BO into a userptr buffer.
#[test]
fn submit_and_wait_a_copy() {
    let sim = sim(1);
    let r = open(&sim);
    let family = r.device_info().unwrap().family;
    let format = CopyFormat::for_family(family).unwrap();
    let src = r.gem_create(&gtt(3 << 20)).unwrap();
    let mut src_map = r
        .mmap(
            r.gem_mmap_offset(src).unwrap(),
            3 << 20,
            libc::PROT_READ | libc::PROT_WRITE,
        )
        .unwrap();
    let data: Vec<u8> = (0..3usize << 20)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    src_map.write(0, &data).unwrap();

    let mut dst = StagingBuffer::new(3 << 20).unwrap();
    // SAFETY: `dst` outlives the userptr BO (closed below) and is not touched
    // by the CPU until the fence signalled.
    let user = unsafe {
        r.gem_userptr(
            dst.as_ptr() as u64,
            dst.len() as u64,
            AMDGPU_GEM_USERPTR_ANONONLY | AMDGPU_GEM_USERPTR_REGISTER | AMDGPU_GEM_USERPTR_VALIDATE,
        )
    }
    .unwrap();
    let ib = r.gem_create(&gtt(4096)).unwrap();
    let mut ib_map = r
        .mmap(
            r.gem_mmap_offset(ib).unwrap(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
        )
        .unwrap();
    let (src_va, dst_va, ib_va) = (0x10_0000_0000u64, 0x20_0000_0000u64, 0x30_0000_0000u64);
    r.gem_va_map(src, src_va, 0, 3 << 20, RWX).unwrap();
    r.gem_va_map(user, dst_va, 0, 3 << 20, RWX).unwrap();
    r.gem_va_map(ib, ib_va, 0, 4096, RWX).unwrap();
    let mut dwords = Vec::new();
    format
        .build_copy(src_va, dst_va, 3 << 20, &mut dwords)
        .unwrap();
    let bytes: Vec<u8> = dwords.iter().flat_map(|d| d.to_le_bytes()).collect();
    ib_map.write(0, &bytes).unwrap();

    let ctx = r.ctx_alloc(AMDGPU_CTX_PRIORITY_NORMAL).unwrap();
    let list = r.bo_list_create(&[src, user, ib]).unwrap();
    let ibc = IbChunk {
        va_start: ib_va,
        ib_bytes: bytes.len() as u32,
        ip_type: AMDGPU_HW_IP_DMA,
        ..Default::default()
    };
    // SAFETY: `dst` is not touched by the CPU until the fence signalled.
    let fence = unsafe { r.cs_submit(ctx, Some(list), &[ibc]) }.unwrap();
    r.bo_list_destroy(list).unwrap();
    assert!(r.wait_cs(&fence, Some(Duration::from_secs(60))).unwrap());
    // A completed fence polls as done.
    assert!(r.wait_cs(&fence, Some(Duration::ZERO)).unwrap());
    assert_eq!(dst.as_mut_slice(), &data[..]);

    // Errors: no IB, mixed rings, bad ring, unknown context, and an
    // injected failure. None of these submissions reaches the device.
    let refused = |ctx: kfd::CtxId, ibs: &[IbChunk]| {
        // SAFETY: every call below is refused before the device runs
        // anything, so no memory is written behind the CPU's back.
        unsafe { r.cs_submit(ctx, None, ibs) }.unwrap_err()
    };
    assert!(matches!(
        refused(ctx, &[]),
        kfd::Error::InvalidArgument { .. }
    ));
    let other_ring = IbChunk { ring: 1, ..ibc };
    assert!(matches!(
        refused(ctx, &[ibc, other_ring]),
        kfd::Error::InvalidArgument { .. }
    ));
    let bad_ring = IbChunk { ring: 31, ..ibc };
    assert_eq!(refused(ctx, &[bad_ring]).errno(), libc::EINVAL);
    let err = refused(kfd::CtxId(77), &[ibc]);
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(err.op(), "AMDGPU_CS");
    sim.inject("AMDGPU_CS=ENOMEM".parse::<FaultSpec>().unwrap());
    assert_eq!(
        refused(ctx, &[ibc]).to_string(),
        "AMDGPU_CS failed: Cannot allocate memory (ENOMEM)"
    );
    r.ctx_free(ctx).unwrap();
    r.gem_va_unmap(user, dst_va, 0, 3 << 20).unwrap();
    r.gem_close(user).unwrap();
}

#[test]
fn userptr_rejects_unaligned_memory() {
    let sim = sim(1);
    let r = open(&sim);
    let buf = StagingBuffer::new(8192).unwrap();
    // SAFETY: the call is refused; nothing is registered.
    let err = unsafe {
        r.gem_userptr(
            buf.as_ptr() as u64 + 1,
            4096,
            AMDGPU_GEM_USERPTR_ANONONLY | AMDGPU_GEM_USERPTR_REGISTER,
        )
    }
    .unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(err.op(), "AMDGPU_GEM_USERPTR");
}
