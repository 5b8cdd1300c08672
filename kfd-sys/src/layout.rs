//! Compile-time layout assertions: the size and alignment of every `#[repr(C)]` struct
//! and union of the crate, and the offset of every field of each, as
//! `const _: () = assert!(...)` items.
//!
//! The numbers are the x86-64 Linux ABI of the kernel uapi and libdrm headers. They were
//! taken from `sizeof`, `_Alignof` and `offsetof` of the installed C headers (KFD ioctl
//! 1.11, libdrm 2.4.114) and, for the items newer than those headers, of the upstream
//! kernel definitions, compiled the same way. A type whose layout drifts from them fails
//! the build on every machine, whether or not C headers are installed; `tests/abi.rs`
//! additionally compares the crate with whatever headers the machine has, request codes
//! and constants included.
//!
//! Covered: 101 structs and unions (424 fields). Fields named `_pad*` that C leaves
//! implicit are asserted at the offset C gives to that padding; a union's members all
//! sit at offset 0; the anonymous C unions the crate names (`kfd_event_data_exception`,
//! `drm_amdgpu_info_request`) have the size and alignment of the unnamed member. A
//! test below fails when a `#[repr(C)]` type or one of its fields is missing here.
//!
//! The table holds on every 64-bit Linux target (all align `u64` to 8 and have 8-byte
//! pointers), so the module is compiled there and only there: 32-bit targets disagree
//! among themselves on `u64` alignment (4 on i386, 8 on arm), and the checkpoint path
//! is 64-bit only anyway (amdkfd is built only for 64-bit kernels). This module only
//! asserts: it must never define an item that the rest of the crate uses.

use core::mem::offset_of;

use crate::*;

/// `layout! { Type: size N, align A { field: offset, ... } ... }` asserts `size_of`,
/// `align_of` and each field's `offset_of!`; a mismatch names the item in the error.
macro_rules! layout {
    ($(
        $t:ident: size $size:literal, align $align:literal {
            $($f:ident: $off:literal),* $(,)?
        }
    )*) => {$(
        const _: () = assert!(
            size_of::<$t>() == $size,
            concat!("layout: size_of::<", stringify!($t), ">() is not ", stringify!($size)),
        );
        const _: () = assert!(
            align_of::<$t>() == $align,
            concat!("layout: align_of::<", stringify!($t), ">() is not ", stringify!($align)),
        );
        $(
            const _: () = assert!(
                offset_of!($t, $f) == $off,
                concat!(
                    "layout: offset_of!(", stringify!($t), ", ", stringify!($f), ") is not ",
                    stringify!($off),
                ),
            );
        )*
    )*};
}

// kfd.rs: `linux/kfd_ioctl.h` 1.11, plus the 1.12 export argument.
layout! {
    kfd_ioctl_get_version_args: size 8, align 4 {
        major_version: 0,
        minor_version: 4,
    }
    kfd_ioctl_create_queue_args: size 88, align 8 {
        ring_base_address: 0,
        write_pointer_address: 8,
        read_pointer_address: 16,
        doorbell_offset: 24,
        ring_size: 32,
        gpu_id: 36,
        queue_type: 40,
        queue_percentage: 44,
        queue_priority: 48,
        queue_id: 52,
        eop_buffer_address: 56,
        eop_buffer_size: 64,
        ctx_save_restore_address: 72,
        ctx_save_restore_size: 80,
        ctl_stack_size: 84,
    }
    kfd_ioctl_destroy_queue_args: size 8, align 4 {
        queue_id: 0,
        pad: 4,
    }
    kfd_ioctl_update_queue_args: size 24, align 8 {
        ring_base_address: 0,
        queue_id: 8,
        ring_size: 12,
        queue_percentage: 16,
        queue_priority: 20,
    }
    kfd_ioctl_set_cu_mask_args: size 16, align 8 {
        queue_id: 0,
        num_cu_mask: 4,
        cu_mask_ptr: 8,
    }
    kfd_ioctl_get_queue_wave_state_args: size 24, align 8 {
        ctl_stack_address: 0,
        ctl_stack_used_size: 8,
        save_area_used_size: 12,
        queue_id: 16,
        pad: 20,
    }
    kfd_ioctl_get_available_memory_args: size 16, align 8 {
        available: 0,
        gpu_id: 8,
        pad: 12,
    }
    kfd_ioctl_set_memory_policy_args: size 32, align 8 {
        alternate_aperture_base: 0,
        alternate_aperture_size: 8,
        gpu_id: 16,
        default_policy: 20,
        alternate_policy: 24,
        pad: 28,
    }
    kfd_ioctl_get_clock_counters_args: size 40, align 8 {
        gpu_clock_counter: 0,
        cpu_clock_counter: 8,
        system_clock_counter: 16,
        system_clock_freq: 24,
        gpu_id: 32,
        pad: 36,
    }
    kfd_process_device_apertures: size 56, align 8 {
        lds_base: 0,
        lds_limit: 8,
        scratch_base: 16,
        scratch_limit: 24,
        gpuvm_base: 32,
        gpuvm_limit: 40,
        gpu_id: 48,
        pad: 52,
    }
    kfd_ioctl_get_process_apertures_args: size 400, align 8 {
        process_apertures: 0,
        num_of_nodes: 392,
        pad: 396,
    }
    kfd_ioctl_get_process_apertures_new_args: size 16, align 8 {
        kfd_process_device_apertures_ptr: 0,
        num_of_nodes: 8,
        pad: 12,
    }
    kfd_ioctl_dbg_register_args: size 8, align 4 {
        gpu_id: 0,
        pad: 4,
    }
    kfd_ioctl_dbg_unregister_args: size 8, align 4 {
        gpu_id: 0,
        pad: 4,
    }
    kfd_ioctl_dbg_address_watch_args: size 16, align 8 {
        content_ptr: 0,
        gpu_id: 8,
        buf_size_in_bytes: 12,
    }
    kfd_ioctl_dbg_wave_control_args: size 16, align 8 {
        content_ptr: 0,
        gpu_id: 8,
        buf_size_in_bytes: 12,
    }
    kfd_ioctl_create_event_args: size 32, align 8 {
        event_page_offset: 0,
        event_trigger_data: 8,
        event_type: 12,
        auto_reset: 16,
        node_id: 20,
        event_id: 24,
        event_slot_index: 28,
    }
    kfd_ioctl_destroy_event_args: size 8, align 4 {
        event_id: 0,
        pad: 4,
    }
    kfd_ioctl_set_event_args: size 8, align 4 {
        event_id: 0,
        pad: 4,
    }
    kfd_ioctl_reset_event_args: size 8, align 4 {
        event_id: 0,
        pad: 4,
    }
    kfd_memory_exception_failure: size 16, align 4 {
        NotPresent: 0,
        ReadOnly: 4,
        NoExecute: 8,
        imprecise: 12,
    }
    kfd_hsa_memory_exception_data: size 32, align 8 {
        failure: 0,
        va: 16,
        gpu_id: 24,
        ErrorType: 28,
    }
    kfd_hsa_hw_exception_data: size 16, align 4 {
        reset_type: 0,
        reset_cause: 4,
        memory_lost: 8,
        gpu_id: 12,
    }
    // The anonymous union at offset 0 of `struct kfd_event_data`.
    kfd_event_data_exception: size 32, align 8 {
        memory_exception_data: 0,
        hw_exception_data: 0,
    }
    kfd_event_data: size 48, align 8 {
        exception_data: 0,
        kfd_event_data_ext: 32,
        event_id: 40,
        pad: 44,
    }
    kfd_ioctl_wait_events_args: size 24, align 8 {
        events_ptr: 0,
        num_events: 8,
        wait_for_all: 12,
        timeout: 16,
        wait_result: 20,
    }
    kfd_ioctl_set_scratch_backing_va_args: size 16, align 8 {
        va_addr: 0,
        gpu_id: 8,
        pad: 12,
    }
    kfd_ioctl_get_tile_config_args: size 40, align 8 {
        tile_config_ptr: 0,
        macro_tile_config_ptr: 8,
        num_tile_configs: 16,
        num_macro_tile_configs: 20,
        gpu_id: 24,
        gb_addr_config: 28,
        num_banks: 32,
        num_ranks: 36,
    }
    kfd_ioctl_set_trap_handler_args: size 24, align 8 {
        tba_addr: 0,
        tma_addr: 8,
        gpu_id: 16,
        pad: 20,
    }
    kfd_ioctl_acquire_vm_args: size 8, align 4 {
        drm_fd: 0,
        gpu_id: 4,
    }
    kfd_ioctl_alloc_memory_of_gpu_args: size 40, align 8 {
        va_addr: 0,
        size: 8,
        handle: 16,
        mmap_offset: 24,
        gpu_id: 32,
        flags: 36,
    }
    kfd_ioctl_free_memory_of_gpu_args: size 8, align 8 {
        handle: 0,
    }
    kfd_ioctl_map_memory_to_gpu_args: size 24, align 8 {
        handle: 0,
        device_ids_array_ptr: 8,
        n_devices: 16,
        n_success: 20,
    }
    kfd_ioctl_unmap_memory_from_gpu_args: size 24, align 8 {
        handle: 0,
        device_ids_array_ptr: 8,
        n_devices: 16,
        n_success: 20,
    }
    kfd_ioctl_alloc_queue_gws_args: size 16, align 4 {
        queue_id: 0,
        num_gws: 4,
        first_gws: 8,
        pad: 12,
    }
    kfd_ioctl_get_dmabuf_info_args: size 32, align 8 {
        size: 0,
        metadata_ptr: 8,
        metadata_size: 16,
        gpu_id: 20,
        flags: 24,
        dmabuf_fd: 28,
    }
    kfd_ioctl_import_dmabuf_args: size 24, align 8 {
        va_addr: 0,
        handle: 8,
        gpu_id: 16,
        dmabuf_fd: 20,
    }
    // KFD ioctl 1.12, newer than the installed header.
    kfd_ioctl_export_dmabuf_args: size 16, align 8 {
        handle: 0,
        flags: 8,
        dmabuf_fd: 12,
    }
    kfd_ioctl_smi_events_args: size 8, align 4 {
        gpuid: 0,
        anon_fd: 4,
    }
    // `_pad` is C's implicit tail padding.
    kfd_ioctl_criu_args: size 56, align 8 {
        devices: 0,
        bos: 8,
        priv_data: 16,
        priv_data_size: 24,
        num_devices: 32,
        num_bos: 36,
        num_objects: 40,
        pid: 44,
        op: 48,
        _pad: 52,
    }
    kfd_criu_device_bucket: size 16, align 4 {
        user_gpu_id: 0,
        actual_gpu_id: 4,
        drm_fd: 8,
        pad: 12,
    }
    kfd_criu_bo_bucket: size 48, align 8 {
        addr: 0,
        size: 8,
        offset: 16,
        restored_offset: 24,
        gpu_id: 32,
        alloc_flags: 36,
        dmabuf_fd: 40,
        pad: 44,
    }
    kfd_ioctl_svm_attribute: size 8, align 4 {
        r#type: 0,
        value: 4,
    }
    kfd_ioctl_svm_args: size 24, align 8 {
        start_addr: 0,
        size: 8,
        op: 16,
        nattr: 20,
        attrs: 24,
    }
    kfd_ioctl_set_xnack_mode_args: size 4, align 4 {
        xnack_enabled: 0,
    }
}

// drm.rs: `drm.h`.
layout! {
    // `_pad0` is C's implicit padding before `name_len`.
    drm_version: size 64, align 8 {
        version_major: 0,
        version_minor: 4,
        version_patchlevel: 8,
        _pad0: 12,
        name_len: 16,
        name: 24,
        date_len: 32,
        date: 40,
        desc_len: 48,
        desc: 56,
    }
    drm_gem_close: size 8, align 4 {
        handle: 0,
        pad: 4,
    }
    drm_prime_handle: size 12, align 4 {
        handle: 0,
        flags: 4,
        fd: 8,
    }
    // Newer than the installed header: upstream `drm.h`.
    drm_gem_change_handle: size 8, align 4 {
        handle: 0,
        new_handle: 4,
    }
}

// amdgpu_drm.rs: `amdgpu_drm.h`.
layout! {
    drm_amdgpu_gem_create_in: size 32, align 8 {
        bo_size: 0,
        alignment: 8,
        domains: 16,
        domain_flags: 24,
    }
    drm_amdgpu_gem_create_out: size 8, align 4 {
        handle: 0,
        _pad: 4,
    }
    drm_amdgpu_gem_create: size 32, align 8 {
        r#in: 0,
        out: 0,
    }
    drm_amdgpu_bo_list_in: size 24, align 8 {
        operation: 0,
        list_handle: 4,
        bo_number: 8,
        bo_info_size: 12,
        bo_info_ptr: 16,
    }
    drm_amdgpu_bo_list_entry: size 8, align 4 {
        bo_handle: 0,
        bo_priority: 4,
    }
    drm_amdgpu_bo_list_out: size 8, align 4 {
        list_handle: 0,
        _pad: 4,
    }
    drm_amdgpu_bo_list: size 24, align 8 {
        r#in: 0,
        out: 0,
    }
    drm_amdgpu_ctx_in: size 16, align 4 {
        op: 0,
        flags: 4,
        ctx_id: 8,
        priority: 12,
    }
    drm_amdgpu_ctx_out_alloc: size 8, align 4 {
        ctx_id: 0,
        _pad: 4,
    }
    drm_amdgpu_ctx_out_state: size 16, align 8 {
        flags: 0,
        hangs: 8,
        reset_status: 12,
    }
    drm_amdgpu_ctx_out_pstate: size 8, align 4 {
        flags: 0,
        _pad: 4,
    }
    drm_amdgpu_ctx_out: size 16, align 8 {
        alloc: 0,
        state: 0,
        pstate: 0,
    }
    drm_amdgpu_ctx: size 16, align 8 {
        r#in: 0,
        out: 0,
    }
    drm_amdgpu_gem_metadata_data: size 280, align 8 {
        flags: 0,
        tiling_info: 8,
        data_size_bytes: 16,
        data: 20,
        _pad: 276,
    }
    drm_amdgpu_gem_metadata: size 288, align 8 {
        handle: 0,
        op: 4,
        data: 8,
    }
    drm_amdgpu_gem_userptr: size 24, align 8 {
        addr: 0,
        size: 8,
        flags: 16,
        handle: 20,
    }
    drm_amdgpu_gem_mmap_in: size 8, align 4 {
        handle: 0,
        _pad: 4,
    }
    drm_amdgpu_gem_mmap_out: size 8, align 8 {
        addr_ptr: 0,
    }
    drm_amdgpu_gem_mmap: size 8, align 8 {
        r#in: 0,
        out: 0,
    }
    drm_amdgpu_wait_cs_in: size 32, align 8 {
        handle: 0,
        timeout: 8,
        ip_type: 16,
        ip_instance: 20,
        ring: 24,
        ctx_id: 28,
    }
    drm_amdgpu_wait_cs_out: size 8, align 8 {
        status: 0,
    }
    drm_amdgpu_wait_cs: size 32, align 8 {
        r#in: 0,
        out: 0,
    }
    // The upstream 24-byte layout; the installed header's 16 bytes are its prefix.
    drm_amdgpu_gem_op: size 24, align 8 {
        handle: 0,
        op: 4,
        value: 8,
        num_entries: 16,
        padding: 20,
    }
    // Newer than the installed header: upstream `amdgpu_drm.h`.
    drm_amdgpu_gem_vm_entry: size 32, align 8 {
        addr: 0,
        size: 8,
        offset: 16,
        flags: 24,
    }
    // Newer than the installed header: upstream `amdgpu_drm.h`.
    drm_amdgpu_gem_list_handles: size 16, align 8 {
        entries: 0,
        num_entries: 8,
        padding: 12,
    }
    // Newer than the installed header: upstream `amdgpu_drm.h`.
    drm_amdgpu_gem_list_handles_entry: size 40, align 8 {
        gem_handle: 0,
        flags: 4,
        size: 8,
        preferred_domains: 16,
        alloc_flags: 24,
        alignment: 32,
    }
    drm_amdgpu_gem_va: size 40, align 8 {
        handle: 0,
        _pad: 4,
        operation: 8,
        flags: 12,
        va_address: 16,
        offset_in_bo: 24,
        map_size: 32,
    }
    drm_amdgpu_cs_chunk: size 16, align 8 {
        chunk_id: 0,
        length_dw: 4,
        chunk_data: 8,
    }
    drm_amdgpu_cs_in: size 24, align 8 {
        ctx_id: 0,
        bo_list_handle: 4,
        num_chunks: 8,
        flags: 12,
        chunks: 16,
    }
    drm_amdgpu_cs_out: size 8, align 8 {
        handle: 0,
    }
    drm_amdgpu_cs: size 24, align 8 {
        r#in: 0,
        out: 0,
    }
    drm_amdgpu_cs_chunk_ib: size 32, align 8 {
        _pad: 0,
        flags: 4,
        va_start: 8,
        ib_bytes: 16,
        ip_type: 20,
        ip_instance: 24,
        ring: 28,
    }
    drm_amdgpu_cs_chunk_dep: size 24, align 8 {
        ip_type: 0,
        ip_instance: 4,
        ring: 8,
        ctx_id: 12,
        handle: 16,
    }
    drm_amdgpu_cs_chunk_fence: size 8, align 4 {
        handle: 0,
        offset: 4,
    }
    drm_amdgpu_cs_chunk_syncobj: size 16, align 8 {
        handle: 0,
        flags: 4,
        point: 8,
    }
    // In C a struct wrapping an anonymous union.
    drm_amdgpu_cs_chunk_data: size 32, align 8 {
        ib_data: 0,
        fence_data: 0,
    }
    drm_amdgpu_query_fw: size 16, align 4 {
        fw_type: 0,
        ip_instance: 4,
        index: 8,
        _pad: 12,
    }
    drm_amdgpu_info_firmware: size 8, align 4 {
        ver: 0,
        feature: 4,
    }
    drm_amdgpu_info_mode_crtc: size 8, align 4 {
        id: 0,
        _pad: 4,
    }
    drm_amdgpu_info_query_hw_ip: size 8, align 4 {
        r#type: 0,
        ip_instance: 4,
    }
    drm_amdgpu_info_read_mmr_reg: size 16, align 4 {
        dword_offset: 0,
        count: 4,
        instance: 8,
        flags: 12,
    }
    drm_amdgpu_info_vbios_info: size 8, align 4 {
        r#type: 0,
        offset: 4,
    }
    drm_amdgpu_info_sensor_info: size 4, align 4 {
        r#type: 0,
    }
    drm_amdgpu_info_video_cap: size 4, align 4 {
        r#type: 0,
    }
    // The anonymous union at offset 16 of `struct drm_amdgpu_info`.
    drm_amdgpu_info_request: size 16, align 4 {
        mode_crtc: 0,
        query_hw_ip: 0,
        read_mmr_reg: 0,
        query_fw: 0,
        vbios_info: 0,
        sensor_info: 0,
        video_cap: 0,
    }
    drm_amdgpu_info: size 32, align 8 {
        return_pointer: 0,
        return_size: 8,
        query: 12,
        request: 16,
    }
    drm_amdgpu_info_vram_gtt: size 24, align 8 {
        vram_size: 0,
        vram_cpu_accessible_size: 8,
        gtt_size: 16,
    }
    drm_amdgpu_heap_info: size 32, align 8 {
        total_heap_size: 0,
        usable_heap_size: 8,
        heap_usage: 16,
        max_allocation: 24,
    }
    drm_amdgpu_memory_info: size 96, align 8 {
        vram: 0,
        cpu_accessible_vram: 32,
        gtt: 64,
    }
    // `_pad2` is C's implicit padding before `tcc_disabled_mask`.
    drm_amdgpu_info_device: size 368, align 8 {
        device_id: 0,
        chip_rev: 4,
        external_rev: 8,
        pci_rev: 12,
        family: 16,
        num_shader_engines: 20,
        num_shader_arrays_per_engine: 24,
        gpu_counter_freq: 28,
        max_engine_clock: 32,
        max_memory_clock: 40,
        cu_active_number: 48,
        cu_ao_mask: 52,
        cu_bitmap: 56,
        enabled_rb_pipes_mask: 120,
        num_rb_pipes: 124,
        num_hw_gfx_contexts: 128,
        _pad: 132,
        ids_flags: 136,
        virtual_address_offset: 144,
        virtual_address_max: 152,
        virtual_address_alignment: 160,
        pte_fragment_size: 164,
        gart_page_size: 168,
        ce_ram_size: 172,
        vram_type: 176,
        vram_bit_width: 180,
        vce_harvest_config: 184,
        gc_double_offchip_lds_buf: 188,
        prim_buf_gpu_addr: 192,
        pos_buf_gpu_addr: 200,
        cntl_sb_buf_gpu_addr: 208,
        param_buf_gpu_addr: 216,
        prim_buf_size: 224,
        pos_buf_size: 228,
        cntl_sb_buf_size: 232,
        param_buf_size: 236,
        wave_front_size: 240,
        num_shader_visible_vgprs: 244,
        num_cu_per_sh: 248,
        num_tcc_blocks: 252,
        gs_vgt_table_depth: 256,
        gs_prim_buffer_depth: 260,
        max_gs_waves_per_vgt: 264,
        _pad1: 268,
        cu_ao_bitmap: 272,
        high_va_offset: 336,
        high_va_max: 344,
        pa_sc_tile_steering_override: 352,
        _pad2: 356,
        tcc_disabled_mask: 360,
    }
    drm_amdgpu_info_hw_ip: size 32, align 8 {
        hw_ip_version_major: 0,
        hw_ip_version_minor: 4,
        capabilities_flags: 8,
        ib_start_alignment: 16,
        ib_size_alignment: 20,
        available_rings: 24,
        _pad: 28,
    }
}

// sdma.rs: the SDMA linear-copy packet.
layout! {
    // Seven dwords of `SDMA_PKT_COPY_LINEAR` (kernel `sdma_v4_0` packet header).
    sdma_pkt_copy_linear: size 28, align 4 {
        header: 0,
        count: 4,
        parameter: 8,
        src_addr_lo: 12,
        src_addr_hi: 16,
        dst_addr_lo: 20,
        dst_addr_hi: 24,
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::format;
    use std::vec::Vec;

    /// The crate's source files, by the module name `lib.rs` declares them with.
    const SOURCES: &[(&str, &str)] = &[
        ("amdgpu_drm", include_str!("amdgpu_drm.rs")),
        ("drm", include_str!("drm.rs")),
        ("ioctl", include_str!("ioctl.rs")),
        ("kfd", include_str!("kfd.rs")),
        ("sdma", include_str!("sdma.rs")),
        ("pm4", include_str!("pm4.rs")),
    ];
    const LIB: &str = include_str!("lib.rs");
    const LAYOUT: &str = include_str!("layout.rs");

    /// A `#[repr(C)]` struct or union of the sources, with its field names.
    struct ReprC<'a> {
        name: &'a str,
        fields: Vec<&'a str>,
    }

    /// The `#[repr(C)]` types declared in `src`, in order.
    fn repr_c_types(src: &str) -> Vec<ReprC<'_>> {
        let mut types = Vec::new();
        let mut lines = src.lines();
        while lines.by_ref().any(|l| l.trim().starts_with("#[repr(C")) {
            let decl = lines
                .by_ref()
                .find(|l| l.starts_with("pub "))
                .expect("#[repr(C)] without a following item");
            let rest = decl
                .strip_prefix("pub struct ")
                .or_else(|| decl.strip_prefix("pub union "))
                .unwrap_or_else(|| panic!("#[repr(C)] on neither a struct nor a union: {decl}"));
            let name = rest.split([' ', '{']).next().unwrap();
            let fields = lines
                .by_ref()
                .take_while(|l| *l != "}")
                .filter_map(|l| l.strip_prefix("    pub ")?.split(':').next())
                .collect();
            types.push(ReprC { name, fields });
        }
        types
    }

    /// The entry of `name` in the table: from its `name: size` line to its closing brace.
    fn layout_entry(name: &str) -> Option<&'static str> {
        let start = LAYOUT.find(&format!("\n    {name}: size "))?;
        let len = LAYOUT[start..].find("\n    }")?;
        Some(&LAYOUT[start..start + len])
    }

    #[test]
    fn every_source_file_is_scanned() {
        for line in LIB.lines() {
            if let Some(module) = line
                .strip_prefix("pub mod ")
                .and_then(|m| m.strip_suffix(';'))
            {
                assert!(
                    SOURCES.iter().any(|(name, _)| *name == module),
                    "src/{module}.rs is missing from SOURCES; add it so its types are checked"
                );
            }
        }
    }

    #[test]
    fn every_repr_c_type_and_field_is_asserted() {
        let mut missing = Vec::new();
        let (mut types, mut fields) = (0, 0);
        for (_, src) in SOURCES {
            for ty in repr_c_types(src) {
                types += 1;
                fields += ty.fields.len();
                let Some(entry) = layout_entry(ty.name) else {
                    missing.push(format!("{}: no entry", ty.name));
                    continue;
                };
                for field in &ty.fields {
                    if !entry.contains(&format!("\n        {field}: ")) {
                        missing.push(format!("{}.{field}: no offset", ty.name));
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "not asserted in layout.rs:\n{}",
            missing.join("\n")
        );
        let stated = format!("Covered: {types} structs and unions ({fields} fields)");
        assert!(
            LAYOUT.contains(&stated),
            "the module doc should say \"{stated}\""
        );
    }
}
