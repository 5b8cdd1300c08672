//! The SDMA linear-copy packet and its constants (amdgpu `sdma_v*` packet headers,
//! `vega10_sdma_pkt_open.h`, `cikd.h`).
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
