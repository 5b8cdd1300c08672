//! Where the simulator keeps its files (the sysfs trees): one directory per
//! host process, `kfd-sim-run-<pid>-<start time>-ns<pid namespace>` in
//! `/dev/shm` (tmpfs: a large topology is thousands of small files) or the
//! temp directory (or first in `KFD_SIM_RUN_BASE`, [`RUN_BASE_VAR`]).
//!
//! Each simulator's tree is a temporary directory inside it, removed when
//! the simulator is dropped; the run directory itself is removed when the
//! process exits (`atexit`, which also runs after a test panicked), and run
//! directories whose process is gone (killed, aborted) are removed by the
//! next process that creates its own. So no tree outlives its process for
//! longer than the next run.
//!
//! It never removes a directory of a process that is still alive, nor one
//! of another pid namespace (a container's processes and the host's may
//! share a `/dev/shm`): there a pid names another process, so whether the
//! owner lives cannot be told.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The prefix of every run directory.
pub const RUN_PREFIX: &str = "kfd-sim-run-";

/// Names a directory run directories go to first (`KFD_SIM_RUN_BASE`): one
/// that every process reading a simulator's trees sees at the same path,
/// such as a directory mounted at its own path into a container (whose
/// `/dev/shm` is its own).
pub const RUN_BASE_VAR: &str = "KFD_SIM_RUN_BASE";

/// Where run directories go: `KFD_SIM_RUN_BASE` when set, `/dev/shm` when
/// it is usable, else the temp directory.
fn base_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os(RUN_BASE_VAR)
        .map(PathBuf::from)
        .into_iter()
        .collect();
    dirs.extend([PathBuf::from("/dev/shm"), std::env::temp_dir()]);
    dirs
}

/// A process's start time (`/proc/PID/stat` field 22), telling a pid from
/// a later process that reused it.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields after it.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The owner `(pid, start time)` a run directory name encodes.
pub fn owner_of(name: &str) -> Option<(u32, u64)> {
    let (pid, rest) = name.strip_prefix(RUN_PREFIX)?.split_once('-')?;
    let start = rest.split_once("-ns").map_or(rest, |(start, _)| start);
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// The pid namespace a run directory name records (`None`: a name from
/// before namespaces were recorded).
fn namespace_of(name: &str) -> Option<u64> {
    name.rsplit_once("-ns")?.1.parse().ok()
}

/// This process's pid namespace (the inode of `/proc/self/ns/pid`).
fn own_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// Whether the run directory `name` belongs to no living process (of this
/// pid namespace).
pub fn is_stale(name: &str) -> bool {
    let here = namespace_of(name).is_none_or(|ns| Some(ns) == own_namespace());
    match owner_of(name) {
        Some((pid, start)) if here => start_time(pid) != Some(start),
        _ => false,
    }
}

/// Removes every stale run directory under `base`; returns how many.
pub fn remove_stale(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if is_stale(name) && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

static RUN_DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();

extern "C" fn remove_run_dir() {
    if let Some(Ok(dir)) = RUN_DIR.get() {
        // A forked child that exits through exit(3) runs this too: only
        // the owner removes the directory.
        let owner = dir
            .file_name()
            .and_then(|n| owner_of(n.to_str()?))
            .map(|(pid, _)| pid);
        if owner == Some(std::process::id()) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// This process's run directory, created (and its removal at exit
/// registered, stale ones removed) on first use.
pub fn run_dir() -> io::Result<&'static Path> {
    let dir = RUN_DIR.get_or_init(|| {
        let pid = std::process::id();
        let start = start_time(pid).unwrap_or(0);
        let mut last = None;
        for base in base_dirs() {
            remove_stale(&base);
            let ns = own_namespace().unwrap_or(0);
            let dir = base.join(format!("{RUN_PREFIX}{pid}-{start}-ns{ns}"));
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    // SAFETY: `remove_run_dir` is a plain extern "C" fn
                    // that lives as long as the program; atexit only
                    // stores it.
                    unsafe { libc::atexit(remove_run_dir) };
                    return Ok(dir);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(dir),
                Err(e) => last = Some(format!("{}: {e}", dir.display())),
            }
        }
        Err(last.unwrap_or_default())
    });
    dir.as_deref()
        .map_err(|e| io::Error::other(format!("cannot create the simulator's run directory {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_directories_of_dead_processes_are_stale_and_removed() {
        let base = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let live = format!("{RUN_PREFIX}{me}-{}", start_time(me).unwrap());
        // A pid that cannot be running (above pid_max's ceiling).
        let dead = format!("{RUN_PREFIX}4194305-1");
        // The same, named by a process of another pid namespace: its pid
        // there says nothing here.
        let elsewhere = format!("{RUN_PREFIX}4194305-1-ns1");
        // This process's pid with another start time: a reused pid.
        let reused = format!("{RUN_PREFIX}{me}-1");
        let foreign = "kfd-sim-other".to_owned();
        // Dead, named in this namespace.
        let ns = own_namespace().unwrap();
        let dead_here = format!("{RUN_PREFIX}4194305-1-ns{ns}");
        for name in [&live, &dead, &elsewhere, &dead_here, &reused, &foreign] {
            std::fs::create_dir_all(base.path().join(name).join("sys")).unwrap();
        }
        assert!(!is_stale(&live));
        assert!(is_stale(&dead) && is_stale(&reused) && is_stale(&dead_here));
        assert!(!is_stale(&foreign) && !is_stale(&elsewhere));
        assert_eq!(owner_of(&dead_here), Some((4194305, 1)));
        assert_eq!(remove_stale(base.path()), 3);
        let mut left: Vec<String> = std::fs::read_dir(base.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want = vec![foreign, live, elsewhere];
        want.sort();
        assert_eq!(left, want);
    }

    #[test]
    fn the_run_directory_is_this_process_s() {
        let dir = run_dir().unwrap();
        let name = dir.file_name().unwrap().to_str().unwrap();
        assert_eq!(owner_of(name).unwrap().0, std::process::id());
        assert!(dir.is_dir());
    }
}
