//! Numbers the project specs state (`/work/shared/spec/kernel.md` §1-§4 and
//! `upstream-plugin.md` §4-§5), compared with the crate. This covers the items that are
//! newer than the installed headers, which the C probe in `abi.rs` cannot see, and
//! re-checks the installed ones against the values the specs were written from (x86-64).

#![cfg(target_arch = "x86_64")]

use core::mem::{offset_of, size_of};

use kfd_sys::pm4::*;
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
        size_of::<kfd_criu_object_type>() => 4,
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
        KFD_MMAP_TYPE_SHIFT => 62,
        KFD_MMAP_GPU_ID_SHIFT => 46,
        KFD_MMAP_GPU_ID_MASK => 0x3FFF_C000_0000_0000u64,
        KFD_MMAP_OFFSET_VALUE_MASK => 0x0000_3FFF_FFFF_FFFFu64,
        KFD_MMAP_GPU_ID(0xFFFF) => 0x3FFF_C000_0000_0000u64,
        KFD_MMAP_GPU_ID(0x1_0001) => 1u64 << 46,
        KFD_MMAP_GET_GPU_ID(KFD_MMAP_TYPE_DOORBELL | (0x2BA7u64 << 46) | 0x1000) => 0x2BA7,
    ]);
}

#[test]
fn drm_request_codes_match_spec() {
    check(&rows![
        DRM_IOCTL_VERSION => 0xC0406400u32,
        DRM_IOCTL_GEM_CLOSE => 0x40086409u32,
        DRM_IOCTL_PRIME_HANDLE_TO_FD => 0xC00C642Du32,
        DRM_IOCTL_PRIME_FD_TO_HANDLE => 0xC00C642Eu32,
        DRM_IOCTL_GEM_CHANGE_HANDLE => 0xC00864D2u32,
        DRM_IOCTL_AMDGPU_GEM_CREATE => 0xC0206440u32,
        DRM_IOCTL_AMDGPU_GEM_MMAP => 0xC0086441u32,
        DRM_IOCTL_AMDGPU_CTX => 0xC0106442u32,
        DRM_IOCTL_AMDGPU_BO_LIST => 0xC0186443u32,
        DRM_IOCTL_AMDGPU_CS => 0xC0186444u32,
        DRM_IOCTL_AMDGPU_INFO => 0x40206445u32,
        DRM_IOCTL_AMDGPU_GEM_VA => 0x40286448u32,
        DRM_IOCTL_AMDGPU_WAIT_CS => 0xC0206449u32,
        DRM_IOCTL_AMDGPU_GEM_OP => 0xC0186450u32,
        DRM_IOCTL_AMDGPU_GEM_USERPTR => 0xC0186451u32,
        DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES => 0xC0106459u32,
    ]);
}

#[test]
fn drm_newer_layouts_match_spec() {
    check(&rows![
        size_of::<drm_gem_change_handle>() => 8,
        offset_of!(drm_gem_change_handle, handle) => 0,
        offset_of!(drm_gem_change_handle, new_handle) => 4,
        size_of::<drm_amdgpu_gem_op>() => 24,
        offset_of!(drm_amdgpu_gem_op, handle) => 0,
        offset_of!(drm_amdgpu_gem_op, op) => 4,
        offset_of!(drm_amdgpu_gem_op, value) => 8,
        offset_of!(drm_amdgpu_gem_op, num_entries) => 16,
        offset_of!(drm_amdgpu_gem_op, padding) => 20,
        AMDGPU_GEM_OP_GET_MAPPING_INFO => 2,
        size_of::<drm_amdgpu_gem_vm_entry>() => 32,
        offset_of!(drm_amdgpu_gem_vm_entry, addr) => 0,
        offset_of!(drm_amdgpu_gem_vm_entry, size) => 8,
        offset_of!(drm_amdgpu_gem_vm_entry, offset) => 16,
        offset_of!(drm_amdgpu_gem_vm_entry, flags) => 24,
        DRM_AMDGPU_GEM_LIST_HANDLES => 0x19,
        DRM_COMMAND_BASE + DRM_AMDGPU_GEM_LIST_HANDLES => 0x59,
        size_of::<drm_amdgpu_gem_list_handles>() => 16,
        offset_of!(drm_amdgpu_gem_list_handles, entries) => 0,
        offset_of!(drm_amdgpu_gem_list_handles, num_entries) => 8,
        offset_of!(drm_amdgpu_gem_list_handles, padding) => 12,
        size_of::<drm_amdgpu_gem_list_handles_entry>() => 40,
        offset_of!(drm_amdgpu_gem_list_handles_entry, gem_handle) => 0,
        offset_of!(drm_amdgpu_gem_list_handles_entry, flags) => 4,
        offset_of!(drm_amdgpu_gem_list_handles_entry, size) => 8,
        offset_of!(drm_amdgpu_gem_list_handles_entry, preferred_domains) => 16,
        offset_of!(drm_amdgpu_gem_list_handles_entry, alloc_flags) => 24,
        offset_of!(drm_amdgpu_gem_list_handles_entry, alignment) => 32,
        AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT => 1,
        AMDGPU_GEM_DOMAIN_DOORBELL => 0x40,
        AMDGPU_GEM_DOMAIN_MMIO_REMAP => 0x80,
        AMDGPU_VM_PAGE_NOALLOC => 1u32 << 9,
        AMDGPU_CHUNK_ID_CP_GFX_SHADOW => 0xA,
        AMDGPU_FAMILY_GC_11_0_0 => 145,
        AMDGPU_FAMILY_GC_11_0_1 => 148,
        AMDGPU_FAMILY_GC_10_3_6 => 149,
        AMDGPU_FAMILY_GC_11_5_0 => 150,
        AMDGPU_FAMILY_GC_10_3_7 => 151,
        AMDGPU_FAMILY_GC_12_0_0 => 152,
        DRM_FILE_PAGE_OFFSET_START => 0x1_0000_0000u64,
    ]);
}

#[test]
fn drm_installed_layouts_match_spec() {
    // kernel.md §4.2 field tables (installed-header layouts).
    check(&rows![
        size_of::<drm_version>() => 64,
        offset_of!(drm_version, name_len) => 16,
        offset_of!(drm_version, desc) => 56,
        size_of::<drm_prime_handle>() => 12,
        offset_of!(drm_prime_handle, fd) => 8,
        size_of::<drm_amdgpu_gem_va>() => 40,
        offset_of!(drm_amdgpu_gem_va, operation) => 8,
        offset_of!(drm_amdgpu_gem_va, flags) => 12,
        offset_of!(drm_amdgpu_gem_va, va_address) => 16,
        offset_of!(drm_amdgpu_gem_va, offset_in_bo) => 24,
        offset_of!(drm_amdgpu_gem_va, map_size) => 32,
        size_of::<drm_amdgpu_gem_userptr>() => 24,
        offset_of!(drm_amdgpu_gem_userptr, flags) => 16,
        offset_of!(drm_amdgpu_gem_userptr, handle) => 20,
        size_of::<drm_amdgpu_cs_chunk_ib>() => 32,
        offset_of!(drm_amdgpu_cs_chunk_ib, va_start) => 8,
        offset_of!(drm_amdgpu_cs_chunk_ib, ib_bytes) => 16,
        offset_of!(drm_amdgpu_cs_chunk_ib, ip_type) => 20,
        offset_of!(drm_amdgpu_cs_chunk_ib, ip_instance) => 24,
        offset_of!(drm_amdgpu_cs_chunk_ib, ring) => 28,
        size_of::<drm_amdgpu_wait_cs_in>() => 32,
        offset_of!(drm_amdgpu_wait_cs_in, ctx_id) => 28,
        offset_of!(drm_amdgpu_info, request) => 16,
        size_of::<drm_amdgpu_info_hw_ip>() => 32,
        offset_of!(drm_amdgpu_info_hw_ip, available_rings) => 24,
        offset_of!(drm_amdgpu_info_device, family) => 16,
        offset_of!(drm_amdgpu_info_device, ids_flags) => 136,
        offset_of!(drm_amdgpu_info_device, virtual_address_offset) => 144,
        offset_of!(drm_amdgpu_info_device, virtual_address_max) => 152,
        offset_of!(drm_amdgpu_info_device, virtual_address_alignment) => 160,
        offset_of!(drm_amdgpu_info_device, high_va_offset) => 336,
        offset_of!(drm_amdgpu_info_device, high_va_max) => 344,
        AMDGPU_GEM_DOMAIN_CPU => 1,
        AMDGPU_GEM_DOMAIN_GTT => 2,
        AMDGPU_GEM_DOMAIN_VRAM => 4,
        AMDGPU_VA_OP_MAP => 1,
        AMDGPU_VA_OP_UNMAP => 2,
        AMDGPU_VA_OP_CLEAR => 3,
        AMDGPU_VA_OP_REPLACE => 4,
        AMDGPU_HW_IP_DMA => 2,
        AMDGPU_FAMILY_AI => 141,
        AMDGPU_INFO_DEV_INFO => 0x16,
        AMDGPU_INFO_HW_IP_INFO => 0x02,
        AMDGPU_INFO_HW_IP_COUNT => 0x03,
        AMDGPU_INFO_ACCEL_WORKING => 0x00,
        AMDGPU_INFO_READ_MMR_REG => 0x15,
    ]);
}

#[test]
fn sdma_packet_matches_spec() {
    // kernel.md §4.4.
    let header = SDMA_PKT_COPY_LINEAR_HEADER_OP(SDMA_OP_COPY)
        | SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP(SDMA_SUBOP_COPY_LINEAR);
    check(&rows![
        size_of::<sdma_pkt_copy_linear>() => 28,
        offset_of!(sdma_pkt_copy_linear, header) => 0,
        offset_of!(sdma_pkt_copy_linear, count) => 4,
        offset_of!(sdma_pkt_copy_linear, parameter) => 8,
        offset_of!(sdma_pkt_copy_linear, src_addr_lo) => 12,
        offset_of!(sdma_pkt_copy_linear, src_addr_hi) => 16,
        offset_of!(sdma_pkt_copy_linear, dst_addr_lo) => 20,
        offset_of!(sdma_pkt_copy_linear, dst_addr_hi) => 24,
        SDMA_OP_NOP => 0,
        SDMA_OP_COPY => 1,
        SDMA_SUBOP_COPY_LINEAR => 0,
        header => 0x0000_0001u32,
        SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP(0x1FF) => 0xFF00u32,
        SDMA_PKT_COPY_LINEAR_DWORDS => 7,
        SDMA_PKT_HEADER_op_mask => 0xFF,
        SDMA_PKT_HEADER_op_shift => 0,
        SDMA_PKT_HEADER_sub_op_mask => 0xFF,
        SDMA_PKT_HEADER_sub_op_shift => 8,
        SDMA_PKT_COPY_LINEAR_COUNT_count_mask => 0x3F_FFFFu32,
        SDMA_PKT_COPY_LINEAR_COUNT_count_shift => 0,
        SDMA_PKT_NOP_HEADER_count_mask => 0x3FFF,
        SDMA_PKT_NOP_HEADER_count_shift => 16,
        SDMA_PKT_COPY_LINEAR_COUNT_COUNT(0x40_0000 - 1) => 0x3F_FFFFu32,
        SDMA_PKT_NOP_HEADER_COUNT(3) => 3u32 << 16,
        SDMA_CIK_COPY_MAX_BYTES => 0x1F_FFFFu32,
        SDMA_V2_4_COPY_MAX_BYTES => 0x1F_FFFFu32,
        SDMA_V3_0_COPY_MAX_BYTES => 0x3F_FFE0u32,
        SDMA_V4_COPY_MAX_BYTES => 0x40_0000u32,
        SI_DMA_COPY_MAX_BYTES => 0xF_FFF8u32,
        SDMA_IB_ALIGNMENT => 32,
        SDMA_IB_PAD_DWORDS => 8,
    ]);
}

#[test]
fn sdma_queue_packets_match_the_kernel_headers() {
    // amdgpu's vega10_sdma_pkt_open.h (gfx9) and navi10_sdma_pkt_open.h
    // (GCR, gfx10), kfdtest's sdma_pkt_struct.h, ROCr's SDMA_ATOMIC_ADD64
    // (TC_OP_ATOMIC_ADD_RTN_64).
    check(&rows![
        SDMA_OP_WRITE => 2,
        SDMA_OP_INDIRECT => 4,
        SDMA_OP_FENCE => 5,
        SDMA_OP_TRAP => 6,
        SDMA_OP_SEM => 7,
        SDMA_OP_POLL_REGMEM => 8,
        SDMA_OP_COND_EXE => 9,
        SDMA_OP_ATOMIC => 10,
        SDMA_OP_CONST_FILL => 11,
        SDMA_OP_PTEPDE => 12,
        SDMA_OP_TIMESTAMP => 13,
        SDMA_OP_SRBM_WRITE => 14,
        SDMA_OP_PRE_EXE => 15,
        SDMA_OP_GCR => 17,
        SDMA_SUBOP_WRITE_LINEAR => 0,
        SDMA_SUBOP_COPY_LINEAR_RECT => 4,
        SDMA_SUBOP_TIMESTAMP_SET => 0,
        SDMA_SUBOP_TIMESTAMP_GET => 1,
        SDMA_SUBOP_TIMESTAMP_GET_GLOBAL => 2,
        SDMA_SUBOP_USER_GCR => 1,
        SDMA_ATOMIC_ADD64 => 47,
        SDMA_PKT_POLL_REGMEM_HEADER_hdp_flush_shift => 26,
        SDMA_PKT_POLL_REGMEM_HEADER_func_shift => 28,
        SDMA_PKT_POLL_REGMEM_HEADER_mem_poll_shift => 31,
        SDMA_POLL_RETRY_FOREVER => 0xFFF,
        SDMA_PKT_COPY_LINEAR_HEADER_broadcast_shift => 27,
    ]);
}

#[test]
fn pm4_packets_match_the_kernel_headers() {
    // amdkfd kfd_pm4_opcodes.h (= kfdtest's copy), kfdtest's
    // pm4_pkt_struct_common.h (PM4_TYPE_3_HEADER: predicate bit 0, shader
    // type bit 1, opcode 15:8, count 29:16, type 31:30) and
    // pm4_pkt_struct_ai.h (event_index), gfx_7_2 register headers.
    let header = (3 << PM4_TYPE_SHIFT)
        | ((2 & PM4_COUNT_MASK) << PM4_COUNT_SHIFT)
        | ((IT_WRITE_DATA & PM4_OPCODE_MASK) << PM4_OPCODE_SHIFT);
    check(&rows![
        header => 0xC002_3700u32,
        PM4_NOP_ONE_DWORD_COUNT => 0x3FFF,
        IT_NOP => 0x10,
        IT_DISPATCH_DIRECT => 0x15,
        IT_DISPATCH_INDIRECT => 0x16,
        IT_WRITE_DATA => 0x37,
        IT_WAIT_REG_MEM => 0x3C,
        IT_INDIRECT_BUFFER => 0x3F,
        IT_EVENT_WRITE => 0x46,
        IT_EVENT_WRITE_EOP => 0x47,
        IT_RELEASE_MEM => 0x49,
        IT_ACQUIRE_MEM => 0x58,
        IT_SET_SH_REG => 0x76,
        EVENT_INDEX_END_OF_PIPE => 5,
        EVENT_INDEX_CS_PARTIAL_FLUSH => 4,
        PERSISTENT_SPACE_START => 0x2C00,
        MMCOMPUTE_PGM_LO => 0x2E0C,
    ]);
}
