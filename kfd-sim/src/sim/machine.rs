//! One simulated machine: [`Sim`], built from a topology, with the API a
//! test drives it by (processes, ptrace, faults, inspection, accounting).
//! The state behind its one mutex is [`State`] (`crate::kernel::state`).
//!
//! This module never interprets ioctl arguments; the KFD and DRM halves do.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use amdgpu_topology::{GpuId, System};

use crate::hw::bo::{BoStore, Memfd};
use crate::kernel::accounting::Accounting;
use crate::kernel::fault::{FaultSpec, FaultTable};
use crate::kernel::{
    Gpu, GpuInfo, KfdState, OpenFile, Pid, Process, ProcessConfig, RenderBuffer, Shared, SimConfig,
    SimError, State,
};

use super::SimDriver;

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
    /// ([`crate::kernel::sysfs::complete_kernel_properties`]), in the sysfs tree too;
    /// so does a partial capture without the system-wide files
    /// ([`crate::kernel::sysfs::complete_system_properties`]), a CPU node without
    /// memory gets its system bank ([`crate::kernel::sysfs::complete_cpu_memory`]),
    /// a GFX9 GPU without caches the kernel's ([`crate::kernel::sysfs::complete_gpu_caches`]),
    /// and each node's entry
    /// counts are made to match its entries
    /// ([`crate::kernel::sysfs::match_entry_counts`]).
    pub fn new(mut system: System, config: SimConfig) -> Result<Sim, SimError> {
        crate::kernel::sysfs::complete_kernel_properties(&mut system);
        crate::kernel::sysfs::complete_system_properties(&mut system);
        crate::kernel::sysfs::complete_cpu_memory(&mut system, config.system_memory_bytes);
        crate::kernel::sysfs::complete_gpu_caches(&mut system);
        crate::kernel::sysfs::match_entry_counts(&mut system);
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
            let family = crate::hw::family::simulated_family(gfx.into());
            let sdma_engines =
                u32::try_from(node.prop("num_sdma_engines") + node.prop("num_sdma_xgmi_engines"))
                    .unwrap_or(u32::MAX)
                    .max(1);
            let sdma_queues_per_engine = u32::try_from(node.prop("num_sdma_queues_per_engine"))
                .unwrap_or(2)
                .max(1);
            let mmio_page = Arc::new(
                Memfd::new("kfd-sim-mmio", crate::hw::bo::PAGE_SIZE)
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
        // In this process's run directory (crate::kernel::scratch): removed with
        // the simulator, and with the process even if a test panicked or
        // leaked its simulator.
        let sysfs = crate::kernel::scratch::run_dir()
            .and_then(|run| tempfile::Builder::new().prefix("sysfs").tempdir_in(run))
            .map_err(|source| SimError::Sysfs {
                path: std::env::temp_dir(),
                source,
            })?;
        let root = sysfs.path().join(crate::kernel::sysfs::TOPOLOGY_DIR);
        amdgpu_topology::write(&system, &root).map_err(|source| SimError::Sysfs {
            path: root.clone(),
            source,
        })?;
        let n = gpus.len();
        let system_memory =
            crate::kernel::sysfs::system_memory_of(&system, config.system_memory_bytes);
        Ok(Sim {
            shared: Arc::new_cyclic(|me| Shared {
                exec: crate::hw::queues::QueueEngines::new(me.clone(), crate::drm::engine_vm_view),
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
        Sim::new(crate::kernel::sysfs::synthetic_system(gpus), config)
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
        self.shared
            .sysfs
            .path()
            .join(crate::kernel::sysfs::TOPOLOGY_DIR)
    }

    /// The GPU (index into the simulated GPUs) whose topology node `path`
    /// lies in (`<sysfs_root>/nodes/<node>/...`); `None` for CPU nodes and
    /// paths outside the nodes.
    pub(crate) fn gpu_of_sysfs_path(&self, path: &Path) -> Option<usize> {
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
        crate::amdkfd::scheduling::sync_process(&self.shared, &mut st, pid);
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
    pub fn render_buffers(&self, pid: Pid) -> Vec<RenderBuffer> {
        let st = self.lock();
        let mut out = Vec::new();
        for file in st.files.values() {
            let OpenFile::Render(r) = file else { continue };
            if r.opener != pid {
                continue;
            }
            for (&handle, gem) in &r.drm.handles {
                if let Some(bo) = st.bos.get(gem.bo) {
                    out.push(RenderBuffer {
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
        let memory = st.bos.get(crate::hw::bo::BoId(buffer))?.memory()?.clone();
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
