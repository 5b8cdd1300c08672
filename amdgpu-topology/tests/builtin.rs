//! Built-in topologies are self-consistent, shaped like what the kernel
//! prints, round-trip through sysfs files, and `renumbered` gives the same
//! machine under another host's numbering. Also: the gpu_id recipe and the
//! fill-in of partial fixtures.

mod fixture_dir;

use std::collections::BTreeSet;
use std::path::Path;

use amdgpu_topology::gpu_id::GpuIdInputs;
use amdgpu_topology::memfs::MemoryFs;
use amdgpu_topology::model::link_type;
use amdgpu_topology::parse::parse_with;
use amdgpu_topology::synthesize::{vram_per_node, Synthesized};
use amdgpu_topology::write::write_with;
use amdgpu_topology::{
    builtin, builtin_names, parse, renumbered, renumbered_with_map, synthesize_missing, write,
    NodeKind, System,
};
use fixture_dir::{fixture, topology_fixtures, FIXTURES};

const GIB: u64 = 1 << 30;

const GPU_KEYS: &[&str] = &[
    "cpu_cores_count",
    "simd_count",
    "mem_banks_count",
    "caches_count",
    "io_links_count",
    "p2p_links_count",
    "cpu_core_id_base",
    "simd_id_base",
    "max_waves_per_simd",
    "lds_size_in_kb",
    "gds_size_in_kb",
    "num_gws",
    "wave_front_size",
    "array_count",
    "simd_arrays_per_engine",
    "cu_per_simd_array",
    "simd_per_cu",
    "max_slots_scratch_cu",
    "gfx_target_version",
    "vendor_id",
    "device_id",
    "location_id",
    "domain",
    "drm_render_minor",
    "hive_id",
    "num_sdma_engines",
    "num_sdma_xgmi_engines",
    "num_sdma_queues_per_engine",
    "num_cp_queues",
    "max_engine_clk_fcompute",
    "local_mem_size",
    "fw_version",
    "capability",
    "capability2",
    "debug_prop",
    "sdma_fw_version",
    "unique_id",
    "num_xcc",
    "max_engine_clk_ccompute",
];

const LINK_KEYS: &[&str] = &[
    "type",
    "version_major",
    "version_minor",
    "node_from",
    "node_to",
    "weight",
    "min_latency",
    "max_latency",
    "min_bandwidth",
    "max_bandwidth",
    "recommended_transfer_size",
    "recommended_sdma_engine_id_mask",
    "flags",
];

/// Everything a KFD tree promises about itself.
fn assert_consistent(name: &str, s: &System) {
    let ids: Vec<u32> = s.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, (0..s.nodes.len() as u32).collect::<Vec<_>>(), "{name}");
    // CPU nodes first.
    let first_gpu = s.nodes.iter().position(|n| n.is_gpu()).unwrap();
    assert!(s.nodes[first_gpu..].iter().all(|n| n.is_gpu()), "{name}");

    let mut gpu_ids = BTreeSet::new();
    let mut minors = BTreeSet::new();
    for node in &s.nodes {
        let p = &node.properties;
        let count = |key: &str| p.get(key).unwrap() as usize;
        assert_eq!(
            count("mem_banks_count"),
            node.mem_banks.as_ref().map_or(0, Vec::len)
        );
        assert_eq!(
            count("caches_count"),
            node.caches.as_ref().map_or(0, Vec::len)
        );
        assert_eq!(count("io_links_count"), node.io_links().len(), "{name}");
        assert_eq!(count("p2p_links_count"), node.p2p_links().len(), "{name}");
        for link in node.io_links().iter().chain(node.p2p_links()) {
            let keys: Vec<&str> = link.properties.entries().map(|(k, _)| k).collect();
            assert_eq!(keys, LINK_KEYS, "{name}");
            assert_eq!(link.node_from(), node.id, "{name}");
            assert!(s.node(link.node_to()).is_some(), "{name}");
        }
        for link in node.io_links() {
            let back = s
                .node(link.node_to())
                .unwrap()
                .io_links()
                .iter()
                .any(|l| l.node_to() == node.id && l.link_type() == link.link_type());
            assert!(
                back,
                "{name}: io_link {} -> {} has no reverse",
                node.id,
                link.node_to()
            );
        }
        match node.kind() {
            NodeKind::Cpu => assert_eq!(node.gpu_id, Some(0), "{name}"),
            NodeKind::Gpu => {
                let keys: Vec<&str> = p.entries().map(|(k, _)| k).collect();
                assert_eq!(keys, GPU_KEYS, "{name}");
                let id = node.gpu_id.unwrap();
                assert!((1..=0xffff).contains(&id), "{name}");
                assert!(gpu_ids.insert(id), "{name}: duplicate gpu_id {id}");
                assert!(minors.insert(node.render_minor().unwrap()), "{name}");
                let (vram, public) = node.vram().unwrap();
                assert!(vram > 0 && public, "{name}");
                let caches = node.caches.as_ref().unwrap();
                assert!(caches
                    .iter()
                    .all(|c| c.properties.list("sibling_map").is_some()));
            }
            NodeKind::Apu => panic!("{name}: no APU built-ins"),
        }
    }
    let gpus = s.gpus().count() as u32;
    assert_eq!(
        minors.into_iter().collect::<Vec<_>>(),
        (128..128 + gpus).collect::<Vec<_>>(),
        "{name}: render minors 128.."
    );
}

#[test]
fn names_resolve_and_unknown_names_do_not() {
    assert!(builtin_names().len() >= 4);
    for name in builtin_names() {
        assert!(builtin(name).is_some(), "{name}");
    }
    assert!(builtin("mi999").is_none());
}

#[test]
fn builtins_are_consistent_and_deterministic() {
    for name in builtin_names() {
        let s = builtin(name).unwrap();
        assert_consistent(name, &s);
        assert_eq!(builtin(name).unwrap(), s, "{name} is deterministic");
    }
}

#[test]
fn builtin_shapes() {
    let s = builtin("mi210-8gpu-2hive").unwrap();
    assert_eq!(
        (s.nodes.len(), s.gpus().count(), s.cpus().count()),
        (10, 8, 2)
    );
    let hives = s.hives();
    assert_eq!(hives.len(), 2);
    assert_eq!(hives[0].nodes, vec![2, 3, 4, 5]);
    assert_eq!(hives[1].nodes, vec![6, 7, 8, 9]);
    assert!(hives.iter().all(|h| h.hive_id_agrees));
    assert_ne!(hives[0].hive_id, hives[1].hive_id);
    assert!(s.gpus().all(|g| g.vram() == Some((64 * GIB, true))));
    assert!(s.gpus().all(|g| g.prop("device_id") == 0x740F));
    // Each GPU: 1 PCIe link to its CPU and 3 XGMI links in its hive.
    for gpu in s.gpus() {
        let types: Vec<u64> = gpu.io_links().iter().map(|l| l.link_type()).collect();
        assert_eq!(types, vec![2, 11, 11, 11]);
    }
    assert_eq!(s.node(2).unwrap().io_links()[0].node_to(), 0);
    assert_eq!(s.node(9).unwrap().io_links()[0].node_to(), 1);
    // The hives reach each other as PCIe peers.
    assert!(s
        .node(2)
        .unwrap()
        .p2p_links()
        .iter()
        .any(|l| l.node_to() == 6 && l.link_type() == link_type::PCIE));

    let s = builtin("single-gpu").unwrap();
    assert_eq!((s.nodes.len(), s.gpus().count()), (2, 1));
    assert!(s.hives().is_empty());
    assert_eq!(s.node(1).unwrap().hive_id(), 0);
    assert_eq!(s.node(1).unwrap().prop("gfx_target_version"), 90010);

    let s = builtin("mi300x-64").unwrap();
    assert_eq!(
        (s.nodes.len(), s.gpus().count(), s.cpus().count()),
        (66, 64, 2)
    );
    let hives = s.hives();
    assert_eq!(hives.len(), 1);
    assert_eq!(hives[0].nodes, (2..66).collect::<Vec<u32>>());
    assert!(s.gpus().all(|g| g.vram() == Some((24 * GIB, true))));
    assert!(s.gpus().all(|g| g.io_links().len() == 64));
    // Partition index in the low byte of location_id, 8 per board.
    let low: Vec<u64> = s.gpus().map(|g| g.prop("location_id") & 0xff).collect();
    assert_eq!(low[..9], [0, 1, 2, 3, 4, 5, 6, 7, 0]);

    let s = builtin("mi250x-8").unwrap();
    assert_eq!((s.nodes.len(), s.gpus().count()), (10, 8));
    assert_eq!(s.hives().len(), 1);

    let s = builtin("pcie-2gpu").unwrap();
    assert_eq!((s.nodes.len(), s.gpus().count()), (3, 2));
    assert!(s.hives().is_empty());
    assert!(s
        .node(1)
        .unwrap()
        .p2p_links()
        .iter()
        .any(|l| l.node_to() == 2));
}

#[test]
fn builtins_round_trip_through_sysfs_trees() {
    // In memory for all (mi300x-64 is ~20 000 files, slow to write to disk)...
    for name in builtin_names() {
        let s = builtin(name).unwrap();
        let mut tree = MemoryFs::new();
        write_with(&mut tree, &s, Path::new("/t")).unwrap();
        let parsed = parse_with(&tree, Path::new("/t")).unwrap();
        assert!(
            parsed.skipped.is_empty() && parsed.notes.is_empty(),
            "{name}"
        );
        assert_eq!(parsed.system, s, "{name}");
    }
    // ...and through real files for the small ones.
    for name in ["single-gpu", "pcie-2gpu"] {
        let s = builtin(name).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        write(&s, tmp.path()).unwrap();
        assert_eq!(parse(tmp.path()).unwrap().system, s, "{name}");
    }
}

#[test]
fn builtin_gpu_ids_follow_the_kernel_recipe() {
    for name in builtin_names() {
        let s = builtin(name).unwrap();
        // Dropping the ids and synthesizing them again gives the same ids.
        let mut stripped = s.clone();
        for gpu in stripped.nodes.iter_mut().filter(|n| n.is_gpu()) {
            gpu.gpu_id = None;
        }
        let filled = synthesize_missing(&mut stripped);
        assert!(filled
            .iter()
            .all(|f| matches!(f, Synthesized::GpuId { .. })));
        assert_eq!(stripped, s, "{name}");
    }
}

#[test]
fn renumbered_is_the_same_machine_numbered_differently() {
    for name in builtin_names() {
        let original = builtin(name).unwrap();
        for seed in [1u64, 2, 0xdead_beef] {
            let (other, moves) = renumbered_with_map(&original, seed);
            assert_eq!(renumbered(&original, seed), other);
            assert_consistent(&format!("{name} renumbered {seed}"), &other);
            assert_eq!(moves.len(), original.gpus().count());
            let map = |id: u32| moves.iter().find(|m| m.0 == id).map_or(id, |m| m.1);
            for &(old, new) in &moves {
                let a = original.node(old).unwrap();
                let b = other.node(new).unwrap();
                assert_ne!(a.gpu_id, b.gpu_id, "{name}: a new gpu_id for node {old}");
                for (key, value) in a.properties.iter() {
                    if !matches!(
                        key,
                        "location_id" | "drm_render_minor" | "hive_id" | "unique_id"
                    ) {
                        assert_eq!(b.properties.get(key), Some(value), "{name}: {key}");
                    }
                }
                let links = |n: &amdgpu_topology::Node| -> BTreeSet<(u64, u32, u64)> {
                    n.io_links()
                        .iter()
                        .map(|l| {
                            (
                                l.link_type(),
                                l.node_to(),
                                l.properties.get_or_zero("weight"),
                            )
                        })
                        .collect()
                };
                let mapped: BTreeSet<_> = links(a)
                    .into_iter()
                    .map(|(t, to, w)| (t, map(to), w))
                    .collect();
                assert_eq!(mapped, links(b), "{name}: links of {old} -> {new}");
            }
            let hives = |s: &System, f: &dyn Fn(u32) -> u32| -> BTreeSet<Vec<u32>> {
                s.hives()
                    .into_iter()
                    .map(|h| {
                        let mut v: Vec<u32> = h.nodes.iter().map(|&n| f(n)).collect();
                        v.sort_unstable();
                        v
                    })
                    .collect()
            };
            assert_eq!(hives(&original, &map), hives(&other, &|n| n), "{name}");
            if name == &"mi210-8gpu-2hive" {
                assert!(
                    moves.iter().any(|(a, b)| a != b),
                    "seed {seed} moved nothing"
                );
                let old_hive_ids: BTreeSet<u64> = original.gpus().map(|g| g.hive_id()).collect();
                assert!(other.gpus().all(|g| !old_hive_ids.contains(&g.hive_id())));
            }
        }
    }
}

#[test]
fn mi308x_gpu_ids_are_reproduced_by_the_recipe() {
    let Some(dir) = fixture("mi308x-cpx-8gpu") else {
        return;
    };
    let real = parse(&dir).unwrap().system;
    // Each id from its own inputs (no collision happened on that host)...
    for gpu in real.gpus() {
        let vram = gpu.vram().unwrap().0;
        assert_eq!(
            Some(GpuIdInputs::for_node(gpu, vram).hash()),
            gpu.gpu_id,
            "node {}",
            gpu.id
        );
    }
    // ...and the fill-in of a capture without gpu_id files gives them back.
    let mut partial = real.clone();
    for node in &mut partial.nodes {
        node.gpu_id = None;
    }
    let filled = synthesize_missing(&mut partial);
    assert_eq!(filled.len(), 34);
    assert_eq!(partial, real);
}

#[test]
fn partial_fixtures_are_completed() {
    let Some(dir) = topology_fixtures() else {
        return;
    };
    for name in FIXTURES {
        let mut s = parse(&dir.join(name)).unwrap().system;
        let before = s.clone();
        let filled = synthesize_missing(&mut s);
        let mut ids = BTreeSet::new();
        let mut minors = BTreeSet::new();
        for node in &s.nodes {
            let id = node.gpu_id.unwrap();
            if node.is_gpu() {
                assert!(id != 0 && ids.insert(id), "{name}: node {}", node.id);
                assert!(node.vram().is_some_and(|(size, _)| size > 0), "{name}");
                let minor = node.render_minor().unwrap();
                assert!(
                    (128..=255).contains(&minor) && minors.insert(minor),
                    "{name}"
                );
                assert_eq!(
                    node.prop("mem_banks_count") as usize,
                    node.mem_banks.as_ref().unwrap().len(),
                    "{name}"
                );
            } else {
                assert_eq!(id, 0);
            }
        }
        // Values the capture has are kept.
        for (a, b) in before.nodes.iter().zip(&s.nodes) {
            if let Some(id) = a.gpu_id {
                assert_eq!(b.gpu_id, Some(id));
            }
            for (key, value) in a.properties.iter() {
                if key != "mem_banks_count" {
                    assert_eq!(b.properties.get(key), Some(value), "{name}: {key}");
                }
            }
        }
        // A second pass has nothing left to do, and the result round-trips.
        assert!(synthesize_missing(&mut s.clone()).is_empty(), "{name}");
        let mut tree = MemoryFs::new();
        write_with(&mut tree, &s, Path::new("/t")).unwrap();
        assert_eq!(
            parse_with(&tree, Path::new("/t")).unwrap().system,
            s,
            "{name}"
        );
        if *name == "mi308x-cpx-8gpu" || *name == "vega10-mi25-1gpu" {
            assert!(filled.is_empty(), "{name} is complete: {filled:?}");
        }
    }
}

#[test]
fn partial_fixture_fill_ins_are_the_documented_ones() {
    let Some(dir) = fixture("mi300x-cpx-8gpu") else {
        return;
    };
    let mut s = parse(&dir).unwrap().system;
    let filled = synthesize_missing(&mut s);
    let count = |f: fn(&Synthesized) -> bool| filled.iter().filter(|x| f(x)).count();
    assert_eq!(count(|f| matches!(f, Synthesized::CpuGpuId { .. })), 2);
    assert_eq!(count(|f| matches!(f, Synthesized::VramBank { .. })), 63);
    assert_eq!(count(|f| matches!(f, Synthesized::GpuId { .. })), 63);
    assert_eq!(count(|f| matches!(f, Synthesized::RenderMinor { .. })), 0);
    // MI300X: 192 GiB over 8 CPX partitions.
    assert_eq!(vram_per_node(0x74A1, 1), 24 * GIB);
    assert!(s.gpus().all(|g| g.vram() == Some((24 * GIB, true))));

    // The Bristol Ridge APU has neither a render minor nor banks: both added,
    // the minor after `domain`-less `location_id`, where the kernel prints it.
    let Some(dir) = fixture("apu-bristol-ridge-a12-9800-issue121") else {
        return;
    };
    let mut s = parse(&dir).unwrap().system;
    synthesize_missing(&mut s);
    let apu = &s.nodes[0];
    assert_eq!(apu.render_minor(), Some(128));
    let keys: Vec<&str> = apu.properties.entries().map(|(k, _)| k).collect();
    let at = keys.iter().position(|&k| k == "drm_render_minor").unwrap();
    assert_eq!(keys[at - 1], "location_id");
    assert_eq!(apu.vram(), Some((512 << 20, true)));
    assert_eq!(apu.prop("mem_banks_count"), 1);
}
