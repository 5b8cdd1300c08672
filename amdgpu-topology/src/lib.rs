//! KFD sysfs topology: the model of a machine's CPUs, GPUs, memory and links
//! as amdkfd reports them under `/sys/class/kfd/kfd/topology`.
//!
//! This crate is pure: it reads and writes files under a root you pass in and
//! never opens devices.
//!
//! Where to start:
//! - [`parse()`]: read a topology tree (the live one at
//!   [`parse::DEFAULT_ROOT`] or a copy) into a [`System`], listing what had to
//!   be skipped; [`write()`] writes a [`System`] back as a tree.
//! - [`builtin()`] / [`builtin_names`]: synthetic machines (single GPU, PCIe
//!   pairs, MI210 XGMI hives, MI250X, MI300X), and [`renumbered`] copies of
//!   them as another host would number them; [`synthesize_missing`] completes
//!   partial captures.
//! - [`devices::DeviceTopology`]: the device view the C plugin keeps (and the
//!   checkpoint image stores); [`checks`] compares two GPUs under the
//!   `KFD_*_CHECK` [`options`]; [`mapping::map_topologies`] maps a
//!   checkpointed machine onto a local one, or explains every refusal.
//!
//! # Example
//!
//! Can a process checkpointed on an 8-GPU machine with two XGMI hives be
//! restored on another machine of the same model, numbered differently?
//!
//! ```
//! use amdgpu_topology::devices::DeviceTopology;
//! use amdgpu_topology::mapping::map_topologies;
//! use amdgpu_topology::options::CheckOptions;
//! use amdgpu_topology::{builtin, parse, renumbered, write};
//!
//! let origin = builtin("mi210-8gpu-2hive").expect("a built-in machine");
//! // The other host, written as a sysfs tree and read back like a real one.
//! let root = std::env::temp_dir().join(format!("topology-doc-{}", std::process::id()));
//! write(&renumbered(&origin, 42), &root)?;
//! let parsed = parse(&root)?;
//! assert!(parsed.skipped.is_empty());
//!
//! let checkpointed = DeviceTopology::from_system(&origin)?;
//! let local = DeviceTopology::from_system(&parsed.system)?;
//! let result = map_topologies(&checkpointed, &local, &CheckOptions::all())?;
//! assert!(result.compatible);
//! // Every checkpointed GPU has a local stand-in with a new gpu_id.
//! assert_eq!(result.gpu_map.len(), 8);
//! assert!(result.gpu_map.iter().all(|(from, to)| from != to));
//!
//! // A two-GPU machine cannot take it, and says why.
//! let small = DeviceTopology::from_system(&builtin("pcie-2gpu").unwrap())?;
//! let refused = map_topologies(&checkpointed, &small, &CheckOptions::all())?;
//! assert!(!refused.compatible);
//! println!("{}", refused.reasons[0]); // number of GPUs mismatch: 8 checkpointed, 2 local
//! # std::fs::remove_dir_all(&root)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

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
