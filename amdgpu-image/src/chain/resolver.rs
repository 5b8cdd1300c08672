//! [`ChunkResolver`]: finds a chunk by digest in an image set or, level by
//! level as far as needed, in its parent chain, and reads it from there.

use std::sync::{Arc, Mutex};

use super::chain_error;
use super::level::{index_level, Level};
use crate::chunks::{ChunkSource, Digest};
use crate::framing::ReadLimits;
use crate::store::DirStore;
use crate::{Error, ImageName};

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
