//! The device view of a topology: what the C plugin keeps of each node, and
//! all the compatibility checks and the GPU mapping look at.
//!
//! A [`DeviceTopology`] is built either from a parsed local [`System`]
//! ([`DeviceTopology::from_system`]) or, by the plugin, field by field from a
//! checkpoint image's `kfd_device_entry` messages (`criu-amdgpu.proto`),
//! so both sides of a restore are compared in the same terms. This module
//! only converts; it never decides compatibility.

use crate::model::{link_type, GpuId, System};

/// The scalar fields of a `kfd_device_entry`, in proto order, with the
/// proto's widths. For CPU nodes only `cpu_cores_count` is meaningful (the C
/// plugin reads and saves nothing else for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceProps {
    /// CPU cores (CPU nodes; 0 on discrete GPUs).
    pub cpu_cores_count: u32,
    /// SIMDs (× XCCs on newer kernels); compared equal.
    pub simd_count: u32,
    /// `mem_banks` entries; compared equal.
    pub mem_banks_count: u32,
    /// `caches` entries; checkpointed at most local (`KFD_CACHES_COUNT_CHECK`).
    pub caches_count: u32,
    /// `io_links` entries as the kernel counts them (valid or not); compared equal.
    pub io_links_count: u32,
    /// Maximum waves per SIMD; compared equal.
    pub max_waves_per_simd: u32,
    /// Local data share per workgroup, KiB; compared equal.
    pub lds_size_in_kb: u32,
    /// Global data share, KiB; never compared (the C plugin never fills it).
    pub gds_size_in_kb: u32,
    /// Global wave sync resources; checkpointed at most local (`KFD_NUM_GWS_CHECK`).
    pub num_gws: u32,
    /// Wavefront size; compared equal.
    pub wave_front_size: u32,
    /// Shader arrays (× XCCs); compared equal.
    pub array_count: u32,
    /// SIMD arrays per engine; compared equal.
    pub simd_arrays_per_engine: u32,
    /// Compute units per SIMD array; compared equal.
    pub cu_per_simd_array: u32,
    /// SIMDs per compute unit; compared equal.
    pub simd_per_cu: u32,
    /// Scratch slots per compute unit; compared equal.
    pub max_slots_scratch_cu: u32,
    /// PCI vendor id (4098 = AMD); compared equal.
    pub vendor_id: u32,
    /// PCI device id; compared equal.
    pub device_id: u32,
    /// PCI segment; never compared.
    pub domain: u32,
    /// Render node minor (`renderD<N>`); never compared.
    pub drm_render_minor: u32,
    /// XGMI hive id, 0 when none; never compared (hives come from links).
    pub hive_id: u64,
    /// SDMA engines; compared equal.
    pub num_sdma_engines: u32,
    /// XGMI SDMA engines; compared equal.
    pub num_sdma_xgmi_engines: u32,
    /// SDMA queues per engine; compared equal.
    pub num_sdma_queues_per_engine: u32,
    /// Compute queues; compared equal.
    pub num_cp_queues: u32,
    /// MEC firmware version; checkpointed at most local (`KFD_FW_VER_CHECK`).
    pub fw_version: u32,
    /// `HSA_CAP_*` bits; compared equal (`KFD_CAPABILITY_CHECK`).
    pub capability: u32,
    /// SDMA firmware version; checkpointed at most local (`KFD_SDMA_FW_VER_CHECK`).
    pub sdma_fw_version: u32,
    /// Whether the VRAM bank is CPU visible (heap type FB public); compared
    /// equal.
    pub vram_public: bool,
    /// VRAM size in bytes; checkpointed at most local (`KFD_VRAM_SIZE_CHECK`).
    pub vram_size: u64,
    /// PCI bus/device/function (`location_id`: bus << 8 | device << 3 |
    /// function, partitions of GFX 9.4.3 OR their index into the low bits);
    /// 0 when not known (images of other producers). Never compared: it
    /// only names the GPU in a device map.
    pub location_id: u32,
    /// The kernel's `unique_id` of the GPU (a serial number), 0 when the
    /// kernel reports none or the image predates it. Never compared: it only
    /// names the GPU in a device map.
    pub unique_id: u64,
}

/// One io link as the plugin keeps it: its CRAT type and target node id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevIoLink {
    /// CRAT io-interface type; only PCIe (2) and XGMI (11) links are kept.
    pub link_type: u32,
    /// The node id the link points to. A target absent from the topology
    /// (a node masked by the device cgroup) makes the link invalid.
    pub node_to: u32,
}

/// One node of a [`DeviceTopology`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    /// The node id (the `N` of `nodes/N`).
    pub node_id: u32,
    /// The gpu_id; 0 for a CPU node. In a checkpoint this is the user
    /// (checkpointed) gpu_id.
    pub gpu_id: GpuId,
    /// The properties.
    pub props: DeviceProps,
    /// PCIe and XGMI io links, in sysfs index order.
    pub iolinks: Vec<DevIoLink>,
}

impl DeviceNode {
    /// Whether this is a GPU node (non-zero gpu_id).
    pub fn is_gpu(&self) -> bool {
        self.gpu_id != 0
    }
}

/// A whole machine as the checks and the mapping see it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceTopology {
    /// The nodes, in any order (node ids identify them).
    pub nodes: Vec<DeviceNode>,
}

/// Why a [`System`] could not be turned into a [`DeviceTopology`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// A GPU node without a readable non-zero `gpu_id`.
    #[error("GPU node {node} has no gpu_id")]
    NoGpuId {
        /// The node id.
        node: u32,
    },
    /// A GPU node without a frame-buffer memory bank of non-zero size.
    #[error("GPU node {node}: cannot determine VRAM type and size (no FB public or FB private memory bank of non-zero size)")]
    NoVram {
        /// The node id.
        node: u32,
    },
}

impl DeviceTopology {
    /// The device view of a parsed local topology, as the C plugin builds
    /// its local topology (`topology_parse` in `amdgpu_plugin_topology.c`): GPU
    /// nodes carry their
    /// properties and the first frame-buffer memory bank; CPU nodes carry
    /// only `cpu_cores_count`; only PCIe and XGMI io links are kept.
    ///
    /// Stricter than C: a GPU node without a `gpu_id` is an error where C
    /// silently skips the node.
    pub fn from_system(system: &System) -> Result<Self, DeviceError> {
        let mut nodes = Vec::with_capacity(system.nodes.len());
        for node in &system.nodes {
            let iolinks = node
                .io_links()
                .iter()
                .filter(|l| matches!(l.link_type(), link_type::PCIE | link_type::XGMI))
                .map(|l| DevIoLink {
                    link_type: l.link_type() as u32,
                    node_to: l.node_to(),
                })
                .collect();
            let u32_prop = |key: &str| u32::try_from(node.prop(key)).unwrap_or(u32::MAX);
            if !node.is_gpu() {
                nodes.push(DeviceNode {
                    node_id: node.id,
                    gpu_id: 0,
                    props: DeviceProps {
                        cpu_cores_count: u32_prop("cpu_cores_count"),
                        ..DeviceProps::default()
                    },
                    iolinks,
                });
                continue;
            }
            let gpu_id = node
                .gpu_id
                .filter(|&id| id != 0)
                .ok_or(DeviceError::NoGpuId { node: node.id })?;
            let (vram_size, vram_public) = node
                .vram()
                .filter(|&(size, _)| size != 0)
                .ok_or(DeviceError::NoVram { node: node.id })?;
            let props = DeviceProps {
                cpu_cores_count: u32_prop("cpu_cores_count"),
                simd_count: u32_prop("simd_count"),
                mem_banks_count: u32_prop("mem_banks_count"),
                caches_count: u32_prop("caches_count"),
                io_links_count: u32_prop("io_links_count"),
                max_waves_per_simd: u32_prop("max_waves_per_simd"),
                lds_size_in_kb: u32_prop("lds_size_in_kb"),
                gds_size_in_kb: u32_prop("gds_size_in_kb"),
                num_gws: u32_prop("num_gws"),
                wave_front_size: u32_prop("wave_front_size"),
                array_count: u32_prop("array_count"),
                simd_arrays_per_engine: u32_prop("simd_arrays_per_engine"),
                cu_per_simd_array: u32_prop("cu_per_simd_array"),
                simd_per_cu: u32_prop("simd_per_cu"),
                max_slots_scratch_cu: u32_prop("max_slots_scratch_cu"),
                vendor_id: u32_prop("vendor_id"),
                device_id: u32_prop("device_id"),
                domain: u32_prop("domain"),
                drm_render_minor: u32_prop("drm_render_minor"),
                hive_id: node.hive_id(),
                num_sdma_engines: u32_prop("num_sdma_engines"),
                num_sdma_xgmi_engines: u32_prop("num_sdma_xgmi_engines"),
                num_sdma_queues_per_engine: u32_prop("num_sdma_queues_per_engine"),
                num_cp_queues: u32_prop("num_cp_queues"),
                fw_version: u32_prop("fw_version"),
                capability: u32_prop("capability"),
                sdma_fw_version: u32_prop("sdma_fw_version"),
                vram_public,
                vram_size,
                location_id: u32_prop("location_id"),
                unique_id: node.prop("unique_id"),
            };
            nodes.push(DeviceNode {
                node_id: node.id,
                gpu_id,
                props,
                iolinks,
            });
        }
        Ok(Self { nodes })
    }

    /// The node with id `node_id` (the first, should ids repeat).
    pub fn node(&self, node_id: u32) -> Option<&DeviceNode> {
        self.nodes.iter().find(|n| n.node_id == node_id)
    }

    /// The GPU nodes, in the order stored.
    pub fn gpus(&self) -> impl Iterator<Item = &DeviceNode> {
        self.nodes.iter().filter(|n| n.is_gpu())
    }

    /// The CPU nodes, in the order stored.
    pub fn cpus(&self) -> impl Iterator<Item = &DeviceNode> {
        self.nodes.iter().filter(|n| !n.is_gpu())
    }

    /// Whether `link` of a node is valid: its target node exists (§7.2).
    pub fn link_is_valid(&self, link: &DevIoLink) -> bool {
        self.node(link.node_to).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Indexed, Link, Node};

    fn link(from: u32, to: u32, ty: u64) -> Link {
        Link {
            index: 0,
            properties: [
                ("type", ty),
                ("node_from", from as u64),
                ("node_to", to as u64),
            ]
            .into_iter()
            .collect(),
        }
    }

    fn system() -> System {
        let cpu = Node {
            id: 0,
            gpu_id: Some(0),
            name: None,
            properties: [
                ("cpu_cores_count", 16),
                ("simd_count", 0),
                ("io_links_count", 2),
            ]
            .into_iter()
            .collect(),
            mem_banks: None,
            caches: None,
            io_links: Some(vec![link(0, 1, 2), link(0, 2, 1)]),
            p2p_links: None,
        };
        let gpu = Node {
            id: 1,
            gpu_id: Some(4660),
            name: Some("gfx90a".into()),
            properties: [
                ("simd_count", 416u64),
                ("io_links_count", 2),
                ("hive_id", 1 << 40),
                ("fw_version", 78),
                ("capability", 0x1234),
            ]
            .into_iter()
            .collect(),
            mem_banks: Some(vec![
                Indexed::new(
                    0,
                    [("heap_type", 0u64), ("size_in_bytes", 5)]
                        .into_iter()
                        .collect(),
                ),
                Indexed::new(
                    1,
                    [("heap_type", 1u64), ("size_in_bytes", 64 << 30)]
                        .into_iter()
                        .collect(),
                ),
            ]),
            caches: None,
            io_links: Some(vec![link(1, 0, 2), link(1, 3, 11), link(1, 0, 5)]),
            p2p_links: None,
        };
        System {
            nodes: vec![cpu, gpu],
            ..System::default()
        }
    }

    #[test]
    fn from_system_keeps_what_the_plugin_keeps() {
        let topo = DeviceTopology::from_system(&system()).unwrap();
        let cpu = &topo.nodes[0];
        assert_eq!(cpu.gpu_id, 0);
        assert_eq!(
            cpu.props,
            DeviceProps {
                cpu_cores_count: 16,
                ..DeviceProps::default()
            }
        );
        assert_eq!(
            cpu.iolinks,
            [DevIoLink {
                link_type: 2,
                node_to: 1
            }]
        );
        let gpu = &topo.nodes[1];
        assert_eq!(gpu.gpu_id, 4660);
        assert_eq!(gpu.props.simd_count, 416);
        assert_eq!(gpu.props.hive_id, 1 << 40);
        assert_eq!(gpu.props.capability, 0x1234);
        assert_eq!(gpu.props.vram_size, 64 << 30);
        assert!(gpu.props.vram_public);
        // Type 5 dropped; the XGMI link to the absent node 3 is kept but invalid.
        assert_eq!(gpu.iolinks.len(), 2);
        assert!(topo.link_is_valid(&gpu.iolinks[0]));
        assert!(!topo.link_is_valid(&gpu.iolinks[1]));
        assert_eq!(topo.gpus().count(), 1);
        assert_eq!(topo.cpus().count(), 1);
    }

    #[test]
    fn gpu_without_vram_or_gpu_id_is_an_error() {
        let mut sys = system();
        sys.nodes[1].mem_banks = Some(Vec::new());
        assert_eq!(
            DeviceTopology::from_system(&sys),
            Err(DeviceError::NoVram { node: 1 })
        );
        let mut sys = system();
        sys.nodes[1].gpu_id = None;
        assert_eq!(
            DeviceTopology::from_system(&sys),
            Err(DeviceError::NoGpuId { node: 1 })
        );
    }
}
