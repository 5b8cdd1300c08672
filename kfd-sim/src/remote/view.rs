//! What a host client's mount namespace shows of the served machine: the
//! stand-in render nodes of its `/dev/dri`, which stand for the machine's
//! render nodes as a container's device nodes stand for the host's.
//!
//! A container engine creates in a container's `/dev` the devices it was
//! given, with the host node's numbers, owner and group, and lets the
//! container's device cgroup allow exactly those; amdkfd then shows the
//! container only the GPUs the cgroup allows (their topology nodes answer
//! `EPERM` to others, a new KFD process gets a pdd for each allowed GPU
//! only), and the container may see a GPU's node under a name that is not
//! the host's (criu#2888). Every stand-in has the same numbers (a misc
//! device CRIU hands to plugins), so a stand-in named `renderD<M>` stands
//! for render minor M, as the host's node of that name is (the model has
//! no node whose name and number disagree).
//!
//! A process whose `/dev/kfd` is a stand-in sees the GPUs its `/dev/dri`
//! stand-ins stand for, under their names there ([`stand_in_renders`]); the
//! served machine gives its host process that view (`super::hosts`), and
//! the interposer reads its own the same way, so both answer alike. A
//! process without a stand-in `/dev/kfd` (no private `/dev`) sees every
//! GPU under its host name.
//!
//! This module reads directory entries and file attributes only: it never
//! opens a device.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::{DevDriNode, Pid, Sim};

/// A stand-in render node of a `/dev/dri`: its name there and the render
/// minor it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandInRender {
    /// The file name under `/dev/dri`.
    pub name: String,
    /// The render minor it stands for.
    pub minor: u32,
}

/// The render minor a stand-in node named `name` stands for; `None` for a
/// name that is no render node's.
pub fn stand_in_minor(name: &str) -> Option<u32> {
    name.strip_prefix("renderD")?.parse().ok()
}

/// The stand-in render nodes of the mount namespace whose root is `root`
/// (`/` for the caller's own, `/proc/PID/root` for another process's), in
/// name order: the character devices of `root/dev/dri` with the numbers of
/// `root/dev/kfd`. `None` when `root/dev/kfd` is not a character device
/// (no stand-in `/dev`: every GPU is seen under its host name).
pub fn stand_in_renders(root: &Path) -> Option<Vec<StandInRender>> {
    let kfd = std::fs::metadata(root.join("dev/kfd")).ok()?;
    if !kfd.file_type().is_char_device() {
        return None;
    }
    let mut nodes: Vec<StandInRender> = std::fs::read_dir(root.join("dev/dri"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            if !meta.file_type().is_char_device() || meta.rdev() != kfd.rdev() {
                return None;
            }
            let name = entry.file_name().into_string().ok()?;
            let minor = stand_in_minor(&name)?;
            Some(StandInRender { name, minor })
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    Some(nodes)
}

impl Sim {
    /// Gives simulated process `pid` the view of `nodes` (its stand-in
    /// render nodes): the GPUs they stand for are the ones its device
    /// cgroup allows, its `/dev/dri` holds them under their names. Nodes
    /// standing for no GPU of this machine show nothing. Before the
    /// process opens `/dev/kfd`, as a cgroup is set before a process runs.
    pub(crate) fn give_dri_view(&self, pid: Pid, nodes: &[StandInRender]) {
        let gpus = self.gpus();
        let dev_dri: Vec<DevDriNode> = nodes
            .iter()
            .filter_map(|n| {
                let gpu = gpus.iter().find(|g| g.render_minor == n.minor)?;
                Some(DevDriNode {
                    name: n.name.clone(),
                    minor: n.minor,
                    gpu_id: gpu.gpu_id,
                })
            })
            .collect();
        let mut visible: Vec<usize> = gpus
            .iter()
            .enumerate()
            .filter(|(_, g)| dev_dri.iter().any(|n| n.gpu_id == g.gpu_id))
            .map(|(i, _)| i)
            .collect();
        visible.dedup();
        if let Some(p) = self.lock().processes.get_mut(&pid) {
            p.visible = visible;
            p.dev_dri = Some(dev_dri);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_render_node_s_name_says_its_minor() {
        assert_eq!(stand_in_minor("renderD128"), Some(128));
        assert_eq!(stand_in_minor("card0"), None);
        assert_eq!(stand_in_minor("renderDx"), None);
    }

    #[test]
    fn stand_ins_are_the_nodes_with_kfd_s_numbers() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(stand_in_renders(root.path()), None, "no /dev/kfd");
        // No mknod without privileges: a regular /dev/kfd is no stand-in.
        std::fs::create_dir_all(root.path().join("dev/dri")).unwrap();
        std::fs::write(root.path().join("dev/kfd"), b"").unwrap();
        assert_eq!(stand_in_renders(root.path()), None);
    }
}
