//! [`PagesLayout`]: which BOs a pages file holds, their sizes, offsets and
//! expected checksums or chunk digests.

use crate::chunks::{ChecksumAlgo, Digest};

/// One BO of a pages file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagesBo {
    /// Index of the BO in its message's `bo_entries`.
    pub entry: usize,
    /// Size in bytes.
    pub size: u64,
    /// Recorded checksum, if the image carries one.
    pub checksum: Option<u64>,
}

/// Which BOs a pages file holds, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PagesLayout {
    bos: Vec<PagesBo>,
    offsets: Vec<u64>,
    total: u64,
    pub(super) algo: ChecksumAlgo,
    /// Per BO (layout order, or empty): the digests of the chunks of the BO
    /// this file holds, in file order.
    digests: Vec<Option<Vec<Digest>>>,
}

impl PagesLayout {
    /// Builds a layout; `None` if the sizes add up beyond `u64`.
    pub fn new(bos: Vec<PagesBo>) -> Option<Self> {
        let mut offsets = Vec::with_capacity(bos.len());
        let mut total = 0u64;
        for bo in &bos {
            offsets.push(total);
            total = total.checked_add(bo.size)?;
        }
        Some(Self {
            bos,
            offsets,
            total,
            algo: ChecksumAlgo::V1,
            digests: Vec::new(),
        })
    }

    /// The same layout with checksums in `algo` and, per BO (layout
    /// order), the expected digests of the chunks this file holds
    /// ([`ChecksumAlgo::V2`] only; readers verify each chunk as it
    /// completes). `digests` may be empty (no chunk is checked) or must
    /// have one slot per BO; `None` when its length fits neither.
    pub fn with_chunks(
        mut self,
        algo: ChecksumAlgo,
        digests: Vec<Option<Vec<Digest>>>,
    ) -> Option<Self> {
        if !digests.is_empty() && digests.len() != self.bos.len() {
            return None;
        }
        self.algo = algo;
        self.digests = digests;
        Some(self)
    }

    /// The algorithm of the layout's checksums.
    pub fn algo(&self) -> ChecksumAlgo {
        self.algo
    }

    /// Expected digests of BO `index`'s chunks in this file, if recorded.
    pub fn expected_digests(&self, index: usize) -> Option<&[Digest]> {
        self.digests.get(index)?.as_deref()
    }

    /// Whether BO `index`'s bytes are verified while read (a checksum or digests).
    pub(super) fn verifies(&self, index: usize) -> bool {
        self.bos.get(index).is_some_and(|b| b.checksum.is_some())
            || self.expected_digests(index).is_some()
    }

    /// A layout of BOs with the given sizes, numbered 0.., without checksums.
    pub fn from_sizes(sizes: impl IntoIterator<Item = u64>) -> Option<Self> {
        Self::new(
            sizes
                .into_iter()
                .enumerate()
                .map(|(entry, size)| PagesBo {
                    entry,
                    size,
                    checksum: None,
                })
                .collect(),
        )
    }

    /// The BOs in file order.
    pub fn bos(&self) -> &[PagesBo] {
        &self.bos
    }

    /// Payload length: the sum of the BO sizes (the value of the length header).
    pub fn total_len(&self) -> u64 {
        self.total
    }

    /// Offset of BO `index` within the payload.
    pub fn offset_of(&self, index: usize) -> Option<u64> {
        self.offsets.get(index).copied()
    }

    /// Whether every BO has a recorded checksum.
    pub fn has_checksums(&self) -> bool {
        self.bos.iter().all(|b| b.checksum.is_some())
    }
}
