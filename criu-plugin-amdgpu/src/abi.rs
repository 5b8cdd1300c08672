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
//! `max_hooks` is an [`AtomicU32`] (same size, alignment and bit pattern as
//! C's `unsigned int`), written at load time by an ELF constructor (an
//! `.init_array` entry, run by `dlopen` before it returns, i.e. before CRIU
//! reads the descriptor) with the [`host_profile`]'s choice; CRIU's plain
//! reads after `dlopen` returned are ordered after the constructor by the
//! loader's lock. How the value is chosen, and what the plugin does where a
//! hook is missing, is told in [`crate::host`], which also keeps the facts of
//! CRIU's plugin interface this module re-exports.
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

use crate::runtime;

pub use crate::host::{
    choose_profile, hook, host_profile, HostProfile, ProfileBasis, Stage, HOOK_SLOTS,
    MIN_MAX_HOOKS, PLUGIN_NAME,
};

/// `CRIU_PLUGIN_VERSION` = GEN(0, 2, 0).
pub const CRIU_PLUGIN_VERSION: c_uint = 0x200;

/// What a hook answers when a panic was caught: `-ENOTRECOVERABLE`, distinct
/// from the errors the plugin reports itself so a log reader can tell a bug.
pub const PANIC_ERRNO: c_int = -libc::ENOTRECOVERABLE;

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

/// Runs a hook body, turning a panic into a logged [`PANIC_ERRNO`].
fn guarded(hook: &str, body: impl FnOnce() -> c_int) -> c_int {
    crate::log::install();
    crate::log::set_sink(|level, start, text| crate::criu::services().print(level, start, text));
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
