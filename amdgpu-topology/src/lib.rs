#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod builtin;
pub mod checks;
pub mod device_map;
pub mod devices;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz_support;
pub mod gpu_id;
pub mod hive;
pub mod mapping;
pub mod memfs;
pub mod model;
pub mod options;
pub mod parse;
pub mod synthesize;
pub mod write;

pub use builtin::{
    builtin, builtin_names, gfx9_gpu_caches, renumbered, renumbered_with_map, Gfx9Caches,
};
pub use hive::Hive;
pub use model::{
    GpuId, Indexed, Link, Node, NodeKind, Properties, PropertyValue, RenderMinor, System,
};
pub use parse::{parse, ParseError, Parsed, SkipReason, Skipped};
pub use synthesize::synthesize_missing;
pub use write::write;
