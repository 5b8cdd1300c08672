//! The images directory: where the checkpoint is written (given, kept or
//! temporary) and reading its KFD images back for the restore.

use std::path::{Path, PathBuf};

use amdgpu_image::{CriuKfd, DirStore, ImageKind, ImageStore, ReadLimits};

use super::args::Args;
use super::Stop;

/// The images directory: `--dir` (which must not already hold an image
/// set), a temporary one kept for `--keep`, or a temporary one removed
/// when the demo ends.
pub(super) enum ImagesDir {
    Given(PathBuf),
    Kept(PathBuf),
    Temp(tempfile::TempDir),
}

impl ImagesDir {
    pub(super) fn path(&self) -> &Path {
        match self {
            ImagesDir::Given(p) | ImagesDir::Kept(p) => p,
            ImagesDir::Temp(t) => t.path(),
        }
    }

    /// Where the images stay after the demo; None when they are removed.
    pub(super) fn kept(&self) -> Option<&Path> {
        match self {
            ImagesDir::Given(p) | ImagesDir::Kept(p) => Some(p),
            ImagesDir::Temp(_) => None,
        }
    }

    /// Where the images are, for the summary.
    pub(super) fn describe(&self) -> String {
        let path = self.path().display();
        match self {
            ImagesDir::Given(_) => format!("images: {path}"),
            ImagesDir::Kept(_) => format!("images: {path} (kept)"),
            ImagesDir::Temp(_) => {
                "images: removed when the demo ended (--keep or --dir DIR keeps them)".to_owned()
            }
        }
    }
}

pub(super) fn images_dir(args: &Args) -> Result<ImagesDir, Stop> {
    let Some(dir) = &args.dir else {
        // A temporary directory, kept or not, is removed if a signal stops
        // the run: what it holds then is no checkpoint.
        let temp = super::cleanup::temporary_dir("amdgpu-criu-demo.").map_err(Stop::Usage)?;
        return Ok(if args.keep {
            ImagesDir::Kept(temp.keep())
        } else {
            ImagesDir::Temp(temp)
        });
    };
    given_dir(dir).map(ImagesDir::Given).map_err(Stop::Usage)
}

/// `--dir DIR`, created if needed, when it holds no amdgpu images yet:
/// where every workload writes its checkpoint.
pub(super) fn given_dir(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
    let existing = DirStore::open_dir(dir)
        .and_then(|s| s.list())
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    if !existing.is_empty() {
        return Err(format!(
            "{}: already holds {} amdgpu image files; give an empty directory",
            dir.display(),
            existing.len()
        ));
    }
    Ok(dir.to_path_buf())
}

pub(super) fn read_kfd_images(dir: &Path) -> Result<Vec<(u32, CriuKfd)>, Stop> {
    let store = DirStore::open_dir(dir).map_err(|e| Stop::Failed(e.to_string()))?;
    let names = store.list().map_err(|e| Stop::Failed(e.to_string()))?;
    let mut out = Vec::new();
    for name in names.iter().filter(|n| n.kind() == ImageKind::Kfd) {
        let msg = store
            .read_message::<CriuKfd>(name, ReadLimits::default())
            .map_err(|e| Stop::Failed(crate::out::about(name, e)))?
            .ok_or_else(|| Stop::Failed(format!("{name} vanished")))?;
        out.push((name.id(), msg));
    }
    Ok(out)
}

/// The pages files of `dir` of the given kinds (`ImageKind::Pages`,
/// `ImageKind::DrmPages`), told by their image names; with `in_progress`,
/// also those `DirStore` is still writing (`.NAME.part-*`, renamed to
/// `NAME` when done).
pub(super) fn pages_files(
    dir: &Path,
    kinds: &[ImageKind],
    in_progress: bool,
) -> Vec<std::fs::Metadata> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let name = match name.strip_prefix('.').and_then(|n| n.split_once(".part-")) {
                Some((written, _)) if in_progress => written,
                Some(_) => return false,
                None => &name,
            };
            amdgpu_image::ImageName::parse(name).is_ok_and(|n| kinds.contains(&n.kind()))
        })
        .filter_map(|e| e.metadata().ok())
        .collect()
}
