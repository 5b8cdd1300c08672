//! `amdgpu-criu demo`: a simulated ROCm process is checkpointed through the
//! real plugin code into an image directory and restored on another
//! (simulated) machine, then checked byte for byte and step for step.
//!
//! The machines are `kfd-sim` simulators built from a built-in topology or a
//! sysfs tree; CRIU is the plugin crate's host emulator, which calls the
//! plugin's hooks in CRIU's order and process roles. The workload comes from
//! `kfd_sim::workload`; an identical twin runs uninterrupted next to it so
//! the restored process can be compared with where it would have been.
//! The application's own CPU memory (where its USERPTR BOs point) is its
//! process's, as on a real host: the emulated CRIU carries it in its pages
//! dump and maps it back at the same addresses on the restoring machine, so
//! every workload moves between machines.
//! `--inject` arms a `kfd-sim` fault so a failure can be rehearsed end to end.
//!
//! Verified means: every restore hook answered success, every device mapping
//! was translated, the restored process holds the same BOs at the same
//! handles and addresses with identical contents, queues, events and SVM
//! ranges, it keeps running (N more steps end with the twin's fingerprint),
//! and `verify_set` finds the image set clean.
//!
//! This module decides nothing the plugin decides: it only sets the stage,
//! measures and compares. It never touches real devices.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use amdgpu_image::{flags, verify_set, CriuKfd, DirStore, ImageKind, ImageStore, ReadLimits};
use amdgpu_topology::devices::DeviceTopology;
use amdgpu_topology::{builtin, builtin_names, parse, renumbered, synthesize_missing, System};
use criu_host_emulator::{
    CriuEmulator, DeviceVma, EmulatorConfig, RestoredTask, TaskFile, TaskToDump, TaskToRestore,
    VmaOutcome,
};
use criu_plugin_amdgpu::log::{Capture, Level};
use amdgpu_checkpoint::options::Options;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kfd_sim::workload::{CpuMemory, Profile, Workload, WorkloadDescription};
use kfd_sim::{FaultSpec, Pid, Sim, SimConfig};
use serde::Serialize;

use super::{check, map};

/// The machine the demo checkpoints on unless told otherwise: eight GPUs in
/// two XGMI hives, so the GPU mapping has real work to do.
pub const DEFAULT_TOPOLOGY: &str = "mi210-8gpu-2hive";

/// Steps the workload makes before the checkpoint.
const STEPS_BEFORE: usize = 3;
/// Steps the restored process and its twin make after the restore.
const STEPS_AFTER: usize = 4;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Arguments of `demo`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu demo
  amdgpu-criu demo --workload pytorch --size 1G
  amdgpu-criu demo --topology mi300x-64 --restore-topology mi300x-64 --json
  amdgpu-criu demo --dir ./ckpt --keep && amdgpu-criu verify ./ckpt
  amdgpu-criu demo --inject CRIU_OP:CHECKPOINT=EIO

Exit status: 0 verified, 1 not verified (or the rehearsed failure), 2 usage errors")]
pub struct Args {
    /// The machine to checkpoint on: a built-in topology name or a sysfs
    /// tree (the directory holding `nodes/`; what a partial capture lacks is
    /// filled in as the simulator does).
    #[arg(long, value_name = "NAME|DIR", default_value = DEFAULT_TOPOLOGY)]
    pub topology: String,
    /// The machine to restore on, same forms. Default: the same model as
    /// another host numbers it (new gpu_ids, node order, render minors and
    /// hive ids). The same value as --topology restores on the very machine
    /// the process was checkpointed on.
    #[arg(long, value_name = "NAME|DIR")]
    pub restore_topology: Option<String>,
    /// The application: `basic` (a few small BOs of every type per GPU),
    /// `pytorch` (many BOs of mixed sizes, USERPTR staging, SVM),
    /// `tensorflow` (few large VRAM BOs) or `multi` (three processes, one of
    /// each, checkpointed together).
    #[arg(long, value_enum, default_value_t = WorkloadKind::Tensorflow)]
    pub workload: WorkloadKind,
    /// Total bytes of the BOs the workload allocates, spread over its GPUs
    /// (`256M`, `1G`, `8M`; binary units). `basic` has a fixed small size.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size)]
    pub size: u64,
    /// Which renumbering of the default restore machine to use.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the images here (created if needed; must hold no amdgpu
    /// images) and keep them, instead of in a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep the temporary image directory and print where it is.
    #[arg(long)]
    pub keep: bool,
    /// Print one JSON object (`checkpoint`, `restore`, `gpu_map`,
    /// `verified`, plus `error`, `reasons` and `problems` when something failed) instead
    /// of text, and no progress bar.
    #[arg(long)]
    pub json: bool,
    /// Make the Nth call of a kernel operation fail, to rehearse a failure:
    /// `OP[:N][=ERRNO]`, e.g. `CRIU_OP:CHECKPOINT=EIO`, `CRIU_OP:RESTORE`,
    /// `SDMA_SHORT`, `MMAP=ENOMEM` (see kfd-sim's fault module). Repeatable.
    #[arg(long, value_name = "OP[:N][=ERRNO]", value_parser = parse_fault)]
    pub inject: Vec<FaultSpec>,
}

/// The simulated application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadKind {
    /// A few small BOs of every type per GPU.
    Basic,
    /// PyTorch-like: many BOs of mixed sizes.
    Pytorch,
    /// TensorFlow-like: few large VRAM BOs.
    Tensorflow,
    /// Three processes (pytorch, tensorflow and basic) in one checkpoint.
    Multi,
}

impl WorkloadKind {
    fn name(self) -> &'static str {
        match self {
            WorkloadKind::Basic => "basic",
            WorkloadKind::Pytorch => "pytorch",
            WorkloadKind::Tensorflow => "tensorflow",
            WorkloadKind::Multi => "multi",
        }
    }

    /// The processes to launch, sized so their BOs add up to about `size`
    /// bytes over `gpus` GPUs.
    fn profiles(self, size: u64, gpus: u64) -> Vec<Profile> {
        match self {
            WorkloadKind::Basic => vec![Profile::Basic],
            WorkloadKind::Pytorch => vec![pytorch(size, gpus)],
            WorkloadKind::Tensorflow => vec![tensorflow(size, gpus)],
            WorkloadKind::Multi => vec![
                pytorch(size / 2, gpus),
                tensorflow(size / 2, gpus),
                Profile::Basic,
            ],
        }
    }
}

/// A PyTorch-like process: BO sizes cycle through the powers of two from
/// 4 KiB up to a sixteenth of the per-GPU share (at most 16 MiB), as many
/// BOs as fill the share.
fn pytorch(size: u64, gpus: u64) -> Profile {
    let share = (size / gpus.max(1)).max(4 * KIB);
    let max_bo_bytes = (share / 16).clamp(4 * KIB, 16 * MIB);
    let max_bo_bytes = 1u64 << max_bo_bytes.ilog2();
    let levels = u64::from((max_bo_bytes / (4 * KIB)).ilog2()) + 1;
    let cycle_bytes = 4 * KIB * ((1u64 << levels) - 1);
    let bos_per_gpu = (share * levels / cycle_bytes).max(1);
    Profile::PyTorchLike {
        bos_per_gpu: usize::try_from(bos_per_gpu).unwrap_or(usize::MAX),
        max_bo_bytes,
    }
}

/// A TensorFlow-like process: per GPU six equal VRAM BOs take the share
/// left after its two 2 MiB GTT BOs.
fn tensorflow(size: u64, gpus: u64) -> Profile {
    let share = size / gpus.max(1);
    let bo_bytes = (share.saturating_sub(4 * MIB) / 6) / (4 * KIB) * (4 * KIB);
    Profile::TensorFlowLike {
        bo_bytes: bo_bytes.max(4 * KIB),
    }
}

/// `256M`, `1G`, `1.5GiB`, `4096`: bytes, with binary units.
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(digits_end);
    let unit = unit.trim().to_ascii_uppercase();
    let unit = unit
        .strip_suffix("IB")
        .or_else(|| unit.strip_suffix('B'))
        .unwrap_or(&unit);
    let scale: u64 = match unit {
        "" => 1,
        "K" => KIB,
        "M" => MIB,
        "G" => GIB,
        "T" => GIB << 10,
        other => {
            return Err(format!(
                "unknown unit {other:?} in size {text:?} (K, M, G, T)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("size {text:?} is not a number with an optional unit (256M, 1G)"))?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("size {text:?} is out of range"));
    }
    Ok(bytes as u64)
}

fn parse_fault(text: &str) -> Result<FaultSpec, String> {
    text.parse::<FaultSpec>().map_err(|e| e.to_string())
}

/// One side of the demo, as the JSON and the summary report it.
#[derive(Debug, Clone, Default, Serialize)]
struct Phase {
    gpus: usize,
    bos: usize,
    bytes: u64,
    seconds: f64,
}

/// What the demo prints.
#[derive(Debug, Default, Serialize)]
struct Report {
    checkpoint: Option<Phase>,
    restore: Option<Phase>,
    gpu_map: BTreeMap<u32, u32>,
    verified: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    reasons: Vec<String>,
    /// What verification found wrong after a completed restore.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    problems: Vec<String>,
    /// Human-readable lines (text mode only).
    #[serde(skip)]
    lines: Vec<String>,
    /// Where the images are (text mode only, printed last).
    #[serde(skip)]
    images: String,
}

/// How the demo ended early.
enum Stop {
    /// Bad arguments or an unusable topology: exit 2.
    Usage(String),
    /// The checkpoint or restore failed, or verification found differences:
    /// exit 1 with the report so far.
    Failed(String),
}

/// A simulated machine.
struct Machine {
    label: String,
    system: System,
}

/// One simulated application process and its uninterrupted twin.
struct Process {
    app: Option<Workload>,
    twin: Workload,
    pid: Pid,
    /// CRIU file ids of its GPU files: /dev/kfd first, then render nodes.
    file_ids: Vec<u32>,
    expected: WorkloadDescription,
}

/// Runs `demo`: 0 when verified, 1 when a step failed or the result differs,
/// 2 on usage errors.
pub fn run(args: Args) -> ExitCode {
    let show_bar = !args.json && std::io::stderr().is_terminal();
    let bar = if show_bar {
        let bar = ProgressBar::with_draw_target(Some(7), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] [{bar:24}] {pos}/{len} {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    } else {
        ProgressBar::hidden()
    };
    // The plugin logs to stderr outside CRIU; the demo keeps its lines and
    // shows the warnings and errors when something fails.
    let capture = Capture::start();
    let mut report = Report::default();
    let outcome = execute(&args, &bar, &mut report);
    bar.finish_and_clear();
    let plugin_lines: Vec<String> = capture
        .lines()
        .into_iter()
        .filter(|(level, _)| *level <= Level::Warn)
        .map(|(_, line)| format!("{}{line}", criu_plugin_amdgpu::log::PREFIX))
        .collect();
    drop(capture);
    let code = match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Stop::Usage(message)) => {
            eprintln!("amdgpu-criu demo: {message}");
            return ExitCode::from(2);
        }
        Err(Stop::Failed(message)) => {
            report.verified = false;
            report.error = Some(message);
            ExitCode::from(1)
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("amdgpu-criu demo: cannot format the result as JSON: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        for line in &report.lines {
            println!("{line}");
        }
        if !report.images.is_empty() {
            println!("{}", report.images);
        }
    }
    if let Some(error) = &report.error {
        eprintln!("amdgpu-criu demo: {error}");
        for line in &plugin_lines {
            eprintln!("  {line}");
        }
        for reason in &report.reasons {
            eprintln!("  {reason}");
        }
    }
    code
}

/// A built-in topology by name, or a sysfs tree completed as the simulator
/// completes partial captures.
fn resolve(spec: &str) -> Result<Machine, Stop> {
    if let Some(system) = builtin(spec) {
        return Ok(Machine {
            label: spec.to_owned(),
            system,
        });
    }
    let dir = Path::new(spec);
    if !dir.is_dir() {
        return Err(Stop::Usage(format!(
            "{spec:?} is neither a built-in topology ({}) nor a directory",
            builtin_names().join(", ")
        )));
    }
    let parsed = parse(dir).map_err(|e| Stop::Usage(format!("{spec}: {e}")))?;
    let mut system = parsed.system;
    let filled = synthesize_missing(&mut system);
    if !filled.is_empty() {
        eprintln!(
            "amdgpu-criu demo: note: {spec}: {} missing properties (gpu_ids, VRAM banks, \
             render minors) filled in as the simulator does",
            filled.len()
        );
    }
    Ok(Machine {
        label: spec.to_owned(),
        system,
    })
}

fn simulate(machine: &Machine) -> Result<Sim, Stop> {
    Sim::new(machine.system.clone(), SimConfig::default()).map_err(|e| {
        Stop::Usage(format!(
            "{}: cannot simulate this machine: {e}",
            machine.label
        ))
    })
}

/// The images directory: `--dir` (which must not already hold an image
/// set), a temporary one kept for `--keep`, or a temporary one removed
/// when the demo ends.
enum ImagesDir {
    Given(PathBuf),
    Kept(PathBuf),
    Temp(tempfile::TempDir),
}

impl ImagesDir {
    fn path(&self) -> &Path {
        match self {
            ImagesDir::Given(p) | ImagesDir::Kept(p) => p,
            ImagesDir::Temp(t) => t.path(),
        }
    }

    /// Where the images are, for the summary.
    fn describe(&self) -> String {
        let path = self.path().display();
        match self {
            ImagesDir::Given(_) => format!("images: {path}"),
            ImagesDir::Kept(_) => format!("images: {path} (kept)"),
            ImagesDir::Temp(_) => {
                format!("images: {path} (removed; --keep or --dir DIR keeps them)")
            }
        }
    }
}

fn images_dir(args: &Args) -> Result<ImagesDir, Stop> {
    let Some(dir) = &args.dir else {
        let temp = tempfile::Builder::new()
            .prefix("amdgpu-criu-demo.")
            .tempdir()
            .map_err(|e| Stop::Usage(format!("cannot create a temporary directory: {e}")))?;
        return Ok(if args.keep {
            ImagesDir::Kept(temp.keep())
        } else {
            ImagesDir::Temp(temp)
        });
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| Stop::Usage(format!("{}: cannot create: {e}", dir.display())))?;
    let existing = DirStore::open_dir(dir)
        .and_then(|s| s.list())
        .map_err(|e| Stop::Usage(format!("{}: {e}", dir.display())))?;
    if !existing.is_empty() {
        return Err(Stop::Usage(format!(
            "{}: already holds {} amdgpu image files; give an empty directory",
            dir.display(),
            existing.len()
        )));
    }
    Ok(ImagesDir::Given(dir.clone()))
}

/// Runs `dump` while showing how many bytes the pages files in `images`
/// have reached out of `total` (only when the bar is drawn).
fn with_pages_progress<T>(
    bar: &ProgressBar,
    images: &Path,
    total: u64,
    dump: impl FnOnce() -> T,
) -> T {
    if bar.is_hidden() {
        return dump();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let written = pages_bytes(images);
                bar.set_message(format!(
                    "checkpointing: {} of {} in pages files",
                    human_bytes(written.min(total)),
                    human_bytes(total)
                ));
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let result = dump();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        result
    })
}

/// Bytes in the pages files of `images` so far, those still being written
/// (`DirStore` writes `.amdgpu-pages-*.part-*` and renames it when done)
/// included. For the progress display only.
fn pages_bytes(images: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(images) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.trim_start_matches('.').starts_with("amdgpu-pages-")
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn stage(bar: &ProgressBar, message: &'static str) {
    bar.inc(1);
    bar.set_message(message);
}

fn execute(args: &Args, bar: &ProgressBar, report: &mut Report) -> Result<(), Stop> {
    let (options, invalid) = Options::from_env();
    for warning in &invalid {
        eprintln!("amdgpu-criu demo: warning: {warning}");
    }
    let origin = resolve(&args.topology)?;
    let same_machine = args.restore_topology.as_deref() == Some(args.topology.as_str());
    let target = match &args.restore_topology {
        Some(spec) if !same_machine => Some(resolve(spec)?),
        Some(_) => None,
        None => Some(Machine {
            label: format!("{} renumbered (seed {})", origin.label, args.seed),
            system: renumbered(&origin.system, args.seed),
        }),
    };
    let images = images_dir(args)?;
    report.images = images.describe();
    let shm = tempfile::tempdir()
        .map_err(|e| Stop::Usage(format!("cannot create a temporary directory: {e}")))?;

    bar.set_message("building the simulated machines");
    let origin_sim = simulate(&origin)?;
    let gpus = origin_sim.gpus().len() as u64;
    let profiles = args.workload.profiles(args.size, gpus);

    stage(bar, "launching the workload");
    let mut processes = launch(&origin_sim, &profiles)?;
    // Several processes exchange a DRM buffer by dma-buf, as a DDP group
    // does: the root's render-node BO, imported and held by the others.
    let exchange = if processes.len() > 1 {
        Some(exchange_buffer(&mut processes)?)
    } else {
        None
    };
    let target_sim = match &target {
        Some(machine) => Some(simulate(machine)?),
        None => None,
    };
    let restore_sim = target_sim.as_ref().unwrap_or(&origin_sim);
    let restore_label = target.as_ref().map_or_else(
        || format!("{} (the same machine)", origin.label),
        |m| m.label.clone(),
    );
    report.lines.push(format!(
        "checkpoint on {} ({} GPUs), restore on {} ({} GPUs)",
        origin.label,
        gpus,
        restore_label,
        restore_sim.gpus().len()
    ));
    report.lines.push(format!(
        "workload: {}, {} process{}, {STEPS_BEFORE} steps before the checkpoint, \
         {STEPS_AFTER} after the restore",
        args.workload.name(),
        processes.len(),
        if processes.len() == 1 { "" } else { "es" }
    ));

    // Faults fire once, at their first occurrence on the way from dump to
    // restore: armed on the checkpointing machine, moved to the restoring
    // one when the dump did not trigger them.
    for spec in &args.inject {
        origin_sim.inject(spec.clone());
    }

    stage(bar, "checkpointing");
    let config = {
        let mut c = EmulatorConfig::new(shm.path());
        c.options = options;
        c
    };
    let dumper = CriuEmulator::new(origin_sim.clone(), images.path(), config.clone());
    // One `criu dump` of the whole tree: the first process is the root.
    let mut tree = Vec::new();
    for p in &processes {
        let Some(app) = &p.app else { continue };
        let Some(kfd) = app.kfd_fd() else {
            return Err(Stop::Failed("the workload has no /dev/kfd fd".into()));
        };
        let mut files = vec![TaskFile {
            fd: kfd,
            id: p.file_ids[0],
        }];
        for (fd, &id) in app.render_fds().into_iter().zip(&p.file_ids[1..]) {
            files.push(TaskFile { fd, id });
        }
        if let Some(exchange) = &exchange {
            for (_, fd, id) in exchange.held.iter().filter(|(pid, ..)| *pid == p.pid) {
                files.push(TaskFile {
                    fd: fd.as_fd(),
                    id: *id,
                });
            }
        }
        tree.push(TaskToDump {
            pid: p.pid,
            files,
            vmas: DeviceVma::offered_at_dump(&origin_sim),
        });
    }
    let total: u64 = processes
        .iter()
        .flat_map(|p| &p.expected.bos)
        .filter(|b| b.flags & (flags::KFD_VRAM | flags::KFD_GTT) != 0)
        .map(|b| b.size)
        .sum();
    let started = Instant::now();
    let dumped = with_pages_progress(bar, images.path(), total, || dumper.dump_tree(&tree));
    let dump_time = started.elapsed();
    drop(tree);
    if let Err(e) = dumped {
        let error = e.to_string();
        return Err(checkpoint_failed(
            &error,
            &mut processes,
            images.path(),
            report,
        ));
    }
    let kfd_images = read_kfd_images(images.path())?;
    let phase = checkpoint_phase(&kfd_images, dump_time);
    report.lines.push(phase_line("checkpoint:", &phase));
    report.checkpoint = Some(phase);

    if let Some(sim) = &target_sim {
        for spec in origin_sim.pending_faults() {
            sim.inject(spec);
        }
        origin_sim.clear_faults();
    }

    stage(bar, "checking the restore machine");
    let local = DeviceTopology::from_system(restore_sim.topology())
        .map_err(|e| Stop::Usage(format!("{restore_label}: {e}")))?;
    let checkpointed = check::read_checkpointed(images.path()).map_err(Stop::Failed)?;
    let verdicts =
        check::check(&checkpointed, &local, &config.options.checks).map_err(Stop::Failed)?;
    for v in verdicts.iter().filter(|v| !v.result.compatible) {
        report.reasons.extend(map::reason_lines(&v.result.reasons));
    }

    stage(bar, "restoring");
    let restorer = CriuEmulator::new(restore_sim.clone(), images.path(), config);
    // One `criu restore` of the whole tree.
    let tree: Vec<TaskToRestore> = processes
        .iter()
        .map(|p| TaskToRestore {
            pid: p.pid,
            file_ids: p.file_ids.clone(),
            vmas: kfd_images
                .iter()
                .filter(|(id, _)| p.file_ids.contains(id))
                .flat_map(|(_, image)| DeviceVma::of_kfd_image(image))
                .collect(),
        })
        .collect();
    // The checkpointed processes end, their memory with them; their twins
    // run on. Right before the restore: the restore maps that memory back
    // at the same addresses in this host process, and nothing else should
    // be mapped there in between.
    for p in &mut processes {
        if let Some(app) = p.app.take() {
            app.exit()
                .map_err(|e| Stop::Failed(format!("ending the checkpointed process: {e}")))?;
        }
    }
    let started = Instant::now();
    let restored = restorer.restore_tree(&tree);
    let restore_time = started.elapsed();
    let tasks = match restored {
        Ok(tasks) => tasks,
        Err(e) => {
            let incompatible = if report.reasons.is_empty() {
                String::new()
            } else {
                format!(
                    " ({restore_label} cannot take this checkpoint: {} reasons)",
                    report.reasons.len()
                )
            };
            let left: Vec<String> = processes
                .iter()
                .filter(|p| restore_sim.process_alive(p.pid))
                .map(|p| p.pid.to_string())
                .collect();
            let left = if left.is_empty() {
                format!("no process was left behind on {restore_label}")
            } else {
                format!(
                    "pids {} are left half-restored on {restore_label}",
                    left.join(", ")
                )
            };
            report
                .lines
                .push(format!("restore failed: {e}{incompatible}; {left}"));
            return Err(Stop::Failed(format!("restore failed: {e}")));
        }
    };
    let phase = restore_phase(&tasks, restore_time);
    report.lines.push(phase_line("restore:   ", &phase));
    report.restore = Some(phase);
    for task in &tasks {
        if let Some(restorer) = task.plugin.restorer() {
            for kfd in restorer.restored() {
                report
                    .gpu_map
                    .extend(kfd.gpu_map.iter().map(|(k, v)| (*k, *v)));
            }
        }
    }
    let mut map = String::from("GPU map (checkpointed gpu_id -> local gpu_id):");
    for (from, to) in &report.gpu_map {
        let _ = write!(map, "\n  {from} -> {to}");
    }
    report.lines.push(map);

    stage(bar, "resuming");
    let mut problems = resume_problems(&tasks);
    stage(bar, "running after the restore");
    problems.extend(run_after_restore(restore_sim, &mut processes));
    if let Some(exchange) = &exchange {
        problems.extend(exchange.problems(restore_sim, &processes, &tasks));
    }
    stage(bar, "verifying the image set");
    let set_line = match image_set(images.path()) {
        Ok(line) => line,
        Err(set_problems) => {
            problems.extend(set_problems);
            String::new()
        }
    };
    for spec in restore_sim.pending_faults() {
        report
            .lines
            .push(format!("note: injected fault {spec} never fired"));
    }
    drop(tasks);

    if !problems.is_empty() {
        report
            .lines
            .extend(problems.iter().map(|p| format!("problem: {p}")));
        let message = format!(
            "not verified: {} problem{}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        );
        report.problems = problems;
        return Err(Stop::Failed(message));
    }
    report.verified = true;
    report.lines.push(std::mem::take(&mut report.images));
    let shared = match &exchange {
        Some(exchange) => format!(
            "; a DRM buffer shared by {} processes (imports and dma-buf fds) is one buffer again",
            exchange.imports.len() + 1
        ),
        None => String::new(),
    };
    report.lines.push(format!(
        "verified: same BOs, handles, addresses and contents; {STEPS_AFTER} steps after the \
         restore match an uninterrupted run{shared}; {set_line}"
    ));
    Ok(())
}

/// What the restore hooks answered that a successful restore would not:
/// a failed `RESUME_DEVICES_LATE`, a device mapping left untranslated.
fn resume_problems(tasks: &[RestoredTask]) -> Vec<String> {
    let mut problems = Vec::new();
    for task in tasks {
        if task.resume_answer != 0 {
            problems.push(format!(
                "RESUME_DEVICES_LATE of pid {} answered {}",
                task.pid, task.resume_answer
            ));
        }
        for (vma, outcome) in &task.vmas {
            if !matches!(outcome, VmaOutcome::Translated { .. }) {
                problems.push(format!(
                    "pid {}: mapping of {} at {:#x} was not translated",
                    task.pid,
                    vma.path.display(),
                    vma.addr
                ));
            }
        }
    }
    problems
}

/// Compares each restored process with its checkpoint, then runs it and
/// its uninterrupted twin [`STEPS_AFTER`] steps and compares fingerprints.
fn run_after_restore(sim: &Sim, processes: &mut [Process]) -> Vec<String> {
    let mut problems = Vec::new();
    for p in processes {
        if let Err(e) = Workload::verify(sim, p.pid, &p.expected) {
            problems.push(format!("restored state: {e}"));
            continue;
        }
        let mut restored = Workload::attach(sim, p.pid);
        let ran = (0..STEPS_AFTER).try_for_each(|_| {
            restored
                .step()
                .map_err(|e| format!("pid {} cannot run after the restore: {e}", p.pid))?;
            p.twin
                .step()
                .map_err(|e| format!("the uninterrupted twin of pid {}: {e}", p.pid))
        });
        if let Err(problem) = ran {
            problems.push(problem);
            continue;
        }
        match (restored.fingerprint(), p.twin.fingerprint()) {
            (Ok(a), Ok(b)) if a == b => {}
            (Ok(a), Ok(b)) => problems.push(format!(
                "pid {} diverged from its uninterrupted twin (fingerprint {a:#018x}, twin {b:#018x})",
                p.pid
            )),
            (Err(e), _) | (_, Err(e)) => problems.push(format!("fingerprint: {e}")),
        }
    }
    problems
}

/// `verify_set` over the images: a summary when clean, else every problem.
fn image_set(images: &Path) -> Result<String, Vec<String>> {
    match DirStore::open_dir(images).and_then(|store| verify_set(&store, ReadLimits::default())) {
        Ok(set) if set.is_clean() && set.files > 0 => Ok(format!(
            "image set clean ({} files, {} checksums)",
            set.files, set.checksums_verified
        )),
        Ok(set) if set.files == 0 => Err(vec!["image set: no amdgpu image files".into()]),
        Ok(set) => Err(set
            .problems
            .iter()
            .map(|p| format!("image set: {p}"))
            .collect()),
        Err(e) => Err(vec![format!("image set: {e}")]),
    }
}

/// Launches one process (and its twin) per profile and makes them step.
fn launch(sim: &Sim, profiles: &[Profile]) -> Result<Vec<Process>, Stop> {
    let mut next_id = 1u32;
    let mut processes = Vec::new();
    for profile in profiles {
        let failed = |e: kfd_sim::workload::WorkloadError| {
            Stop::Usage(format!(
                "cannot run the workload on this machine: {e} (the profile needs more \
                 of the GPUs than they offer, or --size is too large)"
            ))
        };
        // The application's CPU memory is its own, carried by CRIU's pages
        // dump like any process's.
        let mut app =
            Workload::launch_with_memory(sim, profile, CpuMemory::Process).map_err(failed)?;
        let mut twin =
            Workload::launch_with_memory(sim, profile, CpuMemory::Process).map_err(failed)?;
        for _ in 0..STEPS_BEFORE {
            app.step().map_err(failed)?;
            twin.step().map_err(failed)?;
        }
        let expected = app.describe().map_err(failed)?;
        let files = 1 + app.render_fds().len() as u32;
        let file_ids = (next_id..next_id + files).collect();
        next_id += files;
        processes.push(Process {
            pid: app.pid(),
            app: Some(app),
            twin,
            file_ids,
            expected,
        });
    }
    Ok(processes)
}

/// Bytes of the DRM buffer the `multi` processes exchange.
const SHARED_BYTES: usize = 1 << 20;
/// Its GPU address in every process (above the workload's KFD BOs).
const SHARED_VA: u64 = 6 << 40;

/// A DRM buffer the root process created on its first GPU's render node
/// and the other processes imported there and hold as a dma-buf fd.
struct Exchange {
    /// The root's GEM handle.
    handle: kfd::GemHandle,
    /// (pid, GEM handle) of each import.
    imports: Vec<(Pid, kfd::GemHandle)>,
    /// (pid, dma-buf fd, CRIU file id) of each held dma-buf.
    held: Vec<(Pid, OwnedFd, u32)>,
    /// What the root wrote into it.
    pattern: Vec<u8>,
}

fn exchange_failed(what: &str, e: impl std::fmt::Display) -> Stop {
    Stop::Failed(format!("sharing a DRM buffer: {what}: {e}"))
}

/// Sets up the [`Exchange`]: GEM_CREATE + GEM_VA + fill in the root,
/// PRIME export, and in every other process PRIME import + GEM_VA and a
/// held dma-buf fd (a new CRIU file id).
fn exchange_buffer(processes: &mut [Process]) -> Result<Exchange, Stop> {
    use kfd_sys::{AMDGPU_GEM_DOMAIN_VRAM, AMDGPU_VM_PAGE_READABLE, AMDGPU_VM_PAGE_WRITEABLE};
    let render = |p: &Process| -> Result<kfd::RenderNode<kfd_sim::SimDriver, OwnedFd>, Stop> {
        let app = p
            .app
            .as_ref()
            .ok_or_else(|| exchange_failed("process", "not running"))?;
        let fd = app
            .render_fds()
            .first()
            .ok_or_else(|| exchange_failed("render node", "none open"))?
            .try_clone_to_owned()
            .map_err(|e| exchange_failed("duplicating the render fd", e))?;
        Ok(kfd::RenderNode::from_fd(app.driver().clone(), fd))
    };
    let (root, others) = processes
        .split_first_mut()
        .ok_or_else(|| exchange_failed("processes", "none"))?;
    let node = render(root)?;
    let handle = node
        .gem_create(&kfd::GemCreate {
            size: SHARED_BYTES as u64,
            alignment: 4096,
            domains: u64::from(AMDGPU_GEM_DOMAIN_VRAM),
            flags: 0,
        })
        .map_err(|e| exchange_failed("GEM_CREATE", e))?;
    let rw = AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE;
    node.gem_va_map(handle, SHARED_VA, 0, SHARED_BYTES as u64, rw)
        .map_err(|e| exchange_failed("GEM_VA", e))?;
    let pattern: Vec<u8> = (0..SHARED_BYTES)
        .map(|i| (i.wrapping_mul(131) % 251) as u8)
        .collect();
    write_shared(&node, handle, 0, &pattern)?;
    let dmabuf = node
        .prime_handle_to_fd(handle, kfd_sys::DRM_RDWR | kfd_sys::DRM_CLOEXEC)
        .map_err(|e| exchange_failed("PRIME_HANDLE_TO_FD", e))?;
    let first_id = others
        .iter()
        .chain(std::iter::once(&*root))
        .flat_map(|p| p.file_ids.iter().copied())
        .max()
        .unwrap_or(0)
        + 1;
    let mut imports = Vec::new();
    let mut held = Vec::new();
    for (p, id) in others.iter_mut().zip(first_id..) {
        let theirs = render(p)?;
        let imported = theirs
            .prime_fd_to_handle(dmabuf.as_fd())
            .map_err(|e| exchange_failed("PRIME_FD_TO_HANDLE", e))?;
        theirs
            .gem_va_map(imported, SHARED_VA, 0, SHARED_BYTES as u64, rw)
            .map_err(|e| exchange_failed("GEM_VA of the import", e))?;
        imports.push((p.pid, imported));
        let fd = dmabuf
            .try_clone()
            .map_err(|e| exchange_failed("duplicating the dma-buf", e))?;
        held.push((p.pid, fd, id));
        p.file_ids.push(id);
    }
    Ok(Exchange {
        handle,
        imports,
        held,
        pattern,
    })
}

fn write_shared<F: AsFd>(
    node: &kfd::RenderNode<kfd_sim::SimDriver, F>,
    handle: kfd::GemHandle,
    at: usize,
    bytes: &[u8],
) -> Result<(), Stop> {
    let offset = node
        .gem_mmap_offset(handle)
        .map_err(|e| exchange_failed("GEM_MMAP", e))?;
    let mut map = node
        .mmap(offset, SHARED_BYTES, libc::PROT_READ | libc::PROT_WRITE)
        .map_err(|e| exchange_failed("mmap", e))?;
    map.write(at, bytes)
        .map_err(|e| exchange_failed("writing the buffer", e))
}

fn read_shared<F: AsFd>(
    node: &kfd::RenderNode<kfd_sim::SimDriver, F>,
    handle: kfd::GemHandle,
    at: usize,
    len: usize,
) -> Result<Vec<u8>, String> {
    let offset = node.gem_mmap_offset(handle).map_err(|e| e.to_string())?;
    let map = node
        .mmap(offset, SHARED_BYTES, libc::PROT_READ)
        .map_err(|e| e.to_string())?;
    let mut out = vec![0u8; len];
    map.read(at, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

fn file_identity(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::File::from(fd.try_clone_to_owned().ok()?)
        .metadata()
        .ok()?;
    Some((meta.dev(), meta.ino()))
}

impl Exchange {
    /// What is wrong with the buffer after the restore: the root's contents,
    /// each import's mapping and sharing (a write through the root is read
    /// through the import), each held dma-buf being the root's buffer.
    fn problems(&self, sim: &Sim, processes: &[Process], tasks: &[RestoredTask]) -> Vec<String> {
        let mut problems = Vec::new();
        let render_of = |pid: Pid| {
            let p = processes.iter().find(|p| p.pid == pid)?;
            let id = *p.file_ids.get(1)?;
            let task = tasks.iter().find(|t| t.pid == pid)?;
            let (_, fd) = task.files.iter().find(|(i, _)| *i == id)?;
            Some(kfd::RenderNode::from_fd(sim.driver(pid), fd.as_fd()))
        };
        let Some(root_pid) = processes.first().map(|p| p.pid) else {
            return problems;
        };
        let Some(root) = render_of(root_pid) else {
            return vec![format!(
                "shared buffer: pid {root_pid} has no restored render node"
            )];
        };
        match read_shared(&root, self.handle, 0, SHARED_BYTES) {
            Ok(bytes) if bytes == self.pattern => {}
            Ok(_) => problems.push("shared buffer: contents differ after the restore".into()),
            Err(e) => problems.push(format!("shared buffer: reading it in pid {root_pid}: {e}")),
        }
        for (k, (pid, handle)) in self.imports.iter().enumerate() {
            let Some(node) = render_of(*pid) else {
                problems.push(format!(
                    "shared buffer: pid {pid} has no restored render node"
                ));
                continue;
            };
            match node.gem_mapping_info(*handle) {
                Ok(vms) if vms.iter().any(|v| v.addr == SHARED_VA) => {}
                Ok(_) => problems.push(format!(
                    "shared buffer: pid {pid}'s import is not mapped at {SHARED_VA:#x}"
                )),
                Err(e) => problems.push(format!("shared buffer: pid {pid}'s import: {e}")),
            }
            let stamp = [0xC3, k as u8, 0x3C, 0x99];
            let at = 4096 * (k + 1);
            if let Err(Stop::Failed(e) | Stop::Usage(e)) =
                write_shared(&root, self.handle, at, &stamp)
            {
                problems.push(e);
                continue;
            }
            match read_shared(&node, *handle, at, stamp.len()) {
                Ok(seen) if seen == stamp => {}
                Ok(_) => problems.push(format!(
                    "shared buffer: pid {pid}'s import is a copy, not the root's buffer"
                )),
                Err(e) => problems.push(format!("shared buffer: reading pid {pid}'s import: {e}")),
            }
        }
        let root_export = root
            .prime_handle_to_fd(self.handle, kfd_sys::DRM_CLOEXEC)
            .ok()
            .and_then(|fd| file_identity(fd.as_fd()));
        for (pid, _, id) in &self.held {
            let held = tasks
                .iter()
                .find(|t| t.pid == *pid)
                .and_then(|t| t.files.iter().find(|(i, _)| i == id))
                .and_then(|(_, fd)| file_identity(fd.as_fd()));
            if held.is_none() || held != root_export {
                problems.push(format!(
                    "shared buffer: pid {pid}'s dma-buf (file {id}) is not the root's buffer"
                ));
            }
        }
        problems
    }
}

/// After a failed dump: was the application left running, and what does
/// `verify` make of what is in the images directory?
fn checkpoint_failed(
    error: &str,
    processes: &mut [Process],
    images: &Path,
    report: &mut Report,
) -> Stop {
    report.lines.push(format!("checkpoint failed: {error}"));
    for p in processes.iter_mut() {
        let Some(app) = p.app.as_mut() else { continue };
        match app.step() {
            Ok(()) => report.lines.push(format!(
                "application pid {}: unpaused, it keeps running",
                p.pid
            )),
            Err(e) => report.lines.push(format!(
                "application pid {}: left unable to run: {e}",
                p.pid
            )),
        }
    }
    let verdict = match DirStore::open_dir(images)
        .and_then(|store| verify_set(&store, ReadLimits::default()))
    {
        Ok(set) if set.files == 0 => "no amdgpu image files remain".to_owned(),
        Ok(set) if set.is_clean() => format!(
            "{} files of the processes dumped before the failure, clean on their own \
             but not a checkpoint of the whole tree",
            set.files
        ),
        Ok(set) => format!(
            "verify refuses what remains ({} files, {} problems)",
            set.files,
            set.problems.len()
        ),
        Err(e) => format!("verify cannot read the directory: {e}"),
    };
    report.lines.push(format!("image directory: {verdict}"));
    Stop::Failed(format!("checkpoint failed: {error}"))
}

fn read_kfd_images(dir: &Path) -> Result<Vec<(u32, CriuKfd)>, Stop> {
    let store = DirStore::open_dir(dir).map_err(|e| Stop::Failed(e.to_string()))?;
    let names = store.list().map_err(|e| Stop::Failed(e.to_string()))?;
    let mut out = Vec::new();
    for name in names.iter().filter(|n| n.kind() == ImageKind::Kfd) {
        let msg = store
            .read_message::<CriuKfd>(name, ReadLimits::default())
            .map_err(|e| Stop::Failed(format!("{name}: {e}")))?
            .ok_or_else(|| Stop::Failed(format!("{name} vanished")))?;
        out.push((name.id(), msg));
    }
    Ok(out)
}

fn checkpoint_phase(images: &[(u32, CriuKfd)], time: Duration) -> Phase {
    let gpus: BTreeSet<u32> = images
        .iter()
        .flat_map(|(_, m)| m.device_entries.iter().filter(|d| d.gpu_id != 0))
        .map(|d| d.gpu_id)
        .collect();
    let bos = images.iter().map(|(_, m)| m.bo_entries.len()).sum();
    let bytes = images
        .iter()
        .flat_map(|(_, m)| &m.bo_entries)
        .filter(|b| b.alloc_flags & (flags::KFD_VRAM | flags::KFD_GTT) != 0)
        .map(|b| b.size)
        .sum();
    Phase {
        gpus: gpus.len(),
        bos,
        bytes,
        seconds: time.as_secs_f64(),
    }
}

fn restore_phase(tasks: &[RestoredTask], time: Duration) -> Phase {
    let mut phase = Phase {
        seconds: time.as_secs_f64(),
        ..Phase::default()
    };
    let mut gpus = BTreeSet::new();
    for kfd in tasks
        .iter()
        .filter_map(|t| t.plugin.restorer())
        .flat_map(|r| r.restored())
    {
        phase.bos += kfd.bos;
        phase.bytes += kfd.content_bytes;
        gpus.extend(kfd.gpu_map.values().copied());
    }
    phase.gpus = gpus.len();
    phase
}

fn human_bytes(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.2} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

fn phase_line(name: &str, phase: &Phase) -> String {
    let rate = if phase.seconds > 0.0 {
        format!(
            "{:.2} GiB/s",
            phase.bytes as f64 / GIB as f64 / phase.seconds
        )
    } else {
        "-".to_owned()
    };
    format!(
        "{name} {} GPUs, {} BOs, {} in {:.3} s ({rate})",
        phase.gpus,
        phase.bos,
        human_bytes(phase.bytes),
        phase.seconds
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("256M"), Ok(256 * MIB));
        assert_eq!(parse_size("8m"), Ok(8 * MIB));
        assert_eq!(parse_size("1G"), Ok(GIB));
        assert_eq!(parse_size("1.5GiB"), Ok(3 * GIB / 2));
        assert_eq!(parse_size("64KB"), Ok(64 * KIB));
        assert_eq!(parse_size("4096"), Ok(4096));
        for bad in ["", "M", "12Q", "0", "-1M", "1e99T", "1..2M"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    /// Bytes the profile's sized BOs take per GPU (what `--size` spreads).
    fn sized_bytes(profile: &Profile) -> u64 {
        match *profile {
            Profile::PyTorchLike {
                bos_per_gpu,
                max_bo_bytes,
            } => {
                let levels = (max_bo_bytes / (4 * KIB)).ilog2() as usize + 1;
                (0..bos_per_gpu)
                    .map(|i| ((4 * KIB) << (i % levels)).min(max_bo_bytes))
                    .sum()
            }
            Profile::TensorFlowLike { bo_bytes } => 6 * bo_bytes + 4 * MIB,
            _ => 0,
        }
    }

    #[test]
    fn profiles_spread_the_size_over_the_gpus() {
        for (size, gpus) in [(256 * MIB, 8), (8 * MIB, 2), (GIB, 64), (64 * MIB, 1)] {
            for kind in [WorkloadKind::Pytorch, WorkloadKind::Tensorflow] {
                let profiles = kind.profiles(size, gpus);
                let per_gpu = sized_bytes(&profiles[0]);
                let share = size / gpus;
                assert!(
                    per_gpu <= share + share / 4 && per_gpu + share / 4 >= share,
                    "{kind:?} {size} on {gpus}: {per_gpu} per GPU for a share of {share}"
                );
            }
        }
        assert_eq!(WorkloadKind::Multi.profiles(8 * MIB, 2).len(), 3);
        assert_eq!(WorkloadKind::Basic.profiles(GIB, 8), vec![Profile::Basic]);
    }
}
