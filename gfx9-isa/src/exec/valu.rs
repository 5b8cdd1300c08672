//! The vector ALU: VOP1, VOP2, VOPC, VOP3 and VOP3P share one path here:
//! sources resolved once, read per lane with SDWA selection, DPP lane
//! routing and the float ABS/NEG modifiers (Vega ISA 6 "Vector ALU
//! Operations", 12.7-12.10 "VOP1/VOP2/VOPC/VOP3", 12.8 "SDWA", "DPP"), the
//! operation per active lane, then OMOD/CLAMP and the write to VGPRs, VCC
//! or an SGPR pair. The operations themselves are in `valu_int`,
//! `valu_float` and `valu_cmp`.

use super::operands::{lanes, Src, Ty};
use super::wave::{Wave, LANES};
use super::{valu_cmp, valu_float, valu_int, valu_packed, Exec, Fail};
use crate::inst::{Dpp, DstUnused, Sdwa, SdwaSel, SrcMods, Vop1, Vop2, Vop3, Vop3p, VopExt, Vopc};
use crate::opcodes::{Format, OpDesc, Opcode as O};
use crate::operand::{Half, Operand, Special};
use std::sync::OnceLock;

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
fn dx10_clamp(w: &Wave) -> bool {
    w.mode >> 8 & 1 == 1
}

fn is_float(ty: Ty) -> bool {
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

fn sdwa_select(v: u32, sel: SdwaSel, sext: bool) -> u32 {
    let (shift, bits) = match sel {
        SdwaSel::Byte0 => (0, 8),
        SdwaSel::Byte1 => (8, 8),
        SdwaSel::Byte2 => (16, 8),
        SdwaSel::Byte3 => (24, 8),
        SdwaSel::Word0 => (0, 16),
        SdwaSel::Word1 => (16, 16),
        SdwaSel::Dword => return v,
    };
    let field = (v >> shift) & ((1u32 << bits) - 1);
    if sext {
        let sh = 32 - bits;
        (((field << sh) as i32) >> sh) as u32
    } else {
        field
    }
}

/// SDWA's destination: the result's low bits placed at DST_SEL, the rest
/// padded, sign-extended or preserved (Vega ISA 12.8 "SDWA").
fn sdwa_dst(result: u32, old: u32, s: &Sdwa) -> u32 {
    let (shift, bits) = match s.dst_sel {
        SdwaSel::Byte0 => (0, 8),
        SdwaSel::Byte1 => (8, 8),
        SdwaSel::Byte2 => (16, 8),
        SdwaSel::Byte3 => (24, 8),
        SdwaSel::Word0 => (0, 16),
        SdwaSel::Word1 => (16, 16),
        SdwaSel::Dword => return result,
    };
    let m = ((1u32 << bits) - 1) << shift;
    let placed = (result << shift) & m;
    match s.dst_unused {
        DstUnused::Pad => placed,
        DstUnused::Preserve => (old & !m) | placed,
        DstUnused::Sext => {
            let top = shift + bits;
            let sign = placed >> (top - 1) & 1;
            let above = if top >= 32 || sign == 0 {
                0
            } else {
                u32::MAX << top
            };
            placed | above
        }
    }
}

/// The lane DPP_CTRL reads for `lane`, if any (Vega ISA 12.8 "DPP").
fn dpp_source(ctrl: u16, lane: usize) -> Option<usize> {
    let row = lane & !15;
    let l = lane & 15;
    Some(match ctrl {
        0x000..=0x0ff => (lane & !3) | ((ctrl as usize >> ((lane & 3) * 2)) & 3),
        0x101..=0x10f => {
            let s = l + (ctrl as usize & 15);
            if s > 15 {
                return None;
            }
            row | s
        }
        0x111..=0x11f => {
            let n = ctrl as usize & 15;
            if l < n {
                return None;
            }
            row | (l - n)
        }
        0x121..=0x12f => row | ((l + 16 - (ctrl as usize & 15)) & 15),
        0x130 => {
            if lane == LANES - 1 {
                return None;
            }
            lane + 1
        }
        0x134 => (lane + 1) % LANES,
        0x138 => lane.checked_sub(1)?,
        0x13c => (lane + LANES - 1) % LANES,
        0x140 => row | (15 - l),
        0x141 => (lane & !7) | (7 - (lane & 7)),
        0x142 => {
            if row == 0 {
                return None;
            }
            row - 1
        }
        0x143 => {
            if lane < 32 {
                return None;
            }
            31
        }
        _ => return None,
    })
}

/// Per lane: where the lane's source 0 comes from, and whether the lane
/// writes at all (DPP row and bank masks, out-of-range sources without
/// BOUND_CTRL). `None` source: read zero.
fn dpp_route(d: &Dpp, exec: u64) -> Exec<([Option<usize>; LANES], u64)> {
    if !matches!(d.ctrl, 0x000..=0x0ff | 0x101..=0x10f | 0x111..=0x11f | 0x121..=0x12f | 0x130 | 0x134 | 0x138 | 0x13c | 0x140..=0x143)
    {
        return Err(Fail::Unimplemented("DPP control"));
    }
    let mut from = [None; LANES];
    let mut write = 0u64;
    for lane in lanes(exec) {
        if d.row_mask >> (lane / 16) & 1 == 0 || d.bank_mask >> ((lane / 4) & 3) & 1 == 0 {
            continue;
        }
        match dpp_source(d.ctrl, lane) {
            Some(s) if exec >> s & 1 == 1 => {
                from[lane] = Some(s);
                write |= 1 << lane;
            }
            _ if d.bound_ctrl => write |= 1 << lane,
            _ => {}
        }
    }
    Ok((from, write))
}

/// The sources of `v` resolved for types `tys`.
fn resolve(w: &Wave, v: &Vop, tys: &[Ty], n: usize) -> Exec<[Src; 3]> {
    let mut out = [Src::Uniform(0); 3];
    for k in 0..n {
        let op = v.srcs[k].ok_or(Fail::Unimplemented("missing source"))?;
        out[k] = w.src(&op, tys[k])?;
        let m = v.mods[k];
        if (m.abs || m.neg) && !is_float(tys[k]) {
            return Err(Fail::Unimplemented("ABS/NEG on an integer operand"));
        }
    }
    Ok(out)
}

/// Reads a lane's sources with SDWA selection, DPP routing of source 0
/// and the float modifiers.
pub(crate) struct LaneReader {
    srcs: [Src; 3],
    tys: [Ty; 3],
    mods: [SrcMods; 3],
    n: usize,
    sdwa: Option<Sdwa>,
    dpp_from: Option<[Option<usize>; LANES]>,
    /// Flush f32 denormal inputs (MODE.FP_DENORM f32 = 0).
    flush: bool,
}

impl LaneReader {
    #[inline]
    fn read(&self, w: &Wave, lane: usize) -> [u64; 3] {
        let mut out = [0u64; 3];
        for k in 0..self.n {
            let ty = self.tys[k];
            let src_lane = match (&self.dpp_from, k) {
                (Some(from), 0) => match from[lane] {
                    Some(l) => l,
                    None => {
                        out[k] = apply_mods(0, ty, self.mods[k]);
                        continue;
                    }
                },
                _ => lane,
            };
            let mut raw = w.lane(self.srcs[k], src_lane, ty.is64());
            if let Some(s) = &self.sdwa {
                let (sel, sext) = match k {
                    0 => (s.src0_sel, s.src0_mods.sext),
                    _ => (s.src1_sel, s.src1_mods.sext),
                };
                raw = sdwa_select(raw as u32, sel, sext) as u64;
            }
            out[k] = if is_float(ty) {
                apply_mods(raw, ty, self.mods[k])
            } else {
                raw
            };
            if self.flush && ty == Ty::F32 {
                out[k] = ftz32(out[k]);
            }
        }
        out
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
            for lane in lanes(write_lanes) {
                let mut s = reader.read(w, lane);
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
            for lane in lanes(write_lanes) {
                let s = reader.read(w, lane);
                if f(s[0], s[1]) {
                    mask |= 1 << lane;
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
            for lane in lanes(write_lanes) {
                let s = reader.read(w, lane);
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

fn reader_for(
    w: &Wave,
    v: &Vop,
    sdwa: Option<Sdwa>,
    dpp_from: Option<[Option<usize>; LANES]>,
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

impl LaneReader {
    /// The sources of `lane`.
    pub(crate) fn lane(&self, w: &Wave, lane: usize) -> [u64; 3] {
        self.read(w, lane)
    }
}
