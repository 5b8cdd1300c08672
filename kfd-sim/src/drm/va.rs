//! The GPU virtual address space of one amdgpu DRM file (`amdgpu_vm`).
//!
//! A [`VaSpace`] records which GPU VA ranges map what, with the kernel's
//! rules for `DRM_IOCTL_AMDGPU_GEM_VA`: the reserved bottom 64 KiB, the
//! canonical hole, the reserve at the top of the VM, 4 KiB granularity, and
//! "any overlap with an existing mapping is `EINVAL`". The KFD half maps its
//! BOs into the same space when a render file becomes a compute VM, so both
//! halves see each other's mappings (kernel.md §4.3).
//!
//! This module only does bookkeeping: it never touches the memory behind a
//! mapping and never decides what a mapping's payload means.

use std::collections::BTreeMap;

/// GPU page size (`AMDGPU_GPU_PAGE_SIZE`).
pub(crate) const GPU_PAGE: u64 = 4096;
/// `AMDGPU_VA_RESERVED_BOTTOM`: VAs below this are never mappable.
pub(crate) const VA_RESERVED_BOTTOM: u64 = 1 << 16;
/// `AMDGPU_VA_RESERVED_TOP`: CSA (2 MiB) + SEQ64 (2 MiB) + trap handler (2 pages).
pub(crate) const VA_RESERVED_TOP: u64 = (2 << 20) + (2 << 20) + 2 * GPU_PAGE;
/// `AMDGPU_GMC_HOLE_START`: first VA of the non-canonical hole.
pub(crate) const HOLE_START: u64 = 0x0000_8000_0000_0000;
/// `AMDGPU_GMC_HOLE_END`: first canonical VA above the hole.
pub(crate) const HOLE_END: u64 = 0xFFFF_8000_0000_0000;
/// `AMDGPU_GMC_HOLE_MASK`: strips the sign extension of a high VA.
pub(crate) const HOLE_MASK: u64 = 0x0000_FFFF_FFFF_FFFF;

/// Why a VA operation was refused. Each variant maps to the kernel's errno
/// through [`VaError::errno`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum VaError {
    /// The VA lies in the reserved bottom 64 KiB.
    #[error("gpu va {va:#x} is below the reserved bottom ({VA_RESERVED_BOTTOM:#x})")]
    BelowReservedBottom {
        /// The requested VA.
        va: u64,
    },
    /// The VA lies in the non-canonical hole.
    #[error("gpu va {va:#x} lies in the non-canonical hole")]
    InHole {
        /// The requested VA.
        va: u64,
    },
    /// The range ends above the usable VM size.
    #[error("gpu va range {va:#x}+{size:#x} ends above the vm limit {limit:#x}")]
    AboveVmLimit {
        /// The (hole-masked) VA.
        va: u64,
        /// The requested size.
        size: u64,
        /// The first VA past the usable space.
        limit: u64,
    },
    /// VA, offset or size is not a multiple of the GPU page size.
    #[error("gpu va map {va:#x}+{size:#x} at bo offset {offset:#x} is not 4 KiB aligned")]
    Misaligned {
        /// The VA.
        va: u64,
        /// The size.
        size: u64,
        /// The offset in the BO.
        offset: u64,
    },
    /// Size zero, or VA/offset plus size overflows.
    #[error("gpu va map {va:#x}+{size:#x} at bo offset {offset:#x} is empty or overflows")]
    EmptyOrOverflow {
        /// The VA.
        va: u64,
        /// The size.
        size: u64,
        /// The offset in the BO.
        offset: u64,
    },
    /// `offset + size` exceeds the BO.
    #[error(
        "gpu va map of {size:#x} bytes at bo offset {offset:#x} exceeds the bo size {bo_size:#x}"
    )]
    PastBoEnd {
        /// The offset in the BO.
        offset: u64,
        /// The size.
        size: u64,
        /// The BO size.
        bo_size: u64,
    },
    /// The new range overlaps an existing mapping.
    #[error("gpu va range {va:#x}+{size:#x} overlaps the mapping at {existing:#x}")]
    Overlap {
        /// The requested VA.
        va: u64,
        /// The requested size.
        size: u64,
        /// Start of the mapping it collides with.
        existing: u64,
    },
    /// UNMAP named no mapping of this BO starting exactly at `va`.
    #[error("no mapping of this bo starts at gpu va {va:#x}")]
    NotMapped {
        /// The requested VA.
        va: u64,
    },
}

impl VaError {
    /// The errno the kernel returns for this refusal.
    pub(crate) fn errno(&self) -> i32 {
        match self {
            VaError::NotMapped { .. } => libc::ENOENT,
            _ => libc::EINVAL,
        }
    }
}

/// One mapping: `size` bytes at GPU VA `start` showing the target from
/// `offset` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping<T> {
    /// First VA (hole-masked, page aligned).
    pub(crate) start: u64,
    /// Length in bytes (page multiple).
    pub(crate) size: u64,
    /// Offset into the target.
    pub(crate) offset: u64,
    /// `AMDGPU_VM_PAGE_*` flags as given to GEM_VA (or derived by KFD).
    pub(crate) flags: u32,
    /// What is mapped.
    pub(crate) target: T,
}

impl<T> Mapping<T> {
    /// One past the last mapped VA.
    pub(crate) fn end(&self) -> u64 {
        self.start + self.size
    }
}

/// A per-file GPU VM: non-overlapping mappings keyed by start VA.
#[derive(Debug, Clone)]
pub(crate) struct VaSpace<T> {
    /// `max_pfn * GPU_PAGE`: the hardware VM size in bytes.
    vm_bytes: u64,
    maps: BTreeMap<u64, Mapping<T>>,
}

impl<T: Clone> VaSpace<T> {
    /// An empty VM of `vm_bytes` bytes (a power of two: 2^48 on GFX9+).
    pub(crate) fn new(vm_bytes: u64) -> Self {
        VaSpace {
            vm_bytes,
            maps: BTreeMap::new(),
        }
    }

    /// The usable VM size: the hardware size minus the top reserve.
    pub(crate) fn usable_bytes(&self) -> u64 {
        self.vm_bytes.saturating_sub(VA_RESERVED_TOP)
    }

    /// The checks `amdgpu_gem_va_ioctl` makes on every operation's VA range
    /// before it looks at the operation; returns the hole-masked VA.
    pub(crate) fn check_ioctl_range(&self, va: u64, size: u64) -> Result<u64, VaError> {
        if va < VA_RESERVED_BOTTOM {
            return Err(VaError::BelowReservedBottom { va });
        }
        if (HOLE_START..HOLE_END).contains(&va) {
            return Err(VaError::InHole { va });
        }
        let masked = va & HOLE_MASK;
        let limit = self.usable_bytes();
        match masked.checked_add(size) {
            Some(end) if end <= limit => Ok(masked),
            _ => Err(VaError::AboveVmLimit {
                va: masked,
                size,
                limit,
            }),
        }
    }

    /// `amdgpu_vm_verify_parameters`: alignment, size ≠ 0, no overflow, fits
    /// in the target (when it has a size) and below `max_pfn`.
    fn verify(
        &self,
        start: u64,
        size: u64,
        offset: u64,
        target_size: Option<u64>,
    ) -> Result<(), VaError> {
        if !start.is_multiple_of(GPU_PAGE)
            || !offset.is_multiple_of(GPU_PAGE)
            || !size.is_multiple_of(GPU_PAGE)
        {
            return Err(VaError::Misaligned {
                va: start,
                size,
                offset,
            });
        }
        let overflow = VaError::EmptyOrOverflow {
            va: start,
            size,
            offset,
        };
        let end = match start.checked_add(size) {
            Some(end) if size != 0 => end,
            _ => return Err(overflow),
        };
        let bo_end = offset.checked_add(size).ok_or(overflow)?;
        if let Some(bo_size) = target_size {
            if bo_end > bo_size {
                return Err(VaError::PastBoEnd {
                    offset,
                    size,
                    bo_size,
                });
            }
        }
        if end > self.vm_bytes {
            return Err(VaError::AboveVmLimit {
                va: start,
                size,
                limit: self.vm_bytes,
            });
        }
        Ok(())
    }

    /// The first existing mapping intersecting `[start, end)` (the KFD half
    /// checks its MAP_MEMORY_TO_GPU ranges of a compute VM with this).
    pub(crate) fn first_overlap(&self, start: u64, end: u64) -> Option<&Mapping<T>> {
        if let Some((_, m)) = self.maps.range(..start).next_back() {
            if m.end() > start {
                return Some(m);
            }
        }
        self.maps.range(start..end).next().map(|(_, m)| m)
    }

    /// MAP: insert a mapping; `target_size` is the BO size (None for PRT).
    pub(crate) fn map(
        &mut self,
        start: u64,
        size: u64,
        offset: u64,
        target_size: Option<u64>,
        flags: u32,
        target: T,
    ) -> Result<(), VaError> {
        self.verify(start, size, offset, target_size)?;
        if let Some(existing) = self.first_overlap(start, start + size) {
            return Err(VaError::Overlap {
                va: start,
                size,
                existing: existing.start,
            });
        }
        self.maps.insert(
            start,
            Mapping {
                start,
                size,
                offset,
                flags,
                target,
            },
        );
        Ok(())
    }

    /// UNMAP: remove the mapping that starts exactly at `start` and whose
    /// target satisfies `is_target` (the kernel searches only the named BO's
    /// mappings).
    pub(crate) fn unmap(
        &mut self,
        start: u64,
        is_target: impl Fn(&T) -> bool,
    ) -> Result<Mapping<T>, VaError> {
        match self.maps.get(&start) {
            Some(m) if is_target(&m.target) => {}
            _ => return Err(VaError::NotMapped { va: start }),
        }
        self.maps
            .remove(&start)
            .ok_or(VaError::NotMapped { va: start })
    }

    /// CLEAR: remove every mapping inside `[start, start+size)`, splitting
    /// mappings that straddle its edges so their outside parts survive.
    pub(crate) fn clear(&mut self, start: u64, size: u64) -> Result<(), VaError> {
        self.verify(start, size, 0, None)?;
        let end = start + size;
        let hit: Vec<u64> = {
            let mut keys = Vec::new();
            if let Some((k, m)) = self.maps.range(..start).next_back() {
                if m.end() > start {
                    keys.push(*k);
                }
            }
            keys.extend(self.maps.range(start..end).map(|(k, _)| *k));
            keys
        };
        for key in hit {
            let Some(m) = self.maps.remove(&key) else {
                continue;
            };
            if m.start < start {
                let mut head = m.clone();
                head.size = start - m.start;
                self.maps.insert(head.start, head);
            }
            if m.end() > end {
                let mut tail = m.clone();
                tail.offset = m.offset + (end - m.start);
                tail.start = end;
                tail.size = m.end() - end;
                self.maps.insert(tail.start, tail);
            }
        }
        Ok(())
    }

    /// REPLACE: like MAP, but whatever was in the range is cleared first
    /// instead of causing `EINVAL`.
    pub(crate) fn replace(
        &mut self,
        start: u64,
        size: u64,
        offset: u64,
        target_size: Option<u64>,
        flags: u32,
        target: T,
    ) -> Result<(), VaError> {
        self.verify(start, size, offset, target_size)?;
        self.clear(start, size)?;
        self.map(start, size, offset, target_size, flags, target)
    }

    /// Remove every mapping whose target satisfies `pred` (a BO leaving the
    /// VM: last handle closed, KFD free); returns how many were removed.
    pub(crate) fn remove_where(&mut self, pred: impl Fn(&T) -> bool) -> usize {
        let before = self.maps.len();
        self.maps.retain(|_, m| !pred(&m.target));
        before - self.maps.len()
    }

    /// The mapping containing `va`, if any.
    #[cfg(test)]
    pub(crate) fn lookup(&self, va: u64) -> Option<&Mapping<T>> {
        let (_, m) = self.maps.range(..=va).next_back()?;
        (va < m.end()).then_some(m)
    }

    /// All mappings in VA order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Mapping<T>> {
        self.maps.values()
    }

    /// Number of mappings.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.maps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VM48: u64 = 1 << 48;
    const MIB: u64 = 1 << 20;

    fn space() -> VaSpace<u32> {
        VaSpace::new(VM48)
    }

    #[test]
    fn ioctl_range_rules() {
        let vm = space();
        assert_eq!(
            vm.check_ioctl_range(0xF000, 0x1000),
            Err(VaError::BelowReservedBottom { va: 0xF000 })
        );
        assert_eq!(vm.check_ioctl_range(0x1_0000, 0x1000), Ok(0x1_0000));
        assert!(matches!(
            vm.check_ioctl_range(HOLE_START, 0x1000),
            Err(VaError::InHole { .. })
        ));
        assert!(matches!(
            vm.check_ioctl_range(HOLE_END - 0x1000, 0x1000),
            Err(VaError::InHole { .. })
        ));
        // A high VA is masked into the upper half of the 48-bit VM.
        assert_eq!(vm.check_ioctl_range(HOLE_END, 0x1000), Ok(HOLE_START));
        // The top of the usable space is only reachable through high VAs.
        let top = VM48 - VA_RESERVED_TOP;
        let high = HOLE_END | (top - 0x1000);
        assert_eq!(vm.check_ioctl_range(high, 0x1000), Ok(top - 0x1000));
        assert!(matches!(
            vm.check_ioctl_range(high, 0x2000),
            Err(VaError::AboveVmLimit { .. })
        ));
        assert!(matches!(
            vm.check_ioctl_range(0x1_0000, u64::MAX),
            Err(VaError::AboveVmLimit { .. })
        ));
        assert_eq!(
            VaError::AboveVmLimit {
                va: 0,
                size: 0,
                limit: 0
            }
            .errno(),
            libc::EINVAL
        );
    }

    #[test]
    fn map_parameter_rules() {
        let mut vm = space();
        let e = vm
            .map(0x10_0800, 0x1000, 0, Some(0x1000), 0, 1)
            .unwrap_err();
        assert!(matches!(e, VaError::Misaligned { .. }));
        let e = vm
            .map(0x10_0000, 0x1000, 0x800, Some(0x2000), 0, 1)
            .unwrap_err();
        assert!(matches!(e, VaError::Misaligned { .. }));
        let e = vm
            .map(0x10_0000, 0x1800, 0, Some(0x2000), 0, 1)
            .unwrap_err();
        assert!(matches!(e, VaError::Misaligned { .. }));
        let e = vm.map(0x10_0000, 0, 0, Some(0x2000), 0, 1).unwrap_err();
        assert!(matches!(e, VaError::EmptyOrOverflow { .. }));
        let e = vm
            .map(0x10_0000, 0x2000, 0x1000, Some(0x2000), 0, 1)
            .unwrap_err();
        assert!(matches!(e, VaError::PastBoEnd { .. }));
        let e = vm
            .map(VM48 - 0x1000, 0x2000, 0, Some(0x2000), 0, 1)
            .unwrap_err();
        assert!(matches!(e, VaError::AboveVmLimit { .. }));
        vm.map(0x10_0000, 0x1000, 0x1000, Some(0x2000), 6, 1)
            .unwrap();
        assert_eq!(vm.len(), 1);
        let m = vm.lookup(0x10_0FFF).unwrap();
        assert_eq!(
            (m.start, m.size, m.offset, m.flags, m.target),
            (0x10_0000, 0x1000, 0x1000, 6, 1)
        );
        assert!(vm.lookup(0x10_1000).is_none());
        assert!(vm.lookup(0xF_FFFF).is_none());
    }

    #[test]
    fn any_overlap_is_refused() {
        let mut vm = space();
        vm.map(4 * MIB, 2 * MIB, 0, Some(2 * MIB), 0, 1).unwrap();
        // Inside, straddling either edge, covering, and identical ranges.
        for (va, size) in [
            (4 * MIB, 2 * MIB),
            (5 * MIB, 0x1000),
            (3 * MIB, 2 * MIB),
            (6 * MIB - 0x1000, 2 * MIB),
            (2 * MIB, 8 * MIB),
        ] {
            let e = vm.map(va, size, 0, None, 0, 2).unwrap_err();
            assert_eq!(
                e,
                VaError::Overlap {
                    va,
                    size,
                    existing: 4 * MIB
                },
                "{va:#x}+{size:#x}"
            );
        }
        // Adjacent on both sides is fine.
        vm.map(6 * MIB, 0x1000, 0, None, 0, 2).unwrap();
        vm.map(4 * MIB - 0x1000, 0x1000, 0, None, 0, 3).unwrap();
        assert_eq!(vm.len(), 3);
    }

    #[test]
    fn unmap_needs_exact_start_and_owner() {
        let mut vm = space();
        vm.map(4 * MIB, 2 * MIB, 0, Some(2 * MIB), 0, 7).unwrap();
        let e = vm.unmap(4 * MIB + 0x1000, |t| *t == 7).unwrap_err();
        assert_eq!(
            e,
            VaError::NotMapped {
                va: 4 * MIB + 0x1000
            }
        );
        assert_eq!(e.errno(), libc::ENOENT);
        assert!(vm.unmap(4 * MIB, |t| *t == 8).is_err());
        let m = vm.unmap(4 * MIB, |t| *t == 7).unwrap();
        assert_eq!(m.size, 2 * MIB);
        assert_eq!(vm.len(), 0);
        assert!(vm.unmap(4 * MIB, |t| *t == 7).is_err());
    }

    #[test]
    fn clear_splits_straddling_mappings() {
        let mut vm = space();
        vm.map(0x10_0000, 0x4000, 0, Some(0x4000), 0, 1).unwrap();
        vm.map(0x20_0000, 0x1000, 0, Some(0x1000), 0, 2).unwrap();
        vm.clear(0x10_1000, 0x2000).unwrap();
        let maps: Vec<_> = vm
            .iter()
            .map(|m| (m.start, m.size, m.offset, m.target))
            .collect();
        assert_eq!(
            maps,
            vec![
                (0x10_0000, 0x1000, 0, 1),
                (0x10_3000, 0x1000, 0x3000, 1),
                (0x20_0000, 0x1000, 0, 2)
            ]
        );
        assert!(vm.clear(0x10_0800, 0x1000).is_err());
    }

    #[test]
    fn replace_overrides_instead_of_failing() {
        let mut vm = space();
        vm.map(0x10_0000, 0x3000, 0, Some(0x3000), 0, 1).unwrap();
        vm.replace(0x10_1000, 0x1000, 0, Some(0x1000), 0, 9)
            .unwrap();
        let maps: Vec<_> = vm.iter().map(|m| (m.start, m.size, m.target)).collect();
        assert_eq!(
            maps,
            vec![
                (0x10_0000, 0x1000, 1),
                (0x10_1000, 0x1000, 9),
                (0x10_2000, 0x1000, 1)
            ]
        );
        assert_eq!(vm.remove_where(|t| *t == 1), 2);
        assert_eq!(vm.len(), 1);
    }
}
