//! Removing the demo's temporary directories when SIGINT, SIGTERM or SIGHUP
//! ends a run: the image directory (unless the user named it with `--dir`), the
//! emulated CRIU's directory and the simulators' sysfs trees. Without this
//! a Ctrl-C leaves gigabytes under `/tmp` and `/dev/shm`.
//!
//! [`install`] blocks the signals in the calling thread, which must be the
//! main thread before any other thread exists (threads inherit the mask;
//! [`crate::signals`] takes them with `sigwait`), and a dedicated thread
//! waits for the first one: it removes every
//! registered directory and exits with 128 + the signal number, as a shell
//! reports a death by that signal. This module never removes a path it was
//! not given.

use std::path::PathBuf;
use std::sync::Mutex;

/// Directories to remove if a signal ends the run.
static TEMPORARY: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Runs `create` and registers the directory `path` finds in what it
/// made for removal if a signal ends the run, both under the lock the
/// signal thread takes: a signal that arrives while the directory is being
/// made waits until it is registered, so no directory exists unregistered.
pub(super) fn removed_on_signal<T, E>(
    create: impl FnOnce() -> Result<T, E>,
    path: impl FnOnce(&T) -> Option<PathBuf>,
) -> Result<T, E> {
    let mut paths = TEMPORARY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let made = create()?;
    if let Some(dir) = path(&made) {
        paths.push(dir);
    }
    Ok(made)
}

/// A temporary directory named `prefix` + random characters, removed if a
/// signal ends the run (and when dropped).
pub(super) fn temporary_dir(prefix: &str) -> Result<tempfile::TempDir, String> {
    removed_on_signal(
        || tempfile::Builder::new().prefix(prefix).tempdir(),
        |dir| Some(dir.path().to_owned()),
    )
    .map_err(|e| format!("cannot create a temporary directory: {e}"))
}

/// Takes SIGINT, SIGTERM and SIGHUP away from their default action (see
/// the module documentation). Call first thing in the main thread.
pub(super) fn install() -> Result<(), String> {
    let signals = crate::signals::block(None)?;
    std::thread::Builder::new()
        .name("demo-cleanup".into())
        .spawn(move || {
            let Ok(signal) = signals.recv() else { return };
            // Held until the exit: no directory is made after the list
            // is read.
            let paths = TEMPORARY
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let removed = paths
                .iter()
                .filter(|p| std::fs::remove_dir_all(p).is_ok())
                .count();
            eprintln!(
                "amdgpu-criu demo: stopped by {}; removed {removed} temporary director{} \
                 (a directory given with --dir is left as it is: `amdgpu-criu verify DIR` \
                 tells whether it holds a complete image set)",
                crate::signals::name(signal),
                if removed == 1 { "y" } else { "ies" }
            );
            std::process::exit(128 + signal);
        })
        .map(drop)
        .map_err(|e| format!("cannot start the signal thread: {e}"))
}
