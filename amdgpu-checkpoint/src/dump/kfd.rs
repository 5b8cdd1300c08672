//! A process's `/dev/kfd` file: the version gate on a private `/dev/kfd`,
//! one KFD file per process on KFD 1.19 and later, `PROCESS_INFO` (which
//! pauses the process's queues), `CHECKPOINT`, and the `CriuKfd` message
//! with every GPU named by its user id. A failure after the pause unpauses
//! the process before the error is returned.
//!
//! This module never copies BO contents itself: `contents` does, on the
//! dumper's thread or on one of its own.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::sync::Arc;

use ::kfd::{Driver, Kfd, ProcessInfo};
use amdgpu_image::topology::device_entry;
use amdgpu_image::{flags, CriuKfd, ImageStore, KfdBoEntry, FORMAT_VERSION, PRODUCER};

use super::contents::{finish_kfd, PreparedKfd, Transfer};
use super::hsakmt::probe_hsakmt_shm;
use super::paused::{mark_in_progress, Paused};
use super::topology::{local_topology, process_view};
use super::{Dumper, KfdDump};
use crate::error::Error;
use crate::identify::DrainedFile;
use crate::transfer;

/// A process as the KFD-file bookkeeping names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum KfdOwner {
    /// Its pid as the dumper's driver (and the host) names processes: the
    /// process holding the file, named before it is paused.
    Holder(u32),
    /// Its pid in its own pid namespace, as `PROCESS_INFO` reports it
    /// (only for files whose holder could not be named).
    Kfd(u32),
}

impl<D: Driver + Clone> Dumper<D> {
    /// Dumps the KFD state behind `file` (the target's `/dev/kfd`, drained
    /// into the dumper, with the process holding it as the caller
    /// identified it, [`DrainedFile::identify`] or the host) as CRIU file
    /// `id`: its BO contents and image are written before this returns.
    pub fn dump_kfd<S: ImageStore + Sync>(
        &mut self,
        store: &S,
        file: DrainedFile<'_>,
        id: u32,
    ) -> Result<KfdDump, Error> {
        self.dump_kfd_then(store, file, id, |dumper, prepared| {
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
        file: DrainedFile<'_>,
        id: u32,
    ) -> Result<KfdDump, Error>
    where
        D: 'static,
    {
        let dir = match store.as_dir() {
            Some(dir) if !self.config.unpause_early => dir,
            _ => return self.dump_kfd(store, file, id),
        };
        self.dump_kfd_then(store, file, id, |dumper, prepared| {
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
        file: DrainedFile<'_>,
        id: u32,
        finish: impl FnOnce(&mut Self, PreparedKfd) -> Result<Option<u64>, Error>,
    ) -> Result<KfdDump, Error> {
        self.kfd_version()?;
        let own = file
            .fd
            .try_clone_to_owned()
            .map_err(Error::io("duplicating the KFD fd"))?;
        let target = Kfd::from_fd(self.driver.clone(), own);
        // The file's process, named before it is paused: a second KFD file
        // of a process paused already is refused before PROCESS_INFO nests
        // a second pause (KFD counts pauses, but its UNPAUSE answers EINVAL
        // once unpaused, so the second level would stay for good).
        let holder = file.holder.map(|h| h.pid);
        if let Some(holder) = holder {
            self.refuse_second_file_of(KfdOwner::Holder(holder), id)?;
        }
        // Before the pause, so that no moment of it goes unmarked.
        let in_progress = mark_in_progress(store, id);
        let info = target.process_info().map_err(|source| {
            if source.errno() == libc::ETIME {
                // The kernel rolled its eviction back: nothing to unpause.
                Error::QueuePreemptionTimeout { source }
            } else {
                Error::kfd("pausing the process (CRIU_OP PROCESS_INFO)")(source)
            }
        })?;
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
    /// This host's KFD interface version, read once through a private
    /// `/dev/kfd`; an interface without CRIU is an error.
    pub(super) fn kfd_version(&mut self) -> Result<kfd::Version, Error> {
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

    /// Refuses the `/dev/kfd` file `id` of process `owner` when the
    /// process's other KFD file was dumped already and the KFD is 1.19 or
    /// later, where either file may carry a second KFD context
    /// (`AMDKFD_IOC_CREATE_PROCESS`) no CRIU can save (see
    /// [`crate::kfd_version`]); records the file otherwise.
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
                return Err(Error::GpuNotInTopology {
                    gpu_id: dev.actual_gpu_id,
                    root: self.config.topology_root.clone(),
                });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::DumpConfig;
    use crate::guardian::GuardianDriver;
    use crate::options::Options;
    use kfd_sim::workload::{Profile, Workload};
    use std::os::fd::BorrowedFd;

    #[test]
    fn a_second_kfd_file_is_refused_before_its_process_is_paused_again() {
        // Files whose process the caller named (DrainedFile::identify): the
        // engine must tell the second /dev/kfd file of a process it paused
        // already before PROCESS_INFO pauses it a second time (KFD nests
        // pauses, and one UNPAUSE would then leave its queues evicted for
        // good).
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
        let file = DrainedFile::identify(&driver, first.as_fd());
        dumper.dump_kfd(&store, file, 1).unwrap();
        assert_eq!(sim.kfd_state(app.pid()).unwrap().eviction_levels, [1]);
        let file = DrainedFile::identify(&driver, second.as_fd());
        let err = dumper.dump_kfd(&store, file, 2).unwrap_err();
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
}
