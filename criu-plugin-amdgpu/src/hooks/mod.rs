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
//!
//! Inside: `criu_host` is what CRIU offers ([`CriuHost`]), `dump` answers
//! the dump's hooks and `restore` the restore's; this module holds the
//! [`Plugin`] with `init`, the fork into a restored task and `exit`.

mod criu_host;
mod dump;
mod restore;

use std::collections::BTreeSet;
use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::Arc;

use kfd::Driver;

use amdgpu_checkpoint::dump::{discard_images, Dumper};
use amdgpu_checkpoint::handles::HandleTable;
use amdgpu_checkpoint::identify::Devices;
use amdgpu_checkpoint::options::{Source, MAX_BUFFER_SIZE, OPTIONS};
use amdgpu_checkpoint::parallel::{ParallelRestore, WorkerReport};
use amdgpu_checkpoint::restore::Restorer;
use amdgpu_checkpoint::{Error, Options};

pub use self::criu_host::{CriuHost, TaskFd};
pub use self::restore::VmaUpdate;
pub use crate::criu::InventoryGate;
use crate::host::Stage;
use crate::{log_error, log_info, log_warn};

/// `-ENOTSUP`: "not mine", the next plugin in CRIU's chain is asked.
pub const NOT_MINE: c_int = -libc::ENOTSUP;

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
}
