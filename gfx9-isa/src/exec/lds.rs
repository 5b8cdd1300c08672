//! DS: LDS reads, writes and atomics, and the cross-lane `ds_bpermute`,
//! `ds_permute` and `ds_swizzle` (Vega ISA 11 "Data Share Operations",
//! 12.13). Addresses beyond the workgroup's LDS read 0 and drop writes
//! (Vega ISA 11.1: out-of-range LDS accesses).

use super::ctx::Ctx;
use super::memory::AtomicOp;
use super::operands::lanes;
use super::wave::{Lds, Wave, LANES};
use super::{Exec, Fail};
use crate::inst::Ds;
use crate::opcodes::Opcode as O;

pub(crate) fn lds_read(lds: &Lds, addr: u64, buf: &mut [u8]) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = addr
            .checked_add(k as u64)
            .and_then(|a| lds.bytes.get(a as usize))
            .copied()
            .unwrap_or(0);
    }
}

pub(crate) fn lds_write(lds: &mut Lds, addr: u64, data: &[u8]) {
    for (k, b) in data.iter().enumerate() {
        if let Some(slot) = addr
            .checked_add(k as u64)
            .and_then(|a| lds.bytes.get_mut(a as usize))
        {
            *slot = *b;
        }
    }
}

pub(crate) fn lds_atomic(
    lds: &mut Lds,
    addr: u64,
    op: AtomicOp,
    wide: bool,
    src: u64,
    cmp: u64,
) -> u64 {
    let n = if wide { 8 } else { 4 };
    let mut buf = [0u8; 8];
    lds_read(lds, addr, &mut buf[..n]);
    let old = u64::from_le_bytes(buf);
    let new = if wide {
        op.apply64(old, src, cmp)
    } else {
        op.apply32(old as u32, src as u32, cmp as u32) as u64
    };
    lds_write(lds, addr, &new.to_le_bytes()[..n]);
    old
}

/// The atomic of a `ds_<op>[_rtn]_<type>` mnemonic, whether it is 64-bit,
/// and whether it returns.
fn ds_atomic(name: &str) -> Option<(AtomicOp, bool, bool)> {
    let t = name.strip_prefix("ds_")?;
    let (op, rest) = t.split_once('_')?;
    if rest.starts_with("src2") {
        return None;
    }
    let (rtn, ty) = match rest.strip_prefix("rtn_") {
        Some(ty) => (true, ty),
        None => (false, rest),
    };
    let wide = ty.ends_with("64");
    let float = ty.starts_with('f');
    let op = match (op, float) {
        ("add", false) => AtomicOp::Add,
        ("add", true) => AtomicOp::FAdd,
        ("sub", _) => AtomicOp::Sub,
        ("inc", _) => AtomicOp::Inc,
        ("dec", _) => AtomicOp::Dec,
        ("min", false) if ty.starts_with('i') => AtomicOp::Smin,
        ("max", false) if ty.starts_with('i') => AtomicOp::Smax,
        ("min", false) => AtomicOp::Umin,
        ("max", false) => AtomicOp::Umax,
        ("min", true) => AtomicOp::FMin,
        ("max", true) => AtomicOp::FMax,
        ("and", _) => AtomicOp::And,
        ("or", _) => AtomicOp::Or,
        ("xor", _) => AtomicOp::Xor,
        ("wrxchg", _) => AtomicOp::Swap,
        ("cmpst", false) => AtomicOp::CmpSwap,
        _ => return None,
    };
    Some((op, wide, rtn))
}

/// DS.
pub(crate) fn ds(w: &mut Wave, i: &Ds, ctx: &mut Ctx<'_>) -> Exec {
    if i.gds {
        return Err(Fail::Unimplemented("GDS"));
    }
    let op = i.op.opcode;
    let exec = w.exec();
    let missing = Fail::Unimplemented("missing operand");
    let offset16 = (i.offset1 as u64) << 8 | i.offset0 as u64;
    let addr = |w: &Wave, lane: usize| -> Exec<u64> {
        let a = i.addr.ok_or(missing)?;
        let r = w.vdst(&a, 1)?;
        Ok(w.get_lane(r, lane) as u64)
    };
    match op {
        O::DsNop => return Ok(()),
        O::DsBpermuteB32 | O::DsPermuteB32 => {
            // Vega ISA 12.13: bpermute reads lane (addr + offset) / 4 % 64
            // of DATA0, permute writes to it; inactive lanes contribute 0.
            let data = w.vdst(&i.data0.ok_or(missing)?, 1)?;
            let d = w.vdst(&i.vdst.ok_or(missing)?, 1)?;
            let mut src = [0u32; LANES];
            for lane in lanes(exec) {
                src[lane] = w.get_lane(data, lane);
            }
            let mut out = [0u32; LANES];
            for lane in lanes(exec) {
                let sel = ((addr(w, lane)? + offset16) / 4 % 64) as usize;
                if op == O::DsBpermuteB32 {
                    out[lane] = src[sel];
                } else if exec >> sel & 1 == 1 {
                    out[sel] = src[lane];
                }
            }
            for lane in lanes(exec) {
                w.set_lane(d, lane, out[lane]);
            }
            return Ok(());
        }
        O::DsSwizzleB32 => {
            // Vega ISA 12.13 DS_SWIZZLE_B32: offset[15] selects the quad
            // permute mode, else the and/or/xor masks within 32 lanes. The
            // data comes in the ADDR field.
            let data = w.vdst(&i.addr.ok_or(missing)?, 1)?;
            let d = w.vdst(&i.vdst.ok_or(missing)?, 1)?;
            let mut src = [0u32; LANES];
            for lane in lanes(exec) {
                src[lane] = w.get_lane(data, lane);
            }
            let off = offset16 as usize;
            for lane in lanes(exec) {
                let sel = if off & 0x8000 != 0 {
                    (lane & !3) | ((off >> (2 * (lane & 3))) & 3)
                } else {
                    let (and, or, xor) = (off & 0x1f, (off >> 5) & 0x1f, (off >> 10) & 0x1f);
                    (lane & 0x20) | (((lane & and) | or) ^ xor)
                };
                let v = if exec >> sel & 1 == 1 { src[sel] } else { 0 };
                w.set_lane(d, lane, v);
            }
            return Ok(());
        }
        _ => {}
    }
    let name = op.name();
    // Reads and writes, single and paired.
    let rw = |n: &str| -> Option<(bool, usize, bool, bool, u8)> {
        // (is read, bytes, pair, st64, d16/sign: 0 none, 1 sign, 2 d16 lo,
        // 3 d16 hi, 4 sign d16 lo, 5 sign d16 hi)
        Some(match n {
            "ds_read_b32" => (true, 4, false, false, 0),
            "ds_read_b64" => (true, 8, false, false, 0),
            "ds_read_b96" => (true, 12, false, false, 0),
            "ds_read_b128" => (true, 16, false, false, 0),
            "ds_read_u8" => (true, 1, false, false, 0),
            "ds_read_i8" => (true, 1, false, false, 1),
            "ds_read_u16" => (true, 2, false, false, 0),
            "ds_read_i16" => (true, 2, false, false, 1),
            "ds_read_u8_d16" => (true, 1, false, false, 2),
            "ds_read_u8_d16_hi" => (true, 1, false, false, 3),
            "ds_read_i8_d16" => (true, 1, false, false, 4),
            "ds_read_i8_d16_hi" => (true, 1, false, false, 5),
            "ds_read_u16_d16" => (true, 2, false, false, 2),
            "ds_read_u16_d16_hi" => (true, 2, false, false, 3),
            "ds_read2_b32" => (true, 4, true, false, 0),
            "ds_read2_b64" => (true, 8, true, false, 0),
            "ds_read2st64_b32" => (true, 4, true, true, 0),
            "ds_read2st64_b64" => (true, 8, true, true, 0),
            "ds_write_b8" => (false, 1, false, false, 0),
            "ds_write_b8_d16_hi" => (false, 1, false, false, 3),
            "ds_write_b16" => (false, 2, false, false, 0),
            "ds_write_b16_d16_hi" => (false, 2, false, false, 3),
            "ds_write_b32" => (false, 4, false, false, 0),
            "ds_write_b64" => (false, 8, false, false, 0),
            "ds_write_b96" => (false, 12, false, false, 0),
            "ds_write_b128" => (false, 16, false, false, 0),
            "ds_write2_b32" => (false, 4, true, false, 0),
            "ds_write2_b64" => (false, 8, true, false, 0),
            "ds_write2st64_b32" => (false, 4, true, true, 0),
            "ds_write2st64_b64" => (false, 8, true, true, 0),
            _ => return None,
        })
    };
    if let Some((is_read, bytes, pair, st64, ext)) = rw(name) {
        let dw = bytes.div_ceil(4);
        let scale = bytes as u64 * if st64 { 64 } else { 1 };
        let offsets: Vec<u64> = if pair {
            vec![i.offset0 as u64 * scale, i.offset1 as u64 * scale]
        } else {
            vec![offset16]
        };
        let total_dw = dw * offsets.len();
        if is_read {
            let d = w.vdst(&i.vdst.ok_or(missing)?, total_dw as u8)?;
            for lane in lanes(exec) {
                let base = addr(w, lane)?;
                for (k, off) in offsets.iter().enumerate() {
                    let mut buf = [0u8; 16];
                    lds_read(ctx.lds, base + off, &mut buf[..bytes]);
                    if bytes >= 4 {
                        for j in 0..dw {
                            let v = u32::from_le_bytes(buf[j * 4..j * 4 + 4].try_into().unwrap());
                            w.set_lane((d.0 + k * dw + j, d.1), lane, v);
                        }
                        continue;
                    }
                    let raw = if bytes == 1 {
                        buf[0] as u32
                    } else {
                        u16::from_le_bytes([buf[0], buf[1]]) as u32
                    };
                    let signed = matches!(ext, 1 | 4 | 5);
                    let v = match (bytes, signed) {
                        (1, true) => raw as u8 as i8 as i32 as u32,
                        (2, true) => raw as u16 as i16 as i32 as u32,
                        _ => raw,
                    };
                    let old = w.get_lane(d, lane);
                    let v = match ext {
                        2 | 4 => (old & 0xffff_0000) | (v & 0xffff),
                        3 | 5 => (old & 0xffff) | (v & 0xffff) << 16,
                        _ => v,
                    };
                    w.set_lane(d, lane, v);
                }
            }
        } else {
            let d0 = w.vdst(&i.data0.ok_or(missing)?, dw as u8)?;
            let d1 = if pair {
                Some(w.vdst(&i.data1.ok_or(missing)?, dw as u8)?)
            } else {
                None
            };
            for lane in lanes(exec) {
                let base = addr(w, lane)?;
                for (k, off) in offsets.iter().enumerate() {
                    let src = if k == 0 { d0 } else { d1.unwrap_or(d0) };
                    let mut buf = [0u8; 16];
                    for j in 0..dw {
                        buf[j * 4..j * 4 + 4]
                            .copy_from_slice(&w.get_lane((src.0 + j, src.1), lane).to_le_bytes());
                    }
                    if ext == 3 {
                        buf.copy_within(2..4, 0);
                    }
                    lds_write(ctx.lds, base + off, &buf[..bytes]);
                }
            }
        }
        return Ok(());
    }
    if let Some((aop, wide, rtn)) = ds_atomic(name) {
        let n = if wide { 2 } else { 1 };
        let d0 = w.vdst(&i.data0.ok_or(missing)?, n)?;
        // DS_CMPST: DATA0 is the compare value, DATA1 the new one (Vega ISA
        // 12.13 DS_CMPST_B32), the reverse of the buffer CMPSWAP order.
        let d1 = match i.data1 {
            Some(o) => Some(w.vdst(&o, n)?),
            None => None,
        };
        let dst = if rtn {
            Some(w.vdst(&i.vdst.ok_or(missing)?, n)?)
        } else {
            None
        };
        for lane in lanes(exec) {
            let a = addr(w, lane)? + offset16;
            let get = |w: &Wave, r: (usize, bool)| -> u64 {
                let lo = w.get_lane(r, lane) as u64;
                if wide {
                    lo | (w.get_lane((r.0 + 1, r.1), lane) as u64) << 32
                } else {
                    lo
                }
            };
            let (src, cmp) = if aop == AtomicOp::CmpSwap {
                (get(w, d1.ok_or(missing)?), get(w, d0))
            } else {
                (get(w, d0), 0)
            };
            let old = lds_atomic(ctx.lds, a, aop, wide, src, cmp);
            if let Some(d) = dst {
                w.set_lane(d, lane, old as u32);
                if wide {
                    w.set_lane((d.0 + 1, d.1), lane, (old >> 32) as u32);
                }
            }
        }
        return Ok(());
    }
    Err(Fail::Unimplemented("DS opcode"))
}
