//! An SDMA copy engine: moves bytes between a BO (through its dma-buf) and
//! page-aligned host memory, asynchronously, so callers overlap copies with
//! file I/O.
//!
//! One [`CopyEngine`] drives the SDMA ring of one GPU (or several rings,
//! [`CopyEngineConfig::spread`]) through one render-node file, and owns
//! everything it creates in that file: one submission context, the
//! imported BOs' GEM handles and VA mappings, the staging buffers (host
//! memory registered as userptr BOs and mapped once) and one IB per staging
//! slot (a GTT BO, CPU-mapped once). Each submission uses a
//! short-lived BO list of {BO, staging, IB}, destroyed right after `CS`
//! (the kernel holds its own references until the job finishes).
//!
//! A double-buffered pipeline keeps two staging slots in flight:
//!
//! ```no_run
//! # use kfd::{copy::*, HostDriver, RenderNode, RenderMinor};
//! # fn demo(dmabuf: std::os::fd::BorrowedFd<'_>, mut out: impl std::io::Write) -> Result<(), Box<dyn std::error::Error>> {
//! let render = RenderNode::open(HostDriver, RenderMinor(128))?;
//! let mut engine = CopyEngine::new(render, CopyEngineConfig::default())?;
//! let bo = engine.import_dmabuf(dmabuf)?;
//! let slots = [
//!     engine.add_staging(StagingBuffer::new(8 << 20)?)?,
//!     engine.add_staging(StagingBuffer::new(8 << 20)?)?,
//! ];
//! let chunk = engine.staging_len(slots[0])? as u64;
//! let mut pending: Option<(Fence, usize)> = None;
//! let mut offset = 0;
//! let mut turn = 0;
//! while offset < bo.size() {
//!     let len = (bo.size() - offset).min(chunk) as usize;
//!     let fence = engine.submit_read(&bo, offset, slots[turn], len)?;
//!     // While this chunk copies, write out the previous one.
//!     if let Some((prev, prev_len)) = pending.take() {
//!         engine.wait(&prev, None)?;
//!         out.write_all(&engine.staging(prev.slot())?[..prev_len])?;
//!     }
//!     pending = Some((fence, len));
//!     offset += len as u64;
//!     turn ^= 1;
//! }
//! if let Some((prev, prev_len)) = pending {
//!     engine.wait(&prev, None)?;
//!     out.write_all(&engine.staging(prev.slot())?[..prev_len])?;
//! }
//! engine.release_bo(bo)?;
//! engine.close()?;
//! # Ok(()) }
//! ```
//!
//! **VA placement.** Mappings come from the VM range `DEV_INFO` reports
//! (`virtual_address_offset..virtual_address_max`), allocated from the top
//! down, optionally narrowed by [`CopyEngineConfig::va_window`] and with
//! [`CopyEngineConfig::reserved`] ranges excluded. When the render fd is also
//! the process's KFD compute VM (CRIU's restore path), pass the KFD BOs'
//! `[addr, addr + size)` ranges as reserved: a `GEM_VA` overlap would fail
//! with `EINVAL` (the error is reported, never ignored).
//!
//! This module never reads or writes BO contents on the CPU and never waits
//! without being asked, except when dropped with copies in flight.

mod bo;
mod slots;
mod submit;

use std::collections::HashMap;
use std::ops::Range;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use kfd_sys::{AMDGPU_CTX_PRIORITY_NORMAL, AMDGPU_HW_IP_DMA};

use crate::error::{Error, Result};
use crate::mapping::DeviceMapping;
use crate::render::{GemHandle, RenderNode, SubmissionFence};
pub use crate::sdma::CopyFormat;
pub use crate::staging::StagingBuffer;
use crate::va::VaAllocator;
use crate::{CtxId, Driver};

/// GPU page size: VA mappings and their sizes are multiples of it.
const GPU_PAGE: u64 = 4096;

static NEXT_ENGINE_ID: AtomicU64 = AtomicU64::new(1);

/// How a [`CopyEngine`] is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyEngineConfig {
    /// Narrow VA allocation to this window (intersected with the VM range
    /// the device reports). `None`: the whole VM range.
    pub va_window: Option<Range<u64>>,
    /// Ranges the engine must never map at (e.g. the KFD BOs of a process
    /// whose compute VM this render fd is).
    pub reserved: Vec<Range<u64>>,
    /// SDMA ring to submit to (must be in the ring mask `HW_IP_INFO` reports).
    pub ring: u32,
    /// How many SDMA rings the staging slots are spread over: `ring` and
    /// the next rings up that `HW_IP_INFO` reports ready, as many as there
    /// are, up to this count (0 counts as 1). Slot `i` submits to the
    /// `i % n`-th of them, so copies through consecutive slots run on
    /// different SDMA engines at once (each ring is one engine). 1: every
    /// copy on `ring`.
    pub spread: u32,
    /// Context priority (`AMDGPU_CTX_PRIORITY_*`).
    pub priority: i32,
}

impl Default for CopyEngineConfig {
    fn default() -> Self {
        CopyEngineConfig {
            va_window: None,
            reserved: Vec::new(),
            ring: 0,
            spread: 1,
            priority: AMDGPU_CTX_PRIORITY_NORMAL,
        }
    }
}

/// A BO the engine has mapped: an imported dma-buf or an adopted handle.
/// Release it with [`CopyEngine::release_bo`]; if dropped instead, the engine
/// releases it when it closes.
#[derive(Debug)]
pub struct ImportedBo {
    engine: u64,
    handle: GemHandle,
    size: u64,
    va: u64,
}

impl ImportedBo {
    /// The BO's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Its GEM handle in the engine's DRM file.
    pub fn handle(&self) -> GemHandle {
        self.handle
    }

    /// The GPU address it is mapped at in the engine's VM.
    pub fn gpu_address(&self) -> u64 {
        self.va
    }
}

/// A staging buffer registered with an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StagingSlot {
    engine: u64,
    index: usize,
}

impl StagingSlot {
    /// The slot's index in its engine (0, 1, ... in registration order).
    pub fn index(self) -> usize {
        self.index
    }
}

/// A submitted copy. Wait for it with [`CopyEngine::wait`]; until then its
/// staging slot cannot be read, written or reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    engine: u64,
    slot: usize,
    fence: SubmissionFence,
}

impl Fence {
    /// The staging slot this copy uses.
    pub fn slot(&self) -> StagingSlot {
        StagingSlot {
            engine: self.engine,
            index: self.slot,
        }
    }

    /// The kernel's submission identity.
    pub fn submission(&self) -> SubmissionFence {
        self.fence
    }
}

#[derive(Debug)]
struct BoEntry {
    size: u64,
    map_size: u64,
    va: u64,
    refs: usize,
    /// Close the handle on release (false for adopted handles).
    owned: bool,
}

#[derive(Debug)]
struct Ib<D: Driver> {
    handle: GemHandle,
    va: u64,
    size: u64,
    map: DeviceMapping<D>,
}

#[derive(Debug)]
struct Slot<D: Driver> {
    buffer: StagingBuffer,
    handle: GemHandle,
    va: u64,
    ib: Ib<D>,
    /// The submission using this slot, until a wait sees it complete.
    in_flight: Option<SubmissionFence>,
    /// The BO the in-flight submission touches.
    in_flight_bo: Option<GemHandle>,
}

/// The SDMA copy engine of one GPU on one render-node file.
#[derive(Debug)]
pub struct CopyEngine<D: Driver + Clone, F: AsFd = OwnedFd> {
    render: RenderNode<D, F>,
    id: u64,
    format: CopyFormat,
    /// The rings slots submit to: slot `i` to `rings[i % rings.len()]`.
    rings: Vec<u32>,
    ctx: Option<CtxId>,
    va: VaAllocator,
    bos: HashMap<GemHandle, BoEntry>,
    slots: Vec<Option<Slot<D>>>,
    /// Set once teardown ran (by `close` or `drop`).
    closed: bool,
}

impl<D: Driver + Clone, F: AsFd> CopyEngine<D, F> {
    /// Sets up an engine on `render`: queries `DEV_INFO` (family → packet
    /// format, VM range) and `HW_IP_INFO` for the DMA engine (the ring must
    /// exist), and allocates a submission context.
    pub fn new(render: RenderNode<D, F>, config: CopyEngineConfig) -> Result<Self> {
        let info = render.device_info()?;
        let format = CopyFormat::for_family(info.family)?;
        let ip = render.hw_ip_info(AMDGPU_HW_IP_DMA, 0)?;
        if config.ring >= 32 || ip.available_rings & (1 << config.ring) == 0 {
            return Err(Error::Unsupported {
                op: "copy engine setup",
                reason: format!(
                    "SDMA ring {} is not available (ready rings mask {:#x})",
                    config.ring, ip.available_rings
                ),
            });
        }
        let rings: Vec<u32> = (config.ring..32)
            .filter(|r| ip.available_rings & (1 << r) != 0)
            .take(config.spread.max(1) as usize)
            .collect();
        let mut window = info.virtual_address_offset..info.virtual_address_max;
        if let Some(w) = &config.va_window {
            window = window.start.max(w.start)..window.end.min(w.end);
        }
        let alignment = u64::from(info.virtual_address_alignment)
            .max(GPU_PAGE)
            .next_power_of_two();
        let mut va = VaAllocator::new(window, alignment)?;
        for range in &config.reserved {
            va.reserve(range.clone());
        }
        let ctx = render.ctx_alloc(config.priority)?;
        Ok(CopyEngine {
            render,
            id: NEXT_ENGINE_ID.fetch_add(1, Ordering::Relaxed),
            format,
            rings,
            ctx: Some(ctx),
            va,
            bos: HashMap::new(),
            slots: Vec::new(),
            closed: false,
        })
    }

    /// The render node the engine submits through. Work submitted through
    /// it ([`RenderNode::cs_submit`] is `unsafe`) must leave the engine's
    /// staging mappings alone.
    pub fn render(&self) -> &RenderNode<D, F> {
        &self.render
    }

    /// The packet format of this GPU's family.
    pub fn format(&self) -> CopyFormat {
        self.format
    }

    /// The SDMA rings the staging slots submit to, slot `i` to the
    /// `i % len`-th ([`CopyEngineConfig::spread`]).
    pub fn rings(&self) -> &[u32] {
        &self.rings
    }

    /// Waits for every outstanding copy, then releases everything the engine
    /// created (VA mappings, GEM handles, IB mappings, the context).
    /// Reports the first error; later steps still run. Dropping the engine
    /// does the same but cannot report errors.
    pub fn close(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let mut first: Result<()> = Ok(());
        fn keep(r: Result<()>, first: &mut Result<()>) {
            if first.is_ok() {
                *first = r;
            }
        }
        for index in 0..self.slots.len() {
            let Some(mut s) = self.slots[index].take() else {
                continue;
            };
            let mut idle = true;
            if let Some(fence) = s.in_flight.take() {
                match self.render.wait_cs(&fence, None) {
                    Ok(true) => {}
                    Ok(false) => idle = false,
                    Err(err) => {
                        idle = !matches!(err.errno(), libc::EINVAL | libc::ENOENT);
                        keep(Err(err), &mut first);
                    }
                }
            }
            let (buffer, r) = self.teardown_slot(s);
            let released = r.is_ok();
            keep(r, &mut first);
            if !idle || !released {
                // The device may still write into this memory, or the
                // userptr BO may still exist: never hand it back to the
                // allocator.
                std::mem::forget(buffer);
            }
        }
        let bos: Vec<(GemHandle, BoEntry)> = self.bos.drain().collect();
        for (handle, entry) in bos {
            let r = self.unmap_bo(handle, &entry);
            keep(r, &mut first);
        }
        if let Some(ctx) = self.ctx.take() {
            keep(self.render.ctx_free(ctx), &mut first);
        }
        first
    }

    fn check_engine(&self, op: &'static str, engine: u64) -> Result<()> {
        if engine != self.id {
            return Err(Error::invalid(
                op,
                "the handle belongs to another copy engine",
            ));
        }
        Ok(())
    }

    fn slot(&self, op: &'static str, slot: StagingSlot) -> Result<&Slot<D>> {
        self.check_engine(op, slot.engine)?;
        self.slots
            .get(slot.index)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::invalid(op, format!("staging slot {} was removed", slot.index)))
    }
}

impl<D: Driver + Clone, F: AsFd> Drop for CopyEngine<D, F> {
    fn drop(&mut self) {
        // Errors cannot leave drop; `close` reports them.
        let _ = self.teardown();
    }
}
