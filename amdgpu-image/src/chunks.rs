//! Chunk digests (format version 2): every BO's contents cut into fixed
//! chunks, each with a 128-bit XXH3 digest, and the per-BO checksum derived
//! from them.
//!
//! # Algorithms
//!
//! - A chunk is [`CHUNK_SIZE`] bytes of one BO starting at a multiple of the
//!   chunk size (the BO's last chunk may be shorter); chunks never span BOs.
//! - [`chunk_digest`]: XXH3-128 (xxHash's published 128-bit variant, crate
//!   `twox-hash`, which picks AVX2 or NEON at run time) of the chunk's
//!   bytes, seed 0, default secret. The tests check it against a second
//!   implementation (`xxhash-rust`).
//! - The per-BO `content_checksum` (tag 100) of a version-2 image is
//!   [`bo_checksum`]: XXH3-64 with seed = the BO's size over the BO's chunk
//!   digests, each as 16 little-endian bytes, in order. Every byte of the BO
//!   feeds it through its chunk's digest, so the one pass that computes the
//!   digests also gives the checksum (no second hash of the bytes).
//!   Version-1 images keep the hand-written hash of
//!   [`checksum`](crate::checksum); readers pick by the image's
//!   `format_version` ([`ChecksumAlgo`]).
//!
//! # Trust model
//!
//! A digest match stands in for a byte comparison: an incremental dump
//! writes a chunk whose digest the parent dump holds as a reference, and a
//! deduplicated dump writes each distinct digest once. The contents are
//! the application's own GPU memory, written by the application, not by an
//! adversary choosing collisions; XXH3 is not collision resistant against
//! one. For non-adversarial data a 128-bit digest is ample: the chance that
//! any two of `n` distinct chunks collide is about `n² / 2^129`. A 2 GiB
//! dump repeated every minute for a year is ~5·10^8 chunks of 2 MiB, a
//! collision chance of ~4·10^-22, far below that of an undetected memory or
//! disk error. Who can write GPU memory of the dumped process can change
//! what is restored anyway; who can write the image directory can too
//! (version-1 checksums are not keyed either). Restore re-verifies every
//! chunk's digest as it reads it, so a damaged or replaced file is found,
//! not restored.
//!
//! # Why 2 MiB
//!
//! `benches/src/bin/incremental_dedup.rs` measures the digest rate at 1, 2
//! and 4 MiB (`hash_chunk_digests_*`): it is the same within noise (XXH3
//! streams; a chunk is far larger than its setup cost). What differs: the
//! metadata, 16 bytes per chunk (16, 8 and 4 KiB per GiB of contents, kept
//! in the KFD image and read by every child dump), and the granularity, a
//! changed word costing one chunk of writing. Smaller chunks pay off only
//! when changes are scattered finer than 2 MiB; GPU allocators hand out
//! memory in 2 MiB pieces (the huge-page and fragment size of amdgpu's VM,
//! and the C plugin's SDMA copy packet), so changes tend to cluster on that
//! grid, and 2 MiB keeps a 100 GiB model's digests at 800 KiB.

use std::sync::OnceLock;

use twox_hash::{XxHash3_128, XxHash3_64};

use crate::checksum::ContentHasher;

/// A chunk's digest (XXH3-128).
pub type Digest = u128;

/// Chunk size of images this crate writes (recorded per image in
/// `chunk_size`, so readers never assume it).
pub const CHUNK_SIZE: u64 = 2 << 20;

/// Smallest and largest chunk size a reader accepts (4 KiB .. 1 GiB, a power of two).
pub const CHUNK_SIZE_RANGE: (u64, u64) = (4096, 1 << 30);

/// Bytes one digest takes in `chunk_digests`.
pub const DIGEST_BYTES: usize = 16;

/// XXH3-128 of a chunk's bytes.
pub fn chunk_digest(bytes: &[u8]) -> Digest {
    XxHash3_128::oneshot(bytes)
}

/// Digest of `len` zero bytes (cached for the chunk size this crate writes).
pub fn zero_digest(len: u64) -> Digest {
    static ZERO_CHUNK: OnceLock<Digest> = OnceLock::new();
    if len == CHUNK_SIZE {
        return *ZERO_CHUNK.get_or_init(|| digest_of_zeros(CHUNK_SIZE));
    }
    digest_of_zeros(len)
}

fn digest_of_zeros(len: u64) -> Digest {
    let mut h = XxHash3_128::new();
    feed_zeros(&mut h, len);
    h.finish_128()
}

fn feed_zeros(h: &mut XxHash3_128, mut len: u64) {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    while len > 0 {
        let n = len.min(ZEROS.len() as u64) as usize;
        h.write(&ZEROS[..n]);
        len -= n as u64;
    }
}

/// The version-2 per-BO checksum: XXH3-64, seeded with the BO's size, of
/// its chunk digests (16 little-endian bytes each).
pub fn bo_checksum(size: u64, digests: &[Digest]) -> u64 {
    XxHash3_64::oneshot_with_seed(size, &encode_digests(digests))
}

/// Number of chunks of a BO of `size` bytes.
pub fn chunk_count(size: u64, chunk_size: u64) -> u64 {
    size.div_ceil(chunk_size.max(1))
}

/// Length of chunk `index` of a BO of `size` bytes.
pub fn chunk_len(size: u64, chunk_size: u64, index: u64) -> u64 {
    let start = index.saturating_mul(chunk_size);
    size.saturating_sub(start).min(chunk_size)
}

/// Digests as stored in `chunk_digests` (tag 130): 16 little-endian bytes each.
pub fn encode_digests(digests: &[Digest]) -> Vec<u8> {
    let mut out = Vec::with_capacity(digests.len() * DIGEST_BYTES);
    for d in digests {
        out.extend_from_slice(&d.to_le_bytes());
    }
    out
}

/// Decodes `chunk_digests`; `None` if the length is not a multiple of 16.
pub fn decode_digests(bytes: &[u8]) -> Option<Vec<Digest>> {
    if !bytes.len().is_multiple_of(DIGEST_BYTES) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(DIGEST_BYTES)
            .map(|c| {
                let mut b = [0u8; DIGEST_BYTES];
                b.copy_from_slice(c);
                u128::from_le_bytes(b)
            })
            .collect(),
    )
}

/// Where a chunk's bytes are, as `chunk_sources` (tag 131) records it: one
/// byte per chunk; an entry without the field has every chunk here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChunkSource {
    /// In this BO's own place in its pages file.
    Here = 0,
    /// Stored once elsewhere in the same image set (deduplication); found
    /// by its digest among the chunks stored in this set.
    Set = 1,
    /// In the parent image set (CRIU's `parent` link, followed to any
    /// depth); found by its digest among the chunks the chain stores.
    Parent = 2,
}

impl ChunkSource {
    /// Decodes one byte of `chunk_sources`.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Here),
            1 => Some(Self::Set),
            2 => Some(Self::Parent),
            _ => None,
        }
    }
}

/// Which algorithm a BO's `content_checksum` uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ChecksumAlgo {
    /// Format version 1 (or no version): the hand-written hash of
    /// [`checksum`](crate::checksum) over the BO's bytes.
    #[default]
    V1,
    /// Format version 2: [`bo_checksum`] over the chunk digests of this
    /// chunk size.
    V2 {
        /// The image's chunk size.
        chunk_size: u64,
    },
}

impl ChecksumAlgo {
    /// The algorithm of an image with `format_version` and `chunk_size`:
    /// version 2 and above with a chunk size use [`ChecksumAlgo::V2`].
    pub fn of(format_version: Option<u32>, chunk_size: Option<u64>) -> Self {
        match (format_version, chunk_size) {
            (Some(v), Some(chunk_size)) if v >= 2 => Self::V2 { chunk_size },
            _ => Self::V1,
        }
    }
}

/// Streams one BO's bytes into chunk digests (and, from them, the
/// version-2 checksum). Zeros fed with [`update_zeros`](Self::update_zeros)
/// that fill a whole chunk cost nothing (the zero chunk's digest is cached).
#[derive(Clone)]
pub struct ChunkHasher {
    chunk_size: u64,
    state: XxHash3_128,
    /// Bytes of the current chunk fed so far.
    in_chunk: u64,
    /// Leading zero bytes of the current chunk not yet fed to `state`.
    lazy_zeros: u64,
    digests: Vec<Digest>,
    total: u64,
}

impl std::fmt::Debug for ChunkHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkHasher")
            .field("chunk_size", &self.chunk_size)
            .field("in_chunk", &self.in_chunk)
            .field("digests", &self.digests.len())
            .field("total", &self.total)
            .finish()
    }
}

impl ChunkHasher {
    /// A hasher at the start of a BO; `chunk_size` must be non-zero.
    pub fn new(chunk_size: u64) -> Self {
        Self {
            chunk_size: chunk_size.max(1),
            state: XxHash3_128::new(),
            in_chunk: 0,
            lazy_zeros: 0,
            digests: Vec::new(),
            total: 0,
        }
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether nothing was fed.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Digests of the chunks completed so far.
    pub fn digests(&self) -> &[Digest] {
        &self.digests
    }

    /// Bytes still missing to complete the current chunk.
    pub fn left_in_chunk(&self) -> u64 {
        self.chunk_size - self.in_chunk
    }

    /// Feeds bytes; returns how many chunks they completed.
    pub fn update(&mut self, mut bytes: &[u8]) -> usize {
        let before = self.digests.len();
        while !bytes.is_empty() {
            let take = (self.left_in_chunk()).min(bytes.len() as u64) as usize;
            let (piece, rest) = bytes.split_at(take);
            if self.lazy_zeros > 0 {
                feed_zeros(&mut self.state, self.lazy_zeros);
                self.lazy_zeros = 0;
            }
            if self.in_chunk == 0 && take as u64 == self.chunk_size {
                self.digests.push(XxHash3_128::oneshot(piece));
            } else {
                self.state.write(piece);
                self.in_chunk += take as u64;
                if self.in_chunk == self.chunk_size {
                    self.close_chunk();
                }
            }
            self.total += take as u64;
            bytes = rest;
        }
        self.digests.len() - before
    }

    /// Feeds `len` zero bytes (holes) without reading memory.
    pub fn update_zeros(&mut self, mut len: u64) -> usize {
        let before = self.digests.len();
        while len > 0 {
            let take = self.left_in_chunk().min(len);
            if self.in_chunk == self.lazy_zeros {
                // The chunk is all zeros so far: keep it lazy.
                self.lazy_zeros += take;
            } else {
                feed_zeros(&mut self.state, take);
            }
            self.in_chunk += take;
            self.total += take;
            len -= take;
            if self.in_chunk == self.chunk_size {
                self.close_chunk();
            }
        }
        self.digests.len() - before
    }

    fn close_chunk(&mut self) {
        let digest = if self.lazy_zeros == self.in_chunk {
            zero_digest(self.in_chunk)
        } else {
            self.state.finish_128()
        };
        self.digests.push(digest);
        self.state = XxHash3_128::new();
        self.in_chunk = 0;
        self.lazy_zeros = 0;
    }

    /// Ends the BO: closes a partial last chunk and returns every digest
    /// (an empty BO has none).
    pub fn finish(mut self) -> Vec<Digest> {
        if self.in_chunk > 0 {
            self.close_chunk();
        }
        self.digests
    }
}

/// The running checksum of one BO, in the image's algorithm.
#[derive(Clone, Debug)]
pub enum BoHasher {
    /// Version 1: [`ContentHasher`] over the bytes.
    V1(ContentHasher),
    /// Version 2: chunk digests, the checksum derived from them.
    V2(Box<ChunkHasher>),
}

impl BoHasher {
    /// A hasher for a new BO.
    pub fn new(algo: ChecksumAlgo) -> Self {
        match algo {
            ChecksumAlgo::V1 => Self::V1(ContentHasher::new()),
            ChecksumAlgo::V2 { chunk_size } => Self::V2(Box::new(ChunkHasher::new(chunk_size))),
        }
    }

    /// Feeds bytes.
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Self::V1(h) => h.update(bytes),
            Self::V2(h) => {
                h.update(bytes);
            }
        }
    }

    /// Feeds zeros without reading memory.
    #[inline]
    pub fn update_zeros(&mut self, len: u64) {
        match self {
            Self::V1(h) => h.update_zeros(len),
            Self::V2(h) => {
                h.update_zeros(len);
            }
        }
    }

    /// Ends the BO: its checksum and, for version 2, its chunk digests.
    pub fn finish(self) -> (u64, Vec<Digest>) {
        match self {
            Self::V1(h) => (h.finish(), Vec::new()),
            Self::V2(h) => {
                let size = h.len();
                let digests = (*h).finish();
                (bo_checksum(size, &digests), digests)
            }
        }
    }
}

/// The chunks of one BO as an image records them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoChunks {
    /// Index of the BO in its message's `bo_entries`.
    pub entry: usize,
    /// The BO's size.
    pub size: u64,
    /// The image's chunk size.
    pub chunk_size: u64,
    /// One digest per chunk.
    pub digests: Vec<Digest>,
    /// One source per chunk.
    pub sources: Vec<ChunkSource>,
}

impl BoChunks {
    /// Reads tags 130/131 of a BO entry: `Ok(None)` without digests, an
    /// error naming what is wrong when they do not fit the BO.
    pub fn from_fields(
        entry: usize,
        size: u64,
        chunk_size: Option<u64>,
        digests: Option<&[u8]>,
        sources: Option<&[u8]>,
    ) -> Result<Option<Self>, ChunkFieldError> {
        let Some(digests) = digests else {
            if sources.is_some() {
                return Err(ChunkFieldError::SourcesWithoutDigests);
            }
            return Ok(None);
        };
        let chunk_size = chunk_size.ok_or(ChunkFieldError::DigestsWithoutChunkSize)?;
        check_chunk_size(chunk_size)?;
        let digests =
            decode_digests(digests).ok_or(ChunkFieldError::PartialDigest { len: digests.len() })?;
        let count = chunk_count(size, chunk_size);
        if digests.len() as u64 != count {
            return Err(ChunkFieldError::DigestCount {
                digests: digests.len(),
                size,
                count,
                chunk_size,
            });
        }
        let sources = match sources {
            None => vec![ChunkSource::Here; digests.len()],
            Some(bytes) => {
                if bytes.len() != digests.len() {
                    return Err(ChunkFieldError::SourceCount {
                        sources: bytes.len(),
                        chunks: digests.len(),
                    });
                }
                bytes
                    .iter()
                    .enumerate()
                    .map(|(chunk, &byte)| {
                        ChunkSource::from_byte(byte)
                            .ok_or(ChunkFieldError::UnknownSource { chunk, byte })
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        Ok(Some(Self {
            entry,
            size,
            chunk_size,
            digests,
            sources,
        }))
    }

    /// Length of chunk `index`.
    pub fn chunk_len(&self, index: usize) -> u64 {
        chunk_len(self.size, self.chunk_size, index as u64)
    }

    /// Bytes of this BO stored in its own pages file.
    pub fn stored_len(&self) -> u64 {
        self.sources
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == ChunkSource::Here)
            .map(|(i, _)| self.chunk_len(i))
            .sum()
    }

    /// Whether any chunk lives elsewhere.
    pub fn has_references(&self) -> bool {
        self.sources.iter().any(|s| *s != ChunkSource::Here)
    }
}

/// Checks a recorded chunk size.
pub fn check_chunk_size(chunk_size: u64) -> Result<(), ChunkFieldError> {
    let (lo, hi) = CHUNK_SIZE_RANGE;
    if !chunk_size.is_power_of_two() || chunk_size < lo || chunk_size > hi {
        return Err(ChunkFieldError::ChunkSize { chunk_size });
    }
    Ok(())
}

/// Why a BO entry's recorded chunk fields (tags 130/131/150) or an image's
/// `chunk_size` do not fit ([`BoChunks::from_fields`], [`check_chunk_size`]).
/// The messages name the field, not the file: callers add the file and
/// entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkFieldError {
    /// `chunk_sources` recorded without `chunk_digests`.
    #[error("chunk_sources without chunk_digests")]
    SourcesWithoutDigests,
    /// `chunk_digests` recorded in an image without a `chunk_size`.
    #[error("chunk_digests without the image's chunk_size")]
    DigestsWithoutChunkSize,
    /// A chunk size that is not a power of two in [`CHUNK_SIZE_RANGE`].
    #[error(
        "chunk_size {chunk_size:#x} is not a power of two in {lo:#x}..={hi:#x}",
        lo = CHUNK_SIZE_RANGE.0,
        hi = CHUNK_SIZE_RANGE.1
    )]
    ChunkSize {
        /// The recorded chunk size.
        chunk_size: u64,
    },
    /// `chunk_digests` whose length is not a multiple of [`DIGEST_BYTES`].
    #[error("{len} bytes of chunk_digests are not a whole number of {DIGEST_BYTES}-byte digests")]
    PartialDigest {
        /// The field's length in bytes.
        len: usize,
    },
    /// Another number of digests than the BO has chunks.
    #[error(
        "{digests} chunk digests for a bo of {size:#x} bytes in {count} chunks of {chunk_size:#x}"
    )]
    DigestCount {
        /// Digests recorded.
        digests: usize,
        /// The BO's size.
        size: u64,
        /// Chunks the BO has.
        count: u64,
        /// The image's chunk size.
        chunk_size: u64,
    },
    /// Another number of sources than digests.
    #[error("{sources} chunk sources for {chunks} chunks")]
    SourceCount {
        /// Sources recorded.
        sources: usize,
        /// Digests recorded.
        chunks: usize,
    },
    /// A source byte that names no [`ChunkSource`].
    #[error("chunk {chunk} has unknown source {byte}")]
    UnknownSource {
        /// The chunk's index.
        chunk: usize,
        /// The recorded byte.
        byte: u8,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    // A second, independent XXH3 implementation: the digests this crate
    // records must be the published algorithm's, whichever crate computes
    // them and whichever SIMD path it takes at run time.
    use xxhash_rust::xxh3::{xxh3_128, xxh3_64_with_seed};

    fn sample(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9u32;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn digests_are_xxh3_128_of_each_chunk_in_any_split() {
        // Chunks long enough for XXH3's long-input (SIMD) loop, and short ones.
        let data = sample(300_000);
        let chunk = 65_536u64;
        let expected: Vec<Digest> = data.chunks(chunk as usize).map(xxh3_128).collect();
        for split in [1usize, 7, 4096, 4097, 65_536, 65_537, 299_999, 300_000] {
            let mut h = ChunkHasher::new(chunk);
            for piece in data.chunks(split) {
                h.update(piece);
            }
            assert_eq!(h.finish(), expected, "split {split}");
        }
    }

    #[test]
    fn zeros_fed_lazily_equal_zeros_fed_as_bytes() {
        let data = sample(3000);
        let zeros = vec![0u8; 20_000];
        for prefix in [0usize, 1, 100, 3000] {
            for n in [0usize, 1, 4095, 4096, 4097, 8192, 20_000] {
                let mut a = ChunkHasher::new(4096);
                a.update(&data[..prefix]);
                a.update(&zeros[..n]);
                a.update(&data[..prefix]);
                let mut b = ChunkHasher::new(4096);
                b.update(&data[..prefix]);
                b.update_zeros(n as u64);
                b.update(&data[..prefix]);
                assert_eq!(a.len(), b.len());
                assert_eq!(a.finish(), b.finish(), "prefix {prefix} n {n}");
            }
        }
        assert_eq!(
            zero_digest(CHUNK_SIZE),
            xxh3_128(&vec![0u8; CHUNK_SIZE as usize])
        );
    }

    #[test]
    fn checksum_covers_every_byte_and_the_size() {
        let data = sample(3 * 4096 + 10);
        let digest = |d: &[u8]| {
            let mut h = BoHasher::new(ChecksumAlgo::V2 { chunk_size: 4096 });
            h.update(d);
            h.finish().0
        };
        let base = digest(&data);
        for at in [0, 4095, 4096, 12_000, data.len() - 1] {
            let mut d = data.clone();
            d[at] ^= 0x10;
            assert_ne!(digest(&d), base, "byte {at}");
        }
        assert_ne!(digest(&data[..data.len() - 1]), base);
        assert_ne!(digest(&[]), digest(&[0]));
    }

    #[test]
    fn values_are_stable_across_releases() {
        // Images carry these values; changing them needs a new FORMAT_VERSION.
        assert_eq!(chunk_digest(b""), 0x99aa06d3014798d86001c324468d497f);
        assert_eq!(bo_checksum(0, &[]), xxh3_64_with_seed(&[], 0));
        let digests = [chunk_digest(b"amdgpu")];
        assert_eq!(
            bo_checksum(6, &digests),
            xxh3_64_with_seed(&chunk_digest(b"amdgpu").to_le_bytes(), 6)
        );
    }

    #[test]
    fn recorded_fields_are_checked() {
        let two = encode_digests(&[1, 2]);
        let ok = BoChunks::from_fields(3, 4096 + 1, Some(4096), Some(&two), Some(&[0, 2]))
            .unwrap()
            .unwrap();
        assert_eq!(ok.stored_len(), 4096);
        assert!(ok.has_references());
        assert_eq!(ok.chunk_len(1), 1);
        let err = |size, cs, d: &[u8], s: Option<&[u8]>| {
            BoChunks::from_fields(0, size, cs, Some(d), s)
                .unwrap_err()
                .to_string()
        };
        assert!(err(8192, Some(4096), &two[..17], None).contains("whole number"));
        assert!(err(3 * 4096, Some(4096), &two, None).contains("2 chunk digests"));
        assert!(err(8192, Some(4096), &two, Some(&[0])).contains("1 chunk sources"));
        assert!(err(8192, Some(4096), &two, Some(&[0, 9])).contains("unknown source 9"));
        assert!(err(8192, Some(3000), &two, None).contains("power of two"));
        assert!(err(8192, None, &two, None).contains("chunk_size"));
        assert_eq!(
            BoChunks::from_fields(0, 1, None, None, Some(&[0])),
            Err(ChunkFieldError::SourcesWithoutDigests)
        );
        assert_eq!(
            BoChunks::from_fields(0, 8192, Some(4096), Some(&two), Some(&[0, 9])),
            Err(ChunkFieldError::UnknownSource { chunk: 1, byte: 9 })
        );
        assert_eq!(
            check_chunk_size(3000),
            Err(ChunkFieldError::ChunkSize { chunk_size: 3000 })
        );
        assert_eq!(BoChunks::from_fields(0, 1, None, None, None), Ok(None));
    }
}
