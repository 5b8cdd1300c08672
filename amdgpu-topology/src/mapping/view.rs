//! One topology analysed for mapping: GPUs and CPUs in node order, io links
//! resolved to positions, XGMI hives as connected components, and the pair
//! classes of GPUs that fare alike in every pair check.

use std::collections::BTreeMap;

use super::matching::Matrix;
use super::{MapError, Side, MAX_NODES};
use crate::checks::compared_values;
use crate::devices::{DeviceNode, DeviceTopology};
use crate::model::{link_type, GpuId};

/// A link from a GPU to a CPU, as the placement rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct CpuLink {
    /// Position of the CPU in [`View::cpus`].
    pub(super) cpu: usize,
    pub(super) link_type: u32,
    pub(super) bidirectional: bool,
}

/// One topology, analysed: GPUs and CPUs in node order, links resolved.
pub(super) struct View<'a> {
    pub(super) nodes: &'a [DeviceNode],
    /// Indices into `nodes` of the GPU nodes, by node id.
    pub(super) gpus: Vec<usize>,
    /// Indices into `nodes` of the CPU nodes, by node id.
    pub(super) cpus: Vec<usize>,
    /// Per GPU position: number of valid links.
    pub(super) valid_links: Vec<usize>,
    /// Per GPU position: valid links to CPUs.
    pub(super) cpu_links: Vec<Vec<CpuLink>>,
    /// Hives as GPU positions, members and hives in node order.
    pub(super) hives: Vec<Vec<usize>>,
    /// Per GPU position: the compared property values (GPUs with equal
    /// values are preferred partners).
    pub(super) classes: Vec<[u64; 24]>,
    /// Per GPU position: an id of `classes`, shared by both topologies
    /// (set by [`map_topologies`](super::map_topologies)).
    pub(super) class_ids: Vec<usize>,
    /// Per GPU position: its pair class. GPUs of one pair class have equal
    /// compared properties, valid link counts and CPU link kinds, so
    /// [`pair_reasons`](super::pairs::pair_reasons) gives them the same answer.
    pub(super) pair_class: Vec<usize>,
    /// One GPU position per pair class.
    pub(super) pair_class_reps: Vec<usize>,
}

impl<'a> View<'a> {
    pub(super) fn new(topology: &'a DeviceTopology, side: Side) -> Result<Self, MapError> {
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

    pub(super) fn gpu(&self, pos: usize) -> &DeviceNode {
        &self.nodes[self.gpus[pos]]
    }

    pub(super) fn cpu_node_id(&self, pos: usize) -> u32 {
        self.nodes[self.cpus[pos]].node_id
    }

    /// For each checkpointed GPU, the local GPUs `compat` allows and `keep`
    /// keeps, in preference order: same gpu_id first, then GPUs equal in
    /// every compared property, then the others; node order within each.
    pub(super) fn adjacency(
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
    pub(super) fn new(nodes: &'n [DeviceNode], order: &'n [usize]) -> Self {
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

type PairKey = ([u64; 24], usize, Vec<(u32, bool)>);
