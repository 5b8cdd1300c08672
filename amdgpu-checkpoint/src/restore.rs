//! Restore: `RESTORE_EXT_FILE` in the restored task, and `RESUME_DEVICES_LATE`
//! in CRIU's main process.
//!
//! For a KFD image (`amdgpu-kfd-<id>.img`): validate it, parse the local
//! topology, map the checkpointed GPUs onto local ones under the check
//! options, open each mapped GPU's render node above every fd the task will
//! own (CRIU's `find_unused_fd_pid`), `CRIU_OP RESTORE` on a fresh
//! `/dev/kfd`, write the BO contents back ([`crate::transfer`]), record the
//! mmap-offset translations for `UPDATE_VMA_MAP`, and recreate hsakmt's shared
//! memory. The returned fd is the new `/dev/kfd`, which CRIU installs at the
//! saved number.
//!
//! A render-node image of the same task (restored after the KFD file: fds are
//! restored in ascending order) gets a `dup` of the render file KFD already
//! uses for that GPU, so BOs stay mappable through it; one numbered below
//! the task's `/dev/kfd` answers with a retry until the KFD file is restored.
//!
//! A render node of a task without a KFD image (a process that never opened
//! `/dev/kfd`: the image's `gpu_id` is 0, or the set holds no KFD image of
//! the task's pid — the dump cannot tell the two apart, see
//! [`crate::dump::Dumper::dump_render_node`]) is restored render-only: its
//! recorded device entry picks a compatible local GPU under the `KFD_*_CHECK`
//! options (the same render minor preferred; two checkpointed GPUs of one
//! task never on one local GPU), and the fd floor comes from
//! `find_unused_fd_pid` of the task's own pid ([`TaskIdentity`]).
//!
//! Fixed compared with the C plugin: a render node that cannot be opened is
//! an error (C logs and carries on); an image id with no amdgpu image is not
//! ours (C answers `-EINVAL` for every ext file); a pid without KFD state is
//! not ours at resume.
//!
//! A render-node image's own DRM BOs are re-created in that file under their
//! checkpointed handles (`GEM_CREATE` + `GEM_CHANGE_HANDLE`), mapped at their
//! GPU addresses, filled from their pages files and given translations.
//!
//! Buffers shared between files and tasks go through the handle table all
//! restored tasks share ([`HandleTable`], made by `RESTORE_INIT` before
//! fork, or lazily in the task where the host has no such hook) and CRIU's
//! fd store: a task that re-creates a buffer with a share handle (a KFD BO
//! through RESTORE, a DRM BO through `GEM_CREATE`) parks a dma-buf of it in
//! the fd store and publishes the handle; an imported DRM BO is imported
//! from that dma-buf (`PRIME_FD_TO_HANDLE`) and given its checkpointed GEM
//! handle, and a dma-buf file becomes a new fd of it. While a buffer's
//! exporter has not run yet, the file is answered with a retry
//! ([`Restored::WaitForKfd`]); BOs already re-created are not re-created on
//! the next call. A dma-buf of a BO of the same task is a `dup` of the
//! dma-buf RESTORE returned for it, without the fd store.
//!
//! GPU mappings are re-created with `AMDGPU_VM_PAGE_*` flags translated from
//! the page-table bits `GET_MAPPING_INFO` reported at dump (passing those
//! back unchanged gives `EINVAL` or wrong permissions).
//!
//! This module never touches CRIU's symbols: the caller passes the store,
//! the task's pid with CRIU's `find_unused_fd_pid` ([`TaskIdentity`]) and
//! its fd store ([`Sharing`]) as values and functions.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use amdgpu_image::{
    flags, CriuDmabufNode, CriuKfd, CriuRenderNode, ImageName, ImageStore, ReadLimits,
    ValidatedKfd, ValidatedRenderNode,
};
use amdgpu_topology::checks::{device_mismatches, rule, Reason};
use amdgpu_topology::devices::DeviceTopology;
use amdgpu_topology::mapping::map_topologies;
use amdgpu_topology::options::CheckOptions;
use kfd::{Driver, GemCreate, GemHandle, Kfd, RenderNode};
use kfd_sys::{
    kfd_criu_bo_bucket, kfd_criu_device_bucket, AMDGPU_VM_PAGE_EXECUTABLE, AMDGPU_VM_PAGE_NOALLOC,
    AMDGPU_VM_PAGE_PRT, AMDGPU_VM_PAGE_READABLE, AMDGPU_VM_PAGE_WRITEABLE, DRM_CLOEXEC, DRM_RDWR,
    KFD_INVALID_FD,
};

use crate::dump::{local_topology, HSAKMT_SHM};
use crate::error::Error;
use crate::handles::HandleTable;
use crate::identify::render_node_path;
use crate::options::Options;
use crate::transfer;
use crate::vma::{Translation, VmaTranslations};
use amdgpu_image::topology::{checkpointed_topology, device_node};

/// The GPU page size, the unit of `drm_bo_entry.alignment`.
const GPU_PAGE: u64 = 4096;

/// hsakmt's named semaphore (`/dev/shm/sem.hsakmt_semaphore`).
pub const HSAKMT_SEMAPHORE: &CStr = c"hsakmt_semaphore";

/// Where and how a restore runs.
#[derive(Debug, Clone)]
pub struct RestoreConfig {
    /// The local KFD topology root.
    pub topology_root: PathBuf,
    /// Options from the environment.
    pub options: Options,
    /// The POSIX shared-memory directory. hsakmt's semaphore is created only
    /// when this is the system's `/dev/shm` (other directories are for
    /// tests, which must not touch the system's semaphores).
    pub shm_dir: PathBuf,
}

/// What a successful KFD restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdRestore {
    /// CRIU's file id.
    pub id: u32,
    /// Checkpointed (user) gpu_id to local gpu_id.
    pub gpu_map: BTreeMap<u32, u32>,
    /// BOs re-created.
    pub bos: usize,
    /// Bytes of contents written back.
    pub content_bytes: u64,
}

/// What CRIU offers a restored task for buffers shared between tasks.
pub struct Sharing<'a> {
    /// The handle table every restored task shares (`RESTORE_INIT`); `None`
    /// where the host made none (then the task makes a private one on first
    /// use, which shares buffers between its own files only).
    pub table: Option<&'a HandleTable>,
    /// `fdstore_add(fd)`: parks a copy of `fd` in CRIU's fd store.
    pub fdstore_add: &'a dyn Fn(BorrowedFd<'_>) -> std::io::Result<i32>,
    /// `fdstore_get(id)`: a new fd of the file parked under `id`.
    pub fdstore_get: &'a dyn Fn(i32) -> std::io::Result<OwnedFd>,
}

fn no_fd_store_add(_: BorrowedFd<'_>) -> std::io::Result<i32> {
    Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
}

fn no_fd_store_get(_: i32) -> std::io::Result<OwnedFd> {
    Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
}

impl Sharing<'static> {
    /// Buffers shared between the files of one process only: no table
    /// shared with other restored processes, no fd store (a tool that
    /// restores one process at a time, without CRIU).
    pub fn within_process() -> Self {
        Sharing {
            table: None,
            fdstore_add: &no_fd_store_add,
            fdstore_get: &no_fd_store_get,
        }
    }
}

impl std::fmt::Debug for Sharing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharing")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// Who the restored task is, for the fd floor and for telling a
/// render-only process from one whose `/dev/kfd` comes later.
pub struct TaskIdentity<'a> {
    /// The task's pid as its KFD image records it (`getpid()` in the
    /// restored task); `None`
    /// when the host cannot tell.
    pub pid: Option<u32>,
    /// CRIU's `find_unused_fd_pid`: a free fd number above every fd the
    /// task with this pid will own.
    pub find_unused_fd: &'a dyn Fn(u32) -> Option<i32>,
}

impl std::fmt::Debug for TaskIdentity<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskIdentity")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// `AMDGPU_VM_PAGE_*` flags for `GEM_VA` from the page-table bits
/// `GET_MAPPING_INFO` reports (`AMDGPU_PTE_*`: executable 1<<4, readable
/// 1<<5, writeable 1<<6, PRT 1<<51, NOALLOC 1<<58). Other bits (memory
/// type, validity, fragment) are chosen again by the kernel.
pub fn gem_va_flags(pte: u64) -> u32 {
    const PTE_TO_VM: [(u64, u32); 5] = [
        (1 << 4, AMDGPU_VM_PAGE_EXECUTABLE),
        (1 << 5, AMDGPU_VM_PAGE_READABLE),
        (1 << 6, AMDGPU_VM_PAGE_WRITEABLE),
        (1 << 51, AMDGPU_VM_PAGE_PRT),
        (1 << 58, AMDGPU_VM_PAGE_NOALLOC),
    ];
    PTE_TO_VM
        .iter()
        .filter(|(pte_bit, _)| pte & pte_bit != 0)
        .fold(0, |flags, (_, vm)| flags | vm)
}

/// The restore side of the plugin in one restored task.
pub struct Restorer<D: Driver + Clone> {
    driver: D,
    config: RestoreConfig,
    fd_floor: Option<i32>,
    /// Local gpu_id to the task's render file for it (also KFD's `drm_fd`).
    render_files: BTreeMap<u32, Arc<OwnedFd>>,
    /// Local gpu_id to its render minor.
    render_minors: BTreeMap<u32, u32>,
    /// DRM BOs re-created: (handle, checkpointed render minor).
    drm_bos_done: BTreeSet<(u32, u32)>,
    /// Dma-bufs of restored KFD BOs by handle, for dma-buf files.
    dmabufs: BTreeMap<u32, OwnedFd>,
    /// The task's own table where the host shares none.
    private_table: Option<HandleTable>,
    /// Checkpointed gpu_id to local gpu_id, once a KFD image was restored.
    gpu_map: BTreeMap<u32, u32>,
    /// Render-only nodes: checkpointed render minor to the local gpu_id
    /// standing in for that GPU in this task.
    render_only: BTreeMap<u32, u32>,
    /// Whether the image set holds a KFD image of this task, once asked.
    task_has_kfd: Option<bool>,
    translations: VmaTranslations,
    restored: Vec<KfdRestore>,
    /// Parallel restore: where BO contents are handed off instead of
    /// copied here.
    hand_off: Option<crate::parallel::SocketName>,
    /// Images of files that asked for a retry, by CRIU file id: the retry
    /// uses them instead of reading the image again (an image streamer
    /// serves each file once).
    deferred: BTreeMap<u32, Deferred>,
}

/// The image of a file waiting for a retry.
#[derive(Debug)]
enum Deferred {
    RenderNode(Box<CriuRenderNode>),
    Dmabuf(CriuDmabufNode),
}

impl<D: Driver + Clone> std::fmt::Debug for Restorer<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Restorer")
            .field("config", &self.config)
            .field("fd_floor", &self.fd_floor)
            .field("render_files", &self.render_files.len())
            .field("gpu_map", &self.gpu_map)
            .field("translations", &self.translations.len())
            .finish()
    }
}

impl<D: Driver + Clone> Restorer<D> {
    /// A restorer issuing its system calls through `driver`.
    pub fn new(driver: D, config: RestoreConfig) -> Self {
        Restorer {
            driver,
            config,
            fd_floor: None,
            render_files: BTreeMap::new(),
            render_minors: BTreeMap::new(),
            drm_bos_done: BTreeSet::new(),
            dmabufs: BTreeMap::new(),
            private_table: None,
            gpu_map: BTreeMap::new(),
            render_only: BTreeMap::new(),
            task_has_kfd: None,
            translations: VmaTranslations::new(),
            restored: Vec::new(),
            hand_off: None,
            deferred: BTreeMap::new(),
        }
    }

    /// Parallel restore: BO contents of KFD files restored from now on are
    /// sent to CRIU's main process at `socket` instead of being copied in
    /// this task.
    pub fn hand_contents_to(&mut self, socket: crate::parallel::SocketName) {
        self.hand_off = Some(socket);
    }

    /// The mmap-offset translations recorded so far.
    pub fn translations(&self) -> &VmaTranslations {
        &self.translations
    }

    /// The KFD files restored so far.
    pub fn restored(&self) -> &[KfdRestore] {
        &self.restored
    }

    /// `RESTORE_EXT_FILE(id)`. `task` names the restored task and carries
    /// CRIU's `find_unused_fd_pid` (a pid in, a free fd number above all
    /// that task's fds out); `sharing` is what buffers shared between tasks
    /// go through.
    pub fn restore_file<S: ImageStore + Sync>(
        &mut self,
        store: &S,
        id: u32,
        task: &TaskIdentity<'_>,
        sharing: &Sharing<'_>,
    ) -> Result<Restored, Error> {
        let find_unused_fd = task.find_unused_fd;
        let limits = ReadLimits::default();
        match self.deferred.remove(&id) {
            Some(Deferred::RenderNode(msg)) => {
                return self.render_node_or_wait(store, id, *msg, task, sharing)
            }
            Some(Deferred::Dmabuf(msg)) => return self.dmabuf_or_wait(id, msg, sharing),
            None => {}
        }
        if let Some(msg) = store
            .read_message::<CriuKfd>(&ImageName::Kfd { id }, limits)
            .map_err(Error::image("reading the KFD image"))?
        {
            return self
                .restore_kfd(store, id, msg, find_unused_fd, sharing)
                .map(Restored::File);
        }
        if let Some(msg) = store
            .read_message::<CriuRenderNode>(&ImageName::RenderNode { id }, limits)
            .map_err(Error::image("reading the render-node image"))?
        {
            return self.render_node_or_wait(store, id, msg, task, sharing);
        }
        if let Some(msg) = store
            .read_message::<CriuDmabufNode>(&ImageName::Dmabuf { id }, limits)
            .map_err(Error::image("reading the dma-buf image"))?
        {
            return self.dmabuf_or_wait(id, msg, sharing);
        }
        Ok(Restored::NotOurs)
    }

    /// [`Self::restore_render_node`], keeping the image for the retry when
    /// the file has to wait.
    fn render_node_or_wait<S: ImageStore + Sync>(
        &mut self,
        store: &S,
        id: u32,
        msg: CriuRenderNode,
        task: &TaskIdentity<'_>,
        sharing: &Sharing<'_>,
    ) -> Result<Restored, Error> {
        let result = self.restore_render_node(store, id, msg.clone(), task, sharing);
        if matches!(result, Ok(Restored::WaitForKfd)) {
            self.deferred
                .insert(id, Deferred::RenderNode(Box::new(msg)));
        }
        result
    }

    /// [`Self::restore_dmabuf`], keeping the image for the retry when the
    /// file has to wait.
    fn dmabuf_or_wait(
        &mut self,
        id: u32,
        msg: CriuDmabufNode,
        sharing: &Sharing<'_>,
    ) -> Result<Restored, Error> {
        let result = self.restore_dmabuf(id, &msg, sharing);
        if matches!(result, Ok(Restored::WaitForKfd)) {
            self.deferred.insert(id, Deferred::Dmabuf(msg));
        }
        result
    }

    fn restore_kfd<S: ImageStore + Sync>(
        &mut self,
        store: &S,
        id: u32,
        msg: CriuKfd,
        find_unused_fd: &dyn Fn(u32) -> Option<i32>,
        sharing: &Sharing<'_>,
    ) -> Result<OwnedFd, Error> {
        let image = ValidatedKfd::new(id, msg).map_err(Error::image("validating the KFD image"))?;
        // Pages files that cannot hold what the image says (missing, cut,
        // too long, a lying header) are refused here, before any kernel
        // state exists; contents that fail their checksum are found while
        // they are copied back, before the task ever runs.
        for (name, layout) in image.pages_files() {
            store
                .check_pages(&name, &layout)
                .map_err(Error::image("checking a pages file before restore"))?;
        }
        let msg = image.message();
        let kfd = Kfd::open(self.driver.clone()).map_err(Error::kfd("opening /dev/kfd"))?;
        let version = kfd
            .version()
            .map_err(Error::kfd("reading the KFD interface version"))?;
        if !version.supports_criu() {
            return Err(Error::KfdTooOld {
                major: version.major,
                minor: version.minor,
            });
        }
        if self.fd_floor.is_none() {
            self.fd_floor = find_unused_fd(msg.pid);
            log::debug!(
                "render nodes go at fd {:?} or above (pid {})",
                self.fd_floor,
                msg.pid
            );
        }

        let checkpointed = checkpointed_topology(&msg.device_entries);
        let local = local_topology(&self.config.topology_root, &self.driver)?;
        let mapping = map_topologies(&checkpointed, &local, &self.config.options.checks)
            .map_err(|e| Error::Incompatible {
                reasons: e.to_string(),
            })?
            .into_mapping()
            .map_err(|reasons| Error::Incompatible {
                reasons: reasons
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            })?;

        let mut devices = Vec::new();
        let mut gpus = Vec::new();
        for entry in image.gpus() {
            let local_id = *mapping.gpu_map.get(&entry.gpu_id).ok_or_else(|| {
                Error::Inconsistent(format!(
                    "the GPU mapping has no local GPU for checkpointed GPU {:#x}",
                    entry.gpu_id
                ))
            })?;
            let node = local.gpus().find(|n| n.gpu_id == local_id).ok_or_else(|| {
                Error::Inconsistent(format!(
                    "local GPU {local_id:#x} vanished from the topology"
                ))
            })?;
            let minor = node.props.drm_render_minor;
            let file = self.render_file(local_id, minor)?;
            log::info!(
                "file {id}: GPU {:#x} restored on local GPU {local_id:#x} (renderD{minor})",
                entry.gpu_id
            );
            devices.push(kfd_criu_device_bucket {
                user_gpu_id: entry.gpu_id,
                actual_gpu_id: local_id,
                drm_fd: file.as_raw_fd() as u32,
                ..Default::default()
            });
            gpus.push(transfer::GpuTarget {
                user_gpu_id: entry.gpu_id,
                local_gpu_id: local_id,
                render_minor: minor,
            });
        }
        let buckets: Vec<kfd_criu_bo_bucket> = msg
            .bo_entries
            .iter()
            .map(|bo| kfd_criu_bo_bucket {
                addr: bo.addr,
                size: bo.size,
                offset: bo.offset,
                gpu_id: bo.gpu_id,
                alloc_flags: bo.alloc_flags,
                dmabuf_fd: KFD_INVALID_FD,
                ..Default::default()
            })
            .collect();
        let restored = kfd
            .restore(&devices, &buckets, &msg.priv_data, msg.num_of_objects)
            .map_err(Error::kfd("re-creating the process (CRIU_OP RESTORE)"))?;
        if restored.len() != buckets.len() {
            return Err(Error::Inconsistent(format!(
                "CRIU_OP RESTORE returned {} BOs for {} in the image",
                restored.len(),
                buckets.len()
            )));
        }

        // With parallel restore CRIU's main process copies the contents
        // while this task carries on ([`crate::parallel`]).
        let content_bytes = match &self.hand_off {
            Some(socket) => crate::parallel::hand_off(socket, &image, &gpus, &restored)?,
            None => transfer::restore_contents(
                &self.driver,
                store,
                &image,
                &gpus,
                &restored,
                &self.config.options,
            )?,
        };

        for (entry, bo) in msg.bo_entries.iter().zip(&restored) {
            let mem = entry.alloc_flags & flags::KFD_MEM_TYPE_MASK;
            if mem & !flags::KFD_USERPTR == 0 {
                continue;
            }
            let local_id = mapping.gpu_map.get(&entry.gpu_id).copied();
            self.translations.push(Translation {
                addr: entry.addr,
                old_offset: entry.offset,
                new_offset: bo.bucket.restored_offset,
                file: local_id.and_then(|g| self.render_files.get(&g).cloned()),
            });
        }
        self.recreate_hsakmt_shm(msg.shared_mem_size, msg.shared_mem_magic)?;

        // Dma-buf files of the task re-open their BO through the dma-buf
        // RESTORE returned; keep those (above the task's fds) while the
        // images hold dma-buf files at all.
        // Other tasks find the buffers through the shared table (which the
        // host only makes when the images share buffers); without one, this
        // task's own dma-buf and render files find them here.
        let bos = restored.len();
        let keep_local = sharing.table.is_none() && uses_shared_buffers(store);
        for (entry, bo) in msg.bo_entries.iter().zip(restored) {
            let (Some(dmabuf), true) = (bo.dmabuf, entry.handle != flags::NO_HANDLE) else {
                continue;
            };
            if let Some(table) = sharing.table {
                publish(table, sharing, entry.handle, dmabuf.as_fd())?;
            }
            if keep_local {
                let kept = match self.fd_floor {
                    Some(floor) => crate::sys::dup_at_least(dmabuf.as_fd(), floor)
                        .map_err(Error::io(format!("moving a dma-buf above fd {floor}")))?,
                    None => dmabuf,
                };
                self.dmabufs.insert(entry.handle, kept);
            }
        }

        self.gpu_map
            .extend(mapping.gpu_map.iter().map(|(k, v)| (*k, *v)));
        self.restored.push(KfdRestore {
            id,
            gpu_map: mapping.gpu_map.clone(),
            bos,
            content_bytes,
        });
        Ok(kfd.into_fd())
    }

    /// A dma-buf file: a `dup` of the dma-buf RESTORE returned for one of
    /// this task's BOs, or a new fd of a buffer another file or task
    /// published; a retry while nobody did yet.
    fn restore_dmabuf(
        &mut self,
        id: u32,
        msg: &CriuDmabufNode,
        sharing: &Sharing<'_>,
    ) -> Result<Restored, Error> {
        match self.shared_dmabuf(msg.gem_handle, sharing)? {
            Some(dmabuf) => Ok(Restored::File(dmabuf)),
            None => {
                log::debug!(
                    "dma-buf file {id} (buffer {}) waits for the file that re-creates its buffer",
                    msg.gem_handle
                );
                Ok(Restored::WaitForKfd)
            }
        }
    }

    /// A new fd of the dma-buf of buffer `key`: from this task's KFD BOs,
    /// else from the shared table; `None` while nobody published it.
    fn shared_dmabuf(&mut self, key: u32, sharing: &Sharing<'_>) -> Result<Option<OwnedFd>, Error> {
        if let Some(dmabuf) = self.dmabufs.get(&key) {
            return dmabuf.try_clone().map(Some).map_err(Error::io(format!(
                "duplicating the dma-buf of buffer {key}"
            )));
        }
        let Some(store_id) = self.table(sharing).lookup(key) else {
            return Ok(None);
        };
        (sharing.fdstore_get)(store_id)
            .map(Some)
            .map_err(Error::io(format!(
                "fetching the dma-buf of buffer {key} from CRIU's fd store (id {store_id})"
            )))
    }

    /// The shared table, or this task's own where the host made none.
    fn table<'t>(&'t mut self, sharing: &Sharing<'t>) -> &'t HandleTable {
        match sharing.table {
            Some(table) => table,
            None => self
                .private_table
                .get_or_insert_with(|| HandleTable::private(crate::handles::UNSIZED_CAPACITY)),
        }
    }

    /// Whether the restored task has a KFD image in the set: it restored
    /// one already, or the node's image lists its pid among the KFD
    /// processes using the GPU (`kfd_pids`), or (images without that list)
    /// an image of the set records its pid. A render-only image (`gpu_id`
    /// 0) answers no without looking: a process with `/dev/kfd` has every
    /// visible GPU among its KFD devices, so its KFD file would have named
    /// the GPU. When the set cannot be listed (a stream) and the image has
    /// no list, or the task's pid is unknown, the answer is yes: the node
    /// waits for the task's KFD file, as before render-only support.
    fn has_kfd_image<S: ImageStore>(
        &mut self,
        store: &S,
        msg: &CriuRenderNode,
        task: &TaskIdentity<'_>,
    ) -> Result<bool, Error> {
        if !self.restored.is_empty() {
            return Ok(true);
        }
        if msg.is_render_only() {
            return Ok(false);
        }
        // The image names the KFD processes that use the GPU: the task is
        // one of them or has no KFD file for this node (no listing needed,
        // so a stream can tell too).
        if let (false, Some(pid)) = (msg.kfd_pids.is_empty(), task.pid) {
            return Ok(msg.kfd_pids.contains(&pid));
        }
        if let Some(known) = self.task_has_kfd {
            return Ok(known);
        }
        let Some(pid) = task.pid else {
            log::warn!("the restored task's pid is unknown: its render nodes wait for a KFD file");
            return Ok(true);
        };
        let Ok(names) = store.list() else {
            log::debug!("the image set cannot be listed: render nodes wait for a KFD file");
            return Ok(true);
        };
        let mut found = false;
        for name in names.iter().filter(|n| matches!(n, ImageName::Kfd { .. })) {
            let kfd = store
                .read_message::<CriuKfd>(name, ReadLimits::default())
                .map_err(Error::image("reading a KFD image to find the task's"))?;
            if kfd.is_some_and(|k| k.pid == pid) {
                found = true;
                break;
            }
        }
        self.task_has_kfd = Some(found);
        Ok(found)
    }

    /// The local GPU standing in for the GPU of a render-only node: the one
    /// already chosen for its checkpointed render minor in this task, else
    /// a local GPU that passes the property checks
    /// ([`device_mismatches`] under the `KFD_*_CHECK` options) and has at
    /// least as many valid io links, not yet taken by another checkpointed
    /// GPU of this task; the same render minor is preferred, then the same
    /// gpu_id, then node order. Returns `(local gpu_id, local minor)`.
    fn render_only_gpu(&mut self, id: u32, msg: &CriuRenderNode) -> Result<(u32, u32), Error> {
        let minor = msg.drm_render_minor;
        let local = local_topology(&self.config.topology_root, &self.driver)?;
        if let Some(&gpu) = self.render_only.get(&minor) {
            if let Some(node) = local.gpus().find(|n| n.gpu_id == gpu) {
                return Ok((gpu, node.props.drm_render_minor));
            }
        }
        let device = msg.device.as_ref().ok_or_else(|| Error::Incompatible {
            reasons: format!(
                "render-node file {id} (renderD{minor}) belongs to a task without a KFD image \
                 and records no device entry (an image of the C plugin), so no local GPU can \
                 be chosen for it"
            ),
        })?;
        let taken: BTreeSet<u32> = self.render_only.values().copied().collect();
        let candidates = render_only_candidates(device, &local, &self.config.options.checks);
        let compatible: Vec<_> = candidates
            .as_ref()
            .map(|ids| {
                local
                    .gpus()
                    .filter(|n| ids.contains(&n.gpu_id))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let free: Vec<_> = compatible
            .iter()
            .filter(|n| !taken.contains(&n.gpu_id))
            .collect();
        let chosen = free
            .iter()
            .find(|n| n.props.drm_render_minor == minor)
            .or_else(|| free.iter().find(|n| n.gpu_id == device.gpu_id))
            .or_else(|| free.first());
        let Some(node) = chosen else {
            let reasons = if let Err(closest) = &candidates {
                let why = closest
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                format!(
                    "render-node file {id}: no local GPU can stand in for renderD{minor} \
                     (GPU {:#x}, device {:#x}){}",
                    device.gpu_id,
                    device.device_id,
                    if why.is_empty() {
                        " (no local GPU)".to_owned()
                    } else {
                        format!(": {why}")
                    }
                )
            } else {
                format!(
                    "render-node file {id}: every local GPU compatible with renderD{minor} \
                     ({}) already stands in for another checkpointed GPU of this task",
                    compatible
                        .iter()
                        .map(|n| format!("{:#x}", n.gpu_id))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(Error::Incompatible { reasons });
        };
        log::info!(
            "render-node file {id}: renderD{minor} (GPU {:#x}, no KFD process) restored on \
             local GPU {:#x} (renderD{})",
            device.gpu_id,
            node.gpu_id,
            node.props.drm_render_minor
        );
        self.render_only.insert(minor, node.gpu_id);
        Ok((node.gpu_id, node.props.drm_render_minor))
    }

    fn restore_render_node<S: ImageStore>(
        &mut self,
        store: &S,
        id: u32,
        msg: CriuRenderNode,
        task: &TaskIdentity<'_>,
        sharing: &Sharing<'_>,
    ) -> Result<Restored, Error> {
        let image = ValidatedRenderNode::new(id, msg)
            .map_err(Error::image("validating the render-node image"))?;
        let msg = image.message();
        let mapped = self.gpu_map.get(&msg.gpu_id).copied();
        let (local_id, file, local_minor) = match mapped {
            Some(local_id) => {
                let (Some(file), Some(&local_minor)) = (
                    self.render_files.get(&local_id).cloned(),
                    self.render_minors.get(&local_id),
                ) else {
                    return Err(Error::Inconsistent(format!(
                        "no render file for local GPU {local_id:#x}"
                    )));
                };
                (local_id, file, local_minor)
            }
            None if self.has_kfd_image(store, msg, task)? => {
                if !self.restored.is_empty() {
                    return Err(Error::Inconsistent(format!(
                        "render-node file {id}: the task's KFD file is restored but has no \
                         GPU {:#x} (renderD{})",
                        msg.gpu_id, msg.drm_render_minor
                    )));
                }
                log::debug!(
                    "render-node file {id} (GPU {:#x}) waits for the task's KFD file",
                    msg.gpu_id
                );
                return Ok(Restored::WaitForKfd);
            }
            None => {
                // No KFD process: nothing asked CRIU for the fd floor yet.
                if self.fd_floor.is_none() {
                    match task.pid {
                        Some(pid) => {
                            self.fd_floor = (task.find_unused_fd)(pid);
                            log::debug!(
                                "render nodes go at fd {:?} or above (pid {pid})",
                                self.fd_floor
                            );
                        }
                        None => log::warn!(
                            "render-node file {id}: the task's pid is unknown, so its render \
                             file is not moved above the task's fds"
                        ),
                    }
                }
                let (local_id, local_minor) = self.render_only_gpu(id, msg)?;
                let file = self.render_file(local_id, local_minor)?;
                (local_id, file, local_minor)
            }
        };
        // Names the GPU in transfer errors: the user id, else the local one.
        let named_gpu = if msg.gpu_id != 0 && mapped.is_some() {
            msg.gpu_id
        } else {
            local_id
        };
        // Every render node of one GPU in the task becomes this one DRM file
        // (also KFD's VM): its BOs are re-created there under their handles.
        let node = RenderNode::from_fd(self.driver.clone(), file.as_fd());
        let mut waiting = 0usize;
        // Without a shared table this task's own files find the buffers
        // here (hosts without RESTORE_INIT).
        let keep_local = sharing.table.is_none() && uses_shared_buffers(store);
        for (index, bo) in msg.bo_entries.iter().enumerate() {
            // Two files of one GPU listing the same handle collapse into one
            // BO, as with the C plugin; a retry skips BOs already re-created.
            if self
                .drm_bos_done
                .contains(&(bo.handle, msg.drm_render_minor))
            {
                continue;
            }
            let handle = GemHandle(bo.handle);
            let key = bo.buffer_key();
            let (created, dmabuf) = if bo.is_import != 0 {
                let Some(dmabuf) = self.shared_dmabuf(key, sharing)? else {
                    log::debug!(
                        "render-node file {id}: imported BO {} waits for buffer {key}",
                        bo.handle
                    );
                    waiting += 1;
                    continue;
                };
                let imported = node
                    .prime_fd_to_handle(dmabuf.as_fd())
                    .map_err(Error::kfd("importing a shared buffer (PRIME_FD_TO_HANDLE)"))?;
                (imported, Some(dmabuf))
            } else {
                let created = node
                    .gem_create(&GemCreate {
                        size: bo.size,
                        // GEM_LIST_HANDLES reports the alignment in GPU
                        // pages; GEM_CREATE takes bytes.
                        alignment: bo.alignment.saturating_mul(GPU_PAGE),
                        domains: u64::from(bo.preferred_domains),
                        flags: bo.alloc_flags,
                    })
                    .map_err(Error::kfd("re-creating a DRM BO (AMDGPU_GEM_CREATE)"))?;
                (created, None)
            };
            if created != handle {
                node.gem_change_handle(created, handle).map_err(Error::kfd(
                    "giving a DRM BO its checkpointed handle (GEM_CHANGE_HANDLE; needs a kernel with it)",
                ))?;
            }
            self.drm_bos_done.insert((bo.handle, msg.drm_render_minor));
            // An import of a KFD BO in the DRM file that is KFD's VM lists
            // KFD's own mapping of it, which RESTORE already re-created:
            // only what is missing is mapped.
            let present = if bo.is_import != 0 {
                node.gem_mapping_info(handle).map_err(Error::kfd(
                    "reading an imported BO's GPU mappings (AMDGPU_GEM_OP)",
                ))?
            } else {
                Vec::new()
            };
            for vm in &bo.vm_entries {
                if present
                    .iter()
                    .any(|p| p.addr == vm.addr && p.size == vm.size)
                {
                    continue;
                }
                node.gem_va_map(handle, vm.addr, vm.offset, vm.size, gem_va_flags(vm.flags))
                    .map_err(Error::kfd("mapping a DRM BO (AMDGPU_GEM_VA)"))?;
            }
            // Offset 0: the BO had no CPU mapping at dump (no CPU access).
            if bo.offset != 0 {
                let new_offset = node.gem_mmap_offset(handle).map_err(Error::kfd(
                    "reading a DRM BO's mmap offset (AMDGPU_GEM_MMAP)",
                ))?;
                self.translations.push(Translation {
                    addr: bo.addr,
                    old_offset: bo.offset,
                    new_offset,
                    file: Some(file.clone()),
                });
            }
            let needs_export = bo.restore_needs_contents()
                || (bo.is_import == 0
                    && bo.share_handle.is_some()
                    && (sharing.table.is_some() || keep_local));
            let dmabuf = match dmabuf {
                Some(dmabuf) => Some(dmabuf),
                None if needs_export => Some(
                    node.prime_handle_to_fd(handle, DRM_RDWR | DRM_CLOEXEC)
                        .map_err(Error::kfd("exporting a DRM BO (PRIME_HANDLE_TO_FD)"))?,
                ),
                None => None,
            };
            // Importers in other tasks find this buffer through the table.
            if let (0, Some(_), Some(table), Some(dmabuf)) = (
                bo.is_import,
                bo.share_handle,
                sharing.table,
                dmabuf.as_ref(),
            ) {
                publish(table, sharing, key, dmabuf.as_fd())?;
            }
            if let (0, Some(_), true, Some(dmabuf)) =
                (bo.is_import, bo.share_handle, keep_local, dmabuf.as_ref())
            {
                if !self.dmabufs.contains_key(&key) {
                    let kept = match self.fd_floor {
                        Some(floor) => crate::sys::dup_at_least(dmabuf.as_fd(), floor),
                        None => dmabuf.try_clone(),
                    }
                    .map_err(Error::io(format!("keeping the dma-buf of buffer {key}")))?;
                    self.dmabufs.insert(key, kept);
                }
            }
            if bo.restore_needs_contents() {
                let (name, layout) = image.drm_pages(index).ok_or_else(|| {
                    Error::Inconsistent(format!(
                        "render-node file {id}: BO {index} has no pages file name"
                    ))
                })?;
                let dmabuf = dmabuf.as_ref().ok_or_else(|| {
                    Error::Inconsistent(format!("render-node file {id}: BO {index} not exported"))
                })?;
                transfer::restore_drm_bo(
                    &self.driver,
                    store,
                    &name,
                    layout,
                    transfer::DrmDevice {
                        gpu_id: named_gpu,
                        render_minor: local_minor,
                    },
                    dmabuf.as_fd(),
                    &self.config.options,
                )?;
            }
        }
        if waiting > 0 {
            log::info!(
                "render-node file {id}: {waiting} imported BOs wait for their exporters; retrying"
            );
            return Ok(Restored::WaitForKfd);
        }
        file.try_clone()
            .map(Restored::File)
            .map_err(Error::io(format!(
                "duplicating the render file of GPU {local_id:#x}"
            )))
    }

    /// The task's render file for a local GPU, opened on first use at
    /// `fd_floor` or above.
    fn render_file(&mut self, local_id: u32, minor: u32) -> Result<Arc<OwnedFd>, Error> {
        if let Some(file) = self.render_files.get(&local_id) {
            return Ok(file.clone());
        }
        let path = render_node_path(minor);
        let opened = self
            .driver
            .open(&path, libc::O_RDWR | libc::O_CLOEXEC)
            .map_err(|e| {
                let hint = if e.raw_os_error() == Some(libc::EACCES) {
                    " (is the user in the video/render group?)"
                } else {
                    ""
                };
                Error::io(format!("opening {}{hint}", path.display()))(e)
            })?;
        let file = match self.fd_floor {
            Some(floor) if opened.as_raw_fd() < floor => {
                crate::sys::dup_at_least(opened.as_fd(), floor).map_err(Error::io(format!(
                    "moving {} above fd {floor}",
                    path.display()
                )))?
            }
            _ => opened,
        };
        let file = Arc::new(file);
        self.render_files.insert(local_id, file.clone());
        self.render_minors.insert(local_id, minor);
        Ok(file)
    }

    fn recreate_hsakmt_shm(&self, size: u64, magic: u32) -> Result<(), Error> {
        if size == 0 {
            return Ok(());
        }
        let path = self.config.shm_dir.join(HSAKMT_SHM);
        if !path.exists() {
            log::warn!(
                "{} is missing and is recreated; GPU performance counters may be lost",
                path.display()
            );
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o666)
            .open(&path)
            .map_err(Error::io(format!("creating {}", path.display())))?;
        file.set_len(size)
            .map_err(Error::io(format!("sizing {}", path.display())))?;
        file.write_all_at(&magic.to_ne_bytes(), 0)
            .map_err(Error::io(format!(
                "writing the magic of {}",
                path.display()
            )))?;
        if self.config.shm_dir == Path::new("/dev/shm") {
            crate::sys::ensure_named_semaphore(HSAKMT_SEMAPHORE)
                .map_err(Error::io("creating hsakmt's semaphore"))?;
        }
        Ok(())
    }
}

/// The local GPUs (gpu_ids, node order) that can stand in for the GPU a
/// render-only node recorded as `device`, or, when none can, every mismatch
/// of the closest local GPU (empty when the machine has no GPU). A local GPU
/// qualifies when it passes the property rules of the `KFD_*_CHECK` options
/// ([`device_mismatches`]) and has, as for KFD processes, at least as many
/// valid io links (the entry stores only valid ones). Hive and CPU placement
/// are not asked of a process without KFD queues. What restore chooses from
/// and what `amdgpu-criu check` reports.
pub fn render_only_candidates(
    device: &amdgpu_image::KfdDeviceEntry,
    local: &DeviceTopology,
    options: &CheckOptions,
) -> Result<Vec<u32>, Vec<Reason>> {
    let checkpointed = device_node(device);
    let mut compatible = Vec::new();
    let mut closest: Option<Vec<Reason>> = None;
    for node in local.gpus() {
        let reasons = render_only_mismatches(&checkpointed, node, local, options);
        if reasons.is_empty() {
            compatible.push(node.gpu_id);
        } else if closest.as_ref().is_none_or(|c| reasons.len() < c.len()) {
            closest = Some(reasons);
        }
    }
    if compatible.is_empty() {
        Err(closest.unwrap_or_default())
    } else {
        Ok(compatible)
    }
}

/// Why local GPU `dest` of `local` cannot stand in for the checkpointed GPU
/// of a render-only node (see [`render_only_candidates`]).
fn render_only_mismatches(
    checkpointed: &amdgpu_topology::devices::DeviceNode,
    dest: &amdgpu_topology::devices::DeviceNode,
    local: &DeviceTopology,
    options: &CheckOptions,
) -> Vec<Reason> {
    let mut reasons = device_mismatches(checkpointed, dest, options);
    let want = checkpointed.iolinks.len();
    let have = dest
        .iolinks
        .iter()
        .filter(|l| local.link_is_valid(l))
        .count();
    if want > have {
        reasons.push(Reason {
            gpu: Some(checkpointed.gpu_id),
            check: rule::VALID_IO_LINKS,
            checkpointed: want as u64,
            local: have as u64,
            local_gpu: Some(dest.gpu_id),
        });
    }
    reasons
}

/// Whether a file of the image set uses another file's buffer: a dma-buf
/// file, or a render node with an imported BO (true when the store cannot
/// list, as a stream cannot). Without it no dma-buf is kept open in the
/// task (it would stay open in the restored application).
fn uses_shared_buffers<S: ImageStore>(store: &S) -> bool {
    let Ok(names) = store.list() else {
        return true;
    };
    names.iter().any(|name| match name {
        ImageName::Dmabuf { .. } => true,
        ImageName::RenderNode { .. } => store
            .read_message::<CriuRenderNode>(name, ReadLimits::default())
            .map_or(true, |msg| {
                msg.is_some_and(|m| m.bo_entries.iter().any(|b| b.is_import != 0))
            }),
        _ => false,
    })
}

/// Parks `dmabuf` in CRIU's fd store and publishes it as buffer `key`,
/// unless the key is published already (another task re-created the same
/// buffer first; the first one is kept).
fn publish(
    table: &HandleTable,
    sharing: &Sharing<'_>,
    key: u32,
    dmabuf: BorrowedFd<'_>,
) -> Result<(), Error> {
    if table.lookup(key).is_some() {
        return Ok(());
    }
    let store_id = (sharing.fdstore_add)(dmabuf).map_err(Error::io(format!(
        "parking the dma-buf of buffer {key} in CRIU's fd store"
    )))?;
    table
        .publish(key, store_id)
        .map_err(|e| Error::Inconsistent(format!("publishing buffer {key}: {e}")))?;
    Ok(())
}

/// What `RESTORE_EXT_FILE` restored.
#[derive(Debug)]
pub enum Restored {
    /// No amdgpu image for this id: not ours.
    NotOurs,
    /// The new file; CRIU installs it at the saved fd number.
    File(OwnedFd),
    /// Ask again later: a render node whose GPU only the task's KFD file
    /// maps, which was not restored yet (its fd number is higher), or a file
    /// that imports a buffer whose exporter (in this or another task) has
    /// not run yet.
    WaitForKfd,
}

/// What `RESUME_DEVICES_LATE(pid)` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// The process's queues run again.
    Resumed,
    /// No KFD state for this pid (or no KFD here): not ours.
    NotOurs,
}

/// `RESUME_DEVICES_LATE(pid)` in CRIU's main process: `CRIU_OP RESUME` on a
/// freshly opened `/dev/kfd`.
pub fn resume<D: Driver>(driver: D, pid: u32) -> Result<Resume, Error> {
    let kfd = match Kfd::open(driver) {
        Ok(kfd) => kfd,
        Err(e) if e.errno() == libc::ENOENT => return Ok(Resume::NotOurs),
        Err(e) => {
            return Err(Error::Kfd {
                step: "opening /dev/kfd to resume",
                source: e,
            })
        }
    };
    match kfd.resume(pid) {
        Ok(()) => Ok(Resume::Resumed),
        Err(e) if e.errno() == libc::ESRCH => {
            log::debug!("pid {pid} has no KFD state");
            Ok(Resume::NotOurs)
        }
        Err(e) => Err(Error::Kfd {
            step: "resuming the process (CRIU_OP RESUME)",
            source: e,
        }),
    }
}

/// The buffers of an image set that its files may share (KFD BOs with a
/// handle, DRM BOs): the capacity of the [`HandleTable`] the restored tasks
/// share. `None` when no file of the set can use another's buffer (no
/// dma-buf file, no render node); [`crate::handles::UNSIZED_CAPACITY`] for
/// a store that cannot be listed (a stream).
pub fn shared_buffer_count(store: &impl ImageStore) -> Result<Option<usize>, Error> {
    let Ok(names) = store.list() else {
        return Ok(Some(crate::handles::UNSIZED_CAPACITY));
    };
    if !names
        .iter()
        .any(|n| matches!(n, ImageName::Dmabuf { .. } | ImageName::RenderNode { .. }))
    {
        return Ok(None);
    }
    let limits = ReadLimits::default();
    let mut buffers = 0usize;
    for name in &names {
        match name {
            ImageName::Kfd { .. } => {
                if let Some(msg) = store
                    .read_message::<CriuKfd>(name, limits)
                    .map_err(Error::image("reading a KFD image to size the handle table"))?
                {
                    buffers += msg
                        .bo_entries
                        .iter()
                        .filter(|b| b.handle != flags::NO_HANDLE)
                        .count();
                }
            }
            ImageName::RenderNode { .. } => {
                if let Some(msg) =
                    store
                        .read_message::<CriuRenderNode>(name, limits)
                        .map_err(Error::image(
                            "reading a render-node image to size the handle table",
                        ))?
                {
                    buffers += msg.bo_entries.len();
                }
            }
            _ => {}
        }
    }
    Ok(Some(buffers.max(1)))
}
