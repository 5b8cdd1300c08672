//! `amdgpu-criu flatten SRC DST`: write the amdgpu images of SRC (an
//! incremental dump whose chunks come from its `parent` chain, or a
//! deduplicated dump) into DST as a standalone set that the C plugin can
//! restore: every BO whole in its own pages file, no references, no parent.
//! Every chunk is verified as it is read, and DST is verified when written.
//!
//! CRIU's own image files of SRC (everything that is not an amdgpu file)
//! are copied into DST unchanged, so DST is a whole images directory for
//! `criu restore -D DST`. CRIU's incremental images (pagemap entries whose
//! pages are in the parent, after `criu dump --prev-images-dir ../1
//! --track-mem`) still need the parent: when SRC has a `parent` link, DST
//! gets one too, pointing at SRC's parent by absolute path. Flattening
//! CRIU's own pagemaps is CRIU's business; what is standalone is said.
//!
//! Exit 0 on success, 1 when DST does not verify, 2 on usage or read errors
//! (a missing, replaced or changed parent among them).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use amdgpu_image::chain::flatten;
use amdgpu_image::{verify_set, DirStore, ImageName, ReadLimits, PARENT_LINK};

/// Arguments of `flatten`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu flatten /var/lib/ckpt/3 /var/lib/ckpt/3-full
  amdgpu-criu flatten /var/lib/ckpt/dedup /tmp/for-c-plugin

The amdgpu files of DST are standalone. CRIU's own files are copied
unchanged; when SRC has a parent link, DST gets one pointing at SRC's
parent (absolute path), which CRIU's incremental images (made with CRIU's
prev-images-dir option) still need: flattening those is CRIU's business.

A directory without amdgpu files (processes without GPU state) is copied.

DST is created when it does not exist (its parent must).

Exit status: 0 written and verified, 1 DST does not verify, 2 unreadable
input, a damaged chain, an unfinished dump, no image files at all, or DST
not an empty directory (nor one that can be created)")]
pub struct Args {
    /// The image directory to flatten (its `parent` link is followed).
    pub src: PathBuf,
    /// An empty directory for the standalone set (created when it does
    /// not exist and its parent does).
    pub dst: PathBuf,
}

/// Runs `flatten`.
pub fn run(args: Args) -> ExitCode {
    let created = match std::fs::create_dir(&args.dst) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => {
            let parent = args
                .dst
                .parent()
                .filter(|p| !p.as_os_str().is_empty() && !p.exists());
            match parent {
                Some(parent) => eprintln!(
                    "amdgpu-criu flatten: {}: cannot create it, {} does not exist (create it \
                     first, or give another DST)",
                    args.dst.display(),
                    parent.display()
                ),
                None => eprintln!(
                    "amdgpu-criu flatten: {}: cannot create it: {e}",
                    args.dst.display()
                ),
            }
            return ExitCode::from(2);
        }
    };
    let code = flatten_into(&args);
    if created && code != ExitCode::SUCCESS {
        // Only if nothing was written into it: never remove what was made.
        let _ = std::fs::remove_dir(&args.dst);
    }
    code
}

fn flatten_into(args: &Args) -> ExitCode {
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
    // A dump that never finished is no set to flatten.
    match src.unfinished() {
        Ok(unfinished) if unfinished.is_empty() => {}
        Ok(unfinished) => {
            eprintln!(
                "amdgpu-criu flatten: {}: the dump did not finish (unfinished files: {})",
                args.src.display(),
                unfinished.join(", ")
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("amdgpu-criu flatten: {e}");
            return ExitCode::from(2);
        }
    }
    let written = match flatten(&src, &dst, ReadLimits::default()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("amdgpu-criu flatten: {}: {e}", args.src.display());
            return ExitCode::from(2);
        }
    };
    let criu = match copy_criu_files(&args.src, &args.dst) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "amdgpu-criu flatten: copying CRIU's image files of {} into {}: {e}",
                args.src.display(),
                args.dst.display()
            );
            return ExitCode::from(2);
        }
    };
    if written.files == 0 {
        if criu.copied.is_empty() {
            eprintln!(
                "amdgpu-criu flatten: {}: no image files (neither amdgpu nor CRIU's)",
                args.src.display()
            );
            return ExitCode::from(2);
        }
        // A checkpoint of processes without GPU state: nothing of ours.
        println!(
            "no amdgpu image files in {}: nothing to flatten",
            args.src.display()
        );
        println!("{}", criu.describe(&args.dst));
        return ExitCode::SUCCESS;
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
        println!("{}", criu.describe(&args.dst));
        ExitCode::SUCCESS
    } else {
        println!("{summary}: {} problems", report.problems.len());
        ExitCode::from(1)
    }
}

/// What [`copy_criu_files`] did.
#[derive(Debug, Default)]
struct CriuFiles {
    /// Files copied, by name.
    copied: Vec<String>,
    /// Where DST's `parent` link points (SRC's parent, absolute), and
    /// whether that directory exists.
    parent: Option<(PathBuf, bool)>,
    /// Entries not copied (directories, special files, other links).
    skipped: Vec<String>,
}

impl CriuFiles {
    /// The lines `flatten` prints about CRIU's files.
    fn describe(&self, dst: &Path) -> String {
        let mut out = format!(
            "{} of CRIU's files copied unchanged (CRIU's own images are not flattened)",
            self.copied.len()
        );
        if let Some((target, exists)) = &self.parent {
            out.push_str(&format!(
                "\n{}/{PARENT_LINK} -> {}: CRIU's own incremental images (pages kept in the \
                 parent) still read it; keep it until CRIU restores without it{}",
                dst.display(),
                target.display(),
                if *exists {
                    ""
                } else {
                    " (it does not exist now)"
                }
            ));
        }
        if !self.skipped.is_empty() {
            out.push_str(&format!(
                "\nnot copied (not regular files): {}",
                self.skipped.join(", ")
            ));
        }
        out
    }
}

/// Copies every regular file of `src` that is not an amdgpu image file
/// into `dst` unchanged (CRIU's images, its inventory and stats) and, when
/// `src` has a `parent` link, makes `dst/parent` point at the same
/// directory by absolute path.
fn copy_criu_files(src: &Path, dst: &Path) -> io::Result<CriuFiles> {
    let mut out = CriuFiles::default();
    let mut entries: Vec<_> = fs::read_dir(src)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let shown = name.to_string_lossy().into_owned();
        if name == PARENT_LINK {
            let target = fs::read_link(entry.path())?;
            let absolute = if target.is_absolute() {
                target
            } else {
                std::path::absolute(src)?.join(target)
            };
            let (target, exists) = match fs::canonicalize(&absolute) {
                Ok(resolved) => (resolved, true),
                Err(_) => (absolute, false),
            };
            std::os::unix::fs::symlink(&target, dst.join(PARENT_LINK))?;
            out.parent = Some((target, exists));
            continue;
        }
        // The amdgpu files were written by flatten.
        if name.to_str().is_some_and(|n| ImageName::parse(n).is_ok()) {
            continue;
        }
        if entry.file_type()?.is_file() {
            fs::copy(entry.path(), dst.join(&name))?;
            out.copied.push(shown);
        } else {
            out.skipped.push(shown);
        }
    }
    Ok(out)
}
