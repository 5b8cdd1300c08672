//! Pages files into restored BOs: every GPU's KFD BOs, and one DRM BO.

use std::os::fd::{AsFd, BorrowedFd};

use amdgpu_image::{
    ChainReader, ChunkResolver, ImageName, ImageStore, PagesLayout, PieceSource, ValidatedKfd,
};
use kfd::{Driver, RestoredBo};

use crate::error::Error;
use crate::options::Options;

use super::pipe::Pipe;
use super::{counting_cpu, DrmDevice, GpuTarget};

/// Writes the contents of every GPU's pages file back into the restored
/// BOs; returns the bytes written. A GPU without BO contents needs no pages
/// file (images of the C plugin always have one, with an empty payload).
pub fn restore_contents<D: Driver + Clone, S: ImageStore + Sync>(
    driver: &D,
    store: &S,
    image: &ValidatedKfd,
    gpus: &[GpuTarget],
    restored: &[RestoredBo],
    options: &Options,
) -> Result<u64, Error> {
    // Chunks stored in the parent chain or elsewhere in the set are found
    // through one index of the set (parents read when first needed).
    let resolver = crate::incremental::resolver_for(
        store,
        image.has_references(),
        &format!("file {}", image.id()),
    )?;
    let resolver = resolver.as_ref();
    let results: Vec<Result<u64, Error>> = std::thread::scope(|scope| {
        let workers: Vec<_> = gpus
            .iter()
            .map(|&gpu| {
                scope.spawn(move || {
                    counting_cpu(|| {
                        restore_gpu(driver, store, image, gpu, restored, options, resolver)
                    })
                })
            })
            .collect();
        workers
            .into_iter()
            .zip(gpus)
            .map(|(worker, gpu)| {
                worker.join().unwrap_or_else(|_| {
                    Err(Error::Transfer {
                        gpu_id: gpu.user_gpu_id,
                        step: "restore worker",
                        reason: "the worker thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    let mut bytes = 0;
    for result in results {
        bytes += result?;
    }
    Ok(bytes)
}

fn restore_gpu<D: Driver + Clone, S: ImageStore>(
    driver: &D,
    store: &S,
    image: &ValidatedKfd,
    target: GpuTarget,
    restored: &[RestoredBo],
    options: &Options,
    resolver: Option<&ChunkResolver>,
) -> Result<u64, Error> {
    let gpu = target.user_gpu_id;
    let name = ImageName::Pages {
        id: image.id(),
        gpu_id: gpu,
    };
    let dmabuf_of = |entry: usize| {
        restored
            .get(entry)
            .and_then(|r| r.dmabuf.as_ref())
            .map(|f| f.as_fd())
    };
    let chained = resolver.map(|r| (r, image.bo_chunks(gpu)));
    restore_pages_from(
        driver,
        store,
        &name,
        image.pages_layout(gpu),
        chained,
        gpu,
        target.render_minor,
        options,
        &dmabuf_of,
    )
}

/// Fills the BOs of one GPU's pages file `name` (with `layout`) through
/// their dma-bufs (`dmabuf_of(layout entry)`), on a private copy engine of
/// render minor `render_minor`; verifies the end of the file and every
/// checksum and returns the bytes written. A missing file is fine when the
/// layout has no BO. Used by the in-task restore and by the parallel
/// restore worker in CRIU's main process.
#[allow(clippy::too_many_arguments)]
pub fn restore_pages<'f, D: Driver + Clone, S: ImageStore>(
    driver: &D,
    store: &S,
    name: &ImageName,
    layout: PagesLayout,
    gpu: u32,
    render_minor: u32,
    options: &Options,
    dmabuf_of: &dyn Fn(usize) -> Option<BorrowedFd<'f>>,
) -> Result<u64, Error> {
    counting_cpu(|| {
        restore_pages_from(
            driver,
            store,
            name,
            layout,
            None,
            gpu,
            render_minor,
            options,
            dmabuf_of,
        )
    })
}

/// [`restore_pages`], with the BOs' chunks read through `chained` (the
/// set's resolver and the GPU's BO chunk lists) when the image references
/// chunks stored elsewhere: every chunk from wherever it is stored, each
/// verified by its digest.
#[allow(clippy::too_many_arguments)]
fn restore_pages_from<'f, D: Driver + Clone, S: ImageStore>(
    driver: &D,
    store: &S,
    name: &ImageName,
    layout: PagesLayout,
    chained: Option<(&ChunkResolver, Vec<amdgpu_image::BoChunks>)>,
    gpu: u32,
    render_minor: u32,
    options: &Options,
    dmabuf_of: &dyn Fn(usize) -> Option<BorrowedFd<'f>>,
) -> Result<u64, Error> {
    let no_bos = layout.bos().is_empty();
    // A reader over a directory store's file skips its holes (zero runs are
    // filled into staging without reading the file; still copied to the
    // GPU, since a restored BO's memory is not known to be cleared).
    let Some(own) = store
        .open_pages(name, layout)
        .map_err(Error::image("reading a pages file"))?
    else {
        if no_bos {
            return Ok(0);
        }
        return Err(Error::Transfer {
            gpu_id: gpu,
            step: "opening the pages file",
            reason: format!("{name} is missing"),
        });
    };
    // (entry, full size) of every BO, in file order.
    let (bos, mut reader): (Vec<(usize, u64)>, Box<dyn PieceSource + '_>) = match chained {
        Some((resolver, chunks)) => {
            let bos = chunks.iter().map(|c| (c.entry, c.size)).collect();
            let reader = ChainReader::new(own, chunks, resolver, name)
                .map_err(Error::image("reading a pages file"))?;
            (bos, Box::new(reader))
        }
        None => {
            let bos = own
                .layout()
                .bos()
                .iter()
                .map(|b| (b.entry, b.size))
                .collect();
            (bos, Box::new(own))
        }
    };
    let total = bos.iter().map(|(_, size)| size).sum();
    if !bos.is_empty() {
        let largest = bos.iter().map(|(_, size)| *size).max().unwrap_or(0);
        let mut pipe = Pipe::open(
            driver,
            render_minor,
            options.staging().for_largest_bo(largest),
            gpu,
            None,
        )?;
        for &(entry, size) in &bos {
            let dmabuf = dmabuf_of(entry).ok_or(Error::BoWithoutDmabuf {
                gpu_id: gpu,
                entry,
                missing: "no dma-buf to fill",
            })?;
            pipe.write_bo(dmabuf, entry, size, reader.as_mut(), name)?;
        }
        pipe.close()?;
    }
    // The end of the file (and every checksum) is verified.
    reader
        .finish_pieces()
        .map_err(Error::image("reading a pages file"))?;
    Ok(total)
}

/// Fills one restored DRM BO (through its dma-buf) from the pages file
/// `name` with `layout` (a single BO); with `chained` (the set's resolver
/// and the BO's chunk list), the chunks stored elsewhere are read from the
/// set or its parent chain, each verified by its digest, as for KFD BOs.
#[allow(clippy::too_many_arguments)]
pub fn restore_drm_bo<D: Driver + Clone, S: ImageStore>(
    driver: &D,
    store: &S,
    name: &ImageName,
    layout: PagesLayout,
    chained: Option<(&ChunkResolver, amdgpu_image::BoChunks)>,
    device: DrmDevice,
    dmabuf: BorrowedFd<'_>,
    options: &Options,
) -> Result<u64, Error> {
    let own = store
        .open_pages(name, layout)
        .map_err(Error::image("reading a DRM pages file"))?
        .ok_or_else(|| Error::PagesFileMissing {
            file: name.to_string(),
        })?;
    let (entry, size, mut reader): (usize, u64, Box<dyn PieceSource + '_>) = match chained {
        Some((resolver, chunks)) => {
            let (entry, size) = (chunks.entry, chunks.size);
            let reader = ChainReader::new(own, vec![chunks], resolver, name)
                .map_err(Error::image("reading a DRM pages file"))?;
            (entry, size, Box::new(reader))
        }
        None => {
            let bo = own
                .layout()
                .bos()
                .first()
                .copied()
                .ok_or_else(|| Error::EmptyDrmLayout {
                    file: name.to_string(),
                })?;
            if bo.size == 0 {
                // Nothing to copy: the file's end is checked.
                own.verify_all(&mut [])
                    .map_err(Error::image("reading a DRM pages file"))?;
                return Ok(0);
            }
            (bo.entry, bo.size, Box::new(own))
        }
    };
    if size > 0 {
        let mut pipe = Pipe::open(
            driver,
            device.render_minor,
            options.staging().for_largest_bo(size),
            device.gpu_id,
            None,
        )?;
        pipe.write_bo(dmabuf, entry, size, reader.as_mut(), name)?;
        pipe.close()?;
    }
    // The end of the file (and the checksum or every chunk) is verified.
    reader
        .finish_pieces()
        .map_err(Error::image("reading a DRM pages file"))?;
    Ok(size)
}
