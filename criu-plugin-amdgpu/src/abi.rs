//! The C ABI CRIU sees: the `CR_PLUGIN_DESC` descriptor and one trampoline
//! per hook.
//!
//! # Descriptor
//!
//! [`CR_PLUGIN_DESC`] has the exact layout of CRIU's `cr_plugin_desc_t`
//! (criu/include/criu-plugin.h): `name`, `init`, `exit`, `version` (u32),
//! `max_hooks` (u32), `hooks[]`, 160 bytes on x86-64 with 16 slots. Version is
//! `CRIU_PLUGIN_VERSION` 0x200 (never 0x100, which CRIU reserves for
//! descriptors it synthesises and frees).
//!
//! # One build for every CRIU
//!
//! CRIU refuses a plugin whose `max_hooks` exceeds its own
//! `CR_PLUGIN_HOOK__MAX` (10 for v3.17–v3.19, 12 for v4.0–v4.1, 13 for v4.2,
//! 15 after, 16 since criu#2841 added `UPDATE_INETSK` = 15) as a "Corrupted
//! plugin", and reads `hooks[0..max_hooks]`, calling only the non-NULL
//! ones. So the descriptor has 16 slots, NULL where the plugin implements
//! nothing (`UPDATE_INETSK` among them), and the
//! value is chosen at load time: an ELF constructor (an `.init_array` entry,
//! run by `dlopen` before it returns, i.e. before CRIU reads the descriptor)
//! inspects the host and stores the result into the descriptor's `max_hooks`,
//! an [`AtomicU32`] (same size, alignment and bit pattern as C's `unsigned
//! int`; CRIU's plain reads after `dlopen` returned are ordered after the
//! constructor by the loader's lock). In order:
//!
//! 1. `AMDGPU_PLUGIN_MAX_HOOKS=<10..=16>` in the environment wins (an invalid
//!    value is logged and ignored), capped at CRIU's maximum when step 2
//!    finds it: a value above would only make CRIU refuse the plugin (forcing
//!    15 on CRIU 4.1.1, whose maximum is 12, did). Without the hook table the
//!    override is taken as given: it exists for hosts the detection cannot
//!    see into.
//! 2. The size of CRIU's `cr_plugin_ctl` symbol (`struct list_head head;
//!    struct list_head hook_chain[CR_PLUGIN_HOOK__MAX]`, global in every CRIU
//!    since the descriptor API of v1.4, exported because criu is linked
//!    `-rdynamic`), read with `dladdr1(RTLD_DL_SYMENT)`: CRIU's exact maximum.
//!    Newer CRIU with more hooks than we know gets our 16.
//! 3. Marker symbols: `check_and_remove_inventory_plugin` (inventory gating,
//!    v4.1) → 12; `criu_get_image_dir` (any CRIU) → 10. Underestimating is
//!    safe — a smaller `max_hooks` is always accepted; hooks go missing, with
//!    the fallbacks below.
//! 4. No CRIU in the process (tests, the emulator): 16.
//!
//! # What the plugin does where a hook is missing
//!
//! - No `DUMP_DEVICES_LATE` (max_hooks < 15): the KFD process is unpaused
//!   inside `DUMP_EXT_FILE` right after its checkpoint and BO drain, as the
//!   plugins of v3.17–v4.2 did.
//! - No `RESTORE_INIT` (< 14): nothing is prepared before fork; state that
//!   would be shared between restored tasks is created lazily in the task.
//! - No `POST_FORKING` (< 13): BO contents are always restored inside the
//!   restored task (this build restores in the task anyway).
//! - `RESTORE_EXT_FILE` got its `bool *retry_needed` argument in the same
//!   post-v4.2 series that added `RESTORE_INIT` (fb02dbf68, db0ec806d). On
//!   older CRIU the second argument register holds garbage, so it is written
//!   only when `max_hooks >= 14`; then it is always written, because CRIU
//!   leaves its variable uninitialised.
//!
//! # Trampolines
//!
//! Every hook checks its pointers, runs the body under `catch_unwind` and
//! returns CRIU's convention. `-ENOTSUP` means "not mine" and lets the next
//! plugin in the chain try, so it is answered for every fd, VMA, path and pid
//! that carries no KFD state — and on a machine without `/dev/kfd`. A panic is
//! logged and answered with [`PANIC_ERRNO`] (`-ENOTRECOVERABLE`), never with
//! `-ENOTSUP`: the hook was ours and it failed.
//!
//! Besides this module, `unsafe` appears only in the CRIU service lookups
//! ([`crate::criu`]); the system calls of the work itself are the engine's
//! (`amdgpu_checkpoint::sys`). This module never does the work of a hook
//! itself.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::os::fd::BorrowedFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::runtime;

/// The descriptor name, also the plugin's key in CRIU's inventory.
pub const PLUGIN_NAME: &CStr = c"amdgpu_plugin";

/// `CRIU_PLUGIN_VERSION` = GEN(0, 2, 0).
pub const CRIU_PLUGIN_VERSION: c_uint = 0x200;

/// Number of hook slots in the descriptor (`CR_PLUGIN_HOOK__MAX` of CRIU
/// HEAD: 15 after v4.2, 16 since criu#2841 added `UPDATE_INETSK`).
pub const HOOK_SLOTS: usize = 16;

/// What a hook answers when a panic was caught: `-ENOTRECOVERABLE`, distinct
/// from the errors the plugin reports itself so a log reader can tell a bug.
pub const PANIC_ERRNO: c_int = -libc::ENOTRECOVERABLE;

/// Hook ids (`CR_PLUGIN_HOOK__*`).
pub mod hook {
    /// `DUMP_EXT_FILE(int fd, int id)`.
    pub const DUMP_EXT_FILE: usize = 2;
    /// `RESTORE_EXT_FILE(int id, bool *retry_needed)`.
    pub const RESTORE_EXT_FILE: usize = 3;
    /// `HANDLE_DEVICE_VMA(int fd, const struct stat *st)`.
    pub const HANDLE_DEVICE_VMA: usize = 7;
    /// `UPDATE_VMA_MAP(path, addr, old_pgoff, *new_pgoff, *plugin_fd)`.
    pub const UPDATE_VMA_MAP: usize = 8;
    /// `RESUME_DEVICES_LATE(int pid)`.
    pub const RESUME_DEVICES_LATE: usize = 9;
    /// `POST_FORKING(void)`.
    pub const POST_FORKING: usize = 12;
    /// `RESTORE_INIT(void)`.
    pub const RESTORE_INIT: usize = 13;
    /// `DUMP_DEVICES_LATE(int id)` (CRIU passes the root pid).
    pub const DUMP_DEVICES_LATE: usize = 14;
    /// `UPDATE_INETSK` (criu#2841): not implemented, its slot stays NULL.
    pub const UPDATE_INETSK: usize = 15;
}

/// Stages passed to `init`/`exit` (`CR_PLUGIN_STAGE__*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `criu dump`.
    Dump,
    /// `criu pre-dump`.
    PreDump,
    /// `criu restore`.
    Restore,
}

impl Stage {
    /// The stage for CRIU's number, `None` for unknown numbers.
    pub fn from_raw(stage: c_int) -> Option<Stage> {
        match stage {
            0 => Some(Stage::Dump),
            1 => Some(Stage::PreDump),
            2 => Some(Stage::Restore),
            _ => None,
        }
    }
}

/// `cr_plugin_desc_t`.
#[repr(C)]
#[derive(Debug)]
pub struct CrPluginDesc {
    name: *const c_char,
    init: unsafe extern "C" fn(c_int) -> c_int,
    exit: unsafe extern "C" fn(c_int, c_int),
    version: c_uint,
    max_hooks: AtomicU32,
    hooks: [*const c_void; HOOK_SLOTS],
}

// SAFETY: the raw pointers point at a 'static C string and at functions;
// neither is ever written. The only mutable field is an atomic.
unsafe impl Sync for CrPluginDesc {}

impl CrPluginDesc {
    /// The name.
    pub fn name(&self) -> &'static CStr {
        PLUGIN_NAME
    }

    /// The version field.
    pub fn version(&self) -> c_uint {
        self.version
    }

    /// The `max_hooks` CRIU reads.
    pub fn max_hooks(&self) -> c_uint {
        self.max_hooks.load(Ordering::Acquire)
    }

    /// Whether hook slot `id` is filled.
    pub fn has_hook(&self, id: usize) -> bool {
        self.hooks.get(id).is_some_and(|hook| !hook.is_null())
    }
}

/// The descriptor CRIU looks up with `dlsym(handle, "CR_PLUGIN_DESC")`.
#[no_mangle]
pub static CR_PLUGIN_DESC: CrPluginDesc = CrPluginDesc {
    name: PLUGIN_NAME.as_ptr(),
    init: plugin_init,
    exit: plugin_exit,
    version: CRIU_PLUGIN_VERSION,
    max_hooks: AtomicU32::new(HOOK_SLOTS as u32),
    hooks: {
        let mut hooks = [std::ptr::null::<c_void>(); HOOK_SLOTS];
        hooks[hook::DUMP_EXT_FILE] = dump_ext_file as *const c_void;
        hooks[hook::RESTORE_EXT_FILE] = restore_ext_file as *const c_void;
        hooks[hook::HANDLE_DEVICE_VMA] = handle_device_vma as *const c_void;
        hooks[hook::UPDATE_VMA_MAP] = update_vma_map as *const c_void;
        hooks[hook::RESUME_DEVICES_LATE] = resume_devices_late as *const c_void;
        hooks[hook::POST_FORKING] = post_forking as *const c_void;
        hooks[hook::RESTORE_INIT] = restore_init as *const c_void;
        hooks[hook::DUMP_DEVICES_LATE] = dump_devices_late as *const c_void;
        hooks
    },
};

/// Runs at `dlopen`, before CRIU reads the descriptor.
#[used]
#[link_section = ".init_array"]
static DETECT_HOST_AT_LOAD: extern "C" fn() = detect_host_at_load;

extern "C" fn detect_host_at_load() {
    // A panic must not unwind into the dynamic loader; the profile then
    // stays at its default and is computed again on first use.
    let _ = catch_unwind(|| {
        let profile = host_profile();
        CR_PLUGIN_DESC
            .max_hooks
            .store(profile.max_hooks, Ordering::Release);
    });
}

/// How [`HostProfile::max_hooks`] was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileBasis {
    /// `AMDGPU_PLUGIN_MAX_HOOKS`.
    Override,
    /// The size of CRIU's hook table: CRIU's own `CR_PLUGIN_HOOK__MAX`.
    HookTable {
        /// CRIU's maximum (may exceed ours).
        criu_max: u32,
    },
    /// A symbol that identifies the oldest possible CRIU release.
    Marker(&'static str),
    /// No CRIU in this process.
    NoCriu,
}

/// What the host CRIU offers, as far as the plugin's behaviour depends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostProfile {
    /// The `max_hooks` written into the descriptor (10..=16).
    pub max_hooks: u32,
    /// How it was chosen.
    pub basis: ProfileBasis,
    /// A rejected `AMDGPU_PLUGIN_MAX_HOOKS` value, reported at `init`.
    pub rejected_override: Option<String>,
    /// An `AMDGPU_PLUGIN_MAX_HOOKS` above CRIU's maximum, lowered to it
    /// (the value asked for), reported at `init`.
    pub capped_override: Option<u32>,
}

impl HostProfile {
    /// Whether CRIU calls `DUMP_DEVICES_LATE` (else the dump unpauses early).
    pub fn has_dump_devices_late(&self) -> bool {
        self.max_hooks > hook::DUMP_DEVICES_LATE as u32
    }

    /// Whether CRIU calls `RESTORE_INIT`.
    pub fn has_restore_init(&self) -> bool {
        self.max_hooks > hook::RESTORE_INIT as u32
    }

    /// Whether CRIU calls `POST_FORKING`.
    pub fn has_post_forking(&self) -> bool {
        self.max_hooks > hook::POST_FORKING as u32
    }

    /// Whether CRIU passes `bool *retry_needed` to `RESTORE_EXT_FILE`.
    pub fn restore_ext_file_has_retry(&self) -> bool {
        self.has_restore_init()
    }
}

/// The smallest `max_hooks` the plugin accepts: CRIU v3.17, the first with
/// the device hooks 7..=9.
pub const MIN_MAX_HOOKS: u32 = 10;

/// Chooses the profile from what was observed: the override variable, the
/// byte size of CRIU's `cr_plugin_ctl` and which marker symbols exist.
pub fn choose_profile(
    override_var: Option<&str>,
    hook_table_size: Option<u64>,
    has_symbol: &dyn Fn(&str) -> bool,
) -> HostProfile {
    let list_head = 2 * std::mem::size_of::<*const c_void>() as u64;
    // One list head, then one per hook.
    let criu_max = hook_table_size
        .filter(|size| size % list_head == 0 && size / list_head > u64::from(MIN_MAX_HOOKS))
        .map(|size| u32::try_from(size / list_head - 1).unwrap_or(u32::MAX));
    let mut rejected_override = None;
    if let Some(value) = override_var {
        match value.trim().parse::<u32>() {
            Ok(n) if (MIN_MAX_HOOKS..=HOOK_SLOTS as u32).contains(&n) => {
                return match criu_max {
                    Some(max) if n > max => HostProfile {
                        max_hooks: max,
                        basis: ProfileBasis::HookTable { criu_max: max },
                        rejected_override: None,
                        capped_override: Some(n),
                    },
                    _ => HostProfile {
                        max_hooks: n,
                        basis: ProfileBasis::Override,
                        rejected_override: None,
                        capped_override: None,
                    },
                };
            }
            _ => rejected_override = Some(value.to_owned()),
        }
    }
    if let Some(criu_max) = criu_max {
        return HostProfile {
            max_hooks: criu_max.min(HOOK_SLOTS as u32),
            basis: ProfileBasis::HookTable { criu_max },
            rejected_override,
            capped_override: None,
        };
    }
    let (max_hooks, basis) = if has_symbol("check_and_remove_inventory_plugin") {
        (
            12,
            ProfileBasis::Marker("check_and_remove_inventory_plugin"),
        )
    } else if has_symbol("criu_get_image_dir") {
        (10, ProfileBasis::Marker("criu_get_image_dir"))
    } else {
        (HOOK_SLOTS as u32, ProfileBasis::NoCriu)
    };
    HostProfile {
        max_hooks,
        basis,
        rejected_override,
        capped_override: None,
    }
}

/// `RTLD_DL_SYMENT` of glibc's `dladdr1`.
const RTLD_DL_SYMENT: c_int = 1;

#[cfg(target_pointer_width = "64")]
type ElfSym = libc::Elf64_Sym;
#[cfg(target_pointer_width = "32")]
type ElfSym = libc::Elf32_Sym;

/// The ELF symbol size of CRIU's `cr_plugin_ctl`, if the process has one.
fn hook_table_size() -> Option<u64> {
    let addr = crate::criu::lookup(c"cr_plugin_ctl")?;
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::uninit();
    let mut sym: *mut c_void = std::ptr::null_mut();
    // SAFETY: `info` is writable storage for a Dl_info and `sym` for one
    // pointer, which is what dladdr1 fills with RTLD_DL_SYMENT.
    let found = unsafe { libc::dladdr1(addr, info.as_mut_ptr(), &mut sym, RTLD_DL_SYMENT) };
    if found == 0 || sym.is_null() {
        return None;
    }
    // SAFETY: with RTLD_DL_SYMENT a successful dladdr1 stores a pointer to
    // the symbol's entry in the object's (read-only, mapped) symbol table.
    let sym = unsafe { &*sym.cast::<ElfSym>() };
    #[allow(clippy::useless_conversion)] // u32 on 32-bit targets
    Some(u64::from(sym.st_size))
}

/// The host profile of this process, computed once (normally by the load-time
/// constructor).
pub fn host_profile() -> &'static HostProfile {
    static PROFILE: OnceLock<HostProfile> = OnceLock::new();
    PROFILE.get_or_init(|| {
        let override_var = std::env::var("AMDGPU_PLUGIN_MAX_HOOKS").ok();
        choose_profile(override_var.as_deref(), hook_table_size(), &|name| {
            std::ffi::CString::new(name)
                .ok()
                .and_then(|name| crate::criu::lookup(&name))
                .is_some()
        })
    })
}

/// Runs a hook body, turning a panic into a logged [`PANIC_ERRNO`].
fn guarded(hook: &str, body: impl FnOnce() -> c_int) -> c_int {
    crate::log::install();
    let body = || {
        #[cfg(test)]
        test_support::maybe_panic(hook);
        body()
    };
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(ret) => ret,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            crate::log_error!("internal error in {hook}: {what} (this is a bug)");
            PANIC_ERRNO
        }
    }
}

/// Test support (this crate's own unit tests only, never in any build
/// another crate links): a trigger that makes one hook's body panic, so
/// tests can prove the trampolines turn a panic into an error CRIU sees.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::{Mutex, PoisonError};

    static PANIC_IN: Mutex<Option<String>> = Mutex::new(None);

    /// The next call of `hook` (`"DUMP_EXT_FILE"`, `"init"`, ...) panics
    /// inside its body; `None` disarms.
    pub fn panic_in(hook: Option<&str>) {
        *PANIC_IN.lock().unwrap_or_else(PoisonError::into_inner) = hook.map(str::to_owned);
    }

    pub(super) fn maybe_panic(hook: &str) {
        let fire = {
            let mut armed = PANIC_IN.lock().unwrap_or_else(PoisonError::into_inner);
            let fire = armed.as_deref() == Some(hook);
            if fire {
                *armed = None;
            }
            fire
        };
        if fire {
            panic!("test-triggered panic in {hook}");
        }
    }

    /// The trampoline CRIU calls for hook `id` (null for an empty slot).
    pub fn hook_ptr(id: usize) -> *const std::ffi::c_void {
        super::CR_PLUGIN_DESC
            .hooks
            .get(id)
            .copied()
            .unwrap_or(std::ptr::null())
    }

    /// The descriptor's `init` and `exit`.
    pub fn init_exit() -> (
        unsafe extern "C" fn(std::ffi::c_int) -> std::ffi::c_int,
        unsafe extern "C" fn(std::ffi::c_int, std::ffi::c_int),
    ) {
        (super::CR_PLUGIN_DESC.init, super::CR_PLUGIN_DESC.exit)
    }
}

unsafe extern "C" fn plugin_init(stage: c_int) -> c_int {
    guarded("init", || runtime::init(stage))
}

unsafe extern "C" fn plugin_exit(stage: c_int, ret: c_int) {
    guarded("exit", || {
        runtime::exit(stage, ret);
        0
    });
}

unsafe extern "C" fn handle_device_vma(fd: c_int, st: *const libc::stat) -> c_int {
    guarded("HANDLE_DEVICE_VMA", || {
        // SAFETY: CRIU passes a pointer to the stat of the mapped file,
        // valid for the duration of the call; NULL is rejected here.
        let Some(st) = (unsafe { st.as_ref() }) else {
            crate::log_error!("HANDLE_DEVICE_VMA called without a stat buffer");
            return -libc::EINVAL;
        };
        runtime::handle_device_vma(fd, st)
    })
}

unsafe extern "C" fn dump_ext_file(fd: c_int, id: c_int) -> c_int {
    guarded("DUMP_EXT_FILE", || {
        if fd < 0 {
            return runtime::NOT_MINE;
        }
        // SAFETY: CRIU passes an fd of its own that stays open until the
        // hook returns; the borrow does not outlive this closure.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        runtime::dump_ext_file(fd, id)
    })
}

unsafe extern "C" fn dump_devices_late(pid: c_int) -> c_int {
    guarded("DUMP_DEVICES_LATE", || runtime::dump_devices_late(pid))
}

unsafe extern "C" fn restore_init() -> c_int {
    guarded("RESTORE_INIT", runtime::restore_init)
}

unsafe extern "C" fn post_forking() -> c_int {
    guarded("POST_FORKING", runtime::post_forking)
}

unsafe extern "C" fn restore_ext_file(id: c_int, retry_needed: *mut bool) -> c_int {
    let has_retry = host_profile().restore_ext_file_has_retry();
    let mut retry = false;
    let ret = guarded("RESTORE_EXT_FILE", || {
        let (ret, wants_retry) = runtime::restore_ext_file(id);
        retry = wants_retry;
        ret
    });
    if has_retry && !retry_needed.is_null() {
        // SAFETY: CRIU versions with the retry protocol pass a pointer to a
        // local `bool` that lives across the call; older ones are excluded
        // by `has_retry` (their second argument register is garbage).
        unsafe { retry_needed.write(retry && ret >= 0) };
    }
    ret
}

unsafe extern "C" fn update_vma_map(
    path: *const c_char,
    addr: u64,
    old_pgoff: u64,
    new_pgoff: *mut u64,
    plugin_fd: *mut c_int,
) -> c_int {
    guarded("UPDATE_VMA_MAP", || {
        if path.is_null() || new_pgoff.is_null() || plugin_fd.is_null() {
            crate::log_error!("UPDATE_VMA_MAP called with a NULL argument");
            return -libc::EINVAL;
        }
        // SAFETY: CRIU passes the VMA's NUL-terminated path, valid for the
        // call.
        let path = unsafe { CStr::from_ptr(path) };
        match runtime::update_vma_map(path.to_bytes(), addr, old_pgoff) {
            runtime::VmaUpdate::Translated { pgoff, fd } => {
                // SAFETY: both out-pointers were checked non-NULL and point
                // at CRIU locals that live across the call.
                unsafe {
                    new_pgoff.write(pgoff);
                    plugin_fd.write(fd);
                }
                1
            }
            runtime::VmaUpdate::Unchanged => 0,
            runtime::VmaUpdate::Errno(errno) => errno,
        }
    })
}

unsafe extern "C" fn resume_devices_late(pid: c_int) -> c_int {
    guarded("RESUME_DEVICES_LATE", || runtime::resume_devices_late(pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_layout_matches_cr_plugin_desc() {
        let ptr = std::mem::size_of::<*const c_void>();
        assert_eq!(std::mem::offset_of!(CrPluginDesc, name), 0);
        assert_eq!(std::mem::offset_of!(CrPluginDesc, init), ptr);
        assert_eq!(std::mem::offset_of!(CrPluginDesc, exit), 2 * ptr);
        assert_eq!(std::mem::offset_of!(CrPluginDesc, version), 3 * ptr);
        assert_eq!(std::mem::offset_of!(CrPluginDesc, max_hooks), 3 * ptr + 4);
        assert_eq!(std::mem::offset_of!(CrPluginDesc, hooks), 3 * ptr + 8);
        if ptr == 8 {
            assert_eq!(std::mem::size_of::<CrPluginDesc>(), 160);
        }
    }

    #[test]
    fn descriptor_registers_our_hooks_only() {
        let ours = [2, 3, 7, 8, 9, 12, 13, 14];
        for id in 0..HOOK_SLOTS {
            assert_eq!(CR_PLUGIN_DESC.has_hook(id), ours.contains(&id), "slot {id}");
        }
        assert_eq!(CR_PLUGIN_DESC.version(), 0x200);
        assert_eq!(CR_PLUGIN_DESC.name(), c"amdgpu_plugin");
    }

    fn no_symbols(_: &str) -> bool {
        false
    }

    #[test]
    fn hook_table_size_gives_criu_max() {
        let head = 2 * std::mem::size_of::<*const c_void>() as u64;
        for (criu_max, expect) in [(10, 10), (12, 12), (13, 13), (15, 15), (16, 16), (17, 16)] {
            let p = choose_profile(None, Some(head * (criu_max + 1)), &no_symbols);
            assert_eq!(p.max_hooks, expect);
            assert_eq!(
                p.basis,
                ProfileBasis::HookTable {
                    criu_max: criu_max as u32
                }
            );
        }
    }

    #[test]
    fn override_wins_and_bad_override_is_reported() {
        let p = choose_profile(Some("13"), Some(1000), &no_symbols);
        assert_eq!((p.max_hooks, p.basis), (13, ProfileBasis::Override));
        let p = choose_profile(Some("17"), None, &|s| s == "criu_get_image_dir");
        assert_eq!(p.max_hooks, 10);
        assert_eq!(p.rejected_override.as_deref(), Some("17"));
        let p = choose_profile(Some("nine"), None, &no_symbols);
        assert_eq!(p.rejected_override.as_deref(), Some("nine"));
        assert_eq!(p.basis, ProfileBasis::NoCriu);
    }

    #[test]
    fn markers_are_the_fallback_and_never_overestimate() {
        let p = choose_profile(None, Some(7), &|s| {
            s == "criu_get_image_dir" || s == "check_and_remove_inventory_plugin"
        });
        assert_eq!(p.max_hooks, 12);
        let p = choose_profile(None, None, &|s| s == "criu_get_image_dir");
        assert_eq!(p.max_hooks, 10);
        assert!(!p.has_post_forking() && !p.restore_ext_file_has_retry());
        let p = choose_profile(None, None, &no_symbols);
        assert_eq!((p.max_hooks, p.basis.clone()), (16, ProfileBasis::NoCriu));
        assert!(p.has_dump_devices_late() && p.restore_ext_file_has_retry());
    }

    #[test]
    fn an_override_above_criu_is_capped_at_its_hook_table() {
        let head = 2 * std::mem::size_of::<*const c_void>() as u64;
        // CRIU 4.1.1 has 12 hooks: forcing 15 would make it refuse the plugin.
        let p = choose_profile(Some("15"), Some(head * 13), &no_symbols);
        assert_eq!(p.max_hooks, 12);
        assert_eq!(p.capped_override, Some(15));
        assert_eq!(p.basis, ProfileBasis::HookTable { criu_max: 12 });
        // At or below CRIU's maximum the override is taken.
        let p = choose_profile(Some("11"), Some(head * 13), &no_symbols);
        assert_eq!(
            (p.max_hooks, p.basis, p.capped_override),
            (11, ProfileBasis::Override, None)
        );
        // Without the table nothing says what CRIU accepts.
        let p = choose_profile(Some("16"), None, &|s| s == "criu_get_image_dir");
        assert_eq!((p.max_hooks, p.basis), (16, ProfileBasis::Override));
    }

    #[test]
    fn retry_argument_follows_restore_init() {
        let at = |n: &str| choose_profile(Some(n), None, &no_symbols);
        assert!(!at("13").restore_ext_file_has_retry());
        assert!(at("14").restore_ext_file_has_retry());
        assert!(!at("14").has_dump_devices_late());
        assert!(at("13").has_post_forking() && !at("12").has_post_forking());
    }

    #[test]
    fn guarded_turns_a_panic_into_an_error_that_is_not_enotsup() {
        let capture = crate::log::Capture::start();
        let ret = guarded("TEST_HOOK", || panic!("boom"));
        assert_eq!(ret, PANIC_ERRNO);
        assert_ne!(ret, -libc::ENOTSUP);
        assert!(capture.contains(
            crate::log::Level::Error,
            "internal error in TEST_HOOK: boom"
        ));
    }
}
