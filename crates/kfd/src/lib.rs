//! Safe access to the amdkfd compute driver (`/dev/kfd`) and amdgpu render
//! nodes (`/dev/dri/renderD*`), including the CRIU checkpoint/restore ops.
//!
//! All system calls go through the [`Driver`] trait, so the same code runs
//! against the real kernel ([`HostDriver`]) or a simulated one.

pub mod driver;

pub use driver::{DeviceNumber, Driver, FdKind, HostDriver};
