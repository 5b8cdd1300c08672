//! Operands: register ranges, special registers, inline constants and
//! literals, decoded from the 8-, 9- and 10-bit operand fields.
//!
//! The source operand encoding is Vega ISA section 3.1 / 12.3 ("SSRC0",
//! "SRC0"): 0-101 SGPRs, 102-127 special registers and trap temporaries,
//! 128-208 integer constants, 240-248 float constants, 249/250 the SDWA and
//! DPP markers, 251-254 special sources, 255 a literal dword, 256-511 VGPRs.

use std::fmt;

/// A run of consecutive registers of one file: `s[4:5]` is first 4, count 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegRange {
    /// The first register.
    pub first: u16,
    /// How many registers (1 for a single one).
    pub count: u8,
}

/// A scalar register that is not a general SGPR (Vega ISA 3.1, 4.x).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Special {
    /// FLAT_SCRATCH (SGPRs 102-103).
    FlatScratch,
    /// XNACK_MASK (104-105).
    XnackMask,
    /// VCC (106-107).
    Vcc,
    /// M0 (124).
    M0,
    /// EXEC (126-127).
    Exec,
    /// The aperture bases and limits (235-238), read-only 64-bit sources.
    SharedBase,
    /// See [`Special::SharedBase`].
    SharedLimit,
    /// See [`Special::SharedBase`].
    PrivateBase,
    /// See [`Special::SharedBase`].
    PrivateLimit,
    /// POPS_EXITING_WAVE_ID (239).
    PopsExitingWaveId,
    /// VCCZ as a source (251).
    Vccz,
    /// EXECZ as a source (252).
    Execz,
    /// SCC as a source (253).
    Scc,
    /// LDS_DIRECT (254).
    LdsDirect,
}

/// Which half of a 64-bit special register pair an operand names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Half {
    /// Both halves (a 64-bit operand).
    Both,
    /// The low dword (`vcc_lo`).
    Lo,
    /// The high dword (`vcc_hi`).
    Hi,
}

/// The float inline constants (Vega ISA 12.3, source codes 240-248).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InlineFloat {
    /// 0.5
    Half,
    /// -0.5
    MinusHalf,
    /// 1.0
    One,
    /// -1.0
    MinusOne,
    /// 2.0
    Two,
    /// -2.0
    MinusTwo,
    /// 4.0
    Four,
    /// -4.0
    MinusFour,
    /// 1/(2*pi)
    InvTwoPi,
}

impl InlineFloat {
    /// The constant of source code `code` (240-248).
    pub const fn from_code(code: u16) -> Option<InlineFloat> {
        Some(match code {
            240 => InlineFloat::Half,
            241 => InlineFloat::MinusHalf,
            242 => InlineFloat::One,
            243 => InlineFloat::MinusOne,
            244 => InlineFloat::Two,
            245 => InlineFloat::MinusTwo,
            246 => InlineFloat::Four,
            247 => InlineFloat::MinusFour,
            248 => InlineFloat::InvTwoPi,
            _ => return None,
        })
    }

    /// The value as an f64 (exact for all but 1/(2*pi), which is the f64
    /// the hardware uses for 64-bit operands: 0x3fc45f306dc9c882).
    pub fn value(self) -> f64 {
        match self {
            InlineFloat::Half => 0.5,
            InlineFloat::MinusHalf => -0.5,
            InlineFloat::One => 1.0,
            InlineFloat::MinusOne => -1.0,
            InlineFloat::Two => 2.0,
            InlineFloat::MinusTwo => -2.0,
            InlineFloat::Four => 4.0,
            InlineFloat::MinusFour => -4.0,
            InlineFloat::InvTwoPi => f64::from_bits(0x3fc4_5f30_6dc9_c882),
        }
    }

    /// The bit pattern of the constant as an f32 (0x3e22f983 for 1/(2*pi)).
    pub fn f32_bits(self) -> u32 {
        match self {
            InlineFloat::InvTwoPi => 0x3e22_f983,
            other => (other.value() as f32).to_bits(),
        }
    }

    /// The bit pattern of the constant as an f16 (0x3118 for 1/(2*pi)).
    pub fn f16_bits(self) -> u16 {
        match self {
            InlineFloat::Half => 0x3800,
            InlineFloat::MinusHalf => 0xb800,
            InlineFloat::One => 0x3c00,
            InlineFloat::MinusOne => 0xbc00,
            InlineFloat::Two => 0x4000,
            InlineFloat::MinusTwo => 0xc000,
            InlineFloat::Four => 0x4400,
            InlineFloat::MinusFour => 0xc400,
            InlineFloat::InvTwoPi => 0x3118,
        }
    }

    /// All nine, in source-code order.
    pub const ALL: [InlineFloat; 9] = [
        InlineFloat::Half,
        InlineFloat::MinusHalf,
        InlineFloat::One,
        InlineFloat::MinusOne,
        InlineFloat::Two,
        InlineFloat::MinusTwo,
        InlineFloat::Four,
        InlineFloat::MinusFour,
        InlineFloat::InvTwoPi,
    ];
}

/// One decoded operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// General scalar registers.
    Sgpr(RegRange),
    /// Vector registers.
    Vgpr(RegRange),
    /// Accumulation registers (gfx908 and later).
    Agpr(RegRange),
    /// Trap temporary SGPRs TTMP0-15 (codes 108-123).
    Ttmp(RegRange),
    /// A special register, or one half of a 64-bit one.
    Special(Special, Half),
    /// An integer inline constant, -16..=64.
    Int(i8),
    /// A float inline constant.
    Float(InlineFloat),
    /// The literal dword that follows the instruction.
    Literal(u32),
    /// `off`: no register (an address operand not used).
    Off,
    /// A source code with no meaning on this target (printed as LLVM does,
    /// never executed: the decoder rejects instructions that read one).
    Reserved(u16),
}

/// Source code of the literal marker.
pub(crate) const LITERAL: u16 = 255;
/// Source code that marks an SDWA instruction in VOP1/VOP2/VOPC src0.
pub(crate) const SDWA: u16 = 249;
/// Source code that marks a DPP instruction in VOP1/VOP2/VOPC src0.
pub(crate) const DPP: u16 = 250;

impl Operand {
    /// Decodes a scalar-capable source or destination code (0-255) of
    /// `count` dwords; the literal marker (255) becomes `Literal(literal)`.
    pub(crate) fn scalar(code: u16, count: u8, literal: u32) -> Operand {
        let range = |first: u16| RegRange { first, count };
        let pair = |special: Special, base: u16| {
            let half = match (count, code - base) {
                (1, 0) => Half::Lo,
                (1, _) => Half::Hi,
                _ => Half::Both,
            };
            Operand::Special(special, half)
        };
        match code {
            0..=101 => Operand::Sgpr(range(code)),
            102 | 103 => pair(Special::FlatScratch, 102),
            104 | 105 => pair(Special::XnackMask, 104),
            106 | 107 => pair(Special::Vcc, 106),
            108..=123 => Operand::Ttmp(range(code - 108)),
            124 => Operand::Special(Special::M0, Half::Lo),
            126 | 127 => pair(Special::Exec, 126),
            128..=192 => Operand::Int((code - 128) as i8),
            193..=208 => Operand::Int(-((code - 192) as i8)),
            235 => Operand::Special(Special::SharedBase, Half::Both),
            236 => Operand::Special(Special::SharedLimit, Half::Both),
            237 => Operand::Special(Special::PrivateBase, Half::Both),
            238 => Operand::Special(Special::PrivateLimit, Half::Both),
            239 => Operand::Special(Special::PopsExitingWaveId, Half::Lo),
            240..=248 => match InlineFloat::from_code(code) {
                Some(f) => Operand::Float(f),
                None => Operand::Reserved(code),
            },
            251 => Operand::Special(Special::Vccz, Half::Lo),
            252 => Operand::Special(Special::Execz, Half::Lo),
            253 => Operand::Special(Special::Scc, Half::Lo),
            254 => Operand::Special(Special::LdsDirect, Half::Lo),
            LITERAL => Operand::Literal(literal),
            256..=511 => Operand::Vgpr(RegRange {
                first: code - 256,
                count,
            }),
            _ => Operand::Reserved(code),
        }
    }

    /// A VGPR range from an 8-bit VGPR field.
    pub(crate) fn vgpr(reg: u16, count: u8) -> Operand {
        Operand::Vgpr(RegRange { first: reg, count })
    }

    /// An AGPR range from an 8-bit register field.
    pub(crate) fn agpr(reg: u16, count: u8) -> Operand {
        Operand::Agpr(RegRange { first: reg, count })
    }

    /// A VGPR or, when `acc` is set, an AGPR range.
    pub(crate) fn vector(reg: u16, count: u8, acc: bool) -> Operand {
        if acc {
            Operand::agpr(reg, count)
        } else {
            Operand::vgpr(reg, count)
        }
    }

    /// Whether this is a literal dword.
    pub fn is_literal(&self) -> bool {
        matches!(self, Operand::Literal(_))
    }

    /// The register range of a register operand.
    pub fn regs(&self) -> Option<RegRange> {
        match *self {
            Operand::Sgpr(r) | Operand::Vgpr(r) | Operand::Agpr(r) | Operand::Ttmp(r) => Some(r),
            _ => None,
        }
    }
}

fn write_range(f: &mut fmt::Formatter<'_>, prefix: &str, r: RegRange) -> fmt::Result {
    if r.count == 1 {
        write!(f, "{prefix}{}", r.first)
    } else {
        write!(
            f,
            "{prefix}[{}:{}]",
            r.first,
            r.first as u32 + r.count as u32 - 1
        )
    }
}

impl fmt::Display for Operand {
    /// Registers and special sources as LLVM's AMDGPU assembler spells them;
    /// constants without knowing the operand's type (the disassembler
    /// prints constants itself, by type).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Operand::Sgpr(r) => write_range(f, "s", r),
            Operand::Vgpr(r) => write_range(f, "v", r),
            Operand::Agpr(r) => write_range(f, "a", r),
            Operand::Ttmp(r) => write_range(f, "ttmp", r),
            Operand::Special(s, half) => {
                let base = match s {
                    Special::FlatScratch => "flat_scratch",
                    Special::XnackMask => "xnack_mask",
                    Special::Vcc => "vcc",
                    Special::M0 => return f.write_str("m0"),
                    Special::Exec => "exec",
                    Special::SharedBase => return f.write_str("src_shared_base"),
                    Special::SharedLimit => return f.write_str("src_shared_limit"),
                    Special::PrivateBase => return f.write_str("src_private_base"),
                    Special::PrivateLimit => return f.write_str("src_private_limit"),
                    Special::PopsExitingWaveId => return f.write_str("src_pops_exiting_wave_id"),
                    Special::Vccz => return f.write_str("src_vccz"),
                    Special::Execz => return f.write_str("src_execz"),
                    Special::Scc => return f.write_str("src_scc"),
                    Special::LdsDirect => return f.write_str("src_lds_direct"),
                };
                match half {
                    Half::Both => f.write_str(base),
                    Half::Lo => write!(f, "{base}_lo"),
                    Half::Hi => write!(f, "{base}_hi"),
                }
            }
            Operand::Int(v) => write!(f, "{v}"),
            Operand::Float(c) => write!(f, "{}", c.value()),
            Operand::Literal(v) => write!(f, "0x{v:x}"),
            Operand::Off => f.write_str("off"),
            Operand::Reserved(code) => write!(f, "src_reserved_{code}"),
        }
    }
}
