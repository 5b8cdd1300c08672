//! GPU mapping: which local GPU stands in for each checkpointed GPU, by the
//! C plugin's rules (`set_restore_gpu_maps` and `map_devices` in
//! `amdgpu_plugin_topology.c`: XGMI hives kept together, NUMA placement
//! kept), or every reason why no
//! assignment exists.
//!
//! # What is accepted
//!
//! The rules are the C plugin's:
//! - the GPU counts are equal;
//! - there are no more checkpointed XGMI hives than local ones, and the
//!   members of each checkpointed hive go into one local hive (at least as
//!   large), a different one per checkpointed hive;
//! - each pair passes [`device_mismatches`],
//!   the local GPU has at least as many valid io links, and every link of
//!   the checkpointed GPU to a CPU has a counterpart on the local GPU
//!   (`iolink_match`: XGMI may replace PCIe, not the reverse; a
//!   bi-directional link needs a bi-directional one);
//! - with `KFD_NUMA_CHECK` on, checkpointed CPU nodes that carry GPUs map
//!   one to one onto local CPU nodes, and a GPU's link to checkpointed CPU
//!   `x` needs a link of the same type to the image of `x`.
//!
//! Differences from C, on purpose: hives are the connected components of
//! bi-directional GPU-to-GPU XGMI links (C's group building can put a GPU in
//! two groups when a hive is not fully meshed); with the NUMA check on, every
//! GPU needs the same link type to its CPU's image (C lets the first GPU
//! that fixes a CPU's image use any matching type); and the search is
//! complete where C's backtracking commits to the first assignment found
//! inside each hive.
//!
//! # How
//!
//! C backtracks over single GPUs and does not finish on large partitioned
//! machines. Here: a GPU-by-GPU compatibility matrix; early refusal when a
//! checkpointed GPU has no compatible local GPU or when a maximum bipartite
//! matching (Hall's condition) shows the counts cannot work; then a bounded
//! search over CPU placements (only with the NUMA check, one local CPU per
//! checkpointed CPU, pruned by per-CPU matchings, skipping local CPUs that
//! are interchangeable) and over hive assignments (pruned by per-hive
//! matchings, skipping interchangeable local hives), each leaf settled by
//! one bipartite matching. At most [`MAX_SEARCH_STATES`] states are
//! explored; beyond that the answer is [`MapError::SearchLimit`].
//!
//! # Tie-break
//!
//! Deterministic. CPU nodes prefer the local CPU with the same node id, then
//! node order; a hive prefers the local hive holding a GPU with the same
//! gpu_id as its first member, then one with the same `hive_id`, then hive
//! order (by first member's node id); a GPU prefers the local GPU with the
//! same gpu_id, then the first free local GPU (node order) equal in every
//! compared property, then the first free compatible one (checkpointed GPUs
//! taken in node order; augmenting paths only when that greedy pass falls
//! short). So equal topologies map by identity and a renumbered copy pairs
//! GPUs by node order within each group of equal GPUs on the same CPU.
//!
//! This module is a pure function of two [`DeviceTopology`] values; it never
//! reads files or the environment.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::Serialize;

use crate::checks::{compared_values, device_mismatches, rule, Reason};
use crate::devices::{DeviceNode, DeviceTopology};
use crate::model::{link_type, GpuId};
use crate::options::CheckOptions;

/// At most this many search states (CPU placements, hive assignments and
/// leaves) are explored before giving up with [`MapError::SearchLimit`].
pub const MAX_SEARCH_STATES: u64 = 20_000;

/// At most this many nodes per topology are accepted (KFD has far fewer).
pub const MAX_NODES: usize = 1024;

/// A successful mapping.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Mapping {
    /// Checkpointed gpu_id to local gpu_id, for every checkpointed GPU.
    pub gpu_map: BTreeMap<GpuId, GpuId>,
    /// Checkpointed CPU node id to local CPU node id, for the CPU nodes GPUs
    /// link to; empty when the NUMA check is off (as in C, CPUs are mapped
    /// only as a constraint).
    pub cpu_map: BTreeMap<u32, u32>,
}

/// The answer to "can this checkpoint be restored here?".
///
/// Serialises as `{"compatible", "gpu_map", "cpu_map", "reasons"}` with
/// decimal ids as map keys: the JSON the `map` and `check` commands print.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MapResult {
    /// Whether a mapping exists (then `reasons` is empty).
    pub compatible: bool,
    /// The GPU mapping when compatible, empty otherwise.
    pub gpu_map: BTreeMap<GpuId, GpuId>,
    /// The CPU mapping when compatible (see [`Mapping::cpu_map`]).
    pub cpu_map: BTreeMap<u32, u32>,
    /// Why not, when not compatible.
    pub reasons: Vec<Reason>,
}

impl MapResult {
    fn refused(reasons: Vec<Reason>) -> Self {
        Self {
            compatible: false,
            gpu_map: BTreeMap::new(),
            cpu_map: BTreeMap::new(),
            reasons,
        }
    }

    /// The mapping, or the reasons there is none.
    pub fn into_mapping(self) -> Result<Mapping, Vec<Reason>> {
        if self.compatible {
            Ok(Mapping {
                gpu_map: self.gpu_map,
                cpu_map: self.cpu_map,
            })
        } else {
            Err(self.reasons)
        }
    }
}

/// Which topology an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The checkpointed topology.
    Checkpointed,
    /// The local topology.
    Local,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Checkpointed => "checkpointed",
            Side::Local => "local",
        })
    }
}

/// Why no answer could be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapError {
    /// Two nodes share a node id.
    #[error("{side} topology: node id {node} appears twice")]
    DuplicateNodeId {
        /// Which topology.
        side: Side,
        /// The node id.
        node: u32,
    },
    /// Two GPU nodes share a gpu_id.
    #[error("{side} topology: gpu_id {gpu:#06x} appears twice")]
    DuplicateGpuId {
        /// Which topology.
        side: Side,
        /// The gpu_id.
        gpu: GpuId,
    },
    /// More nodes than [`MAX_NODES`].
    #[error("{side} topology: {count} nodes, more than the {max} supported")]
    TooManyNodes {
        /// Which topology.
        side: Side,
        /// The node count.
        count: usize,
        /// [`MAX_NODES`].
        max: usize,
    },
    /// A pin names a gpu_id the topology does not have.
    #[error("device map: {side} topology has no GPU {gpu:#06x}")]
    PinnedGpuMissing {
        /// Which topology.
        side: Side,
        /// The gpu_id.
        gpu: GpuId,
    },
    /// Two pins name one GPU.
    #[error("device map names {side} GPU {gpu:#06x} twice; a GPU can be pinned once")]
    PinnedTwice {
        /// Which topology.
        side: Side,
        /// The gpu_id.
        gpu: GpuId,
    },
    /// The search explored [`MAX_SEARCH_STATES`] states without an answer.
    #[error("no answer after exploring {states} search states; the topologies are too irregular to decide (try KFD_NUMA_CHECK=0)")]
    SearchLimit {
        /// States explored.
        states: u64,
    },
}

/// Maps the checkpointed topology onto the local one.
///
/// `Ok` carries either the mapping (`compatible`) or every reason found for
/// refusing; `Err` means the inputs were malformed or no answer was reached.
pub fn map_topologies(
    checkpointed: &DeviceTopology,
    local: &DeviceTopology,
    options: &CheckOptions,
) -> Result<MapResult, MapError> {
    map_topologies_pinned(checkpointed, local, options, &[])
}

/// [`map_topologies`] with some checkpointed GPUs pinned to local GPUs
/// (`(checkpointed gpu_id, local gpu_id)`, as
/// [`crate::device_map::DeviceMap::resolve`] gives them).
///
/// Every pinned pair must pass the pair checks (properties, io links, CPU
/// links); pins must keep each checkpointed XGMI hive in one local hive at
/// least as large, and different checkpointed hives in different local
/// hives; the GPUs not pinned are mapped by the usual rules around the
/// pins. A refusal names the pin at fault.
pub fn map_topologies_pinned(
    checkpointed: &DeviceTopology,
    local: &DeviceTopology,
    options: &CheckOptions,
    pins: &[(GpuId, GpuId)],
) -> Result<MapResult, MapError> {
    let mut src = View::new(checkpointed, Side::Checkpointed)?;
    let mut dst = View::new(local, Side::Local)?;
    let mut class_ids: BTreeMap<[u64; 24], usize> = BTreeMap::new();
    for view in [&mut src, &mut dst] {
        view.class_ids = view
            .classes
            .iter()
            .map(|class| {
                let next = class_ids.len();
                *class_ids.entry(*class).or_insert(next)
            })
            .collect();
    }
    let n = src.gpus.len();
    if n != dst.gpus.len() {
        return Ok(MapResult::refused(vec![Reason {
            gpu: None,
            check: rule::GPU_COUNT,
            checkpointed: n as u64,
            local: dst.gpus.len() as u64,
            local_gpu: None,
        }]));
    }
    // Too few local hives refuses the mapping, but every GPU that nothing
    // could stand in for is a reason too: all of them are given.
    let hive_reason = (src.hives.len() > dst.hives.len()).then_some(Reason {
        gpu: None,
        check: rule::XGMI_HIVE_COUNT,
        checkpointed: src.hives.len() as u64,
        local: dst.hives.len() as u64,
        local_gpu: None,
    });

    let class_ok: Vec<Vec<bool>> = src
        .pair_class_reps
        .iter()
        .map(|&i| {
            dst.pair_class_reps
                .iter()
                .map(|&j| pair_reasons(&src, i, &dst, j, options).is_empty())
                .collect()
        })
        .collect();
    let mut base = Matrix::new(n);
    for i in 0..n {
        for j in 0..n {
            base.set(i, j, class_ok[src.pair_class[i]][dst.pair_class[j]]);
        }
    }
    if !pins.is_empty() {
        let positions = pin_positions(&src, &dst, pins)?;
        let reasons = pin_reasons(&src, &dst, &positions, options);
        if !reasons.is_empty() {
            return Ok(MapResult::refused(
                hive_reason.into_iter().chain(reasons).collect(),
            ));
        }
        for &(pi, pj) in &positions {
            for k in 0..n {
                base.set(pi, k, k == pj);
                if k != pi {
                    base.set(k, pj, false);
                }
            }
        }
    }

    // A checkpointed GPU nothing can stand in for: explain against the
    // closest local GPU. Looking at the first GPU of each pair class is
    // enough: the others of a class fare the same and come later in node
    // order.
    let mut reasons = Vec::new();
    for i in 0..n {
        if (0..n).any(|j| base.get(i, j)) {
            continue;
        }
        let candidates = dst.pair_class_reps.iter().copied();
        reasons.extend(closest_mismatches(&src, i, &dst, candidates, options));
    }
    if hive_reason.is_some() || !reasons.is_empty() {
        return Ok(MapResult::refused(
            hive_reason.into_iter().chain(reasons).collect(),
        ));
    }

    // Counting: a maximum matching ignoring hives and CPU placement.
    let adjacency = src.adjacency(&dst, &base, |_, _| true);
    let matching = Matching::maximum(&adjacency, n);
    if let Some(unmatched) = matching.first_unmatched() {
        return Ok(MapResult::refused(hall_reasons(
            &src, &dst, &adjacency, &matching, unmatched, options,
        )));
    }

    let mut search = Search {
        src: &src,
        dst: &dst,
        base: &base,
        states: 0,
        first_failure: None,
    };
    match search.run(options)? {
        Some(mapping) => Ok(MapResult {
            compatible: true,
            gpu_map: mapping.gpu_map,
            cpu_map: mapping.cpu_map,
            reasons: Vec::new(),
        }),
        // Every exhausted search has recorded its first failing leaf.
        None => Ok(MapResult::refused(search.first_failure.unwrap_or_else(
            || {
                vec![Reason {
                    gpu: None,
                    check: rule::COMPATIBLE_GPUS,
                    checkpointed: n as u64,
                    local: 0,
                    local_gpu: None,
                }]
            },
        ))),
    }
}

/// The pins as GPU positions in the two views. A gpu_id a view lacks or a
/// GPU pinned twice is malformed input ([`MapError`]); a resolved device
/// map has neither.
fn pin_positions(
    src: &View<'_>,
    dst: &View<'_>,
    pins: &[(GpuId, GpuId)],
) -> Result<Vec<(usize, usize)>, MapError> {
    let find = |view: &View<'_>, id: GpuId, side| {
        (0..view.gpus.len())
            .find(|&p| view.gpu(p).gpu_id == id)
            .ok_or(MapError::PinnedGpuMissing { side, gpu: id })
    };
    let mut positions: Vec<(usize, usize)> = Vec::with_capacity(pins.len());
    for &(s, d) in pins {
        let (i, j) = (
            find(src, s, Side::Checkpointed)?,
            find(dst, d, Side::Local)?,
        );
        if positions.iter().any(|&(pi, _)| pi == i) {
            return Err(MapError::PinnedTwice {
                side: Side::Checkpointed,
                gpu: s,
            });
        }
        if positions.iter().any(|&(_, pj)| pj == j) {
            return Err(MapError::PinnedTwice {
                side: Side::Local,
                gpu: d,
            });
        }
        positions.push((i, j));
    }
    Ok(positions)
}

/// Why the pins cannot hold, before any search: pairs that fail the pair
/// checks, and pins that split, merge or squeeze XGMI hives.
fn pin_reasons(
    src: &View<'_>,
    dst: &View<'_>,
    positions: &[(usize, usize)],
    options: &CheckOptions,
) -> Vec<Reason> {
    let src_hive = |i: usize| src.hives.iter().position(|h| h.contains(&i));
    let dst_hive = |j: usize| dst.hives.iter().position(|h| h.contains(&j));
    let mut reasons = Vec::new();
    for &(i, j) in positions {
        let pair = pair_reasons(src, i, dst, j, options);
        if !pair.is_empty() {
            reasons.push(Reason {
                gpu: Some(src.gpu(i).gpu_id),
                check: rule::PIN,
                checkpointed: pair.len() as u64,
                local: 0,
                local_gpu: Some(dst.gpu(j).gpu_id),
            });
            reasons.extend(pair);
        }
        if let Some(h) = src_hive(i) {
            let size = dst_hive(j).map_or(0, |k| dst.hives[k].len());
            if size < src.hives[h].len() {
                reasons.push(Reason {
                    gpu: Some(src.gpu(i).gpu_id),
                    check: rule::PIN_HIVE_SIZE,
                    checkpointed: src.hives[h].len() as u64,
                    local: size as u64,
                    local_gpu: Some(dst.gpu(j).gpu_id),
                });
            }
        }
    }
    for (a, &(i1, j1)) in positions.iter().enumerate() {
        for &(i2, j2) in &positions[a + 1..] {
            let (Some(h1), Some(h2)) = (src_hive(i1), src_hive(i2)) else {
                continue;
            };
            let same_local = dst_hive(j1).is_some() && dst_hive(j1) == dst_hive(j2);
            let check =
                if h1 == h2 && !same_local && dst_hive(j1).is_some() && dst_hive(j2).is_some() {
                    rule::PIN_SPLITS_HIVE
                } else if h1 != h2 && same_local {
                    rule::PIN_MERGES_HIVES
                } else {
                    continue;
                };
            reasons.push(Reason {
                gpu: Some(src.gpu(i1).gpu_id),
                check,
                checkpointed: src.gpu(i2).gpu_id.into(),
                local: dst.gpu(j2).gpu_id.into(),
                local_gpu: Some(dst.gpu(j1).gpu_id),
            });
        }
    }
    reasons
}

/// A link from a GPU to a CPU, as the placement rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct CpuLink {
    /// Position of the CPU in [`View::cpus`].
    cpu: usize,
    link_type: u32,
    bidirectional: bool,
}

/// One topology, analysed: GPUs and CPUs in node order, links resolved.
struct View<'a> {
    nodes: &'a [DeviceNode],
    /// Indices into `nodes` of the GPU nodes, by node id.
    gpus: Vec<usize>,
    /// Indices into `nodes` of the CPU nodes, by node id.
    cpus: Vec<usize>,
    /// Per GPU position: number of valid links.
    valid_links: Vec<usize>,
    /// Per GPU position: valid links to CPUs.
    cpu_links: Vec<Vec<CpuLink>>,
    /// Hives as GPU positions, members and hives in node order.
    hives: Vec<Vec<usize>>,
    /// Per GPU position: the compared property values (GPUs with equal
    /// values are preferred partners).
    classes: Vec<[u64; 24]>,
    /// Per GPU position: an id of `classes`, shared by both topologies
    /// (set by [`map_topologies`]).
    class_ids: Vec<usize>,
    /// Per GPU position: its pair class. GPUs of one pair class have equal
    /// compared properties, valid link counts and CPU link kinds, so
    /// [`pair_reasons`] gives them the same answer.
    pair_class: Vec<usize>,
    /// One GPU position per pair class.
    pair_class_reps: Vec<usize>,
}

impl<'a> View<'a> {
    fn new(topology: &'a DeviceTopology, side: Side) -> Result<Self, MapError> {
        let nodes = &topology.nodes[..];
        if nodes.len() > MAX_NODES {
            return Err(MapError::TooManyNodes {
                side,
                count: nodes.len(),
                max: MAX_NODES,
            });
        }
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by_key(|&i| nodes[i].node_id);
        if let Some(pair) = order
            .windows(2)
            .find(|w| nodes[w[0]].node_id == nodes[w[1]].node_id)
        {
            return Err(MapError::DuplicateNodeId {
                side,
                node: nodes[pair[0]].node_id,
            });
        }
        let mut gpu_ids: Vec<GpuId> = nodes
            .iter()
            .filter(|n| n.is_gpu())
            .map(|n| n.gpu_id)
            .collect();
        gpu_ids.sort_unstable();
        if let Some(pair) = gpu_ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(MapError::DuplicateGpuId { side, gpu: pair[0] });
        }
        let node_index = NodeIndex::new(nodes, &order);
        let by_id = |id: u32| node_index.get(id);
        let gpus: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| nodes[i].is_gpu())
            .collect();
        let cpus: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| !nodes[i].is_gpu())
            .collect();
        let mut position = vec![0; nodes.len()];
        for list in [&gpus, &cpus] {
            for (pos, &index) in list.iter().enumerate() {
                position[index] = pos;
            }
        }

        let kept = |t: u32| t as u64 == link_type::PCIE || t as u64 == link_type::XGMI;
        // Per node: its valid kept links as sorted (target index, type), to
        // find the link back that makes a link bi-directional.
        let links_of: Vec<Vec<(usize, u32)>> = nodes
            .iter()
            .map(|n| {
                let mut links: Vec<(usize, u32)> = n
                    .iolinks
                    .iter()
                    .filter(|l| kept(l.link_type))
                    .filter_map(|l| Some((by_id(l.node_to)?, l.link_type)))
                    .collect();
                links.sort_unstable();
                links
            })
            .collect();

        let mut valid_links = Vec::with_capacity(gpus.len());
        let mut cpu_links = Vec::with_capacity(gpus.len());
        let mut hive_parent: Vec<usize> = (0..gpus.len()).collect();
        for (pos, &index) in gpus.iter().enumerate() {
            let node = &nodes[index];
            let mut valid = 0;
            let mut to_cpus = Vec::new();
            for link in &node.iolinks {
                let Some(target) = by_id(link.node_to) else {
                    continue;
                };
                if !kept(link.link_type) {
                    continue;
                }
                valid += 1;
                let bidirectional = links_of[target]
                    .binary_search(&(index, link.link_type))
                    .is_ok();
                if nodes[target].is_gpu() {
                    if bidirectional && link.link_type as u64 == link_type::XGMI {
                        union(&mut hive_parent, pos, position[target]);
                    }
                } else {
                    to_cpus.push(CpuLink {
                        cpu: position[target],
                        link_type: link.link_type,
                        bidirectional,
                    });
                }
            }
            valid_links.push(valid);
            cpu_links.push(to_cpus);
        }
        let mut components: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for pos in 0..gpus.len() {
            let root = find(&mut hive_parent, pos);
            components.entry(root).or_default().push(pos);
        }
        let mut hives: Vec<Vec<usize>> = components
            .into_values()
            .filter(|members| members.len() > 1)
            .collect();
        hives.sort_by_key(|members| members[0]);

        let classes: Vec<[u64; 24]> = gpus
            .iter()
            .map(|&index| compared_values(&nodes[index].props))
            .collect();
        let mut class_ids: BTreeMap<PairKey, usize> = BTreeMap::new();
        let mut pair_class = Vec::with_capacity(gpus.len());
        let mut pair_class_reps = Vec::new();
        for (pos, links) in cpu_links.iter().enumerate() {
            let mut kinds: Vec<(u32, bool)> = links
                .iter()
                .map(|l: &CpuLink| (l.link_type, l.bidirectional))
                .collect();
            kinds.sort_unstable();
            let next = class_ids.len();
            let id = *class_ids
                .entry((classes[pos], valid_links[pos], kinds))
                .or_insert(next);
            if id == next {
                pair_class_reps.push(pos);
            }
            pair_class.push(id);
        }
        Ok(Self {
            nodes,
            gpus,
            cpus,
            valid_links,
            cpu_links,
            hives,
            classes,
            class_ids: Vec::new(),
            pair_class,
            pair_class_reps,
        })
    }

    fn gpu(&self, pos: usize) -> &DeviceNode {
        &self.nodes[self.gpus[pos]]
    }

    fn cpu_node_id(&self, pos: usize) -> u32 {
        self.nodes[self.cpus[pos]].node_id
    }

    /// For each checkpointed GPU, the local GPUs `compat` allows and `keep`
    /// keeps, in preference order: same gpu_id first, then GPUs equal in
    /// every compared property, then the others; node order within each.
    fn adjacency(
        &self,
        dst: &View<'_>,
        compat: &Matrix,
        keep: impl Fn(usize, usize) -> bool,
    ) -> Vec<Vec<usize>> {
        (0..self.gpus.len())
            .map(|i| {
                let id = self.gpu(i).gpu_id;
                let mut list: Vec<usize> = (0..dst.gpus.len())
                    .filter(|&j| compat.get(i, j) && keep(i, j))
                    .collect();
                list.sort_by_key(|&j| {
                    if dst.gpu(j).gpu_id == id {
                        0
                    } else if dst.class_ids[j] == self.class_ids[i] {
                        1
                    } else {
                        2
                    }
                });
                list
            })
            .collect()
    }
}

/// Node id to index into the node slice: a dense table when ids are small
/// (always, from sysfs), binary search otherwise.
enum NodeIndex<'n> {
    Dense(Vec<Option<usize>>),
    Sorted(&'n [DeviceNode], &'n [usize]),
}

impl<'n> NodeIndex<'n> {
    /// `order`: indices into `nodes` sorted by node id.
    fn new(nodes: &'n [DeviceNode], order: &'n [usize]) -> Self {
        let max = nodes.iter().map(|n| n.node_id as usize).max().unwrap_or(0);
        if max < 4 * nodes.len() + 1024 {
            let mut table = vec![None; max + 1];
            for (index, node) in nodes.iter().enumerate() {
                table[node.node_id as usize] = Some(index);
            }
            NodeIndex::Dense(table)
        } else {
            NodeIndex::Sorted(nodes, order)
        }
    }

    fn get(&self, id: u32) -> Option<usize> {
        match self {
            NodeIndex::Dense(table) => table.get(id as usize).copied().flatten(),
            NodeIndex::Sorted(nodes, order) => order
                .binary_search_by_key(&id, |&i| nodes[i].node_id)
                .ok()
                .map(|k| order[k]),
        }
    }
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    // Keep the smaller position as root so roots are deterministic.
    let (low, high) = if ra < rb { (ra, rb) } else { (rb, ra) };
    parent[high] = low;
}

/// Whether local CPU link `d` can stand in for checkpointed CPU link `s`
/// (`iolink_match` for two valid links to CPUs).
fn link_stands_in(s: &CpuLink, d: &CpuLink) -> bool {
    let xgmi_to_pcie =
        s.link_type as u64 == link_type::XGMI && d.link_type as u64 == link_type::PCIE;
    !xgmi_to_pcie && (!s.bidirectional || d.bidirectional)
}

/// Every reason local GPU `j` cannot stand in for checkpointed GPU `i`,
/// CPU placement aside.
fn pair_reasons(
    src: &View<'_>,
    i: usize,
    dst: &View<'_>,
    j: usize,
    options: &CheckOptions,
) -> Vec<Reason> {
    let (s, d) = (src.gpu(i), dst.gpu(j));
    let mut reasons = device_mismatches(s, d, options);
    if src.valid_links[i] > dst.valid_links[j] {
        reasons.push(Reason {
            gpu: Some(s.gpu_id),
            check: rule::VALID_IO_LINKS,
            checkpointed: src.valid_links[i] as u64,
            local: dst.valid_links[j] as u64,
            local_gpu: Some(d.gpu_id),
        });
    }
    for link in &src.cpu_links[i] {
        if !dst.cpu_links[j].iter().any(|l| link_stands_in(link, l)) {
            reasons.push(Reason {
                gpu: Some(s.gpu_id),
                check: rule::CPU_LINK,
                checkpointed: link.link_type.into(),
                local: dst.cpu_links[j].first().map_or(0, |l| l.link_type.into()),
                local_gpu: Some(d.gpu_id),
            });
        }
    }
    reasons
}

/// The mismatches of checkpointed GPU `i` against the local GPU among
/// `candidates` with the fewest (the first in node order on ties).
fn closest_mismatches(
    src: &View<'_>,
    i: usize,
    dst: &View<'_>,
    candidates: impl Iterator<Item = usize>,
    options: &CheckOptions,
) -> Vec<Reason> {
    let mut best: Option<Vec<Reason>> = None;
    for j in candidates {
        let reasons = pair_reasons(src, i, dst, j, options);
        if best.as_ref().is_none_or(|b| reasons.len() < b.len()) {
            best = Some(reasons);
        }
    }
    best.unwrap_or_default()
}

/// Reasons for a maximum matching that cannot cover checkpointed GPU
/// `unmatched`: the Hall violator around it, then why the closest local GPU
/// left over does not fit it. Left-over local GPUs (no checkpointed GPU
/// could take them) are the likely culprits, so they are looked at first;
/// failing those, any local GPU outside the violator's neighbourhood.
fn hall_reasons(
    src: &View<'_>,
    dst: &View<'_>,
    adjacency: &[Vec<usize>],
    matching: &Matching,
    unmatched: usize,
    options: &CheckOptions,
) -> Vec<Reason> {
    let (group, reachable) = matching.hall_violator(adjacency, unmatched);
    let mut reasons = vec![Reason {
        gpu: Some(src.gpu(unmatched).gpu_id),
        check: rule::COMPATIBLE_GPUS,
        checkpointed: group.len() as u64,
        local: reachable.len() as u64,
        local_gpu: None,
    }];
    let left_over: Vec<usize> = (0..dst.gpus.len())
        .filter(|&j| matching.right[j].is_none())
        .collect();
    let candidates = if left_over.is_empty() {
        (0..dst.gpus.len())
            .filter(|j| !reachable.contains(j))
            .collect()
    } else {
        left_over
    };
    let explained = closest_mismatches(src, unmatched, dst, candidates.into_iter(), options);
    reasons.extend(explained);
    reasons
}

/// A dense boolean matrix, checkpointed GPUs by local GPUs.
#[derive(Clone)]
struct Matrix {
    n: usize,
    cells: Vec<bool>,
}

impl Matrix {
    fn new(n: usize) -> Self {
        Self {
            n,
            cells: vec![false; n * n],
        }
    }
    fn get(&self, i: usize, j: usize) -> bool {
        self.cells[i * self.n + j]
    }
    fn set(&mut self, i: usize, j: usize, value: bool) {
        self.cells[i * self.n + j] = value;
    }
    /// Column `j` as a bitset over rows.
    fn column(&self, j: usize) -> Vec<u64> {
        let mut bits = vec![0u64; self.n.div_ceil(64)];
        for i in 0..self.n {
            if self.get(i, j) {
                bits[i / 64] |= 1 << (i % 64);
            }
        }
        bits
    }
}

/// A maximum bipartite matching (greedy in preference order, then
/// augmenting paths), left vertices are indices of `adjacency`.
struct Matching {
    left: Vec<Option<usize>>,
    right: Vec<Option<usize>>,
}

impl Matching {
    fn maximum(adjacency: &[Vec<usize>], right_count: usize) -> Self {
        let mut m = Self {
            left: vec![None; adjacency.len()],
            right: vec![None; right_count],
        };
        for (l, candidates) in adjacency.iter().enumerate() {
            if let Some(&r) = candidates.iter().find(|&&r| m.right[r].is_none()) {
                m.left[l] = Some(r);
                m.right[r] = Some(l);
            }
        }
        let mut visited = vec![usize::MAX; right_count];
        for l in 0..adjacency.len() {
            if m.left[l].is_none() {
                m.augment(adjacency, l, l, &mut visited);
            }
        }
        m
    }

    fn augment(
        &mut self,
        adjacency: &[Vec<usize>],
        l: usize,
        stamp: usize,
        visited: &mut [usize],
    ) -> bool {
        for &r in &adjacency[l] {
            if visited[r] == stamp {
                continue;
            }
            visited[r] = stamp;
            let free = match self.right[r] {
                None => true,
                Some(other) => self.augment(adjacency, other, stamp, visited),
            };
            if free {
                self.left[l] = Some(r);
                self.right[r] = Some(l);
                return true;
            }
        }
        false
    }

    fn size(&self) -> usize {
        self.left.iter().flatten().count()
    }

    fn first_unmatched(&self) -> Option<usize> {
        self.left.iter().position(Option::is_none)
    }

    /// From unmatched left `start`: the left vertices reachable by
    /// alternating paths and their right neighbours (one fewer).
    fn hall_violator(&self, adjacency: &[Vec<usize>], start: usize) -> (Vec<usize>, Vec<usize>) {
        let mut lefts = vec![start];
        let mut seen_left = HashSet::from([start]);
        let mut rights = Vec::new();
        let mut seen_right = HashSet::new();
        let mut next = 0;
        while next < lefts.len() {
            let l = lefts[next];
            next += 1;
            for &r in &adjacency[l] {
                if seen_right.insert(r) {
                    rights.push(r);
                    if let Some(owner) = self.right[r] {
                        if seen_left.insert(owner) {
                            lefts.push(owner);
                        }
                    }
                }
            }
        }
        (lefts, rights)
    }
}

/// The bounded search over CPU placements and hive assignments.
struct Search<'v, 'a> {
    src: &'v View<'a>,
    dst: &'v View<'a>,
    base: &'v Matrix,
    states: u64,
    /// Reasons from the first (most preferred) leaf that failed.
    first_failure: Option<Vec<Reason>>,
}

impl Search<'_, '_> {
    fn step(&mut self) -> Result<(), MapError> {
        self.states += 1;
        if self.states > MAX_SEARCH_STATES {
            return Err(MapError::SearchLimit {
                states: MAX_SEARCH_STATES,
            });
        }
        Ok(())
    }

    fn fail(&mut self, reasons: Vec<Reason>) {
        if self.first_failure.is_none() {
            self.first_failure = Some(reasons);
        }
    }

    fn run(&mut self, options: &CheckOptions) -> Result<Option<Mapping>, MapError> {
        let (src, dst) = (self.src, self.dst);
        let to_place: Vec<usize> = if options.numa {
            let cpus: std::collections::BTreeSet<usize> = src
                .cpu_links
                .iter()
                .flatten()
                .map(|link| link.cpu)
                .collect();
            cpus.into_iter().collect()
        } else {
            Vec::new()
        };
        if to_place.is_empty() {
            return self.leaf(None);
        }

        // Which local CPU can host the GPUs of each checkpointed CPU.
        let mut feasible = vec![vec![false; dst.cpus.len()]; to_place.len()];
        let mut reasons = Vec::new();
        for (k, &x) in to_place.iter().enumerate() {
            let attached: Vec<usize> = (0..src.gpus.len())
                .filter(|&i| src.cpu_links[i].iter().any(|l| l.cpu == x))
                .collect();
            let mut best = 0;
            for (y, slot) in feasible[k].iter_mut().enumerate() {
                let adjacency: Vec<Vec<usize>> = attached
                    .iter()
                    .map(|&i| {
                        (0..dst.gpus.len())
                            .filter(|&j| {
                                self.base.get(i, j) && placed_links_match(src, i, dst, j, x, y)
                            })
                            .collect()
                    })
                    .collect();
                let size = Matching::maximum(&adjacency, dst.gpus.len()).size();
                *slot = size == attached.len();
                best = best.max(size);
            }
            if !feasible[k].iter().any(|&f| f) {
                reasons.push(Reason {
                    gpu: attached.first().map(|&i| src.gpu(i).gpu_id),
                    check: rule::NUMA,
                    checkpointed: attached.len() as u64,
                    local: best as u64,
                    local_gpu: None,
                });
            }
        }
        if !reasons.is_empty() {
            self.fail(reasons);
            return Ok(None);
        }
        let cpu_adjacency: Vec<Vec<usize>> = feasible
            .iter()
            .map(|row| (0..row.len()).filter(|&y| row[y]).collect())
            .collect();
        let cpu_matching = Matching::maximum(&cpu_adjacency, dst.cpus.len());
        if cpu_matching.size() < to_place.len() {
            self.fail(vec![Reason {
                gpu: None,
                check: rule::NUMA,
                checkpointed: to_place.len() as u64,
                local: cpu_matching.size() as u64,
                local_gpu: None,
            }]);
            return Ok(None);
        }

        let keys = self.cpu_keys();
        let mut sigma = vec![None; src.cpus.len()];
        let mut used = vec![false; dst.cpus.len()];
        self.place_cpus(&to_place, 0, &feasible, &keys, &mut sigma, &mut used)
    }

    /// Interchangeability keys of local CPUs: two CPUs with equal keys can
    /// be swapped (with their GPUs) without changing any answer. `None` when
    /// a GPU on the CPU also links to another CPU.
    fn cpu_keys(&self) -> Vec<Option<Vec<CpuKeyEntry>>> {
        let dst = self.dst;
        (0..dst.cpus.len())
            .map(|y| {
                let mut entries = Vec::new();
                for j in 0..dst.gpus.len() {
                    let links = &dst.cpu_links[j];
                    if !links.iter().any(|l| l.cpu == y) {
                        continue;
                    }
                    if links.iter().any(|l| l.cpu != y) {
                        return None;
                    }
                    let mut kinds: Vec<(u32, bool)> = links
                        .iter()
                        .map(|l| (l.link_type, l.bidirectional))
                        .collect();
                    kinds.sort_unstable();
                    let hive = dst.hives.iter().position(|h| h.contains(&j));
                    entries.push((hive, kinds, self.base.column(j)));
                }
                entries.sort();
                Some(entries)
            })
            .collect()
    }

    fn place_cpus(
        &mut self,
        to_place: &[usize],
        k: usize,
        feasible: &[Vec<bool>],
        keys: &[Option<Vec<CpuKeyEntry>>],
        sigma: &mut Vec<Option<usize>>,
        used: &mut Vec<bool>,
    ) -> Result<Option<Mapping>, MapError> {
        let (src, dst) = (self.src, self.dst);
        let Some(&x) = to_place.get(k) else {
            return self.leaf(Some(sigma));
        };
        let mut candidates: Vec<usize> = (0..dst.cpus.len())
            .filter(|&y| feasible[k][y] && !used[y])
            .collect();
        let x_id = src.cpu_node_id(x);
        candidates.sort_by_key(|&y| (dst.cpu_node_id(y) != x_id, y));
        let mut tried: Vec<&Vec<CpuKeyEntry>> = Vec::new();
        for y in candidates {
            if let Some(key) = &keys[y] {
                if tried.contains(&key) {
                    continue;
                }
                tried.push(key);
            }
            self.step()?;
            sigma[x] = Some(y);
            used[y] = true;
            let last = k + 1 == to_place.len();
            let found = if last || self.placement_check(Some(sigma)).is_some() {
                self.place_cpus(to_place, k + 1, feasible, keys, sigma, used)?
            } else {
                None
            };
            sigma[x] = None;
            used[y] = false;
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// The compatibility matrix under a (possibly partial) CPU placement
    /// (`None`: NUMA check off), if it passes the necessary conditions: a
    /// perfect matching exists, each checkpointed hive fits into some local
    /// hive, and the hives can be placed on distinct local hives. Otherwise
    /// records why not and returns `None`. A link to a CPU not placed yet
    /// constrains nothing, so a partial placement that fails here fails for
    /// every completion.
    fn placement_check(&mut self, sigma: Option<&[Option<usize>]>) -> Option<Placement> {
        let (src, dst) = (self.src, self.dst);
        let n = src.gpus.len();
        let mut compat = self.base.clone();
        if let Some(sigma) = sigma {
            for i in 0..n {
                for j in 0..n {
                    if compat.get(i, j) {
                        let ok = src.cpu_links[i].iter().all(|s| {
                            sigma[s.cpu]
                                .is_none_or(|y| placed_link_matches(s, &dst.cpu_links[j], y))
                        });
                        compat.set(i, j, ok);
                    }
                }
            }
        }

        let adjacency = src.adjacency(dst, &compat, |_, _| true);
        let matching = Matching::maximum(&adjacency, n);
        if let Some(unmatched) = matching.first_unmatched() {
            let (group, reachable) = matching.hall_violator(&adjacency, unmatched);
            self.fail(vec![Reason {
                gpu: Some(src.gpu(unmatched).gpu_id),
                check: rule::COMPATIBLE_GPUS,
                checkpointed: group.len() as u64,
                local: reachable.len() as u64,
                local_gpu: None,
            }]);
            return None;
        }

        // Which local hive can take each checkpointed hive.
        let mut fits = vec![vec![false; dst.hives.len()]; src.hives.len()];
        let mut reasons = Vec::new();
        for (h, members) in src.hives.iter().enumerate() {
            let mut best = 0;
            for (k, targets) in dst.hives.iter().enumerate() {
                if targets.len() < members.len() {
                    continue;
                }
                let adjacency: Vec<Vec<usize>> = members
                    .iter()
                    .map(|&i| {
                        targets
                            .iter()
                            .copied()
                            .filter(|&j| compat.get(i, j))
                            .collect()
                    })
                    .collect();
                let size = Matching::maximum(&adjacency, n).size();
                fits[h][k] = size == members.len();
                best = best.max(size);
            }
            if !fits[h].iter().any(|&f| f) {
                reasons.push(Reason {
                    gpu: Some(src.gpu(members[0]).gpu_id),
                    check: rule::XGMI_HIVE,
                    checkpointed: members.len() as u64,
                    local: best as u64,
                    local_gpu: None,
                });
            }
        }
        if !reasons.is_empty() {
            self.fail(reasons);
            return None;
        }
        let hive_adjacency: Vec<Vec<usize>> = fits
            .iter()
            .map(|row| (0..row.len()).filter(|&k| row[k]).collect())
            .collect();
        let hive_matching = Matching::maximum(&hive_adjacency, dst.hives.len());
        if hive_matching.size() < src.hives.len() {
            self.fail(vec![Reason {
                gpu: None,
                check: rule::XGMI_HIVE,
                checkpointed: src.hives.len() as u64,
                local: hive_matching.size() as u64,
                local_gpu: None,
            }]);
            return None;
        }
        Some(Placement {
            compat,
            matching,
            fits,
        })
    }

    /// Settles one complete CPU placement (`None`: NUMA check off): hive
    /// assignment and the final matching.
    fn leaf(&mut self, sigma: Option<&[Option<usize>]>) -> Result<Option<Mapping>, MapError> {
        self.step()?;
        let (src, dst) = (self.src, self.dst);
        let n = src.gpus.len();
        let cpu_map = || -> BTreeMap<u32, u32> {
            sigma
                .map(|sigma| {
                    sigma
                        .iter()
                        .enumerate()
                        .filter_map(|(x, y)| Some((src.cpu_node_id(x), dst.cpu_node_id((*y)?))))
                        .collect()
                })
                .unwrap_or_default()
        };
        let Some(Placement {
            compat,
            matching,
            fits,
        }) = self.placement_check(sigma)
        else {
            return Ok(None);
        };
        if src.hives.is_empty() {
            return Ok(Some(self.mapping(&matching, cpu_map())));
        }

        let keys: Vec<Vec<Vec<u64>>> = dst
            .hives
            .iter()
            .map(|members| {
                let mut columns: Vec<Vec<u64>> =
                    members.iter().map(|&j| compat.column(j)).collect();
                columns.sort();
                columns
            })
            .collect();
        let mut hive_of_dst = vec![None; n];
        for (k, members) in dst.hives.iter().enumerate() {
            for &j in members {
                hive_of_dst[j] = Some(k);
            }
        }
        let mut assignment = vec![None; src.hives.len()];
        let mut used = vec![false; dst.hives.len()];
        let found = self.assign_hives(
            0,
            &compat,
            &fits,
            &keys,
            &hive_of_dst,
            &mut assignment,
            &mut used,
        )?;
        Ok(found.map(|matching| self.mapping(&matching, cpu_map())))
    }

    #[allow(clippy::too_many_arguments)] // the recursion's state, kept explicit
    fn assign_hives(
        &mut self,
        h: usize,
        compat: &Matrix,
        fits: &[Vec<bool>],
        keys: &[Vec<Vec<u64>>],
        hive_of_dst: &[Option<usize>],
        assignment: &mut Vec<Option<usize>>,
        used: &mut Vec<bool>,
    ) -> Result<Option<Matching>, MapError> {
        let (src, dst) = (self.src, self.dst);
        if h == src.hives.len() {
            let mut hive_of_src = vec![None; src.gpus.len()];
            for (h, members) in src.hives.iter().enumerate() {
                for &i in members {
                    hive_of_src[i] = assignment[h];
                }
            }
            let adjacency = src.adjacency(dst, compat, |i, j| {
                hive_of_src[i].is_none_or(|k| hive_of_dst[j] == Some(k))
            });
            let matching = Matching::maximum(&adjacency, dst.gpus.len());
            if let Some(unmatched) = matching.first_unmatched() {
                let (group, reachable) = matching.hall_violator(&adjacency, unmatched);
                self.fail(vec![Reason {
                    gpu: Some(src.gpu(unmatched).gpu_id),
                    check: rule::COMPATIBLE_GPUS,
                    checkpointed: group.len() as u64,
                    local: reachable.len() as u64,
                    local_gpu: None,
                }]);
                return Ok(None);
            }
            return Ok(Some(matching));
        }
        let first = src.gpu(src.hives[h][0]);
        let mut candidates: Vec<usize> = (0..dst.hives.len())
            .filter(|&k| fits[h][k] && !used[k])
            .collect();
        candidates.sort_by_key(|&k| {
            let same_gpu = dst.hives[k]
                .iter()
                .any(|&j| dst.gpu(j).gpu_id == first.gpu_id);
            let same_hive = dst.gpu(dst.hives[k][0]).props.hive_id == first.props.hive_id;
            (!same_gpu, !same_hive, k)
        });
        let mut tried: Vec<&Vec<Vec<u64>>> = Vec::new();
        for k in candidates {
            if tried.contains(&&keys[k]) {
                continue;
            }
            tried.push(&keys[k]);
            self.step()?;
            assignment[h] = Some(k);
            used[k] = true;
            let found =
                self.assign_hives(h + 1, compat, fits, keys, hive_of_dst, assignment, used)?;
            assignment[h] = None;
            used[k] = false;
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    fn mapping(&self, matching: &Matching, cpu_map: BTreeMap<u32, u32>) -> Mapping {
        let gpu_map = matching
            .left
            .iter()
            .enumerate()
            .filter_map(|(i, j)| Some((self.src.gpu(i).gpu_id, self.dst.gpu((*j)?).gpu_id)))
            .collect();
        Mapping { gpu_map, cpu_map }
    }
}

/// What [`Search::placement_check`] hands on.
struct Placement {
    compat: Matrix,
    matching: Matching,
    fits: Vec<Vec<bool>>,
}

type PairKey = ([u64; 24], usize, Vec<(u32, bool)>);

type CpuKeyEntry = (Option<usize>, Vec<(u32, bool)>, Vec<u64>);

/// With the NUMA check: whether local GPU `j`'s links can stand in for
/// checkpointed GPU `i`'s links to CPU `x` when `x` maps to local CPU `y`.
fn placed_links_match(
    src: &View<'_>,
    i: usize,
    dst: &View<'_>,
    j: usize,
    x: usize,
    y: usize,
) -> bool {
    src.cpu_links[i]
        .iter()
        .filter(|s| s.cpu == x)
        .all(|s| placed_link_matches(s, &dst.cpu_links[j], y))
}

/// Whether `local_links` has a link to local CPU `y` of the same type as
/// `s` that can stand in for it.
fn placed_link_matches(s: &CpuLink, local_links: &[CpuLink], y: usize) -> bool {
    local_links
        .iter()
        .any(|d| d.cpu == y && d.link_type == s.link_type && link_stands_in(s, d))
}
