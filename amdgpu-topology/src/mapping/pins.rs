//! Pinned pairs (from a device map): where each pin sits in the two views,
//! and why a set of pins cannot hold before any search.

use super::pairs::pair_reasons;
use super::view::View;
use super::{MapError, Side};
use crate::checks::{rule, Reason};
use crate::model::GpuId;
use crate::options::CheckOptions;

/// The pins as GPU positions in the two views. A gpu_id a view lacks or a
/// GPU pinned twice is malformed input ([`MapError`]); a resolved device
/// map has neither.
pub(super) fn pin_positions(
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
pub(super) fn pin_reasons(
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
