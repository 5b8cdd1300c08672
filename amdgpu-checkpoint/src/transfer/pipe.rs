//! One GPU's copy engine on a private render file with its staging ring.

use std::os::fd::BorrowedFd;

use amdgpu_image::{ImageName, PagesSink, PagesWriter, PieceSource};
use kfd::{
    CopyEngine, CopyEngineConfig, Driver, Fence, ImportedBo, RenderMinor, RenderNode,
    StagingBuffer, StagingSlot,
};

use crate::error::Error;
use crate::options::Staging;

use super::SDMA_RINGS;
use super::{GpuTurn, StagingPool};

/// Staging slots of one engine with the copy in flight on each, used
/// round-robin so chunks complete in submission order. The pipeline runs
/// across BO boundaries: a BO is released once the slot carrying its last
/// chunk has been drained (`release`), not by emptying the ring at the end
/// of every BO.
pub(super) struct Ring {
    slots: Vec<StagingSlot>,
    pending: Vec<Option<(Fence, usize)>>,
    release: Vec<Option<ImportedBo>>,
    next: usize,
}

pub(super) fn transfer_error(gpu: u32, step: &'static str) -> impl FnOnce(kfd::Error) -> Error {
    move |e| Error::Transfer {
        gpu_id: gpu,
        step,
        reason: e.to_string(),
    }
}

/// One GPU's copy engine on a private render file with its staging ring.
/// The private file's VM holds nothing but the engine's mappings, so no VA
/// can collide with the process's BOs.
pub(super) struct Pipe<'p, D: Driver + Clone> {
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
    pub(super) fn open(
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
    pub(super) fn check_stopped(&self) -> Result<(), Error> {
        match self.pool {
            Some(pool) if pool.stopped() => Err(Error::Transfer {
                gpu_id: self.gpu,
                step: "copying BO contents",
                reason: "stopped: the dump failed elsewhere".into(),
            }),
            _ => Ok(()),
        }
    }

    pub(super) fn wait(&mut self, fence: &Fence) -> Result<(), Error> {
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

    pub(super) fn import(
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
    pub(super) fn release_slot_bo(&mut self, i: usize) -> Result<(), Error> {
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
    pub(super) fn retire(
        &mut self,
        imported: ImportedBo,
        last_slot: Option<usize>,
    ) -> Result<(), Error> {
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
    pub(super) fn drain_slot<W: PagesSink>(
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
    pub(super) fn finish_reads<W: PagesSink>(
        &mut self,
        writer: &mut PagesWriter<W>,
    ) -> Result<(), Error> {
        for k in 0..self.ring.slots.len() {
            let i = (self.ring.next + k) % self.ring.slots.len();
            self.drain_slot(i, writer)?;
        }
        Ok(())
    }

    /// Waits for the copy in flight on slot `i` (a write into a BO) and
    /// releases the BO it completes, if any.
    pub(super) fn settle_write(&mut self, i: usize) -> Result<(), Error> {
        if let Some((fence, _)) = self.ring.pending[i].take() {
            self.wait(&fence)?;
        }
        self.release_slot_bo(i)
    }

    /// Streams `size` bytes of the BO behind `dmabuf` into `writer`, the SDMA
    /// copy of each chunk overlapping the write of the previous one (also
    /// across BOs: the last chunks are written by the next call or by
    /// [`finish_reads`](Self::finish_reads)).
    pub(super) fn read_bo<W: PagesSink>(
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
    pub(super) fn write_bo(
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
    pub(super) fn close(mut self) -> Result<(), Error> {
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
