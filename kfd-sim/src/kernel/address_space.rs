//! What the simulated kernel sees of a process's CPU address space, for
//! processes whose user addresses are real CPU mappings (a host process
//! served remotely, or one created with `ProcessConfig::host_address_space`):
//! the VMA walk of `svm_range_is_valid` and the MMU notifier that ends SVM
//! ranges when their memory is unmapped (`crate::Sim::cpu_unmapped`).
//!
//! The mappings are read from `/proc/<pid>/maps` of the caller's address
//! space ([`super::maps_path`]). A mapping of one of the simulator's own
//! memfds (a BO, a doorbell, the events page) stands for a device mapping,
//! which the kernel marks `VM_IO | VM_PFNMAP` (TTM's and KFD's mmap
//! handlers). This module never changes a mapping.

use ::kfd::Errno;

/// The name prefix of every memfd the simulator creates, as `/proc/*/maps`
/// shows it (`/memfd:kfd-sim-vram (deleted)`).
const DEVICE_MAPPING: &str = "/memfd:kfd-sim";

/// One line of a maps file: `[start, end)` and whether it maps a device.
fn parse_line(line: &str) -> Option<(u64, u64, bool)> {
    let mut fields = line.split_whitespace();
    let (lo, hi) = fields.next()?.split_once('-')?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let path = fields.nth(4).unwrap_or("");
    Some((lo, hi, path.starts_with(DEVICE_MAPPING)))
}

/// `svm_range_is_valid`'s walk (`kfd_svm.c`): every byte of `[start,
/// start+size)` lies in a CPU mapping that is not a device mapping
/// (`VM_IO | VM_PFNMAP | VM_MIXEDMAP`), else `EFAULT`.
pub(crate) fn check_mapped(maps: &str, start: u64, size: u64) -> Result<(), Errno> {
    let end = start.checked_add(size).ok_or(Errno(libc::EFAULT))?;
    let mut vmas: Vec<(u64, u64, bool)> = maps.lines().filter_map(parse_line).collect();
    vmas.sort_unstable();
    let mut cursor = start;
    while cursor < end {
        let vma = vmas
            .iter()
            .find(|&&(lo, hi, _)| lo <= cursor && cursor < hi)
            .ok_or(Errno(libc::EFAULT))?;
        if vma.2 {
            return Err(Errno(libc::EFAULT));
        }
        cursor = vma.1;
    }
    Ok(())
}

/// [`check_mapped`] against the caller's own address space.
pub(crate) fn check_caller_mapped(start: u64, size: u64) -> Result<(), Errno> {
    let maps = std::fs::read_to_string(super::maps_path()).map_err(|_| Errno(libc::EFAULT))?;
    check_mapped(&maps, start, size)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
7f0000000000-7f0000002000 rw-p 00000000 00:00 0
7f0000002000-7f0000004000 r--p 00000000 00:00 0 [heap]
7f0000004000-7f0000005000 rw-s 00000000 00:01 77 /memfd:kfd-sim-vram (deleted)
7f0000008000-7f0000009000 rw-p 00000000 00:00 0
";

    /// svm_range_is_valid: contiguous VMAs cover a range, a hole or a
    /// device mapping inside it is EFAULT.
    #[test]
    fn ranges_must_lie_in_plain_cpu_mappings() {
        let base = 0x7f00_0000_0000u64;
        assert_eq!(check_mapped(MAPS, base, 0x4000), Ok(()));
        assert_eq!(check_mapped(MAPS, base + 0x1000, 0x2000), Ok(()));
        assert_eq!(check_mapped(MAPS, base, 0x5000), Err(Errno(libc::EFAULT)));
        assert_eq!(
            check_mapped(MAPS, base + 0x4000, 0x1000),
            Err(Errno(libc::EFAULT))
        );
        assert_eq!(
            check_mapped(MAPS, base + 0x5000, 0x1000),
            Err(Errno(libc::EFAULT))
        );
        assert_eq!(check_mapped(MAPS, base + 0x8000, 0x1000), Ok(()));
        assert_eq!(
            check_mapped(MAPS, 0x10000, 0x1000),
            Err(Errno(libc::EFAULT))
        );
    }
}
