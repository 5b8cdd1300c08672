//! An AQL KERNEL_DISPATCH executed by the wavefront interpreter
//! (`gfx9_isa::exec`), as the CP's dispatcher and the shader engines run it:
//!
//! * the packet's `kernel_object` is the GPU VA of the 64-byte AMDHSA
//!   kernel descriptor, read through the queue's VM view like the packet
//!   itself; grid and workgroup sizes, the kernarg address and the dynamic
//!   LDS (`group_segment_size`) come from the packet; the instruction set
//!   is the GPU's (`gfx_target_version`);
//! * the waves' initial state follows AMDGPUUsage "Initial Kernel Execution
//!   State": the dispatch pointer is the packet's slot in the ring, the
//!   queue pointer ROCr's `amd_queue_t` (whose `read_dispatch_id`, 128
//!   bytes in, is the queue's read pointer address), the dispatch id the
//!   packet's index, the flat apertures `kfd_init_apertures_v9`'s;
//! * global, flat and instruction memory is the process's GPU VM (BO-backed
//!   VRAM and GTT, userptr pages) through [`VmMemory`]; atomics are
//!   [`VmView::update`]'s, atomic against the host and every other engine;
//! * workgroups run one after another, the waves of one in turn, meeting at
//!   `s_barrier`; at most [`SLICE`] wave-instructions run per engine step,
//!   then the step yields with the dispatch's state kept in [`InFlight`], so
//!   a preemption or suspension parks the queue inside a long dispatch and
//!   a resume continues it. The state lives in the engine's thread, not in
//!   the MQD: a queue restored into another process (a checkpoint taken
//!   mid-dispatch) runs the dispatch again from its first workgroup, where
//!   the hardware restores the waves from the control stack (CWSR);
//! * a wave's memory fault stops the queue with a GPU VM fault (the
//!   memory-exception event the kernel reports for one) unless it goes
//!   away with a fresh view of the VM (one mapped since the engine's last
//!   view): the engine retries once, the wave replaying the faulting
//!   instruction as an XNACK replay does; an `s_trap`, an
//!   illegal or unimplemented instruction stops it with an error naming the
//!   wave, the instruction and its PC;
//! * scratch: ROCr hands the CP a queue's scratch through `amd_queue_t`
//!   (`scratch_resource_descriptor`, `scratch_backing_memory_location`),
//!   growing it when the CP reports a dispatch that needs more; the
//!   simulated GPU does not model that yet, so a kernel with a private
//!   segment stops the queue with an error saying so, and the private
//!   segment buffer and flat scratch SGPRs of a kernel without one are
//!   zero (a scratch access faults, never lands somewhere);
//! * the packet completes as every AQL packet does (its completion signal
//!   decremented, its header invalidated): packets run one at a time in
//!   order, so the barrier bit always holds, and the simulated memory is
//!   coherent, so the acquire and release fences need no cache operation.

use std::time::Instant;

use gfx9_isa::exec::{
    AqlDispatch, AtomicOp, Clock, CodeCache, Dispatch, ExecError, KernelDescriptor, Lds, MemFault,
    Memory, Stop, Wave,
};
use gfx9_isa::Target;

use crate::hw::sdma::{Rmw, VmFault, VmView};

use super::engine::{Engine, Step};

/// Wave-instructions a dispatch runs per engine step before it yields.
pub(crate) const SLICE: u64 = 1 << 20;

/// Byte offset of `read_dispatch_id` in ROCr's `amd_queue_t`, whose address
/// the queue was created with as its read pointer.
const AMD_QUEUE_READ_DISPATCH_ID: u64 = 128;

/// The instruction set of a GPU of `gfx_target_version` (major * 10000 +
/// minor * 100 + stepping), when the interpreter has it.
pub(crate) fn target_of(gfx_target_version: u32) -> Option<Target> {
    let (major, minor, stepping) = (
        gfx_target_version / 10000,
        gfx_target_version / 100 % 100,
        gfx_target_version % 100,
    );
    let name = format!("gfx{major}{minor}{stepping:x}");
    Target::from_name(&name)
}

/// The process's GPU VM as a wave sees it.
pub(crate) struct VmMemory<'a> {
    view: &'a VmView,
}

impl<'a> VmMemory<'a> {
    pub(crate) fn new(view: &'a VmView) -> Self {
        VmMemory { view }
    }
}

fn mem_fault(f: VmFault, access: gfx9_isa::exec::Access) -> MemFault {
    MemFault { addr: f.va, access }
}

impl Memory for VmMemory<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        self.view
            .read(addr, buf)
            .map_err(|f| mem_fault(f, gfx9_isa::exec::Access::Read))
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        self.view
            .write(addr, data)
            .map_err(|f| mem_fault(f, gfx9_isa::exec::Access::Write))
    }
    fn atomic32(&mut self, addr: u64, op: AtomicOp, src: u32, cmp: u32) -> Result<u32, MemFault> {
        let f = move |old: u64| u64::from(op.apply32(old as u32, src, cmp));
        self.view
            .update(addr, Rmw { wide: false, f: &f })
            .map(|old| old as u32)
            .map_err(|f| mem_fault(f, gfx9_isa::exec::Access::Atomic))
    }
    fn atomic64(&mut self, addr: u64, op: AtomicOp, src: u64, cmp: u64) -> Result<u64, MemFault> {
        let f = move |old: u64| op.apply64(old, src, cmp);
        self.view
            .update(addr, Rmw { wide: true, f: &f })
            .map_err(|f| mem_fault(f, gfx9_isa::exec::Access::Atomic))
    }
}

/// The shader clocks: `s_memtime` counts nanoseconds since the dispatch
/// began (a 1 GHz shader clock), `s_memrealtime` the 100 MHz reference
/// clock.
#[derive(Debug)]
struct HostClock(Instant);

impl Clock for HostClock {
    fn memtime(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
    fn memrealtime(&self) -> u64 {
        self.memtime() / 10
    }
}

/// Where a wave of the running workgroup is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaveState {
    Ready,
    AtBarrier,
    Done,
}

/// The running workgroup.
#[derive(Debug)]
struct Group {
    waves: Vec<Wave>,
    state: Vec<WaveState>,
    lds: Lds,
}

/// A dispatch the queue is inside of: kept by the engine's thread across
/// its steps and parks.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// The read pointer of its packet.
    at: u64,
    dispatch: Dispatch,
    /// The linear index of the next workgroup to start.
    next: u64,
    group: Option<Group>,
    cache: CodeCache,
    clock: HostClock,
}

/// What running a dispatch for one step came to.
pub(crate) enum Ran {
    /// Every workgroup ended.
    Done,
    /// A step's work ran; more is left.
    Yield,
    /// The dispatch cannot go on.
    Stop(Step),
}

/// Runs the KERNEL_DISPATCH packet in `slot` (at the read pointer) for up
/// to [`SLICE`] wave-instructions.
pub(crate) fn run(e: &mut Engine<'_>, slot: &[u8], header: u32) -> Ran {
    let at = e.regs.rptr;
    if e.shader.as_ref().is_none_or(|f| f.at != at) {
        match start(e, slot, header) {
            Ok(f) => *e.shader = Some(f),
            Err(step) => return Ran::Stop(step),
        }
    }
    let Some(f) = e.shader.as_mut() else {
        return Ran::Stop(e.hang(header, "aql KERNEL_DISPATCH lost its state".into()));
    };
    let outcome = slice(f, e.view);
    match outcome {
        Ok(true) => {
            *e.shader = None;
            Ran::Done
        }
        Ok(false) => Ran::Yield,
        // The faulting wave stays at its instruction: the engine retries
        // once with a fresh view of the VM (a mapping made since its last
        // one), else stops the queue.
        Err(Failure::Fault(fault, what)) => Ran::Stop(Step::Fault(fault, what)),
        Err(Failure::Hang(reason)) => {
            *e.shader = None;
            Ran::Stop(e.hang(header, reason))
        }
    }
}

/// The name of a dispatch in errors.
fn name(d: &Dispatch) -> String {
    format!(
        "aql KERNEL_DISPATCH of kernel {:#x} ({}x{}x{} grid in {}x{}x{} workgroups)",
        d.kernel_object,
        d.grid[0],
        d.grid[1],
        d.grid[2],
        d.workgroup[0],
        d.workgroup[1],
        d.workgroup[2]
    )
}

/// Sets up the dispatch of the packet in `slot`.
fn start(e: &Engine<'_>, slot: &[u8], header: u32) -> Result<InFlight, Step> {
    let aql = AqlDispatch::parse(slot)
        .map_err(|err| e.hang(header, format!("aql KERNEL_DISPATCH packet: {err}")))?;
    let object = aql.kernel_object;
    let what = || {
        format!(
            "aql KERNEL_DISPATCH of kernel {object:#x} ({}x{}x{} grid in {}x{}x{} workgroups)",
            aql.grid[0],
            aql.grid[1],
            aql.grid[2],
            aql.workgroup[0],
            aql.workgroup[1],
            aql.workgroup[2]
        )
    };
    let mut kd = [0u8; 64];
    e.view
        .read(object, &mut kd)
        .map_err(|f| Step::Fault(f, format!("the kernel descriptor of {}", what())))?;
    let descriptor =
        KernelDescriptor::parse(&kd).map_err(|err| e.hang(header, format!("{}: {err}", what())))?;
    let Some(target) = e.cfg.target else {
        return Err(e.hang(
            header,
            format!(
                "{}: the gpu (gfx_target_version {}) has no instruction set the simulated shader runs",
                what(),
                e.cfg.gfx_target_version
            ),
        ));
    };
    let private = descriptor
        .private_segment_fixed_size
        .max(aql.private_segment_size);
    if private > 0 {
        return Err(e.hang(
            header,
            format!(
                "{}: the kernel needs a private segment of {private} bytes per work-item, and the simulated gpu does not set up an aql queue's scratch",
                what()
            ),
        ));
    }
    let g = e.cfg.geometry;
    let dispatch = Dispatch {
        target,
        descriptor,
        kernel_object: object,
        grid: aql.grid,
        workgroup: aql.workgroup,
        group_segment_size: aql
            .group_segment_size
            .max(descriptor.group_segment_fixed_size),
        kernarg_address: aql.kernarg_address,
        dispatch_packet: g.base.wrapping_add((e.regs.rptr % g.units()) * 64),
        queue: g.rptr_addr.wrapping_sub(AMD_QUEUE_READ_DISPATCH_ID),
        dispatch_id: e.regs.rptr,
        private_segment_buffer: [0; 4],
        scratch_base: 0,
        scratch_wave_bytes: 0,
        apertures: gfx9_isa::exec::Apertures {
            shared_base: crate::hw::LDS_BASE,
            private_base: crate::hw::SCRATCH_BASE,
        },
    };
    dispatch
        .check()
        .map_err(|err| e.hang(header, format!("{}: {err}", what())))?;
    Ok(InFlight {
        at: e.regs.rptr,
        dispatch,
        next: 0,
        group: None,
        cache: CodeCache::new(),
        clock: HostClock(Instant::now()),
    })
}

enum Failure {
    Fault(VmFault, String),
    Hang(String),
}

/// Runs `f` for up to [`SLICE`] wave-instructions; `Ok(true)` when every
/// workgroup ended.
fn slice(f: &mut InFlight, view: &VmView) -> Result<bool, Failure> {
    let d = &f.dispatch;
    let counts = d.workgroups();
    let total = u64::from(counts[0]) * u64::from(counts[1]) * u64::from(counts[2]);
    let mut mem = VmMemory::new(view);
    let mut budget = SLICE;
    while f.next < total {
        let index = f.next;
        let id = [
            (index % u64::from(counts[0])) as u32,
            (index / u64::from(counts[0]) % u64::from(counts[1])) as u32,
            (index / (u64::from(counts[0]) * u64::from(counts[1]))) as u32,
        ];
        let group = match f.group.as_mut() {
            Some(g) => g,
            None => {
                let n = d.waves_in(id);
                let waves: Vec<Wave> = (0..n)
                    .map(|k| d.wave(id, k, u64::from(k)))
                    .collect::<Result<_, _>>()
                    .map_err(|err| Failure::Hang(format!("{}: {err}", name(d))))?;
                f.group.insert(Group {
                    state: vec![WaveState::Ready; waves.len()],
                    waves,
                    lds: Lds::new(d.group_segment_size as usize),
                })
            }
        };
        loop {
            if group.state.iter().all(|s| *s == WaveState::Done) {
                break;
            }
            if !group.state.contains(&WaveState::Ready) {
                // Every live wave waits at the barrier: release them.
                for s in group.state.iter_mut() {
                    if *s == WaveState::AtBarrier {
                        *s = WaveState::Ready;
                    }
                }
            }
            for k in 0..group.waves.len() {
                if group.state[k] != WaveState::Ready {
                    continue;
                }
                if budget == 0 {
                    return Ok(false);
                }
                let w = &mut group.waves[k];
                let before = w.retired;
                let r = w.run(&mut f.cache, &mut mem, &mut group.lds, &f.clock, budget);
                budget = budget.saturating_sub(w.retired - before);
                match r {
                    Ok(Stop::Endpgm) => group.state[k] = WaveState::Done,
                    Ok(Stop::Barrier) => group.state[k] = WaveState::AtBarrier,
                    Ok(Stop::Yield) => {}
                    Ok(Stop::Trap(code)) => {
                        return Err(Failure::Hang(format!(
                            "{}: wave {k} of workgroup {id:?} executed s_trap {code} at pc {:#x}",
                            name(d),
                            w.pc.wrapping_sub(4)
                        )))
                    }
                    Err(ExecError::MemoryFault {
                        addr,
                        access,
                        opcode,
                        pc,
                    }) => {
                        // Replayed from the instruction if the engine
                        // retries (an XNACK replay).
                        w.pc = pc;
                        return Err(Failure::Fault(
                            VmFault {
                                va: addr,
                                write: access != "read",
                            },
                            format!(
                            "{} ({access} by {opcode} at pc {pc:#x}, wave {k} of workgroup {id:?})",
                            name(d)
                        ),
                        ));
                    }
                    Err(err) => {
                        return Err(Failure::Hang(format!(
                            "{}: wave {k} of workgroup {id:?}: {err}",
                            name(d)
                        )))
                    }
                }
            }
        }
        f.group = None;
        f.next += 1;
    }
    Ok(true)
}
