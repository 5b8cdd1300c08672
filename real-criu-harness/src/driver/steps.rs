//! One run of real CRIU on the application: the mode it runs in, the dump and the restore.

use super::*;

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
    /// The run's setup.
    pub setup: &'a Setup,
    /// The plugin directory CRIU loads.
    pub plugins: &'a Path,
    /// The `criu` binary.
    pub criu: &'a Path,
    /// The machine the application runs on.
    pub served: &'a Served,
    /// How many of its GPUs the application uses.
    pub gpus: u32,
    /// MiB of VRAM the application fills on each GPU.
    pub mib: u64,
    /// Environment assignments for CRIU (`NAME=value ...`).
    pub env: &'a str,
    /// Whether the dump is incremental on a first, running one (`parent/`).
    pub parent: bool,
    /// Whether the application runs, and is restored, in a network
    /// namespace of its own.
    pub netns: bool,
    /// How the application runs.
    pub mode: AppMode,
    /// More arguments for `criu`.
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
