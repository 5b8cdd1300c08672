//! Real CRIU on a served simulated machine: what `real_criu_restore.rs`
//! and the benches' side-by-side runs of the C plugin share. A machine
//! served to host processes ([`Served`]), the application of `app.c`
//! started, dumped and restored by real CRIU in private mount namespaces
//! with stand-in device nodes ([`dump`], [`restore`], the `SCRIPT`), and
//! the checks a restored application must pass ([`check_restored`]), its
//! queues' work in flight among them ([`check_queues`]).
//!
//! The including crate names the `real-criu-harness` crate `harness` at its
//! root (`use real_criu_harness as harness;`).

#![allow(dead_code)] // each includer uses a different subset

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kfd_sim::remote::{Server, Verdict};
use kfd_sim::workload::Workload;
use kfd_sim::{Pid, Sim, SimConfig};

use crate::harness;

/// Everything a run needs.
pub struct Setup {
    pub criu: Vec<(harness::Release, PathBuf)>,
    /// The plugin directory: the shipped plugin and the socket plugin.
    pub plugins: tempfile::TempDir,
    /// The same with upstream's C plugin in place of ours, when asked for.
    pub c_plugins: Option<tempfile::TempDir>,
    pub app: PathBuf,
    pub preload: PathBuf,
    pub stand_in: (u32, u32),
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

pub fn compile(source: &str, out: &Path, args: &[&str]) -> Result<(), String> {
    let source = harness::workspace_root()
        .join("kfd-sim-preload")
        .join(source);
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
            "tests/real_criu_restore/remote_sk_plugin.c",
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
            "tests/real_criu_restore/app.c",
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

/// A simulated machine served to host processes.
pub struct Served {
    pub sim: Sim,
    pub server: Server,
    /// What `KFD_SIM_MACHINE` names for it: its topology, written where
    /// the namespaces see it (the simulator's own tree is in the host's
    /// `/dev/shm`, which they replace).
    pub topology: tempfile::TempDir,
    pub _service: kfd_sim::remote::HostService,
}

impl Served {
    pub fn new(sim: Sim) -> Served {
        let server = Server::new(&sim).expect("serve the machine");
        Served::with_server(sim, server)
    }

    pub fn with_server(sim: Sim, server: Server) -> Served {
        Served::observed(sim, server, Arc::new(|_| Verdict::Run))
    }

    /// `sim` served by `server` to host processes, `observer` seeing every
    /// call.
    pub fn observed(sim: Sim, server: Server, observer: kfd_sim::remote::Observer) -> Served {
        let service = server
            .serve_host_processes(observer)
            .expect("serve host processes");
        let topology = tempfile::Builder::new()
            .prefix("real-criu-topology")
            .tempdir()
            .expect("a topology directory");
        amdgpu_topology::write(sim.topology(), topology.path()).expect("write the topology");
        Served {
            topology,
            sim,
            server,
            _service: service,
        }
    }

    /// A machine served on a socket file, which clients in other network
    /// namespaces reach.
    pub fn builtin_on_a_path(name: &str) -> (Served, tempfile::TempDir) {
        let sim = Sim::builtin(name, SimConfig::default()).expect("the simulated machine");
        let dir = tempfile::Builder::new()
            .prefix("real-criu-socket")
            .tempdir()
            .expect("a socket directory");
        let server = Server::new_in(&sim, dir.path()).expect("serve the machine");
        (Served::with_server(sim, server), dir)
    }

    pub fn builtin(name: &str) -> Served {
        Served::new(Sim::builtin(name, SimConfig::default()).expect("the simulated machine"))
    }

    /// `name` with other gpu_ids, node order and render minors (shuffled,
    /// then moved up by 16: no minor the original machine used).
    pub fn renumbered(name: &str, seed: u64) -> Served {
        let system = amdgpu_topology::builtin(name).expect("a built-in machine");
        let mut system = amdgpu_topology::renumbered(&system, seed);
        for node in &mut system.nodes {
            let minor = node.prop("drm_render_minor");
            if minor != 0 {
                node.properties.set("drm_render_minor", minor + 16);
            }
        }
        Served::new(Sim::new(system, SimConfig::default()).expect("the renumbered machine"))
    }

    pub fn renders(&self) -> String {
        self.sim
            .gpus()
            .iter()
            .map(|g| g.render_minor.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Waits until the simulator holds nothing of any process.
    pub fn assert_empty(&self, what: &str) {
        let empty = wait_for(Duration::from_secs(20), || {
            let a = self.sim.accounting();
            a.kfd_processes == 0 && a.live_bos == 0 && a.open_fds() == 0 && a.cpu_mappings == 0
        });
        assert!(
            empty,
            "{what}: the simulator still holds {:?}",
            self.sim.accounting()
        );
    }
}

/// A BO the application filled, as it listed it in `ready`.
#[derive(Debug, Clone)]
pub struct FilledBo {
    pub kind: String,
    /// The GPU node the application allocated it on.
    pub node: u32,
    pub va: u64,
    pub size: u64,
    pub seed: u64,
}

/// The application's pattern: little-endian xorshift64 words.
pub fn pattern(seed: u64, size: u64) -> Vec<u8> {
    let mut x = seed;
    let mut out = Vec::with_capacity(size as usize);
    for _ in 0..size / 8 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// What a restored BO holds where it differs from what the application
/// wrote ([`bo_mismatches`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The restored process has no BO at the address.
    Missing,
    /// The simulator could not read the BO.
    Unreadable(String),
    /// `words` of its 8-byte words differ, the first at byte `first`;
    /// `zero` of those are zero.
    Differs { first: u64, words: u64, zero: u64 },
}

/// A BO of a restored process that does not hold what the application
/// wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoMismatch {
    pub kind: String,
    pub node: u32,
    pub va: u64,
    pub size: u64,
    pub found: Found,
}

impl std::fmt::Display for BoMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, node, va, size) = (&self.kind, self.node, self.va, self.size);
        write!(f, "the {kind} BO of node {node} at {va:#x} ({size} bytes)")?;
        match &self.found {
            Found::Missing => write!(f, " is missing"),
            Found::Unreadable(e) => write!(f, " cannot be read: {e}"),
            Found::Differs { first, words, zero } => write!(
                f,
                " differs from what the application wrote in {words} of its {} words \
                 (the first at byte {first}; {zero} of them zero)",
                size / 8
            ),
        }
    }
}

/// The BOs of `p` (as the simulator reads them, every byte) that do not
/// hold what the application wrote; the libdrm mapping of a shared buffer
/// is no KFD address and is left to [`check_sharing`]. `Err` when the
/// simulator has no such process.
pub fn bo_mismatches(served: &Served, p: &Proc) -> Result<Vec<BoMismatch>, String> {
    // Compared a slice at a time: a BO may be GiBs.
    const SLICE: u64 = 16 << 20;
    let workload = Workload::attach(&served.sim, Pid(p.pid));
    let described = workload
        .describe()
        .map_err(|e| format!("pid {}: {e}", p.pid))?;
    let mut wrong = Vec::new();
    for bo in p.bos.iter().filter(|b| b.kind != "shared-cpu") {
        let mismatch = |found| BoMismatch {
            kind: bo.kind.clone(),
            node: bo.node,
            va: bo.va,
            size: bo.size,
            found,
        };
        let Some(d) = described
            .bos
            .iter()
            .find(|d| d.va == bo.va || (d.user_addr == bo.va && d.user_addr != 0))
        else {
            wrong.push(mismatch(Found::Missing));
            continue;
        };
        let mut x = bo.seed;
        let (mut first, mut words, mut zero) = (None, 0u64, 0u64);
        let mut at = 0;
        let mut unreadable = None;
        while at < bo.size / 8 * 8 {
            let len = SLICE.min(bo.size / 8 * 8 - at);
            let bytes = match workload.read_bo(d.handle, at, len as usize) {
                Ok(b) => b,
                Err(e) => {
                    unreadable = Some(e.to_string());
                    break;
                }
            };
            for (i, w) in bytes.chunks_exact(8).enumerate() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let w = u64::from_le_bytes(w.try_into().unwrap());
                if w != x {
                    first.get_or_insert(at + 8 * i as u64);
                    words += 1;
                    zero += u64::from(w == 0);
                }
            }
            at += len;
        }
        if let Some(e) = unreadable {
            wrong.push(mismatch(Found::Unreadable(e)));
        } else if let Some(first) = first {
            wrong.push(mismatch(Found::Differs { first, words, zero }));
        }
    }
    Ok(wrong)
}

pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

pub fn hex(v: &str) -> u64 {
    u64::from_str_radix(v.trim_start_matches("0x"), 16).expect("a hex number")
}

/// A gate the application's queue work waits at before the dump (see
/// `app.c`): writing `value` (`size` bytes, little endian) at GPU VA `va`
/// opens it.
#[derive(Debug, Clone, Copy)]
pub struct Gate {
    pub va: u64,
    pub size: usize,
    pub value: u64,
}

/// A buffer two processes share through a dma-buf (the `share` mode): its
/// GEM handle in this process's render-node file.
#[derive(Debug, Clone, Copy)]
pub struct SharedBo {
    pub minor: u32,
    pub handle: u32,
    pub size: u64,
}

/// One process of the application as its `ready` file lists it.
#[derive(Debug, Clone)]
pub struct Proc {
    /// Its records' directory (ready, heartbeat).
    pub dir: PathBuf,
    pub pid: u32,
    pub queues: usize,
    pub events: usize,
    pub bos: Vec<FilledBo>,
    pub mailbox: u64,
    pub shared: Option<SharedBo>,
    /// The gates its queue work waits at (none without queues).
    pub gates: Vec<Gate>,
    /// The read pointers its SDMA and AQL queues stood at, at the gates.
    pub held: Option<(u64, u64)>,
}

impl Proc {
    pub fn parse(dir: &Path) -> Proc {
        let ready = fs::read_to_string(dir.join("ready")).unwrap_or_default();
        let line = |prefix: &str| ready.lines().find(|l| l.starts_with(prefix));
        let state = line("state ").unwrap_or_else(|| panic!("no state in {ready:?}"));
        let shared = line("shared ");
        Proc {
            dir: dir.to_path_buf(),
            pid: field(line("pid=").unwrap_or("pid=0"), "pid")
                .and_then(|p| p.parse().ok())
                .expect("the process's pid"),
            queues: field(state, "queues").unwrap().parse().unwrap(),
            events: field(state, "events").unwrap().parse().unwrap(),
            bos: ready
                .lines()
                .filter(|l| l.starts_with("bo "))
                .map(|l| FilledBo {
                    kind: field(l, "kind").unwrap().to_owned(),
                    node: field(l, "node").unwrap().parse().unwrap(),
                    va: hex(field(l, "va").unwrap()),
                    size: field(l, "size").unwrap().parse().unwrap(),
                    seed: hex(field(l, "seed").unwrap()),
                })
                .collect(),
            mailbox: line("mailbox ")
                .and_then(|l| field(l, "va"))
                .map(hex)
                .expect("the mailbox's address"),
            shared: shared.map(|l| SharedBo {
                minor: field(l, "minor").unwrap().parse().unwrap(),
                handle: field(l, "handle").unwrap().parse().unwrap(),
                size: field(l, "size").unwrap().parse().unwrap(),
            }),
            gates: ready
                .lines()
                .filter(|l| l.starts_with("gate "))
                .map(|l| Gate {
                    va: hex(field(l, "va").unwrap()),
                    size: field(l, "size").unwrap().parse().unwrap(),
                    value: field(l, "value").unwrap().parse().unwrap(),
                })
                .collect(),
            held: line("held ").map(|l| {
                (
                    field(l, "sdma").unwrap().parse().unwrap(),
                    field(l, "aql").unwrap().parse().unwrap(),
                )
            }),
        }
    }

    pub fn heartbeat(&self) -> Vec<String> {
        fs::read_to_string(self.dir.join("heartbeat"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Waits until the heartbeat grows by three beats.
    pub fn assert_beats_on(&self, what: &str) {
        let before = self.heartbeat().len();
        let grew = wait_for(Duration::from_secs(10), || {
            self.heartbeat().len() > before + 2
        });
        assert!(
            grew,
            "{what}: the heartbeat of pid {} stopped at {before} beats\n{}",
            self.pid,
            fs::read_to_string(self.dir.join("app.out")).unwrap_or_default()
        );
    }
}

/// One application's life: its scratch directory (images, logs) and its
/// processes (the root first). Whatever of them is still there when it
/// goes, this process's descendants by those pids (a tree a failed restore
/// left half-restored among them), is killed.
pub struct App {
    pub scratch: tempfile::TempDir,
    pub procs: Vec<Proc>,
}

impl App {
    pub fn path(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    pub fn read(&self, name: &str) -> String {
        fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// The root process's pid.
    pub fn pid(&self) -> u32 {
        self.procs[0].pid
    }

    pub fn all_gone(&self) -> bool {
        self.procs.iter().all(|p| !alive(p.pid))
    }
}

impl Drop for App {
    fn drop(&mut self) {
        for p in &self.procs {
            kill(p.pid);
        }
        if !wait_for(Duration::from_secs(10), || self.all_gone()) {
            eprintln!(
                "processes of the application outlive it: {:?}",
                self.procs.iter().map(|p| p.pid).collect::<Vec<_>>()
            );
        }
    }
}

/// Kills `pid` when it is this process's descendant: one the test started
/// or CRIU restored under it (this process adopts CRIU's orphans), never a
/// stranger that took the number of one gone.
pub fn kill(pid: u32) {
    if !descends_from_us(pid) {
        return;
    }
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) sends a signal; no memory involved. The pid is a
        // live descendant of this process, which has not reaped it.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Whether `pid` is a live descendant of this process (its parents, read
/// from `/proc/PID/stat`, lead here).
pub fn descends_from_us(pid: u32) -> bool {
    let me = std::process::id();
    let mut at = pid;
    // Bounded: a chain of parents is short, and one that changes under the
    // walk must not keep it going.
    for _ in 0..64 {
        if at <= 1 {
            return false;
        }
        let Ok(stat) = fs::read_to_string(format!("/proc/{at}/stat")) else {
            return false;
        };
        // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        match parent {
            Some(p) if p == me => return true,
            Some(p) => at = p,
            None => return false,
        }
    }
    false
}

/// Whether `pid` still exists; a zombie child of this process is reaped
/// first (CRIU's tasks end up children of this process, a subreaper, and a
/// restore needs their pids free).
pub fn alive(pid: u32) -> bool {
    if let Ok(p) = libc::pid_t::try_from(pid) {
        // SAFETY: waitpid(2) with a null status pointer writes no memory;
        // WNOHANG never blocks. A pid that is not our child fails with
        // ECHILD and changes nothing.
        unsafe { libc::waitpid(p, std::ptr::null_mut(), libc::WNOHANG) };
    }
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Makes this process the subreaper of everything it starts: the tasks CRIU
/// restores with `-d` (and the dumped application, once its script is
/// gone) become its children, which [`alive`] reaps.
pub fn adopt_orphans() {
    // SAFETY: prctl(2) PR_SET_CHILD_SUBREAPER takes an integer; no memory.
    let ret = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(ret, 0, "PR_SET_CHILD_SUBREAPER");
}

/// Waits for `what` at most `limit`.
pub fn wait_for(limit: Duration, mut what: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if what() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How the application runs (its last argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppMode {
    /// One process, every BO mapped.
    Plain,
    /// A parent and a child sharing a buffer through a dma-buf.
    Share,
    /// One process whose VRAM BOs are not mapped for the CPU once filled.
    GpuOnly,
}

impl AppMode {
    fn arg(self) -> &'static str {
        match self {
            AppMode::Plain => "",
            AppMode::Share => "share",
            AppMode::GpuOnly => "gpu-only",
        }
    }
}

/// What a step of the script was given.
pub struct Step<'a> {
    pub setup: &'a Setup,
    /// The plugin directory CRIU loads.
    pub plugins: &'a Path,
    pub criu: &'a Path,
    pub served: &'a Served,
    pub gpus: u32,
    pub mib: u64,
    pub env: &'a str,
    /// Whether the dump is incremental on a first, running one (`parent/`).
    pub parent: bool,
    /// Whether the application runs, and is restored, in a network
    /// namespace of its own.
    pub netns: bool,
    /// How the application runs.
    pub mode: AppMode,
    pub args: &'a [&'a str],
}

/// Runs the script for `step` (`dump`, or a restore's name) in a new
/// mount namespace; CRIU's exit status.
pub fn run_step(scratch: &Path, name: &str, s: &Step<'_>) -> Option<i32> {
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(SCRIPT)
        .arg("real-criu-restore")
        .arg(scratch)
        .arg(name)
        .arg(s.setup.stand_in.0.to_string())
        .arg(s.setup.stand_in.1.to_string())
        .arg(s.served.renders())
        .arg(&s.setup.preload)
        .arg(s.served.topology.path())
        .arg(s.served.server.address())
        .arg(s.criu)
        .arg(s.plugins)
        .arg(&s.setup.app)
        .arg(s.gpus.to_string())
        .arg(s.mib.to_string())
        .arg(s.env)
        .arg(if s.parent { "yes" } else { "no" })
        .arg(if s.netns { "yes" } else { "no" })
        .arg(s.mode.arg())
        .args(s.args)
        .stdin(Stdio::null())
        .output()
        .expect("run unshare");
    assert!(
        out.status.success(),
        "the namespace script ({name}) failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        fs::read_to_string(scratch.join("app.out")).unwrap_or_default()
    );
    fs::read_to_string(scratch.join(format!("{name}.status")))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Starts the application on `s.served` and dumps it (CRIU kills it).
pub fn dump(s: &Step<'_>) -> App {
    dump_in(scratch(), s)
}

/// A new scratch directory for one application's life.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("real-criu-restore")
        .tempdir()
        .expect("scratch directory")
}

/// [`dump`] in the scratch directory `scratch` (from [`scratch`]).
pub fn dump_in(scratch: tempfile::TempDir, s: &Step<'_>) -> App {
    fs::create_dir(scratch.path().join("images")).unwrap();
    let status = run_step(scratch.path(), "dump", s);
    let mut procs = vec![Proc::parse(scratch.path())];
    if scratch.path().join("child/ready").exists() {
        procs.push(Proc::parse(&scratch.path().join("child")));
    }
    let app = App { scratch, procs };
    assert_eq!(
        status,
        Some(0),
        "the dump failed:\n{}\n{}\n{}{}",
        app.read("dump.out"),
        app.read("dump.log"),
        app.read("parent.out"),
        app.read("parent.log")
    );
    keep_link_remaps(&app);
    app
}

/// CRIU's link-remap files (`--link-remap`: the thunk's semaphore is an
/// unlinked file in /dev/shm), which a restore consumes: kept aside after
/// the dump, so the same images can be restored again.
pub fn keep_link_remaps(app: &App) {
    let kept = app.path("link-remaps");
    fs::create_dir_all(&kept).unwrap();
    for entry in fs::read_dir(app.path("shm")).unwrap().flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("link_remap.")
        {
            fs::copy(entry.path(), kept.join(entry.file_name())).unwrap();
        }
    }
}

/// Puts the dump's link-remap files back where CRIU left them.
pub fn put_back_link_remaps(app: &App) {
    let Ok(kept) = fs::read_dir(app.path("link-remaps")) else {
        return;
    };
    for entry in kept.flatten() {
        let at = app.path("shm").join(entry.file_name());
        if !at.exists() {
            fs::copy(entry.path(), at).unwrap();
        }
    }
}

/// Restores `app` on `s.served` (restore step `name`); the restored pid.
pub fn restore(app: &mut App, name: &str, s: &Step<'_>) -> Result<u32, String> {
    put_back_link_remaps(app);
    let status = run_step(app.scratch.path(), name, s);
    if status != Some(0) {
        return Err(format!(
            "CRIU restore exited with {status:?}:\n{}\n{}",
            app.read(&format!("{name}.out")),
            app.read(&format!("{name}.log"))
        ));
    }
    let pid: u32 = app
        .read(&format!("{name}.pid"))
        .trim()
        .parse()
        .map_err(|e| format!("no pid file: {e}"))?;
    // CRIU restores every pid; the pid file names the root.
    if pid != app.pid() {
        return Err(format!(
            "CRIU restored the root as pid {pid}, not {}",
            app.pid()
        ));
    }
    Ok(pid)
}

/// Everything a restored application must show, for each of its
/// processes; with a shared buffer, that both processes' imports are one
/// buffer again.
pub fn check_restored(served: &Served, app: &App, what: &str) {
    for p in &app.procs {
        check_process(served, p, &format!("{what}, pid {}", p.pid));
    }
    if let [parent, child] = &app.procs[..] {
        check_sharing(served, parent, child, what);
    }
    for p in &app.procs {
        let what = format!("{what}, pid {}", p.pid);
        check_saved_queues(served, app, p, &what);
        check_queues(served, p, &what);
    }
}

/// The checkpoint holds `p`'s queues where the GPU stood at the dump: in
/// the middle of their rings, at the read pointers of the gates (as the
/// simulator reads the private data of the process's KFD image).
pub fn check_saved_queues(served: &Served, app: &App, p: &Proc, what: &str) {
    let Some((sdma, aql)) = p.held else {
        return;
    };
    let store = amdgpu_image::DirStore::open_dir(app.path("images")).expect("the images");
    let image = amdgpu_image::ImageStore::list(&store)
        .expect("list the images")
        .iter()
        .filter(|n| matches!(n, amdgpu_image::ImageName::Kfd { .. }))
        .filter_map(|n| {
            amdgpu_image::ImageStore::read_message::<amdgpu_image::CriuKfd>(
                &store,
                n,
                amdgpu_image::ReadLimits::default(),
            )
            .ok()
            .flatten()
        })
        .find(|k| k.pid == p.pid)
        .unwrap_or_else(|| panic!("{what}: no KFD image of pid {}", p.pid));
    let devices = image
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .count();
    let saved = kfd_sim::saved_queues(
        &image.priv_data,
        devices,
        image.bo_entries.len(),
        image.num_of_objects as usize,
        served.sim.config().max_gpu_instance,
    )
    .unwrap_or_else(|e| panic!("{what}: the image's queues: {e}"));
    // Kernel queue types: 0 compute, 1 SDMA.
    let at = |ty: u32| {
        saved
            .iter()
            .find(|q| q.queue_type == ty)
            .unwrap_or_else(|| panic!("{what}: no queue of type {ty} saved: {saved:?}"))
    };
    let (s, a) = (at(1), at(0));
    assert!(
        s.read_pointer == sdma && s.mid_ring() && a.read_pointer == aql && a.mid_ring(),
        "{what}: the checkpoint holds the queues at their gates (sdma {sdma}, aql {aql}): {saved:?}"
    );
}

/// How long the restored process may take over its queue checks: longer
/// than its own bound on each wait (`app.c`'s `WAIT_MS`, four waits), so a
/// queue that never resumes is the process's verdict, and a process that
/// hangs fails the test here (the [`App`] then kills it).
const QUEUE_CHECKS_BOUND: Duration = Duration::from_secs(90);

/// The queue work `p` held at its gates before the dump finishes after the
/// restore, from the read pointers the checkpoint saved, and new work the
/// restored process submits runs (see `app.c`): the test asks the process
/// to check through mailbox word 2, waits until the process waits on its
/// SDMA event (the wait of CRIU issue 2663's shape: it ends only if the
/// queue resumes where it stopped and the event is delivered), opens the
/// gates through the simulator and waits for the process's verdict. Every
/// wait is bounded.
pub fn check_queues(served: &Served, p: &Proc, what: &str) {
    if p.gates.is_empty() {
        return;
    }
    let pid = Pid(p.pid);
    let workload = Workload::attach(&served.sim, pid);
    let described = workload.describe().expect("describe the restored process");
    let bo_at = |va: u64, len: u64| {
        described
            .bos
            .iter()
            .find(|d| d.va <= va && va + len <= d.va + d.size)
            .unwrap_or_else(|| panic!("{what}: no BO holds {len} bytes at {va:#x}"))
    };
    let mailbox = bo_at(p.mailbox, 24);
    workload
        .write_bo(mailbox.handle, 16, &1u64.to_le_bytes())
        .unwrap();
    let queues = p.dir.join("queues");
    let verdict = || fs::read_to_string(&queues).unwrap_or_default();
    assert!(
        wait_for(Duration::from_secs(20), || !verdict().is_empty()),
        "{what}: the process never took up the request to check its queues\n{}",
        fs::read_to_string(p.dir.join("app.out")).unwrap_or_default()
    );
    for gate in &p.gates {
        let bo = bo_at(gate.va, gate.size as u64);
        workload
            .write_bo(
                bo.handle,
                gate.va - bo.va,
                &gate.value.to_le_bytes()[..gate.size],
            )
            .unwrap();
    }
    let done = wait_for(QUEUE_CHECKS_BOUND, || verdict().starts_with("done"));
    let said = verdict();
    assert!(
        done && said.trim() == "done ok",
        "{what}: the restored queues, as the process found them: {:?} (within {} s); the engines: {:?}",
        said.trim(),
        QUEUE_CHECKS_BOUND.as_secs(),
        served.sim.queue_statuses(pid)
    );
    if let Some((sdma, aql)) = p.held {
        println!(
            "  queues resumed at their saved read pointers (sdma {sdma}, aql {aql}): held work done, \
             its event delivered, new SDMA copies and AQL/PM4 packets done"
        );
    }
}

pub fn check_process(served: &Served, p: &Proc, what: &str) {
    let pid = Pid(p.pid);
    p.assert_beats_on(what);
    let state = served
        .sim
        .kfd_state(pid)
        .unwrap_or_else(|| panic!("{what}: no KFD process"));
    assert!(
        !state.queues_paused && state.queues_running() && state.resumed == 1,
        "{what}: the queues run after the restore: {state:?}"
    );
    assert_eq!(
        state.queues, p.queues,
        "{what}: its queues restored: {state:?}"
    );
    assert_eq!(
        state.events, p.events,
        "{what}: its events restored: {state:?}"
    );
    // Every filled BO holds its bytes, as the simulator reads them.
    let wrong = bo_mismatches(served, p).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        wrong.is_empty(),
        "{what}: {}",
        wrong
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    );
    let workload = Workload::attach(&served.sim, pid);
    let described = workload.describe().expect("describe the restored process");
    // The mailbox: the process's writes reach the simulator...
    let mailbox = described
        .bos
        .iter()
        .find(|d| d.va == p.mailbox)
        .expect("the mailbox BO");
    let word = |offset: u64| {
        let b = workload.read_bo(mailbox.handle, offset, 8).unwrap();
        u64::from_le_bytes(b.try_into().unwrap())
    };
    let first = word(0);
    let moved = wait_for(Duration::from_secs(10), || word(0) > first + 2);
    assert!(
        moved,
        "{what}: the process's writes to its mapping no longer reach the BO (beat {first} stays)"
    );
    // ...and the simulator's writes reach the process, which then checks
    // every BO through its own mappings.
    let magic: u64 = 0x5eed_0000 + u64::from(p.pid);
    workload
        .write_bo(mailbox.handle, 8, &magic.to_le_bytes())
        .unwrap();
    let want = format!("seen={magic:#x} verify=");
    let mut last = String::new();
    let seen = wait_for(Duration::from_secs(10), || {
        last = p.heartbeat().last().cloned().unwrap_or_default();
        last.contains(&want)
    });
    assert!(
        seen,
        "{what}: the process does not see the simulator's write to its mapping: {last}"
    );
    assert!(
        last.ends_with("verify=ok"),
        "{what}: the process's own view of its BOs: {last}"
    );
}

/// The buffer behind process `pid`'s handle of the shared buffer.
pub fn shared_buffer(served: &Served, pid: u32, shared: SharedBo, what: &str) -> u64 {
    let buffers = served.sim.render_buffers(Pid(pid));
    let b = buffers
        .iter()
        .find(|b| b.render_minor == shared.minor && b.handle == shared.handle)
        .unwrap_or_else(|| {
            panic!(
                "{what}: pid {pid} has no handle {} on renderD{}: {buffers:?}",
                shared.handle, shared.minor
            )
        });
    assert_eq!(b.size, shared.size, "{what}: the shared buffer's size");
    b.buffer
}

/// The two processes' handles of the shared buffer name one buffer again,
/// which holds what the parent wrote.
pub fn check_sharing(served: &Served, parent: &Proc, child: &Proc, what: &str) {
    let (Some(ps), Some(cs)) = (parent.shared, child.shared) else {
        panic!(
            "{what}: a process of the tree lists no shared buffer (parent {}: {:?}, child {}: {:?})",
            parent.pid, parent.shared, child.pid, child.shared
        );
    };
    let seed = parent
        .bos
        .iter()
        .find(|b| b.kind == "shared-cpu")
        .expect("the parent's record of the shared buffer")
        .seed;
    let ours = shared_buffer(served, parent.pid, ps, what);
    let theirs = shared_buffer(served, child.pid, cs, what);
    assert_eq!(
        ours, theirs,
        "{what}: the parent's buffer and the child's import are one buffer after the restore"
    );
    let held = served.sim.read_buffer(ours, 0, ps.size as usize);
    let want = pattern(seed, ps.size);
    assert!(
        held.as_deref() == Some(&want[..]),
        "{what}: the shared buffer holds what the parent wrote (first bytes {:02x?}, want {:02x?}; \
         first difference at {:?})",
        held.as_ref().map(|h| &h[..16]),
        &want[..16],
        held.as_ref().and_then(|h| h.iter().zip(&want).position(|(a, b)| a != b))
    );
}

/// Kills the restored application and waits until the simulator holds
/// nothing of it.
pub fn finish(served: &Served, app: &mut App, what: &str) {
    for p in &app.procs {
        kill(p.pid);
    }
    assert!(
        wait_for(Duration::from_secs(10), || app.all_gone()),
        "{what}: the application does not die"
    );
    served.assert_empty(&format!("{what}, after the application's end"));
}

/// The C plugin names itself in CRIU's inventory (which CRIU 4.1 and
/// later check at restore) only from `HANDLE_DEVICE_VMA`, when CRIU meets
/// a mapping of a GPU device; here the process's BO mappings are memfds
/// (see the module docs), so its dumps list no plugin and both plugins
/// would stay out of their restore. The test lists it, as a dump of a
/// process with device mappings does.
pub fn list_c_plugin_in_inventory(app: &App) {
    let path = app.path("images/inventory.img");
    let image = fs::read(&path).expect("inventory.img");
    let listed = harness::inventory::plugins(&image).unwrap_or_default();
    assert!(
        !listed.iter().any(|p| p == "amdgpu_plugin"),
        "a dump without device VMAs lists the C plugin after all: {listed:?}; this step is no longer needed"
    );
    let mut plugins: Vec<&str> = listed.iter().map(String::as_str).collect();
    plugins.push("amdgpu_plugin");
    fs::write(&path, harness::inventory::with_plugins(&image, &plugins))
        .expect("rewrite inventory.img");
}

/// The restored process's GPUs: (checkpointed gpu_id it still sees, local
/// gpu_id it runs on).
pub fn gpu_map(served: &Served, app: &App) -> Vec<(u32, u32)> {
    let mut map = served
        .sim
        .kfd_state(Pid(app.pid()))
        .expect("the restored KFD process")
        .gpu_ids;
    map.sort_unstable();
    map
}

/// The bytes of the plugin's pages files in an images directory.
pub fn gpu_pages_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("amdgpu-pages-"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}
