//! Topology mapping workloads: each real capture, built-in and synthetic machine
//! mapped onto a renumbered copy of itself (accepted) and onto a copy with
//! one weaker GPU (refused), for the criterion bench `topology_map` and for
//! the report binary's `topology_map_ms=` lines.
//!
//! Only builds inputs and times `amdgpu_topology::mapping::map_topologies`;
//! never writes anything.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use amdgpu_topology::devices::{DevIoLink, DeviceNode, DeviceProps, DeviceTopology};
use amdgpu_topology::mapping::map_topologies;
use amdgpu_topology::options::CheckOptions;
use amdgpu_topology::{builtin, builtin_names, parse, renumbered, synthesize_missing, System};

/// The captures in `fixtures/topology` that the mapping applies to
/// (discrete GPUs with io links).
pub const FIXTURES: &[&str] = &[
    "mi308x-cpx-8gpu",
    "mi300x-cpx-8gpu",
    "mi210-8gpu-xgmi-2hives",
    "vega10-mi25-1gpu",
];

/// One mapping workload.
#[derive(Debug, Clone)]
pub struct MapCase {
    /// Where the topology comes from (`fixture:<dir>`, `builtin:<name>` or
    /// `synthetic:<name>`).
    pub name: String,
    /// GPU count.
    pub gpus: usize,
    /// The checkpointed topology.
    pub checkpointed: DeviceTopology,
    /// The same machine numbered as another host would number it.
    pub renumbered: DeviceTopology,
    /// The renumbered copy with one GPU weaker (fewer SIMDs).
    pub weaker: DeviceTopology,
}

/// Per-case timings of one accepted and one refused mapping.
#[derive(Debug, Clone)]
pub struct MapTiming {
    /// [`MapCase::name`].
    pub name: String,
    /// GPU count.
    pub gpus: usize,
    /// Median time to map onto the renumbered copy (accepted).
    pub accept: Duration,
    /// Median time to map onto the weaker copy (refused).
    pub refuse: Duration,
}

/// `../shared/fixtures/topology` next to the workspace root, if present.
pub fn fixtures_root() -> Option<PathBuf> {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    loop {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        if manifest.contains("[workspace]") {
            let root = dir.join("../shared/fixtures/topology");
            return root.is_dir().then_some(root);
        }
        dir = dir.parent()?;
    }
}

/// The workloads: every fixture found under `fixtures_root` (partial
/// captures completed with `synthesize_missing`), every built-in machine,
/// and [`nps4_64`]. Fixtures and built-ins are renumbered with
/// `amdgpu_topology::renumbered`.
pub fn map_cases(fixtures_root: Option<&Path>) -> Vec<MapCase> {
    let mut cases = Vec::new();
    if let Some(root) = fixtures_root {
        for name in FIXTURES {
            if let Ok(parsed) = parse(&root.join(name)) {
                let mut system = parsed.system;
                synthesize_missing(&mut system);
                cases.extend(system_case(format!("fixture:{name}"), &system));
            }
        }
    }
    for name in builtin_names() {
        if let Some(system) = builtin(name) {
            cases.extend(system_case(format!("builtin:{name}"), &system));
        }
    }
    let nps4 = nps4_64();
    let copy = renumbered_devices(&nps4, 0x5EED);
    cases.push(case("synthetic:nps4-64".to_owned(), nps4, copy));
    cases
}

/// Times each case: the median of `runs` mappings onto the renumbered copy
/// and onto the weaker copy. Panics if an answer is not the expected one
/// (a bench of a wrong answer measures nothing).
pub fn map_timings(cases: &[MapCase], runs: usize) -> Vec<MapTiming> {
    let options = CheckOptions::all();
    cases
        .iter()
        .map(|case| {
            let time = |local: &DeviceTopology, expect: bool| {
                let mut samples: Vec<Duration> = (0..runs.max(1))
                    .map(|_| {
                        let start = Instant::now();
                        let result =
                            map_topologies(&case.checkpointed, local, &options).expect("an answer");
                        let elapsed = start.elapsed();
                        assert_eq!(result.compatible, expect, "{}", case.name);
                        elapsed
                    })
                    .collect();
                samples.sort_unstable();
                samples[samples.len() / 2]
            };
            MapTiming {
                name: case.name.clone(),
                gpus: case.gpus,
                accept: time(&case.renumbered, true),
                refuse: time(&case.weaker, false),
            }
        })
        .collect()
}

/// `topology_map_ms=<name>:gpus=<n>:accept=<ms>:refuse=<ms>` lines for the
/// report binary.
pub fn report_lines(timings: &[MapTiming]) -> Vec<String> {
    timings
        .iter()
        .map(|t| {
            format!(
                "topology_map_ms={}:gpus={}:accept={:.3}:refuse={:.3}",
                t.name,
                t.gpus,
                t.accept.as_secs_f64() * 1e3,
                t.refuse.as_secs_f64() * 1e3
            )
        })
        .collect()
}

fn system_case(name: String, system: &System) -> Option<MapCase> {
    let checkpointed = DeviceTopology::from_system(system).ok()?;
    let copy = DeviceTopology::from_system(&renumbered(system, 0x5EED)).ok()?;
    Some(case(name, checkpointed, copy))
}

fn case(name: String, checkpointed: DeviceTopology, renumbered: DeviceTopology) -> MapCase {
    let mut weaker = renumbered.clone();
    if let Some(node) = weaker.nodes.iter_mut().rfind(|n| n.is_gpu()) {
        node.props.simd_count = node.props.simd_count.saturating_sub(4);
    }
    MapCase {
        name,
        gpus: checkpointed.gpus().count(),
        checkpointed,
        renumbered,
        weaker,
    }
}

/// The same machine as another host numbers it: GPU node ids permuted among
/// themselves (xorshift with `seed`), new gpu_ids, links rewritten.
pub fn renumbered_devices(topology: &DeviceTopology, seed: u64) -> DeviceTopology {
    let mut slots: Vec<u32> = topology.gpus().map(|n| n.node_id).collect();
    slots.sort_unstable();
    let mut order = slots.clone();
    let mut state = seed | 1;
    for i in (1..order.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    let renumber = |id: u32| slots.iter().position(|&s| s == id).map_or(id, |i| order[i]);
    let mut nodes: Vec<DeviceNode> = topology
        .nodes
        .iter()
        .map(|n| DeviceNode {
            node_id: renumber(n.node_id),
            gpu_id: if n.is_gpu() {
                (n.gpu_id ^ 0xA5A5) | 0x1_0000
            } else {
                0
            },
            props: n.props,
            iolinks: n
                .iolinks
                .iter()
                .map(|l| DevIoLink {
                    link_type: l.link_type,
                    node_to: renumber(l.node_to),
                })
                .collect(),
        })
        .collect();
    nodes.sort_by_key(|n| n.node_id);
    DeviceTopology { nodes }
}

/// 8 CPU nodes (two sockets in NPS4) with 8 GPU partitions each, all 64 in
/// one XGMI hive: the largest placement search a real machine asks for.
pub fn nps4_64() -> DeviceTopology {
    const CPUS: u32 = 8;
    const GPUS: u32 = 64;
    let props = DeviceProps {
        simd_count: 152,
        mem_banks_count: 1,
        caches_count: 72,
        io_links_count: GPUS,
        max_waves_per_simd: 8,
        lds_size_in_kb: 64,
        num_gws: 64,
        wave_front_size: 64,
        array_count: 4,
        simd_arrays_per_engine: 1,
        cu_per_simd_array: 10,
        simd_per_cu: 4,
        max_slots_scratch_cu: 32,
        vendor_id: 4098,
        device_id: 29857,
        num_sdma_engines: 2,
        num_sdma_queues_per_engine: 8,
        num_cp_queues: 24,
        fw_version: 157,
        capability: 746_037_888,
        sdma_fw_version: 20,
        vram_public: true,
        vram_size: 24 << 30,
        ..DeviceProps::default()
    };
    let gpu_nodes = CPUS..CPUS + GPUS;
    let mut nodes: Vec<DeviceNode> = (0..CPUS)
        .map(|cpu| DeviceNode {
            node_id: cpu,
            gpu_id: 0,
            props: DeviceProps {
                cpu_cores_count: 24,
                ..DeviceProps::default()
            },
            iolinks: gpu_nodes
                .clone()
                .filter(|g| (g - CPUS) / (GPUS / CPUS) == cpu)
                .map(|g| DevIoLink {
                    link_type: 2,
                    node_to: g,
                })
                .collect(),
        })
        .collect();
    for g in gpu_nodes.clone() {
        let mut iolinks = vec![DevIoLink {
            link_type: 2,
            node_to: (g - CPUS) / (GPUS / CPUS),
        }];
        iolinks.extend(gpu_nodes.clone().filter(|&o| o != g).map(|o| DevIoLink {
            link_type: 11,
            node_to: o,
        }));
        nodes.push(DeviceNode {
            node_id: g,
            gpu_id: 0x2000 + g,
            props,
            iolinks,
        });
    }
    DeviceTopology { nodes }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_answers_as_expected() {
        let cases = map_cases(fixtures_root().as_deref());
        if fixtures_root().is_none() {
            test_env::skip("the fixture cases: ../shared/fixtures/topology is absent");
        }
        let timings = map_timings(&cases, 1);
        assert_eq!(timings.len(), cases.len());
        let lines = report_lines(&timings);
        assert!(lines
            .iter()
            .any(|l| l.starts_with("topology_map_ms=synthetic:nps4-64:gpus=64:accept=")));
    }
}
