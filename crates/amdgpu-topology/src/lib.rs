//! KFD sysfs topology: the model of a machine's CPUs, GPUs, memory and links
//! as amdkfd reports them under `/sys/class/kfd/kfd/topology`.
//!
//! This crate is pure: it reads and writes files under a root you pass in and
//! never opens devices.

#![forbid(unsafe_code)]

pub mod checks;
pub mod devices;
pub mod hive;
pub mod mapping;
pub mod model;
pub mod options;
pub mod parse;
pub mod write;

pub use hive::Hive;
pub use model::{
    GpuId, Indexed, Link, Node, NodeKind, Properties, PropertyValue, RenderMinor, System,
};
pub use parse::{parse, ParseError, Parsed, SkipReason, Skipped};
pub use write::write;
