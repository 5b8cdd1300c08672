//! BO contents into pages files: every GPU's KFD BOs, and one DRM BO.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use amdgpu_image::chunks::{ChecksumAlgo, CHUNK_SIZE};
use amdgpu_image::pages::{PagesBo, WrittenPages};
use amdgpu_image::{ImageName, ImageStore, ImageWriter, PagesLayout, PagesSink, PagesWriter};
use kfd::{CheckpointBo, Driver};

use crate::error::Error;
use crate::incremental::ChunkPlan;
use crate::options::Options;

use super::pipe::Pipe;
use super::{counting_cpu, ContentReport, DrmDevice, GpuTarget, StagingPool};

/// The layout of a pages file this crate writes: chunk digests of
/// [`CHUNK_SIZE`] and the version-2 checksum.
fn dump_layout(layout: PagesLayout) -> PagesLayout {
    let plain = layout.clone();
    layout
        .with_chunks(
            ChecksumAlgo::V2 {
                chunk_size: CHUNK_SIZE,
            },
            Vec::new(),
        )
        .unwrap_or(plain)
}

/// The BOs of one GPU whose contents move, in bucket order, with their index
/// in the whole BO list.
fn bos_of_gpu(gpu: u32, bos: &[CheckpointBo]) -> Vec<(usize, &CheckpointBo)> {
    bos.iter()
        .enumerate()
        .filter(|(_, bo)| bo.gpu_id().0 == gpu && bo.flags().has_content())
        .collect()
}

/// Bytes of BO contents [`dump_contents`] moves for `gpus` (the sum of the
/// sizes of their BOs with contents).
pub fn content_bytes(gpus: &[GpuTarget], bos: &[CheckpointBo]) -> u64 {
    gpus.iter()
        .flat_map(|g| bos_of_gpu(g.user_gpu_id, bos))
        .map(|(_, bo)| bo.bucket.size)
        .sum()
}

/// Writes the pages file of every GPU in `gpus` from the BOs' dma-bufs;
/// returns the bytes and checksums.
#[allow(clippy::too_many_arguments)]
pub fn dump_contents<D: Driver + Clone, S: ImageStore + Sync>(
    driver: &D,
    store: &S,
    id: u32,
    gpus: &[GpuTarget],
    bos: &[CheckpointBo],
    options: &Options,
    plan: Option<&Arc<ChunkPlan>>,
    pool: Option<&StagingPool>,
) -> Result<ContentReport, Error> {
    let results: Vec<Result<ContentReport, Error>> = std::thread::scope(|scope| {
        let workers: Vec<_> = gpus
            .iter()
            .map(|&gpu| {
                let mine = bos_of_gpu(gpu.user_gpu_id, bos);
                scope.spawn(move || {
                    counting_cpu(|| dump_gpu(driver, store, id, gpu, &mine, options, plan, pool))
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
                        step: "dump worker",
                        reason: "the worker thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    let mut report = ContentReport::default();
    for result in results {
        let gpu = result?;
        report.bytes += gpu.bytes;
        report.stored_bytes += gpu.stored_bytes;
        report.checksums.extend(gpu.checksums);
        report.digests.extend(gpu.digests);
        report.sources.extend(gpu.sources);
    }
    report.checksums.sort_unstable();
    report.digests.sort_unstable();
    report.sources.sort_unstable_by_key(|(entry, _)| *entry);
    Ok(report)
}

/// Lets `plan` decide where each chunk written by `writer` goes, when it
/// has a parent or deduplicates (said when the store cannot take it).
fn apply_plan<W: PagesSink>(
    writer: &mut PagesWriter<W>,
    plan: Option<&Arc<ChunkPlan>>,
    name: &ImageName,
) {
    if let Some(plan) = plan.filter(|p| p.filters()) {
        if !writer.set_filter(plan.filter()) {
            log::info!("{name}: the store cannot take chunk references; written whole");
        }
    }
}

fn finish_pages<W: ImageWriter>(
    writer: PagesWriter<W>,
    name: &ImageName,
) -> Result<WrittenPages, Error> {
    let (sink, written) = writer
        .finish()
        .map_err(Error::image("finishing a pages file"))?;
    sink.commit()
        .map_err(Error::io(format!("committing {name}")))?;
    Ok(written)
}

#[allow(clippy::too_many_arguments)]
fn dump_gpu<D: Driver + Clone, S: ImageStore>(
    driver: &D,
    store: &S,
    id: u32,
    target: GpuTarget,
    bos: &[(usize, &CheckpointBo)],
    options: &Options,
    plan: Option<&Arc<ChunkPlan>>,
    pool: Option<&StagingPool>,
) -> Result<ContentReport, Error> {
    let gpu = target.user_gpu_id;
    let name = ImageName::Pages { id, gpu_id: gpu };
    let layout = PagesLayout::new(
        bos.iter()
            .map(|(entry, bo)| PagesBo {
                entry: *entry,
                size: bo.bucket.size,
                checksum: None,
            })
            .collect(),
    )
    .ok_or_else(|| Error::Transfer {
        gpu_id: gpu,
        step: "sizing the pages file",
        reason: "the BO sizes overflow 64 bits".into(),
    })?;
    let mut writer = store
        .create_pages(&name, dump_layout(layout))
        .map_err(Error::image("creating a pages file"))?;
    apply_plan(&mut writer, plan, &name);
    if !bos.is_empty() {
        let largest = bos.iter().map(|(_, bo)| bo.bucket.size).max().unwrap_or(0);
        let mut pipe = Pipe::open(
            driver,
            target.render_minor,
            options.staging().for_largest_bo(largest),
            gpu,
            pool,
        )?;
        for (entry, bo) in bos {
            let dmabuf = bo.dmabuf.as_ref().ok_or(Error::BoWithoutDmabuf {
                gpu_id: gpu,
                entry: *entry,
                missing: "the kernel exported no dma-buf",
            })?;
            pipe.read_bo(
                dmabuf.as_fd(),
                bo.bucket.size,
                &mut writer,
                &format!("BO {entry}"),
            )?;
        }
        pipe.finish_reads(&mut writer)?;
        pipe.close()?;
    }
    let written = finish_pages(writer, &name)?;
    Ok(ContentReport::from(written))
}

/// Writes one DRM BO's contents (through its dma-buf) into the pages file
/// `name`, only the chunks `plan` says are not stored elsewhere (as for
/// KFD BOs); returns the BO's bytes, checksum, chunk digests and (when the
/// plan decided) chunk sources, as entry 0. With `pool`, the copy waits for
/// its turn on the GPU and reuses the pool's staging buffers.
#[allow(clippy::too_many_arguments)]
pub fn dump_drm_bo<D: Driver + Clone, S: ImageStore>(
    driver: &D,
    store: &S,
    name: &ImageName,
    device: DrmDevice,
    dmabuf: BorrowedFd<'_>,
    size: u64,
    options: &Options,
    plan: Option<&Arc<ChunkPlan>>,
    pool: Option<&StagingPool>,
) -> Result<ContentReport, Error> {
    let layout = PagesLayout::from_sizes([size])
        .map(dump_layout)
        .ok_or_else(|| Error::BoTooLarge {
            file: name.to_string(),
            size,
        })?;
    let mut writer = store
        .create_pages(name, layout)
        .map_err(Error::image("creating a DRM pages file"))?;
    apply_plan(&mut writer, plan, name);
    if size > 0 {
        let mut pipe = Pipe::open(
            driver,
            device.render_minor,
            options.staging().for_largest_bo(size),
            device.gpu_id,
            pool,
        )?;
        pipe.read_bo(dmabuf, size, &mut writer, &name.to_string())?;
        pipe.finish_reads(&mut writer)?;
        pipe.close()?;
    }
    let written = finish_pages(writer, name)?;
    Ok(ContentReport::from(written))
}
