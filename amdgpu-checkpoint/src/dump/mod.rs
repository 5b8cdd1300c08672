//! Dump of a process's `/dev/kfd` file (`DUMP_EXT_FILE` in CRIU's dumper)
//! and the late unpause (`DUMP_DEVICES_LATE`).
//!
//! Per KFD file: a version gate on a private `/dev/kfd` (the target's fd may
//! only carry the CRIU op), `PROCESS_INFO` (pauses the process's queues),
//! `CHECKPOINT`, the local topology, the `CriuKfd` message with GPUs named
//! by their user ids, the BO contents per GPU ([`crate::transfer`]), and
//! `amdgpu-kfd-<id>.img`. The paused process is remembered (through a `dup`
//! of its fd) and unpaused by [`Dumper::unpause_all`]; without a
//! `DUMP_DEVICES_LATE` hook in the host it is unpaused right after its
//! image is written.
//!
//! With that hook and an image directory, the BO contents and the image
//! may be left to a thread of their own ([`Dumper::dump_kfd_background`]):
//! the process stays paused until `DUMP_DEVICES_LATE` anyway, so its GPUs
//! copy while CRIU dumps the next process of the tree, and
//! [`Dumper::unpause_all`] waits for every transfer before it unpauses
//! anyone. Each GPU's copy engine serves one transfer at a time
//! ([`transfer::StagingPool::turn`]).
//!
//! Render-node files ([`Dumper::dump_render_node`]) record their DRM BOs and
//! the GPU's device entry; one whose GPU no dumped KFD file names is
//! written at the end of the dump as a render-only image (`gpu_id` 0; on a
//! host without `DUMP_DEVICES_LATE`, whose dump ends with its last file,
//! at once into an image directory, renamed should a KFD file name its GPU
//! later), so
//! processes that use render nodes without `/dev/kfd` can be dumped (the C
//! plugin refuses them).
//!
//! Fixed here compared with the C plugin: any failure after `PROCESS_INFO`
//! unpauses the process before the error is returned; the image write
//! result is checked; pages files are named by the user gpu_id at dump as at
//! restore (C names them by the local id at dump, which breaks
//! re-checkpointing a remapped process); every paused process is unpaused
//! even when one unpause fails.
//!
//! This module never parses sysfs or image bytes itself and never touches
//! CRIU: the caller passes the store and the configuration.
//!
//! Inside: `kfd` pauses a process and prepares its KFD image, `contents`
//! copies its BO contents (now or on a thread of their own) and writes the
//! image, `paused` keeps the paused processes (with their guardians and
//! in-progress marks), `render` dumps render-node files, `dmabuf` dma-buf
//! files, `late` ends the dump (`DUMP_DEVICES_LATE`: every process
//! unpaused), `topology` reads the local topology as the process sees it
//! and `hsakmt` probes hsakmt's shared memory; this module holds the
//! [`Dumper`] that ties them. Everything public is re-exported here.

mod contents;
mod dmabuf;
mod hsakmt;
mod kfd;
mod late;
mod paused;
mod render;
mod topology;

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use ::kfd::Driver;
use amdgpu_image::ImageStore;
use amdgpu_topology::devices::DeviceTopology;

use self::contents::Transfer;
use self::kfd::KfdOwner;
use self::paused::Paused;
use self::render::PendingRender;
use crate::error::Error;
use crate::guardian::GuardianDriver;
use crate::incremental::ChunkPlan;
use crate::options::Options;
use crate::transfer;

pub use self::hsakmt::HSAKMT_SHM;
pub use self::topology::local_topology;

/// Where and how a dump runs.
#[derive(Debug, Clone)]
pub struct DumpConfig {
    /// The KFD topology root (`/sys/class/kfd/kfd/topology` on a host).
    pub topology_root: PathBuf,
    /// Options from the environment.
    pub options: Options,
    /// Unpause each process right after its image is written (hosts without
    /// `DUMP_DEVICES_LATE`).
    pub unpause_early: bool,
    /// The POSIX shared-memory directory (`/dev/shm`).
    pub shm_dir: PathBuf,
    /// Where a [`Guardian`](crate::guardian::Guardian) of each paused process logs (the dump log's
    /// directory); `None` starts no guardian (a dumper that is not a host
    /// process the guardian can watch, or a host without a log directory).
    pub guardian_log_dir: Option<PathBuf>,
    /// How a guardian reaches the machine should it have to recover a
    /// process (the host's kernel by default; a served simulated machine
    /// connects anew).
    pub guardian_driver: GuardianDriver,
}

/// What one KFD dump did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdDump {
    /// CRIU's file id.
    pub id: u32,
    /// The process's pid (in its namespace) as KFD reports it.
    pub pid: u32,
    /// GPUs of the process.
    pub gpus: usize,
    /// BOs of the process.
    pub bos: usize,
    /// Bytes of BO contents dumped.
    pub content_bytes: u64,
    /// Bytes the pages files hold: `content_bytes` less the chunks
    /// referenced from the parent images or from elsewhere in the dump;
    /// `None` while the contents are still being copied
    /// ([`Dumper::dump_kfd_background`]).
    pub stored_bytes: Option<u64>,
    /// Whether the process was already unpaused.
    pub unpaused: bool,
}

/// What one render-node dump did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderDump {
    /// CRIU's file id.
    pub id: u32,
    /// The render minor at checkpoint.
    pub minor: u32,
    /// The user gpu_id of the node's GPU; `Some(0)` for a render-only
    /// image (no dumped KFD process uses the GPU); `None` while the node
    /// waits for a KFD file that may name its GPU.
    pub gpu_id: Option<u32>,
    /// DRM BOs of the node's file.
    pub bos: usize,
}

/// What one dma-buf dump did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmabufDump {
    /// CRIU's file id.
    pub id: u32,
    /// The handle of its BO; `None` while it waits for the KFD file.
    pub handle: Option<u32>,
}

/// The dump side of the plugin in CRIU's dumper process.
pub struct Dumper<D: Driver + Clone> {
    driver: D,
    config: DumpConfig,
    paused: Vec<Paused<D>>,
    /// Local (actual) gpu_id to user gpu_id, from every KFD file dumped.
    user_gpu_ids: BTreeMap<u32, u32>,
    /// Local gpu_id to render minor, from the local topology.
    render_minors: BTreeMap<u32, u32>,
    /// Local gpu_id to the pids (from `PROCESS_INFO`) of the dumped KFD
    /// processes that use it.
    kfd_pids: BTreeMap<u32, BTreeSet<u32>>,
    /// Local gpu_id to the bytes and count of the BOs of the dumped KFD
    /// processes that use it (any of their BOs may be mapped in the GPU's
    /// VM): what a render node's VM may hold besides its own DRM BOs.
    kfd_bos_of_gpu: BTreeMap<u32, (u64, u64)>,
    /// The KFD interface version of this host (read at the first KFD dump).
    kfd_version: Option<::kfd::Version>,
    /// The process of each KFD file dumped, to its CRIU file id.
    kfd_files: BTreeMap<KfdOwner, u32>,
    /// Render nodes dumped before their process's KFD file.
    pending_renders: Vec<PendingRender>,
    /// (st_dev, st_ino) of each dumped BO's dma-buf to its share handle.
    dmabuf_handles: BTreeMap<(u64, u64), u32>,
    /// Share handles some dumped BO re-creates at restore (its KFD entry
    /// carries the handle, or its DRM entry is not an import); every other
    /// holder of the buffer imports it.
    created: BTreeSet<u32>,
    /// Imported DRM BOs: (share handle, file id, GEM handle).
    imported: Vec<(u32, u32, u32)>,
    /// Dma-buf files dumped before the KFD file of their BO.
    pending_dmabufs: Vec<(OwnedFd, u32)>,
    /// The local topology, parsed on first use by a render node.
    topology: Option<DeviceTopology>,
    /// Which chunks this dump writes, made at the first KFD file.
    plan: Option<Arc<ChunkPlan>>,
    /// Staging buffers of one task's copy engines, kept for the next task's,
    /// and the GPUs' turns when transfers run at once.
    staging: Arc<transfer::StagingPool>,
    /// KFD files whose contents are still being copied on their own thread
    /// ([`Dumper::dump_kfd_background`]), finished by
    /// [`Dumper::unpause_all`] before any process is unpaused.
    transfers: Vec<Transfer>,
}

impl<D: Driver + Clone> std::fmt::Debug for Dumper<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dumper")
            .field("config", &self.config)
            .field("paused", &self.paused.len())
            .finish()
    }
}

impl<D: Driver + Clone> Dumper<D> {
    /// A dumper issuing its system calls through `driver`.
    pub fn new(driver: D, config: DumpConfig) -> Self {
        Dumper {
            driver,
            config,
            paused: Vec::new(),
            user_gpu_ids: BTreeMap::new(),
            render_minors: BTreeMap::new(),
            kfd_pids: BTreeMap::new(),
            kfd_bos_of_gpu: BTreeMap::new(),
            kfd_version: None,
            kfd_files: BTreeMap::new(),
            pending_renders: Vec::new(),
            dmabuf_handles: BTreeMap::new(),
            created: BTreeSet::new(),
            imported: Vec::new(),
            pending_dmabufs: Vec::new(),
            topology: None,
            plan: None,
            staging: Arc::new(transfer::StagingPool::new()),
            transfers: Vec::new(),
        }
    }

    /// The chunk plan of this dump (made on first use, from the store's
    /// parent link and `KFD_DEDUP`).
    pub fn chunk_plan<S: ImageStore>(&mut self, store: &S) -> Result<Arc<ChunkPlan>, Error> {
        if let Some(plan) = &self.plan {
            return Ok(Arc::clone(plan));
        }
        let plan = Arc::new(ChunkPlan::for_store(store, self.config.options.dedup())?);
        self.plan = Some(Arc::clone(&plan));
        Ok(plan)
    }

    /// The configuration.
    pub fn config(&self) -> &DumpConfig {
        &self.config
    }

    /// Number of processes paused and waiting for [`Dumper::unpause_all`].
    pub fn paused(&self) -> usize {
        self.paused.len()
    }
}

/// Removes every image of the CRIU file ids in `ids` from `store` (after a
/// failed dump, so no image set that looks complete remains); the number of
/// files removed.
pub fn discard_images(store: &impl ImageStore, ids: &BTreeSet<u32>) -> Result<usize, Error> {
    let names = store
        .list()
        .map_err(Error::image("listing the images of the failed dump"))?;
    let mut removed = 0;
    for name in names.iter().filter(|n| ids.contains(&n.id())) {
        if store
            .discard(name)
            .map_err(Error::image("removing an image of the failed dump"))?
        {
            removed += 1;
        }
    }
    Ok(removed)
}
