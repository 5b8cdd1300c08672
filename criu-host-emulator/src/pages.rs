//! The emulated CRIU core image of a process's memory: what CRIU's pages
//! dump (`pagemap-<id>.img` + `pages-<id>.img`) carries of a simulated
//! application's own CPU memory, the target of its USERPTR BOs
//! ([`kfd_sim::Sim::host_memory_of`]), so that a restore, on this or another
//! simulated machine, maps it back at the same addresses
//! ([`kfd_sim::Sim::restore_host_memory`]).
//!
//! This is an emulated CRIU core image, not part of the amdgpu image set:
//! the plugin never reads or writes it, and `amdgpu-image`'s stores skip it
//! as they skip every non-`amdgpu-` file of a CRIU images directory. The
//! framing is the emulator's own (CRIU's real pages images are not
//! reproduced): the magic [`MAGIC`], then little-endian `u32` version
//! ([`VERSION`]) and `u32` region count, then per region `u64` address,
//! `u64` length and the bytes. This module must never grow into a reader of
//! real CRIU images.

use std::path::{Path, PathBuf};

use kfd_sim::HostMemorySnapshot;

/// The first bytes of every emulated pages image.
pub const MAGIC: [u8; 8] = *b"EMUPAGES";
/// The framing version written and accepted.
pub const VERSION: u32 = 1;

/// The emulated pages image of process `pid` in the images directory
/// `images`: `pages-<pid>.img`.
pub fn path_of(images: &Path, pid: u32) -> PathBuf {
    images.join(format!("pages-{pid}.img"))
}

/// Why an emulated pages image could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PagesImageError {
    /// Reading or writing the file failed.
    #[error("{op} emulated pages image {path}: {source}")]
    Io {
        /// `reading` or `writing`.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a well-formed emulated pages image.
    #[error("emulated pages image {path}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        reason: String,
    },
}

/// The bytes of an image holding `regions`.
pub fn encode(regions: &[HostMemorySnapshot]) -> Vec<u8> {
    let total: usize = regions.iter().map(|r| 16 + r.bytes.len()).sum();
    let mut out = Vec::with_capacity(16 + total);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(regions.len() as u32).to_le_bytes());
    for r in regions {
        out.extend_from_slice(&r.addr.to_le_bytes());
        out.extend_from_slice(&(r.bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&r.bytes);
    }
    out
}

/// The regions of image bytes `data`, read from `path` (named in errors).
/// Every length is checked against what the file holds, so a damaged image
/// is an error, never a panic or a huge allocation.
pub fn decode(path: &Path, data: &[u8]) -> Result<Vec<HostMemorySnapshot>, PagesImageError> {
    let bad = |reason: String| PagesImageError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    let mut rest = data;
    let mut take = |n: usize, field: &str| -> Result<&[u8], PagesImageError> {
        if rest.len() < n {
            return Err(bad(format!(
                "{field}: needs {n} bytes, {} left in the file",
                rest.len()
            )));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let magic = take(MAGIC.len(), "magic")?;
    if magic != MAGIC {
        return Err(bad(format!("magic: {magic:02x?} is not {MAGIC:02x?}")));
    }
    let version = u32::from_le_bytes(take(4, "version")?.try_into().unwrap_or_default());
    if version != VERSION {
        return Err(bad(format!("version: {version}, expected {VERSION}")));
    }
    let count = u32::from_le_bytes(take(4, "region count")?.try_into().unwrap_or_default());
    let mut regions = Vec::new();
    for i in 0..count {
        let addr = u64::from_le_bytes(
            take(8, &format!("region {i} address"))?
                .try_into()
                .unwrap_or_default(),
        );
        let len = u64::from_le_bytes(
            take(8, &format!("region {i} length"))?
                .try_into()
                .unwrap_or_default(),
        );
        let len = usize::try_from(len)
            .map_err(|_| bad(format!("region {i} length: {len} does not fit in memory")))?;
        let bytes = take(len, &format!("region {i} bytes"))?.to_vec();
        regions.push(HostMemorySnapshot { addr, bytes });
    }
    if !rest.is_empty() {
        return Err(bad(format!(
            "{} bytes after the last of {count} regions",
            rest.len()
        )));
    }
    Ok(regions)
}

/// Writes the image of process `pid` holding `regions` into `images`.
pub fn write(
    images: &Path,
    pid: u32,
    regions: &[HostMemorySnapshot],
) -> Result<(), PagesImageError> {
    let path = path_of(images, pid);
    std::fs::write(&path, encode(regions)).map_err(|source| PagesImageError::Io {
        op: "writing",
        path,
        source,
    })
}

/// Reads the image of process `pid` from `images`; `Ok(None)` when the
/// directory has none (images of a dump that carried no process memory).
pub fn read(images: &Path, pid: u32) -> Result<Option<Vec<HostMemorySnapshot>>, PagesImageError> {
    let path = path_of(images, pid);
    match std::fs::read(&path) {
        Ok(data) => decode(&path, &data).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PagesImageError::Io {
            op: "reading",
            path,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<HostMemorySnapshot> {
        vec![
            HostMemorySnapshot {
                addr: 0x7f00_0000_0000,
                bytes: vec![7; 4096],
            },
            HostMemorySnapshot {
                addr: 0x7f00_0001_0000,
                bytes: (0..8192u32).map(|i| i as u8).collect(),
            },
        ]
    }

    #[test]
    fn round_trips() {
        let p = Path::new("pages-1.img");
        assert_eq!(decode(p, &encode(&sample())).unwrap(), sample());
        assert_eq!(decode(p, &encode(&[])).unwrap(), Vec::new());
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_an_error() {
        let p = Path::new("pages-1.img");
        let good = encode(&sample());
        for cut in 0..good.len() {
            let err = decode(p, &good[..cut]).unwrap_err();
            assert!(err.to_string().contains("pages-1.img"), "{err}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(decode(p, &long).is_err());
    }

    #[test]
    fn bad_magic_version_and_huge_lengths_are_named() {
        let p = Path::new("pages-9.img");
        let mut data = encode(&sample());
        data[0] ^= 1;
        assert!(decode(p, &data).unwrap_err().to_string().contains("magic"));
        let mut data = encode(&sample());
        data[8] = 2;
        assert!(decode(p, &data)
            .unwrap_err()
            .to_string()
            .contains("version"));
        let mut data = encode(&sample());
        data[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        let err = decode(p, &data).unwrap_err().to_string();
        assert!(err.contains("region 0"), "{err}");
    }

    #[test]
    fn a_missing_image_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path(), 5).unwrap().is_none());
        write(dir.path(), 5, &sample()).unwrap();
        assert_eq!(read(dir.path(), 5).unwrap(), Some(sample()));
    }
}
