//! The simulated SDMA engines: IB decoding, copy execution and fences.
//!
//! A command submission on a render node becomes a `Job`: the IBs to run,
//! a snapshot of the submitting file's GPU VM (`VmView`) and a `Fence`.
//! Each GPU ring has a worker thread (started on first use) that fetches the
//! IB through the VM, decodes the SDMA packets and performs the copies on the
//! memory the VM maps, at a configurable bandwidth, then signals the fence.
//!
//! The VM is snapshotted at submission time, which matches the kernel: page
//! table updates from a later `GEM_VA` UNMAP are ordered after the jobs
//! already submitted on that VM, and the snapshot keeps the BOs' memory alive
//! until the job is done.
//!
//! Error model (what `WAIT_CS` reports for a failed job, see `JobError`):
//! a malformed packet hangs a real engine until the scheduler's job timeout,
//! and the kernel marks the guilty job's fence `-ETIME`; an access outside
//! every mapping is a VM fault: the write is dropped, the fault is recorded
//! (count and address) and the job's fence fails with `-ECANCELED`, as for a
//! job killed by recovery. A real kernel with `amdgpu.vm_fault_stop=0` only
//! logs such a fault; the simulator fails the fence so that a copy into
//! unmapped VA is never silent.
//!
//! What the engine executes (everything else fails the job as malformed):
//! NOP (op 0; bits 29:16 skip that many following dwords) and the 7-dword
//! LINEAR COPY (op 1, sub-op 0) with COUNT = bytes − 1 from family AI on
//! and COUNT = bytes before, at most the family's `copy_max_bytes` per
//! packet (0x1FFFFF CIK, 0x3FFFE0 VI/CZ, 0x400000 AI+), no encrypt / TMZ /
//! broadcast header bits and no endian swap. SI's DMA packet format is not
//! simulated. IBs must start 32-byte aligned (the INDIRECT packet drops the
//! low 5 bits of the address; the simulator fails the job instead of
//! running garbage) and are read through the VM like any other access.
//! Reads of a PRT range return zeros; a read of unmapped VA drops the
//! corresponding write as well. Jobs of one ring run in submission order.
//!
//! This module must never touch memory outside the ranges a `VmView`
//! maps, and never decides about ioctl arguments (the DRM module validates
//! them before a job exists).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kfd_sys::sdma::{
    SDMA_PKT_HEADER_op_mask, SDMA_PKT_HEADER_op_shift, SDMA_PKT_HEADER_sub_op_mask,
    SDMA_PKT_HEADER_sub_op_shift, SDMA_PKT_NOP_HEADER_count_mask, SDMA_PKT_NOP_HEADER_count_shift,
    SDMA_CIK_COPY_MAX_BYTES, SDMA_IB_ALIGNMENT, SDMA_OP_COPY, SDMA_OP_NOP,
    SDMA_PKT_COPY_LINEAR_DWORDS, SDMA_SUBOP_COPY_LINEAR, SDMA_V3_0_COPY_MAX_BYTES,
    SDMA_V4_COPY_MAX_BYTES,
};
use kfd_sys::{
    AMDGPU_FAMILY_AI, AMDGPU_FAMILY_CI, AMDGPU_FAMILY_CZ, AMDGPU_FAMILY_KV, AMDGPU_FAMILY_SI,
    AMDGPU_FAMILY_VI,
};

/// What the simulator derives from a GPU's `gfx_target_version`
/// (`major*10000 + minor*100 + stepping`, e.g. 90402 for gfx942).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GpuGeneration {
    gfx_target_version: u64,
    family: u32,
}

impl GpuGeneration {
    /// The generation of a GPU whose topology reports `gfx_target_version`
    /// (its family from [`crate::family::simulated_family`]).
    pub(crate) fn from_gfx_target_version(gfx_target_version: u64) -> Self {
        let family = crate::family::simulated_family(gfx_target_version);
        GpuGeneration {
            gfx_target_version,
            family,
        }
    }

    /// The `AMDGPU_FAMILY_*` id DEV_INFO reports.
    pub(crate) fn family(&self) -> u32 {
        self.family
    }

    /// The `gfx_target_version` this generation was derived from.
    pub(crate) fn gfx_target_version(&self) -> u64 {
        self.gfx_target_version
    }

    /// Whether this is family AI (GFX9) or later.
    pub(crate) fn is_ai_or_later(&self) -> bool {
        self.family >= AMDGPU_FAMILY_AI
    }

    /// The GPU VM size in bytes: 48 bits with 4-level page tables on GFX9+,
    /// the 40-bit maximum of the older GMCs below.
    pub(crate) fn vm_bytes(&self) -> u64 {
        if self.is_ai_or_later() {
            1 << 48
        } else {
            1 << 40
        }
    }

    /// The SDMA packet rules of this generation.
    pub(crate) fn sdma_rules(&self) -> SdmaRules {
        let max_copy_bytes = u64::from(match self.family {
            AMDGPU_FAMILY_SI => 0,
            AMDGPU_FAMILY_CI | AMDGPU_FAMILY_KV => SDMA_CIK_COPY_MAX_BYTES,
            // SDMA 2.4 (Iceland) allows 0x1FFFFF, SDMA 3.0 0x3FFFE0; the
            // topology cannot tell them apart, so take the SDMA 3.0 limit.
            AMDGPU_FAMILY_VI | AMDGPU_FAMILY_CZ => SDMA_V3_0_COPY_MAX_BYTES,
            _ => SDMA_V4_COPY_MAX_BYTES,
        });
        SdmaRules {
            family: self.family,
            count_is_bytes_minus_one: self.is_ai_or_later(),
            max_copy_bytes,
        }
    }
}

/// How a generation's SDMA encodes and bounds a LINEAR COPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SdmaRules {
    family: u32,
    /// COUNT holds `bytes - 1` (AI and later) rather than `bytes`.
    pub(crate) count_is_bytes_minus_one: bool,
    /// `copy_max_bytes`: the most bytes one packet may move (0 = no
    /// 7-dword linear copy on this family, i.e. SI's DMA engine).
    pub(crate) max_copy_bytes: u64,
}

/// GFX9+ COPY header bits the simulator refuses rather than ignores:
/// encrypt (16), TMZ (18) and broadcast (27, a different packet layout).
/// The opcodes, field masks and packet size come from [`kfd_sys::sdma`].
const COPY_UNSUPPORTED_HEADER_BITS: u32 = (1 << 16) | (1 << 18) | (1 << 27);
/// Linear copy dword 2: the destination (17:16) and source (25:24) endian
/// swap fields, which the simulator does not implement.
const COPY_ENDIAN_SWAP_BITS: u32 = (0x3 << 16) | (0x3 << 24);
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
            let count = u64::from(ib[at + 1]);
            let bytes = if rules.count_is_bytes_minus_one {
                count + 1
            } else {
                count
            };
            if bytes > rules.max_copy_bytes {
                return Err(Malformed::CountTooLarge {
                    dword: at,
                    bytes,
                    max: rules.max_copy_bytes,
                });
            }
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

/// Memory the engine can reach through a VM mapping: a BO's backing memfd
/// or host memory pinned by a userptr BO. Accesses go through `read_at` /
/// `write_at`, so the engine never holds references into the memory.
pub(crate) trait DeviceMemory: Send + Sync + fmt::Debug {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Read `buf.len()` bytes at `offset` (inside `size`).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MemoryError>;
    /// Write `data` at `offset` (inside `size`).
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MemoryError>;

    /// The host address of byte 0 when this memory is host memory of this
    /// process that the engine may copy to and from directly (the pages of
    /// a userptr BO); `None` for memory reached only through accesses.
    /// When `Some`, the whole `size` bytes from that address stay valid for
    /// reads and writes while the memory lives.
    fn host_address(&self) -> Option<usize> {
        None
    }

    /// Read `len` bytes at `offset` (inside `size`) straight into host
    /// memory at `dst`, without an intermediate buffer where the memory
    /// allows it.
    ///
    /// # Safety
    /// `dst..dst+len` must be valid for writes for the duration of the call.
    unsafe fn read_to_host(
        &self,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let mut buf = vec![0u8; len];
        self.read_at(offset, &mut buf)?;
        // SAFETY: the caller guarantees `dst..dst+len` is writable; `buf` is
        // a fresh allocation of ours, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, len) };
        Ok(())
    }

    /// Write `len` bytes of host memory at `src` to `offset` (inside
    /// `size`), without an intermediate buffer where the memory allows it.
    ///
    /// # Safety
    /// `src..src+len` must be valid for reads for the duration of the call.
    unsafe fn write_from_host(
        &self,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let mut buf = vec![0u8; len];
        // SAFETY: the caller guarantees `src..src+len` is readable; `buf` is
        // a fresh allocation of ours.
        unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), len) };
        self.write_at(offset, &buf)
    }
}

/// `pread(2)` or `pwrite(2)` of a whole range of a file of `size` bytes,
/// refused when it does not fit, retrying on short transfers and `EINTR`;
/// `io(done, left, offset)` performs one call.
fn whole_range(
    size: u64,
    offset: u64,
    len: usize,
    mut io: impl FnMut(usize, usize, u64) -> isize,
) -> Result<(), MemoryError> {
    let err = MemoryError { offset, len };
    if offset.checked_add(len as u64).is_none_or(|end| end > size) {
        return Err(err);
    }
    let mut done = 0usize;
    while done < len {
        let at = offset.checked_add(done as u64).ok_or(err)?;
        let n = io(done, len - done, at);
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(err);
        }
        done += n as usize;
    }
    Ok(())
}

/// A [`DeviceMemory`] access failed (out of range or an I/O error of the
/// backing file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("device memory access of {len} bytes at offset {offset:#x} failed")]
pub(crate) struct MemoryError {
    /// Offset of the access.
    pub(crate) offset: u64,
    /// Length of the access.
    pub(crate) len: usize,
}

impl DeviceMemory for crate::bo::Memfd {
    fn size(&self) -> u64 {
        crate::bo::Memfd::size(self)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        crate::bo::Memfd::read_at(self, offset, buf).map_err(|_| MemoryError {
            offset,
            len: buf.len(),
        })
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        crate::bo::Memfd::write_at(self, offset, data).map_err(|_| MemoryError {
            offset,
            len: data.len(),
        })
    }
    unsafe fn read_to_host(
        &self,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(self.file());
        // One kernel copy from the memfd's pages into the destination.
        whole_range(
            crate::bo::Memfd::size(self),
            offset,
            len,
            |done, left, at| {
                // SAFETY: the caller guarantees `dst..dst+len` is writable and
                // `done + left == len`; the kernel writes through the raw
                // pointer, no Rust reference to the destination exists.
                unsafe { libc::pread(fd, dst.add(done).cast(), left, at as libc::off_t) }
            },
        )
    }
    unsafe fn write_from_host(
        &self,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(self.file());
        whole_range(
            crate::bo::Memfd::size(self),
            offset,
            len,
            |done, left, at| {
                // SAFETY: the caller guarantees `src..src+len` is readable and
                // `done + left == len`; the kernel reads through the raw pointer.
                unsafe { libc::pwrite(fd, src.add(done).cast(), left, at as libc::off_t) }
            },
        )
    }
}

/// Host memory of this process pinned by a userptr BO (`GEM_USERPTR`).
#[derive(Debug)]
pub(crate) struct UserMemory {
    addr: usize,
    len: usize,
}

impl UserMemory {
    /// Wrap `len` bytes of host memory at `addr`.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid for reads and writes for as long as
    /// the returned object (or any clone of an `Arc` to it) lives. For a
    /// userptr BO this is the caller's promise in `kfd::Driver::ioctl`: host
    /// memory handed to the device stays valid until the device is done.
    pub(crate) unsafe fn new(addr: usize, len: usize) -> Self {
        UserMemory { addr, len }
    }

    fn check(&self, offset: u64, len: usize) -> Result<usize, MemoryError> {
        let err = MemoryError { offset, len };
        let start = usize::try_from(offset).map_err(|_| err)?;
        match start.checked_add(len) {
            Some(end) if end <= self.len => Ok(start),
            _ => Err(err),
        }
    }
}

impl DeviceMemory for UserMemory {
    fn size(&self) -> u64 {
        self.len as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let start = self.check(offset, buf.len())?;
        // SAFETY: `check` keeps the range inside `addr..addr+len`, which
        // `UserMemory::new`'s contract keeps valid while `self` lives; `buf`
        // is our own buffer, so the two cannot overlap. Device memory may be
        // written concurrently by the application, as DMA memory is; the
        // bytes are copied without forming references into it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (self.addr + start) as *const u8,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        let start = self.check(offset, data.len())?;
        // SAFETY: as in `read_at`: the range is inside the pinned host memory
        // and `data` is a separate buffer of ours.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), (self.addr + start) as *mut u8, data.len())
        };
        Ok(())
    }
    fn host_address(&self) -> Option<usize> {
        Some(self.addr)
    }
    unsafe fn read_to_host(
        &self,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let start = self.check(offset, len)?;
        // SAFETY: the source is inside the pinned host memory (`check`), the
        // caller guarantees the destination; `copy` allows the two to overlap
        // (a copy between two userptr BOs over the same pages).
        unsafe { std::ptr::copy((self.addr + start) as *const u8, dst, len) };
        Ok(())
    }
    unsafe fn write_from_host(
        &self,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let start = self.check(offset, len)?;
        // SAFETY: as in `read_to_host`, with the roles swapped.
        unsafe { std::ptr::copy(src, (self.addr + start) as *mut u8, len) };
        Ok(())
    }
}

/// What a VM range shows.
#[derive(Debug, Clone)]
pub(crate) enum RangeBacking {
    /// Memory, starting `offset` bytes into it.
    Memory {
        /// The memory.
        memory: Arc<dyn DeviceMemory>,
        /// Offset of the range's first byte in the memory.
        offset: u64,
    },
    /// A PRT (partially resident) range: reads return zero, writes vanish,
    /// and neither faults.
    Prt,
}

/// One mapped range of a [`VmView`].
#[derive(Debug, Clone)]
pub(crate) struct VmRange {
    /// First GPU VA.
    pub(crate) va: u64,
    /// Length in bytes.
    pub(crate) len: u64,
    /// The PTEs allow reads.
    pub(crate) readable: bool,
    /// The PTEs allow writes.
    pub(crate) writable: bool,
    /// What the range shows.
    pub(crate) backing: RangeBacking,
}

/// A snapshot of one DRM file's GPU VM, as the engine sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct VmView {
    ranges: Vec<VmRange>,
}

/// Which way an access goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// Where a piece of an access lands.
#[derive(Debug, Clone, Copy)]
enum Landing<'a> {
    Memory(&'a dyn DeviceMemory, u64),
    Prt,
    Fault,
}

impl VmView {
    /// A view over `ranges`; overlapping ranges are a caller bug, the later
    /// one (by VA) is then shadowed where they overlap.
    pub(crate) fn new(mut ranges: Vec<VmRange>) -> Self {
        ranges.retain(|r| r.len != 0);
        ranges.sort_by_key(|r| r.va);
        VmView { ranges }
    }

    /// Resolve the longest prefix (≤ `len`, ≥ 1 byte) of an access at `va`
    /// that lands in one place.
    fn resolve(&self, va: u64, len: u64, access: Access) -> (Landing<'_>, u64) {
        let idx = self.ranges.partition_point(|r| r.va <= va);
        let next_start = self.ranges.get(idx).map_or(u64::MAX, |r| r.va);
        let unmapped = || {
            (
                Landing::Fault,
                len.min(next_start.saturating_sub(va)).max(1),
            )
        };
        let Some(range) = idx.checked_sub(1).map(|i| &self.ranges[i]) else {
            return unmapped();
        };
        let into = va - range.va;
        if into >= range.len {
            return unmapped();
        }
        let piece = len.min(range.len - into);
        let allowed = match access {
            Access::Read => range.readable,
            Access::Write => range.writable,
        };
        if !allowed {
            return (Landing::Fault, piece);
        }
        match &range.backing {
            RangeBacking::Prt => (Landing::Prt, piece),
            RangeBacking::Memory { memory, offset } => {
                let start = offset.checked_add(into);
                match start.and_then(|s| s.checked_add(piece).map(|e| (s, e))) {
                    Some((s, e)) if e <= memory.size() => {
                        (Landing::Memory(memory.as_ref(), s), piece)
                    }
                    _ => (Landing::Fault, piece),
                }
            }
        }
    }
}

/// Why a job failed; what `WAIT_CS` returns for its fence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum JobError {
    /// A packet the engine cannot execute (the job "hung").
    #[error("malformed sdma packet: {0}")]
    Malformed(#[from] Malformed),
    /// An access outside every mapping (or against the PTE permissions).
    #[error("gpu vm fault at {va:#x} ({access})")]
    VmFault {
        /// The first faulting VA of the job.
        va: u64,
        /// "read" or "write".
        access: &'static str,
    },
    /// An injected short DMA: the copy stopped early.
    #[error("injected short dma: the copy stopped after {moved:#x} bytes")]
    ShortDma {
        /// Bytes the faulted packet moved.
        moved: u64,
        /// The errno the fence reports.
        errno: i32,
    },
    /// The ring's worker thread is gone.
    #[error("sdma ring worker is gone")]
    RingLost,
}

impl JobError {
    /// The (positive) errno `WAIT_CS` returns for this failure.
    pub(crate) fn errno(&self) -> i32 {
        match self {
            JobError::Malformed(_) => libc::ETIME,
            JobError::VmFault { .. } | JobError::RingLost => libc::ECANCELED,
            JobError::ShortDma { errno, .. } => *errno,
        }
    }

    /// Whether the job hung the engine, which makes its context guilty.
    pub(crate) fn is_hang(&self) -> bool {
        matches!(self, JobError::Malformed(_))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The completion of one job: pending until the ring signals it.
#[derive(Debug, Default)]
pub(crate) struct Fence {
    state: Mutex<Option<Result<(), JobError>>>,
    signaled: Condvar,
}

/// How long `Fence::wait` may block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// Do not block (a timeout already in the past).
    Poll,
    /// Block until this instant.
    At(Instant),
    /// Block until signaled (`WAIT_CS` timeout with the top bit set).
    Infinite,
}

impl Deadline {
    /// The deadline of an absolute CLOCK_MONOTONIC timeout in ns as
    /// `WAIT_CS` takes it (`amdgpu_gem_timeout`).
    pub(crate) fn from_monotonic_ns(timeout_ns: u64) -> Self {
        if (timeout_ns as i64) < 0 {
            return Deadline::Infinite;
        }
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid, writable timespec; CLOCK_MONOTONIC always
        // exists on Linux.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        if rc != 0 {
            return Deadline::Poll;
        }
        let now_ns = (now.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(now.tv_nsec as u64);
        match timeout_ns.checked_sub(now_ns) {
            Some(left) if left > 0 => Deadline::At(Instant::now() + Duration::from_nanos(left)),
            _ => Deadline::Poll,
        }
    }
}

impl Fence {
    /// A new, unsignaled fence.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Fence::default())
    }

    /// Signal the fence with the job's outcome (first signal wins).
    pub(crate) fn signal(&self, outcome: Result<(), JobError>) {
        let mut state = lock(&self.state);
        if state.is_none() {
            *state = Some(outcome);
            self.signaled.notify_all();
        }
    }

    /// The outcome if signaled.
    pub(crate) fn outcome(&self) -> Option<Result<(), JobError>> {
        lock(&self.state).clone()
    }

    /// Wait until signaled or `deadline`; `None` when still busy.
    pub(crate) fn wait(&self, deadline: Deadline) -> Option<Result<(), JobError>> {
        let mut state = lock(&self.state);
        loop {
            if let Some(outcome) = state.as_ref() {
                return Some(outcome.clone());
            }
            state = match deadline {
                Deadline::Poll => return None,
                Deadline::Infinite => self
                    .signaled
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Deadline::At(at) => {
                    let left = at.checked_duration_since(Instant::now())?;
                    self.signaled
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}

/// One IB of a job: `bytes` bytes of packets at GPU VA `va`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ib {
    /// GPU VA of the first dword.
    pub(crate) va: u64,
    /// Size in bytes (the kernel uses `bytes / 4` dwords).
    pub(crate) bytes: u32,
}

/// An injected "short DMA": the job's first copy moves only half its bytes,
/// then the job stops and its fence reports `errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShortDma {
    /// The errno the fence reports.
    pub(crate) errno: i32,
}

/// Called with a job's outcome before its fence signals.
pub(crate) type Completion = Box<dyn FnOnce(&Result<(), JobError>) + Send>;

/// One submission to a ring.
pub(crate) struct Job {
    /// The IBs, run in order.
    pub(crate) ibs: Vec<Ib>,
    /// The submitting file's VM at submission time.
    pub(crate) vm: Arc<VmView>,
    /// Signaled when the job is done.
    pub(crate) fence: Arc<Fence>,
    /// An injected short DMA, if any.
    pub(crate) short_dma: Option<ShortDma>,
    /// Fences that must signal before the job runs (CS dependencies).
    pub(crate) dependencies: Vec<Arc<Fence>>,
    /// Runs with the outcome before the fence signals (guilty context, GPU
    /// reset counter, user fence write).
    pub(crate) on_done: Option<Completion>,
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("ibs", &self.ibs)
            .field("short_dma", &self.short_dma)
            .field("dependencies", &self.dependencies.len())
            .finish_non_exhaustive()
    }
}

/// A GPU VM fault caused by an SDMA access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmFault {
    /// The first VA of the faulting access.
    pub va: u64,
    /// Whether the access was a write (dropped).
    pub write: bool,
}

/// The VM faults one GPU's SDMA engines raised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmFaultLog {
    /// Number of faulting accesses (each contiguous unmapped run counts once).
    pub count: u64,
    /// The first fault.
    pub first: Option<VmFault>,
    /// The most recent fault.
    pub last: Option<VmFault>,
}

/// What a GPU's SDMA engines did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SdmaStats {
    /// Jobs completed (successfully or not).
    pub jobs: u64,
    /// Jobs whose fence reported an error.
    pub failed_jobs: u64,
    /// Bytes written by LINEAR COPY packets.
    pub bytes_copied: u64,
    /// VM faults.
    pub faults: VmFaultLog,
}

/// State shared by a GPU's rings.
#[derive(Debug, Default)]
struct EngineShared {
    /// Bytes per second per ring; 0 = unlimited.
    bandwidth: AtomicU64,
    stats: Mutex<SdmaStats>,
}

impl EngineShared {
    fn record_fault(&self, fault: VmFault) {
        let mut stats = lock(&self.stats);
        stats.faults.count += 1;
        stats.faults.first.get_or_insert(fault);
        stats.faults.last = Some(fault);
    }
}

/// A bandwidth limiter for one ring: a running deadline advanced by the
/// time each chunk takes at the configured rate.
struct Pacer {
    next: Option<Instant>,
}

/// Smallest piece a throttled copy moves between rate checks.
const THROTTLE_CHUNK: u64 = 64 << 10;
/// Largest piece an unthrottled copy moves at once (the bounce buffer size).
const BOUNCE_BYTES: u64 = 1 << 20;

impl Pacer {
    /// Longest single sleep, so a bandwidth change takes effect promptly.
    const SLICE: Duration = Duration::from_millis(10);

    /// Account `bytes` moved and sleep until the configured rate allows the
    /// next piece. Setting the bandwidth to unlimited ends a pending wait.
    fn account(&mut self, bytes: u64, bandwidth: &AtomicU64) {
        let rate = bandwidth.load(Ordering::Relaxed);
        if rate == 0 || bytes == 0 {
            self.next = None;
            return;
        }
        let now = Instant::now();
        // Keep the long-run rate: oversleeping is made up by the next piece,
        // but a backlog older than one slice (a pause, a slow host) is dropped.
        let start = match self.next {
            Some(n) if n + Self::SLICE >= now => n,
            _ => now,
        };
        let nanos = u128::from(bytes) * 1_000_000_000 / u128::from(rate);
        let wait = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        let Some(next) = start.checked_add(wait) else {
            self.next = None;
            return;
        };
        self.next = Some(next);
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            if left.is_zero() || bandwidth.load(Ordering::Relaxed) != rate {
                break;
            }
            std::thread::sleep(left.min(Self::SLICE));
        }
    }
}

/// Executes jobs for one ring (runs on the ring's worker thread).
struct Executor<'a> {
    rules: SdmaRules,
    shared: &'a EngineShared,
    pacer: Pacer,
    bounce: Vec<u8>,
}

/// Per-copy bookkeeping: the first fault, and whether the previous piece
/// faulted (so a contiguous unmapped run counts once).
#[derive(Default)]
struct FaultTrack {
    first: Option<VmFault>,
    in_run: [bool; 2],
}

impl FaultTrack {
    fn hit(&mut self, shared: &EngineShared, side: usize, fault: VmFault) {
        if !self.in_run[side] {
            shared.record_fault(fault);
        }
        self.in_run[side] = true;
        self.first.get_or_insert(fault);
    }
}

impl Executor<'_> {
    fn run(&mut self, job: &Job) -> Result<(), JobError> {
        let mut faults = FaultTrack::default();
        let mut short = job.short_dma;
        for ib in &job.ibs {
            if ib.va % IB_ADDRESS_ALIGNMENT != 0 {
                return Err(Malformed::MisalignedIb { va: ib.va }.into());
            }
            let dwords = self.fetch_ib(&job.vm, *ib)?;
            let mut at = 0;
            while at < dwords.len() {
                let (packet, used) = decode_packet(&dwords, at, self.rules)?;
                if let Packet::LinearCopy { src, dst, bytes } = packet {
                    if let Some(inject) = short.take() {
                        let moved = bytes / 2;
                        self.copy(&job.vm, src, dst, moved, &mut faults);
                        return Err(JobError::ShortDma {
                            moved,
                            errno: inject.errno,
                        });
                    }
                    self.copy(&job.vm, src, dst, bytes, &mut faults);
                }
                at += used;
            }
        }
        match faults.first {
            Some(fault) => Err(JobError::VmFault {
                va: fault.va,
                access: if fault.write { "write" } else { "read" },
            }),
            None => Ok(()),
        }
    }

    /// Read an IB through the VM; a fetch fault fails the job.
    fn fetch_ib(&self, vm: &VmView, ib: Ib) -> Result<Vec<u32>, JobError> {
        let len = u64::from(ib.bytes / 4) * 4;
        let mut bytes = vec![0u8; len as usize];
        let mut done = 0u64;
        while done < len {
            let va = ib.va.wrapping_add(done);
            let (landing, piece) = vm.resolve(va, len - done, Access::Read);
            let buf = &mut bytes[done as usize..(done + piece) as usize];
            let fetched = match landing {
                Landing::Memory(memory, offset) => memory.read_at(offset, buf).is_ok(),
                Landing::Prt => true,
                Landing::Fault => false,
            };
            if !fetched {
                self.shared.record_fault(VmFault { va, write: false });
                return Err(JobError::VmFault { va, access: "read" });
            }
            done += piece;
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|d| u32::from_le_bytes([d[0], d[1], d[2], d[3]]))
            .collect())
    }

    /// Move `bytes` bytes from GPU VA `src` to GPU VA `dst` piece by piece
    /// through a bounded bounce buffer; pieces whose source or destination is
    /// not mapped are dropped and recorded as faults.
    fn copy(&mut self, vm: &VmView, src: u64, dst: u64, bytes: u64, faults: &mut FaultTrack) {
        let mut done = 0u64;
        let mut copied = 0u64;
        faults.in_run = [false; 2];
        while done < bytes {
            let left = bytes - done;
            let bandwidth = self.shared.bandwidth.load(Ordering::Relaxed);
            let chunk = if bandwidth == 0 {
                BOUNCE_BYTES
            } else {
                THROTTLE_CHUNK
            };
            let limit = left.min(chunk);
            let s_va = src.wrapping_add(done);
            let d_va = dst.wrapping_add(done);
            let (from, s_len) = vm.resolve(s_va, limit, Access::Read);
            let (to, d_len) = vm.resolve(d_va, limit, Access::Write);
            let n = s_len.min(d_len);
            let len = n as usize;
            let (read_ok, write_ok) = self.move_piece(from, to, len);
            if read_ok {
                faults.in_run[0] = false;
            } else {
                faults.hit(
                    self.shared,
                    0,
                    VmFault {
                        va: s_va,
                        write: false,
                    },
                );
            }
            if write_ok {
                faults.in_run[1] = false;
                if read_ok && matches!(to, Landing::Memory(..)) {
                    copied += n;
                }
            } else {
                faults.hit(
                    self.shared,
                    1,
                    VmFault {
                        va: d_va,
                        write: true,
                    },
                );
            }
            done += n;
            self.pacer.account(n, &self.shared.bandwidth);
        }
        if copied > 0 {
            lock(&self.shared.stats).bytes_copied += copied;
        }
    }

    /// Move one piece of `len` bytes between two landings; returns whether
    /// the read and the write succeeded (a failed read drops the write, which
    /// is then not a write fault). Host memory on either side is copied to
    /// or from directly: one copy, no bounce buffer.
    fn move_piece(&mut self, from: Landing<'_>, to: Landing<'_>, len: usize) -> (bool, bool) {
        match (from, to) {
            (Landing::Fault, Landing::Fault) => (false, false),
            (Landing::Fault, _) => (false, true),
            (_, Landing::Fault) => (true, false),
            (_, Landing::Prt) => (true, true),
            (Landing::Prt, Landing::Memory(dst, d_off)) => {
                let ok = match dst.host_address() {
                    Some(base) => {
                        // SAFETY: `resolve` keeps `d_off..d_off+len` inside the
                        // destination's size, and a host-address memory is
                        // valid for writes over its whole size.
                        unsafe {
                            std::ptr::write_bytes((base + d_off as usize) as *mut u8, 0, len)
                        };
                        true
                    }
                    None => {
                        let buf = self.bounce(len);
                        buf.fill(0);
                        dst.write_at(d_off, buf).is_ok()
                    }
                };
                (true, ok)
            }
            (Landing::Memory(src, s_off), Landing::Memory(dst, d_off)) => {
                if let Some(base) = dst.host_address() {
                    // SAFETY: `resolve` keeps `d_off..d_off+len` inside the
                    // destination, whose host memory is valid for writes
                    // over its whole size (`UserMemory::new`'s contract).
                    let ok =
                        unsafe { src.read_to_host(s_off, (base + d_off as usize) as *mut u8, len) };
                    (ok.is_ok(), true)
                } else if let Some(base) = src.host_address() {
                    // SAFETY: as above, for reads of the source.
                    let ok = unsafe {
                        dst.write_from_host(d_off, (base + s_off as usize) as *const u8, len)
                    };
                    (true, ok.is_ok())
                } else {
                    let buf = self.bounce(len);
                    if src.read_at(s_off, buf).is_err() {
                        return (false, true);
                    }
                    (true, dst.write_at(d_off, buf).is_ok())
                }
            }
        }
    }

    /// The bounce buffer, at least `len` bytes long.
    fn bounce(&mut self, len: usize) -> &mut [u8] {
        if self.bounce.len() < len {
            self.bounce.resize(len, 0);
        }
        &mut self.bounce[..len]
    }
}

/// A ring's worker: started on first submission.
#[derive(Debug)]
struct RingWorker {
    tx: mpsc::Sender<Job>,
    thread: JoinHandle<()>,
}

/// The SDMA engines of one GPU: one worker per ring.
#[derive(Debug)]
pub(crate) struct SdmaEngine {
    name: String,
    rules: SdmaRules,
    rings: Vec<Mutex<Option<RingWorker>>>,
    shared: Arc<EngineShared>,
}

impl SdmaEngine {
    /// The engines of GPU `name` (used for thread names) with `rings` rings.
    pub(crate) fn new(name: impl Into<String>, rings: u32, rules: SdmaRules) -> Self {
        SdmaEngine {
            name: name.into(),
            rules,
            rings: (0..rings).map(|_| Mutex::new(None)).collect(),
            shared: Arc::new(EngineShared::default()),
        }
    }

    /// Number of rings.
    pub(crate) fn ring_count(&self) -> u32 {
        self.rings.len() as u32
    }

    /// Per-ring bandwidth in bytes/s (`None` = unlimited, the default).
    pub(crate) fn set_bandwidth(&self, bytes_per_second: Option<u64>) {
        self.shared
            .bandwidth
            .store(bytes_per_second.unwrap_or(0), Ordering::Relaxed);
    }

    /// What the engines did so far.
    pub(crate) fn stats(&self) -> SdmaStats {
        lock(&self.shared.stats).clone()
    }

    /// Queue `job` on `ring`. An out-of-range ring or a dead worker signals
    /// the job's fence with an error instead (the DRM layer checks the ring
    /// before building a job).
    pub(crate) fn submit(&self, ring: u32, job: Job) {
        let Some(slot) = self.rings.get(ring as usize) else {
            job.fence.signal(Err(JobError::RingLost));
            return;
        };
        let mut slot = lock(slot);
        if slot.is_none() {
            match self.spawn(ring) {
                Ok(worker) => *slot = Some(worker),
                Err(_) => {
                    job.fence.signal(Err(JobError::RingLost));
                    return;
                }
            }
        }
        let Some(worker) = slot.as_ref() else {
            job.fence.signal(Err(JobError::RingLost));
            return;
        };
        if let Err(mpsc::SendError(job)) = worker.tx.send(job) {
            job.fence.signal(Err(JobError::RingLost));
        }
    }

    fn spawn(&self, ring: u32) -> std::io::Result<RingWorker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let shared = Arc::clone(&self.shared);
        let rules = self.rules;
        let thread = std::thread::Builder::new()
            .name(format!("sdma-{}-ring{ring}", self.name))
            .spawn(move || {
                let mut exec = Executor {
                    rules,
                    shared: &shared,
                    pacer: Pacer { next: None },
                    bounce: Vec::new(),
                };
                while let Ok(mut job) = rx.recv() {
                    for dependency in &job.dependencies {
                        dependency.wait(Deadline::Infinite);
                    }
                    // A bug in the executor must not leave the fence pending
                    // forever (WAIT_CS would hang): it fails the job instead.
                    let outcome =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exec.run(&job)))
                            .unwrap_or(Err(JobError::RingLost));
                    if let Some(on_done) = job.on_done.take() {
                        on_done(&outcome);
                    }
                    {
                        let mut stats = lock(&shared.stats);
                        stats.jobs += 1;
                        if outcome.is_err() {
                            stats.failed_jobs += 1;
                        }
                    }
                    job.fence.signal(outcome);
                }
            })?;
        Ok(RingWorker { tx, thread })
    }
}

impl Drop for SdmaEngine {
    fn drop(&mut self) {
        // Finish queued jobs quickly, then let the workers see the channel close.
        self.set_bandwidth(None);
        for slot in &self.rings {
            if let Some(worker) = lock(slot).take() {
                drop(worker.tx);
                // A worker that panicked already signaled nothing more; its
                // fences were dropped with the channel.
                let _ = worker.thread.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfd_sys::{
        AMDGPU_FAMILY_GC_11_0_0, AMDGPU_FAMILY_GC_11_0_1, AMDGPU_FAMILY_GC_11_5_0,
        AMDGPU_FAMILY_GC_12_0_0, AMDGPU_FAMILY_NV, AMDGPU_FAMILY_RV, AMDGPU_FAMILY_VGH,
    };

    /// Test memory: a heap buffer.
    #[derive(Debug)]
    struct Buffer {
        bytes: Mutex<Vec<u8>>,
    }

    impl Buffer {
        fn new(len: usize, fill: impl Fn(usize) -> u8) -> Arc<Self> {
            Arc::new(Buffer {
                bytes: Mutex::new((0..len).map(fill).collect()),
            })
        }
        fn read(&self) -> Vec<u8> {
            lock(&self.bytes).clone()
        }
    }

    impl DeviceMemory for Buffer {
        fn size(&self) -> u64 {
            lock(&self.bytes).len() as u64
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            let o = offset as usize;
            buf.copy_from_slice(&lock(&self.bytes)[o..o + buf.len()]);
            Ok(())
        }
        fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
            let o = offset as usize;
            lock(&self.bytes)[o..o + data.len()].copy_from_slice(data);
            Ok(())
        }
    }

    fn range(va: u64, memory: &Arc<Buffer>) -> VmRange {
        VmRange {
            va,
            len: memory.size(),
            readable: true,
            writable: true,
            backing: RangeBacking::Memory {
                memory: Arc::clone(memory) as Arc<dyn DeviceMemory>,
                offset: 0,
            },
        }
    }

    fn copy_packet(rules: SdmaRules, src: u64, dst: u64, bytes: u64) -> [u32; 7] {
        let count = if rules.count_is_bytes_minus_one {
            bytes - 1
        } else {
            bytes
        };
        [
            SDMA_OP_COPY,
            count as u32,
            0,
            src as u32,
            (src >> 32) as u32,
            dst as u32,
            (dst >> 32) as u32,
        ]
    }

    fn ib_buffer(dwords: &[u32]) -> Arc<Buffer> {
        let bytes: Vec<u8> = dwords.iter().flat_map(|d| d.to_le_bytes()).collect();
        let len = bytes.len().max(4);
        Buffer::new(len, |i| bytes.get(i).copied().unwrap_or(0))
    }

    fn run_job(engine: &SdmaEngine, vm: VmView, ib_va: u64, ib_bytes: u32) -> Result<(), JobError> {
        let fence = Fence::new();
        engine.submit(
            0,
            Job {
                ibs: vec![Ib {
                    va: ib_va,
                    bytes: ib_bytes,
                }],
                vm: Arc::new(vm),
                fence: Arc::clone(&fence),
                short_dma: None,
                dependencies: Vec::new(),
                on_done: None,
            },
        );
        fence
            .wait(Deadline::Infinite)
            .expect("infinite wait returns the outcome")
    }

    fn memory_range(va: u64, memory: Arc<dyn DeviceMemory>) -> VmRange {
        VmRange {
            va,
            len: memory.size(),
            readable: true,
            writable: true,
            backing: RangeBacking::Memory { memory, offset: 0 },
        }
    }

    /// Memfd to host memory, host to memfd, host to host and
    /// PRT to host take the direct paths; the bytes and the statistics are
    /// those of the bounce-buffer path, across pieces larger than one
    /// bounce buffer and at unaligned offsets.
    #[test]
    fn direct_copies_between_memfds_and_host_memory() {
        let ai = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        let len = 3 * BOUNCE_BYTES as usize + 123;
        let memfd = Arc::new(crate::bo::Memfd::new("sdma-test", len as u64 + 4096).unwrap());
        let pattern: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8 + 1).collect();
        memfd.write_at(5, &pattern).unwrap();
        let mut host = vec![0u8; 2 * len + 4096];
        // SAFETY: `host` outlives every job below (each waits for its fence)
        // and is not otherwise accessed until the jobs are done.
        let user = Arc::new(unsafe { UserMemory::new(host.as_mut_ptr() as usize, host.len()) });
        let (m_va, h_va, p_va) = (0x10_0000_0000u64, 0x20_0000_0000u64, 0x30_0000_0000u64);
        let chunk = BOUNCE_BYTES;
        let mut packets = Vec::new();
        // memfd[5..] -> host[7..], in packets of at most one bounce buffer.
        let mut done = 0u64;
        while done < len as u64 {
            let n = (len as u64 - done).min(chunk);
            packets.extend(copy_packet(ai, m_va + 5 + done, h_va + 7 + done, n));
            done += n;
        }
        // host[7..7+4096] -> host[len+200..], PRT -> host[len+100..+64],
        // host[7..7+len] -> memfd[4096..].
        packets.extend(copy_packet(ai, h_va + 7, h_va + len as u64 + 200, 4096));
        packets.extend(copy_packet(ai, p_va, h_va + len as u64 + 100, 64));
        packets.extend(copy_packet(ai, h_va + 7, m_va + 4096, 4096));
        let ib = ib_buffer(&packets);
        let ib_va = 0x40_0000_0000u64;
        let engine = SdmaEngine::new("test", 1, ai);
        let vm = VmView::new(vec![
            memory_range(m_va, memfd.clone()),
            memory_range(h_va, user.clone()),
            VmRange {
                va: p_va,
                len: 4096,
                readable: true,
                writable: true,
                backing: RangeBacking::Prt,
            },
            range(ib_va, &ib),
        ]);
        host[len + 100..len + 164].fill(0xEE);
        run_job(&engine, vm, ib_va, (packets.len() * 4) as u32).unwrap();
        assert_eq!(&host[7..7 + len], &pattern[..]);
        assert_eq!(&host[len + 200..len + 200 + 4096], &pattern[..4096]);
        assert!(host[len + 100..len + 164].iter().all(|&b| b == 0));
        let mut back = vec![0u8; 4096];
        memfd.read_at(4096, &mut back).unwrap();
        assert_eq!(back, pattern[..4096]);
        let stats = engine.stats();
        assert_eq!(stats.bytes_copied, len as u64 + 4096 + 64 + 4096);
        assert_eq!(stats.faults.count, 0);
        drop(engine);
        drop(host);
    }

    #[test]
    fn families_from_gfx_target_version() {
        let fam = |v| GpuGeneration::from_gfx_target_version(v).family();
        assert_eq!(fam(60001), AMDGPU_FAMILY_SI);
        assert_eq!(fam(70001), AMDGPU_FAMILY_CI);
        assert_eq!(fam(70000), AMDGPU_FAMILY_KV);
        assert_eq!(fam(80003), AMDGPU_FAMILY_VI);
        assert_eq!(fam(80100), AMDGPU_FAMILY_CZ);
        assert_eq!(fam(90000), AMDGPU_FAMILY_AI);
        assert_eq!(fam(90008), AMDGPU_FAMILY_AI);
        assert_eq!(fam(90010), AMDGPU_FAMILY_AI);
        assert_eq!(fam(90402), AMDGPU_FAMILY_AI);
        assert_eq!(fam(90002), AMDGPU_FAMILY_RV);
        assert_eq!(fam(90012), AMDGPU_FAMILY_RV);
        assert_eq!(fam(100100), AMDGPU_FAMILY_NV);
        assert_eq!(fam(100300), AMDGPU_FAMILY_NV);
        assert_eq!(fam(100303), AMDGPU_FAMILY_VGH);
        assert_eq!(fam(110000), AMDGPU_FAMILY_GC_11_0_0);
        // 110001 is Navi32 (GC 11.0.3), a dGPU; Phoenix (GC 11.0.1) is 110003.
        assert_eq!(fam(110001), AMDGPU_FAMILY_GC_11_0_0);
        assert_eq!(fam(110003), AMDGPU_FAMILY_GC_11_0_1);
        assert_eq!(fam(110500), AMDGPU_FAMILY_GC_11_5_0);
        assert_eq!(fam(120001), AMDGPU_FAMILY_GC_12_0_0);
        let vi = GpuGeneration::from_gfx_target_version(80003);
        assert!(!vi.sdma_rules().count_is_bytes_minus_one);
        assert_eq!(vi.vm_bytes(), 1 << 40);
        let ai = GpuGeneration::from_gfx_target_version(90402);
        assert!(ai.sdma_rules().count_is_bytes_minus_one);
        assert_eq!(ai.sdma_rules().max_copy_bytes, 0x40_0000);
        assert_eq!(ai.vm_bytes(), 1 << 48);
    }

    #[test]
    fn decode_count_per_family() {
        let ai = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        let ci = GpuGeneration::from_gfx_target_version(70001).sdma_rules();
        let p = copy_packet(ai, 0x1_0000_2000, 0x3000, 0x1000);
        assert_eq!(p[1], 0xFFF);
        assert_eq!(
            decode_packet(&p, 0, ai).unwrap(),
            (
                Packet::LinearCopy {
                    src: 0x1_0000_2000,
                    dst: 0x3000,
                    bytes: 0x1000
                },
                7
            )
        );
        // The same dwords mean one byte less on a pre-AI engine.
        assert_eq!(
            decode_packet(&p, 0, ci).unwrap().0,
            Packet::LinearCopy {
                src: 0x1_0000_2000,
                dst: 0x3000,
                bytes: 0xFFF
            }
        );
        let max = copy_packet(ai, 0, 0, 0x40_0000);
        assert!(decode_packet(&max, 0, ai).is_ok());
        let mut over = max;
        over[1] += 1;
        assert!(matches!(
            decode_packet(&over, 0, ai),
            Err(Malformed::CountTooLarge { .. })
        ));
        let over_ci = copy_packet(ci, 0, 0, 0x20_0000);
        assert!(matches!(
            decode_packet(&over_ci, 0, ci),
            Err(Malformed::CountTooLarge { max: 0x1F_FFFF, .. })
        ));
    }

    #[test]
    fn decode_nops_and_malformed() {
        let ai = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        assert_eq!(
            decode_packet(&[0], 0, ai).unwrap(),
            (Packet::Nop { skip: 0 }, 1)
        );
        let burst = [2 << 16, 0xDEAD, 0xBEEF];
        assert_eq!(
            decode_packet(&burst, 0, ai).unwrap(),
            (Packet::Nop { skip: 2 }, 3)
        );
        assert!(matches!(
            decode_packet(&burst[..2], 0, ai),
            Err(Malformed::Truncated { .. })
        ));
        let p = copy_packet(ai, 0, 0, 16);
        assert!(matches!(
            decode_packet(&p[..6], 0, ai),
            Err(Malformed::Truncated { .. })
        ));
        assert!(matches!(
            decode_packet(&[0x0000_0002], 0, ai),
            Err(Malformed::Unsupported { .. })
        ));
        let mut tiled = p;
        tiled[0] = SDMA_OP_COPY | kfd_sys::sdma::SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP(1);
        assert!(matches!(
            decode_packet(&tiled, 0, ai),
            Err(Malformed::Unsupported { .. })
        ));
        let mut bcast = p;
        bcast[0] |= 1 << 27;
        assert!(matches!(
            decode_packet(&bcast, 0, ai),
            Err(Malformed::Unsupported { .. })
        ));
        let mut swap = p;
        swap[2] = 1 << 16;
        assert!(matches!(
            decode_packet(&swap, 0, ai),
            Err(Malformed::EndianSwap { .. })
        ));
        let si = GpuGeneration::from_gfx_target_version(60001).sdma_rules();
        assert!(matches!(
            decode_packet(&p, 0, si),
            Err(Malformed::UnsupportedFamily { .. })
        ));
    }

    fn copy_round_trip(gfx: u64) {
        let rules = GpuGeneration::from_gfx_target_version(gfx).sdma_rules();
        let engine = SdmaEngine::new("test", 2, rules);
        let src = Buffer::new(8192, |i| (i * 7 + 3) as u8);
        let dst = Buffer::new(8192, |_| 0xEE);
        let mut ib = vec![0u32; 8];
        // 5000 bytes from src+100 to dst+10, split over two packets.
        ib.extend(copy_packet(rules, 0x10_0000 + 100, 0x20_0000 + 10, 3000));
        ib.extend(copy_packet(rules, 0x10_0000 + 3100, 0x20_0000 + 3010, 2000));
        ib.push(0);
        let ibb = ib_buffer(&ib);
        let vm = VmView::new(vec![
            range(0x10_0000, &src),
            range(0x20_0000, &dst),
            range(0x30_0000, &ibb),
        ]);
        run_job(&engine, vm, 0x30_0000, (ib.len() * 4) as u32).unwrap();
        let out = dst.read();
        let input = src.read();
        assert!(out[..10].iter().all(|b| *b == 0xEE));
        assert_eq!(&out[10..5010], &input[100..5100]);
        assert!(out[5010..].iter().all(|b| *b == 0xEE));
        let stats = engine.stats();
        assert_eq!(
            (stats.jobs, stats.failed_jobs, stats.bytes_copied),
            (1, 0, 5000)
        );
    }

    #[test]
    fn copy_round_trip_ai() {
        copy_round_trip(90402);
    }

    #[test]
    fn copy_round_trip_pre_ai() {
        copy_round_trip(80003);
    }

    #[test]
    fn unmapped_destination_faults_and_drops_writes() {
        let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        let engine = SdmaEngine::new("test", 1, rules);
        let src = Buffer::new(8192, |i| i as u8);
        let dst = Buffer::new(4096, |_| 0);
        // Copy 8192 bytes into a 4096-byte mapping: the second half faults.
        let ib = copy_packet(rules, 0x10_0000, 0x20_0000, 8192);
        let ibb = ib_buffer(&ib);
        let vm = VmView::new(vec![
            range(0x10_0000, &src),
            range(0x20_0000, &dst),
            range(0x40_0000, &ibb),
        ]);
        let err = run_job(&engine, vm, 0x40_0000, 28).unwrap_err();
        assert_eq!(
            err,
            JobError::VmFault {
                va: 0x20_1000,
                access: "write"
            }
        );
        assert_eq!(err.errno(), libc::ECANCELED);
        assert_eq!(&dst.read()[..], &src.read()[..4096]);
        let stats = engine.stats();
        assert_eq!(stats.faults.count, 1);
        assert_eq!(
            stats.faults.first,
            Some(VmFault {
                va: 0x20_1000,
                write: true
            })
        );
        assert_eq!(stats.bytes_copied, 4096);
    }

    #[test]
    fn read_only_mapping_refuses_writes_and_ib_must_be_mapped() {
        let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        let engine = SdmaEngine::new("test", 1, rules);
        let src = Buffer::new(4096, |_| 1);
        let dst = Buffer::new(4096, |_| 2);
        let ib = copy_packet(rules, 0x10_0000, 0x20_0000, 64);
        let ibb = ib_buffer(&ib);
        let mut ro = range(0x20_0000, &dst);
        ro.writable = false;
        let vm = VmView::new(vec![range(0x10_0000, &src), ro, range(0x40_0000, &ibb)]);
        let err = run_job(&engine, vm.clone(), 0x40_0000, 28).unwrap_err();
        assert!(matches!(err, JobError::VmFault { va: 0x20_0000, .. }));
        assert!(dst.read().iter().all(|b| *b == 2));
        let err = run_job(&engine, vm.clone(), 0x50_0000, 28).unwrap_err();
        assert_eq!(
            err,
            JobError::VmFault {
                va: 0x50_0000,
                access: "read"
            }
        );
        let err = run_job(&engine, vm, 0x40_0010, 28).unwrap_err();
        assert_eq!(
            err,
            JobError::Malformed(Malformed::MisalignedIb { va: 0x40_0010 })
        );
        assert_eq!(err.errno(), libc::ETIME);
        assert!(err.is_hang());
    }

    #[test]
    fn malformed_packet_stops_the_job_after_earlier_packets_ran() {
        let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        let engine = SdmaEngine::new("test", 1, rules);
        let src = Buffer::new(4096, |_| 9);
        let dst = Buffer::new(4096, |_| 0);
        let mut ib = copy_packet(rules, 0x10_0000, 0x20_0000, 16).to_vec();
        ib.push(0x0000_00FF);
        ib.extend(copy_packet(rules, 0x10_0000, 0x20_0000 + 16, 16));
        let ibb = ib_buffer(&ib);
        let vm = VmView::new(vec![
            range(0x10_0000, &src),
            range(0x20_0000, &dst),
            range(0x40_0000, &ibb),
        ]);
        let err = run_job(&engine, vm, 0x40_0000, (ib.len() * 4) as u32).unwrap_err();
        assert!(matches!(
            err,
            JobError::Malformed(Malformed::Unsupported { dword: 7, .. })
        ));
        let out = dst.read();
        assert!(out[..16].iter().all(|b| *b == 9));
        assert!(out[16..].iter().all(|b| *b == 0));
    }

    #[test]
    fn short_dma_moves_half_and_fails() {
        let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        let engine = SdmaEngine::new("test", 1, rules);
        let src = Buffer::new(4096, |_| 5);
        let dst = Buffer::new(4096, |_| 0);
        let ib = copy_packet(rules, 0x10_0000, 0x20_0000, 4096);
        let ibb = ib_buffer(&ib);
        let vm = VmView::new(vec![
            range(0x10_0000, &src),
            range(0x20_0000, &dst),
            range(0x40_0000, &ibb),
        ]);
        let fence = Fence::new();
        engine.submit(
            0,
            Job {
                ibs: vec![Ib {
                    va: 0x40_0000,
                    bytes: 28,
                }],
                vm: Arc::new(vm),
                fence: Arc::clone(&fence),
                short_dma: Some(ShortDma { errno: libc::EIO }),
                dependencies: Vec::new(),
                on_done: None,
            },
        );
        let err = fence.wait(Deadline::Infinite).unwrap().unwrap_err();
        assert_eq!(
            err,
            JobError::ShortDma {
                moved: 2048,
                errno: libc::EIO
            }
        );
        let out = dst.read();
        assert!(out[..2048].iter().all(|b| *b == 5));
        assert!(out[2048..].iter().all(|b| *b == 0));
    }

    #[test]
    fn prt_ranges_read_zero_and_swallow_writes() {
        let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        let engine = SdmaEngine::new("test", 1, rules);
        let dst = Buffer::new(4096, |_| 0x55);
        let mut ib = copy_packet(rules, 0x10_0000, 0x20_0000, 128).to_vec();
        ib.extend(copy_packet(rules, 0x20_0000, 0x10_0000, 128));
        let ibb = ib_buffer(&ib);
        let prt = VmRange {
            va: 0x10_0000,
            len: 0x1000,
            readable: true,
            writable: true,
            backing: RangeBacking::Prt,
        };
        let vm = VmView::new(vec![prt, range(0x20_0000, &dst), range(0x40_0000, &ibb)]);
        run_job(&engine, vm, 0x40_0000, 56).unwrap();
        let out = dst.read();
        assert!(out[..128].iter().all(|b| *b == 0));
        assert!(out[128..].iter().all(|b| *b == 0x55));
    }

    #[test]
    fn fence_wait_polls_and_times_out() {
        let fence = Fence::new();
        assert_eq!(fence.wait(Deadline::Poll), None);
        assert_eq!(fence.wait(Deadline::At(Instant::now())), None);
        assert_eq!(Deadline::from_monotonic_ns(0), Deadline::Poll);
        assert_eq!(Deadline::from_monotonic_ns(u64::MAX), Deadline::Infinite);
        assert_eq!(Deadline::from_monotonic_ns(1 << 63), Deadline::Infinite);
        fence.signal(Ok(()));
        fence.signal(Err(JobError::RingLost));
        assert_eq!(fence.wait(Deadline::Poll), Some(Ok(())));
        assert_eq!(fence.outcome(), Some(Ok(())));
    }

    #[test]
    fn addresses_at_the_top_of_the_va_space_fault_without_overflow() {
        let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        let engine = SdmaEngine::new("test", 1, rules);
        let top = 0xFFFF_FFFF_FFFF_FFE0;
        let err = run_job(&engine, VmView::default(), top, 64).unwrap_err();
        assert_eq!(
            err,
            JobError::VmFault {
                va: top,
                access: "read"
            }
        );
        let ib = ib_buffer(&copy_packet(rules, u64::MAX - 3, u64::MAX - 3, 64));
        let vm = VmView::new(vec![range(0x40_0000, &ib)]);
        let err = run_job(&engine, vm, 0x40_0000, 28).unwrap_err();
        assert!(matches!(err, JobError::VmFault { .. }));
    }

    /// xorshift64*: a small deterministic generator for robustness tests.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    #[test]
    fn arbitrary_ibs_decode_and_run_without_panicking() {
        let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        let engine = SdmaEngine::new("test", 1, rules);
        let target = Buffer::new(8192, |_| 0);
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..200 {
            let len = (next(&mut seed) % 40) as usize + 1;
            let ib: Vec<u32> = (0..len)
                .map(|i| {
                    let r = next(&mut seed);
                    match (r % 4, i % 7) {
                        // Mostly plausible headers and small addresses, so
                        // copies land inside, across and outside the mapping.
                        (0, _) => SDMA_OP_COPY,
                        (1, 1) => (r >> 8) as u32 % 0x3000,
                        (1, _) => 0x10_0000 + (r >> 8) as u32 % 0x4000,
                        _ => (r >> 16) as u32,
                    }
                })
                .collect();
            let mut at = 0;
            while at < ib.len() {
                match decode_packet(&ib, at, rules) {
                    Ok((_, used)) => {
                        assert!(used >= 1 && at + used <= ib.len(), "round {round}");
                        at += used;
                    }
                    Err(_) => break,
                }
            }
            let ibb = ib_buffer(&ib);
            let vm = VmView::new(vec![range(0x10_0000, &target), range(0x40_0000, &ibb)]);
            // Any outcome is fine; the fence must signal.
            let _ = run_job(&engine, vm, 0x40_0000, (ib.len() * 4) as u32);
        }
        assert_eq!(engine.stats().jobs, 200);
    }

    #[test]
    fn out_of_range_ring_fails_the_fence() {
        let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
        let engine = SdmaEngine::new("test", 1, rules);
        let fence = Fence::new();
        engine.submit(
            3,
            Job {
                ibs: vec![],
                vm: Arc::new(VmView::default()),
                fence: Arc::clone(&fence),
                short_dma: None,
                dependencies: Vec::new(),
                on_done: None,
            },
        );
        assert_eq!(fence.outcome(), Some(Err(JobError::RingLost)));
    }
}
