//! The restore's hooks: `RESTORE_INIT` (the buffer handle table the
//! restored tasks share), `POST_FORKING` (the parallel restore worker),
//! `RESTORE_EXT_FILE` (the engine's [`Restorer`], which waits for buffers
//! other tasks re-create and wakes the tasks waiting for its own, the way
//! the host allows; its answers mapped to CRIU's retry flag here),
//! `UPDATE_VMA_MAP` and `RESUME_DEVICES_LATE`.

use std::ffi::c_int;
use std::os::fd::{BorrowedFd, IntoRawFd};
use std::sync::Arc;

use kfd::Driver;

use amdgpu_checkpoint::handles::HandleTable;
use amdgpu_checkpoint::parallel::ParallelRestore;
use amdgpu_checkpoint::restore::{
    resume, shared_buffer_count, BufferWait, RestoreConfig, Restored, Restorer, Resume, Sharing,
    TaskIdentity,
};
use amdgpu_checkpoint::vma::VmaAnswer;
use amdgpu_checkpoint::Error;

use super::{fail, log_parallel_outcome, CriuHost, Plugin, NOT_MINE};
use crate::host::Stage;
use crate::{log_debug, log_error, log_info};

/// What `UPDATE_VMA_MAP` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmaUpdate {
    /// Return 1: CRIU maps `fd` (if >= 0; CRIU then owns it) at page offset
    /// `pgoff` instead of the saved one.
    Translated {
        /// The new offset.
        pgoff: u64,
        /// The fd to map, or -1 to let CRIU open the saved path.
        fd: c_int,
    },
    /// Return 0: keep the saved offset and path.
    Unchanged,
    /// A negative errno (`-ENOTSUP` for paths that are not ours).
    Errno(c_int),
}

impl<D: Driver + Clone + 'static, H: CriuHost> Plugin<D, H> {
    /// How log lines name file `id` at restore: in the restored task, with
    /// its pid.
    fn restored_file(&self, id: c_int) -> String {
        match self.host.current_pid() {
            Some(pid) => format!("file {id} (pid {pid})"),
            None => format!("file {id}"),
        }
    }

    /// The buffer handle table shared by the restored tasks, once
    /// `RESTORE_INIT` made it.
    pub fn handle_table(&self) -> Option<&HandleTable> {
        self.handles.as_deref()
    }

    /// `RESTORE_INIT()` in CRIU's main process, before it forks the tasks:
    /// makes the buffer handle table they share when the images share
    /// buffers between files (dma-buf files, render nodes), sized from the
    /// image set through the image store (so `--stream` and `--work-dir`
    /// work; a stream, which cannot be listed, gets [`UNSIZED_CAPACITY`](amdgpu_checkpoint::handles::UNSIZED_CAPACITY)).
    /// Not ours when nothing is shared.
    pub fn restore_init(&mut self) -> c_int {
        self.make_handle_table("RESTORE_INIT")
    }

    /// The buffer handle table (see [`Plugin::restore_init`]), made in
    /// `hook`; not ours when nothing is shared.
    pub(super) fn make_handle_table(&mut self, hook: &str) -> c_int {
        if self.active().is_none() || self.stage != Stage::Restore || self.handles.is_some() {
            return NOT_MINE;
        }
        let capacity = match self
            .host
            .image_store(false)
            .and_then(|store| shared_buffer_count(&store))
        {
            Ok(Some(capacity)) => capacity,
            Ok(None) => return NOT_MINE,
            Err(e) => return fail(hook, "sizing the buffer handle table", &e),
        };
        match HandleTable::shared(capacity) {
            Ok(table) => {
                log_info!(
                    "buffer handle table for {capacity} buffers shared by the restored tasks"
                );
                self.handles = Some(Arc::new(table));
                0
            }
            Err(e) => fail(
                hook,
                "making the buffer handle table",
                &Error::io("mapping shared memory")(e),
            ),
        }
    }

    /// `POST_FORKING()`: BO contents are restored inside the restored task,
    /// so there is no background work to start.
    pub fn post_forking(&mut self) -> c_int {
        if self.active().is_none() || self.stage != Stage::Restore {
            return NOT_MINE;
        }
        let Some(parallel) = self.parallel.as_mut() else {
            return NOT_MINE;
        };
        // The tasks were forked with parallel restore on: without the worker
        // nobody would copy their BOs, so this restore must not go on.
        let Some(copier) = self.host.copier() else {
            log_error!(
                "POST_FORKING: no images directory or device access for the parallel restore worker"
            );
            return -libc::EIO;
        };
        match parallel.start(copier, self.options.clone()) {
            Ok(()) => 0,
            Err(e) => fail("POST_FORKING", "parallel restore", &e),
        }
    }

    /// `RESTORE_EXT_FILE(id)`: the new fd (CRIU owns it) or an errno; the
    /// second value is `retry_needed`: a render node whose task's KFD file
    /// comes later, or a file importing a buffer whose exporter has not run
    /// yet, answers 0 with a retry (as the C plugin does).
    pub fn restore_ext_file(&mut self, id: c_int) -> (c_int, bool) {
        match self.restore_file(id) {
            Ok(Restored::File(fd)) => (fd.into_raw_fd(), false),
            Ok(Restored::NotOurs) => (NOT_MINE, false),
            Ok(Restored::WaitForKfd | Restored::WaitForBuffer) => (0, true),
            Err(errno) => (errno, false),
        }
    }

    /// [`Plugin::restore_ext_file`] with the fd as an
    /// [`OwnedFd`](std::os::fd::OwnedFd); `Err` carries the errno of a
    /// failure (logged). [`Restored::WaitForKfd`] and
    /// [`Restored::WaitForBuffer`] are only answered when the host has the
    /// retry protocol.
    pub fn restore_file(&mut self, id: c_int) -> Result<Restored, c_int> {
        if self.active().is_none() || self.stage != Stage::Restore {
            return Ok(Restored::NotOurs);
        }
        let name = self.restored_file(id);
        let store = self
            .host
            .image_store(false)
            .map_err(|e| fail("RESTORE_EXT_FILE", &name, &e))?;
        let config = RestoreConfig {
            topology_root: self.config.topology_root.clone(),
            options: self.options.clone(),
            shm_dir: self.config.shm_dir.clone(),
        };
        let driver = &self.driver;
        let restorer = self
            .restorer
            .get_or_insert_with(|| Restorer::new(driver.clone(), config));
        // A restored task is a fork of the main process: its copy of the
        // parallel restore plan says where the contents go.
        if let Some(socket) = self.parallel.as_ref().map(ParallelRestore::socket) {
            restorer.hand_contents_to(socket.clone());
        }
        let host = &self.host;
        let find_unused_fd = |pid: u32| host.find_unused_fd(pid);
        let fdstore_add = |fd: BorrowedFd<'_>| host.fdstore_add(fd);
        let fdstore_get = |store_id: i32| host.fdstore_get(store_id);
        let wake_task = |pid: u32| host.wake_task(pid);
        // CRIU puts a task whose file asks for a retry to sleep until
        // another task sends it a file; the buffer's creator wakes it
        // instead (`wake_task`).
        let wait = if self.config.has_restore_retry {
            BufferWait::Retry
        } else {
            host.buffer_wait()
                .map_or(BufferWait::Never, BufferWait::Poll)
        };
        let sharing = Sharing {
            table: self.handles.as_deref(),
            fdstore_add: &fdstore_add,
            fdstore_get: &fdstore_get,
            wait,
            wake_task: &wake_task,
        };
        let task = TaskIdentity {
            pid: host.current_pid(),
            find_unused_fd: &find_unused_fd,
        };
        match restorer.restore_file(&store, id as u32, &task, &sharing) {
            Ok(Restored::File(fd)) => {
                log_info!("{name}: restored");
                Ok(Restored::File(fd))
            }
            Ok(Restored::WaitForKfd) if !self.config.has_restore_retry => {
                log_error!(
                    "RESTORE_EXT_FILE: {name} comes before its task's /dev/kfd file, \
                     which this CRIU cannot retry (needs CRIU after v4.2)"
                );
                Err(-libc::EINVAL)
            }
            Ok(Restored::WaitForBuffer) if !self.config.has_restore_retry => {
                log_error!(
                    "RESTORE_EXT_FILE: {name} imports a buffer whose creator {}, which \
                     this CRIU cannot retry (needs CRIU after v4.2)",
                    match wait {
                        BufferWait::Poll(limit) => format!("did not restore it within {limit:?}"),
                        _ => "was not restored yet".to_owned(),
                    }
                );
                Err(-libc::EINVAL)
            }
            other => other.map_err(|e| fail("RESTORE_EXT_FILE", &name, &e)),
        }
    }

    /// `UPDATE_VMA_MAP(path, addr, old_pgoff)`.
    pub fn update_vma_map(&self, path: &[u8], addr: u64, old_pgoff: u64) -> VmaUpdate {
        if self.active().is_none() {
            return VmaUpdate::Errno(NOT_MINE);
        }
        let Some(restorer) = self.restorer.as_ref() else {
            return VmaUpdate::Errno(NOT_MINE);
        };
        match restorer.translations().answer(path, addr, old_pgoff) {
            VmaAnswer::NotOurs => VmaUpdate::Errno(NOT_MINE),
            VmaAnswer::Unchanged => {
                log_debug!(
                    "UPDATE_VMA_MAP: no translation for {} at {addr:#x} offset {old_pgoff:#x}",
                    String::from_utf8_lossy(path)
                );
                VmaUpdate::Unchanged
            }
            VmaAnswer::Translated { new_offset, file } => {
                let fd = match file.map(|f| f.try_clone_to_owned()) {
                    None => -1,
                    Some(Ok(fd)) => fd.into_raw_fd(),
                    Some(Err(e)) => {
                        log_error!(
                            "UPDATE_VMA_MAP: cannot duplicate the render fd for {addr:#x}: {e}"
                        );
                        return VmaUpdate::Errno(-e.raw_os_error().unwrap_or(libc::EIO));
                    }
                };
                VmaUpdate::Translated {
                    pgoff: new_offset,
                    fd,
                }
            }
        }
    }

    /// `RESUME_DEVICES_LATE(pid)` in the main restorer: `CRIU_OP RESUME`;
    /// pids without KFD state are not ours.
    pub fn resume_devices_late(&mut self, pid: c_int) -> c_int {
        if self.active().is_none() || self.stage != Stage::Restore || pid <= 0 {
            return NOT_MINE;
        }
        if let Some(result) = self.parallel.as_mut().and_then(ParallelRestore::finish) {
            if !log_parallel_outcome("RESUME_DEVICES_LATE", result) {
                // The BOs do not hold their checkpointed contents: the
                // process must not run as if restored. CRIU only logs this
                // answer at debug level and releases the task with its GPU
                // queues stopped, so the error line above is what tells the
                // operator (see the crate README).
                log_error!(
                    "RESUME_DEVICES_LATE: pid {pid}: GPU queues are NOT resumed because its BO contents \
                     were not restored; kill the process"
                );
                return -libc::EIO;
            }
        }
        match resume(self.driver.clone(), pid as u32) {
            Ok(Resume::Resumed) => {
                log_info!("pid {pid}: GPU queues resumed");
                0
            }
            Ok(Resume::NotOurs) => NOT_MINE,
            Err(e) => fail("RESUME_DEVICES_LATE", &format!("pid {pid}"), &e),
        }
    }
}
