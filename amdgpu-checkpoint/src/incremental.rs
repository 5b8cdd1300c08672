//! Which chunks a dump writes: all of them, or (incremental dump, `parent`
//! link of CRIU's `--prev-images-dir`) only those the parent image set does
//! not hold, and (`KFD_DEDUP`) each distinct chunk of the dump once.
//!
//! A [`ChunkPlan`] lives for one dump (one dumper process): it names the
//! dump ([`ChunkPlan::dump_id`], recorded in every KFD and render-node
//! image), knows the digests of the parent set (every chunk of every BO of
//! every KFD and render-node image there, since the parent can restore each
//! of them through its own chain), and the digests already written by this
//! dump when deduplicating (KFD and DRM BOs alike). The pages writers of
//! both ask it about every chunk ([`ChunkPlan::filter`]).
//!
//! A dump whose store has no parent, or cannot take references (a stream:
//! CRIU's `--stream` has no parent images, and its pages files cannot have
//! their length header rewritten), writes every chunk, and says so in the
//! log. This module never reads BO contents.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use amdgpu_image::chunks::{chunk_count, chunk_len, BoChunks, Digest, CHUNK_SIZE};
use amdgpu_image::pages::ChunkFilter;
use amdgpu_image::{
    ChunkResolver, ChunkSource, CriuKfd, CriuRenderNode, DirStore, ImageKind, ImageStore,
    ReadLimits,
};

use crate::error::Error;

/// The digests of a parent image set.
#[derive(Debug)]
struct Parent {
    dump_id: Vec<u8>,
    shown: String,
    chunks: HashSet<(Digest, u64)>,
}

/// What one dump writes; see the module docs.
#[derive(Debug)]
pub struct ChunkPlan {
    dump_id: [u8; 16],
    parent: Option<Parent>,
    dedup: Option<Mutex<HashSet<(Digest, u64)>>>,
    /// Chunks referenced from the parent / from elsewhere in the set.
    from_parent: AtomicU64,
    from_set: AtomicU64,
    /// Bytes not written thanks to references.
    saved_bytes: AtomicU64,
}

/// How a [`ChunkPlan`] counts what it decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanCounts {
    /// Chunks referenced from the parent chain.
    pub from_parent: u64,
    /// Chunks referenced from elsewhere in the set.
    pub from_set: u64,
    /// Bytes those chunks hold (not written).
    pub saved_bytes: u64,
}

impl ChunkPlan {
    /// The plan of a dump into `store`: reads the parent set's digests
    /// when the store is a directory with a `parent` link; deduplicates
    /// when `dedup` is set and the store can take references. Every
    /// choice is logged.
    pub fn for_store<S: ImageStore>(store: &S, dedup: bool) -> Result<Self, Error> {
        let mut plan = ChunkPlan {
            dump_id: new_dump_id(),
            parent: None,
            dedup: None,
            from_parent: AtomicU64::new(0),
            from_set: AtomicU64::new(0),
            saved_bytes: AtomicU64::new(0),
        };
        let Some(dir) = store.as_dir() else {
            log::info!(
                "images are streamed: no parent images{}; every chunk is written (full dump)",
                if dedup {
                    ", and KFD_DEDUP needs an image directory"
                } else {
                    ""
                }
            );
            return Ok(plan);
        };
        if dedup {
            plan.dedup = Some(Mutex::new(HashSet::new()));
            log::info!("KFD_DEDUP: each distinct chunk of this dump is written once");
        }
        match dir.parent() {
            Ok(None) => log::info!("no parent images: every chunk is written (full dump)"),
            // `--prev-images-dir .`: the "parent" is the set this dump
            // replaces; referencing it would name the new set as its own
            // parent (a loop restore refuses).
            Ok(Some(parent)) if same_dir(dir, &parent) => log::warn!(
                "parent images {} is this images directory itself: every chunk is written \
                 (full dump)",
                parent.shown()
            ),
            Ok(Some(parent)) => match read_parent(&parent) {
                Ok(Some(p)) => {
                    log::info!(
                        "parent images {}: {} distinct chunks known; only chunks that differ \
                         are written (incremental dump)",
                        p.shown,
                        p.chunks.len()
                    );
                    plan.parent = Some(p);
                }
                Ok(None) => log::info!(
                    "parent images {} carry no chunk digests (another producer, or an older \
                     format): every chunk is written (full dump)",
                    parent.shown()
                ),
                Err(e) => log::warn!(
                    "parent images {} cannot be used ({e}): every chunk is written (full dump)",
                    parent.shown()
                ),
            },
            Err(e) => log::warn!("{e}: every chunk is written (full dump)"),
        }
        Ok(plan)
    }

    /// The 16 bytes naming this dump.
    pub fn dump_id(&self) -> &[u8; 16] {
        &self.dump_id
    }

    /// The parent's `dump_id`, when this dump references its chunks.
    pub fn parent_dump_id(&self) -> Option<&[u8]> {
        self.parent.as_ref().map(|p| p.dump_id.as_slice())
    }

    /// Whether the pages writers need a filter (a parent or dedup).
    pub fn filters(&self) -> bool {
        self.parent.is_some() || self.dedup.is_some()
    }

    /// Where the chunk of `digest` and `len` bytes goes.
    pub fn decide(&self, digest: Digest, len: u64) -> ChunkSource {
        let source = if self
            .parent
            .as_ref()
            .is_some_and(|p| p.chunks.contains(&(digest, len)))
        {
            self.from_parent.fetch_add(1, Ordering::Relaxed);
            ChunkSource::Parent
        } else if let Some(seen) = &self.dedup {
            // A poisoned set (a panicking writer) stores the chunk: never wrong.
            let first = seen.lock().map_or(true, |mut s| s.insert((digest, len)));
            if first {
                ChunkSource::Here
            } else {
                self.from_set.fetch_add(1, Ordering::Relaxed);
                ChunkSource::Set
            }
        } else {
            ChunkSource::Here
        };
        if source != ChunkSource::Here {
            self.saved_bytes.fetch_add(len, Ordering::Relaxed);
        }
        source
    }

    /// The pages writer's filter asking [`decide`](Self::decide).
    pub fn filter(self: &Arc<Self>) -> ChunkFilter {
        let plan = Arc::clone(self);
        Box::new(move |_entry, _index, len, digest| plan.decide(digest, len))
    }

    /// What was decided so far.
    pub fn counts(&self) -> PlanCounts {
        PlanCounts {
            from_parent: self.from_parent.load(Ordering::Relaxed),
            from_set: self.from_set.load(Ordering::Relaxed),
            saved_bytes: self.saved_bytes.load(Ordering::Relaxed),
        }
    }
}

/// The index of the chunks of the image set in `store` (parents read when
/// first needed) when the image `what` (`file 5`) references chunks stored
/// elsewhere; `None` when it does not.
pub fn resolver_for<S: ImageStore>(
    store: &S,
    references: bool,
    what: &str,
) -> Result<Option<ChunkResolver>, Error> {
    if !references {
        return Ok(None);
    }
    let dir = store.as_dir().ok_or_else(|| Error::ChunksNeedDirectory {
        image: what.to_owned(),
    })?;
    ChunkResolver::new(dir, ReadLimits::default())
        .map(Some)
        .map_err(Error::image("indexing the chunks of the image set"))
}

/// Logs how much of an image's contents (`what`: `file 5`) a dump wrote
/// when some were referenced instead.
pub fn log_written(what: &str, stored: u64, total: u64, references_parent: bool) {
    if stored < total {
        log::info!(
            "{what}: {stored} of {total} content bytes written, the rest referenced ({})",
            if references_parent {
                "incremental dump"
            } else {
                "deduplicated"
            }
        );
    }
}

/// Whether `a` and `b` hold the same directory (unknown counts as the
/// same: the safe side is a full dump).
fn same_dir(a: &DirStore, b: &DirStore) -> bool {
    match (a.identity(), b.identity()) {
        (Ok(a), Ok(b)) => a == b,
        _ => true,
    }
}

/// The digests of every chunk of the parent set; `Ok(None)` when its
/// images carry none at our chunk size.
fn read_parent(parent: &DirStore) -> Result<Option<Parent>, Error> {
    let names = parent
        .list()
        .map_err(Error::image("listing the parent images"))?;
    let mut dump_id = None;
    let mut chunks = HashSet::new();
    for name in &names {
        // Every KFD image must carry digests; render-node images of a
        // producer that names no dump are not used.
        let (id, chunk_size, bos, required) = match name.kind() {
            ImageKind::Kfd => {
                let msg: CriuKfd = read_parent_image(parent, name)?;
                let bos: Vec<_> = (msg.bo_entries.iter().enumerate())
                    .map(|(i, bo)| bo.chunks(i, msg.chunk_size))
                    .collect();
                (msg.dump_id, msg.chunk_size, bos, true)
            }
            ImageKind::RenderNode => {
                let msg: CriuRenderNode = read_parent_image(parent, name)?;
                let bos: Vec<_> = (msg.bo_entries.iter().enumerate())
                    .map(|(i, bo)| bo.chunks(i, msg.chunk_size))
                    .collect();
                (msg.dump_id, msg.chunk_size, bos, false)
            }
            _ => continue,
        };
        let used = take_image(&mut dump_id, &mut chunks, name, &id, chunk_size, bos)?;
        if required && !used {
            return Ok(None);
        }
    }
    Ok(dump_id.map(|dump_id| Parent {
        dump_id,
        shown: parent.shown(),
        chunks,
    }))
}

/// The message of the parent's image `name`.
fn read_parent_image<M: amdgpu_image::ImageMessage>(
    parent: &DirStore,
    name: &amdgpu_image::ImageName,
) -> Result<M, Error> {
    parent
        .read_message(name, ReadLimits::default())
        .map_err(Error::image("reading a parent image"))?
        .ok_or(Error::ParentVanished { name: *name })
}

/// Adds the chunks of one parent image (`bos`, each entry's recorded
/// chunks) to `chunks`; `Ok(false)` when the image carries no dump id or
/// digests at our chunk size (it is not used), an error when it belongs to
/// another dump than `dump_id`.
fn take_image(
    dump_id: &mut Option<Vec<u8>>,
    chunks: &mut HashSet<(Digest, u64)>,
    name: &amdgpu_image::ImageName,
    id: &Option<Vec<u8>>,
    chunk_size: Option<u64>,
    bos: Vec<Result<Option<BoChunks>, amdgpu_image::ChunkFieldError>>,
) -> Result<bool, Error> {
    let Some(id) = id.clone().filter(|id| id.len() == 16) else {
        return Ok(false);
    };
    if chunk_size != Some(CHUNK_SIZE) {
        return Ok(false);
    }
    if dump_id.get_or_insert_with(|| id.clone()) != &id {
        return Err(Error::ParentOfOtherDump { name: *name });
    }
    for (i, parsed) in bos.into_iter().enumerate() {
        let parsed = parsed.map_err(|source| Error::ParentChunks {
            name: *name,
            entry: i,
            source,
        })?;
        if let Some(c) = parsed {
            insert_chunks(chunks, &c);
        }
    }
    Ok(true)
}

/// Every chunk of `c` (the parent can restore each through its own chain).
fn insert_chunks(chunks: &mut HashSet<(Digest, u64)>, c: &BoChunks) {
    let count = chunk_count(c.size, c.chunk_size);
    for (k, d) in c.digests.iter().enumerate().take(count as usize) {
        chunks.insert((*d, chunk_len(c.size, c.chunk_size, k as u64)));
    }
}

/// 16 bytes unlikely to repeat: the kernel's randomness when readable,
/// else a digest of the time, the pid and a counter.
fn new_dump_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut id))
        .is_ok()
    {
        return id;
    }
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = format!(
        "{now}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    amdgpu_image::chunks::chunk_digest(seed.as_bytes()).to_le_bytes()
}
