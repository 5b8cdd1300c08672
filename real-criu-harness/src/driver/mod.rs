//! Real CRIU on a served simulated machine: what `real_criu_restore.rs`
//! and the benches' side-by-side runs of the C plugin share. A machine
//! served to host processes ([`Served`]), the application of `app.c`
//! started, dumped and restored by real CRIU in private mount namespaces
//! with stand-in device nodes ([`dump`], [`restore`], the `SCRIPT`), and
//! the checks a restored application must pass ([`check_restored`]), its
//! queues' work in flight among them ([`check_queues`]). The C sources
//! are in the crate's `c/`.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kfd_sim::remote::{Server, Verdict};
use kfd_sim::workload::Workload;
use kfd_sim::{Pid, Sim, SimConfig};

use crate as harness;

mod bytes;
mod checks;
mod process;
mod served;
mod steps;

pub use bytes::*;
pub use checks::*;
pub use process::*;
pub use served::*;
pub use steps::*;

/// Everything a run needs.
pub struct Setup {
    /// The CRIU releases asked for, each with its `criu` binary.
    pub criu: Vec<(harness::Release, PathBuf)>,
    /// The plugin directory: the shipped plugin and the socket plugin.
    pub plugins: tempfile::TempDir,
    /// The same with upstream's C plugin in place of ours, when asked for.
    pub c_plugins: Option<tempfile::TempDir>,
    /// The application built from `c/app.c`.
    pub app: PathBuf,
    /// The interposer the application runs under (`libkfd_sim_preload.so`).
    pub preload: PathBuf,
    /// The major and minor of the stand-in device nodes.
    pub stand_in: (u32, u32),
    /// Where the application was built, removed with the setup.
    pub _build: tempfile::TempDir,
}

/// `/dev/fuse`'s (major, minor): the stand-in nodes' numbers.
pub fn stand_in_numbers() -> Result<(u32, u32), String> {
    let meta = fs::metadata("/dev/fuse").map_err(|e| format!("/dev/fuse: {e}"))?;
    if !meta.file_type().is_char_device() || fs::File::open("/dev/fuse").is_err() {
        return Err("/dev/fuse is not a character device that opens".into());
    }
    let rdev = meta.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
}

/// Builds the crate's C `source` (a path below the crate) into `out`
/// with `cc` and `args`; `Err` when there is no C compiler.
pub fn compile(source: &str, out: &Path, args: &[&str]) -> Result<(), String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
    let built = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(&source)
        .args(args)
        .output()
        .map_err(|e| format!("no C compiler (cc): {e}"))?;
    assert!(
        built.status.success(),
        "cc {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    Ok(())
}

/// What a run needs, or why it cannot run here (not root, no `unshare`,
/// no CRIU build, ...): the `releases`' CRIU, the plugin directories
/// (ours, and the C plugin's when `with_c_plugin`), the application and
/// the interposer `preload`.
pub fn setup(
    releases: &[harness::Release],
    with_c_plugin: bool,
    preload: PathBuf,
) -> Result<Setup, String> {
    let found = (|| {
        if !harness::is_root() {
            return Err("the test needs root (mount namespaces, ptrace, CRIU)".to_string());
        }
        if !harness::runs("unshare", "--version") {
            return Err("unshare (util-linux) is not installed".into());
        }
        if !Path::new("/usr/include/hsakmt.h").is_file() {
            return Err("libhsakmt-dev is not installed (/usr/include/hsakmt.h is missing)".into());
        }
        if !Path::new("/usr/include/libdrm/amdgpu.h").is_file() {
            return Err(
                "libdrm-dev is not installed (/usr/include/libdrm/amdgpu.h is missing)".into(),
            );
        }
        if let Err(e) = kfd_sim::remote::child_memory_reachable() {
            return Err(format!("the served machine cannot reach its clients: {e}"));
        }
        let stand_in = stand_in_numbers()?;
        let builds = harness::builds_dir();
        let criu = releases
            .iter()
            .map(|&release| Ok((release, harness::criu_build(&builds, release)?)))
            .collect::<Result<Vec<_>, String>>()?;
        let so = harness::plugin_build(
            &["release", "debug"],
            "build it again (`make` or `cargo build -p criu-plugin-amdgpu`)",
        )?;
        let plugins = tempfile::Builder::new()
            .prefix("real-criu-plugins")
            .tempdir()
            .map_err(|e| e.to_string())?;
        fs::copy(&so, plugins.path().join("amdgpu_plugin.so")).map_err(|e| e.to_string())?;
        compile(
            "c/remote_sk_plugin.c",
            &plugins.path().join("kfd_sim_remote.so"),
            &["-shared", "-fPIC", "-ldl"],
        )?;
        let c_plugins = if with_c_plugin {
            let so = builds.join("c-plugin/amdgpu_plugin.so");
            if !so.is_file() {
                return Err(format!(
                    "no C plugin at {} (build it with .ci/build-c-plugin.sh)",
                    so.display()
                ));
            }
            let dir = tempfile::Builder::new()
                .prefix("real-criu-c-plugins")
                .tempdir()
                .map_err(|e| e.to_string())?;
            fs::copy(&so, dir.path().join("amdgpu_plugin.so")).map_err(|e| e.to_string())?;
            fs::copy(
                plugins.path().join("kfd_sim_remote.so"),
                dir.path().join("kfd_sim_remote.so"),
            )
            .map_err(|e| e.to_string())?;
            Some(dir)
        } else {
            None
        };
        let build = tempfile::Builder::new()
            .prefix("real-criu-build")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let app = build.path().join("real_criu_gpu_app");
        compile(
            "c/app.c",
            &app,
            &["-I/usr/include/libdrm", "-lhsakmt", "-ldrm_amdgpu", "-ldrm"],
        )?;
        Ok(Setup {
            criu,
            plugins,
            c_plugins,
            app,
            preload,
            stand_in,
            _build: build,
        })
    })();
    let setup = found?;
    adopt_orphans();
    Ok(setup)
}

/// The start of a private `/dev`, for a shell in a mount namespace of its
/// own with `$scratch` and `$step` set: a tmpfs with the host's
/// `/dev/pts` (and `/dev/net/tun`), the usual character devices, and empty
/// `/dev/shm` and `/dev/dri` (a mount or the stand-in nodes go there).
#[macro_export]
macro_rules! fake_dev {
    () => {
        r#"
# Device nodes made in the tmpfs, not bind mounts of the host's: CRIU
# finds no mount of its own for a file bind-mounted into a namespace.
mkdir "$scratch/hostdev.$step"
mount --rbind /dev "$scratch/hostdev.$step"
mount -t tmpfs -o mode=755 fakedev /dev
mkdir /dev/pts /dev/net
mount --bind "$scratch/hostdev.$step/pts" /dev/pts
if [ -e "$scratch/hostdev.$step/net/tun" ]; then
    touch /dev/net/tun
    mount --bind "$scratch/hostdev.$step/net/tun" /dev/net/tun
fi
umount -l "$scratch/hostdev.$step"
rmdir "$scratch/hostdev.$step"
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/full c 1 7
mknod -m 666 /dev/random c 1 8
mknod -m 666 /dev/urandom c 1 9
mknod -m 666 /dev/tty c 5 0
mkdir /dev/shm /dev/dri
"#
    };
}

/// The stand-in nodes of a private `/dev` ([`fake_dev`]): `/dev/kfd` and
/// `/dev/dri/renderD<r>` for each minor in `$renders` (comma-separated),
/// with the numbers `$major`, `$minor`.
#[macro_export]
macro_rules! stand_in_nodes {
    () => {
        r#"
mknod -m 666 /dev/kfd c "$major" "$minor"
for r in $(echo "$renders" | tr , ' '); do
    mknod -m 666 "/dev/dri/renderD$r" c "$major" "$minor"
done
"#
    };
}

/// In a private mount namespace: a /dev of its own with the stand-in
/// nodes, then one step: `dump` (start the application, wait until it is
/// ready, dump it) or `restore`. CRIU's exit status goes to `STEP.status`,
/// its log to `STEP.log`.
pub const SCRIPT: &str = concat!(
    r#"
set -eu
scratch=$1 step=$2 major=$3 minor=$4 renders=$5 preload=$6 machine=$7 address=$8
criu=$9 plugins=${10} app=${11} gpus=${12} mib=${13} env_extra=${14} parent=${15}
netns=${16} share=${17}  # the application's mode argument
shift 17
"#,
    fake_dev!(),
    r#"
# One /dev/shm for every step, as on a host: hsakmt's shared memory and
# CRIU's link-remap files outlive the dump's namespace.
mkdir -p "$scratch/shm"
mount --bind "$scratch/shm" /dev/shm
"#,
    stand_in_nodes!(),
    r#"sim="LD_PRELOAD=$preload KFD_SIM_MACHINE=$machine KFD_SIM_REMOTE=$address"
# A CRIU that hangs is killed (exit status 137) rather than holding the
# test until CI's limit.
limit=120
status=0
# start DIR: the application, its records in DIR; its pid in $pid.
start() {
    mkdir -p "$1/child"
    # A session of its own (CRIU before 4.3 refuses to dump a root process
    # that leads none); setsid (not a group leader here, so it does not
    # fork) and env exec the program: $! is its pid.
    if [ "$netns" = yes ]; then
        # In a network namespace of its own, as in a container (unshare
        # execs the program there: $! is still its pid).
        setsid unshare --net env $sim "$app" "$1" "$gpus" "$mib" $share </dev/null >"$1/app.out" 2>&1 &
    else
        setsid env $sim "$app" "$1" "$gpus" "$mib" $share </dev/null >"$1/app.out" 2>&1 &
    fi
    pid=$!
    n=0
    until [ -s "$1/ready" ]; do
        n=$((n + 1))
        if [ "$n" -gt 3000 ]; then echo "the application never got ready" >&2; give_up; fi
        sleep 0.02
    done
    if grep -q fail "$1/ready"; then cat "$1/ready" >&2; give_up; fi
    if [ "$share" = share ]; then
        until [ -s "$1/child/ready" ]; do
            n=$((n + 1))
            if [ "$n" -gt 3000 ]; then echo "the child never got ready" >&2; give_up; fi
            sleep 0.02
        done
        if grep -q fail "$1/child/ready"; then cat "$1/child/ready" >&2; give_up; fi
    fi
}
# give_up: the application started last (its process group: setsid made it
# the leader of one, its child is in it) is killed, then the step fails.
give_up() {
    kill -KILL "-$pid" 2>/dev/null || true
    exit 3
}
if [ "$step" = dump ]; then
    if [ "$parent" = yes ]; then
        # An incremental dump on a parent. This kernel has no memory dirty
        # tracking, so CRIU refuses --track-mem and pre-dump, and a parent
        # holding the same tree (a full dump has no uptime to rule out pid
        # reuse): the parent is a dump of another run of the program, whose
        # BOs hold the same bytes (same seeds); the plugin finds its chunks
        # by digest, which needs no dirty tracking.
        mkdir "$scratch/parent" "$scratch/other"
        start "$scratch/other"
        env $sim $env_extra timeout -s KILL "$limit" "$criu" dump -t "$pid" -D "$scratch/parent" -v4 \
            -o "$scratch/parent.log" -L "$plugins" --link-remap \
            </dev/null >"$scratch/parent.out" 2>&1 || status=$?
        echo "$status" > "$scratch/parent.status"
        # The other run is none of the test's records: a failed dump that
        # left it running has it killed here.
        [ "$status" = 0 ] || { kill -KILL "-$pid" 2>/dev/null || true; echo "$status" > "$scratch/dump.status"; exit 0; }
        set -- --prev-images-dir ../parent "$@"
    fi
    start "$scratch"
    echo "$pid" > "$scratch/app.pid"
    if [ "$netns" = yes ]; then
        # The namespace is the container's business: named external, given
        # back at restore.
        # Nothing talks over it, and this machine has no iptables for
        # CRIU's network lock: skipped.
        set -- --external "net[$(stat -L -c %i /proc/$pid/ns/net)]:container-net" \
            --network-lock skip "$@"
    fi
    env $sim $env_extra timeout -s KILL "$limit" "$criu" dump -t "$pid" -D "$scratch/images" -v4 \
        -o "$scratch/dump.log" -L "$plugins" --link-remap "$@" </dev/null >"$scratch/dump.out" 2>&1 || status=$?
else
    if [ "$netns" = yes ]; then
        # A new network namespace for the restored task, held by a sleeper
        # until the task is in it, handed to CRIU as the external one.
        unshare --net sleep 600 </dev/null >/dev/null 2>&1 &
        holder=$!
        until [ "$(stat -L -c %i /proc/$holder/ns/net)" != "$(stat -L -c %i /proc/self/ns/net)" ]; do
            sleep 0.01
        done
        exec 7</proc/$holder/ns/net
        set -- --inherit-fd "fd[7]:container-net" --network-lock skip "$@"
    fi
    env $sim $env_extra timeout -s KILL "$limit" "$criu" restore -d -D "$scratch/images" -v4 \
        -o "$scratch/$step.log" -L "$plugins" --pidfile "$scratch/$step.pid" "$@" \
        </dev/null >"$scratch/$step.out" 2>&1 || status=$?
fi
echo "$status" > "$scratch/$step.status"
if [ -n "${holder:-}" ]; then kill "$holder"; fi
"#
);
