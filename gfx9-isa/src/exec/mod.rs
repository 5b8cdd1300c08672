//! The wavefront interpreter: executes decoded gfx9 instructions on a
//! wave's state (Vega ISA section 3 "Kernel State", MI200 ISA section 3).
//!
//! Pure code: no OS, no simulator. Global and flat memory, scratch and
//! instruction fetch go through the [`Memory`] trait by 64-bit GPU virtual
//! address; LDS is a byte array per workgroup ([`Lds`]). An instruction the
//! interpreter does not implement stops the wave with
//! [`ExecError::Unimplemented`], naming the instruction and its PC: never a
//! silent wrong answer.
//!
//! Layout, one job per file: [`wave`] the state, `operands` reading and
//! writing operands, `step` fetch/decode/dispatch, `scalar` and `smem` the
//! scalar unit, `valu*` the vector ALU (`valu_packed` VOP3P), `lds` DS, `vmem` FLAT/GLOBAL/SCRATCH
//! and MUBUF, `float` the floating-point helpers, [`workgroup`] the runner
//! and [`dispatch`] the AMDHSA setup.

// Lanes and register tuples are indexed the way the ISA guides write them.
#![allow(clippy::needless_range_loop)]

mod ctx;
mod float;
mod lds;
mod memory;
mod operands;
mod scalar;
mod smem;
mod step;
mod valu;
mod valu_cmp;
mod valu_float;
mod valu_int;
mod valu_packed;
mod vmem;

pub mod dispatch;
pub mod wave;
pub mod workgroup;

pub use ctx::{Clock, Stop};
pub use dispatch::{AqlDispatch, Dispatch, DispatchError, KernelDescriptor};
pub use memory::Access;
pub use memory::{AtomicOp, MemFault, Memory};
pub use step::CodeCache;
pub use wave::{Apertures, Lds, Wave};
pub use workgroup::{run_waves, run_workgroup, WorkgroupOutcome};

use crate::opcodes::Opcode;

/// Why a wave stopped with an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The instruction is decoded but its execution is not implemented.
    #[error("{opcode} at pc {pc:#x} is not implemented by the interpreter ({what})")]
    Unimplemented {
        /// The mnemonic.
        opcode: &'static str,
        /// Its address.
        pc: u64,
        /// What part of it is missing.
        what: &'static str,
    },
    /// The bytes at the PC do not decode.
    #[error("illegal instruction at pc {pc:#x}: {error}")]
    Illegal {
        /// The address.
        pc: u64,
        /// The decoder's error.
        error: crate::DecodeError,
    },
    /// A memory access faulted.
    #[error("memory fault at {addr:#x} ({access}) by {opcode} at pc {pc:#x}")]
    MemoryFault {
        /// The faulting address.
        addr: u64,
        /// `read`, `write` or `atomic`.
        access: &'static str,
        /// The mnemonic (`instruction fetch` for a fetch).
        opcode: &'static str,
        /// The instruction's address.
        pc: u64,
    },
    /// A register operand lies outside the wave's register file.
    #[error("{opcode} at pc {pc:#x} names register {reg} beyond the wave's {file}")]
    RegisterRange {
        /// The mnemonic.
        opcode: &'static str,
        /// Its address.
        pc: u64,
        /// The register number.
        reg: u32,
        /// `sgprs`, `vgprs` or `agprs`.
        file: &'static str,
    },
}

/// An error without the PC yet, filled in by `step`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fail {
    Unimplemented(&'static str),
    Fault { addr: u64, access: &'static str },
    Register { reg: u32, file: &'static str },
}

impl Fail {
    pub(crate) fn at(self, opcode: Opcode, pc: u64) -> ExecError {
        let opcode = opcode.name();
        match self {
            Fail::Unimplemented(what) => ExecError::Unimplemented { opcode, pc, what },
            Fail::Fault { addr, access } => ExecError::MemoryFault {
                addr,
                access,
                opcode,
                pc,
            },
            Fail::Register { reg, file } => ExecError::RegisterRange {
                opcode,
                pc,
                reg,
                file,
            },
        }
    }
}

impl From<MemFault> for Fail {
    fn from(f: MemFault) -> Fail {
        Fail::Fault {
            addr: f.addr,
            access: f.access.name(),
        }
    }
}

/// The result type of the per-class executors.
pub(crate) type Exec<T = ()> = Result<T, Fail>;
