//! The plugin's answers to CRIU's hooks, generic over the driver and over
//! what CRIU provides ([`CriuHost`]).
//!
//! [`Plugin`] holds the state of one CRIU process role (the dumper, the main
//! restorer, or a restored task — which starts as a fork of the main
//! restorer, see [`Plugin::forked_task`]) and answers each hook in CRIU's
//! convention: 0 or a value on success, a negative errno on failure, and
//! [`NOT_MINE`] (`-ENOTSUP`) for every fd, VMA, path, pid or image id that
//! carries no KFD state, so other plugins in CRIU's chain get their turn.
//! The `.so` instantiates it over the real kernel and CRIU's services; the
//! emulator over `kfd-sim` and an images directory.
//!
//! Errors are logged here, once, with the hook and the object they concern.

use std::collections::BTreeSet;
use std::ffi::c_int;
use std::os::fd::{BorrowedFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use kfd::{DeviceNumber, Driver};

use amdgpu_checkpoint::dump::{discard_images, DumpConfig, Dumper};
use amdgpu_checkpoint::guardian::GuardianDriver;
use amdgpu_checkpoint::handles::HandleTable;
use amdgpu_checkpoint::identify::{Devices, FdClass};
use amdgpu_checkpoint::options::{Source, MAX_BUFFER_SIZE, OPTIONS};
use amdgpu_checkpoint::parallel::{Copier, ParallelFacts, ParallelRestore, WorkerReport};
use amdgpu_checkpoint::restore::{
    resume, shared_buffer_count, RestoreConfig, Restored, Restorer, Resume, Sharing, TaskIdentity,
};
use amdgpu_checkpoint::vma::VmaAnswer;
use amdgpu_checkpoint::{Error, Options};
use amdgpu_image::ImageStore;

pub use crate::criu::InventoryGate;
use crate::host::Stage;
use crate::{log_debug, log_error, log_info, log_warn};

/// `-ENOTSUP`: "not mine", the next plugin in CRIU's chain is asked.
pub const NOT_MINE: c_int = -libc::ENOTSUP;

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
    /// `DUMP_EXT_FILE` as `fd` (a copy CRIU drained from the task), for log
    /// lines; `None` when the host cannot tell.
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

/// A file as its task holds it: the task's pid and the fd number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskFd {
    /// The task's pid (as CRIU's dumper sees it).
    pub pid: u32,
    /// The fd number in that task.
    pub fd: i32,
}

/// Paths and host capabilities that shape the plugin's behaviour.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// The KFD topology root.
    pub topology_root: PathBuf,
    /// The POSIX shared-memory directory.
    pub shm_dir: PathBuf,
    /// Whether CRIU calls `DUMP_DEVICES_LATE` (else processes are unpaused
    /// right after their dump).
    pub has_dump_devices_late: bool,
    /// Whether CRIU passes `retry_needed` to `RESTORE_EXT_FILE` (else a
    /// render node restored before its task's `/dev/kfd` is an error).
    pub has_restore_retry: bool,
}

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

/// The plugin in one CRIU process role.
pub struct Plugin<D: Driver + Clone, H: CriuHost> {
    driver: D,
    host: H,
    stage: Stage,
    config: PluginConfig,
    options: Options,
    /// Restore of images that do not name this plugin in the inventory.
    disabled: bool,
    /// `init` failed: the images need GPUs this machine does not have.
    refused: bool,
    /// `None`: no `/dev/kfd` on this machine; every hook is not ours.
    devices: Option<Devices>,
    added_to_inventory: bool,
    dumper: Option<Dumper<D>>,
    restorer: Option<Restorer<D>>,
    /// The buffer handle table `RESTORE_INIT` made before fork, shared by
    /// every restored task.
    handles: Option<Arc<HandleTable>>,
    /// CRIU file ids `DUMP_EXT_FILE` worked on: their images are removed
    /// when `exit` reports a failed dump.
    dumped_ids: BTreeSet<u32>,
    /// Parallel restore, when chosen at `init`: the main restorer's runs
    /// its worker; a restored task's copy names where it hands BO
    /// contents off.
    parallel: Option<ParallelRestore>,
}

impl<D: Driver + Clone, H: CriuHost> std::fmt::Debug for Plugin<D, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("stage", &self.stage)
            .field("disabled", &self.disabled)
            .field("devices", &self.devices)
            .field("dumper", &self.dumper)
            .field("restorer", &self.restorer)
            .field("parallel", &self.parallel)
            .finish_non_exhaustive()
    }
}

/// Logs what the parallel restore worker did; false when a copy failed
/// (each failure logged at error level).
fn log_parallel_outcome(hook: &str, result: Result<WorkerReport, Error>) -> bool {
    match result {
        Ok(report) => {
            let mut ok = true;
            for (id, e) in report.failures() {
                ok = false;
                match id {
                    Some(id) => log_error!("{hook}: parallel restore of file {id} failed: {e}"),
                    None => log_error!("{hook}: parallel restore failed: {e}"),
                }
            }
            if ok {
                log_info!(
                    "parallel restore: {} bytes of {} KFD files copied",
                    report.bytes(),
                    report.commands.len()
                );
            }
            ok
        }
        Err(e) => {
            log_error!("{hook}: parallel restore: {e}");
            false
        }
    }
}

/// Whether `err` is a KFD ioctl the device does not know (`ENOTTY`): the
/// node at `/dev/kfd` belongs to another driver.
fn answers_no_kfd_ioctl(err: &Error) -> bool {
    matches!(err, Error::Kfd { source, .. } if source.errno() == libc::ENOTTY)
}

fn fail(hook: &str, what: &str, err: &Error) -> c_int {
    log_error!("{hook}: {what}: {err}");
    err.errno()
}

impl<D: Driver + Clone + 'static, H: CriuHost> Plugin<D, H> {
    /// `init(stage)`: probes `/dev/kfd`, applies the inventory gate at
    /// restore, and takes the options: `options` (the environment's, read
    /// by the caller) with the host's plugin options read over them.
    ///
    /// On a machine without `/dev/kfd` it logs one line here and one at
    /// `exit`; a restore the images do not need this plugin for logs one
    /// line in all. A restore of images whose inventory lists this plugin
    /// on a machine without `/dev/kfd` is refused ([`Plugin::refused`]):
    /// their GPU files cannot be restored here.
    pub fn init(driver: D, host: H, stage: Stage, config: PluginConfig, options: Options) -> Self {
        crate::log::install();
        let gate = if stage == Stage::Restore {
            host.inventory_gate()
        } else {
            InventoryGate::Predates
        };
        let disabled = gate == InventoryGate::Omits;
        let devices = match Devices::probe(&driver) {
            Ok(devices) => devices,
            Err(e) => {
                log_warn!("cannot stat /dev/kfd ({e}): GPU files are left to CRIU");
                None
            }
        };
        let no_kfd_for_listed_images = gate == InventoryGate::Lists && devices.is_none();
        // Options come first: a mistyped option fails the run (init fails,
        // CRIU stops) wherever it would have mattered, never ignored.
        let (options, bad_options) = match host.plugin_options() {
            Ok(None) => (options, false),
            Ok(Some(argv)) => match options.read(|_| None, &argv) {
                Ok((options, _)) => {
                    let ours: Vec<&String> = argv
                        .iter()
                        .filter(|e| e.starts_with(amdgpu_checkpoint::options::PLUGIN_PREFIX))
                        .collect();
                    if !ours.is_empty() {
                        log_info!(
                            "plugin options from CRIU's command line: {} ({} of other plugins \
                             left to them)",
                            ours.iter()
                                .map(|e| e.as_str())
                                .collect::<Vec<_>>()
                                .join(" "),
                            argv.len() - ours.len()
                        );
                    }
                    (options, false)
                }
                Err(e) => {
                    log_error!("{e}");
                    (options, true)
                }
            },
            Err(e) => {
                log_error!("cannot read CRIU's plugin options: {e}");
                (options, true)
            }
        };
        let refused = no_kfd_for_listed_images || bad_options;
        let host_note = host
            .describe()
            .map(|note| format!(" ({note})"))
            .unwrap_or_default();
        if bad_options {
            log_error!("refusing to {stage:?} with invalid plugin options (see above)");
        } else if disabled {
            log_info!(
                "not needed for this restore: the images' inventory does not list \
                 amdgpu_plugin (their dump saved no GPU file){host_note}"
            );
        } else if refused {
            log_error!(
                "cannot restore these images: their inventory lists amdgpu_plugin (their dump \
                 saved GPU state) but this machine has no /dev/kfd; restore them on a machine \
                 with AMD GPUs and the amdgpu driver loaded"
            );
        } else if devices.is_none() {
            log_info!(
                "initialized for {stage:?}{host_note}; no /dev/kfd on this machine: GPU files \
                 are left to CRIU"
            );
        } else {
            log_info!("initialized for {stage:?}{host_note}");
            // The device checks matter where GPUs are matched, at restore;
            // the staging size wherever BO contents move.
            for line in options.describe() {
                if stage == Stage::Restore || line.contains(MAX_BUFFER_SIZE) {
                    log_info!("{line}");
                }
            }
            if stage != Stage::Restore {
                // Options that shape only a restore, set for a dump: said
                // once, so a user sees they had no effect here.
                for spec in OPTIONS {
                    if options.source(spec.name) == Source::CommandLine
                        && spec.variable != MAX_BUFFER_SIZE
                    {
                        log_info!("param: amdgpu.{} matters only at restore", spec.name);
                    }
                }
            }
        }
        let parallel = if stage == Stage::Restore && !disabled && !refused && devices.is_some() {
            let mut facts = host.parallel_facts();
            facts.turned_off |= !options.parallel_restore();
            ParallelRestore::plan(&facts)
        } else {
            None
        };
        let mut plugin = Plugin {
            driver,
            host,
            stage,
            config,
            options,
            disabled,
            refused,
            devices,
            added_to_inventory: false,
            dumper: None,
            restorer: None,
            handles: None,
            dumped_ids: BTreeSet::new(),
            parallel,
        };
        // CRIU before 4.3 has no RESTORE_INIT, but it forks the tasks after
        // `init` too: the table the tasks share is made here then.
        if stage == Stage::Restore && !plugin.config.has_restore_retry && !refused {
            let _ = plugin.make_handle_table("init");
        }
        plugin
    }

    /// Whether `init` refused this run (the error is logged): the host must
    /// answer `init` with an error and never call the plugin again.
    pub fn refused(&self) -> bool {
        self.refused
    }

    /// How log lines name file `id` at dump: with the task's pid and fd
    /// number when the host can tell them.
    fn dumped_file(&self, fd: BorrowedFd<'_>, id: c_int) -> String {
        match self.host.task_fd(fd) {
            Some(TaskFd { pid, fd }) => format!("file {id} (pid {pid} fd {fd})"),
            None => format!("file {id}"),
        }
    }

    /// How log lines name file `id` at restore: in the restored task, with
    /// its pid.
    fn restored_file(&self, id: c_int) -> String {
        match self.host.current_pid() {
            Some(pid) => format!("file {id} (pid {pid})"),
            None => format!("file {id}"),
        }
    }

    /// The plugin as a restored task finds it: CRIU forks each task from
    /// the main restorer after `init` and `RESTORE_INIT`, so the task's
    /// plugin is a copy of this one's memory (options, the gate, the
    /// buffer handle table and the parallel restore plan as they are now) without what a fork does not carry: the parallel
    /// restore's listener (CRIU closes a new task's inherited fds) and
    /// worker (threads), and the process identity, which the task's own
    /// `driver` and `host` stand for. The CRIU host emulator calls this
    /// where CRIU forks.
    pub fn forked_task(&self, driver: D, host: H) -> Self {
        Plugin {
            driver,
            host,
            stage: self.stage,
            config: self.config.clone(),
            options: self.options.clone(),
            disabled: self.disabled,
            refused: self.refused,
            devices: self.devices,
            added_to_inventory: self.added_to_inventory,
            // The main restorer dumps nothing and restores no file itself
            // before it forks: what the task inherits is none of either.
            dumper: None,
            restorer: None,
            handles: self.handles.clone(),
            dumped_ids: self.dumped_ids.clone(),
            parallel: self.parallel.as_ref().map(ParallelRestore::inherited),
        }
    }

    /// The stage.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// Whether hooks can be ours at all (enabled, `/dev/kfd` present).
    fn active(&self) -> Option<Devices> {
        if self.disabled {
            return None;
        }
        self.devices
    }

    /// The dumper, if a GPU file was dumped.
    pub fn dumper(&self) -> Option<&Dumper<D>> {
        self.dumper.as_ref()
    }

    /// The restorer, if a GPU file was restored.
    pub fn restorer(&self) -> Option<&Restorer<D>> {
        self.restorer.as_ref()
    }

    /// `exit(stage, ret)`: never leaves a dumped process paused, and after
    /// a failed dump removes the images it wrote, so no set that looks
    /// complete remains.
    pub fn exit(mut self, ret: c_int) {
        // CRIU without DUMP_DEVICES_LATE: render nodes no KFD file named are
        // written render-only in their own DUMP_EXT_FILE into an image
        // directory (a failure fails the dump); into a stream, which cannot
        // take an image twice, only now: CRIU no longer hears of a failure
        // here, the log names it and the restore of the missing file fails.
        if self.stage == Stage::Dump && ret == 0 {
            if let Some(dumper) = self.dumper.as_mut() {
                if dumper.pending_render_nodes() > 0 {
                    let written = self
                        .host
                        .image_store(true)
                        .and_then(|store| dumper.finish_render_only(&store));
                    if let Err(e) = written {
                        log_error!(
                            "exit: render-only nodes not written ({e}); this dump cannot be restored"
                        );
                    }
                }
            }
        }
        if let Some(dumper) = self.dumper.as_mut() {
            if ret != 0 {
                dumper.abandon();
            }
            if dumper.paused() > 0 {
                if let Err(e) = dumper.unpause_all() {
                    log_error!("exit: {e}");
                }
            }
        }
        if self.stage == Stage::Dump && ret != 0 && !self.dumped_ids.is_empty() {
            self.discard_images();
        }
        if let Some(mut parallel) = self.parallel.take() {
            // RESUME_DEVICES_LATE did not run (a failed restore): stop the
            // worker, so no thread outlives the plugin.
            if let Some(result) = parallel.finish() {
                log_parallel_outcome("exit", result);
            }
        }
        // A restore the plugin stayed out of said so at init; "finished"
        // would read as if it had taken part.
        if !self.disabled {
            log_info!("finished {:?} (CRIU result {ret})", self.stage);
        }
    }

    /// Removes every image of the file ids this dump worked on.
    fn discard_images(&self) {
        let removed = self
            .host
            .image_store(true)
            .and_then(|store| discard_images(&store, &self.dumped_ids));
        match removed {
            Ok(0) => {}
            Ok(n) => log_info!("exit: removed {n} image file(s) of the failed dump"),
            Err(e) => log_warn!("exit: images of the failed dump remain: {e}"),
        }
    }

    /// `HANDLE_DEVICE_VMA`: accepts mappings of `/dev/kfd` and of amdgpu
    /// render nodes (and records the plugin in the inventory); everything
    /// else is not ours.
    pub fn handle_device_vma(&mut self, dev: DeviceNumber) -> c_int {
        let Some(devices) = self.active() else {
            return NOT_MINE;
        };
        match devices.classify_vma(&self.driver, dev) {
            FdClass::Foreign | FdClass::DmaBuf => NOT_MINE,
            FdClass::Kfd | FdClass::Render { .. } => match self.add_to_inventory() {
                Ok(()) => 0,
                Err(e) => {
                    log_error!("HANDLE_DEVICE_VMA: cannot add the plugin to the inventory: {e}");
                    -libc::ENOMEM
                }
            },
        }
    }

    /// Records the plugin in the inventory (once), so a restore loads it.
    fn add_to_inventory(&mut self) -> std::io::Result<()> {
        if !self.added_to_inventory {
            self.host.add_inventory_plugin()?;
            self.added_to_inventory = true;
        }
        Ok(())
    }

    fn dumper_mut(&mut self) -> &mut Dumper<D> {
        let config = DumpConfig {
            topology_root: self.config.topology_root.clone(),
            options: self.options.clone(),
            unpause_early: !self.config.has_dump_devices_late,
            shm_dir: self.config.shm_dir.clone(),
            guardian_log_dir: self.host.guardian_log_dir(),
            guardian_driver: self.host.guardian_driver(),
        };
        let driver = &self.driver;
        self.dumper
            .get_or_insert_with(|| Dumper::new(driver.clone(), config))
    }

    /// `DUMP_EXT_FILE(fd, id)`.
    pub fn dump_ext_file(&mut self, fd: BorrowedFd<'_>, id: c_int) -> c_int {
        let Some(devices) = self.active() else {
            return NOT_MINE;
        };
        if self.stage != Stage::Dump {
            return NOT_MINE;
        }
        let class = match devices.classify_fd(&self.driver, fd) {
            Ok(class) => class,
            Err(e) => {
                log_debug!("DUMP_EXT_FILE: cannot identify file {id}: {e}; not ours");
                return NOT_MINE;
            }
        };
        if matches!(class, FdClass::Foreign) {
            return NOT_MINE;
        }
        let name = self.dumped_file(fd, id);
        let store = match self.host.image_store(true) {
            Ok(store) => store,
            Err(e) => return fail("DUMP_EXT_FILE", &name, &e),
        };
        let file = id as u32;
        self.dumped_ids.insert(file);
        // A process that never mapped a GPU buffer (a render node used
        // without mmap) offers HANDLE_DEVICE_VMA nothing: its files put the
        // plugin into the inventory too.
        if !matches!(class, FdClass::DmaBuf) {
            if let Err(e) = self.add_to_inventory() {
                log_error!("DUMP_EXT_FILE: cannot add the plugin to the inventory: {e}");
                return -libc::ENOMEM;
            }
        }
        let result = match class {
            FdClass::Render { minor } => self
                .dumper_mut()
                .dump_render_node(&store, fd, minor, file)
                .map(|d| {
                    if let Some(gpu) = d.gpu_id {
                        log_info!(
                            "{name}: renderD{} of GPU {gpu:#x} dumped ({} DRM BOs)",
                            d.minor,
                            d.bos
                        )
                    }
                }),
            FdClass::DmaBuf => match self.dumper_mut().dump_dmabuf(&store, fd, file) {
                Ok(None) => return NOT_MINE,
                Ok(Some(d)) => {
                    if let Some(handle) = d.handle {
                        log_info!("{name}: dma-buf of BO handle {handle} dumped");
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            },
            _ => {
                let task = self.host.task_fd(fd);
                let dumper = self.dumper_mut();
                // The contents copy on while CRIU dumps the next process
                // where the engine can (see `dump_kfd_background`).
                task.map_or(Ok(()), |task| dumper.refuse_second_kfd_file(task.pid, file))
                    .and_then(|()| dumper.dump_kfd_background(&store, fd, file))
            }
            .map(|d| {
                log_info!(
                    "{name}: KFD state of pid {} dumped ({} GPUs, {} BOs, {} content bytes{}{})",
                    d.pid,
                    d.gpus,
                    d.bos,
                    d.content_bytes,
                    if d.stored_bytes.is_none() {
                        ", copying until DUMP_DEVICES_LATE"
                    } else {
                        ""
                    },
                    if d.unpaused { ", unpaused" } else { "" }
                )
            }),
        };
        match result {
            Ok(()) => 0,
            Err(e) if matches!(class, FdClass::Kfd) && answers_no_kfd_ioctl(&e) => {
                log_error!(
                    "DUMP_EXT_FILE: {name}: the device at /dev/kfd is not an amdkfd device \
                     (it does not answer KFD's ioctls: {e}); CRIU cannot dump a process holding it"
                );
                e.errno()
            }
            Err(e) => fail("DUMP_EXT_FILE", &name, &e),
        }
    }

    /// `DUMP_DEVICES_LATE(pid)`: writes the render nodes no KFD file named
    /// as render-only images, then unpauses every process paused by the
    /// dump (also when writing failed); not ours when it did neither.
    pub fn dump_devices_late(&mut self, _pid: c_int) -> c_int {
        if self.active().is_none() {
            return NOT_MINE;
        }
        let Some(dumper) = self.dumper.as_mut() else {
            return NOT_MINE;
        };
        let written = if dumper.pending_render_nodes() > 0 {
            self.host
                .image_store(true)
                .and_then(|store| dumper.finish_render_only(&store))
        } else {
            Ok(0)
        };
        let unpaused = dumper.unpause_all();
        match (written, unpaused) {
            (Err(e), _) => fail("DUMP_DEVICES_LATE", "writing render-only nodes", &e),
            (Ok(_), Err(e)) => fail("DUMP_DEVICES_LATE", "unpausing", &e),
            (Ok(0), Ok(0)) => NOT_MINE,
            (Ok(_), Ok(_)) => 0,
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
    fn make_handle_table(&mut self, hook: &str) -> c_int {
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

    /// [`Plugin::restore_ext_file`] with the fd as an [`OwnedFd`]; `Err`
    /// carries the errno of a failure (logged). [`Restored::WaitForKfd`] and
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
        let sharing = Sharing {
            table: self.handles.as_deref(),
            fdstore_add: &fdstore_add,
            fdstore_get: &fdstore_get,
        };
        let task = TaskIdentity {
            pid: host.current_pid(),
            find_unused_fd: &find_unused_fd,
        };
        let mut result = restorer.restore_file(&store, id as u32, &task, &sharing);
        if matches!(result, Ok(Restored::WaitForBuffer)) {
            if self.config.has_restore_retry {
                // CRIU puts this task to sleep until another task sends it
                // a file; the buffer's creator wakes it instead
                // (`wake_task`). Registered first, then looked up once more:
                // a creator that publishes in between has woken it already.
                if let (Some(table), Some(pid)) = (sharing.table, host.current_pid()) {
                    if !table.add_waiter(pid) {
                        log_warn!(
                            "RESTORE_EXT_FILE: {name}: no room to wait for its buffer's \
                             creator; CRIU wakes the task with its next file"
                        );
                    }
                    result = restorer.restore_file(&store, id as u32, &task, &sharing);
                }
            } else if let Some(limit) = host.buffer_wait() {
                let deadline = std::time::Instant::now() + limit;
                while matches!(result, Ok(Restored::WaitForBuffer))
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    result = restorer.restore_file(&store, id as u32, &task, &sharing);
                }
            }
        }
        match result {
            Ok(Restored::File(fd)) => {
                log_info!("{name}: restored");
                // What this file re-created may be what other tasks wait for.
                if let Some(table) = sharing.table {
                    for waiter in table.waiters() {
                        if Some(waiter) != host.current_pid() {
                            host.wake_task(waiter);
                        }
                    }
                }
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
                    match host.buffer_wait() {
                        Some(limit) => format!("did not restore it within {limit:?}"),
                        None => "was not restored yet".to_owned(),
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
