//! The DRM half of sysfs and the procfs file AMD's user space reads, for
//! the simulated machine: what the real kernel shows for each GPU's PCI
//! device and DRM minors, written once into a directory below the
//! simulator's run directory (`kfd_sim::scratch`, removed at exit).
//!
//! ```text
//! devices/pci<dom>:00/<slot>/{vendor,device,subsystem_vendor,subsystem_device,
//!                             revision,class,uevent,subsystem -> bus/pci}
//! devices/pci<dom>:00/<slot>/drm/{card<N>,renderD<minor>}/{dev,uevent,device -> ../..}
//! class/drm/{card<N>,renderD<minor>} -> devices/.../drm/...
//! dev/char/226:<minor> -> devices/.../drm/...
//! module/amdgpu/                       (the module is loaded)
//! modules                              (/proc/modules with amdgpu and amdttm)
//! dri/renderD<minor>                   (stands for /dev/dri; stat is answered by the hooks)
//! ```
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

use crate::machine::join;

/// The tree (removed when dropped, or with the run directory at exit).
pub(crate) struct Tree {
    dir: TempDir,
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
        for sub in ["class/drm", "dev/char", "bus/pci/devices", "module/amdgpu", "dri"] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        write(
            &root.join("module/amdgpu/initstate"),
            "live\n", // what the kernel shows for a loaded module
        )?;
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
            write(&pci.join("subsystem_vendor"), &format!("0x{vendor:04x}\n"))?;
            write(&pci.join("subsystem_device"), "0x0c34\n")?;
            write(&pci.join("revision"), "0x02\n")?;
            write(&pci.join("class"), "0x038000\n")?;
            write(
                &pci.join("uevent"),
                &format!(
                    "DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID={vendor:04X}:{device:04X}\n\
                     PCI_SUBSYS_ID={vendor:04X}:0C34\nPCI_SLOT_NAME={slot}\n"
                ),
            )?;
            let subsystem = pci.join("subsystem");
            if !subsystem.exists() {
                let depth = pci_rel.matches('/').count() + 1;
                std::os::unix::fs::symlink(
                    format!("{}bus/pci", "../".repeat(depth)),
                    &subsystem,
                )?;
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
            write(&root.join("dri").join(format!("renderD{}", gpu.render_minor)), "")?;
        }
        // /proc/modules as on a machine with the driver loaded: the lines
        // rocminfo and tools grep for.
        write(
            &root.join("modules"),
            "amdgpu 15781888 0 - Live 0x0000000000000000\n\
             amddrm_ttm_helper 12288 1 amdgpu, Live 0x0000000000000000\n\
             amdttm 94208 2 amdgpu,amddrm_ttm_helper, Live 0x0000000000000000\n\
             drm_buddy 20480 1 amdgpu, Live 0x0000000000000000\n",
        )?;
        Ok(Tree { dir })
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
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names_are_the_kernel_s() {
        assert_eq!(slot_name(0, 0x0300), "0000:03:00.0");
        assert_eq!(slot_name(1, 0xc10b), "0001:c1:01.3");
    }
}
