//! The memory a DRM file's GPU VM holds, as the kernel reports it in the
//! file's fdinfo (`drm_print_memory_stats`: `drm-total-<region>:` in bytes,
//! `KiB` or `MiB`, Linux 6.13 and later; before that amdgpu's
//! `drm-memory-<region>:` in KiB, Linux 6.0 to 6.12), and how much of it a
//! dump can account for without listing the file's GEM handles. For
//! kernels without `AMDGPU_GEM_LIST_HANDLES` (before 6.16), whose dump
//! cannot see a GEM handle it does not probe. This module only parses.

/// The bytes of GPU memory of every region `fdinfo` (the text of
/// `/proc/self/fdinfo/<fd>`) reports for the file's VM; `None` when it
/// carries no memory keys (not an amdgpu file, or a kernel before 6.0).
pub(crate) fn vm_bytes(fdinfo: &str) -> Option<u64> {
    let sum = |prefix: &str| -> Option<u64> {
        let mut found = false;
        let mut total = 0u64;
        for line in fdinfo.lines() {
            let Some(rest) = line.strip_prefix(prefix) else {
                continue;
            };
            let Some((_region, value)) = rest.split_once(':') else {
                continue;
            };
            let value = value.trim();
            let (number, scale) = match value.split_once(' ') {
                Some((n, "KiB")) => (n, 1u64 << 10),
                Some((n, "MiB")) => (n, 1 << 20),
                Some(_) => continue,
                None => (value, 1),
            };
            let Ok(n) = number.parse::<u64>() else {
                continue;
            };
            found = true;
            total = total.saturating_add(n.saturating_mul(scale));
        }
        found.then_some(total)
    };
    sum("drm-total-").or_else(|| sum("drm-memory-"))
}

/// GPU memory a VM may hold beyond `bytes` of buffers in `buffers`
/// mappings that the dump knows of: its page tables (the root directory,
/// and per mapping at worst a 4 KiB table per 2 MiB and directories per
/// 1 GiB and 512 GiB, with the blocks at both ends of each mapping), and
/// the small buffers KFD maps for itself (the trap handler's TBA/TMA, the
/// IB page) that no CRIU op lists.
pub(crate) fn unlisted_allowance(bytes: u64, buffers: u64) -> u64 {
    const PAGE: u64 = 4096;
    const KFD_OWN: u64 = 64 << 10;
    let tables = (bytes / (2 << 20) + bytes / (1 << 30) + bytes / (1 << 39))
        .saturating_add(buffers.saturating_mul(6))
        .saturating_add(1);
    tables.saturating_mul(PAGE).saturating_add(KFD_OWN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_s_keys_are_summed_over_regions() {
        // amdgpu 6.13+ (the example of the drm_print_memory_stats patch).
        let text = "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1204\ndrm-driver:\tamdgpu\n\
                    drm-client-id:\t30\ndrm-pdev:\t0000:04:00.0\npasid:\t32785\n\
                    drm-total-cpu:\t0\ndrm-shared-cpu:\t0\ndrm-resident-cpu:\t0\n\
                    drm-total-gtt:\t22 MiB\ndrm-shared-gtt:\t0\ndrm-resident-gtt:\t22 MiB\n\
                    drm-total-vram:\t544428 KiB\ndrm-shared-vram:\t13584 KiB\n\
                    drm-resident-vram:\t544428 KiB\ndrm-total-doorbell:\t4096\n\
                    drm-memory-vram:\t544428 KiB\ndrm-memory-gtt: \t22528 KiB\n\
                    drm-memory-cpu: \t0 KiB\namd-requested-vram:\t544428 KiB\n";
        assert_eq!(vm_bytes(text), Some((22 << 20) + (544_428 << 10) + 4096));
        // 6.0 to 6.12: the legacy keys only.
        let legacy = "drm-driver:\tamdgpu\ndrm-memory-vram:\t2048 KiB\ndrm-memory-gtt: \t4 KiB\n\
                      drm-memory-cpu: \t0 KiB\namd-memory-visible-vram:\t2048 KiB\n";
        assert_eq!(vm_bytes(legacy), Some((2048 << 10) + (4 << 10)));
        // Not a DRM file, or a kernel that prints no memory.
        assert_eq!(vm_bytes("pos:\t0\nflags:\t02\nmnt_id:\t1\nino:\t2\n"), None);
        assert_eq!(vm_bytes("drm-total-vram:\tmany\n"), None);
    }

    #[test]
    fn the_allowance_covers_tables_of_what_is_known_only() {
        assert_eq!(unlisted_allowance(0, 0), 4096 + (64 << 10));
        // 1 GiB in one mapping: 512 tables, a directory, the ends.
        assert_eq!(
            unlisted_allowance(1 << 30, 1),
            (512 + 1 + 6 + 1) * 4096 + (64 << 10)
        );
        assert!(unlisted_allowance(u64::MAX, u64::MAX) == u64::MAX);
    }
}
