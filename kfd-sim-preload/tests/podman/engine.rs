//! Podman on this host without changing it: a private mount namespace
//! (held by a sleeping process, entered with `nsenter` for each command)
//! with overlays on `/etc` and `/var` and a tmpfs on `/run`, so Podman's
//! configuration, its storage and runtime state, runc's state and CRIU's
//! configuration files (`/etc/criu/runc.conf`, `default.conf`) exist only
//! there and vanish with it. Podman's storage is in the scratch directory.
//!
//! The namespace has a `/dev` of its own (`real_criu_restore`'s): the
//! stand-in `/dev/kfd` and render nodes (the interposer in CRIU takes the
//! stand-ins' numbers from them), a `/dev/fuse` for `--device` to copy,
//! and a `/dev/shm` of its own (Podman's locks). `criu` on Podman's `PATH`
//! is a wrapper that runs a vendored CRIU under the interposer
//! (`LD_PRELOAD`, `KFD_SIM_MACHINE`, `KFD_SIM_REMOTE` of the machine the
//! shared directory's `machine` link names), whose sysfs trees go to the
//! shared directory (`KFD_SIM_RUN_BASE`), mounted at the same path in
//! every container: the restored task, in the container's mount namespace
//! by the time CRIU's plugin runs in it, reads the trees CRIU's copy of
//! the interposer wrote (the container's `/dev/shm` is Podman's, restored
//! from the archive, where the thunk's shared memory and CRIU's link-remap
//! files travel).
//!
//! The image is a `podman import` of a tar of the application, the
//! interposer and the libraries they link (no registry).

#![allow(dead_code)] // each includer uses a different subset

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The image every container runs.
pub const IMAGE: &str = "localhost/kfd-sim-gpu-app:test";
/// Where the image holds the application and the interposer.
pub const IN_IMAGE: &str = "/opt/kfd-sim";

/// Whether `program` is on `PATH` (not run: crun makes its state
/// directory in `/run` even for `--version`).
pub fn installed(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Why Podman cannot run here, if it cannot.
pub fn missing() -> Option<String> {
    for (program, package) in [
        ("podman", "podman"),
        ("runc", "runc"),
        ("conmon", "conmon"),
        ("nsenter", "util-linux"),
        ("tar", "tar"),
    ] {
        if !installed(program) {
            return Some(format!(
                "{program} is not installed (Debian package {package})"
            ));
        }
    }
    None
}

const SETUP: &str = concat!(
    r#"
set -eu
s=$1 plugins=$2 nofile=$3 nproc=$4 major=$5 minor=$6 renders=$7
scratch=$s step=podman
"#,
    crate::fake_dev!(),
    r#"mount -t tmpfs -o mode=1777 podman-shm /dev/shm
mknod -m 666 /dev/fuse c "$major" "$minor"
"#,
    crate::stand_in_nodes!(),
    r#"mkdir -p "$s/ov/etc.up" "$s/ov/etc.work" "$s/ov/var.up" "$s/ov/var.work" "$s/storage"
mount -t overlay podman-etc -o "lowerdir=/etc,upperdir=$s/ov/etc.up,workdir=$s/ov/etc.work" /etc
mount -t overlay podman-var -o "lowerdir=/var,upperdir=$s/ov/var.up,workdir=$s/ov/var.work" /var
mount -t tmpfs podman-run /run
# crun refuses cgroup v1 beside a cgroup v2 hierarchy with controllers
# (this machine's hybrid layout): here, v1 alone.
if grep -q ' /sys/fs/cgroup/unified ' /proc/self/mountinfo; then umount /sys/fs/cgroup/unified; fi
mkdir -p /etc/criu /etc/containers
cat > /etc/containers/storage.conf <<EOF
[storage]
driver = "overlay"
graphroot = "$s/storage"
runroot = "/run/containers/storage"
EOF
# This machine's hard limits are below Podman's defaults (1048576 files);
# cgroup v1 without systemd.
cat > /etc/containers/containers.conf <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
EOF
# What runc hands CRIU (and CRIU reads for any caller): the plugin
# directory and the options the application needs (its semaphore is an
# unlinked file in /dev/shm).
printf 'libdir %s\nlink-remap\n' "$plugins" > /etc/criu/runc.conf
cp /etc/criu/runc.conf /etc/criu/default.conf
echo ready > "$s/holder.ready"
exec sleep 3600
"#
);

const WRAPPER: &str = r#"#!/bin/sh
# criu for runc: a vendored CRIU under the interposer (see engine.rs).
share=@SHARE@
echo "$$ $*" >> "$share/criu-calls"
exec 2>>"$share/criu-stderr"
exec env LD_PRELOAD=@PRELOAD@ KFD_SIM_MACHINE="$share/topology" \
    KFD_SIM_REMOTE="$share/machine" KFD_SIM_RUN_BASE="$share/run" $(cat "$share/criu-env") @CRIU@ "$@"
"#;

/// Podman in its namespace, with the shared directory.
pub struct Engine {
    pub scratch: tempfile::TempDir,
    holder: Child,
    /// Mounted at the same path in every container.
    pub share: PathBuf,
    bin: PathBuf,
}

impl Engine {
    /// Sets up the namespace, the CRIU wrapper for `criu` (plugins from
    /// `plugins`), and the image of `app` and `preload`.
    pub fn new(
        criu: &Path,
        plugins: &Path,
        app: &Path,
        preload: &Path,
        renders: &str,
    ) -> Result<Engine, String> {
        let scratch = tempfile::Builder::new()
            .prefix("podman-gpu")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let share = scratch.path().join("share");
        let bin = scratch.path().join("bin");
        for dir in [&share, &bin, &share.join("run")] {
            fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        fs::write(share.join("criu-env"), "").map_err(|e| e.to_string())?;
        let (major, minor) = super::driver::stand_in_numbers()?;
        let fill = |text: &str| {
            text.replace("@SHARE@", share.to_str().unwrap())
                .replace("@BIN@", bin.to_str().unwrap())
                .replace("@PRELOAD@", preload.to_str().unwrap())
                .replace("@CRIU@", criu.to_str().unwrap())
                .replace("@MAJOR@", &major.to_string())
                .replace("@MINOR@", &minor.to_string())
        };
        let criu_path = bin.join("criu");
        fs::write(&criu_path, fill(WRAPPER)).map_err(|e| e.to_string())?;
        fs::set_permissions(&criu_path, fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        let (nofile, nproc) = limits();
        let holder = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                SETUP,
                "podman-ns",
            ])
            .arg(scratch.path())
            .arg(plugins)
            .arg(nofile.to_string())
            .arg(nproc.to_string())
            .arg(major.to_string())
            .arg(minor.to_string())
            .arg(renders)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(scratch.path().join("holder.err")).unwrap())
            .spawn()
            .map_err(|e| format!("unshare: {e}"))?;
        let mut engine = Engine {
            scratch,
            holder,
            share,
            bin,
        };
        let ready = super::driver::wait_for(Duration::from_secs(20), || {
            engine.scratch.path().join("holder.ready").exists()
                || engine.holder.try_wait().ok().flatten().is_some()
        });
        if !ready || !engine.scratch.path().join("holder.ready").exists() {
            return Err(format!(
                "the Podman namespace did not come up: {}",
                fs::read_to_string(engine.scratch.path().join("holder.err")).unwrap_or_default()
            ));
        }
        engine.import(app, preload)?;
        Ok(engine)
    }

    /// `podman ARGS` in the namespace.
    pub fn podman(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--mount=/proc/{}/ns/mnt", self.holder.id()))
            .arg("--")
            .arg("podman")
            .args(args)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .stdin(Stdio::null())
            .output()
            .expect("run nsenter")
    }

    /// `podman ARGS`, which must succeed; its standard output.
    pub fn podman_ok(&self, args: &[&str]) -> String {
        let out = self.podman(args);
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let logs: Vec<String> = self
                .podman(&["ps", "--all", "--format", "{{.Names}}"])
                .stdout
                .split(|&b| b == b'\n')
                .filter(|n| !n.is_empty())
                .map(|n| {
                    let n = String::from_utf8_lossy(n).into_owned();
                    let out = self.podman(&["logs", "--tail", "20", &n]);
                    format!(
                        "{n}: {}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    )
                })
                .collect();
            panic!(
                "podman {}: {}\n{err}\n{}\ncontainer logs:\n{}",
                args.join(" "),
                out.status,
                self.criu_log_of(&err),
                logs.join("\n")
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The last lines of the CRIU log an error of Podman's names
    /// (`log file: PATH`).
    pub fn criu_log_of(&self, err: &str) -> String {
        let Some(path) = err
            .split("log file: ")
            .nth(1)
            .and_then(|rest| rest.split(['"', '\\', '\n']).next())
        else {
            return String::new();
        };
        let log = self.read_in_namespace(path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let shm: Vec<String> = fs::read_dir(self.share.join("run"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        format!(
            "{}\n(run directories: {shm:?})\nCRIU's standard error:\n{}",
            lines[lines.len().saturating_sub(60)..].join("\n"),
            fs::read_to_string(self.share.join("criu-stderr")).unwrap_or_default()
        )
    }

    /// `podman inspect -f FORMAT NAME`.
    pub fn inspect(&self, name: &str, format: &str) -> String {
        self.podman_ok(&["inspect", "-f", format, name])
            .trim()
            .to_owned()
    }

    /// The container's host pid, when it runs.
    pub fn host_pid(&self, name: &str) -> Option<u32> {
        self.inspect(name, "{{.State.Pid}}")
            .parse()
            .ok()
            .filter(|&p| p != 0)
    }

    /// Extra variables for the wrapped CRIU (`KEY=VALUE ...`).
    pub fn set_criu_env(&self, env: &str) {
        fs::write(self.share.join("criu-env"), env).unwrap();
    }

    /// Points `link` in the shared directory at `target` (relative).
    pub fn point(&self, link: &str, target: &str) {
        let at = self.share.join(link);
        let _ = fs::remove_file(&at);
        std::os::unix::fs::symlink(target, &at).unwrap();
    }

    /// A file inside the namespace (Podman's storage and state).
    pub fn read_in_namespace(&self, path: &str) -> Option<String> {
        self.run_in_namespace(&["cat", path])
    }

    /// The standard output of a command run in the namespace, when it
    /// succeeds.
    pub fn run_in_namespace(&self, command: &[&str]) -> Option<String> {
        let out = Command::new("nsenter")
            .arg(format!("--mount=/proc/{}/ns/mnt", self.holder.id()))
            .arg("--")
            .args(command)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The image: the application, the interposer and what they link.
    fn import(&self, app: &Path, preload: &Path) -> Result<(), String> {
        let root = self.scratch.path().join("rootfs");
        let opt = root.join(IN_IMAGE.trim_start_matches('/'));
        fs::create_dir_all(&opt).map_err(|e| e.to_string())?;
        for (file, name) in [(app, "app"), (preload, "libkfd_sim_preload.so")] {
            fs::copy(file, opt.join(name)).map_err(|e| e.to_string())?;
            for lib in linked(file)? {
                let to = root.join(lib.strip_prefix("/").unwrap());
                fs::create_dir_all(to.parent().unwrap()).map_err(|e| e.to_string())?;
                fs::copy(&lib, &to).map_err(|e| format!("{}: {e}", lib.display()))?;
            }
        }
        // The thunk's shared memory and the container's own files.
        for dir in ["dev/shm", "tmp", "proc", "sys"] {
            fs::create_dir_all(root.join(dir)).map_err(|e| e.to_string())?;
        }
        let tar = self.scratch.path().join("image.tar");
        let status = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err("tar of the image failed".into());
        }
        fs::remove_dir_all(&root).map_err(|e| e.to_string())?;
        let out = self.podman(&["import", "--quiet", tar.to_str().unwrap(), IMAGE]);
        if !out.status.success() {
            return Err(format!(
                "podman import: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// Runs the application in container `name` on the first `gpus` GPUs
    /// with `mib` MiB VRAM BOs, with `/dev/kfd` and `devices` (render
    /// node paths in the container) as stand-in nodes; its records in
    /// `share/rec-NAME`.
    pub fn run_app(&self, name: &str, gpus: u32, mib: u64, devices: &[String]) -> PathBuf {
        self.run_app_with(name, gpus, mib, devices, &[])
    }

    /// [`Engine::run_app`] with more options for `podman run`.
    pub fn run_app_with(
        &self,
        name: &str,
        gpus: u32,
        mib: u64,
        devices: &[String],
        options: &[&str],
    ) -> PathBuf {
        let records = self.share.join(format!("rec-{name}"));
        fs::create_dir_all(records.join("child")).unwrap();
        let share = self.share.to_str().unwrap();
        let mut args: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--name".into(),
            name.into(),
            "--network".into(),
            "none".into(),
            "--device".into(),
            "/dev/fuse:/dev/kfd".into(),
            "-v".into(),
            format!("{share}:{share}"),
            "-e".into(),
            format!("LD_PRELOAD={IN_IMAGE}/libkfd_sim_preload.so"),
            "-e".into(),
            format!("KFD_SIM_MACHINE={share}/topology"),
            "-e".into(),
            format!("KFD_SIM_REMOTE={share}/machine"),
        ];
        for d in devices {
            args.push("--device".into());
            args.push(format!("/dev/fuse:{d}"));
        }
        args.extend(options.iter().map(|o| o.to_string()));
        args.push(IMAGE.into());
        args.push(format!("{IN_IMAGE}/app"));
        args.push(records.to_str().unwrap().into());
        args.push(gpus.to_string());
        args.push(mib.to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.podman_ok(&args);
        let ready = super::driver::wait_for(Duration::from_secs(60), || {
            fs::read_to_string(records.join("ready")).is_ok_and(|r| r.contains("mailbox "))
                || fs::read_to_string(records.join("ready")).is_ok_and(|r| r.contains("fail"))
        });
        let logs = self.podman(&["logs", name]);
        assert!(
            ready,
            "the containerised application never got ready:\n{}{}",
            String::from_utf8_lossy(&logs.stdout),
            String::from_utf8_lossy(&logs.stderr)
        );
        let text = fs::read_to_string(records.join("ready")).unwrap();
        assert!(!text.contains("fail"), "the application failed: {text}");
        records
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Containers first (their conmon and processes hold the
        // namespace's mounts), then the namespace itself.
        let _ = self.podman(&["rm", "--all", "--force", "--time", "0"]);
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The hard limits the containers get (Podman's defaults are above
/// this machine's).
fn limits() -> (u64, u64) {
    let get = |resource| {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit(2) fills `r`, a valid rlimit struct.
        unsafe { libc::getrlimit(resource, &mut r) };
        r.rlim_max
    };
    (get(libc::RLIMIT_NOFILE), get(libc::RLIMIT_NPROC).min(32768))
}

/// The shared libraries `file` links (`ldd`), the dynamic loader included.
fn linked(file: &Path) -> Result<Vec<PathBuf>, String> {
    let out = Command::new("ldd")
        .arg(file)
        .output()
        .map_err(|e| format!("ldd: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in text.lines() {
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    if libs.is_empty() {
        return Err(format!("ldd {}: nothing linked?\n{text}", file.display()));
    }
    let _ = std::io::stdout().flush();
    Ok(libs)
}
