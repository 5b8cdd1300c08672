//! Every real fixture parses, with the node counts, GPUs, hives and values
//! SOURCES.md documents for it.

mod fixture_dir;

use amdgpu_topology::parse::Note;
use amdgpu_topology::{parse, Hive, NodeKind, Parsed};
use fixture_dir::{fixture, topology_fixtures, FIXTURES};

fn load(name: &str) -> Option<Parsed> {
    let dir = fixture(name)?;
    let parsed = parse(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(parsed.skipped.is_empty(), "{name}: {:?}", parsed.skipped);
    Some(parsed)
}

fn gpu_ids(parsed: &Parsed) -> Vec<Option<u32>> {
    parsed.system.gpus().map(|n| n.gpu_id).collect()
}

#[test]
fn every_fixture_parses() {
    let Some(dir) = topology_fixtures() else {
        return;
    };
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    found.sort();
    for name in FIXTURES {
        assert!(found.iter().any(|f| f == name), "fixture {name} is missing");
    }
    // Fixtures added later are parsed too.
    for name in &found {
        let parsed = parse(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!parsed.system.nodes.is_empty(), "{name}");
        assert!(parsed.skipped.is_empty(), "{name}: {:?}", parsed.skipped);
    }
}

#[test]
fn mi308x_cpx_one_hive_of_32() {
    let Some(p) = load("mi308x-cpx-8gpu") else {
        return;
    };
    let s = &p.system;
    assert_eq!(s.nodes.len(), 34);
    assert_eq!(s.gpus().count(), 32);
    assert_eq!(s.generation_id, Some(33));
    let sp = s.system_properties.as_ref().unwrap();
    let sp: Vec<_> = sp.iter().collect();
    assert_eq!(
        sp,
        vec![
            ("platform_oem", 35_498_446_626_881),
            ("platform_id", 71_791_775_140_929),
            ("platform_rev", 2)
        ]
    );
    assert!(p.notes.is_empty(), "complete fixture: {:?}", p.notes);

    let cpu = s.node(0).unwrap();
    assert_eq!(cpu.kind(), NodeKind::Cpu);
    assert_eq!(cpu.gpu_id, Some(0));
    assert_eq!(cpu.name.as_deref(), Some(""));
    assert_eq!(cpu.prop("cpu_cores_count"), 112);
    assert_eq!(cpu.io_links().len(), 17);
    assert_eq!(cpu.render_minor(), None);

    let gpu = s.node(2).unwrap();
    assert_eq!(gpu.kind(), NodeKind::Gpu);
    assert_eq!(gpu.gpu_id, Some(24248));
    assert_eq!(gpu.name.as_deref(), Some("ip discovery"));
    assert_eq!(gpu.prop("device_id"), 29858);
    assert_eq!(gpu.prop("gfx_target_version"), 90402);
    assert_eq!(gpu.render_minor(), Some(128));
    assert_eq!(gpu.vram(), Some((51_539_607_552, true)));
    let bank = &gpu.mem_banks.as_ref().unwrap()[0];
    assert_eq!(bank.used_memory, Some(2_907_979_776));
    assert_eq!(gpu.caches.as_ref().unwrap().len(), 46);
    assert_eq!(gpu.prop("caches_count"), 46);
    let cache = &gpu.caches.as_ref().unwrap()[0];
    assert_eq!(cache.properties.get("level"), Some(1));
    let siblings = cache.properties.list("sibling_map").unwrap();
    assert_eq!(siblings.split(',').count(), 32);
    assert!(siblings.starts_with("1,0,"));
    // The odd partition of each GPU has 16 MiB less.
    assert_eq!(s.node(5).unwrap().vram(), Some((51_522_830_336, true)));
    // PCI domain 1 on the second half.
    assert_eq!(s.node(18).unwrap().prop("domain"), 1);
    assert_eq!(s.node(33).unwrap().render_minor(), Some(187));
    assert_eq!(s.node(33).unwrap().gpu_id, Some(15601));

    let ids: Vec<u32> = gpu_ids(&p).into_iter().map(Option::unwrap).collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 32, "gpu_ids are unique");
    assert!(ids.iter().all(|&id| id != 0 && id <= 0xffff));

    assert_eq!(
        s.hives(),
        vec![Hive {
            hive_id: 2_095_653_680_343_411_291,
            nodes: (2..34).collect(),
            hive_id_agrees: true,
        }]
    );
    // io_links: XGMI between partitions, PCIe to the CPU, type 5 between CPUs.
    assert!(s.xgmi_linked(2, 33));
    assert!(!s.xgmi_linked(0, 2));
    let cpu_link = cpu.io_links().iter().find(|l| l.node_to() == 1).unwrap();
    assert_eq!(cpu_link.link_type(), 5);
    assert_eq!(gpu.p2p_links().len(), 1);
}

#[test]
fn mi300x_cpx_63_partitions_without_gpu_ids() {
    let Some(p) = load("mi300x-cpx-8gpu") else {
        return;
    };
    let s = &p.system;
    assert_eq!(s.nodes.len(), 65);
    assert_eq!(s.gpus().count(), 63);
    assert_eq!(s.cpus().count(), 2);
    assert_eq!(s.generation_id, Some(80));
    assert!(gpu_ids(&p).iter().all(Option::is_none));
    assert!(s.nodes.iter().all(|n| n.mem_banks.is_none()
        && n.caches.is_none()
        && n.p2p_links.is_none()
        && n.name.is_none()));
    // One note per node for the gpu_id, one per GPU for the VRAM.
    let missing_ids = p
        .notes
        .iter()
        .filter(|n| matches!(n, Note::MissingGpuId { .. }))
        .count();
    let missing_banks = p
        .notes
        .iter()
        .filter(|n| matches!(n, Note::MissingMemBanks { .. }))
        .count();
    assert_eq!((missing_ids, missing_banks), (65, 63));

    let last = s.node(64).unwrap();
    assert_eq!(last.prop("location_id"), 58630);
    assert_eq!(last.prop("device_id"), 29857);
    assert_eq!(last.render_minor(), Some(190));
    assert_eq!(last.prop("io_links_count"), 63);
    assert_eq!(last.io_links().len(), 63);
    assert_eq!(s.node(0).unwrap().io_links().len(), 33);
    assert_eq!(s.node(1).unwrap().io_links().len(), 32);

    let hives = s.hives();
    assert_eq!(hives.len(), 1);
    assert_eq!(hives[0].nodes, (2..65).collect::<Vec<u32>>());
    assert_eq!(hives[0].hive_id, 15_188_982_192_727_901_047);
    assert!(hives[0].hive_id_agrees);
}

#[test]
fn mi210_two_hives_of_four() {
    let Some(p) = load("mi210-8gpu-xgmi-2hives") else {
        return;
    };
    let s = &p.system;
    assert_eq!(s.nodes.len(), 10);
    assert_eq!(s.gpus().count(), 8);
    assert_eq!(s.generation_id, None);
    assert_eq!(s.system_properties, None);
    assert!(p.notes.contains(&Note::MissingGenerationId));
    assert!(p.notes.contains(&Note::MissingSystemProperties));
    assert_eq!(
        s.hives(),
        vec![
            Hive {
                hive_id: 12_609_507_387_757_274_807,
                nodes: vec![2, 3, 4, 5],
                hive_id_agrees: true,
            },
            Hive {
                hive_id: 18_091_350_218_769_748_594,
                nodes: vec![6, 7, 8, 9],
                hive_id_agrees: true,
            },
        ]
    );
    assert!(!s.xgmi_linked(2, 6), "the hives are joined over PCIe only");
    let minors: Vec<_> = s.gpus().map(|n| n.render_minor().unwrap()).collect();
    assert_eq!(minors, (128..136).collect::<Vec<u32>>());
    let gpu = s.node(2).unwrap();
    assert_eq!(gpu.prop("device_id"), 29711);
    assert_eq!(gpu.prop("gfx_target_version"), 90010);
    assert_eq!(gpu.prop("simd_count"), 416);
    let xgmi: Vec<_> = gpu
        .io_links()
        .iter()
        .filter(|l| l.link_type() == 11)
        .collect();
    assert_eq!(xgmi.len(), 3);
    assert!(xgmi.iter().all(|l| l.properties.get("weight") == Some(15)
        && l.properties.get("max_bandwidth") == Some(50000)));
    let cpu_links = s.node(0).unwrap().io_links();
    assert!(cpu_links
        .iter()
        .any(|l| l.node_to() == 1 && l.link_type() == 1));
}

#[test]
fn vega10_old_kernel_one_gpu() {
    let Some(p) = load("vega10-mi25-1gpu") else {
        return;
    };
    let s = &p.system;
    assert_eq!(s.nodes.len(), 2);
    assert_eq!(s.gpus().count(), 1);
    assert_eq!(s.generation_id, Some(2));
    let sp = s.system_properties.as_ref().unwrap();
    assert_eq!(sp.get("platform_oem"), Some(4_777_524_452_235_890_003));
    assert_eq!(sp.get("platform_rev"), Some(2));
    let gpu = s.node(1).unwrap();
    assert_eq!(gpu.gpu_id, Some(13261));
    assert_eq!(
        gpu.name.as_deref(),
        Some(""),
        "old kernels print an empty name"
    );
    assert_eq!(gpu.prop("device_id"), 26720);
    assert_eq!(gpu.properties.get("gfx_target_version"), None);
    assert_eq!(gpu.properties.get("hive_id"), None);
    assert_eq!(gpu.vram(), Some((17_163_091_968, true)));
    assert_eq!(
        gpu.mem_banks.as_ref().unwrap()[0].used_memory,
        Some(14_102_528)
    );
    assert!(gpu.p2p_links.is_none(), "the kernel predates p2p_links");
    assert!(gpu.caches.as_ref().is_some_and(|c| !c.is_empty()));
    let caches_with_lists = gpu
        .caches
        .iter()
        .flatten()
        .filter(|c| c.properties.list("sibling_map").is_some())
        .count();
    assert!(caches_with_lists > 0);
    let cpu = s.node(0).unwrap();
    assert_eq!(cpu.vram(), None, "system memory is not VRAM");
    assert!(cpu.caches.is_none());
    assert_eq!(cpu.io_links().len(), 1);
    assert!(s.hives().is_empty());
}

#[test]
fn mi100_without_trailing_newlines() {
    let Some(p) = load("mi100-arcturus-rocmi-test") else {
        return;
    };
    let s = &p.system;
    assert_eq!(s.nodes.len(), 1);
    let gpu = &s.nodes[0];
    assert_eq!(gpu.id, 0);
    assert_eq!(gpu.kind(), NodeKind::Gpu);
    assert_eq!(gpu.gpu_id, Some(42700));
    assert_eq!(gpu.name.as_deref(), Some("arcturus"));
    assert_eq!(gpu.prop("device_id"), 29580);
    assert_eq!(gpu.prop("gfx_target_version"), 90008);
    assert_eq!(gpu.prop("location_id"), 8960);
    assert_eq!(gpu.render_minor(), Some(128));
    assert_eq!(gpu.vram(), None);
    assert!(p.notes.contains(&Note::MissingMemBanks { node: 0 }));
}

#[test]
fn bristol_ridge_apu_one_combined_node() {
    let Some(p) = load("apu-bristol-ridge-a12-9800-issue121") else {
        return;
    };
    let s = &p.system;
    assert_eq!(s.nodes.len(), 1);
    let apu = &s.nodes[0];
    assert_eq!(apu.kind(), NodeKind::Apu);
    assert_eq!(apu.prop("cpu_cores_count"), 4);
    assert_eq!(apu.prop("simd_count"), 32);
    assert_eq!(apu.prop("device_id"), 39028);
    assert_eq!(apu.prop("mem_banks_count"), 0);
    assert_eq!(apu.gpu_id, None);
    assert_eq!(s.gpus().count(), 1);
    assert_eq!(s.cpus().count(), 0);
}

#[test]
fn polaris_single_node_numbered_one() {
    let Some(p) = load("polaris-rx470-issue474") else {
        return;
    };
    let s = &p.system;
    assert_eq!(s.nodes.len(), 1);
    let gpu = s.node(1).unwrap();
    assert_eq!(gpu.kind(), NodeKind::Gpu);
    assert_eq!(gpu.prop("device_id"), 26591);
    assert_eq!(gpu.prop("simd_count"), 128);
    assert_eq!(gpu.render_minor(), Some(128));
    assert_eq!(gpu.properties.get("domain"), None);
}

#[test]
fn mi300a_four_apus_share_a_hive_id() {
    let Some(p) = load("mi300a-4apu-spx-unattributed") else {
        return;
    };
    let s = &p.system;
    assert_eq!(s.nodes.len(), 8);
    assert_eq!(s.gpus().count(), 4);
    assert_eq!(s.cpus().count(), 4);
    assert!(s
        .nodes
        .iter()
        .all(|n| n.hive_id() == 9_034_655_720_432_782_706));
    let minors: Vec<_> = s.gpus().map(|n| n.render_minor().unwrap()).collect();
    assert_eq!(minors, vec![128, 136, 144, 152]);
    let domains: Vec<_> = s.gpus().map(|n| n.prop("domain")).collect();
    assert_eq!(domains, vec![0, 1, 2, 3]);
    assert!(s
        .gpus()
        .all(|n| n.prop("num_xcc") == 6 && n.prop("device_id") == 29856));
    // No io_links in the capture, so no hive can be proven from links.
    assert!(s.hives().is_empty());
}
