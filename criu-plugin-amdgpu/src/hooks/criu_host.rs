//! What CRIU offers the plugin in one process role ([`CriuHost`]): the
//! image store, the inventory, the fd store, the restored tasks' fd floor
//! and wake-ups, and the facts a parallel restore and the dump guardian
//! need. The `.so` answers from CRIU's services, the emulator from its own
//! model; this module never calls either.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::PathBuf;

use amdgpu_checkpoint::guardian::GuardianDriver;
use amdgpu_checkpoint::parallel::{Copier, ParallelFacts};
use amdgpu_checkpoint::Error;
use amdgpu_image::ImageStore;

use crate::criu::InventoryGate;

/// What CRIU offers the plugin in one process role.
pub trait CriuHost {
    /// Where images live.
    type Store: ImageStore + Sync;

    /// The image store, for writing (`dump`) or reading.
    fn image_store(&self, dump: bool) -> Result<Self::Store, Error>;

    /// `add_inventory_plugin("amdgpu_plugin")`: the restore of these images
    /// needs this plugin.
    fn add_inventory_plugin(&self) -> std::io::Result<()>;

    /// Whether the inventory of the images being restored names this plugin
    /// (always true for CRIU older than inventory gating).
    fn inventory_names_plugin(&self) -> bool;

    /// What the inventory of the images being restored says about this
    /// plugin. The default knows only [`CriuHost::inventory_names_plugin`]:
    /// named counts as [`InventoryGate::Predates`], so a host that cannot
    /// tell an explicit listing never has a restore refused for it.
    fn inventory_gate(&self) -> InventoryGate {
        if self.inventory_names_plugin() {
            InventoryGate::Predates
        } else {
            InventoryGate::Omits
        }
    }

    /// CRIU's plugin options (`--plugin-option`, every plugin's entries in
    /// order), copied; `Ok(None)` when CRIU has no `criu_plugin_get_options`
    /// (the default: the environment alone configures the plugin).
    fn plugin_options(&self) -> std::io::Result<Option<Vec<String>>> {
        Ok(None)
    }

    /// A few words on the host for the plugin's `init` line (CRIU's
    /// `max_hooks` and how it was found); `None` adds nothing.
    fn describe(&self) -> Option<String> {
        None
    }

    /// The task and its fd number that hold the file CRIU passed to
    /// `DUMP_EXT_FILE` as `fd` (a copy CRIU drained from the task), when
    /// the host knows (a host that drives the dump itself). `None` (the
    /// default, CRIU tells plugins nothing of the kind): the plugin finds
    /// the task among those this process traces. Asked once per file; the
    /// answer names the file in log lines and tells the dump which process
    /// the file's `/dev/kfd` belongs to.
    fn task_fd(&self, fd: BorrowedFd<'_>) -> Option<TaskFd> {
        let _ = fd;
        None
    }

    /// `find_unused_fd_pid(pid)`: a free fd number above every fd the
    /// restored task will own.
    fn find_unused_fd(&self, pid: u32) -> Option<i32>;

    /// The pid of the process this hook runs in, as CRIU restores it: in a
    /// restored task, its pid in its own pid namespace (`getpid()`), which
    /// is the pid its KFD image records and, when the tree has one pid
    /// namespace, the pid `find_unused_fd_pid` knows the task by. `None`
    /// when the host cannot tell.
    ///
    /// Caveat: in a task of a nested pid namespace CRIU's `vpid` (the pid in
    /// the namespace of the tree's root) differs from `getpid()`, so
    /// `find_unused_fd_pid` of this pid names another task or none — the
    /// same limit the C plugin has with the KFD image's pid.
    fn current_pid(&self) -> Option<u32>;

    /// `fdstore_add(fd)`: parks a copy of `fd` in CRIU's fd store (kept by
    /// CRIU's main process for every restored task) and returns its id.
    /// Hosts without an fd store answer `ENOSYS` (the default).
    fn fdstore_add(&self, fd: BorrowedFd<'_>) -> std::io::Result<i32> {
        let _ = fd;
        Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// `fdstore_get(id)`: a new fd of the file parked under `id`. Hosts
    /// without an fd store answer `ENOSYS` (the default).
    fn fdstore_get(&self, id: i32) -> std::io::Result<OwnedFd> {
        let _ = id;
        Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// Wakes restored task `pid` (as [`CriuHost::current_pid`] names it)
    /// if it sleeps waiting for a file: CRIU's `set_fds_event`. A task whose
    /// file asked for a retry sleeps until another task sends it a file;
    /// one that waits for a buffer another task re-creates is woken by that
    /// task this way. The default, for hosts whose tasks do not sleep
    /// between retries, does nothing.
    fn wake_task(&self, pid: u32) {
        let _ = pid;
    }

    /// How long a restored task may wait, without the retry protocol
    /// (CRIU before 4.3), for a buffer another task re-creates: CRIU restores
    /// its tasks at the same time, so the creator usually runs meanwhile.
    /// `None` (the default, for hosts that restore one task after another)
    /// fails such a file at once.
    fn buffer_wait(&self) -> Option<std::time::Duration> {
        None
    }

    /// What CRIU says about this restore for the choice of parallel
    /// restore (asked in the main process at `init(RESTORE)`). The default,
    /// nothing known, keeps BO contents restored in the tasks.
    fn parallel_facts(&self) -> ParallelFacts {
        ParallelFacts::default()
    }

    /// The driver and images directory the parallel restore worker copies
    /// with, in CRIU's main process (asked at `POST_FORKING`); `None` when
    /// the host cannot give them.
    fn copier(&self) -> Option<Copier> {
        None
    }

    /// The directory the dump guardian logs to (the dump log's); `None`
    /// (the default, for hosts whose processes are not host processes)
    /// starts no guardian.
    fn guardian_log_dir(&self) -> Option<PathBuf> {
        None
    }

    /// How the dump guardian reaches the machine (see
    /// [`GuardianDriver`]); the default is the host's kernel.
    fn guardian_driver(&self) -> GuardianDriver {
        GuardianDriver::host()
    }
}

/// A file as its task holds it: the task's pid (as CRIU's dumper sees it)
/// and the fd number there; the engine's
/// [`Holder`](amdgpu_checkpoint::identify::Holder), which the dump of the
/// file is handed.
pub use amdgpu_checkpoint::identify::Holder as TaskFd;
