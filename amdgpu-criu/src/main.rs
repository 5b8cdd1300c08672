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

// Every command prints through `out`, which ends quietly on a closed pipe
// (`show | head`) instead of panicking as std's macro does.
macro_rules! println {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

// Stderr lines are copied to the `--log` file.
macro_rules! eprintln {
    ($($arg:tt)*) => {
        $crate::out::err_line(format_args!($($arg)*))
    };
}

mod cmd;
mod json64;
mod machine;
mod out;
mod signals;
mod topology_file;

#[derive(Parser)]
#[command(name = "amdgpu-criu", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More output: the plugin's and the engine's log lines down to debug
    /// (as CRIU's -v4).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only errors on stderr: no notes, hints or progress.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Append every stderr line, and every log line whatever the
    /// verbosity, to FILE (as CRIU's -o).
    #[arg(long, global = true, value_name = "FILE")]
    log: Option<std::path::PathBuf>,
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
    /// Can this machine checkpoint and restore GPU processes, and if not, why?
    Doctor(cmd::doctor::Args),
    /// The ROCm processes here: GPUs, VRAM and GTT, queues, and what a
    /// checkpoint would write.
    Ps(cmd::ps::Args),
    /// Resume the GPU queues of a process a killed CRIU left paused.
    Unpause(cmd::unpause::Args),
    /// Print an image message as JSON, every byte included (as `crit decode`).
    Decode(cmd::decode::DecodeArgs),
    /// Write an image message from the JSON `decode` prints, validated (as
    /// `crit encode`).
    Encode(cmd::decode::EncodeArgs),
    /// Write a standalone, C-plugin-compatible copy of an incremental or
    /// deduplicated image set.
    Flatten(cmd::flatten::Args),
    /// Run a ROCm program on a simulated machine; checkpoint and restore it
    /// with real CRIU.
    Sim(cmd::sim::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::completions::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = out::configure(cli.verbose, cli.quiet, cli.log.as_deref()) {
        let log = cli
            .log
            .as_deref()
            .unwrap_or(std::path::Path::new(""))
            .display();
        eprintln!("amdgpu-criu: --log {log}: {e}");
        return ExitCode::from(2);
    }
    // The plugin's and engine's lines outside the demo (which keeps them)
    // go to stderr at this level (criu-plugin-amdgpu's log module).
    let level = match (cli.verbose, cli.quiet) {
        (_, true) => Some("1"),
        (0, false) => None,
        _ => Some("4"),
    };
    if let Some(level) = level {
        // Before any thread exists.
        std::env::set_var("AMDGPU_PLUGIN_LOG_LEVEL", level);
    }
    match cli.command {
        Command::Map(args) => cmd::map::run(args),
        Command::Show(args) => cmd::show::run(args),
        Command::Verify(args) => cmd::verify::run(args),
        Command::Topology(args) => cmd::topology::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Doctor(args) => cmd::doctor::run_cmd(args),
        Command::Ps(args) => cmd::ps::run(args),
        Command::Unpause(args) => cmd::unpause::run(args),
        Command::Decode(args) => cmd::decode::run_decode(args),
        Command::Encode(args) => cmd::decode::run_encode(args),
        Command::Flatten(args) => cmd::flatten::run(args),
        Command::Sim(args) => cmd::sim::run(args),
        Command::Completions(args) => cmd::completions::run(args, Cli::command()),
    }
}
