//! What the benchmark's BOs hold: the fill layouts (dense, one page in
//! ten, zero runs), defined once in [`Fill::page_holds_data`], the BOs'
//! placement over the GPUs ([`BoPlan`]) and their bytes. Pure functions of
//! position: the plugin runs and the raw baselines see the same bytes.

/// Size of the pages of the fill patterns.
pub const FILL_PAGE: u64 = 4096;

/// How the benchmark's BOs are filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Every page holds non-zero bytes.
    Dense,
    /// One page in ten holds non-zero bytes, the other nine are zero: the
    /// most fragmented 90 %-zero BO.
    MostlyZero,
    /// 90 % zero in long runs, as memory an allocator reserved but used a
    /// tenth of: in every 10 MiB of a BO the first 1 MiB holds data.
    ZeroRuns,
}

impl Fill {
    /// Whether the [`FILL_PAGE`]-sized page number `page` of a BO holds
    /// data (non-zero words); all other pages are zero. The one place the
    /// layouts are defined.
    pub fn page_holds_data(self, page: u64) -> bool {
        match self {
            Fill::Dense => true,
            Fill::MostlyZero => page.is_multiple_of(10),
            Fill::ZeroRuns => (page / 256).is_multiple_of(10),
        }
    }

    /// The runs of data pages of a BO of `size` bytes as byte ranges
    /// `(offset, len)` in BO order, adjacent data pages merged.
    pub fn data_runs(self, size: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for page in 0..size.div_ceil(FILL_PAGE) {
            if !self.page_holds_data(page) {
                continue;
            }
            let start = page * FILL_PAGE;
            let len = (size - start).min(FILL_PAGE);
            match runs.last_mut() {
                Some((offset, run)) if *offset + *run == start => *run += len,
                _ => runs.push((start, len)),
            }
        }
        runs
    }
}

/// One BO of the benchmark before it is allocated: where it goes and what
/// it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoPlan {
    /// Index of its GPU among the machine's GPUs.
    pub gpu_index: usize,
    /// Its number among the BOs of its GPU.
    pub number: u64,
    /// Size in bytes.
    pub size: u64,
}

impl BoPlan {
    /// The BOs of `total` bytes of BOs of `bo_bytes` each, spread evenly
    /// over `gpus` GPUs, in allocation order (GPU by GPU).
    pub fn spread(gpus: usize, total: u64, bo_bytes: u64) -> Vec<BoPlan> {
        let per_gpu = total / gpus.max(1) as u64;
        let mut out = Vec::new();
        for gpu_index in 0..gpus {
            let mut left = per_gpu;
            let mut number = 0u64;
            while left > 0 {
                let size = left.min(bo_bytes.max(1));
                out.push(BoPlan {
                    gpu_index,
                    number,
                    size,
                });
                left -= size;
                number += 1;
            }
        }
        out
    }

    /// Fills `buf` with the BO's bytes at `offset` (8-byte aligned) as
    /// `fill` lays them out: non-repeating non-zero words in data pages,
    /// zeros elsewhere.
    pub fn contents(&self, buf: &mut [u8], offset: u64, fill: Fill) {
        fill_chunk(
            buf,
            (self.gpu_index as u64) << 48 | self.number << 32,
            offset,
            fill,
        );
    }
}

/// Fills `buf` (the bytes at `offset` of a BO) with non-repeating non-zero
/// words where [`Fill::page_holds_data`] says, zeros elsewhere.
pub(super) fn fill_chunk(buf: &mut [u8], seed: u64, offset: u64, fill: Fill) {
    for (i, word) in buf.chunks_exact_mut(8).enumerate() {
        let at = offset + 8 * i as u64;
        let value = if fill.page_holds_data(at / FILL_PAGE) {
            (seed ^ at).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
        } else {
            0
        };
        word.copy_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: u64 = 4096;

    #[test]
    fn layouts_put_data_pages_where_they_say() {
        // Spot checks of the rule itself, written out by hand.
        for (page, data) in [
            (0, true),
            (255, true),
            (256, false),
            (2559, false),
            (2560, true),
        ] {
            assert_eq!(Fill::ZeroRuns.page_holds_data(page), data, "page {page}");
        }
        for (page, data) in [(0, true), (1, false), (9, false), (10, true), (11, false)] {
            assert_eq!(Fill::MostlyZero.page_holds_data(page), data, "page {page}");
        }
        assert_eq!(
            Fill::ZeroRuns.data_runs((12 << 20) + 3 * BLOCK),
            vec![(0, 1 << 20), (10 << 20, 1 << 20)]
        );
        assert_eq!(
            Fill::MostlyZero.data_runs(21 * BLOCK + 100),
            vec![(0, BLOCK), (10 * BLOCK, BLOCK), (20 * BLOCK, BLOCK)]
        );
        assert_eq!(
            Fill::Dense.data_runs(3 * BLOCK + 8),
            vec![(0, 3 * BLOCK + 8)]
        );
        // Contents depend on the position only, not on how they are chunked.
        let bo = BoPlan::spread(1, 2 * BLOCK, 2 * BLOCK)[0];
        let mut whole = vec![0u8; 2 * BLOCK as usize];
        bo.contents(&mut whole, 0, Fill::Dense);
        let mut tail = vec![0u8; BLOCK as usize + 64];
        bo.contents(&mut tail, BLOCK - 64, Fill::Dense);
        assert_eq!(&whole[BLOCK as usize - 64..], &tail[..]);
        assert!(whole.chunks_exact(8).all(|w| w != [0; 8]));
    }
}
