//! Device maps on built-in machines: pins accepted and followed, and every
//! reason a pin is refused (pair checks, split, merged or squeezed XGMI
//! hives, a GPU named twice, an unknown GPU).

use amdgpu_topology::checks::rule;
use amdgpu_topology::device_map::{pci_address, DeviceMap, DeviceMapError};
use amdgpu_topology::devices::DeviceTopology;
use amdgpu_topology::mapping::{map_topologies, map_topologies_pinned, MapError, Side};
use amdgpu_topology::options::CheckOptions;
use amdgpu_topology::{builtin, renumbered, GpuId};

fn machine(name: &str) -> DeviceTopology {
    DeviceTopology::from_system(&builtin(name).expect("built-in machine")).unwrap()
}

fn renumbered_machine(name: &str, seed: u64) -> DeviceTopology {
    DeviceTopology::from_system(&renumbered(&builtin(name).unwrap(), seed)).unwrap()
}

/// The XGMI hives of built-in `name` renumbered with `seed` (0: as built),
/// as gpu_ids.
fn hives(name: &str, seed: u64) -> Vec<Vec<GpuId>> {
    let system = builtin(name).unwrap();
    let system = if seed == 0 {
        system
    } else {
        renumbered(&system, seed)
    };
    system
        .hives()
        .iter()
        .map(|h| {
            h.nodes
                .iter()
                .map(|&id| system.node(id).unwrap().gpu_id.unwrap())
                .collect()
        })
        .collect()
}

/// GPU ids in node order.
fn gpus(t: &DeviceTopology) -> Vec<GpuId> {
    let mut nodes: Vec<_> = t.gpus().collect();
    nodes.sort_by_key(|n| n.node_id);
    nodes.iter().map(|n| n.gpu_id).collect()
}

fn pin(src: &DeviceTopology, dst: &DeviceTopology, text: &str) -> Vec<(GpuId, GpuId)> {
    text.parse::<DeviceMap>()
        .unwrap()
        .resolve(src, dst)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn a_pin_inside_a_hive_moves_the_whole_hive_and_is_followed() {
    let src = machine("mi210-8gpu-2hive");
    let dst = renumbered_machine("mi210-8gpu-2hive", 7);
    let (s, d) = (hives("mi210-8gpu-2hive", 0), hives("mi210-8gpu-2hive", 7));
    // Unpinned, the first hive goes where its first GPU's twin is.
    let free = map_topologies(&src, &dst, &CheckOptions::all()).unwrap();
    assert!(free.compatible);
    let home = d
        .iter()
        .position(|h| h.contains(&free.gpu_map[&s[0][0]]))
        .unwrap();
    let other = 1 - home;
    // Pin it onto a GPU of the other local hive.
    let pins = pin(&src, &dst, &format!("{}={:#x}", s[0][0], d[other][2]));
    let pinned = map_topologies_pinned(&src, &dst, &CheckOptions::all(), &pins).unwrap();
    assert!(pinned.compatible, "{:?}", pinned.reasons);
    assert_eq!(pinned.gpu_map[&s[0][0]], d[other][2]);
    // Its hive mates follow it into that hive; the other hive takes the rest.
    for (mate, rest) in s[0].iter().zip(&s[1]) {
        assert!(d[other].contains(&pinned.gpu_map[mate]), "GPU {mate}");
        assert!(d[home].contains(&pinned.gpu_map[rest]), "GPU {rest}");
    }
}

#[test]
fn pins_by_pci_address_and_unique_id() {
    let src = machine("mi210-8gpu-2hive");
    let dst = renumbered_machine("mi210-8gpu-2hive", 9);
    let mut src_nodes: Vec<_> = src.gpus().collect();
    src_nodes.sort_by_key(|n| n.node_id);
    let mut dst_nodes: Vec<_> = dst.gpus().collect();
    dst_nodes.sort_by_key(|n| n.node_id);
    let from = pci_address(src_nodes[1]).expect("built-ins have PCI addresses");
    assert!(dst_nodes[6].props.unique_id != 0);
    let text = format!("{from}={}", dst_nodes[6].props.unique_id);
    let pins = pin(&src, &dst, &text);
    assert_eq!(pins, vec![(src_nodes[1].gpu_id, dst_nodes[6].gpu_id)]);
    let result = map_topologies_pinned(&src, &dst, &CheckOptions::all(), &pins).unwrap();
    assert!(result.compatible, "{:?}", result.reasons);
    assert_eq!(result.gpu_map[&src_nodes[1].gpu_id], dst_nodes[6].gpu_id);
}

#[test]
fn a_pin_that_splits_a_hive_is_refused_with_the_reason() {
    let src = machine("mi210-8gpu-2hive");
    let dst = renumbered_machine("mi210-8gpu-2hive", 3);
    let (s, d) = (hives("mi210-8gpu-2hive", 0), hives("mi210-8gpu-2hive", 3));
    let (s, d) = ([s[0][0], s[0][1]], [d[0][0], d[1][0]]);
    let pins = pin(&src, &dst, &format!("{}={},{}={}", s[0], d[0], s[1], d[1]));
    let result = map_topologies_pinned(&src, &dst, &CheckOptions::all(), &pins).unwrap();
    assert!(!result.compatible);
    let reason = result
        .reasons
        .iter()
        .find(|r| r.check == rule::PIN_SPLITS_HIVE)
        .expect("a split reason");
    assert_eq!(reason.gpu, Some(s[0]));
    assert_eq!(reason.local_gpu, Some(d[0]));
    let text = reason.to_string();
    assert!(text.contains("splits its XGMI hive"), "{text}");
    // gpu_ids in hex, as everywhere.
    assert!(
        text.contains(&format!("{:#06x}", s[1])) && text.contains(&format!("{:#06x}", d[1])),
        "{text}"
    );
}

#[test]
fn a_pin_that_merges_hives_is_refused_with_the_reason() {
    let src = machine("mi210-8gpu-2hive");
    let dst = renumbered_machine("mi210-8gpu-2hive", 4);
    let (s, d) = (hives("mi210-8gpu-2hive", 0), hives("mi210-8gpu-2hive", 4));
    let pins = pin(
        &src,
        &dst,
        &format!("{}={},{}={}", s[0][0], d[0][0], s[1][0], d[0][1]),
    );
    let result = map_topologies_pinned(&src, &dst, &CheckOptions::all(), &pins).unwrap();
    assert!(!result.compatible);
    assert!(
        result
            .reasons
            .iter()
            .any(|r| r.check == rule::PIN_MERGES_HIVES
                && r.to_string().contains("merges XGMI hives")),
        "{:?}",
        result.reasons
    );
}

#[test]
fn a_hive_member_pinned_outside_any_hive_is_refused() {
    // Both machines keep one hive; the second hive's GPUs lose their XGMI
    // links and stand alone.
    let strip = |mut t: DeviceTopology, loose: &[GpuId]| {
        for node in &mut t.nodes {
            if loose.contains(&node.gpu_id) {
                node.iolinks.retain(|l| l.link_type != 11);
            }
        }
        t
    };
    let (s, d) = (hives("mi210-8gpu-2hive", 0), hives("mi210-8gpu-2hive", 5));
    let src = strip(machine("mi210-8gpu-2hive"), &s[1]);
    let dst = strip(renumbered_machine("mi210-8gpu-2hive", 5), &d[1]);
    // The old mates' links to them have no link back, so they make no
    // hive: each side has exactly one.
    let pins = pin(&src, &dst, &format!("{}={}", s[0][2], d[1][0]));
    let result = map_topologies_pinned(&src, &dst, &CheckOptions::none(), &pins).unwrap();
    assert!(!result.compatible);
    let reason = result
        .reasons
        .iter()
        .find(|r| r.check == rule::PIN_HIVE_SIZE)
        .unwrap_or_else(|| panic!("a hive size reason in {:?}", result.reasons));
    assert!(
        reason.to_string().contains("which is in no XGMI hive"),
        "{reason}"
    );
}

#[test]
fn a_pin_to_an_incompatible_gpu_names_the_failed_checks() {
    let src = machine("single-gpu");
    let mut dst = machine("single-gpu");
    for node in &mut dst.nodes {
        if node.is_gpu() {
            node.props.fw_version = 1;
        }
    }
    let pins = pin(&src, &dst, &format!("{}={}", gpus(&src)[0], gpus(&dst)[0]));
    let result = map_topologies_pinned(&src, &dst, &CheckOptions::all(), &pins).unwrap();
    assert!(!result.compatible);
    assert_eq!(result.reasons[0].check, rule::PIN);
    assert!(result.reasons[0]
        .to_string()
        .contains("the device map pins it to local GPU"));
    assert!(result.reasons.iter().any(|r| r.check == "fw_version"));
    // With the firmware check off, the same pin is fine.
    let off = CheckOptions {
        fw_version: false,
        ..CheckOptions::all()
    };
    assert!(
        map_topologies_pinned(&src, &dst, &off, &pins)
            .unwrap()
            .compatible
    );
}

#[test]
fn a_gpu_named_twice_or_unknown_is_refused() {
    let src = machine("pcie-2gpu");
    let dst = renumbered_machine("pcie-2gpu", 11);
    let (s, d) = (gpus(&src), gpus(&dst));
    let err = format!("{}={},{:#x}={}", s[0], d[0], s[0], d[1])
        .parse::<DeviceMap>()
        .unwrap()
        .resolve(&src, &dst)
        .unwrap_err();
    assert!(matches!(
        err,
        DeviceMapError::NamedTwice {
            side: Side::Checkpointed,
            ..
        }
    ));
    // Straight to the mapping, the same pins are malformed input.
    let err = map_topologies_pinned(
        &src,
        &dst,
        &CheckOptions::all(),
        &[(s[0], d[0]), (s[1], d[0])],
    )
    .unwrap_err();
    assert_eq!(
        err,
        MapError::PinnedTwice {
            side: Side::Local,
            gpu: d[0]
        }
    );
    let err = map_topologies_pinned(&src, &dst, &CheckOptions::all(), &[(1, d[0])]).unwrap_err();
    assert!(matches!(
        err,
        MapError::PinnedGpuMissing {
            side: Side::Checkpointed,
            gpu: 1
        }
    ));
}

#[test]
fn pins_across_an_equal_pair_swap_the_gpus() {
    let src = machine("pcie-2gpu");
    let dst = renumbered_machine("pcie-2gpu", 12);
    let (s, d) = (gpus(&src), gpus(&dst));
    let free = map_topologies(&src, &dst, &CheckOptions::all()).unwrap();
    assert_eq!(free.gpu_map[&s[0]], d[0]);
    let pins = pin(&src, &dst, &format!("{}={}", s[0], d[1]));
    let swapped = map_topologies_pinned(&src, &dst, &CheckOptions::all(), &pins).unwrap();
    assert!(swapped.compatible, "{:?}", swapped.reasons);
    assert_eq!(swapped.gpu_map[&s[0]], d[1]);
    assert_eq!(swapped.gpu_map[&s[1]], d[0]);
}
