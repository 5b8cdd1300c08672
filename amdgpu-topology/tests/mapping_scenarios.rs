//! GPU mapping scenarios on made-up topologies: each asserts the concrete
//! mapping (or the concrete reasons), not only the verdict.

use std::collections::BTreeMap;

use amdgpu_topology::checks::{rule, Reason};
use amdgpu_topology::devices::{DevIoLink, DeviceNode, DeviceProps, DeviceTopology};
use amdgpu_topology::mapping::{map_topologies, MapError, MapResult};
use amdgpu_topology::options::CheckOptions;

const PCIE: u32 = 2;
const XGMI: u32 = 11;

fn model_a() -> DeviceProps {
    DeviceProps {
        simd_count: 416,
        mem_banks_count: 1,
        caches_count: 100,
        max_waves_per_simd: 8,
        lds_size_in_kb: 64,
        num_gws: 64,
        wave_front_size: 64,
        array_count: 8,
        simd_arrays_per_engine: 1,
        cu_per_simd_array: 13,
        simd_per_cu: 4,
        max_slots_scratch_cu: 32,
        vendor_id: 4098,
        device_id: 29711,
        num_sdma_engines: 2,
        num_sdma_xgmi_engines: 3,
        num_sdma_queues_per_engine: 8,
        num_cp_queues: 24,
        fw_version: 78,
        capability: 0x2800_0000,
        sdma_fw_version: 8,
        vram_size: 64 << 30,
        ..DeviceProps::default()
    }
}

fn model_b() -> DeviceProps {
    DeviceProps {
        simd_count: 304,
        device_id: 29857,
        vram_size: 192 << 30,
        ..model_a()
    }
}

/// Builds a topology; `finish` sets each GPU's `io_links_count` to its link
/// count, as sysfs would.
#[derive(Default)]
struct Topo {
    nodes: Vec<DeviceNode>,
}

impl Topo {
    fn cpus(count: u32) -> Self {
        let mut topo = Self::default();
        for id in 0..count {
            topo.nodes.push(DeviceNode {
                node_id: id,
                gpu_id: 0,
                props: DeviceProps {
                    cpu_cores_count: 32,
                    ..DeviceProps::default()
                },
                iolinks: Vec::new(),
            });
        }
        topo
    }

    /// A GPU at `node` with `gpu_id`, linked both ways to `cpu` over PCIe.
    fn gpu(mut self, node: u32, gpu_id: u32, props: DeviceProps, cpu: u32) -> Self {
        self.nodes.push(DeviceNode {
            node_id: node,
            gpu_id,
            props,
            iolinks: Vec::new(),
        });
        self.link(node, cpu, PCIE).link(cpu, node, PCIE)
    }

    fn link(mut self, from: u32, to: u32, link_type: u32) -> Self {
        let node = self.nodes.iter_mut().find(|n| n.node_id == from).unwrap();
        node.iolinks.push(DevIoLink {
            link_type,
            node_to: to,
        });
        self
    }

    /// A fully meshed XGMI hive over `nodes`.
    fn hive(mut self, nodes: &[u32]) -> Self {
        for &a in nodes {
            for &b in nodes {
                if a != b {
                    self = self.link(a, b, XGMI);
                }
            }
        }
        self
    }

    fn without(mut self, node: u32) -> Self {
        self.nodes.retain(|n| n.node_id != node);
        self
    }

    fn finish(mut self) -> DeviceTopology {
        for node in &mut self.nodes {
            if node.gpu_id != 0 && node.props.io_links_count == 0 {
                node.props.io_links_count = node.iolinks.len() as u32;
            }
        }
        DeviceTopology { nodes: self.nodes }
    }
}

fn map(src: &DeviceTopology, dst: &DeviceTopology) -> MapResult {
    map_with(src, dst, CheckOptions::all())
}

fn map_with(src: &DeviceTopology, dst: &DeviceTopology, options: CheckOptions) -> MapResult {
    let result = map_topologies(src, dst, &options).expect("an answer");
    if result.compatible {
        assert!(result.reasons.is_empty());
        assert_valid(src, dst, &options, &result);
    } else {
        assert!(!result.reasons.is_empty());
        assert!(result.gpu_map.is_empty());
    }
    result
}

fn pairs(list: &[(u32, u32)]) -> BTreeMap<u32, u32> {
    list.iter().copied().collect()
}

/// Checks a mapping against the rules independently of the search: a
/// bijection of GPUs, every pair compatible, hive partners stay partners,
/// CPU links land on the mapped CPU.
fn assert_valid(src: &DeviceTopology, dst: &DeviceTopology, options: &CheckOptions, r: &MapResult) {
    let src_gpus: Vec<_> = src.gpus().collect();
    assert_eq!(r.gpu_map.len(), src_gpus.len());
    let mut images: Vec<_> = r.gpu_map.values().collect();
    images.sort();
    images.dedup();
    assert_eq!(images.len(), src_gpus.len(), "not injective");
    let image = |gpu_id: u32| {
        let local = r.gpu_map[&gpu_id];
        dst.gpus().find(|n| n.gpu_id == local).expect("local gpu")
    };
    for s in &src_gpus {
        let d = image(s.gpu_id);
        assert!(
            amdgpu_topology::checks::device_mismatches(s, d, options).is_empty(),
            "{} -> {}",
            s.gpu_id,
            d.gpu_id
        );
        for link in &s.iolinks {
            let Some(target) = src.node(link.node_to) else {
                continue;
            };
            if target.is_gpu() && link.link_type == XGMI {
                // hive partners stay XGMI-linked (hives here are full meshes)
                let partner = image(target.gpu_id);
                assert!(
                    d.iolinks
                        .iter()
                        .any(|l| l.link_type == XGMI && l.node_to == partner.node_id),
                    "hive split: {} and {}",
                    s.gpu_id,
                    target.gpu_id
                );
            }
            if !target.is_gpu() && options.numa {
                let cpu = r.cpu_map[&target.node_id];
                assert!(
                    d.iolinks
                        .iter()
                        .any(|l| l.node_to == cpu && l.link_type == link.link_type),
                    "GPU {} left CPU {}",
                    s.gpu_id,
                    target.node_id
                );
            }
        }
    }
}

/// Two CPUs; GPUs 2..=5 on CPU 0 and 6..=9 on CPU 1, gpu_ids `base + node`.
fn two_sockets(base: u32, first: DeviceProps, second: DeviceProps) -> Topo {
    let mut topo = Topo::cpus(2);
    for node in 2..=5 {
        topo = topo.gpu(node, base + node, first, 0);
    }
    for node in 6..=9 {
        topo = topo.gpu(node, base + node, second, 1);
    }
    topo
}

#[test]
fn equal_topologies_map_by_identity() {
    let topo = two_sockets(1000, model_a(), model_a())
        .hive(&[2, 3, 4, 5])
        .hive(&[6, 7, 8, 9])
        .finish();
    let r = map(&topo, &topo);
    assert!(r.compatible);
    assert_eq!(
        r.gpu_map,
        (2..=9)
            .map(|n| (1000 + n, 1000 + n))
            .collect::<BTreeMap<_, _>>()
    );
    assert_eq!(r.cpu_map, pairs(&[(0, 0), (1, 1)]));
}

#[test]
fn hives_swapped_between_device_types() {
    // checkpointed: model A hive at nodes 2-5 on CPU 0, model B at 6-9 on CPU 1
    let src = two_sockets(1000, model_a(), model_b())
        .hive(&[2, 3, 4, 5])
        .hive(&[6, 7, 8, 9])
        .finish();
    // local: model B at 2-5 on CPU 0, model A at 6-9 on CPU 1
    let dst = two_sockets(2000, model_b(), model_a())
        .hive(&[2, 3, 4, 5])
        .hive(&[6, 7, 8, 9])
        .finish();
    let r = map(&src, &dst);
    assert!(r.compatible, "{:?}", r.reasons);
    let expected: BTreeMap<u32, u32> = (0..4)
        .flat_map(|k| [(1002 + k, 2006 + k), (1006 + k, 2002 + k)])
        .collect();
    assert_eq!(r.gpu_map, expected);
    assert_eq!(r.cpu_map, pairs(&[(0, 1), (1, 0)]));
}

#[test]
fn hive_of_one_model_cannot_land_on_a_hive_of_mixed_models() {
    let src = two_sockets(1000, model_a(), model_b())
        .hive(&[2, 3, 4, 5])
        .hive(&[6, 7, 8, 9])
        .finish();
    // local hives: {2,3,6,7} and {4,5,8,9}: each mixes A and B
    let dst = two_sockets(2000, model_a(), model_b())
        .hive(&[2, 3, 6, 7])
        .hive(&[4, 5, 8, 9])
        .finish();
    let r = map_with(&src, &dst, CheckOptions::none());
    assert!(!r.compatible);
    assert_eq!(
        r.reasons,
        [
            Reason {
                gpu: Some(1002),
                check: rule::XGMI_HIVE,
                checkpointed: 4,
                local: 2,
                local_gpu: None,
            },
            Reason {
                gpu: Some(1006),
                check: rule::XGMI_HIVE,
                checkpointed: 4,
                local: 2,
                local_gpu: None,
            }
        ]
    );
}

#[test]
fn more_hives_than_local_is_refused() {
    let src = two_sockets(1000, model_a(), model_a())
        .hive(&[2, 3, 4, 5])
        .hive(&[6, 7, 8, 9])
        .finish();
    let dst = two_sockets(1000, model_a(), model_a())
        .hive(&[2, 3, 4, 5, 6, 7, 8, 9])
        .finish();
    let r = map_with(&src, &dst, CheckOptions::none());
    assert_eq!(
        r.reasons[0],
        Reason {
            gpu: None,
            check: rule::XGMI_HIVE_COUNT,
            checkpointed: 2,
            local: 1,
            local_gpu: None,
        }
    );
    // And what follows from the hives' sizes: each GPU of a 4-GPU hive has
    // other io links than any of an 8-GPU hive.
    assert_eq!(r.reasons.len(), 9, "{:?}", r.reasons);
    assert!(r.reasons[1..].iter().all(|r| r.check == "io_links_count"));
}

#[test]
fn too_few_hives_and_other_gpus_give_every_reason() {
    let src = two_sockets(1000, model_a(), model_a())
        .hive(&[2, 3, 4, 5])
        .hive(&[6, 7, 8, 9])
        .finish();
    let dst = two_sockets(1000, model_b(), model_b())
        .hive(&[2, 3, 4, 5, 6, 7, 8, 9])
        .finish();
    let r = map_with(&src, &dst, CheckOptions::default());
    let checks: Vec<&str> = r.reasons.iter().map(|r| r.check).collect();
    assert_eq!(checks[0], rule::XGMI_HIVE_COUNT, "{:?}", r.reasons);
    for other in ["simd_count", "device_id"] {
        assert!(checks.contains(&other), "{other} missing: {:?}", r.reasons);
    }
}

#[test]
fn renumbered_copy_pairs_by_node_order_within_each_group() {
    let src = two_sockets(1000, model_a(), model_a()).finish();
    // Same machine, GPU nodes enumerated in another order with other gpu_ids:
    // CPU 1's GPUs come first.
    let dst = {
        let mut topo = Topo::cpus(2);
        for node in 2..=5 {
            topo = topo.gpu(node, 3000 + node, model_a(), 1);
        }
        for node in 6..=9 {
            topo = topo.gpu(node, 3000 + node, model_a(), 0);
        }
        topo.finish()
    };
    let r = map(&src, &dst);
    assert!(r.compatible);
    // CPU nodes keep their ids; GPUs follow their CPU, in node order.
    assert_eq!(r.cpu_map, pairs(&[(0, 0), (1, 1)]));
    let expected: BTreeMap<u32, u32> = (0..4)
        .flat_map(|k| [(1002 + k, 3006 + k), (1006 + k, 3002 + k)])
        .collect();
    assert_eq!(r.gpu_map, expected);
}

#[test]
fn numa_placement_keeps_gpus_of_one_cpu_together() {
    // checkpointed: GPUs 2,3 on CPU 0 and 4,5 on CPU 1
    let src = Topo::cpus(2)
        .gpu(2, 102, model_a(), 0)
        .gpu(3, 103, model_a(), 0)
        .gpu(4, 104, model_a(), 1)
        .gpu(5, 105, model_a(), 1)
        .finish();
    // local: three GPUs on CPU 0, one on CPU 1
    let dst = Topo::cpus(2)
        .gpu(2, 202, model_a(), 0)
        .gpu(3, 203, model_a(), 0)
        .gpu(4, 204, model_a(), 0)
        .gpu(5, 205, model_a(), 1)
        .finish();
    let r = map(&src, &dst);
    assert_eq!(
        r.reasons,
        [Reason {
            gpu: None,
            check: rule::NUMA,
            checkpointed: 2,
            local: 1,
            local_gpu: None,
        }]
    );
    // With the NUMA check off, any CPU will do.
    let mut options = CheckOptions::all();
    options.numa = false;
    let r = map_with(&src, &dst, options);
    assert_eq!(
        r.gpu_map,
        pairs(&[(102, 202), (103, 203), (104, 204), (105, 205)])
    );
    assert!(r.cpu_map.is_empty());

    // Two GPUs per CPU, sockets swapped: accepted with the CPUs swapped.
    let dst = Topo::cpus(2)
        .gpu(2, 202, model_a(), 1)
        .gpu(3, 203, model_a(), 0)
        .gpu(4, 204, model_a(), 1)
        .gpu(5, 205, model_a(), 0)
        .finish();
    let r = map(&src, &dst);
    assert_eq!(r.cpu_map, pairs(&[(0, 0), (1, 1)]));
    assert_eq!(
        r.gpu_map,
        pairs(&[(102, 203), (103, 205), (104, 202), (105, 204)])
    );
}

#[test]
fn numa_refusal_names_the_crowded_cpu() {
    // four GPUs on CPU 0 checkpointed; locally at most two per CPU
    let src = Topo::cpus(2)
        .gpu(2, 102, model_a(), 0)
        .gpu(3, 103, model_a(), 0)
        .gpu(4, 104, model_a(), 0)
        .gpu(5, 105, model_a(), 0)
        .finish();
    let dst = Topo::cpus(2)
        .gpu(2, 202, model_a(), 0)
        .gpu(3, 203, model_a(), 0)
        .gpu(4, 204, model_a(), 1)
        .gpu(5, 205, model_a(), 1)
        .finish();
    let r = map(&src, &dst);
    assert_eq!(
        r.reasons,
        [Reason {
            gpu: Some(102),
            check: rule::NUMA,
            checkpointed: 4,
            local: 2,
            local_gpu: None,
        }]
    );
}

#[test]
fn asymmetric_cpu_links() {
    let pcie_both_ways = Topo::cpus(1).gpu(1, 11, model_a(), 0).finish();
    let mut xgmi_both_ways = Topo::cpus(1).gpu(1, 21, model_a(), 0).finish();
    for node in &mut xgmi_both_ways.nodes {
        node.iolinks[0].link_type = XGMI;
    }
    // GPU-to-CPU link without the CPU's link back: uni-directional
    let pcie_one_way = Topo::cpus(1).gpu(1, 31, model_a(), 0).finish();
    let mut pcie_one_way = pcie_one_way;
    pcie_one_way.nodes[0].iolinks.clear();

    let numa_off = CheckOptions {
        numa: false,
        ..CheckOptions::all()
    };
    // XGMI may stand in for PCIe ...
    let r = map_with(&pcie_both_ways, &xgmi_both_ways, numa_off);
    assert_eq!(r.gpu_map, pairs(&[(11, 21)]));
    // ... not the reverse.
    let r = map_with(&xgmi_both_ways, &pcie_both_ways, numa_off);
    assert_eq!(
        r.reasons,
        [Reason {
            gpu: Some(21),
            check: rule::CPU_LINK,
            checkpointed: XGMI.into(),
            local: PCIE.into(),
            local_gpu: Some(11),
        }]
    );
    // A bi-directional link may stand in for a uni-directional one ...
    let r = map(&pcie_one_way, &pcie_both_ways);
    assert_eq!(r.gpu_map, pairs(&[(31, 11)]));
    // ... not the reverse, NUMA check or not.
    for numa in [true, false] {
        let options = CheckOptions {
            numa,
            ..CheckOptions::all()
        };
        let r = map_with(&pcie_both_ways, &pcie_one_way, options);
        assert_eq!(r.reasons[0].check, rule::CPU_LINK);
        assert_eq!(r.reasons[0].gpu, Some(11));
    }
}

#[test]
fn with_numa_check_a_pcie_link_needs_a_pcie_link_on_the_mapped_cpu() {
    let src = Topo::cpus(1).gpu(1, 11, model_a(), 0).finish();
    let mut dst = Topo::cpus(1).gpu(1, 21, model_a(), 0).finish();
    for node in &mut dst.nodes {
        node.iolinks[0].link_type = XGMI;
    }
    // NUMA on: same type required on the mapped CPU
    let r = map(&src, &dst);
    assert_eq!(r.reasons[0].check, rule::NUMA);
    // NUMA off: iolink_match only (XGMI replaces PCIe)
    let r = map_with(
        &src,
        &dst,
        CheckOptions {
            numa: false,
            ..CheckOptions::all()
        },
    );
    assert_eq!(r.gpu_map, pairs(&[(11, 21)]));
}

fn weaker(props: DeviceProps, change: impl Fn(&mut DeviceProps)) -> DeviceProps {
    let mut p = props;
    change(&mut p);
    p
}

/// Eight model A GPUs in one hive over two CPUs; `local` GPU node 7 gets
/// `odd` properties.
fn eight(base: u32, odd: DeviceProps) -> DeviceTopology {
    let mut topo = Topo::cpus(2);
    for node in 2..=9 {
        let props = if node == 7 { odd } else { model_a() };
        topo = topo.gpu(node, base + node, props, if node < 6 { 0 } else { 1 });
    }
    topo.hive(&[2, 3, 4, 5, 6, 7, 8, 9]).finish()
}

#[test]
fn one_weaker_gpu_is_refused_and_named() {
    let src = eight(1000, model_a());
    let dst = eight(2000, weaker(model_a(), |p| p.simd_count = 380));
    let r = map(&src, &dst);
    assert_eq!(
        r.reasons,
        [
            // every checkpointed GPU competes for the 7 good local GPUs; the
            // one left over is the last in node order
            Reason {
                gpu: Some(1009),
                check: rule::COMPATIBLE_GPUS,
                checkpointed: 8,
                local: 7,
                local_gpu: None,
            },
            Reason {
                gpu: Some(1009),
                check: "simd_count",
                checkpointed: 416,
                local: 380,
                local_gpu: Some(2007),
            }
        ]
    );
    // No switch lets an always-equal property through.
    assert!(!map_with(&src, &dst, CheckOptions::none()).compatible);
}

#[test]
fn each_switch_lets_exactly_its_own_mismatch_through() {
    type Change = fn(&mut DeviceProps);
    type Switch = fn(&mut CheckOptions);
    let cases: [(&str, Change, Switch); 6] = [
        ("vram_size", |p| p.vram_size /= 2, |o| o.vram_size = false),
        (
            "fw_version",
            |p| p.fw_version -= 1,
            |o| o.fw_version = false,
        ),
        (
            "sdma_fw_version",
            |p| p.sdma_fw_version -= 1,
            |o| o.sdma_fw_version = false,
        ),
        ("num_gws", |p| p.num_gws -= 1, |o| o.num_gws = false),
        (
            "caches_count",
            |p| p.caches_count -= 1,
            |o| o.caches_count = false,
        ),
        (
            "capability",
            |p| p.capability |= 1,
            |o| o.capability = false,
        ),
    ];
    let src = eight(1000, model_a());
    for (name, change, switch) in cases {
        let dst = eight(2000, weaker(model_a(), change));
        let r = map(&src, &dst);
        assert!(!r.compatible, "{name}");
        let named: Vec<_> = r.reasons.iter().filter(|r| r.check == name).collect();
        assert_eq!(named.len(), 1, "{name}: {:?}", r.reasons);
        assert_eq!(named[0].local_gpu, Some(2007));

        let mut options = CheckOptions::all();
        switch(&mut options);
        let r = map_with(&src, &dst, options);
        assert!(r.compatible, "{name} off: {:?}", r.reasons);
        // equal GPUs are preferred partners: the odd one goes to the last
        assert_eq!(r.gpu_map[&1009], 2007);
        assert_eq!(r.gpu_map[&1007], 2008);

        // Every other switch off keeps the refusal.
        for (other, _, other_switch) in cases {
            if other == name {
                continue;
            }
            let mut options = CheckOptions::all();
            other_switch(&mut options);
            assert!(
                !map_with(&src, &dst, options).compatible,
                "{name} mismatch let through by {other} off"
            );
        }
    }
}

#[test]
fn more_capable_destination_is_accepted() {
    let better = DeviceProps {
        vram_size: 128 << 30,
        num_gws: 128,
        caches_count: 120,
        fw_version: 90,
        sdma_fw_version: 9,
        ..model_a()
    };
    let src = eight(1000, model_a());
    let mut dst = Topo::cpus(2);
    for node in 2..=9 {
        dst = dst.gpu(node, 2000 + node, better, if node < 6 { 0 } else { 1 });
    }
    let dst = dst.hive(&[2, 3, 4, 5, 6, 7, 8, 9]).finish();
    let r = map(&src, &dst);
    assert_eq!(
        r.gpu_map,
        (2..=9)
            .map(|n| (1000 + n, 2000 + n))
            .collect::<BTreeMap<_, _>>()
    );
    // The other way round is refused.
    assert!(!map(&dst, &src).compatible);
}

#[test]
fn container_seeing_a_subset_of_gpus_is_refused() {
    let host = eight(1000, model_a());
    // The container sees GPUs 2 and 3 only; links to the others are invalid.
    let container = Topo {
        nodes: host.nodes.clone(),
    };
    let container = (4..=9).fold(container, |t, node| t.without(node)).finish();
    let r = map(&host, &container);
    assert_eq!(
        r.reasons,
        [Reason {
            gpu: None,
            check: rule::GPU_COUNT,
            checkpointed: 8,
            local: 2,
            local_gpu: None,
        }]
    );
    // Container to an equal container elsewhere: fine, by identity of position.
    let mut other = container.clone();
    for node in &mut other.nodes {
        if node.gpu_id != 0 {
            node.gpu_id += 1000;
        }
    }
    let r = map(&container, &other);
    assert_eq!(r.gpu_map, pairs(&[(1002, 2002), (1003, 2003)]));
}

#[test]
fn fewer_valid_links_is_refused() {
    // checkpointed GPU: PCIe to both CPUs; the local GPU's second link
    // points at a masked node, so only one of its two links is valid
    let src = Topo::cpus(2)
        .gpu(2, 12, model_a(), 0)
        .link(2, 1, PCIE)
        .link(1, 2, PCIE)
        .finish();
    let dst = Topo::cpus(2)
        .gpu(2, 22, model_a(), 0)
        .link(2, 5, PCIE)
        .finish();
    let options = CheckOptions {
        numa: false,
        ..CheckOptions::all()
    };
    let r = map_with(&src, &dst, options);
    assert_eq!(
        r.reasons,
        [Reason {
            gpu: Some(12),
            check: rule::VALID_IO_LINKS,
            checkpointed: 2,
            local: 1,
            local_gpu: Some(22),
        }]
    );
    // the reverse is fine: more valid links locally
    let r = map_with(&dst, &src, options);
    assert_eq!(r.gpu_map, pairs(&[(22, 12)]));
}

#[test]
fn malformed_topologies_are_errors_not_panics() {
    let topo = eight(1000, model_a());
    let mut dup = topo.clone();
    dup.nodes[3].node_id = dup.nodes[2].node_id;
    assert!(matches!(
        map_topologies(&dup, &topo, &CheckOptions::all()),
        Err(MapError::DuplicateNodeId { node: 2, .. })
    ));
    let mut dup = topo.clone();
    dup.nodes[3].gpu_id = dup.nodes[2].gpu_id;
    assert!(matches!(
        map_topologies(&topo, &dup, &CheckOptions::all()),
        Err(MapError::DuplicateGpuId { gpu: 1002, .. })
    ));
    // links to nowhere and self links are just invalid or odd links
    let mut odd = topo.clone();
    odd.nodes[2].iolinks.push(DevIoLink {
        link_type: XGMI,
        node_to: 2,
    });
    odd.nodes[2].iolinks.push(DevIoLink {
        link_type: 77,
        node_to: 3,
    });
    let r = map_topologies(&odd, &odd, &CheckOptions::all()).unwrap();
    assert!(r.compatible);
    // empty topologies map trivially
    let empty = DeviceTopology::default();
    let r = map_topologies(&empty, &empty, &CheckOptions::all()).unwrap();
    assert!(r.compatible && r.gpu_map.is_empty());
}

#[test]
fn large_symmetric_machine_with_one_weak_gpu_is_refused() {
    // 64 partitions, 8 CPUs (NPS4 on two sockets), one hive: the C plugin's
    // backtracking never finishes on this refusal.
    let build = |base: u32, weak: Option<u32>| {
        let mut topo = Topo::cpus(8);
        let nodes: Vec<u32> = (8..72).collect();
        for &node in &nodes {
            let props = if Some(node) == weak {
                weaker(model_b(), |p| p.array_count -= 1)
            } else {
                model_b()
            };
            topo = topo.gpu(node, base + node, props, (node - 8) / 8);
        }
        topo.hive(&nodes).finish()
    };
    let src = build(1000, None);
    let r = map(&src, &build(5000, None));
    assert!(r.compatible);
    assert_eq!(r.cpu_map.len(), 8);
    let r = map(&src, &build(5000, Some(40)));
    assert_eq!(r.reasons[0].check, rule::COMPATIBLE_GPUS);
    assert_eq!((r.reasons[0].checkpointed, r.reasons[0].local), (64, 63));
    assert_eq!(r.reasons[1].check, "array_count");
    assert_eq!(r.reasons[1].local_gpu, Some(5040));
}

#[test]
fn json_shape() {
    let src = eight(1000, model_a());
    let r = map(&src, &eight(2000, model_a()));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["compatible"], true);
    assert_eq!(json["gpu_map"]["1002"], 2002);
    assert_eq!(json["cpu_map"]["1"], 1);
    assert_eq!(json["reasons"], serde_json::json!([]));
    let r = map(&src, &eight(2000, weaker(model_a(), |p| p.fw_version = 1)));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(
        json["reasons"][1],
        serde_json::json!({"gpu": 1009, "check": "fw_version", "checkpointed": 78, "local": 1, "local_gpu": 2007})
    );
    assert_eq!(json["reasons"][0]["local_gpu"], serde_json::Value::Null);
}

/// 16 CPUs with 2 GPUs each. Checkpointed hives pair the GPUs of CPUs
/// (2h, 2h+1); `striped` local hives take one GPU from each of 4 CPUs.
fn sixteen_sockets(base: u32, striped: bool) -> DeviceTopology {
    let mut topo = Topo::cpus(16);
    for g in 0..32 {
        topo = topo.gpu(16 + g, base + g, model_a(), g / 2);
    }
    for h in 0..8 {
        let members: Vec<u32> = if striped {
            (0..4).map(|k| 16 + h + 8 * k).collect()
        } else {
            (0..4).map(|k| 16 + 4 * h + k).collect()
        };
        topo = topo.hive(&members);
    }
    topo.finish()
}

#[test]
fn placement_and_hives_that_cannot_agree_are_refused_without_exhaustive_search() {
    // Without pruning partial CPU placements this would try 2^16 placements.
    let src = sixteen_sockets(1000, false);
    let dst = sixteen_sockets(2000, true);
    let r = map(&src, &dst);
    assert_eq!(
        r.reasons,
        [Reason {
            gpu: Some(1000),
            check: rule::XGMI_HIVE,
            checkpointed: 4,
            local: 3,
            local_gpu: None,
        }]
    );
    // Without the NUMA check any hive can take any hive.
    let r = map_with(
        &src,
        &dst,
        CheckOptions {
            numa: false,
            ..CheckOptions::all()
        },
    );
    assert!(r.compatible);
    // The same machine renumbered is accepted with the NUMA check on.
    let r = map(&src, &sixteen_sockets(3000, false));
    assert_eq!(r.cpu_map.len(), 16);
    assert!(r.cpu_map.iter().all(|(a, b)| a == b));
}
