//! The simulated machine: configuration, GPUs, processes, the open-file
//! table, and [`SimDriver`], the [`kfd::Driver`] implementation that routes
//! `open`/`ioctl`/`mmap` to the KFD half (`crate::amdkfd`) or the DRM half.
//!
//! Identity of the caller comes from the [`SimDriver`] instance; callers run
//! in this host process, or in another one served by [`crate::remote`]
//! (whose user pointers and fd numbers `uaccess` resolves in that process).
//! Every device fd is a real memfd; the simulator
//! keys its state on the memfd's inode ([`FileKey`]), so dup'ed fds and fds
//! received over a unix socket resolve to the same open file, as the kernel's
//! `struct file` does. This module never interprets ioctl arguments itself.
//!
//! Layout: `config` (the public vocabulary: majors, [`Pid`], [`SimConfig`],
//! [`ProcessConfig`], [`SimError`], [`KfdState`], [`GpuInfo`]), `machine`
//! ([`Sim`] and the shared state behind its mutex: GPUs, open files),
//! `process` (simulated processes and their host memory), `uaccess`
//! (copying ioctl arguments from and to user memory) and `driver`
//! ([`SimDriver`]).

mod address_space;
mod config;
mod driver;
mod fork;
mod host_memory;
mod machine;
mod process;
mod ptrace;
mod retired;
mod uaccess;

pub use config::{
    DevDriNode, GpuInfo, KfdState, Pid, ProcessConfig, RenderBuffer, SimConfig, SimError,
    DRM_MAJOR, KFD_MAJOR,
};
pub use driver::SimDriver;
pub use machine::Sim;
pub use process::HostMemorySnapshot;

pub(crate) use address_space::check_caller_mapped;
pub use fork::ForkHold;
pub(crate) use fork::Held;
pub(crate) use machine::{Ctx, FileKey, Gpu, KfdFile, OpenFile, RenderFile, Shared, State};
pub(crate) use process::{on_caller_thread, CpuMapping, HostRegion, Process};
pub(crate) use uaccess::{
    close_user_fd, copy_from_user, copy_to_user, current_space, in_remote_space, install_fd,
    maps_path, marshal, remote_read, remote_write, typed, user_fd, Space,
};
