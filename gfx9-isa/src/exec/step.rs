//! Fetch, decode once per PC, and dispatch to the instruction class's
//! executor.

use std::collections::HashMap;

use super::memory::{Access, Memory};
use super::wave::{Lds, Wave};
use super::{lds, scalar, smem, valu, vmem, ExecError, Fail};
use crate::inst::{Decoded, Instruction};
use crate::{decode, DecodeError, Target};

/// What made a wave stop or pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// `s_endpgm`: the wave is done.
    Endpgm,
    /// `s_barrier`: the wave waits for the rest of its workgroup; the PC is
    /// past the barrier.
    Barrier,
    /// `s_trap` with its 8-bit trap id (Vega ISA 4.5 "Trap and Exception
    /// Registers"); the PC is past the trap.
    Trap(u8),
    /// `s_sleep`, or `Wave::run`'s instruction budget ran out: a point
    /// where a scheduler may switch waves; the wave can continue at once.
    Yield,
}

/// The shader clocks `s_memtime` and `s_memrealtime` read (Vega ISA 12.6:
/// the 64-bit shader clock and the constant-rate "real time" clock).
pub trait Clock {
    /// The shader clock (`s_memtime`).
    fn memtime(&self) -> u64;
    /// The real-time clock (`s_memrealtime`).
    fn memrealtime(&self) -> u64;
}

/// What an instruction sees besides its wave.
pub(crate) struct Ctx<'a> {
    pub mem: &'a mut dyn Memory,
    pub lds: &'a mut Lds,
    pub clock: &'a dyn Clock,
}

/// Decoded instructions by address, shared by the waves running the same
/// code: each PC is decoded once. Code written after it was decoded is not
/// seen; make a new cache for new code.
#[derive(Debug, Default)]
pub struct CodeCache {
    decoded: HashMap<u64, Decoded>,
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
        if let Some(d) = self.decoded.get(&pc) {
            return Ok(*d);
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
        self.decoded.insert(pc, d);
        Ok(d)
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
        let d = cache.fetch(self.target, mem, pc)?;
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
