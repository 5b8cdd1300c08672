#![doc = include_str!("../README.md")]

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
