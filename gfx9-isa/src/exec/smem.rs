//! Scalar memory: SMEM loads, stores, atomics, the clocks and cache
//! controls (Vega ISA 4 "Scalar Memory Operations", 12.6).

use super::ctx::Ctx;
use super::memory::AtomicOp;
use super::operands::Ty;
use super::wave::Wave;
use super::{Exec, Fail};
use crate::inst::{Smem, SmemOffset};
use crate::opcodes::Opcode as O;

fn dwords(op: O) -> usize {
    let name = op.name();
    if name.ends_with("x16") {
        16
    } else if name.ends_with("x8") {
        8
    } else if name.ends_with("x4") {
        4
    } else if name.ends_with("x2") {
        2
    } else {
        1
    }
}

fn atomic_op(name: &str) -> Option<AtomicOp> {
    let base = name.trim_end_matches("_x2");
    let tail = base.rsplit("atomic_").next()?;
    Some(match tail {
        "swap" => AtomicOp::Swap,
        "cmpswap" => AtomicOp::CmpSwap,
        "add" => AtomicOp::Add,
        "sub" => AtomicOp::Sub,
        "smin" => AtomicOp::Smin,
        "umin" => AtomicOp::Umin,
        "smax" => AtomicOp::Smax,
        "umax" => AtomicOp::Umax,
        "and" => AtomicOp::And,
        "or" => AtomicOp::Or,
        "xor" => AtomicOp::Xor,
        "inc" => AtomicOp::Inc,
        "dec" => AtomicOp::Dec,
        _ => return None,
    })
}

/// The address of an SMEM access: SBASE plus the offset, dword aligned
/// (Vega ISA 4.3: the two low bits are ignored), and how many of the
/// access's `n` dwords lie in range. A buffer resource's base is its low
/// 48 bits and its range NUM_RECORDS bytes (times STRIDE when set);
/// dwords past it read zero and are not written (Vega ISA 4.3 "Scalar
/// buffer" range checking, per dword).
fn address(w: &Wave, i: &Smem, buffer: bool, n: usize) -> Exec<(u64, usize)> {
    let sbase = i
        .sbase
        .as_ref()
        .ok_or(Fail::Unimplemented("SMEM without base"))?;
    let offset = match i.offset {
        // 21-bit immediate, signed for the non-buffer loads on gfx9
        // (LLVM AMDGPUBaseInfo `isLegalSMRDEncodedSignedOffset`).
        SmemOffset::Imm(v) if !buffer => ((v << 11) as i32 >> 11) as i64 as u64,
        SmemOffset::Imm(v) => v as u64,
        SmemOffset::Sgpr(op) => w.read_scalar(&op, Ty::B32)?,
    };
    if buffer {
        let at = w.sreg_index(sbase)?.ok_or(Fail::Unimplemented(
            "buffer resource outside the scalar file",
        ))?;
        let dw1 = w.sreg_at(at + 1)? as u64;
        let base = (w.sreg_at(at)? as u64 | (dw1 & 0xffff) << 32) & 0xffff_ffff_ffff;
        let stride = (dw1 >> 16) & 0x3fff;
        let range = w.sreg_at(at + 2)? as u64 * stride.max(1);
        let offset = offset & !3;
        let in_range = (0..n)
            .take_while(|&k| offset + 4 * k as u64 + 4 <= range)
            .count();
        return Ok((base.wrapping_add(offset), in_range));
    }
    let base = w.read_scalar(sbase, Ty::B64)?;
    Ok((base.wrapping_add(offset) & !3, n))
}

/// SMEM (Vega ISA 12.6).
pub(crate) fn smem(w: &mut Wave, i: &Smem, ctx: &mut Ctx<'_>) -> Exec {
    let op = i.op.opcode;
    let name = op.name();
    match op {
        O::SDcacheInv | O::SDcacheWb | O::SDcacheInvVol | O::SDcacheWbVol => return Ok(()),
        O::SMemtime | O::SMemrealtime => {
            let t = if op == O::SMemtime {
                ctx.clock.memtime()
            } else {
                ctx.clock.memrealtime()
            };
            let d = i
                .sdata
                .as_ref()
                .ok_or(Fail::Unimplemented("no destination"))?;
            return w.write_scalar(d, t, true);
        }
        _ => {}
    }
    let data = i.sdata.ok_or(Fail::Unimplemented("SMEM without data"))?;
    let at = w
        .sreg_index(&data)?
        .ok_or(Fail::Unimplemented("SMEM data not in the scalar file"))?;
    let n = dwords(op);
    if name.starts_with("s_load") || name.starts_with("s_buffer_load") {
        let (addr, valid) = address(w, i, name.starts_with("s_buffer"), n)?;
        let mut buf = [0u8; 64];
        if valid > 0 {
            ctx.mem.read(addr, &mut buf[..valid * 4])?;
        }
        w.sreg_at(at + n - 1)?;
        for k in 0..n {
            let v =
                u32::from_le_bytes([buf[k * 4], buf[k * 4 + 1], buf[k * 4 + 2], buf[k * 4 + 3]]);
            w.set_sreg_at(at + k, v)?;
        }
        return Ok(());
    }
    if name.starts_with("s_store") || name.starts_with("s_buffer_store") {
        let (addr, valid) = address(w, i, name.starts_with("s_buffer"), n)?;
        let mut buf = [0u8; 16];
        for k in 0..n {
            buf[k * 4..k * 4 + 4].copy_from_slice(&w.sreg_at(at + k)?.to_le_bytes());
        }
        if valid > 0 {
            ctx.mem.write(addr, &buf[..valid * 4])?;
        }
        return Ok(());
    }
    if name.starts_with("s_atomic") || name.starts_with("s_buffer_atomic") {
        let aop = atomic_op(name).ok_or(Fail::Unimplemented("scalar atomic"))?;
        let wide = name.ends_with("_x2");
        let (addr, valid) = address(w, i, name.starts_with("s_buffer"), 1 + wide as usize)?;
        if valid < 1 + wide as usize {
            return Ok(());
        }
        let q = |w: &Wave, k: usize| -> Exec<u64> {
            Ok(w.sreg_at(k)? as u64 | (w.sreg_at(k + 1)? as u64) << 32)
        };
        let old = if wide {
            let (src, cmp) = (q(w, at)?, q(w, at + 2)?);
            ctx.mem.atomic64(addr & !7, aop, src, cmp)?
        } else {
            let (src, cmp) = (w.sreg_at(at)?, w.sreg_at(at + 1)?);
            ctx.mem.atomic32(addr, aop, src, cmp)? as u64
        };
        // GLC returns the old value in SDATA (Vega ISA 12.6).
        if i.glc {
            w.set_sreg_at(at, old as u32)?;
            if wide {
                w.set_sreg_at(at + 1, (old >> 32) as u32)?;
            }
        }
        return Ok(());
    }
    Err(Fail::Unimplemented("SMEM opcode"))
}
