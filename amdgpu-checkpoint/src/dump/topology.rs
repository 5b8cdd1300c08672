//! The local KFD topology as the dumped process sees it: read through the
//! process's own sysfs reads (a GPU its device cgroup hides answers
//! `EPERM`), and cut to the GPUs it uses for its image.

use std::collections::BTreeMap;
use std::path::Path;

use ::kfd::Driver;
use amdgpu_topology::devices::DeviceTopology;

use crate::error::Error;

/// The topology as a process with the GPUs `user_of` (actual gpu_id ->
/// user gpu_id) sees it: every CPU node and its GPUs, nothing else. GPUs of
/// the host that the process cannot use are left out (logged), and so are
/// the links to them (invalid in the view).
pub(super) fn process_view(local: &DeviceTopology, user_of: &BTreeMap<u32, u32>) -> DeviceTopology {
    let mut nodes = Vec::with_capacity(local.nodes.len());
    for node in &local.nodes {
        if node.is_gpu() && !user_of.contains_key(&node.gpu_id) {
            log::info!(
                "GPU {:#x} (node {}) is not one of the process's GPUs (device cgroup): \
                 left out of the image",
                node.gpu_id,
                node.node_id
            );
            continue;
        }
        nodes.push(node.clone());
    }
    DeviceTopology { nodes }
}

/// The sysfs reads of the KFD topology as the process behind `driver`
/// makes them (a node of a GPU its device cgroup hides answers `EPERM`);
/// listings come from the file system as they are.
struct ReadAs<'a, D>(&'a D);

impl<D: Driver> amdgpu_topology::parse::SysfsReader for ReadAs<'_, D> {
    fn read_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        amdgpu_topology::parse::RealFs.read_dir(path)
    }

    fn is_dir(&self, path: &Path) -> std::io::Result<bool> {
        amdgpu_topology::parse::RealFs.is_dir(path)
    }

    fn read(&self, path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
        self.0.read_sysfs(path, limit)
    }
}

/// Parses the local topology under `root`, as the process behind `driver`
/// sees it, into the device view. Skipped nodes are logged (with the file
/// and the reason), so a GPU missing later ("not listed", "number of GPUs
/// mismatch") can be traced to its sysfs node.
pub fn local_topology<D: Driver>(root: &Path, driver: &D) -> Result<DeviceTopology, Error> {
    let parsed =
        amdgpu_topology::parse::parse_with(&ReadAs(driver), root).map_err(|e| Error::Topology {
            root: root.display().to_string(),
            source: Box::new(e.into()),
        })?;
    for skipped in &parsed.skipped {
        // A container's hidden GPUs are expected; anything else is odd.
        if skipped.reason == amdgpu_topology::parse::SkipReason::AccessDenied {
            log::info!("KFD topology at {}: {skipped}", root.display());
        } else {
            log::warn!("KFD topology at {}: {skipped}", root.display());
        }
    }
    DeviceTopology::from_system(&parsed.system).map_err(|e| Error::Topology {
        root: root.display().to_string(),
        source: Box::new(e.into()),
    })
}
