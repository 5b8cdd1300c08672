//! What an instruction sees besides its wave (`Ctx`: memory, LDS, the
//! clocks) and what makes a wave stop or pause (`Stop`).

use super::memory::Memory;
use super::wave::Lds;

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
