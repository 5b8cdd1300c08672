//! Vector memory: FLAT, GLOBAL and SCRATCH (Vega ISA 9 "Flat Memory
//! Instructions", 12.14-12.16) and MUBUF (Vega ISA 8 "Vector Memory
//! Operations", 12.12). Per lane: an address, then a load, store or atomic
//! through [`Memory`](super::Memory), the LDS, or the wave's swizzled
//! scratch.

use super::ctx::Ctx;
use super::memory::AtomicOp;
use super::operands::{lanes, Ty};
use super::wave::Wave;
use super::{Exec, Fail};
use crate::inst::{Flat, Mubuf, Segment};
use crate::opcodes::Opcode as O;
use crate::operand::Operand;

/// What a memory opcode does to each lane, read from its mnemonic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemOp {
    /// Load `bytes`; `signed` sign-extends sub-dword data; `d16` puts the
    /// value in the low (`Some(false)`) or high (`Some(true)`) half and
    /// keeps the other.
    Load {
        bytes: usize,
        signed: bool,
        d16: Option<bool>,
    },
    /// Store `bytes`; `hi` stores the high half of the data dword.
    Store { bytes: usize, hi: bool },
    /// A read-modify-write of 4 or 8 bytes (`pk_add_f16` is not here).
    Atomic { op: AtomicOp, wide: bool },
}

/// The lane operation of `load_*`, `store_*` and `atomic_*` suffixes.
pub(crate) fn mem_op(name: &str) -> Option<MemOp> {
    let tail = name.split_once('_')?.1;
    if let Some(t) = tail.strip_prefix("load_") {
        let (bytes, signed, d16) = match t {
            "dword" => (4, false, None),
            "dwordx2" => (8, false, None),
            "dwordx3" => (12, false, None),
            "dwordx4" => (16, false, None),
            "ubyte" => (1, false, None),
            "sbyte" => (1, true, None),
            "ushort" => (2, false, None),
            "sshort" => (2, true, None),
            "ubyte_d16" => (1, false, Some(false)),
            "ubyte_d16_hi" => (1, false, Some(true)),
            "sbyte_d16" => (1, true, Some(false)),
            "sbyte_d16_hi" => (1, true, Some(true)),
            "short_d16" => (2, false, Some(false)),
            "short_d16_hi" => (2, false, Some(true)),
            _ => return None,
        };
        return Some(MemOp::Load { bytes, signed, d16 });
    }
    if let Some(t) = tail.strip_prefix("store_") {
        let (bytes, hi) = match t {
            "byte" => (1, false),
            "byte_d16_hi" => (1, true),
            "short" => (2, false),
            "short_d16_hi" => (2, true),
            "dword" => (4, false),
            "dwordx2" => (8, false),
            "dwordx3" => (12, false),
            "dwordx4" => (16, false),
            _ => return None,
        };
        return Some(MemOp::Store { bytes, hi });
    }
    let t = tail.strip_prefix("atomic_")?;
    let (t, wide) = match t.strip_suffix("_x2") {
        Some(t) => (t, true),
        None => (t, false),
    };
    let (op, wide) = match t {
        "swap" => (AtomicOp::Swap, wide),
        "cmpswap" => (AtomicOp::CmpSwap, wide),
        "add" => (AtomicOp::Add, wide),
        "sub" => (AtomicOp::Sub, wide),
        "smin" => (AtomicOp::Smin, wide),
        "umin" => (AtomicOp::Umin, wide),
        "smax" => (AtomicOp::Smax, wide),
        "umax" => (AtomicOp::Umax, wide),
        "and" => (AtomicOp::And, wide),
        "or" => (AtomicOp::Or, wide),
        "xor" => (AtomicOp::Xor, wide),
        "inc" => (AtomicOp::Inc, wide),
        "dec" => (AtomicOp::Dec, wide),
        "add_f32" => (AtomicOp::FAdd, false),
        "add_f64" => (AtomicOp::FAdd, true),
        "min_f64" => (AtomicOp::FMin, true),
        "max_f64" => (AtomicOp::FMax, true),
        _ => return None,
    };
    Some(MemOp::Atomic { op, wide })
}

/// Where a lane's access goes.
#[derive(Clone, Copy, Debug)]
enum Space {
    /// Global memory by virtual address.
    Global(u64),
    /// LDS by byte offset.
    Lds(u64),
    /// The wave's scratch: a per-lane private byte offset, swizzled onto
    /// `base` with 4-byte elements and 64 lanes (Vega ISA 9.3.4).
    Scratch { base: u64, offset: u64 },
    /// A swizzled buffer: `base` plus per-element mapping.
    Swizzled {
        base: u64,
        index: u64,
        offset: u64,
        stride: u64,
        elem: u64,
        index_stride: u64,
    },
    /// Out of the buffer's range: loads read 0, stores are dropped (Vega
    /// ISA 8.1.8 "Range checking").
    Discard,
    /// Global memory of which only the first `valid` bytes are in the
    /// buffer's range (checked per dword): the rest read 0 and are not
    /// written.
    Bounded { addr: u64, valid: usize },
}

/// The global address of `len` bytes at `at` within a swizzled space,
/// split at element boundaries: calls `f(addr, start, len)` per piece.
fn pieces(
    space: Space,
    lane: usize,
    len: usize,
    mut f: impl FnMut(u64, usize, usize) -> Exec,
) -> Exec {
    match space {
        Space::Global(a) => f(a, 0, len),
        Space::Scratch { base, offset } => {
            let mut done = 0;
            while done < len {
                let off = offset + done as u64;
                let within = (off % 4) as usize;
                let n = (4 - within).min(len - done);
                let addr = base
                    .wrapping_add((off / 4) * 4 * 64)
                    .wrapping_add(lane as u64 * 4)
                    .wrapping_add(within as u64);
                f(addr, done, n)?;
                done += n;
            }
            Ok(())
        }
        Space::Swizzled {
            base,
            index,
            offset,
            stride,
            elem,
            index_stride,
        } => {
            let mut done = 0;
            while done < len {
                let off = offset + done as u64;
                let within = off % elem;
                let n = ((elem - within) as usize).min(len - done);
                let addr = base
                    .wrapping_add((index / index_stride) * stride * index_stride)
                    .wrapping_add((off / elem) * elem * index_stride)
                    .wrapping_add((index % index_stride) * elem)
                    .wrapping_add(within);
                f(addr, done, n)?;
                done += n;
            }
            Ok(())
        }
        // The callers serve LDS and discarded accesses themselves.
        Space::Lds(_) | Space::Discard | Space::Bounded { .. } => {
            Err(Fail::Unimplemented("address space"))
        }
    }
}

fn read(ctx: &mut Ctx<'_>, space: Space, lane: usize, buf: &mut [u8]) -> Exec {
    match space {
        Space::Discard => {
            buf.fill(0);
            Ok(())
        }
        Space::Lds(a) => {
            super::lds::lds_read(ctx.lds, a, buf);
            Ok(())
        }
        Space::Bounded { addr, valid } => {
            let (inside, outside) = buf.split_at_mut(valid.min(buf.len()));
            outside.fill(0);
            ctx.mem.read(addr, inside).map_err(Fail::from)
        }
        _ => {
            let len = buf.len();
            pieces(space, lane, len, |addr, start, n| {
                ctx.mem
                    .read(addr, &mut buf[start..start + n])
                    .map_err(Fail::from)
            })
        }
    }
}

fn write(ctx: &mut Ctx<'_>, space: Space, lane: usize, data: &[u8]) -> Exec {
    match space {
        Space::Discard => Ok(()),
        Space::Lds(a) => {
            super::lds::lds_write(ctx.lds, a, data);
            Ok(())
        }
        Space::Bounded { addr, valid } => ctx
            .mem
            .write(addr, &data[..valid.min(data.len())])
            .map_err(Fail::from),
        _ => pieces(space, lane, data.len(), |addr, start, n| {
            ctx.mem
                .write(addr, &data[start..start + n])
                .map_err(Fail::from)
        }),
    }
}

fn atomic(
    ctx: &mut Ctx<'_>,
    space: Space,
    lane: usize,
    op: AtomicOp,
    wide: bool,
    src: u64,
    cmp: u64,
) -> Exec<u64> {
    match space {
        // An atomic partly out of range is out of range.
        Space::Discard | Space::Bounded { .. } => Ok(0),
        Space::Lds(a) => Ok(super::lds::lds_atomic(ctx.lds, a, op, wide, src, cmp)),
        _ => {
            let mut out = 0;
            let len = if wide { 8 } else { 4 };
            pieces(space, lane, len, |addr, start, n| {
                if start != 0 || n != len {
                    return Err(Fail::Unimplemented("atomic split across scratch elements"));
                }
                out = if wide {
                    ctx.mem.atomic64(addr, op, src, cmp)?
                } else {
                    ctx.mem.atomic32(addr, op, src as u32, cmp as u32)? as u64
                };
                Ok(())
            })?;
            Ok(out)
        }
    }
}

/// Performs `op` for every active lane given its space: loads into
/// `vdst`, stores from `data`, atomics from `data` (returning into `vdst`
/// when the instruction returns).
fn lanes_do(
    w: &mut Wave,
    ctx: &mut Ctx<'_>,
    op: MemOp,
    vdst: Option<Operand>,
    data: Option<Operand>,
    returns: bool,
    space_of: &dyn Fn(&Wave, usize) -> Exec<Space>,
) -> Exec {
    let exec = w.exec();
    match op {
        MemOp::Load { bytes, signed, d16 } => {
            let dwords = bytes.div_ceil(4) as u8;
            let d = w.vdst(
                &vdst.ok_or(Fail::Unimplemented("load without destination"))?,
                dwords,
            )?;
            for lane in lanes(exec) {
                let space = space_of(w, lane)?;
                let mut buf = [0u8; 16];
                read(ctx, space, lane, &mut buf[..bytes])?;
                if bytes >= 4 {
                    for k in 0..bytes / 4 {
                        let v = u32::from_le_bytes(buf[k * 4..k * 4 + 4].try_into().unwrap());
                        w.set_lane((d.0 + k, d.1), lane, v);
                    }
                    continue;
                }
                let raw = if bytes == 1 {
                    buf[0] as u32
                } else {
                    u16::from_le_bytes([buf[0], buf[1]]) as u32
                };
                let ext = match (bytes, signed) {
                    (1, true) => raw as u8 as i8 as i32 as u32,
                    (2, true) => raw as u16 as i16 as i32 as u32,
                    _ => raw,
                };
                let v = match d16 {
                    None => ext,
                    Some(hi) => {
                        let old = w.get_lane(d, lane);
                        let half = ext & 0xffff;
                        if hi {
                            (old & 0xffff) | half << 16
                        } else {
                            (old & 0xffff_0000) | half
                        }
                    }
                };
                w.set_lane(d, lane, v);
            }
            Ok(())
        }
        MemOp::Store { bytes, hi } => {
            let dwords = bytes.div_ceil(4) as u8;
            let s = w.vdst(
                &data.ok_or(Fail::Unimplemented("store without data"))?,
                dwords,
            )?;
            for lane in lanes(exec) {
                let space = space_of(w, lane)?;
                let mut buf = [0u8; 16];
                for k in 0..dwords as usize {
                    buf[k * 4..k * 4 + 4]
                        .copy_from_slice(&w.get_lane((s.0 + k, s.1), lane).to_le_bytes());
                }
                if hi {
                    buf.copy_within(2..4, 0);
                }
                write(ctx, space, lane, &buf[..bytes])?;
            }
            Ok(())
        }
        MemOp::Atomic { op, wide } => {
            let n = if wide { 2 } else { 1 };
            let dn = if op == AtomicOp::CmpSwap { 2 * n } else { n };
            let s = w.vdst(
                &data.ok_or(Fail::Unimplemented("atomic without data"))?,
                dn as u8,
            )?;
            let d = match (returns, vdst) {
                (true, Some(v)) => Some(w.vdst(&v, n as u8)?),
                _ => None,
            };
            for lane in lanes(exec) {
                let space = space_of(w, lane)?;
                let get = |w: &Wave, k: usize| -> u64 {
                    let lo = w.get_lane((s.0 + k * n, s.1), lane) as u64;
                    if wide {
                        lo | (w.get_lane((s.0 + k * n + 1, s.1), lane) as u64) << 32
                    } else {
                        lo
                    }
                };
                let src = get(w, 0);
                let cmp = if op == AtomicOp::CmpSwap {
                    get(w, 1)
                } else {
                    0
                };
                let old = atomic(ctx, space, lane, op, wide, src, cmp)?;
                if let Some(d) = d {
                    w.set_lane(d, lane, old as u32);
                    if wide {
                        w.set_lane((d.0 + 1, d.1), lane, (old >> 32) as u32);
                    }
                }
            }
            Ok(())
        }
    }
}

/// The space a flat address falls in (Vega ISA 9.3.1 "FLAT apertures").
fn flat_space(w: &Wave, addr: u64) -> Space {
    let hi = addr & !0xffff_ffff;
    if hi == w.apertures.shared_base {
        Space::Lds(addr & 0xffff_ffff)
    } else if hi == w.apertures.private_base {
        Space::Scratch {
            base: w.flat_scratch(),
            offset: addr & 0xffff_ffff,
        }
    } else {
        Space::Global(addr)
    }
}

/// FLAT, GLOBAL and SCRATCH.
pub(crate) fn flat(w: &mut Wave, i: &Flat, ctx: &mut Ctx<'_>) -> Exec {
    if i.lds {
        return Err(Fail::Unimplemented("load to LDS"));
    }
    let op = mem_op(i.op.opcode.name()).ok_or(Fail::Unimplemented("FLAT opcode"))?;
    let offset = i.offset as i64 as u64;
    let saddr = match i.saddr {
        Some(Operand::Off) | None => None,
        Some(s) => Some(s),
    };
    let vaddr = match i.vaddr {
        Operand::Off => None,
        v => Some(v),
    };
    // Atomics return the old value when GLC is set (Vega ISA 9.1.9).
    let returns = i.cache.glc_sc0;
    let seg = i.seg;
    let saddr_val = match (seg, saddr) {
        (Segment::Scratch, Some(s)) => Some(w.read_scalar(&s, Ty::B32)?),
        (_, Some(s)) => Some(w.read_scalar(&s, Ty::B64)?),
        _ => None,
    };
    let vreg = match vaddr {
        Some(v) => {
            let wide = seg == Segment::Flat || (seg == Segment::Global && saddr.is_none());
            Some(w.vdst(&v, if wide { 2 } else { 1 })?.0)
        }
        None => None,
    };
    let space_of = move |w: &Wave, lane: usize| -> Exec<Space> {
        let v32 = vreg.map(|r| w.vgprs[r][lane] as u64).unwrap_or(0);
        let v64 = vreg
            .map(|r| v32 | (w.vgprs[r + 1][lane] as u64) << 32)
            .unwrap_or(0);
        Ok(match seg {
            Segment::Flat => flat_space(w, v64.wrapping_add(offset)),
            Segment::Global => match saddr_val {
                Some(s) => Space::Global(s.wrapping_add(v32).wrapping_add(offset)),
                None => Space::Global(v64.wrapping_add(offset)),
            },
            Segment::Scratch => Space::Scratch {
                base: w.flat_scratch(),
                offset: (saddr_val
                    .unwrap_or(0)
                    .wrapping_add(v32)
                    .wrapping_add(offset))
                    & 0xffff_ffff,
            },
        })
    };
    lanes_do(w, ctx, op, i.vdst, i.data, returns, &space_of)
}

/// MUBUF (Vega ISA 8.1): address from the buffer resource, SOFFSET, the
/// instruction offset and the index/offset VGPRs, swizzled when the
/// resource says so (the private segment buffer), range-checked against
/// NUM_RECORDS when not swizzled.
pub(crate) fn mubuf(w: &mut Wave, i: &Mubuf, ctx: &mut Ctx<'_>) -> Exec {
    match i.op.opcode {
        O::BufferWbinvl1 | O::BufferWbinvl1Vol | O::BufferWbl2 | O::BufferInv | O::BufferInvl2 => {
            return Ok(())
        }
        _ => {}
    }
    if i.lds {
        return Err(Fail::Unimplemented("load to LDS"));
    }
    let op = mem_op(i.op.opcode.name()).ok_or(Fail::Unimplemented("MUBUF opcode"))?;
    let srsrc = i
        .srsrc
        .ok_or(Fail::Unimplemented("MUBUF without resource"))?;
    let at = w
        .sreg_index(&srsrc)?
        .ok_or(Fail::Unimplemented("buffer resource not in SGPRs"))?;
    let rsrc = [
        w.sreg_at(at)?,
        w.sreg_at(at + 1)?,
        w.sreg_at(at + 2)?,
        w.sreg_at(at + 3)?,
    ];
    let base = rsrc[0] as u64 | ((rsrc[1] & 0xffff) as u64) << 32;
    let stride = ((rsrc[1] >> 16) & 0x3fff) as u64;
    let swizzle = rsrc[1] >> 31 & 1 == 1;
    let num_records = rsrc[2] as u64;
    let elem = [2u64, 4, 8, 16][((rsrc[3] >> 19) & 3) as usize];
    let index_stride = [8u64, 16, 32, 64][((rsrc[3] >> 21) & 3) as usize];
    let add_tid = rsrc[3] >> 23 & 1 == 1;
    let soffset = match i.soffset {
        Some(s) => w.read_scalar(&s, Ty::B32)?,
        None => 0,
    };
    let vreg = match i.vaddr {
        Some(v) if i.offen || i.idxen => Some(w.vdst(&v, (i.offen && i.idxen) as u8 + 1)?.0),
        _ => None,
    };
    let (offen, idxen, inst_offset) = (i.offen, i.idxen, i.offset as u64);
    let bytes = match op {
        MemOp::Load { bytes, .. } | MemOp::Store { bytes, .. } => bytes as u64,
        MemOp::Atomic { wide, .. } => 4 << wide as u64,
    };
    let space_of = move |w: &Wave, lane: usize| -> Exec<Space> {
        let (mut vidx, mut voff) = (0u64, 0u64);
        if let Some(r) = vreg {
            match (idxen, offen) {
                (true, true) => {
                    vidx = w.vgprs[r][lane] as u64;
                    voff = w.vgprs[r + 1][lane] as u64;
                }
                (true, false) => vidx = w.vgprs[r][lane] as u64,
                _ => voff = w.vgprs[r][lane] as u64,
            }
        }
        let index = vidx + if add_tid { lane as u64 } else { 0 };
        let offset = (voff + inst_offset) & 0xffff_ffff;
        if swizzle {
            return Ok(Space::Swizzled {
                base: base.wrapping_add(soffset),
                index,
                offset,
                stride,
                elem,
                index_stride,
            });
        }
        // Range check (Vega ISA 8.1.8): raw buffers by offset, per dword,
        // structured ones by index.
        let addr = base
            .wrapping_add(soffset)
            .wrapping_add(index * stride)
            .wrapping_add(offset);
        if stride != 0 {
            return Ok(if index >= num_records {
                Space::Discard
            } else {
                Space::Global(addr)
            });
        }
        let valid = if bytes < 4 {
            if offset + bytes <= num_records {
                bytes
            } else {
                0
            }
        } else {
            4 * (0..bytes / 4)
                .take_while(|k| offset + 4 * k + 4 <= num_records)
                .count() as u64
        };
        Ok(match valid {
            0 => Space::Discard,
            v if v == bytes => Space::Global(addr),
            v => Space::Bounded {
                addr,
                valid: v as usize,
            },
        })
    };
    lanes_do(w, ctx, op, i.vdata, i.vdata, i.cache.glc_sc0, &space_of)
}
