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
//! A chain is followed at most [`MAX_CHAIN_DEPTH`] levels deep, and a level
//! met before (the same directory, or another directory holding the same
//! dump) ends it with [`Error::ParentLoop`]: a `parent` link to `.`, two
//! sets that are each other's parent, or a copy of a set among its own
//! ancestors would otherwise be followed until file descriptors or memory
//! run out.
//! [`ChainReader`] delivers one GPU's BOs in file order like a
//! [`PagesReader`], each chunk from wherever it is stored, every chunk
//! verified. This module only reads.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};

use twox_hash::XxHash3_128;

use crate::chunks::{BoChunks, ChunkSource, Digest};
use crate::framing::ReadLimits;
use crate::messages::{CriuKfd, CriuRenderNode};
use crate::pages::{PagesChunk, PagesFile, PagesReader};
use crate::store::{DirStore, ImageStore};
use crate::validated::{ValidatedKfd, ValidatedRenderNode};
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

/// Image sets a parent chain is followed through at most, the set itself
/// included: far beyond what incremental dumps stack up in practice (each
/// level keeps its directory and pages files open while the chain is read).
pub const MAX_CHAIN_DEPTH: usize = 64;

struct Level {
    store: DirStore,
    /// `(st_dev, st_ino)` of its directory.
    identity: (u64, u64),
    /// The `dump_id` all KFD images of the level carry (`None` if they carry none).
    dump_id: Option<Vec<u8>>,
    /// The `parent_dump_id` its images name (when any references its parent).
    parent_dump_id: Option<Vec<u8>>,
    index: HashMap<Digest, ChunkLocation>,
    files: HashMap<ImageName, PagesFile>,
}

impl Level {
    /// Takes the `dump_id` and `parent_dump_id` of one more image of the
    /// level, `file` (`first`: none taken yet); what differs from the
    /// others is said.
    fn note_ids(
        &mut self,
        file: String,
        first: &mut bool,
        dump_id: &Option<Vec<u8>>,
        parent_dump_id: &Option<Vec<u8>>,
    ) -> Result<(), Error> {
        if *first {
            self.dump_id = dump_id.clone();
            *first = false;
        } else if self.dump_id != *dump_id {
            return Err(Error::MixedDumps {
                file,
                dump_id: dump_id.as_deref().map(Box::from),
                others: self.dump_id.as_deref().map(Box::from),
            });
        }
        if parent_dump_id.is_some() {
            if self.parent_dump_id.is_some() && self.parent_dump_id != *parent_dump_id {
                return Err(Error::MixedParents { file });
            }
            self.parent_dump_id = parent_dump_id.clone();
        }
        Ok(())
    }
}

/// Finds chunks by digest in an image set and its parent chain; see the
/// module docs.
pub struct ChunkResolver {
    levels: Mutex<Vec<Arc<Level>>>,
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
        let level = index_level(reopen(store)?.named("the image set"), 0, limits, &[])?;
        Ok(Self {
            levels: Mutex::new(vec![Arc::new(level)]),
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
                let next = self.open_parent(&levels)?;
                levels.push(Arc::new(next));
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

    /// The parent of the deepest of `levels` (the chain read so far), as
    /// the next level; a level met before or one too many is refused.
    fn open_parent(&self, levels: &[Arc<Level>]) -> Result<Level, Error> {
        let level = levels.len();
        let child = &levels[level - 1];
        if level >= MAX_CHAIN_DEPTH {
            return Err(Error::ChainTooDeep {
                dir: child.store.shown(),
                limit: MAX_CHAIN_DEPTH,
            });
        }
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
        let indexed = index_level(parent, level, self.limits, levels)?;
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
        // Another directory holding a dump read already (a copy of a set
        // among its own ancestors).
        if let Some(seen) = levels.iter().position(|l| l.dump_id == indexed.dump_id) {
            return Err(Error::ParentLoop {
                dir: shown,
                level: seen,
                same: "dump_id",
            });
        }
        Ok(indexed)
    }

    /// Fills `buf` with the bytes of `loc` from `offset` within the chunk.
    pub fn read(&self, loc: &ChunkLocation, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        // The lock is not held while reading: GPUs read in parallel.
        let level = self
            .levels
            .lock()
            .map_err(|_| chain_error("image set", "the chunk index was poisoned"))?
            .get(loc.level)
            .cloned()
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

/// Reads every KFD image of `store` and indexes the chunks it stores, as
/// level `level` of a chain whose levels above are `above`: a directory
/// among them is refused before any of its images is read.
fn index_level(
    store: DirStore,
    level: usize,
    limits: ReadLimits,
    above: &[Arc<Level>],
) -> Result<Level, Error> {
    let shown = store.shown();
    let identity = store.identity()?;
    if let Some(seen) = above.iter().position(|l| l.identity == identity) {
        return Err(Error::ParentLoop {
            dir: shown,
            level: seen,
            same: "directory",
        });
    }
    // Files of the set itself by their name, a parent's behind its link.
    let shown_file = |name: &ImageName| {
        if level == 0 {
            name.to_string()
        } else {
            format!("{shown}/{name}")
        }
    };
    let names = store.list()?;
    let mut out = Level {
        store,
        identity,
        dump_id: None,
        parent_dump_id: None,
        index: HashMap::new(),
        files: HashMap::new(),
    };
    let mut first = true;
    for name in names.iter().filter(|n| n.kind() == ImageKind::Kfd) {
        let at = |what: String| chain_error(shown_file(name), what);
        let msg: CriuKfd = out
            .store
            .read_message(name, limits)?
            .ok_or_else(|| at("listed but cannot be opened".into()))?;
        let image = ValidatedKfd::new(name.id(), msg)?;
        let msg = image.message();
        out.note_ids(
            shown_file(name),
            &mut first,
            &msg.dump_id,
            &msg.parent_dump_id,
        )?;
        for gpu in image.gpus().map(|d| d.gpu_id).collect::<Vec<_>>() {
            let chunks = image.bo_chunks(gpu);
            if chunks.is_empty() {
                continue;
            }
            let pages = ImageName::Pages {
                id: name.id(),
                gpu_id: gpu,
            };
            let layout = image.pages_layout(gpu);
            if layout.bos().len() != chunks.len() {
                // Some BOs without digests: nothing of this file is indexed.
                continue;
            }
            let file = out
                .store
                .open_file(&pages)?
                .ok_or_else(|| chain_error(shown_file(&pages), "missing"))?;
            // A hint, as for a set's own pages files: a child reads the
            // chunks it references in BO order, front to back with gaps
            // (larger readahead).
            let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Sequential);
            let file = PagesFile::open(file, &shown_file(&pages), layout)?;
            for (k, bo) in chunks.iter().enumerate() {
                index_bo(&mut out.index, level, pages, k, bo);
            }
            out.files.insert(pages, file);
        }
    }
    // Render-node images of the dump: one drm-pages file per BO. Images
    // of a producer that names no dump (older versions) are not compared.
    for name in names.iter().filter(|n| n.kind() == ImageKind::RenderNode) {
        let at = |what: String| chain_error(shown_file(name), what);
        let msg: CriuRenderNode = out
            .store
            .read_message(name, limits)?
            .ok_or_else(|| at("listed but cannot be opened".into()))?;
        let image = ValidatedRenderNode::new(name.id(), msg)?;
        let msg = image.message();
        if msg.dump_id.is_some() || msg.parent_dump_id.is_some() {
            out.note_ids(
                shown_file(name),
                &mut first,
                &msg.dump_id,
                &msg.parent_dump_id,
            )?;
        }
        for index in 0..msg.bo_entries.len() {
            let (Some(chunks), Some((pages, layout))) =
                (image.bo_chunks(index), image.drm_pages(index))
            else {
                continue;
            };
            // BOs whose contents were not dumped have no file.
            let Some(file) = out.store.open_file(&pages)? else {
                continue;
            };
            let file = PagesFile::open(file, &shown_file(&pages), layout)?;
            index_bo(&mut out.index, level, pages, 0, &chunks);
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

/// What [`verify_references`] checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReferenceReport {
    /// Chunks read from elsewhere in the set or from the chain and verified.
    pub chunks_verified: u64,
    /// Their bytes.
    pub bytes_verified: u64,
    /// Levels of the chain read (1 = the set alone).
    pub depth: usize,
}

/// Checks every chunk the KFD images of `store` reference: found where its
/// source says (elsewhere in the set, or in the parent chain), the parent
/// being the one the images were dumped against, and its bytes matching
/// the digest. Problems name the image and the parent; nothing is read
/// from a parent that is missing or replaced.
pub fn verify_references<S: ImageStore>(
    store: &S,
    limits: ReadLimits,
) -> (ReferenceReport, Vec<crate::Problem>) {
    let mut report = ReferenceReport::default();
    let mut problems = Vec::new();
    let names = match store.list() {
        Ok(names) => names,
        Err(_) => return (report, problems),
    };
    // Per image with references: its name, the message's field path, and
    // the chunk lists of its BOs.
    let mut images: Vec<(ImageName, &'static str, Vec<BoChunks>)> = Vec::new();
    for name in &names {
        // Invalid images are reported by the set's validation.
        match name.kind() {
            ImageKind::Kfd => {
                let Ok(Some(msg)) = store.read_message::<CriuKfd>(name, limits) else {
                    continue;
                };
                if let Ok(image) = ValidatedKfd::new(name.id(), msg) {
                    if image.has_references() {
                        let gpus: Vec<u32> = image.gpus().map(|d| d.gpu_id).collect();
                        let bos = gpus.into_iter().flat_map(|g| image.bo_chunks(g)).collect();
                        images.push((*name, "criu_kfd", bos));
                    }
                }
            }
            ImageKind::RenderNode => {
                let Ok(Some(msg)) = store.read_message::<CriuRenderNode>(name, limits) else {
                    continue;
                };
                if let Ok(image) = ValidatedRenderNode::new(name.id(), msg) {
                    if image.has_references() {
                        let bos = (0..image.message().bo_entries.len())
                            .filter_map(|i| image.bo_chunks(i))
                            .collect();
                        images.push((*name, "criu_render_node", bos));
                    }
                }
            }
            _ => {}
        }
    }
    if images.is_empty() {
        return (report, problems);
    }
    let Some(dir) = store.as_dir() else {
        for (name, _, _) in &images {
            problems.push(crate::Problem::new(
                name,
                "",
                "references chunks stored elsewhere, which only an image directory can resolve",
            ));
        }
        return (report, problems);
    };
    let resolver = match ChunkResolver::new(dir, limits) {
        Ok(r) => r,
        Err(e) => {
            // Named by the first image that needs the index.
            problems.push(crate::Problem::new(
                images[0].0,
                "",
                format!("its chunks cannot be indexed: {e}"),
            ));
            return (report, problems);
        }
    };
    let mut buf = Vec::new();
    for (name, message, bos) in &images {
        'image: for bo in bos {
            for (i, (digest, source)) in bo.digests.iter().zip(&bo.sources).enumerate() {
                if *source == ChunkSource::Here {
                    continue;
                }
                let len = bo.chunk_len(i);
                let checked = resolver.locate(*source, *digest, len).and_then(|loc| {
                    buf.resize(len as usize, 0);
                    resolver.read(&loc, 0, &mut buf)?;
                    let actual = crate::chunks::chunk_digest(&buf);
                    if actual != *digest {
                        return Err(Error::ChunkMismatch {
                            file: resolver.shown(&loc),
                            bo: loc.bo,
                            entry: bo.entry,
                            chunk: i,
                            expected: *digest,
                            actual,
                        });
                    }
                    Ok(())
                });
                match checked {
                    Ok(()) => {
                        report.chunks_verified += 1;
                        report.bytes_verified += len;
                    }
                    Err(e) => {
                        problems.push(crate::Problem::new(
                            name,
                            format!("{message}.bo_entries[{}].chunk_sources", bo.entry),
                            format!("chunk {i}: {e}"),
                        ));
                        // One problem per image: the rest would repeat it.
                        break 'image;
                    }
                }
            }
        }
    }
    report.depth = resolver.depth();
    (report, problems)
}

/// What [`flatten`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlattenReport {
    /// amdgpu image files written.
    pub files: usize,
    /// Pages bytes written (every BO whole).
    pub pages_bytes: u64,
    /// Chunks that came from the parent chain or elsewhere in the set.
    pub chunks_resolved: u64,
}

/// Writes the amdgpu image set of `src` (a chain or a deduplicated set)
/// into `dst` as a standalone set: every BO's chunks in its own pages file,
/// no chunk references, no parent. The result reads like any set of the
/// C plugin (same names, length headers equal to the BOs' sizes, render-node
/// images naming their gpu in `gpu_id`; our optional fields stay). Every
/// chunk is verified as it is read. Only the amdgpu files are written;
/// CRIU's own images are not this crate's.
pub fn flatten<S: ImageStore>(
    src: &DirStore,
    dst: &S,
    limits: ReadLimits,
) -> Result<FlattenReport, Error> {
    let names = src.list()?;
    let resolver = ChunkResolver::new(src, limits)?;
    let mut report = FlattenReport::default();
    for name in &names {
        match name.kind() {
            ImageKind::Kfd => {
                let msg: CriuKfd = src
                    .read_message(name, limits)?
                    .ok_or_else(|| chain_error(name, "listed but cannot be opened"))?;
                let image = ValidatedKfd::new(name.id(), msg)?;
                let gpus: Vec<u32> = image.gpus().map(|d| d.gpu_id).collect();
                for gpu in gpus {
                    if let Some(resolved) = flatten_pages(src, dst, &image, gpu, &resolver)? {
                        report.chunks_resolved += resolved;
                        report.pages_bytes += image.compat_pages_layout(gpu).total_len();
                        report.files += 1;
                    }
                }
                let mut msg = image.into_message();
                for bo in &mut msg.bo_entries {
                    bo.chunk_sources = None;
                }
                msg.parent_dump_id = None;
                dst.write_message(name, &msg)?;
                report.files += 1;
            }
            ImageKind::RenderNode => {
                let msg: CriuRenderNode = src
                    .read_message(name, limits)?
                    .ok_or_else(|| chain_error(name, "listed but cannot be opened"))?;
                let image = ValidatedRenderNode::new(name.id(), msg)?;
                for index in 0..image.message().bo_entries.len() {
                    if let Some((resolved, bytes)) =
                        flatten_drm_pages(src, dst, &image, index, &resolver)?
                    {
                        report.chunks_resolved += resolved;
                        report.pages_bytes += bytes;
                        report.files += 1;
                    }
                }
                dst.write_message(name, &image.into_standalone_message())?;
                report.files += 1;
            }
            // Written with their KFD or render-node image.
            ImageKind::Pages | ImageKind::DrmPages => {}
            _ => {
                let mut bytes = Vec::new();
                src.open(name)?
                    .ok_or_else(|| chain_error(name, "listed but cannot be opened"))?
                    .read_to_end(&mut bytes)
                    .map_err(|e| Error::io(name, "read", e))?;
                let mut w = dst.create(name)?;
                std::io::Write::write_all(&mut w, &bytes)
                    .map_err(|e| Error::io(name, "write", e))?;
                crate::store::ImageWriter::commit(w).map_err(|e| Error::io(name, "commit", e))?;
                report.files += 1;
            }
        }
    }
    Ok(report)
}

/// Writes one GPU's pages file of `image` whole; returns the chunks read
/// from elsewhere, `None` when the GPU has no pages file (and needs none).
fn flatten_pages<S: ImageStore>(
    src: &DirStore,
    dst: &S,
    image: &ValidatedKfd,
    gpu: u32,
    resolver: &ChunkResolver,
) -> Result<Option<u64>, Error> {
    let name = ImageName::Pages {
        id: image.id(),
        gpu_id: gpu,
    };
    let own_layout = image.pages_layout(gpu);
    let Some(own) = src.open_pages(&name, own_layout.clone())? else {
        if own_layout.bos().is_empty() {
            return Ok(None);
        }
        return Err(chain_error(name, "missing"));
    };
    let chunks = image.bo_chunks(gpu);
    let resolved: u64 = chunks
        .iter()
        .map(|c| {
            c.sources
                .iter()
                .filter(|s| **s != ChunkSource::Here)
                .count() as u64
        })
        .sum();
    let full = image.compat_pages_layout(gpu);
    let full = {
        let plain = full.clone();
        full.with_chunks(image.checksum_algo(), Vec::new())
            .unwrap_or(plain)
    };
    let mut reader: Box<dyn PieceSource + '_> =
        if image.has_references() && chunks.len() == own_layout.bos().len() {
            Box::new(ChainReader::new(own, chunks, resolver, &name)?)
        } else {
            Box::new(own)
        };
    let mut writer = dst.create_pages(&name, full)?;
    let mut buf = vec![0u8; 1 << 20];
    while let Some(piece) = reader.read_piece(&mut buf)? {
        writer.write(&buf[..piece.len])?;
    }
    reader.finish_pieces()?;
    let (sink, _) = writer.finish()?;
    crate::store::ImageWriter::commit(sink).map_err(|e| Error::io(name, "commit", e))?;
    Ok(Some(resolved))
}

/// Writes the drm-pages file of BO `index` of a render-node image whole;
/// returns the chunks read from elsewhere and the bytes written, `None`
/// when the BO has no drm-pages file (its contents were not dumped).
fn flatten_drm_pages<S: ImageStore>(
    src: &DirStore,
    dst: &S,
    image: &ValidatedRenderNode,
    index: usize,
    resolver: &ChunkResolver,
) -> Result<Option<(u64, u64)>, Error> {
    let (Some((name, own_layout)), Some((_, full))) =
        (image.drm_pages(index), image.compat_drm_pages(index))
    else {
        return Ok(None);
    };
    let Some(own) = src.open_pages(&name, own_layout)? else {
        return Ok(None);
    };
    let full = {
        let plain = full.clone();
        full.with_chunks(image.checksum_algo(), Vec::new())
            .unwrap_or(plain)
    };
    let bytes = full.total_len();
    let chunks = image.bo_chunks(index).filter(BoChunks::has_references);
    let resolved = chunks.as_ref().map_or(0, |c| {
        c.sources
            .iter()
            .filter(|s| **s != ChunkSource::Here)
            .count() as u64
    });
    let mut reader: Box<dyn PieceSource + '_> = match chunks {
        Some(chunks) => Box::new(ChainReader::new(own, vec![chunks], resolver, &name)?),
        None => Box::new(own),
    };
    let mut writer = dst.create_pages(&name, full)?;
    let mut buf = vec![0u8; 1 << 20];
    while let Some(piece) = reader.read_piece(&mut buf)? {
        writer.write(&buf[..piece.len])?;
    }
    reader.finish_pieces()?;
    let (sink, _) = writer.finish()?;
    crate::store::ImageWriter::commit(sink).map_err(|e| Error::io(name, "commit", e))?;
    Ok(Some((resolved, bytes)))
}
