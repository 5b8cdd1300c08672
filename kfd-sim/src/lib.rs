//! A simulated amdkfd + amdgpu kernel that implements [`kfd::Driver`].
//!
//! The simulator stands in for the kernel at the ABI level: it receives the
//! same request codes and `#[repr(C)]` argument structs (with real user
//! pointers) as the kernel would, and answers with the same results and errno
//! values, rule for rule, as written down in the project's `spec/kernel.md`.
//! Code above `kfd::Driver` cannot tell it from [`kfd::HostDriver`].
//!
//! * [`Sim`] is one simulated machine: GPUs built from an
//!   [`amdgpu_topology::System`] (a fixture or [`Sim::synthetic`]), the sysfs
//!   tree for that topology written into a directory the simulator owns
//!   ([`Sim::sysfs_root`]), simulated processes ([`Pid`]) with capabilities,
//!   ptrace parents and GPU visibility, and the device state.
//! * [`SimDriver`] is one process's view: `sim.driver(pid)` returns the
//!   [`kfd::Driver`] a simulated process (or CRIU acting for it) uses. Every
//!   fd it hands out is a real file descriptor (a memfd), so `dup`, passing
//!   fds over unix sockets, `close` and `mmap` behave as with real devices; the
//!   simulator keys its state on the open file, never on the fd number.
//! * [`workload`] builds application-like processes (BOs of every type, queues,
//!   events, SVM ranges) that make deterministic progress, for end-to-end
//!   checkpoint/restore tests.
//! * The user-mode queues a process creates execute: SDMA queues copy, fill
//!   and fence, PM4 and AQL compute queues run what needs no shader, and
//!   their interrupts fire events ([`Sim::queue_status`],
//!   [`Sim::set_sdma_bandwidth`] for the copies' rate).
//! * [`FaultSpec`] injects failures (the Nth call of an ioctl or CRIU op, an
//!   mmap, a short DMA); [`Accounting`] counts what is alive so tests can
//!   assert that nothing leaked.
//!
//! Everything runs inside one host process: "processes" are identities the
//! simulator tracks, not real processes. The simulator never does anything the
//! real kernel would not do, and never touches real GPU devices.
//!
//! # Devices and identities
//!
//! * `/dev/kfd` is character device 511:0 ([`KFD_MAJOR`]); render nodes are
//!   226:`minor` ([`DRM_MAJOR`]) for the minors of the topology's GPU nodes.
//!   Other paths are `ENOENT`; a render node of a GPU the process's device
//!   cgroup hides ([`ProcessConfig::visible_gpus`]) is `EPERM`, and so is a
//!   read of its topology node in the simulated sysfs through
//!   [`kfd::Driver::read_sysfs`] (the directory listing shows every node, as
//!   sysfs does).
//! * Each open is a new memfd. The simulator keys its state on the memfd's
//!   inode, so dup'ed and passed fds resolve to the same open file; a dma-buf
//!   is a re-open of the BO's memfd (read-write or read-only), so `lseek`,
//!   `mmap` and `fcntl(F_GETFL)` behave as on a real dma-buf.
//! * The calling process is the [`SimDriver`]'s pid. Pids start at 1000;
//!   [`Sim::spawn_process_with`] can recreate a pid (CRIU restores under the
//!   original pid). [`Sim::ptrace_attach`] and
//!   [`Sim::set_checkpoint_restore_capable`] model CRIU's ptrace and
//!   capabilities.
//!
//! # Fidelity and limits
//!
//! Modelled after the kernel rules in `spec/kernel.md` §1–§3 and §5: the
//! dispatch rules, every CRIU op with its validation order, the kernel's
//! private-data layout (`MAX_GPU_INSTANCE` 64 or 16), user/actual gpu_id
//! translation (and the places that leak actual ids), BO types with their
//! size rules, eviction levels, the signal page, SVM ranges. Deliberate
//! simplifications, each documented where it lives:
//!
//! * the debugger ioctls of KFD 1.13+ (RUNTIME_ENABLE, DBG_TRAP) are outside
//!   the simulated table (`ENOTTY`); GET_TILE_CONFIG and SMI_EVENTS answer
//!   `EOPNOTSUPP`; queues of type SDMA_BY_ENG_ID are refused (`EINVAL`);
//! * user-mode queues execute (`exec`: SDMA, PM4 and AQL packets, doorbells,
//!   preemption into the MQD, interrupts into events, WAIT_EVENTS blocking),
//!   but the GPU has no shader cores: a kernel dispatch stops its queue with
//!   an error (see [`Sim::queue_status`]);
//! * CPU VMAs are not modelled, so SVM's "range must be mapped" check is not
//!   made; USERPTR pages are "pinned" only in [`Accounting`];
//! * the RESUME worker (userptr revalidation, queue restart) runs before
//!   RESUME returns: queues are running at the next observation.
//!
//! ```
//! use kfd::Driver;
//! use kfd_sim::{Sim, SimConfig};
//!
//! let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
//! let pid = sim.spawn_process().unwrap();
//! let drv = sim.driver(pid);
//! let kfd = drv.open("/dev/kfd".as_ref(), libc::O_RDWR | libc::O_CLOEXEC).unwrap();
//! let mut v = kfd_sys::kfd_ioctl_get_version_args::default();
//! // SAFETY: `v` is a valid, writable GET_VERSION argument block.
//! unsafe {
//!     drv.ioctl(
//!         std::os::fd::AsFd::as_fd(&kfd),
//!         kfd_sys::AMDKFD_IOC_GET_VERSION as u64,
//!         (&mut v as *mut kfd_sys::kfd_ioctl_get_version_args).cast(),
//!     )
//! }
//! .unwrap();
//! assert_eq!((v.major_version, v.minor_version), (1, 18));
//! ```
//!
//! The same through the safe API of the `kfd` crate: a process opens
//! `/dev/kfd` and a render node, binds the GPU's VM and allocates VRAM, as
//! ROCr does at start-up.
//!
//! ```
//! use std::os::fd::AsFd;
//! use kfd::{AllocFlags, AllocRequest, GpuId, Kfd, RenderMinor, RenderNode};
//! use kfd_sim::{Sim, SimConfig};
//!
//! let sim = Sim::synthetic(1, SimConfig::default())?;
//! let driver = sim.driver(sim.spawn_process()?); // or kfd::HostDriver
//! let kfd = Kfd::open(driver.clone())?;
//! assert!(kfd.version()?.supports_criu());
//!
//! let gpu = &sim.gpus()[0];
//! let render = RenderNode::open(driver, RenderMinor(gpu.render_minor))?;
//! kfd.acquire_vm(GpuId(gpu.gpu_id), render.as_fd())?;
//! let bo = kfd.alloc_memory(&AllocRequest {
//!     gpu_id: GpuId(gpu.gpu_id),
//!     va_addr: 0x7f00_0000_0000,
//!     size: 2 << 20,
//!     flags: AllocFlags::VRAM | AllocFlags::WRITABLE,
//! })?;
//! assert_eq!(bo.handle.gpu_id(), GpuId(gpu.gpu_id));
//! kfd.free_memory(bo.handle)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

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
    DevDriNode, GpuInfo, HostMemorySnapshot, KfdState, Pid, ProcessConfig, RenderBuffer, Sim,
    SimConfig, SimDriver, SimError, DRM_MAJOR, KFD_MAJOR,
};
pub use sysfs::{
    complete_cpu_memory, complete_gpu_caches, complete_kernel_properties,
    complete_system_properties, match_entry_counts, synthetic_system,
};

/// A kernel error number, as the simulated kernel returns it: the `kfd`
/// crate's [`kfd::Errno`], so the two crates share one type and one table
/// of errno names.
pub use kfd::Errno;
