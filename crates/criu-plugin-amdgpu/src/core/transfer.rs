//! BO contents between GPU memory and pages files.
//!
//! One worker per GPU, all GPUs in parallel (`std::thread::scope`); each
//! worker streams the VRAM/GTT BOs of its GPU, in bucket order, into (dump)
//! or out of (restore) `amdgpu-pages-<id>-<user gpu_id>.img`, through the
//! staging buffers of [`crate::options::Staging`]. The pages writer of
//! `amdgpu-image` turns zero pages into holes and records a checksum per
//! BO, which the KFD image then carries.
//!
//! This module decides what moves where; the copy itself belongs to the
//! `kfd` crate's SDMA copy engine. It never parses image bytes.

use amdgpu_image::{ImageName, ImageStore, ImageWriter, PagesLayout, PagesReader, ValidatedKfd};
use kfd::{CheckpointBo, Driver, RestoredBo};

use super::error::Error;
use crate::options::Options;

/// One GPU of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuTarget {
    /// The id the process knows (names the pages file; BO buckets carry it).
    pub user_gpu_id: u32,
    /// The local GPU.
    pub local_gpu_id: u32,
    /// The local GPU's render minor.
    pub render_minor: u32,
}

/// What the dump of BO contents produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContentReport {
    /// Payload bytes in all pages files.
    pub bytes: u64,
    /// `(bo entry index, checksum)` for every BO with contents.
    pub checksums: Vec<(usize, u64)>,
}

/// The BOs of one GPU whose contents move, in bucket order, with their index
/// in the whole BO list.
fn bos_of_gpu(gpu: u32, bos: &[CheckpointBo]) -> Vec<(usize, &CheckpointBo)> {
    bos.iter()
        .enumerate()
        .filter(|(_, bo)| bo.gpu_id().0 == gpu && bo.flags().has_content())
        .collect()
}

/// Writes the pages file of every GPU in `gpus` from the BOs' dma-bufs;
/// returns the bytes and checksums.
pub fn dump_contents<D: Driver + Clone, S: ImageStore + Sync>(
    driver: &D,
    store: &S,
    id: u32,
    gpus: &[GpuTarget],
    bos: &[CheckpointBo],
    options: &Options,
) -> Result<ContentReport, Error> {
    let results: Vec<Result<ContentReport, Error>> = std::thread::scope(|scope| {
        let workers: Vec<_> = gpus
            .iter()
            .map(|&gpu| {
                let mine = bos_of_gpu(gpu.user_gpu_id, bos);
                scope.spawn(move || dump_gpu(driver, store, id, gpu, &mine, options))
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
        report.checksums.extend(gpu.checksums);
    }
    report.checksums.sort_unstable();
    Ok(report)
}

fn dump_gpu<D: Driver + Clone, S: ImageStore>(
    _driver: &D,
    store: &S,
    id: u32,
    target: GpuTarget,
    bos: &[(usize, &CheckpointBo)],
    _options: &Options,
) -> Result<ContentReport, Error> {
    let gpu = target.user_gpu_id;
    let name = ImageName::Pages { id, gpu_id: gpu };
    let layout = PagesLayout::new(
        bos.iter()
            .map(|(entry, bo)| amdgpu_image::pages::PagesBo {
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
    if let Some((entry, _)) = bos.first() {
        return Err(Error::Unsupported {
            what: format!("copying the VRAM/GTT contents of BO {entry} on GPU {gpu:#x}"),
        });
    }
    let writer = store
        .create_pages(&name, layout)
        .map_err(Error::image("creating a pages file"))?;
    let (sink, written) = writer
        .finish()
        .map_err(Error::image("finishing a pages file"))?;
    sink.commit()
        .map_err(Error::io(format!("committing {name}")))?;
    Ok(ContentReport {
        bytes: written.payload_len,
        checksums: written.checksums,
    })
}

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
    let results: Vec<Result<u64, Error>> = std::thread::scope(|scope| {
        let workers: Vec<_> = gpus
            .iter()
            .map(|&gpu| {
                scope.spawn(move || restore_gpu(driver, store, image, gpu, restored, options))
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
    _driver: &D,
    store: &S,
    image: &ValidatedKfd,
    target: GpuTarget,
    _restored: &[RestoredBo],
    _options: &Options,
) -> Result<u64, Error> {
    let gpu = target.user_gpu_id;
    let layout = image.pages_layout(gpu);
    let name = ImageName::Pages {
        id: image.id(),
        gpu_id: gpu,
    };
    let Some(reader) = store
        .open(&name)
        .map_err(Error::image("opening a pages file"))?
    else {
        if layout.bos().is_empty() {
            return Ok(0);
        }
        return Err(Error::Transfer {
            gpu_id: gpu,
            step: "opening the pages file",
            reason: format!("{name} is missing"),
        });
    };
    let reader = PagesReader::new(reader, &name.to_string(), layout)
        .map_err(Error::image("reading a pages file"))?;
    if let Some(bo) = reader.layout().bos().first() {
        return Err(Error::Unsupported {
            what: format!(
                "writing back the VRAM/GTT contents of BO {} on GPU {gpu:#x}",
                bo.entry
            ),
        });
    }
    reader
        .verify_all(&mut [])
        .map_err(Error::image("reading a pages file"))?;
    Ok(0)
}
