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
//!
//! Inside: this module holds the profiles, the errors and the process
//! handle (launch, attach, exit); `build` sets a process up as its profile
//! says (allocations, mappings, queues, events, SVM ranges, shared
//! dma-bufs); `state` describes, hashes, verifies and steps it;
//! [`copy_stream`] and [`render_only`] are workloads of their own.

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use ::kfd::Driver;
use amdgpu_topology::GpuId;
use kfd_sys::*;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::{Pid, Sim, SimDriver, SimError};
use ::kfd::Errno;

mod build;
pub mod copy_stream;
pub mod render_only;
mod state;

pub(crate) use self::state::Hasher;
pub use self::state::{BoDescription, EventDescription, QueueDescription, WorkloadDescription};

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
