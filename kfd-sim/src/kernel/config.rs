//! The simulator's public vocabulary: device majors, [`Pid`], the machine
//! and process configurations, [`SimError`], and the snapshots tests read
//! ([`KfdState`], [`GpuInfo`]).
//!
//! Plain data: this module never touches simulator state or host memory.

use std::io;
use std::path::PathBuf;

use amdgpu_topology::{GpuId, RenderMinor};

use ::kfd::Errno;

/// Character-device major the simulator reports for `/dev/kfd`. The real
/// major is assigned dynamically at boot (often 234–511); the simulator uses
/// a fixed 511 (minor 0).
pub const KFD_MAJOR: u32 = 511;
/// Character-device major of DRM nodes (`/dev/dri/renderD<minor>`).
pub const DRM_MAJOR: u32 = 226;

/// A simulated process id. Pids are handed out from 1000 upward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pid(pub u32);

impl std::fmt::Display for Pid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Simulator-wide knobs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// KFD ioctl minor version GET_VERSION reports (major is always 1).
    /// Default 18, as in current mainline kernels. Minors 19 to 23 (2026
    /// kernels) are reported as given, but what they add is not simulated:
    /// the request codes and argument layouts of `AMDKFD_IOC_CREATE_PROCESS`
    /// (1.19), the queue-creation metadata ring size (1.22) and the profiler
    /// ioctl (1.23) are not known here (see `amdgpu_checkpoint::kfd_version`),
    /// so those ioctls answer `ENOTTY` like any unknown one and a second
    /// `/dev/kfd` file shares its process's KFD context as before 1.19.
    /// [`crate::Sim::set_kfd_minor_version`] changes it on a live machine.
    pub kfd_minor_version: u32,
    /// `MAX_GPU_INSTANCE` of the simulated kernel: the length of a BO private
    /// record's `mapped_gpuids` array (64 in current kernels, 16 in older
    /// ones). Private data from one value cannot be restored on the other.
    pub max_gpu_instance: usize,
    /// Host memory the simulated kernel believes it has (bytes); used for the
    /// page-table reserve estimate of AVAILABLE_MEMORY.
    pub system_memory_bytes: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            kfd_minor_version: 18,
            max_gpu_instance: 64,
            system_memory_bytes: 64 << 30,
        }
    }
}

/// How to create a simulated process.
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// A specific pid (for example to recreate a checkpointed process under
    /// its old pid); `None` picks the next free one.
    pub pid: Option<Pid>,
    /// Whether the process has `CAP_CHECKPOINT_RESTORE` (or `CAP_SYS_ADMIN`)
    /// in the initial user namespace. Default true.
    pub checkpoint_restore_capable: bool,
    /// The gpu_ids the device cgroup lets the process see; `None` = all GPUs.
    /// The others are absent from its KFD process (`n_pdds`), their render
    /// nodes answer `EPERM` to `open`, and their topology nodes answer
    /// `EPERM` to reads through [`kfd::Driver::read_sysfs`].
    pub visible_gpus: Option<Vec<GpuId>>,
    /// The process's `/dev/dri` and `/sys/class/drm` when they are not the
    /// host's (a container's mount namespace): only these nodes, each a
    /// character device of its own name and minor standing for a GPU, with
    /// `/sys/class/drm/renderD<minor>/device` naming that GPU's PCI
    /// device. `None`: the host's, `renderD<minor>` of every GPU at the
    /// minor the KFD topology reports.
    pub dev_dri: Option<Vec<DevDriNode>>,
    /// Whether the process's user addresses are this host process's own
    /// CPU mappings (an interposer running AMD's user space in this
    /// process): the kernel's checks of CPU mappings then apply to it, as
    /// to a remote host process. An SVM range must lie in mapped, non-device
    /// memory (`EFAULT`), and unmapping CPU memory ([`crate::Sim::cpu_unmapped`])
    /// ends the SVM ranges it covered. Default false: a simulated process
    /// has no CPU mappings of its own, and those checks are not made.
    pub host_address_space: bool,
}

/// A render node in a container's `/dev/dri` (see [`ProcessConfig::dev_dri`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevDriNode {
    /// The file name under `/dev/dri` (`renderD128`, `gpu0`, ...).
    pub name: String,
    /// Its minor (major 226): the host's minor of the GPU, or another
    /// when the container's view renumbers it.
    pub minor: u32,
    /// The GPU it opens.
    pub gpu_id: GpuId,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            pid: None,
            checkpoint_restore_capable: true,
            visible_gpus: None,
            dev_dri: None,
            host_address_space: false,
        }
    }
}

/// Why a simulator could not be built or a process operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The topology has no GPU nodes.
    #[error("the topology has no gpu nodes: a simulator needs at least one gpu")]
    NoGpus,
    /// A GPU node lacks something the simulator cannot invent.
    #[error("topology node {node}: {what}")]
    IncompleteNode {
        /// Node id.
        node: u32,
        /// What is missing or wrong.
        what: String,
    },
    /// Two GPU nodes share a gpu_id or render minor.
    #[error("topology node {node}: {what} {value} is used by another gpu node")]
    Duplicate {
        /// Node id.
        node: u32,
        /// `gpu_id` or `drm_render_minor`.
        what: &'static str,
        /// The value.
        value: u64,
    },
    /// Writing the sysfs tree failed.
    #[error("writing the simulated sysfs tree under {path}: {source}")]
    Sysfs {
        /// Target directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Reading a topology fixture failed.
    #[error("reading topology from {path}: {reason}")]
    Topology {
        /// Root that was read.
        path: PathBuf,
        /// The parser's explanation.
        reason: String,
    },
    /// No built-in topology has this name.
    #[error("no built-in topology named {0:?} (see amdgpu_topology::builtin_names)")]
    UnknownBuiltin(String),
    /// The pid is already in use.
    #[error("pid {0} is already in use")]
    PidInUse(Pid),
    /// No live process has this pid.
    #[error("no simulated process with pid {0}")]
    NoSuchProcess(Pid),
    /// Host memory for a simulated application could not be mapped.
    #[error("mapping {len} bytes of host memory: {errno}")]
    HostMemory {
        /// Requested length.
        len: usize,
        /// The mmap error.
        errno: Errno,
    },
    /// A gpu_id named in a process configuration is not in the topology.
    #[error("gpu_id {0} is not a gpu of this simulator")]
    NoSuchGpu(GpuId),
    /// Host memory could not be mapped back at a fixed address
    /// ([`Sim::restore_host_memory`](crate::Sim::restore_host_memory)): `EEXIST` when the range is taken,
    /// `EINVAL` for an address that is not page aligned or an empty range.
    #[error("mapping {len} bytes of host memory at {addr:#x}: {errno}")]
    HostMemoryAt {
        /// Requested address.
        addr: u64,
        /// Requested length.
        len: usize,
        /// The mmap error.
        errno: Errno,
    },
}

/// The CRIU-relevant state of one KFD process (see [`Sim::kfd_state`](crate::Sim::kfd_state)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdState {
    /// Per device, in topology order: (user gpu_id, actual gpu_id).
    pub gpu_ids: Vec<(GpuId, GpuId)>,
    /// Set by PROCESS_INFO, cleared by UNPAUSE.
    pub queues_paused: bool,
    /// Per device: queue eviction levels (queues run only at 0).
    pub eviction_levels: Vec<u32>,
    /// Per device: whether a render file's VM became the compute VM.
    pub vm_acquired: Vec<bool>,
    /// RESTORE reached the BO stage and RESUME has not run yet.
    pub awaiting_resume: bool,
    /// How many RESUMEs succeeded.
    pub resumed: u32,
    /// Allocations across all devices.
    pub bos: usize,
    /// User queues.
    pub queues: usize,
    /// Events.
    pub events: usize,
    /// SVM ranges.
    pub svm_ranges: usize,
}

impl KfdState {
    /// Whether the process's queues run (no eviction level on any device).
    pub fn queues_running(&self) -> bool {
        self.eviction_levels.iter().all(|&l| l == 0)
    }
}

/// A GEM handle of a render-node file ([`crate::Sim::render_buffers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenderBuffer {
    /// The file's render minor.
    pub render_minor: RenderMinor,
    /// The handle in the file.
    pub handle: u32,
    /// The buffer's size in bytes.
    pub size: u64,
    /// The buffer's identity, the same for every handle of it in any file.
    pub buffer: u64,
}

/// Public description of one simulated GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// Topology node id.
    pub node_id: u32,
    /// The (actual) KFD gpu_id.
    pub gpu_id: GpuId,
    /// Render minor: the device is `/dev/dri/renderD<minor>`.
    pub render_minor: RenderMinor,
    /// VRAM size in bytes.
    pub vram_bytes: u64,
    /// Whether all VRAM is CPU visible (large BAR).
    pub large_bar: bool,
    /// amdgpu family id (`AMDGPU_FAMILY_*`, 141 = AI/GFX9).
    pub family: u32,
    /// `gfx_target_version` (e.g. 90010 for gfx90a), 0 when unknown.
    pub gfx_target_version: u32,
}
