//! Pages files: the raw contents of BOs, concatenated without per-BO headers
//! behind the 8-byte length header.
//!
//! `amdgpu-pages-<id>-<gpu>.img` holds the VRAM and GTT BOs of one GPU in
//! bucket order; `amdgpu-drm-pages-…` holds one DRM BO. A [`PagesLayout`] says
//! which BOs a file holds, their sizes and (when the image records them) their
//! checksums; positions are implicit.
//!
//! - [`PagesWriter`] streams BO bytes into a [`PagesSink`] with bounded memory
//!   (at most one 4 KiB file block is buffered, so zero blocks are found in
//!   pieces of any size), computes each BO's checksum in the same pass, and
//!   turns whole zero file blocks into holes when the sink can seek (a
//!   directory store's file); holes read back as zeros, also for the C
//!   plugin. On a sequential sink (CRIU's image streamer) it writes the zeros.
//! - [`PagesReader`] streams a pages file from any `Read` (also a pipe) in
//!   caller-sized chunks that never straddle two BOs, verifying each BO's
//!   checksum when it completes. Over a regular file it can skip the file's
//!   holes of at least [`MIN_SKIPPED_HOLE`] bytes
//!   ([`PagesReader::skipping_holes`]): it finds them with
//!   `lseek(SEEK_DATA/SEEK_HOLE)`, fills the caller's buffer with zeros and
//!   checksums them without reading (a hole read through the page cache
//!   costs a page allocation, a clear and a copy per page). Shorter holes
//!   are read: skipping them would break the kernel's readahead. The bytes
//!   delivered are the same either way.
//! - [`PagesFile`] reads ranges of a pages file at given positions (`pread`,
//!   no shared cursor), for restoring GPUs in parallel from one file.
//!
//! Zero-copy decision: this crate is `#![forbid(unsafe_code)]` and mapping a
//! file (`memmap2::Mmap::map`) is unsafe, because another process may truncate
//! the file under the mapping and turn reads into SIGBUS. So [`PagesFile`]
//! copies with `read_exact_at` into buffers the caller reuses
//! ([`PagesFile::read_range`]), and [`PagesFile::bo_bytes`] returns an owned
//! [`bytes::Bytes`] sized by the BO, which the open-time length check bounds by
//! the real file size. This module never talks to the kernel beyond file I/O
//! (and `lseek`'s questions about holes).

mod file;
mod holes;
mod layout;
mod reader;
mod sink;
mod writer;

pub use file::PagesFile;
pub use holes::MIN_SKIPPED_HOLE;
pub use layout::{PagesBo, PagesLayout};
pub use reader::{PagesChunk, PagesReader};
pub use sink::{PagesSink, Sequential};
pub use writer::{ChunkFilter, PagesWriter, WrittenPages};

/// Block size used for hole detection (file offsets, header included).
pub const PAGE_SIZE: u64 = 4096;
