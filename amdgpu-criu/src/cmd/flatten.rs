//! `amdgpu-criu flatten SRC DST`: write the amdgpu images of SRC (an
//! incremental dump whose chunks come from its `parent` chain, or a
//! deduplicated dump) into DST as a standalone set that the C plugin can
//! restore: every BO whole in its own pages file, no references, no parent.
//! Every chunk is verified as it is read, and DST is verified when written.
//! Exit 0 on success, 1 when DST does not verify, 2 on usage or read errors
//! (a missing, replaced or changed parent among them).

use std::path::PathBuf;
use std::process::ExitCode;

use amdgpu_image::chain::flatten;
use amdgpu_image::{verify_set, DirStore, ReadLimits};

/// Arguments of `flatten`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu flatten /var/lib/ckpt/3 /var/lib/ckpt/3-full
  amdgpu-criu flatten /var/lib/ckpt/dedup /tmp/for-c-plugin

Only the amdgpu files are written: CRIU's own images of an incremental
dump (made with CRIU's prev-images-dir option) keep needing their parent.

Exit status: 0 written and verified, 1 DST does not verify, 2 unreadable
input, a damaged chain, or DST not an empty directory")]
pub struct Args {
    /// The image directory to flatten (its `parent` link is followed).
    pub src: PathBuf,
    /// An existing, empty directory for the standalone set.
    pub dst: PathBuf,
}

/// Runs `flatten`.
pub fn run(args: Args) -> ExitCode {
    match std::fs::read_dir(&args.dst).map(|mut d| d.next().is_none()) {
        Ok(true) => {}
        Ok(false) => {
            eprintln!(
                "amdgpu-criu flatten: {}: not empty (flatten writes into an empty directory)",
                args.dst.display()
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("amdgpu-criu flatten: {}: {e}", args.dst.display());
            return ExitCode::from(2);
        }
    }
    let stores =
        DirStore::open_dir(&args.src).and_then(|src| Ok((src, DirStore::open_dir(&args.dst)?)));
    let (src, dst) = match stores {
        Ok(s) => s,
        Err(e) => {
            eprintln!("amdgpu-criu flatten: {e}");
            return ExitCode::from(2);
        }
    };
    let written = match flatten(&src, &dst, ReadLimits::default()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("amdgpu-criu flatten: {}: {e}", args.src.display());
            return ExitCode::from(2);
        }
    };
    if written.files == 0 {
        eprintln!(
            "amdgpu-criu flatten: {}: no amdgpu image files",
            args.src.display()
        );
        return ExitCode::from(2);
    }
    let report = match verify_set(&dst, ReadLimits::default()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("amdgpu-criu flatten: verifying {}: {e}", args.dst.display());
            return ExitCode::from(2);
        }
    };
    for problem in &report.problems {
        println!("{problem}");
    }
    let summary = format!(
        "{} files written to {}, {} pages bytes, {} chunks taken from the chain or the set",
        written.files,
        args.dst.display(),
        written.pages_bytes,
        written.chunks_resolved
    );
    if report.is_clean() && report.references_verified == 0 {
        println!("{summary}: standalone, verified");
        ExitCode::SUCCESS
    } else {
        println!("{summary}: {} problems", report.problems.len());
        ExitCode::from(1)
    }
}
