//! KFD sysfs topology: the model of a machine's CPUs, GPUs, memory and links
//! as amdkfd reports them under `/sys/class/kfd/kfd/topology`.
//!
//! This crate is pure: it reads and writes files under a root you pass in and
//! never opens devices.

#![forbid(unsafe_code)]

pub mod builtin;
pub mod checks;
pub mod devices;
pub mod gpu_id;
pub mod hive;
pub mod mapping;
pub mod memfs;
pub mod model;
pub mod options;
pub mod parse;
pub mod synthesize;
pub mod write;

pub use builtin::{builtin, builtin_names, renumbered, renumbered_with_map};
pub use hive::Hive;
pub use model::{
    GpuId, Indexed, Link, Node, NodeKind, Properties, PropertyValue, RenderMinor, System,
};
pub use parse::{parse, ParseError, Parsed, SkipReason, Skipped};
pub use synthesize::synthesize_missing;
pub use write::write;
