//! The gfx9 processors the decoder knows, and the set of them an opcode
//! exists on.
//!
//! gfx900, gfx902, gfx904, gfx909 and gfx90c share one encoding (Vega ISA);
//! gfx906 adds the dot products and mixed-precision FMA (Vega 7nm ISA);
//! gfx908 (MI100, CDNA1) adds MFMA and the accumulation VGPRs; gfx90a (MI200,
//! CDNA2) adds packed FP32, FP64 atomics and AGPR operands in memory
//! instructions; gfx940/941/942 (MI300, CDNA3) renumber a few opcodes and
//! replace GLC/SLC with SC0/SC1/NT.

use std::fmt;
use std::ops::BitOr;

/// A processor whose instruction encoding the decoder follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// gfx900 (Vega 10); also gfx902, gfx904, gfx909 and gfx90c.
    Gfx900,
    /// gfx906 (Vega 20).
    Gfx906,
    /// gfx908 (MI100, CDNA1).
    Gfx908,
    /// gfx90a (MI200, CDNA2).
    Gfx90a,
    /// gfx940, gfx941 and gfx942 (MI300, CDNA3), where their encodings agree
    /// with gfx90a's.
    Gfx940,
}

impl Target {
    /// Every target, in order of age.
    pub const ALL: [Target; 5] = [
        Target::Gfx900,
        Target::Gfx906,
        Target::Gfx908,
        Target::Gfx90a,
        Target::Gfx940,
    ];

    /// The target of a processor name as LLVM spells it (`gfx90a`,
    /// `gfx90a:xnack-`, `amdgcn-amd-amdhsa--gfx906`).
    pub fn from_name(name: &str) -> Option<Target> {
        let proc = name.rsplit('-').next().unwrap_or(name);
        let proc = proc.split(':').next().unwrap_or(proc);
        Some(match proc {
            "gfx900" | "gfx902" | "gfx904" | "gfx909" | "gfx90c" => Target::Gfx900,
            "gfx906" => Target::Gfx906,
            "gfx908" => Target::Gfx908,
            "gfx90a" => Target::Gfx90a,
            "gfx940" | "gfx941" | "gfx942" => Target::Gfx940,
            _ => return None,
        })
    }

    /// The target of an AMDGPU code object's `EF_AMDGPU_MACH` (the low byte
    /// of the ELF header's `e_flags`, LLVM's AMDGPUUsage "ELF header").
    pub fn from_elf_mach(mach: u8) -> Option<Target> {
        Some(match mach {
            0x2c | 0x2d | 0x2e | 0x31 | 0x32 => Target::Gfx900,
            0x2f => Target::Gfx906,
            0x30 => Target::Gfx908,
            0x3f => Target::Gfx90a,
            0x40 | 0x4b | 0x4c => Target::Gfx940,
            _ => return None,
        })
    }

    /// The set holding only this target.
    pub const fn bit(self) -> Targets {
        Targets(1 << self as u8)
    }

    /// Whether memory and VALU instructions name AGPRs through their ACC
    /// bits (gfx90a and later; gfx908 reaches AGPRs only through
    /// `v_accvgpr_*` and MFMA).
    pub const fn has_acc_bits(self) -> bool {
        matches!(self, Target::Gfx90a | Target::Gfx940)
    }

    /// Whether cache policy bits are SC0/SC1/NT (gfx940) rather than
    /// GLC/SLC.
    pub const fn has_sc_bits(self) -> bool {
        matches!(self, Target::Gfx940)
    }

    /// Whether 64-bit and wider VGPR and AGPR tuples must start at an even
    /// register (MI200 ISA 3.6.1: "aligned VGPR pairs").
    pub const fn aligned_vgpr_tuples(self) -> bool {
        matches!(self, Target::Gfx90a | Target::Gfx940)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Target::Gfx900 => "gfx900",
            Target::Gfx906 => "gfx906",
            Target::Gfx908 => "gfx908",
            Target::Gfx90a => "gfx90a",
            Target::Gfx940 => "gfx940",
        })
    }
}

/// A set of targets: those an opcode exists on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Targets(u8);

impl Targets {
    /// gfx900.
    pub const GFX900: Targets = Target::Gfx900.bit();
    /// gfx906.
    pub const GFX906: Targets = Target::Gfx906.bit();
    /// gfx908.
    pub const GFX908: Targets = Target::Gfx908.bit();
    /// gfx90a.
    pub const GFX90A: Targets = Target::Gfx90a.bit();
    /// gfx940.
    pub const GFX940: Targets = Target::Gfx940.bit();

    /// Whether the set holds `target`.
    pub const fn contains(self, target: Target) -> bool {
        self.0 & target.bit().0 != 0
    }

    /// The union of two sets (usable in constants).
    pub const fn or(self, other: Targets) -> Targets {
        Targets(self.0 | other.0)
    }
}

impl BitOr for Targets {
    type Output = Targets;
    fn bitor(self, rhs: Targets) -> Targets {
        self.or(rhs)
    }
}
