//! The packets of a user-mode SDMA queue: what ROCr 5.2's `BlitSdma` and
//! libhsakmt's kfdtest put on it, with the layouts of ROCr's
//! `sdma_registers.h`, kfdtest's `sdma_pkt_struct.h` and the kernel's
//! `vega10_sdma_pkt_open.h`:
//!
//! | op | packet | dwords | what the engine does |
//! |---|---|---|---|
//! | 0 | NOP | 1 + COUNT (29:16) | nothing (ROCr pads the ring's end with zero dwords) |
//! | 1/0 | COPY LINEAR | 7, 9 with broadcast (bit 27) | copy COUNT(+1 from AI) bytes, at the engine's rate |
//! | 2/0 | WRITE LINEAR | 4 + n | write n dwords (COUNT = n, n − 1 from AI) |
//! | 5 | FENCE | 4 | write the 32-bit data |
//! | 6 | TRAP | 2 | interrupt with 28 bits of context (`SOC15_INTSRC_SDMA_TRAP`) |
//! | 8 | POLL_REGMEM | 6 | wait until `(*addr & mask) func value` (memory), or an HDP flush / an always-true register poll |
//! | 10 | ATOMIC | 8 | `TC_OP_ATOMIC_ADD_RTN_64` (ROCr's signal decrement), atomic with the CPU's updates |
//! | 11 | CONSTANT_FILL | 5 | fill with the dword (fillsize 2) or its low byte (fillsize 0) |
//! | 13 | TIMESTAMP GET / GET_GLOBAL | 3 | write the 64-bit GPU clock |
//! | 17/1 | GCR | 5 | cache control (SDMA 5+: a no-op without caches) |
//!
//! Anything else (INDIRECT, SEM, COND_EXE, PTEPDE, SRBM_WRITE, another
//! atomic, a rectangle copy, a register poll that needs a register, a
//! poll with a finite retry count) stops the queue with an error naming
//! the packet, as an engine that hangs would.
//!
//! This module never touches memory outside the queue's VM snapshot and
//! never changes kernel state.

use kfd_sys::sdma::*;

use crate::hw::sdma::{
    copy_bytes, FaultTrack, COPY_ENDIAN_SWAP_BITS, COPY_UNSUPPORTED_HEADER_BITS,
};

use super::engine::{Engine, Step};
use super::interrupt::Interrupt;

/// The name of SDMA opcode `op` for errors and traces.
pub(crate) fn op_name(op: u32) -> &'static str {
    match op {
        SDMA_OP_NOP => "NOP",
        SDMA_OP_COPY => "COPY",
        SDMA_OP_WRITE => "WRITE",
        SDMA_OP_INDIRECT => "INDIRECT",
        SDMA_OP_FENCE => "FENCE",
        SDMA_OP_TRAP => "TRAP",
        SDMA_OP_SEM => "SEM",
        SDMA_OP_POLL_REGMEM => "POLL_REGMEM",
        SDMA_OP_COND_EXE => "COND_EXE",
        SDMA_OP_ATOMIC => "ATOMIC",
        SDMA_OP_CONST_FILL => "CONST_FILL",
        SDMA_OP_PTEPDE => "PTEPDE",
        SDMA_OP_TIMESTAMP => "TIMESTAMP",
        SDMA_OP_SRBM_WRITE => "SRBM_WRITE",
        SDMA_OP_PRE_EXE => "PRE_EXE",
        16 => "DUMMY_TRAP",
        SDMA_OP_GCR => "GCR",
        _ => "an unknown opcode",
    }
}

/// `AMDGPU_FAMILY_NV`: the first family with SDMA 5 (GCR packets).
const FAMILY_NV: u32 = 143;

/// The value of a POLL_REGMEM / WAIT_REG_MEM compare function.
pub(crate) fn compare(func: u32, value: u32, reference: u32) -> Option<bool> {
    Some(match func {
        0 => true,
        1 => value < reference,
        2 => value <= reference,
        3 => value == reference,
        4 => value != reference,
        5 => value >= reference,
        6 => value > reference,
        _ => return None,
    })
}

fn addr(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// The GPU clock (100 MHz on GFX9, as GET_CLOCK_COUNTERS reports it).
pub(crate) fn gpu_clock() -> u64 {
    crate::hw::clock::now_ns(libc::CLOCK_MONOTONIC_RAW) / 10
}

/// Executes the packet at the read pointer.
pub(crate) fn step(e: &mut Engine<'_>) -> Step {
    let g = e.cfg.geometry;
    let Some((rules, _)) = e.cfg.sdma else {
        return e.hang(0, "an sdma queue without sdma rules".into());
    };
    let avail = e.regs.wptr - e.regs.rptr;
    if avail < 4 {
        return Step::Idle;
    }
    let header = match e.ring_read(e.regs.rptr, 4) {
        Ok(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        Err(f) => return Step::Fault(f, "the sdma ring".into()),
    };
    let op = header & SDMA_PKT_HEADER_op_mask;
    let sub_op = (header >> SDMA_PKT_HEADER_sub_op_shift) & SDMA_PKT_HEADER_sub_op_mask;
    let name = op_name(op);
    let fixed = match op {
        SDMA_OP_NOP => 1 + ((header >> SDMA_PKT_NOP_HEADER_count_shift) & SDMA_PKT_NOP_HEADER_count_mask) as u64,
        SDMA_OP_COPY if sub_op == SDMA_SUBOP_COPY_LINEAR => {
            if header & (1 << SDMA_PKT_COPY_LINEAR_HEADER_broadcast_shift) != 0 {
                9
            } else {
                7
            }
        }
        SDMA_OP_WRITE if sub_op == SDMA_SUBOP_WRITE_LINEAR => 4,
        SDMA_OP_FENCE => 4,
        SDMA_OP_TRAP => 2,
        SDMA_OP_POLL_REGMEM => 6,
        SDMA_OP_ATOMIC => 8,
        SDMA_OP_CONST_FILL => 5,
        SDMA_OP_TIMESTAMP => 3,
        SDMA_OP_GCR if e.cfg.family >= FAMILY_NV && sub_op == SDMA_SUBOP_USER_GCR => 5,
        _ => {
            return e.hang(
                header,
                format!(
                    "unsupported sdma packet {name} (opcode {op}, sub-opcode {sub_op}, header {header:#010x})"
                ),
            )
        }
    };
    // WRITE carries its data after a fixed part: its length is in dword 3.
    let dwords = if op == SDMA_OP_WRITE {
        let count = match e.ring_read(e.regs.rptr + 12, 4) {
            Ok(b) => {
                u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & SDMA_PKT_COPY_LINEAR_COUNT_count_mask
            }
            Err(f) => return Step::Fault(f, "the sdma ring".into()),
        };
        let n = if rules.count_is_bytes_minus_one {
            u64::from(count) + 1
        } else {
            u64::from(count)
        };
        4 + n
    } else {
        fixed
    };
    if dwords * 4 > g.bytes {
        return e.hang(
            header,
            format!(
                "sdma {name} packet of {dwords} dwords is larger than the {}-byte ring",
                g.bytes
            ),
        );
    }
    if dwords * 4 > avail {
        // Not all of it written yet.
        return Step::Idle;
    }
    let bytes = match e.ring_read(e.regs.rptr, (dwords * 4) as usize) {
        Ok(b) => b,
        Err(f) => return Step::Fault(f, "the sdma ring".into()),
    };
    let p: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|d| u32::from_le_bytes([d[0], d[1], d[2], d[3]]))
        .collect();
    let outcome = execute(e, &p, rules);
    if matches!(outcome, Step::Progress) {
        e.trace(name, e.regs.rptr, &p);
        e.regs.rptr += dwords * 4;
    }
    outcome
}

fn execute(e: &mut Engine<'_>, p: &[u32], rules: crate::hw::sdma::SdmaRules) -> Step {
    let header = p[0];
    let op = header & SDMA_PKT_HEADER_op_mask;
    let sub_op = (header >> SDMA_PKT_HEADER_sub_op_shift) & SDMA_PKT_HEADER_sub_op_mask;
    match op {
        SDMA_OP_NOP => Step::Progress,
        SDMA_OP_COPY => {
            let broadcast = header & (1 << SDMA_PKT_COPY_LINEAR_HEADER_broadcast_shift) != 0;
            let bad_bits = header
                & COPY_UNSUPPORTED_HEADER_BITS
                & !(1 << SDMA_PKT_COPY_LINEAR_HEADER_broadcast_shift);
            if bad_bits != 0 {
                return e.hang(header, format!("sdma COPY LINEAR with encrypt/TMZ header bits {bad_bits:#x} is not simulated"));
            }
            if p[2] & COPY_ENDIAN_SWAP_BITS != 0 {
                return e.hang(
                    header,
                    format!("sdma COPY LINEAR requests endian swapping ({:#010x})", p[2]),
                );
            }
            let count = p[1] & SDMA_PKT_COPY_LINEAR_COUNT_count_mask;
            let bytes = match copy_bytes(count, rules, 0) {
                Ok(b) => b,
                Err(m) => return e.hang(header, format!("sdma COPY LINEAR: {m}")),
            };
            let src = addr(p[3], p[4]);
            let mut dsts = vec![addr(p[5], p[6])];
            if broadcast {
                dsts.push(addr(p[7], p[8]));
            }
            let Some(copier) = e.copier.as_deref_mut() else {
                return e.hang(header, "an sdma queue without an engine".into());
            };
            for dst in dsts {
                let mut faults = FaultTrack::default();
                copier.copy(e.view, src, dst, bytes, &mut faults);
                if let Some(f) = faults.first {
                    return Step::Fault(
                        f,
                        format!("sdma COPY LINEAR of {bytes:#x} bytes from {src:#x} to {dst:#x}"),
                    );
                }
            }
            Step::Progress
        }
        SDMA_OP_WRITE => {
            let dst = addr(p[1], p[2]);
            let data: Vec<u8> = p[4..].iter().flat_map(|d| d.to_le_bytes()).collect();
            match e.view.write(dst & !3, &data) {
                Ok(()) => Step::Progress,
                Err(f) => Step::Fault(
                    f,
                    format!("sdma WRITE LINEAR of {} dwords to {dst:#x}", p.len() - 4),
                ),
            }
        }
        SDMA_OP_FENCE => {
            let dst = addr(p[1], p[2]) & !3;
            match e.view.write(dst, &p[3].to_le_bytes()) {
                Ok(()) => Step::Progress,
                Err(f) => Step::Fault(f, format!("sdma FENCE to {dst:#x}")),
            }
        }
        SDMA_OP_TRAP => {
            e.interrupt(Interrupt::Signal {
                partial_id: p[1] & 0x0FFF_FFFF,
                valid_bits: 28,
            });
            Step::Progress
        }
        SDMA_OP_POLL_REGMEM => poll(e, p),
        SDMA_OP_ATOMIC => {
            let operation = header >> 25;
            if operation != SDMA_ATOMIC_ADD64 || header & (1 << 16) != 0 {
                return e.hang(
                    header,
                    format!(
                        "sdma ATOMIC operation {operation}{} is not simulated (only ADD64, 47)",
                        if header & (1 << 16) != 0 {
                            " with loop"
                        } else {
                            ""
                        }
                    ),
                );
            }
            let at = addr(p[1], p[2]);
            // Atomic with the CPU's and other engines' updates of the word.
            match e.view.fetch_add_u64(at, addr(p[3], p[4])) {
                Ok(_) => Step::Progress,
                Err(f) => Step::Fault(f, format!("sdma ATOMIC ADD64 at {at:#x}")),
            }
        }
        SDMA_OP_CONST_FILL => fill(e, p, rules),
        SDMA_OP_TIMESTAMP => {
            if sub_op != SDMA_SUBOP_TIMESTAMP_GET && sub_op != SDMA_SUBOP_TIMESTAMP_GET_GLOBAL {
                return e.hang(
                    header,
                    format!("sdma TIMESTAMP sub-opcode {sub_op} (set) is not simulated"),
                );
            }
            let at = addr(p[1], p[2]);
            match e.view.write(at, &gpu_clock().to_le_bytes()) {
                Ok(()) => Step::Progress,
                Err(f) => Step::Fault(f, format!("sdma TIMESTAMP to {at:#x}")),
            }
        }
        // GCR: write back and invalidate caches the simulator does not have.
        _ => Step::Progress,
    }
}

fn poll(e: &mut Engine<'_>, p: &[u32]) -> Step {
    let header = p[0];
    let func = (header >> SDMA_PKT_POLL_REGMEM_HEADER_func_shift) & 7;
    let memory = header >> SDMA_PKT_POLL_REGMEM_HEADER_mem_poll_shift & 1 == 1;
    let hdp_flush = header >> SDMA_PKT_POLL_REGMEM_HEADER_hdp_flush_shift & 1 == 1;
    let retries = (p[5] >> 16) & 0xFFF;
    if !memory {
        // An HDP flush (the kernel's form sets bit 26; ROCr's
        // `hdp_flush_cmd` polls a register with the always-true function):
        // the simulated GPU has no host data path cache to flush.
        return if hdp_flush || func == 0 {
            Step::Progress
        } else {
            e.hang(
                header,
                format!(
                    "sdma POLL_REGMEM on register {:#x} (function {func}) is not simulated",
                    p[1]
                ),
            )
        };
    }
    if retries != SDMA_POLL_RETRY_FOREVER {
        return e.hang(header, format!("sdma POLL_REGMEM with retry count {retries:#x} is not simulated (only {SDMA_POLL_RETRY_FOREVER:#x}, poll until true)"));
    }
    let at = addr(p[1], p[2]) & !3;
    let mut b = [0u8; 4];
    if let Err(f) = e.view.read(at, &mut b) {
        return Step::Fault(f, format!("sdma POLL_REGMEM of {at:#x}"));
    }
    match compare(func, u32::from_le_bytes(b) & p[4], p[3]) {
        Some(true) => Step::Progress,
        Some(false) => Step::Wait,
        None => e.hang(
            header,
            format!("sdma POLL_REGMEM with compare function {func}"),
        ),
    }
}

fn fill(e: &mut Engine<'_>, p: &[u32], rules: crate::hw::sdma::SdmaRules) -> Step {
    let header = p[0];
    let fillsize = header >> 30;
    let count = u64::from(p[4] & SDMA_PKT_COPY_LINEAR_COUNT_count_mask);
    let dst = addr(p[1], p[2]);
    // COUNT is bytes − 1 from AI on (bytes before); a dword fill ignores
    // its low two bits, so ROCr's `(n − 1) × 4` and the kernel's
    // `bytes − 1` both fill n dwords.
    let (pattern, bytes): (Vec<u8>, u64) = match fillsize {
        2 => {
            let dwords = if rules.count_is_bytes_minus_one {
                (count >> 2) + 1
            } else {
                count >> 2
            };
            (p[3].to_le_bytes().to_vec(), dwords * 4)
        }
        0 => {
            let bytes = if rules.count_is_bytes_minus_one {
                count + 1
            } else {
                count
            };
            (vec![p[3] as u8], bytes)
        }
        _ => {
            return e.hang(
                header,
                format!("sdma CONST_FILL of element size code {fillsize} is not simulated"),
            )
        }
    };
    if bytes > rules.max_copy_bytes {
        return e.hang(
            header,
            format!(
                "sdma CONST_FILL of {bytes:#x} bytes, more than the family maximum {:#x}",
                rules.max_copy_bytes
            ),
        );
    }
    // One piece of the pattern, built once: a piece is a whole number of
    // patterns (1 MiB of 1- or 4-byte patterns), so every piece starts
    // where the pattern does.
    const PIECE: u64 = 1 << 20;
    let piece_len = bytes.min(PIECE) as usize;
    let buf: Vec<u8> = pattern.iter().copied().cycle().take(piece_len).collect();
    let mut done = 0u64;
    while done < bytes {
        let n = (bytes - done).min(PIECE);
        if let Err(f) = e.view.write(dst.wrapping_add(done), &buf[..n as usize]) {
            return Step::Fault(
                f,
                format!("sdma CONST_FILL of {bytes:#x} bytes at {dst:#x}"),
            );
        }
        if let Some(c) = e.copier.as_deref() {
            c.pace(n);
        }
        done += n;
    }
    Step::Progress
}
