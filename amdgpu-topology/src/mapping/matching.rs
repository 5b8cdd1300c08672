//! The combinatorial tools of the search: a dense compatibility matrix and
//! maximum bipartite matchings with their Hall violators.

use std::collections::HashSet;

/// A dense boolean matrix, checkpointed GPUs by local GPUs.
#[derive(Clone)]
pub(super) struct Matrix {
    n: usize,
    cells: Vec<bool>,
}

impl Matrix {
    pub(super) fn new(n: usize) -> Self {
        Self {
            n,
            cells: vec![false; n * n],
        }
    }
    pub(super) fn get(&self, i: usize, j: usize) -> bool {
        self.cells[i * self.n + j]
    }
    pub(super) fn set(&mut self, i: usize, j: usize, value: bool) {
        self.cells[i * self.n + j] = value;
    }
    /// Column `j` as a bitset over rows.
    pub(super) fn column(&self, j: usize) -> Vec<u64> {
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
pub(super) struct Matching {
    pub(super) left: Vec<Option<usize>>,
    pub(super) right: Vec<Option<usize>>,
}

impl Matching {
    pub(super) fn maximum(adjacency: &[Vec<usize>], right_count: usize) -> Self {
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

    pub(super) fn size(&self) -> usize {
        self.left.iter().flatten().count()
    }

    pub(super) fn first_unmatched(&self) -> Option<usize> {
        self.left.iter().position(Option::is_none)
    }

    /// From unmatched left `start`: the left vertices reachable by
    /// alternating paths and their right neighbours (one fewer).
    pub(super) fn hall_violator(
        &self,
        adjacency: &[Vec<usize>],
        start: usize,
    ) -> (Vec<usize>, Vec<usize>) {
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
