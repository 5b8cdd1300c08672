//! The harness of the workspace's real-CRIU tests and benchmarks
//! (`criu-plugin-amdgpu/tests/real_criu.rs` and `real_criu_incremental.rs`,
//! kfd-sim-preload's real-CRIU and container tests, `benches`'
//! `real_criu_peer`): the CRIU builds of `build.sh`, the shipped plugin
//! installed as users get it, the workload tree, and CRIU runs with their
//! logs; and [`driver`], a simulated machine served to real CRIU with the
//! application of `c/app.c` dumped and restored on it and checked. See
//! `criu-plugin-amdgpu/tests/real_criu.rs` for what the tests need and how
//! they skip.

pub mod driver;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// CRIU runs are serialised: parallel dumps would compete for pids and for
/// the two cores CI has.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// A CRIU build, the hooks its `CR_PLUGIN_HOOK__MAX` offers and the script
/// that builds it.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    /// The build's directory under the builds directory (`head`, `v4.2`, ...).
    pub name: &'static str,
    /// `CR_PLUGIN_HOOK__MAX` of the release: how many hooks it offers a plugin.
    pub hooks: u32,
    /// The script that builds it.
    pub built_by: &'static str,
}

const BUILD_SH: &str = "../shared/vendor/criu/build.sh";

/// The CRIU releases the tests run, newest first.
pub const RELEASES: [Release; 4] = [
    Release {
        name: "head",
        hooks: 15,
        built_by: BUILD_SH,
    },
    Release {
        name: "v4.2",
        hooks: 13,
        built_by: BUILD_SH,
    },
    Release {
        name: "v4.1.1",
        hooks: 12,
        built_by: BUILD_SH,
    },
    Release {
        name: "v3.19",
        hooks: 10,
        built_by: BUILD_SH,
    },
];

/// criu-dev, the newest release.
pub const HEAD: Release = RELEASES[0];

/// criu-dev with CRIU's plugin hook changes of 2026 (criu#3105's pid -1
/// calls, 66fe7a1dd's broadcast hooks), built by
/// `.ci/build-criu-2026-hooks.sh`.
pub const HEAD_2026_HOOKS: Release = Release {
    name: "head-2026-hooks",
    hooks: 15,
    built_by: ".ci/build-criu-2026-hooks.sh",
};

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate sits in the workspace root")
        .to_path_buf()
}

/// Says why the test cannot run: a skip, or a failure under CI.
pub fn unavailable(why: &str) -> Option<Setup> {
    test_env::skip(format!("real CRIU tests cannot run: {why}"));
    None
}

/// What every test needs: the builds, the shipped `.so` in a plugin
/// directory, the workload script.
pub struct Setup {
    /// The directory of the CRIU builds (`CRIU_BUILDS`).
    pub builds: PathBuf,
    /// A staged `make install` of the shipped plugin.
    pub plugins: tempfile::TempDir,
    /// The workload tree's script (`criu-plugin-amdgpu/tests/real_criu/workload.py`).
    pub workload: PathBuf,
}

impl Setup {
    /// The `criu` binary of `release`.
    pub fn criu(&self, release: Release) -> PathBuf {
        self.builds.join(release.name).join("criu")
    }

    /// The image streamer's binary.
    pub fn streamer(&self) -> PathBuf {
        self.builds.join("streamer/criu-image-streamer")
    }

    /// The plugin directory (`criu -L`): `$(PREFIX)/lib/criu` of a staged
    /// `make install`.
    pub fn plugin_dir(&self) -> PathBuf {
        self.plugins.path().join("usr/lib/criu")
    }
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Whether `program arg` runs and exits with status 0.
pub fn runs(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The newest modification time under `dir`.
pub fn newest(dir: &Path) -> SystemTime {
    let mut latest = SystemTime::UNIX_EPOCH;
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let time = if path.is_dir() {
            newest(&path)
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        latest = latest.max(time);
    }
    latest
}

/// The `.so` `make` built, or why there is none to test.
pub fn shipped_plugin() -> Result<PathBuf, String> {
    plugin_build(&["release"], "run `make` again")
}

/// The plugin `.so` given by `AMDGPU_PLUGIN_SO`, or else the newest of the
/// builds in `profiles` of this test's target directory, refused when older
/// than the sources it is built from (`rebuild` says how to fix that).
pub fn plugin_build(profiles: &[&str], rebuild: &str) -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("AMDGPU_PLUGIN_SO") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "AMDGPU_PLUGIN_SO={} does not exist",
                path.display()
            ))
        };
    }
    // <target>/<profile>/deps/<test>-<hash>
    let exe = std::env::current_exe().map_err(|e| format!("no test executable path: {e}"))?;
    let target = exe
        .ancestors()
        .nth(3)
        .ok_or("the test executable is not in <target>/<profile>/deps")?;
    let (built, so) = profiles
        .iter()
        .map(|p| target.join(p).join("libcriu_plugin_amdgpu.so"))
        .filter_map(|so| Some((fs::metadata(&so).ok()?.modified().ok()?, so)))
        .max_by_key(|(t, _)| *t)
        .ok_or_else(|| {
            format!(
                "no libcriu_plugin_amdgpu.so in {}/{{{}}}: run `make` first",
                target.display(),
                profiles.join(",")
            )
        })?;
    let root = workspace_root();
    for krate in [
        "criu-plugin-amdgpu",
        "amdgpu-checkpoint",
        "amdgpu-image",
        "amdgpu-topology",
        "kfd",
        "kfd-sys",
    ] {
        if newest(&root.join(krate).join("src")) > built {
            return Err(format!(
                "{} is older than the sources of {krate}: {rebuild}",
                so.display()
            ));
        }
    }
    Ok(so)
}

/// Where `build.sh` put its CRIU builds ([`test_env::criu_builds`]).
pub fn builds_dir() -> PathBuf {
    test_env::criu_builds()
}

/// The CRIU binary of `release` in `builds`, refused when it is missing or
/// when `criu check` fails on this machine.
pub fn criu_build(builds: &Path, release: Release) -> Result<PathBuf, String> {
    let criu = builds.join(release.name).join("criu");
    if !criu.is_file() {
        return Err(format!(
            "no CRIU {} at {} (run {} and set CRIU_BUILDS)",
            release.name,
            criu.display(),
            release.built_by
        ));
    }
    let check = Command::new(&criu)
        .arg("check")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", criu.display()))?;
    if !check.status.success() {
        return Err(format!(
            "`{} check` fails on this machine: {}",
            criu.display(),
            String::from_utf8_lossy(&check.stderr).trim()
        ));
    }
    Ok(criu)
}

/// What the tests need for `releases`, or `None` after saying (through
/// `test_env::skip`) why they cannot run.
pub fn setup(releases: &[Release]) -> Option<Setup> {
    if !is_root() {
        return unavailable("CRIU needs root");
    }
    if !runs("unshare", "--version") {
        return unavailable("unshare (util-linux) is not installed");
    }
    if !runs("python3", "--version") {
        return unavailable("python3 (the workload) is not installed");
    }
    let builds = builds_dir();
    let setup_plugins = match shipped_plugin() {
        Ok(so) => so,
        Err(why) => return unavailable(&why),
    };
    let plugins = tempfile::tempdir().expect("plugin directory");
    if std::env::var_os("AMDGPU_PLUGIN_SO").is_some() {
        let dir = plugins.path().join("usr/lib/criu");
        fs::create_dir_all(&dir).expect("plugin directory");
        fs::copy(&setup_plugins, dir.join("amdgpu_plugin.so")).expect("copy the .so");
    } else {
        // Installed as users get it: `make install`, stripped.
        let build_dir = setup_plugins.parent().expect("the .so's directory");
        let out = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(workspace_root())
            .arg("install")
            .arg(format!("DESTDIR={}", plugins.path().display()))
            .arg("PREFIX=/usr")
            .arg(format!("BUILD_DIR={}", build_dir.display()))
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "make install of the shipped plugin failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => return unavailable(&format!("make cannot run: {e}")),
        }
    }
    let setup = Setup {
        builds,
        plugins,
        workload: workspace_root().join("criu-plugin-amdgpu/tests/real_criu/workload.py"),
    };
    for release in releases {
        if let Err(why) = criu_build(&setup.builds, *release) {
            return unavailable(&why);
        }
    }
    Some(setup)
}

/// The pids of a tree, killed on drop (the original tree, its restored
/// copy, or both).
pub struct Tree {
    /// The tree's scratch directory: its logs and its `pids` file.
    pub scratch: PathBuf,
    /// The root process while this harness is its parent.
    pub child: Option<Child>,
    /// The tree's pids, the root's first.
    pub pids: Vec<u32>,
}

impl Tree {
    /// Starts the workload and waits until it beats.
    pub fn start(setup: &Setup, scratch: &Path, device: Option<&Path>) -> Tree {
        let mut cmd = Command::new("python3");
        cmd.arg(&setup.workload)
            .arg(scratch)
            .args(device)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().expect("start the workload");
        let mut tree = Tree {
            scratch: scratch.to_path_buf(),
            child: Some(child),
            pids: Vec::new(),
        };
        tree.wait_for_pids();
        tree
    }

    /// A tree started by someone else (a script), known by its pids file.
    pub fn adopt(scratch: &Path) -> Tree {
        let mut tree = Tree {
            scratch: scratch.to_path_buf(),
            child: None,
            pids: Vec::new(),
        };
        tree.wait_for_pids();
        tree
    }

    /// Waits (20 s at most) until the tree wrote its three pids and beat twice.
    pub fn wait_for_pids(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(text) = fs::read_to_string(self.scratch.join("pids")) {
                let pids: Vec<u32> = text
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect();
                if pids.len() == 3 && beats(&self.scratch) >= 2 {
                    self.pids = pids;
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the workload did not start (see {})",
                self.scratch.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The root's pid.
    pub fn root(&self) -> u32 {
        self.pids[0]
    }

    /// Reaps the original root after CRIU killed it and waits until its
    /// children are gone too (init reaps them), so every pid is free for
    /// the restore.
    pub fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && self
                .pids
                .iter()
                .any(|pid| Path::new(&format!("/proc/{pid}")).exists())
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Asserts every process of the tree is alive and working: the root's
    /// fd checks go on passing and each child goes on counting.
    pub fn assert_runs_on(&self, what: &str) {
        let before: Vec<usize> = LOGS.iter().map(|f| lines(&self.scratch, f)).collect();
        std::thread::sleep(Duration::from_millis(400));
        for pid in &self.pids {
            let state = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = state.rsplit(") ").next().unwrap_or("").chars().next();
            assert!(
                matches!(state, Some('S' | 'R')),
                "{what}: process {pid} of the tree is not running ({state:?})"
            );
        }
        for (file, was) in LOGS.iter().zip(before) {
            let now = lines(&self.scratch, file);
            assert!(
                now > was,
                "{what}: {file} stopped growing ({was} -> {now} lines)"
            );
        }
        let heartbeat = fs::read_to_string(self.scratch.join("heartbeat")).unwrap_or_default();
        assert!(
            !heartbeat.contains("FAIL"),
            "{what}: an fd of the tree stopped working: {}",
            heartbeat.lines().last().unwrap_or("")
        );
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for pid in &self.pids {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        self.reap();
    }
}

/// The log files the tree's processes append to.
pub const LOGS: [&str; 3] = ["heartbeat", "child1", "child2"];

/// How many lines `file` of `scratch` holds (0 when it is missing).
pub fn lines(scratch: &Path, file: &str) -> usize {
    fs::read_to_string(scratch.join(file)).map_or(0, |t| t.lines().count())
}

/// How many heartbeats the tree's root logged.
pub fn beats(scratch: &Path) -> usize {
    lines(scratch, "heartbeat")
}

/// One CRIU run's result and log.
pub struct Run {
    /// The exit status and output of `criu`.
    pub output: Output,
    /// CRIU's log file, read after the run.
    pub log: String,
}

impl Run {
    /// Whether CRIU exited with status 0.
    pub fn ok(&self) -> bool {
        self.output.status.success()
    }

    /// The status, standard error and log, for a failure message.
    pub fn describe(&self) -> String {
        format!(
            "status {:?}\nstderr:\n{}\nlog:\n{}",
            self.output.status,
            String::from_utf8_lossy(&self.output.stderr),
            self.log
        )
    }

    /// Panics with the run's description unless it succeeded.
    pub fn assert_ok(&self, what: &str) {
        assert!(self.ok(), "{what} failed: {}", self.describe());
    }

    /// The plugin's lines (CRIU's timestamp stripped).
    pub fn plugin_lines(&self) -> Vec<&str> {
        self.log
            .lines()
            .filter(|l| l.contains("amdgpu_plugin: "))
            .collect()
    }

    /// CRIU's own lines at error level (`pr_err`), the plugin's excluded.
    pub fn criu_errors(&self) -> Vec<&str> {
        self.log
            .lines()
            .filter(|l| l.contains("Error (") && !l.contains("amdgpu_plugin: "))
            .collect()
    }

    /// Asserts CRIU loaded the plugin with `hooks` hooks and the plugin said
    /// at most two things, none of them an error or warning.
    pub fn assert_quiet_plugin(&self, release: Release, what: &str) {
        let loaded = format!(
            "Plugin \"amdgpu_plugin\" (version 512 hooks {})",
            release.hooks
        );
        assert!(
            self.log.contains(&loaded),
            "{what} on CRIU {}: no {loaded:?} line:\n{}",
            release.name,
            self.log
        );
        let lines = self.plugin_lines();
        assert!(
            !lines.is_empty() && lines.len() <= 2,
            "{what} on CRIU {}: a machine without GPUs hears one or two plugin lines, not {}:\n{}",
            release.name,
            lines.len(),
            lines.join("\n")
        );
        for line in &lines {
            assert!(
                !line.contains("Error (") && !line.contains("Warn  (") && !line.contains("_CHECK"),
                "{what} on CRIU {}: {line}",
                release.name
            );
        }
    }
}

/// Runs `criu ARGS` of `release` at log level 4 into `log`, with the
/// plugin directory of `setup`.
pub fn criu(setup: &Setup, release: Release, log: &Path, args: &[&str]) -> Run {
    let output = Command::new(setup.criu(release))
        .args(args)
        .arg("-v4")
        .arg("-o")
        .arg(log)
        .arg("-L")
        .arg(setup.plugin_dir())
        .env_remove("AMDGPU_PLUGIN_MAX_HOOKS")
        .stdin(Stdio::null())
        .output()
        .expect("run criu");
    Run {
        output,
        log: fs::read_to_string(log).unwrap_or_default(),
    }
}

/// A scratch directory with `images/` in it.
pub fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("scratch directory");
    fs::create_dir(dir.path().join("images")).unwrap();
    dir
}

/// `p` as text (the tests' paths are UTF-8).
pub fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

pub mod inventory {
    //! CRIU's `inventory.img`: `INVENTORY_MAGIC`, then one protobuf entry
    //! framed by its u32 length. Only `plugins_entry` (field 12) is
    //! interpreted; every other field is kept byte for byte.

    use prost::Message;

    const INVENTORY_MAGIC: u32 = 0x5831_3116;
    const PLUGINS_ENTRY: u64 = 12;

    #[derive(Clone, PartialEq, Message)]
    struct PluginsEntry {
        #[prost(string, repeated, tag = "12")]
        plugins: Vec<String>,
    }

    /// The fields of the entry as (field number, raw bytes of the field).
    fn fields(mut msg: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        while !msg.is_empty() {
            let start = msg;
            let key = prost::encoding::decode_varint(&mut msg).expect("field key");
            let len = match key & 7 {
                0 => {
                    prost::encoding::decode_varint(&mut msg).expect("varint");
                    0
                }
                1 => 8,
                2 => prost::encoding::decode_varint(&mut msg).expect("length") as usize,
                5 => 4,
                wire => panic!("wire type {wire} in the inventory"),
            };
            msg = &msg[len..];
            let used = start.len() - msg.len();
            out.push((key >> 3, start[..used].to_vec()));
        }
        out
    }

    fn entry(image: &[u8]) -> &[u8] {
        assert_eq!(
            u32::from_le_bytes(image[..4].try_into().unwrap()),
            INVENTORY_MAGIC,
            "inventory magic"
        );
        let len = u32::from_le_bytes(image[4..8].try_into().unwrap()) as usize;
        &image[8..8 + len]
    }

    /// The plugin list, `None` when the inventory has none (CRIU < 4.1).
    pub fn plugins(image: &[u8]) -> Option<Vec<String>> {
        fields(entry(image))
            .into_iter()
            .filter(|(n, _)| *n == PLUGINS_ENTRY)
            .map(|(_, raw)| {
                let mut raw = &raw[1..];
                let len = prost::encoding::decode_varint(&mut raw).unwrap() as usize;
                PluginsEntry::decode(&raw[..len])
                    .expect("plugins_entry")
                    .plugins
            })
            .reduce(|mut a, b| {
                a.extend(b);
                a
            })
    }

    /// The image with its plugin list replaced by `plugins`.
    pub fn with_plugins(image: &[u8], plugins: &[&str]) -> Vec<u8> {
        let mut msg = Vec::new();
        for (number, raw) in fields(entry(image)) {
            if number != PLUGINS_ENTRY {
                msg.extend_from_slice(&raw);
            }
        }
        let list = PluginsEntry {
            plugins: plugins.iter().map(|p| (*p).to_owned()).collect(),
        };
        prost::encoding::message::encode(PLUGINS_ENTRY as u32, &list, &mut msg);
        let mut out = image[..4].to_vec();
        out.extend_from_slice(&(msg.len() as u32).to_le_bytes());
        out.extend_from_slice(&msg);
        out
    }
}
