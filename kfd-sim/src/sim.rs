//! The simulated machine: configuration, GPUs, processes, the open-file
//! table, and [`SimDriver`], the [`kfd::Driver`] implementation that routes
//! `open`/`ioctl`/`mmap` to the KFD half (`crate::amdkfd`) or the DRM half.
//!
//! Identity of the caller comes from the [`SimDriver`] instance (everything
//! runs in one host process). Every device fd is a real memfd; the simulator
//! keys its state on the memfd's inode ([`FileKey`]), so dup'ed fds and fds
//! received over a unix socket resolve to the same open file, as the kernel's
//! `struct file` does. This module never interprets ioctl arguments itself.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use amdgpu_topology::{GpuId, RenderMinor, System};
use kfd::{AnonymousMapping, AnonymousOptions, DeviceNumber, Driver, FdKind, HostDriver, Sharing};
use tempfile::TempDir;

use crate::accounting::Accounting;
use crate::amdkfd::process::KfdProcess;
use crate::bo::{memfd_create, BoStore, Memfd};
use crate::fault::{FaultSpec, FaultTable};
use crate::Errno;

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
    /// Default 18, as in current mainline kernels.
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
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            pid: None,
            checkpoint_restore_capable: true,
            visible_gpus: None,
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
    /// ([`Sim::restore_host_memory`]): `EEXIST` when the range is taken,
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

/// The CRIU-relevant state of one KFD process (see [`Sim::kfd_state`]).
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

/// Static facts about one simulated GPU, derived from its topology node.
#[derive(Debug, Clone)]
pub(crate) struct Gpu {
    pub(crate) info: GpuInfo,
    /// Number of XCCs (compute partitions' MQDs are per XCC).
    pub(crate) num_xcc: u32,
    /// Per-process doorbell slice in bytes (8 KiB on SOC15, 4 KiB before).
    pub(crate) doorbell_slice: u64,
    /// SDMA engines (PCIe + XGMI) and queues per engine.
    pub(crate) sdma_engines: u32,
    pub(crate) sdma_queues_per_engine: u32,
    /// The HDP-flush MMIO page (one per GPU).
    pub(crate) mmio_page: Arc<Memfd>,
    /// The render-node side (SDMA engines, GEM facts); owned by `crate::drm`.
    pub(crate) drm: Arc<crate::drm::DrmDevice>,
}

impl Gpu {
    /// The actual gpu_id.
    pub(crate) fn id(&self) -> GpuId {
        self.info.gpu_id
    }
    /// Whether the GPU is SOC15 (GFX9) or newer.
    pub(crate) fn is_soc15(&self) -> bool {
        self.info.family >= kfd_sys::AMDGPU_FAMILY_AI
    }
}

/// Identity of an open file: the (device, inode) pair of its memfd.
///
/// memfd inode numbers come from the kernel's increasing `get_next_ino()`
/// counter, so a key is not reused by a later memfd within any realistic
/// run; [`State::insert_file`] still drops a stale entry should it happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct FileKey {
    dev: u64,
    ino: u64,
}

impl FileKey {
    /// The key of raw fd `fd`: `EBADF` when it is not open.
    pub(crate) fn of_raw(fd: i32) -> Result<FileKey, Errno> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `st` is a writable buffer of the size fstat(2) fills.
        let ret = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
        if ret < 0 {
            return Err(Errno::last());
        }
        // SAFETY: fstat(2) succeeded and initialised the whole struct.
        let st = unsafe { st.assume_init() };
        Ok(FileKey {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }
}

/// An open `/dev/kfd` file.
#[derive(Debug)]
pub(crate) struct KfdFile {
    /// The process that opened it (`filep->private_data`).
    pub(crate) owner: Pid,
}

/// An open render-node file (one DRM file, one GPU VM).
#[derive(Debug)]
pub(crate) struct RenderFile {
    /// Index of the GPU.
    pub(crate) gpu: usize,
    /// "VM owned by a KFD process": set by ACQUIRE_VM / CRIU RESTORE to the
    /// process whose compute VM this file's VM became.
    pub(crate) kfd_vm_owner: Option<Pid>,
    /// GEM handles, GPU VM, contexts, BO lists; owned by `crate::drm`.
    pub(crate) drm: crate::drm::DrmFile,
}

/// What an open file of the simulator is.
#[derive(Debug)]
pub(crate) enum OpenFile {
    /// `/dev/kfd`.
    Kfd(KfdFile),
    /// `/dev/dri/renderD<minor>`.
    Render(RenderFile),
}

/// A simulated process.
#[derive(Debug)]
pub(crate) struct Process {
    pub(crate) capable: bool,
    pub(crate) ptrace_parent: Option<Pid>,
    /// GPU indices the device cgroup allows, in topology order.
    pub(crate) visible: Vec<usize>,
    /// The KFD process, created by the first open of `/dev/kfd`.
    pub(crate) kfd: Option<KfdProcess>,
}

/// A CPU mapping made through [`Driver::mmap`].
#[derive(Debug, Clone)]
pub(crate) struct CpuMapping {
    pub(crate) len: usize,
}

/// Anonymous host memory owned by the simulator: the simulated
/// applications' CPU memory that USERPTR BOs point at. Unmapped when the
/// simulator is dropped, or when its owner process exits.
#[derive(Debug)]
pub(crate) struct HostRegion {
    map: AnonymousMapping,
    /// The process whose memory this is (`None`: the simulator's, kept
    /// until the simulator is dropped).
    owner: Option<Pid>,
}

/// One region of a process's host memory with its contents, as CRIU's
/// pages dump captures it (see [`Sim::host_memory_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostMemorySnapshot {
    /// Address of the first byte (page aligned).
    pub addr: u64,
    /// The contents (a whole number of pages).
    pub bytes: Vec<u8>,
}

impl HostRegion {
    fn new(len: usize, owner: Option<Pid>) -> Result<HostRegion, Errno> {
        let map = AnonymousMapping::private(len).map_err(|e| io_errno(&e))?;
        Ok(HostRegion { map, owner })
    }

    /// Maps `len` bytes at exactly `addr` (page aligned, `len` a whole
    /// number of pages); `EEXIST` when anything in the host process is
    /// mapped there already.
    fn new_at(addr: usize, len: usize, owner: Pid) -> Result<HostRegion, Errno> {
        let map = AnonymousOptions::new(Sharing::Private)
            .fixed_at(addr)
            .map(len)
            .map_err(|e| io_errno(&e))?;
        Ok(HostRegion {
            map,
            owner: Some(owner),
        })
    }

    fn addr(&self) -> usize {
        self.map.addr()
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn overlaps(&self, addr: usize, len: usize) -> bool {
        addr < self.addr() + self.len() && self.addr() < addr.saturating_add(len)
    }

    fn contains(&self, addr: u64, len: usize) -> bool {
        let Ok(addr) = usize::try_from(addr) else {
            return false;
        };
        addr >= self.addr()
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr() + self.len())
    }
}

/// The errno of a failed host system call (`EIO` if it carries none).
fn io_errno(err: &io::Error) -> Errno {
    Errno(err.raw_os_error().unwrap_or(libc::EIO))
}

/// Mutable simulator state, behind one mutex.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) processes: BTreeMap<Pid, Process>,
    pub(crate) files: HashMap<FileKey, OpenFile>,
    pub(crate) bos: BoStore,
    pub(crate) faults: FaultTable,
    pub(crate) cpu_maps: BTreeMap<usize, CpuMapping>,
    pub(crate) host_regions: BTreeMap<usize, HostRegion>,
    next_pid: u32,
}

/// Immutable parts plus the state.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) gpus: Vec<Gpu>,
    pub(crate) config: SimConfig,
    pub(crate) system: System,
    sysfs: TempDir,
    pub(crate) state: Mutex<State>,
}

/// The context of one call into the simulated kernel.
pub(crate) struct Ctx<'a> {
    pub(crate) sim: &'a Shared,
    pub(crate) st: &'a mut State,
    /// The calling process.
    pub(crate) caller: Pid,
}

/// One simulated machine. Cheap to clone (an `Arc`).
#[derive(Debug, Clone)]
pub struct Sim {
    pub(crate) shared: Arc<Shared>,
}

fn node_err(node: u32, what: impl Into<String>) -> SimError {
    SimError::IncompleteNode {
        node,
        what: what.into(),
    }
}

impl Sim {
    /// Builds a simulator for `system`. Every GPU node must carry a non-zero
    /// unique `gpu_id`, a unique `drm_render_minor` and a VRAM memory bank
    /// (fill missing ones with the topology crate first). The sysfs tree for
    /// `system` is written into a temporary directory the simulator owns.
    pub fn new(system: System, config: SimConfig) -> Result<Sim, SimError> {
        let mut gpus = Vec::new();
        let mut ids = HashSet::new();
        let mut minors = HashSet::new();
        for node in system.gpus() {
            let gpu_id = node
                .gpu_id
                .filter(|&id| id != 0)
                .ok_or_else(|| node_err(node.id, "gpu node without a non-zero gpu_id"))?;
            if gpu_id > 0xffff {
                return Err(node_err(
                    node.id,
                    format!("gpu_id {gpu_id} does not fit 16 bits"),
                ));
            }
            let minor = node
                .render_minor()
                .ok_or_else(|| node_err(node.id, "gpu node without drm_render_minor"))?;
            let (vram, large_bar) = node
                .vram()
                .ok_or_else(|| node_err(node.id, "gpu node without a vram memory bank"))?;
            if !ids.insert(gpu_id) {
                return Err(SimError::Duplicate {
                    node: node.id,
                    what: "gpu_id",
                    value: gpu_id.into(),
                });
            }
            if !minors.insert(minor) {
                return Err(SimError::Duplicate {
                    node: node.id,
                    what: "drm_render_minor",
                    value: minor.into(),
                });
            }
            let gfx = u32::try_from(node.prop("gfx_target_version")).unwrap_or(0);
            let family = crate::family::simulated_family(gfx.into());
            let sdma_engines =
                u32::try_from(node.prop("num_sdma_engines") + node.prop("num_sdma_xgmi_engines"))
                    .unwrap_or(u32::MAX)
                    .max(1);
            let sdma_queues_per_engine = u32::try_from(node.prop("num_sdma_queues_per_engine"))
                .unwrap_or(2)
                .max(1);
            let mmio_page = Arc::new(
                Memfd::new("kfd-sim-mmio", crate::bo::PAGE_SIZE)
                    .map_err(|e| node_err(node.id, format!("cannot create the mmio page: {e}")))?,
            );
            gpus.push(Gpu {
                info: GpuInfo {
                    node_id: node.id,
                    gpu_id,
                    render_minor: minor,
                    vram_bytes: vram,
                    large_bar,
                    family,
                    gfx_target_version: gfx,
                },
                num_xcc: u32::try_from(node.prop("num_xcc")).unwrap_or(1).max(1),
                doorbell_slice: if family >= 141 { 8192 } else { 4096 },
                sdma_engines,
                sdma_queues_per_engine,
                mmio_page,
                drm: Arc::new(crate::drm::DrmDevice::new(node, vram, sdma_engines)),
            });
        }
        if gpus.is_empty() {
            return Err(SimError::NoGpus);
        }
        // Prefer tmpfs (/dev/shm): a large topology is thousands of small
        // files, which a disk file system creates far more slowly.
        let sysfs = tempfile::Builder::new()
            .prefix("kfd-sim-sysfs")
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::Builder::new().prefix("kfd-sim-sysfs").tempdir())
            .map_err(|source| SimError::Sysfs {
                path: std::env::temp_dir(),
                source,
            })?;
        let root = sysfs.path().join(crate::sysfs::TOPOLOGY_DIR);
        amdgpu_topology::write(&system, &root).map_err(|source| SimError::Sysfs {
            path: root.clone(),
            source,
        })?;
        let n = gpus.len();
        Ok(Sim {
            shared: Arc::new(Shared {
                gpus,
                config,
                system,
                sysfs,
                state: Mutex::new(State {
                    processes: BTreeMap::new(),
                    files: HashMap::new(),
                    bos: BoStore::new(n),
                    faults: FaultTable::default(),
                    cpu_maps: BTreeMap::new(),
                    host_regions: BTreeMap::new(),
                    next_pid: 1000,
                }),
            }),
        })
    }

    /// A simulator with `gpus` synthetic GFX9 (gfx90a-like) GPUs, see
    /// [`crate::synthetic_system`].
    pub fn synthetic(gpus: usize, config: SimConfig) -> Result<Sim, SimError> {
        Sim::new(crate::sysfs::synthetic_system(gpus), config)
    }

    /// A simulator for the topology recorded under `root` (a sysfs tree such
    /// as a fixture directory). What a partial capture lacks (gpu_ids, VRAM
    /// banks, render minors) is filled in by
    /// [`amdgpu_topology::synthesize_missing`] first.
    pub fn from_sysfs(root: &Path, config: SimConfig) -> Result<Sim, SimError> {
        let parsed = amdgpu_topology::parse(root).map_err(|e| SimError::Topology {
            path: root.to_owned(),
            reason: e.to_string(),
        })?;
        let mut system = parsed.system;
        amdgpu_topology::synthesize_missing(&mut system);
        Sim::new(system, config)
    }

    /// A simulator for one of the topology crate's built-in machines
    /// ([`amdgpu_topology::builtin_names`]: `single-gpu`, `pcie-2gpu`,
    /// `mi210-8gpu-2hive`, `mi250x-8`, `mi300x-64`, ...).
    pub fn builtin(name: &str, config: SimConfig) -> Result<Sim, SimError> {
        let system = amdgpu_topology::builtin(name)
            .ok_or_else(|| SimError::UnknownBuiltin(name.to_owned()))?;
        Sim::new(system, config)
    }

    /// The topology directory of the simulated sysfs (the equivalent of
    /// `/sys/class/kfd/kfd/topology`): `generation_id`, `system_properties`
    /// and `nodes/N/...`.
    pub fn sysfs_root(&self) -> PathBuf {
        self.shared.sysfs.path().join(crate::sysfs::TOPOLOGY_DIR)
    }

    /// The GPU (index into the simulated GPUs) whose topology node `path`
    /// lies in (`<sysfs_root>/nodes/<node>/...`); `None` for CPU nodes and
    /// paths outside the nodes.
    fn gpu_of_sysfs_path(&self, path: &Path) -> Option<usize> {
        let rest = path.strip_prefix(self.sysfs_root().join("nodes")).ok()?;
        let node: u32 = rest
            .components()
            .next()?
            .as_os_str()
            .to_str()?
            .parse()
            .ok()?;
        self.shared.gpus.iter().position(|g| g.info.node_id == node)
    }

    /// The topology the simulator was built from.
    pub fn topology(&self) -> &System {
        &self.shared.system
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// The simulated GPUs in topology order.
    pub fn gpus(&self) -> Vec<GpuInfo> {
        self.shared.gpus.iter().map(|g| g.info.clone()).collect()
    }

    /// Path of the render node of the GPU with (actual) `gpu_id`.
    pub fn render_path(&self, gpu_id: GpuId) -> Option<PathBuf> {
        self.shared
            .gpus
            .iter()
            .find(|g| g.id() == gpu_id)
            .map(|g| PathBuf::from(format!("/dev/dri/renderD{}", g.info.render_minor)))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state as it was at the
        // panic; the simulator keeps serving (tests report the panic).
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates a process with default attributes (capable, sees all GPUs).
    pub fn spawn_process(&self) -> Result<Pid, SimError> {
        self.spawn_process_with(ProcessConfig::default())
    }

    /// Creates a process.
    pub fn spawn_process_with(&self, cfg: ProcessConfig) -> Result<Pid, SimError> {
        let visible = match &cfg.visible_gpus {
            None => (0..self.shared.gpus.len()).collect(),
            Some(ids) => {
                let mut v = Vec::new();
                for &id in ids {
                    let idx = self
                        .shared
                        .gpus
                        .iter()
                        .position(|g| g.id() == id)
                        .ok_or(SimError::NoSuchGpu(id))?;
                    v.push(idx);
                }
                v.sort_unstable();
                v.dedup();
                v
            }
        };
        let mut st = self.lock();
        let pid = match cfg.pid {
            Some(pid) => {
                if st.processes.contains_key(&pid) {
                    return Err(SimError::PidInUse(pid));
                }
                pid
            }
            None => {
                while st.processes.contains_key(&Pid(st.next_pid)) {
                    st.next_pid += 1;
                }
                Pid(st.next_pid)
            }
        };
        st.next_pid = st.next_pid.max(pid.0 + 1);
        st.processes.insert(
            pid,
            Process {
                capable: cfg.checkpoint_restore_capable,
                ptrace_parent: None,
                visible,
                kfd: None,
            },
        );
        Ok(pid)
    }

    /// The [`kfd::Driver`] through which process `pid` talks to the kernel.
    pub fn driver(&self, pid: Pid) -> SimDriver {
        SimDriver {
            sim: self.clone(),
            pid,
        }
    }

    /// Makes `tracer` the ptrace parent of `tracee` (as CRIU's seize does).
    pub fn ptrace_attach(&self, tracer: Pid, tracee: Pid) -> Result<(), SimError> {
        let mut st = self.lock();
        if !st.processes.contains_key(&tracer) {
            return Err(SimError::NoSuchProcess(tracer));
        }
        let p = st
            .processes
            .get_mut(&tracee)
            .ok_or(SimError::NoSuchProcess(tracee))?;
        p.ptrace_parent = Some(tracer);
        Ok(())
    }

    /// Detaches `tracee` from its ptrace parent.
    pub fn ptrace_detach(&self, tracee: Pid) -> Result<(), SimError> {
        let mut st = self.lock();
        let p = st
            .processes
            .get_mut(&tracee)
            .ok_or(SimError::NoSuchProcess(tracee))?;
        p.ptrace_parent = None;
        Ok(())
    }

    /// Grants or revokes `CAP_CHECKPOINT_RESTORE`/`CAP_SYS_ADMIN`.
    pub fn set_checkpoint_restore_capable(&self, pid: Pid, capable: bool) -> Result<(), SimError> {
        let mut st = self.lock();
        let p = st
            .processes
            .get_mut(&pid)
            .ok_or(SimError::NoSuchProcess(pid))?;
        p.capable = capable;
        Ok(())
    }

    /// Ends process `pid`: its KFD process is torn down (queues, events, its
    /// BO handles, its claim on render-file VMs). Fds stay open in the host
    /// until closed; using them from another process then fails as usual.
    pub fn exit_process(&self, pid: Pid) -> Result<(), SimError> {
        let mut st = self.lock();
        let proc_ = st
            .processes
            .remove(&pid)
            .ok_or(SimError::NoSuchProcess(pid))?;
        if let Some(kfd) = proc_.kfd {
            kfd.teardown(&mut st, pid);
        }
        for p in st.processes.values_mut() {
            if p.ptrace_parent == Some(pid) {
                p.ptrace_parent = None;
            }
        }
        st.release_host_memory_of(pid);
        Ok(())
    }

    /// The CRIU-relevant state of `pid`'s KFD process (`None` when the
    /// process does not exist or never opened `/dev/kfd`): for tests that
    /// check, for example, that a failed dump left the application running.
    pub fn kfd_state(&self, pid: Pid) -> Option<KfdState> {
        let st = self.lock();
        let k = st.kfd(pid)?;
        Some(KfdState {
            gpu_ids: k
                .pdds
                .iter()
                .map(|p| (p.user_gpu_id, self.shared.gpus[p.gpu].id()))
                .collect(),
            queues_paused: k.queues_paused,
            eviction_levels: k.pdds.iter().map(|p| p.eviction).collect(),
            vm_acquired: k.pdds.iter().map(|p| p.drm_file.is_some()).collect(),
            awaiting_resume: k.userptr_blocked,
            resumed: k.resumed,
            bos: k.pdds.iter().map(|p| p.idr.len()).sum(),
            queues: k.queues.len(),
            events: k.events.len(),
            svm_ranges: k.svm.len(),
        })
    }

    /// Whether `pid` is a live process.
    pub fn process_alive(&self, pid: Pid) -> bool {
        self.lock().processes.contains_key(&pid)
    }

    /// Allocates `len` bytes (rounded up to pages) of zeroed host memory that
    /// lives as long as the simulator: CPU memory of a simulated application,
    /// e.g. the target of a USERPTR allocation. A process restored on this
    /// simulator finds it at the same address without anyone carrying it,
    /// standing in for CRIU's restore of CPU memory in place. Memory that
    /// must follow a process to another simulator is allocated with
    /// [`Sim::alloc_host_memory_for`].
    pub fn alloc_host_memory(&self, len: usize) -> Result<u64, SimError> {
        let len = len.max(1).div_ceil(4096) * 4096;
        let region =
            HostRegion::new(len, None).map_err(|e| SimError::HostMemory { len, errno: e })?;
        let addr = region.addr();
        self.lock().host_regions.insert(addr, region);
        Ok(addr as u64)
    }

    /// Allocates `len` bytes (rounded up to pages) of zeroed host memory in
    /// process `pid` (an anonymous `mmap` of that process): listed by
    /// [`Sim::host_memory_of`] and unmapped when the process exits, so a
    /// checkpoint must carry it ([`Sim::restore_host_memory`]) as CRIU's
    /// pages dump carries a real process's memory.
    pub fn alloc_host_memory_for(&self, pid: Pid, len: usize) -> Result<u64, SimError> {
        let len = len.max(1).div_ceil(4096) * 4096;
        let mut st = self.lock();
        if !st.processes.contains_key(&pid) {
            return Err(SimError::NoSuchProcess(pid));
        }
        let region =
            HostRegion::new(len, Some(pid)).map_err(|e| SimError::HostMemory { len, errno: e })?;
        let addr = region.addr();
        st.host_regions.insert(addr, region);
        Ok(addr as u64)
    }

    /// The host memory of process `pid` ([`Sim::alloc_host_memory_for`] and
    /// [`Sim::restore_host_memory`] regions) with its current contents, in
    /// address order: what CRIU's pages dump of the process captures. Empty
    /// for a process without such memory or without a live process.
    pub fn host_memory_of(&self, pid: Pid) -> Vec<HostMemorySnapshot> {
        let st = self.lock();
        st.host_regions
            .values()
            .filter(|r| r.owner == Some(pid))
            .filter_map(|r| {
                Some(HostMemorySnapshot {
                    addr: r.addr() as u64,
                    bytes: st.read_host(r.addr() as u64, r.len())?,
                })
            })
            .collect()
    }

    /// Maps host memory for process `pid` at exactly `addr` (page aligned;
    /// `bytes.len()` rounded up to pages, the rest zero) and fills it with
    /// `bytes`, as CRIU's restorer maps a process's memory back in place
    /// (`MAP_FIXED_NOREPLACE`: an error, never a replacement, when the range
    /// is taken in the host process or by another region of this simulator).
    /// The region belongs to `pid` as if allocated by
    /// [`Sim::alloc_host_memory_for`].
    pub fn restore_host_memory(&self, pid: Pid, addr: u64, bytes: &[u8]) -> Result<(), SimError> {
        let len = bytes.len().div_ceil(4096) * 4096;
        let at = |errno: c_int| SimError::HostMemoryAt {
            addr,
            len,
            errno: Errno(errno),
        };
        let start = usize::try_from(addr).map_err(|_| at(libc::EINVAL))?;
        if start == 0 || start % 4096 != 0 || len == 0 || start.checked_add(len).is_none() {
            return Err(at(libc::EINVAL));
        }
        let mut st = self.lock();
        if !st.processes.contains_key(&pid) {
            return Err(SimError::NoSuchProcess(pid));
        }
        if st.host_regions.values().any(|r| r.overlaps(start, len)) {
            return Err(at(libc::EEXIST));
        }
        let region = HostRegion::new_at(start, len, pid).map_err(|e| SimError::HostMemoryAt {
            addr,
            len,
            errno: e,
        })?;
        st.host_regions.insert(start, region);
        if !st.write_host(addr, bytes) {
            // The region was just inserted over exactly this range.
            st.host_regions.remove(&start);
            return Err(at(libc::EFAULT));
        }
        Ok(())
    }

    /// Reads simulator-owned host memory; `None` when the range is not inside
    /// one allocation of [`Sim::alloc_host_memory`].
    pub fn read_host_memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        self.lock().read_host(addr, len)
    }

    /// Writes simulator-owned host memory; false when the range is not inside
    /// one allocation of [`Sim::alloc_host_memory`].
    pub fn write_host_memory(&self, addr: u64, data: &[u8]) -> bool {
        self.lock().write_host(addr, data)
    }

    /// Arms a fault (see [`FaultSpec`]).
    pub fn inject(&self, spec: FaultSpec) {
        self.lock().faults.arm(spec);
    }

    /// Disarms every pending fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Faults that were armed but have not fired yet.
    pub fn pending_faults(&self) -> Vec<FaultSpec> {
        self.lock().faults.pending()
    }

    /// What is alive right now. Garbage-collects closed files and dma-bufs
    /// first, so the numbers reflect only what the application still holds.
    pub fn accounting(&self) -> Accounting {
        let mut st = self.lock();
        let open = st.collect();
        Accounting::gather(&self.shared, &st, &open)
    }
}

impl State {
    /// Inodes of every fd open in the host process, except the store's own
    /// memfds, one entry per fd.
    pub(crate) fn open_user_fds(&self) -> Vec<FileKey> {
        let mut own = self.bos.own_fds();
        own.extend(
            self.processes
                .values()
                .filter_map(|p| p.kfd.as_ref())
                .flat_map(|k| k.own_fds()),
        );
        let mut keys = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return keys;
        };
        for entry in dir.flatten() {
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if own.contains(&fd) {
                continue;
            }
            if let Ok(key) = FileKey::of_raw(fd) {
                keys.push(key);
            }
        }
        keys
    }

    /// Drops files whose last fd was closed (unless a KFD process still holds
    /// the render file as its VM) and dma-buf-only BOs whose fds are gone.
    /// Returns the open user fds it saw.
    pub(crate) fn collect(&mut self) -> Vec<FileKey> {
        let open = self.open_user_fds();
        let set: HashSet<FileKey> = open.iter().copied().collect();
        let held: HashSet<FileKey> = self
            .processes
            .values()
            .filter_map(|p| p.kfd.as_ref())
            .flat_map(|k| k.pdds.iter().filter_map(|pdd| pdd.drm_file))
            .collect();
        let dead: Vec<FileKey> = self
            .files
            .keys()
            .filter(|k| !set.contains(k) && !held.contains(k))
            .copied()
            .collect();
        for key in dead {
            self.release_file(key);
        }
        self.bos.collect(&set);
        open
    }

    /// The last reference to open file `key` went away.
    pub(crate) fn release_file(&mut self, key: FileKey) {
        let Some(file) = self.files.remove(&key) else {
            return;
        };
        match file {
            OpenFile::Kfd(_) => {}
            OpenFile::Render(render) => {
                crate::drm::release(&mut self.bos, key, render.drm);
                let ids: Vec<_> = self
                    .bos
                    .iter()
                    .filter(|b| b.allowed_files.contains(&key))
                    .map(|b| b.id)
                    .collect();
                for id in ids {
                    if let Some(bo) = self.bos.get_mut(id) {
                        bo.allowed_files.remove(&key);
                    }
                }
            }
        }
    }

    /// Registers a new open file; a stale entry with the same inode (its
    /// file was closed and the inode reused) is released first.
    pub(crate) fn insert_file(&mut self, key: FileKey, file: OpenFile) {
        if self.files.contains_key(&key) {
            self.release_file(key);
        }
        self.files.insert(key, file);
    }

    /// Unmaps the host memory owned by `pid` (its exit). USERPTR BOs still
    /// pinning those pages (held through another process or an open render
    /// file) are invalidated first, as the kernel's MMU notifier does on
    /// `munmap`, so the device never touches the unmapped range.
    fn release_host_memory_of(&mut self, pid: Pid) {
        let gone: Vec<usize> = self
            .host_regions
            .iter()
            .filter(|(_, r)| r.owner == Some(pid))
            .map(|(&a, _)| a)
            .collect();
        if gone.is_empty() {
            return;
        }
        let pinned: Vec<crate::bo::BoId> = self
            .bos
            .iter()
            .filter_map(|bo| match bo.backing {
                crate::bo::Backing::UserPtr { addr, valid: true } => {
                    let a = usize::try_from(addr).ok()?;
                    let len = usize::try_from(bo.size).ok()?;
                    gone.iter()
                        .any(|g| self.host_regions[g].overlaps(a, len))
                        .then_some(bo.id)
                }
                _ => None,
            })
            .collect();
        for id in pinned {
            if let Some(bo) = self.bos.get_mut(id) {
                if let crate::bo::Backing::UserPtr { valid, .. } = &mut bo.backing {
                    *valid = false;
                }
            }
        }
        for a in gone {
            self.host_regions.remove(&a);
        }
    }

    fn host_region(&self, addr: u64, len: usize) -> Option<&HostRegion> {
        let a = usize::try_from(addr).ok()?;
        let (_, r) = self.host_regions.range(..=a).next_back()?;
        r.contains(addr, len).then_some(r)
    }

    /// Reads simulator-owned host memory (`None` outside every region).
    pub(crate) fn read_host(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        self.host_region(addr, len)?;
        let mut out = vec![0u8; len];
        // SAFETY: `[addr, addr+len)` lies inside a live region mapped
        // read-write by this simulator; `out` is a separate allocation.
        unsafe { std::ptr::copy_nonoverlapping(addr as usize as *const u8, out.as_mut_ptr(), len) };
        Some(out)
    }

    /// Writes simulator-owned host memory; false outside every region.
    pub(crate) fn write_host(&self, addr: u64, data: &[u8]) -> bool {
        if self.host_region(addr, data.len()).is_none() {
            return false;
        }
        // SAFETY: as in read_host, the range is inside a live read-write region.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), addr as usize as *mut u8, data.len())
        };
        true
    }

    /// The render file `key`, if it is one.
    pub(crate) fn render(&self, key: FileKey) -> Option<&RenderFile> {
        match self.files.get(&key) {
            Some(OpenFile::Render(r)) => Some(r),
            _ => None,
        }
    }

    /// The render file `key`, mutably.
    pub(crate) fn render_mut(&mut self, key: FileKey) -> Option<&mut RenderFile> {
        match self.files.get_mut(&key) {
            Some(OpenFile::Render(r)) => Some(r),
            _ => None,
        }
    }

    /// The KFD process of `pid`.
    pub(crate) fn kfd(&self, pid: Pid) -> Option<&KfdProcess> {
        self.processes.get(&pid)?.kfd.as_ref()
    }

    /// The KFD process of `pid`, mutably.
    pub(crate) fn kfd_mut(&mut self, pid: Pid) -> Option<&mut KfdProcess> {
        self.processes.get_mut(&pid)?.kfd.as_mut()
    }
}

/// Largest buffer a single copy-in may need (1 GiB); larger requests fail
/// with `ENOMEM` instead of exhausting host memory.
pub(crate) const MAX_KERNEL_BUFFER: usize = 1 << 30;

/// Copies `len` bytes from the caller's memory at `addr` (`copy_from_user`).
/// A null address is `EFAULT`.
///
/// Every user pointer reaching the simulator comes inside an ioctl argument,
/// whose validity the caller of [`Driver::ioctl`] guarantees for the size the
/// kernel uses; the simulator only reads the sizes the kernel would.
pub(crate) fn copy_from_user(addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if len > MAX_KERNEL_BUFFER {
        // kvmalloc of an absurd size fails in the kernel too.
        return Err(Errno(libc::ENOMEM));
    }
    if addr == 0 {
        return Err(Errno(libc::EFAULT));
    }
    let mut out = vec![0u8; len];
    // SAFETY: the Driver::ioctl contract makes the caller guarantee that user
    // pointers inside the argument are valid for the size the kernel reads;
    // `out` is a fresh buffer of `len` bytes that cannot overlap it.
    unsafe { std::ptr::copy_nonoverlapping(addr as usize as *const u8, out.as_mut_ptr(), len) };
    Ok(out)
}

/// Copies `data` to the caller's memory at `addr` (`copy_to_user`). A null
/// address is `EFAULT`.
pub(crate) fn copy_to_user(addr: u64, data: &[u8]) -> Result<(), Errno> {
    if data.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: the Driver::ioctl contract makes the caller guarantee that user
    // pointers inside the argument are valid for writes of the size the
    // kernel writes; `data` is simulator memory and cannot overlap it.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as usize as *mut u8, data.len()) };
    Ok(())
}

/// The kernel's argument marshalling for one ioctl: a buffer of
/// `max(user_size, kernel_size)` bytes, the first `user_size` copied in when
/// `copy_in` (zero-filled otherwise), the handler run on it, and the first
/// `user_size` bytes copied back when `copy_out` — also when the handler
/// failed. A failed copy-in is `EFAULT`; a failed copy-out turns any result
/// into `EFAULT`.
///
/// # Safety
/// `arg` must be valid for reads and writes of `user_size` bytes (the
/// [`Driver::ioctl`] contract).
pub(crate) unsafe fn marshal(
    arg: *mut c_void,
    user_size: usize,
    kernel_size: usize,
    copy_in: bool,
    copy_out: bool,
    handler: impl FnOnce(&mut [u8]) -> Result<c_int, Errno>,
) -> Result<c_int, Errno> {
    let mut buf = vec![0u8; user_size.max(kernel_size)];
    if (copy_in || copy_out) && user_size > 0 && arg.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    if copy_in && user_size > 0 {
        // SAFETY: the caller guarantees `arg` is valid for `user_size` bytes;
        // `buf` holds at least that many and is a separate allocation.
        unsafe { std::ptr::copy_nonoverlapping(arg as *const u8, buf.as_mut_ptr(), user_size) };
    }
    let ret = handler(&mut buf);
    if copy_out && user_size > 0 {
        // SAFETY: as above, `arg` is valid for writes of `user_size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), arg as *mut u8, user_size) };
    }
    ret
}

/// Runs `f` on a typed copy of the argument at the start of `buf` and writes
/// the (possibly updated) struct back, whatever `f` returns.
pub(crate) fn typed<T, R>(buf: &mut [u8], f: impl FnOnce(&mut T) -> R) -> R
where
    T: zerocopy::FromBytes + zerocopy::IntoBytes + zerocopy::Immutable + zerocopy::KnownLayout,
{
    let size = std::mem::size_of::<T>();
    // The marshalling buffer is never smaller than the kernel's struct; a
    // shorter one would be a dispatch-table bug, answered with a zeroed struct.
    let mut value = T::read_from_prefix(buf)
        .map(|(v, _)| v)
        .unwrap_or_else(|_| T::new_zeroed());
    let r = f(&mut value);
    if buf.len() >= size {
        buf[..size].copy_from_slice(value.as_bytes());
    }
    r
}

/// One simulated process's [`kfd::Driver`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SimDriver {
    sim: Sim,
    pid: Pid,
}

impl SimDriver {
    /// The process this driver acts as.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The simulator.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    fn alive(&self, st: &State) -> Result<(), Errno> {
        if st.processes.contains_key(&self.pid) {
            Ok(())
        } else {
            Err(Errno(libc::ESRCH))
        }
    }

    fn open_inner(&self, path: &Path, flags: c_int) -> Result<OwnedFd, Errno> {
        let shared = &self.sim.shared;
        let mut st = self.sim.lock();
        self.alive(&st)?;
        crate::fault::check(&mut st, "OPEN")?;
        let cloexec = flags & libc::O_CLOEXEC != 0;
        let path_str = path.to_str().ok_or(Errno(libc::ENOENT))?;
        if path_str == "/dev/kfd" {
            let fd = memfd_create("kfd-sim-kfd", cloexec)?;
            let key = FileKey::of_raw(fd.as_raw_fd())?;
            let pid = self.pid;
            let proc_ = st.processes.get_mut(&pid).ok_or(Errno(libc::ESRCH))?;
            if proc_.kfd.is_none() {
                proc_.kfd = Some(KfdProcess::new(&shared.gpus, &proc_.visible));
            }
            st.insert_file(key, OpenFile::Kfd(KfdFile { owner: pid }));
            return Ok(fd);
        }
        if let Some(minor) = path_str.strip_prefix("/dev/dri/renderD") {
            let minor: u32 = minor.parse().map_err(|_| Errno(libc::ENOENT))?;
            let gpu = shared
                .gpus
                .iter()
                .position(|g| g.info.render_minor == minor)
                .ok_or(Errno(libc::ENOENT))?;
            let visible = st
                .processes
                .get(&self.pid)
                .is_some_and(|p| p.visible.contains(&gpu));
            if !visible {
                return Err(Errno(libc::EPERM));
            }
            let fd = memfd_create(&format!("kfd-sim-renderD{minor}"), cloexec)?;
            let key = FileKey::of_raw(fd.as_raw_fd())?;
            st.insert_file(
                key,
                OpenFile::Render(RenderFile {
                    gpu,
                    kfd_vm_owner: None,
                    drm: crate::drm::DrmFile::new(&shared.gpus[gpu].drm),
                }),
            );
            return Ok(fd);
        }
        Err(Errno(libc::ENOENT))
    }

    /// # Safety
    /// The [`Driver::ioctl`] contract.
    unsafe fn ioctl_inner(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        arg: *mut c_void,
    ) -> Result<c_int, Errno> {
        let key = FileKey::of_raw(fd.as_raw_fd())?;
        let mut st = self.sim.lock();
        self.alive(&st)?;
        let owner = match st.files.get(&key) {
            Some(OpenFile::Kfd(k)) => Some(k.owner),
            Some(OpenFile::Render(_)) => None,
            None => return Err(Errno(libc::ENOTTY)),
        };
        match owner {
            Some(owner) => {
                let mut ctx = Ctx {
                    sim: &self.sim.shared,
                    st: &mut st,
                    caller: self.pid,
                };
                // SAFETY: forwarded Driver::ioctl contract.
                unsafe { crate::amdkfd::ioctl(&mut ctx, owner, request, arg) }
            }
            // SAFETY: forwarded Driver::ioctl contract. The DRM half takes
            // the lock: fence waits happen without it.
            None => unsafe { crate::drm::ioctl(&self.sim.shared, st, self.pid, key, request, arg) },
        }
    }

    fn mmap_source(
        &self,
        st: &mut State,
        key: FileKey,
        len: usize,
        offset: u64,
    ) -> Result<Option<(Arc<Memfd>, u64)>, Errno> {
        match st.files.get(&key) {
            Some(OpenFile::Kfd(_)) => {
                crate::amdkfd::mmap(&self.sim.shared, st, self.pid, offset, len as u64).map(Some)
            }
            Some(OpenFile::Render(r)) => {
                let gpu = r.gpu;
                // A BO imported from another GPU has its offset on this one
                // from the DRM half.
                let drm = &self.sim.shared.gpus[gpu].drm;
                let (id, base) = match drm.import_at(&st.bos, offset, len as u64) {
                    Some(found) => found,
                    None => {
                        let id = st
                            .bos
                            .lookup_offset(gpu, offset, len as u64)
                            .ok_or(Errno(libc::EINVAL))?;
                        (id, st.bos.get(id).ok_or(Errno(libc::EINVAL))?.mmap_offset)
                    }
                };
                let bo = st.bos.get(id).ok_or(Errno(libc::EINVAL))?;
                if !bo.allowed_files.contains(&key) {
                    return Err(Errno(libc::EACCES));
                }
                let memfd = match &bo.backing {
                    crate::bo::Backing::Memory(m) | crate::bo::Backing::Aperture(m) => m.clone(),
                    crate::bo::Backing::UserPtr { .. } => return Err(Errno(libc::EPERM)),
                };
                Ok(Some((memfd, offset - base)))
            }
            None => Ok(None),
        }
    }
}

impl Driver for SimDriver {
    fn open(&self, path: &Path, flags: c_int) -> io::Result<OwnedFd> {
        self.open_inner(path, flags).map_err(Into::into)
    }

    unsafe fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        arg: *mut c_void,
    ) -> io::Result<c_int> {
        // SAFETY: forwarded Driver::ioctl contract.
        unsafe { self.ioctl_inner(fd, request, arg) }.map_err(Into::into)
    }

    unsafe fn mmap(
        &self,
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: BorrowedFd<'_>,
        offset: u64,
    ) -> io::Result<NonNull<c_void>> {
        let key = FileKey::of_raw(fd.as_raw_fd())?;
        let mut st = self.sim.lock();
        self.alive(&st)?;
        crate::fault::check(&mut st, "MMAP")?;
        if len == 0 || offset % crate::bo::PAGE_SIZE != 0 {
            return Err(Errno(libc::EINVAL).into());
        }
        let source = self.mmap_source(&mut st, key, len, offset)?;
        // `source` keeps the memfd open until the mapping exists.
        let (raw_fd, file_offset) = match &source {
            Some((memfd, off)) => (memfd.file().as_raw_fd(), *off),
            // Not a device of ours (a dma-buf or any other file): the host maps it.
            None => (fd.as_raw_fd(), offset),
        };
        let file_offset = libc::off_t::try_from(file_offset).map_err(|_| Errno(libc::EOVERFLOW))?;
        // SAFETY: the caller upholds the MAP_FIXED contract of Driver::mmap;
        // otherwise the kernel picks an unused range. `raw_fd` is open for the
        // duration of the call (held by the store or by the caller).
        let ptr = unsafe { libc::mmap(addr, len, prot, flags, raw_fd, file_offset) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Mappings of the simulator's devices and dma-bufs are accounted;
        // other files are the host's business.
        if source.is_some() || st.bos.by_key(key).is_some() {
            st.cpu_maps.insert(ptr as usize, CpuMapping { len });
        }
        NonNull::new(ptr).ok_or_else(|| Errno(libc::EFAULT).into())
    }

    unsafe fn munmap(&self, addr: NonNull<c_void>, len: usize) -> io::Result<()> {
        let mut st = self.sim.lock();
        // SAFETY: the caller guarantees the range is a mapping of ours that
        // nothing references any more.
        let ret = unsafe { libc::munmap(addr.as_ptr(), len) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let start = addr.as_ptr() as usize;
        let end = start.saturating_add(len);
        let covered: Vec<usize> = st
            .cpu_maps
            .range(start..end)
            .filter(|(&a, m)| a + m.len <= end)
            .map(|(&a, _)| a)
            .collect();
        for a in covered {
            st.cpu_maps.remove(&a);
        }
        Ok(())
    }

    fn fd_kind(&self, fd: BorrowedFd<'_>) -> io::Result<FdKind> {
        let key = FileKey::of_raw(fd.as_raw_fd())?;
        let st = self.sim.lock();
        match st.files.get(&key) {
            Some(OpenFile::Kfd(_)) => {
                return Ok(FdKind::CharDevice(DeviceNumber {
                    major: KFD_MAJOR,
                    minor: 0,
                }))
            }
            Some(OpenFile::Render(r)) => {
                return Ok(FdKind::CharDevice(DeviceNumber {
                    major: DRM_MAJOR,
                    minor: self.sim.shared.gpus[r.gpu].info.render_minor,
                }))
            }
            None => {}
        }
        if st.bos.by_key(key).is_some() {
            return Ok(FdKind::DmaBuf);
        }
        drop(st);
        HostDriver.fd_kind(fd)
    }

    fn device_number(&self, path: &Path) -> io::Result<DeviceNumber> {
        let s = path
            .to_str()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        if s == "/dev/kfd" {
            return Ok(DeviceNumber {
                major: KFD_MAJOR,
                minor: 0,
            });
        }
        if let Some(m) = s
            .strip_prefix("/dev/dri/renderD")
            .and_then(|m| m.parse::<u32>().ok())
        {
            if self
                .sim
                .shared
                .gpus
                .iter()
                .any(|g| g.info.render_minor == m)
            {
                return Ok(DeviceNumber {
                    major: DRM_MAJOR,
                    minor: m,
                });
            }
        }
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }

    fn read_sysfs(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
        // As amdkfd's topology attributes: a node of a GPU the caller's
        // device cgroup hides answers EPERM, whoever reads it.
        if let Some(gpu) = self.sim.gpu_of_sysfs_path(path) {
            let st = self.sim.lock();
            let visible = st
                .processes
                .get(&self.pid)
                .is_some_and(|p| p.visible.contains(&gpu));
            if !visible {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
        }
        kfd::driver::read_file_prefix(path, limit)
    }
}
