//! `sim ps [--json]` lists the simulated machines this user serves and
//! their processes with what the simulator holds of each; `sim stop
//! PID...|--all` ends machines (their processes get `SIGTERM`, then
//! `SIGKILL` after a grace period) and waits until they are gone.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::control::{self, Status};
use super::registry::{self, MachineRecord, StartedFor};
use super::server::STOP_GRACE;
use super::{procs, Failure};
use crate::out::{gpu_id, plural};

/// Arguments of `sim ps`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu sim ps
  sudo amdgpu-criu sim ps --json | jq '.machines[].processes[] | {pid, gpu}'

Lists the machines of this user (root's, under sudo): the registry in
$AMDGPU_CRIU_SIM_DIR, else $XDG_RUNTIME_DIR/amdgpu-criu-sim, else
/run/amdgpu-criu-sim for root, /tmp/amdgpu-criu-sim-UID for others.

Exit status: 0 listed (also none), 2 usage errors")]
pub struct Args {
    /// Print one JSON object (`machines`, each with `served_by`,
    /// `machine`, `started_for`, `output` and `processes`).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `sim stop`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu sim stop 4242       # the machine running pid 4242, and its processes
  amdgpu-criu sim stop --all

Exit status: 0 stopped, 1 a machine did not end, 2 usage errors (a pid on
no machine of this user)")]
pub struct StopArgs {
    /// A process on the machine to stop (or the process serving it).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub pids: Vec<u32>,
    /// Every machine of this user.
    #[arg(long)]
    pub all: bool,
}

/// A machine and what it serves now.
fn listed(record: &MachineRecord) -> (MachineRecord, Status) {
    let status = control::status(record).unwrap_or_default();
    (record.clone(), status)
}

/// Runs `sim ps`.
pub fn run(args: Args) -> ExitCode {
    let scan = registry::scan();
    for pid in &scan.unreadable {
        eprintln!(
            "amdgpu-criu sim ps: the machine served by pid {pid} has a record this version \
             cannot read (another version of amdgpu-criu started it); `amdgpu-criu sim stop \
             --all` ends it"
        );
    }
    let machines: Vec<(MachineRecord, Status)> = scan.machines.iter().map(listed).collect();
    if args.json {
        let value = serde_json::json!({
            "machines": machines.iter().map(|(r, s)| serde_json::json!({
                "served_by": r.server_pid,
                "machine": r.machine,
                "started_for": r.started_for,
                "output": r.output,
                "processes": s.processes,
            })).collect::<Vec<_>>(),
        });
        println!("{value}");
        return ExitCode::SUCCESS;
    }
    if machines.is_empty() && scan.unreadable.is_empty() {
        println!("no simulated machine (amdgpu-criu sim run starts one)");
        return ExitCode::SUCCESS;
    }
    for (record, status) in &machines {
        let what = match &record.started_for {
            StartedFor::Run(program) => format!("running {}", program.join(" ")),
            StartedFor::Restore(dir) => format!("restored from {}", dir.display()),
        };
        println!(
            "{} served by pid {}, {what}; output: {}",
            record.machine,
            record.server_pid,
            record.output.as_ref().map_or_else(
                || "the standard output of its `sim run`".to_owned(),
                |p| p.display().to_string()
            )
        );
        if status.processes.is_empty() {
            println!("  no process");
            continue;
        }
        println!(
            "  {:>7}  {:<9} {:<16} {:>5} {:>6}  GPUS (seen -> here)",
            "PID", "STATE", "NAME", "BOS", "QUEUES"
        );
        for p in &status.processes {
            let (bos, queues, gpus) = match &p.gpu {
                Some(g) => (
                    g.bos.to_string(),
                    g.queues.to_string(),
                    g.gpus
                        .iter()
                        .map(|m| format!("{}->{}", gpu_id(m.seen), gpu_id(m.local)))
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                None => ("-".into(), "-".into(), "no GPU state".into()),
            };
            println!(
                "  {:>7}  {:<9} {:<16} {:>5} {:>6}  {gpus}",
                p.pid, p.state, p.name, bos, queues
            );
        }
    }
    ExitCode::SUCCESS
}

/// Runs `sim stop`.
pub fn stop(args: StopArgs) -> ExitCode {
    let scan = registry::scan();
    let machines = scan.machines;
    let mut chosen: Vec<MachineRecord> = Vec::new();
    let mut code = ExitCode::SUCCESS;
    if args.all {
        chosen = machines;
        for pid in scan.unreadable {
            // Its control socket may speak another protocol: a signal
            // stops it the same way.
            if let Some(p) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
            }
            let dir = registry::base().join(pid.to_string());
            let deadline = Instant::now() + STOP_GRACE + Duration::from_secs(5);
            while dir.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if dir.exists() {
                code = Failure::failed(format!("the machine served by pid {pid} has not ended"))
                    .report("stop", false);
            } else {
                println!("stopped the machine served by pid {pid}");
            }
        }
    } else {
        for pid in &args.pids {
            let Some(m) = machines
                .iter()
                .find(|m| procs::is_below(*pid, m.server_pid))
            else {
                return Failure::usage(format!(
                    "pid {pid} is on no simulated machine of this user (`amdgpu-criu sim ps` lists them)"
                ))
                .report("stop", false);
            };
            if !chosen.contains(m) {
                chosen.push(m.clone());
            }
        }
    }
    for m in &chosen {
        let processes = control::status(m).map(|s| s.processes.len()).unwrap_or(0);
        if let Err(e) = control::stop(m) {
            code = Failure::failed(format!(
                "the machine served by pid {} does not answer: {e}",
                m.server_pid
            ))
            .report("stop", false);
            continue;
        }
        // The grace its processes have, then a little for it to clean up.
        let deadline = Instant::now() + STOP_GRACE + Duration::from_secs(5);
        let ended = || !m.live() && !m.dir().exists();
        while !ended() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !ended() {
            code = Failure::failed(format!(
                "the machine served by pid {} has not ended",
                m.server_pid
            ))
            .report("stop", false);
            continue;
        }
        println!(
            "stopped {} (served by pid {}) and its {}",
            m.machine,
            m.server_pid,
            plural(processes as u64, "process")
        );
    }
    code
}
