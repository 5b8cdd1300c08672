//! Podman/CRI-O checkpoint archives for `show`, read by
//! [`amdgpu_image::archive`]: the amdgpu images inside, pages files only up
//! to their length header.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use amdgpu_image::{archive, ImageName, ReadLimits};

use super::Blob;

/// Whether `path` is a file that starts like a tar, zstd or gzip stream.
pub fn is_archive(path: &Path) -> io::Result<bool> {
    let mut head = Vec::with_capacity(512);
    File::open(path)?.take(512).read_to_end(&mut head)?;
    Ok(archive::kind(&head).is_some())
}

/// The amdgpu image files of the archive at `path`, in name order.
pub(super) fn image_files(path: &Path) -> Result<Vec<(ImageName, Blob)>, String> {
    let file = BufReader::new(File::open(path).map_err(|e| e.to_string())?);
    Ok(archive::read_archive(file, ReadLimits::default())
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|f| {
            (
                f.name,
                Blob::Prefix {
                    bytes: f.bytes,
                    len: f.len,
                },
            )
        })
        .collect())
}
