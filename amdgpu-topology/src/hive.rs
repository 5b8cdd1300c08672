//! XGMI hives: groups of GPU nodes joined by XGMI links.
//!
//! A hive is found the way the C plugin finds it (`topology_determine_iolinks`
//! in `amdgpu_plugin_topology.c`):
//! an XGMI (type 11) io_link counts only when the target node exists and has
//! an XGMI link back; GPUs joined by such bidirectional links, directly or
//! through other members, form one hive. The kernel's `hive_id` property is
//! then checked against the groups found from links. This module only reads
//! the model.

use serde::Serialize;

use crate::model::{link_type, System};

/// One XGMI hive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hive {
    /// The members' `hive_id` (that of the first member).
    pub hive_id: u64,
    /// GPU node ids, ascending.
    pub nodes: Vec<u32>,
    /// Whether every member has this same non-zero `hive_id` and no GPU
    /// outside the group has it.
    pub hive_id_agrees: bool,
}

impl System {
    /// Whether node `a` has an XGMI io_link to `b` and `b` one back to `a`.
    pub fn xgmi_linked(&self, a: u32, b: u32) -> bool {
        let has = |from: u32, to: u32| {
            self.node(from).is_some_and(|n| {
                n.io_links()
                    .iter()
                    .any(|l| l.link_type() == link_type::XGMI && l.node_to() == to)
            })
        };
        a != b && has(a, b) && has(b, a)
    }

    /// The XGMI hives among GPU nodes, ordered by their lowest node id. GPUs
    /// without a bidirectional XGMI link are in no hive.
    pub fn hives(&self) -> Vec<Hive> {
        let gpus: Vec<u32> = self.gpus().map(|n| n.id).collect();
        // Union-find over positions in `gpus`.
        let mut parent: Vec<usize> = (0..gpus.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        let mut linked = vec![false; gpus.len()];
        for (i, &id) in gpus.iter().enumerate() {
            let Some(node) = self.node(id) else { continue };
            for link in node.io_links() {
                if link.link_type() != link_type::XGMI {
                    continue;
                }
                let Some(j) = gpus.iter().position(|&g| g == link.node_to()) else {
                    continue;
                };
                if !self.xgmi_linked(id, gpus[j]) {
                    continue;
                }
                linked[i] = true;
                linked[j] = true;
                let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
                if ri != rj {
                    parent[ri.max(rj)] = ri.min(rj);
                }
            }
        }
        let mut hives: Vec<(usize, Vec<u32>)> = Vec::new();
        for i in 0..gpus.len() {
            if !linked[i] {
                continue;
            }
            let r = root(&mut parent, i);
            match hives.iter_mut().find(|(root, _)| *root == r) {
                Some((_, members)) => members.push(gpus[i]),
                None => hives.push((r, vec![gpus[i]])),
            }
        }
        hives
            .into_iter()
            .map(|(_, nodes)| {
                let hive_id = self.node(nodes[0]).map_or(0, |n| n.hive_id());
                let members_agree = hive_id != 0
                    && nodes
                        .iter()
                        .all(|&id| self.node(id).is_some_and(|n| n.hive_id() == hive_id));
                let outsiders = self
                    .gpus()
                    .any(|n| n.hive_id() == hive_id && !nodes.contains(&n.id));
                Hive {
                    hive_id,
                    nodes,
                    hive_id_agrees: members_agree && !outsiders,
                }
            })
            .collect()
    }
}
