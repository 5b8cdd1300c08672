//! The checkpoint/restore engine for the GPU state of AMD GPU (ROCm)
//! processes, free of CRIU.
//!
//! A process that uses an AMD GPU holds state in the amdkfd/amdgpu driver:
//! buffer objects (BOs) in VRAM and GTT, user-mode queues, events, GPU ids,
//! render nodes, dma-buf exports. This crate saves that state from a
//! process's open device files into any [`amdgpu_image::ImageStore`] and
//! puts it back into a new process, through the kernel's CRIU ioctls
//! (`AMDKFD_IOC_CRIU_OP`) and the amdgpu render-node ioctls. It is generic
//! over [`kfd::Driver`], so the same code runs against the real kernel
//! ([`kfd::HostDriver`]) and against a simulated one (`kfd-sim`).
//!
//! The CRIU plugin (`criu-plugin-amdgpu`) is one consumer: it maps CRIU's
//! hooks onto this crate. Another checkpoint tool drives the same steps
//! itself:
//!
//! 1. [`identify::Devices::probe`] and [`identify::Devices::classify_fd`]:
//!    which of a process's fds are `/dev/kfd`, render nodes or dma-bufs.
//! 2. [`dump::Dumper`]: `dump_kfd` pauses the process's GPU queues, saves
//!    devices, BOs (contents through the overlapped per-GPU pipeline of
//!    [`transfer`]), queues and events; `dump_render_node` and
//!    `dump_dmabuf` save the other files; `unpause_all` lets the GPU run
//!    again (a failed dump never leaves a process paused).
//! 3. [`restore::Restorer`]: reads and validates an image, maps the
//!    checkpointed GPUs onto this machine's (`amdgpu-topology`), recreates
//!    the BOs and queues, copies the contents back, and records how the
//!    process's device mappings move ([`vma`]); [`restore::resume`]
//!    restarts the queues once the process's memory is back.
//!
//! Options ([`options::Options`]) are read by [`options::Options::read`]
//! from the environment (`KFD_*`, through any name-to-value lookup) and
//! CRIU's plugin options, or set by the program that embeds the engine.
//! The crate logs through the [`log`] facade; the embedding program picks
//! the logger. Errors ([`Error`]) name the failed operation and map to an
//! errno for hosts that speak errno.
//!
//! Unsafe code lives in `sys` (the few host calls beyond `std`) and
//! [`handles`] (the shared handle table's memory); every other module is
//! safe code, as the crate-level lint below enforces (only those two
//! modules lift it, and the guardian for its one call of `sys`'s
//! `unsafe fn` that forks its process). Of `sys` only
//! [`sys::thread_cpu_time`] is public.

#![deny(unsafe_code)]

mod drm_fdinfo;
pub mod dump;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz_support;
pub mod guardian;
pub mod handles;
pub mod identify;
pub mod incremental;
pub mod kfd_version;
pub mod options;
pub mod parallel;
pub mod recover;
pub mod render_node;
pub mod restore;
pub mod sys;
pub mod transfer;
pub mod vma;

pub use error::Error;
pub use options::Options;
