//! A render file that became a KFD process's compute VM (ACQUIRE_VM): KFD
//! allocations mapped with MAP_MEMORY_TO_GPU share its VA space with GEM_VA
//! mappings (overlap is `EINVAL`), a KFD BO's dma-buf imported on that file
//! is the same object (self-import) and may be mapped at a second VA, and
//! SDMA reaches KFD BOs through the compute VM (kernel.md §4.3).

mod drm_support;

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use drm_support::{errno, ioctl, packet, HostBuf, Render};
use kfd::Driver;
use kfd_sys as k;

const MIB: u64 = 1 << 20;
const KFD_VA: u64 = 0x7000_0000_0000;
const ALIAS_VA: u64 = 0x10_0000_0000;
const HOST_VA: u64 = 0x20_0000_0000;
const IB_VA: u64 = 0x30_0000_0000;

struct ComputeVm {
    r: Render,
    kfd: OwnedFd,
    gpu_id: u32,
    handle: u64,
    mmap_offset: u64,
}

/// A process with /dev/kfd, its render node acquired as the compute VM, and
/// a 2 MiB CPU-visible VRAM allocation mapped at `KFD_VA`.
fn compute_vm() -> ComputeVm {
    let r = drm_support::render();
    let gpu_id = r.sim.gpus()[0].gpu_id;
    let kfd = r
        .drv
        .open("/dev/kfd".as_ref(), libc::O_RDWR | libc::O_CLOEXEC)
        .unwrap();
    let mut acquire = k::kfd_ioctl_acquire_vm_args {
        drm_fd: r.fd.as_raw_fd() as u32,
        gpu_id,
    };
    ioctl(&r.drv, &kfd, k::AMDKFD_IOC_ACQUIRE_VM, &mut acquire).unwrap();
    let mut alloc = k::kfd_ioctl_alloc_memory_of_gpu_args {
        va_addr: KFD_VA,
        size: 2 * MIB,
        gpu_id,
        flags: k::KFD_IOC_ALLOC_MEM_FLAGS_VRAM
            | k::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE
            | k::KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE
            | k::KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC,
        ..Default::default()
    };
    ioctl(&r.drv, &kfd, k::AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut alloc).unwrap();
    let devices = [gpu_id];
    let mut map = k::kfd_ioctl_map_memory_to_gpu_args {
        handle: alloc.handle,
        device_ids_array_ptr: devices.as_ptr() as u64,
        n_devices: 1,
        n_success: 0,
    };
    ioctl(&r.drv, &kfd, k::AMDKFD_IOC_MAP_MEMORY_TO_GPU, &mut map).unwrap();
    ComputeVm {
        r,
        kfd,
        gpu_id,
        handle: alloc.handle,
        mmap_offset: alloc.mmap_offset,
    }
}

fn export_kfd_bo(c: &ComputeVm) -> OwnedFd {
    let mut export = k::kfd_ioctl_export_dmabuf_args {
        handle: c.handle,
        flags: libc::O_RDWR as u32 | libc::O_CLOEXEC as u32,
        dmabuf_fd: 0,
    };
    ioctl(&c.r.drv, &c.kfd, k::AMDKFD_IOC_EXPORT_DMABUF, &mut export).unwrap();
    // SAFETY: EXPORT_DMABUF succeeded: `dmabuf_fd` is a new descriptor we own.
    unsafe { OwnedFd::from_raw_fd(export.dmabuf_fd as i32) }
}

#[test]
fn gem_va_cannot_overlap_mapped_kfd_allocations() {
    let c = compute_vm();
    let bo =
        c.r.gem_create(4 * MIB, k::AMDGPU_GEM_DOMAIN_GTT, 0)
            .unwrap();
    assert_eq!(errno(c.r.map(bo, KFD_VA, 4096)), libc::EINVAL);
    assert_eq!(errno(c.r.map(bo, KFD_VA - MIB, 2 * MIB)), libc::EINVAL);
    c.r.map(bo, KFD_VA + 2 * MIB, MIB).unwrap();
    // Unmapped from the GPU, the allocation no longer occupies the VM.
    let devices = [c.gpu_id];
    let mut unmap = k::kfd_ioctl_unmap_memory_from_gpu_args {
        handle: c.handle,
        device_ids_array_ptr: devices.as_ptr() as u64,
        n_devices: 1,
        n_success: 0,
    };
    ioctl(
        &c.r.drv,
        &c.kfd,
        k::AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU,
        &mut unmap,
    )
    .unwrap();
    c.r.map(bo, KFD_VA, 4096).unwrap();
}

#[test]
fn kfd_dmabuf_self_import_is_the_same_object_and_sdma_reaches_it() {
    let c = compute_vm();
    let dmabuf = export_kfd_bo(&c);
    let mut prime = k::drm_prime_handle {
        handle: 0,
        flags: 0,
        fd: dmabuf.as_raw_fd(),
    };
    c.r.ioctl(k::DRM_IOCTL_PRIME_FD_TO_HANDLE, &mut prime)
        .unwrap();
    let h = prime.handle;
    // The same dma-buf gives the same handle again.
    c.r.ioctl(k::DRM_IOCTL_PRIME_FD_TO_HANDLE, &mut prime)
        .unwrap();
    assert_eq!(prime.handle, h);
    // A self-import: not flagged as an import, same fake offset as KFD's.
    assert_eq!(c.r.mmap_offset(h).unwrap(), c.mmap_offset);
    let mut entries = [k::drm_amdgpu_gem_list_handles_entry::default(); 2];
    let mut list = k::drm_amdgpu_gem_list_handles {
        entries: entries.as_mut_ptr() as u64,
        num_entries: 2,
        padding: 0,
    };
    c.r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES, &mut list)
        .unwrap();
    assert_eq!(list.num_entries, 1);
    assert_eq!(entries[0].flags, 0);
    assert_eq!(
        entries[0].preferred_domains,
        u64::from(k::AMDGPU_GEM_DOMAIN_VRAM)
    );
    // Mapping the same object at a second VA is allowed.
    c.r.map(h, ALIAS_VA, 2 * MIB).unwrap();
    let mut vm = [k::drm_amdgpu_gem_vm_entry::default(); 4];
    let mut op = k::drm_amdgpu_gem_op {
        handle: h,
        op: k::AMDGPU_GEM_OP_GET_MAPPING_INFO,
        value: vm.as_mut_ptr() as u64,
        num_entries: 4,
        padding: 0,
    };
    c.r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut op).unwrap();
    assert_eq!(op.num_entries, 2);
    assert_eq!((vm[0].addr, vm[1].addr), (ALIAS_VA, KFD_VA));

    // SDMA: host -> the KFD mapping, then the GEM alias -> host.
    let src = HostBuf::new(8192, |i| (i % 97) as u8 + 1);
    let dst = HostBuf::new(8192, |_| 0);
    let hs = c.r.userptr(&src).unwrap();
    let hd = c.r.userptr(&dst).unwrap();
    c.r.map(hs, HOST_VA, 8192).unwrap();
    c.r.map(hd, HOST_VA + MIB, 8192).unwrap();
    let mut ib = packet::copy(true, HOST_VA, KFD_VA + 4096, 8192).to_vec();
    ib.extend(packet::copy(true, ALIAS_VA + 4096, HOST_VA + MIB, 8192));
    packet::pad(&mut ib);
    let ib_bo = c.r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let bytes = packet::bytes(&ib);
    c.r.cpu_map(ib_bo, 4096).bytes_mut()[..bytes.len()].copy_from_slice(&bytes);
    c.r.map(ib_bo, IB_VA, 4096).unwrap();
    let ctx = c.r.ctx_alloc().unwrap();
    let seq = c.r.submit(ctx, 0, IB_VA, bytes.len() as u32, 0).unwrap();
    assert_eq!(c.r.wait(ctx, 0, seq, u64::MAX).unwrap(), 0);
    assert!(dst.bytes() == src.bytes());
    // The KFD BO's CPU mapping through the VM-owning render fd shows the data.
    // SAFETY: no MAP_FIXED; the mapping is unmapped below.
    let ptr = unsafe {
        c.r.drv.mmap(
            std::ptr::null_mut(),
            2 * MIB as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            c.r.fd.as_fd(),
            c.mmap_offset,
        )
    }
    .unwrap();
    // SAFETY: the mapping is 2 MiB of readable memory until munmap below.
    let kfd_bytes =
        unsafe { std::slice::from_raw_parts(ptr.as_ptr().cast::<u8>(), 2 * MIB as usize) };
    assert!(kfd_bytes[4096..4096 + 8192] == *src.bytes());
    assert!(kfd_bytes[..4096].iter().all(|b| *b == 0));
    // SAFETY: `kfd_bytes` is not used after this point.
    unsafe { c.r.drv.munmap(ptr, 2 * MIB as usize) }.unwrap();
}
