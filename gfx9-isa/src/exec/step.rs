//! Fetch, decode once per PC, and dispatch to the instruction class's
//! executor.

use std::collections::HashMap;

use super::ctx::{Clock, Ctx, Stop};
use super::memory::{Access, Memory};
use super::wave::{Lds, Wave};
use super::{lds, scalar, smem, valu, vmem, ExecError, Fail};
use crate::inst::{Decoded, Instruction};
use crate::{decode, DecodeError, Target};

/// The largest span of PCs the dense table of a [`CodeCache`] covers, in
/// bytes.
const WINDOW: u64 = 1 << 22;

/// Decoded instructions by address, shared by the waves running the same
/// code: each PC is decoded once. Code written after it was decoded is not
/// seen; make a new cache for new code.
///
/// The PCs of one code object lie close together: a dense table, one slot
/// per dword from the lowest PC seen to the highest (at most 4 MiB of
/// code), holds the index of each decoded
/// instruction; a PC outside that window, or not dword-aligned, goes to a
/// map.
#[derive(Debug, Default)]
pub struct CodeCache {
    /// The PC of `slots[0]`.
    base: u64,
    /// Per dword from `base`: 1 + the index in `insts`, 0 if not decoded.
    slots: Vec<u32>,
    insts: Vec<Decoded>,
    /// Decoded instructions outside the window.
    far: HashMap<u64, Decoded>,
}

impl CodeCache {
    /// An empty cache.
    pub fn new() -> CodeCache {
        CodeCache::default()
    }

    /// The instruction at `pc`, fetched through `mem` the first time.
    pub fn fetch(
        &mut self,
        target: Target,
        mem: &mut dyn Memory,
        pc: u64,
    ) -> Result<Decoded, ExecError> {
        self.get(target, mem, pc).copied()
    }

    /// The slot of `pc` in the dense table, grown to hold it; `None` for a
    /// PC outside the window or not dword-aligned.
    fn slot(&mut self, pc: u64) -> Option<usize> {
        if !pc.is_multiple_of(4) {
            return None;
        }
        if self.slots.is_empty() {
            self.base = pc;
        }
        if pc < self.base {
            let grow = ((self.base - pc) / 4) as usize;
            let span = (self.slots.len() + grow) as u64 * 4;
            if span > WINDOW {
                return None;
            }
            self.slots.splice(0..0, std::iter::repeat_n(0, grow));
            self.base = pc;
        }
        let at = ((pc - self.base) / 4) as usize;
        if at >= self.slots.len() {
            if (at as u64 + 1) * 4 > WINDOW {
                return None;
            }
            self.slots.resize(at + 1, 0);
        }
        Some(at)
    }

    /// The instruction at `pc` (see [`CodeCache::fetch`]).
    #[inline]
    pub(crate) fn get(
        &mut self,
        target: Target,
        mem: &mut dyn Memory,
        pc: u64,
    ) -> Result<&Decoded, ExecError> {
        let hit = pc
            .checked_sub(self.base)
            .filter(|off| off.is_multiple_of(4))
            .and_then(|off| self.slots.get((off / 4) as usize))
            .copied()
            .unwrap_or(0);
        if hit != 0 {
            return Ok(&self.insts[hit as usize - 1]);
        }
        self.decode_at(target, mem, pc)
    }

    #[cold]
    fn decode_at(
        &mut self,
        target: Target,
        mem: &mut dyn Memory,
        pc: u64,
    ) -> Result<&Decoded, ExecError> {
        let slot = self.slot(pc);
        if slot.is_none() && self.far.contains_key(&pc) {
            return Ok(&self.far[&pc]);
        }
        let fault = |addr| ExecError::MemoryFault {
            addr,
            access: Access::Read.name(),
            opcode: "instruction fetch",
            pc,
        };
        let mut bytes = [0u8; 12];
        mem.read(pc, &mut bytes[..4]).map_err(|f| fault(f.addr))?;
        let d = match decode(target, &bytes[..4]) {
            Err(DecodeError::Truncated { need, .. }) if need <= 12 => {
                mem.read(pc + 4, &mut bytes[4..need])
                    .map_err(|f| fault(f.addr))?;
                decode(target, &bytes[..need])
            }
            other => other,
        }
        .map_err(|error| ExecError::Illegal { pc, error })?;
        match slot {
            Some(at) => {
                self.insts.push(d);
                self.slots[at] = self.insts.len() as u32;
                Ok(&self.insts[self.insts.len() - 1])
            }
            None => Ok(self.far.entry(pc).or_insert(d)),
        }
    }
}

impl Wave {
    /// Executes one instruction. `Ok(None)`: the wave goes on.
    pub fn step(
        &mut self,
        cache: &mut CodeCache,
        mem: &mut dyn Memory,
        lds: &mut Lds,
        clock: &dyn Clock,
    ) -> Result<Option<Stop>, ExecError> {
        let pc = self.pc;
        let d = cache.get(self.target, mem, pc)?;
        self.pc = pc.wrapping_add(d.len as u64);
        self.retired += 1;
        let mut ctx = Ctx { mem, lds, clock };
        let r = self.execute(&d.inst, &mut ctx);
        r.map_err(|f: Fail| f.at(d.inst.opcode(), pc))
    }

    /// Runs until the wave stops, pauses at a barrier or traps, or until
    /// `budget` instructions have run (then `Ok(Stop::Yield)`).
    pub fn run(
        &mut self,
        cache: &mut CodeCache,
        mem: &mut dyn Memory,
        lds: &mut Lds,
        clock: &dyn Clock,
        budget: u64,
    ) -> Result<Stop, ExecError> {
        for _ in 0..budget {
            if let Some(stop) = self.step(cache, mem, lds, clock)? {
                return Ok(stop);
            }
        }
        Ok(Stop::Yield)
    }

    fn execute(&mut self, inst: &Instruction, ctx: &mut Ctx<'_>) -> Result<Option<Stop>, Fail> {
        match inst {
            Instruction::Sop2(i) => scalar::sop2(self, i).map(|_| None),
            Instruction::Sop1(i) => scalar::sop1(self, i),
            Instruction::Sopc(i) => scalar::sopc(self, i).map(|_| None),
            Instruction::Sopk(i) => scalar::sopk(self, i).map(|_| None),
            Instruction::Sopp(i) => scalar::sopp(self, i, ctx),
            Instruction::Smem(i) => smem::smem(self, i, ctx).map(|_| None),
            Instruction::Vop1(i) => valu::vop1(self, i).map(|_| None),
            Instruction::Vop2(i) => valu::vop2(self, i).map(|_| None),
            Instruction::Vopc(i) => valu::vopc(self, i).map(|_| None),
            Instruction::Vop3(i) => valu::vop3(self, i).map(|_| None),
            Instruction::Vop3p(i) => valu::vop3p(self, i).map(|_| None),
            Instruction::Ds(i) => lds::ds(self, i, ctx).map(|_| None),
            Instruction::Flat(i) => vmem::flat(self, i, ctx).map(|_| None),
            Instruction::Mubuf(i) => vmem::mubuf(self, i, ctx).map(|_| None),
            Instruction::Mtbuf(_) => Err(Fail::Unimplemented("MTBUF")),
            Instruction::Mimg(_) => Err(Fail::Unimplemented("MIMG")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{AtomicOp, MemFault};

    /// Code in a few regions; anything else faults.
    struct Code(Vec<(u64, Vec<u8>)>);

    impl Memory for Code {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
            for (base, bytes) in &self.0 {
                if let Some(src) = addr
                    .checked_sub(*base)
                    .and_then(|off| bytes.get(off as usize..off as usize + buf.len()))
                {
                    buf.copy_from_slice(src);
                    return Ok(());
                }
            }
            Err(MemFault {
                addr,
                access: Access::Read,
            })
        }
        fn write(&mut self, addr: u64, _: &[u8]) -> Result<(), MemFault> {
            Err(MemFault {
                addr,
                access: Access::Write,
            })
        }
        fn atomic32(&mut self, addr: u64, _: AtomicOp, _: u32, _: u32) -> Result<u32, MemFault> {
            Err(MemFault {
                addr,
                access: Access::Atomic,
            })
        }
        fn atomic64(&mut self, addr: u64, _: AtomicOp, _: u64, _: u64) -> Result<u64, MemFault> {
            Err(MemFault {
                addr,
                access: Access::Atomic,
            })
        }
    }

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Every PC keeps its own instruction whichever way the dense table
    /// grew (below its first PC, above it) and outside it (far, not
    /// dword-aligned): each fetch decodes what memory held at the first
    /// fetch, never another slot's instruction.
    #[test]
    fn cache_keeps_each_pc_through_growth_and_far_pcs() {
        let t = Target::Gfx90a;
        // s_nop 0, s_endpgm, s_mov_b32 s0 with a literal, s_mov_b32 s1, s0.
        let main = words(&[
            0xbf80_0000,
            0xbf81_0000,
            0xbe80_00ff,
            0x1234_5678,
            0xbe81_0000,
        ]);
        let low = words(&[0xbe80_00ff, 0xdead_beef, 0xbf81_0000]);
        let far = words(&[0xbe81_0000, 0xbf81_0000]);
        // s_endpgm at 0x20_0002.
        let odd = vec![0, 0, 0x00, 0x00, 0x81, 0xbf, 0, 0];
        let regions = vec![
            (0x10_0000, main),
            (0x0f_0000, low),
            (0x10_0000 + 2 * WINDOW, far),
            (0x20_0000, odd),
        ];
        let pcs = [
            0x10_0004,
            0x10_0000,
            0x0f_0000,
            0x0f_0008,
            0x10_0008,
            0x10_0010,
            0x10_0000 + 2 * WINDOW,
            0x10_0004 + 2 * WINDOW,
            0x20_0002,
        ];
        let mut mem = Code(regions.clone());
        // What each PC holds, each decoded by a cache of its own.
        let want: Vec<Decoded> = pcs
            .iter()
            .map(|&pc| CodeCache::new().fetch(t, &mut mem, pc).unwrap())
            .collect();
        assert_eq!(want[4].len, 8, "the literal");
        let mut cache = CodeCache::new();
        for (pc, d) in pcs.iter().zip(&want) {
            assert_eq!(cache.fetch(t, &mut mem, *pc).unwrap(), *d, "pc {pc:#x}");
        }
        // The code changes; the cache keeps what it decoded.
        let mut zeroed = Code(
            regions
                .iter()
                .map(|(a, b)| (*a, vec![0; b.len()]))
                .collect(),
        );
        for (pc, d) in pcs.iter().zip(&want).rev() {
            assert_eq!(cache.fetch(t, &mut zeroed, *pc).unwrap(), *d, "pc {pc:#x}");
        }
        let mut fresh = CodeCache::new();
        assert_ne!(fresh.fetch(t, &mut zeroed, pcs[0]).ok(), Some(want[0]));
        // A PC nothing maps faults, and is not cached.
        assert!(matches!(
            cache.fetch(t, &mut mem, 0x10_0100),
            Err(ExecError::MemoryFault {
                addr: 0x10_0100,
                ..
            })
        ));
    }
}
