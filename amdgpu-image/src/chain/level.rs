//! One level of a chain: the chunks an image set stores, indexed by digest,
//! with the set's `dump_id` and the `parent_dump_id` its images name.

use std::collections::HashMap;
use std::sync::Arc;

use super::chain_error;
use super::resolver::ChunkLocation;
use crate::chunks::{BoChunks, ChunkSource, Digest};
use crate::framing::ReadLimits;
use crate::messages::{CriuKfd, CriuRenderNode};
use crate::pages::PagesFile;
use crate::store::{DirStore, ImageStore};
use crate::validated::{ValidatedKfd, ValidatedRenderNode};
use crate::{Error, ImageKind, ImageName};

pub(super) struct Level {
    pub(super) store: DirStore,
    /// `(st_dev, st_ino)` of its directory.
    pub(super) identity: (u64, u64),
    /// The `dump_id` all KFD images of the level carry (`None` if they carry none).
    pub(super) dump_id: Option<Vec<u8>>,
    /// The `parent_dump_id` its images name (when any references its parent).
    pub(super) parent_dump_id: Option<Vec<u8>>,
    pub(super) index: HashMap<Digest, ChunkLocation>,
    pub(super) files: HashMap<ImageName, PagesFile>,
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

/// Reads every KFD image of `store` and indexes the chunks it stores, as
/// level `level` of a chain whose levels above are `above`: a directory
/// among them is refused before any of its images is read.
pub(super) fn index_level(
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
