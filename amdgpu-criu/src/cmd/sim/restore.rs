//! `sim restore --dir DIR [--machine builtin:NAME|DIR] [--device-map MAP]
//! [--criu PATH]`: real CRIU restores a checkpoint of `sim checkpoint` on a
//! newly served machine, the one it was taken on or another, and this
//! command reports where each process's GPUs went.
//!
//! Before CRIU runs: root; the checkpoint's record; every checkpointed pid
//! free (CRIU gives processes back their pids); the machine able to take
//! the checkpoint, checked as the plugin checks it at restore (the same
//! mapping, `KFD_*_CHECK` and the device map), so a refusal names the GPU
//! and the check before anything starts; a `criu`, the plugins and the
//! interposer. A process of its own then serves the machine and runs CRIU
//! in a new private `/dev` (`sim serve`); the restored processes become its
//! children once CRIU is gone, and it serves them until they end.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;

use amdgpu_topology::devices::DeviceTopology;
use kfd_sim_host::companion::{self, REMOTE_PLUGIN};
use kfd_sim_host::criu::{log_errors, RESTORE_LOG};
use kfd_sim_host::{Criu, Interposer, MachineSpec};

use super::checkpoint::CheckpointRecord;
use super::registry::StartedFor;
use super::run::{report_once, start_server};
use super::server::{ExitStatus, Host, Report, Request, RestoreJob, Restored};
use super::{procs, require_root, Failure};
use crate::out::{gpu_id, plural};
use crate::signals;

/// Arguments of `sim restore`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  sudo amdgpu-criu sim restore --dir ./ckpt
  sudo amdgpu-criu sim restore --dir ./ckpt --machine builtin:mi210-8gpu-2hive
  sudo amdgpu-criu sim restore --dir ./ckpt --machine builtin:pcie-2gpu --device-map 0x1234=0x5678
  KFD_VRAM_SIZE_CHECK=0 sudo amdgpu-criu sim restore --dir ./ckpt --machine ./topology-of-node2 --json

Restores with `criu restore -d` (CRIU's log: DIR/restore.log) on a machine
served for the restored processes until they end; `sim ps` lists them. The
machine is checked first as the plugin checks it; a machine that cannot
take the checkpoint is refused with every reason (the GPU and the check).

Exit status: 0 restored, 1 the restore failed (the machine cannot take it,
a pid is taken, CRIU or the plugin refused), 2 usage errors, 3 this host
cannot do it (root, CRIU, a library)")]
pub struct Args {
    /// The images directory `sim checkpoint` wrote.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// The machine to restore on: a built-in machine `builtin:NAME` or a
    /// sysfs topology tree (default: the machine of the checkpoint).
    #[arg(long, value_name = "builtin:NAME|DIR", value_parser = crate::machine::MachineParser, hide_possible_values = true)]
    pub machine: Option<String>,
    /// The machine as another host numbers it (other gpu_ids, node order,
    /// render minors and hive ids, picked by SEED): the usual other machine
    /// of the same model.
    #[arg(long, value_name = "SEED")]
    pub renumber: Option<u64>,
    /// Pin checkpointed GPUs to the machine's (`SRC=DST[,...]`, gpu_ids
    /// or PCI addresses, as the plugin's amdgpu.device-map).
    #[arg(long, value_name = "SRC=DST[,...]")]
    pub device_map: Option<String>,
    /// The `criu` binary to run.
    #[arg(long, value_name = "PATH")]
    pub criu: Option<PathBuf>,
    /// Print one JSON object (`pid`, `machine`, `served_by`, `processes`
    /// with each one's `gpus`) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `sim restore`.
pub fn run(args: Args) -> ExitCode {
    match execute(&args) {
        Ok(restored) => {
            print(&restored, args.json);
            ExitCode::SUCCESS
        }
        Err(failure) => failure.report("restore", args.json),
    }
}

fn print(r: &Restored, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({
                "ok": true,
                "pid": r.pid,
                "machine": r.machine,
                "served_by": r.served_by,
                "processes": r.processes,
                "log": r.log,
            })
        );
        return;
    }
    println!(
        "restored pid {} on {} (served by pid {})",
        r.pid, r.machine, r.served_by
    );
    for p in &r.processes {
        match &p.gpu {
            Some(g) => {
                let map: Vec<String> = g
                    .gpus
                    .iter()
                    .map(|m| format!("{} -> {}", gpu_id(m.seen), gpu_id(m.local)))
                    .collect();
                println!(
                    "  pid {} ({}): GPUs {} (checkpointed -> here); {}, {} {}",
                    p.pid,
                    p.name,
                    map.join(", "),
                    plural(g.bos as u64, "BO"),
                    plural(g.queues as u64, "queue"),
                    if g.queues_running {
                        "running"
                    } else {
                        "stopped"
                    }
                );
            }
            None => println!("  pid {} ({}): no GPU state", p.pid, p.name),
        }
    }
}

/// The machine's device view, for the check before the restore.
fn device_topology(spec: &MachineSpec) -> Result<DeviceTopology, Failure> {
    let system = spec.system().map_err(Failure::usage)?;
    DeviceTopology::from_system(&system)
        .map_err(|e| Failure::usage(format!("{}: {e}", spec.label())))
}

fn execute(args: &Args) -> Result<Restored, Failure> {
    let stops = signals::block(None).map_err(Failure::prerequisite)?;
    require_root("restore")?;
    let images = std::path::absolute(&args.dir)
        .map_err(|e| Failure::usage(format!("{}: {e}", args.dir.display())))?;
    let record = CheckpointRecord::read(&images)?;
    let (machine, renumber) = match (&args.machine, args.renumber) {
        (Some(m), seed) => (m.clone(), seed),
        (None, Some(seed)) => (record.spec.clone(), Some(seed)),
        (None, None) => (record.spec.clone(), record.renumber),
    };
    let machine = crate::machine::Machine::parse("sim restore", &machine)
        .map_err(Failure::usage)?
        .label();
    let spec = MachineSpec::parse(&machine)
        .map_err(Failure::usage)?
        .renumbered(renumber);
    for p in &record.processes {
        if let Some(now) = procs::info(p.pid) {
            return Err(Failure::failed(format!(
                "pid {} is taken by a running process ({}): CRIU gives the checkpointed \
                 processes their own pids back; end it first (`amdgpu-criu sim stop {}` if it \
                 is the program that was checkpointed with --leave-running)",
                p.pid, now.name, p.pid
            )));
        }
    }
    precheck(&images, &spec, args.device_map.as_deref())?;
    let criu = Criu::find(args.criu.as_deref()).map_err(Failure::prerequisite)?;
    let amdgpu_plugin = companion::amdgpu_plugin().map_err(Failure::prerequisite)?;
    let remote_plugin = REMOTE_PLUGIN.find().map_err(Failure::prerequisite)?;
    let interposer = Interposer::find().map_err(Failure::prerequisite)?;
    let job = RestoreJob {
        machine,
        renumber,
        images,
        device_map: args.device_map.clone(),
        criu: criu.path,
        amdgpu_plugin,
        remote_plugin,
        interposer: interposer.path().to_path_buf(),
    };
    match start_server(&Request::Restore(job), &stops)? {
        Report::Restored(restored) => Ok(restored),
        Report::Failed(failure) => Err(failure),
        Report::Started(_) => Err(Failure::failed(
            "the serving process started a program instead of restoring",
        )),
    }
}

/// Whether `spec` can take the checkpoint in `images`, as the plugin
/// decides at restore: every reason when it cannot.
fn precheck(
    images: &std::path::Path,
    spec: &MachineSpec,
    device_map: Option<&str>,
) -> Result<(), Failure> {
    let checkpointed = crate::cmd::check::read_checkpointed(images).map_err(Failure::usage)?;
    let local = device_topology(spec)?;
    let (options, invalid) = crate::cmd::map::checks_from_env().map_err(Failure::usage)?;
    for warning in &invalid {
        eprintln!("amdgpu-criu sim restore: warning: {warning}");
    }
    let pins = crate::cmd::map::device_map(device_map).map_err(Failure::usage)?;
    let verdicts = crate::cmd::check::check_pinned(&checkpointed, &local, &options, &pins)
        .map_err(Failure::failed)?;
    let reasons: Vec<String> = verdicts
        .iter()
        .filter(|v| !v.result.compatible)
        .flat_map(|v| crate::cmd::map::reason_lines(&v.result.reasons))
        .collect();
    if reasons.is_empty() {
        return Ok(());
    }
    Err(Failure::failed(format!(
        "{} cannot take this checkpoint (nothing was started); the plugin would refuse it for:",
        spec.label()
    ))
    .with_details(reasons))
}

/// `sim serve` for a restore: serves the machine, runs CRIU, reports, and
/// serves the restored processes until they end.
pub fn serve(
    job: &RestoreJob,
    stops: mpsc::Receiver<i32>,
    reporter: &mut Option<std::io::Stdout>,
) -> ExitCode {
    let output = CheckpointRecord::read(&job.images)
        .ok()
        .and_then(|r| r.output);
    let started = (|| {
        let mut host = Host::open(
            &job.machine,
            job.renumber,
            StartedFor::Restore(job.images.clone()),
            output,
        )?;
        let (criu, pidfile) = host.start_restore(job)?;
        Ok::<_, Failure>((host, criu, pidfile))
    })();
    let (host, criu, pidfile) = match started {
        Ok(s) => s,
        Err(failure) => return report_once(reporter, Report::Failed(failure)),
    };
    let mut code = ExitCode::SUCCESS;
    let log = job.images.join(RESTORE_LOG);
    host.serve(stops, |host, pid, status| {
        if pid != criu {
            return;
        }
        let report = match (status, super::server::restored_pid(&pidfile)) {
            (ExitStatus::Code(0), Some(root)) => {
                let processes = host
                    .status()
                    .processes
                    .into_iter()
                    .filter(|p| procs::is_below(p.pid, root))
                    .collect();
                Report::Restored(Restored {
                    pid: root,
                    machine: host.label().to_owned(),
                    served_by: std::process::id(),
                    processes,
                    log: log.clone(),
                })
            }
            (status, _) => {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                Report::Failed(
                    Failure::failed(format!(
                        "CRIU could not restore the checkpoint on {} (exit status {}); \
                         CRIU's log: {}",
                        host.label(),
                        status.shell_code(),
                        log.display()
                    ))
                    .with_details(log_errors(&text)),
                )
            }
        };
        code = report_once(reporter, report);
    });
    if reporter.is_some() {
        code = report_once(
            reporter,
            Report::Failed(Failure::failed("stopped before CRIU finished")),
        );
    }
    code
}
