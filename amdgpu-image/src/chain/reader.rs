//! [`ChainReader`]: one GPU's BOs in file order, each chunk read from
//! wherever it is stored and verified, behind [`PieceSource`] like a
//! [`PagesReader`].

use std::io::Read;

use twox_hash::XxHash3_128;

use super::chain_error;
use super::resolver::{ChunkLocation, ChunkResolver};
use crate::chunks::{BoChunks, ChunkSource};
use crate::pages::{PagesChunk, PagesReader};
use crate::{Error, ImageName};

/// Something that hands out one GPU's BO bytes in file order, in pieces
/// that never straddle two BOs: a [`PagesReader`] or a [`ChainReader`].
pub trait PieceSource {
    /// The next piece into the start of `buf` (at most `buf.len()` bytes);
    /// `None` once every BO was delivered.
    fn read_piece(&mut self, buf: &mut [u8]) -> Result<Option<PagesChunk>, Error>;

    /// Ends reading: every BO delivered, the input's end checked.
    fn finish_pieces(self: Box<Self>) -> Result<(), Error>;
}

impl<R: Read> PieceSource for PagesReader<R> {
    fn read_piece(&mut self, buf: &mut [u8]) -> Result<Option<PagesChunk>, Error> {
        self.read_chunk(buf)
    }

    fn finish_pieces(self: Box<Self>) -> Result<(), Error> {
        self.finish()
    }
}

/// One GPU's BOs, chunk by chunk from wherever they are stored; see the
/// module docs.
pub struct ChainReader<'a, R: Read> {
    own: PagesReader<R>,
    bos: Vec<BoChunks>,
    resolver: &'a ChunkResolver,
    bo: usize,
    offset: u64,
    /// The chunk being read from elsewhere: its location and running digest.
    remote: Option<(ChunkLocation, XxHash3_128)>,
}

impl<R: Read> std::fmt::Debug for ChainReader<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainReader")
            .field("bo", &self.bo)
            .field("offset", &self.offset)
            .finish()
    }
}

impl<'a, R: Read> ChainReader<'a, R> {
    /// Reads the BOs `bos` (full chunk lists, in file order) whose own
    /// chunks `own` holds (opened with the image's
    /// [`pages_layout`](crate::ValidatedKfd::pages_layout)).
    pub fn new(
        own: PagesReader<R>,
        bos: Vec<BoChunks>,
        resolver: &'a ChunkResolver,
        file: &ImageName,
    ) -> Result<Self, Error> {
        let layout = own.layout();
        if layout.bos().len() != bos.len()
            || layout
                .bos()
                .iter()
                .zip(&bos)
                .any(|(l, b)| l.entry != b.entry || l.size != b.stored_len())
        {
            return Err(chain_error(
                file,
                "the BOs with chunk digests do not match the pages file's layout",
            ));
        }
        let mut reader = Self {
            own,
            bos,
            resolver,
            bo: 0,
            offset: 0,
            remote: None,
        };
        reader.skip_empty()?;
        Ok(reader)
    }

    /// Passes BOs of no bytes (the own reader delivers them as empty pieces).
    fn skip_empty(&mut self) -> Result<(), Error> {
        while let Some(bo) = self.bos.get(self.bo) {
            if bo.size > 0 {
                break;
            }
            self.own.read_chunk(&mut [])?;
            self.bo += 1;
        }
        Ok(())
    }

    /// The bytes of BO `bo` stored here that this reader has not yet
    /// consumed from the own file: 0 once the BO's own chunks were read.
    fn finish_bo(&mut self) -> Result<(), Error> {
        let stored = self.bos[self.bo].stored_len();
        if stored == 0 {
            // The own file lists the BO with no bytes: consume it.
            self.own.read_chunk(&mut [])?;
        }
        self.bo += 1;
        self.offset = 0;
        self.skip_empty()
    }
}

impl<R: Read> ChainReader<'_, R> {
    /// The next piece of at most one chunk (the rest of the chunk being
    /// read, or as much of it as `buf` holds) from wherever it is stored.
    fn read_one(&mut self, buf: &mut [u8]) -> Result<Option<PagesChunk>, Error> {
        let Some(bo) = self.bos.get(self.bo) else {
            return Ok(None);
        };
        let index = (self.offset / bo.chunk_size) as usize;
        let in_chunk = self.offset % bo.chunk_size;
        let clen = bo.chunk_len(index);
        let want = (clen - in_chunk).min(buf.len() as u64) as usize;
        if want == 0 {
            return Err(Error::OutOfRange {
                file: "pages".into(),
                what: "read_piece with an empty buffer".into(),
            });
        }
        let entry = bo.entry;
        let digest = bo.digests[index];
        let source = bo.sources[index];
        let len = if source == ChunkSource::Here {
            let piece = self
                .own
                .read_chunk(&mut buf[..want])?
                .ok_or_else(|| chain_error("pages", format!("ended inside bo entry {entry}")))?;
            if piece.entry != entry || piece.len == 0 {
                return Err(chain_error(
                    "pages",
                    format!("bo entry {} where entry {entry} was expected", piece.entry),
                ));
            }
            piece.len
        } else {
            if in_chunk == 0 {
                let loc = self.resolver.locate(source, digest, clen)?;
                self.remote = Some((loc, XxHash3_128::new()));
            }
            let Some((loc, hasher)) = self.remote.as_mut() else {
                return Err(chain_error("pages", "a chunk read from its middle"));
            };
            self.resolver.read(loc, in_chunk, &mut buf[..want])?;
            hasher.write(&buf[..want]);
            if in_chunk + want as u64 == clen {
                let actual = hasher.finish_128();
                if actual != digest {
                    return Err(Error::ChunkMismatch {
                        file: self.resolver.shown(loc),
                        bo: self.bo,
                        entry,
                        chunk: index,
                        expected: digest,
                        actual,
                    });
                }
                self.remote = None;
            }
            want
        };
        let chunk = PagesChunk {
            bo: self.bo,
            entry,
            offset: self.offset,
            len,
            last: self.offset + len as u64 == bo.size,
        };
        self.offset += len as u64;
        if chunk.last {
            self.finish_bo()?;
        }
        Ok(Some(chunk))
    }
}

impl<R: Read> PieceSource for ChainReader<'_, R> {
    /// Fills `buf` with consecutive chunks of the current BO, each from
    /// wherever it is stored, as a [`PagesReader`] fills it from one file:
    /// the consumer's copies stay as large as its buffers, not one chunk.
    fn read_piece(&mut self, buf: &mut [u8]) -> Result<Option<PagesChunk>, Error> {
        let Some(mut piece) = self.read_one(buf)? else {
            return Ok(None);
        };
        while !piece.last && piece.len < buf.len() {
            let Some(next) = self.read_one(&mut buf[piece.len..])? else {
                break;
            };
            // Within one BO (`piece` was not its last), right after `piece`.
            debug_assert!(next.bo == piece.bo && next.offset == piece.offset + piece.len as u64);
            piece.len += next.len;
            piece.last = next.last;
        }
        Ok(Some(piece))
    }

    fn finish_pieces(self: Box<Self>) -> Result<(), Error> {
        if self.bo < self.bos.len() {
            return Err(chain_error(
                "pages",
                format!("finished before the end of bo {}", self.bo),
            ));
        }
        self.own.finish()
    }
}
