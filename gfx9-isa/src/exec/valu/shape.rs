//! What every VALU class shares: the shape of an instruction (`Vop`), how an
//! opcode executes (`Kind`), and the float mode and input modifiers
//! (Vega ISA 3.6 "Mode Register", 6.2.3 "Input modifiers").

use super::super::operands::Ty;
use super::super::wave::Wave;
use super::super::{Exec, Fail};
use crate::inst::{SrcMods, VopExt};
use crate::opcodes::OpDesc;
use crate::operand::Operand;

/// A lane function of up to three sources.
pub(crate) type LaneFn = fn(&[u64; 3]) -> u64;

/// How an opcode executes.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// `dst = f(srcs)` per active lane. `float` says OMOD and CLAMP apply
    /// as for a float of the destination's type.
    Map {
        src: [Ty; 3],
        n: usize,
        dst: Ty,
        f: LaneFn,
        float: bool,
    },
    /// A compare into a lane mask; `x` also writes EXEC (`v_cmpx_*`).
    Cmp {
        ty: Ty,
        src1: Ty,
        f: fn(u64, u64) -> bool,
        x: bool,
    },
    /// A 32-bit add/sub with carry out (and in, if `carry_in`): VCC in the
    /// 32-bit encoding, SDST and SRC2 in VOP3b (Vega ISA 6.2 "Carry").
    Carry {
        f: fn(u32, u32, bool) -> (u32, bool),
        carry_in: bool,
    },
    /// Everything with its own rules (cross-lane, VCC readers, two
    /// destinations).
    Special,
}

/// One VALU instruction in a shape all encodings share.
pub(crate) struct Vop {
    pub op: &'static OpDesc,
    pub srcs: [Option<Operand>; 3],
    pub mods: [SrcMods; 3],
    pub vdst: Option<Operand>,
    pub sdst: Option<Operand>,
    pub clamp: bool,
    pub omod: u8,
    pub ext: VopExt,
    pub k: Option<u32>,
    pub vop3: bool,
}

/// The float semantics implemented: IEEE mode, round to nearest even,
/// f64/f16 denormals kept, f32 denormals kept (FP_DENORM(bits 1:0) = 3) or
/// flushed on input and output (0) (Vega ISA 3.6 "Mode Register").
/// Returns whether f32 denormals flush; other modes stop the wave by name
/// rather than round or flush wrongly.
pub(crate) fn float_mode(w: &Wave) -> Exec<bool> {
    let m = w.mode;
    let f32_denorm = (m >> 4) & 3;
    if m & 0xf != 0 || (m >> 6) & 3 != 3 || m >> 9 & 1 != 1 || !matches!(f32_denorm, 0 | 3) {
        return Err(Fail::Unimplemented(
            "float MODE other than IEEE, round to nearest even, denormals kept or f32 flushed",
        ));
    }
    Ok(f32_denorm == 0)
}

/// [`float_mode`] for the instructions implemented with denormals kept
/// only (the division helpers, packed math).
pub(crate) fn check_float_mode(w: &Wave) -> Exec {
    if float_mode(w)? {
        return Err(Fail::Unimplemented(
            "f32 denormal flushing for this instruction",
        ));
    }
    Ok(())
}

/// An f32 denormal becomes a zero of its sign.
#[inline]
pub(crate) fn ftz32(bits: u64) -> u64 {
    if bits & 0x7f80_0000 == 0 {
        bits & 0x8000_0000
    } else {
        bits
    }
}

/// MODE.DX10_CLAMP: CLAMP turns NaN into 0 (Vega ISA 3.6).
pub(super) fn dx10_clamp(w: &Wave) -> bool {
    w.mode >> 8 & 1 == 1
}

pub(super) fn is_float(ty: Ty) -> bool {
    matches!(ty, Ty::F16 | Ty::F32 | Ty::F64)
}

/// Applies ABS then NEG to a float's bits (Vega ISA 6.2.3 "Input
/// modifiers").
pub(crate) fn apply_mods(v: u64, ty: Ty, m: SrcMods) -> u64 {
    let sign = match ty {
        Ty::F16 | Ty::B16 => 1u64 << 15,
        Ty::F32 | Ty::B32 => 1 << 31,
        Ty::F64 | Ty::B64 => 1 << 63,
    };
    let mut v = v;
    if m.abs {
        v &= !sign;
    }
    if m.neg {
        v ^= sign;
    }
    v
}
