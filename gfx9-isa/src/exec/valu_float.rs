//! Floating-point VALU operations and conversions (Vega ISA 12.7-12.10;
//! MI200 ISA 12.7-12.11 for packed FP32), the division helpers and VOP3P
//! packed math.
//!
//! Basic arithmetic (add, mul, fma, sqrt) rounds to nearest even as IEEE
//! 754 defines it. The ISA's approximations (`v_rcp`, `v_rsq`, `v_exp`,
//! `v_log`, `v_sin`, `v_cos`; 1 ULP in the guide) are computed to within
//! that accuracy, not bit for bit as the hardware rounds them.

use super::float::{self as fl, exp32, exp64, f16_to_f32, f32_to_f16, fma_f16, frexp};
use super::operands::{lanes, Ty};
use super::valu::lanes::LaneReader;
use super::valu::shape::{check_float_mode, ftz32, Kind, LaneFn, Vop};
use super::wave::Wave;
use super::{Exec, Fail};
use crate::opcodes::Opcode as O;

const F: Ty = Ty::F32;
const D: Ty = Ty::F64;
const H: Ty = Ty::F16;
const U: Ty = Ty::B32;

fn map(src: [Ty; 3], n: usize, dst: Ty, f: LaneFn) -> Option<Kind> {
    Some(Kind::Map {
        src,
        n,
        dst,
        f,
        float: matches!(dst, Ty::F16 | Ty::F32 | Ty::F64),
    })
}

#[inline]
fn f(v: u64) -> f32 {
    f32::from_bits(v as u32)
}
#[inline]
fn d(v: u64) -> f64 {
    f64::from_bits(v)
}
#[inline]
fn h(v: u64) -> f32 {
    f16_to_f32(v as u16)
}
#[inline]
fn rf(x: f32) -> u64 {
    x.to_bits() as u64
}
#[inline]
fn rd(x: f64) -> u64 {
    x.to_bits()
}
#[inline]
fn rh(x: f32) -> u64 {
    f32_to_f16(x) as u64
}

fn f1(g: LaneFn) -> Option<Kind> {
    map([F; 3], 1, F, g)
}
fn f2(g: LaneFn) -> Option<Kind> {
    map([F; 3], 2, F, g)
}
fn f3(g: LaneFn) -> Option<Kind> {
    map([F; 3], 3, F, g)
}
fn d1(g: LaneFn) -> Option<Kind> {
    map([D; 3], 1, D, g)
}
fn d2(g: LaneFn) -> Option<Kind> {
    map([D; 3], 2, D, g)
}
fn d3(g: LaneFn) -> Option<Kind> {
    map([D; 3], 3, D, g)
}
fn h1(g: LaneFn) -> Option<Kind> {
    map([H; 3], 1, H, g)
}
fn h2(g: LaneFn) -> Option<Kind> {
    map([H; 3], 2, H, g)
}

/// `v_cvt_i32_f32` and friends: truncate, saturate, NaN to 0 (Vega ISA
/// 12.8 "V_CVT_I32_F32").
fn to_i32(x: f64) -> u64 {
    if x.is_nan() {
        0
    } else {
        x.trunc().clamp(i32::MIN as f64, i32::MAX as f64) as i32 as u32 as u64
    }
}
fn to_u32(x: f64) -> u64 {
    if x.is_nan() {
        0
    } else {
        x.trunc().clamp(0.0, u32::MAX as f64) as u32 as u64
    }
}

fn fract32(x: f32) -> f32 {
    if !x.is_finite() {
        return if x.is_nan() { x } else { f32::NAN };
    }
    (x - x.floor()).min(f32::from_bits(0x3f7f_ffff))
}
fn fract64(x: f64) -> f64 {
    if !x.is_finite() {
        return if x.is_nan() { x } else { f64::NAN };
    }
    (x - x.floor()).min(f64::from_bits(0x3fef_ffff_ffff_ffff))
}

/// IEEE minNum/maxNum as the ISA's IEEE mode has them (a quiet NaN
/// operand loses).
pub(crate) fn min32(a: f32, b: f32) -> f32 {
    if let Some(q) = snan32(a, b) {
        return q;
    }
    a.min(b)
}
pub(crate) fn max32(a: f32, b: f32) -> f32 {
    if let Some(q) = snan32(a, b) {
        return q;
    }
    a.max(b)
}
/// IEEE mode's min/max return a quiet NaN when an operand is a
/// signaling NaN (Vega ISA 6.2.4 "IEEE mode": minNum/maxNum of IEEE
/// 754-2008).
fn snan32(a: f32, b: f32) -> Option<f32> {
    let sn = |x: f32| x.is_nan() && x.to_bits() & 0x0040_0000 == 0;
    if sn(a) {
        Some(f32::from_bits(a.to_bits() | 0x0040_0000))
    } else if sn(b) {
        Some(f32::from_bits(b.to_bits() | 0x0040_0000))
    } else {
        None
    }
}
fn min64(a: f64, b: f64) -> f64 {
    if let Some(q) = snan64(a, b) {
        return q;
    }
    a.min(b)
}
fn max64(a: f64, b: f64) -> f64 {
    if let Some(q) = snan64(a, b) {
        return q;
    }
    a.max(b)
}
fn snan64(a: f64, b: f64) -> Option<f64> {
    let quiet = 0x0008_0000_0000_0000u64;
    let sn = |x: f64| x.is_nan() && x.to_bits() & quiet == 0;
    if sn(a) {
        Some(f64::from_bits(a.to_bits() | quiet))
    } else if sn(b) {
        Some(f64::from_bits(b.to_bits() | quiet))
    } else {
        None
    }
}
fn med3f(a: f32, b: f32, c: f32) -> f32 {
    if a.is_nan() || b.is_nan() || c.is_nan() {
        return min32(min32(a, b), c);
    }
    max32(min32(a, b), min32(max32(a, b), c))
}

/// `v_cmp_class`: whether the value falls in one of the classes of the
/// mask (Vega ISA 12.9: bit 0 signaling NaN, 1 quiet NaN, 2 -inf, 3
/// -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf).
pub(crate) fn class_of(x: f64, is_snan: bool) -> u32 {
    class_by(x.classify(), x.is_sign_negative(), is_snan)
}

/// The class bit of a value of category `cat` (Vega ISA 12.9, see
/// [`class_of`]); the category of the operand's own type, so an f32
/// denormal is a denormal.
pub(crate) fn class_by(cat: std::num::FpCategory, neg: bool, is_snan: bool) -> u32 {
    use std::num::FpCategory::*;
    let bit = match cat {
        Nan => {
            if is_snan {
                0
            } else {
                1
            }
        }
        Infinite => {
            if neg {
                2
            } else {
                9
            }
        }
        Normal => {
            if neg {
                3
            } else {
                8
            }
        }
        Subnormal => {
            if neg {
                4
            } else {
                7
            }
        }
        Zero => {
            if neg {
                5
            } else {
                6
            }
        }
    };
    1 << bit
}

fn frexp_mant32(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    frexp(x as f64).0 as f32
}
fn frexp_exp32(x: f32) -> u64 {
    if !x.is_finite() {
        return 0;
    }
    frexp(x as f64).1 as u32 as u64
}

/// `v_div_fixup_f32/f64`: the special cases of S2 / S1 with S0 the
/// quotient estimate (Vega ISA 12.10 "V_DIV_FIXUP_F32").
fn div_fixup(q: f64, den: f64, num: f64, tiny: i32, big: i32, exp: fn(f64) -> i32) -> f64 {
    let sign_out = den.is_sign_negative() != num.is_sign_negative();
    let signed = |v: f64| if sign_out { -v.abs() } else { v.abs() };
    if num.is_nan() {
        num
    } else if den.is_nan() {
        den
    } else if (den == 0.0 && num == 0.0) || (den.is_infinite() && num.is_infinite()) {
        f64::NAN
    } else if den == 0.0 || num.is_infinite() {
        signed(f64::INFINITY)
    } else if den.is_infinite() || num == 0.0 {
        signed(0.0)
    } else if exp(num) - exp(den) < tiny {
        // Underflow: the guide returns a signed zero (denormals kept only
        // when the division produced one).
        if q.is_nan() {
            signed(0.0)
        } else {
            signed(q)
        }
    } else if exp(den) == big {
        signed(0.0)
    } else if q.is_nan() {
        // Not a special case but the estimate is NaN: keep it.
        q
    } else {
        signed(q)
    }
}

fn e32(x: f64) -> i32 {
    exp32((x as f32).to_bits())
}
fn e64(x: f64) -> i32 {
    exp64(x.to_bits())
}

/// The lane function of a floating-point opcode.
pub(crate) fn kind(op: O) -> Option<Kind> {
    match op {
        // f32 arithmetic.
        O::VAddF32 => f2(|s| rf(f(s[0]) + f(s[1]))),
        O::VSubF32 => f2(|s| rf(f(s[0]) - f(s[1]))),
        O::VSubrevF32 => f2(|s| rf(f(s[1]) - f(s[0]))),
        O::VMulF32 => f2(|s| rf(f(s[0]) * f(s[1]))),
        O::VMulLegacyF32 => f2(|s| {
            // 0 * anything (including inf and NaN) is 0 (Vega ISA 12.7).
            if f(s[0]) == 0.0 || f(s[1]) == 0.0 {
                0
            } else {
                rf(f(s[0]) * f(s[1]))
            }
        }),
        O::VMinF32 => f2(|s| rf(min32(f(s[0]), f(s[1])))),
        O::VMaxF32 => f2(|s| rf(max32(f(s[0]), f(s[1])))),
        O::VMin3F32 => f3(|s| rf(min32(min32(f(s[0]), f(s[1])), f(s[2])))),
        O::VMax3F32 => f3(|s| rf(max32(max32(f(s[0]), f(s[1])), f(s[2])))),
        O::VMed3F32 => f3(|s| rf(med3f(f(s[0]), f(s[1]), f(s[2])))),
        // V_MAD_F32 and its forms do not support denormals (LLVM
        // SIISelLowering: selected only with f32 denormals off): inputs,
        // the rounded product and the result flush, whatever MODE says.
        O::VMadF32 | O::VMacF32 | O::VMadmkF32 | O::VMadakF32 => f3(|s| {
            let z = |x: u64| f(ftz32(x));
            let p = ftz32(rf(z(s[0]) * z(s[1])));
            ftz32(rf(f(p) + z(s[2])))
        }),
        O::VFmaF32 | O::VFmacF32 => f3(|s| rf(f(s[0]).mul_add(f(s[1]), f(s[2])))),
        O::VFmamkF32 | O::VFmaakF32 => f3(|s| rf(f(s[0]).mul_add(f(s[1]), f(s[2])))),
        O::VLdexpF32 => map([F, U, U], 2, F, |s| {
            rf(fl::ldexp32(f(s[0]), s[1] as u32 as i32))
        }),
        O::VFrexpMantF32 => f1(|s| rf(frexp_mant32(f(s[0])))),
        O::VFrexpExpI32F32 => map([F; 3], 1, U, |s| frexp_exp32(f(s[0]))),
        O::VFractF32 => f1(|s| rf(fract32(f(s[0])))),
        O::VTruncF32 => f1(|s| rf(f(s[0]).trunc())),
        O::VCeilF32 => f1(|s| rf(f(s[0]).ceil())),
        O::VFloorF32 => f1(|s| rf(f(s[0]).floor())),
        O::VRndneF32 => f1(|s| rf(f(s[0]).round_ties_even())),
        O::VRcpF32 | O::VRcpIflagF32 => f1(|s| rf((1.0 / f(s[0]) as f64) as f32)),
        O::VRsqF32 => f1(|s| rf((1.0 / (f(s[0]) as f64).sqrt()) as f32)),
        O::VSqrtF32 => f1(|s| rf(f(s[0]).sqrt())),
        O::VExpF32 => f1(|s| rf((f(s[0]) as f64).exp2() as f32)),
        O::VLogF32 => f1(|s| rf((f(s[0]) as f64).log2() as f32)),
        O::VSinF32 => f1(|s| rf(((f(s[0]) as f64) * std::f64::consts::TAU).sin() as f32)),
        O::VCosF32 => f1(|s| rf(((f(s[0]) as f64) * std::f64::consts::TAU).cos() as f32)),
        O::VDivFixupF32 => f3(|s| {
            let r = div_fixup(
                f(s[0]) as f64,
                f(s[1]) as f64,
                f(s[2]) as f64,
                -149,
                255,
                e32,
            );
            rf(r as f32)
        }),
        // f64 arithmetic.
        O::VAddF64 => d2(|s| rd(d(s[0]) + d(s[1]))),
        O::VMulF64 => d2(|s| rd(d(s[0]) * d(s[1]))),
        O::VMinF64 => d2(|s| rd(min64(d(s[0]), d(s[1])))),
        O::VMaxF64 => d2(|s| rd(max64(d(s[0]), d(s[1])))),
        O::VFmaF64 | O::VFmacF64 => d3(|s| rd(d(s[0]).mul_add(d(s[1]), d(s[2])))),
        O::VLdexpF64 => map([D, U, U], 2, D, |s| {
            rd(fl::ldexp64(d(s[0]), s[1] as u32 as i32))
        }),
        O::VFrexpMantF64 => d1(|s| {
            let x = d(s[0]);
            rd(if x.is_finite() { frexp(x).0 } else { x })
        }),
        O::VFrexpExpI32F64 => map([D; 3], 1, U, |s| {
            let x = d(s[0]);
            if x.is_finite() {
                frexp(x).1 as u32 as u64
            } else {
                0
            }
        }),
        O::VFractF64 => d1(|s| rd(fract64(d(s[0])))),
        O::VTruncF64 => d1(|s| rd(d(s[0]).trunc())),
        O::VCeilF64 => d1(|s| rd(d(s[0]).ceil())),
        O::VFloorF64 => d1(|s| rd(d(s[0]).floor())),
        O::VRndneF64 => d1(|s| rd(d(s[0]).round_ties_even())),
        O::VRcpF64 => d1(|s| rd(1.0 / d(s[0]))),
        O::VRsqF64 => d1(|s| rd(1.0 / d(s[0]).sqrt())),
        O::VSqrtF64 => d1(|s| rd(d(s[0]).sqrt())),
        O::VDivFixupF64 => d3(|s| rd(div_fixup(d(s[0]), d(s[1]), d(s[2]), -1074, 2047, e64))),
        O::VTrigPreopF64 => map([D, U, U], 2, D, |s| {
            rd(super::float::trig_preop(d(s[0]), s[1] as u32))
        }),
        // f16 arithmetic: through f32, exact before the one rounding.
        O::VAddF16 => h2(|s| rh(h(s[0]) + h(s[1]))),
        O::VSubF16 => h2(|s| rh(h(s[0]) - h(s[1]))),
        O::VSubrevF16 => h2(|s| rh(h(s[1]) - h(s[0]))),
        O::VMulF16 => h2(|s| rh(h(s[0]) * h(s[1]))),
        O::VMinF16 => h2(|s| rh(min32(h(s[0]), h(s[1])))),
        O::VMaxF16 => h2(|s| rh(max32(h(s[0]), h(s[1])))),
        O::VFmaF16 => map([H; 3], 3, H, |s| {
            fma_f16(s[0] as u16, s[1] as u16, s[2] as u16) as u64
        }),
        O::VSqrtF16 => h1(|s| rh(h(s[0]).sqrt())),
        O::VTruncF16 => h1(|s| rh(h(s[0]).trunc())),
        O::VCeilF16 => h1(|s| rh(h(s[0]).ceil())),
        O::VFloorF16 => h1(|s| rh(h(s[0]).floor())),
        O::VRndneF16 => h1(|s| rh(h(s[0]).round_ties_even())),
        O::VFractF16 => h1(|s| {
            let x = h(s[0]);
            if !x.is_finite() {
                return rh(if x.is_nan() { x } else { f32::NAN });
            }
            // The largest f16 below 1 is 0x3bff.
            rh((x - x.floor()).min(f16_to_f32(0x3bff)))
        }),
        O::VRcpF16 => h1(|s| rh((1.0 / h(s[0]) as f64) as f32)),
        O::VRsqF16 => h1(|s| rh((1.0 / (h(s[0]) as f64).sqrt()) as f32)),
        O::VExpF16 => h1(|s| rh((h(s[0]) as f64).exp2() as f32)),
        O::VLogF16 => h1(|s| rh((h(s[0]) as f64).log2() as f32)),
        O::VSinF16 => h1(|s| rh(((h(s[0]) as f64) * std::f64::consts::TAU).sin() as f32)),
        O::VCosF16 => h1(|s| rh(((h(s[0]) as f64) * std::f64::consts::TAU).cos() as f32)),
        O::VFrexpMantF16 => h1(|s| {
            let x = h(s[0]);
            rh(if x.is_finite() {
                frexp(x as f64).0 as f32
            } else {
                x
            })
        }),
        O::VFrexpExpI16F16 => map([H; 3], 1, Ty::B16, |s| {
            let x = h(s[0]);
            if x.is_finite() {
                frexp(x as f64).1 as i16 as u16 as u64
            } else {
                0
            }
        }),
        // V_LDEXP_F16: S1 is a signed 16-bit exponent (Vega ISA 12.7).
        O::VLdexpF16 => map([H, Ty::B16, U], 2, H, |s| {
            rh((h(s[0]) as f64 * 2f64.powi((s[1] as u16 as i16).clamp(-64, 64) as i32)) as f32)
        }),
        O::VMin3F16 => map([H; 3], 3, H, |s| {
            rh(min32(min32(h(s[0]), h(s[1])), h(s[2])))
        }),
        O::VMax3F16 => map([H; 3], 3, H, |s| {
            rh(max32(max32(h(s[0]), h(s[1])), h(s[2])))
        }),
        O::VMed3F16 => map([H; 3], 3, H, |s| rh(med3f(h(s[0]), h(s[1]), h(s[2])))),
        O::VCvtI16F16 => map([H; 3], 1, Ty::B16, |s| {
            let x = h(s[0]);
            if x.is_nan() {
                0
            } else {
                x.trunc().clamp(i16::MIN as f32, i16::MAX as f32) as i16 as u16 as u64
            }
        }),
        O::VCvtU16F16 => map([H; 3], 1, Ty::B16, |s| {
            let x = h(s[0]);
            if x.is_nan() {
                0
            } else {
                x.trunc().clamp(0.0, u16::MAX as f32) as u16 as u64
            }
        }),
        // Round toward zero, two f32s into the halves (Vega ISA 12.10).
        O::VCvtPkrtzF16F32 => map([F; 3], 2, U, |s| {
            super::float::f32_to_f16_rtz(f(s[0])) as u64
                | (super::float::f32_to_f16_rtz(f(s[1])) as u64) << 16
        }),
        // Conversions (Vega ISA 12.8).
        O::VCvtF32I32 => map([U; 3], 1, F, |s| rf(s[0] as u32 as i32 as f32)),
        O::VCvtF32U32 => map([U; 3], 1, F, |s| rf(s[0] as u32 as f32)),
        O::VCvtI32F32 => map([F; 3], 1, U, |s| to_i32(f(s[0]) as f64)),
        O::VCvtU32F32 => map([F; 3], 1, U, |s| to_u32(f(s[0]) as f64)),
        O::VCvtRpiI32F32 => map([F; 3], 1, U, |s| to_i32((f(s[0]) as f64 + 0.5).floor())),
        O::VCvtFlrI32F32 => map([F; 3], 1, U, |s| to_i32((f(s[0]) as f64).floor())),
        O::VCvtF64I32 => map([U; 3], 1, D, |s| rd(s[0] as u32 as i32 as f64)),
        O::VCvtF64U32 => map([U; 3], 1, D, |s| rd(s[0] as u32 as f64)),
        O::VCvtI32F64 => map([D; 3], 1, U, |s| to_i32(d(s[0]))),
        O::VCvtU32F64 => map([D; 3], 1, U, |s| to_u32(d(s[0]))),
        O::VCvtF32F64 => map([D; 3], 1, F, |s| rf(d(s[0]) as f32)),
        O::VCvtF64F32 => map([F; 3], 1, D, |s| rd(f(s[0]) as f64)),
        O::VCvtF16F32 => map([F; 3], 1, H, |s| rh(f(s[0]))),
        O::VCvtF32F16 => map([H; 3], 1, F, |s| rf(h(s[0]))),
        O::VCvtF32Ubyte0 => map([U; 3], 1, F, |s| rf((s[0] & 0xff) as f32)),
        O::VCvtF32Ubyte1 => map([U; 3], 1, F, |s| rf((s[0] >> 8 & 0xff) as f32)),
        O::VCvtF32Ubyte2 => map([U; 3], 1, F, |s| rf((s[0] >> 16 & 0xff) as f32)),
        O::VCvtF32Ubyte3 => map([U; 3], 1, F, |s| rf((s[0] >> 24 & 0xff) as f32)),
        O::VCvtF16U16 => map([Ty::B16; 3], 1, H, |s| rh(s[0] as u16 as f32)),
        O::VCvtF16I16 => map([Ty::B16; 3], 1, H, |s| rh(s[0] as u16 as i16 as f32)),
        O::VPackB32F16 => map([H; 3], 2, U, |s| (s[0] & 0xffff) | (s[1] & 0xffff) << 16),
        O::VDivScaleF32 | O::VDivScaleF64 | O::VDivFmasF32 | O::VDivFmasF64 => Some(Kind::Special),
        _ => None,
    }
}

/// `v_div_scale_*` and `v_div_fmas_*` (Vega ISA 12.10). The scaling cases
/// (operands near the ends of the exponent range) are not implemented:
/// they stop the wave by name rather than give a wrong quotient. In range,
/// `v_div_scale` passes S0 through with VCC clear, and `v_div_fmas` with
/// VCC clear is a plain FMA.
pub(crate) fn div_special(w: &mut Wave, v: &Vop, r: LaneReader, exec: u64) -> Exec {
    check_float_mode(w)?;
    let op = v.op.opcode;
    let wide = matches!(op, O::VDivScaleF64 | O::VDivFmasF64);
    let dst = w.vdst(
        &v.vdst.ok_or(Fail::Unimplemented("no destination"))?,
        if wide { 2 } else { 1 },
    )?;
    // In range no lane scales: VCC is all zero (Vega ISA 12.10).
    let vcc = 0u64;
    let vcc_in = w.vcc();
    for lane in lanes(exec) {
        let s = r.lane(w, lane);
        let out: u64 = match op {
            O::VDivScaleF32 | O::VDivScaleF64 => {
                let (s0, den, num) = if wide {
                    (d(s[0]), d(s[1]), d(s[2]))
                } else {
                    (f(s[0]) as f64, f(s[1]) as f64, f(s[2]) as f64)
                };
                let (en, ed) = if wide {
                    (e64(num), e64(den))
                } else {
                    (e32(num), e32(den))
                };
                let (bias, mant, max) = if wide {
                    (1023, 52, 2047)
                } else {
                    (127, 23, 255)
                };
                if den == 0.0 || num == 0.0 {
                    if wide {
                        rd(f64::NAN)
                    } else {
                        rf(f32::NAN)
                    }
                } else if !den.is_finite() || !num.is_finite() {
                    // Infinities and NaNs: div_fixup decides; no scaling.
                    if wide {
                        rd(s0)
                    } else {
                        rf(s0 as f32)
                    }
                } else if en - ed >= bias - 31
                    || ed == 0
                    || en == 0
                    || ed >= max - 2
                    || en - ed <= -(bias - 1)
                    || en <= mant
                {
                    return Err(Fail::Unimplemented(
                        "v_div_scale with operands that need scaling",
                    ));
                } else if wide {
                    rd(s0)
                } else {
                    rf(s0 as f32)
                }
            }
            _ => {
                if vcc_in >> lane & 1 == 1 {
                    return Err(Fail::Unimplemented(
                        "v_div_fmas with VCC set (scaled division)",
                    ));
                }
                if wide {
                    rd(d(s[0]).mul_add(d(s[1]), d(s[2])))
                } else {
                    rf(f(s[0]).mul_add(f(s[1]), f(s[2])))
                }
            }
        };
        w.set_lane(dst, lane, out as u32);
        if wide {
            w.set_lane((dst.0 + 1, dst.1), lane, (out >> 32) as u32);
        }
    }
    if matches!(op, O::VDivScaleF32 | O::VDivScaleF64) {
        match &v.sdst {
            Some(o) => w.write_scalar(o, vcc, true)?,
            None => w.set_vcc(vcc),
        }
    }
    Ok(())
}
