#![doc = include_str!("../README.md")]

pub(crate) mod amdkfd;
pub(crate) mod drm;
pub(crate) mod hw;
pub(crate) mod kernel;
pub mod remote;
mod sim;
pub mod workload;

pub use hw::{family, sdma};
pub use kernel::{accounting, module_params, scratch};
pub use sim::{fault, proc_files};

pub use amdkfd::saved::{saved_queues, SavedQueue};
pub use hw::queues::{PacketRecord, QueueState, QueueStatus};
pub use kernel::accounting::Accounting;
pub use kernel::sysfs::{
    complete_cpu_memory, complete_gpu_caches, complete_kernel_properties,
    complete_system_properties, match_entry_counts, synthetic_system,
};
pub use kernel::{
    DevDriNode, GpuInfo, HostMemorySnapshot, KfdState, Pid, ProcessConfig, RenderBuffer, SimConfig,
    SimError, DRM_MAJOR, KFD_MAJOR,
};
pub use sim::fault::{FaultKind, FaultParseError, FaultSpec};
pub use sim::{ForkHold, Sim, SimDriver};

/// A kernel error number, as the simulated kernel returns it: the `kfd`
/// crate's [`::kfd::Errno`], so the two crates share one type and one table
/// of errno names.
pub use ::kfd::Errno;
