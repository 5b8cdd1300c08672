//! A CRIU plugin, `kfd_sim_remote`, that carries a process's connection to
//! a served simulated machine (`kfd-sim-preload` in its `KFD_SIM_REMOTE`
//! mode) through real CRIU: the connection is a unix socket whose peer (the
//! process serving the machine) is outside the dumped tree, which CRIU
//! refuses to dump unless a plugin claims it.
//!
//! ```text
//! DUMP_UNIX_SK(fd, id)   claims the socket when it is such a connection
//! RESTORE_UNIX_SK(id)    in the restored task, hands CRIU a connection of
//!                        the task itself to put where the socket was
//! ```
//!
//! The work is the interposer's (its `criu_socket` module): CRIU runs with
//! it preloaded, and this plugin finds `kfd_sim_preload_is_connection` and
//! `kfd_sim_preload_connection` with `dlsym` in the CRIU process. Without
//! the interposer (CRIU run without `LD_PRELOAD`) every call answers
//! `-ENOTSUP`: not this plugin's socket.
//!
//! The descriptor is CRIU's `cr_plugin_desc_t` (`criu/include/criu-plugin.h`):
//! name, init, exit, version (`CRIU_PLUGIN_VERSION` 0x200), `max_hooks`,
//! then the hook table, of which this plugin fills the first two
//! (`CR_PLUGIN_HOOK__DUMP_UNIX_SK` = 0, `CR_PLUGIN_HOOK__RESTORE_UNIX_SK` =
//! 1), hooks every CRIU release since 2014 has.
//!
//! `amdgpu-criu sim` installs it in the plugin directory it gives CRIU, beside
//! this project's `amdgpu_plugin.so`; it is never part of that `.so`.

#![cfg(target_os = "linux")]

use std::ffi::{c_char, c_int, c_void, CStr};

/// `CRIU_PLUGIN_VERSION`.
const CRIU_PLUGIN_VERSION: u32 = 0x200;

/// The plugin's name in CRIU's log.
const NAME: &CStr = c"kfd_sim_remote";

/// CRIU's `cr_plugin_desc_t` with the two hooks this plugin has.
#[repr(C)]
pub struct CrPluginDesc {
    name: *const c_char,
    init: extern "C" fn(c_int) -> c_int,
    exit: extern "C" fn(c_int, c_int),
    version: u32,
    max_hooks: u32,
    hooks: [*const c_void; 2],
}

// SAFETY: the descriptor is immutable after initialisation; its pointers
// name a static string and functions, valid in every thread.
unsafe impl Sync for CrPluginDesc {}

/// The descriptor CRIU looks up with `dlsym(handle, "CR_PLUGIN_DESC")`.
#[no_mangle]
pub static CR_PLUGIN_DESC: CrPluginDesc = CrPluginDesc {
    name: NAME.as_ptr(),
    init,
    exit,
    version: CRIU_PLUGIN_VERSION,
    max_hooks: 2,
    hooks: [
        dump_unix_sk as *const c_void,
        restore_unix_sk as *const c_void,
    ],
};

extern "C" fn init(_stage: c_int) -> c_int {
    0
}

extern "C" fn exit(_stage: c_int, _ret: c_int) {}

/// The interposer's function `name` in this process, if it is loaded.
fn interposer(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches the global
    // scope, where the preloaded interposer is.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!sym.is_null()).then_some(sym)
}

/// `DUMP_UNIX_SK`: 0 (claimed) when `fd` is a connection to a served
/// machine, `-ENOTSUP` otherwise.
extern "C" fn dump_unix_sk(fd: c_int, _id: c_int) -> c_int {
    let Some(sym) = interposer(c"kfd_sim_preload_is_connection") else {
        return -libc::ENOTSUP;
    };
    // SAFETY: the interposer defines this symbol as
    // `extern "C" fn(c_int) -> c_int` (kfd-sim-preload's criu_socket).
    let is_connection: extern "C" fn(c_int) -> c_int = unsafe { std::mem::transmute(sym) };
    if is_connection(fd) == 1 {
        0
    } else {
        -libc::ENOTSUP
    }
}

/// `RESTORE_UNIX_SK`: a connection of the restored task to the served
/// machine (an fd CRIU puts where the socket was), or `-errno`.
extern "C" fn restore_unix_sk(_id: c_int) -> c_int {
    let Some(sym) = interposer(c"kfd_sim_preload_connection") else {
        return -libc::ENOTSUP;
    };
    // SAFETY: the interposer defines this symbol as
    // `extern "C" fn() -> c_int` (kfd-sim-preload's criu_socket).
    let connection: extern "C" fn() -> c_int = unsafe { std::mem::transmute(sym) };
    connection()
}
