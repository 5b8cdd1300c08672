//! The files a run leaves on disk: dropping them from the page cache
//! before a cold read, finding the pages files of an image directory, and
//! their logical and allocated sizes.

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::error::{step, BenchError, Result};

/// Drops the (clean) pages of the file at `path` from the page cache.
pub fn drop_cache(path: &Path) -> Result<()> {
    let file = File::open(path).map_err(step("opening a file to drop its cache"))?;
    file.sync_all()
        .map_err(step("fsync before dropping the cache"))?;
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).map_err(|e| {
        BenchError::Step {
            step: "posix_fadvise(DONTNEED)",
            reason: std::io::Error::from(e).to_string(),
        }
    })
}

/// The pages files (`amdgpu-pages-*`, `amdgpu-drm-pages-*`) of `images`.
pub fn pages_files(images: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(images).map_err(step("listing the images directory"))? {
        let entry = entry.map_err(step("listing the images directory"))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("amdgpu-pages-") || name.starts_with("amdgpu-drm-pages-") {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Logical size and allocated bytes (`st_blocks × 512`) of files.
pub fn disk_usage(files: &[PathBuf]) -> Result<(u64, u64)> {
    let mut logical = 0;
    let mut allocated = 0;
    for f in files {
        let meta = fs::metadata(f).map_err(step("stat of a pages file"))?;
        logical += meta.len();
        allocated += meta.blocks() * 512;
    }
    Ok((logical, allocated))
}
