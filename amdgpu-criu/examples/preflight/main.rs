//! Preflight for a cluster scheduler: which machines can restore this
//! checkpoint?
//!
//! ```text
//! cargo run -p amdgpu-criu --example preflight -- IMAGE_DIR MACHINE...
//! MACHINE = [NAME=]DIR | [NAME=]builtin:NAME
//! ```
//!
//! Reads and validates the checkpoint's `amdgpu-kfd-*.img` images with
//! `amdgpu-image`, rebuilds each process's checkpointed topology from the
//! image's device entries, parses each machine's KFD topology (a copy of its
//! `/sys/class/kfd/kfd/topology`, or a built-in machine) with
//! `amdgpu-topology`, and runs the plugin's GPU mapping with the `KFD_*_CHECK`
//! switches of the environment, without the plugin and without a GPU. Prints
//! per machine `compatible` with the GPU mapping of each process, or every
//! reason it is not.
//!
//! Exit status: 0 when at least one machine can restore the checkpoint, 1
//! when none can, 2 when the checkpoint cannot be read or on usage errors.

use std::path::PathBuf;
use std::process::ExitCode;

use amdgpu_checkpoint::options::{checks_only, Options};

mod preflight;

use preflight::{preflight, read_checkpoint, Machine, Report, Verdict};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(dir), machines) = (args.next().map(PathBuf::from), args.collect::<Vec<_>>()) else {
        eprintln!("usage: preflight IMAGE_DIR [NAME=]DIR|builtin:NAME...");
        return ExitCode::from(2);
    };
    if machines.is_empty() {
        eprintln!("usage: preflight IMAGE_DIR [NAME=]DIR|builtin:NAME...");
        return ExitCode::from(2);
    }
    let processes = match read_checkpoint(&dir) {
        Ok(processes) => processes,
        Err(e) => {
            eprintln!("preflight: {e}");
            return ExitCode::from(2);
        }
    };
    // The KFD_*_CHECK switches only, read as the plugin reads them: an
    // invalid value keeps its check on and is reported.
    let env = checks_only(|name| std::env::var(name).ok());
    let (options, invalid) = match Options::default().read(env, &[]) {
        Ok((options, invalid)) => (*options.checks(), invalid),
        Err(e) => {
            eprintln!("preflight: {e}");
            return ExitCode::from(2);
        }
    };
    for warning in invalid {
        eprintln!("preflight: warning: {warning}");
    }
    let gpus = processes.first().map_or(0, |p| p.topology.gpus().count());
    println!(
        "checkpoint {}: {} process(es), {gpus} GPU(s) in the first",
        dir.display(),
        processes.len()
    );
    let mut any = false;
    for arg in &machines {
        let machine = Machine::load(arg);
        let verdict = preflight(&processes, &machine, &options);
        any |= matches!(verdict, Verdict::Compatible(_));
        print!(
            "{}",
            Report {
                machine: &machine,
                processes: &processes,
                verdict: &verdict,
            }
        );
    }
    if any {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
