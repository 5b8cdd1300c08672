//! Chunks stored elsewhere: in the parent image sets (incremental dumps)
//! or once in the same set (deduplication), found by their digest.
//!
//! An image whose BO entries carry `chunk_sources` stores in its own pages
//! file only the chunks marked [`ChunkSource::Here`]; the others are found
//! by their XXH3-128 digest among the chunks stored:
//! - [`ChunkSource::Set`]: by another BO of the same image set (any KFD
//!   image, any GPU);
//! - [`ChunkSource::Parent`]: by the parent set (CRIU's `parent` link), or
//!   its parent, to any depth. Each set names itself with `dump_id`; an
//!   image that references its parent names the parent's `dump_id`, so a
//!   parent replaced by another dump is refused by name, as is a missing
//!   one. A changed parent is found by the digest every chunk is checked
//!   against when read.
//!
//! [`ChunkResolver`] indexes the stored chunks of a set and, when asked for
//! a parent chunk, of its parents (one level at a time, as far as needed).
//! [`ChainReader`] delivers one GPU's BOs in file order like a
//! [`PagesReader`], each chunk from wherever it is stored, every chunk
//! verified. This module only reads.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;

use xxhash_rust::xxh3::Xxh3Default;

use crate::chunks::{BoChunks, ChunkSource, Digest};
use crate::framing::ReadLimits;
use crate::messages::CriuKfd;
use crate::pages::{PagesChunk, PagesFile, PagesReader};
use crate::store::{DirStore, ImageStore};
use crate::validate::ValidatedKfd;
use crate::{Error, ImageKind, ImageName};

/// Where a chunk is stored: a pages file of one level of the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLocation {
    /// 0 for the set itself, 1 for its parent, and so on.
    pub level: usize,
    /// The pages file.
    pub file: ImageName,
    /// The BO's index in that file's layout.
    pub bo: usize,
    /// Offset of the chunk within the BO's bytes stored in that file.
    pub offset: u64,
    /// Length of the chunk.
    pub len: u64,
}

struct Level {
    store: DirStore,
    /// The `dump_id` all KFD images of the level carry (`None` if they carry none).
    dump_id: Option<Vec<u8>>,
    /// The `parent_dump_id` its images name (when any references its parent).
    parent_dump_id: Option<Vec<u8>>,
    index: HashMap<Digest, ChunkLocation>,
    files: HashMap<ImageName, PagesFile>,
}

/// Finds chunks by digest in an image set and its parent chain; see the
/// module docs.
pub struct ChunkResolver {
    levels: Mutex<Vec<Level>>,
    limits: ReadLimits,
}

impl std::fmt::Debug for ChunkResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let levels = self.levels.lock().map(|l| l.len()).unwrap_or(0);
        f.debug_struct("ChunkResolver")
            .field("levels", &levels)
            .finish()
    }
}

fn chain_error(file: impl std::fmt::Display, what: impl Into<String>) -> Error {
    Error::Chain {
        file: file.to_string(),
        what: what.into(),
    }
}

impl ChunkResolver {
    /// Indexes the chunks the set in `store` stores (its parents are read
    /// when a parent chunk is first asked for).
    pub fn new(store: &DirStore, limits: ReadLimits) -> Result<Self, Error> {
        let level = index_level(reopen(store)?, 0, limits)?;
        Ok(Self {
            levels: Mutex::new(vec![level]),
            limits,
        })
    }

    /// The `dump_id` of the set itself.
    pub fn dump_id(&self) -> Option<Vec<u8>> {
        self.levels
            .lock()
            .ok()
            .and_then(|l| l.first().and_then(|l| l.dump_id.clone()))
    }

    /// Levels indexed so far (1 = only the set itself).
    pub fn depth(&self) -> usize {
        self.levels.lock().map(|l| l.len()).unwrap_or(0)
    }

    /// Where the chunk of `digest` and `len` bytes that `source` places is
    /// stored; an error naming the set or parent that should hold it.
    pub fn locate(
        &self,
        source: ChunkSource,
        digest: Digest,
        len: u64,
    ) -> Result<ChunkLocation, Error> {
        let mut levels = self
            .levels
            .lock()
            .map_err(|_| chain_error("image set", "the chunk index was poisoned"))?;
        let first = match source {
            ChunkSource::Here | ChunkSource::Set => 0,
            ChunkSource::Parent => 1,
        };
        let mut level = first;
        loop {
            while levels.len() <= level {
                let below = levels.len() - 1;
                let next = self.open_parent(&levels[below], below + 1)?;
                levels.push(next);
            }
            if let Some(loc) = levels[level].index.get(&digest).filter(|l| l.len == len) {
                return Ok(*loc);
            }
            if source != ChunkSource::Parent || levels[level].parent_dump_id.is_none() {
                let at = levels[level].store.shown();
                return Err(chain_error(
                    at,
                    format!(
                        "holds no stored chunk of digest {digest:#034x} ({len} bytes), which \
                         the {} references",
                        if level == 0 { "set" } else { "child set" }
                    ),
                ));
            }
            level += 1;
        }
    }

    fn open_parent(&self, child: &Level, level: usize) -> Result<Level, Error> {
        let Some(expected) = child.parent_dump_id.clone() else {
            return Err(chain_error(
                child.store.shown(),
                "chunks are referenced from a parent, but no image names the parent's dump_id",
            ));
        };
        let parent = child.store.parent()?.ok_or_else(|| {
            chain_error(
                child.store.shown(),
                "the parent image set is missing (no `parent` link); restore needs it, or a \
                 flattened copy (`amdgpu-criu flatten`)",
            )
        })?;
        let shown = parent.shown();
        let indexed = index_level(parent, level, self.limits)?;
        if indexed.dump_id.as_deref() != Some(expected.as_slice()) {
            return Err(chain_error(
                shown,
                format!(
                    "is not the parent these images were dumped against: its dump_id is {}, \
                     {} is expected (the parent was replaced)",
                    hex_id(indexed.dump_id.as_deref()),
                    hex_id(Some(&expected))
                ),
            ));
        }
        Ok(indexed)
    }

    /// Fills `buf` with the bytes of `loc` from `offset` within the chunk.
    pub fn read(&self, loc: &ChunkLocation, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let levels = self
            .levels
            .lock()
            .map_err(|_| chain_error("image set", "the chunk index was poisoned"))?;
        let level = levels
            .get(loc.level)
            .ok_or_else(|| chain_error(loc.file, "chunk location of an unknown level"))?;
        let file = level
            .files
            .get(&loc.file)
            .ok_or_else(|| chain_error(loc.file, "chunk location of an unknown file"))?;
        file.read_range(loc.bo, loc.offset + offset, buf)
    }

    /// How errors name the file of `loc` (`parent -> ../1/amdgpu-pages-…`).
    pub fn shown(&self, loc: &ChunkLocation) -> String {
        match self.levels.lock() {
            Ok(levels) if loc.level > 0 => levels
                .get(loc.level)
                .map(|l| format!("{}/{}", l.store.shown(), loc.file))
                .unwrap_or_else(|| loc.file.to_string()),
            _ => loc.file.to_string(),
        }
    }
}

fn hex_id(id: Option<&[u8]>) -> String {
    match id {
        None => "absent".into(),
        Some(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

fn reopen(store: &DirStore) -> Result<DirStore, Error> {
    let fd = store
        .dir()
        .try_clone()
        .map_err(|e| Error::io(store.shown(), "duplicate the image directory", e))?;
    DirStore::from_dir_fd(fd.into())
}

/// Reads every KFD image of `store` and indexes the chunks it stores.
fn index_level(store: DirStore, level: usize, limits: ReadLimits) -> Result<Level, Error> {
    let shown = store.shown();
    let names = store.list()?;
    let mut out = Level {
        store,
        dump_id: None,
        parent_dump_id: None,
        index: HashMap::new(),
        files: HashMap::new(),
    };
    let mut first = true;
    for name in names.iter().filter(|n| n.kind() == ImageKind::Kfd) {
        let at = |what: String| chain_error(format!("{shown}/{name}"), what);
        let msg: CriuKfd = out
            .store
            .read_message(name, limits)?
            .ok_or_else(|| at("listed but cannot be opened".into()))?;
        let image = ValidatedKfd::new(name.id(), msg)?;
        let msg = image.message();
        if first {
            out.dump_id = msg.dump_id.clone();
            first = false;
        } else if out.dump_id != msg.dump_id {
            return Err(at(format!(
                "dump_id {} differs from the other images' {} (images of two dumps mixed)",
                hex_id(msg.dump_id.as_deref()),
                hex_id(out.dump_id.as_deref())
            )));
        }
        if msg.parent_dump_id.is_some() {
            if out.parent_dump_id.is_some() && out.parent_dump_id != msg.parent_dump_id {
                return Err(at("names another parent than the other images".into()));
            }
            out.parent_dump_id = msg.parent_dump_id.clone();
        }
        for gpu in image.gpus().map(|d| d.gpu_id).collect::<Vec<_>>() {
            let chunks = image.bo_chunks(gpu);
            if chunks.is_empty() {
                continue;
            }
            let pages = ImageName::Pages { id: name.id(), gpu_id: gpu };
            let layout = image.pages_layout(gpu);
            if layout.bos().len() != chunks.len() {
                // Some BOs without digests: nothing of this file is indexed.
                continue;
            }
            let file = out
                .store
                .open_file(&pages)?
                .ok_or_else(|| chain_error(format!("{shown}/{pages}"), "missing"))?;
            let file = PagesFile::open(file, &format!("{shown}/{pages}"), layout)?;
            for (k, bo) in chunks.iter().enumerate() {
                index_bo(&mut out.index, level, pages, k, bo);
            }
            out.files.insert(pages, file);
        }
    }
    Ok(out)
}

fn index_bo(
    index: &mut HashMap<Digest, ChunkLocation>,
    level: usize,
    file: ImageName,
    bo: usize,
    chunks: &BoChunks,
) {
    let mut offset = 0u64;
    for (i, (digest, source)) in chunks.digests.iter().zip(&chunks.sources).enumerate() {
        if *source != ChunkSource::Here {
            continue;
        }
        let len = chunks.chunk_len(i);
        index.entry(*digest).or_insert(ChunkLocation {
            level,
            file,
            bo,
            offset,
            len,
        });
        offset += len;
    }
}

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
    remote: Option<(ChunkLocation, Xxh3Default)>,
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
    /// [`pages_layout`](ValidatedKfd::pages_layout)).
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

impl<R: Read> PieceSource for ChainReader<'_, R> {
    fn read_piece(&mut self, buf: &mut [u8]) -> Result<Option<PagesChunk>, Error> {
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
            let piece = self.own.read_chunk(&mut buf[..want])?.ok_or_else(|| {
                chain_error("pages", format!("ended inside bo entry {entry}"))
            })?;
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
                self.remote = Some((loc, Xxh3Default::new()));
            }
            let Some((loc, hasher)) = self.remote.as_mut() else {
                return Err(chain_error("pages", "a chunk read from its middle"));
            };
            self.resolver.read(loc, in_chunk, &mut buf[..want])?;
            hasher.update(&buf[..want]);
            if in_chunk + want as u64 == clen {
                let actual = hasher.digest128();
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
