//! VOP3P: packed f16/i16 math, gfx90a packed f32, the integer dot
//! products and the AGPR moves (Vega ISA 12.11, MI200 ISA 12.11). MFMA
//! stops by name.

use super::float::{f16_to_f32, f32_to_f16, fma_f16};
use super::operands::{lanes, Src, Ty};
use super::valu::shape::{apply_mods, check_float_mode};
use super::valu_float::{max32, min32};
use super::wave::Wave;
use super::{Exec, Fail};
use crate::inst::{SrcMods, Vop3p};
use crate::opcodes::Opcode as O;
use crate::operand::Operand;

#[inline]
fn f(v: u64) -> f32 {
    f32::from_bits(v as u32)
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
fn rh(x: f32) -> u64 {
    f32_to_f16(x) as u64
}

/// VOP3P packed math (Vega ISA 12.11, MI200 ISA 12.11 packed FP32): each
/// half of the result from the halves OP_SEL (low) and OP_SEL_HI (high)
/// pick, NEG_LO/NEG_HI negating floats.
pub(crate) fn vop3p(w: &mut Wave, i: &Vop3p) -> Exec {
    if i.mai.is_some() {
        return Err(Fail::Unimplemented("matrix-core (MFMA) instruction"));
    }
    let op = i.op.opcode;
    let exec = w.exec();
    match op {
        O::VAccvgprReadB32 | O::VAccvgprWriteB32 => {
            let s = w.src(
                &i.src[0].ok_or(Fail::Unimplemented("missing source"))?,
                Ty::B32,
            )?;
            let dst = w.vdst(&i.vdst, 1)?;
            for lane in lanes(exec) {
                let x = w.lane(s, lane, false) as u32;
                w.set_lane(dst, lane, x);
            }
            return Ok(());
        }
        _ => {}
    }
    if matches!(op, O::VFmaMixF32 | O::VFmaMixloF16 | O::VFmaMixhiF16) {
        return fma_mix(w, i);
    }
    if let Some(dot) = int_dot(op) {
        return dot_product(w, i, dot);
    }
    // (width of a half in bits, number of sources, float, lane op on
    // halves as u64 bits)
    type HalfFn = fn(u64, u64, u64) -> u64;
    let (bits, n, float, g): (u32, usize, bool, HalfFn) = match op {
        O::VPkMovB32 => (32, 2, false, |a, _, _| a),
        O::VPkAddF32 => (32, 2, true, |a, b, _| rf(f(a) + f(b))),
        O::VPkMulF32 => (32, 2, true, |a, b, _| rf(f(a) * f(b))),
        O::VPkFmaF32 => (32, 3, true, |a, b, c| rf(f(a).mul_add(f(b), f(c)))),
        O::VPkAddF16 => (16, 2, true, |a, b, _| rh(h(a) + h(b))),
        O::VPkMulF16 => (16, 2, true, |a, b, _| rh(h(a) * h(b))),
        O::VPkFmaF16 => (16, 3, true, |a, b, c| {
            fma_f16(a as u16, b as u16, c as u16) as u64
        }),
        O::VPkMinF16 => (16, 2, true, |a, b, _| rh(min32(h(a), h(b)))),
        O::VPkMaxF16 => (16, 2, true, |a, b, _| rh(max32(h(a), h(b)))),
        O::VPkAddU16 | O::VPkAddI16 => (16, 2, false, |a, b, _| {
            (a as u16).wrapping_add(b as u16) as u64
        }),
        O::VPkSubU16 | O::VPkSubI16 => (16, 2, false, |a, b, _| {
            (a as u16).wrapping_sub(b as u16) as u64
        }),
        O::VPkMulLoU16 => (16, 2, false, |a, b, _| {
            (a as u16).wrapping_mul(b as u16) as u64
        }),
        O::VPkLshlrevB16 => (16, 2, false, |a, b, _| ((b as u16) << (a & 15)) as u64),
        O::VPkLshrrevB16 => (16, 2, false, |a, b, _| ((b as u16) >> (a & 15)) as u64),
        O::VPkAshrrevI16 => (16, 2, false, |a, b, _| {
            ((b as u16 as i16) >> (a & 15)) as u16 as u64
        }),
        O::VPkMaxI16 => (16, 2, false, |a, b, _| {
            (a as u16 as i16).max(b as u16 as i16) as u16 as u64
        }),
        O::VPkMinI16 => (16, 2, false, |a, b, _| {
            (a as u16 as i16).min(b as u16 as i16) as u16 as u64
        }),
        O::VPkMaxU16 => (16, 2, false, |a, b, _| (a as u16).max(b as u16) as u64),
        O::VPkMinU16 => (16, 2, false, |a, b, _| (a as u16).min(b as u16) as u64),
        O::VPkMadU16 | O::VPkMadI16 => (16, 3, false, |a, b, c| {
            (a as u16).wrapping_mul(b as u16).wrapping_add(c as u16) as u64
        }),
        _ => return Err(Fail::Unimplemented("VOP3P opcode")),
    };
    if i.clamp {
        return Err(Fail::Unimplemented("VOP3P clamp"));
    }
    if !float && (i.neg_lo != 0 || i.neg_hi != 0) && op != O::VPkMovB32 {
        return Err(Fail::Unimplemented("NEG on packed integers"));
    }
    if float {
        check_float_mode(w)?;
    }
    let wide = bits == 32;
    let ty = if wide { Ty::B64 } else { Ty::B32 };
    let mut srcs = [Src::Uniform(0); 3];
    for k in 0..n {
        let o = i.src[k].ok_or(Fail::Unimplemented("missing source"))?;
        if matches!(o, Operand::Int(_) | Operand::Float(_) | Operand::Literal(_)) {
            // Which half a constant fills is not modelled: only a use
            // that reads its low half is executed. `v_pk_mov_b32` reads
            // halves by OP_SEL alone; an integer inline constant's low half
            // is the constant.
            let reads_high = if op == O::VPkMovB32 {
                (i.op_sel >> k) & 1 != 0 || !matches!(o, Operand::Int(_))
            } else {
                (i.op_sel >> k) & 1 != 0 || (i.op_sel_hi >> k) & 1 != 0
            };
            if reads_high {
                return Err(Fail::Unimplemented(
                    "constant in the high half of a packed operand",
                ));
            }
        }
        let sty = if wide {
            Ty::B64
        } else if float {
            Ty::F16
        } else {
            Ty::B16
        };
        srcs[k] = match o {
            Operand::Int(_) | Operand::Float(_) | Operand::Literal(_) => {
                let cty = if wide { Ty::F32 } else { sty };
                Src::Uniform(w.read_scalar(&o, cty)?)
            }
            _ => w.src(&o, ty)?,
        };
    }
    let mask = if wide { u32::MAX as u64 } else { 0xffff };
    let half_ty = if wide { Ty::F32 } else { Ty::F16 };
    let dst = w.vdst(&i.vdst, if wide { 2 } else { 1 })?;
    for lane in lanes(exec) {
        let mut lo = [0u64; 3];
        let mut hi = [0u64; 3];
        for k in 0..n {
            let v = w.lane(srcs[k], lane, wide);
            let pick = |sel: bool| if sel { (v >> bits) & mask } else { v & mask };
            lo[k] = pick((i.op_sel >> k) & 1 != 0);
            hi[k] = pick((i.op_sel_hi >> k) & 1 != 0);
            if float || op == O::VPkMovB32 {
                let neg_lo = SrcMods {
                    neg: (i.neg_lo >> k) & 1 != 0,
                    ..SrcMods::default()
                };
                let neg_hi = SrcMods {
                    neg: (i.neg_hi >> k) & 1 != 0,
                    ..SrcMods::default()
                };
                lo[k] = apply_mods(lo[k], half_ty, neg_lo);
                hi[k] = apply_mods(hi[k], half_ty, neg_hi);
            }
        }
        let (rlo, rhi) = if op == O::VPkMovB32 {
            // D.lo from the half of S0 OP_SEL[0] picks, D.hi from the half
            // of S1 OP_SEL[1] picks (MI200 ISA 12.11 V_PK_MOV_B32).
            let s0 = w.lane(srcs[0], lane, true);
            let s1 = w.lane(srcs[1], lane, true);
            (
                (s0 >> (32 * (i.op_sel & 1) as u32)) & mask,
                (s1 >> (32 * ((i.op_sel >> 1) & 1) as u32)) & mask,
            )
        } else {
            (g(lo[0], lo[1], lo[2]) & mask, g(hi[0], hi[1], hi[2]) & mask)
        };
        if wide {
            w.set_lane(dst, lane, rlo as u32);
            w.set_lane((dst.0 + 1, dst.1), lane, rhi as u32);
        } else {
            w.set_lane(dst, lane, (rlo | rhi << 16) as u32);
        }
    }
    Ok(())
}

/// The integer dot products (Vega 7nm ISA 12.11 "V_DOT*"): element width in
/// bits and whether elements are signed.
fn int_dot(op: O) -> Option<(u32, bool)> {
    Some(match op {
        O::VDot2I32I16 => (16, true),
        O::VDot2U32U16 => (16, false),
        O::VDot4I32I8 => (8, true),
        O::VDot4U32U8 => (8, false),
        O::VDot8I32I4 => (4, true),
        O::VDot8U32U4 => (4, false),
        _ => return None,
    })
}

/// D = sum over the elements of S0 * S1, plus S2, wrapping; CLAMP
/// (saturation) and non-default OP_SEL/NEG stop by name.
fn dot_product(w: &mut Wave, i: &Vop3p, (bits, signed): (u32, bool)) -> Exec {
    if i.clamp || i.op_sel != 0 || i.op_sel_hi & 3 != 3 || i.neg_lo != 0 || i.neg_hi != 0 {
        return Err(Fail::Unimplemented("dot product modifiers"));
    }
    let mut srcs = [Src::Uniform(0); 3];
    for k in 0..3 {
        let o = i.src[k].ok_or(Fail::Unimplemented("missing source"))?;
        srcs[k] = w.src(&o, Ty::B32)?;
    }
    let dst = w.vdst(&i.vdst, 1)?;
    let n = 32 / bits;
    let mask = (1u64 << bits) - 1;
    let elem = |v: u64, k: u32| -> i64 {
        let e = (v >> (k * bits)) & mask;
        if signed {
            let sh = 64 - bits;
            ((e << sh) as i64) >> sh
        } else {
            e as i64
        }
    };
    for lane in lanes(w.exec()) {
        let (a, b, c) = (
            w.lane(srcs[0], lane, false),
            w.lane(srcs[1], lane, false),
            w.lane(srcs[2], lane, false),
        );
        let mut acc = if signed {
            c as u32 as i32 as i64
        } else {
            c as i64
        };
        for k in 0..n {
            acc = acc.wrapping_add(elem(a, k) * elem(b, k));
        }
        w.set_lane(dst, lane, acc as u32);
    }
    Ok(())
}

/// `v_fma_mix_f32` and `v_fma_mixlo/hi_f16` (Vega 7nm ISA 12.11, LLVM
/// `VOP3PInstructions.td`): each source is an f32, or with OP_SEL_HI an
/// f16 from the half OP_SEL picks; NEG_LO negates and NEG_HI takes the
/// absolute value; the FMA is an f32 one, and the f16 forms convert its
/// result into one half of VDST, keeping the other (LLVM selects them for
/// `fptrunc(fma(fpext a, fpext b, fpext c))`).
fn fma_mix(w: &mut Wave, i: &Vop3p) -> Exec {
    check_float_mode(w)?;
    if i.clamp {
        return Err(Fail::Unimplemented("CLAMP on a mixed-precision FMA"));
    }
    let op = i.op.opcode;
    let mut srcs = [Src::Uniform(0); 3];
    for k in 0..3 {
        let o = i.src[k].ok_or(Fail::Unimplemented("missing source"))?;
        let is_f16 = (i.op_sel_hi >> k) & 1 != 0;
        if is_f16 && (i.op_sel >> k) & 1 != 0 && !matches!(o, Operand::Vgpr(_) | Operand::Sgpr(_)) {
            return Err(Fail::Unimplemented(
                "constant in the high half of a packed operand",
            ));
        }
        srcs[k] = w.src(&o, if is_f16 { Ty::F16 } else { Ty::F32 })?;
    }
    let dst = w.vdst(&i.vdst, 1)?;
    for lane in lanes(w.exec()) {
        let mut v = [0f32; 3];
        for k in 0..3 {
            let raw = w.lane(srcs[k], lane, false);
            let mut x = if (i.op_sel_hi >> k) & 1 != 0 {
                let half = if (i.op_sel >> k) & 1 != 0 {
                    raw >> 16
                } else {
                    raw
                };
                h(half & 0xffff)
            } else {
                f(raw)
            };
            if (i.neg_hi >> k) & 1 != 0 {
                x = x.abs();
            }
            if (i.neg_lo >> k) & 1 != 0 {
                x = -x;
            }
            v[k] = x;
        }
        let r = v[0].mul_add(v[1], v[2]);
        let out = match op {
            O::VFmaMixF32 => rf(r) as u32,
            O::VFmaMixloF16 => (w.get_lane(dst, lane) & 0xffff_0000) | rh(r) as u32,
            _ => (w.get_lane(dst, lane) & 0xffff) | (rh(r) as u32) << 16,
        };
        w.set_lane(dst, lane, out);
    }
    Ok(())
}
