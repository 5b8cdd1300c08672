//! [`PagesWriter`]: streams BO bytes into a pages file, computing checksums
//! and chunk digests in the same pass and leaving zero blocks as holes.

use std::io;

use super::layout::{PagesBo, PagesLayout};
use super::sink::PagesSink;
use super::PAGE_SIZE;
use crate::chunks::{bo_checksum, chunk_len, BoHasher, ChecksumAlgo, ChunkSource, Digest};
use crate::framing::{write_header, HEADER_LEN};
use crate::Error;

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
    /// second pass over their memory ([`ContentHasher::update_zeros`](crate::ContentHasher::update_zeros)), in
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
