//! Finding the render node of a local GPU at restore by device, not by name
//! (criu#2888, cuda-checkpoint#54): a restored container's `/dev/dri` may
//! hold only its own GPU's node, under another name than the host's
//! `renderD<minor>`, or even with another minor than the KFD topology in
//! sysfs reports.
//!
//! In order, through [`Driver`] only (so the simulator's containers answer
//! as a real mount namespace does):
//! 1. `/dev/dri/renderD<minor>` if it is the character device
//!    `226:<minor>` (the host's layout, one `stat`);
//! 2. any entry of `/dev/dri` that is `226:<minor>` (renamed nodes);
//! 3. any DRM render-range entry of `/dev/dri` (`226:128..=255`) whose
//!    `/sys/class/drm/renderD<its minor>/device` names the GPU's PCI device
//!    (the container renumbered the node).
//!
//! Otherwise a [`Error::RenderNodeMissing`] names the GPU and everything
//! looked for. This module opens nothing.

use std::path::{Path, PathBuf};

use kfd::{DeviceNumber, Driver};

use crate::error::Error;
use crate::identify::{render_node_path, FIRST_RENDER_MINOR, LAST_RENDER_MINOR};

/// The major of DRM character devices.
pub const DRM_MAJOR: u32 = 226;

/// Where DRM nodes live.
pub const DRI_DIR: &str = "/dev/dri";

/// The local GPU whose render node is wanted.
#[derive(Debug, Clone, Copy)]
pub struct RenderTarget<'a> {
    /// Its gpu_id.
    pub gpu_id: u32,
    /// Its render minor as the KFD topology reports it.
    pub minor: u32,
    /// Its PCI address (`DDDD:BB:DD.F`), when the topology records one.
    pub pci: Option<&'a str>,
}

/// The path of the render node of `target` in this process's `/dev/dri`.
pub fn find_render_node<D: Driver + ?Sized>(
    driver: &D,
    target: RenderTarget<'_>,
) -> Result<PathBuf, Error> {
    let wanted = DeviceNumber {
        major: DRM_MAJOR,
        minor: target.minor,
    };
    let usual = render_node_path(target.minor);
    if driver.device_number(&usual).is_ok_and(|dev| dev == wanted) {
        return Ok(usual);
    }
    let dir = Path::new(DRI_DIR);
    let names = match driver.list_dir(dir) {
        Ok(mut names) => {
            names.sort();
            names
        }
        Err(e) => return Err(missing(target, format!("{DRI_DIR} cannot be listed ({e})"))),
    };
    let mut nodes: Vec<(PathBuf, DeviceNumber)> = Vec::new();
    for name in names {
        let path = dir.join(&name);
        if let Ok(dev) = driver.device_number(&path) {
            if dev == wanted {
                log::info!(
                    "GPU {:#x}: render node {} is 226:{} (the topology's renderD{})",
                    target.gpu_id,
                    path.display(),
                    target.minor,
                    target.minor
                );
                return Ok(path);
            }
            if dev.major == DRM_MAJOR
                && (FIRST_RENDER_MINOR..=LAST_RENDER_MINOR).contains(&dev.minor)
            {
                nodes.push((path, dev));
            }
        }
    }
    if let Some(pci) = target.pci {
        for (path, dev) in &nodes {
            let link = PathBuf::from(format!("/sys/class/drm/renderD{}/device", dev.minor));
            let Ok(device) = driver.read_link(&link) else {
                continue;
            };
            if device.file_name().and_then(|n| n.to_str()) == Some(pci) {
                log::info!(
                    "GPU {:#x}: render node {} (226:{}) is its PCI device {pci}, though the \
                     topology says renderD{}",
                    target.gpu_id,
                    path.display(),
                    dev.minor,
                    target.minor
                );
                return Ok(path.clone());
            }
        }
    }
    let seen = if nodes.is_empty() {
        "it holds no render node".to_owned()
    } else {
        format!(
            "it holds {}",
            nodes
                .iter()
                .map(|(p, d)| format!("{} (226:{})", p.display(), d.minor))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Err(missing(target, seen))
}

fn missing(target: RenderTarget<'_>, seen: String) -> Error {
    let by_pci = match target.pci {
        Some(pci) => format!(" nor one whose /sys/class/drm/renderD*/device is {pci}"),
        None => " (the topology records no PCI address to match it by)".to_owned(),
    };
    Error::RenderNodeMissing {
        reason: format!(
            "no render node for local GPU {:#x} in {DRI_DIR}: looked for the character device \
             226:{} (renderD{}){by_pci}; {seen}; give the restored container this GPU's render \
             node",
            target.gpu_id, target.minor, target.minor
        ),
    }
}
