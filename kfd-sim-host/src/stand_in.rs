//! The character device whose numbers the stand-in `/dev/kfd` and
//! `/dev/dri/renderD<minor>` nodes carry.
//!
//! The interposer recognises a device file by those numbers and asks the
//! served machine what it stands for; the host's kernel only ever sees an
//! open of the stand-in device. For CRIU it must be a misc device CRIU has
//! no handler for, so that CRIU hands the files to its plugins: `/dev/fuse`
//! (10:229), opened for real (the open itself does nothing until a FUSE
//! mount is made with it). Without CRIU (a user without root) any character
//! device the user can open and programs do not otherwise open does:
//! `/dev/fuse` when it opens, else `/dev/full`.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::HostError;

/// The device the stand-in nodes copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandIn {
    /// The host's node of that device.
    pub path: PathBuf,
    /// Its major number.
    pub major: u32,
    /// Its minor number.
    pub minor: u32,
}

impl StandIn {
    /// `/dev/fuse`, the one device CRIU hands to its plugins.
    pub fn for_criu() -> Result<StandIn, HostError> {
        Self::probe(Path::new("/dev/fuse"), true)
    }

    /// For processes no CRIU will see: `/dev/fuse` when this user can open
    /// it, else `/dev/full`.
    pub fn for_user() -> Result<StandIn, HostError> {
        Self::probe(Path::new("/dev/fuse"), false)
            .or_else(|_| Self::probe(Path::new("/dev/full"), false))
    }

    /// `path` if it is a character device this process can open.
    pub fn probe(path: &Path, for_criu: bool) -> Result<StandIn, HostError> {
        let fail = |reason: String| HostError::StandIn {
            path: path.to_path_buf(),
            reason,
            for_criu,
        };
        let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
        if !meta.file_type().is_char_device() {
            return Err(fail("not a character device".into()));
        }
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| fail(format!("cannot open it: {e}")))?;
        let rdev = meta.rdev();
        Ok(StandIn {
            path: path.to_path_buf(),
            major: libc::major(rdev),
            minor: libc::minor(rdev),
        })
    }

    /// The device number (`st_rdev`).
    pub fn rdev(&self) -> u64 {
        libc::makedev(self.major, self.minor)
    }
}
