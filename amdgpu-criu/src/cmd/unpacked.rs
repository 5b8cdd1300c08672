//! An image set given as a directory or as a container checkpoint archive
//! (`podman container checkpoint --export`, the kubelet's checkpoint API
//! through CRI-O or containerd: a tar, plain or zstd-compressed, with
//! CRIU's images in `checkpoint/`), for the commands that read a directory
//! (`verify`, `check`): an archive's amdgpu files are written into a
//! temporary directory, removed when the set is dropped.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use amdgpu_image::{archive, ReadLimits};

use super::show::is_archive;

/// Room left on the temporary directory's file system after a file is
/// written: the extraction never fills it.
const SPARE: u64 = 64 << 20;

/// A directory holding the image set.
pub struct Unpacked {
    dir: PathBuf,
    /// The temporary directory of an archive's files.
    _temp: Option<tempfile::TempDir>,
}

impl Unpacked {
    /// `path` itself when it is a directory; an archive's amdgpu files
    /// (pages files too when `pages`) in a new temporary directory.
    pub fn open(path: &Path, pages: bool) -> Result<Unpacked, String> {
        let shown = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        std::fs::metadata(path)
            .map_err(|e| format!("{}: {}", path.display(), crate::out::io_error(&e)))?;
        if path.is_dir() || !is_archive(path).map_err(|e| shown(&e))? {
            return Ok(Unpacked {
                dir: path.to_path_buf(),
                _temp: None,
            });
        }
        let temp = tempfile::Builder::new()
            .prefix("amdgpu-criu-archive")
            .tempdir()
            .map_err(|e| format!("a temporary directory for {}: {e}", path.display()))?;
        let room = |file: &str, len: u64| {
            let st = rustix::fs::statvfs(temp.path())
                .map_err(|e| format!("{}: {e}", temp.path().display()))?;
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            if free < len.saturating_add(SPARE) {
                return Err(format!(
                    "{file}: {len} bytes do not fit in {} ({free} bytes free, {SPARE} kept \
                     spare); set TMPDIR to a file system with room",
                    temp.path().display()
                ));
            }
            Ok(())
        };
        let src = BufReader::new(File::open(path).map_err(|e| shown(&e))?);
        archive::extract_images(src, temp.path(), pages, ReadLimits::default(), room)
            .map_err(|e| shown(&e))?;
        Ok(Unpacked {
            dir: temp.path().to_path_buf(),
            _temp: Some(temp),
        })
    }

    /// The directory to read.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
