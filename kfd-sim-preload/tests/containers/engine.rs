//! A container engine (Podman, or Docker's dockerd with its containerd) on
//! this host without changing it: a private mount namespace (held by a
//! sleeping process, entered with `nsenter` for each command) with
//! overlays on `/etc` and `/var` and a tmpfs on `/run`, so the engine's
//! configuration, its storage and runtime state, runc's and crun's state and
//! CRIU's configuration files (`/etc/criu/runc.conf`, `default.conf`) exist
//! only there and vanish with it. The engine's storage is in the scratch
//! directory; dockerd runs there with its own data root, exec root and
//! socket, no iptables and no bridge (the containers have no network), and
//! is stopped with the namespace.
//!
//! The namespace has a `/dev` of its own (`real_criu_restore`'s): the
//! stand-in `/dev/kfd` and render nodes (the interposer in CRIU takes the
//! stand-ins' numbers from them), a `/dev/fuse` for `--device` to copy (a
//! render node of the name the container gives it), the render nodes of
//! each served machine's host (`/dev/kfd-sim-hosts/LABEL`, one bound at
//! [`HOST_DRI`] for containers that bind-mount the host's `/dev/dri`), and
//! a `/dev/shm` of its own (Podman's locks). `criu` on the engine's
//! `PATH` is a wrapper that runs a vendored CRIU under the interposer
//! (`LD_PRELOAD`, `KFD_SIM_MACHINE`, `KFD_SIM_REMOTE` of the machine the
//! shared directory's `machine` link names, and what `criu-env` there
//! adds), whose sysfs trees go to the shared directory
//! (`KFD_SIM_RUN_BASE`), mounted at the same path in every container: the
//! restored task, in the container's mount namespace by the time CRIU's
//! plugin runs in it, reads the trees CRIU's copy of the interposer wrote
//! (the container's `/dev/shm`, restored from the checkpoint, is where the
//! thunk's shared memory and CRIU's link-remap files travel). runc runs
//! `criu swrk` from `PATH`; crun built with libcriu does the same through
//! libcriu.
//!
//! The image is an import of a tar of the application, the interposer and
//! the libraries they link (no registry).

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
/// Debian's Docker client (`docker.io`), the one that speaks the daemon's
/// API version (another `docker` may come first on `PATH`).
pub const DOCKER: &str = "/usr/bin/docker";
/// The host's `/dev/dri` as a container bind-mounts it: the render nodes
/// of the machine the test serves now, bound there
/// ([`Engine::point_host_dri`]).
pub const HOST_DRI: &str = "/dev/kfd-sim-dri";

/// Which engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Podman with conmon and runc (or another runtime per container).
    Podman,
    /// dockerd with its own containerd and runc.
    Docker,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Podman => "podman",
            Kind::Docker => "docker",
        }
    }
}

/// Whether `program` is on `PATH` (not run: crun makes its state
/// directory in `/run` even for `--version`).
pub fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))))
}

fn executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why `kind` cannot run here, if it cannot.
pub fn missing(kind: Kind) -> Option<String> {
    let needs: &[(&str, &str)] = match kind {
        Kind::Podman => &[("podman", "podman"), ("runc", "runc"), ("conmon", "conmon")],
        Kind::Docker => &[
            ("dockerd", "docker.io"),
            ("containerd", "containerd"),
            ("containerd-shim-runc-v2", "containerd"),
            ("runc", "runc"),
        ],
    };
    for (program, package) in needs
        .iter()
        .chain(&[("nsenter", "util-linux"), ("tar", "tar")])
    {
        if !installed(program) {
            return Some(format!(
                "{program} is not installed (Debian package {package})"
            ));
        }
    }
    if kind == Kind::Docker && !executable(Path::new(DOCKER)) {
        return Some(format!(
            "{DOCKER} is not installed (Debian package docker.io)"
        ));
    }
    None
}

const SETUP: &str = concat!(
    r#"
set -eu
s=$1 plugins=$2 nofile=$3 nproc=$4 major=$5 minor=$6 renders=$7 runc_log=$8
scratch=$s step=engine
"#,
    real_criu_harness::fake_dev!(),
    r#"mount -t tmpfs -o mode=1777 engine-shm /dev/shm
mknod -m 666 /dev/fuse c "$major" "$minor"
"#,
    real_criu_harness::stand_in_nodes!(),
    r#"mkdir -p "$s/ov/etc.up" "$s/ov/etc.work" "$s/ov/var.up" "$s/ov/var.work" "$s/storage"
mount -t overlay engine-etc -o "lowerdir=/etc,upperdir=$s/ov/etc.up,workdir=$s/ov/etc.work" /etc
mount -t overlay engine-var -o "lowerdir=/var,upperdir=$s/ov/var.up,workdir=$s/ov/var.work" /var
mount -t tmpfs engine-run /run
# crun refuses cgroup v1 beside a cgroup v2 hierarchy with controllers
# (this machine's hybrid layout): here, v1 alone.
if grep -q ' /sys/fs/cgroup/unified ' /proc/self/mountinfo; then umount /sys/fs/cgroup/unified; fi
mkdir -p /etc/criu /etc/containers /etc/docker
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
# dockerd reads no other configuration than its command line's.
echo '{}' > /etc/docker/daemon.json
# What runc hands CRIU (and CRIU reads for any caller, libcriu's included):
# the plugin directory and the options the application needs (its
# semaphore is an unlinked file in /dev/shm).
printf 'libdir %s\nlink-remap\n' "$plugins" > /etc/criu/runc.conf
cp /etc/criu/runc.conf /etc/criu/default.conf
# containerd removes CRIU's work directory, its logs with it, once a
# checkpoint or restore succeeds: for Docker runc's CRIU logs to a file of
# the test's instead (the latest run's log).
if [ -n "$runc_log" ]; then echo "log-file $runc_log" >> /etc/criu/runc.conf; fi
echo ready > "$s/holder.ready"
exec sleep 3600
"#
);

const WRAPPER: &str = r#"#!/bin/sh
# criu for runc and libcriu: a vendored CRIU under the interposer (see
# containers/engine.rs).
share=@SHARE@
echo "$$ $*" >> "$share/criu-calls"
exec 2>>"$share/criu-stderr"
exec env LD_PRELOAD=@PRELOAD@ KFD_SIM_MACHINE="$share/topology" \
    KFD_SIM_REMOTE="$share/machine" KFD_SIM_RUN_BASE="$share/run" $(cat "$share/criu-env") @CRIU@ "$@"
"#;

/// An engine in its namespace, with the shared directory.
pub struct Engine {
    pub kind: Kind,
    pub scratch: tempfile::TempDir,
    holder: Child,
    /// dockerd (Docker only), a child of this process.
    daemon: Option<Child>,
    /// Mounted at the same path in every container.
    pub share: PathBuf,
    bin: PathBuf,
}

impl Engine {
    /// Sets up the namespace, the CRIU wrapper for `criu` (plugins from
    /// `plugins`), the engine (dockerd started for Docker) and the image
    /// of `app` and `preload`.
    pub fn new(
        kind: Kind,
        criu: &Path,
        plugins: &Path,
        app: &Path,
        preload: &Path,
        renders: &str,
    ) -> Result<Engine, String> {
        let scratch = tempfile::Builder::new()
            .prefix(&format!("{}-gpu", kind.name()))
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
                .replace("@PRELOAD@", preload.to_str().unwrap())
                .replace("@CRIU@", criu.to_str().unwrap())
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
                "engine-ns",
            ])
            .arg(scratch.path())
            .arg(plugins)
            .arg(nofile.to_string())
            .arg(nproc.to_string())
            .arg(major.to_string())
            .arg(minor.to_string())
            .arg(renders)
            .arg(match kind {
                Kind::Podman => String::new(),
                Kind::Docker => share.join("criu.log").to_str().unwrap().to_owned(),
            })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(scratch.path().join("holder.err")).unwrap())
            .spawn()
            .map_err(|e| format!("unshare: {e}"))?;
        let mut engine = Engine {
            kind,
            scratch,
            holder,
            daemon: None,
            share,
            bin,
        };
        let ready = super::driver::wait_for(Duration::from_secs(20), || {
            engine.scratch.path().join("holder.ready").exists()
                || engine.holder.try_wait().ok().flatten().is_some()
        });
        if !ready || !engine.scratch.path().join("holder.ready").exists() {
            return Err(format!(
                "the engine's namespace did not come up: {}",
                fs::read_to_string(engine.scratch.path().join("holder.err")).unwrap_or_default()
            ));
        }
        if kind == Kind::Docker {
            engine.start_dockerd()?;
        }
        engine.import(app, preload)?;
        Ok(engine)
    }

    /// The engine's `PATH`: the CRIU wrapper first.
    fn path(&self) -> String {
        format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    fn socket(&self) -> PathBuf {
        self.scratch.path().join("docker.sock")
    }

    /// dockerd in the namespace, experimental (for `docker checkpoint`),
    /// with its own data root, exec root (its containerd's too) and
    /// socket; ready once `docker info` answers.
    fn start_dockerd(&mut self) -> Result<(), String> {
        let s = self.scratch.path().to_path_buf();
        let log = fs::File::create(s.join("dockerd.log")).map_err(|e| e.to_string())?;
        let tmp = s.join("tmp");
        fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
        let daemon = Command::new("nsenter")
            .arg(format!("--mount=/proc/{}/ns/mnt", self.holder.id()))
            .arg("--")
            .arg("dockerd")
            .arg("--experimental")
            .arg("--config-file=/etc/docker/daemon.json")
            .arg(format!("--data-root={}", s.join("docker").display()))
            .arg(format!("--exec-root={}", s.join("exec").display()))
            .arg(format!("--pidfile={}", s.join("dockerd.pid").display()))
            .arg(format!("--host=unix://{}", self.socket().display()))
            // No network for the containers: no iptables rules, no bridge.
            .args([
                "--storage-driver=overlay2",
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
                "--bridge=none",
            ])
            .env("PATH", self.path())
            // containerd's temporary files (a checkpoint's work, its stack
            // dumps) stay in the scratch directory.
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("nsenter dockerd: {e}"))?;
        self.daemon = Some(daemon);
        let mut answered = false;
        let up = super::driver::wait_for(Duration::from_secs(60), || {
            if self
                .daemon
                .as_mut()
                .is_some_and(|d| d.try_wait().ok().flatten().is_some())
            {
                return true;
            }
            answered = self
                .cli(&["info", "--format", "{{.ServerVersion}}"])
                .status
                .success();
            answered
        });
        if !up || !answered {
            return Err(format!(
                "dockerd did not come up:\n{}",
                tail(
                    &fs::read_to_string(s.join("dockerd.log")).unwrap_or_default(),
                    30
                )
            ));
        }
        Ok(())
    }

    /// The engine's command line (`podman ARGS`, `docker ARGS` on the
    /// engine's socket) in the namespace.
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--mount=/proc/{}/ns/mnt", self.holder.id()))
            .arg("--");
        match self.kind {
            Kind::Podman => command.arg("podman"),
            Kind::Docker => command
                .arg(DOCKER)
                .arg(format!("--host=unix://{}", self.socket().display())),
        };
        command
            .args(args)
            .env("PATH", self.path())
            .stdin(Stdio::null())
            .output()
            .expect("run nsenter")
    }

    /// The engine's command line, which must succeed; its standard output.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let logs: Vec<String> = self
                .cli(&["ps", "--all", "--format", "{{.Names}}"])
                .stdout
                .split(|&b| b == b'\n')
                .filter(|n| !n.is_empty())
                .map(|n| {
                    let n = String::from_utf8_lossy(n).into_owned();
                    let out = self.cli(&["logs", "--tail", "20", &n]);
                    format!(
                        "{n}: {}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    )
                })
                .collect();
            panic!(
                "{} {}: {}\n{err}\n{}\ncontainer logs:\n{}{}",
                self.kind.name(),
                args.join(" "),
                out.status,
                self.criu_log_of(&err),
                logs.join("\n"),
                self.daemon_log()
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// dockerd's last lines, for failures.
    pub fn daemon_log(&self) -> String {
        if self.kind != Kind::Docker {
            return String::new();
        }
        let log = fs::read_to_string(self.scratch.path().join("dockerd.log")).unwrap_or_default();
        format!("\ndockerd:\n{}", tail(&log, 30))
    }

    /// The last lines of the CRIU log an error of the engine's names
    /// (`log file: PATH`), or of the latest one of runc for Docker.
    pub fn criu_log_of(&self, err: &str) -> String {
        let named = err
            .split("log file: ")
            .nth(1)
            .and_then(|rest| rest.split(['"', '\\', '\n']).next())
            .map(str::to_owned);
        // For Docker runc's CRIU logs to the test's file (see `SETUP`),
        // whatever path the error names.
        let log = match (self.newest_criu_log(), named) {
            (Some(path), _) => fs::read_to_string(path).unwrap_or_default(),
            (None, Some(path)) => self.read_in_namespace(&path).unwrap_or_default(),
            (None, None) => return String::new(),
        };
        let run: Vec<String> = fs::read_dir(self.share.join("run"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        format!(
            "{}\n(run directories: {run:?})\nCRIU's standard error:\n{}",
            tail(&log, 60),
            fs::read_to_string(self.share.join("criu-stderr")).unwrap_or_default()
        )
    }

    /// The log of the latest CRIU run runc made for Docker (see `SETUP`).
    pub fn newest_criu_log(&self) -> Option<PathBuf> {
        let log = self.share.join("criu.log");
        (self.kind == Kind::Docker && log.is_file()).then_some(log)
    }

    /// `inspect -f FORMAT NAME`.
    pub fn inspect(&self, name: &str, format: &str) -> String {
        self.cli_ok(&["inspect", "-f", format, name])
            .trim()
            .to_owned()
    }

    /// Whether container `name` runs.
    pub fn running(&self, name: &str) -> bool {
        let out = self.cli(&["inspect", "-f", "{{.State.Running}}", name]);
        String::from_utf8_lossy(&out.stdout).trim() == "true"
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

    /// The render nodes of machine `label`, as its host's `/dev/dri` holds
    /// them (`renderD<minor>` stand-ins): made once, in the namespace.
    pub fn add_host_dri(&self, label: &str, minors: &[u32]) {
        let (major, minor) = super::driver::stand_in_numbers().expect("the stand-in numbers");
        let dir = format!("/dev/kfd-sim-hosts/{label}");
        let mut script = format!("mkdir -p {dir}");
        for m in minors {
            script.push_str(&format!(
                " && mknod -m 666 {dir}/renderD{m} c {major} {minor}"
            ));
        }
        self.run_in_namespace(&["sh", "-c", &script])
            .unwrap_or_else(|| panic!("cannot make {dir}"));
    }

    /// Makes [`HOST_DRI`] the render nodes of machine `label`
    /// ([`Engine::add_host_dri`]).
    pub fn point_host_dri(&self, label: &str) {
        // A bind mount, not a link: CRIU binds the path a container's
        // mount came from, which must be a directory.
        let dir = format!("/dev/kfd-sim-hosts/{label}");
        let script = format!(
            "test -d {dir} || exit 0; mkdir -p {HOST_DRI}; \
             while mountpoint -q {HOST_DRI}; do umount -l {HOST_DRI}; done; \
             mount --bind {dir} {HOST_DRI}"
        );
        self.run_in_namespace(&["sh", "-c", &script])
            .unwrap_or_else(|| panic!("cannot bind {dir} at {HOST_DRI}"));
    }

    /// Points `link` in the shared directory at `target` (relative).
    pub fn point(&self, link: &str, target: &str) {
        let at = self.share.join(link);
        let _ = fs::remove_file(&at);
        std::os::unix::fs::symlink(target, &at).unwrap();
    }

    /// A file inside the namespace (the engine's storage and state).
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
            .env("PATH", self.path())
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
        let tar = tar.to_str().unwrap();
        let args: &[&str] = match self.kind {
            Kind::Podman => &["import", "--quiet", tar, IMAGE],
            Kind::Docker => &["import", tar, IMAGE],
        };
        let out = self.cli(args);
        if !out.status.success() {
            return Err(format!(
                "{} import: {}",
                self.kind.name(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        fs::remove_file(tar).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The arguments of `run`/`create` for the application in container
    /// `name` on the first `gpus` GPUs with `mib` MiB VRAM BOs, with
    /// `/dev/kfd` as a stand-in node, `devices` (`--device` values, see
    /// [`render_device`]) and `options` for the engine (`--network none`
    /// unless they name a network); its records in `share/rec-NAME`.
    pub fn app_args(
        &self,
        name: &str,
        gpus: u32,
        mib: u64,
        devices: &[String],
        options: &[&str],
    ) -> (Vec<String>, PathBuf) {
        let records = self.share.join(format!("rec-{name}"));
        fs::create_dir_all(records.join("child")).unwrap();
        let share = self.share.to_str().unwrap();
        let mut args: Vec<String> = vec!["--name".into(), name.into()];
        if !options.contains(&"--network") {
            // No network unless `options` say otherwise.
            args.extend(["--network".into(), "none".into()]);
        }
        args.extend([
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
        ]);
        for d in devices {
            args.push("--device".into());
            args.push(d.clone());
        }
        args.extend(options.iter().map(|o| o.to_string()));
        args.push(IMAGE.into());
        args.push(format!("{IN_IMAGE}/app"));
        args.push(records.to_str().unwrap().into());
        args.push(gpus.to_string());
        args.push(mib.to_string());
        (args, records)
    }

    /// Runs the application in container `name` (see [`Engine::app_args`]).
    pub fn run_app(&self, name: &str, gpus: u32, mib: u64, devices: &[String]) -> PathBuf {
        self.run_app_with(name, gpus, mib, devices, &[])
    }

    /// [`Engine::run_app`] with more options for `run`.
    pub fn run_app_with(
        &self,
        name: &str,
        gpus: u32,
        mib: u64,
        devices: &[String],
        options: &[&str],
    ) -> PathBuf {
        let (args, records) = self.app_args(name, gpus, mib, devices, options);
        let mut run = vec!["run", "-d"];
        run.extend(args.iter().map(String::as_str));
        self.cli_ok(&run);
        self.wait_ready(name, &records);
        records
    }

    /// Waits until the application of container `name` wrote its state to
    /// `records` (and failed nothing).
    pub fn wait_ready(&self, name: &str, records: &Path) {
        let ready = super::driver::wait_for(Duration::from_secs(60), || {
            fs::read_to_string(records.join("ready")).is_ok_and(|r| r.contains("mailbox "))
                || fs::read_to_string(records.join("ready")).is_ok_and(|r| r.contains("fail"))
        });
        let logs = self.cli(&["logs", name]);
        assert!(
            ready,
            "the containerised application never got ready:\n{}{}",
            String::from_utf8_lossy(&logs.stdout),
            String::from_utf8_lossy(&logs.stderr)
        );
        let text = fs::read_to_string(records.join("ready")).unwrap();
        assert!(!text.contains("fail"), "the application failed: {text}");
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Containers first (their conmon or shim and processes hold the
        // namespace's mounts), then dockerd (which stops its containerd),
        // then the namespace itself.
        match self.kind {
            Kind::Podman => {
                let _ = self.cli(&["rm", "--all", "--force", "--time", "0"]);
            }
            Kind::Docker => {
                let ids = self.cli(&["ps", "--all", "--quiet"]);
                for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
                    let _ = self.cli(&["rm", "--force", id]);
                }
            }
        }
        if let Some(mut daemon) = self.daemon.take() {
            if let Ok(pid) = libc::pid_t::try_from(daemon.id()) {
                // SAFETY: kill(2) sends a signal to dockerd, this process's
                // child (not yet reaped, so the pid is still its).
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let stopped = super::driver::wait_for(Duration::from_secs(30), || {
                daemon.try_wait().ok().flatten().is_some()
            });
            if !stopped {
                let _ = daemon.kill();
                let _ = daemon.wait();
            }
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The `-v` value that gives a container the host's `/dev/dri`
/// ([`HOST_DRI`]) instead of device nodes of its own: a restore then finds
/// the restoring host's render nodes there, not the checkpoint's.
pub fn host_dri_volume() -> String {
    format!("{HOST_DRI}:/dev/dri")
}

/// The `--device` value of render node `/dev/dri/renderD<minor>` in the
/// container, standing for render minor `minor`.
pub fn render_device(minor: u32) -> String {
    format!("/dev/fuse:/dev/dri/renderD{minor}")
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
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
