//! `amdgpu-criu`: inspect topologies and checkpoint images of the amdgpu CRIU
//! plugin, check whether a checkpoint can be restored here, and run the
//! simulated end-to-end demo.
//!
//! Each subcommand lives in its own module under `cmd/`, with an `Args` struct
//! (clap) and a `run` function returning the process exit code. Exit codes:
//! 0 success, 1 a negative answer (incompatible, problems found), 2 usage or
//! read errors.

// Unsafe code only in the demo's signal handling (cmd/demo/cleanup.rs).
#![deny(unsafe_code)]

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod cmd;

#[derive(Parser)]
#[command(name = "amdgpu-criu", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Could a process checkpointed on one topology be restored on another?
    Map(cmd::map::Args),
    /// Print every message of an image set or image file.
    Show(cmd::show::Args),
    /// Validate an image set, checksums included, and list every problem.
    Verify(cmd::verify::Args),
    /// Print a KFD topology: nodes, gpu_ids, VRAM, render minors, hives, links.
    Topology(cmd::topology::Args),
    /// Could the checkpoint in an image directory be restored here?
    Check(cmd::check::Args),
    /// Checkpoint a simulated GPU process through the plugin and restore it
    /// on another simulated machine, verified.
    Demo(cmd::demo::Args),
    /// Resume the GPU queues of a process a killed CRIU left paused.
    Unpause(cmd::unpause::Args),
    /// Write a standalone, C-plugin-compatible copy of an incremental or
    /// deduplicated image set.
    Flatten(cmd::flatten::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::completions::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Map(args) => cmd::map::run(args),
        Command::Show(args) => cmd::show::run(args),
        Command::Verify(args) => cmd::verify::run(args),
        Command::Topology(args) => cmd::topology::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Unpause(args) => cmd::unpause::run(args),
        Command::Flatten(args) => cmd::flatten::run(args),
        Command::Completions(args) => cmd::completions::run(args, Cli::command()),
    }
}
