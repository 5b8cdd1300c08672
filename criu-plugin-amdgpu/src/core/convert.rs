//! Between the topology crate's device view and the image's device entries:
//! the conversions live in `amdgpu-image` (feature `topology`), shared with
//! other tools that read images; re-exported here for the plugin's modules.

pub use amdgpu_image::topology::{checkpointed_topology, device_entry, device_node};
