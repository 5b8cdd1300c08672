//! Decoding: instruction bytes to a typed [`Instruction`] and its length.
//!
//! The encoding of each format is that of AMD's Vega ISA guide, chapter 12
//! ("Microcode Formats"), with the gfx90a changes of the MI200 ISA guide
//! (ACC bits in DS, FLAT, MUBUF and VOP3P-MAI; SCC cache bit) and LLVM's
//! `SIInstrFormats.td` / `*Instructions.td` encodings. Decoding never
//! panics: every read is bounds-checked, every field is masked.

use crate::inst::*;
use crate::opcodes::{lookup, Format, OpDesc, Slot, Ty};
use crate::operand::{Operand, DPP, LITERAL, SDWA};
use crate::target::Target;

/// Why bytes are not an instruction the decoder knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes end inside the instruction.
    #[error("instruction needs {need} bytes, {have} left")]
    Truncated {
        /// Bytes the instruction needs.
        need: usize,
        /// Bytes there were.
        have: usize,
    },
    /// The format has no such opcode on this target.
    #[error("{format} opcode {code:#x} does not exist on {target}")]
    UnknownOpcode {
        /// The format's name.
        format: &'static str,
        /// The opcode field.
        code: u16,
        /// The target decoded for.
        target: Target,
    },
    /// An encoding the decoder does not take (EXP, VINTRP).
    #[error("{format} instructions are not decoded (word {word:#010x})")]
    UnsupportedFormat {
        /// The format's name.
        format: &'static str,
        /// The first instruction word.
        word: u32,
    },
    /// An operand field holds a code with no meaning there.
    #[error("{mnemonic}: operand code {code} is reserved or not allowed there")]
    BadOperand {
        /// The instruction's mnemonic.
        mnemonic: &'static str,
        /// The field's value.
        code: u16,
    },
    /// A register tuple runs past the register file.
    #[error("{mnemonic}: register tuple at {first} of {count} runs past the register file")]
    RegisterOutOfRange {
        /// The instruction's mnemonic.
        mnemonic: &'static str,
        /// First register.
        first: u16,
        /// Tuple length.
        count: u8,
    },
    /// A DPP control value with no meaning on this target.
    #[error("{mnemonic}: dpp_ctrl {ctrl:#x} is reserved")]
    BadDppCtrl {
        /// The instruction's mnemonic.
        mnemonic: &'static str,
        /// The DPP_CTRL field.
        ctrl: u16,
    },
    /// SDWA or DPP on an opcode that has no such form.
    #[error("{mnemonic} has no {form} form")]
    NoSuchForm {
        /// The instruction's mnemonic.
        mnemonic: &'static str,
        /// "SDWA" or "DPP".
        form: &'static str,
    },
}

struct Words<'a> {
    bytes: &'a [u8],
}

impl Words<'_> {
    fn word(&self, i: usize) -> Result<u32, DecodeError> {
        let need = (i + 1) * 4;
        match self.bytes.get(i * 4..need) {
            Some(&[a, b, c, d]) => Ok(u32::from_le_bytes([a, b, c, d])),
            _ => Err(DecodeError::Truncated {
                need,
                have: self.bytes.len(),
            }),
        }
    }
}

const fn bits(w: u32, lo: u32, len: u32) -> u32 {
    (w >> lo) & ((1 << len) - 1)
}

const fn bit(w: u32, b: u32) -> bool {
    (w >> b) & 1 != 0
}

/// Decodes the instruction at the start of `bytes` (little-endian, as in a
/// code object's `.text`) for `target`.
pub fn decode(target: Target, bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let w = Words { bytes };
    let w0 = w.word(0)?;
    let d = Decoder { target, w, w0 };
    match w0 >> 25 {
        0x3f => return d.vop1(),
        0x3e => return d.vopc(),
        0x00..=0x3d => return d.vop2(),
        _ => {}
    }
    match w0 >> 23 {
        0b1_0111_1101 => return d.sop1(),
        0b1_0111_1110 => return d.sopc(),
        0b1_0111_1111 => return d.sopp(),
        0b1_1010_0111 => return d.vop3p(),
        _ => {}
    }
    if w0 >> 28 == 0b1011 {
        return d.sopk();
    }
    if w0 >> 30 == 0b10 {
        return d.sop2();
    }
    match w0 >> 26 {
        0b110000 => d.smem(),
        0b110100 => d.vop3(),
        0b110110 => d.ds(),
        0b110111 => d.flat(),
        0b111000 => d.mubuf(),
        0b111010 => d.mtbuf(),
        0b110001 => Err(DecodeError::UnsupportedFormat {
            format: "EXP",
            word: w0,
        }),
        0b111100 => d.mimg(),
        0b110101 => Err(DecodeError::UnsupportedFormat {
            format: "VINTRP",
            word: w0,
        }),
        _ => Err(DecodeError::UnsupportedFormat {
            format: "reserved",
            word: w0,
        }),
    }
}

struct Decoder<'a> {
    target: Target,
    w: Words<'a>,
    w0: u32,
}

/// The first slot matching `f`, mapped.
fn slot<T>(op: &OpDesc, f: impl Fn(&Slot) -> Option<T>) -> Option<T> {
    op.slots.iter().find_map(f)
}

impl Decoder<'_> {
    fn row(&self, format: Format, code: u32) -> Result<&'static OpDesc, DecodeError> {
        lookup(format, self.target, code as u16).ok_or(DecodeError::UnknownOpcode {
            format: format.name(),
            code: code as u16,
            target: self.target,
        })
    }

    fn done(&self, inst: Instruction, len: usize) -> Result<Decoded, DecodeError> {
        Ok(Decoded { inst, len })
    }

    /// A scalar or any-source operand; a literal reads the dword at
    /// `lit_index`, which makes the instruction one dword longer.
    fn src(
        &self,
        op: &'static OpDesc,
        code: u32,
        ty: Ty,
        lit_index: Option<usize>,
        len: &mut usize,
    ) -> Result<Operand, DecodeError> {
        let code = code as u16;
        let mut literal = 0;
        if code == LITERAL {
            let Some(i) = lit_index else {
                return Err(DecodeError::BadOperand {
                    mnemonic: op.name(),
                    code,
                });
            };
            literal = self.w.word(i)?;
            *len = (i + 1) * 4;
        }
        let operand = Operand::scalar(code, ty.dwords(), literal);
        self.check(op, operand, code)
    }

    fn check(
        &self,
        op: &'static OpDesc,
        operand: Operand,
        code: u16,
    ) -> Result<Operand, DecodeError> {
        match operand {
            Operand::Reserved(_) => Err(DecodeError::BadOperand {
                mnemonic: op.name(),
                code,
            }),
            Operand::Sgpr(r) if r.first as u32 + r.count as u32 > 102 && r.count > 1 => {
                Err(DecodeError::RegisterOutOfRange {
                    mnemonic: op.name(),
                    first: r.first,
                    count: r.count,
                })
            }
            Operand::Ttmp(r) if r.first as u32 + r.count as u32 > 16 => {
                Err(DecodeError::RegisterOutOfRange {
                    mnemonic: op.name(),
                    first: r.first,
                    count: r.count,
                })
            }
            Operand::Vgpr(r) | Operand::Agpr(r) if r.first as u32 + r.count as u32 > 256 => {
                Err(DecodeError::RegisterOutOfRange {
                    mnemonic: op.name(),
                    first: r.first,
                    count: r.count,
                })
            }
            other => Ok(other),
        }
    }

    fn sdst(&self, op: &'static OpDesc, code: u32, count: u8) -> Result<Operand, DecodeError> {
        self.check(op, Operand::scalar(code as u16, count, 0), code as u16)
            .and_then(|o| match o {
                Operand::Int(_) | Operand::Float(_) | Operand::Literal(_) => {
                    Err(DecodeError::BadOperand {
                        mnemonic: op.name(),
                        code: code as u16,
                    })
                }
                o => Ok(o),
            })
    }

    fn vreg(
        &self,
        op: &'static OpDesc,
        reg: u32,
        count: u8,
        acc: bool,
    ) -> Result<Operand, DecodeError> {
        self.check(op, Operand::vector(reg as u16, count, acc), reg as u16)
    }

    fn sop2(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let op = self.row(Format::Sop2, bits(w0, 23, 7))?;
        let mut len = 4;
        let ty0 = slot(op, |s| match s {
            Slot::Ssrc0(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(Ty::B32);
        let ty1 = slot(op, |s| match s {
            Slot::Ssrc1(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(Ty::B32);
        let ssrc0 = self.src(op, bits(w0, 0, 8), ty0, Some(1), &mut len)?;
        let ssrc1 = self.src(op, bits(w0, 8, 8), ty1, Some(1), &mut len)?;
        let sdst = match slot(op, |s| match s {
            Slot::Sdst(n) => Some(*n),
            _ => None,
        }) {
            Some(n) => Some(self.sdst(op, bits(w0, 16, 7), n)?),
            None => None,
        };
        self.done(
            Instruction::Sop2(Sop2 {
                op,
                sdst,
                ssrc0,
                ssrc1,
            }),
            len,
        )
    }

    fn sopk(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let op = self.row(Format::Sopk, bits(w0, 23, 5))?;
        let mut len = 4;
        let sdst = match slot(op, |s| match s {
            Slot::Sdst(n) => Some(*n),
            _ => None,
        }) {
            Some(n) => Some(self.sdst(op, bits(w0, 16, 7), n)?),
            None => None,
        };
        let literal = if op.has(|s| matches!(s, Slot::Literal)) {
            len = 8;
            Some(self.w.word(1)?)
        } else {
            None
        };
        self.done(
            Instruction::Sopk(Sopk {
                op,
                sdst,
                simm16: bits(w0, 0, 16) as u16,
                literal,
            }),
            len,
        )
    }

    fn sop1(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let op = self.row(Format::Sop1, bits(w0, 8, 8))?;
        let mut len = 4;
        let ssrc0 = match slot(op, |s| match s {
            Slot::Ssrc0(t) => Some(*t),
            _ => None,
        }) {
            Some(t) => Some(self.src(op, bits(w0, 0, 8), t, Some(1), &mut len)?),
            None => None,
        };
        let sdst = match slot(op, |s| match s {
            Slot::Sdst(n) => Some(*n),
            _ => None,
        }) {
            Some(n) => Some(self.sdst(op, bits(w0, 16, 7), n)?),
            None => None,
        };
        self.done(Instruction::Sop1(Sop1 { op, sdst, ssrc0 }), len)
    }

    fn sopc(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let op = self.row(Format::Sopc, bits(w0, 16, 7))?;
        let mut len = 4;
        let ty0 = slot(op, |s| match s {
            Slot::Ssrc0(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(Ty::B32);
        let ssrc0 = self.src(op, bits(w0, 0, 8), ty0, Some(1), &mut len)?;
        let ssrc1 = match slot(op, |s| match s {
            Slot::Ssrc1(t) => Some(*t),
            _ => None,
        }) {
            Some(t) => self.src(op, bits(w0, 8, 8), t, Some(1), &mut len)?,
            None => Operand::Int(bits(w0, 8, 4) as i8),
        };
        self.done(Instruction::Sopc(Sopc { op, ssrc0, ssrc1 }), len)
    }

    fn sopp(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let op = self.row(Format::Sopp, bits(w0, 16, 7))?;
        self.done(
            Instruction::Sopp(Sopp {
                op,
                simm16: bits(w0, 0, 16) as u16,
            }),
            4,
        )
    }

    fn smem(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let w1 = self.w.word(1)?;
        let op = self.row(Format::Smem, bits(w0, 18, 8))?;
        let sdata = match slot(op, |s| match s {
            Slot::Sdata(n) => Some(*n),
            _ => None,
        }) {
            Some(n) => Some(self.sdst(op, bits(w0, 6, 7), n)?),
            None if op.has(|s| matches!(s, Slot::SdataImm)) => {
                Some(Operand::Int(bits(w0, 6, 7) as i8))
            }
            None => None,
        };
        let sbase = match slot(op, |s| match s {
            Slot::Sbase(n) => Some(*n),
            _ => None,
        }) {
            Some(n) => Some(self.sdst(op, bits(w0, 0, 6) << 1, n)?),
            None => None,
        };
        // Vega ISA 12.6: IMM selects OFFSET as a byte offset; otherwise
        // OFFSET[6:0] names the SGPR holding it. SOE (SGPR offset enable)
        // with IMM adds SOFFSET, which compiled code does not use.
        let offset = if bit(w0, 17) {
            SmemOffset::Imm(bits(w1, 0, 21))
        } else {
            SmemOffset::Sgpr(self.sdst(op, bits(w1, 0, 7), 1)?)
        };
        self.done(
            Instruction::Smem(Smem {
                op,
                sdata,
                sbase,
                offset,
                glc: bit(w0, 16),
            }),
            8,
        )
    }

    fn vop_ext(
        &self,
        op: &'static OpDesc,
        code: u16,
        vopc: bool,
    ) -> Result<(VopExt, Option<u32>), DecodeError> {
        match code {
            SDWA => {
                let w1 = self.w.word(1)?;
                let sel = |v: u32| match v {
                    0 => SdwaSel::Byte0,
                    1 => SdwaSel::Byte1,
                    2 => SdwaSel::Byte2,
                    3 => SdwaSel::Byte3,
                    4 => SdwaSel::Word0,
                    5 => SdwaSel::Word1,
                    _ => SdwaSel::Dword,
                };
                let mods = |lo: u32| SrcMods {
                    sext: bit(w1, lo),
                    neg: bit(w1, lo + 1),
                    abs: bit(w1, lo + 2),
                };
                let sdst = if vopc && bit(w1, 15) {
                    Some(self.sdst(op, bits(w1, 8, 7), 2)?)
                } else {
                    None
                };
                let (dst_sel, dst_unused, clamp, omod) = if vopc {
                    (SdwaSel::Dword, DstUnused::Pad, false, 0)
                } else {
                    let unused = match bits(w1, 11, 2) {
                        0 => DstUnused::Pad,
                        1 => DstUnused::Sext,
                        _ => DstUnused::Preserve,
                    };
                    (
                        sel(bits(w1, 8, 3)),
                        unused,
                        bit(w1, 13),
                        bits(w1, 14, 2) as u8,
                    )
                };
                Ok((
                    VopExt::Sdwa(Sdwa {
                        dst_sel,
                        dst_unused,
                        clamp,
                        omod,
                        src0_sel: sel(bits(w1, 16, 3)),
                        src0_mods: mods(19),
                        src1_sel: sel(bits(w1, 24, 3)),
                        src1_mods: mods(27),
                        sdst,
                    }),
                    Some(w1),
                ))
            }
            DPP => {
                let w1 = self.w.word(1)?;
                let ctrl = bits(w1, 8, 9) as u16;
                let valid = match ctrl {
                    0x000..=0x0ff | 0x101..=0x10f | 0x111..=0x11f | 0x121..=0x12f => true,
                    0x130 | 0x134 | 0x138 | 0x13c | 0x140..=0x143 => true,
                    0x150..=0x15f => self.target.has_acc_bits(),
                    _ => false,
                };
                if !valid {
                    return Err(DecodeError::BadDppCtrl {
                        mnemonic: op.name(),
                        ctrl,
                    });
                }
                let mods = |lo: u32| SrcMods {
                    neg: bit(w1, lo),
                    abs: bit(w1, lo + 1),
                    sext: false,
                };
                Ok((
                    VopExt::Dpp(Dpp {
                        ctrl,
                        bound_ctrl: bit(w1, 19),
                        src0_mods: mods(20),
                        src1_mods: mods(22),
                        bank_mask: bits(w1, 24, 4) as u8,
                        row_mask: bits(w1, 28, 4) as u8,
                    }),
                    Some(w1),
                ))
            }
            _ => Ok((VopExt::None, None)),
        }
    }

    /// SRC0 of a 32-bit VALU encoding, given its extension.
    fn vop_src0(
        &self,
        op: &'static OpDesc,
        ext: &VopExt,
        w1: Option<u32>,
        ty: Ty,
        len: &mut usize,
    ) -> Result<Operand, DecodeError> {
        match (ext, w1) {
            (VopExt::Sdwa(_), Some(w1)) => {
                // gfx9 SDWA: S0 (bit 23) makes SRC0 an SGPR or constant.
                let code = bits(w1, 0, 8) + if bit(w1, 23) { 0 } else { 256 };
                let o = self.check(
                    op,
                    Operand::scalar(code as u16, ty.dwords(), 0),
                    code as u16,
                )?;
                if o.is_literal() {
                    return Err(DecodeError::BadOperand {
                        mnemonic: op.name(),
                        code: code as u16,
                    });
                }
                Ok(o)
            }
            (VopExt::Dpp(_), Some(w1)) => self.vreg(op, bits(w1, 0, 8), ty.dwords(), false),
            _ => self.src(op, bits(self.w0, 0, 9), ty, Some(1), len),
        }
    }

    fn ext_len(ext: &VopExt) -> usize {
        match ext {
            VopExt::None => 4,
            _ => 8,
        }
    }

    fn vop2(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let op = self.row(Format::Vop2, bits(w0, 25, 6))?;
        let (ext, w1) = self.vop_ext(op, bits(w0, 0, 9) as u16, false)?;
        let mut len = Self::ext_len(&ext);
        let ty0 = slot(op, |s| match s {
            Slot::Src0(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(Ty::B32);
        let ty1 = slot(op, |s| match s {
            Slot::Vsrc1(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(Ty::B32);
        let dw = slot(op, |s| match s {
            Slot::Vdst(n) => Some(*n),
            _ => None,
        })
        .unwrap_or(1);
        let src0 = self.vop_src0(op, &ext, w1, ty0, &mut len)?;
        let mut vsrc1 = self.vreg(op, bits(w0, 9, 8), ty1.dwords(), false)?;
        if let (VopExt::Sdwa(_), Some(w1)) = (&ext, w1) {
            if bit(w1, 31) {
                let code = bits(w0, 9, 8) as u16;
                vsrc1 = self.check(op, Operand::scalar(code, ty1.dwords(), 0), code)?;
            }
        }
        let vdst = self.vreg(op, bits(w0, 17, 8), dw, false)?;
        let k = if op.has(|s| matches!(s, Slot::K(_))) {
            if !matches!(ext, VopExt::None) {
                return Err(DecodeError::NoSuchForm {
                    mnemonic: op.name(),
                    form: "SDWA or DPP",
                });
            }
            len = len.max(4) + 4;
            Some(self.w.word(len / 4 - 1)?)
        } else {
            None
        };
        self.done(
            Instruction::Vop2(Vop2 {
                op,
                vdst,
                src0,
                vsrc1,
                k,
                ext,
            }),
            len,
        )
    }

    fn vop1(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let op = self.row(Format::Vop1, bits(w0, 9, 8))?;
        let (ext, w1) = self.vop_ext(op, bits(w0, 0, 9) as u16, false)?;
        let mut len = Self::ext_len(&ext);
        let src0 = if op.has(|s| matches!(s, Slot::Asrc0)) {
            Some(self.vreg(op, bits(w0, 0, 8), 1, true)?)
        } else {
            match slot(op, |s| match s {
                Slot::Src0(t) => Some(*t),
                _ => None,
            }) {
                Some(t) => Some(self.vop_src0(op, &ext, w1, t, &mut len)?),
                None => None,
            }
        };
        let vdst = slot(op, |s| match s {
            Slot::Vdst(n) => Some((*n, 0)),
            Slot::Adst(n) => Some((*n, 1)),
            Slot::Sdst(n) => Some((*n, 2)),
            _ => None,
        });
        let vdst = match vdst {
            Some((n, 0)) => Some(self.vreg(op, bits(w0, 17, 8), n, false)?),
            Some((n, 1)) => Some(self.vreg(op, bits(w0, 17, 8), n, true)?),
            Some((n, _)) => Some(self.sdst(op, bits(w0, 17, 8), n)?),
            None => None,
        };
        self.done(
            Instruction::Vop1(Vop1 {
                op,
                vdst,
                src0,
                ext,
            }),
            len,
        )
    }

    fn vopc(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let op = self.row(Format::Vopc, bits(w0, 17, 8))?;
        let (ext, w1) = self.vop_ext(op, bits(w0, 0, 9) as u16, true)?;
        let mut len = Self::ext_len(&ext);
        let ty0 = slot(op, |s| match s {
            Slot::Src0(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(Ty::B32);
        let ty1 = slot(op, |s| match s {
            Slot::Vsrc1(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(Ty::B32);
        let src0 = self.vop_src0(op, &ext, w1, ty0, &mut len)?;
        let mut vsrc1 = self.vreg(op, bits(w0, 9, 8), ty1.dwords(), false)?;
        if let (VopExt::Sdwa(_), Some(w1)) = (&ext, w1) {
            if bit(w1, 31) {
                let code = bits(w0, 9, 8) as u16;
                vsrc1 = self.check(op, Operand::scalar(code, ty1.dwords(), 0), code)?;
            }
        }
        self.done(
            Instruction::Vopc(Vopc {
                op,
                src0,
                vsrc1,
                ext,
            }),
            len,
        )
    }

    fn vop3(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let w1 = self.w.word(1)?;
        let op = self.row(Format::Vop3, bits(w0, 16, 10))?;
        let mut len = 8;
        let codes = [bits(w1, 0, 9), bits(w1, 9, 9), bits(w1, 18, 9)];
        let mut src = [None; 3];
        for s in op.slots {
            let (i, ty) = match *s {
                Slot::Src0(t) => (0, t),
                Slot::Src1(t) => (1, t),
                Slot::Src2(t) => (2, t),
                _ => continue,
            };
            // gfx9 VOP3 has no literal (Vega ISA 12.11: "literal constants
            // are not supported in VOP3").
            src[i] = Some(self.src(op, codes[i], ty, None, &mut len)?);
        }
        let vop3b = op.has(|s| matches!(s, Slot::SdstCarry));
        let vdst = slot(op, |s| match s {
            Slot::Vdst(n) => Some((*n, false)),
            Slot::Sdst(n) => Some((*n, true)),
            _ => None,
        });
        let vdst = match vdst {
            Some((n, false)) => Some(self.vreg(op, bits(w0, 0, 8), n, false)?),
            Some((n, true)) => Some(self.sdst(op, bits(w0, 0, 8), n)?),
            None => None,
        };
        let sdst = if vop3b {
            Some(self.sdst(op, bits(w0, 8, 7), 2)?)
        } else {
            None
        };
        let mut mods = [SrcMods::default(); 3];
        for (i, m) in mods.iter_mut().enumerate() {
            m.neg = bit(w1, 29 + i as u32);
            m.abs = !vop3b && bit(w0, 8 + i as u32);
        }
        let op_sel = if vop3b { 0 } else { bits(w0, 11, 4) as u8 };
        self.done(
            Instruction::Vop3(Vop3 {
                op,
                vdst,
                sdst,
                src,
                mods,
                op_sel,
                clamp: bit(w0, 15),
                omod: bits(w1, 27, 2) as u8,
            }),
            len,
        )
    }

    fn vop3p(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let w1 = self.w.word(1)?;
        let op = self.row(Format::Vop3p, bits(w0, 16, 7))?;
        let mut len = 8;
        let name = op.name();
        let is_mai = name.starts_with("v_mfma");
        let codes = [bits(w1, 0, 9), bits(w1, 9, 9), bits(w1, 18, 9)];
        let mut src = [None; 3];
        for s in op.slots {
            let (i, ty) = match *s {
                Slot::Src0(t) => (0, t),
                Slot::Src1(t) => (1, t),
                Slot::Src2(t) => (2, t),
                Slot::Asrc0 => (0, Ty::B32),
                _ => continue,
            };
            let mut o = self.src(op, codes[i], ty, None, &mut len)?;
            let acc = match *s {
                Slot::Asrc0 => true,
                // MI100 ISA: the ACC field (bits 59-60) makes SRCA/SRCB AGPRs;
                // MI200: ACC_CD (bit 15) does the same for SRCC and VDST.
                _ if is_mai && i < 2 => bit(w1, 27 + i as u32),
                _ if is_mai => bit(w0, 15) || self.target == Target::Gfx908,
                _ => false,
            };
            if acc {
                if let Operand::Vgpr(r) = o {
                    o = Operand::Agpr(r);
                }
            }
            src[i] = Some(o);
        }
        let (n, adst) = slot(op, |s| match s {
            Slot::Vdst(n) => Some((*n, false)),
            Slot::Adst(n) => Some((*n, true)),
            _ => None,
        })
        .unwrap_or((1, false));
        let acc_d = adst || (is_mai && (bit(w0, 15) || self.target == Target::Gfx908));
        let vdst = self.vreg(op, bits(w0, 0, 8), n, acc_d)?;
        let mai = is_mai.then(|| Mai {
            cbsz: bits(w0, 8, 3) as u8,
            abid: bits(w0, 11, 4) as u8,
            blgp: bits(w1, 29, 3) as u8,
        });
        self.done(
            Instruction::Vop3p(Vop3p {
                op,
                vdst,
                src,
                op_sel: bits(w0, 11, 3) as u8,
                op_sel_hi: (bits(w1, 27, 2) | (bits(w0, 14, 1) << 2)) as u8,
                neg_lo: bits(w1, 29, 3) as u8,
                neg_hi: bits(w0, 8, 3) as u8,
                clamp: !is_mai && bit(w0, 15),
                mai,
            }),
            len,
        )
    }

    fn ds(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let w1 = self.w.word(1)?;
        let op = self.row(Format::Ds, bits(w0, 17, 8))?;
        // MI200 ISA: bit 25 (ACC) makes VDST and DATA AGPRs.
        let acc = self.target.has_acc_bits() && bit(w0, 25);
        let mut vdst = None;
        let mut addr = None;
        let mut data0 = None;
        let mut data1 = None;
        for s in op.slots {
            match *s {
                Slot::Vdst(n) => vdst = Some(self.vreg(op, bits(w1, 24, 8), n, acc)?),
                Slot::Addr => addr = Some(self.vreg(op, bits(w1, 0, 8), 1, false)?),
                Slot::Data0(n) => data0 = Some(self.vreg(op, bits(w1, 8, 8), n, acc)?),
                Slot::Data1(n) => data1 = Some(self.vreg(op, bits(w1, 16, 8), n, acc)?),
                _ => {}
            }
        }
        self.done(
            Instruction::Ds(Ds {
                op,
                vdst,
                addr,
                data0,
                data1,
                offset0: bits(w0, 0, 8) as u8,
                offset1: bits(w0, 8, 8) as u8,
                gds: bit(w0, 16),
            }),
            8,
        )
    }

    fn cache(&self, glc: bool, slc: bool, scc: bool) -> CachePolicy {
        CachePolicy {
            glc_sc0: glc,
            slc_nt: slc,
            scc_sc1: scc && self.target.has_acc_bits(),
        }
    }

    fn flat(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let w1 = self.w.word(1)?;
        let (seg, format) = match bits(w0, 14, 2) {
            0 => (Segment::Flat, Format::Flat),
            1 => (Segment::Scratch, Format::Scratch),
            2 => (Segment::Global, Format::Global),
            _ => {
                return Err(DecodeError::UnsupportedFormat {
                    format: "FLAT segment 3",
                    word: w0,
                })
            }
        };
        let op = self.row(format, bits(w0, 18, 7))?;
        let acc = self.target.has_acc_bits() && bit(w1, 23);
        let saddr_code = bits(w1, 16, 7);
        let saddr = match seg {
            Segment::Flat => None,
            _ if saddr_code == 0x7f => Some(Operand::Off),
            _ => Some(self.sdst(op, saddr_code, if seg == Segment::Global { 2 } else { 1 })?),
        };
        let saddr_used = matches!(saddr, Some(o) if o != Operand::Off);
        let vaddr = match seg {
            Segment::Flat => self.vreg(op, bits(w1, 0, 8), 2, false)?,
            Segment::Global if saddr_used => self.vreg(op, bits(w1, 0, 8), 1, false)?,
            Segment::Global => self.vreg(op, bits(w1, 0, 8), 2, false)?,
            // gfx9 SCRATCH: with SADDR the address is SADDR + offset alone.
            Segment::Scratch if saddr_used => Operand::Off,
            Segment::Scratch => self.vreg(op, bits(w1, 0, 8), 1, false)?,
        };
        let mut vdst = None;
        let mut data = None;
        for s in op.slots {
            match *s {
                Slot::Vdst(n) => vdst = Some(self.vreg(op, bits(w1, 24, 8), n, acc)?),
                Slot::Data0(n) => data = Some(self.vreg(op, bits(w1, 8, 8), n, acc)?),
                _ => {}
            }
        }
        let glc = bit(w0, 16);
        // An atomic returns the old value only with GLC (SC0 on gfx940),
        // into VDST (Vega ISA 9.1.10).
        let atomic = op.name().contains("_atomic_");
        if atomic && glc {
            let n = data.and_then(|d| d.regs()).map_or(1, |r| {
                if op.name().contains("cmpswap") {
                    r.count / 2
                } else {
                    r.count
                }
            });
            vdst = Some(self.vreg(op, bits(w1, 24, 8), n, acc)?);
        }
        let offset = match seg {
            Segment::Flat => bits(w0, 0, 12) as i16,
            _ => ((bits(w0, 0, 13) << 3) as u16 as i16) >> 3,
        };
        self.done(
            Instruction::Flat(Flat {
                op,
                seg,
                vdst,
                vaddr,
                data,
                saddr,
                offset,
                cache: self.cache(glc, bit(w0, 17), bit(w0, 25)),
                lds: bit(w0, 13),
            }),
            8,
        )
    }

    fn buffer_addr(
        &self,
        op: &'static OpDesc,
        w1: u32,
        offen: bool,
        idxen: bool,
    ) -> Result<Option<Operand>, DecodeError> {
        let n = offen as u8 + idxen as u8;
        if n == 0 {
            return Ok(None);
        }
        self.vreg(op, bits(w1, 0, 8), n, false).map(Some)
    }

    fn mubuf(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let w1 = self.w.word(1)?;
        let op = self.row(Format::Mubuf, bits(w0, 18, 7))?;
        let acc = self.target.has_acc_bits() && bit(w1, 23);
        let offen = bit(w0, 12);
        let idxen = bit(w0, 13);
        let glc = bit(w0, 14);
        let has_ops = op.has(|s| matches!(s, Slot::Srsrc));
        let mut vdata = None;
        if let Some(n) = slot(op, |s| match s {
            Slot::Vdata(n) => Some(*n),
            _ => None,
        }) {
            vdata = Some(self.vreg(op, bits(w1, 8, 8), n, acc)?);
        }
        let (vaddr, srsrc, soffset) = if has_ops {
            (
                self.buffer_addr(op, w1, offen, idxen)?,
                Some(self.sdst(op, bits(w1, 16, 5) << 2, 4)?),
                Some(self.src(op, bits(w1, 24, 8), Ty::B32, None, &mut 8)?),
            )
        } else {
            (None, None, None)
        };
        self.done(
            Instruction::Mubuf(Mubuf {
                op,
                vdata,
                vaddr,
                srsrc,
                soffset,
                offset: bits(w0, 0, 12) as u16,
                offen,
                idxen,
                cache: self.cache(glc, bit(w0, 17), bit(w0, 15)),
                lds: bit(w0, 16),
            }),
            8,
        )
    }

    fn mtbuf(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let w1 = self.w.word(1)?;
        let op = self.row(Format::Mtbuf, bits(w0, 15, 4))?;
        let acc = self.target.has_acc_bits() && bit(w1, 23);
        let offen = bit(w0, 12);
        let idxen = bit(w0, 13);
        let n = slot(op, |s| match s {
            Slot::Vdata(n) => Some(*n),
            _ => None,
        })
        .unwrap_or(1);
        self.done(
            Instruction::Mtbuf(Mtbuf {
                op,
                vdata: self.vreg(op, bits(w1, 8, 8), n, acc)?,
                vaddr: self.buffer_addr(op, w1, offen, idxen)?,
                srsrc: self.sdst(op, bits(w1, 16, 5) << 2, 4)?,
                soffset: self.src(op, bits(w1, 24, 8), Ty::B32, None, &mut 8)?,
                offset: bits(w0, 0, 12) as u16,
                offen,
                idxen,
                dfmt: bits(w0, 19, 4) as u8,
                nfmt: bits(w0, 23, 3) as u8,
                cache: self.cache(bit(w0, 14), bit(w1, 22), bit(w0, 15)),
            }),
            8,
        )
    }

    fn mimg(&self) -> Result<Decoded, DecodeError> {
        let w0 = self.w0;
        let w1 = self.w.word(1)?;
        let op = self.row(Format::Mimg, bits(w0, 18, 7))?;
        let dmask = bits(w0, 8, 4) as u8;
        let gfx90a = self.target.has_acc_bits();
        let tfe = !gfx90a && bit(w0, 16);
        let d16 = bit(w1, 31);
        let mut n = (dmask.count_ones() as u8).max(1);
        if op.name().contains("cmpswap") {
            n = n.max(2);
        }
        if d16 {
            n = n.div_ceil(2);
        }
        n += tfe as u8;
        let r128 = bit(w0, 15);
        self.done(
            Instruction::Mimg(Mimg {
                op,
                vdata: self.vreg(op, bits(w1, 8, 8), n, gfx90a && bit(w0, 16))?,
                vaddr: self.vreg(op, bits(w1, 0, 8), 1, false)?,
                srsrc: self.sdst(op, bits(w1, 16, 5) << 2, if r128 { 4 } else { 8 })?,
                dmask,
                unorm: bit(w0, 12),
                glc: bit(w0, 13),
                slc: bit(w0, 25),
                da: bit(w0, 14),
                r128,
                tfe,
                lwe: bit(w0, 17),
                d16,
            }),
            8,
        )
    }
}
