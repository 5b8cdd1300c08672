//! The simulated machine's front: [`Sim`] (the machine a test builds and
//! drives: processes, faults, inspection) and [`SimDriver`], the
//! [`kfd::Driver`] implementation that routes `open`/`ioctl`/`mmap` to the
//! KFD half (`crate::amdkfd`) or the DRM half (`crate::drm`).
//!
//! Identity of the caller comes from the [`SimDriver`] instance; callers run
//! in this host process, or in another one served by [`crate::remote`]
//! (whose user pointers and fd numbers `crate::kernel::uaccess` resolves in
//! that process). Every device fd is a real memfd; the simulator
//! keys its state on the memfd's inode ([`crate::kernel::FileKey`]), so
//! dup'ed fds and fds received over a unix socket resolve to the same open
//! file, as the kernel's `struct file` does. This module never interprets
//! ioctl arguments itself.
//!
//! Layout: `machine` ([`Sim`]: building the machine, processes, faults,
//! accounting), `driver` ([`SimDriver`]: the dispatch), `fork`
//! ([`Sim::fork_process`]), `host_memory` (the [`Sim`] API over simulated
//! applications' host memory) and `ptrace` (process control syscalls). The
//! state itself lives in [`crate::kernel`].

mod address_space;
mod driver;
pub mod fault;
mod fork;
mod host_memory;
mod machine;
pub mod proc_files;
mod ptrace;
mod queues;
mod sdma;

pub use driver::SimDriver;
pub use machine::Sim;

pub use fork::ForkHold;
