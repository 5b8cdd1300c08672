//! The simulated hardware, at the bottom: the clock, buffer objects and
//! the mmap offset space, the GPU families, the SDMA engine with its packet decoding
//! (`sdma`) and the engines that consume user-mode queues (`queues`: SDMA,
//! PM4 and AQL rings, doorbells, preemption into the MQD, interrupts).

pub(crate) mod bo;
pub(crate) mod clock;
pub mod family;
pub(crate) mod offset_space;
pub(crate) mod queues;
pub mod sdma;

/// A held lock guard, whatever it guards: the engines hand theirs to
/// `crate::Sim::hold_for_fork` this way.
pub(crate) trait Held {}
impl<T> Held for T {}

/// The LDS aperture of GFX9 (`SH_MEM_BASES`' shared base, as
/// `kfd_init_apertures_v9` sets it): flat addresses from here reach a
/// workgroup's LDS.
pub(crate) const LDS_BASE: u64 = 1 << 48;
/// The scratch aperture of GFX9 (`SH_MEM_BASES`' private base): flat
/// addresses from here reach a work-item's private memory.
pub(crate) const SCRATCH_BASE: u64 = 2 << 48;
