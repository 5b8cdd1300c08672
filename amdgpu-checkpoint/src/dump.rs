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

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use amdgpu_image::topology::device_entry;
use amdgpu_image::{
    flags, CriuDmabufNode, CriuKfd, CriuRenderNode, DrmBoEntry, DrmVmEntry, ImageName, ImageStore,
    KfdBoEntry, KfdDeviceEntry, FORMAT_VERSION, PRODUCER,
};
use amdgpu_topology::devices::DeviceTopology;
use kfd::{Driver, GemHandle, Kfd, ProcessInfo};
use kfd_sys::{AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT, DRM_CLOEXEC};

use crate::error::Error;
use crate::guardian::{Guardian, GuardianDriver, Leftovers};
use crate::incremental::ChunkPlan;
use crate::options::Options;
use crate::transfer;

/// The hsakmt (ROCt) shared-memory object, as `/dev/shm` names it.
pub const HSAKMT_SHM: &str = "hsakmt_shared_mem";

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
    /// Where a [`Guardian`] of each paused process logs (the dump log's
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

/// A process as the KFD-file bookkeeping names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum KfdOwner {
    /// Its pid as the dumper's driver (and the host) names processes: the
    /// process holding the file, named before it is paused.
    Holder(u32),
    /// Its pid in its own pid namespace, as `PROCESS_INFO` reports it
    /// (only for files whose holder could not be named).
    Kfd(u32),
}

struct PendingRender {
    fd: OwnedFd,
    minor: u32,
    id: u32,
    /// The image written already, render-only, on a host without
    /// `DUMP_DEVICES_LATE` (whose end cannot fail the dump any more): a KFD
    /// file naming its GPU later renames it instead of writing it anew.
    written: Option<CriuRenderNode>,
}

struct Paused<D: Driver> {
    kfd: Kfd<D>,
    pid: u32,
    id: u32,
    /// Dropped once the process is unpaused (the guardian then exits), or
    /// left watching ([`Guardian::keep_watching`]) when the dumper gives up
    /// on it.
    guardian: Option<Guardian>,
    /// An unfinished file in the images directory while the process is
    /// paused (see `mark_in_progress`); dropped, and so removed,
    /// once it is unpaused.
    _in_progress: Option<amdgpu_image::UnfinishedMark>,
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
    kfd_version: Option<kfd::Version>,
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

/// A KFD file's contents being copied on a thread of their own.
struct Transfer {
    id: u32,
    pid: u32,
    worker: std::thread::JoinHandle<Result<Copied, Error>>,
}

/// Bytes of BO contents a finished transfer moved and stored.
#[derive(Debug, Clone, Copy)]
struct Copied {
    bytes: u64,
    stored: u64,
}

/// A KFD file's image, all but its BO contents: made while the process is
/// paused; [`finish_kfd`] copies the contents and writes the image (on the
/// dumper's thread, or on one of its own).
struct PreparedKfd {
    id: u32,
    /// The message, its BO entries still without checksums and digests.
    msg: CriuKfd,
    gpus: Vec<transfer::GpuTarget>,
    bos: Vec<kfd::CheckpointBo>,
    plan: Arc<ChunkPlan>,
}

impl PreparedKfd {
    /// Bytes of BO contents the transfer moves.
    fn content_bytes(&self) -> u64 {
        transfer::content_bytes(&self.gpus, &self.bos)
    }
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
        let plan = Arc::new(ChunkPlan::for_store(store, self.config.options.dedup)?);
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

    /// Dumps the KFD state behind `fd` (the target's `/dev/kfd`, drained
    /// into the dumper) as CRIU file `id`: its BO contents and image are
    /// written before this returns.
    pub fn dump_kfd<S: ImageStore + Sync>(
        &mut self,
        store: &S,
        fd: BorrowedFd<'_>,
        id: u32,
    ) -> Result<KfdDump, Error> {
        self.dump_kfd_then(store, fd, id, |dumper, prepared| {
            let copied = finish_kfd(
                prepared,
                &dumper.driver,
                store,
                &dumper.config.options,
                &dumper.staging,
            )?;
            Ok(Some(copied.stored))
        })
    }

    /// [`dump_kfd`](Self::dump_kfd) that leaves the copy of the BO contents
    /// and the image write to a thread of their own, finished by
    /// [`unpause_all`](Self::unpause_all) (`DUMP_DEVICES_LATE`, before any
    /// process is unpaused). CRIU dumps a tree's processes one after
    /// another; this way each process's GPUs copy while CRIU goes on with
    /// the next process (on a machine of eight GPUs with one process each,
    /// eight copy engines at once where the C plugin runs one). Each GPU's
    /// copy engine still serves one transfer at a time, so the staging
    /// memory per GPU is what `KFD_MAX_BUFFER_SIZE` allows.
    ///
    /// Only into an image directory (a stream, CRIU's image streamer, is
    /// opened through CRIU from its own thread), and only when the host
    /// unpauses late: otherwise this is [`dump_kfd`](Self::dump_kfd). A
    /// transfer that fails fails `unpause_all`, which still unpauses every
    /// process; a dump abandoned before it ([`abandon`](Self::abandon), or
    /// the dumper dropped) stops the transfers at their next staging buffer.
    pub fn dump_kfd_background<S: ImageStore + Sync>(
        &mut self,
        store: &S,
        fd: BorrowedFd<'_>,
        id: u32,
    ) -> Result<KfdDump, Error>
    where
        D: 'static,
    {
        let dir = match store.as_dir() {
            Some(dir) if !self.config.unpause_early => dir,
            _ => return self.dump_kfd(store, fd, id),
        };
        self.dump_kfd_then(store, fd, id, |dumper, prepared| {
            let own = dir.try_clone().map_err(Error::image(
                "holding the images directory for the transfer",
            ))?;
            let pid = prepared.msg.pid;
            let (driver, options) = (dumper.driver.clone(), dumper.config.options.clone());
            let pool = Arc::clone(&dumper.staging);
            // The thread lives while CRIU dumps other processes: the signals
            // CRIU handles (SIGCHLD of a parasite) must reach CRIU's thread.
            let blocked = crate::sys::block_signals_except(&crate::sys::SYNCHRONOUS_SIGNALS)
                .map_err(Error::io("blocking signals for the transfer thread"))?;
            let worker = std::thread::Builder::new()
                .name(format!("amdgpu-dump-{id}"))
                .spawn(move || finish_kfd(prepared, &driver, &own, &options, &pool))
                .map_err(Error::io("starting the transfer thread"))?;
            drop(blocked);
            dumper.transfers.push(Transfer { id, pid, worker });
            log::debug!("file {id}: pid {pid}: contents copying in the background");
            Ok(None)
        })
    }

    /// The dump of a KFD file around `finish`, which copies the prepared
    /// contents (or starts their copy) and answers the stored bytes when
    /// known: pauses the process, prepares its image, writes the render
    /// nodes and dma-bufs waiting for it, and unpauses it again on any
    /// failure (or right after, with `unpause_early`).
    fn dump_kfd_then<S: ImageStore>(
        &mut self,
        store: &S,
        fd: BorrowedFd<'_>,
        id: u32,
        finish: impl FnOnce(&mut Self, PreparedKfd) -> Result<Option<u64>, Error>,
    ) -> Result<KfdDump, Error> {
        self.kfd_version()?;
        let own = fd
            .try_clone_to_owned()
            .map_err(Error::io("duplicating the KFD fd"))?;
        let target = Kfd::from_fd(self.driver.clone(), own);
        // The file's process, named before it is paused: a second KFD file
        // of a process paused already is refused before PROCESS_INFO nests
        // a second pause (KFD counts pauses, but its UNPAUSE answers EINVAL
        // once unpaused, so the second level would stay for good).
        let holder = crate::identify::traced_holder(&self.driver, fd).map(|h| h.pid);
        if let Some(holder) = holder {
            self.refuse_second_file_of(KfdOwner::Holder(holder), id)?;
        }
        // Before the pause, so that no moment of it goes unmarked.
        let in_progress = mark_in_progress(store, id);
        let info = target
            .process_info()
            .map_err(Error::kfd("pausing the process (CRIU_OP PROCESS_INFO)"))?;
        if holder.is_none() {
            // Nobody could name the file's process before the pause (no
            // traced process found holding it): refused now, later than it
            // should be. Nothing is written; the failed dump's exit unpauses
            // the first file's process, whose queues may stay evicted.
            log::warn!(
                "file {id}: the process holding this /dev/kfd file could not be named before \
                 PROCESS_INFO (pid {} by KFD)",
                info.pid
            );
            self.refuse_second_file_of(KfdOwner::Kfd(info.pid), id)?;
        } else {
            self.kfd_files.entry(KfdOwner::Kfd(info.pid)).or_insert(id);
        }
        log::info!(
            "file {id}: pid {} paused: {} GPUs, {} BOs, {} objects, {} bytes of private data",
            info.pid,
            info.num_devices,
            info.num_bos,
            info.num_objects,
            info.priv_data_size
        );
        let mark = in_progress.as_ref().map(|m| m.file_name().to_owned());
        let guardian = self.arm_guardian(&info, id, store.as_dir(), mark);
        let dumped = self
            .prepare_kfd(&target, &info, store, id)
            .and_then(|prepared| {
                let dump = KfdDump {
                    id,
                    pid: info.pid,
                    gpus: prepared.gpus.len(),
                    bos: prepared.msg.bo_entries.len(),
                    content_bytes: prepared.content_bytes(),
                    stored_bytes: None,
                    unpaused: false,
                };
                self.flush_pending_renders(store)?;
                self.flush_pending_dmabufs(store)?;
                let stored_bytes = finish(self, prepared)?;
                Ok(KfdDump {
                    stored_bytes,
                    ..dump
                })
            });
        let paused = Paused {
            kfd: target,
            pid: info.pid,
            id,
            guardian,
            _in_progress: in_progress,
        };
        match dumped {
            Ok(dump) if !self.config.unpause_early => {
                self.paused.push(paused);
                Ok(dump)
            }
            Ok(dump) => match paused.kfd.unpause() {
                Ok(()) => Ok(KfdDump {
                    unpaused: true,
                    ..dump
                }),
                Err(e) => {
                    // Still paused: kept on record (the dump's end tries
                    // again) with its guardian armed.
                    self.still_paused(paused, &e);
                    Err(Error::Kfd {
                        step: "unpausing the process after its dump",
                        source: e,
                    })
                }
            },
            Err(err) => {
                // A failed dump must never leave the application frozen.
                match paused.kfd.unpause() {
                    Ok(()) => log::info!("file {id}: pid {} unpaused after the failure", info.pid),
                    Err(e) => self.still_paused(paused, &e),
                }
                Err(err)
            }
        }
    }

    /// Keeps a process whose UNPAUSE failed on record, its guardian armed:
    /// [`unpause_all`](Self::unpause_all) (the dump's end) tries again, and
    /// should that fail too the guardian recovers it once the dumper ends.
    fn still_paused(&mut self, paused: Paused<D>, error: &kfd::Error) {
        log::error!(
            "file {}: pid {} stays paused for now ({error}); tried again at the end of the dump",
            paused.id,
            paused.pid
        );
        self.paused.push(paused);
    }

    /// This host's KFD interface version, read once through a private
    /// `/dev/kfd`; an interface without CRIU is an error.
    fn kfd_version(&mut self) -> Result<kfd::Version, Error> {
        if let Some(version) = self.kfd_version {
            return Ok(version);
        }
        let private = Kfd::open(self.driver.clone()).map_err(Error::kfd(
            "opening a private /dev/kfd for the version check",
        ))?;
        let version = private
            .version()
            .map_err(Error::kfd("reading the KFD interface version"))?;
        if !version.supports_criu() {
            return Err(Error::KfdTooOld {
                major: version.major,
                minor: version.minor,
            });
        }
        self.kfd_version = Some(version);
        Ok(version)
    }

    /// Refuses the `/dev/kfd` file `id` of process `pid` when the process's
    /// other KFD file was dumped already and the KFD is 1.19 or later, where
    /// either file may carry a second KFD context
    /// (`AMDKFD_IOC_CREATE_PROCESS`) no CRIU can save (see
    /// [`crate::kfd_version`]); records the file otherwise. `pid` is the
    /// process holding the file as the dumper's driver names processes (the
    /// host's pid). [`Dumper::dump_kfd`] names the holder itself among the
    /// processes the dumper traces, before the pause; a host that knows it
    /// may call this first.
    pub fn refuse_second_kfd_file(&mut self, pid: u32, id: u32) -> Result<(), Error> {
        self.refuse_second_file_of(KfdOwner::Holder(pid), id)
    }

    /// [`refuse_second_kfd_file`](Self::refuse_second_kfd_file) of the
    /// process `owner`.
    fn refuse_second_file_of(&mut self, owner: KfdOwner, id: u32) -> Result<(), Error> {
        let version = self.kfd_version()?;
        let (KfdOwner::Holder(pid) | KfdOwner::Kfd(pid)) = owner;
        match self.kfd_files.get(&owner) {
            Some(&first)
                if first != id && version.minor >= crate::kfd_version::CREATE_PROCESS_MINOR =>
            {
                Err(Error::KfdVersion {
                    reason: format!(
                        "file {id}: pid {pid} holds a second /dev/kfd file (the first is file \
                         {first}); on KFD interface {version} (1.19 or later) it may carry a \
                         second KFD context (AMDKFD_IOC_CREATE_PROCESS), which no CRIU can \
                         checkpoint; the dump is refused and the process left running"
                    ),
                })
            }
            _ => {
                self.kfd_files.entry(owner).or_insert(id);
                Ok(())
            }
        }
    }

    /// Starts the guardian of a process just paused, when configured; a
    /// guardian that cannot start leaves recovery manual, said in the log.
    /// With the images directory `images`, a guardian that recovers the
    /// process also removes the dead dumper's temporary files there but
    /// the unfinished-dump marks (its file's is `mark`).
    fn arm_guardian(
        &self,
        info: &ProcessInfo,
        id: u32,
        images: Option<&amdgpu_image::DirStore>,
        mark: Option<String>,
    ) -> Option<Guardian> {
        let dir = self.config.guardian_log_dir.as_deref()?;
        let Some(target) = crate::guardian::locate_target(&self.driver, info.pid) else {
            log::warn!(
                "file {id}: pid {}: no traced process holds this KFD file, no guardian; \
                 if this dump is killed, run `amdgpu-criu unpause --pid PID` on the process",
                info.pid
            );
            return None;
        };
        let leftovers = images.and_then(|images| match images.dir().try_clone() {
            Ok(handle) => Some(Leftovers {
                dir: handle.into(),
                writer: std::process::id(),
                mark,
            }),
            Err(e) => {
                log::warn!(
                    "file {id}: the guardian gets no handle on the images directory ({e}); \
                     if this dump is killed, its temporary files (.*.part-*) stay there"
                );
                None
            }
        });
        // A pidfd of the paused process itself, through the dumper's
        // driver (which names processes as the guardian's does): should it
        // exit and its pid be reused, the guardian leaves the new process
        // alone.
        let armed = match self.driver.pidfd_open(target.pid) {
            Ok(pidfd) => {
                Guardian::arm_pinned(target, pidfd, dir, &self.config.guardian_driver, leftovers)
            }
            Err(e) => {
                log::info!(
                    "file {id}: no pidfd of pid {} ({e}): its guardian knows it by pid",
                    target.pid
                );
                Guardian::arm(target, dir, &self.config.guardian_driver, leftovers)
            }
        };
        match armed {
            Ok(guardian) => {
                log::debug!(
                    "file {id}: pid {} guarded by pid {}",
                    target.pid,
                    guardian.pid()
                );
                Some(guardian)
            }
            Err(e) => {
                log::warn!("file {id}: {e}");
                None
            }
        }
    }

    /// Everything of a paused process's KFD image but its BO contents, and
    /// the GPUs it names recorded for its render nodes and dma-bufs.
    fn prepare_kfd<S: ImageStore>(
        &mut self,
        target: &Kfd<D>,
        info: &ProcessInfo,
        store: &S,
        id: u32,
    ) -> Result<PreparedKfd, Error> {
        let checkpoint = target
            .checkpoint(info)
            .map_err(Error::kfd("reading the process state (CRIU_OP CHECKPOINT)"))?;
        refuse_unknown_objects(&checkpoint.priv_data, info, id)?;
        let local = local_topology(&self.config.topology_root, &self.driver)?;

        // actual (local) gpu_id -> user gpu_id
        let mut user_of: BTreeMap<u32, u32> = BTreeMap::new();
        for dev in &checkpoint.devices {
            if local.gpus().all(|n| n.gpu_id != dev.actual_gpu_id) {
                return Err(Error::Inconsistent(format!(
                    "the process uses GPU {:#x}, which the topology at {} does not list",
                    dev.actual_gpu_id,
                    self.config.topology_root.display()
                )));
            }
            user_of.insert(dev.actual_gpu_id, dev.user_gpu_id);
        }
        // The process's view: a process in a container sees only the GPUs
        // its device cgroup allows (KFD gives it exactly those), while CRIU
        // on the host sees every GPU in sysfs. The image describes what the
        // process sees, so it restores into a container of the same shape
        // (upstream refuses such a dump: every GPU in sysfs must be the
        // process's).
        let view = process_view(&local, &user_of);
        let mut device_entries = Vec::with_capacity(view.nodes.len());
        for node in &view.nodes {
            let user = if node.is_gpu() {
                user_of[&node.gpu_id]
            } else {
                0
            };
            device_entries.push(device_entry(node, user, &view));
        }

        let mut bo_entries = Vec::with_capacity(checkpoint.bos.len());
        for bo in &checkpoint.bos {
            // The handle names the BO's buffer for dma-buf files and
            // importers: the first dumped holder of a buffer re-creates and
            // publishes it at restore. KFD cannot re-create a BO as an import,
            // so a later holder (a process that imported it) gets its own
            // copy at restore and no handle: the buffer's files resolve to the
            // first holder's.
            let handle = match &bo.dmabuf {
                Some(dmabuf) => {
                    let key = self.dmabuf_handle(dmabuf.as_fd())?;
                    if self.created.insert(key) {
                        key
                    } else {
                        flags::NO_HANDLE
                    }
                }
                None => flags::NO_HANDLE,
            };
            bo_entries.push(KfdBoEntry {
                addr: bo.bucket.addr,
                size: bo.bucket.size,
                offset: bo.bucket.offset,
                alloc_flags: bo.bucket.alloc_flags,
                gpu_id: bo.bucket.gpu_id,
                handle,
                content_checksum: None,
                ..Default::default()
            });
        }

        let gpus: Vec<transfer::GpuTarget> = checkpoint
            .devices
            .iter()
            .map(|d| transfer::GpuTarget {
                user_gpu_id: d.user_gpu_id,
                local_gpu_id: d.actual_gpu_id,
                render_minor: local
                    .gpus()
                    .find(|n| n.gpu_id == d.actual_gpu_id)
                    .map_or(0, |n| n.props.drm_render_minor),
            })
            .collect();
        let plan = self.chunk_plan(store)?;
        let (shared_mem_size, shared_mem_magic) = probe_hsakmt_shm(&self.config.shm_dir);
        let num_of_gpus = checkpoint.devices.len() as u32;
        let msg = CriuKfd {
            pid: info.pid,
            num_of_gpus,
            num_of_cpus: (device_entries.len() as u32).saturating_sub(num_of_gpus),
            device_entries,
            num_of_bos: bo_entries.len() as u64,
            bo_entries,
            num_of_objects: info.num_objects,
            shared_mem_size,
            shared_mem_magic,
            priv_data: checkpoint.priv_data,
            producer: Some(PRODUCER.to_owned()),
            format_version: Some(FORMAT_VERSION),
            kfd_major_version: self.kfd_version.map(|v| v.major),
            kfd_minor_version: self.kfd_version.map(|v| v.minor),
            kfd_required_minor: self.kfd_version.map(crate::kfd_version::required_minor),
            message_checksum: None,
            chunk_size: Some(amdgpu_image::CHUNK_SIZE),
            dump_id: Some(plan.dump_id().to_vec()),
            parent_dump_id: None,
        };
        let bo_bytes = checkpoint
            .bos
            .iter()
            .fold(0u64, |sum, bo| sum.saturating_add(bo.bucket.size));
        for local in user_of.keys() {
            self.kfd_pids.entry(*local).or_default().insert(info.pid);
            let known = self.kfd_bos_of_gpu.entry(*local).or_default();
            known.0 = known.0.saturating_add(bo_bytes);
            known.1 = known.1.saturating_add(checkpoint.bos.len() as u64);
        }
        self.user_gpu_ids.extend(user_of);
        self.render_minors
            .extend(local.gpus().map(|n| (n.gpu_id, n.props.drm_render_minor)));
        Ok(PreparedKfd {
            id,
            msg,
            gpus,
            bos: checkpoint.bos,
            plan,
        })
    }

    /// Dumps a render-node fd (minor `minor`) as CRIU file `id`: a
    /// `CriuRenderNode` naming the GPU by the user id its process knows it
    /// by. That id comes from the process's KFD file; when CRIU offers the
    /// render node first (its fd number is lower), the node is kept (a
    /// `dup`) and written as soon as a KFD file naming its GPU is dumped —
    /// upstream fails here. A node whose GPU no dumped KFD file names by
    /// the end of the dump belongs to a process without `/dev/kfd` and is
    /// written as a render-only image ([`Dumper::finish_render_only`]).
    ///
    /// Which task a render fd belongs to is not visible here (CRIU passes
    /// no pid, and a DRM file does not name its process): a node written
    /// with a KFD file's user id may still belong to a render-only process
    /// of the same GPU. Every image therefore also records the GPU's device
    /// entry, and restore decides by whether the restored task has a KFD
    /// image ([`crate::restore`]).
    ///
    /// The node's own DRM BOs (GEM objects it created) are saved with
    /// their handles, mmap offsets, GPU mappings and, for VRAM/GTT BOs, their
    /// contents; every exportable BO (also one it imported from another file
    /// or process) is named by the share handle of its buffer, which dma-buf
    /// files and KFD BOs of the same buffer carry too.
    pub fn dump_render_node<S: ImageStore>(
        &mut self,
        store: &S,
        fd: BorrowedFd<'_>,
        minor: u32,
        id: u32,
    ) -> Result<RenderDump, Error> {
        let own = fd
            .try_clone_to_owned()
            .map_err(Error::io("duplicating the render-node fd"))?;
        match self.user_gpu_of_minor(minor) {
            Some(gpu_id) => {
                let (dump, _) = self.write_render_node(store, own, minor, id, gpu_id)?;
                self.flush_pending_dmabufs(store)?;
                Ok(dump)
            }
            // A host without DUMP_DEVICES_LATE reports the dump a success
            // after its last DUMP_EXT_FILE: the image is written now, as
            // render-only, so a failure fails this file (an image
            // directory only: a stream cannot take an image twice, should
            // a KFD file name the GPU later).
            None if self.config.unpause_early && store.as_dir().is_some() => {
                let copy = own
                    .try_clone()
                    .map_err(Error::io("duplicating the render-node fd"))?;
                let (dump, msg) = self.write_render_node(store, copy, minor, id, 0)?;
                log::info!(
                    "file {id}: no dumped KFD file names the GPU of renderD{minor} yet: written \
                     render-only ({} DRM BOs), renamed should a KFD file name its GPU",
                    dump.bos
                );
                self.pending_renders.push(PendingRender {
                    fd: own,
                    minor,
                    id,
                    written: Some(msg),
                });
                Ok(RenderDump {
                    gpu_id: None,
                    ..dump
                })
            }
            None => {
                log::info!(
                    "file {id}: no dumped KFD file names the GPU of renderD{minor} yet; \
                     its image waits for one (render-only if none comes)"
                );
                self.pending_renders.push(PendingRender {
                    fd: own,
                    minor,
                    id,
                    written: None,
                });
                Ok(RenderDump {
                    id,
                    minor,
                    gpu_id: None,
                    bos: 0,
                })
            }
        }
    }

    /// Render nodes waiting for their process's KFD file.
    pub fn pending_render_nodes(&self) -> usize {
        self.pending_renders.len()
    }

    fn user_gpu_of_minor(&self, minor: u32) -> Option<u32> {
        let (local, _) = self.render_minors.iter().find(|(_, m)| **m == minor)?;
        self.user_gpu_ids.get(local).copied()
    }

    /// The pids of the dumped KFD processes using the GPU of `minor`.
    fn kfd_pids_of_minor(&self, minor: u32) -> Vec<u32> {
        self.render_minors
            .iter()
            .filter(|(_, m)| **m == minor)
            .filter_map(|(local, _)| self.kfd_pids.get(local))
            .flatten()
            .copied()
            .collect()
    }

    /// The local topology, parsed once.
    fn topology(&mut self) -> Result<&DeviceTopology, Error> {
        let parsed = match self.topology.take() {
            Some(parsed) => parsed,
            None => local_topology(&self.config.topology_root, &self.driver)?,
        };
        Ok(self.topology.insert(parsed))
    }

    /// The device entry of the GPU behind render minor `minor`, with the
    /// machine's own node and gpu ids.
    fn render_device(&mut self, minor: u32) -> Result<KfdDeviceEntry, Error> {
        let root = self.config.topology_root.display().to_string();
        let topology = self.topology()?;
        let node = topology
            .gpus()
            .find(|n| n.props.drm_render_minor == minor)
            .ok_or_else(|| Error::Topology {
                root,
                reason: format!("no GPU has render minor {minor} (renderD{minor})"),
            })?;
        Ok(device_entry(node, node.gpu_id, topology))
    }

    fn write_render_node<S: ImageStore>(
        &mut self,
        store: &S,
        own: OwnedFd,
        minor: u32,
        id: u32,
        gpu_id: u32,
    ) -> Result<(RenderDump, CriuRenderNode), Error> {
        let device = self.render_device(minor)?;
        // Names the GPU in transfer errors: the user id, else the machine's.
        let named_gpu = if gpu_id != 0 { gpu_id } else { device.gpu_id };
        let node = kfd::RenderNode::from_fd(self.driver.clone(), own);
        let handles = match node.gem_list_handles() {
            Ok(handles) => handles,
            // Kernels without GEM_LIST_HANDLES cannot list DRM BOs. Upstream
            // then dumped "0 BOs" and succeeded, losing any BO the file had
            // (criu#3015). Handles are allocated lowest-free from 1, so a
            // file with BOs almost always has one of the lowest handles:
            // probe them, and refuse when one exists. A file whose BOs all
            // sit above the probed range (all low handles closed) is found
            // by its fdinfo: memory in its VM that neither the KFD BOs of
            // the processes using the GPU nor page tables account for.
            Err(e) if e.errno() == libc::EINVAL => {
                if let Some(handle) = (1..=UNLISTED_HANDLE_PROBE).find(|&h| {
                    match node.gem_mmap_offset(GemHandle(h)) {
                        Ok(_) => true,
                        Err(e) => e.errno() != libc::ENOENT,
                    }
                }) {
                    return Err(Error::Unlistable {
                        reason: format!(
                            "file {id}: renderD{minor} holds DRM buffers (GEM handle {handle} \
                             exists) but this kernel cannot list them (no \
                             AMDGPU_GEM_LIST_HANDLES, added in Linux 6.16); the dump would lose \
                             them, so it is refused: update the kernel"
                        ),
                    });
                }
                self.refuse_unseen_drm_memory(&node, minor, id)?;
                Vec::new()
            }
            Err(e) => {
                return Err(Error::Kfd {
                    step: "listing the render node's BOs (AMDGPU_GEM_LIST_HANDLES)",
                    source: e,
                })
            }
        };
        let plan = self.chunk_plan(store)?;
        let mut contents = transfer::ContentReport::default();
        let mut bo_entries = Vec::with_capacity(handles.len());
        for (index, listed) in handles.iter().enumerate() {
            let handle = GemHandle(listed.gem_handle);
            let is_import = listed.flags & AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT != 0;
            // BOs without CPU access (and userptrs) have no mmap offset
            // (EPERM): nothing of them can be mapped, so 0 = no translation.
            let offset = match node.gem_mmap_offset(handle) {
                Ok(offset) => offset,
                Err(e) if e.errno() == libc::EPERM => 0,
                Err(e) => {
                    return Err(Error::Kfd {
                        step: "reading a DRM BO's mmap offset (AMDGPU_GEM_MMAP)",
                        source: e,
                    })
                }
            };
            let vms = node.gem_mapping_info(handle).map_err(Error::kfd(
                "reading a DRM BO's GPU mappings (AMDGPU_GEM_OP)",
            ))?;
            let in_gpu_memory = listed.preferred_domains
                & u64::from(flags::GEM_DOMAIN_VRAM | flags::GEM_DOMAIN_GTT)
                != 0;
            // The buffer's dma-buf names it across files and processes.
            // Userptr and VM-always-valid BOs cannot be exported (EPERM):
            // nothing else can share them either.
            let dmabuf = match node.prime_handle_to_fd(handle, DRM_CLOEXEC) {
                Ok(dmabuf) => Some(dmabuf),
                Err(e) if e.errno() == libc::EPERM && !in_gpu_memory => None,
                Err(e) => {
                    return Err(Error::Kfd {
                        step: "exporting a DRM BO (PRIME_HANDLE_TO_FD)",
                        source: e,
                    })
                }
            };
            let share_handle = match &dmabuf {
                Some(dmabuf) => Some(self.dmabuf_handle(dmabuf.as_fd())?),
                None => None,
            };
            // A buffer another dumped BO re-creates (the same GEM object
            // shared by dma-buf on one device, which the kernel does not flag)
            // is imported at restore, as is one imported from another device.
            let is_import =
                is_import || share_handle.is_some_and(|key| self.created.contains(&key));
            match (is_import, share_handle) {
                (false, Some(key)) => {
                    self.created.insert(key);
                }
                (true, Some(key)) => self.imported.push((key, id, listed.gem_handle)),
                (true, None) => {
                    return Err(Error::Inconsistent(format!(
                        "the imported DRM BO {} of renderD{minor} (file {id}) cannot be \
                         exported, so its buffer cannot be named",
                        listed.gem_handle
                    )))
                }
                (false, None) => {}
            }
            let dumped = match (&dmabuf, in_gpu_memory) {
                (Some(dmabuf), true) => {
                    let name = ImageName::DrmPages {
                        id,
                        minor,
                        bo_index: index as u32,
                    };
                    Some(transfer::dump_drm_bo(
                        &self.driver,
                        store,
                        &name,
                        transfer::DrmDevice {
                            gpu_id: named_gpu,
                            render_minor: minor,
                        },
                        dmabuf.as_fd(),
                        listed.size,
                        &self.config.options,
                        Some(&plan),
                        Some(&self.staging),
                    )?)
                }
                _ => None,
            };
            let dumped = dumped
                .map(|bo| {
                    contents.bytes += bo.bytes;
                    contents.stored_bytes += bo.stored_bytes;
                    render_chunks(bo)
                })
                .transpose()?;
            bo_entries.push(DrmBoEntry {
                addr: vms.last().map_or(0, |vm| vm.addr),
                size: listed.size,
                offset,
                alloc_flags: listed.alloc_flags,
                alignment: listed.alignment,
                preferred_domains: listed.preferred_domains as u32,
                handle: listed.gem_handle,
                is_import: u32::from(is_import),
                num_of_vms: vms.len() as u32,
                vm_entries: vms
                    .iter()
                    .map(|vm| DrmVmEntry {
                        addr: vm.addr,
                        size: vm.size,
                        offset: vm.offset,
                        flags: vm.flags,
                    })
                    .collect(),
                content_checksum: dumped.as_ref().map(|c| c.checksum),
                share_handle,
                chunk_digests: dumped
                    .as_ref()
                    .map(|c| amdgpu_image::chunks::encode_digests(&c.digests)),
                chunk_sources: dumped.and_then(|c| c.sources),
            });
        }
        let sources = || {
            bo_entries
                .iter()
                .filter_map(|b| b.chunk_sources.as_deref())
                .flatten()
        };
        let references_parent = sources().any(|&s| s == amdgpu_image::ChunkSource::Parent as u8);
        crate::incremental::log_written(
            &format!("file {id} (renderD{minor})"),
            contents.stored_bytes,
            contents.bytes,
            references_parent,
        );
        let mut msg = CriuRenderNode {
            gpu_id: 0,
            referencing_gpu_id: None,
            dump_id: Some(plan.dump_id().to_vec()),
            parent_dump_id: if references_parent {
                plan.parent_dump_id().map(<[u8]>::to_vec)
            } else {
                None
            },
            id,
            drm_render_minor: minor,
            num_of_bos: bo_entries.len() as u64,
            bo_entries,
            producer: Some(PRODUCER.to_owned()),
            format_version: Some(FORMAT_VERSION),
            message_checksum: None,
            device: Some(device),
            chunk_size: Some(amdgpu_image::CHUNK_SIZE),
            kfd_pids: Vec::new(),
        };
        self.name_render_gpu(&mut msg, gpu_id);
        store
            .write_message(&ImageName::RenderNode { id }, &msg)
            .map_err(Error::image("writing the render-node image"))?;
        let dump = RenderDump {
            id,
            minor,
            gpu_id: Some(gpu_id),
            bos: msg.bo_entries.len(),
        };
        Ok((dump, msg))
    }

    /// Names the GPU of a render-node image: the user gpu_id `gpu_id` of
    /// the KFD file that names it, or 0 (render-only), and the KFD
    /// processes that may own the fd.
    fn name_render_gpu(&self, msg: &mut CriuRenderNode, gpu_id: u32) {
        let references = msg.bo_entries.iter().any(|b| b.chunk_sources.is_some());
        // An image with references names its GPU in referencing_gpu_id
        // and 0 here: the C plugin, which would restore the BOs without
        // the referenced chunks, finds no GPU and refuses the file.
        msg.gpu_id = if references { 0 } else { gpu_id };
        msg.referencing_gpu_id = (references && gpu_id != 0).then_some(gpu_id);
        // Which tasks may own the fd: only a named GPU has any.
        msg.kfd_pids = if gpu_id == 0 {
            Vec::new()
        } else {
            self.kfd_pids_of_minor(msg.drm_render_minor)
        };
    }

    /// Writes pending render node `render`'s image naming user gpu_id
    /// `gpu_id`: renames the one written render-only, or writes it.
    fn write_pending_render<S: ImageStore>(
        &mut self,
        store: &S,
        render: PendingRender,
        gpu_id: u32,
    ) -> Result<RenderDump, Error> {
        let Some(mut msg) = render.written else {
            return self
                .write_render_node(store, render.fd, render.minor, render.id, gpu_id)
                .map(|(dump, _)| dump);
        };
        self.name_render_gpu(&mut msg, gpu_id);
        store
            .write_message(&ImageName::RenderNode { id: render.id }, &msg)
            .map_err(Error::image("renaming the GPU of a render-node image"))?;
        Ok(RenderDump {
            id: render.id,
            minor: render.minor,
            gpu_id: Some(gpu_id),
            bos: msg.bo_entries.len(),
        })
    }

    /// On a kernel that cannot list DRM BOs, with none among the probed
    /// handles of render node `node` (renderD`minor`, file `id`): refuses
    /// the file when its fdinfo shows memory in its VM beyond what the KFD
    /// BOs of the processes using the GPU and page tables account for (DRM
    /// BOs at handles the probe does not reach); dumps it without BOs, with
    /// a warning, otherwise.
    fn refuse_unseen_drm_memory<F: AsFd>(
        &self,
        node: &kfd::RenderNode<D, F>,
        minor: u32,
        id: u32,
    ) -> Result<(), Error> {
        let probed = format!("GEM handles 1..={UNLISTED_HANDLE_PROBE}");
        let vm = node
            .fdinfo()
            .ok()
            .and_then(|text| crate::drm_fdinfo::vm_bytes(&text));
        let Some(vm) = vm else {
            log::warn!(
                "file {id}: the kernel cannot list DRM BOs (no AMDGPU_GEM_LIST_HANDLES); \
                 renderD{minor} has none among {probed} and its fdinfo reports no memory, \
                 so BOs above those handles cannot be told: dumped without BOs"
            );
            return Ok(());
        };
        let (known, buffers) = self
            .render_minors
            .iter()
            .filter(|(_, m)| **m == minor)
            .filter_map(|(local, _)| self.kfd_bos_of_gpu.get(local))
            .fold((0u64, 0u64), |(b, n), (kb, kn)| {
                (b.saturating_add(*kb), n.saturating_add(*kn))
            });
        let allowance = crate::drm_fdinfo::unlisted_allowance(known, buffers);
        let unseen = vm.saturating_sub(known);
        if unseen > allowance {
            return Err(Error::Unlistable {
                reason: format!(
                    "file {id}: renderD{minor} holds {vm} bytes of GPU memory (its fdinfo), \
                     {unseen} more than the {known} bytes of KFD BOs of the processes using \
                     its GPU (page tables allowed for), yet none of {probed} exists: DRM \
                     buffers at higher handles, which this kernel cannot list (no \
                     AMDGPU_GEM_LIST_HANDLES, added in Linux 6.16); the dump would lose them, \
                     so it is refused: update the kernel"
                ),
            });
        }
        log::warn!(
            "file {id}: the kernel cannot list DRM BOs (no AMDGPU_GEM_LIST_HANDLES); \
             renderD{minor} has none among {probed}, and its fdinfo's {vm} bytes are its \
             processes' KFD BOs and page tables: dumped without BOs"
        );
        Ok(())
    }

    /// Writes the images of pending render nodes whose GPU is now known.
    fn flush_pending_renders<S: ImageStore>(&mut self, store: &S) -> Result<(), Error> {
        let pending = std::mem::take(&mut self.pending_renders);
        let mut first_error = None;
        for render in pending {
            match self.user_gpu_of_minor(render.minor) {
                Some(gpu_id) => {
                    let (id, minor) = (render.id, render.minor);
                    match self.write_pending_render(store, render, gpu_id) {
                        Ok(_) => log::info!("file {id}: renderD{minor} of GPU {gpu_id:#x} dumped"),
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                None => self.pending_renders.push(render),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes every render node still waiting for a KFD file as a
    /// render-only image (`gpu_id` 0 and the GPU's device entry): no dumped
    /// KFD process uses its GPU, so its process has no `/dev/kfd` (a process
    /// with one has every visible GPU among its KFD devices). Called once
    /// every file is dumped (`DUMP_DEVICES_LATE`, or `exit` in CRIU without
    /// that hook); then resolves dma-bufs of the nodes' BOs. Returns how
    /// many images were written; every node is tried, the first error is
    /// returned.
    pub fn finish_render_only<S: ImageStore>(&mut self, store: &S) -> Result<usize, Error> {
        let mut written = 0;
        let mut first_error = None;
        for render in std::mem::take(&mut self.pending_renders) {
            let (id, minor) = (render.id, render.minor);
            let gpu_id = self.user_gpu_of_minor(minor).unwrap_or(0);
            if gpu_id == 0 && render.written.is_some() {
                // Written render-only already, when it was dumped.
                continue;
            }
            match self.write_pending_render(store, render, gpu_id) {
                Ok(dump) => {
                    written += 1;
                    log::info!(
                        "file {id}: renderD{minor} dumped without a KFD process ({} DRM BOs)",
                        dump.bos
                    );
                }
                Err(e) => {
                    log::error!("file {id}: renderD{minor}: {e}");
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Err(e) = self.flush_pending_dmabufs(store) {
            first_error.get_or_insert(e);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// The handle of the buffer behind a dma-buf: dma-bufs of one buffer are
    /// one file (the kernel caches a GEM object's export), so the file's
    /// identity names the buffer.
    fn dmabuf_handle(&mut self, dmabuf: BorrowedFd<'_>) -> Result<u32, Error> {
        let key = file_identity(dmabuf)?;
        let next = self.dmabuf_handles.len() as u32 + 1;
        Ok(*self.dmabuf_handles.entry(key).or_insert(next))
    }

    /// Dumps a dma-buf fd as CRIU file `id`: `Ok(None)` when amdgpu did not
    /// export it (not ours). A dma-buf of a KFD BO is recorded as the BO's
    /// handle (`amdgpu-dmabuf_<id>.img`); when CRIU offers it before the KFD
    /// file, it waits for it like a render node.
    pub fn dump_dmabuf<S: ImageStore>(
        &mut self,
        store: &S,
        fd: BorrowedFd<'_>,
        id: u32,
    ) -> Result<Option<DmabufDump>, Error> {
        let kfd = Kfd::open(self.driver.clone()).map_err(Error::kfd(
            "opening a private /dev/kfd to identify a dma-buf",
        ))?;
        match kfd.dmabuf_info(fd) {
            Ok(_) => {}
            // Another exporter's dma-buf (or not one the KFD knows): not ours.
            Err(e) if matches!(e.errno(), libc::EINVAL | libc::EBADF) => return Ok(None),
            Err(e) => {
                return Err(Error::Kfd {
                    step: "identifying a dma-buf (GET_DMABUF_INFO)",
                    source: e,
                })
            }
        }
        let key = file_identity(fd)?;
        if let Some(&handle) = self.dmabuf_handles.get(&key) {
            write_dmabuf(store, id, handle)?;
            return Ok(Some(DmabufDump {
                id,
                handle: Some(handle),
            }));
        }
        let own = fd
            .try_clone_to_owned()
            .map_err(Error::io("duplicating the dma-buf fd"))?;
        log::info!("file {id}: dma-buf comes before the KFD file of its BO; written after it");
        self.pending_dmabufs.push((own, id));
        Ok(Some(DmabufDump { id, handle: None }))
    }

    fn flush_pending_dmabufs<S: ImageStore>(&mut self, store: &S) -> Result<(), Error> {
        let pending = std::mem::take(&mut self.pending_dmabufs);
        for (fd, id) in pending {
            let key = file_identity(fd.as_fd())?;
            match self.dmabuf_handles.get(&key) {
                Some(&handle) => {
                    write_dmabuf(store, id, handle)?;
                    log::info!("file {id}: dma-buf of BO handle {handle} dumped");
                }
                None => self.pending_dmabufs.push((fd, id)),
            }
        }
        Ok(())
    }

    /// Waits for the KFD files whose contents are copying in the background
    /// ([`dump_kfd_background`](Self::dump_kfd_background)); the first
    /// failure, every one logged with its file.
    fn finish_transfers(&mut self) -> Result<(), Error> {
        let mut first_error = None;
        for transfer in std::mem::take(&mut self.transfers) {
            let (id, pid) = (transfer.id, transfer.pid);
            let result = transfer.worker.join().unwrap_or_else(|_| {
                Err(Error::Inconsistent(format!(
                    "file {id}: the transfer thread panicked; its image is not written"
                )))
            });
            match result {
                Ok(copied) => log::info!(
                    "file {id}: pid {pid}: {} content bytes copied, {} stored",
                    copied.bytes,
                    copied.stored
                ),
                Err(e) => {
                    log::error!("file {id}: pid {pid}: contents not copied: {e}");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Stops the background transfers at their next staging buffer: the
    /// dump failed elsewhere, and [`unpause_all`](Self::unpause_all) then
    /// need not wait for copies nobody keeps.
    pub fn abandon(&mut self) {
        if !self.transfers.is_empty() {
            log::info!(
                "the dump failed: stopping {} background transfer(s)",
                self.transfers.len()
            );
            self.staging.stop();
        }
    }

    /// Unpauses every paused process (`DUMP_DEVICES_LATE`), all of them even
    /// when one fails, once the background transfers are finished (their
    /// failure fails this, the processes unpaused all the same); returns
    /// how many were unpaused, or the first error.
    pub fn unpause_all(&mut self) -> Result<usize, Error> {
        let transferred = self.finish_transfers();
        let mut first_error = None;
        let mut unpaused = 0;
        // A process whose unpause failed stays listed: `exit` (and drop)
        // try again, so a transient failure does not leave it frozen.
        let mut still_paused = Vec::new();
        for paused in std::mem::take(&mut self.paused) {
            match paused.kfd.unpause() {
                Ok(()) => {
                    unpaused += 1;
                    log::info!("file {}: pid {} unpaused", paused.id, paused.pid);
                }
                Err(e) => {
                    log::error!("file {}: cannot unpause pid {}: {e}", paused.id, paused.pid);
                    first_error.get_or_insert(Error::Kfd {
                        step: "unpausing a dumped process (CRIU_OP UNPAUSE)",
                        source: e,
                    });
                    still_paused.push(paused);
                }
            }
        }
        self.paused = still_paused;
        // A file whose contents were not copied fails the dump first: its
        // image was never written.
        if let Err(e) = transferred {
            first_error = Some(e);
        }
        if first_error.is_none() && !self.pending_dmabufs.is_empty() {
            let files: Vec<String> = self
                .pending_dmabufs
                .drain(..)
                .map(|(_, id)| format!("file {id}"))
                .collect();
            first_error = Some(Error::Inconsistent(format!(
                "amdgpu dma-bufs of no buffer of a dumped KFD or render-node file: {}",
                files.join(", ")
            )));
        }
        let orphans: Vec<String> = self
            .imported
            .iter()
            .filter(|(key, ..)| !self.created.contains(key))
            .map(|(_, id, handle)| format!("BO {handle} of file {id}"))
            .collect();
        if first_error.is_none() && !orphans.is_empty() {
            first_error = Some(Error::Inconsistent(format!(
                "DRM BOs imported from a buffer no dumped process holds (its exporter is \
                 outside the dump): {}",
                orphans.join(", ")
            )));
        }
        if first_error.is_none() && !self.pending_renders.is_empty() {
            let files: Vec<String> = self
                .pending_renders
                .drain(..)
                .map(|r| format!("file {} (renderD{})", r.id, r.minor))
                .collect();
            first_error = Some(Error::Inconsistent(format!(
                "render nodes never written (the dump ended before they were): {}",
                files.join(", ")
            )));
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(unpaused),
        }
    }
}

impl<D: Driver + Clone> Drop for Dumper<D> {
    fn drop(&mut self) {
        // Transfers still running at teardown belong to a dump that never
        // reached its unpause (DUMP_DEVICES_LATE): it failed.
        self.abandon();
        if !self.paused.is_empty() {
            log::warn!(
                "{} dumped process(es) still paused at teardown; unpausing",
                self.paused.len()
            );
            let _ = self.unpause_all();
        }
        // Those this process cannot unpause are left to their guardians,
        // which recover them once it has ended.
        for paused in self.paused.drain(..) {
            match paused.guardian {
                Some(guardian) => {
                    log::error!(
                        "file {}: pid {} is still paused; its guardian (pid {}) unpauses it when \
                         this process ends",
                        paused.id,
                        paused.pid,
                        guardian.pid()
                    );
                    guardian.keep_watching();
                }
                None => log::error!(
                    "file {}: pid {} is still paused and has no guardian; run \
                     `amdgpu-criu unpause --pid PID` on it",
                    paused.id,
                    paused.pid
                ),
            }
        }
    }
}

/// Copies a prepared KFD file's BO contents into its pages files, fills
/// in its checksums, digests and chunk sources, and writes its image.
fn finish_kfd<D: Driver + Clone, S: ImageStore + Sync>(
    prepared: PreparedKfd,
    driver: &D,
    store: &S,
    options: &crate::options::Options,
    pool: &transfer::StagingPool,
) -> Result<Copied, Error> {
    let PreparedKfd {
        id,
        mut msg,
        gpus,
        bos,
        plan,
    } = prepared;
    let contents = transfer::dump_contents(
        driver,
        store,
        id,
        &gpus,
        &bos,
        options,
        Some(&plan),
        Some(pool),
    )?;
    let references_parent = attach_contents(&mut msg.bo_entries, &contents)?;
    crate::incremental::log_written(
        &format!("file {id}"),
        contents.stored_bytes,
        contents.bytes,
        references_parent,
    );
    if references_parent {
        msg.parent_dump_id = plan.parent_dump_id().map(<[u8]>::to_vec);
    }
    store
        .write_message(&ImageName::Kfd { id }, &msg)
        .map_err(Error::image("writing the KFD image"))?;
    Ok(Copied {
        bytes: contents.bytes,
        stored: contents.stored_bytes,
    })
}

/// Fills the BO entries' checksums, chunk digests and chunk sources from
/// what the transfer reported; whether a chunk is referenced from the
/// parent. An entry the image does not have, or one reported twice, is an
/// error: the transfer and the image disagree, and an image written
/// anyway would restore some BO without its checksum (or with another's).
fn attach_contents(
    entries: &mut [KfdBoEntry],
    contents: &transfer::ContentReport,
) -> Result<bool, Error> {
    let count = entries.len();
    let mismatch = |what: String| {
        Error::Inconsistent(format!(
            "the BO contents and the image disagree: {what} (the image has {count} bo entries)"
        ))
    };
    let mut seen = vec![[false; 3]; count];
    let mut entry_of = |entry: usize, list: usize, name: &str| {
        let Some(bo_seen) = seen.get_mut(entry) else {
            return Err(mismatch(format!("{name} of bo entry {entry}")));
        };
        if std::mem::replace(&mut bo_seen[list], true) {
            return Err(mismatch(format!("{name} of bo entry {entry} twice")));
        }
        Ok(entry)
    };
    for (entry, checksum) in &contents.checksums {
        let entry = entry_of(*entry, 0, "a checksum")?;
        entries[entry].content_checksum = Some(*checksum);
    }
    for (entry, digests) in &contents.digests {
        let entry = entry_of(*entry, 1, "chunk digests")?;
        entries[entry].chunk_digests = Some(amdgpu_image::chunks::encode_digests(digests));
    }
    let mut references_parent = false;
    for (entry, sources) in &contents.sources {
        let entry = entry_of(*entry, 2, "chunk sources")?;
        if sources
            .iter()
            .any(|s| *s != amdgpu_image::ChunkSource::Here)
        {
            references_parent |= sources.contains(&amdgpu_image::ChunkSource::Parent);
            entries[entry].chunk_sources = Some(sources.iter().map(|s| *s as u8).collect());
        }
    }
    Ok(references_parent)
}

/// `(st_dev, st_ino)` of an open file.
fn file_identity(fd: BorrowedFd<'_>) -> Result<(u64, u64), Error> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::from(
        fd.try_clone_to_owned()
            .map_err(Error::io("duplicating a dma-buf fd"))?,
    );
    let meta = file.metadata().map_err(Error::io("fstat of a dma-buf"))?;
    Ok((meta.dev(), meta.ino()))
}

fn write_dmabuf<S: ImageStore>(store: &S, id: u32, handle: u32) -> Result<(), Error> {
    let msg = CriuDmabufNode {
        gem_handle: handle,
        producer: Some(PRODUCER.to_owned()),
        format_version: Some(FORMAT_VERSION),
        message_checksum: None,
    };
    store
        .write_message(&ImageName::Dmabuf { id }, &msg)
        .map_err(Error::image("writing the dma-buf image"))
}

/// The topology as a process with the GPUs `user_of` (actual gpu_id ->
/// user gpu_id) sees it: every CPU node and its GPUs, nothing else. GPUs of
/// the host that the process cannot use are left out (logged), and so are
/// the links to them (invalid in the view).
fn process_view(local: &DeviceTopology, user_of: &BTreeMap<u32, u32>) -> DeviceTopology {
    let mut nodes = Vec::with_capacity(local.nodes.len());
    for node in &local.nodes {
        if node.is_gpu() && !user_of.contains_key(&node.gpu_id) {
            log::info!(
                "GPU {:#x} (node {}) is not one of the process's GPUs (device cgroup): \
                 left out of the image",
                node.gpu_id,
                node.node_id
            );
            continue;
        }
        nodes.push(node.clone());
    }
    DeviceTopology { nodes }
}

/// The sysfs reads of the KFD topology as the process behind `driver`
/// makes them (a node of a GPU its device cgroup hides answers `EPERM`);
/// listings come from the file system as they are.
struct ReadAs<'a, D>(&'a D);

impl<D: Driver> amdgpu_topology::parse::SysfsReader for ReadAs<'_, D> {
    fn read_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        amdgpu_topology::parse::RealFs.read_dir(path)
    }

    fn is_dir(&self, path: &Path) -> std::io::Result<bool> {
        amdgpu_topology::parse::RealFs.is_dir(path)
    }

    fn read(&self, path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
        self.0.read_sysfs(path, limit)
    }
}

/// Parses the local topology under `root`, as the process behind `driver`
/// sees it, into the device view. Skipped nodes are logged (with the file
/// and the reason), so a GPU missing later ("not listed", "number of GPUs
/// mismatch") can be traced to its sysfs node.
pub fn local_topology<D: Driver>(root: &Path, driver: &D) -> Result<DeviceTopology, Error> {
    let parsed =
        amdgpu_topology::parse::parse_with(&ReadAs(driver), root).map_err(|e| Error::Topology {
            root: root.display().to_string(),
            reason: e.to_string(),
        })?;
    for skipped in &parsed.skipped {
        // A container's hidden GPUs are expected; anything else is odd.
        if skipped.reason == amdgpu_topology::parse::SkipReason::AccessDenied {
            log::info!("KFD topology at {}: {skipped}", root.display());
        } else {
            log::warn!("KFD topology at {}: {skipped}", root.display());
        }
    }
    DeviceTopology::from_system(&parsed.system).map_err(|e| Error::Topology {
        root: root.display().to_string(),
        reason: e.to_string(),
    })
}

/// GEM handles probed on a kernel without `AMDGPU_GEM_LIST_HANDLES`.
const UNLISTED_HANDLE_PROBE: u32 = 256;

/// Size and first four bytes of hsakmt's shared memory, `(0, 0)` when absent
/// or of a size no image may record (said in the log): restore then leaves
/// the object to the machine's own ROCm processes, as for a dump without it.
fn probe_hsakmt_shm(shm_dir: &Path) -> (u64, u32) {
    let path = shm_dir.join(HSAKMT_SHM);
    let Ok(meta) = std::fs::metadata(&path) else {
        return (0, 0);
    };
    if !(4..=amdgpu_image::validate::MAX_SHARED_MEM_SIZE).contains(&meta.len()) {
        log::warn!(
            "{} holds {} bytes, not hsakmt's shared table (4 to {} bytes): not recorded",
            path.display(),
            meta.len(),
            amdgpu_image::validate::MAX_SHARED_MEM_SIZE
        );
        return (0, 0);
    }
    let mut magic = [0u8; 4];
    match std::fs::File::open(&path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
    {
        Ok(()) => (meta.len(), u32::from_ne_bytes(magic)),
        Err(e) => {
            log::warn!("cannot read the magic of {}: {e}", path.display());
            (meta.len(), 0)
        }
    }
}

/// Refuses a process whose private data (the kernel's opaque blob, saved
/// as it is) holds queues of a type no kernel this plugin knows writes: a
/// later kernel's queue (KFD 1.22's metadata-ring queues of GC 12.1, for
/// one, whose layout is not published) may carry state the kernel's blob
/// does not, and a restore that recreates it wrongly is worse than a dump
/// that says so. The dump's failure path unpauses the process. A blob in
/// no layout this plugin can walk is saved as the kernel wrote it (as the
/// C plugin saves every blob), with a note in the log.
fn refuse_unknown_objects(priv_data: &[u8], info: &ProcessInfo, id: u32) -> Result<(), Error> {
    let Some(objects) = amdgpu_image::priv_data::objects(
        priv_data,
        u64::from(info.num_devices),
        u64::from(info.num_bos),
        info.num_objects,
    ) else {
        log::debug!(
            "file {id}: pid {}: the kernel's private data ({} bytes, {} objects) is in a layout \
             this plugin does not read; it is saved as the kernel wrote it",
            info.pid,
            priv_data.len(),
            info.num_objects
        );
        return Ok(());
    };
    match objects.unknown_queue_types.as_slice() {
        [] => Ok(()),
        unknown => {
            Err(Error::Unsupported {
                what: format!(
                "pid {}: {} of an unknown type ({}; the kernel's user queue types are compute 0, \
                 SDMA 1, SDMA_XGMI 4 and SDMA_BY_ENG_ID 5, so this is a newer kernel's queue); \
                 the process was left running",
                info.pid,
                if unknown.len() == 1 { "a queue" } else { "queues" },
                unknown
                    .iter()
                    .map(|(gpu, kind)| format!("type {kind} on GPU {gpu:#x}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            })
        }
    }
}

/// Marks the dump of KFD file `id` as in progress in a directory store: an
/// unfinished file (`.amdgpu-kfd-ID.img.part-PID-N`) that stays while
/// the process is paused and goes when it is unpaused (or the dump fails).
/// A dumper killed in between (SIGKILL: nothing of it runs) leaves the file,
/// and [`verify_set`](amdgpu_image::verify_set) reports the set as
/// unfinished even when every image had been committed: CRIU writes its
/// `inventory.img` only after `DUMP_DEVICES_LATE`, so until then the dump is
/// not done. A streamed dump has no such file (the streamer's capture is
/// incomplete by itself); a marker that cannot be made is logged and the
/// dump goes on.
fn mark_in_progress<S: ImageStore>(store: &S, id: u32) -> Option<amdgpu_image::UnfinishedMark> {
    let dir = store.as_dir()?;
    match dir.mark_unfinished(&ImageName::Kfd { id }) {
        Ok(mark) => Some(mark),
        Err(e) => {
            log::warn!(
                "file {id}: cannot mark the dump as in progress ({e}); if this dump is killed, \
                 its images may look complete"
            );
            None
        }
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

/// What the image records of one dumped DRM BO's contents.
#[derive(Debug)]
struct RenderChunks {
    checksum: u64,
    digests: Vec<amdgpu_image::chunks::Digest>,
    /// Chunk sources as `chunk_sources` stores them, when a chunk is
    /// stored elsewhere.
    sources: Option<Vec<u8>>,
}

/// The checksum, digests and sources of a DRM BO's own pages file, which
/// holds that one BO (entry 0): anything else is an error, never a
/// checksum of 0 that restore would then refuse as a damaged file.
fn render_chunks(bo: transfer::ContentReport) -> Result<RenderChunks, Error> {
    fn only<T>(list: Vec<(usize, T)>, what: &str) -> Result<T, Error> {
        let mut list = list.into_iter();
        match (list.next(), list.next()) {
            (Some((0, item)), None) => Ok(item),
            _ => Err(Error::Inconsistent(format!(
                "a DRM BO's contents were dumped without exactly one {what}"
            ))),
        }
    }
    let checksum = only(bo.checksums, "checksum")?;
    let digests = only(bo.digests, "list of chunk digests")?;
    let sources = match bo.sources.is_empty() {
        true => None,
        false => Some(only(bo.sources, "list of chunk sources")?),
    }
    .filter(|s| s.iter().any(|s| *s != amdgpu_image::ChunkSource::Here))
    .map(|s| s.iter().map(|s| *s as u8).collect());
    Ok(RenderChunks {
        checksum,
        digests,
        sources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfd_sim::workload::{Profile, Workload};

    /// A dumper (a simulated process tracing the app, as CRIU does) that
    /// unpauses each process right after its image (CRIU 4.2 and older) and
    /// arms a guardian, and its copy of the app's KFD fd.
    fn early_unpausing_dumper(
        sim: &kfd_sim::Sim,
        app: &Workload,
        dirs: &tempfile::TempDir,
    ) -> (Dumper<kfd_sim::SimDriver>, OwnedFd) {
        let criu = sim.spawn_process().unwrap();
        let driver = sim.driver(criu);
        driver.ptrace_seize(app.pid().0).unwrap();
        let pidfd = driver.pidfd_open(app.pid().0).unwrap();
        let fd = driver
            .pidfd_getfd(
                pidfd.as_fd(),
                std::os::fd::AsRawFd::as_raw_fd(&app.kfd_fd().unwrap()),
            )
            .unwrap();
        let config = DumpConfig {
            topology_root: sim.sysfs_root(),
            options: Options::default(),
            unpause_early: true,
            shm_dir: dirs.path().join("shm"),
            guardian_log_dir: Some(dirs.path().to_path_buf()),
            // Never reached: the test process (the dumper's host process)
            // outlives the guardian, which is killed at the end.
            guardian_driver: GuardianDriver::new("none", || {
                Err(std::io::Error::from_raw_os_error(libc::ECONNREFUSED))
            }),
        };
        (Dumper::new(driver, config), fd)
    }

    /// Whether host process `pid` exists and has not exited.
    fn running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|s| !s.trim_start().starts_with('Z'))
        })
    }

    #[test]
    fn a_second_kfd_file_is_refused_before_its_process_is_paused_again() {
        // A host that cannot name a file's process (no task_fd): the engine
        // must tell the second /dev/kfd file of a process it paused already
        // before PROCESS_INFO pauses it a second time (KFD nests pauses, and
        // one UNPAUSE would then leave its queues evicted for good).
        let sim = kfd_sim::Sim::synthetic(1, kfd_sim::SimConfig::default()).unwrap();
        sim.set_kfd_minor_version(19);
        let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
        app.step().unwrap();
        let second = sim
            .driver(app.pid())
            .open(
                std::path::Path::new("/dev/kfd"),
                libc::O_RDWR | libc::O_CLOEXEC,
            )
            .unwrap();
        let criu = sim.spawn_process().unwrap();
        let driver = sim.driver(criu);
        driver.ptrace_seize(app.pid().0).unwrap();
        let pidfd = driver.pidfd_open(app.pid().0).unwrap();
        let drained = |fd: BorrowedFd<'_>| {
            driver
                .pidfd_getfd(pidfd.as_fd(), std::os::fd::AsRawFd::as_raw_fd(&fd))
                .unwrap()
        };
        let (first, second) = (drained(app.kfd_fd().unwrap()), drained(second.as_fd()));
        let dirs = tempfile::tempdir().unwrap();
        let config = DumpConfig {
            topology_root: sim.sysfs_root(),
            options: Options::default(),
            unpause_early: false,
            shm_dir: dirs.path().to_path_buf(),
            guardian_log_dir: None,
            guardian_driver: GuardianDriver::host(),
        };
        let images = tempfile::tempdir().unwrap();
        let store = amdgpu_image::DirStore::open_dir(images.path()).unwrap();
        let mut dumper = Dumper::new(driver.clone(), config);
        dumper.dump_kfd(&store, first.as_fd(), 1).unwrap();
        assert_eq!(sim.kfd_state(app.pid()).unwrap().eviction_levels, [1]);
        let err = dumper.dump_kfd(&store, second.as_fd(), 2).unwrap_err();
        assert!(
            err.to_string().contains("holds a second /dev/kfd file"),
            "{err}"
        );
        assert_eq!(
            sim.kfd_state(app.pid()).unwrap().eviction_levels,
            [1],
            "the second file's PROCESS_INFO paused the process again"
        );
        assert_eq!(dumper.unpause_all().unwrap(), 1);
        let state = sim.kfd_state(app.pid()).unwrap();
        assert!(state.queues_running(), "{state:?}");
    }

    #[test]
    fn a_failed_early_unpause_keeps_the_process_paused_on_record_and_its_guardian_armed() {
        let sim = kfd_sim::Sim::synthetic(1, kfd_sim::SimConfig::default()).unwrap();
        let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
        app.step().unwrap();
        let dirs = tempfile::tempdir().unwrap();
        std::fs::create_dir(dirs.path().join("shm")).unwrap();
        let images = tempfile::tempdir().unwrap();
        let store = amdgpu_image::DirStore::open_dir(images.path()).unwrap();
        let (mut dumper, fd) = early_unpausing_dumper(&sim, &app, &dirs);
        // Every UNPAUSE from here on fails.
        for nth in 1..=4 {
            sim.inject(kfd_sim::FaultSpec {
                op: "CRIU_OP:UNPAUSE".into(),
                nth,
                errno: kfd_sim::Errno(libc::EIO),
            });
        }
        let err = dumper.dump_kfd(&store, fd.as_fd(), 1).unwrap_err();
        assert!(err.to_string().contains("unpausing"), "{err}");
        // Recorded, so the dump's end tries again; still guarded.
        assert_eq!(dumper.paused(), 1);
        let guardian = dumper.paused[0]
            .guardian
            .as_ref()
            .map(Guardian::pid)
            .expect("a guardian");
        assert!(running(guardian));
        assert!(dumper.unpause_all().is_err());
        assert_eq!(dumper.paused(), 1);
        // The dumper's teardown fails to unpause too: the guardian is left
        // watching (it recovers the process when the dumper's process
        // ends), not told that the dump ended.
        drop(dumper);
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(running(guardian), "the guardian stood down");
        assert!(sim.kfd_state(app.pid()).unwrap().queues_paused);
        // The guardian this test started, by its pid.
        let pid = rustix::process::Pid::from_raw(guardian as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    }

    fn report(entries: &[usize]) -> transfer::ContentReport {
        transfer::ContentReport {
            checksums: entries.iter().map(|&e| (e, 0x1234 + e as u64)).collect(),
            digests: entries.iter().map(|&e| (e, vec![e as u128])).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn contents_are_attached_to_their_entries_and_a_stray_entry_is_an_error() {
        let mut entries = vec![KfdBoEntry::default(); 3];
        assert_eq!(
            attach_contents(&mut entries, &report(&[0, 2])).ok(),
            Some(false)
        );
        assert_eq!(entries[0].content_checksum, Some(0x1234));
        assert_eq!(entries[1].content_checksum, None);
        assert_eq!(entries[2].content_checksum, Some(0x1236));
        assert!(entries[2].chunk_digests.is_some());
        // An entry the image does not have: the transfer and the image
        // disagree, and the image must not be written as if they did not.
        let mut entries = vec![KfdBoEntry::default(); 3];
        let err = attach_contents(&mut entries, &report(&[0, 3])).unwrap_err();
        assert!(
            err.to_string().contains("bo entry 3") && err.to_string().contains("3 bo entries"),
            "{err}"
        );
        // The same entry twice.
        let err = attach_contents(&mut entries, &report(&[1, 1])).unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
    }

    #[test]
    fn a_render_bo_without_exactly_one_checksum_is_an_error() {
        assert!(render_chunks(report(&[0])).is_ok());
        for bad in [&[][..], &[0, 0][..], &[1][..]] {
            let err = render_chunks(report(bad)).unwrap_err();
            assert!(err.to_string().contains("DRM BO"), "{bad:?}: {err}");
        }
    }
}
