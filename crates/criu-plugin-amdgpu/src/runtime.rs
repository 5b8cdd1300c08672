//! The plugin as loaded into CRIU: one process-wide state over the real
//! kernel ([`HostDriver`]), CRIU's services and the environment, driven by
//! the hook trampolines of [`crate::abi`].
//!
//! Each function here answers one hook in CRIU's convention (0 or a value on
//! success, a negative errno on failure, `-ENOTSUP` for "not mine"). The work
//! itself is done by the driver-generic [`crate::core`]; this module only
//! instantiates it for the host and keeps it between calls. Restored tasks
//! are forked from the main CRIU process and inherit a copy of this state.
//!
//! Never used outside CRIU's process roles: tests drive the core through the
//! emulator instead.

use std::ffi::c_int;
use std::os::fd::{BorrowedFd, IntoRawFd};
use std::sync::{Mutex, MutexGuard, PoisonError};

use kfd::{DeviceNumber, HostDriver};

use crate::abi::{host_profile, Stage, PLUGIN_NAME};
use std::fs::File;
use std::path::PathBuf;

use amdgpu_image::{DirStore, StreamMode, StreamStore};
use amdgpu_topology::parse::DEFAULT_ROOT;

use crate::core::dump::{DumpConfig, Dumper};
use crate::core::error as core_error;
use crate::core::identify::{Devices, FdClass};
use crate::core::restore::{resume, RestoreConfig, Restorer, Resume};
use crate::core::vma::VmaAnswer;
use crate::core::Error;
use crate::criu::services;
use crate::options::Options;
use crate::{log_debug, log_error, log_info, log_warn};

/// `-ENOTSUP`: "not mine", the next plugin in CRIU's chain is asked.
pub const NOT_MINE: c_int = -libc::ENOTSUP;

/// What `UPDATE_VMA_MAP` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmaUpdate {
    /// Return 1: CRIU maps `fd` (if >= 0, CRIU owns it) at page offset
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

struct Runtime {
    stage: Stage,
    /// Restore of images that do not name this plugin in the inventory.
    disabled: bool,
    /// `None`: no `/dev/kfd` on this machine.
    devices: Option<Devices>,
    options: Options,
    added_to_inventory: bool,
    /// The dump side, created on the first GPU file.
    dumper: Option<Dumper<HostDriver>>,
    /// The restore side of this restored task, created on the first file.
    restorer: Option<Restorer<HostDriver>>,
}

impl Runtime {
    fn dumper(&mut self) -> &mut Dumper<HostDriver> {
        let options = self.options;
        self.dumper.get_or_insert_with(|| {
            Dumper::new(
                HostDriver,
                DumpConfig {
                    topology_root: PathBuf::from(DEFAULT_ROOT),
                    options,
                    // Without DUMP_DEVICES_LATE nobody would unpause later.
                    unpause_early: !host_profile().has_dump_devices_late(),
                    shm_dir: PathBuf::from(SHM_DIR),
                },
            )
        })
    }

    fn restorer(&mut self) -> &mut Restorer<HostDriver> {
        let options = self.options;
        self.restorer.get_or_insert_with(|| {
            Restorer::new(
                HostDriver,
                RestoreConfig {
                    topology_root: PathBuf::from(DEFAULT_ROOT),
                    options,
                    shm_dir: PathBuf::from(SHM_DIR),
                },
            )
        })
    }
}

/// POSIX shared memory.
const SHM_DIR: &str = "/dev/shm";

static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);

/// The state, even after a panic in an earlier hook: a half-finished dump
/// must still be able to unpause its processes.
fn state() -> MutexGuard<'static, Option<Runtime>> {
    RUNTIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `f` on the state of an initialised, enabled plugin on a machine with
/// `/dev/kfd`; otherwise answers "not mine".
fn with_active(hook: &str, f: impl FnOnce(&mut Runtime, &Devices) -> c_int) -> c_int {
    with_active_or(hook, NOT_MINE, f)
}

/// [`with_active`] for hooks that answer something other than a bare errno.
fn with_active_or<T>(hook: &str, not_mine: T, f: impl FnOnce(&mut Runtime, &Devices) -> T) -> T {
    let mut guard = state();
    let Some(runtime) = guard.as_mut() else {
        log_debug!("{hook} before init: not handled");
        return not_mine;
    };
    if runtime.disabled {
        return not_mine;
    }
    let Some(devices) = runtime.devices else {
        return not_mine;
    };
    f(runtime, &devices)
}

/// Logs a core error once and turns it into CRIU's answer.
fn fail(hook: &str, what: &str, err: &Error) -> c_int {
    log_error!("{hook}: {what}: {err}");
    err.errno()
}

/// CRIU's image store for this direction: the image streamer's pipes with
/// `--stream`, else the images directory.
enum HostStore {
    Dir(DirStore),
    Stream(StreamStore<fn(&str, StreamMode) -> std::io::Result<File>>),
}

fn open_stream(name: &str, mode: StreamMode) -> std::io::Result<File> {
    services()
        .streamer_open(name, mode == StreamMode::Dump)
        .map(File::from)
}

fn host_store(dump: bool) -> Result<HostStore, Error> {
    if services().streaming(dump) {
        return Ok(HostStore::Stream(StreamStore::new(
            open_stream as fn(&str, StreamMode) -> std::io::Result<File>,
        )));
    }
    let own = services()
        .image_dir()
        .map_err(core_error::Error::io(
            "duplicating CRIU's images directory fd",
        ))?
        .ok_or_else(|| {
            Error::Inconsistent("CRIU offers no images directory (criu_get_image_dir)".into())
        })?;
    DirStore::from_dir_fd(own)
        .map(HostStore::Dir)
        .map_err(core_error::Error::image("opening the images directory"))
}

/// Runs `$body` with `$store` bound to the concrete store.
macro_rules! with_store {
    ($host:expr, |$store:ident| $body:expr) => {
        match $host {
            HostStore::Dir($store) => $body,
            HostStore::Stream($store) => $body,
        }
    };
}

/// `init(stage)`.
pub fn init(raw_stage: c_int) -> c_int {
    let Some(stage) = Stage::from_raw(raw_stage) else {
        log_error!("init called with unknown stage {raw_stage}");
        return -libc::EINVAL;
    };
    let profile = host_profile();
    if let Some(value) = &profile.rejected_override {
        log_error!(
            "ignoring AMDGPU_PLUGIN_MAX_HOOKS={value:?}: expecting a number from {} to {}",
            crate::abi::MIN_MAX_HOOKS,
            crate::abi::HOOK_SLOTS
        );
    }
    log_debug!(
        "host profile: max_hooks {} ({:?})",
        profile.max_hooks,
        profile.basis
    );
    let disabled = stage == Stage::Restore && !services().inventory_names_plugin(PLUGIN_NAME);
    if disabled {
        log_info!("images do not need this plugin: disabled for this restore");
    }
    let devices = match Devices::probe(&HostDriver) {
        Ok(Some(devices)) => Some(devices),
        Ok(None) => {
            log_info!("no /dev/kfd on this machine: GPU files are not handled");
            None
        }
        Err(e) => {
            log_warn!("cannot stat /dev/kfd ({e}): GPU files are not handled");
            None
        }
    };
    let (options, invalid) = Options::from_env();
    for problem in &invalid {
        log_error!("{problem}");
    }
    for line in options.describe() {
        log_info!("{line}");
    }
    *state() = Some(Runtime {
        stage,
        disabled,
        devices,
        options,
        added_to_inventory: false,
        dumper: None,
        restorer: None,
    });
    log_info!("initialized for {stage:?}");
    0
}

/// `exit(stage, ret)`.
pub fn exit(raw_stage: c_int, ret: c_int) {
    if let Some(mut runtime) = state().take() {
        if let Some(dumper) = runtime.dumper.as_mut() {
            // DUMP_DEVICES_LATE did not run (the dump failed before it):
            // never leave an application frozen.
            if dumper.paused() > 0 {
                if let Err(e) = dumper.unpause_all() {
                    log_error!("exit: {e}");
                }
            }
        }
        log_info!(
            "finished {:?} (CRIU result {ret}, stage {raw_stage})",
            runtime.stage
        );
    }
}

/// `HANDLE_DEVICE_VMA(fd, st)`: accepts mappings of `/dev/kfd` and of
/// amdgpu render nodes; everything else is not ours.
pub fn handle_device_vma(_fd: c_int, st: &libc::stat) -> c_int {
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return NOT_MINE;
    }
    let dev = DeviceNumber {
        major: libc::major(st.st_rdev),
        minor: libc::minor(st.st_rdev),
    };
    with_active("HANDLE_DEVICE_VMA", |runtime, devices| {
        match devices.classify_vma(&HostDriver, dev) {
            FdClass::Foreign | FdClass::DmaBuf => NOT_MINE,
            FdClass::Kfd | FdClass::Render { .. } => {
                if !runtime.added_to_inventory {
                    match services().add_inventory_plugin(PLUGIN_NAME) {
                        Ok(_) => runtime.added_to_inventory = true,
                        Err(e) => {
                            log_error!("cannot add the plugin to the inventory: {e}");
                            return -libc::ENOMEM;
                        }
                    }
                }
                0
            }
        }
    })
}

/// `DUMP_EXT_FILE(fd, id)`.
pub fn dump_ext_file(fd: BorrowedFd<'_>, id: c_int) -> c_int {
    with_active("DUMP_EXT_FILE", |runtime, devices| {
        let class = match devices.classify_fd(&HostDriver, fd) {
            Ok(class) => class,
            Err(e) => {
                log_debug!("cannot identify file {id}: {e}; not ours");
                return NOT_MINE;
            }
        };
        if class == FdClass::Foreign {
            return NOT_MINE;
        }
        if class == FdClass::DmaBuf {
            // Whether a dma-buf is ours is only known by resolving it against
            // dumped BOs, which this build does not do: let others try.
            log_debug!("file {id} is a dma-buf; dma-buf files are not supported by this build");
            return NOT_MINE;
        }
        if runtime.stage != Stage::Dump {
            return NOT_MINE;
        }
        let store = match host_store(true) {
            Ok(store) => store,
            Err(e) => return fail("DUMP_EXT_FILE", &format!("file {id}"), &e),
        };
        let id = id as u32;
        let result = match class {
            FdClass::Kfd => with_store!(store, |s| runtime.dumper().dump_kfd(&s, fd, id).map(
                |d| log_info!(
                    "file {id}: KFD of pid {} dumped ({} GPUs, {} BOs, {} content bytes)",
                    d.pid,
                    d.gpus,
                    d.bos,
                    d.content_bytes
                )
            )),
            FdClass::Render { minor } => with_store!(store, |s| runtime
                .dumper()
                .dump_render_node(&s, fd, minor, id)
                .map(|d| log_info!(
                    "file {id}: renderD{} of GPU {:#x} dumped",
                    d.minor,
                    d.gpu_id
                ))),
            FdClass::DmaBuf | FdClass::Foreign => return NOT_MINE,
        };
        match result {
            Ok(()) => 0,
            Err(e) => fail("DUMP_EXT_FILE", &format!("file {id}"), &e),
        }
    })
}

/// `DUMP_DEVICES_LATE(pid)`: unpauses every process paused by the dump.
pub fn dump_devices_late(_pid: c_int) -> c_int {
    with_active("DUMP_DEVICES_LATE", |runtime, _| {
        let Some(dumper) = runtime.dumper.as_mut() else {
            return NOT_MINE;
        };
        match dumper.unpause_all() {
            Ok(0) => NOT_MINE,
            Ok(_) => 0,
            Err(e) => fail("DUMP_DEVICES_LATE", "unpausing", &e),
        }
    })
}

/// `RESTORE_INIT()`: nothing is shared between restored tasks in this build
/// (no DRM BO handle table), so there is nothing to prepare before fork.
pub fn restore_init() -> c_int {
    with_active("RESTORE_INIT", |_, _| NOT_MINE)
}

/// `POST_FORKING()`: BO contents are restored inside the restored task, so
/// there is no background work to start.
pub fn post_forking() -> c_int {
    with_active("POST_FORKING", |_, _| NOT_MINE)
}

/// `RESTORE_EXT_FILE(id)`; the second value is `retry_needed` (never
/// needed by this build: KFD and render-node files do not wait for others).
pub fn restore_ext_file(id: c_int, _has_retry: bool) -> (c_int, bool) {
    let ret = with_active("RESTORE_EXT_FILE", |runtime, _| {
        if runtime.stage != Stage::Restore {
            return NOT_MINE;
        }
        let store = match host_store(false) {
            Ok(store) => store,
            Err(e) => return fail("RESTORE_EXT_FILE", &format!("file {id}"), &e),
        };
        let find_unused_fd = |pid: u32| services().find_unused_fd(pid as i32);
        let result = with_store!(store, |s| runtime.restorer().restore_file(
            &s,
            id as u32,
            &find_unused_fd
        ));
        match result {
            Ok(Some(fd)) => fd.into_raw_fd(),
            Ok(None) => NOT_MINE,
            Err(e) => fail("RESTORE_EXT_FILE", &format!("file {id}"), &e),
        }
    });
    (ret, false)
}

/// `UPDATE_VMA_MAP(path, addr, old_pgoff)`.
pub fn update_vma_map(path: &[u8], addr: u64, old_pgoff: u64) -> VmaUpdate {
    with_active_or(
        "UPDATE_VMA_MAP",
        VmaUpdate::Errno(NOT_MINE),
        |runtime, _| {
            let Some(restorer) = runtime.restorer.as_ref() else {
                return VmaUpdate::Errno(NOT_MINE);
            };
            match restorer.translations().answer(path, addr, old_pgoff) {
                VmaAnswer::NotOurs => VmaUpdate::Errno(NOT_MINE),
                VmaAnswer::Unchanged => {
                    log_debug!(
                        "no translation for {} at {addr:#x} offset {old_pgoff:#x}",
                        String::from_utf8_lossy(path)
                    );
                    VmaUpdate::Unchanged
                }
                VmaAnswer::Translated { new_offset, file } => {
                    let fd = match file.map(|f| f.try_clone_to_owned()) {
                        None => -1,
                        Some(Ok(fd)) => fd.into_raw_fd(),
                        Some(Err(e)) => {
                            log_error!("cannot duplicate the render fd for {addr:#x}: {e}");
                            return VmaUpdate::Errno(-e.raw_os_error().unwrap_or(libc::EIO));
                        }
                    };
                    VmaUpdate::Translated {
                        pgoff: new_offset,
                        fd,
                    }
                }
            }
        },
    )
}

/// `RESUME_DEVICES_LATE(pid)`: `CRIU_OP RESUME` in CRIU's main process;
/// pids without KFD state are not ours.
pub fn resume_devices_late(pid: c_int) -> c_int {
    with_active("RESUME_DEVICES_LATE", |runtime, _| {
        if runtime.stage != Stage::Restore || pid <= 0 {
            return NOT_MINE;
        }
        match resume(HostDriver, pid as u32) {
            Ok(Resume::Resumed) => {
                log_info!("pid {pid}: GPU queues resumed");
                0
            }
            Ok(Resume::NotOurs) => NOT_MINE,
            Err(e) => fail("RESUME_DEVICES_LATE", &format!("pid {pid}"), &e),
        }
    })
}
