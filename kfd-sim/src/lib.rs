#![doc = include_str!("../README.md")]

pub mod accounting;
pub(crate) mod amdkfd;
pub(crate) mod bo;
pub(crate) mod drm;
pub(crate) mod exec;
pub mod family;
pub mod fault;
pub mod module_params;
pub(crate) mod offset_space;
pub mod proc_files;
pub mod remote;
pub mod scratch;
pub mod sdma;
mod sim;
mod sysfs;
pub mod workload;

pub use accounting::Accounting;
pub use exec::{saved_queues, PacketRecord, QueueState, QueueStatus, SavedQueue};
pub use fault::{FaultKind, FaultParseError, FaultSpec};
pub use sim::{
    DevDriNode, ForkHold, GpuInfo, HostMemorySnapshot, KfdState, Pid, ProcessConfig, RenderBuffer,
    Sim, SimConfig, SimDriver, SimError, DRM_MAJOR, KFD_MAJOR,
};
pub use sysfs::{
    complete_cpu_memory, complete_gpu_caches, complete_kernel_properties,
    complete_system_properties, match_entry_counts, synthetic_system,
};

/// A kernel error number, as the simulated kernel returns it: the `kfd`
/// crate's [`kfd::Errno`], so the two crates share one type and one table
/// of errno names.
pub use kfd::Errno;
