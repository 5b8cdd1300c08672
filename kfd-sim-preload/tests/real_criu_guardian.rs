//! Real CRIU dumps a real process that holds simulated KFD state, with
//! this project's plugin doing the GPU half and its dump guardian armed.
//!
//! The test owns one simulated machine and serves it to host processes
//! ([`kfd_sim::remote::Server::serve_host_processes`]). In a private mount
//! namespace, `/dev/kfd` and the GPU's render node are stand-in nodes with
//! `/dev/fuse`'s numbers (a misc device CRIU has no handler for, so it
//! hands the files to the plugin); the application (AMD's thunk,
//! `libhsakmt`, in `real_criu_guardian/app.c`) and CRIU itself run with the
//! interposer in its `KFD_SIM_REMOTE` mode, so both are clients of the
//! test's machine: the plugin's ioctls on CRIU's copy of the application's
//! fd reach the application's simulated file, and the `CRIU_OP`
//! ptrace-parent rule is checked against the host's real tracer.
//!
//! * CRIU is `SIGKILL`ed at its first device call after `PROCESS_INFO`
//!   paused the application: the guardian (forked out of CRIU by the
//!   plugin) unpauses it, says so in `amdgpu-guardian-<pid>.log` in the
//!   images directory, and the application's queues and CPU work run on;
//!   the test prints the time from the kill to the guardian's `UNPAUSE`.
//! * The same process dumped twice with `--leave-running`, first with
//!   `AMDGPU_PLUGIN_GUARDIAN=0`, then with the guardian armed: both
//!   succeed, the application runs on unpaused, the guardian exits and
//!   writes nothing, and CRIU's own log lines (the plugin's left out) are
//!   the same, compared as multisets with numbers masked and the lines
//!   that differ between any two dumps left out (the host's unix sockets,
//!   whether the seize caught a system call, the run id).
//! * Without CRIU: the served machine's `CRIU_OP` rule for host processes
//!   (`EBADF` until the calling thread is the application's real ptrace
//!   parent), on a copy of the application's fd taken with `pidfd_getfd`.
//!
//! The application's BO mappings are the simulator's memfds, which CRIU
//! dumps as shared memory; its connection to the test is an external unix
//! socket, named to CRIU with `--external unix[INODE]`.
//!
//! The guardian test found that the guardian inherited CRIU's `SIGCHLD`
//! handler, which exited it at the child stop of its own
//! `PTRACE_INTERRUPT` (fixed in `amdgpu_checkpoint::sys::spawn_orphan`).
//!
//! Needs root, `unshare`, CRIU criu-dev from `../shared/vendor/criu/build.sh`
//! (`$CRIU_BUILDS`, else `~/.cache/criu-builds`), the plugin `.so`
//! (`$AMDGPU_PLUGIN_SO`, else the newer of `<target>/release` and
//! `<target>/debug`, refused when older than its sources), `cc`,
//! libhsakmt-dev and `/dev/fuse`. Without them it says why and skips; with
//! `CI` set a skip is a failure.

mod common;
use real_criu_harness as harness;
use real_criu_harness::driver::wait_for;

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kfd_sim::remote::{RemoteCall, RemoteOp, Server, Verdict};
use kfd_sim::{Pid, Sim, SimConfig};

/// The simulated machine (one GPU: one render node to stand in for).
const MACHINE: &str = "single-gpu";

/// The plugin: its release or debug build, whichever is newer.
fn plugin_so() -> Result<PathBuf, String> {
    harness::plugin_build(
        &["release", "debug"],
        "build it again (`make` or `cargo build -p criu-plugin-amdgpu`)",
    )
}

/// `/dev/fuse`'s (major, minor): the stand-in nodes' numbers.
fn stand_in_numbers() -> Result<(u32, u32), String> {
    let meta = fs::metadata("/dev/fuse").map_err(|e| format!("/dev/fuse: {e}"))?;
    if !meta.file_type().is_char_device() || fs::File::open("/dev/fuse").is_err() {
        return Err("/dev/fuse is not a character device that opens".into());
    }
    let rdev = meta.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
}

/// The application, compiled into `dir`.
fn build_app(dir: &Path) -> Result<PathBuf, String> {
    if !Path::new("/usr/include/hsakmt.h").is_file() {
        return Err("libhsakmt-dev is not installed (/usr/include/hsakmt.h is missing)".into());
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real_criu_guardian/app.c");
    let out = dir.join("real_criu_app");
    let built = Command::new("cc")
        .arg("-O1")
        .arg("-Wall")
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .arg("-lhsakmt")
        .output()
        .map_err(|e| format!("no C compiler (cc) to build the application: {e}"))?;
    assert!(
        built.status.success(),
        "cc {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    Ok(out)
}

/// Everything a run needs.
struct Setup {
    /// The CRIU builds the test runs (none without CRIU), each with its
    /// release.
    criu: Vec<(harness::Release, PathBuf)>,
    /// The plugin directory, when the test runs CRIU.
    plugins: Option<tempfile::TempDir>,
    app: PathBuf,
    preload: PathBuf,
    stand_in: (u32, u32),
    _build: tempfile::TempDir,
}

impl Setup {
    fn plugins(&self) -> &Path {
        self.plugins.as_ref().expect("a CRIU test").path()
    }
}

/// What a test needs; CRIU (the builds of `releases`) and the plugin only
/// when `releases` names any.
fn setup(releases: &[harness::Release]) -> Option<Setup> {
    let found = (|| {
        if !harness::is_root() {
            return Err("the test needs root (mount namespaces, ptrace, CRIU)".to_string());
        }
        if !Command::new("unshare")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return Err("unshare (util-linux) is not installed".into());
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
        let plugins = if criu.is_empty() {
            None
        } else {
            let so = plugin_so()?;
            let plugins = tempfile::tempdir().map_err(|e| e.to_string())?;
            fs::copy(&so, plugins.path().join("amdgpu_plugin.so")).map_err(|e| e.to_string())?;
            Some(plugins)
        };
        let build = tempfile::tempdir().map_err(|e| e.to_string())?;
        let app = build_app(build.path())?;
        Ok(Setup {
            criu,
            plugins,
            app,
            preload: common::preload_lib(),
            stand_in,
            _build: build,
        })
    })();
    match found {
        Ok(setup) => Some(setup),
        Err(why) => {
            common::skip(&why);
            None
        }
    }
}

/// In a private mount namespace: a /dev of its own with the stand-in
/// nodes, the application started with the interposer, then CRIU (with
/// the interposer too) dumping it; CRIU's exit status in `dump.status`.
const SCRIPT: &str = concat!(
    r#"
set -eu
scratch=$1 criu=$2 plugins=$3 app=$4 major=$5 minor=$6 render=$7 mode=$8
preload=$9 machine=${10} address=${11}
step=$mode renders=$render
"#,
    harness::fake_dev!(),
    "mount -t tmpfs shm /dev/shm\n",
    harness::stand_in_nodes!(),
    r#"
sim="LD_PRELOAD=$preload KFD_SIM_MACHINE=$machine KFD_SIM_REMOTE=$address"
# A session of its own (CRIU before 4.3 refuses to dump a root process
# that leads none); setsid (not a group leader here, so it does not fork)
# and env exec the program: $! is its pid.
setsid env $sim "$app" "$scratch" </dev/null >"$scratch/app.out" 2>&1 &
app=$!
echo "$app" > "$scratch/app.pid"
n=0
until [ -s "$scratch/ready" ]; do
    n=$((n + 1))
    if [ "$n" -gt 1500 ]; then echo "the application never got ready" >&2; exit 3; fi
    sleep 0.02
done
if grep -q fail "$scratch/ready"; then cat "$scratch/ready" >&2; exit 3; fi
sock=$(for f in /proc/"$app"/fd/*; do readlink "$f"; done | sed -n 's/^socket:\[\([0-9]*\)\]$/\1/p' | head -n 1)
[ -n "$sock" ] || { echo "the application holds no socket" >&2; exit 3; }
echo "$sock" > "$scratch/app.socket"
# dump NAME GUARDIAN [CRIU OPTION...]: images in NAME/, log NAME.log,
# CRIU's exit status in NAME.status.
dump() {
    name=$1 guardian=$2
    shift 2
    mkdir -p "$scratch/$name"
    status=0
    env $sim AMDGPU_PLUGIN_GUARDIAN="$guardian" "$criu" dump -t "$app" -D "$scratch/$name" \
        -v4 -o "$scratch/$name.log" -L "$plugins" --external "unix[$sock]" --link-remap "$@" \
        </dev/null >"$scratch/$name.out" 2>&1 || status=$?
    echo "$status" > "$scratch/$name.status"
}
if [ "$mode" = app-only ]; then
    exit 0
elif [ "$mode" = kill ]; then
    dump images 1
else
    # The same process dumped twice: without a guardian, then with one.
    dump unguarded 0 --leave-running
    dump images 1 --leave-running
fi
"#
);

/// What the observer saw and did.
#[derive(Debug, Default)]
struct Seen {
    /// The simulated pid (the host pid) that paused with `PROCESS_INFO`.
    paused_by: Option<Pid>,
    /// CRIU, killed at its first device call after the pause, and when.
    killed: Option<(Pid, Instant)>,
    /// The `CRIU_OP` operations issued, by caller.
    criu_ops: Vec<(Pid, u32)>,
    /// When an `UNPAUSE` from another process than the pauser was issued.
    foreign_unpause: Option<(Pid, Instant)>,
}

/// The `op` of a `CRIU_OP` argument.
fn criu_op(arg: &[u8]) -> Option<u32> {
    let at = std::mem::offset_of!(kfd_sys::kfd_ioctl_criu_args, op);
    Some(u32::from_ne_bytes(arg.get(at..at + 4)?.try_into().ok()?))
}

/// One run of the script against a fresh application.
struct Run {
    scratch: tempfile::TempDir,
    app: Option<u32>,
    /// CRIU's exit status and log (the dump with the guardian).
    status: Option<i32>,
    log: String,
    /// The same for the dump with `AMDGPU_PLUGIN_GUARDIAN=0` (`compare`).
    unguarded_status: Option<i32>,
    unguarded_log: String,
}

impl Run {
    fn images(&self) -> PathBuf {
        self.scratch.path().join("images")
    }

    fn beats(&self) -> usize {
        fs::read_to_string(self.scratch.path().join("heartbeat")).map_or(0, |t| t.lines().count())
    }

    fn app(&self) -> u32 {
        self.app.expect("the application started")
    }

    /// Waits until the application's heartbeat grows.
    fn assert_runs_on(&self, what: &str) {
        let before = self.beats();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.beats() <= before + 2 {
            assert!(
                Instant::now() < deadline,
                "{what}: the application's CPU work stopped ({before} beats)"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// CRIU's own log lines, the plugin's left out, with what differs
    /// between two runs of the same dump masked: timestamps, numbers
    /// (pids, addresses, inodes, sizes of random names), the scratch and
    /// plugin directories' random names.
    fn criu_lines(&self, log: &str, plugins: &Path) -> Vec<String> {
        let scratch = self.scratch.path().to_string_lossy().into_owned();
        let plugins = plugins.to_string_lossy().into_owned();
        log.lines()
            .filter(|l| !l.contains("amdgpu_plugin: "))
            .map(|l| l.split_once(") ").map_or(l, |(_, rest)| rest))
            .filter(|l| !varies(l))
            .map(|l| {
                let l = l.replace(&scratch, "SCRATCH").replace(&plugins, "PLUGINS");
                // The two dumps' images directories.
                mask(&l.replace("SCRATCH/unguarded", "SCRATCH/images"))
            })
            .collect()
    }
}

/// Whether CRIU's log line `line` tells what varies between two dumps of
/// the same program whatever the plugin does.
fn varies(line: &str) -> bool {
    // Every unix socket of the network namespace, the host's included:
    // they come and go with other processes.
    line.starts_with("unix: \tCollected") || line.starts_with("unix: \t\t")
        // Whether the seize caught the application inside a system call.
        || line.contains("with interrupted system call")
        // A random UUID.
        || line.starts_with("CRIU run id = ")
}

/// The lines of `a` not in `b` and those of `b` not in `a`, counted as
/// multisets: the order of the application's mappings and the interleaving
/// of the parasite's lines with CRIU's vary from run to run.
fn difference(a: &[String], b: &[String]) -> (Vec<String>, Vec<String>) {
    let mut a: Vec<String> = a.to_vec();
    let mut b: Vec<String> = b.to_vec();
    a.sort();
    b.sort();
    let (mut only_a, mut only_b) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x < y => {
                only_a.push(x.clone());
                i += 1;
            }
            (Some(_), Some(y)) => {
                only_b.push(y.clone());
                j += 1;
            }
            (Some(x), None) => {
                only_a.push(x.clone());
                i += 1;
            }
            (None, Some(y)) => {
                only_b.push(y.clone());
                j += 1;
            }
            (None, None) => break,
        }
    }
    (only_a, only_b)
}

/// `line` with every word holding a digit (a number, an address, a run id
/// part) replaced by `#` and every run of white space by one space (CRIU
/// pads numbers to columns).
fn mask(line: &str) -> String {
    line.split_whitespace()
        .map(|field| {
            let mut out = String::with_capacity(field.len());
            let mut word = String::new();
            let flush = |word: &mut String, out: &mut String| {
                if word.bytes().any(|b| b.is_ascii_digit()) {
                    out.push('#');
                } else {
                    out.push_str(word);
                }
                word.clear();
            };
            for c in field.chars() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    word.push(c);
                } else {
                    flush(&mut word, &mut out);
                    out.push(c);
                }
            }
            flush(&mut word, &mut out);
            out
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(app) = self.app {
            if let Ok(pid) = libc::pid_t::try_from(app) {
                // SAFETY: kill(2) sends a signal; no memory involved. The
                // pid is the application this run started (its parent, the
                // namespace script, is gone, so it is not reaped by anyone
                // who could have reused the pid before this).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Runs the script: `mode` `kill` (one dump, CRIU killed by the
/// observer), `compare` (two `--leave-running` dumps of the same process,
/// the first with `AMDGPU_PLUGIN_GUARDIAN=0`) or `app-only` (no CRIU).
fn run(setup: &Setup, criu: Option<&Path>, address: &str, render_minor: u32, mode: &str) -> Run {
    let scratch = tempfile::Builder::new()
        .prefix("real-criu-guardian")
        .tempdir()
        .expect("scratch directory");
    fs::create_dir(scratch.path().join("images")).unwrap();
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(SCRIPT)
        .arg("real-criu-guardian")
        .arg(scratch.path())
        .arg(criu.unwrap_or(Path::new("")))
        .arg(setup.plugins.as_ref().map_or(Path::new(""), |p| p.path()))
        .arg(&setup.app)
        .arg(setup.stand_in.0.to_string())
        .arg(setup.stand_in.1.to_string())
        .arg(render_minor.to_string())
        .arg(mode)
        .arg(&setup.preload)
        .arg(MACHINE)
        .arg(address)
        .stdin(Stdio::null())
        .output()
        .expect("run unshare");
    let read = |name: &str| fs::read_to_string(scratch.path().join(name)).unwrap_or_default();
    let app = read("app.pid").trim().parse().ok();
    let run = Run {
        app,
        status: read("images.status").trim().parse().ok(),
        log: read("images.log"),
        unguarded_status: read("unguarded.status").trim().parse().ok(),
        unguarded_log: read("unguarded.log"),
        scratch,
    };
    assert!(
        out.status.success(),
        "the namespace script failed: {}\napplication: {}",
        String::from_utf8_lossy(&out.stderr),
        read_in(&run, "app.out")
    );
    run
}

fn read_in(run: &Run, name: &str) -> String {
    fs::read_to_string(run.scratch.path().join(name)).unwrap_or_default()
}

/// The machine, served to host processes, with the observer's record.
struct Served {
    sim: Sim,
    server: Server,
    seen: Arc<Mutex<Seen>>,
    _service: kfd_sim::remote::HostService,
}

fn serve(kill_after_pause: bool) -> Served {
    let sim = Sim::builtin(MACHINE, SimConfig::default()).expect("the simulated machine");
    let server = Server::new(&sim).expect("serve the machine");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let record = seen.clone();
    let observer = Arc::new(move |call: &RemoteCall<'_>| {
        let mut seen = record.lock().unwrap_or_else(PoisonError::into_inner);
        let op = match call.op {
            RemoteOp::Ioctl(request) if request == u64::from(kfd_sys::AMDKFD_IOC_CRIU_OP) => {
                criu_op(call.arg)
            }
            _ => None,
        };
        if let Some(op) = op {
            seen.criu_ops.push((call.pid, op));
            if op == kfd_sys::KFD_CRIU_OP_PROCESS_INFO {
                seen.paused_by = Some(call.pid);
                return Verdict::Run;
            }
            if op == kfd_sys::KFD_CRIU_OP_UNPAUSE
                && seen.paused_by.is_some_and(|p| p != call.pid)
                && seen.foreign_unpause.is_none()
            {
                seen.foreign_unpause = Some((call.pid, Instant::now()));
            }
        }
        if kill_after_pause && seen.killed.is_none() && seen.paused_by == Some(call.pid) {
            seen.killed = Some((call.pid, Instant::now()));
            return Verdict::Kill;
        }
        Verdict::Run
    });
    let service = server
        .serve_host_processes(observer)
        .expect("serve host processes");
    Served {
        sim,
        server,
        seen,
        _service: service,
    }
}

fn render_minor(sim: &Sim) -> u32 {
    let gpus = sim.gpus();
    assert_eq!(gpus.len(), 1, "{MACHINE} has one GPU");
    gpus[0].render_minor
}

/// Runs the namespace script in `mode` once per vendored CRIU release, each
/// against a machine of its own (`kill_after_pause`: see [`serve`]), and
/// `check`s what it did.
fn for_each_release(kill_after_pause: bool, mode: &str, check: impl Fn(&Setup, &Served, &Run)) {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&harness::RELEASES) else {
        return;
    };
    for (release, criu) in &setup.criu {
        println!("CRIU {}:", release.name);
        let served = serve(kill_after_pause);
        let run = run(
            &setup,
            Some(criu),
            served.server.address(),
            render_minor(&served.sim),
            mode,
        );
        check(&setup, &served, &run);
    }
}

#[test]
fn criu_killed_after_the_pause_leaves_the_application_to_the_guardian() {
    for_each_release(true, "kill", |_, served, run| {
        let app = run.app();
        let seen = served.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let (criu, killed_at) = seen
            .killed
            .unwrap_or_else(|| panic!("CRIU never paused the application:\n{}", run.log));
        drop(seen);
        assert_eq!(
            run.status,
            Some(128 + libc::SIGKILL),
            "CRIU (pid {}) was killed:\n{}",
            criu.0,
            run.log
        );
        assert!(
            run.log.contains(&format!("pid {app} paused")),
            "the plugin paused the application:\n{}",
            run.log
        );
        assert!(
            run.log.contains(&format!("pid {app} guarded by pid")),
            "the plugin armed the guardian:\n{}",
            run.log
        );
        // The guardian unpauses the application and says so.
        let running = wait_for(Duration::from_secs(20), || {
            served
                .sim
                .kfd_state(Pid(app))
                .is_some_and(|s| !s.queues_paused && s.queues_running())
        });
        let kill_to_running = killed_at.elapsed();
        let state = served.sim.kfd_state(Pid(app));
        let log_path = run.images().join(format!("amdgpu-guardian-{app}.log"));
        assert!(
        running,
        "the application's queues stay paused after CRIU's death: {state:?}\nthe guardian's log: {:?}\nCRIU's log:\n{}",
        fs::read_to_string(&log_path),
        run.log
    );
        let seen = served.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let (guardian, unpaused_at) = seen
            .foreign_unpause
            .expect("another process than CRIU unpaused the application");
        drop(seen);
        println!(
            "kill to UNPAUSE issued: {:?}; kill to queues seen running: at most {:?}",
            unpaused_at.duration_since(killed_at),
            kill_to_running
        );
        let mut log = String::new();
        wait_for(Duration::from_secs(10), || {
            log = fs::read_to_string(&log_path).unwrap_or_default();
            log.contains("unpaused")
        });
        assert!(
            log.contains(&format!(
                "the dumper (pid {}) ended before the dump of pid {app} finished",
                criu.0
            )) && log.contains(&format!("pid {app}: GPU queues unpaused")),
            "the guardian (pid {}) logs what it did in {}:\n{log}",
            guardian.0,
            log_path.display()
        );
        // The application's CPU work goes on, and its state is whole.
        run.assert_runs_on("after CRIU's death");
        let state = served
            .sim
            .kfd_state(Pid(app))
            .expect("the application's KFD process");
        assert_eq!((state.queues, state.bos > 0), (1, true), "{state:?}");
        assert!(
            wait_for(Duration::from_secs(10), || !Path::new(&format!(
                "/proc/{}",
                guardian.0
            ))
            .exists()),
            "the guardian (pid {}) exits after its work",
            guardian.0
        );
    });
}

/// The guardian's pid if the plugin armed one for `app` (its log line).
fn guardian_of(log: &str, app: u32) -> Option<u32> {
    log.lines().find_map(|l| {
        l.split_once(&format!("pid {app} guarded by pid "))?
            .1
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn criu_dumps_with_the_guardian_armed_as_without_it() {
    for_each_release(false, "compare", |setup, served, run| {
        let app = run.app();
        for (what, status, log) in [
            (
                "without the guardian",
                run.unguarded_status,
                &run.unguarded_log,
            ),
            ("with the guardian", run.status, &run.log),
        ] {
            assert_eq!(status, Some(0), "the dump {what} failed:\n{log}");
            assert!(
                log.contains(&format!("KFD state of pid {app} dumped")),
                "the plugin dumped the application's KFD state {what}:\n{log}"
            );
        }
        assert_eq!(
            guardian_of(&run.unguarded_log, app),
            None,
            "AMDGPU_PLUGIN_GUARDIAN=0 starts no guardian:\n{}",
            run.unguarded_log
        );
        let guardian = guardian_of(&run.log, app)
            .unwrap_or_else(|| panic!("the plugin armed no guardian:\n{}", run.log));
        let seen = served.seen.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(
            seen.foreign_unpause.is_none(),
            "only CRIU unpaused the application: {:?}",
            seen.criu_ops
        );
        drop(seen);
        let state = served
            .sim
            .kfd_state(Pid(app))
            .expect("the application's KFD process");
        assert!(
            !state.queues_paused && state.queues_running(),
            "the dumps leave the application running: {state:?}"
        );
        run.assert_runs_on("after the dumps");
        assert!(
            wait_for(Duration::from_secs(10), || !Path::new(&format!(
                "/proc/{guardian}"
            ))
            .exists()),
            "the guardian (pid {guardian}) exits at the dump's end"
        );
        assert!(
            !run.images()
                .join(format!("amdgpu-guardian-{app}.log"))
                .exists(),
            "a guardian that had nothing to do writes nothing"
        );
        // CRIU's behaviour and its own log as without the guardian (a child
        // CRIU did not make, a file or a signal it did not expect would show
        // as lines of their own).
        let with = run.criu_lines(&run.log, setup.plugins());
        let without = run.criu_lines(&run.unguarded_log, setup.plugins());
        let (only_with, only_without) = difference(&with, &without);
        assert!(
        only_with.is_empty() && only_without.is_empty(),
        "CRIU's log differs ({} lines with the guardian, {} without):\nonly with:\n{}\nonly without:\n{}",
        with.len(),
        without.len(),
        only_with.join("\n"),
        only_without.join("\n")
    );
        println!(
            "CRIU's own log: {} lines compared, the same with and without the guardian",
            with.len()
        );
    });
}

/// The served machine's rule for a host process, without CRIU: `CRIU_OP`
/// on the application's file (a copy taken with `pidfd_getfd`, so the
/// server must match it to the application's stand-in) is refused
/// (`EBADF`) to a process that does not trace it, and accepted from its
/// real ptrace parent, as the kernel does.
#[test]
fn served_host_processes_follow_the_hosts_ptrace_parent() {
    use kfd::{Driver, FdKind, HostDriver};
    use std::os::fd::AsFd;

    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[]) else {
        return;
    };
    let served = serve(false);
    let run = run(
        &setup,
        None,
        served.server.address(),
        render_minor(&served.sim),
        "app-only",
    );
    let app = run.app();
    // This process as a client of the machine, the application's KFD file
    // among its fds (its render node's stand-in has the same numbers).
    let me = kfd_sim::remote::RemoteDriver::connect_host(served.server.address())
        .expect("connect to the served machine");
    let pidfd = HostDriver
        .pidfd_open(app)
        .expect("pidfd of the application");
    let kfd_file = fs::read_dir(format!("/proc/{app}/fd"))
        .expect("the application's fds")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|fd| HostDriver.pidfd_getfd(pidfd.as_fd(), fd).ok())
        .find(|file| {
            me.fd_kind(file.as_fd()).ok()
                == Some(FdKind::CharDevice(kfd::DeviceNumber {
                    major: kfd_sim::KFD_MAJOR,
                    minor: 0,
                }))
        })
        .expect("the served machine knows one of the application's fds as its /dev/kfd");
    let target = kfd::Kfd::from_fd(me.clone(), kfd_file);
    match target.process_info() {
        Err(kfd::Error::Os { errno, .. }) => assert_eq!(
            errno,
            libc::EBADF,
            "CRIU_OP from a process that does not trace the file's owner"
        ),
        other => panic!("PROCESS_INFO of an untraced process: {other:?}"),
    }
    assert!(!served.sim.kfd_state(Pid(app)).unwrap().queues_paused);
    HostDriver.ptrace_seize(app).expect("seize the application");
    HostDriver
        .ptrace_interrupt(app, Duration::from_secs(10))
        .expect("stop the application");
    let info = target.process_info();
    let paused = served.sim.kfd_state(Pid(app)).unwrap().queues_paused;
    let unpaused = target.unpause();
    let running = served.sim.kfd_state(Pid(app)).unwrap();
    HostDriver.ptrace_detach(app).expect("detach");
    let info = info.expect("PROCESS_INFO from the application's ptrace parent");
    assert_eq!(info.pid, app, "PROCESS_INFO names the host pid");
    assert!(paused, "PROCESS_INFO paused the application's queues");
    unpaused.expect("UNPAUSE from the ptrace parent");
    assert!(
        !running.queues_paused && running.queues_running(),
        "{running:?}"
    );
    run.assert_runs_on("after the pause and unpause");
}
