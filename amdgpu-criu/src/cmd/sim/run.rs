//! `sim run [--machine builtin:NAME|DIR] [--background] [--output FILE] --
//! PROGRAM ARGS`: serves a simulated machine and runs an unmodified,
//! dynamically linked ROCm program (and its children) on it.
//!
//! In the foreground this process serves the machine, prints the program's
//! pid and where its output goes (stderr), and exits with the program's
//! status once the program and everything it started have ended. With
//! `--background` a process of its own serves the machine (`sim serve`),
//! and this one prints the pid and exits.
//!
//! Also `sim serve --request JSON`, that background process: it serves,
//! tells its starter what it started (one JSON line, [`Report`]) and runs
//! until its machine ends.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;

use kfd_sim_host::Interposer;

use super::registry::StartedFor;
use super::server::{Ending, ExitStatus, Host, Report, Request, RunRequest, Started};
use super::Failure;
use crate::signals;

/// The machine `run` serves unless told.
pub const DEFAULT_MACHINE: &str = "builtin:single-gpu";

/// Arguments of `sim run`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu sim run -- rocminfo
  amdgpu-criu sim run --machine builtin:mi210-8gpu-2hive -- ./my_app --steps 100
  sudo amdgpu-criu sim run --background --machine builtin:pcie-2gpu --output app.log -- ./my_app
  sudo amdgpu-criu sim run --background --json -- python3 train.py | jq .pid

The program runs in a private mount namespace whose /dev holds stand-in
/dev/kfd and /dev/dri/renderD* nodes, with kfd-sim-preload's interposer
preloaded; its standard input is /dev/null. To checkpoint it, start it as
root and give it --output (or --background): CRIU cannot dump a program
writing to a terminal. Without root the namespace is made in a user
namespace, and checkpoints are not possible.

Exit status: in the foreground, the program's (128 + N when signal N ended
it); with --background 0 once it runs; 2 usage errors, 3 this host cannot
run it (the interposer, namespaces, the stand-in device)")]
pub struct Args {
    /// The simulated machine: a built-in machine `builtin:NAME` or a sysfs
    /// topology tree (the directory holding `nodes/`).
    #[arg(long, value_name = "builtin:NAME|DIR", default_value = DEFAULT_MACHINE, value_parser = crate::machine::MachineParser, hide_possible_values = true)]
    pub machine: String,
    /// The machine as another host numbers it: other gpu_ids, node order,
    /// render minors and hive ids, picked by SEED.
    #[arg(long, value_name = "SEED")]
    pub renumber: Option<u64>,
    /// Start the program, print its pid and return; a process of its own
    /// serves the machine until the program and its children end (or `sim
    /// stop`).
    #[arg(long)]
    pub background: bool,
    /// Append the program's standard output and error to FILE (default: the
    /// terminal in the foreground, `amdgpu-criu-sim.out` in the current
    /// directory with --background, as nohup does).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print one JSON object (`pid`, `machine`, `served_by`, `output`)
    /// on stdout; with --background only.
    #[arg(long, requires = "background")]
    pub json: bool,
    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub program: Vec<String>,
}

/// Arguments of `sim serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// What to serve for ([`Request`] as JSON).
    #[arg(long)]
    pub request: String,
}

/// The background output file's name.
const NOHUP_OUTPUT: &str = "amdgpu-criu-sim.out";

/// `program` as a path to execute: as given when it holds a `/`, else the
/// first executable of that name on `PATH`.
fn resolve(program: &str) -> Result<PathBuf, Failure> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = PathBuf::from(program);
        return if executable(&path) {
            std::path::absolute(&path).map_err(|e| Failure::usage(format!("{program}: {e}")))
        } else {
            Err(Failure::usage(format!(
                "{program}: no such executable file"
            )))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
        .ok_or_else(|| Failure::usage(format!("{program}: not found on PATH")))
}

/// An absolute `path` (relative to the current directory).
fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

/// Runs `sim run`.
pub fn run(args: Args) -> ExitCode {
    match execute(args) {
        Ok(code) => code,
        Err((failure, json)) => failure.report("run", json),
    }
}

fn execute(args: Args) -> Result<ExitCode, (Failure, bool)> {
    let json = args.json;
    let fail = |f: Failure| (f, json);
    // A bare built-in name is taken (with a hint) as `builtin:NAME`.
    let machine = crate::machine::Machine::parse("sim run", &args.machine)
        .map_err(|e| fail(Failure::usage(e)))?
        .label();
    let resolved = resolve(&args.program[0]).map_err(fail)?;
    let output = match (&args.output, args.background) {
        (Some(path), _) => Some(absolute(path).map_err(fail)?),
        (None, true) => Some(absolute(Path::new(NOHUP_OUTPUT)).map_err(fail)?),
        (None, false) => None,
    };
    let interposer = Interposer::find().map_err(|e| fail(Failure::prerequisite(e)))?;
    let mut program = args.program.clone();
    program[0] = resolved.display().to_string();
    let request = RunRequest {
        machine,
        renumber: args.renumber,
        program,
        output,
    };
    let stops = signals::block(None).map_err(|e| fail(Failure::prerequisite(e)))?;
    if args.background {
        let report = start_server(&Request::Run(request), &stops).map_err(fail)?;
        return match report {
            Report::Started(started) => {
                print_started(&started, json);
                Ok(ExitCode::SUCCESS)
            }
            Report::Failed(failure) => Err(fail(failure)),
            Report::Restored(_) => Err(fail(Failure::failed(
                "the serving process restored instead of running",
            ))),
        };
    }
    let mut host = Host::open(
        &request.machine,
        request.renumber,
        StartedFor::Run(args.program.clone()),
        request.output.clone(),
    )
    .map_err(fail)?;
    let pid = host.start_program(&request, &interposer).map_err(fail)?;
    crate::out::note(&format!(
        "amdgpu-criu sim run: pid {pid} on {} (served by pid {}); output: {}",
        host.label(),
        std::process::id(),
        request.output.as_ref().map_or_else(
            || "the standard output and error of this command".to_owned(),
            |p| p.display().to_string()
        )
    ));
    let mut status = None;
    let ending = host.serve(stops, |_, exited, s| {
        if exited == pid {
            status = Some(s);
        }
    });
    Ok(match (ending, status) {
        (Ending::Stopped(signal), _) => {
            crate::out::note(&format!(
                "amdgpu-criu sim run: stopped by {}; the machine and its processes are gone",
                if signal == 0 {
                    "`sim stop`"
                } else {
                    signals::name(signal)
                }
            ));
            ExitCode::from(if signal == 0 { 143 } else { 128 + signal as u8 })
        }
        (Ending::Done, Some(s)) => {
            if let ExitStatus::Signal(n) = s {
                crate::out::note(&format!(
                    "amdgpu-criu sim run: pid {pid} was killed by signal {n}"
                ));
            }
            ExitCode::from(u8::try_from(s.shell_code()).unwrap_or(1))
        }
        // The program is not this process's child any more (CRIU dumped
        // and ended it): its tree is gone.
        (Ending::Done, None) => {
            crate::out::note(&format!(
                "amdgpu-criu sim run: pid {pid} was checkpointed and ended (restore it with `sim restore`)"
            ));
            ExitCode::SUCCESS
        }
    })
}

fn print_started(started: &Started, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({
                "pid": started.pid,
                "machine": started.machine,
                "served_by": started.served_by,
                "output": started.output,
            })
        );
        return;
    }
    println!(
        "pid {} on {} (served by pid {}); output: {}",
        started.pid,
        started.machine,
        started.served_by,
        started
            .output
            .as_ref()
            .map_or_else(|| "none".to_owned(), |p| p.display().to_string())
    );
}

/// Starts `sim serve` for `request` in a session of its own and waits for
/// its report; a signal of `stops` meanwhile stops it.
pub fn start_server(request: &Request, stops: &mpsc::Receiver<i32>) -> Result<Report, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::prerequisite(format!("cannot find this program: {e}")))?;
    let text = serde_json::to_string(request).map_err(Failure::prerequisite)?;
    let mut command = Command::new(exe);
    command
        .arg0("amdgpu-criu")
        .args(["sim", "serve", "--request"])
        .arg(text)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    kfd_sim_host::new_session(&mut command);
    kfd_sim_host::start_clean(&mut command);
    let mut child = command
        .spawn()
        .map_err(|e| Failure::prerequisite(format!("cannot start the serving process: {e}")))?;
    let server = child.id();
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = loop {
        if let Ok(signal) = stops.try_recv() {
            if let Some(pid) = i32::try_from(server)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let _ = child.wait();
            return Err(Failure::failed(format!(
                "stopped by {}: the serving process and what it started are gone",
                signals::name(signal)
            )));
        }
        match rx.recv_timeout(std::time::Duration::from_millis(50)) {
            Ok(line) => break line,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break String::new(),
        }
    };
    if line.trim().is_empty() {
        let status = child.wait().ok();
        return Err(Failure::prerequisite(format!(
            "the serving process (pid {server}) ended without a report ({status:?})"
        )));
    }
    // It runs on: a child of no one once this process exits.
    std::mem::forget(child);
    serde_json::from_str(&line).map_err(|e| {
        Failure::prerequisite(format!(
            "the serving process's report is unreadable: {e}: {line}"
        ))
    })
}

/// Runs `sim serve`.
pub fn serve(args: ServeArgs) -> ExitCode {
    let stops = match signals::block(None) {
        Ok(rx) => rx,
        Err(e) => {
            return report_once(
                &mut Some(std::io::stdout()),
                Report::Failed(Failure::prerequisite(e)),
            )
        }
    };
    let mut reporter = Some(std::io::stdout());
    let request: Request = match serde_json::from_str(&args.request) {
        Ok(r) => r,
        Err(e) => {
            return report_once(
                &mut reporter,
                Report::Failed(Failure::usage(format!("unreadable request: {e}"))),
            )
        }
    };
    match request {
        Request::Run(request) => serve_run(&request, stops, &mut reporter),
        Request::Restore(job) => super::restore::serve(&job, stops, &mut reporter),
    }
}

fn serve_run(
    request: &RunRequest,
    stops: mpsc::Receiver<i32>,
    reporter: &mut Option<std::io::Stdout>,
) -> ExitCode {
    let interposer = match Interposer::find() {
        Ok(i) => i,
        Err(e) => return report_once(reporter, Report::Failed(Failure::prerequisite(e))),
    };
    let started = (|| {
        let mut host = Host::open(
            &request.machine,
            request.renumber,
            StartedFor::Run(request.program.clone()),
            request.output.clone(),
        )?;
        let pid = host.start_program(request, &interposer)?;
        Ok::<_, Failure>((host, pid))
    })();
    let (host, pid) = match started {
        Ok(started) => started,
        Err(failure) => return report_once(reporter, Report::Failed(failure)),
    };
    report_once(
        reporter,
        Report::Started(Started {
            pid,
            machine: host.label().to_owned(),
            served_by: std::process::id(),
            output: request.output.clone(),
        }),
    );
    host.serve(stops, |_, _, _| {});
    ExitCode::SUCCESS
}

/// Writes `report` to the starter (once), then points this process's
/// standard output and error at `/dev/null`: nobody reads them any more.
pub fn report_once(reporter: &mut Option<std::io::Stdout>, report: Report) -> ExitCode {
    let code = match &report {
        Report::Failed(f) => ExitCode::from(f.code()),
        _ => ExitCode::SUCCESS,
    };
    if let Some(mut out) = reporter.take() {
        let text = serde_json::to_string(&report).unwrap_or_default();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
        if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
            let _ = rustix::stdio::dup2_stdout(null.as_fd());
            let _ = rustix::stdio::dup2_stderr(null.as_fd());
        }
    }
    code
}
