//! [`flatten`]: writes a chained or deduplicated image set as a standalone
//! one, every BO's chunks in its own pages file.

use std::io::Read;

use super::chain_error;
use super::reader::{ChainReader, PieceSource};
use super::resolver::ChunkResolver;
use crate::chunks::{BoChunks, ChunkSource};
use crate::framing::ReadLimits;
use crate::messages::{CriuKfd, CriuRenderNode};
use crate::store::{DirStore, ImageStore};
use crate::validated::{ValidatedKfd, ValidatedRenderNode};
use crate::{Error, ImageKind, ImageName};

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
