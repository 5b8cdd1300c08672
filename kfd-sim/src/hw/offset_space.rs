//! The DRM fake-offset space of one device: where BOs are mmapped through
//! a render node.
//!
//! In the kernel every GEM object of a `drm_device` gets its mmap offset
//! from the device's `drm_vma_offset_manager` (`drm_vma_offset_add` in
//! `drivers/gpu/drm/drm_vma_manager.c`, called by TTM when an amdgpu BO is
//! created), a `drm_mm` range allocator over
//! `[DRM_FILE_PAGE_OFFSET_START, + DRM_FILE_PAGE_OFFSET_SIZE)` pages
//! (`include/drm/drm_vma_manager.h`). `drm_mm_insert_node` uses
//! `DRM_MM_INSERT_BEST`: the smallest hole that fits, the node at the
//! hole's start (`drivers/gpu/drm/drm_mm.c`, `best_hole`). Freeing a BO
//! removes its node (`drm_vma_offset_remove`), so its range is a hole again
//! (merged with free neighbours) and later BOs reuse it; the window runs
//! out (`-ENOSPC`) only when the BOs alive at once fill it.
//!
//! Simplification: among holes of the same size `drm_mm` takes the one its
//! size tree holds rightmost; here it is the lowest one. Both operations
//! take logarithmic time, as `drm_mm`'s do. This module only hands out
//! ranges; it never knows what they are for.

use std::collections::{BTreeMap, BTreeSet};

use ::kfd::Errno;

/// First DRM fake mmap offset in bytes: `DRM_FILE_PAGE_OFFSET_START`
/// (`(0xFFFFFFFF >> PAGE_SHIFT) + 1` pages) on 64-bit.
pub(crate) const DRM_FILE_PAGE_OFFSET_START: u64 = 0x1_0000_0000;
/// Size of the window in bytes: `DRM_FILE_PAGE_OFFSET_SIZE`
/// (`(0xFFFFFFFF >> PAGE_SHIFT) * 256` pages), 1 MiB short of 1 TiB.
pub(crate) const DRM_FILE_PAGE_OFFSET_SIZE: u64 = 0xF_FFFF * 256 * 4096;

/// One device's window: allocated ranges and the holes between them.
#[derive(Debug, Clone)]
pub(crate) struct OffsetSpace {
    /// Allocated ranges: start → length.
    used: BTreeMap<u64, u64>,
    /// Holes: start → length, and the same as (length, start) for best fit.
    holes: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
}

impl Default for OffsetSpace {
    fn default() -> Self {
        let mut space = OffsetSpace {
            used: BTreeMap::new(),
            holes: BTreeMap::new(),
            by_size: BTreeSet::new(),
        };
        space.add_hole(DRM_FILE_PAGE_OFFSET_START, DRM_FILE_PAGE_OFFSET_SIZE);
        space
    }
}

impl OffsetSpace {
    fn add_hole(&mut self, start: u64, len: u64) {
        self.holes.insert(start, len);
        self.by_size.insert((len, start));
    }

    fn remove_hole(&mut self, start: u64) -> Option<u64> {
        let len = self.holes.remove(&start)?;
        self.by_size.remove(&(len, start));
        Some(len)
    }

    /// A range of `len` bytes (a whole number of pages, at least one):
    /// the smallest hole that holds it, at the hole's start; `ENOSPC` when
    /// no hole does.
    pub(crate) fn alloc(&mut self, len: u64) -> Result<u64, Errno> {
        let &(hole, start) = self
            .by_size
            .range((len, 0)..)
            .next()
            .ok_or(Errno(libc::ENOSPC))?;
        self.remove_hole(start);
        if hole > len {
            self.add_hole(start + len, hole - len);
        }
        self.used.insert(start, len);
        Ok(start)
    }

    /// Releases the range starting at `start` (no-op for an unknown one),
    /// merging it with the holes beside it.
    pub(crate) fn free(&mut self, start: u64) {
        let Some(mut len) = self.used.remove(&start) else {
            return;
        };
        let mut start = start;
        if let Some(after) = self.remove_hole(start + len) {
            len += after;
        }
        let before = self
            .holes
            .range(..start)
            .next_back()
            .map(|(&s, &l)| (s, l))
            .filter(|&(s, l)| s + l == start);
        if let Some((s, l)) = before {
            self.remove_hole(s);
            start = s;
            len += l;
        }
        self.add_hole(start, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    /// drm_mm with DRM_MM_INSERT_BEST: a freed range is reused by the next
    /// BO it fits, the smallest fitting hole wins, and freed neighbours
    /// merge into one hole.
    #[test]
    fn freed_offsets_are_reused_best_fit() {
        let mut s = OffsetSpace::default();
        let a = s.alloc(4 * PAGE).unwrap();
        let b = s.alloc(PAGE).unwrap();
        let c = s.alloc(2 * PAGE).unwrap();
        let _d = s.alloc(PAGE).unwrap();
        assert_eq!(a, DRM_FILE_PAGE_OFFSET_START);
        assert_eq!((b, c), (a + 4 * PAGE, a + 5 * PAGE));
        s.free(a);
        s.free(c);
        // Holes: 4 pages at a, 2 pages at c, the rest of the window: a
        // 2-page BO takes c's hole, a 3-page one a's.
        assert_eq!(s.alloc(2 * PAGE).unwrap(), c);
        assert_eq!(s.alloc(3 * PAGE).unwrap(), a);
        assert_eq!(s.alloc(PAGE).unwrap(), a + 3 * PAGE);
        // Freeing b and its neighbours leaves one 7-page hole.
        s.free(a);
        s.free(c);
        s.free(b);
        s.free(a + 3 * PAGE);
        assert_eq!(s.alloc(7 * PAGE).unwrap(), a);
    }

    #[test]
    fn the_window_holds_what_is_alive_at_once() {
        let mut s = OffsetSpace::default();
        let half = DRM_FILE_PAGE_OFFSET_SIZE / 2;
        // Allocating and freeing far more than the window never runs out.
        for _ in 0..16 {
            let x = s.alloc(half).unwrap();
            s.free(x);
        }
        let x = s.alloc(half).unwrap();
        let y = s.alloc(half).unwrap();
        assert_eq!(y, x + half);
        assert_eq!(s.alloc(PAGE), Err(Errno(libc::ENOSPC)));
        s.free(x);
        assert_eq!(s.alloc(PAGE).unwrap(), x);
    }
}
