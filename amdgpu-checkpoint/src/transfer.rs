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

use std::os::fd::{AsFd, BorrowedFd};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amdgpu_image::chunks::{ChecksumAlgo, Digest, CHUNK_SIZE};
use amdgpu_image::pages::{PagesBo, WrittenPages};
use amdgpu_image::{
    ChainReader, ChunkResolver, ChunkSource, ImageName, ImageStore, ImageWriter, PagesLayout,
    PagesSink, PagesWriter, PieceSource, ValidatedKfd,
};
use kfd::{
    CheckpointBo, CopyEngine, CopyEngineConfig, Driver, Fence, ImportedBo, RenderMinor, RenderNode,
    RestoredBo, StagingBuffer, StagingSlot,
};

use crate::error::Error;
use crate::incremental::ChunkPlan;
use crate::options::{Options, Staging};

/// CPU nanoseconds the transfer threads of this process used (dump and
/// restore workers, DRM BO copies), for [`transfer_cpu_time`].
static TRANSFER_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// CPU time the plugin's own transfer threads have used in this process so
/// far: the per-GPU workers that drain staging memory into pages files
/// (digests, zero detection, writes) or fill it from them, measured per
/// thread (`CLOCK_THREAD_CPUTIME_ID`). The copy engine's work (the SDMA,
/// on a real machine the GPU's; in `kfd-sim` its ring threads) is not in
/// it. Benchmarks read it before and after a dump or restore.
pub fn transfer_cpu_time() -> Duration {
    Duration::from_nanos(TRANSFER_CPU_NS.load(Ordering::Relaxed))
}

/// Runs `work` and adds the CPU time it took on this thread to
/// [`transfer_cpu_time`].
fn counting_cpu<T>(work: impl FnOnce() -> T) -> T {
    let start = crate::sys::thread_cpu_time();
    let out = work();
    let used = crate::sys::thread_cpu_time().saturating_sub(start);
    TRANSFER_CPU_NS.fetch_add(
        u64::try_from(used.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    out
}

/// SDMA rings one GPU's transfer spreads its copies over (when the GPU has
/// them): consecutive staging slots copy on different engines at once, the
/// way to feed a PCIe link one engine cannot fill (the C plugin copies on
/// one). With the default ring of four slots, two copies run on each.
pub const SDMA_RINGS: u32 = 2;

/// What the transfers of one dump share: staging buffers, one turn per GPU
/// and a stop flag.
///
/// Staging buffers are kept from one GPU's transfer for the next within
/// one dumper process: a later task's copy engine registers memory that
/// is already faulted in instead of mapping, faulting and zeroing new
/// pages (a 32 MiB ring per GPU per task by default; on a GPU the userptr
/// registration pins, and so faults in, every page of it). Only buffers of
/// the exact length asked for are reused, so the staging memory stays what
/// [`Staging`] allows; the pool never holds more buffers than were in use
/// at once, and frees them when dropped (with the dump). A reused buffer
/// still holds the bytes of an earlier copy: a copy engine only hands out
/// the bytes its last copy into a slot wrote.
///
/// The transfers of several tasks may run at once (the dumper finishes
/// them in the background, see [`crate::dump`]); each GPU's copy engine
/// serves one of them at a time ([`StagingPool::turn`]), so the staging
/// memory per GPU stays what [`Staging`] (`KFD_MAX_BUFFER_SIZE`) allows
/// however many tasks use the GPU. A dump that failed elsewhere
/// [stops](StagingPool::stop) its transfers between two staging buffers.
#[derive(Debug, Default)]
pub struct StagingPool {
    free: Mutex<Vec<StagingBuffer>>,
    /// Render minors of the GPUs whose copy engine a transfer holds.
    busy: Mutex<std::collections::BTreeSet<u32>>,
    freed: std::sync::Condvar,
    stopped: std::sync::atomic::AtomicBool,
}

/// One transfer's turn on a GPU ([`StagingPool::turn`]), given back when
/// dropped.
#[derive(Debug)]
pub struct GpuTurn<'p> {
    pool: &'p StagingPool,
    minor: u32,
}

impl Drop for GpuTurn<'_> {
    fn drop(&mut self) {
        // A poisoned set (a panicking holder) still frees the GPU.
        let mut busy = self.pool.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.remove(&self.minor);
        drop(busy);
        self.pool.freed.notify_all();
    }
}

impl StagingPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// A kept buffer of `len` bytes rounded up to whole pages, if any.
    fn take(&self, len: usize) -> Option<StagingBuffer> {
        let page = kfd::staging::page_size();
        let want = len.checked_next_multiple_of(page)?;
        let mut free = self.free.lock().ok()?;
        let at = free.iter().position(|b| b.len() == want)?;
        Some(free.swap_remove(at))
    }

    /// Keeps `buffer` for a later transfer.
    fn give(&self, buffer: StagingBuffer) {
        if let Ok(mut free) = self.free.lock() {
            free.push(buffer);
        }
    }

    /// Bytes of staging memory the pool holds.
    pub fn held_bytes(&self) -> usize {
        self.free
            .lock()
            .map_or(0, |f| f.iter().map(StagingBuffer::len).sum())
    }

    /// Waits until no other transfer holds the copy engine of the GPU with
    /// render minor `minor`, then holds it until the turn is dropped. A
    /// transfer holds one GPU at a time, so turns cannot deadlock.
    pub fn turn(&self, minor: u32) -> GpuTurn<'_> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while busy.contains(&minor) {
            busy = self.freed.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        busy.insert(minor);
        GpuTurn { pool: self, minor }
    }

    /// Stops every transfer using the pool before its next staging buffer
    /// (the dump failed elsewhere; nothing it writes would be kept).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

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

/// The GPU a DRM BO's transfer runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrmDevice {
    /// The GPU's user id (names it in errors).
    pub gpu_id: u32,
    /// The local render minor the copy engine opens.
    pub render_minor: u32,
}

/// What the dump of BO contents produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContentReport {
    /// Bytes of BO contents dumped (the sum of the BO sizes).
    pub bytes: u64,
    /// Bytes the pages files hold (less than `bytes` when chunks were
    /// referenced from the parent or from elsewhere in the dump).
    pub stored_bytes: u64,
    /// `(bo entry index, checksum)` for every BO with contents.
    pub checksums: Vec<(usize, u64)>,
    /// `(bo entry index, chunk digests)` for every BO with contents.
    pub digests: Vec<(usize, Vec<Digest>)>,
    /// `(bo entry index, chunk sources)` for every BO with contents, when
    /// a [`ChunkPlan`] decided.
    pub sources: Vec<(usize, Vec<ChunkSource>)>,
}

impl From<WrittenPages> for ContentReport {
    fn from(written: WrittenPages) -> Self {
        ContentReport {
            bytes: written.payload_len,
            stored_bytes: written.stored_len,
            checksums: written.checksums,
            digests: written.digests,
            sources: written.sources,
        }
    }
}

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

/// Staging slots of one engine with the copy in flight on each, used
/// round-robin so chunks complete in submission order. The pipeline runs
/// across BO boundaries: a BO is released once the slot carrying its last
/// chunk has been drained (`release`), not by emptying the ring at the end
/// of every BO.
struct Ring {
    slots: Vec<StagingSlot>,
    pending: Vec<Option<(Fence, usize)>>,
    release: Vec<Option<ImportedBo>>,
    next: usize,
}

fn transfer_error(gpu: u32, step: &'static str) -> impl FnOnce(kfd::Error) -> Error {
    move |e| Error::Transfer {
        gpu_id: gpu,
        step,
        reason: e.to_string(),
    }
}

/// One GPU's copy engine on a private render file with its staging ring.
/// The private file's VM holds nothing but the engine's mappings, so no VA
/// can collide with the process's BOs.
struct Pipe<'p, D: Driver + Clone> {
    engine: CopyEngine<D>,
    ring: Ring,
    chunk: u64,
    gpu: u32,
    /// Where the staging buffers go back on [`close`](Self::close).
    pool: Option<&'p StagingPool>,
    /// This pipe's turn on its GPU, while it has one from `pool`.
    _turn: Option<GpuTurn<'p>>,
}

impl<'p, D: Driver + Clone> Pipe<'p, D> {
    fn open(
        driver: &D,
        render_minor: u32,
        staging: Staging,
        gpu: u32,
        pool: Option<&'p StagingPool>,
    ) -> Result<Self, Error> {
        // Before any staging memory is taken: one ring per GPU at a time.
        let turn = pool.map(|p| p.turn(render_minor));
        let render = RenderNode::open(driver.clone(), RenderMinor(render_minor))
            .map_err(transfer_error(gpu, "opening a private render node"))?;
        let config = CopyEngineConfig {
            spread: SDMA_RINGS,
            ..CopyEngineConfig::default()
        };
        let mut engine = CopyEngine::new(render, config)
            .map_err(transfer_error(gpu, "setting up the SDMA copy engine"))?;
        let len = usize::try_from(staging.buffer_size).map_err(|_| Error::Transfer {
            gpu_id: gpu,
            step: "allocating staging memory",
            reason: format!("{} bytes do not fit in memory", staging.buffer_size),
        })?;
        let mut slots = Vec::with_capacity(staging.buffers);
        for _ in 0..staging.buffers {
            let buffer = match pool.and_then(|p| p.take(len)) {
                Some(kept) => kept,
                None => StagingBuffer::new(len).map_err(transfer_error(
                    gpu,
                    "allocating staging memory (lower KFD_MAX_BUFFER_SIZE if memory is short)",
                ))?,
            };
            slots.push(
                engine
                    .add_staging(buffer)
                    .map_err(transfer_error(gpu, "registering staging memory"))?,
            );
        }
        Ok(Pipe {
            engine,
            ring: Ring {
                pending: vec![None; slots.len()],
                release: (0..slots.len()).map(|_| None).collect(),
                slots,
                next: 0,
            },
            chunk: staging.buffer_size,
            gpu,
            pool,
            _turn: turn,
        })
    }

    /// An error when the dump this pipe copies for was stopped.
    fn check_stopped(&self) -> Result<(), Error> {
        match self.pool {
            Some(pool) if pool.stopped() => Err(Error::Transfer {
                gpu_id: self.gpu,
                step: "copying BO contents",
                reason: "stopped: the dump failed elsewhere".into(),
            }),
            _ => Ok(()),
        }
    }

    fn wait(&mut self, fence: &Fence) -> Result<(), Error> {
        match self.engine.wait(fence, None) {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::Transfer {
                gpu_id: self.gpu,
                step: "waiting for an SDMA copy",
                reason: "the copy did not complete".into(),
            }),
            Err(e) => Err(transfer_error(self.gpu, "SDMA copy")(e)),
        }
    }

    fn import(
        &mut self,
        dmabuf: BorrowedFd<'_>,
        size: u64,
        what: &str,
    ) -> Result<ImportedBo, Error> {
        let imported = self
            .engine
            .import_dmabuf(dmabuf)
            .map_err(transfer_error(self.gpu, "importing a BO's dma-buf"))?;
        if imported.size() < size {
            let have = imported.size();
            let _ = self.engine.release_bo(imported);
            return Err(Error::DmabufTooSmall {
                bo: what.to_owned(),
                gpu_id: self.gpu,
                have,
                size,
            });
        }
        Ok(imported)
    }

    /// Releases the BO whose last chunk went through slot `i` (its copies
    /// are all complete once that slot was drained).
    fn release_slot_bo(&mut self, i: usize) -> Result<(), Error> {
        match self.ring.release[i].take() {
            Some(bo) => self
                .engine
                .release_bo(bo)
                .map_err(transfer_error(self.gpu, "releasing an imported BO")),
            None => Ok(()),
        }
    }

    /// Releases `imported` once `last_slot` (the slot of its last chunk) is
    /// drained; right away when it had no chunk.
    fn retire(&mut self, imported: ImportedBo, last_slot: Option<usize>) -> Result<(), Error> {
        match last_slot {
            Some(i) => {
                self.ring.release[i] = Some(imported);
                Ok(())
            }
            None => self
                .engine
                .release_bo(imported)
                .map_err(transfer_error(self.gpu, "releasing an imported BO")),
        }
    }

    /// Waits for the copy in flight on slot `i` and appends it to `writer`.
    fn drain_slot<W: PagesSink>(
        &mut self,
        i: usize,
        writer: &mut PagesWriter<W>,
    ) -> Result<(), Error> {
        if let Some((fence, len)) = self.ring.pending[i].take() {
            self.wait(&fence)?;
            let data = self
                .engine
                .staging(self.ring.slots[i])
                .map_err(transfer_error(self.gpu, "reading staging memory"))?;
            writer
                .write(&data[..len])
                .map_err(Error::image("writing a pages file"))?;
        }
        self.release_slot_bo(i)
    }

    /// Drains every slot in submission order into `writer`: call after the
    /// last [`read_bo`](Self::read_bo), before the writer is finished.
    fn finish_reads<W: PagesSink>(&mut self, writer: &mut PagesWriter<W>) -> Result<(), Error> {
        for k in 0..self.ring.slots.len() {
            let i = (self.ring.next + k) % self.ring.slots.len();
            self.drain_slot(i, writer)?;
        }
        Ok(())
    }

    /// Waits for the copy in flight on slot `i` (a write into a BO) and
    /// releases the BO it completes, if any.
    fn settle_write(&mut self, i: usize) -> Result<(), Error> {
        if let Some((fence, _)) = self.ring.pending[i].take() {
            self.wait(&fence)?;
        }
        self.release_slot_bo(i)
    }

    /// Streams `size` bytes of the BO behind `dmabuf` into `writer`, the SDMA
    /// copy of each chunk overlapping the write of the previous one (also
    /// across BOs: the last chunks are written by the next call or by
    /// [`finish_reads`](Self::finish_reads)).
    fn read_bo<W: PagesSink>(
        &mut self,
        dmabuf: BorrowedFd<'_>,
        size: u64,
        writer: &mut PagesWriter<W>,
        what: &str,
    ) -> Result<(), Error> {
        let imported = self.import(dmabuf, size, what)?;
        let mut offset = 0u64;
        let mut last_slot = None;
        while offset < size {
            self.check_stopped()?;
            let i = self.ring.next;
            self.drain_slot(i, writer)?;
            let len = (size - offset).min(self.chunk) as usize;
            let fence = self
                .engine
                .submit_read(&imported, offset, self.ring.slots[i], len)
                .map_err(transfer_error(self.gpu, "submitting an SDMA read"))?;
            self.ring.pending[i] = Some((fence, len));
            self.ring.next = (i + 1) % self.ring.slots.len();
            last_slot = Some(i);
            offset += len as u64;
        }
        self.retire(imported, last_slot)
    }

    /// Fills `size` bytes of the BO behind `dmabuf` (layout entry `entry`)
    /// from `reader`, reading the next chunk while the previous one copies
    /// (also across BOs: [`close`](Self::close) waits for the last copies).
    fn write_bo(
        &mut self,
        dmabuf: BorrowedFd<'_>,
        entry: usize,
        size: u64,
        reader: &mut dyn PieceSource,
        name: &ImageName,
    ) -> Result<(), Error> {
        let gpu = self.gpu;
        let imported = self.import(dmabuf, size, &format!("BO {entry}"))?;
        let mut offset = 0u64;
        let mut last_slot = None;
        while offset < size {
            let i = self.ring.next;
            self.settle_write(i)?;
            let want = (size - offset).min(self.chunk) as usize;
            let buf = self
                .engine
                .staging_mut(self.ring.slots[i])
                .map_err(transfer_error(gpu, "filling staging memory"))?;
            let chunk = reader
                .read_piece(&mut buf[..want])
                .map_err(Error::image("reading a pages file"))?
                .ok_or_else(|| Error::Transfer {
                    gpu_id: gpu,
                    step: "reading the pages file",
                    reason: format!("{name} ended inside BO {entry}"),
                })?;
            if chunk.entry != entry || chunk.offset != offset || chunk.len == 0 {
                return Err(Error::Transfer {
                    gpu_id: gpu,
                    step: "reading the pages file",
                    reason: format!(
                        "{name}: expected BO {entry} at {offset:#x}, got BO {} at {:#x}",
                        chunk.entry, chunk.offset
                    ),
                });
            }
            let fence = self
                .engine
                .submit_write(&imported, offset, self.ring.slots[i], chunk.len)
                .map_err(transfer_error(gpu, "submitting an SDMA write"))?;
            self.ring.pending[i] = Some((fence, chunk.len));
            self.ring.next = (i + 1) % self.ring.slots.len();
            last_slot = Some(i);
            offset += chunk.len as u64;
        }
        self.retire(imported, last_slot)
    }

    /// Waits for the copies still in flight (writes into BOs; reads must
    /// have been written out with [`finish_reads`](Self::finish_reads)),
    /// releases the BOs and closes the engine.
    fn close(mut self) -> Result<(), Error> {
        for k in 0..self.ring.slots.len() {
            let i = (self.ring.next + k) % self.ring.slots.len();
            self.settle_write(i)?;
        }
        let gpu = self.gpu;
        if let Some(pool) = self.pool {
            // Every copy was waited for: the slots are idle. A slot whose
            // teardown fails keeps its buffer from reuse (the copy engine
            // never frees it then) and fails the close, as the engine's own
            // teardown would.
            let mut first = Ok(());
            for slot in std::mem::take(&mut self.ring.slots) {
                match self.engine.remove_staging(slot) {
                    Ok(buffer) => pool.give(buffer),
                    Err(e) if first.is_ok() => {
                        first = Err(transfer_error(gpu, "releasing staging memory")(e));
                    }
                    Err(_) => {}
                }
            }
            if let Err(e) = first {
                let _ = self.engine.close();
                return Err(e);
            }
        }
        self.engine
            .close()
            .map_err(transfer_error(gpu, "closing the SDMA copy engine"))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_pool_hands_back_only_buffers_of_the_length_asked_for() {
        let page = kfd::staging::page_size();
        let pool = StagingPool::new();
        assert!(pool.take(4 * page).is_none(), "an empty pool has nothing");
        pool.give(StagingBuffer::new(4 * page).unwrap());
        pool.give(StagingBuffer::new(2 * page).unwrap());
        assert_eq!(pool.held_bytes(), 6 * page);
        assert!(pool.take(3 * page).is_none(), "no buffer of 3 pages");
        // A length inside the last page rounds up to it, as a new buffer would.
        let kept = pool.take(4 * page - 100).expect("the 4-page buffer");
        assert_eq!(kept.len(), 4 * page);
        assert_eq!(pool.held_bytes(), 2 * page);
        assert_eq!(pool.take(2 * page).map(|b| b.len()), Some(2 * page));
        assert_eq!(pool.held_bytes(), 0);
        assert!(pool.take(4 * page).is_none(), "taken buffers are gone");
    }

    #[test]
    fn a_gpu_serves_one_transfer_at_a_time_and_other_gpus_meanwhile() {
        use std::sync::mpsc;
        use std::time::Duration;
        let pool = Arc::new(StagingPool::new());
        let held = pool.turn(128);
        // Another GPU's turn is free while 128 is held (same thread: a
        // wrong implementation blocks here and the test times out).
        drop(pool.turn(129));
        let (tx, rx) = mpsc::channel();
        let other = {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                let _turn = pool.turn(128);
                tx.send(()).unwrap();
            })
        };
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a second transfer got GPU 128 while the first held it"
        );
        drop(held);
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the waiting transfer gets GPU 128 once it is given back");
        other.join().unwrap();
        assert!(!pool.stopped());
        pool.stop();
        assert!(pool.stopped());
    }
}
