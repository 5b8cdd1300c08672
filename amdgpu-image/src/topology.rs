//! Between `amdgpu-topology`'s device view and the image's device entries
//! (feature `topology`).
//!
//! At dump, each node of the local topology becomes a `kfd_device_entry`
//! (GPU nodes named by the process's *user* gpu_id, so a restored process
//! keeps the ids it knows); at restore the entries become the checkpointed
//! [`DeviceTopology`] that is mapped onto the local one. The two directions
//! are inverse for everything the image keeps. Pure functions only.

use amdgpu_topology::devices::{DevIoLink, DeviceNode, DeviceProps, DeviceTopology};

use crate::{DevIolink, KfdDeviceEntry};

/// The image entry of `node`, GPU nodes named `user_gpu_id` (ignored for
/// CPU nodes). Only valid io links (whose target is in `topology`) are kept,
/// as the C plugin does.
pub fn device_entry(
    node: &DeviceNode,
    user_gpu_id: u32,
    topology: &DeviceTopology,
) -> KfdDeviceEntry {
    let iolinks = node
        .iolinks
        .iter()
        .filter(|l| topology.link_is_valid(l))
        .map(|l| DevIolink {
            r#type: l.link_type,
            node_to_id: l.node_to,
        })
        .collect();
    let p = &node.props;
    if !node.is_gpu() {
        return KfdDeviceEntry {
            node_id: node.node_id,
            cpu_cores_count: p.cpu_cores_count,
            iolinks,
            ..KfdDeviceEntry::default()
        };
    }
    KfdDeviceEntry {
        node_id: node.node_id,
        gpu_id: user_gpu_id,
        cpu_cores_count: p.cpu_cores_count,
        simd_count: p.simd_count,
        mem_banks_count: p.mem_banks_count,
        caches_count: p.caches_count,
        io_links_count: p.io_links_count,
        max_waves_per_simd: p.max_waves_per_simd,
        lds_size_in_kb: p.lds_size_in_kb,
        gds_size_in_kb: p.gds_size_in_kb,
        num_gws: p.num_gws,
        wave_front_size: p.wave_front_size,
        array_count: p.array_count,
        simd_arrays_per_engine: p.simd_arrays_per_engine,
        cu_per_simd_array: p.cu_per_simd_array,
        simd_per_cu: p.simd_per_cu,
        max_slots_scratch_cu: p.max_slots_scratch_cu,
        vendor_id: p.vendor_id,
        device_id: p.device_id,
        domain: p.domain,
        drm_render_minor: p.drm_render_minor,
        hive_id: p.hive_id,
        num_sdma_engines: p.num_sdma_engines,
        num_sdma_xgmi_engines: p.num_sdma_xgmi_engines,
        num_sdma_queues_per_engine: p.num_sdma_queues_per_engine,
        num_cp_queues: p.num_cp_queues,
        fw_version: p.fw_version,
        capability: p.capability,
        sdma_fw_version: p.sdma_fw_version,
        vram_public: u32::from(p.vram_public),
        vram_size: p.vram_size,
        iolinks,
        location_id: (p.location_id != 0).then_some(p.location_id),
        unique_id: (p.unique_id != 0).then_some(p.unique_id),
    }
}

/// The checkpointed node an image entry describes.
pub fn device_node(entry: &KfdDeviceEntry) -> DeviceNode {
    let iolinks = entry
        .iolinks
        .iter()
        .map(|l| DevIoLink {
            link_type: l.r#type,
            node_to: l.node_to_id,
        })
        .collect();
    let props = if entry.is_gpu() {
        DeviceProps {
            cpu_cores_count: entry.cpu_cores_count,
            simd_count: entry.simd_count,
            mem_banks_count: entry.mem_banks_count,
            caches_count: entry.caches_count,
            io_links_count: entry.io_links_count,
            max_waves_per_simd: entry.max_waves_per_simd,
            lds_size_in_kb: entry.lds_size_in_kb,
            gds_size_in_kb: entry.gds_size_in_kb,
            num_gws: entry.num_gws,
            wave_front_size: entry.wave_front_size,
            array_count: entry.array_count,
            simd_arrays_per_engine: entry.simd_arrays_per_engine,
            cu_per_simd_array: entry.cu_per_simd_array,
            simd_per_cu: entry.simd_per_cu,
            max_slots_scratch_cu: entry.max_slots_scratch_cu,
            vendor_id: entry.vendor_id,
            device_id: entry.device_id,
            domain: entry.domain,
            drm_render_minor: entry.drm_render_minor,
            hive_id: entry.hive_id,
            num_sdma_engines: entry.num_sdma_engines,
            num_sdma_xgmi_engines: entry.num_sdma_xgmi_engines,
            num_sdma_queues_per_engine: entry.num_sdma_queues_per_engine,
            num_cp_queues: entry.num_cp_queues,
            fw_version: entry.fw_version,
            capability: entry.capability,
            sdma_fw_version: entry.sdma_fw_version,
            vram_public: entry.vram_public != 0,
            vram_size: entry.vram_size,
            location_id: entry.location_id.unwrap_or(0),
            unique_id: entry.unique_id.unwrap_or(0),
        }
    } else {
        DeviceProps {
            cpu_cores_count: entry.cpu_cores_count,
            ..DeviceProps::default()
        }
    };
    DeviceNode {
        node_id: entry.node_id,
        gpu_id: entry.gpu_id,
        props,
        iolinks,
    }
}

/// The checkpointed topology of an image's device entries.
pub fn checkpointed_topology(entries: &[KfdDeviceEntry]) -> DeviceTopology {
    DeviceTopology {
        nodes: entries.iter().map(device_node).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(node_id: u32, gpu_id: u32) -> DeviceNode {
        DeviceNode {
            node_id,
            gpu_id,
            props: DeviceProps {
                simd_count: 104,
                device_id: 0x740f,
                drm_render_minor: 128 + node_id,
                hive_id: 0xabc,
                vram_public: true,
                vram_size: 64 << 30,
                fw_version: 55,
                ..DeviceProps::default()
            },
            iolinks: vec![
                DevIoLink {
                    link_type: 2,
                    node_to: 0,
                },
                DevIoLink {
                    link_type: 11,
                    node_to: 9,
                },
            ],
        }
    }

    #[test]
    fn entries_round_trip_and_drop_dangling_links() {
        let cpu = DeviceNode {
            node_id: 0,
            gpu_id: 0,
            props: DeviceProps {
                cpu_cores_count: 64,
                ..DeviceProps::default()
            },
            iolinks: vec![DevIoLink {
                link_type: 2,
                node_to: 1,
            }],
        };
        let local = DeviceTopology {
            nodes: vec![cpu.clone(), gpu(1, 0x1111)],
        };
        let entries: Vec<KfdDeviceEntry> = local
            .nodes
            .iter()
            .map(|n| device_entry(n, if n.is_gpu() { 0x2222 } else { 0 }, &local))
            .collect();
        assert_eq!(entries[1].gpu_id, 0x2222, "GPU named by its user id");
        assert_eq!(entries[1].iolinks.len(), 1, "link to absent node 9 dropped");
        assert_eq!(entries[1].vram_public, 1);
        let back = checkpointed_topology(&entries);
        assert_eq!(back.nodes[0], cpu);
        let mut expected = gpu(1, 0x2222);
        expected.iolinks.truncate(1);
        assert_eq!(back.nodes[1], expected);
    }
}
