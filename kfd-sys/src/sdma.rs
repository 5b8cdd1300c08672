//! The SDMA linear-copy packet and its constants (amdgpu `sdma_v*` packet headers,
//! `vega10_sdma_pkt_open.h`, `cikd.h`), and the opcodes of the other packets a
//! user-mode SDMA queue carries (ROCr 5.2's `sdma_registers.h` and kfdtest's
//! `sdma_pkt_struct.h` use the same numbers).
//!
//! A userspace copier writes these dwords into an indirect buffer and submits it on the
//! DMA ring with `DRM_IOCTL_AMDGPU_CS`. Field semantics differ by family: before
//! [`AMDGPU_FAMILY_AI`](crate::AMDGPU_FAMILY_AI) (SDMA 2.x/3.x) COUNT holds the byte
//! count, from AI on (SDMA 4.x and later) it holds the byte count minus one. This
//! module holds the packet layout and field encoders only: it must never choose a
//! family or chunk a copy.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Opcode (header bits 7:0) of a NOP; a zero dword is a one-dword NOP.
pub const SDMA_OP_NOP: u32 = 0;
/// Opcode (header bits 7:0) of a COPY.
pub const SDMA_OP_COPY: u32 = 1;
/// Sub-opcode (header bits 15:8) of a linear COPY.
pub const SDMA_SUBOP_COPY_LINEAR: u32 = 0;
/// Sub-opcode of a linear-rectangle (sub-window) COPY.
pub const SDMA_SUBOP_COPY_LINEAR_RECT: u32 = 4;
/// Opcode of a WRITE (sub-opcode 0: linear, the data follows the header).
pub const SDMA_OP_WRITE: u32 = 2;
/// Sub-opcode of a linear WRITE.
pub const SDMA_SUBOP_WRITE_LINEAR: u32 = 0;
/// Opcode of an INDIRECT buffer.
pub const SDMA_OP_INDIRECT: u32 = 4;
/// Opcode of a FENCE (a 32-bit write of the packet's data).
pub const SDMA_OP_FENCE: u32 = 5;
/// Opcode of a TRAP (an interrupt carrying a 28-bit context).
pub const SDMA_OP_TRAP: u32 = 6;
/// Opcode of a SEMAPHORE.
pub const SDMA_OP_SEM: u32 = 7;
/// Opcode of a POLL_REGMEM (wait on a register or a memory dword).
pub const SDMA_OP_POLL_REGMEM: u32 = 8;
/// Opcode of a COND_EXE.
pub const SDMA_OP_COND_EXE: u32 = 9;
/// Opcode of an ATOMIC (header bits 31:25: the TC operation).
pub const SDMA_OP_ATOMIC: u32 = 10;
/// Opcode of a CONSTANT_FILL.
pub const SDMA_OP_CONST_FILL: u32 = 11;
/// Opcode of a PTEPDE update.
pub const SDMA_OP_PTEPDE: u32 = 12;
/// Opcode of a TIMESTAMP.
pub const SDMA_OP_TIMESTAMP: u32 = 13;
/// Opcode of an SRBM_WRITE (a register write).
pub const SDMA_OP_SRBM_WRITE: u32 = 14;
/// Opcode of a PRE_EXE.
pub const SDMA_OP_PRE_EXE: u32 = 15;
/// Opcode of a GCR (cache control, SDMA 5.x and later).
pub const SDMA_OP_GCR: u32 = 17;
/// TIMESTAMP sub-opcode: set the local timestamp.
pub const SDMA_SUBOP_TIMESTAMP_SET: u32 = 0;
/// TIMESTAMP sub-opcode: write the local timestamp.
pub const SDMA_SUBOP_TIMESTAMP_GET: u32 = 1;
/// TIMESTAMP sub-opcode: write the global (GPU clock) timestamp.
pub const SDMA_SUBOP_TIMESTAMP_GET_GLOBAL: u32 = 2;
/// GCR sub-opcode of a user cache operation.
pub const SDMA_SUBOP_USER_GCR: u32 = 1;
/// ATOMIC operation (header bits 31:25) `TC_OP_ATOMIC_ADD_RTN_64`, which ROCr names
/// `SDMA_ATOMIC_ADD64`.
pub const SDMA_ATOMIC_ADD64: u32 = 47;
/// POLL_REGMEM header: HDP flush (bit 26).
pub const SDMA_PKT_POLL_REGMEM_HEADER_hdp_flush_shift: u32 = 26;
/// POLL_REGMEM header: compare function (bits 30:28; 0 always, 1 <, 2 <=, 3 ==, 4 !=,
/// 5 >=, 6 >).
pub const SDMA_PKT_POLL_REGMEM_HEADER_func_shift: u32 = 28;
/// POLL_REGMEM header: poll memory (1) or a register (0), bit 31.
pub const SDMA_PKT_POLL_REGMEM_HEADER_mem_poll_shift: u32 = 31;
/// POLL_REGMEM dword 5: a retry count (bits 27:16) of 0xFFF polls forever.
pub const SDMA_POLL_RETRY_FOREVER: u32 = 0xFFF;
/// Linear COPY header: broadcast to two destinations (bit 27; the packet then has
/// nine dwords).
pub const SDMA_PKT_COPY_LINEAR_HEADER_broadcast_shift: u32 = 27;

/// Header field: opcode mask (after shifting down).
pub const SDMA_PKT_HEADER_op_mask: u32 = 0xFF;
/// Header field: opcode shift.
pub const SDMA_PKT_HEADER_op_shift: u32 = 0;
/// Header field: sub-opcode mask (after shifting down).
pub const SDMA_PKT_HEADER_sub_op_mask: u32 = 0xFF;
/// Header field: sub-opcode shift.
pub const SDMA_PKT_HEADER_sub_op_shift: u32 = 8;

/// Linear copy dword 1: COUNT mask (22 bits in the VI/GFX9/GFX10 packet headers).
pub const SDMA_PKT_COPY_LINEAR_COUNT_count_mask: u32 = 0x003F_FFFF;
/// Linear copy dword 1: COUNT shift.
pub const SDMA_PKT_COPY_LINEAR_COUNT_count_shift: u32 = 0;

/// NOP header: burst count mask (bits 29:16, dwords to skip after the NOP).
pub const SDMA_PKT_NOP_HEADER_count_mask: u32 = 0x3FFF;
/// NOP header: burst count shift.
pub const SDMA_PKT_NOP_HEADER_count_shift: u32 = 16;

/// Maximum bytes per linear-copy packet on CIK (SDMA 2.0).
pub const SDMA_CIK_COPY_MAX_BYTES: u32 = 0x1F_FFFF;
/// Maximum bytes per linear-copy packet on SDMA 2.4 (Iceland/Topaz).
pub const SDMA_V2_4_COPY_MAX_BYTES: u32 = 0x1F_FFFF;
/// Maximum bytes per linear-copy packet on SDMA 3.0 (hardware limit).
pub const SDMA_V3_0_COPY_MAX_BYTES: u32 = 0x3F_FFE0;
/// Maximum bytes per linear-copy packet on SDMA 4.0 and later (4.x, 5.x, 6.x, 7.x).
pub const SDMA_V4_COPY_MAX_BYTES: u32 = 0x40_0000;
/// Maximum bytes per packet of the SI DMA engine, whose copy packet differs (5 dwords).
pub const SI_DMA_COPY_MAX_BYTES: u32 = 0xF_FFF8;

/// Required IB start alignment: the SDMA INDIRECT packet drops the low 5 address bits.
pub const SDMA_IB_ALIGNMENT: u64 = 32;
/// IBs are padded with NOPs to a multiple of this many dwords.
pub const SDMA_IB_PAD_DWORDS: usize = 8;

/// `SDMA_PKT_COPY_LINEAR_HEADER_OP(x)`: the opcode field of a header dword.
pub const fn SDMA_PKT_COPY_LINEAR_HEADER_OP(x: u32) -> u32 {
    (x & SDMA_PKT_HEADER_op_mask) << SDMA_PKT_HEADER_op_shift
}

/// `SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP(x)`: the sub-opcode field of a header dword.
pub const fn SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP(x: u32) -> u32 {
    (x & SDMA_PKT_HEADER_sub_op_mask) << SDMA_PKT_HEADER_sub_op_shift
}

/// `SDMA_PKT_COPY_LINEAR_COUNT_COUNT(x)`: the COUNT field of dword 1.
pub const fn SDMA_PKT_COPY_LINEAR_COUNT_COUNT(x: u32) -> u32 {
    (x & SDMA_PKT_COPY_LINEAR_COUNT_count_mask) << SDMA_PKT_COPY_LINEAR_COUNT_count_shift
}

/// `SDMA_PKT_NOP_HEADER_COUNT(x)`: the burst-count field of a NOP header.
pub const fn SDMA_PKT_NOP_HEADER_COUNT(x: u32) -> u32 {
    (x & SDMA_PKT_NOP_HEADER_count_mask) << SDMA_PKT_NOP_HEADER_count_shift
}

/// The 7-dword linear copy packet (`SDMA_PKT_COPY_LINEAR`), little-endian dwords.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct sdma_pkt_copy_linear {
    /// dw0: op [`SDMA_OP_COPY`] in bits 7:0, sub-op [`SDMA_SUBOP_COPY_LINEAR`] in 15:8;
    /// bits 31:16 (encrypt, TMZ, broadcast) stay 0 for plain copies.
    pub header: u32,
    /// dw1: COUNT; bytes before AI, bytes − 1 from AI on.
    pub count: u32,
    /// dw2: endian swap of destination (17:16) and source (25:24); use 0.
    pub parameter: u32,
    /// dw3: source GPU VA bits 31:0.
    pub src_addr_lo: u32,
    /// dw4: source GPU VA bits 63:32.
    pub src_addr_hi: u32,
    /// dw5: destination GPU VA bits 31:0.
    pub dst_addr_lo: u32,
    /// dw6: destination GPU VA bits 63:32.
    pub dst_addr_hi: u32,
}

/// Size of [`sdma_pkt_copy_linear`] in dwords.
pub const SDMA_PKT_COPY_LINEAR_DWORDS: usize = 7;

const _: () =
    assert!(core::mem::size_of::<sdma_pkt_copy_linear>() == SDMA_PKT_COPY_LINEAR_DWORDS * 4);
