//! The simulated machine's topology: a built-in synthetic topology, the
//! properties a current kernel reports that old captures lack, and where the
//! simulator writes the sysfs tree for its topology.
//!
//! The tree itself is written by `amdgpu_topology::write` into a temporary
//! directory the [`crate::Sim`] owns, at [`TOPOLOGY_DIR`] below it, so a
//! reader finds the same layout as under `/sys`. This module never writes
//! anywhere but into that directory, and never reads the host's real sysfs.

use amdgpu_topology::model::{heap_type, link_type};
use amdgpu_topology::{Indexed, Link, Node, Properties, System};

/// Where, below the simulator's temporary root, the topology tree lives.
pub(crate) const TOPOLOGY_DIR: &str = "sys/class/kfd/kfd/topology";

/// VRAM of each synthetic GPU (64 GiB, as an MI210).
const SYNTHETIC_VRAM: u64 = 64 << 30;

fn props(entries: &[(&str, u64)]) -> Properties {
    let mut p = Properties::new();
    for (k, v) in entries {
        p.set(k, *v);
    }
    p
}

fn link(index: u32, ty: u64, from: u32, to: u32, weight: u64, max_bw: u64, flags: u64) -> Link {
    Link {
        index,
        properties: props(&[
            ("type", ty),
            ("version_major", 0),
            ("version_minor", 0),
            ("node_from", from.into()),
            ("node_to", to.into()),
            ("weight", weight),
            ("min_latency", 0),
            ("max_latency", 0),
            ("min_bandwidth", 0),
            ("max_bandwidth", max_bw),
            ("recommended_transfer_size", 0),
            ("recommended_sdma_engine_id_mask", 0),
            ("flags", flags),
        ]),
    }
}

/// The synthetic gpu_id of GPU number `i` (0-based): distinct, non-zero,
/// 16-bit values spread like real crc16 ids.
fn synthetic_gpu_id(i: u32) -> u32 {
    let id = (0x4a3d_u32.wrapping_add(i.wrapping_mul(0x2c51))) & 0xffff;
    if id == 0 {
        1
    } else {
        id
    }
}

/// A complete topology with one CPU node (node 0) and `gpus` GFX9 dGPUs
/// modelled on an Instinct MI210 (gfx90a, `gfx_target_version` 90010, 64 GiB
/// large-BAR VRAM, 2 PCIe + 3 XGMI SDMA engines), each linked to the CPU over
/// PCIe. GPU nodes carry distinct non-zero 16-bit gpu_ids and render minors
/// 128, 129, ... . Key order follows the kernel's (spec §5.2, §5.4).
pub fn synthetic_system(gpus: usize) -> System {
    let n = u32::try_from(gpus).unwrap_or(u32::MAX).min(64);
    let mut nodes = Vec::new();
    let cpu_links: Vec<Link> = (0..n)
        .map(|i| link(i, link_type::PCIE, 0, i + 1, 20, 64_000, 3))
        .collect();
    nodes.push(Node {
        id: 0,
        gpu_id: Some(0),
        name: Some(String::new()),
        properties: props(&[
            ("cpu_cores_count", 64),
            ("simd_count", 0),
            ("mem_banks_count", 1),
            ("caches_count", 0),
            ("io_links_count", n.into()),
            ("p2p_links_count", 0),
            ("cpu_core_id_base", 0),
            ("simd_id_base", 0),
            ("max_waves_per_simd", 0),
            ("lds_size_in_kb", 0),
            ("gds_size_in_kb", 0),
            ("num_gws", 0),
            ("wave_front_size", 0),
            ("array_count", 0),
            ("simd_arrays_per_engine", 0),
            ("cu_per_simd_array", 0),
            ("simd_per_cu", 0),
            ("max_slots_scratch_cu", 0),
            ("gfx_target_version", 0),
            ("vendor_id", 0),
            ("device_id", 0),
            ("location_id", 0),
            ("domain", 0),
            ("drm_render_minor", 0),
            ("hive_id", 0),
            ("num_sdma_engines", 0),
            ("num_sdma_xgmi_engines", 0),
            ("num_sdma_queues_per_engine", 0),
            ("num_cp_queues", 0),
            ("max_engine_clk_ccompute", 3000),
        ]),
        mem_banks: Some(vec![Indexed::new(
            0,
            props(&[
                ("heap_type", heap_type::SYSTEM),
                ("size_in_bytes", 256 << 30),
                ("flags", 0),
                ("width", 64),
                ("mem_clk_max", 3200),
            ]),
        )]),
        caches: Some(Vec::new()),
        io_links: Some(cpu_links),
        p2p_links: Some(Vec::new()),
    });
    for i in 0..n {
        let node_id = i + 1;
        let bus = 0x03 + u64::from(i) * 0x20;
        nodes.push(Node {
            id: node_id,
            gpu_id: Some(synthetic_gpu_id(i)),
            name: Some("aldebaran".to_owned()),
            properties: props(&[
                ("cpu_cores_count", 0),
                ("simd_count", 416),
                ("mem_banks_count", 1),
                ("caches_count", 0),
                ("io_links_count", 1),
                ("p2p_links_count", 0),
                ("cpu_core_id_base", 0),
                ("simd_id_base", 2_147_487_744 + u64::from(i) * 512),
                ("max_waves_per_simd", 8),
                ("lds_size_in_kb", 64),
                ("gds_size_in_kb", 0),
                ("num_gws", 64),
                ("wave_front_size", 64),
                ("array_count", 8),
                ("simd_arrays_per_engine", 1),
                ("cu_per_simd_array", 13),
                ("simd_per_cu", 4),
                ("max_slots_scratch_cu", 32),
                ("gfx_target_version", 90010),
                ("vendor_id", 4098),
                ("device_id", 29711),
                ("location_id", bus << 8),
                ("domain", 0),
                ("drm_render_minor", 128 + u64::from(i)),
                ("hive_id", 0),
                ("num_sdma_engines", 2),
                ("num_sdma_xgmi_engines", 3),
                ("num_sdma_queues_per_engine", 8),
                ("num_cp_queues", 24),
                ("max_engine_clk_fcompute", 1700),
                ("local_mem_size", 0),
                ("fw_version", 78),
                ("capability", 0x2838_2280),
                ("debug_prop", 0x27),
                ("sdma_fw_version", 8),
                ("unique_id", 0x5f2b_1e00_0000_0000 | u64::from(i)),
                ("num_xcc", 1),
                ("max_engine_clk_ccompute", 3000),
            ]),
            mem_banks: Some(vec![Indexed::new(
                0,
                props(&[
                    ("heap_type", heap_type::FB_PUBLIC),
                    ("size_in_bytes", SYNTHETIC_VRAM),
                    ("flags", 0),
                    ("width", 4096),
                    ("mem_clk_max", 1600),
                ]),
            )]),
            caches: Some(Vec::new()),
            io_links: Some(vec![link(0, link_type::PCIE, node_id, 0, 20, 64_000, 3)]),
            p2p_links: Some(Vec::new()),
        });
    }
    System {
        generation_id: Some(1),
        system_properties: Some(props(&[
            ("platform_oem", 0),
            ("platform_id", 0),
            ("platform_rev", 0),
        ])),
        nodes,
    }
}

/// What a current amdkfd derives for a pre-gfx9 or first gfx9 chip from its
/// PCI device id alone, for captures taken with kernels that did not print
/// it yet (`gfx_target_version` since 5.x, the `num_sdma_*` keys since
/// 5.x): the ids of `amdgpu_drv.c`'s `pciidlist`, the `gfx_target_version`
/// of `kgd2kfd_probe()` (`kfd_device.c`) and the SDMA engines of
/// `kfd_device_info_set_sdma_info()` (engines = `adev->sdma.num_instances`,
/// 2 on these chips; 2 queues per engine for SDMA 2.x/3.x and 4.0; no XGMI
/// engines).
struct LegacyChip {
    /// The chip, for the documentation and the notes.
    name: &'static str,
    /// Inclusive PCI device-id ranges.
    device_ids: &'static [(u64, u64)],
    gfx_target_version: u64,
    num_sdma_engines: u64,
    num_sdma_queues_per_engine: u64,
}

const LEGACY_CHIPS: &[LegacyChip] = &[
    // CHIP_CARRIZO (Carrizo and Bristol Ridge APUs): carrizo_device_info,
    // gfx_target_version 80001, 2 SDMA 3.0 instances, 2 queues each.
    LegacyChip {
        name: "Carrizo/Bristol Ridge (gfx801)",
        device_ids: &[(0x9870, 0x9877)],
        gfx_target_version: 80001,
        num_sdma_engines: 2,
        num_sdma_queues_per_engine: 2,
    },
    // CHIP_POLARIS10/11/12: polaris1x_device_info, gfx803, 2 SDMA 3.x
    // instances, 2 queues each.
    LegacyChip {
        name: "Polaris (gfx803)",
        device_ids: &[(0x67C0, 0x67DF), (0x67E0, 0x67FF), (0x6980, 0x699F)],
        gfx_target_version: 80003,
        num_sdma_engines: 2,
        num_sdma_queues_per_engine: 2,
    },
    // CHIP_VEGA10 (GC 9.0.1): gfx900, SDMA 4.0.0 with 2 instances and
    // 2 queues per engine.
    LegacyChip {
        name: "Vega 10 (gfx900)",
        device_ids: &[(0x6860, 0x686F), (0x687F, 0x687F)],
        gfx_target_version: 90000,
        num_sdma_engines: 2,
        num_sdma_queues_per_engine: 2,
    },
];

/// Fills in, for GPU nodes of the chips whose captures predate the keys
/// (Carrizo/Bristol Ridge, Polaris, Vega 10, by PCI device id), the keys a
/// current kernel prints that the capture lacks (`gfx_target_version`,
/// `num_sdma_engines`, `num_sdma_xgmi_engines`,
/// `num_sdma_queues_per_engine`), where the kernel prints them. Keys the
/// capture has are never changed; other chips are left alone. Returns one
/// line per node changed.
pub fn complete_kernel_properties(system: &mut System) -> Vec<String> {
    let mut notes = Vec::new();
    for node in system.nodes.iter_mut().filter(|n| n.is_gpu()) {
        let device_id = node.prop("device_id");
        let Some(chip) = LEGACY_CHIPS.iter().find(|c| {
            c.device_ids
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&device_id))
        }) else {
            continue;
        };
        let mut added = Vec::new();
        let p = &mut node.properties;
        if p.get_or_zero("gfx_target_version") == 0 {
            p.insert_after(
                "max_slots_scratch_cu",
                "gfx_target_version",
                chip.gfx_target_version,
            );
            added.push(format!("gfx_target_version {}", chip.gfx_target_version));
        }
        let sdma_anchor = ["hive_id", "drm_render_minor", "location_id"]
            .into_iter()
            .find(|k| p.contains(k))
            .unwrap_or("device_id");
        let mut anchor = sdma_anchor.to_owned();
        for (key, value) in [
            ("num_sdma_engines", chip.num_sdma_engines),
            ("num_sdma_xgmi_engines", 0),
            (
                "num_sdma_queues_per_engine",
                chip.num_sdma_queues_per_engine,
            ),
        ] {
            if !p.contains(key) {
                p.insert_after(&anchor, key, value);
                added.push(format!("{key} {value}"));
            }
            anchor = key.to_owned();
        }
        if !added.is_empty() {
            notes.push(format!(
                "node {} ({}): {}",
                node.id,
                chip.name,
                added.join(", ")
            ));
        }
    }
    notes
}

/// Fills in the system-wide files every amdkfd prints (`generation_id`,
/// `system_properties`) that a partial capture lacks: a tree without them
/// is one no kernel shows, and AMD's thunk refuses it (`hsaKmtOpenKFD`
/// reads `system_properties` first). The generation is 1, as after boot;
/// the platform fields, copied by the kernel from the firmware's CRAT or
/// ACPI header, are unknown for such a capture and read 0. Returns one note
/// per file added.
pub fn complete_system_properties(system: &mut System) -> Vec<String> {
    let mut notes = Vec::new();
    if system.generation_id.is_none() {
        system.generation_id = Some(1);
        notes.push("generation_id 1".to_owned());
    }
    if system.system_properties.is_none() {
        system.system_properties = Some(props(&[
            ("platform_oem", 0),
            ("platform_id", 0),
            ("platform_rev", 0),
        ]));
        notes.push("system_properties with platform_oem/id/rev 0".to_owned());
    }
    notes
}

/// Gives each CPU node without a memory bank (a capture that kept only
/// `properties`) the system-memory bank every amdkfd CPU node has (from the
/// CRAT memory affinity of its NUMA node): `system_memory_bytes` shared
/// evenly among the CPU nodes, heap type SYSTEM, width 64. AMD's thunk
/// asserts that a CPU node it links GPUs to has memory. Returns one line
/// per node changed.
pub fn complete_cpu_memory(system: &mut System, system_memory_bytes: u64) -> Vec<String> {
    let is_cpu = |n: &Node| n.prop("cpu_cores_count") > 0 && n.prop("simd_count") == 0;
    let cpus = system.nodes.iter().filter(|n| is_cpu(n)).count() as u64;
    let Some(share) = system_memory_bytes.checked_div(cpus) else {
        return Vec::new();
    };
    let mut notes = Vec::new();
    for node in system.nodes.iter_mut().filter(|n| is_cpu(n)) {
        if node.mem_banks.as_ref().is_some_and(|b| !b.is_empty()) {
            continue;
        }
        node.mem_banks = Some(vec![Indexed::new(
            0,
            props(&[
                ("heap_type", heap_type::SYSTEM),
                ("size_in_bytes", share),
                ("flags", 0),
                ("width", 64),
                ("mem_clk_max", 0),
            ]),
        )]);
        notes.push(format!(
            "node {}: system memory bank of {share} bytes",
            node.id
        ));
    }
    notes
}

/// The system RAM of `system`: the sum of its CPU nodes' system-memory
/// banks, `fallback` when it has none.
pub(crate) fn system_memory_of(system: &System, fallback: u64) -> u64 {
    let total: u64 = system
        .nodes
        .iter()
        .filter(|n| n.prop("cpu_cores_count") > 0 && n.prop("simd_count") == 0)
        .flat_map(|n| n.mem_banks.iter().flatten())
        .filter(|b| b.properties.get_or_zero("heap_type") == heap_type::SYSTEM)
        .map(|b| b.properties.get_or_zero("size_in_bytes"))
        .sum();
    if total == 0 {
        fallback
    } else {
        total
    }
}

/// The L2 (and last-level) cache per GPU node of a GFX9 chip, KiB, from
/// amdkfd's per-ASIC cache tables (`kfd_crat.c`): Vega 10/20 4 MiB; MI100
/// and MI200 8 MiB; MI300 (per XCC partition) 4 MiB with the 256 MiB
/// Infinity Cache as its last level. `None` outside GFX9.
fn gfx9_l2_l3_kib(gfx_target_version: u64) -> Option<(u64, u64)> {
    Some(match gfx_target_version {
        90000..=90007 => (4096, 0),
        90008..=90399 => (8192, 0),
        90400..=90499 => (4096, 256 * 1024),
        _ => return None,
    })
}

/// Gives each GFX9 GPU node whose capture has no `caches/` (one that kept
/// only `properties` and links) the caches amdkfd lists for it
/// ([`amdgpu_topology::gfx9_gpu_caches`] with the chip's L2 and last-level
/// sizes): a kernel always lists a GPU's caches, and ROCr asserts "GPU
/// cache info missing" on a node without. Other generations are left
/// alone. Returns one line per node changed.
pub fn complete_gpu_caches(system: &mut System) -> Vec<String> {
    let mut notes = Vec::new();
    for node in system.nodes.iter_mut().filter(|n| n.prop("simd_count") > 0) {
        // `None`: the capture has no caches/ at all; an empty list is a
        // tree that lists none (the synthetic machines).
        if node.caches.is_some() {
            continue;
        }
        let Some((l2_kib, l3_kib)) = gfx9_l2_l3_kib(node.prop("gfx_target_version")) else {
            continue;
        };
        let caches = amdgpu_topology::gfx9_gpu_caches(&amdgpu_topology::Gfx9Caches {
            compute_units: node.prop("simd_count") / node.prop("simd_per_cu").max(1),
            array_count: node.prop("array_count").max(1),
            simd_id_base: node.prop("simd_id_base"),
            l1_vector_kib: 16,
            l2_kib,
            l3_kib,
        });
        notes.push(format!("node {}: {} GFX9 caches", node.id, caches.len()));
        // The count the capture printed described the list it lost; the
        // tree's count is the list's.
        if node.properties.contains("caches_count") {
            node.properties.set("caches_count", caches.len() as u64);
        }
        node.caches = Some(caches);
    }
    notes
}

/// Sets each node's `mem_banks_count`, `caches_count`, `io_links_count`
/// and `p2p_links_count` to 0 when the tree holds no such list at all, as
/// amdkfd's counts always equal the lists it prints. A partial capture
/// keeps the counts of the machine it came from but not always the entries
/// (no `caches/`, a CPU node without `mem_banks/`); AMD's thunk reads
/// `caches/0 .. caches_count-1` and fails on the first missing one. Only
/// keys the node has are changed. Returns one line per node changed.
pub fn match_entry_counts(system: &mut System) -> Vec<String> {
    let mut notes = Vec::new();
    for node in &mut system.nodes {
        // Only lists the capture lacks entirely: a tree given with entries
        // keeps its counts (tests build machines whose counts differ on
        // purpose, for the plugin's property checks).
        let absent = [
            ("mem_banks_count", node.mem_banks.is_none()),
            ("caches_count", node.caches.is_none()),
            ("io_links_count", node.io_links.is_none()),
            ("p2p_links_count", node.p2p_links.is_none()),
        ];
        let mut changed = Vec::new();
        for (key, absent) in absent {
            match node.properties.get(key) {
                Some(count) if absent && count != 0 => {
                    node.properties.set(key, 0);
                    changed.push(format!("{key} {count} -> 0"));
                }
                _ => {}
            }
        }
        if !changed.is_empty() {
            notes.push(format!("node {}: {}", node.id, changed.join(", ")));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn old_captures_get_what_a_current_kernel_reports() {
        let mut sys = synthetic_system(1);
        let gpu = sys.nodes.iter_mut().find(|n| n.is_gpu()).unwrap();
        for key in [
            "gfx_target_version",
            "num_sdma_engines",
            "num_sdma_xgmi_engines",
            "num_sdma_queues_per_engine",
        ] {
            gpu.properties.remove(key);
        }
        gpu.properties.set("device_id", 0x67DF);
        let notes = complete_kernel_properties(&mut sys);
        assert_eq!(notes.len(), 1, "{notes:?}");
        let gpu = sys.gpus().next().unwrap();
        assert_eq!(gpu.prop("gfx_target_version"), 80003);
        assert_eq!(gpu.prop("num_sdma_engines"), 2);
        assert_eq!(gpu.prop("num_sdma_queues_per_engine"), 2);
        assert!(gpu.properties.contains("num_sdma_xgmi_engines"));
        // What the capture has stays; a complete node is left alone.
        assert!(complete_kernel_properties(&mut sys).is_empty());
        let mut modern = synthetic_system(2);
        let before = modern.clone();
        assert!(complete_kernel_properties(&mut modern).is_empty());
        assert_eq!(modern, before);
    }

    #[test]
    fn partial_captures_get_the_system_files_every_kernel_prints() {
        let mut sys = synthetic_system(1);
        sys.generation_id = None;
        sys.system_properties = None;
        assert_eq!(complete_system_properties(&mut sys).len(), 2);
        assert_eq!(sys.generation_id, Some(1));
        let p = sys.system_properties.as_ref().unwrap();
        assert_eq!(p.get_or_zero("platform_oem"), 0);
        assert!(p.contains("platform_id") && p.contains("platform_rev"));
        // A complete tree is left alone.
        let mut full = synthetic_system(1);
        let before = full.clone();
        assert!(complete_system_properties(&mut full).is_empty());
        assert_eq!(full, before);
    }

    #[test]
    fn cpu_nodes_without_memory_get_a_system_bank() {
        let mut sys = synthetic_system(1);
        sys.nodes[0].mem_banks = None;
        let notes = complete_cpu_memory(&mut sys, 64 << 30);
        assert_eq!(notes.len(), 1, "{notes:?}");
        let bank = &sys.nodes[0].mem_banks.as_ref().unwrap()[0];
        assert_eq!(bank.properties.get_or_zero("heap_type"), heap_type::SYSTEM);
        assert_eq!(bank.properties.get_or_zero("size_in_bytes"), 64 << 30);
        // GPU nodes and CPU nodes with memory are left alone.
        assert!(complete_cpu_memory(&mut sys, 64 << 30).is_empty());
    }

    #[test]
    fn gfx9_gpus_without_caches_get_the_kernel_s() {
        let mut sys = crate::synthetic_system(1);
        let gpu = sys.nodes.iter_mut().find(|n| n.is_gpu()).unwrap();
        gpu.caches = None;
        let notes = complete_gpu_caches(&mut sys);
        assert_eq!(notes.len(), 1, "{notes:?}");
        let gpu = sys.nodes.iter().find(|n| n.is_gpu()).unwrap();
        // 104 CUs in 8 arrays of 13: as an MI210 capture lists them.
        assert_eq!(gpu.caches.as_ref().unwrap().len(), 217);
        assert!(complete_gpu_caches(&mut sys).is_empty());
    }

    #[test]
    fn counts_match_the_entries_written() {
        let mut sys = synthetic_system(2);
        let gpu = sys.nodes.iter_mut().find(|n| n.is_gpu()).unwrap();
        gpu.properties.set("caches_count", 4);
        gpu.caches = None;
        gpu.mem_banks = None;
        let notes = match_entry_counts(&mut sys);
        assert_eq!(notes.len(), 1, "{notes:?}");
        let gpu = sys.nodes.iter().find(|n| n.is_gpu()).unwrap();
        assert_eq!(gpu.prop("caches_count"), 0);
        assert_eq!(gpu.prop("mem_banks_count"), 0);
        // A list that is there keeps the count it was given.
        let gpu = sys.nodes.iter_mut().find(|n| n.is_gpu()).unwrap();
        gpu.caches = Some(Vec::new());
        gpu.properties.set("caches_count", 3);
        let before = sys.clone();
        assert!(match_entry_counts(&mut sys).is_empty());
        assert_eq!(sys, before);
    }

    #[test]
    fn synthetic_gpus_are_complete_and_distinct() {
        let sys = synthetic_system(8);
        assert_eq!(sys.gpus().count(), 8);
        assert_eq!(sys.nodes[0].gpu_id, Some(0), "cpu node first with gpu_id 0");
        let ids: HashSet<_> = sys.gpus().map(|n| n.gpu_id.unwrap()).collect();
        assert_eq!(ids.len(), 8);
        assert!(ids.iter().all(|&id| id != 0 && id <= 0xffff));
        let minors: HashSet<_> = sys.gpus().map(|n| n.render_minor().unwrap()).collect();
        assert_eq!(minors.len(), 8);
        assert!(sys.gpus().all(|n| n.vram() == Some((SYNTHETIC_VRAM, true))));
    }
}
