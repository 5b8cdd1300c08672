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
//! - [`Error`]: names the failed operation and keeps the errno.

pub mod copy;
pub mod criu;
pub mod driver;
pub mod error;
pub mod ioctl;
pub mod kfd;
pub mod mapping;
pub mod render;
pub mod sdma;
pub mod staging;
pub mod va;

pub use copy::{CopyEngine, CopyEngineConfig, Fence, ImportedBo, StagingSlot};
pub use criu::{Checkpoint, CheckpointBo, ProcessInfo, RestoredBo};
pub use driver::{DeviceNumber, Driver, FdKind, HostDriver};
pub use error::{Errno, Error, Result};
pub use kfd::{
    AllocFlags, AllocRequest, Allocation, DmabufInfo, Event, GpuId, Kfd, MemHandle, Queue,
    QueueRequest, Version, KFD_PATH,
};
pub use mapping::DeviceMapping;
pub use render::{
    dmabuf_size, BoListHandle, CtxId, DrmVersion, GemCreate, GemHandle, IbChunk, RenderMinor,
    RenderNode, SubmissionFence,
};
pub use staging::StagingBuffer;
pub use va::VaAllocator;
