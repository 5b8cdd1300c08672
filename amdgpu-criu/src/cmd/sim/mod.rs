//! `amdgpu-criu sim`: run any ROCm program on a simulated machine, and
//! checkpoint and restore it with real CRIU and this project's plugin, so
//! a GPU application's checkpoint/restore can be tested without a GPU.
//!
//! | subcommand | module |
//! |---|---|
//! | `run` | [`run`](mod@run): serve a machine, start the program on it |
//! | `checkpoint` | [`checkpoint`]: `criu dump` of a program on a machine |
//! | `restore` | [`restore`]: `criu restore` on a new machine |
//! | `ps`, `stop` | [`ps`]: list the machines and end them |
//!
//! The machinery (the served machine, the private `/dev` with stand-in
//! device nodes, the interposer, CRIU) is `kfd_sim_host`'s; this module is
//! the command line, the process that serves a machine ([`server`]) and
//! the registry that lets one command find another's machines
//! ([`registry`], [`control`]).
//!
//! Exit statuses of every subcommand: 0 done; 1 the checkpoint or restore
//! failed (CRIU or the plugin refused, the program ended, the machine
//! cannot take the checkpoint, the program has no GPU state); 2 usage
//! errors; 3 this host cannot do it (no root, no CRIU, a missing library,
//! no namespaces). `run` in the foreground exits with its program's status.

use std::process::ExitCode;

use serde::{Deserialize, Serialize};

mod checkpoint;
mod control;
mod procs;
mod ps;
mod registry;
mod restore;
mod run;
mod server;

/// Arguments of `sim`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu sim run --machine builtin:mi210-8gpu-2hive -- rocminfo
  sudo amdgpu-criu sim run --background --machine builtin:pcie-2gpu --output app.log -- ./my_app
  sudo amdgpu-criu sim checkpoint 4242 --dir ./ckpt
  sudo amdgpu-criu sim restore --dir ./ckpt --machine builtin:mi210-8gpu-2hive
  amdgpu-criu sim ps
  amdgpu-criu sim stop --all

Checkpoint and restore need root (CRIU), and the program's machine served
by root. Exit status: 0 done, 1 the checkpoint or restore failed, 2 usage
errors, 3 this host cannot do it (root, CRIU, a library, namespaces); `run`
in the foreground exits with the program's status")]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Run a program on a simulated machine served for it.
    Run(run::Args),
    /// Checkpoint a program running on a simulated machine with real CRIU.
    Checkpoint(checkpoint::Args),
    /// Restore a checkpoint with real CRIU on a simulated machine.
    Restore(restore::Args),
    /// The simulated machines and their processes.
    Ps(ps::Args),
    /// End simulated machines and their processes.
    Stop(ps::StopArgs),
    /// Serve a machine in the background (started by `run --background`
    /// and `restore`).
    #[command(hide = true)]
    Serve(run::ServeArgs),
}

/// Runs `sim`.
pub fn run(args: Args) -> ExitCode {
    match args.command {
        Command::Run(args) => run::run(args),
        Command::Checkpoint(args) => checkpoint::run(args),
        Command::Restore(args) => restore::run(args),
        Command::Ps(args) => ps::run(args),
        Command::Stop(args) => ps::stop(args),
        Command::Serve(args) => run::serve(args),
    }
}

/// Why a subcommand did not do its work, and so its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The checkpoint or restore failed (1).
    Failed,
    /// A usage error (2).
    Usage,
    /// This host cannot do it (3).
    Prerequisite,
}

/// A subcommand's failure: what it says and its exit status.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    /// The kind, which makes the exit status.
    pub kind: FailureKind,
    /// The message (lowercase, says what to do).
    pub message: String,
    /// Lines that explain it (CRIU's and the plugin's errors, the
    /// mapping's reasons).
    #[serde(default)]
    pub details: Vec<String>,
}

impl Failure {
    fn new(kind: FailureKind, message: impl ToString) -> Failure {
        Failure {
            kind,
            message: message.to_string(),
            details: Vec::new(),
        }
    }

    /// The checkpoint or restore failed.
    pub fn failed(message: impl ToString) -> Failure {
        Failure::new(FailureKind::Failed, message)
    }

    /// A usage error.
    pub fn usage(message: impl ToString) -> Failure {
        Failure::new(FailureKind::Usage, message)
    }

    /// This host cannot do it.
    pub fn prerequisite(message: impl ToString) -> Failure {
        Failure::new(FailureKind::Prerequisite, message)
    }

    /// With these explaining lines.
    pub fn with_details(mut self, details: Vec<String>) -> Failure {
        self.details = details;
        self
    }

    /// The exit status.
    pub fn code(&self) -> u8 {
        match self.kind {
            FailureKind::Failed => 1,
            FailureKind::Usage => 2,
            FailureKind::Prerequisite => 3,
        }
    }

    /// Prints it on stderr (or as JSON on stdout) for `sim SUBCOMMAND`;
    /// its exit status.
    pub fn report(&self, subcommand: &str, json: bool) -> ExitCode {
        if json {
            let value = serde_json::json!({
                "ok": false,
                "error": self.message,
                "kind": self.kind,
                "details": self.details,
            });
            println!("{value}");
        }
        eprintln!("amdgpu-criu sim {subcommand}: {}", self.message);
        for line in &self.details {
            eprintln!("amdgpu-criu sim {subcommand}:   {line}");
        }
        ExitCode::from(self.code())
    }
}

/// `root` or why the checkpoint commands cannot run as this user.
fn require_root(subcommand: &str) -> Result<(), Failure> {
    if rustix::process::geteuid().is_root() {
        return Ok(());
    }
    Err(Failure::prerequisite(format!(
        "CRIU needs root (it ptraces, dumps and recreates processes and their \
         namespaces): run `sudo amdgpu-criu sim {subcommand} ...`; the program must run on \
         a machine served by root too (`sudo amdgpu-criu sim run ...`), which reads CRIU's \
         memory as a kernel does"
    )))
}
