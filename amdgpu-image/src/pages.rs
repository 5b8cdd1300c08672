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

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::{mpsc, OnceLock};

use bytes::Bytes;

use crate::chunks::{bo_checksum, chunk_len, BoHasher, ChecksumAlgo, ChunkSource, Digest};
use crate::framing::{expect_end, read_header, write_header, HEADER_LEN};
use crate::Error;

/// Block size used for hole detection (file offsets, header included).
pub const PAGE_SIZE: u64 = 4096;

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
    algo: ChecksumAlgo,
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
    fn verifies(&self, index: usize) -> bool {
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

/// Where a [`PagesWriter`] puts bytes: a `Write` that may be able to skip
/// forward, leaving a hole that reads as zeros.
pub trait PagesSink: Write {
    /// Whether [`skip`](Self::skip) leaves holes; if not, the writer writes zeros.
    fn can_skip(&self) -> bool {
        false
    }

    /// Moves the write position `len` bytes forward without writing.
    /// Only called when [`can_skip`](Self::can_skip) is true.
    fn skip(&mut self, len: u64) -> io::Result<()> {
        write_zeros(self, len)
    }

    /// Called when the payload ended in a skip: makes the file exactly `len` bytes long.
    fn set_final_len(&mut self, len: u64) -> io::Result<()> {
        let _ = len;
        Ok(())
    }

    /// Whether [`rewrite_header`](Self::rewrite_header) works (a file or
    /// memory; never a stream).
    fn can_rewrite_header(&self) -> bool {
        false
    }

    /// Overwrites the first 8 bytes (the length header) once the payload's
    /// length is known ([`PagesWriter::set_filter`]).
    fn rewrite_header(&mut self, header: [u8; HEADER_LEN]) -> io::Result<()> {
        let _ = header;
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

fn write_zeros<W: Write + ?Sized>(w: &mut W, mut len: u64) -> io::Result<()> {
    static ZEROS: [u8; PAGE_SIZE as usize] = [0; PAGE_SIZE as usize];
    while len > 0 {
        let n = len.min(PAGE_SIZE) as usize;
        w.write_all(&ZEROS[..n])?;
        len -= n as u64;
    }
    Ok(())
}

/// A regular file: holes by seeking. It must be new or empty and positioned at
/// its start (skipped ranges keep whatever the file held before).
impl PagesSink for File {
    fn can_skip(&self) -> bool {
        true
    }

    fn skip(&mut self, len: u64) -> io::Result<()> {
        let delta = i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        self.seek(SeekFrom::Current(delta)).map(drop)
    }

    fn set_final_len(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }

    fn can_rewrite_header(&self) -> bool {
        true
    }

    fn rewrite_header(&mut self, header: [u8; HEADER_LEN]) -> io::Result<()> {
        self.write_all_at(&header, 0)
    }
}

impl<S: PagesSink + ?Sized> PagesSink for &mut S {
    fn can_skip(&self) -> bool {
        (**self).can_skip()
    }
    fn skip(&mut self, len: u64) -> io::Result<()> {
        (**self).skip(len)
    }
    fn set_final_len(&mut self, len: u64) -> io::Result<()> {
        (**self).set_final_len(len)
    }
    fn can_rewrite_header(&self) -> bool {
        (**self).can_rewrite_header()
    }
    fn rewrite_header(&mut self, header: [u8; HEADER_LEN]) -> io::Result<()> {
        (**self).rewrite_header(header)
    }
}

/// A sink that can only append (a pipe, CRIU's image streamer): zeros are written.
#[derive(Debug)]
pub struct Sequential<W>(pub W);

impl<W: Write> Write for Sequential<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<W: Write> PagesSink for Sequential<W> {}

impl PagesSink for Vec<u8> {
    fn can_rewrite_header(&self) -> bool {
        true
    }

    fn rewrite_header(&mut self, header: [u8; HEADER_LEN]) -> io::Result<()> {
        match self.get_mut(..HEADER_LEN) {
            Some(head) => {
                head.copy_from_slice(&header);
                Ok(())
            }
            None => Err(io::Error::from(io::ErrorKind::InvalidInput)),
        }
    }
}

/// What a [`PagesWriter`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenPages {
    /// `(entry, checksum)` for every BO, in file order; store them in the
    /// entries' `content_checksum` before writing the message.
    pub checksums: Vec<(usize, u64)>,
    /// Payload bytes (the length header's value).
    pub payload_len: u64,
    /// Payload bytes left as holes instead of written.
    pub hole_bytes: u64,
    /// `(entry, chunk digests)` for every BO, in file order, when the
    /// layout's algorithm is [`ChecksumAlgo::V2`]; store them in the
    /// entries' `chunk_digests`.
    pub digests: Vec<(usize, Vec<Digest>)>,
    /// `(entry, chunk sources)` of every BO when a filter decided
    /// ([`PagesWriter::set_filter`]); store them in `chunk_sources`.
    pub sources: Vec<(usize, Vec<ChunkSource>)>,
    /// Bytes the file holds (the length header): the payload less the
    /// chunks a filter did not store.
    pub stored_len: u64,
}

/// Decides, from a chunk's digest, whether a [`PagesWriter`] stores it:
/// called with the BO's entry, the chunk's index within the BO, its length
/// and its digest.
pub type ChunkFilter = Box<dyn FnMut(usize, u64, u64, Digest) -> ChunkSource + Send>;

struct Filter {
    decide: ChunkFilter,
    /// Bytes of the chunk being assembled when the caller's pieces do not
    /// hold it whole.
    buf: Vec<u8>,
    digests: Vec<Digest>,
    sources: Vec<ChunkSource>,
    all_sources: Vec<(usize, Vec<ChunkSource>)>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("buffered", &self.buf.len())
            .finish()
    }
}

/// Streams the BOs of a [`PagesLayout`] into a pages file; see the module docs.
#[derive(Debug)]
pub struct PagesWriter<S: PagesSink> {
    sink: S,
    file: String,
    layout: PagesLayout,
    bo: usize,
    bo_written: u64,
    hasher: BoHasher,
    /// Logical file position (header included).
    pos: u64,
    /// Payload bytes taken from the caller.
    taken: u64,
    pending_hole: u64,
    hole_bytes: u64,
    checksums: Vec<(usize, u64)>,
    digests: Vec<(usize, Vec<Digest>)>,
    can_skip: bool,
    /// Bytes of the file block being assembled (at most one block).
    block: Vec<u8>,
    filter: Option<Filter>,
}

impl<S: PagesSink> PagesWriter<S> {
    /// Writes the length header (the layout's total) and gets ready for the
    /// first BO's bytes. `file` names the image in errors.
    pub fn new(mut sink: S, file: &str, layout: PagesLayout) -> Result<Self, Error> {
        write_header(&mut sink, file, layout.total_len())?;
        let can_skip = sink.can_skip();
        let mut w = Self {
            sink,
            file: file.to_owned(),
            checksums: Vec::with_capacity(layout.bos().len()),
            bo: 0,
            bo_written: 0,
            hasher: BoHasher::new(layout.algo),
            digests: Vec::new(),
            layout,
            pos: HEADER_LEN as u64,
            taken: 0,
            pending_hole: 0,
            hole_bytes: 0,
            can_skip,
            block: Vec::with_capacity(if can_skip { PAGE_SIZE as usize } else { 0 }),
            filter: None,
        };
        w.close_finished_bos();
        Ok(w)
    }

    /// Lets `decide` choose, per chunk, whether the file stores it: chunks
    /// it places elsewhere ([`ChunkSource::Set`], [`ChunkSource::Parent`])
    /// are left out, and the length header is rewritten at
    /// [`finish`](Self::finish) to the bytes stored. Needs a
    /// [`ChecksumAlgo::V2`] layout, a sink that can rewrite the header and
    /// no bytes written yet; returns whether the filter was taken (the
    /// writer is unchanged otherwise). A chunk the caller's pieces do not
    /// hold whole is assembled in a buffer of one chunk.
    pub fn set_filter(&mut self, decide: ChunkFilter) -> bool {
        if !matches!(self.layout.algo, ChecksumAlgo::V2 { .. })
            || !self.sink.can_rewrite_header()
            || self.taken > 0
        {
            return false;
        }
        self.filter = Some(Filter {
            decide,
            buf: Vec::new(),
            digests: Vec::new(),
            sources: Vec::new(),
            all_sources: Vec::new(),
        });
        // BOs closed at creation (empty ones) have no chunks.
        if let Some(f) = self.filter.as_mut() {
            f.all_sources
                .extend(self.checksums.iter().map(|(e, _)| (*e, Vec::new())));
        }
        true
    }

    /// Index (in the layout) of the BO the next bytes belong to; `None` when all are written.
    pub fn current_bo(&self) -> Option<usize> {
        (self.bo < self.layout.bos().len()).then_some(self.bo)
    }

    /// Payload bytes still expected.
    pub fn remaining(&self) -> u64 {
        self.layout.total_len() - self.taken
    }

    /// Appends bytes; they may span several BOs.
    pub fn write(&mut self, mut data: &[u8]) -> Result<(), Error> {
        if data.len() as u64 > self.remaining() {
            return Err(Error::LengthMismatch {
                file: self.file.clone(),
                what: "pages payload",
                expected: self.layout.total_len(),
                actual: self.taken + data.len() as u64,
            });
        }
        while !data.is_empty() {
            let Some(bo) = self.layout.bos().get(self.bo).copied() else {
                break;
            };
            let take = (bo.size - self.bo_written).min(data.len() as u64) as usize;
            let (piece, rest) = data.split_at(take);
            if self.filter.is_some() {
                self.filter_piece(bo, piece)
            } else {
                self.emit(piece, true)
            }
            .map_err(|e| Error::io(&self.file, "write pages", e))?;
            self.bo_written += take as u64;
            self.taken += take as u64;
            data = rest;
            self.close_finished_bos();
        }
        Ok(())
    }

    /// Takes `piece` (the next bytes of BO `bo`) chunk by chunk: digests
    /// each completed chunk, asks the filter and stores the chunk or not.
    fn filter_piece(&mut self, bo: PagesBo, mut piece: &[u8]) -> io::Result<()> {
        let ChecksumAlgo::V2 { chunk_size } = self.layout.algo else {
            return Err(io::Error::other("a chunk filter on a version-1 layout"));
        };
        let mut at = self.bo_written;
        while !piece.is_empty() {
            let index = at / chunk_size;
            let len = chunk_len(bo.size, chunk_size, index);
            let Some(filter) = self.filter.as_mut() else {
                return Ok(());
            };
            let have = filter.buf.len() as u64;
            let need = (len - have) as usize;
            if have == 0 && piece.len() >= need {
                // The whole chunk is in the caller's buffer: no copy.
                let (chunk, rest) = piece.split_at(need);
                self.decide_chunk(bo.entry, index, chunk)?;
                piece = rest;
                at += need as u64;
                continue;
            }
            let take = need.min(piece.len());
            filter.buf.extend_from_slice(&piece[..take]);
            piece = &piece[take..];
            at += take as u64;
            if filter.buf.len() as u64 == len {
                let buf = std::mem::take(&mut filter.buf);
                self.decide_chunk(bo.entry, index, &buf)?;
                if let Some(filter) = self.filter.as_mut() {
                    filter.buf = buf;
                    filter.buf.clear();
                }
            }
        }
        Ok(())
    }

    fn decide_chunk(&mut self, entry: usize, index: u64, chunk: &[u8]) -> io::Result<()> {
        let digest = crate::chunks::chunk_digest(chunk);
        let Some(filter) = self.filter.as_mut() else {
            return Ok(());
        };
        let source = (filter.decide)(entry, index, chunk.len() as u64, digest);
        filter.digests.push(digest);
        filter.sources.push(source);
        if source == ChunkSource::Here {
            self.emit(chunk, false)?;
        }
        Ok(())
    }

    /// Records checksums of every BO that is complete (including empty ones).
    fn close_finished_bos(&mut self) {
        while let Some(bo) = self.layout.bos().get(self.bo) {
            if self.bo_written < bo.size {
                break;
            }
            let algo = self.layout.algo;
            let (sum, digests) = match self.filter.as_mut() {
                Some(f) => {
                    let digests = std::mem::take(&mut f.digests);
                    f.all_sources
                        .push((bo.entry, std::mem::take(&mut f.sources)));
                    (bo_checksum(bo.size, &digests), digests)
                }
                None => std::mem::replace(&mut self.hasher, BoHasher::new(algo)).finish(),
            };
            self.checksums.push((bo.entry, sum));
            if matches!(algo, ChecksumAlgo::V2 { .. }) {
                self.digests.push((bo.entry, digests));
            }
            self.bo_written = 0;
            self.bo += 1;
        }
    }

    /// Hashes `data` (bytes of the current BO) and writes it, zero blocks
    /// as holes where the sink can skip. Zero blocks are hashed without a
    /// second pass over their memory ([`ContentHasher::update_zeros`]), in
    /// byte order with the data around them.
    fn emit(&mut self, mut data: &[u8], hash: bool) -> io::Result<()> {
        if !self.can_skip {
            if hash {
                self.hasher.update(data);
            }
            self.sink.write_all(data)?;
            self.pos += data.len() as u64;
            return Ok(());
        }
        // Complete the file block being assembled (the caller's pieces need
        // not be block-aligned; at most one block is ever buffered).
        if !self.block.is_empty() || !self.pos.is_multiple_of(PAGE_SIZE) {
            let need = ((PAGE_SIZE - self.pos % PAGE_SIZE) as usize).min(data.len());
            if hash {
                self.hasher.update(&data[..need]);
            }
            self.block.extend_from_slice(&data[..need]);
            self.pos += need as u64;
            data = &data[need..];
            if !self.pos.is_multiple_of(PAGE_SIZE) {
                return Ok(());
            }
            let block = std::mem::take(&mut self.block);
            if block.len() as u64 == PAGE_SIZE && is_zero(&block) {
                self.pending_hole += PAGE_SIZE;
                self.hole_bytes += PAGE_SIZE;
            } else {
                self.flush_hole()?;
                self.sink.write_all(&block)?;
            }
            self.block = block;
            self.block.clear();
        }
        // Whole aligned blocks straight from the caller's buffer, with runs of
        // data blocks written in one call.
        let whole = data.len() - data.len() % PAGE_SIZE as usize;
        let mut run_start = 0usize;
        for (i, block) in data[..whole].chunks_exact(PAGE_SIZE as usize).enumerate() {
            if is_zero(block) {
                let at = i * PAGE_SIZE as usize;
                if run_start < at {
                    if hash {
                        self.hasher.update(&data[run_start..at]);
                    }
                    self.flush_hole()?;
                    self.sink.write_all(&data[run_start..at])?;
                }
                if hash {
                    self.hasher.update_zeros(PAGE_SIZE);
                }
                self.pending_hole += PAGE_SIZE;
                self.hole_bytes += PAGE_SIZE;
                run_start = at + PAGE_SIZE as usize;
            }
        }
        if run_start < whole {
            if hash {
                self.hasher.update(&data[run_start..whole]);
            }
            self.flush_hole()?;
            self.sink.write_all(&data[run_start..whole])?;
        }
        self.pos += whole as u64;
        let tail = &data[whole..];
        if hash {
            self.hasher.update(tail);
        }
        self.block.extend_from_slice(tail);
        self.pos += tail.len() as u64;
        Ok(())
    }

    fn flush_hole(&mut self) -> io::Result<()> {
        if self.pending_hole > 0 {
            self.sink.skip(self.pending_hole)?;
            self.pending_hole = 0;
        }
        Ok(())
    }

    /// Checks that every BO was written in full, fixes the file length when it
    /// ends in a hole, flushes, and returns the sink and the checksums.
    pub fn finish(mut self) -> Result<(S, WrittenPages), Error> {
        if self.remaining() != 0 {
            return Err(Error::LengthMismatch {
                file: self.file,
                what: "pages payload",
                expected: self.layout.total_len(),
                actual: self.taken,
            });
        }
        let file = self.file.clone();
        let io = |e| Error::io(&file, "finish pages", e);
        if !self.block.is_empty() {
            self.flush_hole().map_err(io)?;
            self.sink.write_all(&self.block).map_err(io)?;
        }
        if self.pending_hole > 0 {
            self.sink.skip(self.pending_hole).map_err(io)?;
            self.sink.set_final_len(self.pos).map_err(io)?;
        }
        let stored_len = self.pos - HEADER_LEN as u64;
        if stored_len != self.layout.total_len() {
            self.sink
                .rewrite_header(stored_len.to_le_bytes())
                .map_err(io)?;
        }
        self.sink.flush().map_err(io)?;
        let written = WrittenPages {
            checksums: self.checksums,
            payload_len: self.layout.total_len(),
            hole_bytes: self.hole_bytes,
            digests: self.digests,
            sources: self.filter.map(|f| f.all_sources).unwrap_or_default(),
            stored_len,
        };
        Ok((self.sink, written))
    }
}

fn is_zero(block: &[u8]) -> bool {
    let words = block.chunks_exact(8);
    let tail = words.remainder();
    let word = |w: &[u8]| u64::from_ne_bytes(w.try_into().unwrap_or([0xff; 8]));
    // Most data blocks have a non-zero word early: look at 8 words one by
    // one, then OR the rest together (no branch per word, vectorised).
    let mut words = words.map(word);
    if words.by_ref().take(8).any(|w| w != 0) {
        return false;
    }
    words.fold(0u64, |acc, w| acc | w) == 0 && tail.iter().all(|&b| b == 0)
}

/// A piece of one BO handed out by [`PagesReader::read_chunk`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagesChunk {
    /// Index of the BO in the layout.
    pub bo: usize,
    /// Index of the BO in its message's `bo_entries`.
    pub entry: usize,
    /// Offset of the piece within the BO.
    pub offset: u64,
    /// Bytes placed at the start of the caller's buffer.
    pub len: usize,
    /// Whether this piece completes the BO (its checksum, if any, was verified).
    pub last: bool,
}

/// One run of a file's bytes: data or a hole, up to `end` (a file offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Extent {
    hole: bool,
    end: u64,
}

/// How a [`PagesReader`] learns and skips the holes of its source.
#[derive(Debug)]
struct Holes<R> {
    /// The run containing file offset `pos`, leaving the source at `pos`.
    probe: fn(&mut R, u64) -> io::Result<Extent>,
    /// Moves the source `len` bytes forward without reading.
    skip: fn(&mut R, u64) -> io::Result<()>,
    /// The run the source is in (its `end` is 0 before the first probe).
    current: Extent,
}

/// Holes shorter than this are read like data. Skipping a short hole breaks
/// the kernel's sequential readahead, and a file of short data runs between
/// short holes (a BO with one page in ten used) then reads one small
/// synchronous request per run, slower than reading the holes as well.
pub const MIN_SKIPPED_HOLE: u64 = 1 << 20;

/// How far one probe looks ahead for a hole of [`MIN_SKIPPED_HOLE`] bytes
/// (bounds the `lseek` calls one probe spends on a file of many short runs).
const PROBE_SPAN: u64 = 16 << 20;

/// The run of the file behind `src` that contains offset `pos`, holes
/// shorter than [`MIN_SKIPPED_HOLE`] counted as data; past the end of the
/// file, a data run without end (so a read finds the end and reports
/// truncation). Leaves the file offset at `pos`.
fn fd_extent<R: AsFd>(src: &mut R, pos: u64) -> io::Result<Extent> {
    use rustix::fs::{fstat, seek, SeekFrom as Whence};
    let fd = src.as_fd();
    let len = u64::try_from(fstat(fd)?.st_size).unwrap_or(0);
    if pos >= len {
        return Ok(Extent {
            hole: false,
            end: u64::MAX,
        });
    }
    // The hole at or after `at` (`len` if none) and the data after it (`len` if none).
    let hole_at = |at: u64| -> io::Result<(u64, u64)> {
        let hole = seek(fd, Whence::Hole(at))?.min(len);
        if hole >= len {
            return Ok((len, len));
        }
        match seek(fd, Whence::Data(hole)) {
            Ok(data) => Ok((hole, data.min(len))),
            Err(rustix::io::Errno::NXIO) => Ok((hole, len)),
            Err(e) => Err(e.into()),
        }
    };
    let extent = match seek(fd, Whence::Data(pos)) {
        Ok(data) if data - pos >= MIN_SKIPPED_HOLE => Extent {
            hole: true,
            end: data,
        },
        Ok(data) => {
            // Data (after at most a short hole) from `pos`: extend the run
            // over short holes, up to a long hole, the end or the span.
            let mut at = data;
            loop {
                if at >= len {
                    break Extent {
                        hole: false,
                        end: len,
                    };
                }
                let (hole, next) = hole_at(at)?;
                if hole >= len || next - hole >= MIN_SKIPPED_HOLE || hole - pos >= PROBE_SPAN {
                    break Extent {
                        hole: false,
                        end: if next - hole >= MIN_SKIPPED_HOLE || hole >= len {
                            hole
                        } else {
                            next
                        },
                    };
                }
                at = next;
            }
        }
        // No data at or after `pos`: a hole up to the end of the file.
        Err(rustix::io::Errno::NXIO) => Extent {
            hole: true,
            end: len,
        },
        Err(e) => return Err(e.into()),
    };
    seek(fd, Whence::Start(pos))?;
    Ok(extent)
}

/// Moves the file offset behind `src` `len` bytes forward without reading.
fn fd_skip<R: AsFd>(src: &mut R, len: u64) -> io::Result<()> {
    let delta = i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    rustix::fs::seek(src.as_fd(), rustix::fs::SeekFrom::Current(delta))?;
    Ok(())
}

/// Whether more than one CPU is available (the answer is kept).
fn parallel() -> bool {
    static PARALLEL: OnceLock<bool> = OnceLock::new();
    *PARALLEL.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// Scratch below this size is verified on one thread (hand-offs would cost
/// more than the overlap gains).
const PIPELINE_MIN_SCRATCH: usize = 256 << 10;

/// Streams a pages file from any `Read`, verifying checksums; see the module docs.
#[derive(Debug)]
pub struct PagesReader<R: Read> {
    src: R,
    file: String,
    layout: PagesLayout,
    bo: usize,
    bo_read: u64,
    hasher: BoHasher,
    /// Chunks of the current BO whose digest was compared already.
    chunks_checked: usize,
    verify: bool,
    ended: bool,
    /// File offset of the next byte of `src` (header included).
    pos: u64,
    holes: Option<Holes<R>>,
    hole_bytes: u64,
}

impl<R: Read + AsFd> PagesReader<R> {
    /// The same reader, in the same position, over `wrap(source)` (a
    /// caller's enum of sources, say); hole skipping, if on, carries over.
    pub fn map_source<T: Read + AsFd>(self, wrap: impl FnOnce(R) -> T) -> PagesReader<T> {
        PagesReader {
            src: wrap(self.src),
            file: self.file,
            layout: self.layout,
            bo: self.bo,
            bo_read: self.bo_read,
            hasher: self.hasher,
            chunks_checked: self.chunks_checked,
            verify: self.verify,
            ended: self.ended,
            pos: self.pos,
            holes: self.holes.map(|h| Holes {
                probe: fd_extent::<T>,
                skip: fd_skip::<T>,
                current: h.current,
            }),
            hole_bytes: self.hole_bytes,
        }
    }

    /// Skips the file's holes instead of reading them (module docs). Where
    /// the file system cannot tell holes (or a probe fails: a pipe, for
    /// one), the reader reads as before.
    pub fn skipping_holes(mut self) -> Self {
        self.holes = Some(Holes {
            probe: fd_extent::<R>,
            skip: fd_skip::<R>,
            current: Extent {
                hole: false,
                end: 0,
            },
        });
        self
    }
}

impl<R: Read> PagesReader<R> {
    /// Reads the length header and checks it against the layout's total.
    pub fn new(mut src: R, file: &str, layout: PagesLayout) -> Result<Self, Error> {
        let len = read_header(&mut src, file)?;
        if len != layout.total_len() {
            return Err(Error::LengthMismatch {
                file: file.to_owned(),
                what: "length header against the sizes of the bos it holds",
                expected: layout.total_len(),
                actual: len,
            });
        }
        Ok(Self {
            src,
            file: file.to_owned(),
            bo: 0,
            bo_read: 0,
            hasher: BoHasher::new(layout.algo()),
            chunks_checked: 0,
            layout,
            verify: true,
            ended: false,
            pos: HEADER_LEN as u64,
            holes: None,
            hole_bytes: 0,
        })
    }

    /// Payload bytes delivered so far from holes, without reading them.
    pub fn hole_bytes(&self) -> u64 {
        self.hole_bytes
    }

    /// Fills `dst` from the source, holes with zeros without reading them;
    /// returns the bytes filled (fewer only at the end of the input) and how
    /// many of them came from holes.
    fn fill(&mut self, dst: &mut [u8]) -> io::Result<(usize, usize)> {
        let Some(holes) = self.holes.as_mut() else {
            let got = read_full(&mut self.src, dst)?;
            self.pos += got as u64;
            return Ok((got, 0));
        };
        let (mut got, mut zeros) = (0usize, 0usize);
        while got < dst.len() {
            if self.pos >= holes.current.end {
                match (holes.probe)(&mut self.src, self.pos) {
                    Ok(extent) if extent.end > self.pos => holes.current = extent,
                    // The file system cannot say (or says nonsense): read.
                    _ => {
                        self.holes = None;
                        let n = read_full(&mut self.src, &mut dst[got..])?;
                        self.pos += n as u64;
                        return Ok((got + n, zeros));
                    }
                }
            }
            let n = (holes.current.end - self.pos).min((dst.len() - got) as u64) as usize;
            let piece = &mut dst[got..got + n];
            if holes.current.hole {
                (holes.skip)(&mut self.src, n as u64)?;
                piece.fill(0);
                zeros += n;
                self.hole_bytes += n as u64;
            } else {
                let r = read_full(&mut self.src, piece)?;
                if r < n {
                    self.pos += r as u64;
                    return Ok((got + r, zeros));
                }
            }
            got += n;
            self.pos += n as u64;
        }
        Ok((got, zeros))
    }

    /// Turns checksum verification off (it is on by default when the layout has checksums).
    pub fn without_verification(mut self) -> Self {
        self.verify = false;
        self
    }

    /// The layout being read.
    pub fn layout(&self) -> &PagesLayout {
        &self.layout
    }

    /// Reads the next piece of the current BO into `buf` (at most `buf.len()`
    /// bytes, never past the BO's end). Returns `None` once every BO was read
    /// and the input ends right after the payload.
    pub fn read_chunk(&mut self, buf: &mut [u8]) -> Result<Option<PagesChunk>, Error> {
        Ok(self.next_piece(buf, true)?.map(|(chunk, _)| chunk))
    }

    /// Reads the next piece; hashes and verifies it when `hash` is set.
    /// Also says whether the whole piece came from holes (is zero).
    fn next_piece(
        &mut self,
        buf: &mut [u8],
        hash: bool,
    ) -> Result<Option<(PagesChunk, bool)>, Error> {
        let Some(bo) = self.layout.bos().get(self.bo).copied() else {
            if !self.ended {
                expect_end(&mut self.src, &self.file, self.layout.total_len())?;
                self.ended = true;
            }
            return Ok(None);
        };
        let want = (bo.size - self.bo_read).min(buf.len() as u64) as usize;
        if want == 0 && bo.size > 0 {
            return Err(Error::OutOfRange {
                file: self.file.clone(),
                what: "read_chunk with an empty buffer".into(),
            });
        }
        let dst = &mut buf[..want];
        let (got, zeros) = self
            .fill(dst)
            .map_err(|e| Error::io(&self.file, "read pages", e))?;
        let zero = want > 0 && zeros == want;
        if got < want {
            let offset = self.layout.offset_of(self.bo).unwrap_or(0) + self.bo_read;
            return Err(Error::Truncated {
                file: self.file.clone(),
                expected: self.layout.total_len(),
                actual: offset + got as u64,
            });
        }
        let checks = hash && self.verify && self.layout.verifies(self.bo);
        if checks {
            if zero {
                self.hasher.update_zeros(want as u64);
            } else {
                self.hasher.update(&dst[..want]);
            }
            self.check_chunks(false)?;
        }
        let chunk = PagesChunk {
            bo: self.bo,
            entry: bo.entry,
            offset: self.bo_read,
            len: want,
            last: false,
        };
        self.bo_read += want as u64;
        if self.bo_read < bo.size {
            return Ok(Some((chunk, zero)));
        }
        let hasher = std::mem::replace(&mut self.hasher, BoHasher::new(self.layout.algo()));
        if checks {
            let (actual, digests) = hasher.finish();
            self.chunks_checked = self.chunks_checked.min(digests.len());
            self.compare_digests(&digests)?;
            if let Some(expected) = bo.checksum.filter(|&e| e != actual) {
                return Err(Error::ChecksumMismatch {
                    file: self.file.clone(),
                    bo: self.bo,
                    entry: bo.entry,
                    expected,
                    actual,
                });
            }
        }
        self.chunks_checked = 0;
        self.bo += 1;
        self.bo_read = 0;
        Ok(Some((
            PagesChunk {
                last: true,
                ..chunk
            },
            zero,
        )))
    }

    /// Compares the chunk digests completed so far with the recorded ones.
    fn check_chunks(&mut self, _last: bool) -> Result<(), Error> {
        if let BoHasher::V2(h) = &self.hasher {
            if h.digests().len() > self.chunks_checked {
                let digests = h.digests().to_vec();
                return self.compare_digests(&digests);
            }
        }
        Ok(())
    }

    fn compare_digests(&mut self, digests: &[Digest]) -> Result<(), Error> {
        let Some(expected) = self.layout.expected_digests(self.bo) else {
            return Ok(());
        };
        let entry = self.layout.bos().get(self.bo).map_or(0, |b| b.entry);
        for (k, actual) in digests.iter().enumerate().skip(self.chunks_checked) {
            let want = expected.get(k).copied();
            if want != Some(*actual) {
                return Err(Error::ChunkMismatch {
                    file: self.file.clone(),
                    bo: self.bo,
                    entry,
                    chunk: k,
                    expected: want.unwrap_or(0),
                    actual: *actual,
                });
            }
        }
        self.chunks_checked = digests.len();
        Ok(())
    }

    /// Ends reading: every BO must have been read in full (so every checksum
    /// was verified) and the input must end right after the payload.
    pub fn finish(mut self) -> Result<(), Error> {
        if let Some(bo) = self.layout.bos().get(self.bo) {
            return Err(Error::OutOfRange {
                file: self.file.clone(),
                what: format!(
                    "finished before the end of bo {} (entry {}): {} of {} bytes read",
                    self.bo, bo.entry, self.bo_read, bo.size
                ),
            });
        }
        while self.next_piece(&mut [], true)?.is_some() {}
        Ok(())
    }

    /// Reads the whole file through `scratch`, verifying lengths and
    /// checksums: with [`verify_all_pipelined`](Self::verify_all_pipelined)
    /// when more than one CPU is available and `scratch` holds at least
    /// 256 KiB, else with [`verify_all_serial`](Self::verify_all_serial).
    pub fn verify_all(self, scratch: &mut [u8]) -> Result<(), Error> {
        if parallel() && scratch.len() >= PIPELINE_MIN_SCRATCH {
            self.verify_all_pipelined(scratch)
        } else {
            self.verify_all_serial(scratch)
        }
    }

    /// Reads the whole file through `scratch` on this thread, verifying
    /// lengths and checksums.
    pub fn verify_all_serial(mut self, scratch: &mut [u8]) -> Result<(), Error> {
        while self.read_chunk(scratch)?.is_some() {}
        Ok(())
    }

    /// Like [`verify_all_serial`](Self::verify_all_serial), but `scratch` is
    /// split into two buffers: this thread reads into one while a second
    /// (scoped) thread hashes the other, so verification runs at the speed
    /// of the slower of the two instead of their sum. Worth it when a core
    /// is idle; on one CPU the hand-offs make it slower.
    pub fn verify_all_pipelined(mut self, scratch: &mut [u8]) -> Result<(), Error> {
        let hashing = self.verify && (0..self.layout.bos().len()).any(|i| self.layout.verifies(i));
        if !hashing || scratch.len() < 2 {
            return self.verify_all_serial(scratch);
        }
        let half = scratch.len() / 2;
        let (a, b) = scratch.split_at_mut(half);
        let checked = self.layout.clone();
        let file = self.file.clone();
        std::thread::scope(|scope| {
            let (to_hasher, pieces) = mpsc::sync_channel::<(&mut [u8], PagesChunk, bool)>(1);
            let (to_reader, free) = mpsc::sync_channel::<&mut [u8]>(2);
            // Both buffers start free; the channel has room for both.
            let _ = to_reader.send(a);
            let _ = to_reader.send(b);
            let hasher = scope.spawn(move || -> Result<(), Error> {
                let algo = checked.algo();
                let mut h = BoHasher::new(algo);
                for (buf, chunk, zero) in pieces {
                    if !checked.verifies(chunk.bo) {
                        let _ = to_reader.send(buf);
                        continue;
                    }
                    if zero {
                        h.update_zeros(chunk.len as u64);
                    } else {
                        h.update(&buf[..chunk.len]);
                    }
                    if chunk.last {
                        let (actual, digests) =
                            std::mem::replace(&mut h, BoHasher::new(algo)).finish();
                        if let Some(expected) = checked.expected_digests(chunk.bo) {
                            for (k, d) in digests.iter().enumerate() {
                                if expected.get(k) != Some(d) {
                                    return Err(Error::ChunkMismatch {
                                        file,
                                        bo: chunk.bo,
                                        entry: chunk.entry,
                                        chunk: k,
                                        expected: expected.get(k).copied().unwrap_or(0),
                                        actual: *d,
                                    });
                                }
                            }
                        }
                        let recorded = checked.bos().get(chunk.bo).and_then(|b| b.checksum);
                        if let Some(expected) = recorded.filter(|&e| e != actual) {
                            return Err(Error::ChecksumMismatch {
                                file,
                                bo: chunk.bo,
                                entry: chunk.entry,
                                expected,
                                actual,
                            });
                        }
                    }
                    // The reader may have stopped on an error; then nobody waits for the buffer.
                    let _ = to_reader.send(buf);
                }
                Ok(())
            });
            let read_result = loop {
                // The hasher returned early (a mismatch) when no buffer comes back.
                let Ok(buf) = free.recv() else { break Ok(()) };
                match self.next_piece(buf, false) {
                    Ok(Some((chunk, zero))) => {
                        if to_hasher.send((buf, chunk, zero)).is_err() {
                            break Ok(());
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
            };
            drop(to_hasher);
            let hash_result = hasher
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            // A checksum mismatch comes before any later read error.
            hash_result.and(read_result)
        })
    }
}

/// Reads until `dst` is full or the input ends; returns the bytes read.
fn read_full<R: Read>(src: &mut R, dst: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < dst.len() {
        match src.read(&mut dst[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Positional reads from a pages file; see the module docs.
#[derive(Debug)]
pub struct PagesFile {
    file: File,
    name: String,
    layout: PagesLayout,
}

impl PagesFile {
    /// Checks the length header against the layout and the file's size against the header.
    pub fn open(file: File, name: &str, layout: PagesLayout) -> Result<Self, Error> {
        let mut header = [0u8; HEADER_LEN];
        file.read_exact_at(&mut header, 0)
            .map_err(|e| Error::io(name, "read length header", e))?;
        let len = u64::from_le_bytes(header);
        if len != layout.total_len() {
            return Err(Error::LengthMismatch {
                file: name.to_owned(),
                what: "length header against the sizes of the bos it holds",
                expected: layout.total_len(),
                actual: len,
            });
        }
        let size = file
            .metadata()
            .map_err(|e| Error::io(name, "stat", e))?
            .len();
        let payload = size.saturating_sub(HEADER_LEN as u64);
        if payload < len {
            return Err(Error::Truncated {
                file: name.to_owned(),
                expected: len,
                actual: payload,
            });
        }
        if payload > len {
            return Err(Error::TrailingBytes {
                file: name.to_owned(),
                expected: len,
            });
        }
        Ok(Self {
            file,
            name: name.to_owned(),
            layout,
        })
    }

    /// The layout of the file.
    pub fn layout(&self) -> &PagesLayout {
        &self.layout
    }

    /// Fills `buf` with BO `bo`'s bytes starting at `offset` within the BO.
    pub fn read_range(&self, bo: usize, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let (Some(info), Some(start)) = (self.layout.bos().get(bo), self.layout.offset_of(bo))
        else {
            return Err(Error::OutOfRange {
                file: self.name.clone(),
                what: format!("no bo {bo}"),
            });
        };
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > info.size) {
            return Err(Error::OutOfRange {
                file: self.name.clone(),
                what: format!(
                    "bytes {offset}..+{} lie outside bo {bo} of {} bytes",
                    buf.len(),
                    info.size
                ),
            });
        }
        self.file
            .read_exact_at(buf, HEADER_LEN as u64 + start + offset)
            .map_err(|e| Error::io(&self.name, "read pages", e))
    }

    /// The whole of BO `bo`, its checksum verified when recorded.
    pub fn bo_bytes(&self, bo: usize) -> Result<Bytes, Error> {
        let Some(info) = self.layout.bos().get(bo).copied() else {
            return Err(Error::OutOfRange {
                file: self.name.clone(),
                what: format!("no bo {bo}"),
            });
        };
        let size = usize::try_from(info.size).map_err(|_| Error::OutOfRange {
            file: self.name.clone(),
            what: format!("bo {bo} of {} bytes does not fit in memory", info.size),
        })?;
        let mut buf = vec![0u8; size];
        self.read_range(bo, 0, &mut buf)?;
        if let Some(expected) = info.checksum {
            let mut h = BoHasher::new(self.layout.algo());
            h.update(&buf);
            let actual = h.finish().0;
            if actual != expected {
                return Err(Error::ChecksumMismatch {
                    file: self.name.clone(),
                    bo,
                    entry: info.entry,
                    expected,
                    actual,
                });
            }
        }
        Ok(Bytes::from(buf))
    }
}
