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
//!
//! Layout: `generation` (what a `gfx_target_version` means for the
//! engine: family, SDMA rules, VM size), `packet` (decoding IB dwords),
//! `memory` (the memory a job reads and writes through its VM snapshot)
//! and `engine` (rings, jobs, fences and the executor).

mod copy;
mod engine;
mod generation;
mod memory;
mod pace;
mod packet;
#[cfg(test)]
mod tests;

pub(crate) use copy::{CopyUnit, EnginePort, FaultTrack};
pub(crate) use engine::{Deadline, Fence, Ib, Job, JobError, SdmaEngine, ShortDma};
pub use engine::{SdmaStats, VmFault, VmFaultLog};
pub(crate) use generation::{GpuGeneration, SdmaRules};
pub(crate) use memory::{DeviceMemory, RangeBacking, Rmw, UserMemory, VmRange, VmView};
pub(crate) use packet::{
    copy_bytes, decode_packet, Malformed, Packet, COPY_ENDIAN_SWAP_BITS,
    COPY_UNSUPPORTED_HEADER_BITS, IB_ADDRESS_ALIGNMENT,
};
