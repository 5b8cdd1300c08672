//! The amdgpu images inside a container checkpoint archive (feature
//! `archive`): `podman container checkpoint --export` (and CRI-O's
//! checkpoint) writes a tar of the container's checkpoint, CRIU's images in
//! `checkpoint/` among them, zstd-compressed by default (`--compress none`:
//! a plain tar; `--compress gzip`: gzip).
//!
//! Files are found by their names (any directory); everything else is
//! skipped. A message image is read whole (up to [`ReadLimits`]); a pages
//! file only up to its length header, so an archive of many GiB is read in
//! bounded memory. Untrusted input never panics; two files of one name
//! (two image sets) are refused.
//!
//! [`extract_images`] writes the amdgpu files of an archive into a
//! directory (pages files whole, when asked), for the readers that need a
//! directory ([`crate::DirStore`]: `verify`, `check`).

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::{ImageName, ReadLimits, HEADER_LEN};

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// What an archive's first bytes say it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveKind {
    /// A plain (POSIX or GNU) tar.
    Tar,
    /// A zstd stream (holding a tar).
    Zstd,
    /// A gzip stream (holding a tar).
    Gzip,
}

/// Why an archive could not be read or its images extracted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// The first bytes are those of no tar, zstd or gzip stream.
    #[error("not a tar archive (nor a zstd- or gzip-compressed one)")]
    NotAnArchive,
    /// A zstd stream whose frame header does not decode.
    #[error("not a zstd stream: {reason}")]
    NotZstd {
        /// The decoder's description.
        reason: String,
    },
    /// Reading the archive (or its tar headers) failed.
    #[error("read archive: {0}")]
    Read(#[source] io::Error),
    /// Reading one file out of the archive failed.
    #[error("{path}: read from the archive: {source}")]
    ReadEntry {
        /// The file's path inside the archive.
        path: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A message image longer than [`ReadLimits`] allow.
    #[error("{path}: {len} bytes, beyond the {limit}-byte limit of an image message")]
    MessageTooLong {
        /// The file's path inside the archive.
        path: String,
        /// Its length.
        len: u64,
        /// The limit (with the length header).
        limit: u64,
    },
    /// Two files of one image name: more than one image set.
    #[error("{first} and {second} have the same name: the archive holds more than one image set")]
    SameName {
        /// The first file's path inside the archive.
        first: String,
        /// The second's.
        second: String,
    },
    /// A second file of one image name, found while extracting.
    #[error("{path}: a second {file}: the archive holds more than one image set")]
    SecondFile {
        /// The second file's path inside the archive.
        path: String,
        /// The image name.
        file: String,
    },
    /// The caller's `room` refused a file ([`extract_images`]).
    #[error("{reason}")]
    NoRoom {
        /// The file's path inside the archive.
        path: String,
        /// The caller's text.
        reason: String,
    },
    /// An extracted file could not be created.
    #[error("{}: {source}", .path.display())]
    Create {
        /// The file to create.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Copying a file out of the archive failed.
    #[error("{path}: copy out of the archive: {source}")]
    CopyOut {
        /// The file's path inside the archive.
        path: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The archive ends inside a file.
    #[error("{path}: the archive ends {copied} bytes into its {len} bytes")]
    Truncated {
        /// The file's path inside the archive.
        path: String,
        /// Bytes there were.
        copied: u64,
        /// The file's length in its tar header.
        len: u64,
    },
}

/// The tar stream of an archive of `kind` whose bytes `stream` yields.
fn tar_stream<'a>(
    kind: Option<ArchiveKind>,
    stream: impl Read + 'a,
) -> Result<Box<dyn Read + 'a>, ArchiveError> {
    match kind {
        Some(ArchiveKind::Tar) => Ok(Box::new(stream)),
        Some(ArchiveKind::Zstd) => Ok(Box::new(
            ruzstd::decoding::StreamingDecoder::new(stream).map_err(|e| ArchiveError::NotZstd {
                reason: e.to_string(),
            })?,
        )),
        // Several members, as pigz writes them, are one stream.
        Some(ArchiveKind::Gzip) => Ok(Box::new(flate2::read::MultiGzDecoder::new(stream))),
        None => Err(ArchiveError::NotAnArchive),
    }
}

/// The kind of archive starting with `head` (its first 512 bytes, or all
/// of a shorter file); `None` when it is none of them.
pub fn kind(head: &[u8]) -> Option<ArchiveKind> {
    if head.starts_with(&ZSTD_MAGIC) {
        Some(ArchiveKind::Zstd)
    } else if head.starts_with(&GZIP_MAGIC) {
        Some(ArchiveKind::Gzip)
    } else if head.get(257..262) == Some(b"ustar") {
        Some(ArchiveKind::Tar)
    } else {
        None
    }
}

/// One amdgpu image file found in an archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivedImage {
    /// Its name.
    pub name: ImageName,
    /// Its path inside the archive.
    pub path: String,
    /// Its whole length.
    pub len: u64,
    /// All of a message image; the first [`HEADER_LEN`] bytes of a pages file.
    pub bytes: Vec<u8>,
}

/// Reads the amdgpu images of the archive `src` (tar or zstd, told by its
/// first bytes), in name order.
pub fn read_archive<R: Read>(
    mut src: R,
    limits: ReadLimits,
) -> Result<Vec<ArchivedImage>, ArchiveError> {
    let mut head = Vec::with_capacity(512);
    (&mut src)
        .take(512)
        .read_to_end(&mut head)
        .map_err(ArchiveError::Read)?;
    let stream = io::Cursor::new(head.clone()).chain(src);
    read_tar(tar_stream(kind(&head), stream)?, limits)
}

/// Reads a tar stream; see the module docs.
pub fn read_tar<R: Read>(src: R, limits: ReadLimits) -> Result<Vec<ArchivedImage>, ArchiveError> {
    let mut found: Vec<ArchivedImage> = Vec::new();
    walk_tar(src, limits, &mut |name, shown, len, entry| {
        let limit = if name.kind().holds_message() {
            len
        } else {
            HEADER_LEN as u64
        };
        let mut bytes = Vec::new();
        entry
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|source| ArchiveError::ReadEntry {
                path: shown.to_owned(),
                source,
            })?;
        found.push(ArchivedImage {
            name,
            path: shown.to_owned(),
            len,
            bytes,
        });
        Ok(())
    })?;
    found.sort_by_key(|f| f.name);
    if let Some(pair) = found.windows(2).find(|p| p[0].name == p[1].name) {
        return Err(ArchiveError::SameName {
            first: pair[0].path.clone(),
            second: pair[1].path.clone(),
        });
    }
    Ok(found)
}

/// Writes the amdgpu image files of the archive `src` (tar or zstd, as
/// [`read_archive`] tells them) into the directory `dest`, each under its
/// own name; pages files whole when `pages`, else left out. `room` is
/// asked before each file is written, with its length, and may refuse it
/// (no space left for it), its text then the error's. Message images are bounded by `limits`; two
/// files of one name are refused. The names written, in archive order.
pub fn extract_images<R: Read>(
    mut src: R,
    dest: &Path,
    pages: bool,
    limits: ReadLimits,
    mut room: impl FnMut(&str, u64) -> Result<(), String>,
) -> Result<Vec<String>, ArchiveError> {
    let mut head = Vec::with_capacity(512);
    (&mut src)
        .take(512)
        .read_to_end(&mut head)
        .map_err(ArchiveError::Read)?;
    let stream = io::Cursor::new(head.clone()).chain(src);
    let mut each = |name: ImageName, shown: &str, len: u64, entry: &mut dyn Read| {
        if !pages && !name.kind().holds_message() {
            return Ok(false);
        }
        let file = name.to_string();
        room(shown, len).map_err(|reason| ArchiveError::NoRoom {
            path: shown.to_owned(),
            reason,
        })?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dest.join(&file))
            .map_err(|source| match source.kind() {
                io::ErrorKind::AlreadyExists => ArchiveError::SecondFile {
                    path: shown.to_owned(),
                    file: file.clone(),
                },
                _ => ArchiveError::Create {
                    path: dest.join(&file),
                    source,
                },
            })?;
        let copied =
            io::copy(&mut entry.take(len), &mut out).map_err(|source| ArchiveError::CopyOut {
                path: shown.to_owned(),
                source,
            })?;
        if copied != len {
            return Err(ArchiveError::Truncated {
                path: shown.to_owned(),
                copied,
                len,
            });
        }
        Ok(true)
    };
    let mut written = Vec::new();
    let mut visit = |name: ImageName, shown: &str, len: u64, entry: &mut dyn Read| {
        if each(name, shown, len, entry)? {
            written.push(name.to_string());
        }
        Ok(())
    };
    walk_tar(tar_stream(kind(&head), stream)?, limits, &mut visit)?;
    Ok(written)
}

/// What [`walk_tar`] calls per image file: its name, its path in the
/// archive, its length and its contents.
type VisitImage<'a> =
    dyn FnMut(ImageName, &str, u64, &mut dyn Read) -> Result<(), ArchiveError> + 'a;

/// Calls `visit` with every amdgpu image file of the tar stream `src`:
/// its name, its path in the archive, its length and its contents; a
/// message image longer than `limits` allows is refused first.
fn walk_tar<R: Read>(
    src: R,
    limits: ReadLimits,
    visit: &mut VisitImage<'_>,
) -> Result<(), ArchiveError> {
    let mut archive = tar::Archive::new(src);
    let entries = archive.entries().map_err(ArchiveError::Read)?;
    for entry in entries {
        let mut entry = entry.map_err(ArchiveError::Read)?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().map_err(ArchiveError::Read)?.into_owned();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| ImageName::parse(n).ok())
        else {
            continue;
        };
        let shown = path.display().to_string();
        let len = entry.size();
        let limit = limits.max_message_len.saturating_add(HEADER_LEN as u64);
        if name.kind().holds_message() && len > limit {
            return Err(ArchiveError::MessageTooLong {
                path: shown,
                len,
                limit,
            });
        }
        visit(name, &shown, len, &mut entry)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain tar of `files` (path, bytes).
    fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, bytes) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, path, *bytes).unwrap();
        }
        builder.into_inner().unwrap()
    }

    #[test]
    fn errors_name_their_cause_and_the_files() {
        let err = read_archive(&b"plain text, no archive"[..], ReadLimits::default()).unwrap_err();
        assert!(matches!(err, ArchiveError::NotAnArchive), "{err:?}");
        assert_eq!(
            err.to_string(),
            "not a tar archive (nor a zstd- or gzip-compressed one)"
        );

        let two = tar_of(&[
            ("a/checkpoint/amdgpu-kfd-1.img", &[0; 8]),
            ("b/checkpoint/amdgpu-kfd-1.img", &[0; 8]),
        ]);
        let err = read_archive(&two[..], ReadLimits::default()).unwrap_err();
        let ArchiveError::SameName { first, second } = &err else {
            panic!("not SameName: {err:?}");
        };
        assert_eq!(
            (first.as_str(), second.as_str()),
            (
                "a/checkpoint/amdgpu-kfd-1.img",
                "b/checkpoint/amdgpu-kfd-1.img"
            )
        );
        assert!(
            err.to_string().ends_with("more than one image set"),
            "{err}"
        );

        let limits = ReadLimits { max_message_len: 4 };
        let long = tar_of(&[("checkpoint/amdgpu-kfd-1.img", &[0; 64])]);
        let err = read_archive(&long[..], limits).unwrap_err();
        assert!(
            matches!(
                &err,
                ArchiveError::MessageTooLong { path, len: 64, limit }
                    if path == "checkpoint/amdgpu-kfd-1.img" && *limit == 4 + HEADER_LEN as u64
            ),
            "{err:?}"
        );

        let dest = tempfile::tempdir().unwrap();
        let one = tar_of(&[("checkpoint/amdgpu-kfd-1.img", &[0; 8])]);
        let err = extract_images(
            &one[..],
            dest.path(),
            true,
            ReadLimits::default(),
            |_, _| Err("no room".to_owned()),
        )
        .unwrap_err();
        assert!(
            matches!(&err, ArchiveError::NoRoom { path, reason }
                if path == "checkpoint/amdgpu-kfd-1.img" && reason == "no room"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "no room");
    }
}
