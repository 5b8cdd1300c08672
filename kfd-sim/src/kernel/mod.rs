//! The simulated kernel's state and the services every ioctl handler
//! uses, below the handlers of `crate::amdkfd` and `crate::drm`: the
//! vocabulary ([`Pid`], [`SimConfig`], [`SimError`], ...), the state behind
//! the machine's one mutex ([`State`], [`Shared`], the open-file table keyed
//! by [`FileKey`]), simulated processes and their host memory, the caller's
//! CPU address space, copying ioctl arguments from and to user memory
//! (`uaccess`), fault injection, accounting, the sysfs tree, module
//! parameters and scratch directories.

pub mod accounting;
pub(crate) mod address_space;
mod config;
pub(crate) mod fault;
pub mod module_params;
mod process;
mod retired;
pub mod scratch;
mod state;
pub(crate) mod sysfs;
mod uaccess;

pub use config::{
    DevDriNode, GpuInfo, KfdState, Pid, ProcessConfig, RenderBuffer, SimConfig, SimError,
    DRM_MAJOR, KFD_MAJOR,
};
pub use process::HostMemorySnapshot;

pub(crate) use address_space::check_caller_mapped;
pub(crate) use process::{on_caller_thread, CpuMapping, HostRegion, Process};
pub(crate) use state::{Ctx, FileKey, Gpu, KfdFile, OpenFile, RenderFile, Shared, State};
pub(crate) use uaccess::{
    client_alive, close_user_fd, copy_from_user, copy_to_user, current_space, in_remote_space,
    install_fd, maps_path, marshal, remote_read, remote_write, typed, user_fd, Space, LIVE_CLIENTS,
};
