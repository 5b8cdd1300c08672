//! `amdgpu_drm.h` (libdrm's copy of the amdgpu uapi): the subset a userspace SDMA copier
//! and render-node BO checkpointing need.
//!
//! GEM create/mmap/userptr/VA/op, contexts, BO lists, command submission, fence waits
//! and the device/IP info queries, with their constants. Layouts are those of the
//! installed libdrm 2.4.114 header, except where noted: items marked "newer than the
//! installed header" follow the upstream kernel header (`drm_amdgpu_gem_op` with
//! `num_entries`, `GEM_LIST_HANDLES`, `GET_MAPPING_INFO`, later families and domains).
//! Anonymous C structs and unions get a Rust name built from their parent and member
//! names. This module holds data definitions only: it must never perform an ioctl.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::drm::{DRM_COMMAND_BASE, DRM_IOCTL_BASE};
use crate::ioctl::{_IOW, _IOWR};

/// Command number of GEM_CREATE (relative to [`DRM_COMMAND_BASE`]).
pub const DRM_AMDGPU_GEM_CREATE: u8 = 0x00;
/// Command number of GEM_MMAP.
pub const DRM_AMDGPU_GEM_MMAP: u8 = 0x01;
/// Command number of CTX.
pub const DRM_AMDGPU_CTX: u8 = 0x02;
/// Command number of BO_LIST.
pub const DRM_AMDGPU_BO_LIST: u8 = 0x03;
/// Command number of CS.
pub const DRM_AMDGPU_CS: u8 = 0x04;
/// Command number of INFO.
pub const DRM_AMDGPU_INFO: u8 = 0x05;
/// Command number of GEM_METADATA.
pub const DRM_AMDGPU_GEM_METADATA: u8 = 0x06;
/// Command number of GEM_WAIT_IDLE.
pub const DRM_AMDGPU_GEM_WAIT_IDLE: u8 = 0x07;
/// Command number of GEM_VA.
pub const DRM_AMDGPU_GEM_VA: u8 = 0x08;
/// Command number of WAIT_CS.
pub const DRM_AMDGPU_WAIT_CS: u8 = 0x09;
/// Command number of GEM_OP.
pub const DRM_AMDGPU_GEM_OP: u8 = 0x10;
/// Command number of GEM_USERPTR.
pub const DRM_AMDGPU_GEM_USERPTR: u8 = 0x11;
/// Command number of WAIT_FENCES.
pub const DRM_AMDGPU_WAIT_FENCES: u8 = 0x12;
/// Command number of VM.
pub const DRM_AMDGPU_VM: u8 = 0x13;
/// Command number of FENCE_TO_HANDLE.
pub const DRM_AMDGPU_FENCE_TO_HANDLE: u8 = 0x14;
/// Command number of SCHED.
pub const DRM_AMDGPU_SCHED: u8 = 0x15;
/// Command number of GEM_LIST_HANDLES (newer than the installed header).
pub const DRM_AMDGPU_GEM_LIST_HANDLES: u8 = 0x19;

/// Memory domain: system memory not accessible by the GPU.
pub const AMDGPU_GEM_DOMAIN_CPU: u32 = 0x1;
/// Memory domain: GPU-accessible system memory behind the GART.
pub const AMDGPU_GEM_DOMAIN_GTT: u32 = 0x2;
/// Memory domain: local video memory.
pub const AMDGPU_GEM_DOMAIN_VRAM: u32 = 0x4;
/// Memory domain: global data share.
pub const AMDGPU_GEM_DOMAIN_GDS: u32 = 0x8;
/// Memory domain: global wave sync.
pub const AMDGPU_GEM_DOMAIN_GWS: u32 = 0x10;
/// Memory domain: ordered append.
pub const AMDGPU_GEM_DOMAIN_OA: u32 = 0x20;
/// Memory domain: doorbell (newer than the installed header; GEM_CREATE rejects it).
pub const AMDGPU_GEM_DOMAIN_DOORBELL: u32 = 0x40;
/// Memory domain: remapped MMIO (newer than the installed header).
pub const AMDGPU_GEM_DOMAIN_MMIO_REMAP: u32 = 0x80;
/// All domains of the installed header (CPU through OA).
pub const AMDGPU_GEM_DOMAIN_MASK: u32 = AMDGPU_GEM_DOMAIN_CPU
    | AMDGPU_GEM_DOMAIN_GTT
    | AMDGPU_GEM_DOMAIN_VRAM
    | AMDGPU_GEM_DOMAIN_GDS
    | AMDGPU_GEM_DOMAIN_GWS
    | AMDGPU_GEM_DOMAIN_OA;

/// Create flag: the CPU will access this VRAM BO.
pub const AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED: u64 = 1 << 0;
/// Create flag: the CPU will not access this BO (invisible VRAM).
pub const AMDGPU_GEM_CREATE_NO_CPU_ACCESS: u64 = 1 << 1;
/// Create flag: use USWC attributes for GTT.
pub const AMDGPU_GEM_CREATE_CPU_GTT_USWC: u64 = 1 << 2;
/// Create flag: clear the VRAM.
pub const AMDGPU_GEM_CREATE_VRAM_CLEARED: u64 = 1 << 3;
/// Create flag: contiguous VRAM.
pub const AMDGPU_GEM_CREATE_VRAM_CONTIGUOUS: u64 = 1 << 5;
/// Create flag: the BO is always valid in this VM (cannot be exported).
pub const AMDGPU_GEM_CREATE_VM_ALWAYS_VALID: u64 = 1 << 6;
/// Create flag: sharing is explicitly synchronised.
pub const AMDGPU_GEM_CREATE_EXPLICIT_SYNC: u64 = 1 << 7;
/// Create flag: MQD on GFX9 (kernel use only).
pub const AMDGPU_GEM_CREATE_CP_MQD_GFX9: u64 = 1 << 8;
/// Create flag: wipe the VRAM on release.
pub const AMDGPU_GEM_CREATE_VRAM_WIPE_ON_RELEASE: u64 = 1 << 9;
/// Create flag: encrypted (TMZ).
pub const AMDGPU_GEM_CREATE_ENCRYPTED: u64 = 1 << 10;
/// Create flag: used only in preemptible contexts.
pub const AMDGPU_GEM_CREATE_PREEMPTIBLE: u64 = 1 << 11;

/// Input of [`DRM_IOCTL_AMDGPU_GEM_CREATE`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_create_in {
    /// Requested size in bytes.
    pub bo_size: u64,
    /// Physical start alignment in bytes.
    pub alignment: u64,
    /// `AMDGPU_GEM_DOMAIN_*` bits.
    pub domains: u64,
    /// `AMDGPU_GEM_CREATE_*` bits.
    pub domain_flags: u64,
}

/// Output of [`DRM_IOCTL_AMDGPU_GEM_CREATE`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_create_out {
    /// New GEM handle.
    pub handle: u32,
    /// Padding.
    pub _pad: u32,
}

/// Argument of [`DRM_IOCTL_AMDGPU_GEM_CREATE`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, Immutable, KnownLayout)]
pub union drm_amdgpu_gem_create {
    /// Input.
    pub r#in: drm_amdgpu_gem_create_in,
    /// Output.
    pub out: drm_amdgpu_gem_create_out,
}
crate::union_impls!(drm_amdgpu_gem_create);

/// BO list operation: create a list.
pub const AMDGPU_BO_LIST_OP_CREATE: u32 = 0;
/// BO list operation: destroy a list.
pub const AMDGPU_BO_LIST_OP_DESTROY: u32 = 1;
/// BO list operation: replace a list's entries.
pub const AMDGPU_BO_LIST_OP_UPDATE: u32 = 2;

/// Input of [`DRM_IOCTL_AMDGPU_BO_LIST`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_bo_list_in {
    /// One of `AMDGPU_BO_LIST_OP_*`.
    pub operation: u32,
    /// List handle, or 0 to create one.
    pub list_handle: u32,
    /// Number of entries.
    pub bo_number: u32,
    /// Size of one entry (8 for [`drm_amdgpu_bo_list_entry`]).
    pub bo_info_size: u32,
    /// User pointer to the entry array.
    pub bo_info_ptr: u64,
}

/// One BO of a BO list.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_bo_list_entry {
    /// GEM handle.
    pub bo_handle: u32,
    /// Priority used during migration.
    pub bo_priority: u32,
}

/// Output of [`DRM_IOCTL_AMDGPU_BO_LIST`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_bo_list_out {
    /// Handle of the list.
    pub list_handle: u32,
    /// Padding.
    pub _pad: u32,
}

/// Argument of [`DRM_IOCTL_AMDGPU_BO_LIST`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, Immutable, KnownLayout)]
pub union drm_amdgpu_bo_list {
    /// Input.
    pub r#in: drm_amdgpu_bo_list_in,
    /// Output.
    pub out: drm_amdgpu_bo_list_out,
}
crate::union_impls!(drm_amdgpu_bo_list);

/// Context operation: allocate.
pub const AMDGPU_CTX_OP_ALLOC_CTX: u32 = 1;
/// Context operation: free.
pub const AMDGPU_CTX_OP_FREE_CTX: u32 = 2;
/// Context operation: query reset state.
pub const AMDGPU_CTX_OP_QUERY_STATE: u32 = 3;
/// Context operation: query reset state, flags variant.
pub const AMDGPU_CTX_OP_QUERY_STATE2: u32 = 4;
/// Context operation: get the stable power state.
pub const AMDGPU_CTX_OP_GET_STABLE_PSTATE: u32 = 5;
/// Context operation: set the stable power state.
pub const AMDGPU_CTX_OP_SET_STABLE_PSTATE: u32 = 6;

/// Reset status: no reset.
pub const AMDGPU_CTX_NO_RESET: u32 = 0;
/// Reset status: this context caused it.
pub const AMDGPU_CTX_GUILTY_RESET: u32 = 1;
/// Reset status: another context caused it.
pub const AMDGPU_CTX_INNOCENT_RESET: u32 = 2;
/// Reset status: unknown cause.
pub const AMDGPU_CTX_UNKNOWN_RESET: u32 = 3;

/// QUERY_STATE2 flag: a GPU reset happened since the context was created.
pub const AMDGPU_CTX_QUERY2_FLAGS_RESET: u64 = 1 << 0;
/// QUERY_STATE2 flag: VRAM was lost since the context was created.
pub const AMDGPU_CTX_QUERY2_FLAGS_VRAMLOST: u64 = 1 << 1;
/// QUERY_STATE2 flag: a job of this context hung the GPU.
pub const AMDGPU_CTX_QUERY2_FLAGS_GUILTY: u64 = 1 << 2;
/// QUERY_STATE2 flag: RAS correctable error.
pub const AMDGPU_CTX_QUERY2_FLAGS_RAS_CE: u64 = 1 << 3;
/// QUERY_STATE2 flag: RAS uncorrectable error.
pub const AMDGPU_CTX_QUERY2_FLAGS_RAS_UE: u64 = 1 << 4;

/// Context priority: unset.
pub const AMDGPU_CTX_PRIORITY_UNSET: i32 = -2048;
/// Context priority: very low.
pub const AMDGPU_CTX_PRIORITY_VERY_LOW: i32 = -1023;
/// Context priority: low.
pub const AMDGPU_CTX_PRIORITY_LOW: i32 = -512;
/// Context priority: normal.
pub const AMDGPU_CTX_PRIORITY_NORMAL: i32 = 0;
/// Context priority: high (needs `CAP_SYS_NICE` or DRM master).
pub const AMDGPU_CTX_PRIORITY_HIGH: i32 = 512;
/// Context priority: very high (needs `CAP_SYS_NICE` or DRM master).
pub const AMDGPU_CTX_PRIORITY_VERY_HIGH: i32 = 1023;

/// Stable power state: mask of the flags.
pub const AMDGPU_CTX_STABLE_PSTATE_FLAGS_MASK: u32 = 0xf;
/// Stable power state: none.
pub const AMDGPU_CTX_STABLE_PSTATE_NONE: u32 = 0;
/// Stable power state: standard.
pub const AMDGPU_CTX_STABLE_PSTATE_STANDARD: u32 = 1;
/// Stable power state: minimum shader clock.
pub const AMDGPU_CTX_STABLE_PSTATE_MIN_SCLK: u32 = 2;
/// Stable power state: minimum memory clock.
pub const AMDGPU_CTX_STABLE_PSTATE_MIN_MCLK: u32 = 3;
/// Stable power state: peak.
pub const AMDGPU_CTX_STABLE_PSTATE_PEAK: u32 = 4;

/// Input of [`DRM_IOCTL_AMDGPU_CTX`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_ctx_in {
    /// One of `AMDGPU_CTX_OP_*`.
    pub op: u32,
    /// Flags.
    pub flags: u32,
    /// Context id (FREE, QUERY_*).
    pub ctx_id: u32,
    /// One of `AMDGPU_CTX_PRIORITY_*`.
    pub priority: i32,
}

/// `drm_amdgpu_ctx_out.alloc` (anonymous in C).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_ctx_out_alloc {
    /// New context id.
    pub ctx_id: u32,
    /// Padding.
    pub _pad: u32,
}

/// `drm_amdgpu_ctx_out.state` (anonymous in C).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_ctx_out_state {
    /// `AMDGPU_CTX_QUERY2_FLAGS_*` (QUERY_STATE2).
    pub flags: u64,
    /// Resets caused by this context so far.
    pub hangs: u32,
    /// `AMDGPU_CTX_*_RESET` since the last query.
    pub reset_status: u32,
}

/// `drm_amdgpu_ctx_out.pstate` (anonymous in C).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_ctx_out_pstate {
    /// `AMDGPU_CTX_STABLE_PSTATE_*`.
    pub flags: u32,
    /// Padding.
    pub _pad: u32,
}

/// Output of [`DRM_IOCTL_AMDGPU_CTX`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, Immutable, KnownLayout)]
pub union drm_amdgpu_ctx_out {
    /// ALLOC_CTX result.
    pub alloc: drm_amdgpu_ctx_out_alloc,
    /// QUERY_STATE/QUERY_STATE2 result.
    pub state: drm_amdgpu_ctx_out_state,
    /// GET_STABLE_PSTATE result.
    pub pstate: drm_amdgpu_ctx_out_pstate,
}
crate::union_impls!(drm_amdgpu_ctx_out);

/// Argument of [`DRM_IOCTL_AMDGPU_CTX`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, Immutable, KnownLayout)]
pub union drm_amdgpu_ctx {
    /// Input.
    pub r#in: drm_amdgpu_ctx_in,
    /// Output.
    pub out: drm_amdgpu_ctx_out,
}
crate::union_impls!(drm_amdgpu_ctx);

/// Userptr flag: the GPU only reads the memory.
pub const AMDGPU_GEM_USERPTR_READONLY: u32 = 1 << 0;
/// Userptr flag: only anonymous memory is accepted.
pub const AMDGPU_GEM_USERPTR_ANONONLY: u32 = 1 << 1;
/// Userptr flag: validate (pin) the pages now.
pub const AMDGPU_GEM_USERPTR_VALIDATE: u32 = 1 << 2;
/// Userptr flag: register an MMU notifier.
pub const AMDGPU_GEM_USERPTR_REGISTER: u32 = 1 << 3;

/// GEM_METADATA operation: store a BO's tiling flags and opaque metadata.
pub const AMDGPU_GEM_METADATA_OP_SET_METADATA: u32 = 1;
/// GEM_METADATA operation: read them back.
pub const AMDGPU_GEM_METADATA_OP_GET_METADATA: u32 = 2;

/// The `data` member of [`drm_amdgpu_gem_metadata`] (280 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct drm_amdgpu_gem_metadata_data {
    /// Metadata flags (none defined; stored and returned as given).
    pub flags: u64,
    /// Family-specific tiling information (`AMDGPU_TILING_*`).
    pub tiling_info: u64,
    /// Bytes of `data` in use.
    pub data_size_bytes: u32,
    /// Opaque user-mode driver metadata.
    pub data: [u32; 64],
    /// Tail padding to the struct's 8-byte alignment.
    pub _pad: u32,
}

impl Default for drm_amdgpu_gem_metadata_data {
    fn default() -> Self {
        <Self as zerocopy::FromZeros>::new_zeroed()
    }
}

/// Argument of [`DRM_IOCTL_AMDGPU_GEM_METADATA`] (288 bytes), read and
/// written by both operations.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_metadata {
    /// GEM handle.
    pub handle: u32,
    /// `AMDGPU_GEM_METADATA_OP_SET_METADATA` or `_GET_METADATA`.
    pub op: u32,
    /// The metadata.
    pub data: drm_amdgpu_gem_metadata_data,
}

/// Argument of [`DRM_IOCTL_AMDGPU_GEM_USERPTR`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_userptr {
    /// Page-aligned CPU address.
    pub addr: u64,
    /// Page-aligned size in bytes.
    pub size: u64,
    /// `AMDGPU_GEM_USERPTR_*` bits.
    pub flags: u32,
    /// New GEM handle (out).
    pub handle: u32,
}

/// Input of [`DRM_IOCTL_AMDGPU_GEM_MMAP`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_mmap_in {
    /// GEM handle.
    pub handle: u32,
    /// Padding.
    pub _pad: u32,
}

/// Output of [`DRM_IOCTL_AMDGPU_GEM_MMAP`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_mmap_out {
    /// Fake mmap offset for `mmap(render_fd)`.
    pub addr_ptr: u64,
}

/// Argument of [`DRM_IOCTL_AMDGPU_GEM_MMAP`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, Immutable, KnownLayout)]
pub union drm_amdgpu_gem_mmap {
    /// Input.
    pub r#in: drm_amdgpu_gem_mmap_in,
    /// Output.
    pub out: drm_amdgpu_gem_mmap_out,
}
crate::union_impls!(drm_amdgpu_gem_mmap);

/// Input of [`DRM_IOCTL_AMDGPU_WAIT_CS`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_wait_cs_in {
    /// Submission sequence number from CS; 0 waits for nothing, `!0` for the latest.
    pub handle: u64,
    /// Absolute `CLOCK_MONOTONIC` timeout in ns.
    pub timeout: u64,
    /// `AMDGPU_HW_IP_*` of the submission.
    pub ip_type: u32,
    /// IP instance of the submission.
    pub ip_instance: u32,
    /// Ring of the submission.
    pub ring: u32,
    /// Context of the submission.
    pub ctx_id: u32,
}

/// Output of [`DRM_IOCTL_AMDGPU_WAIT_CS`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_wait_cs_out {
    /// 0: completed, 1: still busy.
    pub status: u64,
}

/// Argument of [`DRM_IOCTL_AMDGPU_WAIT_CS`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, Immutable, KnownLayout)]
pub union drm_amdgpu_wait_cs {
    /// Input.
    pub r#in: drm_amdgpu_wait_cs_in,
    /// Output.
    pub out: drm_amdgpu_wait_cs_out,
}
crate::union_impls!(drm_amdgpu_wait_cs);

/// GEM_OP: return the BO's creation parameters as a [`drm_amdgpu_gem_create_in`].
pub const AMDGPU_GEM_OP_GET_GEM_CREATE_INFO: u32 = 0;
/// GEM_OP: change the BO's preferred domains.
pub const AMDGPU_GEM_OP_SET_PLACEMENT: u32 = 1;
/// GEM_OP: list the BO's VM mappings as [`drm_amdgpu_gem_vm_entry`] records (newer
/// than the installed header).
pub const AMDGPU_GEM_OP_GET_MAPPING_INFO: u32 = 2;

/// Argument of [`DRM_IOCTL_AMDGPU_GEM_OP`], in the current upstream layout (24 bytes).
///
/// The installed header has only the first 16 bytes (`handle`, `op`, `value`); the
/// kernel zero-fills or ignores the difference, so this layout works on old and new
/// kernels. `num_entries` and `padding` are newer than the installed header.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_op {
    /// GEM handle.
    pub handle: u32,
    /// One of `AMDGPU_GEM_OP_*`.
    pub op: u32,
    /// Input or return value; a user pointer for GET_GEM_CREATE_INFO and
    /// GET_MAPPING_INFO.
    pub value: u64,
    /// GET_MAPPING_INFO: capacity of the array (in); number of mappings (out).
    pub num_entries: u32,
    /// Padding.
    pub padding: u32,
}

/// One VM mapping reported by GEM_OP GET_MAPPING_INFO (newer than the installed header).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_vm_entry {
    /// GPU virtual address of the mapping.
    pub addr: u64,
    /// Size of the mapping.
    pub size: u64,
    /// Offset of the mapping inside the BO.
    pub offset: u64,
    /// `AMDGPU_VM_PAGE_*` flags of the mapping.
    pub flags: u64,
}

/// GEM_LIST_HANDLES entry flag: the BO was imported (newer than the installed header).
pub const AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT: u32 = 1 << 0;

/// Argument of [`DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES`] (newer than the installed header).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_list_handles {
    /// User pointer to a [`drm_amdgpu_gem_list_handles_entry`] array.
    pub entries: u64,
    /// Capacity of the array (in); number of BOs of the file (out).
    pub num_entries: u32,
    /// Padding.
    pub padding: u32,
}

/// One BO reported by GEM_LIST_HANDLES (newer than the installed header).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_list_handles_entry {
    /// GEM handle.
    pub gem_handle: u32,
    /// `AMDGPU_GEM_LIST_HANDLES_FLAG_*`.
    pub flags: u32,
    /// BO size in bytes.
    pub size: u64,
    /// `AMDGPU_GEM_DOMAIN_*` the BO prefers.
    pub preferred_domains: u64,
    /// `AMDGPU_GEM_CREATE_*` flags of the BO.
    pub alloc_flags: u64,
    /// Physical alignment of the BO.
    pub alignment: u64,
}

/// VA operation: map.
pub const AMDGPU_VA_OP_MAP: u32 = 1;
/// VA operation: unmap.
pub const AMDGPU_VA_OP_UNMAP: u32 = 2;
/// VA operation: clear a range.
pub const AMDGPU_VA_OP_CLEAR: u32 = 3;
/// VA operation: replace a range.
pub const AMDGPU_VA_OP_REPLACE: u32 = 4;

/// VA flag: delay the page-table update until the next CS.
pub const AMDGPU_VM_DELAY_UPDATE: u32 = 1 << 0;
/// VA flag: readable mapping.
pub const AMDGPU_VM_PAGE_READABLE: u32 = 1 << 1;
/// VA flag: writable mapping.
pub const AMDGPU_VM_PAGE_WRITEABLE: u32 = 1 << 2;
/// VA flag: executable mapping.
pub const AMDGPU_VM_PAGE_EXECUTABLE: u32 = 1 << 3;
/// VA flag: partially resident texture.
pub const AMDGPU_VM_PAGE_PRT: u32 = 1 << 4;
/// VA flags: mask of the MTYPE field (bits 8:5).
pub const AMDGPU_VM_MTYPE_MASK: u32 = 0xf << 5;
/// MTYPE: default.
pub const AMDGPU_VM_MTYPE_DEFAULT: u32 = 0 << 5;
/// MTYPE: non-coherent.
pub const AMDGPU_VM_MTYPE_NC: u32 = 1 << 5;
/// MTYPE: write-combined.
pub const AMDGPU_VM_MTYPE_WC: u32 = 2 << 5;
/// MTYPE: cache-coherent.
pub const AMDGPU_VM_MTYPE_CC: u32 = 3 << 5;
/// MTYPE: uncached.
pub const AMDGPU_VM_MTYPE_UC: u32 = 4 << 5;
/// MTYPE: read-write.
pub const AMDGPU_VM_MTYPE_RW: u32 = 5 << 5;
/// VA flag: don't allocate in the system cache (newer than the installed header).
pub const AMDGPU_VM_PAGE_NOALLOC: u32 = 1 << 9;

/// Argument of [`DRM_IOCTL_AMDGPU_GEM_VA`], in the installed 40-byte layout.
///
/// Newer headers append `vm_timeline_point` (u64), `vm_timeline_syncobj_out` (u32),
/// `num_syncobj_handles` (u32) and `input_fence_syncobj_handles` (u64) for 64 bytes.
/// The kernel accepts both sizes (it zero-fills a shorter argument), so the 40-byte
/// form works everywhere; the request code differs (0x40286448 versus 0x40406448).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_gem_va {
    /// GEM handle.
    pub handle: u32,
    /// Padding.
    pub _pad: u32,
    /// One of `AMDGPU_VA_OP_*`.
    pub operation: u32,
    /// `AMDGPU_VM_PAGE_*`, `AMDGPU_VM_DELAY_UPDATE` and `AMDGPU_VM_MTYPE_*` bits.
    pub flags: u32,
    /// GPU virtual address.
    pub va_address: u64,
    /// Offset inside the BO.
    pub offset_in_bo: u64,
    /// Size of the mapping.
    pub map_size: u64,
}

/// Hardware IP: graphics.
pub const AMDGPU_HW_IP_GFX: u32 = 0;
/// Hardware IP: compute.
pub const AMDGPU_HW_IP_COMPUTE: u32 = 1;
/// Hardware IP: SDMA.
pub const AMDGPU_HW_IP_DMA: u32 = 2;
/// Hardware IP: UVD.
pub const AMDGPU_HW_IP_UVD: u32 = 3;
/// Hardware IP: VCE.
pub const AMDGPU_HW_IP_VCE: u32 = 4;
/// Hardware IP: UVD encode.
pub const AMDGPU_HW_IP_UVD_ENC: u32 = 5;
/// Hardware IP: VCN decode.
pub const AMDGPU_HW_IP_VCN_DEC: u32 = 6;
/// Hardware IP: VCN encode (and decode from VCN4).
pub const AMDGPU_HW_IP_VCN_ENC: u32 = 7;
/// Hardware IP: VCN JPEG.
pub const AMDGPU_HW_IP_VCN_JPEG: u32 = 8;
/// Number of hardware IP types in the installed header.
pub const AMDGPU_HW_IP_NUM: u32 = 9;
/// Largest number of instances per IP type.
pub const AMDGPU_HW_IP_INSTANCE_MAX_COUNT: u32 = 1;

/// CS chunk: indirect buffer ([`drm_amdgpu_cs_chunk_ib`]).
pub const AMDGPU_CHUNK_ID_IB: u32 = 0x01;
/// CS chunk: user fence ([`drm_amdgpu_cs_chunk_fence`]).
pub const AMDGPU_CHUNK_ID_FENCE: u32 = 0x02;
/// CS chunk: dependencies ([`drm_amdgpu_cs_chunk_dep`]).
pub const AMDGPU_CHUNK_ID_DEPENDENCIES: u32 = 0x03;
/// CS chunk: syncobjs to wait on.
pub const AMDGPU_CHUNK_ID_SYNCOBJ_IN: u32 = 0x04;
/// CS chunk: syncobjs to signal.
pub const AMDGPU_CHUNK_ID_SYNCOBJ_OUT: u32 = 0x05;
/// CS chunk: BO handles instead of a BO list.
pub const AMDGPU_CHUNK_ID_BO_HANDLES: u32 = 0x06;
/// CS chunk: scheduled dependencies.
pub const AMDGPU_CHUNK_ID_SCHEDULED_DEPENDENCIES: u32 = 0x07;
/// CS chunk: timeline syncobjs to wait on.
pub const AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT: u32 = 0x08;
/// CS chunk: timeline syncobjs to signal.
pub const AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL: u32 = 0x09;
/// CS chunk: GFX shadow buffers (newer than the installed header).
pub const AMDGPU_CHUNK_ID_CP_GFX_SHADOW: u32 = 0x0a;

/// One chunk of a command submission; CS's `chunks` points to an array of pointers
/// to these.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_cs_chunk {
    /// One of `AMDGPU_CHUNK_ID_*`.
    pub chunk_id: u32,
    /// Length of the chunk data in dwords.
    pub length_dw: u32,
    /// User pointer to the chunk data.
    pub chunk_data: u64,
}

/// Input of [`DRM_IOCTL_AMDGPU_CS`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_cs_in {
    /// Context id.
    pub ctx_id: u32,
    /// BO list handle, 0 for none.
    pub bo_list_handle: u32,
    /// Number of chunks.
    pub num_chunks: u32,
    /// Flags.
    pub flags: u32,
    /// User pointer to an array of `u64` user pointers to [`drm_amdgpu_cs_chunk`].
    pub chunks: u64,
}

/// Output of [`DRM_IOCTL_AMDGPU_CS`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_cs_out {
    /// Fence sequence number, for WAIT_CS.
    pub handle: u64,
}

/// Argument of [`DRM_IOCTL_AMDGPU_CS`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, Immutable, KnownLayout)]
pub union drm_amdgpu_cs {
    /// Input.
    pub r#in: drm_amdgpu_cs_in,
    /// Output.
    pub out: drm_amdgpu_cs_out,
}
crate::union_impls!(drm_amdgpu_cs);

/// IB flag: submit to the constant engine.
pub const AMDGPU_IB_FLAG_CE: u32 = 1 << 0;
/// IB flag: preamble; may be dropped without a context switch.
pub const AMDGPU_IB_FLAG_PREAMBLE: u32 = 1 << 1;
/// IB flag: preemptible.
pub const AMDGPU_IB_FLAG_PREEMPT: u32 = 1 << 2;
/// IB flag: L2 write-back without shader cache invalidation.
pub const AMDGPU_IB_FLAG_TC_WB_NOT_INVALIDATE: u32 = 1 << 3;
/// IB flag: reset the GDS wave id counters.
pub const AMDGPU_IB_FLAG_RESET_GDS_MAX_WAVE_ID: u32 = 1 << 4;
/// IB flag: secure (TMZ).
pub const AMDGPU_IB_FLAGS_SECURE: u32 = 1 << 5;
/// IB flag: flush and invalidate caches.
pub const AMDGPU_IB_FLAG_EMIT_MEM_SYNC: u32 = 1 << 6;

/// Chunk data of an [`AMDGPU_CHUNK_ID_IB`] chunk (8 dwords).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_cs_chunk_ib {
    /// Padding.
    pub _pad: u32,
    /// `AMDGPU_IB_FLAG_*`.
    pub flags: u32,
    /// GPU virtual address of the IB.
    pub va_start: u64,
    /// Size of the IB in bytes.
    pub ib_bytes: u32,
    /// `AMDGPU_HW_IP_*` to run on.
    pub ip_type: u32,
    /// IP instance (must be 0).
    pub ip_instance: u32,
    /// Ring index.
    pub ring: u32,
}

/// Chunk data of an [`AMDGPU_CHUNK_ID_DEPENDENCIES`] chunk.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_cs_chunk_dep {
    /// `AMDGPU_HW_IP_*` of the dependency.
    pub ip_type: u32,
    /// IP instance of the dependency.
    pub ip_instance: u32,
    /// Ring of the dependency.
    pub ring: u32,
    /// Context of the dependency.
    pub ctx_id: u32,
    /// Sequence number of the dependency.
    pub handle: u64,
}

/// Chunk data of an [`AMDGPU_CHUNK_ID_FENCE`] chunk.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_cs_chunk_fence {
    /// GEM handle of the fence BO.
    pub handle: u32,
    /// Offset of the fence inside the BO.
    pub offset: u32,
}

/// Chunk data of a syncobj chunk.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_cs_chunk_syncobj {
    /// Syncobj handle.
    pub handle: u32,
    /// Flags.
    pub flags: u32,
    /// Timeline point.
    pub point: u64,
}

/// `struct drm_amdgpu_cs_chunk_data`: in C a struct whose only member is an anonymous
/// union; the layout is the union's, so here it is the union itself and members are
/// reached by the same names as in C.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, Immutable, KnownLayout)]
pub union drm_amdgpu_cs_chunk_data {
    /// IB chunk data.
    pub ib_data: drm_amdgpu_cs_chunk_ib,
    /// Fence chunk data.
    pub fence_data: drm_amdgpu_cs_chunk_fence,
}
crate::union_impls!(drm_amdgpu_cs_chunk_data);

/// ids_flags: integrated (fusion) GPU.
pub const AMDGPU_IDS_FLAGS_FUSION: u64 = 0x1;
/// ids_flags: preemption supported.
pub const AMDGPU_IDS_FLAGS_PREEMPTION: u64 = 0x2;
/// ids_flags: TMZ supported.
pub const AMDGPU_IDS_FLAGS_TMZ: u64 = 0x4;

/// INFO query: is acceleration working (`u32`).
pub const AMDGPU_INFO_ACCEL_WORKING: u32 = 0x00;
/// INFO query: CRTC id from a mode object id.
pub const AMDGPU_INFO_CRTC_FROM_ID: u32 = 0x01;
/// INFO query: hardware IP info ([`drm_amdgpu_info_hw_ip`]).
pub const AMDGPU_INFO_HW_IP_INFO: u32 = 0x02;
/// INFO query: hardware IP instance count (`u32`).
pub const AMDGPU_INFO_HW_IP_COUNT: u32 = 0x03;
/// INFO query: GPU timestamp.
pub const AMDGPU_INFO_TIMESTAMP: u32 = 0x05;
/// INFO query: firmware version.
pub const AMDGPU_INFO_FW_VERSION: u32 = 0x0e;
/// INFO query: bytes moved by TTM.
pub const AMDGPU_INFO_NUM_BYTES_MOVED: u32 = 0x0f;
/// INFO query: VRAM in use.
pub const AMDGPU_INFO_VRAM_USAGE: u32 = 0x10;
/// INFO query: GTT in use.
pub const AMDGPU_INFO_GTT_USAGE: u32 = 0x11;
/// INFO query: GDS configuration.
pub const AMDGPU_INFO_GDS_CONFIG: u32 = 0x13;
/// INFO query: VRAM and GTT sizes ([`drm_amdgpu_info_vram_gtt`]).
pub const AMDGPU_INFO_VRAM_GTT: u32 = 0x14;
/// INFO query: read MMR registers.
pub const AMDGPU_INFO_READ_MMR_REG: u32 = 0x15;
/// INFO query: device info ([`drm_amdgpu_info_device`]).
pub const AMDGPU_INFO_DEV_INFO: u32 = 0x16;
/// INFO query: CPU-visible VRAM in use.
pub const AMDGPU_INFO_VIS_VRAM_USAGE: u32 = 0x17;
/// INFO query: number of TTM evictions.
pub const AMDGPU_INFO_NUM_EVICTIONS: u32 = 0x18;
/// INFO query: memory heaps ([`drm_amdgpu_memory_info`]).
pub const AMDGPU_INFO_MEMORY: u32 = 0x19;
/// INFO query: VCE clock table.
pub const AMDGPU_INFO_VCE_CLOCK_TABLE: u32 = 0x1A;
/// INFO query: VBIOS information.
pub const AMDGPU_INFO_VBIOS: u32 = 0x1B;
/// INFO query: UVD handles.
pub const AMDGPU_INFO_NUM_HANDLES: u32 = 0x1C;
/// INFO query: sensors.
pub const AMDGPU_INFO_SENSOR: u32 = 0x1D;
/// INFO query: VRAM page faults on CPU access.
pub const AMDGPU_INFO_NUM_VRAM_CPU_PAGE_FAULTS: u32 = 0x1E;
/// INFO query: VRAM-lost counter.
pub const AMDGPU_INFO_VRAM_LOST_COUNTER: u32 = 0x1F;
/// INFO query: enabled RAS features.
pub const AMDGPU_INFO_RAS_ENABLED_FEATURES: u32 = 0x20;
/// INFO query: video encode/decode capabilities.
pub const AMDGPU_INFO_VIDEO_CAPS: u32 = 0x21;

/// FW_VERSION sub-query: VCE firmware.
pub const AMDGPU_INFO_FW_VCE: u32 = 0x1;
/// FW_VERSION sub-query: UVD firmware.
pub const AMDGPU_INFO_FW_UVD: u32 = 0x2;
/// FW_VERSION sub-query: GMC firmware.
pub const AMDGPU_INFO_FW_GMC: u32 = 0x03;
/// FW_VERSION sub-query: GFX ME firmware.
pub const AMDGPU_INFO_FW_GFX_ME: u32 = 0x04;
/// FW_VERSION sub-query: GFX PFP firmware.
pub const AMDGPU_INFO_FW_GFX_PFP: u32 = 0x05;
/// FW_VERSION sub-query: GFX CE firmware.
pub const AMDGPU_INFO_FW_GFX_CE: u32 = 0x06;
/// FW_VERSION sub-query: GFX RLC firmware.
pub const AMDGPU_INFO_FW_GFX_RLC: u32 = 0x07;
/// FW_VERSION sub-query: GFX MEC firmware.
pub const AMDGPU_INFO_FW_GFX_MEC: u32 = 0x08;
/// FW_VERSION sub-query: SMC firmware.
pub const AMDGPU_INFO_FW_SMC: u32 = 0x0a;
/// FW_VERSION sub-query: SDMA firmware.
pub const AMDGPU_INFO_FW_SDMA: u32 = 0x0b;
/// FW_VERSION sub-query: SOS firmware.
pub const AMDGPU_INFO_FW_SOS: u32 = 0x0c;
/// FW_VERSION sub-query: ASD firmware.
pub const AMDGPU_INFO_FW_ASD: u32 = 0x0d;
/// FW_VERSION sub-query: VCN firmware.
pub const AMDGPU_INFO_FW_VCN: u32 = 0x0e;
/// FW_VERSION sub-query: GFX RLC RESTORE LIST CNTL firmware.
pub const AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_CNTL: u32 = 0x0f;
/// FW_VERSION sub-query: GFX RLC RESTORE LIST GPM MEM firmware.
pub const AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_GPM_MEM: u32 = 0x10;
/// FW_VERSION sub-query: GFX RLC RESTORE LIST SRM MEM firmware.
pub const AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_SRM_MEM: u32 = 0x11;
/// FW_VERSION sub-query: DMCU firmware.
pub const AMDGPU_INFO_FW_DMCU: u32 = 0x12;
/// FW_VERSION sub-query: TA firmware.
pub const AMDGPU_INFO_FW_TA: u32 = 0x13;
/// FW_VERSION sub-query: DMCUB firmware.
pub const AMDGPU_INFO_FW_DMCUB: u32 = 0x14;
/// FW_VERSION sub-query: TOC firmware.
pub const AMDGPU_INFO_FW_TOC: u32 = 0x15;
/// VBIOS sub-query: size.
pub const AMDGPU_INFO_VBIOS_SIZE: u32 = 0x1;
/// VBIOS sub-query: image.
pub const AMDGPU_INFO_VBIOS_IMAGE: u32 = 0x2;
/// VBIOS sub-query: info.
pub const AMDGPU_INFO_VBIOS_INFO: u32 = 0x3;
/// SENSOR sub-query: gfx sclk.
pub const AMDGPU_INFO_SENSOR_GFX_SCLK: u32 = 0x1;
/// SENSOR sub-query: gfx mclk.
pub const AMDGPU_INFO_SENSOR_GFX_MCLK: u32 = 0x2;
/// SENSOR sub-query: gpu temp.
pub const AMDGPU_INFO_SENSOR_GPU_TEMP: u32 = 0x3;
/// SENSOR sub-query: gpu load.
pub const AMDGPU_INFO_SENSOR_GPU_LOAD: u32 = 0x4;
/// SENSOR sub-query: gpu avg power.
pub const AMDGPU_INFO_SENSOR_GPU_AVG_POWER: u32 = 0x5;
/// SENSOR sub-query: vddnb.
pub const AMDGPU_INFO_SENSOR_VDDNB: u32 = 0x6;
/// SENSOR sub-query: vddgfx.
pub const AMDGPU_INFO_SENSOR_VDDGFX: u32 = 0x7;
/// SENSOR sub-query: stable pstate gfx sclk.
pub const AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_SCLK: u32 = 0x8;
/// SENSOR sub-query: stable pstate gfx mclk.
pub const AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_MCLK: u32 = 0x9;
/// RAS_ENABLED_FEATURES bit: UMC.
pub const AMDGPU_INFO_RAS_ENABLED_UMC: u64 = 1 << 0;
/// RAS_ENABLED_FEATURES bit: SDMA.
pub const AMDGPU_INFO_RAS_ENABLED_SDMA: u64 = 1 << 1;
/// RAS_ENABLED_FEATURES bit: GFX.
pub const AMDGPU_INFO_RAS_ENABLED_GFX: u64 = 1 << 2;
/// RAS_ENABLED_FEATURES bit: MMHUB.
pub const AMDGPU_INFO_RAS_ENABLED_MMHUB: u64 = 1 << 3;
/// RAS_ENABLED_FEATURES bit: ATHUB.
pub const AMDGPU_INFO_RAS_ENABLED_ATHUB: u64 = 1 << 4;
/// RAS_ENABLED_FEATURES bit: PCIE.
pub const AMDGPU_INFO_RAS_ENABLED_PCIE: u64 = 1 << 5;
/// RAS_ENABLED_FEATURES bit: HDP.
pub const AMDGPU_INFO_RAS_ENABLED_HDP: u64 = 1 << 6;
/// RAS_ENABLED_FEATURES bit: XGMI.
pub const AMDGPU_INFO_RAS_ENABLED_XGMI: u64 = 1 << 7;
/// RAS_ENABLED_FEATURES bit: DF.
pub const AMDGPU_INFO_RAS_ENABLED_DF: u64 = 1 << 8;
/// RAS_ENABLED_FEATURES bit: SMN.
pub const AMDGPU_INFO_RAS_ENABLED_SMN: u64 = 1 << 9;
/// RAS_ENABLED_FEATURES bit: SEM.
pub const AMDGPU_INFO_RAS_ENABLED_SEM: u64 = 1 << 10;
/// RAS_ENABLED_FEATURES bit: MP0.
pub const AMDGPU_INFO_RAS_ENABLED_MP0: u64 = 1 << 11;
/// RAS_ENABLED_FEATURES bit: MP1.
pub const AMDGPU_INFO_RAS_ENABLED_MP1: u64 = 1 << 12;
/// RAS_ENABLED_FEATURES bit: FUSE.
pub const AMDGPU_INFO_RAS_ENABLED_FUSE: u64 = 1 << 13;
/// VIDEO_CAPS sub-query: decode.
pub const AMDGPU_INFO_VIDEO_CAPS_DECODE: u32 = 0;
/// VIDEO_CAPS sub-query: encode.
pub const AMDGPU_INFO_VIDEO_CAPS_ENCODE: u32 = 1;
/// READ_MMR_REG `instance` field: se index shift.
pub const AMDGPU_INFO_MMR_SE_INDEX_SHIFT: u32 = 0;
/// READ_MMR_REG `instance` field: se index mask.
pub const AMDGPU_INFO_MMR_SE_INDEX_MASK: u32 = 0xff;
/// READ_MMR_REG `instance` field: sh index shift.
pub const AMDGPU_INFO_MMR_SH_INDEX_SHIFT: u32 = 8;
/// READ_MMR_REG `instance` field: sh index mask.
pub const AMDGPU_INFO_MMR_SH_INDEX_MASK: u32 = 0xff;
/// VIDEO_CAPS codec index: MPEG2.
pub const AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_MPEG2: u32 = 0;
/// VIDEO_CAPS codec index: MPEG4.
pub const AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_MPEG4: u32 = 1;
/// VIDEO_CAPS codec index: VC1.
pub const AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_VC1: u32 = 2;
/// VIDEO_CAPS codec index: MPEG4 AVC.
pub const AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_MPEG4_AVC: u32 = 3;
/// VIDEO_CAPS codec index: HEVC.
pub const AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_HEVC: u32 = 4;
/// VIDEO_CAPS codec index: JPEG.
pub const AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_JPEG: u32 = 5;
/// VIDEO_CAPS codec index: VP9.
pub const AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_VP9: u32 = 6;
/// VIDEO_CAPS codec index: AV1.
pub const AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_AV1: u32 = 7;
/// VIDEO_CAPS codec index: COUNT.
pub const AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_COUNT: u32 = 8;

/// `drm_amdgpu_info.query_fw` member type.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_query_fw {
    /// `AMDGPU_INFO_FW_*`.
    pub fw_type: u32,
    /// IP instance.
    pub ip_instance: u32,
    /// Engine index (MEC, SDMA).
    pub index: u32,
    /// Padding.
    pub _pad: u32,
}

/// Answer of [`AMDGPU_INFO_FW_VERSION`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_info_firmware {
    /// Firmware version.
    pub ver: u32,
    /// Firmware feature version.
    pub feature: u32,
}

/// `drm_amdgpu_info.mode_crtc` (anonymous in C).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_info_mode_crtc {
    /// Mode object id.
    pub id: u32,
    /// Padding.
    pub _pad: u32,
}

/// `drm_amdgpu_info.query_hw_ip` (anonymous in C).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_info_query_hw_ip {
    /// `AMDGPU_HW_IP_*`.
    pub r#type: u32,
    /// IP instance; ignored by HW_IP_COUNT.
    pub ip_instance: u32,
}

/// `drm_amdgpu_info.read_mmr_reg` (anonymous in C).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_info_read_mmr_reg {
    /// First register, in dwords.
    pub dword_offset: u32,
    /// Number of registers.
    pub count: u32,
    /// Shader engine/array selection.
    pub instance: u32,
    /// Flags.
    pub flags: u32,
}

/// `drm_amdgpu_info.vbios_info` (anonymous in C).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_info_vbios_info {
    /// VBIOS sub-query.
    pub r#type: u32,
    /// Offset.
    pub offset: u32,
}

/// `drm_amdgpu_info.sensor_info` (anonymous in C).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_info_sensor_info {
    /// Sensor sub-query.
    pub r#type: u32,
}

/// `drm_amdgpu_info.video_cap` (anonymous in C).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_info_video_cap {
    /// Decode or encode.
    pub r#type: u32,
}

/// The anonymous union at offset 16 of `struct drm_amdgpu_info`, holding the query's
/// parameters. In C its members are reached as `info.query_hw_ip`, in Rust as
/// `info.request.query_hw_ip`.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, Immutable, KnownLayout)]
pub union drm_amdgpu_info_request {
    /// CRTC_FROM_ID parameters.
    pub mode_crtc: drm_amdgpu_info_mode_crtc,
    /// HW_IP_INFO / HW_IP_COUNT parameters.
    pub query_hw_ip: drm_amdgpu_info_query_hw_ip,
    /// READ_MMR_REG parameters.
    pub read_mmr_reg: drm_amdgpu_info_read_mmr_reg,
    /// FW_VERSION parameters.
    pub query_fw: drm_amdgpu_query_fw,
    /// VBIOS parameters.
    pub vbios_info: drm_amdgpu_info_vbios_info,
    /// SENSOR parameters.
    pub sensor_info: drm_amdgpu_info_sensor_info,
    /// VIDEO_CAPS parameters.
    pub video_cap: drm_amdgpu_info_video_cap,
}
crate::union_impls!(drm_amdgpu_info_request);

/// Argument of [`DRM_IOCTL_AMDGPU_INFO`] (write-only: the answer goes to
/// `return_pointer`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, Immutable, KnownLayout)]
pub struct drm_amdgpu_info {
    /// User pointer receiving the answer.
    pub return_pointer: u64,
    /// Capacity at `return_pointer`; the kernel writes at most this many bytes.
    pub return_size: u32,
    /// One of `AMDGPU_INFO_*`.
    pub query: u32,
    /// Query parameters (anonymous union in C).
    pub request: drm_amdgpu_info_request,
}

/// Answer of [`AMDGPU_INFO_VRAM_GTT`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_info_vram_gtt {
    /// VRAM size.
    pub vram_size: u64,
    /// CPU-visible VRAM size.
    pub vram_cpu_accessible_size: u64,
    /// GTT size.
    pub gtt_size: u64,
}

/// One heap of [`drm_amdgpu_memory_info`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_heap_info {
    /// Physical size.
    pub total_heap_size: u64,
    /// Theoretical maximum available.
    pub usable_heap_size: u64,
    /// Bytes allocated, by all processes and the kernel.
    pub heap_usage: u64,
    /// Largest possible single allocation.
    pub max_allocation: u64,
}

/// Answer of [`AMDGPU_INFO_MEMORY`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_memory_info {
    /// VRAM heap.
    pub vram: drm_amdgpu_heap_info,
    /// CPU-visible VRAM heap.
    pub cpu_accessible_vram: drm_amdgpu_heap_info,
    /// GTT heap.
    pub gtt: drm_amdgpu_heap_info,
}

/// Answer of [`AMDGPU_INFO_DEV_INFO`], in the installed header's layout.
///
/// Newer kernels append fields (the struct grows to 440 bytes); the kernel copies at
/// most `return_size` bytes, so this shorter form stays valid. The C struct ends in
/// 4 bytes of implicit padding after `pa_sc_tile_steering_override`, named
/// [`_pad2`](Self::_pad2) here.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_info_device {
    /// PCI device id.
    pub device_id: u32,
    /// Internal chip revision.
    pub chip_rev: u32,
    /// External revision.
    pub external_rev: u32,
    /// PCI revision id.
    pub pci_rev: u32,
    /// `AMDGPU_FAMILY_*`.
    pub family: u32,
    /// Shader engines.
    pub num_shader_engines: u32,
    /// Shader arrays per engine.
    pub num_shader_arrays_per_engine: u32,
    /// GPU counter frequency in kHz.
    pub gpu_counter_freq: u32,
    /// Maximum engine clock.
    pub max_engine_clock: u64,
    /// Maximum memory clock.
    pub max_memory_clock: u64,
    /// Active compute units.
    pub cu_active_number: u32,
    /// Invalid; do not use.
    pub cu_ao_mask: u32,
    /// Active CU bitmap per SE/SH.
    pub cu_bitmap: [[u32; 4]; 4],
    /// Render backend pipe mask.
    pub enabled_rb_pipes_mask: u32,
    /// Render backend pipes.
    pub num_rb_pipes: u32,
    /// Hardware GFX contexts.
    pub num_hw_gfx_contexts: u32,
    /// Padding.
    pub _pad: u32,
    /// `AMDGPU_IDS_FLAGS_*`.
    pub ids_flags: u64,
    /// First virtual address for user-mode drivers.
    pub virtual_address_offset: u64,
    /// Maximum virtual address.
    pub virtual_address_max: u64,
    /// Required virtual address alignment.
    pub virtual_address_alignment: u32,
    /// PTE fragment size.
    pub pte_fragment_size: u32,
    /// GART page size.
    pub gart_page_size: u32,
    /// Constant engine RAM size.
    pub ce_ram_size: u32,
    /// `AMDGPU_VRAM_TYPE_*`.
    pub vram_type: u32,
    /// VRAM bus width.
    pub vram_bit_width: u32,
    /// VCE harvesting.
    pub vce_harvest_config: u32,
    /// Double off-chip LDS buffers.
    pub gc_double_offchip_lds_buf: u32,
    /// NGG primitive buffer address.
    pub prim_buf_gpu_addr: u64,
    /// NGG position buffer address.
    pub pos_buf_gpu_addr: u64,
    /// NGG control sideband address.
    pub cntl_sb_buf_gpu_addr: u64,
    /// NGG parameter cache address.
    pub param_buf_gpu_addr: u64,
    /// NGG primitive buffer size.
    pub prim_buf_size: u32,
    /// NGG position buffer size.
    pub pos_buf_size: u32,
    /// NGG control sideband size.
    pub cntl_sb_buf_size: u32,
    /// NGG parameter cache size.
    pub param_buf_size: u32,
    /// Wavefront size.
    pub wave_front_size: u32,
    /// Shader-visible VGPRs.
    pub num_shader_visible_vgprs: u32,
    /// CUs per shader array.
    pub num_cu_per_sh: u32,
    /// TCC blocks.
    pub num_tcc_blocks: u32,
    /// GS VGT table depth.
    pub gs_vgt_table_depth: u32,
    /// GS primitive buffer depth.
    pub gs_prim_buffer_depth: u32,
    /// Maximum GS waves per VGT.
    pub max_gs_waves_per_vgt: u32,
    /// Padding.
    pub _pad1: u32,
    /// Always-on CU bitmap.
    pub cu_ao_bitmap: [[u32; 4]; 4],
    /// First high virtual address for user-mode drivers.
    pub high_va_offset: u64,
    /// Maximum high virtual address.
    pub high_va_max: u64,
    /// GFX10 `PA_SC_TILE_STEERING_OVERRIDE`.
    pub pa_sc_tile_steering_override: u32,
    /// Padding, implicit in C. Keep zero.
    pub _pad2: u32,
    /// Disabled TCCs.
    pub tcc_disabled_mask: u64,
}

/// Answer of [`AMDGPU_INFO_HW_IP_INFO`], in the installed 32-byte layout (newer headers
/// name the last field `ip_discovery_version`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_amdgpu_info_hw_ip {
    /// IP major version.
    pub hw_ip_version_major: u32,
    /// IP minor version.
    pub hw_ip_version_minor: u32,
    /// Capabilities.
    pub capabilities_flags: u64,
    /// Required IB start alignment in bytes.
    pub ib_start_alignment: u32,
    /// Required IB size alignment in bytes.
    pub ib_size_alignment: u32,
    /// Bitmask of available rings.
    pub available_rings: u32,
    /// Padding (`ip_discovery_version` in newer headers).
    pub _pad: u32,
}

/// VRAM type: unknown.
pub const AMDGPU_VRAM_TYPE_UNKNOWN: u32 = 0;
/// VRAM type: GDDR1.
pub const AMDGPU_VRAM_TYPE_GDDR1: u32 = 1;
/// VRAM type: DDR2.
pub const AMDGPU_VRAM_TYPE_DDR2: u32 = 2;
/// VRAM type: GDDR3.
pub const AMDGPU_VRAM_TYPE_GDDR3: u32 = 3;
/// VRAM type: GDDR4.
pub const AMDGPU_VRAM_TYPE_GDDR4: u32 = 4;
/// VRAM type: GDDR5.
pub const AMDGPU_VRAM_TYPE_GDDR5: u32 = 5;
/// VRAM type: HBM.
pub const AMDGPU_VRAM_TYPE_HBM: u32 = 6;
/// VRAM type: DDR3.
pub const AMDGPU_VRAM_TYPE_DDR3: u32 = 7;
/// VRAM type: DDR4.
pub const AMDGPU_VRAM_TYPE_DDR4: u32 = 8;
/// VRAM type: GDDR6.
pub const AMDGPU_VRAM_TYPE_GDDR6: u32 = 9;
/// VRAM type: DDR5.
pub const AMDGPU_VRAM_TYPE_DDR5: u32 = 10;

/// GPU family: unknown.
pub const AMDGPU_FAMILY_UNKNOWN: u32 = 0;
/// GPU family: Southern Islands.
pub const AMDGPU_FAMILY_SI: u32 = 110;
/// GPU family: Sea Islands.
pub const AMDGPU_FAMILY_CI: u32 = 120;
/// GPU family: Kaveri, Kabini, Mullins.
pub const AMDGPU_FAMILY_KV: u32 = 125;
/// GPU family: Volcanic Islands.
pub const AMDGPU_FAMILY_VI: u32 = 130;
/// GPU family: Carrizo, Stoney.
pub const AMDGPU_FAMILY_CZ: u32 = 135;
/// GPU family: Vega/GFX9 (incl. MI50/100/200/300); the first with SDMA 4 and
/// `bytes - 1` copy counts.
pub const AMDGPU_FAMILY_AI: u32 = 141;
/// GPU family: Raven.
pub const AMDGPU_FAMILY_RV: u32 = 142;
/// GPU family: Navi.
pub const AMDGPU_FAMILY_NV: u32 = 143;
/// GPU family: Van Gogh.
pub const AMDGPU_FAMILY_VGH: u32 = 144;
/// GPU family: GC 11.0.0 (newer than the installed header).
pub const AMDGPU_FAMILY_GC_11_0_0: u32 = 145;
/// GPU family: Yellow Carp.
pub const AMDGPU_FAMILY_YC: u32 = 146;
/// GPU family: GC 11.0.1 (newer than the installed header).
pub const AMDGPU_FAMILY_GC_11_0_1: u32 = 148;
/// GPU family: GC 10.3.6 (newer than the installed header).
pub const AMDGPU_FAMILY_GC_10_3_6: u32 = 149;
/// GPU family: GC 11.5.0 (newer than the installed header).
pub const AMDGPU_FAMILY_GC_11_5_0: u32 = 150;
/// GPU family: GC 10.3.7 (newer than the installed header).
pub const AMDGPU_FAMILY_GC_10_3_7: u32 = 151;
/// GPU family: GC 12.0.0 (newer than the installed header).
pub const AMDGPU_FAMILY_GC_12_0_0: u32 = 152;

const fn amdgpu_nr(nr: u8) -> u8 {
    DRM_COMMAND_BASE + nr
}

/// Create a GEM buffer object.
pub const DRM_IOCTL_AMDGPU_GEM_CREATE: u32 =
    _IOWR::<drm_amdgpu_gem_create>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_GEM_CREATE));
/// Get a BO's fake mmap offset.
pub const DRM_IOCTL_AMDGPU_GEM_MMAP: u32 =
    _IOWR::<drm_amdgpu_gem_mmap>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_GEM_MMAP));
/// Allocate, free or query a context.
pub const DRM_IOCTL_AMDGPU_CTX: u32 =
    _IOWR::<drm_amdgpu_ctx>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_CTX));
/// Create, destroy or update a BO list.
pub const DRM_IOCTL_AMDGPU_BO_LIST: u32 =
    _IOWR::<drm_amdgpu_bo_list>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_BO_LIST));
/// Submit a command stream.
pub const DRM_IOCTL_AMDGPU_CS: u32 =
    _IOWR::<drm_amdgpu_cs>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_CS));
/// Query device information (write-only).
pub const DRM_IOCTL_AMDGPU_INFO: u32 =
    _IOW::<drm_amdgpu_info>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_INFO));
/// Map or unmap a BO in the file's VM (write-only; 40-byte layout).
pub const DRM_IOCTL_AMDGPU_GEM_VA: u32 =
    _IOW::<drm_amdgpu_gem_va>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_GEM_VA));
/// Wait for a command submission.
pub const DRM_IOCTL_AMDGPU_WAIT_CS: u32 =
    _IOWR::<drm_amdgpu_wait_cs>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_WAIT_CS));
/// Query or change a BO (24-byte upstream layout; the installed header's is 16).
pub const DRM_IOCTL_AMDGPU_GEM_OP: u32 =
    _IOWR::<drm_amdgpu_gem_op>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_GEM_OP));
/// Set or get a BO's tiling flags and metadata.
pub const DRM_IOCTL_AMDGPU_GEM_METADATA: u32 =
    _IOWR::<drm_amdgpu_gem_metadata>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_GEM_METADATA));
/// Wrap user memory in a GEM object.
pub const DRM_IOCTL_AMDGPU_GEM_USERPTR: u32 =
    _IOWR::<drm_amdgpu_gem_userptr>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_GEM_USERPTR));
/// List the BOs of a DRM file (newer than the installed header).
pub const DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES: u32 =
    _IOWR::<drm_amdgpu_gem_list_handles>(DRM_IOCTL_BASE, amdgpu_nr(DRM_AMDGPU_GEM_LIST_HANDLES));
