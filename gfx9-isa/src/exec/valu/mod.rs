//! The vector ALU: VOP1, VOP2, VOPC, VOP3 and VOP3P share one path here:
//! sources resolved once, read per lane with SDWA selection, DPP lane
//! routing and the float ABS/NEG modifiers (Vega ISA 6 "Vector ALU
//! Operations", 12.7-12.10 "VOP1/VOP2/VOPC/VOP3", 12.8 "SDWA", "DPP"), the
//! operation per active lane, then OMOD/CLAMP and the write to VGPRs, VCC
//! or an SGPR pair. The operations themselves are in `valu_int`,
//! `valu_float` and `valu_cmp`.

use super::operands::{lanes, Ty};
use super::wave::{Wave, LANES};
use super::{valu_cmp, valu_float, valu_int, valu_packed, Exec, Fail};

pub(super) mod lanes;
pub(super) mod shape;

use crate::inst::{Sdwa, SrcMods, Vop1, Vop2, Vop3, Vop3p, VopExt, Vopc};
use crate::opcodes::{Format, Opcode as O};
use crate::operand::{Half, Operand, Special};
pub(crate) use lanes::*;
pub(crate) use shape::*;
use std::sync::OnceLock;

fn compute_kind(op: O) -> Option<Kind> {
    valu_int::kind(op)
        .or_else(|| valu_float::kind(op))
        .or_else(|| valu_cmp::kind(op))
}

/// How `op` executes, from a table built once over every opcode of the
/// encoding tables (the compares are found by name).
fn kind(op: O) -> Option<Kind> {
    static KINDS: OnceLock<Vec<Option<Kind>>> = OnceLock::new();
    let table = KINDS.get_or_init(|| {
        let rows = || Format::ALL.iter().flat_map(|f| f.table().iter());
        let len = rows().map(|r| r.opcode as usize + 1).max().unwrap_or(0);
        let mut t = vec![None; len];
        for r in rows() {
            t[r.opcode as usize] = compute_kind(r.opcode);
        }
        t
    });
    table.get(op as usize).copied().flatten()
}

/// The VOP1 encoding.
pub(crate) fn vop1(w: &mut Wave, i: &Vop1) -> Exec {
    let v = Vop {
        op: i.op,
        srcs: [i.src0, None, None],
        mods: ext_mods(&i.ext),
        vdst: i.vdst,
        sdst: None,
        clamp: ext_clamp(&i.ext),
        omod: ext_omod(&i.ext),
        ext: i.ext,
        k: None,
        vop3: false,
    };
    exec(w, &v)
}

/// The VOP2 encoding.
pub(crate) fn vop2(w: &mut Wave, i: &Vop2) -> Exec {
    let v = Vop {
        op: i.op,
        srcs: [Some(i.src0), Some(i.vsrc1), None],
        mods: ext_mods(&i.ext),
        vdst: Some(i.vdst),
        sdst: None,
        clamp: ext_clamp(&i.ext),
        omod: ext_omod(&i.ext),
        ext: i.ext,
        k: i.k,
        vop3: false,
    };
    exec(w, &v)
}

/// The VOPC encoding: the result goes to VCC (or SDWA's SDST).
pub(crate) fn vopc(w: &mut Wave, i: &Vopc) -> Exec {
    let sdst = match &i.ext {
        VopExt::Sdwa(s) => s.sdst,
        _ => None,
    };
    let v = Vop {
        op: i.op,
        srcs: [Some(i.src0), Some(i.vsrc1), None],
        mods: ext_mods(&i.ext),
        vdst: None,
        sdst,
        clamp: ext_clamp(&i.ext),
        omod: 0,
        ext: i.ext,
        k: None,
        vop3: false,
    };
    exec(w, &v)
}

/// The VOP3 encoding (a and b).
pub(crate) fn vop3(w: &mut Wave, i: &Vop3) -> Exec {
    if i.op_sel != 0 {
        return Err(Fail::Unimplemented("VOP3 op_sel"));
    }
    // Compares and v_readlane name their SGPR destination in VDST.
    let vdst_is_scalar = matches!(
        i.vdst,
        Some(Operand::Sgpr(_)) | Some(Operand::Special(..)) | Some(Operand::Ttmp(_))
    );
    let (vdst, sdst) = if vdst_is_scalar {
        (None, i.vdst)
    } else {
        (i.vdst, i.sdst)
    };
    let v = Vop {
        op: i.op,
        srcs: i.src,
        mods: i.mods,
        vdst,
        sdst,
        clamp: i.clamp,
        omod: i.omod,
        ext: VopExt::None,
        k: None,
        vop3: true,
    };
    exec(w, &v)
}

/// VOP3P: packed math (`valu_packed`).
pub(crate) fn vop3p(w: &mut Wave, i: &Vop3p) -> Exec {
    valu_packed::vop3p(w, i)
}

fn ext_mods(ext: &VopExt) -> [SrcMods; 3] {
    match ext {
        VopExt::None => [SrcMods::default(); 3],
        VopExt::Sdwa(s) => [s.src0_mods, s.src1_mods, SrcMods::default()],
        VopExt::Dpp(d) => [d.src0_mods, d.src1_mods, SrcMods::default()],
    }
}

fn ext_clamp(ext: &VopExt) -> bool {
    matches!(ext, VopExt::Sdwa(s) if s.clamp)
}

fn ext_omod(ext: &VopExt) -> u8 {
    match ext {
        VopExt::Sdwa(s) => s.omod,
        _ => 0,
    }
}

/// OMOD then CLAMP on a float result (Vega ISA 6.2.3 "Output modifiers":
/// OMOD 1 = *2, 2 = *4, 3 = /2; CLAMP to [0, 1], NaN to 0 in DX10 mode).
fn out_mods(v: u64, ty: Ty, omod: u8, clamp: bool, dx10: bool) -> u64 {
    if omod == 0 && !clamp {
        return v;
    }
    let scale = match omod {
        1 => 2.0,
        2 => 4.0,
        3 => 0.5,
        _ => 1.0,
    };
    let c = |x: f64| {
        if !clamp {
            x
        } else if x.is_nan() {
            if dx10 {
                0.0
            } else {
                x
            }
        } else {
            x.clamp(0.0, 1.0)
        }
    };
    match ty {
        Ty::F64 => c(f64::from_bits(v) * scale).to_bits(),
        Ty::F32 => (c((f32::from_bits(v as u32) * scale as f32) as f64) as f32).to_bits() as u64,
        _ => {
            let x = super::float::f16_to_f32(v as u16) * scale as f32;
            let x = c(x as f64) as f32;
            super::float::f32_to_f16(x) as u64
        }
    }
}

/// The 64-bit lane mask destination of a compare or carry: SDST if named,
/// else VCC.
fn write_mask(w: &mut Wave, sdst: Option<&Operand>, mask: u64) -> Exec {
    match sdst {
        Some(op) => w.write_scalar(op, mask, true),
        None => {
            w.set_vcc(mask);
            Ok(())
        }
    }
}

/// A lane mask source (carry-in, `v_cndmask` selector): SRC2 in VOP3,
/// VCC otherwise.
fn read_mask(w: &Wave, v: &Vop) -> Exec<u64> {
    if v.vop3 {
        let op = v.srcs[2].ok_or(Fail::Unimplemented("missing mask source"))?;
        w.read_scalar(&op, Ty::B64)
    } else {
        Ok(w.vcc())
    }
}

fn exec(w: &mut Wave, v: &Vop) -> Exec {
    let Some(k) = kind(v.op.opcode) else {
        return Err(Fail::Unimplemented("VALU opcode"));
    };
    let exec_mask = w.exec();
    let (dpp_from, write_lanes) = match &v.ext {
        VopExt::Dpp(d) => {
            let (f, m) = dpp_route(d, exec_mask)?;
            (Some(f), m)
        }
        _ => (None, exec_mask),
    };
    let sdwa = match &v.ext {
        VopExt::Sdwa(s) => Some(*s),
        _ => None,
    };
    match k {
        Kind::Map {
            src,
            n,
            dst,
            f,
            float,
        } => {
            let flush = if float || src[..n].iter().any(|&t| is_float(t)) {
                float_mode(w)?
            } else {
                false
            };
            if (v.clamp || v.omod != 0) && !float {
                return Err(Fail::Unimplemented("CLAMP/OMOD on an integer result"));
            }
            let dx10 = dx10_clamp(w);
            let mut tys = src;
            let mut n = n;
            // v_madmk/v_madak/v_fmamk/v_fmaak: K as a third source in the
            // order the operation takes it.
            let mut srcs_ops = v.srcs;
            if let Some(kv) = v.k {
                match v.op.opcode {
                    O::VMadmkF32 | O::VFmamkF32 | O::VMadmkF16 => {
                        srcs_ops = [v.srcs[0], Some(Operand::Literal(kv)), v.srcs[1]];
                    }
                    _ => srcs_ops[2] = Some(Operand::Literal(kv)),
                }
                n = 3;
                tys = [src[0], src[0], src[0]];
            }
            let vv = Vop {
                srcs: srcs_ops,
                ..*v
            };
            let mac = matches!(
                v.op.opcode,
                O::VMacF32 | O::VFmacF32 | O::VFmacF64 | O::VMacF16
            );
            // v_mac/v_fmac: the addend is the destination itself.
            if mac {
                n = 2;
            }
            let resolved = resolve(w, &vv, &tys, n)?;
            let reader = LaneReader {
                srcs: resolved,
                tys,
                mods: vv.mods,
                n,
                sdwa,
                dpp_from,
                flush,
            };
            let dop = v.vdst.ok_or(Fail::Unimplemented("no destination"))?;
            let dwords = if dst.is64() { 2 } else { 1 };
            let d = w.vdst(&dop, dwords)?;
            let mut buf = Columns([[0; LANES]; 3]);
            let cols = reader.columns(w, &mut buf);
            if let Some(cols) = cols {
                map_columns(
                    w,
                    cols,
                    write_lanes,
                    d,
                    f,
                    dst,
                    mac && flush && tys[0] == Ty::F32,
                    mac,
                );
                if float && (v.omod != 0 || v.clamp) {
                    let regs = if d.1 { &mut w.agprs } else { &mut w.vgprs };
                    for lane in lanes(write_lanes) {
                        let r = regs[d.0][lane] as u64
                            | if dst.is64() {
                                (regs[d.0 + 1][lane] as u64) << 32
                            } else {
                                0
                            };
                        let r = out_mods(r, dst, v.omod, v.clamp, dx10);
                        let r = if flush && dst == Ty::F32 { ftz32(r) } else { r };
                        store(regs, d.0, lane, r, dst);
                    }
                } else if flush && dst == Ty::F32 {
                    let regs = if d.1 { &mut w.agprs } else { &mut w.vgprs };
                    for lane in lanes(write_lanes) {
                        regs[d.0][lane] = ftz32(regs[d.0][lane] as u64) as u32;
                    }
                }
                return Ok(());
            }
            for lane in lanes(write_lanes) {
                let mut s = reader.at(cols, w, lane);
                if mac {
                    // D = S0 * S1 + D (Vega ISA 12.7 "V_MAC_F32").
                    s[2] = w.get_lane(d, lane) as u64
                        | if dst.is64() {
                            (w.get_lane((d.0 + 1, d.1), lane) as u64) << 32
                        } else {
                            0
                        };
                    if flush && tys[0] == Ty::F32 {
                        s[2] = ftz32(s[2]);
                    }
                }
                let mut r = f(&s);
                if float {
                    r = out_mods(r, dst, v.omod, v.clamp, dx10);
                }
                if flush && dst == Ty::F32 {
                    r = ftz32(r);
                }
                match dst {
                    Ty::B64 | Ty::F64 => {
                        w.set_lane(d, lane, r as u32);
                        w.set_lane((d.0 + 1, d.1), lane, (r >> 32) as u32);
                    }
                    Ty::B32 | Ty::F32 => {
                        let r = match &sdwa {
                            Some(s) => sdwa_dst(r as u32, w.get_lane(d, lane), s),
                            None => r as u32,
                        };
                        w.set_lane(d, lane, r);
                    }
                    // 16-bit results zero the high half on gfx9 (LLVM
                    // SIInstrInfo `zeroesHigh16BitsOfDest`).
                    Ty::B16 | Ty::F16 => {
                        let r = match &sdwa {
                            Some(s) => sdwa_dst(r as u32 & 0xffff, w.get_lane(d, lane), s),
                            None => r as u32 & 0xffff,
                        };
                        w.set_lane(d, lane, r);
                    }
                }
            }
            Ok(())
        }
        Kind::Cmp { ty, src1, f, x } => {
            let flush = is_float(ty) && float_mode(w)?;
            let tys = [ty, src1, Ty::B32];
            let resolved = resolve(w, v, &tys, 2)?;
            let reader = LaneReader {
                srcs: resolved,
                tys,
                mods: v.mods,
                n: 2,
                sdwa,
                dpp_from,
                flush,
            };
            let mut mask = 0u64;
            let mut buf = Columns([[0; LANES]; 3]);
            let cols = reader.columns(w, &mut buf);
            if let Some(cols) = cols {
                for lane in lanes(write_lanes) {
                    mask |= (f(cols.0[0][lane], cols.0[1][lane]) as u64) << lane;
                }
            } else {
                for lane in lanes(write_lanes) {
                    let s = reader.read(w, lane);
                    if f(s[0], s[1]) {
                        mask |= 1 << lane;
                    }
                }
            }
            // Inactive lanes read 0 in the result (Vega ISA 6.4 "Vector
            // Compare"); v_cmpx also writes EXEC.
            write_mask(w, v.sdst.as_ref(), mask)?;
            if x {
                w.set_exec(mask);
            }
            Ok(())
        }
        Kind::Carry { f, carry_in } => {
            if v.clamp || v.omod != 0 {
                return Err(Fail::Unimplemented("CLAMP on a carry operation"));
            }
            let tys = [Ty::B32; 3];
            let resolved = resolve(w, v, &tys, 2)?;
            let reader = LaneReader {
                srcs: resolved,
                tys,
                mods: v.mods,
                n: 2,
                sdwa,
                dpp_from,
                flush: false,
            };
            let cin = if carry_in { read_mask(w, v)? } else { 0 };
            let dop = v.vdst.ok_or(Fail::Unimplemented("no destination"))?;
            let d = w.vdst(&dop, 1)?;
            let mut cout = 0u64;
            let mut buf = Columns([[0; LANES]; 3]);
            let cols = reader.columns(w, &mut buf);
            if let Some(cols) = cols {
                let regs = if d.1 { &mut w.agprs } else { &mut w.vgprs };
                let out = &mut regs[d.0];
                for lane in lanes(write_lanes) {
                    let (a, b) = (cols.0[0][lane] as u32, cols.0[1][lane] as u32);
                    let (r, c) = f(a, b, cin >> lane & 1 == 1);
                    out[lane] = r;
                    cout |= (c as u64) << lane;
                }
                return write_mask(w, v.sdst.as_ref(), cout);
            }
            for lane in lanes(write_lanes) {
                let s = reader.at(cols, w, lane);
                let (r, c) = f(s[0] as u32, s[1] as u32, cin >> lane & 1 == 1);
                let r = match &sdwa {
                    Some(sd) => sdwa_dst(r, w.get_lane(d, lane), sd),
                    None => r,
                };
                w.set_lane(d, lane, r);
                cout |= (c as u64) << lane;
            }
            write_mask(w, v.sdst.as_ref(), cout)
        }
        Kind::Special => special(w, v, reader_for(w, v, sdwa, dpp_from)?, write_lanes),
    }
}

/// Stores a lane's result of type `dst` in register `r` (and `r + 1` for
/// 64 bits); 16-bit results zero the high half on gfx9 (LLVM
/// SIInstrInfo `zeroesHigh16BitsOfDest`).
#[inline]
fn store(regs: &mut [[u32; LANES]], r: usize, lane: usize, v: u64, dst: Ty) {
    match dst {
        Ty::B64 | Ty::F64 => {
            regs[r][lane] = v as u32;
            regs[r + 1][lane] = (v >> 32) as u32;
        }
        Ty::B32 | Ty::F32 => regs[r][lane] = v as u32,
        Ty::B16 | Ty::F16 => regs[r][lane] = v as u32 & 0xffff,
    }
}

/// `Kind::Map` without DPP or SDWA, sources gathered: the operation per
/// active lane, each result stored as the lane-by-lane path stores it
/// before output modifiers (each lane reads and writes only its own
/// lane, so the order does not matter). `mac`: the destination is the
/// third source (`flush_acc`: its f32 denormal flushed).
#[allow(clippy::too_many_arguments)]
#[inline]
fn map_columns(
    w: &mut Wave,
    cols: &Columns,
    write_lanes: u64,
    d: (usize, bool),
    f: LaneFn,
    dst: Ty,
    flush_acc: bool,
    mac: bool,
) {
    let regs = if d.1 { &mut w.agprs } else { &mut w.vgprs };
    let wide = dst.is64();
    let Some(tuple) = regs.get_mut(d.0..d.0 + 1 + wide as usize) else {
        return;
    };
    let (lo, hi) = tuple.split_at_mut(1);
    let lo = &mut lo[0];
    let mut hi = hi.first_mut();
    let mut m = write_lanes;
    while m != 0 {
        let lane = m.trailing_zeros() as usize;
        m &= m - 1;
        let mut s = cols.get(lane);
        if mac {
            s[2] = lo[lane] as u64 | hi.as_ref().map_or(0, |h| (h[lane] as u64) << 32);
            if flush_acc {
                s[2] = ftz32(s[2]);
            }
        }
        let r = f(&s);
        match &mut hi {
            Some(h) => {
                lo[lane] = r as u32;
                h[lane] = (r >> 32) as u32;
            }
            None => {
                lo[lane] = match dst {
                    Ty::B16 | Ty::F16 => r as u32 & 0xffff,
                    _ => r as u32,
                }
            }
        }
    }
}

fn reader_for(
    w: &Wave,
    v: &Vop,
    sdwa: Option<Sdwa>,
    dpp_from: Option<[Option<u8>; LANES]>,
) -> Exec<Option<LaneReader>> {
    let tys = match v.op.opcode {
        O::VCndmaskB32 => [Ty::F32, Ty::F32, Ty::B32],
        O::VMbcntLoU32B32 | O::VMbcntHiU32B32 => [Ty::B32, Ty::B32, Ty::B32],
        O::VDivScaleF32 | O::VDivFmasF32 => [Ty::F32; 3],
        O::VDivScaleF64 | O::VDivFmasF64 => [Ty::F64; 3],
        _ => return Ok(None),
    };
    let n = match v.op.opcode {
        O::VCndmaskB32 | O::VMbcntLoU32B32 | O::VMbcntHiU32B32 => 2,
        _ => 3,
    };
    let srcs = resolve(w, v, &tys, n)?;
    // v_cndmask moves bits; the division helpers require denormals kept.
    Ok(Some(LaneReader {
        srcs,
        tys,
        mods: v.mods,
        n,
        sdwa,
        dpp_from,
        flush: false,
    }))
}

fn special(w: &mut Wave, v: &Vop, reader: Option<LaneReader>, write_lanes: u64) -> Exec {
    let op = v.op.opcode;
    let exec = w.exec();
    match op {
        O::VNop => Ok(()),
        O::VCndmaskB32 => {
            let r = reader.ok_or(Fail::Unimplemented("sources"))?;
            let sel = read_mask(w, v)?;
            let d = w.vdst(&v.vdst.ok_or(Fail::Unimplemented("no destination"))?, 1)?;
            let mut buf = Columns([[0; LANES]; 3]);
            if let Some(cols) = r.columns(w, &mut buf) {
                let regs = if d.1 { &mut w.agprs } else { &mut w.vgprs };
                let out = &mut regs[d.0];
                for lane in lanes(write_lanes) {
                    let k = (sel >> lane & 1) as usize;
                    out[lane] = cols.0[k][lane] as u32;
                }
                return Ok(());
            }
            for lane in lanes(write_lanes) {
                let s = r.read(w, lane);
                let x = if sel >> lane & 1 == 1 { s[1] } else { s[0] } as u32;
                let x = match &r.sdwa {
                    Some(sd) => sdwa_dst(x, w.get_lane(d, lane), sd),
                    None => x,
                };
                w.set_lane(d, lane, x);
            }
            Ok(())
        }
        O::VMbcntLoU32B32 | O::VMbcntHiU32B32 => {
            // D = popcount(S0 & lanes below this one, in the low or high
            // half) + S1 (Vega ISA 12.10).
            let r = reader.ok_or(Fail::Unimplemented("sources"))?;
            let d = w.vdst(&v.vdst.ok_or(Fail::Unimplemented("no destination"))?, 1)?;
            for lane in lanes(write_lanes) {
                let s = r.read(w, lane);
                let below = if op == O::VMbcntLoU32B32 {
                    (1u64 << lane.min(32)) - 1
                } else if lane > 32 {
                    (1u64 << (lane - 32)) - 1
                } else {
                    0
                };
                let cnt = ((s[0] as u32 as u64) & below).count_ones();
                w.set_lane(d, lane, cnt.wrapping_add(s[1] as u32));
            }
            Ok(())
        }
        O::VReadfirstlaneB32 => {
            // The first active lane, lane 0 if none (Vega ISA 12.8).
            let src = v.srcs[0].ok_or(Fail::Unimplemented("missing source"))?;
            let s = w.src(&src, Ty::B32)?;
            let lane = if exec == 0 {
                0
            } else {
                exec.trailing_zeros() as usize
            };
            let x = w.lane(s, lane, false);
            let dst = v
                .vdst
                .or(v.sdst)
                .ok_or(Fail::Unimplemented("no destination"))?;
            w.write_scalar(&dst, x, false)
        }
        O::VReadlaneB32 => {
            let src = v.srcs[0].ok_or(Fail::Unimplemented("missing source"))?;
            let sel = v.srcs[1].ok_or(Fail::Unimplemented("missing source"))?;
            let lane = (w.read_scalar(&sel, Ty::B32)? & 63) as usize;
            let s = w.src(&src, Ty::B32)?;
            let x = w.lane(s, lane, false);
            let dst = v
                .sdst
                .or(v.vdst)
                .ok_or(Fail::Unimplemented("no destination"))?;
            w.write_scalar(&dst, x, false)
        }
        O::VWritelaneB32 => {
            // Writes one lane regardless of EXEC (Vega ISA 12.10).
            let src = v.srcs[0].ok_or(Fail::Unimplemented("missing source"))?;
            let sel = v.srcs[1].ok_or(Fail::Unimplemented("missing source"))?;
            let x = w.read_scalar(&src, Ty::B32)? as u32;
            let lane = (w.read_scalar(&sel, Ty::B32)? & 63) as usize;
            let d = w.vdst(&v.vdst.ok_or(Fail::Unimplemented("no destination"))?, 1)?;
            w.set_lane(d, lane, x);
            Ok(())
        }
        O::VSwapB32 => {
            let a = w.vdst(&v.vdst.ok_or(Fail::Unimplemented("no destination"))?, 1)?;
            let b = w.vdst(&v.srcs[0].ok_or(Fail::Unimplemented("missing source"))?, 1)?;
            for lane in lanes(exec) {
                let (x, y) = (w.get_lane(a, lane), w.get_lane(b, lane));
                w.set_lane(a, lane, y);
                w.set_lane(b, lane, x);
            }
            Ok(())
        }
        O::VDivScaleF32 | O::VDivScaleF64 | O::VDivFmasF32 | O::VDivFmasF64 => {
            valu_float::div_special(
                w,
                v,
                reader.ok_or(Fail::Unimplemented("sources"))?,
                write_lanes,
            )
        }
        O::VMadU64U32 | O::VMadI64I32 => valu_int::mad64(w, v, write_lanes),
        _ => Err(Fail::Unimplemented("VALU opcode")),
    }
}

/// Whether an operand is VCC (the implicit mask of the 32-bit encodings).
#[allow(dead_code)]
pub(crate) fn is_vcc(op: &Operand) -> bool {
    matches!(op, Operand::Special(Special::Vcc, Half::Both))
}
