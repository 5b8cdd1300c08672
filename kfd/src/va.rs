//! A small GPU virtual-address allocator for one DRM file's VM.
//!
//! The copy engine maps imported BOs, staging buffers and IBs into the VM of
//! the render-node file it uses. [`VaAllocator`] hands out aligned ranges from
//! a window, **top-down** (highest free addresses first) so that the low part
//! of the window, where applications usually place their own mappings, is
//! touched last; callers that share the VM with KFD (the restore path, where
//! the render fd is also the process's compute VM) reserve the KFD BOs'
//! ranges with [`VaAllocator::reserve`] or pass a window that avoids them.
//! Pure bookkeeping: this module never talks to the kernel.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::error::{Error, Result};

/// Hands out aligned, non-overlapping ranges of a VA window.
#[derive(Debug, Clone)]
pub struct VaAllocator {
    alignment: u64,
    /// Free ranges, start → end (exclusive), never adjacent or overlapping.
    free: BTreeMap<u64, u64>,
    /// Live allocations, start → end (exclusive).
    used: BTreeMap<u64, u64>,
}

impl VaAllocator {
    /// An allocator over `window` (shrunk inward to `alignment`), with every
    /// allocation aligned to `alignment` (a power of two, at least 4 KiB).
    pub fn new(window: Range<u64>, alignment: u64) -> Result<Self> {
        const OP: &str = "VA allocator";
        if !alignment.is_power_of_two() || alignment < 4096 {
            return Err(Error::invalid(
                OP,
                format!("alignment {alignment:#x} is not a power of two of at least 4 KiB"),
            ));
        }
        let start = window
            .start
            .checked_next_multiple_of(alignment)
            .unwrap_or(u64::MAX);
        let end = window.end & !(alignment - 1);
        let mut free = BTreeMap::new();
        if start < end {
            free.insert(start, end);
        }
        Ok(VaAllocator {
            alignment,
            free,
            used: BTreeMap::new(),
        })
    }

    /// The allocation alignment.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Total free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.free.iter().map(|(s, e)| e - s).sum()
    }

    /// Removes `range` (widened outward to the alignment) from the free
    /// space, so no later allocation overlaps it. Parts outside the window or
    /// already allocated are ignored.
    pub fn reserve(&mut self, range: Range<u64>) {
        let start = range.start & !(self.alignment - 1);
        let end = range
            .end
            .checked_next_multiple_of(self.alignment)
            .unwrap_or(!(self.alignment - 1));
        if start >= end {
            return;
        }
        let overlapping: Vec<(u64, u64)> = self
            .free
            .range(..end)
            .filter(|&(_, &e)| e > start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in overlapping {
            self.free.remove(&s);
            if s < start {
                self.free.insert(s, start);
            }
            if e > end {
                self.free.insert(end, e);
            }
        }
    }

    /// Allocates `size` bytes (rounded up to the alignment) from the highest
    /// free range that fits. Returns the start address.
    pub fn alloc(&mut self, size: u64) -> Result<u64> {
        const OP: &str = "VA allocation";
        if size == 0 {
            return Err(Error::invalid(OP, "cannot allocate 0 bytes"));
        }
        let size = size
            .checked_next_multiple_of(self.alignment)
            .ok_or_else(|| Error::invalid(OP, format!("{size} bytes overflow")))?;
        let found = self
            .free
            .iter()
            .rev()
            .find(|&(&s, &e)| e - s >= size)
            .map(|(&s, &e)| (s, e));
        let Some((s, e)) = found else {
            return Err(Error::Os {
                op: "VA allocation (window exhausted)",
                errno: libc::ENOSPC,
            });
        };
        let va = e - size;
        self.free.remove(&s);
        if s < va {
            self.free.insert(s, va);
        }
        self.used.insert(va, e);
        Ok(va)
    }

    /// Returns the allocation starting at `va` to the free space.
    pub fn free(&mut self, va: u64) -> Result<()> {
        let Some(end) = self.used.remove(&va) else {
            return Err(Error::invalid(
                "VA free",
                format!("{va:#x} is not the start of a live allocation"),
            ));
        };
        let mut start = va;
        let mut end = end;
        // Merge with the free range just below and just above.
        if let Some((&s, &e)) = self.free.range(..start).next_back() {
            if e == start {
                self.free.remove(&s);
                start = s;
            }
        }
        if let Some(e) = self.free.remove(&end) {
            end = e;
        }
        self.free.insert(start, end);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K4: u64 = 4096;

    #[test]
    fn allocates_top_down_and_aligned() {
        let mut va = VaAllocator::new(0x1_0000..0x10_0000, K4).unwrap();
        let a = va.alloc(100).unwrap();
        assert_eq!(a, 0x10_0000 - K4);
        let b = va.alloc(2 * K4).unwrap();
        assert_eq!(b, a - 2 * K4);
        assert_eq!(va.free_bytes(), 0x10_0000 - 0x1_0000 - 3 * K4);
    }

    #[test]
    fn window_is_shrunk_to_alignment() {
        let va = VaAllocator::new(0x1_0001..0x2_0fff, 0x1_0000).unwrap();
        assert_eq!(va.free_bytes(), 0);
        let va = VaAllocator::new(0x1_0001..0x4_0fff, 0x1_0000).unwrap();
        assert_eq!(va.free_bytes(), 0x2_0000);
        assert!(VaAllocator::new(0..0x1000, 3000).is_err());
        assert!(VaAllocator::new(0..0x1000, 1024).is_err());
    }

    #[test]
    fn free_coalesces_and_space_is_reused() {
        let mut va = VaAllocator::new(0x1_0000..0x1_0000 + 8 * K4, K4).unwrap();
        let a = va.alloc(K4).unwrap();
        let b = va.alloc(K4).unwrap();
        let c = va.alloc(K4).unwrap();
        va.free(b).unwrap();
        va.free(a).unwrap();
        va.free(c).unwrap();
        assert_eq!(va.free.len(), 1);
        assert_eq!(va.alloc(8 * K4).unwrap(), 0x1_0000);
    }

    #[test]
    fn exhaustion_is_enospc() {
        let mut va = VaAllocator::new(0x1_0000..0x1_0000 + 2 * K4, K4).unwrap();
        va.alloc(2 * K4).unwrap();
        let err = va.alloc(1).unwrap_err();
        assert_eq!(err.errno(), libc::ENOSPC);
        assert!(va.alloc(0).is_err());
        assert!(va.alloc(u64::MAX).is_err());
    }

    #[test]
    fn double_free_is_refused() {
        let mut va = VaAllocator::new(0x1_0000..0x10_0000, K4).unwrap();
        let a = va.alloc(K4).unwrap();
        va.free(a).unwrap();
        assert!(va.free(a).is_err());
        assert!(va.free(a + K4).is_err());
    }

    #[test]
    fn reserved_ranges_are_never_handed_out() {
        let mut va = VaAllocator::new(0x1_0000..0x20_0000, K4).unwrap();
        // A KFD BO near the top of the window, unaligned.
        va.reserve(0x1F_0010..0x1F_8001);
        let mut got = Vec::new();
        while let Ok(a) = va.alloc(0x1_0000) {
            got.push(a);
        }
        assert!(!got.is_empty());
        for a in &got {
            let end = a + 0x1_0000;
            assert!(end <= 0x1F_0000 || *a >= 0x1F_9000, "{a:#x} overlaps");
        }
        // Reserving outside the window or an empty range is harmless.
        va.reserve(0..0);
        va.reserve(0x100_0000..0x200_0000);
    }

    #[test]
    fn reserve_splits_a_free_range() {
        let mut va = VaAllocator::new(0x1_0000..0x1_0000 + 10 * K4, K4).unwrap();
        va.reserve(0x1_0000 + 4 * K4..0x1_0000 + 6 * K4);
        assert_eq!(va.free_bytes(), 8 * K4);
        assert!(va.alloc(5 * K4).is_err());
        assert_eq!(va.alloc(4 * K4).unwrap(), 0x1_0000 + 6 * K4);
        assert_eq!(va.alloc(4 * K4).unwrap(), 0x1_0000);
    }
}
