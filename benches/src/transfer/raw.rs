//! The storage's own figures, without the plugin: plain sequential I/O of
//! one file, and raw writes of a pages file's exact layout (data runs
//! written, zero runs left as holes) as the ceiling for a dump. Each write
//! is measured two ways, plainly (`write`s, then `fsync`, as `dd` and the
//! C plugin write) and written behind through `amdgpu-image`'s directory
//! store (the writer the plugin's pages files go through: writeback
//! started every 8 MiB, then `fsync`); the storage's best is the faster
//! of the two, whichever this disk favours.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use amdgpu_image::{DirStore, ImageName, ImageStore, ImageWriter, PagesSink};

use super::disk::{disk_usage, drop_cache};
use super::error::{step, BenchError, Result};
use super::fill::{fill_chunk, BoPlan, Fill};
use super::RAW_IO;

/// Plain sequential I/O of one file.
#[derive(Debug, Clone, Copy)]
pub struct RawFigures {
    /// Write (8 MiB `write`s, then `fsync`) bytes per second.
    pub write_bps: f64,
    /// Read (8 MiB `read`s, page cache dropped first) bytes per second.
    pub read_bps: f64,
}

/// Writes `bytes` non-zero bytes to `dir/raw-io.bin` in 8 MiB writes and
/// `fsync`s (when `fsync`; otherwise the write time is the page cache's),
/// drops the file from the page cache and reads it back; removes it.
pub fn raw_io(dir: &Path, bytes: u64, fsync: bool) -> Result<RawFigures> {
    let path = dir.join("raw-io.bin");
    let mut buf = vec![0u8; RAW_IO];
    fill_chunk(&mut buf, 0x5EED, 0, Fill::Dense);
    let start = Instant::now();
    let mut file = File::create(&path).map_err(step("creating the raw file"))?;
    write_plain(&mut file, &buf, bytes)?;
    if fsync {
        file.sync_all().map_err(step("fsync of the raw file"))?;
    }
    let write = start.elapsed();
    drop(file);
    drop_cache(&path)?;
    let start = Instant::now();
    let mut file = File::open(&path).map_err(step("opening the raw file"))?;
    let read = read_plain(&mut file, &mut buf)?;
    let read_time = start.elapsed();
    let _ = fs::remove_file(&path);
    if read != bytes {
        return Err(BenchError::Step {
            step: "reading the raw file",
            reason: format!("read {read} bytes of {bytes}"),
        });
    }
    Ok(RawFigures {
        write_bps: bytes as f64 / write.as_secs_f64(),
        read_bps: bytes as f64 / read_time.as_secs_f64(),
    })
}

/// The pages file name the written-behind raw runs use.
const BEHIND_NAME: ImageName = ImageName::Pages {
    id: 0x7a,
    gpu_id: 0xbe5c,
};

/// Writes `bytes` non-zero bytes as `dir`'s pages file through
/// `amdgpu-image`'s [`DirStore`] (8 MiB `write`s into its writer, which
/// starts the writeback of every 8 MiB behind itself, then the commit),
/// then `fsync`s it as the report `fsync`s the plugin's pages files: the
/// raw write with the plugin's own I/O strategy and no plugin. Returns the
/// time, file creation included; removes the file.
pub fn raw_write_behind(dir: &Path, bytes: u64) -> Result<Duration> {
    let mut buf = vec![0u8; RAW_IO];
    fill_chunk(&mut buf, 0x5EED, 0, Fill::Dense);
    let store = DirStore::open_dir(dir).map_err(step("opening the raw directory"))?;
    let path = dir.join(BEHIND_NAME.to_string());
    let timed = (|| {
        let start = Instant::now();
        let mut writer = store
            .create(&BEHIND_NAME)
            .map_err(step("creating the written-behind raw file"))?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            writer
                .write_all(&buf[..n])
                .map_err(step("writing the written-behind raw file"))?;
            left -= n as u64;
        }
        writer
            .commit()
            .map_err(step("committing the written-behind raw file"))?;
        File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(step("fsync of the written-behind raw file"))?;
        Ok(start.elapsed())
    })();
    let _ = fs::remove_file(&path);
    timed
}

/// Writes `bytes` bytes to `file` with plain `write`s of `buf` (its first
/// bytes for the last one): the raw write every comparison is made against.
pub fn write_plain(file: &mut File, buf: &[u8], bytes: u64) -> Result<()> {
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        file.write_all(&buf[..n])
            .map_err(step("writing the raw file"))?;
        left -= n as u64;
    }
    Ok(())
}

/// Reads `file` to its end with plain `read`s into `buf`; the bytes read.
pub fn read_plain(file: &mut File, buf: &mut [u8]) -> Result<u64> {
    let mut read = 0u64;
    loop {
        let n = file.read(buf).map_err(step("reading a file"))?;
        if n == 0 {
            return Ok(read);
        }
        read += n as u64;
    }
}

/// The bytes of a pages file of the benchmark's BOs, prepared in memory so
/// that a raw write of them ([`raw_layout_write`]) times only the storage:
/// the 8-byte length header, then the data runs of every BO at payload
/// offset `8 + BO offset` (BOs concatenated in order, as a pages file holds
/// them); the zero runs are left out, so they become holes exactly where a
/// pages file has them (every file block that holds no data byte).
#[derive(Debug, Clone)]
pub struct RawLayout {
    /// Logical file length: header plus every BO's bytes.
    len: u64,
    /// `(file offset, bytes)` of the header and the data runs, each at most
    /// 8 MiB, in file order.
    pieces: Vec<(u64, Vec<u8>)>,
}

impl RawLayout {
    /// The layout of `bos` (one file, in the given order) filled as `fill`
    /// says, with the bytes [`Machine::build`](super::Machine::build) puts
    /// into them.
    pub fn new(bos: &[BoPlan], fill: Fill) -> RawLayout {
        let header = amdgpu_image::HEADER_LEN as u64;
        let payload: u64 = bos.iter().map(|b| b.size).sum();
        let mut pieces = vec![(0, payload.to_le_bytes().to_vec())];
        let mut base = header;
        for bo in bos {
            for (start, len) in fill.data_runs(bo.size) {
                let mut offset = start;
                while offset < start + len {
                    let n = (start + len - offset).min(RAW_IO as u64);
                    let mut bytes = vec![0u8; n as usize];
                    bo.contents(&mut bytes, offset, fill);
                    pieces.push((base + offset, bytes));
                    offset += n;
                }
            }
            base += bo.size;
        }
        RawLayout {
            len: header + payload,
            pieces,
        }
    }

    /// Logical length of the file.
    pub fn file_len(&self) -> u64 {
        self.len
    }

    /// Bytes written (header and data runs).
    pub fn written_bytes(&self) -> u64 {
        self.pieces.iter().map(|(_, b)| b.len() as u64).sum()
    }

    /// Writes the layout as `dir`'s pages file through `amdgpu-image`'s
    /// [`DirStore`], as the plugin writes one: each piece written in turn,
    /// the gaps before them skipped (holes), the final length set, the
    /// commit, then `fsync`; returns the time of all of that, file creation
    /// included, and the file's path.
    fn write_behind(&self, dir: &Path) -> Result<(Duration, std::path::PathBuf)> {
        let store = DirStore::open_dir(dir).map_err(step("opening the raw directory"))?;
        let path = dir.join(BEHIND_NAME.to_string());
        let start = Instant::now();
        let mut writer = store
            .create(&BEHIND_NAME)
            .map_err(step("creating the written-behind layout file"))?;
        let mut pos = 0u64;
        for (offset, bytes) in &self.pieces {
            if *offset > pos {
                writer
                    .skip(offset - pos)
                    .map_err(step("skipping a hole of the layout file"))?;
            }
            writer
                .write_all(bytes)
                .map_err(step("writing the written-behind layout file"))?;
            pos = offset + bytes.len() as u64;
        }
        writer
            .set_final_len(self.len)
            .map_err(step("sizing the written-behind layout file"))?;
        writer
            .commit()
            .map_err(step("committing the written-behind layout file"))?;
        File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(step("fsync of the written-behind layout file"))?;
        Ok((start.elapsed(), path))
    }

    /// Creates `path` and writes the layout into it: one `pwrite` per piece,
    /// `ftruncate` to the full length, `fsync`; returns the time of all of
    /// that, file creation included.
    fn write_file(&self, path: &Path) -> Result<Duration> {
        let start = Instant::now();
        let file = File::create(path).map_err(step("creating the raw layout file"))?;
        for (offset, bytes) in &self.pieces {
            file.write_all_at(bytes, *offset)
                .map_err(step("writing the raw layout file"))?;
        }
        file.set_len(self.len)
            .map_err(step("truncating the raw layout file"))?;
        file.sync_all()
            .map_err(step("fsync of the raw layout file"))?;
        Ok(start.elapsed())
    }
}

/// What a raw write of a [`RawLayout`] measured.
#[derive(Debug, Clone, Copy)]
pub struct RawLayoutRun {
    /// The faster of the two ways ([`RawLayoutRun::plain`],
    /// [`RawLayoutRun::behind`]): the storage's best for this layout.
    pub time: Duration,
    /// `pwrite`s, `ftruncate` and `fsync`.
    pub plain: Duration,
    /// Written behind through the directory store, then `fsync`.
    pub behind: Duration,
    /// Logical size of the file.
    pub logical: u64,
    /// Its allocated bytes (`st_blocks × 512`).
    pub allocated: u64,
}

/// Writes `layout` without the plugin both ways, plainly to
/// `dir/raw-layout.bin` (`pwrite`s of the data runs, holes left for the
/// zero runs, `ftruncate`, `fsync`) and written behind through the
/// directory store, the plain write first when `plain_first`, each timed
/// whole: the storage's ceiling for a pages file of those BOs is the
/// faster. Measures the plain file's disk usage and removes both.
pub fn raw_layout_write(layout: &RawLayout, dir: &Path, plain_first: bool) -> Result<RawLayoutRun> {
    let plain_path = dir.join("raw-layout.bin");
    let plain = || {
        let time = layout.write_file(&plain_path);
        let usage = time
            .as_ref()
            .ok()
            .map(|_| disk_usage(std::slice::from_ref(&plain_path)));
        let _ = fs::remove_file(&plain_path);
        Ok::<_, BenchError>((time?, usage.transpose()?))
    };
    let behind = || {
        let run = layout.write_behind(dir);
        if let Ok((_, path)) = &run {
            let _ = fs::remove_file(path);
        }
        run.map(|(time, _)| time)
    };
    let ((plain, usage), behind) = if plain_first {
        let p = plain()?;
        (p, behind()?)
    } else {
        let b = behind()?;
        (plain()?, b)
    };
    let (logical, allocated) = usage.unwrap_or_default();
    Ok(RawLayoutRun {
        time: plain.min(behind),
        plain,
        behind,
        logical,
        allocated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: u64 = 4096;

    /// `(start, end)` of the data extents of `file` (`SEEK_DATA`/`SEEK_HOLE`).
    fn data_extents(file: &File) -> Vec<(u64, u64)> {
        use rustix::fs::{seek, SeekFrom};
        let len = file.metadata().unwrap().len();
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < len {
            let data = match seek(file, SeekFrom::Data(pos)) {
                Ok(data) => data,
                Err(rustix::io::Errno::NXIO) => break,
                Err(e) => panic!("SEEK_DATA: {e}"),
            };
            let hole = seek(file, SeekFrom::Hole(data)).expect("SEEK_HOLE");
            assert!(hole > data, "SEEK_HOLE {hole} not past SEEK_DATA {data}");
            out.push((data, hole));
            pos = hole;
        }
        out
    }

    /// Whether the file system of `dir` reports holes through `SEEK_DATA`.
    fn reports_holes(dir: &Path) -> bool {
        let path = dir.join("probe");
        let file = File::create(&path).unwrap();
        file.write_all_at(&[1], (1 << 20) - 1).unwrap();
        file.sync_all().unwrap();
        let holes = data_extents(&file)
            .first()
            .is_some_and(|&(start, _)| start > 0);
        fs::remove_file(&path).unwrap();
        holes
    }

    #[test]
    fn raw_layout_file_has_the_bytes_and_holes_of_a_pages_file() {
        let dir = tempfile::tempdir().unwrap();
        if !reports_holes(dir.path()) {
            test_env::skip("the file system of the temp dir reports no holes (SEEK_DATA)");
            return;
        }
        // Three BOs, the last one short, so BOs start inside zero and data
        // runs and the 8-byte header shifts every run off the block grid.
        let bo_bytes = (12 << 20) + 3 * BLOCK;
        let bos = BoPlan::spread(1, 2 * bo_bytes + 5 * BLOCK, bo_bytes);
        assert_eq!(bos.len(), 3);
        for fill in [Fill::ZeroRuns, Fill::MostlyZero, Fill::Dense] {
            let layout = RawLayout::new(&bos, fill);
            let payload: u64 = bos.iter().map(|b| b.size).sum();
            assert_eq!(layout.file_len(), 8 + payload);
            // What a pages file of these BOs holds, built BO by BO.
            let mut expected = payload.to_le_bytes().to_vec();
            for bo in &bos {
                let mut bytes = vec![0u8; bo.size as usize];
                bo.contents(&mut bytes, 0, fill);
                expected.extend_from_slice(&bytes);
            }
            let path = dir.path().join("raw");
            layout.write_file(&path).unwrap();
            assert_eq!(fs::read(&path).unwrap(), expected, "{fill:?}: bytes");

            let file = File::open(&path).unwrap();
            let extents = data_extents(&file);
            let blocks = expected.len().div_ceil(BLOCK as usize);
            let mut data_blocks = 0u64;
            for b in 0..blocks {
                let at = b as u64 * BLOCK;
                let end = (b + 1) * BLOCK as usize;
                let has_data = expected[b * BLOCK as usize..end.min(expected.len())]
                    .iter()
                    .any(|&x| x != 0);
                let allocated = extents.iter().any(|&(s, e)| s < at + BLOCK && e > at);
                assert_eq!(allocated, has_data, "{fill:?}: file block {b}");
                data_blocks += u64::from(has_data);
            }
            if fill != Fill::Dense {
                // A run of n data pages touches at most n + 1 file blocks.
                let bound: u64 = bos
                    .iter()
                    .flat_map(|b| fill.data_runs(b.size))
                    .map(|(_, len)| len.div_ceil(BLOCK) + 1)
                    .sum();
                assert!(data_blocks <= bound, "{fill:?}: {data_blocks} > {bound}");
                assert!(data_blocks < blocks as u64 / 4, "{fill:?}: {data_blocks}");
                let (_, disk) = disk_usage(std::slice::from_ref(&path)).unwrap();
                // ext4 counts its extent tree blocks too (340 extents each).
                let meta = 16 + extents.len() as u64 / 100;
                assert!(
                    disk <= (data_blocks + meta) * BLOCK,
                    "{fill:?}: {disk} bytes on disk for {data_blocks} data blocks"
                );
            }
            fs::remove_file(&path).unwrap();

            // Written behind through the directory store: the same bytes,
            // the same holes.
            let (_, behind) = layout.write_behind(dir.path()).unwrap();
            assert_eq!(
                fs::read(&behind).unwrap(),
                expected,
                "{fill:?}: written behind"
            );
            if fill != Fill::Dense {
                let (_, disk) = disk_usage(std::slice::from_ref(&behind)).unwrap();
                let meta = 16 + data_extents(&File::open(&behind).unwrap()).len() as u64 / 100;
                assert!(
                    disk <= (data_blocks + meta) * BLOCK,
                    "{fill:?}: {disk} bytes on disk written behind for {data_blocks} data blocks"
                );
            }
            fs::remove_file(&behind).unwrap();
        }

        // The public entry point measures and cleans up.
        let layout = RawLayout::new(&bos, Fill::ZeroRuns);
        for plain_first in [true, false] {
            let run = raw_layout_write(&layout, dir.path(), plain_first).unwrap();
            assert_eq!(run.logical, layout.file_len());
            assert!(run.allocated < run.logical / 5);
            assert_eq!(run.time, run.plain.min(run.behind));
            assert!(layout.written_bytes() < layout.file_len() / 5);
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }

    #[test]
    fn raw_write_behind_writes_and_removes_its_file() {
        let dir = tempfile::tempdir().unwrap();
        raw_write_behind(dir.path(), 3 * RAW_IO as u64 + 5).unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
