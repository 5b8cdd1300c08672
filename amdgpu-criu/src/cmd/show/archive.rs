//! Podman/CRI-O checkpoint archives: `podman container checkpoint --export`
//! writes a tar of the container's checkpoint (`checkpoint/` holds CRIU's
//! images, ours among them), zstd-compressed by default (`--compress none`
//! writes a plain tar). The amdgpu images are found inside by their names;
//! everything else is skipped. Pages files are not read beyond their length
//! header, so an archive of many GiB is shown in bounded memory.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use amdgpu_image::{ImageName, ReadLimits, HEADER_LEN};

use super::Blob;

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Whether `path` is a file that starts like a tar, zstd or gzip stream.
pub fn is_archive(path: &Path) -> io::Result<bool> {
    let mut head = [0u8; 512];
    let n = read_up_to(&mut File::open(path)?, &mut head)?;
    Ok(kind(&head[..n]).is_some())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tar,
    Zstd,
    Gzip,
}

fn kind(head: &[u8]) -> Option<Kind> {
    if head.starts_with(&ZSTD_MAGIC) {
        Some(Kind::Zstd)
    } else if head.starts_with(&GZIP_MAGIC) {
        Some(Kind::Gzip)
    } else if head.len() >= 262 && &head[257..262] == b"ustar" {
        Some(Kind::Tar)
    } else {
        None
    }
}

fn read_up_to<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The amdgpu image files of the archive at `path`, in name order.
pub(super) fn image_files(path: &Path) -> Result<Vec<(ImageName, Blob)>, String> {
    let mut head = [0u8; 512];
    let n = read_up_to(&mut File::open(path).map_err(|e| e.to_string())?, &mut head)
        .map_err(|e| e.to_string())?;
    let file = BufReader::new(File::open(path).map_err(|e| e.to_string())?);
    match kind(&head[..n]) {
        Some(Kind::Tar) => read_tar(file),
        Some(Kind::Zstd) => {
            let decoder = ruzstd::decoding::StreamingDecoder::new(file)
                .map_err(|e| format!("not a zstd stream: {e}"))?;
            read_tar(decoder)
        }
        Some(Kind::Gzip) => Err(
            "a gzip-compressed archive: not supported; export with `podman container checkpoint \
             --export FILE --compress zstd` (the default) or `--compress none`, or decompress it \
             with `gunzip`"
                .into(),
        ),
        None => Err("not a tar archive".into()),
    }
}

/// Reads a tar stream: message images whole (up to the message limit),
/// pages files only up to their length header.
pub fn read_tar<R: Read>(src: R) -> Result<Vec<(ImageName, Blob)>, String> {
    let mut archive = tar::Archive::new(src);
    let mut found = Vec::new();
    let entries = archive
        .entries()
        .map_err(|e| format!("read archive: {e}"))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("read archive: {e}"))?;
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
        let size = entry.size();
        let limit = if name.kind().holds_message() {
            ReadLimits::default().max_message_len + HEADER_LEN as u64
        } else {
            HEADER_LEN as u64
        };
        let mut bytes = Vec::new();
        entry
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{}: read from the archive: {e}", path.display()))?;
        if name.kind().holds_message() && size > limit {
            return Err(format!(
                "{}: {size} bytes, beyond the {limit}-byte limit of an image message",
                path.display()
            ));
        }
        found.push((name, Blob::Prefix { bytes, len: size }));
    }
    found.sort_by_key(|(n, _)| *n);
    // Two checkpoint directories in one archive would give the same names.
    for pair in found.windows(2) {
        if pair[0].0 == pair[1].0 {
            return Err(format!(
                "{} appears twice: the archive holds more than one image set",
                pair[0].0
            ));
        }
    }
    Ok(found)
}
