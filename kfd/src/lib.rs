//! Safe access to the amdkfd compute driver (`/dev/kfd`) and amdgpu render
//! nodes (`/dev/dri/renderD*`), including the CRIU checkpoint/restore ops.
//!
//! All system calls go through the [`Driver`] trait, so the same code runs
//! against the real kernel ([`HostDriver`]) or a simulated one.
//!
//! - [`Kfd`]: `/dev/kfd` — version, memory, queues, events, dma-buf import
//!   and export, and the five CRIU ops ([`Kfd::process_info`],
//!   [`Kfd::checkpoint`], [`Kfd::unpause`], [`Kfd::restore`], [`Kfd::resume`]).
//! - [`RenderNode`]: `/dev/dri/renderD*` — GEM, PRIME, VA, contexts, BO
//!   lists, command submission, fence waits and device queries.
//! - [`sdma`]: SDMA linear-copy packets per GPU family.
//! - [`copy::CopyEngine`]: asynchronous SDMA copies between a BO's dma-buf
//!   and page-aligned host memory ([`StagingBuffer`]), with fences.
//! - [`ioctl::ioctl`]: the single typed ioctl entry point under every wrapper.
//! - [`AnonymousMapping`]: anonymous host memory (private or shared, at a
//!   fixed address if asked), unmapped on drop.
//! - [`Error`]: names the failed operation and keeps the errno.
//!
//! The dumper's side of a checkpoint, on the target's `/dev/kfd` fd that
//! CRIU hands over (the dumper is the target's ptrace parent):
//!
//! ```no_run
//! use std::os::fd::BorrowedFd;
//! use kfd::{HostDriver, Kfd};
//!
//! fn dump(target_kfd: BorrowedFd<'_>) -> kfd::Result<()> {
//!     let kfd = Kfd::from_fd(HostDriver, target_kfd);
//!     let info = kfd.process_info()?; // pauses the target's queues
//!     let saved = kfd.checkpoint(&info).map(|checkpoint| {
//!         for bo in &checkpoint.bos {
//!             // While paused, copy VRAM/GTT contents out of `bo.dmabuf` (an
//!             // OwnedFd, closed when `checkpoint` drops) with a CopyEngine.
//!             let _ = (bo.bucket.addr, bo.bucket.size, &bo.dmabuf);
//!         }
//!         checkpoint.priv_data.len()
//!     });
//!     // Unpause whatever happened, then report the first error.
//!     let unpaused = kfd.unpause();
//!     saved?;
//!     unpaused
//! }
//! ```
//!
//! The same calls run unchanged against the simulated kernel of the
//! `kfd-sim` crate, which is how this crate is tested without a GPU (those
//! tests, and an example of a process that opens `/dev/kfd` and a render
//! node, binds the GPU's VM and allocates VRAM, live in `kfd-sim`, so this
//! crate does not depend on its own simulator).
//!
//! This crate never parses sysfs or image files and keeps no kernel state of
//! its own beyond what a [`CopyEngine`] creates (and releases) in its DRM
//! file.

pub mod anon;
pub mod copy;
pub mod criu;
pub mod driver;
pub mod error;
pub mod ioctl;
pub mod kfd;
pub mod mapping;
pub mod process;
pub mod render;
pub mod sdma;
pub mod staging;
pub mod va;

pub use anon::{AnonymousMapping, AnonymousOptions, Sharing};
pub use copy::{CopyEngine, CopyEngineConfig, Fence, ImportedBo, StagingSlot};
pub use criu::{Checkpoint, CheckpointBo, ProcessInfo, RestoredBo};
pub use driver::{DeviceNumber, Driver, FdKind, HostDriver};
pub use error::{Errno, Error, Result};
pub use kfd::{
    AllocFlags, AllocRequest, Allocation, DmabufInfo, Event, GpuId, Kfd, MemHandle, Queue,
    QueueRequest, Version, KFD_PATH,
};
pub use mapping::DeviceMapping;
pub use process::{FrozenCgroup, ProcessStatus};
pub use render::{
    dmabuf_size, BoListHandle, CtxId, DrmVersion, GemCreate, GemHandle, IbChunk, RenderMinor,
    RenderNode, SubmissionFence,
};
pub use staging::StagingBuffer;
pub use va::VaAllocator;
