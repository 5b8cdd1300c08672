//! Simulated GPU applications for checkpoint/restore tests.
//!
//! A [`Workload`] is a simulated process that sets itself up the way a ROCm
//! application does, through its own [`SimDriver`] and raw KFD ioctls: it
//! opens `/dev/kfd` and the render nodes, acquires the VMs, allocates BOs of
//! every type (VRAM, GTT, USERPTR, DOORBELL, MMIO_REMAP), maps them, creates
//! queues (compute AQL and SDMA) and events, and registers SVM ranges.
//!
//! [`Workload::step`] is the "GPU" making progress: it needs the process's
//! queues to be running (so it fails while CRIU has them paused), advances
//! every queue's dispatch counter, signals an event, and mixes a step counter
//! into every VRAM/GTT/USERPTR BO with a running hash. Everything it does is
//! a pure function of the process state, so a process that is checkpointed,
//! restored and stepped further ends with the same [`Workload::fingerprint`]
//! as one that ran uninterrupted. The fingerprint covers BO handles, VAs,
//! sizes, flags and contents, queue and event state and SVM ranges; it
//! excludes what legitimately changes across a restore (pid, fd numbers,
//! actual gpu_ids, mmap offsets) and the CPU addresses of USERPTR BOs and
//! SVM ranges (two runs in one host process cannot share them; `verify`
//! compares them).
//!
//! BO contents look like the application's, so a checkpoint writes what a
//! real one would (zero pages are elided from pages files, so a zero BO
//! would measure only holes). At launch each data BO is filled with
//! incompressible bytes over its used share, the rest left untouched
//! (zero), as [`Profile`] documents per workload: weights, activations and
//! gradients are dense; allocator pools and staging buffers are partly
//! used; queue rings and the event page hold only what the queues and
//! events write.
//!
//! [`Workload::describe`] records what a process holds;
//! [`Workload::verify`] checks that another (restored) process holds the same
//! BOs at the same handles and addresses with identical contents. This
//! module never performs the CRIU ops itself: restoring is the plugin's job.
//!
//! Processes that use GPUs only through render nodes (no `/dev/kfd`) are
//! simulated by [`render_only::RenderOnly`].

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use ::kfd::Driver;
use amdgpu_topology::GpuId;
use kfd_sys::*;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::amdkfd::event::is_signal_type;
use crate::bo::{Backing, Domain};
use crate::sim::{Pid, Sim, SimDriver, SimError, State};
use crate::Errno;

pub mod copy_stream;
pub mod render_only;

/// Opens the device file `path` read-write as process `pid` would.
pub(crate) fn open_device(
    driver: &SimDriver,
    pid: Pid,
    path: &std::path::Path,
) -> Result<OwnedFd, WorkloadError> {
    driver
        .open(path, libc::O_RDWR | libc::O_CLOEXEC)
        .map_err(|e| WorkloadError::Open {
            pid,
            path: path.display().to_string(),
            errno: Errno(e.raw_os_error().unwrap_or(libc::EIO)),
        })
}

/// Opens the render node of GPU `gpu` as process `pid` would.
pub(crate) fn open_render(
    sim: &Sim,
    driver: &SimDriver,
    pid: Pid,
    gpu: GpuId,
) -> Result<OwnedFd, WorkloadError> {
    let path = sim.render_path(gpu).ok_or(SimError::NoSuchGpu(gpu))?;
    open_device(driver, pid, &path)
}

/// Seed of the weights of [`Profile::DataParallel`] (one for every replica).
const DATA_PARALLEL_WEIGHTS_SEED: u64 = 0x5eed_0fd4_7a9a_1100;

/// What kind of application to simulate. Multi-process applications that
/// share dma-bufs are built with [`Workload::launch_sharing`] (any profile)
/// or [`Workload::share_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Profile {
    /// Per GPU: one VRAM, one GTT and one USERPTR BO, a doorbell and an MMIO
    /// BO, one compute queue, one signal event (the first GPU also holds the
    /// event page BO). Contents: the VRAM BO dense, the GTT BO half used.
    Basic,
    /// PyTorch-like: per GPU `bos_per_gpu` BOs with sizes cycling from 4 KiB
    /// up to `max_bo_bytes` (two thirds VRAM, one third GTT, every fifth
    /// read-only for the GPU, every seventh mapped on all GPUs), 8 compute
    /// and 2 SDMA queues, 16 events, 4 USERPTR staging buffers and an SVM
    /// range. Contents: VRAM BOs (weights, activations, gradients,
    /// optimizer state) dense, except every fourth one, a block the caching
    /// allocator holds free (untouched); GTT BOs (pinned staging) half used.
    PyTorchLike {
        /// BOs per GPU (thousands for a realistic process).
        bos_per_gpu: usize,
        /// Largest BO size in bytes (rounded to pages).
        max_bo_bytes: u64,
    },
    /// TensorFlow-like: per GPU 6 large VRAM BOs of `bo_bytes`, 2 GTT BOs, 2
    /// compute and 4 SDMA queues, 4 events. Contents: the VRAM BOs are the
    /// BFC allocator's pool, used to 5/6 (five dense, the sixth untouched
    /// headroom); the GTT BOs (host staging) half used.
    TensorFlowLike {
        /// Size of each large BO in bytes.
        bo_bytes: u64,
    },
    /// Data-parallel training or replicated inference (PyTorch DDP): per
    /// GPU one VRAM BO of model weights, identical byte for byte in every
    /// process that launches this profile (seeded by the profile, not by
    /// the process or GPU), and one VRAM BO of activations, dense and
    /// different per process; 2 compute queues, 2 events. Launch one
    /// process per GPU with [`Workload::launch_data_parallel`].
    DataParallel {
        /// Size of the weights BO in bytes.
        weights_bytes: u64,
        /// Size of the activations BO in bytes.
        activations_bytes: u64,
    },
}

/// Why a workload operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// An ioctl failed.
    #[error("workload {pid}: {op} failed with {errno}")]
    Ioctl {
        /// The process.
        pid: Pid,
        /// The ioctl.
        op: &'static str,
        /// The error.
        errno: Errno,
    },
    /// Opening a device failed.
    #[error("workload {pid}: opening {path} failed with {errno}")]
    Open {
        /// The process.
        pid: Pid,
        /// The device path.
        path: String,
        /// The error.
        errno: Errno,
    },
    /// The simulator refused a process operation.
    #[error("workload: {0}")]
    Sim(#[from] SimError),
    /// The handle was made by [`Workload::attach`]: it owns no `/dev/kfd`
    /// fd, so it cannot issue ioctls (it can step, describe, fingerprint).
    #[error("workload handle for process {0} was attached, not launched: it has no /dev/kfd fd to issue ioctls on")]
    Attached(Pid),
    /// The process has no KFD process (never opened /dev/kfd, or exited).
    #[error("process {0} has no kfd process")]
    NoKfdProcess(Pid),
    /// A queue is evicted (paused by CRIU, or restored but not resumed):
    /// the GPU cannot make progress.
    #[error("process {pid}: queue {q_id} is not running (evicted)")]
    QueuesNotRunning {
        /// The process.
        pid: Pid,
        /// The first queue found not running.
        q_id: u32,
    },
    /// The process holds no VRAM/GTT BO to keep its step counter in.
    #[error("process {0} has no vram or gtt bo")]
    NoMemory(Pid),
    /// A BO's memory could not be read or written.
    #[error("process {pid}: bo {handle:#x}: memory access failed with {errno}")]
    Memory {
        /// The process.
        pid: Pid,
        /// The handle.
        handle: u64,
        /// The error.
        errno: Errno,
    },
    /// A restored process differs from the description.
    #[error("process {pid} differs from the checkpointed workload: {}", .differences.join("; "))]
    Mismatch {
        /// The process checked.
        pid: Pid,
        /// One line per difference.
        differences: Vec<String>,
    },
}

/// One allocation as the application sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoDescription {
    /// The handle (`user_gpu_id << 32 | idr_slot`).
    pub handle: u64,
    /// GPU VA.
    pub va: u64,
    /// Real size in bytes.
    pub size: u64,
    /// `KFD_IOC_ALLOC_MEM_FLAGS_*`.
    pub flags: u32,
    /// CPU address of a USERPTR allocation, else 0.
    pub user_addr: u64,
    /// User gpu_ids the allocation is GPU-mapped on, ascending.
    pub mapped_on: Vec<GpuId>,
    /// Hash of the contents (VRAM, GTT and USERPTR; 0 for apertures).
    pub content_hash: u64,
}

/// One queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDescription {
    /// Queue id.
    pub q_id: u32,
    /// User gpu_id of its device.
    pub gpu_id: GpuId,
    /// Kernel queue type (0 compute, 1 SDMA, 4 SDMA XGMI).
    pub queue_type: u32,
    /// Doorbell id.
    pub doorbell_id: u32,
    /// Packets dispatched so far (from the MQD).
    pub dispatched: u64,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDescription {
    /// Event id.
    pub id: u32,
    /// `KFD_IOC_EVENT_*` type.
    pub event_type: u32,
    /// Whether it is signaled.
    pub signaled: bool,
}

/// Everything a workload process holds, in a restore-invariant form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadDescription {
    /// The process described.
    pub pid: Pid,
    /// Allocations by handle.
    pub bos: Vec<BoDescription>,
    /// Queues by id.
    pub queues: Vec<QueueDescription>,
    /// Events by id.
    pub events: Vec<EventDescription>,
    /// SVM ranges as (start, size) in bytes.
    pub svm_ranges: Vec<(u64, u64)>,
}

impl WorkloadDescription {
    /// The differences between two descriptions (the pid is ignored).
    pub fn differences(&self, other: &WorkloadDescription) -> Vec<String> {
        let mut out = Vec::new();
        let a: BTreeMap<u64, &BoDescription> = self.bos.iter().map(|b| (b.handle, b)).collect();
        let b: BTreeMap<u64, &BoDescription> = other.bos.iter().map(|b| (b.handle, b)).collect();
        for (h, x) in &a {
            match b.get(h) {
                None => out.push(format!("bo {h:#x} missing")),
                Some(y) if x != y => out.push(format!("bo {h:#x}: expected {x:?}, found {y:?}")),
                _ => {}
            }
        }
        for h in b.keys().filter(|h| !a.contains_key(h)) {
            out.push(format!("unexpected bo {h:#x}"));
        }
        if self.queues != other.queues {
            out.push(format!(
                "queues: expected {:?}, found {:?}",
                self.queues, other.queues
            ));
        }
        if self.events != other.events {
            out.push(format!(
                "events: expected {:?}, found {:?}",
                self.events, other.events
            ));
        }
        if self.svm_ranges != other.svm_ranges {
            out.push(format!(
                "svm ranges: expected {:?}, found {:?}",
                self.svm_ranges, other.svm_ranges
            ));
        }
        out
    }
}

/// Where a workload keeps its CPU memory: the targets of its USERPTR BOs
/// and its SVM ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CpuMemory {
    /// Simulator-owned ([`Sim::alloc_host_memory`]): it outlives the
    /// process, so a restore on the same simulator finds it in place
    /// without a CRIU pages dump carrying it.
    #[default]
    Simulator,
    /// The process's own ([`Sim::alloc_host_memory_for`]): unmapped when the
    /// process exits, so a checkpoint must carry it, as CRIU carries a real
    /// process's memory; needed to restore on another simulator.
    Process,
}

/// A simulated application process.
pub struct Workload {
    sim: Sim,
    pid: Pid,
    driver: SimDriver,
    kfd: Option<OwnedFd>,
    renders: Vec<OwnedFd>,
    va_next: BTreeMap<GpuId, u64>,
    memory: CpuMemory,
}

impl fmt::Debug for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workload")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// Issues one KFD ioctl with a typed argument.
pub(crate) fn kioctl<T>(
    drv: &SimDriver,
    fd: BorrowedFd<'_>,
    request: u32,
    arg: &mut T,
    op: &'static str,
) -> Result<(), WorkloadError>
where
    T: IntoBytes + FromBytes + Immutable + KnownLayout,
{
    debug_assert_eq!(_IOC_SIZE(request), std::mem::size_of::<T>());
    // SAFETY: `arg` is an exclusively borrowed `T` whose size is the size the
    // request encodes; every user pointer the workload puts in an argument
    // points at a live buffer of the right size for the duration of the call.
    let r = unsafe { drv.ioctl(fd, u64::from(request), (arg as *mut T).cast()) };
    r.map(|_| ()).map_err(|e| WorkloadError::Ioctl {
        pid: drv.pid(),
        op,
        errno: Errno(e.raw_os_error().unwrap_or(libc::EIO)),
    })
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A running 64-bit hash.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hasher(pub(crate) u64);

impl Hasher {
    pub(crate) fn new() -> Hasher {
        Hasher(0xCBF2_9CE4_8422_2325)
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0 = splitmix(self.0 ^ v);
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.u64(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.u64(u64::from_le_bytes(last));
        }
        self.u64(b.len() as u64);
    }
}

/// One allocation of a process, in handle order, with what step/fingerprint need.
struct Alloc {
    handle: u64,
    va: u64,
    size: u64,
    flags: u32,
    user_addr: u64,
    mapped_on: Vec<GpuId>,
    bo: crate::bo::BoId,
}

fn allocs(st: &State, pid: Pid) -> Result<Vec<Alloc>, WorkloadError> {
    let p = st.kfd(pid).ok_or(WorkloadError::NoKfdProcess(pid))?;
    let mut out = Vec::new();
    for pdd in &p.pdds {
        for (&slot, m) in &pdd.idr {
            // In user gpu_id order: the order of the process's devices
            // follows the machine's topology, which a restore on another
            // machine legitimately changes.
            let mut mapped_on: Vec<GpuId> =
                m.mapped.iter().map(|&i| p.pdds[i].user_gpu_id).collect();
            mapped_on.sort_unstable();
            out.push(Alloc {
                handle: crate::amdkfd::memory::make_handle(pdd.user_gpu_id, slot),
                va: m.va,
                size: m.size,
                flags: m.flags,
                user_addr: m.user_addr,
                mapped_on,
                bo: m.bo,
            });
        }
    }
    out.sort_by_key(|a| a.handle);
    Ok(out)
}

/// The allocations `step` mixes into: VRAM/GTT/USERPTR, except the event
/// signal page (the GPU writes event slots there, not data).
fn data_allocs<'a>(st: &State, pid: Pid, list: &'a [Alloc]) -> Vec<&'a Alloc> {
    let page = match st.kfd(pid).and_then(|p| p.signal_page.as_ref()) {
        Some(crate::amdkfd::process::SignalPage::User { bo, .. }) => Some(*bo),
        _ => None,
    };
    list.iter()
        .filter(|a| Some(a.bo) != page)
        .filter(|a| {
            matches!(
                st.bos.get(a.bo).map(|b| b.domain),
                Some(Domain::Vram | Domain::Gtt | Domain::UserPtr)
            )
        })
        .collect()
}

/// The allocation holding the step counter: the first VRAM/GTT data BO.
fn control_alloc<'a>(st: &State, pid: Pid, list: &'a [Alloc]) -> Result<&'a Alloc, WorkloadError> {
    data_allocs(st, pid, list)
        .into_iter()
        .find(|a| {
            matches!(
                st.bos.get(a.bo).map(|b| b.domain),
                Some(Domain::Vram | Domain::Gtt)
            )
        })
        .ok_or(WorkloadError::NoMemory(pid))
}

/// Hash of a BO's logical contents.
fn content_hash(st: &State, pid: Pid, a: &Alloc) -> Result<u64, WorkloadError> {
    let Some(bo) = st.bos.get(a.bo) else {
        return Ok(0);
    };
    let mut h = Hasher::new();
    let err = |errno| WorkloadError::Memory {
        pid,
        handle: a.handle,
        errno,
    };
    match &bo.backing {
        Backing::Memory(m) => {
            // Zero pages are skipped, so a page never written and a page
            // written with zeros (by a restore's copy) hash alike.
            const PAGE: usize = 4096;
            let zero = [0u8; PAGE];
            let mut buf = vec![0u8; (4 * MIB).min(bo.size) as usize];
            let mut off = 0;
            while off < bo.size {
                let n = (bo.size - off).min(buf.len() as u64) as usize;
                m.read_at(off, &mut buf[..n]).map_err(err)?;
                for (i, page) in buf[..n].chunks(PAGE).enumerate() {
                    if page != &zero[..page.len()] {
                        h.u64(off + (i * PAGE) as u64);
                        h.bytes(page);
                    }
                }
                off += n as u64;
            }
        }
        Backing::UserPtr { addr, .. } => match st.read_host(*addr, bo.size as usize) {
            Some(bytes) => h.bytes(&bytes),
            None => return Ok(0),
        },
        Backing::Aperture(_) => return Ok(0),
    }
    Ok(h.0)
}

fn describe_locked(st: &State, pid: Pid) -> Result<WorkloadDescription, WorkloadError> {
    let p = st.kfd(pid).ok_or(WorkloadError::NoKfdProcess(pid))?;
    let mut bos = Vec::new();
    for a in allocs(st, pid)? {
        bos.push(BoDescription {
            handle: a.handle,
            va: a.va,
            size: a.size,
            flags: a.flags,
            user_addr: a.user_addr,
            mapped_on: a.mapped_on.clone(),
            content_hash: content_hash(st, pid, &a)?,
        });
    }
    let queues = p
        .queues
        .values()
        .map(|q| QueueDescription {
            q_id: q.q_id,
            gpu_id: p.pdds[q.pdd].user_gpu_id,
            queue_type: q.ktype,
            doorbell_id: q.doorbell_id,
            dispatched: q.dispatched(),
        })
        .collect();
    let events = p
        .events
        .values()
        .map(|e| EventDescription {
            id: e.id,
            event_type: e.etype,
            signaled: e.signaled,
        })
        .collect();
    Ok(WorkloadDescription {
        pid,
        bos,
        queues,
        events,
        svm_ranges: p.svm.iter().map(|r| (r.start, r.size)).collect(),
    })
}

impl Workload {
    /// Spawns a process and sets it up with `profile` on every GPU.
    pub fn launch(sim: &Sim, profile: &Profile) -> Result<Workload, WorkloadError> {
        Workload::launch_with_memory(sim, profile, CpuMemory::Simulator)
    }

    /// [`Workload::launch`] with the CPU memory kept as `memory` says.
    pub fn launch_with_memory(
        sim: &Sim,
        profile: &Profile,
        memory: CpuMemory,
    ) -> Result<Workload, WorkloadError> {
        let pid = sim.spawn_process()?;
        Workload::launch_in_with_memory(sim, pid, profile, memory)
    }

    /// Sets up `profile` in existing process `pid` on every GPU it can see.
    pub fn launch_in(sim: &Sim, pid: Pid, profile: &Profile) -> Result<Workload, WorkloadError> {
        Workload::launch_in_with_memory(sim, pid, profile, CpuMemory::Simulator)
    }

    /// [`Workload::launch_in`] with the CPU memory kept as `memory` says.
    pub fn launch_in_with_memory(
        sim: &Sim,
        pid: Pid,
        profile: &Profile,
        memory: CpuMemory,
    ) -> Result<Workload, WorkloadError> {
        Workload::launch_on(sim, pid, profile, memory, None)
    }

    /// Sets up process `pid`: acquires the VM of every GPU it can see (as
    /// the ROCm runtime does at start) and builds `profile` on `only`, or
    /// on every GPU when `None`.
    fn launch_on(
        sim: &Sim,
        pid: Pid,
        profile: &Profile,
        memory: CpuMemory,
        only: Option<GpuId>,
    ) -> Result<Workload, WorkloadError> {
        let driver = sim.driver(pid);
        let kfd = open_device(&driver, pid, "/dev/kfd".as_ref())?;
        let mut w = Workload {
            sim: sim.clone(),
            pid,
            driver,
            kfd: Some(kfd),
            renders: Vec::new(),
            va_next: BTreeMap::new(),
            memory,
        };
        let mut version = kfd_ioctl_get_version_args::default();
        w.ioctl(AMDKFD_IOC_GET_VERSION, &mut version, "GET_VERSION")?;
        let gpus = w.gpu_ids()?;
        for (i, &gpu) in gpus.iter().enumerate() {
            let render = open_render(sim, &w.driver, pid, gpu)?;
            let mut acquire = kfd_ioctl_acquire_vm_args {
                drm_fd: std::os::fd::AsRawFd::as_raw_fd(&render) as u32,
                gpu_id: gpu,
            };
            w.ioctl(AMDKFD_IOC_ACQUIRE_VM, &mut acquire, "ACQUIRE_VM")?;
            w.renders.push(render);
            w.va_next.insert(gpu, (i as u64 + 1) << 40);
        }
        match only {
            Some(gpu) if gpus.contains(&gpu) => w.build(profile, &[gpu])?,
            Some(gpu) => return Err(SimError::NoSuchGpu(gpu).into()),
            None => w.build(profile, &gpus)?,
        }
        Ok(w)
    }

    /// A handle on process `pid` (for example one restored by a CRIU plugin)
    /// for stepping, describing and fingerprinting. It owns no fds.
    pub fn attach(sim: &Sim, pid: Pid) -> Workload {
        Workload {
            sim: sim.clone(),
            pid,
            driver: sim.driver(pid),
            kfd: None,
            renders: Vec::new(),
            va_next: BTreeMap::new(),
            memory: CpuMemory::Simulator,
        }
    }

    /// The process.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The process's driver.
    pub fn driver(&self) -> &SimDriver {
        &self.driver
    }

    /// The `/dev/kfd` fd the workload opened (`None` for attached workloads).
    pub fn kfd_fd(&self) -> Option<BorrowedFd<'_>> {
        self.kfd.as_ref().map(|f| f.as_fd())
    }

    /// The render-node fds the workload opened, in GPU order.
    pub fn render_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.renders.iter().map(|f| f.as_fd()).collect()
    }

    fn ioctl<T>(&self, request: u32, arg: &mut T, op: &'static str) -> Result<(), WorkloadError>
    where
        T: IntoBytes + FromBytes + Immutable + KnownLayout,
    {
        let fd = self.kfd.as_ref().ok_or(WorkloadError::Attached(self.pid))?;
        kioctl(&self.driver, fd.as_fd(), request, arg, op)
    }

    /// The gpu_ids the process sees (GET_PROCESS_APERTURES_NEW).
    fn gpu_ids(&self) -> Result<Vec<GpuId>, WorkloadError> {
        let mut q = kfd_ioctl_get_process_apertures_new_args::default();
        self.ioctl(
            AMDKFD_IOC_GET_PROCESS_APERTURES_NEW,
            &mut q,
            "GET_PROCESS_APERTURES_NEW",
        )?;
        let mut list = vec![kfd_process_device_apertures::default(); q.num_of_nodes as usize];
        q.kfd_process_device_apertures_ptr = list.as_mut_ptr() as u64;
        self.ioctl(
            AMDKFD_IOC_GET_PROCESS_APERTURES_NEW,
            &mut q,
            "GET_PROCESS_APERTURES_NEW",
        )?;
        Ok(list[..q.num_of_nodes as usize]
            .iter()
            .map(|a| a.gpu_id)
            .collect())
    }

    fn next_va(&mut self, gpu: GpuId, size: u64) -> u64 {
        let slot = self.va_next.entry(gpu).or_insert(1 << 40);
        let va = *slot;
        *slot += size.div_ceil(2 * MIB).max(1) * 2 * MIB;
        va
    }

    /// ALLOC_MEMORY_OF_GPU + MAP_MEMORY_TO_GPU on `map_on`; returns the handle.
    pub fn alloc(
        &mut self,
        gpu: GpuId,
        size: u64,
        flags: u32,
        map_on: &[GpuId],
    ) -> Result<u64, WorkloadError> {
        let (va, mmap_offset) = if flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0 {
            let addr = self.cpu_memory(size as usize)?;
            (addr, addr)
        } else {
            (self.next_va(gpu, size), 0)
        };
        let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: va,
            size,
            handle: 0,
            mmap_offset,
            gpu_id: gpu,
            flags,
        };
        self.ioctl(
            AMDKFD_IOC_ALLOC_MEMORY_OF_GPU,
            &mut a,
            "ALLOC_MEMORY_OF_GPU",
        )?;
        if !map_on.is_empty() {
            self.map(a.handle, map_on)?;
        }
        Ok(a.handle)
    }

    /// MAP_MEMORY_TO_GPU of `handle` on `gpus`.
    pub fn map(&self, handle: u64, gpus: &[GpuId]) -> Result<(), WorkloadError> {
        let ids = gpus.to_vec();
        let mut m = kfd_ioctl_map_memory_to_gpu_args {
            handle,
            device_ids_array_ptr: ids.as_ptr() as u64,
            n_devices: ids.len() as u32,
            n_success: 0,
        };
        self.ioctl(AMDKFD_IOC_MAP_MEMORY_TO_GPU, &mut m, "MAP_MEMORY_TO_GPU")
    }

    fn doorbell_slice(&self, gpu: GpuId) -> u64 {
        self.sim
            .shared
            .gpus
            .iter()
            .find(|g| g.id() == gpu)
            .map_or(8192, |g| g.doorbell_slice)
    }

    fn create_queue(
        &mut self,
        gpu: GpuId,
        user_type: u32,
        rings: u64,
        index: u64,
    ) -> Result<u32, WorkloadError> {
        let ring = rings + index * 64 * KIB;
        let compute =
            user_type == KFD_IOC_QUEUE_TYPE_COMPUTE_AQL || user_type == KFD_IOC_QUEUE_TYPE_COMPUTE;
        let mut q = kfd_ioctl_create_queue_args {
            ring_base_address: ring,
            write_pointer_address: ring + 32 * KIB,
            read_pointer_address: ring + 32 * KIB + 8,
            ring_size: (32 * KIB) as u32,
            gpu_id: gpu,
            queue_type: user_type,
            queue_percentage: 100,
            queue_priority: 7,
            eop_buffer_address: if compute { ring + 40 * KIB } else { 0 },
            eop_buffer_size: if compute { 4 * KIB } else { 0 },
            ctx_save_restore_address: if compute { ring + 48 * KIB } else { 0 },
            ctx_save_restore_size: if compute { (16 * KIB) as u32 } else { 0 },
            ctl_stack_size: if compute { (4 * KIB) as u32 } else { 0 },
            ..Default::default()
        };
        self.ioctl(AMDKFD_IOC_CREATE_QUEUE, &mut q, "CREATE_QUEUE")?;
        Ok(q.queue_id)
    }

    fn create_event(&self, event_page: u64) -> Result<u32, WorkloadError> {
        let mut e = kfd_ioctl_create_event_args {
            event_page_offset: event_page,
            event_type: KFD_IOC_EVENT_SIGNAL,
            auto_reset: 1,
            ..Default::default()
        };
        self.ioctl(AMDKFD_IOC_CREATE_EVENT, &mut e, "CREATE_EVENT")?;
        Ok(e.event_id)
    }

    fn svm_range(&self, start: u64, size: u64, gpu: GpuId) -> Result<(), WorkloadError> {
        #[repr(C)]
        #[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
        struct SvmArgs {
            head: kfd_ioctl_svm_args,
            attrs: [kfd_ioctl_svm_attribute; 2],
        }
        let mut a = SvmArgs {
            head: kfd_ioctl_svm_args {
                start_addr: start,
                size,
                op: KFD_IOCTL_SVM_OP_SET_ATTR,
                nattr: 2,
                attrs: [],
            },
            attrs: [
                kfd_ioctl_svm_attribute {
                    r#type: KFD_IOCTL_SVM_ATTR_ACCESS,
                    value: gpu,
                },
                kfd_ioctl_svm_attribute {
                    r#type: KFD_IOCTL_SVM_ATTR_PREFERRED_LOC,
                    value: gpu,
                },
            ],
        };
        let request = _IOC(
            _IOC_READ | _IOC_WRITE,
            AMDKFD_IOCTL_BASE,
            0x20,
            std::mem::size_of::<SvmArgs>(),
        );
        self.ioctl(request, &mut a, "SVM")
    }

    fn build(&mut self, profile: &Profile, gpus: &[GpuId]) -> Result<(), WorkloadError> {
        const VRAM: u32 = KFD_IOC_ALLOC_MEM_FLAGS_VRAM
            | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE
            | KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE;
        const GTT: u32 = KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
        const USERPTR: u32 = KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
        let (n_bos, max_bo, compute_q, sdma_q, events, userptrs, svm) = match *profile {
            Profile::Basic => (0usize, 0u64, 1u64, 0u64, 1usize, 1usize, false),
            Profile::PyTorchLike {
                bos_per_gpu,
                max_bo_bytes,
            } => (bos_per_gpu, max_bo_bytes.max(4 * KIB), 8, 2, 16, 4, true),
            Profile::TensorFlowLike { bo_bytes } => (6, bo_bytes.max(4 * KIB), 2, 4, 4, 0, false),
            Profile::DataParallel { .. } => (2, 0, 2, 0, 2, 0, false),
        };
        let first = gpus.first().copied();
        for &gpu in gpus {
            let own = [gpu];
            // The event signal page lives in a GTT BO of the first GPU.
            let event_page = if Some(gpu) == first {
                self.alloc(gpu, 64 * KIB, GTT, &own)?
            } else {
                0
            };
            let doorbells = self.doorbell_slice(gpu);
            self.alloc(
                gpu,
                doorbells,
                KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
                &own,
            )?;
            self.alloc(
                gpu,
                4 * KIB,
                KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
                &own,
            )?;
            match profile {
                Profile::Basic => {
                    let vram = self.alloc(gpu, 64 * KIB, VRAM, &own)?;
                    self.fill(vram, 64 * KIB)?;
                    let gtt = self.alloc(gpu, 16 * KIB, GTT, &own)?;
                    self.fill(gtt, 8 * KIB)?;
                }
                Profile::PyTorchLike { .. } => {
                    let levels = (max_bo / (4 * KIB)).max(1).ilog2() as usize + 1;
                    for i in 0..n_bos {
                        let size = ((4 * KIB) << (i % levels)).min(max_bo);
                        let gtt = i % 3 == 2;
                        let mut flags = if gtt { GTT } else { VRAM };
                        if i % 5 == 4 {
                            flags &= !KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
                        }
                        let map_on: &[GpuId] = if i % 7 == 6 { gpus } else { &own };
                        let handle = self.alloc(gpu, size, flags, map_on)?;
                        let used = match (gtt, i % 4 == 3) {
                            (true, _) => size / 2,
                            (false, true) => 0,
                            (false, false) => size,
                        };
                        self.fill(handle, used)?;
                    }
                }
                Profile::TensorFlowLike { .. } => {
                    for i in 0..n_bos {
                        let handle = self.alloc(gpu, max_bo, VRAM, &own)?;
                        self.fill(handle, if i + 1 < n_bos { max_bo } else { 0 })?;
                    }
                    for _ in 0..2 {
                        let handle = self.alloc(gpu, 2 * MIB, GTT, &own)?;
                        self.fill(handle, MIB)?;
                    }
                }
                Profile::DataParallel {
                    weights_bytes,
                    activations_bytes,
                } => {
                    let weights = (*weights_bytes).max(4 * KIB).next_multiple_of(4 * KIB);
                    let handle = self.alloc(gpu, weights, VRAM, &own)?;
                    // The same seed in every replica: identical weights.
                    self.fill_seeded(handle, weights, DATA_PARALLEL_WEIGHTS_SEED)?;
                    let activations = (*activations_bytes).max(4 * KIB).next_multiple_of(4 * KIB);
                    let handle = self.alloc(gpu, activations, VRAM, &own)?;
                    // Seeded by the handle, which names the process's
                    // GPU: each replica's activations differ, and a twin
                    // launched on the same GPU has the same ones.
                    self.fill(handle, activations)?;
                }
            }
            for _ in 0..userptrs {
                let size = if matches!(profile, Profile::Basic) {
                    16 * KIB
                } else {
                    64 * KIB
                };
                self.alloc(gpu, size, USERPTR, &own)?;
            }
            let n_queues = compute_q + sdma_q;
            let rings_handle = self.alloc(gpu, n_queues * 64 * KIB, GTT, &own)?;
            let rings = self.va_of(rings_handle)?;
            for i in 0..compute_q {
                self.create_queue(gpu, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL, rings, i)?;
            }
            for i in 0..sdma_q {
                let ty = if i % 2 == 0 {
                    KFD_IOC_QUEUE_TYPE_SDMA
                } else {
                    KFD_IOC_QUEUE_TYPE_SDMA_XGMI
                };
                self.create_queue(gpu, ty, rings, compute_q + i)?;
            }
            for e in 0..events {
                self.create_event(if e == 0 { event_page } else { 0 })?;
            }
            if svm {
                let len = 256 * KIB;
                let start = self.cpu_memory(len as usize)?;
                self.svm_range(start, len, gpu)?;
            }
        }
        // The step counter is the first word of the first data BO: it
        // starts at 0 whatever the fill put there.
        let st = self.sim.lock();
        let list = allocs(&st, self.pid)?;
        let control = control_alloc(&st, self.pid, &list)?;
        write8(&st, self.pid, control, 0, 0)
    }

    /// Fills the first `used` bytes of VRAM/GTT BO `handle` with
    /// incompressible bytes (a splitmix stream seeded by the handle), as the
    /// application's data would be; the rest stays untouched (zero).
    fn fill(&self, handle: u64, used: u64) -> Result<(), WorkloadError> {
        self.fill_seeded(handle, used, handle)
    }

    /// [`Workload::fill`] with the stream seeded by `seed` (equal seeds
    /// give equal bytes, whatever the BO).
    fn fill_seeded(&self, handle: u64, used: u64, seed: u64) -> Result<(), WorkloadError> {
        const CHUNK: u64 = MIB;
        let mut buf = Vec::new();
        let mut offset = 0;
        while offset < used {
            let len = (used - offset).min(CHUNK);
            buf.clear();
            let first_word = offset / 8;
            buf.extend(
                (0..len.div_ceil(8))
                    .flat_map(|w| splitmix(seed.rotate_left(40) ^ (first_word + w)).to_le_bytes()),
            );
            buf.truncate(len as usize);
            self.write_bo(handle, offset, &buf)?;
            offset += len;
        }
        Ok(())
    }

    /// Allocates `len` bytes of CPU memory where [`CpuMemory`] says.
    fn cpu_memory(&self, len: usize) -> Result<u64, SimError> {
        match self.memory {
            CpuMemory::Simulator => self.sim.alloc_host_memory(len),
            CpuMemory::Process => self.sim.alloc_host_memory_for(self.pid, len),
        }
    }

    fn va_of(&self, handle: u64) -> Result<u64, WorkloadError> {
        let st = self.sim.lock();
        allocs(&st, self.pid)?
            .iter()
            .find(|a| a.handle == handle)
            .map(|a| a.va)
            .ok_or(WorkloadError::Memory {
                pid: self.pid,
                handle,
                errno: Errno(libc::EINVAL),
            })
    }

    /// Exports allocation `handle` (EXPORT_DMABUF) and imports the dma-buf
    /// into `other` (IMPORT_DMABUF on its first GPU, mapped there); returns
    /// the handle in `other`. The dma-buf fd is closed afterwards, so the two
    /// processes share one BO.
    pub fn share_with(&self, handle: u64, other: &mut Workload) -> Result<u64, WorkloadError> {
        let mut e = kfd_ioctl_export_dmabuf_args {
            handle,
            flags: libc::O_RDWR as u32 | libc::O_CLOEXEC as u32,
            dmabuf_fd: 0,
        };
        self.ioctl(AMDKFD_IOC_EXPORT_DMABUF, &mut e, "EXPORT_DMABUF")?;
        // SAFETY: EXPORT_DMABUF succeeded, so `dmabuf_fd` is a new fd we own.
        let dmabuf =
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(e.dmabuf_fd as i32) };
        let gpu = *other
            .va_next
            .keys()
            .next()
            .ok_or(WorkloadError::Attached(other.pid))?;
        let size = {
            let st = self.sim.lock();
            st.bos
                .lookup_dmabuf(e.dmabuf_fd as i32)
                .ok()
                .and_then(|id| st.bos.get(id))
                .map_or(0, |b| b.size)
        };
        let va = other.next_va(gpu, size.max(4 * KIB));
        let mut i = kfd_ioctl_import_dmabuf_args {
            va_addr: va,
            handle: 0,
            gpu_id: gpu,
            dmabuf_fd: std::os::fd::AsRawFd::as_raw_fd(&dmabuf) as u32,
        };
        other.ioctl(AMDKFD_IOC_IMPORT_DMABUF, &mut i, "IMPORT_DMABUF")?;
        drop(dmabuf);
        other.map(i.handle, &[gpu])?;
        Ok(i.handle)
    }

    /// Launches one process per GPU of the machine with `profile` (a
    /// data-parallel job: [`Profile::DataParallel`] gives every process the
    /// same weights). Each process opens every GPU, as the ROCm runtime
    /// does, and allocates and queues work only on its own (as
    /// `HIP_VISIBLE_DEVICES` or `torch.cuda.set_device` make it).
    pub fn launch_data_parallel(
        sim: &Sim,
        profile: &Profile,
    ) -> Result<Vec<Workload>, WorkloadError> {
        let gpus: Vec<GpuId> = sim.shared.gpus.iter().map(|g| g.id()).collect();
        let mut all = Vec::with_capacity(gpus.len());
        for gpu in gpus {
            let pid = sim.spawn_process()?;
            all.push(Workload::launch_on(
                sim,
                pid,
                profile,
                CpuMemory::Simulator,
                Some(gpu),
            )?);
        }
        Ok(all)
    }

    /// Launches `n` processes with `profile` and shares the first VRAM BO of
    /// the first process with every other one through a dma-buf.
    pub fn launch_sharing(
        sim: &Sim,
        n: usize,
        profile: &Profile,
    ) -> Result<Vec<Workload>, WorkloadError> {
        let mut all = Vec::new();
        for _ in 0..n {
            all.push(Workload::launch(sim, profile)?);
        }
        if let Some((first, rest)) = all.split_first_mut() {
            let shared = {
                let st = sim.lock();
                allocs(&st, first.pid)?
                    .into_iter()
                    .find(|a| a.flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0)
                    .map(|a| a.handle)
                    .ok_or(WorkloadError::NoMemory(first.pid))?
            };
            for other in rest {
                first.share_with(shared, other)?;
            }
        }
        Ok(all)
    }

    /// Writes `data` into allocation `handle` at `offset`, as the application
    /// (or its GPU kernels) would.
    pub fn write_bo(&self, handle: u64, offset: u64, data: &[u8]) -> Result<(), WorkloadError> {
        let st = self.sim.lock();
        let a = find(&st, self.pid, handle)?;
        let err = |errno| WorkloadError::Memory {
            pid: self.pid,
            handle,
            errno,
        };
        match st.bos.get(a.bo).map(|b| &b.backing) {
            Some(Backing::Memory(m)) => m.write_at(offset, data).map_err(err),
            Some(Backing::UserPtr { addr, space, .. }) => {
                let written = offset.saturating_add(data.len() as u64) <= a.size
                    && match *space {
                        crate::sim::Space::Local => st.write_host(addr + offset, data),
                        // A remote client's own memory.
                        crate::sim::Space::Remote(pid) => {
                            crate::sim::remote_write(pid, addr + offset, data).is_ok()
                        }
                    };
                if !written {
                    return Err(err(Errno(libc::EFAULT)));
                }
                Ok(())
            }
            _ => Err(err(Errno(libc::EINVAL))),
        }
    }

    /// Reads `len` bytes of allocation `handle` at `offset`.
    pub fn read_bo(&self, handle: u64, offset: u64, len: usize) -> Result<Vec<u8>, WorkloadError> {
        let st = self.sim.lock();
        let a = find(&st, self.pid, handle)?;
        let err = |errno| WorkloadError::Memory {
            pid: self.pid,
            handle,
            errno,
        };
        match st.bos.get(a.bo).map(|b| &b.backing) {
            Some(Backing::Memory(m)) => {
                let mut buf = vec![0u8; len];
                m.read_at(offset, &mut buf).map_err(err)?;
                Ok(buf)
            }
            Some(Backing::UserPtr { addr, space, .. })
                if offset.saturating_add(len as u64) <= a.size =>
            {
                match *space {
                    crate::sim::Space::Local => st.read_host(addr + offset, len),
                    // A remote client's own memory.
                    crate::sim::Space::Remote(pid) => {
                        let mut buf = vec![0u8; len];
                        crate::sim::remote_read(pid, addr + offset, &mut buf)
                            .ok()
                            .map(|()| buf)
                    }
                }
                .ok_or(err(Errno(libc::EFAULT)))
            }
            _ => Err(err(Errno(libc::EINVAL))),
        }
    }

    /// One step of GPU progress: fails with [`WorkloadError::QueuesNotRunning`]
    /// while a queue is evicted; otherwise advances the step counter (kept in
    /// the first VRAM/GTT BO), mixes it into every VRAM/GTT/USERPTR BO,
    /// advances every queue and signals one signal event.
    pub fn step(&mut self) -> Result<(), WorkloadError> {
        let mut st = self.sim.lock();
        let pid = self.pid;
        let p = st.kfd(pid).ok_or(WorkloadError::NoKfdProcess(pid))?;
        if let Some(q) = p.queues.values().find(|q| !p.queues_running(q.pdd)) {
            return Err(WorkloadError::QueuesNotRunning { pid, q_id: q.q_id });
        }
        let list = allocs(&st, pid)?;
        let control = control_alloc(&st, pid, &list)?;
        let counter = {
            let raw = read8(&st, pid, control, 0)?;
            let c = raw.wrapping_add(1);
            write8(&st, pid, control, 0, c)?;
            c
        };
        for a in data_allocs(&st, pid, &list) {
            let pages = a.size / 4096;
            let page = splitmix(counter ^ a.handle) % pages.max(1);
            for off in [8, page * 4096 + 16] {
                if off + 8 > a.size {
                    continue;
                }
                let old = read8(&st, pid, a, off)?;
                write8(
                    &st,
                    pid,
                    a,
                    off,
                    splitmix(old ^ counter.rotate_left(13) ^ a.handle),
                )?;
            }
        }
        let p = st.kfd_mut(pid).ok_or(WorkloadError::NoKfdProcess(pid))?;
        for q in p.queues.values_mut() {
            q.advance();
        }
        let signal_ids: Vec<u32> = p
            .events
            .values()
            .filter(|e| is_signal_type(e.etype))
            .map(|e| e.id)
            .collect();
        if !signal_ids.is_empty() {
            let id = signal_ids[(counter % signal_ids.len() as u64) as usize];
            crate::amdkfd::event::signal(&mut st, pid, id).map_err(|errno| {
                WorkloadError::Ioctl {
                    pid,
                    op: "SET_EVENT",
                    errno,
                }
            })?;
        }
        Ok(())
    }

    /// The number of steps made so far (the counter in the control BO).
    pub fn steps(&self) -> Result<u64, WorkloadError> {
        let st = self.sim.lock();
        let list = allocs(&st, self.pid)?;
        read8(&st, self.pid, control_alloc(&st, self.pid, &list)?, 0)
    }

    /// What the process holds now.
    pub fn describe(&self) -> Result<WorkloadDescription, WorkloadError> {
        describe_locked(&self.sim.lock(), self.pid)
    }

    /// Checks that process `pid` holds what `expected` describes (same
    /// handles, addresses, sizes, flags, mappings and contents; same queues,
    /// events and SVM ranges).
    pub fn verify(
        sim: &Sim,
        pid: Pid,
        expected: &WorkloadDescription,
    ) -> Result<(), WorkloadError> {
        let found = describe_locked(&sim.lock(), pid)?;
        let differences = expected.differences(&found);
        if differences.is_empty() {
            Ok(())
        } else {
            Err(WorkloadError::Mismatch { pid, differences })
        }
    }

    /// A hash of everything the workload's progress is made of (see the
    /// module docs); equal for an interrupted-and-restored run and an
    /// uninterrupted one.
    pub fn fingerprint(&self) -> Result<u64, WorkloadError> {
        let st = self.sim.lock();
        let d = describe_locked(&st, self.pid)?;
        let p = st
            .kfd(self.pid)
            .ok_or(WorkloadError::NoKfdProcess(self.pid))?;
        let mut h = Hasher::new();
        for b in &d.bos {
            // A USERPTR BO sits wherever the application's CPU memory is,
            // which differs between two runs in one host: its address is
            // checked by `verify`, not fingerprinted.
            let va = if b.flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0 {
                0
            } else {
                b.va
            };
            for v in [b.handle, va, b.size, u64::from(b.flags), b.content_hash] {
                h.u64(v);
            }
            for &g in &b.mapped_on {
                h.u64(u64::from(g));
            }
        }
        for q in p.queues.values() {
            for v in [
                u64::from(q.q_id),
                u64::from(q.ktype),
                u64::from(q.format),
                u64::from(q.doorbell_id),
                u64::from(q.sdma_id),
                q.ring_base,
                q.ring_size,
                q.dispatched(),
                u64::from(p.pdds[q.pdd].user_gpu_id),
            ] {
                h.u64(v);
            }
            h.bytes(&q.ctl_stack);
        }
        for e in p.events.values() {
            h.u64(u64::from(e.id));
            h.u64(u64::from(e.etype));
            h.u64(u64::from(e.signaled));
            h.u64(u64::from(e.auto_reset));
        }
        for r in &p.svm {
            // SVM ranges cover CPU memory too: their start is not fingerprinted.
            for v in [r.size, u64::from(r.flags), u64::from(r.granularity)] {
                h.u64(v);
            }
        }
        Ok(h.0)
    }

    /// Closes the workload's fds and ends its process (simulated exit). The
    /// host memory behind its USERPTR BOs stays when it is the simulator's
    /// ([`CpuMemory::Simulator`]) and is unmapped with the process when it is
    /// the process's own ([`CpuMemory::Process`]).
    pub fn exit(mut self) -> Result<(), WorkloadError> {
        self.renders.clear();
        self.kfd = None;
        self.sim.exit_process(self.pid)?;
        Ok(())
    }
}

fn find(st: &State, pid: Pid, handle: u64) -> Result<Alloc, WorkloadError> {
    allocs(st, pid)?
        .into_iter()
        .find(|a| a.handle == handle)
        .ok_or(WorkloadError::Memory {
            pid,
            handle,
            errno: Errno(libc::EINVAL),
        })
}

fn read8(st: &State, pid: Pid, a: &Alloc, off: u64) -> Result<u64, WorkloadError> {
    let err = |errno| WorkloadError::Memory {
        pid,
        handle: a.handle,
        errno,
    };
    let mut b = [0u8; 8];
    match st.bos.get(a.bo).map(|b| &b.backing) {
        Some(Backing::Memory(m)) => m.read_at(off, &mut b).map_err(err)?,
        Some(Backing::UserPtr { addr, .. }) => {
            b.copy_from_slice(
                &st.read_host(addr + off, 8)
                    .ok_or(err(Errno(libc::EFAULT)))?,
            );
        }
        _ => return Err(err(Errno(libc::EINVAL))),
    }
    Ok(u64::from_le_bytes(b))
}

fn write8(st: &State, pid: Pid, a: &Alloc, off: u64, v: u64) -> Result<(), WorkloadError> {
    let err = |errno| WorkloadError::Memory {
        pid,
        handle: a.handle,
        errno,
    };
    match st.bos.get(a.bo).map(|b| &b.backing) {
        Some(Backing::Memory(m)) => m.write_at(off, &v.to_le_bytes()).map_err(err),
        Some(Backing::UserPtr { addr, .. }) => {
            if st.write_host(addr + off, &v.to_le_bytes()) {
                Ok(())
            } else {
                Err(err(Errno(libc::EFAULT)))
            }
        }
        _ => Err(err(Errno(libc::EINVAL))),
    }
}
