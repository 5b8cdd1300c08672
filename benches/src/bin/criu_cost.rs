//! The plugin's cost inside real CRIU: criu-dev dumping and restoring a
//! small process tree (a shell with two `sleep` children, no GPU) with no
//! plugin, with this project's `amdgpu_plugin.so` and with upstream's C
//! plugin built from the same CRIU archive, the three alternating run by
//! run so drift in the machine's load hits them alike. Prints one
//! `name=value` line per figure: medians in ms, each plugin's median over
//! no plugin as a ratio, and the median of the per-round differences (the
//! time the plugin adds to one operation).
//!
//! ```text
//! bash ../shared/vendor/criu/build.sh head     # criu-dev
//! bash benches/criu/build-c-plugin.sh          # the C plugin
//! make                                         # our .so (release)
//! cargo run --release -p benches --bin criu_cost [-- ROUNDS]
//! ```
//!
//! Needs root. Binaries: `$CRIU_BUILDS/head/criu` and
//! `$CRIU_BUILDS/c-plugin/amdgpu_plugin.so` (default `~/.cache/criu-builds`),
//! our `.so` from `$AMDGPU_PLUGIN_SO` or `target/release`. Scratch
//! directories are removed and every process started is killed.

#![forbid(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// One plugin directory the runs alternate over.
struct Config {
    name: &'static str,
    plugins: tempfile::TempDir,
    dump_ms: Vec<f64>,
    restore_ms: Vec<f64>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("benches sits in the workspace")
        .to_path_buf()
}

fn builds() -> PathBuf {
    std::env::var_os("CRIU_BUILDS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/criu-builds")))
        .unwrap_or_default()
}

fn our_plugin() -> PathBuf {
    std::env::var_os("AMDGPU_PLUGIN_SO")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_root().join("target"));
            target.join("release/libcriu_plugin_amdgpu.so")
        })
}

/// The tree: a session leader shell with two sleeping children.
struct Tree {
    child: Option<Child>,
    pids: Vec<u32>,
}

impl Tree {
    fn start() -> Result<Tree, String> {
        let child = Command::new("setsid")
            .args(["sh", "-c", "sleep 100000 & sleep 100000 & wait"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting the tree: {e}"))?;
        let root = child.id();
        let mut tree = Tree {
            child: Some(child),
            pids: vec![root],
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let children = fs::read_to_string(format!("/proc/{root}/task/{root}/children"))
                .unwrap_or_default();
            let children: Vec<u32> = children
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if children.len() == 2 {
                tree.pids.extend(children);
                return Ok(tree);
            }
            if Instant::now() > deadline {
                return Err("the tree did not start".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Reaps the root and waits until init reaped its children, so the
    /// restore finds every pid free.
    fn reap(&mut self) {
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
            std::thread::sleep(Duration::from_millis(2));
        }
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

fn criu(criu: &Path, plugins: &Path, args: &[&str], log: &str) -> Result<f64, String> {
    let start = Instant::now();
    let out = Command::new(criu)
        .args(args)
        .args(["-o", log])
        .arg("-L")
        .arg(plugins)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {}: {e}", criu.display()))?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    if !out.status.success() {
        let log = std::fs::read_to_string(log).unwrap_or_default();
        let errors: Vec<&str> = log.lines().filter(|l| l.contains("Error (")).collect();
        return Err(format!(
            "criu {} failed: {}{}",
            args[0],
            String::from_utf8_lossy(&out.stderr),
            errors.join("\n")
        ));
    }
    Ok(ms)
}

/// One dump and restore of a fresh tree with `config`'s plugin directory.
fn round(criu_bin: &Path, config: &mut Config) -> Result<(), String> {
    let scratch = tempfile::tempdir().map_err(|e| format!("scratch directory: {e}"))?;
    let images = scratch.path().to_str().ok_or("non-UTF-8 scratch path")?;
    let mut tree = Tree::start()?;
    let root = tree.pids[0].to_string();
    let log = format!("{images}/dump.log");
    let dump = criu(
        criu_bin,
        config.plugins.path(),
        &["dump", "-t", &root, "-D", images],
        &log,
    )?;
    tree.reap();
    let log = format!("{images}/restore.log");
    let restore = criu(
        criu_bin,
        config.plugins.path(),
        &["restore", "-d", "-D", images],
        &log,
    )?;
    // The restored tree has the same pids; `tree` kills it on drop.
    drop(tree);
    config.dump_ms.push(dump);
    config.restore_ms.push(restore);
    Ok(())
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn plugin_dir(so: Option<&Path>) -> Result<tempfile::TempDir, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("plugin directory: {e}"))?;
    if let Some(so) = so {
        fs::copy(so, dir.path().join("amdgpu_plugin.so"))
            .map_err(|e| format!("copying {}: {e}", so.display()))?;
    }
    Ok(dir)
}

fn run() -> Result<(), String> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .map_err(|_| format!("ROUNDS must be a number, not {n:?}"))?,
        None => 30,
    };
    let builds = builds();
    let criu_bin = builds.join("head/criu");
    let c_plugin = builds.join("c-plugin/amdgpu_plugin.so");
    let ours = our_plugin();
    for (what, path, how) in [
        (
            "criu-dev",
            &criu_bin,
            "bash ../shared/vendor/criu/build.sh head",
        ),
        (
            "the C plugin",
            &c_plugin,
            "bash benches/criu/build-c-plugin.sh",
        ),
        ("this project's plugin", &ours, "make"),
    ] {
        if !path.is_file() {
            return Err(format!("no {what} at {} (run `{how}`)", path.display()));
        }
    }
    let mut configs = vec![
        Config {
            name: "none",
            plugins: plugin_dir(None)?,
            dump_ms: Vec::new(),
            restore_ms: Vec::new(),
        },
        Config {
            name: "rust",
            plugins: plugin_dir(Some(&ours))?,
            dump_ms: Vec::new(),
            restore_ms: Vec::new(),
        },
        Config {
            name: "c",
            plugins: plugin_dir(Some(&c_plugin))?,
            dump_ms: Vec::new(),
            restore_ms: Vec::new(),
        },
    ];
    // One warm-up round each (page cache, kdat cache), not counted.
    for config in &mut configs {
        round(&criu_bin, config)?;
        config.dump_ms.clear();
        config.restore_ms.clear();
    }
    for r in 0..rounds {
        // Rotate the order so no configuration always runs first.
        for k in 0..configs.len() {
            let i = (r + k) % configs.len();
            round(&criu_bin, &mut configs[i])?;
        }
        eprintln!("criu_cost: round {}/{rounds}", r + 1);
    }
    println!("criu_cost_rounds={rounds}");
    let (none_dump, none_restore) = (median(&configs[0].dump_ms), median(&configs[0].restore_ms));
    for config in &configs {
        let (dump, restore) = (median(&config.dump_ms), median(&config.restore_ms));
        println!("criu_cost_{}_dump_ms={dump:.2}", config.name);
        println!("criu_cost_{}_restore_ms={restore:.2}", config.name);
        if config.name == "none" {
            continue;
        }
        println!(
            "criu_cost_{}_dump_ratio={:.3}",
            config.name,
            dump / none_dump
        );
        println!(
            "criu_cost_{}_restore_ratio={:.3}",
            config.name,
            restore / none_restore
        );
        // Paired by round: the plugin's share of each operation.
        let added = |ours: &[f64], base: &[f64]| {
            let diffs: Vec<f64> = ours.iter().zip(base).map(|(a, b)| a - b).collect();
            median(&diffs)
        };
        println!(
            "criu_cost_{}_dump_added_ms={:.2}",
            config.name,
            added(&config.dump_ms, &configs[0].dump_ms)
        );
        println!(
            "criu_cost_{}_restore_added_ms={:.2}",
            config.name,
            added(&config.restore_ms, &configs[0].restore_ms)
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("criu_cost: {e}");
            ExitCode::FAILURE
        }
    }
}
