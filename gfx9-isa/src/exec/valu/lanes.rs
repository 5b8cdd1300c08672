//! Reading a VALU instruction's sources lane by lane: SDWA selection, DPP
//! lane routing (Vega ISA 12.8 "SDWA", "DPP") and the float modifiers
//! (`LaneReader`), or every lane at once (`Columns`).

use super::super::operands::{lanes, Src, Ty};
use super::super::wave::{Wave, LANES};
use super::super::{Exec, Fail};
use super::shape::*;
use crate::inst::{Dpp, DstUnused, Sdwa, SdwaSel, SrcMods};

pub(super) fn sdwa_select(v: u32, sel: SdwaSel, sext: bool) -> u32 {
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
pub(super) fn sdwa_dst(result: u32, old: u32, s: &Sdwa) -> u32 {
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
pub(super) fn dpp_source(ctrl: u16, lane: usize) -> Option<usize> {
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
pub(super) fn dpp_route(d: &Dpp, exec: u64) -> Exec<([Option<u8>; LANES], u64)> {
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
                from[lane] = Some(s as u8);
                write |= 1 << lane;
            }
            _ if d.bound_ctrl => write |= 1 << lane,
            _ => {}
        }
    }
    Ok((from, write))
}

/// The sources of `v` resolved for types `tys`.
pub(super) fn resolve(w: &Wave, v: &Vop, tys: &[Ty], n: usize) -> Exec<[Src; 3]> {
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
    pub(super) srcs: [Src; 3],
    pub(super) tys: [Ty; 3],
    pub(super) mods: [SrcMods; 3],
    pub(super) n: usize,
    pub(super) sdwa: Option<Sdwa>,
    pub(super) dpp_from: Option<[Option<u8>; LANES]>,
    /// Flush f32 denormal inputs (MODE.FP_DENORM f32 = 0).
    pub(super) flush: bool,
}

/// Every lane's sources, one array per source (`Columns::get` gives a
/// lane's three, as `LaneReader::read` does).
pub(crate) struct Columns(pub(super) [[u64; LANES]; 3]);

impl Columns {
    #[inline]
    pub(super) fn get(&self, lane: usize) -> [u64; 3] {
        [self.0[0][lane], self.0[1][lane], self.0[2][lane]]
    }
}

impl LaneReader {
    /// The sources of every lane at once, when each lane reads only its
    /// own lane (no DPP routing, no SDWA selection): what `read` gives for
    /// each lane, gathered one source at a time, so the per-lane work of
    /// an instruction is its operation alone. `None` for DPP and SDWA
    /// (read lane by lane).
    #[inline]
    pub(super) fn columns<'c>(&self, w: &Wave, out: &'c mut Columns) -> Option<&'c Columns> {
        if self.sdwa.is_some() || self.dpp_from.is_some() {
            return None;
        }
        self.gather(w, out);
        Some(out)
    }

    /// `columns` into `out` (zeroed).
    pub(super) fn gather(&self, w: &Wave, out: &mut Columns) {
        for k in 0..self.n {
            let ty = self.tys[k];
            let col = &mut out.0[k];
            let regs = match self.srcs[k] {
                Src::Uniform(v) => {
                    *col = [v; LANES];
                    None
                }
                Src::Vgpr(r) => Some((&w.vgprs, r)),
                Src::Agpr(r) => Some((&w.agprs, r)),
            };
            if let Some((regs, r)) = regs {
                let lo = &regs[r];
                if ty.is64() {
                    let hi = &regs[r + 1];
                    for l in 0..LANES {
                        col[l] = lo[l] as u64 | (hi[l] as u64) << 32;
                    }
                } else {
                    for l in 0..LANES {
                        col[l] = lo[l] as u64;
                    }
                }
            }
            let m = self.mods[k];
            if is_float(ty) && (m.abs || m.neg) {
                for v in col.iter_mut() {
                    *v = apply_mods(*v, ty, m);
                }
            }
            if self.flush && ty == Ty::F32 {
                for v in col.iter_mut() {
                    *v = ftz32(*v);
                }
            }
        }
    }

    /// A lane's sources: from `cols` when gathered, else read.
    #[inline]
    pub(super) fn at(&self, cols: Option<&Columns>, w: &Wave, lane: usize) -> [u64; 3] {
        match cols {
            Some(c) => c.get(lane),
            None => self.read(w, lane),
        }
    }

    #[inline]
    pub(super) fn read(&self, w: &Wave, lane: usize) -> [u64; 3] {
        let mut out = [0u64; 3];
        for k in 0..self.n {
            let ty = self.tys[k];
            let src_lane = match (&self.dpp_from, k) {
                (Some(from), 0) => match from[lane] {
                    Some(l) => l as usize,
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

impl LaneReader {
    /// The sources of `lane`.
    pub(crate) fn lane(&self, w: &Wave, lane: usize) -> [u64; 3] {
        self.read(w, lane)
    }
}
