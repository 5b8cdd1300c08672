//! `sim checkpoint PID --dir DIR [--leave-running] [--criu PATH]`: real
//! CRIU dumps a program running on a simulated machine (PID and every
//! process below it), with this project's plugin doing the GPU half.
//!
//! Before CRIU runs, everything a dump needs is checked, each with what to
//! do: root; PID on a machine this user serves; GPU state in its tree
//! (a program that never opened `/dev/kfd` has nothing for the plugin);
//! no terminal among its standard streams; an images directory without a
//! checkpoint; a `criu` that works here; the plugins and the interposer.
//! CRIU then runs in the program's mount namespace (see
//! `kfd_sim_host::criu::dump_command`) while the machine is held up, so
//! the files the checkpoint needs from its `/dev/shm` can be kept with the
//! images. A failed dump leaves only CRIU's log in the directory (the
//! images it wrote are removed, so none looks complete) and says why,
//! CRIU's and the plugin's errors included; a program that ended during
//! the dump is named as such.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kfd_sim_host::companion::{self, REMOTE_PLUGIN};
use kfd_sim_host::criu::{dump_command, log_errors, DumpRequest, PluginDir, DUMP_LOG};
use kfd_sim_host::{Criu, Interposer};
use serde::{Deserialize, Serialize};

use super::control::{self, ServedProcess};
use super::registry::{self, MachineRecord};
use super::{procs, require_root, Failure};
use crate::out::{human_bytes, plural};
use crate::signals;

/// Arguments of `sim checkpoint`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  sudo amdgpu-criu sim checkpoint 4242 --dir ./ckpt
  sudo amdgpu-criu sim checkpoint 4242 --dir ./ckpt --leave-running
  sudo amdgpu-criu sim checkpoint 4242 --dir ./ckpt --criu ~/.cache/criu-builds/head/criu --json

Dumps PID and every process below it with `criu dump --link-remap`, this
project's amdgpu_plugin.so and the connection plugin kfd_sim_remote.so
(CRIU's log: DIR/dump.log). Without --leave-running CRIU ends the program,
and `sim restore --dir DIR` brings it back. Needs root, a program started
by root with `sim run`, and a CRIU: --criu, else `criu` on PATH, else the
builds of `make criu` in $CRIU_BUILDS (~/.cache/criu-builds), the first
that passes `criu check`.

Exit status: 0 checkpointed, 1 the checkpoint failed (CRIU or the plugin
refused, the program ended, it has no GPU state), 2 usage errors, 3 this
host cannot do it (root, CRIU, a library)")]
pub struct Args {
    /// The program: a pid `sim ps` lists (it and the processes below it
    /// are checkpointed).
    pub pid: u32,
    /// The images directory (created when missing; must not hold a
    /// checkpoint).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Leave the program running after the checkpoint (else CRIU ends it).
    #[arg(long)]
    pub leave_running: bool,
    /// The `criu` binary to run.
    #[arg(long, value_name = "PATH")]
    pub criu: Option<PathBuf>,
    /// Print one JSON object (`pid`, `machine`, `dir`, `processes`,
    /// `gpu_images`, `gpu_bytes`, `left_running`) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `sim checkpoint` keeps beside the images, for `sim restore`.
pub const RECORD: &str = "sim.json";

/// A checkpoint of `sim checkpoint`, as `DIR/sim.json` records it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// The machine it was taken on, as output names it.
    pub machine: String,
    /// That machine as named on the command line.
    pub spec: String,
    /// Renumbered with this seed.
    pub renumber: Option<u64>,
    /// The checkpointed root.
    pub pid: u32,
    /// Every checkpointed process, with its GPU state then.
    pub processes: Vec<ServedProcess>,
    /// Where the program's output went.
    pub output: Option<PathBuf>,
    /// Whether the program ran on.
    pub left_running: bool,
    /// The CRIU that took it.
    pub criu: PathBuf,
}

impl CheckpointRecord {
    /// The record of the checkpoint in `dir`.
    pub fn read(dir: &Path) -> Result<CheckpointRecord, Failure> {
        let path = dir.join(RECORD);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Failure::usage(format!(
                "{}: {e}: {} holds no checkpoint of `amdgpu-criu sim checkpoint` \
                 (a failed checkpoint leaves only CRIU's {DUMP_LOG})",
                path.display(),
                dir.display()
            ))
        })?;
        serde_json::from_str(&text)
            .map_err(|e| Failure::usage(format!("{}: damaged: {e}", path.display())))
    }
}

/// Runs `sim checkpoint`.
pub fn run(args: Args) -> ExitCode {
    let json = args.json;
    match execute(&args) {
        Ok(done) => {
            print(&done, json);
            ExitCode::SUCCESS
        }
        Err(failure) => failure.report("checkpoint", json),
    }
}

/// A checkpoint taken.
struct Done {
    record: CheckpointRecord,
    dir: PathBuf,
    gpu_images: usize,
    gpu_bytes: u64,
    criu_version: Option<String>,
}

fn print(done: &Done, json: bool) {
    let r = &done.record;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "ok": true,
                "pid": r.pid,
                "machine": r.machine,
                "dir": done.dir,
                "processes": r.processes,
                "gpu_images": done.gpu_images,
                "gpu_bytes": done.gpu_bytes,
                "left_running": r.left_running,
                "criu": r.criu,
                "criu_version": done.criu_version,
            })
        );
        return;
    }
    println!(
        "checkpointed pid {} ({}) on {} into {}",
        r.pid,
        plural(r.processes.len() as u64, "process"),
        r.machine,
        done.dir.display()
    );
    println!(
        "GPU state: {} of {} written by the plugin, {} of GPU memory",
        plural(done.gpu_images as u64, "image"),
        plural(
            r.processes.iter().filter(|p| p.gpu.is_some()).count() as u64,
            "process"
        ),
        human_bytes(done.gpu_bytes)
    );
    if r.left_running {
        println!("the program runs on");
    } else {
        println!(
            "the program was ended by CRIU; bring it back with: amdgpu-criu sim restore --dir {}",
            done.dir.display()
        );
    }
}

/// The machine serving `pid`, or why there is none.
fn machine_of(pid: u32) -> Result<MachineRecord, Failure> {
    if let Some(record) = registry::machines()
        .into_iter()
        .find(|r| pid != r.server_pid && procs::is_below(pid, r.server_pid))
    {
        return Ok(record);
    }
    let Some(info) = procs::info(pid) else {
        return Err(Failure::usage(format!("no process {pid}")));
    };
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    if environ
        .split(|&b| b == 0)
        .any(|v| v.starts_with(b"KFD_SIM_REMOTE="))
    {
        let uid = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|ids| ids.split_whitespace().next().map(str::to_owned))
            })
            .unwrap_or_else(|| "?".into());
        return Err(Failure::prerequisite(format!(
            "pid {pid} ({}) runs on a simulated machine served by another user (uid {uid}) or \
             by hand: CRIU can dump only programs on machines root serves; start it with \
             `sudo amdgpu-criu sim run --output FILE -- PROGRAM`",
            info.name
        )));
    }
    Err(Failure::usage(format!(
        "pid {pid} ({}) is not a program on a simulated machine (`amdgpu-criu sim ps` lists \
         them); start it with `sudo amdgpu-criu sim run --output FILE -- PROGRAM`",
        info.name
    )))
}

/// The image files of `dir` (names), to tell CRIU's from what was there.
fn listing(dir: &Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .collect()
}

/// The plugin's KFD images and the bytes of its pages files in `dir`.
fn gpu_images(dir: &Path) -> (usize, u64) {
    let mut images = 0;
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("amdgpu-kfd-") {
            images += 1;
        } else if name.starts_with("amdgpu-pages-") {
            bytes += entry.metadata().map_or(0, |m| m.len());
        }
    }
    (images, bytes)
}

fn execute(args: &Args) -> Result<Done, Failure> {
    let stops = signals::block(None).map_err(Failure::prerequisite)?;
    require_root("checkpoint")?;
    let machine = machine_of(args.pid)?;
    let status = control::status(&machine).map_err(|e| {
        Failure::prerequisite(format!(
            "the machine serving pid {} (pid {}) does not answer: {e}",
            args.pid, machine.server_pid
        ))
    })?;
    let tree: Vec<u32> = procs::tree(args.pid).iter().map(|p| p.pid).collect();
    let processes: Vec<ServedProcess> = status
        .processes
        .into_iter()
        .filter(|p| tree.contains(&p.pid))
        .collect();
    if !processes.iter().any(|p| p.gpu.is_some()) {
        let name = processes
            .first()
            .map_or_else(String::new, |p| format!(" ({})", p.name));
        return Err(Failure::failed(format!(
            "pid {}{name} holds no GPU state on {}: no process of it opened /dev/kfd, so \
             there is nothing for the GPU plugin to checkpoint (is it a ROCm program? \
             a plain process is checkpointed with criu alone)",
            args.pid, machine.machine
        )));
    }
    for p in &tree {
        if let Some((fd, target)) = procs::terminal_streams(*p).into_iter().next() {
            return Err(Failure::usage(format!(
                "pid {p} writes to a terminal (fd {fd} is {target}), which CRIU cannot \
                 checkpoint: start the program with --output FILE or --background"
            )));
        }
    }
    let criu = Criu::find(args.criu.as_deref()).map_err(Failure::prerequisite)?;
    let amdgpu_plugin = companion::amdgpu_plugin().map_err(Failure::prerequisite)?;
    let remote_plugin = REMOTE_PLUGIN.find().map_err(Failure::prerequisite)?;
    let interposer = Interposer::find().map_err(Failure::prerequisite)?;
    let dir = std::path::absolute(&args.dir)
        .map_err(|e| Failure::usage(format!("{}: {e}", args.dir.display())))?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::usage(format!("cannot create {}: {e}", dir.display())))?;
    if dir.join("inventory.img").exists() || dir.join(RECORD).exists() {
        return Err(Failure::usage(format!(
            "{} already holds a checkpoint: name another directory or remove it",
            dir.display()
        )));
    }

    let _hold = control::hold(&machine).map_err(|e| {
        Failure::prerequisite(format!(
            "cannot hold the machine serving pid {}: {e}",
            args.pid
        ))
    })?;
    let plugins = PluginDir::assemble(
        &machine
            .dir()
            .join(format!("plugins-{}", std::process::id())),
        &amdgpu_plugin,
        &remote_plugin,
    )
    .map_err(Failure::prerequisite)?;
    let before = listing(&dir);
    let mut command = dump_command(
        &criu,
        plugins.path(),
        &interposer,
        &machine.endpoint(),
        &DumpRequest {
            pid: args.pid,
            images: dir.clone(),
            leave_running: args.leave_running,
        },
    )
    .map_err(Failure::prerequisite)?;
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let child = command
        .spawn()
        .map_err(|e| Failure::prerequisite(format!("cannot run {}: {e}", criu.path.display())))?;
    let outcome = wait_for_criu(child, args.pid, &stops, args.json);
    let log = std::fs::read_to_string(dir.join(DUMP_LOG)).unwrap_or_default();
    let failed = |message: String| {
        remove_partial(&dir, &before);
        Failure::failed(message).with_details(log_errors(&log))
    };
    match outcome {
        CriuEnd::Stopped(signal) => {
            return Err(failed(format!(
                "stopped by {}: no checkpoint was written{}",
                signals::name(signal),
                if procs::info(args.pid).is_some() {
                    "; the program runs on"
                } else {
                    ""
                }
            )))
        }
        CriuEnd::Exited(code) if code != 0 => {
            let gone = procs::info(args.pid).is_none();
            return Err(failed(if gone {
                format!(
                    "pid {} ended during the checkpoint: no checkpoint was written \
                     (CRIU exited with {code}; its log: {})",
                    args.pid,
                    dir.join(DUMP_LOG).display()
                )
            } else {
                format!(
                    "CRIU could not checkpoint pid {} (exit status {code}); the program runs \
                     on; CRIU's log: {}",
                    args.pid,
                    dir.join(DUMP_LOG).display()
                )
            }));
        }
        CriuEnd::Exited(_) => {}
        CriuEnd::Unknown(e) => return Err(failed(format!("cannot wait for CRIU: {e}"))),
    }
    kfd_sim_host::shm::keep(&machine.shm, &dir).map_err(|e| {
        remove_partial(&dir, &before);
        Failure::failed(format!("the checkpoint's /dev/shm files: {e}"))
    })?;
    let record = CheckpointRecord {
        machine: machine.machine.clone(),
        spec: machine.spec.clone(),
        renumber: machine.renumber,
        pid: args.pid,
        processes,
        output: machine.output.clone(),
        left_running: args.leave_running,
        criu: criu.path.clone(),
    };
    let text = serde_json::to_string_pretty(&record).map_err(Failure::failed)?;
    std::fs::write(dir.join(RECORD), text).map_err(|e| {
        remove_partial(&dir, &before);
        Failure::failed(format!("cannot write {}: {e}", dir.join(RECORD).display()))
    })?;
    let (gpu_images, gpu_bytes) = gpu_images(&dir);
    Ok(Done {
        record,
        dir,
        gpu_images,
        gpu_bytes,
        criu_version: criu.version,
    })
}

/// How CRIU ended.
enum CriuEnd {
    Exited(i32),
    Stopped(i32),
    Unknown(std::io::Error),
}

/// Waits for CRIU, a spinner on a terminal meanwhile; a signal of `stops`
/// ends it.
fn wait_for_criu(
    mut child: std::process::Child,
    pid: u32,
    stops: &mpsc::Receiver<i32>,
    json: bool,
) -> CriuEnd {
    let spinner = if json || crate::out::quiet() {
        indicatif::ProgressBar::hidden()
    } else {
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {msg}") {
            bar.set_style(style);
        }
        bar.set_message(format!("CRIU is checkpointing pid {pid}"));
        bar
    };
    let started = Instant::now();
    let end = loop {
        if let Ok(signal) = stops.try_recv() {
            let _ = child.kill();
            let _ = child.wait();
            break CriuEnd::Stopped(signal);
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                break CriuEnd::Exited(status.code().unwrap_or_else(|| {
                    128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
                }))
            }
            Ok(None) => {}
            Err(e) => break CriuEnd::Unknown(e),
        }
        spinner.tick();
        std::thread::sleep(Duration::from_millis(50));
    };
    spinner.finish_and_clear();
    crate::out::log_only(&format!(
        "amdgpu-criu sim checkpoint: CRIU ran {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    end
}

/// Removes what a failed dump wrote into `dir` (every entry not in
/// `before`), except CRIU's log.
fn remove_partial(dir: &Path, before: &[std::ffi::OsString]) {
    for name in listing(dir) {
        if before.contains(&name) || name == DUMP_LOG {
            continue;
        }
        let path = dir.join(&name);
        let _ = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
    }
}
