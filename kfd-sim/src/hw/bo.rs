//! The buffer-object store shared by the KFD and DRM halves of the simulator.
//!
//! In the real kernel a KFD VRAM/GTT allocation *is* an amdgpu GEM object, so
//! both halves keep their BOs here: a [`Bo`] has a GPU, a size, a memory
//! domain, its KFD allocation flags, a DRM fake mmap offset and its backing.
//! VRAM and GTT BOs are backed by a memfd of the BO size (real, sparse memory);
//! a dma-buf of such a BO is a re-open of that memfd through `/proc/self/fd`,
//! so `lseek(fd, 0, SEEK_END)` reports the BO size as on a real dma-buf and
//! `mmap` of the dma-buf shows the BO's bytes. USERPTR BOs point at host
//! memory of the simulated application; DOORBELL and MMIO_REMAP BOs point at
//! small per-process / per-GPU aperture pages.
//!
//! A BO lives while a handle (KFD IDR slot or GEM handle) refers to it, or
//! while a dma-buf fd of it may still be open; [`BoStore::collect`] frees
//! exported BOs whose last dma-buf fd is gone. This module never interprets
//! ioctl arguments and never decides errno policy beyond allocation failures.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::kernel::FileKey;
use ::kfd::Errno;

/// Page size the simulator uses for every aperture and offset (4 KiB, as on x86-64).
pub(crate) const PAGE_SIZE: u64 = 4096;

/// Bytes of fake-offset space a BO of `size` bytes takes (whole pages).
fn offset_span(size: u64) -> u64 {
    size.div_ceil(PAGE_SIZE).max(1) * PAGE_SIZE
}

use crate::hw::offset_space::OffsetSpace;
#[cfg(test)]
use crate::hw::offset_space::DRM_FILE_PAGE_OFFSET_START;

/// Identity of a BO in the store; never reused within one simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct BoId(pub(crate) u64);

/// Where a BO's memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Domain {
    /// Device memory (simulated by a memfd).
    Vram,
    /// System memory mapped through the GART (simulated by a memfd).
    Gtt,
    /// Existing host memory of the application.
    UserPtr,
    /// The process's doorbell slice on a GPU.
    Doorbell,
    /// The GPU's HDP-flush MMIO page.
    Mmio,
}

/// A memfd owned by the simulator: the real memory behind VRAM/GTT BOs and
/// aperture pages.
#[derive(Debug)]
pub(crate) struct Memfd {
    file: File,
    key: FileKey,
    size: u64,
    /// The simulator's own read-only mapping of the whole memfd, made on the
    /// first [`resident`](Self::resident) call (`None`: mmap failed, reads
    /// go through `pread`).
    view: OnceLock<Option<ReadView>>,
}

/// A read-only shared mapping of a whole memfd, unmapped on drop.
#[derive(Debug)]
struct ReadView {
    addr: usize,
    len: usize,
}

impl Drop for ReadView {
    fn drop(&mut self) {
        // SAFETY: `addr..addr+len` is a mapping this view made and owns;
        // nothing borrows it (readers copy out with raw pointers while they
        // hold the `Memfd`, which owns the view).
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
        LIVE_VIEWS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Pages [`Memfd::resident`] asks `mincore` about per call.
const MINCORE_BATCH: usize = 256;

/// Smallest memfd that gets a read view: smaller ones (aperture pages,
/// small BOs) gain little over `pread`.
const VIEW_MIN_SIZE: u64 = 2 << 20;

/// Most read views alive at once in this process: each is a mapping, and
/// the simulated application shares the process's `vm.max_map_count`
/// (65530 by default) when it runs in it. Past the cap, reads use `pread`.
const MAX_LIVE_VIEWS: usize = 4096;

static LIVE_VIEWS: AtomicUsize = AtomicUsize::new(0);

impl Memfd {
    /// A new memfd of `size` bytes (sparse; unwritten pages cost nothing).
    /// Its size is sealed: the simulator maps it, and a dma-buf (a re-open
    /// of it) cannot be resized, so neither can anyone holding one.
    pub(crate) fn new(name: &str, size: u64) -> Result<Memfd, Errno> {
        let fd = memfd_create_with(name, libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)?;
        let file = File::from(fd);
        file.set_len(size).map_err(|_| Errno(libc::ENOMEM))?;
        // SAFETY: F_ADD_SEALS takes an int argument and no memory.
        let sealed = unsafe {
            libc::fcntl(
                file.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            )
        };
        if sealed < 0 {
            return Err(Errno::last());
        }
        let key = FileKey::of_raw(file.as_raw_fd())?;
        Ok(Memfd {
            file,
            key,
            size,
            view: OnceLock::new(),
        })
    }

    /// A memfd another process made, taken as the simulator's memory: a
    /// restored process's copy of a BO's memory (see
    /// [`crate::remote`]). Its size is sealed as [`Memfd::new`] seals it;
    /// a file that refuses the seals is read without a view.
    pub(crate) fn adopt(file: File) -> Result<Memfd, Errno> {
        let size = file.metadata().map_err(|_| Errno(libc::EIO))?.len();
        let key = FileKey::of_raw(file.as_raw_fd())?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        // SAFETY: F_ADD_SEALS and F_GET_SEALS take an int argument and no
        // memory.
        let sealed = unsafe {
            libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) == 0
                || libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) & seals == seals
        };
        let view = OnceLock::new();
        if !sealed {
            // Its size may change under a view of it.
            let _ = view.set(None);
        }
        Ok(Memfd {
            file,
            key,
            size,
            view,
        })
    }

    /// Copies this memfd's contents into `to` (a file of the same size),
    /// holes as holes: data ranges with `copy_file_range`, the rest
    /// punched out of `to`, so a sparse BO stays sparse.
    pub(crate) fn copy_into(&self, to: &File) -> Result<(), Errno> {
        use rustix::fs::{FallocateFlags, SeekFrom};
        let io = |e: rustix::io::Errno| Errno(e.raw_os_error());
        let mut at = 0u64;
        while at < self.size {
            let data = match rustix::fs::seek(&self.file, SeekFrom::Data(at)) {
                Ok(d) => d.min(self.size),
                Err(rustix::io::Errno::NXIO) => self.size,
                Err(e) => return Err(io(e)),
            };
            if data > at {
                rustix::fs::fallocate(
                    to,
                    FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                    at,
                    data - at,
                )
                .map_err(io)?;
            }
            if data >= self.size {
                break;
            }
            let hole = match rustix::fs::seek(&self.file, SeekFrom::Hole(data)) {
                Ok(h) => h.min(self.size),
                Err(e) => return Err(io(e)),
            };
            let (mut src, mut dst) = (data, data);
            while src < hole {
                let len = usize::try_from(hole - src).unwrap_or(usize::MAX);
                let n = rustix::fs::copy_file_range(
                    &self.file,
                    Some(&mut src),
                    to,
                    Some(&mut dst),
                    len,
                )
                .map_err(io)?;
                if n == 0 {
                    return Err(Errno(libc::EIO));
                }
            }
            at = hole;
        }
        Ok(())
    }

    /// The host address of bytes `offset..offset+len` in the simulator's
    /// read-only mapping of this memfd, when every page of the range holds
    /// data (`mincore`): copying from there reads the same bytes as `pread`
    /// with one user-space copy, no per-page lookup in the kernel. `None`
    /// when the range is outside the memfd, a page of it is a hole or
    /// swapped out (a read fault through the mapping would allocate the
    /// hole's page, where `pread` returns zeros without allocating), or the
    /// mapping could not be made; the caller then uses `pread`.
    ///
    /// The address stays valid for reads while `self` lives: the size is
    /// sealed, so the mapping never extends past the end of the file.
    pub(crate) fn resident(&self, offset: u64, len: usize) -> Option<*const u8> {
        self.check_range(offset, len).ok()?;
        let view = self.view.get_or_init(|| self.map_view()).as_ref()?;
        let page = PAGE_SIZE as usize;
        let first = (offset as usize) & !(page - 1);
        let end = (offset as usize + len).div_ceil(page) * page;
        let mut vec = [0u8; MINCORE_BATCH];
        let mut at = first;
        while at < end {
            let pages = ((end - at) / page).min(MINCORE_BATCH);
            // SAFETY: `at..at+pages*page` lies inside the view (the range is
            // inside the file, rounded out to pages of the page-aligned
            // mapping), and `vec` has room for `pages` entries.
            let rc = unsafe {
                libc::mincore(
                    (view.addr + at) as *mut libc::c_void,
                    pages * page,
                    vec.as_mut_ptr(),
                )
            };
            if rc != 0 || vec[..pages].iter().any(|v| v & 1 == 0) {
                return None;
            }
            at += pages * page;
        }
        Some((view.addr + offset as usize) as *const u8)
    }

    fn map_view(&self) -> Option<ReadView> {
        if self.size < VIEW_MIN_SIZE {
            return None;
        }
        let len = usize::try_from(self.size).ok()?;
        let taken = LIVE_VIEWS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < MAX_LIVE_VIEWS).then_some(n + 1)
        });
        if taken.is_err() {
            return None;
        }
        // SAFETY: a new shared read-only mapping of our own file, at an
        // address the kernel picks; no existing memory is affected.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            LIVE_VIEWS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ReadView {
            addr: addr as usize,
            len,
        })
    }

    /// The open file (for `pread`/`pwrite` and `mmap`).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// The inode identity every re-open (dma-buf) of this memfd shares.
    pub(crate) fn key(&self) -> FileKey {
        self.key
    }

    /// Size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Reads `buf.len()` bytes at `offset`; the range must lie inside the memfd.
    pub(crate) fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Errno> {
        self.check_range(offset, buf.len())?;
        self.file
            .read_exact_at(buf, offset)
            .map_err(|_| Errno(libc::EIO))
    }

    /// Writes `data` at `offset`; the range must lie inside the memfd.
    pub(crate) fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), Errno> {
        self.check_range(offset, data.len())?;
        self.file
            .write_all_at(data, offset)
            .map_err(|_| Errno(libc::EIO))
    }

    fn check_range(&self, offset: u64, len: usize) -> Result<(), Errno> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(Errno(libc::EINVAL)),
        }
    }
}

/// `memfd_create(2)`, optionally with `MFD_CLOEXEC`.
pub(crate) fn memfd_create(name: &str, cloexec: bool) -> Result<OwnedFd, Errno> {
    memfd_create_with(name, if cloexec { libc::MFD_CLOEXEC } else { 0 })
}

/// `memfd_create(2)` with `flags`.
fn memfd_create_with(name: &str, flags: libc::c_uint) -> Result<OwnedFd, Errno> {
    let name = CString::new(name).map_err(|_| Errno(libc::EINVAL))?;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the
    // call; memfd_create has no other memory arguments.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: memfd_create succeeded, so `fd` is a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What backs a BO.
#[derive(Debug, Clone)]
pub(crate) enum Backing {
    /// VRAM/GTT: a memfd of the BO size.
    Memory(Arc<Memfd>),
    /// USERPTR: `size` bytes of host memory at `addr`. `valid` is false
    /// between a CRIU RESTORE (pages not looked up) and RESUME.
    UserPtr {
        /// Host address of the first byte.
        addr: u64,
        /// Whether the pages are currently pinned.
        valid: bool,
        /// Whose memory `addr` is: the process that created the BO, as
        /// the kernel pins pages of `current->mm`.
        space: crate::kernel::Space,
    },
    /// DOORBELL / MMIO_REMAP: an aperture page shared with the process or GPU.
    Aperture(Arc<Memfd>),
}

/// One buffer object.
#[derive(Debug)]
pub(crate) struct Bo {
    /// Store identity.
    pub(crate) id: BoId,
    /// Index of the GPU the BO was created on.
    pub(crate) gpu: usize,
    /// Real size in bytes.
    pub(crate) size: u64,
    /// Memory domain.
    pub(crate) domain: Domain,
    /// KFD allocation flags (`KFD_IOC_ALLOC_MEM_FLAGS_*`); GEM BOs carry the
    /// KFD equivalent of their domain and access.
    pub(crate) alloc_flags: u32,
    /// The memory.
    pub(crate) backing: Backing,
    /// DRM fake mmap offset on the GPU's render node (bytes, page aligned).
    pub(crate) mmap_offset: u64,
    /// Handles (KFD IDR slots and GEM handles) referring to this BO.
    pub(crate) handles: u32,
    /// A dma-buf fd of this BO was handed out and may still be open.
    pub(crate) exported: bool,
    /// Render files allowed to mmap the BO (`drm_vma_node_allow`).
    pub(crate) allowed_files: BTreeSet<FileKey>,
    /// A KFD allocation: it counts against the KFD memory limits until it
    /// is destroyed (`crate::amdkfd::mem_limit`).
    pub(crate) kfd_limit: bool,
    /// Tiling flags and user-mode metadata (`crate::drm::metadata`).
    pub(crate) metadata: BoMetadata,
}

/// What GEM_METADATA attaches to a BO (`amdgpu_bo_user`'s `tiling_flags`,
/// `metadata`, `metadata_size` and `metadata_flags`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BoMetadata {
    pub(crate) tiling_flags: u64,
    pub(crate) flags: u64,
    pub(crate) data: Vec<u8>,
}

impl Bo {
    /// The memfd behind a VRAM/GTT BO.
    pub(crate) fn memory(&self) -> Option<&Arc<Memfd>> {
        match &self.backing {
            Backing::Memory(m) => Some(m),
            _ => None,
        }
    }

    /// Number of host pages a USERPTR BO pins while valid.
    pub(crate) fn pinned_pages(&self) -> u64 {
        match self.backing {
            Backing::UserPtr { valid: true, .. } => self.size.div_ceil(PAGE_SIZE),
            _ => 0,
        }
    }
}

/// All BOs of one simulator.
#[derive(Debug)]
pub(crate) struct BoStore {
    bos: HashMap<BoId, Bo>,
    by_inode: HashMap<FileKey, BoId>,
    /// (gpu, fake offset) → BO, for mmap lookups.
    by_offset: BTreeMap<(usize, u64), BoId>,
    next_id: u64,
    /// Each device's fake-offset window (`drm_vma_offset_manager`).
    offsets: Vec<OffsetSpace>,
    /// The offset a BO of another device has on a device that imported its
    /// dma-buf (a real import is a GEM object of that device with an offset
    /// of its own), by (importing gpu, BO).
    imports: HashMap<(usize, BoId), u64>,
    /// What the live KFD allocations reserve (`crate::amdkfd::mem_limit`).
    kfd_usage: KfdUsage,
}

/// Bytes the live KFD allocations ([`Bo::kfd_limit`]) reserve against the
/// KFD memory limits, kept as the kernel keeps its counters.
#[derive(Debug, Clone, Default)]
pub(crate) struct KfdUsage {
    /// GTT and USERPTR BOs.
    pub(crate) system: u64,
    /// GTT BOs.
    pub(crate) ttm: u64,
    /// VRAM BOs per device, exact and in 2 MiB steps.
    pub(crate) vram: Vec<u64>,
    pub(crate) vram_aligned: Vec<u64>,
}

impl KfdUsage {
    /// Adds (`add`) or removes BO `bo`'s share.
    fn account(&mut self, bo: &Bo, add: bool) {
        let apply = |x: &mut u64, by: u64| {
            *x = if add { *x + by } else { x.saturating_sub(by) };
        };
        match bo.domain {
            Domain::Gtt => {
                apply(&mut self.system, bo.size);
                apply(&mut self.ttm, bo.size);
            }
            Domain::UserPtr => apply(&mut self.system, bo.size),
            Domain::Vram => {
                if let (Some(v), Some(a)) =
                    (self.vram.get_mut(bo.gpu), self.vram_aligned.get_mut(bo.gpu))
                {
                    apply(v, bo.size);
                    apply(a, bo.size.div_ceil(2 << 20) * (2 << 20));
                }
            }
            Domain::Doorbell | Domain::Mmio => {}
        }
    }
}

impl BoStore {
    /// An empty store for `gpus` devices.
    pub(crate) fn new(gpus: usize) -> BoStore {
        BoStore {
            bos: HashMap::new(),
            by_inode: HashMap::new(),
            by_offset: BTreeMap::new(),
            next_id: 1,
            offsets: vec![OffsetSpace::default(); gpus],
            imports: HashMap::new(),
            kfd_usage: KfdUsage {
                vram: vec![0; gpus],
                vram_aligned: vec![0; gpus],
                ..KfdUsage::default()
            },
        }
    }

    /// Makes BO `id` a KFD allocation that counts against the KFD memory
    /// limits until it is destroyed.
    pub(crate) fn mark_kfd_limit(&mut self, id: BoId) {
        if let Some(bo) = self.bos.get_mut(&id) {
            if !bo.kfd_limit {
                bo.kfd_limit = true;
                self.kfd_usage.account(bo, true);
            }
        }
    }

    /// What the live KFD allocations reserve.
    pub(crate) fn kfd_usage(&self) -> &KfdUsage {
        &self.kfd_usage
    }

    /// A fake-offset range for `size` bytes on `gpu`'s window.
    fn alloc_offset(&mut self, gpu: usize, size: u64) -> Result<u64, Errno> {
        let space = self.offsets.get_mut(gpu).ok_or(Errno(libc::EINVAL))?;
        space.alloc(offset_span(size))
    }

    /// The fake offset BO `id` (another device's) has on `gpu`, which
    /// imported its dma-buf: given on first use, freed with the BO.
    pub(crate) fn import_offset(&mut self, gpu: usize, id: BoId) -> Result<u64, Errno> {
        if let Some(offset) = self.imports.get(&(gpu, id)) {
            return Ok(*offset);
        }
        let size = self.bos.get(&id).ok_or(Errno(libc::ENOENT))?.size;
        let offset = self.alloc_offset(gpu, size)?;
        self.imports.insert((gpu, id), offset);
        Ok(offset)
    }

    /// The imported BO whose range on `gpu` holds `[offset, offset+len)`,
    /// with the start of that range.
    pub(crate) fn import_at(&self, gpu: usize, offset: u64, len: u64) -> Option<(BoId, u64)> {
        let end = offset.checked_add(len)?;
        self.imports.iter().find_map(|(&(g, id), &start)| {
            let bo = self.bos.get(&id)?;
            (g == gpu && start <= offset && end <= start + offset_span(bo.size))
                .then_some((id, start))
        })
    }

    fn insert(
        &mut self,
        gpu: usize,
        size: u64,
        domain: Domain,
        flags: u32,
        backing: Backing,
    ) -> Result<BoId, Errno> {
        let mmap_offset = self.alloc_offset(gpu, size)?;
        let id = BoId(self.next_id);
        self.next_id += 1;
        if let Backing::Memory(m) = &backing {
            self.by_inode.insert(m.key(), id);
        }
        self.by_offset.insert((gpu, mmap_offset), id);
        self.bos.insert(
            id,
            Bo {
                id,
                gpu,
                size,
                domain,
                alloc_flags: flags,
                backing,
                mmap_offset,
                handles: 0,
                exported: false,
                allowed_files: BTreeSet::new(),
                kfd_limit: false,
                metadata: BoMetadata::default(),
            },
        );
        Ok(id)
    }

    /// A new zero-filled VRAM or GTT BO of `size` bytes with no handles yet.
    pub(crate) fn create_memory(
        &mut self,
        gpu: usize,
        size: u64,
        domain: Domain,
        flags: u32,
    ) -> Result<BoId, Errno> {
        debug_assert!(matches!(domain, Domain::Vram | Domain::Gtt));
        let name = if domain == Domain::Vram {
            "kfd-sim-vram"
        } else {
            "kfd-sim-gtt"
        };
        let memfd = Arc::new(Memfd::new(name, size)?);
        self.insert(gpu, size, domain, flags, Backing::Memory(memfd))
    }

    /// A new USERPTR BO over host memory at `addr`.
    pub(crate) fn create_userptr(
        &mut self,
        gpu: usize,
        addr: u64,
        size: u64,
        flags: u32,
        valid: bool,
    ) -> Result<BoId, Errno> {
        self.insert(
            gpu,
            size,
            Domain::UserPtr,
            flags,
            Backing::UserPtr {
                addr,
                valid,
                space: crate::kernel::current_space(),
            },
        )
    }

    /// A new DOORBELL or MMIO_REMAP BO showing `page`.
    pub(crate) fn create_aperture(
        &mut self,
        gpu: usize,
        size: u64,
        domain: Domain,
        flags: u32,
        page: Arc<Memfd>,
    ) -> Result<BoId, Errno> {
        self.insert(gpu, size, domain, flags, Backing::Aperture(page))
    }

    /// The BO `id`.
    pub(crate) fn get(&self, id: BoId) -> Option<&Bo> {
        self.bos.get(&id)
    }

    /// The BO `id`, mutably.
    pub(crate) fn get_mut(&mut self, id: BoId) -> Option<&mut Bo> {
        self.bos.get_mut(&id)
    }

    /// All live BOs.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Bo> {
        self.bos.values()
    }

    /// Number of live BOs.
    pub(crate) fn len(&self) -> usize {
        self.bos.len()
    }

    /// A new handle refers to `id`.
    pub(crate) fn add_handle(&mut self, id: BoId) {
        if let Some(bo) = self.bos.get_mut(&id) {
            bo.handles += 1;
        }
    }

    /// A handle to `id` went away; the BO is freed when nothing refers to it
    /// any more (exported BOs wait for [`BoStore::collect`]).
    pub(crate) fn drop_handle(&mut self, id: BoId) {
        let free = match self.bos.get_mut(&id) {
            Some(bo) => {
                bo.handles = bo.handles.saturating_sub(1);
                bo.handles == 0 && !bo.exported
            }
            None => false,
        };
        if free {
            self.remove(id);
        }
    }

    fn remove(&mut self, id: BoId) {
        if let Some(bo) = self.bos.remove(&id) {
            if bo.kfd_limit {
                self.kfd_usage.account(&bo, false);
            }
            if let Backing::Memory(m) = &bo.backing {
                self.by_inode.remove(&m.key());
            }
            self.by_offset.remove(&(bo.gpu, bo.mmap_offset));
            if let Some(space) = self.offsets.get_mut(bo.gpu) {
                space.free(bo.mmap_offset);
            }
            let offsets = &mut self.offsets;
            self.imports.retain(|&(gpu, bo_id), start| {
                if bo_id == id {
                    if let Some(space) = offsets.get_mut(gpu) {
                        space.free(*start);
                    }
                }
                bo_id != id
            });
        }
    }

    /// Exports `id` as a dma-buf: a new fd re-opening the BO's memfd,
    /// read-write or read-only, with or without close-on-exec. Only VRAM/GTT
    /// BOs can be exported (`EINVAL` otherwise).
    pub(crate) fn export_dmabuf(
        &mut self,
        id: BoId,
        writable: bool,
        cloexec: bool,
    ) -> Result<OwnedFd, Errno> {
        let bo = self.bos.get_mut(&id).ok_or(Errno(libc::EINVAL))?;
        let memfd = bo.memory().ok_or(Errno(libc::EINVAL))?.clone();
        let path = CString::new(format!("/proc/self/fd/{}", memfd.file().as_raw_fd()))
            .map_err(|_| Errno(libc::EINVAL))?;
        let mut flags = if writable {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        };
        if cloexec {
            flags |= libc::O_CLOEXEC;
        }
        // SAFETY: `path` is a valid NUL-terminated string for the duration of
        // the call; open(2) has no other memory arguments.
        let fd = unsafe { libc::open(path.as_ptr(), flags) };
        if fd < 0 {
            return Err(Errno::last());
        }
        bo.exported = true;
        // SAFETY: open(2) succeeded, so `fd` is a new descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The BO the caller's dma-buf fd refers to: `EBADF` when `fd` is not
    /// open, `EINVAL` when it is not a dma-buf of this simulator.
    pub(crate) fn lookup_dmabuf(&self, fd: i32) -> Result<BoId, Errno> {
        let key = FileKey::of_raw(crate::kernel::user_fd(fd)?.raw())?;
        self.by_inode.get(&key).copied().ok_or(Errno(libc::EINVAL))
    }

    /// The BO whose memfd has inode `key`, if any.
    pub(crate) fn by_key(&self, key: FileKey) -> Option<BoId> {
        self.by_inode.get(&key).copied()
    }

    /// The BO on `gpu` whose fake-offset range contains `[offset, offset+len)`.
    pub(crate) fn lookup_offset(&self, gpu: usize, offset: u64, len: u64) -> Option<BoId> {
        let end = offset.checked_add(len)?;
        let (&(g, start), &id) = self.by_offset.range(..=(gpu, offset)).next_back()?;
        let bo = self.bos.get(&id)?;
        let bo_end = start + offset_span(bo.size);
        (g == gpu && end <= bo_end).then_some(id)
    }

    /// Makes `new` the memory of every BO backed by `old` (a memfd or an
    /// aperture page); how many BOs it replaced it in.
    pub(crate) fn replace_memory(&mut self, old: &Arc<Memfd>, new: &Arc<Memfd>) -> usize {
        let mut replaced = 0;
        for bo in self.bos.values_mut() {
            match &mut bo.backing {
                Backing::Memory(m) if Arc::ptr_eq(m, old) => {
                    self.by_inode.remove(&m.key());
                    self.by_inode.insert(new.key(), bo.id);
                    *m = new.clone();
                    replaced += 1;
                }
                Backing::Aperture(m) if Arc::ptr_eq(m, old) => {
                    *m = new.clone();
                    replaced += 1;
                }
                _ => {}
            }
        }
        replaced
    }

    /// Raw fds the store itself holds (excluded when scanning for user fds).
    pub(crate) fn own_fds(&self) -> HashSet<i32> {
        self.bos
            .values()
            .filter_map(|bo| bo.memory().map(|m| m.file().as_raw_fd()))
            .collect()
    }

    /// Frees exported BOs without handles whose dma-buf fds are all closed;
    /// `open` holds the inodes of every fd the application still has open.
    pub(crate) fn collect(&mut self, open: &HashSet<FileKey>) {
        let dead: Vec<BoId> = self
            .bos
            .values()
            .filter(|bo| bo.handles == 0)
            .filter(|bo| match bo.memory() {
                Some(m) => !open.contains(&m.key()),
                None => true,
            })
            .map(|bo| bo.id)
            .collect();
        for id in dead {
            self.remove(id);
        }
    }

    /// Number of application fds (from `open`, a multiset of inodes) that are
    /// dma-bufs of live BOs.
    pub(crate) fn count_dmabuf_fds(&self, open: &[FileKey]) -> usize {
        open.iter()
            .filter(|k| self.by_inode.contains_key(k))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn offsets_are_page_granular_per_gpu_and_found_inside_a_bo() {
        let mut s = BoStore::new(2);
        let a = s.create_memory(0, 10_000, Domain::Vram, 0).unwrap();
        let b = s.create_memory(0, 4096, Domain::Gtt, 0).unwrap();
        let c = s.create_memory(1, 4096, Domain::Gtt, 0).unwrap();
        let (oa, ob, oc) = (
            s.get(a).unwrap().mmap_offset,
            s.get(b).unwrap().mmap_offset,
            s.get(c).unwrap().mmap_offset,
        );
        assert_eq!(oa, DRM_FILE_PAGE_OFFSET_START);
        assert_eq!(ob, oa + 3 * PAGE_SIZE, "10000 bytes take three pages");
        assert_eq!(
            oc, DRM_FILE_PAGE_OFFSET_START,
            "each device has its own window"
        );
        assert_eq!(s.lookup_offset(0, oa + PAGE_SIZE, 2 * PAGE_SIZE), Some(a));
        assert_eq!(
            s.lookup_offset(0, oa + PAGE_SIZE, 3 * PAGE_SIZE),
            None,
            "past the end of the BO"
        );
        assert_eq!(s.lookup_offset(0, ob, PAGE_SIZE), Some(b));
        assert_eq!(s.lookup_offset(1, oc, PAGE_SIZE), Some(c));
        assert_eq!(s.lookup_offset(1, oc + PAGE_SIZE, PAGE_SIZE), None);
    }

    #[test]
    fn a_bo_lives_while_a_handle_or_a_dmabuf_refers_to_it() {
        let mut s = BoStore::new(1);
        let a = s.create_memory(0, 4096, Domain::Gtt, 0).unwrap();
        s.add_handle(a);
        s.drop_handle(a);
        assert!(
            s.get(a).is_none(),
            "last handle gone, never exported: freed"
        );
        let b = s.create_memory(0, 4096, Domain::Gtt, 0).unwrap();
        s.add_handle(b);
        let rw = s.export_dmabuf(b, true, false).unwrap();
        let ro = s.export_dmabuf(b, false, true).unwrap();
        // SAFETY: fcntl queries on fds this test owns.
        let (frw, fro, cro) = unsafe {
            (
                libc::fcntl(rw.as_raw_fd(), libc::F_GETFL),
                libc::fcntl(ro.as_raw_fd(), libc::F_GETFL),
                libc::fcntl(ro.as_raw_fd(), libc::F_GETFD),
            )
        };
        assert_eq!(frw & libc::O_ACCMODE, libc::O_RDWR);
        assert_eq!(fro & libc::O_ACCMODE, libc::O_RDONLY);
        assert_eq!(cro & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        assert_eq!(s.lookup_dmabuf(rw.as_raw_fd()), Ok(b));
        s.drop_handle(b);
        assert!(s.get(b).is_some(), "dma-buf fds keep it");
        let key = s.get(b).unwrap().memory().unwrap().key();
        s.collect(&[key].into_iter().collect());
        assert!(s.get(b).is_some(), "still open");
        drop((rw, ro));
        s.collect(&HashSet::new());
        assert!(s.get(b).is_none());
        assert_eq!(s.len(), 0);
        // Only memory BOs export.
        let page = Arc::new(Memfd::new("page", 4096).unwrap());
        let d = s
            .create_aperture(0, 4096, Domain::Doorbell, 0, page)
            .unwrap();
        assert_eq!(
            s.export_dmabuf(d, true, true).unwrap_err(),
            Errno(libc::EINVAL)
        );
        assert_eq!(s.lookup_dmabuf(-1).unwrap_err(), Errno(libc::EBADF));
    }
}
