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
//! - each pair passes [`device_mismatches`](crate::checks::device_mismatches),
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

mod matching;
mod pairs;
mod pins;
mod search;
mod view;

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::checks::{rule, Reason};
use crate::devices::DeviceTopology;
use crate::model::GpuId;
use crate::options::CheckOptions;

use matching::{Matching, Matrix};
use pairs::{closest_mismatches, hall_reasons, pair_reasons};
use pins::{pin_positions, pin_reasons};
use search::Search;
use view::View;

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
