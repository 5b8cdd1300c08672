//! The mapping against brute force: on small random machines (and random
//! variations of them), `map_topologies` finds a mapping exactly when one
//! exists among all GPU permutations and CPU placements, and every mapping
//! it returns obeys the rules. The rules are re-implemented here from
//! upstream-plugin.md §7.4–§7.6, independently of the search.

use std::collections::{BTreeMap, BTreeSet};

use amdgpu_topology::checks::device_mismatches;
use amdgpu_topology::devices::{DevIoLink, DeviceNode, DeviceProps, DeviceTopology};
use amdgpu_topology::mapping::map_topologies;
use amdgpu_topology::options::CheckOptions;
use proptest::prelude::*;

const PCIE: u32 = 2;
const XGMI: u32 = 11;

#[derive(Debug, Clone)]
struct GpuSpec {
    /// 0 or 1: two GPU models differing in `simd_count`.
    model: u8,
    /// 0 or 1: 32 or 64 GiB of VRAM (the `<=` rule).
    vram: u8,
    cpu: u32,
    /// 0: no hive; 1, 2: hive label.
    hive: u8,
    /// The GPU's link to its CPU is XGMI instead of PCIe.
    xgmi_cpu: bool,
    /// The CPU has no link back to the GPU.
    one_way: bool,
    /// An extra link to a node that is not there (masked): counted in
    /// `io_links_count`, not valid.
    dangling: bool,
}

#[derive(Debug, Clone)]
struct Spec {
    cpus: u32,
    gpus: Vec<GpuSpec>,
}

fn gpu_spec(cpus: u32) -> impl Strategy<Value = GpuSpec> {
    (
        0u8..2,
        0u8..2,
        0..cpus,
        0u8..3,
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(model, vram, cpu, hive, xgmi_cpu, one_way, dangling)| GpuSpec {
                model,
                vram,
                cpu,
                hive,
                xgmi_cpu,
                one_way,
                dangling,
            },
        )
}

fn spec() -> impl Strategy<Value = Spec> {
    (1u32..=3).prop_flat_map(|cpus| {
        prop::collection::vec(gpu_spec(cpus), 1..=5).prop_map(move |gpus| Spec { cpus, gpus })
    })
}

/// A variation of `spec`: a few GPUs changed in one field each.
fn variation(spec: Spec) -> impl Strategy<Value = Spec> {
    let n = spec.gpus.len();
    let cpus = spec.cpus;
    prop::collection::vec((0..n, 0u8..7, 0u32..3), 0..=2).prop_map(move |changes| {
        let mut s = spec.clone();
        for (i, field, value) in changes {
            let g = &mut s.gpus[i];
            match field {
                0 => g.model ^= 1,
                1 => g.vram ^= 1,
                2 => g.cpu = value % cpus,
                3 => g.hive = (value % 3) as u8,
                4 => g.xgmi_cpu ^= true,
                5 => g.one_way ^= true,
                _ => g.dangling ^= true,
            }
        }
        s
    })
}

fn props(g: &GpuSpec) -> DeviceProps {
    DeviceProps {
        simd_count: if g.model == 0 { 416 } else { 304 },
        mem_banks_count: 1,
        vendor_id: 4098,
        device_id: 29711,
        vram_size: if g.vram == 0 { 32 << 30 } else { 64 << 30 },
        ..DeviceProps::default()
    }
}

/// Builds the machine with the GPUs placed at node ids in `order` (a
/// permutation of GPU positions) and gpu_ids `base + position`.
fn build(spec: &Spec, order: &[usize], base: u32) -> DeviceTopology {
    let node_of = |i: usize| spec.cpus + order[i] as u32;
    let mut nodes: Vec<DeviceNode> = (0..spec.cpus)
        .map(|c| DeviceNode {
            node_id: c,
            gpu_id: 0,
            props: DeviceProps {
                cpu_cores_count: 8,
                ..DeviceProps::default()
            },
            iolinks: Vec::new(),
        })
        .collect();
    for (i, g) in spec.gpus.iter().enumerate() {
        let link_type = if g.xgmi_cpu { XGMI } else { PCIE };
        let mut iolinks = vec![DevIoLink {
            link_type,
            node_to: g.cpu,
        }];
        if !g.one_way {
            nodes[g.cpu as usize].iolinks.push(DevIoLink {
                link_type,
                node_to: node_of(i),
            });
        }
        for (k, other) in spec.gpus.iter().enumerate() {
            if k != i && g.hive != 0 && other.hive == g.hive {
                iolinks.push(DevIoLink {
                    link_type: XGMI,
                    node_to: node_of(k),
                });
            }
        }
        if g.dangling {
            iolinks.push(DevIoLink {
                link_type: PCIE,
                node_to: 99,
            });
        }
        let mut props = props(g);
        props.io_links_count = iolinks.len() as u32;
        nodes.push(DeviceNode {
            node_id: node_of(i),
            gpu_id: base + i as u32,
            props,
            iolinks,
        });
    }
    DeviceTopology { nodes }
}

/// The rules, spelled out over one topology.
struct Facts {
    gpus: Vec<DeviceNode>,
    /// Per GPU: valid links.
    valid: Vec<usize>,
    /// Per GPU: (CPU node, type, bi-directional) for each link to a CPU.
    cpu_links: Vec<Vec<(u32, u32, bool)>>,
    /// Per GPU: hive number, if in one.
    hive: Vec<Option<usize>>,
    hive_count: usize,
}

impl Facts {
    fn new(t: &DeviceTopology) -> Self {
        let gpus: Vec<DeviceNode> = t.gpus().cloned().collect();
        let exists = |id: u32| t.node(id).is_some();
        let has_link = |from: u32, to: u32, ty: u32| {
            t.node(from).is_some_and(|n| {
                n.iolinks
                    .iter()
                    .any(|l| l.node_to == to && l.link_type == ty)
            })
        };
        let valid = gpus
            .iter()
            .map(|g| g.iolinks.iter().filter(|l| exists(l.node_to)).count())
            .collect();
        let cpu_links = gpus
            .iter()
            .map(|g| {
                g.iolinks
                    .iter()
                    .filter(|l| t.node(l.node_to).is_some_and(|n| !n.is_gpu()))
                    .map(|l| {
                        (
                            l.node_to,
                            l.link_type,
                            has_link(l.node_to, g.node_id, l.link_type),
                        )
                    })
                    .collect()
            })
            .collect();
        // hives: components of bi-directional XGMI links between GPUs
        let n = gpus.len();
        let mut hive = vec![None; n];
        let mut hive_count = 0;
        for start in 0..n {
            if hive[start].is_some() {
                continue;
            }
            let mut members = vec![start];
            let mut k = 0;
            while k < members.len() {
                let a = &gpus[members[k]];
                for (b, other) in gpus.iter().enumerate() {
                    if !members.contains(&b)
                        && has_link(a.node_id, other.node_id, XGMI)
                        && has_link(other.node_id, a.node_id, XGMI)
                    {
                        members.push(b);
                    }
                }
                k += 1;
            }
            if members.len() > 1 {
                for m in members {
                    hive[m] = Some(hive_count);
                }
                hive_count += 1;
            }
        }
        Self {
            gpus,
            valid,
            cpu_links,
            hive,
            hive_count,
        }
    }
}

/// Whether assigning src GPU `i` to dest GPU `perm[i]` (and, with the NUMA
/// check, src CPU `c` to `sigma[c]`) obeys every rule.
fn obeys(
    s: &Facts,
    d: &Facts,
    perm: &[usize],
    sigma: Option<&BTreeMap<u32, u32>>,
    options: &CheckOptions,
) -> bool {
    let stands_in = |(_, st, sb): (u32, u32, bool), (_, dt, db): (u32, u32, bool)| {
        !(st == XGMI && dt == PCIE) && (!sb || db)
    };
    for (i, &j) in perm.iter().enumerate() {
        if !device_mismatches(&s.gpus[i], &d.gpus[j], options).is_empty() || s.valid[i] > d.valid[j]
        {
            return false;
        }
        for &sl in &s.cpu_links[i] {
            let ok = match sigma {
                None => d.cpu_links[j].iter().any(|&dl| stands_in(sl, dl)),
                Some(sigma) => d.cpu_links[j]
                    .iter()
                    .any(|&dl| dl.0 == sigma[&sl.0] && dl.1 == sl.1 && stands_in(sl, dl)),
            };
            if !ok {
                return false;
            }
        }
    }
    // each src hive inside one dest hive, distinct hives apart
    let mut home: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, &j) in perm.iter().enumerate() {
        if let Some(h) = s.hive[i] {
            let Some(k) = d.hive[j] else { return false };
            if *home.entry(h).or_insert(k) != k {
                return false;
            }
        }
    }
    let homes: BTreeSet<usize> = home.values().copied().collect();
    homes.len() == home.len()
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for pos in 0..=p.len() {
            let mut q = p.clone();
            q.insert(pos, n - 1);
            out.push(q);
        }
    }
    out
}

/// Injective maps from `from` into `to`.
fn injections(from: &[u32], to: &[u32]) -> Vec<BTreeMap<u32, u32>> {
    let Some((&first, rest)) = from.split_first() else {
        return vec![BTreeMap::new()];
    };
    let mut out = Vec::new();
    for &y in to {
        for mut m in injections(rest, to) {
            if !m.values().any(|&v| v == y) {
                m.insert(first, y);
                out.push(m);
            }
        }
    }
    out
}

/// Whether any assignment obeys the rules (the C plugin's question).
fn exists(src: &DeviceTopology, dst: &DeviceTopology, options: &CheckOptions) -> bool {
    let (s, d) = (Facts::new(src), Facts::new(dst));
    if s.gpus.len() != d.gpus.len() || s.hive_count > d.hive_count {
        return false;
    }
    let placements: Vec<Option<BTreeMap<u32, u32>>> = if options.numa {
        let linked: BTreeSet<u32> = s.cpu_links.iter().flatten().map(|l| l.0).collect();
        let linked: Vec<u32> = linked.into_iter().collect();
        let targets: Vec<u32> = dst.cpus().map(|n| n.node_id).collect();
        injections(&linked, &targets)
            .into_iter()
            .map(Some)
            .collect()
    } else {
        vec![None]
    };
    permutations(s.gpus.len()).iter().any(|perm| {
        placements
            .iter()
            .any(|sigma| obeys(&s, &d, perm, sigma.as_ref(), options))
    })
}

fn check(src: &DeviceTopology, dst: &DeviceTopology, options: &CheckOptions) {
    let result = map_topologies(src, dst, options).expect("an answer");
    let expected = exists(src, dst, options);
    assert_eq!(result.compatible, expected, "reasons: {:?}", result.reasons);
    if result.compatible {
        let (s, d) = (Facts::new(src), Facts::new(dst));
        let perm: Vec<usize> = s
            .gpus
            .iter()
            .map(|g| {
                let image = result.gpu_map[&g.gpu_id];
                d.gpus.iter().position(|h| h.gpu_id == image).unwrap()
            })
            .collect();
        let sigma = options.numa.then_some(&result.cpu_map);
        assert!(obeys(&s, &d, &perm, sigma, options), "{result:?}");
    } else {
        assert!(!result.reasons.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_renumbered_copy_always_maps(spec in spec(), seed in any::<u64>(), numa in any::<bool>()) {
        let mut order: Vec<usize> = (0..spec.gpus.len()).collect();
        // a seeded shuffle of the node order
        let mut state = seed | 1;
        for i in (1..order.len()).rev() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, (state >> 33) as usize % (i + 1));
        }
        let identity: Vec<usize> = (0..spec.gpus.len()).collect();
        let src = build(&spec, &identity, 100);
        let dst = build(&spec, &order, 200);
        let options = CheckOptions { numa, ..CheckOptions::all() };
        let result = map_topologies(&src, &dst, &options).unwrap();
        prop_assert!(result.compatible, "{:?}", result.reasons);
        check(&src, &dst, &options);
    }

    #[test]
    fn the_answer_matches_brute_force(
        (a, b) in spec().prop_flat_map(|s| (Just(s.clone()), variation(s))),
        numa in any::<bool>(),
        reversed in any::<bool>(),
    ) {
        let identity: Vec<usize> = (0..a.gpus.len()).collect();
        let mut order = identity.clone();
        if reversed {
            order.reverse();
        }
        let src = build(&a, &identity, 100);
        let dst = build(&b, &order, 200);
        let options = CheckOptions { numa, ..CheckOptions::all() };
        check(&src, &dst, &options);
    }
}
