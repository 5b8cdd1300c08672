//! [`verify_references`]: checks every chunk the images of a set reference
//! elsewhere, in the set or its parent chain, without restoring anything.

use super::resolver::ChunkResolver;
use crate::chunks::{BoChunks, ChunkSource};
use crate::framing::ReadLimits;
use crate::messages::{CriuKfd, CriuRenderNode};
use crate::store::ImageStore;
use crate::validated::{ValidatedKfd, ValidatedRenderNode};
use crate::{Error, ImageKind, ImageName};

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
