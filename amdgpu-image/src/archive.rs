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
use std::path::Path;

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

/// The tar stream of an archive of `kind` whose bytes `stream` yields.
fn tar_stream<'a>(
    kind: Option<ArchiveKind>,
    stream: impl Read + 'a,
) -> Result<Box<dyn Read + 'a>, String> {
    match kind {
        Some(ArchiveKind::Tar) => Ok(Box::new(stream)),
        Some(ArchiveKind::Zstd) => Ok(Box::new(
            ruzstd::decoding::StreamingDecoder::new(stream)
                .map_err(|e| format!("not a zstd stream: {e}"))?,
        )),
        // Several members, as pigz writes them, are one stream.
        Some(ArchiveKind::Gzip) => Ok(Box::new(flate2::read::MultiGzDecoder::new(stream))),
        None => Err("not a tar archive (nor a zstd- or gzip-compressed one)".into()),
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
pub fn read_archive<R: Read>(mut src: R, limits: ReadLimits) -> Result<Vec<ArchivedImage>, String> {
    let mut head = Vec::with_capacity(512);
    (&mut src)
        .take(512)
        .read_to_end(&mut head)
        .map_err(|e| format!("read archive: {e}"))?;
    let stream = io::Cursor::new(head.clone()).chain(src);
    read_tar(tar_stream(kind(&head), stream)?, limits)
}

/// Reads a tar stream; see the module docs.
pub fn read_tar<R: Read>(src: R, limits: ReadLimits) -> Result<Vec<ArchivedImage>, String> {
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
            .map_err(|e| format!("{shown}: read from the archive: {e}"))?;
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
        return Err(format!(
            "{} and {} have the same name: the archive holds more than one image set",
            pair[0].path, pair[1].path
        ));
    }
    Ok(found)
}

/// Writes the amdgpu image files of the archive `src` (tar or zstd, as
/// [`read_archive`] tells them) into the directory `dest`, each under its
/// own name; pages files whole when `pages`, else left out. `room` is
/// asked before each file is written, with its length, and may refuse it
/// (no space left for it). Message images are bounded by `limits`; two
/// files of one name are refused. The names written, in archive order.
pub fn extract_images<R: Read>(
    mut src: R,
    dest: &Path,
    pages: bool,
    limits: ReadLimits,
    mut room: impl FnMut(&str, u64) -> Result<(), String>,
) -> Result<Vec<String>, String> {
    let mut head = Vec::with_capacity(512);
    (&mut src)
        .take(512)
        .read_to_end(&mut head)
        .map_err(|e| format!("read archive: {e}"))?;
    let stream = io::Cursor::new(head.clone()).chain(src);
    let mut each = |name: ImageName, shown: &str, len: u64, entry: &mut dyn Read| {
        if !pages && !name.kind().holds_message() {
            return Ok(false);
        }
        let file = name.to_string();
        room(shown, len)?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dest.join(&file))
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => {
                    format!("{shown}: a second {file}: the archive holds more than one image set")
                }
                _ => format!("{}: {e}", dest.join(&file).display()),
            })?;
        let copied = io::copy(&mut entry.take(len), &mut out)
            .map_err(|e| format!("{shown}: copy out of the archive: {e}"))?;
        if copied != len {
            return Err(format!(
                "{shown}: the archive ends {copied} bytes into its {len} bytes"
            ));
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
type VisitImage<'a> = dyn FnMut(ImageName, &str, u64, &mut dyn Read) -> Result<(), String> + 'a;

/// Calls `visit` with every amdgpu image file of the tar stream `src`:
/// its name, its path in the archive, its length and its contents; a
/// message image longer than `limits` allows is refused first.
fn walk_tar<R: Read>(src: R, limits: ReadLimits, visit: &mut VisitImage<'_>) -> Result<(), String> {
    let mut archive = tar::Archive::new(src);
    let entries = archive
        .entries()
        .map_err(|e| format!("read archive: {e}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("read archive: {e}"))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry
            .path()
            .map_err(|e| format!("read archive: {e}"))?
            .into_owned();
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
            return Err(format!(
                "{shown}: {len} bytes, beyond the {limit}-byte limit of an image message"
            ));
        }
        visit(name, &shown, len, &mut entry)?;
    }
    Ok(())
}
