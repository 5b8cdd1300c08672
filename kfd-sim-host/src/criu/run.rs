//! CRIU runs on a served machine: the plugin directory (this project's
//! plugin and the connection plugin), the `dump` and `restore` command
//! lines, and what their logs say.
//!
//! Both run with the interposer preloaded, as clients of the machine (the
//! plugin's ioctls on CRIU's copies of the process's device files reach
//! the process's simulated files). A dump runs in the dumped process's
//! mount namespace, so the namespace is CRIU's own and is not dumped; a
//! restore runs in a new [`DeviceNamespace`], where the restored processes
//! then live.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::devns::{enter_mount_namespace_of, start_clean, DeviceNamespace};
use crate::{Criu, Endpoint, HostError, Interposer};

/// CRIU's log of a dump, in the images directory.
pub const DUMP_LOG: &str = "dump.log";
/// CRIU's log of a restore, in the images directory.
pub const RESTORE_LOG: &str = "restore.log";

/// A plugin directory (`criu -L`) holding this project's plugin and the
/// connection plugin, removed when dropped.
#[derive(Debug)]
pub struct PluginDir {
    path: PathBuf,
}

impl PluginDir {
    /// Makes `at` (which must not exist) a plugin directory with links to
    /// `amdgpu_plugin` (as `amdgpu_plugin.so`) and `remote_plugin` (as
    /// `kfd_sim_remote.so`).
    pub fn assemble(
        at: &Path,
        amdgpu_plugin: &Path,
        remote_plugin: &Path,
    ) -> Result<PluginDir, HostError> {
        std::fs::create_dir(at).map_err(|e| HostError::io("cannot create", at, e))?;
        let dir = PluginDir {
            path: at.to_path_buf(),
        };
        for (target, name) in [
            (amdgpu_plugin, "amdgpu_plugin.so"),
            (remote_plugin, "kfd_sim_remote.so"),
        ] {
            let target = std::path::absolute(target)
                .map_err(|e| HostError::io("cannot resolve", target, e))?;
            let link = at.join(name);
            std::os::unix::fs::symlink(&target, &link)
                .map_err(|e| HostError::io("cannot create", &link, e))?;
        }
        Ok(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PluginDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// What a dump is asked for.
#[derive(Debug, Clone)]
pub struct DumpRequest {
    /// The root of the tree to dump.
    pub pid: u32,
    /// The images directory (absolute; it must exist).
    pub images: PathBuf,
    /// Whether the tree runs on after the dump (else CRIU ends it).
    pub leave_running: bool,
}

/// What a restore is asked for.
#[derive(Debug, Clone)]
pub struct RestoreRequest {
    /// The images directory (absolute).
    pub images: PathBuf,
    /// Where CRIU writes the restored root's pid.
    pub pidfile: PathBuf,
    /// Checkpointed GPUs pinned to local ones (`KFD_DEVICE_MAP`, as the
    /// plugin reads it).
    pub device_map: Option<String>,
}

/// `criu dump` of `request.pid` on `machine` with the plugins of
/// `plugins`, in the tree's mount namespace; its log is
/// [`DUMP_LOG`] in the images directory. More CRIU options
/// (`--prev-images-dir`, `--external`, ...) can be appended to it.
pub fn dump_command(
    criu: &Criu,
    plugins: &Path,
    interposer: &Interposer,
    machine: &Endpoint,
    request: &DumpRequest,
) -> Result<Command, HostError> {
    let mut command = Command::new(&criu.path);
    command
        .arg("dump")
        .arg("-t")
        .arg(request.pid.to_string())
        .arg("-D")
        .arg(&request.images)
        .args(["-v4", "-o", DUMP_LOG, "-L"])
        .arg(plugins)
        // The thunk's semaphore is an unlinked file in /dev/shm.
        .arg("--link-remap");
    if request.leave_running {
        command.arg("--leave-running");
    }
    command.stdin(Stdio::null());
    interposer.configure(&mut command, machine);
    enter_mount_namespace_of(&mut command, request.pid, &request.images)?;
    start_clean(&mut command);
    Ok(command)
}

/// `criu restore -d` on `machine` with the plugins of `plugins`, in a new
/// namespace of `namespace`; its log is [`RESTORE_LOG`] in the images
/// directory. The restored processes become children of the nearest
/// subreaper once CRIU exits. More CRIU options (`--inherit-fd`, ...) can
/// be appended to it.
pub fn restore_command(
    criu: &Criu,
    plugins: &Path,
    interposer: &Interposer,
    machine: &Endpoint,
    namespace: &DeviceNamespace,
    request: &RestoreRequest,
) -> Command {
    let mut command = Command::new(&criu.path);
    command
        .args(["restore", "-d", "-D"])
        .arg(&request.images)
        .args(["-v4", "-o", RESTORE_LOG, "-L"])
        .arg(plugins)
        .arg("--pidfile")
        .arg(&request.pidfile)
        .stdin(Stdio::null());
    interposer.configure(&mut command, machine);
    match &request.device_map {
        Some(map) => command.env("KFD_DEVICE_MAP", map),
        None => command.env_remove("KFD_DEVICE_MAP"),
    };
    namespace.configure(&mut command);
    start_clean(&mut command);
    command
}

/// A log line without CRIU's `(seconds.micros) ` prefix.
fn bare(line: &str) -> &str {
    let line = line.trim_start();
    match line.strip_prefix('(').and_then(|l| l.split_once(") ")) {
        Some((stamp, rest)) if stamp.chars().all(|c| c.is_ascii_digit() || c == '.') => rest,
        _ => line,
    }
}

/// The error lines (`pr_err`: `Error (file:line): ...`) of a CRIU log,
/// this project's plugin's first, without timestamps.
pub fn log_errors(log: &str) -> Vec<String> {
    let errors = log.lines().map(bare).filter(|l| l.contains("Error ("));
    let (mut plugin, criu): (Vec<&str>, Vec<&str>) =
        errors.partition(|l| l.contains("amdgpu_plugin: "));
    plugin.extend(criu);
    plugin.into_iter().map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_come_plugin_first_without_timestamps() {
        let log = "(00.001000) Warn  (criu/x.c:1): w\n\
                   (00.002000) Error (criu/files.c:10): Can't restore files\n\
                   (00.001500) amdgpu_plugin: Error (restore.rs:1): no local GPU for gpu 0x1234\n\
                   plain\n";
        assert_eq!(
            log_errors(log),
            [
                "amdgpu_plugin: Error (restore.rs:1): no local GPU for gpu 0x1234",
                "Error (criu/files.c:10): Can't restore files",
            ]
        );
    }
}
