//! The encoding tables: for each format, the opcodes it has, as data.
//!
//! A row ([`OpDesc`]) gives an opcode's number in its format's opcode field,
//! the targets that have it, its mnemonic ([`Opcode`]) and its operands in
//! assembler order ([`Slot`]), with their widths. The decoder finds a row
//! through [`lookup`], an index built at compile time from the rows.

mod memory;
mod mnemonic;
mod scalar;
mod vector;

pub use mnemonic::Opcode;

use crate::target::{Target, Targets};

/// Every target.
pub const ALL: Targets = Targets::GFX900
    .or(Targets::GFX906)
    .or(Targets::GFX908)
    .or(Targets::GFX90A)
    .or(Targets::GFX940);

/// The type of a source operand as far as encoding and printing go: how
/// many registers it takes and how a constant in it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// A 16-bit integer: float inline constants are their f16 bit patterns,
    /// a literal is its low 16 bits.
    I16,
    /// A 16-bit float: a literal is its low 16 bits.
    F16,
    /// A 32-bit value (integer or float).
    B32,
    /// A 64-bit value: a register pair; a 32-bit literal (the high half of
    /// an f64, zero-extended otherwise).
    B64,
    /// A wider register tuple (MFMA operands), in dwords.
    Wide(u8),
}

impl Ty {
    /// How many 32-bit registers an operand of this type takes.
    pub const fn dwords(self) -> u8 {
        match self {
            Ty::I16 | Ty::F16 | Ty::B32 => 1,
            Ty::B64 => 2,
            Ty::Wide(n) => n,
        }
    }
}

/// One operand of an opcode, in assembler order: which field of the format
/// holds it and how wide it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// SDST of SOP1/SOP2/SOPK, the scalar destination of VOP3 compares and
    /// `v_readlane_b32`/`v_readfirstlane_b32` (dwords).
    Sdst(u8),
    /// SSRC0 of SOP1/SOP2/SOPC.
    Ssrc0(Ty),
    /// SSRC1 of SOP2/SOPC.
    Ssrc1(Ty),
    /// SIMM16 printed in hex (`s_movk_i32`).
    Simm16Hex,
    /// SIMM16 printed in decimal (`s_nop`, `s_trap`).
    Simm16Dec,
    /// SIMM16 as a branch offset in dwords.
    Label,
    /// SIMM16 as `hwreg(id, offset, size)`.
    Hwreg,
    /// SIMM16 as the `s_waitcnt` counters.
    Waitcnt,
    /// SIMM16 as `sendmsg(...)`.
    Sendmsg,
    /// SIMM16 or SSRC1 as the `s_set_gpr_idx` mode bits.
    GprIdxMode,
    /// The literal dword of `s_setreg_imm32_b32`.
    Literal,
    /// SDATA of SMEM (dwords).
    Sdata(u8),
    /// SDATA of `s_atc_probe`, an immediate.
    SdataImm,
    /// SBASE of SMEM (dwords: 2 for an address, 4 for a buffer resource).
    Sbase(u8),
    /// The SMEM offset: immediate or SOFFSET.
    SmemOffset,
    /// VDST (dwords); an AGPR where the ACC bit says so.
    Vdst(u8),
    /// VDST that is always an AGPR (`v_accvgpr_write_b32`).
    Adst(u8),
    /// SRC0 that is always an AGPR (`v_accvgpr_read_b32`,
    /// `v_accvgpr_mov_b32`).
    Asrc0,
    /// VCC, implicit in the 32-bit encodings.
    Vcc,
    /// The carry-out SDST of VOP3b.
    SdstCarry,
    /// SRC0: any source.
    Src0(Ty),
    /// VSRC1 of VOP2/VOPC: a VGPR.
    Vsrc1(Ty),
    /// SRC1 of VOP3/VOP3P: any source.
    Src1(Ty),
    /// SRC2 of VOP3/VOP3P: any source.
    Src2(Ty),
    /// The literal constant K of `v_madmk`/`v_madak`/`v_fmamk`/`v_fmaak`.
    K(Ty),
    /// ADDR of DS; VADDR of FLAT/MUBUF/MTBUF.
    Addr,
    /// VADDR of FLAT/GLOBAL/SCRATCH/MUBUF/MTBUF.
    Vaddr,
    /// DATA0 of DS, DATA of FLAT (dwords).
    Data0(u8),
    /// DATA1 of DS (dwords).
    Data1(u8),
    /// SADDR of GLOBAL/SCRATCH (`off` when not used).
    Saddr,
    /// VDATA of MUBUF/MTBUF (dwords).
    Vdata(u8),
    /// SRSRC of MUBUF/MTBUF.
    Srsrc,
    /// SOFFSET of MUBUF/MTBUF.
    Soffset,
}

/// Which encoding suffix LLVM's assembler writes after the mnemonic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Suffix {
    /// None: the opcode has one encoding.
    None,
    /// `_e32`: the 32-bit encoding of an opcode that has a VOP3 one too.
    E32,
    /// `_e64`: the VOP3 encoding of a VOP1/VOP2/VOPC opcode.
    E64,
}

/// One row of an encoding table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpDesc {
    /// The value of the format's opcode field.
    pub code: u16,
    /// The targets that have this opcode under this number.
    pub targets: Targets,
    /// The mnemonic.
    pub opcode: Opcode,
    /// The suffix of this encoding.
    pub suffix: Suffix,
    /// The operands in assembler order.
    pub slots: &'static [Slot],
}

impl OpDesc {
    pub(crate) const fn new(
        code: u16,
        targets: Targets,
        opcode: Opcode,
        suffix: Suffix,
        slots: &'static [Slot],
    ) -> OpDesc {
        OpDesc {
            code,
            targets,
            opcode,
            suffix,
            slots,
        }
    }

    /// The mnemonic.
    pub fn name(&self) -> &'static str {
        self.opcode.name()
    }

    /// Whether the row has an operand in `slot`'s position (compared by
    /// kind, ignoring width).
    pub fn has(&self, pred: impl Fn(&Slot) -> bool) -> bool {
        self.slots.iter().any(pred)
    }
}

/// An instruction format: one table, one opcode field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Scalar ALU, two sources.
    Sop2,
    /// Scalar ALU with a 16-bit immediate.
    Sopk,
    /// Scalar ALU, one source.
    Sop1,
    /// Scalar compare.
    Sopc,
    /// Scalar program control.
    Sopp,
    /// Scalar memory.
    Smem,
    /// Vector ALU, two sources, 32-bit encoding.
    Vop2,
    /// Vector ALU, one source, 32-bit encoding.
    Vop1,
    /// Vector compare, 32-bit encoding.
    Vopc,
    /// Vector ALU, 64-bit encoding.
    Vop3,
    /// Vector ALU on packed operands and matrix instructions.
    Vop3p,
    /// LDS and GDS.
    Ds,
    /// FLAT (SEG 0).
    Flat,
    /// GLOBAL (SEG 2).
    Global,
    /// SCRATCH (SEG 1).
    Scratch,
    /// Untyped buffer.
    Mubuf,
    /// Typed buffer.
    Mtbuf,
    /// Image memory.
    Mimg,
}

impl Format {
    /// Every format with a table.
    pub const ALL: [Format; 18] = [
        Format::Sop2,
        Format::Sopk,
        Format::Sop1,
        Format::Sopc,
        Format::Sopp,
        Format::Smem,
        Format::Vop2,
        Format::Vop1,
        Format::Vopc,
        Format::Vop3,
        Format::Vop3p,
        Format::Ds,
        Format::Flat,
        Format::Global,
        Format::Scratch,
        Format::Mubuf,
        Format::Mtbuf,
        Format::Mimg,
    ];

    /// The format's name as AMD's ISA guides write it.
    pub const fn name(self) -> &'static str {
        match self {
            Format::Sop2 => "SOP2",
            Format::Sopk => "SOPK",
            Format::Sop1 => "SOP1",
            Format::Sopc => "SOPC",
            Format::Sopp => "SOPP",
            Format::Smem => "SMEM",
            Format::Vop2 => "VOP2",
            Format::Vop1 => "VOP1",
            Format::Vopc => "VOPC",
            Format::Vop3 => "VOP3",
            Format::Vop3p => "VOP3P",
            Format::Ds => "DS",
            Format::Flat => "FLAT",
            Format::Global => "GLOBAL",
            Format::Scratch => "SCRATCH",
            Format::Mubuf => "MUBUF",
            Format::Mtbuf => "MTBUF",
            Format::Mimg => "MIMG",
        }
    }

    /// The format's table.
    pub const fn table(self) -> &'static [OpDesc] {
        match self {
            Format::Sop2 => scalar::SOP2,
            Format::Sopk => scalar::SOPK,
            Format::Sop1 => scalar::SOP1,
            Format::Sopc => scalar::SOPC,
            Format::Sopp => scalar::SOPP,
            Format::Smem => scalar::SMEM,
            Format::Vop2 => vector::VOP2,
            Format::Vop1 => vector::VOP1,
            Format::Vopc => vector::VOPC,
            Format::Vop3 => vector::VOP3,
            Format::Vop3p => vector::VOP3P,
            Format::Ds => memory::DS,
            Format::Flat => memory::FLAT,
            Format::Global => memory::GLOBAL,
            Format::Scratch => memory::SCRATCH,
            Format::Mubuf => memory::MUBUF,
            Format::Mtbuf => memory::MTBUF,
            Format::Mimg => memory::MIMG,
        }
    }

    /// How many opcode values the format's opcode field holds.
    pub const fn opcode_space(self) -> usize {
        match self {
            Format::Sopk | Format::Mtbuf => 32,
            Format::Vop2 => 64,
            Format::Sop2 | Format::Sopc | Format::Sopp | Format::Vop3p => 128,
            Format::Flat | Format::Global | Format::Scratch | Format::Mubuf | Format::Mimg => 128,
            Format::Sop1 | Format::Smem | Format::Vop1 | Format::Vopc | Format::Ds => 256,
            Format::Vop3 => 1024,
        }
    }
}

/// Room in an index: the largest opcode space.
const INDEX_SIZE: usize = 1024;

/// Row numbers plus one by opcode value (0: no row), per target.
type Index = [[u16; INDEX_SIZE]; Target::ALL.len()];

const fn build_index(table: &'static [OpDesc]) -> Index {
    let mut index = [[0u16; INDEX_SIZE]; Target::ALL.len()];
    let mut t = 0;
    while t < Target::ALL.len() {
        let target = Target::ALL[t];
        let mut i = 0;
        while i < table.len() {
            let row = &table[i];
            if row.targets.contains(target) && (row.code as usize) < INDEX_SIZE {
                index[t][row.code as usize] = i as u16 + 1;
            }
            i += 1;
        }
        t += 1;
    }
    index
}

static INDEXES: [Index; Format::ALL.len()] = {
    let mut all = [[[0u16; INDEX_SIZE]; Target::ALL.len()]; Format::ALL.len()];
    let mut f = 0;
    while f < Format::ALL.len() {
        all[f] = build_index(Format::ALL[f].table());
        f += 1;
    }
    all
};

/// The row of opcode `code` of `format` on `target`, if it has one.
pub fn lookup(format: Format, target: Target, code: u16) -> Option<&'static OpDesc> {
    let row = *INDEXES[format as usize][target as usize].get(code as usize)?;
    let row = row.checked_sub(1)?;
    format.table().get(row as usize)
}
