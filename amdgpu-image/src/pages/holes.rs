//! Finding and skipping the holes of a pages file behind a file descriptor
//! (`lseek(SEEK_DATA/SEEK_HOLE)`), for a reader that skips holes.

use std::io;
use std::os::fd::AsFd;

/// One run of a file's bytes: data or a hole, up to `end` (a file offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Extent {
    pub(super) hole: bool,
    pub(super) end: u64,
}

/// How a [`PagesReader`](super::PagesReader) learns and skips the holes of its source.
#[derive(Debug)]
pub(super) struct Holes<R> {
    /// The run containing file offset `pos`, leaving the source at `pos`.
    pub(super) probe: fn(&mut R, u64) -> io::Result<Extent>,
    /// Moves the source `len` bytes forward without reading.
    pub(super) skip: fn(&mut R, u64) -> io::Result<()>,
    /// The run the source is in (its `end` is 0 before the first probe).
    pub(super) current: Extent,
}

/// Holes shorter than this are read like data. Skipping a short hole breaks
/// the kernel's sequential readahead, and a file of short data runs between
/// short holes (a BO with one page in ten used) then reads one small
/// synchronous request per run, slower than reading the holes as well.
pub const MIN_SKIPPED_HOLE: u64 = 1 << 20;

/// How far one probe looks ahead for a hole of [`MIN_SKIPPED_HOLE`] bytes
/// (bounds the `lseek` calls one probe spends on a file of many short runs).
const PROBE_SPAN: u64 = 16 << 20;

/// The run of the file behind `src` that contains offset `pos`, holes
/// shorter than [`MIN_SKIPPED_HOLE`] counted as data; past the end of the
/// file, a data run without end (so a read finds the end and reports
/// truncation). Leaves the file offset at `pos`.
pub(super) fn fd_extent<R: AsFd>(src: &mut R, pos: u64) -> io::Result<Extent> {
    use rustix::fs::{fstat, seek, SeekFrom as Whence};
    let fd = src.as_fd();
    let len = u64::try_from(fstat(fd)?.st_size).unwrap_or(0);
    if pos >= len {
        return Ok(Extent {
            hole: false,
            end: u64::MAX,
        });
    }
    // The hole at or after `at` (`len` if none) and the data after it (`len` if none).
    let hole_at = |at: u64| -> io::Result<(u64, u64)> {
        let hole = seek(fd, Whence::Hole(at))?.min(len);
        if hole >= len {
            return Ok((len, len));
        }
        match seek(fd, Whence::Data(hole)) {
            Ok(data) => Ok((hole, data.min(len))),
            Err(rustix::io::Errno::NXIO) => Ok((hole, len)),
            Err(e) => Err(e.into()),
        }
    };
    let extent = match seek(fd, Whence::Data(pos)) {
        Ok(data) if data - pos >= MIN_SKIPPED_HOLE => Extent {
            hole: true,
            end: data,
        },
        Ok(data) => {
            // Data (after at most a short hole) from `pos`: extend the run
            // over short holes, up to a long hole, the end or the span.
            let mut at = data;
            loop {
                if at >= len {
                    break Extent {
                        hole: false,
                        end: len,
                    };
                }
                let (hole, next) = hole_at(at)?;
                if hole >= len || next - hole >= MIN_SKIPPED_HOLE || hole - pos >= PROBE_SPAN {
                    break Extent {
                        hole: false,
                        end: if next - hole >= MIN_SKIPPED_HOLE || hole >= len {
                            hole
                        } else {
                            next
                        },
                    };
                }
                at = next;
            }
        }
        // No data at or after `pos`: a hole up to the end of the file.
        Err(rustix::io::Errno::NXIO) => Extent {
            hole: true,
            end: len,
        },
        Err(e) => return Err(e.into()),
    };
    seek(fd, Whence::Start(pos))?;
    Ok(extent)
}

/// Moves the file offset behind `src` `len` bytes forward without reading.
pub(super) fn fd_skip<R: AsFd>(src: &mut R, len: u64) -> io::Result<()> {
    let delta = i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    rustix::fs::seek(src.as_fd(), rustix::fs::SeekFrom::Current(delta))?;
    Ok(())
}
