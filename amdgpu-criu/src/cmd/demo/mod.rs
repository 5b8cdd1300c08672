//! `amdgpu-criu demo`: a simulated ROCm process is checkpointed through the
//! real plugin code into an image directory and restored on another
//! (simulated) machine, then checked byte for byte and step for step.
//!
//! The machines are `kfd-sim` simulators built from a built-in topology or a
//! sysfs tree; CRIU is the plugin crate's host emulator, which calls the
//! plugin's hooks in CRIU's order and process roles. The workload comes from
//! `kfd_sim::workload`; after its checkpoint it runs on a few steps (as
//! with `criu dump --leave-running`) so the restored process can be
//! compared with where it would have been, then ends.
//! The application's own CPU memory (where its USERPTR BOs point) is its
//! process's, as on a real host: the emulated CRIU carries it in its pages
//! dump and maps it back at the same addresses on the restoring machine, so
//! every workload moves between machines.
//! `--inject` arms a `kfd-sim` fault so a failure can be rehearsed end to end.
//!
//! Verified means: every restore hook answered success, every device mapping
//! was translated, the restored process holds the same BOs at the same
//! handles and addresses with identical contents, queues, events and SVM
//! ranges, it keeps running (N more steps end with the fingerprint the checkpointed process reached
//! after N steps),
//! and `verify_set` finds the image set clean.
//!
//! This module decides nothing the plugin decides: it only sets the stage,
//! measures and compares. It never touches real devices.

use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;

use criu_plugin_amdgpu::log::{Capture, Level};

mod args;
mod budget;
mod cleanup;
mod exchange;
mod hsakmt;
mod images;
mod machine;
mod progress;
mod report;
mod rocr_copy;
mod round_trip;
mod verification;
mod workload;

pub use args::Args;

use report::Report;
use round_trip::execute;

/// Steps the workload makes before the checkpoint.
const STEPS_BEFORE: usize = 3;
/// Steps the checkpointed process makes after its checkpoint, and the
/// restored process after the restore.
const STEPS_AFTER: usize = 4;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// How the demo ended early.
enum Stop {
    /// Bad arguments or an unusable topology: exit 2.
    Usage(String),
    /// The checkpoint or restore failed, or verification found differences:
    /// exit 1 with the report so far.
    Failed(String),
    /// The restore machine cannot take a checkpoint of the checkpointing
    /// one, known before anything ran: exit 2 with the report (its
    /// `reasons`).
    Refused(String),
}

/// Runs `demo`: 0 when verified, 1 when a step failed or the result differs,
/// 2 on usage errors.
pub fn run(args: Args) -> ExitCode {
    if args.workload == workload::WorkloadKind::Hsakmt {
        return hsakmt::run(&args);
    }
    if args.workload == workload::WorkloadKind::RocrCopy {
        return rocr_copy::run(&args);
    }
    // Before any thread exists: they inherit the blocked signals.
    if let Err(e) = cleanup::install() {
        eprintln!("amdgpu-criu demo: {e}");
        return ExitCode::from(2);
    }
    // --quiet: no progress either.
    let quiet = crate::out::quiet();
    let show_bar = !args.json && !quiet && std::io::stderr().is_terminal();
    progress::lines_without_terminal(!args.json && !quiet && !show_bar);
    let bar = progress::bar(show_bar);
    // The plugin logs to stderr outside CRIU; the demo keeps its lines and
    // shows the warnings and errors when something fails.
    let capture = Capture::start();
    let mut report = Report::default();
    let outcome = execute(&args, &bar, &mut report);
    bar.finish_and_clear();
    let captured = capture.lines();
    drop(capture);
    // Every line to the --log file; with -v, to stderr as well (else the
    // warnings and errors are shown when something fails).
    let verbose = crate::out::verbose() > 0;
    for (level, line) in &captured {
        let text = format!(
            "{}{line}",
            criu_plugin_amdgpu::log::line_start(*level, None)
        );
        crate::out::log_only(&text);
        if verbose {
            let _ = writeln!(std::io::stderr().lock(), "{text}");
        }
    }
    let plugin_lines: Vec<String> = captured
        .into_iter()
        .filter(|(level, _)| *level <= Level::Warn && !verbose)
        .map(|(_, line)| format!("{}{line}", criu_plugin_amdgpu::log::PREFIX))
        .collect();
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
        Err(Stop::Refused(message)) => {
            report.verified = false;
            report.error = Some(message);
            ExitCode::from(2)
        }
    };
    if let Err(e) = report.print(args.json) {
        eprintln!("amdgpu-criu demo: cannot format the result as JSON: {e}");
        return ExitCode::from(2);
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
