//! Numbers the project specs state (`/work/shared/spec/kernel.md` §1-§4 and
//! `upstream-plugin.md` §4-§5), compared with the crate. This covers the items that are
//! newer than the installed headers, which the C probe in `abi.rs` cannot see, and
//! re-checks the installed ones against the values the specs were written from (x86-64).

#![cfg(target_arch = "x86_64")]

use core::mem::{offset_of, size_of};

use kfd_sys::*;

/// Compares `(name, crate value, spec value)` rows and fails listing every mismatch.
fn check(rows: &[(&str, u64, u64)]) {
    let bad: Vec<String> = rows
        .iter()
        .filter(|(_, ours, spec)| ours != spec)
        .map(|(name, ours, spec)| format!("{name}: crate {ours:#x}, spec {spec:#x}"))
        .collect();
    println!(
        "spec rows compared: {}, mismatches: {}",
        rows.len(),
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "mismatches with the spec:\n{}",
        bad.join("\n")
    );
}

macro_rules! rows {
    ($($e:expr => $v:expr),* $(,)?) => {
        [$((stringify!($e), ($e) as u64, ($v) as u64)),*]
    };
}

#[test]
fn kfd_request_codes_match_spec() {
    check(&rows![
        AMDKFD_IOC_GET_VERSION => 0x80084B01u32,
        AMDKFD_IOC_CRIU_OP => 0xC0384B22u32,
        AMDKFD_IOC_ACQUIRE_VM => 0x40084B15u32,
        AMDKFD_IOC_AVAILABLE_MEMORY => 0xC0104B23u32,
        AMDKFD_IOC_GET_DMABUF_INFO => 0xC0204B1Cu32,
        AMDKFD_IOC_IMPORT_DMABUF => 0xC0184B1Du32,
        AMDKFD_IOC_ALLOC_MEMORY_OF_GPU => 0xC0284B16u32,
        AMDKFD_IOC_FREE_MEMORY_OF_GPU => 0x40084B17u32,
        AMDKFD_IOC_MAP_MEMORY_TO_GPU => 0xC0184B18u32,
        AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU => 0xC0184B19u32,
        // 1.12: _IOWR('K', 0x24, {u64 handle; u32 flags; u32 dmabuf_fd}) (16 bytes).
        AMDKFD_IOC_EXPORT_DMABUF => 0xC0104B24u32,
    ]);
}

#[test]
fn kfd_criu_layout_matches_spec() {
    check(&rows![
        size_of::<kfd_ioctl_criu_args>() => 56,
        offset_of!(kfd_ioctl_criu_args, devices) => 0,
        offset_of!(kfd_ioctl_criu_args, bos) => 8,
        offset_of!(kfd_ioctl_criu_args, priv_data) => 16,
        offset_of!(kfd_ioctl_criu_args, priv_data_size) => 24,
        offset_of!(kfd_ioctl_criu_args, num_devices) => 32,
        offset_of!(kfd_ioctl_criu_args, num_bos) => 36,
        offset_of!(kfd_ioctl_criu_args, num_objects) => 40,
        offset_of!(kfd_ioctl_criu_args, pid) => 44,
        offset_of!(kfd_ioctl_criu_args, op) => 48,
        size_of::<kfd_criu_device_bucket>() => 16,
        offset_of!(kfd_criu_device_bucket, user_gpu_id) => 0,
        offset_of!(kfd_criu_device_bucket, actual_gpu_id) => 4,
        offset_of!(kfd_criu_device_bucket, drm_fd) => 8,
        offset_of!(kfd_criu_device_bucket, pad) => 12,
        size_of::<kfd_criu_bo_bucket>() => 48,
        offset_of!(kfd_criu_bo_bucket, addr) => 0,
        offset_of!(kfd_criu_bo_bucket, size) => 8,
        offset_of!(kfd_criu_bo_bucket, offset) => 16,
        offset_of!(kfd_criu_bo_bucket, restored_offset) => 24,
        offset_of!(kfd_criu_bo_bucket, gpu_id) => 32,
        offset_of!(kfd_criu_bo_bucket, alloc_flags) => 36,
        offset_of!(kfd_criu_bo_bucket, dmabuf_fd) => 40,
        offset_of!(kfd_criu_bo_bucket, pad) => 44,
        KFD_INVALID_FD => 0xFFFF_FFFFu32,
        KFD_CRIU_OP_PROCESS_INFO => 0,
        KFD_CRIU_OP_CHECKPOINT => 1,
        KFD_CRIU_OP_UNPAUSE => 2,
        KFD_CRIU_OP_RESTORE => 3,
        KFD_CRIU_OP_RESUME => 4,
        KFD_CRIU_PRIV_VERSION => 1,
        KFD_CRIU_OBJECT_TYPE_QUEUE => 0,
        KFD_CRIU_OBJECT_TYPE_EVENT => 1,
        KFD_CRIU_OBJECT_TYPE_SVM_RANGE => 2,
        size_of::<kfd_ioctl_export_dmabuf_args>() => 16,
        offset_of!(kfd_ioctl_export_dmabuf_args, handle) => 0,
        offset_of!(kfd_ioctl_export_dmabuf_args, flags) => 8,
        offset_of!(kfd_ioctl_export_dmabuf_args, dmabuf_fd) => 12,
    ]);
}

#[test]
fn kfd_flags_and_mmap_layout_match_spec() {
    check(&rows![
        KFD_IOC_ALLOC_MEM_FLAGS_VRAM => 1u32 << 0,
        KFD_IOC_ALLOC_MEM_FLAGS_GTT => 1u32 << 1,
        KFD_IOC_ALLOC_MEM_FLAGS_USERPTR => 1u32 << 2,
        KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL => 1u32 << 3,
        KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP => 1u32 << 4,
        KFD_IOC_ALLOC_MEM_FLAGS_CONTIGUOUS_BEST_EFFORT => 1u32 << 23,
        KFD_IOC_ALLOC_MEM_FLAGS_EXT_COHERENT => 1u32 << 24,
        KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED => 1u32 << 25,
        KFD_IOC_ALLOC_MEM_FLAGS_COHERENT => 1u32 << 26,
        KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM => 1u32 << 27,
        KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE => 1u32 << 28,
        KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC => 1u32 << 29,
        KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE => 1u32 << 30,
        KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE => 1u32 << 31,
        KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID => 4,
        KFD_IOCTL_SVM_FLAG_EXT_COHERENT => 0x80,
        KFD_INVALID_GPUID => 0xFFFF_FFFFu32,
        KFD_INVALID_QUEUEID => 0xFFFF_FFFFu32,
        // §2.3: bits 63:62 type (3 doorbell, 2 events, 1 reserved mem, 0 MMIO),
        // bits 61:46 gpu_id, bits 45:0 offset.
        KFD_MMAP_TYPE_DOORBELL => 3u64 << 62,
        KFD_MMAP_TYPE_EVENTS => 2u64 << 62,
        KFD_MMAP_TYPE_RESERVED_MEM => 1u64 << 62,
        KFD_MMAP_TYPE_MMIO => 0u64,
        KFD_MMAP_TYPE_MASK => 0xC000_0000_0000_0000u64,
        KFD_MMAP_GPU_ID_SHIFT => 46,
        KFD_MMAP_GPU_ID_MASK => 0x3FFF_C000_0000_0000u64,
        KFD_MMAP_OFFSET_VALUE_MASK => 0x0000_3FFF_FFFF_FFFFu64,
        KFD_MMAP_GPU_ID(0xFFFF) => 0x3FFF_C000_0000_0000u64,
        KFD_MMAP_GPU_ID(0x1_0001) => 1u64 << 46,
        KFD_MMAP_GET_GPU_ID(KFD_MMAP_TYPE_DOORBELL | (0x2BA7u64 << 46) | 0x1000) => 0x2BA7,
    ]);
}
