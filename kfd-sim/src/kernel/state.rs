//! The state behind the simulated machine's one mutex ([`State`]:
//! processes, the open-file table keyed by [`FileKey`], BOs, faults, CPU
//! mappings, host memory), the GPUs built from its topology ([`Gpu`]) and
//! the context of one call into the kernel ([`Ctx`]).
//!
//! This module never interprets ioctl arguments; the KFD and DRM halves do.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use amdgpu_topology::{GpuId, System};
use tempfile::TempDir;

use crate::amdkfd::process::KfdProcess;
use crate::hw::bo::{BoStore, Memfd};
use crate::kernel::fault::FaultTable;
use ::kfd::Errno;

use super::{CpuMapping, GpuInfo, HostRegion, Pid, Process, SimConfig};

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
    pub(crate) next_pid: u32,
    /// The next [`Process::instance`](super::process::Process).
    pub(crate) next_instance: u64,
}

/// Immutable parts plus the state.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) gpus: Vec<Gpu>,
    pub(crate) config: SimConfig,
    pub(crate) system: System,
    pub(crate) sysfs: TempDir,
    pub(crate) state: Mutex<State>,
    /// The KFD minor `GET_VERSION` reports now: `config.kfd_minor_version`
    /// until [`Sim::set_kfd_minor_version`] "updates the kernel".
    pub(crate) kfd_minor: std::sync::atomic::AtomicU32,
    /// The user-mode queues' engines, interrupts and event waiters.
    pub(crate) exec: crate::hw::queues::QueueEngines,
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
    pub(crate) fn release_host_memory_of(&mut self, pid: Pid) {
        let gone: Vec<usize> = self
            .host_regions
            .iter()
            .filter(|(_, r)| r.owner == Some(pid))
            .map(|(&a, _)| a)
            .collect();
        if gone.is_empty() {
            return;
        }
        let pinned: Vec<crate::hw::bo::BoId> = self
            .bos
            .iter()
            .filter_map(|bo| match bo.backing {
                // Only this host process's pages are the simulator's
                // host regions; a remote client's go with its process.
                crate::hw::bo::Backing::UserPtr {
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
                if let crate::hw::bo::Backing::UserPtr { valid, .. } = &mut bo.backing {
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
