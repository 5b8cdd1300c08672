//! The pair checks: whether a local GPU can stand in for a checkpointed
//! GPU (properties, io links, links to CPUs), and the reasons given when
//! none or too few can.

use super::matching::Matching;
use super::view::{CpuLink, View};
use crate::checks::{device_mismatches, rule, Reason};
use crate::model::link_type;
use crate::options::CheckOptions;

/// Whether local CPU link `d` can stand in for checkpointed CPU link `s`
/// (`iolink_match` for two valid links to CPUs).
pub(super) fn link_stands_in(s: &CpuLink, d: &CpuLink) -> bool {
    let xgmi_to_pcie =
        s.link_type as u64 == link_type::XGMI && d.link_type as u64 == link_type::PCIE;
    !xgmi_to_pcie && (!s.bidirectional || d.bidirectional)
}

/// Every reason local GPU `j` cannot stand in for checkpointed GPU `i`,
/// CPU placement aside.
pub(super) fn pair_reasons(
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
pub(super) fn closest_mismatches(
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
pub(super) fn hall_reasons(
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

/// With the NUMA check: whether local GPU `j`'s links can stand in for
/// checkpointed GPU `i`'s links to CPU `x` when `x` maps to local CPU `y`.
pub(super) fn placed_links_match(
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
pub(super) fn placed_link_matches(s: &CpuLink, local_links: &[CpuLink], y: usize) -> bool {
    local_links
        .iter()
        .any(|d| d.cpu == y && d.link_type == s.link_type && link_stands_in(s, d))
}
