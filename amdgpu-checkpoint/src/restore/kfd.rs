//! Restoring a KFD image (`amdgpu-kfd-<id>.img`): validate it, map its GPUs
//! onto local ones, open their render nodes, re-create the process with
//! `CRIU_OP RESTORE`, bring the BO contents back (here, or handed to CRIU's
//! main process), record the mmap-offset translations and recreate
//! hsakmt's shared memory.
//!
//! This module never resumes the process's queues (`resume` does, later,
//! in CRIU's main process), and never decides how buffers are shared: it
//! publishes the BOs that other files may use through `sharing`.

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use amdgpu_image::topology::checkpointed_topology;
use amdgpu_image::{flags, CriuKfd, ImageStore, ValidatedKfd};
use amdgpu_topology::mapping::map_topologies_pinned;
use kfd::{Driver, Kfd};
use kfd_sys::{kfd_criu_bo_bucket, kfd_criu_device_bucket, KFD_INVALID_FD};

use super::sharing::{publish, uses_shared_buffers};
use super::{KfdRestore, Restorer, Sharing};
use crate::dump::{local_topology, HSAKMT_SHM};
use crate::error::{Error, Incompatibility};
use crate::transfer;
use crate::vma::Translation;

/// hsakmt's named semaphore (`/dev/shm/sem.hsakmt_semaphore`).
pub const HSAKMT_SEMAPHORE: &CStr = c"hsakmt_semaphore";

impl<D: Driver + Clone> Restorer<D> {
    /// `RESTORE_EXT_FILE` of a KFD image: the new `/dev/kfd`.
    pub(super) fn restore_kfd<S: ImageStore + Sync>(
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
        crate::kfd_version::ImageKfd::from_fields(
            msg.kfd_major_version,
            msg.kfd_minor_version,
            msg.kfd_required_minor,
        )
        .check_restore(version)?;
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
        let device_map = self.config.options.device_map();
        let pins = device_map
            .resolve(&checkpointed, &local)
            .map_err(|e| Error::Incompatible {
                problems: vec![e.into()],
            })?;
        if !pins.is_empty() {
            log::info!(
                "file {id}: device map {device_map} pins {}",
                pins.iter()
                    .map(|(s, d)| format!("GPU {s:#x} to local GPU {d:#x}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let mapping =
            map_topologies_pinned(&checkpointed, &local, self.config.options.checks(), &pins)
                .map_err(|e| Error::Incompatible {
                    problems: vec![e.into()],
                })?
                .into_mapping()
                .map_err(|reasons| Error::Incompatible {
                    problems: reasons.into_iter().map(Incompatibility::Mismatch).collect(),
                })?;

        let mut devices = Vec::new();
        let mut gpus = Vec::new();
        for entry in image.gpus() {
            let local_id = *mapping
                .gpu_map
                .get(&entry.gpu_id)
                .ok_or(Error::GpuUnmapped {
                    gpu_id: entry.gpu_id,
                })?;
            let node = local
                .gpus()
                .find(|n| n.gpu_id == local_id)
                .ok_or(Error::LocalGpuVanished { gpu_id: local_id })?;
            let minor = node.props.drm_render_minor;
            let pci = amdgpu_topology::device_map::pci_address(node);
            let file = self.render_file(local_id, minor, pci.as_deref())?;
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
            return Err(Error::RestoredBoCount {
                restored: restored.len(),
                expected: buckets.len(),
            });
        }

        // With parallel restore CRIU's main process copies the contents
        // while this task carries on ([`crate::parallel`]).
        // An image whose chunks are partly stored elsewhere (parent images,
        // deduplication) is restored here: the main process's worker reads
        // one pages file per GPU, not a chain.
        let hand_off = self.hand_off.as_ref().filter(|_| {
            let chained = image.has_references();
            if chained {
                log::info!(
                    "file {id}: chunks come from parent images or other images of the set: \
                     contents restored in the task, not by the parallel worker"
                );
            }
            !chained
        });
        // A task CRIU restored into a network namespace of its own (a
        // container's) cannot reach the main process's abstract socket: it
        // restores its contents itself, as without parallel restore.
        let reached = hand_off.and_then(|socket| match crate::parallel::connect(socket) {
            Ok(stream) => Some((socket, stream)),
            Err(e) => {
                log::info!(
                    "file {id}: CRIU's main process is out of reach at {socket} ({e}; the task \
                     may sit in another network namespace): contents restored in the task"
                );
                None
            }
        });
        let content_bytes = match reached {
            Some((socket, stream)) => {
                crate::parallel::hand_off(stream, socket, &image, &gpus, &restored)?
            }
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

    /// hsakmt's shared memory, as the C plugin restores it: created with
    /// the image's size and magic only when the machine has none. An
    /// existing object belongs to the ROCm processes running here, which
    /// may map it: it is never resized (a process mapping past a new end
    /// would take SIGBUS) nor rewritten (their shared table). Validation
    /// bounded `size`.
    fn recreate_hsakmt_shm(&self, size: u64, magic: u32) -> Result<(), Error> {
        if size == 0 {
            return Ok(());
        }
        let path = self.config.shm_dir.join(HSAKMT_SHM);
        // O_EXCL: an object another process makes meanwhile is theirs.
        let created = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&path);
        match created {
            Ok(file) => {
                log::warn!(
                    "{} was missing and is recreated ({size} bytes); GPU performance counters \
                     may be lost",
                    path.display()
                );
                let magic = magic.to_ne_bytes();
                let written = file.set_len(size).and_then(|()| {
                    let len = usize::try_from(size).map_or(magic.len(), |s| s.min(magic.len()));
                    file.write_all_at(&magic[..len], 0)
                });
                if let Err(e) = written {
                    // Not left half made for the next process to find.
                    let _ = std::fs::remove_file(&path);
                    return Err(Error::io(format!("sizing {}", path.display()))(e));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                log::debug!(
                    "{} exists: left as it is (the running ROCm processes' own)",
                    path.display()
                );
            }
            Err(e) => return Err(Error::io(format!("creating {}", path.display()))(e)),
        }
        if self.config.shm_dir == Path::new("/dev/shm") {
            crate::sys::ensure_named_semaphore(HSAKMT_SEMAPHORE)
                .map_err(Error::io("creating hsakmt's semaphore"))?;
        }
        Ok(())
    }
}
