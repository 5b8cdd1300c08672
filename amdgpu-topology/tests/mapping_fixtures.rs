//! GPU mapping on the real captures: each fixture onto itself, onto a copy
//! numbered as another host would number it (GPU nodes in another order,
//! other gpu_ids), and onto copies with one weaker GPU.

mod fixture_dir;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use amdgpu_topology::checks::rule;
use amdgpu_topology::devices::{DeviceNode, DeviceProps, DeviceTopology};
use amdgpu_topology::mapping::{map_topologies, MapResult};
use amdgpu_topology::options::CheckOptions;
use amdgpu_topology::{
    builtin, builtin_names, parse, renumbered_with_map, synthesize_missing, System,
};
use fixture_dir::fixture;

/// The fixtures with GPUs the C plugin can handle (discrete GPUs with
/// io links), and their GPU counts.
const MULTI: &[(&str, usize)] = &[
    ("mi308x-cpx-8gpu", 32),
    ("mi300x-cpx-8gpu", 63),
    ("mi210-8gpu-xgmi-2hives", 8),
    ("vega10-mi25-1gpu", 1),
];

/// Parses a fixture into the device view (cached), completed as
/// [`load_system`] does.
fn load(name: &str) -> Option<DeviceTopology> {
    static LOADED: OnceLock<Mutex<BTreeMap<String, Option<DeviceTopology>>>> = OnceLock::new();
    let cache = LOADED.get_or_init(Default::default);
    if let Some(topo) = cache.lock().unwrap().get(name) {
        return topo.clone();
    }
    let topo = load_uncached(name);
    cache.lock().unwrap().insert(name.to_owned(), topo.clone());
    topo
}

fn load_uncached(name: &str) -> Option<DeviceTopology> {
    let system = load_system(name)?;
    Some(DeviceTopology::from_system(&system).unwrap_or_else(|e| panic!("{name}: {e}")))
}

/// Parses a fixture, completing partial captures (gpu_ids, VRAM banks) the
/// way the simulator does.
fn load_system(name: &str) -> Option<System> {
    let dir = fixture(name)?;
    let mut system = parse(&dir).unwrap_or_else(|e| panic!("{name}: {e}")).system;
    synthesize_missing(&mut system);
    Some(system)
}

/// A deterministic shuffle (xorshift) of `items`.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        items.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

/// The same machine as another host would number it: the GPU nodes keep
/// the node ids after the CPUs but in another order, and every GPU gets a
/// new gpu_id. Returns the copy and old node id → new node id.
fn renumbered(topo: &DeviceTopology, seed: u64) -> (DeviceTopology, BTreeMap<u32, u32>) {
    let mut gpu_nodes: Vec<u32> = topo.gpus().map(|n| n.node_id).collect();
    gpu_nodes.sort_unstable();
    let mut shuffled = gpu_nodes.clone();
    shuffle(&mut shuffled, seed);
    let mut renumber: BTreeMap<u32, u32> = gpu_nodes.iter().copied().zip(shuffled).collect();
    for cpu in topo.cpus() {
        renumber.insert(cpu.node_id, cpu.node_id);
    }
    let nodes = topo
        .nodes
        .iter()
        .map(|n| DeviceNode {
            node_id: renumber[&n.node_id],
            gpu_id: if n.is_gpu() {
                // another 16-bit hash, still unique and non-zero
                (n.gpu_id ^ 0xA5A5) | 0x1_0000
            } else {
                0
            },
            props: n.props,
            iolinks: n
                .iolinks
                .iter()
                .map(|l| amdgpu_topology::devices::DevIoLink {
                    link_type: l.link_type,
                    node_to: renumber.get(&l.node_to).copied().unwrap_or(l.node_to),
                })
                .collect(),
        })
        .collect();
    let mut copy = DeviceTopology { nodes };
    copy.nodes.sort_by_key(|n| n.node_id);
    (copy, renumber)
}

fn cpu_of(topo: &DeviceTopology, gpu: &DeviceNode) -> Vec<u32> {
    let mut cpus: Vec<u32> = gpu
        .iolinks
        .iter()
        .filter(|l| topo.node(l.node_to).is_some_and(|t| !t.is_gpu()))
        .map(|l| l.node_to)
        .collect();
    cpus.sort_unstable();
    cpus
}

/// The properties with the ones the checks never compare zeroed.
fn compared(p: &DeviceProps) -> DeviceProps {
    DeviceProps {
        cpu_cores_count: 0,
        gds_size_in_kb: 0,
        domain: 0,
        drm_render_minor: 0,
        hive_id: 0,
        location_id: 0,
        unique_id: 0,
        ..*p
    }
}

/// The documented tie-break, spelled out: checkpointed GPUs in node order
/// take the first free local GPU (node order) with equal properties on the
/// same CPU(s) and in the same hive as the hive partners mapped so far.
fn expected_by_node_order(src: &DeviceTopology, dst: &DeviceTopology) -> BTreeMap<u32, u32> {
    let mut src_gpus: Vec<&DeviceNode> = src.gpus().collect();
    src_gpus.sort_by_key(|n| n.node_id);
    let mut dst_gpus: Vec<&DeviceNode> = dst.gpus().collect();
    dst_gpus.sort_by_key(|n| n.node_id);
    let mut used = vec![false; dst_gpus.len()];
    let mut map = BTreeMap::new();
    for s in src_gpus {
        let j = (0..dst_gpus.len())
            .find(|&j| {
                let d = dst_gpus[j];
                !used[j]
                    && compared(&d.props) == compared(&s.props)
                    && cpu_of(dst, d) == cpu_of(src, s)
                    && d.props.hive_id == s.props.hive_id
            })
            .expect("a counterpart");
        used[j] = true;
        map.insert(s.gpu_id, dst_gpus[j].gpu_id);
    }
    map
}

fn map(src: &DeviceTopology, dst: &DeviceTopology, options: CheckOptions) -> MapResult {
    map_topologies(src, dst, &options).expect("an answer")
}

#[test]
fn each_fixture_maps_onto_itself_by_identity() {
    for &(name, gpus) in MULTI {
        let Some(topo) = load(name) else { return };
        assert_eq!(topo.gpus().count(), gpus, "{name}");
        let r = map(&topo, &topo, CheckOptions::all());
        assert!(r.compatible, "{name}: {:?}", r.reasons);
        assert!(r.gpu_map.iter().all(|(a, b)| a == b), "{name}");
        assert!(r.cpu_map.iter().all(|(a, b)| a == b), "{name}");
        assert_eq!(r.gpu_map.len(), gpus);
    }
}

#[test]
fn each_fixture_maps_onto_a_renumbered_copy() {
    for &(name, _) in MULTI {
        let Some(src) = load(name) else { return };
        for seed in [1, 0x9E37_79B9_7F4A_7C15] {
            let (dst, renumber) = renumbered(&src, seed);
            let r = map(&src, &dst, CheckOptions::all());
            assert!(r.compatible, "{name}: {:?}", r.reasons);
            // CPU nodes keep their ids, so placement is the identity.
            assert!(r.cpu_map.iter().all(|(a, b)| a == b), "{name}");
            assert_eq!(r.gpu_map, expected_by_node_order(&src, &dst), "{name}");
            // and each GPU lands on a GPU of the same CPU and hive
            for s in src.gpus() {
                let d = dst
                    .gpus()
                    .find(|d| d.gpu_id == r.gpu_map[&s.gpu_id])
                    .unwrap();
                assert_eq!(cpu_of(&src, s), cpu_of(&dst, d), "{name}");
                assert_eq!(s.props.hive_id, d.props.hive_id, "{name}");
            }
            assert_eq!(renumber.len(), src.nodes.len());
        }
    }
}

#[test]
fn renumbered_copy_without_numa_check_maps_too() {
    for &(name, _) in MULTI {
        let Some(src) = load(name) else { return };
        let (dst, _) = renumbered(&src, 7);
        let options = CheckOptions {
            numa: false,
            ..CheckOptions::all()
        };
        let r = map(&src, &dst, options);
        assert!(r.compatible, "{name}");
        assert!(r.cpu_map.is_empty());
    }
}

#[test]
fn one_weaker_gpu_is_refused_with_its_name_and_property() {
    for &(name, _) in MULTI {
        let Some(src) = load(name) else { return };
        let (mut dst, _) = renumbered(&src, 3);
        let weak = dst.gpus().map(|n| n.node_id).max().unwrap();
        let weak_node = dst.nodes.iter_mut().find(|n| n.node_id == weak).unwrap();
        weak_node.props.simd_count -= 4;
        let weak_gpu = weak_node.gpu_id;
        let r = map(&src, &dst, CheckOptions::none());
        assert!(!r.compatible, "{name}");
        let named = r
            .reasons
            .iter()
            .find(|r| r.check == "simd_count")
            .unwrap_or_else(|| panic!("{name}: {:?}", r.reasons));
        assert_eq!(named.local_gpu, Some(weak_gpu), "{name}");
        assert_eq!(named.checkpointed, named.local + 4, "{name}");
    }
}

#[test]
fn less_vram_is_refused_unless_its_check_is_off() {
    for &(name, _) in MULTI {
        let Some(src) = load(name) else { return };
        let (mut dst, _) = renumbered(&src, 5);
        let weak = dst.gpus().map(|n| n.node_id).min().unwrap();
        let weak_node = dst.nodes.iter_mut().find(|n| n.node_id == weak).unwrap();
        weak_node.props.vram_size /= 2;
        let weak_gpu = weak_node.gpu_id;
        let r = map(&src, &dst, CheckOptions::all());
        let named: Vec<_> = r.reasons.iter().map(|r| (r.check, r.local_gpu)).collect();
        assert!(
            named.contains(&("vram_size", Some(weak_gpu))),
            "{name}: {named:?}"
        );
        let r = map(
            &src,
            &dst,
            CheckOptions {
                vram_size: false,
                ..CheckOptions::all()
            },
        );
        assert!(r.compatible, "{name}: {:?}", r.reasons);
    }
}

#[test]
fn machines_with_other_gpu_counts_are_refused() {
    let loaded: Vec<_> = MULTI
        .iter()
        .filter_map(|&(n, c)| Some((load(n)?, c)))
        .collect();
    for (a, ca) in &loaded {
        for (b, cb) in &loaded {
            if ca == cb {
                continue;
            }
            let r = map(a, b, CheckOptions::all());
            assert_eq!(r.reasons.len(), 1);
            assert_eq!(r.reasons[0].check, rule::GPU_COUNT);
            assert_eq!(
                (r.reasons[0].checkpointed, r.reasons[0].local),
                (*ca as u64, *cb as u64)
            );
        }
    }
}

#[test]
fn a_container_seeing_one_hive_cannot_take_the_whole_machine() {
    let Some(host) = load("mi210-8gpu-xgmi-2hives") else {
        return;
    };
    // The container sees the CPUs and the hive at nodes 2-5 only.
    let mut container = host.clone();
    container.nodes.retain(|n| !(6..=9).contains(&n.node_id));
    let r = map(&host, &container, CheckOptions::all());
    assert_eq!(r.reasons[0].check, rule::GPU_COUNT);
    assert_eq!((r.reasons[0].checkpointed, r.reasons[0].local), (8, 4));
    // Checkpointed in that container, restored on the full machine: the
    // counts differ too (the C plugin requires equal counts).
    let r = map(&container, &host, CheckOptions::all());
    assert_eq!(r.reasons[0].check, rule::GPU_COUNT);
    // Checkpointed in that container, restored in a container that sees the
    // other hive: the hive partners and the CPU placement carry over.
    let mut other = host.clone();
    other.nodes.retain(|n| !(2..=5).contains(&n.node_id));
    let r = map(&container, &other, CheckOptions::none());
    assert!(r.compatible, "{:?}", r.reasons);
    let gpu_at = |node: u32| host.node(node).unwrap().gpu_id;
    let expected: BTreeMap<u32, u32> = (2..=5).map(|n| (gpu_at(n), gpu_at(n + 4))).collect();
    assert_eq!(r.gpu_map, expected);
}

/// XGMI hives of a topology: GPU node id -> hive number (connected
/// components of bi-directional GPU-to-GPU XGMI links; GPUs without one are
/// in no hive).
fn hive_numbers(topo: &DeviceTopology) -> HashMap<u32, usize> {
    let gpus: HashSet<u32> = topo.gpus().map(|n| n.node_id).collect();
    let xgmi: HashSet<(u32, u32)> = topo
        .nodes
        .iter()
        .flat_map(|n| {
            n.iolinks
                .iter()
                .filter(|l| l.link_type == 11)
                .map(move |l| (n.node_id, l.node_to))
        })
        .collect();
    let mut hive: HashMap<u32, usize> = HashMap::new();
    let mut next = 0;
    let mut ids: Vec<u32> = gpus.iter().copied().collect();
    ids.sort_unstable();
    for start in ids {
        if hive.contains_key(&start) {
            continue;
        }
        let mut stack = vec![start];
        let mut members = vec![start];
        let mut seen = HashSet::from([start]);
        while let Some(a) = stack.pop() {
            for &(from, b) in &xgmi {
                if from == a && gpus.contains(&b) && xgmi.contains(&(b, a)) && seen.insert(b) {
                    stack.push(b);
                    members.push(b);
                }
            }
        }
        if members.len() > 1 {
            for m in members {
                hive.insert(m, next);
            }
            next += 1;
        }
    }
    hive
}

/// Checks a mapping independently of the search: a bijection between GPUs,
/// every pair passing the property checks, the members of each checkpointed
/// hive landing in one local hive, and every GPU-to-CPU link finding a link
/// of the same type to the mapped CPU.
fn assert_valid_mapping(
    what: &str,
    (s, d): (&DeviceTopology, &DeviceTopology),
    (src_hives, dst_hives): (&HashMap<u32, usize>, &HashMap<u32, usize>),
    gpu_map: &BTreeMap<u32, u32>,
    cpu_map: &BTreeMap<u32, u32>,
) {
    assert_eq!(gpu_map.len(), s.gpus().count(), "{what}");
    let mut images: Vec<u32> = gpu_map.values().copied().collect();
    images.sort_unstable();
    images.dedup();
    assert_eq!(images.len(), gpu_map.len(), "{what}: not injective");
    let by_gpu_id: HashMap<u32, &DeviceNode> = d.gpus().map(|n| (n.gpu_id, n)).collect();
    let cpus: HashSet<u32> = s.cpus().map(|n| n.node_id).collect();
    // checkpointed hive number -> local hive number
    let mut hive_home: HashMap<usize, Option<usize>> = HashMap::new();
    for gpu in s.gpus() {
        let image = by_gpu_id[&gpu_map[&gpu.gpu_id]];
        let mismatches =
            amdgpu_topology::checks::device_mismatches(gpu, image, &CheckOptions::all());
        assert!(mismatches.is_empty(), "{what}: {mismatches:?}");
        if let Some(&h) = src_hives.get(&gpu.node_id) {
            let home = dst_hives.get(&image.node_id).copied();
            assert!(home.is_some(), "{what}: hive member left its hive");
            assert_eq!(
                *hive_home.entry(h).or_insert(home),
                home,
                "{what}: hive split"
            );
        }
    }
    for gpu in s.gpus() {
        let image = by_gpu_id[&gpu_map[&gpu.gpu_id]];
        for link in gpu.iolinks.iter().filter(|l| cpus.contains(&l.node_to)) {
            let cpu = cpu_map[&link.node_to];
            assert!(
                image
                    .iolinks
                    .iter()
                    .any(|l| l.node_to == cpu && l.link_type == link.link_type),
                "{what}: GPU {} left CPU {}",
                gpu.gpu_id,
                link.node_to
            );
        }
    }
}

#[test]
fn builtins_and_fixtures_map_onto_their_renumbered_copies() {
    let mut machines: Vec<(String, System)> = builtin_names()
        .iter()
        .map(|name| (format!("builtin:{name}"), builtin(name).unwrap()))
        .collect();
    for &(name, _) in MULTI {
        if let Some(system) = load_system(name) {
            machines.push((name.to_owned(), system));
        }
    }
    for (name, system) in &machines {
        let src = DeviceTopology::from_system(system).unwrap();
        let src_hives = hive_numbers(&src);
        for seed in [1, 2] {
            let (copy, moved) = renumbered_with_map(system, seed);
            let what = format!("{name} seed {seed}");
            let dst = DeviceTopology::from_system(&copy).unwrap();
            let dst_hives = hive_numbers(&dst);
            let r = map(&src, &dst, CheckOptions::all());
            assert!(r.compatible, "{what}: {:?}", r.reasons);
            assert!(r.cpu_map.iter().all(|(a, b)| a == b), "{what}");
            let sides = (&src, &dst);
            let hives = (&src_hives, &dst_hives);
            assert_valid_mapping(&what, sides, hives, &r.gpu_map, &r.cpu_map);

            // The renumbering's own ground truth passes the same validation
            // (so the validator accepts what it should).
            let truth: BTreeMap<u32, u32> = moved
                .iter()
                .map(|&(old, new)| {
                    let id = |sys: &System, node: u32| sys.node(node).unwrap().gpu_id.unwrap();
                    (id(system, old), id(&copy, new))
                })
                .collect();
            assert_valid_mapping(&what, sides, hives, &truth, &r.cpu_map);

            // One GPU weaker: refused, and the reason names it.
            let mut weaker = dst.clone();
            let victim = weaker.nodes.iter_mut().rfind(|n| n.is_gpu()).unwrap();
            victim.props.array_count += 1;
            let victim = victim.gpu_id;
            let r = map(&src, &weaker, CheckOptions::all());
            assert!(
                r.reasons
                    .iter()
                    .any(|r| r.check == "array_count" && r.local_gpu == Some(victim)),
                "{what}: {:?}",
                r.reasons
            );
        }
    }
}

#[test]
#[should_panic(expected = "hive split")]
fn the_validator_rejects_a_split_hive() {
    let system = builtin("mi210-8gpu-2hive").unwrap();
    let topo = DeviceTopology::from_system(&system).unwrap();
    let hives = hive_numbers(&topo);
    let ids: Vec<u32> = topo.gpus().map(|n| n.gpu_id).collect();
    let mut identity: BTreeMap<u32, u32> = ids.iter().map(|&id| (id, id)).collect();
    let cpu_map: BTreeMap<u32, u32> = topo.cpus().map(|n| (n.node_id, n.node_id)).collect();
    assert_valid_mapping(
        "identity",
        (&topo, &topo),
        (&hives, &hives),
        &identity,
        &cpu_map,
    );
    // GPUs 0 and 4 sit in different hives: swapping them splits both
    identity.insert(ids[0], ids[4]);
    identity.insert(ids[4], ids[0]);
    assert_valid_mapping(
        "swapped",
        (&topo, &topo),
        (&hives, &hives),
        &identity,
        &cpu_map,
    );
}

/// The built-in `mi210-8gpu-2hive` imitates the real MI210 capture: every
/// property a restore compares agrees (CU layout, firmware, capability,
/// cache count, SDMA engines, ...), and a checkpoint moves from either
/// machine to the other with every check on.
#[test]
fn the_builtin_mi210_machine_agrees_with_the_real_capture() {
    let Some(real) = load_system("mi210-8gpu-xgmi-2hives") else {
        return;
    };
    let imitation = builtin("mi210-8gpu-2hive").unwrap();
    let real_gpu = real.gpus().next().unwrap();
    let mut differing = Vec::new();
    for gpu in imitation.gpus() {
        for key in [
            "simd_count",
            "caches_count",
            "io_links_count",
            "max_waves_per_simd",
            "lds_size_in_kb",
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
            "num_sdma_engines",
            "num_sdma_xgmi_engines",
            "num_sdma_queues_per_engine",
            "num_cp_queues",
            "max_engine_clk_fcompute",
            "fw_version",
            "capability",
            "debug_prop",
            "sdma_fw_version",
            "num_xcc",
        ] {
            if gpu.prop(key) != real_gpu.prop(key) {
                differing.push(format!(
                    "node {} {key}: built-in {} vs capture {}",
                    gpu.id,
                    gpu.prop(key),
                    real_gpu.prop(key)
                ));
            }
        }
    }
    assert!(differing.is_empty(), "{}", differing.join("\n"));

    let real = DeviceTopology::from_system(&real).unwrap();
    let imitation = DeviceTopology::from_system(&imitation).unwrap();
    for (from, to, what) in [
        (&real, &imitation, "capture -> built-in"),
        (&imitation, &real, "built-in -> capture"),
    ] {
        let r = map(from, to, CheckOptions::all());
        assert!(r.compatible, "{what}: {:?}", r.reasons);
        assert_eq!(r.gpu_map.len(), 8, "{what}");
    }
}
