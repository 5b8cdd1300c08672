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

use std::collections::HashMap;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kfd_sys::{
    AMDGPU_CTX_PRIORITY_NORMAL, AMDGPU_GEM_DOMAIN_GTT, AMDGPU_GEM_USERPTR_ANONONLY,
    AMDGPU_GEM_USERPTR_REGISTER, AMDGPU_GEM_USERPTR_VALIDATE, AMDGPU_HW_IP_DMA,
    AMDGPU_VM_PAGE_EXECUTABLE, AMDGPU_VM_PAGE_READABLE, AMDGPU_VM_PAGE_WRITEABLE,
};

use crate::error::{Error, Result};
use crate::mapping::DeviceMapping;
use crate::render::{dmabuf_size, GemCreate, GemHandle, IbChunk, RenderNode, SubmissionFence};
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

    /// Imports a BO's dma-buf (`PRIME_FD_TO_HANDLE`, size by `lseek`) and maps
    /// it into the engine's VM: readable, and writable if the fd was opened
    /// read-write. The dma-buf fd may be closed afterwards.
    ///
    /// Importing a dma-buf this DRM file already has a handle for (a BO
    /// created through the same file) would return that handle; the engine
    /// closes only handles it did not know before, but cannot tell a handle
    /// the *application* owns from a fresh import on a shared file: use
    /// [`CopyEngine::adopt_handle`] for BOs of the engine's own file.
    pub fn import_dmabuf(&mut self, dmabuf: BorrowedFd<'_>) -> Result<ImportedBo> {
        let size = dmabuf_size(dmabuf)?;
        if size == 0 {
            return Err(Error::protocol("import dma-buf", "dma-buf has size 0"));
        }
        let writable = fd_is_writable(dmabuf)?;
        let handle = self.render.prime_fd_to_handle(dmabuf)?;
        let flags = AMDGPU_VM_PAGE_READABLE
            | if writable {
                AMDGPU_VM_PAGE_WRITEABLE
            } else {
                0
            };
        self.map_bo(handle, size, flags, true)
    }

    /// Maps a BO that already has `handle` in the engine's DRM file (e.g. a
    /// render-node BO being restored). The handle is never closed by the
    /// engine.
    pub fn adopt_handle(&mut self, handle: GemHandle, size: u64) -> Result<ImportedBo> {
        if size == 0 {
            return Err(Error::invalid("adopt GEM handle", "BO size 0"));
        }
        self.map_bo(
            handle,
            size,
            AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE,
            false,
        )
    }

    fn map_bo(
        &mut self,
        handle: GemHandle,
        size: u64,
        flags: u32,
        owned: bool,
    ) -> Result<ImportedBo> {
        if let Some(entry) = self.bos.get_mut(&handle) {
            // The same BO again (PRIME returns the existing handle): share
            // the mapping.
            entry.refs += 1;
            return Ok(ImportedBo {
                engine: self.id,
                handle,
                size: entry.size,
                va: entry.va,
            });
        }
        let map_size = size.next_multiple_of(GPU_PAGE);
        let va = match self.va.alloc(map_size) {
            Ok(va) => va,
            Err(err) => {
                if owned {
                    // Keep the allocation error: it is the cause; a close
                    // failure of a handle we just got cannot be acted upon.
                    let _ = self.render.gem_close(handle);
                }
                return Err(err);
            }
        };
        if let Err(err) = self.render.gem_va_map(handle, va, 0, map_size, flags) {
            self.va.free(va)?;
            if owned {
                let _ = self.render.gem_close(handle);
            }
            return Err(err);
        }
        self.bos.insert(
            handle,
            BoEntry {
                size,
                map_size,
                va,
                refs: 1,
                owned,
            },
        );
        Ok(ImportedBo {
            engine: self.id,
            handle,
            size,
            va,
        })
    }

    /// Unmaps a BO (and closes its handle if the engine imported it) once
    /// its last [`ImportedBo`] is released. Refused (`EBUSY`) while a
    /// submission that touches it has not been waited for.
    pub fn release_bo(&mut self, bo: ImportedBo) -> Result<()> {
        const OP: &str = "release BO";
        self.check_engine(OP, bo.engine)?;
        let busy = self.slots.iter().position(|s| {
            s.as_ref()
                .is_some_and(|s| s.in_flight.is_some() && s.in_flight_bo == Some(bo.handle))
        });
        if let Some(slot) = busy {
            return Err(Error::Busy { op: OP, slot });
        }
        let Some(entry) = self.bos.get_mut(&bo.handle) else {
            return Err(Error::invalid(
                OP,
                format!("handle {} is not mapped", bo.handle.0),
            ));
        };
        entry.refs -= 1;
        if entry.refs > 0 {
            return Ok(());
        }
        let entry = self.bos.remove(&bo.handle).expect("entry checked above");
        self.unmap_bo(bo.handle, &entry)
    }

    fn unmap_bo(&mut self, handle: GemHandle, entry: &BoEntry) -> Result<()> {
        let unmap = self
            .render
            .gem_va_unmap(handle, entry.va, 0, entry.map_size);
        if unmap.is_ok() {
            self.va.free(entry.va)?;
        }
        let close = if entry.owned {
            self.render.gem_close(handle)
        } else {
            Ok(())
        };
        unmap.and(close)
    }

    /// Registers `buffer` as a staging slot: a userptr BO over it
    /// (`ANONONLY | REGISTER | VALIDATE`), mapped into the VM, plus a GTT IB
    /// big enough for one copy of the whole buffer, CPU-mapped and mapped
    /// into the VM. The engine owns the buffer until
    /// [`CopyEngine::remove_staging`] gives it back.
    pub fn add_staging(&mut self, buffer: StagingBuffer) -> Result<StagingSlot> {
        let len = buffer.len() as u64;
        // SAFETY: `buffer` is page-aligned anonymous memory that the engine
        // owns from here on: it is only freed after the userptr BO is closed
        // (remove_staging / teardown), and the CPU only touches it through
        // `staging`/`staging_mut`, which refuse while a copy may run.
        let handle = unsafe {
            self.render.gem_userptr(
                buffer.as_ptr() as u64,
                len,
                AMDGPU_GEM_USERPTR_ANONONLY
                    | AMDGPU_GEM_USERPTR_REGISTER
                    | AMDGPU_GEM_USERPTR_VALIDATE,
            )
        }?;
        let va = match self.map_new(handle, len, rwx()) {
            Ok(va) => va,
            Err(err) => {
                let _ = self.render.gem_close(handle);
                return Err(err);
            }
        };
        let ib = match self.create_ib(len) {
            Ok(ib) => ib,
            Err(err) => {
                let _ = self.render.gem_va_unmap(handle, va, 0, len);
                let _ = self.va.free(va);
                let _ = self.render.gem_close(handle);
                return Err(err);
            }
        };
        self.slots.push(Some(Slot {
            buffer,
            handle,
            va,
            ib,
            in_flight: None,
            in_flight_bo: None,
        }));
        Ok(StagingSlot {
            engine: self.id,
            index: self.slots.len() - 1,
        })
    }

    /// Allocates VA for a fresh handle and maps it; frees the VA on failure.
    fn map_new(&mut self, handle: GemHandle, size: u64, flags: u32) -> Result<u64> {
        let va = self.va.alloc(size)?;
        if let Err(err) = self.render.gem_va_map(handle, va, 0, size, flags) {
            self.va.free(va)?;
            return Err(err);
        }
        Ok(va)
    }

    fn create_ib(&mut self, staging_len: u64) -> Result<Ib<D>> {
        let bytes = (self.format.ib_dwords_for(staging_len) * 4).next_multiple_of(GPU_PAGE);
        let map_len = usize::try_from(bytes)
            .map_err(|_| Error::invalid("create IB", format!("{bytes} bytes")))?;
        let handle = self.render.gem_create(&GemCreate {
            size: bytes,
            alignment: GPU_PAGE,
            domains: u64::from(AMDGPU_GEM_DOMAIN_GTT),
            flags: 0,
        })?;
        let result = (|| {
            let offset = self.render.gem_mmap_offset(handle)?;
            let map = self
                .render
                .mmap(offset, map_len, libc::PROT_READ | libc::PROT_WRITE)?;
            let va = self.map_new(handle, bytes, rwx())?;
            Ok(Ib {
                handle,
                va,
                size: bytes,
                map,
            })
        })();
        if result.is_err() {
            let _ = self.render.gem_close(handle);
        }
        result
    }

    /// Unregisters a staging slot and gives its buffer back (`EBUSY` while a
    /// copy using it has not been waited for).
    pub fn remove_staging(&mut self, slot: StagingSlot) -> Result<StagingBuffer> {
        const OP: &str = "remove staging slot";
        self.slot(OP, slot)?;
        if self.slots[slot.index]
            .as_ref()
            .is_some_and(|s| s.in_flight.is_some())
        {
            return Err(Error::Busy {
                op: OP,
                slot: slot.index,
            });
        }
        let s = self.slots[slot.index].take().expect("slot checked above");
        let (buffer, result) = self.teardown_slot(s);
        if let Err(err) = result {
            // The userptr BO may still exist: never free its memory.
            std::mem::forget(buffer);
            return Err(err);
        }
        Ok(buffer)
    }

    /// Releases a slot's GPU resources; returns the buffer and the first
    /// error. On an error the buffer must not be freed while the userptr BO
    /// may live: the caller decides (teardown leaks it then).
    fn teardown_slot(&mut self, s: Slot<D>) -> (StagingBuffer, Result<()>) {
        let Slot {
            buffer,
            handle,
            va,
            ib,
            ..
        } = s;
        let mut first: Result<()> = Ok(());
        let mut keep = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        let Ib {
            handle: ib_handle,
            va: ib_va,
            size: ib_size,
            map,
        } = ib;
        keep(map.unmap());
        let r = self.render.gem_va_unmap(ib_handle, ib_va, 0, ib_size);
        if r.is_ok() {
            keep(self.va.free(ib_va));
        }
        keep(r);
        keep(self.render.gem_close(ib_handle));
        let len = buffer.len() as u64;
        let r = self.render.gem_va_unmap(handle, va, 0, len);
        if r.is_ok() {
            keep(self.va.free(va));
        }
        keep(r);
        keep(self.render.gem_close(handle));
        (buffer, first)
    }

    /// The length of a slot's staging buffer.
    pub fn staging_len(&self, slot: StagingSlot) -> Result<usize> {
        Ok(self.slot("staging length", slot)?.buffer.len())
    }

    /// A slot's bytes, for reading what a finished [`CopyEngine::submit_read`]
    /// copied (`EBUSY` while a copy may still run).
    pub fn staging(&self, slot: StagingSlot) -> Result<&[u8]> {
        const OP: &str = "read staging slot";
        let s = self.slot(OP, slot)?;
        if s.in_flight.is_some() {
            return Err(Error::Busy {
                op: OP,
                slot: slot.index,
            });
        }
        Ok(s.buffer.as_slice())
    }

    /// A slot's bytes, for filling before [`CopyEngine::submit_write`]
    /// (`EBUSY` while a copy may still run).
    pub fn staging_mut(&mut self, slot: StagingSlot) -> Result<&mut [u8]> {
        const OP: &str = "write staging slot";
        self.slot(OP, slot)?;
        let s = self.slots[slot.index].as_mut().expect("slot checked above");
        if s.in_flight.is_some() {
            return Err(Error::Busy {
                op: OP,
                slot: slot.index,
            });
        }
        Ok(s.buffer.as_mut_slice())
    }

    /// Whether a slot has no copy outstanding.
    pub fn is_idle(&self, slot: StagingSlot) -> Result<bool> {
        Ok(self.slot("staging slot state", slot)?.in_flight.is_none())
    }

    /// Submits a copy of `len` bytes from `bo` at `bo_offset` into the start
    /// of `slot`'s staging buffer. Returns at once; [`CopyEngine::wait`] for
    /// the fence before reading the slot.
    pub fn submit_read(
        &mut self,
        bo: &ImportedBo,
        bo_offset: u64,
        slot: StagingSlot,
        len: usize,
    ) -> Result<Fence> {
        self.submit("SDMA read", bo, bo_offset, slot, len, true)
    }

    /// Submits a copy of the first `len` bytes of `slot`'s staging buffer
    /// into `bo` at `bo_offset`. Returns at once; the slot stays busy until
    /// [`CopyEngine::wait`] sees the copy finish.
    pub fn submit_write(
        &mut self,
        bo: &ImportedBo,
        bo_offset: u64,
        slot: StagingSlot,
        len: usize,
    ) -> Result<Fence> {
        self.submit("SDMA write", bo, bo_offset, slot, len, false)
    }

    fn submit(
        &mut self,
        op: &'static str,
        bo: &ImportedBo,
        bo_offset: u64,
        slot: StagingSlot,
        len: usize,
        bo_to_host: bool,
    ) -> Result<Fence> {
        self.check_engine(op, bo.engine)?;
        let ctx = self
            .ctx
            .ok_or_else(|| Error::invalid(op, "the engine is closed"))?;
        let entry = self
            .bos
            .get(&bo.handle)
            .ok_or_else(|| Error::invalid(op, "the BO was released"))?;
        let bo_va = entry.va;
        let s = self.slot(op, slot)?;
        if s.in_flight.is_some() {
            return Err(Error::Busy {
                op,
                slot: slot.index,
            });
        }
        if len == 0 || len > s.buffer.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "length {len} is outside 1..={} (the staging slot)",
                    s.buffer.len()
                ),
            ));
        }
        let len64 = len as u64;
        if bo_offset.checked_add(len64).is_none_or(|end| end > bo.size) {
            return Err(Error::invalid(
                op,
                format!(
                    "{len} bytes at offset {bo_offset:#x} exceed the {:#x}-byte BO",
                    bo.size
                ),
            ));
        }
        let (src, dst) = if bo_to_host {
            (bo_va + bo_offset, s.va)
        } else {
            (s.va, bo_va + bo_offset)
        };
        let mut ib = Vec::with_capacity(self.format.ib_dwords_for(len64) as usize);
        self.format.build_copy(src, dst, len64, &mut ib)?;
        let ib_bytes: Vec<u8> = ib.iter().flat_map(|dw| dw.to_le_bytes()).collect();
        let (staging_handle, ib_handle, ib_va) = (s.handle, s.ib.handle, s.ib.va);
        let s = self.slots[slot.index].as_mut().expect("slot checked above");
        // The IB is ours alone: no submission reads it (the slot is idle).
        s.ib.map.write(0, &ib_bytes)?;
        let list = self
            .render
            .bo_list_create(&[bo.handle, staging_handle, ib_handle])?;
        // SAFETY: the IB only touches the BO's mapping and this slot's
        // staging mapping. The staging memory is owned by the slot, `&mut
        // self` proves no borrow from `staging`/`staging_mut` is alive, and
        // the slot is marked in flight right below, so the CPU cannot touch
        // it again until `wait` saw the fence signal (or teardown leaked it).
        let submitted = unsafe {
            self.render.cs_submit(
                ctx,
                Some(list),
                &[IbChunk {
                    va_start: ib_va,
                    ib_bytes: ib_bytes.len() as u32,
                    ip_type: AMDGPU_HW_IP_DMA,
                    ip_instance: 0,
                    ring: self.rings[slot.index % self.rings.len()],
                    flags: 0,
                }],
            )
        };
        let destroyed = self.render.bo_list_destroy(list);
        let fence = submitted?;
        if let Err(err) = destroyed {
            // The copy is queued but the caller gets an error instead of its
            // fence: finish it here so the slot is not left busy with a
            // fence nobody can wait for. The caller treats the chunk as not
            // copied, so the copy's own outcome adds nothing to the error.
            let _ = self.render.wait_cs(&fence, None);
            return Err(err);
        }
        let s = self.slots[slot.index].as_mut().expect("slot checked above");
        s.in_flight = Some(fence);
        s.in_flight_bo = Some(bo.handle);
        Ok(Fence {
            engine: self.id,
            slot: slot.index,
            fence,
        })
    }

    /// Waits for a copy (`None`: forever; `Some(ZERO)`: poll). Returns
    /// `true` once it finished, which frees its slot, `false` on timeout.
    ///
    /// A copy the device failed (VM fault, hang) returns the fence's error;
    /// the slot is free again but its bytes are undefined. Waiting for a
    /// fence that was already seen complete returns `true`.
    pub fn wait(&mut self, fence: &Fence, timeout: Option<Duration>) -> Result<bool> {
        const OP: &str = "wait for copy";
        self.check_engine(OP, fence.engine)?;
        let slot = fence.slot();
        self.slot(OP, slot)?;
        let s = self.slots[slot.index].as_mut().expect("slot checked above");
        if s.in_flight != Some(fence.fence) {
            return Ok(true);
        }
        match self.render.wait_cs(&fence.fence, timeout) {
            Ok(false) => Ok(false),
            Ok(true) => {
                s.in_flight = None;
                s.in_flight_bo = None;
                Ok(true)
            }
            Err(err) => {
                // EINVAL/ENOENT mean the kernel did not look at the fence
                // (bad context or ring): it may still run. Any other error
                // is the completed job's own error.
                if !matches!(err.errno(), libc::EINVAL | libc::ENOENT) {
                    s.in_flight = None;
                    s.in_flight_bo = None;
                }
                Err(err)
            }
        }
    }

    /// Blocking convenience: copies `out.len()` bytes of `bo` from
    /// `bo_offset` into `out`, chunk by chunk through `slot`.
    pub fn copy_bo_to_host(
        &mut self,
        bo: &ImportedBo,
        bo_offset: u64,
        out: &mut [u8],
        slot: StagingSlot,
    ) -> Result<()> {
        let chunk = self.staging_len(slot)?;
        let mut done = 0usize;
        while done < out.len() {
            let len = (out.len() - done).min(chunk);
            let fence = self.submit_read(bo, bo_offset + done as u64, slot, len)?;
            self.wait(&fence, None)?;
            out[done..done + len].copy_from_slice(&self.staging(slot)?[..len]);
            done += len;
        }
        Ok(())
    }

    /// Blocking convenience: copies `data` into `bo` at `bo_offset`, chunk
    /// by chunk through `slot`.
    pub fn copy_host_to_bo(
        &mut self,
        bo: &ImportedBo,
        bo_offset: u64,
        data: &[u8],
        slot: StagingSlot,
    ) -> Result<()> {
        let chunk = self.staging_len(slot)?;
        let mut done = 0usize;
        while done < data.len() {
            let len = (data.len() - done).min(chunk);
            self.staging_mut(slot)?[..len].copy_from_slice(&data[done..done + len]);
            let fence = self.submit_write(bo, bo_offset + done as u64, slot, len)?;
            self.wait(&fence, None)?;
            done += len;
        }
        Ok(())
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

fn rwx() -> u32 {
    AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE | AMDGPU_VM_PAGE_EXECUTABLE
}

/// Whether `fd` was opened for writing (`fcntl(F_GETFL)`): checkpoint
/// dma-bufs of non-WRITABLE BOs are read-only.
fn fd_is_writable(fd: BorrowedFd<'_>) -> Result<bool> {
    // SAFETY: F_GETFL takes no pointer argument.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(Error::from_io(
            "fcntl F_GETFL",
            &std::io::Error::last_os_error(),
        ));
    }
    Ok(flags & libc::O_ACCMODE != libc::O_RDONLY)
}
