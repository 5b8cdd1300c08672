//! The plugin as loaded into CRIU: one process-wide [`Plugin`] over the real
//! kernel ([`HostDriver`]) and CRIU's services ([`CriuServices`]), driven by
//! the hook trampolines of [`crate::abi`].
//!
//! The work is done by the driver-generic [`crate::hooks`] over the engine; this
//! module keeps it between calls and adapts CRIU's services (image directory
//! or image streamer, inventory, `find_unused_fd_pid`). Restored tasks are
//! forked from the main CRIU process and inherit a copy of this state.
//!
//! Never used outside CRIU's process roles: tests drive the core through the
//! emulator instead.

use std::ffi::c_int;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use amdgpu_checkpoint::parallel::{Copier, ParallelFacts};
use amdgpu_checkpoint::{Error, Options};
use amdgpu_image::{DirStore, StreamStore};
use amdgpu_topology::parse::DEFAULT_ROOT;
use kfd::{DeviceNumber, HostDriver};

use crate::criu::services;
use crate::hooks::{CriuHost, InventoryGate, Plugin, PluginConfig};
pub use crate::hooks::{VmaUpdate, NOT_MINE};
use crate::host::{host_profile, ProfileBasis, Stage, PLUGIN_NAME};
use crate::store::{open_stream, HostStore, StreamOpen};
use crate::{log_debug, log_error};

/// CRIU's services as the core sees them.
#[derive(Debug, Clone, Copy, Default)]
pub struct CriuServices;

/// How long a restored task waits for another task to re-create a buffer
/// it imports, on CRIU without the retry protocol.
const BUFFER_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

impl CriuHost for CriuServices {
    type Store = HostStore;

    fn image_store(&self, dump: bool) -> Result<HostStore, Error> {
        if services().streaming(dump) {
            return Ok(HostStore::Stream(StreamStore::new(
                open_stream as StreamOpen,
            )));
        }
        let own = services()
            .image_dir()
            .map_err(Error::io("duplicating CRIU's images directory fd"))?
            .ok_or(Error::NoImagesDirectory)?;
        DirStore::from_dir_fd(own)
            .map(HostStore::Dir)
            .map_err(Error::image("opening the images directory"))
    }

    fn add_inventory_plugin(&self) -> io::Result<()> {
        services().add_inventory_plugin(PLUGIN_NAME).map(|_| ())
    }

    fn inventory_names_plugin(&self) -> bool {
        services().inventory_names_plugin(PLUGIN_NAME)
    }

    fn inventory_gate(&self) -> InventoryGate {
        services().inventory_gate(PLUGIN_NAME)
    }

    fn plugin_options(&self) -> io::Result<Option<Vec<String>>> {
        services().plugin_options()
    }

    fn describe(&self) -> Option<String> {
        let profile = host_profile();
        let basis = match &profile.basis {
            ProfileBasis::Override => "from AMDGPU_PLUGIN_MAX_HOOKS".to_owned(),
            ProfileBasis::HookTable { criu_max } => format!("CRIU has {criu_max}"),
            ProfileBasis::Marker(symbol) => format!("CRIU has {symbol}"),
            ProfileBasis::NoCriu => "no CRIU found".to_owned(),
        };
        Some(format!("max_hooks {}: {basis}", profile.max_hooks))
    }

    fn find_unused_fd(&self, pid: u32) -> Option<i32> {
        services().find_unused_fd(i32::try_from(pid).ok()?)
    }

    /// `getpid()`: in a restored task, the pid CRIU restored it under in
    /// its own pid namespace (CRIU's vpid when the tree has one namespace).
    fn current_pid(&self) -> Option<u32> {
        Some(std::process::id())
    }

    fn wake_task(&self, pid: u32) {
        services().set_fds_event(pid);
    }

    fn buffer_wait(&self) -> Option<std::time::Duration> {
        Some(BUFFER_WAIT)
    }

    /// CRIU's images directory, where its log goes unless `-o`/`-W` moved
    /// it (CRIU gives plugins no other directory); none, so no guardian,
    /// with `AMDGPU_PLUGIN_GUARDIAN=0`.
    fn guardian_log_dir(&self) -> Option<std::path::PathBuf> {
        if matches!(
            std::env::var("AMDGPU_PLUGIN_GUARDIAN").as_deref(),
            Ok("0") | Ok("no") | Ok("NO")
        ) {
            return None;
        }
        let fd = services().image_dir_fd()?;
        std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
    }

    fn fdstore_add(&self, fd: BorrowedFd<'_>) -> io::Result<i32> {
        services().fdstore_add(std::os::fd::AsRawFd::as_raw_fd(&fd))
    }

    fn fdstore_get(&self, id: i32) -> io::Result<std::os::fd::OwnedFd> {
        services().fdstore_get(id)
    }

    fn parallel_facts(&self) -> ParallelFacts {
        let services = services();
        ParallelFacts {
            calls_post_forking: host_profile().has_post_forking(),
            single_process: services.root_has_children().map(|children| !children),
            streaming: services.streaming(false),
            run_id: services.run_id(),
            // The options say (`Plugin::init` sets it from them).
            turned_off: false,
        }
    }

    fn copier(&self) -> Option<Copier> {
        let dir = match services().image_dir() {
            Ok(Some(dir)) => dir,
            Ok(None) => return None,
            Err(e) => {
                log_error!("parallel restore: cannot duplicate CRIU's images directory fd: {e}");
                return None;
            }
        };
        match DirStore::from_dir_fd(dir) {
            Ok(images) => Some(Copier {
                driver: std::sync::Arc::new(HostDriver),
                images,
            }),
            Err(e) => {
                log_error!("parallel restore: cannot open the images directory: {e}");
                None
            }
        }
    }
}

static RUNTIME: Mutex<Option<Plugin<HostDriver, CriuServices>>> = Mutex::new(None);

/// The state, even after a panic in an earlier hook: a half-finished dump
/// must still be able to unpause its processes.
fn state() -> MutexGuard<'static, Option<Plugin<HostDriver, CriuServices>>> {
    RUNTIME.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with_plugin<T>(
    hook: &str,
    not_mine: T,
    f: impl FnOnce(&mut Plugin<HostDriver, CriuServices>) -> T,
) -> T {
    match state().as_mut() {
        Some(plugin) => f(plugin),
        None => {
            log_debug!("{hook} before init: not handled");
            not_mine
        }
    }
}

/// `init(stage)`.
pub fn init(raw_stage: c_int) -> c_int {
    let Some(stage) = Stage::from_raw(raw_stage) else {
        log_error!("init called with unknown stage {raw_stage}");
        return -libc::EINVAL;
    };
    let profile = host_profile();
    if let Some(asked) = profile.capped_override {
        crate::log_warn!(
            "AMDGPU_PLUGIN_MAX_HOOKS={asked} is more than this CRIU accepts; using {}",
            profile.max_hooks
        );
    }
    if let Some(value) = &profile.rejected_override {
        log_error!(
            "ignoring AMDGPU_PLUGIN_MAX_HOOKS={value:?}: expecting a number from {} to {}",
            crate::host::MIN_MAX_HOOKS,
            crate::host::HOOK_SLOTS
        );
    }
    // CRIU's plugin options come on top in `Plugin::init`, from the host.
    let (options, invalid) = match Options::default().read(|name| std::env::var(name).ok(), &[]) {
        Ok(resolved) => resolved,
        Err(e) => {
            log_error!("{e}");
            return -libc::EINVAL;
        }
    };
    for problem in &invalid {
        log_error!("{problem}");
    }
    let config = PluginConfig {
        topology_root: PathBuf::from(DEFAULT_ROOT),
        shm_dir: PathBuf::from("/dev/shm"),
        has_dump_devices_late: profile.has_dump_devices_late(),
        has_restore_retry: profile.restore_ext_file_has_retry(),
    };
    let plugin = Plugin::init(HostDriver, CriuServices, stage, config, options);
    if plugin.refused() {
        // CRIU unloads a plugin whose init failed without calling its exit.
        return -libc::ENODEV;
    }
    *state() = Some(plugin);
    0
}

/// `exit(stage, ret)`.
pub fn exit(_raw_stage: c_int, ret: c_int) {
    if let Some(plugin) = state().take() {
        plugin.exit(ret);
    }
}

/// `HANDLE_DEVICE_VMA(fd, st)`.
pub fn handle_device_vma(_fd: c_int, st: &libc::stat) -> c_int {
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return NOT_MINE;
    }
    let dev = DeviceNumber {
        major: libc::major(st.st_rdev),
        minor: libc::minor(st.st_rdev),
    };
    with_plugin("HANDLE_DEVICE_VMA", NOT_MINE, |p| p.handle_device_vma(dev))
}

/// `DUMP_EXT_FILE(fd, id)`.
pub fn dump_ext_file(fd: BorrowedFd<'_>, id: c_int) -> c_int {
    with_plugin("DUMP_EXT_FILE", NOT_MINE, |p| p.dump_ext_file(fd, id))
}

/// `DUMP_DEVICES_LATE(pid)`.
pub fn dump_devices_late(pid: c_int) -> c_int {
    with_plugin("DUMP_DEVICES_LATE", NOT_MINE, |p| p.dump_devices_late(pid))
}

/// `RESTORE_INIT()`.
pub fn restore_init() -> c_int {
    with_plugin("RESTORE_INIT", NOT_MINE, |p| p.restore_init())
}

/// `POST_FORKING()`.
pub fn post_forking() -> c_int {
    with_plugin("POST_FORKING", NOT_MINE, |p| p.post_forking())
}

/// `RESTORE_EXT_FILE(id)`; the second value is `retry_needed` (asked for
/// only when the host has the retry protocol, see [`PluginConfig`]).
pub fn restore_ext_file(id: c_int) -> (c_int, bool) {
    with_plugin("RESTORE_EXT_FILE", (NOT_MINE, false), |p| {
        p.restore_ext_file(id)
    })
}

/// `UPDATE_VMA_MAP(path, addr, old_pgoff)`.
pub fn update_vma_map(path: &[u8], addr: u64, old_pgoff: u64) -> VmaUpdate {
    with_plugin("UPDATE_VMA_MAP", VmaUpdate::Errno(NOT_MINE), |p| {
        p.update_vma_map(path, addr, old_pgoff)
    })
}

/// `RESUME_DEVICES_LATE(pid)`.
pub fn resume_devices_late(pid: c_int) -> c_int {
    with_plugin("RESUME_DEVICES_LATE", NOT_MINE, |p| {
        p.resume_devices_late(pid)
    })
}
