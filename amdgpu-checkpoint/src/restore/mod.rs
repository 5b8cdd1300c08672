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
//! ([`Restored::WaitForBuffer`]); BOs already re-created are not re-created on
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
//!
//! Inside: `kfd` restores a KFD image, `render` render-node files (also of
//! render-only processes), `sharing` dma-buf files and the buffers files
//! and tasks share, `wait` waits for a buffer another task re-creates and
//! wakes the tasks waiting, `resume` restarts the queues; this module holds the
//! [`Restorer`] that dispatches each file to them. Everything public is
//! re-exported here.

mod kfd;
mod render;
mod resume;
mod sharing;
mod wait;

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use ::kfd::Driver;
use amdgpu_image::{CriuDmabufNode, CriuKfd, CriuRenderNode, ImageName, ImageStore, ReadLimits};

use crate::error::Error;
use crate::handles::HandleTable;
use crate::options::Options;
use crate::vma::VmaTranslations;

pub use self::kfd::HSAKMT_SEMAPHORE;
pub use self::render::{gem_va_flags, render_only_candidates};
pub use self::resume::{resume, Resume};
pub use self::sharing::{shared_buffer_count, Sharing};
pub use self::wait::BufferWait;

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

    /// One look at file `id` ([`Restorer::restore_file`] without waiting
    /// or waking).
    fn restore_once<S: ImageStore + Sync>(
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
        if matches!(result, Ok(Restored::WaitForKfd | Restored::WaitForBuffer)) {
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
        if matches!(result, Ok(Restored::WaitForKfd | Restored::WaitForBuffer)) {
            self.deferred.insert(id, Deferred::Dmabuf(msg));
        }
        result
    }

    /// The task's render file for a local GPU, opened on first use at
    /// `fd_floor` or above.
    fn render_file(
        &mut self,
        local_id: u32,
        minor: u32,
        pci: Option<&str>,
    ) -> Result<Arc<OwnedFd>, Error> {
        if let Some(file) = self.render_files.get(&local_id) {
            return Ok(file.clone());
        }
        let path = crate::render_node::find_render_node(
            &self.driver,
            crate::render_node::RenderTarget {
                gpu_id: local_id,
                minor,
                pci,
            },
        )?;
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
}

/// What `RESTORE_EXT_FILE` restored.
#[derive(Debug)]
pub enum Restored {
    /// No amdgpu image for this id: not ours.
    NotOurs,
    /// The new file; CRIU installs it at the saved fd number.
    File(OwnedFd),
    /// Ask again later: a render node whose GPU only the task's KFD file
    /// maps, which was not restored yet (its fd number is higher).
    WaitForKfd,
    /// Ask again later: a file that imports a buffer whose creator (in this
    /// or another task) has not run yet.
    WaitForBuffer,
}
