//! The parts of sysfs and procfs beyond the KFD topology that AMD's user
//! space reads, for the simulated machine: what the real kernel shows for
//! each GPU's PCI device and DRM minors, and for the CPUs of each NUMA node
//! (the thunk takes a CPU node's caches from there, not from KFD), written
//! once into a directory below the simulator's run directory
//! (`kfd_sim::scratch`, removed at exit).
//!
//! ```text
//! devices/pci<dom>:00/<slot>/{vendor,device,subsystem_vendor,subsystem_device,
//!                             revision,class,uevent,subsystem -> bus/pci}
//! devices/pci<dom>:00/<slot>/drm/{card<N>,renderD<minor>}/{dev,uevent,device -> ../..}
//! class/drm/{card<N>,renderD<minor>} -> devices/.../drm/...
//! dev/char/226:<minor> -> devices/.../drm/...
//! module/amdgpu/{initstate,holders/}    (the module is loaded)
//! module/amdgpu/parameters/<name>      (kfd_sim::module_params)
//! modules                              (/proc/modules with amdgpu and amdttm)
//! dri/renderD<minor>                   (stands for /dev/dri; stat is answered by the hooks)
//! devices/system/node/node<N>/{cpulist,cpumap,meminfo}
//! devices/system/node/node<N>/cpu<K>/cache/index<I>/{level,type,size,...}
//! ```
//!
//! NUMA node `N` is the KFD CPU node `N`; its CPUs are
//! `cpu_core_id_base .. + cpu_cores_count`. A topology says nothing about
//! CPU caches (current kernels print none for CPU nodes), so every
//! simulated CPU has one fixed geometry, documented at [`CPU_CACHES`]. Only
//! `/sys/devices/system/node/node<N>` of the simulated CPU nodes is routed
//! here: the host's own NUMA listing stays what libnuma sees, so the thunk's
//! NUMA binding never names a node the host lacks.
//!
//! libdrm reads `dev/char/226:<minor>/device/drm` to tell a DRM device
//! (`drmNodeIsDRM`), the `card` entry there for the primary node name, the
//! PCI ids and `PCI_SLOT_NAME` from `device/`; rocminfo looks for `amdgpu`
//! in `/proc/modules`. Card numbers follow the kernel's: render minor
//! minus 128.
//!
//! It never writes outside its directory and never reads the host's sysfs.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use kfd_sim::{Sim, DRM_MAJOR};
use tempfile::TempDir;

/// The tree (removed when dropped, or with the run directory at exit).
pub(crate) struct Tree {
    dir: TempDir,
    /// The simulated CPU (NUMA) nodes' ids.
    numa_nodes: Vec<u32>,
}

/// One CPU cache level as sysfs shows it.
struct CpuCache {
    level: u32,
    kind: &'static str,
    size_kib: u32,
    ways: u32,
    /// CPUs sharing one instance (1: private to a core).
    shared_by: u32,
}

/// The cache geometry of every simulated CPU: a Zen 3 EPYC core (32 KiB
/// 8-way L1 data and instruction caches, a 512 KiB 8-way L2, a 32 MiB
/// 16-way L3 per 8-core complex), 64-byte lines.
const CPU_CACHES: [CpuCache; 4] = [
    CpuCache {
        level: 1,
        kind: "Data",
        size_kib: 32,
        ways: 8,
        shared_by: 1,
    },
    CpuCache {
        level: 1,
        kind: "Instruction",
        size_kib: 32,
        ways: 8,
        shared_by: 1,
    },
    CpuCache {
        level: 2,
        kind: "Unified",
        size_kib: 512,
        ways: 8,
        shared_by: 1,
    },
    CpuCache {
        level: 3,
        kind: "Unified",
        size_kib: 32768,
        ways: 16,
        shared_by: 8,
    },
];

/// The kernel's `%*pb` bitmap of CPUs `lo..hi` among `nr_cpus`:
/// comma-separated 32-bit hex groups, most significant first.
fn cpu_bitmap(lo: u32, hi: u32, nr_cpus: u32) -> String {
    let groups = nr_cpus.div_ceil(32).max(1);
    (0..groups)
        .rev()
        .map(|g| {
            let mut word = 0u32;
            for bit in 0..32 {
                let cpu = g * 32 + bit;
                if cpu >= lo && cpu < hi {
                    word |= 1 << bit;
                }
            }
            format!("{word:08x}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The kernel's `%*pbl` list of CPUs `lo..hi`.
fn cpu_list(lo: u32, hi: u32) -> String {
    match hi.saturating_sub(lo) {
        0 => String::new(),
        1 => lo.to_string(),
        _ => format!("{lo}-{}", hi - 1),
    }
}

/// Writes `devices/system/node/node<N>` for the simulated CPU nodes;
/// returns their ids.
fn write_cpu_nodes(root: &Path, sim: &Sim) -> io::Result<Vec<u32>> {
    let cpu_nodes: Vec<_> = sim
        .topology()
        .nodes
        .iter()
        .filter(|n| n.prop("cpu_cores_count") > 0)
        .collect();
    let nr_cpus = cpu_nodes
        .iter()
        .map(|n| n.prop("cpu_core_id_base") + n.prop("cpu_cores_count"))
        .max()
        .unwrap_or(0);
    let nr_cpus = u32::try_from(nr_cpus).unwrap_or(u32::MAX);
    for node in &cpu_nodes {
        let dir = root.join(format!("devices/system/node/node{}", node.id));
        std::fs::create_dir_all(&dir)?;
        let base = u32::try_from(node.prop("cpu_core_id_base")).unwrap_or(u32::MAX);
        let end = base.saturating_add(u32::try_from(node.prop("cpu_cores_count")).unwrap_or(0));
        write(&dir.join("cpulist"), &format!("{}\n", cpu_list(base, end)))?;
        write(
            &dir.join("cpumap"),
            &format!("{}\n", cpu_bitmap(base, end, nr_cpus)),
        )?;
        let mem_kib = node
            .mem_banks
            .iter()
            .flatten()
            .map(|b| b.properties.get_or_zero("size_in_bytes"))
            .sum::<u64>()
            >> 10;
        write(
            &dir.join("meminfo"),
            &format!(
                "Node {n} MemTotal:       {mem_kib} kB\nNode {n} MemFree:        {mem_kib} kB\n\
                 Node {n} MemUsed:        0 kB\n",
                n = node.id
            ),
        )?;
        for cpu in base..end {
            for (i, c) in CPU_CACHES.iter().enumerate() {
                let d = dir.join(format!("cpu{cpu}/cache/index{i}"));
                std::fs::create_dir_all(&d)?;
                let first = base + (cpu - base) / c.shared_by * c.shared_by;
                let last = first.saturating_add(c.shared_by).min(end);
                for (name, value) in [
                    ("level", c.level.to_string()),
                    ("type", c.kind.to_owned()),
                    ("size", format!("{}K", c.size_kib)),
                    ("coherency_line_size", "64".to_owned()),
                    ("ways_of_associativity", c.ways.to_string()),
                    ("physical_line_partition", "1".to_owned()),
                    ("shared_cpu_map", cpu_bitmap(first, last, nr_cpus)),
                    ("shared_cpu_list", cpu_list(first, last)),
                ] {
                    write(&d.join(name), &format!("{value}\n"))?;
                }
            }
        }
    }
    Ok(cpu_nodes.iter().map(|n| n.id).collect())
}

/// The PCI slot name (`dddd:bb:dd.f`) of a topology node.
fn slot_name(domain: u64, location_id: u64) -> String {
    let bus = (location_id >> 8) & 0xff;
    let dev = (location_id >> 3) & 0x1f;
    let func = location_id & 0x7;
    format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}")
}

fn write(path: &Path, text: &str) -> io::Result<()> {
    std::fs::write(path, text)
}

impl Tree {
    /// Writes the tree for `sim`'s GPUs.
    pub(crate) fn write(sim: &Sim) -> io::Result<Tree> {
        let run = kfd_sim::scratch::run_dir()?;
        let dir = tempfile::Builder::new().prefix("preload").tempdir_in(run)?;
        let root = dir.path();
        for sub in [
            "class/drm",
            "dev/char",
            "bus/pci/devices",
            "module/amdgpu/holders",
            "dri",
        ] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        write(
            &root.join("module/amdgpu/initstate"),
            "live\n", // what the kernel shows for a loaded module
        )?;
        std::fs::create_dir_all(root.join("module/amdgpu/parameters"))?;
        for (name, value) in kfd_sim::module_params::MODULE_PARAMETERS {
            write(
                &root.join("module/amdgpu/parameters").join(name),
                &format!("{value}\n"),
            )?;
        }
        let topology = sim.topology();
        for gpu in sim.gpus() {
            let node = topology
                .nodes
                .iter()
                .find(|n| n.id == gpu.node_id)
                .ok_or_else(|| io::Error::other(format!("no topology node {}", gpu.node_id)))?;
            let domain = node.prop("domain");
            let slot = slot_name(domain, node.prop("location_id"));
            // Partitions of one board share a PCI function in the
            // topology; the kernel gives each its own DRM minors below the
            // same device, which is what this tree does too.
            let pci_rel = format!("devices/pci{domain:04x}:00/{slot}");
            let pci = root.join(&pci_rel);
            std::fs::create_dir_all(pci.join("drm"))?;
            let vendor = node.prop("vendor_id");
            let device = node.prop("device_id");
            write(&pci.join("vendor"), &format!("0x{vendor:04x}\n"))?;
            write(&pci.join("device"), &format!("0x{device:04x}\n"))?;
            // A topology records neither the board's subsystem ids nor the
            // PCI revision: the subsystem is the chip's own ids and the
            // revision 0, as DEV_INFO's `pci_rev` reports it.
            write(&pci.join("subsystem_vendor"), &format!("0x{vendor:04x}\n"))?;
            write(&pci.join("subsystem_device"), &format!("0x{device:04x}\n"))?;
            write(&pci.join("revision"), "0x00\n")?;
            write(&pci.join("class"), "0x038000\n")?;
            write(
                &pci.join("uevent"),
                &format!(
                    "DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID={vendor:04X}:{device:04X}\n\
                     PCI_SUBSYS_ID={vendor:04X}:{device:04X}\nPCI_SLOT_NAME={slot}\n"
                ),
            )?;
            let subsystem = pci.join("subsystem");
            if !subsystem.exists() {
                let depth = pci_rel.matches('/').count() + 1;
                std::os::unix::fs::symlink(format!("{}bus/pci", "../".repeat(depth)), &subsystem)?;
                let link = root.join("bus/pci/devices").join(&slot);
                if !link.exists() {
                    std::os::unix::fs::symlink(format!("../../../{pci_rel}"), link)?;
                }
            }
            let card = gpu.render_minor.saturating_sub(128);
            for (name, minor) in [
                (format!("card{card}"), card),
                (format!("renderD{}", gpu.render_minor), gpu.render_minor),
            ] {
                let d = pci.join("drm").join(&name);
                std::fs::create_dir_all(&d)?;
                write(&d.join("dev"), &format!("{DRM_MAJOR}:{minor}\n"))?;
                write(
                    &d.join("uevent"),
                    &format!("MAJOR={DRM_MAJOR}\nMINOR={minor}\nDEVNAME=dri/{name}\n"),
                )?;
                std::os::unix::fs::symlink("../..", d.join("device"))?;
                let target = format!("{pci_rel}/drm/{name}");
                std::os::unix::fs::symlink(
                    format!("../../{target}"),
                    root.join("class/drm").join(&name),
                )?;
                std::os::unix::fs::symlink(
                    format!("../../{target}"),
                    root.join("dev/char").join(format!("{DRM_MAJOR}:{minor}")),
                )?;
            }
            write(
                &root
                    .join("dri")
                    .join(format!("renderD{}", gpu.render_minor)),
                "",
            )?;
        }
        // /proc/modules as on a machine with the driver loaded: the line
        // rocminfo looks for (through libkmod, which then reads
        // /sys/module/amdgpu/holders).
        write(
            &root.join("modules"),
            "amdgpu 15781888 0 - Live 0x0000000000000000\n",
        )?;
        let numa_nodes = write_cpu_nodes(root, sim)?;
        Ok(Tree { dir, numa_nodes })
    }

    /// `/dev/dri`'s stand-in.
    pub(crate) fn dri_dir(&self) -> PathBuf {
        self.dir.path().join("dri")
    }

    /// The file a DRM sysfs path or `/proc/modules` stands for.
    pub(crate) fn redirect(&self, path: &[u8]) -> Option<Vec<u8>> {
        let root = self.dir.path();
        if path == b"/proc/modules" {
            return Some(root.join("modules").as_os_str().as_bytes().to_vec());
        }
        let rest = path.strip_prefix(b"/sys")?;
        for sub in [&b"/class/drm"[..], b"/dev/char", b"/module/amdgpu"] {
            if rest.starts_with(sub) {
                return Some(join(root, rest));
            }
        }
        let node = numa_node_of(path)?;
        self.numa_nodes.contains(&node).then(|| join(root, rest))
    }
}

/// `N` when `path` is `/sys/devices/system/node/node<N>` or lies below it.
pub(crate) fn numa_node_of(path: &[u8]) -> Option<u32> {
    let rest = path.strip_prefix(b"/sys/devices/system/node/node")?;
    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// `base` followed by `rest` (which is empty or starts with `/`).
pub(crate) fn join(base: &Path, rest: &[u8]) -> Vec<u8> {
    let mut v = base.as_os_str().as_bytes().to_vec();
    v.extend_from_slice(rest);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_masks_and_lists_are_the_kernel_s() {
        assert_eq!(cpu_bitmap(0, 8, 64), "00000000,000000ff");
        assert_eq!(cpu_bitmap(32, 40, 40), "000000ff,00000000");
        assert_eq!(cpu_list(64, 128), "64-127");
        assert_eq!(cpu_list(3, 4), "3");
        assert_eq!(
            numa_node_of(b"/sys/devices/system/node/node1/cpu64"),
            Some(1)
        );
        assert_eq!(numa_node_of(b"/sys/devices/system/node/node12"), Some(12));
        assert_eq!(numa_node_of(b"/sys/devices/system/node/online"), None);
    }

    #[test]
    fn slot_names_are_the_kernel_s() {
        assert_eq!(slot_name(0, 0x0300), "0000:03:00.0");
        assert_eq!(slot_name(1, 0xc10b), "0001:c1:01.3");
    }
}
