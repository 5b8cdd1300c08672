//! Reading and writing operands: the scalar file, VGPR/AGPR tuples, inline
//! constants and literals by operand type (Vega ISA 12.3 "SSRC0/SRC0"
//! codes; a literal for a 64-bit float operand is the high dword, Vega ISA
//! 4.4.1).

use super::wave::{Wave, EXEC, LANES, M0, SGPRS, VCC};
use super::{Exec, Fail};
use crate::operand::{Half, Operand, Special};

/// How a source is read: its width, and whether float constants and the
/// 64-bit literal rule apply as for a float.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    B16,
    F16,
    B32,
    F32,
    B64,
    F64,
}

impl Ty {
    pub(crate) fn is64(self) -> bool {
        matches!(self, Ty::B64 | Ty::F64)
    }
}

/// A resolved vector source: a register per lane or one value for all.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Src {
    Vgpr(usize),
    Agpr(usize),
    Uniform(u64),
}

fn constant(op: &Operand, ty: Ty) -> Option<u64> {
    Some(match *op {
        Operand::Int(i) => match ty {
            Ty::B16 | Ty::F16 => i as i16 as u16 as u64,
            Ty::B32 | Ty::F32 => i as i32 as u32 as u64,
            Ty::B64 | Ty::F64 => i as i64 as u64,
        },
        Operand::Float(c) => match ty {
            Ty::B16 | Ty::F16 => c.f16_bits() as u64,
            Ty::B32 | Ty::F32 => c.f32_bits() as u64,
            Ty::B64 | Ty::F64 => c.value().to_bits(),
        },
        Operand::Literal(v) => match ty {
            Ty::B16 | Ty::F16 => (v & 0xffff) as u64,
            Ty::B32 | Ty::F32 | Ty::B64 => v as u64,
            Ty::F64 => (v as u64) << 32,
        },
        _ => return None,
    })
}

impl Wave {
    fn sgpr_index(&self, first: u16, count: u8, base: usize, limit: usize) -> Exec<usize> {
        let at = base + first as usize;
        if first as usize + count as usize > limit {
            return Err(Fail::Register {
                reg: first as u32 + count as u32 - 1,
                file: "sgprs",
            });
        }
        Ok(at)
    }

    /// The scalar-file index an SGPR, TTMP or special register operand
    /// names, if it names one.
    pub(crate) fn sreg_index(&self, op: &Operand) -> Exec<Option<usize>> {
        Ok(Some(match *op {
            Operand::Sgpr(r) => self.sgpr_index(r.first, r.count, 0, SGPRS)?,
            Operand::Ttmp(r) => self.sgpr_index(r.first, r.count, super::wave::TTMP, 16)?,
            Operand::Special(s, half) => {
                let base = match s {
                    Special::FlatScratch => super::wave::FLAT_SCRATCH,
                    Special::XnackMask => 104,
                    Special::Vcc => VCC,
                    Special::M0 => M0,
                    Special::Exec => EXEC,
                    _ => return Ok(None),
                };
                if half == Half::Hi {
                    base + 1
                } else {
                    base
                }
            }
            _ => return Ok(None),
        }))
    }

    /// Scalar-file entry `at`; past the file is an error (a malformed
    /// tuple such as a 64-bit EXEC_HI), never a panic.
    pub(crate) fn sreg_at(&self, at: usize) -> Exec<u32> {
        self.sregs.get(at).copied().ok_or(Fail::Register {
            reg: at as u32,
            file: "sgprs",
        })
    }

    /// Sets scalar-file entry `at` (see [`Wave::sreg_at`]).
    pub(crate) fn set_sreg_at(&mut self, at: usize, v: u32) -> Exec {
        let slot = self.sregs.get_mut(at).ok_or(Fail::Register {
            reg: at as u32,
            file: "sgprs",
        })?;
        *slot = v;
        Ok(())
    }

    /// A scalar source of `ty` (32 or 64 bits).
    pub(crate) fn read_scalar(&self, op: &Operand, ty: Ty) -> Exec<u64> {
        if let Some(v) = constant(op, ty) {
            return Ok(v);
        }
        if let Some(at) = self.sreg_index(op)? {
            let lo = self.sreg_at(at)? as u64;
            return Ok(if ty.is64() {
                lo | (self.sreg_at(at + 1)? as u64) << 32
            } else {
                lo
            });
        }
        match *op {
            Operand::Special(s, _) => Ok(match s {
                Special::SharedBase => self.apertures.shared_base,
                Special::SharedLimit => self.apertures.shared_base | 0xffff_ffff,
                Special::PrivateBase => self.apertures.private_base,
                Special::PrivateLimit => self.apertures.private_base | 0xffff_ffff,
                Special::Vccz => (self.vcc() == 0) as u64,
                Special::Execz => (self.exec() == 0) as u64,
                Special::Scc => self.scc as u64,
                Special::PopsExitingWaveId => 0,
                Special::LdsDirect => return Err(Fail::Unimplemented("src_lds_direct operand")),
                // The register specials were read through `sreg_index`.
                _ => return Err(Fail::Unimplemented("special register operand")),
            }),
            _ => Err(Fail::Unimplemented("vector register as a scalar operand")),
        }
    }

    /// Writes a scalar destination (32 or 64 bits).
    pub(crate) fn write_scalar(&mut self, op: &Operand, v: u64, is64: bool) -> Exec {
        let Some(at) = self.sreg_index(op)? else {
            return Err(Fail::Unimplemented("scalar destination"));
        };
        if is64 {
            self.sreg_at(at + 1)?;
        }
        self.set_sreg_at(at, v as u32)?;
        if is64 {
            self.set_sreg_at(at + 1, (v >> 32) as u32)?;
        }
        Ok(())
    }

    fn vector_index(&self, first: u16, count: u8, agpr: bool) -> Exec<usize> {
        let (len, file) = if agpr {
            (self.agprs.len(), "agprs")
        } else {
            (self.vgprs.len(), "vgprs")
        };
        if first as usize + count as usize > len {
            return Err(Fail::Register {
                reg: first as u32 + count as u32 - 1,
                file,
            });
        }
        Ok(first as usize)
    }

    /// Resolves a vector-instruction source of `ty`.
    pub(crate) fn src(&self, op: &Operand, ty: Ty) -> Exec<Src> {
        let n = if ty.is64() { 2 } else { 1 };
        Ok(match *op {
            Operand::Vgpr(r) => Src::Vgpr(self.vector_index(r.first, n, false)?),
            Operand::Agpr(r) => Src::Agpr(self.vector_index(r.first, n, true)?),
            _ => Src::Uniform(self.read_scalar(op, ty)?),
        })
    }

    /// A resolved source's value in `lane` (64 bits read for a 64-bit
    /// source, 32 otherwise).
    #[inline]
    pub(crate) fn lane(&self, s: Src, lane: usize, is64: bool) -> u64 {
        let file = match s {
            Src::Uniform(v) => return v,
            Src::Vgpr(r) => (&self.vgprs, r),
            Src::Agpr(r) => (&self.agprs, r),
        };
        let (regs, r) = file;
        let lo = regs[r][lane] as u64;
        if is64 {
            lo | (regs[r + 1][lane] as u64) << 32
        } else {
            lo
        }
    }

    /// The first register of a vector destination of `n` dwords, and
    /// whether it is an AGPR.
    pub(crate) fn vdst(&self, op: &Operand, n: u8) -> Exec<(usize, bool)> {
        match *op {
            Operand::Vgpr(r) => Ok((self.vector_index(r.first, n, false)?, false)),
            Operand::Agpr(r) => Ok((self.vector_index(r.first, n, true)?, true)),
            _ => Err(Fail::Unimplemented("non-vector destination")),
        }
    }

    /// Writes a vector register's lane (by file).
    #[inline]
    pub(crate) fn set_lane(&mut self, reg: (usize, bool), lane: usize, v: u32) {
        if reg.1 {
            self.agprs[reg.0][lane] = v;
        } else {
            self.vgprs[reg.0][lane] = v;
        }
    }

    /// Reads a vector register's lane (by file).
    #[inline]
    pub(crate) fn get_lane(&self, reg: (usize, bool), lane: usize) -> u32 {
        if reg.1 {
            self.agprs[reg.0][lane]
        } else {
            self.vgprs[reg.0][lane]
        }
    }
}

/// The lanes of `mask` in order.
#[inline]
pub(crate) fn lanes(mask: u64) -> impl Iterator<Item = usize> {
    let mut m = mask;
    std::iter::from_fn(move || {
        if m == 0 {
            None
        } else {
            let l = m.trailing_zeros() as usize;
            m &= m - 1;
            Some(l)
        }
    })
}

/// Whether `LANES` fits a mask.
const _: () = assert!(LANES == 64);
