//! `amdgpu-criu verify DIR`: validate a whole image set, checksums included,
//! and list every problem. Exit 0 when clean, 1 when problems were found, 2
//! on usage or I/O errors. Reads only.

use std::path::PathBuf;
use std::process::ExitCode;

use amdgpu_image::{verify_set, DirStore, ReadLimits};

/// Arguments of `verify`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu verify /var/lib/ckpt
  amdgpu-criu verify /var/lib/ckpt && criu restore -D /var/lib/ckpt

Exit status: 0 clean, 1 problems found, 2 unreadable or no amdgpu images")]
pub struct Args {
    /// The image directory.
    pub dir: PathBuf,
}

/// Runs `verify`.
pub fn run(args: Args) -> ExitCode {
    let report = match DirStore::open_dir(&args.dir)
        .and_then(|store| verify_set(&store, ReadLimits::default()))
    {
        Ok(report) => report,
        Err(e) => {
            eprintln!("amdgpu-criu verify: {e}");
            return ExitCode::from(2);
        }
    };
    // A dump writes each file as `.NAME.part-*` and renames it when done:
    // one left over means the dump was interrupted (killed, Ctrl-C) and the
    // set is incomplete whatever the finished files say.
    let unfinished = unfinished_files(&args.dir);
    for name in &unfinished {
        println!(
            "incomplete image set: {name} was never finished (the dump was interrupted); \
             do not restore from this directory"
        );
    }
    for problem in &report.problems {
        println!("{problem}");
    }
    let summary = format!(
        "{} files, {} bos read ({} bytes), {} checksums verified",
        report.files, report.bos_read, report.bytes_read, report.checksums_verified
    );
    if !unfinished.is_empty() {
        println!(
            "{summary}: incomplete, {} unfinished files, {} problems",
            unfinished.len(),
            report.problems.len()
        );
        return ExitCode::from(1);
    }
    if report.files == 0 {
        eprintln!(
            "amdgpu-criu verify: {}: no amdgpu image files",
            args.dir.display()
        );
        return ExitCode::from(2);
    }
    if report.is_clean() {
        println!("{summary}: clean");
        ExitCode::SUCCESS
    } else {
        println!("{summary}: {} problems", report.problems.len());
        ExitCode::from(1)
    }
}

/// Names of the amdgpu image files in `dir` that a writer started and never
/// finished (`.amdgpu-*.part-*`), sorted.
fn unfinished_files(dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".amdgpu-") && n.contains(".img.part-"))
        .collect();
    names.sort();
    names
}
