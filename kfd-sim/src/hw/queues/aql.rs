//! The packet processor of an AQL compute queue (HSA's `hsa.h` packet
//! layouts, ROCr's `amd_hsa_signal.h` and `AqlQueue::ExecutePM4`):
//!
//! * packets are 64-byte slots consumed in order from the read index; a
//!   slot whose header type is INVALID is not ready ("a packet processor
//!   must not process a packet of this type"): the processor waits for the
//!   producer, which writes the header last;
//! * when a packet is done the processor decrements its completion
//!   signal's value (`amd_signal_t.value`, 8 bytes into the signal) with
//!   an atomic instruction (`VmView::fetch_add_u64`), and
//!   for a signal with an event mailbox writes the signal's event id there
//!   and raises an end-of-pipe interrupt with that id; then it sets the
//!   header back to INVALID and advances `read_dispatch_id`, which releases
//!   the slot to producers (ExecutePM4's "advance the read index and
//!   invalidate the packet header");
//! * BARRIER_AND completes when every non-null dependency signal's value is
//!   0, BARRIER_OR when one is (a null handle counts as satisfied); until
//!   then it blocks the queue, so the barrier bit of later packets is
//!   always honoured;
//! * a vendor-specific packet of format `AMD_AQL_FORMAT_PM4_IB` runs the
//!   PM4 INDIRECT_BUFFER command it carries (ROCr's cache invalidations);
//! * KERNEL_DISPATCH runs the kernel on the wavefront interpreter
//!   (`super::shader`), a slice of its instructions per step, and completes
//!   like any packet once its last workgroup ended; a fault or trap in it
//!   stops the queue. AGENT_DISPATCH is for agents, not a GPU.
//!
//! This module never touches memory outside the queue's VM snapshot.

use super::engine::{Engine, Step};
use super::interrupt::Interrupt;
use super::pm4::{ib_step, IbStep};
use super::ring::IbPosition;
use super::shader::Ran;

/// `hsa_packet_type_t`.
const TYPE_VENDOR_SPECIFIC: u16 = 0;
const TYPE_INVALID: u16 = 1;
const TYPE_KERNEL_DISPATCH: u16 = 2;
const TYPE_BARRIER_AND: u16 = 3;
const TYPE_AGENT_DISPATCH: u16 = 4;
const TYPE_BARRIER_OR: u16 = 5;
/// `AMD_AQL_FORMAT_PM4_IB` (ROCr's `amd_aql_pm4_ib.ven_hdr`).
const AMD_AQL_FORMAT_PM4_IB: u16 = 1;
/// Offset of `completion_signal` in every packet type used here.
const COMPLETION_SIGNAL: usize = 56;
/// `amd_signal_t` offsets: `value`, `event_mailbox_ptr`, `event_id`.
const SIGNAL_VALUE: u64 = 8;
const SIGNAL_MAILBOX: u64 = 16;
const SIGNAL_EVENT_ID: u64 = 24;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32_at(b, at)) | (u64::from(u32_at(b, at + 4)) << 32)
}

/// The name of packet type `ty`.
fn type_name(ty: u16) -> &'static str {
    match ty {
        TYPE_VENDOR_SPECIFIC => "VENDOR_SPECIFIC",
        TYPE_INVALID => "INVALID",
        TYPE_KERNEL_DISPATCH => "KERNEL_DISPATCH",
        TYPE_BARRIER_AND => "BARRIER_AND",
        TYPE_AGENT_DISPATCH => "AGENT_DISPATCH",
        TYPE_BARRIER_OR => "BARRIER_OR",
        _ => "an unknown type",
    }
}

/// Processes the packet at the read index.
pub(crate) fn step(e: &mut Engine<'_>) -> Step {
    if e.regs.rptr >= e.regs.wptr && e.regs.ib.is_none() {
        return Step::Idle;
    }
    let g = e.cfg.geometry;
    let slot = match g.read(e.view, e.regs.rptr, 64) {
        Ok(b) => b,
        Err(f) => return Step::Fault(f, "the aql ring".into()),
    };
    let header = u16_at(&slot, 0);
    let ty = header & 0xFF;
    let words: Vec<u32> = (0..16).map(|i| u32_at(&slot, i * 4)).collect();
    match ty {
        TYPE_INVALID => Step::Idle,
        TYPE_BARRIER_AND | TYPE_BARRIER_OR => {
            let mut satisfied = 0;
            let mut deps = 0;
            for i in 0..5 {
                let signal = u64_at(&slot, 8 + i * 8);
                if signal == 0 {
                    continue;
                }
                deps += 1;
                let mut v = [0u8; 8];
                if let Err(f) = e.view.read(signal + SIGNAL_VALUE, &mut v) {
                    return Step::Fault(
                        f,
                        format!("aql {} dependency signal {signal:#x}", type_name(ty)),
                    );
                }
                if i64::from_le_bytes(v) == 0 {
                    satisfied += 1;
                }
            }
            let done = if ty == TYPE_BARRIER_AND {
                satisfied == deps
            } else {
                deps == 0 || satisfied > 0
            };
            if !done {
                return Step::Wait;
            }
            e.trace(type_name(ty), e.regs.rptr, &words);
            complete(e, &slot)
        }
        TYPE_VENDOR_SPECIFIC if u16_at(&slot, 2) == AMD_AQL_FORMAT_PM4_IB => {
            if e.regs.ib.is_none() {
                // ib_jump_cmd[4]: a PM4 INDIRECT_BUFFER at bytes 4..20.
                let cmd = &words[1..5];
                let is_ib =
                    cmd[0] >> 30 == 3 && (cmd[0] >> 8) & 0xFF == kfd_sys::pm4::IT_INDIRECT_BUFFER;
                if !is_ib {
                    return e.hang(
                        u32::from(header),
                        format!(
                            "aql PM4-IB packet whose command {:#010x} is no INDIRECT_BUFFER",
                            cmd[0]
                        ),
                    );
                }
                e.trace("VENDOR_SPECIFIC PM4_IB", e.regs.rptr, &words);
                let size = cmd[3] & 0xF_FFFF;
                e.regs.ib = Some(IbPosition {
                    va: u64::from(cmd[1] & !3) | (u64::from(cmd[2] & 0xFFFF) << 32),
                    dwords: size,
                    pos: 0,
                });
                if size > 0 {
                    return Step::Progress;
                }
            }
            match ib_step(e) {
                IbStep::Step(s) => s,
                IbStep::Finished => complete(e, &slot),
            }
        }
        TYPE_KERNEL_DISPATCH => match super::shader::run(e, &slot, u32::from(header)) {
            Ran::Done => {
                e.trace(type_name(ty), e.regs.rptr, &words);
                complete(e, &slot)
            }
            Ran::Yield => Step::Yield,
            Ran::Stop(step) => step,
        },
        other => e.hang(
            u32::from(header),
            format!(
                "aql {} packet (header {header:#06x}) is not for a gpu's packet processor",
                type_name(other)
            ),
        ),
    }
}

/// Completes the packet in `slot`: signal, header, read index.
fn complete(e: &mut Engine<'_>, slot: &[u8]) -> Step {
    let signal = u64_at(slot, COMPLETION_SIGNAL);
    if signal != 0 {
        // An atomic decrement, as the CP's: the runtime and other queues
        // update the same signal.
        if let Err(f) = e.view.fetch_add_u64(signal + SIGNAL_VALUE, u64::MAX) {
            return Step::Fault(f, format!("aql completion signal {signal:#x}"));
        }
        let mut mailbox = [0u8; 8];
        let mut id = [0u8; 4];
        let read = e
            .view
            .read(signal + SIGNAL_MAILBOX, &mut mailbox)
            .and_then(|()| e.view.read(signal + SIGNAL_EVENT_ID, &mut id));
        if let Err(f) = read {
            return Step::Fault(f, format!("aql completion signal {signal:#x}"));
        }
        let mailbox = u64::from_le_bytes(mailbox);
        if mailbox != 0 {
            let id = u32::from_le_bytes(id);
            if let Err(f) = e.view.write(mailbox, &id.to_le_bytes()) {
                return Step::Fault(
                    f,
                    format!("the event mailbox {mailbox:#x} of signal {signal:#x}"),
                );
            }
            e.interrupt(Interrupt::Signal {
                partial_id: id,
                valid_bits: 32,
            });
        }
    }
    let g = e.cfg.geometry;
    if let Err(f) = g.write(e.view, e.regs.rptr, &TYPE_INVALID.to_le_bytes()) {
        return Step::Fault(f, "the aql ring".into());
    }
    e.regs.rptr += 1;
    Step::Progress
}
