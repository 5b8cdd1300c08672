//! The scalar ALU and program control: SOP2, SOP1, SOPC, SOPK and SOPP
//! (Vega ISA 12.1-12.5, MI200 ISA 12.1-12.5).

use super::ctx::{Ctx, Stop};
use super::operands::Ty;
use super::wave::Wave;
use super::{Exec, Fail};
use crate::inst::{Sop1, Sop2, Sopc, Sopk, Sopp};
use crate::opcodes::{OpDesc, Opcode as O, Slot, Ty as SlotTy};
use crate::operand::Operand;

fn slot_ty(op: &OpDesc, pick: fn(&Slot) -> Option<SlotTy>) -> Ty {
    match op.slots.iter().find_map(pick) {
        Some(SlotTy::B64) => Ty::B64,
        _ => Ty::B32,
    }
}

fn ssrc0_ty(op: &OpDesc) -> Ty {
    slot_ty(op, |s| match s {
        Slot::Ssrc0(t) => Some(*t),
        _ => None,
    })
}

fn ssrc1_ty(op: &OpDesc) -> Ty {
    slot_ty(op, |s| match s {
        Slot::Ssrc1(t) => Some(*t),
        _ => None,
    })
}

fn sdst64(op: &OpDesc) -> bool {
    op.slots.iter().any(|s| matches!(s, Slot::Sdst(2)))
}

fn dst(op: &Option<Operand>) -> Exec<&Operand> {
    op.as_ref()
        .ok_or(Fail::Unimplemented("instruction without a destination"))
}

/// Sign-extended bit field extract (`s_bfe_i32/i64`, `v_bfe_i32`).
pub(crate) fn bfe_signed(v: u64, offset: u32, width: u32, bits: u32) -> u64 {
    if width == 0 {
        return 0;
    }
    let width = width.min(bits);
    let shifted = v >> offset.min(bits - 1);
    let sh = 64 - width;
    (((shifted << sh) as i64) >> sh) as u64
}

fn mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// SOP2 (Vega ISA 12.1).
pub(crate) fn sop2(w: &mut Wave, i: &Sop2) -> Exec {
    let t0 = ssrc0_ty(i.op);
    let t1 = ssrc1_ty(i.op);
    let a = w.read_scalar(&i.ssrc0, t0)?;
    let b = w.read_scalar(&i.ssrc1, t1)?;
    let (a32, b32) = (a as u32, b as u32);
    let scc = w.scc;
    // (result, new SCC or None to leave it)
    let (d, s): (u64, Option<bool>) = match i.op.opcode {
        O::SAddU32 => {
            let (r, c) = a32.overflowing_add(b32);
            (r as u64, Some(c))
        }
        O::SSubU32 => {
            let (r, c) = a32.overflowing_sub(b32);
            (r as u64, Some(c))
        }
        O::SAddI32 => {
            let (r, o) = (a32 as i32).overflowing_add(b32 as i32);
            (r as u32 as u64, Some(o))
        }
        O::SSubI32 => {
            let (r, o) = (a32 as i32).overflowing_sub(b32 as i32);
            (r as u32 as u64, Some(o))
        }
        O::SAddcU32 => {
            let r = a32 as u64 + b32 as u64 + scc as u64;
            (r as u32 as u64, Some(r >> 32 != 0))
        }
        O::SSubbU32 => {
            let r = (a32 as u64).wrapping_sub(b32 as u64 + scc as u64);
            (
                r as u32 as u64,
                Some((b32 as u64 + scc as u64) > a32 as u64),
            )
        }
        O::SMinI32 => {
            let lt = (a32 as i32) < (b32 as i32);
            ((if lt { a32 } else { b32 }) as u64, Some(lt))
        }
        O::SMinU32 => {
            let lt = a32 < b32;
            ((if lt { a32 } else { b32 }) as u64, Some(lt))
        }
        O::SMaxI32 => {
            let gt = (a32 as i32) > (b32 as i32);
            ((if gt { a32 } else { b32 }) as u64, Some(gt))
        }
        O::SMaxU32 => {
            let gt = a32 > b32;
            ((if gt { a32 } else { b32 }) as u64, Some(gt))
        }
        O::SCselectB32 | O::SCselectB64 => (if scc { a } else { b }, None),
        O::SAndB32 | O::SAndB64 => nz(a & b),
        O::SOrB32 | O::SOrB64 => nz(a | b),
        O::SXorB32 | O::SXorB64 => nz(a ^ b),
        O::SAndn2B32 | O::SAndn2B64 => nz(a & !b),
        O::SOrn2B32 | O::SOrn2B64 => nz(a | !b),
        O::SNandB32 | O::SNandB64 => nz(!(a & b)),
        O::SNorB32 | O::SNorB64 => nz(!(a | b)),
        O::SXnorB32 | O::SXnorB64 => nz(!(a ^ b)),
        O::SLshlB32 => nz((a32 << (b32 & 31)) as u64),
        O::SLshlB64 => nz(a << (b32 & 63)),
        O::SLshrB32 => nz((a32 >> (b32 & 31)) as u64),
        O::SLshrB64 => nz(a >> (b32 & 63)),
        O::SAshrI32 => nz(((a32 as i32) >> (b32 & 31)) as u32 as u64),
        O::SAshrI64 => nz(((a as i64) >> (b32 & 63)) as u64),
        O::SBfmB32 => (
            (mask(a32 as u64 as u32 & 31) << (b32 & 31)) as u32 as u64,
            None,
        ),
        O::SBfmB64 => (mask(a32 & 63) << (b32 & 63), None),
        O::SMulI32 => ((a32 as i32).wrapping_mul(b32 as i32) as u32 as u64, None),
        O::SBfeU32 => {
            let (off, width) = (b32 & 31, (b32 >> 16) & 0x7f);
            nz(((a32 as u64) >> off) & mask(width) & 0xffff_ffff)
        }
        O::SBfeI32 => {
            let (off, width) = (b32 & 31, (b32 >> 16) & 0x7f);
            nz(bfe_signed(a32 as u64, off, width, 32) as u32 as u64)
        }
        O::SBfeU64 => {
            let (off, width) = (b32 & 63, (b32 >> 16) & 0x7f);
            nz((a >> off) & mask(width))
        }
        O::SBfeI64 => {
            let (off, width) = (b32 & 63, (b32 >> 16) & 0x7f);
            nz(bfe_signed(a, off, width, 64))
        }
        O::SAbsdiffI32 => nz((a32 as i32).wrapping_sub(b32 as i32).unsigned_abs() as u64),
        O::SMulHiU32 => ((a32 as u64 * b32 as u64) >> 32, None),
        O::SMulHiI32 => (
            ((a32 as i32 as i64 * b32 as i32 as i64) >> 32) as u32 as u64,
            None,
        ),
        O::SLshl1AddU32 | O::SLshl2AddU32 | O::SLshl3AddU32 | O::SLshl4AddU32 => {
            let sh = match i.op.opcode {
                O::SLshl1AddU32 => 1,
                O::SLshl2AddU32 => 2,
                O::SLshl3AddU32 => 3,
                _ => 4,
            };
            let r = ((a32 as u64) << sh) + b32 as u64;
            (r as u32 as u64, Some(r >> 32 != 0))
        }
        O::SPackLlB32B16 => (((b32 & 0xffff) << 16 | (a32 & 0xffff)) as u64, None),
        O::SPackLhB32B16 => (((b32 & 0xffff_0000) | (a32 & 0xffff)) as u64, None),
        O::SPackHhB32B16 => (((b32 & 0xffff_0000) | (a32 >> 16)) as u64, None),
        _ => return Err(Fail::Unimplemented("SOP2 opcode")),
    };
    w.write_scalar(dst(&i.sdst)?, d, sdst64(i.op))?;
    if let Some(s) = s {
        w.scc = s;
    }
    Ok(())
}

fn nz(v: u64) -> (u64, Option<bool>) {
    (v, Some(v != 0))
}

/// SOP1 (Vega ISA 12.2).
pub(crate) fn sop1(w: &mut Wave, i: &Sop1) -> Exec<Option<Stop>> {
    let ty = ssrc0_ty(i.op);
    let is64 = ty == Ty::B64;
    let bits = if is64 { 64 } else { 32 };
    let trunc = |v: u64| if is64 { v } else { v & 0xffff_ffff };
    let src = match &i.ssrc0 {
        Some(op) => w.read_scalar(op, ty)?,
        None => 0,
    };
    let exec = w.exec();
    let next = w.pc;
    let mut scc = None;
    let d: u64 = match i.op.opcode {
        O::SMovB32 | O::SMovB64 => src,
        O::SCmovB32 | O::SCmovB64 => {
            if !w.scc {
                return Ok(None);
            }
            src
        }
        O::SNotB32 | O::SNotB64 => {
            let d = trunc(!src);
            scc = Some(d != 0);
            d
        }
        O::SWqmB32 | O::SWqmB64 => {
            let mut d = 0;
            for q in 0..bits / 4 {
                if src >> (q * 4) & 0xf != 0 {
                    d |= 0xf << (q * 4);
                }
            }
            scc = Some(d != 0);
            d
        }
        O::SBrevB32 => (src as u32).reverse_bits() as u64,
        O::SBrevB64 => src.reverse_bits(),
        O::SBcnt0I32B32 | O::SBcnt0I32B64 => {
            let d = (bits - trunc(src).count_ones()) as u64;
            scc = Some(d != 0);
            d
        }
        O::SBcnt1I32B32 | O::SBcnt1I32B64 => {
            let d = trunc(src).count_ones() as u64;
            scc = Some(d != 0);
            d
        }
        O::SFf0I32B32 | O::SFf0I32B64 => first_set(trunc(!src), bits),
        O::SFf1I32B32 | O::SFf1I32B64 => first_set(src, bits),
        O::SFlbitI32B32 => {
            if src as u32 == 0 {
                u32::MAX as u64
            } else {
                (src as u32).leading_zeros() as u64
            }
        }
        O::SFlbitI32B64 => {
            if src == 0 {
                u32::MAX as u64
            } else {
                src.leading_zeros() as u64
            }
        }
        O::SFlbitI32 => {
            let v = src as u32;
            let n = if (v as i32) < 0 {
                (!v).leading_zeros()
            } else {
                v.leading_zeros()
            };
            if n == 32 {
                u32::MAX as u64
            } else {
                n as u64
            }
        }
        O::SFlbitI32I64 => {
            let n = if (src as i64) < 0 {
                (!src).leading_zeros()
            } else {
                src.leading_zeros()
            };
            if n == 64 {
                u32::MAX as u64
            } else {
                n as u64
            }
        }
        O::SSextI32I8 => src as u8 as i8 as i32 as u32 as u64,
        O::SSextI32I16 => src as u16 as i16 as i32 as u32 as u64,
        O::SBitset0B32 | O::SBitset0B64 | O::SBitset1B32 | O::SBitset1B64 => {
            let d64 = sdst64(i.op);
            let old = w.read_scalar(dst(&i.sdst)?, if d64 { Ty::B64 } else { Ty::B32 })?;
            let bit = 1u64 << (src & if d64 { 63 } else { 31 });
            if matches!(i.op.opcode, O::SBitset0B32 | O::SBitset0B64) {
                old & !bit
            } else {
                old | bit
            }
        }
        O::SGetpcB64 => next,
        O::SSetpcB64 => {
            w.pc = src;
            return Ok(None);
        }
        O::SSwappcB64 => {
            w.pc = src;
            next
        }
        O::SAndSaveexecB64
        | O::SOrSaveexecB64
        | O::SXorSaveexecB64
        | O::SAndn2SaveexecB64
        | O::SOrn2SaveexecB64
        | O::SNandSaveexecB64
        | O::SNorSaveexecB64
        | O::SXnorSaveexecB64
        | O::SAndn1SaveexecB64
        | O::SOrn1SaveexecB64 => {
            let new = match i.op.opcode {
                O::SAndSaveexecB64 => src & exec,
                O::SOrSaveexecB64 => src | exec,
                O::SXorSaveexecB64 => src ^ exec,
                O::SAndn2SaveexecB64 => src & !exec,
                O::SOrn2SaveexecB64 => src | !exec,
                O::SNandSaveexecB64 => !(src & exec),
                O::SNorSaveexecB64 => !(src | exec),
                O::SXnorSaveexecB64 => !(src ^ exec),
                O::SAndn1SaveexecB64 => !src & exec,
                _ => !src | exec,
            };
            // The old EXEC goes to SDST first: SDST may be EXEC itself.
            w.write_scalar(dst(&i.sdst)?, exec, true)?;
            w.set_exec(new);
            w.scc = new != 0;
            return Ok(None);
        }
        O::SAndn1WrexecB64 | O::SAndn2WrexecB64 => {
            let new = if i.op.opcode == O::SAndn1WrexecB64 {
                !src & exec
            } else {
                src & !exec
            };
            w.set_exec(new);
            w.scc = new != 0;
            new
        }
        O::SQuadmaskB32 | O::SQuadmaskB64 => {
            let mut d = 0;
            for q in 0..bits / 4 {
                if src >> (q * 4) & 0xf != 0 {
                    d |= 1 << q;
                }
            }
            scc = Some(d != 0);
            d
        }
        O::SMovrelsB32 | O::SMovrelsB64 => {
            let n = if is64 { 2 } else { 1 };
            let at = rel_index(w, i.ssrc0.as_ref(), n)?;
            let lo = w.sregs[at] as u64;
            if is64 {
                lo | (w.sregs[at + 1] as u64) << 32
            } else {
                lo
            }
        }
        O::SMovreldB32 | O::SMovreldB64 => {
            let n = if is64 { 2 } else { 1 };
            let at = rel_index(w, i.sdst.as_ref(), n)?;
            w.sregs[at] = src as u32;
            if is64 {
                w.sregs[at + 1] = (src >> 32) as u32;
            }
            return Ok(None);
        }
        O::SAbsI32 => {
            let d = (src as u32 as i32).unsigned_abs() as u64;
            scc = Some(d != 0);
            d
        }
        O::SBitreplicateB64B32 => {
            let mut d = 0u64;
            for b in 0..32 {
                if src >> b & 1 != 0 {
                    d |= 3 << (2 * b);
                }
            }
            d
        }
        _ => return Err(Fail::Unimplemented("SOP1 opcode")),
    };
    w.write_scalar(dst(&i.sdst)?, d, sdst64(i.op))?;
    if let Some(s) = scc {
        w.scc = s;
    }
    Ok(None)
}

/// The scalar-file index of `op` plus M0, for `s_movrels`/`s_movreld`
/// (Vega ISA 12.2: "SGPR[D.addr + M0.u]"), checked against the SGPRs.
fn rel_index(w: &Wave, op: Option<&Operand>, n: usize) -> Exec<usize> {
    let Some(Operand::Sgpr(r)) = op else {
        return Err(Fail::Unimplemented("relative move of a non-SGPR operand"));
    };
    let at = r.first as usize + w.m0() as usize;
    if at + n > super::wave::SGPRS {
        return Err(Fail::Register {
            reg: at as u32,
            file: "sgprs",
        });
    }
    Ok(at)
}

fn first_set(v: u64, bits: u32) -> u64 {
    if v == 0 || v.trailing_zeros() >= bits {
        u32::MAX as u64
    } else {
        v.trailing_zeros() as u64
    }
}

/// SOPC (Vega ISA 12.4).
pub(crate) fn sopc(w: &mut Wave, i: &Sopc) -> Exec {
    let ty = ssrc0_ty(i.op);
    let a = w.read_scalar(&i.ssrc0, ty)?;
    let b = w.read_scalar(&i.ssrc1, ssrc1_ty(i.op))?;
    let (ai, bi) = (a as u32 as i32, b as u32 as i32);
    let (au, bu) = (a as u32, b as u32);
    w.scc = match i.op.opcode {
        O::SCmpEqI32 | O::SCmpEqU32 => au == bu,
        O::SCmpLgI32 | O::SCmpLgU32 => au != bu,
        O::SCmpGtI32 => ai > bi,
        O::SCmpGeI32 => ai >= bi,
        O::SCmpLtI32 => ai < bi,
        O::SCmpLeI32 => ai <= bi,
        O::SCmpGtU32 => au > bu,
        O::SCmpGeU32 => au >= bu,
        O::SCmpLtU32 => au < bu,
        O::SCmpLeU32 => au <= bu,
        O::SCmpEqU64 => a == b,
        O::SCmpLgU64 => a != b,
        O::SBitcmp0B32 => a >> (b & 31) & 1 == 0,
        O::SBitcmp1B32 => a >> (b & 31) & 1 == 1,
        O::SBitcmp0B64 => a >> (b & 63) & 1 == 0,
        O::SBitcmp1B64 => a >> (b & 63) & 1 == 1,
        _ => return Err(Fail::Unimplemented("SOPC opcode")),
    };
    Ok(())
}

/// The hardware register ids `s_getreg_b32`/`s_setreg_b32` take (LLVM
/// SIDefines.h `Hwreg::Id`, Vega ISA 12.5 "SOPK").
const HW_REG_MODE: u32 = 1;
const HW_REG_STATUS: u32 = 2;
const HW_REG_TRAPSTS: u32 = 3;
const HW_REG_HW_ID: u32 = 4;
const HW_REG_SH_MEM_BASES: u32 = 15;

fn hwreg_fields(simm16: u16) -> (u32, u32, u32) {
    let id = simm16 as u32 & 0x3f;
    let offset = (simm16 as u32 >> 6) & 0x1f;
    let size = ((simm16 as u32 >> 11) & 0x1f) + 1;
    (id, offset, size)
}

fn getreg(w: &Wave, id: u32) -> Exec<u32> {
    Ok(match id {
        HW_REG_MODE => w.mode,
        HW_REG_STATUS => w.status(),
        HW_REG_TRAPSTS => w.trapsts,
        HW_REG_HW_ID => w.hw_id,
        HW_REG_SH_MEM_BASES => {
            (w.apertures.private_base >> 48) as u32 | ((w.apertures.shared_base >> 48) as u32) << 16
        }
        _ => return Err(Fail::Unimplemented("hardware register id")),
    })
}

fn setreg(w: &mut Wave, simm16: u16, value: u32) -> Exec {
    let (id, offset, size) = hwreg_fields(simm16);
    let m = (mask(size) as u32).checked_shl(offset).unwrap_or(0);
    let put = |old: u32| (old & !m) | (value.checked_shl(offset).unwrap_or(0) & m);
    match id {
        HW_REG_MODE => w.mode = put(w.mode),
        HW_REG_TRAPSTS => w.trapsts = put(w.trapsts),
        _ => return Err(Fail::Unimplemented("s_setreg of this hardware register")),
    }
    Ok(())
}

/// SOPK (Vega ISA 12.3).
pub(crate) fn sopk(w: &mut Wave, i: &Sopk) -> Exec {
    let simm = i.simm16 as i16 as i32 as u32;
    let zimm = i.simm16 as u32;
    let op = i.op.opcode;
    let reg = |w: &Wave| -> Exec<u32> { Ok(w.read_scalar(dst(&i.sdst)?, Ty::B32)? as u32) };
    match op {
        O::SMovkI32 => w.write_scalar(dst(&i.sdst)?, simm as u64, false)?,
        O::SCmovkI32 => {
            if w.scc {
                w.write_scalar(dst(&i.sdst)?, simm as u64, false)?
            }
        }
        O::SCmpkEqI32
        | O::SCmpkLgI32
        | O::SCmpkGtI32
        | O::SCmpkGeI32
        | O::SCmpkLtI32
        | O::SCmpkLeI32 => {
            let (a, b) = (reg(w)? as i32, simm as i32);
            w.scc = match op {
                O::SCmpkEqI32 => a == b,
                O::SCmpkLgI32 => a != b,
                O::SCmpkGtI32 => a > b,
                O::SCmpkGeI32 => a >= b,
                O::SCmpkLtI32 => a < b,
                _ => a <= b,
            };
        }
        O::SCmpkEqU32
        | O::SCmpkLgU32
        | O::SCmpkGtU32
        | O::SCmpkGeU32
        | O::SCmpkLtU32
        | O::SCmpkLeU32 => {
            let (a, b) = (reg(w)?, zimm);
            w.scc = match op {
                O::SCmpkEqU32 => a == b,
                O::SCmpkLgU32 => a != b,
                O::SCmpkGtU32 => a > b,
                O::SCmpkGeU32 => a >= b,
                O::SCmpkLtU32 => a < b,
                _ => a <= b,
            };
        }
        O::SAddkI32 => {
            let (r, o) = (reg(w)? as i32).overflowing_add(simm as i32);
            w.write_scalar(dst(&i.sdst)?, r as u32 as u64, false)?;
            w.scc = o;
        }
        O::SMulkI32 => {
            let r = (reg(w)? as i32).wrapping_mul(simm as i32);
            w.write_scalar(dst(&i.sdst)?, r as u32 as u64, false)?;
        }
        O::SGetregB32 => {
            let (id, offset, size) = hwreg_fields(i.simm16);
            let v = (getreg(w, id)? >> offset) as u64 & mask(size);
            w.write_scalar(dst(&i.sdst)?, v, false)?;
        }
        O::SSetregB32 => {
            let v = reg(w)?;
            setreg(w, i.simm16, v)?;
        }
        O::SSetregImm32B32 => {
            let v = i.literal.ok_or(Fail::Unimplemented("missing literal"))?;
            setreg(w, i.simm16, v)?;
        }
        O::SCallB64 => {
            let ret = w.pc;
            w.write_scalar(dst(&i.sdst)?, ret, true)?;
            w.pc = ret.wrapping_add((simm as i32 as i64 * 4) as u64);
        }
        _ => return Err(Fail::Unimplemented("SOPK opcode")),
    }
    Ok(())
}

/// SOPP (Vega ISA 12.5): branches, `s_waitcnt` (a no-op: every access
/// completes before the next instruction in this in-order model),
/// `s_barrier`, `s_endpgm`, `s_trap`, `s_sleep`.
pub(crate) fn sopp(w: &mut Wave, i: &Sopp, _ctx: &mut Ctx<'_>) -> Exec<Option<Stop>> {
    let target = w.pc.wrapping_add((i.simm16 as i16 as i64 * 4) as u64);
    let branch = |w: &mut Wave, cond: bool| {
        if cond {
            w.pc = target;
        }
    };
    match i.op.opcode {
        O::SNop
        | O::SWaitcnt
        | O::SSetprio
        | O::SIcacheInv
        | O::SIncperflevel
        | O::SDecperflevel
        | O::STtracedata
        | O::SWakeup => {}
        O::SEndpgm => return Ok(Some(Stop::Endpgm)),
        O::SBarrier => return Ok(Some(Stop::Barrier)),
        O::SSleep => return Ok(Some(Stop::Yield)),
        O::STrap => return Ok(Some(Stop::Trap(i.simm16 as u8))),
        O::SBranch => w.pc = target,
        O::SCbranchScc0 => branch(w, !w.scc),
        O::SCbranchScc1 => branch(w, w.scc),
        O::SCbranchVccz => {
            let c = w.vcc() == 0;
            branch(w, c)
        }
        O::SCbranchVccnz => {
            let c = w.vcc() != 0;
            branch(w, c)
        }
        O::SCbranchExecz => {
            let c = w.exec() == 0;
            branch(w, c)
        }
        O::SCbranchExecnz => {
            let c = w.exec() != 0;
            branch(w, c)
        }
        // No debugger: the CDBGSYS and CDBGUSER bits are clear (Vega ISA
        // 12.5), so these branches are not taken.
        O::SCbranchCdbgsys
        | O::SCbranchCdbguser
        | O::SCbranchCdbgsysOrUser
        | O::SCbranchCdbgsysAndUser => {}
        _ => return Err(Fail::Unimplemented("SOPP opcode")),
    }
    Ok(None)
}
