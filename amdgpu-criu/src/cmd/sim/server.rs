//! The process that serves one simulated machine: `sim run` in the
//! foreground, or the background process `sim run --background` and `sim
//! restore` start (`sim serve`, not for people).
//!
//! It serves the machine ([`kfd_sim_host::ServedMachine`]), records it in
//! the registry, answers its control socket, starts what it was started
//! for (the program, or CRIU restoring a checkpoint) in a private mount
//! namespace with the stand-in device nodes, and is the subreaper of
//! everything below it: orphans (a restored tree once CRIU is gone) become
//! its children. It ends when it has no process left and nobody holds it
//! (see [`super::control`]), or when asked to stop (`sim stop`, `SIGINT`,
//! `SIGTERM`, `SIGHUP`): it then sends `SIGTERM` to every process below it,
//! `SIGKILL` to those left after [`STOP_GRACE`]. Ending, it removes its
//! directory, so nothing of it is left in the registry, `/tmp` or
//! `/dev/shm`; its mount namespaces go with their last process.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kfd_sim_host::criu::{restore_command, PluginDir, RestoreRequest};
use kfd_sim_host::{
    new_session, start_clean, streams_in_namespace, Criu, DeviceNamespace, DevicePlan, Interposer,
    Listen, MachineSpec, Privilege, ServedMachine, StandIn,
};
use rustix::process::{Pid, Signal, WaitOptions};
use serde::{Deserialize, Serialize};

use super::control::{GpuState, ServedProcess, Status};
use super::registry::{self, MachineDir, MachineRecord, StartedFor};
use super::{procs, Failure};

/// How long processes have between `SIGTERM` and `SIGKILL` when the machine
/// stops.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// What a serving process is started for.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// Run a program.
    Run(RunRequest),
    /// Restore a checkpoint with CRIU.
    Restore(RestoreJob),
}

/// `sim run`'s program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRequest {
    /// `builtin:NAME` or a topology directory.
    pub machine: String,
    /// Renumbered with this seed.
    pub renumber: Option<u64>,
    /// The program and its arguments.
    pub program: Vec<String>,
    /// Where its standard output and error go (appended); `None`: this
    /// process's own.
    pub output: Option<PathBuf>,
}

/// `sim restore`'s checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestoreJob {
    /// `builtin:NAME` or a topology directory.
    pub machine: String,
    /// Renumbered with this seed.
    pub renumber: Option<u64>,
    /// The images directory (absolute).
    pub images: PathBuf,
    /// `KFD_DEVICE_MAP` for the plugin.
    pub device_map: Option<String>,
    /// The CRIU to run.
    pub criu: PathBuf,
    /// This project's plugin.
    pub amdgpu_plugin: PathBuf,
    /// The connection plugin.
    pub remote_plugin: PathBuf,
    /// The interposer.
    pub interposer: PathBuf,
}

/// What the serving process tells whoever started it, once.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Report {
    /// The program runs.
    Started(Started),
    /// CRIU restored the checkpoint.
    Restored(Restored),
    /// Nothing runs; the serving process ends.
    Failed(Failure),
}

/// A started program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Started {
    /// Its pid.
    pub pid: u32,
    /// The machine.
    pub machine: String,
    /// The serving process.
    pub served_by: u32,
    /// Where its output goes (`None`: the terminal of `sim run`).
    pub output: Option<PathBuf>,
}

/// A restored checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Restored {
    /// The restored root's pid.
    pub pid: u32,
    /// The machine.
    pub machine: String,
    /// The serving process.
    pub served_by: u32,
    /// The restored processes, with their GPUs.
    pub processes: Vec<ServedProcess>,
    /// CRIU's log.
    pub log: PathBuf,
}

/// The state threads share with the main loop.
#[derive(Default)]
struct Shared {
    /// Open `hold` connections.
    holds: Mutex<usize>,
    changed: Condvar,
    /// A stop was asked for (by this signal, 0 for `sim stop`).
    stopping: AtomicBool,
    stop_signal: AtomicU32,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A serving process's machine and everything it started.
pub struct Host {
    // Dropped first: the machine (no more clients), then its directory.
    machine: ServedMachine,
    shared: Arc<Shared>,
    label: String,
    privilege: Privilege,
    stand_in: StandIn,
    next_namespace: u32,
    dir: MachineDir,
}

/// How a serving process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Its processes ended.
    Done,
    /// Stopped by this signal (0: `sim stop`).
    Stopped(i32),
}

/// A child's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// `exit(N)`.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl ExitStatus {
    fn of(status: rustix::process::WaitStatus) -> ExitStatus {
        match (status.exit_status(), status.terminating_signal()) {
            (Some(code), _) => ExitStatus::Code(code),
            (None, Some(signal)) => ExitStatus::Signal(signal),
            (None, None) => ExitStatus::Code(0),
        }
    }

    /// The shell's number for it: the code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }
}

impl Host {
    /// Serves `machine` for `started_for` (see the module docs); signals
    /// must already be blocked ([`crate::signals::block`]).
    pub fn open(
        machine: &str,
        renumber: Option<u64>,
        started_for: StartedFor,
        output: Option<PathBuf>,
    ) -> Result<Host, Failure> {
        let privilege = Privilege::of_this_process();
        let stand_in = match privilege {
            Privilege::Root => StandIn::for_criu(),
            Privilege::User => StandIn::for_user(),
        }
        .map_err(Failure::prerequisite)?;
        let named = machine.to_owned();
        let spec = MachineSpec::parse(machine)
            .map_err(Failure::usage)?
            .renumbered(renumber);
        let label = spec.label();
        let sim = spec.build(Default::default()).map_err(Failure::usage)?;
        let dir = MachineDir::create().map_err(|e| {
            Failure::prerequisite(format!(
                "cannot create a directory in {}: {e} (set {} to another directory)",
                registry::base().display(),
                registry::DIR_VAR
            ))
        })?;
        let machine = ServedMachine::serve(sim, label.clone(), dir.path(), Listen::Abstract, None)
            .map_err(Failure::prerequisite)?;
        let me = std::process::id();
        rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(|e| {
            Failure::prerequisite(format!("cannot become the subreaper of its processes: {e}"))
        })?;
        let host = Host {
            machine,
            shared: Arc::default(),
            label,
            privilege,
            stand_in,
            next_namespace: 0,
            dir,
        };
        host.listen()?;
        let endpoint = host.machine.endpoint();
        let record = MachineRecord {
            dir: host.dir.path().to_path_buf(),
            server_pid: me,
            server_start: registry::start_time(me).unwrap_or(0),
            uid: rustix::process::getuid().as_raw(),
            machine: host.label.clone(),
            spec: named,
            renumber,
            address: endpoint.address,
            topology: endpoint.topology,
            shm: endpoint.shm,
            render_minors: endpoint.render_minors,
            started_for,
            output,
        };
        registry::write(host.dir.path(), &record).map_err(|e| {
            Failure::prerequisite(format!(
                "cannot write the machine's record in {}: {e}",
                host.dir.path().display()
            ))
        })?;
        Ok(host)
    }

    /// The machine's label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Answers the control socket on a thread of its own.
    fn listen(&self) -> Result<(), Failure> {
        let path = super::control::socket_path(self.dir.path());
        let listener = UnixListener::bind(&path).map_err(|e| {
            Failure::prerequisite(format!("cannot listen on {}: {e}", path.display()))
        })?;
        let shared = Arc::clone(&self.shared);
        let sim = self.machine.sim().clone();
        std::thread::Builder::new()
            .name("sim-control".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let shared = Arc::clone(&shared);
                    let sim = sim.clone();
                    let _ = std::thread::Builder::new()
                        .name("sim-control-request".into())
                        .spawn(move || answer(stream, &shared, &sim));
                }
            })
            .map_err(|e| Failure::prerequisite(format!("cannot start a thread: {e}")))?;
        Ok(())
    }

    /// A new private `/dev` with the machine's stand-in nodes.
    fn namespace(&mut self) -> Result<DeviceNamespace, Failure> {
        self.next_namespace += 1;
        let staging = self.dir.path().join(format!("dev-{}", self.next_namespace));
        std::fs::create_dir(&staging).map_err(|e| {
            Failure::prerequisite(format!("cannot create {}: {e}", staging.display()))
        })?;
        let endpoint = self.machine.endpoint();
        DeviceNamespace::new(&DevicePlan {
            stand_in: self.stand_in.clone(),
            render_minors: endpoint.render_minors,
            shm: endpoint.shm,
            staging,
            privilege: self.privilege,
        })
        .map_err(Failure::prerequisite)
    }

    /// Starts `request.program` on the machine; its pid.
    pub fn start_program(
        &mut self,
        request: &RunRequest,
        interposer: &Interposer,
    ) -> Result<u32, Failure> {
        let namespace = self.namespace()?;
        let (program, args) = request
            .program
            .split_first()
            .ok_or_else(|| Failure::usage("no program to run"))?;
        let mut command = Command::new(program);
        command.args(args);
        if let Some(path) = &request.output {
            // Checked here, where a failure is easy to tell.
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| Failure::usage(format!("--output {}: {e}", path.display())))?;
        }
        interposer.configure(&mut command, &self.machine.endpoint());
        namespace.configure(&mut command);
        streams_in_namespace(&mut command, request.output.as_deref())
            .map_err(Failure::prerequisite)?;
        new_session(&mut command);
        start_clean(&mut command);
        let child = command
            .spawn()
            .map_err(|e| spawn_failure(program, e, self.privilege))?;
        Ok(child.id())
    }

    /// Starts CRIU restoring `job.images` on the machine; CRIU's pid and
    /// where it writes the restored root's pid.
    pub fn start_restore(&mut self, job: &RestoreJob) -> Result<(u32, PathBuf), Failure> {
        kfd_sim_host::shm::put_back(&job.images, self.machine.shm_dir())
            .map_err(Failure::prerequisite)?;
        let namespace = self.namespace()?;
        let plugins = PluginDir::assemble(
            &self.dir.path().join("plugins"),
            &job.amdgpu_plugin,
            &job.remote_plugin,
        )
        .map_err(Failure::prerequisite)?;
        // The directory lives as long as the machine's.
        let plugins_path = plugins.path().to_path_buf();
        std::mem::forget(plugins);
        let pidfile = self.dir.path().join("restore.pid");
        let criu = Criu {
            path: job.criu.clone(),
            version: None,
        };
        let mut command = restore_command(
            &criu,
            &plugins_path,
            &Interposer::at(&job.interposer),
            &self.machine.endpoint(),
            &namespace,
            &RestoreRequest {
                images: job.images.clone(),
                pidfile: pidfile.clone(),
                device_map: job.device_map.clone(),
            },
        );
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let child = command
            .spawn()
            .map_err(|e| spawn_failure("criu", e, self.privilege))?;
        Ok((child.id(), pidfile))
    }

    /// The processes below this one, with what the machine holds of each.
    pub fn status(&self) -> Status {
        status_of(self.machine.sim())
    }

    /// Runs until the machine ends (see the module docs): `on_exit` sees
    /// each child's end; `stops` delivers the signals that stop it.
    pub fn serve(
        &self,
        stops: std::sync::mpsc::Receiver<i32>,
        mut on_exit: impl FnMut(&Host, u32, ExitStatus),
    ) -> Ending {
        {
            let shared = Arc::clone(&self.shared);
            let _ = std::thread::Builder::new()
                .name("sim-stop".into())
                .spawn(move || {
                    if let Ok(signal) = stops.recv() {
                        stop(&shared, signal);
                    }
                });
        }
        loop {
            match rustix::process::wait(WaitOptions::empty()) {
                Ok(Some((pid, status))) => {
                    let pid = pid.as_raw_nonzero().get().unsigned_abs();
                    on_exit(self, pid, ExitStatus::of(status));
                    continue;
                }
                Ok(None) | Err(rustix::io::Errno::INTR) => continue,
                Err(_) => {} // ECHILD: nothing left below this process
            }
            let mut holds = self.shared.lock();
            while *holds > 0 && !self.shared.stopping.load(Ordering::Acquire) {
                holds = self
                    .shared
                    .changed
                    .wait(holds)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            break;
        }
        if self.shared.stopping.load(Ordering::Acquire) {
            Ending::Stopped(self.shared.stop_signal.load(Ordering::Acquire) as i32)
        } else {
            Ending::Done
        }
    }
}

/// Sends `SIGTERM` to every process below this one, `SIGKILL` to those
/// left after [`STOP_GRACE`].
fn stop(shared: &Shared, signal: i32) {
    if shared.stopping.swap(true, Ordering::AcqRel) {
        return;
    }
    shared
        .stop_signal
        .store(u32::try_from(signal).unwrap_or(0), Ordering::Release);
    {
        let _holds = shared.lock();
        shared.changed.notify_all();
    }
    let me = std::process::id();
    signal_all(me, Signal::TERM);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if procs::descendants(me).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signal_all(me, Signal::KILL);
}

fn signal_all(root: u32, signal: Signal) {
    for p in procs::descendants(root) {
        if let Some(pid) = i32::try_from(p.pid).ok().and_then(Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// The machine's processes (every process below this one).
fn status_of(sim: &kfd_sim::Sim) -> Status {
    Status {
        processes: procs::descendants(std::process::id())
            .into_iter()
            .map(|p| ServedProcess {
                gpu: GpuState::of(sim, p.pid),
                pid: p.pid,
                ppid: p.ppid,
                name: p.name,
                state: super::control::state_word(p.state).to_owned(),
            })
            .collect(),
    }
}

/// Answers one control connection.
fn answer(stream: UnixStream, shared: &Shared, sim: &kfd_sim::Sim) {
    let Ok(peer) = rustix::net::sockopt::socket_peercred(&stream) else {
        return;
    };
    let me = rustix::process::getuid();
    if peer.uid != me && !peer.uid.is_root() {
        return;
    }
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut out = &stream;
    match line.trim() {
        "status" => {
            let text = serde_json::to_string(&status_of(sim)).unwrap_or_default();
            let _ = writeln!(out, "{text}");
        }
        "hold" => {
            *shared.lock() += 1;
            let _ = writeln!(out, "ok");
            // Until the holder closes its end.
            let mut rest = String::new();
            while reader.read_line(&mut rest).is_ok_and(|n| n > 0) {
                rest.clear();
            }
            let mut holds = shared.lock();
            *holds -= 1;
            shared.changed.notify_all();
        }
        "stop" => {
            let _ = writeln!(out, "ok");
            stop(shared, 0);
        }
        _ => {}
    }
}

fn spawn_failure(program: &str, e: std::io::Error, privilege: Privilege) -> Failure {
    // The namespace steps run before exec; their errors arrive here too.
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            Failure::usage(format!("{program}: no such program (not found on PATH)"))
        }
        std::io::ErrorKind::PermissionDenied if privilege == Privilege::User => {
            Failure::prerequisite(kfd_sim_host::HostError::Namespace {
                program: program.to_owned(),
                unprivileged: true,
                source: e,
            })
        }
        _ => Failure::prerequisite(kfd_sim_host::HostError::Namespace {
            program: program.to_owned(),
            unprivileged: privilege == Privilege::User,
            source: e,
        }),
    }
}

/// Reads the restored root's pid CRIU wrote.
pub fn restored_pid(pidfile: &Path) -> Option<u32> {
    std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()
}
