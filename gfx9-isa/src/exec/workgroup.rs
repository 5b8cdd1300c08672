//! The workgroup runner: the waves of one workgroup share an LDS and meet
//! at `s_barrier` (Vega ISA 4.5 "S_BARRIER": a wave waits until every wave
//! of its workgroup that has not ended reaches the barrier).

use super::ctx::{Clock, Stop};
use super::dispatch::{Dispatch, DispatchError};
use super::memory::Memory;
use super::step::CodeCache;
use super::wave::{Lds, Wave};
use super::ExecError;

/// How a workgroup ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkgroupOutcome {
    /// Every wave reached `s_endpgm`; instructions executed in all.
    Completed {
        /// Wave-instructions executed.
        instructions: u64,
    },
    /// A wave stopped on an error (fault, illegal or unimplemented
    /// instruction): which wave and why.
    Fault {
        /// The wave's index in the workgroup.
        wave: u32,
        /// The error, naming the instruction and its PC.
        error: ExecError,
    },
    /// A wave executed `s_trap`.
    Trap {
        /// The wave's index in the workgroup.
        wave: u32,
        /// The trap id.
        code: u8,
        /// The address after the `s_trap`.
        pc: u64,
    },
    /// The instruction limit ran out before the workgroup ended.
    LimitReached {
        /// Wave-instructions executed.
        instructions: u64,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    AtBarrier,
    Done,
}

/// Runs workgroup `id` of `dispatch` to its end: its waves' scratch at
/// wave slots from `scratch_slot`, at most `limit` wave-instructions.
pub fn run_workgroup(
    dispatch: &Dispatch,
    id: [u32; 3],
    mem: &mut dyn Memory,
    cache: &mut CodeCache,
    clock: &dyn Clock,
    scratch_slot: u64,
    limit: u64,
) -> Result<WorkgroupOutcome, DispatchError> {
    let n = dispatch.waves_in(id);
    let mut waves: Vec<Wave> = (0..n)
        .map(|k| dispatch.wave(id, k, scratch_slot + k as u64))
        .collect::<Result<_, _>>()?;
    let mut lds = Lds::new(dispatch.group_segment_size as usize);
    Ok(run_waves(&mut waves, &mut lds, mem, cache, clock, limit))
}

/// Runs waves that share `lds` until all end, one errs or traps, or
/// `limit` instructions have run. Waves run in turn, each until it stops
/// or pauses; a barrier releases when every live wave waits at it.
pub fn run_waves(
    waves: &mut [Wave],
    lds: &mut Lds,
    mem: &mut dyn Memory,
    cache: &mut CodeCache,
    clock: &dyn Clock,
    limit: u64,
) -> WorkgroupOutcome {
    let mut state = vec![State::Ready; waves.len()];
    let mut executed = 0u64;
    const SLICE: u64 = 1 << 16;
    loop {
        let mut progressed = false;
        for (k, w) in waves.iter_mut().enumerate() {
            if state[k] != State::Ready {
                continue;
            }
            let before = w.retired;
            let budget = SLICE.min(limit.saturating_sub(executed));
            if budget == 0 {
                return WorkgroupOutcome::LimitReached {
                    instructions: executed,
                };
            }
            let r = w.run(cache, mem, lds, clock, budget);
            executed += w.retired - before;
            progressed = true;
            match r {
                Ok(Stop::Endpgm) => state[k] = State::Done,
                Ok(Stop::Barrier) => state[k] = State::AtBarrier,
                Ok(Stop::Yield) => {}
                Ok(Stop::Trap(code)) => {
                    return WorkgroupOutcome::Trap {
                        wave: k as u32,
                        code,
                        pc: w.pc,
                    }
                }
                Err(error) => {
                    return WorkgroupOutcome::Fault {
                        wave: k as u32,
                        error,
                    }
                }
            }
        }
        if state.iter().all(|s| *s == State::Done) {
            return WorkgroupOutcome::Completed {
                instructions: executed,
            };
        }
        if !progressed || !state.contains(&State::Ready) {
            // Every live wave waits at the barrier: release them.
            for s in state.iter_mut() {
                if *s == State::AtBarrier {
                    *s = State::Ready;
                }
            }
        }
    }
}
