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
use crate::core::identify::{Devices, FdClass};
use crate::core::vma::{VmaAnswer, VmaTranslations};
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
    added_to_inventory: bool,
    /// Mmap-offset translations recorded by this restored task.
    translations: VmaTranslations,
}

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
        added_to_inventory: false,
        translations: VmaTranslations::new(),
    });
    log_info!("initialized for {stage:?}");
    0
}

/// `exit(stage, ret)`.
pub fn exit(raw_stage: c_int, ret: c_int) {
    if let Some(runtime) = state().take() {
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

fn not_in_this_build(hook: &str, what: &str) -> c_int {
    log_error!("{hook}: {what} is not supported by this build of the plugin");
    NOT_MINE
}

/// `DUMP_EXT_FILE(fd, id)`.
pub fn dump_ext_file(fd: BorrowedFd<'_>, id: c_int) -> c_int {
    with_active("DUMP_EXT_FILE", |_runtime, devices| {
        match devices.classify_fd(&HostDriver, fd) {
            Ok(FdClass::Foreign) => NOT_MINE,
            Ok(FdClass::Kfd) => not_in_this_build("DUMP_EXT_FILE", "dumping /dev/kfd"),
            Ok(FdClass::Render { minor }) => not_in_this_build(
                "DUMP_EXT_FILE",
                &format!("dumping render node renderD{minor} (file id {id})"),
            ),
            Ok(FdClass::DmaBuf) => {
                not_in_this_build("DUMP_EXT_FILE", &format!("dumping dma-buf file id {id}"))
            }
            Err(e) => {
                log_debug!("cannot identify fd {:?}: {e}; not ours", fd);
                NOT_MINE
            }
        }
    })
}

/// `DUMP_DEVICES_LATE(pid)`: nothing was paused by this build.
pub fn dump_devices_late(_pid: c_int) -> c_int {
    with_active("DUMP_DEVICES_LATE", |_, _| NOT_MINE)
}

/// `RESTORE_INIT()`: nothing is shared between restored tasks in this build.
pub fn restore_init() -> c_int {
    with_active("RESTORE_INIT", |_, _| NOT_MINE)
}

/// `POST_FORKING()`: BO contents are restored inside the restored task, so
/// there is no background work to start.
pub fn post_forking() -> c_int {
    with_active("POST_FORKING", |_, _| NOT_MINE)
}

/// `RESTORE_EXT_FILE(id)`; the second value is `retry_needed`.
pub fn restore_ext_file(id: c_int, _has_retry: bool) -> (c_int, bool) {
    let ret = with_active("RESTORE_EXT_FILE", |_, _| {
        log_debug!("file id {id}: no amdgpu image handled by this build");
        NOT_MINE
    });
    (ret, false)
}

/// `UPDATE_VMA_MAP(path, addr, old_pgoff)`.
pub fn update_vma_map(path: &[u8], addr: u64, old_pgoff: u64) -> VmaUpdate {
    with_active_or(
        "UPDATE_VMA_MAP",
        VmaUpdate::Errno(NOT_MINE),
        |runtime, _| match runtime.translations.answer(path, addr, old_pgoff) {
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
        },
    )
}

/// `RESUME_DEVICES_LATE(pid)`.
pub fn resume_devices_late(_pid: c_int) -> c_int {
    with_active("RESUME_DEVICES_LATE", |_, _| NOT_MINE)
}
