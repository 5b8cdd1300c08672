//! The bounded search over CPU placements (with the NUMA check) and XGMI
//! hive assignments, each leaf settled by one bipartite matching.

use std::collections::BTreeMap;

use super::matching::{Matching, Matrix};
use super::pairs::{placed_link_matches, placed_links_match};
use super::view::View;
use super::{MapError, Mapping, MAX_SEARCH_STATES};
use crate::checks::{rule, Reason};
use crate::options::CheckOptions;

/// The bounded search over CPU placements and hive assignments.
pub(super) struct Search<'v, 'a> {
    pub(super) src: &'v View<'a>,
    pub(super) dst: &'v View<'a>,
    pub(super) base: &'v Matrix,
    pub(super) states: u64,
    /// Reasons from the first (most preferred) leaf that failed.
    pub(super) first_failure: Option<Vec<Reason>>,
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

    pub(super) fn run(&mut self, options: &CheckOptions) -> Result<Option<Mapping>, MapError> {
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

type CpuKeyEntry = (Option<usize>, Vec<(u32, bool)>, Vec<u64>);
