//! Where the simulator keeps its files (the sysfs trees): one directory per
//! host process, `kfd-sim-run-<pid>-<start time>` in `/dev/shm` (tmpfs:
//! a large topology is thousands of small files) or the temp directory.
//!
//! Each simulator's tree is a temporary directory inside it, removed when
//! the simulator is dropped; the run directory itself is removed when the
//! process exits (`atexit`, which also runs after a test panicked), and run
//! directories whose process is gone (killed, aborted) are removed by the
//! next process that creates its own. So no tree outlives its process for
//! longer than the next run.
//!
//! It never removes a directory of a process that is still alive.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The prefix of every run directory.
pub const RUN_PREFIX: &str = "kfd-sim-run-";

/// Where run directories go: `/dev/shm` when it is usable, else the temp
/// directory.
fn base_dirs() -> [PathBuf; 2] {
    [PathBuf::from("/dev/shm"), std::env::temp_dir()]
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
    let (pid, start) = name.strip_prefix(RUN_PREFIX)?.split_once('-')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// Whether the run directory `name` belongs to no living process.
pub fn is_stale(name: &str) -> bool {
    match owner_of(name) {
        Some((pid, start)) => start_time(pid) != Some(start),
        None => false,
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
            let dir = base.join(format!("{RUN_PREFIX}{pid}-{start}"));
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
        // This process's pid with another start time: a reused pid.
        let reused = format!("{RUN_PREFIX}{me}-1");
        let foreign = "kfd-sim-other".to_owned();
        for name in [&live, &dead, &reused, &foreign] {
            std::fs::create_dir_all(base.path().join(name).join("sys")).unwrap();
        }
        assert!(!is_stale(&live));
        assert!(is_stale(&dead) && is_stale(&reused));
        assert!(!is_stale(&foreign));
        assert_eq!(remove_stale(base.path()), 2);
        let mut left: Vec<String> = std::fs::read_dir(base.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec![foreign, live]);
    }

    #[test]
    fn the_run_directory_is_this_process_s() {
        let dir = run_dir().unwrap();
        let name = dir.file_name().unwrap().to_str().unwrap();
        assert_eq!(owner_of(name).unwrap().0, std::process::id());
        assert!(dir.is_dir());
    }
}
