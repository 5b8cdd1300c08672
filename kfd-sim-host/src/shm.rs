//! The files of a machine's `/dev/shm` a checkpoint needs at restore,
//! wherever the restore happens: CRIU's link-remap files (`--link-remap`
//! keeps the thunk's unlinked semaphore that way, and the restore links it
//! back and removes it) and the files the processes map by path (the
//! thunk's `hsakmt_shared_mem`). They are kept with the images, in
//! [`SHM_DIR`], and put into the restoring machine's `/dev/shm`.
//!
//! The interposer's own trees (`kfd-sim-run-*` directories) are not kept:
//! they are rebuilt by every process that needs them.

use std::path::Path;

use crate::HostError;

/// The directory of an images directory holding the kept files.
pub const SHM_DIR: &str = "sim-shm";

/// CRIU's prefix of a link-remap file.
const LINK_REMAP: &str = "link_remap.";

/// Copies every regular file at the top of `shm` into `images/SHM_DIR`,
/// and moves CRIU's link-remap files there (they belong to the
/// checkpoint, not to the machine); returns how many files were kept.
pub fn keep(shm: &Path, images: &Path) -> Result<usize, HostError> {
    let kept = images.join(SHM_DIR);
    std::fs::create_dir_all(&kept).map_err(|e| HostError::io("cannot create", &kept, e))?;
    let entries = std::fs::read_dir(shm).map_err(|e| HostError::io("cannot read", shm, e))?;
    let mut n = 0;
    for entry in entries.flatten() {
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if !is_file {
            continue;
        }
        let from = entry.path();
        let to = kept.join(entry.file_name());
        std::fs::copy(&from, &to).map_err(|e| HostError::io("cannot copy", &from, e))?;
        if entry.file_name().to_string_lossy().starts_with(LINK_REMAP) {
            std::fs::remove_file(&from).map_err(|e| HostError::io("cannot remove", &from, e))?;
        }
        n += 1;
    }
    Ok(n)
}

/// Copies the files [`keep`] kept with `images` into `shm`, leaving any
/// file `shm` already has.
pub fn put_back(images: &Path, shm: &Path) -> Result<usize, HostError> {
    let kept = images.join(SHM_DIR);
    let Ok(entries) = std::fs::read_dir(&kept) else {
        return Ok(0);
    };
    let mut n = 0;
    for entry in entries.flatten() {
        let to = shm.join(entry.file_name());
        if to.exists() {
            continue;
        }
        let from = entry.path();
        std::fs::copy(&from, &to).map_err(|e| HostError::io("cannot copy", &from, e))?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_remaps_move_and_other_files_are_copied_both_ways() {
        let shm = tempfile::tempdir().unwrap();
        let images = tempfile::tempdir().unwrap();
        std::fs::write(shm.path().join("link_remap.3"), b"sem").unwrap();
        std::fs::write(shm.path().join("hsakmt_shared_mem"), b"mem").unwrap();
        std::fs::create_dir(shm.path().join("kfd-sim-run-1-2")).unwrap();
        assert_eq!(keep(shm.path(), images.path()).unwrap(), 2);
        assert!(!shm.path().join("link_remap.3").exists());
        assert!(shm.path().join("hsakmt_shared_mem").exists());
        assert!(!images.path().join(SHM_DIR).join("kfd-sim-run-1-2").exists());
        let other = tempfile::tempdir().unwrap();
        assert_eq!(put_back(images.path(), other.path()).unwrap(), 2);
        assert_eq!(
            std::fs::read(other.path().join("link_remap.3")).unwrap(),
            b"sem"
        );
        assert_eq!(put_back(images.path(), other.path()).unwrap(), 0);
    }
}
