//! What the `sim` tests share: the built tool run with a registry of the
//! test's own, the test programs compiled, their output read, the CRIU
//! builds, and the checks that nothing is left behind.

#![allow(dead_code)] // each test uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// One simulated machine at a time: CRIU runs compete for pids and for
/// the two cores CI has.
static SERIAL: Mutex<()> = Mutex::new(());

/// A CRIU build of `build.sh` / `make criu` and the plugin hooks it has.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    pub name: &'static str,
}

/// criu-dev first: the release every CRIU test runs on.
pub const RELEASES: [Release; 4] = [
    Release { name: "head" },
    Release { name: "v4.2" },
    Release { name: "v4.1.1" },
    Release { name: "v3.19" },
];

/// Says why the test cannot run: a skip, or a failure under CI.
pub fn skip(why: &str) {
    test_env::skip(format!("the sim tests cannot run: {why}"));
}

/// `$CRIU_BUILDS`, else `~/.cache/criu-builds`.
pub fn builds_dir() -> PathBuf {
    std::env::var_os("CRIU_BUILDS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/criu-builds")))
        .unwrap_or_default()
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// A test's world: its registry of machines, a scratch directory (the
/// programs, their output, the images), and the tool.
pub struct World {
    pub registry: tempfile::TempDir,
    pub scratch: tempfile::TempDir,
    _serial: MutexGuard<'static, ()>,
}

/// The test programs' sources, in this crate.
fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sim")
        .join(name)
}

impl World {
    /// A new world, or `None` after saying why the machine cannot run the
    /// tests (root is asked for by the tests that run CRIU).
    pub fn new(needs_root: bool) -> Option<World> {
        let serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        if needs_root && !is_root() {
            skip("CRIU needs root");
            return None;
        }
        for (header, package) in [
            ("/usr/include/hsakmt.h", "libhsakmt-dev"),
            ("/usr/include/hsa/hsa.h", "libhsa-runtime-dev"),
        ] {
            if !Path::new(header).is_file() {
                skip(&format!("{package} is not installed ({header} is missing)"));
                return None;
            }
        }
        if Command::new("cc").arg("--version").output().is_err() {
            skip("no C compiler (cc)");
            return None;
        }
        let scratch = tempfile::Builder::new()
            .prefix("amdgpu-criu-sim-test")
            .tempdir()
            .expect("a scratch directory");
        let registry = tempfile::Builder::new()
            .prefix("amdgpu-criu-sim-registry")
            .tempdir()
            .expect("a registry directory");
        for dir in [scratch.path(), registry.path()] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        Some(World {
            registry,
            scratch,
            _serial: serial,
        })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    /// `tests/sim/NAME.c` compiled with `libs`, in the scratch directory.
    pub fn program(&self, name: &str, libs: &[&str]) -> PathBuf {
        let out = self.path(name);
        let built = Command::new("cc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&out)
            .arg(source(&format!("{name}.c")))
            .args(libs)
            .output()
            .expect("run cc");
        assert!(
            built.status.success(),
            "cc {name}.c: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        out
    }

    /// The libhsakmt program.
    pub fn hsakmt_app(&self) -> PathBuf {
        self.program("hsakmt_app", &["-lhsakmt"])
    }

    /// The ROCr program.
    pub fn rocr_app(&self) -> PathBuf {
        self.program("rocr_app", &["-lhsa-runtime64"])
    }

    /// `amdgpu-criu ARGS` with this world's registry.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"));
        c.args(args)
            .env("AMDGPU_CRIU_SIM_DIR", self.registry.path())
            .env_remove("KFD_DEVICE_MAP")
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null());
        c
    }

    /// `amdgpu-criu ARGS`, run to its end.
    pub fn sim(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run amdgpu-criu")
    }

    /// `sim SUBCOMMAND --json ARGS`, which must succeed: its JSON.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all: Vec<&str> = args.to_vec();
        all.insert(2.min(all.len()), "--json");
        let out = self.sim(&all);
        assert!(
            out.status.success(),
            "amdgpu-criu {all:?}: {}\n{}",
            out.status,
            text(&out)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("amdgpu-criu {all:?}: {e}: {}", text(&out)))
    }

    /// Starts `program args` in the background on `machine`, its output in
    /// `output`; its pid once it printed `ready` lines for `processes`
    /// processes, with those lines (the root's first).
    pub fn start(
        &self,
        machine: &str,
        output: &Path,
        program: &Path,
        args: &[&str],
        processes: usize,
    ) -> (u32, Vec<Line>) {
        let mut all = vec![
            "sim",
            "run",
            "--background",
            "--machine",
            machine,
            "--output",
            output.to_str().unwrap(),
            "--",
            program.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        let started = self.json(&all);
        let pid = started["pid"].as_u64().expect("a pid") as u32;
        assert_eq!(started["machine"], machine, "{started}");
        let mut ready = wait_for_lines(output, "ready", processes);
        // The root first.
        let root = ready
            .iter()
            .position(|l| l.pid() == pid)
            .unwrap_or_else(|| panic!("pid {pid} is not ready: {ready:?}"));
        ready.swap(0, root);
        (pid, ready)
    }

    /// The machines `sim ps --json` lists.
    pub fn machines(&self) -> Vec<serde_json::Value> {
        self.json(&["sim", "ps"])["machines"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Stops every machine, then checks the registry holds nothing.
    pub fn stop_all(&self) {
        let out = self.sim(&["sim", "stop", "--all"]);
        assert!(out.status.success(), "sim stop --all: {}", text(&out));
        self.assert_nothing_left();
    }

    /// No machine and no directory of one is left in the registry (a
    /// machine whose processes ended may still be removing its own).
    pub fn assert_nothing_left(&self) {
        let left = || -> Vec<PathBuf> {
            std::fs::read_dir(self.registry.path())
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default()
        };
        assert!(
            wait_until(Duration::from_secs(30), || left().is_empty()),
            "the registry still holds {:?}",
            left()
        );
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.sim(&["sim", "stop", "--all"]);
    }
}

/// Standard output and error of a run.
pub fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// One `kind key=value ...` line of a test program.
#[derive(Debug, Clone)]
pub struct Line(pub String);

impl Line {
    pub fn field(&self, key: &str) -> Option<&str> {
        self.0
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    }

    pub fn pid(&self) -> u32 {
        self.field("pid")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {self:?}"))
    }
}

/// The lines of `output` starting with `kind`.
pub fn lines(output: &Path, kind: &str) -> Vec<Line> {
    std::fs::read_to_string(output)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(kind))
        .map(|l| Line(l.to_owned()))
        .collect()
}

/// Waits until `output` holds `count` lines of `kind` (a failed program's
/// `fail` line ends the wait with a panic).
pub fn wait_for_lines(output: &Path, kind: &str, count: usize) -> Vec<Line> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let found = lines(output, kind);
        if found.len() >= count {
            return found;
        }
        let failed = lines(output, "fail");
        assert!(
            failed.is_empty(),
            "the program failed: {failed:?}\n{}",
            std::fs::read_to_string(output).unwrap_or_default()
        );
        assert!(
            Instant::now() < deadline,
            "{} never printed {count} {kind} lines:\n{}",
            output.display(),
            std::fs::read_to_string(output).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `signal` to `pid`.
pub fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) takes integers; the pid is a process this test
    // started (or CRIU restored for it).
    let ret = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(ret, 0, "kill({pid}, {signal})");
}

/// Asks each of `pids` to check its state (SIGUSR1) and returns their
/// `check` lines.
pub fn check(output: &Path, pids: &[u32]) -> Vec<Line> {
    let before = lines(output, "check").len();
    for &pid in pids {
        signal(pid, libc::SIGUSR1);
    }
    let found = wait_for_lines(output, "check", before + pids.len());
    found[before..].to_vec()
}

/// Whether `pid` lives (a zombie does not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
        .unwrap_or(false)
}

/// The tracer of `pid` (`TracerPid`), 0 when none.
pub fn tracer(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Waits until `what` holds, at most `limit`.
pub fn wait_until(limit: Duration, mut what: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if what() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The CRIU of `release`, or why there is none (build.sh's builds, as
/// `.ci/run` makes them).
pub fn criu(release: Release) -> Result<PathBuf, String> {
    let criu = builds_dir().join(release.name).join("criu");
    if !criu.is_file() {
        return Err(format!(
            "no CRIU {} at {} (make criu, or ../shared/vendor/criu/build.sh, and CRIU_BUILDS)",
            release.name,
            criu.display()
        ));
    }
    Ok(criu)
}

/// The processes of the one machine `sim ps --json` lists, as JSON.
pub fn processes(machine: &serde_json::Value) -> Vec<serde_json::Value> {
    machine["processes"].as_array().cloned().unwrap_or_default()
}

/// `(seen, here)` gpu_id pairs of a process in `sim ps --json` or `sim
/// restore --json`.
pub fn gpu_map(process: &serde_json::Value) -> Vec<(u64, u64)> {
    process["gpu"]["gpus"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| (m["seen"].as_u64().unwrap(), m["local"].as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}
