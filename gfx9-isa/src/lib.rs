#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod decode;
mod disasm;
pub mod exec;
#[cfg(feature = "fuzzing")]
pub mod fuzz_support;
pub mod inst;
pub mod opcodes;
pub mod operand;
pub mod target;

pub use decode::{decode, DecodeError};
pub use inst::{Decoded, Instruction};
pub use opcodes::{Format, Opcode};
pub use operand::Operand;
pub use target::Target;
