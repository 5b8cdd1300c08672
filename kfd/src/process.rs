//! What a recovery tool learns about another process and how it takes hold
//! of it: its name and tracer, its frozen cgroup, its open fds. The system
//! calls themselves (`ptrace`, `pidfd_open`, `pidfd_getfd`) are methods of
//! [`Driver`](crate::Driver); this module holds their answers' types and the
//! host's `/proc` and cgroup readers behind [`HostDriver`](crate::HostDriver).
//!
//! It never changes another process's state: thawing a cgroup is the user's
//! decision, so only the path and the command are reported.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A process's name and tracer (`/proc/PID/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessStatus {
    /// `Name:` (the command name, at most 15 bytes).
    pub name: String,
    /// `TracerPid:` when it is not 0.
    pub tracer: Option<u32>,
    /// `NSpid:`'s last field: the pid in the process's own (innermost) pid
    /// namespace, the pid `PROCESS_INFO` reports; `None` when the status
    /// shows no `NSpid:` line (a kernel before 4.1, or a driver that models
    /// no pid namespaces: then it is the pid asked about).
    pub ns_pid: Option<u32>,
}

/// The cgroup freezer that holds a process frozen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrozenCgroup {
    /// cgroup v2: `cgroup.freeze` of `dir` (the cgroup or the ancestor that
    /// asked for the freeze) is 1.
    V2 {
        /// The cgroup directory, e.g. `/sys/fs/cgroup/app`.
        dir: PathBuf,
    },
    /// cgroup v1: `freezer.state` of `dir` is `FROZEN` or `FREEZING`.
    V1 {
        /// The freezer cgroup directory, e.g. `/sys/fs/cgroup/freezer/app`.
        dir: PathBuf,
    },
}

impl FrozenCgroup {
    /// The command that thaws the cgroup.
    pub fn thaw_command(&self) -> String {
        match self {
            FrozenCgroup::V2 { dir } => {
                format!("echo 0 > {}", dir.join("cgroup.freeze").display())
            }
            FrozenCgroup::V1 { dir } => {
                format!("echo THAWED > {}", dir.join("freezer.state").display())
            }
        }
    }
}

impl fmt::Display for FrozenCgroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrozenCgroup::V2 { dir } => write!(f, "cgroup v2 {} (frozen)", dir.display()),
            FrozenCgroup::V1 { dir } => write!(f, "cgroup v1 freezer {} (frozen)", dir.display()),
        }
    }
}

/// Parses `/proc/PID/status` text.
pub fn parse_status(text: &str) -> io::Result<ProcessStatus> {
    let mut name = None;
    let mut tracer = None;
    let mut ns_pid = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Name:") {
            name = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("TracerPid:") {
            let pid: u32 = v.trim().parse().map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, format!("TracerPid {v:?}"))
            })?;
            tracer = (pid != 0).then_some(pid);
        } else if let Some(v) = line.strip_prefix("NSpid:") {
            let last = v.split_whitespace().last().unwrap_or_default();
            ns_pid =
                Some(last.parse().map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("NSpid {v:?}"))
                })?);
        }
    }
    let name = name.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Name: line"))?;
    Ok(ProcessStatus {
        name,
        tracer,
        ns_pid,
    })
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The frozen cgroup of a process whose `/proc/PID/cgroup` reads `text`,
/// looked up under the cgroup mount `mount` (`/sys/fs/cgroup`).
pub fn frozen_cgroup_in(text: &str, mount: &Path) -> Option<FrozenCgroup> {
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            // v2: the cgroup or an ancestor may have asked for the freeze.
            let mut dir = mount.join(rel);
            loop {
                if read_trimmed(&dir.join("cgroup.freeze")).as_deref() == Some("1") {
                    return Some(FrozenCgroup::V2 { dir });
                }
                if dir == mount || !dir.pop() || !dir.starts_with(mount) {
                    break;
                }
            }
        } else if controllers.split(',').any(|c| c == "freezer") {
            let dir = mount.join("freezer").join(rel);
            let state = read_trimmed(&dir.join("freezer.state"));
            if matches!(state.as_deref(), Some("FROZEN" | "FREEZING")) {
                return Some(FrozenCgroup::V1 { dir });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_the_tracer() {
        let s = parse_status("Name:\tcriu\nUmask:\t0022\nState:\tS\nTracerPid:\t4242\n").unwrap();
        assert_eq!(s.name, "criu");
        assert_eq!(s.tracer, Some(4242));
        let s = parse_status("Name:\tapp\nTracerPid:\t0\n").unwrap();
        assert_eq!(s.tracer, None);
        assert!(parse_status("TracerPid:\t1\n").is_err());
        assert!(parse_status("Name:\tx\nTracerPid:\tx\n").is_err());
    }

    #[test]
    fn status_gives_the_pid_in_the_process_s_own_namespace() {
        let s = parse_status("Name:\tapp\nTracerPid:\t9\nNSpid:\t4242\t7\n").unwrap();
        assert_eq!(s.ns_pid, Some(7));
        let s = parse_status("Name:\tapp\nNSpid:\t4242\n").unwrap();
        assert_eq!(s.ns_pid, Some(4242));
        assert_eq!(parse_status("Name:\tapp\n").unwrap().ns_pid, None);
        assert!(parse_status("Name:\tapp\nNSpid:\t12 x\n").is_err());
        assert!(parse_status("Name:\tapp\nNSpid:\n").is_err());
    }

    #[test]
    fn frozen_cgroups_v1_and_v2_with_their_thaw_commands() {
        let mount = tempfile::tempdir().unwrap();
        let app = mount.path().join("pods/app");
        std::fs::create_dir_all(&app).unwrap();
        std::fs::write(app.join("cgroup.freeze"), "0\n").unwrap();
        std::fs::write(mount.path().join("pods/cgroup.freeze"), "0\n").unwrap();
        assert_eq!(frozen_cgroup_in("0::/pods/app\n", mount.path()), None);
        // An ancestor's freeze holds the process too.
        std::fs::write(mount.path().join("pods/cgroup.freeze"), "1\n").unwrap();
        let frozen = frozen_cgroup_in("0::/pods/app\n", mount.path()).unwrap();
        assert_eq!(
            frozen,
            FrozenCgroup::V2 {
                dir: mount.path().join("pods")
            }
        );
        assert!(frozen.thaw_command().ends_with("pods/cgroup.freeze"));

        let v1 = mount.path().join("freezer/job");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("freezer.state"), "THAWED\n").unwrap();
        assert_eq!(frozen_cgroup_in("7:freezer:/job\n", mount.path()), None);
        std::fs::write(v1.join("freezer.state"), "FROZEN\n").unwrap();
        let frozen = frozen_cgroup_in("3:cpu,cpuacct:/x\n7:freezer:/job\n", mount.path()).unwrap();
        assert_eq!(frozen, FrozenCgroup::V1 { dir: v1.clone() });
        assert_eq!(
            frozen.thaw_command(),
            format!("echo THAWED > {}", v1.join("freezer.state").display())
        );
    }
}
