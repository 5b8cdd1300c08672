//! What a CRIU plugin needs to carry a process's connection to a served
//! machine through real CRIU (`KFD_SIM_REMOTE`): the connection is a unix
//! socket whose peer (the test's server) is outside the dumped tree, which
//! CRIU refuses to dump unless a plugin claims it (`DUMP_UNIX_SK`) and then
//! asks the plugin for a socket in its place at restore
//! (`RESTORE_UNIX_SK`, in the restored task).
//!
//! The plugin is a few lines of C beside the test that loads it
//! (`real-criu-harness/c/remote_sk_plugin.c`), and the same as a Rust
//! cdylib, `kfd-sim-remote-plugin`, which `amdgpu-criu sim` gives CRIU:
//! this library exports
//! no `CR_PLUGIN_DESC` of its own (see `build.rs`), so the plugin finds
//! these two functions with `dlsym` in the CRIU process it is loaded into,
//! which runs with this library preloaded. A restored task's connection is
//! a new connection of the restored process itself (its pid, as the served
//! machine checks it), which its memory's driver then uses ([`crate::machine`]).

use std::ffi::c_int;
use std::os::fd::{BorrowedFd, IntoRawFd};

use crate::hooks::run_guarded;
use crate::machine;

/// Whether `fd` is a connection to a served machine: 1 (CRIU's
/// `DUMP_UNIX_SK` claims it), 0 (not one), -1 without `KFD_SIM_REMOTE`.
#[no_mangle]
pub extern "C" fn kfd_sim_preload_is_connection(fd: c_int) -> c_int {
    run_guarded(-1, || {
        let Ok(m) = machine::get() else {
            return -1;
        };
        if m.remote.is_none() || fd < 0 {
            return -1;
        }
        // SAFETY: F_GETFD reads no memory; it only tells whether `fd` is
        // open, and it is then only borrowed for the checks.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return 0;
        }
        // SAFETY: checked open just above; borrowed for this call only.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        c_int::from(kfd_sim::remote::is_connection(fd))
    })
}

/// A new fd of this process's connection to the served machine (made now
/// when it has none), close-on-exec, above every fd open here; `-errno` on
/// failure (`-ENOENT` without `KFD_SIM_REMOTE`).
#[no_mangle]
pub extern "C" fn kfd_sim_preload_connection() -> c_int {
    run_guarded(-libc::EBUSY, || {
        let Some(remote) = machine::get().ok().and_then(|m| m.remote.as_ref()) else {
            return -libc::ENOENT;
        };
        match remote.connection() {
            Ok(fd) => fd.into_raw_fd(),
            Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
        }
    })
}
