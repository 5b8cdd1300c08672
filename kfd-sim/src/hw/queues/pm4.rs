//! The PM4 packets of a compute queue, as kfdtest drives a PM4 queue
//! (`PM4Packet.cpp`, `Dispatch.cpp`) and as ROCr's PM4-IB AQL packet
//! carries them (`AqlQueue::ExecutePM4`), with the layouts of kfdtest's
//! `pm4_pkt_struct_{ci,ai,common}.h` and the kernel's
//! `kfd_pm4_headers_ai.h`:
//!
//! | packet | what the CP does |
//! |---|---|
//! | type-2 filler, NOP (COUNT 0x3FFF: the header alone) | nothing |
//! | WRITE_DATA to memory (dst_sel 5, or TC L2: 2) | write the dwords, incrementing the address or not |
//! | RELEASE_MEM (AI: 8 dwords; CI/VI: 7) | end-of-pipe: write 32/64-bit data or the GPU clock, interrupt with `int_ctxid` (AI) |
//! | EVENT_WRITE_EOP (before AI) | the same, older form |
//! | WAIT_REG_MEM on memory | wait until `(*addr & mask) func reference` |
//! | INDIRECT_BUFFER | run an IB (one level; a preemption inside it resumes there) |
//! | ACQUIRE_MEM, EVENT_WRITE (CS partial flush) | cache and pipeline syncs: nothing without caches or waves |
//! | SET_SH_REG | a dispatch's registers (kept for the dispatch's report) |
//!
//! DISPATCH_DIRECT and DISPATCH_INDIRECT launch a shader, which the
//! simulator cannot run: the queue stops with an error saying so, as does
//! every other packet (register writes, semaphores, a chained IB).
//!
//! This module never touches memory outside the queue's VM snapshot and
//! never changes kernel state.

use kfd_sys::pm4::*;

use super::engine::{Engine, Step};
use super::interrupt::Interrupt;
use super::ring::IbPosition;
use super::sdma::{compare, gpu_clock};

/// `AMDGPU_FAMILY_AI`: RELEASE_MEM grew an `int_ctxid` dword.
const FAMILY_AI: u32 = kfd_sys::AMDGPU_FAMILY_AI;
/// Largest IB the simulator fetches (dwords; IB_SIZE is 20 bits).
const MAX_IB_DWORDS: u32 = 1 << 20;

/// The name of PM4 opcode `op` for errors and traces.
pub(crate) fn op_name(op: u32) -> String {
    match op {
        IT_NOP => "NOP".into(),
        IT_DISPATCH_DIRECT => "DISPATCH_DIRECT".into(),
        IT_DISPATCH_INDIRECT => "DISPATCH_INDIRECT".into(),
        IT_WRITE_DATA => "WRITE_DATA".into(),
        IT_WAIT_REG_MEM => "WAIT_REG_MEM".into(),
        IT_INDIRECT_BUFFER => "INDIRECT_BUFFER".into(),
        IT_EVENT_WRITE => "EVENT_WRITE".into(),
        IT_EVENT_WRITE_EOP => "EVENT_WRITE_EOP".into(),
        IT_RELEASE_MEM => "RELEASE_MEM".into(),
        IT_ACQUIRE_MEM => "ACQUIRE_MEM".into(),
        IT_SET_SH_REG => "SET_SH_REG".into(),
        0x39 => "MEM_SEMAPHORE".into(),
        0x40 => "COPY_DATA".into(),
        0x50 => "DMA_DATA".into(),
        other => format!("opcode {other:#04x}"),
    }
}

/// A packet's length in dwords from its header.
fn length(header: u32) -> Result<usize, String> {
    match header >> PM4_TYPE_SHIFT {
        2 => Ok(1),
        3 => {
            let count = (header >> PM4_COUNT_SHIFT) & PM4_COUNT_MASK;
            let op = (header >> PM4_OPCODE_SHIFT) & PM4_OPCODE_MASK;
            Ok(if op == IT_NOP && count == PM4_NOP_ONE_DWORD_COUNT {
                1
            } else {
                count as usize + 2
            })
        }
        t => Err(format!(
            "type-{t} pm4 packet (header {header:#010x}): register writes are not simulated"
        )),
    }
}

fn addr(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

fn dwords(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|d| u32::from_le_bytes([d[0], d[1], d[2], d[3]]))
        .collect()
}

/// What one packet asks of the queue.
enum Outcome {
    Done,
    Wait,
    EnterIb(IbPosition),
    Step(Step),
}

/// Executes the next packet of a PM4 ring (or of the IB it is in).
pub(crate) fn step(e: &mut Engine<'_>) -> Step {
    if e.regs.ib.is_some() {
        return match ib_step(e) {
            IbStep::Step(s) => s,
            IbStep::Finished => match ring_packet_len(e) {
                // The IB packet in the ring is done.
                Ok(len) => {
                    e.regs.rptr += len as u64;
                    Step::Progress
                }
                Err(s) => s,
            },
        };
    }
    let g = e.cfg.geometry;
    let avail = e.regs.wptr - e.regs.rptr;
    let len = match ring_packet_len(e) {
        Ok(len) => len,
        Err(s) => return s,
    };
    if len as u64 > g.units() {
        return e.hang(
            0,
            format!("pm4 packet of {len} dwords is larger than the ring"),
        );
    }
    if len as u64 > avail {
        return Step::Idle;
    }
    let p = match e.ring_read(e.regs.rptr, len * 4) {
        Ok(b) => dwords(&b),
        Err(f) => return Step::Fault(f, "the pm4 ring".into()),
    };
    match execute(e, &p, false) {
        Outcome::Done => {
            trace(e, &p);
            e.regs.rptr += len as u64;
            Step::Progress
        }
        Outcome::Wait => Step::Wait,
        Outcome::EnterIb(ib) => {
            trace(e, &p);
            e.regs.ib = Some(ib);
            Step::Progress
        }
        Outcome::Step(s) => s,
    }
}

fn trace(e: &Engine<'_>, p: &[u32]) {
    let op = (p[0] >> PM4_OPCODE_SHIFT) & PM4_OPCODE_MASK;
    let name = if p[0] >> PM4_TYPE_SHIFT == 2 {
        "TYPE2".to_owned()
    } else {
        op_name(op)
    };
    e.trace(&name, e.regs.rptr, p);
}

/// The length of the packet at the ring's read pointer.
fn ring_packet_len(e: &mut Engine<'_>) -> Result<usize, Step> {
    let b = e
        .ring_read(e.regs.rptr, 4)
        .map_err(|f| Step::Fault(f, "the pm4 ring".into()))?;
    let header = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    length(header).map_err(|r| e.hang(header, r))
}

/// One step inside an indirect buffer.
pub(crate) enum IbStep {
    /// A packet ran, waits, or failed.
    Step(Step),
    /// The IB's last packet ran: the packet that started it is done.
    Finished,
}

/// Executes the next packet of the IB in `e.regs.ib`.
pub(crate) fn ib_step(e: &mut Engine<'_>) -> IbStep {
    let Some(ib) = e.regs.ib else {
        return IbStep::Finished;
    };
    if ib.pos >= ib.dwords {
        e.regs.ib = None;
        return IbStep::Finished;
    }
    let at = ib.va.wrapping_add(u64::from(ib.pos) * 4);
    let mut b = [0u8; 4];
    if let Err(f) = e.view.read(at, &mut b) {
        return IbStep::Step(Step::Fault(
            f,
            format!("the pm4 indirect buffer at {:#x}", ib.va),
        ));
    }
    let header = u32::from_le_bytes(b);
    let len = match length(header) {
        Ok(len) => len,
        Err(r) => {
            return IbStep::Step(e.hang(
                header,
                format!("{r}, in the indirect buffer at {:#x}", ib.va),
            ))
        }
    };
    if ib.pos as usize + len > ib.dwords as usize {
        return IbStep::Step(e.hang(
            header,
            format!(
                "pm4 packet at dword {} of the {}-dword indirect buffer at {:#x} runs past its end",
                ib.pos, ib.dwords, ib.va
            ),
        ));
    }
    let mut bytes = vec![0u8; len * 4];
    if let Err(f) = e.view.read(at, &mut bytes) {
        return IbStep::Step(Step::Fault(
            f,
            format!("the pm4 indirect buffer at {:#x}", ib.va),
        ));
    }
    let p = dwords(&bytes);
    match execute(e, &p, true) {
        Outcome::Done => {
            trace(e, &p);
            let pos = ib.pos + len as u32;
            e.regs.ib = Some(IbPosition { pos, ..ib });
            if pos >= ib.dwords {
                e.regs.ib = None;
                return IbStep::Finished;
            }
            IbStep::Step(Step::Progress)
        }
        Outcome::Wait => IbStep::Step(Step::Wait),
        Outcome::EnterIb(_) => IbStep::Step(e.hang(
            header,
            "nested pm4 indirect buffer (a compute queue runs one level)".into(),
        )),
        Outcome::Step(s) => IbStep::Step(s),
    }
}

fn execute(e: &mut Engine<'_>, p: &[u32], in_ib: bool) -> Outcome {
    let header = p[0];
    if header >> PM4_TYPE_SHIFT == 2 {
        return Outcome::Done;
    }
    let op = (header >> PM4_OPCODE_SHIFT) & PM4_OPCODE_MASK;
    let name = op_name(op);
    let need = |n: usize| -> Result<(), Outcome> {
        if p.len() < n {
            Err(Outcome::Step(e.hang(
                header,
                format!("pm4 {name} of {} dwords, expected at least {n}", p.len()),
            )))
        } else {
            Ok(())
        }
    };
    match op {
        IT_NOP | IT_ACQUIRE_MEM => Outcome::Done,
        IT_EVENT_WRITE => {
            if let Err(o) = need(2) {
                return o;
            }
            let index = (p[1] >> 8) & 0xF;
            if index == EVENT_INDEX_CS_PARTIAL_FLUSH {
                Outcome::Done
            } else {
                Outcome::Step(e.hang(header, format!("pm4 EVENT_WRITE with event index {index} is not simulated (only the CS partial flush, 4)")))
            }
        }
        IT_SET_SH_REG => {
            if let Err(o) = need(3) {
                return o;
            }
            let first = (p[1] & 0xFFFF) + PERSISTENT_SPACE_START;
            for (i, v) in p[2..].iter().enumerate() {
                let reg = first + i as u32;
                if reg == MMCOMPUTE_PGM_LO || reg == MMCOMPUTE_PGM_LO + 1 {
                    e.sh[(reg - MMCOMPUTE_PGM_LO) as usize] = *v;
                }
            }
            Outcome::Done
        }
        IT_DISPATCH_DIRECT | IT_DISPATCH_INDIRECT => {
            let program = (u64::from(e.sh[0]) | (u64::from(e.sh[1] & 0xFF) << 32)) << 8;
            let what = if op == IT_DISPATCH_DIRECT && p.len() >= 4 {
                format!("a {}x{}x{} grid", p[1], p[2], p[3])
            } else {
                "dimensions from memory".to_owned()
            };
            Outcome::Step(e.hang(
                header,
                format!("pm4 {name} of {what} (program at {program:#x}) needs a shader, which the simulated gpu cannot run"),
            ))
        }
        IT_WRITE_DATA => {
            if let Err(o) = need(5) {
                return o;
            }
            let dst_sel = (p[1] >> 8) & 0xF;
            if dst_sel != 5 && dst_sel != 2 {
                return Outcome::Step(e.hang(
                    header,
                    format!(
                        "pm4 WRITE_DATA to destination {dst_sel} (registers, GDS) is not simulated"
                    ),
                ));
            }
            let dst = addr(p[2], p[3]) & !3;
            let increment = (p[1] >> 16) & 1 == 0;
            let data: Vec<u8> = if increment {
                p[4..].iter().flat_map(|d| d.to_le_bytes()).collect()
            } else {
                // Every dword to the same address: the last one stays.
                p[p.len() - 1].to_le_bytes().to_vec()
            };
            match e.view.write(dst, &data) {
                Ok(()) => Outcome::Done,
                Err(f) => Outcome::Step(Step::Fault(f, format!("pm4 WRITE_DATA to {dst:#x}"))),
            }
        }
        IT_WAIT_REG_MEM => {
            if let Err(o) = need(7) {
                return o;
            }
            let func = p[1] & 7;
            let memory = (p[1] >> 4) & 3 == 1;
            let operation = (p[1] >> 6) & 3;
            if !memory || operation != 0 {
                return if !memory && func == 0 {
                    Outcome::Done
                } else {
                    Outcome::Step(e.hang(
                        header,
                        format!(
                            "pm4 WAIT_REG_MEM on {} (operation {operation}) is not simulated",
                            if memory { "memory" } else { "a register" }
                        ),
                    ))
                };
            }
            let at = addr(p[2], p[3]) & !3;
            let mut b = [0u8; 4];
            if let Err(f) = e.view.read(at, &mut b) {
                return Outcome::Step(Step::Fault(f, format!("pm4 WAIT_REG_MEM of {at:#x}")));
            }
            match compare(func, u32::from_le_bytes(b) & p[5], p[4]) {
                Some(true) => Outcome::Done,
                Some(false) => Outcome::Wait,
                None => Outcome::Step(e.hang(
                    header,
                    format!("pm4 WAIT_REG_MEM with compare function {func}"),
                )),
            }
        }
        IT_INDIRECT_BUFFER => {
            if let Err(o) = need(4) {
                return o;
            }
            if in_ib {
                return Outcome::EnterIb(IbPosition {
                    va: 0,
                    dwords: 0,
                    pos: 0,
                });
            }
            let va = addr(p[1] & !3, p[2] & 0xFFFF);
            let size = p[3] & 0xF_FFFF;
            let chain = p[3] >> 20 & 1 == 1;
            let valid = p[3] >> 23 & 1 == 1;
            if chain || !valid {
                return Outcome::Step(e.hang(
                    header,
                    format!(
                        "pm4 INDIRECT_BUFFER with chain {chain} valid {valid} is not simulated"
                    ),
                ));
            }
            if size == 0 {
                return Outcome::Done;
            }
            Outcome::EnterIb(IbPosition {
                va,
                dwords: size.min(MAX_IB_DWORDS),
                pos: 0,
            })
        }
        IT_RELEASE_MEM => {
            let ai = e.cfg.family >= FAMILY_AI;
            let want = if ai { 8 } else { 7 };
            if p.len() != want {
                return Outcome::Step(e.hang(
                    header,
                    format!(
                        "pm4 RELEASE_MEM of {} dwords; this family's has {want}",
                        p.len()
                    ),
                ));
            }
            let data_sel = p[2] >> 29;
            let int_sel = (p[2] >> 24) & 7;
            let dst_sel = (p[2] >> 16) & 3;
            let at = addr(p[3], p[4]);
            let ctx = ai.then(|| p[7]);
            end_of_pipe(
                e,
                header,
                "RELEASE_MEM",
                (p[1] >> 8) & 0xF,
                dst_sel,
                data_sel,
                int_sel,
                at,
                addr(p[5], p[6]),
                ctx,
            )
        }
        IT_EVENT_WRITE_EOP => {
            if e.cfg.family >= FAMILY_AI {
                return Outcome::Step(e.hang(
                    header,
                    "pm4 EVENT_WRITE_EOP: a GFX9 or later MEC ends a pipe with RELEASE_MEM".into(),
                ));
            }
            if let Err(o) = need(6) {
                return o;
            }
            let data_sel = p[3] >> 29;
            let int_sel = (p[3] >> 24) & 3;
            let at = addr(p[2], p[3] & 0xFFFF);
            end_of_pipe(
                e,
                header,
                "EVENT_WRITE_EOP",
                (p[1] >> 8) & 0xF,
                0,
                data_sel,
                int_sel,
                at,
                addr(p[4], p[5]),
                None,
            )
        }
        _ => Outcome::Step(e.hang(
            header,
            format!("unsupported pm4 packet {name} (header {header:#010x})"),
        )),
    }
}

/// An end-of-pipe event: the fence write, then the interrupt.
#[allow(clippy::too_many_arguments)]
fn end_of_pipe(
    e: &mut Engine<'_>,
    header: u32,
    name: &str,
    event_index: u32,
    dst_sel: u32,
    data_sel: u32,
    int_sel: u32,
    at: u64,
    data: u64,
    ctx: Option<u32>,
) -> Outcome {
    if event_index != EVENT_INDEX_END_OF_PIPE && event_index != EVENT_INDEX_END_OF_PIPE + 1 {
        return Outcome::Step(e.hang(
            header,
            format!("pm4 {name} with event index {event_index} is not simulated"),
        ));
    }
    if dst_sel > 1 {
        return Outcome::Step(e.hang(
            header,
            format!("pm4 {name} to the queue's write pointer (dst_sel {dst_sel}) is not simulated"),
        ));
    }
    let bytes: Option<Vec<u8>> = match data_sel {
        0 => None,
        1 => Some((data as u32).to_le_bytes().to_vec()),
        2 => Some(data.to_le_bytes().to_vec()),
        3 => Some(gpu_clock().to_le_bytes().to_vec()),
        other => {
            return Outcome::Step(e.hang(
                header,
                format!("pm4 {name} with data select {other} is not simulated"),
            ))
        }
    };
    if let Some(b) = bytes {
        let dst = at & !((b.len() as u64) - 1);
        if let Err(f) = e.view.write(dst, &b) {
            return Outcome::Step(Step::Fault(f, format!("pm4 {name} to {dst:#x}")));
        }
    }
    match int_sel {
        0 | 3 => {}
        1 | 2 | 4 => e.interrupt(match ctx {
            Some(id) => Interrupt::Signal {
                partial_id: id,
                valid_bits: 32,
            },
            // Before AI the interrupt carries no context id: the kernel
            // scans every signaled slot.
            None => Interrupt::Signal {
                partial_id: 0,
                valid_bits: 0,
            },
        }),
        other => {
            return Outcome::Step(e.hang(
                header,
                format!("pm4 {name} with conditional interrupt select {other} is not simulated"),
            ))
        }
    }
    Outcome::Done
}
