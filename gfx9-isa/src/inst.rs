//! The decoded instruction: one type per encoding format.
//!
//! Each type holds its opcode's table row and its fields, operands already
//! typed (register file and width from the row). Fields an opcode does not
//! use are `None`.

use crate::opcodes::{OpDesc, Opcode};
use crate::operand::Operand;

/// A decoded instruction and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The instruction.
    pub inst: Instruction,
    /// Its length in bytes (4, 8 or 12).
    pub len: usize,
}

/// One instruction, by encoding format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Instruction {
    Sop2(Sop2),
    Sopk(Sopk),
    Sop1(Sop1),
    Sopc(Sopc),
    Sopp(Sopp),
    Smem(Smem),
    Vop1(Vop1),
    Vop2(Vop2),
    Vopc(Vopc),
    Vop3(Vop3),
    Vop3p(Vop3p),
    Ds(Ds),
    Flat(Flat),
    Mubuf(Mubuf),
    Mtbuf(Mtbuf),
    Mimg(Mimg),
}

impl Instruction {
    /// The opcode's table row.
    pub fn desc(&self) -> &'static OpDesc {
        match self {
            Instruction::Sop2(i) => i.op,
            Instruction::Sopk(i) => i.op,
            Instruction::Sop1(i) => i.op,
            Instruction::Sopc(i) => i.op,
            Instruction::Sopp(i) => i.op,
            Instruction::Smem(i) => i.op,
            Instruction::Vop1(i) => i.op,
            Instruction::Vop2(i) => i.op,
            Instruction::Vopc(i) => i.op,
            Instruction::Vop3(i) => i.op,
            Instruction::Vop3p(i) => i.op,
            Instruction::Ds(i) => i.op,
            Instruction::Flat(i) => i.op,
            Instruction::Mubuf(i) => i.op,
            Instruction::Mtbuf(i) => i.op,
            Instruction::Mimg(i) => i.op,
        }
    }

    /// The mnemonic.
    pub fn opcode(&self) -> Opcode {
        self.desc().opcode
    }

    /// The format's name as the ISA guides write it (VOP1 with DPP reads
    /// `VOP1_DPP`).
    pub fn format_name(&self) -> &'static str {
        match self {
            Instruction::Sop2(_) => "SOP2",
            Instruction::Sopk(_) => "SOPK",
            Instruction::Sop1(_) => "SOP1",
            Instruction::Sopc(_) => "SOPC",
            Instruction::Sopp(_) => "SOPP",
            Instruction::Smem(_) => "SMEM",
            Instruction::Vop1(i) => i.ext.name("VOP1"),
            Instruction::Vop2(i) => i.ext.name("VOP2"),
            Instruction::Vopc(i) => i.ext.name("VOPC"),
            Instruction::Vop3(i) if i.sdst.is_some() => "VOP3B",
            Instruction::Vop3(_) => "VOP3A",
            Instruction::Vop3p(i) if i.mai.is_some() => "VOP3P_MAI",
            Instruction::Vop3p(_) => "VOP3P",
            Instruction::Ds(_) => "DS",
            Instruction::Flat(i) => match i.seg {
                Segment::Flat => "FLAT",
                Segment::Global => "GLOBAL",
                Segment::Scratch => "SCRATCH",
            },
            Instruction::Mubuf(_) => "MUBUF",
            Instruction::Mtbuf(_) => "MTBUF",
            Instruction::Mimg(_) => "MIMG",
        }
    }
}

/// SOP2: `sdst = op(ssrc0, ssrc1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Sop2 {
    pub op: &'static OpDesc,
    pub sdst: Option<Operand>,
    pub ssrc0: Operand,
    pub ssrc1: Operand,
}

/// SOPK: a scalar register and a 16-bit immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Sopk {
    pub op: &'static OpDesc,
    pub sdst: Option<Operand>,
    pub simm16: u16,
    /// The trailing literal of `s_setreg_imm32_b32`.
    pub literal: Option<u32>,
}

/// SOP1: `sdst = op(ssrc0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Sop1 {
    pub op: &'static OpDesc,
    pub sdst: Option<Operand>,
    pub ssrc0: Option<Operand>,
}

/// SOPC: `scc = op(ssrc0, ssrc1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Sopc {
    pub op: &'static OpDesc,
    pub ssrc0: Operand,
    /// SSRC1; for `s_set_gpr_idx_on` the raw mode bits as `Int`.
    pub ssrc1: Operand,
}

/// SOPP: program control with a 16-bit immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Sopp {
    pub op: &'static OpDesc,
    pub simm16: u16,
}

/// The offset of a scalar memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmemOffset {
    /// An immediate byte offset (21 bits on gfx9, Vega ISA 12.6).
    Imm(u32),
    /// An SGPR holding the byte offset.
    Sgpr(Operand),
}

/// SMEM: scalar loads, stores and atomics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Smem {
    pub op: &'static OpDesc,
    pub sdata: Option<Operand>,
    pub sbase: Option<Operand>,
    pub offset: SmemOffset,
    pub glc: bool,
}

/// Source modifiers of one operand (VOP3 ABS/NEG, SDWA, DPP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct SrcMods {
    pub neg: bool,
    pub abs: bool,
    /// SDWA only: sign-extend the selected bits.
    pub sext: bool,
}

/// SDWA operand selection (Vega ISA 12.8 "SDWA").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum SdwaSel {
    Byte0,
    Byte1,
    Byte2,
    Byte3,
    Word0,
    Word1,
    Dword,
}

/// What SDWA does with the destination bits outside `dst_sel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum DstUnused {
    Pad,
    Sext,
    Preserve,
}

/// The SDWA dword of a VOP1/VOP2/VOPC instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Sdwa {
    pub dst_sel: SdwaSel,
    pub dst_unused: DstUnused,
    pub clamp: bool,
    pub omod: u8,
    pub src0_sel: SdwaSel,
    pub src0_mods: SrcMods,
    pub src1_sel: SdwaSel,
    pub src1_mods: SrcMods,
    /// VOPC only: the SGPR pair the result goes to instead of VCC.
    pub sdst: Option<Operand>,
}

/// The DPP dword of a VOP1/VOP2/VOPC instruction (Vega ISA 12.8 "DPP").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Dpp {
    pub ctrl: u16,
    pub bound_ctrl: bool,
    pub src0_mods: SrcMods,
    pub src1_mods: SrcMods,
    pub bank_mask: u8,
    pub row_mask: u8,
}

/// The extra dword of a 32-bit VALU encoding, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum VopExt {
    None,
    Sdwa(Sdwa),
    Dpp(Dpp),
}

impl VopExt {
    fn name(&self, base: &'static str) -> &'static str {
        match (self, base) {
            (VopExt::None, b) => b,
            (VopExt::Sdwa(_), "VOP1") => "VOP1_SDWA",
            (VopExt::Sdwa(_), "VOP2") => "VOP2_SDWA",
            (VopExt::Sdwa(_), _) => "VOPC_SDWA",
            (VopExt::Dpp(_), "VOP1") => "VOP1_DPP",
            (VopExt::Dpp(_), "VOP2") => "VOP2_DPP",
            (VopExt::Dpp(_), _) => "VOPC_DPP",
        }
    }
}

/// VOP1: `vdst = op(src0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Vop1 {
    pub op: &'static OpDesc,
    pub vdst: Option<Operand>,
    pub src0: Option<Operand>,
    pub ext: VopExt,
}

/// VOP2: `vdst = op(src0, vsrc1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Vop2 {
    pub op: &'static OpDesc,
    pub vdst: Operand,
    pub src0: Operand,
    pub vsrc1: Operand,
    /// The literal K of `v_madmk`/`v_madak`/`v_fmamk`/`v_fmaak`.
    pub k: Option<u32>,
    pub ext: VopExt,
}

/// VOPC: `vcc = op(src0, vsrc1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Vopc {
    pub op: &'static OpDesc,
    pub src0: Operand,
    pub vsrc1: Operand,
    pub ext: VopExt,
}

/// VOP3 (VOP3a, and VOP3b when `sdst` is set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Vop3 {
    pub op: &'static OpDesc,
    /// VDST, or the SGPR destination of compares and `v_readlane_b32`.
    pub vdst: Option<Operand>,
    /// VOP3b's carry/flag SGPR destination.
    pub sdst: Option<Operand>,
    pub src: [Option<Operand>; 3],
    pub mods: [SrcMods; 3],
    pub op_sel: u8,
    pub clamp: bool,
    pub omod: u8,
}

/// The matrix-core fields of a VOP3P MFMA (MI100 ISA 12.x "VOP3P-MAI").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Mai {
    pub cbsz: u8,
    pub abid: u8,
    pub blgp: u8,
}

/// VOP3P: packed math, dot products, MFMA and the ACC VGPR moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Vop3p {
    pub op: &'static OpDesc,
    pub vdst: Operand,
    pub src: [Option<Operand>; 3],
    pub op_sel: u8,
    pub op_sel_hi: u8,
    pub neg_lo: u8,
    pub neg_hi: u8,
    pub clamp: bool,
    pub mai: Option<Mai>,
}

/// DS: LDS/GDS access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Ds {
    pub op: &'static OpDesc,
    pub vdst: Option<Operand>,
    pub addr: Option<Operand>,
    pub data0: Option<Operand>,
    pub data1: Option<Operand>,
    pub offset0: u8,
    pub offset1: u8,
    pub gds: bool,
}

/// The address space of a FLAT-encoded instruction (SEG field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Segment {
    Flat,
    Scratch,
    Global,
}

/// Cache policy bits: GLC/SLC (and gfx90a's SCC), or gfx940's SC0/SC1/NT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct CachePolicy {
    pub glc_sc0: bool,
    pub slc_nt: bool,
    pub scc_sc1: bool,
}

/// FLAT, GLOBAL and SCRATCH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Flat {
    pub op: &'static OpDesc,
    pub seg: Segment,
    pub vdst: Option<Operand>,
    /// VADDR, `Off` when SCRATCH takes its address from SADDR alone.
    pub vaddr: Operand,
    pub data: Option<Operand>,
    /// SADDR (GLOBAL/SCRATCH), `Off` when not used.
    pub saddr: Option<Operand>,
    /// The byte offset: 12 bits unsigned for FLAT, 13 bits signed for
    /// GLOBAL and SCRATCH (Vega ISA 9.3).
    pub offset: i16,
    pub cache: CachePolicy,
    pub lds: bool,
}

/// MUBUF: untyped buffer access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Mubuf {
    pub op: &'static OpDesc,
    pub vdata: Option<Operand>,
    pub vaddr: Option<Operand>,
    pub srsrc: Option<Operand>,
    pub soffset: Option<Operand>,
    pub offset: u16,
    pub offen: bool,
    pub idxen: bool,
    pub cache: CachePolicy,
    pub lds: bool,
}

/// MTBUF: typed buffer access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Mtbuf {
    pub op: &'static OpDesc,
    pub vdata: Operand,
    pub vaddr: Option<Operand>,
    pub srsrc: Operand,
    pub soffset: Operand,
    pub offset: u16,
    pub offen: bool,
    pub idxen: bool,
    pub dfmt: u8,
    pub nfmt: u8,
    pub cache: CachePolicy,
}

/// MIMG: image loads, stores and atomics (Vega ISA 8 and 12.17).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Mimg {
    pub op: &'static OpDesc,
    /// VDATA: one register per DMASK bit (halved by D16), one more with
    /// TFE; an AGPR tuple with gfx90a's ACC bit.
    pub vdata: Operand,
    /// The first address VGPR: how many follow depends on the image's
    /// dimension, read from the resource at execution (Vega ISA 8.2.1).
    pub vaddr: Operand,
    /// The image resource: 8 SGPRs (4 with R128).
    pub srsrc: Operand,
    pub dmask: u8,
    pub unorm: bool,
    pub glc: bool,
    pub slc: bool,
    pub da: bool,
    pub r128: bool,
    pub tfe: bool,
    pub lwe: bool,
    pub d16: bool,
}
