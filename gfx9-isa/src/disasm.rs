//! Disassembly: `Display` for [`Instruction`], in the syntax of LLVM's
//! AMDGPU assembler as `llvm-objdump` prints it (the differential test
//! compares the two), for diagnostics.
//!
//! Constants print by operand type as LLVM does: integer inline constants
//! in decimal, float ones by value, a literal equal to an inline constant
//! as that constant, any other literal in hex.

use std::fmt::{self, Display, Formatter, Write};

use crate::inst::*;
use crate::opcodes::{Slot, Suffix, Ty};
use crate::operand::{InlineFloat, Operand};

fn float_text(c: InlineFloat, wide: bool) -> &'static str {
    match c {
        InlineFloat::Half => "0.5",
        InlineFloat::MinusHalf => "-0.5",
        InlineFloat::One => "1.0",
        InlineFloat::MinusOne => "-1.0",
        InlineFloat::Two => "2.0",
        InlineFloat::MinusTwo => "-2.0",
        InlineFloat::Four => "4.0",
        InlineFloat::MinusFour => "-4.0",
        InlineFloat::InvTwoPi if wide => "0.15915494309189532",
        InlineFloat::InvTwoPi => "0.15915494",
    }
}

/// An operand printed for a source of type `ty`.
struct Src(Operand, Ty);

impl Display for Src {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let Src(op, ty) = *self;
        match op {
            Operand::Float(c) => match ty {
                Ty::I16 => write!(f, "0x{:x}", c.f16_bits()),
                Ty::B64 => f.write_str(float_text(c, true)),
                _ => f.write_str(float_text(c, false)),
            },
            Operand::Literal(v) => match ty {
                Ty::I16 | Ty::F16 => {
                    let lo = v as u16;
                    let s = lo as i16;
                    if (-16..=64).contains(&s) {
                        write!(f, "{s}")
                    } else if let Some(c) = (ty == Ty::F16)
                        .then(|| InlineFloat::ALL.into_iter().find(|c| c.f16_bits() == lo))
                        .flatten()
                    {
                        f.write_str(float_text(c, false))
                    } else {
                        write!(f, "0x{lo:x}")
                    }
                }
                Ty::B32 => {
                    if (-16..=64).contains(&(v as i32)) {
                        write!(f, "{}", v as i32)
                    } else if let Some(c) = InlineFloat::ALL.into_iter().find(|c| c.f32_bits() == v)
                    {
                        f.write_str(float_text(c, false))
                    } else {
                        write!(f, "0x{v:x}")
                    }
                }
                Ty::B64 | Ty::Wide(_) => {
                    if v <= 64 {
                        write!(f, "{v}")
                    } else {
                        write!(f, "0x{v:x}")
                    }
                }
            },
            other => write!(f, "{other}"),
        }
    }
}

/// A source with its modifiers.
struct Modded(Operand, Ty, SrcMods);

impl Display for Modded {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let Modded(op, ty, m) = *self;
        if m.neg {
            f.write_char('-')?;
        }
        if m.sext {
            f.write_str("sext(")?;
        }
        if m.abs {
            f.write_char('|')?;
        }
        write!(f, "{}", Src(op, ty))?;
        if m.abs {
            f.write_char('|')?;
        }
        if m.sext {
            f.write_char(')')?;
        }
        Ok(())
    }
}

/// Writes `name` and the operands, comma-separated.
struct Line<'a, 'b> {
    f: &'a mut Formatter<'b>,
    first: bool,
}

impl<'a, 'b> Line<'a, 'b> {
    fn start(f: &'a mut Formatter<'b>, name: &str, suffix: &str) -> Result<Self, fmt::Error> {
        f.write_str(name)?;
        f.write_str(suffix)?;
        Ok(Line { f, first: true })
    }

    fn op(&mut self, d: impl Display) -> fmt::Result {
        let sep = if self.first { " " } else { ", " };
        self.first = false;
        write!(self.f, "{sep}{d}")
    }

    fn opt(&mut self, d: Option<impl Display>) -> fmt::Result {
        match d {
            Some(d) => self.op(d),
            None => Ok(()),
        }
    }

    fn tail(&mut self, d: impl Display) -> fmt::Result {
        write!(self.f, " {d}")
    }
}

fn suffix_text(s: Suffix) -> &'static str {
    match s {
        Suffix::None => "",
        Suffix::E32 => "_e32",
        Suffix::E64 => "_e64",
    }
}

fn sel_text(s: SdwaSel) -> &'static str {
    match s {
        SdwaSel::Byte0 => "BYTE_0",
        SdwaSel::Byte1 => "BYTE_1",
        SdwaSel::Byte2 => "BYTE_2",
        SdwaSel::Byte3 => "BYTE_3",
        SdwaSel::Word0 => "WORD_0",
        SdwaSel::Word1 => "WORD_1",
        SdwaSel::Dword => "DWORD",
    }
}

fn omod_text(omod: u8) -> Option<&'static str> {
    match omod {
        1 => Some("mul:2"),
        2 => Some("mul:4"),
        3 => Some("div:2"),
        _ => None,
    }
}

fn bits_list(v: u8, n: usize) -> String {
    let items: Vec<String> = (0..n).map(|i| ((v >> i) & 1).to_string()).collect();
    format!("[{}]", items.join(","))
}

/// gfx9 `s_waitcnt` fields (Vega ISA 4.4): vmcnt [3:0] and [15:14],
/// expcnt [6:4], lgkmcnt [11:8]; LLVM prints those below their maximum.
fn waitcnt(simm: u16) -> String {
    let vm = (simm & 0xf) | ((simm >> 10) & 0x30);
    let exp = (simm >> 4) & 7;
    let lgkm = (simm >> 8) & 0xf;
    let mut parts = Vec::new();
    if vm != 63 {
        parts.push(format!("vmcnt({vm})"));
    }
    if exp != 7 {
        parts.push(format!("expcnt({exp})"));
    }
    if lgkm != 15 {
        parts.push(format!("lgkmcnt({lgkm})"));
    }
    if parts.is_empty() {
        return format!("vmcnt({vm}) expcnt({exp}) lgkmcnt({lgkm})");
    }
    parts.join(" ")
}

/// `hwreg(id, offset, size)` (Vega ISA 12.2 "S_GETREG_B32").
fn hwreg(simm: u16) -> String {
    let id = simm & 0x3f;
    let offset = (simm >> 6) & 0x1f;
    let size = ((simm >> 11) & 0x1f) + 1;
    let name = match id {
        1 => Some("HW_REG_MODE"),
        2 => Some("HW_REG_STATUS"),
        3 => Some("HW_REG_TRAPSTS"),
        4 => Some("HW_REG_HW_ID"),
        5 => Some("HW_REG_GPR_ALLOC"),
        6 => Some("HW_REG_LDS_ALLOC"),
        7 => Some("HW_REG_IB_STS"),
        15 => Some("HW_REG_SH_MEM_BASES"),
        16 => Some("HW_REG_TBA_LO"),
        17 => Some("HW_REG_TBA_HI"),
        18 => Some("HW_REG_TMA_LO"),
        19 => Some("HW_REG_TMA_HI"),
        _ => None,
    };
    let id = name.map_or_else(|| id.to_string(), str::to_string);
    if offset == 0 && size == 32 {
        format!("hwreg({id})")
    } else {
        format!("hwreg({id}, {offset}, {size})")
    }
}

fn gpr_idx(mode: u16) -> String {
    let names = ["SRC0", "SRC1", "SRC2", "DST"];
    let on: Vec<&str> = (0..4)
        .filter(|i| mode >> i & 1 != 0)
        .map(|i| names[i])
        .collect();
    format!("gpr_idx({})", on.join(","))
}

fn sendmsg(simm: u16) -> String {
    let id = simm & 0xf;
    let op = (simm >> 4) & 7;
    match id {
        1 => "sendmsg(MSG_INTERRUPT)".to_string(),
        _ => format!("sendmsg({id}, {op}, {})", (simm >> 8) & 3),
    }
}

fn dpp_ctrl(ctrl: u16) -> String {
    match ctrl {
        0x000..=0x0ff => format!(
            "quad_perm:[{},{},{},{}]",
            ctrl & 3,
            (ctrl >> 2) & 3,
            (ctrl >> 4) & 3,
            (ctrl >> 6) & 3
        ),
        0x101..=0x10f => format!("row_shl:{}", ctrl & 0xf),
        0x111..=0x11f => format!("row_shr:{}", ctrl & 0xf),
        0x121..=0x12f => format!("row_ror:{}", ctrl & 0xf),
        0x130 => "wave_shl:1".into(),
        0x134 => "wave_rol:1".into(),
        0x138 => "wave_shr:1".into(),
        0x13c => "wave_ror:1".into(),
        0x140 => "row_mirror".into(),
        0x141 => "row_half_mirror".into(),
        0x142 => "row_bcast:15".into(),
        0x143 => "row_bcast:31".into(),
        0x150..=0x15f => format!("row_newbcast:{}", ctrl & 0xf),
        other => format!("dpp_ctrl:{other:#x}"),
    }
}

fn cache_bits(line: &mut Line<'_, '_>, c: CachePolicy, sc: bool) -> fmt::Result {
    if sc {
        if c.glc_sc0 {
            line.tail("sc0")?;
        }
        if c.scc_sc1 {
            line.tail("sc1")?;
        }
        if c.slc_nt {
            line.tail("nt")?;
        }
    } else {
        if c.glc_sc0 {
            line.tail("glc")?;
        }
        if c.slc_nt {
            line.tail("slc")?;
        }
        if c.scc_sc1 {
            line.tail("scc")?;
        }
    }
    Ok(())
}

impl Display for Instruction {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Instruction::Sop2(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                for s in i.op.slots {
                    match *s {
                        Slot::Sdst(_) => l.opt(i.sdst)?,
                        Slot::Ssrc0(t) => l.op(Src(i.ssrc0, t))?,
                        Slot::Ssrc1(t) => l.op(Src(i.ssrc1, t))?,
                        _ => {}
                    }
                }
                Ok(())
            }
            Instruction::Sopk(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                for s in i.op.slots {
                    match *s {
                        Slot::Sdst(_) => l.opt(i.sdst)?,
                        Slot::Simm16Hex => l.op(format_args!("0x{:x}", i.simm16))?,
                        Slot::Label | Slot::Simm16Dec => l.op(i.simm16)?,
                        Slot::Hwreg => l.op(hwreg(i.simm16))?,
                        Slot::Literal => l.op(format_args!("0x{:x}", i.literal.unwrap_or(0)))?,
                        _ => {}
                    }
                }
                Ok(())
            }
            Instruction::Sop1(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                for s in i.op.slots {
                    match *s {
                        Slot::Sdst(_) => l.opt(i.sdst)?,
                        Slot::Ssrc0(t) => l.opt(i.ssrc0.map(|o| Src(o, t)))?,
                        _ => {}
                    }
                }
                Ok(())
            }
            Instruction::Sopc(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                for s in i.op.slots {
                    match *s {
                        Slot::Ssrc0(t) => l.op(Src(i.ssrc0, t))?,
                        Slot::Ssrc1(t) => l.op(Src(i.ssrc1, t))?,
                        Slot::GprIdxMode => match i.ssrc1 {
                            Operand::Int(m) => l.op(gpr_idx(m as u16))?,
                            other => l.op(other)?,
                        },
                        _ => {}
                    }
                }
                Ok(())
            }
            Instruction::Sopp(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                for s in i.op.slots {
                    match *s {
                        // LLVM writes s_endpgm's immediate only when set.
                        Slot::Simm16Dec if i.op.name() == "s_endpgm" && i.simm16 == 0 => {}
                        Slot::Simm16Dec | Slot::Label => l.op(i.simm16)?,
                        Slot::Waitcnt => l.op(waitcnt(i.simm16))?,
                        Slot::Sendmsg => l.op(sendmsg(i.simm16))?,
                        Slot::GprIdxMode => l.op(gpr_idx(i.simm16))?,
                        _ => {}
                    }
                }
                Ok(())
            }
            Instruction::Smem(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                for s in i.op.slots {
                    match *s {
                        Slot::Sdata(_) | Slot::SdataImm => l.opt(i.sdata)?,
                        Slot::Sbase(_) => l.opt(i.sbase)?,
                        Slot::SmemOffset => match i.offset {
                            SmemOffset::Imm(v) => l.op(format_args!("0x{v:x}"))?,
                            SmemOffset::Sgpr(o) => l.op(o)?,
                        },
                        _ => {}
                    }
                }
                if i.glc {
                    l.tail("glc")?;
                }
                Ok(())
            }
            Instruction::Vop1(i) => {
                let sfx = ext_suffix(&i.ext, i.op.suffix);
                let mut l = Line::start(f, i.op.name(), sfx)?;
                let (m0, _) = ext_mods(&i.ext);
                for s in i.op.slots {
                    match *s {
                        Slot::Vdst(_) | Slot::Adst(_) | Slot::Sdst(_) => l.opt(i.vdst)?,
                        Slot::Src0(t) => l.opt(i.src0.map(|o| Modded(o, t, m0)))?,
                        Slot::Asrc0 => l.opt(i.src0)?,
                        _ => {}
                    }
                }
                ext_tail(&mut l, &i.ext, 1, false)
            }
            Instruction::Vop2(i) => {
                let sfx = ext_suffix(&i.ext, i.op.suffix);
                let mut l = Line::start(f, i.op.name(), sfx)?;
                let (m0, m1) = ext_mods(&i.ext);
                for s in i.op.slots {
                    match *s {
                        Slot::Vdst(_) => l.op(i.vdst)?,
                        Slot::Vcc => l.op("vcc")?,
                        Slot::Src0(t) => l.op(Modded(i.src0, t, m0))?,
                        Slot::Vsrc1(t) => l.op(Modded(i.vsrc1, t, m1))?,
                        Slot::K(_) => l.op(format_args!("0x{:x}", i.k.unwrap_or(0)))?,
                        _ => {}
                    }
                }
                ext_tail(&mut l, &i.ext, 2, false)
            }
            Instruction::Vopc(i) => {
                let sfx = ext_suffix(&i.ext, i.op.suffix);
                let mut l = Line::start(f, i.op.name(), sfx)?;
                let (m0, m1) = ext_mods(&i.ext);
                for s in i.op.slots {
                    match *s {
                        Slot::Vcc => match &i.ext {
                            VopExt::Sdwa(Sdwa { sdst: Some(d), .. }) => l.op(d)?,
                            _ => l.op("vcc")?,
                        },
                        Slot::Src0(t) => l.op(Modded(i.src0, t, m0))?,
                        Slot::Vsrc1(t) => l.op(Modded(i.vsrc1, t, m1))?,
                        _ => {}
                    }
                }
                ext_tail(&mut l, &i.ext, 2, true)
            }
            Instruction::Vop3(i) => {
                let mut l = Line::start(f, i.op.name(), suffix_text(i.op.suffix))?;
                let mut nsrc = 0;
                for s in i.op.slots {
                    match *s {
                        Slot::Vdst(_) | Slot::Sdst(_) => l.opt(i.vdst)?,
                        Slot::SdstCarry => l.opt(i.sdst)?,
                        Slot::Src0(t) => {
                            nsrc += 1;
                            l.opt(i.src[0].map(|o| Modded(o, t, i.mods[0])))?
                        }
                        Slot::Src1(t) => {
                            nsrc += 1;
                            l.opt(i.src[1].map(|o| Modded(o, t, i.mods[1])))?
                        }
                        Slot::Src2(t) => {
                            nsrc += 1;
                            l.opt(i.src[2].map(|o| Modded(o, t, i.mods[2])))?
                        }
                        _ => {}
                    }
                }
                if i.op_sel != 0 {
                    let mut v = i.op_sel & ((1 << nsrc) - 1);
                    v |= (i.op_sel >> 3 & 1) << nsrc;
                    l.tail(format_args!("op_sel:{}", bits_list(v, nsrc + 1)))?;
                }
                if i.clamp {
                    l.tail("clamp")?;
                }
                if let Some(o) = omod_text(i.omod) {
                    l.tail(o)?;
                }
                Ok(())
            }
            Instruction::Vop3p(i) => fmt_vop3p(f, i),
            Instruction::Ds(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                for s in i.op.slots {
                    match *s {
                        Slot::Vdst(_) => l.opt(i.vdst)?,
                        Slot::Addr => l.opt(i.addr)?,
                        Slot::Data0(_) => l.opt(i.data0)?,
                        Slot::Data1(_) => l.opt(i.data1)?,
                        _ => {}
                    }
                }
                let name = i.op.name();
                let two = name.contains("2_") || name.contains("2st64");
                if two {
                    if i.offset0 != 0 {
                        l.tail(format_args!("offset0:{}", i.offset0))?;
                    }
                    if i.offset1 != 0 {
                        l.tail(format_args!("offset1:{}", i.offset1))?;
                    }
                } else {
                    let offset = i.offset0 as u16 | (i.offset1 as u16) << 8;
                    if name == "ds_swizzle_b32" {
                        l.tail(format_args!("offset:{}", swizzle(offset)))?;
                    } else if offset != 0 {
                        l.tail(format_args!("offset:{offset}"))?;
                    }
                }
                if i.gds {
                    l.tail("gds")?;
                }
                Ok(())
            }
            Instruction::Flat(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                if i.vdst.is_some() && !i.op.has(|s| matches!(s, Slot::Vdst(_))) {
                    l.opt(i.vdst)?;
                }
                for s in i.op.slots {
                    match *s {
                        Slot::Vdst(_) => l.opt(i.vdst)?,
                        Slot::Vaddr => l.op(i.vaddr)?,
                        Slot::Data0(_) => l.opt(i.data)?,
                        Slot::Saddr => l.opt(i.saddr)?,
                        _ => {}
                    }
                }
                if i.offset != 0 {
                    l.tail(format_args!("offset:{}", i.offset))?;
                }
                cache_bits(&mut l, i.cache, sc_bits(i.op))?;
                if i.lds {
                    l.tail("lds")?;
                }
                Ok(())
            }
            Instruction::Mubuf(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                for s in i.op.slots {
                    match *s {
                        Slot::Vdata(_) => l.opt(i.vdata)?,
                        Slot::Vaddr => l.op(i.vaddr.unwrap_or(Operand::Off))?,
                        Slot::Srsrc => l.opt(i.srsrc)?,
                        Slot::Soffset => l.opt(i.soffset.map(|o| Src(o, Ty::B32)))?,
                        _ => {}
                    }
                }
                if i.idxen {
                    l.tail("idxen")?;
                }
                if i.offen {
                    l.tail("offen")?;
                }
                if i.offset != 0 {
                    l.tail(format_args!("offset:{}", i.offset))?;
                }
                cache_bits(&mut l, i.cache, sc_bits(i.op))?;
                if i.lds {
                    l.tail("lds")?;
                }
                Ok(())
            }
            Instruction::Mimg(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                l.op(i.vdata)?;
                l.op(i.vaddr)?;
                l.op(i.srsrc)?;
                l.tail(format_args!("dmask:0x{:x}", i.dmask))?;
                for (on, text) in [
                    (i.unorm, "unorm"),
                    (i.glc, "glc"),
                    (i.slc, "slc"),
                    (i.r128, "r128"),
                    (i.tfe, "tfe"),
                    (i.lwe, "lwe"),
                    (i.da, "da"),
                    (i.d16, "d16"),
                ] {
                    if on {
                        l.tail(text)?;
                    }
                }
                Ok(())
            }
            Instruction::Mtbuf(i) => {
                let mut l = Line::start(f, i.op.name(), "")?;
                l.op(i.vdata)?;
                l.op(i.vaddr.unwrap_or(Operand::Off))?;
                l.op(i.srsrc)?;
                l.op(Src(i.soffset, Ty::B32))?;
                l.tail(format_args!("format:[{},{}]", i.dfmt, i.nfmt))?;
                if i.idxen {
                    l.tail("idxen")?;
                }
                if i.offen {
                    l.tail("offen")?;
                }
                if i.offset != 0 {
                    l.tail(format_args!("offset:{}", i.offset))?;
                }
                cache_bits(&mut l, i.cache, false)
            }
        }
    }
}

/// gfx940 rows exist only on gfx940; their cache bits print as SC0/SC1/NT.
fn sc_bits(op: &crate::opcodes::OpDesc) -> bool {
    op.targets == crate::target::Targets::GFX940
}

/// The `ds_swizzle_b32` offset (Vega ISA 12.13 "DS_SWIZZLE_B32").
fn swizzle(offset: u16) -> String {
    if offset & 0x8000 != 0 {
        return format!(
            "swizzle(QUAD_PERM,{},{},{},{})",
            offset & 3,
            (offset >> 2) & 3,
            (offset >> 4) & 3,
            (offset >> 6) & 3
        );
    }
    let and = offset & 0x1f;
    let or = (offset >> 5) & 0x1f;
    let xor = (offset >> 10) & 0x1f;
    let mut mask = String::new();
    for b in (0..5).rev() {
        let c = match ((and >> b) & 1, (or >> b) & 1, (xor >> b) & 1) {
            (0, 0, _) => '0',
            (0, 1, _) => '1',
            (1, _, 0) => 'p',
            _ => 'i',
        };
        mask.push(c);
    }
    format!("swizzle(BITMASK_PERM,\"{mask}\")")
}

fn ext_suffix(ext: &VopExt, s: Suffix) -> &'static str {
    match ext {
        VopExt::None => suffix_text(s),
        VopExt::Sdwa(_) => "_sdwa",
        VopExt::Dpp(_) => "_dpp",
    }
}

fn ext_mods(ext: &VopExt) -> (SrcMods, SrcMods) {
    match ext {
        VopExt::None => (SrcMods::default(), SrcMods::default()),
        VopExt::Sdwa(s) => (s.src0_mods, s.src1_mods),
        VopExt::Dpp(d) => (d.src0_mods, d.src1_mods),
    }
}

fn ext_tail(l: &mut Line<'_, '_>, ext: &VopExt, nsrc: usize, vopc: bool) -> fmt::Result {
    match ext {
        VopExt::None => Ok(()),
        VopExt::Sdwa(s) => {
            if s.clamp {
                l.tail("clamp")?;
            }
            if let Some(o) = omod_text(s.omod) {
                l.tail(o)?;
            }
            if !vopc {
                l.tail(format_args!("dst_sel:{}", sel_text(s.dst_sel)))?;
                let unused = match s.dst_unused {
                    DstUnused::Pad => "UNUSED_PAD",
                    DstUnused::Sext => "UNUSED_SEXT",
                    DstUnused::Preserve => "UNUSED_PRESERVE",
                };
                l.tail(format_args!("dst_unused:{unused}"))?;
            }
            l.tail(format_args!("src0_sel:{}", sel_text(s.src0_sel)))?;
            if nsrc > 1 {
                l.tail(format_args!("src1_sel:{}", sel_text(s.src1_sel)))?;
            }
            Ok(())
        }
        VopExt::Dpp(d) => {
            l.tail(dpp_ctrl(d.ctrl))?;
            l.tail(format_args!("row_mask:0x{:x}", d.row_mask))?;
            l.tail(format_args!("bank_mask:0x{:x}", d.bank_mask))?;
            if d.bound_ctrl {
                l.tail("bound_ctrl:1")?;
            }
            Ok(())
        }
    }
}

fn fmt_vop3p(f: &mut Formatter<'_>, i: &Vop3p) -> fmt::Result {
    let name = i.op.name();
    let mix = name.contains("_mix");
    let mut l = Line::start(f, name, "")?;
    let mut nsrc = 0;
    for s in i.op.slots {
        let (k, t) = match *s {
            Slot::Vdst(_) | Slot::Adst(_) => {
                l.op(i.vdst)?;
                continue;
            }
            Slot::Src0(t) => (0, t),
            Slot::Asrc0 => (0, Ty::B32),
            Slot::Src1(t) => (1, t),
            Slot::Src2(t) => (2, t),
            _ => continue,
        };
        nsrc += 1;
        let mods = if mix {
            SrcMods {
                neg: i.neg_lo >> k & 1 != 0,
                abs: i.neg_hi >> k & 1 != 0,
                sext: false,
            }
        } else {
            SrcMods::default()
        };
        l.opt(i.src[k].map(|o| Modded(o, t, mods)))?;
    }
    if let Some(m) = i.mai {
        if m.cbsz != 0 {
            l.tail(format_args!("cbsz:{}", m.cbsz))?;
        }
        if m.abid != 0 {
            l.tail(format_args!("abid:{}", m.abid))?;
        }
        if m.blgp != 0 {
            l.tail(format_args!("blgp:{}", m.blgp))?;
        }
        return Ok(());
    }
    if name.starts_with("v_accvgpr") {
        return Ok(());
    }
    let mask = (1u8 << nsrc) - 1;
    if i.op_sel & mask != 0 {
        l.tail(format_args!("op_sel:{}", bits_list(i.op_sel, nsrc)))?;
    }
    let default_hi = if mix { 0 } else { mask };
    if i.op_sel_hi & mask != default_hi {
        l.tail(format_args!("op_sel_hi:{}", bits_list(i.op_sel_hi, nsrc)))?;
    }
    if !mix {
        if i.neg_lo & mask != 0 {
            l.tail(format_args!("neg_lo:{}", bits_list(i.neg_lo, nsrc)))?;
        }
        if i.neg_hi & mask != 0 {
            l.tail(format_args!("neg_hi:{}", bits_list(i.neg_hi, nsrc)))?;
        }
    }
    if i.clamp {
        l.tail("clamp")?;
    }
    Ok(())
}
