//! `/proc/PID/fdinfo/<fd>` of a render file, as `drm_show_fdinfo` and
//! `amdgpu_show_fdinfo` print it (the Linux 6.13+ form): the drm core's
//! `drm-driver`, `drm-client-id` and `drm-pdev`, amdgpu's `pasid`, one
//! `drm_print_memory_stats` block per placement (`drm-total-`,
//! `drm-shared-`, `drm-resident-`, `drm-purgeable-` of `cpu`, `gtt`,
//! `vram`, `gds`, `gws`, `oa`, `doorbell`), then the legacy
//! `drm-memory-*` keys and amdgpu's own.
//!
//! The numbers are the file's GPU VM, as amdgpu accounts it
//! (`amdgpu_vm_update_stats`): every BO with a `bo_va` in the VM (each GEM
//! handle of the file; the KFD allocations mapped in it when it is a KFD
//! process's compute VM), counted once, by its preferred placement, shared
//! when it has more than one handle or a dma-buf; and the VM's own page
//! tables: the root directory and, for every mapping, the tables of the
//! 4-level layout of gfx9 and later (a page-table block per 2 MiB, a
//! directory per 1 GiB and per 512 GiB touched, 4 KiB each, in VRAM; the
//! kernel's 2 MiB PDE shortcut is not modelled, so the model is an upper
//! bound of the kernel's tables). This module only formats.

use std::collections::{BTreeMap, BTreeSet};

use crate::hw::bo::{BoId, Domain};
use crate::kernel::{FileKey, RenderFile, State};

use super::{kfd_ranges, VmTarget};

/// Size of one page-table or page-directory BO.
const PT_BYTES: u64 = 4096;

/// The kernel's placements in `amdgpu_show_fdinfo` order (`TTM_PL_SYSTEM`,
/// `TTM_PL_TT`, `TTM_PL_VRAM`, then amdgpu's own).
const PLACEMENTS: [&str; 7] = ["cpu", "gtt", "vram", "gds", "gws", "oa", "doorbell"];

#[derive(Default, Clone, Copy)]
struct Stats {
    private: u64,
    shared: u64,
}

fn placement(domain: Domain) -> usize {
    match domain {
        // Userptr BOs prefer GTT.
        Domain::Gtt | Domain::UserPtr => 1,
        Domain::Vram => 2,
        Domain::Doorbell => 6,
        Domain::Mmio => 0,
    }
}

/// `print_size`: bytes, in KiB or MiB while they divide evenly.
fn size(bytes: u64) -> String {
    let (mut value, mut unit) = (bytes, "");
    for next in [" KiB", " MiB"] {
        if value == 0 || value % 1024 != 0 {
            break;
        }
        value /= 1024;
        unit = next;
    }
    format!("{value}{unit}")
}

/// The fdinfo of render file `key` (`file`), after the generic lines
/// (`pos:` to `ino:`) the VFS prints, with the GPU's PCI address `pdev`.
pub(crate) fn render_fdinfo(
    st: &State,
    key: FileKey,
    file: &RenderFile,
    generic: &str,
    pdev: &str,
    ino: u64,
) -> String {
    let mut bos: BTreeSet<BoId> = file.drm.handles.values().map(|h| h.bo).collect();
    // (start, end) of every mapping in the VM: GEM_VA and KFD.
    let mut mapped: Vec<(u64, u64)> = Vec::new();
    for m in file.drm.vm.iter() {
        if let VmTarget::Bo(bo) = m.target {
            bos.insert(bo);
        }
        mapped.push((m.start, m.end()));
    }
    for range in kfd_ranges(st, key) {
        bos.insert(range.bo);
        mapped.push((range.va, range.va.saturating_add(range.size)));
    }
    let mut stats = [Stats::default(); PLACEMENTS.len()];
    for bo in bos.iter().filter_map(|&id| st.bos.get(id)) {
        let at = &mut stats[placement(bo.domain)];
        if bo.handles > 1 || bo.exported {
            at.shared += bo.size;
        } else {
            at.private += bo.size;
        }
    }
    // The root directory, and the tables below it that the mappings need.
    let mut tables: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
    for (start, end) in mapped.into_iter().filter(|(s, e)| e > s) {
        for (level, shift) in [(0u32, 21u32), (1, 30), (2, 39)] {
            let blocks = tables.entry(level).or_default();
            blocks.extend((start >> shift)..=((end - 1) >> shift));
        }
    }
    let pt_count = 1 + tables.values().map(|b| b.len() as u64).sum::<u64>();
    stats[2].private += pt_count * PT_BYTES;

    let mut out = String::from(generic);
    out += "drm-driver:\tamdgpu\n";
    out += &format!("drm-client-id:\t{ino}\n");
    out += &format!("drm-pdev:\t{pdev}\n");
    out += &format!("pasid:\t{}\n", 32768 + ino % 32768);
    for (name, s) in PLACEMENTS.iter().zip(&stats) {
        let total = s.private + s.shared;
        out += &format!("drm-total-{name}:\t{}\n", size(total));
        out += &format!("drm-shared-{name}:\t{}\n", size(s.shared));
        // Every simulated BO has its backing store; none is discardable.
        out += &format!("drm-resident-{name}:\t{}\n", size(total));
        out += &format!("drm-purgeable-{name}:\t{}\n", size(0));
    }
    let kib = |i: usize| (stats[i].private + stats[i].shared) / 1024;
    out += &format!("drm-memory-vram:\t{} KiB\n", kib(2));
    out += &format!("drm-memory-gtt: \t{} KiB\n", kib(1));
    out += &format!("drm-memory-cpu: \t{} KiB\n", kib(0));
    out += "amd-evicted-vram:\t0 KiB\n";
    out += &format!("amd-requested-vram:\t{} KiB\n", kib(2));
    out += &format!("amd-requested-gtt:\t{} KiB\n", kib(1));
    out
}

#[cfg(test)]
mod tests {
    use super::size;

    #[test]
    fn sizes_print_as_the_kernel_prints_them() {
        assert_eq!(size(0), "0");
        assert_eq!(size(4096), "4 KiB");
        assert_eq!(size(22 << 20), "22 MiB");
        assert_eq!(size(544_428 << 10), "544428 KiB");
        assert_eq!(size(1000), "1000");
        assert_eq!(size(3 << 30), "3072 MiB");
    }
}
