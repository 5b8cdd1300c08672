//! [`PagesFile`]: positional reads (`pread`) of BO ranges from a pages file,
//! for restoring GPUs in parallel from one file.

use std::fs::File;
use std::os::unix::fs::FileExt;

use bytes::Bytes;

use super::layout::PagesLayout;
use crate::chunks::BoHasher;
use crate::framing::HEADER_LEN;
use crate::Error;

/// Positional reads from a pages file; see the module docs.
#[derive(Debug)]
pub struct PagesFile {
    file: File,
    name: String,
    layout: PagesLayout,
}

impl PagesFile {
    /// Checks the length header against the layout and the file's size against the header.
    pub fn open(file: File, name: &str, layout: PagesLayout) -> Result<Self, Error> {
        let mut header = [0u8; HEADER_LEN];
        file.read_exact_at(&mut header, 0)
            .map_err(|e| Error::io(name, "read length header", e))?;
        let len = u64::from_le_bytes(header);
        if len != layout.total_len() {
            return Err(Error::LengthMismatch {
                file: name.to_owned(),
                what: "length header against the sizes of the bos it holds",
                expected: layout.total_len(),
                actual: len,
            });
        }
        let size = file
            .metadata()
            .map_err(|e| Error::io(name, "stat", e))?
            .len();
        let payload = size.saturating_sub(HEADER_LEN as u64);
        if payload < len {
            return Err(Error::Truncated {
                file: name.to_owned(),
                expected: len,
                actual: payload,
            });
        }
        if payload > len {
            return Err(Error::TrailingBytes {
                file: name.to_owned(),
                expected: len,
            });
        }
        Ok(Self {
            file,
            name: name.to_owned(),
            layout,
        })
    }

    /// The layout of the file.
    pub fn layout(&self) -> &PagesLayout {
        &self.layout
    }

    /// Fills `buf` with BO `bo`'s bytes starting at `offset` within the BO.
    pub fn read_range(&self, bo: usize, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let (Some(info), Some(start)) = (self.layout.bos().get(bo), self.layout.offset_of(bo))
        else {
            return Err(Error::OutOfRange {
                file: self.name.clone(),
                what: format!("no bo {bo}"),
            });
        };
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > info.size) {
            return Err(Error::OutOfRange {
                file: self.name.clone(),
                what: format!(
                    "bytes {offset}..+{} lie outside bo {bo} of {} bytes",
                    buf.len(),
                    info.size
                ),
            });
        }
        self.file
            .read_exact_at(buf, HEADER_LEN as u64 + start + offset)
            .map_err(|e| Error::io(&self.name, "read pages", e))
    }

    /// The whole of BO `bo`, its checksum verified when recorded.
    pub fn bo_bytes(&self, bo: usize) -> Result<Bytes, Error> {
        let Some(info) = self.layout.bos().get(bo).copied() else {
            return Err(Error::OutOfRange {
                file: self.name.clone(),
                what: format!("no bo {bo}"),
            });
        };
        let size = usize::try_from(info.size).map_err(|_| Error::OutOfRange {
            file: self.name.clone(),
            what: format!("bo {bo} of {} bytes does not fit in memory", info.size),
        })?;
        let mut buf = vec![0u8; size];
        self.read_range(bo, 0, &mut buf)?;
        if let Some(expected) = info.checksum {
            let mut h = BoHasher::new(self.layout.algo());
            h.update(&buf);
            let actual = h.finish().0;
            if actual != expected {
                return Err(Error::ChecksumMismatch {
                    file: self.name.clone(),
                    bo,
                    entry: info.entry,
                    expected,
                    actual,
                });
            }
        }
        Ok(Bytes::from(buf))
    }
}
