#![doc = include_str!("../README.md")]
#![cfg(target_os = "linux")]

pub mod companion;
pub mod criu;
mod devns;
mod error;
mod interposer;
mod machine;
pub mod shm;
mod stand_in;

pub use criu::Criu;
pub use devns::{
    enter_mount_namespace_of, new_session, start_clean, streams_in_namespace, DeviceNamespace,
    DevicePlan, Privilege,
};
pub use error::HostError;
pub use interposer::Interposer;
pub use machine::{Endpoint, Listen, MachineSource, MachineSpec, ServedMachine, BUILTIN_PREFIX};
pub use stand_in::StandIn;
