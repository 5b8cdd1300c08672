//! The render-node half of the simulated kernel: amdgpu's DRM ioctls.
//!
//! [`ioctl`] is the DRM dispatcher (`drm_ioctl`): type byte `'d'` (else
//! `ENOTTY`), the command number picks the handler (unknown → `EINVAL`),
//! argument direction is the intersection of the caller's and the kernel's
//! IN/OUT bits, the argument is copied in at the caller's size and
//! zero-filled up to the kernel's, and copied back at the caller's size even
//! when the handler fails (kernel.md §4.1).
//!
//! Per GPU there is a [`DrmDevice`] (SDMA engines, the GEM creation facts of
//! BOs, the reset counter); per open render file a [`DrmFile`] (the GEM
//! handle table, the file's GPU VM, contexts and BO lists). BOs themselves
//! live in the store shared with the KFD half (`crate::hw::bo`): a KFD VRAM/GTT
//! allocation *is* a GEM object, so importing its dma-buf here resolves to
//! the same BO.
//!
//! The handlers are split by topic: `gem` (GEM objects, PRIME, VA), `submit`
//! (contexts, BO lists, command submission, fence waits) and `info`
//! (VERSION, INFO). This module never touches KFD state except to read which
//! KFD allocations live in a render file's VM (a compute VM).
//!
//! Not simulated (answered `EINVAL`, like an unknown command):
//! GEM_WAIT_IDLE, WAIT_FENCES, VM, FENCE_TO_HANDLE, the user
//! queue ioctls and every DRM core ioctl other than VERSION, GEM_CLOSE,
//! PRIME and GEM_CHANGE_HANDLE; DRM core ioctls a render node may not use
//! answer `EACCES`, as on a real render node.

pub(crate) mod fdinfo;
mod gem;
mod info;
mod metadata;
mod submit;
pub(crate) mod va;
mod vm_snapshot;

pub(crate) use vm_snapshot::{
    bo_memory, engine_vm_view, kfd_ranges, userptr_owner, vm_view, UserptrAccess,
};

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use amdgpu_topology::Node;
use kfd_sys::{_IOC_DIR, _IOC_NR, _IOC_READ, _IOC_SIZE, _IOC_TYPE, _IOC_WRITE, DRM_IOCTL_BASE};

use crate::hw::bo::{BoId, BoStore};
use crate::hw::sdma::{Deadline, Fence, GpuGeneration, JobError, SdmaEngine};
use crate::kernel::{FileKey, OpenFile, Pid, Shared, State};
use ::kfd::Errno;

use self::va::VaSpace;

/// What a mapping in a DRM file's VM shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VmTarget {
    /// A BO (GEM object).
    Bo(BoId),
    /// A PRT range (no memory: reads zero, writes vanish).
    Prt,
}

/// GEM creation facts of a BO (`preferred_domains`, `flags`,
/// `page_alignment`) and, for userptr BOs, the userptr flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemInfo {
    /// `AMDGPU_GEM_DOMAIN_*` the BO prefers.
    pub(crate) preferred_domains: u64,
    /// `AMDGPU_GEM_CREATE_*` flags.
    pub(crate) flags: u64,
    /// Alignment in pages.
    pub(crate) alignment_pages: u64,
    /// `AMDGPU_GEM_USERPTR_*` flags of a userptr BO.
    pub(crate) userptr_flags: Option<u32>,
    /// The process whose memory a userptr BO wraps (its `mm`).
    pub(crate) userptr_owner: Option<Pid>,
}

/// A GPU's render-node side: SDMA engines and device-wide GEM facts.
#[derive(Debug)]
pub(crate) struct DrmDevice {
    /// Family and SDMA rules.
    pub(crate) generation: GpuGeneration,
    /// The SDMA engines (one worker thread per ring, started on first use).
    pub(crate) sdma: SdmaEngine,
    /// The topology node's properties DEV_INFO reports.
    facts: info::DeviceFacts,
    /// GEM creation facts of BOs created or re-placed through the DRM
    /// interface (KFD BOs derive theirs from their allocation flags).
    gem: Mutex<HashMap<BoId, GemInfo>>,
    /// GPU resets so far (a hung SDMA job resets the GPU).
    reset_counter: Arc<AtomicU64>,
    /// The most host memory live GEM userptr BOs of this device pinned at
    /// once (bytes): the high-water mark of SDMA staging memory.
    pub(crate) userptr_peak: AtomicU64,
}

impl DrmDevice {
    /// The render-node side of the GPU at topology `node`, with
    /// `sdma_rings` SDMA rings (PCIe plus XGMI engines, at least one).
    pub(crate) fn new(node: &Node, vram_bytes: u64, sdma_rings: u32) -> DrmDevice {
        let generation = GpuGeneration::from_gfx_target_version(node.prop("gfx_target_version"));
        DrmDevice {
            generation,
            sdma: SdmaEngine::new(
                format!("gpu{}", node.gpu_id.unwrap_or(0)),
                sdma_rings.max(1),
                generation.sdma_rules(),
            ),
            facts: info::DeviceFacts::from_node(node, vram_bytes),
            gem: Mutex::new(HashMap::new()),
            reset_counter: Arc::new(AtomicU64::new(0)),
            userptr_peak: AtomicU64::new(0),
        }
    }

    /// Raises the userptr high-water mark to what the live GEM userptr BOs
    /// of this device pin now (called after each GEM_USERPTR: the sum only
    /// grows when one is created).
    fn note_userptr_pinned(&self, bos: &BoStore) {
        let pinned: u64 = self
            .gem_table()
            .iter()
            .filter(|(_, info)| info.userptr_flags.is_some())
            .filter_map(|(id, _)| bos.get(*id))
            .map(|bo| bo.pinned_pages() * crate::hw::bo::PAGE_SIZE)
            .sum();
        self.userptr_peak
            .fetch_max(pinned, std::sync::atomic::Ordering::Relaxed);
    }

    fn gem_table(&self) -> MutexGuard<'_, HashMap<BoId, GemInfo>> {
        self.gem.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The GEM facts of `bo`.
    pub(crate) fn gem_info(&self, bo: &crate::hw::bo::Bo) -> GemInfo {
        if let Some(info) = self.gem_table().get(&bo.id) {
            return *info;
        }
        gem::derived_gem_info(bo)
    }

    fn set_gem_info(&self, id: BoId, info: GemInfo, bos: &BoStore) {
        let mut table = self.gem_table();
        table.retain(|id, _| bos.get(*id).is_some());
        table.insert(id, info);
    }
}

/// One GEM handle of a DRM file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemHandle {
    /// The object.
    pub(crate) bo: BoId,
    /// Imported from another device's dma-buf (`import_attach` set).
    pub(crate) foreign_import: bool,
    /// This handle's creation granted the file mmap access to the BO.
    granted_mmap: bool,
}

/// A fence context entity: one (context, ring) pair's sequence and recent
/// fences (`amdgpu_ctx_entity`).
#[derive(Debug)]
pub(crate) struct Entity {
    /// Sequence number the next submission gets (starts at 1).
    sequence: u64,
    /// The last [`SCHED_JOBS`] fences by sequence number.
    fences: BTreeMap<u64, Arc<Fence>>,
}

/// `amdgpu_sched_jobs`: fences a context entity remembers.
pub(crate) const SCHED_JOBS: u64 = 32;

impl Default for Entity {
    fn default() -> Self {
        Entity {
            sequence: 1,
            fences: BTreeMap::new(),
        }
    }
}

/// A submission context (`amdgpu_ctx`).
#[derive(Debug)]
pub(crate) struct Context {
    /// Set when one of its jobs hung the engine (`ctx->guilty`).
    guilty: Arc<std::sync::atomic::AtomicBool>,
    /// The device reset counter when the context was created.
    reset_base: u64,
    /// Entities by (ip type, ring).
    entities: BTreeMap<(u32, u32), Entity>,
    /// SET_STABLE_PSTATE value.
    stable_pstate: u32,
}

/// One open render file's DRM state (`drm_file` + `amdgpu_fpriv`).
#[derive(Debug)]
pub(crate) struct DrmFile {
    /// GEM handles.
    pub(crate) handles: BTreeMap<u32, GemHandle>,
    /// The file's GPU VM (GEM_VA mappings; KFD allocations of a compute VM
    /// are read from the KFD process, see [`kfd_ranges`]).
    pub(crate) vm: VaSpace<VmTarget>,
    ctxs: BTreeMap<u32, Context>,
    bo_lists: BTreeMap<u32, Vec<BoId>>,
}

impl DrmFile {
    /// A fresh file on a GPU with `device`.
    pub(crate) fn new(device: &DrmDevice) -> DrmFile {
        DrmFile {
            handles: BTreeMap::new(),
            vm: VaSpace::new(device.generation.vm_bytes()),
            ctxs: BTreeMap::new(),
            bo_lists: BTreeMap::new(),
        }
    }

    /// The lowest free GEM handle ≥ 1 (`idr_alloc(.., 1, 0)`).
    fn free_handle(&self) -> Result<u32, Errno> {
        lowest_free(self.handles.keys().copied(), 1, i32::MAX as u32).ok_or(Errno(libc::ENOSPC))
    }

    /// The handle `h`, or `errno`.
    fn handle(&self, h: u32, errno: i32) -> Result<GemHandle, Errno> {
        self.handles.get(&h).copied().ok_or(Errno(errno))
    }

    /// The handle this file already has for `bo`, if any.
    fn handle_of(&self, bo: BoId) -> Option<u32> {
        self.handles
            .iter()
            .find(|(_, g)| g.bo == bo)
            .map(|(h, _)| *h)
    }
}

/// The lowest id in `[start, end)` not in the ascending sequence `used`.
fn lowest_free(used: impl Iterator<Item = u32>, start: u32, end: u32) -> Option<u32> {
    let mut candidate = start;
    for id in used {
        if id < candidate {
            continue;
        }
        if id > candidate {
            break;
        }
        candidate = candidate.checked_add(1)?;
    }
    (candidate < end).then_some(candidate)
}

/// Creates a GEM handle for `bo` in the file `key` (`drm_gem_handle_create`):
/// counts the reference and grants the file mmap access.
pub(crate) fn create_handle(
    file: &mut DrmFile,
    bos: &mut BoStore,
    key: FileKey,
    bo: BoId,
    foreign_import: bool,
) -> Result<u32, Errno> {
    let handle = file.free_handle()?;
    let object = bos.get_mut(bo).ok_or(Errno(libc::ENOENT))?;
    let granted_mmap = object.allowed_files.insert(key);
    bos.add_handle(bo);
    file.handles.insert(
        handle,
        GemHandle {
            bo,
            foreign_import,
            granted_mmap,
        },
    );
    Ok(handle)
}

/// Deletes GEM handle `handle` of file `key` (`drm_gem_handle_delete`): when
/// it was the file's last handle of the BO, the BO's GEM mappings leave the
/// VM and the mmap grant it made is revoked.
pub(crate) fn delete_handle(
    file: &mut DrmFile,
    bos: &mut BoStore,
    key: FileKey,
    handle: u32,
) -> Result<(), Errno> {
    let gem = file.handles.remove(&handle).ok_or(Errno(libc::EINVAL))?;
    let still_open = file.handles.values().any(|g| g.bo == gem.bo);
    if !still_open {
        file.vm.remove_where(|t| *t == VmTarget::Bo(gem.bo));
    }
    if gem.granted_mmap {
        // Hand the grant to another handle of the same BO, if any.
        match file.handles.values_mut().find(|g| g.bo == gem.bo) {
            Some(other) => other.granted_mmap = true,
            None => {
                if let Some(object) = bos.get_mut(gem.bo) {
                    object.allowed_files.remove(&key);
                }
            }
        }
    }
    bos.drop_handle(gem.bo);
    Ok(())
}

/// The last reference to render file `key` went away: every GEM handle is
/// closed (in-flight SDMA jobs keep the memory they use alive by
/// themselves).
pub(crate) fn release(bos: &mut BoStore, key: FileKey, mut file: DrmFile) {
    let handles: Vec<u32> = file.handles.keys().copied().collect();
    for h in handles {
        // Cannot fail: `h` comes from the table.
        let _ = delete_handle(&mut file, bos, key, h);
    }
}

/// The state one DRM ioctl works on.
pub(crate) struct Call<'a> {
    /// Immutable simulator parts (GPUs).
    pub(crate) shared: &'a Shared,
    /// The locked state.
    pub(crate) st: &'a mut State,
    /// The open render file.
    pub(crate) key: FileKey,
    /// Its GPU index.
    pub(crate) gpu: usize,
    /// The calling process.
    pub(crate) caller: Pid,
}

impl Call<'_> {
    /// The GPU's DRM device.
    pub(crate) fn device(&self) -> &DrmDevice {
        &self.shared.gpus[self.gpu].drm
    }

    /// The file's DRM state and the BO store, borrowed together.
    pub(crate) fn parts(&mut self) -> Result<(&mut DrmFile, &mut BoStore), Errno> {
        let State { files, bos, .. } = &mut *self.st;
        match files.get_mut(&self.key) {
            Some(OpenFile::Render(r)) => Ok((&mut r.drm, bos)),
            _ => Err(Errno(libc::EBADF)),
        }
    }

    /// The file's DRM state.
    pub(crate) fn file(&mut self) -> Result<&mut DrmFile, Errno> {
        self.parts().map(|(f, _)| f)
    }
}

/// Turns a fence wait's outcome (`None` = still busy) into the ioctl result,
/// writing the output fields into the argument buffer.
pub(crate) type FinishWait = fn(&mut [u8], Option<Result<(), JobError>>) -> Result<c_int, Errno>;

/// What a handler asks the dispatcher to do next.
pub(crate) enum Step {
    /// Finished with this result.
    Done(c_int),
    /// Wait (without the state lock) for `fence` until `deadline`, then let
    /// `finish` write the result into the argument buffer.
    Wait {
        /// The fence.
        fence: Arc<Fence>,
        /// How long to wait.
        deadline: Deadline,
        /// Turns the outcome into the result.
        finish: FinishWait,
    },
    /// Wait (without the lock) until `fence` signals, then run the handler
    /// again on the original argument (a submission waiting for a free
    /// fence slot).
    Retry(Arc<Fence>),
}

type Handler = fn(&mut Call<'_>, &mut [u8]) -> Result<Step, Errno>;

/// How a render node treats a command number.
enum Entry {
    /// Simulated: name for fault injection, the kernel's direction bits and
    /// argument size, and the handler.
    Run {
        name: &'static str,
        dir: u32,
        size: usize,
        handler: Handler,
    },
    /// A DRM core ioctl without `DRM_RENDER_ALLOW`.
    NotForRenderNodes,
}

fn run(name: &'static str, dir: u32, size: usize, handler: Handler) -> Option<Entry> {
    Some(Entry::Run {
        name,
        dir,
        size,
        handler,
    })
}

/// The names (for fault injection) of every ioctl the simulated render
/// node handles.
pub(crate) fn ioctl_names() -> Vec<&'static str> {
    (0..=u8::MAX)
        .filter_map(entry)
        .filter_map(|e| match e {
            Entry::Run { name, .. } => Some(name),
            Entry::NotForRenderNodes => None,
        })
        .collect()
}

/// The ioctl table, by command number.
fn entry(nr: u8) -> Option<Entry> {
    use std::mem::size_of;

    use kfd_sys as k;
    let rw = _IOC_READ | _IOC_WRITE;
    let w = _IOC_WRITE;
    let amdgpu = |n: u8| k::DRM_COMMAND_BASE + n;
    match nr {
        0x00 => run("VERSION", rw, size_of::<k::drm_version>(), info::version),
        0x09 => run(
            "GEM_CLOSE",
            w,
            size_of::<k::drm_gem_close>(),
            gem::gem_close,
        ),
        0x2d => run(
            "PRIME_HANDLE_TO_FD",
            rw,
            size_of::<k::drm_prime_handle>(),
            gem::prime_handle_to_fd,
        ),
        0x2e => run(
            "PRIME_FD_TO_HANDLE",
            rw,
            size_of::<k::drm_prime_handle>(),
            gem::prime_fd_to_handle,
        ),
        0xD2 => run(
            "GEM_CHANGE_HANDLE",
            rw,
            size_of::<k::drm_gem_change_handle>(),
            gem::gem_change_handle,
        ),
        // Legacy, authentication, master and mode-setting ioctls.
        0x01..=0x08 | 0x0a | 0x0b | 0x0d..=0x2c | 0x2f..=0x3f | 0xa0..=0xbe => {
            Some(Entry::NotForRenderNodes)
        }
        n if n == amdgpu(k::DRM_AMDGPU_GEM_CREATE) => run(
            "AMDGPU_GEM_CREATE",
            rw,
            size_of::<k::drm_amdgpu_gem_create>(),
            gem::gem_create,
        ),
        n if n == amdgpu(k::DRM_AMDGPU_GEM_MMAP) => run(
            "AMDGPU_GEM_MMAP",
            rw,
            size_of::<k::drm_amdgpu_gem_mmap>(),
            gem::gem_mmap,
        ),
        n if n == amdgpu(k::DRM_AMDGPU_CTX) => run(
            "AMDGPU_CTX",
            rw,
            size_of::<k::drm_amdgpu_ctx>(),
            submit::ctx,
        ),
        n if n == amdgpu(k::DRM_AMDGPU_BO_LIST) => run(
            "AMDGPU_BO_LIST",
            rw,
            size_of::<k::drm_amdgpu_bo_list>(),
            submit::bo_list,
        ),
        n if n == amdgpu(k::DRM_AMDGPU_CS) => {
            run("AMDGPU_CS", rw, size_of::<k::drm_amdgpu_cs>(), submit::cs)
        }
        n if n == amdgpu(k::DRM_AMDGPU_INFO) => run(
            "AMDGPU_INFO",
            w,
            size_of::<k::drm_amdgpu_info>(),
            info::info,
        ),
        n if n == amdgpu(k::DRM_AMDGPU_GEM_METADATA) => run(
            "AMDGPU_GEM_METADATA",
            rw,
            size_of::<k::drm_amdgpu_gem_metadata>(),
            metadata::gem_metadata,
        ),
        n if n == amdgpu(k::DRM_AMDGPU_GEM_VA) => run(
            "AMDGPU_GEM_VA",
            w,
            size_of::<k::drm_amdgpu_gem_va>(),
            gem::gem_va,
        ),
        n if n == amdgpu(k::DRM_AMDGPU_WAIT_CS) => run(
            "AMDGPU_WAIT_CS",
            rw,
            size_of::<k::drm_amdgpu_wait_cs>(),
            submit::wait_cs,
        ),
        n if n == amdgpu(k::DRM_AMDGPU_GEM_OP) => run(
            "AMDGPU_GEM_OP",
            rw,
            size_of::<k::drm_amdgpu_gem_op>(),
            gem::gem_op,
        ),
        n if n == amdgpu(k::DRM_AMDGPU_GEM_USERPTR) => run(
            "AMDGPU_GEM_USERPTR",
            rw,
            size_of::<k::drm_amdgpu_gem_userptr>(),
            gem::gem_userptr,
        ),
        n if n == amdgpu(k::DRM_AMDGPU_GEM_LIST_HANDLES) => run(
            "AMDGPU_GEM_LIST_HANDLES",
            rw,
            size_of::<k::drm_amdgpu_gem_list_handles>(),
            gem::gem_list_handles,
        ),
        _ => None,
    }
}

fn relock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The DRM dispatcher for an ioctl on render file `key` (`drm_ioctl`).
/// Takes the state lock from the caller, because waits for fences (WAIT_CS,
/// a CS waiting for a free fence slot) happen without it.
///
/// # Safety
/// The [`kfd::Driver::ioctl`] contract: `arg` is valid for reads and writes
/// of `_IOC_SIZE(request)` bytes, and the user pointers inside it for the
/// kernel's use of them.
pub(crate) unsafe fn ioctl<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    caller: Pid,
    key: FileKey,
    request: u64,
    arg: *mut c_void,
) -> Result<c_int, Errno> {
    // ioctl(2) takes an unsigned int command: the upper bits never arrive.
    let cmd = request as u32;
    if _IOC_TYPE(cmd) != DRM_IOCTL_BASE {
        return Err(Errno(libc::ENOTTY));
    }
    let (name, kdir, ksize, handler) = match entry(_IOC_NR(cmd)) {
        Some(Entry::Run {
            name,
            dir,
            size,
            handler,
        }) => (name, dir, size, handler),
        Some(Entry::NotForRenderNodes) => return Err(Errno(libc::EACCES)),
        None => return Err(Errno(libc::EINVAL)),
    };
    let gpu = match st.files.get(&key) {
        Some(OpenFile::Render(r)) => r.gpu,
        _ => return Err(Errno(libc::EBADF)),
    };
    let udir = _IOC_DIR(cmd);
    let usize_ = _IOC_SIZE(cmd);
    let in_size = if udir & kdir & _IOC_WRITE != 0 {
        usize_
    } else {
        0
    };
    let out_size = if udir & kdir & _IOC_READ != 0 {
        usize_
    } else {
        0
    };
    let mut input = vec![0u8; in_size.max(out_size).max(ksize)];
    if in_size > 0 {
        if arg.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        // SAFETY: the caller guarantees `arg` is valid for `_IOC_SIZE`
        // (= `in_size`) bytes; `input` is a separate buffer at least as long.
        unsafe { std::ptr::copy_nonoverlapping(arg as *const u8, input.as_mut_ptr(), in_size) };
    }
    let mut buf = input.clone();
    // An injected failure happens inside the handler: the argument is
    // still copied back.
    let injected = crate::kernel::fault::check(&mut st, name);
    let result = loop {
        if let Err(e) = injected {
            break Err(e);
        }
        let step = {
            let mut call = Call {
                shared,
                st: &mut st,
                key,
                gpu,
                caller,
            };
            handler(&mut call, &mut buf)
        };
        match step {
            Ok(Step::Done(v)) => break Ok(v),
            Err(e) => break Err(e),
            Ok(Step::Wait {
                fence,
                deadline,
                finish,
            }) => {
                drop(st);
                let outcome = fence.wait(deadline);
                st = relock(shared);
                break finish(&mut buf, outcome);
            }
            Ok(Step::Retry(fence)) => {
                drop(st);
                fence.wait(Deadline::Infinite);
                st = relock(shared);
                buf.copy_from_slice(&input);
            }
        }
    };
    drop(st);
    if out_size > 0 {
        if arg.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        // SAFETY: as above, `arg` is valid for writes of `out_size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), arg as *mut u8, out_size) };
    }
    result
}

/// Reads a `T` from the start of the argument buffer (the dispatcher makes
/// it at least the kernel's size).
pub(crate) fn read_arg<T: zerocopy::FromBytes>(buf: &[u8]) -> T {
    T::read_from_prefix(buf)
        .map(|(v, _)| v)
        .unwrap_or_else(|_| T::new_zeroed())
}

/// Writes `value` at byte `offset` of the argument buffer.
pub(crate) fn write_arg<T: zerocopy::IntoBytes + zerocopy::Immutable>(
    buf: &mut [u8],
    offset: usize,
    value: &T,
) {
    let bytes = value.as_bytes();
    if let Some(dst) = buf.get_mut(offset..offset + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_ids() {
        assert_eq!(lowest_free([].into_iter(), 1, 10), Some(1));
        assert_eq!(lowest_free([1, 2, 4].into_iter(), 1, 10), Some(3));
        assert_eq!(lowest_free([2, 3].into_iter(), 1, 10), Some(1));
        assert_eq!(lowest_free([1, 2, 3].into_iter(), 1, 4), None);
        assert_eq!(lowest_free([0, 1].into_iter(), 1, 4), Some(2));
    }
}
