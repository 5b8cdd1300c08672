//! Removing the demo's temporary directories when SIGINT or SIGTERM ends a
//! run: the image directory (unless the user named it with `--dir`), the
//! emulated CRIU's directory and the simulators' sysfs trees. Without this
//! a Ctrl-C leaves gigabytes under `/tmp` and `/dev/shm`.
//!
//! [`install`] blocks both signals in the calling thread, which must be the
//! main thread before any other thread exists (threads inherit the mask),
//! and a dedicated thread takes them with `sigwait`: it removes every
//! registered directory and exits with 128 + the signal number, as a shell
//! reports a death by that signal. This module never removes a path it was
//! not given.

#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Directories to remove if a signal ends the run.
static TEMPORARY: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes `path` (a directory the demo created) if a signal ends the run.
pub(super) fn remove_on_signal(path: &Path) {
    if let Ok(mut paths) = TEMPORARY.lock() {
        paths.push(path.to_owned());
    }
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, and sigemptyset initialises it before
    // sigaddset reads it; both only write into `set`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// Takes SIGINT and SIGTERM away from their default action (see the module
/// documentation). Call first thing in the main thread.
pub(super) fn install() -> Result<(), String> {
    let set = signal_set();
    // SAFETY: `set` is an initialised signal set; the old mask is not asked
    // for (null), and pthread_sigmask touches nothing else.
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if ret != 0 {
        return Err(format!(
            "cannot block SIGINT and SIGTERM: {}",
            std::io::Error::from_raw_os_error(ret)
        ));
    }
    std::thread::Builder::new()
        .name("demo-signals".into())
        .spawn(move || loop {
            let mut signal: libc::c_int = 0;
            // SAFETY: `set` is initialised and outlives the call; sigwait
            // writes the signal taken into `signal`.
            if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
                continue;
            }
            let name = if signal == libc::SIGINT {
                "SIGINT"
            } else {
                "SIGTERM"
            };
            let paths = TEMPORARY
                .lock()
                .map(|p| p.clone())
                .unwrap_or_else(|poisoned| poisoned.into_inner().clone());
            let removed = paths
                .iter()
                .filter(|p| std::fs::remove_dir_all(p).is_ok())
                .count();
            eprintln!(
                "amdgpu-criu demo: stopped by {name}; removed {removed} temporary director{} \
                 (a directory given with --dir is left as it is: `amdgpu-criu verify DIR` \
                 tells whether it holds a complete image set)",
                if removed == 1 { "y" } else { "ies" }
            );
            std::process::exit(128 + signal);
        })
        .map(drop)
        .map_err(|e| format!("cannot start the signal thread: {e}"))
}
