//! Decoding SDMA packets from IB dwords: NOP and the 7-dword LINEAR COPY,
//! with the family's COUNT encoding and per-packet limit; everything else is
//! [`Malformed`].
//!
//! Pure functions of the dwords and the family's rules: this module never
//! reads or writes memory and never runs a job.

use kfd_sys::sdma::{
    SDMA_PKT_HEADER_op_mask, SDMA_PKT_HEADER_op_shift, SDMA_PKT_HEADER_sub_op_mask,
    SDMA_PKT_HEADER_sub_op_shift, SDMA_PKT_NOP_HEADER_count_mask, SDMA_PKT_NOP_HEADER_count_shift,
    SDMA_IB_ALIGNMENT, SDMA_OP_COPY, SDMA_OP_NOP, SDMA_PKT_COPY_LINEAR_DWORDS,
    SDMA_SUBOP_COPY_LINEAR,
};

use super::SdmaRules;

/// GFX9+ COPY header bits the simulator refuses rather than ignores:
/// encrypt (16), TMZ (18) and broadcast (27, a different packet layout).
/// The opcodes, field masks and packet size come from [`kfd_sys::sdma`].
pub(crate) const COPY_UNSUPPORTED_HEADER_BITS: u32 = (1 << 16) | (1 << 18) | (1 << 27);
/// Linear copy dword 2: the destination (17:16) and source (25:24) endian
/// swap fields, which the simulator does not implement.
pub(crate) const COPY_ENDIAN_SWAP_BITS: u32 = (0x3 << 16) | (0x3 << 24);
/// The SDMA INDIRECT packet drops the low 5 bits of the IB address.
pub(crate) const IB_ADDRESS_ALIGNMENT: u64 = SDMA_IB_ALIGNMENT;

/// A packet the engine cannot execute. On hardware this hangs the engine;
/// the simulator fails the job with [`JobError::Malformed`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum Malformed {
    /// The IB address is not 32-byte aligned.
    #[error("ib at gpu va {va:#x} is not 32-byte aligned")]
    MisalignedIb {
        /// The IB's VA.
        va: u64,
    },
    /// This family has no 7-dword SDMA linear copy (SI's DMA engine).
    #[error("sdma packets of gpu family {family} are not simulated")]
    UnsupportedFamily {
        /// The `AMDGPU_FAMILY_*` id.
        family: u32,
    },
    /// A packet runs past the end of the IB.
    #[error("packet at ib dword {dword} (opcode {op}) needs {needed} dwords but the ib ends")]
    Truncated {
        /// Index of the header dword.
        dword: usize,
        /// The opcode.
        op: u32,
        /// Dwords the packet needs.
        needed: usize,
    },
    /// An opcode/sub-opcode the simulator does not execute.
    #[error("unsupported sdma packet at ib dword {dword}: header {header:#010x}")]
    Unsupported {
        /// Index of the header dword.
        dword: usize,
        /// The header dword.
        header: u32,
    },
    /// COUNT asks for more bytes than one packet may move.
    #[error("linear copy at ib dword {dword} moves {bytes:#x} bytes, more than the family maximum {max:#x}")]
    CountTooLarge {
        /// Index of the header dword.
        dword: usize,
        /// Bytes the packet asks for.
        bytes: u64,
        /// The family's `copy_max_bytes`.
        max: u64,
    },
    /// Endian swapping was requested in the parameter dword.
    #[error("linear copy at ib dword {dword} requests endian swapping ({parameters:#010x})")]
    EndianSwap {
        /// Index of the header dword.
        dword: usize,
        /// The parameter dword.
        parameters: u32,
    },
}

/// One decoded SDMA packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Packet {
    /// NOP, possibly a burst NOP skipping `skip` following dwords.
    Nop {
        /// Dwords skipped after the header.
        skip: u32,
    },
    /// LINEAR COPY of `bytes` bytes from GPU VA `src` to GPU VA `dst`.
    LinearCopy {
        /// Source GPU VA.
        src: u64,
        /// Destination GPU VA.
        dst: u64,
        /// Bytes to move (already decoded from COUNT per the family).
        bytes: u64,
    },
}

/// The bytes a linear copy's COUNT dword asks for under `rules` (the
/// packet's header at dword `dword`): COUNT + 1 from AI on, COUNT before,
/// at most the family's `copy_max_bytes`.
pub(crate) fn copy_bytes(count: u32, rules: SdmaRules, dword: usize) -> Result<u64, Malformed> {
    let count = u64::from(count);
    let bytes = if rules.count_is_bytes_minus_one {
        count + 1
    } else {
        count
    };
    if bytes > rules.max_copy_bytes {
        return Err(Malformed::CountTooLarge {
            dword,
            bytes,
            max: rules.max_copy_bytes,
        });
    }
    Ok(bytes)
}

/// Decode the packet starting at dword `at` of `ib`; returns the packet and
/// the number of dwords it occupies.
pub(crate) fn decode_packet(
    ib: &[u32],
    at: usize,
    rules: SdmaRules,
) -> Result<(Packet, usize), Malformed> {
    if rules.max_copy_bytes == 0 {
        return Err(Malformed::UnsupportedFamily {
            family: rules.family,
        });
    }
    let header = ib[at];
    let op = (header >> SDMA_PKT_HEADER_op_shift) & SDMA_PKT_HEADER_op_mask;
    let sub_op = (header >> SDMA_PKT_HEADER_sub_op_shift) & SDMA_PKT_HEADER_sub_op_mask;
    let remaining = ib.len() - at;
    match op {
        SDMA_OP_NOP => {
            let skip = (header >> SDMA_PKT_NOP_HEADER_count_shift) & SDMA_PKT_NOP_HEADER_count_mask;
            let needed = 1 + skip as usize;
            if needed > remaining {
                return Err(Malformed::Truncated {
                    dword: at,
                    op,
                    needed,
                });
            }
            Ok((Packet::Nop { skip }, needed))
        }
        SDMA_OP_COPY
            if sub_op == SDMA_SUBOP_COPY_LINEAR && header & COPY_UNSUPPORTED_HEADER_BITS == 0 =>
        {
            if remaining < SDMA_PKT_COPY_LINEAR_DWORDS {
                return Err(Malformed::Truncated {
                    dword: at,
                    op,
                    needed: SDMA_PKT_COPY_LINEAR_DWORDS,
                });
            }
            let bytes = copy_bytes(ib[at + 1], rules, at)?;
            let parameters = ib[at + 2];
            if parameters & COPY_ENDIAN_SWAP_BITS != 0 {
                return Err(Malformed::EndianSwap {
                    dword: at,
                    parameters,
                });
            }
            let src = u64::from(ib[at + 3]) | (u64::from(ib[at + 4]) << 32);
            let dst = u64::from(ib[at + 5]) | (u64::from(ib[at + 6]) << 32);
            Ok((
                Packet::LinearCopy { src, dst, bytes },
                SDMA_PKT_COPY_LINEAR_DWORDS,
            ))
        }
        _ => Err(Malformed::Unsupported { dword: at, header }),
    }
}
