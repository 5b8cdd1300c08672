//! The memory limits amdgpu puts on KFD allocations
//! (`amdgpu_amdkfd_reserve_mem_limit` and
//! `amdgpu_amdkfd_gpuvm_init_mem_limits` in
//! `drivers/gpu/drm/amd/amdgpu/amdgpu_amdkfd_gpuvm.c`, as of the 5.19/6.1
//! kernels kfdtest 5.2.3 targets):
//!
//! * system memory (GTT and USERPTR BOs): at most 15/16 of system RAM;
//! * TTM memory (GTT BOs): at most 3/8 of system RAM;
//! * VRAM of a device: at most its VRAM less the page-table reserve
//!   `ESTIMATE_PT_SIZE(total memory)` = max(total >> 14,
//!   `AMDGPU_VM_RESERVED_VRAM` 8 MiB), total memory being system RAM plus
//!   every GPU's VRAM (`amdgpu_amdkfd_total_mem_size`);
//!
//! an allocation over a limit fails with `ENOMEM`. What is reserved stays
//! reserved until the BO is destroyed (`amdgpu_amdkfd_release_notify`), so
//! a freed BO still held by a dma-buf still counts. Doorbell and MMIO BOs
//! take nothing. AVAILABLE_MEMORY reports a device's VRAM less what KFD BOs
//! use, each rounded up to 2 MiB (`vram_used_aligned`), less the same
//! reserve, rounded down to 2 MiB (`amdgpu_amdkfd_get_available_memory`).
//!
//! Later kernels compute the system limit from total RAM as RAM − RAM/64 −
//! 1.5 GiB and the TTM limit from TTM's page limit; the simulator keeps
//! the older rule. System RAM is the simulated machine's (the CPU nodes'
//! memory banks), never the host's. This module only checks and counts;
//! it never allocates.

use crate::hw::bo::{BoStore, Domain};
use crate::kernel::Shared;
use ::kfd::Errno;

/// `VRAM_AVAILABLITY_ALIGN`: availability is reported in 2 MiB steps (and
/// KFD VRAM use counted in them, `crate::hw::bo::KfdUsage`).
const VRAM_ALIGN: u64 = 2 << 20;
/// `AMDGPU_VM_RESERVED_VRAM`.
const VM_RESERVED_VRAM: u64 = 8 << 20;

/// The page-table reserve kept out of every device's VRAM.
pub(crate) fn reserved_for_pt(sim: &Shared) -> u64 {
    let vram: u64 = sim.gpus.iter().map(|g| g.info.vram_bytes).sum();
    ((sim.system_memory + vram) >> 14).max(VM_RESERVED_VRAM)
}

/// `amdgpu_amdkfd_reserve_mem_limit`: whether a KFD BO of `size` bytes in
/// `domain` on `gpu` fits the limits (`ENOMEM` when it does not). The BO
/// counts once the store marks it ([`BoStore::mark_kfd_limit`]).
pub(crate) fn reserve(
    sim: &Shared,
    bos: &BoStore,
    gpu: usize,
    domain: Domain,
    size: u64,
) -> Result<(), Errno> {
    let ram = sim.system_memory;
    let max_system = ram - (ram >> 4);
    let max_ttm = (ram >> 1) - (ram >> 3);
    let used = bos.kfd_usage();
    let over = match domain {
        Domain::Gtt => used.system + size > max_system || used.ttm + size > max_ttm,
        Domain::UserPtr => used.system + size > max_system,
        Domain::Vram => {
            used.vram[gpu] + size
                > sim.gpus[gpu]
                    .info
                    .vram_bytes
                    .saturating_sub(reserved_for_pt(sim))
        }
        Domain::Doorbell | Domain::Mmio => false,
    };
    if over {
        Err(Errno(libc::ENOMEM))
    } else {
        Ok(())
    }
}

/// AVAILABLE_MEMORY's answer for `gpu`.
pub(crate) fn available_vram(sim: &Shared, bos: &BoStore, gpu: usize) -> u64 {
    let aligned = bos.kfd_usage().vram_aligned[gpu];
    let avail = sim.gpus[gpu]
        .info
        .vram_bytes
        .saturating_sub(aligned)
        .saturating_sub(reserved_for_pt(sim));
    avail & !(VRAM_ALIGN - 1)
}
