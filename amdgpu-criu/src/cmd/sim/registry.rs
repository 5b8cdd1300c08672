//! Where the served machines of this user are known: one directory per
//! machine, named by the pid of the process serving it, under the
//! registry directory:
//!
//! * `$AMDGPU_CRIU_SIM_DIR` when set;
//! * else `$XDG_RUNTIME_DIR/amdgpu-criu-sim`;
//! * else `/run/amdgpu-criu-sim` for root, `/tmp/amdgpu-criu-sim-<uid>`
//!   for another user.
//!
//! A machine's directory holds `lock` (locked by the serving process for
//! its whole life: a directory whose lock is free belongs to no live
//! machine, whatever became of its pid), `machine.json` (its
//! [`MachineRecord`], written once it serves), `control` (the socket `ps`, `stop` and
//! `checkpoint` talk to, see [`super::control`]), the machine's topology
//! tree, the directory its processes' `/dev/shm` is, and the staging
//! directories of their private `/dev`s. The serving process removes it
//! when it ends, and the registry directory too once empty; a directory
//! whose process died without doing so (`SIGKILL`) is removed by the next
//! command that lists the machines.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Names another registry directory (tests, several independent users of
/// one account).
pub const DIR_VAR: &str = "AMDGPU_CRIU_SIM_DIR";

/// The record's file name.
const RECORD: &str = "machine.json";

/// The control socket's file name.
pub const CONTROL: &str = "control";

/// The lock's file name.
const LOCK: &str = "lock";

/// The registry directory (see the module docs).
pub fn base() -> PathBuf {
    if let Some(dir) = std::env::var_os(DIR_VAR).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(run).join("amdgpu-criu-sim");
    }
    let uid = rustix::process::getuid();
    if uid.is_root() {
        PathBuf::from("/run/amdgpu-criu-sim")
    } else {
        std::env::temp_dir().join(format!("amdgpu-criu-sim-{}", uid.as_raw()))
    }
}

/// What a served machine is, as the process serving it records it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MachineRecord {
    /// The machine directory's path.
    pub dir: PathBuf,
    /// The serving process.
    pub server_pid: u32,
    /// Its start time (`/proc/PID/stat` field 22), telling it from a later
    /// process with the same pid.
    pub server_start: u64,
    /// The uid it runs as.
    pub uid: u32,
    /// How output names the machine.
    pub machine: String,
    /// The machine as named on the command line (`builtin:NAME` or a
    /// directory).
    pub spec: String,
    /// Renumbered with this seed.
    pub renumber: Option<u64>,
    /// The address clients connect to.
    pub address: String,
    /// The machine's topology tree.
    pub topology: PathBuf,
    /// The directory its processes' `/dev/shm` is.
    pub shm: PathBuf,
    /// Its GPUs' render minors.
    pub render_minors: Vec<u32>,
    /// What it was started for: the program's command line, or the
    /// restored images directory.
    pub started_for: StartedFor,
    /// Where the program's output goes (`None`: the terminal of `sim run`).
    pub output: Option<PathBuf>,
}

/// Why a machine is served.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StartedFor {
    /// `sim run`: the program and its arguments.
    Run(Vec<String>),
    /// `sim restore`: the images directory.
    Restore(PathBuf),
}

impl MachineRecord {
    /// What a client of this machine needs.
    pub fn endpoint(&self) -> kfd_sim_host::Endpoint {
        kfd_sim_host::Endpoint {
            address: self.address.clone(),
            topology: self.topology.clone(),
            shm: self.shm.clone(),
            render_minors: self.render_minors.clone(),
        }
    }

    /// The machine's directory.
    pub fn dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// Whether its serving process still holds it.
    pub fn live(&self) -> bool {
        locked(&self.dir) == Some(true)
    }
}

/// A process's start time (`/proc/PID/stat` field 22).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Writes `record` into `dir` (atomically: a reader sees all or nothing).
pub fn write(dir: &Path, record: &MachineRecord) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(record).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!(".{RECORD}"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, dir.join(RECORD))
}

/// Whether a serving process holds the lock of machine directory `dir`;
/// `None` when the directory has no lock (yet).
fn locked(dir: &Path) -> Option<bool> {
    let file = std::fs::File::open(dir.join(LOCK)).ok()?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => Some(false),
        Err(_) => Some(true),
    }
}

/// The machines of the registry.
#[derive(Debug, Default)]
pub struct Scan {
    /// Those whose record reads, by server pid.
    pub machines: Vec<MachineRecord>,
    /// The serving pids of live machines whose record does not read
    /// (written by another version of this tool).
    pub unreadable: Vec<u32>,
}

/// Every machine this user serves; directories no live machine holds
/// are removed on the way.
pub fn scan() -> Scan {
    let base = base();
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Scan::default();
    };
    let mut out = Scan::default();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        match locked(&entry.path()) {
            Some(true) => {}
            // Just created: its process locks it next.
            None if start_time(pid).is_some() => continue,
            _ => {
                let _ = std::fs::remove_dir_all(entry.path());
                continue;
            }
        }
        let record: Option<MachineRecord> = std::fs::read_to_string(entry.path().join(RECORD))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        match record {
            Some(r) => out.machines.push(r),
            // Not written yet, or by another version.
            None if entry.path().join(RECORD).exists() => out.unreadable.push(pid),
            None => {}
        }
    }
    let _ = std::fs::remove_dir(&base);
    out.machines.sort_by_key(|r| r.server_pid);
    out.unreadable.sort_unstable();
    out
}

/// The machines of [`scan`] whose record reads.
pub fn machines() -> Vec<MachineRecord> {
    scan().machines
}

/// The machine directory of this process, created (with the registry
/// directory, both open to this user only), removed on drop with the
/// registry directory when that is left empty.
#[derive(Debug)]
pub struct MachineDir {
    path: PathBuf,
    /// The locked `lock` file, held until the directory is removed.
    _lock: std::fs::File,
}

impl MachineDir {
    /// Creates it.
    pub fn create() -> std::io::Result<MachineDir> {
        use std::os::unix::fs::DirBuilderExt;
        let base = base();
        // Another machine's end may remove the registry directory between
        // the two steps: try again then.
        let mut tries = 0;
        let path = base.join(std::process::id().to_string());
        loop {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&base)?;
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 10 => tries += 1,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    // A directory of an earlier process with this pid.
                    std::fs::remove_dir_all(&path)?;
                }
                Err(e) => return Err(e),
            }
        }
        let lock = std::fs::File::create(path.join(LOCK))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive)?;
        Ok(MachineDir { path, _lock: lock })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for MachineDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        if let Some(base) = self.path.parent() {
            let _ = std::fs::remove_dir(base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_live_while_its_lock_is_held() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(locked(dir.path()), None, "no lock yet");
        let lock = std::fs::File::create(dir.path().join(LOCK)).unwrap();
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
        assert_eq!(locked(dir.path()), Some(true));
        drop(lock);
        assert_eq!(locked(dir.path()), Some(false), "its process is gone");
    }

    #[test]
    fn start_time_tells_a_live_process() {
        assert!(start_time(std::process::id()).is_some());
        assert_eq!(start_time(u32::MAX), None);
    }
}
