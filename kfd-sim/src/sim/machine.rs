//! One simulated machine: [`Sim`], the GPUs built from its topology, and
//! the state behind its one mutex ([`State`]: processes, the open-file
//! table keyed by [`FileKey`], BOs, faults, CPU mappings, host memory).
//!
//! This module never interprets ioctl arguments; the KFD and DRM halves do.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use amdgpu_topology::{GpuId, System};
use tempfile::TempDir;

use crate::accounting::Accounting;
use crate::amdkfd::process::KfdProcess;
use crate::bo::{BoStore, Memfd};
use crate::fault::{FaultSpec, FaultTable};
use crate::Errno;

use super::{
    CpuMapping, GpuInfo, HostRegion, KfdState, Pid, Process, ProcessConfig, SimConfig, SimDriver,
    SimError,
};

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
    /// The process that opened it (`drm_file->pid`).
    pub(crate) opener: Pid,
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

/// Mutable simulator state, behind one mutex.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) processes: BTreeMap<Pid, Process>,
    pub(crate) files: HashMap<FileKey, OpenFile>,
    pub(crate) bos: BoStore,
    pub(crate) faults: FaultTable,
    pub(crate) cpu_maps: BTreeMap<usize, CpuMapping>,
    pub(crate) host_regions: BTreeMap<usize, HostRegion>,
    /// Open pidfds (memfds standing in for them) and the process each names
    /// (its pid and [`Process::instance`](super::process::Process)).
    pub(crate) pidfds: HashMap<FileKey, (Pid, u64)>,
    /// Host pids of live remote client processes ([`crate::remote`]), with
    /// their connections: the fds open in them hold simulator files as this
    /// process's do.
    pub(crate) remote_peers: BTreeMap<libc::pid_t, usize>,
    /// CPU mappings of simulator memory remote clients made, by client and
    /// address in the client.
    pub(crate) remote_maps: BTreeMap<(libc::pid_t, usize), CpuMapping>,
    next_pid: u32,
    /// The next [`Process::instance`](super::process::Process).
    next_instance: u64,
}

/// Immutable parts plus the state.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) gpus: Vec<Gpu>,
    pub(crate) config: SimConfig,
    pub(crate) system: System,
    sysfs: TempDir,
    pub(crate) state: Mutex<State>,
    /// The KFD minor `GET_VERSION` reports now: `config.kfd_minor_version`
    /// until [`Sim::set_kfd_minor_version`] "updates the kernel".
    pub(crate) kfd_minor: std::sync::atomic::AtomicU32,
    /// The user-mode queues' engines, interrupts and event waiters.
    pub(crate) exec: crate::exec::QueueEngines,
    /// System RAM the simulated kernel has (`si_meminfo`): the sum of the
    /// CPU nodes' system-memory banks.
    pub(crate) system_memory: u64,
}

/// The context of one call into the simulated kernel.
pub(crate) struct Ctx<'a> {
    pub(crate) sim: &'a Shared,
    pub(crate) st: &'a mut State,
    /// The calling process.
    pub(crate) caller: Pid,
    /// A WAIT_EVENTS in progress across the lock's releases.
    pub(crate) wait: Option<crate::amdkfd::event_wait::EventWait>,
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
    ///
    /// A GPU of an old capture that lacks what a current kernel reports
    /// (its `gfx_target_version` and SDMA engine counts) gets them first
    /// ([`crate::sysfs::complete_kernel_properties`]), in the sysfs tree too;
    /// so does a partial capture without the system-wide files
    /// ([`crate::sysfs::complete_system_properties`]), a CPU node without
    /// memory gets its system bank ([`crate::sysfs::complete_cpu_memory`]),
    /// a GFX9 GPU without caches the kernel's ([`crate::sysfs::complete_gpu_caches`]),
    /// and each node's entry
    /// counts are made to match its entries
    /// ([`crate::sysfs::match_entry_counts`]).
    pub fn new(mut system: System, config: SimConfig) -> Result<Sim, SimError> {
        crate::sysfs::complete_kernel_properties(&mut system);
        crate::sysfs::complete_system_properties(&mut system);
        crate::sysfs::complete_cpu_memory(&mut system, config.system_memory_bytes);
        crate::sysfs::complete_gpu_caches(&mut system);
        crate::sysfs::match_entry_counts(&mut system);
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
        // In this process's run directory (crate::scratch): removed with
        // the simulator, and with the process even if a test panicked or
        // leaked its simulator.
        let sysfs = crate::scratch::run_dir()
            .and_then(|run| tempfile::Builder::new().prefix("sysfs").tempdir_in(run))
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
        let system_memory = crate::sysfs::system_memory_of(&system, config.system_memory_bytes);
        Ok(Sim {
            shared: Arc::new_cyclic(|me| Shared {
                exec: crate::exec::QueueEngines::new(me.clone()),
                gpus,
                system_memory,
                kfd_minor: std::sync::atomic::AtomicU32::new(config.kfd_minor_version),
                config,
                system,
                sysfs,
                state: Mutex::new(State {
                    processes: BTreeMap::new(),
                    files: HashMap::new(),
                    bos: BoStore::new(n),
                    faults: FaultTable::default(),
                    cpu_maps: BTreeMap::new(),
                    remote_peers: BTreeMap::new(),
                    remote_maps: BTreeMap::new(),
                    host_regions: BTreeMap::new(),
                    pidfds: HashMap::new(),
                    next_pid: 1000,
                    next_instance: 1,
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
    pub(super) fn gpu_of_sysfs_path(&self, path: &Path) -> Option<usize> {
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

    /// The PCI address (`DDDD:BB:DD.F`) of GPU `gpu` (an index), from its
    /// topology node's `domain` and `location_id`.
    pub(crate) fn pci_address(&self, gpu: usize) -> String {
        let node = self.shared.system.node(self.shared.gpus[gpu].info.node_id);
        let (domain, location) = node.map_or((0, 0), |n| (n.prop("domain"), n.prop("location_id")));
        format!(
            "{domain:04x}:{:02x}:{:02x}.{:x}",
            (location >> 8) & 0xff,
            (location >> 3) & 0x1f,
            location & 0x7
        )
    }

    /// The topology the simulator was built from.
    pub fn topology(&self) -> &System {
        &self.shared.system
    }

    /// Replaces the kernel's KFD interface minor version (a kernel update
    /// or downgrade between a dump and a restore on this machine): from now
    /// on `GET_VERSION` reports 1.`minor`.
    pub fn set_kfd_minor_version(&self, minor: u32) {
        self.shared
            .kfd_minor
            .store(minor, std::sync::atomic::Ordering::Relaxed);
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
        self.spawn(cfg, false)
    }

    /// Creates the simulated process standing for host process `pid` (a
    /// client of [`crate::remote::Server::serve_host_processes`]), or finds
    /// the one created for it before.
    pub(crate) fn host_process(&self, pid: Pid) -> Result<Pid, SimError> {
        if self.lock().processes.get(&pid).is_some_and(|p| p.host) {
            return Ok(pid);
        }
        let cfg = ProcessConfig {
            pid: Some(pid),
            ..ProcessConfig::default()
        };
        self.spawn(cfg, true)
    }

    fn spawn(&self, cfg: ProcessConfig, host: bool) -> Result<Pid, SimError> {
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
            None => st.next_free_pid(),
        };
        st.next_pid = st.next_pid.max(pid.0 + 1);
        let instance = st.take_instance();
        st.processes.insert(
            pid,
            Process {
                instance,
                capable: cfg.checkpoint_restore_capable,
                ptrace_parent: None,
                visible,
                dev_dri: cfg.dev_dri.clone(),
                kfd: None,
                comm: format!("sim-{}", pid.0),
                ptrace_stopped: false,
                ptrace_allowed: true,
                fds: Default::default(),
                frozen: None,
                host,
                ns_pid: None,
                real_mm: host || cfg.host_address_space,
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
        p.ptrace_stopped = false;
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
        crate::exec::sync_process(&self.shared, &mut st, pid);
        // The kernel's exit_ptrace(): every tracee is detached and a
        // stopped one runs on.
        for p in st.processes.values_mut() {
            if p.ptrace_parent == Some(pid) {
                p.ptrace_parent = None;
                p.ptrace_stopped = false;
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

    /// The GEM buffers of the render-node files process `pid` opened,
    /// as the files' handle tables hold them: for tests that check which
    /// files share a buffer (two handles of one buffer have one
    /// [`RenderBuffer::buffer`](crate::RenderBuffer::buffer)).
    pub fn render_buffers(&self, pid: Pid) -> Vec<super::RenderBuffer> {
        let st = self.lock();
        let mut out = Vec::new();
        for file in st.files.values() {
            let OpenFile::Render(r) = file else { continue };
            if r.opener != pid {
                continue;
            }
            for (&handle, gem) in &r.drm.handles {
                if let Some(bo) = st.bos.get(gem.bo) {
                    out.push(super::RenderBuffer {
                        render_minor: self.shared.gpus[r.gpu].info.render_minor,
                        handle,
                        size: bo.size,
                        buffer: gem.bo.0,
                    });
                }
            }
        }
        out.sort_by_key(|b| (b.render_minor, b.handle, b.buffer));
        out
    }

    /// `len` bytes at `offset` of buffer `buffer` (a
    /// [`RenderBuffer::buffer`](crate::RenderBuffer::buffer)) with VRAM or GTT memory.
    pub fn read_buffer(&self, buffer: u64, offset: u64, len: usize) -> Option<Vec<u8>> {
        let st = self.lock();
        let memory = st.bos.get(crate::bo::BoId(buffer))?.memory()?.clone();
        drop(st);
        let mut out = vec![0u8; len];
        memory.read_at(offset, &mut out).ok()?;
        Some(out)
    }

    /// Whether `pid` is a live process.
    pub fn process_alive(&self, pid: Pid) -> bool {
        self.lock().processes.contains_key(&pid)
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
    /// memfds, and in the remote clients, one entry per fd.
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
        for pid in self.remote_peers.keys() {
            let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                continue;
            };
            for entry in dir.flatten() {
                // stat(2) of the magic link is the open file's inode.
                if let Ok(meta) = std::fs::metadata(entry.path()) {
                    use std::os::unix::fs::MetadataExt;
                    keys.push(FileKey {
                        dev: meta.dev(),
                        ino: meta.ino(),
                    });
                }
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

    /// The next pid no process uses (pids are handed out upward), taken.
    pub(crate) fn next_free_pid(&mut self) -> Pid {
        while self.processes.contains_key(&Pid(self.next_pid)) {
            self.next_pid += 1;
        }
        let pid = Pid(self.next_pid);
        self.next_pid += 1;
        pid
    }

    /// A new [`Process::instance`](super::process::Process): no two
    /// processes of this machine, alive or gone, share one.
    pub(crate) fn take_instance(&mut self) -> u64 {
        let instance = self.next_instance;
        self.next_instance += 1;
        instance
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

    /// Releases the host memory owned by `pid` (its exit; the ranges stay
    /// reserved for a restore, see `sim::retired`). USERPTR BOs still
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
                // Only this host process's pages are the simulator's
                // host regions; a remote client's go with its process.
                crate::bo::Backing::UserPtr {
                    addr,
                    valid: true,
                    space: super::Space::Local,
                } => {
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
            if let Some(region) = self.host_regions.remove(&a) {
                region.retire();
            }
        }
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
